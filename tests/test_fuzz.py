"""Fuzzing every RPC of ThreadService and AdminService with random and malformed requests.

Two kinds of input: (a) structurally valid messages with random field values
(identifiers with NUL, huge or exotic text, random Values including malformed
MessagePack and deep nesting, random deltas) and (b) raw random bytes as the
request body (random, and mutations of valid requests). The server must
answer every call within a deadline with OK or a proper status: a known
gRPC code with one ErrorInfo (domain agentstate.v1) whose reason matches the
code. UNKNOWN, INTERNAL, DEADLINE_EXCEEDED and UNAVAILABLE are failures.
Afterwards the process is alive, healthy and its store intact.
"""
from __future__ import annotations

import datetime as dt
import os

import grpc
import pytest
from google.protobuf import descriptor as _descriptor
from google.protobuf import message_factory
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import Append, Keep, SetKeys, codec
from agentstate.v1 import admin_pb2, threads_pb2, values_pb2

#: reason -> status code (errors.proto); the fuzz checks every error against it.
REASON_CODES = {
    "INVALID_FIELD": grpc.StatusCode.INVALID_ARGUMENT,
    "UNSUPPORTED_VALUE": grpc.StatusCode.INVALID_ARGUMENT,
    "THREAD_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "CHECKPOINT_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "THREAD_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "ETAG_MISMATCH": grpc.StatusCode.FAILED_PRECONDITION,
    "BASE_MISMATCH": grpc.StatusCode.FAILED_PRECONDITION,
    "LIMIT_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "REQUEST_ID_REUSED": grpc.StatusCode.INVALID_ARGUMENT,
    "STORAGE_FULL": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "OVERLOADED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "SHUTTING_DOWN": grpc.StatusCode.UNAVAILABLE,
    "CONFLICT": grpc.StatusCode.ABORTED,
    "RUN_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "RUN_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "THREAD_BUSY": grpc.StatusCode.FAILED_PRECONDITION,
    "RUN_NOT_ACTIVE": grpc.StatusCode.FAILED_PRECONDITION,
    "LEASE_LOST": grpc.StatusCode.FAILED_PRECONDITION,
    "BUDGET_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "STEP_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "STEP_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "STEP_ENDED": grpc.StatusCode.FAILED_PRECONDITION,
    "ARTIFACT_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "EFFECT_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "EFFECT_IN_PROGRESS": grpc.StatusCode.ABORTED,
    "EFFECT_TOKEN_STALE": grpc.StatusCode.FAILED_PRECONDITION,
    "EFFECT_KEY_REUSED": grpc.StatusCode.FAILED_PRECONDITION,
}
CALL_DEADLINE = 20.0  # seconds; generous for 2 slow cores, a hang is far longer
#: AGENTSTATE_FUZZ_SCALE=10 runs ten times the examples (a local soak); CI keeps the default.
SCALE = float(os.environ.get("AGENTSTATE_FUZZ_SCALE", "1"))

SERVICES = [threads_pb2.DESCRIPTOR.services_by_name["ThreadService"],
            admin_pb2.DESCRIPTOR.services_by_name["AdminService"]]
ALL_METHODS = [m for s in SERVICES for m in s.methods]
#: unary calls are fuzzed one request at a time; StreamWrites (bidirectional) by test_stream_writes
METHODS = [m for m in ALL_METHODS if not (m.client_streaming or m.server_streaming)]
METHOD_IDS = [m.name for m in METHODS]

NAMESPACE = "fuzz"
THREADS = ["f-0", "f-1", "f-2"]
CHECKPOINTS = ["c-0", "c-1", "c-2"]
CHECKPOINT_NSES = ["", "sub"]
CHANNELS = ["l", "m", "s", "o"]


# ---------------------------------------------------------------- strategies

odd_text = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(codec="utf-8"), max_size=40),
    st.sampled_from(["", "\x00", "a\x00b", "\U0010ffff", "\u2603" * 90, " ", "../..", "%s%n", "\ufeff"]),
    st.integers(200, 3000).map(lambda n: "x" * n),
    st.integers(200, 20_000).map(lambda n: "\U0001d11e" * n),  # 4 UTF-8 bytes each, percent-encoded in errors
)


