"""Resource limits and fairness (issue 16): large requests do not hold the loop, their own lag does not get
them refused, per-connection limits, default deadlines, and one flooding client does not starve another."""
from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from agentstate import NO_RETRY, AgentStateError, Client
from agentstate import _requests as rq
from agentstate import codec
from agentstate.v1 import threads_pb2 as pb
from sidecar.api import checkpoints
from sidecar.errors import ApiError
from sidecar.storage import gc, nodes
from sidecar.storage.store import Store

from conftest import SidecarProcess


def put_request(thread_id: str, channels: dict, **kw) -> pb.PutCheckpointRequest:
    args = dict(checkpoint_id="", parent_id="", base_id="", checkpoint_ns="", metadata=None, extra=None,
                expected_head_etag=None, schema_version=0, require_thread=False, request_id="")
    args.update(kw)
    return rq.put_checkpoint_request("default", thread_id, channels, **args)


def big_map(n: int, salt: int = 0) -> dict:
    return {f"key-{i:07d}": i + salt for i in range(n)}


async def read_channel(store: Store, thread_id: str, name: str, checkpoint_id: str = ""):
    cp = (await checkpoints.get(store, pb.GetCheckpointRequest(thread_id=thread_id,
                                                               checkpoint_id=checkpoint_id))).checkpoint
    v = cp.channels[name].value
    if v.WhichOneof("kind") == "map":
        return {k: codec.decode(e.msgpack) for k, e in v.map.entries.items()}
    return codec.decode(v.msgpack)


def in_loop(fn):
    """Run ``fn(store)`` (a coroutine function) with a store owned by the test's event loop."""
    def run(path, durability="sync"):
        async def main():
            store = Store(str(path), loop=asyncio.get_running_loop(), durability=durability)
            try:
                return await fn(store)
            finally:
                store.close()
        return asyncio.run(main())
    return run


# ---------------------------------------------------------------- large puts: written in parts, correctly

@pytest.mark.parametrize("durability", ["sync", "process"])
def test_large_put_round_trip_and_integrity(tmp_path, durability):
    value = big_map(40_000)
    changed = {**value, "key-0000007": "changed", "extra-key": [1, 2, 3]}

    async def body(store):
        req = put_request("big", {"state": value, "small": 1}, checkpoint_id="c1")
        assert req.ByteSize() > checkpoints.LARGE_REQUEST
        resp = await checkpoints.put(store, req)
        assert resp.created
        before = store.stats.write_failures.copy()
        resp2 = await checkpoints.put(store, put_request("big", {"state": changed, "small": 1}, checkpoint_id="c2",
                                                         parent_id="c1"))
        assert resp2.checkpoint.channels["state"].root != resp.checkpoint.channels["state"].root
        assert await read_channel(store, "big", "state", "c1") == value
        assert await read_channel(store, "big", "state", "c2") == changed
        assert store.stats.write_failures == before
        report = gc.check_integrity(store)
        assert report["problems"] == [] and report["missing_blobs"] == 0

    in_loop(body)(tmp_path / "d", durability)

    async def reread(store):  # after a restart (process mode: from the log or LMDB)
        assert await read_channel(store, "big", "state", "c2") == changed
        assert gc.check_integrity(store)["problems"] == []

    in_loop(reread)(tmp_path / "d", durability)


def test_large_put_same_as_small_path(tmp_path):
    """The staged path stores exactly what the in-writer path stores: same roots, same etag."""
    value = big_map(30_000, salt=5)

    async def body(store):
        big = await checkpoints.put(store, put_request("a", {"state": value}, checkpoint_id="c"))
        req = put_request("b", {"state": value}, checkpoint_id="c")
        resp, _ = await store.run(checkpoints.put_job(store, req))  # the in-writer path, whatever the size
        assert resp.checkpoint.channels["state"].root == big.checkpoint.channels["state"].root
        assert resp.checkpoint.etag == big.checkpoint.etag
        assert gc.check_integrity(store)["problems"] == []

    in_loop(body)(tmp_path / "d")


