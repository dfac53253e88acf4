"""Each API operation as a `Call`: the request to send and how to read the
answer. The sync and async clients (and the LangGraph store) run the same
calls, so both clients take exactly the same arguments.

Arguments are sent as given: the server checks them and answers a bad one
with an error naming the field (raised as `InvalidError`), so nothing is
validated twice or differently here. Arguments left at `None` are not sent
(the server's defaults apply).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Generic, NotRequired, Required, TypedDict, TypeVar, Union
from urllib.parse import quote

from .types import (
    JSON,
    Context,
    ForeignFormat,
    ForeignReport,
    ForgetReport,
    ImportCounts,
    Manifest,
    Memory,
    OnConflict,
    Order,
    Recalled,
    Render,
    ScopeCount,
    Session,
    Stats,
    Strategy,
    TaskReport,
)

T = TypeVar("T")


class Unset:
    """The type of `UNSET`: "leave this field as it is" in `update`, where
    `None` means "clear it"."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset()

Ttl = Union[str, int, float, timedelta]
"""A time to live: `"90s"`, `"15m"`, `"12h"`, `"7d"`, `"2w"`, seconds, or a timedelta."""


class NewMemory(TypedDict, total=False):
    """One item of `remember_batch`: the arguments of `remember`."""

    content: Required[str]
    scope: Required[str]
    kind: NotRequired[str]
    importance: NotRequired[float]
    tags: NotRequired[list[str]]
    key: NotRequired[str]
    payload: NotRequired[JSON]
    role: NotRequired[str]
    source: NotRequired[str]
    session: NotRequired[str]
    pinned: NotRequired[bool]
    sensitive: NotRequired[bool]
    ttl: NotRequired[str]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reader of its JSON answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: tuple[tuple[str, str], ...] = ()
    content: bytes | None = None
    content_type: str | None = None


def ttl_text(ttl: Ttl) -> str:
    """A TTL as the server reads it: whole seconds (`"90s"`) unless already text."""
    if isinstance(ttl, str):
        return ttl
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    whole = int(seconds) if seconds == int(seconds) else int(seconds) + 1
    return f"{whole}s"


def _time_text(t: datetime | str) -> str:
    return t.isoformat() if isinstance(t, datetime) else t


def _seg(s: str) -> str:
    return quote(s, safe="")


def _list(v: Any) -> Any:
    """A sequence as a JSON list; anything else (a string included) as it
    is, for the server to refuse by name."""
    return list(v) if isinstance(v, (list, tuple, set, frozenset)) else v


def _body(**fields: Any) -> JSON:
    """The fields that were given (not None, not False for flags, not UNSET)."""
    return {k: v for k, v in fields.items() if v is not None and v is not False and v is not UNSET}


def health() -> Call[bool]:
    """Whether the server answers `GET /healthz` with `ok`."""
    return Call("GET", "/healthz", lambda d: d.get("status") == "ok")


def remember(
    content: str,
    *,
    scope: str,
    kind: str | None = None,
    importance: float | None = None,
    tags: Sequence[str] | None = None,
    key: str | None = None,
    payload: Mapping[str, Any] | None = None,
    role: str | None = None,
    source: str | None = None,
    session: str | None = None,
    pinned: bool = False,
    sensitive: bool = False,
    ttl: Ttl | None = None,
    confirm: bool = False,
) -> Call[Memory]:
    """Store one memory in `scope`; writing the same (`scope`, `key`) again
    supersedes the earlier value (same id, next version)."""
    body = _body(
        content=content,
        scope=scope,
        kind=kind,
        importance=importance,
        tags=_list(tags),
        key=key,
        payload=dict(payload) if isinstance(payload, Mapping) else payload,
        role=role,
        source=source,
        session=session,
        pinned=pinned,
        sensitive=sensitive,
        ttl=ttl_text(ttl) if ttl is not None else None,
        confirm=confirm,
    )
    return Call("POST", "/v1/memories", Memory.from_json, json=body)


