"""threads: ThreadService calls on threads (create, get, list, update, delete, copy).

Each call validates its request, runs the thread rules (state/threads.py, or
ops/threads.py for a delete) in one write transaction answered once per
request_id (idempotency.py), and builds the response.
"""
from __future__ import annotations

import uuid

from agentstate.v1 import threads_pb2 as pb

from ..ops import threads as thread_ops
from ..state import threads
from ..storage import layout
from ..storage.metadata import encode as encode_metadata
from ..storage.layout import ThreadRec
from ..storage.store import Store
from . import idempotency, validate, wire

IF_EXISTS = {pb.IF_EXISTS_ERROR: threads.IF_EXISTS_ERROR, pb.IF_EXISTS_RETURN: threads.IF_EXISTS_RETURN,
             pb.IF_EXISTS_MERGE_METADATA: threads.IF_EXISTS_MERGE_METADATA}


def to_proto(ns: str, thread_id: str, rec: ThreadRec, out: pb.Thread | None = None) -> pb.Thread:
    out = out if out is not None else pb.Thread()
    out.namespace = ns
    out.thread_id = thread_id
    wire.fill_metadata(out.metadata, rec.metadata)
    out.status = rec.status
    wire.set_timestamp(out.create_time, rec.created_us)
    wire.set_timestamp(out.update_time, rec.updated_us)
    if rec.last_active_us:
        wire.set_timestamp(out.last_active_time, rec.last_active_us)
    out.etag = layout.thread_etag(rec)
    return out


async def create(store: Store, req: pb.CreateThreadRequest) -> pb.CreateThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id", required=False) or str(uuid.uuid4())
    items = wire.metadata_items(req.metadata, "metadata")
    encode_metadata(items, "metadata")  # within the size limit, whatever happens below
    policy = IF_EXISTS.get(req.if_exists or pb.IF_EXISTS_ERROR)
    if policy is None:
        raise validate.invalid("if_exists", f"unknown policy {req.if_exists}")

    def apply(txn):
        rec, created = threads.create(txn, store, ns, thread_id, items, policy)
        return pb.CreateThreadResponse(thread=to_proto(ns, thread_id, rec), created=created)

    return await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "CreateThread", req, pb.CreateThreadResponse, apply))


async def get(store: Store, req: pb.GetThreadRequest) -> pb.GetThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    with store.read() as txn:
        rec = threads.require(txn, store, ns, thread_id)
    return pb.GetThreadResponse(thread=to_proto(ns, thread_id, rec))


async def list_(store: Store, req: pb.ListThreadsRequest) -> pb.ListThreadsResponse:
    ns = validate.namespace(req.namespace)
    size = validate.page_size(req.page_size)
    wanted = wire.metadata_items(req.metadata_filter, "metadata_filter")
    fp = wire.fingerprint("threads", ns, sorted(wanted.items()))
    position = wire.read_token(req.page_token, fp)
    out = pb.ListThreadsResponse()
    with store.read() as txn:
        last = None
        for thread_id, rec in threads.matching(txn, store, ns, wanted, position[0] if position else None):
            if len(out.threads) == size:
                out.next_page_token = wire.make_token(fp, (last,))
                break
            last = thread_id
            to_proto(ns, thread_id, rec, out.threads.add())
    return out


async def update(store: Store, req: pb.UpdateThreadRequest) -> pb.UpdateThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    sets = wire.metadata_items(req.set_metadata, "set_metadata")
    removes = list(req.remove_metadata_keys)  # metadata keys are any strings, not identifiers

    def apply(txn):
        rec = threads.update(txn, store, ns, thread_id, etag=req.etag, sets=sets, removes=removes,
                             replace=req.replace_metadata)
        return pb.UpdateThreadResponse(thread=to_proto(ns, thread_id, rec))

    return await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "UpdateThread", req, pb.UpdateThreadResponse, apply))


async def delete(store: Store, req: pb.DeleteThreadRequest, on_garbage=None) -> pb.DeleteThreadResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")

    def apply(txn):
        rec, n = thread_ops.delete(txn, store, ns, thread_id, etag=req.etag, allow_missing=req.allow_missing)
        return pb.DeleteThreadResponse(deleted=rec is not None, deleted_checkpoints=n)

    resp = await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "DeleteThread", req, pb.DeleteThreadResponse, apply), frees=True)
    if on_garbage and resp.deleted:
        on_garbage()
    return resp


async def copy(store: Store, req: pb.CopyThreadRequest) -> pb.CopyThreadResponse:
    ns = validate.namespace(req.namespace)
    src_id = validate.ident(req.source_thread_id, "source_thread_id")
    dst_id = validate.ident(req.target_thread_id, "target_thread_id")
    if src_id == dst_id:
        raise validate.invalid("target_thread_id", "must differ from source_thread_id")
    items = wire.metadata_items(req.metadata, "metadata")

    def apply(txn):
        dst, n = threads.copy(txn, store, ns, src_id, dst_id, items, req.replace_metadata)
        return pb.CopyThreadResponse(thread=to_proto(ns, dst_id, dst), copied_checkpoints=n)

    return await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "CopyThread", req, pb.CopyThreadResponse, apply))
