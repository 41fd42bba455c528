"""memory: MemoryService calls (put, get, delete, batch, list namespaces, search, history, sweep).

Each call validates every field of its request (INVALID_ARGUMENT naming it; INVALID_FILTER for a malformed
filter node, VECTOR_INVALID for a vector holding NaN or an infinity) before anything is written, converts it to
the values state/memory.py takes, runs the rules in one write transaction (answered once per request_id) or in
a read snapshot, and builds the response. Reads that refresh TTLs queue the new expiries; one small writer job
flushes them (docs/memory.md §7).
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import sys
from array import array
from typing import Any

from google.protobuf import duration_pb2

from agentstate.v1 import memory_pb2 as pb

from .. import limits
from ..errors import ApiError, invalid, limit
from ..state import memory as mem
from ..state import memory_filters as mf
from ..state import schemas
from ..storage import layout
from ..storage.layout import MemItemRec
from . import idempotency, validate, wire

Memory = mem.Memory


# ----------------------------------------------------------------- validation of small fields

def label_path(labels, field: str) -> tuple[str, ...]:
    if len(labels) > limits.MAX_MEMORY_LABELS:
        raise invalid(field, f"at most {limits.MAX_MEMORY_LABELS} labels")
    total = 0
    for i, lab in enumerate(labels):
        n = len(lab.encode())
        if not n or n > limits.MAX_MEMORY_LABEL_BYTES or "\x00" in lab:
            _label(lab, f"{field}[{i}]")  # (raises, naming the label)
        total += n
    if total > limits.MAX_MEMORY_PATH_BYTES:
        raise invalid(field, f"the labels take {total} bytes together, over {limits.MAX_MEMORY_PATH_BYTES}")
    return tuple(labels)


def _label(lab: str, field: str) -> int:
    if not lab:
        raise invalid(field, "a label must not be empty")
    if "\x00" in lab:
        raise invalid(field, "a label must not contain NUL characters")
    n = len(lab.encode())
    if n > limits.MAX_MEMORY_LABEL_BYTES:
        raise invalid(field, f"longer than {limits.MAX_MEMORY_LABEL_BYTES} bytes")
    return n


def item_key(key: str, field: str = "key") -> str:
    if len(key.encode()) > limits.MAX_MEMORY_KEY_BYTES:
        raise invalid(field, f"longer than {limits.MAX_MEMORY_KEY_BYTES} bytes")
    return key


def _enum(value: int, allowed, field: str, default: int) -> int:
    if value == 0:
        return default
    if value not in allowed:
        raise invalid(field, f"unknown value {value}")
    return value


def value_map(v, field: str = "value") -> bytes:
    if v.WhichOneof("kind") is None:
        raise invalid(field, "required (a map)")
    enc = wire.value_encoding(v, field)
    b = enc[0]
    if not (0x80 <= b <= 0x8F or b in (0xDE, 0xDF)):
        raise invalid(field, "must be a map")
    if len(enc) > limits.MAX_MEMORY_VALUE_BYTES:
        raise limit("memory_value_bytes", f"{field}: encoded value is {len(enc)} bytes, over "
                    f"{limits.MAX_MEMORY_VALUE_BYTES}", field=field)
    return enc


def vector_bytes(values, field: str) -> bytes:
    n = len(values)
    if n == 0:
        raise ApiError("VECTOR_INVALID", f"{field}: a vector must have at least one component", field=field)
    if n > limits.MAX_VECTOR_DIMS:
        raise invalid(field, f"at most {limits.MAX_VECTOR_DIMS} dimensions")
    arr = array("f", values)
    for i, x in enumerate(arr):
        if not math.isfinite(x):
            raise ApiError("VECTOR_INVALID", f"{field}: component {i} is {x} (NaN and infinities are refused)",
                           field=field)
    if sys.byteorder != "little":  # pragma: no cover
        arr.byteswap()
    return arr.tobytes()


def _space_name(name: str, field: str) -> str:
    validate.text(name, field, limits.MAX_VECTOR_SPACE_BYTES)
    if "\x00" in name:
        raise invalid(field, "must not contain NUL characters")
    return name or mem.DEFAULT_SPACE


def ttl_ms(d: duration_pb2.Duration, field: str = "ttl") -> int:
    if d.seconds < 0 or d.nanos < 0 or d.nanos >= 1_000_000_000:
        raise invalid(field, "must be a duration from 0 up")
    ms = d.seconds * 1000 + d.nanos // 1_000_000
    if ms > limits.MAX_MEMORY_TTL_MS:
        raise invalid(field, "at most 100 years")
    return ms


def provenance(p: pb.MemoryProvenance, field: str = "provenance") -> layout.Provenance:
    return (validate.ident(p.thread_id, f"{field}.thread_id", required=False),
            validate.ident(p.run_id, f"{field}.run_id", required=False),
            p.conversation_seq if p.HasField("conversation_seq") else None,
            validate.ident(p.step_id, f"{field}.step_id", required=False),
            validate.ident(p.checkpoint_id, f"{field}.checkpoint_id", required=False))


def _actor(actor: str, field: str = "actor") -> str:
    return validate.text(actor, field, limits.MAX_MEMORY_ACTOR_BYTES)


def _no_own(req) -> None:
    """Ops of a batch carry no namespace, request id or durability of their own."""
    for name in ("namespace", "request_id", "durability"):
        if getattr(req, name, None):
            raise invalid(name, "ops of a batch take the batch's")


# ----------------------------------------------------------------- requests as state inputs

def put_input(req: pb.PutMemoryItemRequest, field: str = "") -> mem.PutInput:
    f = (field + ".") if field else ""
    path = label_path(req.path, f + "path")
    key = item_key(req.key, f + "key")
    if not req.HasField("value"):
        raise invalid(f + "value", "required (a map)")
    value = value_map(req.value, f + "value")
    if len(req.vectors) > limits.MAX_MEMORY_VECTORS:
        raise limit("memory_vectors", f"{f}vectors: at most {limits.MAX_MEMORY_VECTORS} per item", field=f + "vectors")
    vectors: dict[str, bytes] = {}
    dims = None
    for name in sorted(req.vectors):
        vf = f"{f}vectors[{name!r}]"
        if not name:
            raise invalid(vf, "a vector field name must not be empty")
        validate.text(name, vf, limits.MAX_VECTOR_FIELD_BYTES)
        if "\x00" in name:
            raise invalid(vf, "a vector field name must not contain NUL characters")
        data = vector_bytes(req.vectors[name].values, vf)
        if dims is not None and len(data) // 4 != dims:
            raise ApiError("VECTOR_DIMENSION_MISMATCH",
                           f"{vf}: {len(data) // 4} dimensions, but the item's other vectors have {dims}",
                           field=vf, dims=dims, space=req.vector_space or mem.DEFAULT_SPACE)
        dims = len(data) // 4
        vectors[name] = data
    space = _space_name(req.vector_space, f + "vector_space")
    update = _enum(req.vector_update, (mem.VECTOR_REPLACE, mem.VECTOR_MERGE), f + "vector_update", mem.VECTOR_REPLACE)
    return mem.PutInput(
        path=path, key=key, value=value, vectors=vectors, space=space, vector_update=update,
        ttl_ms=ttl_ms(req.ttl, f + "ttl") if req.HasField("ttl") else None,
        provenance=provenance(req.provenance, f + "provenance"),
        origin=_enum(req.origin, (1, 2), f + "origin", 0), actor=_actor(req.actor, f + "actor"),
        etag=validate.text(req.etag, f + "etag", 128), must_not_exist=req.must_not_exist,
        **_schema_of(req, f))


def _schema_of(req: pb.PutMemoryItemRequest, f: str) -> dict:
    schema = validate.ident(req.schema, f + "schema", required=False)
    if schema and req.schema_version < 1:
        raise invalid(f + "schema_version", "must be at least 1 with a schema")
    return {"schema": schema, "schema_version": req.schema_version}


def delete_input(req: pb.DeleteMemoryItemRequest, field: str = "") -> mem.DeleteInput:
    f = (field + ".") if field else ""
    return mem.DeleteInput(path=label_path(req.path, f + "path"), key=item_key(req.key, f + "key"), purge=req.purge,
                           allow_missing=req.allow_missing, etag=validate.text(req.etag, f + "etag", 128),
                           actor=_actor(req.actor, f + "actor"), provenance=provenance(req.provenance, f + "provenance"))


def _refresh_flag(req) -> bool:
    return req.refresh_ttl if req.HasField("refresh_ttl") else True


# ----------------------------------------------------------------- filters

_OPS_WITH_VALUE = {mf.EQ, mf.NE, mf.GT, mf.GTE, mf.LT, mf.LTE, mf.IN, mf.NIN, mf.IS_TYPE, mf.LENGTH_EQ, mf.FAIL}


def _bad_filter(field: str, message: str) -> ApiError:
    return ApiError("INVALID_FILTER", f"{field}: {message}", field=field)


def filter_tree(msg: pb.MemoryFilter, field: str = "filter"):
    counter = [0]
    return _node(msg, field, 0, counter)


def _node(msg: pb.MemoryFilter, field: str, depth: int, counter: list):
    counter[0] += 1
    if counter[0] > mf.MAX_NODES:
        raise _bad_filter(field, f"more than {mf.MAX_NODES} filter nodes")
    if depth > mf.MAX_DEPTH:
        raise _bad_filter(field, f"nested deeper than {mf.MAX_DEPTH}")
    kind = msg.WhichOneof("kind")
    if kind is None:
        raise _bad_filter(field, "no kind set (one of all, any, negate, field, expression)")
    if kind in ("all", "any"):
        children = [_node(child, f"{field}.{kind}.filters[{i}]", depth + 1, counter)
                    for i, child in enumerate(getattr(msg, kind).filters)]
        return mf.All(children) if kind == "all" else mf.AnyOf(children)
    if kind == "negate":
        return mf.Not(_node(msg.negate, f"{field}.negate", depth + 1, counter))
    if kind == "expression":
        enc = _operand_encoding(msg.expression, f"{field}.expression")
        return mf.compile_expression(mf.decode_native(enc), f"{field}.expression")
    return _condition(msg.field, f"{field}.field")


def _operand_encoding(v, field: str) -> bytes:
    try:
        return wire.value_encoding(v, field)
    except ApiError as e:
        raise ApiError("INVALID_FILTER", e.message, field=e.metadata.get("field", field)) from None


def _condition(c: pb.FieldCondition, field: str) -> mf.Cond:
    path = []
    for i, seg in enumerate(c.path.segments):
        which = seg.WhichOneof("kind")
        if which is None:
            raise _bad_filter(f"{field}.path.segments[{i}]", "a segment is a key or an index")
        path.append(seg.key if which == "key" else seg.index)
    mode = c.mode or mf.AGENTSTATE
    if mode not in (mf.AGENTSTATE, mf.LANGGRAPH_PYTHON, mf.LANGGRAPH_JS):
        raise _bad_filter(f"{field}.mode", f"unknown comparison mode {c.mode}")
    op = c.op
    if not 1 <= op <= mf.FAIL:
        raise _bad_filter(f"{field}.op", f"unknown or missing operator {op}")
    has = c.HasField("value") and c.value.WhichOneof("kind") is not None
    if op == mf.EXISTS:
        if has:
            raise _bad_filter(f"{field}.value", "EXISTS takes no value")
        return mf.Cond(tuple(path), op, None, mode)
    if not has:
        raise _bad_filter(f"{field}.value", "required for this operator")
    operand = mf.DECODERS[mode](_operand_encoding(c.value, f"{field}.value"))
    if op in (mf.IN, mf.NIN):
        if type(operand) is not list:
            raise _bad_filter(f"{field}.value", "IN and NIN take a list")
        if len(operand) > mf.MAX_IN_VALUES:
            raise _bad_filter(f"{field}.value", f"at most {mf.MAX_IN_VALUES} values")
    elif op == mf.IS_TYPE:
        if type(operand) is not int or not mf.T_NULL <= operand <= mf.T_OPAQUE:
            raise _bad_filter(f"{field}.value", "IS_TYPE takes a MemoryValueType number")
    elif op == mf.LENGTH_EQ:
        if type(operand) is not int or operand < 0:
            raise _bad_filter(f"{field}.value", "LENGTH_EQ takes a count")
    elif op == mf.FAIL:
        if (type(operand) is not dict or type(operand.get("exception")) is not str
                or type(operand.get("message")) is not str):
            raise _bad_filter(f"{field}.value", 'FAIL takes {"exception": str, "message": str}')
        operand = (operand["exception"], operand["message"])
    return mf.Cond(tuple(path), op, operand, mode)


# ----------------------------------------------------------------- search and list inputs

def _paging(req, field: str, default_limit: int, max_offset: int) -> tuple[int, int, bool]:
    """(limit, offset, paged) of limit/offset or page_size/page_token paging."""
    f = (field + ".") if field else ""
    paged = bool(req.page_size or req.page_token)
    if paged and (req.limit or req.offset):
        raise invalid(f + "page_size", "give limit and offset, or page_size and page_token, not both")
    size = req.page_size if paged else req.limit
    if size > limits.MAX_MEMORY_SEARCH_LIMIT:
        raise invalid(f + ("page_size" if paged else "limit"), f"at most {limits.MAX_MEMORY_SEARCH_LIMIT}")
    if req.offset > max_offset:
        raise invalid(f + "offset", f"at most {max_offset}")
    return size or default_limit, req.offset, paged


def search_input(ns: str, req: pb.SearchMemoryItemsRequest, field: str = "") -> tuple[mem.SearchInput, bytes]:
    f = (field + ".") if field else ""
    prefix = label_path(req.path_prefix, f + "path_prefix")
    tree = filter_tree(req.filter, f + "filter") if req.HasField("filter") else None
    order = _enum(req.order, (1, 2, 3), f + "order", mem.ORDER_UPDATED_DESC)
    size, offset, paged = _paging(req, field, limits.DEFAULT_MEMORY_SEARCH_LIMIT, limits.MAX_MEMORY_OFFSET)
    vector = None
    if req.HasField("vector"):
        if paged:
            raise invalid(f + "page_size", "a vector query pages with limit and offset")
        if offset + size > limits.MAX_VECTOR_WINDOW:
            raise invalid(f + "offset", f"with a vector query, offset + limit is at most {limits.MAX_VECTOR_WINDOW}")
        q = req.vector
        data = vector_bytes(q.vector.values, f + "vector.vector")
        fields = []
        for i, name in enumerate(q.fields):
            validate.text(name, f"{f}vector.fields[{i}]", limits.MAX_VECTOR_FIELD_BYTES)
            fields.append(name)
        vector = mem.VectorQuery(data, len(data) // 4, _space_name(q.space, f + "vector.space"), tuple(fields),
                                 _enum(q.unscored, (1, 2), f + "vector.unscored", mem.UNSCORED_OMIT))
    # the page tokens' fingerprint: only paged searches read or make tokens
    fp = (wire.fingerprint("memsearch", ns, list(prefix), req.filter.SerializeToString(deterministic=True), order)
          if paged else b"")
    after = wire.read_token(req.page_token, fp, f + "page_token") if paged else None
    s = mem.SearchInput(prefix=prefix, filter=tree, order=order, limit=size, offset=offset, after=after,
                        vector=vector, refresh=_refresh_flag(req), values=not req.omit_values,
                        include_vectors=req.include_vectors, paged=paged, read_schema_version=req.read_schema_version)
    return s, fp


def _pattern(segments, field: str) -> tuple:
    if len(segments) > limits.MAX_MEMORY_LABELS:
        raise invalid(field, f"at most {limits.MAX_MEMORY_LABELS} segments")
    out = []
    for i, seg in enumerate(segments):
        which = seg.WhichOneof("kind")
        if which == "label":
            _label(seg.label, f"{field}[{i}].label")
            out.append(seg.label)
        elif which == "any" and seg.any:
            out.append(None)
        else:
            raise invalid(f"{field}[{i}]", "a segment is a label or any=true")
    return tuple(out)


def list_input(ns: str, req: pb.ListMemoryNamespacesRequest, field: str = "") -> tuple[mem.ListInput, bytes]:
    f = (field + ".") if field else ""
    prefix = _pattern(req.prefix, f + "prefix")
    suffix = _pattern(req.suffix, f + "suffix")
    max_depth = req.max_depth if req.HasField("max_depth") else None
    size, offset, paged = _paging(req, field, limits.DEFAULT_PAGE_SIZE, limits.MAX_MEMORY_OFFSET)
    fp = wire.fingerprint("memns", ns, [list(prefix), list(suffix), max_depth, req.include_empty])
    after = wire.read_token(req.page_token, fp, f + "page_token") if paged else None
    return mem.ListInput(prefix, suffix, max_depth, req.include_empty, size, offset,
                         tuple(after[0]) if after else None), fp


# ----------------------------------------------------------------- responses

def fill_item(out: pb.MemoryItem, ns: str, found: mem.Found, *, value: bool = True) -> pb.MemoryItem:
    rec: MemItemRec = found.rec
    out.namespace = ns
    out.path.extend(found.path)
    out.key = found.key
    if value and found.value is not None:
        wire.set_value(out.value, found.value)
    wire.set_timestamp(out.create_time, rec.created_us)
    wire.set_timestamp(out.update_time, rec.updated_us)
    out.etag = mem.etag_of(rec)
    out.version = rec.version
    if tuple(rec.provenance) != layout.NO_PROVENANCE:
        _fill_provenance(out.provenance, rec.provenance)
    out.origin = rec.origin
    out.actor = rec.actor
    if rec.ttl_ms is not None:
        _set_duration(out.ttl, rec.ttl_ms)
        wire.set_timestamp(out.expire_time, rec.expires_us)
    out.vector_space = rec.space
    out.vector_fields.extend(rec.vector_fields)
    out.schema, out.schema_version = rec.schema, rec.schema_version
    out.stored_schema_version = rec.schema_version
    if found.vectors:
        for name, data in found.vectors.items():
            out.vectors[name].values.extend(array("f", data))
    return out


def _fill_provenance(out: pb.MemoryProvenance, p) -> None:
    thread_id, run_id, seq, step_id, checkpoint_id = p
    out.thread_id, out.run_id, out.step_id, out.checkpoint_id = thread_id, run_id, step_id, checkpoint_id
    if seq is not None:
        out.conversation_seq = seq


def _set_duration(d: duration_pb2.Duration, ms: int) -> None:
    d.seconds, rest = divmod(ms, 1000)
    d.nanos = rest * 1_000_000


# ----------------------------------------------------------------- running ops (inside a write or a read)

def _put(m: Memory, txn, ns: str, p: mem.PutInput, now: int) -> pb.PutMemoryItemResponse:
    rec, created = m.put(txn, ns, p, now)
    out = pb.PutMemoryItemResponse(created=created)
    fill_item(out.item, ns, mem.Found(p.path, p.key, rec))
    return out


def _delete(m: Memory, txn, ns: str, d: mem.DeleteInput, now: int) -> pb.DeleteMemoryItemResponse:
    deleted, purged = m.delete(txn, ns, d, now)
    return pb.DeleteMemoryItemResponse(deleted=deleted, purged_revisions=purged)


def _get(m: Memory, txn, ns: str, req: pb.GetMemoryItemRequest, path, key, now: int, write_txn=None,
         ) -> pb.GetMemoryItemResponse:
    found = m.get(txn, ns, path, key, now, refresh=_refresh_flag(req), include_vectors=req.include_vectors,
                  write_txn=write_txn)
    out = pb.GetMemoryItemResponse()
    if found is None:
        if not req.allow_missing:
            raise mem.not_found(path, key)
        return out
    outcome = _migrate_found(m, txn, ns, found, req.read_schema_version) if req.read_schema_version else None
    fill_item(out.item, ns, found)
    if outcome is not None:
        out.item.migration, out.item.migration_error = outcome.status, outcome.error
        out.item.schema_version = outcome.version
    return out


def _migrate_found(m: Memory, txn, ns: str, found: mem.Found, read: int):
    """Migrate a found item's value to ``read`` in place (state/schemas.value_on_read); the Outcome."""
    if found.value is None:
        return None
    outcome = schemas.value_on_read(txn, m.store, ns, found.rec.schema, found.rec.schema_version, read,
                                    found.value)
    if outcome.channels is not None:
        found.value = outcome.channels  # the migrated map's canonical encoding
    return outcome


