"""Retention (docs/lifecycle.md "Retention"): policies, the keep-rules, limits on a put, dry runs, usage, and the
sweeper's small transactions — with an injected clock (the store's, and the checkpoints' creation time)."""
from __future__ import annotations

import hashlib
import os
import time
import uuid

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import Client, NotFound, checkpoint_values
from agentstate.v1 import retention_pb2 as tpb
from sidecar.state import retention
from sidecar.state.retention import Ckpt, Policy
from sidecar.storage import layout

from conftest import InProcess, expect_error

S = 1_000_000  # microseconds


# ----------------------------------------------------------------- the decision (pure)

def chain_of(times: list[int], cns: str = "") -> list[Ckpt]:
    return [Ckpt(f"{cns}/{i:04d}".encode(), cns, f"c{i:04d}", t) for i, t in enumerate(times)]


def doomed_ids(decision) -> list[str]:
    return [c.checkpoint_id for c in decision.doomed]


def test_keep_last_max_age_and_the_head():
    now = 1000 * S
    chain = chain_of([t * S for t in range(100, 110)])  # created at 100 s .. 109 s
    assert doomed_ids(retention.decide({"": chain}, Policy(keep_last=3), now, {})) == [f"c{i:04d}" for i in range(7)]
    # max_age 895 s at 1000 s: created before 105 s go
    assert doomed_ids(retention.decide({"": chain}, Policy(max_age_us=895 * S), now, {})) == [
        f"c{i:04d}" for i in range(5)]
    # everything is too old: the head stays all the same
    d = retention.decide({"": chain}, Policy(max_age_us=1 * S), now, {})
    assert doomed_ids(d) == [f"c{i:04d}" for i in range(9)] and d.kept_by == {"head": 1}
    # a protected checkpoint stays and is counted under its rule
    d = retention.decide({"": chain}, Policy(keep_last=1), now, {("", "c0002"): retention.RUN})
    assert "c0002" not in doomed_ids(d) and len(d.doomed) == 8 and d.kept_by == {"run": 1}


def test_thinning_keeps_the_newest_of_each_window_and_is_stable():
    now = 10_000 * S
    times = [t * S for t in (0, 10, 59, 60, 61, 119, 200, 9_990, 9_995)]
    chain = chain_of(times)
    p = Policy(thin_after_us=100 * S, thin_interval_us=60 * S)
    d = retention.decide({"": chain}, p, now, {})
    # windows of 60 s among those older than 9 900 s: [0,60) -> 59 stays, [60,120) -> 119, [180,240) -> 200
    assert doomed_ids(d) == ["c0000", "c0001", "c0003", "c0004"]
    rest = [c for c in chain if c.key not in {x.key for x in d.doomed}]
    assert retention.decide({"": rest}, p, now, {}).doomed == []


def test_prune_limits_take_the_oldest_removable():
    now = 1000 * S
    chains = {"": chain_of([t * S for t in range(10)]), "sub": chain_of([t * S + 1 for t in range(5)], "sub")}
    p = Policy(max_checkpoints=6, on_limit=retention.PRUNE)
    d = retention.decide(chains, p, now, {("", "c0000"): retention.BRANCH})
    assert len(d.doomed) == 9 and all((c.cns, c.checkpoint_id) != ("", "c0000") for c in d.doomed)
    # refuse mode: the limits never remove anything by themselves
    assert retention.decide(chains, Policy(max_checkpoints=6, on_limit=retention.REFUSE), now, {}).doomed == []
    # bytes: each checkpoint "weighs" 10; the fewest oldest removals that bring it to at most 55
    keys = [c.key for ch in chains.values() for c in ch]
    d = retention.decide(chains, Policy(max_bytes=55, on_limit=retention.PRUNE), now, {},
                         bytes_curve=lambda gone, order: [10 * (len(keys) - len(gone) - k)
                                                          for k in range(len(order) + 1)])
    assert len(d.doomed) == 10


policies = st.builds(
    Policy, keep_last=st.integers(0, 6), max_age_us=st.sampled_from([0, 5 * S, 50 * S]),
    thin_after_us=st.sampled_from([0, 10 * S]), thin_interval_us=st.sampled_from([7 * S, 20 * S]),
    max_checkpoints=st.integers(0, 8), on_limit=st.sampled_from([retention.REFUSE, retention.PRUNE]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["", "a", "b"]), st.lists(st.integers(0, 100), min_size=1, max_size=15),
                       min_size=1), policies, st.sets(st.integers(0, 14), max_size=5), st.integers(50, 200))
