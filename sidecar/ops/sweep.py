"""sweep: the sweeper's small write jobs — idle expiry of conversations and reclaiming deleted threads.

Each function is one job (one nested transaction in the group commit, like a request), so writers never
wait behind a sweep for long: an idle row is re-checked and moved, or its conversation closed, or its
thread record dropped and queued for reclaiming; a reclaim job deletes at most ``limit`` log rows
(the rest of a thread — runs, events, checkpoints, ... — goes in its last job); a walk job places the idle
rows of up to ``limit`` threads of a namespace whose idle policy changed. Visibility never waits for the
sweeper (storage/records.py computes expiry on every read); only reclamation does.
"""
from __future__ import annotations

from ..state import conversations, convpolicy, convtimers, runstate, threads
from ..state.runstate import Tx
from ..storage import layout, records
from ..storage.layout import EventRec
from . import compaction
from . import conversations as ops_conversations
from . import threads as ops_threads

CLOSED, DELETED, MOVED, DROPPED = "closed", "deleted", "moved", "dropped"


def idle_job(tx: Tx, due_us: int, ns: str, thread_id: str, tkey: int) -> str | None:
    """Re-check one due idle row (None: it was gone already)."""
    txn, store = tx.txn, tx.store
    if not convtimers.exists(txn, store, due_us, ns, thread_id):
        return None
    rec = records.thread_any(txn, store, ns, thread_id)
    if rec is None or rec.tkey != tkey:
        convtimers.schedule(txn, store, ns, thread_id, tkey, due_us, 0)
        return DROPPED
    expiry = records.expire_us(txn, store, ns, rec)
    now = store.clock()
    if not expiry or rec.closed:
        convtimers.schedule(txn, store, ns, thread_id, tkey, due_us, 0)
        conversations.set_timer(txn, store, tkey, 0)
        return DROPPED
    if expiry > now:
        convtimers.schedule(txn, store, ns, thread_id, tkey, due_us, expiry)
        conversations.set_timer(txn, store, tkey, expiry)
        return MOVED
    convtimers.schedule(txn, store, ns, thread_id, tkey, due_us, 0)
    _, action, _ = records.idle_policy(txn, store, ns, rec)
    if action == records.IDLE_DELETE:
        threads.drop(txn, store, ns, thread_id)
        records.queue_reclaim(txn, store, ns, thread_id, tkey)
        tx.touched.add((ns, thread_id))
        return DELETED
    conversations.set_timer(txn, store, tkey, 0)
    rec.closed = True
    records.save_thread(txn, store, ns, thread_id, rec)
    data = runstate.encode_obj({"reason": "idle"})
    tx.append_event(ns, thread_id, tkey, EventRec(layout.FORMAT_VERSION, "", "", "agentstate.session.closed",
                                                  data, "", now))
    return CLOSED


def reclaim_job(txn, store, limit: int) -> bool:
    """Delete up to ``limit`` rows of the oldest queued reclaim; True while reclaims remain."""
    got = convtimers.next_reclaim(txn, store)
    if got is None:
        return False
    tkey, ns, thread_id = got
    n = conversations.delete_some(txn, store, tkey, limit)
    if n < limit:
        ops_threads.delete_contents(txn, store, ns, thread_id, tkey)
        convtimers.reclaimed(txn, store, tkey)
    return convtimers.pending_reclaims(txn, store) > 0 or n >= limit


def walk_job(txn, store, ns: str, walk_from: str, limit: int) -> None:
    """Place the idle rows of up to ``limit`` threads of ``ns`` after ``walk_from``; record where it got."""
    last = None
    n = 0
    for thread_id, rec in records.threads_from(txn, store, ns, walk_from + "\x00" if walk_from else None):
        if n >= limit:
            convpolicy.set_walk(txn, store, ns, last)
            return
        n += 1
        last = thread_id
        if rec.last_active_us:
            ops_conversations.place_timer(txn, store, ns, thread_id, rec)
    convpolicy.set_walk(txn, store, ns, None)


def fallback_job(tx: Tx, due_us: int, ns: str, thread_id: str, level: int, first: int, tkey: int) -> bool:
    """One due fallback row: the extractive summary applied if the compaction is still pending."""
    return compaction.fallback_job(tx, due_us, ns, thread_id, level, first, tkey)