def _search(m: Memory, txn, ns: str, s: mem.SearchInput, fp: bytes, now: int, write_txn=None,
            ) -> pb.SearchMemoryItemsResponse:
    read = s.read_schema_version
    items, after = m.search(txn, ns, s, now, write_txn)
    out = pb.SearchMemoryItemsResponse()
    for f in items:
        scored = out.items.add()
        outcome = _migrate_found(m, txn, ns, f, read) if read and s.values else None
        fill_item(scored.item, ns, f, value=s.values)
        if outcome is not None:
            scored.item.migration, scored.item.migration_error = outcome.status, outcome.error
            scored.item.schema_version = outcome.version
        if f.score is not None:
            scored.score = f.score
            scored.field = f.field
    if after is not None:
        out.next_page_token = wire.make_token(fp, after)
    return out


def _list(m: Memory, txn, ns: str, q: mem.ListInput, fp: bytes, now: int) -> pb.ListMemoryNamespacesResponse:
    paths, after = m.list_paths(txn, ns, q, now)
    out = pb.ListMemoryNamespacesResponse()
    for p in paths:
        out.namespaces.add().path.extend(p)
    if after is not None:
        out.next_page_token = wire.make_token(fp, (list(after),))
    return out


# ----------------------------------------------------------------- the calls

