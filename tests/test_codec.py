"""agentstate.codec: the canonical value encoding (reference implementation)."""
from __future__ import annotations

import datetime as dt
import decimal
import enum
import math
import uuid
import zoneinfo

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstate import codec
from agentstate.codec import Opaque, UnsupportedValue

Ext = msgspec.msgpack.Ext
UTC = dt.timezone.utc
NY = zoneinfo.ZoneInfo("America/New_York")


class Color(enum.IntEnum):
    RED = 1


def same(a, b) -> bool:
    """``b`` is exactly what ``a`` reads back as (types, NaN, -0.0, tzinfo kind and fold included)."""
    ta = type(a)
    if ta in (list, tuple):
        return type(b) is list and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if ta is dict:
        # maps read back with their keys in canonical (UTF-8 byte) order
        return (type(b) is dict and set(a) == set(b) and list(b) == sorted(b, key=lambda k: k.encode())
                and all(same(a[k], b[k]) for k in a))
    if ta in (set, frozenset):
        return type(b) is set and a == b and all(type(x) is type(next(y for y in b if y == x)) for x in a)
    if ta in (bytearray, memoryview):
        return type(b) is bytes and bytes(a) == b
    if ta is float:
        if math.isnan(a):
            return type(b) is float and math.isnan(b)
        return type(b) is float and a == b and math.copysign(1, a) == math.copysign(1, b)
    if ta is decimal.Decimal:
        return type(b) is decimal.Decimal and str(a) == str(b)
    if ta is dt.datetime:
        if type(b) is not dt.datetime:
            return False
        if a.tzinfo is None or a.utcoffset() is None:
            return b.tzinfo is None and a.replace(tzinfo=None) == b.replace(tzinfo=None)
        if isinstance(a.tzinfo, zoneinfo.ZoneInfo):
            # stored as (UTC instant, zone): reads back as that instant's wall time and fold in the zone,
            # which is ``a`` itself for every wall time that exists (ambiguous ones keep their fold)
            want = a.astimezone(UTC).astimezone(a.tzinfo)
            return (isinstance(b.tzinfo, zoneinfo.ZoneInfo) and b.tzinfo.key == a.tzinfo.key
                    and b.replace(tzinfo=None) == want.replace(tzinfo=None) and b.fold == want.fold)
        return (a.replace(tzinfo=None) == b.replace(tzinfo=None) and a.utcoffset() == b.utcoffset()
                and type(b.tzinfo) is dt.timezone and (b.tzinfo is UTC) == (a.utcoffset() == dt.timedelta(0)))
    return type(a) is type(b) and a == b


timezones = (st.none() | st.just(UTC)
             | st.integers(-86399, 86399).filter(bool).map(lambda s: dt.timezone(dt.timedelta(seconds=s)))
             | st.timezones())
datetimes = st.builds(lambda d, tz, fold: d.replace(tzinfo=tz, fold=fold if tz is not None else 0),
                      st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
                      timezones, st.integers(0, 1))
hashables = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.binary(max_size=5)
    | st.floats(allow_nan=False) | st.uuids() | st.decimals(allow_nan=False, allow_infinity=False),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=8,
)
scalars = (st.none() | st.booleans() | st.integers() | st.integers(2**63, 2**200) | st.integers(-2**200, -2**63)
           | st.floats() | st.text() | st.binary() | st.binary().map(bytearray) | datetimes | st.uuids()
           | st.decimals() | st.builds(Opaque, st.text(min_size=1, max_size=20).filter(lambda t: len(t.encode()) < 256),
                                       st.binary(max_size=30)))
values = st.recursive(
    scalars | st.sets(hashables, max_size=6) | st.frozensets(hashables, max_size=4),
    lambda inner: st.lists(inner, max_size=6) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=6),
    max_leaves=30,
)


@settings(deadline=None, max_examples=400)
@given(value=values)
def test_round_trip_exact(value):
    enc = codec.encode(value)
    back = codec.decode(enc)
    assert same(value, back), (value, back)
    # the encoding is canonical: canonicalize leaves it alone, and encoding the read-back value gives it again
    assert codec.canonicalize(enc) == enc
    assert codec.encode(back) == enc


