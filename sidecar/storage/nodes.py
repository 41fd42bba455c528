"""nodes: the node store — records by id, the hash index, and writing a request's nodes.

Trees are built in canonical form (children named by hash; see _hotpath_py).
In LMDB each node is a record ``hash + stored node`` under an 8-byte id that
increases as nodes are written, and ``hashes`` maps hash -> id so a node is
stored once. Reads follow ids (one lookup per node, records of one write
adjacent on disk); writes look hashes up to deduplicate. A value node may
be stored compressed (compression.py); its hash is that of the node itself.

The index is keyed by the first 16 bytes of the hash (half the index size);
a hit is confirmed against the full hash kept in the record. Should two
stored hashes ever share those 16 bytes (a 2**-128 accident per pair, or a
deliberate collision), the later one is indexed under its full 32 bytes
instead, so lookups stay exact; deleting the owner of a short key moves one
such full-key entry up to it.

An encrypted namespace's nodes (storage/encryption.py) are indexed under its
8-byte scope prefix + hash (24 or 40 bytes; shared nodes' keys are 16 or 32),
so they are found only by writes of that namespace, and each has a
``nodescope`` entry (node id -> scope + namespace) saying so; their value
records are sealed after compression. Every lookup therefore names the
namespace it is for.
"""
from __future__ import annotations

from typing import Callable

import msgspec

from agentstate.codec import array_header, map_header

from . import encryption
from . import hotpath as hp
from .store import RetryJob, Store

_str_encoder = msgspec.msgpack.Encoder()

H = hp.HASH_SIZE
TAG_VALUE = hp.TAG_VALUE


def fetcher(txn, store: Store) -> Callable[[bytes], bytes | None]:
    """id -> record (None when missing: the hot-path readers turn that into CorruptNode).

    Store transactions default to the ``nodes`` database, so this is the
    transaction's own ``get``: no Python frame per record on the read path.
    """
    return txn.get


INDEX_KEY = 16


def index_get(txn, store: Store, h: bytes, ns: str) -> bytes | None:
    """Id of the node with hash ``h`` that a write of namespace ``ns`` may use, or None."""
    return lookup(txn, store.db, h, store.prefix(ns))


def lookup(txn, db, h: bytes, prefix: bytes) -> bytes | None:
    """Id of the stored node with hash ``h`` indexed under ``prefix`` (b"": shared), or None."""
    index, records = db["hashes"], db["nodes"]
    node_id = txn.get(prefix + h[:INDEX_KEY], db=index)
    if node_id is not None:
        rec = txn.get(node_id, db=records)
        if rec is not None and rec[:H] == h:
            return node_id
        return txn.get(prefix + h, db=index)  # the short key belongs to another hash
    return None


def index_put(txn, store: Store, h: bytes, node_id: bytes, prefix: bytes = b"") -> None:
    index = store.db["hashes"]
    if not txn.put(prefix + h[:INDEX_KEY], node_id, db=index, overwrite=False):
        txn.put(prefix + h, node_id, db=index)


def index_delete(txn, store: Store, h: bytes, node_id: bytes, prefix: bytes = b"") -> None:
    """Remove the index entry that points at ``node_id`` (indexed under ``prefix``).

    Keeps the invariant index_get relies on: while any stored hash starts with
    a short key, that short key is in the index (a full-key entry moves up).
    """
    index = store.db["hashes"]
    short = prefix + h[:INDEX_KEY]
    if txn.get(short, db=index) != node_id:
        txn.delete(prefix + h, db=index)
        return
    txn.delete(short, db=index)
    full = len(prefix) + H
    cursor = txn.cursor(db=index)
    if cursor.set_range(short):  # full keys sort right after their prefix (other lengths are other scopes)
        for key in cursor.iternext(values=False):
            if not bytes(key).startswith(short):
                break
            if len(key) == full:
                other = bytes(cursor.value())
                cursor.delete()
                txn.put(short, other, db=index)
                break


def scope_of(txn, store: Store, node_id: bytes) -> bytes:
    """The index prefix of a stored node (b"" for a shared one)."""
    tag = txn.get(node_id, db=store.db["nodescope"])
    return b"" if tag is None else bytes(tag[:encryption.SCOPE_SIZE])


