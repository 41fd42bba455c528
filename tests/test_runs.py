"""Runs: status machine, the five multitask strategies (also under real concurrency: several client
processes), leases and the watchdog (expiry, re-queue, hold, restart), timeouts, steps and budgets,
branches, and "a write from a run that is not the active one fails and changes nothing"."""
from __future__ import annotations

import multiprocessing as mp
import time
import traceback
import uuid

import grpc
import pytest
from conftest import SidecarProcess, expect_error, store_state

from agentstate import Append, Client, FailedPrecondition, NotFound, event, status_name, step
from agentstate.v1 import threads_pb2 as tpb

CODES = grpc.StatusCode
LEASE = 1.0  # seconds; short so that expiry tests stay quick
WATCHDOG = "0.05"


@pytest.fixture(scope="module")
def runs_sidecar(tmp_path_factory):
    proc = SidecarProcess(tmp_path_factory.mktemp("runs") / "data", "--lease-timeout", "30",
                          "--watchdog-interval", WATCHDOG).start()
    yield proc
    proc.stop()


@pytest.fixture
def c(runs_sidecar):
    with runs_sidecar.client(namespace=f"ns-{uuid.uuid4().hex[:12]}") as client:
        yield client


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.05):
    """Poll until ``predicate()`` is truthy (generous bound: the watchdog acts within ~0.1 s)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def status(c: Client, run_id: str) -> str:
    return status_name(c.runs.get(run_id).status)


def event_types(c: Client, thread_id: str) -> list[str]:
    return [e.type for e in c.events.list(thread_id)]


def head_of(c: Client, thread_id: str):
    """The thread's latest checkpoint (roots only), or None."""
    try:
        return c.get_checkpoint(thread_id, omit_values=True)
    except NotFound:
        return None


# ---------------------------------------------------------------- the status machine

def test_run_lifecycle_and_thread_status(c):
    c.create_thread("t")
    assert c.get_thread("t").status == tpb.THREAD_STATUS_IDLE
    created = c.runs.create("t", input={"q": 1}, metadata={"who": "me"})
    run = created.run
    assert (status_name(run.status), run.active, run.attempt) == ("pending", True, 1)
    assert c.get_thread("t").status == tpb.THREAD_STATUS_BUSY
    held = c.runs.claim(run_id=run.run_id)
    assert status(c, run.run_id) == "running" and held.lease_id
    put = held.put_checkpoint({"x": 1}, metadata={"step": 0})
    assert held.heartbeat().last_checkpoint_id == put.checkpoint.checkpoint_id
    # the checkpoint is indexed under the run (DeleteCheckpointsForRuns sees it)
    assert [cp.checkpoint_id for cp in c.list_checkpoints("t")] == [put.checkpoint.checkpoint_id]
    done = held.complete({"answer": 42})
    assert status_name(done.run.status) == "success" and not done.run.active and done.next_run_id == ""
    assert c.get_thread("t").status == tpb.THREAD_STATUS_IDLE
    types = event_types(c, "t")
    assert types == ["agentstate.run.created", "agentstate.run.activated", "agentstate.run.started",
                     "agentstate.run.success"]
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="success"):
        held.heartbeat()
    failing = c.runs.start("t")
    failing.fail("boom")
    assert c.get_thread("t").status == tpb.THREAD_STATUS_ERROR
    assert c.runs.get(failing.run_id).error == "boom"
    assert [status_name(r.status) for r in c.runs.list("t")] == ["success", "error"]
    assert [r.run_id for r in c.runs.list("t", statuses=["error"])] == [failing.run_id]


def test_create_run_checks(c):
    with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND", field="thread_id"):
        c.runs.create("missing")
    r = c.runs.create("t", create_thread=True, run_id="r1")
    with expect_error(CODES.ALREADY_EXISTS, "RUN_ALREADY_EXISTS", field="run_id"):
        c.runs.create("t", run_id="r1", strategy="enqueue")
    with expect_error(CODES.NOT_FOUND, "CHECKPOINT_NOT_FOUND", field="start_checkpoint_id"):
        c.runs.create("t", strategy="enqueue", start_checkpoint_id="nope")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="lease_timeout"):
        c.runs.create("t", strategy="enqueue", lease_timeout=0.01)
    with expect_error(CODES.NOT_FOUND, "RUN_NOT_FOUND", field="run_id"):
        c.runs.get("nope")
    assert c.runs.create("t", strategy="enqueue", request_id="same").run.run_id == \
        c.runs.create("t", strategy="enqueue", request_id="same").run.run_id  # a retry, not a second run
    assert c.runs.get(r.run.run_id).active


