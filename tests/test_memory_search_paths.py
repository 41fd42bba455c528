"""The ways a filter search without a vector can be answered give the same pages (docs/memory.md §6).

``Memory.search`` answers from the field index's candidates when they are few, else by the walk in the
request's order that skips the items the field index rules out (the membership test of the required equalities
and ``IN``s), switching between the two after budgets. Random scripts of batches (many items share an update
time, so the newest-first walk sorts groups) with items too big to index (``memfldx``), TTLs that expire, and
filters of equalities, ``IN``s, ``$ne`` and ranges are searched page by page (page tokens, and limit/offset) in
every order in four configurations, which must agree exactly:

- the plain walk (no index, no membership test);
- the defaults;
- the membership walk alone (the index plan switched off);
- tiny budgets, so that one search goes through every phase (the probe fails, the walk runs out of budget,
  the index fails again, the walk goes on).

Unit checks show the membership walk is the one answering a common equality and that it skips reading the
items that cannot match.
"""
from __future__ import annotations

import asyncio
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import codec
from agentstate.v1 import memory_pb2 as pb
from agentstate.v1 import values_pb2
from sidecar.state import memory as mem
from sidecar.state import memory_filters as mf
from sidecar.state import memory_index as mi
from sidecar.api import memory as api
from sidecar.storage import nodes
from sidecar.storage.store import Store


def V(x):
    return values_pb2.Value(msgpack=codec.encode(x))


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000

    def __call__(self) -> int:
        return self.now

    def tick(self, us: int) -> None:
        self.now += us


def run(coro):
    return asyncio.run(coro)


BIG = {f"f{i}": i for i in range(mi.MAX_LEAVES + 1)}  # too many leaves: listed in memfldx, always a candidate

scalars = st.sampled_from([0, 1, 2, 1.0, "a", "b", True, None])
values = st.one_of(
    st.fixed_dictionaries({"g": scalars}, optional={"h": scalars, "n": st.dictionaries(st.just("g"), scalars)}),
    st.builds(lambda g: dict(BIG, g=g), scalars))
put = st.tuples(st.just("put"), st.sampled_from([("p",), ("p", "q"), ("r",), ("p", "s")]),
                st.sampled_from([f"k{i}" for i in range(8)]), values, st.sampled_from([None, None, 1]))
delete = st.tuples(st.just("delete"), st.sampled_from([("p",), ("r",)]), st.sampled_from(["k0", "k1", "k2"]),
                   st.none(), st.none())
batches = st.lists(st.lists(st.one_of(put, put, put, delete), min_size=1, max_size=6), min_size=1, max_size=6)
exprs = st.one_of(
    st.builds(lambda v: {"g": v}, scalars),
    st.builds(lambda v, w: {"g": v, "h": w}, scalars, scalars),
    st.builds(lambda vs: {"g": {"$in": vs}}, st.lists(scalars, max_size=3)),
    st.builds(lambda v, w: {"g": v, "h": {"$ne": w}}, scalars, scalars),
    st.builds(lambda v, w: {"$and": [{"n.g": v}, {"g": {"$gte": w}}]}, scalars, st.sampled_from([0, 1, 1.5])),
    st.builds(lambda v: {"$or": [{"g": v}, {"h": v}]}, scalars))

CONFIGS = ("plain", "defaults", "walk", "tiny")


def configure(memory, name) -> None:
    for attr in ("INDEX_CAP", "INDEX_MIN", "INDEX_PER_WANTED", "INDEX_PROBE", "_index_plan", "_member_test"):
        memory.__dict__.pop(attr, None)
    if name == "plain":
        memory._index_plan = lambda *a: None
        memory._member_test = lambda *a: None
    elif name == "walk":
        memory._index_plan = lambda *a: None
    elif name == "tiny":
        memory.INDEX_CAP, memory.INDEX_MIN, memory.INDEX_PER_WANTED, memory.INDEX_PROBE = 3, 1, 1, 1


