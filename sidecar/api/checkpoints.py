"""checkpoints: ThreadService calls on checkpoints and pending writes.

A put's request is validated and converted here (channel writes become trees
or canonical encodings: the CPU work), planned and applied by the rules of
state/checkpoints.py — prepared outside the writer against a read snapshot
when it is large, inside the write otherwise — and answered here. A run's
put also records its steps, events and effect completions in the same
transaction.
"""
from __future__ import annotations

import asyncio

from agentstate.v1 import threads_pb2 as pb

from .. import limits
from ..errors import ApiError, invalid, limit
from ..ops import checkpoints as checkpoint_ops
from ..ops import puts
from ..ops.puts import RunRecords
from ..state import checkpoints, runstate
from ..state.checkpoints import ChannelOp, PutInput, PutPlan, WritesPlan
from ..storage import hotpath as hp
from ..storage import layout, nodes, records
from ..storage.layout import Manifest
from ..storage.metadata import encode as encode_metadata
from ..storage.store import RetryJob, Store
from . import context, effects, events, idempotency, runs, validate, wire

LARGE_REQUEST = 256 * 1024  # bytes; bigger puts are prepared off the event loop
MAX_PREPARE_ATTEMPTS = 5


# ----------------------------------------------------------------- put

def put_input(req: pb.PutCheckpointRequest) -> PutInput:
    """Validate a PutCheckpoint and convert its channel writes (whole values built as trees)."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id", required=False) or \
        checkpoints.new_checkpoint_id()
    parent_id = validate.ident(req.parent_checkpoint_id, "parent_checkpoint_id", required=False)
    base_id = validate.ident(req.base_checkpoint_id, "base_checkpoint_id", required=False) or parent_id
    base_field = "base_checkpoint_id" if req.base_checkpoint_id else "parent_checkpoint_id"
    if parent_id and parent_id == req.checkpoint_id:
        raise invalid("parent_checkpoint_id", "names the checkpoint itself")
    if len(req.channels) > limits.MAX_CHANNELS:
        raise limit("channels", f"channels: at most {limits.MAX_CHANNELS} per checkpoint", field="channels")
    metadata = wire.metadata_items(req.metadata, "metadata")
    metadata_enc = encode_metadata(metadata, "metadata")
    run_id = checkpoints.run_id_of(metadata)
    if req.run_id:
        validate.ident(req.run_id, "run_id")
        if "run_id" in metadata and run_id != req.run_id:
            raise invalid("metadata", f"metadata run_id differs from run_id {req.run_id!r}")
        run_id = req.run_id
        validate.ident(req.lease_id, "lease_id")
    elif req.lease_id:
        raise invalid("run_id", "is required with lease_id")
    if (req.steps or req.events or req.effects) and not req.run_id:
        raise invalid("run_id", "steps, events and effects need run_id and lease_id")
    needs_base = [name for name, w in req.channels.items() if w.WhichOneof("op") in ("delta", "keep")]
    if needs_base and not base_id:
        raise ApiError("BASE_MISMATCH", f"channels[{needs_base[0]!r}]: a delta or keep needs "
                       "parent_checkpoint_id or base_checkpoint_id", field=base_field)
    built: list = []
    ops = []
    for name in sorted(req.channels):
        f = f"channels[{name!r}]"
        validate.name(name, f)
        w = req.channels[name]
        op = w.WhichOneof("op")
        if op == "value":
            ops.append(ChannelOp(name, "value", f, root=wire.value_tree(w.value, f + ".value", built)))
        elif op == "keep":
            if not w.keep:
                raise invalid(f + ".keep", "must be true when set")
            ops.append(ChannelOp(name, "keep", f))
        elif op == "delta":
            ops.append(_delta_op(name, f, w.delta))
        else:
            raise invalid(f, "one of value, delta or keep is required")
    extra = None
    if req.HasField("extra"):
        extra = hp.value_node(wire.value_encoding(req.extra, "extra"), built)
    return PutInput(ns, thread_id, cns, checkpoint_id, parent_id, base_id, base_field, metadata_enc, run_id,
                    req.schema_version, ops, built, extra, req.require_thread,
                    req.expected_head_etag if req.HasField("expected_head_etag") else None)


def _delta_op(name: str, f: str, delta) -> ChannelOp:
    fd = f + ".delta"
    return ChannelOp(name, "delta", f, append=wire.item_encodings(delta.append, fd + ".append"),
                     keep_first=delta.keep_first if delta.HasField("keep_first") else None,
                     sets=[(k, wire.value_encoding(delta.set[k], f"{fd}.set[{k!r}]", 1)) for k in sorted(delta.set)],
                     deletes=list(delta.delete), base_root=delta.base_root)


def prepare_put(store: Store, req: pb.PutCheckpointRequest, txn=None) -> PutPlan:
    """Validate a put, build its nodes and plan it against ``txn`` (default: a fresh snapshot)."""
    return checkpoints.plan_put(store, put_input(req), txn)


def run_records(req: pb.PutCheckpointRequest) -> RunRecords:
    """What a run's put records beside the checkpoint (steps, events, effect completions), validated:
    their counts first, then each in request order (errors name ``steps[0].step_id`` and so on)."""
    if len(req.steps) > limits.MAX_EVENTS_PER_CALL or len(req.effects) > limits.MAX_EVENTS_PER_CALL:
        raise limit("records_per_call", f"at most {limits.MAX_EVENTS_PER_CALL} steps and effects per put",
                    field="steps" if len(req.steps) > limits.MAX_EVENTS_PER_CALL else "effects")
    return RunRecords([runs.step_input(s, f"steps[{i}]") for i, s in enumerate(req.steps)],
                      events.event_inputs(req.events, "events"),
                      [effects.completion_input(c, f"effects[{i}]") for i, c in enumerate(req.effects)])


def apply_put(txn, store: Store, plan: PutPlan, req: pb.PutCheckpointRequest,
              tx: runstate.Tx | None = None) -> pb.PutCheckpointResponse:
    """Write a planned put (ops/puts.py) and answer it."""
    tx = tx if tx is not None else runstate.Tx(txn, store)
    extra = run_records(req) if req.run_id and (req.steps or req.events or req.effects) else None
    applied, done = puts.put(tx, store, plan, req.run_id, req.lease_id, extra)
    resp = _put_response(plan, applied.created_us, applied.created)
    if done is not None:
        ns, thread_id, run_id = plan.ns, plan.thread_id, req.run_id
        for step_id, s in done.steps:
            runs.step_to_proto(ns, thread_id, run_id, step_id, s, resp.steps.add())
        for seq, ev in done.events:
            events.to_proto(ns, thread_id, seq, ev, resp.events.add())
        for key, e, state in done.effects:
            effects.to_proto(ns, key, e, state, resp.effects.add())
        wire.set_timestamp(resp.lease_expire_time, done.run.lease_expires_us)
    tx.flush()
    return resp


def _put_response(plan: PutPlan, created_us: int, created: bool) -> pb.PutCheckpointResponse:
    resp = pb.PutCheckpointResponse(created=created)
    c = resp.checkpoint
    c.namespace, c.thread_id, c.checkpoint_ns, c.checkpoint_id = plan.ns, plan.thread_id, plan.cns, plan.checkpoint_id
    c.parent_checkpoint_id = plan.parent_id
    c.schema_version = plan.schema_version
    c.etag = plan.etag
    wire.set_timestamp(c.create_time, created_us)
    for name, root in plan.roots.items():
        c.channels[name].root = root
    return resp


def put_job(store: Store, req: pb.PutCheckpointRequest, plan: PutPlan | None = None):
    """The write of one put: ``job(txn) -> (response, touched threads)``. Without a ``plan`` the put is
    prepared inside the write, against the transaction (which sees every earlier write, also those of
    the same group commit or stream); with one, the plan is re-checked there (RetryJob if stale)."""

    def job(txn):
        tx = runstate.Tx(txn, store)

        def apply(t):
            p = plan if plan is not None else prepare_put(store, req, t)
            return apply_put(t, store, p, req, tx)

        ns = plan.ns if plan is not None else validate.namespace(req.namespace)
        resp = idempotency.run(txn, store.db, ns, "PutCheckpoint", req, pb.PutCheckpointResponse, apply)
        return resp, tx.touched

    return job


async def put(store: Store, req: pb.PutCheckpointRequest, ctx: context.Ctx | None = None) -> pb.PutCheckpointResponse:
    if ctx is None:
        return await _put(store, req, None)
    try:
        resp = await _put(store, req, ctx)
    except BaseException as e:
        ctx.saves.failure(e)
        raise
    ctx.saves.succeeded()
    return resp


async def _put(store: Store, req: pb.PutCheckpointRequest, ctx: context.Ctx | None) -> pb.PutCheckpointResponse:
    durability = wire.durability(req.durability)
    if req.ByteSize() <= LARGE_REQUEST:  # small: prepared and applied in one go, inside the write
        resp, touched = await store.run(put_job(store, req), durability)
        if ctx is not None:
            ctx.notify(touched)
        return resp
    loop = asyncio.get_running_loop()
    for _ in range(MAX_PREPARE_ATTEMPTS):  # large: the CPU work (encoding, hashing) off the event loop
        plan = await loop.run_in_executor(None, prepare_put, store, req)
        try:
            resp, touched = await store.run(put_job(store, req, plan), durability)
        except RetryJob:
            continue
        if ctx is not None:
            ctx.notify(touched)
        return resp
    raise ApiError("CONFLICT", "the base checkpoint kept changing while this put was prepared; retry")


# ----------------------------------------------------------------- writes

def prepare_writes(req: pb.PutWritesRequest) -> WritesPlan:
    """Validate a PutWrites request and build its value nodes (no store access)."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id")
    run_id = validate.ident(req.run_id, "run_id", required=False)
    if req.lease_id and not run_id:
        raise invalid("run_id", "is required with lease_id")
    if run_id:
        validate.ident(req.lease_id, "lease_id")
    if len(req.writes) > limits.MAX_WRITES:
        raise limit("writes", f"writes: at most {limits.MAX_WRITES} per call", field="writes")
    built: list = []
    rows = []
    for i, w in enumerate(req.writes):
        f = f"writes[{i}]"
        task_id = validate.ident(w.task_id, f + ".task_id")
        channel = validate.name(w.channel, f + ".channel")
        task_path = validate.task_path(w.task_path, f + ".task_path")
        if not w.HasField("value"):
            raise invalid(f + ".value", "is required")
        # as a tree, like a channel value: a list write's items are the very nodes of the list it extends
        h = wire.value_tree(w.value, f + ".value", built)
        rows.append((task_id, w.idx, w.replace, channel, h, task_path))
    return WritesPlan(ns, thread_id, cns, checkpoint_id, run_id, req.lease_id, rows, built)


