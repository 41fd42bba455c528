"""history: walks along a checkpoint's parent chain, for channels stored as logs of writes.

Some frameworks keep a channel not as a value in every checkpoint but as the
pending writes of the steps that changed it, with a full value (a "seed")
only now and then (LangGraph's DeltaChannel). Rebuilding such a channel at a
checkpoint means walking its ancestors back to the nearest one that holds a
value, collecting the writes on the way. Two calls need that walk:

* ``GetChannelHistory`` returns, per channel, the writes (oldest first) and
  the seed, in one round trip instead of one read per ancestor;
* ``PruneCheckpoints`` with ``history_channels`` keeps the ancestors such a
  rebuild still needs (:func:`needed_for_history`).

A channel "held" by a checkpoint is one in its manifest. Writes stored on the
starting checkpoint itself are not part of its history (they belong to the
next step).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import limit
from ..storage import layout, records
from ..storage.store import Store

#: Ancestors one GetChannelHistory call may visit (requests may ask for fewer).
MAX_DEPTH = 100_000


@dataclass
class ChannelHistory:
    """One channel's history at a checkpoint: its pending writes on the ancestors, oldest ancestor first,
    each ancestor's in (task_path, task_id, idx) order as (task_path, task_id, idx, value node id), and the
    seed (the nearest ancestor holding a value: (checkpoint id, root node id)) when there is one."""

    channel: str
    writes: list[list[tuple]] = field(default_factory=list)
    seed: tuple[str, bytes] | None = None
    write_ids: list[str] = field(default_factory=list)  # the checkpoint id of each entry of ``writes``


def walk(txn, store: Store, tkey: int, cns: str, checkpoint_id: str, parent_id: str, channels: list[str],
         max_depth: int) -> tuple[list[ChannelHistory], int]:
    """The histories of ``channels`` at checkpoint ``checkpoint_id`` (whose parent is ``parent_id``) and how
    many ancestors were visited. The walk stops at the first missing ancestor, at a parent cycle (parent ids
    may name checkpoints written later), and once every channel found its seed; LIMIT_EXCEEDED past
    ``max_depth`` ancestors."""
    remaining = set(channels)
    found_writes: dict[str, list[list[tuple]]] = {ch: [] for ch in channels}
    found_ids: dict[str, list[str]] = {ch: [] for ch in channels}
    seeds: dict[str, tuple[str, bytes]] = {}
    current = parent_id
    depth = 0
    visited = {checkpoint_id}
    while current and remaining and current not in visited:  # a parent cycle ends the chain too
        visited.add(current)
        a = records.manifest(txn, store, tkey, cns, current)
        if a is None:  # a pruned or deleted ancestor ends the chain
            break
        depth += 1
        if depth > max_depth:
            raise limit("history_depth", f"the parent chain of {checkpoint_id!r} is longer than {max_depth} "
                        "checkpoints", field="max_depth")
        here: dict[str, list[tuple]] = {}
        for task_id, idx, w in records.write_rows(txn, store, tkey, cns, current):
            if w.channel in remaining:
                here.setdefault(w.channel, []).append((w.task_path, task_id, idx, w.value))
        for ch, rows in here.items():
            rows.sort(key=lambda r: r[:3])
            found_writes[ch].append(rows)
            found_ids[ch].append(current)
        held = dict(a.channels)
        for ch in [c for c in remaining if c in held]:
            seeds[ch] = (current, held[ch])
            remaining.discard(ch)
        current = a.parent_id
    return [ChannelHistory(ch, list(reversed(found_writes[ch])), seeds.get(ch), list(reversed(found_ids[ch])))
            for ch in channels], depth


def needed_for_history(txn, store: Store, tkey: int, cns: str, kept: list[str], channels: list[str]) -> set[str]:
    """Ids of the ancestors of the ``kept`` checkpoints (one (thread, cns)) that rebuilding
    ``channels`` at each of them needs: for each kept checkpoint without a value for a channel,
    its ancestors back to the nearest one that holds a value or, when none does, back to the
    oldest one with a pending write to the channel. Ancestors are contiguous: a rebuild walks
    the chain one parent at a time. Parent ids may name checkpoints written later, so a chain can
    come back to a checkpoint it passed: that ends it, as a missing parent does."""
    manifests: dict[str, layout.Manifest | None] = {}
    written: dict[str, set[str]] = {}

    def manifest(cid: str):
        if cid not in manifests:
            manifests[cid] = records.manifest(txn, store, tkey, cns, cid)
        return manifests[cid]

    def writes_to(cid: str) -> set[str]:
        if cid not in written:
            written[cid] = {w.channel for _, _, w in records.write_rows(txn, store, tkey, cns, cid)}
        return written[cid]

    needed: set[str] = set()
    for ch in channels:
        # resolved[c] is True when c and the chain beyond it up to what the channel needs are kept,
        # False when nothing from c on is needed for this channel.
        resolved: dict[str, bool] = {}
        for k in kept:
            m = manifest(k)
            if m is None or any(name == ch for name, _ in m.channels):
                continue
            path: list[str] = []
            on_path = {k}
            outcome = False
            current = m.parent_id
            while current and current not in on_path:  # a parent cycle ends the chain, as a missing parent
                if current in resolved:
                    outcome = resolved[current]
                    break
                a = manifest(current)
                if a is None:
                    break
                path.append(current)
                on_path.add(current)
                if any(name == ch for name, _ in a.channels):
                    outcome = True
                    break
                current = a.parent_id
            if outcome:
                cut = len(path)
            else:
                cut = 0
                for i in range(len(path) - 1, -1, -1):
                    if ch in writes_to(path[i]):
                        cut = i + 1
                        break
            for i, cid in enumerate(path):
                resolved[cid] = i < cut
            needed.update(path[:cut])
    return needed
