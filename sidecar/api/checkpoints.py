"""checkpoints: ThreadService calls on checkpoints and pending writes.

A put is prepared outside the writer (validation, canonical encoding, tree
building, hashing: the CPU work) against a read snapshot, then applied by the
writer in one transaction that re-checks everything the preparation assumed
(base checkpoint unchanged, expected head) before writing anything.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import msgspec

from agentstate import ids
from agentstate.v1 import threads_pb2 as pb
from agentstate.v1 import values_pb2

from .. import limits
from ..errors import ApiError, checkpoint_not_found, invalid, limit, thread_not_found, unsupported_value
from ..state import runstate, threads
from ..storage import hotpath as hp
from ..storage import layout, nodes, records
from ..storage.layout import Manifest
from ..storage.store import RetryJob, Store, now_us
from . import context, idempotency, validate, wire

LARGE_REQUEST = 256 * 1024  # bytes; bigger puts are prepared off the event loop
MAX_PREPARE_ATTEMPTS = 5


def load_manifest(txn, store: Store, tkey: int, cns: str, checkpoint_id: str) -> Manifest | None:
    raw = txn.get(layout.ckpt_key(tkey, cns, checkpoint_id), db=store.db["ckpts"])
    return None if raw is None else layout.manifest_decoder.decode(raw)


def latest(txn, store: Store, tkey: int, cns: str) -> tuple[str, Manifest] | None:
    """(checkpoint_id, manifest) of the newest checkpoint of (thread, cns)."""
    prefix = layout.cns_prefix(tkey, cns)
    cursor = txn.cursor(db=store.db["ckpts"])
    end = layout.prefix_end(prefix)
    if end is None or not cursor.set_range(end):
        if not cursor.last():
            return None
    elif not cursor.prev():
        return None
    key = cursor.key()
    if not key.startswith(prefix):
        return None
    return bytes(key[len(prefix):]).decode(), layout.manifest_decoder.decode(cursor.value())


# ----------------------------------------------------------------- ids

new_checkpoint_id = ids.new_id  # time-ordered UUIDv7 strings (the client makes the same)


# ----------------------------------------------------------------- put

@dataclass
class PutPlan:
    ns: str
    thread_id: str
    cns: str
    checkpoint_id: str
    parent_id: str
    created_us: int
    metadata: bytes  # canonical encoding
    roots: dict  # channel -> root hash
    extra: bytes | None  # hash of the extra value
    schema_version: int
    run_id: str | None
    etag: str
    nodes: list = field(default_factory=list)  # canonical nodes built for this put
    base_id: str = ""
    base_roots: dict = field(default_factory=dict)  # channel -> root node id the plan assumed in the base
    known: dict = field(default_factory=dict)  # hash -> node id of stored nodes the new ones refer to

    def manifest(self, ids: dict[bytes, bytes]) -> Manifest:
        return Manifest(layout.FORMAT_VERSION, layout.pack_id(self.parent_id), self.created_us,
                        msgspec.Raw(self.metadata), [(name, ids[h]) for name, h in sorted(self.roots.items())],
                        ids[self.extra] if self.extra else None, self.schema_version, self.run_id)


def root_hashes(m: Manifest, fetch) -> tuple[list[tuple[str, bytes, bytes]], bytes | None]:
    """[(channel, root hash, root id)] of a manifest and its extra's hash (hashes live in the records)."""
    roots = [(name, nodes.record(fetch, node_id)[:hp.HASH_SIZE], node_id) for name, node_id in m.channels]
    extra = nodes.record(fetch, m.extra)[:hp.HASH_SIZE] if m.extra else None
    return roots, extra


def etag_of(checkpoint_id: str, m: Manifest, fetch) -> str:
    roots, extra = root_hashes(m, fetch)
    return layout.checkpoint_etag(checkpoint_id, m.parent_id, m.metadata, [(n, h) for n, h, _ in roots], extra,
                                  m.schema_version)


def _run_id(metadata: dict[str, bytes]) -> str | None:
    enc = metadata.get("run_id")
    if enc is None:
        return None
    try:
        value = msgspec.msgpack.decode(enc)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, str) and value and "\x00" not in value and len(value) <= limits.MAX_ID_BYTES else None


