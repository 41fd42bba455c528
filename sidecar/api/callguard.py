"""callguard: per-connection call limits and the default deadline, around every handler.

``CallGuard.wrap`` is composed into ``service.add_to_server``'s ``wrap`` (inside the metrics, so refused
calls are counted and logged):

- at most ``max_calls`` calls in progress per TCP connection (a gRPC peer ``ipv4:HOST:PORT`` /
  ``ipv6:[HOST]:PORT`` is one connection); one more is refused at once with RESOURCE_EXHAUSTED
  ``TOO_MANY_CALLS``, before any work. Unix-socket clients all have the peer ``unix:`` (gRPC names no
  connection there), so they are not counted here; the HTTP/2 limit of concurrent streams per
  connection (``grpc.max_concurrent_streams``, ``--max-streams-per-connection``, default
  ``DEFAULT_MAX_STREAMS``) bounds them, and TCP ones too: calls beyond it wait in the client instead of
  reaching the server. That is what keeps a flooding connection's calls from queueing ahead of another
  client's: gRPC accepts the calls of all connections one at a time, in arrival order, before any handler
  (or the fair turns) sees them, so without the limit another client's call waited behind every call the
  flood had sent (docs/security.md "Fairness"). gRPC's stream "overload protection" is turned off with
  it (server.py): with it on, gRPC refused a stream a client opened just as another ended (RST_STREAM
  REFUSED_STREAM, UNAVAILABLE to a bare stub; 63 of 400 health checks in bursts of 40 with a limit of 4, 0 of 400 with it off).
- a unary call whose client sent no deadline gets ``default_deadline`` seconds: past it the handler
  is cancelled and the call ends DEADLINE_EXCEEDED (a write it had already submitted may still be
  applied, as with any deadline: retry with the same request_id). Streaming calls (watches, uploads,
  StreamWrites) are left alone: they are long by design.
- fair turns (api/fairness.py): a unary call's handler runs only when its client has a turn (at most
  ``per_client`` of one client, ``capacity`` of all, freed turns handed round-robin across clients);
- at most ``max_calls_per_client`` calls (unary and streaming) in progress per client over all its
  connections (a client: its token or client certificate when credentials are checked, else its TCP
  connection; unix-socket calls without a credential are not counted); one more is refused at once
  TOO_MANY_CALLS with metadata ``scope: client`` (the per-connection refusal says ``scope: connection``).
"""
from __future__ import annotations

import asyncio
from typing import Callable

import grpc

from ..errors import ApiError
from . import fairness
from .service import abort

DEFAULT_DEADLINE_SECONDS = 330.0  # longer than the longest wait a request may ask for (a claim: 300 s)
DEFAULT_MAX_CALLS = 256
DEFAULT_MAX_STREAMS = 3  # HTTP/2 streams per connection: a client's fair turns (2) and one call ready for the next; 0: gRPC's default


#: unary RPCs that may wait by request (a ``wait_timeout``): not admitted through the fair turns then
WAITING_RPCS = frozenset({"ClaimRun", "ClaimCompaction"})
#: services whose calls are not admitted through the fair turns (long admin jobs, admin role only)
UNQUEUED_SERVICES = frozenset({"AdminService"})