def _schedule_refresh(m: Memory) -> None:
    """Flush queued TTL refreshes in one small writer job (the read that queued them does not wait)."""
    if m._refresh_scheduled or not m._refreshes:
        return
    m._refresh_scheduled = True

    def flush() -> None:
        m._refresh_scheduled = False
        entries = m.take_refreshes()
        if not entries:
            return

        def job(txn):
            return m.apply_refreshes(txn, entries, m.clock())

        try:
            if m.store.on_owner:
                fut = m.store.start(job, flow_controlled=True)
            else:  # a store used on its own (tests, tools): its owner thread runs the job
                fut = m.store.submit(job)
        except ApiError:  # shutting down or overloaded: the refreshes are lost, which only shortens a TTL
            return
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())

    if m.store.on_owner:
        asyncio.get_running_loop().call_soon(flush)
    else:
        flush()


async def put(m: Memory, req: pb.PutMemoryItemRequest) -> pb.PutMemoryItemResponse:
    ns = validate.namespace(req.namespace)
    p = put_input(req)
    durability = wire.durability(req.durability)
    return await m.store.run(lambda txn: idempotency.run(
        txn, m.db, ns, "PutMemoryItem", req, pb.PutMemoryItemResponse, lambda t: _put(m, t, ns, p, m.clock())),
        durability)


