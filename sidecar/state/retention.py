"""retention: retention policies (``retpol``) and the keep-rule computation (docs/lifecycle.md "Retention").

A policy belongs to a namespace or to one thread; a thread's own replaces its namespace's whole. Each of its
rules names checkpoints to remove, per (thread, checkpoint_ns):

* ``keep_last`` N: all but the newest N;
* ``max_age``: those created longer ago than that;
* ``thin_after`` + ``thin_interval``: of those older than ``thin_after``, all but the newest of each
  ``thin_interval`` window of creation time (windows are fixed on the clock, so a second sweep of the same
  history removes nothing more);
* in ``prune`` mode, the limits: the oldest removable ones until the thread holds at most ``max_checkpoints``
  (all namespaces together), and at most ``max_bytes`` charged bytes (storage/usage.py).

A checkpoint named by a rule goes unless a keep-rule protects it (:data:`KEEP_RULES`; ops/retention.py gathers
what protects what: heads, runs, branches, pending writes, the parent chains of ``history_channels``). The
decision (:func:`decide`) is a pure function of the checkpoints' facts, the policy and the time, so a dry run
and the sweep compute the same set from the same snapshot.

This module also measures (:class:`Usage`): logical bytes (what the values would take written whole: every
reference counted, scalar encodings, chunked payloads and map keys) next to physical bytes (the stored node
records reached, each once).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..storage import hotpath as hp
from ..storage import layout
from ..storage.layout import RetentionRec
from ..storage.store import Store

REFUSE, PRUNE = 1, 2  # LimitAction (retention.proto)
SOURCE_NONE, SOURCE_NAMESPACE, SOURCE_THREAD = 1, 2, 3  # RetentionSource
_TAG_CHUNK = 0x63  # c: one content-defined chunk (storage/_hotpath_py.py)

#: Why a checkpoint a rule names is kept (ApplyRetentionResponse.kept_by_rule keys).
HEAD, RUN, BRANCH, PENDING_WRITES, HISTORY = "head", "run", "branch", "pending_writes", "history"
KEEP_RULES = (HEAD, RUN, BRANCH, PENDING_WRITES, HISTORY)


@dataclass(frozen=True)
class Policy:
    keep_last: int = 0
    max_age_us: int = 0
    thin_after_us: int = 0
    thin_interval_us: int = 0
    idle_after_us: int = 0
    max_checkpoints: int = 0
    max_bytes: int = 0
    on_limit: int = 0
    history_channels: tuple[str, ...] = ()

    @property
    def removes_history(self) -> bool:
        """Whether the policy names checkpoints by itself (without a limit being passed)."""
        return bool(self.keep_last or self.max_age_us or (self.thin_after_us and self.thin_interval_us))

    @property
    def has_limits(self) -> bool:
        return bool(self.max_checkpoints or self.max_bytes)

    def record(self, tkey: int, now: int) -> RetentionRec:
        return RetentionRec(layout.FORMAT_VERSION, tkey, self.keep_last, self.max_age_us, self.thin_after_us,
                            self.thin_interval_us, self.idle_after_us, self.max_checkpoints, self.max_bytes,
                            self.on_limit, list(self.history_channels), now)


def policy_of(rec: RetentionRec) -> Policy:
    return Policy(rec.keep_last, rec.max_age_us, rec.thin_after_us, rec.thin_interval_us, rec.idle_after_us,
                  rec.max_checkpoints, rec.max_bytes, rec.on_limit, tuple(rec.history_channels))


# ----------------------------------------------------------------- records

def set_policy(txn, store: Store, ns: str, thread_id: str, tkey: int, policy: Policy | None, now: int) -> None:
    """Set (or, with None, clear) the policy of a namespace (``thread_id`` "") or of a thread."""
    key = layout.retention_key(ns, thread_id)
    if policy is None:
        txn.delete(key, db=store.db["retpol"])
    else:
        txn.put(key, layout.encode(policy.record(tkey, now)), db=store.db["retpol"])


def _get(txn, store: Store, ns: str, thread_id: str) -> RetentionRec | None:
    raw = txn.get(layout.retention_key(ns, thread_id), db=store.db["retpol"])
    return None if raw is None else layout.retention_decoder.decode(raw)


def own(txn, store: Store, ns: str, thread_id: str, tkey: int) -> Policy | None:
    """The scope's own policy (a thread's row left by an earlier thread of the same id does not count)."""
    rec = _get(txn, store, ns, thread_id)
    if rec is None or (thread_id and rec.tkey != tkey):
        return None
    return policy_of(rec)


def effective(txn, store: Store, ns: str, thread_id: str, tkey: int) -> tuple[Policy | None, int]:
    """(policy, source) in effect on a thread: its own, else its namespace's, else (None, SOURCE_NONE)."""
    p = own(txn, store, ns, thread_id, tkey)
    if p is not None:
        return p, SOURCE_THREAD
    p = own(txn, store, ns, "", 0)
    if p is not None:
        return p, SOURCE_NAMESPACE
    return None, SOURCE_NONE


