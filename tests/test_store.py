"""Store-level behaviour: group commit isolation, map growth, garbage collection under writes."""
from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time

import pytest

from agentstate import codec
from agentstate.v1 import threads_pb2 as pb
from agentstate.v1 import values_pb2
from sidecar.storage import gc, layout
from sidecar.storage import store as store_mod
from sidecar.api import checkpoints, threads
from sidecar.errors import ApiError
from sidecar.storage.store import Store

from conftest import store_values


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "data"))
    yield s
    s.close()


def value(obj) -> values_pb2.Value:
    return values_pb2.Value(msgpack=codec.encode(obj))


def put(store, thread_id, channels, **kw):
    req = pb.PutCheckpointRequest(thread_id=thread_id, **kw)
    for name, v in channels.items():
        if isinstance(v, pb.ChannelWrite):
            req.channels[name].CopyFrom(v)
        else:
            req.channels[name].value.CopyFrom(value(v))
    return run(checkpoints.put(store, req))


def blob_count(store) -> int:
    with store.read() as txn:
        return txn.stat(store.db["nodes"])["entries"]


def test_group_commit_isolates_a_failing_job(store):
    """Jobs batched into one transaction: a failing job leaves nothing, the others commit."""
    gate = threading.Event()
    blocker = store.submit(lambda txn: gate.wait(5))  # holds the writer so the next jobs queue up together
    db = store.db["meta"]

    def good(key):
        return lambda txn: txn.put(key, b"ok", db=db)

    def bad(txn):
        txn.put(b"half-written", b"x", db=db)
        raise ApiError("INVALID_FIELD", "boom")

    futures = [store.submit(good(b"a")), store.submit(bad), store.submit(good(b"b"))]
    gate.set()
    blocker.result(5)
    assert futures[0].result(5) is True
    with pytest.raises(ApiError):
        futures[1].result(5)
    assert futures[2].result(5) is True
    with store.read() as txn:
        assert txn.get(b"a", db=db) == b"ok"
        assert txn.get(b"b", db=db) == b"ok"
        assert txn.get(b"half-written", db=db) is None


def test_map_grows_by_itself(tmp_path):
    s = Store(str(tmp_path / "small"), map_size=256 * 1024)
    try:
        start = s.map_size
        rng = random.Random(1)
        payloads = {}
        for i in range(40):
            data = rng.randbytes(100_000)
            payloads[f"t{i}"] = data
            put(s, f"t{i}", {"blob": data})
        assert s.map_size > start
        for tid_, data in payloads.items():
            assert store_values(s, tid_)["blob"] == data
    finally:
        s.close()


def test_map_growth_survives_reopen(tmp_path):
    path = str(tmp_path / "reopen")
    s = Store(path, map_size=128 * 1024)
    put(s, "t", {"blob": b"x" * 600_000})
    s.close()
    s = Store(path, map_size=128 * 1024)  # smaller than the file: opening must still work
    try:
        assert store_values(s, "t")["blob"] == b"x" * 600_000
        put(s, "t2", {"blob": b"y" * 300_000})
    finally:
        s.close()


def test_gc_frees_only_unshared_blobs(store):
    shared = [f"shared message {i}" for i in range(20)]
    put(store, "a", {"messages": shared, "own": "only in a"})
    put(store, "b", {"messages": shared + ["b's own"], "own": "only in b"})
    before = blob_count(store)
    run(threads.delete(store, pb.DeleteThreadRequest(thread_id="a")))
    stats = gc.GarbageCollector(store).collect()
    assert stats.freed_blobs >= 2  # a's list root and its "own" value at least
    assert blob_count(store) == before - stats.freed_blobs
    assert store_values(store, "b")["messages"] == shared + ["b's own"]
    assert gc.check_integrity(store)["missing_blobs"] == 0
    # a second collection finds nothing more
    assert gc.GarbageCollector(store).collect().freed_blobs == 0


