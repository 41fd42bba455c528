"""store: the LMDB environment, its single writer thread, read snapshots and map growth.

Writes are functions ``fn(txn) -> result`` handed to :meth:`Store.submit`. One
writer thread takes every queued job and runs them in one LMDB write
transaction (group commit), each job in a nested transaction so a failing job
changes nothing while the others commit. A job's future resolves only after
the commit returned, i.e. after fsync when the environment syncs (the
default): an acknowledged write survives a crash.

Reads open a read-only snapshot (MVCC) and never wait for writers, except for
the rare moment the map is grown: LMDB needs every transaction of the process
closed for that, so reads pass a gate the writer can close briefly.

Every transaction's default database is ``nodes`` (so ``txn.get`` itself is
the fast node fetch of the read path); every other access names its db.
"""
from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterator

import lmdb

from . import layout
from .errors import ApiError

log = logging.getLogger("sidecar.store")

DEFAULT_MAP_SIZE = 64 * 1024**3  # virtual address space only; the file grows as used
MAX_BATCH = 256  # jobs per group commit
MAX_QUEUE = 10_000  # queued jobs before writers are told to back off


class RetryJob(Exception):
    """Raised by a job whose read-side preparation went stale; the caller prepares again."""


class _Gate:
    """Many readers, or the map resizer alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._closed = False

    def enter(self) -> None:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._readers += 1

    def leave(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._closed and not self._readers:
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._closed = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


class _Job:
    __slots__ = ("fn", "future", "attempts")

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.future: Future = Future()
        self.attempts = 0


_STOP = object()


class Store:
    """One LMDB environment in ``path`` with its writer thread."""

    def __init__(self, path: str, *, map_size: int | None = None, sync: bool = True) -> None:
        os.makedirs(path, mode=0o700, exist_ok=True)
        self.path = path
        data_file = os.path.join(path, "data.mdb")
        current = os.path.getsize(data_file) if os.path.exists(data_file) else 0
        size = max(map_size or DEFAULT_MAP_SIZE, 2 * current)
        self.env = lmdb.open(path, map_size=size, max_dbs=len(layout.DB_NAMES) + 8, max_readers=126,
                             sync=sync, metasync=sync, subdir=True, lock=True, readahead=False, mode=0o600,
                             meminit=False, writemap=False)
        self.db = {name: self.env.open_db(name.encode()) for name in layout.DB_NAMES}
        self._gate = _Gate()
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self.gc_keep: set[bytes] | None = None  # node ids to keep while a GC cycle runs (see gc.py)
        self.commits = 0
        self._init_meta()
        self._next_node = self._last_node_id() + 1
        self._writer = threading.Thread(target=self._write_loop, name="sidecar-writer", daemon=True)
        self._writer.start()

    # ---------------------------------------------------------- setup

    def _init_meta(self) -> None:
        with self.env.begin(write=True, db=self.db["meta"]) as txn:
            fmt = txn.get(b"format")
            if fmt is None:
                txn.put(b"format", layout.FORMAT_NAME.encode())
                txn.put(b"next_tkey", layout.u64(1))
            elif fmt.decode() != layout.FORMAT_NAME:
                raise RuntimeError(f"{self.path}: unknown store format {fmt!r}")

    def _last_node_id(self) -> int:
        with self.env.begin(db=self.db["nodes"]) as txn:
            cursor = txn.cursor()
            return layout.read_u64(cursor.key()) if cursor.last() else 0

    def new_node_id(self) -> bytes:
        """The next node id (writer thread only; ids of aborted writes are simply skipped)."""
        node_id = self._next_node
        self._next_node += 1
        return layout.u64(node_id)

    @property
    def map_size(self) -> int:
        return self.env.info()["map_size"]

    def data_file_bytes(self) -> int:
        return os.path.getsize(os.path.join(self.path, "data.mdb"))

    # ---------------------------------------------------------- reads

    @contextlib.contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        """A read-only snapshot; keep it short (it holds back page reuse and map growth)."""
        self._gate.enter()
        try:
            txn = self.env.begin(write=False, db=self.db["nodes"])
            try:
                yield txn
            finally:
                txn.abort()
        finally:
            self._gate.leave()

    # ---------------------------------------------------------- writes

    def submit(self, fn: Callable[[Any], Any]) -> Future:
        """Queue ``fn(txn)`` for the writer; the future holds its result after commit."""
        if self._closed:
            raise ApiError("SHUTTING_DOWN", "the sidecar is shutting down")
        if self._queue.qsize() >= MAX_QUEUE:
            raise ApiError("OVERLOADED", "write queue is full; retry shortly", retry_after_ms=50)
        job = _Job(fn)
        self._queue.put(job)
        return job.future

    def write(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in the writer and wait for the commit."""
        return self.submit(fn).result()

    def _write_loop(self) -> None:
        pending: list[_Job] = []
        stopping = False
        while True:
            if not pending:
                item = self._queue.get()
                if item is _STOP:
                    stopping = True
                else:
                    pending.append(item)
            while len(pending) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                else:
                    pending.append(item)
            if pending:
                pending = self._commit(pending)
            if stopping and not pending and self._queue.empty():
                return

    def _commit(self, jobs: list[_Job]) -> list[_Job]:
        """Run jobs in one transaction; return the jobs to run again (after growing the map).

        A full map aborts the whole batch (LMDB wants the transaction gone after
        MDB_MAP_FULL); the jobs then run again on the grown map.
        """
        # A job whose caller went away (its asyncio task was cancelled, which cancels the future through
        # asyncio.wrap_future) is dropped: it was never acknowledged. Running futures cannot be cancelled
        # any more, so every result below can be set.
        jobs = [job for job in jobs if job.future.running() or job.future.set_running_or_notify_cancel()]
        if not jobs:
            return []
        done: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            txn = self.env.begin(write=True, db=self.db["nodes"])
        except lmdb.Error as e:
            for job in jobs:
                job.future.set_exception(_storage_error(e))
            return []
        try:
            if len(jobs) == 1:
                job = jobs[0]
                try:
                    done.append((job, job.fn(txn), None))
                except lmdb.MapFullError:
                    txn.abort()
                    return self._grow_or_fail(jobs)
            else:
                for job in jobs:
                    sub = self.env.begin(write=True, parent=txn, db=self.db["nodes"])
                    try:
                        result = job.fn(sub)
                    except lmdb.MapFullError:
                        sub.abort()
                        raise
                    except BaseException as e:  # noqa: BLE001 - reported to the job's caller
                        sub.abort()
                        done.append((job, None, e))
                        continue
                    sub.commit()
                    done.append((job, result, None))
            txn.commit()
            self.commits += 1
        except lmdb.MapFullError:
            txn.abort()
            return self._grow_or_fail(jobs)
        except lmdb.Error as e:
            with contextlib.suppress(Exception):
                txn.abort()
            err = _storage_error(e)
            for job in jobs:
                job.future.set_exception(err)
            return []
        except BaseException as e:  # a single job's own error (no nested transaction)
            with contextlib.suppress(Exception):
                txn.abort()
            for job in jobs:
                job.future.set_exception(e)
            return []
        for job, result, error in done:
            if error is None:
                job.future.set_result(result)
            else:
                job.future.set_exception(error)
        return []

    def _grow_or_fail(self, jobs: list[_Job]) -> list[_Job]:
        """Double the map and return ``jobs`` to run again, or fail them when the disk is full."""
        current = self.map_size
        free = shutil.disk_usage(self.path).free
        if self.data_file_bytes() + free <= current:
            log.error("map full and no disk left (map %d bytes, free %d)", current, free)
            err = ApiError("STORAGE_FULL", "disk is full: nothing was written")
            for job in jobs:
                job.future.set_exception(err)
            return []
        target = current * 2
        with self._gate.exclusive():
            self.env.set_mapsize(target)
        log.info("grew LMDB map from %d to %d bytes", current, target)
        return jobs

    # ---------------------------------------------------------- lifecycle

    def close(self, timeout: float = 30.0) -> None:
        """Finish queued writes, stop the writer and close the environment."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._writer.join(timeout)
        with self._gate.exclusive():
            self.env.close()

    def sync(self) -> None:
        self.env.sync(True)


def _storage_error(e: lmdb.Error) -> ApiError:
    if isinstance(e, lmdb.DiskError) or "No space" in str(e):
        return ApiError("STORAGE_FULL", f"disk full or failing: nothing was written ({e})")
    log.error("LMDB error: %s", e)
    return ApiError("INTERNAL_ERROR", f"storage error: {e}")


def now_us() -> int:
    return time.time_ns() // 1000
