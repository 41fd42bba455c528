"""memory_index: the field index of memory items (docs/memory.md §6, the equality part), pure functions.

An item's *indexable leaves* are the scalars of its value reached through map keys only (no list), at depth
at most MAX_DEPTH: bools, numbers (not NaN) and strings. Each becomes one ``memfld`` entry
``ns NUL hash(path)[:8] type(1) value key(16) item id(8)``: numbers of every kind share one key (their float64
value, so 1, 1.0 and Decimal("1") meet), strings and bools are hashed. The index is a pre-filter: candidates
are always re-checked with the whole filter, so a shared key (two big ints with one float64) only costs a
check. An item with more than MAX_LEAVES leaves is listed in ``memfldx`` instead (always a candidate).

:func:`plan` finds the AGENTSTATE equality conditions of a filter the index can answer: a condition on a path
of map keys (no list index, no digit segment of the expression form, which may index a list) whose operand
is such a scalar, alone or as a member of a top-level ``All``.
"""
from __future__ import annotations

import decimal
import struct

import msgspec
from blake3 import blake3

from . import memory_filters as mf

MAX_DEPTH = 4
MAX_LEAVES = 64
_F64 = struct.Struct(">d")
_enc = msgspec.msgpack.Encoder()
T_BOOL, T_NUMBER, T_STRING = b"b", b"n", b"s"


def path_hash(path: tuple) -> bytes:
    return blake3(b"agentstate.v1 memfld" + _enc.encode([str(p) for p in path])).digest()[:8]


def value_key(v) -> tuple[bytes, bytes] | None:
    """(type, 16-byte key) of an indexable scalar, or None."""
    t = type(v)
    if t is bool:
        return T_BOOL, (b"\x01" if v else b"\x00") * 16
    if t is int or t is float or t is decimal.Decimal:
        if (t is float and v != v) or (t is decimal.Decimal and v.is_nan()):  # NaN equals nothing
            return None
        try:
            f = float(v)
        except (OverflowError, ValueError):
            f = float("inf") if v > 0 else float("-inf")
        if f == 0.0:
            f = 0.0  # -0.0 == 0.0
        return T_NUMBER, _F64.pack(f) + bytes(8)
    if t is str:
        return T_STRING, blake3(v.encode("utf-8", "surrogatepass")).digest()[:16]
    return None


def leaves(value) -> list[tuple[tuple, bytes, bytes]] | None:
    """(path, type, key) of every indexable leaf, or None when there are more than MAX_LEAVES."""
    out: list = []
    stack = [((), value)]
    while stack:
        path, v = stack.pop()
        if type(v) is dict:
            if len(path) < MAX_DEPTH:
                for k, x in v.items():
                    stack.append((path + (k,), x))
            continue
        if not path:
            continue
        vk = value_key(v)
        if vk is not None:
            out.append((path, vk[0], vk[1]))
            if len(out) > MAX_LEAVES:
                return None
    return out


def entry_prefix(ns: str, path: tuple, vtype: bytes, vkey: bytes) -> bytes:
    return ns.encode() + b"\x00" + path_hash(path) + vtype + vkey


def _number(v) -> float | None:
    """The float64 a number operand's entries are keyed by (as :func:`value_key`), None when not a number."""
    vk = value_key(v)
    if vk is None or vk[0] != T_NUMBER:
        return None
    return _F64.unpack(vk[1][:8])[0]


def _number_intervals(head: bytes, lo: float, hi: float) -> list[tuple[bytes, bytes]]:
    """Key intervals (inclusive, compared on their length) holding the numbers in [lo, hi]. A key is the
    big-endian float64: non-negative numbers sort upwards from 0x00.., negative ones downwards from 0x80..,
    so a range is at most two intervals."""
    out = []
    if hi >= 0.0:
        out.append((head + _F64.pack(max(lo, 0.0)), head + _F64.pack(hi)))
    if lo < 0.0:
        out.append((head + _F64.pack(hi if hi < 0.0 else -0.0), head + _F64.pack(lo)))
    return out


def _required(node) -> list:
    """The conditions every match must satisfy: the node itself or the members of (nested) top-level Alls."""
    if type(node) is mf.All:
        return [c for child in node.children for c in _required(child)]
    return [node]


def _plain_path(c) -> bool:
    return (type(c) is mf.Cond and c.mode == mf.AGENTSTATE and bool(c.path) and len(c.path) <= MAX_DEPTH
            and all(type(seg) is str for seg in c.path))  # list indexes and digit segments are not indexed


def plan(node) -> list[list[tuple[bytes, bytes]]]:
    """Ways the index can answer ``node``: each a list of key intervals (after ``ns NUL``; inclusive, compared
    on their length) whose entries hold every item that may match. From the conditions every match must
    satisfy: an equality with a scalar, an ``IN`` of scalars (one interval each), and ranges on numbers
    (``GT GTE LT LTE``, intersected per path; the bounds taken inclusive at float64 precision, since the
    entries hold float64 keys)."""
    if node is None:
        return []
    out = []
    ranges: dict[tuple, list] = {}
    for c in _required(node):
        if not _plain_path(c):
            continue
        head = path_hash(tuple(c.path))
        if c.op == mf.EQ:
            vk = value_key(c.value)
            if vk is not None:
                key = head + vk[0] + vk[1]
                out.append([(key, key)])
        elif c.op == mf.IN:
            keys = []
            for x in c.value:
                vk = value_key(x)
                if vk is None:  # null (matches a missing field), NaN, a list...: not answerable
                    keys = None
                    break
                keys.append(head + vk[0] + vk[1])
            if keys is not None:
                out.append([(k, k) for k in sorted(set(keys))])
        elif c.op in (mf.GT, mf.GTE, mf.LT, mf.LTE):
            f = _number(c.value)
            if f is None:
                continue
            bounds = ranges.setdefault(tuple(c.path), [float("-inf"), float("inf")])
            if c.op in (mf.GT, mf.GTE):
                bounds[0] = max(bounds[0], f)
            else:
                bounds[1] = min(bounds[1], f)
    for path, (lo, hi) in ranges.items():
        out.append([] if lo > hi else _number_intervals(path_hash(path) + T_NUMBER, lo, hi))
    return out