def test_decide_invariants(times, policy, protected_at, now_s):
    chains = {cns: chain_of(sorted(t * S for t in ts), cns) for cns, ts in times.items()}
    if not (policy.thin_after_us and policy.thin_interval_us):
        policy = Policy(policy.keep_last, policy.max_age_us, 0, 0, 0, policy.max_checkpoints, 0, policy.on_limit)
    protected = {(cns, c.checkpoint_id): retention.RUN for cns, ch in chains.items() for i, c in enumerate(ch)
                 if i in protected_at}
    d = retention.decide(chains, policy, now_s * S, protected)
    gone = {c.key for c in d.doomed}
    for cns, ch in chains.items():
        assert ch[-1].key not in gone  # the head stays
        for c in ch:
            assert (cns, c.checkpoint_id) not in protected or c.key not in gone
    named = {c for ch in chains.values() for c in retention.named_by_rules(ch, policy, now_s * S)}
    if not (policy.on_limit == retention.PRUNE and policy.max_checkpoints):
        assert {c.checkpoint_id for c in d.doomed} <= named
    else:
        left = sum(len(ch) for ch in chains.values()) - len(gone)
        removable_left = [c for ch in chains.values() for c in ch[:-1]
                          if c.key not in gone and (c.cns, c.checkpoint_id) not in protected]
        assert left <= policy.max_checkpoints or not removable_left
    # applying the policy again to what is left at the same time removes nothing more
    rest = {cns: [c for c in ch if c.key not in gone] for cns, ch in chains.items()}
    assert retention.decide(rest, policy, now_s * S, protected).doomed == []


# ----------------------------------------------------------------- an in-process sidecar with one clock

@pytest.fixture(scope="module")
def local(tmp_path_factory):
    from sidecar.state import checkpoints as ckpt_mod, threads as threads_mod
    from sidecar.storage import records as records_mod
    side = InProcess(tmp_path_factory.mktemp("retention"))
    side.clock.now = int(time.time() * S)
    saved = [(m, m.now_us) for m in (ckpt_mod, records_mod, threads_mod)]
    for m, _ in saved:
        m.now_us = side.clock  # checkpoints, threads and their updates are stamped by the same clock
    side.sidecar.sweeper.retention_interval = 0  # passes run when a test says so
    yield side
    for m, fn in saved:
        m.now_us = fn
    side.close()


@pytest.fixture()
def c(local):
    ns = f"ret-{uuid.uuid4().hex[:8]}"
    with Client(local.address, namespace=ns) as client:
        yield client


def tick(local, seconds: float = 1.0) -> None:
    local.clock.advance(seconds)


def put_chain(local, c, tid: str, n: int, *, every: float = 1.0, cns: str = "", value=None, parent: str = ""):
    ids = []
    for i in range(n):
        tick(local, every)
        r = c.put_checkpoint(tid, {"n": i, **({"v": value} if value is not None else {})}, parent_id=parent,
                             checkpoint_ns=cns)
        parent = r.checkpoint.checkpoint_id
        ids.append(parent)
    return ids


def ids_of(c, tid: str, cns: str | None = None) -> list[str]:
    return sorted(x.checkpoint_id for x in c.list_checkpoints(tid, checkpoint_ns=cns))


def store_digest(local) -> str:
    store = local.sidecar.store
    h = hashlib.sha256()
    with store.read() as txn:
        for name in layout.DB_NAMES:
            for k, v in txn.cursor(db=store.db[name]):
                h.update(name.encode() + bytes(k) + bytes(v))
    return h.hexdigest()