def mostly(common: st.SearchStrategy, rare: st.SearchStrategy, weight: int = 4) -> st.SearchStrategy:
    """``common`` about weight/(weight+1) of the time (shrinking towards it)."""
    return st.sampled_from(range(weight + 1)).flatmap(lambda i: rare if i == weight else common)


#: Seeded names per field, so that most requests get past validation to real work.
POOLS = {
    "namespace": [NAMESPACE], "thread_id": THREADS, "source_thread_id": THREADS,
    "target_thread_id": THREADS + ["copy-1", "copy-2"], "thread_ids": THREADS,
    "checkpoint_id": CHECKPOINTS + ["c-new"], "parent_checkpoint_id": CHECKPOINTS, "base_checkpoint_id": CHECKPOINTS,
    "from_checkpoint_id": CHECKPOINTS, "to_checkpoint_id": CHECKPOINTS, "before_checkpoint_id": CHECKPOINTS,
    "checkpoint_ns": CHECKPOINT_NSES, "channel": CHANNELS, "channels": CHANNELS, "known_roots": CHANNELS,
    "task_id": ["task", "other"], "run_ids": ["run-0", "run-1", "run-2"], "metadata": ["run_id", "step", "k"],
    "metadata_filter": ["run_id", "step"], "set_metadata": ["run_id", "k"], "remove_metadata_keys": ["k"],
    "set": ["k0", "k1", "new"], "delete": ["k0", "k2"],
}


def named(name: str) -> st.SearchStrategy:
    """Strings for a field (or map key) called ``name``: mostly seeded names, sometimes anything."""
    pool = POOLS.get(name)
    return odd_text if pool is None else mostly(st.sampled_from(pool), odd_text, 8)

small_uint = st.one_of(st.integers(0, 3), st.integers(0, 2**32 - 1))

python_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=20),
              st.binary(max_size=20), st.uuids(), st.decimals(places=3),
              st.datetimes(timezones=st.none() | st.just(dt.timezone.utc) | st.timezones())),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=12,
)


def _ext(code: int, payload: bytes) -> bytes:
    return bytes((0xC7, len(payload), code & 0xFF)) + payload if len(payload) < 256 else \
        b"\xc8" + len(payload).to_bytes(2, "big") + bytes((code & 0xFF,)) + payload


malformed_msgpack = st.one_of(
    st.binary(max_size=40),
    st.tuples(st.integers(-128, 127), st.binary(max_size=40)).map(lambda t: _ext(*t)),
    st.tuples(st.sampled_from([1, 2, 3, 4, 5, 6]), st.binary(max_size=30)).map(lambda t: _ext(*t)),
    st.integers(40, 300).map(lambda n: b"\x91" * n + b"\x01"),  # nested deeper than allowed
    st.integers(40, 300).map(lambda n: b"\x81\xa1k" * n + b"\xc0"),
    st.sampled_from([b"\x81\x01\x02", b"\x81\xc0\x01", b"\x92\x01", b"\xdd\xff\xff\xff\xff", b"\xc1",
                     b"\xa3ab", b"\xd9\x03\xff\xfe\xfd", b"\xc7\x00\x06", b"\xc7\x02\x06\x05a"]),
    python_values.map(codec.encode).flatmap(lambda b: st.integers(0, max(len(b) - 1, 0)).map(lambda n: b[:n])),
)
msgpack_bytes = st.one_of(python_values.map(codec.encode), malformed_msgpack)


def values(depth: int = 0) -> st.SearchStrategy:
    leaf = st.one_of(
        msgpack_bytes.map(lambda b: values_pb2.Value(msgpack=b)),
        st.builds(lambda t, d: values_pb2.Value(opaque=values_pb2.OpaqueValue(type=t, data=d)), odd_text,
                  st.binary(max_size=40)),
        st.just(values_pb2.Value()),
    )
    if depth >= 3:
        return leaf
    inner = st.deferred(lambda: values(depth + 1))
    return st.one_of(
        leaf,
        st.lists(inner, max_size=4).map(lambda xs: values_pb2.Value(list=values_pb2.ListValue(items=xs))),
        st.dictionaries(odd_text, inner, max_size=4).map(
            lambda d: values_pb2.Value(map=values_pb2.MapValue(entries=d))),
        st.integers(20, 40).map(_deep_list),  # deeper: see test_deeply_nested_bodies
    )


