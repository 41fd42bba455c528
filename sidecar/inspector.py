"""inspector: ``sidecar inspect``, read-only views of a sidecar's state for people (and ``--json`` for scripts).

Two sources answer the same agentstate.v1 read calls with the same messages:
a running sidecar over gRPC (``--address``), or a data directory opened
read-only (``--data-dir``: LMDB ``MDB_RDONLY``, the api layer's own read calls
in this process; a sidecar may be running on it). Views:

``threads``     threads of a namespace, filtered by metadata (``--filter key=value``)
``tree``        a thread's checkpoint history as a tree: forks (a checkpoint with several
                children) and the branch threads fork runs made from it
``checkpoint``  one checkpoint's channel values, metadata and pending writes
``diff``        what changed between two checkpoints, channel by channel
``bytes``       where a checkpoint's bytes go, per channel, and in how many checkpoints each changed
``runs``        a thread's runs
``run``         a run's timeline: its steps, events, effects and artifacts in time order
``stats``       the store's counts (GetStoreStats)
``conversation`` a thread's conversation: items by seq, which summaries cover them, the pyramid, pending
                compactions
``context``     the context GetContext builds for a budget, with its explanation (kept, summarised,
                compressed, deduplicated, dropped and why)
``memory-paths`` memory paths (store namespaces) with live items, under a prefix
``memory-items`` live memory items under a path prefix
``memory-item`` one memory item and its history (reads never refresh a TTL)
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import json
import math
import os
import sys
from typing import Any

import grpc

from agentstate import transport
from agentstate.codec import Opaque
from agentstate.values import from_value, to_value
from agentstate.v1 import (admin_pb2, admin_pb2_grpc, artifacts_pb2, artifacts_pb2_grpc, conversations_pb2,
                           conversations_pb2_grpc, effects_pb2, effects_pb2_grpc, events_pb2, events_pb2_grpc,
                           memory_pb2, memory_pb2_grpc, runs_pb2, runs_pb2_grpc, threads_pb2, threads_pb2_grpc)

from .api import artifacts as api_artifacts
from .api import assembly as api_assembly
from .api import checkpoints as api_checkpoints
from .api import compactions as api_compactions
from .api import context, service
from .api import conversations as api_conversations
from .api import effects as api_effects
from .api import events as api_events
from .api import memory as api_memory
from .api import runs as api_runs
from .api import threads as api_threads
from .errors import ApiError
from .storage.readonly import ReadOnly, ReadOnlyStore

PAGE = 1000
TRUNCATE = 400  # characters of a value shown by default in human output


class InspectError(Exception):
    """A call failed; the message says why (printed, exit status 1)."""


# ----------------------------------------------------------------- sources

class GrpcSource:
    """A running sidecar at ``address``."""

    STUBS = {"ThreadService": threads_pb2_grpc.ThreadServiceStub, "AdminService": admin_pb2_grpc.AdminServiceStub,
             "RunService": runs_pb2_grpc.RunServiceStub, "EventService": events_pb2_grpc.EventServiceStub,
             "EffectService": effects_pb2_grpc.EffectServiceStub,
             "ArtifactService": artifacts_pb2_grpc.ArtifactServiceStub,
             "ConversationService": conversations_pb2_grpc.ConversationServiceStub,
             "MemoryService": memory_pb2_grpc.MemoryServiceStub}

    def __init__(self, address: str, timeout: float = 30.0, token: str | None = None,
                 tls: transport.TLS | None = None) -> None:
        self.address = address
        self.timeout = timeout
        try:  # the client's own channel rules: a token only over TLS or to a local address
            self.channel = transport.channel(address, [("grpc.max_receive_message_length", 64 << 20)], token, tls)
        except ValueError as e:
            raise RuntimeError(str(e)) from None
        self._stubs = {name: stub(self.channel) for name, stub in self.STUBS.items()}

    def call(self, service_name: str, method: str, request):
        try:
            return getattr(self._stubs[service_name], method)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise InspectError(f"{method}: {e.code().name}: {e.details()}") from None

    def close(self) -> None:
        self.channel.close()


def read_calls(s, c: context.Ctx, m) -> dict:
    """{(service, method): call} of the read calls the views make, answered by the api layer in this process
    (``s`` a store, ``c`` its Ctx, ``m`` its api.memory.Memory): the data-dir source's and the web
    inspector's, so both answer as the gRPC servicers do. A call returns a response or a coroutine."""
    return {
        ("ThreadService", "ListThreads"): lambda r: api_threads.list_(s, r),
        ("ThreadService", "GetThread"): lambda r: api_threads.get(s, r),
        ("ThreadService", "ListCheckpoints"): lambda r: api_checkpoints.list_(s, r),
        ("ThreadService", "GetCheckpoint"): lambda r: api_checkpoints.get(s, r),
        ("ThreadService", "DiffCheckpoints"): lambda r: api_checkpoints.diff(s, r),
        ("AdminService", "GetStoreStats"): lambda r: service.store_stats(s),
        ("RunService", "GetRun"): lambda r: api_runs.get(c, r),
        ("RunService", "ListRuns"): lambda r: api_runs.list_(c, r),
        ("RunService", "ListSteps"): lambda r: api_runs.list_steps(c, r),
        ("RunService", "ListBranches"): lambda r: api_runs.list_branches(c, r),
        ("EventService", "ListEvents"): lambda r: api_events.list_(c, r),
        ("EffectService", "ListEffects"): lambda r: api_effects.list_(c, r),
        ("ArtifactService", "ListArtifacts"): lambda r: api_artifacts.list_(c, r),
        ("ConversationService", "GetConversation"): lambda r: api_conversations.get_conversation(c, r),
        ("ConversationService", "ListItems"): lambda r: api_conversations.list_(c, r),
        ("ConversationService", "ListSummaries"): lambda r: api_compactions.list_summaries(c, r),
        ("ConversationService", "ListCompactions"): lambda r: api_compactions.list_compactions(c, r),
        ("ConversationService", "GetContext"): lambda r: api_assembly.get_context(c, r),
        ("MemoryService", "ListMemoryNamespaces"): lambda r: api_memory.list_namespaces(m, r),
        ("MemoryService", "SearchMemoryItems"): lambda r: api_memory.search(m, r),
        ("MemoryService", "GetMemoryItem"): lambda r: api_memory.get(m, r),
        ("MemoryService", "GetMemoryItemHistory"): lambda r: api_memory.history(m, r),
    }


class DirSource:
    """A data directory, read-only, answered by the api layer's read calls in this process."""

    def __init__(self, path: str) -> None:
        self.address = f"data dir {os.path.abspath(path)} (read-only)"
        self.store = ReadOnlyStore(path)
        self.ctx = context.Ctx(self.store, context.Hub())
        s, c = self.store, self.ctx
        self._calls = read_calls(s, c, api_memory.Memory(s))

    def call(self, service_name: str, method: str, request):
        try:
            result = self._calls[(service_name, method)](request)
            return asyncio.run(result) if asyncio.iscoroutine(result) else result
        except ApiError as e:
            raise InspectError(f"{method}: {e.code.name}: {e.message}") from None
        except ReadOnly as e:
            raise InspectError(f"{method}: {e}") from None

    def close(self) -> None:
        self.store.close()


