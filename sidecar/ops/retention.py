"""retention: applying retention policies — the keep-rules gathered, the plan, the small removal jobs, the limits
checked on a put (docs/lifecycle.md "Retention").

A thread's plan is computed in a read snapshot (:func:`plan_thread`): its checkpoints per checkpoint namespace,
what protects which (:func:`protection`), then state/retention.decide. Removal goes in jobs of at most
``limits.RETENTION_BATCH`` checkpoints (:func:`remove_job`), each one nested transaction of the group commit;
each job first re-checks what the plan assumed (:class:`Premises`: the policy, the heads of the namespaces it
touches, the thread's active and queued runs, its branch count, and for every checkpoint whether it gained
pending writes) and removes nothing of the thread when any of it changed ("stale": the next pass plans again).
Nodes the removed checkpoints referred to are left to the garbage collector.

Keep-rules (a checkpoint a policy rule names stays when one holds):

* ``head``: the newest checkpoint of each (thread, checkpoint_ns);
* ``run``: the start and last checkpoints of the thread's active and queued runs, and every checkpoint such a
  run wrote (a rollback or a resume needs them);
* ``branch``: the fork checkpoint of each of the thread's branches;
* ``pending_writes``: a checkpoint with pending writes and no child checkpoint (its step has not finished);
* ``history``: with ``history_channels``, the ancestors a kept checkpoint needs to rebuild those channels
  (state/history.needed_for_history, as PruneCheckpoints does).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import limits
from ..errors import ApiError
from ..state import branches, history, retention, runs, threads
from ..state.retention import Ckpt, Decision, Meter, Policy, Usage
from ..state.runstate import Tx
from ..storage import layout, records, usage
from ..storage.store import Store


@dataclass
class Premises:
    """What a plan assumed of its thread; a removal job re-checks it."""

    tkey: int
    policy: bytes  # the effective policy's record encoding (its updated_us left out)
    heads: dict[str, str]  # cns -> head id
    runs: tuple  # (active, queue)
    branches: int
    with_writes: set[bytes]  # ckpts keys that had pending writes
    touched: tuple[int, int] = (0, 0)  # the thread record's updated_us and last_active_us


@dataclass
class ThreadPlan:
    ns: str
    thread_id: str
    decision: Decision
    premises: Premises
    delete_thread: bool = False
    checkpoints: int = 0


def _policy_bytes(policy: Policy) -> bytes:
    return layout.encode(policy.record(0, 0))


def chains_of(txn, store: Store, tkey: int) -> tuple[dict[str, list[Ckpt]], dict[bytes, layout.Manifest]]:
    """A thread's checkpoints per checkpoint namespace (oldest first: ids are time-ordered) and their manifests."""
    chains: dict[str, list[Ckpt]] = {}
    manifests: dict[bytes, layout.Manifest] = {}
    cursor = txn.cursor(db=store.db["ckpts"])
    prefix = layout.tkey_prefix(tkey)
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            key = bytes(key)
            _, cns, cid = layout.split_ckpt_key(key)
            m = layout.manifest_decoder.decode(raw)
            manifests[key] = m
            chains.setdefault(cns, []).append(Ckpt(key, cns, cid, m.created_us))
    return chains, manifests


def _has_writes(txn, store: Store, key: bytes) -> bool:
    cursor = txn.cursor(db=store.db["writes"])
    prefix = key + layout.SEP
    return cursor.set_range(prefix) and bytes(cursor.key()).startswith(prefix)


def _run_state(txn, store: Store, tkey: int, tx: Tx | None = None):
    st = tx.peek_state(tkey) if tx is not None else runs.thread_state(txn, store, tkey)
    if st is None:
        return None, ()
    return st, tuple(r for r in (st.active, *st.queue) if r)


