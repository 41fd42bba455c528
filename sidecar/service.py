"""service: the gRPC servicers (asyncio) of agentstate.v1.

Each handler only maps a call to its operation; errors become statuses here:
an ApiError with its reason, anything unexpected INTERNAL (logged). A handler
never lets an exception escape, so a bad request cannot take the server down.
"""
from __future__ import annotations

import asyncio
import functools
import logging

import grpc
from google.protobuf import message as _message
from google.protobuf import message_factory

from agentstate.v1 import admin_pb2, admin_pb2_grpc, threads_pb2_grpc

from . import batch, checkpoints, gc, history, hotpath, layout, threads
from .errors import ApiError
from .store import Store

log = logging.getLogger("sidecar.service")


async def abort(context: grpc.aio.ServicerContext, err: ApiError) -> None:
    status = err.to_status()
    await context.abort(err.code, err.message,
                        trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),))


class MalformedRequest:
    """Stands in for a request body that does not parse; its handler answers INVALID_ARGUMENT."""

    __slots__ = ("type_name", "error")

    def __init__(self, type_name: str, error: Exception) -> None:
        self.type_name = type_name
        self.error = error


def _tolerant(request_type):
    parse = request_type.FromString
    name = request_type.DESCRIPTOR.full_name

    def deserialize(data: bytes):
        try:
            return parse(data)
        except _message.DecodeError as e:  # grpc would answer UNKNOWN
            return MalformedRequest(name, e)

    return deserialize


def add_to_server(servicer, service_descriptor, server: grpc.aio.Server) -> None:
    """Register ``servicer`` like the generated add_*_to_server, but a body that
    does not parse reaches the handler as a MalformedRequest. Unary methods only
    (all of agentstate.v1 so far); a streaming one needs its own handler kind."""
    handlers = {}
    for method in service_descriptor.methods:
        if method.client_streaming or method.server_streaming:
            raise NotImplementedError(f"{method.full_name}: streaming methods are not wired up here yet")
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=_tolerant(message_factory.GetMessageClass(method.input_type)),
            response_serializer=message_factory.GetMessageClass(method.output_type).SerializeToString)
    name = service_descriptor.full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)


def handler(fn):
    """Wrap an operation so every failure becomes a proper status."""

    @functools.wraps(fn)
    async def call(self, request, context):
        try:
            if isinstance(request, MalformedRequest):
                raise ApiError("INVALID_FIELD", f"the request is not a valid {request.type_name}: {request.error}")
            return await fn(self, request, context)
        except ApiError as e:
            await abort(context, e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            if isinstance(e, grpc.RpcError) or type(e).__name__ == "AbortError":
                raise
            log.exception("internal error in %s", fn.__name__)
            await abort(context, ApiError("INTERNAL_ERROR", f"internal error: {type(e).__name__}"))

    return call


class ThreadService(threads_pb2_grpc.ThreadServiceServicer):
    def __init__(self, store: Store, collector: gc.GarbageCollector) -> None:
        self.store = store
        self.gc = collector

    @handler
    async def CreateThread(self, request, context):
        return await threads.create(self.store, request)

    @handler
    async def GetThread(self, request, context):
        return await threads.get(self.store, request)

    @handler
    async def ListThreads(self, request, context):
        return await threads.list_(self.store, request)

    @handler
    async def UpdateThread(self, request, context):
        return await threads.update(self.store, request)

    @handler
    async def DeleteThread(self, request, context):
        return await threads.delete(self.store, request, self.gc.soon)

    @handler
    async def CopyThread(self, request, context):
        return await threads.copy(self.store, request)

    @handler
    async def PutCheckpoint(self, request, context):
        return await checkpoints.put(self.store, request)

    @handler
    async def PutWrites(self, request, context):
        return await checkpoints.put_writes(self.store, request)

    @handler
    async def GetCheckpoint(self, request, context):
        return await checkpoints.get(self.store, request)

    @handler
    async def ListCheckpoints(self, request, context):
        return await checkpoints.list_(self.store, request)

    @handler
    async def PruneCheckpoints(self, request, context):
        return await checkpoints.prune(self.store, request, self.gc.soon)

    @handler
    async def DeleteCheckpointsForRuns(self, request, context):
        return await checkpoints.delete_for_runs(self.store, request, self.gc.soon)

    @handler
    async def DiffCheckpoints(self, request, context):
        return await checkpoints.diff(self.store, request)

    @handler
    async def GetChannelHistory(self, request, context):
        return await history.get_channel_history(self.store, request)

    @handler
    async def BatchWrite(self, request, context):
        return await batch.batch_write(self.store, request)


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, store: Store, collector: gc.GarbageCollector) -> None:
        self.store = store
        self.gc = collector

    @handler
    async def GetStoreStats(self, request, context):
        return await asyncio.get_running_loop().run_in_executor(None, store_stats, self.store)

    @handler
    async def CollectGarbage(self, request, context):
        stats = await asyncio.get_running_loop().run_in_executor(None, self.gc.collect)
        return admin_pb2.CollectGarbageResponse(reachable_blobs=stats.reachable_blobs,
                                                freed_blobs=stats.freed_blobs, freed_bytes=stats.freed_bytes)

    @handler
    async def CheckIntegrity(self, request, context):
        report = await asyncio.get_running_loop().run_in_executor(None, gc.check_integrity, self.store)
        return admin_pb2.CheckIntegrityResponse(**report)


def store_stats(store: Store) -> admin_pb2.GetStoreStatsResponse:
    out = admin_pb2.GetStoreStatsResponse(format_version=layout.FORMAT_NAME, native=hotpath.NATIVE,
                                          map_size_bytes=store.map_size, data_file_bytes=store.data_file_bytes())
    with store.read() as txn:
        db = store.db
        out.threads = txn.stat(db["threads"])["entries"]
        out.checkpoints = txn.stat(db["ckpts"])["entries"]
        out.pending_writes = txn.stat(db["writes"])["entries"]
        out.blobs = txn.stat(db["nodes"])["entries"]
        out.blob_bytes = sum(len(v) for _, v in txn.cursor(db=db["nodes"]).iternext())
    return out