@contextlib.contextmanager
def _reading(store: Store, txn):
    """``txn`` when given (a writer's transaction, which sees its own writes), else a read snapshot."""
    if txn is not None:
        yield txn
    else:
        with store.read() as snapshot:
            yield snapshot


def prepare_put(store: Store, req: pb.PutCheckpointRequest, txn=None) -> PutPlan:
    """Validate a put and build its nodes, reading bases from ``txn`` (default: a fresh snapshot)."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id", required=False) or new_checkpoint_id()
    parent_id = validate.ident(req.parent_checkpoint_id, "parent_checkpoint_id", required=False)
    base_id = validate.ident(req.base_checkpoint_id, "base_checkpoint_id", required=False) or parent_id
    base_field = "base_checkpoint_id" if req.base_checkpoint_id else "parent_checkpoint_id"
    if parent_id and parent_id == req.checkpoint_id:
        raise invalid("parent_checkpoint_id", "names the checkpoint itself")
    if len(req.channels) > limits.MAX_CHANNELS:
        raise limit("channels", f"channels: at most {limits.MAX_CHANNELS} per checkpoint", field="channels")
    metadata = wire.metadata_items(req.metadata, "metadata")
    metadata_enc = wire.encode_metadata_dict(metadata, "metadata")
    run_id = _run_id(metadata)
    if req.run_id:
        validate.ident(req.run_id, "run_id")
        if "run_id" in metadata and run_id != req.run_id:
            raise invalid("metadata", f"metadata run_id differs from run_id {req.run_id!r}")
        run_id = req.run_id
    elif req.lease_id:
        raise invalid("run_id", "is required with lease_id")
    if (req.steps or req.events or req.effects) and not req.run_id:
        raise invalid("run_id", "steps, events and effects need run_id and lease_id")
    built: list = []
    roots: dict[str, bytes] = {}
    base_roots: dict[str, bytes] = {}
    known: dict[bytes, bytes] = {}
    needs_base = [name for name, w in req.channels.items() if w.WhichOneof("op") in ("delta", "keep")]
    base: Manifest | None = None
    reader = None
    with _reading(store, txn) as txn:
        if needs_base:
            if not base_id:
                raise ApiError("BASE_MISMATCH", f"channels[{needs_base[0]!r}]: a delta or keep needs "
                               "parent_checkpoint_id or base_checkpoint_id", field=base_field)
            rec = records.thread(txn, store, ns, thread_id)
            base = None if rec is None else load_manifest(txn, store, rec.tkey, cns, base_id)
            if base is None:
                raise ApiError("BASE_MISMATCH", f"{base_field}: base checkpoint {base_id!r} not found in thread "
                               f"{thread_id!r} (checkpoint_ns {cns!r}); send whole values", field=base_field,
                               checkpoint_id=base_id)
            reader = nodes.CanonicalReader(txn, store)
        base_channels = dict(base.channels) if base is not None else {}
        for name in sorted(req.channels):
            f = f"channels[{name!r}]"
            validate.name(name, f)
            w = req.channels[name]
            op = w.WhichOneof("op")
            if op == "value":
                roots[name] = wire.value_tree(w.value, f + ".value", built)
            elif op in ("keep", "delta"):
                if op == "keep" and not w.keep:
                    raise invalid(f + ".keep", "must be true when set")
                if name not in base_channels:
                    raise ApiError("BASE_MISMATCH", f"{f}.{op}: channel not in base checkpoint {base_id!r}"
                                   + ("; send the whole value" if op == "delta" else ""), field=f"{f}.{op}")
                root_id = base_roots[name] = base_channels[name]
                root = reader.hash_of(root_id)
                roots[name] = root if op == "keep" else _apply_delta(w.delta, root, root_id, reader, built,
                                                                      f + ".delta")
            else:
                raise invalid(f, "one of value, delta or keep is required")
    extra = None
    if req.HasField("extra"):
        extra = hp.value_node(wire.value_encoding(req.extra, "extra"), built)
    etag = layout.checkpoint_etag(checkpoint_id, parent_id, metadata_enc, sorted(roots.items()), extra,
                                  req.schema_version)
    return PutPlan(ns, thread_id, cns, checkpoint_id, parent_id, now_us(), metadata_enc, roots, extra,
                   req.schema_version, run_id, etag, built, base_id, base_roots,
                   reader.known if reader is not None else known)


def _apply_delta(delta: values_pb2.ValueDelta, root: bytes, root_id: bytes, reader: nodes.CanonicalReader,
                 built: list, f: str) -> bytes:
    if delta.base_root and delta.base_root != root:
        raise ApiError("BASE_MISMATCH", f"{f}.base_root: the base checkpoint's value has another root; "
                       "send the whole value", field=f + ".base_root")
    rec = nodes.record(reader.fetch, root_id)
    tag = rec[hp.HASH_SIZE]
    is_list_op = bool(delta.append) or delta.HasField("keep_first")
    is_map_op = bool(delta.set) or bool(delta.delete)
    if tag == hp.TAG_LIST:
        if is_map_op:
            raise ApiError("BASE_MISMATCH", f"{f}: set/delete on a list value", field=f)
        encodings = wire.item_encodings(delta.append, f + ".append")
        n = hp.stored_list_length(rec)
        if delta.HasField("keep_first") and delta.keep_first != n:
            if delta.keep_first > n:
                raise invalid(f + ".keep_first", f"{delta.keep_first} is more than the list's {n} items")
            kept = [reader.hash_of(i) for i in hp.stored_list_ids(rec, reader.fetch)[:delta.keep_first]]
            return hp.list_append(None, kept + [hp.value_node(e, built) for e in encodings], built)
        if not encodings:
            return root
        return hp.build_list(encodings, built, hp.canonical_node(rec[hp.HASH_SIZE:], reader.hash_of))
    if tag == hp.TAG_MAP or tag == hp.TAG_MAP_INNER:
        if is_list_op:
            raise ApiError("BASE_MISMATCH", f"{f}: append/keep_first on a map value", field=f)
        sets = [(k, hp.value_node(wire.value_encoding(delta.set[k], f"{f}.set[{k!r}]", 1), built))
                for k in sorted(delta.set)]
        try:  # map keys are any strings (at most 65535 bytes), not identifiers
            return hp.map_update(root, sets, list(delta.delete), reader.node, built)
        except hp.UnsupportedValue as e:
            raise unsupported_value(f, e.reason) from None
    if is_list_op or is_map_op:
        raise ApiError("BASE_MISMATCH", f"{f}: the base value is neither a list nor a map", field=f)
    return root


def apply_put(txn, store: Store, plan: PutPlan, req: pb.PutCheckpointRequest,
              tx: runstate.Tx | None = None) -> pb.PutCheckpointResponse:
    tx = tx if tx is not None else runstate.Tx(txn, store)
    resp = _apply_put(tx, txn, store, plan, req)
    tx.flush()
    return resp


def _apply_put(tx: runstate.Tx, txn, store: Store, plan: PutPlan,
               req: pb.PutCheckpointRequest) -> pb.PutCheckpointResponse:
    rec = records.thread(txn, store, plan.ns, plan.thread_id)
    if rec is None:
        if req.require_thread:
            raise thread_not_found(plan.ns, plan.thread_id)
        if plan.base_roots:
            raise RetryJob()  # the base vanished with its thread
        rec = records.create_thread(txn, store, plan.ns, plan.thread_id)
    tkey = rec.tkey
    if plan.base_roots:
        base = load_manifest(txn, store, tkey, plan.cns, plan.base_id)
        if base is None:
            raise RetryJob()
        current = dict(base.channels)
        if any(current.get(ch) != root_id for ch, root_id in plan.base_roots.items()):
            raise RetryJob()
    run = None
    if req.run_id:
        run = context.holder(tx, plan.ns, req.run_id, req.lease_id, tkey)
    else:
        runstate.check_unclaimed_write(tx, plan.ns, tkey)
    key = layout.ckpt_key(tkey, plan.cns, plan.checkpoint_id)
    ckpts = store.db["ckpts"]
    fetch = nodes.fetcher(txn, store)
    old_raw = txn.get(key, db=ckpts)
    old = None if old_raw is None else layout.manifest_decoder.decode(old_raw)
    if old is not None and etag_of(plan.checkpoint_id, old, fetch) == plan.etag:
        return _attach(tx, plan, req, run, tkey, _put_response(plan, old.created_us, created=False))
    if req.HasField("expected_head_etag"):
        head = latest(txn, store, tkey, plan.cns)
        head_etag = "" if head is None else etag_of(head[0], head[1], fetch)
        if head_etag != req.expected_head_etag:
            raise ApiError("ETAG_MISMATCH", f"expected_head_etag {req.expected_head_etag!r} is stale; the head of "
                           f"thread {plan.thread_id!r} (checkpoint_ns {plan.cns!r}) is {head_etag!r}",
                           field="expected_head_etag", current_etag=head_etag,
                           checkpoint_id=head[0] if head else None)
    ids = nodes.write(txn, store, plan.nodes, plan.known,
                      [*plan.roots.values(), *((plan.extra,) if plan.extra else ())])
    m = plan.manifest(ids)
    keep = store.gc_keep
    if keep is not None:
        keep.update(ids.values())
    put = txn.put
    if old is not None and old.run_id is not None:
        txn.delete(layout.run_key(plan.ns, old.run_id, tkey, plan.cns, plan.checkpoint_id), db=store.db["runidx"])
    put(key, layout.encode(m), db=ckpts)
    if m.run_id is not None:
        put(layout.run_key(plan.ns, m.run_id, tkey, plan.cns, plan.checkpoint_id),
            layout.run_entry(plan.ns, m.run_id), db=store.db["runidx"])
    return _attach(tx, plan, req, run, tkey, _put_response(plan, m.created_us, created=True))


def _attach(tx: runstate.Tx, plan: PutPlan, req: pb.PutCheckpointRequest, run, tkey: int,
            resp: pb.PutCheckpointResponse) -> pb.PutCheckpointResponse:
    """A run's put: record its steps, events and effect completions, remember the checkpoint, renew the lease."""
    if run is None:
        return resp
    from . import effects, events, runs  # noqa: PLC0415 - they import this module

    ns, run_id = plan.ns, req.run_id
    if len(req.steps) > limits.MAX_EVENTS_PER_CALL or len(req.effects) > limits.MAX_EVENTS_PER_CALL:
        raise limit("records_per_call", f"at most {limits.MAX_EVENTS_PER_CALL} steps and effects per put",
                    field="steps" if len(req.steps) > limits.MAX_EVENTS_PER_CALL else "effects")
    for i, step in enumerate(req.steps):
        resp.steps.append(runs.record_step(tx, ns, run_id, run, step, f"steps[{i}]", upsert=True))
    events.append(tx, ns, plan.thread_id, tkey, req.events, run_id, "events", resp.events)
    for i, c in enumerate(req.effects):
        resp.effects.append(effects.finish_from(tx, ns, c, f"effects[{i}]"))
    if plan.cns == run.cns and (not run.last_checkpoint_id or plan.checkpoint_id >= run.last_checkpoint_id):
        run.last_checkpoint_id = plan.checkpoint_id
    runstate.renew_lease(tx, ns, run_id, run)
    wire.set_timestamp(resp.lease_expire_time, run.lease_expires_us)
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