def protection(txn, store: Store, ns: str, tkey: int, chains: dict[str, list[Ckpt]],
               manifests: dict[bytes, layout.Manifest], tx: Tx | None = None,
               ) -> tuple[dict[tuple[str, str], str], set[bytes]]:
    """((cns, id) -> keep-rule, keys with pending writes) for a thread (heads are state/retention's)."""
    protected: dict[tuple[str, str], str] = {}
    _, live = _run_state(txn, store, tkey, tx)
    if live:
        live_set = set(live)
        for run_id in live:
            rec = runs.get(txn, store, ns, run_id)
            if rec is None or rec.tkey != tkey:
                continue
            for cid in (rec.start_checkpoint_id, rec.last_checkpoint_id):
                if cid:
                    protected[(rec.cns, cid)] = retention.RUN
        for key, m in manifests.items():
            if m.run_id in live_set:
                _, cns, cid = layout.split_ckpt_key(key)
                protected[(cns, cid)] = retention.RUN
    for _, b in branches.of_thread(txn, store, tkey):
        if b.fork_checkpoint_id:
            protected.setdefault((b.cns, b.fork_checkpoint_id), retention.BRANCH)
    with_writes: set[bytes] = set()
    for cns, chain in chains.items():
        parents = {manifests[c.key].parent_id for c in chain}
        for c in chain:
            if _has_writes(txn, store, c.key):
                with_writes.add(c.key)
                if c.checkpoint_id not in parents:
                    protected.setdefault((cns, c.checkpoint_id), retention.PENDING_WRITES)
    return protected, with_writes


def _roots_by_checkpoint(txn, store: Store, tkey: int, manifests: dict[bytes, layout.Manifest],
                         ) -> dict[bytes, list[bytes]]:
    """ckpts key -> the node ids its channels, extra value and pending writes refer to."""
    roots: dict[bytes, list[bytes]] = {}
    for key, m in manifests.items():
        r = [node_id for _, node_id in m.channels]
        if m.extra is not None:
            r.append(m.extra)
        roots[key] = r
    cursor = txn.cursor(db=store.db["writes"])
    prefix = layout.tkey_prefix(tkey)
    if cursor.set_range(prefix):
        for wkey, raw in cursor.iternext():
            if not wkey.startswith(prefix):
                break
            tk, cns, cid, _, _ = layout.split_write_key(bytes(wkey))
            roots.setdefault(layout.ckpt_key(tk, cns, cid), []).append(layout.write_decoder.decode(raw).value)
    return roots


def bytes_curve(txn, store: Store, tkey: int, manifests: dict[bytes, layout.Manifest] | None = None):
    """``curve(gone, order)`` for state/retention.decide, from the thread's charge rows (storage/usage.py): its
    charged bytes after removing ``gone`` and the first k of ``order``, for every k, as the deletes would
    refund them (a checkpoint another one was built on refunds nothing while that one stays)."""
    charges, writes = usage.thread_charges(txn, store, tkey)
    t = usage.thread(txn, store, tkey)
    total = t.nbytes if t is not None else sum(r.nbytes for r in charges.values()) + sum(writes.values())
    return lambda gone, order: usage.refund_curve(charges, writes, total, gone, order)


def decide_thread(txn, store: Store, ns: str, tkey: int, policy: Policy, now: int, tx: Tx | None = None,
                  ) -> tuple[Decision, dict[str, list[Ckpt]], set[bytes]]:
    """The decision for one thread in ``txn`` (the keep-rules gathered; history needs resolved to a fixed point)."""
    chains, manifests = chains_of(txn, store, tkey)
    protected, with_writes = protection(txn, store, ns, tkey, chains, manifests, tx)
    curve = bytes_curve(txn, store, tkey, manifests) if policy.max_bytes and policy.on_limit else None
    while True:
        decision = retention.decide(chains, policy, now, protected, curve)
        if not policy.history_channels or not decision.doomed:
            return decision, chains, with_writes
        gone = {c.key for c in decision.doomed}
        added = False
        for cns, chain in chains.items():
            kept = [c.checkpoint_id for c in reversed(chain) if c.key not in gone]
            if not kept or len(kept) == len(chain):
                continue
            for cid in history.needed_for_history(txn, store, tkey, cns, kept, list(policy.history_channels)):
                if (cns, cid) not in protected and layout.ckpt_key(tkey, cns, cid) in gone:
                    protected[(cns, cid)] = retention.HISTORY
                    added = True
        if not added:
            return decision, chains, with_writes


def last_activity(rec: layout.ThreadRec, chains: dict[str, list[Ckpt]]) -> int:
    newest = max((chain[-1].created_us for chain in chains.values() if chain), default=0)
    return max(rec.created_us, rec.updated_us, rec.last_active_us, newest)


