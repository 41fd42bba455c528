"""AsyncClient.schemas.resume (ThreadService.ResumeThread through the shared facet plan): the NEW_RUN run is
created once per request, the client fills in a request id when none is given (the sync client too), and no
run is created unless the policy falls back."""
from __future__ import annotations

import asyncio

import grpc
from conftest import expect_error
from test_schemas import _bad_chain, register_three, state_v1, state_v3, values_of

from agentstate import AsyncClient, from_value
from agentstate import schemas as s
from agentstate.v1 import runs_pb2 as rpb


def _runs(c, tid) -> list:
    return list(c.runs.stub.ListRuns(rpb.ListRunsRequest(namespace=c.namespace, thread_id=tid), timeout=10).runs)


def test_async_resume_creates_the_linked_run_once(sidecar, nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="new_run")
    _bad_chain(c, tid, "agent")

    async def body():
        async with AsyncClient(sidecar.address, namespace=c.namespace) as ac:
            first = await ac.schemas.resume(tid, 3, request_id="once", metadata={"who": "w-2"})
            again = await ac.schemas.resume(tid, 3, request_id="once", metadata={"who": "w-2"})
            return first, again

    (cp, created), (again_cp, again) = asyncio.run(body())
    assert (cp.checkpoint_id, cp.migration, cp.unmigratable_checkpoint_id) == ("c1", s.NEW_RUN, "c2")
    assert values_of(cp) == state_v3(1)
    meta = {k: from_value(v) for k, v in created.run.metadata.items()}
    assert (meta["new_run_from"], meta["schema"], meta["who"]) == ("c2", "agent", "w-2")
    assert created.lease.lease_id and created.run.start_checkpoint_id == "c1"
    assert again.run.run_id == created.run.run_id and again.lease.lease_id == created.lease.lease_id
    assert [r.run_id for r in _runs(c, tid)] == [created.run.run_id]


def test_resume_fills_in_a_request_id_and_creates_nothing_otherwise(sidecar, nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="new_run")
    c.put_checkpoint(tid, state_v3(), checkpoint_id="c1", schema="agent", schema_version=3)
    sent = []
    real = c._call

    def spy(method, request, timeout):
        sent.append(request)
        return real(method, request, timeout)

    c._call = spy
    try:
        cp, none = c.schemas.resume(tid, 3)
    finally:
        del c._call
    assert cp.migration == s.CURRENT and none is None and _runs(c, tid) == []
    assert len(sent) == 1 and sent[0].request_id.startswith("auto-")  # filled in by the client

    async def strict():
        register_three(c, "strict", failure_policy="fail")
        _bad_chain(c, f"{tid}-f", "strict")
        async with AsyncClient(sidecar.address, namespace=c.namespace) as ac:
            with expect_error(grpc.StatusCode.FAILED_PRECONDITION, "SCHEMA_MIGRATION_FAILED"):
                await ac.schemas.resume(f"{tid}-f", 3)

    asyncio.run(strict())
    assert _runs(c, f"{tid}-f") == []


def test_async_eager_migrations_stream_their_progress(sidecar, nsclient, tid):
    c = nsclient
    register_three(c, "agent")
    for i in range(3):
        c.put_checkpoint(tid, state_v1(i), checkpoint_id=f"c{i}", schema="agent", schema_version=1)
    other = tid + "-b"
    c.put_checkpoint(other, state_v1(9), checkpoint_id="c0", schema="agent", schema_version=1)

    async def body():
        async with AsyncClient(sidecar.address, namespace=c.namespace) as ac:
            one = [p async for p in ac.schemas.migrate_thread(tid, "agent", batch_size=1)]
            every = [p async for p in ac.schemas.migrate_namespace("agent")]
            try:
                [p async for p in ac.schemas.migrate_thread(tid, "no-such-schema")]
            except Exception as e:  # noqa: BLE001 - the mapped client error is checked below
                return one, every, e
            return one, every, None

    one, every, err = asyncio.run(body())
    assert [p.checkpoints_migrated for p in one][-1] == 3 and len(one) >= 3
    assert every[-1].checkpoints_migrated == 1  # the first thread was done already; the other one now
    assert values_of(c.get_checkpoint(other, "c0")) == state_v3(9)
    assert values_of(c.get_checkpoint(tid, "c2")) == state_v3(2)
    assert isinstance(err, Exception) and getattr(err, "code", None) == grpc.StatusCode.NOT_FOUND, err