def record(fetch: Callable[[bytes], bytes | None], node_id: bytes) -> bytes:
    """The record of ``node_id``; CorruptNode when it is missing."""
    rec = fetch(node_id)
    if rec is None:
        raise hp.CorruptNode(f"missing node {bytes(node_id).hex()}")
    return rec


class CanonicalReader:
    """Reads canonical nodes by hash from one transaction (for namespace ``ns``), remembering every
    hash -> id it sees."""

    def __init__(self, txn, store: Store, ns: str) -> None:
        self.txn = txn
        self.store = store
        self.ns = ns
        self.fetch = fetcher(txn, store)
        self.known: dict[bytes, bytes] = {}

    def id_of(self, h: bytes) -> bytes:
        node_id = self.known.get(h)
        if node_id is None:
            node_id = index_get(self.txn, self.store, h, self.ns)
            if node_id is None:
                raise hp.CorruptNode(f"no node with hash {bytes(h).hex()}")
            self.known[h] = node_id
        return node_id

    def hash_of(self, node_id: bytes) -> bytes:
        h = record(self.fetch, node_id)[:H]
        self.known[h] = node_id
        return h

    def node(self, h: bytes) -> bytes:
        """The canonical node with hash ``h``."""
        rec = encryption.plain(record(self.fetch, self.id_of(h)))
        return hp.canonical_node(rec[H:], self.hash_of)


def write(txn, store: Store, nodes: list, known: dict[bytes, bytes], roots, ns: str) -> dict[bytes, bytes]:
    """Store what is missing of the trees whose root hashes are ``roots`` for namespace ``ns``; return
    hash -> id.

    ``nodes`` are the canonical nodes built for the request, ``known`` maps
    hashes of stored nodes they refer to. The walk goes top-down: a node found
    by hash is stored with its whole subtree (gc.py keeps that true), so its
    children are not even looked at. Raises RetryJob when a node the request
    relied on is gone (the request must be prepared again). In an encrypted
    namespace, new nodes are indexed under its scope and value records sealed
    with its current key (ENCRYPTION_KEY_MISSING when it has none loaded).
    """
    ids = dict(known)
    built = dict(nodes)
    records = store.db["nodes"]
    put = txn.put
    pack = store.packer.pack
    scope = store.scope(ns)
    if scope is None:
        prefix = b""
        seal = tag = None
    else:
        prefix, seal, tag = scope.prefix, scope.seal, scope.tag()
        sealed_tags = encryption.SEALED_TAGS
        scopes = store.db["nodescope"]

    def resolve(h: bytes) -> bytes:
        node_id = ids.get(h)
        if node_id is not None:
            return node_id
        node_id = lookup(txn, store.db, h, prefix)
        if node_id is None:
            node = built.get(h)
            if node is None:
                raise RetryJob()
            stored = hp.stored_node(node, resolve)  # children first: they get smaller ids
            if stored[0] == TAG_VALUE:
                stored = pack(h, stored, seal is None)  # compression.py: maybe ``z`` + dictionary id + zstd frame
            node_id = store.new_node_id()
            if seal is not None:
                if stored[0] in sealed_tags:
                    stored = seal(h, stored)  # encryption.py: ``e`` + key id + nonce + AES-GCM
                put(node_id, tag, db=scopes)
            put(node_id, h + stored, db=records, append=True)
            index_put(txn, store, h, node_id, prefix)
        ids[h] = node_id
        return node_id

    for h in roots:
        resolve(h)
    return ids


def value_encoding(root_id: bytes, fetch: Callable[[bytes], bytes]) -> bytes:
    """The whole canonical encoding of the value whose root node has id ``root_id``, whatever its shape
    (list tree, map trie or one value): the bytes a client sent, as one MessagePack value."""
    rec = record(fetch, root_id)
    tag = rec[hp.HASH_SIZE]
    if tag == hp.TAG_LIST:
        items = hp.stored_list_encodings(rec, fetch)
        return array_header(len(items)) + b"".join(items)
    if tag == hp.TAG_MAP or tag == hp.TAG_MAP_INNER:
        entries = hp.stored_map_entries(rec, fetch)
        return map_header(len(entries)) + b"".join(
            _str_encoder.encode(k) + hp.stored_encoding(record(fetch, node_id), fetch) for k, node_id in entries)
    return hp.stored_encoding(rec, fetch)
