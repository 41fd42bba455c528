"""The field index's range and IN plans (docs/memory.md §6): the same answers as the unindexed filter.

Random items (numbers of every kind: ints, floats, negative and zero, huge ints, Decimals; strings with shared
8-byte prefixes, NUL and non-ASCII text; bools, nulls, nested maps and lists) and random filters with ``$gt
$gte $lt $lte $in`` on numbers, strings and bools (alone, two bounds on one path, of one type or mixed, next
to an equality or a ``$ne``, inside ``$and``) are searched twice, page by page in every order: with
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
# strings: code point order next to shared 8-byte prefixes (the ordered part of a string's key), NUL, the
# empty string and non-ASCII text of 2-4 UTF-8 bytes
strings = st.one_of(st.sampled_from(["a", "b", "1", "", "\x00", "a\x00", "abcdefgh", "abcdefghi", "abcdefgha",
                                     "abcdefg\x00z", "abcdefgi", "é", "\uffff", "\U0001f600", "Z"]),
                    st.text(st.sampled_from("ab\x00é\U0001f600"), max_size=10))
bools = st.booleans()
scalars = st.one_of(numbers, strings, bools, st.none())
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
    st.builds(lambda k, a, v, b, w: {k: {a: v, b: w}}, fields, ranged, strings, ranged, strings),
    st.builds(lambda k, a, v, b, w: {k: {a: v, b: w}}, fields, ranged, bools, ranged, bools),
    st.builds(lambda k, a, v, b, w: {k: {a: v, b: w}}, fields, ranged, scalars, ranged, scalars),
    st.builds(lambda k, vs, o, v: {"$and": [{k: {"$in": vs}}, {k: {o: v}}]}, fields,
              st.lists(st.one_of(strings, bools), min_size=1, max_size=3), ranged, st.one_of(strings, bools)),
    st.builds(lambda k, vs: {k: {"$in": vs}}, fields, st.lists(scalars, max_size=4)),
    st.builds(lambda k, o, v, w: {k: {o: v}, "m": {"$ne": w}}, fields, ranged, numbers, scalars),
    st.builds(lambda k, vs, o, v: {"$and": [{k: {"$in": vs}}, {"n": {o: v}}]}, fields,
              st.lists(numbers, min_size=1, max_size=3), ranged, numbers))


def equal_to_the_scan(tmp_path, ops, exprs, examples):
    store = Store(str(tmp_path / "idx"))
    memory = mem.Memory(store, Clock())

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


def test_range_and_in_plans_answer_as_the_unindexed_filter(tmp_path):
    equal_to_the_scan(tmp_path, ops, exprs, 120)


# Strings and bools only, from a small alphabet, so that stored strings often share the bound's 8-byte prefix
# (the boundary of a string interval) or equal it.
near = st.one_of(st.sampled_from(["", "a", "b", "ab", "\x00", "a\x00", "é", "abcdefgh", "abcdefghb", "abcdefgha"]),
                 st.text(st.sampled_from("ab\x00é"), max_size=3))
near_fields = st.sampled_from(["n", "m", "n.n"])
near_values = st.dictionaries(st.sampled_from(["n", "m"]), st.one_of(near, st.booleans(), st.dictionaries(
    st.sampled_from(["n"]), st.one_of(near, st.booleans()), max_size=1)), max_size=2)
near_ops = st.lists(st.tuples(st.just("put"), st.sampled_from([("p",), ("r",)]),
                              st.sampled_from(["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"]), near_values),
                    min_size=1, max_size=16)
near_exprs = st.one_of(
    st.builds(lambda k, o, v: {k: {o: v}}, near_fields, ranged, st.one_of(near, st.booleans())),
    st.builds(lambda k, a, v, b, w: {k: {a: v, b: w}}, near_fields, ranged, near, ranged, near),
    st.builds(lambda k, vs: {k: {"$in": vs}}, near_fields, st.lists(st.one_of(near, st.booleans()), max_size=4)))


def test_string_and_bool_ranges_answer_as_the_unindexed_filter(tmp_path):
    equal_to_the_scan(tmp_path, near_ops, near_exprs, 150)


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
        # strings: "s5" < "s50" .. "s599" < "s6" .. "s999" (code point order); s0..s4.. are below
        # (a strict bound is read inclusive: "s5" itself is a candidate the filter then drops)
        assert len(ids({"s": {"$gt": "s5"}})) == len([i for i in range(1000) if f"s{i}" >= "s5"])
        assert len(ids({"s": {"$gte": "s98", "$lt": "s99"}})) == 12  # s98, s980 .. s989 and s99 (read inclusive)
        assert ids({"s": {"$gt": "t"}}) == []
        assert ids({"i": {"$in": [1, None]}}) is None  # null matches a missing field: not in the index
        assert ids({"i": {"$gt": True}}) == []  # a bool range reads only bools: "i" holds numbers
        assert ids({"i": {"$gt": "a"}}) == []  # a string range reads only strings
        assert ids({"i": {"$gt": b"x"}}) is None  # bytes are not indexed: no plan
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


def test_string_and_bool_ranges_use_the_index(tmp_path):
    store = Store(str(tmp_path / "idx"))
    memory = mem.Memory(store, Clock())
    words = ["", "a", "ab", "abcdefgh", "abcdefghij", "abcdefghik", "abcdefgi", "b", "é", "\U0001f600"]
    ops = [pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d"], key=f"k{i}", value=V({"w": w, "b": i % 3 == 0})))
           for i, w in enumerate(words)]
    run(api.batch(memory, pb.BatchMemoryRequest(ops=ops)))
    with store.read() as txn:
        def ids(expr):
            got = memory._index_ids(txn, "default", mf.compile_expression(expr), 2048)
            return None if got is None else sorted(got)
        everything = ids({"w": {"$gte": ""}})
        assert len(everything) == len(words)
        # the 8-byte prefix is the ordered part: "abcdefgh", "abcdefghij" and "abcdefghik" share one, so a
        # bound inside it reads all three (the filter re-checks them); a bound past it reads none of them
        assert len(ids({"w": {"$gt": "abcdefghij"}})) == 7  # abcdefgh, abcdefghi*, abcdefgi, b, é, 😀
        assert len(ids({"w": {"$gt": "abcdefgi"}})) == 4  # abcdefgi, b, é, 😀 (inclusive on the prefix)
        assert len(ids({"w": {"$lt": "ab"}})) == 3  # "", a, ab
        assert len(ids({"b": {"$gt": False}})) == 4  # k0 k3 k6 k9
        assert len(ids({"b": {"$lt": True}})) == 6
        assert len(ids({"b": {"$gte": False}})) == 10
        assert ids({"b": {"$gt": True}}) == [] and ids({"b": {"$lt": False}}) == []
        assert ids({"b": {"$gt": False, "$lt": True}}) == []
    got = run(api.search(memory, pb.SearchMemoryItemsRequest(
        path_prefix=["d"], limit=20, order=pb.MEMORY_ORDER_PATH_KEY,
        filter=pb.MemoryFilter(expression=V({"w": {"$gt": "abcdefghij", "$lt": "é"}, "b": {"$lte": False}})))))
    assert [s.item.key for s in got.items] == ["k5", "k7"]  # abcdefghik, b
    store.close()


def test_a_store_of_the_old_key_format_is_rebuilt_at_start(tmp_path):
    """A store whose field index predates format 2 (whole strings hashed) gets its entries rebuilt by
    build_index (start-up), after which string ranges find its items."""
    store = Store(str(tmp_path / "idx"))
    memory = mem.Memory(store, Clock())
    for i, w in enumerate(["apple", "banana", "cherry"]):
        run(api.put(memory, pb.PutMemoryItemRequest(path=["p", str(i)], key="k", value=V({"w": w, "n": i}))))
    run(api.put(memory, pb.PutMemoryItemRequest(namespace="other", path=["q"], key="k", value=V({"w": "date"}))))
    fdb = store.db["memfld"]

    def entries():
        with store.read() as txn:
            return sorted(bytes(k) for k in txn.cursor(db=fdb).iternext(values=False))
    want = entries()

    def make_old(txn):  # what format 1 wrote: every string key the 16-byte hash of the whole string
        from blake3 import blake3
        for k in entries():
            t = k.index(b"\x00") + 1 + 8
            if k[t:t + 1] == mi.T_STRING:
                word = k[t + 1:t + 9].rstrip(b"\x00")  # these words are shorter than the 8-byte prefix
                txn.delete(k, db=fdb)
                txn.put(k[:t + 1] + blake3(word).digest()[:16] + k[-8:], b"", db=fdb)
        txn.delete(mi.FORMAT_KEY, db=store.db["meta"])
    store.write(make_old)
    assert len(entries()) == len(want) and entries() != want
    assert memory.upgrade_field_index() == 4
    assert entries() == want
    assert memory.upgrade_field_index() is None  # current: nothing to do
    memory.build_index()
    got = run(api.search(memory, pb.SearchMemoryItemsRequest(
        path_prefix=["p"], limit=10, order=pb.MEMORY_ORDER_PATH_KEY,
        filter=pb.MemoryFilter(expression=V({"w": {"$gte": "b"}})))))
    assert [s.item.value.msgpack for s in got.items] == [codec.encode({"n": 1, "w": "banana"}),
                                                         codec.encode({"n": 2, "w": "cherry"})]
    store.close()
