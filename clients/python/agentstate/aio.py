"""aio: the asyncio twin of :class:`agentstate.Client`.

    from agentstate import AsyncClient
    async with AsyncClient("unix:sidecar-data/sidecar.sock") as c:
        await c.put_checkpoint("t1", {"messages": ["hi"]})
        async for cp in c.list_checkpoints("t1"):
            ...

Same methods, arguments, deadlines, retries and exceptions as the sync
client (requests are built by the same code); calls are coroutines and list
calls async iterators. The facets ``runs``, ``events``, ``artifacts`` and
``effects`` are the sync client's too (``await c.runs.start(...)`` gives an
:class:`agentstate.held_runs.AsyncHeldRun`; ``async for ev in
c.events.watch(...)``). Create it inside the event loop that uses it (a
grpc.aio channel belongs to one loop).
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import random
import time
from typing import Any, AsyncIterator, Iterable, Mapping

import grpc

from . import _requests as rq
from . import transport
from .transport import TLS
from ._requests import DEFAULT_ADDRESS, RetryPolicy, channel_options
from .retries import DEFAULT_TIMEOUT
from . import _lists
from .client import _with_wire, backup_name, checkpoint_values
from .values import response_lists
from .errors import DeadlineExceeded, from_rpc_error
from .v1 import admin_pb2, admin_pb2_grpc, threads_pb2 as pb, threads_pb2_grpc


class AsyncClient:
    """asyncio client. ``address`` is ``unix:PATH`` or ``HOST:PORT``; see :class:`agentstate.Client`."""

    def __init__(self, address: str = DEFAULT_ADDRESS, *, namespace: str = "default",
                 timeout: float = DEFAULT_TIMEOUT,
                 channel: grpc.aio.Channel | None = None, retry: RetryPolicy | None = None,
                 auto_request_ids: bool = True, wait_for_ready: bool | None = None,
                 options: Iterable[tuple[str, Any]] = (), token: str | None = None,
                 tls: "TLS | bool | None" = None) -> None:
        self.address = address
        self.namespace = namespace
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.auto_request_ids = auto_request_ids
        self.wait_for_ready = wait_for_ready
        self._own_channel = channel is None
        self.channel = channel or transport.aio_channel(address, channel_options(options), token, tls)
        own = [*channel_options(options), transport.OWN_CONNECTION]
        #: the long-lived streams' connections (agentstate.transport.StreamConnections)
        self.stream_connections = transport.StreamConnections(
            None if channel else lambda: transport.aio_channel(address, own, token, tls), self.channel)
        self.threads = threads_pb2_grpc.ThreadServiceStub(self.channel)
        self._get_with_wire = self.channel.unary_unary(  # GetCheckpoint, answering (message, its bytes)
            "/agentstate.v1.ThreadService/GetCheckpoint", request_serializer=pb.GetCheckpointRequest.SerializeToString,
            response_deserializer=_with_wire, _registered_method=True)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        from . import artifacts, conversations, effects, events, memory, runs  # facets of the other services
        self.runs = runs.AsyncRuns(self)
        self.events = events.AsyncEvents(self)
        self.artifacts = artifacts.AsyncArtifacts(self)
        self.effects = effects.AsyncEffects(self)
        from . import schemas  # the SchemaService facet
        self.schemas = schemas.AsyncSchemas(self)
        self.memory = memory.AsyncMemory(self)
        self.conversations = conversations.AsyncConversations(self)
        from . import retention  # noqa: PLC0415
        self.retention = retention.AsyncRetention(self)
        from . import transfer  # the TransferService facet (export and import)
        self.transfer = transfer.AsyncTransfer(self)

    async def close(self) -> None:
        for closing in self.stream_connections.close_all():
            await closing
        if self._own_channel:
            await self.channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, method, request, timeout: float | None):
        """Send ``request`` with ``method`` (a stub method); retry as the policy allows."""
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        retryable = rq.prepare(request, self.auto_request_ids)
        wait = self.wait_for_ready if self.wait_for_ready is not None else retryable and self.retry.retries
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline of {budget}s exceeded "
                                       f"after {attempt - 1} attempts")
            try:
                return await method(request, timeout=remaining, wait_for_ready=wait or None)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            if not (retryable and rq.transient(err) and self.retry.more(attempt)):
                raise err
            pause = max(self.retry.backoff(attempt, random.random()), rq.retry_after(err))
            if time.monotonic() + pause >= deadline:
                raise err
            await asyncio.sleep(pause)

    async def wait_ready(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self.channel.channel_ready(), timeout)

    # ------------------------------------------------------------ threads

    async def create_thread(self, thread_id: str = "", metadata: Mapping[str, Any] | None = None, *,
                            if_exists: str = "error", request_id: str = "",
                            timeout: float | None = None) -> pb.Thread:
        req = rq.create_thread_request(self.namespace, thread_id, metadata, if_exists, request_id)
        return (await self._call(self.threads.CreateThread, req, timeout)).thread

    async def get_thread(self, thread_id: str, *, timeout: float | None = None) -> pb.Thread:
        req = pb.GetThreadRequest(namespace=self.namespace, thread_id=thread_id)
        return (await self._call(self.threads.GetThread, req, timeout)).thread

    async def list_threads(self, metadata_filter: Mapping[str, Any] | None = None, *, page_size: int = 0,
                           timeout: float | None = None) -> AsyncIterator[pb.Thread]:
        token = ""
        while True:
            req = rq.list_threads_request(self.namespace, metadata_filter, page_size, token)
            resp = await self._call(self.threads.ListThreads, req, timeout)
            for t in resp.threads:
                yield t
            token = resp.next_page_token
            if not token:
                return

    async def update_thread(self, thread_id: str, set_metadata: Mapping[str, Any] | None = None, *,
                            remove_keys: Iterable[str] = (), replace: bool = False, etag: str = "",
                            request_id: str = "", timeout: float | None = None) -> pb.Thread:
        req = rq.update_thread_request(self.namespace, thread_id, set_metadata, remove_keys, replace, etag,
                                       request_id)
        return (await self._call(self.threads.UpdateThread, req, timeout)).thread

    async def delete_thread(self, thread_id: str, *, allow_missing: bool = False, etag: str = "",
                            request_id: str = "", timeout: float | None = None) -> pb.DeleteThreadResponse:
        req = pb.DeleteThreadRequest(namespace=self.namespace, thread_id=thread_id, allow_missing=allow_missing,
                                     etag=etag, request_id=request_id)
        return await self._call(self.threads.DeleteThread, req, timeout)

    async def copy_thread(self, source_thread_id: str, target_thread_id: str, *,
                          metadata: Mapping[str, Any] | None = None, replace_metadata: bool = False,
                          request_id: str = "", timeout: float | None = None) -> pb.CopyThreadResponse:
        req = rq.copy_thread_request(self.namespace, source_thread_id, target_thread_id, metadata,
                                     replace_metadata, request_id)
        return await self._call(self.threads.CopyThread, req, timeout)

    # ------------------------------------------------------------ checkpoints

    async def put_checkpoint(self, thread_id: str, channels: Mapping[str, Any], *, checkpoint_id: str = "",
                             parent_id: str = "", base_id: str = "", checkpoint_ns: str = "",
                             metadata: Mapping[str, Any] | None = None, extra: Any = None,
                             expected_head_etag: str | None = None, schema_version: int = 0,
                             require_thread: bool = False, request_id: str = "", durability: str | None = None,
                             timeout: float | None = None) -> pb.PutCheckpointResponse:
        req = rq.put_checkpoint_request(self.namespace, thread_id, channels, checkpoint_id=checkpoint_id,
                                        parent_id=parent_id, base_id=base_id, checkpoint_ns=checkpoint_ns,
                                        metadata=metadata, extra=extra, expected_head_etag=expected_head_etag,
                                        schema_version=schema_version, require_thread=require_thread,
                                        request_id=request_id)
        req.durability = rq.durability(durability)
        return await self._call(self.threads.PutCheckpoint, req, timeout)

    async def put_writes(self, thread_id: str, checkpoint_id: str, writes: Iterable[tuple], *,
                         checkpoint_ns: str = "", request_id: str = "", durability: str | None = None,
                         timeout: float | None = None) -> pb.PutWritesResponse:
        req = rq.put_writes_request(self.namespace, thread_id, checkpoint_id, writes, checkpoint_ns, request_id)
        req.durability = rq.durability(durability)
        return await self._call(self.threads.PutWrites, req, timeout)

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str = "", *, checkpoint_ns: str = "",
                             channels: Iterable[str] = (), omit_values: bool = False,
                             known_roots: Mapping[str, bytes] | None = None, include_pending_writes: bool = False,
                             timeout: float | None = None) -> pb.Checkpoint:
        req = rq.get_checkpoint_request(self.namespace, thread_id, checkpoint_id, checkpoint_ns, channels,
                                        omit_values, known_roots, include_pending_writes)
        return (await self._call(self.threads.GetCheckpoint, req, timeout)).checkpoint

    async def get_values(self, thread_id: str, checkpoint_id: str = "", *, checkpoint_ns: str = "",
                         timeout: float | None = None) -> dict[str, Any]:
        """As Client.get_values: with the compiled list decoder, a long list is scanned in the response as
        received (values.response_lists)."""
        if not _lists.NATIVE:
            return checkpoint_values(await self.get_checkpoint(thread_id, checkpoint_id,
                                                               checkpoint_ns=checkpoint_ns, timeout=timeout))
        req = rq.get_checkpoint_request(self.namespace, thread_id, checkpoint_id, checkpoint_ns, (), False, None,
                                        False)
        resp, data = await self._call(self._get_with_wire, req, timeout)
        return checkpoint_values(resp.checkpoint, response_lists(data))

    async def list_checkpoints(self, thread_id: str = "", *, checkpoint_ns: str | None = None,
                               metadata_filter: Mapping[str, Any] | None = None, before: str = "", limit: int = 0,
                               page_size: int = 0, include_values: bool = False,
                               include_pending_writes: bool = False, known_roots: Mapping[str, bytes] | None = None,
                               timeout: float | None = None) -> AsyncIterator[pb.Checkpoint]:
        token = ""
        while True:
            req = rq.list_checkpoints_request(self.namespace, thread_id, checkpoint_ns, metadata_filter, before,
                                              limit, page_size, token, include_values, include_pending_writes,
                                              known_roots)
            resp = await self._call(self.threads.ListCheckpoints, req, timeout)
            for cp in resp.checkpoints:
                yield cp
            token = resp.next_page_token
            if not token:
                return

    async def prune(self, thread_ids: Iterable[str], *, keep_latest: int | None = None,
                    older_than: _dt.datetime | None = None, delete_all: bool = False,
                    checkpoint_ns: str | None = None, history_channels: Iterable[str] = (), request_id: str = "",
                    timeout: float | None = None) -> int:
        req = rq.prune_request(self.namespace, thread_ids, keep_latest, older_than, delete_all, checkpoint_ns,
                               history_channels, request_id)
        return (await self._call(self.threads.PruneCheckpoints, req, timeout)).deleted_checkpoints

    async def delete_for_runs(self, run_ids: Iterable[str], *, request_id: str = "",
                              timeout: float | None = None) -> int:
        req = pb.DeleteCheckpointsForRunsRequest(namespace=self.namespace, run_ids=list(run_ids),
                                                 request_id=request_id)
        return (await self._call(self.threads.DeleteCheckpointsForRuns, req, timeout)).deleted_checkpoints

    async def diff(self, thread_id: str, from_checkpoint_id: str, to_checkpoint_id: str, *,
                   checkpoint_ns: str = "", timeout: float | None = None, read_schema_version: int = 0,
                   response: bool = False):
        """As Client.diff."""
        req = pb.DiffCheckpointsRequest(namespace=self.namespace, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                        from_checkpoint_id=from_checkpoint_id, to_checkpoint_id=to_checkpoint_id,
                                        read_schema_version=read_schema_version)
        resp = await self._call(self.threads.DiffCheckpoints, req, timeout)
        return resp if response else list(resp.changes)

    async def get_channel_history(self, thread_id: str, channels: Iterable[str], checkpoint_id: str = "", *,
                                  checkpoint_ns: str = "", max_depth: int = 0,
                                  known_roots: Mapping[str, bytes] | None = None,
                                  timeout: float | None = None) -> pb.GetChannelHistoryResponse:
        req = rq.channel_history_request(self.namespace, thread_id, channels, checkpoint_id, checkpoint_ns,
                                         max_depth, known_roots)
        return await self._call(self.threads.GetChannelHistory, req, timeout)

    async def batch_write(self, requests: Iterable, *, request_id: str = "",
                    timeout: float | None = None) -> pb.BatchWriteResponse:
        """Apply PutCheckpointRequest / PutWritesRequest messages in order, all or nothing, in one call (the
        ``*_request`` builders of agentstate._requests make them)."""
        return await self._call(self.threads.BatchWrite, rq.batch_write_request(self.namespace, requests, request_id),
                          timeout)

    def write_stream(self, *, window: int = 512, timeout: float | None = None):
        """An :class:`agentstate.streams.AsyncWriteStream` (pipelined puts and writes on one StreamWrites
        call; ``await ws.put_checkpoint(...)`` returns a future of the response). Create it in a coroutine."""
        from .streams import AsyncWriteStream

        return AsyncWriteStream(self, window=window, timeout=timeout)

    # ------------------------------------------------------------ admin

    async def store_stats(self, *, timeout: float | None = None) -> admin_pb2.GetStoreStatsResponse:
        return await self._call(self.admin.GetStoreStats, admin_pb2.GetStoreStatsRequest(), timeout)

    async def collect_garbage(self, *, timeout: float | None = None) -> admin_pb2.CollectGarbageResponse:
        return await self._call(self.admin.CollectGarbage, admin_pb2.CollectGarbageRequest(), timeout)

    async def check_integrity(self, *, timeout: float | None = None) -> admin_pb2.CheckIntegrityResponse:
        return await self._call(self.admin.CheckIntegrity, admin_pb2.CheckIntegrityRequest(), timeout)

    async def backup_store(self, name: str | None = None, *, timeout: float | None = 600.0,
                           ) -> admin_pb2.BackupStoreResponse:
        """An online backup into the sidecar's backup directory, named ``name`` (default: backup-<UTC time>)."""
        request = admin_pb2.BackupStoreRequest(name=name or backup_name())
        return await self._call(self.admin.BackupStore, request, timeout)


__all__ = ["AsyncClient"]
