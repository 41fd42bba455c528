"""The asyncio client's facets (AsyncClient.runs / .events / .artifacts / .effects) against a live sidecar:
the main scenarios of the sync facet tests, as coroutines and async iterators."""
from __future__ import annotations

import asyncio
import inspect
import io
import random
import threading
import uuid

import grpc
import pytest
from conftest import SidecarProcess, expect_error

from agentstate import AsyncClient, AsyncHeldRun, Client, event, from_value, status_name, step
from agentstate.effects import DONE, FAILED, PENDING
from agentstate.v1 import runs_pb2 as rpb, threads_pb2 as tpb

CODES = grpc.StatusCode
MB = 1024 * 1024


@pytest.fixture
def run(module_sidecar):
    """run(body): ``await body(client)`` in a fresh event loop, with an AsyncClient in a namespace of its own."""
    namespace = f"ns-{uuid.uuid4().hex[:12]}"

    def runner(body, address: str | None = None, **kw):
        async def main():
            async with AsyncClient(address or module_sidecar.address, namespace=namespace, **kw) as c:
                return await body(c)

        return asyncio.run(main())

    return runner


async def status(c: AsyncClient, run_id: str) -> str:
    return status_name((await c.runs.get(run_id)).status)


async def until(predicate, timeout: float = 15.0):
    """Poll the coroutine function ``predicate`` until it returns something truthy."""
    async def poll():
        while not (value := await predicate()):
            await asyncio.sleep(0.05)
        return value

    return await asyncio.wait_for(poll(), timeout)


@pytest.mark.parametrize("facet", ["runs", "events", "artifacts", "effects", "held run"])
def test_async_facets_have_the_sync_calls(facet):
    """Every public call of a sync facet (and of a held run) is on the async one, with the same parameters."""
    def pick(client):
        if facet == "held run":
            return client.runs.held_run(client, rpb.Run(), rpb.Lease(run_id="r", lease_id="l", thread_id="t"))
        return getattr(client, facet)

    with Client("unix:/nonexistent.sock") as sc:
        sync_facet = pick(sc)

        async def main():
            async with AsyncClient("unix:/nonexistent.sock") as c:
                return pick(c)

        async_facet = asyncio.run(main())
    assert type(async_facet).__name__ == "Async" + type(sync_facet).__name__
    public = {n for n in dir(sync_facet) if not n.startswith("_") and callable(getattr(sync_facet, n))}
    assert len(public) >= 3 and public <= set(dir(async_facet))
    for name in public:
        sync_params = inspect.signature(getattr(sync_facet, name)).parameters
        assert inspect.signature(getattr(async_facet, name)).parameters == sync_params, name


# ---------------------------------------------------------------- runs

def test_async_run_lifecycle(run):
    async def body(c):
        await c.create_thread("t")
        created = await c.runs.create("t", input={"q": 1}, metadata={"who": "me"})
        assert (status_name(created.run.status), created.run.active) == ("pending", True)
        assert (await c.get_thread("t")).status == tpb.THREAD_STATUS_BUSY
        held = await c.runs.claim(run_id=created.run.run_id)
        assert isinstance(held, AsyncHeldRun) and held.lease_id and held.run_id == created.run.run_id
        assert await status(c, held.run_id) == "running"
        put = await held.put_checkpoint({"x": 1}, metadata={"step": 0})
        assert (await held.heartbeat()).last_checkpoint_id == put.checkpoint.checkpoint_id
        assert held.run.last_checkpoint_id == put.checkpoint.checkpoint_id
        await held.put_writes(put.checkpoint.checkpoint_id, [("task", 0, "x", 5)])
        cp = await c.get_checkpoint("t", include_pending_writes=True)
        assert [(w.task_id, from_value(w.value)) for w in cp.pending_writes] == [("task", 5)]
        done = await held.complete({"answer": 42})
        assert status_name(done.run.status) == "success" and not done.run.active
        assert status_name(held.run.status) == "success"
        assert (await c.get_thread("t")).status == tpb.THREAD_STATUS_IDLE
        assert [e.type async for e in c.events.list("t")] == [
            "agentstate.run.created", "agentstate.run.activated", "agentstate.run.started", "agentstate.run.success"]
        with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="success"):
            await held.heartbeat()
        failing = await c.runs.start("t")
        await failing.fail("boom")
        assert (await c.runs.get(failing.run_id)).error == "boom"
        assert [status_name(r.status) async for r in c.runs.list("t", page_size=1)] == ["success", "error"]
        assert [r.run_id async for r in c.runs.list("t", statuses=["error"])] == [failing.run_id]
        with expect_error(CODES.NOT_FOUND, "RUN_NOT_FOUND", field="run_id"):
            await c.runs.get("nope")

    run(body)


