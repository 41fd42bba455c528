"""records: reading and writing the records of layout.py that more than one resource reaches.

A thread's record (its tkey under ``(namespace, thread_id)``), checkpoint
manifests, the pending-write rows under a checkpoint, request records: these
are bytes at keys, with no rule of any resource in them. Every resource of
``sidecar.state`` finds its thread and its checkpoints here, so no resource
module needs another one to look a record up; what a resource *allows*
(etags, leases, run checks) stays in that resource's module.

Copies and deletes keep the garbage collector's keep-set up to date
(``Store.gc_keep``, see gc.py): a node a copied manifest or write refers to
survives a collection that runs meanwhile.
"""
from __future__ import annotations

from typing import Iterator

import msgspec

from .. import limits
from . import layout, nodes, usage
from . import hotpath as hp
from .layout import Manifest, ThreadRec
from .store import Store, now_us

#: agentstate.v1.ThreadStatus.THREAD_STATUS_IDLE (tests/test_layers.py checks the values match the proto)
THREAD_STATUS_IDLE = 1
EMPTY_MAP = b"\x80"  # the canonical encoding of {}: a record's metadata when it has none


# ----------------------------------------------------------------- threads

def thread(txn, store: Store, ns: str, thread_id: str) -> ThreadRec | None:
    """The record of thread ``thread_id`` of namespace ``ns``, or None — also when its conversation expired
    under an IDLE_ACTION_DELETE policy (invisible from that instant, before the sweeper reclaims it)."""
    raw = txn.get(layout.thread_key(ns, thread_id), db=store.db["threads"])
    if raw is None:
        return None
    rec = layout.thread_decoder.decode(raw)
    if rec.last_active_us and idle_state(txn, store, ns, rec) == IDLE_DELETE:
        return None
    return rec


def thread_any(txn, store: Store, ns: str, thread_id: str) -> ThreadRec | None:
    """The stored record, expired or not (the sweeper's view)."""
    raw = txn.get(layout.thread_key(ns, thread_id), db=store.db["threads"])
    return None if raw is None else layout.thread_decoder.decode(raw)


# --------------------------------------------------------------- idle expiry of conversations

#: agentstate.v1.IdleAction (tests/test_layers.py checks the numbers)
IDLE_CLOSE, IDLE_DELETE = 1, 2
#: agentstate.v1.PolicySource
SOURCE_DEFAULT, SOURCE_NAMESPACE, SOURCE_THREAD = 1, 2, 3
_NS_CACHE_MAX = 10_000


def ns_idle(txn, store: Store, ns: str) -> tuple[int, int] | None:
    """The namespace's idle policy (ttl_ms, action) or None, cached per namespace (the cache entry is dropped
    by every change: state/convpolicy.py)."""
    cache = store.ns_idle_cache
    try:
        return cache[ns]
    except KeyError:
        pass
    raw = txn.get(ns.encode(), db=store.db["nsconf"])
    got = None if raw is None else layout.nsconf_decoder.decode(raw).idle
    if len(cache) >= _NS_CACHE_MAX:
        cache.clear()
    cache[ns] = got
    return got


def idle_policy(txn, store: Store, ns: str, rec: ThreadRec) -> tuple[int, int, int]:
    """(ttl_ms (0: never), action, PolicySource) of the idle policy in effect on a thread."""
    if rec.idle_ttl_ms >= 0:
        return rec.idle_ttl_ms, rec.idle_action or IDLE_CLOSE, SOURCE_THREAD
    got = ns_idle(txn, store, ns)
    if got is not None:
        return got[0], got[1] or IDLE_CLOSE, SOURCE_NAMESPACE
    return 0, IDLE_CLOSE, SOURCE_DEFAULT


def expire_us(txn, store: Store, ns: str, rec: ThreadRec) -> int:
    """When the thread's conversation expires (0: never, or it has no conversation)."""
    if not rec.last_active_us:
        return 0
    ttl, _, _ = idle_policy(txn, store, ns, rec)
    return rec.last_active_us + ttl * 1000 if ttl else 0


def idle_state(txn, store: Store, ns: str, rec: ThreadRec) -> int:
    """0 while the conversation is open (or the thread has none), IDLE_CLOSE when it is closed (by the sweeper
    or because it expired under a CLOSE policy), IDLE_DELETE when it expired under a DELETE policy."""
    if not rec.last_active_us:
        return 0
    ttl, action, _ = idle_policy(txn, store, ns, rec)
    if ttl and store.clock() >= rec.last_active_us + ttl * 1000:
        return action
    return IDLE_CLOSE if rec.closed else 0


