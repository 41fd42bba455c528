"""ThreadService checkpoint calls: put (whole values, deltas, keeps), get, writes, list, prune, runs, diff."""
from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import uuid
import zoneinfo

import grpc
import msgspec
import pytest
from conftest import expect_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import Append, Client, Keep, Opaque, SetKeys, checkpoint_values, decode_map, from_value
from agentstate.v1 import threads_pb2 as pb

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")

#: One of every kind of value, and what it reads back as.
VALUES = {
    "none": None, "true": True, "false": False, "zero": 0, "minus": -1,
    "i64_min": -2**63, "u64_max": 2**64 - 1, "big": 2**64, "big_neg": -2**63 - 1, "huge": -(3**300),
    "float": 1.5, "neg_zero": -0.0, "inf": float("-inf"), "nan": float("nan"), "subnormal": 5e-324,
    "empty_str": "", "text": "snow \u2603, a NUL \x00 and a clef \U0001d11e",
    "empty_bytes": b"", "bytes": bytes(range(256)),
    "list": [1, "two", None, [3.0, [b"4"]]], "empty_list": [], "tuple": (1, 2),
    "map": {"b": 1, "a": {"c": [True]}, "": "empty key", "k\x00": 0}, "empty_map": {},
    "naive": dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
    "utc": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    "offset": dt.datetime(2024, 1, 1, 5, 30, tzinfo=dt.timezone(dt.timedelta(hours=-9, minutes=-30))),
    "zone": dt.datetime(2024, 7, 1, 9, 15, tzinfo=BERLIN),
    "first_day": dt.datetime(1, 1, 1), "last_day": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "decimal": decimal.Decimal("-3.14159265358979323846264338327950288419716939937510"),
    "decimal_exp": decimal.Decimal("1E+10"),
    "set": {1, "a", b"b", None}, "frozenset": frozenset({2.5, -1}), "empty_set": set(),
    "opaque": Opaque("pickle", b"\x80\x05\x95."),
    "opaque_empty": Opaque("t" * 255, b""),
    "opaque_list": [Opaque("msgpack", b"\x01"), Opaque("json", b"[]")],
    "long_list": list(range(137)),
    "wide_map": {f"key-{i}": [i] * (i % 3) for i in range(150)},
    "deep": None,  # filled below
    "large_text": "".join(f"line {i}: {'lorem ipsum ' * (i % 7)}\n" for i in range(4000)),
    "large_bytes": os.urandom(150_000),
    "mixed_big_list": [os.urandom(40_000), "small", {"x": "y" * 50_000}],
}
_deep: object = "bottom"
for _ in range(60):
    _deep = [_deep] if len(str(_)) % 2 else {"d": _deep}
VALUES["deep"] = _deep


def expected_back(v):
    """What a value reads back as: tuples as lists, frozensets as sets."""
    if type(v) is tuple:
        return [expected_back(x) for x in v]
    if type(v) is list:
        return [expected_back(x) for x in v]
    if type(v) is dict:
        return {k: expected_back(x) for k, x in v.items()}
    if type(v) is frozenset:
        return set(v)
    return v


def assert_same(got, want, path="$"):
    """Equality that also checks types, float bit patterns and datetime offsets and zones."""
    assert type(got) is type(want), f"{path}: {type(got)} != {type(want)}"
    if type(want) is float:
        assert (math.isnan(got) and math.isnan(want)) or (got == want and math.copysign(1, got) == math.copysign(
            1, want)), f"{path}: {got!r} != {want!r}"
    elif type(want) is list:
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    elif type(want) is dict:
        assert sorted(got) == sorted(want), f"{path}: keys differ"
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]")
    elif type(want) is dt.datetime:
        assert got == want and got.utcoffset() == want.utcoffset(), f"{path}: {got!r} != {want!r}"
        assert getattr(got.tzinfo, "key", None) == getattr(want.tzinfo, "key", None), path
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def root(c: Client, thread_id: str, channel: str, checkpoint_id: str = "", cns: str = "") -> bytes:
    return c.get_checkpoint(thread_id, checkpoint_id, checkpoint_ns=cns, omit_values=True).channels[channel].root


def put_raw(c: Client, req: pb.PutCheckpointRequest) -> pb.PutCheckpointResponse:
    req.namespace = c.namespace
    return c._call(c.threads.PutCheckpoint, req, None)


# ---------------------------------------------------------------- whole values

def test_every_kind_of_value_round_trips_exactly(client, tid):
    small = {k: v for k, v in VALUES.items() if not k.startswith(("large", "mixed"))}
    r = client.put_checkpoint(tid, VALUES, metadata=small,
                              extra={"versions": VALUES["map"], "when": VALUES["zone"]}, schema_version=7)
    assert r.created
    cp = client.get_checkpoint(tid)
    assert cp.checkpoint_id == r.checkpoint.checkpoint_id and cp.etag == r.checkpoint.etag
    assert cp.schema_version == 7
    got = checkpoint_values(cp)
    assert sorted(got) == sorted(VALUES)
    for name, value in VALUES.items():
        assert_same(got[name], expected_back(value), name)
        assert cp.channels[name].root == r.checkpoint.channels[name].root
    meta = decode_map(cp.metadata)
    assert sorted(meta) == sorted(small)
    for name, value in small.items():
        assert_same(meta[name], expected_back(value), f"metadata {name}")
    assert_same(from_value(cp.extra), {"versions": expected_back(VALUES["map"]), "when": VALUES["zone"]})
    # lists of opaque values come back item by item, as opaque values
    assert [v.opaque.type for v in cp.channels["opaque_list"].value.list.items] == ["msgpack", "json"]

    client.put_writes(tid, cp.checkpoint_id, [("task", i, name, value) for i, (name, value) in
                                              enumerate(VALUES.items())])
    writes = client.get_checkpoint(tid, include_pending_writes=True).pending_writes
    assert [w.channel for w in writes] == list(VALUES)
    for w in writes:
        assert_same(from_value(w.value), expected_back(VALUES[w.channel]), f"write {w.channel}")


