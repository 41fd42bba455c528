"""exportfile: the export file format (docs/export-format.md) — framing, header, trailer, full verification.

An export file is a sequence of frames, each a 4-byte big-endian length and one MessagePack map (a
*record*, its kind in ``"t"``). The first record is the header, the last the trailer; the trailer holds
the number of records of each kind and the BLAKE3 of every byte before the trailer's frame, so a file
cut short, with a byte changed, or with records added or removed is refused before anything of it is
used. Values are deduplicated inside the file: ``blob`` records hold canonical encodings
(docs/encoding.md) under their BLAKE3, and records refer to them by that hash.

This module knows frames and values only; which records a store turns into (and back) is
ops/transfer.py's.
"""
from __future__ import annotations

import array
import datetime as dt
import io
import os
import struct
import tempfile
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

import msgspec
from blake3 import blake3

FORMAT = "agentstate-export"
VERSION = 1
#: The newest file version this sidecar reads (every version ever written stays readable).
READABLE = (1,)
MAX_FRAME = 256 << 20  # one record; a larger length means a damaged file
_LEN = struct.Struct(">I")
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(dict)


class ExportFileError(ValueError):
    """The file is not a complete, intact export this sidecar can read (what is wrong, where)."""

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def blob_hash(encoding: bytes) -> bytes:
    return blake3(encoding).digest()


def now_text() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Writer:
    """Writes one export file: header, records (blobs once each), trailer; into a temporary file renamed
    into place by :meth:`finish` (a crash never leaves a half export under the target's name)."""

    def __init__(self, path: str | None, source: dict, scope: dict, out: BinaryIO | None = None) -> None:
        """``out``: write the file there instead (a stream: no temporary file, no rename; ``path`` None)."""
        self._tmp = None
        if out is not None:
            self.path = ""
            self._f: BinaryIO = out
        else:
            self.path = os.path.abspath(path)
            if os.path.exists(self.path):
                raise ExportFileError(f"{self.path} exists; an export never overwrites")
            parent = os.path.dirname(self.path)
            os.makedirs(parent, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=".export-", dir=parent)
            self._f = os.fdopen(fd, "wb")
        self._hash = blake3()
        self.counts: dict[str, int] = {}
        self.bytes = 0
        self._blobs: set[bytes] = set()
        self.write({"t": "header", "format": FORMAT, "version": VERSION, "created": now_text(), "source": source,
                    "scope": scope})

    def write(self, record: dict) -> None:
        data = _enc.encode(record)
        frame = _LEN.pack(len(data)) + data
        self._f.write(frame)
        self._hash.update(frame)
        self.bytes += len(frame)
        kind = record["t"]
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def blob(self, encoding: bytes) -> bytes:
        """The hash of ``encoding``, written as a blob record the first time."""
        h = blob_hash(encoding)
        if h not in self._blobs:
            self._blobs.add(h)
            self.write({"t": "blob", "h": h, "enc": encoding})
        return h

    def finish(self) -> str:
        """Write the trailer, fsync, rename into place; the file's BLAKE3 (of everything before the trailer)."""
        digest = self._hash.hexdigest()
        data = _enc.encode({"t": "end", "counts": dict(self.counts), "blake3": digest})
        self._f.write(_LEN.pack(len(data)) + data)
        self.bytes += 4 + len(data)
        self._f.flush()
        if self._tmp is None:  # a stream: its reader keeps it
            return digest
        os.fsync(self._f.fileno())
        self._f.close()
        if os.path.exists(self.path):
            os.unlink(self._tmp)
            raise ExportFileError(f"{self.path} exists; an export never overwrites")
        os.rename(self._tmp, self.path)
        dfd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return digest

    def abort(self) -> None:
        if self._tmp is None:
            return
        try:
            self._f.close()
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)


