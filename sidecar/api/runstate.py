"""runstate: what runs, events, steps, effects and artifacts share inside one write transaction.

:class:`Tx` wraps one writer job's LMDB transaction: it caches the run
records and per-thread run states (active run, FIFO queue, event counter,
usage) the job reads, saves the changed ones once at the end (:meth:`Tx.flush`)
and keeps the thread's status (idle, busy, interrupted, error) in step with
them. It also remembers which threads got new events or run changes, so the
caller can wake watchers after the commit (:class:`Hub`).

The run checks every run-scoped write goes through live here too
(:func:`check_holder`, :func:`check_unclaimed_write`): a write naming a run
must come from the thread's active RUNNING run with its current, unexpired
lease; a write naming no run is refused while another run holds the thread.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import msgspec

from agentstate import codec
from agentstate.v1 import runs_pb2 as rpb
from agentstate.v1 import threads_pb2 as tpb

from .. import limits
from ..storage import layout
from . import idempotency, validate, wire
from ..errors import ApiError, invalid, run_not_found
from ..storage.layout import EventRec, RunRec, ThreadRunState
from ..storage.store import Store, now_us

PENDING = rpb.RUN_STATUS_PENDING
RUNNING = rpb.RUN_STATUS_RUNNING
SUCCESS = rpb.RUN_STATUS_SUCCESS
ERROR = rpb.RUN_STATUS_ERROR
CANCELLED = rpb.RUN_STATUS_CANCELLED
INTERRUPTED = rpb.RUN_STATUS_INTERRUPTED
TIMEOUT = rpb.RUN_STATUS_TIMEOUT

STATUS_NAMES = {PENDING: "pending", RUNNING: "running", SUCCESS: "success", ERROR: "error",
                CANCELLED: "cancelled", INTERRUPTED: "interrupted", TIMEOUT: "timeout"}

SERVER_EVENT_PREFIX = "agentstate."
DEFAULT_LEASE_MS = 30_000


@dataclass
class Ctx:
    """What the run, event, artifact and effect calls need from the server."""

    store: Store
    hub: "Hub"
    on_garbage: Callable[[], None] | None = None
    default_lease_ms: int = DEFAULT_LEASE_MS

    def notify(self, touched: Iterable[tuple[str, str]]) -> None:
        self.hub.notify(touched)


class Hub:
    """Wakes watchers of a thread (WatchEvents, ClaimRun waits) after commits. Event-loop only."""

    #: Versions of keys nobody waits on are forgotten beyond this many keys. A watcher that read a version
    #: just before may then miss one wake-up; it re-reads on its next poll (WATCH_POLL_SECONDS).
    MAX_KEYS = 50_000

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], int] = {}
        self._waiters: dict[tuple[str, str], asyncio.Event] = {}
        self.closed = False

    def version(self, key: tuple[str, str]) -> int:
        return self._versions.get(key, 0)

    def notify(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            self._versions[key] = self._versions.get(key, 0) + 1
            ev = self._waiters.pop(key, None)
            if ev is not None:
                ev.set()
        if len(self._versions) > self.MAX_KEYS:
            self._versions = {k: v for k, v in self._versions.items() if k in self._waiters}

    def close(self) -> None:
        """The server is stopping: wake every waiter (watches and claim waits end with SHUTTING_DOWN)."""
        self.closed = True
        for ev in self._waiters.values():
            ev.set()
        self._waiters.clear()

    def check_open(self) -> None:
        if self.closed:
            raise ApiError("SHUTTING_DOWN", "the sidecar is shutting down; resume elsewhere or later")

    async def wait(self, key: tuple[str, str], version: int, timeout: float) -> None:
        """Return when ``key`` was notified after ``version`` was read, or after ``timeout``."""
        self.check_open()
        if self.version(key) != version:
            return
        ev = self._waiters.get(key)
        if ev is None:
            ev = self._waiters[key] = asyncio.Event()
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        self.check_open()


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
            return tpb.THREAD_STATUS_INTERRUPTED
        return tpb.THREAD_STATUS_BUSY
    if st.last_status in (ERROR, TIMEOUT):
        return tpb.THREAD_STATUS_ERROR
    if st.last_status == INTERRUPTED:
        return tpb.THREAD_STATUS_INTERRUPTED
    return tpb.THREAD_STATUS_IDLE


# ----------------------------------------------------------------- run checks

def not_active(run_id: str, rec: RunRec, active: str | None, why: str) -> ApiError:
    return ApiError("RUN_NOT_ACTIVE", f"run {run_id!r} is {STATUS_NAMES.get(rec.status, '?')}: {why}",
                    run_id=run_id, status=STATUS_NAMES.get(rec.status, ""), active_run_id=active or None)


def check_holder(tx: Tx, ns: str, run_id: str, lease_id: str, tkey: int | None = None,
                 field: str = "run_id") -> RunRec:
    """The run record when ``run_id`` is its thread's active RUNNING run held with ``lease_id``."""
    validate.ident(run_id, field)
    validate.ident(lease_id, "lease_id")
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


