"""_core: how LangGraph checkpoints map onto sidecar checkpoints, without any I/O.

Both savers build their requests and read their responses here; they differ
only in how they send them (sync or asyncio).

Mapping (one LangGraph checkpoint = one sidecar checkpoint)
-----------------------------------------------------------
* thread_id / checkpoint_ns / checkpoint id / parent id: the same strings.
* metadata: LangGraph's metadata map, key by key; a value the agentstate
  encoding can hold (str, int, float, bool, None, lists, str-keyed maps, ...)
  is stored as a structured value, so the sidecar can filter on it (``list``'s
  ``filter``) and index ``run_id``; anything else as the serializer's opaque
  bytes.
* extra: the rest of the checkpoint dict (v, ts, channel_versions,
  versions_seen, updated_channels, ...), structured when possible.
* channels: every channel that has a value at this checkpoint. A ``list``
  value is stored **item by item** (each item through the serializer, as
  opaque bytes), so the sidecar keeps it as a list tree; a ``_DeltaSnapshot``
  of a list likewise, behind a marker item. A ``dict`` whose keys are already
  in byte order (a graph input ``{"messages": [...]}``, say) is stored entry
  by entry as a map, so each entry is deduplicated on its own (the same
  order comes back). Any other value is one opaque blob. A channel with a
  version but no value (cleared, or a DeltaChannel between snapshots) is
  simply absent.
* pending writes: one sidecar write per LangGraph write, idx from
  WRITES_IDX_MAP for special channels (those replace, like InMemorySaver),
  task_path kept (reads sort by (task_path, task_id, idx)).

What the adapter knows the sidecar has
--------------------------------------
The saver remembers, for the checkpoints it recently stored or read (an LRU
of ``cache_size`` entries), each channel's version, its root hash (returned
by the sidecar) and, for list channels, one record per item (``_mirror.Rec``):
the serialized bytes the sidecar holds, a *mirror* proving them (a flat,
private record of the whole state of a value whose serialization gives those
bytes) and the mirror of what reading them gives, for reads. A put then
sends, relative to its parent checkpoint:

* a channel not in ``new_versions`` whose version the parent holds as
  ``keep``: the parent's stored value, exactly as LangGraph's own savers keep
  the value stored with that version, whatever the caller did to the object
  since. When the parent is not in the cache (``cache_size=0``, evicted,
  another process wrote it, a BASE_MISMATCH replan), the saver asks the
  sidecar for the parent's versions first (roots only), so what is stored
  never depends on the cache. A channel whose version the parent does not
  hold (a ``__copy__`` fork, say) is stored as given;
* a list in ``new_versions``: its leading items that still match their
  records' mirrors (compiled walk, ``_mirror.common_prefix``; about 0.2 us a
  message) are the parent's, the rest is serialized and sent as ``append``
  (``keep_first`` when the list changed inside) with ``base_root`` = the
  parent's root for that channel (the sidecar checks it and refuses a stale
  base with BASE_MISMATCH, on which the saver forgets what it knew of the
  thread and sends the put again against what the sidecar really holds,
  from the bytes it serialized at put time). Identity is never the proof:
  an item changed in place no longer matches its mirror and is sent again;
* anything else whole, serialized when ``put`` is called.

Reads send the roots of the cached lists (``known_roots``): an unchanged list
comes back empty, a grown one as the new items only. Every read hands out
new objects (the records' source mirrors thawed; an item read for the first
time is deserialized), so no two reads share an object with each other, with
the caller's earlier puts, or with the cache: changing a returned object in
place changes nothing stored or cached. (With the compiled mirrors a record
keeps the object its last read gave and gives that one again when nothing
else refers to it or to anything mutable in it and it is exactly as a thaw
would make it: a caller cannot tell it from a new one, and a chat whose turns
drop their state then reads its history without making it anew;
``_mirror.hand_out``.) ``cache_size=0`` keeps nothing: whole
values each time (storage stays linear, since the sidecar deduplicates items,
but the wire does not).
"""
from __future__ import annotations

import contextlib
import gc
import threading
from collections import OrderedDict
from operator import is_
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (WRITES_IDX_MAP, ChannelVersions, Checkpoint, CheckpointMetadata,
                                       CheckpointTuple, DeltaChannelHistory, get_serializable_checkpoint_metadata)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from .. import codec
