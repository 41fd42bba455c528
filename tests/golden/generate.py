"""Regenerate the golden vectors (values.json, trees.json) from the pure-Python twin.

    python tests/golden/generate.py
    python tests/golden/generate.py --add-stored   # only add trees.json's "stored" section
    python tests/golden/generate.py --add-written  # only add trees.json's "written" section

Run this ONLY when the storage format version changes (sidecar.storage.layout.FORMAT_NAME),
and review the diff: the committed files are the contract that both hot-path
implementations (sidecar.storage._hotpath_py + agentstate.codec, and the compiled
sidecar.storage._hotpath_c) are tested against. Tests never regenerate them; they load
the committed JSON and compare. If a test fails after a code change, the code
is wrong, not the vectors.

Values are described in JSON-friendly form (``from_desc`` turns a description
back into the Python value), e.g. ``["int", "18446744073709551616"]``,
``["datetime", "2021-11-07T01:30:00", {"zone": "America/New_York", "fold": 1}]``.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
import uuid
import zoneinfo
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

Ext = msgspec.msgpack.Ext


# ---------------------------------------------------------------- descriptions

def from_desc(d):
    """Build the Python value a JSON description names."""
    from agentstate.codec import Opaque

    kind = d[0]
    if kind == "none":
        return None
    if kind == "bool":
        return bool(d[1])
    if kind == "int":
        return int(d[1])
    if kind == "float":
        return float(d[1])
    if kind == "str":
        return d[1]
    if kind == "strx":  # unit * count
        return d[1] * d[2]
    if kind == "bytes":
        return bytes.fromhex(d[1])
    if kind == "bytesx":
        return bytes.fromhex(d[1]) * d[2]
    if kind == "bytearray":
        return bytearray.fromhex(d[1])
    if kind == "memoryview":
        return memoryview(bytes.fromhex(d[1]))
    if kind == "list":
        return [from_desc(x) for x in d[1]]
    if kind == "listx":  # [item] * count
        return [from_desc(d[1]) for _ in range(d[2])]
    if kind == "tuple":
        return tuple(from_desc(x) for x in d[1])
    if kind == "map":
        return {from_desc(k): from_desc(v) for k, v in d[1]}
    if kind == "nest":  # d[1] lists around a leaf
        value = from_desc(d[2])
        for _ in range(d[1]):
            value = [value]
        return value
    if kind == "nestmap":
        value = from_desc(d[2])
        for _ in range(d[1]):
            value = {"k": value}
        return value
    if kind == "set":
        return {from_desc(x) for x in d[1]}
    if kind == "frozenset":
        return frozenset(from_desc(x) for x in d[1])
    if kind == "datetime":
        opts = d[2] if len(d) > 2 else {}
        value = dt.datetime.fromisoformat(d[1])
        if "zone" in opts:
            value = value.replace(tzinfo=zoneinfo.ZoneInfo(opts["zone"]))
        if "offset_us" in opts:
            value = value.replace(tzinfo=dt.timezone(dt.timedelta(microseconds=opts["offset_us"])))
        if "fold" in opts:
            value = value.replace(fold=opts["fold"])
        return value
    if kind == "uuid":
        return uuid.UUID(d[1])
    if kind == "decimal":
        return decimal.Decimal(d[1])
    if kind == "opaque":
        return Opaque(d[1], bytes.fromhex(d[2]))
    if kind == "opaquex":
        return Opaque(d[1], bytes.fromhex(d[2]) * d[3])
    if kind == "ext":
        return Ext(d[1], bytes.fromhex(d[2]))
    if kind == "complex":
        return complex(d[1])
    if kind == "object":
        return object()
    raise ValueError(f"unknown description {d!r}")


def S(s):
    return ["str", s]


def I(i):  # noqa: E743
    return ["int", str(i)]


def F(x):
    return ["float", repr(x)]


def M(*pairs):
    return ["map", [[S(k) if isinstance(k, str) else k, v] for k, v in pairs]]


def L(*items):
    return ["list", list(items)]


def _value_cases():
    cases = []

    def add(name, desc):
        cases.append((name, desc))

    add("nil", ["none"])
    add("true", ["bool", True])
    add("false", ["bool", False])
    for i in [0, 1, 31, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
              2**64 - 1, -1, -31, -32, -33, -127, -128, -129, -255, -256, -32767, -32768, -32769, -65536,
              -2**31 + 1, -2**31, -2**31 - 1, -2**32, -2**63 + 1, -2**63]:
        add(f"int {i}", I(i))
    for i in [2**64, 2**64 + 1, -2**63 - 1, -2**64, -2**64 - 1, 2**71 - 1, 2**71, -2**71, -2**71 - 1, 2**100,
              -2**100, 10**40, -(10**40), 2**127, 2**1000]:
        add(f"big int {i}", I(i))
    for x in [0.0, -0.0, 1.0, 1.5, -2.25, 0.1, 1e308, -1e-308, 5e-324, float("inf"), float("-inf"), float("nan"),
              3.141592653589793, 2.0**53 + 1]:
        add(f"float {x!r}", F(x))
    for s in ["", "a", "héllo", "日本語", "emoji 🎉", "\x00", "\uffff", "\U0010ffff", "a" * 31, "a" * 32, "é" * 16]:
        add(f"str {s[:12]!r} len {len(s)}", S(s))
    for unit, count in [("x", 255), ("x", 256), ("x", 65535), ("x", 65536), ("ü", 40000)]:
        add(f"str {unit!r}*{count}", ["strx", unit, count])
    add("bytes empty", ["bytes", ""])
    add("bytes 00", ["bytes", "00"])
    add("bytes ff*255", ["bytesx", "ff", 255])
    add("bytes ab*256", ["bytesx", "ab", 256])
    add("bytes 01*65536", ["bytesx", "01", 65536])
    add("bytearray", ["bytearray", "0102"])
    add("memoryview", ["memoryview", "0304"])
    add("list empty", L())
    add("list one", L(I(1)))
    add("list 15", L(*[I(i) for i in range(15)]))
    add("list 16", L(*[I(i) for i in range(16)]))
    add("list 65536 nil", ["listx", ["none"], 65536])
    add("tuple", ["tuple", [I(1), S("a"), ["none"]]])
    add("list nested", L(L(L(I(1), L())), M(("b", I(2)), ("a", I(1)))))
    add("map empty", M())
    add("map one", M(("a", I(1))))
    add("map unsorted", M(("b", I(1)), ("a", I(2)), ("c", I(3))))
    add("map unicode order", M(("z", I(1)), ("é", I(2)), ("Z", I(3)), ("", I(4)), ("\U0001f389", I(5)), ("\uffff", I(6))))
    add("map prefix keys", M(("ab", I(1)), ("a", I(2)), ("abc", I(3))))
    add("map 15", M(*[(f"k{i:02d}", I(i)) for i in range(15)]))
    add("map 16", M(*[(f"k{i:02d}", I(-i)) for i in reversed(range(16))]))
    add("map nested", M(("outer", M(("y", F(float("nan"))), ("x", I(2**64))))))
    add("message", M(("role", S("user")), ("content", S("hello " * 70))))
    add("datetime naive epoch", ["datetime", "1970-01-01T00:00:00"])
    add("datetime naive micros", ["datetime", "2024-02-29T23:59:59.999999"])
    add("datetime naive min", ["datetime", "0001-01-01T00:00:00"])
    add("datetime naive max", ["datetime", "9999-12-31T23:59:59.999999"])
    add("datetime naive before epoch", ["datetime", "1969-12-31T23:59:59.000001"])
    add("datetime naive fold 1", ["datetime", "2021-11-07T01:30:00", {"fold": 1}])
    add("datetime utc", ["datetime", "2024-05-01T12:00:00+00:00"])
    add("datetime +05:30", ["datetime", "2024-05-01T12:00:00.5+05:30"])
    add("datetime -08:00", ["datetime", "1999-12-31T23:59:59-08:00"])
    add("datetime offset with seconds", ["datetime", "2024-05-01T12:00:00", {"offset_us": 3_630_000_000}])
    add("datetime utc min", ["datetime", "0001-01-01T00:00:00+00:00"])
    add("datetime utc max", ["datetime", "9999-12-31T23:59:59.999999+00:00"])
    add("datetime zone paris", ["datetime", "2024-07-14T10:00:00", {"zone": "Europe/Paris"}])
    add("datetime zone new york fold 0", ["datetime", "2021-11-07T01:30:00", {"zone": "America/New_York", "fold": 0}])
    add("datetime zone new york fold 1", ["datetime", "2021-11-07T01:30:00", {"zone": "America/New_York", "fold": 1}])
    add("datetime zone kolkata", ["datetime", "1950-01-01T00:00:00", {"zone": "Asia/Kolkata"}])
    add("datetime zone UTC", ["datetime", "2024-01-01T00:00:00", {"zone": "UTC"}])
    add("uuid nil", ["uuid", "00000000-0000-0000-0000-000000000000"])
    add("uuid", ["uuid", "12345678-1234-5678-1234-567812345678"])
    for text in ["1.10", "0", "-0", "1E+3", "1.1e0", "123456789012345678901234567890.000001", "NaN", "-Infinity",
                 "sNaN", "1e-30"]:
        add(f"decimal {text}", ["decimal", text])
    add("set empty", ["set", []])
    add("set ints", ["set", [I(3), I(1), I(2)]])
    add("set mixed", ["set", [I(1), S("1"), ["bytes", "01"], F(1.5), ["none"], ["bool", True]]])
    add("frozenset", ["frozenset", [S("b"), S("a")]])
    add("set of tuples", ["set", [["tuple", [I(1), I(2)]], ["tuple", [I(0)]]]])
    add("set of frozensets", ["set", [["frozenset", [I(1)]], ["frozenset", []]]])
    add("set 20 ints", ["set", [I(i * 7919 % 1000) for i in range(20)]])
    add("opaque", ["opaque", "pickle", "80049505"])
    add("opaque empty data", ["opaque", "t", ""])
    add("opaque unicode type", ["opaque", "é", "00"])
    add("opaque type 255 bytes", ["opaque", "t" * 255, "01"])
    add("opaque ext16", ["opaquex", "msgpack", "ab", 300])
    add("opaque ext32", ["opaquex", "msgpack", "cd", 70000])
    add("opaque fixext16 size", ["opaque", "abc", "00" * 12])
    add("ext bigint in range", ["ext", 1, "0001"])
    add("ext bigint out of range", ["ext", 1, "010000000000000000"])
    add("ext bigint padded", ["ext", 1, "00ff00000000000000000000"])
    add("ext decimal 1.1e0", ["ext", 4, "1.1e0".encode().hex()])
    add("ext set unsorted dup", ["ext", 5, msgspec.msgpack.encode([3, 1, 3, 2]).hex()])
    add("ext datetime naive", ["ext", 2, "00" + (0).to_bytes(8, "big").hex()])
    add("ext uuid", ["ext", 3, "11" * 16])
    add("ext opaque", ["ext", 6, "0174ff"])
    add("list of everything", L(["none"], I(-5), I(2**70), F(float("nan")), S("s"), ["bytes", "00"],
                                ["datetime", "2024-01-01T00:00:00+01:00"], ["uuid", "12345678-1234-5678-1234-567812345678"],
                                ["decimal", "1.10"], ["set", [I(2), I(1)]], ["opaque", "t", "00"]))
    add("depth 64", ["nest", 64, I(1)])
    add("map depth 64", ["nestmap", 64, I(1)])
    return cases


def _error_cases():
    cases = []

    def add(name, desc):
        cases.append((name, desc))

    add("complex", ["complex", "1+2j"])
    add("object in map", M(("a", L(I(1), ["complex", "1j"]))))
    add("non-str key", ["map", [[I(1), I(2)]]])
    add("non-str key nested", M(("x", ["map", [[S("ok"), I(1)], [["bytes", "00"], I(2)]]])))
    add("depth 65", ["nest", 65, I(1)])
    add("map depth 65", ["nestmap", 65, I(1)])
    add("set depth", ["nest", 64, ["set", [I(1)]]])
    add("first error in sorted key order", M(("b", ["complex", "1j"]), ("a", ["complex", "2j"])))
    add("set element error", ["set", [["tuple", [["complex", "1j"]]]]])
    add("opaque empty type", ["opaque", "", "00"])
    add("opaque long type", ["opaque", "t" * 256, "00"])
    add("lone surrogate", S("a\ud800b"))
    add("lone surrogate nested", M(("k", L(S("ok"), S("\udfff")))))
    add("lone surrogate key", ["map", [[S("a"), I(1)], [S("b\ud800"), I(2)]]])
    add("datetime out of range after offset", ["datetime", "0001-01-01T00:30:00+01:00"])
    add("datetime max out of range after offset", ["datetime", "9999-12-31T23:30:00-01:00"])
    add("datetime offset not whole seconds", ["datetime", "2024-01-01T00:00:00", {"offset_us": 1_500_000}])
    add("ext unknown", ["ext", 9, "00"])
    add("ext negative code", ["ext", -5, "00"])
    add("ext bigint empty", ["ext", 1, ""])
    add("ext uuid short", ["ext", 3, "00" * 15])
    add("ext decimal bad", ["ext", 4, "abc".encode().hex()])
    add("ext decimal non ascii", ["ext", 4, "c3a9"])
    add("ext datetime bad flag", ["ext", 2, "03" + "00" * 8])
    add("ext datetime bad length", ["ext", 2, "00" + "00" * 7])
    add("ext datetime offset range", ["ext", 2, "01" + "00" * 8 + (86400).to_bytes(4, "big").hex()])
    add("ext datetime zone not utf8", ["ext", 2, "02" + "00" * 12 + "ff"])
    add("ext datetime out of range", ["ext", 2, "00" + (2**62).to_bytes(8, "big").hex()])
    add("ext set not array", ["ext", 5, "01"])
    add("ext set malformed", ["ext", 5, "c1"])
    add("ext opaque empty", ["ext", 6, ""])
    add("ext opaque zero type", ["ext", 6, "0000"])
    add("ext opaque short", ["ext", 6, "05ab"])
    add("ext opaque type not utf8", ["ext", 6, "01ff"])
    return cases


# ---------------------------------------------------------------- canonicalize inputs

def _canonicalize_inputs():
    enc = msgspec.msgpack.encode
    cases = [
        ("unsorted map keys", enc({"b": 1, "a": 2})),
        ("unsorted nested keys", enc([{"z": {"y": 1, "x": 2}}])),
        ("duplicate map keys", bytes.fromhex("82a16101a16102")),
        ("uint8 small", bytes.fromhex("cc05")),
        ("uint16 small", bytes.fromhex("cd0001")),
        ("uint32 small", bytes.fromhex("ce000000ff")),
        ("uint64 small", bytes.fromhex("cf00000000ffffffff")),
        ("int8 positive", bytes.fromhex("d005")),
        ("int8 fixint range", bytes.fromhex("d0e0")),
        ("int16 small", bytes.fromhex("d1ff80")),
        ("int32 small", bytes.fromhex("d2ffff8000")),
        ("int64 small", bytes.fromhex("d3ffffffff80000000")),
        ("int64 positive", bytes.fromhex("d30000000000000001")),
        ("float32", bytes.fromhex("ca3fc00000")),
        ("float32 nan", bytes.fromhex("ca7fc00001")),
        ("float64 other nan", bytes.fromhex("cb7ff0000000000001")),
        ("float64 negative nan", bytes.fromhex("cbfff8000000000000")),
        ("str8 short", bytes.fromhex("d90161")),
        ("str16 short", bytes.fromhex("da000161")),
        ("bin16 short", bytes.fromhex("c5000100")),
        ("array16 short", bytes.fromhex("dc000101")),
        ("map16 short", bytes.fromhex("de0001a16101")),
        ("timestamp ext -1", enc(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))),
        ("timestamp ext -1 96 bit", bytes.fromhex("c70cff") + (5).to_bytes(4, "big") + (10**9).to_bytes(8, "big")),
        ("decimal 1.1e0", enc(Ext(4, b"1.1e0"))),
        ("decimal padded", enc(Ext(4, b" 1.10 "))),
        ("bigint ext in range", enc(Ext(1, b"\x00\x00\x05"))),
        ("bigint ext padded", enc(Ext(1, b"\x00" + (2**64).to_bytes(9, "big")))),
        ("set ext unsorted", enc(Ext(5, enc(["b", "a", "b"])))),
        ("set ext nested unsorted map", enc(Ext(5, enc([{"b": 1, "a": 2}])))),
        ("opaque ext8 fixext size", bytes.fromhex("c70206") + bytes.fromhex("0161")),
        ("uuid ext8", bytes.fromhex("c71003") + b"\x11" * 16),
        ("already canonical", bytes.fromhex("93c0c3cb7ff8000000000000")),
        ("canonical map", enc({"a": [1, 2.5, "x"], "b": None})),
        ("empty input", b""),
        ("truncated", bytes.fromhex("92c0")),
        ("trailing bytes", bytes.fromhex("c0c0")),
        ("reserved byte", bytes.fromhex("c1")),
        ("invalid utf8", bytes.fromhex("a2c328")),
        ("utf8 surrogate", bytes.fromhex("a3eda080")),
        ("utf8 overlong", bytes.fromhex("a2c0af")),
        ("utf8 above max", bytes.fromhex("a4f4908080")),
        ("non-str key", bytes.fromhex("810102")),
        ("depth 65", bytes.fromhex("91" * 65 + "01")),
        ("depth 2000", bytes.fromhex("91" * 2000 + "01")),
        ("unknown ext", enc(Ext(42, b"x"))),
    ]
    return cases


def _decompose_inputs():
    from agentstate import codec

    enc = msgspec.msgpack.encode
    return [
        ("list canonical", codec.encode([1, "a", {"b": 2, "a": [3]}, None])),
        ("list non-canonical", enc([{"b": 1, "a": 2}, 2**40, 1.5])),
        ("map canonical", codec.encode({"z": 1, "a": [2], "m": {"k": "v"}})),
        ("map non-canonical", enc({"z": 1, "a": [2]})),
        ("scalar", codec.encode("x")),
        ("scalar non-canonical", bytes.fromhex("cd0001")),
        ("empty list", codec.encode([])),
        ("empty map", codec.encode({})),
        ("list item error", enc([1, Ext(9, b"")])),
        ("map non-str key", enc({1: 2})),
        ("map value error", enc({"k": Ext(3, b"")})),
    ]


# ---------------------------------------------------------------- generation

def _error(e) -> dict:
    from agentstate.codec import UnsupportedValue

    if isinstance(e, UnsupportedValue):
        return {"type": "UnsupportedValue", "reason": e.reason, "path": e.path}
    return {"type": type(e).__name__}


def nodes_digest(nodes) -> str:
    """blake3 over every (hash, node) in order: pins the exact node list a call emits."""
    from blake3 import blake3

    h = blake3()
    for k, v in nodes:
        h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(8, "big") + v)
    return h.hexdigest()


#: Encodings longer than this are recorded as length + blake3 (keeps the JSON small).
HEX_LIMIT = 4096


def encoding_entry(enc: bytes) -> dict:
    if len(enc) <= HEX_LIMIT:
        return {"encoding": enc.hex()}
    from blake3 import blake3

    return {"encoding_length": len(enc), "encoding_blake3": blake3(enc).hexdigest()}


def pseudo_random(seed: str, n: int) -> bytes:
    """Deterministic bytes (blake3 XOF of the seed)."""
    from blake3 import blake3

    return blake3(seed.encode()).digest(length=n)


def item_encoding(i: int) -> bytes:
    from agentstate import codec

    return codec.encode({"i": i, "text": f"item {i}"})


def list_lengths():
    return [0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 1000, 1025]


APPEND_PATTERNS = [[1], [3, 5], [7, 1, 9], [8], [100]]


def map_sizes():
    return [0, 1, 2, 32, 33, 100, 1000]


def map_pairs(n: int, prefix: str = "key"):
    from agentstate import codec

    return [(f"{prefix}{i:05d}", codec.encode(i)) for i in range(n)]


def map_update_cases():
    """(name, base size, sets as (key, value int), deletes)."""
    return [
        ("1000: set 10 existing, add 10, delete 10", 1000,
         [(f"key{i:05d}", -i) for i in range(0, 100, 10)] + [(f"new{i}", i) for i in range(10)],
         [f"key{i:05d}" for i in range(500, 510)]),
        ("1000: delete to 32 (collapse to a leaf)", 1000, [], [f"key{i:05d}" for i in range(32, 1000)]),
        ("1000: delete to 33 (stays split)", 1000, [], [f"key{i:05d}" for i in range(33, 1000)]),
        ("32: add one (split)", 32, [("extra", 1)], []),
        ("33: delete one (collapse)", 33, [], ["key00000"]),
        ("33: delete all", 33, [], [f"key{i:05d}" for i in range(33)]),
        ("1: delete missing", 1, [], ["nope"]),
        ("0: add 40", 0, [(f"k{i}", i) for i in range(40)], []),
        ("100: set and delete same key", 100, [("key00001", 7)], ["key00001", "key00002"]),
    ]


def generate_values() -> dict:
    from agentstate import codec
    from sidecar.storage import _hotpath_py as hp
    values = []
    for name, desc in _value_cases():
        enc = codec.encode(from_desc(desc))
        nodes: list = []
        h = hp.value_node(enc, nodes)
        entry = {"name": name, "value": desc}
        entry.update(encoding_entry(enc))
        entry.update({"hash": h.hex(), "nodes": nodes_digest(nodes)})
        values.append(entry)
    errors = []
    for name, desc in _error_cases():
        try:
            codec.encode(from_desc(desc))
        except Exception as e:  # noqa: BLE001
            errors.append({"name": name, "value": desc, "error": _error(e)})
        else:
            raise SystemExit(f"error case {name!r} did not fail")
    canon = []
    for name, data in _canonicalize_inputs():
        entry = {"name": name, "input": data.hex()}
        try:
            entry["canonical"] = codec.canonicalize(data).hex()
        except Exception as e:  # noqa: BLE001
            entry["error"] = _error(e)
        canon.append(entry)
    decomp = []
    for name, data in _decompose_inputs():
        entry = {"name": name, "input": data.hex()}
        try:
            kind, payload = hp.decompose(data)
            entry["kind"] = kind
            if kind == hp.KIND_SCALAR:
                entry["payload"] = payload.hex()
            elif kind == hp.KIND_LIST:
                entry["payload"] = [e.hex() for e in payload]
            else:
                entry["payload"] = [[k, e.hex()] for k, e in payload]
        except Exception as e:  # noqa: BLE001
            entry["error"] = _error(e)
        decomp.append(entry)
    opaque = []
    for data in [hp.encode_opaque("pickle", b"\x80\x04"), hp.encode_opaque("t", b""), hp.encode_opaque("x", b"y" * 300),
                 codec.encode("not opaque"), codec.encode(uuid.UUID(int=5)), bytes.fromhex("c70006"),
                 bytes.fromhex("c80001"), b""]:
        parts = hp.opaque_parts(data)
        opaque.append({"input": data.hex(), "parts": None if parts is None else [parts[0], parts[1].hex()]})
    return {
        "comment": "Generated by tests/golden/generate.py from the pure-Python twin; do not edit by hand.",
        "format": _format_name(),
        "values": values,
        "errors": errors,
        "canonicalize": canon,
        "decompose": decomp,
        "opaque_parts": opaque,
    }


def generate_trees() -> dict:
    from agentstate import codec
    from sidecar.storage import _hotpath_py as hp
    lists = []
    for n in list_lengths():
        encs = [item_encoding(i) for i in range(n)]
        nodes: list = []
        root = hp.build_list(encs, nodes)
        appends = {}
        for pattern in APPEND_PATTERNS:
            nodes2: list = []
            h = hp.list_append(None, [], nodes2)  # start from the empty list's root node
            root_node = nodes2[-1][1]
            i = step = 0
            while i < n:
                k = pattern[step % len(pattern)]
                step += 1
                h = hp.build_list(encs[i:i + k], nodes2, root_node)
                root_node = nodes2[-1][1]
                i += k
            appends[",".join(map(str, pattern))] = h.hex()
        lists.append({"length": n, "root": root.hex(), "nodes": nodes_digest(nodes), "node_count": len(nodes),
                      "appends": appends})
    maps = []
    for n in map_sizes():
        pairs = map_pairs(n)
        nodes = []
        root = hp.build_map(pairs, nodes)
        maps.append({"size": n, "root": root.hex(), "nodes": nodes_digest(nodes), "node_count": len(nodes)})
    updates = []
    for name, base, sets, deletes in map_update_cases():
        nodes = []
        root = hp.build_map(map_pairs(base), nodes)
        store = dict(nodes)
        value_nodes: list = []
        set_hashes = [(k, hp.value_node(codec.encode(v), value_nodes)) for k, v in sets]
        store.update(value_nodes)
        upd_nodes: list = []
        new_root = hp.map_update(root, set_hashes, deletes, store.__getitem__, upd_nodes)
        updates.append({"name": name, "base": base, "sets": sets, "deletes": deletes, "root": new_root.hex(),
                        "nodes": nodes_digest(upd_nodes)})
    cdc = []
    for seed, n in [("cdc-1MiB", 1 << 20), ("cdc-100KiB", 100 * 1024), ("cdc-small", 4096), ("cdc-5000", 5000),
                    ("cdc-70000", 70000)]:
        data = pseudo_random(seed, n)
        cdc.append({"seed": seed, "length": n, "cuts": hp.cdc_cut_points(data)})
    zero = bytes(200 * 1024)
    cdc.append({"seed": "zeros", "length": len(zero), "cuts": hp.cdc_cut_points(zero)})
    chunked = []
    for name, value in [("bytes 1MiB", pseudo_random("chunked-bytes", 1 << 20)),
                        ("str 100KiB", pseudo_random("chunked-str", 75 * 1024).hex()[:100 * 1024]),
                        ("bytes threshold+1", pseudo_random("t1", 32 * 1024 - 2)),
                        ("bytes at threshold", pseudo_random("t0", 32 * 1024 - 3))]:
        enc = codec.encode(value)
        nodes = []
        h = hp.value_node(enc, nodes)
        chunked.append({"name": name, "encoding_length": len(enc), "encoding_blake3": hp.hash_bytes(enc).hex(),
                        "hash": h.hex(), "nodes": nodes_digest(nodes), "node_count": len(nodes)})
    return {
        "comment": "Generated by tests/golden/generate.py from the pure-Python twin; do not edit by hand.",
        "format": _format_name(),
        "lists": lists,
        "maps": maps,
        "map_updates": updates,
        "cdc": cdc,
        "chunked_values": chunked,
        "stored": generate_stored(),
        "written": generate_written(),
    }


def stored_records(stored_node, nodes) -> list[tuple[bytes, bytes]]:
    """(id, record) pairs of built nodes as a fresh store would hold them.

    Ids are 8-byte big-endian counters from 1, given in the order the builders
    emit nodes (children first); a node already stored is skipped;
    record = hash + stored node (``stored_node`` of either implementation).
    """
    ids: dict[bytes, bytes] = {}
    out = []
    for h, node in nodes:
        if h not in ids:
            node_id = (len(ids) + 1).to_bytes(8, "big")
            out.append((node_id, h + stored_node(node, ids.__getitem__)))
            ids[h] = node_id
    return out


def stored_cases():
    """(name, builder) where builder(hp, nodes) builds a tree with hot-path module ``hp`` into ``nodes``."""
    cases = []
    for n in [0, 9, 70, 1025]:
        cases.append((f"list {n}", lambda hp, nodes, n=n: hp.build_list([item_encoding(i) for i in range(n)], nodes)))
    for n in [0, 3, 33, 1000]:
        cases.append((f"map {n}", lambda hp, nodes, n=n: hp.build_map(map_pairs(n), nodes)))
    cases.append(("chunked bytes 1MiB", lambda hp, nodes: hp.value_node(
        hp.encode(pseudo_random("chunked-bytes", 1 << 20)), nodes)))
    cases.append(("value", lambda hp, nodes: hp.value_node(item_encoding(7), nodes)))
    return cases


def generate_stored() -> list:
    from sidecar.storage import _hotpath_py as hp
    out = []
    for name, build in stored_cases():
        nodes: list = []
        build(hp, nodes)
        records = stored_records(hp.stored_node, nodes)
        out.append({"name": name, "record_count": len(records), "records": nodes_digest(records),
                    "root_id": records[-1][0].hex(), "root_record": records[-1][1].hex()})
    return out


class WriteLog:
    """A stand-in for an LMDB write transaction (``get``/``put`` with py-lmdb's positional arguments) that
    logs every put: what ``write_nodes`` of either implementation writes, call by call."""

    def __init__(self, data: dict | None = None) -> None:
        self.data = dict(data or {})
        self.log: list[tuple[bytes, bytes]] = []

    def get(self, key, default=None, db=None):
        return self.data.get((db, bytes(key)), default)

    def put(self, key, value, dupdata=True, overwrite=True, append=False, db=None):
        k = (db, bytes(key))
        if not overwrite and k in self.data:
            return False
        self.data[k] = bytes(value)
        flags = (b"o" if overwrite else b"-") + (b"a" if append else b"-")
        self.log.append((db.encode() + b":" + flags + bytes(key), bytes(value)))
        return True


WRITE_DBS = ("nodes", "hashes", "nodescope")


def written(hp, nodes, roots, txn=None, prefix=b"", seal=None, pack=None):
    """(write log, ids) of ``hp.write_nodes`` storing ``nodes`` in a fresh store (ids from 1; value nodes
    stored as they are unless ``pack``)."""
    txn = txn if txn is not None else WriteLog()
    counter = iter(range(1, 1 << 62))
    ids = hp.write_nodes(txn, WRITE_DBS, nodes, {}, roots, prefix,
                         pack or (lambda h, stored, sample: stored),
                         lambda: next(counter).to_bytes(8, "big"), seal)
    return txn.log, ids


def generate_written() -> list:
    """The puts ``write_nodes`` makes storing each stored case's tree in a fresh store (top-down walk,
    children first: ids in that order, not the builders' emit order)."""
    from sidecar.storage import _hotpath_py as hp
    out = []
    for name, build in stored_cases():
        nodes: list = []
        root = build(hp, nodes)
        log, _ = written(hp, nodes, [root])
        out.append({"name": name, "put_count": len(log), "puts": nodes_digest(log)})
    return out


def _format_name() -> str:
    from sidecar.storage import layout
    return layout.FORMAT_NAME


def _write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=True) + "\n")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")