def _deep_list(n: int) -> values_pb2.Value:
    """A list nested n deep (built in place: copying deep messages re-parses them)."""
    top = values_pb2.Value()
    v = top
    for _ in range(n):
        v = v.list.items.add()
    v.msgpack = b"\x01"
    return top


def deltas() -> st.SearchStrategy:
    def build(base_root, keep_first, append, sets, delete):
        d = values_pb2.ValueDelta(base_root=base_root, append=append, set=sets, delete=delete)
        if keep_first is not None:
            d.keep_first = keep_first
        return d

    return st.builds(build, mostly(st.just(b""), st.binary(max_size=40), 2),
                     st.none() | st.integers(0, 40) | st.integers(0, 2**64 - 1), st.lists(values(2), max_size=3),
                     st.dictionaries(named("set"), values(2), max_size=3), st.lists(named("delete"), max_size=3))


def timestamps() -> st.SearchStrategy:
    return st.builds(lambda s, n: timestamp_pb2.Timestamp(seconds=s, nanos=n),
                     st.integers(-(2**63), 2**63 - 1) | st.integers(1_600_000_000, 2_000_000_000),
                     st.integers(-(2**31), 2**31 - 1) | st.just(0))


def channel_writes() -> st.SearchStrategy:
    return st.one_of(
        values().map(lambda v: threads_pb2.ChannelWrite(value=v)),
        deltas().map(lambda d: threads_pb2.ChannelWrite(delta=d)),
        st.booleans().map(lambda b: threads_pb2.ChannelWrite(keep=b)),
        st.just(threads_pb2.ChannelWrite()),
    )


SPECIAL = {
    "agentstate.v1.Value": values,
    "agentstate.v1.ValueDelta": deltas,
    "agentstate.v1.ChannelWrite": channel_writes,
    "google.protobuf.Timestamp": timestamps,
}
F = _descriptor.FieldDescriptor


def scalar(field, name: str) -> st.SearchStrategy:
    t = field.type
    if t == F.TYPE_STRING:
        return named(name)
    if t == F.TYPE_BYTES:
        return st.binary(max_size=40)
    if t == F.TYPE_BOOL:
        return st.booleans()
    if t == F.TYPE_ENUM:
        return st.integers(-3, 6)
    if t in (F.TYPE_UINT32, F.TYPE_FIXED32):
        return small_uint
    if t in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
        return st.integers(-3, 3) | st.integers(-(2**31), 2**31 - 1)
    if t in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return st.integers(0, 3) | st.integers(0, 2**64 - 1)
    if t in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64):
        return st.integers(-(2**63), 2**63 - 1)
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if t == F.TYPE_DOUBLE else 32)
    raise AssertionError(f"unhandled field type {t}")


def messages(desc, depth: int = 0) -> st.SearchStrategy:
    if desc.full_name in SPECIAL:
        return SPECIAL[desc.full_name]()
    cls = message_factory.GetMessageClass(desc)
    fields = {}
    for f in desc.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            key_f, val_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            val = messages(val_f.message_type, depth + 1) if val_f.message_type else scalar(val_f, f.name)
            s = st.dictionaries(scalar(key_f, f.name), val, max_size=4)
        elif f.message_type is not None:
            s = messages(f.message_type, depth + 1) if depth < 3 else st.nothing()
            if f.is_repeated:
                s = st.lists(s, max_size=4)
        else:
            s = scalar(f, f.name)
            if f.is_repeated:
                s = st.lists(s, max_size=4)
        # names the seed knows are usually present; everything else is as often absent as not
        fields[f.name] = mostly(s, st.none(), 8) if f.name in POOLS else st.none() | s

    def build(kw):
        msg = cls()
        for name, value in kw.items():
            if value is None:
                continue
            field = desc.fields_by_name[name]
            target = getattr(msg, name) if field.message_type is not None or field.is_repeated \
                else None
            if target is None:
                setattr(msg, name, value)
            elif isinstance(value, dict):
                for k, v in value.items():
                    if field.message_type.fields_by_name["value"].message_type is not None:
                        target[k].CopyFrom(v)
                    else:
                        target[k] = v
            elif isinstance(value, list):
                target.extend(value)
            else:
                target.CopyFrom(value)
        return msg

    return st.fixed_dictionaries({k: v for k, v in fields.items() if k in POOLS},
                                 optional={k: v for k, v in fields.items() if k not in POOLS}).map(build)


REQUESTS = {m.name: messages(m.input_type) for m in ALL_METHODS}