def test_async_reject_and_interrupt(run):
    async def body(c):
        old = await c.runs.start("t", create_thread=True)
        with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=old.run_id, status="running"):
            await c.runs.create("t", strategy="reject")
        kept = await old.put_checkpoint({"x": 1})
        new = await c.runs.create("t", strategy="interrupt", claim=True)
        assert new.stopped_run_id == old.run_id
        stopped = await c.runs.get(old.run_id)
        assert (status_name(stopped.status), stopped.stopped_by) == ("interrupted", new.run.run_id)
        assert new.lease.resume_checkpoint_id == kept.checkpoint.checkpoint_id
        with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="interrupted"):
            await old.put_checkpoint({"x": 2}, parent_id=kept.checkpoint.checkpoint_id)
        with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
            await old.put_writes(kept.checkpoint.checkpoint_id, [("task", 0, "x", 5)])
        with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
            await old.append_events([event("late")])
        with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
            await old.complete()
        assert await c.get_values("t") == {"x": 1}  # the refused writes changed nothing

    run(body)


def test_async_start_waits_for_its_turn_and_enqueue_hands_on(run):
    async def body(c):
        first = await c.runs.start("t", create_thread=True)
        waiter = asyncio.create_task(c.runs.start("t", strategy="enqueue", wait=20))
        await until(lambda: _count_runs(c, "t", 2))
        assert not waiter.done()
        await first.complete()
        second = await asyncio.wait_for(waiter, 20)
        assert isinstance(second, AsyncHeldRun) and second.run_id != first.run_id
        assert await status(c, second.run_id) == "running"
        await second.complete()

    run(body)


async def _count_runs(c, thread_id: str, n: int) -> bool:
    return len([r async for r in c.runs.list(thread_id)]) == n


