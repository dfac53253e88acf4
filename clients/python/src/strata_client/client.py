"""`Client` (sync) and `AsyncClient` over strata's HTTP API (`strata serve`).

Both take the same arguments and return the same types; each method is one
request (see `_calls` for what it sends). The base URL comes from the
argument, else `STRATA_URL`, else `http://127.0.0.1:7077`; the token from
the argument, else `STRATA_TOKEN` (none for a server run with `--no-auth`).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx

from . import _calls
from ._calls import Call
from .errors import StrataError, TransportError, error_from
from .types import JSON

DEFAULT_URL = "http://127.0.0.1:7077"

P = ParamSpec("P")
T = TypeVar("T")


def _settings(url: str | None, token: str | None, headers: Mapping[str, str] | None) -> tuple[str, dict[str, str]]:
    base = (url or os.environ.get("STRATA_URL") or DEFAULT_URL).rstrip("/")
    token = os.environ.get("STRATA_TOKEN") if token is None else token
    h = {"accept": "application/json", "user-agent": "strata-memory-python"}
    if token:
        h["authorization"] = f"Bearer {token}"
    h.update(headers or {})
    return base, h


def _request_args(call: Call[Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"params": call.params}
    if call.content is not None:
        args["content"] = call.content
        args["headers"] = {"content-type": call.content_type or "application/octet-stream"}
    elif call.json is not None:
        args["json"] = call.json
    return args


def _error(r: httpx.Response) -> StrataError:
    try:
        body = r.json()
    except ValueError:
        body = None
    return error_from(r.status_code, body, r.text)


def _finish(call: Call[T], r: httpx.Response) -> T:
    if r.status_code >= 400:
        raise _error(r)
    return call.parse(r.json())


def _transport(e: httpx.TransportError) -> TransportError:
    return TransportError(0, "transport", f"{type(e).__name__}: {e}")


def _sync(build: Callable[P, Call[T]]) -> Callable[Concatenate[Client, P], T]:
    @functools.wraps(build)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(build(*args, **kwargs))

    return method


def _async(build: Callable[P, Call[T]]) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    @functools.wraps(build)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run(build(*args, **kwargs))

    return method


class Client:
    """A synchronous client. Use it as a context manager, or call `close()`.

    >>> with Client("http://127.0.0.1:7077", token="strata_…") as c:
    ...     m = c.remember("We use PostgreSQL 16", scope="project/acme", kind="decision")
    ...     hits = c.recall("which database?", view=["project/acme"])
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url, h = _settings(url, token, headers)
        self._http = httpx.Client(base_url=self.url, headers=h, timeout=timeout, transport=transport)

    def run(self, call: Call[T]) -> T:
        """Send one call and read its answer (errors raise `StrataError`)."""
        try:
            r = self._http.request(call.method, call.path, **_request_args(call))
        except httpx.TransportError as e:
            raise _transport(e) from e
        return _finish(call, r)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def export(
        self,
        *,
        view: Sequence[str] = (),
        session: str | None = None,
        sensitive: bool = True,
        archived: bool = True,
        history: bool = True,
    ) -> Iterator[JSON]:
        """Memories as JSON objects, one per JSONL line, streamed as the
        server writes them (the request starts at the first `next`). A token
        limited to scopes must name a `view`. By default a full backup:
        `sensitive`, `archived` or `history` set to False leaves that part
        out."""
        params = _calls.export_params(
            view=view, session=session, sensitive=sensitive, archived=archived, history=history
        )
        try:
            with self._http.stream("GET", "/v1/export", params=params) as r:
                if r.status_code >= 400:
                    r.read()
                    raise _error(r)
                for line in r.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as e:
            raise _transport(e) from e

    health = _sync(_calls.health)
    remember = _sync(_calls.remember)
    remember_batch = _sync(_calls.remember_batch)
    recall = _sync(_calls.recall)
    get = _sync(_calls.get)
    update = _sync(_calls.update)
    delete = _sync(_calls.delete)
    forget = _sync(_calls.forget)
    promote = _sync(_calls.promote)
    restore = _sync(_calls.restore)
    complete_task = _sync(_calls.complete_task)
    context = _sync(_calls.context)
    sessions = _sync(_calls.sessions)
    create_session = _sync(_calls.create_session)
    session_turns = _sync(_calls.session_turns)
    session = _sync(_calls.session)
    archive_session = _sync(_calls.archive_session)
    scopes = _sync(_calls.scopes)
    stats = _sync(_calls.stats)
    import_ = _sync(_calls.import_)
    import_from = _sync(_calls.import_from)
    # Last: inside the class body, `list` names this method from here on.
    list = _sync(_calls.list_memories)


class AsyncClient:
    """An asynchronous client: the same methods as `Client`, awaited.

    >>> async with AsyncClient() as c:
    ...     hits = await c.recall("which database?", view=["project/acme"])
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url, h = _settings(url, token, headers)
        self._http = httpx.AsyncClient(base_url=self.url, headers=h, timeout=timeout, transport=transport)

    async def run(self, call: Call[T]) -> T:
        """Send one call and read its answer (errors raise `StrataError`)."""
        try:
            r = await self._http.request(call.method, call.path, **_request_args(call))
        except httpx.TransportError as e:
            raise _transport(e) from e
        return _finish(call, r)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def export(
        self,
        *,
        view: Sequence[str] = (),
        session: str | None = None,
        sensitive: bool = True,
        archived: bool = True,
        history: bool = True,
    ) -> AsyncIterator[JSON]:
        """`Client.export`, as an async iterator."""
        params = _calls.export_params(
            view=view, session=session, sensitive=sensitive, archived=archived, history=history
        )
        try:
            async with self._http.stream("GET", "/v1/export", params=params) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise _error(r)
                async for line in r.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as e:
            raise _transport(e) from e

    health = _async(_calls.health)
    remember = _async(_calls.remember)
    remember_batch = _async(_calls.remember_batch)
    recall = _async(_calls.recall)
    get = _async(_calls.get)
    update = _async(_calls.update)
    delete = _async(_calls.delete)
    forget = _async(_calls.forget)
    promote = _async(_calls.promote)
    restore = _async(_calls.restore)
    complete_task = _async(_calls.complete_task)
    context = _async(_calls.context)
    sessions = _async(_calls.sessions)
    create_session = _async(_calls.create_session)
    session_turns = _async(_calls.session_turns)
    session = _async(_calls.session)
    archive_session = _async(_calls.archive_session)
    scopes = _async(_calls.scopes)
    stats = _async(_calls.stats)
    import_ = _async(_calls.import_)
    import_from = _async(_calls.import_from)
    list = _async(_calls.list_memories)
