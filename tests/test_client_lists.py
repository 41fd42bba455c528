"""The client's decoding of long list values (agentstate._lists: both twins, and from_value with it)."""
from __future__ import annotations

import datetime as dt
import importlib
import os
import uuid

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from agentstate import _lists, codec, values
from agentstate.codec import Opaque
from agentstate.v1 import values_pb2

C = importlib.import_module("agentstate._lists_c")  # ImportError here = not built: a failure
PY = importlib.import_module("agentstate._lists_py")

SAMPLES = [1, -7, 1.5, "x", "", None, True, False, [], {}, [1, [2, [3]]], {"a": {"b": [1, 2]}}, "é" * 70,
           dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc), uuid.UUID(int=5), {1, 2, 3}, 2**80, -2**70,
           b"\x00\xff" * 40, "s" * 70_000, list(range(20)), {f"k{i}": i for i in range(20)}, 2**40, -2**40, 300,
           -300, 70_000, 3.25e300, b"b" * 300, {"o": Opaque("t", b"x" * 20)}]  # no opaque item: see below


def list_value(items) -> values_pb2.Value:
    v = values_pb2.Value()
    v.list.SetInParent()
    for item in items:
        values.to_value(item, v.list.items.add())
    return v


def per_item(v: values_pb2.Value) -> list:
    return [values.from_value(x) for x in v.list.items]


@pytest.mark.parametrize("n", [0, 1, 2, 15, 16, 17, 1600, 70_000])
def test_both_twins_give_the_array_of_the_items(n):
    items = [SAMPLES[i % len(SAMPLES)] for i in range(n)] if n < 70_000 else list(range(n))
    v = list_value(items)
    wire = v.list.SerializeToString()
    got = C.msgpack_array(wire)
    assert got == PY.msgpack_array(wire)
    assert got == codec.array_header(n) + b"".join(x.msgpack for x in v.list.items)
    assert codec.decode(got) == per_item(v)
    assert values.from_value(v) == per_item(v)


def test_items_that_are_not_msgpack_alone_give_none():
    cases = []
    v = list_value([1, Opaque("pkg.T", b"data"), 3])  # an opaque item
    cases.append(v.list.SerializeToString())
    nested = values_pb2.Value()
    nested.list.items.add().list.items.add().msgpack = codec.encode(1)  # a list item
    nested.list.items.add().msgpack = codec.encode(2)
    cases.append(nested.list.SerializeToString())
    m = values_pb2.Value()
    m.list.items.add().map.entries["a"].msgpack = codec.encode(1)  # a map item
    cases.append(m.list.SerializeToString())
    e = values_pb2.Value()
    e.list.items.add().msgpack = b""  # an empty payload
    cases.append(e.list.SerializeToString())
    good = list_value([1, 2]).list.SerializeToString()
    cases += [
        b"\x0a\x03\x0a\x01\x92",  # an array header without its items
        b"\x0a\x04\x0a\x02\x01\x02",  # two objects in one payload
        b"\x0a\x03\x0a\x01\xc1",  # the never-used head
        good + b"\x10\x01",  # an unknown field of ListValue
        b"\x0a\x05\x0a\x01\x01\x10\x01",  # an unknown field of Value
        good[:-1],  # truncated
        b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # an overlong varint
        b"\x0a\x03\x0a\x01" + b"\x91" * 200 + b"\x01",  # deeper than MAX_DEPTH (lengths wrong too)
    ]
    deep = codec.array_header(1) * 200 + b"\x01"
    w = values_pb2.Value()
    w.list.items.add().msgpack = deep
    cases.append(w.list.SerializeToString())
    for wire in cases:
        assert C.msgpack_array(wire) is None, wire[:40]
        assert PY.msgpack_array(wire) is None, wire[:40]


def test_deep_but_allowed_nesting_is_accepted_alike():
    enc = codec.array_header(1) * 100 + b"\x01"
    w = values_pb2.Value()
    w.list.items.add().msgpack = enc
    w.list.items.add().msgpack = b"\x02"
    wire = w.list.SerializeToString()
    assert C.msgpack_array(wire) == PY.msgpack_array(wire) == b"\x92" + enc + b"\x02"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=40), max_size=12))
