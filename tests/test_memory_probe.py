"""The fast parts of a filter search against their straightforward forms, on random data and filters.

- ``Memory._index_ids`` reads each key interval of a plan in slices of keys (64, then doubling, ``cap + 1``
  at most) and finds the interval's end by bisection; a reference here reads the entries one by one (the obvious loop) and the
  two must give the same ids, in the same order, or both give up (None), at every cap around the counts.
- The newest-first walk runs a one-key membership test inline (``_Walk.point``); with the test's ``point``
  taken away it calls the test per entry instead. Both must give the same pages (items, order, tokens), in
  every order, with the index plan off (the walk alone) and with tiny budgets (so that one search goes through
  every phase).
"""
from __future__ import annotations

import asyncio
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import codec
from agentstate.v1 import memory_pb2 as pb
from agentstate.v1 import values_pb2
from sidecar.api import memory as api
from sidecar.state import memory as mem
from sidecar.state import memory_index as mi
from sidecar.storage import layout
from sidecar.storage.store import Store
from test_memory_findex import exprs as range_exprs
from test_memory_findex import values as range_values


def V(x):
    return values_pb2.Value(msgpack=codec.encode(x))


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000

    def __call__(self) -> int:
        return self.now


def run(coro):
    return asyncio.run(coro)


def reference_ids(memory, txn, ns, flt, cap):
    """The ids of the smallest plan within ``cap`` entries (plus the unindexed), entry by entry, or None."""
    plans = mi.plan(flt)
    if not plans:
        return None
    nsb = ns.encode() + layout.SEP
    best = None
    for intervals in plans:
        ids = []
        for lo, hi in intervals:
            cursor = txn.cursor(db=memory.db["memfld"])
            if not cursor.set_range(nsb + lo):
                continue
            for k in cursor.iternext(values=False):
                if not k.startswith(nsb) or k[len(nsb):len(nsb) + len(hi)] > hi:
                    break
                ids.append(layout.read_u64(k[-8:]))
        if len(ids) <= cap and (best is None or len(ids) < len(best)):
            best = ids
    if best is None:
        return None
    cursor = txn.cursor(db=memory.db["memfldx"])
    if cursor.set_range(nsb):
        for k in cursor.iternext(values=False):
            if not k.startswith(nsb):
                break
            best.append(layout.read_u64(k[-8:]))
    return best


BIG = {f"f{i}": i for i in range(mi.MAX_LEAVES + 1)}  # listed in memfldx
small = st.sampled_from([0, 1, 2, 1.0, "a", "b", True, None])
puts = st.lists(st.tuples(st.sampled_from([("p",), ("p", "q"), ("r",)]), st.integers(0, 40),
                          st.one_of(range_values, st.fixed_dictionaries({"n": small}),
                                    st.builds(lambda v: dict(BIG, n=v), small))),
                min_size=1, max_size=60)
probe_exprs = st.one_of(range_exprs, st.builds(lambda v: {"n": v}, small),
                        st.builds(lambda vs: {"n": {"$in": vs}}, st.lists(small, max_size=4)))


def test_the_sliced_probe_gives_the_ids_of_the_entry_by_entry_one(tmp_path):
    store = Store(str(tmp_path / "probe"))
    memory = mem.Memory(store, Clock())

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(script=puts, expr=probe_exprs, caps=st.lists(st.integers(0, 70), min_size=1, max_size=4))
    def check(script, expr, caps):
        ns = f"q{uuid.uuid4().hex[:10]}"
        run(api.batch(memory, pb.BatchMemoryRequest(namespace=ns, ops=[
            pb.MemoryOp(put=pb.PutMemoryItemRequest(path=list(path), key=f"k{key}", value=V(value)))
            for path, key, value in script])))
        flt = api.filter_tree(pb.MemoryFilter(expression=V(expr)))
        with store.read() as txn:
            full = reference_ids(memory, txn, ns, flt, 10**9)
            counts = set(caps)
            if full is not None:  # caps at and around the sizes of the plans, where the answer changes
                counts |= {len(full) - 1, len(full), len(full) + 1}
            for cap in sorted(c for c in counts if c >= 0):
                assert memory._index_ids(txn, ns, flt, cap) == reference_ids(memory, txn, ns, flt, cap), cap

    try:
        check()
    finally:
        store.close()