def test_value_forms_give_the_same_root(client, tid):
    """A list or map sent as msgpack (in any valid encoding) or item by item is the same value."""
    as_msgpack = pb.PutCheckpointRequest(thread_id=tid, checkpoint_id="1")
    as_msgpack.channels["l"].value.msgpack = msgspec.msgpack.encode([1, "a", {"z": 1, "y": 2}])
    # the map with its keys unsorted and ints in wider forms than needed
    as_msgpack.channels["m"].value.msgpack = b"\x82\xa1z\xcd\x00\x01\xa1y\xd2\x00\x00\x00\x02"
    as_msgpack.channels["f"].value.msgpack = b"\xca\x3f\xc0\x00\x00"  # float32 1.5
    put_raw(client, as_msgpack)

    as_items = pb.PutCheckpointRequest(thread_id=tid, checkpoint_id="2")
    items = as_items.channels["l"].value.list.items
    items.add().msgpack = b"\x01"
    items.add().msgpack = b"\xa1a"
    items.add().map.entries["z"].msgpack = b"\x01"
    items[2].map.entries["y"].msgpack = b"\x02"
    entries = as_items.channels["m"].value.map.entries
    entries["y"].msgpack = b"\x02"
    entries["z"].msgpack = b"\x01"
    as_items.channels["f"].value.msgpack = msgspec.msgpack.encode(1.5)
    put_raw(client, as_items)

    a = client.get_checkpoint(tid, "1", omit_values=True)
    b = client.get_checkpoint(tid, "2", omit_values=True)
    for ch in ("l", "m", "f"):
        assert a.channels[ch].root == b.channels[ch].root, ch
    assert client.get_values(tid, "1") == {"l": [1, "a", {"y": 2, "z": 1}], "m": {"y": 2, "z": 1}, "f": 1.5}


def test_server_assigns_time_ordered_ids_and_latest_is_greatest(client, tid):
    made = [client.put_checkpoint(tid, {"n": i}).checkpoint.checkpoint_id for i in range(5)]
    assert made == sorted(made) and len(set(made)) == 5
    for cid in made:
        assert uuid.UUID(cid).version == 7
    assert client.get_checkpoint(tid).checkpoint_id == made[-1]
    # latest means the greatest id, not the last put
    client.put_checkpoint(tid, {"n": "old"}, checkpoint_id="00000000-early")
    assert client.get_values(tid) == {"n": 4}
    assert client.get_values(tid, made[1]) == {"n": 1}
    assert client.get_values(tid, "00000000-early") == {"n": "old"}


def test_put_creates_the_thread_unless_required(client, tid):
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "thread_id"):
        client.put_checkpoint(tid, {"a": 1}, require_thread=True)
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
        client.get_thread(tid)
    client.put_checkpoint(tid, {"a": 1})
    assert client.get_thread(tid).thread_id == tid
    client.put_checkpoint(tid, {"a": 2}, require_thread=True)


def test_checkpoint_fields(client, tid):
    first = client.put_checkpoint(tid, {"a": 1}, checkpoint_id="c1", metadata={"source": "input", "step": -1})
    second = client.put_checkpoint(tid, {"a": 2}, checkpoint_id="c2", parent_id="c1", schema_version=3)
    assert not first.checkpoint.HasField("extra") and not first.checkpoint.metadata
    cp = client.get_checkpoint(tid, "c2")
    assert cp.parent_checkpoint_id == "c1" and cp.schema_version == 3 and cp.thread_id == tid
    assert cp.namespace == "default" and cp.checkpoint_ns == ""
    assert cp.create_time == second.checkpoint.create_time
    assert not cp.HasField("extra")
    assert decode_map(client.get_checkpoint(tid, "c1").metadata) == {"source": "input", "step": -1}
    assert len(first.checkpoint.etag) == 64 and int(first.checkpoint.etag, 16) >= 0
    assert first.checkpoint.etag != second.checkpoint.etag


# ---------------------------------------------------------------- deltas and keep