class CallGuard:
    def __init__(self, max_calls: int = DEFAULT_MAX_CALLS,
                 default_deadline: float | None = DEFAULT_DEADLINE_SECONDS, *,
                 fair: fairness.FairQueue | None = None, authorizer=None,
                 max_calls_per_client: int = 0) -> None:
        self.max_calls = max_calls  # 0: no limit
        self.default_deadline = default_deadline or None
        self.in_progress: dict[str, int] = {}  # TCP peer -> calls in progress
        self.refused = 0
        self.fair = fair  # None: no fair turns
        self.authorizer = authorizer  # api/auth.Authorizer: a client is its credential
        self.max_calls_per_client = max_calls_per_client  # 0: no limit
        self.client_calls: dict[object, int] = {}  # client (client_of) -> calls in progress
        self.refused_clients = 0

    def client_of(self, context):
        """Who a call is from (api/fairness.py "Who is a client"): the credential's principal when the
        sidecar checks credentials (a call with none or an invalid one: its connection; it is refused
        right after), else the TCP connection, else ``unix:``."""
        if self.authorizer is not None:
            try:
                return self.authorizer.authenticate(context)
            except ApiError:
                pass
        peer = context.peer()
        return peer if peer.startswith(("ipv4:", "ipv6:")) else fairness.UNIX

    def _enter(self, context) -> str | None:
        if not self.max_calls:
            return None
        peer = context.peer()
        if not peer.startswith(("ipv4:", "ipv6:")):
            return None
        n = self.in_progress.get(peer, 0)
        if n >= self.max_calls:
            self.refused += 1
            raise ApiError("TOO_MANY_CALLS", f"this connection already has {n} calls in progress (at most "
                           f"{self.max_calls}); retry when some have ended", limit=self.max_calls,
                           scope="connection")
        self.in_progress[peer] = n + 1
        return peer

    def _leave(self, peer: str | None) -> None:
        if peer is not None:
            n = self.in_progress[peer] - 1
            if n:
                self.in_progress[peer] = n
            else:
                del self.in_progress[peer]

    def _enter_client(self, key) -> object | None:
        """Count a call of client ``key`` (None when not counted: no limit, or an unidentified unix-socket
        client); TOO_MANY_CALLS when it has ``max_calls_per_client`` in progress over all its connections."""
        if not self.max_calls_per_client or key == fairness.UNIX:
            return None
        n = self.client_calls.get(key, 0)
        if n >= self.max_calls_per_client:
            self.refused_clients += 1
            raise ApiError("TOO_MANY_CALLS", f"this client already has {n} calls in progress over all its "
                           f"connections (at most {self.max_calls_per_client}); retry when some have ended",
                           limit=self.max_calls_per_client, scope="client")
        self.client_calls[key] = n + 1
        return key

    def _leave_client(self, key) -> None:
        if key is not None:
            n = self.client_calls[key] - 1
            if n:
                self.client_calls[key] = n
            else:
                del self.client_calls[key]

    def _enter_all(self, context, queued: bool):
        """(peer, client, client key) of a new call, counted; ApiError when a limit refuses it."""
        peer = self._enter(context)
        key = self.client_of(context) if queued or self.max_calls_per_client else None
        try:
            counted = self._enter_client(key) if key is not None else None
        except ApiError:
            self._leave(peer)
            raise
        return peer, counted, key

    def wrap(self, service: str, method, behavior: Callable) -> Callable:
        """``behavior`` of one RPC behind the per-connection and per-client limits, unary ones behind the
        fair turns (api/fairness.py) and the default deadline."""
        if method.server_streaming:
            async def streaming(request, context):
                try:
                    peer, counted, _ = self._enter_all(context, False)
                except ApiError as e:
                    await abort(context, e)
                    return
                try:
                    async for item in behavior(request, context):
                        yield item
                finally:
                    self._leave_client(counted)
                    self._leave(peer)

            return streaming

        deadline = None if method.client_streaming else self.default_deadline
        fair = None if method.client_streaming or service in UNQUEUED_SERVICES else self.fair
        waits = method.name in WAITING_RPCS

        async def unary(request, context):
            queued = fair is not None and not (waits and _asks_to_wait(request))
            try:
                peer, counted, key = self._enter_all(context, queued)
            except ApiError as e:
                await abort(context, e)
                return None
            turn = False
            try:
                if queued:
                    if not fair.try_acquire(key):
                        await fair.acquire(key)
                    turn = True
                if deadline is None or context.time_remaining() is not None:
                    return await behavior(request, context)
                try:
                    return await asyncio.wait_for(behavior(request, context), deadline)
                except asyncio.TimeoutError:
                    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                        f"no deadline was sent; the server's default of {deadline:g} s passed")
            finally:
                if turn:
                    fair.release(key)
                self._leave_client(counted)
                self._leave(peer)

        return unary


def _asks_to_wait(request) -> bool:
    """A ClaimRun/ClaimCompaction request with a wait_timeout (a body that does not parse: no)."""
    try:
        return request.HasField("wait_timeout") and (request.wait_timeout.seconds > 0
                                                      or request.wait_timeout.nanos > 0)
    except (AttributeError, ValueError):
        return False