def test_gc_keeps_everything_written_during_collection(store, monkeypatch):
    """Writes that reuse garbage while a collection runs must not lose it."""
    items = [f"item {i}" for i in range(50)]
    put(store, "old", {"messages": items})
    run(threads.delete(store, pb.DeleteThreadRequest(thread_id="old")))  # everything is garbage now
    collector = gc.GarbageCollector(store)
    marked_snapshot = threading.Event()
    original_mark = gc.mark

    def mark_then_write(get, start, marked, missing=None):
        original_mark(get, start, marked, missing)
        if not marked_snapshot.is_set():
            marked_snapshot.set()
            # a put and a copy re-reference the garbage between the mark and the sweep
            put(store, "new", {"messages": items})
            run(threads.copy(store, pb.CopyThreadRequest(source_thread_id="new", target_thread_id="copy")))

    monkeypatch.setattr(gc, "mark", mark_then_write)
    collector.collect()
    assert marked_snapshot.is_set()
    assert store_values(store, "new")["messages"] == items
    assert store_values(store, "copy")["messages"] == items
    assert gc.check_integrity(store)["missing_blobs"] == 0


def test_gc_concurrent_random_workload(store):
    """Random puts, deltas, copies, deletes and prunes race with repeated collections."""
    rng = random.Random(7)
    vocab = [f"m{i}" for i in range(30)]
    expected: dict[str, list] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def collector_loop():
        c = gc.GarbageCollector(store)
        try:
            while not stop.is_set():
                c.collect()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=collector_loop)
    t.start()
    try:
        for step in range(300):
            op = rng.random()
            tid_ = f"t{rng.randrange(8)}"
            if op < 0.45:
                msgs = [rng.choice(vocab) for _ in range(rng.randrange(1, 12))]
                put(store, tid_, {"messages": msgs})
                expected[tid_] = msgs
            elif op < 0.7 and tid_ in expected:
                head = run(checkpoints.get(store, pb.GetCheckpointRequest(thread_id=tid_, omit_values=True)))
                extra = [rng.choice(vocab) for _ in range(rng.randrange(1, 4))]
                w = pb.ChannelWrite()
                for x in extra:
                    w.delta.append.add().msgpack = codec.encode(x)
                put(store, tid_, {"messages": w}, parent_checkpoint_id=head.checkpoint.checkpoint_id)
                expected[tid_] = expected[tid_] + extra
            elif op < 0.8 and tid_ in expected:
                dst = f"t{rng.randrange(8)}"
                if dst not in expected:
                    run(threads.copy(store, pb.CopyThreadRequest(source_thread_id=tid_, target_thread_id=dst)))
                    expected[dst] = list(expected[tid_])
            elif op < 0.9 and tid_ in expected:
                run(threads.delete(store, pb.DeleteThreadRequest(thread_id=tid_)))
                del expected[tid_]
            elif tid_ in expected:
                run(checkpoints.prune(store, pb.PruneCheckpointsRequest(thread_ids=[tid_], keep_latest=1)))
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    for tid_, msgs in expected.items():
        assert store_values(store, tid_)["messages"] == msgs, tid_
    assert gc.check_integrity(store)["missing_blobs"] == 0


def test_request_ids_expire(store, monkeypatch):
    from sidecar.api import idempotency
    req = pb.CreateThreadRequest(thread_id="x", request_id="r1")
    run(threads.create(store, req))
    with store.read() as txn:
        assert txn.stat(store.db["requests"])["entries"] == 1
    far_future = 2**62
    assert store.write(lambda txn: idempotency.expire(txn, store.db, now=far_future)) == 1
    with store.read() as txn:
        assert txn.stat(store.db["requests"])["entries"] == 0
        assert txn.stat(store.db["reqtime"])["entries"] == 0


def test_gc_sweep_never_leaves_a_node_without_its_children(store, monkeypatch):
    """Between two sweep batches a put finds a garbage parent by hash and reuses it:
    its children must still be there (sweeping goes parents first)."""
    items = [f"item {i}" for i in range(40)]  # 5 leaves: a list root over inner nodes and leaves
    put(store, "old", {"messages": items})
    run(threads.delete(store, pb.DeleteThreadRequest(thread_id="old")))
    monkeypatch.setattr(gc, "SWEEP_BATCH", 1)
    collector = gc.GarbageCollector(store)
    original = collector._sweep
    batches = []

    def sweep_then_reuse(txn, batch, marked):
        result = original(txn, batch, marked)
        batches.append(batch)
        if len(batches) == 2:  # after the first node went, re-store the same list from another thread
            threading.Thread(target=put, args=(store, "new", {"messages": items})).start()
        return result

    monkeypatch.setattr(collector, "_sweep", sweep_then_reuse)
    collector.collect()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            got = store_values(store, "new")["messages"]
            break
        except Exception:  # noqa: BLE001 - not written yet
            time.sleep(0.05)
    assert got == items
    assert gc.check_integrity(store) == {**gc.check_integrity(store), "missing_blobs": 0, "problems": []}


