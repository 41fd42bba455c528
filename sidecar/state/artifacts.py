"""artifacts: named, versioned files of a thread, stored as chunked values; their records and rules.

A file is stored as the value "these bytes" (canonical MessagePack ``bin``)
with the core's value nodes, so its root hash is exactly what
``hotpath.value_node`` gives for the whole encoding and identical chunks are
shared with everything else in the store. Uploads are chunked as they
stream in, without holding the file in memory (:class:`Chunker`):

* FastCDC's rolling hash starts CDC_MIN bytes into each chunk, so the 5-byte
  ``bin32`` header (whose length field is known only at the end) never
  influences a cut: the stream is cut with a placeholder header and the
  first chunk is finished when the size is known.
* A cut is final once CDC_MAX bytes follow the chunk's start; complete chunks
  are stored in batches (:func:`stage`) and listed in an ``uploads``
  record, which garbage collection treats as a root until the upload commits
  (:func:`commit`: then the artifact record is the root) or fails (then the
  record goes and the chunks become garbage unless shared).

Files under 64 KiB are buffered and stored in one go (their header is
shorter). The messages of an upload and a download are the api's
(sidecar/api/artifacts.py).

Records: ``artifacts`` (tkey + name + version: the version's record),
``artnames`` (tkey + name: latest and official version), ``uploads``
(upload id: chunks staged so far).
"""
from __future__ import annotations

from typing import Iterator

import msgspec

from agentstate import codec

from ..errors import ApiError, invalid, thread_not_found
from ..storage import hotpath as hp
from ..storage import encryption, layout, nodes, records, usage
from ..storage.layout import ArtifactNameRec, ArtifactRec, ThreadRec, UploadRec
from ..storage.store import Store, now_us
from . import runstate
from .runstate import Tx

CDC_MIN = 4 * 1024
CDC_MAX = 64 * 1024
SMALL = 65536  # data shorter than this gets a bin8/bin16 header: buffered whole
CHUNKS_PER_READ = 64  # a download reads this many chunks per read transaction


def require_thread(txn, store: Store, ns: str, thread_id: str, field: str = "thread_id") -> ThreadRec:
    """The record of the thread the artifacts are on; THREAD_NOT_FOUND naming ``field`` when there is none."""
    rec = records.thread(txn, store, ns, thread_id)
    if rec is None:
        raise thread_not_found(ns, thread_id, field)
    return rec


# ----------------------------------------------------------------- content

class Chunker:
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


def small_content(data: bytes) -> tuple[bytes, list]:
    """Root hash and nodes to store of a file buffered whole (under SMALL bytes)."""
    built: list = []
    root = hp.value_node(codec.encode(data), built)
    return root, built


def stage(txn, store: Store, ns: str, upload_id: bytes, batch: list[tuple[bytes, bytes]]) -> tuple[dict, int]:
    """Store a batch of an upload's chunks and list them in the upload's record: ({hash: node id}, bytes
    new to the store)."""
    new_bytes = sum(len(node) for h, node in batch if nodes.index_get(txn, store, h, ns) is None)
    ids = nodes.write(txn, store, batch, {}, [h for h, _ in batch], ns)
    raw = txn.get(upload_id, db=store.db["uploads"])
    rec = UploadRec(layout.FORMAT_VERSION, now_us(), []) if raw is None else layout.upload_decoder.decode(raw)
    rec.chunks.extend(ids[h] for h, _ in batch)
    txn.put(upload_id, layout.encode(rec), db=store.db["uploads"])
    keep = store.gc_keep
    if keep is not None:
        keep.update(ids.values())
    return {h: ids[h] for h, _ in batch}, new_bytes


def drop_upload(txn, store: Store, upload_id: bytes) -> None:
    """Forget an upload's record (its staged chunks become garbage unless something else holds them)."""
    txn.delete(upload_id, db=store.db["uploads"])


def drop_stale_uploads(store: Store) -> int:
    """At startup: uploads cut off by a crash or restart can never finish; forget them."""
    def job(txn):
        db = store.db["uploads"]
        keys = [bytes(k) for k in txn.cursor(db=db).iternext(values=False)]
        for k in keys:
            txn.delete(k, db=db)
        return len(keys)
    return store.write(job)


