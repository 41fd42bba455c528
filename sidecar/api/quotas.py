"""quotas: RetentionService.SetQuota / GetQuota — a namespace's quotas next to its charged usage.

The counters and the check are storage/usage.py's (kept in every write transaction); this module validates
and converts. See docs/security.md "Quotas".
"""
from __future__ import annotations

from agentstate.v1 import retention_pb2 as rpb

from ..errors import invalid
from ..state import threads
from ..state.runstate import Tx
from ..storage import usage
from . import context, validate
from .context import Ctx

MAX_QUOTA = 2**63 - 1


def quota_input(q: rpb.Quota, field: str = "quota") -> tuple[int, int, int]:
    """(max_bytes, max_threads, max_items); an unset field is usage.UNSET (the server's default)."""
    out = []
    for name in usage.QUOTAS:
        if not q.HasField(name):
            out.append(usage.UNSET)
            continue
        value = getattr(q, name)
        if value > MAX_QUOTA:
            raise invalid(f"{field}.{name}", f"at most {MAX_QUOTA}")
        out.append(value)
    return tuple(out)


def _fill(txn, store, ns: str, out) -> None:
    q = usage.quota_of(txn, store, ns)
    out.quota.max_bytes, out.quota.max_threads, out.quota.max_items = q.max_bytes, q.max_threads, q.max_items
    out.own = q.own
    _usage_into(usage.namespace(txn, store, ns), out.usage)


def _usage_into(u, out: rpb.QuotaUsage) -> None:
    out.bytes, out.threads, out.items, out.checkpoints = (max(0, v) for v in (u.nbytes, u.threads, u.items,
                                                                               u.checkpoints))


async def set_quota(ctx: Ctx, req: rpb.SetQuotaRequest) -> rpb.SetQuotaResponse:
    ns = validate.namespace(req.namespace)
    values = None
    if not req.clear:
        if not req.HasField("quota"):
            raise invalid("quota", "required unless clear")
        values = quota_input(req.quota)

    def apply(tx: Tx) -> rpb.SetQuotaResponse:
        usage.set_quota(tx.txn, tx.store, ns, values, tx.store.clock())
        out = rpb.SetQuotaResponse()
        _fill(tx.txn, tx.store, ns, out)
        return out

    return await context.write(ctx, ns, "SetQuota", req, rpb.SetQuotaResponse, apply)


async def get_quota(ctx: Ctx, req: rpb.GetQuotaRequest) -> rpb.GetQuotaResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    store = ctx.store
    out = rpb.GetQuotaResponse()
    with store.read() as txn:
        _fill(txn, store, ns, out)
        if thread_id:
            rec = threads.require(txn, store, ns, thread_id)
            t = usage.thread(txn, store, rec.tkey)
            if t is not None:
                _usage_into(t, out.thread_usage)
    return out