def test_async_keep_alive_is_a_task(run):
    async def body(c):
        held = await c.runs.start("t", create_thread=True, lease_timeout=1.0, on_lease_expired="hold")
        threads = threading.active_count()
        stop = held.keep_alive(0.1)
        assert isinstance(stop, asyncio.Event) and isinstance(held._heartbeat_task, asyncio.Task)
        assert threading.active_count() == threads  # no heartbeat thread
        await asyncio.sleep(2.5)
        assert await status(c, held.run_id) == "running"  # heartbeats kept the lease
        stop.set()
        stopped = await until(lambda: _held(c, held.run_id))
        assert status_name(stopped.status) == "interrupted" and "operator" in stopped.error
        assert held.lost is None and held._heartbeat_task.done()

        # a heartbeat that fails ends the task and says why
        other = await c.runs.start("u", create_thread=True)
        lost = other.keep_alive(0.05)
        await c.runs.cancel(other.run_id, "stop it")
        await asyncio.wait_for(lost.wait(), 10)
        assert other.lost is not None and (other.lost.code, other.lost.reason) == (
            CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE")

    run(body)


async def _held(c, run_id: str):
    r = await c.runs.get(run_id)
    return r if r.held else None


def test_async_steps_and_budget(run):
    async def body(c):
        held = await c.runs.start("t", create_thread=True, budget={"tokens_in": 100, "cost": 1.0})
        s1 = await held.start_step("model", "gpt", input={"prompt": "hi"}, counters={"tokens_in": 40, "requests": 1})
        assert not s1.HasField("end_time") and s1.counters.tokens_in == 40
        with expect_error(CODES.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED", budget="tokens_in"):
            await held.record_step("model", "too-big", counters={"tokens_in": 61})
        ended = await held.end_step(s1.step_id, output={"text": "hello"},
                                    counters={"tokens_in": 45, "tokens_out": 7, "cost": 0.25, "requests": 1})
        assert ended.HasField("end_time")
        with expect_error(CODES.FAILED_PRECONDITION, "STEP_ENDED"):
            await held.end_step(s1.step_id)
        await held.record_step("tool", "search", counters={"cost": 0.5, "requests": 1})
        await held.put_checkpoint({"x": 1}, steps=[step("model", "m2", counters={"tokens_in": 55})])
        with expect_error(CODES.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED", budget="tokens_in"):
            await held.start_step("model", "used-up")
        with expect_error(CODES.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED"):
            await held.put_checkpoint({"x": 2}, steps=[step("tool", "pricy", counters={"cost": 0.3})])
        assert await c.get_values("t") == {"x": 1}
        usage = (await c.runs.get(held.run_id)).usage
        assert (usage.tokens_in, usage.tokens_out, usage.cost, usage.requests) == (100, 7, 0.75, 2)
        assert [s.name async for s in c.runs.list_steps(held.run_id, page_size=2)] == ["gpt", "search", "m2"]
        total = await c.runs.thread_usage("t")
        assert (total.usage.tokens_in, total.runs, total.steps) == (100, 1, 3)

    run(body)


def test_async_fork_branch_and_promote(run):
    async def body(c):
        base = await c.put_checkpoint("t", {"msgs": ["a"]})
        main = await c.runs.start("t")
        forked = await c.runs.start("t", strategy="fork", start_checkpoint_id=base.checkpoint.checkpoint_id,
                                    branch_thread_id="t-b1")
        assert forked.thread_id == "t-b1" and forked.run.branch_of == "t"
        bput = await forked.put_checkpoint({"msgs": ["a", "branch"]}, parent_id=base.checkpoint.checkpoint_id)
        assert [(b.branch_thread_id, b.head_checkpoint_id) async for b in c.runs.list_branches("t")] == \
            [("t-b1", bput.checkpoint.checkpoint_id)]
        with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=main.run_id):
            await c.runs.promote("t", "t-b1")
        await main.complete()
        await forked.complete()
        with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH"):
            await c.runs.promote("t", "t-b1", expected_head_etag="stale")
        promoted = await c.runs.promote("t", "t-b1")
        assert (await c.get_checkpoint("t", omit_values=True)).checkpoint_id == promoted.checkpoint_id
        assert (await c.get_values("t"))["msgs"] == ["a", "branch"]

    run(body)


# ---------------------------------------------------------------- events

def test_async_events_dedupe_list_and_watch(run):
    async def body(c):
        await c.create_thread("t")
        first = await c.events.append("t", [event("a", {"n": 1}, client_event_id="e1"), event("b")])
        assert [e.sequence for e in first.events] == [1, 2] and first.duplicates == 0
        again = await c.events.append("t", [event("a", {"n": 1}, client_event_id="e1"),
                                            event("c", client_event_id="e3")])
        assert [e.sequence for e in again.events] == [1, 3] and again.duplicates == 1
        listed = [e async for e in c.events.list("t", page_size=2)]
        assert [(e.sequence, e.type) for e in listed] == [(1, "a"), (2, "b"), (3, "c")]
        assert from_value(listed[0].data) == {"n": 1}
        assert [e.sequence async for e in c.events.list("t", after=2)] == [3]

        # follow: events appended while watching arrive in order, starting after the given sequence
        seen = []

        async def watch():
            async for ev in c.events.watch("t", after=1):
                seen.append((ev.sequence, ev.type))
                if len(seen) == 4:
                    return

        watcher = asyncio.create_task(watch())
        for i in range(2):
            await asyncio.sleep(0.1)
            await c.events.append("t", [event(f"new{i}")])
        await asyncio.wait_for(watcher, 20)
        assert seen == [(2, "b"), (3, "c"), (4, "new0"), (5, "new1")]
        assert [e.sequence async for e in c.events.watch("t", after=3, follow=False)] == [4, 5]
        assert [e.type async for e in c.events.watch("t", after=4, idle_timeout=0.3)] == ["new1"]
        with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND"):
            [e async for e in c.events.watch("missing", follow=False)]
        with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND"):
            await c.events.append("missing", [event("a")])

    run(body)


def test_async_watch_resumes_across_a_sidecar_restart(tmp_path, run):
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        async def body(c):
            await c.create_thread("t")
            await c.events.append("t", [event("e", i, client_event_id=f"e{i}") for i in range(5)])
            seen = []

            async def watch():
                async for ev in c.events.watch("t", retry_for=30):
                    seen.append(ev.sequence)
                    if len(seen) == 10:
                        return

            watcher = asyncio.create_task(watch())
            await until(lambda: _true(len(seen) == 5))
            await asyncio.to_thread(proc.kill)
            await asyncio.to_thread(proc.start)
            await c.events.append("t", [event("e", i, client_event_id=f"e{i}") for i in range(5, 10)])
            await asyncio.wait_for(watcher, 30)
            assert seen == list(range(1, 11))  # every event once, in order, across the reconnect

        run(body, address=proc.address, wait_for_ready=True)
    finally:
        proc.stop()


async def _true(value: bool) -> bool:
    return value


# ---------------------------------------------------------------- artifacts

def test_async_artifacts_round_trip_and_versions(run):
    data = random.Random(7).randbytes(3 * MB + 12345)

    async def body(c):
        held = await c.runs.start("t", create_thread=True)
        v1 = (await c.artifacts.upload("t", "blob.bin", data, content_type="application/octet-stream",
                                       run_id=held.run_id, metadata={"part": 1}, expected_size=len(data))).artifact
        v2 = (await c.artifacts.upload("t", "blob.bin", io.BytesIO(data[::-1]))).artifact
        assert (v1.version, v1.size, v1.run_id, v2.version) == (1, len(data), held.run_id, 2)
        art, got = await c.artifacts.download("t", "blob.bin")
        assert (art.version, got == data[::-1]) == (2, True)  # the latest by default
        out = io.BytesIO()
        art, nothing = await c.artifacts.download("t", "blob.bin", out, version=1)
        assert (art.version, nothing, out.getvalue() == data) == (1, None, True)
        official = await c.artifacts.set_official("t", "blob.bin", 1)
        assert (official.version, official.official) == (1, True)
        assert (await c.artifacts.download("t", "blob.bin"))[1] == data  # the official one wins
        assert (await c.artifacts.get("t", "blob.bin")).version == 1
        assert [(a.version, a.official) async for a in c.artifacts.list("t", name="blob.bin", page_size=1)] == \
            [(1, True), (2, False)]
        assert [a.version async for a in c.artifacts.list("t", run_id=held.run_id)] == [1]
        assert await c.artifacts.set_official("t", "blob.bin", 0) is None
        with expect_error(CODES.NOT_FOUND, "ARTIFACT_NOT_FOUND", field="version"):
            await c.artifacts.get("t", "blob.bin", version=3)
        with expect_error(CODES.NOT_FOUND, "ARTIFACT_NOT_FOUND", field="name"):
            await c.artifacts.download("t", "nope")

    run(body, timeout=120)


# ---------------------------------------------------------------- effects

def test_async_effect_ledger(run):
    async def body(c):
        held = await c.runs.start("t", create_thread=True)
        b = await held.begin_effect("mail:1", description="send", request_digest="sha:abc")
        assert b.effect.state == PENDING and b.token and b.effect.begins == 1
        done = await c.effects.complete("mail:1", b.token, {"message_id": 7})
        assert done.state == DONE and from_value(done.outcome) == {"message_id": 7}
        again = await held.begin_effect("mail:1", request_digest="sha:abc")
        assert again.effect.state == DONE and not again.token
        assert from_value(again.effect.outcome) == {"message_id": 7}
        assert (await c.effects.get("mail:1")).state == DONE
        with expect_error(CODES.FAILED_PRECONDITION, "EFFECT_KEY_REUSED", field="request_digest"):
            await held.begin_effect("mail:1", request_digest="sha:other")
        f = await c.effects.begin("pay:1", held.run_id, held.lease_id)
        failed = await c.effects.fail("pay:1", f.token, "card declined")
        assert (failed.state, failed.error) == (FAILED, "card declined")
        assert sorted([e.idempotency_key async for e in c.effects.list(thread_id="t")]) == ["mail:1", "pay:1"]
        assert [e.idempotency_key async for e in c.effects.list(run_id=held.run_id, states=["failed"])] == ["pay:1"]
        await held.complete()
        later = await c.runs.start("t")
        assert (await later.begin_effect("mail:1")).effect.state == DONE  # another run later still skips it

    run(body)
