"""runs: RunService — runs and their multitask strategies, leases and the watchdog, branches, steps.

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
of the ``timers`` table ordered by due time; the :class:`Watchdog` task fires
the due ones, each in its own write job that re-checks the run first.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

import msgspec
from google.protobuf import duration_pb2

from agentstate.v1 import runs_pb2 as rpb

from .. import limits
from ..errors import ApiError, checkpoint_not_found, invalid, run_not_found, thread_not_found
from ..state import checkpoints, runstate, threads
from ..state.runstate import (CANCELLED, ERROR, INTERRUPTED, PENDING, RUNNING, STATUS_NAMES, SUCCESS, TIMEOUT, Tx,
                              not_active, renew_lease, set_timer)
from ..storage import layout, nodes, records
from ..storage.layout import BranchRec, RunRec, StepRec
from ..storage.store import Store, now_us
from . import context, validate, wire
from .context import Ctx

log = logging.getLogger("sidecar.runs")

REJECT = rpb.MULTITASK_STRATEGY_REJECT
ENQUEUE = rpb.MULTITASK_STRATEGY_ENQUEUE
INTERRUPT = rpb.MULTITASK_STRATEGY_INTERRUPT
ROLLBACK = rpb.MULTITASK_STRATEGY_ROLLBACK
FORK = rpb.MULTITASK_STRATEGY_FORK
REQUEUE = rpb.LEASE_EXPIRY_REQUEUE
HOLD = rpb.LEASE_EXPIRY_HOLD
DEFAULT_MAX_ATTEMPTS = 3
MAX_LEASE_MS = 24 * 3600 * 1000
FAILED_TIMER_RETRY_SECONDS = 60


# ----------------------------------------------------------------- conversions

MAX_DURATION_SECONDS = 366 * 24 * 3600  # timeouts and waits: at most a year


def _duration_ms(d: duration_pb2.Duration, field: str) -> int:
    if d.seconds < 0 or d.nanos < 0 or d.nanos >= 1_000_000_000:
        raise invalid(field, "must not be negative (and nanos below one second)")
    if d.seconds > MAX_DURATION_SECONDS:
        raise invalid(field, "at most a year")
    return d.seconds * 1000 + d.nanos // 1_000_000


def _set_duration(d: duration_pb2.Duration, ms: int) -> None:
    d.seconds, rest = divmod(ms, 1000)
    d.nanos = rest * 1_000_000


def run_etag(rec: RunRec) -> str:
    return f"{rec.tkey:x}-{rec.seq}-{rec.version}"


def to_proto(ns: str, run_id: str, rec: RunRec, st, out: rpb.Run | None = None) -> rpb.Run:
    out = out if out is not None else rpb.Run()
    out.namespace, out.thread_id, out.run_id = ns, rec.thread_id, run_id
    out.status = rec.status
    out.multitask_strategy = rec.strategy
    if rec.input is not None:
        wire.set_value(out.input, rec.input)
    wire.fill_metadata(out.metadata, rec.metadata)
    if rec.output is not None:
        wire.set_value(out.output, rec.output)
    out.error = rec.error
    if st is not None:
        out.active = st.active == run_id
        if run_id in st.queue:
            out.queue_position = st.queue.index(run_id) + 1
    out.held = rec.held
    out.checkpoint_ns = rec.cns
    out.start_checkpoint_id = rec.start_checkpoint_id
    out.last_checkpoint_id = rec.last_checkpoint_id
    out.attempt = rec.attempt
    out.max_attempts = rec.max_attempts
    out.on_lease_expired = rec.on_expiry
    _set_duration(out.lease_timeout, rec.lease_timeout_ms)
    if rec.status == RUNNING:
        wire.set_timestamp(out.lease_expire_time, rec.lease_expires_us)
    if rec.timeout_ms:
        _set_duration(out.timeout, rec.timeout_ms)
    if rec.deadline_us:
        wire.set_timestamp(out.deadline, rec.deadline_us)
    wire.fill_counters(out.budget, rec.budget)
    wire.fill_counters(out.usage, rec.usage)
    wire.set_timestamp(out.create_time, rec.created_us)
    if rec.started_us:
        wire.set_timestamp(out.start_time, rec.started_us)
    if rec.ended_us:
        wire.set_timestamp(out.end_time, rec.ended_us)
    wire.set_timestamp(out.update_time, rec.updated_us)
    out.branch_of = rec.branch_of
    out.stopped_by = rec.stopped_by
    out.rolled_back = rec.rolled_back
    out.etag = run_etag(rec)
    return out


def _run_proto(tx: Tx, ns: str, run_id: str, rec: RunRec) -> rpb.Run:
    """The run as it will be after the transaction (version and update time included)."""
    rec.version += 1
    rec.updated_us = tx.now
    try:
        return to_proto(ns, run_id, rec, tx.state_of(ns, rec))
    finally:
        rec.version -= 1


def _lease_proto(run_id: str, rec: RunRec) -> rpb.Lease:
    lease = rpb.Lease(run_id=run_id, lease_id=rec.lease_id, resume_checkpoint_id=rec.last_checkpoint_id
                      or rec.start_checkpoint_id, thread_id=rec.thread_id, checkpoint_ns=rec.cns)
    wire.set_timestamp(lease.expire_time, rec.lease_expires_us)
    return lease


# ----------------------------------------------------------------- transitions (inside a Tx)

def _release(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
    set_timer(tx, ns, run_id, layout.TIMER_LEASE, rec.lease_expires_us, 0)
    rec.lease_expires_us = 0
    rec.lease_id = ""


def _clear_deadline(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
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
    _release(tx, ns, run_id, rec)
    _clear_deadline(tx, ns, run_id, rec)
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


def claim(tx: Tx, ns: str, run_id: str, rec: RunRec) -> rpb.Lease:
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
    return _lease_proto(run_id, rec)


def expire_lease(tx: Tx, ns: str, run_id: str, rec: RunRec) -> None:
    """The watchdog's verdict on a run whose lease expired: re-queue it or hold it."""
    _release(tx, ns, run_id, rec)
    rec.status = INTERRUPTED
    tx.put_run(ns, run_id, rec)
    tx.touch(ns, rec)
    tx.server_event(ns, rec, run_id, "interrupted", reason="lease_expired", attempt=rec.attempt)
    if rec.on_expiry == REQUEUE and rec.attempt < rec.max_attempts:
        rec.status = PENDING
        rec.attempt += 1
        tx.server_event(ns, rec, run_id, "requeued", attempt=rec.attempt,
                        resume_checkpoint_id=rec.last_checkpoint_id or rec.start_checkpoint_id)
    else:
        rec.held = True
        rec.error = ("lease expired; held for an operator" if rec.on_expiry == HOLD
                     else f"lease expired after {rec.attempt} attempts; held for an operator")


