"""artifacts: the ArtifactService facet of the client (``client.artifacts``).

    with open("report.pdf", "rb") as f:
        art = c.artifacts.upload("thread-1", "report.pdf", f, content_type="application/pdf", run_id=run_id)
    with open("copy.pdf", "wb") as out:
        c.artifacts.download("thread-1", "report.pdf", out)      # the official version, else the latest
"""
from __future__ import annotations

import io
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from .values import check_key, encode_into
from .v1 import artifacts_pb2 as apb, artifacts_pb2_grpc

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

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


class Artifacts:
    """ArtifactService calls (``client.artifacts``)."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.stub = artifacts_pb2_grpc.ArtifactServiceStub(client.channel)

    def upload(self, thread_id: str, name: str, source: bytes | IO[bytes] | Iterable[bytes], *,
               content_type: str = "", metadata: Mapping[str, Any] | None = None, run_id: str = "",
               step_id: str = "", official: bool = False, expected_size: int = 0, request_id: str = "",
               timeout: float | None = None) -> apb.UploadArtifactResponse:
        """Upload bytes, a binary file object or an iterable of byte strings as the next version of ``name``."""
        header = apb.UploadArtifactHeader(namespace=self.client.namespace, thread_id=thread_id, name=name,
                                          content_type=content_type, run_id=run_id, step_id=step_id,
                                          official=official, expected_size=expected_size, request_id=request_id)
        for k, v in (metadata or {}).items():
            encode_into(v, header.metadata[check_key(k, "metadata")], f"metadata[{k!r}]")

        def requests():
            yield apb.UploadArtifactRequest(header=header)
            for part in _parts(source):
                yield apb.UploadArtifactRequest(data=part)

        return self.client._call(self.stub.UploadArtifact, requests(), timeout)

    def download(self, thread_id: str, name: str, out: IO[bytes] | None = None, *, version: int = 0,
                 timeout: float | None = None) -> tuple[apb.Artifact, bytes | None]:
        """Download a version (0: the official one, else the latest) into ``out``, or return its bytes."""
        from .errors import from_rpc_error  # noqa: PLC0415
        import grpc  # noqa: PLC0415

        req = apb.DownloadArtifactRequest(namespace=self.client.namespace, thread_id=thread_id, name=name,
                                          version=version)
        sink = out if out is not None else io.BytesIO()
        artifact = None
        try:
            for msg in self.stub.DownloadArtifact(req, timeout=self.client.timeout if timeout is None else timeout):
                if msg.WhichOneof("part") == "artifact":
                    artifact = msg.artifact
                else:
                    sink.write(msg.data)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return artifact, (sink.getvalue() if out is None else None)

    def get(self, thread_id: str, name: str, *, version: int = 0, timeout: float | None = None) -> apb.Artifact:
        req = apb.GetArtifactRequest(namespace=self.client.namespace, thread_id=thread_id, name=name, version=version)
        return self.client._call(self.stub.GetArtifact, req, timeout).artifact

    def list(self, thread_id: str, *, name: str = "", run_id: str = "", page_size: int = 0,
             timeout: float | None = None) -> Iterator[apb.Artifact]:
        token = ""
        while True:
            req = apb.ListArtifactsRequest(namespace=self.client.namespace, thread_id=thread_id, name=name,
                                           run_id=run_id, page_size=page_size, page_token=token)
            resp = self.client._call(self.stub.ListArtifacts, req, timeout)
            yield from resp.artifacts
            token = resp.next_page_token
            if not token:
                return

    def set_official(self, thread_id: str, name: str, version: int, *, request_id: str = "",
                     timeout: float | None = None) -> apb.Artifact | None:
        """Mark ``version`` official (0 clears the mark); returns the official artifact."""
        req = apb.SetOfficialArtifactRequest(namespace=self.client.namespace, thread_id=thread_id, name=name,
                                             version=version, request_id=request_id)
        resp = self.client._call(self.stub.SetOfficialArtifact, req, timeout)
        return resp.artifact if resp.HasField("artifact") else None
