"""events: the EventService facet of the client (``client.events``).

``watch`` follows a thread's log and resumes by itself: when the stream
breaks (the sidecar restarted, the network hiccupped) it reconnects from the
last sequence number it yielded, so the caller sees every event exactly
once, in order.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Iterator

import grpc

from .errors import from_rpc_error
from .v1 import events_pb2 as epb, events_pb2_grpc

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

#: Status codes after which ``watch(resume=True)`` reconnects.
RESUMABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)


class Events:
    """EventService calls (``client.events``)."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.stub = events_pb2_grpc.EventServiceStub(client.channel)

    def append(self, thread_id: str, events: Iterable[epb.EventInput], *, run_id: str = "", lease_id: str = "",
               request_id: str = "", timeout: float | None = None) -> epb.AppendEventsResponse:
        """AppendEvents (build events with :func:`agentstate.runs.event`)."""
        req = epb.AppendEventsRequest(namespace=self.client.namespace, thread_id=thread_id, events=list(events),
                                      run_id=run_id, lease_id=lease_id, request_id=request_id)
        return self.client._call(self.stub.AppendEvents, req, timeout)

    def list(self, thread_id: str, *, after: int = 0, run_id: str = "", page_size: int = 0,
             timeout: float | None = None) -> Iterator[epb.Event]:
        token = ""
        while True:
            req = epb.ListEventsRequest(namespace=self.client.namespace, thread_id=thread_id, after_sequence=after,
                                        run_id=run_id, page_size=page_size, page_token=token)
            resp = self.client._call(self.stub.ListEvents, req, timeout)
            yield from resp.events
            token = resp.next_page_token
            if not token:
                return

    def watch(self, thread_id: str, *, after: int = 0, run_id: str = "", follow: bool = True,
              resume: bool = True, retry_for: float = 60.0, idle_timeout: float | None = None) -> Iterator[epb.Event]:
        """Stream events after sequence ``after``. With ``resume`` a broken stream is reopened from the
        last yielded sequence for up to ``retry_for`` seconds of failed attempts. ``idle_timeout`` ends the
        iteration (without error) when no event came for that long."""
        last = after
        failing_since: float | None = None
        while True:
            req = epb.WatchEventsRequest(namespace=self.client.namespace, thread_id=thread_id, after_sequence=last,
                                         run_id=run_id, follow=follow)
            call = self.stub.WatchEvents(req, timeout=None)
            try:
                while True:
                    try:
                        item = _next(call, idle_timeout)
                    except StopIteration:
                        return
                    failing_since = None
                    last = item.event.sequence
                    yield item.event
            except grpc.RpcError as e:
                code = e.code() if callable(getattr(e, "code", None)) else None
                if not resume or code not in RESUMABLE:
                    raise from_rpc_error(e) from None
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > retry_for:
                    raise from_rpc_error(e) from None
                time.sleep(0.1)
            finally:
                call.cancel()


def _next(call, idle_timeout: float | None):
    """The stream's next message; StopIteration at its end or after ``idle_timeout`` seconds of silence."""
    if idle_timeout is None:
        return next(call)
    import concurrent.futures as cf  # noqa: PLC0415

    with cf.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(next, call)
        try:
            return fut.result(idle_timeout)
        except cf.TimeoutError:
            call.cancel()
            raise StopIteration from None
