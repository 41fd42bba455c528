"""agentstate.langgraph.SidecarStore / AsyncSidecarStore side by side with LangGraph's InMemoryStore
(docs/memory.md §11): random scripts of puts (nested values, index lists and False), deletes, gets, searches
(random filters with every operator and unknown ones, sub-maps and lists, limits and offsets including 0 and
negatives, vector queries), namespace listings (prefixes, suffixes, wildcards, depth, paging), raw batches
with repeated keys, and callers that change returned values in place and put them back. Results must be equal
(values, keys, namespaces, order, scores bit for bit, exception type and message); timestamps are not compared.

The reference is InMemoryStore behind a deep copy at its boundary (it hands out its stored objects, which a
store shared by processes cannot do); test_inmemorystore_aliasing_is_a_documented_divergence shows the
difference. Gets and deletes only address namespaces a put created, one that did not fail (InMemoryStore creates
a namespace on a read or a delete of a missing key: a documented divergence). Then real graphs compiled with ``store=``, sync and
async.
"""
from __future__ import annotations

import asyncio
import copy
import operator
import uuid
from typing import Annotated, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from agentstate import AsyncClient, Client
from agentstate.langgraph import AsyncSidecarStore, SidecarStore


def embed_texts(texts: list[str]) -> list[list[float]]:
    """Deterministic small-integer vectors (exact in float32, exact sums): scores compare bit for bit."""
    return [[len(t) % 7 + 1, t.count("a"), t.count("e") % 3, sum(map(ord, t)) % 5] for t in texts]


INDEX = {"dims": 4, "embed": embed_texts, "fields": ["text"]}

NAMESPACES = [("u", "1"), ("u", "2"), ("u", "1", "prefs"), ("docs",), ("a-b",), ("a", "b")]
KEYS = ["k1", "k2", "k3"]
FIELDS = ["n", "s", "text", "tags", "nested"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.sampled_from([0.5, 2.0, -1.5]),
                    st.sampled_from(["a", "apple", "banana", "Date", "10", "3", "", "tea"]))
leaf_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["k", "j", "text"]), inner, max_size=2)),
    max_leaves=5)
values = st.fixed_dictionaries({}, optional={
    "n": st.one_of(st.integers(-3, 12), st.sampled_from([2.0, "3", None, True])),
    "s": st.sampled_from(["apple", "banana", "cherry", "Date"]),
    "text": st.sampled_from(["likes tea", "banana bread", "a", "eee", "zzz", "apple pie and tea"]),
    "tags": st.lists(st.sampled_from(["x", "aa", "tea"]), max_size=3),
    "nested": st.dictionaries(st.sampled_from(["k", "j"]), st.integers(0, 2), max_size=2),
    "other": leaf_values,
})
index_args = st.sampled_from([None, None, False, ["text"], ["tags[*]"], ["nested.k", "s"], ["$"]])

op_values = st.one_of(st.integers(-1, 11), st.sampled_from([2.0, "3", "banana", None, True]))
filter_values = st.one_of(
    op_values,
    st.dictionaries(st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), op_values, min_size=1,
                    max_size=2),
    st.dictionaries(st.sampled_from(["$eq", "$in", "$gt"]), st.one_of(op_values, st.lists(op_values, max_size=2)),
                    min_size=1, max_size=2),
    st.dictionaries(st.sampled_from(["k", "j"]), st.one_of(st.integers(0, 2), st.dictionaries(
        st.sampled_from(["$ne", "$gte"]), st.integers(0, 2), min_size=1)), max_size=2),
    st.lists(st.sampled_from(["x", "aa", "tea"]), max_size=2),
)
filter_dicts = st.dictionaries(st.sampled_from(FIELDS), filter_values, min_size=1, max_size=2)
filters = st.one_of(st.none(), filter_dicts)
prefixes = st.sampled_from([(), ("u",), ("u", "1"), ("docs",), ("a",), ("zz",)])
queries = st.one_of(st.none(), st.none(), st.sampled_from(["tea", "banana", "a", "zzzz"]))
limits = st.sampled_from([0, 1, 2, 3, 10, -1])
offsets = st.sampled_from([0, 0, 1, 2, -1])
patterns = st.lists(st.sampled_from(["u", "1", "2", "*", "prefs", "docs", "a"]), max_size=3).map(tuple)

