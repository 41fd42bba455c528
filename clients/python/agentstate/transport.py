"""transport: the channel a client talks on — plain, local with a token, or TLS (docs/security.md).

    Client("unix:sidecar-data/sidecar.sock", token=os.environ["AGENTSTATE_TOKEN"])
    Client("sidecar.internal:7421", token=tok, tls=TLS(root_certificates=open("ca.pem", "rb").read()))
    Client("sidecar.internal:7421", tls=TLS(root_certificates=ca, certificate_chain=crt, private_key=key))

A token travels as ``authorization: Bearer <token>`` call credentials, which
gRPC sends only over a protected connection: TLS, or a local one (a unix
socket, or TCP to a loopback address, where gRPC's local credentials check
that the peer is on this host). A token with a plain TCP address elsewhere is
refused here, before anything is sent.
"""
from __future__ import annotations

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


def credentials(address: str, token: str | None, tls: TLS | bool | None):
    """(channel credentials or None for a plain channel, extra channel options)."""
    if tls is True:
        tls = TLS()
    if token is not None and not token:
        raise ValueError("token is empty")
    call = grpc.access_token_call_credentials(token) if token else None
    if tls:
        creds = tls.credentials()
        return (grpc.composite_channel_credentials(creds, call) if call else creds), tls.options()
    if call is None:
        return None, []
    kind = _local_kind(address)
    if kind is None:
        raise ValueError(f"a token is sent only over TLS or a local connection (unix socket, loopback); "
                         f"{address!r} is neither: pass tls=TLS(...)")
    return grpc.composite_channel_credentials(grpc.local_channel_credentials(kind), call), []


def channel(address: str, options: list, token: str | None = None, tls: TLS | bool | None = None) -> grpc.Channel:
    creds, extra = credentials(address, token, tls)
    if creds is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, creds, options=[*options, *extra])


def aio_channel(address: str, options: list, token: str | None = None,
                tls: TLS | bool | None = None) -> grpc.aio.Channel:
    creds, extra = credentials(address, token, tls)
    if creds is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, creds, options=[*options, *extra])