def apply_writes(txn, store: Store, plan: WritesPlan) -> pb.PutWritesResponse:
    stored, kept = checkpoints.apply_writes(runstate.Tx(txn, store), store, plan)
    return pb.PutWritesResponse(stored=stored, kept=kept)


async def put_writes(store: Store, req: pb.PutWritesRequest) -> pb.PutWritesResponse:
    plan = prepare_writes(req)
    return await store.run(writes_job(store, req, plan), wire.durability(req.durability))


def writes_job(store: Store, req: pb.PutWritesRequest, plan: WritesPlan):
    return lambda txn: idempotency.run(txn, store.db, plan.ns, "PutWrites", req, pb.PutWritesResponse,
                                       lambda t: apply_writes(t, store, plan))


def read_writes(txn, store: Store, tkey: int, cns: str, checkpoint_id: str, out, fetch) -> None:
    for task_id, idx, rec in records.write_rows(txn, store, tkey, cns, checkpoint_id):
        w = out.add(task_id=task_id, idx=idx, channel=rec.channel, task_path=rec.task_path)
        wire.set_value(w.value, nodes.value_encoding(rec.value, fetch))  # as sent, whatever its tree


# ----------------------------------------------------------------- reads

def fill_checkpoint(out: pb.Checkpoint, txn, store: Store, ns: str, thread_id: str, tkey: int, cns: str,
                    checkpoint_id: str, m: Manifest, fetch, *, values: bool, channels=None,
                    known_roots=None, pending_writes: bool = False, known_lists: dict | None = None,
                    extra: bool | None = None) -> None:
    """One Checkpoint message; ``extra`` (default: with the values) says whether ``extra`` is filled in."""
    out.namespace, out.thread_id, out.checkpoint_ns, out.checkpoint_id = ns, thread_id, cns, checkpoint_id
    out.parent_checkpoint_id = m.parent_id
    out.schema_version = m.schema_version
    roots, extra_hash = records.root_hashes(m, fetch)
    out.etag = layout.checkpoint_etag(checkpoint_id, m.parent_id, m.metadata, [(n, h) for n, h, _ in roots],
                                      extra_hash, m.schema_version)
    wire.set_timestamp(out.create_time, m.created_us)
    wire.fill_metadata(out.metadata, m.metadata)
    for name, root, root_id in roots:
        if channels and name not in channels:
            continue
        cv = out.channels[name]
        if not values:
            cv.root = root
            continue
        fill_channel(cv, txn, store, root, root_id, fetch, known_roots.get(name) if known_roots else None,
                     known_lists, ns=ns)
    if (values if extra is None else extra) and m.extra is not None:
        wire.set_value(out.extra, hp.stored_encoding(nodes.record(fetch, m.extra), fetch))
    if pending_writes:
        read_writes(txn, store, tkey, cns, checkpoint_id, out.pending_writes, fetch)