def commit(tx: Tx, ns: str, thread_id: str, name: str, *, run_id: str, step_id: str, content_type: str,
           metadata: bytes, official: bool, root: bytes, size: int, built: list, known: dict[bytes, bytes],
           upload_id: bytes) -> tuple[ArtifactRec, ArtifactNameRec, int]:
    """(record, name record, bytes new to the store): the next version of artifact ``name`` of the thread,
    with content ``root`` (nodes ``built`` still to store, ``known`` staged); the upload's record goes and
    an ``agentstate.artifact.created`` event is appended to the thread."""
    txn, store = tx.txn, tx.store
    trec = require_thread(txn, store, ns, thread_id)
    if run_id:
        run = tx.require_run(ns, run_id, "header.run_id")
        if run.tkey != trec.tkey:
            raise invalid("header.run_id", f"run {run_id!r} works on thread {run.thread_id!r}")
    new_bytes = sum(len(node) for h, node in built if nodes.index_get(txn, store, h, ns) is None)
    ids = nodes.write(txn, store, built, known, [root], ns)
    keep = store.gc_keep
    if keep is not None:
        keep.update(ids.values())
        keep.update(known.values())
    nkey = layout.tkey_str_key(trec.tkey, name)
    raw = txn.get(nkey, db=store.db["artnames"])
    nrec = ArtifactNameRec(layout.FORMAT_VERSION, 0, 0) if raw is None else layout.artname_decoder.decode(raw)
    nrec.latest += 1
    if official:
        nrec.official = nrec.latest
    txn.put(nkey, layout.encode(nrec), db=store.db["artnames"])
    rec = ArtifactRec(layout.FORMAT_VERSION, ids[root], root, size, content_type,
                      msgspec.Raw(metadata), run_id, step_id, tx.now)
    txn.put(layout.artifact_key(trec.tkey, name, nrec.latest), layout.encode(rec), db=store.db["artifacts"])
    usage.add(txn, store, ns, trec.tkey, nbytes=size, items=1)
    drop_upload(txn, store, upload_id)
    tx.append_event(ns, thread_id, trec.tkey, layout.EventRec(
        layout.FORMAT_VERSION, run_id, step_id, runstate.SERVER_EVENT_PREFIX + "artifact.created",
        runstate.encode_obj({"name": name, "version": nrec.latest, "size": size}), "", tx.now))
    return rec, nrec, new_bytes


# ----------------------------------------------------------------- reading

def resolve(txn, store: Store, ns: str, thread_id: str, name: str, version: int,
            ) -> tuple[ThreadRec, ArtifactNameRec, int, ArtifactRec]:
    """(thread, name record, version, record) of artifact ``name`` at ``version`` (0: the official one,
    else the latest)."""
    trec = require_thread(txn, store, ns, thread_id)
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


def open_content(txn, store: Store, ns: str, thread_id: str, name: str, version: int,
                 ) -> tuple[ArtifactNameRec, int, ArtifactRec, bytes]:
    """(name record, version, record, root node) of the artifact to download (see :func:`resolve`)."""
    _, nrec, v, rec = resolve(txn, store, ns, thread_id, name, version)
    root = txn.get(rec.content, db=store.db["nodes"])
    if root is None:
        raise ApiError("ARTIFACT_NOT_FOUND", f"artifact {name!r} version {v} is being deleted", field="name")
    return nrec, v, rec, bytes(root)


def _bin_header_len(first: bytes) -> int:
    return {0xC4: 2, 0xC5: 3, 0xC6: 5}[first[0]]


