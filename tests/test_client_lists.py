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