async def get(m: Memory, req: pb.GetMemoryItemRequest) -> pb.GetMemoryItemResponse:
    ns = validate.namespace(req.namespace)
    path = label_path(req.path, "path")
    key = item_key(req.key)
    with m.store.read() as txn:
        out = _get(m, txn, ns, req, path, key, m.clock())
    _schedule_refresh(m)
    return out


async def delete(m: Memory, req: pb.DeleteMemoryItemRequest, on_garbage=None) -> pb.DeleteMemoryItemResponse:
    ns = validate.namespace(req.namespace)
    d = delete_input(req)
    durability = wire.durability(req.durability)
    out = await m.store.run(lambda txn: idempotency.run(
        txn, m.db, ns, "DeleteMemoryItem", req, pb.DeleteMemoryItemResponse, lambda t: _delete(m, t, ns, d, m.clock())),
        durability)
    if on_garbage is not None and (out.deleted or out.purged_revisions):
        on_garbage()
    return out


async def search(m: Memory, req: pb.SearchMemoryItemsRequest) -> pb.SearchMemoryItemsResponse:
    ns = validate.namespace(req.namespace)
    s, fp = search_input(ns, req)
    with m.store.read() as txn:
        out = _search(m, txn, ns, s, fp, m.clock())
    _schedule_refresh(m)
    return out


