"""The LangGraph store: the same operations on langgraph's `InMemoryStore`
and on `StrataStore` give the same observable results (scenarios after
langgraph's own store tests), plus what only strata does (TTL, token
isolation, the namespace ↔ scope mapping)."""

from __future__ import annotations

import hashlib
import math
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from strata_client import Client, ForbiddenError, InvalidError
from strata_client.langgraph import (
    StrataStore,
    label_to_segment,
    namespace_to_scope,
    scope_to_namespace,
    segment_to_label,
)

from .conftest import Server


class WordEmbeddings(Embeddings):
    """Bag-of-words vectors, so InMemoryStore ranks by shared words as BM25 does."""

    dims = 256

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * self.dims
        for w in re.findall(r"[a-z0-9]+", text.lower()):
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dims] += 1.0
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


@pytest.fixture
def root() -> str:
    return f"project/lg-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def strata(server: Server, root: str) -> Iterator[StrataStore]:
    with StrataStore(server.url, server.admin, root=root) as s:
        yield s


@pytest.fixture(params=["memory", "strata"])
def store(request: pytest.FixtureRequest, server: Server, root: str) -> Iterator[BaseStore]:
    """Each behaviour test runs on both stores."""
    if request.param == "memory":
        yield InMemoryStore()
    else:
        with StrataStore(server.url, server.admin, root=root) as s:
            yield s


def both(server: Server, root: str, fields: list[str] | None = None) -> tuple[InMemoryStore, StrataStore]:
    index: Any = {"dims": WordEmbeddings.dims, "embed": WordEmbeddings(), "fields": fields or ["$"]}
    return InMemoryStore(index=index), StrataStore(server.url, server.admin, root=root, index={"fields": fields or ["$"]})


def view(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(tuple(i.namespace), i.key, i.value) for i in items]


# ---- the same behaviour on both stores ----


def test_put_get_update_delete(store: BaseStore) -> None:
    ns = ("users", "u1")
    assert store.get(ns, "prefs") is None
    store.put(ns, "prefs", {"theme": "dark", "n": 1})
    item = store.get(ns, "prefs")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (ns, "prefs", {"theme": "dark", "n": 1})
    assert item.created_at.tzinfo is not None and item.updated_at >= item.created_at
    store.put(ns, "prefs", {"theme": "light"})
    again = store.get(ns, "prefs")
    assert again is not None and again.value == {"theme": "light"} and again.updated_at >= item.updated_at
    assert store.get(("users", "u2"), "prefs") is None  # namespaces are separate
    store.delete(ns, "prefs")
    assert store.get(ns, "prefs") is None
    store.delete(ns, "prefs")  # deleting what is gone is fine


def test_search_without_query_lists_the_prefix_in_insertion_order(store: BaseStore) -> None:
    for i in range(7):
        store.put(("docs",), f"d{i}", {"i": i, "text": f"doc {i}"})
    store.put(("docs", "sub"), "s", {"i": 50})
    store.put(("other",), "x", {"i": 99})
    store.put(("docs",), "d1", {"i": 1, "text": "updated keeps its place"})
    got = store.search(("docs",), limit=100)
    # Across namespaces the order is the store's own; within one, insertion order.
    assert [r.key for r in got if r.namespace == ("docs",)] == [f"d{i}" for i in range(7)]
    assert {r.key for r in got} == {f"d{i}" for i in range(7)} | {"s"}
    assert next(r for r in got if r.key == "d1").value["text"] == "updated keeps its place"
    assert [r.key for r in store.search(("docs",), limit=2, offset=3)] == ["d3", "d4"]
    assert [r.key for r in store.search(("docs", "sub"))] == ["s"]
    assert all(r.score is None for r in got)
    assert {r.key for r in store.search((), limit=100)} == {f"d{i}" for i in range(7)} | {"s", "x"}
    assert store.search(("nothing",)) == []


def test_search_filters_like_inmemorystore(store: BaseStore) -> None:
    docs = {
        "doc1": {"text": "red apple", "color": "red", "score": 4.5, "meta": {"lang": "en", "v": 2}},
        "doc2": {"text": "red car", "color": "red", "score": 3.0, "meta": {"lang": "fr", "v": 1}},
        "doc3": {"text": "green apple", "color": "green", "score": 4.0, "tags": ["a", "b"]},
        "doc4": {"text": "blue car", "color": "blue", "score": 3.5, "odd key": True},
    }
    for k, v in docs.items():
        store.put(("test",), k, v)

    def keys(flt: dict[str, Any]) -> list[str]:
        return [r.key for r in store.search(("test",), filter=flt)]

    assert keys({"color": "red"}) == ["doc1", "doc2"]
    assert keys({"score": {"$gt": 3.2}}) == ["doc1", "doc3", "doc4"]
    assert keys({"score": {"$gte": 4.0}, "color": "green"}) == ["doc3"]
    assert keys({"score": {"$lt": 4.0, "$gte": 3.5}}) == ["doc4"]
    assert keys({"color": {"$ne": "red"}}) == ["doc3", "doc4"]
    assert keys({"meta": {"lang": "en"}}) == ["doc1"]  # nested object
    assert keys({"tags": ["a", "b"]}) == ["doc3"]  # a list compares whole
    assert keys({"odd key": True}) == ["doc4"]  # not a payload path: checked client-side
    assert keys({"color": "purple"}) == []
    assert [r.key for r in store.search(("test",), filter={"color": "red"}, limit=1, offset=1)] == ["doc2"]


