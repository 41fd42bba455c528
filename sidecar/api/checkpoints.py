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
import threading
import weakref

from agentstate.v1 import threads_pb2 as pb

from .. import limits
from ..errors import ApiError, invalid, limit
from ..ops import checkpoints as checkpoint_ops
from ..ops import puts
from ..ops.puts import RunRecords
from ..state import checkpoints, runstate, schemas
from ..state.checkpoints import ChannelOp, PutInput, PutPlan, WritesPlan
from ..storage import compression, hotpath as hp
from ..storage import layout, nodes, reads, records, usage
from ..storage.layout import Manifest
from ..storage.metadata import encode as encode_metadata
from ..storage.store import RetryJob, Store
from . import context, effects, events, idempotency, runs, validate, wire
from . import schemas as api_schemas

LARGE_REQUEST = 256 * 1024  # bytes; bigger puts are prepared off the event loop and written in parts
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
    built: list = []
    # every channel checked and converted in one hot-path call (compiled: whole values built as trees, delta
    # items encoded); a delta or keep without a base is BASE_MISMATCH before anything else
    ops = list(map(ChannelOp._make, hp.put_channels(req.channels, built, bool(base_id), base_field)))
    extra = None
    if req.HasField("extra"):
        extra = hp.value_node(wire.value_encoding(req.extra, "extra"), built)
    schema = validate.ident(req.schema, "schema", required=False)
    if schema and req.schema_version < 1:
        raise invalid("schema_version", "must be at least 1 with a schema")
    return PutInput(ns, thread_id, cns, checkpoint_id, parent_id, base_id, base_field, metadata_enc, run_id,
                    req.schema_version, ops, built, extra, req.require_thread,
                    req.expected_head_etag if req.HasField("expected_head_etag") else None, schema)


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
    c.schema_version = c.stored_schema_version = plan.schema_version
    c.schema = plan.schema
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
    # small: prepared and applied in one go, inside the write
    if req.ByteSize() <= LARGE_REQUEST:
        resp, touched = await store.run(put_job(store, req), durability)
    else:
        resp, touched = await _put_large(store, req, durability)
    if ctx is not None:
        ctx.notify(touched)
    return resp


async def _put_large(store: Store, req: pb.PutCheckpointRequest, durability: str | None):
    """A large put: every CPU-heavy step off the owner loop, which serves the other requests meanwhile.

    Validation, conversion, tree building and hashing, and the lookup of which nodes are new (with
    their compression) run in a worker thread against a read snapshot (``_stage``: the compiled hot
    path does most of it); the new nodes are then written in small writer jobs (``STAGE_CHUNK_*``),
    other requests' writes running between them; the last job writes the manifest, re-checking
    what the plan assumed (RetryJob: staged again, the nodes written so far are then found stored).
    Overload is judged once, before any of this: the put's own jobs are flow-controlled, so it is not
    refused for the loop lag its own work caused. Garbage collection waits meanwhile (hold_sweeps).
    """
    store.check_load()
    if req.request_id and _answered(store, req):
        return await store.run(put_job(store, req), durability, flow_controlled=True)  # answered from the record
    loop = asyncio.get_running_loop()
    with store.hold_sweeps():
        await store.run(_barrier, flow_controlled=True)  # a sweep already in the open transaction: committed
        for _ in range(MAX_PREPARE_ATTEMPTS):
            plan, staged = await loop.run_in_executor(None, _stage, store, req)
            try:
                _check_quota(store, plan)  # before its nodes are stored (its write checks again)
                await _write_staged(store, staged)
                wanted = (*plan.roots.values(), *((plan.extra,) if plan.extra else ()))
                known = {h: staged.ids[h] for h in wanted}
            except RetryJob:
                continue
            finally:  # hundreds of thousands of objects: freed in a worker thread, not on the loop
                garbage = [plan.nodes, staged.records, staged.index, staged.ids]
                plan.nodes, staged = [], None
                loop.run_in_executor(None, _free, garbage)
                del garbage
            plan.known = known
            try:
                return await store.run(put_job(store, req, plan), durability, flow_controlled=True)
            except RetryJob:
                continue
    raise ApiError("CONFLICT", "the base checkpoint kept changing while this put was prepared; retry")


