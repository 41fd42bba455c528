"""runstate: what runs, events, steps, effects and artifacts share inside one write transaction.

:class:`Tx` wraps one writer job's LMDB transaction: it caches the run
records and per-thread run states (active run, FIFO queue, event counter,
usage) the job reads, saves the changed ones once at the end (:meth:`Tx.flush`)
and keeps the thread's status (idle, busy, interrupted, error) in step with
them. It also remembers which threads got new events or run changes, so the
caller can wake watchers after the commit (``sidecar.api.context.Hub``).

The run checks every run-scoped write goes through live here too
(:func:`check_holder`, :func:`check_unclaimed_write`): a write naming a run
must come from the thread's active RUNNING run with its current, unexpired
lease; a write naming no run is refused while another run holds the thread.
This is the one module of ``sidecar.state`` the resource modules share.

Statuses are the numbers of agentstate.v1's RunStatus and ThreadStatus
(tests/test_layers.py checks them against the proto); this layer imports no
protobuf.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agentstate import codec

from ..errors import ApiError, run_not_found
from ..storage import layout
from ..storage.layout import EventRec, RunRec, ThreadRunState
from ..storage.store import Store, now_us

# agentstate.v1.RunStatus
PENDING, RUNNING, SUCCESS, ERROR, CANCELLED, INTERRUPTED, TIMEOUT = 1, 2, 3, 4, 5, 6, 7
# agentstate.v1.ThreadStatus
THREAD_IDLE, THREAD_BUSY, THREAD_INTERRUPTED, THREAD_ERROR = 1, 2, 3, 4

STATUS_NAMES = {PENDING: "pending", RUNNING: "running", SUCCESS: "success", ERROR: "error",
                CANCELLED: "cancelled", INTERRUPTED: "interrupted", TIMEOUT: "timeout"}

SERVER_EVENT_PREFIX = "agentstate."
COUNTER_NAMES = ("tokens_in", "tokens_out", "cost", "wall_time_ms", "requests")


def new_token() -> str:
    return os.urandom(16).hex()


def encode_obj(obj: Any) -> bytes:
    """Canonical encoding of a Python value (server-made event data)."""
    return codec.encode(obj)


@dataclass
class _ThreadSlot:
    ns: str
    thread_id: str
    state: ThreadRunState
    dirty: bool = False


class Tx:
    """One write job's view of runs and thread run states (see module doc)."""

    def __init__(self, txn, store: Store, now: int | None = None) -> None:
        self.txn = txn
        self.store = store
        self.db = store.db
        self.now = now if now is not None else now_us()
        self._threads: dict[int, _ThreadSlot] = {}
        self._runs: dict[tuple[str, str], RunRec | None] = {}
        self._dirty_runs: set[tuple[str, str]] = set()
        self.touched: set[tuple[str, str]] = set()
        self.garbage = False  # something was deleted: schedule a GC

    # ------------------------------------------------------------ runs

    def run(self, ns: str, run_id: str) -> RunRec | None:
        key = (ns, run_id)
        if key not in self._runs:
            raw = self.txn.get(layout.ns_key(ns, run_id), db=self.db["runs"])
            self._runs[key] = None if raw is None else layout.run_decoder.decode(raw)
        return self._runs[key]

    def require_run(self, ns: str, run_id: str, field: str = "run_id") -> RunRec:
        rec = self.run(ns, run_id)
        if rec is None:
            raise run_not_found(ns, run_id, field)
        return rec

    def put_run(self, ns: str, run_id: str, rec: RunRec) -> None:
        """Mark a run record changed (saved at flush with a new version)."""
        self._runs[(ns, run_id)] = rec
        self._dirty_runs.add((ns, run_id))
        self.touched.add((ns, rec.thread_id))

    def forget_run(self, ns: str, run_id: str) -> None:
        self._runs[(ns, run_id)] = None
        self._dirty_runs.discard((ns, run_id))

    # ------------------------------------------------------------ thread states

    def state(self, ns: str, thread_id: str, tkey: int) -> ThreadRunState:
        slot = self._threads.get(tkey)
        if slot is None:
            raw = self.txn.get(layout.u64(tkey), db=self.db["tstate"])
            st = (ThreadRunState(layout.FORMAT_VERSION, None, [], 0, 0, 0, 0, layout.ZERO_COUNTERS, 0, None)
                  if raw is None else layout.tstate_decoder.decode(raw))
            slot = self._threads[tkey] = _ThreadSlot(ns, thread_id, st)
        return slot.state

    def peek_state(self, tkey: int) -> ThreadRunState | None:
        """The thread's run state if it has one (no record is created)."""
        slot = self._threads.get(tkey)
        if slot is not None:
            return slot.state
        raw = self.txn.get(layout.u64(tkey), db=self.db["tstate"])
        return None if raw is None else layout.tstate_decoder.decode(raw)

    def touch(self, ns: str, rec: RunRec) -> None:
        """Mark the run state of ``rec``'s thread changed (loading it if needed)."""
        self.state(ns, rec.thread_id, rec.tkey)
        self.touch_state(rec.tkey)

    def touch_state(self, tkey: int) -> None:
        """Mark a loaded thread state changed."""
        slot = self._threads[tkey]
        slot.dirty = True
        self.touched.add((slot.ns, slot.thread_id))

    def state_of(self, ns: str, rec: RunRec) -> ThreadRunState:
        return self.state(ns, rec.thread_id, rec.tkey)

    # ------------------------------------------------------------ events

    def append_event(self, ns: str, thread_id: str, tkey: int, ev: EventRec) -> int:
        """Store an event as the thread's next one; returns its sequence number."""
        st = self.state(ns, thread_id, tkey)
        st.last_event += 1
        self.touch_state(tkey)
        self.txn.put(layout.seq_key(tkey, st.last_event), layout.encode(ev), db=self.db["events"])
        if ev.client_event_id:
            self.txn.put(layout.tkey_str_key(tkey, ev.client_event_id), layout.u64(st.last_event),
                         db=self.db["evids"])
        return st.last_event

    def server_event(self, ns: str, rec: RunRec, run_id: str, kind: str, **data: Any) -> int:
        """Append a server event ``agentstate.run.<kind>`` about a run to its thread."""
        data = {"run_id": run_id, "status": STATUS_NAMES.get(rec.status, ""), **data}
        ev = EventRec(layout.FORMAT_VERSION, run_id, "", f"{SERVER_EVENT_PREFIX}run.{kind}", encode_obj(data), "",
                      self.now)
        return self.append_event(ns, rec.thread_id, rec.tkey, ev)

    # ------------------------------------------------------------ flush

    def flush(self) -> None:
        """Save changed runs and thread states and bring thread statuses in step."""
        put = self.txn.put
        for key in sorted(self._dirty_runs):
            rec = self._runs[key]
            if rec is None:
                continue
            rec.version += 1
            rec.updated_us = self.now
            put(layout.ns_key(*key), layout.encode(rec), db=self.db["runs"])
        self._dirty_runs.clear()
        for tkey, slot in self._threads.items():
            if not slot.dirty:
                continue
            put(layout.u64(tkey), layout.encode(slot.state), db=self.db["tstate"])
            slot.dirty = False
            self._sync_thread_status(slot.ns, slot.thread_id, tkey, slot.state)

    def _sync_thread_status(self, ns: str, thread_id: str, tkey: int, st: ThreadRunState) -> None:
        key = layout.thread_key(ns, thread_id)
        raw = self.txn.get(key, db=self.db["threads"])
        if raw is None:
            return
        rec = layout.thread_decoder.decode(raw)
        if rec.tkey != tkey:
            return
        status = thread_status(st, self.run(ns, st.active) if st.active else None)
        if rec.status != status:
            rec.status = status  # not a metadata change: the thread's etag stays
            self.txn.put(key, layout.encode(rec), db=self.db["threads"])


