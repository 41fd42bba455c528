"""_migrate_py: list items migrated on read in their encoding (the pure-Python twin of ``_native/_migrate_c.pyx``).

A read of a value stored at an older schema version runs the steps of a ``map_items`` over each stored list
item (state/schemas.py). For the common steps on an item's own fields (rename, drop, add, convert) this module
applies them to the item's MessagePack bytes directly, without building Python values: the item's map entries
are sliced in place, the steps change the entry list, and the map is written again with its keys sorted.

What comes out must be exactly the bytes state/schemas.py's engine gives (msgspec decode, the steps, msgspec
``Encoder(order="sorted")``). So an item is taken only when its bytes are in the very form msgspec writes for
what it decodes to ("normal": shortest ints and lengths, float64, strict UTF-8, map keys strings in strictly
increasing order, no timestamp extension), and a step is applied only when its result is certain; in every
other case (a value that does not convert, a rename onto a field that exists, an item that is not a map...)
:func:`apply_item` answers None and the caller runs the engine on that item, which gives the result or the
error as before. tests/test_schemas_migrate.py checks both twins against the engine on random items and
plans, and the twins against each other.

A *program* (:func:`program`) is built once from the steps as plain tuples:

* ``("rename", key, to)``, ``("drop", key)``: keys as UTF-8 bytes;
* ``("add", key, default)``: ``default`` the canonical encoding of the default value (None: nil);
* ``("convert", key, type)``: ``key`` None converts the item itself; ``type`` a ValueType number.

:func:`program` answers None for steps it cannot run (the caller keeps the engine for the whole list).
"""
from __future__ import annotations

import struct

from . import hotpath as hp
from .encryption import TAG_SEALED

NATIVE = False

T_STRING, T_INT, T_FLOAT, T_BOOL, T_LIST = 1, 2, 3, 4, 5
MAX_DEPTH = 64  # deeper values go the engine's way
_OPS = {"rename": 0, "drop": 1, "add": 2, "convert": 3}
_PLAIN = (hp.TAG_VALUE, hp.TAG_PACKED)


# ----------------------------------------------------------------- the normal form

def _utf8_ok(b: bytes) -> bool:
    try:
        b.decode("utf-8")  # strict: no surrogates, no overlong forms, nothing past U+10FFFF
    except UnicodeDecodeError:
        return False
    return True


