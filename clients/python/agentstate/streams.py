"""streams: pipelined writes on one StreamWrites call (``Client.write_stream()``, ``AsyncClient.write_stream()``).

    with client.write_stream() as ws:
        futs = [ws.put_checkpoint("t1", {"messages": Append([m])}, parent_id=prev, checkpoint_id=cid) ...]
        ws.flush()                      # every request sent so far is acknowledged (or failed)
        resp = futs[0].result()         # PutCheckpointResponse, or raises the request's own error

Requests go out without waiting for earlier ones (several to a message when
they queue up) and the sidecar applies them in the order sent, each exactly
as the unary call. Each request gets its own outcome: a future resolving to
the response or raising the :class:`AgentStateError` the unary call would
raise; a failed request does not stop the stream. At most ``window``
requests are unacknowledged at a time (sending waits beyond that).

The stream goes on a connection of its own (``client.stream_connections``),
closed when the stream ends, so it takes none of the streams the sidecar
allows the client's channel (``--max-streams-per-connection``).

When the stream itself breaks (sidecar restarting: UNAVAILABLE), the
unacknowledged requests are sent again, in order, on a new stream, until the
client's timeout has passed: every request is made safe to repeat first (a
put without checkpoint id and any request that is not idempotent by nature
gets a request_id), so a request that was applied before the break is
answered, not applied twice.
"""
from __future__ import annotations

import asyncio
import collections
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

import grpc

from . import _requests as rq
from .errors import AgentStateError, Unavailable, from_rpc_error, _BY_CODE
from .v1 import threads_pb2 as pb, threads_pb2_grpc

DEFAULT_WINDOW = 512
_MAX_PER_MESSAGE = 256
_RESEND = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN)