def test_policy_set_get_clear_and_scopes(local, c):
    with expect_error(grpc.StatusCode.NOT_FOUND, "RETENTION_POLICY_NOT_FOUND"):
        c.retention.get_policy()
    r = c.retention.set_policy(keep_last=5, max_age=3600)
    assert r.source == tpb.RETENTION_SOURCE_NAMESPACE and r.effective.keep_last == 5
    assert r.effective.max_age.seconds == 3600 and r.effective.on_limit == tpb.LIMIT_ACTION_REFUSE
    put_chain(local, c, "t1", 1)
    got = c.retention.get_policy("t1")
    assert got.source == tpb.RETENTION_SOURCE_NAMESPACE and got.effective.keep_last == 5
    c.retention.set_policy("t1", keep_last=2)
    got = c.retention.get_policy("t1")
    assert got.source == tpb.RETENTION_SOURCE_THREAD and got.effective.keep_last == 2
    assert not got.effective.HasField("max_age")  # a thread's own replaces its namespace's whole
    c.retention.clear_policy("t1")
    assert c.retention.get_policy("t1").source == tpb.RETENTION_SOURCE_NAMESPACE
    c.retention.clear_policy()
    with expect_error(grpc.StatusCode.NOT_FOUND, "RETENTION_POLICY_NOT_FOUND"):
        c.retention.get_policy("t1")
    with expect_error(grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND", "thread_id"):
        c.retention.set_policy("nope", keep_last=1)


@pytest.mark.parametrize("policy,field", [
    (tpb.RetentionPolicy(), "policy"),
    (tpb.RetentionPolicy(thin_after={"seconds": 60}), "policy.thin_interval"),
    (tpb.RetentionPolicy(thin_interval={"seconds": 60}), "policy.thin_after"),
    (tpb.RetentionPolicy(max_age={"seconds": -1}), "policy.max_age"),
    (tpb.RetentionPolicy(max_age={"nanos": 5}), "policy.max_age"),
    (tpb.RetentionPolicy(keep_last=1, on_limit=9), "policy.on_limit"),
    (tpb.RetentionPolicy(keep_last=1, history_channels=[""]), "policy.history_channels[0]"),
])
def test_bad_policies_are_refused_and_change_nothing(local, c, policy, field):
    before = store_digest(local)
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", field):
        c._call(c.retention.stub.SetRetentionPolicy,
                tpb.SetRetentionPolicyRequest(namespace=c.namespace, policy=policy), None)
    assert store_digest(local) == before


def test_keep_last_and_max_age_with_the_clock(local, c):
    ids = put_chain(local, c, "t", 10, every=10)
    c.retention.set_policy("t", max_age=35)
    # now = the newest's time: the ones created more than 35 s before go (the first 6: 90..40 s old)
    r = c.retention.apply("t")
    assert r.removed_checkpoints == 6 and ids_of(c, "t") == ids[6:]
    tick(local, 3600)
    r = c.retention.apply("t")
    assert ids_of(c, "t") == ids[9:] and r.kept_by_rule["head"] == 1  # the head outlives every rule
    c.retention.set_policy("t", keep_last=2)
    more = put_chain(local, c, "t", 4)
    c.retention.apply("t")
    assert ids_of(c, "t") == more[2:]


def test_thinning_old_history(local, c):
    ids = put_chain(local, c, "t", 12, every=10)  # one every 10 s
    c.retention.set_policy("t", thin_after=30, thin_interval=40)
    dry = c.retention.apply("t", dry_run=True)
    r = c.retention.apply("t")
    assert [x.checkpoint_id for x in r.removed] == [x.checkpoint_id for x in dry.removed]
    left = ids_of(c, "t")
    assert ids[-3:] == left[-3:]  # younger than 30 s: all kept
    assert 0 < r.removed_checkpoints < 9
    assert c.retention.apply("t").removed_checkpoints == 0  # stable


def test_refusal_changes_nothing(local, c):
    put_chain(local, c, "t", 3)
    c.retention.set_policy("t", max_checkpoints=3)
    before = store_digest(local)
    for attempt in range(2):  # with a request id, and its retry
        with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "RETENTION_LIMIT_EXCEEDED", None,
                          limit="max_checkpoints", thread_id="t"):
            c.put_checkpoint("t", {"n": 99, "big": "x" * 5000}, request_id="req-1")
        assert store_digest(local) == before
    # a put that rewrites the same checkpoint adds nothing and is allowed
    head = ids_of(c, "t")[-1]
    c.put_checkpoint("t", {"n": 2}, checkpoint_id=head, parent_id=ids_of(c, "t")[-2])
    # bytes: a limit below what the thread already holds refuses the next put
    charged = c.retention.quota("t").thread_usage.bytes  # max_bytes counts charged bytes (storage/usage.py)
    c.retention.set_policy("t", max_bytes=charged + 100)
    before = store_digest(local)
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "RETENTION_LIMIT_EXCEEDED", None, limit="max_bytes"):
        c.put_checkpoint("t", {"n": 5, "big": os.urandom(20_000).hex()})  # random: no compression helps
    assert store_digest(local) == before


