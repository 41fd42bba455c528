"""threads: deleting a thread with everything on it, in one transaction."""
from __future__ import annotations

from ..state import artifacts, branches, effects, events, runs, steps, threads
from ..storage import records
from ..storage.layout import ThreadRec
from ..storage.store import Store


def delete(txn, store: Store, ns: str, thread_id: str, *, etag: str, allow_missing: bool,
           ) -> tuple[ThreadRec | None, int]:
    """(the deleted thread's record or None when there was none and ``allow_missing``, checkpoints deleted):
    the thread's runs, steps, events, artifacts, effects and branches, its checkpoints and pending writes,
    and the thread record itself."""
    rec = records.thread(txn, store, ns, thread_id) if allow_missing else threads.require(txn, store, ns, thread_id)
    if rec is None:
        return None, 0
    threads.check_etag(rec, etag)
    runs.delete_thread_runs(txn, store, ns, rec.tkey)
    steps.delete_thread_steps(txn, store, rec.tkey)
    events.delete_thread_events(txn, store, rec.tkey)
    effects.delete_thread_effects(txn, store, ns, rec.tkey)
    artifacts.delete_thread_artifacts(txn, store, ns, rec.tkey)
    branches.delete_thread_branches(txn, store, rec.tkey)
    n = records.delete_checkpoints(txn, store, ns, rec.tkey)
    threads.drop(txn, store, ns, thread_id)
    return rec, n
