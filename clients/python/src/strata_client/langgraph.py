"""A LangGraph store (`langgraph.store.base.BaseStore`) over strata.

Mapping (see the README for the whole story):

- **namespace ↔ scope**: `("users", "123")` is the scope `users/123`, or
  `<root>/users/123` when the store has a `root` (e.g. `project/acme`).
  Labels keep `A-Z a-z 0-9 _ -`; any other character is written as `.XX`
  per UTF-8 byte (LangGraph labels never contain `.`, so this reads back
  exactly): `("user:7",)` is the scope `user.3A7`.
- **key ↔ key**: the item's key is the memory's per-scope `key`, so a put
  supersedes the earlier value in place (same id, next version,
  `created_at` kept).
- **value ↔ payload**: the value is the memory's JSON payload; the memory's
  `content` (what strata searches and ranks) is the text at the item's
  index fields (`index=[...]`, else the store's `index["fields"]`, else
  `"$"`, the whole value as JSON). `index=False` stores content with no
  words, so queries never match it (it still appears in filtered and
  query-less searches).
- Every item is tagged `langgraph`; the store reads only memories so tagged.
- **ttl** (minutes) becomes the memory's expiry; strata hides expired
  memories from every read. Reads refresh it (`refresh_ttl`), by moving the
  expiry when it would move by more than 1% of the TTL.

Searches without a query list the namespace prefix oldest first (as
`InMemoryStore` iterates); with a query, strata's recall ranks what the
query matches (BM25, and vectors when the server has an embedding model),
each with its `score`, and the rest of the prefix follows unscored, as
`InMemoryStore` does for items it has no vector for.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
)

from . import _calls
from ._calls import Call
from .client import AsyncClient, Client
from .errors import ConflictError, NotFoundError
from .types import Memory

__all__ = ["StrataStore", "label_to_segment", "namespace_to_scope", "scope_to_namespace", "segment_to_label"]

TAG = "langgraph"
"""The tag on every memory the store writes; it reads only these."""
TTL_TAG = "langgraph-ttl="
"""Prefix of the tag that keeps an item's TTL (`langgraph-ttl=90s`), for refreshes."""
NO_WORDS = "-"
"""Content of an item stored with `index=False`: nothing a query can match."""

_MAX_SEGMENT = 64
_MAX_DEPTH = 16
_PAGE = 1000
_KEEP = re.compile(r"[A-Za-z0-9_-]")
_ESCAPE = re.compile(r"\.([0-9A-F]{2})")
_PAYLOAD_PATH = re.compile(r"^[A-Za-z0-9_-]+$")
_OPS = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"}

T = TypeVar("T")
Plan = Generator[Call[Any], Any, T]


def label_to_segment(label: str) -> str:
    """One namespace label as a scope segment (see the module's mapping)."""
    out = []
    for ch in label:
        if _KEEP.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f".{b:02X}" for b in ch.encode())
    seg = "".join(out)
    if len(seg) > _MAX_SEGMENT:
        raise InvalidNamespaceError(
            f"namespace label {label!r} is {len(seg)} bytes as a scope segment ({seg!r}); "
            f"strata takes at most {_MAX_SEGMENT}"
        )
    return seg


def segment_to_label(seg: str) -> str:
    """A scope segment as a namespace label (`.XX` escapes decoded)."""
    out = bytearray()
    i = 0
    while i < len(seg):
        m = _ESCAPE.match(seg, i)
        if m:
            out.append(int(m.group(1), 16))
            i = m.end()
        else:
            out += seg[i].encode()
            i += 1
    return out.decode("utf-8", errors="replace")


def _check_labels(namespace: tuple[str, ...]) -> None:
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"namespace label {label!r} in {namespace} is a {type(label).__name__}, not a string"
            )
        if not label:
            raise InvalidNamespaceError(f"empty namespace label in {namespace}")
        if "." in label or "\x00" in label:
            raise InvalidNamespaceError(f"namespace label {label!r} in {namespace} contains '.' or NUL")


def namespace_to_scope(namespace: tuple[str, ...], root: str | None = None) -> str:
    """The scope of a namespace: `("users", "123")` → `users/123` (or `<root>/users/123`)."""
    _check_labels(namespace)
    segments = ([root] if root else []) + [label_to_segment(label) for label in namespace]
    if not segments:
        raise InvalidNamespaceError("the empty namespace has no scope (give the store a root, or name a namespace)")
    scope = "/".join(segments)
    if scope.count("/") + 1 > _MAX_DEPTH:
        raise InvalidNamespaceError(f"namespace {namespace} is deeper than strata's {_MAX_DEPTH} scope segments")
    return scope


