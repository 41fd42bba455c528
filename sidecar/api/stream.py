"""stream: StreamWrites — pipelined PutCheckpoint / PutWrites requests on one bidirectional stream.

A writer that checkpoints often pays for a unary call (~0.4-0.7 ms of gRPC
per call on these machines) and, in ``sync`` mode, waits a commit per
request. On the stream it sends requests without waiting; the server applies
them in the order sent, each exactly as the unary call would (its own nested
transaction, validation, idempotency, run checks, durability), and answers
with acknowledgements in the same order, batched when several are ready
together. Requests of one stream that arrive together share a group commit.

Errors: a request that fails gets a WriteAck with the error (code, reason and
metadata as the unary call's status and ErrorInfo) and changes nothing; the
stream goes on. A message that does not parse ends the stream with
INVALID_ARGUMENT after the acks of what came before it. The server reads at
most ``WINDOW`` requests ahead of the acks it sent (flow control: the client
then waits, as the HTTP/2 window fills). So a streamed write is never refused
with OVERLOADED, as a unary one is when the sidecar runs behind: the stream
slows down instead (its requests may depend on each other, so one refused in
the middle could not simply be sent again later).
"""
from __future__ import annotations

import asyncio
import logging

from agentstate.v1 import threads_pb2 as pb

from ..errors import ApiError, invalid
from ..storage.store import Store
from . import checkpoints, context, wire

log = logging.getLogger("sidecar.stream")

WINDOW = 1024
_DONE = object()


def _error(e: BaseException) -> pb.WriteError:
    if not isinstance(e, ApiError):
        log.error("internal error in a streamed write", exc_info=e)
        e = ApiError("INTERNAL_ERROR", f"internal error: {type(e).__name__}")
    return pb.WriteError(code=e.code.value[0], message=e.message, reason=e.reason, metadata=e.metadata)


def _start(store: Store, item: pb.StreamedWrite, ctx: context.Ctx | None):
    """Submit one request's write; returns (seq, op, awaitable or exception)."""
    op = item.WhichOneof("op")
    try:
        if op == "put_checkpoint":  # prepared inside the write, in stream order (also when large)
            req = item.put_checkpoint
            fut = store.start(checkpoints.put_job(store, req), wire.durability(req.durability), flow_controlled=True)
        elif op == "put_writes":
            req = item.put_writes
            plan = checkpoints.prepare_writes(req)
            fut = store.start(checkpoints.writes_job(store, req, plan), wire.durability(req.durability),
                              flow_controlled=True)
        else:
            raise invalid("op", "one of put_checkpoint or put_writes is required")
    except Exception as e:  # noqa: BLE001 - the request's own failure
        return item.seq, op, e
    return item.seq, op, fut


async def stream_writes(store: Store, requests, ctx: context.Ctx | None, malformed_type):
    """Async generator of StreamWritesResponse for the request iterator ``requests``."""
    queue: asyncio.Queue = asyncio.Queue()
    window = asyncio.Semaphore(WINDOW)

    async def reader() -> None:
        try:
            async for msg in requests:
                if isinstance(msg, malformed_type):
                    await queue.put(ApiError("INVALID_FIELD", f"a stream message is not a valid "
                                             f"{msg.type_name}: {msg.error}"))
                    return
                for item in msg.writes:
                    await window.acquire()
                    await queue.put(_start(store, item, ctx))
        except BaseException as e:  # noqa: BLE001 - the stream broke: end the responses
            await queue.put(e)
            return
        await queue.put(_DONE)

    task = asyncio.ensure_future(reader())
    try:
        while True:
            entry = await queue.get()
            if entry is _DONE:
                return
            if isinstance(entry, BaseException):
                raise entry
            out = pb.StreamWritesResponse()
            while True:
                await _ack(out, entry, ctx)
                window.release()
                if queue.empty():
                    break
                nxt = queue.get_nowait()
                if not isinstance(nxt, tuple) or not _ready(nxt):
                    yield out
                    out = pb.StreamWritesResponse()
                    if not isinstance(nxt, tuple):
                        if nxt is _DONE:
                            return
                        raise nxt
                entry = nxt
            yield out
    finally:
        task.cancel()


def _ready(entry) -> bool:
    result = entry[2]
    return not isinstance(result, asyncio.Future) or result.done()


async def _ack(out: pb.StreamWritesResponse, entry, ctx) -> None:
    seq, op, result = entry
    ack = out.acks.add(seq=seq)
    try:
        if isinstance(result, BaseException):
            raise result
        value = await result
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - reported in the ack
        ack.error.CopyFrom(_error(e))
        if op == "put_checkpoint" and ctx is not None:
            ctx.saves.failure(e)
        return
    if op == "put_checkpoint":
        if ctx is not None:
            ctx.saves.succeeded()
        if isinstance(value, tuple):
            value, touched = value
            if ctx is not None:
                ctx.notify(touched)
        ack.put_checkpoint.CopyFrom(value)
    else:
        ack.put_writes.CopyFrom(value)