def plan_thread(txn, store: Store, ns: str, thread_id: str, now: int) -> ThreadPlan | None:
    """The plan for one thread under its effective policy (None: no thread, or no policy)."""
    rec = records.thread(txn, store, ns, thread_id)
    if rec is None:
        return None
    policy, _ = retention.effective(txn, store, ns, thread_id, rec.tkey)
    if policy is None:
        return None
    decision, chains, with_writes = decide_thread(txn, store, ns, rec.tkey, policy, now)
    st, live = _run_state(txn, store, rec.tkey)
    premises = Premises(rec.tkey, _policy_bytes(policy), {cns: chain[-1].checkpoint_id for cns, chain in chains.items()},
                        live, st.branches if st is not None else 0, with_writes, (rec.updated_us, rec.last_active_us))
    plan = ThreadPlan(ns, thread_id, decision, premises, checkpoints=sum(len(c) for c in chains.values()))
    if (policy.idle_after_us and not live and last_activity(rec, chains) < now - policy.idle_after_us
            and not _branch_running(txn, store, ns, rec.tkey)):
        plan.delete_thread = True
        plan.decision.doomed = [c for chain in chains.values() for c in chain]
    return plan


def _branch_running(txn, store: Store, ns: str, tkey: int) -> bool:
    """Whether a branch thread of this thread has an active or queued run (its parent is not idle then)."""
    for _, b in branches.of_thread(txn, store, tkey):
        brec = records.thread(txn, store, ns, b.branch_thread_id)
        if brec is not None and _run_state(txn, store, brec.tkey)[1]:
            return True
    return False


def _premises_hold(txn, store: Store, plan: ThreadPlan, keys: list[Ckpt]) -> bool:
    p = plan.premises
    rec = records.thread(txn, store, plan.ns, plan.thread_id)
    if rec is None or rec.tkey != p.tkey:
        return False
    policy, _ = retention.effective(txn, store, plan.ns, plan.thread_id, rec.tkey)
    if policy is None or _policy_bytes(policy) != p.policy:
        return False
    st, live = _run_state(txn, store, rec.tkey)
    if live != p.runs or (st.branches if st is not None else 0) != p.branches:
        return False
    for cns in {c.cns for c in keys}:
        head = records.latest(txn, store, rec.tkey, cns)
        if (head[0] if head else None) != p.heads.get(cns):
            return False
    if plan.delete_thread:
        return (rec.updated_us, rec.last_active_us) == p.touched
    return all(c.key in p.with_writes or not _has_writes(txn, store, c.key) for c in keys)


def remove_job(txn, store: Store, plan: ThreadPlan, batch: list[Ckpt]) -> int:
    """Remove one batch of a plan's checkpoints; -1 (nothing removed) when the plan's premises changed."""
    if not _premises_hold(txn, store, plan, batch):
        return -1
    removed = 0
    db = store.db["ckpts"]
    for c in batch:
        raw = txn.get(c.key, db=db)
        if raw is None:
            continue
        records.delete_checkpoint_at(txn, store, plan.ns, c.key, layout.manifest_decoder.decode(raw))
        removed += 1
    return removed


def delete_thread_job(txn, store: Store, plan: ThreadPlan) -> bool:
    """The last job of an idle thread's deletion: its record dropped and its contents queued for the sweeper's
    reclaim jobs (as a conversation's idle DELETE does). False when the premises changed."""
    if not _premises_hold(txn, store, plan, []) or records.checkpoint_keys(txn, store, layout.tkey_prefix(
            plan.premises.tkey)):
        return False  # a checkpoint put since the plan (or a changed premise): the thread is in use again
    threads.drop(txn, store, plan.ns, plan.thread_id)
    records.queue_reclaim(txn, store, plan.ns, plan.thread_id, plan.premises.tkey)
    txn.delete(layout.retention_key(plan.ns, plan.thread_id), db=store.db["retpol"])
    return True


def drop_stale_policy(txn, store: Store, ns: str, thread_id: str) -> bool:
    """Delete a thread policy row whose thread is gone (or is another thread of the same id now)."""
    raw = txn.get(layout.retention_key(ns, thread_id), db=store.db["retpol"])
    if raw is None:
        return False
    rec = records.thread(txn, store, ns, thread_id)
    if rec is not None and rec.tkey == layout.retention_decoder.decode(raw).tkey:
        return False
    txn.delete(layout.retention_key(ns, thread_id), db=store.db["retpol"])
    return True