ops = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS), values, index_args),
    st.tuples(st.just("delete"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS)),
    st.tuples(st.just("get"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS)),
    st.tuples(st.just("mutate"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS), values),
    st.tuples(st.just("search"), prefixes, filters, limits, offsets, queries),
    st.tuples(st.just("search"), prefixes, filters, limits, offsets, queries),
    st.tuples(st.just("search"), prefixes, filter_dicts, limits, offsets, queries),
    st.tuples(st.just("list"), st.one_of(st.none(), patterns), st.one_of(st.none(), patterns),
              st.one_of(st.none(), st.integers(1, 3)), st.sampled_from([1, 2, 100]), st.sampled_from([0, 1])),
    st.tuples(st.just("batch"), st.lists(st.tuples(st.sampled_from(["put", "get", "delete", "search"]),
                                                   st.sampled_from(NAMESPACES[:2]), st.sampled_from(KEYS[:2]),
                                                   values), min_size=1, max_size=5)),
)


class Reference:
    """InMemoryStore with deep copies at its boundary (values in and out)."""

    def __init__(self, index) -> None:
        self.store = InMemoryStore(index=index)

    def batch(self, op_list):
        return copy.deepcopy(self.store.batch(copy.deepcopy(op_list)))


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - compared by type and message
        return "error", (type(e).__name__, str(e))


def shape(result):
    """What must be equal: items without their timestamps."""
    if isinstance(result, list):
        return [shape(r) for r in result]
    if result is None or isinstance(result, tuple):
        return result
    return (result.namespace, result.key, result.value, getattr(result, "score", "no-score"))


def build_ops(step, created: set) -> list | None:
    """The LangGraph ops of one script step (None: skipped, see the module doc)."""
    kind = step[0]
    if kind == "put":
        _, ns, key, value, index = step
        created.add(ns)
        return [PutOp(ns, key, value, index)]
    if kind in ("get", "delete"):
        _, ns, key = step
        if ns not in created:
            return None
        return [GetOp(ns, key)] if kind == "get" else [PutOp(ns, key, None)]
    if kind == "search":
        _, prefix, flt, limit, offset, query = step
        return [SearchOp(prefix, flt, limit, offset, query)]
    if kind == "list":
        _, prefix, suffix, depth, limit, offset = step
        conds = tuple(c for c in (prefix and MatchCondition("prefix", prefix),
                                  suffix and MatchCondition("suffix", suffix)) if c)
        return [ListNamespacesOp(conds or None, depth, limit, offset)]
    if kind == "batch":
        out = []
        before = set(created)  # a delete in the batch after a put of a new namespace: see the module doc
        for sub, ns, key, value in step[1]:
            if sub == "put":
                created.add(ns)
                out.append(PutOp(ns, key, value))
            elif ns not in before:
                continue
            elif sub == "get":
                out.append(GetOp(ns, key))
            elif sub == "delete":
                out.append(PutOp(ns, key, None))
            else:
                out.append(SearchOp(ns[:1], {"n": {"$ne": 1}}, 10, 0, None))
        return out or None
    return None


def run_script(script, ours_batch, ref: Reference):
    created: set = set()
    for step in script:
        if step[0] == "mutate":
            _, ns, key, extra = step
            if ns not in created:
                continue
            # a real caller: read, change the returned value in place, put it back
            got_ours = outcome(lambda: ours_batch([GetOp(ns, key)])[0])
            got_ref = outcome(lambda: ref.batch([GetOp(ns, key)])[0])
            assert shape(got_ours[1]) == shape(got_ref[1]) if got_ours[0] == "ok" else got_ours == got_ref
            for got, run in ((got_ours[1], ours_batch), (got_ref[1], ref.batch)):
                if got is None:
                    continue
                got.value.update(copy.deepcopy(extra))  # (each caller its own copy of the change)
                got.value.setdefault("tags", []).append("x")
                run([PutOp(ns, key, got.value)])
            continue
        before = set(created)
        op_list = build_ops(step, created)
        if op_list is None:
            continue
        a = outcome(lambda: ours_batch(op_list))
        b = outcome(lambda: ref.batch(op_list))
        if a[0] == "ok" and b[0] == "ok":
            assert shape(a[1]) == shape(b[1]), (step, a, b)
        else:
            assert a == b, (step, a, b)
            created = before  # a batch that failed (a put whose embedding fails) created no namespace
    # in the end both hold the same items
    everything = [SearchOp((), None, 1000, 0, None), ListNamespacesOp(None, None, 1000, 0)]
    assert shape(ours_batch(everything)) == shape(ref.batch(everything))


