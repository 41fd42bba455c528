"""runs: RunService calls — runs and their multitask strategies, leases, branches, steps and usage.

Each call validates its request, runs the rules of runs (state/runs.py),
steps (state/steps.py) and branches (state/branches.py) — or, for creating
a run and promoting a branch, their composition in ops/runs.py — in one
write (context.write: answered once per request_id, watchers woken after the
commit), and builds the response. The state machine is drawn in
state/runs.py; the watchdog that fires lease and deadline timers is
api/watchdog.py.
"""
from __future__ import annotations

import time
import uuid

from google.protobuf import duration_pb2

from agentstate.v1 import runs_pb2 as rpb

from .. import limits
from ..errors import ApiError, invalid, run_not_found
from ..ops import runs as run_ops
from ..state import branches, runs, steps, threads
from ..state.runs import ENQUEUE, FORK, HOLD, INTERRUPT, REJECT, REQUEUE, ROLLBACK, RunSpec
from ..state.runstate import ERROR, INTERRUPTED, RUNNING, SUCCESS, Tx, renew_lease
from ..state.steps import StepEnd, StepInput
from ..storage import layout, records
from ..storage.layout import RunRec, StepRec
from ..storage.store import Store
from . import context, validate, wire
from .context import Ctx

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
    out.etag = runs.run_etag(rec)
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


# ----------------------------------------------------------------- calls

def _strategy(value: int) -> int:
    if value == 0:
        return REJECT
    if value not in (REJECT, ENQUEUE, INTERRUPT, ROLLBACK, FORK):
        raise invalid("multitask_strategy", f"unknown strategy {value}")
    return value


def create_input(ctx: Ctx, req: rpb.CreateRunRequest, cns: str, start_id: str, field: str = "",
                 metadata: bytes | None = None) -> tuple[str, RunSpec, str]:
    """(run_id, RunSpec, branch_id) of a validated CreateRunRequest (``field``: its path in the request, for
    errors; ``metadata``: an encoding in place of the request's)."""
    f = f"{field}." if field else ""
    run_id = validate.ident(req.run_id, f + "run_id", required=False) or str(uuid.uuid4())
    strategy = _strategy(req.multitask_strategy)
    lease_ms = _duration_ms(req.lease_timeout, f + "lease_timeout") or ctx.default_lease_ms
    if not limits.MIN_LEASE_MS <= lease_ms <= runs.MAX_LEASE_MS:
        raise invalid(f + "lease_timeout", f"must be between {limits.MIN_LEASE_MS} ms and 24 h")
    on_expiry = req.on_lease_expired or REQUEUE
    if on_expiry not in (REQUEUE, HOLD):
        raise invalid(f + "on_lease_expired", f"unknown policy {on_expiry}")
    timeout_ms = _duration_ms(req.timeout, f + "timeout")
    budget = wire.counters_of(req.budget, f + "budget")
    inp = wire.payload(req.input, f + "input") if req.HasField("input") else None
    if metadata is None:
        metadata = wire.metadata_encoding(req.metadata, f + "metadata")
    branch_id = validate.ident(req.branch_thread_id, f + "branch_thread_id", required=False) or str(uuid.uuid4())
    return run_id, RunSpec(strategy, cns, start_id, lease_ms, on_expiry, req.max_attempts, timeout_ms, budget, inp,
                           metadata), branch_id


def create_in(tx: Tx, ns: str, thread_id: str, run_id: str, spec: RunSpec, branch_id: str,
              req: rpb.CreateRunRequest) -> rpb.CreateRunResponse:
    """CreateRun's write (inside ``tx``)."""
    rec, stopped, claimed = run_ops.create(tx, ns, thread_id, run_id, spec, create_thread=req.create_thread,
                                           branch_id=branch_id, claim=req.claim)
    resp = rpb.CreateRunResponse(stopped_run_id=stopped)
    if claimed:
        resp.lease.CopyFrom(_lease_proto(run_id, rec))
    resp.run.CopyFrom(_run_proto(tx, ns, run_id, rec))
    return resp