def test_deltas_give_the_same_root_as_whole_values(client, tid):
    messages = [f"message {i}" for i in range(11)]
    state = {f"k{i}": i for i in range(40)}
    c1 = client.put_checkpoint(tid, {"messages": messages, "state": state, "scalar": "s", "gone": 1})
    cid = c1.checkpoint.checkpoint_id

    steps = [
        ({"messages": Append(["new 1", {"rich": [1]}])}, lambda m, s: (m + ["new 1", {"rich": [1]}], s)),
        ({"messages": Append(["edited"], keep_first=3)}, lambda m, s: (m[:3] + ["edited"], s)),
        ({"messages": Append([], keep_first=0)}, lambda m, s: ([], s)),
        ({"messages": Append([f"x{i}" for i in range(20)])}, lambda m, s: (m + [f"x{i}" for i in range(20)], s)),
        ({"state": SetKeys({"k1": "one", "new": [1, 2]}, delete=["k2", "absent"])},
         lambda m, s: (m, {**{k: v for k, v in s.items() if k != "k2"}, "k1": "one", "new": [1, 2]})),
        ({"state": SetKeys(delete=[f"k{i}" for i in range(3, 40)])},
         lambda m, s: (m, {k: v for k, v in s.items() if k not in {f"k{i}" for i in range(3, 40)}})),
        ({"state": SetKeys({f"n{i}": i for i in range(50)})}, lambda m, s: (m, {**s, **{f"n{i}": i for i in range(50)}})),
    ]
    m, s = messages, state
    for n, (change, apply) in enumerate(steps):
        m, s = apply(m, s)
        channels = {"messages": Keep(), "state": Keep(), "scalar": Keep(), **change}
        r = client.put_checkpoint(tid, channels, parent_id=cid)
        cid = r.checkpoint.checkpoint_id
        whole = client.put_checkpoint(f"{tid}-whole", {"messages": m, "state": s, "scalar": "s"},
                                      checkpoint_id=f"w{n}")
        assert dict(r.checkpoint.channels) == dict(whole.checkpoint.channels), f"step {n}"
        assert client.get_values(tid, cid) == {"messages": m, "state": s, "scalar": "s"}
    assert root(client, tid, "scalar", cid) == c1.checkpoint.channels["scalar"].root


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.lists(st.integers(0, 5), max_size=30),
       edits=st.lists(st.tuples(st.integers(0, 40), st.lists(st.integers(0, 5), max_size=20)), min_size=1,
                      max_size=4))
def test_list_deltas_match_whole_values(client, start, edits):
    t = f"t-{uuid.uuid4()}"
    cid = client.put_checkpoint(t, {"l": start}).checkpoint.checkpoint_id
    current = list(start)
    for keep, items in edits:
        keep_first = None if keep > len(current) else keep
        current = (current if keep_first is None else current[:keep_first]) + items
        cid = client.put_checkpoint(t, {"l": Append(items, keep_first=keep_first)}, parent_id=cid).checkpoint.checkpoint_id
    whole = client.put_checkpoint(t, {"l": current}, checkpoint_ns="whole")
    assert root(client, t, "l", cid) == whole.checkpoint.channels["l"].root
    assert client.get_values(t, cid) == {"l": current}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=60),
       edits=st.lists(st.tuples(st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=40),
                                st.lists(st.text(max_size=3), max_size=40)), min_size=1, max_size=3))
def test_map_deltas_match_whole_values(client, start, edits):
    t = f"t-{uuid.uuid4()}"
    cid = client.put_checkpoint(t, {"m": start}).checkpoint.checkpoint_id
    current = dict(start)
    for sets, deletes in edits:
        for k in deletes:
            current.pop(k, None)
        current.update(sets)
        cid = client.put_checkpoint(t, {"m": SetKeys(sets, delete=deletes)}, parent_id=cid).checkpoint.checkpoint_id
    whole = client.put_checkpoint(t, {"m": current}, checkpoint_ns="whole")
    assert root(client, t, "m", cid) == whole.checkpoint.channels["m"].root
    assert client.get_values(t, cid) == {"m": current}


def test_keep_and_base_checkpoint(client, tid):
    a = client.put_checkpoint(tid, {"x": [1], "y": {"k": 1}}, checkpoint_id="a")
    client.put_checkpoint(tid, {"x": [2]}, checkpoint_id="b", parent_id="a")
    # base_id differs from the parent: deltas and keeps refer to the base
    c = client.put_checkpoint(tid, {"x": Append([3]), "y": Keep()}, checkpoint_id="c", parent_id="b", base_id="a")
    assert client.get_values(tid, "c") == {"x": [1, 3], "y": {"k": 1}}
    assert c.checkpoint.parent_checkpoint_id == "b"
    assert c.checkpoint.channels["y"].root == a.checkpoint.channels["y"].root
    # channels not mentioned are not carried over
    assert client.get_values(tid, "b") == {"x": [2]}


def test_base_root_is_checked(client, tid):
    a = client.put_checkpoint(tid, {"l": [1, 2], "m": {"a": 1}}, checkpoint_id="a")
    good = a.checkpoint.channels["l"].root
    client.put_checkpoint(tid, {"l": Append([3], base_root=good), "m": SetKeys({"b": 2},
                          base_root=a.checkpoint.channels["m"].root)}, checkpoint_id="b", parent_id="a")
    assert client.get_values(tid, "b") == {"l": [1, 2, 3], "m": {"a": 1, "b": 2}}
    stale = root(client, tid, "l", "b")
    with expect_error(PRECONDITION, "BASE_MISMATCH", "channels['l'].delta.base_root"):
        client.put_checkpoint(tid, {"l": Append([4], base_root=stale)}, checkpoint_id="c", parent_id="a")
    with expect_error(PRECONDITION, "BASE_MISMATCH", "channels['m'].delta.base_root"):
        client.put_checkpoint(tid, {"m": SetKeys({"c": 1}, base_root=b"\x00" * 32)}, checkpoint_id="c", parent_id="a")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND"):
        client.get_checkpoint(tid, "c")