@dataclass
class WritesPlan:
    ns: str
    thread_id: str
    cns: str
    checkpoint_id: str
    run_id: str
    lease_id: str
    rows: list  # (task_id, idx, replace, channel, value hash, task_path)
    nodes: list


def prepare_writes(req: pb.PutWritesRequest) -> WritesPlan:
    """Validate a PutWrites request and build its value nodes (no store access)."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id")
    run_id = validate.ident(req.run_id, "run_id", required=False)
    if req.lease_id and not run_id:
        raise invalid("run_id", "is required with lease_id")
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
    rec = records.thread(txn, store, plan.ns, plan.thread_id) or records.create_thread(txn, store, plan.ns,
                                                                                   plan.thread_id)
    tx = runstate.Tx(txn, store)
    if plan.run_id:
        runstate.renew_lease(tx, plan.ns, plan.run_id,
                             context.holder(tx, plan.ns, plan.run_id, plan.lease_id, rec.tkey))
    else:
        runstate.check_unclaimed_write(tx, plan.ns, rec.tkey)
    tx.flush()
    db = store.db["writes"]
    todo = []
    for task_id, idx, replace, channel, h, task_path in plan.rows:
        key = layout.write_key(rec.tkey, plan.cns, plan.checkpoint_id, task_id, idx)
        if replace or txn.get(key, db=db) is None:
            todo.append((key, channel, h, task_path))
    if todo:
        ids = nodes.write(txn, store, plan.nodes, {}, [h for _, _, h, _ in todo])
        for key, channel, h, task_path in todo:
            wrec = layout.WriteRec(2, channel, ids[h], task_path, plan.run_id or None)
            txn.put(key, layout.encode(wrec), db=db)
        keep = store.gc_keep
        if keep is not None:
            keep.update(ids.values())
    return pb.PutWritesResponse(stored=len(todo), kept=len(plan.rows) - len(todo))


async def put_writes(store: Store, req: pb.PutWritesRequest) -> pb.PutWritesResponse:
    plan = prepare_writes(req)
    return await store.run(writes_job(store, req, plan), wire.durability(req.durability))


def writes_job(store: Store, req: pb.PutWritesRequest, plan: WritesPlan):
    return lambda txn: idempotency.run(txn, store.db, plan.ns, "PutWrites", req, pb.PutWritesResponse,
                                       lambda t: apply_writes(t, store, plan))


def write_rows(txn, store: Store, tkey: int, cns: str, checkpoint_id: str):
    """(task_id, idx, WriteRec) of one checkpoint's pending writes, in key order."""
    prefix = layout.writes_prefix(tkey, cns, checkpoint_id)
    cursor = txn.cursor(db=store.db["writes"])
    if not cursor.set_range(prefix):
        return
    for key, value in cursor.iternext():
        if not key.startswith(prefix):
            return
        task_id, idx = layout.split_write_suffix(key[len(prefix):])
        yield task_id, idx, layout.write_decoder.decode(value)


