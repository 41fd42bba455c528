"""artifacts: ArtifactService calls (upload, download, get, list, set official) over state/artifacts.py.

An upload streams in: the header is validated first (and the thread must
exist), the data is chunked as it arrives (state/artifacts.py: how a file
becomes chunked value nodes) and complete chunks are stored in batches of
``UPLOAD_BATCH_BYTES`` while the stream goes on; the artifact's version is
committed in one write at the end, answered once per the header's
request_id. A download answers the artifact, then its data in messages of
``DOWNLOAD_MESSAGE_BYTES``.
"""
from __future__ import annotations

import asyncio
import os

from agentstate.v1 import artifacts_pb2 as apb

from .. import limits
from ..errors import invalid, limit
from ..state import artifacts
from ..state.artifacts import SMALL, Chunker
from ..state.runstate import Tx
from ..storage.layout import ArtifactRec
from . import context, idempotency, validate, wire
from .context import Ctx

UPLOAD_BATCH_BYTES = 8 * 1024 * 1024
DOWNLOAD_MESSAGE_BYTES = 1024 * 1024


def _name(value: str, field: str = "name") -> str:
    if not value:
        raise invalid(field, "must not be empty")
    if "\x00" in value:
        raise invalid(field, "must not contain NUL characters")
    if len(value.encode()) > limits.MAX_ARTIFACT_NAME_BYTES:
        raise invalid(field, f"longer than {limits.MAX_ARTIFACT_NAME_BYTES} bytes")
    return value


def to_proto(ns: str, thread_id: str, name: str, version: int, rec: ArtifactRec, official: bool,
             out: apb.Artifact | None = None) -> apb.Artifact:
    out = out if out is not None else apb.Artifact()
    out.namespace, out.thread_id, out.name, out.version = ns, thread_id, name, version
    out.size, out.content_root, out.content_type = rec.size, rec.root, rec.content_type
    wire.fill_metadata(out.metadata, rec.metadata)
    out.run_id, out.step_id = rec.run_id, rec.step_id
    wire.set_timestamp(out.create_time, rec.created_us)
    out.official = official
    return out


class _Fingerprint:
    """What an upload's request_id is bound to: the header and the content."""

    def __init__(self, header: apb.UploadArtifactHeader, root: bytes, size: int) -> None:
        self.request_id = header.request_id
        h = apb.UploadArtifactHeader()
        h.CopyFrom(header)
        h.expected_size = size
        self._body = h.SerializeToString(deterministic=True) + b"\x00" + root

    def SerializeToString(self, deterministic: bool = True) -> bytes:  # noqa: N802 - like a message
        return self._body


async def upload(ctx: Ctx, requests) -> apb.UploadArtifactResponse:
    """UploadArtifact: ``requests`` yields UploadArtifactRequest (MalformedRequest checked by the caller)."""
    store = ctx.store
    loop = asyncio.get_running_loop()
    header = None
    ns = thread_id = name = run_id = step_id = ""
    small = bytearray()
    chunker: Chunker | None = None
    known: dict[bytes, bytes] = {}
    new_bytes = 0
    size = 0
    upload_id = os.urandom(16)
    staged = committed = False
    try:
        async for msg in requests:
            part = msg.WhichOneof("part")
            if header is None:
                if part != "header":
                    raise invalid("header", "the first message must carry the header")
                header = msg.header
                ns = validate.namespace(header.namespace)
                thread_id = validate.ident(header.thread_id, "header.thread_id")
                name = _name(header.name, "header.name")
                run_id = validate.ident(header.run_id, "header.run_id", required=False)
                step_id = validate.ident(header.step_id, "header.step_id", required=False)
                validate.text(header.content_type, "header.content_type", limits.MAX_ID_BYTES)
                wire.metadata_encoding(header.metadata, "header.metadata")
                validate.ident(header.request_id, "header.request_id", required=False)
                if header.expected_size > limits.MAX_ARTIFACT_BYTES:
                    raise limit("artifact_bytes", f"header.expected_size: at most {limits.MAX_ARTIFACT_BYTES} bytes",
                                field="header.expected_size")
                with store.read() as txn:
                    artifacts.require_thread(txn, store, ns, thread_id, "header.thread_id")
                continue
            if part != "data":
                raise invalid("header", "only the first message may carry the header")
            data = msg.data
            if len(data) > limits.MAX_UPLOAD_MESSAGE_BYTES:
                raise limit("upload_message_bytes", f"data: at most {limits.MAX_UPLOAD_MESSAGE_BYTES} bytes per "
                            "message", field="data")
            size += len(data)
            if size > limits.MAX_ARTIFACT_BYTES:
                raise limit("artifact_bytes", f"an artifact is at most {limits.MAX_ARTIFACT_BYTES} bytes",
                            field="data")
            if chunker is None:
                small += data
                if len(small) >= SMALL:
                    chunker = Chunker()
                    chunker.feed(bytes(small))
                    small = bytearray()
                continue
            chunker.feed(data)
            if len(chunker.buf) >= UPLOAD_BATCH_BYTES:
                await loop.run_in_executor(None, chunker.cut, False)
                batch = chunker.take_ready()
                if batch:
                    staged = True
                    ids, added = await store.run(lambda txn, batch=batch: artifacts.stage(txn, store, ns,
                                                                                          upload_id, batch))
                    known.update(ids)
                    new_bytes += added
        if header is None:
            raise invalid("header", "the upload sent no header")
        if header.expected_size and header.expected_size != size:
            raise invalid("header.expected_size", f"{header.expected_size} bytes announced, {size} sent")
        if chunker is None:
            root, built = artifacts.small_content(bytes(small))
        else:
            root, built = await loop.run_in_executor(None, chunker.finish, size)
        fp = _Fingerprint(header, root, size)
        metadata = wire.metadata_encoding(header.metadata, "header.metadata")

        def apply(tx: Tx):
            rec, nrec, added = artifacts.commit(
                tx, ns, thread_id, name, run_id=run_id, step_id=step_id, content_type=header.content_type,
                metadata=metadata, official=header.official, root=root, size=size, built=built, known=known,
                upload_id=upload_id)
            return apb.UploadArtifactResponse(
                artifact=to_proto(ns, thread_id, name, nrec.latest, rec, nrec.official == nrec.latest),
                new_bytes=new_bytes + added)

        def job(txn):
            tx = Tx(txn, store)

            def run_once(_txn):
                resp = apply(tx)
                tx.flush()
                return resp

            resp = idempotency.run(txn, store.db, ns, "UploadArtifact", fp, apb.UploadArtifactResponse, run_once)
            artifacts.drop_upload(txn, store, upload_id)
            return resp, tx.touched

        resp, touched = await store.run(job)
        committed = True
        ctx.notify(touched)
        return resp
    finally:
        if staged and not committed:
            try:
                await store.run(lambda txn: artifacts.drop_upload(txn, store, upload_id))
            except Exception:  # noqa: BLE001 - shutting down: the startup sweep removes it
                pass
            if ctx.on_garbage is not None:
                ctx.on_garbage()


