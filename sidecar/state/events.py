"""events: the append-only event log of each thread.

Events are rows ``tkey seq`` of the ``events`` table; ``evids`` maps a
client event id to its sequence number, so re-sending an id returns the
stored event instead of appending. The thread's newest sequence number is
kept in its run state (state/runstate.py, which also appends the server's own
``agentstate.*`` events). Reads see committed events of one snapshot; the
resumable watch over them is the API's (api/events.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import limits
from ..errors import ApiError, thread_not_found
from ..storage import layout, records
from ..storage.layout import EventRec
from ..storage.store import Store
from .runstate import Tx


@dataclass
class EventInput:
    """A client event, validated (api/events.event_input): ``type`` is not the server's prefix; empty ids
    are unset."""

    type: str
    data: bytes | None  # canonical encoding
    client_event_id: str
    run_id: str
    step_id: str


def append(tx: Tx, ns: str, thread_id: str, tkey: int, inputs: list[EventInput], default_run: str,
           field: str) -> tuple[list[tuple[int, EventRec]], int]:
    """Append client events to a thread (an event naming no run gets ``default_run``).

    Returns ((sequence number, record) of each input, in order; duplicates) — an input whose client event
    id the thread has stored already is answered with the stored event and counted as a duplicate."""
    if len(inputs) > limits.MAX_EVENTS_PER_CALL:
        raise ApiError("LIMIT_EXCEEDED", f"{field}: at most {limits.MAX_EVENTS_PER_CALL} events per call",
                       limit="events_per_call", field=field)
    out = []
    duplicates = 0
    evids, events = tx.db["evids"], tx.db["events"]
    for ev in inputs:
        if ev.client_event_id:
            seq_raw = tx.txn.get(layout.tkey_str_key(tkey, ev.client_event_id), db=evids)
            if seq_raw is not None:
                seq = layout.read_u64(seq_raw)
                raw = tx.txn.get(layout.seq_key(tkey, seq), db=events)
                if raw is not None:
                    out.append((seq, layout.event_decoder.decode(raw)))
                    duplicates += 1
                    continue
        rec = EventRec(layout.FORMAT_VERSION, ev.run_id or default_run, ev.step_id, ev.type, ev.data,
                       ev.client_event_id, tx.now)
        out.append((tx.append_event(ns, thread_id, tkey, rec), rec))
    return out, duplicates


def read(txn, store: Store, ns: str, thread_id: str, tkey: int | None, after: int, run_id: str, limit: int,
         ) -> tuple[int, int, bool, list[tuple[int, EventRec]]]:
    """Up to ``limit`` events after sequence ``after`` (only run ``run_id``'s when given).

    Returns (tkey, last sequence scanned, more events may follow, [(sequence, record)]). Raises
    NOT_FOUND when the thread is gone (or was re-created: another tkey than ``tkey``).
    """
    trec = records.thread(txn, store, ns, thread_id)
    if trec is None or (tkey is not None and trec.tkey != tkey):
        raise thread_not_found(ns, thread_id)
    tkey = trec.tkey
    out: list[tuple[int, EventRec]] = []
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["events"])
    if after >= 2**64 - 1:
        return tkey, after, False, out
    found = cursor.set_range(layout.seq_key(tkey, after + 1))
    last = after
    while found:
        key = cursor.key()
        if not key.startswith(prefix):
            return tkey, last, False, out
        if len(out) == limit:
            return tkey, last, True, out
        seq = layout.split_seq_key(key)[1]
        ev = layout.event_decoder.decode(cursor.value())
        last = seq
        if not run_id or ev.run_id == run_id:
            out.append((seq, ev))
        found = cursor.next()
    return tkey, last, False, out


def last_sequence(txn, store: Store, tkey: int) -> int:
    """The thread's newest event sequence number (0: none yet)."""
    raw = txn.get(layout.u64(tkey), db=store.db["tstate"])
    return 0 if raw is None else layout.tstate_decoder.decode(raw).last_event


def delete_run_events(txn, store: Store, tkey: int, run_id: str) -> None:
    """Delete the events of run ``run_id`` from thread ``tkey`` (with their client ids)."""
    db = store.db["events"]
    doomed = []
    tprefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=db)
    if cursor.set_range(tprefix):
        for key, value in cursor.iternext():
            if not key.startswith(tprefix):
                break
            r = layout.event_decoder.decode(value)
            if r.run_id == run_id:
                doomed.append((bytes(key), r.client_event_id))
    for key, client_id in doomed:
        txn.delete(key, db=db)
        if client_id:
            txn.delete(layout.tkey_str_key(tkey, client_id), db=store.db["evids"])


def delete_thread_events(txn, store: Store, tkey: int) -> None:
    """Delete every event of a thread (with the client ids)."""
    prefix = layout.tkey_prefix(tkey)
    for name in ("events", "evids"):
        records.delete_prefix(txn, store.db[name], prefix)