def queue_reclaim(txn, store: Store, ns: str, thread_id: str, tkey: int) -> None:
    """Queue the contents of a thread whose record was dropped (idle DELETE) for the sweeper to delete."""
    txn.put(layout.u64(tkey), layout.ns_key(ns, thread_id), db=store.db["reclaim"])


def new_tkey(txn, store: Store) -> int:
    """The next thread key (8 bytes, big-endian, in every per-thread key): never reused."""
    meta = store.db["meta"]
    tkey = layout.read_u64(txn.get(b"next_tkey", db=meta))
    txn.put(b"next_tkey", layout.u64(tkey + 1), db=meta)
    return tkey


def create_thread(txn, store: Store, ns: str, thread_id: str, metadata: bytes = EMPTY_MAP) -> ThreadRec:
    """A new thread record (idle, version 1) with a new tkey; ``metadata`` is its canonical encoding. A record
    still stored under the id (a thread expired under an idle DELETE policy, invisible already) is replaced and
    its contents queued for reclaiming."""
    old = thread_any(txn, store, ns, thread_id)
    if old is not None:
        queue_reclaim(txn, store, ns, thread_id, old.tkey)
        usage.drop_thread(txn, store, ns, old.tkey)
    now = now_us()
    rec = ThreadRec(layout.FORMAT_VERSION, new_tkey(txn, store), now, now, msgspec.Raw(metadata), 1,
                    THREAD_STATUS_IDLE)
    save_thread(txn, store, ns, thread_id, rec)
    usage.new_thread(txn, store, ns, rec.tkey)
    return rec


def save_thread(txn, store: Store, ns: str, thread_id: str, rec: ThreadRec) -> None:
    txn.put(layout.thread_key(ns, thread_id), layout.encode(rec), db=store.db["threads"])


def threads_from(txn, store: Store, ns: str, start_id: str | None = None) -> Iterator[tuple[str, ThreadRec]]:
    """(thread_id, record) of a namespace's threads in id order, from ``start_id`` on."""
    prefix = layout.thread_prefix(ns)
    cursor = txn.cursor(db=store.db["threads"])
    found = cursor.set_range(prefix + (start_id.encode() if start_id else b""))
    while found:
        key = cursor.key()
        if not key.startswith(prefix):
            return
        rec = layout.thread_decoder.decode(cursor.value())
        if not rec.last_active_us or idle_state(txn, store, ns, rec) != IDLE_DELETE:
            yield layout.thread_id_of(key, len(prefix)), rec
        found = cursor.next()


def delete_prefix(txn, db, prefix: bytes) -> int:
    """Delete every key of ``db`` that starts with ``prefix``; returns how many."""
    cursor = txn.cursor(db=db)
    n = 0
    if not cursor.set_range(prefix):
        return 0
    while cursor.key().startswith(prefix):
        n += 1
        if not cursor.delete():
            break
    return n


# ----------------------------------------------------------------- checkpoints

def manifest(txn, store: Store, tkey: int, cns: str, checkpoint_id: str) -> Manifest | None:
    raw = txn.get(layout.ckpt_key(tkey, cns, checkpoint_id), db=store.db["ckpts"])
    return None if raw is None else layout.manifest_decoder.decode(raw)


def latest(txn, store: Store, tkey: int, cns: str) -> tuple[str, Manifest] | None:
    """(checkpoint_id, manifest) of the newest checkpoint of (thread, cns)."""
    prefix = layout.cns_prefix(tkey, cns)
    cursor = txn.cursor(db=store.db["ckpts"])
    end = layout.prefix_end(prefix)
    if end is None or not cursor.set_range(end):
        if not cursor.last():
            return None
    elif not cursor.prev():
        return None
    key = cursor.key()
    if not key.startswith(prefix):
        return None
    return bytes(key[len(prefix):]).decode(), layout.manifest_decoder.decode(cursor.value())


def root_hashes(m: Manifest, fetch) -> tuple[list[tuple[str, bytes, bytes]], bytes | None]:
    """[(channel, root hash, root id)] of a manifest and its extra's hash (hashes live in the records)."""
    roots = [(name, nodes.record(fetch, node_id)[:hp.HASH_SIZE], node_id) for name, node_id in m.channels]
    extra = nodes.record(fetch, m.extra)[:hp.HASH_SIZE] if m.extra else None
    return roots, extra