def test_prune_by_policy_on_put(local, c):
    c.put_checkpoint("t", {"n": 0})
    c.retention.set_policy("t", max_checkpoints=3, on_limit="prune")
    ids = put_chain(local, c, "t", 10)
    assert ids_of(c, "t") == ids[-3:]
    # bytes: values of ~20 KB; the thread never holds more than the limit after a put
    c.put_checkpoint("u", {"n": 0})
    c.retention.set_policy("u", max_bytes=100_000, on_limit="prune")
    for i in range(12):
        tick(local)
        c.put_checkpoint("u", {"n": i, "blob": os.urandom(10_000).hex()})
        assert c.retention.usage("u").physical_bytes <= 100_000
    assert 2 <= len(ids_of(c, "u")) < 12


def test_usage_logical_next_to_physical(local, c):
    text = "x" * 1000  # msgpack str 16: 3 header bytes
    for i in range(10):
        c.put_checkpoint("t", {"s": text})
    u = c.retention.usage("t")
    assert u.checkpoints == 10 and u.threads == 1
    assert u.logical_bytes == 10 * 1003
    c.put_checkpoint("t2", {"s": text})
    assert u.physical_bytes == c.retention.usage("t2").physical_bytes  # one value node, stored once
    ns = c.retention.usage()
    assert ns.threads == 2 and ns.logical_bytes == 11 * 1003 and ns.physical_bytes == u.physical_bytes
    # a growing list: logical grows with the square, physical with the length
    for i in range(40):
        c.put_checkpoint("chat", {"m": [f"message {j} " * 20 for j in range(i + 1)]})
    chat = c.retention.usage("chat")
    assert chat.logical_bytes > 10 * chat.physical_bytes


def test_idle_threads_are_deleted_unless_a_run_holds_them(local, c):
    put_chain(local, c, "idle", 3)
    put_chain(local, c, "busy", 2)
    c.runs.start("busy")  # active run
    c.retention.set_policy(delete_idle_thread_after=3600)
    tick(local, 1800)
    assert c.retention.apply().deleted_thread_ids == []
    put_chain(local, c, "fresh", 1)
    tick(local, 1801)
    dry = c.retention.apply(dry_run=True)
    assert list(dry.deleted_thread_ids) == ["idle"]
    r = c.retention.apply()
    assert list(r.deleted_thread_ids) == ["idle"] and r.removed_checkpoints == 3
    with pytest.raises(NotFound):
        c.get_thread("idle")
    assert len(ids_of(c, "busy")) == 2 and len(ids_of(c, "fresh")) == 1


def test_keep_rules_runs_branches_pending_writes(local, c):
    ids = put_chain(local, c, "t", 6)
    # a pending write on an old leaf (a fork from ids[1] left unfinished)
    fork = c.put_checkpoint("t", {"n": -1}, parent_id=ids[1], checkpoint_id="000-fork").checkpoint.checkpoint_id
    c.put_writes("t", fork, [("task", 0, "n", 5)])
    # a FORK run: its branch's fork checkpoint is ids[2]
    c.runs.create("t", strategy="fork", start_checkpoint_id=ids[2], branch_thread_id="t-branch")
    held = c.runs.start("t", start_checkpoint_id=ids[3])
    mine = held.put_checkpoint({"n": 100}, parent_id=ids[5]).checkpoint.checkpoint_id
    c.retention.set_policy("t", keep_last=1)
    dry = c.retention.apply("t", dry_run=True)
    r = c.retention.apply("t")
    assert sorted((x.checkpoint_id for x in r.removed)) == sorted((x.checkpoint_id for x in dry.removed))
    left = set(ids_of(c, "t"))
    assert {fork, ids[2], ids[3], mine} <= left
    assert ids[4] not in left and ids[0] not in left
    assert r.kept_by_rule["run"] >= 1 and r.kept_by_rule["branch"] == 1 and r.kept_by_rule["pending_writes"] == 1
    # once the run is done, its start checkpoint is no longer needed
    held.complete()
    c.retention.apply("t")
    assert ids[3] not in set(ids_of(c, "t"))