@pytest.mark.parametrize("change, field", [
    ({"l": Append([1])}, "parent_checkpoint_id"),
    ({"l": Keep()}, "parent_checkpoint_id"),
])
def test_delta_without_base(client, tid, change, field):
    with expect_error(PRECONDITION, "BASE_MISMATCH", field):
        client.put_checkpoint(tid, change)
    with expect_error(PRECONDITION, "BASE_MISMATCH", field):
        client.put_checkpoint(tid, change, parent_id="missing")
    with expect_error(PRECONDITION, "BASE_MISMATCH", "base_checkpoint_id"):
        client.put_checkpoint(tid, change, parent_id="missing", base_id="also-missing")
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
        client.get_thread(tid)


@pytest.mark.parametrize("channel, change, suffix", [
    ("map", Append([1]), ".delta"),
    ("map", Append([], keep_first=0), ".delta"),
    ("list", SetKeys({"a": 1}), ".delta"),
    ("list", SetKeys(delete=["a"]), ".delta"),
    ("scalar", Append([1]), ".delta"),
    ("scalar", SetKeys({"a": 1}), ".delta"),
    ("opaque", Append([1]), ".delta"),
    ("absent", Append([1]), ".delta"),
    ("absent", Keep(), ".keep"),
])
def test_delta_on_the_wrong_kind_of_value(client, tid, channel, change, suffix):
    client.put_checkpoint(tid, {"map": {"a": 1}, "list": [1], "scalar": 5, "opaque": Opaque("t", b"[1]")},
                          checkpoint_id="base")
    with expect_error(PRECONDITION, "BASE_MISMATCH", f"channels[{channel!r}]{suffix}"):
        client.put_checkpoint(tid, {channel: change, "other": "fine"}, checkpoint_id="next", parent_id="base")
    assert [cp.checkpoint_id for cp in client.list_checkpoints(tid)] == ["base"]


def test_keep_first_beyond_the_list(client, tid):
    client.put_checkpoint(tid, {"l": [1, 2]}, checkpoint_id="a")
    with expect_error(INVALID, "INVALID_FIELD", "channels['l'].delta.keep_first"):
        client.put_checkpoint(tid, {"l": Append([3], keep_first=3)}, checkpoint_id="b", parent_id="a")
    client.put_checkpoint(tid, {"l": Append([3], keep_first=2)}, checkpoint_id="b", parent_id="a")
    assert client.get_values(tid, "b") == {"l": [1, 2, 3]}


def test_map_delta_keys_are_any_strings(client, tid):
    odd = {"nul\x00key": 1, "": 2, "k" * 1000: 3}
    client.put_checkpoint(tid, {"m": {**odd, "keep": 0}}, checkpoint_id="a")
    client.put_checkpoint(tid, {"m": SetKeys(delete=list(odd))}, checkpoint_id="b", parent_id="a")
    assert client.get_values(tid, "b") == {"m": {"keep": 0}}


# ---------------------------------------------------------------- heads and idempotency

def test_expected_head_etag(client, tid):
    with expect_error(PRECONDITION, "ETAG_MISMATCH", "expected_head_etag", current_etag=""):
        client.put_checkpoint(tid, {"a": 0}, expected_head_etag="0" * 64)
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
        client.get_thread(tid)
    first = client.put_checkpoint(tid, {"a": 1}, expected_head_etag="")
    with expect_error(PRECONDITION, "ETAG_MISMATCH", "expected_head_etag", current_etag=first.checkpoint.etag):
        client.put_checkpoint(tid, {"a": 2}, expected_head_etag="")
    second = client.put_checkpoint(tid, {"a": 2}, expected_head_etag=first.checkpoint.etag)
    with expect_error(PRECONDITION, "ETAG_MISMATCH", "expected_head_etag", current_etag=second.checkpoint.etag,
                      checkpoint_id=second.checkpoint.checkpoint_id):
        client.put_checkpoint(tid, {"a": 3}, expected_head_etag=first.checkpoint.etag)
    # heads are per checkpoint namespace
    client.put_checkpoint(tid, {"a": 1}, checkpoint_ns="sub", expected_head_etag="")
    assert client.get_values(tid) == {"a": 2}
    assert len(list(client.list_checkpoints(tid))) == 3


def test_identical_reput_is_idempotent(client, tid):
    args = dict(checkpoint_id="c1", metadata={"m": 1}, extra={"v": 1}, schema_version=2)
    first = client.put_checkpoint(tid, {"a": [1, 2], "b": "x"}, **args)
    client.put_writes(tid, "c1", [("task", 0, "a", 1)])
    later = client.put_checkpoint(tid, {"a": 9}, checkpoint_id="c2", parent_id="c1")
    again = client.put_checkpoint(tid, {"a": [1, 2], "b": "x"}, **args)
    assert first.created and not again.created
    assert again.checkpoint == first.checkpoint
    # an identical re-put succeeds even with a head etag that is stale by now
    again = client.put_checkpoint(tid, {"a": [1, 2], "b": "x"}, expected_head_etag=first.checkpoint.etag, **args)
    assert not again.created
    assert client.get_checkpoint(tid).etag == later.checkpoint.etag
    assert len(client.get_checkpoint(tid, "c1", include_pending_writes=True).pending_writes) == 1