def frames(f: BinaryIO, tick: Callable[[int], None] | None = None) -> Iterator[tuple[bytes, dict]]:
    """(frame bytes, record) of each frame; ExportFileError on a cut or undecodable frame."""
    offset = 0
    while True:
        head = f.read(4)
        if not head:
            return
        if len(head) < 4:
            raise ExportFileError(f"cut short at byte {offset} (a frame length is incomplete)")
        (n,) = _LEN.unpack(head)
        if n > MAX_FRAME:
            raise ExportFileError(f"damaged at byte {offset}: a frame of {n} bytes")
        data = f.read(n)
        if len(data) < n:
            raise ExportFileError(f"cut short at byte {offset} (a frame of {n} bytes holds {len(data)})")
        try:
            rec = _dec.decode(data)
        except msgspec.DecodeError as e:
            raise ExportFileError(f"damaged at byte {offset}: the record does not decode ({e})") from None
        if not isinstance(rec.get("t"), str):
            raise ExportFileError(f"damaged at byte {offset}: a record without a kind")
        offset += 4 + n
        if tick is not None:
            tick(offset)
        yield head + data, rec


@dataclass
class Contents:
    """A verified export file: its header, its records in order (trailer and blobs apart) and its values."""
    header: dict
    records: list[dict] = field(default_factory=list)
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    blake3: str = ""
    bytes: int = 0