def error_of(err: pb.WriteError) -> AgentStateError:
    code = next((c for c in grpc.StatusCode if c.value[0] == err.code), grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(code, AgentStateError)(code, err.message, err.reason, dict(err.metadata))


def _item(seq: int, request) -> pb.StreamedWrite:
    item = pb.StreamedWrite(seq=seq)
    if isinstance(request, pb.PutCheckpointRequest):
        item.put_checkpoint.CopyFrom(request)
    elif isinstance(request, pb.PutWritesRequest):
        item.put_writes.CopyFrom(request)
    else:
        raise TypeError(f"a stream carries PutCheckpointRequest and PutWritesRequest, not {type(request).__name__}")
    return item


def _result(ack: pb.WriteAck):
    kind = ack.WhichOneof("result")
    if kind == "error":
        return None, error_of(ack.error)
    return getattr(ack, kind), None


class _Builders:
    """put_checkpoint / put_writes with the client's arguments, returning futures."""

    client: Any

    def put_checkpoint(self, thread_id: str, channels, *, checkpoint_id: str = "", parent_id: str = "",
                       base_id: str = "", checkpoint_ns: str = "", metadata=None, extra: Any = None,
                       expected_head_etag: str | None = None, schema_version: int = 0,
                       require_thread: bool = False, request_id: str = "", durability: str | None = None):
        req = rq.put_checkpoint_request(self.client.namespace, thread_id, channels, checkpoint_id=checkpoint_id,
                                        parent_id=parent_id, base_id=base_id, checkpoint_ns=checkpoint_ns,
                                        metadata=metadata, extra=extra, expected_head_etag=expected_head_etag,
                                        schema_version=schema_version, require_thread=require_thread,
                                        request_id=request_id)
        req.durability = rq.durability(durability)
        return self.send(req)

    def put_writes(self, thread_id: str, checkpoint_id: str, writes, *, checkpoint_ns: str = "",
                   request_id: str = "", durability: str | None = None):
        req = rq.put_writes_request(self.client.namespace, thread_id, checkpoint_id, writes, checkpoint_ns,
                                    request_id)
        req.durability = rq.durability(durability)
        return self.send(req)

    def send(self, request):  # pragma: no cover - overridden
        raise NotImplementedError


class WriteStream(_Builders):
    """Pipelined writes over one StreamWrites call of a sync :class:`agentstate.Client` (thread-safe)."""

    def __init__(self, client, window: int = DEFAULT_WINDOW, timeout: float | None = None) -> None:
        self.client = client
        self.window = threading.BoundedSemaphore(window)
        self.timeout = client.timeout if timeout is None else timeout
        self._lock = threading.Lock()
        self._seq = 0
        self._unacked: collections.OrderedDict[int, tuple[Any, Future]] = collections.OrderedDict()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._broken: BaseException | None = None
        self._channel = client.stream_connections.open()  # a connection of its own, closed with the stream
        self._stub = threads_pb2_grpc.ThreadServiceStub(self._channel)
        self._thread = threading.Thread(target=self._run, name="agentstate-write-stream", daemon=True)
        self._thread.start()

    def send(self, request) -> Future:
        """Queue a PutCheckpointRequest or PutWritesRequest; the future resolves with its response."""
        rq.prepare(request, True)  # safe to send again after a broken stream
        self.window.acquire()
        fut: Future = Future()
        with self._lock:
            if self._closed or self._broken is not None:
                self.window.release()
                raise self._broken or RuntimeError("the write stream is closed")
            self._seq += 1
            seq = self._seq
            self._unacked[seq] = (request, fut)
            self._outbox.put((seq, request))
        return fut

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every request sent so far is acknowledged or failed."""
        with self._lock:
            futs = [f for _, f in self._unacked.values()]
        deadline = None if timeout is None else time.monotonic() + timeout
        for f in futs:
            try:
                f.exception(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - cancelled
                pass

    def close(self, timeout: float | None = None) -> None:
        self.flush(timeout)
        with self._lock:
            self._closed = True
        self._outbox.put(None)
        self._thread.join(5)

    def __enter__(self) -> "WriteStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ the stream thread

    def _requests(self, resend: list):
        pending = list(resend)
        outbox = self._outbox
        while True:
            if not pending:
                first = outbox.get()
                if first is None:
                    return
                pending.append(first)
            while len(pending) < _MAX_PER_MESSAGE:
                try:
                    nxt = outbox.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    yield pb.StreamWritesRequest(writes=[_item(s, r) for s, r in pending])
                    return
                pending.append(nxt)
            msg = pb.StreamWritesRequest(writes=[_item(s, r) for s, r in pending])
            pending = []
            yield msg

    def _run(self) -> None:
        try:
            self._stream()
        finally:
            self.client.stream_connections.release(self._channel)

    def _stream(self) -> None:
        deadline = None
        resend: list = []
        attempt = 0
        while True:
            try:
                call = self._stub.StreamWrites(self._requests(resend),
                                                        wait_for_ready=self.client.wait_for_ready or None)
            except ValueError as e:  # the client's channel was closed
                self._fail_all(Unavailable(grpc.StatusCode.UNAVAILABLE, str(e)))
                return
            try:
                for resp in call:
                    deadline, attempt = None, 0
                    for ack in resp.acks:
                        self._ack(ack)
                return  # the request iterator ended (close) and every ack arrived
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            with self._lock:
                if self._closed and not self._unacked:
                    return
            now = time.monotonic()
            deadline = deadline or now + self.timeout
            attempt += 1
            if err.code not in _RESEND or now >= deadline:
                self._fail_all(err)
                return
            with self._lock:  # a new stream: every unacknowledged request again, in order, then what comes
                resend = [(s, r) for s, (r, _) in self._unacked.items()]
                old, self._outbox = self._outbox, queue.SimpleQueue()
                if self._closed:
                    self._outbox.put(None)
            old.put(None)  # ends the old request iterator should grpc still be reading it
            time.sleep(min(1.0, 0.05 * 2 ** min(attempt, 5)))

    def _ack(self, ack: pb.WriteAck) -> None:
        with self._lock:
            entry = self._unacked.pop(ack.seq, None)
        if entry is None:
            return
        self.window.release()
        value, error = _result(ack)
        if error is None:
            entry[1].set_result(value)
        else:
            entry[1].set_exception(error)

    def _fail_all(self, err: AgentStateError) -> None:
        with self._lock:
            self._broken = err
            entries, self._unacked = list(self._unacked.values()), collections.OrderedDict()
        for _, fut in entries:
            self.window.release()
            if not fut.done():
                fut.set_exception(err)


class AsyncWriteStream(_Builders):
    """Pipelined writes over one StreamWrites call of an :class:`agentstate.AsyncClient` (one event loop)."""

    def __init__(self, client, window: int = DEFAULT_WINDOW, timeout: float | None = None) -> None:
        self.client = client
        self.window = asyncio.Semaphore(window)
        self.timeout = client.timeout if timeout is None else timeout
        self._seq = 0
        self._unacked: collections.OrderedDict[int, tuple[Any, asyncio.Future]] = collections.OrderedDict()
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._broken: BaseException | None = None
        self._closed = False
        self._channel = client.stream_connections.open()  # a connection of its own, closed with the stream
        self._stub = threads_pb2_grpc.ThreadServiceStub(self._channel)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def send(self, request) -> asyncio.Future:
        """Queue a request (waits while the window is full); returns a future of its response."""
        rq.prepare(request, True)
        if self._closed or self._broken is not None:
            raise self._broken or RuntimeError("the write stream is closed")
        await self.window.acquire()
        self._seq += 1
        fut = asyncio.get_running_loop().create_future()
        self._unacked[self._seq] = (request, fut)
        self._outbox.put_nowait((self._seq, request))
        return fut

    async def flush(self) -> None:
        futs = [f for _, f in self._unacked.values()]
        if futs:
            await asyncio.wait(futs)

    async def close(self) -> None:
        await self.flush()
        self._closed = True
        self._outbox.put_nowait(None)
        try:
            await asyncio.wait_for(self._task, 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self._task.cancel()

    async def __aenter__(self) -> "AsyncWriteStream":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _writer(self, call, resend: list) -> None:
        pending = list(resend)
        outbox = self._outbox
        while True:
            if not pending:
                first = await outbox.get()
                if first is None:
                    await call.done_writing()
                    return
                pending.append(first)
            end = False
            while len(pending) < _MAX_PER_MESSAGE and not outbox.empty():
                nxt = outbox.get_nowait()
                if nxt is None:
                    end = True
                    break
                pending.append(nxt)
            await call.write(pb.StreamWritesRequest(writes=[_item(s, r) for s, r in pending]))
            pending = []
            if end:
                await call.done_writing()
                return

    async def _run(self) -> None:
        try:
            await self._stream()
        finally:
            await self.client.stream_connections.arelease(self._channel)

    async def _stream(self) -> None:
        deadline = None
        resend: list = []
        attempt = 0
        while True:
            try:
                call = self._stub.StreamWrites(wait_for_ready=self.client.wait_for_ready or None)
            except (ValueError, RuntimeError) as e:  # the client's channel was closed
                self._broken = Unavailable(grpc.StatusCode.UNAVAILABLE, str(e))
                for _, fut in self._unacked.values():
                    if not fut.done():
                        fut.set_exception(self._broken)
                self._unacked.clear()
                return
            writer = asyncio.ensure_future(self._writer(call, resend))
            try:
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        await writer
                        return
                    deadline, attempt = None, 0
                    for ack in resp.acks:
                        entry = self._unacked.pop(ack.seq, None)
                        if entry is None:
                            continue
                        self.window.release()
                        value, error = _result(ack)
                        if not entry[1].done():
                            if error is None:
                                entry[1].set_result(value)
                            else:
                                entry[1].set_exception(error)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            finally:
                writer.cancel()
            resend = list((s, r) for s, (r, _) in self._unacked.items())
            if self._closed and not resend:
                return
            now = time.monotonic()
            deadline = deadline or now + self.timeout
            attempt += 1
            if err.code not in _RESEND or now >= deadline:
                self._broken = err
                for _, fut in self._unacked.values():
                    self.window.release()
                    if not fut.done():
                        fut.set_exception(err)
                self._unacked.clear()
                return
            self._outbox = asyncio.Queue()  # every unacknowledged request again, in order, then what comes
            if self._closed:
                self._outbox.put_nowait(None)
            await asyncio.sleep(min(1.0, 0.05 * 2 ** min(attempt, 5)))


__all__ = ["WriteStream", "AsyncWriteStream", "error_of", "Unavailable"]
