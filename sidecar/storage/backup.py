"""backup: consistent, compacted copies of a store, and restoring one.

A backup is a directory holding ``data.mdb`` (LMDB's compacting copy of one
read snapshot: free pages left out) and ``backup.json``, its manifest::

    {"format": "agentstate-backup-1", "store_format": "agentstate-lmdb-1",
     "created": "2026-12-01T23:40:00Z", "sidecar_version": "...",
     "source": "/data/dir", "bytes": 123456, "blake3": "<hex of data.mdb>",
     "checkpoints": 42, "threads": 7, "nodes": 900, "wal_seq": 0,
     "created_us": 1796168400000000}

Consistency: the copy is one MVCC snapshot. Taken by the serving sidecar
(:func:`backup_store`) it first commits every acknowledged write (in
``process`` durability those may only be in the write-ahead log), so the
backup holds every write acknowledged before it began; the sidecar keeps
serving while the copy runs. Taken offline (:func:`backup_path`, no sidecar
on the directory) the store is opened once, which replays its log.

A backup is written into a temporary directory next to its target and
renamed into place when complete: a crash never leaves a half backup under
the target's name.

Restoring (:func:`restore`) verifies the backup (its BLAKE3, then the full
check of storage/verify.py), refuses a data directory a sidecar has locked,
and refuses to replace an existing store unless asked; the old store and its
log are moved aside to ``<dir>.replaced-<time>`` (never deleted), and the
restored copy goes in with no write-ahead log (its log records are in it).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable

import lmdb
from blake3 import blake3

from . import layout, verify
from .store import Store

FORMAT = "agentstate-backup-1"
MANIFEST = "backup.json"
DATA = "data.mdb"
LOCK = "sidecar.lock"  # the serving sidecar's lock on its data directory (server.py)
_HASH_CHUNK = 8 << 20

Progress = Callable[[str, int, int], None]  # (phase, done, total)


SCHEDULED_PREFIX = "backup-"
_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_NAME = 128


class BackupError(RuntimeError):
    """A backup or restore that cannot be done (named path, what is wrong); nothing was changed."""


@dataclass
class BackupManifest:
    format: str
    store_format: str
    created: str
    sidecar_version: str
    source: str
    bytes: int
    blake3: str
    checkpoints: int
    threads: int
    nodes: int
    wal_seq: int
    created_us: int = 0  # ``created`` in microseconds since the epoch (0 in backups written before it existed)


def file_hash(path: str, progress: Progress | None = None) -> str:
    """BLAKE3 (hex) of a file, read in chunks with progress."""
    total = os.path.getsize(path)
    h = blake3()
    done = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_HASH_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress("hashing", done, total)
    return h.hexdigest()


def _copy_env(env: lmdb.Environment, source: str, target: str, progress: Progress | None,
              version: str) -> BackupManifest:
    """Copy ``env`` compacted into a new backup directory ``target`` (atomically); its manifest."""
    tick = progress or (lambda phase, done, total: None)
    target = os.path.abspath(target)
    if os.path.exists(target):
        raise BackupError(f"{target} exists; a backup never overwrites")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".backup-", dir=parent)
    try:
        total = env.info()["last_pgno"] * env.stat()["psize"]
        tick("copying", 0, total)
        env.copy(tmp, compact=True)  # one read snapshot
        data = os.path.join(tmp, DATA)
        size = os.path.getsize(data)
        tick("copying", size, size)
        copy, copy_dbs = verify.open_env(tmp)  # the counts are of the copy itself
        try:
            with copy.begin() as txn:
                counts = {name: txn.stat(copy_dbs[name])["entries"] for name in ("ckpts", "threads", "nodes")}
                raw = txn.get(b"wal_seq", db=copy_dbs["meta"])
        finally:
            copy.close()
        for name in os.listdir(tmp):  # the copy's lock file is no part of the backup
            if name != DATA:
                os.unlink(os.path.join(tmp, name))
        now = dt.datetime.now(dt.timezone.utc)
        manifest = BackupManifest(FORMAT, layout.FORMAT_NAME, now.strftime("%Y-%m-%dT%H:%M:%SZ"), version,
                                  os.path.abspath(source), size, file_hash(data, progress), counts["ckpts"],
                                  counts["threads"], counts["nodes"],
                                  layout.read_u64(raw) if raw is not None else 0,
                                  int(now.timestamp() * 1_000_000))
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(asdict(manifest), f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        with open(data, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o700)
        os.rename(tmp, target)
        _fsync_dir(parent)
        return manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup_store(store: Store, target: str, progress: Progress | None = None, *, version: str = "",
                 ) -> BackupManifest:
    """(Not on the owner thread) back up a serving store: commit what was acknowledged, then copy.
    ``version``: the sidecar's, for the manifest."""
    store.wait_committed()
    return _copy_env(store.env, store.path, target, progress, version)


def is_locked(data_dir: str) -> bool:
    """Whether a sidecar holds ``data_dir`` (its lock file is locked)."""
    path = os.path.join(data_dir, LOCK)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def backup_path(data_dir: str, target: str, progress: Progress | None = None, *, version: str = "",
                ) -> BackupManifest:
    """Back up the store in ``data_dir`` with no sidecar serving it (it is opened once: its log replays)."""
    if not os.path.exists(os.path.join(data_dir, DATA)):
        raise BackupError(f"{data_dir}: no store here (no {DATA})")
    if is_locked(data_dir):
        raise BackupError(f"{data_dir} is in use by a sidecar: back it up through it (sidecar backup --address)")
    store = Store(data_dir)
    try:
        return backup_store(store, target, progress, version=version)
    finally:
        store.close()