def test_every_way_gives_the_same_pages(tmp_path):
    store = Store(str(tmp_path / "paths"))
    clock = Clock()
    memory = mem.Memory(store, clock)

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(script=batches, expr=exprs, order=st.sampled_from([1, 2, 3]), prefix=st.sampled_from([[], ["p"]]),
           size=st.sampled_from([1, 2, 3, 100]), offset=st.sampled_from([0, 1, 3]))
    def check(script, expr, order, prefix, size, offset):
        ns = f"s{uuid.uuid4().hex[:10]}"
        model: dict = {}  # (path, key) -> (update time, value, expiry): the reference for the newest-first order
        for batch in script:
            ops = []
            for kind, path, key, value, ttl in batch:
                if kind == "put":
                    model[(path, key)] = (clock.now, value, clock.now + 60_000_000 * ttl if ttl else 0)
                else:
                    model.pop((path, key), None)
                if kind == "put":
                    req = pb.PutMemoryItemRequest(path=list(path), key=key, value=V(value))
                    if ttl:
                        req.ttl.seconds = 60 * ttl
                    ops.append(pb.MemoryOp(put=req))
                else:
                    ops.append(pb.MemoryOp(delete=pb.DeleteMemoryItemRequest(path=list(path), key=key,
                                                                            allow_missing=True)))
            run(api.batch(memory, pb.BatchMemoryRequest(namespace=ns, ops=ops)))  # one update time per batch
            clock.tick(30_000_000)  # (the one-minute TTLs of the first batches expire)
        flt = pb.MemoryFilter(expression=V(expr))

        def pages():
            seen, token = [], ""
            while True:
                resp = run(api.search(memory, pb.SearchMemoryItemsRequest(
                    namespace=ns, path_prefix=prefix, order=order, page_size=size, page_token=token, filter=flt,
                    refresh_ttl=False)))
                seen.append([(tuple(s.item.path), s.item.key, s.item.version) for s in resp.items])
                token = resp.next_page_token
                if not token:
                    return seen

        def window():
            resp = run(api.search(memory, pb.SearchMemoryItemsRequest(
                namespace=ns, path_prefix=prefix, order=order, limit=size, offset=offset, filter=flt,
                refresh_ttl=False)))
            return [(tuple(s.item.path), s.item.key, s.item.version, s.item.value.msgpack) for s in resp.items]

        got = {}
        try:
            for name in CONFIGS:
                configure(memory, name)
                got[name] = (pages(), window())
        finally:
            configure(memory, "defaults")
        for name in CONFIGS[1:]:
            assert got[name] == got["plain"], name
        if order == mem.ORDER_UPDATED_DESC:
            match = mf.matcher(api.filter_tree(flt))
            want = sorted(((-t, [lab.encode() for lab in path], key.encode()), path, key)
                          for (path, key), (t, value, exp) in model.items()
                          if (not exp or exp > clock.now) and tuple(path[:len(prefix)]) == tuple(prefix)
                          and match(codec.encode(value)))
            assert [(path, key) for _, path, key in want] == [(p, k) for page in got["plain"][0] for p, k, _ in page]

    try:
        check()
    finally:
        store.close()


def _load(memory, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        run(api.batch(memory, pb.BatchMemoryRequest(ops=[
            pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d", f"g{i % 10}"], key=f"k{i}",
                                                    value=V({"i": i, "g": i % 10})))
            for i in range(start, min(n, start + batch))])))
        memory.clock.tick(1000)


def test_a_common_equality_walks_and_reads_only_its_matches(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "common"))
    memory = mem.Memory(store, Clock())
    _load(memory, 2000, 100)
    read = []
    real_encoding = nodes.value_encoding
    monkeypatch.setattr(mem.nodes, "value_encoding",
                        lambda root, fetch: read.append(root) or real_encoding(root, fetch))
    plans = []
    real_plan = memory._index_plan
    memory._index_plan = lambda *a: plans.append(a[5]) or real_plan(*a)  # (its cap)
    resp = run(api.search(memory, pb.SearchMemoryItemsRequest(path_prefix=["d"], limit=10,
                                                              filter=pb.MemoryFilter(expression=V({"g": 3})))))
    # newest first: the last batch (items 1900..1999), equal update times by path then key
    assert [s.item.key for s in resp.items] == sorted((f"k{i}" for i in range(1903, 2000, 10)))
    assert plans == [mem.Memory.INDEX_PROBE]  # the probe only: 200 entries of g=3 is too many for it
    assert len(read) == 10  # only the matches' values were read
    read.clear()
    plans.clear()
    resp = run(api.search(memory, pb.SearchMemoryItemsRequest(path_prefix=["d"], limit=10,
                                                              filter=pb.MemoryFilter(expression=V({"i": 17})))))
    assert [s.item.key for s in resp.items] == ["k17"] and plans == [mem.Memory.INDEX_PROBE] and len(read) == 1
    store.close()


def test_a_middling_value_goes_to_the_index_after_the_walk_budget(tmp_path):
    store = Store(str(tmp_path / "mid"))
    memory = mem.Memory(store, Clock())
    _load(memory, 3000, 100)
    # 100 items with g2 = 0 (every 30th): more than the probe, fewer than the whole budget, and rare enough
    # that the walk's budget runs out first
    run(api.batch(memory, pb.BatchMemoryRequest(ops=[
        pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d", "old"], key=f"m{i}", value=V({"g2": 0})))
        for i in range(100)])))
    memory.clock.tick(1000)
    _load(memory, 1000, 100)  # newer items without g2
    plans = []
    real_plan = memory._index_plan
    memory._index_plan = lambda *a: plans.append(a[5]) or real_plan(*a)  # (its cap)
    resp = run(api.search(memory, pb.SearchMemoryItemsRequest(path_prefix=["d"], limit=10,
                                                              filter=pb.MemoryFilter(expression=V({"g2": 0})))))
    assert [s.item.key for s in resp.items] == sorted(f"m{i}" for i in range(100))[:10]
    assert plans == [mem.Memory.INDEX_PROBE, mem.Memory.INDEX_MIN]
    store.close()