def test_batch_reads_before_writes_and_last_put_wins(store: BaseStore) -> None:
    ns = ("b",)
    store.put(ns, "old", {"v": 0})
    results = store.batch(
        [
            PutOp(ns, "k", {"v": 1}),
            GetOp(ns, "k"),
            PutOp(ns, "k", {"v": 2}),
            GetOp(ns, "old"),
            PutOp(ns, "old", None),
            SearchOp(ns),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None and results[1] is None  # reads see the store before the batch
    assert isinstance(results[3], Item) and results[3].value == {"v": 0}
    assert view(results[5]) == [(ns, "old", {"v": 0})]  # type: ignore[arg-type]
    assert results[6] == [ns]
    assert store.get(ns, "k").value == {"v": 2}  # type: ignore[union-attr]
    assert store.get(ns, "old") is None


LANGGRAPH_NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]


def test_list_namespaces(store: BaseStore) -> None:
    assert store.list_namespaces() == []
    for i, ns in enumerate(LANGGRAPH_NAMESPACES):
        store.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})
    assert store.list_namespaces() == sorted(LANGGRAPH_NAMESPACES)
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("admin",), ("b",), ("users",)]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    store.delete(("users", "123"), "id_6")
    if isinstance(store, StrataStore):
        # As in langgraph's Postgres store, a namespace lives while it holds
        # items (InMemoryStore keeps listing emptied ones).
        assert ("users", "123") not in store.list_namespaces()


def test_namespace_rules(store: BaseStore) -> None:
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    assert store.search(("foo", "langgraph", "foo"))[0].value == doc
    store.delete(("foo", "langgraph", "foo"), "bar")
    assert store.get(("foo", "langgraph", "foo"), "bar") is None


async def test_async_methods(store: BaseStore) -> None:
    ns = ("async", "ns")
    await store.aput(ns, "k1", {"text": "hello", "n": 1})
    await store.aput(ns, "k2", {"text": "world", "n": 2})
    assert (await store.aget(ns, "k1")).value == {"text": "hello", "n": 1}  # type: ignore[union-attr]
    assert [r.key for r in await store.asearch(ns, filter={"n": {"$gte": 2}})] == ["k2"]
    assert await store.alist_namespaces(prefix=("async",)) == [ns]
    await store.adelete(ns, "k1")
    assert await store.aget(ns, "k1") is None
    results = await store.abatch([GetOp(ns, "k2"), SearchOp(("async",)), PutOp(ns, "k3", {"n": 3})])
    assert results[0].value["n"] == 2  # type: ignore[union-attr]
    assert [r.key for r in results[1]] == ["k2"]  # type: ignore[union-attr]
    assert (await store.aget(ns, "k3")).value == {"n": 3}  # type: ignore[union-attr]


def test_query_ranks_matches_first_on_both(server: Server, root: str) -> None:
    mem, st = both(server, root, fields=["text"])
    with st:
        docs = [
            ("doc1", {"text": "zany zebra Xerxes", "color": "red"}),
            ("doc2", {"text": "something about dogs", "color": "red"}),
            ("doc3", {"text": "text about birds", "color": "blue"}),
        ]
        for k, v in docs:
            mem.put(("test",), k, v)
            st.put(("test",), k, v)
        for s in (mem, st):
            got = s.search(("test",), query="Zany Xerxes")
            assert got[0].key == "doc1" and got[0].score is not None and got[0].score > 0
            assert {r.key for r in got} == {"doc1", "doc2", "doc3"}  # everything, best first
            assert [r.key for r in s.search(("test",), query="dogs", filter={"color": "red"})][0] == "doc2"
            assert len(s.search(("test",), query="birds", limit=2)) == 2
            page1 = s.search(("test",), query="about", limit=2)
            page2 = s.search(("test",), query="about", limit=2, offset=2)
            assert len(page1) == 2 and len(page2) == 1
            assert {r.key for r in page1 + page2} == {"doc1", "doc2", "doc3"}
            assert len(s.search(("test",), query="test!@#$%^&*()")) == 3
            assert len(s.search(("test",), query="")) == 3
        # An update re-indexes; an item put with index=False is never matched.
        for s in (mem, st):
            s.put(("test",), "doc1", {"text": "new text about dogs", "color": "red"})
            s.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
            top = s.search(("test",), query="new text about dogs", limit=3)
            assert top[0].key == "doc1" and "doc4" not in [r.key for r in top]
            assert not any(r.score for r in s.search(("test",), query="Xerxes"))  # nothing matches now


# ---- what only strata does ----


