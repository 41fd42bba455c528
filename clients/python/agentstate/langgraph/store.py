"""store: LangGraph's ``BaseStore`` on the sidecar's memory items (docs/memory.md §11).

    from agentstate.langgraph import SidecarStore
    store = SidecarStore("unix:sidecar-data/sidecar.sock", index={"dims": 768, "embed": embed, "fields": ["text"]})
    graph = builder.compile(checkpointer=saver, store=store)     # nodes get it injected, as with InMemoryStore

``batch``/``abatch`` send one ``BatchMemory`` in SNAPSHOT semantics (reads see the state before the batch, the
last write of an item wins) and every ``BaseStore`` method is built on them, as in LangGraph. The adapter
behaves like LangGraph's InMemoryStore (its reference): the same filter evaluation (compiled to
LANGGRAPH_PYTHON trees), search order (insertion), vector scores and ties, the underfull-page rule for items
without vectors, stale vectors kept on re-put, namespace listing; the divergences that remain are listed in
docs/memory.md §11.2. Unlike InMemoryStore it supports TTL (``TTLConfig``; minutes, refresh on read) and returns
fresh objects on every read. The caller's ``embed`` is called by the adapter (the sidecar never calls a model).
"""
from __future__ import annotations

import asyncio
import builtins
import concurrent.futures as cf
import datetime as dt
from collections import defaultdict
from typing import Any, Iterable

from langgraph.store.base import (BaseStore, GetOp, IndexConfig, Item, ListNamespacesOp, Op, PutOp, Result, SearchItem,
                                  SearchOp, TTLConfig, ensure_embeddings, get_text_at_path, tokenize_path)
from langgraph.store.memory import _does_match

from ..client import Client
from ..errors import AgentStateError
from ..memory import search_request, segments
from ..values import encode_into, from_value
from ..v1 import memory_pb2 as mpb
from ._store_filter import compile_filter

_SERVER_LIMIT = 1000  # the most a search or a listing returns at once
_SERVER_OFFSET = 100_000
_VECTOR_WINDOW = 10_000


class _Plan:
    """What one op of a LangGraph batch becomes: the server ops it sends and how its result is read."""

    __slots__ = ("kind", "first", "count", "op", "full")

    def __init__(self, kind: str, first: int, count: int, op: Op, full: bool = False) -> None:
        self.kind, self.first, self.count, self.op, self.full = kind, first, count, op, full


