"""memory: memory items — the rules over their records (docs/memory.md).

An item lives at (tenant namespace, path, key). Its record (``memitems``, layout.MemItemRec) holds the value as
one value node (content-addressed, shared with the item's history), the times, version, provenance, origin,
actor, TTL and the names of its vectors; ``memupd`` orders the tenant's items newest first, ``memexp`` orders
expiries for the sweeper, ``memhist`` keeps one revision per change (PUT, DELETE, EXPIRE), ``memvec`` the
client-supplied float32 vectors.

Everything takes validated Python values and the time ``now`` (microseconds) from the caller, so a test can
run the rules with a clock of its own (:class:`Memory` holds the clock the server uses). Visibility: an item
whose ``expires_us`` is not after ``now`` is invisible to every read at once, swept or not.

Filters are evaluated by ``memory_filters`` (this module's private helper); vector scores by
``storage/vectors.py`` over the index in ``memory_vectors``.
"""
from __future__ import annotations

import functools
from bisect import bisect_right
from itertools import islice
from array import array
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..errors import ApiError
from .. import limits
from ..storage import hotpath as hp
from ..storage import layout, nodes, usage, vectors
from ..storage.layout import MemItemRec, MemPathRec, MemRevRec, NO_PROVENANCE, Provenance
from ..storage.store import Store, now_us
from . import memory_filters as mf
from . import memory_index as mi
from . import memory_vectors as mv

# agentstate.v1 enums (tests/test_memory.py checks the numbers against the proto)
ORIGIN_UNSPECIFIED, ORIGIN_EXPLICIT, ORIGIN_INFERRED = 0, 1, 2
VECTOR_REPLACE, VECTOR_MERGE = 1, 2
REV_PUT, REV_DELETE, REV_EXPIRE = 1, 2, 3
ORDER_UPDATED_DESC, ORDER_INSERTION, ORDER_PATH_KEY = 1, 2, 3
UNSCORED_OMIT, UNSCORED_ONLY = 1, 2
SEQUENTIAL, SNAPSHOT = 1, 2

SWEEP_ACTOR = "agentstate:ttl"
DEFAULT_SPACE = "default"
REFRESH_MIN_US = 1_000_000  # a refresh moving the expiry by less than this is skipped

_NEXT_PATH = b"mem_next_path"
_NEXT_ITEM = b"mem_next_item"
_NEXT_SEQ = b"mem_next_seq"
_NEXT_SPACE = b"mem_next_space"


@dataclass
class PutInput:
    path: tuple[str, ...]
    key: str
    value: bytes  # canonical encoding of a map
    vectors: dict[str, bytes] = field(default_factory=dict)  # field -> float32 LE components
    space: str = ""
    vector_update: int = VECTOR_REPLACE
    ttl_ms: int | None = None
    provenance: Provenance = NO_PROVENANCE
    origin: int = ORIGIN_UNSPECIFIED
    actor: str = ""
    etag: str = ""
    must_not_exist: bool = False
    schema: str = ""  # state/schemas.py
    schema_version: int = 0


@dataclass
class DeleteInput:
    path: tuple[str, ...]
    key: str
    purge: bool = False
    allow_missing: bool = False
    etag: str = ""
    actor: str = ""
    provenance: Provenance = NO_PROVENANCE
    # the path is made (empty) when it does not exist, as LangGraph's InMemoryStores (Python and JS) do on a
    # delete, so list_namespaces lists it: BatchMemory's SNAPSHOT semantics, the adapters' mode
    make_path: bool = False


@dataclass
class Found:
    """One item as a read returns it."""

    path: tuple[str, ...]
    key: str
    rec: MemItemRec
    value: bytes | None = None  # canonical encoding (when asked for)
    vectors: dict[str, bytes] | None = None
    score: float | None = None
    field: str = ""


@dataclass
class VectorQuery:
    vector: bytes  # float32 LE
    dims: int
    space: str
    fields: tuple[str, ...] = ()
    unscored: int = UNSCORED_OMIT


@dataclass
class SearchInput:
    prefix: tuple[str, ...] = ()
    filter: object = None  # a memory_filters tree
    order: int = ORDER_UPDATED_DESC
    limit: int = limits.DEFAULT_MEMORY_SEARCH_LIMIT
    offset: int = 0
    after: tuple | None = None  # a page token's position
    vector: VectorQuery | None = None
    refresh: bool = True
    values: bool = True
    include_vectors: bool = False
    paged: bool = False  # page_size/page_token: look one item ahead to know whether a next page exists
    read_schema_version: int = 0  # results migrated to it on the way out (api/memory.py, state/schemas.py)


@dataclass
class ListInput:
    prefix: tuple = ()  # labels, or None for a wildcard
    suffix: tuple = ()
    max_depth: int | None = None
    include_empty: bool = False
    limit: int = 100
    offset: int = 0
    after: tuple | None = None


def not_found(path, key: str) -> ApiError:
    return ApiError("MEMORY_ITEM_NOT_FOUND", f"no memory item {key!r} at path {list(path)!r}",
                    path="/".join(path), key=key)


def visible(rec: MemItemRec, now: int) -> bool:
    return rec.expires_us == 0 or rec.expires_us > now


def etag_of(rec: MemItemRec) -> str:
    return layout.mem_etag(rec.item_id, rec.version)


