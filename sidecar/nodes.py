"""nodes: the node store — records by id, the hash index, and writing a request's nodes.

Trees are built in canonical form (children named by hash; see _hotpath_py).
In LMDB each node is a record ``hash + stored node`` under an 8-byte id that
increases as nodes are written, and ``hashes`` maps hash -> id so a node is
stored once. Reads follow ids (one lookup per node, records of one write
adjacent on disk); writes look hashes up to deduplicate.
"""
from __future__ import annotations

from typing import Callable

from . import hotpath as hp
from .store import RetryJob, Store

H = hp.HASH_SIZE


def fetcher(txn, store: Store) -> Callable[[bytes], bytes]:
    """id -> record, raising CorruptNode when the record is missing."""
    get = txn.get
    db = store.db["nodes"]

    def fetch(node_id: bytes) -> bytes:
        rec = get(node_id, db=db)
        if rec is None:
            raise hp.CorruptNode(f"missing node {bytes(node_id).hex()}")
        return rec

    return fetch


class CanonicalReader:
    """Reads canonical nodes by hash from one transaction, remembering every hash -> id it sees."""

    def __init__(self, txn, store: Store) -> None:
        self.txn = txn
        self.hashes = store.db["hashes"]
        self.fetch = fetcher(txn, store)
        self.known: dict[bytes, bytes] = {}

    def id_of(self, h: bytes) -> bytes:
        node_id = self.known.get(h)
        if node_id is None:
            node_id = self.txn.get(h, db=self.hashes)
            if node_id is None:
                raise hp.CorruptNode(f"no node with hash {bytes(h).hex()}")
            self.known[h] = node_id
        return node_id

    def hash_of(self, node_id: bytes) -> bytes:
        h = self.fetch(node_id)[:H]
        self.known[h] = node_id
        return h

    def node(self, h: bytes) -> bytes:
        """The canonical node with hash ``h``."""
        return hp.canonical_node(self.fetch(self.id_of(h))[H:], self.hash_of)


def write(txn, store: Store, nodes: list, known: dict[bytes, bytes], roots) -> dict[bytes, bytes]:
    """Store what is missing of the trees whose root hashes are ``roots``; return hash -> id.

    ``nodes`` are the canonical nodes built for the request, ``known`` maps
    hashes of stored nodes they refer to. The walk goes top-down: a node found
    by hash is stored with its whole subtree (gc.py keeps that true), so its
    children are not even looked at. Raises RetryJob when a node the request
    relied on is gone (the request must be prepared again).
    """
    ids = dict(known)
    built = dict(nodes)
    index = store.db["hashes"]
    records = store.db["nodes"]
    get, put = txn.get, txn.put

    def resolve(h: bytes) -> bytes:
        node_id = ids.get(h)
        if node_id is not None:
            return node_id
        node_id = get(h, db=index)
        if node_id is None:
            node = built.get(h)
            if node is None:
                raise RetryJob()
            stored = hp.stored_node(node, resolve)  # children first: they get smaller ids
            node_id = store.new_node_id()
            put(node_id, h + stored, db=records, append=True)
            put(h, node_id, db=index)
        ids[h] = node_id
        return node_id

    for h in roots:
        resolve(h)
    return ids
