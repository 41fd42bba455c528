"""events: EventService calls — AppendEvents, ListEvents and the resumable WatchEvents.

Each call validates its request and runs the event log's rules
(state/events.py) in one transaction (a write through context.write, so a
run's append renews its lease). WatchEvents reads committed events from MVCC
snapshots and, when it has sent everything, waits on the server's
:class:`~sidecar.api.context.Hub` for the next commit that touched the thread
(the hub's version is read before each snapshot, so no commit can slip
between the read and the wait).
"""
from __future__ import annotations

from agentstate.v1 import events_pb2 as epb

from .. import limits
from ..errors import ApiError, invalid
from ..state import events, runstate, threads
from ..state.events import EventInput
from ..state.runstate import Tx
from ..storage.layout import EventRec
from ..storage.store import Store
from . import context, validate, wire
from .context import Ctx

WATCH_BATCH = 500
WATCH_POLL_SECONDS = 5.0  # a watcher re-reads at least this often (cheap; guards against a missed wake-up)


def to_proto(ns: str, thread_id: str, seq: int, ev: EventRec, out: epb.Event | None = None) -> epb.Event:
    out = out if out is not None else epb.Event()
    out.namespace, out.thread_id, out.sequence = ns, thread_id, seq
    out.run_id, out.step_id, out.type, out.client_event_id = ev.run_id, ev.step_id, ev.type, ev.client_event_id
    if ev.data is not None:
        wire.set_value(out.data, ev.data)
    wire.set_timestamp(out.create_time, ev.created_us)
    return out


def event_input(ev: epb.EventInput, field: str) -> EventInput:
    """A client's EventInput, validated (errors name ``field``.type and so on)."""
    type_ = validate.ident(ev.type, f"{field}.type")
    if type_.startswith(runstate.SERVER_EVENT_PREFIX):
        raise invalid(f"{field}.type", f"the prefix {runstate.SERVER_EVENT_PREFIX!r} is the server's")
    data = wire.payload(ev.data, f"{field}.data") if ev.HasField("data") else None
    client_id = validate.ident(ev.client_event_id, f"{field}.client_event_id", required=False)
    run_id = validate.ident(ev.run_id, f"{field}.run_id", required=False)
    step_id = validate.ident(ev.step_id, f"{field}.step_id", required=False)
    return EventInput(type_, data, client_id, run_id, step_id)


def event_inputs(inputs, field: str) -> list[EventInput]:
    """Client events (EventInput messages of request field ``field``), validated; their count first."""
    if len(inputs) > limits.MAX_EVENTS_PER_CALL:
        raise ApiError("LIMIT_EXCEEDED", f"{field}: at most {limits.MAX_EVENTS_PER_CALL} events per call",
                       limit="events_per_call", field=field)
    return [event_input(ev, f"{field}[{i}]") for i, ev in enumerate(inputs)]


async def append_call(ctx: Ctx, req: epb.AppendEventsRequest) -> epb.AppendEventsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    run_id = validate.ident(req.run_id, "run_id", required=False)
    # fail bad input before taking the writer's time
    checked = event_inputs(req.events, "events")

    def apply(tx: Tx):
        trec = threads.require(tx.txn, tx.store, ns, thread_id)
        if run_id:
            rec = context.holder(tx, ns, run_id, req.lease_id, trec.tkey)
            runstate.renew_lease(tx, ns, run_id, rec)
        elif req.lease_id:
            raise invalid("run_id", "is required with lease_id")
        resp = epb.AppendEventsResponse()
        got, resp.duplicates = events.append(tx, ns, thread_id, trec.tkey, checked, run_id, "events")
        for seq, rec in got:
            to_proto(ns, thread_id, seq, rec, resp.events.add())
        return resp

    return await context.write(ctx, ns, "AppendEvents", req, epb.AppendEventsResponse, apply)


def _read(store: Store, ns: str, thread_id: str, tkey: int | None, after: int, run_id: str, limit: int,
          out) -> tuple[int, int, bool]:
    """Read up to ``limit`` events after ``after`` into ``out`` (state/events.read)."""
    with store.read() as txn:
        tkey, last, more, got = events.read(txn, store, ns, thread_id, tkey, after, run_id, limit)
    for seq, ev in got:
        to_proto(ns, thread_id, seq, ev, out.add())
    return tkey, last, more


async def list_(ctx: Ctx, req: epb.ListEventsRequest) -> epb.ListEventsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    run_id = validate.ident(req.run_id, "run_id", required=False)
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("events", ns, thread_id, run_id)
    position = wire.read_token(req.page_token, fp)
    after = position[0] if position else req.after_sequence
    out = epb.ListEventsResponse()
    tkey, last, more = _read(ctx.store, ns, thread_id, None, after, run_id, size, out.events)
    if more:
        out.next_page_token = wire.make_token(fp, (last,))
    with ctx.store.read() as txn:
        out.last_sequence = events.last_sequence(txn, ctx.store, tkey)
    return out


async def watch(ctx: Ctx, req: epb.WatchEventsRequest):
    """Async generator of WatchEventsResponse (see module doc)."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    run_id = validate.ident(req.run_id, "run_id", required=False)
    key = (ns, thread_id)
    after = req.after_sequence
    tkey = None
    while True:
        version = ctx.hub.version(key)
        batch = epb.ListEventsResponse()
        tkey, last, more = _read(ctx.store, ns, thread_id, tkey, after, run_id, WATCH_BATCH, batch.events)
        for ev in batch.events:
            yield epb.WatchEventsResponse(event=ev)
        after = last
        if more:
            continue
        if not req.follow:
            return
        await ctx.hub.wait(key, version, WATCH_POLL_SECONDS)