def test_hash_index_survives_short_key_collisions(store, monkeypatch):
    """With a 1-byte index key nearly every node collides with another: lookups must stay exact."""
    from sidecar.storage import nodes
    monkeypatch.setattr(nodes, "INDEX_KEY", 1)
    lists = {f"t{i}": [f"item {i}-{j}" for j in range(30)] for i in range(12)}
    for tid_, items in lists.items():
        put(store, tid_, {"messages": items, "shared": ["same everywhere"] * 3})
    before = blob_count(store)
    for tid_, items in lists.items():  # whole-value re-puts must deduplicate everything
        put(store, tid_, {"messages": items, "shared": ["same everywhere"] * 3})
    assert blob_count(store) == before
    for tid_, items in lists.items():
        assert store_values(store, tid_)["messages"] == items
    for tid_ in list(lists)[:6]:
        run(threads.delete(store, pb.DeleteThreadRequest(thread_id=tid_)))
    gc.GarbageCollector(store).collect()
    report = gc.check_integrity(store)
    assert report["missing_blobs"] == 0 and report["problems"] == [], report
    for tid_ in list(lists)[6:]:
        assert store_values(store, tid_)["messages"] == lists[tid_]
    with store.read() as txn:  # every remaining node is indexed exactly once
        assert txn.stat(store.db["hashes"])["entries"] == txn.stat(store.db["nodes"])["entries"]


def test_a_cancelled_job_is_dropped_and_the_writer_lives_on(store):
    """A caller that goes away cancels its future (asyncio.wrap_future does): the job is not run, and the
    writer thread must survive it (it used to die setting the result of a cancelled future)."""
    gate = threading.Event()
    blocker = store.submit(lambda txn: gate.wait(5))
    db = store.db["meta"]
    doomed = store.submit(lambda txn: txn.put(b"doomed", b"x", db=db))
    assert doomed.cancel()
    after = store.submit(lambda txn: txn.put(b"after", b"x", db=db))
    gate.set()
    blocker.result(5)
    assert after.result(5) is True
    with store.read() as txn:
        assert txn.get(b"doomed", db=db) is None and txn.get(b"after", db=db) == b"x"
    assert store.write(lambda txn: 42) == 42