def scope_to_namespace(scope: str, root: str | None = None) -> tuple[str, ...] | None:
    """The namespace of a scope, or None for a scope outside the root."""
    if root:
        if scope == root:
            return ()
        if not scope.startswith(root + "/"):
            return None
        scope = scope[len(root) + 1 :]
    return tuple(segment_to_label(s) for s in scope.split("/"))


def _matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    pairs = zip(ns, path) if cond.match_type == "prefix" else zip(reversed(ns), reversed(path))
    if cond.match_type not in ("prefix", "suffix"):
        raise ValueError(f"unsupported match type: {cond.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)


def _compare(value: Any, expected: Any) -> bool:
    """`InMemoryStore`'s filter semantics, for the conditions strata's filter cannot say."""
    if isinstance(expected, dict):
        if any(k.startswith("$") for k in expected):
            return all(_apply(value, op, v) for op, v in expected.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in expected.items())
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(expected)
            and all(_compare(a, b) for a, b in zip(value, expected))
        )
    return bool(value == expected)


def _apply(value: Any, op: str, expected: Any) -> bool:
    if op == "$eq":
        return bool(value == expected)
    if op == "$ne":
        return bool(value != expected)
    if op not in _OPS:
        raise ValueError(f"unsupported filter operator: {op}")
    if value is None:
        return False
    a, b = float(value), float(expected)
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