@pytest.fixture(scope="module")
def address(module_sidecar):
    return module_sidecar.address


@pytest.fixture(scope="module")
def client(address):
    with Client(address) as c:
        yield c


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])


@SETTINGS
@given(script=st.lists(ops, min_size=1, max_size=14), indexed=st.booleans())
def test_sync_store_behaves_like_inmemorystore(client, script, indexed):
    index = INDEX if indexed else None
    ours = SidecarStore(client=client, namespace=f"lg-{uuid.uuid4().hex[:12]}", index=index)
    run_script(script, ours.batch, Reference(index))


def test_a_delete_lists_its_namespace_as_inmemorystore_does(client):
    """InMemoryStore makes a namespace on a delete, even of a key it never held (found by the property test
    above: a put that fails its embedding, then a delete)."""
    ours = SidecarStore(client=client, namespace=f"lg-{uuid.uuid4().hex[:12]}", index=INDEX)
    ref = Reference(INDEX)
    script = [[PutOp(("u", "1"), "k1", {})], [PutOp(("never", "put"), "k9", None)],
              [PutOp(("u", "2"), "k1", {"tags": ["x", "x"]}, ["tags[*]"])],  # fails in both: 1 text, 2 paths
              [PutOp(("u", "2"), "k1", None)]]
    for op_list in script:
        a, b = outcome(lambda: ours.batch(op_list)), outcome(lambda: ref.batch(op_list))
        assert a == b
    everything = [ListNamespacesOp(None, None, 1000, 0), SearchOp((), None, 1000, 0, None)]
    assert shape(ours.batch(everything)) == shape(ref.batch(everything))
    assert shape(ours.batch(everything))[0] == [("never", "put"), ("u", "1"), ("u", "2")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(script=st.lists(ops, min_size=1, max_size=10))
def test_async_store_behaves_like_inmemorystore(address, script):
    async def main():
        async with AsyncClient(address) as ac:
            ours = AsyncSidecarStore(client=ac, namespace=f"lga-{uuid.uuid4().hex[:12]}", index=INDEX)
            ref = Reference(INDEX)
            results = []
            created: set = set()
            for step in script:
                if step[0] == "mutate":
                    continue
                before = set(created)
                op_list = build_ops(step, created)
                if op_list is None:
                    continue
                try:
                    a = ("ok", shape(await ours.abatch(op_list)))
                except Exception as e:  # noqa: BLE001
                    a = ("error", (type(e).__name__, str(e)))
                b = outcome(lambda: shape(ref.batch(op_list)))
                results.append((step, a, b))
                if a[0] != "ok" or b[0] != "ok":
                    created = before  # a failed batch created no namespace (as in run_script)
            return results
    for step, a, b in asyncio.run(main()):
        assert a == b, step


def test_the_methods_built_on_batch(client):
    ours = SidecarStore(client=client, namespace=f"lgm-{uuid.uuid4().hex[:12]}", index=INDEX)
    ref = InMemoryStore(index=INDEX)
    for st_ in (ours, ref):
        st_.put(("docs", "u1"), "a", {"text": "banana bread", "n": 1})
        st_.put(("docs", "u1"), "b", {"text": "likes tea", "n": 5}, index=["text"])
        st_.put(("docs", "u2"), "c", {"chapters": [{"content": "tea"}, {"content": "eee"}]},
                index=["chapters[*].content"])
        st_.put(("docs", "u2"), "d", {"text": "zzz"}, index=False)
    for call in (lambda s: s.get(("docs", "u1"), "a"),
                 lambda s: s.search(("docs",), query="tea", limit=4),
                 lambda s: s.search(("docs",), query="tea", limit=2, offset=1),
                 lambda s: s.search(("docs",), filter={"n": {"$gt": 0}}),
                 lambda s: s.list_namespaces(prefix=("docs",)),
                 lambda s: s.list_namespaces(suffix=("u2",)),
                 lambda s: s.search(("docs", "u1"), filter={"n": {"$gt": 0}}),
                 lambda s: s.list_namespaces(max_depth=1)):
        a, b = outcome(lambda: call(ours)), outcome(lambda: call(ref))
        assert (a[0], shape(a[1])) == (b[0], shape(b[1]))
    ours.delete(("docs", "u1"), "a")
    ref.delete(("docs", "u1"), "a")
    assert shape(ours.search(("docs",))) == shape(ref.search(("docs",)))
    # label validation is BaseStore's, exactly
    for bad in ((), ("langgraph", "x"), ("a.b",), ("",)):
        errors = []
        for st_ in (ours, ref):
            try:
                st_.put(bad, "k", {"v": 1})
            except Exception as e:  # noqa: BLE001
                errors.append((type(e).__name__, str(e)))
        assert len(errors) == 2 and errors[0] == errors[1], bad


def test_ttl(address):
    ns = f"lgt-{uuid.uuid4().hex[:12]}"
    client = Client(address, namespace=ns)
    store = SidecarStore(client=client, namespace=ns, ttl={"default_ttl": 0.0, "refresh_on_read": True})
    assert store.supports_ttl
    store.put(("t",), "gone", {"v": 1})  # default_ttl 0 minutes: expired at once
    store.put(("t",), "stays", {"v": 2}, ttl=60)
    store.put(("t",), "forever", {"v": 3}, ttl=None)
    assert store.get(("t",), "gone") is None
    assert sorted(i.key for i in store.search(("t",))) == ["forever", "stays"]
    item = client.memory.get(("t",), "stays")
    assert item.ttl.seconds == 3600 and not client.memory.get(("t",), "forever").HasField("ttl")
    client.close()


def test_inmemorystore_aliasing_is_a_documented_divergence(client):
    ours = SidecarStore(client=client, namespace=f"lgx-{uuid.uuid4().hex[:12]}")
    ref = InMemoryStore()
    for st_ in (ours, ref):
        value = {"tags": ["a"]}
        st_.put(("x",), "k", value)
        value["tags"].append("b")  # InMemoryStore keeps the nested objects of the put's argument
        st_.get(("x",), "k").value["tags"].append("c")  # and hands out its stored objects
    assert ref.get(("x",), "k").value == {"tags": ["a", "b", "c"]}
    assert ours.get(("x",), "k").value == {"tags": ["a"]}


# ---------------------------------------------------------------- real graphs compiled with store=

class State(TypedDict):
    facts: Annotated[list, operator.add]
    user: str


def remember(state: State, *, store) -> dict:
    ns = ("users", state["user"], "facts")
    n = len(store.search(ns, limit=100))
    store.put(ns, f"f{n}", {"text": f"fact number {n}", "n": n})
    return {"facts": [n]}


def recall(state: State, *, store) -> dict:
    ns = ("users", state["user"], "facts")
    hits = store.search(ns, query="fact number", filter={"n": {"$gte": 0}}, limit=3)
    return {"facts": [sorted(h.key for h in hits)]}


async def aremember(state: State, *, store) -> dict:
    ns = ("users", state["user"], "facts")
    n = len(await store.asearch(ns, limit=100))
    await store.aput(ns, f"f{n}", {"text": f"fact number {n}", "n": n})
    return {"facts": [n]}


async def arecall(state: State, *, store) -> dict:
    ns = ("users", state["user"], "facts")
    hits = await store.asearch(ns, query="fact number", filter={"n": {"$gte": 0}}, limit=3)
    return {"facts": [sorted(h.key for h in hits)]}


def graph(store, first, second):
    from langgraph.graph import END, START, StateGraph
    b = StateGraph(State)
    b.add_node("remember", first)
    b.add_node("recall", second)
    b.add_edge(START, "remember")
    b.add_edge("remember", "recall")
    b.add_edge("recall", END)
    return b.compile(store=store)


def test_a_graph_with_store_sync(client):
    ours = graph(SidecarStore(client=client, namespace=f"lgg-{uuid.uuid4().hex[:12]}", index=INDEX), remember, recall)
    ref = graph(InMemoryStore(index=INDEX), remember, recall)
    for _ in range(3):
        a = ours.invoke({"facts": [], "user": "u1"})
        b = ref.invoke({"facts": [], "user": "u1"})
        assert a == b
    assert a["facts"] == [2, ["f0", "f1", "f2"]]


def test_a_graph_with_store_async(address):
    async def main():
        async with AsyncClient(address) as ac:
            ours = graph(AsyncSidecarStore(client=ac, namespace=f"lgga-{uuid.uuid4().hex[:12]}", index=INDEX),
                         aremember, arecall)
            ref = graph(InMemoryStore(index=INDEX), aremember, arecall)
            out = []
            for _ in range(3):
                out.append((await ours.ainvoke({"facts": [], "user": "u9"}),
                            await ref.ainvoke({"facts": [], "user": "u9"})))
            return out
    for a, b in asyncio.run(main()):
        assert a == b
    assert a["facts"] == [2, ["f0", "f1", "f2"]]