def test_a_map_channel_reads_back_in_canonical_key_order(client, tid):
    """A protobuf map has no order on the wire; the client gives a map value the canonical encoding's
    order (keys by UTF-8 bytes), so it reads back the same every time, whatever order it was put in."""
    keys = ["zeta", "b", "\u00e9t\u00e9", "a", "\U0001F600", "\ufffd", "aa"]
    client.put_checkpoint(tid, {"m": {k: Opaque("x", k.encode()) for k in keys}})
    for _ in range(5):
        got = from_value(client.get_checkpoint(tid).channels["m"].value)
        assert list(got) == sorted(keys, key=lambda k: k.encode()) == \
            ["a", "aa", "b", "zeta", "\u00e9t\u00e9", "\ufffd", "\U0001F600"]


def test_a_checkpoint_cannot_be_its_own_parent(client, tid):
    with expect_error(INVALID, "INVALID_FIELD", "parent_checkpoint_id"):
        client.put_checkpoint(tid, {"a": 1}, checkpoint_id="c", parent_id="c")
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
        client.get_checkpoint(tid)  # nothing was written


def test_put_request_id(client, tid):
    first = client.put_checkpoint(tid, {"a": 1}, request_id="p1")
    retry = client.put_checkpoint(tid, {"a": 1}, request_id="p1")
    assert retry == first
    assert len(list(client.list_checkpoints(tid))) == 1
    with expect_error(INVALID, "REQUEST_ID_REUSED", "request_id"):
        client.put_checkpoint(tid, {"a": 2}, request_id="p1")


# ---------------------------------------------------------------- reads

def test_get_selected_channels_and_omit_values(client, tid):
    r = client.put_checkpoint(tid, {"a": 1, "b": [2], "c": {"x": 3}}, extra={"e": 1})
    cp = client.get_checkpoint(tid, channels=["a", "c", "missing"])
    assert sorted(cp.channels) == ["a", "c"]
    assert checkpoint_values(cp) == {"a": 1, "c": {"x": 3}}
    bare = client.get_checkpoint(tid, omit_values=True)
    assert sorted(bare.channels) == ["a", "b", "c"]
    for name, cv in bare.channels.items():
        assert cv.WhichOneof("content") is None
        assert cv.root == r.checkpoint.channels[name].root
    assert from_value(bare.extra) == {"e": 1}  # extra (versions and the like) comes back without values too
    assert from_value(client.get_checkpoint(tid).extra) == {"e": 1}


def test_get_missing(client, tid):
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "thread_id"):
        client.get_checkpoint(tid)
    client.create_thread(tid)
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND", "checkpoint_id"):
        client.get_checkpoint(tid)
    client.put_checkpoint(tid, {"a": 1}, checkpoint_id="x", checkpoint_ns="sub")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND", "checkpoint_id", checkpoint_id="y"):
        client.get_checkpoint(tid, "y", checkpoint_ns="sub")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND"):
        client.get_checkpoint(tid, "x")  # other checkpoint namespace
    assert client.get_values(tid, "x", checkpoint_ns="sub") == {"a": 1}


def test_known_roots(client, tid):
    a = client.put_checkpoint(tid, {"l": [1, 2, 3], "m": {"k": 1}, "s": "x", "e": [1, 2]}, checkpoint_id="a")
    client.put_checkpoint(tid, {"l": Append([4, {"five": 5}]), "m": Keep(), "s": "y", "e": Append([9], keep_first=1)},
                          checkpoint_id="b", parent_id="a")
    roots = {k: v.root for k, v in a.checkpoint.channels.items()}
    cp = client.get_checkpoint(tid, "b", known_roots=roots)
    l = cp.channels["l"]
    assert l.WhichOneof("content") == "delta"
    assert l.delta.base_root == roots["l"] and l.delta.keep_first == 3
    assert [from_value(v) for v in l.delta.append] == [4, {"five": 5}]
    assert cp.channels["m"].WhichOneof("content") is None  # unchanged
    assert from_value(cp.channels["s"].value) == "y"
    assert from_value(cp.channels["e"].value) == [1, 9]  # not an extension: the whole value
    # roots that are not this channel's, unknown, or not hashes at all: the whole value
    for other in (roots["m"], b"\x01" * 32, b"", b"short", b"x" * 600):
        cp = client.get_checkpoint(tid, "b", known_roots={"l": other})
        assert from_value(cp.channels["l"].value) == [1, 2, 3, 4, {"five": 5}]
    # the same root: nothing to send
    cp = client.get_checkpoint(tid, "a", known_roots={"l": roots["l"]})
    assert cp.channels["l"].WhichOneof("content") is None and cp.channels["l"].root == roots["l"]


# ---------------------------------------------------------------- pending writes