def test_round_trip_each_type():
    cases = [
        None, True, False, 0, -1, 2**64 - 1, 2**64, -2**63, -2**63 - 1, 10**50, -(10**50), 1.5, -0.0,
        float("inf"), float("nan"), "", "héllo 🎉", b"", b"\x00\xff", [], [1, [2, [3]]], {}, {"b": 1, "a": {"c": []}},
        dt.datetime(2020, 2, 29, 12, 30, 45, 123456), dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2020, 1, 1, tzinfo=UTC), dt.datetime(2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-7))),
        dt.datetime(2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30, seconds=15))),
        dt.datetime(2024, 7, 1, 9, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
        dt.datetime(2024, 1, 1, tzinfo=zoneinfo.ZoneInfo("UTC")),
        uuid.UUID(int=0), uuid.uuid4(), decimal.Decimal("1.10"), decimal.Decimal("-0"), decimal.Decimal("NaN"),
        decimal.Decimal("1E+3"), decimal.Decimal("sNaN"), set(), {1, 2, 3}, {"a", b"a", 1}, frozenset({1.5}),
        {(1, 2), (1, (2, 3))}, {frozenset({1}), frozenset()}, Opaque("pickle", b"\x80\x04."),
        Opaque("t" * 255, b"x" * 70000),
    ]
    for value in cases:
        back = codec.decode(codec.encode(value))
        assert same(value, back), (value, back)


def test_datetime_tzinfo_kinds():
    aware = dt.datetime(2024, 3, 1, 8, 0)
    utc = codec.decode(codec.encode(aware.replace(tzinfo=UTC)))
    assert utc.tzinfo is UTC
    fixed = codec.decode(codec.encode(aware.replace(tzinfo=dt.timezone(dt.timedelta(hours=2)))))
    assert type(fixed.tzinfo) is dt.timezone and fixed.utcoffset() == dt.timedelta(hours=2) and fixed.hour == 8
    zoned = codec.decode(codec.encode(aware.replace(tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))))
    assert isinstance(zoned.tzinfo, zoneinfo.ZoneInfo) and zoned.tzinfo.key == "Asia/Tokyo" and zoned.hour == 8
    zoned_utc = codec.decode(codec.encode(aware.replace(tzinfo=zoneinfo.ZoneInfo("UTC"))))
    assert isinstance(zoned_utc.tzinfo, zoneinfo.ZoneInfo) and zoned_utc.tzinfo.key == "UTC"
    naive = codec.decode(codec.encode(aware))
    assert naive.tzinfo is None and naive == aware
    # the extension's flag byte records the kind
    assert codec.encode(aware)[3] == 0
    assert codec.encode(aware.replace(tzinfo=UTC))[3] == 1
    assert codec.encode(aware.replace(tzinfo=NY))[3] == 2


def test_datetime_fold_of_zoned_times_round_trips():
    # 2021-11-07 01:30 happens twice in New York: fold 0 is EDT (-4h), fold 1 is EST (-5h)
    first = dt.datetime(2021, 11, 7, 1, 30, tzinfo=NY, fold=0)
    second = dt.datetime(2021, 11, 7, 1, 30, tzinfo=NY, fold=1)
    assert codec.encode(first) != codec.encode(second)
    b1, b2 = codec.decode(codec.encode(first)), codec.decode(codec.encode(second))
    assert (b1.fold, b2.fold) == (0, 1)
    assert b1.utcoffset() == dt.timedelta(hours=-4) and b2.utcoffset() == dt.timedelta(hours=-5)
    assert same(first, b1) and same(second, b2)


