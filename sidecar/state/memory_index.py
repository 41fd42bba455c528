"""memory_index: the field index of memory items (docs/memory.md §6, the equality part), pure functions.

An item's *indexable leaves* are the scalars of its value reached through map keys only (no list), at depth
at most MAX_DEPTH: bools, numbers (not NaN) and strings. Each becomes one ``memfld`` entry
``ns NUL hash(path)[:8] type(1) value key(16) item id(8)``, every key ordered as AGENTSTATE orders its type
(docs/memory.md §3.2): numbers of every kind share one key (their big-endian float64 value, so 1, 1.0 and
Decimal("1") meet), a bool is 16 bytes of 0 or 1 (false < true), a string is its first 8 UTF-8 bytes padded
with zeros (code point order, non-decreasing) then 8 bytes of its blake3 hash (equal strings, equal keys).
The index is a pre-filter: candidates are always re-checked with the whole filter, so a shared key (two big
ints with one float64, two strings with one 8-byte prefix in a range) only costs a check. An item with more
than MAX_LEAVES leaves is listed in ``memfldx`` instead (always a candidate).

:func:`plan` finds the AGENTSTATE conditions of a filter the index can answer: a condition on a path of map
keys (no list index, no digit segment of the expression form, which may index a list) whose operand is such a
scalar (an equality, an ``IN``, or a range on a number, a string or a bool), alone or as a member of a
top-level ``All``.

FORMAT names the key format; a store whose ``meta`` holds another (``mem_fld_format``; stores before
format 2 hashed whole strings) has its entries rebuilt at start-up (``Memory.upgrade_field_index``).
"""
from __future__ import annotations

import decimal
import struct

import msgspec
from blake3 import blake3

from . import memory_filters as mf

MAX_DEPTH = 4
MAX_LEAVES = 64
FORMAT = b"2"
FORMAT_KEY = b"mem_fld_format"
_STR_PREFIX = 8
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
        raw = v.encode("utf-8", "surrogatepass")
        return T_STRING, _string_prefix(raw) + blake3(raw).digest()[:16 - _STR_PREFIX]
    return None


def _string_prefix(raw: bytes) -> bytes:
    """The ordered part of a string's key: its first UTF-8 bytes, padded with zeros (UTF-8 byte order is code
    point order; truncating and padding keep it non-decreasing)."""
    return raw[:_STR_PREFIX].ljust(_STR_PREFIX, b"\x00")


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
    satisfy: an equality with a scalar, an ``IN`` of scalars (one interval each), and ranges (``GT GTE LT
    LTE``, intersected per path and operand type: a value compares only with its own type) on numbers (the
    bounds taken inclusive at float64 precision, since the entries hold float64 keys), strings (inclusive on
    the 8-byte prefix) and bools (exact)."""
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
            t = type(c.value)
            if t is bool:  # false < true: a strict bound excludes its own value exactly
                vtype, b = T_BOOL, int(c.value)
                b = b + 1 if c.op == mf.GT else b - 1 if c.op == mf.LT else b
                lo_b, hi_b = (b, 1) if c.op in (mf.GT, mf.GTE) else (0, b)
            elif t is str:  # bounds on the ordered 8-byte prefix, inclusive
                vtype, b = T_STRING, _string_prefix(c.value.encode("utf-8", "surrogatepass"))
                lo_b, hi_b = (b, None) if c.op in (mf.GT, mf.GTE) else (None, b)
            else:
                f = _number(c.value)
                if f is None:  # NaN, null, bytes, datetimes...: compare with nothing indexed
                    continue
                vtype = T_NUMBER
                lo_b, hi_b = (f, None) if c.op in (mf.GT, mf.GTE) else (None, f)
            bounds = ranges.setdefault((tuple(c.path), vtype), [None, None])
            if lo_b is not None:
                bounds[0] = lo_b if bounds[0] is None else max(bounds[0], lo_b)
            if hi_b is not None:
                bounds[1] = hi_b if bounds[1] is None else min(bounds[1], hi_b)
    for (path, vtype), (lo, hi) in ranges.items():
        head = path_hash(path) + vtype
        if vtype == T_NUMBER:
            lo = float("-inf") if lo is None else lo
            hi = float("inf") if hi is None else hi
            out.append([] if lo > hi else _number_intervals(head, lo, hi))
        elif vtype == T_BOOL:
            lo, hi = max(0, lo), min(1, hi)
            out.append([] if lo > hi else [(head + bytes([lo]) * 16, head + bytes([hi]) * 16)])
        else:
            lo = bytes(_STR_PREFIX) if lo is None else lo
            hi = b"\xff" * _STR_PREFIX if hi is None else hi
            pad = 16 - _STR_PREFIX
            out.append([] if lo > hi else [(head + lo + bytes(pad), head + hi + b"\xff" * pad)])
    return out