from .._requests import channel_history_request, get_checkpoint_request, list_checkpoints_request, \
    prune_request, put_checkpoint_request, put_writes_request
from ..codec import Opaque
from ..values import Append, Encoded, Keep, from_value
from ..v1 import threads_pb2 as pb
from ._mirror import UNMIRRORABLE, Rec, Unmirrorable, common_prefix, freeze, hand_out, matches, seal
from ._serde import check_type

#: Marks a stored list that is a DeltaChannel snapshot (its first item).
SNAPSHOT_MARK_TYPE = "agentstate.langgraph.delta-snapshot"
_MARK = object()  # the marker item among a snapshot's items
_MARK_VALUE = Opaque(SNAPSHOT_MARK_TYPE, b"")
_MARK_REC = Rec(_MARK_VALUE, (_MARK,), UNMIRRORABLE)  # its record (a mirror of one leaf: _MARK itself)
SCHEMA_VERSION = 1  # of this mapping; stored with every checkpoint


@dataclass
class Known:
    """What the saver knows of one stored checkpoint."""

    versions: dict  # channel_versions
    roots: dict[str, bytes]  # channel -> root hash (b"" until the put is stored) of every channel it holds
    lists: dict[str, list[Rec]] = field(default_factory=dict)  # channel -> item records of list channels
    covered: set[str] | None = None  # when set, roots are known only for these channels (not cached)
    # (schema, version) the checkpoint is stored at, when read from the sidecar (None: put by this saver)
    schema: tuple[str, int] | None = None