def test_large_put_races_a_write_of_the_same_nodes(tmp_path, monkeypatch):
    """Another write stores the large put's content between its staging and its index: both are
    stored and readable, the index finds one copy, and deleting the other thread's copy (by garbage
    collection) leaves this one findable and the store clean."""
    value = {**big_map(30_000), "tail": "x" * 1000}
    original = checkpoints._write_staged
    raced = []

    async def racing(store, staged):
        if not raced:
            raced.append(1)
            await checkpoints.put(store, put_request("other", {"state": value}, checkpoint_id="x"))
        await original(store, staged)

    monkeypatch.setattr(checkpoints, "_write_staged", racing)

    async def body(store):
        await checkpoints.put(store, put_request("big", {"state": value}, checkpoint_id="c"))
        assert raced
        assert await read_channel(store, "big", "state", "c") == value
        assert await read_channel(store, "other", "state", "x") == value
        report = gc.check_integrity(store)
        assert report["problems"] == [], report
        from sidecar.api import threads
        await threads.delete(store, pb.DeleteThreadRequest(thread_id="other"))
        freed = await asyncio.get_running_loop().run_in_executor(None, gc.GarbageCollector(store).collect)
        assert freed.freed_blobs > 30_000  # the first copy went
        assert await read_channel(store, "big", "state", "c") == value
        report = gc.check_integrity(store)
        assert report["problems"] == [], report
        with store.read() as txn:  # the remaining copy is found by hash again
            root = (await checkpoints.get(store, pb.GetCheckpointRequest(thread_id="big"))).checkpoint
            h = root.channels["state"].root
            assert nodes.index_get(txn, store, h, "default") is not None

    in_loop(body)(tmp_path / "d")


def test_large_puts_while_garbage_is_collected(tmp_path):
    """Collections running next to large puts: sweeps wait while a put is staged; nothing reachable is
    lost, garbage still goes."""

    async def body(store):
        for i in range(6):
            await checkpoints.put(store, put_request(f"old{i}", {"state": big_map(20_000, salt=100 * i)},
                                                     checkpoint_id="c"))
        from sidecar.api import threads
        for i in range(6):
            await threads.delete(store, pb.DeleteThreadRequest(thread_id=f"old{i}"))
        collector = gc.GarbageCollector(store, delay=0)
        loop = asyncio.get_running_loop()
        collecting = loop.run_in_executor(None, collector.collect)
        values = [big_map(20_000, salt=7 + i) for i in range(4)]
        for i, v in enumerate(values):
            await checkpoints.put(store, put_request(f"new{i}", {"state": v}, checkpoint_id="c"))
        result = await collecting
        assert result.freed_blobs > 0
        result2 = await loop.run_in_executor(None, collector.collect)
        for i, v in enumerate(values):
            assert await read_channel(store, f"new{i}", "state", "c") == v
        report = gc.check_integrity(store)
        assert report["problems"] == [] and report["missing_blobs"] == 0
        assert result2.reachable_blobs == report["checked_blobs"]

    in_loop(body)(tmp_path / "d")


def test_large_put_not_refused_for_its_own_lag(tmp_path):
    """A large put admitted when the sidecar was not overloaded completes, however late the loop runs
    while it is written and however many small writes queue meanwhile (they may be told to back off)."""
    value = big_map(60_000)

    async def body(store):
        store.max_lag = 0.0  # any lag counts: writes are refused whenever 8+ wait
        stop = asyncio.Event()
        refused = [0]

        async def small(k):
            i = 0
            while not stop.is_set():
                try:
                    await checkpoints.put(store, put_request(f"s{k}", {"v": i}, checkpoint_id=f"c{i:06d}"))
                except ApiError as e:
                    assert e.reason == "OVERLOADED"
                    refused[0] += 1
                    await asyncio.sleep(0.001)
                i += 1

        tasks = [asyncio.ensure_future(small(k)) for k in range(24)]
        await asyncio.sleep(0.2)
        store.max_lag = 10.0  # the large put is admitted ...
        big = asyncio.ensure_future(checkpoints.put(store, put_request("big", {"state": value}, checkpoint_id="c")))
        await asyncio.sleep(0)
        store.max_lag = 0.0  # ... and from then on everything counts as overloaded
        resp = await big
        stop.set()
        await asyncio.gather(*tasks)
        assert resp.created
        assert refused[0] > 0, "the small writers were never refused: the test did not overload the store"
        assert await read_channel(store, "big", "state", "c") == value

    in_loop(body)(tmp_path / "d")


