"""_hotpath_py: pure-Python twin of the compiled write path (``_native/_hotpath_c.pyx``).

Both modules expose the same functions and give byte-identical results
(golden vectors in tests/golden/ prove it). Import them through
:mod:`sidecar.storage.hotpath`, never directly.

Node formats (docs/storage.md). Every node is a blob addressed by the blake3
hash of its bytes; the first byte says what it is:

``v`` + encoding                          a value stored whole
``c`` + bytes                             one content-defined chunk of a large encoding
``C`` + u64 length + u32 n + n hashes     a large encoding cut into chunks
``L`` + u64 n + peaks + tail              list root (see below)
``l`` + 8 hashes                          list leaf: 8 consecutive items
``n`` + 2 hashes                          list inner node: two equal perfect subtrees
``M`` + u32 n + n × (u16 klen, key, hash) map leaf, keys sorted by bytes
``N`` + u64 n + u16 bitmap + hashes       map inner node, one child per key-hash nibble

A list of n items is cut into m = n // 8 full leaves plus a tail of n % 8
items. The leaves form a Merkle mountain range: one perfect binary tree of
2**k leaves for each bit k set in m, largest first (the "peaks"). The root
holds n, the peak hashes and the tail item hashes, so appending needs only
the old root: O(k + log n) new bytes, never the whole list.

A map with at most 32 entries is one leaf; a bigger one is split 16 ways by
the next nibble of blake3(key) (a hash trie), so one key's change rewrites
one path. Both shapes depend only on the content: a value sent whole and the
same value built by deltas get the same root.
"""
from __future__ import annotations

from typing import Callable, Iterable

import msgspec
from blake3 import blake3

from agentstate import codec as _codec

from .. import errors as _errors
from .. import limits as _limits
from . import compression as _compression
from . import encryption as _encryption

NATIVE = False

HASH_SIZE = 32
LEAF_ITEMS = 8
MAP_LEAF_MAX = 32
#: Encodings longer than this are cut by content-defined chunking.
CHUNK_THRESHOLD = 32 * 1024
CDC_MIN = 4 * 1024
CDC_AVG = 16 * 1024
CDC_MAX = 64 * 1024
_M64 = (1 << 64) - 1
#: Stricter mask before the average size, looser after it (normalised chunking).
CDC_MASK_SMALL = ((1 << 16) - 1) << 48
CDC_MASK_LARGE = ((1 << 12) - 1) << 52

KIND_SCALAR = 0
KIND_LIST = 1
KIND_MAP = 2

TAG_VALUE = 0x76  # v
TAG_CHUNK = 0x63  # c
TAG_CHUNKED = 0x43  # C
TAG_LIST = 0x4C  # L
TAG_LEAF = 0x6C  # l
TAG_INNER = 0x6E  # n
TAG_MAP = 0x4D  # M
TAG_MAP_INNER = 0x4E  # N
#: Stored form only: a value node kept compressed (sidecar/storage/compression.py owns the format).
TAG_PACKED = _compression.TAG_PACKED  # z
_PACKED = bytes((TAG_PACKED,))
#: Stored form only: a value node of an encrypted namespace, sealed (sidecar/storage/encryption.py).
TAG_SEALED = _encryption.TAG_SEALED  # e
_SEALED_B = bytes((TAG_SEALED,))

GEAR = tuple(
    int.from_bytes(blake3(b"agentstate.v1 gear" + bytes((i,))).digest()[:8], "little") for i in range(256)
)

UnsupportedValue = _codec.UnsupportedValue
canonicalize = _codec.canonicalize
#: Python objects -> canonical bytes (the compiled module has its own).
encode = _codec.encode
normalize = _codec.normalize
_encoder = msgspec.msgpack.Encoder()
_raw_decoder = msgspec.msgpack.Decoder(ext_hook=msgspec.msgpack.Ext)

Nodes = list  # list[tuple[bytes, bytes]]: (hash, node bytes)
Fetch = Callable[[bytes], bytes]


class CorruptNode(Exception):
    """A stored node does not parse (the store is damaged)."""


def _get(fetch: Fetch, key: bytes) -> bytes:
    """``fetch(key)``; a missing node (None) is a CorruptNode, so a plain ``txn.get`` can be the fetch."""
    node = fetch(key)
    if node is None:
        raise CorruptNode(f"missing node {bytes(key).hex()}")
    return node


def hash_bytes(data: bytes) -> bytes:
    return blake3(data).digest()


# ------------------------------------------------------------------ values

