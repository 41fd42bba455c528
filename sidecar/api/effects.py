"""effects: EffectService — the two-phase side-effect ledger.

An effect record (``effects``: ns NUL idempotency_key) is PENDING, DONE or
FAILED. UNKNOWN is not stored: it is what a PENDING record is when the lease
it was begun under is no longer live (the run stopped, was re-queued and
re-claimed, or its lease expired), computed whenever the record is read. A
BeginEffect on an UNKNOWN effect takes it over for the caller's lease with a
new token; the caller reconciles and then completes or fails it. Tokens make
a late answer of a dead attempt harmless: only the current token finishes an
effect.

Every call is safe to repeat as sent: the holder that began an effect
beginning it again gets the same token and the same answer (PENDING, or
UNKNOWN when its begin took the effect over: ``taken_over``), and finishing
a finished effect with its token returns it unchanged. So a client may retry
them after a lost reply (a sidecar restart) without a request_id.
"""
from __future__ import annotations

from agentstate.v1 import effects_pb2 as fpb

from ..errors import ApiError, invalid, run_not_found
from ..state import runstate, threads
from ..state.runstate import RUNNING, Tx
from ..storage import layout
from ..storage.layout import EffectRec
from ..storage.store import Store, now_us
from . import context, validate, wire
from .context import Ctx

PENDING = fpb.EFFECT_STATE_PENDING
DONE = fpb.EFFECT_STATE_DONE
FAILED = fpb.EFFECT_STATE_FAILED
UNKNOWN = fpb.EFFECT_STATE_UNKNOWN


def _live(run, e: EffectRec, now: int) -> bool:
    return (run is not None and run.status == RUNNING and run.lease_id == e.lease_id
            and run.lease_expires_us > now)


def state_of(e: EffectRec, run, now: int) -> int:
    if e.state == PENDING and not _live(run, e, now):
        return UNKNOWN
    return e.state


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


def _load(tx: Tx, ns: str, key: str) -> EffectRec | None:
    raw = tx.txn.get(layout.ns_key(ns, key), db=tx.db["effects"])
    return None if raw is None else layout.effect_decoder.decode(raw)


def _save(tx: Tx, ns: str, key: str, e: EffectRec) -> None:
    e.updated_us = tx.now
    tx.txn.put(layout.ns_key(ns, key), layout.encode(e), db=tx.db["effects"])


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
        runstate.renew_lease(tx, ns, req.run_id, run)
        e = _load(tx, ns, ikey)
        if e is None:
            e = EffectRec(layout.FORMAT_VERSION, PENDING, run.thread_id, run.tkey, req.run_id, req.lease_id,
                          step_id, description, digest, runstate.new_token(), None, "", False, 1, tx.now, tx.now, 0)
            _save(tx, ns, ikey, e)
            tx.txn.put(layout.tkey_str_key(run.tkey, ikey), b"", db=tx.db["effthr"])
            return fpb.BeginEffectResponse(effect=to_proto(ns, ikey, e, PENDING), token=e.token)
        if digest and e.request_digest and digest != e.request_digest:
            raise ApiError("EFFECT_KEY_REUSED", f"idempotency_key {ikey!r} was begun with another request_digest",
                           field="request_digest", idempotency_key=ikey)
        if e.state == DONE or (e.state == FAILED and not e.retryable):
            return fpb.BeginEffectResponse(effect=to_proto(ns, ikey, e, e.state))
        if e.state == PENDING:
            if e.run_id == req.run_id and e.lease_id == req.lease_id:  # the same holder asking again:
                again = UNKNOWN if e.taken_over else PENDING             # the same answer as its first begin
                return fpb.BeginEffectResponse(effect=to_proto(ns, ikey, e, again), token=e.token)
            owner = tx.run(ns, e.run_id)
            if _live(owner, e, tx.now):
                raise ApiError("EFFECT_IN_PROGRESS", f"effect {ikey!r} is pending under run {e.run_id!r}, which is "
                               "still running", run_id=e.run_id, idempotency_key=ikey)
            answer = UNKNOWN
        else:  # FAILED and retryable: begin again
            answer = PENDING
            e.state = PENDING
            e.error = ""
        if e.tkey != run.tkey:
            tx.txn.delete(layout.tkey_str_key(e.tkey, ikey), db=tx.db["effthr"])
            tx.txn.put(layout.tkey_str_key(run.tkey, ikey), b"", db=tx.db["effthr"])
        e.thread_id, e.tkey, e.run_id, e.lease_id = run.thread_id, run.tkey, req.run_id, req.lease_id
        e.step_id = step_id or e.step_id
        e.description = description or e.description
        e.request_digest = digest or e.request_digest
        e.token = runstate.new_token()
        e.taken_over = answer == UNKNOWN
        e.begins += 1
        _save(tx, ns, ikey, e)
        return fpb.BeginEffectResponse(effect=to_proto(ns, ikey, e, answer), token=e.token)

    return await context.write(ctx, ns, "BeginEffect", req, fpb.BeginEffectResponse, apply)