def fill_channel(cv: pb.ChannelValue, txn, store: Store, root: bytes, root_id: bytes, fetch,
                 known: bytes | None = None, known_lists: dict | None = None, *, ns: str) -> None:
    """Fill one ChannelValue: the root, and the value unless it equals ``known`` (a root the client
    has) or is a list related to it by a prefix (then a delta: state/checkpoints.list_delta)."""
    cv.root = root
    if known == root:
        return
    if known is not None:
        delta = checkpoints.list_delta(txn, store, ns, known, root_id, fetch, known_lists)
        if delta is not None:
            keep_first, appended = delta
            cv.delta.base_root = known
            cv.delta.keep_first = keep_first
            for node_id in appended:
                wire.set_value(cv.delta.append.add(), hp.stored_encoding(nodes.record(fetch, node_id), fetch))
            return
    wire.read_value(cv.value, root_id, fetch)


async def get(store: Store, req: pb.GetCheckpointRequest) -> pb.GetCheckpointResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id", required=False)
    channels = {validate.name(c, f"channels[{i}]") for i, c in enumerate(req.channels)}
    resp = pb.GetCheckpointResponse()
    with store.read() as txn:
        rec, checkpoint_id, m = checkpoints.resolve(txn, store, ns, thread_id, cns, checkpoint_id)
        fill_checkpoint(resp.checkpoint, txn, store, ns, thread_id, rec.tkey, cns, checkpoint_id, m,
                        nodes.fetcher(txn, store), values=not req.omit_values, channels=channels,
                        known_roots=dict(req.known_roots), pending_writes=req.include_pending_writes,
                        extra=True)
    return resp