def remember_batch(items: Iterable[NewMemory | Mapping[str, Any]], *, confirm: bool = False) -> Call[list[Memory]]:
    """Store many memories in one transaction (all or none), in order."""
    out = []
    for item in items:
        d = dict(item)
        if d.get("ttl") is not None:
            d["ttl"] = ttl_text(d["ttl"])
        out.append(d)
    return Call(
        "POST",
        "/v1/memories/batch",
        lambda d: [Memory.from_json(m) for m in d["memories"]],
        json=_body(items=out, confirm=confirm),
    )


def recall(
    query: str = "",
    *,
    view: Sequence[str],
    filter: Mapping[str, Any] | None = None,
    strategy: Strategy | None = None,
    limit: int | None = None,
    explain: bool = False,
    touch: bool | None = None,
    archived: bool = False,
    min_relevance: float | None = None,
) -> Call[list[Recalled]]:
    """Ranked memories for `query` within `view` (`project/acme`,
    `project/acme/**` for a subtree, `global`), best first. With a query,
    only memories whose text match or similarity reaches `min_relevance`
    come back (the server's `ranking.min_relevance` by default; 0 returns
    every match), so an empty list means nothing relevant."""
    body = _body(
        query=query,
        view=_list(view),
        filter=filter,
        strategy=strategy,
        limit=limit,
        explain=explain,
        touch=touch,
        archived=archived,
        min_relevance=min_relevance,
    )
    return Call("POST", "/v1/recall", lambda d: [Recalled.from_json(r) for r in d["results"]], json=body)


def list_memories(
    *,
    view: Sequence[str],
    filter: Mapping[str, Any] | None = None,
    order: Order | None = None,
    limit: int | None = None,
    offset: int | None = None,
    archived: bool = False,
) -> Call[list[Memory]]:
    """Memories of `view`, filtered and ordered (`recency` by default), or the archive's."""
    body = _body(view=_list(view), filter=filter, order=order, limit=limit, offset=offset, archived=archived)
    return Call("POST", "/v1/list", lambda d: [Memory.from_json(m) for m in d["memories"]], json=body)


def get(id: str, *, history: bool = False) -> Call[Memory]:
    """One memory (active or archived); `history=True` adds its earlier versions."""
    params = (("history", "true"),) if history else ()
    return Call("GET", f"/v1/memories/{_seg(id)}", Memory.from_json, params=params)


def update(
    id: str,
    *,
    expected_version: int,
    content: str | None = None,
    payload: Mapping[str, Any] | None | Unset = UNSET,
    tags: Sequence[str] | None = None,
    importance: float | None = None,
    kind: str | None = None,
    key: str | None | Unset = UNSET,
    pinned: bool | None = None,
    sensitive: bool | None = None,
    expires_at: datetime | str | None | Unset = UNSET,
) -> Call[Memory]:
    """Change a memory if its version is still `expected_version` (else
    `ConflictError`). `payload`, `key` and `expires_at` are cleared by
    `None` and left alone when not given."""
    body: JSON = {"expected_version": expected_version}
    for name, value in (("content", content), ("importance", importance), ("kind", kind), ("pinned", pinned), ("sensitive", sensitive)):
        if value is not None:
            body[name] = value
    if tags is not None:
        body["tags"] = _list(tags)
    if not isinstance(payload, Unset):
        body["payload"] = dict(payload) if isinstance(payload, Mapping) else payload
    if not isinstance(key, Unset):
        body["key"] = key
    if not isinstance(expires_at, Unset):
        body["expires_at"] = None if expires_at is None else _time_text(expires_at)
    return Call("PATCH", f"/v1/memories/{_seg(id)}", Memory.from_json, json=body)