def test_large_put_refused_up_front_when_overloaded(tmp_path):
    async def body(store):
        store.max_queue = 0  # every new write is refused
        with pytest.raises(ApiError) as info:
            await checkpoints.put(store, put_request("big", {"state": big_map(40_000)}, checkpoint_id="c"))
        assert info.value.reason == "OVERLOADED"
        store.max_queue = 4096
        with pytest.raises(ApiError):
            await checkpoints.get(store, pb.GetCheckpointRequest(thread_id="big"))
        assert store.data_file_bytes() < 1 << 20  # nothing of it was written

    in_loop(body)(tmp_path / "d")


# ---------------------------------------------------------------- large puts: the others go on meanwhile

def _small_puts(address: str, stop: threading.Event, out: list, errors: list, tag: str) -> None:
    with Client(address, timeout=60) as c:
        i = 0
        while not stop.is_set():
            started = time.perf_counter()
            try:
                c.put_checkpoint(f"small-{tag}", {"messages": [f"m{i}"]}, checkpoint_id=f"{i:08d}")
                out.append((started, time.perf_counter()))
            except AgentStateError as e:
                errors.append(e)
            i += 1


def test_large_put_does_not_stall_small_puts(tmp_path):
    """While one client puts a 150,000-key map, another's small puts go on: none waits longer than a
    fraction of the large put's time (before the fix, the large put's node writes held the loop for
    most of it), and the large put itself completes under that load."""
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        value = big_map(150_000)
        with proc.client(timeout=120) as c:
            c.put_checkpoint("warm", {"x": 1})
        stop = threading.Event()
        done: list = []
        errors: list = []
        writers = [threading.Thread(target=_small_puts, args=(proc.address, stop, done, errors, f"w{k}"))
                   for k in range(2)]
        for w in writers:
            w.start()
        time.sleep(1.0)
        with proc.client(timeout=120) as c:
            started = time.perf_counter()
            c.put_checkpoint("big", {"state": value}, checkpoint_id="c")
            ended = time.perf_counter()
        time.sleep(0.3)
        stop.set()
        for w in writers:
            w.join()
        assert not errors, errors[:3]
        big_seconds = ended - started
        during = [(s, e) for s, e in done if e > started and s < ended]
        longest = max(e - s for s, e in during)
        print(f"large put {big_seconds * 1000:.0f} ms; {len(during)} small puts during it, "
              f"the longest {longest * 1000:.0f} ms")
        assert len(during) >= 10
        assert longest < 0.3 * big_seconds, (longest, big_seconds)
        with proc.client(timeout=120) as c:
            got = c.get_checkpoint("big", "c")
            assert len(got.channels["state"].value.map.entries) == len(value)
    finally:
        proc.stop()


def test_a_300000_key_put_under_steady_small_writes(tmp_path):
    """Issue 16's large request: a 300,000-key PutCheckpoint while two other clients put small checkpoints
    without pause. It completes on its first attempt (its client does not retry, so an OVERLOADED refusal
    for the lag its own work caused would fail it), the small puts go on meanwhile (none waits longer than
    a fraction of the large put's time), and all of its keys are stored."""
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        value = big_map(300_000)
        with proc.client(timeout=120) as c:
            c.put_checkpoint("warm", {"x": 1})
        stop = threading.Event()
        done: list = []
        errors: list = []
        writers = [threading.Thread(target=_small_puts, args=(proc.address, stop, done, errors, f"w{k}"))
                   for k in range(2)]
        for w in writers:
            w.start()
        time.sleep(1.0)
        try:
            with Client(proc.address, retry=NO_RETRY, timeout=300) as c:
                started = time.perf_counter()
                assert c.put_checkpoint("big", {"state": value}, checkpoint_id="c").created
                ended = time.perf_counter()
            time.sleep(0.3)
        finally:
            stop.set()
            for w in writers:
                w.join()
        assert not errors, errors[:3]
        big_seconds = ended - started
        during = [(s, e) for s, e in done if e > started and s < ended]
        longest = max(e - s for s, e in during)
        print(f"300,000-key put {big_seconds * 1000:.0f} ms; {len(during)} small puts during it, "
              f"the longest {longest * 1000:.0f} ms")
        assert len(during) >= 20
        assert longest < 0.3 * big_seconds, (longest, big_seconds)
        with proc.client(timeout=120) as c:
            got = c.get_checkpoint("big", "c")
            assert len(got.channels["state"].value.map.entries) == len(value)
    finally:
        proc.stop()


# ---------------------------------------------------------------- per-connection limits, deadlines, sizes

