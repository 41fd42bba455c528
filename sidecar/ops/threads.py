"""threads: deleting a thread with everything on it, in one transaction."""
from __future__ import annotations

from ..state import artifacts, branches, calibration, conversations, effects, events, pins, runs, steps, threads
from . import compaction
from ..storage import records
from ..storage.layout import ThreadRec
from ..storage.store import Store


def delete(txn, store: Store, ns: str, thread_id: str, *, etag: str, allow_missing: bool,
           ) -> tuple[ThreadRec | None, int]:
    """(the deleted thread's record or None when there was none and ``allow_missing``, checkpoints deleted):
    the thread's runs, steps, events, artifacts, effects, branches and conversation log, its checkpoints and
    pending writes, and the thread record itself."""
    rec = records.thread(txn, store, ns, thread_id) if allow_missing else threads.require(txn, store, ns, thread_id)
    if rec is None:
        return None, 0
    threads.check_etag(rec, etag)
    n = delete_contents(txn, store, ns, thread_id, rec.tkey)
    threads.drop(txn, store, ns, thread_id)
    return rec, n


def delete_contents(txn, store: Store, ns: str, thread_id: str, tkey: int) -> int:
    """Delete everything stored under thread key ``tkey`` (not the thread record); returns the checkpoints
    deleted. Also used by the sweeper for a thread its idle policy deleted (ops/sweep.py)."""
    runs.delete_thread_runs(txn, store, ns, tkey)
    steps.delete_thread_steps(txn, store, tkey)
    events.delete_thread_events(txn, store, tkey)
    effects.delete_thread_effects(txn, store, ns, tkey)
    artifacts.delete_thread_artifacts(txn, store, ns, tkey)
    branches.delete_thread_branches(txn, store, tkey)
    conversations.delete_thread_conversation(txn, store, tkey)
    compaction.delete_thread(txn, store, ns, thread_id, tkey)
    pins.delete_thread_pins(txn, store, tkey)
    calibration.delete_thread_calibration(txn, store, tkey)
    return records.delete_checkpoints(txn, store, ns, tkey)