def delete(id: str, *, confirm: bool = False) -> Call[ForgetReport]:
    """Delete one memory everywhere (row, index, archive, history)."""
    params = (("confirm", "true"),) if confirm else ()
    return Call("DELETE", f"/v1/memories/{_seg(id)}", ForgetReport.from_json, params=params)


def forget(
    *,
    ids: Sequence[str] | None = None,
    view: Sequence[str] | None = None,
    filter: Mapping[str, Any] | None = None,
    session: str | None = None,
    scope: str | None = None,
    before: datetime | str | None = None,
    force: bool = False,
    dry_run: bool = False,
    confirm: bool = False,
) -> Call[ForgetReport]:
    """Delete a selection everywhere: exactly one of `ids`, `filter` (with
    `view`), `session`, `scope`, `before` (with `view`)."""
    body = _body(
        ids=_list(ids),
        view=_list(view),
        filter=filter,
        session=session,
        scope=scope,
        before=_time_text(before) if before is not None else None,
        force=force,
        dry_run=dry_run,
        confirm=confirm,
    )
    return Call("POST", "/v1/forget", ForgetReport.from_json, json=body)


def promote(id: str, to: str, *, confirm: bool = False) -> Call[Memory]:
    """Copy a memory into scope `to` (new id, provenance kept)."""
    return Call("POST", "/v1/promote", Memory.from_json, json=_body(id=id, to=to, confirm=confirm))


def restore(ids: Sequence[str]) -> Call[int]:
    """Move archived memories back into active memory; how many moved."""
    return Call("POST", "/v1/restore", lambda d: int(d["restored"]), json={"ids": _list(ids)})


def complete_task(
    task: str,
    *,
    project: str,
    promote: Sequence[str] = (),
    min_importance: float | None = None,
) -> Call[TaskReport]:
    """Complete `task/<task>`: promote what should survive into `project/<project>`, archive the rest."""
    body = _body(project=project, promote=_list(promote), min_importance=min_importance)
    return Call("POST", f"/v1/tasks/{_seg(task)}/complete", TaskReport.from_json, json=body)


def context(
    *,
    profile: str | None = None,
    query: str | None = None,
    task: str | None = None,
    project: str | None = None,
    sprint: str | None = None,
    stage: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    vars: Mapping[str, str] | None = None,
    render: Render | None = None,
    max_tokens: int | None = None,
    log: bool = False,
) -> Call[Context]:
    """The context for a task within a token budget: the package and its rendering (`text`)."""
    body = _body(
        profile=profile,
        query=query,
        task=task,
        project=project,
        sprint=sprint,
        stage=stage,
        agent=agent,
        session=session,
        vars=dict(vars) if vars is not None else None,
        render=render,
        max_tokens=max_tokens,
        log=log,
    )
    return Call("POST", "/v1/context", Context.from_json, json=body)


def sessions() -> Call[list[Session]]:
    """Sessions inside the caller's scopes."""
    return Call("GET", "/v1/sessions", lambda d: [Session.from_json(s) for s in d["sessions"]])


def create_session(
    *, id: str | None = None, scope: str | None = None, max_bytes: int | None = None, ephemeral: bool = False
) -> Call[Session]:
    """Create a session (a fresh id unless given; scope `session/<id>` unless given).

    `ephemeral=True`: its memories live only in the server's memory (its last
    `hot.turns`), never in the store or any file, and vanish when the session
    is archived or the server stops."""
    body = _body(id=id, scope=scope, max_bytes=max_bytes, ephemeral=True if ephemeral else None)
    return Call("POST", "/v1/sessions", Session.from_json, json=body)


def session_turns(id: str, *, limit: int = 20) -> Call[list[Memory]]:
    """A session's last `limit` memories, oldest first (from the server's hot tier)."""
    return Call(
        "GET",
        f"/v1/sessions/{_seg(id)}/turns",
        lambda d: [Memory.from_json(m) for m in d["memories"]],
        params=(("limit", str(limit)),),
    )