def read_writes(txn, store: Store, tkey: int, cns: str, checkpoint_id: str, out, fetch) -> None:
    for task_id, idx, rec in write_rows(txn, store, tkey, cns, checkpoint_id):
        w = out.add(task_id=task_id, idx=idx, channel=rec.channel, task_path=rec.task_path)
        wire.set_value(w.value, wire.stored_value_encoding(rec.value, fetch))  # as sent, whatever its tree


# ----------------------------------------------------------------- reads

def fill_checkpoint(out: pb.Checkpoint, txn, store: Store, ns: str, thread_id: str, tkey: int, cns: str,
                    checkpoint_id: str, m: Manifest, fetch, *, values: bool, channels=None,
                    known_roots=None, pending_writes: bool = False, known_lists: dict | None = None,
                    extra: bool | None = None) -> None:
    """One Checkpoint message; ``extra`` (default: with the values) says whether ``extra`` is filled in."""
    out.namespace, out.thread_id, out.checkpoint_ns, out.checkpoint_id = ns, thread_id, cns, checkpoint_id
    out.parent_checkpoint_id = m.parent_id
    out.schema_version = m.schema_version
    roots, extra = root_hashes(m, fetch)
    out.etag = layout.checkpoint_etag(checkpoint_id, m.parent_id, m.metadata, [(n, h) for n, h, _ in roots], extra,
                                      m.schema_version)
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
                     known_lists)
    if (values if extra is None else extra) and m.extra is not None:
        wire.set_value(out.extra, hp.stored_encoding(nodes.record(fetch, m.extra), fetch))
    if pending_writes:
        read_writes(txn, store, tkey, cns, checkpoint_id, out.pending_writes, fetch)