def etag_of(checkpoint_id: str, m: Manifest, fetch) -> str:
    roots, extra = root_hashes(m, fetch)
    return layout.checkpoint_etag(checkpoint_id, m.parent_id, m.metadata, [(n, h) for n, h, _ in roots], extra,
                                  m.schema_version, m.schema)


def write_rows(txn, store: Store, tkey: int, cns: str, checkpoint_id: str):
    """(task_id, idx, WriteRec) of one checkpoint's pending writes, in key order."""
    prefix = layout.writes_prefix(tkey, cns, checkpoint_id)
    cursor = txn.cursor(db=store.db["writes"])
    if not cursor.set_range(prefix):
        return
    for key, value in cursor.iternext():
        if not key.startswith(prefix):
            return
        task_id, idx = layout.split_write_suffix(key[len(prefix):])
        yield task_id, idx, layout.write_decoder.decode(value)


def checkpoint_keys(txn, store: Store, prefix: bytes) -> list[bytes]:
    """The ckpts keys that start with ``prefix`` (a thread's, or one checkpoint namespace's), in key order."""
    cursor = txn.cursor(db=store.db["ckpts"])
    keys = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            keys.append(bytes(key))
    return keys


def delete_checkpoint_at(txn, store: Store, ns: str, key: bytes, m: Manifest | None = None) -> None:
    """Delete one checkpoint (by ckpts key) with its pending writes and run-index entry."""
    db = store.db["ckpts"]
    if m is None:
        raw = txn.get(key, db=db)
        if raw is None:
            return
        m = layout.manifest_decoder.decode(raw)
    usage.delete_checkpoint(txn, store, ns, key)  # (its charges are in the records below: first)
    txn.delete(key, db=db)
    if m.run_id is not None:
        tkey, cns, cid = layout.split_ckpt_key(key)
        txn.delete(layout.run_key(ns, m.run_id, tkey, cns, cid), db=store.db["runidx"])
    delete_prefix(txn, store.db["writes"], key + layout.SEP)


def delete_checkpoints(txn, store: Store, ns: str, tkey: int) -> int:
    """Delete every checkpoint and pending write of a thread; returns checkpoints deleted."""
    keys = checkpoint_keys(txn, store, layout.tkey_prefix(tkey))
    for key in keys:
        delete_checkpoint_at(txn, store, ns, key)
    left = usage.writes_charge(txn, store, layout.tkey_prefix(tkey))  # writes without a checkpoint of their own
    if delete_prefix(txn, store.db["writes"], layout.tkey_prefix(tkey)):
        usage.refund_writes(txn, store, ns, tkey, left)
    return len(keys)


def delete_run_checkpoints(txn, store: Store, ns: str, tkey: int, run_id: str) -> int:
    """Delete the checkpoints run ``run_id`` made on thread ``tkey`` (by the run index) and the run's pending
    writes there; returns checkpoints deleted."""
    idx = store.db["runidx"]
    prefix = layout.run_prefix(ns, run_id)
    ckeys = [k for k in layout.run_checkpoints(txn, idx, ns, run_id) if layout.split_ckpt_key(k)[0] == tkey]
    for ckey in ckeys:
        delete_checkpoint_at(txn, store, ns, ckey)
        txn.delete(prefix + ckey, db=idx)
    db = store.db["writes"]
    tprefix = layout.tkey_prefix(tkey)
    doomed = []
    charged = 0
    cursor = txn.cursor(db=db)
    if cursor.set_range(tprefix):
        for key, value in cursor.iternext():
            if not key.startswith(tprefix):
                break
            w = layout.write_decoder.decode(value)
            if w.run_id == run_id:
                doomed.append(bytes(key))
                charged += max(w.charge, 0)
    for key in doomed:
        txn.delete(key, db=db)
    usage.refund_writes(txn, store, ns, tkey, charged)
    return len(ckeys)


def put_manifest(txn, store: Store, ns: str, tkey: int, cns: str, checkpoint_id: str, m: Manifest) -> None:
    """Store a new checkpoint made of stored nodes (its run-index entry with it; the GC keeps its nodes)."""
    key = layout.ckpt_key(tkey, cns, checkpoint_id)
    raw = txn.get(key, db=store.db["ckpts"])
    old = None if raw is None else layout.manifest_decoder.decode(raw).charge
    if old is None:  # a new checkpoint (a rewrite keeps its charge)
        usage.put_checkpoint(txn, store, ns, tkey, key, m, len(bytes(m.metadata)) + usage.stored_bytes(txn, store, m))
    else:
        m.charge = old
        txn.put(key, layout.encode(m), db=store.db["ckpts"])
    if m.run_id is not None:
        txn.put(layout.run_key(ns, m.run_id, tkey, cns, checkpoint_id), layout.run_entry(ns, m.run_id),
                db=store.db["runidx"])
    _keep_manifest(store, m)


