"""The answers of the strata HTTP API as typed dataclasses.

Each mirrors a schema of the server's OpenAPI document (`GET /openapi.json`).
Fields the server adds later are ignored, so an older client keeps working
against a newer server. Times are timezone-aware `datetime`s (UTC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Mapping

JSON = dict[str, Any]
"""A JSON object as `json.loads` gives it."""

Strategy = Literal["hybrid", "relevance", "recency", "importance"]
Order = Literal["recency", "oldest", "importance"]
Render = Literal["markdown", "messages", "json"]
OnConflict = Literal["error", "skip", "replace"]
ForeignFormat = Literal["mcp-memory", "chatgpt", "claude", "markdown", "mem0"]

_FRACTION = re.compile(r"\.(\d+)")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time as the server writes it (`2026-11-23T15:04:18.48Z`)."""
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    # Nanoseconds would be more digits than `datetime` takes.
    t = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], t, count=1)
    return datetime.fromisoformat(t)


def _opt_time(v: Any) -> datetime | None:
    return None if v is None else parse_time(v)


@dataclass(frozen=True)
class ArchiveMark:
    """When and why a memory was archived."""

    at: datetime
    reason: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ArchiveMark:
        return cls(at=parse_time(d["at"]), reason=d["reason"])


@dataclass(frozen=True)
class Provenance:
    """Where a memory was copied from (promotion, task completion)."""

    from_id: str
    from_scope: str
    at: datetime

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Provenance:
        return cls(from_id=d["from_id"], from_scope=d["from_scope"], at=parse_time(d["at"]))