# ----------------------------------------------------------------- helpers for the calls

MAX_COUNTER = 2**62  # per counter of one step or budget (sums saturate below 2**63)
MAX_COST = 1e18
#: Timestamps the API accepts: years 1 to 9999 (as google.protobuf.Timestamp documents).
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799


def counters_of(c: rpb.ResourceCounters, field: str) -> layout.Counters:
    if not (0 <= c.cost <= MAX_COST):
        raise invalid(f"{field}.cost", f"must be a number from 0 to {MAX_COST:g}")
    for name in ("tokens_in", "tokens_out", "wall_time_ms", "requests"):
        if getattr(c, name) > MAX_COUNTER:
            raise invalid(f"{field}.{name}", f"at most {MAX_COUNTER}")
    return (c.tokens_in, c.tokens_out, float(c.cost), c.wall_time_ms, c.requests)


def fill_counters(out: rpb.ResourceCounters, c) -> None:
    out.tokens_in, out.tokens_out, out.cost, out.wall_time_ms, out.requests = c


def _sat(n: int) -> int:
    return max(0, min(n, 2**63 - 1))


def add_counters(a, b) -> layout.Counters:
    return (_sat(a[0] + b[0]), _sat(a[1] + b[1]), min(max(0.0, a[2] + b[2]), 1e300), _sat(a[3] + b[3]),
            _sat(a[4] + b[4]))


def timestamp_us(ts, field: str) -> int:
    """Microseconds of a Timestamp within years 1..9999 (INVALID_ARGUMENT otherwise)."""
    if not MIN_SECONDS <= ts.seconds <= MAX_SECONDS:
        raise invalid(field, "out of range (years 1 to 9999)")
    return wire.timestamp_us(ts, field)


def sub_counters(a, b) -> layout.Counters:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4])


COUNTER_NAMES = ("tokens_in", "tokens_out", "cost", "wall_time_ms", "requests")


def text(value: str, field: str, max_bytes: int = limits.MAX_TEXT_BYTES) -> str:
    if len(value) > max_bytes or len(value.encode()) > max_bytes:
        raise invalid(field, f"longer than {max_bytes} bytes")
    return value


def payload(v, field: str) -> bytes | None:
    """Canonical encoding of an optional small Value (events, step bodies, outcomes)."""
    if v is None or v.WhichOneof("kind") is None:
        return None
    enc = wire.value_encoding(v, field)
    if len(enc) > limits.MAX_PAYLOAD_BYTES:
        raise ApiError("LIMIT_EXCEEDED", f"{field}: encoded value is {len(enc)} bytes, over "
                       f"{limits.MAX_PAYLOAD_BYTES}", limit="payload_bytes", field=field)
    return enc


def has_value(msg, name: str) -> bool:
    return msg.HasField(name) and getattr(msg, name).WhichOneof("kind") is not None


async def write(ctx: Ctx, ns: str, method: str, req, response_type, fn: Callable[[Tx], Any]):
    """Run ``fn(tx)`` in one write transaction (idempotent per request_id); wake watchers after commit."""
    def job(txn):
        tx = Tx(txn, ctx.store)

        def apply(_txn):
            resp = fn(tx)
            tx.flush()
            return resp

        resp = idempotency.run(txn, ctx.store.db, ns, method, req, response_type, apply)
        return resp, tx.touched, tx.garbage

    resp, touched, garbage = await ctx.store.run(job)
    ctx.notify(touched)
    if garbage and ctx.on_garbage is not None:
        ctx.on_garbage()
    return resp


def decode_metadata(raw) -> msgspec.Raw:
    return msgspec.Raw(bytes(raw))