def test_longest_identifiers_fit_lmdb_keys(store):
    """Every identifier at its documented maximum still makes valid LMDB keys (at most 511 bytes)."""
    from sidecar import limits
    ns = "n" * limits.MAX_NAMESPACE_BYTES
    tid_ = req_id = "\u00e9" * (limits.MAX_ID_BYTES // 2)  # 2 UTF-8 bytes each
    cid, task, run_id = "c" * limits.MAX_ID_BYTES, "k" * limits.MAX_ID_BYTES, "r" * limits.MAX_ID_BYTES
    cns = "s" * limits.MAX_CHECKPOINT_NS_BYTES
    assert len(layout.write_key(2**63, cns, cid, task, -1)) == store.env.max_key_size()
    run(threads.create(store, pb.CreateThreadRequest(namespace=ns, thread_id=tid_, request_id=req_id)))
    req = pb.PutCheckpointRequest(namespace=ns, thread_id=tid_, checkpoint_ns=cns, checkpoint_id=cid,
                                  request_id=req_id[:-1] + "p")
    req.channels["x"].value.CopyFrom(value([1, 2, 3]))
    req.metadata["run_id"].CopyFrom(value(run_id))
    run(checkpoints.put(store, req))
    w = pb.PutWritesRequest(namespace=ns, thread_id=tid_, checkpoint_ns=cns, checkpoint_id=cid)
    w.writes.add(task_id=task, idx=-(2**31), channel="c" * limits.MAX_NAME_BYTES).value.CopyFrom(value("v"))
    run(checkpoints.put_writes(store, w))
    got = run(checkpoints.get(store, pb.GetCheckpointRequest(namespace=ns, thread_id=tid_, checkpoint_ns=cns,
                                                            include_pending_writes=True))).checkpoint
    assert got.checkpoint_id == cid and got.pending_writes[0].task_id == task
    run(threads.copy(store, pb.CopyThreadRequest(namespace=ns, source_thread_id=tid_, target_thread_id="u" * 128)))
    deleted = run(checkpoints.delete_for_runs(store, pb.DeleteCheckpointsForRunsRequest(namespace=ns,
                                                                                       run_ids=[run_id])))
    assert deleted.deleted_checkpoints == 2  # the original and the copy


def test_the_write_queue_is_bounded_with_a_retry_hint(tmp_path):
    """Past max_queue writes in flight, new writes are refused with OVERLOADED and retry_after_ms at once
    (instead of queueing until their callers time out); the queued ones still commit."""
    s = Store(str(tmp_path / "bounded"), max_queue=8)
    try:
        gate = threading.Event()
        db = s.db["meta"]
        blocker = s.submit(lambda txn: gate.wait(5))  # holds the owner loop: later writes queue up
        queued = [s.submit(lambda txn, i=i: txn.put(b"q%d" % i, b"x", db=db)) for i in range(7)]
        with pytest.raises(ApiError) as refused:
            s.submit(lambda txn: txn.put(b"refused", b"x", db=db))
        assert refused.value.reason == "OVERLOADED"
        assert int(refused.value.metadata["retry_after_ms"]) >= 50
        gate.set()
        blocker.result(5)
        assert all(f.result(5) is True for f in queued)
        with s.read() as txn:
            assert txn.get(b"refused", db=db) is None and txn.get(b"q6", db=db) == b"x"
        assert s.write(lambda txn: 7) == 7  # room again
    finally:
        s.close()


def test_flow_controlled_writes_are_never_refused(tmp_path):
    """A write whose caller bounds its own writes in flight (a StreamWrites stream) waits its turn when the
    sidecar runs behind; a unary one is refused with OVERLOADED (which a stream could not resend in order)."""
    s = Store(str(tmp_path / "flow"))
    db = s.db["meta"]
    done = concurrent.futures.Future()

    def on_owner():
        s.loop_lag = 10 * s.max_lag  # as after a stall of the owner loop ...
        with s._count_lock:
            s._inflight += store_mod.MIN_LAG_BACKLOG  # ... with writes queued behind it
        try:
            streamed = s.start(lambda txn: txn.put(b"streamed", b"x", db=db), flow_controlled=True)
            with pytest.raises(ApiError) as refused:
                s.start(lambda txn: txn.put(b"unary", b"x", db=db))
            done.set_result((streamed, refused.value.reason))
        except BaseException as e:  # noqa: BLE001
            done.set_exception(e)

    try:
        s._loop.call_soon_threadsafe(on_owner)
        streamed, reason = done.result(5)
        with s._count_lock:
            s._inflight -= store_mod.MIN_LAG_BACKLOG
        assert reason == "OVERLOADED"
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(streamed), 5), s._loop).result(10)
        s.flush()
        with s.read() as txn:
            assert txn.get(b"streamed", db=db) == b"x" and txn.get(b"unary", db=db) is None
    finally:
        s.close()


def test_a_late_loop_without_a_backlog_refuses_nothing(tmp_path):
    """A loop that ran late while (almost) no writes were waiting was held by something else (a large
    request's preparation, a collection, a busy machine): the next unary write is admitted, not refused
    for a lag it did not cause."""
    s = Store(str(tmp_path / "late"))
    db = s.db["meta"]
    started = concurrent.futures.Future()

    def on_owner():
        s.loop_lag = 10 * s.max_lag  # as after a stall of the owner loop, nothing queued
        try:
            started.set_result(s.start(lambda txn: txn.put(b"admitted", b"x", db=db)))
        except BaseException as e:  # noqa: BLE001
            started.set_exception(e)

    try:
        s._loop.call_soon_threadsafe(on_owner)
        admitted = started.result(5)
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(admitted), 5), s._loop).result(10)
        s.flush()
        with s.read() as txn:
            assert txn.get(b"admitted", db=db) == b"x"
    finally:
        s.close()


