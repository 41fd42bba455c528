"""events: the EventService facet of the client (``client.events``; ``AsyncClient.events`` has the same
calls as coroutines, ``list`` and ``watch`` as async iterators).

``watch`` with ``follow`` (the default) goes on a connection of its own
(``client.stream_connections``), closed when the iteration ends, so an open
watch takes none of the client's channel's streams. It follows a thread's log and resumes by itself: when the stream
breaks (the sidecar restarted, the network hiccupped) it reconnects from the
last sequence number it yielded, so the caller sees every event exactly
once, in order.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Iterable, Iterator

import grpc

from ._facet import AsyncFacet, Call, SyncFacet, listing, pages, unary
from .errors import from_rpc_error
from .v1 import events_pb2 as epb, events_pb2_grpc

#: Status codes after which ``watch(resume=True)`` reconnects.
RESUMABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)


class WatchCursor:
    """Where a watch is (the last yielded sequence) and whether its broken stream may be reopened."""

    def __init__(self, namespace: str, thread_id: str, after: int, run_id: str, follow: bool, resume: bool,
                 retry_for: float) -> None:
        self.namespace, self.thread_id, self.run_id, self.follow = namespace, thread_id, run_id, follow
        self.last = after
        self.resume, self.retry_for = resume, retry_for
        self.failing_since: float | None = None

    def request(self) -> epb.WatchEventsRequest:
        return epb.WatchEventsRequest(namespace=self.namespace, thread_id=self.thread_id, after_sequence=self.last,
                                      run_id=self.run_id, follow=self.follow)

    def seen(self, item: epb.WatchEventsResponse) -> epb.Event:
        self.failing_since = None
        self.last = item.event.sequence
        return item.event

    def pause_after(self, e: grpc.RpcError) -> float:
        """Seconds to wait before reopening the stream after ``e``; raises it when it may not be reopened."""
        code = e.code() if callable(getattr(e, "code", None)) else None
        if not self.resume or code not in RESUMABLE:
            raise from_rpc_error(e) from None
        now = time.monotonic()
        self.failing_since = self.failing_since or now
        if now - self.failing_since > self.retry_for:
            raise from_rpc_error(e) from None
        return 0.1


class EventCalls:
    """The EventService calls, written once (see :mod:`agentstate._facet`) for :class:`Events` and
    :class:`AsyncEvents`; ``watch`` is each one's own."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = events_pb2_grpc.EventServiceStub(client.channel)

    @unary
    def append(self, thread_id: str, events: Iterable[epb.EventInput], *, run_id: str = "", lease_id: str = "",
               request_id: str = "", timeout: float | None = None) -> epb.AppendEventsResponse:
        """AppendEvents (build events with :func:`agentstate.runs.event`)."""
        req = epb.AppendEventsRequest(namespace=self.client.namespace, thread_id=thread_id, events=list(events),
                                      run_id=run_id, lease_id=lease_id, request_id=request_id)
        return (yield Call(self.stub.AppendEvents, req, timeout))

    @listing
    def list(self, thread_id: str, *, after: int = 0, run_id: str = "", page_size: int = 0,
             timeout: float | None = None):
        """The stored events after sequence ``after`` (Iterator / AsyncIterator of Event)."""
        return pages(self.stub.ListEvents, lambda token: epb.ListEventsRequest(
            namespace=self.client.namespace, thread_id=thread_id, after_sequence=after, run_id=run_id,
            page_size=page_size, page_token=token), "events", timeout)

    def _cursor(self, thread_id: str, after: int, run_id: str, follow: bool, resume: bool,
                retry_for: float) -> WatchCursor:
        return WatchCursor(self.client.namespace, thread_id, after, run_id, follow, resume, retry_for)


class Events(EventCalls, SyncFacet):
    """EventService calls (``client.events``)."""

    def watch(self, thread_id: str, *, after: int = 0, run_id: str = "", follow: bool = True,
              resume: bool = True, retry_for: float = 60.0, idle_timeout: float | None = None) -> Iterator[epb.Event]:
        """Stream events after sequence ``after``. With ``resume`` a broken stream is reopened from the
        last yielded sequence for up to ``retry_for`` seconds of failed attempts. ``idle_timeout`` ends the
        iteration (without error) when no event came for that long."""
        cursor = self._cursor(thread_id, after, run_id, follow, resume, retry_for)
        conns = self.client.stream_connections
        channel = conns.open() if follow else self.client.channel  # a follow watch: a connection of its own
        try:
            stub = events_pb2_grpc.EventServiceStub(channel)
            while True:
                call = stub.WatchEvents(cursor.request(), timeout=None)
                try:
                    while (item := _next(call, idle_timeout)) is not None:
                        yield cursor.seen(item)
                    return
                except grpc.RpcError as e:
                    time.sleep(cursor.pause_after(e))
                finally:
                    call.cancel()
        finally:
            conns.release(channel)


class AsyncEvents(EventCalls, AsyncFacet):
    """EventService calls of the asyncio client (``async_client.events``)."""

    async def watch(self, thread_id: str, *, after: int = 0, run_id: str = "", follow: bool = True,
                    resume: bool = True, retry_for: float = 60.0,
                    idle_timeout: float | None = None) -> AsyncIterator[epb.Event]:
        """As :meth:`Events.watch`, an async iterator."""
        cursor = self._cursor(thread_id, after, run_id, follow, resume, retry_for)
        conns = self.client.stream_connections
        channel = conns.open() if follow else self.client.channel  # a follow watch: a connection of its own
        try:
            stub = events_pb2_grpc.EventServiceStub(channel)
            while True:
                call = stub.WatchEvents(cursor.request(), timeout=None)
                try:
                    while (item := await _read(call, idle_timeout)) is not None:
                        yield cursor.seen(item)
                    return
                except grpc.RpcError as e:
                    await asyncio.sleep(cursor.pause_after(e))
                finally:
                    call.cancel()
        finally:
            await conns.arelease(channel)


def _next(call, idle_timeout: float | None):
    """The stream's next message; None at its end or after ``idle_timeout`` seconds of silence."""
    if idle_timeout is None:
        return next(call, None)
    import concurrent.futures as cf  # noqa: PLC0415

    with cf.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(next, call, None)
        try:
            return fut.result(idle_timeout)
        except cf.TimeoutError:
            call.cancel()
            return None


async def _read(call, idle_timeout: float | None):
    """The async stream's next message; None at its end or after ``idle_timeout`` seconds of silence."""
    try:
        message = await asyncio.wait_for(call.read(), idle_timeout)
    except asyncio.TimeoutError:
        return None
    return None if message is grpc.aio.EOF else message