def test_pending_writes(client, tid):
    client.put_checkpoint(tid, {"a": 1}, checkpoint_id="c1")
    client.put_checkpoint(tid, {"a": 1}, checkpoint_id="c1", checkpoint_ns="sub")
    writes = [("b", 1, "ch", "b1"), ("ab", 0, "ch", "ab0"), ("a", 2, "ch", "a2", "path|x"), ("a", -1, "err", "a-1"),
              ("a", 0, "ch", {"v": [0]}), ("b", -(2**31), "ch", "min"), ("b", 2**31 - 1, "ch", "max")]
    r = client.put_writes(tid, "c1", writes)
    assert (r.stored, r.kept) == (7, 0)
    got = client.get_checkpoint(tid, "c1", include_pending_writes=True).pending_writes
    assert [(w.task_id, w.idx) for w in got] == [("a", -1), ("a", 0), ("a", 2), ("ab", 0), ("b", -(2**31)),
                                                ("b", 1), ("b", 2**31 - 1)]
    assert {(w.task_id, w.idx): (w.channel, from_value(w.value), w.task_path) for w in got}[("a", 2)] == (
        "ch", "a2", "path|x")
    assert not client.get_checkpoint(tid, "c1").pending_writes  # only when asked for
    assert not client.get_checkpoint(tid, "c1", checkpoint_ns="sub", include_pending_writes=True).pending_writes

    # idempotent: stored writes are kept unless replace is asked for
    r = client.put_writes(tid, "c1", [("a", 0, "ch", "changed"), ("a", 1, "ch", "new"), ("b", 1, "x", "replaced",
                                                                                        "", True)])
    assert (r.stored, r.kept) == (2, 1)
    got = {(w.task_id, w.idx): (w.channel, from_value(w.value))
           for w in client.get_checkpoint(tid, "c1", include_pending_writes=True).pending_writes}
    assert got[("a", 0)] == ("ch", {"v": [0]})
    assert got[("a", 1)] == ("ch", "new")
    assert got[("b", 1)] == ("x", "replaced")
    assert len(got) == 8
    r = client.put_writes(tid, "c1", writes)
    assert (r.stored, r.kept) == (0, 7)


def test_pending_writes_request_id(client, tid):
    client.put_checkpoint(tid, {"a": 1}, checkpoint_id="c1")
    first = client.put_writes(tid, "c1", [("t", 0, "c", 1)], request_id="w1")
    assert client.put_writes(tid, "c1", [("t", 0, "c", 1)], request_id="w1") == first  # not stored=0, kept=1
    with expect_error(INVALID, "REQUEST_ID_REUSED"):
        client.put_writes(tid, "c1", [("t", 1, "c", 1)], request_id="w1")


# ---------------------------------------------------------------- list

def _tree(c: Client, thread_id: str) -> list[tuple[str, str]]:
    """Three checkpoint namespaces with interleaved and shared ids; returns (id, cns) newest first."""
    made = []
    for i in range(12):
        for cns in ("", "a", "b|c"):
            if (cns == "a" and i % 2) or (cns == "b|c" and i % 3 == 1):
                continue
            c.put_checkpoint(thread_id, {"i": i}, checkpoint_id=f"{i:04d}", checkpoint_ns=cns,
                             metadata={"parity": i % 2, "cns": cns, "run_id": f"run-{i % 4}"})
            made.append((f"{i:04d}", cns))
    return sorted(made, reverse=True)


def listed(c: Client, *args, **kw) -> list[tuple[str, str]]:
    return [(cp.checkpoint_id, cp.checkpoint_ns) for cp in c.list_checkpoints(*args, **kw)]


def test_list_newest_first_across_checkpoint_namespaces(client, tid):
    expected = _tree(client, tid)
    assert listed(client, tid) == expected
    assert listed(client, tid, checkpoint_ns="a") == [x for x in expected if x[1] == "a"]
    assert listed(client, tid, checkpoint_ns="") == [x for x in expected if x[1] == ""]
    assert listed(client, tid, checkpoint_ns="nope") == []