def thread_status(st: ThreadRunState, active: RunRec | None) -> int:
    if active is not None:
        if active.status == INTERRUPTED:
            return THREAD_INTERRUPTED
        return THREAD_BUSY
    if st.last_status in (ERROR, TIMEOUT):
        return THREAD_ERROR
    if st.last_status == INTERRUPTED:
        return THREAD_INTERRUPTED
    return THREAD_IDLE


# ----------------------------------------------------------------- run checks

def not_active(run_id: str, rec: RunRec, active: str | None, why: str) -> ApiError:
    return ApiError("RUN_NOT_ACTIVE", f"run {run_id!r} is {STATUS_NAMES.get(rec.status, '?')}: {why}",
                    run_id=run_id, status=STATUS_NAMES.get(rec.status, ""), active_run_id=active or None)


def check_holder(tx: Tx, ns: str, run_id: str, lease_id: str, tkey: int | None = None,
                 field: str = "run_id") -> RunRec:
    """The run record when ``run_id`` is its thread's active RUNNING run held with ``lease_id``."""
    rec = tx.require_run(ns, run_id, field)
    st = tx.state_of(ns, rec)
    if rec.status != RUNNING or st.active != run_id:
        raise not_active(run_id, rec, st.active, "its writes are refused")
    if tkey is not None and rec.tkey != tkey:
        raise ApiError("RUN_NOT_ACTIVE", f"run {run_id!r} works on thread {rec.thread_id!r}, not this one",
                       run_id=run_id, status=STATUS_NAMES[rec.status], field=field)
    if rec.lease_id != lease_id:
        raise ApiError("LEASE_LOST", f"lease_id is not the current lease of run {run_id!r} (it was re-claimed)",
                       run_id=run_id, field="lease_id")
    if rec.lease_expires_us <= tx.now:
        raise ApiError("LEASE_LOST", f"the lease of run {run_id!r} expired; stop working on it",
                       run_id=run_id, field="lease_id")
    return rec


def check_unclaimed_write(tx: Tx, ns: str, tkey: int) -> None:
    """A write that names no run: refused while another run holds the thread (RUNNING)."""
    st = tx.peek_state(tkey)
    if st is None or not st.active:
        return
    rec = tx.run(ns, st.active)
    if rec is not None and rec.status == RUNNING:
        raise ApiError("THREAD_BUSY", f"run {st.active!r} holds the thread; a write must name it (run_id, "
                       "lease_id)", run_id=st.active)


def renew_lease(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
    set_timer(tx, ns, run_id, layout.TIMER_LEASE, rec.lease_expires_us, tx.now + rec.lease_timeout_ms * 1000)
    rec.lease_expires_us = tx.now + rec.lease_timeout_ms * 1000
    tx.put_run(ns, run_id, rec)


def set_timer(tx: Tx, ns: str, run_id: str, kind: bytes, old_due: int, new_due: int) -> None:
    db = tx.db["timers"]
    if old_due:
        tx.txn.delete(layout.timer_key(old_due, kind, ns, run_id), db=db)
    if new_due:
        tx.txn.put(layout.timer_key(new_due, kind, ns, run_id), b"", db=db)


# ----------------------------------------------------------------- resource counters

def _sat(n: int) -> int:
    return max(0, min(n, 2**63 - 1))


def add_counters(a, b) -> layout.Counters:
    return (_sat(a[0] + b[0]), _sat(a[1] + b[1]), min(max(0.0, a[2] + b[2]), 1e300), _sat(a[3] + b[3]),
            _sat(a[4] + b[4]))


def sub_counters(a, b) -> layout.Counters:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4])