# ----------------------------------------------------------------- the sweeper never holds the writer for long

def fill(local, ns: str, tid: str, n: int) -> list[str]:
    """``n`` checkpoints of a thread, each with a pending write, written straight to the store in one setup job."""
    from agentstate import _requests as rq
    from sidecar.api import checkpoints as api_ckpts
    store = local.sidecar.store
    ids, parent = [], ""
    reqs = []
    for i in range(n):
        tick(local, 0.001)
        req = rq.put_checkpoint_request(ns, tid, {"n": i, "msg": f"message {i}"}, checkpoint_id="", parent_id=parent,
                                        base_id="", checkpoint_ns="", metadata=None, extra=None,
                                        expected_head_etag=None, schema_version=0, require_thread=False,
                                        request_id="")
        parent = req.checkpoint_id
        ids.append(parent)
        reqs.append((req, rq.put_writes_request(ns, tid, parent, [("task", 0, "n", i)], "", "")))

    for i in range(0, n, 500):  # setup only: a few big jobs
        part = reqs[i:i + 500]
        store.submit(lambda txn, part=part: [
            (api_ckpts.put_job(store, p)(txn), api_ckpts.writes_job(store, w, api_ckpts.prepare_writes(w))(txn))
            for p, w in part]).result()
    return ids


def longest_hold(local, fn) -> tuple[float, float, object]:
    """Run ``fn()`` (a coroutine factory) on the sidecar's loop, timing every write job it runs: (the longest
    job in CPU time of the writer thread, the longest in wall time, fn's result). The writer runs jobs one at a
    time on its thread, so a job's CPU time is how long it keeps the others waiting; wall time also counts the
    moments the OS gave the core to another process (2 shared cores), which no job size explains."""
    store = local.sidecar.store
    cpu, wall = [], []
    real = store.run

    async def timed_run(job, durability=None):
        def timed(txn):
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                return job(txn)
            finally:
                cpu.append(time.thread_time() - started_cpu)
                wall.append(time.perf_counter() - started)
        return await real(timed, durability)

    store.run = timed_run
    try:
        result = local.run(fn())
    finally:
        del store.run
    return max(cpu), max(wall), result


BIG = 3000
HOLD_LIMIT = 0.005  # seconds of CPU: "a few ms"


def test_a_sweep_of_a_big_thread_never_holds_the_writer_long(local, c):
    from sidecar.api import retention as api_retention
    ids = fill(local, c.namespace, "big", BIG)
    twin = fill(local, c.namespace, "twin", BIG)
    c.retention.set_policy("big", keep_last=1)
    c.retention.set_policy("twin", keep_last=1)
    hold, wall, report = longest_hold(local, lambda: local.sidecar.sweeper.retention(c.namespace))
    assert report.removed_count == 2 * (BIG - 1) and ids_of(c, "big") == ids[-1:] and ids_of(c, "twin") == twin[-1:]
    assert report.jobs >= 2 * (BIG - 1) // 64
    print(f"\nlongest write job of a sweep of 2 x {BIG} checkpoints (with pending writes) in jobs of 64: "
          f"{hold * 1000:.2f} ms CPU, {wall * 1000:.2f} ms wall")
    assert hold < HOLD_LIMIT
    # the same sweep in one transaction holds the writer far longer: this test would catch it
    again = fill(local, c.namespace, "big", BIG - 1)
    hold_one, wall_one, report = longest_hold(local, lambda: api_retention.run_pass(
        local.sidecar.ctx, c.namespace, "big", batch=10 ** 9))
    # the first fill's head (a leaf with a pending write: its step never finished) stays too
    assert report.removed_count == BIG - 2 and ids_of(c, "big") == sorted(ids[-1:] + again[-1:])
    assert report.kept_by == {"pending_writes": 1}
    print(f"the same thread in one transaction: {hold_one * 1000:.2f} ms CPU, {wall_one * 1000:.2f} ms wall")
    assert hold_one > HOLD_LIMIT