class _StoreBase(BaseStore):
    supports_ttl = True

    def __init__(self, *, namespace: str = "default", index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 vector_space: str | None = None) -> None:
        self.namespace = namespace
        self.ttl_config = ttl
        self.index_config = None
        self.embeddings = None
        if index:
            self.index_config = dict(index)
            self.embeddings = ensure_embeddings(self.index_config.get("embed"))
            self.index_config["__tokenized_fields"] = [(p, tokenize_path(p)) if p != "$" else (p, p)
                                                       for p in (self.index_config.get("fields") or ["$"])]
        dims = (index or {}).get("dims")
        self.vector_space = vector_space or (f"langgraph:{dims}" if dims else "langgraph")

    # ---------------------------------------------------------- building the request

    def _texts(self, ops: list[Op]) -> dict[str, list[tuple[tuple[str, ...], str, str]]]:
        """Texts to embed, as InMemoryStore extracts them: from the last put of each item, deduplicated in
        first-seen order, one entry per (namespace, key, field)."""
        if not (self.index_config and self.embeddings):
            return {}
        last: dict[tuple, PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                last[(op.namespace, op.key)] = op
        to_embed: dict[str, list] = defaultdict(list)
        for op in last.values():
            if op.value is None or op.index is False:
                continue
            paths = self.index_config["__tokenized_fields"] if op.index is None else [
                (ix, tokenize_path(ix)) for ix in op.index]
            for path, field in paths:
                texts = get_text_at_path(op.value, field)
                if len(texts) > 1:
                    for i, text in enumerate(texts):
                        to_embed[text].append((op.namespace, op.key, f"{path}.{i}"))
                elif texts:
                    to_embed[texts[0]].append((op.namespace, op.key, path))
        return to_embed

    @staticmethod
    def _vectors(to_embed: dict, embedded: list) -> tuple[dict[tuple, dict[str, list[float]]], ValueError | None]:
        """(vectors by item and field, the error InMemoryStore raises after the batch's reads and before its
        writes when the counts differ: it pairs one embedding per distinct text with every place a text is
        used, so a text used twice in one batch fails it)."""
        places = [place for where in to_embed.values() for place in where]
        if len(places) != len(embedded):
            return {}, ValueError(f"Number of embeddings ({len(embedded)}) does not match number of indices "
                                  f"({len(places)})")
        out: dict[tuple, dict[str, list[float]]] = defaultdict(dict)
        for (ns, key, field), vec in zip(places, embedded):
            out[(ns, key)][field] = list(vec)
        return out, None

    @staticmethod
    def _reads_only(ops: list[Op]) -> list[Op]:
        return [op for op in ops if not isinstance(op, PutOp)]

    def _queries(self, ops: list[Op]) -> list[str]:
        if not (self.index_config and self.embeddings):
            return []
        return list({op.query for op in ops if isinstance(op, SearchOp) and op.query})

    def _request(self, ops: list[Op], vectors: dict, queries: dict[str, list[float]], no_space: bool = False
                 ) -> tuple[mpb.BatchMemoryRequest, list[_Plan]]:
        req = mpb.BatchMemoryRequest(namespace=self.namespace, semantics=mpb.BATCH_SEMANTICS_SNAPSHOT)
        plans: list[_Plan] = []
        last_put: dict[tuple, int] = {}
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                last_put[(op.namespace, op.key)] = i
        for i, op in enumerate(ops):
            first = len(req.ops)
            if isinstance(op, GetOp):
                req.ops.add().get.CopyFrom(mpb.GetMemoryItemRequest(
                    path=list(op.namespace), key=op.key, allow_missing=True, refresh_ttl=bool(op.refresh_ttl)))
                plans.append(_Plan("get", first, 1, op))
            elif isinstance(op, PutOp):
                if op.value is None:
                    req.ops.add().delete.CopyFrom(mpb.DeleteMemoryItemRequest(
                        path=list(op.namespace), key=op.key, allow_missing=True))
                else:
                    put = req.ops.add().put
                    put.path.extend(op.namespace)
                    put.key = op.key
                    encode_into(dict(op.value), put.value, "value")
                    put.vector_update = mpb.VECTOR_UPDATE_MERGE
                    if last_put[(op.namespace, op.key)] == i:
                        for field, vec in vectors.get((op.namespace, op.key), {}).items():
                            put.vectors[field].values.extend(vec)
                        if put.vectors:
                            put.vector_space = self.vector_space
                    if op.ttl is not None:
                        put.ttl.FromMilliseconds(round(op.ttl * 60_000))
                plans.append(_Plan("put", first, 1, op))
            elif isinstance(op, SearchOp):
                plans.append(self._search_ops(req, op, first, queries, no_space))
            elif isinstance(op, ListNamespacesOp):
                lst = req.ops.add().list_namespaces
                lst.include_empty = True
                lst.limit = _SERVER_LIMIT
                for cond in op.match_conditions or ():
                    target = lst.prefix if cond.match_type == "prefix" else lst.suffix
                    if not len(target):
                        target.extend(segments(cond.path))
                plans.append(_Plan("list", first, 1, op))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return req, plans

    def _search_ops(self, req: mpb.BatchMemoryRequest, op: SearchOp, first: int, queries: dict,
                    no_space: bool) -> _Plan:
        flt = compile_filter(op.filter)
        common = dict(order="insertion", refresh_ttl=bool(op.refresh_ttl))
        if flt is not None:
            common["filter"] = flt
        prefix = list(op.namespace_prefix)
        if op.query and queries:
            vec = queries[op.query]
            # InMemoryStore keeps the scored items at positions offset <= i < offset + limit (so nothing for a
            # negative limit), then fills an underfull page with items without vectors, offset ignored
            lo, hi = max(op.offset, 0), op.offset + op.limit
            if hi - lo > _VECTOR_WINDOW or hi > _VECTOR_WINDOW:
                raise ValueError("agentstate: a vector search returns at most 10000 items (offset + limit)")
            if no_space:
                req.ops.add().search.CopyFrom(search_request("", prefix, limit=_SERVER_LIMIT, **common))
                return _Plan("unscored", first, 1, op)
            req.ops.add().search.CopyFrom(search_request(
                "", prefix, vector=vec, vector_space=self.vector_space, limit=max(hi - lo, 1), offset=lo, **common))
            req.ops.add().search.CopyFrom(search_request(
                "", prefix, vector=vec, vector_space=self.vector_space, unscored_only=True, limit=max(op.limit, 1),
                **common))
            return _Plan("vsearch", first, 2, op)
        limit, offset = op.limit, op.offset
        if limit > 0 and 0 <= offset and limit <= _SERVER_LIMIT and offset <= _SERVER_OFFSET:
            req.ops.add().search.CopyFrom(search_request("", prefix, limit=limit, offset=offset, **common))
            return _Plan("search", first, 1, op)
        if limit == 0 and offset > 0 and offset <= _SERVER_LIMIT:
            # InMemoryStore stops after `offset` matches and returns nothing: evaluate as far, return []
            req.ops.add().search.CopyFrom(search_request("", prefix, limit=offset, **common))
            return _Plan("empty", first, 1, op)
        # everything else (limit 0 at offset 0, negative bounds, beyond the server's window) needs every match:
        # the first 1000 in this batch, the rest page by page after it
        req.ops.add().search.CopyFrom(search_request("", prefix, limit=_SERVER_LIMIT, **common))
        return _Plan("search", first, 1, op, full=True)

    # ---------------------------------------------------------- reading the response

    @staticmethod
    def _time(ts) -> dt.datetime:
        return ts.ToDatetime(tzinfo=dt.timezone.utc)

    def _item(self, m: mpb.MemoryItem, cls=Item, **extra) -> Item:
        t = self._time(m.update_time)
        return cls(value=from_value(m.value), key=m.key, namespace=tuple(m.path), created_at=t, updated_at=t,
                   **extra)

    def _results(self, plans: list[_Plan], results: list[mpb.MemoryOpResult], more) -> list[Result]:
        out: list[Result] = []
        for plan in plans:
            r = results[plan.first]
            op = plan.op
            if plan.kind == "get":
                out.append(self._item(r.get.item) if r.get.HasField("item") else None)
            elif plan.kind == "put":
                out.append(None)
            elif plan.kind == "empty":
                out.append([])
            elif plan.kind == "search":
                items = list(r.search.items)
                if plan.full:
                    if len(items) == _SERVER_LIMIT:
                        items.extend(more(op, len(items)))
                    items = items[op.offset:op.offset + op.limit]
                out.append([self._item(s.item, SearchItem) for s in items])
            elif plan.kind == "vsearch":
                lo, hi = max(op.offset, 0), op.offset + op.limit
                scored = [self._item(s.item, SearchItem, score=s.score) for s in r.search.items] if hi > lo else []
                if len(scored) < op.limit:  # InMemoryStore's underfull page: items without vectors, offset ignored
                    rest = results[plan.first + 1].search.items[:op.limit - len(scored)]
                    scored.extend(self._item(s.item, SearchItem) for s in rest)
                out.append(scored)
            elif plan.kind == "unscored":  # a query in a store that holds no vector yet: every item is scoreless
                items = list(r.search.items)[:op.limit] if op.limit > 0 else []
                out.append([self._item(s.item, SearchItem) for s in items])
            else:
                out.append(self._namespaces(op, [tuple(n.path) for n in r.list_namespaces.namespaces]))
        return out

    @staticmethod
    def _namespaces(op: ListNamespacesOp, found: list[tuple]) -> list[tuple]:
        names = found
        if op.match_conditions:
            names = [ns for ns in names if all(_does_match(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            names = sorted({ns[:op.max_depth] for ns in names})
        else:
            names = sorted(names)
        return names[op.offset:op.offset + op.limit]

    @staticmethod
    def _raise(e: AgentStateError):
        if e.reason == "FILTER_EVALUATION_ERROR":
            cls = getattr(builtins, e.metadata.get("exception", ""), None)
            if not (isinstance(cls, type) and issubclass(cls, Exception)):
                cls = RuntimeError
            raise cls(e.metadata.get("exception_message", e.message)) from None
        raise e


class SidecarStore(_StoreBase):
    """LangGraph ``BaseStore`` on a sidecar (sync; ``abatch`` runs ``batch`` in a worker thread)."""

    def __init__(self, address: str | None = None, *, namespace: str = "default", index: IndexConfig | None = None,
                 ttl: TTLConfig | None = None, vector_space: str | None = None, timeout: float = 30.0,
                 client: Client | None = None) -> None:
        super().__init__(namespace=namespace, index=index, ttl=ttl, vector_space=vector_space)
        if client is None and address is None:
            raise ValueError("SidecarStore needs an address or a client")
        self._own = client is None
        self.client = client if client is not None else Client(address, namespace=namespace, timeout=timeout)

    def close(self) -> None:
        if self._own:
            self.client.close()

    def __enter__(self) -> "SidecarStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _embed_queries(self, queries: list[str]) -> dict[str, list[float]]:
        if not queries:
            return {}
        with cf.ThreadPoolExecutor() as pool:
            futures = {q: pool.submit(self.embeddings.embed_query, q) for q in queries}
            return {q: list(f.result()) for q, f in futures.items()}

    def _more(self, op: SearchOp, have: int) -> list:
        """Matches past the first page of a search that needs all of them (page tokens, INSERTION order)."""
        items: list = []
        flt = compile_filter(op.filter)
        req = search_request(self.namespace, list(op.namespace_prefix), order="insertion",
                             refresh_ttl=bool(op.refresh_ttl), filter=flt, limit=0)
        req.page_size = _SERVER_LIMIT
        resp = self.client._call(self.client.memory.stub.SearchMemoryItems, req, None)
        while True:
            items.extend(resp.items)
            if not resp.next_page_token:
                return items[have:]
            req.page_token = resp.next_page_token
            resp = self.client._call(self.client.memory.stub.SearchMemoryItems, req, None)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        queries = self._embed_queries(self._queries(ops))
        to_embed = self._texts(ops)
        vectors, late = self._vectors(to_embed, self.embeddings.embed_documents(list(to_embed))) if to_embed else ({}, None)
        if late is not None:  # the reads run (their errors come first), the writes never
            self.batch(self._reads_only(ops)) if self._reads_only(ops) else None
            raise late
        resp, plans = None, None
        for no_space in (False, True):
            req, plans = self._request(ops, vectors, queries, no_space)
            if not req.ops:
                return []
            try:
                resp = self.client._call(self.client.memory.stub.BatchMemory, req, None)
                break
            except AgentStateError as e:
                if e.reason == "VECTOR_SPACE_NOT_FOUND" and not no_space:
                    continue  # nothing holds a vector yet (nothing was written): every item is scoreless
                self._raise(e)
        return self._results(plans, list(resp.results), self._more)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))


class AsyncSidecarStore(_StoreBase):
    """LangGraph ``BaseStore`` on a sidecar for asyncio code: ``abatch`` (and every ``a*`` method) on the asyncio
    client; the sync methods use a sync client of their own (not from inside the event loop's thread)."""

    def __init__(self, address: str | None = None, *, namespace: str = "default", index: IndexConfig | None = None,
                 ttl: TTLConfig | None = None, vector_space: str | None = None, timeout: float = 30.0,
                 client=None) -> None:
        super().__init__(namespace=namespace, index=index, ttl=ttl, vector_space=vector_space)
        from ..aio import AsyncClient
        if client is None and address is None:
            raise ValueError("AsyncSidecarStore needs an address or a client")
        self.address = address if address is not None else client.address
        self.timeout = timeout
        self._own = client is None
        self.client = client if client is not None else AsyncClient(address, namespace=namespace, timeout=timeout)
        self._sync: SidecarStore | None = None

    async def aclose(self) -> None:
        if self._own:
            await self.client.close()
        if self._sync is not None:
            self._sync.close()

    async def __aenter__(self) -> "AsyncSidecarStore":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _more(self, op: SearchOp, have: int) -> list:
        items: list = []
        req = search_request(self.namespace, list(op.namespace_prefix), order="insertion",
                             refresh_ttl=bool(op.refresh_ttl), filter=compile_filter(op.filter), limit=0)
        req.page_size = _SERVER_LIMIT
        while True:
            resp = await self.client._call(self.client.memory.stub.SearchMemoryItems, req, None)
            items.extend(resp.items)
            if not resp.next_page_token:
                return items[have:]
            req.page_token = resp.next_page_token

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        queries = self._queries(ops)
        embedded_q = {}
        if queries:
            vecs = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
            embedded_q = {q: list(v) for q, v in zip(queries, vecs)}
        to_embed = self._texts(ops)
        vectors, late = (self._vectors(to_embed, await self.embeddings.aembed_documents(list(to_embed)))
                         if to_embed else ({}, None))
        if late is not None:  # the reads run (their errors come first), the writes never
            if self._reads_only(ops):
                await self.abatch(self._reads_only(ops))
            raise late
        resp, plans = None, None
        for no_space in (False, True):
            req, plans = self._request(ops, vectors, embedded_q, no_space)
            if not req.ops:
                return []
            try:
                resp = await self.client._call(self.client.memory.stub.BatchMemory, req, None)
                break
            except AgentStateError as e:
                if e.reason == "VECTOR_SPACE_NOT_FOUND" and not no_space:
                    continue
                self._raise(e)
        results = list(resp.results)
        extra = {}
        for plan in plans:  # searches that need every match page on after the batch
            if plan.kind == "search" and plan.full and len(results[plan.first].search.items) == _SERVER_LIMIT:
                extra[id(plan.op)] = await self._more(plan.op, _SERVER_LIMIT)
        return self._results(plans, results, lambda op, have: extra.get(id(op), []))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self._sync is None:
            self._sync = SidecarStore(self.address, namespace=self.namespace, index=self.index_config and {
                k: v for k, v in self.index_config.items() if not k.startswith("__")}, ttl=self.ttl_config,
                vector_space=self.vector_space, timeout=self.timeout)
        return self._sync.batch(ops)
