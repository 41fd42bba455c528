"""_reads_py: pure-Python twin of the compiled read path (``_native/_reads_c.pyx``).

Import through :mod:`sidecar.storage.reads`, never directly. Both twins give byte-identical
results (tests/test_reads.py).

``list_wire(record, fetch)`` (``list_wire_parts``: the same in parts) is the protobuf wire encoding of the ``agentstate.v1.ListValue``
message of a stored list (``record``: its root record; ``fetch``: id -> record), exactly what
``ListValue.SerializeToString()`` gives for a message built item by item with ``wire.set_value``:
field 1 (``items``) once per item, each a ``Value`` whose ``msgpack`` (field 1) is the item's
encoding, or whose ``opaque`` (field 2: ``type`` 1, ``data`` 2, empty fields left out) are the parts
of an opaque encoding (``hotpath.opaque_parts``). Records are checked as ``stored_list_ids`` checks
them (same CorruptNode messages).

Subtrees are cached by node hash (storage/wirecache.py): every leaf, and every perfect subtree the
root refers to, unless it holds a sealed or chunked item.
"""
from __future__ import annotations

from typing import Callable

from . import hotpath as hp
from . import wirecache

NATIVE = False

H = hp.HASH_SIZE
ID = hp.ID_SIZE
LEAF_ITEMS = 8
CorruptNode = hp.CorruptNode
Fetch = Callable[[bytes], "bytes | None"]

_EXT_HEADS = frozenset((0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8))


def _get(fetch: Fetch, key: bytes) -> bytes:
    node = fetch(key)
    if node is None:
        raise CorruptNode(f"missing node {bytes(key).hex()}")
    return bytes(node)


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, data: bytes) -> bytes:
    return bytes((tag,)) + varint(len(data)) + data


def value_wire(encoding: bytes) -> bytes:
    """The wire bytes of a ``Value`` message filled by ``wire.set_value(v, encoding)``."""
    parts = hp.opaque_parts(encoding) if encoding and encoding[0] in _EXT_HEADS else None
    if parts is None:
        return _field(0x0A, encoding)
    type_, data = parts
    t = type_.encode()
    inner = (_field(0x0A, t) if t else b"") + (_field(0x12, data) if data else b"")
    return _field(0x12, inner)


def item_wire(rec: bytes, fetch: Fetch) -> tuple[bytes, bool]:
    """(``items`` entry of one item's record, whether it may be cached)."""
    if len(rec) <= H:
        raise CorruptNode("value record too short")
    tag = rec[H]
    return _field(0x0A, value_wire(hp.stored_encoding(rec, fetch))), tag == hp.TAG_VALUE or tag == hp.TAG_PACKED


def _subtree(node_id: bytes, level: int, fetch: Fetch, peak: bool) -> tuple[bytes, bool]:
    rec = _get(fetch, node_id)
    base = H + 1
    if len(rec) <= H:
        raise CorruptNode("list node record too short")
    if level == 0:
        if rec[H] != hp.TAG_LEAF or len(rec) != base + LEAF_ITEMS * ID:
            raise CorruptNode("bad list leaf")
    elif rec[H] != hp.TAG_INNER or len(rec) != base + 2 * ID:
        raise CorruptNode("bad list inner node")
    h = rec[:H]
    hit = wirecache.cache.get(h)
    if hit is not None:
        return hit, True
    if level == 0:
        got = [item_wire(_get(fetch, rec[base + i * ID:base + (i + 1) * ID]), fetch) for i in range(LEAF_ITEMS)]
    else:
        got = [_subtree(rec[base:base + ID], level - 1, fetch, False),
               _subtree(rec[base + ID:base + 2 * ID], level - 1, fetch, False)]
    wire = b"".join(w for w, _ in got)
    ok = all(c for _, c in got)
    if ok and (level == 0 or peak):
        wirecache.remember(h, wire)
    return wire, ok


def list_wire(record, fetch: Fetch) -> bytes:
    """The ``ListValue`` wire bytes of the list whose root record is ``record``."""
    parts = list_wire_parts(record, fetch)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def list_wire_parts(record, fetch: Fetch) -> list[bytes]:
    """:func:`list_wire` in parts (a list whose ``b"".join`` is that): one bytes object per peak of the root
    (the cached one itself when there is one), then the tail items' entries (one more, when there are any);
    a caller that frames the list (api/checkpoints.get_wire) joins them once, with its own headers."""
    record = bytes(record)
    if len(record) <= H:
        raise CorruptNode("list root record too short")
    if record[H] != hp.TAG_LIST:
        raise CorruptNode("not a list root")
    n = int.from_bytes(record[H + 1:H + 9], "big")
    m = n // LEAF_ITEMS
    pos = H + 9
    if len(record) != pos + (bin(m).count("1") + n % LEAF_ITEMS) * ID:
        raise CorruptNode("list root length mismatch")
    parts = []
    for k in range(m.bit_length() - 1, -1, -1):
        if m >> k & 1:
            parts.append(_subtree(record[pos:pos + ID], k, fetch, True)[0])
            pos += ID
    if n % LEAF_ITEMS:
        parts.append(b"".join(item_wire(_get(fetch, record[pos + i * ID:pos + (i + 1) * ID]), fetch)[0]
                              for i in range(n % LEAF_ITEMS)))
    return parts


def items_wire(encodings) -> bytes:
    """The ``ListValue`` wire bytes of a list of the item encodings ``encodings``: what :func:`list_wire`
    gives for a stored list of those items (state/schemas.py builds a list migrated on read with it)."""
    return b"".join(_field(0x0A, value_wire(bytes(e))) for e in encodings)