def test_writers_go_on_during_a_sweep(local, c):
    import threading
    fill(local, c.namespace, "big", BIG)
    c.retention.set_policy("big", keep_last=1)
    stop = threading.Event()
    latencies = []

    def writer():
        with Client(local.address, namespace=c.namespace) as w:
            while not stop.is_set():
                started = time.perf_counter()
                w.put_checkpoint("other", {"n": 1, "t": time.time()})
                latencies.append(time.perf_counter() - started)

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.2)
        before = len(latencies)
        report = local.run(local.sidecar.sweeper.retention(c.namespace))
        during = len(latencies) - before
    finally:
        stop.set()
        t.join(10)
    assert report.removed_count == BIG - 1
    assert during > 0  # puts were acknowledged while the sweep ran
    assert len(ids_of(c, "big")) == 1


# ----------------------------------------------------------------- random histories

history_ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 2)),       # a put on top of the head of cns 0..2
    st.tuples(st.just("fork"), st.integers(0, 30)),     # a put whose parent is an older checkpoint
    st.tuples(st.just("writes"), st.integers(0, 30)),   # pending writes on some checkpoint
    st.tuples(st.just("run"), st.integers(0, 30)),      # a run starts from some checkpoint (ends the last one)
    st.tuples(st.just("branch"), st.integers(0, 30)),   # a FORK run: a branch from some checkpoint
    st.tuples(st.just("tick"), st.integers(1, 120)),
    st.tuples(st.just("sweep"), st.integers(0, 3)),
    st.tuples(st.sampled_from(["fork", "writes", "run", "sweep"]), st.integers(0, 30)),  # weighted up
), min_size=5, max_size=40).map(lambda ops: ops + [("sweep", 0)])

history_policies = st.builds(
    lambda keep, age, thin, limit: dict(keep_last=keep, max_age=age, thin_after=thin and 30, thin_interval=thin,
                                        max_checkpoints=limit, on_limit="prune" if limit else "refuse"),
    st.sampled_from([1, 2, 4]), st.sampled_from([None, 60, 300]), st.sampled_from([None, 20, 45]),
    st.sampled_from([0, 0, 6]))