def mutated(method) -> st.SearchStrategy[bytes]:
    """Valid serialized requests with bytes flipped, inserted, dropped or cut off."""

    def mutate(body: bytes, edits) -> bytes:
        data = bytearray(body)
        for kind, pos, byte in edits:
            if not data:
                data.append(byte)
                continue
            i = pos % len(data)
            if kind == 0:
                data[i] = byte
            elif kind == 1:
                data.insert(i, byte)
            elif kind == 2:
                del data[i]
            else:
                del data[i:]
        return bytes(data)

    edits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                     max_size=4)
    return st.builds(mutate, REQUESTS[method.name].map(lambda m: m.SerializeToString()), edits)


# ---------------------------------------------------------------- calling

def method_path(method) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def check_outcome(call, describe) -> None:
    """Run one call; OK, or a status from the documented table with a matching ErrorInfo."""
    try:
        call()
        return
    except grpc.RpcError as e:
        code, details, trailers = e.code(), e.details(), e.trailing_metadata() or ()
    assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.UNAVAILABLE), f"{describe()}: {code.name}: {details}"
    raw = dict(trailers).get("grpc-status-details-bin")
    assert raw is not None, f"{describe()}: {code.name} without ErrorInfo: {details}"
    status = status_pb2.Status.FromString(raw)
    assert status.code == code.value[0] and len(status.details) == 1, f"{describe()}: {status}"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info), f"{describe()}: detail is not ErrorInfo"
    assert info.domain == "agentstate.v1"
    assert REASON_CODES.get(info.reason) == code, f"{describe()}: reason {info.reason} with {code.name}"


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def fuzz_target(module_sidecar):
    channel = grpc.insecure_channel(module_sidecar.address)
    yield module_sidecar, channel
    channel.close()


@pytest.fixture
def seeded(fuzz_target):
    """Threads, checkpoints (list, map, scalar and opaque channels) and writes the fuzz can hit; re-made
    before each method's run since earlier runs may have deleted them."""
    proc, _ = fuzz_target
    with proc.client(namespace=NAMESPACE) as c:
        for t in THREADS:
            for cns in CHECKPOINT_NSES:
                parent = ""
                for i, cid in enumerate(CHECKPOINTS):
                    c.put_checkpoint(t, {"l": list(range(i * 5)), "m": {f"k{j}": j for j in range(i * 20)},
                                         "s": "scalar", "o": codec.Opaque("t", b"x")} if not parent else
                                     {"l": Append([i]), "m": SetKeys({"new": i}), "s": Keep(), "o": Keep()},
                                     checkpoint_id=cid, parent_id=parent, checkpoint_ns=cns,
                                     metadata={"run_id": f"run-{i}", "step": i, "k": [i]})
                    parent = cid
                c.put_writes(t, parent, [("task", 0, "l", [1]), ("task", 1, "m", {"a": 1})], checkpoint_ns=cns)
    return fuzz_target


