"""The field index's range and IN plans (docs/memory.md §6): the same answers as the unindexed filter.

Random items (numbers of every kind: ints, floats, negative and zero, huge ints, Decimals; strings, bools,
nulls, nested maps and lists) and random filters with ``$gt $gte $lt $lte $in`` (alone, two bounds on one
path, next to an equality or a ``$ne``, inside ``$and``) are searched twice, page by page in every order: with
the index and with the index switched off (the scan), and the answers must be equal. Unit checks show
the plans are used (the index, not the scan, answers) and how a range becomes key intervals.
"""
from __future__ import annotations

import asyncio
import decimal
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import codec
from agentstate.v1 import memory_pb2 as pb
from agentstate.v1 import values_pb2
from sidecar.api import memory as api
from sidecar.state import memory as mem
from sidecar.state import memory_filters as mf
from sidecar.state import memory_index as mi
from sidecar.storage.store import Store


def V(x):
    return values_pb2.Value(msgpack=codec.encode(x))


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def run(coro):
    return asyncio.run(coro)


numbers = st.one_of(st.integers(-3, 3), st.sampled_from([-2.5, -0.0, 0.0, 0.5, 2.0, 1e300, -1e300, 2**53, 2**53 + 1,
                                                         2**70, -(2**70), decimal.Decimal("1.5"),
                                                         decimal.Decimal("-1")]))
scalars = st.one_of(numbers, st.sampled_from([True, False, None, "a", "b", "1"]))
values = st.dictionaries(st.sampled_from(["n", "m"]), st.one_of(
    scalars, st.dictionaries(st.sampled_from(["n", "z"]), scalars, max_size=2), st.lists(scalars, max_size=2)),
    max_size=2)
ops = st.lists(st.tuples(st.sampled_from(["put", "put", "put", "delete"]),
                         st.sampled_from([("p",), ("p", "q"), ("r",)]),
                         st.sampled_from(["k1", "k2", "k3", "k4", "k5", "k6"]), values), min_size=1, max_size=16)
fields = st.sampled_from(["n", "m", "n.n", "n.z", "m.0"])
ranged = st.sampled_from(["$gt", "$gte", "$lt", "$lte"])
exprs = st.one_of(
    st.builds(lambda k, o, v: {k: {o: v}}, fields, ranged, scalars),
    st.builds(lambda k, a, v, b, w: {k: {a: v, b: w}}, fields, ranged, numbers, ranged, numbers),
    st.builds(lambda k, vs: {k: {"$in": vs}}, fields, st.lists(scalars, max_size=4)),
    st.builds(lambda k, o, v, w: {k: {o: v}, "m": {"$ne": w}}, fields, ranged, numbers, scalars),
    st.builds(lambda k, vs, o, v: {"$and": [{k: {"$in": vs}}, {"n": {o: v}}]}, fields,
              st.lists(numbers, min_size=1, max_size=3), ranged, numbers))


def test_range_and_in_plans_answer_as_the_unindexed_filter(tmp_path):
    store = Store(str(tmp_path / "idx"))
    memory = mem.Memory(store, Clock())

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(script=ops, expr=exprs, order=st.sampled_from([1, 2, 3]), prefix=st.sampled_from([[], ["p"]]),
           size=st.sampled_from([1, 3, 100]))
    def check(script, expr, order, prefix, size):
        ns = f"r{uuid.uuid4().hex[:10]}"
        for kind, path, key, value in script:
            if kind == "put":
                run(api.put(memory, pb.PutMemoryItemRequest(namespace=ns, path=list(path), key=key, value=V(value))))
            else:
                run(api.delete(memory, pb.DeleteMemoryItemRequest(namespace=ns, path=list(path), key=key,
                                                                  allow_missing=True)))

        def pages(indexed):
            memory._index_plan = real if indexed else (lambda *a: None)
            memory._member_test = real_test if indexed else (lambda *a: None)
            seen, token = [], ""
            while True:
                resp = run(api.search(memory, pb.SearchMemoryItemsRequest(
                    namespace=ns, path_prefix=prefix, order=order, page_size=size, page_token=token,
                    filter=pb.MemoryFilter(expression=V(expr)), refresh_ttl=False)))
                seen.append([(tuple(s.item.path), s.item.key, s.item.version) for s in resp.items])
                token = resp.next_page_token
                if not token:
                    return seen
        real, real_test = memory._index_plan, memory._member_test
        try:
            assert pages(True) == pages(False)
        finally:
            memory._index_plan, memory._member_test = real, real_test

    try:
        check()
    finally:
        store.close()


def test_the_plans_are_used(tmp_path):
    store = Store(str(tmp_path / "idx"))
    memory = mem.Memory(store, Clock())
    ops = [pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d"], key=f"k{i:04}", value=V({"i": i - 500, "s": f"s{i}"})))
           for i in range(1000)]
    run(api.batch(memory, pb.BatchMemoryRequest(ops=ops)))
    with store.read() as txn:
        def ids(expr):
            return memory._index_ids(txn, "default", mf.compile_expression(expr), 2048)
        assert len(ids({"i": {"$gte": -3, "$lt": 2}})) == 6  # -3 .. 2 at float precision: both bounds inclusive
        assert len(ids({"i": {"$gt": 495}})) == 5  # 495 .. 499
        assert len(ids({"i": {"$lt": -498}})) == 3  # -500 .. -498
        assert len(ids({"i": {"$in": [1, 2, 2, 7000]}})) == 2
        assert ids({"i": {"$gt": 5, "$lt": 1}}) == []  # an empty range: no candidates
        assert ids({"s": {"$gt": "s5"}}) is None  # strings are hashed: no range plan
        assert ids({"i": {"$in": [1, None]}}) is None  # null matches a missing field: not in the index
        assert ids({"i": {"$gt": True}}) is None
        assert len(ids({"$and": [{"i": {"$gte": 0}}, {"s": "s600"}]})) == 1  # the smallest plan wins
    got = run(api.search(memory, pb.SearchMemoryItemsRequest(
        path_prefix=["d"], limit=10, order=pb.MEMORY_ORDER_PATH_KEY,
        filter=pb.MemoryFilter(expression=V({"i": {"$gt": -1, "$lte": 2.5}})))))
    assert [s.item.key for s in got.items] == ["k0500", "k0501", "k0502"]
    store.close()


def test_number_intervals_cover_both_signs():
    head = b"h" * 9

    def inside(x, intervals):
        k = head + mi._F64.pack(0.0 if x == 0 else x)
        return any(lo <= k[:len(lo)] and k[:len(hi)] <= hi for lo, hi in intervals)
    xs = [float("-inf"), -1e300, -2.5, -1.0, -1e-300, 0.0, 1e-300, 1.0, 2.5, 1e300, float("inf")]
    for lo in xs:
        for hi in xs:
            intervals = mi._number_intervals(head, lo, hi) if lo <= hi else []
            assert [x for x in xs if inside(x, intervals)] == [x for x in xs if lo <= x <= hi], (lo, hi)