async def list_(store: Store, req: pb.ListCheckpointsRequest) -> pb.ListCheckpointsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False)
    cns = validate.checkpoint_ns(req.checkpoint_ns) if req.HasField("checkpoint_ns") else None
    before = validate.ident(req.before_checkpoint_id, "before_checkpoint_id", required=False)
    size = validate.page_size(req.page_size)
    wanted = wire.metadata_items(req.metadata_filter, "metadata_filter")
    fp = wire.fingerprint("checkpoints", ns, thread_id, cns, before, req.limit, sorted(wanted.items()))
    position = wire.read_token(req.page_token, fp)
    # position: (emitted so far, thread_id, checkpoint_id, cns)
    emitted = position[0] if position else 0
    remaining = req.limit - emitted if req.limit else None
    if remaining is not None and remaining <= 0:
        return pb.ListCheckpointsResponse()
    page = size if remaining is None else min(size, remaining)
    out = pb.ListCheckpointsResponse()
    loop = asyncio.get_running_loop()
    if req.include_values:
        await loop.run_in_executor(None, _list_into, store, req, ns, thread_id, cns, before, wanted, position,
                                   page, emitted, remaining, fp, out)
    else:
        _list_into(store, req, ns, thread_id, cns, before, wanted, position, page, emitted, remaining, fp, out)
    return out


