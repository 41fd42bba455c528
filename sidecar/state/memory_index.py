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


def _indexable(c) -> tuple[tuple, bytes, bytes] | None:
    if type(c) is not mf.Cond or c.op != mf.EQ or c.mode != mf.AGENTSTATE or not c.path or len(c.path) > MAX_DEPTH:
        return None
    if any(type(seg) is not str for seg in c.path):  # list indexes and digit segments (mf.Digits) are not indexed
        return None
    vk = value_key(c.value)
    return None if vk is None else (tuple(c.path), vk[0], vk[1])


def plan(node) -> list[tuple[tuple, bytes, bytes]]:
    """The equality conditions of ``node`` that every match must satisfy and the index can answer."""
    if node is None:
        return []
    one = _indexable(node)
    if one is not None:
        return [one]
    if type(node) is mf.All:
        return [x for x in (_indexable(c) for c in node.children) if x is not None]
    return []
