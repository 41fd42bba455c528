"""runs: a thread's runs — their records, multitask strategies, leases, deadlines and queue.

State machine (statuses in runs.proto)::

    create ──▶ PENDING (queued) ──▶ PENDING (active) ──claim──▶ RUNNING ──complete──▶ SUCCESS
                    │                    ▲    │                   │  ├──fail────────▶ ERROR
                    │                    │    │                   │  ├──cancel──────▶ CANCELLED
                    └─cancel─▶ CANCELLED │    │                   │  ├──interrupt/rollback by a newer run
                                         │    │                   │  │                ▶ INTERRUPTED / CANCELLED
                                         │    │                   │  └──deadline─────▶ TIMEOUT
                                         │    │                   └──lease expired──▶ PENDING (re-queued, attempt+1)
                                         │    │                                       or INTERRUPTED, held
                                         └────┴── resume ◀── INTERRUPTED, held

Each thread has at most one *active* run (``ThreadRunState.active``) and a
FIFO queue. When the active run ends, the head of the queue becomes active
(PENDING, claimable) in the same transaction. Leases and deadlines are rows
of the ``timers`` table ordered by due time; the watchdog
(api/watchdog.py) fires the due ones, each in its own write job that
re-checks the run first (:func:`fire_timer`).

Creating a run that forks, interrupts or rolls back another one touches
checkpoints, branches and events too: that is composed in ops/runs.py from
the pieces here.

Strategies and lease-expiry policies are the numbers of agentstate.v1's
MultitaskStrategy and LeaseExpiry (tests/test_layers.py checks them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import msgspec

from ..errors import ApiError
from ..storage import layout, records
from ..storage.layout import RunRec, ThreadRunState
from ..storage.store import Store
from . import runstate
from .runstate import INTERRUPTED, PENDING, RUNNING, STATUS_NAMES, TIMEOUT, Tx, not_active, renew_lease, set_timer

# agentstate.v1.MultitaskStrategy
REJECT, ENQUEUE, INTERRUPT, ROLLBACK, FORK = 1, 2, 3, 4, 5
STRATEGY_NAMES = {REJECT: "MULTITASK_STRATEGY_REJECT", ENQUEUE: "MULTITASK_STRATEGY_ENQUEUE",
                  INTERRUPT: "MULTITASK_STRATEGY_INTERRUPT", ROLLBACK: "MULTITASK_STRATEGY_ROLLBACK",
                  FORK: "MULTITASK_STRATEGY_FORK"}
# agentstate.v1.LeaseExpiry
REQUEUE, HOLD = 1, 2
DEFAULT_MAX_ATTEMPTS = 3
MAX_LEASE_MS = 24 * 3600 * 1000


@dataclass
class RunSpec:
    """A new run's settings, validated (api/runs.create)."""

    strategy: int
    cns: str
    start_checkpoint_id: str  # "": the thread's head when first claimed
    lease_timeout_ms: int
    on_expiry: int
    max_attempts: int  # 0: the default
    timeout_ms: int  # 0: none
    budget: layout.Counters
    input: bytes | None  # canonical encoding
    metadata: bytes  # canonical encoding


def run_etag(rec: RunRec) -> str:
    return f"{rec.tkey:x}-{rec.seq}-{rec.version}"


# ----------------------------------------------------------------- reads

def thread_state(txn, store: Store, tkey: int) -> ThreadRunState | None:
    """A thread's run state as committed (None: no run ever touched the thread)."""
    raw = txn.get(layout.u64(tkey), db=store.db["tstate"])
    return None if raw is None else layout.tstate_decoder.decode(raw)


def get(txn, store: Store, ns: str, run_id: str) -> RunRec | None:
    raw = txn.get(layout.ns_key(ns, run_id), db=store.db["runs"])
    return None if raw is None else layout.run_decoder.decode(raw)


def with_state(txn, store: Store, ns: str, run_id: str) -> tuple[RunRec | None, ThreadRunState | None]:
    """(record, its thread's run state) of a run, (None, None) when there is none."""
    rec = get(txn, store, ns, run_id)
    if rec is None:
        return None, None
    return rec, thread_state(txn, store, rec.tkey)


