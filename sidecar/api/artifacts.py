"""artifacts: ArtifactService — named, versioned files of a thread, stored as chunked values.

A file is stored as the value "these bytes" (canonical MessagePack ``bin``)
with the core's value nodes, so its root hash is exactly what
``hotpath.value_node`` gives for the whole encoding and identical chunks are
shared with everything else in the store. Uploads are chunked as they
stream in, without holding the file in memory:

* FastCDC's rolling hash starts CDC_MIN bytes into each chunk, so the 5-byte
  ``bin32`` header (whose length field is known only at the end) never
  influences a cut: the stream is cut with a placeholder header and the
  first chunk is finished when the size is known.
* A cut is final once CDC_MAX bytes follow the chunk's start; complete chunks
  are stored in batches (``UPLOAD_BATCH_BYTES``) and listed in an ``uploads``
  record, which garbage collection treats as a root until the upload commits
  (then the artifact record is the root) or fails (then the record goes and
  the chunks become garbage unless shared).

Files under 64 KiB are buffered and stored in one go (their header is
shorter).
"""
from __future__ import annotations

import asyncio
import os

import msgspec

from agentstate import codec
from agentstate.v1 import artifacts_pb2 as apb

from .. import limits
from ..errors import ApiError, invalid, limit, thread_not_found
from ..state import runstate, threads
from ..state.runstate import Tx
from ..storage import hotpath as hp
from ..storage import layout, nodes, records
from ..storage.layout import ArtifactNameRec, ArtifactRec, UploadRec
from ..storage.store import Store, now_us
from . import context, idempotency, validate, wire
from .context import Ctx

CDC_MIN = 4 * 1024
CDC_MAX = 64 * 1024
SMALL = 65536  # data shorter than this gets a bin8/bin16 header: buffered whole
UPLOAD_BATCH_BYTES = 8 * 1024 * 1024
DOWNLOAD_MESSAGE_BYTES = 1024 * 1024
DOWNLOAD_CHUNKS_PER_READ = 64


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