def test_namespaces_are_scopes_below_the_root(strata: StrataStore, server: Server, root: str) -> None:
    strata.put(("users", "u:1", "prefs"), "theme", {"text": "dark mode"})
    with Client(server.url, server.admin) as c:
        [m] = c.list(view=[f"{root}/**"])
    assert m.scope == f"{root}/users/u.3A1/prefs" and m.key == "theme"
    assert m.payload == {"text": "dark mode"} and "langgraph" in m.tags
    assert m.content == '{"text": "dark mode"}'  # the default index field "$": the whole value
    assert strata.list_namespaces() == [("users", "u:1", "prefs")]


def test_index_fields_choose_the_content(server: Server, root: str) -> None:
    with StrataStore(server.url, server.admin, root=root, index={"fields": ["title", "body.text"]}) as s, Client(
        server.url, server.admin
    ) as c:
        s.put(("docs",), "a", {"title": "Release notes", "body": {"text": "bug fixes"}, "id": 7})
        s.put(("docs",), "b", {"title": "Roadmap", "body": {"text": "ignored"}}, index=["title"])
        s.put(("docs",), "c", {"title": "Secret"}, index=False)
        content = {m.key: m.content for m in c.list(view=[f"{root}/**"])}
    assert content == {"a": "Release notes\nbug fixes", "b": "Roadmap", "c": "-"}


@pytest.mark.parametrize(
    "label", ["plain", "with space", "user:42", "ünïcödé", "a/b", "x-y_z", "%2F", "😀", "a" * 21]
)
def test_labels_round_trip_through_scope_segments(label: str) -> None:
    seg = label_to_segment(label)
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,64}", seg)
    assert segment_to_label(seg) == label
    ns = ("root", label)
    assert scope_to_namespace(namespace_to_scope(ns, "project/x"), "project/x") == ns


def test_labels_too_long_or_too_deep_are_refused_before_any_write(strata: StrataStore, server: Server, root: str) -> None:
    with pytest.raises(InvalidNamespaceError):
        strata.put(("é" * 11,), "k", {"v": 1})  # 66 bytes as a segment
    with pytest.raises(InvalidNamespaceError):
        strata.put(tuple(f"l{i}" for i in range(15)), "k", {"v": 1})  # root's 2 + 15 segments
    with pytest.raises(TypeError):
        strata.batch([PutOp(("ok",), "k", {"v": 1}), PutOp(("ok",), "bad", {"v": object()})])
    with Client(server.url, server.admin) as c:
        assert c.list(view=[f"{root}/**"]) == []


def test_refused_batches_change_nothing(strata: StrataStore) -> None:
    with pytest.raises(ValueError):
        strata.batch([PutOp(("ok",), "a", {"v": 1}), PutOp(("ok",), "b", {"v": 1}, ttl=-5)])
    big = {"text": "x" * (1 << 20)}  # over the server's max_item_bytes
    with pytest.raises(InvalidError) as e:
        strata.batch([PutOp(("ok",), "a", {"v": 1}), PutOp(("ok",), "b", big)])
    assert "max_item_bytes" in e.value.message
    assert strata.search(("ok",)) == []


def test_ttl_expires_and_reads_refresh_it(strata: StrataStore, server: Server, root: str) -> None:
    ns = ("ttl",)
    strata.put(ns, "short", {"v": 1}, ttl=2 / 60)  # two seconds
    strata.put(ns, "kept", {"v": 2}, ttl=60)
    strata.put(ns, "forever", {"v": 3})
    with Client(server.url, server.admin) as c:
        by_key = {m.key: m for m in c.list(view=[f"{root}/**"])}
    assert by_key["forever"].expires_at is None
    assert by_key["short"].expires_at is not None and by_key["kept"].expires_at is not None
    time.sleep(1.2)
    assert strata.get(ns, "short") is not None  # read at ~1.2 s: expiry moves to ~3.2 s
    time.sleep(1.2)
    assert strata.get(ns, "short", refresh_ttl=False) is not None  # would have expired at 2 s
    time.sleep(1.4)
    assert strata.get(ns, "short") is None
    assert [r.key for r in strata.search(ns)] == ["kept", "forever"]


def test_token_limited_to_project_a_is_held_to_it(server: Server) -> None:
    root_a = f"project/a/lg-{uuid.uuid4().hex[:8]}"
    with StrataStore(server.url, server.a, root=root_a) as a:
        a.put(("notes",), "n1", {"text": "mine"})
        assert a.get(("notes",), "n1").value == {"text": "mine"}  # type: ignore[union-attr]
    with StrataStore(server.url, server.admin, root="project/b") as b_admin:
        b_admin.put(("notes",), "n1", {"text": "project b's"})
    with StrataStore(server.url, server.a, root="project/b") as outside:
        with pytest.raises(ForbiddenError):
            outside.get(("notes",), "n1")
        with pytest.raises(ForbiddenError):
            outside.search(("notes",))
        with pytest.raises(ForbiddenError):
            outside.put(("notes",), "n1", {"text": "overwritten"})
        assert outside.list_namespaces() == []  # the token sees no scope there
    with StrataStore(server.url, server.admin, root="project/b") as b_admin:
        assert b_admin.get(("notes",), "n1").value == {"text": "project b's"}  # type: ignore[union-attr]