# ----------------------------------------------------------------- limits on a put

def check_limits(tx: Tx, store: Store, ns: str, thread_id: str, tkey: int) -> int:
    """After a put added a checkpoint: the thread's limits (max_checkpoints, max_bytes). Over a limit, the
    policy's ``refuse`` raises RETENTION_LIMIT_EXCEEDED (the put's transaction is dropped: nothing is written);
    ``prune`` applies the whole policy to the thread in this transaction and refuses only if that cannot bring
    it under. Returns the checkpoints pruned."""
    txn = tx.txn
    policy, _ = retention.effective(txn, store, ns, thread_id, tkey)
    if policy is None or not policy.has_limits:
        return 0
    over = _over(txn, store, ns, tkey, policy)
    if over is None:
        return 0
    pruned = 0
    if policy.on_limit == retention.PRUNE:
        decision, _, _ = decide_thread(txn, store, ns, tkey, policy, store.clock(), tx)
        for c in decision.doomed:
            records.delete_checkpoint_at(txn, store, ns, c.key)
        pruned = len(decision.doomed)
        if pruned:
            tx.garbage = True
            store.stats.retention_pruned_on_put += pruned
        over = _over(txn, store, ns, tkey, policy)
    if over is not None:
        name, value, limit = over
        raise ApiError("RETENTION_LIMIT_EXCEEDED",
                       f"thread {thread_id!r} would hold {value} {'checkpoints' if name == 'max_checkpoints' else 'bytes'}"
                       f"; its retention policy allows {limit} ({name})", thread_id=thread_id, limit=name)
    return pruned


def _over(txn, store: Store, ns: str, tkey: int, policy: Policy) -> tuple[str, int, int] | None:
    """The limit the thread is over, from its usage counters (storage/usage.py: one read, no scan)."""
    t = usage.thread(txn, store, tkey)
    if t is None:  # (not expected: every thread has its row) counted
        t = usage.rebuild_thread(txn, store, ns, tkey)
    if policy.max_checkpoints and t.checkpoints > policy.max_checkpoints:
        return "max_checkpoints", t.checkpoints, policy.max_checkpoints
    if policy.max_bytes and t.nbytes > policy.max_bytes:
        return "max_bytes", t.nbytes, policy.max_bytes
    return None


# ----------------------------------------------------------------- usage

def thread_usage(txn, store: Store, tkey: int, meter: Meter, seen: set[bytes]) -> Usage:
    """A thread's checkpoints, pending writes, logical bytes and physical bytes (nodes not in ``seen``)."""
    u = Usage()
    roots: list[bytes] = []
    cursor = txn.cursor(db=store.db["ckpts"])
    prefix = layout.tkey_prefix(tkey)
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            m = layout.manifest_decoder.decode(raw)
            u.checkpoints += 1
            for _, node_id in m.channels:
                roots.append(node_id)
            if m.extra is not None:
                roots.append(m.extra)
    cursor = txn.cursor(db=store.db["writes"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            u.pending_writes += 1
            roots.append(layout.write_decoder.decode(raw).value)
    u.logical_bytes = sum(meter.logical(r) for r in roots)
    u.physical_bytes = meter.physical(roots, seen)
    return u


@dataclass
class NamespaceUsage:
    threads: int = 0
    total: Usage = field(default_factory=Usage)


def namespace_usage(txn, store: Store, ns: str) -> NamespaceUsage:
    """Every thread of a namespace together (physical bytes: a node shared by several threads counts once)."""
    meter = Meter(txn, store)
    seen: set[bytes] = set()
    out = NamespaceUsage()
    for _, rec in records.threads_from(txn, store, ns):
        u = thread_usage(txn, store, rec.tkey, meter, seen)
        out.threads += 1
        t = out.total
        t.checkpoints += u.checkpoints
        t.pending_writes += u.pending_writes
        t.logical_bytes += u.logical_bytes
        t.physical_bytes += u.physical_bytes
    return out


BATCH = limits.RETENTION_BATCH
