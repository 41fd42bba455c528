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