def fill_channel(cv: pb.ChannelValue, txn, store: Store, root: bytes, root_id: bytes, fetch,
                 known: bytes | None = None, known_lists: dict | None = None) -> None:
    """Fill one ChannelValue: the root, and the value unless it equals ``known`` (a root the
    client has) or is a list related to it by a prefix (then a delta)."""
    cv.root = root
    if known == root:
        return
    if known is not None and _fill_list_delta(cv, known, root_id, txn, store, fetch, known_lists):
        return
    wire.read_value(cv.value, root_id, fetch)


def _fill_list_delta(cv: pb.ChannelValue, known: bytes, root_id: bytes, txn, store: Store, fetch,
                     known_lists: dict | None = None) -> bool:
    """When the known root is a list that the current one extends or continues, send only the
    difference: the new items, or (for a prefix of the known list) just the kept length.
    ``known_lists`` caches the known lists' item ids across the checkpoints of one call."""
    if len(known) != hp.HASH_SIZE:  # not a hash (LMDB refuses an empty key): send the whole value
        return False
    cached = known_lists.get(known) if known_lists is not None else None
    if cached is None:
        known_id = nodes.index_get(txn, store, known)
        if known_id is None:
            return False
        old = nodes.record(fetch, known_id)
        cached = hp.stored_list_ids(old, fetch) if old[hp.HASH_SIZE] == hp.TAG_LIST else False
        if known_lists is not None:
            known_lists[known] = cached
    if cached is False:
        return False
    new = nodes.record(fetch, root_id)
    if new[hp.HASH_SIZE] != hp.TAG_LIST:
        return False
    old_ids = cached
    n_old, n_new = len(old_ids), hp.stored_list_length(new)
    new_ids = hp.stored_list_ids(new, fetch)
    if n_old <= n_new:
        if new_ids[:n_old] != old_ids:  # one id per content: equal ids = equal items
            return False
        cv.delta.base_root = known
        cv.delta.keep_first = n_old
        for node_id in new_ids[n_old:]:
            wire.set_value(cv.delta.append.add(), hp.stored_encoding(nodes.record(fetch, node_id), fetch))
        return True
    if old_ids[:n_new] != new_ids:
        return False
    cv.delta.base_root = known
    cv.delta.keep_first = n_new
    return True


