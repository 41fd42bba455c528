"""transport: the channel a client talks on — plain, local with a token, or TLS (docs/security.md).

    Client("unix:sidecar-data/sidecar.sock", token=os.environ["AGENTSTATE_TOKEN"])
    Client("sidecar.internal:7421", token=tok, tls=TLS(root_certificates=open("ca.pem", "rb").read()))
    Client("sidecar.internal:7421", tls=TLS(root_certificates=ca, certificate_chain=crt, private_key=key))

A token travels as ``authorization: Bearer <token>`` metadata on every call
(a channel interceptor), and only over a protected connection: TLS, or a
local one (a unix socket, TCP to a loopback address). A token with a plain
TCP address elsewhere is refused here, before anything is sent.
"""
from __future__ import annotations

import collections
import ipaddress
from dataclasses import dataclass
from typing import Any

import grpc


@dataclass(frozen=True)
class TLS:
    """TLS options: PEM bytes. ``root_certificates`` None: the system's roots. ``certificate_chain``
    and ``private_key``: the client's certificate (mutual TLS). ``server_name``: the name to check
    in the server's certificate when it is not the address's host."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.root_certificates,
                                            private_key=self.private_key,
                                            certificate_chain=self.certificate_chain)

    def options(self) -> list[tuple[str, Any]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def _local_kind(address: str):
    if address.startswith("unix:") or address.startswith("unix-abstract:"):
        return grpc.LocalConnectionType.UDS
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    if host.startswith("dns:") or host.startswith("ipv4:") or host.startswith("ipv6:"):
        host = host.split(":", 1)[1].lstrip("/")
    if host == "localhost":
        return grpc.LocalConnectionType.LOCAL_TCP
    try:
        if ipaddress.ip_address(host).is_loopback:
            return grpc.LocalConnectionType.LOCAL_TCP
    except ValueError:
        pass
    return None


def _check(address: str, token: str | None, tls: TLS | bool | None) -> TLS | None:
    if tls is True:
        tls = TLS()
    if token is not None:
        if not token:
            raise ValueError("token is empty")
        if not tls and _local_kind(address) is None:
            raise ValueError(f"a token is sent only over TLS or a local connection (unix socket, loopback); "
                             f"{address!r} is neither: pass tls=TLS(...)")
    return tls or None


class _Details(collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials",
                                                   "wait_for_ready", "compression")),
               grpc.ClientCallDetails):
    pass


def _with_token(metadata, header: tuple[str, str]):
    return (*(m for m in (metadata or ()) if m[0] != "authorization"), header)


class _TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                        grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every call (cheaper than a call-credentials plugin,
    which runs each call's metadata through a thread of its own)."""

    def __init__(self, token: str) -> None:
        self.header = ("authorization", f"Bearer {token}")

    def _details(self, d):
        return _Details(d.method, d.timeout, _with_token(d.metadata, self.header), d.credentials,
                        d.wait_for_ready, getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


def _aio_interceptors(token: str) -> list:
    header = ("authorization", f"Bearer {token}")

    def details(d):
        return grpc.aio.ClientCallDetails(d.method, d.timeout, _with_token(d.metadata, header), d.credentials,
                                          d.wait_for_ready)

    class Unary(grpc.aio.UnaryUnaryClientInterceptor):
        async def intercept_unary_unary(self, continuation, d, request):
            return await continuation(details(d), request)

    class UnaryStream(grpc.aio.UnaryStreamClientInterceptor):
        async def intercept_unary_stream(self, continuation, d, request):
            return await continuation(details(d), request)

    class StreamUnary(grpc.aio.StreamUnaryClientInterceptor):
        async def intercept_stream_unary(self, continuation, d, request_iterator):
            return await continuation(details(d), request_iterator)

    class StreamStream(grpc.aio.StreamStreamClientInterceptor):
        async def intercept_stream_stream(self, continuation, d, request_iterator):
            return await continuation(details(d), request_iterator)

    return [Unary(), UnaryStream(), StreamUnary(), StreamStream()]


def channel(address: str, options: list, token: str | None = None, tls: TLS | bool | None = None) -> grpc.Channel:
    tls = _check(address, token, tls)
    if tls is None:
        ch = grpc.insecure_channel(address, options=options)
    else:
        ch = grpc.secure_channel(address, tls.credentials(), options=[*options, *tls.options()])
    return grpc.intercept_channel(ch, _TokenInterceptor(token)) if token else ch


def aio_channel(address: str, options: list, token: str | None = None,
                tls: TLS | bool | None = None) -> grpc.aio.Channel:
    tls = _check(address, token, tls)
    interceptors = _aio_interceptors(token) if token else None
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(address, tls.credentials(), options=[*options, *tls.options()],
                                   interceptors=interceptors)


#: The channel option that gives a channel a connection of its own: without it grpc-python shares one
#: TCP connection (one subchannel) between channels with the same target and options.
OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)


class StreamConnections:
    """Connections of their own for the long-lived streams of one client (a follow watch, a write stream).

    The sidecar lets a connection have a few streams at once (``--max-streams-per-connection``, default
    3; more wait in the client), so a stream that stays open must not take a slot of the channel every
    other call goes on. ``open()`` makes a channel like the client's (same target, options, TLS, token)
    but on a connection of its own; ``release()`` closes it when the stream ends; the client's ``close()``
    closes any still open. ``make`` None (the client was given a channel it cannot copy): streams go on
    that channel."""

    def __init__(self, make, shared) -> None:
        import threading  # noqa: PLC0415

        self._make, self._shared = make, shared
        self._lock = threading.Lock()
        self._open: set = set()
        self._closed = False

    def open(self):
        if self._make is None:
            return self._shared
        ch = self._make()
        with self._lock:
            if not self._closed:
                self._open.add(ch)
                return ch
        closing = ch.close()
        if closing is not None:  # an aio channel: we are in its loop
            import asyncio  # noqa: PLC0415

            asyncio.ensure_future(closing)
        raise ValueError("the client is closed")

    def _take(self, ch) -> bool:
        with self._lock:
            if ch in self._open:
                self._open.discard(ch)
                return True
        return False

    def release(self, ch) -> None:
        if ch is not self._shared and self._take(ch):
            ch.close()

    async def arelease(self, ch) -> None:
        if ch is not self._shared and self._take(ch):
            await ch.close()

    def count(self) -> int:
        """How many stream connections are open now."""
        with self._lock:
            return len(self._open)

    def close_all(self) -> list:
        """Close every stream connection (the sync ones at once); returns what aio channels' close gave."""
        with self._lock:
            self._closed = True
            chans, self._open = list(self._open), set()
        return [ch.close() for ch in chans]
