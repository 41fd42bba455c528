"""batch: BatchWrite — several puts and pending writes in order, in one transaction.

A client that queues its writes (LangGraph's async durability: the graph goes
on while its checkpoints are stored) sends what piled up in one call: one
round trip and one commit instead of one of each per request. Each request is
the same PutCheckpoint or PutWrites the single calls take and behaves the
same, except that puts are prepared inside the writer's transaction, so a
put can use a checkpoint stored by an earlier request of the batch as its
base. The batch is one nested transaction of the group commit: all or
nothing.
"""
from __future__ import annotations


from agentstate.v1 import threads_pb2 as pb

from .. import limits
from ..errors import ApiError, invalid, limit
from ..state import runstate
from ..storage.store import RetryJob, Store
from . import checkpoints, context, idempotency, validate, wire


def _at(e: ApiError, i: int, op: str) -> ApiError:
    """The error of request ``i`` as the batch's: field path and message prefixed, index added."""
    prefix = f"writes[{i}].{op}"
    metadata = dict(e.metadata)
    metadata["field"] = f"{prefix}.{metadata['field']}" if metadata.get("field") else prefix
    metadata["index"] = str(i)
    return ApiError(e.reason, f"{prefix}: {e.message}", **metadata)


async def batch_write(store: Store, req: pb.BatchWriteRequest,
                      ctx: context.Ctx | None = None) -> pb.BatchWriteResponse:
    if ctx is None:
        return await _batch_write(store, req, None)
    puts = sum(1 for item in req.writes if item.WhichOneof("op") == "put_checkpoint")
    try:
        resp = await _batch_write(store, req, ctx)
    except BaseException as e:  # the batch is one transaction: each of its puts failed
        ctx.saves.failure(e, puts)
        raise
    ctx.saves.succeeded(puts)
    return resp


async def _batch_write(store: Store, req: pb.BatchWriteRequest, ctx: context.Ctx | None) -> pb.BatchWriteResponse:
    ns = validate.namespace(req.namespace)
    validate.ident(req.request_id, "request_id", required=False)
    if len(req.writes) > limits.MAX_BATCH_WRITES:
        raise limit("batch_writes", f"writes: at most {limits.MAX_BATCH_WRITES} requests per batch", field="writes")
    prepared: list = []
    for i, item in enumerate(req.writes):
        op = item.WhichOneof("op")
        if op is None:
            raise invalid(f"writes[{i}]", "one of put_checkpoint or put_writes is required")
        sub = getattr(item, op)
        if validate.namespace(sub.namespace, f"writes[{i}].{op}.namespace") != ns:
            raise invalid(f"writes[{i}].{op}.namespace", f"must be the batch's namespace {ns!r}")
        if sub.request_id:
            raise invalid(f"writes[{i}].{op}.request_id", "not allowed in a batch (the batch's request_id covers it)")
        if op == "put_writes":  # no base involved: validate and hash here, off the writer
            try:
                prepared.append(checkpoints.prepare_writes(sub))
            except ApiError as e:
                raise _at(e, i, op) from None
        else:
            prepared.append(None)

    touched: set = set()

    def apply(txn):
        out = pb.BatchWriteResponse()
        for i, item in enumerate(req.writes):
            op = item.WhichOneof("op")
            try:
                if op == "put_checkpoint":
                    sub = item.put_checkpoint
                    plan = checkpoints.prepare_put(store, sub, txn)
                    tx = runstate.Tx(txn, store)
                    out.results.add().put_checkpoint.CopyFrom(checkpoints.apply_put(txn, store, plan, sub, tx))
                    touched.update(tx.touched)
                else:
                    out.results.add().put_writes.CopyFrom(checkpoints.apply_writes(txn, store, prepared[i]))
            except ApiError as e:
                raise _at(e, i, op) from None
            except RetryJob:  # cannot happen within one transaction; report it rather than loop
                raise ApiError("CONFLICT", f"writes[{i}]: the store changed under the batch; retry",
                               index=i) from None
        return out

    resp = await store.run(lambda txn: idempotency.run(
        txn, store.db, ns, "BatchWrite", req, pb.BatchWriteResponse, apply), wire.durability(req.durability))
    if ctx is not None and touched:  # event watchers of the threads the batch's puts touched
        ctx.notify(touched)
    return resp
