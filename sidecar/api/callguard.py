"""callguard: per-connection call limits and the default deadline, around every handler.

``CallGuard.wrap`` is composed into ``service.add_to_server``'s ``wrap`` (inside the metrics, so refused
calls are counted and logged):

- at most ``max_calls`` calls in progress per TCP connection (a gRPC peer ``ipv4:HOST:PORT`` /
  ``ipv6:[HOST]:PORT`` is one connection); one more is refused at once with RESOURCE_EXHAUSTED
  ``TOO_MANY_CALLS``, before any work. Unix-socket clients all have the peer ``unix:`` (gRPC names no
  connection there), so they are not counted here; the HTTP/2 limit of concurrent streams per
  connection (``grpc.max_concurrent_streams``, ``--max-streams-per-connection``) can bound them, and TCP
  ones too: calls beyond it wait in the client instead of reaching the server (it bounds how many of a
  flooding connection's calls are ahead of another's; fairness within 3x is still not met:
  docs/security.md "Limits"). It is off by default: with it
  a gRPC server refuses a stream a client opened just as another ended (RST_STREAM REFUSED_STREAM,
  UNAVAILABLE to the client; this repository's clients retry it, a bare stub fails), which a burst of
  40 calls on one channel hit in tests/test_errors.py. (Making the calls beyond a limit wait in the
  server instead did not help: measured x31.)
- a unary call whose client sent no deadline gets ``default_deadline`` seconds: past it the handler
  is cancelled and the call ends DEADLINE_EXCEEDED (a write it had already submitted may still be
  applied, as with any deadline: retry with the same request_id). Streaming calls (watches, uploads,
  StreamWrites) are left alone: they are long by design.
"""
from __future__ import annotations

import asyncio
from typing import Callable

import grpc

from ..errors import ApiError
from .service import abort

DEFAULT_DEADLINE_SECONDS = 330.0  # longer than the longest wait a request may ask for (a claim: 300 s)
DEFAULT_MAX_CALLS = 256
DEFAULT_MAX_STREAMS = 0  # HTTP/2 streams per connection: 0 leaves gRPC's default (see the module doc)


class CallGuard:
    def __init__(self, max_calls: int = DEFAULT_MAX_CALLS,
                 default_deadline: float | None = DEFAULT_DEADLINE_SECONDS) -> None:
        self.max_calls = max_calls  # 0: no limit
        self.default_deadline = default_deadline or None
        self.in_progress: dict[str, int] = {}  # TCP peer -> calls in progress
        self.refused = 0

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
                           f"{self.max_calls}); retry when some have ended", limit=self.max_calls)
        self.in_progress[peer] = n + 1
        return peer

    def _leave(self, peer: str | None) -> None:
        if peer is not None:
            n = self.in_progress[peer] - 1
            if n:
                self.in_progress[peer] = n
            else:
                del self.in_progress[peer]

    def wrap(self, service: str, method, behavior: Callable) -> Callable:
        """``behavior`` of one RPC behind the per-connection limit (and, when unary, the default deadline)."""
        if method.server_streaming:
            async def streaming(request, context):
                try:
                    peer = self._enter(context)
                except ApiError as e:
                    await abort(context, e)
                    return
                try:
                    async for item in behavior(request, context):
                        yield item
                finally:
                    self._leave(peer)

            return streaming

        deadline = None if method.client_streaming else self.default_deadline

        async def unary(request, context):
            try:
                peer = self._enter(context)
            except ApiError as e:
                await abort(context, e)
                return None
            try:
                if deadline is None or context.time_remaining() is not None:
                    return await behavior(request, context)
                try:
                    return await asyncio.wait_for(behavior(request, context), deadline)
                except asyncio.TimeoutError:
                    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                        f"no deadline was sent; the server's default of {deadline:g} s passed")
            finally:
                self._leave(peer)

        return unary
