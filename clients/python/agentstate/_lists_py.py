"""_lists_py: pure-Python twin of ``_native/_lists_c.pyx`` (the client's decoding of long list values).

Import through :mod:`agentstate.values` (``_lists``), never directly; both twins give the same answers
(tests/test_client_lists.py).

``msgpack_array(wire)``: given the wire bytes of a ``ListValue`` message (``list.SerializeToString()``),
the MessagePack encoding of the array of its items when every item is a ``Value`` holding only
``msgpack`` (field 1) and each of those is exactly one MessagePack object (checked by its structure:
headers and lengths, nesting at most ``MAX_DEPTH``); otherwise None. Decoding that array gives the list
``[codec.decode(item.msgpack) for item in items]`` gives, in one decoder call instead of one per item.
Anything else (an opaque, list or map item, an unknown field, a malformed or empty payload) is None,
and the caller decodes item by item as before, so its errors are the same. ``msgpack_array_into(wire,
out)``: the same array written at the start of the bytearray ``out`` (grown when too short), its length
returned (-1 for None).
"""
from __future__ import annotations

NATIVE = False
MAX_DEPTH = 128


def _varint(b: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, next position); (-1, pos) when malformed or longer than 9 bytes."""
    n = shift = 0
    while pos < end and shift < 63:
        c = b[pos]
        pos += 1
        n |= (c & 0x7F) << shift
        if c < 0x80:
            return n, pos
        shift += 7
    return -1, pos


_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
          0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
_SIZED = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),
          0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)}
_COUNTED = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


def skip(b: bytes, pos: int, end: int, depth: int = 0) -> int:
    """The end of the one MessagePack object at ``pos`` (by structure only), or -1."""
    if pos >= end or depth > MAX_DEPTH:
        return -1
    h = b[pos]
    pos += 1
    if h <= 0x7F or h >= 0xE0:
        return pos
    if 0xA0 <= h <= 0xBF:
        pos += h & 0x1F
        return pos if pos <= end else -1
    if 0x80 <= h <= 0x9F:
        count = (h & 0x0F) * 2 if h <= 0x8F else h & 0x0F
    elif h in _FIXED:
        pos += _FIXED[h]
        return pos if pos <= end else -1
    elif h in _SIZED:
        k, extra = _SIZED[h]
        if pos + k > end:
            return -1
        pos += k + extra + int.from_bytes(b[pos:pos + k], "big")
        return pos if pos <= end else -1
    elif h in _COUNTED:
        k, per = _COUNTED[h]
        if pos + k > end:
            return -1
        count = int.from_bytes(b[pos:pos + k], "big") * per
        pos += k
    else:  # 0xC1: never used
        return -1
    for _ in range(count):
        pos = skip(b, pos, end, depth + 1)
        if pos < 0:
            return -1
    return pos


def array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def msgpack_array(wire) -> bytes | None:
    """The MessagePack array of a ListValue's msgpack items (see the module doc), or None."""
    b = bytes(wire)
    end = len(b)
    pos = 0
    parts = []
    while pos < end:
        if b[pos] != 0x0A:  # items (field 1, length-delimited)
            return None
        vlen, pos = _varint(b, pos + 1, end)
        if vlen < 0 or pos + vlen > end:
            return None
        vend = pos + vlen
        if pos >= vend or b[pos] != 0x0A:  # Value.msgpack (field 1), and nothing else
            return None
        elen, p = _varint(b, pos + 1, vend)
        if elen <= 0 or p + elen != vend:
            return None
        if skip(b, p, vend) != vend:
            return None
        parts.append(b[p:vend])
        pos = vend
    return array_header(len(parts)) + b"".join(parts)


def msgpack_array_into(wire, out: bytearray) -> int:
    """:func:`msgpack_array` written at the start of ``out`` (a bytearray, grown when too short, never
    shrunk): its length, or -1 where msgpack_array is None (``out`` then unchanged)."""
    if type(out) is not bytearray:
        raise TypeError("out must be a bytearray")
    array = msgpack_array(wire)
    if array is None:
        return -1
    if len(out) < len(array):
        out.extend(bytes(len(array) - len(out)))
    out[:len(array)] = array
    return len(array)