STAGE_RECORD_BYTES = 1 << 20  # records of a large put written per writer job ...
STAGE_INDEX_ENTRIES = 5_000  # ... and hash index entries


def _free(garbage: list) -> None:
    """Drop large lists and dicts a little at a time: freeing one in a single call would hold the GIL
    (and so the event loop) for all of it."""
    for obj in garbage:
        if isinstance(obj, dict):
            pop = obj.popitem
            for _ in range(len(obj)):
                pop()
        else:
            while obj:
                del obj[-1024:]
    garbage.clear()


def _check_quota(store: Store, plan: PutPlan) -> None:
    with store.read() as txn:
        new_thread = records.thread(txn, store, plan.ns, plan.thread_id) is None
        usage.check(txn, store, plan.ns, nbytes=plan.charge, threads=int(new_thread))


def _barrier(txn) -> None:
    return None


def _answered(store: Store, req: pb.PutCheckpointRequest) -> bool:
    """Whether ``req.request_id`` already has a recorded answer (then the put is not prepared at all)."""
    ns = validate.namespace(req.namespace)
    request_id = validate.ident(req.request_id, "request_id")
    with store.read() as txn:
        return txn.get(layout.request_key(ns, request_id), db=store.db["requests"]) is not None


def _stage(store: Store, req: pb.PutCheckpointRequest):
    """(Worker thread) validate and convert a put, plan it and stage its new nodes, on one snapshot."""
    put_in = put_input(req)
    with store.read() as txn:
        plan = checkpoints.plan_put(store, put_in, txn)
        roots = [*plan.roots.values(), *((plan.extra,) if plan.extra else ())]
        # an encrypted namespace: scoped and sealed here too (ENCRYPTION_KEY_MISSING without its key)
        staged = nodes.stage(txn, store, plan.nodes, plan.known, roots, store.scope(put_in.ns))
    return plan, staged


async def _write_staged(store: Store, staged: nodes.Staged) -> None:
    """Write staged nodes in small jobs, each acknowledged before the next (a later one never builds on a
    lost commit): the records first, in id order (reachable by id only), then the hash index in key
    order (so each job touches one range of the index's pages, not all of them; a node becomes findable
    by hash only when every record of the put is stored)."""
    tag = staged.scope_tag  # an encrypted namespace's records get their nodescope entries with them

    def _records(txn, store: Store, items: list) -> None:
        nodes.write_records(txn, store, items, tag)

    parts, part, size = [], [], 0
    for rec in staged.records:
        part.append(rec)
        size += len(rec[1])
        if size >= STAGE_RECORD_BYTES:
            parts.append((_records, part))
            part, size = [], 0
    if part:
        parts.append((_records, part))
    index = staged.index
    parts.extend((nodes.write_index, index[i:i + STAGE_INDEX_ENTRIES]) for i in range(0, len(index), STAGE_INDEX_ENTRIES))
    for fn, items in parts:
        await store.run(lambda txn, fn=fn, items=items: fn(txn, store, items), flow_controlled=True)


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


def read_writes(txn, store: Store, tkey: int, cns: str, checkpoint_id: str, out, fetch, migrated=None) -> None:
    """A checkpoint's pending writes as stored, or ``migrated`` (state/schemas.Outcome.writes) when given."""
    if migrated is not None:
        for task_id, idx, channel, task_path, enc in migrated:
            wire.set_value(out.add(task_id=task_id, idx=idx, channel=channel, task_path=task_path).value, enc)
        return
    for task_id, idx, rec in records.write_rows(txn, store, tkey, cns, checkpoint_id):
        w = out.add(task_id=task_id, idx=idx, channel=rec.channel, task_path=rec.task_path)
        wire.set_value(w.value, nodes.value_encoding(rec.value, fetch))  # as sent, whatever its tree


# ----------------------------------------------------------------- reads

