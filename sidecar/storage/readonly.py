"""readonly: a data directory opened for reading only (LMDB ``MDB_RDONLY``), for ``sidecar inspect --data-dir``.

It offers what the read paths of the lower layers use from a :class:`~sidecar.storage.store.Store`
(``env``, ``db``, ``read()``, ``path``), so the api layer's read calls answer from it exactly as a
running sidecar would, and nothing that writes: a write raises :class:`ReadOnly`. A sidecar may be
running on the same directory (LMDB serves readers of other processes alongside its writer); what
is read is what LMDB has committed, so in ``process`` durability the writes acknowledged since the
sidecar's last commit (at most ``--commit-interval`` old) are not seen. The lock file and the
write-ahead log are never touched.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import lmdb

from . import compression, encryption, layout
from .store import now_us


#: Tables a store made by an older sidecar may lack (nothing a read path needs).
OPTIONAL_DBS = frozenset({"nodescope"})


class ReadOnly(RuntimeError):
    """A write was attempted on a read-only store."""


class ReadOnlyStore:
    def __init__(self, path: str, keys: encryption.KeyRing | None = None) -> None:
        """``keys``: a key ring to read encrypted namespaces' values with (checked against the keys the
        store remembers; nothing is recorded)."""
        if not os.path.exists(os.path.join(path, "data.mdb")):
            raise FileNotFoundError(f"{path}: no sidecar data directory here (no data.mdb)")
        self.path = path
        self.durability = "read-only"
        self.clock = now_us  # what conversations' expiry and compactions' leases are read against
        self.ns_idle_cache: dict = {}  # records.ns_idle's (read-only: never stale for longer than the command)
        self.on_owner = False
        self.env = lmdb.open(path, readonly=True, lock=True, max_dbs=len(layout.DB_NAMES) + 8, subdir=True,
                             readahead=False, max_readers=126)
        try:
            self.db = {}
            for name in layout.DB_NAMES:
                try:
                    self.db[name] = self.env.open_db(name.encode(), create=False)
                except lmdb.NotFoundError:
                    if name not in OPTIONAL_DBS:
                        raise
                    self.db[name] = None  # an older store, never opened by a sidecar that makes this table
            with self.env.begin() as txn:
                fmt = txn.get(b"format", db=self.db["meta"])
                if fmt is None or bytes(fmt).decode() != layout.FORMAT_NAME:
                    raise RuntimeError(f"{path}: unknown store format {fmt!r}")
                self._register_dictionaries(txn)
                used, self.encrypted = encryption.remembered(txn, self.db["meta"])
            self.keys = keys
            self._installed = encryption.install_for_reading(keys, used)
        except lmdb.NotFoundError:
            self.env.close()
            raise RuntimeError(f"{path}: not a store of this sidecar version (a table is missing)") from None
        except BaseException:
            self.env.close()
            raise

    def _register_dictionaries(self, txn) -> None:
        """Make the store's compression dictionaries known, so compressed values read back."""
        cursor = txn.cursor(db=self.db["meta"])
        if cursor.set_range(compression.META_PREFIX):
            for key, value in cursor:
                if not bytes(key).startswith(compression.META_PREFIX):
                    break
                if bytes(key) != compression.META_CURRENT:
                    compression.register(bytes(value))

    def prefix(self, ns: str) -> bytes:
        """The hash index prefix of namespace ``ns``'s nodes (see Store.prefix); sealed values stay sealed
        here unless the store was opened with ``keys``: reading them answers ENCRYPTION_KEY_MISSING."""
        return encryption.scope_prefix(ns) if ns in self.encrypted else b""

    @property
    def map_size(self) -> int:
        return self.env.info()["map_size"]

    def data_file_bytes(self) -> int:
        return os.path.getsize(os.path.join(self.path, "data.mdb"))

    @contextlib.contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        txn = self.env.begin(write=False, db=self.db["nodes"])
        try:
            yield txn
        finally:
            txn.abort()

    def _refuse(self, *args, **kwargs):
        raise ReadOnly(f"{self.path} is open read-only")

    run = start = submit = write = _refuse

    def close(self) -> None:
        encryption.uninstall(getattr(self, "_installed", []))
        self._installed = []
        self.env.close()