def fire_timer(tx: Tx, key: bytes) -> None:
    """Handle one due timer (lease or deadline), ignoring stale ones."""
    due, kind, ns, run_id = layout.split_timer_key(key)
    tx.txn.delete(key, db=tx.db["timers"])
    rec = tx.run(ns, run_id)
    if rec is None:
        return
    if kind == layout.TIMER_LEASE:
        if rec.status == RUNNING and rec.lease_expires_us == due:
            rec.lease_expires_us = 0  # its timer row is gone already
            expire_lease(tx, ns, run_id, rec)
    elif kind == layout.TIMER_DEADLINE:
        st = tx.state_of(ns, rec)
        if rec.deadline_us == due and st.active == run_id and rec.status in (PENDING, RUNNING, INTERRUPTED):
            end_run(tx, ns, run_id, rec, TIMEOUT, error=f"the run exceeded its timeout of {rec.timeout_ms} ms")


def rollback(tx: Tx, ns: str, run_id: str, rec: RunRec) -> int:
    """Remove a run's checkpoints, pending writes and events from its thread; returns checkpoints removed."""
    txn, store, tkey = tx.txn, tx.store, rec.tkey
    idx = store.db["runidx"]
    prefix = layout.run_prefix(ns, run_id)
    ckeys = [k for k in layout.run_checkpoints(txn, idx, ns, run_id) if layout.split_ckpt_key(k)[0] == tkey]
    for ckey in ckeys:
        records.delete_checkpoint_at(txn, store, ns, ckey)
        txn.delete(prefix + ckey, db=idx)
    tprefix = layout.tkey_prefix(tkey)
    for db_name, decode in (("writes", layout.write_decoder.decode), ("events", layout.event_decoder.decode)):
        db = store.db[db_name]
        doomed = []
        cursor = txn.cursor(db=db)
        if cursor.set_range(tprefix):
            for key, value in cursor.iternext():
                if not key.startswith(tprefix):
                    break
                r = decode(value)
                if r.run_id == run_id:
                    doomed.append((bytes(key), getattr(r, "client_event_id", "")))
        for key, client_id in doomed:
            txn.delete(key, db=db)
            if client_id:
                txn.delete(layout.tkey_str_key(tkey, client_id), db=store.db["evids"])
    rec.last_checkpoint_id = ""
    tx.garbage = True
    return len(ckeys)


def _stop_active(tx: Tx, ns: str, by: str, strategy: int, active_id: str, active: RunRec) -> None:
    """INTERRUPT / ROLLBACK: stop the thread's active run in favour of run ``by``."""
    _release(tx, ns, active_id, active)
    _clear_deadline(tx, ns, active_id, active)
    active.held = False
    active.stopped_by = by
    active.ended_us = tx.now
    if strategy == ROLLBACK:
        removed = rollback(tx, ns, active_id, active)
        active.status = CANCELLED
        active.rolled_back = True
        active.error = f"rolled back by run {by!r}"
        tx.put_run(ns, active_id, active)
        tx.server_event(ns, active, by, "rolled_back", stopped_run_id=active_id, removed_checkpoints=removed)
    else:
        active.status = INTERRUPTED
        active.error = f"interrupted by run {by!r}"
        tx.put_run(ns, active_id, active)
        tx.server_event(ns, active, active_id, "interrupted", reason="interrupted", by=by)


# ----------------------------------------------------------------- branches

def copy_checkpoint(tx: Tx, ns: str, src_tkey: int, dst_tkey: int, cns: str, checkpoint_id: str,
                    overwrite: bool = True) -> bool:
    """Copy one checkpoint manifest with its pending writes (values are shared)."""
    txn, store = tx.txn, tx.store
    ckpts, writes = store.db["ckpts"], store.db["writes"]
    raw = txn.get(layout.ckpt_key(src_tkey, cns, checkpoint_id), db=ckpts)
    if raw is None:
        return False
    dst_key = layout.ckpt_key(dst_tkey, cns, checkpoint_id)
    if not overwrite and txn.get(dst_key, db=ckpts) is not None:
        return False
    raw = bytes(raw)
    txn.put(dst_key, raw, db=ckpts)
    m = layout.manifest_decoder.decode(raw)
    keep = store.gc_keep
    if m.run_id is not None:
        txn.put(layout.run_key(ns, m.run_id, dst_tkey, cns, checkpoint_id), layout.run_entry(ns, m.run_id),
                db=store.db["runidx"])
    if keep is not None:
        keep.update(node_id for _, node_id in m.channels)
        if m.extra:
            keep.add(m.extra)
    src_prefix = layout.writes_prefix(src_tkey, cns, checkpoint_id)
    cursor = txn.cursor(db=writes)
    rows = []
    if cursor.set_range(src_prefix):
        for key, value in cursor.iternext():
            if not key.startswith(src_prefix):
                break
            rows.append((layout.writes_prefix(dst_tkey, cns, checkpoint_id) + bytes(key[len(src_prefix):]),
                         bytes(value)))
    for key, value in rows:
        txn.put(key, value, db=writes)
        if keep is not None:
            keep.add(layout.write_decoder.decode(value).value)
    return True