@dataclass
class PutPlan:
    """A LangGraph put, independent of what is known of the parent: ids, versions, the encoded metadata and
    extra, and each channel's content once serialized (``written``: kept, so that a put planned again after
    BASE_MISMATCH sends the bytes of the moment ``put`` was called, not what the caller's objects hold by
    then)."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str
    versions: dict
    new: frozenset
    values: dict  # the caller's channel values (read for a channel once, when it must be written)
    metadata: dict
    extra: Any
    written: dict = field(default_factory=dict)  # channel -> (item records, None) | (None, whole value)


@dataclass
class PendingPut:
    """A put on its way: what the saver will know of the checkpoint (roots filled in on the reply)."""

    key: tuple[str, str, str]
    known: Known
    plan: PutPlan


class Core:
    """Encoding, decoding and the what-the-sidecar-has cache of one saver (thread-safe)."""

    def __init__(self, serde, namespace: str, cache_size: int, schema: str = "", schema_version: int = 0,
                 migrations=None) -> None:
        if schema and schema_version < 1:
            raise ValueError("schema_version must be at least 1 with a schema")
        if migrations is not None and (not schema or migrations.schema != schema):
            raise ValueError(f"migrations of schema {migrations.schema!r} given for schema {schema!r}")
        self.serde = serde
        self.namespace = namespace
        self.cache_size = cache_size
        self.schema, self.schema_version, self.migrations = schema, schema_version, migrations
        self._cache: OrderedDict[tuple[str, str, str], Known] = OrderedDict()
        self._latest: dict[tuple[str, str], str] = {}
        self._seeds: OrderedDict[tuple[str, str, str], tuple[bytes, list]] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------ values

    def dumps(self, value: Any) -> Opaque:
        type_, data = self.serde.dumps_typed(value)
        check_type(type_)
        return Opaque(type_, bytes(data))

    def loads(self, value: Any) -> Any:
        if type(value) is not Opaque:
            raise ValueError(f"expected serialized data, found {type(value).__name__}")
        check_type(value.type)
        return self.serde.loads_typed((value.type, value.data))

    def structured_or_opaque(self, value: Any) -> Any:
        """A metadata-like value as a structured value when the encoding holds it, else opaque."""
        try:
            return Encoded(codec.encode(value))
        except codec.UnsupportedValue:
            return self.dumps(value)

    def from_structured(self, value: Any) -> Any:
        return self.loads(value) if type(value) is Opaque else value

    def _items_of(self, value: Any) -> list | None:
        """The items a channel value is stored as when it is a list (marker first for a snapshot)."""
        if type(value) is list:
            return value
        if isinstance(value, _DeltaSnapshot) and type(value.value) is list:
            return [_MARK, *value.value]
        return None

    def _record(self, item: Any) -> Rec:
        """A new item's record: its bytes and (when the saver caches) a mirror proving them."""
        if item is _MARK:
            return _MARK_REC
        opaque = self.dumps(item)
        if not self.cache_size:
            return Rec(opaque)
        try:
            return Rec(opaque, freeze(item))
        except Unmirrorable:
            return Rec(opaque)  # never claimed unchanged: serialized again by every put that has it

    @staticmethod
    def _stored_record(v: Any) -> Rec:
        """The record of an item read from the sidecar (its object is made when first handed out)."""
        if type(v) is Opaque and v.type == SNAPSHOT_MARK_TYPE:
            return _MARK_REC
        return Rec(v)

    def _fresh(self, rec: Rec) -> Any:
        """A new object for ``rec``, deserialized from its bytes. When caching, the record keeps its mirror
        as the source of later reads, and as the proof of its bytes when serializing it gives them again
        (a value whose round trip changes it keeps the proof it had, or none)."""
        obj = self.loads(rec.opaque)
        if self.cache_size and rec.source is None:
            try:
                src = freeze(obj)
            except Unmirrorable:
                rec.source = UNMIRRORABLE
            else:
                if rec.proof is None or not matches(obj, rec.proof):
                    if self.dumps(obj) == rec.opaque:
                        rec.proof = src
                rec.source = src
        return obj

    def write_value(self, value: Any) -> Any:
        """A pending write's value: a list item by item (the sidecar stores it as a list tree, so its items are
        the very nodes of the channel list the write extends), anything else as one blob."""
        if type(value) is list:
            return [self.dumps(x) for x in value]
        return self.dumps(value)

    def load_write(self, v: Any) -> Any:
        """The value of a stored pending write: item by item, or one blob (as earlier versions stored lists)."""
        if type(v) is list:
            return [self.loads(x) for x in v]
        return self.loads(v)

    def _decode_whole(self, v: Any) -> Any:
        """A channel value that is not a list: one serialized blob, or a dict stored key by key."""
        if type(v) is dict:
            return {k: self.loads(x) for k, x in v.items()}
        return self.loads(v)

    def _python(self, recs: list[Rec]) -> Any:
        """The channel value of stored item records: new objects each time (see ``_mirror``)."""
        with _collector_paused():
            if recs and recs[0] is _MARK_REC:
                return _DeltaSnapshot(hand_out(recs[1:], self._fresh))
            return hand_out(recs, self._fresh)

    # ------------------------------------------------------------ cache

    def known(self, thread_id: str, ns: str, checkpoint_id: str) -> Known | None:
        if not checkpoint_id or not self.cache_size:
            return None
        with self._lock:
            k = self._cache.get((thread_id, ns, checkpoint_id))
            if k is not None:
                self._cache.move_to_end((thread_id, ns, checkpoint_id))
            return k

    def latest_known(self, thread_id: str, ns: str) -> Known | None:
        with self._lock:
            cid = self._latest.get((thread_id, ns))
        return self.known(thread_id, ns, cid) if cid else None

    def remember(self, key: tuple[str, str, str], k: Known, latest: bool) -> None:
        if not self.cache_size or k.covered is not None:
            return
        for recs in k.lists.values():
            seal(recs)
        with self._lock:
            self._cache[key] = k
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            if latest:
                self._latest[key[:2]] = key[2]
                if len(self._latest) > 4 * self.cache_size:
                    self._latest.pop(next(iter(self._latest)))

    def forget(self, thread_ids: Iterable[str] | None = None) -> None:
        """Drop what is known of these threads (all when None)."""
        with self._lock:
            if thread_ids is None:
                self._cache.clear()
                self._latest.clear()
                self._seeds.clear()
                return
            gone = {str(t) for t in thread_ids}
            for d in (self._cache, self._latest, self._seeds):
                for key in [k for k in d if k[0] in gone]:
                    del d[key]

    # ------------------------------------------------------------ put

    def plan_put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                 new_versions: ChannelVersions) -> PutPlan:
        """A LangGraph put's ids, versions and encoded metadata; channels are serialized by request_for."""
        conf = config["configurable"]
        extra = {k: v for k, v in checkpoint.items() if k not in ("id", "channel_values")}
        md = get_serializable_checkpoint_metadata(config, metadata)
        return PutPlan(str(conf["thread_id"]), conf.get("checkpoint_ns", ""), checkpoint["id"],
                       conf.get("checkpoint_id") or "", dict(checkpoint["channel_versions"]),
                       frozenset(new_versions or ()), dict(checkpoint["channel_values"]),
                       {k: self.structured_or_opaque(v) for k, v in md.items()}, self.structured_or_opaque(extra))

    def request_for(self, plan: PutPlan, base: Known | None,
                    ) -> tuple[pb.PutCheckpointRequest | None, PendingPut | None, list[str]]:
        """The PutCheckpoint request for ``plan`` relative to ``base`` (what is known of the parent). When the
        parent is not known and some channels not in ``new_versions`` need it, returns (None, None, those
        channels): the caller learns the parent (:meth:`parent_request`, :meth:`parent_from`) and asks again."""
        channels: dict[str, Any] = {}
        lists: dict[str, list[Rec]] = {}
        unknown: list[str] = []
        # a parent stored at another schema version holds values in the old shape: keep none of them
        stale = bool(self.schema) and base is not None and base.schema is not None and \
            base.schema != (self.schema, self.schema_version)
        for ch, ver in plan.versions.items():
            if ch not in plan.new and plan.parent_id and not stale:
                if base is None:
                    unknown.append(ch)  # only the parent can tell whether it holds this version
                    continue
                if (base.covered is None or ch in base.covered) and base.versions.get(ch) == ver:
                    if ch in base.roots:  # the value stored with this version: keep it
                        channels[ch] = Keep()
                        if ch in base.lists:
                            lists[ch] = base.lists[ch]
                    continue  # absent from the parent at this version: absent here too
            if ch in plan.values or ch in plan.written:
                channels[ch], recs = self._channel_write(plan, ch, base)
                if recs is not None:
                    lists[ch] = recs
        if unknown:
            return None, None, unknown
        req = put_checkpoint_request(
            self.namespace, plan.thread_id, channels, checkpoint_id=plan.checkpoint_id, parent_id=plan.parent_id,
            base_id="", checkpoint_ns=plan.ns, metadata=plan.metadata, extra=plan.extra, expected_head_etag=None,
            schema_version=self.schema_version if self.schema else SCHEMA_VERSION, require_thread=False,
            request_id="")
        req.schema = self.schema
        roots = {ch: (base.roots.get(ch, b"") if type(w) is Keep else b"") for ch, w in channels.items()}
        key = (plan.thread_id, plan.ns, plan.checkpoint_id)
        return req, PendingPut(key, Known(dict(plan.versions), roots, lists), plan), []

    def _channel_write(self, plan: PutPlan, ch: str, base: Known | None) -> tuple[Any, list[Rec] | None]:
        """A channel's content (serialized once per plan) as a write relative to ``base``."""
        written = plan.written.get(ch)
        if written is None:
            written = plan.written[ch] = self._serialize(plan.values[ch], base, ch)
        recs, whole = written
        if recs is None:
            return whole, None
        old = base.lists.get(ch) if base is not None and self.cache_size else None
        if old:
            # the records this list took over from the parent's are the very same objects (records never
            # change their bytes, so identity is the proof here)
            k = _same_records(recs, old)
            if k:
                return Append([r.opaque for r in recs[k:]], keep_first=None if k == len(old) else k,
                              base_root=base.roots.get(ch) or b""), recs
        return [r.opaque for r in recs], recs

    def _serialize(self, value: Any, base: Known | None, ch: str) -> tuple[list[Rec] | None, Any]:
        """(item records, None) for a list, (None, the value as sent) for anything else."""
        items = self._items_of(value)
        if items is None:
            if _sorted_str_dict(value):
                # key by key: each entry is stored (and deduplicated) on its own, e.g. a graph input
                # {"messages": [m]} shares its entry with the pending write ("messages", [m]) that follows
                return None, {k: self.dumps(v) for k, v in value.items()}
            return None, self.dumps(value)
        items = list(items)
        old = base.lists.get(ch) if base is not None and self.cache_size else None
        if not old:
            return [self._record(x) for x in items], None
        k = common_prefix(items, old)  # the leading items still equal to the parent's
        return old[:k] + [self._record(x) for x in items[k:]], None

    def accept(self, pending: PendingPut) -> RunnableConfig:
        """A put was queued: later puts may use it as their base (its roots follow with the reply)."""
        self.remember(pending.key, pending.known, latest=True)
        thread_id, ns, cid = pending.key
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def stored(self, pending: PendingPut, resp: pb.PutCheckpointResponse) -> pb.PutCheckpointResponse:
        """The sidecar stored a put: record the roots it reported."""
        with self._lock:
            pending.known.roots.update((name, cv.root) for name, cv in resp.checkpoint.channels.items())
        return resp

    def parent_request(self, config: RunnableConfig, channels: Sequence[str]) -> pb.GetCheckpointRequest:
        """Asks for the parent's versions and the roots of ``channels`` (no values)."""
        conf = config["configurable"]
        return get_checkpoint_request(self.namespace, str(conf["thread_id"]), conf["checkpoint_id"],
                                      conf.get("checkpoint_ns", ""), channels, True, None, False)

    def parent_from(self, cp: pb.Checkpoint, channels: Sequence[str]) -> Known:
        """What a parent fetched for ``channels`` (parent_request) tells about them."""
        extra = self.from_structured(from_value(cp.extra)) if cp.HasField("extra") else {}
        return Known(dict(extra.get("channel_versions") or {}), {n: cv.root for n, cv in cp.channels.items()},
                     covered=set(channels), schema=(cp.schema, cp.stored_schema_version or cp.schema_version))

    # ------------------------------------------------------------ writes

    def writes_request(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                       task_path: str) -> pb.PutWritesRequest:
        conf = config["configurable"]
        rows = []
        for i, (ch, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(ch, i)
            rows.append((task_id, idx, ch, self.write_value(value), task_path, idx < 0))
        return put_writes_request(self.namespace, str(conf["thread_id"]), conf["checkpoint_id"], rows,
                                  conf.get("checkpoint_ns", ""), "")

    # ------------------------------------------------------------ reads

    def get_request(self, config: RunnableConfig) -> tuple[pb.GetCheckpointRequest, Known | None]:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        cid = conf.get("checkpoint_id") or ""
        # an older checkpoint's lists are mostly prefixes of the latest ones: those do as known roots too
        k = (self.known(thread_id, ns, cid) if cid else None) or self.latest_known(thread_id, ns)
        known_roots = self._known_roots(k)
        return get_checkpoint_request(self.namespace, thread_id, cid, ns, (), False, known_roots, True), k

    def _known_roots(self, k: Known | None) -> dict[str, bytes] | None:
        if k is None:
            return None
        with self._lock:
            return {ch: k.roots[ch] for ch in k.lists if k.roots.get(ch)}

    def tuple_from(self, cp: pb.Checkpoint, k: Known | None, *, cache: bool, latest: bool) -> CheckpointTuple:
        tup, known = self.decode(cp, k)
        if cache:
            self.remember((cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id), known, latest=latest)
        return tup

    def decode(self, cp: pb.Checkpoint, k: Known | None) -> tuple[CheckpointTuple, Known]:
        """A Checkpoint message (read with ``k``'s roots as known roots) as a CheckpointTuple, and what it
        tells about that checkpoint."""
        values: dict[str, Any] = {}
        lists: dict[str, list[Rec]] = {}
        roots: dict[str, bytes] = {}
        for ch, cv in cp.channels.items():
            roots[ch] = cv.root
            if cv.WhichOneof("content") == "value":
                v = from_value(cv.value)
                if type(v) is not list:
                    values[ch] = self._decode_whole(v)
                    continue
                recs = [self._stored_record(x) for x in v]
            else:
                recs = self._relative(cv, k.lists.get(ch) if k is not None else None, ch)
            lists[ch] = recs
            values[ch] = self._python(recs)
        extra = self.from_structured(from_value(cp.extra)) if cp.HasField("extra") else {}
        stored = (cp.schema, cp.stored_schema_version or cp.schema_version)
        if self.migrations is not None and cp.schema == self.schema and stored[1] != self.schema_version:
            # client-side migrations (agentstate.schemas.Migrations): MigrationError when they cannot
            values = self.migrations.upgrade(values, stored[1], self.schema_version)
        checkpoint = {**extra, "id": cp.checkpoint_id, "channel_values": values}
        checkpoint.setdefault("channel_versions", {})
        checkpoint.setdefault("versions_seen", {})
        metadata = {key: self.from_structured(from_value(v)) for key, v in cp.metadata.items()}
        writes = sorted(cp.pending_writes, key=lambda w: (w.task_path, w.task_id, w.idx))
        pending = [(w.task_id, w.channel, self.load_write(from_value(w.value))) for w in writes]
        conf = {"thread_id": cp.thread_id, "checkpoint_ns": cp.checkpoint_ns}
        parent = ({"configurable": {**conf, "checkpoint_id": cp.parent_checkpoint_id}}
                  if cp.parent_checkpoint_id else None)
        return (CheckpointTuple({"configurable": {**conf, "checkpoint_id": cp.checkpoint_id}}, checkpoint,
                                metadata, parent, pending),
                Known(dict(checkpoint["channel_versions"]), roots, lists, schema=stored))

    def _relative(self, cv: pb.ChannelValue, held: list[Rec] | None, ch: str) -> list[Rec]:
        """The records of a list that came back relative to ``held`` (unchanged, or as a delta)."""
        if held is None:
            raise ValueError(f"channel {ch!r} came back relative to a list the saver does not hold")
        if cv.WhichOneof("content") is None:
            return held
        keep = cv.delta.keep_first if cv.delta.HasField("keep_first") else len(held)
        return held[:keep] + [self._stored_record(from_value(x)) for x in cv.delta.append]

    def list_start(self, config: RunnableConfig | None) -> Known | None:
        """What a listing can send as known roots to begin with: the latest known state of the thread."""
        conf = (config or {}).get("configurable", {})
        thread_id = str(conf["thread_id"]) if conf.get("thread_id") is not None else ""
        ns = conf.get("checkpoint_ns")
        return self.latest_known(thread_id, ns) if thread_id and ns is not None else None

    def list_request(self, config: RunnableConfig | None, filter: Mapping[str, Any] | None, before: str,
                     limit: int, token: str, k: Known | None) -> pb.ListCheckpointsRequest:
        """One page of a listing, values relative to ``k``. Without any known lists the first page holds a
        single checkpoint: its lists then serve as known roots for the rest, so a history of n checkpoints
        does not send (and decode) n copies of the message list."""
        conf = (config or {}).get("configurable", {})
        thread_id = str(conf["thread_id"]) if conf.get("thread_id") is not None else ""
        ns = conf.get("checkpoint_ns")
        known_roots = self._known_roots(k)
        page_size = 100 if known_roots or token else 1
        mfilter = {key: self.structured_or_opaque(v) for key, v in (filter or {}).items()}
        return list_checkpoints_request(self.namespace, thread_id, ns, mfilter, before, limit, page_size, token,
                                        True, True, known_roots)

    @staticmethod
    def list_next(k: Known | None, decoded: Known) -> Known | None:
        """The known state for the next page: keep one with lists, else take the last decoded one's."""
        return k if (k is not None and k.lists) or not decoded.lists else decoded

    def list_plan(self, config: RunnableConfig | None, filter: Mapping[str, Any] | None, before: str,
                  limit: int | None):
        """A listing, written once for the sync and the async saver: yields each ListCheckpointsRequest (send
        its response back in) and each CheckpointTuple to hand out, in order."""
        wanted = (config or {}).get("configurable", {}).get("checkpoint_id") or ""
        left = limit if limit else None
        token = ""
        known = self.list_start(config)
        while True:
            resp = yield self.list_request(config, filter, before, 0 if wanted or not limit else limit, token, known)
            sent, nxt = known, known
            for cp in resp.checkpoints:
                tup, decoded = self.decode(cp, sent)
                nxt = self.list_next(nxt, decoded)
                if wanted and cp.checkpoint_id != wanted:
                    continue
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield tup
            known = nxt
            token = resp.next_page_token
            if not token or (left is not None and left <= 0):
                return

    # ------------------------------------------------------------ delta channel history

    def history_request(self, config: RunnableConfig, channels: Sequence[str]) -> pb.GetChannelHistoryRequest:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        known = {}
        with self._lock:
            for ch in channels:
                seed = self._seeds.get((thread_id, ns, ch))
                if seed is not None:
                    known[ch] = seed[0]
        return channel_history_request(self.namespace, thread_id, channels, conf.get("checkpoint_id") or "", ns,
                                       0, known)

    def history_from(self, req: pb.GetChannelHistoryRequest,
                     resp: pb.GetChannelHistoryResponse) -> dict[str, DeltaChannelHistory]:
        out: dict[str, DeltaChannelHistory] = {}
        for h in resp.channels:
            entry: DeltaChannelHistory = {
                "writes": [(w.task_id, w.channel, self.load_write(from_value(w.value))) for w in h.writes]}
            if h.HasField("seed"):
                key = (req.thread_id, req.checkpoint_ns, h.channel)
                cv = h.seed
                held = None
                if cv.WhichOneof("content") == "value":
                    v = from_value(cv.value)
                    if type(v) is not list:
                        entry["seed"] = self._decode_whole(v)
                        out[h.channel] = entry
                        continue
                    recs = [self._stored_record(x) for x in v]
                else:
                    with self._lock:
                        seed = self._seeds.get(key)
                    held = seed[1] if seed is not None else None
                    recs = self._relative(cv, held, h.channel)
                if recs is not held:
                    self._remember_seed(key, cv.root, recs)
                entry["seed"] = self._python(recs)
            out[h.channel] = entry
        return out

    def _remember_seed(self, key, root: bytes, recs: list[Rec]) -> None:
        if not self.cache_size:
            return
        seal(recs)
        with self._lock:
            self._seeds[key] = (root, recs)
            self._seeds.move_to_end(key)
            while len(self._seeds) > self.cache_size:
                self._seeds.popitem(last=False)

    # ------------------------------------------------------------ prune

    def prune_request(self, thread_ids: Sequence[str], strategy: str, history_channels: Iterable[str]):
        if strategy == "keep_latest":
            return prune_request(self.namespace, thread_ids, 1, None, False, None, sorted(set(history_channels)), "")
        if strategy == "delete":
            return prune_request(self.namespace, thread_ids, None, None, True, None, (), "")
        raise ValueError(f"unknown prune strategy {strategy!r} (use 'keep_latest' or 'delete')")

    @staticmethod
    def delta_channels_of(metadata: Mapping[str, Any]) -> set[str]:
        """DeltaChannels a checkpoint rebuilds from its ancestors: LangGraph counts updates since the last
        snapshot per channel in its metadata (a channel snapshotted at this checkpoint is not listed)."""
        counters = metadata.get("counters_since_delta_snapshot")
        return set(counters) if isinstance(counters, dict) else set()


@contextlib.contextmanager
def _collector_paused():
    """Holds the cyclic garbage collector off while a read makes its new objects (several per message of
    a history). Collections are triggered by counting allocations; a read of 1,600 messages would trigger
    a dozen young collections, each promoting the (live) new objects a generation up, which soon triggers
    full collections of the whole process heap. Paused, the same objects meet one collection when the read
    is done. Nothing is lost: the collector only runs later. If it was off already, it stays off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _same_records(recs: list[Rec], old: list[Rec]) -> int:
    """How many leading records ``recs`` took over from ``old`` (the same record objects). The usual case,
    ``recs`` extending ``old``, is checked at C speed (``map(is_)``)."""
    n = min(len(old), len(recs))
    if n and recs[n - 1] is old[n - 1] and all(map(is_, recs, old)):
        return n
    k = 0
    while k < n and recs[k] is old[k]:
        k += 1
    return k


def _sorted_str_dict(value: Any) -> bool:
    """A plain dict with string keys already in the order the sidecar keeps map keys (by UTF-8 bytes), so
    storing it key by key gives the same dict back, order included."""
    if type(value) is not dict or not value:
        return False
    keys = list(value)
    if not all(type(k) is str for k in keys):
        return False
    try:
        encoded = [k.encode() for k in keys]
    except UnicodeEncodeError:  # lone surrogates: not storable as map keys
        return False
    return all(a < b for a, b in zip(encoded, encoded[1:])) and all(len(k) <= 0xFFFF for k in encoded)


def next_version(current: Any) -> int | str:
    """The next channel version: an int counter (1, 2, 3...).

    LangGraph's SQL savers add a random fraction to versions because they key
    stored values by (channel, version), which two branches of a fork could
    share. Values here are keyed by content and kept relative to the parent,
    so a plain counter is enough, and it keeps every checkpoint's bookkeeping
    small. Versions are only ever compared with each other, so a thread that
    has string versions keeps getting (zero-padded, comparable) strings.
    """
    if current is None:
        return 1
    if isinstance(current, str):
        return f"{int(current.split('.')[0]) + 1:032}"
    return int(current) + 1
