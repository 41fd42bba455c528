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

from agentstate.v1 import (admin_pb2, admin_pb2_grpc, artifacts_pb2_grpc, conversations_pb2_grpc, effects_pb2_grpc,
                           events_pb2_grpc, memory_pb2, memory_pb2_grpc, runs_pb2_grpc, threads_pb2_grpc)
from agentstate.v1 import schemas_pb2_grpc

from ..errors import ApiError
from ..storage import backup, gc, hotpath, layout
from ..storage.store import Store
from . import (admin, artifacts, assembly, auth, batch, checkpoints, compactions, context, conversations, effects, events,
               history, memory, runs, stream, threads, validate)
from . import schemas
from . import resume

from agentstate.v1 import retention_pb2_grpc  # noqa: E402 - retention (issue 14)
from . import retention as retention_api  # noqa: E402
from . import quotas as quotas_api  # noqa: E402 - namespace quotas (issue 16)

from agentstate.v1 import transfer_pb2_grpc  # noqa: E402 - export and import (issue 14)
from . import transfer as transfer_api  # noqa: E402

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


_HANDLER_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_to_server(servicer, service_descriptor, server: grpc.aio.Server,
                  authorizer: auth.Authorizer | None = None, wrap=None) -> None:
    """Register ``servicer`` like the generated add_*_to_server, but a body that
    does not parse reaches the handler as a MalformedRequest (for a client
    stream: as one item of the request iterator), so it is answered
    INVALID_ARGUMENT, never UNKNOWN. Every method kind is supported; wrap
    unary-response handlers with :func:`handler` (or :func:`client_streaming`)
    and server-streaming ones with :func:`server_streaming`. With an
    ``authorizer`` every handler is behind the checks of its rule in
    :data:`auth.RULES` (an RPC missing from the table fails here, at start).

    ``wrap(service_name, method_descriptor, behavior) -> behavior``, when given, wraps every method's
    behaviour outside the checks, so denied calls are counted too (the server's request metrics and
    request logs: sidecar/metrics.py)."""
    handlers = {}
    for method in service_descriptor.methods:
        kind = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)]
        behavior = getattr(servicer, method.name)
        if authorizer is not None:
            behavior = auth.guard(behavior, method.client_streaming, method.server_streaming,
                                  auth.RULES[f"{service_descriptor.full_name}/{method.name}"], authorizer)
        if wrap is not None:
            behavior = wrap(service_descriptor.name, method, behavior)
        handlers[method.name] = kind(
            behavior,
            request_deserializer=_tolerant(message_factory.GetMessageClass(method.input_type)),
            response_serializer=_serializer(message_factory.GetMessageClass(method.output_type)))
    name = service_descriptor.full_name
    # Generic handlers only, not add_registered_method_handlers as generated code does: grpc.aio's server
    # keeps one pending accept per registered method and waits on all of them (asyncio.wait) for every
    # call it accepts, so registering our ~50 methods cost each RPC a wait over ~50 futures: a GetThread
    # made 1,355 Python calls in the server, 523 without (cProfile), and its server CPU went 0.42 -> 0.31 ms,
    # a small put's 0.62 -> 0.54 ms (medians of three alternating runs, load 5). Calls are found by name in
    # the generic handler instead, with the same results (an unknown method is still UNIMPLEMENTED).
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))


def _serializer(cls):
    """A response's bytes: its SerializeToString, or the bytes a handler serialized itself
    (checkpoints.get_wire)."""
    serialize = cls.SerializeToString

    def ser(resp):
        return resp if type(resp) is bytes else serialize(resp)

    return ser


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


def _malformed(request: MalformedRequest) -> ApiError:
    return ApiError("INVALID_FIELD", f"the request is not a valid {request.type_name}: {request.error}")


async def _report(context, e: BaseException, name: str) -> None:
    """Abort the call with the status for ``e`` (re-raising what must propagate)."""
    if isinstance(e, ApiError):
        await abort(context, e)
        return
    if isinstance(e, asyncio.CancelledError) or isinstance(e, grpc.RpcError) or type(e).__name__ == "AbortError":
        raise e
    log.exception("internal error in %s", name, exc_info=e)
    await abort(context, ApiError("INTERNAL_ERROR", f"internal error: {type(e).__name__}"))


