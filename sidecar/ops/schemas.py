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
from ..errors import ApiError
from ..storage import layout, nodes, records, usage
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
    failures: list = field(default_factory=list)  # (thread_id, cns, checkpoint_id, stored_version, error
    #                                                [, memory path, memory key[, item seq]])
    thread_id: str = ""
    mem_seen: int = 0
    mem_migrated: int = 0
    mem_current: int = 0
    mem_other: int = 0
    mem_failed: int = 0
    conv_seen: int = 0
    conv_migrated: int = 0
    conv_current: int = 0
    conv_other: int = 0
    conv_failed: int = 0


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
                writes = migrated_writes(txn, store, tkey, cns, cid, rec, m, target, fetch)
            except (schemas.Unreadable, schemas.MigrationError) as e:
                progress.failed += 1
                if len(progress.failures) < MAX_FAILURES:
                    progress.failures.append((thread_id, cns, cid, m.schema_version, str(e)))
            else:
                _rewrite(txn, store, ns, tkey, cns, cid, m, migrated, target)
                _rewrite_writes(txn, store, ns, writes)
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


# ----------------------------------------------------------------- writes migrated with their checkpoint

def migrated_writes(txn, store: Store, tkey: int, cns: str, cid: str, rec, m, target: int, fetch) -> list:
    """The pending writes of checkpoint ``cid`` migrated with it: [(key, WriteRec or None)] (None: the steps
    dropped the write's channel; the row is deleted). Raises as :func:`schemas.migrate_partial`."""
    out = []
    for task_id, idx, w in records.write_rows(txn, store, tkey, cns, cid):
        moved = schemas.migrate_partial(rec, m.schema, w.channel, nodes.value_encoding(w.value, fetch),
                                        m.schema_version, target)
        out.append((layout.write_key(tkey, cns, cid, task_id, idx), w, moved))
    return out


def _rewrite_writes(txn, store: Store, ns: str, writes: list) -> None:
    db = store.db["writes"]
    for key, w, moved in writes:
        if moved is None:
            txn.delete(key, db=db)
            usage.refund_writes(txn, store, ns, layout.read_u64(key[:8]), max(w.charge, 0))
            continue
        channel, enc = moved
        built: list = []
        root = schemas.tree(schemas.decode(enc), built)
        ids = nodes.write(txn, store, built, {}, [root], ns)
        txn.put(key, layout.encode(msgspec.structs.replace(w, channel=channel, value=ids[root])), db=db)


# ----------------------------------------------------------------- stored map values (memory and log items)

def _due(item, name: str, target: int, progress: Progress, kind: str) -> bool:
    """Whether a memory item (``kind`` "mem") or a conversation item ("conv") a batch looked at is to be
    migrated: stored under schema ``name`` at a version under ``target``. Counts it in ``progress``'s
    ``{kind}_seen`` and, when not due, ``{kind}_other`` (another schema or none) or ``{kind}_current``."""
    _count(progress, kind, "seen")
    if item.schema != name:
        _count(progress, kind, "other")
        return False
    if item.schema_version >= target:
        _count(progress, kind, "current")
        return False
    return True


def _count(progress: Progress, kind: str, what: str) -> None:
    attr = f"{kind}_{what}"
    setattr(progress, attr, getattr(progress, attr) + 1)


def _migrated_map(rec, name: str, stored: int, target: int, encoding: bytes) -> bytes:
    """The canonical encoding of a stored map value (``encoding``, at version ``stored``) migrated to ``target``
    by the schema's steps (Unreadable, MigrationError as state/schemas.plan and apply; a value that is not a
    map is a MigrationError)."""
    versions = schemas.plan(rec, name, stored, target)
    value = schemas.decode(encoding)
    if type(value) is not dict:
        raise schemas.MigrationError(target, 0, [], f"expected a map, found {type(value).__name__}")
    return schemas.encode(schemas.apply(value, versions))


# ----------------------------------------------------------------- memory items (MigrateNamespace)

MIGRATE_ACTOR = "agentstate:migrate"


