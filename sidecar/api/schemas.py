"""schemas: SchemaService calls (the registry, eager migrations) and the wire side of migrate-on-read.

Migration steps arrive as MigrationStep messages and are validated into layout.MigrationStepRec records (errors name
the field, e.g. ``schema.versions[1].steps[0].rename.to``); the engine and the window/policy rules are in
state/schemas.py, the batched in-place rewrite of MigrateThread / MigrateNamespace in ops/schemas.py.
"""
from __future__ import annotations

from typing import AsyncIterator

from agentstate.v1 import schemas_pb2 as pb

from .. import limits
from ..errors import ApiError, invalid, thread_not_found
from ..ops import schemas as schema_ops
from ..state import schemas
from ..storage import hotpath as hp
from ..storage import nodes, records
from ..storage.layout import SchemaRec, SchemaVersionRec, MigrationStepRec
from ..storage.store import Store, now_us
from . import context, idempotency, validate, wire

DEFAULT_BATCH = 64
MAX_BATCH = 1000
TYPES = set(schemas.TYPE_NAMES)
POLICIES = {pb.FAILURE_POLICY_UNSPECIFIED, pb.FAILURE_POLICY_FAIL, pb.FAILURE_POLICY_DEGRADE,
            pb.FAILURE_POLICY_NEW_RUN}


# ----------------------------------------------------------------- steps in and out

def _path(values, field: str, *, required: bool) -> list[str]:
    if required and not values:
        raise invalid(field, "must name at least one key")
    if len(values) > 64:
        raise invalid(field, "at most 64 keys")
    return [validate.name(v, f"{field}[{i}]") for i, v in enumerate(values)]


def _names(values, field: str) -> list[str]:
    if len(values) > limits.MAX_CHANNELS:
        raise invalid(field, f"at most {limits.MAX_CHANNELS} names")
    return [validate.name(v, f"{field}[{i}]") for i, v in enumerate(values)]


def step_input(s: pb.MigrationStep, field: str, depth: int = 0, count: list | None = None) -> MigrationStepRec:
    """A validated MigrationStep as a MigrationStepRec."""
    count = count if count is not None else [0]
    count[0] += 1
    if count[0] > schemas.MAX_STEPS:
        raise invalid(field, f"at most {schemas.MAX_STEPS} steps per version (nested ones counted)")
    op = s.WhichOneof("op")
    if op is None:
        raise invalid(field, "one of rename, drop, add, nest, unnest, convert or map_items is required")
    f = f"{field}.{op}"
    o = getattr(s, op)
    if op == "rename":
        return MigrationStepRec("rename", _path(o.path, f + ".path", required=True), to=validate.name(o.to, f + ".to"))
    if op == "drop":
        return MigrationStepRec("drop", _path(o.path, f + ".path", required=True))
    if op == "add":
        if not o.HasField("default"):
            raise invalid(f + ".default", "is required")
        return MigrationStepRec("add", _path(o.path, f + ".path", required=True),
                       default=wire.value_encoding(o.default, f + ".default"))
    if op == "nest":
        if not o.fields:
            raise invalid(f + ".fields", "must name at least one field")
        return MigrationStepRec("nest", _path(o.path, f + ".path", required=False), to=validate.name(o.into, f + ".into"),
                       fields=_names(o.fields, f + ".fields"))
    if op == "unnest":
        return MigrationStepRec("unnest", _path(o.path, f + ".path", required=False),
                       to=validate.name(getattr(o, "from"), f + ".from"), fields=_names(o.fields, f + ".fields"))
    if op == "convert":
        if o.to not in TYPES:
            raise invalid(f + ".to", "a ValueType is required")
        return MigrationStepRec("convert", _path(o.path, f + ".path", required=False), type=o.to)
    # map_items
    if depth >= schemas.MAX_DEPTH:
        raise invalid(f, f"map_items nested deeper than {schemas.MAX_DEPTH}")
    if not o.steps:
        raise invalid(f + ".steps", "must hold at least one step")
    inner = [step_input(x, f"{f}.steps[{i}]", depth + 1, count) for i, x in enumerate(o.steps)]
    for i, x in enumerate(inner):
        if not x.path and x.kind != "convert":
            raise invalid(f"{f}.steps[{i}].{x.kind}.path", "must name at least one key (only a convert may "
                          "apply to the item itself)")
    return MigrationStepRec("map_items", _path(o.path, f + ".path", required=True), steps=inner)