async def list_namespaces(m: Memory, req: pb.ListMemoryNamespacesRequest) -> pb.ListMemoryNamespacesResponse:
    ns = validate.namespace(req.namespace)
    q, fp = list_input(ns, req)
    with m.store.read() as txn:
        return _list(m, txn, ns, q, fp, m.clock())


async def history(m: Memory, req: pb.GetMemoryItemHistoryRequest) -> pb.GetMemoryItemHistoryResponse:
    ns = validate.namespace(req.namespace)
    path = label_path(req.path, "path")
    key = item_key(req.key)
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("memhist", ns, list(path), key)
    pos = wire.read_token(req.page_token, fp)
    out = pb.GetMemoryItemHistoryResponse()
    with m.store.read() as txn:
        revs, more = m.history(txn, ns, path, key, pos[0] if pos else None, size)
        for version, rev in revs:
            r = out.revisions.add(version=version, kind=rev.kind, actor=rev.actor, origin=rev.origin, etag=rev.etag)
            wire.set_timestamp(r.time, rev.time_us)
            if tuple(rev.provenance) != layout.NO_PROVENANCE:
                _fill_provenance(r.provenance, rev.provenance)
            if rev.ttl_ms is not None:
                _set_duration(r.ttl, rev.ttl_ms)
            r.vector_fields.extend(rev.vector_fields)
            r.schema, r.schema_version = rev.schema, rev.schema_version
            r.stored_schema_version = rev.schema_version
            if rev.value is not None:
                r.value_root = bytes(txn.get(rev.value)[:32])
                if req.include_values:
                    value = m.value_of(txn, rev.value)
                    if req.read_schema_version:  # the revision's value migrated as a read item's would be
                        outcome = _revision_on_read(m, txn, ns, version, rev, req.read_schema_version, value)
                        if outcome.channels is not None:
                            value = outcome.channels  # the migrated map's canonical encoding
                        r.migration, r.migration_error = outcome.status, outcome.error
                        r.schema_version = outcome.version
                    wire.set_value(r.value, value)
    if more is not None:
        out.next_page_token = wire.make_token(fp, (more,))
    return out


