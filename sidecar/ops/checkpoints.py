"""checkpoints: pruning a thread's checkpoints while keeping what a channel-history rebuild still needs, and
the diff of two checkpoints migrated on read."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ApiError
from ..state import checkpoints, history, schemas
from ..storage import layout, nodes, records
from ..storage.layout import Manifest
from ..storage.store import Store


def prune(txn, store: Store, ns: str, thread_ids: list[str], cns: str | None, *, keep_latest: int = 0,
          older_than_us: int = 0, delete_all: bool = False, history_channels: list[str] = ()) -> int:
    """Delete, per thread and checkpoint namespace, the checkpoints a policy (keep the latest
    ``keep_latest``, those older than ``older_than_us``, or all) names — except the ancestors the kept
    ones need to rebuild ``history_channels`` (history.needed_for_history). Returns how many went."""
    deleted = 0
    for tid in thread_ids:
        rec = records.thread(txn, store, ns, tid)
        if rec is None:
            continue
        for keys, doomed in checkpoints.prune_candidates(txn, store, rec.tkey, cns, keep_latest=keep_latest,
                                                         older_than_us=older_than_us, delete_all=delete_all):
            if history_channels and doomed:
                gone = set(doomed)
                kept = [layout.split_ckpt_key(k) for k in reversed(keys) if k not in gone]
                if kept:
                    needed = history.needed_for_history(txn, store, rec.tkey, kept[0][1], [c for _, _, c in kept],
                                                        list(history_channels))
                    doomed = [k for k in doomed if layout.split_ckpt_key(k)[2] not in needed]
            for key in doomed:
                records.delete_checkpoint_at(txn, store, ns, key)
            deleted += len(doomed)
    return deleted


# ----------------------------------------------------------------- diff migrated on read

@dataclass
class DiffMigration:
    """How the values a migrating diff compared relate to their stored versions (state/schemas.py STATUS_*):
    ``status`` MIGRATED when either side was migrated, else CURRENT, UNREGISTERED or NONE; DEGRADED when a side
    did not migrate under a DEGRADE policy (both sides are then compared as stored, ``error`` says why).
    ``from_version`` / ``to_version``: the versions of the values compared."""

    status: int
    error: str
    from_version: int
    to_version: int


def diff_read(txn, store: Store, ns: str, thread_id: str, cns: str, from_id: str, to_id: str,
              read: int) -> tuple[list[checkpoints.Change], DiffMigration | None]:
    """state/checkpoints.diff, each side read first as a GetCheckpoint of it at schema version ``read`` reads it
    (state/schemas.on_read: the failure policy applies, NEW_RUN behaving as FAIL): channels are matched by
    their migrated names, roots are the migrated values' roots and list figures count migrated items. A side
    that does not migrate under DEGRADE makes the whole diff one of the stored values: a diff of values of
    different shapes would report every renamed or converted field. ``read`` 0: as stored (migration None)."""
    if not read:
        return checkpoints.diff(txn, store, ns, thread_id, cns, from_id, to_id), None
    tkey, a, b = checkpoints.diff_pair(txn, store, ns, thread_id, cns, from_id, to_id)
    fetch = nodes.fetcher(txn, store)
    oa = _side_on_read(txn, store, ns, tkey, cns, from_id, a, fetch, read, "from_checkpoint_id")
    ob = _side_on_read(txn, store, ns, tkey, cns, to_id, b, fetch, read, "to_checkpoint_id")
    degraded = next((o for o in (oa, ob) if o.status == schemas.STATUS_DEGRADED), None)
    if degraded is not None:
        return (checkpoints.diff_sides(checkpoints.stored_side(a, fetch), checkpoints.stored_side(b, fetch), fetch,
                                       False),
                DiffMigration(schemas.STATUS_DEGRADED, degraded.error, a.schema_version, b.schema_version))
    status = next((s for s in (schemas.STATUS_MIGRATED, schemas.STATUS_CURRENT, schemas.STATUS_UNREGISTERED)
                   if s in (oa.status, ob.status)), schemas.STATUS_NONE)
    sides = [checkpoints.stored_side(m, fetch) if o.channels is None else checkpoints.migrated_side(o.channels, fetch)
             for m, o in ((a, oa), (b, ob))]
    return checkpoints.diff_sides(*sides, fetch, True), DiffMigration(status, "", oa.version, ob.version)


def _side_on_read(txn, store: Store, ns: str, tkey: int, cns: str, cid: str, m: Manifest, fetch, read: int,
                  field: str) -> schemas.Outcome:
    """One side's state/schemas.Outcome; a migration error names the side (``field``) and its checkpoint."""
    try:
        return schemas.on_read(txn, store, ns, tkey, cns, cid, m, fetch, read)[2]
    except ApiError as e:
        if e.reason not in ("SCHEMA_MIGRATION_FAILED", "SCHEMA_VERSION_UNREADABLE"):
            raise
        raise ApiError(e.reason, f"{field} {cid!r}: {e.message}", **{**e.metadata, "field": field,
                                                                      "checkpoint_id": cid}) from None