def _top_convert_path(rec: MigrationStepRec, field: str) -> None:
    if rec.kind == "convert" and not rec.path:
        raise invalid(field + ".convert.path", "must name at least one key")


def step_to_proto(rec: MigrationStepRec, out: pb.MigrationStep) -> None:
    if rec.kind == "rename":
        out.rename.path.extend(rec.path)
        out.rename.to = rec.to
    elif rec.kind == "drop":
        out.drop.path.extend(rec.path)
    elif rec.kind == "add":
        out.add.path.extend(rec.path)
        wire.set_value(out.add.default, rec.default)
    elif rec.kind == "nest":
        out.nest.path.extend(rec.path)
        out.nest.fields.extend(rec.fields)
        out.nest.into = rec.to
    elif rec.kind == "unnest":
        out.unnest.path.extend(rec.path)
        setattr(out.unnest, "from", rec.to)
        out.unnest.fields.extend(rec.fields)
    elif rec.kind == "convert":
        out.convert.path.extend(rec.path)
        out.convert.to = rec.type
    else:
        out.map_items.path.extend(rec.path)
        for inner in rec.steps:
            step_to_proto(inner, out.map_items.steps.add())


def registration(req: pb.RegisterSchemaRequest) -> schemas.Registration:
    ns = validate.namespace(req.namespace)
    s = req.schema
    if not req.HasField("schema"):
        raise invalid("schema", "is required")
    if s.namespace and s.namespace != ns:
        raise invalid("schema.namespace", f"differs from namespace {ns!r}")
    name = validate.ident(s.name, "schema.name")
    if not s.versions:
        raise invalid("schema.versions", "must hold at least version 1")
    if len(s.versions) > schemas.MAX_VERSIONS:
        raise invalid("schema.versions", f"at most {schemas.MAX_VERSIONS} versions")
    versions = []
    for i, v in enumerate(s.versions):
        f = f"schema.versions[{i}]"
        if v.version != i + 1:
            raise invalid(f + ".version", f"must be {i + 1} (versions are 1..N in order)")
        if i == 0 and v.steps:
            raise invalid(f + ".steps", "version 1 has no steps (there is nothing before it)")
        count = [0]
        steps = []
        for j, st in enumerate(v.steps):
            rec = step_input(st, f"{f}.steps[{j}]", 0, count)
            _top_convert_path(rec, f"{f}.steps[{j}]")
            steps.append(rec)
        versions.append(SchemaVersionRec(v.version, steps, validate.text(v.description, f + ".description",
                                                                         limits.MAX_TEXT_BYTES)))
    if s.failure_policy not in POLICIES:
        raise invalid("schema.failure_policy", f"unknown FailurePolicy {s.failure_policy}")
    etag = validate.text(req.etag, "etag", 128)
    return schemas.Registration(ns, name, versions, s.min_readable_version, s.failure_policy, etag)


def schema_to_proto(ns: str, name: str, rec: SchemaRec, out: pb.Schema) -> None:
    out.namespace, out.name = ns, name
    for v in rec.versions:
        pv = out.versions.add(version=v.version, description=v.description)
        for st in v.steps:
            step_to_proto(st, pv.steps.add())
    out.min_readable_version = rec.min_readable
    out.failure_policy = rec.policy
    wire.set_timestamp(out.create_time, rec.created_us)
    wire.set_timestamp(out.update_time, rec.updated_us)
    out.etag = schemas.schema_etag(rec)
    out.latest_version = schemas.latest_version(rec)


# ----------------------------------------------------------------- registry calls

async def register(ctx: context.Ctx, req: pb.RegisterSchemaRequest) -> pb.RegisterSchemaResponse:
    r = registration(req)
    store = ctx.store

    def apply(txn):
        rec, created = schemas.register(txn, store, r, now_us())
        resp = pb.RegisterSchemaResponse(created=created)
        schema_to_proto(r.ns, r.name, rec, resp.schema)
        return resp

    return await store.run(lambda txn: idempotency.run(txn, store.db, r.ns, "RegisterSchema", req,
                                                       pb.RegisterSchemaResponse, apply))


async def get(ctx: context.Ctx, req: pb.GetSchemaRequest) -> pb.GetSchemaResponse:
    ns = validate.namespace(req.namespace)
    name = validate.ident(req.name, "name")
    resp = pb.GetSchemaResponse()
    with ctx.store.read() as txn:
        rec = schemas.require(txn, ctx.store, ns, name, field="name")
    schema_to_proto(ns, name, rec, resp.schema)
    return resp