def _keep_manifest(store: Store, m: Manifest) -> None:
    keep = store.gc_keep
    if keep is not None:
        keep.update(node_id for _, node_id in m.channels)
        if m.extra:
            keep.add(m.extra)


def copy_checkpoint(txn, store: Store, ns: str, src_tkey: int, dst_tkey: int, cns: str, checkpoint_id: str,
                    overwrite: bool = True) -> bool:
    """Copy one checkpoint manifest with its pending writes to another thread (values are shared)."""
    ckpts, writes = store.db["ckpts"], store.db["writes"]
    raw = txn.get(layout.ckpt_key(src_tkey, cns, checkpoint_id), db=ckpts)
    if raw is None:
        return False
    src_key, dst_key = layout.ckpt_key(src_tkey, cns, checkpoint_id), layout.ckpt_key(dst_tkey, cns, checkpoint_id)
    if not overwrite and txn.get(dst_key, db=ckpts) is not None:
        return False
    m = layout.manifest_decoder.decode(raw)
    usage.copy_checkpoint(txn, store, ns, src_key, dst_key, m)  # stores it, charged there
    if m.run_id is not None:
        txn.put(layout.run_key(ns, m.run_id, dst_tkey, cns, checkpoint_id), layout.run_entry(ns, m.run_id),
                db=store.db["runidx"])
    _keep_manifest(store, m)
    src_prefix = layout.writes_prefix(src_tkey, cns, checkpoint_id)
    cursor = txn.cursor(db=writes)
    rows = []
    if cursor.set_range(src_prefix):
        for key, value in cursor.iternext():
            if not key.startswith(src_prefix):
                break
            rows.append((layout.writes_prefix(dst_tkey, cns, checkpoint_id) + bytes(key[len(src_prefix):]),
                         bytes(value)))
    keep = store.gc_keep
    for key, value in rows:
        usage.put_write_raw(txn, store, ns, dst_tkey, key, value)
        if keep is not None:
            keep.add(layout.write_decoder.decode(value).value)
    return True


def copy_checkpoints(txn, store: Store, ns: str, src_tkey: int, dst_tkey: int) -> int:
    """Copy every manifest, pending write and run-index entry of a thread to another (values are shared by
    hash); returns checkpoints copied."""
    keep = store.gc_keep
    src_prefix = layout.tkey_prefix(src_tkey)
    dst_prefix = layout.tkey_prefix(dst_tkey)
    n = 0
    for db_name in ("ckpts", "writes"):
        db = store.db[db_name]
        cursor = txn.cursor(db=db)
        rows = []
        if cursor.set_range(src_prefix):
            for key, value in cursor.iternext():
                if not key.startswith(src_prefix):
                    break
                rows.append((dst_prefix + bytes(key[8:]), bytes(value)))
        for key, value in rows:
            txn.put(key, value, db=db)
            if db_name == "ckpts":
                n += 1
                m = layout.manifest_decoder.decode(value)
                if m.run_id is not None:
                    _, cns, cid = layout.split_ckpt_key(key)
                    txn.put(layout.run_key(ns, m.run_id, dst_tkey, cns, cid), layout.run_entry(ns, m.run_id),
                            db=store.db["runidx"])
                _keep_manifest(store, m)
            elif keep is not None:
                keep.add(layout.write_decoder.decode(value).value)
    usage.copy_thread(txn, store, ns, dst_tkey)
    return n


# ----------------------------------------------------------------- request records

def expire_requests(txn, db: dict, now: int | None = None, max_records: int = 10_000) -> int:
    """Delete request records (request_id answers) older than the retention; returns how many went."""
    horizon = (now or now_us()) - limits.REQUEST_ID_RETENTION_SECONDS * 1_000_000
    cursor = txn.cursor(db=db["reqtime"])
    removed = 0
    if not cursor.first():
        return 0
    while removed < max_records:
        key = cursor.key()
        if not key or layout.read_u64(key[:8]) >= horizon:
            break
        txn.delete(bytes(key[8:]), db=db["requests"])
        removed += 1
        cursor.delete()  # moves to the next record (key() is empty past the end)
    return removed