def test_arbitrary_payloads_agree(payloads):
    w = values_pb2.Value()
    for p in payloads:
        w.list.items.add().msgpack = p
    wire = w.list.SerializeToString()
    got = C.msgpack_array(wire)
    assert got == PY.msgpack_array(wire)
    if got is not None:  # each payload was one object by structure: the array decodes as the items do
        try:
            want = ("ok", [codec.decode(p) for p in payloads])
        except Exception as e:  # noqa: BLE001
            want = ("error", type(e))
        try:
            have = ("ok", codec.decode(got))
        except Exception as e:  # noqa: BLE001
            have = ("error", type(e))
        assert have == want


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_wire_agrees(wire):
    assert C.msgpack_array(wire) == PY.msgpack_array(wire)


def test_a_bad_item_raises_as_item_by_item():
    w = values_pb2.Value()
    for i in range(10):
        w.list.items.add().msgpack = codec.encode(i)
    w.list.items[6].msgpack = b"\xa2\xff\xfe"  # a string that is not UTF-8
    with pytest.raises(Exception) as old:
        per_item(w)
    with pytest.raises(Exception) as new:
        values.from_value(w)
    assert type(new.value) is type(old.value) and str(new.value) == str(old.value)
    assert isinstance(old.value, (msgspec.DecodeError, codec.UnsupportedValue))


def test_the_selector():
    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert _lists.implementation is PY and _lists.NATIVE is False
    else:
        assert _lists.implementation is C and _lists.NATIVE is True
        assert type(C.msgpack_array).__name__ in ("cython_function_or_method", "builtin_function_or_method")


# ----------------------------------------------------------------- lists scanned in the response as received

def _response(*checkpoints) -> bytes:
    """A GetCheckpointResponse wire of several ``checkpoint`` occurrences (merged by the parser, as
    api/checkpoints.get_wire sends list channels), each a Checkpoint message."""
    from agentstate.v1 import threads_pb2 as pb
    return b"".join(pb.GetCheckpointResponse(checkpoint=ck).SerializeToString() for ck in checkpoints)


def _ck(**channels):
    from agentstate.v1 import threads_pb2 as pb
    ck = pb.Checkpoint(thread_id="t", checkpoint_id="c", etag="e")
    for name, value in channels.items():
        cv = ck.channels[name]
        cv.root = b"r" * 32
        if value is not None:
            cv.value.CopyFrom(value)
    return ck


def _parsed(wire):
    from agentstate.v1 import threads_pb2 as pb
    return pb.GetCheckpointResponse.FromString(wire).checkpoint


def _same_values(wire) -> dict:
    """response_lists of ``wire``; every list it gives decodes as the parsed message's list does."""
    from agentstate.client import checkpoint_values
    found = values.response_lists(wire)
    ck = _parsed(wire)
    for name, lw in found.items():
        lv = ck.channels[name].value.list
        assert C.msgpack_array(lw) == C.msgpack_array(lv.SerializeToString()) == PY.msgpack_array(lw)
    assert checkpoint_values(ck, found) == checkpoint_values(ck)
    return found


def test_msgpack_array_reads_any_buffer_as_bytes():
    wire = list_value(SAMPLES[:12]).list.SerializeToString()
    framed = b"xx" + wire + b"yy"
    for impl in (C, PY):
        assert impl.msgpack_array(memoryview(framed)[2:-2]) == impl.msgpack_array(wire) is not None
        assert impl.msgpack_array(bytearray(wire)) == impl.msgpack_array(wire)
        assert impl.msgpack_array(memoryview(b"")) == impl.msgpack_array(b"") == b"\x90"
        assert impl.msgpack_array(memoryview(wire[:-1])) is None
    strided = memoryview(wire * 2)[::2]  # not contiguous: bytes() of it, in both
    assert C.msgpack_array(strided) == PY.msgpack_array(strided)
    for bad in ("text", 5):
        outs = []
        for impl in (C, PY):
            try:
                outs.append(("ok", impl.msgpack_array(bad)))
            except Exception as e:  # noqa: BLE001
                outs.append(("error", type(e)))
        assert outs[0] == outs[1]