@dataclass(frozen=True)
class Memory:
    """One stored memory.

    `archived` is set when it was read from the archive; `history` (earlier
    versions, oldest first) only from `get(..., history=True)`.
    """

    id: str
    scope: str
    kind: str
    content: str
    importance: float
    source: str
    created_at: datetime
    updated_at: datetime
    tokens: int
    checksum: str
    version: int
    key: str | None = None
    payload: JSON | None = None
    tags: list[str] = field(default_factory=list)
    role: str | None = None
    session: str | None = None
    access_count: int = 0
    last_accessed_at: datetime | None = None
    expires_at: datetime | None = None
    pinned: bool = False
    sensitive: bool = False
    provenance: Provenance | None = None
    archived: ArchiveMark | None = None
    history: list[Memory] | None = None

    @staticmethod
    def _fields(d: Mapping[str, Any]) -> dict[str, Any]:
        return dict(
            id=d["id"],
            scope=d["scope"],
            kind=d["kind"],
            content=d["content"],
            importance=float(d["importance"]),
            source=d["source"],
            created_at=parse_time(d["created_at"]),
            updated_at=parse_time(d["updated_at"]),
            tokens=int(d["tokens"]),
            checksum=d["checksum"],
            version=int(d["version"]),
            key=d.get("key"),
            payload=d.get("payload"),
            tags=list(d.get("tags") or []),
            role=d.get("role"),
            session=d.get("session"),
            access_count=int(d.get("access_count") or 0),
            last_accessed_at=_opt_time(d.get("last_accessed_at")),
            expires_at=_opt_time(d.get("expires_at")),
            pinned=bool(d.get("pinned", False)),
            sensitive=bool(d.get("sensitive", False)),
            provenance=Provenance.from_json(d["provenance"]) if d.get("provenance") else None,
            archived=ArchiveMark.from_json(d["archived"]) if d.get("archived") else None,
            history=[Memory.from_json(h) for h in d["history"]] if d.get("history") is not None else None,
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Memory:
        return cls(**cls._fields(d))


@dataclass(frozen=True)
class ScoreParts:
    """The parts of a recall score (`explain=True`)."""

    total: float
    relevance: float
    importance: float
    kind_weight: float
    decay: float
    access_factor: float
    effective_importance: float
    recency: float
    bm25: float | None = None
    bm25_rank: int | None = None
    similarity: float | None = None
    vector_rank: int | None = None
    # The relevance of its best session neighbour, when it got a share.
    neighbour: float | None = None
    # The best relevance among the other memories of its session, when it
    # got a share.
    session_best: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScoreParts:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Recalled(Memory):
    """One recall result: a memory with the score it was ranked by."""

    score: float = 0.0
    explain: ScoreParts | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Recalled:
        return cls(
            **Memory._fields(d),
            score=float(d["score"]),
            explain=ScoreParts.from_json(d["explain"]) if d.get("explain") else None,
        )


@dataclass(frozen=True)
class ForgetReport:
    """What a forget did (or would do, under `dry_run`)."""

    deleted: int
    pinned_kept: int
    ids: list[str]
    dry_run: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ForgetReport:
        return cls(
            deleted=int(d["deleted"]),
            pinned_kept=int(d["pinned_kept"]),
            ids=list(d["ids"]),
            dry_run=bool(d["dry_run"]),
        )


@dataclass(frozen=True)
class Session:
    """A conversation or work session: a size-bounded group of memories."""

    id: str
    scope: str
    created_at: datetime
    last_activity_at: datetime | None
    max_bytes: int
    bytes: int
    archived_at: datetime | None = None
    #: Held only in the server's hot tier: never stored, gone when it stops.
    ephemeral: bool = False

    @staticmethod
    def _fields(d: Mapping[str, Any]) -> dict[str, Any]:
        return dict(
            id=d["id"],
            scope=d["scope"],
            created_at=parse_time(d["created_at"]),
            last_activity_at=_opt_time(d.get("last_activity_at")),
            max_bytes=int(d["max_bytes"]),
            bytes=int(d["bytes"]),
            archived_at=_opt_time(d.get("archived_at")),
            ephemeral=bool(d.get("ephemeral", False)),
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Session:
        return cls(**cls._fields(d))


@dataclass(frozen=True)
class Manifest(Session):
    """A session with counts of what it holds."""

    memories: int = 0
    archived: int = 0
    tokens: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    by_role: dict[str, int] = field(default_factory=dict)
    first_activity_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Manifest:
        return cls(
            **Session._fields(d),
            memories=int(d["memories"]),
            archived=int(d["archived"]),
            tokens=int(d["tokens"]),
            by_kind=dict(d.get("by_kind") or {}),
            by_role=dict(d.get("by_role") or {}),
            first_activity_at=_opt_time(d.get("first_activity_at")),
        )


@dataclass(frozen=True)
class ScopeCount:
    """Memories in one scope."""

    scope: str
    memories: int
    archived: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScopeCount:
        return cls(scope=d["scope"], memories=int(d["memories"]), archived=int(d["archived"]))


@dataclass(frozen=True)
class ImportCounts:
    """What an import did."""

    imported: int
    archived: int
    skipped: int
    replaced: int
    history: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ImportCounts:
        return cls(**{k: int(d[k]) for k in ("imported", "archived", "skipped", "replaced", "history")})


@dataclass(frozen=True)
class ForeignReport:
    """What an import from another tool did (or would do, under `dry_run`):
    memories added, entries already there, entries skipped with why
    (`{"entry", "reason"}`), sessions made, and the scopes written."""

    format: str
    added: int
    unchanged: int
    skipped: list[dict[str, str]]
    sessions: int
    scopes: list[str]
    dry_run: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ForeignReport:
        return cls(
            format=str(d["format"]),
            added=int(d["added"]),
            unchanged=int(d["unchanged"]),
            skipped=[{"entry": str(x["entry"]), "reason": str(x["reason"])} for x in d["skipped"]],
            sessions=int(d["sessions"]),
            scopes=[str(x) for x in d["scopes"]],
            dry_run=bool(d["dry_run"]),
        )


@dataclass(frozen=True)
class Stats:
    """Counts inside the caller's scopes; `store` and `vectors` (store-wide
    figures) only for a caller that sees every scope."""

    scopes: int
    memories: int
    archived: int
    store: JSON | None = None
    vectors: JSON | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Stats:
        return cls(
            scopes=int(d["scopes"]),
            memories=int(d["memories"]),
            archived=int(d["archived"]),
            store=d.get("store"),
            vectors=d.get("vectors"),
        )


@dataclass(frozen=True)
class ContextItem:
    """One memory in a context package."""

    id: str
    version: int
    scope: str
    tier: str
    kind: str
    created_at: datetime
    source: int
    why: str
    score: float
    tokens: int
    content: str
    key: str | None = None
    role: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ContextItem:
        return cls(
            id=d["id"],
            version=int(d["version"]),
            scope=d["scope"],
            tier=d["tier"],
            kind=d["kind"],
            created_at=parse_time(d["created_at"]),
            source=int(d["source"]),
            why=d["why"],
            score=float(d["score"]),
            tokens=int(d["tokens"]),
            content=d["content"],
            key=d.get("key"),
            role=d.get("role"),
        )


@dataclass(frozen=True)
class Context:
    """A context package and its rendering for a model (`text`).

    `per_source` and `summary` are kept as the server's JSON objects."""

    id: str
    profile: str
    render: str
    max_tokens: int
    total_tokens: int
    available_tokens: int
    compression_ratio: float
    dropped: int
    items: list[ContextItem]
    per_source: list[JSON]
    text: str
    summary: JSON | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Context:
        return cls(
            id=d["id"],
            profile=d["profile"],
            render=d["render"],
            max_tokens=int(d["max_tokens"]),
            total_tokens=int(d["total_tokens"]),
            available_tokens=int(d["available_tokens"]),
            compression_ratio=float(d["compression_ratio"]),
            dropped=int(d["dropped"]),
            items=[ContextItem.from_json(i) for i in d["items"]],
            per_source=list(d["per_source"]),
            text=d["text"],
            summary=d.get("summary"),
        )


@dataclass(frozen=True)
class TaskReport:
    """What completing a task did: `(old id, new id)` of each promoted memory."""

    task: str
    project: str
    promoted: list[tuple[str, str]]
    archived: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskReport:
        return cls(
            task=d["task"],
            project=d["project"],
            promoted=[(a, b) for a, b in d["promoted"]],
            archived=int(d["archived"]),
        )
