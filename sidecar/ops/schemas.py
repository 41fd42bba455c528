"""schemas: eager migrations (MigrateThread / MigrateNamespace), the schema registry and checkpoints in one
transaction per batch.

A batch rewrites up to ``batch`` checkpoints of one thread in place: each keeps its key (thread, checkpoint
namespace, id), parent, metadata and extra, and gets its channels migrated to the target version (new trees
written through the hash index, so unchanged values stay shared) and the target version. A crash between
batches leaves every checkpoint either as it was or migrated, never half of one; calling again skips those
at the target version, so the call resumes where it stopped.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from ..state import schemas
from ..storage import layout, nodes, records
from ..storage.store import Store

MAX_FAILURES = 100


@dataclass
class Progress:
    threads_done: int = 0
    seen: int = 0
    migrated: int = 0
    current: int = 0
    other: int = 0
    failed: int = 0
    failures: list = field(default_factory=list)  # (thread_id, cns, checkpoint_id, stored_version, error)
    thread_id: str = ""


def migrate_batch(txn, store: Store, ns: str, thread_id: str, tkey: int, name: str, target: int,
                  after: bytes | None, batch: int, progress: Progress) -> bytes | None:
    """Migrate the next ``batch`` checkpoints of thread ``tkey`` after key ``after`` (None: from the first);
    count them in ``progress``; return the last key looked at, or None when the thread is done."""
    rec = schemas.require(txn, store, ns, name)
    db = store.db["ckpts"]
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=db)
    found = cursor.set_range(after + b"\x00" if after is not None else prefix)
    fetch = nodes.fetcher(txn, store)
    last = None
    n = 0
    while found:
        key = bytes(cursor.key())
        if not key.startswith(prefix):
            return None
        if n == batch:
            return last
        m = layout.manifest_decoder.decode(cursor.value())
        n += 1
        last = key
        progress.seen += 1
        if m.schema != name:
            progress.other += 1
        elif m.schema_version >= target:
            progress.current += 1
        else:
            _, cns, cid = layout.split_ckpt_key(key)
            try:
                migrated = schemas.migrate_values(rec, name, m.channels, m.schema_version, target, fetch)
            except (schemas.Unreadable, schemas.MigrationError) as e:
                progress.failed += 1
                if len(progress.failures) < MAX_FAILURES:
                    progress.failures.append((thread_id, cns, cid, m.schema_version, str(e)))
            else:
                _rewrite(txn, store, ns, tkey, cns, cid, m, migrated, target)
                progress.migrated += 1
                # the rewrite put a record at this key: find the next one again
                found = cursor.set_range(key + b"\x00")
                continue
        found = cursor.next()
    return None


def _rewrite(txn, store: Store, ns: str, tkey: int, cns: str, cid: str, m, migrated, target: int) -> None:
    built: list = []
    hashes: dict[str, bytes] = {}
    for ch, (kind, ref) in migrated:
        if kind == "parts":
            shape, payload, _ = ref
            hashes[ch] = schemas.tree_of(shape, payload, built)
    ids = nodes.write(txn, store, built, {}, list(hashes.values()), ns) if hashes else {}
    channels = [(ch, ids[hashes[ch]] if kind == "parts" else ref) for ch, (kind, ref) in migrated]
    records.put_manifest(txn, store, ns, tkey, cns, cid,
                         msgspec.structs.replace(m, channels=channels, schema_version=target))
