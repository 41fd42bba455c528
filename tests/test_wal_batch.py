"""Process durability writes the log records of one owner-loop turn with one write(): many writes that
run in the same turn cost one system call, none is acknowledged before its record is written, a batch
cut short on disk replays as a prefix, and a failing write() fails every write of its batch."""
from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.errors import ApiError
from sidecar.storage import wal
from sidecar.storage.store import Store

N = 12  # writes in one loop turn


def _ops(seq: int) -> list:
    return [[0, f"key-{seq}".encode(), f"value-{seq}".encode() * 3], [2, b"gone", None]]


class _Writes:
    """Counts (and can fail) the os.write calls on one file descriptor."""

    def __init__(self, monkeypatch, fd_of) -> None:
        self.calls = 0
        self.fail: int | None = None  # errno to raise on the next call (after writing half of it)
        self._fd_of = fd_of
        self._real = os.write
        monkeypatch.setattr(os, "write", self._write)

    def _write(self, fd, data):
        if fd != self._fd_of():
            return self._real(fd, data)
        self.calls += 1
        if self.fail is not None:
            code, self.fail = self.fail, None
            self._real(fd, bytes(data[: len(data) // 2]))  # part of the batch reached the file
            raise OSError(code, os.strerror(code))
        return self._real(fd, data)


def _replayed(path) -> list[tuple[int, list]]:
    seen: list[tuple[int, list]] = []
    wal.replay(str(path), 0, lambda seq, ops: seen.append((seq, ops)))
    return seen


# ------------------------------------------------------------------ the log itself


def test_append_many_is_one_write_and_replays_in_order(tmp_path, monkeypatch):
    log = wal.Log(str(tmp_path), 1)
    writes = _Writes(monkeypatch, lambda: log.fd)
    try:
        assert log.append_many([_ops(s) for s in range(1, N + 1)]) == N
        assert writes.calls == 1
        assert log.append(_ops(N + 1)) == N + 1 and writes.calls == 2
    finally:
        log.close()
    assert _replayed(tmp_path) == [(s, _ops(s)) for s in range(1, N + 2)]


def test_batch_bytes_equal_the_single_records(tmp_path):
    """A batch is the concatenation of the records encode_record gives (no frame of its own)."""
    log = wal.Log(str(tmp_path), 5)
    try:
        log.append_many([_ops(s) for s in (5, 6, 7)])
    finally:
        log.close()
    with open(os.path.join(tmp_path, wal.file_name(5)), "rb") as f:
        assert f.read() == b"".join(wal.encode_record(s, _ops(s)) for s in (5, 6, 7))


@pytest.mark.parametrize("cut", [1, 9, "mid"])
def test_a_torn_batch_at_the_tail_replays_the_records_before_the_tear(tmp_path, cut):
    log = wal.Log(str(tmp_path), 1)
    try:
        log.append_many([_ops(1), _ops(2)])
        log.append_many([_ops(s) for s in (3, 4, 5)])
    finally:
        log.close()
    name = os.path.join(tmp_path, wal.file_name(1))
    sizes = [len(wal.encode_record(s, _ops(s))) for s in range(1, 6)]
    # the second batch torn inside its second record (record 4): header only, header and a bit, half
    tear = sum(sizes[:3]) + (sizes[3] // 2 if cut == "mid" else cut)
    os.truncate(name, tear)
    assert [s for s, _ in _replayed(tmp_path)] == [1, 2, 3]


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_a_failed_batch_write_leaves_no_record_behind(tmp_path, monkeypatch, code):
    """write() fails after part of the batch reached the file: the part is cut off again, the sequence does
    not move, and the next batch follows the last good record (the replay sees no failed record)."""
    log = wal.Log(str(tmp_path), 1)
    writes = _Writes(monkeypatch, lambda: log.fd)
    try:
        log.append_many([_ops(1), _ops(2)])
        size = log.size
        writes.fail = code
        with pytest.raises(OSError) as info:
            log.append_many([_ops(s) for s in (3, 4, 5, 6)])
        assert info.value.errno == code
        assert log.seq == 2 and os.fstat(log.fd).st_size == size
        assert log.append_many([_ops(3), _ops(4)]) == 4
    finally:
        log.close()
    assert _replayed(tmp_path) == [(s, _ops(s)) for s in (1, 2, 3, 4)]


def test_a_failed_cut_is_retried_before_the_next_batch(tmp_path, monkeypatch):
    log = wal.Log(str(tmp_path), 1)
    writes = _Writes(monkeypatch, lambda: log.fd)
    real_truncate = os.ftruncate
    refusals = [1]

    def ftruncate(fd, size):
        if refusals:
            refusals.pop()
            raise OSError(errno.EIO, "injected")
        return real_truncate(fd, size)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    try:
        log.append_many([_ops(1)])
        writes.fail = errno.EIO
        with pytest.raises(OSError):
            log.append_many([_ops(2), _ops(3)])  # the write fails, and so does the cut after it
        assert os.fstat(log.fd).st_size > log.size  # the failed batch's bytes are still there
        assert log.append_many([_ops(2)]) == 2  # cut first, then written
    finally:
        log.close()
    assert _replayed(tmp_path) == [(1, _ops(1)), (2, _ops(2))]


# ------------------------------------------------------------------ the store


def _in_one_turn(s: Store, n: int, writes: _Writes, key=b"k"):
    """Start ``n`` writes in one callback of the owner loop; (futures, write() calls and acknowledged
    futures seen at the end of that callback)."""
    db = s.db["meta"]
    out: concurrent.futures.Future = concurrent.futures.Future()

    def turn():
        try:
            futs = [s.start(lambda txn, i=i: (txn.put(key + b"-%d" % i, b"v%d" % i, db=db), i)[1]) for i in range(n)]
            out.set_result((futs, writes.calls, sum(f.done() for f in futs)))
        except BaseException as e:  # noqa: BLE001
            out.set_exception(e)

    s._loop.call_soon_threadsafe(turn)
    return out.result(10)


def _results(s: Store, futs) -> list:
    async def gather():
        return await asyncio.gather(*futs, return_exceptions=True)

    return asyncio.run_coroutine_threadsafe(gather(), s._loop).result(10)


def test_writes_of_one_turn_share_one_write_and_are_acknowledged_after_it(tmp_path, monkeypatch):
    s = Store(str(tmp_path / "d"), durability="process", commit_interval=600)
    try:
        writes = _Writes(monkeypatch, lambda: s._log.fd)
        first = s._log.seq
        futs, calls_in_turn, acked_in_turn = _in_one_turn(s, N, writes)
        assert calls_in_turn == 0 and acked_in_turn == 0  # nothing acknowledged before its record is written
        assert _results(s, futs) == list(range(N))
        assert writes.calls == 1 and s._log.seq == first + N
        with s.read() as txn:  # (another thread: waits for the commit of what was acknowledged)
            assert [txn.get(b"k-%d" % i, db=s.db["meta"]) for i in range(N)] == [b"v%d" % i for i in range(N)]
    finally:
        s.close()


@pytest.mark.parametrize("code,reason", [(errno.EIO, "STORAGE_IO_ERROR"), (errno.ENOSPC, "STORAGE_FULL")])
def test_a_failed_batch_write_fails_every_write_in_it(tmp_path, monkeypatch, code, reason):
    path = str(tmp_path / "d")
    s = Store(path, durability="process", commit_interval=600)
    try:
        writes = _Writes(monkeypatch, lambda: s._log.fd)
        _results(s, _in_one_turn(s, 2, writes, key=b"before")[0])  # logged, not committed yet
        writes.fail = code
        futs, _, _ = _in_one_turn(s, N, writes)
        results = _results(s, futs)
        assert writes.calls == 2
        assert all(isinstance(r, ApiError) and r.reason == reason for r in results), results
        assert "cannot write the log" in str(results[0])
        db = s.db["meta"]
        with s.read() as txn:
            assert [txn.get(b"k-%d" % i, db=db) for i in range(N)] == [None] * N
            assert txn.get(b"before-0", db=db) == b"v0" and txn.get(b"before-1", db=db) == b"v1"
    finally:
        s.close()
    reopened = Store(path)
    try:
        with reopened.read() as txn:
            db = reopened.db["meta"]
            assert [txn.get(b"k-%d" % i, db=db) for i in range(N)] == [None] * N
            assert txn.get(b"before-1", db=db) == b"v1"
    finally:
        reopened.close()


def test_after_a_failed_batch_the_next_batch_is_logged_and_replayed(tmp_path, monkeypatch):
    """The failed batch is cut off the log, so a crash after the next (good) batch replays exactly the
    acknowledged writes, in order."""
    path = str(tmp_path / "d")
    s = Store(path, durability="process", commit_interval=600)
    writes = _Writes(monkeypatch, lambda: s._log.fd)
    writes.fail = errno.EIO
    assert all(isinstance(r, ApiError) for r in _results(s, _in_one_turn(s, N, writes, key=b"lost")[0]))
    assert _results(s, _in_one_turn(s, N, writes, key=b"kept")[0]) == list(range(N))
    records = _replayed(path)
    assert len(records) == N and [seq for seq, _ in records] == list(range(1, N + 1))
    assert all(op[1].startswith(b"kept-") for _, ops in records for op in ops)
    s.close()


CRASH_AFTER_ONE_TURN = """
import asyncio, os, signal, sys
from sidecar.storage.store import Store
s = Store({path!r}, durability="process", commit_interval=600)
db = s.db["meta"]

async def turn():
    futs = [s.start(lambda txn, i=i: txn.put(b"k-%d" % i, b"v%d" % i, db=db)) for i in range({n})]
    await asyncio.gather(*futs)

asyncio.run_coroutine_threadsafe(turn(), s._loop).result(10)
os.kill(os.getpid(), signal.SIGKILL)  # all acknowledged, in one batch of the log, LMDB transaction open
"""


@pytest.mark.parametrize("torn", [False, True])
def test_a_crash_after_a_batch_replays_it_and_a_torn_batch_replays_its_prefix(tmp_path, torn):
    path = str(tmp_path / "crash")
    code = CRASH_AFTER_ONE_TURN.format(path=path, n=N)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, env=env)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    (log_file,) = glob.glob(os.path.join(path, "wal-*.log"))
    records = _replayed(path)
    assert len(records) == N  # one batch of N records (a write() is all or nothing for a SIGKILL here)
    keep = N
    if torn:  # as if the process died inside the batch's write(): cut in the middle of record 8
        keep = 7
        sizes = [len(wal.encode_record(seq, ops)) for seq, ops in records]
        os.truncate(log_file, os.path.getsize(log_file) - sum(sizes[keep:]) + sizes[keep] // 2)
    reopened = Store(path)
    try:
        assert reopened.replayed == keep
        db = reopened.db["meta"]
        with reopened.read() as txn:
            got = [txn.get(b"k-%d" % i, db=db) for i in range(N)]
        assert got == [b"v%d" % i for i in range(keep)] + [None] * (N - keep)
    finally:
        reopened.close()