# ---------------------------------------------------------------- strategies, one client

def test_reject_names_the_active_run(c):
    first = c.runs.start("t", create_thread=True)
    with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=first.run_id, status="running"):
        c.runs.create("t", strategy="reject")
    with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=first.run_id):
        c.runs.create("t")  # unspecified behaves as reject
    assert [r.run_id for r in c.runs.list("t")] == [first.run_id]


def test_enqueue_is_fifo_and_hands_the_thread_on(c):
    first = c.runs.start("t", create_thread=True)
    queued = [c.runs.create("t", strategy="enqueue").run for _ in range(3)]
    assert [r.queue_position for r in queued] == [1, 2, 3]
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="pending"):
        c.runs.claim(run_id=queued[1].run_id)  # not its turn
    c.runs.cancel(queued[1].run_id)  # a queued run can be cancelled: it leaves the queue
    assert c.runs.get(queued[2].run_id).queue_position == 2
    assert first.complete().next_run_id == queued[0].run_id
    second = c.runs.claim(thread_id="t")
    assert second.run_id == queued[0].run_id
    assert second.complete().next_run_id == queued[2].run_id
    assert status(c, queued[1].run_id) == "cancelled"


def test_claim_waits_for_its_turn(c):
    first = c.runs.start("t", create_thread=True)
    queued = c.runs.create("t", strategy="enqueue").run
    import threading

    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("held", c.runs.claim(run_id=queued.run_id, wait=20)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # still queued
    first.complete()
    waiter.join(20)
    assert got["held"].run_id == queued.run_id and status(c, queued.run_id) == "running"


def test_interrupt_stops_the_holder_and_keeps_its_checkpoints(c):
    old = c.runs.start("t", create_thread=True)
    kept = old.put_checkpoint({"x": 1})
    new = c.runs.create("t", strategy="interrupt", claim=True)
    assert new.stopped_run_id == old.run_id
    run = c.runs.get(old.run_id)
    assert (status_name(run.status), run.stopped_by, run.active) == ("interrupted", new.run.run_id, False)
    # the new run starts from the latest state, which the old run's checkpoint still is
    assert new.lease.resume_checkpoint_id == kept.checkpoint.checkpoint_id
    before = store_state(c, "t")
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="interrupted"):
        old.put_checkpoint({"x": 2}, parent_id=kept.checkpoint.checkpoint_id)
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
        old.put_writes(kept.checkpoint.checkpoint_id, [("task", 0, "x", 5)])
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
        old.append_events([event("late")])
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
        old.complete()
    assert store_state(c, "t") == before  # refused writes changed nothing
    assert c.get_checkpoint("t").checkpoint_id == kept.checkpoint.checkpoint_id


def test_rollback_removes_the_stopped_runs_work(c):
    base = c.put_checkpoint("t", {"x": 0})
    old = c.runs.start("t")
    a = old.put_checkpoint({"x": 1}, parent_id=base.checkpoint.checkpoint_id, events=[event("mine")],
                           steps=[step("tool", "t1", counters={"requests": 1})])
    old.put_writes(base.checkpoint.checkpoint_id, [("task", 0, "x", 9)])
    old.put_checkpoint({"x": 2}, parent_id=a.checkpoint.checkpoint_id)
    eff = old.begin_effect("rb-effect")
    new = c.runs.create("t", strategy="rollback", claim=True)
    run = c.runs.get(old.run_id)
    assert (status_name(run.status), run.rolled_back, run.stopped_by) == ("cancelled", True, new.run.run_id)
    assert [cp.checkpoint_id for cp in c.list_checkpoints("t")] == [base.checkpoint.checkpoint_id]
    assert new.lease.resume_checkpoint_id == base.checkpoint.checkpoint_id
    assert not c.get_checkpoint("t", include_pending_writes=True).pending_writes
    assert not list(c.events.list("t", run_id=old.run_id))
    assert "agentstate.run.rolled_back" in event_types(c, "t")
    # steps and effects are kept: they record what happened outside the thread
    assert [s.name for s in c.runs.list_steps(old.run_id)] == ["t1"]
    assert c.effects.get("rb-effect").run_id == old.run_id and eff.token
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="cancelled"):
        old.heartbeat()


