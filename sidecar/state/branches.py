"""branches: the fork branches of a thread.

A FORK run works on a new thread, its branch, that starts from a copy of
the parent's fork checkpoint (ops/runs.py composes the fork). The parent
keeps a row ``tkey seq`` of the ``branches`` table per branch (its thread,
checkpoint namespace, fork checkpoint, the run, when it was made and
promoted); the seq counts the parent's branches in its run state, and the
branch's run state names its parent thread.
"""
from __future__ import annotations

from typing import Iterator

from ..storage import layout, records
from ..storage.layout import BranchRec
from ..storage.store import Store
from .runstate import Tx


def add(tx: Tx, ns: str, thread_id: str, tkey: int, branch_id: str, branch_tkey: int, cns: str, fork_id: str,
        run_id: str) -> None:
    """Record branch ``branch_id`` (thread ``branch_tkey``) of thread ``thread_id``, forked at ``fork_id``
    for run ``run_id``."""
    pst = tx.state(ns, thread_id, tkey)
    pst.branches += 1
    tx.touch_state(tkey)
    tx.txn.put(layout.seq_key(tkey, pst.branches),
               layout.encode(BranchRec(layout.FORMAT_VERSION, branch_id, cns, fork_id, run_id, tx.now, 0)),
               db=tx.db["branches"])
    bst = tx.state(ns, branch_id, branch_tkey)
    bst.parent_thread = thread_id


def of_thread(txn, store: Store, tkey: int) -> Iterator[tuple[bytes, BranchRec]]:
    """(key, record) of a thread's branches in creation order."""
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["branches"])
    if cursor.set_range(prefix):
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                return
            yield bytes(key), layout.branch_decoder.decode(value)


def find(txn, store: Store, tkey: int, branch_id: str) -> tuple[bytes, BranchRec] | None:
    """(key, record) of the thread's newest branch to thread ``branch_id``, or None."""
    found = [(k, b) for k, b in of_thread(txn, store, tkey) if b.branch_thread_id == branch_id]
    return found[-1] if found else None


def mark_promoted(txn, store: Store, key: bytes, branch: BranchRec, now: int) -> None:
    branch.promoted_us = now
    txn.put(key, layout.encode(branch), db=store.db["branches"])


def delete_thread_branches(txn, store: Store, tkey: int) -> None:
    """Delete a thread's branch rows (the branch threads stay: they are threads of their own)."""
    records.delete_prefix(txn, store.db["branches"], layout.tkey_prefix(tkey))