def server_streaming(fn):
    """Like :func:`handler` for an async-generator operation (one request, a stream of responses)."""

    @functools.wraps(fn)
    async def call(self, request, context):
        try:
            if isinstance(request, MalformedRequest):
                raise _malformed(request)
            async for item in fn(self, request, context):
                yield item
        except BaseException as e:  # noqa: BLE001 - _report re-raises what must propagate
            if isinstance(e, GeneratorExit):
                raise
            await _report(context, e, fn.__name__)

    return call


async def checked_stream(requests):
    """A client stream whose malformed items raise INVALID_ARGUMENT."""
    async for item in requests:
        if isinstance(item, MalformedRequest):
            raise _malformed(item)
        yield item


def client_streaming(fn):
    """Like :func:`handler` for a client-streaming operation; ``fn`` gets the checked request stream."""

    @functools.wraps(fn)
    async def call(self, request_iterator, context):
        try:
            return await fn(self, checked_stream(request_iterator), context)
        except BaseException as e:  # noqa: BLE001 - _report re-raises what must propagate
            await _report(context, e, fn.__name__)

    return call


class ThreadService(threads_pb2_grpc.ThreadServiceServicer):
    def __init__(self, store: Store, collector: gc.GarbageCollector, ctx: context.Ctx | None = None) -> None:
        self.store = store
        self.gc = collector
        self.ctx = ctx

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
        resp = await threads.delete(self.store, request, self.gc.soon)
        if self.ctx is not None and resp.deleted:  # watchers of its events learn it at once
            self.ctx.notify([(validate.namespace(request.namespace), request.thread_id)])
        return resp

    @handler
    async def CopyThread(self, request, context):
        return await threads.copy(self.store, request)

    @handler
    async def PutCheckpoint(self, request, context):
        return await checkpoints.put(self.store, request, self.ctx)

    @handler
    async def PutWrites(self, request, context):
        return await checkpoints.put_writes(self.store, request)

    @handler
    async def GetCheckpoint(self, request, context):
        return await checkpoints.get_wire(self.store, request)  # serialized there (list values as built)

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
        return await batch.batch_write(self.store, request, self.ctx)

    async def StreamWrites(self, request_iterator, context):
        try:
            async for resp in stream.stream_writes(self.store, request_iterator, self.ctx, MalformedRequest):
                yield resp
        except BaseException as e:  # noqa: BLE001 - _report re-raises what must propagate
            if isinstance(e, GeneratorExit):
                raise
            await _report(context, e, "StreamWrites")

    @handler
    async def ResumeThread(self, request, context):  # NEW_RUN on the server (api/resume.py, issue 14)
        return await resume.resume_thread(self.ctx, request)


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, store: Store, collector: gc.GarbageCollector, backup_dir: str = "") -> None:
        self.store = store
        self.gc = collector
        self.backup_dir = backup_dir or backup.default_dir(store.path)

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

    @handler
    async def BackupStore(self, request, context):
        return await admin.backup_store(self.store, self.backup_dir, request)

    @handler
    async def ReencryptNamespace(self, request, context):
        return await admin.reencrypt_namespace(self.store, request)


class RunService(runs_pb2_grpc.RunServiceServicer):
    def __init__(self, ctx: context.Ctx) -> None:
        self.ctx = ctx

    @handler
    async def CreateRun(self, request, context):
        return await runs.create(self.ctx, request)

    @handler
    async def GetRun(self, request, context):
        return await runs.get(self.ctx, request)

    @handler
    async def ListRuns(self, request, context):
        return await runs.list_(self.ctx, request)

    @handler
    async def ClaimRun(self, request, context):
        return await runs.claim_call(self.ctx, request)

    @handler
    async def Heartbeat(self, request, context):
        return await runs.heartbeat(self.ctx, request)

    @handler
    async def CompleteRun(self, request, context):
        return await runs.complete(self.ctx, request)

    @handler
    async def FailRun(self, request, context):
        return await runs.fail(self.ctx, request)

    @handler
    async def CancelRun(self, request, context):
        return await runs.cancel(self.ctx, request)

    @handler
    async def ResumeRun(self, request, context):
        return await runs.resume(self.ctx, request)

    @handler
    async def ListBranches(self, request, context):
        return await runs.list_branches(self.ctx, request)

    @handler
    async def PromoteBranch(self, request, context):
        return await runs.promote(self.ctx, request)

    @handler
    async def StartStep(self, request, context):
        return await runs.start_step(self.ctx, request)

    @handler
    async def EndStep(self, request, context):
        return await runs.end_step_call(self.ctx, request)

    @handler
    async def RecordStep(self, request, context):
        return await runs.record_step_call(self.ctx, request)

    @handler
    async def ListSteps(self, request, context):
        return await runs.list_steps(self.ctx, request)

    @handler
    async def GetThreadUsage(self, request, context):
        return await runs.thread_usage(self.ctx, request)