def _branches(txn, store: Store, tkey: int):
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["branches"])
    if cursor.set_range(prefix):
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                return
            yield bytes(key), layout.branch_decoder.decode(value)


def _create_fork(tx: Tx, ns: str, thread_id: str, trec, run_id: str, rec: RunRec, branch_id: str) -> None:
    txn, store = tx.txn, tx.store
    if branch_id == thread_id:
        raise invalid("branch_thread_id", "must differ from thread_id")
    if records.thread(txn, store, ns, branch_id) is not None:
        raise ApiError("THREAD_ALREADY_EXISTS", f"branch thread {branch_id!r} exists in namespace {ns!r}",
                       field="branch_thread_id", thread_id=branch_id)
    fork_id = rec.start_checkpoint_id
    if not fork_id:
        head = records.latest(txn, store, trec.tkey, rec.cns)
        fork_id = head[0] if head else ""
    brec = records.create_thread(txn, store, ns, branch_id, bytes(trec.metadata))
    if fork_id:
        copy_checkpoint(tx, ns, trec.tkey, brec.tkey, rec.cns, fork_id)
    pst = tx.state(ns, thread_id, trec.tkey)
    pst.branches += 1
    tx.touch_state(trec.tkey)
    txn.put(layout.seq_key(trec.tkey, pst.branches),
            layout.encode(BranchRec(layout.FORMAT_VERSION, branch_id, rec.cns, fork_id, run_id, tx.now, 0)),
            db=store.db["branches"])
    bst = tx.state(ns, branch_id, brec.tkey)
    bst.parent_thread = thread_id
    rec.thread_id, rec.tkey, rec.branch_of, rec.start_checkpoint_id = branch_id, brec.tkey, thread_id, fork_id
    tx.append_event(ns, thread_id, trec.tkey, layout.EventRec(
        layout.FORMAT_VERSION, run_id, "", runstate.SERVER_EVENT_PREFIX + "run.forked",
        runstate.encode_obj({"run_id": run_id, "branch_thread_id": branch_id, "fork_checkpoint_id": fork_id}),
        "", tx.now))


# ----------------------------------------------------------------- calls

def _strategy(value: int) -> int:
    if value == 0:
        return REJECT
    if value not in (REJECT, ENQUEUE, INTERRUPT, ROLLBACK, FORK):
        raise invalid("multitask_strategy", f"unknown strategy {value}")
    return value


async def create(ctx: Ctx, req: rpb.CreateRunRequest) -> rpb.CreateRunResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    run_id = validate.ident(req.run_id, "run_id", required=False) or str(uuid.uuid4())
    strategy = _strategy(req.multitask_strategy)
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    start_id = validate.ident(req.start_checkpoint_id, "start_checkpoint_id", required=False)
    lease_ms = _duration_ms(req.lease_timeout, "lease_timeout") or ctx.default_lease_ms
    if not limits.MIN_LEASE_MS <= lease_ms <= MAX_LEASE_MS:
        raise invalid("lease_timeout", f"must be between {limits.MIN_LEASE_MS} ms and 24 h")
    on_expiry = req.on_lease_expired or REQUEUE
    if on_expiry not in (REQUEUE, HOLD):
        raise invalid("on_lease_expired", f"unknown policy {on_expiry}")
    timeout_ms = _duration_ms(req.timeout, "timeout")
    budget = wire.counters_of(req.budget, "budget")
    inp = wire.payload(req.input, "input") if req.HasField("input") else None
    metadata = wire.encode_metadata_dict(wire.metadata_items(req.metadata, "metadata"), "metadata")
    branch_id = validate.ident(req.branch_thread_id, "branch_thread_id", required=False) or str(uuid.uuid4())

    def apply(tx: Tx):
        txn, store = tx.txn, tx.store
        trec = records.thread(txn, store, ns, thread_id)
        if trec is None:
            if not req.create_thread:
                raise thread_not_found(ns, thread_id)
            trec = records.create_thread(txn, store, ns, thread_id)
        if tx.run(ns, run_id) is not None:
            raise ApiError("RUN_ALREADY_EXISTS", f"run {run_id!r} exists in namespace {ns!r}", run_id=run_id,
                           field="run_id")
        if start_id and records.manifest(txn, store, trec.tkey, cns, start_id) is None:
            raise checkpoint_not_found(thread_id, cns, start_id, "start_checkpoint_id")
        rec = RunRec(layout.FORMAT_VERSION, thread_id, trec.tkey, 0, PENDING, strategy, tx.now, tx.now, 0, 0, inp,
                     msgspec.Raw(metadata), None, "", cns, start_id, "", "", 0, lease_ms, on_expiry,
                     req.max_attempts or DEFAULT_MAX_ATTEMPTS, 1, timeout_ms, 0, budget, layout.ZERO_COUNTERS,
                     "", "", False, False, 0, 0)
        resp = rpb.CreateRunResponse()
        if strategy == FORK:
            _create_fork(tx, ns, thread_id, trec, run_id, rec, branch_id)
        st = tx.state(ns, rec.thread_id, rec.tkey)
        active_id = st.active
        active = tx.run(ns, active_id) if active_id else None
        queued = False
        if active is not None:
            if strategy == REJECT:
                raise ApiError("THREAD_BUSY", f"thread {thread_id!r} is busy with run {active_id!r} "
                               f"({STATUS_NAMES[active.status]})", run_id=active_id,
                               status=STATUS_NAMES[active.status], thread_id=thread_id)
            if strategy == ENQUEUE:
                queued = True
            else:  # INTERRUPT, ROLLBACK
                _stop_active(tx, ns, run_id, strategy, active_id, active)
                resp.stopped_run_id = active_id
        st.runs += 1
        rec.seq = st.runs
        txn.put(layout.seq_key(rec.tkey, rec.seq), run_id.encode(), db=store.db["thruns"])
        if queued:
            st.queue.append(run_id)
        else:
            st.active = run_id
        tx.put_run(ns, run_id, rec)
        tx.touch(ns, rec)
        tx.server_event(ns, rec, run_id, "created", strategy=rpb.MultitaskStrategy.Name(strategy),
                        queue_position=len(st.queue) if queued else 0)
        if not queued:
            tx.server_event(ns, rec, run_id, "activated")
            if req.claim:
                resp.lease.CopyFrom(claim(tx, ns, run_id, rec))
        resp.run.CopyFrom(_run_proto(tx, ns, run_id, rec))
        return resp

    return await context.write(ctx, ns, "CreateRun", req, rpb.CreateRunResponse, apply)


