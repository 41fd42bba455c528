"""The Python clients: retries and request ids, deadlines, waiting for the server, and the asyncio client."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

import grpc
import pytest
from conftest import SidecarProcess

from agentstate import (NO_RETRY, Append, AsyncClient, Client, DeadlineExceeded, FailedPrecondition, NotFound,
                        RetryPolicy, Unavailable, checkpoint_values, from_value)
from agentstate.v1 import threads_pb2 as pb
from sidecar.errors import ApiError


class FakeRpcError(grpc.RpcError):
    def __init__(self, err: ApiError | grpc.StatusCode):
        self.err = err

    def code(self):
        return self.err.code if isinstance(self.err, ApiError) else self.err

    def details(self):
        return self.err.message if isinstance(self.err, ApiError) else "down"

    def trailing_metadata(self):
        if isinstance(self.err, ApiError):
            return (("grpc-status-details-bin", self.err.to_status().SerializeToString()),)
        return ()


class Flaky:
    """A stub method failing ``failures`` times with ``error`` before answering ``reply``."""

    def __init__(self, failures: int, error=grpc.StatusCode.UNAVAILABLE, reply="ok"):
        self.failures, self.error, self.reply = failures, error, reply
        self.requests: list[bytes] = []

    def __call__(self, request, timeout=None, wait_for_ready=None):
        assert timeout is not None and timeout > 0
        self.requests.append(request.SerializeToString(deterministic=True))
        if len(self.requests) <= self.failures:
            raise FakeRpcError(self.error)
        return self.reply


FAST = RetryPolicy(max_attempts=5, initial_backoff=0.001, max_backoff=0.01)


@pytest.fixture
def offline():
    with Client("unix:/nonexistent/agentstate.sock", timeout=5, retry=FAST) as c:
        yield c


def test_reads_are_retried(offline):
    m = Flaky(3)
    assert offline._call(m, pb.GetCheckpointRequest(thread_id="t"), None) == "ok"
    assert len(m.requests) == 4 and len(set(m.requests)) == 1


def test_attempts_are_capped(offline):
    m = Flaky(10)
    with pytest.raises(Unavailable):
        offline._call(m, pb.ListThreadsRequest(), None)
    assert len(m.requests) == 5


def test_mutation_gets_a_request_id_and_is_retried_with_it(offline):
    m = Flaky(2)
    req = pb.CopyThreadRequest(source_thread_id="a", target_thread_id="b")
    assert offline._call(m, req, None) == "ok"
    assert req.request_id.startswith("auto-") and len(set(m.requests)) == 1 and len(m.requests) == 3
    explicit = pb.CopyThreadRequest(source_thread_id="a", target_thread_id="b", request_id="mine")
    offline._call(Flaky(1), explicit, None)
    assert explicit.request_id == "mine"


def test_idempotent_mutations_need_no_request_id(offline):
    for req in (pb.PutCheckpointRequest(thread_id="t", checkpoint_id="c"),
                pb.PutWritesRequest(thread_id="t", checkpoint_id="c"),
                pb.DeleteThreadRequest(thread_id="t", allow_missing=True),
                pb.PruneCheckpointsRequest(thread_ids=["t"], keep_latest=1)):
        m = Flaky(2)
        assert offline._call(m, req, None) == "ok"
        assert req.request_id == "" and len(m.requests) == 3, req


def test_without_auto_request_ids_mutations_are_not_retried():
    with Client("unix:/nonexistent/agentstate.sock", retry=FAST, auto_request_ids=False) as c:
        m = Flaky(1)
        with pytest.raises(Unavailable):
            c._call(m, pb.PutCheckpointRequest(thread_id="t"), None)  # no checkpoint id: the server makes one
        assert len(m.requests) == 1


def test_only_transient_failures_are_retried(offline):
    m = Flaky(1, ApiError("BASE_MISMATCH", "stale"))
    with pytest.raises(FailedPrecondition) as raised:
        offline._call(m, pb.GetCheckpointRequest(thread_id="t"), None)
    assert raised.value.reason == "BASE_MISMATCH" and len(m.requests) == 1
    for err in (ApiError("OVERLOADED", "busy"), ApiError("CONFLICT", "raced"), ApiError("SHUTTING_DOWN", "bye")):
        m = Flaky(1, err)
        assert offline._call(m, pb.GetCheckpointRequest(thread_id="t"), None) == "ok", err
    m = Flaky(1, ApiError("STORAGE_FULL", "full"))
    with pytest.raises(Exception):
        offline._call(m, pb.GetCheckpointRequest(thread_id="t"), None)
    assert len(m.requests) == 1


def test_no_retry_policy(offline):
    offline.retry = NO_RETRY
    m = Flaky(1)
    with pytest.raises(Unavailable):
        offline._call(m, pb.GetCheckpointRequest(thread_id="t"), None)


def test_the_deadline_covers_every_attempt():
    with Client("unix:/nonexistent/agentstate.sock",
                retry=RetryPolicy(max_attempts=0, initial_backoff=0.02, max_backoff=0.05)) as c:
        m = Flaky(10**9)
        start = time.monotonic()
        with pytest.raises((Unavailable, DeadlineExceeded)):
            c._call(m, pb.GetCheckpointRequest(thread_id="t"), 0.5)
        assert 0.4 < time.monotonic() - start < 2 and len(m.requests) > 5


def test_calls_reach_a_server_that_starts_late(tmp_path):
    """With retries (and wait_for_ready) a client started before its sidecar gets through."""
    proc = SidecarProcess(tmp_path / "data")
    starter = threading.Timer(0.5, proc.start)
    try:
        with Client(proc.address, timeout=30, retry=RetryPolicy(max_attempts=0, max_backoff=0.2)) as c:
            with Client(proc.address, timeout=0.3, retry=NO_RETRY) as impatient:
                with pytest.raises((Unavailable, DeadlineExceeded)):
                    impatient.get_thread("t")
            starter.start()
            assert list(c.list_threads()) == []
            c.put_checkpoint("t", {"v": 1}, checkpoint_id="c1")
        with Client(proc.address, wait_for_ready=True) as w:
            assert w.get_values("t") == {"v": 1}
    finally:
        starter.cancel()
        starter.join()
        proc.stop()


# ---------------------------------------------------------------- asyncio client

def test_async_client(sidecar, tid):
    async def main():
        async with AsyncClient(sidecar.address) as c:
            first = await c.put_checkpoint(tid, {"l": [1, 2]}, checkpoint_id="a", metadata={"step": 0})
            await c.put_checkpoint(tid, {"l": Append([3])}, checkpoint_id="b", parent_id="a", metadata={"step": 1})
            await c.put_writes(tid, "b", [("task", 0, "l", [4])])
            assert await c.get_values(tid) == {"l": [1, 2, 3]}
            cp = await c.get_checkpoint(tid, "b", include_pending_writes=True,
                                        known_roots={"l": first.checkpoint.channels["l"].root})
            assert cp.channels["l"].delta.keep_first == 2 and from_value(cp.pending_writes[0].value) == [4]
            listed = [x.checkpoint_id async for x in c.list_checkpoints(tid, page_size=1)]
            assert listed == ["b", "a"]
            assert [x.checkpoint_id async for x in c.list_checkpoints(tid, metadata_filter={"step": 0})] == ["a"]
            h = await c.get_channel_history(tid, ["l"], "b")
            assert h.channels[0].seed_checkpoint_id == "a"
            with pytest.raises(NotFound) as raised:
                await c.get_checkpoint(tid, "zzz")
            assert raised.value.reason == "CHECKPOINT_NOT_FOUND" and raised.value.field == "checkpoint_id"
            await c.copy_thread(tid, tid + "-copy")
            assert [t.thread_id async for t in c.list_threads()]  # pages
            assert await c.prune([tid], keep_latest=1) == 1
            assert await c.delete_for_runs(["none"]) == 0
            assert (await c.delete_thread(tid + "-copy")).deleted
            assert (await c.store_stats()).checkpoints >= 1
            changes = await c.diff(tid, "b", "b")
            assert changes == []
            thread = await c.create_thread(f"t-{uuid.uuid4()}", {"k": "v"})
            assert (await c.get_thread(thread.thread_id)).metadata["k"] == thread.metadata["k"]
            assert (await c.update_thread(thread.thread_id, {"k2": 1})).metadata["k2"]

    asyncio.run(main())


def test_async_client_retries(offline):
    async def main():
        async with AsyncClient("unix:/nonexistent/agentstate.sock", retry=FAST) as c:
            calls = []

            async def flaky(request, timeout=None, wait_for_ready=None):
                calls.append(request.request_id)
                if len(calls) < 3:
                    raise FakeRpcError(grpc.StatusCode.UNAVAILABLE)
                return "ok"

            req = pb.CreateThreadRequest(thread_id="t")
            assert await c._call(flaky, req, None) == "ok"
            assert len(set(calls)) == 1 and calls[0].startswith("auto-") and len(calls) == 3
            with pytest.raises(Unavailable):
                await AsyncClient("unix:/nonexistent/agentstate.sock", retry=NO_RETRY).get_thread("t")

    asyncio.run(main())


def test_sync_and_async_build_the_same_requests(client, tid):
    """Both clients share the request builders: the same call stores the same checkpoint."""
    client.put_checkpoint(tid, {"a": [1, {"b": 2}]}, checkpoint_id="s", metadata={"m": 1}, extra={"e": 1})

    async def main():
        async with AsyncClient(client.address) as c:
            return await c.put_checkpoint(tid + "x", {"a": [1, {"b": 2}]}, checkpoint_id="s", metadata={"m": 1},
                                          extra={"e": 1})

    put = asyncio.run(main())
    a = client.get_checkpoint(tid, "s")
    assert put.checkpoint.channels["a"].root == a.channels["a"].root
    assert checkpoint_values(a) == {"a": [1, {"b": 2}]}


def test_ids_are_uuid7_and_strictly_increasing():
    from agentstate import ids

    made = [ids.new_id() for _ in range(20_000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    for i in made[:50]:
        u = uuid.UUID(i)
        assert str(u) == i and u.version == 7 and u.variant == uuid.RFC_4122
    assert abs(int(made[-1].replace("-", "")[:12], 16) - time.time() * 1000) < 60_000


def test_puts_and_writes_leave_no_request_records(fresh_sidecar):
    """The client names checkpoints itself, so puts are idempotent by id and need no request_id:
    the server's request log (kept 24 h) stays empty for the checkpoint hot path."""
    with fresh_sidecar.client() as c:
        first = c.put_checkpoint("t", {"m": [1]})
        assert uuid.UUID(first.checkpoint.checkpoint_id).version == 7
        second = c.put_checkpoint("t", {"m": Append([2])}, parent_id=first.checkpoint.checkpoint_id)
        c.put_writes("t", second.checkpoint.checkpoint_id, [("task", 0, "m", 3)])
        assert second.checkpoint.checkpoint_id > first.checkpoint.checkpoint_id
        with fresh_sidecar.client() as c2:
            c2.create_thread("other")  # a mutation that needs one does get it
    import lmdb

    fresh_sidecar.stop()
    env = lmdb.open(str(fresh_sidecar.data_dir), max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            assert txn.stat(env.open_db(b"requests", txn=txn, create=False))["entries"] == 1
    finally:
        env.close()