def scopes(txn, store: Store) -> dict[str, list[str]]:
    """Every namespace with a policy row: ns -> thread ids with their own row ("" first when the namespace
    has one)."""
    out: dict[str, list[str]] = {}
    for key in txn.cursor(db=store.db["retpol"]).iternext(values=False):
        ns, _, thread_id = bytes(key).partition(layout.SEP)
        out.setdefault(ns.decode(), []).append(thread_id.decode())
    return out


# ----------------------------------------------------------------- the decision

@dataclass(frozen=True)
class Ckpt:
    """What the decision needs of one checkpoint."""

    key: bytes  # its ckpts key
    cns: str
    checkpoint_id: str
    created_us: int


@dataclass
class Decision:
    doomed: list[Ckpt] = field(default_factory=list)  # oldest first per checkpoint namespace
    kept_by: dict[str, int] = field(default_factory=dict)  # keep-rule -> checkpoints a rule named that it kept


def named_by_rules(chain: list[Ckpt], policy: Policy, now: int) -> set[str]:
    """Ids of one (thread, cns) chain (oldest first) that the policy's own rules name."""
    named: set[str] = set()
    n = len(chain)
    if policy.keep_last and n > policy.keep_last:
        named.update(c.checkpoint_id for c in chain[:n - policy.keep_last])
    if policy.max_age_us:
        horizon = now - policy.max_age_us
        named.update(c.checkpoint_id for c in chain if c.created_us < horizon)
    if policy.thin_after_us and policy.thin_interval_us:
        horizon = now - policy.thin_after_us
        newest_of: dict[int, str] = {}
        for c in chain:  # oldest first: the last one seen in a window is its newest
            if c.created_us < horizon:
                newest_of[c.created_us // policy.thin_interval_us] = c.checkpoint_id
        keep = set(newest_of.values())
        named.update(c.checkpoint_id for c in chain if c.created_us < horizon and c.checkpoint_id not in keep)
    return named


def decide(chains: dict[str, list[Ckpt]], policy: Policy, now: int, protected: dict[tuple[str, str], str],
           bytes_curve: Callable[[set[bytes], list[bytes]], list[int]] | None = None) -> Decision:
    """What the policy removes from one thread: ``chains`` (cns -> checkpoints, oldest first), ``protected``
    ((cns, id) -> keep-rule; the head of each chain is protected here). ``bytes_curve(gone, order)`` gives the
    thread's charged bytes without the checkpoints ``gone`` and the first k of ``order``, for every k from 0
    to len(order) (needed for ``max_bytes`` in prune mode)."""
    out = Decision()
    doomed: set[bytes] = set()
    removable: list[Ckpt] = []  # what the limits may take, oldest first (by creation, then id)
    for cns, chain in chains.items():
        if not chain:
            continue
        named = named_by_rules(chain, policy, now)
        for i, c in enumerate(chain):
            rule = HEAD if i == len(chain) - 1 else protected.get((cns, c.checkpoint_id))
            if rule is not None:
                if c.checkpoint_id in named:
                    out.kept_by[rule] = out.kept_by.get(rule, 0) + 1
                continue
            if c.checkpoint_id in named:
                doomed.add(c.key)
            else:
                removable.append(c)
    if policy.on_limit == PRUNE and policy.has_limits:
        removable.sort(key=lambda c: (c.created_us, c.checkpoint_id))
        total = sum(len(chain) for chain in chains.values())
        extra = 0
        if policy.max_checkpoints and total - len(doomed) > policy.max_checkpoints:
            extra = min(len(removable), total - len(doomed) - policy.max_checkpoints)
        if policy.max_bytes and bytes_curve is not None and extra < len(removable):
            after = bytes_curve(doomed, [c.key for c in removable])
            # the fewest oldest ones (at least ``extra``) that bring it under; all of them when none do
            extra = next((k for k in range(extra, len(removable) + 1) if after[k] <= policy.max_bytes),
                         len(removable))
        doomed.update(c.key for c in removable[:extra])
    for chain in chains.values():
        out.doomed.extend(c for c in chain if c.key in doomed)
    return out


# ----------------------------------------------------------------- usage

@dataclass
class Usage:
    checkpoints: int = 0
    pending_writes: int = 0
    logical_bytes: int = 0
    physical_bytes: int = 0


class Meter:
    """Logical and physical bytes of sets of node ids in one snapshot (memoized per node: nodes never change)."""

    def __init__(self, txn, store: Store) -> None:
        db = store.db["nodes"]
        get = txn.get
        self._get = lambda i: get(i, db=db)
        self._logical: dict[bytes, int] = {}

    def logical(self, node_id: bytes) -> int:
        memo = self._logical
        got = memo.get(node_id)
        if got is not None:
            return got
        # iterative post-order so deep lists never hit the recursion limit
        stack = [(node_id, False)]
        while stack:
            nid, expanded = stack.pop()
            if nid in memo:
                continue
            rec = self._get(nid)
            if rec is None:
                memo[nid] = 0
                continue
            own, kids = _own_and_children(rec, self._get)
            if expanded or not kids:
                memo[nid] = own + sum(memo.get(k, 0) for k in kids)
                continue
            stack.append((nid, True))
            stack.extend((k, False) for k in kids if k not in memo)
        return memo[node_id]

    def physical(self, roots: Iterable[bytes], seen: set[bytes] | None = None) -> int:
        """Bytes of the records reachable from ``roots`` not already in ``seen`` (which gets them)."""
        seen = set() if seen is None else seen
        total = 0
        stack = []
        for r in roots:  # a root named twice (two checkpoints sharing a value) counts once
            if r not in seen:
                seen.add(r)
                stack.append(r)
        get = self._get
        while stack:
            rec = get(stack.pop())
            if rec is None:
                continue
            total += len(rec)
            for child in hp.stored_children(rec[hp.HASH_SIZE:]):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
        return total


def _own_and_children(rec: bytes, get) -> tuple[int, list[bytes]]:
    """(logical bytes of the node itself, children whose logical bytes add to it)."""
    stored = rec[hp.HASH_SIZE:]
    tag = stored[0] if stored else 0
    if tag == hp.TAG_VALUE or tag == _TAG_CHUNK:
        return len(stored) - 1, []
    if tag == hp.TAG_PACKED:
        return len(hp.stored_encoding(rec, get)), []
    if tag == hp.TAG_CHUNKED:
        return int.from_bytes(stored[1:9], "big"), []
    kids = hp.stored_children(stored)
    if tag == hp.TAG_MAP:
        n = int.from_bytes(stored[1:5], "big")
        pos, keys = 5, 0
        for _ in range(n):
            klen = int.from_bytes(stored[pos:pos + 2], "big")
            keys += klen
            pos += 2 + klen + hp.ID_SIZE
        return keys, kids
    return 0, kids