class Memory:
    """The memory rules of one store, with its clock, its vector index and its queue of TTL refreshes."""

    def __init__(self, store: Store, clock: Callable[[], int] = now_us) -> None:
        self.store = store
        self.clock = clock
        self.db = store.db
        self.index = mv.Index()
        self._refreshes: dict[bytes, tuple[int, int]] = {}  # memitems key -> (item id, new expiry)
        self._refresh_scheduled = False

    # ---------------------------------------------------------- records

    def _path(self, txn, ns: str, labels) -> MemPathRec | None:
        raw = txn.get(layout.mem_path_key(ns, labels), db=self.db["mempaths"])
        return None if raw is None else layout.mempath_decoder.decode(raw)

    def _make_path(self, txn, ns: str, labels) -> MemPathRec:
        rec = self._path(txn, ns, labels)
        if rec is None:
            meta = self.db["meta"]
            rec = MemPathRec(layout.FORMAT_VERSION, layout.next_counter(txn, meta, _NEXT_PATH),
                             layout.next_counter(txn, meta, _NEXT_SEQ), 0)
            txn.put(layout.u64(rec.path_id), layout.encode(layout.MemPathName(layout.FORMAT_VERSION, ns, list(labels))),
                    db=self.db["mempathid"])
            self._save_path(txn, ns, labels, rec)
        return rec

    def _save_path(self, txn, ns: str, labels, rec: MemPathRec) -> None:
        txn.put(layout.mem_path_key(ns, labels), layout.encode(rec), db=self.db["mempaths"])

    def _item(self, txn, path_id: int, key: str) -> MemItemRec | None:
        raw = txn.get(layout.mem_item_key(path_id, key), db=self.db["memitems"])
        return None if raw is None else layout.memitem_decoder.decode(raw)

    def _path_name(self, txn, path_id: int, cache: dict) -> layout.MemPathName:
        name = cache.get(path_id)
        if name is None:
            name = cache[path_id] = layout.mempathname_decoder.decode(
                txn.get(layout.u64(path_id), db=self.db["mempathid"]))
        return name

    def _last_version(self, txn, path_id: int, key: str) -> int:
        """The version of the item's newest revision (0: no history)."""
        prefix = layout.mem_hist_prefix(path_id, key)
        cursor = txn.cursor(db=self.db["memhist"])
        end = layout.prefix_end(prefix)
        found = cursor.set_range(end) if end is not None else cursor.last()
        if found:
            found = cursor.prev()
        else:
            found = cursor.last()
        while found and bytes(cursor.key()).startswith(prefix):
            rev = layout.memrev_decoder.decode(cursor.value())
            if rev.key == key:
                return layout.read_u64(bytes(cursor.key())[-8:])
            found = cursor.prev()
        return 0

    def _revision(self, txn, path_id: int, key: str, version: int, kind: int, now: int, actor: str,
                  provenance: Provenance, origin: int, ttl_ms: int | None, value: bytes | None,
                  fields: list[str], etag: str, schema: str = "", schema_version: int = 0) -> None:
        rev = MemRevRec(layout.FORMAT_VERSION, key, kind, now, actor, provenance, origin, ttl_ms, value,
                        fields, etag, schema, schema_version)
        txn.put(layout.mem_hist_key(path_id, key, version), layout.encode(rev), db=self.db["memhist"])

    def _unindex(self, txn, ns: str, rec: MemItemRec) -> None:
        txn.delete(layout.mem_upd_key(ns, rec.updated_us, rec.item_id), db=self.db["memupd"])
        if rec.expires_us:
            txn.delete(layout.mem_exp_key(rec.expires_us, rec.item_id), db=self.db["memexp"])
        self._index_fields(txn, ns, rec.item_id, nodes.value_encoding(rec.value, txn.get), add=False)

    def _index_fields(self, txn, ns: str, item_id: int, encoding: bytes, *, add: bool) -> None:
        """Add (or remove) the item's field-index entries (memory_index.py)."""
        found = mi.leaves(mf.decode_native(encoding))
        idb = layout.u64(item_id)
        if found is None:
            key = ns.encode() + layout.SEP + idb
            if add:
                txn.put(key, b"", db=self.db["memfldx"])
            else:
                txn.delete(key, db=self.db["memfldx"])
            return
        db = self.db["memfld"]
        for path, vtype, vkey in found:
            key = mi.entry_prefix(ns, path, vtype, vkey) + idb
            if add:
                txn.put(key, b"", db=db)
            else:
                txn.delete(key, db=db)

    def _drop_vectors(self, txn, item_id: int, fields) -> None:
        db = self.db["memvec"]
        for f in fields:
            txn.delete(layout.mem_vec_key(item_id, f), db=db)

    def _remove(self, txn, ns: str, labels, prec: MemPathRec, rec: MemItemRec, key: str, kind: int, now: int,
                actor: str, provenance: Provenance) -> None:
        """Delete a stored item (DELETE or EXPIRE revision)."""
        self._unindex(txn, ns, rec)
        self._drop_vectors(txn, rec.item_id, rec.vector_fields)
        if rec.vector_fields:
            self._stage(txn, ns, ("del", rec.item_id))
        txn.delete(layout.mem_item_key(prec.path_id, key), db=self.db["memitems"])
        txn.delete(layout.u64(rec.item_id), db=self.db["memids"])
        prec.live -= 1
        self._save_path(txn, ns, labels, prec)
        usage.add(txn, self.store, ns, items=-1)
        usage.memory_to_history(txn, self.store, ns, layout.mem_item_key(prec.path_id, key),
                                layout.mem_hist_key(prec.path_id, key, rec.version))  # its value: now history
        version = rec.version + 1
        self._revision(txn, prec.path_id, key, version, kind, now, actor, provenance, rec.origin, None, None, [],
                       layout.mem_etag(rec.item_id, version))

    def _space(self, txn, ns: str, space: str, dims: int, create: bool, field: str) -> layout.MemSpaceRec | None:
        key = layout.mem_space_key(ns, space)
        raw = txn.get(key, db=self.db["memspace"])
        if raw is None:
            if not create:
                return None
            rec = layout.MemSpaceRec(layout.FORMAT_VERSION, layout.next_counter(txn, self.db["meta"], _NEXT_SPACE),
                                     dims)
            txn.put(key, layout.encode(rec), db=self.db["memspace"])
            return rec
        rec = layout.memspace_decoder.decode(raw)
        if rec.dims != dims:
            raise ApiError("VECTOR_DIMENSION_MISMATCH",
                           f"{field}: {dims} dimensions, but vector space {space!r} has {rec.dims}",
                           field=field, dims=rec.dims, space=space)
        return rec

    # ---------------------------------------------------------- writes

    def put(self, txn, ns: str, p: PutInput, now: int) -> tuple[MemItemRec, bool]:
        """(stored record, created): create or replace an item, with a PUT revision."""
        prec = self._make_path(txn, ns, p.path)
        path_id = prec.path_id
        old = self._item(txn, path_id, p.key)
        if old is not None and not visible(old, now):
            self._remove(txn, ns, p.path, prec, old, p.key, REV_EXPIRE, old.expires_us, SWEEP_ACTOR, NO_PROVENANCE)
            old = None
        if p.etag and (old is None or p.etag != etag_of(old)):
            current = etag_of(old) if old is not None else ""
            raise ApiError("ETAG_MISMATCH", f"memory item etag {p.etag!r} is stale", field="etag", etag=p.etag,
                           current_etag=current)
        if p.must_not_exist and old is not None:
            raise ApiError("MEMORY_ITEM_ALREADY_EXISTS", f"memory item {p.key!r} exists at path {list(p.path)!r}",
                           field="must_not_exist", path="/".join(p.path), key=p.key)
        # vectors: one space per item; its dimension fixed by the first vector stored in it
        space = ""
        fields: list[str] = []
        if p.vectors:
            space = p.space or DEFAULT_SPACE
            for f, data in p.vectors.items():
                self._space(txn, ns, space, len(data) // 4, True, f"vectors[{f!r}]")
        if old is not None:
            self._unindex(txn, ns, old)
            version = old.version + 1
            item_id, ins_seq, created_us = old.item_id, old.ins_seq, old.created_us
            keep_old = (p.vector_update == VECTOR_MERGE and old.vector_fields
                        and (not p.vectors or old.space == space))
            if keep_old:
                space = old.space
                fields = [f for f in old.vector_fields if f not in p.vectors]
                self._drop_vectors(txn, item_id, [f for f in old.vector_fields if f in p.vectors])
                # the kept vectors are re-stamped with this version below
            else:
                self._drop_vectors(txn, item_id, old.vector_fields)
        else:
            version = self._last_version(txn, path_id, p.key) + 1
            meta = self.db["meta"]
            item_id = layout.next_counter(txn, meta, _NEXT_ITEM)
            ins_seq = layout.next_counter(txn, meta, _NEXT_SEQ)
            created_us = now
            txn.put(layout.u64(item_id), layout.mem_item_key(path_id, p.key), db=self.db["memids"])
            prec.live += 1
            self._save_path(txn, ns, p.path, prec)
            usage.add(txn, self.store, ns, items=1)
        if p.vectors:
            vdb = self.db["memvec"]
            sid = self._space(txn, ns, space, len(next(iter(p.vectors.values()))) // 4, False, "vectors")
            for f, data in p.vectors.items():
                txn.put(layout.mem_vec_key(item_id, f),
                        layout.encode(layout.MemVecRec(layout.FORMAT_VERSION, sid.space_id, len(data) // 4, version,
                                                       data)), db=vdb)
            fields = sorted(set(fields) | set(p.vectors))
        if len(fields) > limits.MAX_MEMORY_VECTORS:
            raise ApiError("LIMIT_EXCEEDED", f"vectors: an item holds at most {limits.MAX_MEMORY_VECTORS} vectors",
                           limit="memory_vectors", field="vectors")
        value_id = self._store_value(txn, ns, p.value)
        expires = 0 if p.ttl_ms is None else now + p.ttl_ms * 1000
        rec = MemItemRec(layout.FORMAT_VERSION, item_id, ins_seq, created_us, now, version, value_id, p.origin,
                         p.actor, p.provenance, p.ttl_ms, expires, space if fields else "", fields, p.schema,
                         p.schema_version)
        txn.put(layout.mem_item_key(path_id, p.key), layout.encode(rec), db=self.db["memitems"])
        if old is not None:  # the replaced value stays charged as an old version (history) until purged
            usage.memory_to_history(txn, self.store, ns, layout.mem_item_key(path_id, p.key),
                                    layout.mem_hist_key(path_id, p.key, old.version))
        usage.memory_put(txn, self.store, ns, layout.mem_item_key(path_id, p.key), len(p.value))
        txn.put(layout.mem_upd_key(ns, now, item_id), b"", db=self.db["memupd"])
        self._index_fields(txn, ns, item_id, p.value, add=True)
        if expires:
            txn.put(layout.mem_exp_key(expires, item_id), b"", db=self.db["memexp"])
        self._revision(txn, path_id, p.key, version, REV_PUT, now, p.actor, p.provenance, p.origin, p.ttl_ms,
                       value_id, fields, etag_of(rec), p.schema, p.schema_version)
        if fields or (old is not None and old.vector_fields):
            vecs = []
            for f in fields:
                data = p.vectors.get(f)
                if data is None:  # kept by a MERGE
                    data = layout.memvec_decoder.decode(txn.get(layout.mem_vec_key(item_id, f),
                                                                db=self.db["memvec"])).data
                vecs.append((f, data))
            self._stage(txn, ns, ("put", item_id, path_id, tuple(p.path), prec.first_seq, p.key, now, ins_seq,
                                  version, expires, rec.space, vecs))
        return rec, old is None

    def _stage(self, txn, ns: str, delta: tuple) -> None:
        """Hand a change of an item with vectors to the resident index (applied once readers see it)."""
        st = self.index.namespaces.get(ns)
        if st is not None and len(st.pending) >= mv.MAX_PENDING and st.pending[-1][0] is not txn:
            with self.store.read() as snap, self.index.lock:  # catch up with what readers see now
                self.index.view(snap, self.db["meta"], ns, lambda t: self._vector_deltas(t, ns))
        self.index.stage(txn, self.db["meta"], ns, delta)

    def _vector_deltas(self, txn, ns: str):
        """The index entries ("put" deltas) of every item with vectors in namespace ``ns`` of snapshot ``txn``."""
        vdb = self.db["memvec"]
        for labels, prec in self._paths_under(txn, ns, ()):
            if prec.live <= 0:
                continue
            for key, rec in self._items_of(txn, prec.path_id):
                if not rec.vector_fields:
                    continue
                vecs = []
                for f in rec.vector_fields:
                    raw = txn.get(layout.mem_vec_key(rec.item_id, f), db=vdb)
                    if raw is not None:
                        vecs.append((f, layout.memvec_decoder.decode(raw).data))
                yield ("put", rec.item_id, prec.path_id, labels, prec.first_seq, key, rec.updated_us, rec.ins_seq,
                       rec.version, rec.expires_us, rec.space, vecs)

    def _store_value(self, txn, ns: str, encoding: bytes) -> bytes:
        built: list = []
        root = hp.value_node(encoding, built)
        ids = nodes.write(txn, self.store, built, {}, [root], ns)
        keep = self.store.gc_keep
        if keep is not None:
            keep.update(ids.values())
        return ids[root]

    def delete(self, txn, ns: str, d: DeleteInput, now: int) -> tuple[bool, int]:
        """(deleted, revisions purged)."""
        prec = self._make_path(txn, ns, d.path) if d.make_path else self._path(txn, ns, d.path)
        old = None if prec is None else self._item(txn, prec.path_id, d.key)
        if old is not None and not visible(old, now):
            self._remove(txn, ns, d.path, prec, old, d.key, REV_EXPIRE, old.expires_us, SWEEP_ACTOR, NO_PROVENANCE)
            old = None
        if d.etag and (old is None or d.etag != etag_of(old)):
            if old is None and not d.allow_missing and not d.purge:
                raise not_found(d.path, d.key)
            raise ApiError("ETAG_MISMATCH", f"memory item etag {d.etag!r} is stale", field="etag", etag=d.etag,
                           current_etag=etag_of(old) if old is not None else "")
        if old is not None:
            self._remove(txn, ns, d.path, prec, old, d.key, REV_DELETE, now, d.actor, d.provenance)
        purged = self._purge(txn, ns, prec.path_id, d.key) if d.purge and prec is not None else 0
        if old is None and not purged and not d.allow_missing:
            raise not_found(d.path, d.key)
        return old is not None, purged

    def _purge(self, txn, ns: str, path_id: int, key: str) -> int:
        prefix = layout.mem_hist_prefix(path_id, key)
        cursor = txn.cursor(db=self.db["memhist"])
        doomed = []
        if cursor.set_range(prefix):
            for k, raw in cursor.iternext():
                if not bytes(k).startswith(prefix):
                    break
                if layout.memrev_decoder.decode(raw).key == key:
                    doomed.append(bytes(k))
        for k in doomed:
            txn.delete(k, db=self.db["memhist"])
        usage.history_purged(txn, self.store, ns, doomed)
        return len(doomed)

    # ---------------------------------------------------------- reads

    def get(self, txn, ns: str, path, key: str, now: int, *, refresh: bool, include_vectors: bool = False,
            write_txn=None) -> Found | None:
        prec = self._path(txn, ns, path)
        rec = None if prec is None else self._item(txn, prec.path_id, key)
        if rec is None or not visible(rec, now):
            return None
        found = Found(tuple(path), key, rec, nodes.value_encoding(rec.value, txn.get))
        if include_vectors:
            found.vectors = self._vectors(txn, rec)
        if refresh:
            self._refresh(prec.path_id, key, found, now, write_txn)
        return found

    def _vectors(self, txn, rec: MemItemRec) -> dict[str, bytes]:
        out = {}
        for f in rec.vector_fields:
            raw = txn.get(layout.mem_vec_key(rec.item_id, f), db=self.db["memvec"])
            if raw is not None:
                out[f] = layout.memvec_decoder.decode(raw).data
        return out

    def _refresh(self, path_id: int, key: str, found: Found, now: int, write_txn) -> None:
        """Restart a read item's TTL: at once in a write (``write_txn``), else queued (docs/memory.md §7)."""
        rec = found.rec
        if rec.ttl_ms is None:
            return
        new = now + rec.ttl_ms * 1000
        if new - rec.expires_us < REFRESH_MIN_US:
            return
        ikey = layout.mem_item_key(path_id, key)
        found.rec = rec = layout.memitem_decoder.decode(layout.encode(rec))  # a copy for the answer
        if write_txn is not None:
            self.apply_refreshes(write_txn, {ikey: (rec.item_id, new)}, now)
        else:
            old = self._refreshes.get(ikey)
            if old is None or old[0] != rec.item_id or old[1] < new:
                self._refreshes[ikey] = (rec.item_id, new)
        rec.expires_us = new

    def take_refreshes(self) -> dict[bytes, tuple[int, int]]:
        out, self._refreshes = self._refreshes, {}
        return out

    def apply_refreshes(self, txn, entries: dict[bytes, tuple[int, int]], now: int) -> int:
        """Write queued expiries: each item re-checked (same item id, still live), the later expiry kept."""
        done = 0
        names: dict = {}
        for ikey, (item_id, new) in entries.items():
            raw = txn.get(ikey, db=self.db["memitems"])
            if raw is None:
                continue
            rec = layout.memitem_decoder.decode(raw)
            if rec.item_id != item_id or not rec.expires_us or new <= rec.expires_us or not visible(rec, now):
                continue
            txn.delete(layout.mem_exp_key(rec.expires_us, item_id), db=self.db["memexp"])
            rec.expires_us = new
            txn.put(layout.mem_exp_key(new, item_id), b"", db=self.db["memexp"])
            txn.put(ikey, layout.encode(rec), db=self.db["memitems"])
            if rec.vector_fields:
                self._stage(txn, self._path_name(txn, layout.read_u64(ikey[:8]), names).ns, ("exp", item_id, new))
            done += 1
        return done

    # ---------------------------------------------------------- search

    def _paths_under(self, txn, ns: str, prefix) -> Iterator[tuple[tuple[str, ...], MemPathRec]]:
        """(labels, record) of the paths that start with ``prefix`` (labels), in tuple order."""
        start = layout.mem_path_key(ns, prefix)
        ns_len = len(ns.encode())
        cursor = txn.cursor(db=self.db["mempaths"])
        if not cursor.set_range(start):
            return
        for k, raw in cursor.iternext():
            k = bytes(k)
            if not k.startswith(start):
                break
            yield tuple(layout.mem_labels_of(k, ns_len)), layout.mempath_decoder.decode(raw)

    def _items_of(self, txn, path_id: int) -> Iterator[tuple[str, MemItemRec]]:
        prefix = layout.u64(path_id)
        cursor = txn.cursor(db=self.db["memitems"])
        if not cursor.set_range(prefix):
            return
        for k, raw in cursor.iternext():
            k = bytes(k)
            if not k.startswith(prefix):
                break
            yield k[8:].decode(), layout.memitem_decoder.decode(raw)

    def _ordered(self, txn, ns: str, prefix, order: int, after: tuple | None, accept=None
                 ) -> Iterator[tuple[tuple, tuple[str, ...], str, MemItemRec, int]]:
        """(sort key, labels, key, record, path id) of the items under ``prefix`` in ``order``, after ``after``
        (a sort key). Expired items are included (the caller checks visibility). ``accept`` (item id as 8
        bytes -> bool, from :meth:`_member_test`) leaves out items that cannot match; it may let through
        items that do not match (the caller re-checks), never the other way round."""
        if order == ORDER_UPDATED_DESC:
            yield from self._by_update(txn, ns, prefix, after, accept)
            return
        if accept is not None:
            for entry in self._ordered(txn, ns, prefix, order, after):
                if accept(layout.u64(entry[3].item_id)):
                    yield entry
            return
        paths = list(self._paths_under(txn, ns, prefix))
        if order == ORDER_INSERTION:
            paths.sort(key=lambda p: p[1].first_seq)
            for labels, prec in paths:
                if prec.live <= 0 or (after is not None and prec.first_seq < after[0]):
                    continue
                items = sorted(self._items_of(txn, prec.path_id), key=lambda kv: kv[1].ins_seq)
                for key, rec in items:
                    sk = (prec.first_seq, rec.ins_seq)
                    if after is not None and sk <= tuple(after):
                        continue
                    yield sk, labels, key, rec, prec.path_id
            return
        for labels, prec in paths:  # PATH_KEY
            if prec.live <= 0:
                continue
            enc_labels = [lab.encode() for lab in labels]
            if after is not None and enc_labels < list(after[0]):
                continue
            for key, rec in self._items_of(txn, prec.path_id):
                sk = (enc_labels, key.encode())
                if after is not None and (sk[0], sk[1]) <= (list(after[0]), after[1]):
                    continue
                yield sk, labels, key, rec, prec.path_id

    def _by_update(self, txn, ns: str, prefix, after, accept=None):
        """Items newest first; equal update times by path (label by label) then key. Per ``memupd`` entry only
        its item id is looked at until the entry passes ``accept`` and the prefix (one ``memids`` read; a
        path's labels are read once per search); the record is read when the entry's turn comes, after its
        group of equal update times is sorted."""
        nsb = ns.encode() + layout.SEP
        cursor = txn.cursor(db=self.db["memupd"])
        start = nsb if after is None else layout.mem_upd_key(ns, after[0], 0)
        if not cursor.set_range(start):
            return
        get = txn.get
        ids_db, items_db, names_db = self.db["memids"], self.db["memitems"], self.db["mempathid"]
        prefix = tuple(prefix)
        plen = len(prefix)
        paths: dict[bytes, tuple | None] = {}  # path id (8 bytes) -> (labels, encoded, id); None: not under prefix
        t0, t1 = len(nsb), len(nsb) + 8
        group: list = []
        group_time = None
        # a _Walk whose test is one key's lookup runs inline (no call per entry); its count is written back
        # before each item is handed out and its budget read again after (the caller may lift it)
        walk = accept if type(accept) is _Walk and accept.point is not None else None
        if walk is not None:
            head, xnsb = walk.point
            fdb, xdb = self.db["memfld"], self.db["memfldx"]
            seen, budget = walk.seen, walk.budget
        for k in cursor.iternext(values=False):
            if k[:t0] != nsb:
                break
            tb = k[t0:t1]
            if tb != group_time:
                if group:
                    if walk is None:
                        yield from self._flush(txn, items_db, group, after)
                    else:
                        walk.seen = seen
                        yield from self._flush(txn, items_db, group, after)
                        budget = walk.budget
                    group = []
                group_time = tb
            idb = k[t1:]
            if walk is not None:
                seen += 1
                if seen < budget and get(head + idb, db=fdb) is None and (
                        xnsb is None or get(xnsb + idb, db=xdb) is None):
                    continue
            elif accept is not None and not accept(idb):
                continue
            ikey = get(idb, db=ids_db)
            if ikey is None:
                continue
            ikey = bytes(ikey)
            pb8 = ikey[:8]
            path = paths.get(pb8, False)
            if path is False:
                name = layout.mempathname_decoder.decode(get(pb8, db=names_db))
                labels = tuple(name.labels)
                path = paths[pb8] = (None if name.ns != ns or (plen and labels[:plen] != prefix)
                                     else (labels, [lab.encode() for lab in labels], layout.read_u64(pb8)))
            if path is None:
                continue
            group.append((path[1], ikey[8:], ikey, path, tb))
        if walk is not None:
            walk.seen = seen
        if group:
            yield from self._flush(txn, items_db, group, after)

    @staticmethod
    def _flush(txn, items_db, group, after):
        if len(group) > 1:
            group.sort(key=lambda g: (g[0], g[1]))
        updated = layout.MASK64 - layout.read_u64(group[0][4])
        for lb, keyb, ikey, (labels, _, path_id), _tb in group:
            sk = (updated, lb, keyb)
            if after is not None and updated == after[0] and (lb, keyb) <= (list(after[1]), after[2]):
                continue
            raw = txn.get(ikey, db=items_db)
            if raw is None:
                continue
            yield sk, labels, keyb.decode(), layout.memitem_decoder.decode(raw), path_id

    def search(self, txn, ns: str, s: SearchInput, now: int, write_txn=None) -> tuple[list[Found], tuple | None]:
        """(items, position after the last one when more may follow) of a search.

        Without a vector: the field index's candidates when they are few (:meth:`_index_plan`), else the
        walk in the request's order (:meth:`_ordered`), skipping what the field index rules out
        (:meth:`_member_test`). When the walk can skip, the index is first tried with a small budget
        (INDEX_PROBE entries: a rare value answers at once), then the walk for as many items as the index
        budget, then the index with its whole budget, and then the walk goes on where it stopped. Each way
        gives the same items in the same order (tests/test_memory_search_paths.py; docs/memory.md §17.1)."""
        match = mf.matcher(s.filter)
        if s.vector is not None:
            return self._vector_search(txn, ns, s, now, match, write_txn), None
        cap = min(self.INDEX_CAP, max(self.INDEX_MIN, self.INDEX_PER_WANTED * (s.offset + s.limit)))
        plans = mi.plan(s.filter)
        test = self._member_test(txn, ns, s.filter, plans)
        planned = self._index_plan(txn, ns, s, now, match, cap if test is None else min(cap, self.INDEX_PROBE), plans)
        if planned is not None:
            out, last = planned
            self._finish(txn, out, now, s, write_txn)
            return out, last
        walk = None if test is None else _Walk(test, cap)
        out: list[Found] = []
        skipped = 0
        last = None
        more = False
        for sk, labels, key, rec, path_id in self._ordered(txn, ns, s.prefix, s.order, s.after, walk):
            if walk is not None and walk.seen >= walk.budget:
                walk.budget = float("inf")
                planned = self._index_plan(txn, ns, s, now, match, cap, plans)
                if planned is not None:
                    out, last = planned
                    self._finish(txn, out, now, s, write_txn)
                    return out, last
            if not visible(rec, now):
                continue
            enc = nodes.value_encoding(rec.value, txn.get)
            if match is not None and not self._matches(match, enc, labels, key):
                continue
            if skipped < s.offset:
                skipped += 1
                continue
            if len(out) == s.limit:
                more = True  # (page tokens only: limit/offset reads stop at the last item, as InMemoryStore)
                break
            f = Found(labels, key, rec, enc if s.values else None)
            f._path_id = path_id  # type: ignore[attr-defined]
            out.append(f)
            last = sk
            if len(out) == s.limit and not s.paged:
                break
        self._finish(txn, out, now, s, write_txn)
        return out, (last if more else None)

    INDEX_CAP = 2048  # index entries a plan may read at most
    #: a range of more entries than this many per item wanted (offset + limit), and at least INDEX_MIN, means
    #: matches are common: the ordered scan finds the page sooner than re-checking and sorting every candidate
    INDEX_PER_WANTED = 16
    INDEX_MIN = 256
    INDEX_PROBE = 64  # the first budget of the index when the walk can skip by the index (search)
    MEMBER_MAX_KEYS = 16  # point keys a membership test looks up per item at most

    def _member_test(self, txn, ns: str, flt, plans=None):
        """A test on an item id (8 bytes) that is False only for items that cannot match ``flt``, from its
        required equalities and ``IN``s (memory_index.plan's plans made of single keys): an item passes when,
        for each such plan, one of its keys has an entry for the item, or when the item is unindexed
        (``memfldx``). None when there is no such plan, or the filter can fail (LANGGRAPH_PYTHON comparisons,
        FAIL): there, which item fails first depends on every item being evaluated in order."""
        if flt is None or _can_fail(flt):
            return None
        heads = []
        nsb = ns.encode() + layout.SEP
        for intervals in (mi.plan(flt) if plans is None else plans):
            if intervals and len(intervals) <= self.MEMBER_MAX_KEYS and all(lo == hi for lo, hi in intervals):
                heads.append([nsb + lo for lo, _ in intervals])
        if not heads:
            return None
        heads.sort(key=len)
        get, fdb, xdb = txn.get, self.db["memfld"], self.db["memfldx"]
        cursor = txn.cursor(db=xdb)
        unindexed = cursor.set_range(nsb) and bytes(cursor.key()).startswith(nsb)  # any in this namespace
        if len(heads) == 1 and len(heads[0]) == 1:
            head = heads[0][0]
            if not unindexed:
                accept_one = lambda idb: get(head + idb, db=fdb) is not None  # noqa: E731
            else:
                def accept_one(idb: bytes) -> bool:
                    return get(head + idb, db=fdb) is not None or get(nsb + idb, db=xdb) is not None
            accept_one.point = (head, nsb if unindexed else None)  # (_by_update runs this one inline)
            return accept_one

        def accept(idb: bytes) -> bool:
            if unindexed and get(nsb + idb, db=xdb) is not None:
                return True
            for keys in heads:
                for head in keys:
                    if get(head + idb, db=fdb) is not None:
                        break
                else:
                    return False
            return True
        return accept

    def _index_plan(self, txn, ns: str, s: SearchInput, now: int, match, cap: int, plans=None):
        """(items, position after the last when more follow) by the field index, or None when it cannot help
        within ``cap`` entries: the candidates of the most selective indexable equality (plus the unindexed
        items), each re-checked with the whole filter, sorted in the request's order."""
        best = self._index_ids(txn, ns, s.filter, cap, plans)
        if best is None:
            return None
        names: dict = {}
        plen = len(s.prefix)
        order = s.order
        found = []
        for item_id in sorted(set(best)):
            ikey = txn.get(layout.u64(item_id), db=self.db["memids"])
            if ikey is None:
                continue
            ikey = bytes(ikey)
            path_id = layout.read_u64(ikey[:8])
            name = self._path_name(txn, path_id, names)
            if name.ns != ns or (plen and tuple(name.labels[:plen]) != tuple(s.prefix)):
                continue
            raw = txn.get(ikey, db=self.db["memitems"])
            if raw is None:
                continue
            rec = layout.memitem_decoder.decode(raw)
            if not visible(rec, now):
                continue
            key = ikey[8:].decode()
            labels = tuple(name.labels)
            enc = nodes.value_encoding(rec.value, txn.get)
            if not self._matches(match, enc, labels, key):
                continue
            lb = [lab.encode() for lab in labels]
            if order == ORDER_UPDATED_DESC:
                sk, rank = (rec.updated_us, lb, key.encode()), (-rec.updated_us, lb, key.encode())
            elif order == ORDER_INSERTION:
                prec = self._path(txn, ns, labels)
                sk = rank = (prec.first_seq, rec.ins_seq)
            else:
                sk = rank = (lb, key.encode())
            found.append((rank, sk, labels, key, rec, path_id, enc))
        found.sort(key=lambda e: e[0])
        if s.after is not None:
            a = tuple(s.after)
            if order == ORDER_UPDATED_DESC:
                bound = (-a[0], list(a[1]), a[2])
            elif order == ORDER_INSERTION:
                bound = (a[0], a[1])
            else:
                bound = (list(a[0]), a[1])
            found = [e for e in found if _cmp_key(e[0]) > _cmp_key(bound)]
        window = found[s.offset:s.offset + s.limit]
        out = []
        for rank, sk, labels, key, rec, path_id, enc in window:
            f = Found(labels, key, rec, enc if s.values else None)
            f._path_id = path_id  # type: ignore[attr-defined]
            out.append(f)
        more = s.paged and len(found) > s.offset + s.limit
        return out, (window[-1][1] if more and window else None)

    def _index_ids(self, txn, ns: str, flt, cap: int, plans=None) -> list[int] | None:
        """The ids of the items that may match ``flt`` by the field index (the smallest of its plans: a required
        equality, ``IN`` or number range, memory_index.plan; plus the unindexed items), or None when it has no
        plan or every plan reads more than ``cap`` entries (``plans``: memory_index.plan(flt), when known)."""
        if plans is None:
            plans = mi.plan(flt)
        if not plans:
            return None
        best = None
        fdb = self.db["memfld"]
        nsb = ns.encode() + layout.SEP
        for intervals in plans:
            keys: list[bytes] | None = []
            cursor = txn.cursor(db=fdb)
            for lo, hi in intervals:
                room = cap - len(keys)
                if not cursor.set_range(nsb + lo):
                    continue
                # slices of keys read at C speed (64, then doubling, room + 1 in all at most) until one ends
                # past the interval; the interval's keys are the first ones (the entries are sorted and
                # "within the interval" is a prefix of them), found by bisection
                bound = nsb + hi
                end = len(bound)
                it = cursor.iternext(values=False)
                got: list[bytes] = []
                step = 64
                while True:
                    want = min(step, room + 1 - len(got))
                    part = list(islice(it, want))
                    got += part
                    if len(part) < want or len(got) > room or part[-1][:end] > bound:
                        break
                    step *= 2
                n = bisect_right(got, bound, key=lambda k: k[:end])
                if n > room:
                    keys = None
                    break
                keys += got[:n]
            if keys is not None and (best is None or len(keys) < len(best)):
                best = keys
        if best is None:
            return None
        best = [layout.read_u64(k[-8:]) for k in best]
        cursor = txn.cursor(db=self.db["memfldx"])
        if cursor.set_range(nsb):
            for k in cursor.iternext(values=False):
                if not bytes(k).startswith(nsb):
                    break
                best.append(layout.read_u64(bytes(k)[-8:]))
        return best

    @staticmethod
    def _matches(match, enc: bytes, labels, key: str) -> bool:
        try:
            return match(enc)
        except mf.EvaluationError as e:
            raise ApiError("FILTER_EVALUATION_ERROR", f"filter: {e.exception}: {e.message}", field="filter",
                           exception=e.exception, exception_message=e.message, path="/".join(labels),
                           key=key) from None

    def _finish(self, txn, out: list[Found], now: int, s: SearchInput, write_txn) -> None:
        for f in out:
            if s.include_vectors:
                f.vectors = self._vectors(txn, f.rec)
            if s.refresh:
                self._refresh(f._path_id, f.key, f, now, write_txn)  # type: ignore[attr-defined]

    def _candidates(self, txn, ns: str, s: SearchInput, match):
        """(tie key, labels, key, record, path id) of the items under the prefix, for a vector query: ties go
        in the request's order. A filter that can fail (LANGGRAPH_PYTHON) is evaluated in that order, so the
        first error is the one the reference store raises; otherwise the items are read path by path (the
        cheapest walk) and tie keys stand in for the order."""
        if match is not None and mf.LANGGRAPH_PYTHON in mf.modes_of(s.filter):
            for pos, (sk, labels, key, rec, path_id) in enumerate(self._ordered(txn, ns, s.prefix, s.order, None)):
                yield pos, labels, key, rec, path_id
            return
        order = s.order
        pos = 0
        for labels, prec in self._paths_under(txn, ns, s.prefix):
            if prec.live <= 0:
                continue
            for key, rec in self._items_of(txn, prec.path_id):
                pos += 1  # walk position: path (label by label), then key = PATH_KEY order
                if order == ORDER_UPDATED_DESC:
                    tie = (-rec.updated_us, pos)
                elif order == ORDER_INSERTION:
                    tie = (prec.first_seq, rec.ins_seq)
                else:
                    tie = pos
                yield tie, labels, key, rec, prec.path_id

    def _vector_search(self, txn, ns: str, s: SearchInput, now: int, match, write_txn) -> list[Found]:
        q = s.vector
        raw = txn.get(layout.mem_space_key(ns, q.space), db=self.db["memspace"])
        if raw is None:
            raise ApiError("VECTOR_SPACE_NOT_FOUND", f"vector.space: no vector space {q.space!r} in namespace {ns!r}",
                           field="vector.space", space=q.space)
        space = layout.memspace_decoder.decode(raw)
        if space.dims != q.dims:
            raise ApiError("VECTOR_DIMENSION_MISMATCH",
                           f"vector.vector: {q.dims} dimensions, but vector space {q.space!r} has {space.dims}",
                           field="vector.vector", dims=space.dims, space=q.space)
        if q.unscored != UNSCORED_ONLY and (match is None or mf.LANGGRAPH_PYTHON not in mf.modes_of(s.filter)):
            out = self._vector_resident(txn, ns, s, now, match)
            if out is not None:
                self._finish_vector(txn, out, now, s, write_txn)
                return out
        return self._vector_scan(txn, ns, s, now, match, write_txn, space)

    VECTOR_INDEX_CAP = 4096  # field-index entries a vector search reads at most for its candidate mask

    def _vector_resident(self, txn, ns: str, s: SearchInput, now: int, match) -> list[Found] | None:
        """A vector search over the resident index (memory_vectors): the same items in the same order as
        :meth:`_vector_scan`, or None when the index is ahead of this snapshot (the scan answers then)."""
        q = s.vector
        meta = self.db["meta"]
        want = s.offset + s.limit
        with self.index.lock:
            st = self.index.view(txn, meta, ns, lambda t: self._vector_deltas(t, ns))
            if st is None:
                return None
            allowed = None if match is None else self._index_ids(txn, ns, s.filter, self.VECTOR_INDEX_CAP)
            if want <= 0:
                return []
            k = want if match is None else max(4 * want, 32)
            search = functools.partial(mv.search, st, q.space, q.vector, tuple(s.prefix), frozenset(q.fields), now,
                                       allowed)
            best, sp = search(k=k)
            if sp is None:
                return []
            order = s.order
            pkeys: dict[int, bytes] = {}

            def tie(slot: int):
                e = sp.slot_entry[slot]
                if order == ORDER_INSERTION:
                    return (st.first_seqs[e.pidx], e.ins_seq)
                pk = pkeys.get(e.pidx)
                if pk is None:
                    pk = pkeys[e.pidx] = layout.mem_path_key(ns, st.paths[e.pidx])
                if order == ORDER_UPDATED_DESC:
                    return (-e.updated_us, pk, e.key.encode())
                return (pk, e.key.encode())

            out: list[Found] = []
            passed = done = 0
            while True:
                sel = vectors.select_top(best, k)
                ranked = sorted(sel, key=lambda slot: (-best[slot], tie(slot)))
                for slot in ranked[done:]:
                    e = sp.slot_entry[slot]
                    path_id = st.path_of[e.pidx]
                    rec = self._item(txn, path_id, e.key)
                    if rec is None or rec.item_id != e.item_id or rec.version != e.version:
                        return None  # never expected: the index and the snapshot disagree; the scan is the truth
                    labels = st.paths[e.pidx]
                    enc = None
                    if match is not None:
                        enc = nodes.value_encoding(rec.value, txn.get)
                        if not self._matches(match, enc, labels, e.key):
                            continue
                    passed += 1
                    if passed <= s.offset:
                        continue
                    f = Found(labels, e.key, rec, enc)
                    f._path_id = path_id  # type: ignore[attr-defined]
                    f.score = best[slot]
                    rows = [(fld, row) for fld, row in e.rows if not q.fields or fld in q.fields]
                    scores = vectors.cosine_scores(sp.buf, sp.dims, array("q", [r for _, r in rows]), q.vector)
                    f.field = next(fld for (fld, _), sc in zip(rows, scores) if sc == f.score)
                    out.append(f)
                    if passed >= want:
                        return out
                done = len(ranked)
                if len(sel) < k:
                    return out
                k *= 8
                best, sp = search(k=k)  # (only the top k kept a score: ranked grows as a prefix of the new one)

    def _finish_vector(self, txn, out: list[Found], now: int, s: SearchInput, write_txn) -> None:
        for f in out:
            if s.values and f.value is None:
                f.value = nodes.value_encoding(f.rec.value, txn.get)
            elif not s.values:
                f.value = None
        self._finish(txn, out, now, s, write_txn)

    def _vector_scan(self, txn, ns: str, s: SearchInput, now: int, match, write_txn, space) -> list[Found]:
        """A vector search by reading every candidate under the prefix from the snapshot (the reference the
        resident index is tested against; it also serves UNSCORED_ONLY and LANGGRAPH_PYTHON filters)."""
        q = s.vector
        fields = set(q.fields)
        space_name = q.space
        # A filter that never fails is checked lazily, best scores first, until offset + limit items pass: the
        # same items as filtering first (ties keep the request's order), without decoding every value.
        lazy = match is not None and q.unscored != UNSCORED_ONLY and mf.LANGGRAPH_PYTHON not in mf.modes_of(s.filter)
        scored: list = []  # (tie key, labels, key, record, path id) of items with a vector in the space
        wanted_of: list = []  # (record, wanted fields), aligned with scored
        unscored: list = []
        for cand in self._candidates(txn, ns, s, match):
            rec = cand[3]
            if rec.expires_us and rec.expires_us <= now:
                continue
            if match is not None and not lazy and not self._matches(
                    match, nodes.value_encoding(rec.value, txn.get), cand[1], cand[2]):
                continue
            if rec.space == space_name and rec.vector_fields:
                wanted = rec.vector_fields if not fields else [f for f in rec.vector_fields if f in fields]
                if wanted:
                    scored.append(cand)
                    wanted_of.append((rec, wanted))
                    continue
            unscored.append(cand)

        def found(cand) -> Found:
            f = Found(cand[1], cand[2], cand[3])
            f._path_id = cand[4]  # type: ignore[attr-defined]
            return f

        if q.unscored == UNSCORED_ONLY:
            unscored.sort(key=lambda e: e[0])
            out = [found(c) for c in unscored[s.offset:s.offset + s.limit]]
        else:
            rows = mv.load_rows(txn, self.db, space, wanted_of)
            want = s.offset + s.limit
            ranked = mv.top_items(rows, q.vector, None if lazy else want, [c[0] for c in scored])
            out = []
            passed = 0
            for i, score, fld in ranked:
                cand = scored[i]
                if lazy:
                    enc = nodes.value_encoding(cand[3].value, txn.get)
                    if not self._matches(match, enc, cand[1], cand[2]):
                        continue
                passed += 1
                if passed <= s.offset:
                    continue
                f = found(cand)
                f.score, f.field = score, fld
                out.append(f)
                if passed >= want:
                    break
        self._finish_vector(txn, out, now, s, write_txn)
        return out

    # ---------------------------------------------------------- namespaces

    def list_paths(self, txn, ns: str, q: ListInput, now: int) -> tuple[list[tuple[str, ...]], tuple | None]:
        lead = []
        for seg in q.prefix:
            if seg is None:
                break
            lead.append(seg)
        out: list[tuple[str, ...]] = []
        skipped = 0
        last = None
        after = tuple(q.after) if q.after is not None else None
        for labels, prec in self._paths_under(txn, ns, lead):
            if not _pattern_match(labels, q.prefix, q.suffix):
                continue
            if not q.include_empty and not self._has_visible(txn, prec, now):
                continue
            shown = labels if q.max_depth is None else labels[:q.max_depth]
            if last is not None and shown == last:
                continue
            if out and shown == out[-1]:
                continue
            if after is not None and [x.encode() for x in shown] <= [x.encode() for x in after]:
                continue
            if skipped < q.offset:
                skipped += 1
                last = shown
                continue
            if len(out) == q.limit:
                return out, tuple(out[-1])
            out.append(shown)
            last = shown
        return out, None

    def _has_visible(self, txn, prec: MemPathRec, now: int) -> bool:
        if prec.live <= 0:
            return False
        return any(visible(rec, now) for _, rec in self._items_of(txn, prec.path_id))

    # ---------------------------------------------------------- history

    def history(self, txn, ns: str, path, key: str, before: int | None, size: int
                ) -> tuple[list[tuple[int, MemRevRec]], int | None]:
        """((version, revision) newest first, the version to continue below when more follow)."""
        prec = self._path(txn, ns, path)
        if prec is None:
            raise not_found(path, key)
        prefix = layout.mem_hist_prefix(prec.path_id, key)
        cursor = txn.cursor(db=self.db["memhist"])
        start = prefix + layout.u64(before) if before is not None else layout.prefix_end(prefix)
        found = cursor.set_range(start) if start is not None else False
        found = cursor.prev() if found else cursor.last()
        out = []
        while found:
            k = bytes(cursor.key())
            if not k.startswith(prefix):
                break
            rev = layout.memrev_decoder.decode(cursor.value())
            if rev.key == key:
                if len(out) == size:
                    return out, out[-1][0]
                out.append((layout.read_u64(k[-8:]), rev))
            found = cursor.prev()
        if not out and before is None:
            raise not_found(path, key)
        return out, None

    def value_of(self, txn, node_id: bytes) -> bytes:
        return nodes.value_encoding(node_id, txn.get)

    # ---------------------------------------------------------- the sweeper

    def sweep_job(self, txn, ns: str | None, now: int, start: bytes = b"",
                  max_items: int = limits.MEMORY_SWEEP_BATCH) -> tuple[int, bytes | None]:
        """Expire at most ``max_items`` items whose expiry is not after ``now`` (only namespace ``ns`` when
        given): (how many, where the next job starts, None when nothing is left)."""
        cursor = txn.cursor(db=self.db["memexp"])
        names: dict = {}
        doomed = []
        looked = 0
        nxt = None
        if cursor.set_range(start):
            for k in cursor.iternext(values=False):
                k = bytes(k)
                if layout.read_u64(k[:8]) > now:
                    break
                if len(doomed) >= max_items or looked >= 4 * max_items:
                    nxt = k
                    break
                looked += 1
                doomed.append(k)
        n = 0
        for k in doomed:
            expires, item_id = layout.read_u64(k[:8]), layout.read_u64(k[8:])
            ikey = txn.get(layout.u64(item_id), db=self.db["memids"])
            if ikey is None:
                txn.delete(k, db=self.db["memexp"])
                continue
            ikey = bytes(ikey)
            path_id = layout.read_u64(ikey[:8])
            name = self._path_name(txn, path_id, names)
            if ns is not None and name.ns != ns:
                continue
            key = ikey[8:].decode()
            rec = self._item(txn, path_id, key)
            if rec is None or rec.item_id != item_id or rec.expires_us != expires or visible(rec, now):
                continue
            prec = self._path(txn, name.ns, name.labels)
            self._remove(txn, name.ns, name.labels, prec, rec, key, REV_EXPIRE, now, SWEEP_ACTOR, NO_PROVENANCE)
            n += 1
        return n, nxt

    # ---------------------------------------------------------- start-up

    def upgrade_field_index(self) -> int | None:
        """Rebuild the field index when ``meta`` names another key format than memory_index.FORMAT (stores
        before format 2 hashed whole strings, which ranges cannot read): every entry is dropped and made again
        from the items, in one write. How many items were indexed, or None when the format was current."""
        meta = self.db["meta"]
        with self.store.read() as txn:
            if txn.get(mi.FORMAT_KEY, db=meta) == mi.FORMAT:
                return None

        def rebuild(txn) -> int:
            for name in ("memfld", "memfldx"):
                cursor = txn.cursor(db=self.db[name])
                while cursor.first():
                    cursor.delete()
            n = 0
            items = self.db["memitems"]
            for k, raw in txn.cursor(db=self.db["mempaths"]).iternext():
                k = bytes(k)
                ns = k[:k.index(layout.SEP)].decode()
                prefix = layout.u64(layout.mempath_decoder.decode(raw).path_id)
                cursor = txn.cursor(db=items)
                if not cursor.set_range(prefix):
                    continue
                for ik, iraw in cursor.iternext():
                    if not bytes(ik).startswith(prefix):
                        break
                    rec = layout.memitem_decoder.decode(iraw)
                    self._index_fields(txn, ns, rec.item_id, nodes.value_encoding(rec.value, txn.get), add=True)
                    n += 1
            txn.put(mi.FORMAT_KEY, mi.FORMAT, db=meta)
            return n
        return self.store.write(rebuild)

    def build_index(self) -> int:
        """Load every stored vector into the resident index (start-up); how many items have vectors. First
        brings the field index to its current format (:meth:`upgrade_field_index`)."""
        self.upgrade_field_index()
        with self.store.read() as txn, self.index.lock:
            names = set()
            for k in txn.cursor(db=self.db["memspace"]).iternext(values=False):
                k = bytes(k)
                names.add(k[:k.index(layout.SEP)].decode())
            for ns in sorted(names):
                self.index.view(txn, self.db["meta"], ns, lambda t, ns=ns: self._vector_deltas(t, ns))
        return len(self.index)


class _Walk:
    """The membership test (:meth:`Memory._member_test`) of a search's walk, with its budget: ``seen`` entries
    looked at; from ``budget`` on, every entry is let through (the search then gives the index its whole
    budget and lifts this one; the items let through are re-checked like all others). ``point`` is the test's
    (key prefix, ``memfldx`` prefix or None) when it is one key's lookup, which :meth:`Memory._by_update` runs
    inline; the other orders call it."""

    __slots__ = ("test", "seen", "budget", "point")

    def __init__(self, test, budget) -> None:
        self.test, self.seen, self.budget = test, 0, budget
        self.point = getattr(test, "point", None)

    def __call__(self, idb: bytes) -> bool:
        self.seen += 1
        return self.seen >= self.budget or self.test(idb)


def _can_fail(node) -> bool:
    """Whether evaluating the filter tree may raise (a LANGGRAPH_PYTHON comparison or a FAIL node)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if type(n) is mf.Cond:
            if n.mode == mf.LANGGRAPH_PYTHON or n.op == mf.FAIL:
                return True
        elif type(n) is mf.Not:
            stack.append(n.child)
        else:
            stack.extend(n.children)
    return False


def _cmp_key(k) -> tuple:
    """A sort key with its lists as tuples (page tokens bring lists back)."""
    return tuple(tuple(x) if isinstance(x, list) else x for x in k)


def _pattern_match(labels, prefix, suffix) -> bool:
    if len(labels) < len(prefix) or len(labels) < len(suffix):
        return False
    for lab, pat in zip(labels, prefix):
        if pat is not None and lab != pat:
            return False
    if suffix:
        for lab, pat in zip(labels[len(labels) - len(suffix):], suffix):
            if pat is not None and lab != pat:
                return False
    return True


def batch_order(ops: list[tuple[str, object]], semantics: int) -> list[tuple[int, str, object, bool]]:
    """The order a batch's ops run in: (index, kind, op, applied). SEQUENTIAL: as given. SNAPSHOT: every read
    first (op order); then, for each item written, its last write, in the order the items were first written
    in the batch (what LangGraph's stores do: a dict of puts keyed by item); earlier writes are dropped."""
    if semantics != SNAPSHOT:
        return [(i, kind, op, True) for i, (kind, op) in enumerate(ops)]
    reads = [(i, kind, op, True) for i, (kind, op) in enumerate(ops) if kind not in ("put", "delete")]
    last: dict = {}  # item -> index of its last write, in first-write order
    for i, (kind, op) in enumerate(ops):
        if kind in ("put", "delete"):
            last[(tuple(op.path), op.key)] = i
    applied = [(i, ops[i][0], ops[i][1], True) for i in last.values()]
    kept = set(last.values())
    dropped = [(i, kind, op, False) for i, (kind, op) in enumerate(ops)
               if kind in ("put", "delete") and i not in kept]
    return reads + applied + dropped


__all__ = ["Memory", "PutInput", "DeleteInput", "SearchInput", "ListInput", "VectorQuery", "Found", "batch_order"]