async def list_(ctx: context.Ctx, req: pb.ListSchemasRequest) -> pb.ListSchemasResponse:
    ns = validate.namespace(req.namespace)
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("schemas", ns)
    position = wire.read_token(req.page_token, fp)
    out = pb.ListSchemasResponse()
    with ctx.store.read() as txn:
        last = None
        for name, rec in schemas.list_from(txn, ctx.store, ns, position[0] if position else None):
            if len(out.schemas) == size:
                out.next_page_token = wire.make_token(fp, (last,))
                break
            schema_to_proto(ns, name, rec, out.schemas.add())
            last = name
    return out


# ----------------------------------------------------------------- migrate on read (api/checkpoints.py)

def migrated_roots(channels, fetch) -> tuple[list[tuple[str, bytes, bytes | None]], dict]:
    """(name, root hash, root node id) of migrated channels, and {name: (shape, payload)} of those migrated
    on read (state/schemas.parts): such a value has no node (None) and the root hash of the tree an eager
    migration would store for it."""
    out = []
    prepared = {}
    for name, (kind, ref) in channels:
        if kind == "stored":
            out.append((name, nodes.record(fetch, ref)[:hp.HASH_SIZE], ref))
        else:
            shape, payload, root = ref
            prepared[name] = (shape, payload)
            out.append((name, root, None))
    return out, prepared


def fill_migrated(cv, root: bytes, prepared: tuple, known: bytes | None) -> None:
    """One ChannelValue of a value migrated on read (shaped as a stored one reads: lists item by item, maps
    entry by entry); nothing but the root when the client has that root."""
    cv.root = root
    if known == root:
        return
    shape, payload = prepared
    out = cv.value
    if shape == hp.KIND_LIST:
        out.list.SetInParent()
        built = getattr(payload, "wire", None)  # state/schemas.MigratedItems: the wire bytes made with it
        if built is not None:
            for part in built:  # whole ``items`` entries each
                out.list.MergeFromString(part)
            return
        items = out.list.items
        for enc in payload:
            wire.set_value(items.add(), enc)
    elif shape == hp.KIND_MAP:
        out.map.SetInParent()
        entries = out.map.entries
        for k, enc in payload:
            wire.set_value(entries[k], enc)
    else:
        wire.set_value(out, payload)


# ----------------------------------------------------------------- eager migrations

def _progress(p: schema_ops.Progress, out: pb.MigrationProgress) -> None:
    out.threads_done, out.checkpoints_seen, out.checkpoints_migrated = p.threads_done, p.seen, p.migrated
    out.checkpoints_current, out.checkpoints_other, out.checkpoints_failed = p.current, p.other, p.failed
    out.thread_id = p.thread_id
    out.memory_items_seen, out.memory_items_migrated = p.mem_seen, p.mem_migrated
    out.memory_items_current, out.memory_items_other, out.memory_items_failed = p.mem_current, p.mem_other, \
        p.mem_failed
    out.conversation_items_seen, out.conversation_items_migrated = p.conv_seen, p.conv_migrated
    out.conversation_items_current, out.conversation_items_other = p.conv_current, p.conv_other
    out.conversation_items_failed = p.conv_failed
    for thread_id, cns, cid, version, error, *memory in p.failures:
        f = out.failures.add(thread_id=thread_id, checkpoint_ns=cns, checkpoint_id=cid, stored_version=version,
                             error=error)
        if memory:
            f.memory_path.extend(memory[0])
            f.memory_key = memory[1]
            if len(memory) > 2:
                f.item_seq = memory[2]


def _target(txn, store: Store, ns: str, name: str, target: int) -> int:
    rec = schemas.require(txn, store, ns, name)
    latest = schemas.latest_version(rec)
    if target > latest:
        raise ApiError("SCHEMA_NOT_FOUND", f"schema {name!r} has no version {target} (latest: {latest})",
                       schema=name, version=target, field="target_version")
    return target or latest


def _batch(value: int) -> int:
    if value > MAX_BATCH:
        raise invalid("batch_size", f"at most {MAX_BATCH}")
    return value or DEFAULT_BATCH


