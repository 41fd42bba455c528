"""Errors: status codes, ErrorInfo (reason, domain, field), size limits, client-side checks, and
"a failed request writes nothing".

All tests here use one sidecar of their own (module_sidecar): the before/after comparisons of the
whole store must not see other modules' writes.
"""
from __future__ import annotations

import re
import uuid
from pathlib import Path

import grpc
import pytest
from conftest import ROOT, store_state
from google.rpc import error_details_pb2, status_pb2

from agentstate import Append, Client, InvalidArgument, Keep, Opaque, SetKeys, errors as client_errors
from agentstate.v1 import errors_pb2
from agentstate.v1 import threads_pb2 as pb
from sidecar import errors as server_errors
CODES = grpc.StatusCode
DOMAIN = "agentstate.v1"


class RecordingClient(Client):
    """A client that keeps the last grpc.RpcError, to look at the raw status and trailers."""

    last_error: grpc.RpcError | None = None

    def _call(self, method, request, timeout):
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            self.last_error = e
            raise client_errors.from_rpc_error(e) from None


def error_info(e: grpc.RpcError) -> tuple[grpc.StatusCode, error_details_pb2.ErrorInfo]:
    """The status code and the one ErrorInfo of a failed call (asserting the envelope)."""
    raw = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin")
    assert raw is not None, f"{e.code()}: no status details ({e.details()})"
    status = status_pb2.Status.FromString(raw)
    assert status.code == e.code().value[0]
    assert status.message == e.details()
    assert len(status.details) == 1
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return e.code(), info


@pytest.fixture
def c(module_sidecar):
    with RecordingClient(module_sidecar.address, namespace=f"ns-{uuid.uuid4().hex[:12]}") as client:
        yield client


@pytest.fixture
def t(c):
    """A thread with metadata, two checkpoint namespaces, a delta chain and pending writes."""
    thread = f"t-{uuid.uuid4().hex[:12]}"
    c.create_thread(thread, {"owner": "me", "half": "y" * 40_000})  # room for 24 KiB more metadata
    c.put_checkpoint(thread, {"l": [1, 2], "m": {"a": 1}, "s": "x", "o": Opaque("t", b"1")}, checkpoint_id="a",
                     metadata={"run_id": "r1"})
    c.put_checkpoint(thread, {"l": Append([3]), "m": Keep(), "s": "y"}, checkpoint_id="b", parent_id="a")
    c.put_checkpoint(thread, {"x": 1}, checkpoint_id="a", checkpoint_ns="sub")
    c.put_writes(thread, "a", [("task", 0, "l", [9]), ("task", 1, "m", {"w": 1})])
    c.create_thread("taken")
    return thread


def rpc(c: Client, method: str, **fields):
    """Call a ThreadService method with a raw request (namespace defaults to the client's)."""
    request = getattr(pb, f"{method}Request")(**fields)
    if "namespace" not in fields:
        request.namespace = c.namespace
    return c._call(getattr(c.threads, method), request, None)


def put(c: Client, thread: str, **fields):
    return rpc(c, "PutCheckpoint", thread_id=thread, **fields)


def msgpack(b: bytes) -> dict:
    return {"msgpack": b}


def channel(value: dict | None = None, **op) -> pb.ChannelWrite:
    return pb.ChannelWrite(value=value, **op) if value is not None else pb.ChannelWrite(**op)


BAD_EXT = b"\xd4\x63\x00"  # fixext 1 with extension type 99
BIG_META = {"big": msgpack(b"\xdb" + (70_000).to_bytes(4, "big") + b"x" * 70_000)}
HALF_META = {"half": msgpack(b"\xda" + (40_000).to_bytes(2, "big") + b"y" * 40_000)}