def test_zoned_times_are_stored_as_instants():
    """Format: (UTC instant, zone name). A wall time the zone skips reads back as the real time of that instant,
    and fold on an unambiguous time (where it changes nothing) reads back 0."""
    gap = dt.datetime(2021, 3, 14, 2, 30, tzinfo=NY)  # 02:00-03:00 does not exist that night
    back = codec.decode(codec.encode(gap))
    assert back.astimezone(UTC) == gap.astimezone(UTC) and (back.hour, back.minute) == (3, 30)
    plain = dt.datetime(2021, 6, 1, 12, tzinfo=NY, fold=1)
    back = codec.decode(codec.encode(plain))
    assert back.fold == 0 and back.replace(fold=1) == plain and codec.encode(back) == codec.encode(plain)


def test_datetime_fold_of_naive_times_is_not_stored():
    """A naive datetime is stored as its wall clock (format: flag 0); fold has no place in it and reads back 0."""
    naive = dt.datetime(2021, 11, 7, 1, 30, fold=1)
    assert codec.encode(naive) == codec.encode(naive.replace(fold=0))
    back = codec.decode(codec.encode(naive))
    assert back == naive and back.fold == 0


def test_sets_read_back_with_hashable_elements():
    value = {(1, (2, frozenset({"x"}))), frozenset({(3,)}), 4}
    back = codec.decode(codec.encode(value))
    assert back == value and same(value, back)
    # a set holding a map (possible in an encoding, not in Python) cannot be read back as a set
    holding_map = msgspec.msgpack.encode(Ext(5, msgspec.msgpack.encode([{"a": 1}])))
    assert codec.canonicalize(holding_map) == holding_map  # it is a valid, canonical encoding
    with pytest.raises(UnsupportedValue, match="a set holding a map"):
        codec.decode(holding_map)


def test_set_encoding_is_canonical():
    enc = codec.encode({3, 1, 2, 1.5, "a"})
    assert enc == codec.encode({"a", 1.5, 2, 3, 1})
    payload = codec.decode(enc)
    assert payload == {1, 2, 3, 1.5, "a"}
    # elements sorted by their canonical encodings, no duplicates
    inner = msgspec.msgpack.decode(enc, ext_hook=lambda code, data: bytes(data))
    assert inner == codec.set_payload([codec.encode(x) for x in [3, 1, 2, 1.5, "a", 3]])
    assert codec.encode(frozenset({1})) == codec.encode({1})


def test_tuples_and_buffers_read_back_as_lists_and_bytes():
    assert codec.decode(codec.encode((1, (2,)))) == [1, [2]]
    assert codec.decode(codec.encode(bytearray(b"ab"))) == b"ab"
    assert codec.decode(codec.encode(memoryview(b"cd"))) == b"cd"


# ------------------------------------------------------------------ rejected values

@pytest.mark.parametrize("value,reason,path", [
    (1j, "unsupported type builtins.complex", "$"),
    ([1, {"a": object()}], "unsupported type builtins.object", "$[1]['a']"),
    ({"x": [1, 2, dt.date(2020, 1, 1)]}, "unsupported type datetime.date", "$['x'][2]"),
    ({1: "a"}, "map key 1 is not a string", "$"),
    ({"ok": {b"k": 1}}, "map key b'k' is not a string", "$['ok']"),
    ({"b": 1j, "a": 2j}, "unsupported type builtins.complex", "$['a']"),  # first in key order
    ({1j}, "unsupported type builtins.complex", "${set}[0]"),
    ([{(1, 1j)}], "unsupported type builtins.complex", "$[0]{set}[0][1]"),
    (Opaque("", b""), "opaque type must be 1 to 255 UTF-8 bytes", "$"),
    (Opaque("t", bytearray(b"")), "Opaque needs a str type and bytes data", "$"),
    (["a\ud800"], "string is not valid Unicode (lone surrogate)", "$[0]"),
    ({"k\udfff": 1}, "string is not valid Unicode (lone surrogate)", "$['k\\udfff']"),
    (dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), "datetime out of range", "$"),
    (dt.datetime(2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(microseconds=1))),
     "datetime UTC offset must be whole seconds under 24 hours", "$"),
    (Ext(77, b""), "unknown extension type 77", "$"),
    (Color.RED, f"unsupported type {__name__}.Color", "$"),  # an int subclass is not an int
])
def test_unsupported_values(value, reason, path):
    with pytest.raises(UnsupportedValue) as info:
        codec.encode(value)
    assert (info.value.reason, info.value.path) == (reason, path)
    assert str(info.value) == f"{path}: {reason}"