def finish(tx: Tx, ns: str, ikey: str, token: str, *, failed: bool, outcome: bytes | None = None, error: str = "",
           retryable: bool = False, field: str = "") -> fpb.Effect:
    """Complete (or fail) an effect under its current token (calls and puts)."""
    prefix = f"{field}." if field else ""
    e = _load(tx, ns, ikey)
    if e is None:
        raise ApiError("EFFECT_NOT_FOUND", f"no effect with idempotency_key {ikey!r}",
                       field=prefix + "idempotency_key", idempotency_key=ikey)
    if not token:
        raise invalid(prefix + "token", "must not be empty")
    if e.token != token:
        raise ApiError("EFFECT_TOKEN_STALE", f"token is not the current one of effect {ikey!r} (it was taken over)",
                       field=prefix + "token", idempotency_key=ikey)
    target = FAILED if failed else DONE
    if e.state == target:
        return to_proto(ns, ikey, e, e.state)  # the same answer again
    if e.state != PENDING:
        raise ApiError("EFFECT_TOKEN_STALE", f"effect {ikey!r} is {fpb.EffectState.Name(e.state)} already",
                       field=prefix + "token", idempotency_key=ikey)
    e.state = target
    e.completed_us = tx.now
    if failed:
        e.error, e.retryable = error, retryable
    else:
        e.outcome = outcome
    _save(tx, ns, ikey, e)
    return to_proto(ns, ikey, e, target)


def finish_from(tx: Tx, ns: str, c: fpb.EffectCompletion, field: str) -> fpb.Effect:
    ikey = _key(c.idempotency_key, f"{field}.idempotency_key")
    outcome = wire.payload(c.outcome, f"{field}.outcome") if c.HasField("outcome") else None
    return finish(tx, ns, ikey, c.token, failed=c.failed, outcome=outcome,
                  error=validate.text(c.error, f"{field}.error"), retryable=c.retryable, field=field)


async def complete(ctx: Ctx, req: fpb.CompleteEffectRequest) -> fpb.CompleteEffectResponse:
    ns = validate.namespace(req.namespace)
    ikey = _key(req.idempotency_key, "idempotency_key")
    outcome = wire.payload(req.outcome, "outcome") if req.HasField("outcome") else None
    effect = await context.write(ctx, ns, "CompleteEffect", req, fpb.CompleteEffectResponse, lambda tx:
                                  fpb.CompleteEffectResponse(effect=finish(tx, ns, ikey, req.token, failed=False,
                                                                           outcome=outcome)))
    return effect


async def fail(ctx: Ctx, req: fpb.FailEffectRequest) -> fpb.FailEffectResponse:
    ns = validate.namespace(req.namespace)
    ikey = _key(req.idempotency_key, "idempotency_key")
    error = validate.text(req.error, "error")
    return await context.write(ctx, ns, "FailEffect", req, fpb.FailEffectResponse, lambda tx:
                                fpb.FailEffectResponse(effect=finish(tx, ns, ikey, req.token, failed=True,
                                                                     error=error, retryable=req.retryable)))


def _run_of(txn, store: Store, ns: str, run_id: str, cache: dict):
    if run_id not in cache:
        raw = txn.get(layout.ns_key(ns, run_id), db=store.db["runs"])
        cache[run_id] = None if raw is None else layout.run_decoder.decode(raw)
    return cache[run_id]


async def get(ctx: Ctx, req: fpb.GetEffectRequest) -> fpb.GetEffectResponse:
    ns = validate.namespace(req.namespace)
    ikey = _key(req.idempotency_key, "idempotency_key")
    store = ctx.store
    with store.read() as txn:
        raw = txn.get(layout.ns_key(ns, ikey), db=store.db["effects"])
        if raw is None:
            raise ApiError("EFFECT_NOT_FOUND", f"no effect with idempotency_key {ikey!r}", field="idempotency_key",
                           idempotency_key=ikey)
        e = layout.effect_decoder.decode(raw)
        run = _run_of(txn, store, ns, e.run_id, {})
    return fpb.GetEffectResponse(effect=to_proto(ns, ikey, e, state_of(e, run, now_us())))


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
    store = ctx.store
    now = now_us()
    runs: dict = {}
    with store.read() as txn:
        if thread_id:
            tkey = threads.require(txn, store, ns, thread_id).tkey
        else:
            run = _run_of(txn, store, ns, run_id, runs)
            if run is None:
                raise run_not_found(ns, run_id)
            tkey = run.tkey
        prefix = layout.tkey_prefix(tkey)
        cursor = txn.cursor(db=store.db["effthr"])
        found = cursor.set_range(prefix + position[0].encode() + b"\x00" if position else prefix)
        last = None
        while found and cursor.key().startswith(prefix):
            ikey = bytes(cursor.key()[8:]).decode()
            raw = txn.get(layout.ns_key(ns, ikey), db=store.db["effects"])
            if raw is not None:
                e = layout.effect_decoder.decode(raw)
                if e.tkey == tkey and (not run_id or e.run_id == run_id):
                    state = state_of(e, _run_of(txn, store, ns, e.run_id, runs), now)
                    if not states or state in states:
                        if len(out.effects) == size:
                            out.next_page_token = wire.make_token(fp, (last,))
                            break
                        to_proto(ns, ikey, e, state, out.effects.add())
            last = ikey
            found = cursor.next()
    return out