@pytest.mark.parametrize("durability", ["sync", "process"])
def test_durability_modes_read_their_writes(tmp_path, durability):
    """Both modes: an acknowledged write is visible to every later read, on the owner loop and elsewhere;
    a failing write in a group leaves nothing; process mode logs it and commits it later."""
    s = Store(str(tmp_path / durability), durability=durability, commit_interval=30)
    try:
        tid_ = "t"
        put(s, tid_, {"messages": ["a"]}, checkpoint_id="c1")
        put(s, tid_, {"messages": pb.ChannelWrite(delta=values_pb2.ValueDelta(append=[value("b")]))},
            checkpoint_id="c2", parent_checkpoint_id="c1")
        assert store_values(s, tid_)["messages"] == ["a", "b"]  # read from another thread than the owner
        with pytest.raises(ApiError):
            put(s, tid_, {"x": 1}, checkpoint_id="c3", expected_head_etag="stale")
        if durability == "process":
            assert s._log is not None and s._log.seq >= 2
    finally:
        s.close()
    reopened = Store(str(tmp_path / durability))
    try:
        assert store_values(reopened, tid_)["messages"] == ["a", "b"]
    finally:
        reopened.close()


CRASHING_WRITER = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from test_store import put
from sidecar.storage.store import Store
s = Store({path!r}, durability="process", commit_interval=600)
put(s, "t", {{"v": "committed"}}, checkpoint_id="c1")
s.flush()
put(s, "t", {{"v": "only in the log"}}, checkpoint_id="c2", parent_checkpoint_id="c1")
os.kill(os.getpid(), signal.SIGKILL)  # acknowledged, in the log, LMDB transaction still open
"""


def test_process_mode_replays_the_log_after_a_crash(tmp_path):
    """A SIGKILL loses the open transaction; the next store replays the log into LMDB."""
    import glob
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = str(tmp_path / "crash")
    code = CRASHING_WRITER.format(tests=str(Path(__file__).parent), path=path)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    logs = glob.glob(os.path.join(path, "wal-*.log"))
    assert logs and os.path.getsize(logs[0]) > 0
    reopened = Store(path)
    try:
        assert reopened.replayed == 1
        assert store_values(reopened, "t")["v"] == "only in the log"
        assert not glob.glob(os.path.join(path, "wal-*.log"))  # applied and committed: the log is gone
    finally:
        reopened.close()


def _pack_id_by_uuid(checkpoint_id: str):
    """The reference pack_id: parse and print a UUID object (what layout.pack_id did before its fast path)."""
    import uuid
    if len(checkpoint_id) == 36:
        try:
            u = uuid.UUID(checkpoint_id)
        except ValueError:
            return checkpoint_id
        if str(u) == checkpoint_id:
            return u.bytes
    return checkpoint_id


def test_pack_id_matches_uuid_parsing():
    """layout.pack_id / unpack_id give what uuid.UUID parsing gives, canonical ids and near misses alike."""
    import uuid
    rnd = random.Random(5)
    canon = [str(uuid.UUID(int=rnd.getrandbits(128))) for _ in range(200)] + [str(uuid.UUID(int=0)),
                                                                            "ffffffff-ffff-ffff-ffff-ffffffffffff"]
    near = []
    for c in canon[:50]:
        near += [c.upper(), c.replace("-", ""), "{" + c[1:-1] + "}", c[:8] + c[9:] + "-", c[:35] + "g",
                 c[:35] + "\uff11", "\uff11" + c[1:], c[:35] + "\n", c.replace("-", "_"), "urn:uuid:" + c,
                 c[:8] + "-" + c[9:13].upper() + c[13:], c[:35]]
    near += ["", "step-1", "0" * 36, "-" * 36]
    for s in canon + near:
        assert layout.pack_id(s) == _pack_id_by_uuid(s), s
        packed = layout.pack_id(s)
        if isinstance(packed, bytes):
            assert layout.unpack_id(packed) == str(uuid.UUID(bytes=packed)) == s
        else:
            assert layout.unpack_id(packed) == s
    with pytest.raises(ValueError):
        layout.unpack_id(b"\x00" * 15)
