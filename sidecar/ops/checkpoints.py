"""checkpoints: pruning a thread's checkpoints while keeping what a channel-history rebuild still needs."""
from __future__ import annotations

from ..state import checkpoints, history
from ..storage import layout, records
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
