"""memory: the MemoryService facet of the client (``client.memory``) — long-term memory items.

    c.memory.put(("users", "u-42", "prefs"), "drink", {"text": "likes tea"}, origin="explicit",
                 vectors={"text": embed("likes tea")}, ttl_minutes=60 * 24)
    item = c.memory.get(("users", "u-42", "prefs"), "drink")          # MemoryItem or None
    c.memory.value(item)                                              # {"text": "likes tea"}
    hits = c.memory.search(("users", "u-42"), filter={"text": {"$ne": ""}}, vector=embed("tea?"), limit=5)
    for ns in c.memory.list_namespaces(prefix=("users", "*"), max_depth=2): ...

``AsyncClient.memory`` (:class:`AsyncMemory`) has the same calls as coroutines (``list_namespaces`` and
``history`` async iterators). Filters are the expression maps of docs/memory.md §3 (``{"a.b": 1, "n": {"$gt":
2}, "$or": [...]}``) or a ``memory_pb2.MemoryFilter`` tree. Vectors are lists of floats (sent as float32).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ._facet import AsyncFacet, Call, SyncFacet, listing, pages, unary
from .values import encode_into, from_value
from .v1 import memory_pb2 as mpb, memory_pb2_grpc

ORIGINS = {None: 0, "": 0, "explicit": mpb.MEMORY_ORIGIN_EXPLICIT, "inferred": mpb.MEMORY_ORIGIN_INFERRED}
ORDERS = {None: 0, "updated": mpb.MEMORY_ORDER_UPDATED_DESC, "insertion": mpb.MEMORY_ORDER_INSERTION,
          "path_key": mpb.MEMORY_ORDER_PATH_KEY}
SEMANTICS = {"sequential": mpb.BATCH_SEMANTICS_SEQUENTIAL, "snapshot": mpb.BATCH_SEMANTICS_SNAPSHOT}


def value(item: mpb.MemoryItem) -> Any:
    """The decoded value of a MemoryItem (None when the read omitted it)."""
    return from_value(item.value) if item.HasField("value") else None


def memory_filter(flt: Any) -> mpb.MemoryFilter:
    """A MemoryFilter from an expression map (or a MemoryFilter, returned as it is)."""
    if isinstance(flt, mpb.MemoryFilter):
        return flt
    out = mpb.MemoryFilter()
    encode_into(flt, out.expression, "filter")
    return out


def segments(pattern: Sequence[str] | None) -> list[mpb.PathSegment]:
    """Namespace pattern segments: ``"*"`` is a wildcard."""
    return [mpb.PathSegment(any=True) if s == "*" else mpb.PathSegment(label=s) for s in (pattern or ())]


def put_request(namespace: str, path: Sequence[str], key: str, val: Mapping, *,
                vectors: Mapping[str, Sequence[float]] | None = None, vector_space: str = "",
                merge_vectors: bool = False, ttl_minutes: float | None = None, provenance: Mapping | None = None,
                origin: str | None = None, actor: str = "", etag: str = "", must_not_exist: bool = False,
                request_id: str = "", schema: str = "", schema_version: int = 0) -> mpb.PutMemoryItemRequest:
    req = mpb.PutMemoryItemRequest(namespace=namespace, path=list(path), key=key, vector_space=vector_space,
                                   origin=ORIGINS[origin], actor=actor, etag=etag, must_not_exist=must_not_exist,
                                   request_id=request_id, schema=schema, schema_version=schema_version)
    encode_into(val, req.value, "value")
    for name, vec in (vectors or {}).items():
        req.vectors[name].values.extend(vec)
    if vectors is not None or merge_vectors:
        req.vector_update = mpb.VECTOR_UPDATE_MERGE if merge_vectors else mpb.VECTOR_UPDATE_REPLACE
    if ttl_minutes is not None:
        req.ttl.FromMilliseconds(round(ttl_minutes * 60_000))
    if provenance:
        req.provenance.CopyFrom(mpb.MemoryProvenance(**provenance))
    return req


def search_request(namespace: str, prefix: Sequence[str] = (), *, filter: Any = None,
                   vector: Sequence[float] | None = None, vector_space: str = "", fields: Iterable[str] = (),
                   unscored_only: bool = False, order: str | None = None, limit: int = 10, offset: int = 0,
                   refresh_ttl: bool | None = None, omit_values: bool = False,
                   include_vectors: bool = False, read_schema_version: int = 0) -> mpb.SearchMemoryItemsRequest:
    req = mpb.SearchMemoryItemsRequest(namespace=namespace, path_prefix=list(prefix), order=ORDERS[order],
                                       limit=limit, offset=offset, omit_values=omit_values,
                                       include_vectors=include_vectors, read_schema_version=read_schema_version)
    if filter is not None:
        req.filter.CopyFrom(memory_filter(filter))
    if vector is not None:
        req.vector.vector.values.extend(vector)
        req.vector.space = vector_space
        req.vector.fields.extend(fields)
        if unscored_only:
            req.vector.unscored = mpb.UNSCORED_ONLY
    if refresh_ttl is not None:
        req.refresh_ttl = refresh_ttl
    return req


def memory_query(prefix: Sequence[str] = (), *, filter: Any = None, vector: Sequence[float] | None = None,
                 vector_space: str = "", fields: Iterable[str] = (), order: str | None = None,
                 limit: int = 10) -> mpb.MemoryQuery:
    """A MemoryQuery for GetContext (``client.conversations.get_context(..., memory_query=...)``): the hits
    join the knowledge layer. The arguments mean what they mean in :func:`search_request`."""
    s = search_request("", prefix, filter=filter, vector=vector, vector_space=vector_space, fields=fields,
                       order=order, limit=limit)
    q = mpb.MemoryQuery(path_prefix=s.path_prefix, order=s.order, limit=s.limit)
    if s.HasField("filter"):
        q.filter.CopyFrom(s.filter)
    if s.HasField("vector"):
        q.vector.CopyFrom(s.vector)
    return q


class MemoryCalls:
    """The MemoryService calls, written once (see :mod:`agentstate._facet`) for :class:`Memory` and
    :class:`AsyncMemory`."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = memory_pb2_grpc.MemoryServiceStub(client.channel)

    value = staticmethod(value)

    @unary
    def put(self, path: Sequence[str], key: str, val: Mapping, *, timeout: float | None = None,
            **options) -> mpb.PutMemoryItemResponse:
        """Create or replace an item (options: vectors, vector_space, merge_vectors, ttl_minutes, provenance,
        origin ("explicit"/"inferred"), actor, etag, must_not_exist, request_id, schema and schema_version: a
        registered schema the value follows, agentstate.schemas)."""
        req = put_request(self.client.namespace, path, key, val, **options)
        return (yield Call(self.stub.PutMemoryItem, req, timeout))

    @unary
    def get(self, path: Sequence[str], key: str, *, refresh_ttl: bool | None = None, include_vectors: bool = False,
            timeout: float | None = None, read_schema_version: int = 0) -> mpb.MemoryItem | None:
        """The live item, or None (``read_schema_version``: the value migrated to that version of its schema)."""
        req = mpb.GetMemoryItemRequest(namespace=self.client.namespace, path=list(path), key=key, allow_missing=True,
                                       include_vectors=include_vectors, read_schema_version=read_schema_version)
        if refresh_ttl is not None:
            req.refresh_ttl = refresh_ttl
        resp = yield Call(self.stub.GetMemoryItem, req, timeout)
        return resp.item if resp.HasField("item") else None

    @unary
    def delete(self, path: Sequence[str], key: str, *, purge: bool = False, allow_missing: bool = True,
               etag: str = "", actor: str = "", timeout: float | None = None) -> mpb.DeleteMemoryItemResponse:
        req = mpb.DeleteMemoryItemRequest(namespace=self.client.namespace, path=list(path), key=key, purge=purge,
                                          allow_missing=allow_missing, etag=etag, actor=actor)
        return (yield Call(self.stub.DeleteMemoryItem, req, timeout))

    @unary
    def search(self, prefix: Sequence[str] = (), *, timeout: float | None = None,
               **options) -> list[mpb.ScoredMemoryItem]:
        """Items under ``prefix`` (options: filter, vector, vector_space, fields, unscored_only, order
        ("updated", "insertion", "path_key"), limit, offset, refresh_ttl, omit_values, include_vectors,
        read_schema_version: each hit's value migrated to that version of its schema)."""
        req = search_request(self.client.namespace, prefix, **options)
        return list((yield Call(self.stub.SearchMemoryItems, req, timeout)).items)

    @unary
    def batch(self, ops: Iterable[mpb.MemoryOp], *, semantics: str = "sequential", request_id: str = "",
              timeout: float | None = None) -> list[mpb.MemoryOpResult]:
        """Run raw MemoryOps in one transaction ("sequential" or LangGraph's "snapshot" semantics)."""
        req = mpb.BatchMemoryRequest(namespace=self.client.namespace, ops=list(ops), semantics=SEMANTICS[semantics],
                                     request_id=request_id)
        return list((yield Call(self.stub.BatchMemory, req, timeout)).results)

    @listing
    def list_namespaces(self, *, prefix: Sequence[str] | None = None, suffix: Sequence[str] | None = None,
                        max_depth: int | None = None, include_empty: bool = False, page_size: int = 0,
                        timeout: float | None = None):
        """The paths holding live items (tuples), label by label in UTF-8 order; ``"*"`` matches any label."""
        def build(token: str) -> mpb.ListMemoryNamespacesRequest:
            req = mpb.ListMemoryNamespacesRequest(namespace=self.client.namespace, prefix=segments(prefix),
                                                  suffix=segments(suffix), include_empty=include_empty,
                                                  page_size=page_size or 1000, page_token=token)
            if max_depth is not None:
                req.max_depth = max_depth
            return req
        for ns in (yield from _collect(pages(self.stub.ListMemoryNamespaces, build, "namespaces", timeout))):
            yield tuple(ns.path)

    @listing
    def history(self, path: Sequence[str], key: str, *, include_values: bool = False, page_size: int = 0,
                timeout: float | None = None, read_schema_version: int = 0):
        """The item's revisions, newest first (MemoryItemRevision; ``read_schema_version`` with
        ``include_values``: each put's value migrated to that version of its schema)."""
        return pages(self.stub.GetMemoryItemHistory, lambda token: mpb.GetMemoryItemHistoryRequest(
            namespace=self.client.namespace, path=list(path), key=key, include_values=include_values,
            page_size=page_size, page_token=token, read_schema_version=read_schema_version), "revisions", timeout)

    @unary
    def sweep(self, *, all_namespaces: bool = False, timeout: float | None = None) -> int:
        """Delete expired items now; how many."""
        req = mpb.SweepExpiredMemoryItemsRequest(namespace="" if all_namespaces else self.client.namespace)
        return (yield Call(self.stub.SweepExpiredMemoryItems, req, timeout)).expired_items


def _collect(plan):
    """Run a listing plan inside another one: its Calls pass through, its items are gathered."""
    items = []
    reply = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration:
            return items
        if isinstance(step, Call):
            reply = yield step
        else:
            items.append(step)
            reply = None


class Memory(MemoryCalls, SyncFacet):
    """MemoryService calls (``client.memory``)."""


class AsyncMemory(MemoryCalls, AsyncFacet):
    """MemoryService calls of the asyncio client (``async_client.memory``): coroutines, ``list_namespaces`` and
    ``history`` async iterators."""
