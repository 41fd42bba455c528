"""transfer: the TransferService calls — export a namespace from the serving store as a stream of the export
file's bytes, import one streamed in (ops/transfer.py does the work; docs/export-format.md is the format).

ExportNamespace runs the export in a worker thread over one read snapshot (writers go on; the snapshot's
pages stay until it ends) and hands the file to the call in chunks through a small queue: a slow reader
slows the export down, a reader that goes away stops it. ImportNamespace gathers the streamed bytes in
memory (never on disk: the file of an encrypted namespace holds plaintext; at most MAX_IMPORT_BYTES),
verifies the whole file off the loop, and only then imports it in short jobs (ops/transfer.import_served): a stream cut
short, a damaged file or a conflict writes nothing.

The stream is spooled, never held in memory and never on disk in plaintext (exportfile.Spool: an unlinked
file in the data directory, AES-CTR under a key that lives only in this process), so an import's memory does
not grow with the file; it is read from there by offset while it is verified and imported.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time

from agentstate.v1 import transfer_pb2 as xpb

from ..errors import ApiError, invalid
from ..ops import transfer as ops
from ..storage import exportfile
from . import validate
from .context import Ctx

DEFAULT_CHUNK = 1 << 20
MAX_CHUNK = 4 << 20
MAX_IMPORT_BYTES = 2 << 30  # an import stream is spooled (encrypted) while it is verified and imported
QUEUE_CHUNKS = 4  # chunks the export runs ahead of the reader
PROGRESS_EVERY = 0.5  # seconds between progress messages of one phase


class _Stopped(Exception):
    """The reader of an export went away: the worker stops."""


class _Sink:
    """A file-like object for exportfile.Writer that cuts what it is given into chunks and hands them to the
    call's queue (from the worker thread), waiting while the queue is full."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, chunk: int,
                 stop: threading.Event) -> None:
        self.loop, self.queue, self.chunk, self.stop = loop, queue, chunk, stop
        self.buf = bytearray()

    def put(self, item) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
        while True:
            try:
                fut.result(0.25)
                return
            except concurrent.futures.TimeoutError:
                if self.stop.is_set():
                    fut.cancel()
                    raise _Stopped() from None

    def write(self, data: bytes) -> None:
        if self.stop.is_set():
            raise _Stopped()
        self.buf += data
        while len(self.buf) >= self.chunk:
            self.put(("data", bytes(self.buf[:self.chunk])))
            del self.buf[:self.chunk]

    def flush(self) -> None:
        if self.buf:
            self.put(("data", bytes(self.buf)))
            self.buf.clear()


async def export_namespace(ctx: Ctx, request: xpb.ExportNamespaceRequest):
    """The ExportNamespace stream: data chunks with progress messages between them, then the summary."""
    store = ctx.store
    ns = validate.namespace(request.namespace)
    thread_id = validate.ident(request.thread_id, "thread_id", required=False) or None
    chunk = request.chunk_bytes or DEFAULT_CHUNK
    if chunk > MAX_CHUNK:
        raise invalid("chunk_bytes", f"at most {MAX_CHUNK} bytes")
    ops.encrypted_here(store, ns, request.refuse_encrypted)  # refusals before the stream begins
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(QUEUE_CHUNKS)
    stop = threading.Event()
    sink = _Sink(loop, queue, chunk, stop)
    last = {"at": 0.0, "phase": ""}

    def progress(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase == last["phase"] and done < total and now - last["at"] < PROGRESS_EVERY:
            return
        last["at"], last["phase"] = now, phase
        sink.put(("progress", xpb.TransferProgress(phase=phase, done=done, total=total)))

    def work() -> None:
        try:
            s = ops.export(store, None, ns, thread_id, progress, source=os.path.abspath(store.path),
                           refuse_encrypted=request.refuse_encrypted, out=sink)
            sink.put(("summary", xpb.ExportSummary(threads=s.threads, checkpoints=s.checkpoints, records=s.records,
                                                   blobs=s.blobs, bytes=s.bytes, blake3=s.blake3,
                                                   encrypted=s.encrypted)))
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the call, which reports it
            if not stop.is_set():
                try:
                    sink.put(("error", e))
                except _Stopped:
                    pass

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            kind, item = await queue.get()
            if kind == "data":
                yield xpb.ExportNamespaceResponse(data=item)
            elif kind == "progress":
                yield xpb.ExportNamespaceResponse(progress=item)
            elif kind == "summary":
                yield xpb.ExportNamespaceResponse(summary=item)
                break
            else:
                raise item
    finally:
        stop.set()  # a reader gone (or an error): the worker stops at its next chunk and ends its snapshot
        if worker.done():
            worker.result()


async def import_namespace(ctx: Ctx, requests) -> xpb.ImportNamespaceResponse:
    """The ImportNamespace call: header, the file's bytes, then (all in and verified) the import."""
    store = ctx.store
    it = requests.__aiter__()
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        raise invalid("header", "the stream is empty: its first message must be the header") from None
    if first.WhichOneof("part") != "header":
        raise invalid("header", "the first message must be the header")
    h = first.header
    ns = validate.namespace(h.namespace)
    if h.size > MAX_IMPORT_BYTES:
        raise ApiError("LIMIT_EXCEEDED", f"an import through the sidecar takes at most {MAX_IMPORT_BYTES:,} bytes "
                       f"(import a larger file offline: sidecar import --data-dir)", limit="import_bytes",
                       field="header.size")
    loop = asyncio.get_running_loop()
    # never in plaintext on disk (a file of an encrypted namespace holds plaintext), never whole in memory
    spool = exportfile.Spool(store.path)
    p = None
    try:
        async for msg in it:
            if msg.WhichOneof("part") != "data":
                raise invalid("header", "only the first message is a header; the others hold data")
            spool.write(msg.data)
            if spool.size > MAX_IMPORT_BYTES:
                raise ApiError("LIMIT_EXCEEDED", f"an import through the sidecar takes at most "
                               f"{MAX_IMPORT_BYTES:,} bytes (import a larger file offline: sidecar import "
                               f"--data-dir)", limit="import_bytes", field="data")
        spool.finish()
        received = spool.size
        if h.size and received != h.size:
            raise ApiError("EXPORT_FILE_INVALID", f"the stream ended after {received:,} of the {h.size:,} bytes "
                           f"its header announced; nothing was imported", field="data")
        p = await loop.run_in_executor(None, ops.verify_file, spool, ns)
        s = await ops.import_served(store, p, replace=h.replace, check_only=h.check_only,
                                    allow_plaintext=h.allow_plaintext,
                                    run_off_loop=lambda fn, *a: loop.run_in_executor(None, fn, *a))
    finally:
        spool.close()
    if not h.check_only:
        ctx.notify([(ns, trec["id"]) for trec, _ in p.threads])
        if s.replaced and ctx.on_garbage is not None:
            ctx.on_garbage()  # the replaced threads' values, if nothing else holds them
    return xpb.ImportNamespaceResponse(namespace=s.namespace, threads=s.threads, replaced=s.replaced,
                                       checkpoints=s.checkpoints, memory_items=s.memory_items,
                                       memory_revisions=s.memory_revisions, settings_kept=s.settings_kept,
                                       records=s.records, bytes=received, blake3=p.blake3, sealed=s.sealed,
                                       source_encrypted=s.source_encrypted)