def _read_run(store: Store, ns: str, run_id: str):
    with store.read() as txn:
        raw = txn.get(layout.ns_key(ns, run_id), db=store.db["runs"])
        if raw is None:
            return None, None
        rec = layout.run_decoder.decode(raw)
        sraw = txn.get(layout.u64(rec.tkey), db=store.db["tstate"])
        return rec, (None if sraw is None else layout.tstate_decoder.decode(sraw))


async def get(ctx: Ctx, req: rpb.GetRunRequest) -> rpb.GetRunResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id")
    rec, st = _read_run(ctx.store, ns, run_id)
    if rec is None:
        raise run_not_found(ns, run_id)
    return rpb.GetRunResponse(run=to_proto(ns, run_id, rec, st))


async def list_(ctx: Ctx, req: rpb.ListRunsRequest) -> rpb.ListRunsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    size = validate.page_size(req.page_size)
    statuses = set(req.statuses)
    fp = wire.fingerprint("runs", ns, thread_id, sorted(statuses))
    position = wire.read_token(req.page_token, fp)
    out = rpb.ListRunsResponse()
    store = ctx.store
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        sraw = txn.get(layout.u64(trec.tkey), db=store.db["tstate"])
        st = None if sraw is None else layout.tstate_decoder.decode(sraw)
        start = layout.seq_key(trec.tkey, (position[0] if position else 0) + 1)
        prefix = layout.tkey_prefix(trec.tkey)
        cursor = txn.cursor(db=store.db["thruns"])
        found = cursor.set_range(start)
        while found and cursor.key().startswith(prefix):
            seq = layout.split_seq_key(cursor.key())[1]
            run_id = bytes(cursor.value()).decode()
            raw = txn.get(layout.ns_key(ns, run_id), db=store.db["runs"])
            if raw is not None:
                rec = layout.run_decoder.decode(raw)
                if not statuses or rec.status in statuses:
                    if len(out.runs) == size:
                        out.next_page_token = wire.make_token(fp, (seq - 1,))
                        break
                    to_proto(ns, run_id, rec, st, out.runs.add())
            found = cursor.next()
    return out


async def claim_call(ctx: Ctx, req: rpb.ClaimRunRequest) -> rpb.ClaimRunResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id", required=False)
    thread_id = validate.ident(req.thread_id, "thread_id", required=not run_id)
    wait_ms = _duration_ms(req.wait_timeout, "wait_timeout")
    if wait_ms > limits.MAX_CLAIM_WAIT_SECONDS * 1000:
        raise invalid("wait_timeout", f"at most {limits.MAX_CLAIM_WAIT_SECONDS} s")
    deadline = time.monotonic() + wait_ms / 1000

    def apply(tx: Tx):
        if run_id:
            rec = tx.require_run(ns, run_id)
            rid = run_id
        else:
            trec = threads.require(tx.txn, tx.store, ns, thread_id)
            st = tx.state(ns, thread_id, trec.tkey)
            if not st.active:
                raise ApiError("RUN_NOT_ACTIVE", f"thread {thread_id!r} has no active run to claim",
                               thread_id=thread_id, status="")
            rid = st.active
            rec = tx.require_run(ns, rid)
        st = tx.state_of(ns, rec)
        if rec.status != PENDING or st.active != rid:
            why = "it is queued" if rid in st.queue else "only the thread's active PENDING run can be claimed"
            raise not_active(rid, rec, st.active, why)
        lease = claim(tx, ns, rid, rec)
        return rpb.ClaimRunResponse(run=_run_proto(tx, ns, rid, rec), lease=lease)

    while True:
        key = (ns, thread_id) if not run_id else None
        verdict = "try"
        if run_id:
            rec, _ = _read_run(ctx.store, ns, run_id)
            if rec is not None:
                key = (ns, rec.thread_id)
        version = ctx.hub.version(key) if key else 0
        if wait_ms:  # look first (a read), so that waiting costs no write transactions
            verdict = _claim_outlook(ctx.store, ns, run_id, thread_id)
        remaining = deadline - time.monotonic()
        if verdict == "wait" and remaining > 0 and key is not None:
            await ctx.hub.wait(key, version, min(remaining, 1.0))
            continue
        try:
            return await context.write(ctx, ns, "ClaimRun", req, rpb.ClaimRunResponse, apply)
        except ApiError as e:
            remaining = deadline - time.monotonic()
            if e.reason != "RUN_NOT_ACTIVE" or remaining <= 0 or key is None or \
                    _claim_outlook(ctx.store, ns, run_id, thread_id) != "wait":
                raise
            await ctx.hub.wait(key, version, min(remaining, 1.0))


