"""compactions: ConversationService calls of compaction — SetCompactionPolicy, GetCompactionPolicy,
ClaimCompaction (waiting on the Hub for a namespace's next due compaction), SubmitSummary, ListCompactions,
ListSummaries, ExpandSummary. The rules are ops/compaction.py and state/summaries.py.
"""
from __future__ import annotations

import time

from agentstate.v1 import conversations_pb2 as cpb

from .. import limits
from ..errors import ApiError, invalid
from ..ops import compaction as comp_ops
from ..state import conversations, convpolicy, runstate, summaries, threads
from ..state.runstate import Tx
from ..storage import records
from . import context, idempotency, validate, wire
from .context import Ctx
from .conversations import (_scope, compaction_to_proto, item_to_proto, own_policy_to_proto, policy_to_proto,
                            summary_to_proto, token_count)

MAX_LEASE_MS = 3_600_000
MAX_WAIT_SECONDS = limits.MAX_CLAIM_WAIT_SECONDS


def _ms(d, field: str, lo: int, hi: int) -> int:
    if d.seconds < 0 or d.nanos < 0 or d.nanos >= 1_000_000_000:
        raise invalid(field, "must be a positive duration")
    ms = d.seconds * 1000 + d.nanos // 1_000_000
    if not lo <= ms <= hi:
        raise invalid(field, f"must be from {lo / 1000:g} s to {hi / 1000:g} s")
    return ms


def policy_input(p: cpb.CompactionPolicy, field: str = "policy") -> tuple:
    d = {"disabled": p.disabled or None}
    for name in ("trigger_items", "compact_items", "keep_last_items", "max_summary_chars", "pyramid_fan_in",
                 "pyramid_keep_last", "max_levels", "max_compact_chars"):
        d[name] = getattr(p, name) if p.HasField(name) else None
    d["fallback_after_ms"] = _ms(p.fallback_after, f"{field}.fallback_after", 0, 7 * 86_400_000) \
        if p.HasField("fallback_after") else None
    d["lease_timeout_ms"] = _ms(p.lease_timeout, f"{field}.lease_timeout", 1000, MAX_LEASE_MS) \
        if p.HasField("lease_timeout") else None
    return convpolicy.check(tuple(d[f] for f in convpolicy.FIELDS), field)


async def set_policy(ctx: Ctx, req: cpb.SetCompactionPolicyRequest) -> cpb.SetCompactionPolicyResponse:
    ns = validate.namespace(req.namespace)
    scope, thread_id = _scope(req)
    if req.clear and req.HasField("policy"):
        raise invalid("policy", "must be unset with clear")
    if not req.clear and not req.HasField("policy"):
        raise invalid("policy", "required unless clear")
    values = None if req.clear else policy_input(req.policy)

    def apply(tx: Tx) -> cpb.SetCompactionPolicyResponse:
        txn, store = tx.txn, tx.store
        resp = cpb.SetCompactionPolicyResponse()
        if scope == cpb.CONFIG_SCOPE_NAMESPACE:
            convpolicy.set_ns_compaction(txn, store, ns, values)
            p, resp.source, _ = convpolicy.compaction(txn, store, ns, None)
        else:
            rec = threads.require(txn, store, ns, thread_id)
            convpolicy.set_thread_compaction(txn, store, rec.tkey, values)
            p, resp.source, _ = convpolicy.compaction(txn, store, ns, rec.tkey)
            now = store.clock()
            for level, first, crec in comp_ops.make_due(tx, ns, thread_id, rec.tkey, now):
                compaction_to_proto(ns, thread_id, level, first, crec, now, resp.compactions_due.add())
        policy_to_proto(p, resp.effective)
        return resp

    return await context.write(ctx, ns, "SetCompactionPolicy", req, cpb.SetCompactionPolicyResponse, apply)


async def get_policy(ctx: Ctx, req: cpb.GetCompactionPolicyRequest) -> cpb.GetCompactionPolicyResponse:
    ns = validate.namespace(req.namespace)
    scope, thread_id = _scope(req)
    store = ctx.store
    out = cpb.GetCompactionPolicyResponse()
    with store.read() as txn:
        tkey = threads.require(txn, store, ns, thread_id).tkey if scope == cpb.CONFIG_SCOPE_THREAD else None
        p, out.source, own = convpolicy.compaction(txn, store, ns, tkey)
        if own is not None:
            own_policy_to_proto(own, out.policy)
        policy_to_proto(p, out.effective)
    return out


