"""saver: SidecarSaver and AsyncSidecarSaver, LangGraph checkpointers backed by the sidecar.

    from agentstate.langgraph import SidecarSaver
    graph = builder.compile(checkpointer=SidecarSaver("unix:sidecar-data/sidecar.sock"))

Both classes implement every method of ``BaseCheckpointSaver``, sync and
async, the extended ones included (``delete_for_runs``, ``copy_thread``,
``prune``, ``get_delta_channel_history``). ``SidecarSaver`` talks over a
blocking gRPC channel (its async methods run it in a worker thread);
``AsyncSidecarSaver`` over a grpc.aio channel (its sync methods use a
blocking channel of their own, so they work from any thread). How values
are mapped and what is sent: see ``_core``.

Durability. A put or put_writes returns only after the sidecar committed it
(fsync); a transient failure (sidecar restarting, overloaded) is retried with
the same content until the call's ``timeout`` — every request the savers send
is idempotent, so a retry can neither duplicate nor reorder anything.
LangGraph decides when to wait: with ``durability="sync"`` it waits for each
put before the next step, with ``"async"`` it runs puts in the background in
order (each put waits for the previous one) while the graph goes on, with
``"exit"`` it puts once at the end. Nothing in the savers blocks the graph
beyond the call LangGraph makes, and nothing is held back or batched: what a
put returned is stored.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata,
                                       CheckpointTuple, DeltaChannelHistory)

from .._requests import RetryPolicy
from ..aio import AsyncClient
from ..client import Client
from ..errors import FailedPrecondition, NotFound
from ..v1 import threads_pb2 as pb
from ..values import from_value
from ._core import Core, next_version
from ._serde import SafeSerializer, check_serde

#: Retries for the savers' calls: transient failures are retried until the call's deadline.
SAVER_RETRY = RetryPolicy(max_attempts=0, initial_backoff=0.02, max_backoff=0.5)
_MAX_IDS = 1000  # ids per prune / delete-for-runs call (server limit)


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    ids = [str(i) for i in ids]
    return [ids[i:i + _MAX_IDS] for i in range(0, len(ids), _MAX_IDS)]


def _before_id(before: RunnableConfig | None) -> str:
    return (before or {}).get("configurable", {}).get("checkpoint_id") or ""


class _SaverBase(BaseCheckpointSaver[str]):
    def __init__(self, *, namespace: str, serde, allowed_modules, cache_size: int, timeout: float) -> None:
        if serde is not None:
            check_serde(serde)
        super().__init__(serde=serde or SafeSerializer(allowed_modules=allowed_modules))
        self.namespace = namespace
        self.timeout = timeout
        self._core = Core(self.serde, namespace, cache_size)

    def with_allowlist(self, extra_allowlist):
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:  # a shallow copy with a new serializer: give it a core of its own
            clone._core = Core(clone.serde, self.namespace, self._core.cache_size)
        return clone

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)

    def _config_filter(self, config: RunnableConfig | None, limit: int | None):
        """(exact checkpoint id wanted or "", limit to ask the server for)."""
        wanted = (config or {}).get("configurable", {}).get("checkpoint_id") or ""
        return wanted, 0 if wanted or not limit else limit


class _SyncMethods:
    """The sync methods, over a blocking client (``_blocking()``); shared by both savers."""

    _core: Core
    namespace: str
    timeout: float

    def _blocking(self) -> Client:
        raise NotImplementedError

    def _call(self, method, request):
        return self._blocking()._call(method, request, self.timeout)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        req, known = self._core.get_request(config)
        try:
            cp = self._call(self._blocking().threads.GetCheckpoint, req).checkpoint
        except NotFound:
            return None
        return self._core.tuple_from(cp, known, cache=True, latest=not req.checkpoint_id)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        wanted, server_limit = self._config_filter(config, limit)
        left = limit if limit else None
        token = ""
        while True:
            req, known = self._core.list_request(config, filter, _before_id(before), server_limit, token)
            resp = self._call(self._blocking().threads.ListCheckpoints, req)
            for cp in resp.checkpoints:
                if wanted and cp.checkpoint_id != wanted:
                    continue
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield self._core.tuple_from(cp, known, cache=False, latest=False)
            token = resp.next_page_token
            if not token or (left is not None and left <= 0):
                return

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        base = self._core.known(str(conf["thread_id"]), conf.get("checkpoint_ns", ""),
                                conf.get("checkpoint_id") or "")
        for attempt in range(2):
            req, pending, unknown = self._core.put_request(config, checkpoint, metadata, new_versions, base)
            if req is None:
                try:
                    parent = self._call(self._blocking().threads.GetCheckpoint,
                                        self._core.parent_request(config, unknown)).checkpoint
                except NotFound:
                    parent = None
                base = self._core.parent_from(parent, unknown) if parent is not None else _NO_PARENT
                req, pending, _ = self._core.put_request(config, checkpoint, metadata, new_versions, base)
            try:
                resp = self._call(self._blocking().threads.PutCheckpoint, req)
            except FailedPrecondition as e:
                if e.reason != "BASE_MISMATCH" or attempt:
                    raise
                self._core.forget([conf["thread_id"]])  # what we knew of the parent is stale
                base = None
                continue
            return self._core.after_put(pending, resp)
        raise AssertionError("unreachable")

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._call(self._blocking().threads.PutWrites, self._core.writes_request(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._core.forget([thread_id])
        self._call(self._blocking().threads.DeleteThread,
                   pb.DeleteThreadRequest(namespace=self.namespace, thread_id=str(thread_id), allow_missing=True))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        for chunk in _chunks(run_ids):
            self._call(self._blocking().threads.DeleteCheckpointsForRuns,
                       pb.DeleteCheckpointsForRunsRequest(namespace=self.namespace, run_ids=chunk))
            self._core.forget()

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        req = pb.CopyThreadRequest(namespace=self.namespace, source_thread_id=str(source_thread_id),
                                   target_thread_id=str(target_thread_id))
        try:
            self._call(self._blocking().threads.CopyThread, req)
        except NotFound as e:
            if e.field != "source_thread_id":
                raise  # nothing to copy from: nothing to do

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._core.prune_request([], strategy, ())  # validates the strategy even for no threads
        for chunk in _chunks(thread_ids):
            history: set[str] = set()
            if strategy == "keep_latest":
                for tid in chunk:
                    history |= self._delta_channels(tid)
            self._core.forget(chunk)
            self._call(self._blocking().threads.PruneCheckpoints, self._core.prune_request(chunk, strategy, history))

    def _delta_channels(self, thread_id: str) -> set[str]:
        """DeltaChannels the latest checkpoint of each checkpoint namespace rebuilds from its ancestors."""
        seen: set[str] = set()
        out: set[str] = set()
        for cp in self._blocking().list_checkpoints(thread_id, page_size=1000, timeout=self.timeout):
            if cp.checkpoint_ns not in seen:
                seen.add(cp.checkpoint_ns)
                out |= self._core.delta_channels_of(
                    {k: self._core.from_structured(from_value(v)) for k, v in cp.metadata.items()})
        return out

    def get_delta_channel_history(self, *, config: RunnableConfig,
                                  channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        req = self._core.history_request(config, channels)
        try:
            resp = self._call(self._blocking().threads.GetChannelHistory, req)
        except NotFound:
            return {ch: {"writes": []} for ch in channels}
        return self._core.history_from(req, resp)


class SidecarSaver(_SyncMethods, _SaverBase):
    """LangGraph checkpointer over the sidecar, blocking gRPC.

    ``target`` is an address (``unix:PATH`` or ``HOST:PORT``) or an existing
    :class:`agentstate.Client` (its namespace is used). ``namespace`` is the
    sidecar tenant namespace. ``serde`` replaces the default strict
    serializer (pickle is refused either way); ``allowed_modules`` extends the
    default one's allow-list. ``cache_size`` bounds what the saver remembers
    of recent checkpoints (0: nothing; every value sent whole). ``timeout``
    is each call's deadline, retries included.
    """

    def __init__(self, target: str | Client = "unix:sidecar-data/sidecar.sock", *, namespace: str | None = None,
                 serde=None, allowed_modules=(), cache_size: int = 512, timeout: float = 30.0) -> None:
        if isinstance(target, Client):
            self.client, self._own = target, False
        else:
            self.client = Client(target, namespace=namespace or "default", timeout=timeout, retry=SAVER_RETRY,
                                 wait_for_ready=True)
            self._own = True
        super().__init__(namespace=namespace or self.client.namespace, serde=serde,
                         allowed_modules=allowed_modules, cache_size=cache_size, timeout=timeout)

    def close(self) -> None:
        if self._own:
            self.client.close()

    def __enter__(self) -> "SidecarSaver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _blocking(self) -> Client:
        return self.client

    # ------------------------------------------------------------ async (blocking calls in a worker thread)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        it = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        while True:
            item = await asyncio.to_thread(next, it, done)
            if item is done:
                return
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(self.get_delta_channel_history, config=config, channels=channels)


class AsyncSidecarSaver(_SyncMethods, _SaverBase):
    """LangGraph checkpointer over the sidecar, asyncio gRPC (see :class:`SidecarSaver` for the arguments;
    ``target`` may also be an :class:`agentstate.AsyncClient`)."""

    def __init__(self, target: str | AsyncClient | Client = "unix:sidecar-data/sidecar.sock", *,
                 namespace: str | None = None, serde=None, allowed_modules=(), cache_size: int = 512,
                 timeout: float = 30.0) -> None:
        self._given_async = target if isinstance(target, AsyncClient) else None
        self._given_sync = target if isinstance(target, Client) else None
        given = self._given_async or self._given_sync
        self.address = given.address if given is not None else target
        ns = namespace or (given.namespace if given is not None else "default")
        super().__init__(namespace=ns, serde=serde, allowed_modules=allowed_modules, cache_size=cache_size,
                         timeout=timeout)
        self._clients_lock = threading.Lock()
        self._aclient: tuple[asyncio.AbstractEventLoop, AsyncClient] | None = None
        self._sclient: Client | None = self._given_sync

    # A grpc.aio channel belongs to the event loop it was made in: one per loop, made on first use.
    def _async_client(self) -> AsyncClient:
        if self._given_async is not None:
            return self._given_async
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            if self._aclient is None or self._aclient[0] is not loop:
                self._aclient = (loop, AsyncClient(self.address, namespace=self.namespace, timeout=self.timeout,
                                                   retry=SAVER_RETRY, wait_for_ready=True))
            return self._aclient[1]

    def _blocking(self) -> Client:
        with self._clients_lock:
            if self._sclient is None:
                self._sclient = Client(self.address, namespace=self.namespace, timeout=self.timeout,
                                       retry=SAVER_RETRY, wait_for_ready=True)
            return self._sclient

    async def aclose(self) -> None:
        with self._clients_lock:
            mine, self._aclient = self._aclient, None
            sync, self._sclient = self._sclient, self._given_sync
        if mine is not None and mine[0] is asyncio.get_running_loop():
            await mine[1].close()
        if sync is not None and sync is not self._given_sync:
            sync.close()

    async def __aenter__(self) -> "AsyncSidecarSaver":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _acall(self, method_name: str, request):
        c = self._async_client()
        stub = c.threads if method_name != "admin" else c.admin
        return await c._call(getattr(stub, method_name), request, self.timeout)

    # ------------------------------------------------------------ async

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        req, known = self._core.get_request(config)
        try:
            cp = (await self._acall("GetCheckpoint", req)).checkpoint
        except NotFound:
            return None
        return self._core.tuple_from(cp, known, cache=True, latest=not req.checkpoint_id)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        wanted, server_limit = self._config_filter(config, limit)
        left = limit if limit else None
        token = ""
        while True:
            req, known = self._core.list_request(config, filter, _before_id(before), server_limit, token)
            resp = await self._acall("ListCheckpoints", req)
            for cp in resp.checkpoints:
                if wanted and cp.checkpoint_id != wanted:
                    continue
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield self._core.tuple_from(cp, known, cache=False, latest=False)
            token = resp.next_page_token
            if not token or (left is not None and left <= 0):
                return

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        base = self._core.known(str(conf["thread_id"]), conf.get("checkpoint_ns", ""),
                                conf.get("checkpoint_id") or "")
        for attempt in range(2):
            req, pending, unknown = self._core.put_request(config, checkpoint, metadata, new_versions, base)
            if req is None:
                try:
                    parent = (await self._acall("GetCheckpoint", self._core.parent_request(config, unknown))).checkpoint
                except NotFound:
                    parent = None
                base = self._core.parent_from(parent, unknown) if parent is not None else _NO_PARENT
                req, pending, _ = self._core.put_request(config, checkpoint, metadata, new_versions, base)
            try:
                resp = await self._acall("PutCheckpoint", req)
            except FailedPrecondition as e:
                if e.reason != "BASE_MISMATCH" or attempt:
                    raise
                self._core.forget([conf["thread_id"]])
                base = None
                continue
            return self._core.after_put(pending, resp)
        raise AssertionError("unreachable")

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self._acall("PutWrites", self._core.writes_request(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        self._core.forget([thread_id])
        await self._acall("DeleteThread", pb.DeleteThreadRequest(namespace=self.namespace, thread_id=str(thread_id),
                                                                allow_missing=True))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        for chunk in _chunks(run_ids):
            await self._acall("DeleteCheckpointsForRuns",
                             pb.DeleteCheckpointsForRunsRequest(namespace=self.namespace, run_ids=chunk))
            self._core.forget()

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        req = pb.CopyThreadRequest(namespace=self.namespace, source_thread_id=str(source_thread_id),
                                   target_thread_id=str(target_thread_id))
        try:
            await self._acall("CopyThread", req)
        except NotFound as e:
            if e.field != "source_thread_id":
                raise

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._core.prune_request([], strategy, ())
        for chunk in _chunks(thread_ids):
            history: set[str] = set()
            if strategy == "keep_latest":
                for tid in chunk:
                    history |= await self._adelta_channels(tid)
            self._core.forget(chunk)
            await self._acall("PruneCheckpoints", self._core.prune_request(chunk, strategy, history))

    async def _adelta_channels(self, thread_id: str) -> set[str]:
        seen: set[str] = set()
        out: set[str] = set()
        async for cp in self._async_client().list_checkpoints(thread_id, page_size=1000, timeout=self.timeout):
            if cp.checkpoint_ns not in seen:
                seen.add(cp.checkpoint_ns)
                out |= self._core.delta_channels_of(
                    {k: self._core.from_structured(from_value(v)) for k, v in cp.metadata.items()})
        return out

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        req = self._core.history_request(config, channels)
        try:
            resp = await self._acall("GetChannelHistory", req)
        except NotFound:
            return {ch: {"writes": []} for ch in channels}
        return self._core.history_from(req, resp)


class _NoParent:
    """Stands for a parent checkpoint the sidecar does not have: every unchanged channel is absent."""

    versions: dict = {}
    roots: dict = {}
    lists: dict = {}
    covered = None


_NO_PARENT = _NoParent()


__all__ = ["SidecarSaver", "AsyncSidecarSaver"]