def _claim_outlook(store: Store, ns: str, run_id: str, thread_id: str) -> str:
    """"try" when the run (or the thread's active run) looks claimable or cannot become so (the write then
    says why); "wait" while it is queued, held by another lease, held for an operator, or the thread has
    no active run."""
    with store.read() as txn:
        if run_id:
            raw = txn.get(layout.ns_key(ns, run_id), db=store.db["runs"])
            if raw is None:
                return "try"
            rec = layout.run_decoder.decode(raw)
            tkey = rec.tkey
        else:
            trec = records.thread(txn, store, ns, thread_id)
            if trec is None:
                return "try"
            tkey = trec.tkey
        sraw = txn.get(layout.u64(tkey), db=store.db["tstate"])
        st = None if sraw is None else layout.tstate_decoder.decode(sraw)
        if not run_id:
            if st is None or not st.active:
                return "wait"
            raw = txn.get(layout.ns_key(ns, st.active), db=store.db["runs"])
            if raw is None:
                return "try"
            run_id, rec = st.active, layout.run_decoder.decode(raw)
    active = st is not None and st.active == run_id
    if rec.status == PENDING and active:
        return "try"
    if rec.status == PENDING or rec.status == RUNNING or (rec.status == INTERRUPTED and rec.held):
        return "wait"
    return "try"


async def heartbeat(ctx: Ctx, req: rpb.HeartbeatRequest) -> rpb.HeartbeatResponse:
    ns = validate.namespace(req.namespace)

    def apply(tx: Tx):
        rec = context.holder(tx, ns, req.run_id, req.lease_id)
        renew_lease(tx, ns, req.run_id, rec)
        resp = rpb.HeartbeatResponse(run=_run_proto(tx, ns, req.run_id, rec))
        wire.set_timestamp(resp.lease_expire_time, rec.lease_expires_us)
        return resp

    return await context.write(ctx, ns, "Heartbeat", req, rpb.HeartbeatResponse, apply)


async def complete(ctx: Ctx, req: rpb.CompleteRunRequest) -> rpb.CompleteRunResponse:
    ns = validate.namespace(req.namespace)
    output = wire.payload(req.output, "output") if req.HasField("output") else None

    def apply(tx: Tx):
        rec = context.holder(tx, ns, req.run_id, req.lease_id)
        nxt = end_run(tx, ns, req.run_id, rec, INTERRUPTED if req.interrupted else SUCCESS, output=output,
                      event="paused" if req.interrupted else "success")
        return rpb.CompleteRunResponse(run=_run_proto(tx, ns, req.run_id, rec), next_run_id=nxt)

    return await context.write(ctx, ns, "CompleteRun", req, rpb.CompleteRunResponse, apply)


async def fail(ctx: Ctx, req: rpb.FailRunRequest) -> rpb.FailRunResponse:
    ns = validate.namespace(req.namespace)
    error = validate.text(req.error, "error")

    def apply(tx: Tx):
        rec = context.holder(tx, ns, req.run_id, req.lease_id)
        nxt = end_run(tx, ns, req.run_id, rec, ERROR, error=error or "failed")
        return rpb.FailRunResponse(run=_run_proto(tx, ns, req.run_id, rec), next_run_id=nxt)

    return await context.write(ctx, ns, "FailRun", req, rpb.FailRunResponse, apply)


async def cancel(ctx: Ctx, req: rpb.CancelRunRequest) -> rpb.CancelRunResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id")
    reason = validate.text(req.reason, "reason")

    def apply(tx: Tx):
        rec = tx.require_run(ns, run_id)
        st = tx.state_of(ns, rec)
        if rec.status == CANCELLED:
            return rpb.CancelRunResponse(run=to_proto(ns, run_id, rec, st))
        if st.active != run_id and run_id not in st.queue:
            raise not_active(run_id, rec, st.active, "it has ended")
        nxt = end_run(tx, ns, run_id, rec, CANCELLED, error=reason or "cancelled")
        return rpb.CancelRunResponse(run=_run_proto(tx, ns, run_id, rec), next_run_id=nxt)

    return await context.write(ctx, ns, "CancelRun", req, rpb.CancelRunResponse, apply)


async def resume(ctx: Ctx, req: rpb.ResumeRunRequest) -> rpb.ResumeRunResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id")

    def apply(tx: Tx):
        rec = tx.require_run(ns, run_id)
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
        return rpb.ResumeRunResponse(run=_run_proto(tx, ns, run_id, rec))

    return await context.write(ctx, ns, "ResumeRun", req, rpb.ResumeRunResponse, apply)


# ----------------------------------------------------------------- branches (calls)

async def list_branches(ctx: Ctx, req: rpb.ListBranchesRequest) -> rpb.ListBranchesResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("branches", ns, thread_id)
    position = wire.read_token(req.page_token, fp)
    after = position[0] if position else 0
    out = rpb.ListBranchesResponse()
    store = ctx.store
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        for key, b in _branches(txn, store, trec.tkey):
            seq = layout.split_seq_key(key)[1]
            if seq <= after:
                continue
            brec = records.thread(txn, store, ns, b.branch_thread_id)
            if brec is None:
                continue  # the branch thread was deleted
            if len(out.branches) == size:
                out.next_page_token = wire.make_token(fp, (seq - 1,))
                break
            head = records.latest(txn, store, brec.tkey, b.cns)
            item = out.branches.add(thread_id=thread_id, branch_thread_id=b.branch_thread_id, checkpoint_ns=b.cns,
                                    fork_checkpoint_id=b.fork_checkpoint_id, run_id=b.run_id,
                                    head_checkpoint_id=head[0] if head else "")
            wire.set_timestamp(item.create_time, b.created_us)
            if b.promoted_us:
                wire.set_timestamp(item.promote_time, b.promoted_us)
    return out