def of_thread(txn, store: Store, ns: str, tkey: int, after: int = 0) -> Iterator[tuple[int, str, RunRec]]:
    """(seq, run id, record) of a thread's runs in creation order, after the ``after``-th."""
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["thruns"])
    found = cursor.set_range(layout.seq_key(tkey, after + 1))
    while found and cursor.key().startswith(prefix):
        seq = layout.split_seq_key(cursor.key())[1]
        run_id = bytes(cursor.value()).decode()
        rec = get(txn, store, ns, run_id)
        if rec is not None:
            yield seq, run_id, rec
        found = cursor.next()


def claim_outlook(txn, store: Store, ns: str, run_id: str, thread_id: str) -> str:
    """"try" when the run (or the thread's active run) looks claimable or cannot become so (the write then
    says why); "wait" while it is queued, held by another lease, held for an operator, or the thread has
    no active run."""
    if run_id:
        rec = get(txn, store, ns, run_id)
        if rec is None:
            return "try"
        tkey = rec.tkey
    else:
        trec = records.thread(txn, store, ns, thread_id)
        if trec is None:
            return "try"
        tkey = trec.tkey
    st = thread_state(txn, store, tkey)
    if not run_id:
        if st is None or not st.active:
            return "wait"
        rec = get(txn, store, ns, st.active)
        if rec is None:
            return "try"
        run_id = st.active
    active = st is not None and st.active == run_id
    if rec.status == PENDING and active:
        return "try"
    if rec.status == PENDING or rec.status == RUNNING or (rec.status == INTERRUPTED and rec.held):
        return "wait"
    return "try"


# ----------------------------------------------------------------- new runs

def check_new(tx: Tx, ns: str, run_id: str) -> None:
    if tx.run(ns, run_id) is not None:
        raise ApiError("RUN_ALREADY_EXISTS", f"run {run_id!r} exists in namespace {ns!r}", run_id=run_id,
                       field="run_id")


def new_record(tx: Tx, thread_id: str, tkey: int, spec: RunSpec) -> RunRec:
    """A PENDING run of thread ``thread_id`` (not stored yet: see :func:`admit`)."""
    return RunRec(layout.FORMAT_VERSION, thread_id, tkey, 0, PENDING, spec.strategy, tx.now, tx.now, 0, 0,
                  spec.input, msgspec.Raw(spec.metadata), None, "", spec.cns, spec.start_checkpoint_id, "", "", 0,
                  spec.lease_timeout_ms, spec.on_expiry, spec.max_attempts or DEFAULT_MAX_ATTEMPTS, 1,
                  spec.timeout_ms, 0, spec.budget, layout.ZERO_COUNTERS, "", "", False, False, 0, 0)


def busy(thread_id: str, active_id: str, active: RunRec) -> ApiError:
    """THREAD_BUSY: a REJECT run finds the thread with an active run."""
    return ApiError("THREAD_BUSY", f"thread {thread_id!r} is busy with run {active_id!r} "
                   f"({STATUS_NAMES[active.status]})", run_id=active_id,
                   status=STATUS_NAMES[active.status], thread_id=thread_id)


def admit(tx: Tx, ns: str, run_id: str, rec: RunRec, *, queued: bool) -> None:
    """Store a new run as its thread's next one: queued, or the active run."""
    st = tx.state(ns, rec.thread_id, rec.tkey)
    st.runs += 1
    rec.seq = st.runs
    tx.txn.put(layout.seq_key(rec.tkey, rec.seq), run_id.encode(), db=tx.db["thruns"])
    if queued:
        st.queue.append(run_id)
    else:
        st.active = run_id
    tx.put_run(ns, run_id, rec)
    tx.touch(ns, rec)
    tx.server_event(ns, rec, run_id, "created", strategy=STRATEGY_NAMES[rec.strategy],
                    queue_position=len(st.queue) if queued else 0)
    if not queued:
        tx.server_event(ns, rec, run_id, "activated")