# (id, call(c, t), code, reason, field, metadata to expect) -- every call fails; mutating ones must write nothing
CASES = [
    # ---- INVALID_FIELD
    ("get-empty-id", lambda c, t: rpc(c, "GetThread", thread_id=""), CODES.INVALID_ARGUMENT, "INVALID_FIELD",
     "thread_id", {}),
    ("create-nul-id", lambda c, t: rpc(c, "CreateThread", thread_id="a\x00b"), CODES.INVALID_ARGUMENT,
     "INVALID_FIELD", "thread_id", {}),
    ("create-long-id", lambda c, t: rpc(c, "CreateThread", thread_id="\u00e9" * 129), CODES.INVALID_ARGUMENT,
     "INVALID_FIELD", "thread_id", {}),
    ("create-long-namespace", lambda c, t: rpc(c, "CreateThread", namespace="n" * 129, thread_id="x"),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "namespace", {}),
    ("create-bad-policy", lambda c, t: rpc(c, "CreateThread", thread_id="new", if_exists=9), CODES.INVALID_ARGUMENT,
     "INVALID_FIELD", "if_exists", {}),
    ("create-nul-request-id", lambda c, t: rpc(c, "CreateThread", thread_id="new", request_id="r\x00"),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "request_id", {}),
    ("get-long-cns", lambda c, t: rpc(c, "GetCheckpoint", thread_id=t, checkpoint_ns="c" * 513),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "checkpoint_ns", {}),
    ("get-empty-channel", lambda c, t: rpc(c, "GetCheckpoint", thread_id=t, channels=["l", ""]),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "channels[1]", {}),
    ("list-threads-page-size", lambda c, t: rpc(c, "ListThreads", page_size=1001), CODES.INVALID_ARGUMENT,
     "INVALID_FIELD", "page_size", {}),
    ("list-checkpoints-page-size", lambda c, t: rpc(c, "ListCheckpoints", thread_id=t, page_size=5000),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "page_size", {}),
    ("list-bad-token", lambda c, t: rpc(c, "ListCheckpoints", thread_id=t, page_token="not a token"),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "page_token", {}),
    ("list-before-nul", lambda c, t: rpc(c, "ListCheckpoints", thread_id=t, before_checkpoint_id="\x00"),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "before_checkpoint_id", {}),
    ("copy-to-itself", lambda c, t: rpc(c, "CopyThread", source_thread_id=t, target_thread_id=t),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "target_thread_id", {}),
    ("put-empty-channel-name", lambda c, t: put(c, t, channels={"": channel(msgpack(b"\x01"))}),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "channels['']", {}),
    ("put-nul-channel-name", lambda c, t: put(c, t, channels={"a\x00": channel(msgpack(b"\x01"))}),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "channels['a\\x00']", {}),
    ("put-no-op", lambda c, t: put(c, t, channels={"x": channel()}), CODES.INVALID_ARGUMENT, "INVALID_FIELD",
     "channels['x']", {}),
    ("put-keep-false", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"l": channel(keep=False)}),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "channels['l'].keep", {}),
    ("put-keep-first-too-big", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={
        "l": channel(delta={"keep_first": 4, "append": [msgpack(b"\x01")]})}),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "channels['l'].delta.keep_first", {}),
    ("put-long-checkpoint-id", lambda c, t: put(c, t, checkpoint_id="c" * 257), CODES.INVALID_ARGUMENT,
     "INVALID_FIELD", "checkpoint_id", {}),
    ("writes-no-value", lambda c, t: rpc(c, "PutWrites", thread_id=t, checkpoint_id="a", writes=[
        {"task_id": "t", "channel": "c", "value": msgpack(b"\x01")}, {"task_id": "t", "idx": 1, "channel": "c"}]),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "writes[1].value", {}),
    ("writes-empty-task", lambda c, t: rpc(c, "PutWrites", thread_id=t, checkpoint_id="a", writes=[
        {"task_id": "", "channel": "c", "value": msgpack(b"\x01")}]),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "writes[0].task_id", {}),
    ("writes-long-task-path", lambda c, t: rpc(c, "PutWrites", thread_id=t, checkpoint_id="a", writes=[
        {"task_id": "t", "channel": "c", "value": msgpack(b"\x01"), "task_path": "p" * 1025}]),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "writes[0].task_path", {}),
    ("writes-no-checkpoint-id", lambda c, t: rpc(c, "PutWrites", thread_id=t, writes=[
        {"task_id": "t", "channel": "c", "value": msgpack(b"\x01")}]),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "checkpoint_id", {}),
    ("prune-keep-zero", lambda c, t: rpc(c, "PruneCheckpoints", thread_ids=[t], keep_latest=0),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "keep_latest", {}),
    ("prune-no-policy", lambda c, t: rpc(c, "PruneCheckpoints", thread_ids=[t]), CODES.INVALID_ARGUMENT,
     "INVALID_FIELD", "policy", {}),
    ("prune-delete-all-false", lambda c, t: rpc(c, "PruneCheckpoints", thread_ids=[t], delete_all=False),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "delete_all", {}),
    ("prune-bad-nanos", lambda c, t: rpc(c, "PruneCheckpoints", thread_ids=[t], older_than={"seconds": 4_000_000_000,
                                                                                           "nanos": -1}),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "older_than", {}),
    ("prune-bad-thread-id", lambda c, t: rpc(c, "PruneCheckpoints", thread_ids=[t, "", t], delete_all=True),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "thread_ids[1]", {}),
    ("prune-too-many-ids", lambda c, t: rpc(c, "PruneCheckpoints", thread_ids=[t] * 1001, delete_all=True),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "thread_ids", {}),
    ("runs-empty-id", lambda c, t: rpc(c, "DeleteCheckpointsForRuns", run_ids=["r1", ""]), CODES.INVALID_ARGUMENT,
     "INVALID_FIELD", "run_ids[1]", {}),
    ("runs-too-many", lambda c, t: rpc(c, "DeleteCheckpointsForRuns", run_ids=["r1"] * 1001),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "run_ids", {}),
    ("diff-empty-from", lambda c, t: rpc(c, "DiffCheckpoints", thread_id=t, to_checkpoint_id="a"),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "from_checkpoint_id", {}),
    # ---- UNSUPPORTED_VALUE: the field names the path down into the value
    ("value-ext-in-list", lambda c, t: put(c, t, channels={"x": channel(msgpack(
        b"\x93\x01\x02\x81\xa1k" + BAD_EXT))}), CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE",
     "channels['x'].value.msgpack[2]['k']", {}),
    ("value-bad-msgpack", lambda c, t: put(c, t, channels={"x": channel(msgpack(b"\xc1"))}), CODES.INVALID_ARGUMENT,
     "UNSUPPORTED_VALUE", "channels['x'].value.msgpack", {}),
    ("value-truncated", lambda c, t: put(c, t, channels={"x": channel(msgpack(b"\x92\x01"))}), CODES.INVALID_ARGUMENT,
     "UNSUPPORTED_VALUE", "channels['x'].value.msgpack", {}),
    ("value-bad-utf8", lambda c, t: put(c, t, channels={"x": channel(msgpack(b"\x91\xa2\xff\xfe"))}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.msgpack", {}),
    ("value-bad-utf8-key", lambda c, t: rpc(c, "CreateThread", thread_id="new", metadata={
        "k": msgpack(b"\x81\xa1\xff\x01")}), CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "metadata['k'].msgpack", {}),
    ("value-int-key", lambda c, t: put(c, t, channels={"x": channel(msgpack(b"\x91\x81\x01\x02"))}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.msgpack[0]", {}),
    ("value-too-deep", lambda c, t: put(c, t, channels={"x": channel(msgpack(b"\x91" * 70 + b"\x01"))}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.msgpack" + "[0]" * 64, {}),
    ("value-bad-datetime", lambda c, t: put(c, t, channels={"x": channel(msgpack(b"\x92\x01\xc7\x03\x02\x00\x00\x00"))}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.msgpack[1]", {}),
    ("value-no-kind", lambda c, t: put(c, t, channels={"x": channel({})}), CODES.INVALID_ARGUMENT,
     "UNSUPPORTED_VALUE", "channels['x'].value", {}),
    ("value-opaque-empty-type", lambda c, t: put(c, t, channels={"x": channel({"opaque": {"data": b"1"}})}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.opaque", {}),
    ("value-opaque-long-type", lambda c, t: put(c, t, channels={"x": channel({"opaque": {"type": "t" * 256}})}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.opaque", {}),
    ("value-nested-forms", lambda c, t: put(c, t, channels={"x": channel({"list": {"items": [
        msgpack(b"\x01"), {"map": {"entries": {"k": msgpack(b"\x91" + BAD_EXT)}}}]}})}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.list.items[1].map.entries['k'].msgpack[0]", {}),
    ("value-in-metadata", lambda c, t: put(c, t, metadata={"k": msgpack(b"\x92\x01" + BAD_EXT)}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "metadata['k'].msgpack[1]", {}),
    ("value-in-extra", lambda c, t: put(c, t, extra=msgpack(b"\x81\xa1e" + BAD_EXT)), CODES.INVALID_ARGUMENT,
     "UNSUPPORTED_VALUE", "extra.msgpack['e']", {}),
    ("value-in-write", lambda c, t: rpc(c, "PutWrites", thread_id=t, checkpoint_id="a", writes=[
        {"task_id": "t", "channel": "c", "value": msgpack(b"\x01")},
        {"task_id": "t", "idx": 1, "channel": "c", "value": msgpack(BAD_EXT)}]),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "writes[1].value.msgpack", {}),
    ("value-in-append", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"l": channel(delta={
        "append": [msgpack(b"\x01"), msgpack(b"\x91" + BAD_EXT)]})}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['l'].delta.append[1].msgpack[0]", {}),
    ("value-in-set", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"m": channel(delta={
        "set": {"k": msgpack(BAD_EXT)}})}), CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE",
     "channels['m'].delta.set['k'].msgpack", {}),
    ("value-in-set-metadata", lambda c, t: rpc(c, "UpdateThread", thread_id=t, set_metadata={"k": msgpack(b"\xc1")}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "set_metadata['k'].msgpack", {}),
    ("value-in-filter", lambda c, t: rpc(c, "ListThreads", metadata_filter={"k": {}}), CODES.INVALID_ARGUMENT,
     "UNSUPPORTED_VALUE", "metadata_filter['k']", {}),
    ("value-in-copy-metadata", lambda c, t: rpc(c, "CopyThread", source_thread_id=t, target_thread_id="copy",
                                                metadata={"k": msgpack(b"\xc1")}),
     CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "metadata['k'].msgpack", {}),
    ("map-key-too-long", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"m": channel(delta={
        "delete": ["k" * 65536]})}), CODES.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['m'].delta", {}),
    # ---- NOT_FOUND
    ("get-thread-missing", lambda c, t: rpc(c, "GetThread", thread_id="nope"), CODES.NOT_FOUND, "THREAD_NOT_FOUND",
     "thread_id", {"thread_id": "nope"}),
    ("update-missing", lambda c, t: rpc(c, "UpdateThread", thread_id="nope", set_metadata={"a": msgpack(b"\x01")}),
     CODES.NOT_FOUND, "THREAD_NOT_FOUND", "thread_id", {"thread_id": "nope"}),
    ("delete-missing", lambda c, t: rpc(c, "DeleteThread", thread_id="nope"), CODES.NOT_FOUND, "THREAD_NOT_FOUND",
     "thread_id", {}),
    ("copy-missing", lambda c, t: rpc(c, "CopyThread", source_thread_id="nope", target_thread_id="copy"),
     CODES.NOT_FOUND, "THREAD_NOT_FOUND", "source_thread_id", {"thread_id": "nope"}),
    ("put-require-thread", lambda c, t: put(c, "nope", require_thread=True, channels={"x": channel(msgpack(b"\x01"))}),
     CODES.NOT_FOUND, "THREAD_NOT_FOUND", "thread_id", {}),
    ("get-checkpoint-thread-missing", lambda c, t: rpc(c, "GetCheckpoint", thread_id="nope"), CODES.NOT_FOUND,
     "THREAD_NOT_FOUND", "thread_id", {}),
    ("diff-thread-missing", lambda c, t: rpc(c, "DiffCheckpoints", thread_id="nope", from_checkpoint_id="a",
                                             to_checkpoint_id="b"), CODES.NOT_FOUND, "THREAD_NOT_FOUND", "thread_id", {}),
    ("get-checkpoint-missing", lambda c, t: rpc(c, "GetCheckpoint", thread_id=t, checkpoint_id="zz"),
     CODES.NOT_FOUND, "CHECKPOINT_NOT_FOUND", "checkpoint_id", {"checkpoint_id": "zz"}),
    ("get-latest-none", lambda c, t: rpc(c, "GetCheckpoint", thread_id="taken"), CODES.NOT_FOUND,
     "CHECKPOINT_NOT_FOUND", "checkpoint_id", {"thread_id": "taken"}),
    ("get-latest-other-cns", lambda c, t: rpc(c, "GetCheckpoint", thread_id=t, checkpoint_ns="none"),
     CODES.NOT_FOUND, "CHECKPOINT_NOT_FOUND", "checkpoint_id", {}),
    ("diff-from-missing", lambda c, t: rpc(c, "DiffCheckpoints", thread_id=t, from_checkpoint_id="zz",
                                           to_checkpoint_id="b"), CODES.NOT_FOUND, "CHECKPOINT_NOT_FOUND",
     "from_checkpoint_id", {"checkpoint_id": "zz"}),
    ("diff-to-missing", lambda c, t: rpc(c, "DiffCheckpoints", thread_id=t, from_checkpoint_id="a",
                                         to_checkpoint_id="zz"), CODES.NOT_FOUND, "CHECKPOINT_NOT_FOUND",
     "to_checkpoint_id", {"checkpoint_id": "zz"}),
    # ---- ALREADY_EXISTS
    ("create-exists", lambda c, t: rpc(c, "CreateThread", thread_id=t, metadata={"x": msgpack(b"\x01")}),
     CODES.ALREADY_EXISTS, "THREAD_ALREADY_EXISTS", "thread_id", {}),
    ("copy-target-exists", lambda c, t: rpc(c, "CopyThread", source_thread_id=t, target_thread_id="taken"),
     CODES.ALREADY_EXISTS, "THREAD_ALREADY_EXISTS", "target_thread_id", {"thread_id": "taken"}),
    # ---- FAILED_PRECONDITION
    ("update-stale-etag", lambda c, t: rpc(c, "UpdateThread", thread_id=t, etag="1-1", replace_metadata=True),
     CODES.FAILED_PRECONDITION, "ETAG_MISMATCH", "etag", {"etag": "1-1"}),
    ("delete-stale-etag", lambda c, t: rpc(c, "DeleteThread", thread_id=t, etag="stale"), CODES.FAILED_PRECONDITION,
     "ETAG_MISMATCH", "etag", {"etag": "stale"}),
    ("put-stale-head", lambda c, t: put(c, t, expected_head_etag="0" * 64, channels={"x": channel(msgpack(b"\x01"))}),
     CODES.FAILED_PRECONDITION, "ETAG_MISMATCH", "expected_head_etag", {"checkpoint_id": "b"}),
    ("put-expects-no-head", lambda c, t: put(c, t, expected_head_etag="", checkpoint_ns="sub",
                                             channels={"x": channel(msgpack(b"\x02"))}),
     CODES.FAILED_PRECONDITION, "ETAG_MISMATCH", "expected_head_etag", {"checkpoint_id": "a"}),
    ("put-new-thread-stale-head", lambda c, t: put(c, "brand-new", expected_head_etag="e",
                                                   channels={"x": channel(msgpack(b"\x01"))}),
     CODES.FAILED_PRECONDITION, "ETAG_MISMATCH", "expected_head_etag", {"current_etag": ""}),
    ("delta-base-root", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"l": channel(delta={
        "base_root": b"\x00" * 32, "append": [msgpack(b"\x01")]})}),
     CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "channels['l'].delta.base_root", {}),
    ("delta-missing-base", lambda c, t: put(c, t, parent_checkpoint_id="zz", channels={"l": channel(keep=True)}),
     CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "parent_checkpoint_id", {"checkpoint_id": "zz"}),
    ("delta-base-other-cns", lambda c, t: put(c, t, base_checkpoint_id="b", checkpoint_ns="sub",
                                              channels={"l": channel(keep=True)}),
     CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "base_checkpoint_id", {}),
    ("delta-no-base", lambda c, t: put(c, t, channels={"l": channel(delta={"append": [msgpack(b"\x01")]})}),
     CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "parent_checkpoint_id", {}),
    ("delta-list-op-on-map", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"m": channel(delta={
        "append": [msgpack(b"\x01")]})}), CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "channels['m'].delta", {}),
    ("delta-map-op-on-list", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"l": channel(delta={
        "delete": ["k"]})}), CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "channels['l'].delta", {}),
    ("delta-on-scalar", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"s": channel(delta={
        "keep_first": 0})}), CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "channels['s'].delta", {}),
    ("keep-absent-channel", lambda c, t: put(c, t, parent_checkpoint_id="b", channels={"o": channel(keep=True)}),
     CODES.FAILED_PRECONDITION, "BASE_MISMATCH", "channels['o'].keep", {}),
    # ---- RESOURCE_EXHAUSTED (documented limits)
    ("create-metadata-limit", lambda c, t: rpc(c, "CreateThread", thread_id="new", metadata=BIG_META),
     CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "metadata", {"limit": "metadata_bytes"}),
    ("merge-metadata-limit", lambda c, t: rpc(c, "CreateThread", thread_id=t, if_exists=pb.IF_EXISTS_MERGE_METADATA,
                                              metadata={"more": HALF_META["half"]}),
     CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "metadata", {"limit": "metadata_bytes"}),
    ("update-metadata-limit", lambda c, t: rpc(c, "UpdateThread", thread_id=t, set_metadata=BIG_META),
     CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "set_metadata", {"limit": "metadata_bytes"}),
    ("put-metadata-limit", lambda c, t: put(c, t, metadata=BIG_META), CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED",
     "metadata", {"limit": "metadata_bytes"}),
    ("update-merged-metadata-limit", lambda c, t: rpc(c, "UpdateThread", thread_id=t,
                                                      set_metadata={"more": HALF_META["half"]}),
     CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "set_metadata", {"limit": "metadata_bytes"}),
    ("copy-metadata-limit", lambda c, t: rpc(c, "CopyThread", source_thread_id=t, target_thread_id="copy",
                                             metadata={"more": HALF_META["half"]}),
     CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "metadata", {"limit": "metadata_bytes"}),
    ("too-many-channels", lambda c, t: put(c, t, channels={f"c{i}": channel(msgpack(b"\x01")) for i in range(10_001)}),
     CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "channels", {"limit": "channels"}),
    ("too-many-writes", lambda c, t: rpc(c, "PutWrites", thread_id=t, checkpoint_id="a", writes=[
        {"task_id": "t", "idx": i, "channel": "c", "value": msgpack(b"\x01")} for i in range(10_001)]),
     CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "writes", {"limit": "writes"}),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_error(c, t, case):
    name, call, code, reason, field, metadata = case
    c.collect_garbage()
    before = store_state(c, t, "taken", "new", "copy", "nope", "brand-new")
    with pytest.raises(client_errors.AgentStateError) as raised:
        call(c, t)
    got_code, info = error_info(c.last_error)
    assert (got_code, info.reason, info.domain) == (code, reason, DOMAIN), f"{got_code}: {raised.value}"
    assert info.metadata.get("field") == field, raised.value
    for key, value in metadata.items():
        assert info.metadata.get(key) == value, f"{key}: {dict(info.metadata)}"
    # the client maps the same information
    err = raised.value
    assert (err.code, err.reason, err.field) == (code, reason, field)
    assert isinstance(err, client_errors._BY_CODE[code])
    # a failed request writes nothing: no thread, checkpoint, write or blob, and no garbage either
    assert store_state(c, t, "taken", "new", "copy", "nope", "brand-new") == before
    assert c.collect_garbage().freed_blobs == 0


def test_etag_mismatch_reports_the_current_etag(c, t):
    thread = c.get_thread(t)
    head = c.get_checkpoint(t, omit_values=True)
    for call, current in ((lambda: c.update_thread(t, {"a": 1}, etag="stale"), thread.etag),
                          (lambda: c.delete_thread(t, etag="stale"), thread.etag),
                          (lambda: c.put_checkpoint(t, {"a": 1}, expected_head_etag="stale"), head.etag)):
        with pytest.raises(client_errors.FailedPrecondition) as raised:
            call()
        assert raised.value.reason == "ETAG_MISMATCH"
        assert raised.value.metadata["current_etag"] == current


def test_request_id_reused_by_every_mutating_call(c, t):
    calls = {
        "CreateThread": lambda rid, n: rpc(c, "CreateThread", thread_id=f"rid-{n}", request_id=rid),
        "UpdateThread": lambda rid, n: rpc(c, "UpdateThread", thread_id=t, set_metadata={"n": msgpack(bytes((n,)))},
                                           request_id=rid),
        "DeleteThread": lambda rid, n: rpc(c, "DeleteThread", thread_id=f"gone-{n}", allow_missing=True,
                                           request_id=rid),
        "CopyThread": lambda rid, n: rpc(c, "CopyThread", source_thread_id=t, target_thread_id=f"cp-{n}",
                                         request_id=rid),
        "PutCheckpoint": lambda rid, n: put(c, t, checkpoint_id=f"p{n}", channels={"x": channel(msgpack(b"\x01"))},
                                            request_id=rid),
        "PutWrites": lambda rid, n: rpc(c, "PutWrites", thread_id=t, checkpoint_id="a", request_id=rid, writes=[
            {"task_id": "r", "idx": n, "channel": "c", "value": msgpack(b"\x01")}]),
        "PruneCheckpoints": lambda rid, n: rpc(c, "PruneCheckpoints", thread_ids=[f"none-{n}"], delete_all=True,
                                               request_id=rid),
        "DeleteCheckpointsForRuns": lambda rid, n: rpc(c, "DeleteCheckpointsForRuns", run_ids=[f"run-{n}"],
                                                       request_id=rid),
    }
    for method, call in calls.items():
        rid = f"rid-{method}"
        first = call(rid, 1)
        assert call(rid, 1) == first, method
        before = store_state(c, t, "rid-2", "cp-2")
        with pytest.raises(InvalidArgument) as raised:
            call(rid, 2)
        code, info = error_info(c.last_error)
        assert (code, info.reason, info.domain, info.metadata["field"]) == (
            CODES.INVALID_ARGUMENT, "REQUEST_ID_REUSED", DOMAIN, "request_id"), method
        assert raised.value.reason == "REQUEST_ID_REUSED"
        assert store_state(c, t, "rid-2", "cp-2") == before, method
        # the same id in another method is another request as well
        other = next(m for m in calls if m != method)
        with pytest.raises(InvalidArgument):
            calls[other](rid, 1)


def test_failed_request_does_not_use_up_its_request_id(c, t):
    with pytest.raises(client_errors.FailedPrecondition):
        c.put_checkpoint(t, {"x": 1}, expected_head_etag="stale", request_id="retry-me")
    head = c.get_checkpoint(t, omit_values=True).etag
    r = c.put_checkpoint(t, {"x": 1}, expected_head_etag=head, request_id="retry-me")
    assert r.created


def test_long_echoes_keep_the_status_intact(c, t):
    """Errors quote request content (keys in field paths); huge keys must not break the trailers."""
    huge = "\U0001d11e" * 50_000  # 200 kB of 4-byte characters
    cases = [
        lambda: rpc(c, "ListThreads", metadata_filter={huge: msgpack(b"\x81\xa1k" * 80 + b"\xc0")}),
        lambda: put(c, t, channels={"x": channel({"map": {"entries": {huge: msgpack(b"\xc1")}}})}),
        lambda: rpc(c, "UpdateThread", thread_id=t, etag=huge),
        lambda: put(c, t, expected_head_etag=huge),
    ]
    for call in cases:
        with pytest.raises(client_errors.AgentStateError):
            call()
        code, info = error_info(c.last_error)
        assert code in (CODES.INVALID_ARGUMENT, CODES.FAILED_PRECONDITION), c.last_error.details()
        assert info.domain == DOMAIN and info.reason in ("UNSUPPORTED_VALUE", "ETAG_MISMATCH")
        assert info.metadata["field"].split("[")[0] in ("metadata_filter", "channels", "etag", "expected_head_etag")


def test_message_over_64_mib_is_refused(module_sidecar, c, t):
    before = store_state(c, t)
    big = pb.PutCheckpointRequest(namespace=c.namespace, thread_id=t)
    big.channels["x"].value.opaque.type = "blob"
    big.channels["x"].value.opaque.data = b"\x00" * (64 * 1024 * 1024 + 1024)
    options = [("grpc.max_send_message_length", 128 * 1024 * 1024)]
    with grpc.insecure_channel(module_sidecar.address, options=options) as channel_:
        call = channel_.unary_unary("/agentstate.v1.ThreadService/PutCheckpoint",
                                    request_serializer=pb.PutCheckpointRequest.SerializeToString,
                                    response_deserializer=pb.PutCheckpointResponse.FromString)
        with pytest.raises(grpc.RpcError) as raised:
            call(big, timeout=60)
    assert raised.value.code() == CODES.RESOURCE_EXHAUSTED
    del big
    assert store_state(c, t) == before
    assert c.get_thread(t).thread_id == t  # still serving


def test_malformed_request_body(module_sidecar, c):
    with grpc.insecure_channel(module_sidecar.address) as channel_:
        call = channel_.unary_unary("/agentstate.v1.ThreadService/CreateThread", request_serializer=None,
                                    response_deserializer=None)
        for body in (b"\xff\xff\xff", b"\x12\x02\xff\xfe", b"\x1a\x80"):
            with pytest.raises(grpc.RpcError) as raised:
                call(body, timeout=10)
            code, info = error_info(raised.value)
            assert (code, info.reason, info.domain) == (CODES.INVALID_ARGUMENT, "INVALID_FIELD", DOMAIN)
            assert "agentstate.v1.CreateThreadRequest" in raised.value.details()


def test_unknown_method_is_unimplemented(module_sidecar, c):
    """Methods are served by name through generic handlers (api/service.py): a method no service has, or a
    service that does not exist, is UNIMPLEMENTED, and the real methods beside it still answer."""
    with grpc.insecure_channel(module_sidecar.address) as channel_:
        for path in ("/agentstate.v1.ThreadService/NoSuchMethod", "/agentstate.v1.NoSuchService/GetThread"):
            call = channel_.unary_unary(path, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as raised:
                call(b"", timeout=10)
            assert raised.value.code() == CODES.UNIMPLEMENTED, path
    t = f"t-{uuid.uuid4().hex[:8]}"
    c.create_thread(t)
    assert c.get_thread(t).thread_id == t


def test_failing_jobs_in_a_group_commit_write_nothing(c, t):
    """Concurrent puts are committed together; the failing ones in the batch leave no trace."""
    c.collect_garbage()
    before = c.store_stats()
    futures = []
    for i in range(40):
        req = pb.PutCheckpointRequest(namespace=c.namespace, thread_id=f"batch-{i}", checkpoint_id="c",
                                      expected_head_etag="" if i % 2 else "stale")
        req.channels["v"].value.msgpack = bytes((0xA5,)) + f"v{i:04d}".encode()
        futures.append((i, c.threads.PutCheckpoint.future(req, timeout=30)))
    for i, f in futures:
        if i % 2:
            assert f.result().created
        else:
            with pytest.raises(grpc.RpcError) as raised:
                f.result()
            assert error_info(raised.value)[1].reason == "ETAG_MISMATCH"
    after = c.store_stats()
    assert (after.threads, after.checkpoints) == (before.threads + 20, before.checkpoints + 20)
    assert after.blobs == before.blobs + 20
    assert sorted(th.thread_id for th in c.list_threads() if th.thread_id.startswith("batch-")) == sorted(
        f"batch-{i}" for i in range(1, 40, 2))
    assert c.collect_garbage().freed_blobs == 0


# ---------------------------------------------------------------- the reason table

def test_reason_table_matches_errors_proto():
    """Every ErrorReason has the status code its comment in errors.proto gives, on server and client."""
    text = Path(ROOT, "proto/agentstate/v1/errors.proto").read_text()
    documented = dict(re.findall(r"//\s+([A-Z_]+) \(([A-Z_]+)\):", text))
    names = [v.name for v in errors_pb2.ErrorReason.DESCRIPTOR.values if v.number]
    assert sorted(documented) == sorted(names)
    assert {k: v.name for k, v in server_errors.REASONS.items()} == documented
    for reason, code in server_errors.REASONS.items():
        assert client_errors._BY_CODE[code].__name__ != "AgentStateError", reason


# ---------------------------------------------------------------- client-side checks

@pytest.fixture
def offline():
    """A client whose server does not exist: an error other than InvalidArgument means it tried to send."""
    with Client("unix:/nonexistent/agentstate.sock", timeout=1) as client:
        yield client


class Weird:
    pass


@pytest.mark.parametrize("call, field", [
    (lambda c: c.put_checkpoint("t", {"x": [1, 2, {"k": Weird()}]}), "channels['x'][2]['k']"),
    (lambda c: c.put_checkpoint("t", {"x": {"a": {1: 2}}}), "channels['x']['a']"),
    (lambda c: c.put_checkpoint("t", {"x": ["ok", "\ud800"]}), "channels['x'][1]"),
    (lambda c: c.put_checkpoint("t", {"x": {"bad \udfff key": 1}}), "channels['x']['bad \\udfff key']"),
    (lambda c: c.put_checkpoint("t", {"x": [[[]]] * 2 + [eval("[" * 70 + "]" * 70)]}), None),
    (lambda c: c.put_checkpoint("t", {"x": Opaque("", b"data")}), "channels['x']"),
    (lambda c: c.put_checkpoint("t", {"x": Opaque("t" * 256, b"")}), "channels['x']"),
    (lambda c: c.put_checkpoint("t", {"x": Opaque("t", "not bytes")}), "channels['x']"),
    (lambda c: c.put_checkpoint("t", {"x": [Opaque("a", b""), Opaque("", b"")]}), "channels['x'][1]"),
    (lambda c: c.put_checkpoint("t", {"x": {Opaque("", b"")}}), "channels['x']{set}[0]"),
    (lambda c: c.put_checkpoint("t", {"x": Append([1, Weird()])}), "channels['x'].append[1]"),
    (lambda c: c.put_checkpoint("t", {"x": SetKeys({"k": [Weird()]})}), "channels['x'].set['k'][0]"),
    (lambda c: c.put_checkpoint("t", {"x": 1}, metadata={"m": [Weird()]}), "metadata['m'][0]"),
    (lambda c: c.put_checkpoint("t", {"x": 1}, extra={"e": Weird()}), "extra['e']"),
    (lambda c: c.put_writes("t", "c", [("task", 0, "ch", 1), ("task", 1, "ch", {"k": Weird()})]),
     "writes[1].value['k']"),
    (lambda c: c.create_thread("t", {"m": complex(1, 2)}), "metadata['m']"),
    (lambda c: c.update_thread("t", {"m": object()}), "set_metadata['m']"),
    (lambda c: list(c.list_threads({"m": Weird()})), "metadata_filter['m']"),
    (lambda c: list(c.list_checkpoints("t", metadata_filter={"m": Weird()})), "metadata_filter['m']"),
    (lambda c: c.copy_thread("a", "b", metadata={"m": Weird()}), "metadata['m']"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_client_refuses_unsupported_values_before_sending(offline, call, field):
    with pytest.raises(InvalidArgument) as raised:
        call(offline)
    err = raised.value
    assert err.reason == "UNSUPPORTED_VALUE" and err.code == CODES.INVALID_ARGUMENT
    if field is not None:
        assert err.field == field
    else:
        assert err.field.startswith("channels['x'][2]") and "deeper than 64" in err.message


@pytest.mark.parametrize("call, field", [
    (lambda c: c.create_thread("t", {1: "x"}), "metadata"),
    (lambda c: c.put_checkpoint("t", {("tuple",): 1}), "channels"),
    (lambda c: c.update_thread("t", {b"bytes": 1}), "set_metadata"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_client_refuses_non_string_keys_before_sending(offline, call, field):
    with pytest.raises(InvalidArgument) as raised:
        call(offline)
    assert (raised.value.reason, raised.value.field) == ("INVALID_FIELD", field)


def test_client_values_the_server_refuses_too(c, t):
    """What the client checks is what the server checks: the same value sent raw gets UNSUPPORTED_VALUE."""
    with pytest.raises(InvalidArgument) as raised:
        put(c, t, channels={"x": channel({"opaque": {"type": "", "data": b"data"}})})
    assert raised.value.reason == "UNSUPPORTED_VALUE"