def resolve(txn, store: Store, ns: str, thread_id: str, cns: str, checkpoint_id: str):
    """(thread record, checkpoint id, manifest) of a checkpoint, the latest of ``cns`` when no id is
    given; NOT_FOUND for an unknown thread or checkpoint."""
    rec = threads.require(txn, store, ns, thread_id)
    if checkpoint_id:
        m = load_manifest(txn, store, rec.tkey, cns, checkpoint_id)
    else:
        found = latest(txn, store, rec.tkey, cns)
        checkpoint_id, m = found if found else ("", None)
    if m is None:
        raise checkpoint_not_found(thread_id, cns, checkpoint_id)
    return rec, checkpoint_id, m


async def get(store: Store, req: pb.GetCheckpointRequest) -> pb.GetCheckpointResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id", required=False)
    channels = {validate.name(c, f"channels[{i}]") for i, c in enumerate(req.channels)}
    resp = pb.GetCheckpointResponse()
    with store.read() as txn:
        rec, checkpoint_id, m = resolve(txn, store, ns, thread_id, cns, checkpoint_id)
        fill_checkpoint(resp.checkpoint, txn, store, ns, thread_id, rec.tkey, cns, checkpoint_id, m,
                        nodes.fetcher(txn, store), values=not req.omit_values, channels=channels,
                        known_roots=dict(req.known_roots), pending_writes=req.include_pending_writes,
                        extra=True)
    return resp


def _thread_ckpts_desc(txn, store: Store, tkey: int, cns: str | None, before: str, after: tuple | None):
    """Yield (checkpoint_id, cns, key, raw manifest) newest first within one thread.

    ``after`` = (checkpoint_id, cns) resumes strictly after that position.
    """
    db = store.db["ckpts"]
    if cns is not None:
        prefixes = [layout.cns_prefix(tkey, cns)]
    else:
        prefixes = []
        tprefix = layout.tkey_prefix(tkey)
        cursor = txn.cursor(db=db)
        found = cursor.set_range(tprefix)
        while found:
            key = bytes(cursor.key())
            if not key.startswith(tprefix):
                break
            sep = key.index(layout.SEP, 8)
            prefixes.append(key[:sep + 1])
            end = layout.prefix_end(key[:sep + 1])
            found = end is not None and cursor.set_range(end)
    iters = [_prefix_desc(txn, db, p, before, after) for p in prefixes]
    heads = []
    for it in iters:
        item = next(it, None)
        if item is not None:
            heads.append([item, it])
    while heads:
        best = max(range(len(heads)), key=lambda i: (heads[i][0][0], heads[i][0][1]))
        item, it = heads[best]
        yield item
        nxt = next(it, None)
        if nxt is None:
            heads.pop(best)
        else:
            heads[best][0] = nxt