def test_subclasses_of_supported_types_are_rejected():
    class S(str):
        pass

    class D(dict):
        pass

    with pytest.raises(UnsupportedValue, match="unsupported type"):
        codec.encode(S("x"))
    with pytest.raises(UnsupportedValue, match="unsupported type"):
        codec.encode([D()])


# ------------------------------------------------------------------ canonicalize

def _ts_ext_minus_1() -> bytes:
    return msgspec.msgpack.encode(dt.datetime(2024, 5, 1, 12, tzinfo=UTC))


@pytest.mark.parametrize("given,expected", [
    (msgspec.msgpack.encode({"b": 1, "a": 2, "c": {"z": 0, "y": 1}}), {"a": 2, "b": 1, "c": {"y": 1, "z": 0}}),
    (bytes.fromhex("cd0005"), 5),
    (bytes.fromhex("cf0000000000000100"), 256),
    (bytes.fromhex("d3ffffffffffffffff"), -1),
    (bytes.fromhex("d000"), 0),
    (bytes.fromhex("ca3fc00000"), 1.5),  # float32 becomes float64
    (bytes.fromhex("cbfff8000000000001"), float("nan")),  # any NaN becomes the one NaN
    (_ts_ext_minus_1(), dt.datetime(2024, 5, 1, 12, tzinfo=UTC)),  # msgpack timestamp (ext -1)
    (msgspec.msgpack.encode(Ext(4, b"1.1e0")), decimal.Decimal("1.1")),
    (msgspec.msgpack.encode(Ext(4, b"1.10")), decimal.Decimal("1.10")),
    (msgspec.msgpack.encode(Ext(1, b"\x00\x00\x00\x07")), 7),  # big int ext that fits a plain int
    (msgspec.msgpack.encode(Ext(1, b"\x00" * 5 + (2**64).to_bytes(9, "big"))), 2**64),
    (msgspec.msgpack.encode(Ext(5, msgspec.msgpack.encode([2, 1, 2]))), {1, 2}),
    (bytes.fromhex("d90161"), "a"),  # str8 for a short string
    (bytes.fromhex("dc0000"), []),  # array16 for an empty array
])
def test_canonicalize_makes_the_canonical_encoding(given, expected):
    out = codec.canonicalize(given)
    assert out == codec.encode(expected)
    assert codec.canonicalize(out) == out


def test_canonicalize_keeps_decimal_text():
    # '1.10' and '1.1' are different decimals (precision) and stay different
    assert codec.canonicalize(codec.encode(decimal.Decimal("1.10"))) != codec.encode(decimal.Decimal("1.1"))


@pytest.mark.parametrize("data,reason", [
    (b"", "not valid MessagePack: the input is truncated"),
    (b"\xc1", "not valid MessagePack: malformed input"),
    (b"\xc0\xc0", "not valid MessagePack: bytes follow the value"),
    (bytes.fromhex("a2c328"), "not valid MessagePack: a string is not valid UTF-8"),
    (bytes.fromhex("810102"), "map key 1 is not a string"),
])
def test_canonicalize_rejects(data, reason):
    with pytest.raises(UnsupportedValue) as info:
        codec.canonicalize(data)
    assert info.value.reason == reason


# ------------------------------------------------------------------ depth

def nest_list(depth, leaf=1):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def nest_map(depth, leaf=1):
    for _ in range(depth):
        leaf = {"k": leaf}
    return leaf


