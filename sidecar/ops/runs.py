"""runs: creating, stopping, rolling back and forking runs, and promoting a branch — in one transaction each.

A new run may need another thread (``create_thread``, a FORK's branch with
a copy of the fork checkpoint), may stop the thread's active run
(INTERRUPT), or stop it and take back what it wrote (ROLLBACK: its
checkpoints, pending writes and events). Promoting a branch copies its
checkpoints into the parent thread and puts the branch's head on top of the
parent's. The rules of each resource are in its state module; this one calls
them in order.
"""
from __future__ import annotations

import msgspec

from agentstate import ids

from ..errors import ApiError, checkpoint_not_found, invalid, thread_not_found
from ..state import branches, events, runs, runstate, threads
from ..state.runs import ENQUEUE, FORK, REJECT, ROLLBACK, RunSpec
from ..state.runstate import Tx
from ..storage import layout, metadata, nodes, records
from ..storage.layout import RunRec, ThreadRec


def create(tx: Tx, ns: str, thread_id: str, run_id: str, spec: RunSpec, *, create_thread: bool, branch_id: str,
           claim: bool) -> tuple[RunRec, str, bool]:
    """(the new run's record, the run it stopped or "", whether it was claimed): create a run of thread
    ``thread_id`` (made when missing with ``create_thread``) by its multitask strategy: queued (ENQUEUE),
    refused (REJECT), stopping the active run (INTERRUPT, ROLLBACK) or on a new branch ``branch_id``
    (FORK); an active new run is claimed at once with ``claim``."""
    txn, store = tx.txn, tx.store
    trec = records.thread(txn, store, ns, thread_id)
    if trec is None:
        if not create_thread:
            raise thread_not_found(ns, thread_id)
        trec = records.create_thread(txn, store, ns, thread_id)
    runs.check_new(tx, ns, run_id)
    if spec.start_checkpoint_id and records.manifest(txn, store, trec.tkey, spec.cns,
                                                     spec.start_checkpoint_id) is None:
        raise checkpoint_not_found(thread_id, spec.cns, spec.start_checkpoint_id, "start_checkpoint_id")
    rec = runs.new_record(tx, thread_id, trec.tkey, spec)
    if spec.strategy == FORK:
        fork(tx, ns, thread_id, trec, run_id, rec, branch_id)
    st = tx.state(ns, rec.thread_id, rec.tkey)
    active_id = st.active
    active = tx.run(ns, active_id) if active_id else None
    queued = False
    stopped = ""
    if active is not None:
        if spec.strategy == REJECT:
            raise runs.busy(thread_id, active_id, active)
        if spec.strategy == ENQUEUE:
            queued = True
        else:  # INTERRUPT, ROLLBACK
            stop_active(tx, ns, run_id, spec.strategy, active_id, active)
            stopped = active_id
    runs.admit(tx, ns, run_id, rec, queued=queued)
    claimed = not queued and claim
    if claimed:
        runs.claim(tx, ns, run_id, rec)
    return rec, stopped, claimed


def fork(tx: Tx, ns: str, thread_id: str, trec: ThreadRec, run_id: str, rec: RunRec, branch_id: str) -> None:
    """A FORK run gets branch thread ``branch_id``: a copy of the fork checkpoint (the run's start
    checkpoint, else the head of its checkpoint namespace) and the branch row of the parent."""
    txn, store = tx.txn, tx.store
    if branch_id == thread_id:
        raise invalid("branch_thread_id", "must differ from thread_id")
    if records.thread(txn, store, ns, branch_id) is not None:
        raise ApiError("THREAD_ALREADY_EXISTS", f"branch thread {branch_id!r} exists in namespace {ns!r}",
                       field="branch_thread_id", thread_id=branch_id)
    fork_id = rec.start_checkpoint_id
    if not fork_id:
        head = records.latest(txn, store, trec.tkey, rec.cns)
        fork_id = head[0] if head else ""
    brec = records.create_thread(txn, store, ns, branch_id, bytes(trec.metadata))
    if fork_id:
        records.copy_checkpoint(txn, store, ns, trec.tkey, brec.tkey, rec.cns, fork_id)
    branches.add(tx, ns, thread_id, trec.tkey, branch_id, brec.tkey, rec.cns, fork_id, run_id)
    runs.move_to_branch(tx, ns, run_id, rec, thread_id, trec.tkey, branch_id, brec.tkey, fork_id)


