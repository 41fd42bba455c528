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

import asyncio

from agentstate.v1 import threads_pb2 as pb

from ..storage import hotpath as hp
from .. import limits
from ..storage import layout, nodes
from . import validate, wire
from .checkpoints import fill_channel, load_manifest, resolve, write_rows
from ..errors import invalid, limit
from ..storage.store import Store

#: Ancestors one GetChannelHistory call may visit (requests may ask for fewer).
MAX_DEPTH = 100_000


def _channels(values, field: str) -> list[str]:
    if not values:
        raise invalid(field, "at least one channel is required")
    if len(values) > limits.MAX_IDS_PER_CALL:
        raise invalid(field, f"at most {limits.MAX_IDS_PER_CALL} channels per call")
    out = []
    for i, name in enumerate(values):
        validate.ident(name, f"{field}[{i}]")
        if name not in out:
            out.append(name)
    return out


def _history(store: Store, req: pb.GetChannelHistoryRequest) -> pb.GetChannelHistoryResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    cns = validate.checkpoint_ns(req.checkpoint_ns)
    checkpoint_id = validate.ident(req.checkpoint_id, "checkpoint_id", required=False)
    channels = _channels(req.channels, "channels")
    max_depth = min(req.max_depth or MAX_DEPTH, MAX_DEPTH)
    known_roots = dict(req.known_roots)
    out = pb.GetChannelHistoryResponse()
    with store.read() as txn:
        rec, checkpoint_id, m = resolve(txn, store, ns, thread_id, cns, checkpoint_id)
        out.checkpoint_id = checkpoint_id
        fetch = nodes.fetcher(txn, store)
        remaining = set(channels)
        # per channel: the writes of each ancestor (newest ancestor first), then the seed
        found_writes: dict[str, list[list[tuple]]] = {ch: [] for ch in channels}
        seeds: dict[str, tuple[str, bytes]] = {}
        current = m.parent_id
        depth = 0
        visited = {checkpoint_id}
        while current and remaining and current not in visited:  # a parent cycle ends the chain too
            visited.add(current)
            a = load_manifest(txn, store, rec.tkey, cns, current)
            if a is None:  # a pruned or deleted ancestor ends the chain
                break
            depth += 1
            if depth > max_depth:
                raise limit("history_depth", f"the parent chain of {checkpoint_id!r} is longer than {max_depth} "
                            "checkpoints", field="max_depth")
            here: dict[str, list[tuple]] = {}
            for task_id, idx, w in write_rows(txn, store, rec.tkey, cns, current):
                if w.channel in remaining:
                    here.setdefault(w.channel, []).append((w.task_path, task_id, idx, w.value))
            for ch, rows in here.items():
                rows.sort(key=lambda r: r[:3])
                found_writes[ch].append(rows)
            held = dict(a.channels)
            for ch in [c for c in remaining if c in held]:
                seeds[ch] = (current, held[ch])
                remaining.discard(ch)
            current = a.parent_id
        out.depth = depth
        for ch in channels:
            h = out.channels.add(channel=ch)
            for rows in reversed(found_writes[ch]):
                for task_path, task_id, idx, node_id in rows:
                    w = h.writes.add(task_id=task_id, idx=idx, channel=ch, task_path=task_path)
                    wire.set_value(w.value, wire.stored_value_encoding(node_id, fetch))
            if ch in seeds:
                seed_id, root_id = seeds[ch]
                h.seed_checkpoint_id = seed_id
                fill_channel(h.seed, txn, store, fetch(root_id)[:hp.HASH_SIZE], root_id, fetch,
                             known_roots.get(ch))
    return out


async def get_channel_history(store: Store, req: pb.GetChannelHistoryRequest) -> pb.GetChannelHistoryResponse:
    # The walk may visit many ancestors: keep it off the event loop.
    return await asyncio.get_running_loop().run_in_executor(None, _history, store, req)


def history_channels(values) -> list[str]:
    """Validate PruneCheckpointsRequest.history_channels."""
    if len(values) > limits.MAX_IDS_PER_CALL:
        raise invalid("history_channels", f"at most {limits.MAX_IDS_PER_CALL} channels per call")
    return [validate.ident(v, f"history_channels[{i}]") for i, v in enumerate(values)]


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
            manifests[cid] = load_manifest(txn, store, tkey, cns, cid)
        return manifests[cid]

    def writes_to(cid: str) -> set[str]:
        if cid not in written:
            written[cid] = {w.channel for _, _, w in write_rows(txn, store, tkey, cns, cid)}
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