# ----------------------------------------------------------------- claims and summaries

def _fill_inputs(txn, store, ns: str, thread_id: str, tkey: int, level: int, first: int, rec,
                 out: cpb.Compaction) -> None:
    for key, r in comp_ops.inputs(txn, store, tkey, level, first, rec):
        if level == 1:
            item_to_proto(ns, thread_id, key, r, out.items.add())
        else:
            lvl, f, _ = summaries.parse_id(key, "summary_id")
            summary_to_proto(ns, thread_id, lvl, f, r, out.summaries.add(), txn, store, tkey)


class _NothingClaimable(Exception):
    """Nothing was claimable: no request record is kept, so a retry with the request id claims afresh."""


def _try_claim(ctx: Ctx, ns: str, thread_id: str, worker: str, lease_ms: int | None, req):
    def job(txn):
        try:
            return idempotency.run(txn, ctx.store.db, ns, "ClaimCompaction", req, cpb.ClaimCompactionResponse, claim)
        except _NothingClaimable:
            return None

    def claim(txn):
        store = ctx.store
        now = store.clock()
        for key, due, tkey, level, first, tid in summaries.queued(txn, store, ns):
            if thread_id and tid != thread_id:
                continue
            trec = records.thread(txn, store, ns, tid)
            if trec is None or trec.tkey != tkey:
                continue
            rec = summaries.compaction(txn, store, tkey, level, first)
            if rec is None or not summaries.claimable(rec, now):
                continue
            p, _, _ = convpolicy.compaction(txn, store, ns, tkey)
            lease_id = runstate.new_token()
            summaries.claim(rec, worker, lease_ms or p.lease_timeout_ms, now, lease_id)
            summaries.save_compaction(txn, store, tkey, level, first, rec)
            resp = cpb.ClaimCompactionResponse(lease_id=lease_id)
            compaction_to_proto(ns, tid, level, first, rec, now, resp.compaction)
            _fill_inputs(txn, store, ns, tid, tkey, level, first, rec, resp.compaction)
            return resp
        raise _NothingClaimable()
    return job


async def claim(ctx: Ctx, req: cpb.ClaimCompactionRequest) -> cpb.ClaimCompactionResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    worker = validate.text(req.worker, "worker", limits.MAX_ITEM_NAME_BYTES)
    lease_ms = _ms(req.lease_timeout, "lease_timeout", 1000, MAX_LEASE_MS) if req.HasField("lease_timeout") else None
    wait = 0.0
    if req.HasField("wait_timeout"):
        wait = _ms(req.wait_timeout, "wait_timeout", 0, MAX_WAIT_SECONDS * 1000) / 1000
    deadline = time.monotonic() + wait
    key = comp_ops.claim_key(ns)
    while True:
        version = ctx.hub.version(key)
        # a retry with the request_id of a claim that went through gets that claim (its lease) again
        got = await ctx.store.run(_try_claim(ctx, ns, thread_id, worker, lease_ms, req))
        if got is not None:
            return got
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return cpb.ClaimCompactionResponse()
        # a lease that expires while we wait makes its compaction claimable without a commit: poll at least
        # once a second
        await ctx.hub.wait(key, version, min(remaining, 1.0))