def needed(c, local, tid: str) -> dict[tuple[str, str], str]:
    """What the keep-rules protect now, worked out from the API (not from the server's own code)."""
    out = {}
    cps = list(c.list_checkpoints(tid, include_pending_writes=True))
    by_cns: dict[str, list] = {}
    for cp in cps:
        by_cns.setdefault(cp.checkpoint_ns, []).append(cp)
    for cns, group in by_cns.items():
        group.sort(key=lambda cp: cp.checkpoint_id)
        out[(cns, group[-1].checkpoint_id)] = "head"
        parents = {cp.parent_checkpoint_id for cp in group}
        for cp in group:
            if cp.pending_writes and cp.checkpoint_id not in parents:
                out[(cns, cp.checkpoint_id)] = "pending_writes"
    for run in c.runs.list(tid):
        if run.status in (1, 2, 6):  # pending, running, interrupted: still the thread's
            for cid in (run.start_checkpoint_id, run.last_checkpoint_id):
                if cid:
                    out[(run.checkpoint_ns, cid)] = "run"
    for b in c.runs.list_branches(tid):
        out[(b.checkpoint_ns, b.fork_checkpoint_id)] = "branch"
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history_ops, history_policies)
def test_random_histories_keep_what_runs_branches_and_writes_need(local, c, ops, policy):
    tid = f"h-{uuid.uuid4().hex[:8]}"
    c.put_checkpoint(tid, {"n": 0})
    c.retention.set_policy(tid, **policy)
    held = None
    made: list[tuple[str, str]] = []
    nbranch = 0
    for op, arg in ops:
        tick(local)
        existing = [(cp.checkpoint_ns, cp.checkpoint_id) for cp in c.list_checkpoints(tid)]
        pick = existing[arg % len(existing)] if existing else None
        if op == "put":
            cns = ["", "sub", "tools"][arg]
            heads = sorted(cid for n, cid in existing if n == cns)
            if held is not None:  # while a run holds the thread, only it writes
                if cns == "":
                    made.append(("", held.put_checkpoint({"n": arg}, parent_id=heads[-1] if heads else "")
                                 .checkpoint.checkpoint_id))
            else:
                made.append((cns, c.put_checkpoint(tid, {"n": arg}, checkpoint_ns=cns,
                                                   parent_id=heads[-1] if heads else "").checkpoint.checkpoint_id))
        elif op == "fork" and pick and held is None:
            made.append((pick[0], c.put_checkpoint(tid, {"n": -arg}, checkpoint_ns=pick[0], parent_id=pick[1])
                         .checkpoint.checkpoint_id))
        elif op == "writes" and pick and held is None:  # a step in progress on the tip of some fork
            cps = list(c.list_checkpoints(tid))
            parents = {(cp.checkpoint_ns, cp.parent_checkpoint_id) for cp in cps}
            leaves = [(cp.checkpoint_ns, cp.checkpoint_id) for cp in cps
                      if (cp.checkpoint_ns, cp.checkpoint_id) not in parents]
            leaf = leaves[arg % len(leaves)]
            c.put_writes(tid, leaf[1], [(f"task{arg}", 0, "n", arg)], checkpoint_ns=leaf[0])
        elif op == "run" and pick and pick[0] == "":
            if held is not None:
                held.complete()
            held = c.runs.start(tid, start_checkpoint_id=pick[1])
        elif op == "branch" and pick and pick[0] == "":
            nbranch += 1
            c.runs.create(tid, strategy="fork", start_checkpoint_id=pick[1], branch_thread_id=f"{tid}-b{nbranch}")
        elif op == "sweep":
            protect = needed(c, local, tid)
            before = set(ids_of(c, tid))
            dry = c.retention.apply(tid, dry_run=True)
            real = c.retention.apply(tid)
            assert sorted((x.checkpoint_ns, x.checkpoint_id) for x in dry.removed) == \
                sorted((x.checkpoint_ns, x.checkpoint_id) for x in real.removed)
            after = {(cp.checkpoint_ns, cp.checkpoint_id) for cp in c.list_checkpoints(tid)}
            for key, rule in protect.items():
                assert key in after, f"{key} ({rule}) was removed"
            assert {x.checkpoint_id for x in real.removed} <= before
            for cns, cid in after:  # what is left reads whole
                c.get_checkpoint(tid, cid, checkpoint_ns=cns)
    if held is not None:
        held.complete()


def test_gc_reclaims_what_retention_removed(local, c):
    for i in range(5):
        tick(local)
        c.put_checkpoint("t", {"blob": os.urandom(30_000).hex()})
    before = c.retention.usage("t").physical_bytes
    c.retention.set_policy("t", keep_last=1)
    assert c.retention.apply("t").removed_checkpoints == 4
    after = c.retention.usage("t").physical_bytes
    assert after < before / 4
    freed = c.collect_garbage()
    assert freed.freed_bytes >= (before - after) * 0.9  # the removed values' nodes, nothing else of theirs left
    report = c.check_integrity()
    assert report.missing_blobs == 0 and not report.problems
    assert len(checkpoint_values(c.get_checkpoint("t"))["blob"]) == 60_000


def test_a_deleted_threads_policy_goes_and_a_new_thread_of_that_id_starts_clean(local, c):
    c.put_checkpoint("t", {"n": 1})
    c.retention.set_policy("t", keep_last=1)
    c.retention.set_policy(keep_last=3)
    rows = local.rows("retpol")
    c.delete_thread("t")
    c.put_checkpoint("t", {"n": 2})  # the same id, another thread
    assert c.retention.get_policy("t").source == tpb.RETENTION_SOURCE_NAMESPACE
    c.retention.apply()
    assert local.rows("retpol") == rows - 1
    assert c.retention.get_policy("t").effective.keep_last == 3


def test_a_thread_whose_branch_runs_is_not_idle(local, c):
    put_chain(local, c, "parent", 2)
    c.runs.create("parent", strategy="fork", branch_thread_id="parent-b")
    c.retention.set_policy("parent", delete_idle_thread_after=60)
    tick(local, 3600)
    assert c.retention.apply().deleted_thread_ids == []
    assert len(ids_of(c, "parent")) == 2


