"""history: GetChannelHistory — a channel's pending writes along a checkpoint's parent chain, and its seed.

What the walk finds is state/history.py's; this module validates the request
and writes the response (seeds relative to the roots the client knows, like
GetCheckpoint's channels).
"""
from __future__ import annotations

import asyncio

from agentstate.v1 import threads_pb2 as pb

from .. import limits
from ..errors import invalid
from ..state import checkpoints, history, schemas
from ..storage import hotpath as hp
from ..storage import nodes
from ..storage.store import Store
from . import validate, wire
from . import schemas as api_schemas
from .checkpoints import fill_channel

MAX_DEPTH = history.MAX_DEPTH


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
        rec, checkpoint_id, m = checkpoints.resolve(txn, store, ns, thread_id, cns, checkpoint_id)
        out.checkpoint_id = checkpoint_id
        fetch = nodes.fetcher(txn, store)
        found, out.depth = history.walk(txn, store, rec.tkey, cns, checkpoint_id, m.parent_id, channels, max_depth)
        for ch in found:
            h = out.channels.add(channel=ch.channel)
            if req.read_schema_version and _migrated(h, txn, store, ns, rec.tkey, cns, ch, req, fetch):
                continue
            for rows in ch.writes:
                for task_path, task_id, idx, node_id in rows:
                    w = h.writes.add(task_id=task_id, idx=idx, channel=ch.channel, task_path=task_path)
                    wire.set_value(w.value, nodes.value_encoding(node_id, fetch))
            if ch.seed is not None:
                seed_id, root_id = ch.seed
                h.seed_checkpoint_id = seed_id
                fill_channel(h.seed, txn, store, fetch(root_id)[:hp.HASH_SIZE], root_id, fetch,
                             known_roots.get(ch.channel), ns=ns)
    return out


def _migrated(h, txn, store: Store, ns: str, tkey: int, cns: str, ch, req, fetch) -> bool:
    """Fill ``h`` with the channel's history migrated to req.read_schema_version (state/schemas.py
    history_on_read); False when it is to be given as stored (DEGRADED: flagged first)."""
    status, error, writes, seed = schemas.history_on_read(txn, store, ns, tkey, cns, ch, req.read_schema_version,
                                                          fetch)
    h.migration, h.migration_error = status, error
    if writes is None:
        return False
    for task_path, task_id, idx, channel, enc in writes:
        wire.set_value(h.writes.add(task_id=task_id, idx=idx, channel=channel, task_path=task_path).value, enc)
    if seed is not None:
        h.seed_checkpoint_id = ch.seed[0]
        kind, ref = seed
        if kind == "stored":
            fill_channel(h.seed, txn, store, fetch(ref)[:hp.HASH_SIZE], ref, fetch,
                         req.known_roots.get(ch.channel), ns=ns)
        elif kind == "parts":
            shape, payload, root = ref
            api_schemas.fill_migrated(h.seed, root, (shape, payload), req.known_roots.get(ch.channel))
    return True


async def get_channel_history(store: Store, req: pb.GetChannelHistoryRequest) -> pb.GetChannelHistoryResponse:
    # The walk may visit many ancestors: keep it off the event loop.
    return await asyncio.get_running_loop().run_in_executor(None, _history, store, req)