def pages(source, service_name: str, method: str, request, field: str, limit: int = 0) -> list:
    """Every item of a paged list call (at most ``limit`` when given)."""
    out: list = []
    request.page_size = PAGE
    while True:
        resp = source.call(service_name, method, request)
        out.extend(getattr(resp, field))
        if not resp.next_page_token or (limit and len(out) >= limit):
            return out[:limit] if limit else out
        request.page_token = resp.next_page_token


# ----------------------------------------------------------------- values for JSON

def jsonable(value: Any) -> Any:
    """A decoded value as JSON can hold it: bytes as {"$bytes": base64}, opaque values as {"$opaque": type,
    "$bytes": base64}, non-finite floats as strings."""
    if isinstance(value, Opaque):
        return {"$opaque": value.type, "$bytes": base64.b64encode(value.data).decode()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def ts(t) -> str:
    """A Timestamp as ISO 8601 UTC with milliseconds ('' when unset)."""
    if not t.seconds and not t.nanos:
        return ""
    return t.ToDatetime().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def decode_map(entries) -> dict:
    return {k: jsonable(from_value(v)) for k, v in sorted(entries.items())}


def _enum(enum, number: int, prefix: str) -> str:
    return enum.Name(number)[len(prefix):].lower() if number in enum.values() else str(number)


def _parse_filter(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise InspectError(f"--filter {item!r}: expected key=value")
        try:
            out[key] = json.loads(text)  # numbers, true/false, null, quoted strings, lists and maps
        except json.JSONDecodeError:
            out[key] = text  # anything else is a string
    return out


# ----------------------------------------------------------------- views (each returns a JSON-able model)

def view_threads(src, ns: str, filters: dict, limit: int) -> dict:
    req = threads_pb2.ListThreadsRequest(namespace=ns)
    for k, v in filters.items():
        to_value(v, req.metadata_filter[k])
    threads = pages(src, "ThreadService", "ListThreads", req, "threads", limit)
    return {"namespace": ns, "filter": filters, "threads": [
        {"thread_id": t.thread_id, "status": _enum(threads_pb2.ThreadStatus, t.status, "THREAD_STATUS_"),
         "metadata": decode_map(t.metadata), "create_time": ts(t.create_time), "update_time": ts(t.update_time)}
        for t in threads]}


def _checkpoints(src, ns: str, thread_id: str, cns: str | None, values: bool = False) -> list:
    req = threads_pb2.ListCheckpointsRequest(namespace=ns, thread_id=thread_id, include_values=values)
    if cns is not None:
        req.checkpoint_ns = cns
    return pages(src, "ThreadService", "ListCheckpoints", req, "checkpoints")


def view_tree(src, ns: str, thread_id: str, cns: str | None) -> dict:
    src.call("ThreadService", "GetThread", threads_pb2.GetThreadRequest(namespace=ns, thread_id=thread_id))
    cps = _checkpoints(src, ns, thread_id, cns)  # newest first
    branches = pages(src, "RunService", "ListBranches", runs_pb2.ListBranchesRequest(namespace=ns,
                                                                                     thread_id=thread_id),
                     "branches")
    heads = {}
    for cp in cps:
        heads.setdefault(cp.checkpoint_ns, cp.checkpoint_id)
    ids = {(cp.checkpoint_ns, cp.checkpoint_id) for cp in cps}
    children: dict[tuple[str, str], list[str]] = {}
    for cp in reversed(cps):  # oldest first: children in creation order
        if cp.parent_checkpoint_id and (cp.checkpoint_ns, cp.parent_checkpoint_id) in ids:
            children.setdefault((cp.checkpoint_ns, cp.parent_checkpoint_id), []).append(cp.checkpoint_id)
    by_fork: dict[tuple[str, str], list] = {}
    for b in branches:
        by_fork.setdefault((b.checkpoint_ns, b.fork_checkpoint_id), []).append(
            {"branch_thread_id": b.branch_thread_id, "run_id": b.run_id, "head_checkpoint_id": b.head_checkpoint_id,
             "create_time": ts(b.create_time), "promote_time": ts(b.promote_time)})
    nodes = []
    for cp in reversed(cps):
        key = (cp.checkpoint_ns, cp.checkpoint_id)
        nodes.append({"checkpoint_id": cp.checkpoint_id, "checkpoint_ns": cp.checkpoint_ns,
                      "parent_checkpoint_id": cp.parent_checkpoint_id, "create_time": ts(cp.create_time),
                      "metadata": decode_map(cp.metadata), "children": children.get(key, []),
                      "fork": len(children.get(key, [])) > 1, "head": heads.get(cp.checkpoint_ns) == cp.checkpoint_id,
                      "branches": by_fork.get(key, [])})
    return {"namespace": ns, "thread_id": thread_id, "checkpoints": nodes,
            "heads": dict(sorted(heads.items()))}


def _get(src, ns: str, thread_id: str, checkpoint_id: str, cns: str, *, writes: bool = False,
         channels: list[str] | None = None):
    req = threads_pb2.GetCheckpointRequest(namespace=ns, thread_id=thread_id, checkpoint_id=checkpoint_id,
                                           checkpoint_ns=cns, include_pending_writes=writes, channels=channels or [])
    return src.call("ThreadService", "GetCheckpoint", req).checkpoint


def view_checkpoint(src, ns: str, thread_id: str, checkpoint_id: str, cns: str) -> dict:
    cp = _get(src, ns, thread_id, checkpoint_id, cns, writes=True)
    return {"namespace": ns, "thread_id": thread_id, "checkpoint_ns": cp.checkpoint_ns,
            "checkpoint_id": cp.checkpoint_id, "parent_checkpoint_id": cp.parent_checkpoint_id,
            "create_time": ts(cp.create_time), "etag": cp.etag, "metadata": decode_map(cp.metadata),
            "values": {name: jsonable(from_value(cv.value)) for name, cv in sorted(cp.channels.items())
                       if cv.HasField("value")},
            "pending_writes": [{"task_id": w.task_id, "channel": w.channel, "value": jsonable(from_value(w.value))}
                               for w in cp.pending_writes]}


def view_diff(src, ns: str, thread_id: str, from_id: str, to_id: str, cns: str) -> dict:
    resp = src.call("ThreadService", "DiffCheckpoints", threads_pb2.DiffCheckpointsRequest(
        namespace=ns, thread_id=thread_id, checkpoint_ns=cns, from_checkpoint_id=from_id, to_checkpoint_id=to_id))
    names = [c.channel for c in resp.changes]
    before = after = None
    if names:
        before = _get(src, ns, thread_id, from_id, cns, channels=names)
        after = _get(src, ns, thread_id, to_id, cns, channels=names)
    changes = []
    for c in resp.changes:
        kind = _enum(threads_pb2.ChangeKind, c.kind, "CHANGE_KIND_")
        old = from_value(before.channels[c.channel].value) if c.channel in before.channels else None
        new = from_value(after.channels[c.channel].value) if c.channel in after.channels else None
        item: dict[str, Any] = {"channel": c.channel, "kind": kind}
        if c.lists:
            keep = c.common_prefix
            item.update(lists=True, from_length=c.from_length, to_length=c.to_length, common_prefix=keep,
                        appended=c.appended, removed=jsonable(list(old or [])[keep:]),
                        added=jsonable(list(new or [])[keep:]))
        else:
            item.update({"from": jsonable(old), "to": jsonable(new)})
        changes.append(item)
    return {"namespace": ns, "thread_id": thread_id, "from_checkpoint_id": from_id, "to_checkpoint_id": to_id,
            "changes": changes}


def view_bytes(src, ns: str, thread_id: str, checkpoint_id: str, cns: str) -> dict:
    cp = _get(src, ns, thread_id, checkpoint_id, cns)
    history = _checkpoints(src, ns, thread_id, cp.checkpoint_ns, values=False)
    # a channel changed in a checkpoint when its root differs from the parent's
    roots = {c.checkpoint_id: {n: v.root for n, v in c.channels.items()} for c in history}
    parents = {c.checkpoint_id: c.parent_checkpoint_id for c in history}
    changed: dict[str, int] = {}
    for cid, mine in roots.items():
        theirs = roots.get(parents[cid], {})
        for name, root in mine.items():
            if theirs.get(name) != root:
                changed[name] = changed.get(name, 0) + 1
    rows = []
    for name, cv in sorted(cp.channels.items()):
        v = cv.value
        kind = v.WhichOneof("kind") or "none"
        items = len(v.list.items) if kind == "list" else len(v.map.entries) if kind == "map" else None
        rows.append({"channel": name, "bytes": v.ByteSize(), "kind": kind, "items": items,
                     "changed_in": changed.get(name, 0)})
    total = sum(r["bytes"] for r in rows)
    for r in rows:
        r["share"] = round(r["bytes"] / total, 4) if total else 0.0
    rows.sort(key=lambda r: (-r["bytes"], r["channel"]))
    return {"namespace": ns, "thread_id": thread_id, "checkpoint_id": cp.checkpoint_id,
            "checkpoints_in_history": len(history), "total_bytes": total, "channels": rows,
            "note": "bytes: each channel's encoded value at this checkpoint (what a full read sends); the store "
                    "keeps values shared across checkpoints once (GetStoreStats: blob_bytes)"}


def view_runs(src, ns: str, thread_id: str) -> dict:
    runs = pages(src, "RunService", "ListRuns", runs_pb2.ListRunsRequest(namespace=ns, thread_id=thread_id), "runs")
    return {"namespace": ns, "thread_id": thread_id, "runs": [
        {"run_id": r.run_id, "status": _enum(runs_pb2.RunStatus, r.status, "RUN_STATUS_"), "held": r.held,
         "attempt": r.attempt, "create_time": ts(r.create_time), "end_time": ts(r.end_time),
         "last_checkpoint_id": r.last_checkpoint_id, "branch_of": r.branch_of} for r in runs]}


def view_run(src, ns: str, run_id: str) -> dict:
    run = src.call("RunService", "GetRun", runs_pb2.GetRunRequest(namespace=ns, run_id=run_id)).run
    steps = pages(src, "RunService", "ListSteps", runs_pb2.ListStepsRequest(namespace=ns, run_id=run_id), "steps")
    events = pages(src, "EventService", "ListEvents", events_pb2.ListEventsRequest(
        namespace=ns, thread_id=run.thread_id, run_id=run_id), "events")
    effects = pages(src, "EffectService", "ListEffects", effects_pb2.ListEffectsRequest(namespace=ns, run_id=run_id),
                    "effects")
    artifacts = pages(src, "ArtifactService", "ListArtifacts", artifacts_pb2.ListArtifactsRequest(
        namespace=ns, thread_id=run.thread_id, run_id=run_id), "artifacts")
    timeline: list[dict] = []

    def add(time: str, kind: str, what: str, **detail) -> None:
        if time:
            timeline.append({"time": time, "kind": kind, "what": what, **detail})

    status = _enum(runs_pb2.RunStatus, run.status, "RUN_STATUS_")
    add(ts(run.create_time), "run", "created", input=jsonable(from_value(run.input)) if run.HasField("input") else None)
    add(ts(run.start_time), "run", "started", attempt=run.attempt)
    for s in steps:
        name = f"{_enum(runs_pb2.StepKind, s.kind, 'STEP_KIND_')} {s.name}".strip()
        add(ts(s.start_time), "step", f"{name} started", step_id=s.step_id)
        if s.end_time.seconds or s.end_time.nanos:
            add(ts(s.end_time), "step", f"{name} {'failed' if s.error else 'ended'}", step_id=s.step_id,
                error=s.error, tokens_in=s.counters.tokens_in, tokens_out=s.counters.tokens_out,
                cost=s.counters.cost, wall_time_ms=s.counters.wall_time_ms)
    for e in events:
        add(ts(e.create_time), "event", e.type, sequence=e.sequence, step_id=e.step_id,
            data=jsonable(from_value(e.data)) if e.HasField("data") else None)
    for f in effects:
        state = _enum(effects_pb2.EffectState, f.state, "EFFECT_STATE_")
        add(ts(f.create_time), "effect", f"{f.idempotency_key} begun", description=f.description, step_id=f.step_id)
        if f.complete_time.seconds or f.complete_time.nanos:
            add(ts(f.complete_time), "effect", f"{f.idempotency_key} {state}", error=f.error,
                outcome=jsonable(from_value(f.outcome)) if f.HasField("outcome") else None)
        elif state != "pending":
            add(ts(f.update_time), "effect", f"{f.idempotency_key} {state}")
    for a in artifacts:
        add(ts(a.create_time), "artifact", f"{a.name} v{a.version}", size=a.size, content_type=a.content_type,
            official=a.official, step_id=a.step_id)
    add(ts(run.end_time), "run", f"ended {status}", error=run.error,
        output=jsonable(from_value(run.output)) if run.HasField("output") else None)
    timeline.sort(key=lambda item: item["time"])  # stable: same-time items keep the order above
    return {"namespace": ns, "run_id": run_id, "thread_id": run.thread_id, "status": status, "held": run.held,
            "attempt": run.attempt, "start_checkpoint_id": run.start_checkpoint_id,
            "last_checkpoint_id": run.last_checkpoint_id,
            "usage": {"tokens_in": run.usage.tokens_in, "tokens_out": run.usage.tokens_out, "cost": run.usage.cost,
                      "wall_time_ms": run.usage.wall_time_ms},
            "counts": {"steps": len(steps), "events": len(events), "effects": len(effects),
                       "artifacts": len(artifacts)},
            "timeline": timeline}


def view_stats(src) -> dict:
    s = src.call("AdminService", "GetStoreStats", admin_pb2.GetStoreStatsRequest())
    return {f.name: getattr(s, f.name) for f in s.DESCRIPTOR.fields}


# ----------------------------------------------------------------- conversations, context, memory

def _kind(number: int) -> str:
    return _enum(conversations_pb2.ItemKind, number, "ITEM_KIND_")


def _covering(summaries: list[dict]):
    """A function seq -> [ids of the summaries covering it, level 1 first] (summaries of one level never
    overlap: a bisect per level)."""
    by_level: dict[int, list[tuple[int, int, str]]] = {}
    for s in summaries:
        by_level.setdefault(s["level"], []).append((s["first_seq"], s["last_seq"], s["summary_id"]))
    for rows in by_level.values():
        rows.sort()
    starts = {lvl: [r[0] for r in rows] for lvl, rows in by_level.items()}

    def covering(seq: int) -> list[str]:
        out = []
        for lvl in sorted(by_level):
            i = bisect.bisect_right(starts[lvl], seq) - 1
            if i >= 0 and by_level[lvl][i][1] >= seq:
                out.append(by_level[lvl][i][2])
        return out

    return covering


def view_conversation(src, ns: str, thread_id: str, last: int = 0) -> dict:
    """A thread's conversation: its items by seq (the newest ``last`` when given), the summaries of every
    level (which items and which child summaries each covers, the pyramid), pending compactions."""
    conv = src.call("ConversationService", "GetConversation", conversations_pb2.GetConversationRequest(
        namespace=ns, thread_id=thread_id)).conversation
    items = pages(src, "ConversationService", "ListItems", conversations_pb2.ListItemsRequest(
        namespace=ns, thread_id=thread_id, latest=last), "items")
    sums = pages(src, "ConversationService", "ListSummaries", conversations_pb2.ListSummariesRequest(
        namespace=ns, thread_id=thread_id), "summaries")
    comps = pages(src, "ConversationService", "ListCompactions", conversations_pb2.ListCompactionsRequest(
        namespace=ns, thread_id=thread_id), "compactions")
    parent = {child: s.summary_id for s in sums for child in s.child_ids}
    summaries = [{"summary_id": s.summary_id, "level": s.level, "first_seq": s.first_seq, "last_seq": s.last_seq,
                  "item_count": s.item_count, "child_ids": list(s.child_ids), "parent_id": parent.get(s.summary_id),
                  "text": s.text, "producer": s.producer, "fallback": s.fallback,
                  "estimated_tokens": s.estimated_tokens, "covered_estimated_tokens": s.covered_estimated_tokens,
                  "create_time": ts(s.create_time)} for s in sums]
    compactions = [{"compaction_id": c.compaction_id, "level": c.level, "first_seq": c.first_seq,
                    "last_seq": c.last_seq, "input_count": c.input_count,
                    "state": _enum(conversations_pb2.CompactionState, c.state, "COMPACTION_STATE_"),
                    "worker": c.worker, "attempts": c.attempts, "due_time": ts(c.due_time),
                    "fallback_time": ts(c.fallback_time), "lease_expire_time": ts(c.lease_expire_time)}
                   for c in comps]
    covering = _covering(summaries)
    pending = [(c["first_seq"], c["last_seq"], c["compaction_id"]) for c in compactions if c["level"] == 1]
    rows = []
    for it in items:
        rows.append({"seq": it.seq, "kind": _kind(it.kind), "role": it.role, "call_id": it.call_id,
                     "tool_name": it.tool_name, "client_item_id": it.client_item_id,
                     "content": jsonable(from_value(it.content)) if it.HasField("content") else None,
                     "estimated_tokens": it.estimated_tokens,
                     "client_tokens": it.tokens.count if it.HasField("tokens") else None,
                     "create_time": ts(it.create_time), "summaries": covering(it.seq),
                     "pending_compaction": next((cid for f, l, cid in pending if f <= it.seq <= l), None)})
    levels = sorted({s["level"] for s in summaries}, reverse=True)
    p = conv.compaction_policy
    policy = {"disabled": p.disabled, "trigger_items": p.trigger_items, "compact_items": p.compact_items,
              "keep_last_items": p.keep_last_items, "pyramid_fan_in": p.pyramid_fan_in,
              "pyramid_keep_last": p.pyramid_keep_last, "max_levels": p.max_levels,
              "max_summary_chars": p.max_summary_chars, "fallback_after_ms": p.fallback_after.ToMilliseconds(),
              "source": _enum(conversations_pb2.PolicySource, conv.compaction_policy_source, "POLICY_SOURCE_")}
    return {"namespace": ns, "thread_id": thread_id,
            "conversation": {"item_count": conv.item_count, "first_seq": conv.first_seq, "last_seq": conv.last_seq,
                             "summary_count": conv.summary_count, "pending_compactions": conv.pending_compactions,
                             "estimated_tokens": conv.estimated_tokens, "closed": conv.closed,
                             "last_active_time": ts(conv.last_active_time), "expire_time": ts(conv.expire_time),
                             "calibration_factor": conv.calibration_factor},
            "compaction_policy": policy, "shown_items": len(rows), "items": rows, "summaries": summaries,
            "pyramid": [{"level": lvl, "summary_ids": [s["summary_id"] for s in summaries if s["level"] == lvl]}
                        for lvl in levels],
            "unsummarised_items": sum(1 for r in rows if not r["summaries"]), "compactions": compactions}


#: why an explanation entry's sources are where they are
FATE_WHY = {"kept": "in the context verbatim", "summarised": "stands in the context as a summary",
            "compressed": "in the context as a compressed tool call",
            "deduplicated": "equal to an earlier item: left out or shown as a stub",
            "dropped_budget": "left out: over the budget", "dropped_orphan": "left out: a tool call without its "
                                                                             "result (or a result without its call)"}


def view_context(src, ns: str, thread_id: str, budget: int, keep_last: int | None = None) -> dict:
    """The context GetContext builds for ``budget`` tokens (no knowledge items), with its explanation: what
    happened to every pinned item and every live log item, and why."""
    req = conversations_pb2.GetContextRequest(namespace=ns, thread_id=thread_id, budget_tokens=budget)
    if keep_last is not None:
        req.keep_last_items = keep_last
    resp = src.call("ConversationService", "GetContext", req)
    items = []
    for i, ci in enumerate(resp.items):
        items.append({"index": i, "source": _enum(conversations_pb2.ContextSource, ci.source, "CONTEXT_SOURCE_"),
                      "kind": _kind(ci.kind), "role": ci.role, "tool_name": ci.tool_name, "tokens": ci.tokens,
                      "tokens_estimated": ci.tokens_estimated, "pin_id": ci.pin_id, "summary_id": ci.summary_id,
                      "level": ci.level, "first_seq": ci.items.first_seq, "last_seq": ci.items.last_seq,
                      "duplicate_of_seq": ci.duplicate_of_seq, "stable_prefix": i < resp.stable_prefix_items,
                      "content": jsonable(from_value(ci.content))})
    explanation = []
    totals: dict[str, dict[str, int]] = {}
    for e in resp.explanation:
        fate = _enum(conversations_pb2.Fate, e.fate, "FATE_")
        which = e.WhichOneof("source")
        entry = {"source": {"pin_id": "pinned", "items": "items", "knowledge_index": "knowledge"}[which],
                 "pin_id": e.pin_id if which == "pin_id" else None,
                 "first_seq": e.items.first_seq if which == "items" else None,
                 "last_seq": e.items.last_seq if which == "items" else None,
                 "fate": fate, "why": FATE_WHY.get(fate, fate), "item_count": e.item_count, "tokens": e.tokens,
                 "context_index": e.context_index if e.HasField("context_index") else None,
                 "summary_id": e.summary_id, "duplicate_of_seq": e.duplicate_of_seq}
        explanation.append(entry)
        t = totals.setdefault(fate, {"entries": 0, "items": 0, "tokens": 0})
        t["entries"] += 1
        t["items"] += e.item_count
        t["tokens"] += e.tokens
    return {"namespace": ns, "thread_id": thread_id, "budget_tokens": budget, "keep_last_items": keep_last,
            "total_tokens": resp.total_tokens, "stable_prefix_items": resp.stable_prefix_items,
            "context_hash": resp.context_hash.hex(), "last_seq": resp.last_seq,
            "calibration_factor": resp.calibration_factor, "estimated_raw_tokens": resp.estimated_raw_tokens,
            "client_counted_tokens": resp.client_counted_tokens, "items": items, "explanation": explanation,
            "by_fate": dict(sorted(totals.items()))}


def parse_path(text: str) -> list[str]:
    """A memory path from the command line: labels separated by ``/`` (``users/ann``), or a JSON list of
    labels (``'["a/b", "c"]'``) when a label holds a ``/``; "" is the root."""
    text = text.strip()
    if text.startswith("["):
        try:
            labels = json.loads(text)
        except json.JSONDecodeError as e:
            raise InspectError(f"path {text!r}: not a JSON list ({e})") from None
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise InspectError(f"path {text!r}: a JSON path must be a list of strings")
        return labels
    return [label for label in text.split("/") if label]


def _provenance(p) -> dict:
    out = {f.name: getattr(p, f.name) for f in p.DESCRIPTOR.fields if f.name != "conversation_seq"
           and getattr(p, f.name)}
    if p.HasField("conversation_seq"):
        out["conversation_seq"] = p.conversation_seq
    return out


def _memory_item(it, value: bool = True) -> dict:
    out = {"path": list(it.path), "key": it.key, "version": it.version, "etag": it.etag,
           "create_time": ts(it.create_time), "update_time": ts(it.update_time),
           "expire_time": ts(it.expire_time), "ttl_ms": it.ttl.ToMilliseconds() if it.HasField("ttl") else None,
           "origin": _enum(memory_pb2.MemoryOrigin, it.origin, "MEMORY_ORIGIN_"), "actor": it.actor,
           "provenance": _provenance(it.provenance), "vector_space": it.vector_space,
           "vector_fields": list(it.vector_fields)}
    if value:
        out["value"] = jsonable(from_value(it.value)) if it.HasField("value") else None
    return out


def _segments(prefix: list[str]) -> list:
    return [memory_pb2.PathSegment(label=label) for label in prefix]


def view_memory_paths(src, ns: str, prefix: list[str], limit: int = 0) -> dict:
    """The memory paths (LangGraph's store namespaces) of a namespace that hold live items, under ``prefix``."""
    req = memory_pb2.ListMemoryNamespacesRequest(namespace=ns, prefix=_segments(prefix))
    found = pages(src, "MemoryService", "ListMemoryNamespaces", req, "namespaces", limit)
    return {"namespace": ns, "prefix": prefix, "paths": [list(p.path) for p in found]}


def view_memory_items(src, ns: str, prefix: list[str], limit: int = 0) -> dict:
    """The live memory items under ``prefix``, by path and key (TTLs are not refreshed)."""
    req = memory_pb2.SearchMemoryItemsRequest(namespace=ns, path_prefix=prefix,
                                              order=memory_pb2.MEMORY_ORDER_PATH_KEY, refresh_ttl=False)
    found = pages(src, "MemoryService", "SearchMemoryItems", req, "items", limit)
    return {"namespace": ns, "prefix": prefix, "items": [_memory_item(s.item) for s in found]}


def view_memory_item(src, ns: str, path: list[str], key: str) -> dict:
    """One memory item (None when deleted or expired) and its history, newest change first."""
    got = src.call("MemoryService", "GetMemoryItem", memory_pb2.GetMemoryItemRequest(
        namespace=ns, path=path, key=key, refresh_ttl=False, allow_missing=True))
    revs = pages(src, "MemoryService", "GetMemoryItemHistory", memory_pb2.GetMemoryItemHistoryRequest(
        namespace=ns, path=path, key=key, include_values=True), "revisions")
    history = [{"version": r.version, "kind": _enum(memory_pb2.RevisionKind, r.kind, "REVISION_KIND_"),
                "time": ts(r.time), "actor": r.actor, "origin": _enum(memory_pb2.MemoryOrigin, r.origin,
                                                                       "MEMORY_ORIGIN_"),
                "provenance": _provenance(r.provenance), "etag": r.etag,
                "ttl_ms": r.ttl.ToMilliseconds() if r.HasField("ttl") else None,
                "value": jsonable(from_value(r.value)) if r.HasField("value") else None} for r in revs]
    return {"namespace": ns, "path": path, "key": key,
            "item": _memory_item(got.item) if got.HasField("item") else None, "history": history}


# ----------------------------------------------------------------- human output

def _short(value: Any, full: bool) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if full or len(text) <= TRUNCATE else text[:TRUNCATE] + f"… ({len(text)} characters; --full)"


def _meta(metadata: dict) -> str:
    return " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in metadata.items())


def render_threads(m: dict, full: bool) -> str:
    if not m["threads"]:
        return f"no threads in namespace {m['namespace']!r}" + (f" matching {_meta(m['filter'])}" if m["filter"] else "")
    width = max(len(t["thread_id"]) for t in m["threads"])
    lines = [f"{'THREAD':<{width}}  {'STATUS':<11}  {'UPDATED':<24}  METADATA"]
    for t in m["threads"]:
        lines.append(f"{t['thread_id']:<{width}}  {t['status']:<11}  {t['update_time']:<24}  "
                     f"{_short(t['metadata'], full) if t['metadata'] else ''}")
    lines.append(f"{len(m['threads'])} thread(s)")
    return "\n".join(lines)


def render_tree(m: dict, full: bool) -> str:
    nodes = {(n["checkpoint_ns"], n["checkpoint_id"]): n for n in m["checkpoints"]}
    lines = [f"thread {m['thread_id']} ({len(nodes)} checkpoint(s))"]
    if not nodes:
        return lines[0]

    def label(n: dict) -> str:
        tags = []
        if n["head"]:
            tags.append("HEAD")
        if n["fork"]:
            tags.append(f"fork: {len(n['children'])} children")
        text = f"{n['checkpoint_id']}  {n['create_time']}"
        if n["metadata"]:
            meta = _meta(n["metadata"])
            text += "  " + (meta if full or len(meta) <= 80 else meta[:80] + "…")
        if tags:
            text += "  [" + ", ".join(tags) + "]"
        return text

    def walk(key, first: str, rest: str) -> None:
        while True:
            n = nodes[key]
            lines.append(first + label(n))
            for b in n["branches"]:
                promoted = f", promoted {b['promote_time']}" if b["promote_time"] else ""
                lines.append(f"{rest}  ⎇ branch thread {b['branch_thread_id']} (run {b['run_id']}{promoted})")
            kids = n["children"]
            if len(kids) == 1:
                key, first = (key[0], kids[0]), rest
                continue
            for i, kid in enumerate(kids):
                last = i == len(kids) - 1
                walk((key[0], kid), rest + ("└── " if last else "├── "), rest + ("    " if last else "│   "))
            return

    by_ns: dict[str, list] = {}
    for key, n in nodes.items():
        parent = (key[0], n["parent_checkpoint_id"])
        if not n["parent_checkpoint_id"] or parent not in nodes:
            by_ns.setdefault(key[0], []).append(key)
    for cns in sorted(by_ns):
        if len(by_ns) > 1 or cns:
            lines.append(f"checkpoint_ns {cns!r}:")
        for root in by_ns[cns]:
            walk(root, "", "")
    return "\n".join(lines)


def render_checkpoint(m: dict, full: bool) -> str:
    lines = [f"checkpoint {m['checkpoint_id']} of thread {m['thread_id']}"
             + (f" (checkpoint_ns {m['checkpoint_ns']!r})" if m["checkpoint_ns"] else ""),
             f"  parent    {m['parent_checkpoint_id'] or '-'}", f"  created   {m['create_time']}",
             f"  metadata  {_meta(m['metadata']) or '-'}", "values:"]
    for name, value in m["values"].items():
        lines.append(f"  {name}: {_short(value, full)}")
    if m["pending_writes"]:
        lines.append("pending writes:")
        for w in m["pending_writes"]:
            lines.append(f"  {w['task_id']} -> {w['channel']}: {_short(w['value'], full)}")
    return "\n".join(lines)


def render_diff(m: dict, full: bool) -> str:
    lines = [f"diff {m['from_checkpoint_id']} -> {m['to_checkpoint_id']} (thread {m['thread_id']})"]
    if not m["changes"]:
        lines.append("  no channel differs")
    for c in m["changes"]:
        if c.get("lists"):
            head = (f"  ~ {c['channel']}: list {c['from_length']} -> {c['to_length']} items, first "
                    f"{c['common_prefix']} shared" + (" (appended)" if c["appended"] else ""))
            lines.append(head)
            for item in c["removed"]:
                lines.append(f"      - {_short(item, full)}")
            for item in c["added"]:
                lines.append(f"      + {_short(item, full)}")
            continue
        sign = {"added": "+", "removed": "-"}.get(c["kind"], "~")
        lines.append(f"  {sign} {c['channel']} ({c['kind']})")
        if c["kind"] != "added":
            lines.append(f"      from {_short(c['from'], full)}")
        if c["kind"] != "removed":
            lines.append(f"      to   {_short(c['to'], full)}")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render_bytes(m: dict, full: bool) -> str:
    lines = [f"checkpoint {m['checkpoint_id']} of thread {m['thread_id']}: {_size(m['total_bytes'])} in "
             f"{len(m['channels'])} channel(s); {m['checkpoints_in_history']} checkpoint(s) in its namespace"]
    width = max([len(r["channel"]) for r in m["channels"]] + [7])
    lines.append(f"  {'CHANNEL':<{width}}  {'BYTES':>10}  {'SHARE':>6}  {'KIND':<5}  {'ITEMS':>6}  CHANGED IN")
    for r in m["channels"]:
        bar = "█" * round(r["share"] * 20)
        items = "" if r["items"] is None else str(r["items"])
        lines.append(f"  {r['channel']:<{width}}  {_size(r['bytes']):>10}  {r['share'] * 100:5.1f}%  {r['kind']:<5}  "
                     f"{items:>6}  {r['changed_in']:>4} checkpoint(s)  {bar}")
    return "\n".join(lines)


def render_run(m: dict, full: bool) -> str:
    u = m["usage"]
    lines = [f"run {m['run_id']} on thread {m['thread_id']}: {m['status']}" + (" (held)" if m["held"] else "")
             + f", attempt {m['attempt']}",
             f"  checkpoints {m['start_checkpoint_id'] or '-'} .. {m['last_checkpoint_id'] or '-'}",
             f"  usage tokens {u['tokens_in']} in / {u['tokens_out']} out, cost {u['cost']:g}, "
             f"{u['wall_time_ms']} ms",
             "  " + ", ".join(f"{n} {k}" for k, n in m["counts"].items()), "timeline:"]
    for item in m["timeline"]:
        detail = {k: v for k, v in item.items() if k not in ("time", "kind", "what") and v not in (None, "", 0, False)}
        extra = f"  {_short(detail, full)}" if detail else ""
        lines.append(f"  {item['time']}  {item['kind']:<8}  {item['what']}{extra}")
    return "\n".join(lines)


def render_runs(m: dict, full: bool) -> str:
    if not m["runs"]:
        return f"no runs on thread {m['thread_id']}"
    width = max(len(r["run_id"]) for r in m["runs"])
    lines = [f"{'RUN':<{width}}  {'STATUS':<11}  {'CREATED':<24}  {'ENDED':<24}  LAST CHECKPOINT"]
    for r in m["runs"]:
        status = r["status"] + (" (held)" if r["held"] else "")
        lines.append(f"{r['run_id']:<{width}}  {status:<11}  {r['create_time']:<24}  {r['end_time'] or '-':<24}  "
                     f"{r['last_checkpoint_id'] or '-'}")
    return "\n".join(lines)


def render_stats(m: dict, full: bool) -> str:
    return "\n".join(f"{k:<16} {v}" for k, v in m.items())


def _one_line(value: Any, full: bool, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = " ".join(text.split()) if not full else text
    return text if full or len(text) <= width else text[:width] + "…"


def render_conversation(m: dict, full: bool) -> str:
    c, p = m["conversation"], m["compaction_policy"]
    lines = [f"conversation {m['thread_id']}: {c['item_count']} item(s)"
             + (f", seq {c['first_seq']}..{c['last_seq']}" if c["item_count"] else "")
             + f", {c['summary_count']} summary(ies), {c['pending_compactions']} pending compaction(s), "
             f"~{c['estimated_tokens']} tokens" + (" [closed]" if c["closed"] else ""),
             f"  policy ({p['source']}): " + ("disabled" if p["disabled"] else
                                             f"every {p['trigger_items']} items summarise the oldest "
                                             f"{p['compact_items']}, keep {p['keep_last_items']}; pyramid fan-in "
                                             f"{p['pyramid_fan_in']} (+{p['pyramid_keep_last']} kept), "
                                             f"{p['max_levels']} level(s); fallback after "
                                             f"{p['fallback_after_ms'] / 1000:g} s")]
    if m["pyramid"]:
        lines.append("summaries (the pyramid, top level first):")
        by_id = {s["summary_id"]: s for s in m["summaries"]}
        for lvl in m["pyramid"]:
            for sid in lvl["summary_ids"]:
                s = by_id[sid]
                covers = (f"summaries {', '.join(s['child_ids'])}" if s["child_ids"] else
                          f"items {s['first_seq']}-{s['last_seq']}")
                tag = " [fallback]" if s["fallback"] else ""
                lines.append(f"  {'  ' * (m['pyramid'][0]['level'] - lvl['level'])}{sid}  covers {covers} "
                             f"({s['item_count']} item(s), ~{s['covered_estimated_tokens']} -> "
                             f"{s['estimated_tokens']} tokens) by {s['producer']}{tag}")
                lines.append(f"  {'  ' * (m['pyramid'][0]['level'] - lvl['level'])}    {_one_line(s['text'], full)}")
    if m["compactions"]:
        lines.append("pending compactions:")
        for x in m["compactions"]:
            who = f" by {x['worker']} until {x['lease_expire_time']}" if x["state"] == "claimed" else ""
            lines.append(f"  {x['compaction_id']}  {x['state']}{who}, attempts {x['attempts']}, due {x['due_time']}"
                         + (f", fallback at {x['fallback_time']}" if x["fallback_time"] else ""))
    shown = "" if m["shown_items"] == c["item_count"] else f" (the newest {m['shown_items']})"
    lines.append(f"items{shown}:")
    if m["items"]:
        w = max(len(str(i["seq"])) for i in m["items"])
        lines.append(f"  {'SEQ':>{max(w, 3)}}  {'KIND':<11}  {'ROLE':<10}  {'TOKENS':>6}  {'SUMMARISED IN':<22}  "
                     "CONTENT")
        for i in m["items"]:
            where = " < ".join(i["summaries"]) or (f"({i['pending_compaction']} due)" if i["pending_compaction"]
                                                    else "-")
            role = i["role"] or (i["tool_name"] and f"({i['tool_name']})") or ""
            tokens = i["client_tokens"] if i["client_tokens"] is not None else i["estimated_tokens"]
            lines.append(f"  {i['seq']:>{max(w, 3)}}  {i['kind']:<11}  {role:<10}  {tokens:>6}  {where:<22}  "
                         f"{_one_line(i['content'], full, 80)}")
    return "\n".join(lines)


def render_context(m: dict, full: bool) -> str:
    lines = [f"context of thread {m['thread_id']} for a budget of {m['budget_tokens']} tokens: "
             f"{len(m['items'])} item(s), {m['total_tokens']} tokens, stable prefix {m['stable_prefix_items']} "
             f"item(s), last seq {m['last_seq']}, hash {m['context_hash'][:16]}…",
             "   #  SOURCE       TOKENS  WHAT"]
    for i in m["items"]:
        if i["source"] == "pinned":
            what = f"pin {i['pin_id']}"
        elif i["source"] == "summary":
            what = f"{i['summary_id']} (items {i['first_seq']}-{i['last_seq']})"
        elif i["source"] == "compressed_tool_call":
            what = f"{i['tool_name']} call, items {i['first_seq']}-{i['last_seq']}"
        else:
            what = f"seq {i['first_seq']} {i['kind']}" + (f" {i['role']}" if i["role"] else "")
        tokens = ("~" if i["tokens_estimated"] else "") + str(i["tokens"])
        lines.append(f"  {i['index']:>2}  {i['source']:<11}  {tokens:>6}  {what}: "
                     f"{_one_line(i['content'], full, 70)}")
    lines.append("explanation (every pinned item and live item once):")
    for e in m["explanation"]:
        if e["source"] == "pinned":
            src = f"pin {e['pin_id']}"
        elif e["source"] == "items":
            src = (f"item {e['first_seq']}" if e["first_seq"] == e["last_seq"] else
                   f"items {e['first_seq']}-{e['last_seq']} ({e['item_count']})")
        else:
            src = "knowledge"
        to = f" -> #{e['context_index']}" if e["context_index"] is not None else ""
        extra = f" as {e['summary_id']}" if e["summary_id"] else ""
        extra += f" (equal to seq {e['duplicate_of_seq']})" if e["duplicate_of_seq"] else ""
        lines.append(f"  {src:<22} {e['fate']:<14} {e['tokens']:>6} tokens{to}{extra}: {e['why']}")
    return "\n".join(lines)


def _path_text(path: list[str]) -> str:
    return "/".join(path) if all("/" not in p for p in path) else json.dumps(path, ensure_ascii=False)


def render_memory_paths(m: dict, full: bool) -> str:
    under = f" under {_path_text(m['prefix'])}" if m["prefix"] else ""
    if not m["paths"]:
        return f"no memory paths with live items{under} in namespace {m['namespace']!r}"
    return "\n".join([*(_path_text(p) for p in m["paths"]), f"{len(m['paths'])} path(s){under}"])


def render_memory_items(m: dict, full: bool) -> str:
    under = f" under {_path_text(m['prefix'])}" if m["prefix"] else ""
    if not m["items"]:
        return f"no live memory items{under} in namespace {m['namespace']!r}"
    lines = []
    for it in m["items"]:
        lines.append(f"{_path_text(it['path'])}  {it['key']}  v{it['version']}  {it['update_time']}"
                     + (f"  expires {it['expire_time']}" if it["expire_time"] else "") + f"  {_short(it['value'], full)}")
    lines.append(f"{len(m['items'])} item(s){under}")
    return "\n".join(lines)


def render_memory_item(m: dict, full: bool) -> str:
    it = m["item"]
    lines = [f"memory item {_path_text(m['path'])} {m['key']!r}" + ("" if it else ": deleted or expired")]
    if it:
        lines += [f"  version   {it['version']} (etag {it['etag']})", f"  created   {it['create_time']}",
                  f"  updated   {it['update_time']}" + (f" by {it['actor']}" if it["actor"] else ""),
                  f"  origin    {it['origin']}" + (f", provenance {_meta(it['provenance'])}" if it["provenance"] else "")]
        if it["expire_time"]:
            lines.append(f"  expires   {it['expire_time']}")
        lines.append(f"  value     {_short(it['value'], full)}")
    lines.append(f"history ({len(m['history'])} change(s), newest first):")
    for r in m["history"]:
        detail = f"  {_short(r['value'], full)}" if r["value"] is not None else ""
        who = f" by {r['actor']}" if r["actor"] else ""
        lines.append(f"  v{r['version']}  {r['time']}  {r['kind']}{who}{detail}")
    return "\n".join(lines)


RENDER = {"threads": render_threads, "tree": render_tree, "checkpoint": render_checkpoint, "diff": render_diff,
          "bytes": render_bytes, "runs": render_runs, "run": render_run, "stats": render_stats,
          "conversation": render_conversation, "context": render_context, "memory-paths": render_memory_paths,
          "memory-items": render_memory_items, "memory-item": render_memory_item}


# ----------------------------------------------------------------- command line

def add_parser(sub, default_address: str) -> None:
    """Add ``inspect`` and its views to the ``sidecar`` command's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group()
    where.add_argument("--address", default=None, metavar="ADDR",
                       help=f"a running sidecar: unix:PATH or HOST:PORT (default: {default_address})")
    where.add_argument("--data-dir", default=None, metavar="DIR", help="read a data directory, read-only, instead")
    common.add_argument("--namespace", default="default", help="(default: %(default)s)")
    common.add_argument("--token", default=os.environ.get("SIDECAR_TOKEN") or None,
                        help="with --address, for a sidecar run with --auth-file: a token that may read the "
                             "namespace (the store view: admin) (default: $SIDECAR_TOKEN)")
    common.add_argument("--tls-ca", default=None, metavar="PEM",
                        help="with --address: connect over TLS, checking the sidecar's certificate against this CA")
    common.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    common.add_argument("--full", action="store_true", help="do not shorten long values")
    p = sub.add_parser("inspect", help="look at threads, checkpoints, runs, conversations and memory (read-only)",
                       description="Read-only views of a sidecar's state, against a running sidecar (--address) or "
                                   "a data directory opened read-only (--data-dir; the sidecar may be running). "
                                   "Human output, or --json for scripts. Each view has its own --help.")
    views = p.add_subparsers(dest="view", required=True)
    v = views.add_parser("threads", parents=[common], help="threads, by metadata")
    v.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="metadata equal to VALUE (JSON, else a string); repeatable")
    v.add_argument("--limit", type=int, default=0, help="at most this many")
    v = views.add_parser("tree", parents=[common], help="a thread's checkpoints as a tree with forks and branches")
    v.add_argument("thread_id")
    v.add_argument("--checkpoint-ns", default=None, help="only this checkpoint namespace (default: all)")
    v = views.add_parser("checkpoint", parents=[common], help="one checkpoint's values")
    v.add_argument("thread_id")
    v.add_argument("checkpoint_id", nargs="?", default="", help="(default: the latest)")
    v.add_argument("--checkpoint-ns", default="")
    v = views.add_parser("diff", parents=[common], help="what changed between two checkpoints")
    v.add_argument("thread_id")
    v.add_argument("from_checkpoint_id")
    v.add_argument("to_checkpoint_id")
    v.add_argument("--checkpoint-ns", default="")
    v = views.add_parser("bytes", parents=[common], help="where a checkpoint's bytes go, per channel")
    v.add_argument("thread_id")
    v.add_argument("checkpoint_id", nargs="?", default="", help="(default: the latest)")
    v.add_argument("--checkpoint-ns", default="")
    v = views.add_parser("runs", parents=[common], help="a thread's runs")
    v.add_argument("thread_id")
    v = views.add_parser("run", parents=[common], help="a run's timeline: steps, events, effects, artifacts")
    v.add_argument("run_id")
    views.add_parser("stats", parents=[common], help="the store's counts")
    v = views.add_parser("conversation", parents=[common],
                         help="a thread's conversation: items by seq, the summaries covering them, the pyramid")
    v.add_argument("thread_id")
    v.add_argument("--last", type=int, default=0, metavar="N", help="only the newest N items (default: all)")
    v = views.add_parser("context", parents=[common],
                         help="the context GetContext builds for a budget, with what was kept, summarised or dropped")
    v.add_argument("thread_id")
    v.add_argument("--budget", type=int, required=True, metavar="TOKENS", help="the token budget")
    v.add_argument("--keep-last", type=int, default=None, metavar="N", help="override the verbatim tail")
    path_help = "labels separated by / (users/ann), or a JSON list of labels"
    v = views.add_parser("memory-paths", parents=[common], help="memory paths (store namespaces) with live items")
    v.add_argument("prefix", nargs="?", default="", help=f"only under this path: {path_help}")
    v.add_argument("--limit", type=int, default=0, help="at most this many")
    v = views.add_parser("memory-items", parents=[common], help="live memory items under a path prefix")
    v.add_argument("prefix", nargs="?", default="", help=f"the path prefix: {path_help} (default: all)")
    v.add_argument("--limit", type=int, default=0, help="at most this many")
    v = views.add_parser("memory-item", parents=[common], help="one memory item with its history")
    v.add_argument("path", help=path_help)
    v.add_argument("key")


def run(args, default_address: str, out=None) -> int:
    out = out if out is not None else sys.stdout
    try:
        if args.data_dir:
            src = DirSource(args.data_dir)
        else:
            tls = None
            if args.tls_ca:
                with open(args.tls_ca, "rb") as f:
                    tls = transport.TLS(root_certificates=f.read())
            src = GrpcSource(args.address or default_address, token=args.token, tls=tls)
    except (OSError, RuntimeError) as e:
        print(f"sidecar inspect: {e}", file=sys.stderr)
        return 2
    try:
        ns = args.namespace
        view = args.view
        if view == "threads":
            model = view_threads(src, ns, _parse_filter(args.filter), args.limit)
        elif view == "tree":
            model = view_tree(src, ns, args.thread_id, args.checkpoint_ns)
        elif view == "checkpoint":
            model = view_checkpoint(src, ns, args.thread_id, args.checkpoint_id, args.checkpoint_ns)
        elif view == "diff":
            model = view_diff(src, ns, args.thread_id, args.from_checkpoint_id, args.to_checkpoint_id,
                              args.checkpoint_ns)
        elif view == "bytes":
            model = view_bytes(src, ns, args.thread_id, args.checkpoint_id, args.checkpoint_ns)
        elif view == "runs":
            model = view_runs(src, ns, args.thread_id)
        elif view == "run":
            model = view_run(src, ns, args.run_id)
        elif view == "conversation":
            model = view_conversation(src, ns, args.thread_id, args.last)
        elif view == "context":
            model = view_context(src, ns, args.thread_id, args.budget, args.keep_last)
        elif view == "memory-paths":
            model = view_memory_paths(src, ns, parse_path(args.prefix), args.limit)
        elif view == "memory-items":
            model = view_memory_items(src, ns, parse_path(args.prefix), args.limit)
        elif view == "memory-item":
            model = view_memory_item(src, ns, parse_path(args.path), args.key)
        else:
            model = view_stats(src)
    except InspectError as e:
        print(f"sidecar inspect: {e}", file=sys.stderr)
        return 1
    finally:
        src.close()
    try:
        if args.json:
            json.dump(model, out, ensure_ascii=False, indent=2, sort_keys=True)
            out.write("\n")
        else:
            out.write(RENDER[view](model, args.full) + "\n")
        out.flush()
    except BrokenPipeError:  # `sidecar inspect ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
