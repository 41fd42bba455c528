"""threads: a thread's record (metadata, status, etag) and the rules for creating, changing and copying one.

A thread is found by ``(namespace, thread_id)``; its record holds the thread
key (tkey) every per-thread key starts with. Metadata is kept as its
canonical encoding (storage/metadata.py); the etag moves with each metadata
change (``version``), not with the status, which the run machinery keeps in
step (state/runstate.py). Deleting a thread touches the records of every
resource on it, so it is composed in ops/threads.py; this module drops the
thread's own record.
"""
from __future__ import annotations

from typing import Iterator

import msgspec

from ..errors import ApiError, thread_not_found
from ..storage import layout, metadata, records, usage
from ..storage.layout import ThreadRec
from ..storage.store import Store, now_us

# agentstate.v1.IfExists (tests/test_layers.py checks the numbers)
IF_EXISTS_ERROR, IF_EXISTS_RETURN, IF_EXISTS_MERGE_METADATA = 1, 2, 3


def require(txn, store: Store, ns: str, thread_id: str, field: str = "thread_id") -> ThreadRec:
    """The thread's record; THREAD_NOT_FOUND naming ``field`` when there is none."""
    rec = records.thread(txn, store, ns, thread_id)
    if rec is None:
        raise thread_not_found(ns, thread_id, field)
    return rec


def check_etag(rec: ThreadRec, etag: str) -> None:
    """ETAG_MISMATCH when ``etag`` is given and is not the thread's current one."""
    if etag and etag != layout.thread_etag(rec):
        raise ApiError("ETAG_MISMATCH", f"thread etag {etag!r} is stale", field="etag",
                       etag=etag, current_etag=layout.thread_etag(rec))


def _set_metadata(txn, store: Store, ns: str, thread_id: str, rec: ThreadRec, items: dict[str, bytes],
                  field: str) -> None:
    rec.metadata = msgspec.Raw(metadata.encode(items, field))
    rec.version += 1
    rec.updated_us = now_us()
    records.save_thread(txn, store, ns, thread_id, rec)


def create(txn, store: Store, ns: str, thread_id: str, items: dict[str, bytes], if_exists: int,
           ) -> tuple[ThreadRec, bool]:
    """(record, created): a new thread with metadata ``items``, or what ``if_exists`` says for an existing one
    (THREAD_ALREADY_EXISTS, the thread unchanged, or its metadata merged with ``items``)."""
    rec = records.thread(txn, store, ns, thread_id)
    if rec is None:
        return records.create_thread(txn, store, ns, thread_id, metadata.encode(items, "metadata")), True
    if if_exists == IF_EXISTS_ERROR:
        raise ApiError("THREAD_ALREADY_EXISTS", f"thread {thread_id!r} exists in namespace {ns!r}",
                       field="thread_id", thread_id=thread_id)
    if if_exists == IF_EXISTS_MERGE_METADATA and items:
        merged = metadata.items(rec.metadata)
        merged.update(items)
        _set_metadata(txn, store, ns, thread_id, rec, merged, "metadata")
    return rec, False


def update(txn, store: Store, ns: str, thread_id: str, *, etag: str, sets: dict[str, bytes],
           removes: list[str], replace: bool) -> ThreadRec:
    """Change a thread's metadata: drop ``removes``, then set ``sets`` (on empty metadata with ``replace``)."""
    rec = require(txn, store, ns, thread_id)
    check_etag(rec, etag)
    merged = {} if replace else metadata.items(rec.metadata)
    for k in removes:
        merged.pop(k, None)
    merged.update(sets)
    _set_metadata(txn, store, ns, thread_id, rec, merged, "set_metadata")
    return rec


def matching(txn, store: Store, ns: str, wanted: dict[str, bytes], after: str | None,
             ) -> Iterator[tuple[str, ThreadRec]]:
    """(thread_id, record) of the namespace's threads whose metadata holds ``wanted``, in id order, after
    thread ``after`` (a page's last)."""
    start = after + "\x00" if after else None
    for thread_id, rec in records.threads_from(txn, store, ns, start):
        if metadata.matches(rec.metadata, wanted):
            yield thread_id, rec


def drop(txn, store: Store, ns: str, thread_id: str) -> None:
    """Remove the thread's own record (what it held is removed by ops/threads.py first, or later by a
    reclaim); its usage is refunded (storage/usage.py)."""
    key = layout.thread_key(ns, thread_id)
    raw = txn.get(key, db=store.db["threads"])
    if raw is not None:
        usage.drop_thread(txn, store, ns, layout.thread_decoder.decode(raw).tkey)
    txn.delete(key, db=store.db["threads"])


def copy(txn, store: Store, ns: str, src_id: str, dst_id: str, items: dict[str, bytes], replace: bool,
         ) -> tuple[ThreadRec, int]:
    """(new thread's record, checkpoints copied): thread ``dst_id`` with ``src_id``'s checkpoints and
    pending writes (values shared by hash) and its metadata updated with ``items`` (or ``items`` alone)."""
    src = require(txn, store, ns, src_id, "source_thread_id")
    if records.thread(txn, store, ns, dst_id) is not None:
        raise ApiError("THREAD_ALREADY_EXISTS", f"target thread {dst_id!r} exists in namespace {ns!r}",
                       field="target_thread_id", thread_id=dst_id)
    if replace:
        merged = dict(items)
    else:
        merged = metadata.items(src.metadata)
        merged.update(items)
    dst = records.create_thread(txn, store, ns, dst_id, metadata.encode(merged, "metadata"))
    return dst, records.copy_checkpoints(txn, store, ns, src.tkey, dst.tkey)
