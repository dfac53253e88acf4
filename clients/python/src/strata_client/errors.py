"""Exceptions: every error answer of the server becomes a `StrataError`
carrying its HTTP `status` and the body's `code`, `message` and `field`
(`{"error": {"code", "message", "field"}}`).

The class is chosen by `code` (then by status, for codes this client does
not know), so `except NotFoundError` catches a missing memory and a memory
outside the token alike, as the server means it to.
"""

from __future__ import annotations

from typing import Any


class StrataError(Exception):
    """An error answer from the server (or, as `TransportError`, no answer)."""

    status: int
    code: str
    message: str
    field: str | None

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def __str__(self) -> str:
        where = f", field {self.field!r}" if self.field else ""
        return f"{self.message} ({self.status} {self.code}{where})"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, code={self.code!r}, "
            f"message={self.message!r}, field={self.field!r})"
        )


class InvalidError(StrataError):
    """400 `invalid`: a field is malformed, of the wrong type, unknown, or over a read limit."""


class UnauthorizedError(StrataError):
    """401 `unauthorized`: no token, or one the server does not know."""


class ForbiddenError(StrataError):
    """403 `forbidden`: outside the token's scopes, a read-only token writing, or a refused host."""


class NotFoundError(StrataError):
    """404 `not_found`: no such memory, session or route (or one outside the token)."""


class ConflictError(StrataError):
    """409 `conflict`: e.g. `expected_version` is not the memory's current version."""


class NeedsConfirmationError(ConflictError):
    """409 `needs_confirmation`: a high-risk change; send it again with `confirm=True`."""


class TooLargeError(StrataError):
    """413 `too_large`: a body, batch or item over the server's limits."""


class UnsupportedMediaTypeError(StrataError):
    """415 `unsupported_media_type`: the body's `Content-Type` is not accepted."""


class RequestTimeoutError(StrataError):
    """408 `timeout`: the request body did not arrive in time."""


class ServerError(StrataError):
    """5xx (`storage`, `internal`): the server failed."""


class TransportError(StrataError):
    """No answer: the connection failed or timed out (`status` 0, `code` `transport`)."""


_BY_CODE: dict[str, type[StrataError]] = {
    "invalid": InvalidError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "needs_confirmation": NeedsConfirmationError,
    "too_large": TooLargeError,
    "unsupported_media_type": UnsupportedMediaTypeError,
    "timeout": RequestTimeoutError,
}

_BY_STATUS: dict[int, type[StrataError]] = {
    400: InvalidError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    408: RequestTimeoutError,
    409: ConflictError,
    413: TooLargeError,
    415: UnsupportedMediaTypeError,
}


def error_from(status: int, body: Any, text: str = "") -> StrataError:
    """The exception for an error answer: `body` is its parsed JSON (or None)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict):
        code = str(detail.get("code") or "")
        message = str(detail.get("message") or "")
        field = detail.get("field")
    else:
        code, message, field = "", text.strip() or f"HTTP {status}", None
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (ServerError if status >= 500 else StrataError)
    return cls(status, code or f"http_{status}", message, field if isinstance(field, str) else None)