class FakeContext:
    def __init__(self, peer="ipv4:127.0.0.1:5000", remaining=None):
        self._peer, self._remaining, self.aborted = peer, remaining, None

    def peer(self):
        return self._peer

    def time_remaining(self):
        return self._remaining

    async def abort(self, code, message, trailing_metadata=()):
        self.aborted = (code, message, trailing_metadata)
        raise grpc.aio.AbortError()


class FakeMethod:
    def __init__(self, server_streaming=False, client_streaming=False):
        self.server_streaming, self.client_streaming, self.name = server_streaming, client_streaming, "M"


def test_call_guard_counts_calls_per_tcp_connection():
    from sidecar.api.callguard import CallGuard

    guard = CallGuard(max_calls=2, default_deadline=None)
    release = asyncio.Event()

    async def slow(request, context):
        await release.wait()
        return "done"

    call = guard.wrap("S", FakeMethod(), slow)

    async def main():
        a, b = FakeContext(), FakeContext()
        first = [asyncio.ensure_future(call(None, ctx)) for ctx in (a, b)]
        await asyncio.sleep(0.01)
        third = FakeContext()
        with pytest.raises(grpc.aio.AbortError):
            await call(None, third)
        assert third.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert b"TOO_MANY_CALLS" in third.aborted[2][0][1]
        other = asyncio.ensure_future(call(None, FakeContext("ipv4:127.0.0.1:5001")))  # another connection
        unix = asyncio.ensure_future(call(None, FakeContext("unix:")))  # not counted (no connection name)
        await asyncio.sleep(0.01)
        assert not other.done() and not unix.done()
        release.set()
        assert await asyncio.gather(*first, other, unix) == ["done"] * 4
        assert guard.in_progress == {}
        assert await call(None, FakeContext()) == "done"  # the count went down again

    asyncio.run(main())


def test_call_guard_default_deadline():
    from sidecar.api.callguard import CallGuard

    guard = CallGuard(max_calls=0, default_deadline=0.2)

    async def slow(request, context):
        await asyncio.sleep(5)
        return "late"

    async def quick(request, context):
        await asyncio.sleep(0.3)
        return "fine"

    async def main():
        ctx = FakeContext()
        started = time.monotonic()
        with pytest.raises(grpc.aio.AbortError):
            await guard.wrap("S", FakeMethod(), slow)(None, ctx)
        assert ctx.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - started < 2
        # a deadline the client sent is the client's: not shortened
        assert await guard.wrap("S", FakeMethod(), quick)(None, FakeContext(remaining=10.0)) == "fine"
        # client-streaming calls are not cut either
        assert await guard.wrap("S", FakeMethod(client_streaming=True), quick)(None, FakeContext()) == "fine"

    asyncio.run(main())


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_calls_per_connection_and_message_size_on_a_real_server(tmp_path):
    from agentstate.v1 import events_pb2, events_pb2_grpc
    port = _free_port()
    proc = SidecarProcess(tmp_path / "data", "--listen", f"127.0.0.1:{port}", "--max-calls-per-connection", "2",
                          "--max-message-bytes", "1M").start()
    try:
        addr = f"127.0.0.1:{port}"
        own = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own (not shared in the process)
        with Client(addr, options=own) as c:
            c.create_thread("w")
            stub = events_pb2_grpc.EventServiceStub(c.channel)
            watches = [stub.WatchEvents(events_pb2.WatchEventsRequest(thread_id="w", follow=True)) for _ in range(2)]
            deadline = time.monotonic() + 10
            while True:  # both streams in progress on this one connection
                try:
                    c.get_thread("w", timeout=5)
                except AgentStateError as e:
                    assert (e.code, e.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_CALLS"), e
                    break
                assert time.monotonic() < deadline, "the third call on the connection was never refused"
                time.sleep(0.05)
            with Client(addr, options=own) as other:  # another connection is not affected
                assert other.get_thread("w").thread_id == "w"
            watches[0].cancel()
            deadline = time.monotonic() + 10
            while True:
                try:
                    assert c.get_thread("w", timeout=5).thread_id == "w"
                    break
                except AgentStateError as e:
                    assert e.reason == "TOO_MANY_CALLS" and time.monotonic() < deadline
                    time.sleep(0.05)
            watches[1].cancel()
            with pytest.raises(AgentStateError) as info:  # --max-message-bytes 1M
                c.put_checkpoint("w", {"blob": b"x" * (1 << 21)})
            assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert not list(c.list_checkpoints("w"))
    finally:
        proc.stop()
