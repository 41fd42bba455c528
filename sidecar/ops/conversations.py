"""conversations: the writes of a conversation log with what they touch beside it — the thread record
(created, marked active, reopened), the run holding the thread, the idle timer.

Every write here is one transaction (a ``runstate.Tx``): the log's rules are state/conversations.py, the
idle rows state/convtimers.py; the thread record and the visibility of expired threads are
storage/records.py's.
"""
from __future__ import annotations

from ..errors import ApiError, thread_not_found
from ..state import conversations, convtimers, runstate
from ..state.conversations import ItemIn
from ..state.runstate import Tx
from ..storage import records
from . import compaction
from ..storage.layout import ConvState, ItemRec, ThreadRec


def closed_error(thread_id: str) -> ApiError:
    return ApiError("SESSION_CLOSED", f"the conversation of thread {thread_id!r} was closed by its idle policy "
                    "(append with reopen to open it again)", thread_id=thread_id)


def _open_thread(tx: Tx, ns: str, thread_id: str, *, create: bool, metadata: bytes | None, reopen: bool,
                 ) -> tuple[ThreadRec, bool]:
    rec = records.thread(tx.txn, tx.store, ns, thread_id)
    created = False
    if rec is None:
        if not create:
            raise thread_not_found(ns, thread_id)
        rec = records.create_thread(tx.txn, tx.store, ns, thread_id, metadata or records.EMPTY_MAP)
        created = True
    elif records.idle_state(tx.txn, tx.store, ns, rec) == records.IDLE_CLOSE and not reopen:
        raise closed_error(thread_id)
    return rec, created


def _touch(tx: Tx, ns: str, thread_id: str, rec: ThreadRec, now: int) -> None:
    """The conversation was active now (and is open again); its idle row is placed if it has none."""
    rec.last_active_us = now
    rec.closed = False
    records.save_thread(tx.txn, tx.store, ns, thread_id, rec)
    st = conversations.state(tx.txn, tx.store, rec.tkey)
    if st is None:
        st = conversations.new_state()
        conversations.save_state(tx.txn, tx.store, rec.tkey, st)
    due = records.expire_us(tx.txn, tx.store, ns, rec)
    if due and not st.timer_us:
        convtimers.schedule(tx.txn, tx.store, ns, thread_id, rec.tkey, 0, due)
        conversations.set_timer(tx.txn, tx.store, rec.tkey, due)


def _check_run(tx: Tx, ns: str, run_id: str, lease_id: str, tkey: int) -> None:
    if run_id:
        run = runstate.check_holder(tx, ns, run_id, lease_id, tkey)
        runstate.renew_lease(tx, ns, run_id, run)


def append(tx: Tx, ns: str, thread_id: str, items: list[ItemIn], *, expected_last_seq: int | None, create: bool,
           metadata: bytes | None, reopen: bool, run_id: str, lease_id: str,
           ) -> tuple[list[tuple[int, ItemRec, bool]], ConvState, bool, list]:
    """AppendItems: ([(seq, record, duplicate)], the log's state after, whether the thread was created, the
    compactions it made due [(level, first_seq, CompactionRec)])."""
    now = tx.store.clock()
    rec, created = _open_thread(tx, ns, thread_id, create=create, metadata=metadata, reopen=reopen)
    _check_run(tx, ns, run_id, lease_id, rec.tkey)
    got, st = conversations.append(tx.txn, tx.store, ns, rec.tkey, items, expected_last_seq, now, run_id)
    _touch(tx, ns, thread_id, rec, now)
    tx.touched.add((ns, thread_id))
    due = compaction.make_due(tx, ns, thread_id, rec.tkey, now) if any(not d for _, _, d in got) else []
    return got, st, created, due


def pop(tx: Tx, ns: str, thread_id: str, expected_last_seq: int | None,
        ) -> tuple[int, ItemRec | None, ConvState, list[str], list[str]]:
    """PopItem: (seq, the removed item or None, the state after, removed summary ids, cancelled compaction
    ids)."""
    now = tx.store.clock()
    rec, _ = _open_thread(tx, ns, thread_id, create=False, metadata=None, reopen=False)
    seq, item, st = conversations.pop(tx.txn, tx.store, rec.tkey, expected_last_seq)
    removed, cancelled = compaction.after_pop(tx, ns, thread_id, rec.tkey, seq, now) if item else ([], [])
    _touch(tx, ns, thread_id, rec, now)
    tx.touched.add((ns, thread_id))
    return seq, item, st, removed, cancelled


def clear(tx: Tx, ns: str, thread_id: str, expected_last_seq: int | None) -> tuple[int, int, int, bool]:
    """ClearItems: (items, summaries, compactions) removed, and whether item nodes became garbage."""
    now = tx.store.clock()
    rec, _ = _open_thread(tx, ns, thread_id, create=False, metadata=None, reopen=False)
    n, _, had_nodes = conversations.clear(tx.txn, tx.store, rec.tkey, expected_last_seq)
    sums, comps = compaction.after_clear(tx, ns, thread_id, rec.tkey, now)
    _touch(tx, ns, thread_id, rec, now)
    tx.touched.add((ns, thread_id))
    return n, sums, comps, had_nodes


def place_timer(txn, store, ns: str, thread_id: str, rec: ThreadRec) -> None:
    """Put a conversation thread's idle row where its policy now says (after a policy change)."""
    st = conversations.state(txn, store, rec.tkey)
    if st is None:
        return
    due = records.expire_us(txn, store, ns, rec)
    if due and (not st.timer_us or due < st.timer_us):  # a later or no expiry: the sweeper moves it lazily
        convtimers.schedule(txn, store, ns, thread_id, rec.tkey, st.timer_us, due)
        conversations.set_timer(txn, store, rec.tkey, due)