def test_the_async_client_has_the_same_calls(local, c):
    import asyncio
    from agentstate import AsyncClient

    async def go():
        async with AsyncClient(local.address, namespace=c.namespace) as a:
            for i in range(4):
                await a.put_checkpoint("t", {"n": i})
            await a.retention.set_policy("t", keep_last=2)
            assert (await a.retention.get_policy("t")).effective.keep_last == 2
            assert (await a.retention.apply("t", dry_run=True)).removed_checkpoints == 2
            assert (await a.retention.apply("t")).removed_checkpoints == 2
            assert (await a.retention.usage("t")).checkpoints == 2
            await a.retention.clear_policy("t")

    asyncio.run(go())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["put", "put", "rewrite", "writes", "prune", "refused"]),
                          st.integers(0, 5)), min_size=3, max_size=25))
def test_the_thread_counter_equals_a_recount(local, c, ops):
    """max_bytes reads the thread's usage counter (storage/usage.py), kept by every write: it equals a recount
    after any sequence of puts, rewrites, pending writes, prunes and refused puts."""
    from sidecar.ops import retention as ret_ops
    from sidecar.storage import usage
    store = local.sidecar.store
    tid = f"fp-{uuid.uuid4().hex[:8]}"
    pool = [os.urandom(3000).hex() for _ in range(6)]
    c.put_checkpoint(tid, {"v": pool[0]})
    c.retention.set_policy(tid, max_bytes=10 ** 12)
    for op, arg in ops:
        ids = ids_of(c, tid)
        if op == "put":
            c.put_checkpoint(tid, {"v": pool[arg], "w": pool[(arg + 1) % 6]})
        elif op == "rewrite":  # the same id, other values
            c.put_checkpoint(tid, {"v": pool[(arg + 2) % 6]}, checkpoint_id=ids[arg % len(ids)])
        elif op == "writes":
            c.put_writes(tid, ids[arg % len(ids)], [(f"t{arg}", 0, "v", pool[arg])])
        elif op == "prune":
            c.prune([tid], keep_latest=1 + arg)
        elif op == "refused":  # a put refused by a tight limit: its transaction (seen by the check) is dropped
            c.retention.set_policy(tid, max_bytes=1)
            with pytest.raises(Exception):
                c.put_checkpoint(tid, {"v": pool[arg] + "x"})
            c.retention.set_policy(tid, max_bytes=10 ** 12)
        with store.read() as txn:
            rec = ret_ops.records.thread(txn, store, c.namespace, tid)
            counted = usage.thread(txn, store, rec.tkey)
            again = usage.recount(txn, store)
        assert again.problems == [], op
        assert (counted.nbytes, counted.checkpoints) == (again.threads[rec.tkey].nbytes,
                                                         again.threads[rec.tkey].checkpoints), op
        assert counted.checkpoints == len(ids_of(c, tid)), op


def test_history_channels_keep_the_parent_chain_a_rebuild_needs(local, c):
    first = c.put_checkpoint("t", {"m": ["hello"]}).checkpoint.checkpoint_id
    parent, ids = first, [first]
    for i in range(4):  # later checkpoints hold no value of "m": a rebuild walks back to the first
        tick(local)
        parent = c.put_checkpoint("t", {"n": i}, parent_id=parent).checkpoint.checkpoint_id
        ids.append(parent)
    c.retention.set_policy("t", keep_last=1, history_channels=["m"])
    r = c.retention.apply("t")
    assert r.removed_checkpoints == 0 and r.kept_by_rule["history"] == 4
    assert ids_of(c, "t") == sorted(ids)
    c.retention.set_policy("t", keep_last=1)
    assert c.retention.apply("t").removed_checkpoints == 4


def test_the_state_layers_numbers_are_the_protos():
    assert (retention.REFUSE, retention.PRUNE) == (tpb.LIMIT_ACTION_REFUSE, tpb.LIMIT_ACTION_PRUNE)
    assert (retention.SOURCE_NONE, retention.SOURCE_NAMESPACE, retention.SOURCE_THREAD) == (
        tpb.RETENTION_SOURCE_NONE, tpb.RETENTION_SOURCE_NAMESPACE, tpb.RETENTION_SOURCE_THREAD)
    assert set(retention.KEEP_RULES) == {"head", "run", "branch", "pending_writes", "history"}