async def _migrate_one(store: Store, ns: str, thread_id: str, tkey: int, name: str, target: int, batch: int,
                       total: schema_ops.Progress) -> AsyncIterator[None]:
    """Migrate one thread batch by batch, its checkpoints then its conversation items, adding to ``total``;
    yields after each batch but the last."""
    after = None
    total.thread_id = thread_id
    while True:
        def job(txn, after=after):
            delta = schema_ops.Progress()
            return schema_ops.migrate_batch(txn, store, ns, thread_id, tkey, name, target, after, batch, delta), delta

        after, delta = await store.run(job)
        _add_progress(total, delta, ("seen", "migrated", "current", "other", "failed"))
        if after is None:
            break
        yield None
    # then its conversation items, in the same batches (each a transaction; resumable: migrated items are
    # at the target version and skipped)
    seq = 0
    while True:
        def conv_job(txn, seq=seq):
            delta = schema_ops.Progress()
            return schema_ops.migrate_conversation_batch(txn, store, ns, thread_id, tkey, name, target, seq, batch,
                                                         delta), delta

        seq, delta = await store.run(conv_job)
        _add_progress(total, delta, ("conv_seen", "conv_migrated", "conv_current", "conv_other", "conv_failed"))
        if seq is None:
            return
        yield None


def _add_progress(total: schema_ops.Progress, delta: schema_ops.Progress, counts: tuple[str, ...]) -> None:
    """Add one batch's ``delta`` to ``total``: the ``counts`` fields, and its failures up to MAX_FAILURES."""
    for f in counts:
        setattr(total, f, getattr(total, f) + getattr(delta, f))
    room = schema_ops.MAX_FAILURES - len(total.failures)
    total.failures.extend(delta.failures[:max(room, 0)])


async def _migrate_memory(ctx: context.Ctx, ns: str, name: str, target: int, batch: int,
                          total: schema_ops.Progress) -> AsyncIterator[None]:
    """Migrate the namespace's memory items batch by batch, adding to ``total``; yields after each batch
    but the last."""
    store, after = ctx.store, None
    while True:
        def job(txn, after=after):
            delta = schema_ops.Progress()
            return schema_ops.migrate_memory_batch(txn, store, ctx.memory, ns, name, target, after, batch, delta,
                                                   ctx.memory.clock()), delta

        after, delta = await store.run(job)
        _add_progress(total, delta, ("mem_seen", "mem_migrated", "mem_current", "mem_other", "mem_failed"))
        if after is None:
            return
        yield None


async def migrate_thread(ctx: context.Ctx, req: pb.MigrateThreadRequest):
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = validate.ident(req.schema, "schema")
    batch = _batch(req.batch_size)
    store = ctx.store
    with store.read() as txn:
        target = _target(txn, store, ns, name, req.target_version)
        rec = records.thread(txn, store, ns, thread_id)
        if rec is None:
            raise thread_not_found(ns, thread_id)
    total = schema_ops.Progress()
    async for _ in _migrate_one(store, ns, thread_id, rec.tkey, name, target, batch, total):
        resp = pb.MigrateThreadResponse()
        _progress(total, resp.progress)
        yield resp
    total.threads_done = 1
    resp = pb.MigrateThreadResponse(done=True)
    _progress(total, resp.progress)
    yield resp


async def migrate_namespace(ctx: context.Ctx, req: pb.MigrateNamespaceRequest):
    ns = validate.namespace(req.namespace)
    name = validate.ident(req.schema, "schema")
    batch = _batch(req.batch_size)
    store = ctx.store
    with store.read() as txn:
        target = _target(txn, store, ns, name, req.target_version)
    total = schema_ops.Progress()
    start = None
    while True:
        with store.read() as txn:
            page = []
            for thread_id, rec in records.threads_from(txn, store, ns, start):
                if thread_id == start:
                    continue
                page.append((thread_id, rec.tkey))
                if len(page) == 1000:
                    break
        if not page:
            break
        for thread_id, tkey in page:
            async for _ in _migrate_one(store, ns, thread_id, tkey, name, target, batch, total):
                resp = pb.MigrateNamespaceResponse()
                _progress(total, resp.progress)
                yield resp
            total.threads_done += 1
            resp = pb.MigrateNamespaceResponse()
            _progress(total, resp.progress)
            yield resp
        start = page[-1][0]
    if not req.skip_memory and ctx.memory is not None:
        total.thread_id = ""
        async for _ in _migrate_memory(ctx, ns, name, target, batch, total):
            resp = pb.MigrateNamespaceResponse()
            _progress(total, resp.progress)
            yield resp
    resp = pb.MigrateNamespaceResponse(done=True)
    _progress(total, resp.progress)
    yield resp
