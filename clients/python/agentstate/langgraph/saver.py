"""saver: SidecarSaver and AsyncSidecarSaver, LangGraph checkpointers backed by the sidecar.

    from agentstate.langgraph import SidecarSaver
    graph = builder.compile(checkpointer=SidecarSaver("unix:sidecar-data/sidecar.sock"))

Both classes implement every method of ``BaseCheckpointSaver``, sync and
async, the extended ones included (``delete_for_runs``, ``copy_thread``,
``prune``, ``get_delta_channel_history``). ``SidecarSaver`` reads over a
blocking gRPC channel (its async methods run those reads in a worker
thread); ``AsyncSidecarSaver`` over a grpc.aio channel made in the event
loop that uses it (its sync methods use a blocking channel of their own, so
they work from any thread). How values are mapped and what is sent: see
``_core``.

Durability. Every put and pending write is idempotent, so transient
failures (sidecar restarting, overloaded) are retried with the same content
until the deadline; nothing can be duplicated or reordered by a retry.

* By default a put or put_writes returns once the sidecar has committed it
  (fsync): an accepted checkpoint is never lost, even if the process dies
  right after. LangGraph decides who waits: with ``durability="async"`` (its
  default) it makes these calls from background threads, each put after the
  previous one, so the graph's steps go on while checkpoints travel and
  ``invoke`` returns once all are stored; with ``"sync"`` each step waits for
  its checkpoint; with ``"exit"`` only the end of the run writes. Calls are
  sent from the caller's thread when nothing of the saver is queued.
* ``write_behind=True``: inside a graph run in ``async`` mode, put and
  put_writes return once the request is built and queued in the saver's
  ordered outbox (see ``_writer``), which sends it in batches, in order,
  retrying for ``retry_for`` seconds. Reads of the saver wait for what was
  queued before them (it reads its own writes); ``flush()``, ``close()`` and
  interpreter exit wait for everything; a queued write that cannot be stored
  makes every later call raise ``WriteBehindError``. The price: ``invoke``
  may return before its last checkpoints are stored (another process sees
  them milliseconds later; a crash in that window loses them).

Calls outside a graph run (a direct ``put``) always wait.
"""
from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata,
                                       CheckpointTuple, DeltaChannelHistory)

from .._facet import Done, advance
from .._requests import RetryPolicy
from ..aio import AsyncClient
from ..client import Client
from ..errors import FailedPrecondition, NotFound
from ..v1 import threads_pb2 as pb
from ..values import from_value
from ._core import Core, Known, PendingPut, next_version
from ._serde import SafeSerializer, check_serde
from ._writer import Item, Writer, WriteBehindError

try:  # LangGraph's config keys for the running graph and its durability mode
    from langgraph._internal._constants import CONFIG_KEY_DURABILITY, CONFIG_KEY_RUNTIME
except ImportError:  # pragma: no cover - other LangGraph versions
    CONFIG_KEY_DURABILITY, CONFIG_KEY_RUNTIME = "__pregel_durability", "__pregel_runtime"

#: Retries for the savers' calls: transient failures are retried until the call's deadline.
SAVER_RETRY = RetryPolicy(max_attempts=0, initial_backoff=0.02, max_backoff=0.5)
_MAX_IDS = 1000  # ids per prune / delete-for-runs call (server limit)


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    ids = [str(i) for i in ids]
    return [ids[i:i + _MAX_IDS] for i in range(0, len(ids), _MAX_IDS)]


def _before_id(before: RunnableConfig | None) -> str:
    return (before or {}).get("configurable", {}).get("checkpoint_id") or ""


def _write_behind(config: RunnableConfig) -> bool:
    """Whether a write may return before it is stored: inside a graph run in LangGraph's async mode."""
    conf = config.get("configurable", {})
    return CONFIG_KEY_RUNTIME in conf and conf.get(CONFIG_KEY_DURABILITY, "async") == "async"


def _pregel_loop():
    """The LangGraph loop (SyncPregelLoop / AsyncPregelLoop) whose ``__enter__`` / ``__aenter__`` is
    calling the saver's get_tuple, or None (a call from elsewhere, or a LangGraph that works otherwise)."""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            return None
        if f.f_code.co_name in ("__enter__", "__aenter__"):
            loop = f.f_locals.get("self")
            if loop is not None and isinstance(getattr(loop, "stack", None), (contextlib.ExitStack,
                                                                             contextlib.AsyncExitStack)) \
                    and hasattr(loop, "durability"):
                return loop
        f = f.f_back
    return None