class _Chunker:
    """Content-defined chunking of ``bin32 header + data`` as the data streams in."""

    def __init__(self) -> None:
        self.buf = bytearray(b"\xc6\x00\x00\x00\x00")  # placeholder header (see module doc)
        self.first: bytes | None = None  # the first chunk, finished at the end
        self.ready: list[tuple[bytes, bytes]] = []  # (hash, node) of complete chunks not staged yet
        self.ready_bytes = 0
        self.hashes: list[bytes] = []  # hashes of every chunk after the first, in order

    def feed(self, data: bytes) -> None:
        self.buf += data

    def cut(self, final: bool) -> None:
        """Cut the complete chunks off the buffer (all of it when final). CPU-bound."""
        buf = bytes(self.buf)
        start = 0
        for end in hp.cdc_cut_points(buf):
            if not final and len(buf) - start < CDC_MAX:
                break
            chunk = buf[start:end]
            if self.first is None:
                self.first = chunk
            else:
                node = b"c" + chunk
                h = hp.hash_bytes(node)
                self.ready.append((h, node))
                self.ready_bytes += len(node)
                self.hashes.append(h)
            start = end
        del self.buf[:start]

    def take_ready(self) -> list[tuple[bytes, bytes]]:
        ready, self.ready, self.ready_bytes = self.ready, [], 0
        return ready

    def finish(self, size: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """Root hash and the nodes still to store (first chunk, last chunks, the chunked-value node)."""
        self.cut(final=True)
        first = b"\xc6" + size.to_bytes(4, "big") + self.first[5:]
        node = b"c" + first
        h = hp.hash_bytes(node)
        out = [(h, node), *self.take_ready()]
        hashes = [h, *self.hashes]
        root_node = b"C" + (size + 5).to_bytes(8, "big") + len(hashes).to_bytes(4, "big") + b"".join(hashes)
        root = hp.hash_bytes(root_node)
        out.append((root, root_node))
        return root, out


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


def _stage(store: Store, upload_id: bytes, batch: list[tuple[bytes, bytes]]):
    """Writer job: store a batch of chunks and list them in the upload's record."""
    def job(txn):
        new_bytes = sum(len(node) for h, node in batch if nodes.index_get(txn, store, h) is None)
        ids = nodes.write(txn, store, batch, {}, [h for h, _ in batch])
        raw = txn.get(upload_id, db=store.db["uploads"])
        rec = UploadRec(layout.FORMAT_VERSION, now_us(), []) if raw is None else layout.upload_decoder.decode(raw)
        rec.chunks.extend(ids[h] for h, _ in batch)
        txn.put(upload_id, layout.encode(rec), db=store.db["uploads"])
        keep = store.gc_keep
        if keep is not None:
            keep.update(ids.values())
        return {h: ids[h] for h, _ in batch}, new_bytes
    return job


async def upload(ctx: Ctx, requests) -> apb.UploadArtifactResponse:
    """UploadArtifact: ``requests`` yields UploadArtifactRequest (MalformedRequest checked by the caller)."""
    store = ctx.store
    loop = asyncio.get_running_loop()
    header = None
    ns = thread_id = name = run_id = step_id = ""
    small = bytearray()
    chunker: _Chunker | None = None
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
                wire.encode_metadata_dict(wire.metadata_items(header.metadata, "header.metadata"), "header.metadata")
                validate.ident(header.request_id, "header.request_id", required=False)
                if header.expected_size > limits.MAX_ARTIFACT_BYTES:
                    raise limit("artifact_bytes", f"header.expected_size: at most {limits.MAX_ARTIFACT_BYTES} bytes",
                                field="header.expected_size")
                with store.read() as txn:
                    if records.thread(txn, store, ns, thread_id) is None:
                        raise thread_not_found(ns, thread_id, "header.thread_id")
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
                    chunker = _Chunker()
                    chunker.feed(bytes(small))
                    small = bytearray()
                continue
            chunker.feed(data)
            if len(chunker.buf) >= UPLOAD_BATCH_BYTES:
                await loop.run_in_executor(None, chunker.cut, False)
                batch = chunker.take_ready()
                if batch:
                    staged = True
                    ids, added = await store.run(_stage(store, upload_id, batch))
                    known.update(ids)
                    new_bytes += added
        if header is None:
            raise invalid("header", "the upload sent no header")
        if header.expected_size and header.expected_size != size:
            raise invalid("header.expected_size", f"{header.expected_size} bytes announced, {size} sent")
        built: list = []
        if chunker is None:
            root = hp.value_node(codec.encode(bytes(small)), built)
        else:
            root, built = await loop.run_in_executor(None, chunker.finish, size)
        fp = _Fingerprint(header, root, size)
        metadata = wire.encode_metadata_dict(wire.metadata_items(header.metadata, "header.metadata"),
                                             "header.metadata")

        def apply(tx: Tx):
            nonlocal new_bytes
            txn = tx.txn
            trec = threads.require(txn, store, ns, thread_id)
            if run_id:
                run = tx.require_run(ns, run_id, "header.run_id")
                if run.tkey != trec.tkey:
                    raise invalid("header.run_id", f"run {run_id!r} works on thread {run.thread_id!r}")
            new_bytes += sum(len(node) for h, node in built if nodes.index_get(txn, store, h) is None)
            ids = nodes.write(txn, store, built, known, [root])
            keep = store.gc_keep
            if keep is not None:
                keep.update(ids.values())
                keep.update(known.values())
            nkey = layout.tkey_str_key(trec.tkey, name)
            raw = txn.get(nkey, db=store.db["artnames"])
            nrec = ArtifactNameRec(layout.FORMAT_VERSION, 0, 0) if raw is None else layout.artname_decoder.decode(raw)
            nrec.latest += 1
            if header.official:
                nrec.official = nrec.latest
            txn.put(nkey, layout.encode(nrec), db=store.db["artnames"])
            rec = ArtifactRec(layout.FORMAT_VERSION, ids[root], root, size, header.content_type,
                              msgspec.Raw(metadata), run_id, step_id, tx.now)
            txn.put(layout.artifact_key(trec.tkey, name, nrec.latest), layout.encode(rec), db=store.db["artifacts"])
            txn.delete(upload_id, db=store.db["uploads"])
            tx.append_event(ns, thread_id, trec.tkey, layout.EventRec(
                layout.FORMAT_VERSION, run_id, step_id, runstate.SERVER_EVENT_PREFIX + "artifact.created",
                runstate.encode_obj({"name": name, "version": nrec.latest, "size": size}), "", tx.now))
            return apb.UploadArtifactResponse(
                artifact=to_proto(ns, thread_id, name, nrec.latest, rec, nrec.official == nrec.latest),
                new_bytes=new_bytes)

        def job(txn):
            tx = Tx(txn, store)

            def run_once(_txn):
                resp = apply(tx)
                tx.flush()
                return resp

            resp = idempotency.run(txn, store.db, ns, "UploadArtifact", fp, apb.UploadArtifactResponse, run_once)
            txn.delete(upload_id, db=store.db["uploads"])
            return resp, tx.touched

        resp, touched = await store.run(job)
        committed = True
        ctx.notify(touched)
        return resp
    finally:
        if staged and not committed:
            def drop(txn):
                txn.delete(upload_id, db=store.db["uploads"])
            try:
                await store.run(drop)
            except Exception:  # noqa: BLE001 - shutting down: the startup sweep removes it
                pass
            if ctx.on_garbage is not None:
                ctx.on_garbage()


def drop_stale_uploads(store: Store) -> int:
    """At startup: uploads cut off by a crash or restart can never finish; forget them."""
    def job(txn):
        db = store.db["uploads"]
        keys = [bytes(k) for k in txn.cursor(db=db).iternext(values=False)]
        for k in keys:
            txn.delete(k, db=db)
        return len(keys)
    return store.write(job)


def _resolve(txn, store: Store, ns: str, thread_id: str, name: str, version: int):
    trec = threads.require(txn, store, ns, thread_id)
    raw = txn.get(layout.tkey_str_key(trec.tkey, name), db=store.db["artnames"])
    if raw is None:
        raise ApiError("ARTIFACT_NOT_FOUND", f"no artifact {name!r} in thread {thread_id!r}", field="name",
                       thread_id=thread_id)
    nrec = layout.artname_decoder.decode(raw)
    v = version or nrec.official or nrec.latest
    raw = txn.get(layout.artifact_key(trec.tkey, name, v), db=store.db["artifacts"])
    if raw is None:
        raise ApiError("ARTIFACT_NOT_FOUND", f"artifact {name!r} of thread {thread_id!r} has no version {v}",
                       field="version", thread_id=thread_id)
    return trec, nrec, v, layout.artifact_decoder.decode(raw)


async def get(ctx: Ctx, req: apb.GetArtifactRequest) -> apb.GetArtifactResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = _name(req.name)
    with ctx.store.read() as txn:
        _, nrec, v, rec = _resolve(txn, ctx.store, ns, thread_id, name, req.version)
    return apb.GetArtifactResponse(artifact=to_proto(ns, thread_id, name, v, rec, nrec.official == v))


def _bin_header_len(first: bytes) -> int:
    return {0xC4: 2, 0xC5: 3, 0xC6: 5}[first[0]]


async def download(ctx: Ctx, req: apb.DownloadArtifactRequest):
    """Async generator of DownloadArtifactResponse: the artifact, then its data."""
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = _name(req.name)
    store = ctx.store
    H = hp.HASH_SIZE
    with store.read() as txn:
        _, nrec, v, rec = _resolve(txn, store, ns, thread_id, name, req.version)
        root = txn.get(rec.content, db=store.db["nodes"])
        if root is None:
            raise ApiError("ARTIFACT_NOT_FOUND", f"artifact {name!r} version {v} is being deleted", field="name")
        root = bytes(root)
    yield apb.DownloadArtifactResponse(artifact=to_proto(ns, thread_id, name, v, rec, nrec.official == v))
    if root[H] != hp.TAG_CHUNKED:  # one value node (maybe stored compressed)
        enc = hp.stored_encoding(root, None)
        data = enc[_bin_header_len(enc):]
        for i in range(0, len(data), DOWNLOAD_MESSAGE_BYTES):
            yield apb.DownloadArtifactResponse(data=data[i:i + DOWNLOAD_MESSAGE_BYTES])
        return
    count = int.from_bytes(root[H + 9:H + 13], "big")
    ids = [root[H + 13 + i * hp.ID_SIZE:H + 13 + (i + 1) * hp.ID_SIZE] for i in range(count)]
    pending = bytearray()
    first = True  # the MessagePack bin header starts the first chunk (bin16 or bin32)
    for i in range(0, len(ids), DOWNLOAD_CHUNKS_PER_READ):
        with store.read() as txn:
            recs = [txn.get(node_id, db=store.db["nodes"]) for node_id in ids[i:i + DOWNLOAD_CHUNKS_PER_READ]]
            parts = [None if r is None else bytes(r[H + 1:]) for r in recs]
        for part in parts:
            if part is None:
                raise ApiError("ARTIFACT_NOT_FOUND", f"artifact {name!r} version {v} was deleted during the download",
                               field="name")
            if first:
                part, first = part[_bin_header_len(part):], False
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
    store = ctx.store
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        prefix = layout.artifact_prefix(trec.tkey, name) if name else layout.tkey_prefix(trec.tkey)
        cursor = txn.cursor(db=store.db["artifacts"])
        found = cursor.set_range(bytes(position[0]) + b"\x00" if position else prefix)
        officials: dict[str, int] = {}
        last = None
        while found and cursor.key().startswith(prefix):
            key = bytes(cursor.key())
            rec = layout.artifact_decoder.decode(cursor.value())
            if not run_id or rec.run_id == run_id:
                if len(out.artifacts) == size:
                    out.next_page_token = wire.make_token(fp, (last,))
                    break
                _, aname, version = layout.split_artifact_key(key)
                if aname not in officials:
                    raw = txn.get(layout.tkey_str_key(trec.tkey, aname), db=store.db["artnames"])
                    officials[aname] = layout.artname_decoder.decode(raw).official if raw is not None else 0
                to_proto(ns, thread_id, aname, version, rec, officials[aname] == version, out.artifacts.add())
            last = key
            found = cursor.next()
    return out


async def set_official(ctx: Ctx, req: apb.SetOfficialArtifactRequest) -> apb.SetOfficialArtifactResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    name = _name(req.name)

    def apply(tx: Tx):
        txn, store = tx.txn, tx.store
        trec = threads.require(txn, store, ns, thread_id)
        nkey = layout.tkey_str_key(trec.tkey, name)
        raw = txn.get(nkey, db=store.db["artnames"])
        if raw is None:
            raise ApiError("ARTIFACT_NOT_FOUND", f"no artifact {name!r} in thread {thread_id!r}", field="name",
                           thread_id=thread_id)
        nrec = layout.artname_decoder.decode(raw)
        resp = apb.SetOfficialArtifactResponse()
        if req.version:
            araw = txn.get(layout.artifact_key(trec.tkey, name, req.version), db=store.db["artifacts"])
            if araw is None:
                raise ApiError("ARTIFACT_NOT_FOUND", f"artifact {name!r} has no version {req.version}",
                               field="version", thread_id=thread_id)
            to_proto(ns, thread_id, name, req.version, layout.artifact_decoder.decode(araw), True, resp.artifact)
        nrec.official = req.version
        txn.put(nkey, layout.encode(nrec), db=store.db["artnames"])
        return resp

    return await context.write(ctx, ns, "SetOfficialArtifact", req, apb.SetOfficialArtifactResponse, apply)