async def promote(ctx: Ctx, req: rpb.PromoteBranchRequest) -> rpb.PromoteBranchResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    branch_id = validate.ident(req.branch_thread_id, "branch_thread_id")

    def apply(tx: Tx):
        txn, store = tx.txn, tx.store
        trec = threads.require(txn, store, ns, thread_id)
        found = [(k, b) for k, b in _branches(txn, store, trec.tkey) if b.branch_thread_id == branch_id]
        brec = records.thread(txn, store, ns, branch_id)
        if not found or brec is None:
            raise thread_not_found(ns, branch_id, "branch_thread_id")
        bkey, branch = found[-1]
        for tid, tk in ((thread_id, trec.tkey), (branch_id, brec.tkey)):
            st = tx.peek_state(tk)
            if st is not None and st.active:
                raise ApiError("THREAD_BUSY", f"thread {tid!r} has an active run {st.active!r}", run_id=st.active,
                               thread_id=tid)
        cns = branch.cns
        fetch = nodes.fetcher(txn, store)
        head = records.latest(txn, store, trec.tkey, cns)
        head_etag = "" if head is None else records.etag_of(head[0], head[1], fetch)
        if req.HasField("expected_head_etag") and req.expected_head_etag != head_etag:
            raise ApiError("ETAG_MISMATCH", f"expected_head_etag {req.expected_head_etag!r} is stale; the head of "
                           f"thread {thread_id!r} is {head_etag!r}", field="expected_head_etag",
                           current_etag=head_etag)
        bhead = records.latest(txn, store, brec.tkey, cns)
        if bhead is None:
            raise checkpoint_not_found(branch_id, cns, "", "branch_thread_id")
        copied = 0
        prefix = layout.cns_prefix(brec.tkey, cns)
        cursor = txn.cursor(db=store.db["ckpts"])
        ids = []
        if cursor.set_range(prefix):
            for key in cursor.iternext(values=False):
                if not key.startswith(prefix):
                    break
                ids.append(bytes(key[len(prefix):]).decode())
        for cid in ids:
            if copy_checkpoint(tx, ns, brec.tkey, trec.tkey, cns, cid, overwrite=False):
                copied += 1
        new_id = checkpoints.new_checkpoint_id()
        latest_now = records.latest(txn, store, trec.tkey, cns)
        if latest_now is not None and latest_now[0] >= new_id:
            raise ApiError("CONFLICT", f"thread {thread_id!r} has checkpoint ids that sort after server-made ids; "
                           "cannot put a new head", thread_id=thread_id)
        bid, bm = bhead
        meta = wire.stored_metadata(bm.metadata)
        meta["source"] = runstate.encode_obj("promote")
        meta["promoted_from"] = runstate.encode_obj(branch_id)
        metadata = wire.encode_metadata_dict(meta, "metadata")
        m = layout.Manifest(layout.FORMAT_VERSION, layout.pack_id(bid), tx.now, msgspec.Raw(metadata),
                            list(bm.channels), bm.extra, bm.schema_version, bm.run_id)
        txn.put(layout.ckpt_key(trec.tkey, cns, new_id), layout.encode(m), db=store.db["ckpts"])
        if m.run_id is not None:
            txn.put(layout.run_key(ns, m.run_id, trec.tkey, cns, new_id), layout.run_entry(ns, m.run_id),
                    db=store.db["runidx"])
        keep = store.gc_keep
        if keep is not None:
            keep.update(node_id for _, node_id in m.channels)
            if m.extra:
                keep.add(m.extra)
        branch.promoted_us = tx.now
        txn.put(bkey, layout.encode(branch), db=store.db["branches"])
        tx.append_event(ns, thread_id, trec.tkey, layout.EventRec(
            layout.FORMAT_VERSION, branch.run_id, "", runstate.SERVER_EVENT_PREFIX + "branch.promoted",
            runstate.encode_obj({"branch_thread_id": branch_id, "checkpoint_id": new_id}), "", tx.now))
        return rpb.PromoteBranchResponse(checkpoint_id=new_id, etag=records.etag_of(new_id, m, fetch),
                                         copied_checkpoints=copied)

    return await context.write(ctx, ns, "PromoteBranch", req, rpb.PromoteBranchResponse, apply)


# ----------------------------------------------------------------- steps

def step_to_proto(ns: str, thread_id: str, run_id: str, step_id: str, s: StepRec, out: rpb.Step | None = None):
    out = out if out is not None else rpb.Step()
    out.namespace, out.thread_id, out.run_id, out.step_id = ns, thread_id, run_id, step_id
    out.kind, out.name, out.error, out.attempt = s.kind, s.name, s.error, s.attempt
    out.input.digest = s.input_digest
    if s.input_body is not None:
        wire.set_value(out.input.body, s.input_body)
    if s.output_digest or s.output_body is not None:
        out.output.digest = s.output_digest
        if s.output_body is not None:
            wire.set_value(out.output.body, s.output_body)
    wire.fill_counters(out.counters, s.counters)
    wire.set_timestamp(out.start_time, s.start_us)
    if s.end_us:
        wire.set_timestamp(out.end_time, s.end_us)
    return out


def _check_budget(rec: RunRec, add) -> None:
    for i, name in enumerate(runstate.COUNTER_NAMES):
        b = rec.budget[i]
        if b and (rec.usage[i] >= b or rec.usage[i] + add[i] > b):
            raise ApiError("BUDGET_EXCEEDED", f"the step would take the run's {name} to {rec.usage[i] + add[i]}, "
                           f"over its budget of {b}", budget=name, run_id=None)


