"""Every method of the sync client against a real server."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import json

import pytest

from strata_client import Client, ConflictError, InvalidError, Memory, NotFoundError

from .conftest import Server

import httpx


def test_health_and_openapi_document_the_routes_used(client: Client, server: Server) -> None:
    assert client.health() is True

    doc = httpx.get(f"{server.url}/openapi.json").json()
    for path in ["/v1/memories", "/v1/memories/batch", "/v1/recall", "/v1/list", "/v1/export", "/v1/import"]:
        assert path in doc["paths"], path


def test_remember_keeps_every_field(client: Client, scope: str) -> None:
    before = datetime.now(timezone.utc)
    m = client.remember(
        "Billing uses PostgreSQL 16",
        scope=scope,
        kind="decision",
        importance=0.9,
        tags=["db", "billing"],
        key="billing-db",
        payload={"engine": "postgres", "version": 16},
        role="assistant",
        source="conversation",
        pinned=True,
        sensitive=True,
        ttl=timedelta(hours=2),
    )
    assert isinstance(m, Memory)
    assert (m.scope, m.kind, m.key, m.role, m.source) == (scope, "decision", "billing-db", "assistant", "conversation")
    assert m.content == "Billing uses PostgreSQL 16" and m.importance == 0.9
    assert m.tags == ["db", "billing"] and m.payload == {"engine": "postgres", "version": 16}
    assert m.pinned and m.sensitive and m.version == 1 and m.tokens > 0
    assert m.created_at >= before - timedelta(seconds=1)
    assert m.expires_at is not None
    assert timedelta(hours=2) - timedelta(seconds=5) < m.expires_at - m.created_at <= timedelta(hours=2)
    assert client.get(m.id) == m


def test_remember_same_key_supersedes_in_place(client: Client, scope: str) -> None:
    a = client.remember("Deploys on Fridays", scope=scope, key="deploy-day")
    b = client.remember("Deploys on Tuesdays", scope=scope, key="deploy-day")
    assert b.id == a.id and b.version == 2 and b.created_at == a.created_at
    got = client.get(a.id, history=True)
    assert got.content == "Deploys on Tuesdays"
    assert got.history is not None and [h.content for h in got.history] == ["Deploys on Fridays"]
    assert client.get(a.id).history is None


def test_remember_batch_stores_all_in_order(client: Client, scope: str) -> None:
    ms = client.remember_batch(
        [
            {"content": "first", "scope": scope, "kind": "fact"},
            {"content": "second", "scope": scope, "ttl": 3600},
            {"content": "third", "scope": f"{scope}/sub", "tags": ["x"]},
        ]
    )
    assert [m.content for m in ms] == ["first", "second", "third"]
    assert ms[1].expires_at is not None and ms[2].scope == f"{scope}/sub"
    assert len(client.list(view=[f"{scope}/**"])) == 3


def test_recall_ranks_filters_and_explains(client: Client, scope: str) -> None:
    client.remember("The cache is Redis", scope=scope, kind="decision", importance=0.9)
    client.remember("Lunch is at noon", scope=scope, kind="fact")
    client.remember("Redis runs on port 6379", scope=f"{scope}/ops", kind="fact")
    hits = client.recall("redis", view=[scope])
    assert [h.content for h in hits] == ["The cache is Redis"]
    assert hits[0].score > 0 and hits[0].explain is None
    hits = client.recall("redis", view=[f"{scope}/**"], explain=True, strategy="relevance")
    assert {h.content for h in hits} == {"The cache is Redis", "Redis runs on port 6379"}
    assert all(h.explain is not None and h.explain.bm25_rank is not None for h in hits)
    hits = client.recall("redis", view=[f"{scope}/**"], filter={"kind": "fact"})
    assert [h.content for h in hits] == ["Redis runs on port 6379"]
    assert len(client.recall("", view=[f"{scope}/**"], limit=2)) == 2


def test_list_orders_pages_and_filters(client: Client, scope: str) -> None:
    for i, imp in enumerate([0.2, 0.9, 0.5]):
        client.remember(f"note {i}", scope=scope, importance=imp, payload={"n": i})
    assert [m.content for m in client.list(view=[scope], order="oldest")] == ["note 0", "note 1", "note 2"]
    assert [m.content for m in client.list(view=[scope])] == ["note 2", "note 1", "note 0"]
    assert [m.content for m in client.list(view=[scope], order="importance")] == ["note 1", "note 2", "note 0"]
    assert [m.content for m in client.list(view=[scope], order="oldest", limit=1, offset=1)] == ["note 1"]
    assert [m.content for m in client.list(view=[scope], filter={"payload.n": {"$gte": 1}}, order="oldest")] == [
        "note 1",
        "note 2",
    ]


def test_update_is_compare_and_swap(client: Client, scope: str) -> None:
    m = client.remember("v1", scope=scope, payload={"a": 1}, key="k", tags=["t"])
    u = client.update(m.id, expected_version=1, content="v2", importance=0.8, tags=["t", "u"])
    assert (u.version, u.content, u.importance, u.tags) == (2, "v2", 0.8, ["t", "u"])
    assert u.payload == {"a": 1} and u.key == "k"  # not given: kept
    c = client.update(m.id, expected_version=2, payload=None, key=None)
    assert c.payload is None and c.key is None and c.version == 3
    when = datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    e = client.update(m.id, expected_version=3, expires_at=when)
    assert e.expires_at == when
    assert client.update(m.id, expected_version=4, expires_at=None).expires_at is None


def test_delete_and_forget(client: Client, scope: str) -> None:
    a, b, c, d = (client.remember(f"m{i}", scope=scope, kind="fact" if i < 2 else "note") for i in range(4))
    r = client.delete(a.id)
    assert r.deleted == 1 and r.ids == [a.id] and not r.dry_run
    dry = client.forget(ids=[b.id], dry_run=True)
    assert dry.dry_run and dry.ids == [b.id]
    assert client.get(b.id).id == b.id
    r = client.forget(view=[scope], filter={"kind": "note"})
    assert sorted(r.ids) == sorted([c.id, d.id])
    client.remember("below", scope=f"{scope}/x")
    r = client.forget(scope=scope)
    assert r.deleted == 2
    assert client.list(view=[f"{scope}/**"]) == []


def test_promote_keeps_provenance(client: Client, scope: str) -> None:
    m = client.remember("use ruff", scope=f"{scope}/task", kind="convention")
    p = client.promote(m.id, scope)
    assert p.id != m.id and p.scope == scope and p.content == "use ruff"
    assert p.provenance is not None and p.provenance.from_id == m.id and p.provenance.from_scope == f"{scope}/task"


def test_sessions_create_show_archive_and_restore(client: Client, scope: str) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    s = client.create_session(id=sid, scope=scope)
    assert s.id == sid and s.scope == scope and s.archived_at is None
    m = client.remember("user said hi", scope=scope, session=sid, role="user", kind="conversation")
    assert m.session == sid
    assert sid in [x.id for x in client.sessions()]
    man = client.session(sid)
    assert man.memories == 1 and man.by_role == {"user": 1} and man.tokens > 0
    done = client.archive_session(sid)
    assert done.archived_at is not None
    assert client.list(view=[scope]) == []
    archived = client.list(view=[scope], archived=True)
    assert [x.id for x in archived] == [m.id] and archived[0].archived is not None
    assert client.get(m.id).archived is not None
    # An archived session takes no writes, restores included; nothing moves.
    with pytest.raises(ConflictError) as e:
        client.restore([m.id])
    assert e.value.status == 409 and sid in e.value.message
    assert client.list(view=[scope]) == []


def test_ephemeral_sessions_and_last_turns(client: Client, scope: str) -> None:
    sid = f"e-{uuid.uuid4().hex[:8]}"
    s = client.create_session(id=sid, scope=scope, ephemeral=True)
    assert s.ephemeral and s.scope == scope
    m = client.remember("the quiet turn", scope=scope, session=sid, role="user", kind="conversation")
    assert [t.id for t in client.session_turns(sid)] == [m.id]
    assert [x.id for x in client.list(view=[scope])] == [m.id]
    with pytest.raises(InvalidError) as e:
        client.session_turns(sid, limit=0)
    assert e.value.field == "limit"
    client.archive_session(sid)
    assert client.list(view=[scope]) == []
    with pytest.raises(NotFoundError):
        client.session_turns(sid)


def test_complete_task_promotes_and_archives(client: Client) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    project = f"p-{uuid.uuid4().hex[:8]}"
    keep = client.remember("the fix was a missing index", scope=f"task/{name}", importance=0.9)
    scratch = client.remember("scratch", scope=f"task/{name}", importance=0.1)
    r = client.complete_task(name, project=project, min_importance=0.8)
    assert r.task == f"task/{name}" and r.project == f"project/{project}"
    assert [old for old, _ in r.promoted] == [keep.id] and r.archived == 2
    assert [m.content for m in client.list(view=[f"project/{project}"])] == ["the fix was a missing index"]
    assert client.list(view=[f"task/{name}"]) == []
    assert client.restore([scratch.id]) == 1
    assert [m.id for m in client.list(view=[f"task/{name}"])] == [scratch.id]


def test_context_renders_the_project(client: Client) -> None:
    project = f"c-{uuid.uuid4().hex[:8]}"
    m = client.remember("Service X talks gRPC", scope=f"project/{project}", kind="decision")
    ctx = client.context(project=project, query="grpc")
    assert ctx.profile == "global" and "Service X talks gRPC" in ctx.text
    assert [i.id for i in ctx.items] == [m.id] and ctx.total_tokens <= ctx.max_tokens
    assert client.context(project=project, render="json", max_tokens=500).max_tokens == 500


def test_export_streams_and_import_round_trips(client: Client, scope: str) -> None:
    client.remember_batch([{"content": f"line {i}", "scope": scope, "key": f"k{i}"} for i in range(30)])
    lines = list(client.export(view=[scope]))
    assert len(lines) == 30 and {ln["content"] for ln in lines} == {f"line {i}" for i in range(30)}
    assert client.forget(scope=scope).deleted == 30
    counts = client.import_(lines)
    assert (counts.imported, counts.skipped) == (30, 0)
    again = client.import_(lines, on_conflict="skip")
    assert (again.imported, again.skipped) == (0, 30)
    assert len(client.list(view=[scope], limit=100)) == 30
    text = "".join(json.dumps(ln) + "\n" for ln in lines)
    assert client.import_(text, on_conflict="skip").skipped == 30


def test_import_from_reads_other_tools_files(client: Client, scope: str, tmp_path: Path) -> None:
    mem0 = tmp_path / "mem0.json"
    mem0.write_text(json.dumps([{"id": "m-1", "memory": "Ana prefers short answers", "user_id": "ana"}]))
    dry = client.import_from("mem0", mem0, scope=scope, dry_run=True)
    assert (dry.added, dry.dry_run, dry.scopes) == (1, True, [scope])
    assert client.list(view=[scope]) == []
    assert client.import_from("mem0", mem0, scope=scope).added == 1
    assert client.import_from("mem0", mem0, scope=scope).unchanged == 1
    notes = tmp_path / "vault"
    (notes / "people").mkdir(parents=True)
    (notes / "people" / "ana.md").write_text("---\ntitle: Ana\n---\nAna owns billing.\n")
    (notes / "logo.png").write_bytes(b"\x89PNG")
    r = client.import_from("markdown", notes, scope=scope)
    assert (r.added, r.skipped) == (1, [{"entry": "logo.png", "reason": "not a Markdown file (.md, .markdown)"}])
    assert any("Ana owns billing." in m.content for m in client.list(view=[scope]))
    with pytest.raises(InvalidError) as e:
        client.import_from("evernote", text="x")  # type: ignore[arg-type]
    assert e.value.field == "from"


def test_recall_keeps_only_what_reaches_the_relevance_floor(client: Client, scope: str) -> None:
    strong = client.remember("Kafka retention is seven days on every partition of the queue", scope=scope)
    client.remember("The broker was late to the standup today", scope=scope)
    query = "kafka queue retention partition broker"
    floored = client.recall(query, view=[scope])
    everything = client.recall(query, view=[scope], min_relevance=0)
    assert [r.id for r in floored] == [strong.id]
    assert len(everything) == 2 and everything[0].id == strong.id
    assert client.recall("zebra", view=[scope]) == []


def test_export_is_a_full_backup_unless_a_part_is_left_out(client: Client, scope: str) -> None:
    client.remember("plain", scope=scope)
    secret = client.remember("a secret", scope=scope, sensitive=True)
    full = {ln["id"] for ln in client.export(view=[scope])}
    assert secret.id in full and len(full) == 2
    assert [ln["content"] for ln in client.export(view=[scope], sensitive=False)] == ["plain"]


def test_scopes_and_stats_count(client: Client, scope: str) -> None:
    client.remember("one", scope=scope)
    client.remember("two", scope=f"{scope}/deeper")
    counts = {s.scope: s.memories for s in client.scopes()}
    assert counts[scope] == 1 and counts[f"{scope}/deeper"] == 1
    st = client.stats()
    assert st.memories >= 2 and st.scopes >= 2
    assert st.store is None  # a token sees only its own scopes' counts


def test_url_and_token_from_the_environment(server: Server, monkeypatch: pytest.MonkeyPatch, scope: str) -> None:
    monkeypatch.setenv("STRATA_URL", server.url)
    monkeypatch.setenv("STRATA_TOKEN", server.admin)
    with Client() as c:
        assert c.url == server.url
        assert c.remember("from env", scope=scope).scope == scope
