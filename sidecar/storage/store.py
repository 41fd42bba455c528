"""store: the LMDB environment, its writes (group commit, durability modes), read snapshots, map growth.

Writes are functions ``fn(txn) -> result``. They run on the store's *owner*
thread: the server's event-loop thread (``Store(..., loop=loop)``), or a
private thread with an event loop of its own when the store is used on its
own (tests, tools). A write submitted on the owner thread runs at once,
inline, in a nested transaction of the open write transaction (so a failing
write changes nothing while the others stay); one submitted from another
thread is handed to the owner loop. Running inline costs no thread hand-off:
on these machines a hand-off each way was ~0.1 ms per request, a quarter of
a unary gRPC call.

Durability modes (``durability=``, per store, with a per-write override that
can only make a write stronger):

``sync`` (default)
    A write is acknowledged after the LMDB commit that contains it returned,
    and LMDB commits with fsync: an acknowledged write survives a SIGKILL of
    the sidecar and a power loss. Group commit: the commit is scheduled with
    ``call_soon`` when the first write enters the transaction, so every write
    the loop runs before that callback (all requests that arrived together)
    shares one commit and one fsync.

``process``
    A write is acknowledged once its exact changes are appended to the
    write-ahead log (``sidecar/storage/wal.py``, no fsync) and applied
    to the open transaction. The records of all writes that run in one
    turn of the owner loop go into the log with one ``write()`` (a
    ``call_soon`` callback, or sooner when a commit or an owner-thread read
    comes first); a failed ``write()`` fails every write of that batch. Survives a SIGKILL of the sidecar (the page cache
    keeps the log; the next start replays it), not an OS crash or power loss
    (the log tail since the last LMDB commit may be lost then, never more,
    and the LMDB file is never damaged: LMDB is still only written by synced
    commits, every ``commit_interval`` seconds, when a reader on another
    thread needs the data, or when the log since the last commit is large).
    Reads on the owner thread read the open transaction, so every
    acknowledged write is visible to every later read; reads on other
    threads first wait for a commit that covers what was acknowledged.

No LMDB flag that can corrupt the file on an OS crash (``MDB_NOSYNC``,
``MDB_MAPASYNC``) is ever used.

Back-pressure: at most ``max_queue`` writes may be submitted and not yet
acknowledged, and when the owner loop runs more than ``max_lag`` seconds
behind (requests wait in it longer than that) while writes queue up, new writes are refused with
``OVERLOADED`` and a ``retry_after_ms`` hint instead of queueing without
bound until callers time out.

Reads outside the owner thread open a read-only snapshot (MVCC) and never
wait for writers, except for the rare moment the map is grown: LMDB needs
every transaction of the process closed for that, so reads pass a gate the
owner can close briefly.

Every transaction's default database is ``nodes`` (so ``txn.get`` itself is
the fast node fetch of the read path); every other access names its db.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterator

import lmdb

from . import compression, encryption, layout, stats, usage, wal
from ..errors import ApiError

log = logging.getLogger("sidecar.store")

DEFAULT_MAP_SIZE = 64 * 1024**3  # virtual address space only; the file grows as used
DURABILITIES = ("sync", "process")
MAX_QUEUE = 4096  # writes submitted and not yet acknowledged before writers are told to back off
MAX_LAG = 0.5  # seconds the owner loop may run behind before writers are told to back off
# ... when at least this many writes are waiting: a loop that ran late with (almost) no writes queued was
# held by something else (a large request's preparation, a collection, a busy machine), and refusing
# the next write would not make it catch up — it only refuses a caller for a lag it did not cause.
MIN_LAG_BACKLOG = 8
COMMIT_INTERVAL = 0.05  # process mode: seconds between synced LMDB commits (at most)
COMMIT_BYTES = 8 * 1024 * 1024  # process mode: log bytes since the last commit that trigger one
_LAG_PROBE = 0.05
#: Commit pacing (fairness, docs/security.md "Fairness"): with at least PACE_MIN_JOBS writes in the open
#: transaction, its commit starts no sooner than COMMIT_PACE x the last commit's duration after that one
#: ended (at least MIN_PACE, at most MAX_PACE seconds). A commit's fsync holds the event loop; back to
#: back under a flood, every step of another client's call (its arrival, its request, its reply) waited
#: for one, so that call took its number of steps times an fsync (p50 ~30 ms against ~2 ms alone, where
#: paced ~10 ms: benchmarks/bench_fairness.py). The writes gathered meanwhile share the commit. A single
#: writer (one write in the transaction) is never delayed.
COMMIT_PACE = 1.0
PACE_MIN_JOBS = 2
MIN_PACE = 0.002
MAX_PACE = 0.02
#: seconds between scans of LMDB's reader table for slots of processes that died holding a read
#: transaction (a killed inspector, backup or test process): such a slot pins old pages, so the
#: file would grow without bound; LMDB does not clear it by itself.
READER_CHECK_INTERVAL = 5.0
RESERVE_NAME = "space.reserve"  # a file of RESERVE_BYTES given up when the disk fills (Store.full)
RESERVE_BYTES = 1 << 20
LOW_DISK = 16 << 20  # process mode: with less free, the log is cut at every commit (not at 64 MiB)


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
    __slots__ = ("fn", "sync", "future", "remote", "frees")

    def __init__(self, fn: Callable[[Any], Any], sync: bool, future, remote: bool, frees: bool = False) -> None:
        self.fn = fn
        self.frees = frees  # a delete or a collection: admitted on a full disk (see Store.full)
        self.sync = sync  # acknowledged only after the synced commit
        self.future = future  # concurrent.futures.Future (remote) or asyncio.Future (owner loop)
        self.remote = remote


class _Recorder:
    """A write transaction that also records every change it makes (for the write-ahead log)."""

    def __init__(self, txn, ops: list, index: dict, default: int) -> None:
        self._t = txn
        self._ops = ops
        self._index = index
        self._default = default
        self.get = txn.get

    def _db(self, db) -> int:
        return self._default if db is None else self._index[id(db)]

    def put(self, key, value, dupdata=True, overwrite=True, append=False, db=None):
        ok = self._t.put(key, value, dupdata=dupdata, overwrite=overwrite, append=append, db=db)
        if ok:
            self._ops.append((self._db(db), bytes(key), bytes(value)))
        return ok

    def replace(self, key, value, db=None):
        old = self._t.replace(key, value, db=db)
        self._ops.append((self._db(db), bytes(key), bytes(value)))
        return old

    def delete(self, key, value=b"", db=None):
        ok = self._t.delete(key, value, db=db)
        if ok:
            self._ops.append((self._db(db), bytes(key), None))
        return ok

    def pop(self, key, db=None):
        old = self._t.pop(key, db=db)
        if old is not None:
            self._ops.append((self._db(db), bytes(key), None))
        return old

    def cursor(self, db=None):
        return _RecCursor(self._t.cursor(db=db), self._ops, self._db(db))

    def __getattr__(self, name):
        return getattr(self._t, name)


class _RecCursor:
    def __init__(self, cursor, ops: list, dbi: int) -> None:
        self._c = cursor
        self._ops = ops
        self._dbi = dbi

    def delete(self, dupdata=False):
        key = bytes(self._c.key())
        ok = self._c.delete(dupdata)
        if ok:
            self._ops.append((self._dbi, key, None))
        return ok

    def put(self, key, value, dupdata=True, overwrite=True, append=False):
        ok = self._c.put(key, value, dupdata=dupdata, overwrite=overwrite, append=append)
        if ok:
            self._ops.append((self._dbi, bytes(key), bytes(value)))
        return ok

    def replace(self, key, value):
        old = self._c.replace(key, value)
        self._ops.append((self._dbi, bytes(key), bytes(value)))
        return old

    def putmulti(self, items, dupdata=True, overwrite=True, append=False):
        if not overwrite:  # which items were new is known only one by one
            added = sum(1 for key, value in items if self.put(key, value, dupdata=dupdata, overwrite=False))
            return len(items), added
        items = [(bytes(k), bytes(v)) for k, v in items]
        consumed, added = self._c.putmulti(items, dupdata=dupdata, overwrite=True, append=append)
        self._ops.extend((self._dbi, k, v) for k, v in items[:consumed])
        return consumed, added

    def pop(self, key):
        old = self._c.pop(key)
        if old is not None:
            self._ops.append((self._dbi, bytes(key), None))
        return old

    def __getattr__(self, name):
        return getattr(self._c, name)

    def __iter__(self):
        return iter(self._c)


class Store:
    """One LMDB environment in ``path``; writes run on the owner loop (see the module docstring)."""

    def __init__(self, path: str, *, map_size: int | None = None, sync: bool = True, durability: str = "sync",
                 commit_interval: float = COMMIT_INTERVAL, max_queue: int = MAX_QUEUE, max_lag: float = MAX_LAG,
                 loop: asyncio.AbstractEventLoop | None = None, compress: bool = True,
                 clock: Callable[[], int] | None = None, keys: encryption.KeyRing | None = None) -> None:
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
        os.makedirs(path, mode=0o700, exist_ok=True)
        self.path = path
        # the wall clock (microseconds) of conversations' idle expiry and the sweeper; tests inject their own
        self.clock: Callable[[], int] = clock or now_us
        self.ns_idle_cache: dict[str, tuple[int, int] | None] = {}  # storage/records.ns_idle
        data_file = os.path.join(path, "data.mdb")
        current = os.path.getsize(data_file) if os.path.exists(data_file) else 0
        size = max(map_size or DEFAULT_MAP_SIZE, 2 * current)
        self._sync = sync
        # LMDB writes whole pages: without zeroing its page buffers (meminit) the unused part of a page can
        # carry old heap bytes -- plaintext of sealed values among them -- into the file. A store given keys
        # (storage/encryption.py) pays the memset.
        self._meminit = keys is not None
        self.db: dict = {}
        self._by_index: list = []
        self._open_env(size)
        self.reopened = 0  # times the environment was reopened after a fatal write error
        self._nodes_index = layout.DB_NAMES.index("nodes")
        self._gate = _Gate()
        self._closed = False
        self.gc_keep: set[bytes] | None = None  # node ids to keep while a GC cycle runs (see gc.py)
        self.commits = 0
        self.stats = stats.StoreStats()  # read by the metrics endpoint (sidecar/metrics.py)
        self._jobs_in_txn = 0  # write jobs in the open transaction (the group commit's size)
        self.durability = durability
        self.commit_interval = commit_interval
        self.max_queue = max_queue
        self.max_lag = max_lag
        self._init_meta()
        self.replayed = self._replay()
        self._next_node = self._last_node_id() + 1
        self._drop_wal_files()  # every intact record is in LMDB now (a new log starts after them)
        self.packer = compression.Packer(self._load_dicts, self._save_dict, enabled=compress)
        self.keys: encryption.KeyRing | None = None
        self.encrypted: set[str] = set()  # namespaces that have (had) a key: storage/encryption.py
        self._installed: list[bytes] = []
        self._prefixes: dict[str, bytes] = {}
        with self.env.begin(write=keys is not None, db=self.db["meta"]) as txn:  # (keys are recorded in meta)
            self._use_keys(txn, keys)
        self.quota_defaults: tuple[int, int, int] = (0, 0, 0)  # (max_bytes, max_threads, max_items): --quota-*
        self._build_usage()
        self._log: wal.Log | None = wal.Log(path, self._applied + 1) if durability == "process" else None
        # owner-thread state
        self._txn = None  # the open write transaction
        self._job_txn = None  # the transaction of the job running now (reads inside a job use it)
        self._waiting: list[tuple[_Job, Any]] = []  # jobs in the open transaction, acknowledged at its commit
        self._pending: list[list] = []  # process mode: logged change sets since the last commit
        self._pending_bytes = 0
        # process mode: jobs run into the open transaction whose records are not written yet: the log
        # batch of this loop turn, written with one write() by _flush_log (then they are acknowledged)
        self._unlogged: list[tuple[_Job, Any, list | None]] = []
        self._flush_soon = False
        self._commit_soon = False
        self._commit_later: asyncio.TimerHandle | None = None
        self.pace = COMMIT_PACE
        self._last_commit_seconds = 0.0
        self._last_commit_end = 0.0
        self._lag_handle: asyncio.TimerHandle | None = None
        self._reader_handle: asyncio.TimerHandle | None = None
        self.stale_readers_cleared = 0
        # counters shared with other threads
        self._inflight = 0
        self._count_lock = threading.Lock()
        self._acked_seq = self._applied  # process mode: last log record acknowledged
        self._committed_seq = self._applied
        self._committed = threading.Condition()
        self.loop_lag = 0.0
        self.sweep_holds = 0  # large writes staged off the owner thread: garbage collection waits (hold_sweeps)
        # A full disk: LMDB needs free pages even to delete, so the store keeps RESERVE_BYTES of the
        # filesystem in a file of its own and gives them up when a write finds the disk full; from then on
        # (``full``) only deletes and collections are admitted, until one of them is acknowledged.
        self.full = False
        self._space_at, self._space_pending, self._space_short, self._space_free = 0.0, 0, False, LOW_DISK
        self._reserve = os.path.join(path, RESERVE_NAME)
        self._take_reserve()
        self._private: threading.Thread | None = None
        if loop is None:
            self._loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(self._loop)
                self._loop.call_soon(started.set)
                self._loop.run_forever()

            self._private = threading.Thread(target=run, name="sidecar-store", daemon=True)
            self._private.start()
            started.wait()
            self._owner = self._private.ident
        else:
            self._loop = loop
            self._owner = threading.get_ident()
        self._loop.call_soon_threadsafe(self._probe_lag, time.monotonic())
        self._loop.call_soon_threadsafe(self._check_readers)

    # ---------------------------------------------------------- setup

    def _open_env(self, size: int) -> None:
        """Open the LMDB environment and its sub-databases (the handle dicts are updated in place)."""
        self.env = lmdb.open(self.path, map_size=size, max_dbs=len(layout.DB_NAMES) + 8, max_readers=126,
                             sync=self._sync, metasync=self._sync, subdir=True, lock=True, readahead=False,
                             mode=0o600, meminit=self._meminit, writemap=False)
        self.db.clear()
        self.db.update({name: self.env.open_db(name.encode()) for name in layout.DB_NAMES})
        self._by_index[:] = [self.db[name] for name in layout.DB_NAMES]
        self._index = {id(handle): i for i, handle in enumerate(self._by_index)}

    def _recover_env(self) -> bool:
        """After a failed commit (owner thread, no write transaction open): when the failure left LMDB
        unusable (a failed meta-page write sets its fatal flag: every later transaction fails with
        MDB_PANIC), close and reopen the environment. What LMDB committed before is intact (the meta
        page in force is the last one fully written); the failed transaction is gone. True if reopened."""
        try:
            self.env.begin(write=True).abort()
            return False
        except lmdb.PanicError:
            pass
        except lmdb.Error:
            return False
        size = self._known_map_size
        with self._gate.exclusive():
            with contextlib.suppress(Exception):
                self.env.close()
            self._open_env(size)
        self.reopened += 1
        log.warning("LMDB environment reopened after a fatal write error (%d so far)", self.reopened)
        return True

    # ---------------------------------------------------------- encryption at rest (storage/encryption.py)

    def set_keys(self, ring: encryption.KeyRing | None) -> None:
        """Use ``ring`` from now on (a reload of the key file: rotation without a restart). Its keys are
        recorded in ``meta`` first, in a write; KeyFileError (nothing changes) when a used key id now holds
        other key material."""
        self.write(lambda txn: self._use_keys(txn, ring))

    def _use_keys(self, txn, ring: encryption.KeyRing | None) -> None:
        meta = self.db["meta"]
        if ring is not None:
            encryption.remember(txn, meta, ring)
            if ring.keys and not self._meminit:
                log.warning("encryption keys loaded into a store opened without them: until a restart, unused "
                            "parts of LMDB pages may carry old heap bytes (plaintext) into the file")
        used, namespaces = encryption.remembered(txn, meta)
        old = self._installed
        self._installed = encryption.install(ring, {kid: (ns, name) for kid, (ns, name, _) in used.items()})
        encryption.uninstall(old)
        self.keys = ring
        self.encrypted = namespaces
        self._prefixes = {}
        # the process-wide read caches (values, list wire bytes, migrations on read) start again as in a new
        # process: a value read while a key was loaded is not answered from memory once the key is gone
        compression.forget_cache()

    def prefix(self, ns: str) -> bytes:
        """The hash index prefix of namespace ``ns``'s nodes: its scope when it is encrypted, else b""."""
        p = self._prefixes.get(ns)
        if p is None:
            p = self._prefixes[ns] = encryption.scope_prefix(ns) if ns in self.encrypted else b""
        return p

    def scope(self, ns: str) -> encryption.Scope | None:
        """How to write namespace ``ns``'s nodes: None when it is not encrypted; ENCRYPTION_KEY_MISSING when
        it is and none of its keys is loaded."""
        if ns not in self.encrypted:
            return None
        scope = self.keys.scope(ns) if self.keys is not None else None
        if scope is None:
            raise encryption.key_missing(ns)
        return scope

    def _build_usage(self) -> None:
        """A store written before the usage counters (storage/usage.py) gets them built, once; one of counters
        version 2 gets its charge rows moved into the records they charge."""
        with self.env.begin(db=self.db["meta"]) as txn:
            version = txn.get(b"usage")
        if version == usage.VERSION:
            return
        started = time.monotonic()
        with self.env.begin(write=True) as txn:
            if version == usage.MIGRATABLE:
                ck, w = usage.migrate(txn, self)
                log.info("usage charges of %d checkpoints and %d pending writes moved into their records in "
                         "%.2f s", ck, w, time.monotonic() - started)
                return
            n = usage.rebuild(txn, self)
        log.info("usage counters built for %d threads in %.2f s", n, time.monotonic() - started)

    def _init_meta(self) -> None:
        with self.env.begin(write=True, db=self.db["meta"]) as txn:
            fmt = txn.get(b"format")
            if fmt is None:
                txn.put(b"format", layout.FORMAT_NAME.encode())
                txn.put(b"next_tkey", layout.u64(1))
            elif fmt.decode() != layout.FORMAT_NAME:
                raise RuntimeError(f"{self.path}: unknown store format {fmt!r}")
            raw = txn.get(b"wal_seq")
            self._applied = layout.read_u64(raw) if raw is not None else 0

    def _apply_ops(self, txn, ops: list) -> None:
        by_index = self._by_index
        for dbi, key, value in ops:
            if value is None:
                txn.delete(key, db=by_index[dbi])
            else:
                txn.put(key, value, db=by_index[dbi])

    def _replay(self) -> int:
        """Apply the write-ahead log records LMDB has not committed (after a SIGKILL in process mode)."""
        if not wal.wal_files(self.path):
            return 0
        records: list[tuple[int, list]] = []
        last = wal.replay(self.path, self._applied, lambda seq, ops: records.append((seq, ops)))
        if last == self._applied:
            return 0
        while True:
            txn = self.env.begin(write=True)
            try:
                for _, ops in records:
                    self._apply_ops(txn, ops)
                txn.put(b"wal_seq", layout.u64(last), db=self.db["meta"])
                txn.commit()
                break
            except lmdb.MapFullError:
                txn.abort()
                self.env.set_mapsize(self.map_size * 2)
        log.info("replayed %d write-ahead log records (%d..%d)", len(records), self._applied + 1, last)
        self._applied = last
        return len(records)

    def _drop_wal_files(self) -> None:
        for _, name in wal.wal_files(self.path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def _load_dicts(self) -> tuple[bytes | None, list[bytes]]:
        """The current compression dictionary's id and every stored dictionary (compression.py)."""
        meta = self.db["meta"]
        with self.env.begin(db=meta) as txn:
            current = txn.get(compression.META_CURRENT)
            cursor = txn.cursor()
            found = []
            if cursor.set_range(compression.META_PREFIX):
                for key, value in cursor:
                    if not key.startswith(compression.META_PREFIX):
                        break
                    found.append(bytes(value))
        return (bytes(current) if current is not None else None), found

    def _save_dict(self, did: bytes, data: bytes) -> None:
        """Store a compression dictionary (from the trainer thread); returns once it is committed."""
        meta = self.db["meta"]

        def put(txn) -> None:
            txn.put(compression.META_PREFIX + did, data, db=meta)
            txn.put(compression.META_CURRENT, did, db=meta)

        self.submit(put, durability="sync").result(60)

    def _last_node_id(self) -> int:
        with self.env.begin(db=self.db["nodes"]) as txn:
            cursor = txn.cursor()
            return layout.read_u64(cursor.key()) if cursor.last() else 0

    def new_node_id(self) -> bytes:
        """The next node id (owner thread only; ids of aborted writes are simply skipped)."""
        node_id = self._next_node
        self._next_node += 1
        return layout.u64(node_id)

    def reserve_node_ids(self, n: int) -> int:
        """The first of ``n`` consecutive node ids no other write will use (any thread: the owner hands
        them out; a write staged elsewhere numbers its nodes with them). Unused ones are skipped."""
        if self.on_owner:
            first = self._next_node
            self._next_node += n
            return first
        done: Future = Future()
        self._loop.call_soon_threadsafe(lambda: done.set_result(self.reserve_node_ids(n)))
        return done.result(60)

    @property
    def map_size(self) -> int:
        return self.env.info()["map_size"]

    @property
    def _known_map_size(self) -> int:
        try:
            return self.map_size
        except lmdb.Error:  # a panicked environment
            return max(DEFAULT_MAP_SIZE, 2 * self.data_file_bytes())

    def data_file_bytes(self) -> int:
        return os.path.getsize(os.path.join(self.path, "data.mdb"))

    @property
    def on_owner(self) -> bool:
        return threading.get_ident() == self._owner

    # ---------------------------------------------------------- reads

    @contextlib.contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        """A read-only view that sees every acknowledged write; keep it short (no await inside).

        On the owner thread in process mode this is the open write transaction
        (or, inside a write, the write's own); elsewhere a snapshot, taken after
        the acknowledged writes are committed.
        """
        if self._log is not None:
            if self.on_owner:
                if self._unlogged and self._job_txn is None:
                    self._flush_log()  # a read outside a job sees acknowledged writes only
                view = self._job_txn if self._job_txn is not None else self._txn
                if view is not None:
                    yield view
                    return
            elif self._acked_seq > self._committed_seq:
                self.wait_committed()
        self._gate.enter()
        try:
            txn = self.env.begin(write=False, db=self.db["nodes"])
            try:
                yield txn
            finally:
                txn.abort()
        finally:
            self._gate.leave()

    def wait_committed(self, timeout: float | None = 60.0) -> None:
        """(Not on the owner thread) wait until LMDB has committed every write acknowledged so far."""
        target = self._acked_seq
        with self._committed:
            if self._committed_seq >= target:
                return
        self._loop.call_soon_threadsafe(self._commit)
        with self._committed:
            if not self._committed.wait_for(lambda: self._committed_seq >= target or self._closed, timeout):
                raise ApiError("INTERNAL_ERROR", "the store did not commit in time")

    # ---------------------------------------------------------- writes

    def check_load(self) -> None:
        """Refuse with OVERLOADED (or SHUTTING_DOWN) as a new write would be, without submitting one:
        a large write asks once, before its preparation, and its own jobs are then flow-controlled, so
        it is never refused for the lag its own work caused."""
        if self._closed:
            raise ApiError("SHUTTING_DOWN", "the sidecar is shutting down")
        inflight = self._inflight
        lag = self.loop_lag
        if inflight >= self.max_queue or lag >= self.max_lag and inflight >= MIN_LAG_BACKLOG:
            retry = max(50, min(5000, int(2000 * lag) if lag >= self.max_lag else 50 + inflight // 10))
            raise ApiError("OVERLOADED", f"the sidecar is overloaded ({inflight} writes waiting, "
                           f"{lag * 1000:.0f} ms behind); retry after {retry} ms", retry_after_ms=retry)

    def _admit(self, refusable: bool = True, frees: bool = False) -> None:
        if refusable:
            self.check_load()
        elif self._closed:
            raise ApiError("SHUTTING_DOWN", "the sidecar is shutting down")
        if not frees and not self.full and self._log is not None and self._space_low():
            self._disk_full()
        if self.full and not frees and self._space_back():
            self._leave_full("the filesystem has room again")
        if self.full and not frees:
            raise ApiError("STORAGE_FULL", "the disk is full: nothing was written; delete threads or data (and "
                           "collect garbage) to free space, writes resume after that")
        with self._count_lock:
            self._inflight += 1

    @contextlib.contextmanager
    def hold_sweeps(self) -> Iterator[None]:
        """While held, garbage collection deletes nothing (its sweep jobs wait): a large write staged
        against a read snapshot may rely on every node that snapshot shows. Take it before the
        snapshot, and let one write be acknowledged after taking it (a sweep already in the open
        transaction is then committed, so the snapshot shows its deletes)."""
        with self._count_lock:
            self.sweep_holds += 1
        try:
            yield
        finally:
            with self._count_lock:
                self.sweep_holds -= 1

    def _is_sync(self, durability: str | None) -> bool:
        return self._log is None or durability != "process" and (durability == "sync" or self.durability == "sync")

    def submit(self, fn: Callable[[Any], Any], durability: str | None = None, *,
               flow_controlled: bool = False, frees: bool = False) -> Future:
        """Run ``fn(txn)`` as a write; the future holds its result once acknowledged (see the module doc).

        ``durability`` None uses the store's mode; ``"sync"`` makes a process-mode store acknowledge
        this write only after its synced commit (a sync store ignores ``"process"``). ``flow_controlled``:
        as in :meth:`start`; ``frees``: a delete or collection, admitted on a full disk (``full``)."""
        self._admit(refusable=not flow_controlled, frees=frees)
        job = _Job(fn, self._is_sync(durability), Future(), True, frees)
        if self.on_owner:
            job.future.set_running_or_notify_cancel()
            self._run(job)
        else:
            self._loop.call_soon_threadsafe(self._run_remote, job)
        return job.future

    async def run(self, fn: Callable[[Any], Any], durability: str | None = None, *,
                  flow_controlled: bool = False, frees: bool = False) -> Any:
        """``await`` form of :meth:`submit` for coroutines; on the owner loop without a thread hop."""
        if not self.on_owner:
            return await asyncio.wrap_future(self.submit(fn, durability, flow_controlled=flow_controlled,
                                                         frees=frees))
        return await self.start(fn, durability, flow_controlled=flow_controlled, frees=frees)

    def start(self, fn: Callable[[Any], Any], durability: str | None = None, *,
              flow_controlled: bool = False, frees: bool = False) -> asyncio.Future:
        """(Owner loop only) run ``fn(txn)`` now; the asyncio future resolves when it is acknowledged.

        ``flow_controlled``: the caller bounds its own writes in flight (a StreamWrites stream reads at most
        its window of requests ahead of its acknowledgements), so this write is never refused with
        OVERLOADED: a busy sidecar slows the stream down instead."""
        self._admit(refusable=not flow_controlled, frees=frees)
        job = _Job(fn, self._is_sync(durability), self._loop.create_future(), False, frees)
        self._run(job)
        return job.future

    def write(self, fn: Callable[[Any], Any], durability: str | None = None, *, frees: bool = False) -> Any:
        """Run ``fn(txn)`` as a write and wait until it is acknowledged."""
        if not self.on_owner:
            return self.submit(fn, durability, frees=frees).result()
        self._admit(frees=frees)
        job = _Job(fn, self._is_sync(durability), Future(), True, frees)
        job.future.set_running_or_notify_cancel()
        self._run(job)
        if not job.future.done() and self._unlogged:
            self._flush_log()
        if not job.future.done():
            self._commit()
        return job.future.result()

    def _run_remote(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():  # the caller went away: never acknowledged
            self._done(job, None, None)
            return
        self._run(job)

    def _begin(self):
        if self._txn is None:
            try:
                self._txn = self.env.begin(write=True, db=self.db["nodes"])
            except lmdb.PanicError:
                if not self._recover_env():
                    raise
                self._txn = self.env.begin(write=True, db=self.db["nodes"])
        return self._txn

    def _run(self, job: _Job) -> None:
        """Run one job in a nested transaction of the open one (owner thread)."""
        if job.future.done():  # cancelled while it waited
            self._done(job, None, None)
            return
        try:
            parent = self._begin()
            child = self.env.begin(write=True, parent=parent, db=self.db["nodes"])
        except lmdb.Error as e:
            self._done(job, None, _storage_error(e, self.path))
            return
        ops: list | None = [] if self._log is not None else None
        txn = child if ops is None else _Recorder(child, ops, self._index, self._nodes_index)
        self._job_txn = txn
        try:
            result = job.fn(txn)
            child.commit()
            self._jobs_in_txn += 1
        except lmdb.MapFullError:
            self._job_txn = None
            child.abort()
            self._grow_and_retry(job)
            return
        except BaseException as e:  # noqa: BLE001 - reported to the job's caller
            self._job_txn = None
            with contextlib.suppress(Exception):
                child.abort()
            self._done(job, None, e)
            return
        finally:
            self._job_txn = None
        if ops or self._unlogged:
            # into this turn's log batch; a job without changes that ran after one still waits for it
            # (it may have read the batch's changes), so acknowledgements keep the order of the jobs
            self._unlogged.append((job, result, ops))
            if not self._flush_soon:
                self._flush_soon = True
                self._loop.call_soon(self._flush_log)
            return
        if job.sync:
            self._waiting.append((job, result))
            self._schedule(urgent=True)
            return
        if ops:
            self._acked_seq = self._log.seq
            self._schedule(urgent=self._pending_bytes >= COMMIT_BYTES)
        self._done(job, result, None)

    def _flush_log(self) -> None:
        """Process mode: write the records of the jobs that ran since the last flush (this loop turn's
        batch) with one write(), then acknowledge them (a sync job: at its commit). When the write fails,
        no job of the batch is acknowledged: all fail with the same reason and their changes are taken
        out of the open transaction again (it is rebuilt from the records logged before)."""
        self._flush_soon = False
        batch, self._unlogged = self._unlogged, []
        if not batch:
            return
        records = [ops for _, _, ops in batch if ops]
        if records:
            try:
                started = time.perf_counter()
                self._log.append_many(records)
                self.stats.wal_append_seconds.observe(time.perf_counter() - started)
            except OSError as e:  # nothing acknowledged may be missing from the log: take the batch out again
                log.error("write-ahead log: %s (%d writes not acknowledged)", e, len(batch))
                self._rebuild()
                reason = "STORAGE_FULL" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "STORAGE_IO_ERROR"
                for job, _, _ in batch:
                    self._done(job, None, ApiError(reason, f"cannot write the log: nothing was written ({e})"))
                return
            self._pending.extend(records)
            self._pending_bytes += sum(len(k) + (len(v) if v is not None else 0)
                                       for ops in records for _, k, v in ops)
            self._acked_seq = self._log.seq
        sync = False
        for job, result, _ in batch:
            if job.sync:
                self._waiting.append((job, result))
                sync = True
        if sync:
            self._schedule(urgent=True)
        elif records:
            self._schedule(urgent=self._pending_bytes >= COMMIT_BYTES)
        for job, result, _ in batch:
            if not job.sync:
                self._done(job, result, None)

    def _done(self, job: _Job, result: Any, error: BaseException | None) -> None:
        with self._count_lock:
            self._inflight -= 1
        if error is not None:
            reason = error.reason if isinstance(error, ApiError) else type(error).__name__
            failures = self.stats.write_failures
            failures[reason] = failures.get(reason, 0) + 1
            if reason == "STORAGE_FULL" and not self.full:
                self._disk_full()
        elif job.frees and self.full:
            self._leave_full("a delete or collection succeeded")
        fut = job.future
        if fut.done():
            return
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)
            if not job.remote:
                fut.exception()  # the awaiting task re-raises it; never "exception was never retrieved"

    def _schedule(self, urgent: bool) -> None:
        if urgent:
            if not self._commit_soon:
                self._commit_soon = True
                self._loop.call_soon(self._paced_commit)
        elif self._commit_later is None:
            self._commit_later = self._loop.call_later(self.commit_interval, self._commit)

    def _paced_commit(self) -> None:
        """The group commit's callback: commit now, unless the loop is busy with several writers and the last
        commit ended less than ``pace`` ago (then at that time; see COMMIT_PACE)."""
        if not self._commit_soon:
            return
        if self._jobs_in_txn >= PACE_MIN_JOBS and self.pace > 0:
            gap = min(max(self._last_commit_seconds * self.pace, MIN_PACE), MAX_PACE)
            wait = self._last_commit_end + gap - time.monotonic()
            if wait > 0.0005:
                later = self._commit_later
                if later is not None and later.when() <= self._loop.time() + wait:
                    return  # (process mode: its interval commit comes first)
                if later is not None:
                    later.cancel()
                self._commit_later = self._loop.call_later(wait, self._commit)
                return
        self._commit()

    def _commit(self) -> None:
        """Commit the open transaction (owner thread) and acknowledge the jobs waiting for it."""
        if self._unlogged:  # process mode: LMDB never holds a change that is not in the log before it
            self._flush_log()
        self._commit_soon = False
        if self._commit_later is not None:
            self._commit_later.cancel()
            self._commit_later = None
        txn, self._txn = self._txn, None
        if txn is None:
            return
        waiting, self._waiting = self._waiting, []
        group, self._jobs_in_txn = self._jobs_in_txn, 0
        seq = self._log.seq if self._log is not None else 0
        try:
            if self._log is not None:
                txn.put(b"wal_seq", layout.u64(seq), db=self.db["meta"])
            started = time.perf_counter()
            txn.commit()
            elapsed = time.perf_counter() - started
        except lmdb.MapFullError:
            with contextlib.suppress(Exception):
                txn.abort()
            self.stats.commit_failures += 1
            self._after_lost_txn(waiting, grow=True)
            return
        except lmdb.Error as e:
            with contextlib.suppress(Exception):
                txn.abort()
            log.error("commit failed: %s", e)
            self._recover_env()
            self.stats.commit_failures += 1
            self._after_lost_txn(waiting, error=_storage_error(e, self.path))
            return
        self.commits += 1
        self._last_commit_seconds = elapsed
        self._last_commit_end = time.monotonic()
        self.stats.commit_seconds.observe(elapsed)
        if group:
            self.stats.group_size.observe(group)
        if self._log is not None:
            self._pending.clear()
            self._pending_bytes = 0
            with self._committed:
                self._committed_seq = seq
                self._committed.notify_all()
            self._log.committed(seq, cut=self._space_free < LOW_DISK)  # on a small disk the log stays small
        for job, result in waiting:
            self._done(job, result, None)

    def _after_lost_txn(self, waiting: list, grow: bool = False, error: ApiError | None = None) -> None:
        """The open transaction could not be committed. Acknowledged (logged) changes are applied again
        to a new one; jobs still waiting run again after the map grew, or fail."""
        if grow and not self._grow():
            error = ApiError("STORAGE_FULL", "disk is full: nothing was written")
        if self._log is not None:
            self._rebuild()
            if error is None:
                self._waiting = waiting  # their changes are back in the new transaction
                self._schedule(urgent=True)
                return
            for job, _ in waiting:
                self._done(job, None, error)
            self._schedule(urgent=False)  # try again later; acknowledged writes stay in the log
            return
        if error is not None:
            for job, _ in waiting:
                self._done(job, None, error)
            return
        for job, _ in waiting:
            self._run(job)

    def _rebuild(self) -> None:
        """Process mode: a new open transaction holding every logged change since the last commit."""
        if self._txn is not None:
            with contextlib.suppress(Exception):
                self._txn.abort()
            self._txn = None
        while True:
            txn = self._begin()
            try:
                for ops in self._pending:
                    self._apply_ops(txn, ops)
                self._jobs_in_txn = len(self._pending)
                return
            except lmdb.MapFullError:
                txn.abort()
                self._txn = None
                self._grow()

    def _grow_and_retry(self, job: _Job) -> None:
        """A job filled the map: commit what came before it, grow the map, run the job again."""
        for _ in range(8):  # a commit that filled the map grows it and reopens the transaction: commit again
            self._commit()
            if self._txn is None:
                break
        if self._txn is not None or not self._grow():
            self._done(job, None, ApiError("STORAGE_FULL", "disk is full: nothing was written"))
            return
        self._run(job)

    def _space_low(self) -> bool:
        """Process mode: whether the filesystem still has room to commit what the log holds (twice the
        log's bytes since the last commit, and the reserve): past that, a new write could be acknowledged
        (logged) but never committed. Looked at every 0.1 s, or sooner when the log grew by 256 KiB."""
        now = time.monotonic()
        if now - self._space_at >= 0.1 or self._pending_bytes - self._space_pending >= 256 << 10:
            self._space_at, self._space_pending = now, self._pending_bytes
            try:
                self._space_free = shutil.disk_usage(self.path).free
            except OSError:
                self._space_free = LOW_DISK
            self._space_short = self._space_free < 2 * self._pending_bytes + RESERVE_BYTES
        return self._space_short

    def _space_back(self) -> bool:
        """(Full) whether the filesystem has room again (someone freed space outside the store, or the
        failure was passing): looked at every 0.1 s."""
        now = time.monotonic()
        if now - self._space_at >= 0.1:
            self._space_at = now
            try:
                self._space_free = shutil.disk_usage(self.path).free
            except OSError:
                self._space_free = 0
        return self._space_free >= 4 * RESERVE_BYTES + 2 * self._pending_bytes

    def _leave_full(self, why: str) -> None:
        self.full = False
        self._space_at, self._space_short = 0.0, False  # (process mode: looked at again at the next write)
        log.warning("%s: writes are admitted again", why)
        self._take_reserve()

    def _take_reserve(self) -> None:
        """Keep RESERVE_BYTES of the filesystem in the reserve file (when there is room for it)."""
        try:
            if os.path.exists(self._reserve) or shutil.disk_usage(self.path).free < 4 * RESERVE_BYTES:
                return
            fd = os.open(self._reserve, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            finally:
                os.close(fd)
        except OSError as e:
            log.warning("cannot keep a space reserve in %s: %s", self._reserve, e)
            with contextlib.suppress(OSError):
                os.unlink(self._reserve)

    def _disk_full(self) -> None:
        """A write found the disk full: give up the reserve (so deletes find room) and admit only deletes
        and collections until one of them is acknowledged."""
        self.full = True
        self._space_at = 0.0  # look at the filesystem again at the next write
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._reserve)
        log.error("the disk is full: only deletes and garbage collection are admitted until one succeeds")

    def _grow(self) -> bool:
        """Double the map (owner thread, no transaction open); False when the disk is full."""
        current = self.map_size
        free = shutil.disk_usage(self.path).free
        if self.data_file_bytes() + free <= current:
            log.error("map full and no disk left (map %d bytes, free %d)", current, free)
            return False
        target = current * 2
        with self._gate.exclusive():
            self.env.set_mapsize(target)
        self.stats.map_grows += 1
        log.info("grew LMDB map from %d to %d bytes", current, target)
        return True

    def _probe_lag(self, due: float) -> None:
        """How late the owner loop runs callbacks: the time a request waits before it is looked at."""
        now = time.monotonic()
        self.loop_lag = max(0.0, now - due)
        if not self._closed:
            self._lag_handle = self._loop.call_later(_LAG_PROBE, self._probe_lag, now + _LAG_PROBE)

    def _check_readers(self) -> None:
        """Clear reader slots of dead processes (now and every READER_CHECK_INTERVAL)."""
        if self._closed:
            return
        try:  # (owner loop: never at the same time as a map resize)
            cleared = self.env.reader_check()
        except lmdb.Error as e:  # pragma: no cover - the lock file is gone or damaged
            log.error("reader check failed: %s", e)
            cleared = 0
        if cleared:
            self.stale_readers_cleared += cleared
            log.warning("cleared %d stale LMDB reader slot(s) of dead processes", cleared)
        self._reader_handle = self._loop.call_later(READER_CHECK_INTERVAL, self._check_readers)

    # ---------------------------------------------------------- lifecycle

    def flush(self) -> None:
        """Commit now (owner thread) or wait for a commit of everything acknowledged (other threads)."""
        if self.on_owner:
            self._commit()
        else:
            done: Future = Future()
            self._loop.call_soon_threadsafe(lambda: (self._commit(), done.set_result(None)))
            done.result()

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is open, stop the owner loop (when private) and close the environment."""
        if self._closed:
            return
        if self.on_owner:
            self._shutdown()
        else:
            done: Future = Future()

            def shut() -> None:
                try:
                    self._shutdown()
                finally:
                    done.set_result(None)

            try:
                self._loop.call_soon_threadsafe(shut)
                done.result(timeout)
            except RuntimeError:  # the owner loop is gone
                self._closed = True
        if self._private is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._private.join(timeout)
            self._loop.close()
        with self._committed:
            self._committed.notify_all()
        with self._gate.exclusive():
            self.env.close()
        encryption.uninstall(self._installed)
        self._installed = []

    def _shutdown(self) -> None:
        self._commit()
        self._closed = True
        if self._lag_handle is not None:
            self._lag_handle.cancel()
        if self._reader_handle is not None:
            self._reader_handle.cancel()
        if self._log is not None:
            self._log.close()
            if self._txn is None and self._committed_seq == self._log.seq:
                self._drop_wal_files()

    def sync(self) -> None:
        self.env.sync(True)


#: free bytes below which a failed write is taken for a full disk: LMDB reports a write that the
#: filesystem cut short (it ran out of space in the middle) as EIO, not ENOSPC (tests/test_smallfs.py)
FULL_DISK_FREE = 1 << 20


def _disk_nearly_full(path: str | None) -> bool:
    if path is None:
        return False
    try:
        return shutil.disk_usage(path).free < FULL_DISK_FREE
    except OSError:
        return False


def _storage_error(e: lmdb.Error, path: str | None = None) -> ApiError:
    if isinstance(e, lmdb.DiskError) or "No space" in str(e):
        return ApiError("STORAGE_FULL", f"disk full or failing: nothing was written ({e})")
    if ("Input/output error" in str(e) or isinstance(e, lmdb.PanicError)) and _disk_nearly_full(path):
        return ApiError("STORAGE_FULL", f"disk full: nothing was written ({e})")
    if "Input/output error" in str(e) or isinstance(e, lmdb.PanicError):
        return ApiError("STORAGE_IO_ERROR", f"the disk failed a write: nothing was written ({e}); retry later")
    log.error("LMDB error: %s", e)
    return ApiError("INTERNAL_ERROR", f"storage error: {e}")


def now_us() -> int:
    return time.time_ns() // 1000