FUZZ = settings(deadline=None, derandomize=False, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("method", METHODS, ids=METHOD_IDS)
@settings(FUZZ, max_examples=int(800 * SCALE))
@given(data=st.data())
def test_structured_requests(seeded, method, data):
    _, channel = seeded
    cls = message_factory.GetMessageClass(method.input_type)
    resp = message_factory.GetMessageClass(method.output_type)
    call = channel.unary_unary(method_path(method), request_serializer=cls.SerializeToString,
                               response_deserializer=resp.FromString)
    request = data.draw(REQUESTS[method.name], label="request")
    check_outcome(lambda: call(request, timeout=CALL_DEADLINE), lambda: f"{method.name}({request!r:.2000})")


@pytest.mark.parametrize("method", METHODS, ids=METHOD_IDS)
@settings(FUZZ, max_examples=int(400 * SCALE))
@given(data=st.data())
def test_raw_request_bodies(seeded, method, data):
    _, channel = seeded
    call = channel.unary_unary(method_path(method), request_serializer=None, response_deserializer=None)
    body = data.draw(st.binary(max_size=300) | mutated(method), label="body")
    check_outcome(lambda: call(body, timeout=CALL_DEADLINE), lambda: f"{method.name}(raw {body!r:.2000})")


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    n, size = len(payload), b""
    while True:
        size += bytes(((n & 0x7F) | (0x80 if n > 0x7F else 0),))
        n >>= 7
        if not n:
            return _varint_key(number) + size + payload


def _varint_key(number: int) -> bytes:
    return bytes(((number << 3) | 2,))


def _nested_value(depth: int) -> bytes:
    """Value{list{items: Value{list{...}}}} ``depth`` lists deep, innermost msgpack 1."""
    value = _field(1, b"\x01")
    for _ in range(depth):
        value = _field(3, _field(1, value))  # Value.list = ListValue{items = [value]}
    return value


@pytest.mark.parametrize("depth", [10, 40, 63, 64, 65, 200, 5000])
def test_deeply_nested_bodies(fuzz_target, depth):
    """Values nested past the value limit or the protobuf parser's limit get a proper status."""
    _, channel = fuzz_target
    value = _nested_value(depth)
    thread = _field(2, f"deep-{depth}".encode())
    bodies = {
        "/agentstate.v1.ThreadService/PutCheckpoint": thread + _field(8, _field(1, b"ch") + _field(2, _field(1, value))),
        "/agentstate.v1.ThreadService/CreateThread": thread + _field(3, _field(1, b"k") + _field(2, value)),
        "/agentstate.v1.ThreadService/ListThreads": _field(2, _field(1, b"k") + _field(2, value)),
    }
    for path, body in bodies.items():
        call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        check_outcome(lambda: call(body, timeout=CALL_DEADLINE), lambda: f"{path} nested {depth}")


@settings(FUZZ, max_examples=int(150 * SCALE))
@given(data=st.data())
def test_stream_writes(seeded, data):
    """StreamWrites with fuzzed messages: every request gets one ack, in order, with a result or an error from
    the documented table; the stream ends OK (or INVALID_ARGUMENT for a body that does not parse)."""
    _, channel = seeded
    messages_ = data.draw(st.lists(REQUESTS["StreamWrites"], max_size=3), label="messages")
    garbage = data.draw(st.booleans(), label="garbage at the end")
    bodies = [m.SerializeToString() for m in messages_] + ([b"\xff\xff\xff"] if garbage else [])
    stream = channel.stream_stream("/agentstate.v1.ThreadService/StreamWrites")
    expected = [w.seq for m in messages_ for w in m.writes]
    acks = []

    def call():
        for body in stream(iter(bodies), timeout=CALL_DEADLINE):
            acks.extend(threads_pb2.StreamWritesResponse.FromString(body).acks)

    try:
        call()
        assert not garbage, "a body that does not parse must end the stream with INVALID_ARGUMENT"
    except grpc.RpcError as e:
        assert garbage and e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{e.code()}: {e.details()}"
    assert [a.seq for a in acks] == expected
    for ack in acks:
        if ack.WhichOneof("result") == "error":
            code = next(c for c in grpc.StatusCode if c.value[0] == ack.error.code)
            assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), ack
            assert REASON_CODES.get(ack.error.reason) == code, ack


def test_server_survived_the_fuzz(fuzz_target):
    """Runs last in this module: the process is alive, healthy, and its store has no missing blobs."""
    proc, channel = fuzz_target
    assert proc.proc.poll() is None, proc.log()
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "agentstate.v1.ThreadService", "agentstate.v1.AdminService"):
        resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=CALL_DEADLINE)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    with proc.client() as c:
        report = c.check_integrity()
        assert report.missing_blobs == 0 and not report.problems
        assert report.checked_checkpoints > 0
        assert c.collect_garbage().reachable_blobs > 0
        assert c.check_integrity().missing_blobs == 0
    log = proc.log()
    assert "Traceback" not in log and "internal error" not in log, log[-5000:]


def test_fuzz_covers_every_rpc():
    """The fuzz is generated from the service descriptors: a new RPC is fuzzed without edits here."""
    assert {m.name for m in METHODS} >= {
        "CreateThread", "GetThread", "ListThreads", "UpdateThread", "DeleteThread", "CopyThread", "PutCheckpoint",
        "PutWrites", "GetCheckpoint", "ListCheckpoints", "PruneCheckpoints", "DeleteCheckpointsForRuns",
        "DiffCheckpoints", "GetStoreStats", "CollectGarbage", "CheckIntegrity"}
    # every streaming RPC of these services has a fuzz test of its own
    assert {m.name for m in ALL_METHODS if m not in METHODS} == {"StreamWrites"}