def test_response_lists_finds_each_list_channel():
    msgs = list_value([{"role": "user", "content": f"m{i}" * 30} for i in range(50)])
    wire = _response(_ck(messages=msgs, other=list_value([1, 2, 3]), empty=list_value([]), s=values.to_value("x"),
                         none=None, opq=list_value([1, Opaque("t", b"d")])))
    found = _same_values(wire)
    assert set(found) == {"messages", "other", "empty", "opq"}
    assert bytes(found["messages"]) == msgs.list.SerializeToString()
    assert bytes(found["empty"]) == b""
    # spliced as get_wire sends it: the list channel in an occurrence of its own, after the rest
    wire2 = _response(_ck(s=values.to_value("x")), _ck(messages=msgs))
    assert set(_same_values(wire2)) == {"messages"}


def test_response_lists_leaves_out_what_the_parser_merges_or_replaces():
    a, b = list_value([1, 2, 3]), list_value([4, 5])
    # the same channel twice (the later entry wins): left out
    assert "m" not in _same_values(_response(_ck(m=a), _ck(m=b)))
    # a ChannelValue whose value comes twice (the lists merge): left out
    from agentstate.v1 import threads_pb2 as pb
    cv1, cv2 = pb.ChannelValue(value=a), pb.ChannelValue(value=b)
    entry = (b"\x0a\x01m" + b"\x12" + bytes([len(cv1.SerializeToString() + cv2.SerializeToString())])
             + cv1.SerializeToString() + cv2.SerializeToString())
    wire = b"\x0a" + bytes([len(entry) + 2]) + b"\x3a" + bytes([len(entry)]) + entry
    assert len(_parsed(wire).channels["m"].value.list.items) == 5
    assert "m" not in _same_values(wire)
    # a value then a delta (the oneof ends with the delta): left out
    d = pb.ChannelValue(delta=values_pb2.ValueDelta(keep_first=1))
    entry = b"\x0a\x01m\x12" + bytes([len(cv1.SerializeToString() + d.SerializeToString())]) + \
        cv1.SerializeToString() + d.SerializeToString()
    wire = b"\x0a" + bytes([len(entry) + 2]) + b"\x3a" + bytes([len(entry)]) + entry
    assert not _parsed(wire).channels["m"].HasField("value")
    assert "m" not in values.response_lists(wire)
    # a list then a msgpack in the same Value (the oneof ends with the msgpack): left out
    v = a.SerializeToString() + values.to_value(7).SerializeToString()
    cv = b"\x12" + bytes([len(v)]) + v
    entry = b"\x0a\x01m\x12" + bytes([len(cv)]) + cv
    wire = b"\x0a" + bytes([len(entry) + 2]) + b"\x3a" + bytes([len(entry)]) + entry
    assert _parsed(wire).channels["m"].value.WhichOneof("kind") == "msgpack"
    assert "m" not in _same_values(wire)
    # two lists in one Value (merged): left out
    v = a.SerializeToString() + b.SerializeToString()
    cv = b"\x12" + bytes([len(v)]) + v
    entry = b"\x0a\x01m\x12" + bytes([len(cv)]) + cv
    wire = b"\x0a" + bytes([len(entry) + 2]) + b"\x3a" + bytes([len(entry)]) + entry
    assert len(_parsed(wire).channels["m"].value.list.items) == 5
    assert "m" not in _same_values(wire)


def test_response_lists_of_bytes_it_cannot_read_is_empty():
    good = _response(_ck(m=list_value([1, 2])))
    assert values.response_lists(good)
    for wire in (good[:-1], good + b"\x0b", good + b"\x80", b"\x0a\x05\x3a\x03\x12\x01\x00",  # entry without key
                 b"\x0a\x04\x3a\x02\x08\x01"):  # a key that is a varint
        assert values.response_lists(wire) == {}



@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                          st.sampled_from(["list", "list2", "msgpack", "delta", "none", "opaque_item"]),
                          st.lists(st.integers(-3, 3), max_size=4)), max_size=6),
       st.integers(1, 3))
