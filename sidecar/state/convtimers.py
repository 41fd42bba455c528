"""convtimers: the sweeper's rows — idle timers (``ctimers``) and the queue of threads to reclaim (``reclaim``).

A thread with an idle TTL has one ``ctimers`` row at its expected expiry, ``due_us I ns NUL thread_id`` ->
tkey (a recreated thread's old row names another tkey and is skipped). Appends never move it: the sweeper
re-checks each due row and moves it lazily (ops/sweep.py). ``reclaim`` rows (``tkey`` -> ``ns NUL
thread_id``) name threads whose record an idle DELETE dropped; their contents are deleted in small jobs.
"""
from __future__ import annotations

from ..storage import layout
from ..storage.store import Store


def schedule(txn, store: Store, ns: str, thread_id: str, tkey: int, old_due: int, new_due: int) -> None:
    """Move (or create, with ``old_due`` 0; or drop, with ``new_due`` 0) a thread's idle row."""
    db = store.db["ctimers"]
    if old_due:
        txn.delete(layout.ctimer_key(old_due, layout.CTIMER_IDLE, ns, thread_id), db=db)
    if new_due:
        txn.put(layout.ctimer_key(new_due, layout.CTIMER_IDLE, ns, thread_id), layout.u64(tkey), db=db)


def due(txn, store: Store, now: int, limit: int) -> list[tuple[int, str, str, int]]:
    """Up to ``limit`` rows due at ``now``: [(due_us, ns, thread_id, tkey)], oldest first."""
    out = []
    cursor = txn.cursor(db=store.db["ctimers"])
    if not cursor.first():
        return out
    for key, value in cursor.iternext():
        due_us, kind, ns, thread_id = layout.split_ctimer_key(key)
        if due_us > now or len(out) >= limit:
            break
        if kind == layout.CTIMER_IDLE:
            out.append((due_us, ns, thread_id, layout.read_u64(value)))
    return out


def exists(txn, store: Store, due_us: int, ns: str, thread_id: str) -> bool:
    return txn.get(layout.ctimer_key(due_us, layout.CTIMER_IDLE, ns, thread_id), db=store.db["ctimers"]) is not None


def next_reclaim(txn, store: Store) -> tuple[int, str, str] | None:
    """(tkey, ns, thread_id) of the oldest queued reclaim, or None."""
    cursor = txn.cursor(db=store.db["reclaim"])
    if not cursor.first():
        return None
    ns, _, thread_id = bytes(cursor.value()).partition(layout.SEP)
    return layout.read_u64(cursor.key()), ns.decode(), thread_id.decode()


def reclaimed(txn, store: Store, tkey: int) -> None:
    txn.delete(layout.u64(tkey), db=store.db["reclaim"])


def pending_reclaims(txn, store: Store) -> int:
    return txn.stat(store.db["reclaim"])["entries"]


def schedule_fallback(txn, store: Store, ns: str, thread_id: str, tkey: int, level: int, first_seq: int,
                      old_due: int, new_due: int) -> None:
    """Move, create or drop the fallback row of compaction ``L<level>:<first_seq>-…``."""
    db = store.db["ctimers"]
    if old_due:
        txn.delete(layout.fallback_timer_key(old_due, ns, thread_id, level, first_seq), db=db)
    if new_due:
        txn.put(layout.fallback_timer_key(new_due, ns, thread_id, level, first_seq), layout.u64(tkey), db=db)


def due_fallbacks(txn, store: Store, now: int, limit: int) -> list[tuple[int, str, str, int, int, int]]:
    """Up to ``limit`` fallback rows due at ``now``: [(due_us, ns, thread_id, level, first_seq, tkey)]."""
    out = []
    cursor = txn.cursor(db=store.db["ctimers"])
    if not cursor.first():
        return out
    for key, value in cursor.iternext():
        due_us = layout.read_u64(bytes(key[:8]))
        if due_us > now or len(out) >= limit:
            break
        if bytes(key[8:9]) == layout.CTIMER_FALLBACK:
            _, ns, thread_id, level, first = layout.split_fallback_timer_key(key)
            out.append((due_us, ns, thread_id, level, first, layout.read_u64(value)))
    return out


def count_due_fallbacks(txn, store: Store, now: int, limit: int) -> tuple[int, bool]:
    """(fallback rows due at ``now``, whether every due row was looked at): the rows are in due order, so this
    reads only the due rows (idle ones too), at most ``limit`` of them."""
    n = seen = 0
    cursor = txn.cursor(db=store.db["ctimers"])
    if not cursor.first():
        return 0, True
    for key in cursor.iternext(keys=True, values=False):
        if layout.read_u64(bytes(key[:8])) > now:
            return n, True
        if seen >= limit:
            return n, False
        seen += 1
        if bytes(key[8:9]) == layout.CTIMER_FALLBACK:
            n += 1
    return n, True
