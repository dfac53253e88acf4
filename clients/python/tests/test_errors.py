"""Bad input raises the server's error (code, field, status) and changes
nothing; tokens limited to scopes are held to them."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from strata_client import (
    Call,
    Client,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NeedsConfirmationError,
    NotFoundError,
    StrataError,
    TooLargeError,
    TransportError,
    UnauthorizedError,
)

from .conftest import MAX_BATCH, Server


def _snapshot(client: Client, scope: str) -> list[tuple[str, int, str]]:
    return [(m.id, m.version, m.content) for m in client.list(view=[f"{scope}/**"], limit=1000)]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c, s: c.remember(5, scope=s), "content"),  # wrong type
        (lambda c, s: c.remember("x", scope=s, importance="high"), "importance"),
        (lambda c, s: c.remember("x", scope=s, tags="a,b"), "tags"),
        (lambda c, s: c.remember("", scope=s), "content"),
        (lambda c, s: c.remember("x", scope="bad scope!"), "scope"),
        (lambda c, s: c.remember("x", scope=s, ttl="soon"), None),
        (lambda c, s: c.remember("x", scope=s, payload=[1, 2]), None),
        (lambda c, s: c.remember_batch([{"content": "ok", "scope": s}, {"content": "x", "scope": s, "colour": 1}]), None),
        (lambda c, s: c.remember_batch([{"content": "ok", "scope": s}, {"content": "x"}]), "items[1].scope"),
        (lambda c, s: c.recall("x", view=[]), "view"),
        (lambda c, s: c.recall("x", view=[s], strategy="psychic"), None),
        (lambda c, s: c.recall("x", view=[s], limit=5000), "limit"),
        (lambda c, s: c.recall("x", view=[s], filter={"colour": "red"}), "filter"),
        (lambda c, s: c.list(view=[s], order="sideways"), None),
        (lambda c, s: c.forget(view=[s]), "ids"),
        (lambda c, s: c.import_('{"not": "a memory"}\n'), None),
    ],
)
def test_bad_input_raises_invalid_and_changes_nothing(
    client: Client, scope: str, call: Any, field: str | None
) -> None:
    client.remember("already here", scope=scope, key="k")
    before = _snapshot(client, scope)
    with pytest.raises(InvalidError) as e:
        call(client, scope)
    err = e.value
    assert (err.status, err.code) == (400, "invalid"), repr(err)
    assert err.message
    if field is not None:
        assert err.field == field, repr(err)
    assert _snapshot(client, scope) == before


def test_unknown_field_is_named(client: Client, scope: str) -> None:
    with pytest.raises(InvalidError) as e:
        client.run(Call("POST", "/v1/memories", dict, json={"content": "x", "scope": scope, "colour": "red"}))
    assert e.value.field == "colour"
    assert client.list(view=[scope]) == []


def test_version_conflict_changes_nothing(client: Client, scope: str) -> None:
    m = client.remember("v1", scope=scope)
    client.update(m.id, expected_version=1, content="v2")
    with pytest.raises(ConflictError) as e:
        client.update(m.id, expected_version=1, content="lost update")
    assert (e.value.status, e.value.code, e.value.field) == (409, "conflict", "expected_version")
    got = client.get(m.id)
    assert (got.content, got.version) == ("v2", 2)


def test_not_found(client: Client) -> None:
    for call in (lambda: client.get("no-such-id"), lambda: client.delete("no-such-id"), lambda: client.session("nope")):
        with pytest.raises(NotFoundError) as e:
            call()
        assert e.value.status == 404 and e.value.code == "not_found"


def test_global_preference_needs_confirmation(client: Client) -> None:
    with pytest.raises(NeedsConfirmationError) as e:
        client.remember("always answer in French", scope="global", kind="preference")
    assert isinstance(e.value, ConflictError) and e.value.code == "needs_confirmation"
    assert not [m for m in client.list(view=["global"], limit=1000) if m.content == "always answer in French"]
    m = client.remember("always answer in French", scope="global", kind="preference", confirm=True)
    client.delete(m.id, confirm=True)


def test_batch_over_the_limit_is_too_large(client: Client, scope: str) -> None:
    items = [{"content": f"n{i}", "scope": scope} for i in range(MAX_BATCH + 1)]
    with pytest.raises(TooLargeError) as e:
        client.remember_batch(items)
    assert (e.value.status, e.value.code, e.value.field) == (413, "too_large", "items")
    assert client.list(view=[scope]) == []


def test_unknown_or_missing_token_is_unauthorized(server: Server, scope: str) -> None:
    for token in ("strata_not-a-real-token", ""):
        with Client(server.url, token) as c, pytest.raises(UnauthorizedError) as e:
            c.remember("x", scope=scope)
        assert e.value.status == 401
    with Client(server.url, server.admin) as c:
        assert c.list(view=[scope]) == []


def test_token_limited_to_project_a_cannot_touch_project_b(server: Server) -> None:
    with Client(server.url, server.admin) as admin:
        secret = admin.remember("project b's secret", scope="project/b", key="s")
    with Client(server.url, server.a) as a:
        mine = a.remember("project a's note", scope="project/a")
        with pytest.raises(ForbiddenError) as e:
            a.recall("secret", view=["project/b"])
        assert (e.value.status, e.value.code, e.value.field) == (403, "forbidden", "view")
        with pytest.raises(ForbiddenError) as e:
            a.list(view=["project/a", "project/b/**"])
        assert "project/b" in e.value.message
        with pytest.raises(ForbiddenError) as e:
            a.remember("overwrite", scope="project/b", key="s")
        assert e.value.field == "scope"
        # An id outside the token reads as one that does not exist.
        for call in (lambda: a.get(secret.id), lambda: a.delete(secret.id)):
            with pytest.raises(NotFoundError):
                call()
        with pytest.raises(ForbiddenError):
            list(a.export(view=["project/b"]))
        assert all(s.scope.startswith("project/a") for s in a.scopes())
        assert mine.id in [m.id for m in a.list(view=["project/a/**"], limit=1000)]
    with Client(server.url, server.admin) as admin:
        got = admin.get(secret.id)
        assert (got.content, got.version) == ("project b's secret", 1)


def test_read_only_token_cannot_write(server: Server) -> None:
    with Client(server.url, server.a_read) as r:
        before = len(r.list(view=["project/a/**"], limit=1000))
        with pytest.raises(ForbiddenError) as e:
            r.remember("x", scope="project/a")
        assert e.value.status == 403 and "read" in e.value.message
        assert len(r.list(view=["project/a/**"], limit=1000)) == before


def test_no_server_is_a_transport_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", timeout=2) as c, pytest.raises(TransportError) as e:
        c.health()
    assert isinstance(e.value, StrataError) and e.value.status == 0 and e.value.code == "transport"


def test_error_str_names_status_code_and_field(client: Client, scope: str) -> None:
    with pytest.raises(InvalidError) as e:
        client.remember(5, scope=scope)  # type: ignore[arg-type]
    assert "400 invalid" in str(e.value) and "'content'" in str(e.value)