def stop_active(tx: Tx, ns: str, by: str, strategy: int, active_id: str, active: RunRec) -> None:
    """INTERRUPT / ROLLBACK: stop the thread's active run in favour of run ``by``."""
    runs.stop(tx, ns, by, active_id, active)
    if strategy == ROLLBACK:
        removed = rollback(tx, ns, active_id, active)
        runs.rolled_back(tx, ns, by, active_id, active, removed)
    else:
        runs.interrupted(tx, ns, by, active_id, active)


def rollback(tx: Tx, ns: str, run_id: str, rec: RunRec) -> int:
    """Remove a run's checkpoints, pending writes and events from its thread; returns checkpoints removed."""
    removed = records.delete_run_checkpoints(tx.txn, tx.store, ns, rec.tkey, run_id)
    events.delete_run_events(tx.txn, tx.store, rec.tkey, run_id)
    rec.last_checkpoint_id = ""
    tx.garbage = True
    return removed


def promote(tx: Tx, ns: str, thread_id: str, branch_id: str, expected_head_etag: str | None,
            ) -> tuple[str, str, int]:
    """(new head checkpoint id, its etag, checkpoints copied): copy branch ``branch_id``'s checkpoints into
    thread ``thread_id`` (those it lacks) and put the branch's head as the thread's new head. Both threads
    must be idle; ``expected_head_etag`` (when given) must be the thread's head etag ("" for none)."""
    txn, store = tx.txn, tx.store
    trec = threads.require(txn, store, ns, thread_id)
    found = branches.find(txn, store, trec.tkey, branch_id)
    brec = records.thread(txn, store, ns, branch_id)
    if found is None or brec is None:
        raise thread_not_found(ns, branch_id, "branch_thread_id")
    bkey, branch = found
    for tid, tk in ((thread_id, trec.tkey), (branch_id, brec.tkey)):
        runs.check_idle(tx, tid, tk)
    cns = branch.cns
    fetch = nodes.fetcher(txn, store)
    head = records.latest(txn, store, trec.tkey, cns)
    head_etag = "" if head is None else records.etag_of(head[0], head[1], fetch)
    if expected_head_etag is not None and expected_head_etag != head_etag:
        raise ApiError("ETAG_MISMATCH", f"expected_head_etag {expected_head_etag!r} is stale; the head of "
                       f"thread {thread_id!r} is {head_etag!r}", field="expected_head_etag",
                       current_etag=head_etag)
    bhead = records.latest(txn, store, brec.tkey, cns)
    if bhead is None:
        raise checkpoint_not_found(branch_id, cns, "", "branch_thread_id")
    copied = 0
    prefix = layout.cns_prefix(brec.tkey, cns)
    for key in records.checkpoint_keys(txn, store, prefix):
        if records.copy_checkpoint(txn, store, ns, brec.tkey, trec.tkey, cns, key[len(prefix):].decode(),
                                   overwrite=False):
            copied += 1
    new_id = ids.new_id()
    latest_now = records.latest(txn, store, trec.tkey, cns)
    if latest_now is not None and latest_now[0] >= new_id:
        raise ApiError("CONFLICT", f"thread {thread_id!r} has checkpoint ids that sort after server-made ids; "
                       "cannot put a new head", thread_id=thread_id)
    bid, bm = bhead
    meta = metadata.items(bm.metadata)
    meta["source"] = runstate.encode_obj("promote")
    meta["promoted_from"] = runstate.encode_obj(branch_id)
    m = layout.Manifest(layout.FORMAT_VERSION, layout.pack_id(bid), tx.now,
                        msgspec.Raw(metadata.encode(meta, "metadata")), list(bm.channels), bm.extra,
                        bm.schema_version, bm.run_id, bm.schema)
    records.put_manifest(txn, store, ns, trec.tkey, cns, new_id, m)
    branches.mark_promoted(txn, store, bkey, branch, tx.now)
    tx.append_event(ns, thread_id, trec.tkey, layout.EventRec(
        layout.FORMAT_VERSION, branch.run_id, "", runstate.SERVER_EVENT_PREFIX + "branch.promoted",
        runstate.encode_obj({"branch_thread_id": branch_id, "checkpoint_id": new_id}), "", tx.now))
    return new_id, records.etag_of(new_id, m, fetch), copied
