"""artifacts: the ArtifactService facet of the client (``client.artifacts``).

    with open("report.pdf", "rb") as f:
        art = c.artifacts.upload("thread-1", "report.pdf", f, content_type="application/pdf", run_id=run_id)
    with open("copy.pdf", "wb") as out:
        c.artifacts.download("thread-1", "report.pdf", out)      # the official version, else the latest

``AsyncClient.artifacts`` has the same calls as coroutines (``list`` an async iterator).
"""
from __future__ import annotations

import io
from typing import IO, Any, Iterable, Iterator, Mapping

from ._facet import AsyncFacet, Call, SyncFacet, listing, pages, unary
from ._requests import fill_map
from .v1 import artifacts_pb2 as apb, artifacts_pb2_grpc

UPLOAD_PART = 1024 * 1024  # bytes per upload message


def _parts(source: bytes | IO[bytes] | Iterable[bytes]) -> Iterator[bytes]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        for i in range(0, len(data), UPLOAD_PART):
            yield data[i:i + UPLOAD_PART]
    elif hasattr(source, "read"):
        while True:
            part = source.read(UPLOAD_PART)
            if not part:
                return
            yield part
    else:
        for part in source:
            for i in range(0, len(part), UPLOAD_PART):
                yield bytes(part[i:i + UPLOAD_PART])


def upload_requests(header: apb.UploadArtifactHeader,
                    source: bytes | IO[bytes] | Iterable[bytes]) -> Iterator[apb.UploadArtifactRequest]:
    """The UploadArtifact stream: the header, then the data in parts of UPLOAD_PART bytes."""
    yield apb.UploadArtifactRequest(header=header)
    for part in _parts(source):
        yield apb.UploadArtifactRequest(data=part)


class Download:
    """Where a download goes: ``out``, else a buffer; ``add`` takes each message of the stream."""

    def __init__(self, out: IO[bytes] | None) -> None:
        self.out = out
        self.sink = out if out is not None else io.BytesIO()
        self.artifact: apb.Artifact | None = None

    def add(self, msg: apb.DownloadArtifactResponse) -> None:
        if msg.WhichOneof("part") == "artifact":
            self.artifact = msg.artifact
        else:
            self.sink.write(msg.data)

    def result(self) -> tuple[apb.Artifact, bytes | None]:
        return self.artifact, (self.sink.getvalue() if self.out is None else None)


class ArtifactCalls:
    """The ArtifactService calls, written once (see :mod:`agentstate._facet`) for :class:`Artifacts` and
    :class:`AsyncArtifacts`; ``download`` is each one's own."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = artifacts_pb2_grpc.ArtifactServiceStub(client.channel)

    @unary
    def upload(self, thread_id: str, name: str, source: bytes | IO[bytes] | Iterable[bytes], *,
               content_type: str = "", metadata: Mapping[str, Any] | None = None, run_id: str = "",
               step_id: str = "", official: bool = False, expected_size: int = 0, request_id: str = "",
               timeout: float | None = None) -> apb.UploadArtifactResponse:
        """Upload bytes, a binary file object or an iterable of byte strings as the next version of ``name``."""
        header = apb.UploadArtifactHeader(namespace=self.client.namespace, thread_id=thread_id, name=name,
                                          content_type=content_type, run_id=run_id, step_id=step_id,
                                          official=official, expected_size=expected_size, request_id=request_id)
        fill_map(header.metadata, metadata)
        return (yield Call(self.stub.UploadArtifact, upload_requests(header, source), timeout))

    def _download_request(self, thread_id: str, name: str, version: int) -> apb.DownloadArtifactRequest:
        return apb.DownloadArtifactRequest(namespace=self.client.namespace, thread_id=thread_id, name=name,
                                           version=version)

    @unary
    def get(self, thread_id: str, name: str, *, version: int = 0, timeout: float | None = None) -> apb.Artifact:
        req = apb.GetArtifactRequest(namespace=self.client.namespace, thread_id=thread_id, name=name, version=version)
        return (yield Call(self.stub.GetArtifact, req, timeout)).artifact

    @listing
    def list(self, thread_id: str, *, name: str = "", run_id: str = "", page_size: int = 0,
             timeout: float | None = None):
        """The versions of a thread's artifacts (Iterator / AsyncIterator of Artifact)."""
        return pages(self.stub.ListArtifacts, lambda token: apb.ListArtifactsRequest(
            namespace=self.client.namespace, thread_id=thread_id, name=name, run_id=run_id, page_size=page_size,
            page_token=token), "artifacts", timeout)

    @unary
    def set_official(self, thread_id: str, name: str, version: int, *, request_id: str = "",
                     timeout: float | None = None) -> apb.Artifact | None:
        """Mark ``version`` official (0 clears the mark); returns the official artifact."""
        req = apb.SetOfficialArtifactRequest(namespace=self.client.namespace, thread_id=thread_id, name=name,
                                             version=version, request_id=request_id)
        resp = yield Call(self.stub.SetOfficialArtifact, req, timeout)
        return resp.artifact if resp.HasField("artifact") else None


class Artifacts(ArtifactCalls, SyncFacet):
    """ArtifactService calls (``client.artifacts``)."""

    def download(self, thread_id: str, name: str, out: IO[bytes] | None = None, *, version: int = 0,
                 timeout: float | None = None) -> tuple[apb.Artifact, bytes | None]:
        """Download a version (0: the official one, else the latest) into ``out``, or return its bytes."""
        into = Download(out)
        for msg in self._stream(self.stub.DownloadArtifact, self._download_request(thread_id, name, version), timeout):
            into.add(msg)
        return into.result()


class AsyncArtifacts(ArtifactCalls, AsyncFacet):
    """ArtifactService calls of the asyncio client (``async_client.artifacts``)."""

    async def download(self, thread_id: str, name: str, out: IO[bytes] | None = None, *, version: int = 0,
                       timeout: float | None = None) -> tuple[apb.Artifact, bytes | None]:
        """As :meth:`Artifacts.download`; the stream is read as it comes (``out`` is written to as parts arrive)."""
        into = Download(out)
        async for msg in self._stream(self.stub.DownloadArtifact, self._download_request(thread_id, name, version),
                                      timeout):
            into.add(msg)
        return into.result()