def test_unchecked_writes_wait_for_the_holder(c):
    held = c.runs.start("t", create_thread=True)
    base = held.put_checkpoint({"x": 1})
    before = store_state(c, "t")
    with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=held.run_id):
        c.put_checkpoint("t", {"x": 2})
    with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=held.run_id):
        c.put_writes("t", base.checkpoint.checkpoint_id, [("task", 0, "x", 1)])
    assert store_state(c, "t") == before
    # a stale expected head fails a run's put too, and changes nothing
    with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH"):
        held.put_checkpoint({"x": 3}, expected_head_etag="")
    held.complete()
    c.put_checkpoint("t", {"x": 2})  # no holder: fine again


def test_lease_lost_for_a_replaced_lease(c):
    held = c.runs.start("t", create_thread=True, lease_timeout=LEASE)
    wait_for(lambda: status(c, held.run_id) == "pending")  # expired and re-queued
    again = c.runs.claim(run_id=held.run_id)
    again.keep_alive(0.1)
    assert again.lease_id != held.lease_id and again.run.attempt == 2
    with expect_error(CODES.FAILED_PRECONDITION, "LEASE_LOST", field="lease_id"):
        held.put_checkpoint({"x": 1})
    with expect_error(CODES.FAILED_PRECONDITION, "LEASE_LOST"):
        held.heartbeat()
    again.put_checkpoint({"x": 1})


def test_fork_runs_on_a_branch_and_promotes(c):
    base = c.put_checkpoint("t", {"msgs": ["a"]})
    main = c.runs.start("t")
    forked = c.runs.start("t", strategy="fork", start_checkpoint_id=base.checkpoint.checkpoint_id,
                          branch_thread_id="t-b1")
    assert forked.thread_id == "t-b1" and forked.run.branch_of == "t"
    assert forked.resume_checkpoint_id == base.checkpoint.checkpoint_id
    main.put_checkpoint({"msgs": ["a", "main"]}, parent_id=base.checkpoint.checkpoint_id)
    bput = forked.put_checkpoint({"msgs": ["a", "branch"]}, parent_id=base.checkpoint.checkpoint_id)
    assert c.get_values("t")["msgs"] == ["a", "main"] and c.get_values("t-b1")["msgs"] == ["a", "branch"]
    branches = list(c.runs.list_branches("t"))
    assert [(b.branch_thread_id, b.fork_checkpoint_id, b.head_checkpoint_id, b.run_id) for b in branches] == \
        [("t-b1", base.checkpoint.checkpoint_id, bput.checkpoint.checkpoint_id, forked.run_id)]
    with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=main.run_id):
        c.runs.promote("t", "t-b1")
    main.complete()
    with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=forked.run_id):
        c.runs.promote("t", "t-b1")
    forked.complete()
    with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH"):
        c.runs.promote("t", "t-b1", expected_head_etag="stale")
    head = c.get_checkpoint("t", omit_values=True)
    promoted = c.runs.promote("t", "t-b1", expected_head_etag=head.etag)
    new_head = c.get_checkpoint("t")
    assert new_head.checkpoint_id == promoted.checkpoint_id and new_head.etag == promoted.etag
    assert new_head.parent_checkpoint_id == bput.checkpoint.checkpoint_id
    assert c.get_values("t")["msgs"] == ["a", "branch"]
    assert list(c.runs.list_branches("t"))[0].HasField("promote_time")
    with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND", field="branch_thread_id"):
        c.runs.promote("t", "nope")


