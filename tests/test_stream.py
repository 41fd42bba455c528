"""StreamWrites: pipelined puts and writes with per-request acks, in order, each as the unary call."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from agentstate import Append, AsyncClient, FailedPrecondition, InvalidArgument, NotFound
from agentstate import _requests as rq
from agentstate.v1 import threads_pb2 as pb
from conftest import expect_error


def test_pipelined_puts_chain_on_one_stream(client, tid):
    with client.write_stream() as ws:
        first = ws.put_checkpoint(tid, {"messages": ["m0"]}, checkpoint_id="c000")
        futs = [ws.put_checkpoint(tid, {"messages": Append([f"m{i}"])}, checkpoint_id=f"c{i:03d}",
                                  parent_id=f"c{i - 1:03d}", metadata={"step": i}) for i in range(1, 50)]
        writes = ws.put_writes(tid, "c049", [("task", 0, "messages", "pending")])
        ws.flush()
    assert first.result().created
    assert all(f.result().checkpoint.checkpoint_id == f"c{i:03d}" for i, f in enumerate(futs, 1))
    assert writes.result().stored == 1
    values = client.get_values(tid)
    assert values["messages"] == [f"m{i}" for i in range(50)]


def test_a_failing_request_gets_its_error_and_the_stream_goes_on(client, tid):
    with client.write_stream() as ws:
        ok = ws.put_checkpoint(tid, {"messages": ["a"]}, checkpoint_id="c1")
        stale = ws.put_checkpoint(tid, {"messages": Append(["x"])}, checkpoint_id="c2", parent_id="missing")
        bad = ws.put_checkpoint(tid, {"messages": ["y"]}, checkpoint_id="c3", expected_head_etag="nope")
        after = ws.put_checkpoint(tid, {"messages": Append(["b"])}, checkpoint_id="c4", parent_id="c1")
        ws.flush()
    assert ok.result().created and after.result().created
    with pytest.raises(FailedPrecondition) as e:
        stale.result()
    assert e.value.reason == "BASE_MISMATCH" and e.value.field == "parent_checkpoint_id"
    with pytest.raises(FailedPrecondition) as e:
        bad.result()
    assert e.value.reason == "ETAG_MISMATCH"
    assert client.get_values(tid)["messages"] == ["a", "b"]
    with expect_error(grpc.StatusCode.NOT_FOUND, "CHECKPOINT_NOT_FOUND"):
        client.get_checkpoint(tid, "c2")


def test_invalid_request_and_malformed_message(sidecar, client, tid):
    channel = grpc.insecure_channel(sidecar.address)
    raw = channel.stream_stream("/agentstate.v1.ThreadService/StreamWrites")
    good = pb.StreamWritesRequest(writes=[pb.StreamedWrite(seq=1, put_checkpoint=rq.put_checkpoint_request(
        "default", tid, {"c": 1}, checkpoint_id="k1", parent_id="", base_id="", checkpoint_ns="", metadata=None,
        extra=None, expected_head_etag=None, schema_version=0, require_thread=False, request_id="")),
        pb.StreamedWrite(seq=2)])  # no op: INVALID_ARGUMENT for that request only
    responses = raw(iter([good.SerializeToString(), b"\xff\xff\xff"]))
    acks = []
    with pytest.raises(grpc.RpcError) as e:
        for resp in responses:
            acks.extend(pb.StreamWritesResponse.FromString(resp).acks)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [a.seq for a in acks] == [1, 2]
    assert acks[0].put_checkpoint.created
    assert acks[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and acks[1].error.reason == "INVALID_FIELD"
    assert client.get_values(tid) == {"c": 1}
    channel.close()


def test_async_stream(sidecar, tid):
    async def main():
        async with AsyncClient(sidecar.address) as c:
            async with c.write_stream() as ws:
                f0 = await ws.put_checkpoint(tid, {"m": ["a"]}, checkpoint_id="c00")
                fs = [await ws.put_checkpoint(tid, {"m": Append([i])}, checkpoint_id=f"c{i:02d}", parent_id=f"c{i - 1:02d}")
                      for i in range(1, 20)]
                missing = await ws.put_writes("", "c0", [("t", 0, "x", 1)])
                await ws.flush()
            assert (await f0).created
            for f in fs:
                assert (await f).created
            with pytest.raises(InvalidArgument):
                await missing
            return await c.get_values(tid)

    assert asyncio.run(main())["m"] == ["a", *range(1, 20)]


def test_durability_override_is_accepted(client, tid):
    assert client.put_checkpoint(tid, {"a": 1}, durability="sync").created
    assert client.put_checkpoint(tid, {"a": 2}, durability="process").created
    with pytest.raises(NotFound):
        client.get_checkpoint(tid + "-nope")