def _prefix_desc(txn, db, prefix: bytes, before: str, after: tuple | None):
    """Checkpoints of one (thread, cns) newest first, below ``before`` and after ``after``.

    The merged order over checkpoint namespaces is (checkpoint_id, cns)
    descending; ``after`` = (checkpoint_id, cns) is the last item already sent.
    """
    cns = prefix[8:-1].decode()
    bound, inclusive = None, False
    if before:
        bound = before
    if after is not None:
        a_id, a_cns = after
        if bound is None or a_id < bound:
            bound, inclusive = a_id, cns < a_cns
        elif a_id == bound:
            inclusive = False
    cursor = txn.cursor(db=db)
    if bound is None:
        end = layout.prefix_end(prefix)
        ok = cursor.prev() if end is not None and cursor.set_range(end) else cursor.last()
    else:
        start = prefix + bound.encode()
        ok = cursor.set_range(start)
        if not (ok and inclusive and cursor.key() == start):
            ok = cursor.prev() if ok else cursor.last()
    while ok:
        key = cursor.key()
        if not key.startswith(prefix):
            return
        yield bytes(key[len(prefix):]).decode(), cns, bytes(key), cursor.value()
        ok = cursor.prev()


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
        if thread_id:
            rec = records.thread(txn, store, ns, thread_id)
            thread_list = [] if rec is None else [(thread_id, rec)]
        else:
            thread_list = _threads_from(txn, store, ns, position[1] if position else None)
        last = None
        for tid, rec in thread_list:
            after = None
            if position and tid == position[1]:
                after = (position[2], position[3])
            for cid, c_ns, _key, raw in _thread_ckpts_desc(txn, store, rec.tkey, cns, before, after):
                m = layout.manifest_decoder.decode(raw)
                if not wire.metadata_matches(m.metadata, wanted):
                    continue
                if len(out.checkpoints) == page:
                    if remaining is None or page < remaining:
                        out.next_page_token = wire.make_token(fp, (emitted + page, *last))
                    return
                fill_checkpoint(out.checkpoints.add(), txn, store, ns, tid, rec.tkey, c_ns, cid, m, fetch,
                                values=req.include_values, pending_writes=req.include_pending_writes,
                                known_roots=known_roots, known_lists=known_lists)
                last = (tid, cid, c_ns)


def _threads_from(txn, store: Store, ns: str, start_id: str | None):
    prefix = layout.thread_prefix(ns)
    cursor = txn.cursor(db=store.db["threads"])
    found = cursor.set_range(prefix + (start_id.encode() if start_id else b""))
    while found:
        key = cursor.key()
        if not key.startswith(prefix):
            return
        yield layout.thread_id_of(key, len(prefix)), layout.thread_decoder.decode(cursor.value())
        found = cursor.next()


# ----------------------------------------------------------------- deletes

def delete_checkpoint_at(txn, store: Store, ns: str, key: bytes, m: Manifest | None = None) -> None:
    """Delete one checkpoint (by ckpts key) with its pending writes and run-index entry."""
    db = store.db["ckpts"]
    if m is None:
        raw = txn.get(key, db=db)
        if raw is None:
            return
        m = layout.manifest_decoder.decode(raw)
    txn.delete(key, db=db)
    if m.run_id is not None:
        tkey, cns, cid = layout.split_ckpt_key(key)
        txn.delete(layout.run_key(ns, m.run_id, tkey, cns, cid), db=store.db["runidx"])
    records.delete_prefix(txn, store.db["writes"], key + layout.SEP)


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
    from .history import history_channels, needed_for_history  # local: history imports this module
    keep_for = history_channels(req.history_channels) if policy != "delete_all" else []

    def apply(txn):
        deleted = 0
        db = store.db["ckpts"]
        for tid in thread_ids:
            rec = records.thread(txn, store, ns, tid)
            if rec is None:
                continue
            groups: dict[str, list[bytes]] = {}
            prefix = layout.tkey_prefix(rec.tkey) if cns is None else layout.cns_prefix(rec.tkey, cns)
            cursor = txn.cursor(db=db)
            if cursor.set_range(prefix):
                for key in cursor.iternext(values=False):
                    if not key.startswith(prefix):
                        break
                    key = bytes(key)
                    groups.setdefault(layout.split_ckpt_key(key)[1], []).append(key)
            for keys in groups.values():
                if policy == "keep_latest":
                    doomed = keys[:-req.keep_latest] if len(keys) > req.keep_latest else []
                elif policy == "delete_all":
                    doomed = keys
                else:
                    doomed = [k for k in keys
                              if layout.manifest_decoder.decode(txn.get(k, db=db)).created_us < horizon]
                if keep_for and doomed:
                    gone = set(doomed)
                    kept = [layout.split_ckpt_key(k) for k in reversed(keys) if k not in gone]
                    if kept:
                        needed = needed_for_history(txn, store, rec.tkey, kept[0][1], [c for _, _, c in kept],
                                                    keep_for)
                        doomed = [k for k in doomed if layout.split_ckpt_key(k)[2] not in needed]
                for key in doomed:
                    delete_checkpoint_at(txn, store, ns, key)
                deleted += len(doomed)
        return pb.PruneCheckpointsResponse(deleted_checkpoints=deleted)

    resp = await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "PruneCheckpoints", req, pb.PruneCheckpointsResponse, apply))
    if on_garbage and resp.deleted_checkpoints:
        on_garbage()
    return resp