def content(store: Store, root: bytes, name: str, version: int) -> Iterator[bytes]:
    """The file's bytes, piece by piece, from its root node (:func:`open_content`): one piece for a value
    node, else a piece per chunk, read CHUNKS_PER_READ chunks per short read transaction. ARTIFACT_NOT_FOUND
    when a chunk is gone (the artifact was deleted meanwhile)."""
    H = hp.HASH_SIZE
    if root[H] != hp.TAG_CHUNKED:  # one value node (maybe stored compressed)
        enc = hp.stored_encoding(root, None)
        yield enc[_bin_header_len(enc):]
        return
    count = int.from_bytes(root[H + 9:H + 13], "big")
    ids = [root[H + 13 + i * hp.ID_SIZE:H + 13 + (i + 1) * hp.ID_SIZE] for i in range(count)]
    first = True  # the MessagePack bin header starts the first chunk (bin16 or bin32)
    for i in range(0, len(ids), CHUNKS_PER_READ):
        with store.read() as txn:
            recs = [txn.get(node_id, db=store.db["nodes"]) for node_id in ids[i:i + CHUNKS_PER_READ]]
            parts = [None if r is None else bytes(encryption.plain(r)[H + 1:]) for r in recs]  # sealed: opened
        for part in parts:
            if part is None:
                raise ApiError("ARTIFACT_NOT_FOUND", f"artifact {name!r} version {version} was deleted during the "
                               "download", field="name")
            if first:
                part, first = part[_bin_header_len(part):], False
            yield part


def page(txn, store: Store, ns: str, thread_id: str, *, name: str, run_id: str, after: bytes | None, size: int,
         ) -> tuple[list[tuple[str, int, ArtifactRec, bool]], bytes | None]:
    """One page of a thread's artifact versions (only of ``name`` and of run ``run_id`` when given), in
    (name, version) order after record key ``after``: ([(name, version, record, official)], the key to
    continue after, or None at the end)."""
    trec = require_thread(txn, store, ns, thread_id)
    prefix = layout.artifact_prefix(trec.tkey, name) if name else layout.tkey_prefix(trec.tkey)
    cursor = txn.cursor(db=store.db["artifacts"])
    found = cursor.set_range(after + b"\x00" if after is not None else prefix)
    officials: dict[str, int] = {}
    out: list[tuple[str, int, ArtifactRec, bool]] = []
    last = None
    while found and cursor.key().startswith(prefix):
        key = bytes(cursor.key())
        rec = layout.artifact_decoder.decode(cursor.value())
        if not run_id or rec.run_id == run_id:
            if len(out) == size:
                return out, last
            _, aname, version = layout.split_artifact_key(key)
            if aname not in officials:
                raw = txn.get(layout.tkey_str_key(trec.tkey, aname), db=store.db["artnames"])
                officials[aname] = layout.artname_decoder.decode(raw).official if raw is not None else 0
            out.append((aname, version, rec, officials[aname] == version))
        last = key
        found = cursor.next()
    return out, None


# ----------------------------------------------------------------- changing

def set_official(txn, store: Store, ns: str, thread_id: str, name: str, version: int) -> ArtifactRec | None:
    """Make ``version`` of artifact ``name`` the official one (0: none); its record (None for 0)."""
    trec = require_thread(txn, store, ns, thread_id)
    nkey = layout.tkey_str_key(trec.tkey, name)
    raw = txn.get(nkey, db=store.db["artnames"])
    if raw is None:
        raise ApiError("ARTIFACT_NOT_FOUND", f"no artifact {name!r} in thread {thread_id!r}", field="name",
                       thread_id=thread_id)
    nrec = layout.artname_decoder.decode(raw)
    rec = None
    if version:
        araw = txn.get(layout.artifact_key(trec.tkey, name, version), db=store.db["artifacts"])
        if araw is None:
            raise ApiError("ARTIFACT_NOT_FOUND", f"artifact {name!r} has no version {version}",
                           field="version", thread_id=thread_id)
        rec = layout.artifact_decoder.decode(araw)
    nrec.official = version
    txn.put(nkey, layout.encode(nrec), db=store.db["artnames"])
    return rec


def delete_thread_artifacts(txn, store: Store, ns: str, tkey: int) -> None:
    """Delete a thread's artifact versions and names (their content becomes garbage unless shared)."""
    prefix = layout.tkey_prefix(tkey)
    for name in ("artifacts", "artnames"):
        records.delete_prefix(txn, store.db[name], prefix)