class EventService(events_pb2_grpc.EventServiceServicer):
    def __init__(self, ctx: context.Ctx) -> None:
        self.ctx = ctx

    @handler
    async def AppendEvents(self, request, context):
        return await events.append_call(self.ctx, request)

    @handler
    async def ListEvents(self, request, context):
        return await events.list_(self.ctx, request)

    @server_streaming
    async def WatchEvents(self, request, context):
        async for item in events.watch(self.ctx, request):
            yield item


class ArtifactService(artifacts_pb2_grpc.ArtifactServiceServicer):
    def __init__(self, ctx: context.Ctx) -> None:
        self.ctx = ctx

    @client_streaming
    async def UploadArtifact(self, request_iterator, context):
        return await artifacts.upload(self.ctx, request_iterator)

    @server_streaming
    async def DownloadArtifact(self, request, context):
        async for item in artifacts.download(self.ctx, request):
            yield item

    @handler
    async def GetArtifact(self, request, context):
        return await artifacts.get(self.ctx, request)

    @handler
    async def ListArtifacts(self, request, context):
        return await artifacts.list_(self.ctx, request)

    @handler
    async def SetOfficialArtifact(self, request, context):
        return await artifacts.set_official(self.ctx, request)


class EffectService(effects_pb2_grpc.EffectServiceServicer):
    def __init__(self, ctx: context.Ctx) -> None:
        self.ctx = ctx

    @handler
    async def BeginEffect(self, request, context):
        return await effects.begin(self.ctx, request)

    @handler
    async def CompleteEffect(self, request, context):
        return await effects.complete(self.ctx, request)

    @handler
    async def FailEffect(self, request, context):
        return await effects.fail(self.ctx, request)

    @handler
    async def GetEffect(self, request, context):
        return await effects.get(self.ctx, request)

    @handler
    async def ListEffects(self, request, context):
        return await effects.list_(self.ctx, request)


class MemoryService(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, mem: memory.Memory, on_garbage=None) -> None:
        self.mem = mem
        self.on_garbage = on_garbage

    @handler
    async def PutMemoryItem(self, request, context):
        return await memory.put(self.mem, request)

    @handler
    async def GetMemoryItem(self, request, context):
        return await memory.get(self.mem, request)

    @handler
    async def DeleteMemoryItem(self, request, context):
        return await memory.delete(self.mem, request, self.on_garbage)

    @handler
    async def BatchMemory(self, request, context):
        return await memory.batch(self.mem, request, self.on_garbage)

    @handler
    async def ListMemoryNamespaces(self, request, context):
        return await memory.list_namespaces(self.mem, request)

    @handler
    async def SearchMemoryItems(self, request, context):
        return await memory.search(self.mem, request)

    @handler
    async def GetMemoryItemHistory(self, request, context):
        return await memory.history(self.mem, request)

    @handler
    async def SweepExpiredMemoryItems(self, request, context):
        n = await memory.sweep(self.mem, request, self.on_garbage)
        return memory_pb2.SweepExpiredMemoryItemsResponse(expired_items=n)