async def create(ctx: Ctx, req: rpb.CreateRunRequest) -> rpb.CreateRunResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    start_id = validate.ident(req.start_checkpoint_id, "start_checkpoint_id", required=False)
    run_id, spec, branch_id = create_input(ctx, req, cns, start_id)

    def apply(tx: Tx):
        return create_in(tx, ns, thread_id, run_id, spec, branch_id, req)

    return await context.write(ctx, ns, "CreateRun", req, rpb.CreateRunResponse, apply)


def _read_run(store: Store, ns: str, run_id: str):
    with store.read() as txn:
        return runs.with_state(txn, store, ns, run_id)


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
        st = runs.thread_state(txn, store, trec.tkey)
        for seq, run_id, rec in runs.of_thread(txn, store, ns, trec.tkey, position[0] if position else 0):
            if not statuses or rec.status in statuses:
                if len(out.runs) == size:
                    out.next_page_token = wire.make_token(fp, (seq - 1,))
                    break
                to_proto(ns, run_id, rec, st, out.runs.add())
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
        tkey = None if run_id else threads.require(tx.txn, tx.store, ns, thread_id).tkey
        rid, rec = runs.claimable(tx, ns, run_id, tkey, thread_id)
        runs.claim(tx, ns, rid, rec)
        lease = _lease_proto(rid, rec)
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
    with store.read() as txn:
        return runs.claim_outlook(txn, store, ns, run_id, thread_id)


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
        nxt = runs.end_run(tx, ns, req.run_id, rec, INTERRUPTED if req.interrupted else SUCCESS, output=output,
                           event="paused" if req.interrupted else "success")
        return rpb.CompleteRunResponse(run=_run_proto(tx, ns, req.run_id, rec), next_run_id=nxt)

    return await context.write(ctx, ns, "CompleteRun", req, rpb.CompleteRunResponse, apply)


async def fail(ctx: Ctx, req: rpb.FailRunRequest) -> rpb.FailRunResponse:
    ns = validate.namespace(req.namespace)
    error = validate.text(req.error, "error")

    def apply(tx: Tx):
        rec = context.holder(tx, ns, req.run_id, req.lease_id)
        nxt = runs.end_run(tx, ns, req.run_id, rec, ERROR, error=error or "failed")
        return rpb.FailRunResponse(run=_run_proto(tx, ns, req.run_id, rec), next_run_id=nxt)

    return await context.write(ctx, ns, "FailRun", req, rpb.FailRunResponse, apply)


async def cancel(ctx: Ctx, req: rpb.CancelRunRequest) -> rpb.CancelRunResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id")
    reason = validate.text(req.reason, "reason")

    def apply(tx: Tx):
        rec = tx.require_run(ns, run_id)
        changed, nxt = runs.cancel(tx, ns, run_id, rec, reason)
        if not changed:  # cancelled already: the run as it is
            return rpb.CancelRunResponse(run=to_proto(ns, run_id, rec, tx.state_of(ns, rec)))
        return rpb.CancelRunResponse(run=_run_proto(tx, ns, run_id, rec), next_run_id=nxt)

    return await context.write(ctx, ns, "CancelRun", req, rpb.CancelRunResponse, apply)


async def resume(ctx: Ctx, req: rpb.ResumeRunRequest) -> rpb.ResumeRunResponse:
    ns = validate.namespace(req.namespace)
    run_id = validate.ident(req.run_id, "run_id")

    def apply(tx: Tx):
        rec = tx.require_run(ns, run_id)
        runs.resume(tx, ns, run_id, rec)
        return rpb.ResumeRunResponse(run=_run_proto(tx, ns, run_id, rec))

    return await context.write(ctx, ns, "ResumeRun", req, rpb.ResumeRunResponse, apply)