def migrate_memory_batch(txn, store: Store, memory, ns: str, name: str, target: int, after: tuple | None,
                         batch: int, progress: Progress, now: int) -> tuple | None:
    """Migrate the next ``batch`` live memory items of namespace ``ns`` after position ``after`` ((path labels,
    key); None: from the first), in (path, key) order: each stored under schema ``name`` at an older version
    is put again (a new revision, state/memory.Memory.put) with the migrated value and the target version.
    Returns the last position looked at, or None when the namespace is done."""
    from ..state import memory as mem  # noqa: PLC0415  (ops may compose state modules)
    rec = schemas.require(txn, store, ns, name)
    todo: list = []
    last = None
    for labels, prec in memory._paths_under(txn, ns, ()):
        if after is not None and labels < after[0]:
            continue
        for key, item in memory._items_of(txn, prec.path_id):
            if after is not None and (labels, key) <= after:
                continue
            if len(todo) == batch:
                break
            todo.append((labels, key, item))
            last = (labels, key)
        if len(todo) == batch:
            break
    for labels, key, item in todo:
        if not mem.visible(item, now):
            continue
        if not _due(item, name, target, progress, "mem"):
            continue
        try:
            encoding = _migrated_map(rec, name, item.schema_version, target, memory.value_of(txn, item.value))
        except (schemas.Unreadable, schemas.MigrationError) as e:
            progress.mem_failed += 1
            if len(progress.failures) < MAX_FAILURES:
                progress.failures.append(("", "", "", item.schema_version, str(e), list(labels), key))
            continue
        memory.put(txn, ns, mem.PutInput(labels, key, encoding, vector_update=mem.VECTOR_MERGE, ttl_ms=item.ttl_ms,
                                         provenance=item.provenance, origin=item.origin, actor=MIGRATE_ACTOR,
                                         schema=name, schema_version=target), now)
        progress.mem_migrated += 1
    return last if len(todo) == batch else None


# ----------------------------------------------------------------- conversation items (MigrateThread / Namespace)

def migrate_conversation_batch(txn, store: Store, ns: str, thread_id: str, tkey: int, name: str, target: int,
                               after: int, batch: int, progress: Progress) -> int | None:
    """Migrate the next ``batch`` conversation items of thread ``tkey`` with seq over ``after`` (0: from the
    first): each stored under schema ``name`` at an older version gets its content migrated and the target
    version, in place (same seq, kind, ids, metadata, times). Returns the last seq looked at, or None when the
    log is done (the items are read before any is rewritten).

    Kept as appended: ``raw`` and ``cum_raw`` (the token estimate and its running sum, so range sums over the
    log stay right; docs/lifecycle.md), ``tokens``, ``compact`` and ``dedupe_key``; pending compactions and
    summaries keep the content hash they were issued over. The item's charge (storage/usage.py ``icharge``)
    follows the new size; an item whose growth the namespace's quota refuses is left alone and counted as
    failed. The old content's node, if any, is reclaimed by GC."""
    from ..state import conversations as conv  # noqa: PLC0415  (ops may compose state modules)
    rec = schemas.require(txn, store, ns, name)
    db = store.db["citems"]
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=db)
    found = cursor.set_range(layout.seq_key(tkey, after + 1))
    todo: list = []
    more = False
    while found:
        key = bytes(cursor.key())
        if not key.startswith(prefix):
            break
        if len(todo) == batch:
            more = True
            break
        seq = layout.split_seq_key(key)[1]
        todo.append((key, seq, layout.item_decoder.decode(cursor.value())))
        found = cursor.next()
    for key, seq, item in todo:
        if not _due(item, name, target, progress, "conv"):
            continue
        old = item.inline if item.node is None else nodes.value_encoding(item.node, txn.get)
        try:
            encoding = _migrated_map(rec, name, item.schema_version, target, old)
            meta = None if item.metadata is None else bytes(item.metadata)
            before, after_charge = usage.conversation_charge(old, meta), usage.conversation_charge(encoding, meta)
            charged = txn.get(usage.conv_item_key(tkey, seq), db=store.db["icharge"]) is not None
            if charged and after_charge > before:
                usage.check(txn, store, ns, nbytes=after_charge - before)
        except (schemas.Unreadable, schemas.MigrationError, ApiError) as e:
            progress.conv_failed += 1
            if len(progress.failures) < MAX_FAILURES:
                progress.failures.append((thread_id, "", "", item.schema_version,
                                          e.message if isinstance(e, ApiError) else str(e), [], "", seq))
            continue
        if len(encoding) > conv.INLINE_MAX:
            h, node = conv._store_content(txn, store, ns, encoding)
            inline = b""
        else:
            h, node, inline = conv.content_hash(encoding), None, encoding
        txn.put(key, layout.encode(msgspec.structs.replace(item, content_hash=h, inline=inline, node=node,
                                                           schema_version=target)), db=db)
        if charged and after_charge != before:
            txn.put(usage.conv_item_key(tkey, seq), layout.u64(after_charge), db=store.db["icharge"])
            usage.add(txn, store, ns, nbytes=after_charge - before)  # as usage.conversation_added
        progress.conv_migrated += 1
    return todo[-1][1] if more else None
