"""transfer: the TransferService facet of the client (``client.transfer``) — export a namespace from a serving
sidecar into an export file, import one into it (docs/export-format.md; both need an admin credential).

    s = c.transfer.export_to("team-a.asx")                 # the client's namespace (thread_id=... for one)
    r = c.transfer.import_from("team-a.asx", replace=True) # into the file's namespace (namespace=... another)

``AsyncClient.transfer`` (:class:`AsyncTransfer`) has the same methods as coroutines. The file is the one
`sidecar export --data-dir` writes. ``export_to`` writes into a temporary file next to
the target and renames it into place only when the stream ended with its summary (a stream cut short leaves
nothing under the target's name). ``progress(phase, done, total)`` is called as the export or upload goes.
"""
from __future__ import annotations

import os
import struct
import tempfile
from typing import Callable

import grpc
import msgspec

from .errors import from_rpc_error
from .v1 import transfer_pb2 as xpb, transfer_pb2_grpc

Progress = Callable[[str, int, int], None]
UPLOAD_CHUNK = 1 << 20


def file_namespace(path: str) -> str:
    """The namespace an export file's header names (without verifying the file: the import does)."""
    with open(path, "rb") as f:
        head = f.read(4)
        if len(head) < 4:
            raise ValueError(f"{path}: not an export file (too short)")
        (n,) = struct.unpack(">I", head)
        if n > 1 << 20:
            raise ValueError(f"{path}: not an export file (no header)")
        try:
            header = msgspec.msgpack.decode(f.read(n))
        except msgspec.DecodeError:
            raise ValueError(f"{path}: not an export file (its header does not decode)") from None
    ns = (header.get("scope") or {}).get("namespace") if isinstance(header, dict) else None
    if header.get("t") != "header" or not isinstance(ns, str):
        raise ValueError(f"{path}: not an export file (no header naming a namespace)")
    return ns


def _target(path: str) -> str:
    path = os.path.abspath(path)
    if os.path.exists(path):
        raise FileExistsError(f"{path} exists; an export never overwrites")
    return path


def _take(msg, f, progress: Progress | None):
    """Write one ExportNamespace message's data into ``f`` or report its progress; its summary, if it is one."""
    part = msg.WhichOneof("part")
    if part == "data":
        f.write(msg.data)
    elif part == "progress" and progress is not None:
        progress(msg.progress.phase, msg.progress.done, msg.progress.total)
    elif part == "summary":
        return msg.summary
    return None


def _check_ended(f, summary) -> None:
    if summary is None:
        raise ConnectionError("the export stream ended without its summary: no file was written")
    if f.tell() != summary.bytes:
        raise ConnectionError(f"the export stream held {f.tell():,} bytes, its summary says "
                              f"{summary.bytes:,}: no file was written")
    f.flush()
    os.fsync(f.fileno())


def _place(tmp: str, path: str) -> None:
    if os.path.exists(path):
        raise FileExistsError(f"{path} exists; an export never overwrites")
    os.rename(tmp, path)


def _upload(path: str, header, progress: Progress | None):
    """The ImportNamespace messages of the file ``path``: the header, then its bytes in chunks."""
    size = header.size
    yield xpb.ImportNamespaceRequest(header=header)
    sent = 0
    with open(path, "rb") as f:
        while True:
            data = f.read(UPLOAD_CHUNK)
            if not data:
                break
            sent += len(data)
            yield xpb.ImportNamespaceRequest(data=data)
            if progress is not None:
                progress("sending", sent, size)


def _import_header(path: str, namespace: str | None, replace: bool, check_only: bool,
                   allow_plaintext: bool):
    return xpb.ImportHeader(namespace=namespace or file_namespace(path), replace=replace, check_only=check_only,
                            size=os.path.getsize(path), allow_plaintext=allow_plaintext)


class Transfer:
    def __init__(self, client) -> None:
        self.client = client
        self.stub = transfer_pb2_grpc.TransferServiceStub(client.channel)

    def export_to(self, path: str, *, namespace: str | None = None, thread_id: str = "",
                  refuse_encrypted: bool = False, progress: Progress | None = None,
                  timeout: float | None = 3600.0) -> xpb.ExportSummary:
        """Export the namespace (default: the client's) or its thread ``thread_id`` into the new file ``path``
        (never overwritten); the export's summary."""
        path = _target(path)
        request = xpb.ExportNamespaceRequest(namespace=namespace or self.client.namespace, thread_id=thread_id,
                                             refuse_encrypted=refuse_encrypted)
        fd, tmp = tempfile.mkstemp(prefix=".export-", dir=os.path.dirname(path))
        summary = None
        try:
            with os.fdopen(fd, "wb") as f:
                try:
                    for msg in self.stub.ExportNamespace(request, timeout=timeout):
                        got = _take(msg, f, progress)
                        summary = got if got is not None else summary
                except grpc.RpcError as e:
                    raise from_rpc_error(e) from None
                _check_ended(f, summary)
            _place(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return summary

    def import_from(self, path: str, *, namespace: str | None = None, replace: bool = False,
                    check_only: bool = False, allow_plaintext: bool = False, progress: Progress | None = None,
                    timeout: float | None = 3600.0) -> xpb.ImportNamespaceResponse:
        """Import the export file ``path`` into ``namespace`` (default: the one the file names); nothing is
        written unless the whole file arrives intact and conflicts nothing (or ``replace``)."""
        header = _import_header(path, namespace, replace, check_only, allow_plaintext)
        try:
            return self.stub.ImportNamespace(_upload(path, header, progress), timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None


class AsyncTransfer:
    """``AsyncClient.transfer``: :class:`Transfer` as coroutines (same arguments, files and errors). The file
    is read and written in the event loop's thread, a chunk (at most 1 MiB) at a time."""

    def __init__(self, client) -> None:
        self.client = client
        self.stub = transfer_pb2_grpc.TransferServiceStub(client.channel)

    async def export_to(self, path: str, *, namespace: str | None = None, thread_id: str = "",
                        refuse_encrypted: bool = False, progress: Progress | None = None,
                        timeout: float | None = 3600.0) -> xpb.ExportSummary:
        path = _target(path)
        request = xpb.ExportNamespaceRequest(namespace=namespace or self.client.namespace, thread_id=thread_id,
                                             refuse_encrypted=refuse_encrypted)
        fd, tmp = tempfile.mkstemp(prefix=".export-", dir=os.path.dirname(path))
        summary = None
        try:
            with os.fdopen(fd, "wb") as f:
                try:
                    async for msg in self.stub.ExportNamespace(request, timeout=timeout):
                        got = _take(msg, f, progress)
                        summary = got if got is not None else summary
                except grpc.RpcError as e:
                    raise from_rpc_error(e) from None
                _check_ended(f, summary)
            _place(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return summary

    async def import_from(self, path: str, *, namespace: str | None = None, replace: bool = False,
                          check_only: bool = False, allow_plaintext: bool = False,
                          progress: Progress | None = None,
                          timeout: float | None = 3600.0) -> xpb.ImportNamespaceResponse:
        header = _import_header(path, namespace, replace, check_only, allow_plaintext)
        try:
            return await self.stub.ImportNamespace(_upload(path, header, progress), timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