def test_response_lists_agrees_with_the_parser(entries, splits):
    """Any sequence of channel entries (repeated names, values given twice, deltas, other kinds), cut into
    ``checkpoint`` occurrences: whatever response_lists gives decodes as the parsed message does."""
    from agentstate.v1 import threads_pb2 as pb
    raw = []
    for name, kind, ints in entries:
        if kind == "list":
            body = pb.ChannelValue(root=b"r", value=list_value(ints)).SerializeToString()
        elif kind == "list2":  # the value field twice
            body = (pb.ChannelValue(value=list_value(ints)).SerializeToString()
                    + pb.ChannelValue(value=list_value(ints[::-1])).SerializeToString())
        elif kind == "msgpack":
            body = pb.ChannelValue(value=values.to_value(ints)).SerializeToString()
        elif kind == "delta":
            body = pb.ChannelValue(delta=values_pb2.ValueDelta(keep_first=len(ints))).SerializeToString()
        elif kind == "opaque_item":
            body = pb.ChannelValue(value=list_value([*ints, Opaque("t", b"x")])).SerializeToString()
        else:
            body = pb.ChannelValue(root=b"r").SerializeToString()
        entry = pb.Checkpoint.ChannelsEntry(key=name).SerializeToString() + b"\x12" + \
            codec_varint(len(body)) + body
        raw.append(b"\x3a" + codec_varint(len(entry)) + entry)
    step = max(1, len(raw) // splits)
    wire = b""
    for i in range(0, max(len(raw), 1), step):
        ck = b"".join(raw[i:i + step])
        wire += b"\x0a" + codec_varint(len(ck)) + ck
    _same_values(wire)


def codec_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_msgpack_array_into_is_msgpack_array_in_a_kept_buffer():
    wires = [list_value(SAMPLES).list.SerializeToString(), list_value([1, 2]).list.SerializeToString(), b"",
             list_value([1, Opaque("t", b"x")]).list.SerializeToString(), b"\x0a\x03\x0a\x01\x92"]
    for wire in wires:
        outs = []
        for impl in (C, PY):
            for start in (b"", b"z" * 7, b"q" * 100_000):
                buf = bytearray(start)
                n = impl.msgpack_array_into(wire, buf)
                want = impl.msgpack_array(wire)
                if want is None:
                    assert n == -1 and buf == bytearray(start)  # unchanged
                else:
                    assert n == len(want) and bytes(buf[:n]) == want and bytes(buf[n:]) == start[n:]
                    assert len(buf) == max(len(start), n)  # grown when too short, never shrunk
                outs.append((n, bytes(buf)))
        assert outs[:3] == outs[3:]
    for impl in (C, PY):
        with pytest.raises(TypeError):
            impl.msgpack_array_into(wires[0], memoryview(bytearray(10)))
        with pytest.raises(BufferError):  # a buffer still exported cannot grow, in either twin
            buf = bytearray(1)
            view = memoryview(buf)
            try:
                impl.msgpack_array_into(wires[0], buf)
            finally:
                view.release()


def test_long_lists_are_decoded_through_each_threads_kept_buffer():
    import threading

    sizes = [1600, 20, 5000, 2, 1600]
    lists = [list_value([SAMPLES[i % len(SAMPLES)] for i in range(n)]) for n in sizes]
    bad = list_value(list(range(10)))
    bad.list.items[6].msgpack = b"\xa2\xff\xfe"  # not UTF-8: item by item, the same error

    def run(out: list) -> None:
        for v in lists:
            out.append(values.from_value(v) == per_item(v))
            with pytest.raises(Exception) as e:
                values.from_value(bad)
            out.append(type(e.value).__name__)
            out.append(values.from_value(v) == per_item(v))
        out.append(getattr(values._scratch, "buf", None))

    mine: list = []
    run(mine)
    theirs: list = []
    t = threading.Thread(target=run, args=(theirs,))
    t.start()
    t.join()
    assert mine[:-1] == theirs[:-1] and all(x is True for x in mine[:-1] if type(x) is bool)
    if _lists.NATIVE:
        assert type(mine[-1]) is bytearray and type(theirs[-1]) is bytearray and mine[-1] is not theirs[-1]
        first = mine[-1]
        values.from_value(lists[0])
        assert values._scratch.buf is first  # kept, not made again