async def submit(ctx: Ctx, req: cpb.SubmitSummaryRequest) -> cpb.SubmitSummaryResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    level, first, last = summaries.parse_id(req.compaction_id, "compaction_id")
    if req.level != level:
        raise invalid("level", f"is {req.level}, the compaction's is {level}")
    if req.first_seq != first:
        raise invalid("first_seq", f"is {req.first_seq}, the compaction's is {first}")
    if req.last_seq != last:
        raise invalid("last_seq", f"is {req.last_seq}, the compaction's is {last}")
    validate.ident(req.lease_id, "lease_id")
    if len(req.content_hash) != 32:
        raise invalid("content_hash", "must be 32 bytes")
    if not req.text:
        raise invalid("text", "must not be empty")
    producer = validate.text(req.producer, "producer", limits.MAX_ITEM_NAME_BYTES)
    if not producer:
        raise invalid("producer", "must not be empty")
    tokens = token_count(req.tokens, "tokens") if req.HasField("tokens") else None
    durability = wire.durability(req.durability)

    def apply(tx: Tx) -> cpb.SubmitSummaryResponse:
        txn, store = tx.txn, tx.store
        trec = threads.require(txn, store, ns, thread_id)
        rec = summaries.compaction(txn, store, trec.tkey, level, first)
        max_chars = rec.max_summary_chars if rec is not None else convpolicy.compaction(
            txn, store, ns, trec.tkey)[0].max_summary_chars
        if len(req.text) > max_chars:
            raise invalid("text", f"longer than max_summary_chars ({max_chars} code points)")
        now = store.clock()
        s, due = comp_ops.submit(tx, ns, thread_id, trec.tkey, level, first, last, req.lease_id, req.text,
                                 req.content_hash, producer, tokens, now)
        resp = cpb.SubmitSummaryResponse()
        summary_to_proto(ns, thread_id, level, first, s, resp.summary, txn, store, trec.tkey)
        for lvl, f, crec in due:
            compaction_to_proto(ns, thread_id, lvl, f, crec, now, resp.compactions_due.add())
        return resp

    return await context.write(ctx, ns, "SubmitSummary", req, cpb.SubmitSummaryResponse, apply, durability)


async def list_compactions(ctx: Ctx, req: cpb.ListCompactionsRequest) -> cpb.ListCompactionsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("compactions", ns, thread_id)
    position = wire.read_token(req.page_token, fp)
    store = ctx.store
    out = cpb.ListCompactionsResponse()
    with store.read() as txn:
        if thread_id:
            threads.require(txn, store, ns, thread_id)
        now = store.clock()
        last_key = b""
        for key, due, tkey, level, first, tid in summaries.queued(txn, store, ns, position[0] if position else None):
            if thread_id and tid != thread_id:
                continue
            trec = records.thread(txn, store, ns, tid)
            rec = summaries.compaction(txn, store, tkey, level, first)
            if trec is None or trec.tkey != tkey or rec is None:
                continue
            if len(out.compactions) == size:
                out.next_page_token = wire.make_token(fp, (last_key,))
                break
            compaction_to_proto(ns, tid, level, first, rec, now, out.compactions.add())
            last_key = key
    return out


async def list_summaries(ctx: Ctx, req: cpb.ListSummariesRequest) -> cpb.ListSummariesResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    if req.level > 16:
        raise invalid("level", "at most 16")
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("summaries", ns, thread_id, req.level)
    position = wire.read_token(req.page_token, fp)
    store = ctx.store
    out = cpb.ListSummariesResponse()
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        after = tuple(position) if position else (0, 0)
        last = after
        for level, first, rec in summaries.summaries_of(txn, store, trec.tkey, req.level or None):
            if (level, first) <= after:
                continue
            if len(out.summaries) == size:
                out.next_page_token = wire.make_token(fp, last)
                break
            summary_to_proto(ns, thread_id, level, first, rec, out.summaries.add(), txn, store, trec.tkey)
            last = (level, first)
    return out


async def expand(ctx: Ctx, req: cpb.ExpandSummaryRequest) -> cpb.ExpandSummaryResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    level, first, last = summaries.parse_id(req.summary_id, "summary_id")
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("expand", ns, thread_id, req.summary_id, req.to_items, req.omit_content)
    position = wire.read_token(req.page_token, fp)
    store = ctx.store
    out = cpb.ExpandSummaryResponse()
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        rec = summaries.summary(txn, store, trec.tkey, level, first)
        if rec is None or rec.last_seq != last:
            raise ApiError("SUMMARY_NOT_FOUND", f"thread {thread_id!r} has no summary {req.summary_id}",
                           field="summary_id", summary_id=req.summary_id)
        summary_to_proto(ns, thread_id, level, first, rec, out.summary, txn, store, trec.tkey)
        if level > 1 and not req.to_items:
            for f in rec.children:
                child = summaries.summary(txn, store, trec.tkey, level - 1, f)
                if child is not None:
                    summary_to_proto(ns, thread_id, level - 1, f, child, out.children.add(), txn, store, trec.tkey)
            return out
        start = position[0] if position else first
        n = 0
        for seq, item in conversations.items_from(txn, store, trec.tkey, start, last):
            if n == size:
                out.next_page_token = wire.make_token(fp, (seq,))
                break
            item_to_proto(ns, thread_id, seq, item, out.items.add(), req.omit_content)
            n += 1
    return out