# ----------------------------------------------------------------- branches

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
        for key, b in branches.of_thread(txn, store, trec.tkey):
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
    expected = req.expected_head_etag if req.HasField("expected_head_etag") else None

    def apply(tx: Tx):
        new_id, etag, copied = run_ops.promote(tx, ns, thread_id, branch_id, expected)
        return rpb.PromoteBranchResponse(checkpoint_id=new_id, etag=etag, copied_checkpoints=copied)

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


def _payload(p: rpb.StepPayload, field: str) -> tuple[str, bytes | None]:
    digest = validate.text(p.digest, f"{field}.digest")
    body = wire.payload(p.body, f"{field}.body") if p.HasField("body") else None
    return digest, body


def step_input(sr: rpb.StepRecord, field: str, *, start_only: bool = False) -> StepInput:
    """A StepRecord, validated (errors name ``field``.step_id and so on). With ``start_only`` (StartStep)
    or ``sr.open`` the step stays open: its end time is not read."""
    step_id = validate.ident(sr.step_id, f"{field}.step_id", required=False)
    if sr.kind not in (0, 1, 2, 3):
        raise invalid(f"{field}.kind", f"unknown kind {sr.kind}")
    name = validate.text(sr.name, f"{field}.name", limits.MAX_ID_BYTES)
    in_digest, in_body = _payload(sr.input, f"{field}.input")
    out_digest, out_body = _payload(sr.output, f"{field}.output")
    error = validate.text(sr.error, f"{field}.error")
    counters = wire.counters_of(sr.counters, f"{field}.counters")
    start_us = wire.bounded_timestamp_us(sr.start_time, f"{field}.start_time") if sr.HasField("start_time") else None
    end_us = None
    if not (start_only or sr.open) and sr.HasField("end_time"):
        end_us = wire.bounded_timestamp_us(sr.end_time, f"{field}.end_time")
    return StepInput(step_id, sr.kind, name, in_digest, in_body, out_digest, out_body, error, counters, start_us,
                     end_us, sr.open)


def step_end(output: rpb.StepPayload, error: str, counters: rpb.ResourceCounters, end_time,
             field: str = "") -> StepEnd:
    """What ends a step (EndStep), validated; ``end_time`` None: not given."""
    prefix = f"{field}." if field else ""
    digest, body = _payload(output, prefix + "output")
    used = wire.counters_of(counters, prefix + "counters")
    end_us = wire.bounded_timestamp_us(end_time, prefix + "end_time") if end_time is not None else None
    return StepEnd(digest, body, used, end_us, validate.text(error, prefix + "error"))


def record_step(tx: Tx, ns: str, run_id: str, rec: RunRec, sr: rpb.StepRecord, field: str, *,
                start_only: bool = False, upsert: bool = False) -> rpb.Step:
    """Store a step of a running run (StartStep, RecordStep, puts): step_input, then state/steps.py."""
    step_id, s = steps.record_step(tx, ns, run_id, rec, step_input(sr, field, start_only=start_only), field,
                                   upsert=upsert, start_only=start_only)
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
        end = step_end(req.output, req.error, req.counters, req.end_time if req.HasField("end_time") else None)
        s = steps.end_step(tx, ns, run_id, rec, step_id, end)
        resp = rpb.EndStepResponse(step=step_to_proto(ns, rec.thread_id, run_id, step_id, s))
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
        rec = runs.get(txn, store, ns, run_id)
        if rec is None:
            raise run_not_found(ns, run_id)
        last = None
        for step_id, s in steps.of_run(txn, store, rec, position[0] if position else None):
            if len(out.steps) == size:
                out.next_page_token = wire.make_token(fp, (last,))
                break
            step_to_proto(ns, rec.thread_id, run_id, step_id, s, out.steps.add())
            last = step_id
    return out


async def thread_usage(ctx: Ctx, req: rpb.GetThreadUsageRequest) -> rpb.GetThreadUsageResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    store = ctx.store
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        st = runs.thread_state(txn, store, trec.tkey)
    resp = rpb.GetThreadUsageResponse()
    if st is not None:
        wire.fill_counters(resp.usage, st.usage)
        resp.runs, resp.steps = st.runs, st.steps
    return resp