def add_stored() -> None:
    """Add the "stored" section to trees.json, leaving every existing vector as it is."""
    path = HERE / "trees.json"
    before = path.read_text()
    data = json.loads(before)
    if "stored" in data:
        raise SystemExit("trees.json already has a stored section (regenerate everything only on a format change)")
    data["stored"] = generate_stored()
    _write(path, data)
    old = json.loads(before)
    new = json.loads(path.read_text())
    assert {k: v for k, v in new.items() if k != "stored"} == old, "an existing vector changed"


def add_written() -> None:
    """Add the "written" section to trees.json, leaving every existing vector as it is."""
    path = HERE / "trees.json"
    before = path.read_text()
    data = json.loads(before)
    if "written" in data:
        raise SystemExit("trees.json already has a written section (regenerate everything only on a format change)")
    data["written"] = generate_written()
    _write(path, data)
    old = json.loads(before)
    new = json.loads(path.read_text())
    assert {k: v for k, v in new.items() if k != "written"} == old, "an existing vector changed"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    if sys.argv[1:] == ["--add-stored"]:
        add_stored()
        return
    if sys.argv[1:] == ["--add-written"]:
        add_written()
        return
    for name, data in [("values.json", generate_values()), ("trees.json", generate_trees())]:
        _write(HERE / name, data)


if __name__ == "__main__":
    main()