def _revision_on_read(m: Memory, txn, ns: str, version: int, rev, read: int, value: bytes):
    """state/schemas.value_on_read of one revision's value; a migration error names the revision."""
    try:
        return schemas.value_on_read(txn, m.store, ns, rev.schema, rev.schema_version, read, value)
    except ApiError as e:
        if e.reason not in ("SCHEMA_MIGRATION_FAILED", "SCHEMA_VERSION_UNREADABLE"):
            raise
        raise ApiError(e.reason, f"revision {version}: {e.message}", **{**e.metadata, "revision": version}) from None


async def sweep(m: Memory, req: pb.SweepExpiredMemoryItemsRequest | None, on_garbage=None) -> int:
    """Expire what is due, in writer jobs of at most MEMORY_SWEEP_BATCH items; a job is only queued while the
    write queue is below a quarter of its bound, so the sweeper never holds writers back."""
    ns = validate.namespace(req.namespace) if req is not None and req.namespace else None
    total = 0
    start = b""
    while True:
        while m.store._inflight > m.store.max_queue // 4:
            await asyncio.sleep(0.01)
        n, nxt = await m.store.run(lambda txn: m.sweep_job(txn, ns, m.clock(), start))
        total += n
        if nxt is None:
            break
        start = nxt
        await asyncio.sleep(0)
    if total and on_garbage is not None:
        on_garbage()
    return total