def fill_checkpoint(out: pb.Checkpoint, txn, store: Store, ns: str, thread_id: str, tkey: int, cns: str,
                    checkpoint_id: str, m: Manifest, fetch, *, values: bool, channels=None,
                    known_roots=None, pending_writes: bool = False, known_lists: dict | None = None,
                    extra: bool | None = None, outcome: schemas.Outcome | None = None,
                    wire_lists: dict | None = None) -> None:
    """One Checkpoint message; ``extra`` (default: with the values) says whether ``extra`` is filled in;
    ``outcome`` (state/schemas.on_read) is the migration a reader's read_schema_version asked for.
    ``wire_lists`` (a dict): list values sent whole are not filled in but put there, channel name ->
    (root, ListValue wire bytes in parts: reads.list_wire_parts), their channels left out of ``out`` (see
    :func:`get_wire`); a list migrated item-wise on read (state/schemas.MigratedItems) too, with the wire
    bytes its migration built (a tuple of parts)."""
    out.namespace, out.thread_id, out.checkpoint_ns, out.checkpoint_id = ns, thread_id, cns, checkpoint_id
    out.parent_checkpoint_id = m.parent_id
    out.schema_version = out.stored_schema_version = m.schema_version
    out.schema = m.schema
    roots, extra_hash = records.root_hashes(m, fetch)
    out.etag = layout.checkpoint_etag(checkpoint_id, m.parent_id, m.metadata, [(n, h) for n, h, _ in roots],
                                      extra_hash, m.schema_version, m.schema)
    wire.set_timestamp(out.create_time, m.created_us)
    wire.fill_metadata(out.metadata, m.metadata)
    if outcome is not None:
        out.migration, out.migration_error = outcome.status, outcome.error
        out.unmigratable_checkpoint_id = outcome.unmigratable_id
        out.schema_version = outcome.version
        if outcome.channels is not None:
            roots, migrated = api_schemas.migrated_roots(outcome.channels, fetch)
    for name, root, root_id in roots:
        if channels and name not in channels:
            continue
        cv = out.channels[name]
        if not values:
            cv.root = root
            continue
        if root_id is None:  # a value migrated on read (api_schemas.migrated_roots)
            shape, payload = migrated[name]
            built = getattr(payload, "wire", None)  # a list migrated item-wise: its ListValue wire bytes
            if wire_lists is not None and built is not None and not (known_roots and name in known_roots):
                wire_lists[name] = (root, built)
                del out.channels[name]
                continue
            api_schemas.fill_migrated(cv, root, migrated[name], known_roots.get(name) if known_roots else None)
            continue
        if wire_lists is not None and not (known_roots and name in known_roots):
            rec = nodes.record(fetch, root_id)
            if rec[hp.HASH_SIZE] == hp.TAG_LIST:
                wire_lists[name] = (root, reads.list_wire_parts(rec, fetch))
                del out.channels[name]
                continue
        fill_channel(cv, txn, store, root, root_id, fetch, known_roots.get(name) if known_roots else None,
                     known_lists, ns=ns)
    if (values if extra is None else extra) and m.extra is not None:
        wire.set_value(out.extra, hp.stored_encoding(nodes.record(fetch, m.extra), fetch))
    if pending_writes:
        read_writes(txn, store, tkey, cns, checkpoint_id, out.pending_writes, fetch,
                    outcome.writes if outcome is not None else None)


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


async def get(store: Store, req: pb.GetCheckpointRequest, wire_lists: dict | None = None) -> pb.GetCheckpointResponse:
    return _get(store, req, wire_lists)


