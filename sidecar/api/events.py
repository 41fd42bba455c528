"""events: EventService — the append-only event log of each thread and its resumable watch.

Events are rows ``tkey seq`` of the ``events`` table; ``evids`` maps a
client event id to its sequence number, so re-sending an id returns the
stored event instead of appending. WatchEvents reads committed events from
MVCC snapshots and, when it has sent everything, waits on the server's
:class:`~sidecar.context.Hub` for the next commit that touched the thread
(the hub's version is read before each snapshot, so no commit can slip
between the read and the wait).
"""
from __future__ import annotations

from agentstate.v1 import events_pb2 as epb

from .. import limits
from ..errors import ApiError, invalid, thread_not_found
from ..state import runstate, threads
from ..state.runstate import Tx
from ..storage import layout, records
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


def check_input(ev: epb.EventInput, field: str) -> tuple[str, bytes | None, str, str, str]:
    type_ = validate.ident(ev.type, f"{field}.type")
    if type_.startswith(runstate.SERVER_EVENT_PREFIX):
        raise invalid(f"{field}.type", f"the prefix {runstate.SERVER_EVENT_PREFIX!r} is the server's")
    data = wire.payload(ev.data, f"{field}.data") if ev.HasField("data") else None
    client_id = validate.ident(ev.client_event_id, f"{field}.client_event_id", required=False)
    run_id = validate.ident(ev.run_id, f"{field}.run_id", required=False)
    step_id = validate.ident(ev.step_id, f"{field}.step_id", required=False)
    return type_, data, client_id, run_id, step_id


def append(tx: Tx, ns: str, thread_id: str, tkey: int, inputs, default_run: str, field: str,
           out) -> int:
    """Append client events (checked by check_input) to a thread; fills ``out`` (repeated Event).
    Returns the number of duplicates (client ids stored already)."""
    if len(inputs) > limits.MAX_EVENTS_PER_CALL:
        raise ApiError("LIMIT_EXCEEDED", f"{field}: at most {limits.MAX_EVENTS_PER_CALL} events per call",
                       limit="events_per_call", field=field)
    duplicates = 0
    evids, events = tx.db["evids"], tx.db["events"]
    for i, ev in enumerate(inputs):
        type_, data, client_id, run_id, step_id = check_input(ev, f"{field}[{i}]")
        if client_id:
            seq_raw = tx.txn.get(layout.tkey_str_key(tkey, client_id), db=evids)
            if seq_raw is not None:
                seq = layout.read_u64(seq_raw)
                raw = tx.txn.get(layout.seq_key(tkey, seq), db=events)
                if raw is not None:
                    to_proto(ns, thread_id, seq, layout.event_decoder.decode(raw), out.add())
                    duplicates += 1
                    continue
        rec = EventRec(layout.FORMAT_VERSION, run_id or default_run, step_id, type_, data, client_id, tx.now)
        seq = tx.append_event(ns, thread_id, tkey, rec)
        to_proto(ns, thread_id, seq, rec, out.add())
    return duplicates


async def append_call(ctx: Ctx, req: epb.AppendEventsRequest) -> epb.AppendEventsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    run_id = validate.ident(req.run_id, "run_id", required=False)
    for i, ev in enumerate(req.events):  # fail bad input before taking the writer's time
        check_input(ev, f"events[{i}]")

    def apply(tx: Tx):
        trec = threads.require(tx.txn, tx.store, ns, thread_id)
        if run_id:
            rec = context.holder(tx, ns, run_id, req.lease_id, trec.tkey)
            runstate.renew_lease(tx, ns, run_id, rec)
        elif req.lease_id:
            raise invalid("run_id", "is required with lease_id")
        resp = epb.AppendEventsResponse()
        resp.duplicates = append(tx, ns, thread_id, trec.tkey, req.events, run_id, "events", resp.events)
        return resp

    return await context.write(ctx, ns, "AppendEvents", req, epb.AppendEventsResponse, apply)


def _read(store: Store, ns: str, thread_id: str, tkey: int | None, after: int, run_id: str, limit: int,
          out) -> tuple[int, int, bool]:
    """Read up to ``limit`` events after ``after`` into ``out``.

    Returns (tkey, last sequence scanned, more events may follow). Raises
    NOT_FOUND when the thread is gone (or was re-created: another tkey).
    """
    with store.read() as txn:
        trec = records.thread(txn, store, ns, thread_id)
        if trec is None or (tkey is not None and trec.tkey != tkey):
            raise thread_not_found(ns, thread_id)
        tkey = trec.tkey
        prefix = layout.tkey_prefix(tkey)
        cursor = txn.cursor(db=store.db["events"])
        if after >= 2**64 - 1:
            return tkey, after, False
        found = cursor.set_range(layout.seq_key(tkey, after + 1))
        last = after
        n = 0
        while found:
            key = cursor.key()
            if not key.startswith(prefix):
                return tkey, last, False
            if n == limit:
                return tkey, last, True
            seq = layout.split_seq_key(key)[1]
            ev = layout.event_decoder.decode(cursor.value())
            last = seq
            if not run_id or ev.run_id == run_id:
                to_proto(ns, thread_id, seq, ev, out.add())
                n += 1
            found = cursor.next()
        return tkey, last, False


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
        raw = txn.get(layout.u64(tkey), db=ctx.store.db["tstate"])
    out.last_sequence = 0 if raw is None else layout.tstate_decoder.decode(raw).last_event
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
