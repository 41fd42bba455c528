"""BatchWrite: puts and pending writes in order, in one transaction."""
from __future__ import annotations

import grpc
import pytest
from conftest import expect_error, store_state

from agentstate import Append, Keep, Opaque, checkpoint_values, from_value
from agentstate import _requests as rq

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def put(client, tid, channels, cid, parent="", **kw):
    return rq.put_checkpoint_request(client.namespace, tid, channels, checkpoint_id=cid, parent_id=parent,
                                     base_id="", checkpoint_ns=kw.pop("cns", ""), metadata=kw.pop("metadata", None),
                                     extra=None, expected_head_etag=None, schema_version=0, require_thread=False,
                                     request_id=kw.pop("request_id", ""))


def writes(client, tid, cid, rows, request_id=""):
    return rq.put_writes_request(client.namespace, tid, cid, rows, "", request_id)


def test_batch_applies_in_order_with_bases_from_the_batch(client, tid):
    resp = client.batch_write([
        put(client, tid, {"l": [1, 2], "s": "x", "o": Opaque("t", b"1")}, "a", metadata={"step": 0}),
        writes(client, tid, "a", [("task", 0, "l", [3])]),
        put(client, tid, {"l": Append([3]), "s": Keep(), "o": Keep()}, "b", "a", metadata={"step": 1}),
        put(client, tid, {"l": Append([4], keep_first=1), "s": "y"}, "c", "b"),
        writes(client, tid, "c", [("task", 0, "s", "z"), ("task", 1, "l", [5])]),
    ])
    kinds = [r.WhichOneof("result") for r in resp.results]
    assert kinds == ["put_checkpoint", "put_writes", "put_checkpoint", "put_checkpoint", "put_writes"]
    assert resp.results[1].put_writes.stored == 1 and resp.results[4].put_writes.stored == 2
    assert client.get_values(tid, "a") == {"l": [1, 2], "s": "x", "o": Opaque("t", b"1")}
    assert client.get_values(tid, "b") == {"l": [1, 2, 3], "s": "x", "o": Opaque("t", b"1")}
    assert client.get_values(tid, "c") == {"l": [1, 4], "s": "y"}
    cp = client.get_checkpoint(tid, "c", include_pending_writes=True)
    assert [from_value(w.value) for w in cp.pending_writes] == ["z", [5]]
    # the same roots and etags as the single calls give
    other = tid + "-single"
    for r in (put(client, other, {"l": [1, 2], "s": "x", "o": Opaque("t", b"1")}, "a", metadata={"step": 0}),
              put(client, other, {"l": Append([3]), "s": Keep(), "o": Keep()}, "b", "a", metadata={"step": 1})):
        single = client._call(client.threads.PutCheckpoint, r, None)
        batched = resp.results[0 if single.checkpoint.checkpoint_id == "a" else 2].put_checkpoint
        assert {k: v.root for k, v in single.checkpoint.channels.items()} == \
               {k: v.root for k, v in batched.checkpoint.channels.items()}


def test_batch_is_all_or_nothing(client, tid):
    client.put_checkpoint(tid, {"v": 0}, checkpoint_id="base")
    before = store_state(client, tid)
    with expect_error(INVALID, "UNSUPPORTED_VALUE", "writes[2].put_checkpoint.channels['bad'].value.msgpack",
                      index="2") as info:
        bad = put(client, tid, {"ok": 1}, "y", "x")
        bad.channels["bad"].value.msgpack = b"\xc1"  # never valid MessagePack
        client.batch_write([put(client, tid, {"v": 1}, "x", "base"), writes(client, tid, "x", [("t", 0, "c", 1)]),
                            bad])
    assert info.value.message.startswith("writes[2].put_checkpoint: ")
    with expect_error(grpc.StatusCode.FAILED_PRECONDITION, "BASE_MISMATCH", "writes[1].put_checkpoint.parent_checkpoint_id",
                      index="1"):
        client.batch_write([put(client, tid, {"v": 1}, "x", "base"), put(client, tid, {"v": Keep()}, "z", "nowhere")])
    with expect_error(INVALID, "INVALID_FIELD", "writes[0].put_writes.writes[0].channel", index="0"):
        client.batch_write([writes(client, tid, "x", [("t", 0, "", 1)])])
    assert store_state(client, tid) == before


def test_batch_request_validation(client, tid):
    req = rq.batch_write_request(client.namespace, [put(client, tid, {"v": 1}, "a")])
    req.writes[0].put_checkpoint.namespace = "elsewhere"
    with expect_error(INVALID, "INVALID_FIELD", "writes[0].put_checkpoint.namespace"):
        client._call(client.threads.BatchWrite, req, None)
    req = rq.batch_write_request(client.namespace, [put(client, tid, {"v": 1}, "a")])
    req.writes.add()
    with expect_error(INVALID, "INVALID_FIELD", "writes[1]"):
        client._call(client.threads.BatchWrite, req, None)
    with expect_error(INVALID, "INVALID_FIELD", "writes[0].put_writes.request_id"):
        client.batch_write([writes(client, tid, "a", [("t", 0, "c", 1)], request_id="mine")])
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "writes", limit="batch_writes"):
        client.batch_write([writes(client, tid, "a", [("t", i, "c", i)]) for i in range(1001)])
    with pytest.raises(TypeError):
        rq.batch_write_request(client.namespace, [object()])
    assert len(client.batch_write([]).results) == 0


def test_batch_request_id_makes_a_retry_return_the_first_result(client, tid):
    batch = [put(client, tid, {"v": 1}, ""), writes(client, tid, "w", [("t", 0, "c", 1)])]  # server-made id
    first = client.batch_write(batch, request_id=f"{tid}-r1")
    again = client.batch_write(batch, request_id=f"{tid}-r1")
    assert first == again
    assert len(list(client.list_checkpoints(tid))) == 1
    cid = first.results[0].put_checkpoint.checkpoint.checkpoint_id
    assert checkpoint_values(client.get_checkpoint(tid, cid)) == {"v": 1}


def test_batch_retry_rules():
    ok = rq.batch_write_request("default", [rq.put_writes_request("default", "t", "c", [], "", "")])
    assert rq.prepare(ok, auto_request_ids=False)
    named = rq.batch_write_request("default", [rq.put_checkpoint_request(
        "default", "t", {}, checkpoint_id="", parent_id="", base_id="", checkpoint_ns="", metadata=None, extra=None,
        expected_head_etag=None, schema_version=0, require_thread=False, request_id="")])
    assert named.writes[0].put_checkpoint.checkpoint_id  # the client named it: safe to resend
    assert rq.prepare(named, auto_request_ids=False)
    # a put the server must name (as sent by other clients) is only retried with a request id
    no_id = rq.batch_write_request("default", [rq.pb.PutCheckpointRequest(thread_id="t")])
    assert not rq.prepare(no_id, auto_request_ids=False)
    assert rq.prepare(no_id, auto_request_ids=True) and no_id.request_id.startswith("auto-")