def _get(store: Store, req: pb.GetCheckpointRequest, wire_lists: dict | None = None, probe=None):
    """:func:`get`; ``probe(checkpoint_id, manifest, fetch)``, when given, is asked right after the checkpoint
    is resolved (in the same read): what it returns, unless None, is returned instead (get_wire's answers)."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id", required=False)
    channels = {validate.name(c, f"channels[{i}]") for i, c in enumerate(req.channels)}
    resp = pb.GetCheckpointResponse()
    read = req.read_schema_version
    with store.read() as txn:
        rec, resolved_id, m = checkpoints.resolve(txn, store, ns, thread_id, cns, checkpoint_id)
        fetch = nodes.fetcher(txn, store)
        if probe is not None:
            hit = probe(resolved_id, m, fetch)
            if hit is not None:
                return hit
        outcome = None
        if read:
            resolved_id, m, outcome = schemas.on_read(txn, store, ns, rec.tkey, cns, resolved_id, m, fetch, read,
                                                      fallback=not checkpoint_id,
                                                      writes=req.include_pending_writes)
        fill_checkpoint(resp.checkpoint, txn, store, ns, thread_id, rec.tkey, cns, resolved_id, m,
                        fetch, values=not req.omit_values, channels=channels,
                        known_roots=dict(req.known_roots), pending_writes=req.include_pending_writes,
                        extra=True, outcome=outcome, wire_lists=wire_lists)
    return resp


_CHECKPOINT_FIELD = pb.GetCheckpointResponse.DESCRIPTOR.fields_by_name["checkpoint"].number
_CHANNELS_FIELD = pb.Checkpoint.DESCRIPTOR.fields_by_name["channels"].number
_ROOT_FIELD = pb.ChannelValue.DESCRIPTOR.fields_by_name["root"].number
_VALUE_FIELD = pb.ChannelValue.DESCRIPTOR.fields_by_name["value"].number
_LIST_FIELD = wire.Value.DESCRIPTOR.fields_by_name["list"].number


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _head(number: int, size: int) -> bytes:
    """The tag and length of a length-delimited field of ``size`` bytes."""
    return _varint(number << 3 | 2) + _varint(size)


def _len_field(number: int, body: bytes) -> bytes:
    return _head(number, len(body)) + body


# ----------------------------------------------------------------- whole answers kept (get_wire)
#
# A GetCheckpoint answer spliced from list wire bytes is one more copy of them (the join, ~0.1 ms for
# 689 KB on the benchmark machine, where the read path's other work is ~0.05 ms). An answer of at least
# ANSWER_MIN bytes is kept whole, per store, under its request, with what it was made of: the checkpoint
# id, its etag (the content hash of its ids, parent, metadata, channel root hashes, extra hash, schema) and
# its creation time. A read that resolves (in its own read transaction, as always) to the same three sends
# the kept bytes: they are what it would build, since everything else in the answer is read from nodes
# named by those hashes (content-addressed), as storage/wirecache.py argues for list subtrees. Kept only
# for plain requests (values of all or named channels: no known_roots, pending writes, omit_values or
# read_schema_version) of a namespace that never had an encryption key (its records are never sealed; a
# sealed record must be opened on every read, so removing a key refuses reads). Bounded (ANSWERS_BYTES per
# store, oldest out first; one answer per request, the newest); compression.forget_cache() empties it too
# (as a restart does, so damage on disk shows).

ANSWER_MIN = 64 * 1024
ANSWER_MAX = 4 * 1024 * 1024
ANSWERS_BYTES = 16 * 1024 * 1024


class _Answers:
    __slots__ = ("entries", "size", "__weakref__")

    def __init__(self) -> None:
        self.entries: dict = {}  # request key -> (made of, answer bytes)
        self.size = 0

    def get(self, key, made_of) -> bytes | None:
        entry = self.entries.get(key)
        return entry[1] if entry is not None and entry[0] == made_of else None

    def put(self, key, made_of, answer: bytes) -> None:
        if not ANSWER_MIN <= len(answer) <= ANSWER_MAX:
            return
        with _answers_lock:  # (forget_cache may run on another thread)
            old = self.entries.pop(key, None)
            if old is not None:
                self.size -= len(old[1])
            self.entries[key] = (made_of, answer)
            self.size += len(answer)
            while self.size > ANSWERS_BYTES and self.entries:
                self.size -= len(self.entries.pop(next(iter(self.entries)))[1])

    def clear(self) -> None:
        self.entries.clear()
        self.size = 0


_answers: "weakref.WeakKeyDictionary[Store, _Answers]" = weakref.WeakKeyDictionary()
_answers_lock = threading.Lock()


def _forget_answers() -> None:
    with _answers_lock:
        for kept in list(_answers.values()):
            kept.clear()


compression.on_forget(_forget_answers)


def _answer_key(store: Store, req: pb.GetCheckpointRequest, ns: str):
    """The key of a request (of namespace ``ns``, as validated) whose answer may be kept, or None."""
    if req.omit_values or req.known_roots or req.include_pending_writes or req.read_schema_version \
            or ns in store.encrypted:
        return None
    return ns, req.thread_id, req.checkpoint_ns, req.checkpoint_id, tuple(sorted(set(req.channels)))


async def get_wire(store: Store, req: pb.GetCheckpointRequest) -> bytes:
    """:func:`get`'s response, serialized: list values sent whole go in as the wire bytes reads.list_wire_parts
    built, never parsed into the message and serialized again. Each such channel is one more
    ``checkpoint { channels { key, value { root, value { list } } } }`` after the rest of the response
    (protobuf merges a repeated occurrence of a message field), so a client parses the message
    :func:`get` returns. The list's parts (cached subtrees, as they are) are copied once, by the join; a
    big answer is kept whole and sent again while its checkpoint is unchanged (see ANSWER_MIN)."""
    lists: dict = {}
    ns = validate.namespace(req.namespace)  # (as get validates it: "" is the default namespace)
    key = _answer_key(store, req, ns)
    made_of = None
    kept = None
    if key is not None:
        kept = _answers.get(store)
        if kept is None:
            with _answers_lock:
                kept = _answers.setdefault(store, _Answers())

        def probe(checkpoint_id: str, m: Manifest, fetch):
            nonlocal made_of
            if ns in store.encrypted:
                return None
            made_of = (checkpoint_id, records.etag_of(checkpoint_id, m, fetch), m.created_us)
            return kept.get(key, made_of)

        resp = _get(store, req, lists, probe)
        if type(resp) is bytes:
            return resp
    else:
        resp = _get(store, req, lists)
    head = resp.SerializeToString()
    if not lists:
        return head
    parts = [head]
    for name, (root, body) in lists.items():  # headers made by length: the body is copied once, by the join
        size = sum(map(len, body))
        list_head = _head(_LIST_FIELD, size)
        value_head = _head(_VALUE_FIELD, len(list_head) + size)
        root_field = _len_field(_ROOT_FIELD, root)
        cv_len = len(root_field) + len(value_head) + len(list_head) + size
        entry_head = _len_field(1, name.encode()) + _head(2, cv_len)  # a map entry: key 1, value 2
        entry_len = len(entry_head) + cv_len
        channels_head = _head(_CHANNELS_FIELD, entry_len)
        parts += [_head(_CHECKPOINT_FIELD, len(channels_head) + entry_len), channels_head, entry_head, root_field,
                  value_head, list_head]
        parts += body
    answer = b"".join(parts)
    if made_of is not None and resp.checkpoint.etag == made_of[1] and ns not in store.encrypted:
        kept.put(key, made_of, answer)
    return answer


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
            outcome = None
            if req.read_schema_version and req.include_values:
                cid, m, outcome = schemas.on_read(txn, store, ns, rec.tkey, c_ns, cid, m, fetch,
                                                  req.read_schema_version, writes=req.include_pending_writes)
            fill_checkpoint(out.checkpoints.add(), txn, store, ns, tid, rec.tkey, c_ns, cid, m, fetch,
                            values=req.include_values, pending_writes=req.include_pending_writes,
                            known_roots=known_roots, known_lists=known_lists, outcome=outcome)
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
        txn, store.db, ns, "PruneCheckpoints", req, pb.PruneCheckpointsResponse, apply), frees=True)
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
        changes, migration = checkpoint_ops.diff_read(txn, store, ns, thread_id, cns, from_id, to_id,
                                                     req.read_schema_version)
    if migration is not None:
        out.migration, out.migration_error = migration.status, migration.error
        out.from_schema_version, out.to_schema_version = migration.from_version, migration.to_version
    for c in changes:
        ch = out.changes.add(channel=c.channel, from_root=c.from_root, to_root=c.to_root, kind=CHANGE_KINDS[c.kind])
        if c.lists:
            ch.lists = True
            ch.from_length, ch.to_length, ch.common_prefix = c.from_length, c.to_length, c.common_prefix
            ch.appended = c.common_prefix == c.from_length
    return out