def _head(b: bytes, pos: int, end: int):
    """(kind, length or value, start of the payload) of the item at ``pos``, or None when it is not in
    msgspec's form. kind: 'i' int (value), 'f' float64, 'n' nil, 'b' bool (value), 's' str, 'x' bin, 'e' ext
    (length; value: payload starts after the type byte), 'a' array, 'm' map (counts)."""
    if pos >= end:
        return None
    t = b[pos]
    if t <= 0x7F:
        return "i", t, pos + 1
    if t >= 0xE0:
        return "i", t - 0x100, pos + 1
    if 0x80 <= t <= 0x8F:
        return "m", t & 0x0F, pos + 1
    if 0x90 <= t <= 0x9F:
        return "a", t & 0x0F, pos + 1
    if 0xA0 <= t <= 0xBF:
        return "s", t & 0x1F, pos + 1
    if t == 0xC0:
        return "n", None, pos + 1
    if t in (0xC2, 0xC3):
        return "b", t == 0xC3, pos + 1

    def num(n: int, signed: bool = False):
        if pos + 1 + n > end:
            return None
        return int.from_bytes(b[pos + 1:pos + 1 + n], "big", signed=signed)

    if t in (0xCC, 0xCD, 0xCE, 0xCF):  # uint 8..64: only above the next smaller form
        n = 1 << (t - 0xCC)
        v = num(n)
        if v is None or v < (128 if n == 1 else 1 << (4 * n)):
            return None
        return "i", v, pos + 1 + n
    if t in (0xD0, 0xD1, 0xD2, 0xD3):  # int 8..64: negative, below the next smaller form
        n = 1 << (t - 0xD0)
        v = num(n, True)
        if v is None or v >= (-32 if n == 1 else -(1 << (4 * n - 1))):
            return None
        return "i", v, pos + 1 + n
    if t == 0xCB:
        if pos + 9 > end:
            return None
        return "f", None, pos + 9
    if t in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6, 0xDC, 0xDD, 0xDE, 0xDF):
        kind, w, low = {0xD9: ("s", 1, 32), 0xDA: ("s", 2, 256), 0xDB: ("s", 4, 65536),
                        0xC4: ("x", 1, 0), 0xC5: ("x", 2, 256), 0xC6: ("x", 4, 65536),
                        0xDC: ("a", 2, 16), 0xDD: ("a", 4, 65536),
                        0xDE: ("m", 2, 16), 0xDF: ("m", 4, 65536)}[t]
        n = num(w)
        if n is None or n < low:
            return None
        return kind, n, pos + 1 + w
    if t in (0xD4, 0xD5, 0xD6, 0xD7, 0xD8):  # fixext 1, 2, 4, 8, 16
        return "e", 1 << (t - 0xD4), pos + 1
    if t in (0xC7, 0xC8, 0xC9):  # ext 8/16/32: only lengths fixext does not hold, above the smaller form
        w = 1 << (t - 0xC7)
        n = num(w)
        if n is None or n < (0 if w == 1 else 1 << (8 * (w // 2))) or n in (1, 2, 4, 8, 16):
            return None
        return "e", n, pos + 1 + w
    return None  # 0xC1, float32 (0xCA)


def _skip(b: bytes, pos: int, end: int, depth: int) -> int:
    """The end of the normal value at ``pos``, or -1 when it is not normal."""
    h = _head(b, pos, end)
    if h is None or depth > MAX_DEPTH:
        return -1
    kind, n, p = h
    if kind in ("i", "n", "b"):
        return p
    if kind == "f":
        return p
    if kind == "s":
        if p + n > end or not _utf8_ok(b[p:p + n]):
            return -1
        return p + n
    if kind == "x":
        return p + n if p + n <= end else -1
    if kind == "e":
        if p + 1 + n > end or b[p] == 0xFF:  # ext -1 is msgspec's timestamp: decoded as a datetime
            return -1
        return p + 1 + n
    if kind == "a":
        for _ in range(n):
            p = _skip(b, p, end, depth + 1)
            if p < 0:
                return -1
        return p
    prev = None  # map: string keys, strictly increasing
    for _ in range(n):
        k = _key(b, p, end)
        if k is None:
            return -1
        key, p = k
        if prev is not None and key <= prev:
            return -1
        prev = key
        p = _skip(b, p, end, depth + 1)
        if p < 0:
            return -1
    return p


def _key(b: bytes, pos: int, end: int):
    """(the UTF-8 bytes of the normal str at ``pos``, its end), or None."""
    h = _head(b, pos, end)
    if h is None or h[0] != "s":
        return None
    _, n, p = h
    if p + n > end or not _utf8_ok(b[p:p + n]):
        return None
    return b[p:p + n], p + n


def is_normal(encoding: bytes) -> bool:
    """Whether ``encoding`` is one value in msgspec's own form (what :func:`apply_item` takes)."""
    return _skip(encoding, 0, len(encoding), 0) == len(encoding)


# ----------------------------------------------------------------- writing

def _str(key: bytes) -> bytes:
    n = len(key)
    if n < 32:
        return bytes((0xA0 | n,)) + key
    if n < 256:
        return b"\xd9" + bytes((n,)) + key
    if n < 65536:
        return b"\xda" + n.to_bytes(2, "big") + key
    return b"\xdb" + n.to_bytes(4, "big") + key


def _map_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x80 | n,))
    if n < 65536:
        return b"\xde" + n.to_bytes(2, "big")
    return b"\xdf" + n.to_bytes(4, "big")


def _int(v: int) -> bytes:
    if v < 0:
        if v >= -32:
            return bytes((v + 0x100,))
        if v >= -128:
            return b"\xd0" + v.to_bytes(1, "big", signed=True)
        if v >= -32768:
            return b"\xd1" + v.to_bytes(2, "big", signed=True)
        if v >= -(1 << 31):
            return b"\xd2" + v.to_bytes(4, "big", signed=True)
        return b"\xd3" + v.to_bytes(8, "big", signed=True)
    if v < 128:
        return bytes((v,))
    if v < 256:
        return b"\xcc" + bytes((v,))
    if v < 65536:
        return b"\xcd" + v.to_bytes(2, "big")
    if v < 1 << 32:
        return b"\xce" + v.to_bytes(4, "big")
    return b"\xcf" + v.to_bytes(8, "big")


# ----------------------------------------------------------------- conversions

_DIGITS = frozenset(b"0123456789")


def _convert(value: bytes, to: int) -> bytes | None:
    """The encoding of normal ``value`` converted to ValueType ``to`` as state/schemas._convert does, or
    None when not certain (including every conversion that fails there)."""
    kind, n, p = _head(value, 0, len(value))
    if kind == "n":
        return value
    if to == T_LIST:
        return value if kind == "a" else b"\x91" + value
    if to == T_STRING:
        if kind == "s":
            return value
        if kind == "b":
            return b"\xa4true" if n else b"\xa5false"
        if kind == "i":
            return _str(str(n).encode())
        return None
    if to == T_INT:
        if kind == "i":
            return value
        if kind == "b":
            return b"\x01" if n else b"\x00"
        if kind == "s":
            text = value[p:p + n]
            digits = text[1:] if text[:1] == b"-" else text
            if not digits or not _DIGITS.issuperset(digits) or len(digits.lstrip(b"0")) > 18:
                return None
            return _int(int(text))
        return None
    if to == T_FLOAT:
        if kind == "f":
            return value
        if kind == "i" and -(1 << 63) <= n < (1 << 63):
            return b"\xcb" + struct.pack(">d", float(n))
        return None
    if to == T_BOOL:
        if kind == "b":
            return value
        if kind == "i" and n in (0, 1):
            return b"\xc3" if n else b"\xc2"
        if kind == "s" and value[p:p + n] in (b"true", b"false"):
            return b"\xc3" if value[p:p + n] == b"true" else b"\xc2"
        return None
    return None


# ----------------------------------------------------------------- programs

def program(steps) -> tuple | None:
    """The steps (tuples, see the module doc) as a program for :func:`apply_item`, or None when one of them
    is not one this module runs."""
    out = []
    for st in steps:
        op = _OPS.get(st[0]) if type(st) is tuple and st else None
        if op is None:
            return None
        if op in (0, 1, 2) and (type(st[1]) is not bytes or not _utf8_ok(st[1])):
            return None
        if op == 0:
            if len(st) != 3 or type(st[2]) is not bytes or not _utf8_ok(st[2]):
                return None
            out.append((0, st[1], st[2]))
        elif op == 1:
            out.append((1, st[1], None))
        elif op == 2:
            default = b"\xc0" if st[2] is None else st[2]
            if type(default) is not bytes or not is_normal(default):
                return None
            out.append((2, st[1], default))
        else:
            key, to = st[1], st[2]
            if key is not None and (type(key) is not bytes or not _utf8_ok(key)):
                return None
            if to not in (T_STRING, T_INT, T_FLOAT, T_BOOL, T_LIST):
                return None
            out.append((3 if key is not None else 4, key, to))
    return tuple(out)


def _entries(b: bytes) -> list | None:
    """[key, value encoding] of normal map ``b``, or None when ``b`` is not a normal map."""
    h = _head(b, 0, len(b))
    if h is None or h[0] != "m":
        return None
    _, n, p = h
    end = len(b)
    out, prev = [], None
    for _ in range(n):
        k = _key(b, p, end)
        if k is None:
            return None
        key, p = k
        if prev is not None and key <= prev:
            return None
        prev = key
        q = _skip(b, p, end, 1)
        if q < 0:
            return None
        out.append([key, b[p:q]])
        p = q
    return out if p == end else None


def apply_item(prog: tuple, encoding: bytes) -> bytes | None:
    """``encoding`` (one list item) through ``prog``: the canonical encoding of the migrated item, or None
    when the engine has to say (see the module doc)."""
    encoding = bytes(encoding)
    item: bytes | None = encoding
    entries = None  # the item as map entries once a field step ran
    if not is_normal(encoding):
        return None
    for op, key, arg in prog:
        if op == 4:  # convert the item itself
            if entries is not None:
                return None  # a map does not convert (the engine says why); a list of it: rare, the engine's
            item = _convert(item, arg)
            if item is None:
                return None
            continue
        if entries is None:
            entries = _entries(item)
            if entries is None:
                return None
        found = next((e for e in entries if e[0] == key), None)
        if op == 0:
            if found is None:
                continue
            if any(e[0] == arg for e in entries):
                return None
            found[0] = arg
        elif op == 1:
            if found is not None:
                entries.remove(found)
        elif op == 2:
            if found is None:
                entries.append([key, arg])
        else:
            if found is not None:
                v = _convert(found[1], arg)
                if v is None:
                    return None
                found[1] = v
    if entries is None:
        return item
    entries.sort(key=lambda e: e[0])
    return _map_header(len(entries)) + b"".join(_str(k) + v for k, v in entries)


def migrate_list(prog: tuple, record: bytes, fetch, cache: dict, prefix: bytes, fallback) -> tuple[list, list, list]:
    """The items of stored list ``record`` through ``prog``: (encodings, item hashes, fresh). An item whose
    ``prefix`` + stored hash is in ``cache`` (-> (encoding, hash)) is taken from it; the others are migrated
    here, an item :func:`apply_item` leaves to the engine by ``fallback(index, stored encoding)`` (its
    encoding, or it raises), in list order; ``fresh`` holds (key, (encoding, hash)) of those, to be cached."""
    return migrate_items(prog, hp.stored_list_ids(record, fetch), fetch, cache, prefix, fallback)[:3]


def migrate_items(prog: tuple, ids, fetch, cache: dict, prefix: bytes, fallback, start: int = 0
                  ) -> tuple[list, list, list, bool]:
    """As :func:`migrate_list` for the items whose node ids are ``ids`` (the first at index ``start`` of its
    list, the index ``fallback`` is given), and whether every item's record is a plain or packed value node
    (none sealed or chunked: what storage/wirecache.py takes as a subtree that may be cached)."""
    encs, hashes, fresh = [], [], []
    plain = True
    for n, node_id in enumerate(ids, start):
        rec = fetch(node_id)
        if rec is None:
            raise hp.CorruptNode(f"missing node {bytes(node_id).hex()}")
        if len(rec) <= hp.HASH_SIZE or rec[hp.HASH_SIZE] not in _PLAIN:
            plain = False
        # a sealed record is opened on every read: its migration is neither taken from the cache nor kept
        # (a cached one would still be read after the namespace's key is removed: crypto-shredding)
        sealed = len(rec) > hp.HASH_SIZE and rec[hp.HASH_SIZE] == TAG_SEALED
        key = prefix + bytes(rec[:hp.HASH_SIZE])
        hit = None if sealed else cache.get(key)
        if hit is None:
            stored = hp.stored_encoding(rec, fetch)
            enc = apply_item(prog, stored)
            if enc is None:
                enc = fallback(n, stored)
            hit = (enc, hp.value_node(enc, []))
            if not sealed:
                fresh.append((key, hit))
        encs.append(hit[0])
        hashes.append(hit[1])
    return encs, hashes, fresh, plain
