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

from dataclasses import dataclass
from typing import Callable

import msgspec

from agentstate.codec import array_header, map_header

from . import encryption
from . import hotpath as hp
from . import layout
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


INDEX_KEY = hp.INDEX_KEY


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
        if txn.get(prefix + h, db=index) == node_id:
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
    scope = store.scope(ns)
    db = store.db
    if scope is None:
        prefix, seal = b"", None
    else:  # new nodes indexed under the namespace's scope, value records sealed with its current key
        prefix, seal = scope.prefix, (scope.seal, scope.tag(), encryption.SEALED_TAGS)
    # the walk, the index and the record encoding in one hot-path call (compiled: no Python frame per node)
    ids = hp.write_nodes(txn, (db["nodes"], db["hashes"], db["nodescope"]), nodes, known, roots, prefix,
                         store.packer.pack, store.new_node_id, seal, INDEX_KEY)
    if ids is None:
        raise RetryJob()
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


# ----------------------------------------------------------------- large writes, staged

def _no_child(h: bytes) -> bytes:  # a value node refers to no other node
    raise hp.CorruptNode("a value node with a child")


@dataclass
class Staged:
    """A large write's new nodes, ready to store (:func:`stage`): ``records`` (id, record) in id order,
    ``index`` (short key, id, full key: both under the scope's prefix) grouped by the hash's first byte,
    ``ids`` hash -> id of every node the roots reach that the write needs (stored before or new);
    ``scope_tag``: the ``nodescope`` value of every record (an encrypted namespace), or None."""

    records: list
    index: list
    ids: dict
    scope_tag: bytes | None = None


def stage(txn, store: Store, nodes: list, known: dict[bytes, bytes], roots,
          scope: encryption.Scope | None = None) -> Staged:
    """The CPU work of :func:`write`, done on any thread against a read snapshot ``txn`` (for a large
    request, so that it does not hold the owner loop): which nodes of the trees of ``roots`` are missing,
    their ids (a block reserved *after* the snapshot was opened, so every node it shows has a smaller id
    and children keep smaller ids than their parents, which gc.py relies on) and their stored records
    (value nodes maybe compressed). ``scope``: an encrypted namespace's (``store.scope``): lookups and
    index entries under its prefix, records sealed with its current key as :func:`write` seals them
    (the key current when staged; an older key stays readable after a rotation).

    The caller keeps garbage collection from deleting what the snapshot showed until the write is
    done (``Store.hold_sweeps``). RetryJob when a node the request relied on is gone."""
    ids = dict(known)
    prefix = scope.prefix if scope is not None else b""
    built = {h: node for h, node in nodes}  # (not dict(nodes): one C call holding the GIL for all of it)
    new: list = []  # (hash, node), children before parents
    seen: set[bytes] = set()

    def walk(h: bytes) -> None:
        if h in seen or h in ids:
            return
        node_id = lookup(txn, store.db, h, prefix)
        if node_id is not None:
            ids[h] = node_id
            return
        node = built.get(h)
        if node is None:
            raise RetryJob()
        if node[0] != TAG_VALUE:
            for child in hp.children(node):
                walk(child)
        seen.add(h)
        new.append((h, node))

    for h in roots:
        walk(h)
    first = store.reserve_node_ids(len(new))
    u64 = layout.u64
    for k, (h, _) in enumerate(new):
        ids[h] = u64(first + k)
    pack = store.packer.for_thread()
    get = ids.__getitem__
    records = [(ids[h], h + (pack(h, hp.stored_node(node, _no_child)) if node[0] == TAG_VALUE
                             else hp.stored_node(node, get))) for h, node in new]
    tag = None
    if scope is not None:  # sealed as write() seals them: value records after compression
        seal, sealed_tags, tag = scope.seal, encryption.SEALED_TAGS, scope.tag()
        records = [(node_id, rec[:H] + seal(rec[:H], rec[H:]) if rec[H] in sealed_tags else rec)
                   for node_id, rec in records]
    buckets: list[list] = [[] for _ in range(256)]  # by first byte: one range of the index each (no sort:
    for h, _ in new:                                # a sort of it all is one C call holding the GIL)
        buckets[h[0]].append((prefix + h[:INDEX_KEY], ids[h], prefix + h))
    return Staged(records, [entry for bucket in buckets for entry in bucket], ids, tag)


def write_records(txn, store: Store, records: list, scope_tag: bytes | None = None) -> None:
    """(In a write) store staged records; they are reached by id only, until :func:`write_index`. With
    ``scope_tag`` (an encrypted namespace's) each gets its ``nodescope`` entry in the same write."""
    txn.cursor(db=store.db["nodes"]).putmulti(records)
    if scope_tag is not None:
        txn.cursor(db=store.db["nodescope"]).putmulti([(node_id, scope_tag) for node_id, _ in records])


def write_index(txn, store: Store, entries: list) -> None:
    """(In a write, after every record of the write is stored) index staged nodes by hash.

    Entries are (short key, id, full key), under the scope's prefix for an encrypted namespace. A short
    key already there belongs to a node with another hash (a short-key twin) or, when another
    write stored the same content after the put was staged, to a copy of the very node: either way this
    node goes under its full hash, as for twins. A copy costs its bytes only: lookups find the first
    one, and when that one is deleted, this one moves up to the short key (index_delete)."""
    index = store.db["hashes"]
    consumed, added = txn.cursor(db=index).putmulti([(k, node_id) for k, node_id, _ in entries], overwrite=False)
    if added == len(entries):
        return
    for short, node_id, h in entries:  # (rare) which keys were there
        if txn.get(short, db=index) != node_id:
            txn.put(h, node_id, db=index, overwrite=False)


def indexed(txn, store, h: bytes, node_id: bytes, prefix: bytes = b"") -> bool:
    """Whether the index (under ``prefix``: scope_of) finds node ``node_id`` (hash ``h``) or a copy of it
    (the same hash, stored by two writes at once: write_index)."""
    found = lookup(txn, store.db, h, prefix)
    if found == node_id:
        return True
    rec = txn.get(found, db=store.db["nodes"]) if found is not None else None
    return rec is not None and rec[:H] == h
