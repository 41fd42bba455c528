"""effects: EffectService calls (begin, complete, fail, get, list) over the ledger of state/effects.py.

Each call validates its request, runs the ledger's rules (state/effects.py)
in one write (context.write: the holder's checks, idempotent per request_id)
or one read, and builds the response. What an effect's states mean and why
every call is safe to repeat is described in state/effects.py.
"""
from __future__ import annotations

from agentstate.v1 import effects_pb2 as fpb

from ..errors import invalid
from ..state import effects
from ..state.runstate import Tx
from ..storage.layout import EffectRec
from ..storage.store import now_us
from . import context, validate, wire
from .context import Ctx


def to_proto(ns: str, key: str, e: EffectRec, state: int, out: fpb.Effect | None = None) -> fpb.Effect:
    out = out if out is not None else fpb.Effect()
    out.namespace, out.idempotency_key, out.state = ns, key, state
    out.thread_id, out.run_id, out.step_id = e.thread_id, e.run_id, e.step_id
    out.description, out.request_digest = e.description, e.request_digest
    if e.outcome is not None:
        wire.set_value(out.outcome, e.outcome)
    out.error, out.retryable, out.begins = e.error, e.retryable, e.begins
    wire.set_timestamp(out.create_time, e.created_us)
    wire.set_timestamp(out.update_time, e.updated_us)
    if e.completed_us:
        wire.set_timestamp(out.complete_time, e.completed_us)
    return out


def _key(value: str, field: str) -> str:
    return validate.ident(value, field)


async def begin(ctx: Ctx, req: fpb.BeginEffectRequest) -> fpb.BeginEffectResponse:
    ns = validate.namespace(req.namespace)
    ikey = _key(req.idempotency_key, "idempotency_key")
    step_id = validate.ident(req.step_id, "step_id", required=False)
    description = validate.text(req.description, "description")
    digest = validate.text(req.request_digest, "request_digest")

    def apply(tx: Tx):
        run = context.holder(tx, ns, req.run_id, req.lease_id)
        e, state, token = effects.begin(tx, ns, ikey, req.run_id, req.lease_id, run, step_id=step_id,
                                        description=description, digest=digest)
        return fpb.BeginEffectResponse(effect=to_proto(ns, ikey, e, state), token=token)

    return await context.write(ctx, ns, "BeginEffect", req, fpb.BeginEffectResponse, apply)


def completion_input(c: fpb.EffectCompletion, field: str) -> dict:
    """The validated arguments of ``state.effects.finish`` (after tx and ns) for the completion ``c`` that
    request field ``field`` holds (e.g. ``effects[0]`` of a PutCheckpoint): call ``finish(tx, ns, **kw)``."""
    ikey = _key(c.idempotency_key, f"{field}.idempotency_key")
    outcome = wire.payload(c.outcome, f"{field}.outcome") if c.HasField("outcome") else None
    return {"ikey": ikey, "token": c.token, "failed": c.failed, "outcome": outcome,
            "error": validate.text(c.error, f"{field}.error"), "retryable": c.retryable, "field": field}


async def complete(ctx: Ctx, req: fpb.CompleteEffectRequest) -> fpb.CompleteEffectResponse:
    ns = validate.namespace(req.namespace)
    ikey = _key(req.idempotency_key, "idempotency_key")
    outcome = wire.payload(req.outcome, "outcome") if req.HasField("outcome") else None

    def apply(tx: Tx):
        e, state = effects.finish(tx, ns, ikey, req.token, failed=False, outcome=outcome)
        return fpb.CompleteEffectResponse(effect=to_proto(ns, ikey, e, state))

    return await context.write(ctx, ns, "CompleteEffect", req, fpb.CompleteEffectResponse, apply)


async def fail(ctx: Ctx, req: fpb.FailEffectRequest) -> fpb.FailEffectResponse:
    ns = validate.namespace(req.namespace)
    ikey = _key(req.idempotency_key, "idempotency_key")
    error = validate.text(req.error, "error")

    def apply(tx: Tx):
        e, state = effects.finish(tx, ns, ikey, req.token, failed=True, error=error, retryable=req.retryable)
        return fpb.FailEffectResponse(effect=to_proto(ns, ikey, e, state))

    return await context.write(ctx, ns, "FailEffect", req, fpb.FailEffectResponse, apply)


async def get(ctx: Ctx, req: fpb.GetEffectRequest) -> fpb.GetEffectResponse:
    ns = validate.namespace(req.namespace)
    ikey = _key(req.idempotency_key, "idempotency_key")
    with ctx.store.read() as txn:
        e, state = effects.get(txn, ctx.store, ns, ikey)
    return fpb.GetEffectResponse(effect=to_proto(ns, ikey, e, state))


async def list_(ctx: Ctx, req: fpb.ListEffectsRequest) -> fpb.ListEffectsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    run_id = validate.ident(req.run_id, "run_id", required=False)
    if not thread_id and not run_id:
        raise invalid("thread_id", "thread_id or run_id is required")
    size = validate.page_size(req.page_size)
    states = set(req.states)
    fp = wire.fingerprint("effects", ns, thread_id, run_id, sorted(states))
    position = wire.read_token(req.page_token, fp)
    out = fpb.ListEffectsResponse()
    now = now_us()
    with ctx.store.read() as txn:
        found, last = effects.page(txn, ctx.store, ns, thread_id=thread_id, run_id=run_id, states=states,
                                   after=position[0] if position else None, size=size, now=now)
    for ikey, e, state in found:
        to_proto(ns, ikey, e, state, out.effects.add())
    if last is not None:
        out.next_page_token = wire.make_token(fp, (last,))
    return out