def _split_filter(flt: Mapping[str, Any] | None, path: str = "") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A LangGraph filter as strata conditions on `payload.<path>`, and the
    rest (conditions strata's filter cannot express exactly: lists, None,
    booleans, keys outside `[A-Za-z0-9_-]`) to check here."""
    server: list[dict[str, Any]] = []
    rest: dict[str, Any] = {}
    for k, v in (flt or {}).items():
        name = f"{path}.{k}" if path else k
        if not _PAYLOAD_PATH.match(k):
            rest[k] = v
        elif isinstance(v, dict) and any(op.startswith("$") for op in v):
            if all(op in _OPS and _scalar(x) for op, x in v.items()):
                server.extend({f"payload.{name}": {op: x}} for op, x in v.items())
            else:
                rest[k] = v
        elif isinstance(v, dict):
            sub, sub_rest = _split_filter(v, name)
            if sub_rest:
                rest[k] = v
            else:
                server.extend(sub)
        elif _scalar(v):
            server.append({f"payload.{name}": {"$eq": v}})
        else:
            rest[k] = v
    return server, rest


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ttl_seconds(m: Memory) -> int | None:
    for t in m.tags:
        if t.startswith(TTL_TAG) and t.endswith("s"):
            try:
                return int(t[len(TTL_TAG) : -1])
            except ValueError:
                return None
    return None


class StrataStore(BaseStore):
    """A LangGraph `BaseStore` that keeps items in strata.

    >>> store = StrataStore("http://127.0.0.1:7077", token="strata_…", root="project/acme")
    >>> store.put(("users", "42"), "prefs", {"text": "likes short answers"})
    >>> store.search(("users", "42"), query="answers")

    `url` and `token` default to `STRATA_URL` and `STRATA_TOKEN`; or pass
    ready `client` and `aclient`. `root` is a scope every namespace lives
    below (a token limited to `project/acme` wants `root="project/acme"`).
    `index` takes LangGraph's `IndexConfig`: its `fields` choose the text
    strata indexes; `embed` and `dims` are not used, strata embeds with the
    server's own model. `ttl` takes LangGraph's `TTLConfig`
    (`default_ttl`, `refresh_on_read`).
    """

    supports_ttl = True

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        root: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        client: Client | None = None,
        aclient: AsyncClient | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.root = root.strip("/") if root else None
        if self.root is not None and (not self.root or "*" in self.root):
            raise ValueError(f"root {root!r} is not a scope")
        self.index_config = index
        self._fields: list[str] = list((index or {}).get("fields") or ["$"])
        if index and (index.get("embed") is not None or index.get("dims") is not None):
            warnings.warn(
                "StrataStore: index 'embed' and 'dims' are not used; strata embeds with the server's model",
                stacklevel=2,
            )
        self.ttl_config = ttl
        self._own = client is None, aclient is None
        self.client = client or Client(url, token, timeout=timeout)
        self.aclient = aclient or AsyncClient(url, token, timeout=timeout)

    # ---- lifetime ----

    def close(self) -> None:
        """Close the sync client (if the store made it)."""
        if self._own[0]:
            self.client.close()

    async def aclose(self) -> None:
        """Close both clients (those the store made)."""
        self.close()
        if self._own[1]:
            await self.aclient.aclose()

    def __enter__(self) -> StrataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- BaseStore ----

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._plan(list(ops))
        try:
            call = next(plan)
            while True:
                try:
                    answer = self.client.run(call)
                except (ConflictError, NotFoundError) as e:
                    call = plan.throw(e)
                else:
                    call = plan.send(answer)
        except StopIteration as done:
            result: list[Result] = done.value
            return result

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._plan(list(ops))
        try:
            call = next(plan)
            while True:
                try:
                    answer = await self.aclient.run(call)
                except (ConflictError, NotFoundError) as e:
                    call = plan.throw(e)
                else:
                    call = plan.send(answer)
        except StopIteration as done:
            result: list[Result] = done.value
            return result

    # ---- the plan: the calls a batch makes, shared by batch and abatch ----

    def _scope(self, namespace: tuple[str, ...]) -> str:
        return namespace_to_scope(tuple(namespace), self.root)

    def _item(self, m: Memory, score: float | None = None, search: bool = False) -> Item:
        ns = scope_to_namespace(m.scope, self.root) or ()
        value = m.payload if m.payload is not None else {}
        if search:
            return SearchItem(ns, m.key or "", value, m.created_at, m.updated_at, score)
        return Item(value=value, key=m.key or "", namespace=ns, created_at=m.created_at, updated_at=m.updated_at)

    def _content(self, value: Mapping[str, Any], index: Any) -> str:
        if index is False:
            return NO_WORDS
        paths = list(index) if index is not None else self._fields
        texts: list[str] = []
        for p in paths:
            texts.extend(get_text_at_path(value, p if p == "$" else tokenize_path(p)))
        text = "\n".join(t for t in texts if t.strip())
        return text or NO_WORDS

    def _plan(self, ops: list[Op]) -> Plan[list[Result]]:
        # Everything is checked before the first request: a bad op changes nothing.
        scopes: list[str | None] = []
        for op in ops:
            if isinstance(op, (GetOp, PutOp)):
                scopes.append(self._scope(op.namespace))
                if isinstance(op, PutOp) and op.value is not None:
                    if not isinstance(op.value, Mapping):
                        raise TypeError(f"PutOp value must be a mapping or None, not {type(op.value).__name__}")
                    json.dumps(dict(op.value))
                if isinstance(op, PutOp) and op.ttl is not None and not op.ttl > 0:
                    raise ValueError(f"ttl must be a positive number of minutes, not {op.ttl!r}")
            elif isinstance(op, SearchOp):
                _check_labels(tuple(op.namespace_prefix))
                scopes.append(self._scope(op.namespace_prefix) if op.namespace_prefix else None)
            elif isinstance(op, ListNamespacesOp):
                for cond in op.match_conditions or ():
                    _check_labels(tuple(cond.path))
                scopes.append(None)
            else:
                raise ValueError(f"unknown operation type: {type(op).__name__}")

        results: list[Result] = [None] * len(ops)
        read: list[tuple[Memory, bool]] = []

        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        if gets:
            found = yield from self._find({(scopes[i] or "", op.key) for i, op in gets})
            for i, op in gets:
                m = found.get((scopes[i] or "", op.key))
                if m is not None:
                    results[i] = self._item(m)
                    read.append((m, op.refresh_ttl))

        scope_list: list[str] | None = None
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                hits = yield from self._search(op, scopes[i])
                results[i] = [self._item(m, score, search=True) for m, score in hits]
                read.extend((m, op.refresh_ttl) for m, _ in hits)
            elif isinstance(op, ListNamespacesOp):
                if scope_list is None:
                    counts = yield _calls.scopes()
                    scope_list = [c.scope for c in counts if c.memories > 0]
                results[i] = self._namespaces(op, scope_list)

        yield from self._refresh(read)

        # Writes: the last op on each (namespace, key) wins, as in InMemoryStore.
        puts: dict[tuple[str, str], PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                puts[(scopes[i] or "", op.key)] = op
        doomed = [k for k, op in puts.items() if op.value is None]
        if doomed:
            found = yield from self._find(set(doomed))
            ids = [m.id for m in found.values()]
            if ids:
                yield _calls.forget(ids=ids, force=True, confirm=True)
        items: list[dict[str, Any]] = []
        for (scope, key), op in puts.items():
            if op.value is None:
                continue
            item: dict[str, Any] = {
                "content": self._content(op.value, op.index),
                "scope": scope,
                "key": key,
                "payload": dict(op.value),
                "tags": [TAG],
            }
            if op.ttl is not None:
                seconds = max(1, round(op.ttl * 60))
                item["ttl"] = f"{seconds}s"
                item["tags"].append(f"{TTL_TAG}{seconds}s")
            items.append(item)
        for start in range(0, len(items), _PAGE):
            yield _calls.remember_batch(items[start : start + _PAGE], confirm=True)
        return results

    def _find(self, wanted: set[tuple[str, str]]) -> Plan[dict[tuple[str, str], Memory]]:
        """The memories of these (scope, key) pairs, one list per scope."""
        by_scope: dict[str, list[str]] = {}
        for scope, key in wanted:
            by_scope.setdefault(scope, []).append(key)
        found: dict[tuple[str, str], Memory] = {}
        for scope, keys in sorted(by_scope.items()):
            for start in range(0, len(keys), 256):
                chunk = sorted(keys[start : start + 256])
                flt = {"$and": [{"tags": TAG}, {"key": {"$in": chunk}}]}
                mems = yield _calls.list_memories(view=[scope], filter=flt, limit=len(chunk))
                for m in mems:
                    if m.key is not None:
                        found[(scope, m.key)] = m
        return found

    def _view(self, scope: str | None) -> Plan[list[str]]:
        if scope is not None:
            return [f"{scope}/**"]
        if self.root:
            return [f"{self.root}/**"]
        counts = yield _calls.scopes()
        roots = sorted({c.scope.split("/")[0] for c in counts if c.memories > 0})
        return [f"{r}/**" for r in roots]

    def _search(self, op: SearchOp, scope: str | None) -> Plan[list[tuple[Memory, float | None]]]:
        view = yield from self._view(scope)
        if not view or op.limit <= 0:
            return []
        server, rest = _split_filter(op.filter)
        flt: dict[str, Any] = {"$and": [{"tags": TAG}, *server]}
        keep: Callable[[Memory], bool] = lambda m: all(  # noqa: E731
            _compare((m.payload or {}).get(k), v) for k, v in rest.items()
        )
        need = op.offset + op.limit
        if not (op.query and op.query.strip()) and not rest:
            page = yield _calls.list_memories(view=view, filter=flt, order="oldest", limit=op.limit, offset=op.offset)
            return [(m, None) for m in page]
        hits: list[tuple[Memory, float | None]] = []
        seen: set[str] = set()
        if op.query and op.query.strip():
            limit = _PAGE if rest else min(need, _PAGE)
            recalled = yield _calls.recall(op.query, view=view, filter=flt, limit=limit)
            for r in recalled:
                if keep(r):
                    hits.append((r, r.score))
                    seen.add(r.id)
        # The rest of the prefix, oldest first and unscored, until `need`
        # items are in hand or the prefix is exhausted.
        size = _PAGE if rest else min(_PAGE, need + len(seen))
        offset = 0
        while len(hits) < need:
            page = yield _calls.list_memories(view=view, filter=flt, order="oldest", limit=size, offset=offset)
            for m in page:
                if m.id not in seen and keep(m):
                    hits.append((m, None))
                    seen.add(m.id)
            if len(page) < size:
                break
            offset += size
        return hits[op.offset : need]

    def _namespaces(self, op: ListNamespacesOp, scope_list: Sequence[str]) -> list[tuple[str, ...]]:
        found = set()
        for s in scope_list:
            ns = scope_to_namespace(s, self.root)
            if not ns:
                continue
            if all(_matches(c, ns) for c in op.match_conditions or ()):
                found.add(ns[: op.max_depth] if op.max_depth is not None else ns)
        return sorted(found)[op.offset : op.offset + op.limit]

    def _refresh(self, read: list[tuple[Memory, bool]]) -> Plan[None]:
        """Moves the expiry of items read with `refresh_ttl` to now + their TTL."""
        now = _now()
        done: set[str] = set()
        for m, refresh in read:
            ttl = _ttl_seconds(m)
            if not refresh or ttl is None or m.expires_at is None or m.id in done:
                continue
            done.add(m.id)
            new = now + timedelta(seconds=ttl)
            if (new - m.expires_at).total_seconds() <= max(1.0, ttl / 100):
                continue
            try:
                yield _calls.update(m.id, expected_version=m.version, expires_at=new)
            except (ConflictError, NotFoundError):
                # Written or deleted meanwhile: that write set its own expiry.
                pass
        return None