def _list_into(store, req, ns, thread_id, cns, before, wanted, position, page, emitted, remaining, fp, out):
    known_roots = dict(req.known_roots) if req.include_values else None
    known_lists: dict = {}
    with store.read() as txn:
        fetch = nodes.fetcher(txn, store)
        last = None
        for tid, rec, cid, c_ns, m in checkpoints.matching(txn, store, ns, thread_id, cns, before, wanted,
                                                           position[1:] if position else None):
            if len(out.checkpoints) == page:
                if remaining is None or page < remaining:
                    out.next_page_token = wire.make_token(fp, (emitted + page, *last))
                return
            fill_checkpoint(out.checkpoints.add(), txn, store, ns, tid, rec.tkey, c_ns, cid, m, fetch,
                            values=req.include_values, pending_writes=req.include_pending_writes,
                            known_roots=known_roots, known_lists=known_lists)
            last = (tid, cid, c_ns)


# ----------------------------------------------------------------- deletes

async def prune(store: Store, req: pb.PruneCheckpointsRequest, on_garbage=None) -> pb.PruneCheckpointsResponse:
    ns = validate.namespace(req.namespace)
    thread_ids = validate.id_list(req.thread_ids, "thread_ids")
    cns = validate.checkpoint_ns(req.checkpoint_ns) if req.HasField("checkpoint_ns") else None
    policy = req.WhichOneof("policy")
    if policy is None:
        raise invalid("policy", "one of keep_latest, older_than or delete_all is required")
    if policy == "keep_latest" and req.keep_latest < 1:
        raise invalid("keep_latest", "must be at least 1 (use delete_all to delete everything)")
    if policy == "delete_all" and not req.delete_all:
        raise invalid("delete_all", "must be true when set")
    horizon = wire.timestamp_us(req.older_than, "older_than") if policy == "older_than" else 0
    keep_for = _history_channels(req.history_channels) if policy != "delete_all" else []

    def apply(txn):
        deleted = checkpoint_ops.prune(txn, store, ns, thread_ids, cns,
                                       keep_latest=req.keep_latest if policy == "keep_latest" else 0,
                                       older_than_us=horizon, delete_all=policy == "delete_all",
                                       history_channels=keep_for)
        return pb.PruneCheckpointsResponse(deleted_checkpoints=deleted)

    resp = await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "PruneCheckpoints", req, pb.PruneCheckpointsResponse, apply))
    if on_garbage and resp.deleted_checkpoints:
        on_garbage()
    return resp


def _history_channels(values) -> list[str]:
    """Validate PruneCheckpointsRequest.history_channels."""
    if len(values) > limits.MAX_IDS_PER_CALL:
        raise invalid("history_channels", f"at most {limits.MAX_IDS_PER_CALL} channels per call")
    return [validate.ident(v, f"history_channels[{i}]") for i, v in enumerate(values)]


async def delete_for_runs(store: Store, req: pb.DeleteCheckpointsForRunsRequest,
                          on_garbage=None) -> pb.DeleteCheckpointsForRunsResponse:
    ns = validate.namespace(req.namespace)
    run_ids = validate.id_list(req.run_ids, "run_ids")

    def apply(txn):
        return pb.DeleteCheckpointsForRunsResponse(deleted_checkpoints=checkpoints.delete_for_runs(
            txn, store, ns, run_ids))

    resp = await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "DeleteCheckpointsForRuns", req, pb.DeleteCheckpointsForRunsResponse, apply))
    if on_garbage and resp.deleted_checkpoints:
        on_garbage()
    return resp


# ----------------------------------------------------------------- diff

CHANGE_KINDS = {"added": pb.CHANGE_KIND_ADDED, "removed": pb.CHANGE_KIND_REMOVED,
                "modified": pb.CHANGE_KIND_MODIFIED}


async def diff(store: Store, req: pb.DiffCheckpointsRequest) -> pb.DiffCheckpointsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    from_id = validate.ident(req.from_checkpoint_id, "from_checkpoint_id")
    to_id = validate.ident(req.to_checkpoint_id, "to_checkpoint_id")
    out = pb.DiffCheckpointsResponse()
    with store.read() as txn:
        changes = checkpoints.diff(txn, store, ns, thread_id, cns, from_id, to_id)
    for c in changes:
        ch = out.changes.add(channel=c.channel, from_root=c.from_root, to_root=c.to_root, kind=CHANGE_KINDS[c.kind])
        if c.lists:
            ch.lists = True
            ch.from_length, ch.to_length, ch.common_prefix = c.from_length, c.to_length, c.common_prefix
            ch.appended = c.common_prefix == c.from_length
    return out