def _add_usage(tx: Tx, ns: str, run_id: str, rec: RunRec, delta, new_steps: int) -> None:
    rec.usage = runstate.add_counters(rec.usage, delta)
    rec.steps += new_steps
    tx.put_run(ns, run_id, rec)
    st = tx.state_of(ns, rec)
    st.usage = runstate.add_counters(st.usage, delta)
    st.steps += new_steps
    tx.touch(ns, rec)


def _payload(p: rpb.StepPayload, field: str) -> tuple[str, bytes | None]:
    digest = validate.text(p.digest, f"{field}.digest")
    body = wire.payload(p.body, f"{field}.body") if p.HasField("body") else None
    return digest, body


def record_step(tx: Tx, ns: str, run_id: str, rec: RunRec, sr: rpb.StepRecord, field: str, *,
                start_only: bool = False, upsert: bool = False) -> rpb.Step:
    """Store a step of a running run (StartStep, RecordStep, puts)."""
    step_id = validate.ident(sr.step_id, f"{field}.step_id", required=False) or checkpoints.new_checkpoint_id()
    key = layout.step_key(rec.tkey, rec.seq, step_id)
    db = tx.db["steps"]
    raw = tx.txn.get(key, db=db)
    if raw is not None:
        if not upsert:
            raise ApiError("STEP_ALREADY_EXISTS", f"step {step_id!r} exists in run {run_id!r}",
                           field=f"{field}.step_id", run_id=run_id)
        old = layout.step_decoder.decode(raw)
        if old.end_us or sr.open:
            return step_to_proto(ns, rec.thread_id, run_id, step_id, old)
        return end_step(tx, ns, run_id, rec, step_id, sr.output, sr.error, sr.counters,
                        sr.end_time if sr.HasField("end_time") else None, field)
    if sr.kind not in (0, 1, 2, 3):
        raise invalid(f"{field}.kind", f"unknown kind {sr.kind}")
    name = validate.text(sr.name, f"{field}.name", limits.MAX_ID_BYTES)
    in_digest, in_body = _payload(sr.input, f"{field}.input")
    out_digest, out_body = _payload(sr.output, f"{field}.output")
    error = validate.text(sr.error, f"{field}.error")
    counters = wire.counters_of(sr.counters, f"{field}.counters")
    start_us = wire.bounded_timestamp_us(sr.start_time, f"{field}.start_time") if sr.HasField("start_time") else tx.now
    end_us = 0
    if not (start_only or sr.open):
        end_us = wire.bounded_timestamp_us(sr.end_time, f"{field}.end_time") if sr.HasField("end_time") else tx.now
        if end_us < start_us:
            raise invalid(f"{field}.end_time", "is before start_time")
        if not counters[3]:
            counters = (*counters[:3], (end_us - start_us) // 1000, counters[4])
    _check_budget(rec, counters)
    s = StepRec(layout.FORMAT_VERSION, sr.kind, name, in_digest, in_body, out_digest, out_body, error, counters,
                start_us, end_us, rec.attempt)
    tx.txn.put(key, layout.encode(s), db=db)
    _add_usage(tx, ns, run_id, rec, counters, 1)
    return step_to_proto(ns, rec.thread_id, run_id, step_id, s)


def end_step(tx: Tx, ns: str, run_id: str, rec: RunRec, step_id: str, output: rpb.StepPayload, error: str,
             counters: rpb.ResourceCounters, end_time, field: str = "") -> rpb.Step:
    prefix = f"{field}." if field else ""
    key = layout.step_key(rec.tkey, rec.seq, step_id)
    raw = tx.txn.get(key, db=tx.db["steps"])
    if raw is None:
        raise ApiError("STEP_NOT_FOUND", f"no step {step_id!r} in run {run_id!r}", field=prefix + "step_id",
                       run_id=run_id)
    s = layout.step_decoder.decode(raw)
    if s.end_us:
        raise ApiError("STEP_ENDED", f"step {step_id!r} of run {run_id!r} has ended already",
                       field=prefix + "step_id", run_id=run_id)
    digest, body = _payload(output, prefix + "output")
    used = wire.counters_of(counters, prefix + "counters")
    end_us = wire.bounded_timestamp_us(end_time, prefix + "end_time") if end_time is not None else tx.now
    if end_us < s.start_us:
        raise invalid(prefix + "end_time", "is before the step's start_time")
    if not used[3]:
        used = (*used[:3], (end_us - s.start_us) // 1000, used[4])
    delta = runstate.sub_counters(used, s.counters)
    s.output_digest, s.output_body = digest, body
    s.error = validate.text(error, prefix + "error")
    s.counters = used
    s.end_us = end_us
    tx.txn.put(key, layout.encode(s), db=tx.db["steps"])
    _add_usage(tx, ns, run_id, rec, delta, 0)
    return step_to_proto(ns, rec.thread_id, run_id, step_id, s)


async def start_step(ctx: Ctx, req: rpb.StartStepRequest) -> rpb.StartStepResponse:
    ns = validate.namespace(req.namespace)

    def apply(tx: Tx):
        rec = context.holder(tx, ns, req.run_id, req.lease_id)
        renew_lease(tx, ns, req.run_id, rec)
        step = record_step(tx, ns, req.run_id, rec, req.step, "step", start_only=True)
        resp = rpb.StartStepResponse(step=step)
        wire.fill_counters(resp.run_usage, rec.usage)
        return resp

    return await context.write(ctx, ns, "StartStep", req, rpb.StartStepResponse, apply)


async def record_step_call(ctx: Ctx, req: rpb.RecordStepRequest) -> rpb.RecordStepResponse:
    ns = validate.namespace(req.namespace)

    def apply(tx: Tx):
        rec = context.holder(tx, ns, req.run_id, req.lease_id)
        renew_lease(tx, ns, req.run_id, rec)
        step = record_step(tx, ns, req.run_id, rec, req.step, "step")
        resp = rpb.RecordStepResponse(step=step)
        wire.fill_counters(resp.run_usage, rec.usage)
        return resp

    return await context.write(ctx, ns, "RecordStep", req, rpb.RecordStepResponse, apply)


async def end_step_call(ctx: Ctx, req: rpb.EndStepRequest) -> rpb.EndStepResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id")
    step_id = validate.ident(req.step_id, "step_id")

    def apply(tx: Tx):
        rec = tx.require_run(ns, run_id)
        step = end_step(tx, ns, run_id, rec, step_id, req.output, req.error, req.counters,
                        req.end_time if req.HasField("end_time") else None)
        resp = rpb.EndStepResponse(step=step)
        wire.fill_counters(resp.run_usage, rec.usage)
        return resp

    return await context.write(ctx, ns, "EndStep", req, rpb.EndStepResponse, apply)


async def list_steps(ctx: Ctx, req: rpb.ListStepsRequest) -> rpb.ListStepsResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id")
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("steps", ns, run_id)
    position = wire.read_token(req.page_token, fp)
    out = rpb.ListStepsResponse()
    store = ctx.store
    with store.read() as txn:
        raw = txn.get(layout.ns_key(ns, run_id), db=store.db["runs"])
        if raw is None:
            raise run_not_found(ns, run_id)
        rec = layout.run_decoder.decode(raw)
        prefix = layout.step_prefix(rec.tkey, rec.seq)
        cursor = txn.cursor(db=store.db["steps"])
        found = cursor.set_range(prefix + position[0].encode() + b"\x00" if position else prefix)
        last = None
        while found and cursor.key().startswith(prefix):
            step_id = bytes(cursor.key()[len(prefix):]).decode()
            if len(out.steps) == size:
                out.next_page_token = wire.make_token(fp, (last,))
                break
            step_to_proto(ns, rec.thread_id, run_id, step_id, layout.step_decoder.decode(cursor.value()),
                          out.steps.add())
            last = step_id
            found = cursor.next()
    return out


async def thread_usage(ctx: Ctx, req: rpb.GetThreadUsageRequest) -> rpb.GetThreadUsageResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    store = ctx.store
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        raw = txn.get(layout.u64(trec.tkey), db=store.db["tstate"])
    resp = rpb.GetThreadUsageResponse()
    if raw is not None:
        st = layout.tstate_decoder.decode(raw)
        wire.fill_counters(resp.usage, st.usage)
        resp.runs, resp.steps = st.runs, st.steps
    return resp


# ----------------------------------------------------------------- thread deletion

def delete_thread_records(txn, store: Store, ns: str, tkey: int) -> None:
    """Delete a thread's runs (with steps and timers), run state, events, artifacts, effects and branches."""
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
    cursor = txn.cursor(db=db["effthr"])
    keys = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            keys.append(bytes(key[8:]).decode())
    for ikey in keys:
        ekey = layout.ns_key(ns, ikey)
        raw = txn.get(ekey, db=db["effects"])
        if raw is not None and layout.effect_decoder.decode(raw).tkey == tkey:
            txn.delete(ekey, db=db["effects"])
    txn.delete(layout.u64(tkey), db=db["tstate"])
    for name in ("thruns", "steps", "events", "evids", "artifacts", "artnames", "effthr", "branches"):
        records.delete_prefix(txn, db[name], prefix)


# ----------------------------------------------------------------- watchdog

def extend_leases_after_restart(store: Store) -> int:
    """Give every RUNNING lease one more lease timeout from now (no holder could heartbeat while the
    sidecar was down). Returns how many were extended."""
    def job(txn):
        tx = Tx(txn, store)
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
        tx.flush()
        return n

    return store.write(job)


class Watchdog:
    """The clock-driven task: fires due lease and deadline timers (see module doc)."""

    def __init__(self, ctx: Ctx, interval: float = 1.0) -> None:
        self.ctx = ctx
        self.interval = interval
        self._task: asyncio.Task | None = None
        self._failed: dict[bytes, float] = {}  # timer key -> when to try again
        self.fired = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sidecar-watchdog")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.reason != "SHUTTING_DOWN":
                    log.warning("watchdog: %s", e)
            except Exception:  # noqa: BLE001 - the watchdog must keep going
                log.exception("watchdog tick failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> int:
        store = self.ctx.store
        now = now_us()
        due_keys = []
        with store.read() as txn:
            cursor = txn.cursor(db=store.db["timers"])
            for key in cursor.iternext(values=False):
                if layout.read_u64(key[:8]) > now or len(due_keys) >= 1000:
                    break
                due_keys.append(bytes(key))
        if not due_keys:
            return 0

        def job(key):
            def run(txn):
                tx = Tx(txn, store)
                fire_timer(tx, key)
                tx.flush()
                return tx.touched, tx.garbage
            return run

        mono = time.monotonic()
        due_keys = [k for k in due_keys if self._failed.get(k, 0) <= mono]
        futures = [(k, asyncio.wrap_future(store.submit(job(k)))) for k in due_keys]
        for key, fut in futures:
            try:
                touched, _ = await fut
            except ApiError:
                raise
            except Exception:  # noqa: BLE001 - one bad timer must not stop the others
                log.exception("watchdog: timer %s failed; retrying in %d s", key.hex(), FAILED_TIMER_RETRY_SECONDS)
                self._failed[key] = mono + FAILED_TIMER_RETRY_SECONDS
                continue
            self._failed.pop(key, None)
            self.ctx.notify(touched)
        self.fired += len(due_keys)
        return len(due_keys)