def read_manifest(path: str) -> BackupManifest:
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            raw = json.load(f)
        manifest = BackupManifest(**raw)
    except FileNotFoundError:
        raise BackupError(f"{path}: not a backup (no {MANIFEST})") from None
    except (ValueError, TypeError) as e:
        raise BackupError(f"{path}/{MANIFEST}: unreadable manifest: {e}") from None
    if manifest.format != FORMAT:
        raise BackupError(f"{path}: unknown backup format {manifest.format!r}")
    if manifest.store_format != layout.FORMAT_NAME:
        raise BackupError(f"{path}: holds a store of format {manifest.store_format!r}, this sidecar reads "
                          f"{layout.FORMAT_NAME!r}")
    return manifest


def check_backup(path: str, progress: Progress | None = None, keys=None) -> tuple[BackupManifest, verify.Report]:
    """Verify a backup: its file against the manifest's size and BLAKE3, then the store inside it."""
    manifest = read_manifest(path)
    data = os.path.join(path, DATA)
    if not os.path.exists(data):
        raise BackupError(f"{path}: no {DATA}")
    size = os.path.getsize(data)
    if size != manifest.bytes:
        raise BackupError(f"{path}: {DATA} is {size} bytes, the manifest says {manifest.bytes}")
    digest = file_hash(data, progress)
    if digest != manifest.blake3:
        raise BackupError(f"{path}: {DATA} does not match the manifest's BLAKE3 (damaged or changed)")
    return manifest, verify.verify_path(path, progress, keys)


def restore(source: str, data_dir: str, *, replace: bool = False, progress: Progress | None = None,
            ) -> tuple[BackupManifest, verify.Report, str | None]:
    """Restore the backup ``source`` into ``data_dir``: (its manifest, its check, where the replaced store
    went or None). Nothing changes unless the backup checks clean and no sidecar holds ``data_dir``."""
    data_dir = os.path.abspath(data_dir)
    if is_locked(data_dir):
        raise BackupError(f"{data_dir} is in use by a running sidecar: stop it before restoring")
    existing = os.path.exists(os.path.join(data_dir, DATA))
    if os.path.exists(data_dir) and not existing and (not os.path.isdir(data_dir) or os.listdir(data_dir)):
        raise BackupError(f"{data_dir} is not empty and holds no store; restore into an empty or new directory")
    if existing and not replace:
        raise BackupError(f"{data_dir} holds a store; restoring over it needs --replace (it is moved aside, "
                          "not deleted)")
    manifest, report = check_backup(source, progress)
    if not report.clean:
        raise BackupError(f"{source}: the backup is damaged ({len(report.damaged)} damaged records, "
                          f"{len(report.missing_nodes)} missing nodes); nothing restored")
    parent = os.path.dirname(data_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".restore-", dir=parent)
    try:
        total = manifest.bytes
        done = 0
        with open(os.path.join(source, DATA), "rb") as src, open(os.path.join(tmp, DATA), "wb") as dst:
            while True:
                chunk = src.read(_HASH_CHUNK)
                if not chunk:
                    break
                dst.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress("restoring", done, total)
            dst.flush()
            os.fsync(dst.fileno())
        os.chmod(os.path.join(tmp, DATA), 0o600)
        os.chmod(tmp, 0o700)
        aside = None
        if os.path.isdir(data_dir) and not existing and not os.listdir(data_dir):
            os.rmdir(data_dir)
        elif os.path.exists(data_dir):
            aside = f"{data_dir}.replaced-{time.strftime('%Y%m%dT%H%M%S')}"
            os.rename(data_dir, aside)  # the old store with its log and lock file, kept whole
        os.rename(tmp, data_dir)
        _fsync_dir(parent)
        return manifest, report, aside
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def default_dir(data_dir: str) -> str:
    """Where backups go unless told (--backup-dir): next to the data directory, never inside it (a restore
    moves the replaced data directory aside whole)."""
    return os.path.abspath(data_dir).rstrip(os.sep) + "-backups"


def check_name(name: str) -> str | None:
    """Why ``name`` cannot name a backup directory (None: it can)."""
    if not name:
        return "is required"
    if len(name.encode()) > MAX_NAME:
        return f"is longer than {MAX_NAME} bytes"
    if name[0] == "." or not set(name) <= _NAME_OK:
        return "must be letters, digits, '.', '_' and '-', not starting with '.'"
    return None


def timed_name(now: float | None = None) -> str:
    """backup-<UTC time>: the name of an unnamed or scheduled backup."""
    return SCHEDULED_PREFIX + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def prune_timed(backup_dir: str, keep: int) -> list[str]:
    """Delete the oldest time-named backups beyond the newest ``keep``; returns the deleted paths. Backups
    named otherwise (by an operator) are never touched."""
    if keep <= 0 or not os.path.isdir(backup_dir):
        return []
    names = sorted(n for n in os.listdir(backup_dir) if n.startswith(SCHEDULED_PREFIX)
                   and os.path.exists(os.path.join(backup_dir, n, MANIFEST)))
    doomed = names[:-keep]
    for n in doomed:
        shutil.rmtree(os.path.join(backup_dir, n), ignore_errors=True)
    return [os.path.join(backup_dir, n) for n in doomed]