def test_the_inline_membership_walk_gives_the_pages_of_the_called_one(tmp_path):
    store = Store(str(tmp_path / "walk"))
    clock = Clock()
    memory = mem.Memory(store, clock)
    real_test = memory._member_test

    def called(*a):  # the same test without its point: _by_update calls it per entry
        test = real_test(*a)
        return None if test is None else (lambda idb: test(idb))

    batches = st.lists(puts, min_size=1, max_size=4)

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(script=batches, expr=st.one_of(st.builds(lambda v: {"n": v}, small),
                                          st.builds(lambda v, w: {"n": v, "m": {"$ne": w}}, small, small)),
           order=st.sampled_from([1, 2, 3]), prefix=st.sampled_from([[], ["p"]]), size=st.sampled_from([1, 2, 5]),
           tiny=st.booleans())
    def check(script, expr, order, prefix, size, tiny):
        ns = f"w{uuid.uuid4().hex[:10]}"
        for batch in script:  # one update time per batch: the newest-first walk sorts groups
            run(api.batch(memory, pb.BatchMemoryRequest(namespace=ns, ops=[
                pb.MemoryOp(put=pb.PutMemoryItemRequest(path=list(path), key=f"k{key}", value=V(value)))
                for path, key, value in batch])))
            clock.now += 1_000_000

        def pages():
            seen, token = [], ""
            while True:
                resp = run(api.search(memory, pb.SearchMemoryItemsRequest(
                    namespace=ns, path_prefix=prefix, order=order, page_size=size, page_token=token,
                    filter=pb.MemoryFilter(expression=V(expr)), refresh_ttl=False)))
                seen.append(([(tuple(s.item.path), s.item.key, s.item.version) for s in resp.items],
                             resp.next_page_token))
                token = resp.next_page_token
                if not token:
                    return seen
        try:
            if tiny:
                memory.INDEX_CAP, memory.INDEX_MIN, memory.INDEX_PER_WANTED, memory.INDEX_PROBE = 3, 1, 1, 1
            else:  # the walk alone (small scripts: the index would answer them all)
                memory._index_plan = lambda *a: None
            inline = pages()
            memory._member_test = called
            assert pages() == inline
        finally:
            memory._member_test = real_test
            for attr in ("INDEX_CAP", "INDEX_MIN", "INDEX_PER_WANTED", "INDEX_PROBE", "_index_plan"):
                memory.__dict__.pop(attr, None)

    try:
        check()
    finally:
        store.close()


def test_a_one_key_test_carries_its_point_and_the_walk_uses_it(tmp_path):
    store = Store(str(tmp_path / "point"))
    memory = mem.Memory(store, Clock())
    run(api.batch(memory, pb.BatchMemoryRequest(ops=[
        pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d"], key=f"k{i}", value=V({"g": i % 3})))
        for i in range(30)])))
    flt = api.filter_tree(pb.MemoryFilter(expression=V({"g": 1})))
    with store.read() as txn:
        test = memory._member_test(txn, "default", flt)
        assert test.point is not None and test.point[1] is None  # (no unindexed item here)
        walk = mem._Walk(test, 10**9)
        walk.test = None  # the inline walk must not call the test
        got = [e[2] for e in memory._by_update(txn, "default", ("d",), None, walk)]
    assert got == sorted(f"k{i}" for i in range(30) if i % 3 == 1) and walk.seen == 30
    store.close()


def test_the_probe_reads_slices_past_the_first_one(tmp_path):
    """More entries in one interval than the first slice (64): the doubling slices, at every cap around their
    edges, against the reference, next to a rare value (its slice ends past the interval at once)."""
    store = Store(str(tmp_path / "slices"))
    memory = mem.Memory(store, Clock())
    run(api.batch(memory, pb.BatchMemoryRequest(ops=[
        pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d"], key=f"k{i}", value=V({"g": 0 if i % 50 else 1, "i": i})))
        for i in range(400)])))
    with store.read() as txn:
        for expr in ({"g": 0}, {"g": 1}, {"i": {"$gte": 10, "$lt": 390}}, {"g": {"$in": [0, 1]}}, {"i": 7}):
            flt = api.filter_tree(pb.MemoryFilter(expression=V(expr)))
            full = reference_ids(memory, txn, "default", flt, 10**9)
            assert full is not None and len(full) in (392, 8, 381, 400, 1)  # (range bounds are inclusive)
            for cap in (0, 1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 191, 192, 193, 379, 380, 381, 391, 392, 393,
                        399, 400, 401, 4096):
                assert memory._index_ids(txn, "default", flt, cap) == reference_ids(
                    memory, txn, "default", flt, cap), (expr, cap)
    store.close()