async def get(ctx: Ctx, req: apb.GetArtifactRequest) -> apb.GetArtifactResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = _name(req.name)
    with ctx.store.read() as txn:
        _, nrec, v, rec = artifacts.resolve(txn, ctx.store, ns, thread_id, name, req.version)
    return apb.GetArtifactResponse(artifact=to_proto(ns, thread_id, name, v, rec, nrec.official == v))


async def download(ctx: Ctx, req: apb.DownloadArtifactRequest):
    """Async generator of DownloadArtifactResponse: the artifact, then its data."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = _name(req.name)
    store = ctx.store
    with store.read() as txn:
        nrec, v, rec, root = artifacts.open_content(txn, store, ns, thread_id, name, req.version)
    yield apb.DownloadArtifactResponse(artifact=to_proto(ns, thread_id, name, v, rec, nrec.official == v))
    pending = bytearray()
    for part in artifacts.content(store, root, name, v):
        pending += part
        while len(pending) >= DOWNLOAD_MESSAGE_BYTES:
            yield apb.DownloadArtifactResponse(data=bytes(pending[:DOWNLOAD_MESSAGE_BYTES]))
            del pending[:DOWNLOAD_MESSAGE_BYTES]
    if pending:
        yield apb.DownloadArtifactResponse(data=bytes(pending))


async def list_(ctx: Ctx, req: apb.ListArtifactsRequest) -> apb.ListArtifactsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = _name(req.name) if req.name else ""
    run_id = validate.ident(req.run_id, "run_id", required=False)
    size = validate.page_size(req.page_size)
    fp = wire.fingerprint("artifacts", ns, thread_id, name, run_id)
    position = wire.read_token(req.page_token, fp)
    out = apb.ListArtifactsResponse()
    with ctx.store.read() as txn:
        found, last = artifacts.page(txn, ctx.store, ns, thread_id, name=name, run_id=run_id,
                                     after=bytes(position[0]) if position else None, size=size)
    for aname, version, rec, official in found:
        to_proto(ns, thread_id, aname, version, rec, official, out.artifacts.add())
    if last is not None:
        out.next_page_token = wire.make_token(fp, (last,))
    return out


async def set_official(ctx: Ctx, req: apb.SetOfficialArtifactRequest) -> apb.SetOfficialArtifactResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = _name(req.name)

    def apply(tx: Tx):
        rec = artifacts.set_official(tx.txn, tx.store, ns, thread_id, name, req.version)
        resp = apb.SetOfficialArtifactResponse()
        if rec is not None:
            to_proto(ns, thread_id, name, req.version, rec, True, resp.artifact)
        return resp

    return await context.write(ctx, ns, "SetOfficialArtifact", req, apb.SetOfficialArtifactResponse, apply)
