"""Memory items (MemoryService, docs/memory.md): put/get/delete/purge, etags, history, batches, namespaces,
search order and paging, filters through the API, TTL (with an injectable clock below the API) and bad input
(code, reason, field, nothing changed).

API tests run against one sidecar of this module (raw MemoryService stubs); the TTL and sweeper tests run the
api functions in-process on a Store with a clock of their own.
"""
from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from conftest import expect_error

from agentstate import Client, codec
from agentstate.v1 import memory_pb2 as pb
from agentstate.v1 import values_pb2
from sidecar.api import memory as api
from sidecar.state import memory as mem
from sidecar.state import memory_filters as mf
from sidecar.storage.store import Store

CODES = grpc.StatusCode


def V(x) -> values_pb2.Value:
    return values_pb2.Value(msgpack=codec.encode(x))


def value_of(item: pb.MemoryItem):
    v = item.value
    kind = v.WhichOneof("kind")
    if kind == "msgpack":
        return codec.decode(v.msgpack)
    assert kind == "map", kind
    return {k: codec.decode(e.msgpack) for k, e in v.map.entries.items()}


class Mem:
    """Raw MemoryService requests in one tenant namespace, sent as the Python client sends them (its deadline
    and its retries of what is safe to repeat, e.g. after OVERLOADED); failures as AgentStateError."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client
        self.ns = namespace

    def call(self, method: str, **fields):
        request = getattr(pb, f"{method}Request")(**fields)
        if "namespace" not in fields:
            request.namespace = self.ns
        return self.client._call(getattr(self.client.memory.stub, method), request, 20)

    def put(self, path, key, value, **kw):
        return self.call("PutMemoryItem", path=list(path), key=key, value=V(value), **kw)

    def get(self, path, key, **kw):
        return self.call("GetMemoryItem", path=list(path), key=key, **kw)

    def delete(self, path, key, **kw):
        return self.call("DeleteMemoryItem", path=list(path), key=key, **kw)

    def search(self, prefix=(), **kw):
        return self.call("SearchMemoryItems", path_prefix=list(prefix), **kw)

    def keys(self, prefix=(), **kw):
        return [(tuple(s.item.path), s.item.key) for s in self.search(prefix, **kw).items]

    def expr(self, expression, prefix=(), **kw):
        return self.keys(prefix, filter=pb.MemoryFilter(expression=V(expression)), **kw)

    def namespaces(self, prefix=(), suffix=(), **kw):
        def seg(x):
            return pb.PathSegment(any=True) if x == "*" else pb.PathSegment(label=x)
        resp = self.call("ListMemoryNamespaces", prefix=[seg(x) for x in prefix], suffix=[seg(x) for x in suffix],
                         **kw)
        return [tuple(n.path) for n in resp.namespaces], resp.next_page_token

    def history(self, path, key, **kw):
        return self.call("GetMemoryItemHistory", path=list(path), key=key, **kw).revisions

    def state(self) -> tuple:
        """Everything a failed call must leave alone in the namespace."""
        paths, _ = self.namespaces(include_empty=True, limit=1000)
        items = [s.SerializeToString(deterministic=True)
                 for s in self.search(order=pb.MEMORY_ORDER_PATH_KEY, limit=1000, refresh_ttl=False).items]
        hist = {}
        for s in self.search(order=pb.MEMORY_ORDER_PATH_KEY, limit=1000, refresh_ttl=False).items:
            hist[(tuple(s.item.path), s.item.key)] = [
                r.SerializeToString(deterministic=True) for r in self.history(s.item.path, s.item.key)]
        return paths, items, hist


@pytest.fixture(scope="module")
def client(module_sidecar):
    with Client(module_sidecar.address) as c:
        yield c


@pytest.fixture
def m(client):
    return Mem(client, f"mem-{uuid.uuid4().hex[:12]}")


# ---------------------------------------------------------------- the enums below the api

def test_state_enums_match_the_proto():
    assert (mem.ORIGIN_EXPLICIT, mem.ORIGIN_INFERRED) == (pb.MEMORY_ORIGIN_EXPLICIT, pb.MEMORY_ORIGIN_INFERRED)
    assert (mem.VECTOR_REPLACE, mem.VECTOR_MERGE) == (pb.VECTOR_UPDATE_REPLACE, pb.VECTOR_UPDATE_MERGE)
    assert (mem.REV_PUT, mem.REV_DELETE, mem.REV_EXPIRE) == (pb.REVISION_KIND_PUT, pb.REVISION_KIND_DELETE,
                                                             pb.REVISION_KIND_EXPIRE)
    assert (mem.ORDER_UPDATED_DESC, mem.ORDER_INSERTION, mem.ORDER_PATH_KEY) == (
        pb.MEMORY_ORDER_UPDATED_DESC, pb.MEMORY_ORDER_INSERTION, pb.MEMORY_ORDER_PATH_KEY)
    assert (mem.UNSCORED_OMIT, mem.UNSCORED_ONLY) == (pb.UNSCORED_OMIT, pb.UNSCORED_ONLY)
    assert (mem.SEQUENTIAL, mem.SNAPSHOT) == (pb.BATCH_SEMANTICS_SEQUENTIAL, pb.BATCH_SEMANTICS_SNAPSHOT)
    for name in ("EQ", "NE", "GT", "GTE", "LT", "LTE", "IN", "NIN", "EXISTS", "IS_TYPE", "LENGTH_EQ", "FAIL"):
        assert getattr(mf, name) == getattr(pb, f"FILTER_OPERATOR_{name}"), name
    for name in ("NULL", "BOOL", "NUMBER", "STRING", "BYTES", "LIST", "MAP", "DATETIME", "UUID", "SET", "OPAQUE"):
        assert getattr(mf, f"T_{name}") == getattr(pb, f"MEMORY_VALUE_TYPE_{name}"), name
    for name in ("AGENTSTATE", "LANGGRAPH_PYTHON", "LANGGRAPH_JS"):
        assert getattr(mf, name) == getattr(pb, f"COMPARISON_MODE_{name}"), name


# ---------------------------------------------------------------- put, get, delete, history

def test_put_get_round_trip(m):
    value = {"text": "likes tea", "n": 3, "nested": {"l": [1, 2.5, None, True]}, "when": "x"}
    prov = pb.MemoryProvenance(thread_id="t-1", run_id="r-1", conversation_seq=7, step_id="s", checkpoint_id="c")
    r = m.put(("users", "u-42", "prefs"), "drink", value, provenance=prov, origin=pb.MEMORY_ORIGIN_EXPLICIT,
              actor="user:42")
    assert r.created and r.item.version == 1 and r.item.etag
    assert not r.item.HasField("value")  # the put's answer carries no value
    got = m.get(("users", "u-42", "prefs"), "drink").item
    assert value_of(got) == value
    assert (got.namespace, list(got.path), got.key) == (m.ns, ["users", "u-42", "prefs"], "drink")
    assert got.provenance == prov and got.origin == pb.MEMORY_ORIGIN_EXPLICIT and got.actor == "user:42"
    assert got.etag == r.item.etag and got.create_time == got.update_time
    assert not got.HasField("ttl") and not got.HasField("expire_time")
    # a re-put keeps create_time, moves update_time, etag and version
    r2 = m.put(("users", "u-42", "prefs"), "drink", {"text": "likes coffee"}, origin=pb.MEMORY_ORIGIN_INFERRED)
    assert not r2.created and r2.item.version == 2 and r2.item.etag != r.item.etag
    got2 = m.get(("users", "u-42", "prefs"), "drink").item
    assert got2.create_time == got.create_time
    assert got2.update_time.ToNanoseconds() >= got.update_time.ToNanoseconds()
    assert value_of(got2) == {"text": "likes coffee"} and got2.origin == pb.MEMORY_ORIGIN_INFERRED
    assert not got2.HasField("provenance") and got2.actor == ""


def test_keys_and_paths_are_exact(m):
    m.put((), "", {"root": True})  # an empty path and an empty key are allowed (raw LangGraph ops make them)
    m.put(("a",), "k\x00nul", {"v": 1})
    m.put(("a", "b"), "k", {"v": 2})
    m.put(("a-b",), "k", {"v": 3})
    assert value_of(m.get((), "").item) == {"root": True}
    assert value_of(m.get(("a",), "k\x00nul").item) == {"v": 1}
    with expect_error(CODES.NOT_FOUND, "MEMORY_ITEM_NOT_FOUND") as info:
        m.get(("a",), "k")
    assert info.value.metadata["key"] == "k" and info.value.metadata["path"] == "a"
    assert m.get(("a",), "k", allow_missing=True).HasField("item") is False
    assert m.keys(("a",), order=pb.MEMORY_ORDER_PATH_KEY) == [(("a",), "k\x00nul"), (("a", "b"), "k")]


def test_etag_and_must_not_exist(m):
    r = m.put(("p",), "k", {"v": 1})
    with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH", field="etag", current_etag=r.item.etag):
        m.put(("p",), "k", {"v": 2}, etag="1-99")
    with expect_error(CODES.ALREADY_EXISTS, "MEMORY_ITEM_ALREADY_EXISTS", field="must_not_exist"):
        m.put(("p",), "k", {"v": 2}, must_not_exist=True)
    with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH", current_etag=""):
        m.put(("p",), "other", {"v": 2}, etag=r.item.etag)  # a missing item has no etag
    r2 = m.put(("p",), "k", {"v": 2}, etag=r.item.etag)
    assert r2.item.version == 2
    with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH"):
        m.delete(("p",), "k", etag=r.item.etag)
    assert m.delete(("p",), "k", etag=r2.item.etag).deleted
    assert m.put(("p",), "new", {"v": 1}, must_not_exist=True).created


def test_delete_history_and_purge(m):
    m.put(("h",), "k", {"v": 1}, actor="a1")
    m.put(("h",), "k", {"v": 2}, actor="a2")
    d = m.delete(("h",), "k", actor="a3", provenance=pb.MemoryProvenance(thread_id="t"))
    assert d.deleted and d.purged_revisions == 0
    with expect_error(CODES.NOT_FOUND, "MEMORY_ITEM_NOT_FOUND"):
        m.get(("h",), "k")
    with expect_error(CODES.NOT_FOUND, "MEMORY_ITEM_NOT_FOUND"):
        m.delete(("h",), "k")
    assert not m.delete(("h",), "k", allow_missing=True).deleted
    revs = m.history(("h",), "k", include_values=True)
    assert [(r.version, r.kind, r.actor) for r in revs] == [
        (3, pb.REVISION_KIND_DELETE, "a3"), (2, pb.REVISION_KIND_PUT, "a2"), (1, pb.REVISION_KIND_PUT, "a1")]
    assert value_of(revs[1]) == {"v": 2} and value_of(revs[2]) == {"v": 1}
    assert revs[0].provenance.thread_id == "t" and len(revs[1].value_root) == 32
    # re-created: the version keeps counting, etags never repeat, create_time is new
    r = m.put(("h",), "k", {"v": 3})
    assert r.created and r.item.version == 4
    etags = {rev.etag for rev in m.history(("h",), "k")}
    assert len(etags) == 4
    # history pages newest first
    first = m.call("GetMemoryItemHistory", path=["h"], key="k", page_size=3)
    rest = m.call("GetMemoryItemHistory", path=["h"], key="k", page_size=3, page_token=first.next_page_token)
    assert [r.version for r in first.revisions] == [4, 3, 2] and [r.version for r in rest.revisions] == [1]
    assert not rest.next_page_token
    # purge deletes the item and its history; then history is gone; purge of a gone item with history works
    p = m.delete(("h",), "k", purge=True)
    assert p.deleted and p.purged_revisions == 5
    with expect_error(CODES.NOT_FOUND, "MEMORY_ITEM_NOT_FOUND"):
        m.history(("h",), "k")
    m.put(("h",), "k2", {"v": 1})
    m.delete(("h",), "k2")
    p = m.delete(("h",), "k2", purge=True)
    assert not p.deleted and p.purged_revisions == 2
    with expect_error(CODES.NOT_FOUND, "MEMORY_ITEM_NOT_FOUND"):
        m.delete(("h",), "k2", purge=True)


def test_request_id_answers_once(m):
    a = m.put(("r",), "k", {"v": 1}, request_id="req-1")
    b = m.put(("r",), "k", {"v": 1}, request_id="req-1")
    assert a == b
    assert len(m.history(("r",), "k")) == 1
    with expect_error(CODES.INVALID_ARGUMENT, "REQUEST_ID_REUSED"):
        m.put(("r",), "k", {"v": 2}, request_id="req-1")


# ---------------------------------------------------------------- filters through the API (docs/memory.md §2.2)

PROBE_ITEMS = {
    "i1": {"n": 1, "s": "apple", "b": True, "nested": {"k": 1, "j": 2}, "l": [1, 2], "sn": "10"},
    "i10": {"n": 10, "s": "banana", "b": False, "nested": {"k": 2}, "l": [1], "sn": "9"},
    "f2": {"n": 2.0, "s": "cherry", "nested": {"k": 1}},
    "s3": {"n": "3", "s": "Date"},
    "none": {"n": None},
    "true": {"n": True},
    "empty": {},
    "dotted": {"a.b": 5, "a": {"b": 7}},
}


@pytest.fixture
def probe(m):
    for key, value in PROBE_ITEMS.items():
        m.put(("probe",), key, value)
    return m


@pytest.mark.parametrize("expression, expected", [
    ({"n": 1}, {"i1"}),
    ({"n": None}, {"dotted", "empty", "none"}),
    ({"nested.k": 1}, {"f2", "i1"}),
    ({"a.b": 5}, set()),
    ({"a.b": 7}, {"dotted"}),
    ({"nested": {"k": 1}}, {"f2"}),
    ({"n": {"$ne": 1}}, set(PROBE_ITEMS) - {"i1"}),
    ({"n": {"$gt": 2}}, {"i10"}),
    ({"n": {"$lt": 3}}, {"f2", "i1"}),
    ({"n": {"$gte": 2, "$lte": 10}}, {"f2", "i10"}),
    ({"sn": {"$gt": 5}}, set()),
    ({"s": {"$gt": "b"}}, {"f2", "i10"}),
    ({"n": {"$in": [1, 10]}}, {"i1", "i10"}),
    ({"n": {"$nin": [1, 10]}}, set(PROBE_ITEMS) - {"i1", "i10"}),
    ({"$or": [{"n": 1}, {"s": "Date"}]}, {"i1", "s3"}),
    ({"$and": [{"nested.k": 1}, {"b": True}]}, {"i1"}),
    ({"l": [1, 2]}, {"i1"}),
    ({"l.0": 1}, {"i1", "i10"}),
    ({"l.1": {"$gte": 2}}, {"i1"}),
    ({"b": 1}, set()),
    ({"n": True}, {"true"}),
    ({}, set(PROBE_ITEMS)),
])
def test_expression_filters(probe, expression, expected):
    assert {k for _, k in probe.expr(expression, limit=100)} == expected


@pytest.mark.parametrize("expression, field", [
    ({"$not": [{"n": 1}]}, "filter.expression['$not']"),
    ({"n": {"$gt": 1, "x": 2}}, "filter.expression['n']"),
    ({"n": {"$regex": "a"}}, "filter.expression['n']['$regex']"),
    ({"n": {"$in": 1}}, "filter.expression['n']['$in']"),
    ({"$or": {"n": 1}}, "filter.expression['$or']"),
    ({"$and": [1]}, "filter.expression['$and'][0]"),
    ([1], "filter.expression"),
])
def test_malformed_expressions(probe, expression, field):
    before = probe.state()
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FILTER", field=field):
        probe.expr(expression)
    assert probe.state() == before


NO_VALUE = object()


def cond(path, op, value=NO_VALUE, mode=0):
    segs = [pb.FieldPathSegment(index=s) if isinstance(s, int) else pb.FieldPathSegment(key=s) for s in path]
    c = pb.FieldCondition(path=pb.FieldPath(segments=segs), op=op, mode=mode)
    if value is not NO_VALUE:
        c.value.CopyFrom(V(value))
    return pb.MemoryFilter(field=c)


def test_typed_tree_filters(probe):
    def keys(f):
        return {k for _, k in probe.keys(filter=f, limit=100)}

    assert keys(cond(["a.b"], pb.FILTER_OPERATOR_EQ, 5)) == {"dotted"}  # a literal dotted key
    assert keys(cond(["nested", "k"], pb.FILTER_OPERATOR_EXISTS)) == {"i1", "i10", "f2"}
    assert keys(cond(["n"], pb.FILTER_OPERATOR_EXISTS)) == set(PROBE_ITEMS) - {"empty", "dotted"}
    assert keys(cond(["n"], pb.FILTER_OPERATOR_IS_TYPE, pb.MEMORY_VALUE_TYPE_STRING)) == {"s3"}
    assert keys(cond(["l"], pb.FILTER_OPERATOR_LENGTH_EQ, 1)) == {"i10"}
    assert keys(cond(["l", 1], pb.FILTER_OPERATOR_EQ, 2)) == {"i1"}
    assert keys(pb.MemoryFilter(negate=cond(["n"], pb.FILTER_OPERATOR_EXISTS))) == {"empty", "dotted"}
    both = pb.MemoryFilter(all=pb.MemoryFilterList(filters=[cond(["n"], pb.FILTER_OPERATOR_GTE, 1),
                                                            cond(["s"], pb.FILTER_OPERATOR_LT, "c")]))
    assert keys(both) == {"i1", "i10"}
    either = pb.MemoryFilter(any=pb.MemoryFilterList(filters=[cond(["b"], pb.FILTER_OPERATOR_EQ, False),
                                                              cond(["n"], pb.FILTER_OPERATOR_EQ, None)]))
    assert keys(either) == {"i10", "none", "empty", "dotted"}
    assert keys(pb.MemoryFilter(any=pb.MemoryFilterList())) == set()
    assert keys(pb.MemoryFilter(all=pb.MemoryFilterList())) == set(PROBE_ITEMS)
    # LANGGRAPH_PYTHON mode: True == 1, missing reads as None, float() errors surface with InMemoryStore's text
    py = pb.COMPARISON_MODE_LANGGRAPH_PYTHON
    assert keys(cond(["n"], pb.FILTER_OPERATOR_EQ, 1, py)) == {"i1", "true"}
    with expect_error(CODES.INVALID_ARGUMENT, "FILTER_EVALUATION_ERROR", exception="TypeError") as info:
        probe.keys(filter=cond(["n"], pb.FILTER_OPERATOR_GT, 2, py), order=pb.MEMORY_ORDER_INSERTION, limit=100)
    assert info.value.metadata["exception_message"] == (
        "float() argument must be a string or a real number, not 'NoneType'")
    assert info.value.metadata["key"] == "none"  # the first item in insertion order that fails
    fail = pb.MemoryFilter(field=pb.FieldCondition(op=pb.FILTER_OPERATOR_FAIL, mode=py,
                                                   value=V({"exception": "ValueError",
                                                            "message": "Unsupported operator: $in"})))
    with expect_error(CODES.INVALID_ARGUMENT, "FILTER_EVALUATION_ERROR", exception="ValueError",
                      exception_message="Unsupported operator: $in"):
        probe.keys(filter=fail)


@pytest.mark.parametrize("flt, field", [
    (pb.MemoryFilter(), "filter"),
    (pb.MemoryFilter(field=pb.FieldCondition(op=99)), "filter.field.op"),
    (pb.MemoryFilter(field=pb.FieldCondition(op=pb.FILTER_OPERATOR_EQ)), "filter.field.value"),
    (cond(["n"], pb.FILTER_OPERATOR_IN, 1), "filter.field.value"),
    (cond(["n"], pb.FILTER_OPERATOR_IS_TYPE, "x"), "filter.field.value"),
    (cond(["n"], pb.FILTER_OPERATOR_EQ, 1, mode=9), "filter.field.mode"),
    (pb.MemoryFilter(all=pb.MemoryFilterList(filters=[cond(["n"], 1, 1), pb.MemoryFilter()])),
     "filter.all.filters[1]"),
    (pb.MemoryFilter(field=pb.FieldCondition(path=pb.FieldPath(segments=[pb.FieldPathSegment()]), op=1,
                                             value=V(1))), "filter.field.path.segments[0]"),
])
def test_malformed_trees(probe, flt, field):
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FILTER", field=field):
        probe.keys(filter=flt)


def test_deep_and_large_filters_are_refused(probe):
    f = cond(["n"], pb.FILTER_OPERATOR_EXISTS)
    for _ in range(40):
        f = pb.MemoryFilter(negate=f)
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FILTER"):
        probe.keys(filter=f)
    wide = pb.MemoryFilter(any=pb.MemoryFilterList(filters=[cond(["n"], 1, i) for i in range(1001)]))
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FILTER", field="filter.any.filters[999]"):
        probe.keys(filter=wide)


# ---------------------------------------------------------------- orders and paging

def test_orders(m):
    m.put(("b",), "x", {"i": 0})
    m.put(("a",), "z", {"i": 1})
    m.put(("a",), "y", {"i": 2})
    m.put(("b",), "x", {"i": 3})  # a re-put keeps its INSERTION place, moves to the front of UPDATED_DESC
    assert m.keys() == [(("b",), "x"), (("a",), "y"), (("a",), "z")]
    assert m.keys(order=pb.MEMORY_ORDER_INSERTION) == [(("b",), "x"), (("a",), "z"), (("a",), "y")]
    assert m.keys(order=pb.MEMORY_ORDER_PATH_KEY) == [(("a",), "y"), (("a",), "z"), (("b",), "x")]
    m.delete(("a",), "z")
    m.put(("a",), "z", {"i": 4})  # re-created: last in INSERTION order
    assert m.keys(order=pb.MEMORY_ORDER_INSERTION) == [(("b",), "x"), (("a",), "y"), (("a",), "z")]
    assert m.keys(limit=1, offset=1) == [(("b",), "x")]
    assert m.keys(offset=5) == []
    assert [value_of(s.item) for s in m.search(("a",)).items] == [{"i": 4}, {"i": 2}]
    assert all(not s.item.HasField("value") for s in m.search(omit_values=True).items)


@pytest.mark.parametrize("order", [pb.MEMORY_ORDER_UPDATED_DESC, pb.MEMORY_ORDER_INSERTION, pb.MEMORY_ORDER_PATH_KEY])
def test_page_tokens_visit_every_match_once(m, order):
    reqs = [pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["pg", f"p{i % 3}"], key=f"k{i:02}", value=V({"i": i})))
            for i in range(23)]
    m.call("BatchMemory", ops=reqs)  # one batch: all share one update time, so ties are ordered by path and key
    m.put(("pg", "p2"), "k05", {"i": 5, "again": True})
    everything = m.keys(("pg",), order=order, limit=100)
    assert len(everything) == 23
    seen, token = [], ""
    while True:
        resp = m.search(("pg",), order=order, page_size=4, page_token=token)
        seen.extend((tuple(s.item.path), s.item.key) for s in resp.items)
        token = resp.next_page_token
        if not token:
            break
    assert seen == everything
    if order == pb.MEMORY_ORDER_UPDATED_DESC:
        assert everything[0] == (("pg", "p2"), "k05")
        assert everything[1:] == sorted(everything[1:])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="page_token"):
        m.search(("pg", "p0"), order=order, page_size=4, page_token=resp.next_page_token or "garbage")


# ---------------------------------------------------------------- namespaces

def test_list_namespaces(m):
    for path in [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("a-b",), ("users", "u1", "prefs"),
                 ("users", "u2", "prefs"), ("users", "u2", "facts")]:
        m.put(path, "k", {"v": 1})
    everything = [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("a-b",), ("users", "u1", "prefs"),
                  ("users", "u2", "facts"), ("users", "u2", "prefs")]
    assert m.namespaces()[0] == everything
    assert m.namespaces(prefix=("a",))[0] == everything[:3]
    assert m.namespaces(prefix=("users", "*", "prefs"))[0] == [("users", "u1", "prefs"), ("users", "u2", "prefs")]
    assert m.namespaces(suffix=("prefs",))[0] == [("users", "u1", "prefs"), ("users", "u2", "prefs")]
    assert m.namespaces(suffix=("*", "facts"))[0] == [("users", "u2", "facts")]
    assert m.namespaces(max_depth=1)[0] == [("a",), ("a-b",), ("users",)]
    assert m.namespaces(prefix=("users",), max_depth=2)[0] == [("users", "u1"), ("users", "u2")]
    assert m.namespaces(limit=2, offset=1)[0] == everything[1:3]
    pages, token = [], ""
    while True:
        got, token = m.namespaces(max_depth=2, page_size=2, page_token=token)
        pages.extend(got)
        if not token:
            break
    assert pages == [("a", "b"), ("a", "x"), ("a-b",), ("users", "u1"), ("users", "u2")]
    m.delete(("a", "x"), "k")
    assert ("a", "x") not in m.namespaces()[0]
    assert ("a", "x") in m.namespaces(include_empty=True)[0]
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="prefix[0]"):
        m.call("ListMemoryNamespaces", prefix=[pb.PathSegment()])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="page_size"):
        m.call("ListMemoryNamespaces", limit=3, page_size=3)


# ---------------------------------------------------------------- batches

def op_put(path, key, value):
    return pb.MemoryOp(put=pb.PutMemoryItemRequest(path=list(path), key=key, value=V(value)))


def op_get(path, key):
    return pb.MemoryOp(get=pb.GetMemoryItemRequest(path=list(path), key=key, allow_missing=True))


def test_batch_sequential_and_snapshot(m):
    seq = m.call("BatchMemory", ops=[op_put(("b",), "k", {"v": 1}), op_get(("b",), "k"), op_put(("b",), "k", {"v": 2}),
                                     pb.MemoryOp(search=pb.SearchMemoryItemsRequest(path_prefix=["b"]))])
    assert value_of(seq.results[1].get.item) == {"v": 1}
    assert value_of(seq.results[3].search.items[0].item) == {"v": 2}
    assert [r.version for r in m.history(("b",), "k")] == [2, 1]
    snap = m.call("BatchMemory", semantics=pb.BATCH_SEMANTICS_SNAPSHOT,
                  ops=[op_put(("s",), "k", {"v": 1}), op_get(("s",), "k"), op_put(("s",), "k", {"v": 2}),
                       op_get(("b",), "k")])
    assert not snap.results[1].get.HasField("item")  # reads see the state before the batch
    assert value_of(snap.results[3].get.item) == {"v": 2}
    assert snap.results[0].put == snap.results[2].put  # the dropped write answers as the one that replaced it
    assert [r.version for r in m.history(("s",), "k")] == [1]  # only the last write was applied
    assert value_of(m.get(("s",), "k").item) == {"v": 2}


def test_batch_is_all_or_nothing(m):
    m.put(("x",), "k", {"v": 1})
    before = m.state()
    with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH", field="ops[1].put.etag", index="1"):
        m.call("BatchMemory", ops=[op_put(("x",), "new", {"v": 1}),
                                   pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["x"], key="k", value=V({}),
                                                                           etag="nope"))])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="ops[2].put.path[0]", index="2"):
        m.call("BatchMemory", ops=[op_put(("x",), "new", {"v": 1}), op_get(("x",), "k"), op_put(("",), "k", {})])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="ops[0].get.namespace"):
        m.call("BatchMemory", ops=[pb.MemoryOp(get=pb.GetMemoryItemRequest(namespace="other", key="k"))])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="ops[0]"):
        m.call("BatchMemory", ops=[pb.MemoryOp()])
    with expect_error(CODES.NOT_FOUND, "MEMORY_ITEM_NOT_FOUND", field="ops[1].get", index="1"):
        m.call("BatchMemory", ops=[op_put(("x",), "new", {"v": 1}),
                                   pb.MemoryOp(get=pb.GetMemoryItemRequest(path=["x"], key="missing"))])
    with expect_error(CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", field="ops"):
        m.call("BatchMemory", ops=[op_get(("x",), "k")] * 1001)
    assert m.state() == before


# ---------------------------------------------------------------- bad input changes nothing

BAD_PUTS = [
    (dict(path=[""], key="k", value=V({})), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "path[0]"),
    (dict(path=["a\x00b"], key="k", value=V({})), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "path[0]"),
    (dict(path=["x" * 129], key="k", value=V({})), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "path[0]"),
    (dict(path=["l"] * 33, key="k", value=V({})), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "path"),
    (dict(path=["x" * 128] * 4, key="k", value=V({})), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "path"),
    (dict(path=["p"], key="k" * 257, value=V({})), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "key"),
    (dict(path=["p"], key="k"), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "value"),
    (dict(path=["p"], key="k", value=V([1, 2])), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "value"),
    (dict(path=["p"], key="k", value=V("text")), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "value"),
    (dict(path=["p"], key="k", value=values_pb2.Value(msgpack=b"\xc1")), CODES.INVALID_ARGUMENT,
     "UNSUPPORTED_VALUE", None),
    (dict(path=["p"], key="k", value=V({"big": "x" * (1 << 20)})), CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED",
     "value"),
    (dict(path=["p"], key="k", value=V({}), vectors={"t": pb.Vector(values=[1.0, float("nan")])}),
     CODES.INVALID_ARGUMENT, "VECTOR_INVALID", "vectors['t']"),
    (dict(path=["p"], key="k", value=V({}), vectors={"t": pb.Vector(values=[float("inf")])}),
     CODES.INVALID_ARGUMENT, "VECTOR_INVALID", "vectors['t']"),
    (dict(path=["p"], key="k", value=V({}), vectors={"t": pb.Vector()}),
     CODES.INVALID_ARGUMENT, "VECTOR_INVALID", "vectors['t']"),
    (dict(path=["p"], key="k", value=V({}), vectors={"a": pb.Vector(values=[1, 2]), "b": pb.Vector(values=[1])}),
     CODES.INVALID_ARGUMENT, "VECTOR_DIMENSION_MISMATCH", "vectors['b']"),
    (dict(path=["p"], key="k", value=V({}), vectors={"a": pb.Vector(values=[1, 2, 3, 4])}),
     CODES.INVALID_ARGUMENT, "VECTOR_DIMENSION_MISMATCH", "vectors['a']"),  # the space has 3 dimensions
    (dict(path=["p"], key="k", value=V({}), ttl={"seconds": -1}), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "ttl"),
    (dict(path=["p"], key="k", value=V({}), origin=7), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "origin"),
    (dict(path=["p"], key="k", value=V({}), vector_update=9), CODES.INVALID_ARGUMENT, "INVALID_FIELD",
     "vector_update"),
    (dict(path=["p"], key="k", value=V({}), actor="a" * 257), CODES.INVALID_ARGUMENT, "INVALID_FIELD", "actor"),
    (dict(path=["p"], key="k", value=V({}), provenance=pb.MemoryProvenance(thread_id="t\x00")),
     CODES.INVALID_ARGUMENT, "INVALID_FIELD", "provenance.thread_id"),
    (dict(path=["p"], key="k", value=V({}), vector_space="s\x00"), CODES.INVALID_ARGUMENT, "INVALID_FIELD",
     "vector_space"),
]


@pytest.mark.parametrize("fields, code, reason, field", BAD_PUTS)
def test_bad_puts_change_nothing(m, fields, code, reason, field):
    m.put(("p",), "k", {"v": 1}, vectors={"x": pb.Vector(values=[1, 2, 3])})
    before = m.state()
    with expect_error(code, reason, field=field):
        m.call("PutMemoryItem", **fields)
    assert m.state() == before
    assert value_of(m.get(("p",), "k").item) == {"v": 1}


@pytest.mark.parametrize("fields, field", [
    (dict(limit=1001), "limit"),
    (dict(offset=100_001), "offset"),
    (dict(limit=5, page_size=5), "page_size"),
    (dict(order=9), "order"),
    (dict(path_prefix=["", "x"]), "path_prefix[0]"),
    (dict(vector=pb.VectorQuery(vector=pb.Vector(values=[1])), page_size=3), "page_size"),
    (dict(vector=pb.VectorQuery(vector=pb.Vector(values=[1])), limit=1000, offset=9001), "offset"),
])
def test_bad_searches(m, fields, field):
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field=field):
        m.call("SearchMemoryItems", **fields)


def test_vector_query_errors(m):
    m.put(("v",), "k", {}, vectors={"t": pb.Vector(values=[1, 0])}, vector_space="sp")
    with expect_error(CODES.NOT_FOUND, "VECTOR_SPACE_NOT_FOUND", space="nope"):
        m.search(vector=pb.VectorQuery(vector=pb.Vector(values=[1, 0]), space="nope"))
    with expect_error(CODES.INVALID_ARGUMENT, "VECTOR_DIMENSION_MISMATCH", field="vector.vector", dims="2"):
        m.search(vector=pb.VectorQuery(vector=pb.Vector(values=[1, 0, 0]), space="sp"))
    with expect_error(CODES.INVALID_ARGUMENT, "VECTOR_INVALID", field="vector.vector"):
        m.search(vector=pb.VectorQuery(vector=pb.Vector(values=[float("nan"), 0]), space="sp"))


# ---------------------------------------------------------------- TTL over the API (the real clock)

def test_ttl_zero_expires_at_once_and_sweep_records_it(m):
    r = m.put(("t",), "gone", {"v": 1}, ttl={"seconds": 0})
    assert r.created and r.item.HasField("expire_time")
    m.put(("t",), "stays", {"v": 2}, ttl={"seconds": 3600})
    with expect_error(CODES.NOT_FOUND, "MEMORY_ITEM_NOT_FOUND"):
        m.get(("t",), "gone")
    assert m.keys(("t",)) == [(("t",), "stays")]
    assert m.namespaces(prefix=("t",))[0] == [("t",)]
    got = m.get(("t",), "stays").item
    assert got.ttl.seconds == 3600
    swept = m.call("SweepExpiredMemoryItems")
    assert swept.expired_items == 1
    kinds = [r.kind for r in m.history(("t",), "gone")]
    assert kinds == [pb.REVISION_KIND_EXPIRE, pb.REVISION_KIND_PUT]
    assert m.history(("t",), "gone")[0].actor == "agentstate:ttl"
    assert m.call("SweepExpiredMemoryItems").expired_items == 0
    # a put without ttl removes it
    m.put(("t",), "stays", {"v": 3})
    assert not m.get(("t",), "stays").item.HasField("ttl")


# ---------------------------------------------------------------- TTL and the sweeper with an injectable clock

class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000

    def __call__(self) -> int:
        return self.now

    def minutes(self, n: float) -> None:
        self.now += int(n * 60_000_000)


@pytest.fixture
def local(tmp_path):
    store = Store(str(tmp_path / "data"))
    clock = Clock()
    memory = mem.Memory(store, clock)
    yield memory, clock
    store.close()


def run(coro):
    return asyncio.run(coro)


def settle(memory) -> None:
    """Wait until queued TTL refreshes are written (the owner thread runs jobs in order)."""
    memory.store.write(lambda txn: None)


def lput(memory, key, ttl_minutes=None, path=("p",)):
    req = pb.PutMemoryItemRequest(path=list(path), key=key, value=V({"k": key}))
    if ttl_minutes is not None:
        req.ttl.FromMilliseconds(int(ttl_minutes * 60_000))
    return run(api.put(memory, req))


def lget(memory, key, **kw):
    return run(api.get(memory, pb.GetMemoryItemRequest(path=["p"], key=key, allow_missing=True, **kw)))


def lkeys(memory, **kw):
    return [s.item.key for s in run(api.search(memory, pb.SearchMemoryItemsRequest(
        order=pb.MEMORY_ORDER_PATH_KEY, **kw))).items]


def test_ttl_refresh_on_read(local):
    memory, clock = local
    lput(memory, "a", ttl_minutes=10)
    lput(memory, "b", ttl_minutes=10)
    lput(memory, "c", ttl_minutes=10)
    clock.minutes(8)
    got = lget(memory, "a").item  # refreshes: a lives until minute 18
    assert got.expire_time.ToMicroseconds() == clock.now + 600_000_000
    assert lget(memory, "b", refresh_ttl=False).item.key == "b"  # no refresh: b still ends at minute 10
    assert lkeys(memory, path_prefix=["p"], filter=pb.MemoryFilter(expression=V({"k": "c"}))) == ["c"]  # refreshes c
    settle(memory)
    clock.minutes(2)  # minute 10: b is invisible at once, before any sweep
    assert not lget(memory, "b").HasField("item")
    assert lkeys(memory, refresh_ttl=False) == ["a", "c"]
    clock.minutes(7.99)
    assert lkeys(memory, refresh_ttl=False) == ["a", "c"]
    clock.minutes(0.02)  # minute 18.01
    assert lkeys(memory, refresh_ttl=False) == []
    ns_list = run(api.list_namespaces(memory, pb.ListMemoryNamespacesRequest()))
    assert list(ns_list.namespaces) == []  # every item expired: the path is not listed


def test_put_over_an_expired_item_creates_a_new_one(local):
    memory, clock = local
    first = lput(memory, "a", ttl_minutes=1)
    clock.minutes(2)
    again = lput(memory, "a")
    assert again.created and again.item.create_time != first.item.create_time
    revs = run(api.history(memory, pb.GetMemoryItemHistoryRequest(path=["p"], key="a"))).revisions
    assert [r.kind for r in revs] == [pb.REVISION_KIND_PUT, pb.REVISION_KIND_EXPIRE, pb.REVISION_KIND_PUT]
    assert [r.version for r in revs] == [3, 2, 1]


def test_sweeper_works_in_small_jobs(local, monkeypatch):
    memory, clock = local
    for i in range(25):
        lput(memory, f"k{i:02}", ttl_minutes=1 + (i % 2) * 100)  # 13 expire at minute 1, 12 at minute 101
    jobs = []
    real = memory.sweep_job

    def counted(txn, ns, now, start=b"", max_items=4):
        n, nxt = real(txn, ns, now, start, max_items=4)
        jobs.append(n)
        return n, nxt

    monkeypatch.setattr(memory, "sweep_job", counted)
    assert run(api.sweep(memory, None)) == 0
    clock.minutes(5)
    assert run(api.sweep(memory, None)) == 13
    assert max(jobs) <= 4 and len(jobs) >= 4
    assert len(lkeys(memory, limit=100, refresh_ttl=False)) == 12
    assert run(api.sweep(memory, pb.SweepExpiredMemoryItemsRequest(namespace="other"))) == 0
    clock.minutes(100)
    assert len(lkeys(memory, limit=100)) == 0  # invisible before the sweep
    assert run(api.sweep(memory, pb.SweepExpiredMemoryItemsRequest(namespace="default"))) == 12
    with memory.store.read() as txn:
        assert txn.stat(memory.db["memitems"])["entries"] == 0
        assert txn.stat(memory.db["memexp"])["entries"] == 0
        assert txn.stat(memory.db["memupd"])["entries"] == 0


def test_refresh_in_a_batch_is_part_of_it(local):
    memory, clock = local
    lput(memory, "a", ttl_minutes=10)
    clock.minutes(9)
    resp = run(api.batch(memory, pb.BatchMemoryRequest(ops=[
        pb.MemoryOp(get=pb.GetMemoryItemRequest(path=["p"], key="a"))])))
    assert resp.results[0].get.item.expire_time.ToMicroseconds() == clock.now + 600_000_000
    clock.minutes(9)
    assert lget(memory, "a", refresh_ttl=False).item.key == "a"
    # a failing batch refreshes nothing
    with pytest.raises(Exception):
        run(api.batch(memory, pb.BatchMemoryRequest(ops=[
            pb.MemoryOp(get=pb.GetMemoryItemRequest(path=["p"], key="a")),
            pb.MemoryOp(get=pb.GetMemoryItemRequest(path=["p"], key="missing"))])))
    clock.minutes(1.5)  # 19.5 minutes after the refresh at minute 9: gone
    assert not lget(memory, "a").HasField("item")


def test_garbage_collection_keeps_memory_values(local):
    from sidecar.storage import gc
    memory, clock = local
    lput(memory, "a")
    run(api.put(memory, pb.PutMemoryItemRequest(path=["p"], key="a", value=V({"second": 2}))))
    stats = gc.GarbageCollector(memory.store).collect()
    assert stats.freed_blobs == 0  # the first value is still held by the history
    revs = run(api.history(memory, pb.GetMemoryItemHistoryRequest(path=["p"], key="a", include_values=True)))
    assert [value_of(r) for r in revs.revisions] == [{"second": 2}, {"k": "a"}]
    run(api.delete(memory, pb.DeleteMemoryItemRequest(path=["p"], key="a", purge=True)))
    assert gc.GarbageCollector(memory.store).collect().freed_blobs == 2
    report = gc.check_integrity(memory.store)
    assert report["problems"] == [] and report["missing_blobs"] == 0


# ---------------------------------------------------------------- the field index: the same answers as the scan

def test_the_field_index_answers_as_the_scan(tmp_path):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    store = Store(str(tmp_path / "idx"))
    memory = mem.Memory(store, Clock())
    scalars = st.one_of(st.integers(-2, 3), st.sampled_from([1.0, 2.5, True, False, None, "a", "b", "1", 2**70]))
    values = st.dictionaries(st.sampled_from(["x", "y"]), st.one_of(
        scalars, st.dictionaries(st.sampled_from(["x", "z"]), scalars, max_size=2), st.lists(scalars, max_size=2)),
        max_size=2)
    ops = st.lists(st.tuples(st.sampled_from(["put", "put", "delete"]), st.sampled_from([("p",), ("p", "q"), ("r",)]),
                             st.sampled_from(["k1", "k2", "k3", "k4"]), values), min_size=1, max_size=12)
    exprs = st.one_of(
        st.builds(lambda k, v: {k: v}, st.sampled_from(["x", "y", "x.x", "x.z", "y.0"]), scalars),
        st.builds(lambda k, v, w: {k: v, "y": {"$ne": w}}, st.sampled_from(["x", "x.z"]), scalars, scalars))

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(script=ops, expr=exprs, order=st.sampled_from([1, 2, 3]), prefix=st.sampled_from([[], ["p"]]),
           size=st.sampled_from([1, 2, 100]))
    def check(script, expr, order, prefix, size):
        ns = f"i{uuid.uuid4().hex[:10]}"
        for kind, path, key, value in script:
            if kind == "put":
                run(api.put(memory, pb.PutMemoryItemRequest(namespace=ns, path=list(path), key=key, value=V(value))))
            else:
                run(api.delete(memory, pb.DeleteMemoryItemRequest(namespace=ns, path=list(path), key=key,
                                                                  allow_missing=True)))

        def pages(cap):
            memory.INDEX_CAP = cap
            memory._member_test = real_test if cap else (lambda *a: None)  # cap 0: the plain scan
            seen, token = [], ""
            while True:
                resp = run(api.search(memory, pb.SearchMemoryItemsRequest(
                    namespace=ns, path_prefix=prefix, order=order, page_size=size, page_token=token,
                    filter=pb.MemoryFilter(expression=V(expr)), refresh_ttl=False)))
                seen.append([(tuple(s.item.path), s.item.key, s.item.version) for s in resp.items])
                token = resp.next_page_token
                if not token:
                    return seen
        real_test = memory._member_test
        try:
            assert pages(2048) == pages(0)
        finally:
            memory.INDEX_CAP = mem.Memory.INDEX_CAP
            memory._member_test = real_test

    try:
        check()
    finally:
        store.close()