class ConversationService(conversations_pb2_grpc.ConversationServiceServicer):
    """The conversation log and idle policies (api/conversations.py), compaction (api/compactions.py), pinned
    items, GetContext and ReportUsage (api/assembly.py)."""

    def __init__(self, ctx: context.Ctx) -> None:
        self.ctx = ctx

    @handler
    async def AppendItems(self, request, context):
        return await conversations.append(self.ctx, request)

    @handler
    async def ListItems(self, request, context):
        return await conversations.list_(self.ctx, request)

    @handler
    async def GetItems(self, request, context):
        return await conversations.get(self.ctx, request)

    @handler
    async def PopItem(self, request, context):
        return await conversations.pop(self.ctx, request)

    @handler
    async def ClearItems(self, request, context):
        return await conversations.clear(self.ctx, request)

    @handler
    async def GetConversation(self, request, context):
        return await conversations.get_conversation(self.ctx, request)

    @handler
    async def SetIdlePolicy(self, request, context):
        return await conversations.set_idle(self.ctx, request)

    @handler
    async def GetIdlePolicy(self, request, context):
        return await conversations.get_idle(self.ctx, request)

    @handler
    async def SetCompactionPolicy(self, request, context):
        return await compactions.set_policy(self.ctx, request)

    @handler
    async def GetCompactionPolicy(self, request, context):
        return await compactions.get_policy(self.ctx, request)

    @handler
    async def ClaimCompaction(self, request, context):
        return await compactions.claim(self.ctx, request)

    @handler
    async def SubmitSummary(self, request, context):
        return await compactions.submit(self.ctx, request)

    @handler
    async def ListCompactions(self, request, context):
        return await compactions.list_compactions(self.ctx, request)

    @handler
    async def ListSummaries(self, request, context):
        return await compactions.list_summaries(self.ctx, request)

    @handler
    async def ExpandSummary(self, request, context):
        return await compactions.expand(self.ctx, request)

    @handler
    async def GetContext(self, request, context):
        return await assembly.get_context(self.ctx, request)

    @handler
    async def ReportUsage(self, request, context):
        return await assembly.report_usage(self.ctx, request)

    @handler
    async def SetPinnedItem(self, request, context):
        return await assembly.set_pin(self.ctx, request)

    @handler
    async def ListPinnedItems(self, request, context):
        return await assembly.list_pins(self.ctx, request)

    @handler
    async def DeletePinnedItem(self, request, context):
        return await assembly.delete_pin(self.ctx, request)


class RetentionService(retention_pb2_grpc.RetentionServiceServicer):
    """Retention policies, passes that apply them, usage (api/retention.py)."""

    def __init__(self, ctx: context.Ctx, sweeper=None) -> None:
        self.ctx = ctx
        self.sweeper = sweeper  # reclaims the contents of the idle threads a pass deletes

    @handler
    async def SetRetentionPolicy(self, request, context):
        return await retention_api.set_policy(self.ctx, request)

    @handler
    async def GetRetentionPolicy(self, request, context):
        return await retention_api.get_policy(self.ctx, request)

    @handler
    async def ApplyRetention(self, request, context):
        return await retention_api.apply(self.ctx, request, self.sweeper)

    @handler
    async def GetUsage(self, request, context):
        return await retention_api.usage(self.ctx, request)

    @handler
    async def SetQuota(self, request, context):
        return await quotas_api.set_quota(self.ctx, request)

    @handler
    async def GetQuota(self, request, context):
        return await quotas_api.get_quota(self.ctx, request)


class SchemaService(schemas_pb2_grpc.SchemaServiceServicer):
    def __init__(self, ctx: context.Ctx) -> None:
        self.ctx = ctx

    @handler
    async def RegisterSchema(self, request, context):
        return await schemas.register(self.ctx, request)

    @handler
    async def GetSchema(self, request, context):
        return await schemas.get(self.ctx, request)

    @handler
    async def ListSchemas(self, request, context):
        return await schemas.list_(self.ctx, request)

    @server_streaming
    async def MigrateThread(self, request, context):
        async for item in schemas.migrate_thread(self.ctx, request):
            yield item

    @server_streaming
    async def MigrateNamespace(self, request, context):
        async for item in schemas.migrate_namespace(self.ctx, request):
            yield item


class TransferService(transfer_pb2_grpc.TransferServiceServicer):
    """Export from and import into the serving store (api/transfer.py)."""

    def __init__(self, ctx: context.Ctx) -> None:
        self.ctx = ctx

    @server_streaming
    async def ExportNamespace(self, request, context):
        async for item in transfer_api.export_namespace(self.ctx, request):
            yield item

    @client_streaming
    async def ImportNamespace(self, request_iterator, context):
        return await transfer_api.import_namespace(self.ctx, request_iterator)


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