def decompose(data: bytes) -> tuple[int, object]:
    """Split an encoded value into what the trees store.

    Returns (KIND_LIST, [item encodings]), (KIND_MAP, [(key, value encoding)]
    sorted by key bytes) or (KIND_SCALAR, canonical encoding). Raises
    UnsupportedValue.
    """
    try:
        value = _raw_decoder.decode(data)
    except RecursionError:
        raise UnsupportedValue(f"nested deeper than {_codec.MAX_DEPTH}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # msgspec raises the latter for bad UTF-8
        raise UnsupportedValue(_codec.decode_failure(e)) from None
    t = type(value)
    if t is list:
        out = []
        for i, item in enumerate(value):
            try:
                out.append(_encoder.encode(_codec.normalize(item, 1)))
            except UnsupportedValue as e:
                raise e.under(f"[{i}]") from None
        return KIND_LIST, out
    if t is dict:
        pairs = []
        for key in value:
            if type(key) is not str:
                raise UnsupportedValue(f"map key {key!r} is not a string")
        for key in sorted(value):
            try:
                pairs.append((key, _encoder.encode(_codec.normalize(value[key], 1))))
            except UnsupportedValue as e:
                raise e.under(f"[{key!r}]") from None
        return KIND_MAP, pairs
    return KIND_SCALAR, _encoder.encode(_codec.normalize(value))


def encode_opaque(type_: str, data: bytes) -> bytes:
    """Canonical encoding of an opaque value (extension 6)."""
    return _encoder.encode(msgspec.msgpack.Ext(_codec.EXT_OPAQUE, _codec.opaque_payload(type_, data)))


def opaque_parts(encoding: bytes) -> tuple[str, bytes] | None:
    """Return (type, data) when ``encoding`` is an opaque value, else None."""
    n = len(encoding)
    if n < 3:
        return None
    head = encoding[0]
    if head == 0xC7:  # ext 8
        size, code, start = encoding[1], encoding[2], 3
    elif head == 0xC8 and n >= 4:  # ext 16
        size, code, start = int.from_bytes(encoding[1:3], "big"), encoding[3], 4
    elif head == 0xC9 and n >= 6:  # ext 32
        size, code, start = int.from_bytes(encoding[1:5], "big"), encoding[5], 6
    elif 0xD4 <= head <= 0xD8:  # fixext 1..16
        size, code, start = 1 << (head - 0xD4), encoding[1], 2
    else:
        return None
    if code != _codec.EXT_OPAQUE or start + size != n or size == 0:
        return None
    tlen = encoding[start]
    return encoding[start + 1:start + 1 + tlen].decode(), encoding[start + 1 + tlen:]


# ------------------------------------------------------------------ chunking

def cdc_cut_points(data: bytes) -> list[int]:
    """End offsets of the content-defined chunks of ``data`` (FastCDC-style gear hash)."""
    n = len(data)
    cuts = []
    start = 0
    gear = GEAR
    while start < n:
        remaining = n - start
        if remaining <= CDC_MIN:
            cuts.append(n)
            break
        end = min(remaining, CDC_MAX)
        normal = min(end, CDC_AVG)
        h = 0
        i = CDC_MIN
        cut = end
        while i < normal:
            h = ((h << 1) + gear[data[start + i]]) & _M64
            i += 1
            if not h & CDC_MASK_SMALL:
                cut = i
                break
        else:
            while i < end:
                h = ((h << 1) + gear[data[start + i]]) & _M64
                i += 1
                if not h & CDC_MASK_LARGE:
                    cut = i
                    break
        start += cut
        cuts.append(start)
    return cuts


def value_node(encoding: bytes, nodes: Nodes) -> bytes:
    """Append the node(s) storing ``encoding`` to ``nodes``; return the value's hash."""
    if len(encoding) <= CHUNK_THRESHOLD:
        node = b"v" + encoding
        h = hash_bytes(node)
        nodes.append((h, node))
        return h
    hashes = []
    prev = 0
    for cut in cdc_cut_points(encoding):
        node = b"c" + encoding[prev:cut]
        h = hash_bytes(node)
        nodes.append((h, node))
        hashes.append(h)
        prev = cut
    node = b"C" + len(encoding).to_bytes(8, "big") + len(hashes).to_bytes(4, "big") + b"".join(hashes)
    h = hash_bytes(node)
    nodes.append((h, node))
    return h


# ------------------------------------------------------------------ lists

def _parse_list_root(root: bytes) -> tuple[int, list[tuple[int, bytes]], list[bytes]]:
    if not root or root[0] != TAG_LIST:
        raise CorruptNode("not a list root")
    n = int.from_bytes(root[1:9], "big")
    m = n // LEAF_ITEMS
    peaks = []
    pos = 9
    for k in range(m.bit_length() - 1, -1, -1):
        if m >> k & 1:
            peaks.append((k, root[pos:pos + 32]))
            pos += 32
    tail = [root[pos + i * 32:pos + 32 + i * 32] for i in range(n % LEAF_ITEMS)]
    if pos + 32 * len(tail) != len(root):
        raise CorruptNode("list root length mismatch")
    return n, peaks, tail


def list_append(root: bytes | None, item_hashes: Iterable[bytes], nodes: Nodes) -> bytes:
    """Append items to the list whose root node is ``root`` (None: empty list).

    New nodes (the new root last) are appended to ``nodes``; returns the new root hash.
    """
    if root is None:
        n, peaks, tail = 0, [], []
    else:
        n, peaks, tail = _parse_list_root(root)
    for h in item_hashes:
        if len(h) != HASH_SIZE:
            raise ValueError(f"item hash must be {HASH_SIZE} bytes, not {len(h)}")
        tail.append(h)
        n += 1
        if len(tail) == LEAF_ITEMS:
            node = b"l" + b"".join(tail)
            level, cur = 0, hash_bytes(node)
            nodes.append((cur, node))
            tail = []
            while peaks and peaks[-1][0] == level:
                node = b"n" + peaks.pop()[1] + cur
                cur = hash_bytes(node)
                nodes.append((cur, node))
                level += 1
            peaks.append((level, cur))
    node = b"L" + n.to_bytes(8, "big") + b"".join(p[1] for p in peaks) + b"".join(tail)
    h = hash_bytes(node)
    nodes.append((h, node))
    return h


def list_length(root: bytes) -> int:
    return int.from_bytes(root[1:9], "big")


# ------------------------------------------------------------------ maps

def _nibble(key_hash: bytes, depth: int) -> int:
    b = key_hash[depth >> 1]
    return b >> 4 if not depth & 1 else b & 15


def _map_leaf(pairs: list[tuple[bytes, bytes]], nodes: Nodes) -> bytes:
    parts = [b"M", len(pairs).to_bytes(4, "big")]
    for key, h in pairs:
        parts.append(len(key).to_bytes(2, "big"))
        parts.append(key)
        parts.append(h)
    node = b"".join(parts)
    h = hash_bytes(node)
    nodes.append((h, node))
    return h


def _map_build(items: list[tuple[bytes, bytes, bytes]], depth: int, nodes: Nodes) -> bytes:
    """items: (key bytes, key hash, value hash), sorted by key bytes."""
    if len(items) <= MAP_LEAF_MAX or depth >= 2 * HASH_SIZE:
        return _map_leaf([(k, v) for k, _, v in items], nodes)
    groups: list[list] = [[] for _ in range(16)]
    for item in items:
        groups[_nibble(item[1], depth)].append(item)
    bitmap = 0
    children = []
    for nib in range(16):
        if groups[nib]:
            bitmap |= 1 << nib
            children.append(_map_build(groups[nib], depth + 1, nodes))
    node = b"N" + len(items).to_bytes(8, "big") + bitmap.to_bytes(2, "big") + b"".join(children)
    h = hash_bytes(node)
    nodes.append((h, node))
    return h


def _check_key(key: bytes) -> bytes:
    if len(key) > 0xFFFF:
        raise UnsupportedValue("map key longer than 65535 bytes")
    return key


def _check_value_hash(h: bytes) -> bytes:
    if len(h) != HASH_SIZE:
        raise ValueError(f"value hash must be {HASH_SIZE} bytes, not {len(h)}")
    return h


def map_build(pairs: Iterable[tuple[str, bytes]], nodes: Nodes) -> bytes:
    """Build a map from (key, value hash) pairs; returns the root hash.

    A key given twice keeps its last value (as ``dict(pairs)`` would).
    """
    merged: dict[bytes, bytes] = {}
    for k, v in pairs:
        merged[_check_key(k.encode())] = _check_value_hash(v)
    items = [(k, hash_bytes(k), v) for k, v in sorted(merged.items())]
    return _map_build(items, 0, nodes)


def _parse_map_leaf(node: bytes) -> list[tuple[bytes, bytes]]:
    count = int.from_bytes(node[1:5], "big")
    pos = 5
    out = []
    for _ in range(count):
        klen = int.from_bytes(node[pos:pos + 2], "big")
        key = node[pos + 2:pos + 2 + klen]
        pos += 2 + klen
        out.append((key, node[pos:pos + 32]))
        pos += 32
        if pos > len(node):  # a damaged count: stop before looping over garbage
            break
    if pos != len(node):
        raise CorruptNode("map leaf length mismatch")
    return out


def _parse_map_inner(node: bytes) -> tuple[int, dict[int, bytes]]:
    count = int.from_bytes(node[1:9], "big")
    bitmap = int.from_bytes(node[9:11], "big")
    children = {}
    pos = 11
    for nib in range(16):
        if bitmap >> nib & 1:
            children[nib] = node[pos:pos + 32]
            pos += 32
    if pos != len(node):
        raise CorruptNode("map inner node length mismatch")
    return count, children


def _map_collect(node: bytes, fetch: Fetch, out: list[tuple[bytes, bytes]]) -> None:
    if node[0] == TAG_MAP:
        out.extend(_parse_map_leaf(node))
    elif node[0] == TAG_MAP_INNER:
        for child in _parse_map_inner(node)[1].values():
            _map_collect(_get(fetch, child), fetch, out)
    else:
        raise CorruptNode("not a map node")


def map_count(root: bytes) -> int:
    if root[0] == TAG_MAP:
        return int.from_bytes(root[1:5], "big")
    return int.from_bytes(root[1:9], "big")


def map_update(root_hash: bytes, sets: Iterable[tuple[str, bytes]], deletes: Iterable[str],
               fetch: Fetch, nodes: Nodes) -> bytes:
    """Set and delete keys of a map; returns the new root hash (deletes apply first)."""
    changes: dict[bytes, bytes | None] = {}
    for key in deletes:
        changes[_check_key(key.encode())] = None
    for key, h in sets:
        changes[_check_key(key.encode())] = _check_value_hash(h)
    if not changes:
        return root_hash
    items = sorted((k, hash_bytes(k), v) for k, v in changes.items())
    h, _ = _map_update(root_hash, 0, items, fetch, nodes, len(nodes))
    return h


def _map_update(node_hash: bytes, depth: int, changes: list, fetch: Fetch, nodes: Nodes,
                start: int) -> tuple[bytes, int]:
    """``nodes[start:]`` are the nodes this update made (not in the store yet)."""
    node = _get(fetch, node_hash)
    if node[0] == TAG_MAP:
        merged = dict(_parse_map_leaf(node))
        for key, _, value in changes:
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        items = sorted((k, hash_bytes(k), v) for k, v in merged.items())
        return _map_build(items, depth, nodes), len(items)
    if node[0] != TAG_MAP_INNER:
        raise CorruptNode("not a map node")
    total, children = _parse_map_inner(node)
    groups: dict[int, list] = {}
    for item in changes:
        groups.setdefault(_nibble(item[1], depth), []).append(item)
    for nib, group in groups.items():
        child = children.get(nib)
        if child is None:
            added = [item for item in group if item[2] is not None]
            if added:
                children[nib] = _map_build(added, depth + 1, nodes)
                total += len(added)
            continue
        old = map_count(_get(fetch, child))
        new_child, new_count = _map_update(child, depth + 1, group, fetch, nodes, start)
        total += new_count - old
        if new_count:
            children[nib] = new_child
        else:
            del children[nib]
    if total <= MAP_LEAF_MAX:
        # Collapse to one leaf. Children rebuilt by this update exist only in
        # ``nodes`` so far: read those from there, the others from the store.
        fresh = dict(nodes[start:])

        def fetch_fresh(h: bytes) -> bytes:
            node = fresh.get(h)
            return fetch(h) if node is None else node

        raw: list[tuple[bytes, bytes]] = []
        for child in children.values():
            _map_collect(fetch_fresh(child), fetch_fresh, raw)
        raw.sort()
        return _map_leaf(raw, nodes), total
    bitmap = 0
    for nib in children:
        bitmap |= 1 << nib
    node = b"N" + total.to_bytes(8, "big") + bitmap.to_bytes(2, "big") + b"".join(
        children[nib] for nib in sorted(children))
    h = hash_bytes(node)
    nodes.append((h, node))
    return h, total


# ------------------------------------------------------------------ composite builders

def build_list(encodings: Iterable[bytes], nodes: Nodes, root: bytes | None = None) -> bytes:
    """Store each item encoding as a value node and append them to ``root`` (None: new list)."""
    return list_append(root, [value_node(e, nodes) for e in encodings], nodes)


def build_map(pairs: Iterable[tuple[str, bytes]], nodes: Nodes) -> bytes:
    """Store each (key, encoding) pair's value and build the map."""
    return map_build([(k, value_node(e, nodes)) for k, e in pairs], nodes)


def children(node: bytes) -> list[bytes]:
    """Hashes a canonical node refers to."""
    out: list[bytes] = []
    _swap_refs(node, HASH_SIZE, HASH_SIZE, lambda r: out.append(r) or r)
    return out


# ------------------------------------------------------------------ stored records
#
# In LMDB each node is a *record* under an 8-byte id (ids increase as nodes
# are written, so records of one write sit together and pages fill up):
#
#     record = hash (32 bytes) + stored node
#
# The stored node is the node with every child hash replaced by the child's
# id. Hashes (what content addressing, etags and clients see) are always
# computed over the canonical node; ids are local to one store. A separate
# index maps hash -> id for deduplication. A value node may be stored
# compressed instead: ``z`` + dictionary id + zstd frame of the encoding
# (sidecar/storage/compression.py writes it; the readers here unpack it).

ID_SIZE = 8
RecordFetch = Callable[[bytes], bytes]  # id -> record


def _ref_layout(node: bytes) -> tuple[int, int]:
    """(offset of the first child reference, total reference count) for fixed-layout nodes."""
    tag = node[0]
    if tag == TAG_LIST:
        n = int.from_bytes(node[1:9], "big")
        return 9, bin(n // LEAF_ITEMS).count("1") + n % LEAF_ITEMS
    if tag == TAG_LEAF:
        return 1, LEAF_ITEMS
    if tag == TAG_INNER:
        return 1, 2
    if tag == TAG_CHUNKED:
        return 13, int.from_bytes(node[9:13], "big")
    if tag == TAG_MAP_INNER:
        return 11, bin(int.from_bytes(node[9:11], "big")).count("1")
    if tag == TAG_VALUE or tag == TAG_CHUNK:
        return len(node), 0
    raise CorruptNode(f"unknown node tag {tag:#x}")


def _map_leaf_refs(node: bytes, size: int) -> list[int]:
    """Offsets of the ``size``-byte child references of map leaf ``node`` (checked against its length)."""
    count = int.from_bytes(node[1:5], "big")
    offsets = []
    pos = 5
    for _ in range(count):
        pos += 2 + int.from_bytes(node[pos:pos + 2], "big")
        offsets.append(pos)
        pos += size
        if pos > len(node):  # a damaged count: stop before looping over garbage
            break
    if pos != len(node):
        raise CorruptNode("map leaf length mismatch")
    return offsets


def _swap_refs(node: bytes, old: int, new: int, convert: Callable[[bytes], bytes]) -> bytes:
    """Rewrite every child reference of ``node`` from ``old``-byte to ``new``-byte form.

    The node's layout is checked before ``convert`` is called: a damaged node
    raises CorruptNode without ``convert`` ever seeing a truncated reference.
    """
    if not node:
        raise CorruptNode("empty node")
    if node[0] == TAG_MAP:
        parts = []
        prev = 0
        for off in _map_leaf_refs(node, old):
            parts.append(node[prev:off])
            parts.append(convert(node[off:off + old]))
            prev = off + old
        parts.append(node[prev:])
        return b"".join(parts)
    start, count = _ref_layout(node)
    if start + count * old != len(node):
        raise CorruptNode(f"node {chr(node[0])!r} length mismatch")
    refs = [convert(node[start + i * old:start + (i + 1) * old]) for i in range(count)]
    return node[:start] + b"".join(refs)


def stored_node(node: bytes, id_of: Callable[[bytes], bytes]) -> bytes:
    """The stored form of a canonical node (``id_of`` maps a child hash to its id)."""
    return _swap_refs(node, HASH_SIZE, ID_SIZE, id_of)


def canonical_node(stored: bytes, hash_of: Callable[[bytes], bytes]) -> bytes:
    """The canonical node of a stored one (``hash_of`` maps a child id to its hash)."""
    if stored[:1] == _PACKED:
        return b"v" + _unpacked(_compression.unpack, stored)  # from the record itself, never the read cache
    if stored[:1] == _SEALED_B:
        raise CorruptNode("a sealed node: open its record first (encryption.plain)")
    return _swap_refs(stored, ID_SIZE, HASH_SIZE, hash_of)


def _unpacked(unpack: Callable[[bytes], bytes], data: bytes) -> bytes:
    """``unpack(data)``: the encoding of a compressed (``z``) value node; CorruptNode when it does not unpack."""
    try:
        return unpack(data)
    except ValueError as e:
        raise CorruptNode(str(e)) from None


def stored_children(stored: bytes) -> list[bytes]:
    """Ids a stored node refers to."""
    if stored[:1] == _PACKED:  # a compressed value: no references
        if len(stored) < 1 + _compression.ID_SIZE:
            raise CorruptNode("compressed node length mismatch")
        return []
    if stored[:1] == _SEALED_B:  # a sealed value or chunk: no references
        return []
    out: list[bytes] = []
    _swap_refs(stored, ID_SIZE, ID_SIZE, lambda r: out.append(r) or r)
    return out


def stored_encoding(record: bytes, fetch: RecordFetch) -> bytes:
    """The value encoding held by a value record (``v``, or ``C`` reassembled from its chunks)."""
    if len(record) <= HASH_SIZE:
        raise CorruptNode("value record too short")
    tag = record[HASH_SIZE]
    if tag == TAG_VALUE:
        return record[HASH_SIZE + 1:]
    if tag == TAG_PACKED:
        return _unpacked(_compression.unpack_record, record)
    if tag == TAG_SEALED:
        # ApiError (key missing, does not authenticate), never garbage; a sealed ``c`` is refused below
        return stored_encoding(_encryption.open_record(record), fetch)
    if tag == TAG_CHUNKED:
        base = HASH_SIZE + 13
        total = int.from_bytes(record[HASH_SIZE + 1:HASH_SIZE + 9], "big")
        count = int.from_bytes(record[HASH_SIZE + 9:base], "big")
        if len(record) != base + count * ID_SIZE:
            raise CorruptNode("chunked value node length mismatch")
        parts = []
        for i in range(count):
            chunk = _get(fetch, record[base + i * ID_SIZE:base + (i + 1) * ID_SIZE])
            if len(chunk) > HASH_SIZE and chunk[HASH_SIZE] == TAG_SEALED:
                chunk = _encryption.open_record(chunk)
            if len(chunk) <= HASH_SIZE or chunk[HASH_SIZE] != TAG_CHUNK:
                raise CorruptNode("chunked value refers to a record that is not a chunk")
            parts.append(chunk[HASH_SIZE + 1:])
        out = b"".join(parts)
        if len(out) != total:
            raise CorruptNode("chunked value length mismatch")
        return out
    raise CorruptNode(f"record does not hold a value (tag {tag:#x})")


def stored_list_length(record: bytes) -> int:
    return int.from_bytes(record[HASH_SIZE + 1:HASH_SIZE + 9], "big")


def stored_list_ids(record: bytes, fetch: RecordFetch) -> list[bytes]:
    """Item ids of a list, in order, from its root record."""
    if len(record) <= HASH_SIZE:
        raise CorruptNode("list root record too short")
    if record[HASH_SIZE] != TAG_LIST:
        raise CorruptNode("not a list root")
    n = stored_list_length(record)
    m = n // LEAF_ITEMS
    pos = HASH_SIZE + 9
    if len(record) != pos + (bin(m).count("1") + n % LEAF_ITEMS) * ID_SIZE:
        raise CorruptNode("list root length mismatch")
    out: list[bytes] = []
    for k in range(m.bit_length() - 1, -1, -1):
        if m >> k & 1:
            _expand_stored(record[pos:pos + ID_SIZE], k, fetch, out)
            pos += ID_SIZE
    out.extend(record[pos + i * ID_SIZE:pos + (i + 1) * ID_SIZE] for i in range(n % LEAF_ITEMS))
    return out


def _expand_stored(node_id: bytes, level: int, fetch: RecordFetch, out: list[bytes]) -> None:
    rec = _get(fetch, node_id)
    base = HASH_SIZE + 1
    if len(rec) <= HASH_SIZE:
        raise CorruptNode("list node record too short")
    if level == 0:
        if rec[HASH_SIZE] != TAG_LEAF or len(rec) != base + LEAF_ITEMS * ID_SIZE:
            raise CorruptNode("bad list leaf")
        out.extend(rec[base + i * ID_SIZE:base + (i + 1) * ID_SIZE] for i in range(LEAF_ITEMS))
        return
    if rec[HASH_SIZE] != TAG_INNER or len(rec) != base + 2 * ID_SIZE:
        raise CorruptNode("bad list inner node")
    _expand_stored(rec[base:base + ID_SIZE], level - 1, fetch, out)
    _expand_stored(rec[base + ID_SIZE:base + 2 * ID_SIZE], level - 1, fetch, out)


def stored_list_encodings(record: bytes, fetch: RecordFetch) -> list[bytes]:
    """Item encodings of a list, in order, from its root record."""
    return [stored_encoding(_get(fetch, i), fetch) for i in stored_list_ids(record, fetch)]


def stored_map_entries(record: bytes, fetch: RecordFetch) -> list[tuple[str, bytes]]:
    """(key, value id) pairs of a map, sorted by key bytes, from its root record."""
    out: list[tuple[bytes, bytes]] = []
    _collect_stored_map(record, fetch, out)
    out.sort()
    try:
        return [(k.decode(), v) for k, v in out]
    except UnicodeDecodeError:
        raise CorruptNode("map key is not UTF-8") from None


def _collect_stored_map(record: bytes, fetch: RecordFetch, out: list) -> None:
    node = record[HASH_SIZE:]
    if not node:
        raise CorruptNode("map node record too short")
    if node[0] == TAG_MAP:
        prev = 5
        for off in _map_leaf_refs(node, ID_SIZE):
            out.append((node[prev + 2:off], node[off:off + ID_SIZE]))
            prev = off + ID_SIZE
    elif node[0] == TAG_MAP_INNER:
        for child in stored_children(node):
            _collect_stored_map(_get(fetch, child), fetch, out)
    else:
        raise CorruptNode("not a map node")


# ------------------------------------------------------------------ stored records: writes

#: Hash index keys are the first INDEX_KEY bytes of a hash (storage/nodes.py: a hit is confirmed against the
#: record; a second hash with the same short key is indexed under its full 32 bytes).
INDEX_KEY = 16


def write_nodes(txn, dbs: tuple, built: Nodes, known: dict[bytes, bytes], roots: Iterable[bytes],
                prefix: bytes, pack: Callable, new_id: Callable[[], bytes],
                seal: tuple | None = None, index_key: int = INDEX_KEY) -> dict[bytes, bytes] | None:
    """Store what is missing of the trees whose root hashes are ``roots``; return hash -> id (the write
    half of storage/nodes.write, which owns the rules; None when a node is neither built nor stored).

    ``dbs`` = (nodes, hashes, nodescope) databases of ``txn``; ``built`` the canonical (hash, node) pairs
    of the request, ``known`` the ids of stored nodes they refer to; ``prefix`` the hash index scope (b"":
    shared), ``index_key`` the length of its short keys. Top-down: a node found by hash is stored with its
    whole subtree, so its children are not looked at; a new node's children are stored first (smaller ids). A new value node's stored form is
    ``pack(h, stored, seal is None)``; ``new_id()`` numbers new records. ``seal`` = (seal, scope tag,
    sealed tags) for an encrypted namespace: its value records are sealed and each new node gets a
    nodescope entry. Every LMDB call is positional, in the same order in both twins.
    """
    records, index, scopes = dbs
    ids = dict(known)
    by_hash = dict(built)
    get, put = txn.get, txn.put
    seal_fn = tag = sealed_tags = None
    if seal is not None:
        seal_fn, tag, sealed_tags = seal
    missing = []

    def resolve(h: bytes) -> bytes:
        node_id = ids.get(h)
        if node_id is not None:
            return node_id
        node_id = get(prefix + h[:index_key], None, index)
        if node_id is not None:
            rec = get(node_id, None, records)
            if rec is None or rec[:HASH_SIZE] != h:
                node_id = get(prefix + h, None, index)  # the short key belongs to another hash
        if node_id is None:
            node = by_hash.get(h)
            if node is None:
                missing.append(h)
                raise _Missing()
            stored = stored_node(node, resolve)  # children first: they get smaller ids
            if stored[0] == TAG_VALUE:
                stored = pack(h, stored, seal_fn is None)
            node_id = new_id()
            if seal_fn is not None:
                if stored[0] in sealed_tags:
                    stored = seal_fn(h, stored)
                put(node_id, tag, True, True, False, scopes)
            put(node_id, h + stored, True, True, True, records)
            if not put(prefix + h[:index_key], node_id, True, False, False, index):
                put(prefix + h, node_id, True, True, False, index)
        ids[h] = node_id
        return node_id

    try:
        for h in roots:
            resolve(h)
    except _Missing:
        return None
    return ids


class _Missing(Exception):
    """write_nodes: a node the request relied on is neither built nor stored."""


def canonical_node_known(stored: bytes, fetch: RecordFetch, known: dict[bytes, bytes]) -> bytes:
    """``canonical_node`` of a stored node whose children are read by id with ``fetch``: each child's hash
    is the head of its record (CorruptNode when it is missing), noted in ``known`` (hash -> id)."""

    def hash_of(node_id: bytes) -> bytes:
        h = _get(fetch, node_id)[:HASH_SIZE]
        known[h] = node_id
        return h

    return canonical_node(stored, hash_of)



# ------------------------------------------------------------------ deltas of stored values

def list_delta(record: bytes, append: list[bytes], keep_first: int | None, fetch: RecordFetch,
               known: dict[bytes, bytes], nodes: Nodes, field: str) -> bytes:
    """The root hash of the stored list whose root record is ``record`` with a delta applied: its first
    ``keep_first`` items kept (None: all), then the item encodings ``append`` appended. New nodes go to
    ``nodes``; every stored node the result refers to is noted in ``known`` (hash -> id). ``field`` (the
    delta's, ``channels['x'].delta``) names a ``keep_first`` over the list's length (INVALID_ARGUMENT)."""
    n = stored_list_length(record)
    if keep_first is not None and keep_first != n:
        if keep_first > n:
            raise _errors.invalid(f"{field}.keep_first", f"{keep_first} is more than the list's {n} items")
        kept = []
        for node_id in stored_list_ids(record, fetch)[:keep_first]:
            h = _get(fetch, node_id)[:HASH_SIZE]
            known[h] = node_id
            kept.append(h)
        return list_append(None, kept + [value_node(e, nodes) for e in append], nodes)
    if not append:
        return bytes(record[:HASH_SIZE])
    # the root's children: their hashes read from their records (and noted as known) in one call
    return build_list(append, nodes, canonical_node_known(record[HASH_SIZE:], fetch, known))


def map_delta(root: bytes, sets: list[tuple[str, bytes]], deletes: list[str], node: Fetch, nodes: Nodes,
              field: str) -> bytes:
    """The root hash of the map ``root`` with the (key, encoding) ``sets`` stored and set and the keys
    ``deletes`` deleted (``node``: canonical node by hash, as map_update reads them). A key the map cannot
    hold is UNSUPPORTED_VALUE naming ``field``."""
    pairs = [(k, value_node(enc, nodes)) for k, enc in sets]
    try:  # map keys are any strings (at most 65535 bytes), not identifiers
        return map_update(root, pairs, deletes, node, nodes)
    except UnsupportedValue as e:
        raise _errors.unsupported_value(field, e.reason) from None

# ------------------------------------------------------------------ values of an API request
#
# A request's values as they arrive (agentstate.v1 ``Value``, ``ChannelWrite``, ``ValueDelta`` messages, read by
# their attributes only: storage never imports protobuf) become canonical encodings and trees here, so that
# the compiled twin can convert a whole put in one call. Errors are the API's (sidecar/errors.py) and name the
# request field at fault, down to the path inside a value: ``channels['messages'].delta.append[3].msgpack[1]``.

_MAX_WIRE_DEPTH = 64


def _value_error(field: str, e: UnsupportedValue) -> Exception:
    return _errors.unsupported_value(field + e.path[1:], e.reason)


def wire_encoding(v, field: str, depth: int = 0) -> bytes:
    """Canonical encoding of a whole ``Value`` (items and entries included); ``field`` names it in errors."""
    kind = v.WhichOneof("kind")
    try:
        if kind == "msgpack":
            return canonicalize(v.msgpack)
        if kind == "opaque":
            return encode_opaque(v.opaque.type, v.opaque.data)
    except UnsupportedValue as e:
        raise _value_error(f"{field}.{kind}", e) from None
    if kind is None:
        raise _errors.unsupported_value(field, "no value set (one of msgpack, opaque, list, map is required)")
    if depth >= _MAX_WIRE_DEPTH:
        raise _errors.unsupported_value(field, f"nested deeper than {_MAX_WIRE_DEPTH}")
    if kind == "list":
        items = v.list.items
        return _codec.array_header(len(items)) + b"".join(
            wire_encoding(item, f"{field}.list.items[{i}]", depth + 1) for i, item in enumerate(items))
    entries = v.map.entries
    keys = sorted(entries)
    return _codec.map_header(len(keys)) + b"".join(
        _encoder.encode(k) + wire_encoding(entries[k], f"{field}.map.entries[{k!r}]", depth + 1) for k in keys)


def wire_tree(v, field: str, nodes: Nodes) -> bytes:
    """Store a ``Value`` as a tree (lists and maps item by item: list or map nodes, else a value node), its
    nodes appended to ``nodes``; return its root hash."""
    kind = v.WhichOneof("kind")
    try:
        if kind == "list":
            return build_list(
                [wire_encoding(item, f"{field}.list.items[{i}]", 1) for i, item in enumerate(v.list.items)], nodes)
        if kind == "map":
            entries = v.map.entries
            return build_map(
                [(k, wire_encoding(entries[k], f"{field}.map.entries[{k!r}]", 1)) for k in sorted(entries)], nodes)
        if kind == "msgpack":
            shape, payload = decompose(v.msgpack)
            if shape == KIND_LIST:
                return build_list(payload, nodes)
            if shape == KIND_MAP:
                return build_map(payload, nodes)
            return value_node(payload, nodes)
    except UnsupportedValue as e:
        raise _value_error(f"{field}.{kind}", e) from None
    return value_node(wire_encoding(v, field), nodes)


def wire_items(items, field: str) -> list[bytes]:
    """Canonical encodings of a repeated ``Value`` field (``field[i]`` in errors)."""
    return [wire_encoding(item, f"{field}[{i}]", 1) for i, item in enumerate(items)]


def wire_entries(entries, field: str) -> dict[str, bytes]:
    """{key: canonical encoding} of a ``map<string, Value>`` field (``field['key']`` in errors), in its order."""
    return {k: wire_encoding(entries[k], f"{field}[{k!r}]", 1) for k in entries}


def _check_name(value: str, field: str) -> None:
    """A channel name: as api/validate.py ``name`` checks it (same messages)."""
    if not value:
        raise _errors.invalid(field, "must not be empty")
    if "\x00" in value:
        raise _errors.invalid(field, "must not contain NUL characters")
    max_bytes = _limits.MAX_NAME_BYTES
    if len(value) > max_bytes or len(value.encode()) > max_bytes:
        raise _errors.invalid(field, f"longer than {max_bytes} bytes")


def put_channels(channels, built: Nodes, has_base: bool, base_field: str) -> list[tuple]:
    """A PutCheckpoint's channel writes (``map<string, ChannelWrite>``), checked and converted, sorted by
    name: one tuple per channel, the fields of state/checkpoints.ChannelOp in its order (name, kind, field,
    root, append, keep_first, sets, deletes, base_root). Whole values are built as trees into ``built``,
    delta items and map sets become canonical encodings. Without a base (``has_base`` false) a delta or keep
    is BASE_MISMATCH naming ``base_field``, before anything else is checked."""
    if not has_base:
        needs_base = [name for name, w in channels.items() if w.WhichOneof("op") in ("delta", "keep")]
        if needs_base:
            raise _errors.ApiError("BASE_MISMATCH", f"channels[{needs_base[0]!r}]: a delta or keep needs "
                                   "parent_checkpoint_id or base_checkpoint_id", field=base_field)
    ops = []
    for name in sorted(channels):
        f = f"channels[{name!r}]"
        _check_name(name, f)
        w = channels[name]
        op = w.WhichOneof("op")
        if op == "value":
            ops.append((name, "value", f, wire_tree(w.value, f + ".value", built), [], None, [], [], b""))
        elif op == "keep":
            if not w.keep:
                raise _errors.invalid(f + ".keep", "must be true when set")
            ops.append((name, "keep", f, b"", [], None, [], [], b""))
        elif op == "delta":
            delta = w.delta
            fd = f + ".delta"
            ops.append((name, "delta", f, b"", wire_items(delta.append, fd + ".append"),
                        delta.keep_first if delta.HasField("keep_first") else None,
                        [(k, wire_encoding(delta.set[k], f"{fd}.set[{k!r}]", 1)) for k in sorted(delta.set)],
                        list(delta.delete), delta.base_root))
        else:
            raise _errors.invalid(f, "one of value, delta or keep is required")
    return ops
