"""runs: a thread's runs and their records (converted piece by piece from sidecar/api/runs.py).

For now: what deleting a thread removes of its runs and of what they made.
"""
from __future__ import annotations

from ..storage import layout, records
from ..storage.store import Store


def delete_thread_records(txn, store: Store, ns: str, tkey: int) -> None:
    """Delete a thread's runs (with steps and timers), run state, events, artifacts, effects and branches."""
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
    cursor = txn.cursor(db=db["effthr"])
    keys = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            keys.append(bytes(key[8:]).decode())
    for ikey in keys:
        ekey = layout.ns_key(ns, ikey)
        raw = txn.get(ekey, db=db["effects"])
        if raw is not None and layout.effect_decoder.decode(raw).tkey == tkey:
            txn.delete(ekey, db=db["effects"])
    txn.delete(layout.u64(tkey), db=db["tstate"])
    for name in ("thruns", "steps", "events", "evids", "artifacts", "artnames", "effthr", "branches"):
        records.delete_prefix(txn, db[name], prefix)