class _SaverBase(BaseCheckpointSaver[str]):
    """What both savers share: serializer, core (mapping and cache), outbox, and the sync methods."""

    def __init__(self, *, namespace: str, serde, allowed_modules, strict, cache_size: int, timeout: float,
                 retry_for: float, write_behind: bool, schema: str = "", schema_version: int = 0,
                 migrations=None) -> None:
        if serde is not None:
            check_serde(serde)
        super().__init__(serde=serde or SafeSerializer(allowed_modules=allowed_modules, strict=strict))
        self.namespace = namespace
        self.timeout = timeout
        self.retry_for = retry_for
        self.write_behind = write_behind
        self._schema = (schema, schema_version, migrations)
        self._core = Core(self.serde, namespace, cache_size, *self._schema)
        self._writer = Writer(self._blocking, namespace, retry_for)
        self._pipelined: dict[int, Any] = {}  # id(runtime) -> runtime of graph runs whose writes are pipelined

    def _blocking(self) -> Client:
        raise NotImplementedError

    def with_allowlist(self, extra_allowlist):
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:  # a copy with a stricter/looser serializer: its own core, the same outbox
            clone._core = Core(clone.serde, self.namespace, self._core.cache_size, *self._schema)
        return clone

    def get_next_version(self, current: int | str | None, channel: None = None) -> int | str:
        return next_version(current)

    # ------------------------------------------------------------ outbox

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every put and write accepted so far is stored (raises WriteBehindError if one failed)."""
        self._writer.flush(timeout)

    def _put_item(self, config, req, pending: PendingPut) -> Item:
        core = self._core

        def replan(client: Client):
            # the sidecar's parent is not what we believed: forget the thread, learn the parent anew and send
            # the put against what it really holds (the channels' bytes as serialized when put was called)
            core.forget([pending.key[0]])
            req2, pending2 = self._plan_put_blocking(client, config, pending.plan, None)
            pending.known = pending2.known
            core.accept(pending2)
            return req2

        item = Item(req, on_done=lambda resp: core.stored(pending, resp), replan=replan,
                    waited=self._waits(config))
        item.direct = self._direct(item)
        return item

    def _plan_put_blocking(self, client: Client, config, plan, base):
        req, pending, unknown = self._core.request_for(plan, base)
        if req is None:
            parent = _get_or_none(lambda: client._call(client.threads.GetCheckpoint, self._core.parent_request(
                config, unknown), self.timeout).checkpoint)
            base = self._core.parent_from(parent, unknown) if parent is not None else _NO_PARENT
            req, pending, _ = self._core.request_for(plan, base)
        return req, pending

    def _base_of(self, config: RunnableConfig) -> Known | None:
        conf = config["configurable"]
        return self._core.known(str(conf["thread_id"]), conf.get("checkpoint_ns", ""),
                                conf.get("checkpoint_id") or "")

    def _writes_item(self, config, writes, task_id, task_path) -> Item:
        item = Item(self._core.writes_request(config, writes, task_id, task_path), waited=self._waits(config))
        item.direct = self._direct(item)
        return item

    def _waits(self, config: RunnableConfig) -> bool:
        """Whether a put / put_writes returns only once stored: not in a graph run in LangGraph's async
        mode whose end waits for them (pipelined), nor with write_behind."""
        if not _write_behind(config):
            return True
        if self.write_behind:
            return False
        return id(config["configurable"].get(CONFIG_KEY_RUNTIME)) not in self._pipelined

    def _start_run(self, config: RunnableConfig) -> bool:
        """Called by get_tuple: when LangGraph's loop is opening a run in async mode, let the run's writes
        be pipelined and make the end of the run wait for them (an exit callback on the loop's stack, which
        runs after LangGraph has waited for its background puts). Returns True for an async loop."""
        loop = _pregel_loop()
        if loop is None or self.write_behind or loop.durability != "async":
            return False
        runtime = config.get("configurable", {}).get(CONFIG_KEY_RUNTIME)
        if runtime is None:
            return False
        key = id(runtime)
        self._pipelined[key] = runtime

        def end_run(exc_type, exc, tb) -> None:
            self._pipelined.pop(key, None)
            try:
                self._writer.flush()
            except WriteBehindError:
                err = self._writer.clear_failure()
                if exc is None:
                    raise WriteBehindError(err) from err

        async def aend_run(exc_type, exc, tb) -> None:
            self._pipelined.pop(key, None)
            await asyncio.wrap_future(self._writer.barrier())
            if self._writer.failure is not None:
                err = self._writer.clear_failure()
                if exc is None:
                    raise WriteBehindError(err) from err

        if isinstance(loop.stack, contextlib.AsyncExitStack):
            loop.stack.push_async_exit(aend_run)
        else:
            loop.stack.push(end_run)
        return True

    def _direct(self, item: Item) -> bool:
        """A request its caller waits for goes out from the caller's thread when nothing is queued:
        concurrent callers then share the sidecar's group commit instead of queueing behind each other."""
        return item.waited and self._writer.idle()

    def _send(self, item: Item, thread_id: str | None = None) -> None:
        """Send a put or writes: directly or through the outbox; wait if the caller must."""
        if item.direct:
            try:
                self._writer.send_now(self._blocking(), item)
            except BaseException:
                if thread_id is not None:
                    self._core.forget([thread_id])  # what was assumed about this put is void
                raise
            return
        fut = self._writer.submit(item)
        if item.waited:
            fut.result()

    # ------------------------------------------------------------ sync methods (blocking client)

    def _call(self, method, request):
        return self._blocking()._call(method, request, self.timeout)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._start_run(config)
        return self._get_tuple(config)

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.flush()
        req, known = self._core.get_request(config)
        cp = _get_or_none(lambda: self._call(self._blocking().threads.GetCheckpoint, req).checkpoint)
        if cp is None:
            return None
        return self._core.tuple_from(cp, known, cache=True, latest=not req.checkpoint_id)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        self.flush()
        plan = self._core.list_plan(config, filter, _before_id(before), limit)
        step = advance(plan)
        while not isinstance(step, Done):
            if isinstance(step, CheckpointTuple):
                yield step
                step = advance(plan)
            else:
                step = advance(plan, self._call(self._blocking().threads.ListCheckpoints, step))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        self._writer.check()
        plan = self._core.plan_put(config, checkpoint, metadata, new_versions)
        req, pending, unknown = self._core.request_for(plan, self._base_of(config))
        if req is None:  # the parent is not known here: ask the sidecar (after what is queued)
            self.flush()
            req, pending = self._plan_put_blocking(self._blocking(), config, plan, None)
        item = self._put_item(config, req, pending)
        out = self._core.accept(pending)
        self._send(item, pending.key[0])
        return out

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._send(self._writes_item(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self.flush()
        self._core.forget([thread_id])
        self._call(self._blocking().threads.DeleteThread,
                   pb.DeleteThreadRequest(namespace=self.namespace, thread_id=str(thread_id), allow_missing=True))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.flush()
        for chunk in _chunks(run_ids):
            self._core.forget()
            self._call(self._blocking().threads.DeleteCheckpointsForRuns,
                       pb.DeleteCheckpointsForRunsRequest(namespace=self.namespace, run_ids=chunk))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.flush()
        req = pb.CopyThreadRequest(namespace=self.namespace, source_thread_id=str(source_thread_id),
                                   target_thread_id=str(target_thread_id))
        try:
            self._call(self._blocking().threads.CopyThread, req)
        except NotFound as e:
            if e.field != "source_thread_id":
                raise  # (no source: nothing to copy)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._core.prune_request([], strategy, ())  # validates the strategy, even for no threads
        self.flush()
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
        self.flush()
        req = self._core.history_request(config, channels)
        resp = _get_or_none(lambda: self._call(self._blocking().threads.GetChannelHistory, req))
        if resp is None:
            return {ch: {"writes": []} for ch in channels}
        return self._core.history_from(req, resp)


class SidecarSaver(_SaverBase):
    """LangGraph checkpointer over the sidecar, blocking gRPC.

    ``target`` is an address (``unix:PATH`` or ``HOST:PORT``) or an existing
    :class:`agentstate.Client` (its namespace is used). ``namespace`` is the
    sidecar tenant namespace. ``serde`` replaces the default serializer,
    LangGraph's JsonPlusSerializer as LangGraph's own savers configure it
    (pickle is refused either way); ``strict`` (default: LangGraph's
    ``LANGGRAPH_STRICT_MSGPACK`` setting) makes it rebuild only LangGraph's
    safe types, the compiled graph's schema types and ``allowed_modules``
    (``(module, class)`` pairs or classes). ``cache_size`` bounds what the saver remembers of recent checkpoints (0:
    nothing; every value is sent whole). ``timeout`` is each call's
    deadline, retries included; ``retry_for`` how long queued writes are
    retried while the sidecar is unreachable. ``write_behind=False`` makes
    every put wait for the sidecar, whatever the durability mode. ``token``
    and ``tls`` go to the client the saver makes (see :class:`agentstate.Client`).

    ``schema`` and ``schema_version`` name the application's state schema and the version this code writes
    (stored with every checkpoint); ``migrations`` (an :class:`agentstate.schemas.Migrations` of that schema)
    turns the channel values of a checkpoint stored at an older version into this version's when it is
    loaded, so a graph whose state changed resumes old threads (docs/lifecycle.md "Hot upgrade").
    """

    def __init__(self, target: str | Client = "unix:sidecar-data/sidecar.sock", *, namespace: str | None = None,
                 serde=None, allowed_modules=(), strict: bool | None = None, cache_size: int = 512,
                 timeout: float = 30.0, retry_for: float = 120.0, write_behind: bool = False,
                 token: str | None = None, tls=None, schema: str = "", schema_version: int = 0,
                 migrations=None) -> None:
        if isinstance(target, Client):
            self.client, self._own = target, False
        else:
            self.client = Client(target, namespace=namespace or "default", timeout=timeout, retry=SAVER_RETRY,
                                 wait_for_ready=True, token=token, tls=tls)
            self._own = True
        super().__init__(namespace=namespace or self.client.namespace, serde=serde,
                         allowed_modules=allowed_modules, strict=strict, cache_size=cache_size, timeout=timeout,
                         retry_for=retry_for, write_behind=write_behind, schema=schema,
                         schema_version=schema_version, migrations=migrations)

    def _blocking(self) -> Client:
        return self.client

    def close(self) -> None:
        """Store what is queued, then close the channel (if the saver made it)."""
        try:
            self._writer.flush(self.retry_for)
        finally:
            self._writer.close()
            if self._own:
                self.client.close()

    def __enter__(self) -> "SidecarSaver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ async: the blocking calls in a worker thread

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._start_run(config)
        return await asyncio.to_thread(self._get_tuple, config)

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


class AsyncSidecarSaver(_SaverBase):
    """LangGraph checkpointer over the sidecar, asyncio gRPC (arguments as for :class:`SidecarSaver`;
    ``target`` may also be an :class:`agentstate.AsyncClient`)."""

    def __init__(self, target: str | AsyncClient | Client = "unix:sidecar-data/sidecar.sock", *,
                 namespace: str | None = None, serde=None, allowed_modules=(), strict: bool | None = None,
                 cache_size: int = 512, timeout: float = 30.0, retry_for: float = 120.0,
                 write_behind: bool = False, token: str | None = None, tls=None, schema: str = "",
                 schema_version: int = 0, migrations=None) -> None:
        self._token, self._tls = token, tls
        self._given_async = target if isinstance(target, AsyncClient) else None
        self._given_sync = target if isinstance(target, Client) else None
        given = self._given_async or self._given_sync
        self.address = given.address if given is not None else target
        self._clients_lock = threading.Lock()
        self._aclient: tuple[asyncio.AbstractEventLoop, AsyncClient] | None = None
        self._sclient: Client | None = self._given_sync
        super().__init__(namespace=namespace or (given.namespace if given is not None else "default"),
                         serde=serde, allowed_modules=allowed_modules, strict=strict, cache_size=cache_size,
                         timeout=timeout, retry_for=retry_for, write_behind=write_behind, schema=schema,
                         schema_version=schema_version, migrations=migrations)

    # A grpc.aio channel belongs to the event loop it was made in: one per loop, made on first use.
    def _async_client(self) -> AsyncClient:
        if self._given_async is not None:
            return self._given_async
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            if self._aclient is None or self._aclient[0] is not loop:
                self._aclient = (loop, AsyncClient(self.address, namespace=self.namespace, timeout=self.timeout,
                                                   retry=SAVER_RETRY, wait_for_ready=True, token=self._token,
                                                   tls=self._tls))
            return self._aclient[1]

    def _blocking(self) -> Client:
        with self._clients_lock:
            if self._sclient is None:
                self._sclient = Client(self.address, namespace=self.namespace, timeout=self.timeout,
                                       retry=SAVER_RETRY, wait_for_ready=True, token=self._token, tls=self._tls)
            return self._sclient

    async def aflush(self) -> None:
        """Async flush(): wait until everything accepted so far is stored."""
        await asyncio.wrap_future(self._writer.barrier())
        self._writer.check()

    async def aclose(self) -> None:
        """Store what is queued, then close the channels the saver made."""
        try:
            await asyncio.wait_for(self.aflush(), self.retry_for)
        finally:
            await asyncio.to_thread(self._writer.close)
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
        return await c._call(getattr(c.threads, method_name), request, self.timeout)

    # ------------------------------------------------------------ async methods

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._start_run(config)
        await self.aflush()
        req, known = self._core.get_request(config)
        try:
            cp = (await self._acall("GetCheckpoint", req)).checkpoint
        except NotFound:
            return None
        return self._core.tuple_from(cp, known, cache=True, latest=not req.checkpoint_id)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        await self.aflush()
        plan = self._core.list_plan(config, filter, _before_id(before), limit)
        step = advance(plan)
        while not isinstance(step, Done):
            if isinstance(step, CheckpointTuple):
                yield step
                step = advance(plan)
            else:
                step = advance(plan, await self._acall("ListCheckpoints", step))

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        self._writer.check()
        plan = self._core.plan_put(config, checkpoint, metadata, new_versions)
        req, pending, unknown = self._core.request_for(plan, self._base_of(config))
        if req is None:  # the parent is not known here: ask the sidecar (after what is queued)
            await self.aflush()
            req, pending = await self._aplan_put(config, plan)
        item = self._put_item(config, req, pending)
        out = self._core.accept(pending)
        if not item.direct:
            fut = self._writer.submit(item)
            if item.waited:
                await asyncio.wrap_future(fut)
            return out
        try:
            try:
                resp = await self._acall("PutCheckpoint", req)
            except FailedPrecondition as e:
                if e.reason != "BASE_MISMATCH":
                    raise
                # the sidecar's parent is not what we believed: forget the thread, learn the parent anew
                self._core.forget([pending.key[0]])
                req, pending = await self._aplan_put(config, plan)
                self._core.accept(pending)
                resp = await self._acall("PutCheckpoint", req)
        except BaseException:
            self._core.forget([pending.key[0]])
            raise
        self._core.stored(pending, resp)
        return out

    async def _aplan_put(self, config, plan):
        """The request for ``plan`` against the parent the sidecar holds (learnt when needed)."""
        req, pending, unknown = self._core.request_for(plan, None)
        if req is None:
            try:
                parent = (await self._acall("GetCheckpoint", self._core.parent_request(config, unknown))).checkpoint
            except NotFound:
                parent = None
            base = self._core.parent_from(parent, unknown) if parent is not None else _NO_PARENT
            req, pending, _ = self._core.request_for(plan, base)
        return req, pending

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        item = self._writes_item(config, writes, task_id, task_path)
        if item.direct:
            await self._acall("PutWrites", item.request)
            return
        fut = self._writer.submit(item)
        if item.waited:
            await asyncio.wrap_future(fut)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.aflush()
        self._core.forget([thread_id])
        await self._acall("DeleteThread", pb.DeleteThreadRequest(namespace=self.namespace,
                                                                 thread_id=str(thread_id), allow_missing=True))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.aflush()
        for chunk in _chunks(run_ids):
            self._core.forget()
            await self._acall("DeleteCheckpointsForRuns",
                              pb.DeleteCheckpointsForRunsRequest(namespace=self.namespace, run_ids=chunk))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.aflush()
        req = pb.CopyThreadRequest(namespace=self.namespace, source_thread_id=str(source_thread_id),
                                   target_thread_id=str(target_thread_id))
        try:
            await self._acall("CopyThread", req)
        except NotFound as e:
            if e.field != "source_thread_id":
                raise

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._core.prune_request([], strategy, ())
        await self.aflush()
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
        await self.aflush()
        req = self._core.history_request(config, channels)
        try:
            resp = await self._acall("GetChannelHistory", req)
        except NotFound:
            return {ch: {"writes": []} for ch in channels}
        return self._core.history_from(req, resp)


def _get_or_none(call):
    try:
        return call()
    except NotFound:
        return None


class _NoParent:
    """Stands for a parent checkpoint the sidecar does not have: every unchanged channel is absent."""

    versions: dict = {}
    roots: dict = {}
    lists: dict = {}
    covered = None


_NO_PARENT = _NoParent()

__all__ = ["SidecarSaver", "AsyncSidecarSaver", "WriteBehindError"]
