"""runs: a thread's runs and their records (converted piece by piece from sidecar/api/runs.py).

For now: what deleting a thread removes of its runs and of what they made.
"""
from __future__ import annotations

from ..storage import layout, records
from ..storage.store import Store


def delete_thread_records(txn, store: Store, ns: str, tkey: int) -> None:
    """Delete a thread's runs (with steps and timers), run state, events and branches (its effects and
    artifacts: state/effects.py, state/artifacts.py)."""
    db = store.db
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=db["thruns"])
    run_ids = []
    if cursor.set_range(prefix):
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                break
            run_ids.append(bytes(value).decode())
    for run_id in run_ids:
        rkey = layout.ns_key(ns, run_id)
        raw = txn.get(rkey, db=db["runs"])
        if raw is None:
            continue
        rec = layout.run_decoder.decode(raw)
        if rec.tkey != tkey:
            continue
        if rec.lease_expires_us:
            txn.delete(layout.timer_key(rec.lease_expires_us, layout.TIMER_LEASE, ns, run_id), db=db["timers"])
        if rec.deadline_us:
            txn.delete(layout.timer_key(rec.deadline_us, layout.TIMER_DEADLINE, ns, run_id), db=db["timers"])
        txn.delete(rkey, db=db["runs"])
    txn.delete(layout.u64(tkey), db=db["tstate"])
    for name in ("thruns", "steps", "events", "evids", "branches"):
        records.delete_prefix(txn, db[name], prefix)
