"""threads: ThreadService calls on threads (create, get, list, update, delete, copy)."""
from __future__ import annotations

import uuid

import msgspec

from agentstate.v1 import threads_pb2 as pb

from ..storage import layout
from . import idempotency, validate, wire
from ..errors import ApiError, thread_not_found
from ..storage.layout import ThreadRec
from ..storage.store import Store, now_us

STATUS_IDLE = pb.THREAD_STATUS_IDLE


def to_proto(ns: str, thread_id: str, rec: ThreadRec, out: pb.Thread | None = None) -> pb.Thread:
    out = out if out is not None else pb.Thread()
    out.namespace = ns
    out.thread_id = thread_id
    wire.fill_metadata(out.metadata, rec.metadata)
    out.status = rec.status
    wire.set_timestamp(out.create_time, rec.created_us)
    wire.set_timestamp(out.update_time, rec.updated_us)
    out.etag = layout.thread_etag(rec)
    return out


def load(txn, store: Store, ns: str, thread_id: str) -> ThreadRec | None:
    raw = txn.get(layout.thread_key(ns, thread_id), db=store.db["threads"])
    return None if raw is None else layout.thread_decoder.decode(raw)


def require(txn, store: Store, ns: str, thread_id: str) -> ThreadRec:
    rec = load(txn, store, ns, thread_id)
    if rec is None:
        raise thread_not_found(ns, thread_id)
    return rec


def new_tkey(txn, store: Store) -> int:
    meta = store.db["meta"]
    tkey = layout.read_u64(txn.get(b"next_tkey", db=meta))
    txn.put(b"next_tkey", layout.u64(tkey + 1), db=meta)
    return tkey


def create_record(txn, store: Store, ns: str, thread_id: str, metadata: bytes = b"\x80") -> ThreadRec:
    now = now_us()
    rec = ThreadRec(layout.FORMAT_VERSION, new_tkey(txn, store), now, now, msgspec.Raw(metadata), 1, STATUS_IDLE)
    save(txn, store, ns, thread_id, rec)
    return rec


def save(txn, store: Store, ns: str, thread_id: str, rec: ThreadRec) -> None:
    txn.put(layout.thread_key(ns, thread_id), layout.encode(rec), db=store.db["threads"])


def _check_etag(rec: ThreadRec, etag: str) -> None:
    if etag and etag != layout.thread_etag(rec):
        raise ApiError("ETAG_MISMATCH", f"thread etag {etag!r} is stale", field="etag",
                       etag=etag, current_etag=layout.thread_etag(rec))


async def _write(store: Store, fn):
    return await store.run(fn)


# ----------------------------------------------------------------- calls

async def create(store: Store, req: pb.CreateThreadRequest) -> pb.CreateThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False) or str(uuid.uuid4())
    metadata = wire.metadata_items(req.metadata, "metadata")
    encoded = wire.encode_metadata_dict(metadata, "metadata")
    policy = req.if_exists or pb.IF_EXISTS_ERROR
    if policy not in (pb.IF_EXISTS_ERROR, pb.IF_EXISTS_RETURN, pb.IF_EXISTS_MERGE_METADATA):
        raise validate.invalid("if_exists", f"unknown policy {policy}")

    def apply(txn):
        rec = load(txn, store, ns, thread_id)
        if rec is None:
            rec = create_record(txn, store, ns, thread_id, encoded)
            return pb.CreateThreadResponse(thread=to_proto(ns, thread_id, rec), created=True)
        if policy == pb.IF_EXISTS_ERROR:
            raise ApiError("THREAD_ALREADY_EXISTS", f"thread {thread_id!r} exists in namespace {ns!r}",
                           field="thread_id", thread_id=thread_id)
        if policy == pb.IF_EXISTS_MERGE_METADATA and metadata:
            merged = wire.stored_metadata(rec.metadata)
            merged.update(metadata)
            rec.metadata = msgspec.Raw(wire.encode_metadata_dict(merged, "metadata"))
            rec.version += 1
            rec.updated_us = now_us()
            save(txn, store, ns, thread_id, rec)
        return pb.CreateThreadResponse(thread=to_proto(ns, thread_id, rec), created=False)

    return await _write(store, lambda txn: idempotency.run(
        txn, store.db, ns, "CreateThread", req, pb.CreateThreadResponse, apply))


async def get(store: Store, req: pb.GetThreadRequest) -> pb.GetThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    with store.read() as txn:
        rec = require(txn, store, ns, thread_id)
    return pb.GetThreadResponse(thread=to_proto(ns, thread_id, rec))


async def list_(store: Store, req: pb.ListThreadsRequest) -> pb.ListThreadsResponse:
    ns = validate.namespace(req.namespace)
    size = validate.page_size(req.page_size)
    wanted = wire.metadata_items(req.metadata_filter, "metadata_filter")
    fp = wire.fingerprint("threads", ns, sorted(wanted.items()))
    position = wire.read_token(req.page_token, fp)
    prefix = layout.thread_prefix(ns)
    out = pb.ListThreadsResponse()
    with store.read() as txn:
        cursor = txn.cursor(db=store.db["threads"])
        start = prefix + position[0].encode() + b"\x00" if position else prefix
        found = cursor.set_range(start)
        last = None
        while found:
            key = cursor.key()
            if not key.startswith(prefix):
                break
            rec = layout.thread_decoder.decode(cursor.value())
            if wire.metadata_matches(rec.metadata, wanted):
                if len(out.threads) == size:
                    out.next_page_token = wire.make_token(fp, (last,))
                    break
                last = layout.thread_id_of(key, len(prefix))
                to_proto(ns, last, rec, out.threads.add())
            found = cursor.next()
    return out