async def delete_for_runs(store: Store, req: pb.DeleteCheckpointsForRunsRequest,
                          on_garbage=None) -> pb.DeleteCheckpointsForRunsResponse:
    ns = validate.namespace(req.namespace)
    run_ids = validate.id_list(req.run_ids, "run_ids")

    def apply(txn):
        deleted = 0
        idx = store.db["runidx"]
        for run_id in run_ids:
            prefix = layout.run_prefix(ns, run_id)
            keys = layout.run_checkpoints(txn, idx, ns, run_id)
            for ckey in keys:
                delete_checkpoint_at(txn, store, ns, ckey)
                txn.delete(prefix + ckey, db=idx)
            deleted += len(keys)
        return pb.DeleteCheckpointsForRunsResponse(deleted_checkpoints=deleted)

    resp = await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "DeleteCheckpointsForRuns", req, pb.DeleteCheckpointsForRunsResponse, apply))
    if on_garbage and resp.deleted_checkpoints:
        on_garbage()
    return resp


# ----------------------------------------------------------------- diff

async def diff(store: Store, req: pb.DiffCheckpointsRequest) -> pb.DiffCheckpointsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    from_id = validate.ident(req.from_checkpoint_id, "from_checkpoint_id")
    to_id = validate.ident(req.to_checkpoint_id, "to_checkpoint_id")
    out = pb.DiffCheckpointsResponse()
    with store.read() as txn:
        rec = threads.require(txn, store, ns, thread_id)
        a = load_manifest(txn, store, rec.tkey, cns, from_id)
        if a is None:
            raise checkpoint_not_found(thread_id, cns, from_id, "from_checkpoint_id")
        b = load_manifest(txn, store, rec.tkey, cns, to_id)
        if b is None:
            raise checkpoint_not_found(thread_id, cns, to_id, "to_checkpoint_id")
        fetch = nodes.fetcher(txn, store)
        old = {name: (h, i) for name, h, i in root_hashes(a, fetch)[0]}
        new = {name: (h, i) for name, h, i in root_hashes(b, fetch)[0]}
        for name in sorted(set(old) | set(new)):
            ra, rb = old.get(name), new.get(name)
            if ra == rb:
                continue
            ch = out.changes.add(channel=name, from_root=ra[0] if ra else b"", to_root=rb[0] if rb else b"")
            if ra is None:
                ch.kind = pb.CHANGE_KIND_ADDED
                continue
            if rb is None:
                ch.kind = pb.CHANGE_KIND_REMOVED
                continue
            ch.kind = pb.CHANGE_KIND_MODIFIED
            na, nb = nodes.record(fetch, ra[1]), nodes.record(fetch, rb[1])
            if na[hp.HASH_SIZE] == hp.TAG_LIST and nb[hp.HASH_SIZE] == hp.TAG_LIST:
                ia, ib = hp.stored_list_ids(na, fetch), hp.stored_list_ids(nb, fetch)
                common = 0
                for x, y in zip(ia, ib):
                    if x != y:
                        break
                    common += 1
                ch.lists = True
                ch.from_length, ch.to_length, ch.common_prefix = len(ia), len(ib), common
                ch.appended = common == len(ia)
    return out
