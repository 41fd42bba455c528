"""retention: RetentionService calls — policies validated and converted, passes that apply them, usage.

A pass (:func:`run_pass`, also the sweeper's retention step) plans each thread in a read snapshot on a worker
thread (never on the event loop the writer shares), then removes its checkpoints in jobs of at most
``batch`` (ops/retention.py re-checks the plan in each); a dry run plans the same way and removes nothing.
The garbage collector reclaims the nodes afterwards.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from agentstate.v1 import retention_pb2 as rpb
from google.protobuf import duration_pb2

from .. import limits
from ..errors import ApiError, invalid
from ..ops import retention as ret_ops
from ..state import retention, threads
from ..state.retention import Policy
from ..state.runstate import Tx
from ..storage import records
from ..storage.store import Store
from . import context, validate
from .context import Ctx

MAX_DURATION_US = 100 * 365 * 24 * 3600 * 1_000_000


# ----------------------------------------------------------------- conversion

def _duration_us(d: duration_pb2.Duration, name: str, present: bool) -> int:
    if not present:
        return 0
    if d.seconds < 0 or d.nanos < 0 or d.nanos >= 1_000_000_000:
        raise invalid(name, "must be a positive duration")
    if d.seconds == 0 and d.nanos == 0:
        return 0  # zero: the rule is off
    us = d.seconds * 1_000_000 + d.nanos // 1000
    if not 1_000_000 <= us <= MAX_DURATION_US:
        raise invalid(name, "must be from 1 s to 100 years")
    return us


def policy_input(p: rpb.RetentionPolicy, field: str = "policy") -> Policy:
    """A validated RetentionPolicy (errors name ``policy.<field>``)."""
    def dur(name: str) -> int:
        return _duration_us(getattr(p, name), f"{field}.{name}", p.HasField(name))

    thin_after, thin_interval = dur("thin_after"), dur("thin_interval")
    if bool(thin_after) != bool(thin_interval):
        raise invalid(f"{field}.{'thin_interval' if thin_after else 'thin_after'}",
                      "thin_after and thin_interval go together")
    if p.on_limit not in (rpb.LIMIT_ACTION_UNSPECIFIED, rpb.LIMIT_ACTION_REFUSE, rpb.LIMIT_ACTION_PRUNE):
        raise invalid(f"{field}.on_limit", f"unknown action {p.on_limit}")
    if len(p.history_channels) > limits.MAX_IDS_PER_CALL:
        raise invalid(f"{field}.history_channels", f"at most {limits.MAX_IDS_PER_CALL} channels")
    channels = tuple(validate.ident(c, f"{field}.history_channels[{i}]") for i, c in enumerate(p.history_channels))
    out = Policy(p.keep_last, dur("max_age"), thin_after, thin_interval, dur("delete_idle_thread_after"),
                 p.max_checkpoints, p.max_bytes, p.on_limit or rpb.LIMIT_ACTION_REFUSE, channels)
    if not (out.removes_history or out.idle_after_us or out.has_limits):
        raise invalid(field, "sets no rule (use clear to remove a policy)")
    return out


def _set_duration(d: duration_pb2.Duration, us: int) -> None:
    d.seconds, d.nanos = divmod(us, 1_000_000)
    d.nanos *= 1000


def policy_to_proto(p: Policy, out: rpb.RetentionPolicy) -> None:
    out.keep_last = p.keep_last
    for name, us in (("max_age", p.max_age_us), ("thin_after", p.thin_after_us),
                     ("thin_interval", p.thin_interval_us), ("delete_idle_thread_after", p.idle_after_us)):
        if us:
            _set_duration(getattr(out, name), us)
    out.max_checkpoints = p.max_checkpoints
    out.max_bytes = p.max_bytes
    out.on_limit = p.on_limit
    out.history_channels.extend(p.history_channels)


# ----------------------------------------------------------------- policies

def _effective_into(txn, store: Store, ns: str, thread_id: str, out) -> None:
    if thread_id:
        rec = threads.require(txn, store, ns, thread_id)
        policy, out.source = retention.effective(txn, store, ns, thread_id, rec.tkey)
    else:
        policy = retention.own(txn, store, ns, "", 0)
        out.source = retention.SOURCE_NAMESPACE if policy is not None else retention.SOURCE_NONE
    if policy is not None:
        policy_to_proto(policy, out.effective)


async def set_policy(ctx: Ctx, req: rpb.SetRetentionPolicyRequest) -> rpb.SetRetentionPolicyResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    policy = None
    if not req.clear:
        if not req.HasField("policy"):
            raise invalid("policy", "required unless clear")
        policy = policy_input(req.policy)

    def apply(tx: Tx) -> rpb.SetRetentionPolicyResponse:
        txn, store = tx.txn, tx.store
        tkey = threads.require(txn, store, ns, thread_id).tkey if thread_id else 0
        retention.set_policy(txn, store, ns, thread_id, tkey, policy, store.clock())
        out = rpb.SetRetentionPolicyResponse()
        _effective_into(txn, store, ns, thread_id, out)
        return out

    return await context.write(ctx, ns, "SetRetentionPolicy", req, rpb.SetRetentionPolicyResponse, apply)


async def get_policy(ctx: Ctx, req: rpb.GetRetentionPolicyRequest) -> rpb.GetRetentionPolicyResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    out = rpb.GetRetentionPolicyResponse()
    with ctx.store.read() as txn:
        _effective_into(txn, ctx.store, ns, thread_id, out)
    if out.source == retention.SOURCE_NONE:
        scope = f"thread {thread_id!r}" if thread_id else "the namespace"
        raise ApiError("RETENTION_POLICY_NOT_FOUND", f"no retention policy is in effect on {scope} of namespace "
                       f"{ns!r}", namespace=ns, thread_id=thread_id or None)
    return out


# ----------------------------------------------------------------- passes

@dataclass
class Report:
    """What a pass did (or, dry run, would do)."""

    removed: list[tuple[str, str, str]] = field(default_factory=list)  # (thread_id, cns, checkpoint_id)
    removed_count: int = 0
    deleted_threads: list[str] = field(default_factory=list)
    kept_by: dict[str, int] = field(default_factory=dict)
    stale: int = 0
    jobs: int = 0
    max_job_seconds: float = 0.0
    namespaces: set[str] = field(default_factory=set)

    def note(self, thread_id: str, batch) -> None:
        self.removed_count += len(batch)
        room = limits.MAX_RETENTION_REPORT - len(self.removed)
        self.removed.extend((thread_id, c.cns, c.checkpoint_id) for c in batch[:max(room, 0)])


def _targets(store: Store, ns: str | None, thread_id: str | None,
             ) -> tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]:
    """(namespace, thread ids) a pass looks at — every thread of a namespace with its own policy, the threads
    with their own policies otherwise — and the (namespace, thread id) of thread policy rows whose thread is
    gone (or is another thread of that id now)."""
    with store.read() as txn:
        if ns is not None and thread_id:
            return [(ns, [thread_id])], []
        out, stale = [], []
        for n, ids in retention.scopes(txn, store).items():
            if ns is not None and n != ns:
                continue
            own = []
            for tid in ids:
                if not tid:
                    continue
                rec = records.thread(txn, store, n, tid)
                if rec is None or retention.own(txn, store, n, tid, rec.tkey) is None:
                    stale.append((n, tid))
                else:
                    own.append(tid)
            out.append((n, [tid for tid, _ in records.threads_from(txn, store, n)] if "" in ids else own))
        return out, stale


async def run_pass(ctx: Ctx, ns: str | None = None, thread_id: str | None = None, *, dry_run: bool = False,
                   batch: int = limits.RETENTION_BATCH) -> Report:
    """Apply the retention policies of every namespace (``ns`` None), of one, or of one thread."""
    store = ctx.store
    loop = asyncio.get_running_loop()
    report = Report()

    async def timed(fn):
        def job(txn):
            started = time.perf_counter()
            try:
                return fn(txn)
            finally:
                report.max_job_seconds = max(report.max_job_seconds, time.perf_counter() - started)

        report.jobs += 1
        return await store.run(job)

    targets, stale_rows = await loop.run_in_executor(None, _targets, store, ns, thread_id)
    if not dry_run:
        for n, tid in stale_rows:
            await timed(lambda txn, n=n, tid=tid: ret_ops.drop_stale_policy(txn, store, n, tid))

    def plan_of(n: str, tid: str):
        with store.read() as txn:
            return ret_ops.plan_thread(txn, store, n, tid, store.clock())

    for n, ids in targets:
        for tid in ids:
            plan = await loop.run_in_executor(None, plan_of, n, tid)
            if plan is None:
                continue
            for rule, count in plan.decision.kept_by.items():
                report.kept_by[rule] = report.kept_by.get(rule, 0) + count
            doomed = plan.decision.doomed
            if dry_run:
                report.note(tid, doomed)
                if plan.delete_thread:
                    report.deleted_threads.append(tid)
                continue
            stale = False
            for i in range(0, len(doomed), batch):
                part = doomed[i:i + batch]
                got = await timed(lambda txn, part=part, plan=plan: ret_ops.remove_job(txn, store, plan, part))
                if got < 0:
                    stale = True
                    break
                report.note(tid, part)
                report.namespaces.add(n)
            if not stale and plan.delete_thread:
                if await timed(lambda txn, plan=plan: ret_ops.delete_thread_job(txn, store, plan)):
                    report.deleted_threads.append(tid)
                    ctx.notify([(n, tid)])
                else:
                    stale = True
            if stale:
                report.stale += 1
    if report.removed_count and not dry_run:
        ctx.retention.removed += report.removed_count
        ctx.retention.deleted_threads += len(report.deleted_threads)
        if ctx.on_garbage is not None:
            ctx.on_garbage()
    if not dry_run:
        ctx.retention.passes += 1
    return report


async def apply(ctx: Ctx, req: rpb.ApplyRetentionRequest, sweeper=None) -> rpb.ApplyRetentionResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    if thread_id:
        with ctx.store.read() as txn:
            threads.require(txn, ctx.store, ns, thread_id)
    report = await run_pass(ctx, ns, thread_id or None, dry_run=req.dry_run)
    if sweeper is not None and report.deleted_threads and not req.dry_run:
        await sweeper.reclaim()
    out = rpb.ApplyRetentionResponse(removed_checkpoints=report.removed_count,
                                     removed_truncated=report.removed_count > len(report.removed),
                                     deleted_thread_ids=report.deleted_threads, stale_threads=report.stale,
                                     jobs=report.jobs)
    for tid, cns, cid in report.removed:
        out.removed.add(thread_id=tid, checkpoint_ns=cns, checkpoint_id=cid)
    for rule, n in report.kept_by.items():
        out.kept_by_rule[rule] = n
    return out


# ----------------------------------------------------------------- usage

async def usage(ctx: Ctx, req: rpb.GetUsageRequest) -> rpb.GetUsageResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    store = ctx.store

    def measure() -> rpb.GetUsageResponse:
        with store.read() as txn:
            if thread_id:
                rec = threads.require(txn, store, ns, thread_id)
                u = ret_ops.thread_usage(txn, store, rec.tkey, retention.Meter(txn, store), set())
                n = 1
            else:
                nsu = ret_ops.namespace_usage(txn, store, ns)
                u, n = nsu.total, nsu.threads
        return rpb.GetUsageResponse(threads=n, checkpoints=u.checkpoints, pending_writes=u.pending_writes,
                                    logical_bytes=u.logical_bytes, physical_bytes=u.physical_bytes)

    return await asyncio.get_running_loop().run_in_executor(None, measure)