@pytest.mark.parametrize("page_size", [1, 2, 3, 5, 7, 1000])
def test_list_paging_gives_every_checkpoint_once_in_order(client, tid, page_size):
    expected = _tree(client, tid)
    token, seen, pages = "", [], 0
    while True:
        resp = client.threads.ListCheckpoints(pb.ListCheckpointsRequest(thread_id=tid, page_size=page_size,
                                                                        page_token=token))
        assert 0 < len(resp.checkpoints) <= page_size
        seen += [(cp.checkpoint_id, cp.checkpoint_ns) for cp in resp.checkpoints]
        pages += 1
        token = resp.next_page_token
        if not token:
            break
    assert seen == expected
    assert pages == -(-len(expected) // page_size)


def test_list_filters(client, tid):
    expected = _tree(client, tid)
    meta = {(f"{i:04d}", cns): (i % 2, f"run-{i % 4}") for i in range(12) for cns in ("", "a", "b|c")}
    assert listed(client, tid, metadata_filter={"parity": 1}) == [x for x in expected if meta[x][0] == 1]
    assert listed(client, tid, metadata_filter={"parity": 0, "cns": "b|c"}, page_size=2) == [
        x for x in expected if meta[x][0] == 0 and x[1] == "b|c"]
    assert listed(client, tid, metadata_filter={"parity": True}) == []
    assert listed(client, tid, before="0007") == [x for x in expected if x[0] < "0007"]
    assert listed(client, tid, before="0007", page_size=3) == [x for x in expected if x[0] < "0007"]
    assert listed(client, tid, limit=5) == expected[:5]
    assert listed(client, tid, limit=5, page_size=2) == expected[:5]
    assert listed(client, tid, limit=100, page_size=4) == expected
    assert listed(client, tid, before="0010", metadata_filter={"parity": 0}, limit=4, page_size=3) == [
        x for x in expected if x[0] < "0010" and meta[x][0] == 0][:4]
    assert listed(client, tid, checkpoint_ns="b|c", before="0005", limit=2, page_size=1) == [
        x for x in expected if x[1] == "b|c" and x[0] < "0005"][:2]


def test_list_page_token_bound_to_filters(client, tid):
    _tree(client, tid)
    resp = client.threads.ListCheckpoints(pb.ListCheckpointsRequest(thread_id=tid, page_size=2))
    for change in (dict(before_checkpoint_id="0005"), dict(limit=3), dict(thread_id=tid + "x"),
                   dict(checkpoint_ns="")):
        req = pb.ListCheckpointsRequest(thread_id=tid, page_size=2, page_token=resp.next_page_token)
        for k, v in change.items():
            setattr(req, k, v)
        with expect_error(INVALID, "INVALID_FIELD", "page_token"):
            client._call(client.threads.ListCheckpoints, req, None)


def test_list_whole_namespace(nsclient):
    made = {}
    for t in ("t1", "t2", "t10", "u"):
        made[t] = []
        for i in range(3):
            for cns in ("", "x"):
                nsclient.put_checkpoint(t, {"i": i}, checkpoint_id=f"{t}-{i}", checkpoint_ns=cns)
                made[t].append((f"{t}-{i}", cns))
    everything = sorted((t, cid, cns) for t, items in made.items() for cid, cns in items)
    for page_size in (1, 4, 100):
        got = [(cp.thread_id, cp.checkpoint_id, cp.checkpoint_ns)
               for cp in nsclient.list_checkpoints(page_size=page_size)]
        assert sorted(got) == everything and len(got) == len(everything)
        for t in made:  # each thread's checkpoints newest first
            mine = [(cid, cns) for tt, cid, cns in got if tt == t]
            assert mine == sorted(mine, reverse=True)
    assert len(list(nsclient.list_checkpoints(limit=5, page_size=2))) == 5


def test_list_includes_values_and_writes_when_asked(client, tid):
    client.put_checkpoint(tid, {"v": [1]}, checkpoint_id="a")
    client.put_writes(tid, "a", [("t", 0, "v", 2)])
    [bare] = client.list_checkpoints(tid)
    assert bare.channels["v"].root and bare.channels["v"].WhichOneof("content") is None
    assert not bare.pending_writes
    [full] = client.list_checkpoints(tid, include_values=True, include_pending_writes=True)
    assert checkpoint_values(full) == {"v": [1]}
    assert [from_value(w.value) for w in full.pending_writes] == [2]


# ---------------------------------------------------------------- prune, runs

def test_prune_keep_latest_per_checkpoint_namespace(client, tid):
    expected = _tree(client, tid)
    client.put_writes(tid, "0000", [("t", 0, "c", "old write")])
    other = tid + "-other"
    other_expected = _tree(client, other)
    deleted = client.prune([tid], keep_latest=2)
    kept = sorted((x for cns in ("", "a", "b|c") for x in sorted(y for y in expected if y[1] == cns)[-2:]),
                  reverse=True)
    assert listed(client, tid) == kept
    assert deleted == len(expected) - 6
    assert listed(client, other) == other_expected
    # the pending writes went with their checkpoint
    client.put_checkpoint(tid, {"i": 0}, checkpoint_id="0000")
    assert not client.get_checkpoint(tid, "0000", include_pending_writes=True).pending_writes
    assert client.prune([tid], keep_latest=1, checkpoint_ns="a") == 1
    assert [x for x in listed(client, tid) if x[1] == "a"] == [("0010", "a")]
    assert client.prune([tid, "no-such-thread"], keep_latest=1000) == 0


def test_prune_older_than(client, tid):
    made = [client.put_checkpoint(tid, {"i": i}, checkpoint_ns=cns).checkpoint
            for i in range(4) for cns in ("", "s")]
    cut = made[5].create_time
    older = [(c.checkpoint_id, c.checkpoint_ns) for c in made
             if (c.create_time.seconds, c.create_time.nanos) < (cut.seconds, cut.nanos)]
    assert older  # at least made[0]
    assert client.prune([tid], older_than=cut.ToDatetime(tzinfo=dt.timezone.utc)) == len(older)
    assert sorted(listed(client, tid)) == sorted((c.checkpoint_id, c.checkpoint_ns) for c in made
                                                 if (c.checkpoint_id, c.checkpoint_ns) not in older)


def test_prune_delete_all(client, tid):
    _tree(client, tid)
    assert client.prune([tid], delete_all=True, checkpoint_ns="b|c") == 8
    assert {cns for _, cns in listed(client, tid)} == {"", "a"}
    assert client.prune([tid], delete_all=True) == 18
    assert listed(client, tid) == []
    assert client.get_thread(tid).thread_id == tid  # the thread stays


def test_prune_policy_validation(client, tid):
    _tree(client, tid)
    before = listed(client, tid)
    with expect_error(INVALID, "INVALID_FIELD", "keep_latest"):
        client.prune([tid], keep_latest=0)
    with expect_error(INVALID, "INVALID_FIELD", "policy"):
        client.prune([tid])
    req = pb.PruneCheckpointsRequest(thread_ids=[tid], delete_all=False)
    with expect_error(INVALID, "INVALID_FIELD", "delete_all"):
        client._call(client.threads.PruneCheckpoints, req, None)
    assert listed(client, tid) == before


def test_delete_for_runs(nsclient, tid):
    client = nsclient  # run ids are namespace-wide
    expected = _tree(client, tid)
    _tree(client, tid + "-2")
    client.put_writes(tid, "0004", [("t", 0, "c", "w")], checkpoint_ns="a")
    client.put_checkpoint(tid, {"x": 1}, checkpoint_id="int-run", metadata={"run_id": 0})
    run_of = {(f"{i:04d}", cns): f"run-{i % 4}" for i in range(12) for cns in ("", "a", "b|c")}
    doomed = [x for x in expected if run_of[x] in ("run-0", "run-2")]
    assert client.delete_for_runs(["run-0", "run-2", "run-none"]) == 2 * len(doomed)
    assert listed(client, tid) == sorted([x for x in expected if x not in doomed] + [("int-run", "")], reverse=True)
    assert client.delete_for_runs(["run-0"]) == 0
    # pending writes of deleted checkpoints are gone with them
    client.put_checkpoint(tid, {"i": 4}, checkpoint_id="0004", checkpoint_ns="a")
    assert not client.get_checkpoint(tid, "0004", checkpoint_ns="a", include_pending_writes=True).pending_writes
    # only string run ids are runs
    assert client.delete_for_runs(["0"]) == 0
    # a re-put that changes the run id moves the checkpoint to the new run
    client.put_checkpoint(tid, {"i": 1}, checkpoint_id="0001", metadata={"run_id": "moved"})
    assert client.delete_for_runs(["run-1"]) == 2 * sum(run_of[x] == "run-1" for x in expected) - 1
    assert client.delete_for_runs(["moved"]) == 1


# ---------------------------------------------------------------- diff

def test_diff(client, tid):
    client.put_checkpoint(tid, {"msgs": list(range(10)), "edited": [1, 2, 3], "m": {"a": 1}, "same": "s",
                                "gone": 1, "kind": [1]}, checkpoint_id="a")
    client.put_checkpoint(tid, {"msgs": Append([10, 11]), "edited": Append(["x"], keep_first=1),
                                "m": SetKeys({"b": 2}), "same": Keep(), "new": [1], "kind": {"now": "map"}},
                          checkpoint_id="b", parent_id="a")
    ra = {k: v.root for k, v in client.get_checkpoint(tid, "a", omit_values=True).channels.items()}
    rb = {k: v.root for k, v in client.get_checkpoint(tid, "b", omit_values=True).channels.items()}
    changes = {c.channel: c for c in client.diff(tid, "a", "b")}
    assert sorted(changes) == ["edited", "gone", "kind", "m", "msgs", "new"]
    msgs = changes["msgs"]
    assert (msgs.kind, msgs.lists, msgs.from_length, msgs.to_length, msgs.common_prefix, msgs.appended) == (
        pb.CHANGE_KIND_MODIFIED, True, 10, 12, 10, True)
    assert (msgs.from_root, msgs.to_root) == (ra["msgs"], rb["msgs"])
    edited = changes["edited"]
    assert (edited.lists, edited.from_length, edited.to_length, edited.common_prefix, edited.appended) == (
        True, 3, 2, 1, False)
    assert changes["m"].kind == pb.CHANGE_KIND_MODIFIED and not changes["m"].lists
    assert changes["kind"].kind == pb.CHANGE_KIND_MODIFIED and not changes["kind"].lists
    assert (changes["gone"].kind, changes["gone"].from_root, changes["gone"].to_root) == (
        pb.CHANGE_KIND_REMOVED, ra["gone"], b"")
    assert (changes["new"].kind, changes["new"].from_root, changes["new"].to_root) == (
        pb.CHANGE_KIND_ADDED, b"", rb["new"])
    back = {c.channel: c for c in client.diff(tid, "b", "a")}
    assert back["new"].kind == pb.CHANGE_KIND_REMOVED and back["gone"].kind == pb.CHANGE_KIND_ADDED
    assert (back["msgs"].common_prefix, back["msgs"].appended) == (10, False)
    assert client.diff(tid, "a", "a") == []


def test_diff_missing(client, tid):
    client.put_checkpoint(tid, {"a": 1}, checkpoint_id="a")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND", "from_checkpoint_id"):
        client.diff(tid, "x", "a")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND", "to_checkpoint_id"):
        client.diff(tid, "a", "x")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND", "from_checkpoint_id"):
        client.diff(tid, "a", "a", checkpoint_ns="other")
    with expect_error(INVALID, "INVALID_FIELD", "to_checkpoint_id"):
        client.diff(tid, "a", "")