def move_to_branch(tx: Tx, ns: str, run_id: str, rec: RunRec, thread_id: str, tkey: int, branch_id: str,
                   branch_tkey: int, fork_id: str) -> None:
    """A FORK run works on its branch thread from checkpoint ``fork_id``; its parent thread is told."""
    rec.thread_id, rec.tkey, rec.branch_of, rec.start_checkpoint_id = branch_id, branch_tkey, thread_id, fork_id
    tx.append_event(ns, thread_id, tkey, layout.EventRec(
        layout.FORMAT_VERSION, run_id, "", runstate.SERVER_EVENT_PREFIX + "run.forked",
        runstate.encode_obj({"run_id": run_id, "branch_thread_id": branch_id, "fork_checkpoint_id": fork_id}),
        "", tx.now))


# ----------------------------------------------------------------- transitions (inside a Tx)

def release(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
    set_timer(tx, ns, run_id, layout.TIMER_LEASE, rec.lease_expires_us, 0)
    rec.lease_expires_us = 0
    rec.lease_id = ""


def clear_deadline(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
    set_timer(tx, ns, run_id, layout.TIMER_DEADLINE, rec.deadline_us, 0)


def activate_next(tx: Tx, ns: str, thread_id: str, tkey: int) -> str:
    """Hand the thread to the first queued run that is still PENDING; returns its id ("" none)."""
    st = tx.state(ns, thread_id, tkey)
    st.active = None
    tx.touch_state(tkey)
    while st.queue:
        run_id = st.queue.pop(0)
        rec = tx.run(ns, run_id)
        if rec is None or rec.status != PENDING:
            continue
        st.active = run_id
        tx.put_run(ns, run_id, rec)
        tx.server_event(ns, rec, run_id, "activated")
        return run_id
    return ""


def end_run(tx: Tx, ns: str, run_id: str, rec: RunRec, status: int, *, error: str = "",
            output: bytes | None = None, event: str | None = None, **event_data) -> str:
    """End a run; an active one hands its thread on. Returns the run that became active ("")."""
    st = tx.state_of(ns, rec)
    release(tx, ns, run_id, rec)
    clear_deadline(tx, ns, run_id, rec)
    rec.status = status
    rec.held = False
    rec.ended_us = tx.now
    if error:
        rec.error = error
    if output is not None:
        rec.output = output
    tx.put_run(ns, run_id, rec)
    tx.touch(ns, rec)
    tx.server_event(ns, rec, run_id, event or STATUS_NAMES[status], **event_data)
    if st.active == run_id:
        st.last_status = status
        return activate_next(tx, ns, rec.thread_id, rec.tkey)
    if run_id in st.queue:
        st.queue.remove(run_id)
    return ""


def claimable(tx: Tx, ns: str, run_id: str, tkey: int | None = None, thread_id: str = "") -> tuple[str, RunRec]:
    """(run id, record) of the run ClaimRun takes: ``run_id``, or (no ``run_id``) the active run of thread
    ``thread_id`` (``tkey``). Only the thread's active PENDING run can be claimed (RUN_NOT_ACTIVE)."""
    if run_id:
        rec = tx.require_run(ns, run_id)
    else:
        st = tx.state(ns, thread_id, tkey)
        if not st.active:
            raise ApiError("RUN_NOT_ACTIVE", f"thread {thread_id!r} has no active run to claim",
                           thread_id=thread_id, status="")
        run_id = st.active
        rec = tx.require_run(ns, run_id)
    st = tx.state_of(ns, rec)
    if rec.status != PENDING or st.active != run_id:
        why = "it is queued" if run_id in st.queue else "only the thread's active PENDING run can be claimed"
        raise not_active(run_id, rec, st.active, why)
    return run_id, rec


def claim(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
    """Make the active PENDING run RUNNING under a new lease."""
    rec.status = RUNNING
    rec.held = False
    old_due = rec.lease_expires_us
    rec.lease_id = runstate.new_token()
    rec.lease_expires_us = 0
    set_timer(tx, ns, run_id, layout.TIMER_LEASE, old_due, 0)
    renew_lease(tx, ns, run_id, rec)
    if not rec.started_us:
        rec.started_us = tx.now
        if rec.timeout_ms:
            rec.deadline_us = tx.now + rec.timeout_ms * 1000
            set_timer(tx, ns, run_id, layout.TIMER_DEADLINE, 0, rec.deadline_us)
        if not rec.start_checkpoint_id and rec.strategy != FORK:
            head = records.latest(tx.txn, tx.store, rec.tkey, rec.cns)
            rec.start_checkpoint_id = head[0] if head else ""
    tx.touch(ns, rec)
    tx.server_event(ns, rec, run_id, "started", attempt=rec.attempt)


def cancel(tx: Tx, ns: str, run_id: str, rec: RunRec, reason: str) -> tuple[bool, str]:
    """(changed, run that became active): cancel a queued or active run; one CANCELLED already stays so."""
    st = tx.state_of(ns, rec)
    if rec.status == runstate.CANCELLED:
        return False, ""
    if st.active != run_id and run_id not in st.queue:
        raise not_active(run_id, rec, st.active, "it has ended")
    return True, end_run(tx, ns, run_id, rec, runstate.CANCELLED, error=reason or "cancelled")


def resume(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
    """A run held INTERRUPTED (by its lease policy) becomes PENDING again, attempt + 1."""
    st = tx.state_of(ns, rec)
    if not (rec.status == INTERRUPTED and rec.held and st.active == run_id):
        raise not_active(run_id, rec, st.active, "only a run held INTERRUPTED can be resumed")
    rec.status = PENDING
    rec.held = False
    rec.error = ""
    rec.attempt += 1
    tx.put_run(ns, run_id, rec)
    tx.touch(ns, rec)
    tx.server_event(ns, rec, run_id, "resumed", attempt=rec.attempt)


def stop(tx: Tx, ns: str, by: str, run_id: str, rec: RunRec) -> None:
    """The first half of stopping the active run in favour of run ``by`` (INTERRUPT, ROLLBACK): its lease
    and deadline end; :func:`interrupted` or :func:`rolled_back` says how it ended."""
    release(tx, ns, run_id, rec)
    clear_deadline(tx, ns, run_id, rec)
    rec.held = False
    rec.stopped_by = by
    rec.ended_us = tx.now


def interrupted(tx: Tx, ns: str, by: str, run_id: str, rec: RunRec) -> None:
    rec.status = INTERRUPTED
    rec.error = f"interrupted by run {by!r}"
    tx.put_run(ns, run_id, rec)
    tx.server_event(ns, rec, run_id, "interrupted", reason="interrupted", by=by)


def rolled_back(tx: Tx, ns: str, by: str, run_id: str, rec: RunRec, removed_checkpoints: int) -> None:
    """The run's checkpoints, pending writes and events are gone (ops/runs.rollback): it ends CANCELLED."""
    rec.status = runstate.CANCELLED
    rec.rolled_back = True
    rec.error = f"rolled back by run {by!r}"
    tx.put_run(ns, run_id, rec)
    tx.server_event(ns, rec, by, "rolled_back", stopped_run_id=run_id, removed_checkpoints=removed_checkpoints)


def check_idle(tx: Tx, thread_id: str, tkey: int) -> None:
    """THREAD_BUSY while the thread has an active run."""
    st = tx.peek_state(tkey)
    if st is not None and st.active:
        raise ApiError("THREAD_BUSY", f"thread {thread_id!r} has an active run {st.active!r}", run_id=st.active,
                       thread_id=thread_id)


# ----------------------------------------------------------------- timers

def expire_lease(tx: Tx, ns: str, run_id: str, rec: RunRec) -> str:
    """The watchdog's verdict on a run whose lease expired: re-queue it or hold it (returns which:
    "requeued" or "held")."""
    release(tx, ns, run_id, rec)
    rec.status = INTERRUPTED
    tx.put_run(ns, run_id, rec)
    tx.touch(ns, rec)
    tx.server_event(ns, rec, run_id, "interrupted", reason="lease_expired", attempt=rec.attempt)
    if rec.on_expiry == REQUEUE and rec.attempt < rec.max_attempts:
        rec.status = PENDING
        rec.attempt += 1
        tx.server_event(ns, rec, run_id, "requeued", attempt=rec.attempt,
                        resume_checkpoint_id=rec.last_checkpoint_id or rec.start_checkpoint_id)
        return "requeued"
    rec.held = True
    rec.error = ("lease expired; held for an operator" if rec.on_expiry == HOLD
                 else f"lease expired after {rec.attempt} attempts; held for an operator")
    return "held"


def due_timers(txn, store: Store, now: int, limit: int) -> list[bytes]:
    """Keys of the timers due at ``now``, oldest first, at most ``limit``."""
    due_keys = []
    cursor = txn.cursor(db=store.db["timers"])
    for key in cursor.iternext(values=False):
        if layout.read_u64(key[:8]) > now or len(due_keys) >= limit:
            break
        due_keys.append(bytes(key))
    return due_keys


def fire_timer(tx: Tx, key: bytes) -> str | None:
    """Handle one due timer (lease or deadline), ignoring stale ones. Returns what was done:
    "lease_requeued", "lease_held", "timeout", or None for a stale timer."""
    due, kind, ns, run_id = layout.split_timer_key(key)
    tx.txn.delete(key, db=tx.db["timers"])
    rec = tx.run(ns, run_id)
    if rec is None:
        return None
    if kind == layout.TIMER_LEASE:
        if rec.status == RUNNING and rec.lease_expires_us == due:
            rec.lease_expires_us = 0  # its timer row is gone already
            return "lease_" + expire_lease(tx, ns, run_id, rec)
    elif kind == layout.TIMER_DEADLINE:
        st = tx.state_of(ns, rec)
        if rec.deadline_us == due and st.active == run_id and rec.status in (PENDING, RUNNING, INTERRUPTED):
            end_run(tx, ns, run_id, rec, TIMEOUT, error=f"the run exceeded its timeout of {rec.timeout_ms} ms")
            return "timeout"
    return None


def extend_leases(tx: Tx) -> int:
    """Give every RUNNING lease one more lease timeout from now (no holder could heartbeat while the
    sidecar was down); stale lease timers go. Returns how many were extended."""
    txn, store = tx.txn, tx.store
    cursor = txn.cursor(db=store.db["timers"])
    keys = [bytes(k) for k in cursor.iternext(values=False)]
    n = 0
    for key in keys:
        due, kind, ns, run_id = layout.split_timer_key(key)
        if kind != layout.TIMER_LEASE:
            continue
        rec = tx.run(ns, run_id)
        if rec is None or rec.status != RUNNING or rec.lease_expires_us != due:
            txn.delete(key, db=store.db["timers"])
            continue
        target = tx.now + rec.lease_timeout_ms * 1000
        if target > due:
            set_timer(tx, ns, run_id, layout.TIMER_LEASE, due, target)
            rec.lease_expires_us = target
            tx.put_run(ns, run_id, rec)
            n += 1
    return n


# ----------------------------------------------------------------- thread deletion

def delete_thread_runs(txn, store: Store, ns: str, tkey: int) -> None:
    """Delete a thread's runs (with their timers), its run index and its run state."""
    db = store.db
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=db["thruns"])
    run_ids = []
    if cursor.set_range(prefix):
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                break
            run_ids.append(bytes(value).decode())
    for run_id in run_ids:
        rkey = layout.ns_key(ns, run_id)
        raw = txn.get(rkey, db=db["runs"])
        if raw is None:
            continue
        rec = layout.run_decoder.decode(raw)
        if rec.tkey != tkey:
            continue
        if rec.lease_expires_us:
            txn.delete(layout.timer_key(rec.lease_expires_us, layout.TIMER_LEASE, ns, run_id), db=db["timers"])
        if rec.deadline_us:
            txn.delete(layout.timer_key(rec.deadline_us, layout.TIMER_DEADLINE, ns, run_id), db=db["timers"])
        txn.delete(rkey, db=db["runs"])
    txn.delete(layout.u64(tkey), db=db["tstate"])
    records.delete_prefix(txn, db["thruns"], prefix)


# ----------------------------------------------------------------- census (the metrics endpoint)

def count_by_status(txn, store: Store) -> tuple[dict[int, int], int]:
    """({RunStatus: runs in it}, runs held for an operator) over every namespace: one pass over the runs."""
    counts: dict[int, int] = {}
    held = 0
    decode = layout.run_decoder.decode
    for _, raw in txn.cursor(db=store.db["runs"]).iternext():
        rec = decode(raw)
        counts[rec.status] = counts.get(rec.status, 0) + 1
        held += rec.held
    return counts, held