# ----------------------------------------------------------------- batches

_OPS = ("put", "get", "delete", "search", "list_namespaces")


def _op_error(e: ApiError, i: int, kind: str) -> ApiError:
    prefix = f"ops[{i}].{kind}"
    md = dict(e.metadata)
    f = md.get("field")
    md["field"] = f"{prefix}.{f}" if f and not f.startswith("ops[") else (f or prefix)
    md["index"] = str(i)
    return ApiError(e.reason, e.message if e.message.startswith("ops[") else f"{prefix}: {e.message}", **md)


async def batch(m: Memory, req: pb.BatchMemoryRequest, on_garbage=None) -> pb.BatchMemoryResponse:
    ns = validate.namespace(req.namespace)
    if len(req.ops) > limits.MAX_MEMORY_BATCH_OPS:
        raise limit("memory_batch_ops", f"ops: at most {limits.MAX_MEMORY_BATCH_OPS} per batch", field="ops")
    semantics = _enum(req.semantics, (mem.SEQUENTIAL, mem.SNAPSHOT), "semantics", mem.SEQUENTIAL)
    durability = wire.durability(req.durability)
    prepared: list[tuple[str, Any]] = []
    for i, op in enumerate(req.ops):
        kind = op.WhichOneof("op")
        if kind is None:
            raise invalid(f"ops[{i}]", "no op set (one of put, get, delete, search, list_namespaces)")
        sub = getattr(op, kind)
        try:
            _no_own(sub)
            if kind == "put":
                prepared.append((kind, put_input(sub)))
            elif kind == "delete":
                d = delete_input(sub)
                prepared.append((kind, dataclasses.replace(d, make_path=True) if semantics == mem.SNAPSHOT else d))
            elif kind == "get":
                prepared.append((kind, (sub, label_path(sub.path, "path"), item_key(sub.key))))
            elif kind == "search":
                prepared.append((kind, search_input(ns, sub)))
            else:
                prepared.append((kind, list_input(ns, sub)))
        except ApiError as e:
            raise _op_error(e, i, kind) from None
    plan = mem.batch_order(prepared, semantics)

    def apply(txn):
        now = m.clock()
        results: list = [None] * len(prepared)
        replaced: dict = {}
        for i, kind, op, applied in plan:
            try:
                if kind == "put":
                    if applied:
                        results[i] = _put(m, txn, ns, op, now)
                        replaced[(tuple(op.path), op.key)] = results[i]
                    continue
                if kind == "delete":
                    if applied:
                        results[i] = _delete(m, txn, ns, op, now)
                        replaced[(tuple(op.path), op.key)] = results[i]
                    continue
                if kind == "get":
                    sub, path, key = op
                    results[i] = _get(m, txn, ns, sub, path, key, now, write_txn=txn)
                elif kind == "search":
                    s, fp = op
                    results[i] = _search(m, txn, ns, s, fp, now, write_txn=txn)
                else:
                    q, fp = op
                    results[i] = _list(m, txn, ns, q, fp, now)
            except ApiError as e:
                raise _op_error(e, i, kind) from None
        out = pb.BatchMemoryResponse()
        for i, (kind, op) in enumerate(prepared):
            r = results[i]
            if r is None:  # a dropped SNAPSHOT write: the result of the write that replaced it
                r = replaced[(tuple(op.path), op.key)]
                if kind == "put" and not isinstance(r, pb.PutMemoryItemResponse):
                    r = pb.PutMemoryItemResponse()
                elif kind == "delete" and not isinstance(r, pb.DeleteMemoryItemResponse):
                    r = pb.DeleteMemoryItemResponse()
            getattr(out.results.add(), kind).CopyFrom(r)
        return out

    resp = await m.store.run(lambda txn: idempotency.run(txn, m.db, ns, "BatchMemory", req, pb.BatchMemoryResponse,
                                                         apply), durability)
    if on_garbage is not None and any(r.WhichOneof("result") == "delete" for r in resp.results):
        on_garbage()
    return resp
