"""wal: the write-ahead log of the ``process`` durability mode.

In ``process`` mode a write is acknowledged once its changes are in this log
(``write()`` into the page cache, no fsync) and applied to the store's open
LMDB transaction; LMDB itself only ever commits with fsync (synced group
commits every few milliseconds). A SIGKILL of the sidecar loses the open
transaction but not the page cache, so the log has every acknowledged
change; on the next start :func:`replay` applies what LMDB has not committed.

A record is the *physical* change set of one request: the exact puts and
deletes its transaction made, in order (``[db index, key, value or None]``),
so replay needs no clocks, ids or request logic and gives the same bytes.

Record layout (big-endian): ``crc32 u32 | length u32 | seq u64 | payload``,
the CRC over length, seq and payload. Sequence numbers are contiguous; LMDB
stores the last one it committed under ``meta/wal_seq`` in the same
transaction. Replay applies, file by file in order, the records that follow
that number without a gap and stops at the first torn, corrupt or
out-of-order record: after an OS crash (which this mode does not promise to
survive) the tail of the log may be missing, and what replay applies is then
a prefix of the acknowledged history, never a hole in it. LMDB's own file is
never at risk: it is only written by synced commits.

Records are written in batches: the store gathers the records of the
writes that finish in one turn of its event loop and writes them with one
``write()`` (:meth:`Log.append_many`); they are acknowledged after it. A
batch has no frame of its own: each record keeps its CRC and length, so a
batch cut short by a crash ends the replay at its first torn record, and a
failed ``write()`` is cut off the file again before anything else is
written (so none of a failed batch is ever replayed).

Files are ``wal-<first seq, 20 digits>.log`` in the data directory; a new one
is started after a commit once the current one is big, and files whose
records are all committed are deleted.
"""
from __future__ import annotations

import logging
import os
import struct
import zlib
from typing import Callable, Iterator

import msgspec

log = logging.getLogger("sidecar.wal")

HEADER = struct.Struct(">IIQ")
_LEN_SEQ = struct.Struct(">IQ")
_CRC = struct.Struct(">I")
ROTATE_BYTES = 64 * 1024 * 1024
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


def file_name(first_seq: int) -> str:
    return f"wal-{first_seq:020d}.log"


def wal_files(path: str) -> list[tuple[int, str]]:
    """(first seq, full path) of the log files in ``path``, in order."""
    out = []
    for name in os.listdir(path):
        if name.startswith("wal-") and name.endswith(".log"):
            try:
                out.append((int(name[4:-4]), os.path.join(path, name)))
            except ValueError:
                continue
    return sorted(out)


def encode_record(seq: int, ops: list) -> bytes:
    payload = _encode(ops)
    body = _LEN_SEQ.pack(len(payload), seq) + payload
    return _CRC.pack(zlib.crc32(body)) + body


def read_records(data: bytes) -> Iterator[tuple[int, list]]:
    """(seq, ops) of the intact records at the start of ``data``; stops at the first damaged one."""
    pos, end = 0, len(data)
    while pos + HEADER.size <= end:
        crc, length, seq = HEADER.unpack_from(data, pos)
        stop = pos + HEADER.size + length
        if stop > end or zlib.crc32(data[pos + 4:stop]) != crc:
            return
        try:
            ops = _decode(data[pos + HEADER.size:stop])
        except msgspec.DecodeError:
            return
        yield seq, ops
        pos = stop


class Log:
    """The open log of a store in ``process`` mode (used by the store's owner thread only)."""

    def __init__(self, path: str, next_seq: int) -> None:
        self.path = path
        self.seq = next_seq - 1  # last sequence number written
        self.fd = -1
        self.file_first = next_seq
        self.size = 0
        self._dirty = False  # a failed batch may have left bytes after ``size`` (cut off before the next)
        self._open(next_seq)

    def _open(self, first_seq: int) -> None:
        name = os.path.join(self.path, file_name(first_seq))
        self.fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.file_first = first_seq
        self.size = os.fstat(self.fd).st_size
        self._dirty = False

    def append(self, ops: list) -> int:
        """Write one record (one write() call); returns its sequence number."""
        return self.append_many((ops,))

    def append_many(self, batch) -> int:
        """Write the records of ``batch`` (change sets, in order) with one write() call; returns the last
        sequence number. Each record keeps its own CRC and length, so a batch cut short on disk (a crash
        in the middle of the call) ends the replay at its first torn record. When the write fails
        (OSError: EIO, ENOSPC) the file is cut back to where the batch began, so no record of the
        failed batch stays behind for a replay, and the error is raised: none of the batch is logged.
        If even that cut fails, every later call tries it again first and fails until it succeeds."""
        if self._dirty:
            os.ftruncate(self.fd, self.size)
            self._dirty = False
        seq = self.seq
        parts = []
        for ops in batch:
            seq += 1
            payload = _encode(ops)
            body = _LEN_SEQ.pack(len(payload), seq) + payload
            parts.append(_CRC.pack(zlib.crc32(body)))
            parts.append(body)
        data = b"".join(parts)
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError:
            self._dirty = True
            try:
                os.ftruncate(self.fd, self.size)
                self._dirty = False
            except OSError as e:
                log.error("wal: cannot cut a failed batch off %s: %s", file_name(self.file_first), e)
            raise
        self.seq = seq
        self.size += len(data)
        return seq

    def committed(self, seq: int, cut: bool = False) -> None:
        """LMDB has committed everything up to ``seq``: start a new file when this one is big (or, with
        ``cut``, whatever its size: the disk is short of space) and delete the files whose records are
        all committed."""
        if (self.size >= ROTATE_BYTES or cut and self.size) and seq == self.seq:
            os.close(self.fd)
            self._open(seq + 1)
        for first, name in wal_files(self.path):
            if first < self.file_first:
                try:
                    os.unlink(name)
                except FileNotFoundError:
                    pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def replay(path: str, applied: int, apply: Callable[[int, list], None]) -> int:
    """Apply the records after ``applied`` (contiguously) with ``apply(seq, ops)``; returns the last
    sequence applied (``applied`` when none). Damaged tails and gaps end the replay (logged)."""
    last = applied
    for first, name in wal_files(path):
        with open(name, "rb") as f:
            data = f.read()
        consumed = 0
        for seq, ops in read_records(data):
            consumed += 1
            if seq <= last:
                if last > applied:  # a record not after one already applied: stale bytes
                    log.warning("wal %s: record %d out of order after %d; replay stops", name, seq, last)
                    return last
                continue  # committed before the crash
            if seq != last + 1:
                log.warning("wal %s: gap before record %d (last applied %d); replay stops", name, seq, last)
                return last
            apply(seq, ops)
            last = seq
        if len(data) and consumed == 0 and first > applied:
            log.warning("wal %s: no intact record; replay stops", name)
            return last
    return last