async def update(store: Store, req: pb.UpdateThreadRequest) -> pb.UpdateThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    sets = wire.metadata_items(req.set_metadata, "set_metadata")
    removes = list(req.remove_metadata_keys)  # metadata keys are any strings, not identifiers

    def apply(txn):
        rec = require(txn, store, ns, thread_id)
        _check_etag(rec, req.etag)
        merged = {} if req.replace_metadata else wire.stored_metadata(rec.metadata)
        for k in removes:
            merged.pop(k, None)
        merged.update(sets)
        rec.metadata = msgspec.Raw(wire.encode_metadata_dict(merged, "set_metadata"))
        rec.version += 1
        rec.updated_us = now_us()
        save(txn, store, ns, thread_id, rec)
        return pb.UpdateThreadResponse(thread=to_proto(ns, thread_id, rec))

    return await _write(store, lambda txn: idempotency.run(
        txn, store.db, ns, "UpdateThread", req, pb.UpdateThreadResponse, apply))


def delete_contents(txn, store: Store, ns: str, tkey: int) -> int:
    """Delete every checkpoint, pending write and run-index entry of a thread, and its runs, steps,
    events, artifacts and effects; returns checkpoints deleted."""
    from .checkpoints import delete_checkpoint_at  # local: checkpoints imports this module
    from .runs import delete_thread_records

    delete_thread_records(txn, store, ns, tkey)

    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["ckpts"])
    keys = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            keys.append(bytes(key))
    for key in keys:
        delete_checkpoint_at(txn, store, ns, key)
    _delete_prefix(txn, store.db["writes"], prefix)  # writes without a checkpoint of their own
    return len(keys)


def _delete_prefix(txn, db, prefix: bytes) -> int:
    cursor = txn.cursor(db=db)
    n = 0
    if not cursor.set_range(prefix):
        return 0
    while cursor.key().startswith(prefix):
        n += 1
        if not cursor.delete():
            break
    return n


async def delete(store: Store, req: pb.DeleteThreadRequest, on_garbage=None) -> pb.DeleteThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")

    def apply(txn):
        rec = load(txn, store, ns, thread_id)
        if rec is None:
            if req.allow_missing:
                return pb.DeleteThreadResponse(deleted=False)
            raise thread_not_found(ns, thread_id)
        _check_etag(rec, req.etag)
        n = delete_contents(txn, store, ns, rec.tkey)
        txn.delete(layout.thread_key(ns, thread_id), db=store.db["threads"])
        return pb.DeleteThreadResponse(deleted=True, deleted_checkpoints=n)

    resp = await _write(store, lambda txn: idempotency.run(
        txn, store.db, ns, "DeleteThread", req, pb.DeleteThreadResponse, apply))
    if on_garbage and resp.deleted:
        on_garbage()
    return resp


async def copy(store: Store, req: pb.CopyThreadRequest) -> pb.CopyThreadResponse:
    ns = validate.namespace(req.namespace)
    src_id = validate.ident(req.source_thread_id, "source_thread_id")
    dst_id = validate.ident(req.target_thread_id, "target_thread_id")
    if src_id == dst_id:
        raise validate.invalid("target_thread_id", "must differ from source_thread_id")
    new_metadata = wire.metadata_items(req.metadata, "metadata")

    def apply(txn):
        src = load(txn, store, ns, src_id)
        if src is None:
            raise thread_not_found(ns, src_id, "source_thread_id")
        if load(txn, store, ns, dst_id) is not None:
            raise ApiError("THREAD_ALREADY_EXISTS", f"target thread {dst_id!r} exists in namespace {ns!r}",
                           field="target_thread_id", thread_id=dst_id)
        if req.replace_metadata:
            metadata = new_metadata
        else:
            metadata = wire.stored_metadata(src.metadata)
            metadata.update(new_metadata)
        dst = create_record(txn, store, ns, dst_id, wire.encode_metadata_dict(metadata, "metadata"))
        n = copy_contents(txn, store, ns, src.tkey, dst.tkey)
        return pb.CopyThreadResponse(thread=to_proto(ns, dst_id, dst), copied_checkpoints=n)

    return await _write(store, lambda txn: idempotency.run(
        txn, store.db, ns, "CopyThread", req, pb.CopyThreadResponse, apply))


def copy_contents(txn, store: Store, ns: str, src_tkey: int, dst_tkey: int) -> int:
    """Copy manifests, pending writes and run-index entries (values are shared by hash)."""
    keep = store.gc_keep
    src_prefix = layout.tkey_prefix(src_tkey)
    dst_prefix = layout.tkey_prefix(dst_tkey)
    n = 0
    for db_name in ("ckpts", "writes"):
        db = store.db[db_name]
        cursor = txn.cursor(db=db)
        rows = []
        if cursor.set_range(src_prefix):
            for key, value in cursor.iternext():
                if not key.startswith(src_prefix):
                    break
                rows.append((dst_prefix + bytes(key[8:]), bytes(value)))
        for key, value in rows:
            txn.put(key, value, db=db)
            if db_name == "ckpts":
                n += 1
                m = layout.manifest_decoder.decode(value)
                if m.run_id is not None:
                    _, cns, cid = layout.split_ckpt_key(key)
                    txn.put(layout.run_key(ns, m.run_id, dst_tkey, cns, cid), layout.run_entry(ns, m.run_id),
                            db=store.db["runidx"])
                if keep is not None:
                    keep.update(node_id for _, node_id in m.channels)
                    if m.extra:
                        keep.add(m.extra)
            elif keep is not None:
                keep.add(layout.write_decoder.decode(value).value)
    return n
