"""The async client: the same methods, awaited, against the same server."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strata_client import AsyncClient, ConflictError, ForbiddenError, InvalidError, NotFoundError

from .conftest import Server


async def test_every_method_awaited(aclient: AsyncClient, scope: str) -> None:
    assert await aclient.health()
    m = await aclient.remember("Queue is RabbitMQ", scope=scope, kind="decision", key="queue", payload={"q": 1})
    batch = await aclient.remember_batch([{"content": "Broker runs in k8s", "scope": scope}])
    assert len(batch) == 1
    hits = await aclient.recall("rabbitmq", view=[scope], explain=True)
    assert [h.id for h in hits] == [m.id] and hits[0].explain is not None
    assert {x.id for x in await aclient.list(view=[scope])} == {m.id, batch[0].id}
    u = await aclient.update(m.id, expected_version=1, content="Queue is Kafka")
    assert u.version == 2
    got = await aclient.get(m.id, history=True)
    assert got.history is not None and got.history[0].content == "Queue is RabbitMQ"
    p = await aclient.promote(m.id, f"{scope}/copy")
    assert p.provenance is not None and p.provenance.from_id == m.id
    project = scope.split("/", 1)[1]
    ctx = await aclient.context(project=project, query="queue")
    assert "Queue is Kafka" in ctx.text
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await aclient.create_session(id=sid, scope=scope)
    await aclient.remember("hello", scope=scope, session=sid)
    assert (await aclient.session(sid)).memories == 1
    assert sid in [s.id for s in await aclient.sessions()]
    assert (await aclient.archive_session(sid)).archived_at is not None
    lines = [line async for line in aclient.export(view=[f"{scope}/**"])]
    assert len(lines) == 4  # a full backup: the archived session's memory too
    partial = [line async for line in aclient.export(view=[f"{scope}/**"], archived=False)]
    assert len(partial) == 3
    assert (await aclient.forget(scope=scope)).deleted == 4
    counts = await aclient.import_(lines)
    assert counts.imported == 4
    assert {s.scope for s in await aclient.scopes()} >= {scope, f"{scope}/copy"}
    assert (await aclient.stats()).memories >= 3
    assert (await aclient.delete(p.id)).deleted == 1
    name = f"t-{uuid.uuid4().hex[:8]}"
    t = await aclient.remember("task note", scope=f"task/{name}", importance=0.95)
    report = await aclient.complete_task(name, project=project, promote=[t.id])
    assert [old for old, _ in report.promoted] == [t.id]
    assert await aclient.restore([t.id]) == 1


async def test_async_errors_carry_code_and_field(aclient: AsyncClient, server: Server, scope: str) -> None:
    with pytest.raises(InvalidError) as e:
        await aclient.remember(["not", "text"], scope=scope)  # type: ignore[arg-type]
    assert e.value.field == "content"
    m = await aclient.remember("v1", scope=scope)
    await aclient.update(m.id, expected_version=1, content="v2")
    with pytest.raises(ConflictError):
        await aclient.update(m.id, expected_version=1, content="stale")
    with pytest.raises(NotFoundError):
        await aclient.get("missing")
    async with AsyncClient(server.url, server.a) as a:
        with pytest.raises(ForbiddenError):
            await a.recall("x", view=[scope])
        with pytest.raises(ForbiddenError):
            [x async for x in a.export(view=[scope])]
    assert [x.content for x in await aclient.list(view=[scope])] == ["v2"]


async def test_concurrent_requests_share_one_client(aclient: AsyncClient, scope: str) -> None:
    ms = await asyncio.gather(*(aclient.remember(f"n{i}", scope=scope, key=f"k{i}") for i in range(20)))
    assert len({m.id for m in ms}) == 20
    assert len(await aclient.list(view=[scope], limit=100)) == 20
