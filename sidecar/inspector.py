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

Conversations and memory items are not here yet (their APIs are being built).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import sys
from typing import Any

import grpc

from agentstate.codec import Opaque
from agentstate.values import from_value, to_value
from agentstate.v1 import (admin_pb2, admin_pb2_grpc, artifacts_pb2, artifacts_pb2_grpc, effects_pb2,
                           effects_pb2_grpc, events_pb2, events_pb2_grpc, runs_pb2, runs_pb2_grpc, threads_pb2,
                           threads_pb2_grpc)

from .api import artifacts as api_artifacts
from .api import checkpoints as api_checkpoints
from .api import context, service
from .api import effects as api_effects
from .api import events as api_events
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
             "ArtifactService": artifacts_pb2_grpc.ArtifactServiceStub}

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.address = address
        self.timeout = timeout
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)])
        self._stubs = {name: stub(self.channel) for name, stub in self.STUBS.items()}

    def call(self, service_name: str, method: str, request):
        try:
            return getattr(self._stubs[service_name], method)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise InspectError(f"{method}: {e.code().name}: {e.details()}") from None

    def close(self) -> None:
        self.channel.close()


class DirSource:
    """A data directory, read-only, answered by the api layer's read calls in this process."""

    def __init__(self, path: str) -> None:
        self.address = f"data dir {os.path.abspath(path)} (read-only)"
        self.store = ReadOnlyStore(path)
        self.ctx = context.Ctx(self.store, context.Hub())
        s, c = self.store, self.ctx
        self._calls = {
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
        }

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


RENDER = {"threads": render_threads, "tree": render_tree, "checkpoint": render_checkpoint, "diff": render_diff,
          "bytes": render_bytes, "runs": render_runs, "run": render_run, "stats": render_stats}


# ----------------------------------------------------------------- command line

def add_parser(sub, default_address: str) -> None:
    """Add ``inspect`` and its views to the ``sidecar`` command's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group()
    where.add_argument("--address", default=None, metavar="ADDR",
                       help=f"a running sidecar: unix:PATH or HOST:PORT (default: {default_address})")
    where.add_argument("--data-dir", default=None, metavar="DIR", help="read a data directory, read-only, instead")
    common.add_argument("--namespace", default="default", help="(default: %(default)s)")
    common.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    common.add_argument("--full", action="store_true", help="do not shorten long values")
    p = sub.add_parser("inspect", help="look at threads, checkpoints and runs (read-only)",
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


def run(args, default_address: str, out=None) -> int:
    out = out if out is not None else sys.stdout
    try:
        src = DirSource(args.data_dir) if args.data_dir else GrpcSource(args.address or default_address)
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