def test_cancel_active_run_and_resume_rules(c):
    held = c.runs.start("t", create_thread=True)
    nxt = c.runs.create("t", strategy="enqueue").run
    resp = c.runs.cancel(held.run_id, "operator said so")
    assert resp.next_run_id == nxt.run_id and status_name(resp.run.status) == "cancelled"
    assert c.runs.cancel(held.run_id).run.error == "operator said so"  # idempotent
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
        held.put_checkpoint({"x": 1})
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="pending"):
        c.runs.resume(nxt.run_id)
    c.runs.claim(run_id=nxt.run_id).complete()
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="success"):
        c.runs.cancel(nxt.run_id)


# ---------------------------------------------------------------- leases, watchdog, timeouts

def test_lease_expiry_requeues_from_the_last_checkpoint_then_holds(c):
    held = c.runs.start("t", create_thread=True, lease_timeout=LEASE, max_attempts=2)
    cp = held.put_checkpoint({"x": 1})
    wait_for(lambda: status(c, held.run_id) == "pending")
    types = event_types(c, "t")
    assert types[-2:] == ["agentstate.run.interrupted", "agentstate.run.requeued"]
    again = c.runs.claim(thread_id="t")
    assert (again.run_id, again.run.attempt, again.resume_checkpoint_id) == \
        (held.run_id, 2, cp.checkpoint.checkpoint_id)
    # out of attempts: held for an operator, the thread shows it
    run = wait_for(lambda: (r := c.runs.get(held.run_id)).status != again.run.status and r)
    assert (status_name(run.status), run.held, run.active) == ("interrupted", True, True)
    assert c.get_thread("t").status == tpb.THREAD_STATUS_INTERRUPTED
    with expect_error(CODES.FAILED_PRECONDITION, "THREAD_BUSY", run_id=held.run_id, status="interrupted"):
        c.runs.create("t")
    c.put_checkpoint("t", {"x": "fixed by hand"}, parent_id=cp.checkpoint.checkpoint_id)  # allowed: nobody holds it
    resumed = c.runs.resume(held.run_id)
    assert (status_name(resumed.status), resumed.attempt) == ("pending", 3)
    final = c.runs.claim(run_id=held.run_id)
    final.keep_alive(0.1)
    final.heartbeat()
    final.complete()
    assert c.get_thread("t").status == tpb.THREAD_STATUS_IDLE


def test_hold_policy_and_heartbeats_keep_a_lease(c):
    held = c.runs.start("t", create_thread=True, lease_timeout=1.0, on_lease_expired="hold")
    stop = held.keep_alive(0.1)
    time.sleep(2.5)
    assert status(c, held.run_id) == "running"  # heartbeats kept it
    stop.set()
    run = wait_for(lambda: (r := c.runs.get(held.run_id)).held and r)
    assert status_name(run.status) == "interrupted" and "operator" in run.error
    assert held.lost is None


def test_run_timeout(c):
    held = c.runs.start("t", create_thread=True, timeout_seconds=0.5)
    queued = c.runs.create("t", strategy="enqueue").run
    run = wait_for(lambda: (r := c.runs.get(held.run_id)) and status_name(r.status) != "running" and r)
    assert status_name(run.status) == "timeout" and "timeout" in run.error
    assert c.runs.get(queued.run_id).active
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE", status="timeout"):
        held.put_checkpoint({"x": 1})


def test_watchdog_survives_a_restart(tmp_path):
    """Leases are stored: after a SIGKILL and restart, a running lease gets one more lease timeout (the holder
    could not heartbeat meanwhile), then expires and the run is re-queued."""
    proc = SidecarProcess(tmp_path / "data", "--watchdog-interval", WATCHDOG).start()
    try:
        with proc.client() as c:
            held = c.runs.start("t", create_thread=True, lease_timeout=2.0)
            proc.kill()
            time.sleep(2.5)  # the lease is past due while the sidecar is down
            proc.start()
        with proc.client() as c:
            held.client = c
            assert status(c, held.run_id) == "running"  # grace after the restart
            wait_for(lambda: status(c, held.run_id) == "pending")
            again = c.runs.claim(thread_id="t")
            assert again.run.attempt == 2
            with expect_error(CODES.FAILED_PRECONDITION, "LEASE_LOST"):
                held.heartbeat()
    finally:
        proc.stop()