def test_depth_limit():
    assert codec.MAX_DEPTH == 64
    codec.encode(nest_list(64))
    codec.encode(nest_map(64))
    codec.encode(nest_list(63, {1}))
    with pytest.raises(UnsupportedValue) as info:
        codec.encode(nest_list(65))
    assert info.value.reason == "nested deeper than 64" and info.value.path == "$" + "[0]" * 64
    with pytest.raises(UnsupportedValue) as info:
        codec.encode(nest_map(65))
    assert info.value.path == "$" + "['k']" * 64
    with pytest.raises(UnsupportedValue, match="nested deeper than 64"):
        codec.encode(nest_list(64, {1}))
    with pytest.raises(UnsupportedValue, match="nested deeper than 64"):
        codec.encode(nest_list(64, (1,)))
    # encodings: 64 levels pass, 65 and very deep ones are refused
    assert codec.canonicalize(bytes([0x91] * 64) + b"\x01") == codec.encode(nest_list(64))
    with pytest.raises(UnsupportedValue, match="nested deeper than 64"):
        codec.canonicalize(bytes([0x91] * 65) + b"\x01")
    with pytest.raises(UnsupportedValue, match="nested deeper than 64"):
        codec.canonicalize(bytes([0x91] * 5000) + b"\x01")
    assert codec.normalize([1], depth=63) == [1]
    with pytest.raises(UnsupportedValue):
        codec.normalize([1], depth=64)


# ------------------------------------------------------------------ malformed extension payloads

@pytest.mark.parametrize("code,payload,reason", [
    (1, b"", "empty big int extension"),
    (2, b"", "malformed datetime extension"),
    (2, b"\x00" + bytes(7), "malformed datetime extension"),
    (2, b"\x01" + bytes(11), "malformed datetime extension"),
    (2, b"\x02" + bytes(12), "malformed datetime extension"),  # zone flag without a zone name
    (2, b"\x01" + bytes(12) + b"x", "malformed datetime extension"),  # offset flag with a zone name
    (2, b"\x07" + bytes(8), "malformed datetime extension"),
    (2, b"\x01" + bytes(8) + (86400).to_bytes(4, "big"), "datetime offset out of range"),
    (2, b"\x02" + bytes(12) + b"\xff", "datetime zone name is not UTF-8"),
    (2, b"\x02" + bytes(12) + b"z" * 256, "datetime zone name longer than 255 bytes"),
    (2, b"\x00" + (codec.MICROS_MAX + 1).to_bytes(8, "big"), "datetime out of range"),
    (2, b"\x00" + (codec.MICROS_MIN - 1).to_bytes(8, "big", signed=True), "datetime out of range"),
    (3, bytes(15), "UUID extension must hold 16 bytes"),
    (3, bytes(17), "UUID extension must hold 16 bytes"),
    (4, b"abc", "malformed decimal extension"),
    (4, "١".encode(), "malformed decimal extension"),
    (5, b"\x01", "set extension must hold an array"),
    (5, b"\x92\x01", "malformed set extension"),
    (6, b"", "malformed opaque extension"),
    (6, b"\x00x", "malformed opaque extension"),
    (6, b"\x03ab", "malformed opaque extension"),
    (6, b"\x01\xff", "opaque type is not UTF-8"),
    (0, b"x", "unknown extension type 0"),
    (-2, b"x", "unknown extension type -2"),
])
def test_malformed_extension_payloads(code, payload, reason):
    data = msgspec.msgpack.encode(Ext(code, payload))
    with pytest.raises(UnsupportedValue) as info:
        codec.canonicalize(data)
    assert info.value.reason == reason
    with pytest.raises(UnsupportedValue) as info:
        codec.encode(Ext(code, payload))
    assert info.value.reason == reason
    if reason not in ("malformed set extension",):
        with pytest.raises(UnsupportedValue):
            codec.decode(data)


def test_extension_errors_inside_containers_have_paths():
    data = msgspec.msgpack.encode({"a": [1, Ext(3, b"")]})
    with pytest.raises(UnsupportedValue) as info:
        codec.canonicalize(data)
    assert info.value.path == "$['a'][1]"
    inner = msgspec.msgpack.encode(Ext(5, msgspec.msgpack.encode([1, Ext(9, b"")])))
    with pytest.raises(UnsupportedValue) as info:
        codec.canonicalize(inner)
    assert (info.value.reason, info.value.path) == ("unknown extension type 9", "${set}[1]")