def session(id: str) -> Call[Manifest]:
    """A session with counts of what it holds."""
    return Call("GET", f"/v1/sessions/{_seg(id)}", Manifest.from_json)


def archive_session(id: str) -> Call[Session]:
    """Archive a session: no more writes, its memories move to the archive."""
    return Call("POST", f"/v1/sessions/{_seg(id)}/archive", Session.from_json)


def scopes() -> Call[list[ScopeCount]]:
    """Scopes in use inside the caller's scopes, with counts."""
    return Call("GET", "/v1/scopes", lambda d: [ScopeCount.from_json(s) for s in d["scopes"]])


def stats() -> Call[Stats]:
    """Counts inside the caller's scopes (store-wide figures for an unrestricted caller)."""
    return Call("GET", "/v1/stats", Stats.from_json)


def import_(
    lines: bytes | str | Iterable[Mapping[str, Any] | str],
    *,
    on_conflict: OnConflict | None = None,
) -> Call[ImportCounts]:
    """Read JSONL (as `export` writes it) into the store: every line is
    checked first, and a bad one imports nothing. `lines` is the JSONL text,
    or its lines as objects or strings."""
    if isinstance(lines, bytes):
        data = lines
    elif isinstance(lines, str):
        data = lines.encode()
    else:
        data = "".join(
            (line if isinstance(line, str) else json.dumps(dict(line), separators=(",", ":"))).rstrip("\n") + "\n"
            for line in lines
        ).encode()
    params: tuple[tuple[str, str], ...] = (("on_conflict", on_conflict),) if on_conflict is not None else ()
    return Call(
        "POST",
        "/v1/import",
        ImportCounts.from_json,
        params=params,
        content=data,
        content_type="application/x-ndjson",
    )


def import_from(
    from_: ForeignFormat,
    path: str | os.PathLike[str] | None = None,
    *,
    text: str | None = None,
    name: str | None = None,
    scope: str | None = None,
    dry_run: bool = False,
) -> Call[ForeignReport]:
    """Import another memory tool's export: `from_` is `mcp-memory`,
    `chatgpt`, `claude`, `mem0` (one file) or `markdown` (a folder of
    notes). `path` is read here and its text (or, for a folder, each file's
    path, text and modification time) sent; or give the file's `text`.
    Importing the same input twice adds nothing; `dry_run` reports without
    writing."""
    body: dict[str, Any] = {"from": from_, "dry_run": dry_run}
    if scope is not None:
        body["scope"] = scope
    if path is not None and os.path.isdir(path):
        root = os.fspath(path)
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            for n in sorted(names):
                if n.startswith("."):
                    continue
                full = os.path.join(d, n)
                if os.path.islink(full):
                    continue
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                content = ""
                if n.lower().endswith((".md", ".markdown")):
                    with open(full, encoding="utf-8") as f:
                        content = f.read()
                modified = datetime.fromtimestamp(os.path.getmtime(full)).astimezone().isoformat()
                files.append({"path": rel, "text": content, "modified": modified})
        body["files"] = files
        body["name"] = name if name is not None else os.path.basename(os.path.abspath(root))
    else:
        if path is not None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if name is None:
                name = os.path.basename(os.fspath(path))
        if text is not None:
            body["text"] = text
        if name is not None:
            body["name"] = name
    return Call("POST", "/v1/import/foreign", ForeignReport.from_json, json=body)


def export_params(
    *,
    view: Sequence[str] = (),
    session: str | None = None,
    sensitive: bool = True,
    archived: bool = True,
    history: bool = True,
) -> tuple[tuple[str, str], ...]:
    """The query of `GET /v1/export` (the server's default is a full
    backup; only the parts left out are named)."""
    params = [("view", v) for v in ([view] if isinstance(view, str) else view)]
    if session is not None:
        params.append(("session", session))
    for name, keep in (("sensitive", sensitive), ("archived", archived), ("history", history)):
        if not keep:
            params.append((name, "false"))
    return tuple(params)