def read(path, progress: Callable[[str, int, int], None] | None = None) -> Contents:
    """Read and verify a whole export file (a path, or the file's bytes: an import streamed to a serving
    sidecar): framing, header and version, every blob against its hash, every value reference, the
    trailer's counts and BLAKE3. Raises ExportFileError; returns what it holds."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        data = bytes(path)
        total, path, opened = len(data), "the stream", (lambda: io.BytesIO(data))
    else:
        total, opened = os.path.getsize(path), (lambda: open(path, "rb"))
    h = blake3()
    contents: Contents | None = None
    counts: dict[str, int] = {}
    trailer: dict | None = None
    tick = (lambda done: progress("reading", done, total)) if progress else None
    with opened() as f:
        for frame, rec in frames(f, tick):
            kind = rec["t"]
            if trailer is not None:
                raise ExportFileError("records after the trailer")
            if contents is None:
                if kind != "header" or rec.get("format") != FORMAT:
                    raise ExportFileError(f"{path}: not an {FORMAT} file (no header)")
                version = rec.get("version")
                if version not in READABLE:
                    raise ExportFileError(f"{path}: export format version {version!r}; this sidecar reads "
                                          f"{', '.join(map(str, READABLE))}", unsupported=True)
                contents = Contents(header=rec)
            elif kind == "end":
                trailer = rec
                continue
            elif kind == "header":
                raise ExportFileError("a second header")
            h.update(frame)
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "blob":
                bh, enc = rec.get("h"), rec.get("enc")
                if not isinstance(bh, bytes) or not isinstance(enc, bytes) or blob_hash(enc) != bh:
                    raise ExportFileError(f"a blob does not match its hash ({bh.hex() if isinstance(bh, bytes) else bh!r})")
                contents.blobs[bh] = enc
            elif kind != "header":
                contents.records.append(rec)
    if contents is None:
        raise ExportFileError(f"{path}: empty")
    if trailer is None:
        raise ExportFileError(f"{path}: cut short (no trailer)")
    digest = h.hexdigest()
    if trailer.get("blake3") != digest:
        raise ExportFileError(f"{path}: damaged (BLAKE3 {digest} of the records, the trailer says "
                              f"{trailer.get('blake3')!r})")
    if trailer.get("counts") != counts:
        raise ExportFileError(f"{path}: the trailer's counts {trailer.get('counts')!r} are not the file's {counts!r}")
    contents.counts, contents.blake3, contents.bytes = counts, digest, total
    return contents


# ----------------------------------------------------------------- reading by offset (an import)

class Source:
    """A file an import reads twice and more: sequentially (:meth:`reader`) and by offset (:meth:`pread`).
    A path's file is read in place; a serving sidecar's import stream is spooled (:class:`Spool`)."""

    def __init__(self, path: str) -> None:
        self.name = path
        self._f = open(path, "rb")
        st = os.fstat(self._f.fileno())
        self.size = st.st_size
        self._stamp = (st.st_ino, st.st_size, st.st_mtime_ns)

    def reader(self) -> BinaryIO:
        return open(self.name, "rb")

    def pread(self, n: int, offset: int) -> bytes:
        return os.pread(self._f.fileno(), n, offset)

    def check_unchanged(self) -> None:
        """ExportFileError when the file was changed after it was verified (an import reads it again)."""
        st = os.stat(self.name)
        if (st.st_ino, st.st_size, st.st_mtime_ns) != self._stamp:
            raise ExportFileError(f"{self.name} changed while it was imported (verify it again)")

    def close(self) -> None:
        self._f.close()


class Spool(Source):
    """An import stream kept on disk while it is verified and imported, never in plaintext: each byte is
    AES-256-CTR encrypted under a key made for this spool and kept only in memory, in a file unlinked as soon
    as it is created (nothing is left of it once the process ends, and what is on disk is useless without the
    key). Bounded memory whatever the stream's size (a file of an encrypted namespace holds plaintext)."""

    def __init__(self, directory: str) -> None:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: PLC0415
        self._Cipher, self._algo, self._modes = Cipher, algorithms, modes
        self._key, self._iv = os.urandom(32), int.from_bytes(os.urandom(16), "big") & ~((1 << 64) - 1)
        self.name = "the stream"
        fd, tmp = tempfile.mkstemp(prefix=".import-spool-", dir=directory)
        os.unlink(tmp)  # only this process's descriptor reaches it
        self._f = os.fdopen(fd, "w+b")
        self._enc = self._cipher(0).encryptor()
        self.size = 0

    def _cipher(self, block: int):
        iv = ((self._iv + block) % (1 << 128)).to_bytes(16, "big")
        return self._Cipher(self._algo.AES(self._key), self._modes.CTR(iv))

    def write(self, data: bytes) -> None:
        self._f.write(self._enc.update(data))
        self.size += len(data)

    def finish(self) -> None:
        self._f.flush()

    def pread(self, n: int, offset: int) -> bytes:
        n = max(0, min(n, self.size - offset))
        data = os.pread(self._f.fileno(), n, offset)
        dec = self._cipher(offset // 16).decryptor()
        skip = offset % 16
        return dec.update(b"\0" * skip + data)[skip:] if skip else dec.update(data)

    def reader(self) -> BinaryIO:
        return io.BufferedReader(_SpoolReader(self), 1 << 20)

    def check_unchanged(self) -> None:
        pass  # unlinked: nothing but this process writes it

    def close(self) -> None:
        self._f.close()


class _SpoolReader(io.RawIOBase):
    def __init__(self, spool: Spool) -> None:
        self.spool, self.pos = spool, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.spool.pread(len(b), self.pos)
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


class Index:
    """A verified export file read by offset (:func:`scan`): its header, counts and BLAKE3, where each record
    is (not the records), and where each blob is (not its bytes). What it holds grows with the number of
    records (12 bytes each) and of distinct values (about 120 bytes each), never with the bytes of the file."""

    def __init__(self, src: Source, header: dict) -> None:
        self.src, self.header = src, header
        self.offsets = array.array("Q")  # of each record's MessagePack map (not blobs, header, trailer)
        self.lengths = array.array("I")
        self.blob_at: dict[bytes, int] = {}  # blob hash -> offset << 32 | length of its encoding
        self.counts: dict[str, int] = {}
        self.blake3 = ""
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def record(self, i: int) -> dict:
        """The ``i``-th record (0: the first after the header, blobs apart)."""
        n = self.lengths[i]
        data = self.src.pread(n, self.offsets[i])
        if len(data) != n:
            raise ExportFileError(f"{self.src.name} changed while it was imported (a record is cut short)")
        try:
            return _dec.decode(data)
        except msgspec.DecodeError:
            raise ExportFileError(f"{self.src.name} changed while it was imported (a record does not decode)") \
                from None

    def records(self, indices=None) -> Iterator[dict]:
        for i in range(len(self.offsets)) if indices is None else indices:
            yield self.record(i)

    def blob_size(self, h: bytes) -> int:
        return self.blob_at[h] & 0xFFFFFFFF

    def blob(self, h: bytes) -> bytes:
        """The encoding the blob ``h`` holds, checked against its hash again (read again from the file)."""
        at = self.blob_at[h]
        n = at & 0xFFFFFFFF
        enc = self.src.pread(n, at >> 32)
        if len(enc) != n or blob_hash(enc) != h:
            raise ExportFileError(f"{self.src.name} changed while it was imported (blob {h.hex()})")
        return enc


def scan(src: Source, progress: Callable[[str, int, int], None] | None = None) -> Index:
    """Read and verify a whole export file in one streaming pass, keeping where things are, not what they
    hold: framing, header and version, every blob against its hash, the trailer's counts and BLAKE3 (as
    :func:`read`). Raises ExportFileError."""
    path, total = src.name, src.size
    h = blake3()
    index: Index | None = None
    counts: dict[str, int] = {}
    trailer: dict | None = None
    tick = (lambda done: progress("reading", done, total)) if progress else None
    offset = 0
    with src.reader() as f:
        for frame, rec in frames(f, tick):
            kind = rec["t"]
            at, offset = offset, offset + len(frame)
            if trailer is not None:
                raise ExportFileError("records after the trailer")
            if index is None:
                if kind != "header" or rec.get("format") != FORMAT:
                    raise ExportFileError(f"{path}: not an {FORMAT} file (no header)")
                version = rec.get("version")
                if version not in READABLE:
                    raise ExportFileError(f"{path}: export format version {version!r}; this sidecar reads "
                                          f"{', '.join(map(str, READABLE))}", unsupported=True)
                index = Index(src, rec)
            elif kind == "end":
                trailer = rec
                continue
            elif kind == "header":
                raise ExportFileError("a second header")
            h.update(frame)
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "blob":
                bh, enc = rec.get("h"), rec.get("enc")
                if not isinstance(bh, bytes) or not isinstance(enc, bytes) or blob_hash(enc) != bh:
                    raise ExportFileError(f"a blob does not match its hash ({bh.hex() if isinstance(bh, bytes) else bh!r})")
                if bh not in index.blob_at:
                    # where its bytes are (MessagePack holds bin bytes verbatim): read back from there
                    pos = frame.rfind(enc) if enc else len(frame)
                    index.blob_at[bh] = (at + pos) << 32 | len(enc)
            elif kind != "header":
                index.offsets.append(at + 4)
                index.lengths.append(len(frame) - 4)
    if index is None:
        raise ExportFileError(f"{path}: empty")
    if trailer is None:
        raise ExportFileError(f"{path}: cut short (no trailer)")
    digest = h.hexdigest()
    if trailer.get("blake3") != digest:
        raise ExportFileError(f"{path}: damaged (BLAKE3 {digest} of the records, the trailer says "
                              f"{trailer.get('blake3')!r})")
    if trailer.get("counts") != counts:
        raise ExportFileError(f"{path}: the trailer's counts {trailer.get('counts')!r} are not the file's {counts!r}")
    index.counts, index.blake3, index.bytes = counts, digest, total
    return index


# ----------------------------------------------------------------- values

SHAPES = ("value", "list", "map")


def check_value(v, blobs, where: str) -> None:
    """ExportFileError unless ``v`` is a value of the file's model whose blobs are all present."""
    if not isinstance(v, dict) or v.get("shape") not in SHAPES or not isinstance(v.get("root", b""), bytes):
        raise ExportFileError(f"{where}: not a value")
    shape = v["shape"]
    if shape == "value":
        refs = [v.get("h")]
    elif shape == "list":
        refs = v.get("items")
        if not isinstance(refs, list):
            raise ExportFileError(f"{where}: a list value without items")
    else:
        entries = v.get("entries")
        if not isinstance(entries, list) or not all(
                isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) for e in entries):
            raise ExportFileError(f"{where}: a map value without entries")
        refs = [e[1] for e in entries]
    for r in refs:
        if not isinstance(r, bytes) or r not in blobs:
            raise ExportFileError(f"{where}: refers to a value the file does not hold")