# ---------------------------------------------------------------- steps and budgets

def test_steps_counters_and_budgets(c):
    held = c.runs.start("t", create_thread=True, budget={"tokens_in": 100, "cost": 1.0})
    s1 = held.start_step("model", "gpt", input={"prompt": "hi"}, input_digest="sha:1",
                         counters={"tokens_in": 40, "requests": 1})
    assert not s1.HasField("end_time") and s1.counters.tokens_in == 40
    with expect_error(CODES.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED", budget="tokens_in"):
        held.record_step("model", "too-big", counters={"tokens_in": 61})
    ended = held.end_step(s1.step_id, output={"text": "hello"}, counters={"tokens_in": 45, "tokens_out": 7,
                                                                          "cost": 0.25, "requests": 1})
    assert ended.HasField("end_time") and ended.output.body.msgpack
    with expect_error(CODES.FAILED_PRECONDITION, "STEP_ENDED"):
        held.end_step(s1.step_id)
    with expect_error(CODES.ALREADY_EXISTS, "STEP_ALREADY_EXISTS"):
        held.record_step("tool", "x", step_id=s1.step_id)
    held.record_step("tool", "search", counters={"cost": 0.5, "requests": 1})
    usage = c.runs.get(held.run_id).usage
    assert (usage.tokens_in, usage.tokens_out, usage.cost, usage.requests) == (45, 7, 0.75, 2)
    # a step recorded with a checkpoint counts too, in the same transaction
    held.put_checkpoint({"x": 1}, steps=[step("model", "m2", counters={"tokens_in": 55})])
    with expect_error(CODES.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED", budget="tokens_in"):
        held.start_step("model", "used-up")  # tokens_in is used up
    before = store_state(c, "t")
    with expect_error(CODES.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED"):
        held.put_checkpoint({"x": 2}, steps=[step("tool", "pricy", counters={"cost": 0.3})])
    assert store_state(c, "t") == before
    assert [s.name for s in c.runs.list_steps(held.run_id, page_size=2)] == ["gpt", "search", "m2"]
    held.complete()
    other = c.runs.start("t")
    other.record_step("model", "x", counters={"tokens_in": 5})
    total = c.runs.thread_usage("t")
    assert (total.usage.tokens_in, total.runs, total.steps) == (105, 2, 4)


def test_deleting_a_thread_removes_its_runs(c):
    held = c.runs.start("t", create_thread=True, lease_timeout=LEASE)
    held.record_step("tool", "x")
    c.delete_thread("t")
    with expect_error(CODES.NOT_FOUND, "RUN_NOT_FOUND"):
        c.runs.get(held.run_id)
    time.sleep(LEASE * 2)  # its lease timer went with it: the watchdog finds nothing to do
    c.create_thread("t")
    assert list(c.runs.list("t")) == [] and list(c.events.list("t")) == []


# ---------------------------------------------------------------- real concurrency: several processes

def _in_process(target, args, queue):
    try:
        queue.put((args[0], "ok", target(*args)))
    except BaseException:  # noqa: BLE001 - reported to the parent
        queue.put((args[0], "error", traceback.format_exc()))


def run_processes(target, args_list, timeout: float = 120.0) -> dict:
    """Run ``target(*args, barrier)`` in one spawned process per args tuple (the barrier lets them start
    their work together, whatever their start-up times); returns {args[0]: result}."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    barrier = ctx.Barrier(len(args_list))
    procs = [ctx.Process(target=_in_process, args=(target, (*args, barrier), queue)) for args in args_list]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < len(procs):
            key, kind, value = queue.get(timeout=max(0.1, deadline - time.monotonic()))
            assert kind == "ok", f"worker {key} failed:\n{value}"
            results[key] = value
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return results


def _worker_enqueue(index, address, ns, thread_id, puts, barrier):
    with Client(address, namespace=ns) as c:
        c.wait_ready()
        barrier.wait(60)
        held = c.runs.start(thread_id, strategy="enqueue", metadata={"worker": index}, wait=60)
        ids = []
        for i in range(puts):
            head = head_of(c, thread_id)
            put = held.put_checkpoint({"log": f"{index}:{i}"}, parent_id=head.checkpoint_id if head else "",
                                      expected_head_etag=head.etag if head else "")
            ids.append(put.checkpoint.checkpoint_id)
            time.sleep(0.01)
        held.complete()
        return held.run_id, ids


def test_enqueue_under_concurrency(c, runs_sidecar):
    c.create_thread("t")
    n, puts = 4, 3
    results = run_processes(_worker_enqueue, [(i, runs_sidecar.address, c.namespace, "t", puts) for i in range(n)])
    runs = {r.run_id: r for r in c.runs.list("t")}
    assert len(runs) == n and all(status_name(r.status) == "success" for r in runs.values())
    # one at a time, in creation (queue) order
    order = sorted(runs.values(), key=lambda r: r.start_time.ToNanoseconds())
    assert [r.run_id for r in order] == [r.run_id for r in c.runs.list("t")]
    for a, b in zip(order, order[1:]):
        assert a.end_time.ToNanoseconds() <= b.start_time.ToNanoseconds()
    # the chain is linear and each run's checkpoints are contiguous in it
    chain = [cp for cp in c.list_checkpoints("t")][::-1]
    assert len(chain) == n * puts
    for prev, cp in zip(chain, chain[1:]):
        assert cp.parent_checkpoint_id == prev.checkpoint_id
    expected = [cid for r in order for cid in dict(results.values())[r.run_id]]
    assert [cp.checkpoint_id for cp in chain] == expected


def _worker_reject(index, address, ns, thread_id, barrier):
    with Client(address, namespace=ns) as c:
        c.wait_ready()
        barrier.wait(60)
        try:
            resp = c.runs.create(thread_id, strategy="reject", claim=True)
            return ("won", resp.run.run_id)
        except FailedPrecondition as e:
            return ("busy", e.reason, e.metadata.get("run_id"))


def test_reject_under_concurrency(c, runs_sidecar):
    c.create_thread("t")
    results = run_processes(_worker_reject, [(i, runs_sidecar.address, c.namespace, "t") for i in range(4)])
    outcomes = list(results.values())
    winners = [o for o in outcomes if o[0] == "won"]
    assert len(winners) == 1, outcomes
    assert all(o == ("busy", "THREAD_BUSY", winners[0][1]) for o in outcomes if o[0] == "busy"), outcomes
    assert [r.run_id for r in c.runs.list("t")] == [winners[0][1]]


def _worker_displace(index, address, ns, thread_id, strategy, rounds, puts, barrier):
    """Start runs that displace each other; record every acknowledged and every refused put."""
    acked, refused = [], []
    with Client(address, namespace=ns) as c:
        c.wait_ready()
        barrier.wait(60)
        for r in range(rounds):
            held = c.runs.start(thread_id, strategy=strategy)
            for i in range(puts):
                try:
                    head = head_of(c, thread_id)
                    put = held.put_checkpoint({"v": f"{index}.{r}.{i}"}, parent_id=head.checkpoint_id if head else "",
                                              expected_head_etag=head.etag if head else "")
                    acked.append((held.run_id, put.checkpoint.checkpoint_id))
                except FailedPrecondition as e:
                    refused.append((held.run_id, e.reason))
                    break
                time.sleep(0.02)
            else:
                try:
                    held.complete()
                except FailedPrecondition as e:
                    refused.append((held.run_id, e.reason))
    return acked, refused


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_interrupt_and_rollback_under_concurrency(c, runs_sidecar, strategy):
    c.create_thread("t")
    n, rounds, puts = 3, 4, 6
    results = run_processes(_worker_displace, [(i, runs_sidecar.address, c.namespace, "t", strategy, rounds, puts)
                                               for i in range(n)])
    acked = [a for res in results.values() for a in res[0]]
    run_of = {cid: run_id for run_id, cid in acked}
    refused = [r for res in results.values() for r in res[1]]
    runs = {r.run_id: r for r in c.runs.list("t")}
    assert len(runs) == n * rounds
    assert not [r for r in runs.values() if r.active]  # every run ended
    # every refusal is a refusal of a run that had been stopped
    for run_id, reason in refused:
        assert reason in ("RUN_NOT_ACTIVE", "LEASE_LOST"), reason
        assert status_name(runs[run_id].status) in ("interrupted", "cancelled") and runs[run_id].stopped_by
    chain = [cp for cp in c.list_checkpoints("t")][::-1]
    for prev, cp in zip(chain, chain[1:]):
        assert cp.parent_checkpoint_id == prev.checkpoint_id  # linear: nobody extended a stale head
    by_run = [run_of[cp.checkpoint_id] for cp in chain]  # KeyError: a checkpoint nobody was told about
    segments = [r for i, r in enumerate(by_run) if i == 0 or by_run[i - 1] != r]
    assert len(segments) == len(set(segments))  # each run's checkpoints are contiguous
    kept = {cid for run_id, cid in acked if not runs[run_id].rolled_back}
    assert {cp.checkpoint_id for cp in chain} == kept  # every acknowledged put survives unless rolled back
    if strategy == "interrupt":
        assert not [r for r in runs.values() if r.rolled_back]
    else:
        rolled = [r for r in runs.values() if r.rolled_back]
        assert rolled and all(status_name(r.status) == "cancelled" for r in rolled)
        assert not [e for e in c.events.list("t") if e.run_id in {r.run_id for r in rolled}
                    and not e.type.startswith("agentstate.")]
    assert refused, "the processes never displaced each other mid-run; the test proved nothing"


def _worker_fork(index, address, ns, thread_id, base_id, puts, barrier):
    with Client(address, namespace=ns) as c:
        c.wait_ready()
        barrier.wait(60)
        held = c.runs.start(thread_id, strategy="fork", start_checkpoint_id=base_id, branch_thread_id=f"b{index}")
        parent = base_id
        for i in range(puts):
            parent = held.put_checkpoint({"msgs": Append([f"{index}.{i}"])},
                                         parent_id=parent).checkpoint.checkpoint_id
        held.complete()
        return held.thread_id, parent


def test_fork_under_concurrency(c, runs_sidecar):
    base = c.put_checkpoint("t", {"msgs": ["base"]})
    main = c.runs.start("t")  # a run holds the main line meanwhile
    n, puts = 3, 4
    results = run_processes(_worker_fork, [(i, runs_sidecar.address, c.namespace, "t", base.checkpoint.checkpoint_id,
                                            puts) for i in range(n)])
    assert c.get_values("t")["msgs"] == ["base"]  # the main line is untouched
    branches = {b.branch_thread_id: b for b in c.runs.list_branches("t")}
    assert set(branches) == {f"b{i}" for i in range(n)}
    for i in range(n):
        assert branches[f"b{i}"].head_checkpoint_id == results[i][1]
        assert c.get_values(f"b{i}")["msgs"] == ["base"] + [f"{i}.{k}" for k in range(puts)]
    main.complete()
    c.runs.promote("t", "b1")
    assert c.get_values("t")["msgs"] == ["base"] + [f"1.{k}" for k in range(puts)]
    assert c.get_values("b2")["msgs"][-1] == f"2.{puts - 1}"  # other branches unchanged


def test_longest_identifiers_fit_every_key(runs_sidecar):
    """Namespace, thread, run, step ids and event ids at their limits: every key stays under LMDB's 511 bytes."""
    from sidecar import limits
    ns, long_id = "n" * limits.MAX_NAMESPACE_BYTES, "\u00e9" * (limits.MAX_ID_BYTES // 2)  # 2 UTF-8 bytes each
    with runs_sidecar.client(namespace=ns) as c:
        held = c.runs.start(long_id, run_id=long_id, create_thread=True, lease_timeout=30)
        held.record_step("tool", long_id, step_id=long_id)
        held.append_events([event("e", client_event_id=long_id)])
        held.begin_effect(long_id)
        c.artifacts.upload(long_id, long_id, b"x", run_id=long_id, step_id=long_id)
        held.put_checkpoint({"x": 1})
        assert [s.step_id for s in c.runs.list_steps(long_id)] == [long_id]
        held.complete()
        c.delete_thread(long_id)
        with expect_error(CODES.NOT_FOUND, "RUN_NOT_FOUND"):
            c.runs.get(long_id)
