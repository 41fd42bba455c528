"""The pruned vector kernel (storage/vectors.py ``best_top``, ``quantize``): the same bits in both twins, and the
same top k as the full kernel (``best_scores``), whatever the rows.

``best_top`` scores every wanted row first from its int8 copy with an error bound and then exactly only the rows
that may reach the k-th best; its answer is defined as best_scores cut to the slots at or above the k-th best
score, which is what the pure-Python twin computes. Random spaces (zero rows, duplicated rows, rows a few ulps
apart, rows with one huge component, several fields per item, free rows and slots, path, field, expiry and
candidate masks, row ranges as the two threads split them) check that the compiled kernel gives those bits.
"""
from __future__ import annotations

import math
import random
import struct
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.storage import _vectors_py

try:
    from sidecar.storage import _vectors_c
except ImportError:  # pragma: no cover - a build without the extension
    _vectors_c = None

IMPLS = [_vectors_py] + ([_vectors_c] if _vectors_c is not None else [])


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def space(rnd: random.Random, dims: int, nrows: int, impl):
    rows: list[list[float]] = []
    for _ in range(nrows):
        kind = rnd.random()
        if kind < 0.08:
            v = [0.0] * dims
        elif kind < 0.2 and rows:
            v = list(rows[rnd.randrange(len(rows))])  # a tie
        elif kind < 0.3 and rows:
            v = [f32(x * (1 + 2 ** -22 * rnd.choice([-1, 1]))) for x in rows[rnd.randrange(len(rows))]]  # near tie
        elif kind < 0.36:
            v = [f32(rnd.gauss(0, 1e-3)) for _ in range(dims)]
            v[rnd.randrange(dims)] = f32(rnd.choice([-1, 1]) * 1e30)  # one huge component: a wide bound
        else:
            v = [f32(rnd.gauss(0, 1)) for _ in range(dims)]
        rows.append(v)
    data = [array("f", r).tobytes() for r in rows]
    buf = bytearray(b"".join(data))
    sq = array("d", [impl.sq_norm(d) for d in data])
    qbuf, qs = bytearray(), array("d")
    for d in data:
        q8, s = impl.quantize(d)
        qbuf += q8
        qs.append(s)
    return rows, buf, sq, qbuf, qs


@pytest.mark.parametrize("seed", range(6))
def test_the_twins_agree_and_the_top_k_is_the_full_kernels(seed):
    rnd = random.Random(seed)
    for _ in range(60):
        dims = rnd.choice([1, 2, 7, 8, 31, 32, 33, 64, 96, 130])
        nrows = rnd.randint(0, 80)
        rows, buf, sq, qbuf, qs = space(rnd, dims, nrows, IMPLS[-1])
        nslots = max(1, nrows // 2 + rnd.randint(0, 3))
        row_slot = array("q", [rnd.randrange(-1, nslots) for _ in range(nrows)])  # -1: a free row
        row_field = array("q", [rnd.randrange(3) for _ in range(nrows)])
        slot_path = array("q", [rnd.randrange(-1, 3) for _ in range(nslots)])
        slot_exp = array("q", [rnd.choice([0, 0, 5, 50]) for _ in range(nslots)])
        field_ok = rnd.choice([None, b"\x01\x00\x01", b"\x00\x01\x00"])
        slot_ok = rnd.choice([None, bytes(rnd.randrange(2) for _ in range(nslots))])
        path_ok = rnd.choice([b"\x01\x01\x01", b"\x01\x00\x01"])
        if nrows and rnd.random() < 0.4:
            query = rows[rnd.randrange(nrows)]  # a score of 1 and its near ties
        else:
            query = [f32(rnd.gauss(0, 1)) for _ in range(dims)]
        if rnd.random() < 0.05:
            query = [0.0] * dims
        qv = array("f", query).tobytes()
        k = rnd.choice([1, 2, 3, 5, 10, 200])
        ranges = [(0, -1)]
        if nrows:
            half = nrows // 2
            ranges += [(0, half), (half, nrows), (rnd.randint(0, nrows), rnd.randint(0, nrows))]
        for lo, hi in ranges:
            rest = (path_ok, slot_exp, 20, slot_ok, nslots)
            got = [impl.best_top(buf, dims, sq, qbuf, qs, qv, row_slot, row_field, field_ok, slot_path, *rest, k,
                                 lo, hi) for impl in IMPLS]
            assert all(g.tobytes() == got[0].tobytes() for g in got), (dims, nrows, k, lo, hi)
            full = IMPLS[-1].best_scores(buf, dims, sq, qv, row_slot, row_field, field_ok, slot_path, *rest, lo, hi)
            assert list(IMPLS[-1].select_top(got[0], k)) == list(IMPLS[-1].select_top(full, k))
            kept = [i for i, b in enumerate(got[0]) if b != float("-inf")]
            assert all(got[0][i] == full[i] for i in kept)  # kept slots have their exact best score


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=70))
def test_quantize_twins_and_bound(xs):
    data = array("f", xs).tobytes()
    outs = [impl.quantize(data) for impl in IMPLS]
    assert all(o == outs[0] for o in outs)
    q8, s = outs[0]
    q = array("b", q8)
    assert len(q) == len(xs) and all(-127 <= v <= 127 for v in q)
    if s == 0.0:
        assert all(x == 0.0 for x in xs) and not any(q)
    elif math.isfinite(s):
        assert all(abs(x - s * v) <= s * 0.5000001 for x, v in zip(xs, q))


def test_k_below_one_is_refused():
    for impl in IMPLS:
        with pytest.raises(ValueError):
            impl.best_top(bytearray(4), 1, array("d", [1.0]), bytearray(1), array("d", [1.0]),
                          array("f", [1.0]).tobytes(), array("q", [0]), array("q", [0]), None, array("q", [0]), b"\x01",
                          array("q", [0]), 0, None, 1, 0)


def test_a_filter_that_rejects_most_hits_widens_k_and_answers_as_the_scan(tmp_path):
    """The resident search asks best_top for more (k x 8) while the filter rejects what it kept: the answer is
    the scan's (the filter below has no index plan, so every hit is re-checked)."""
    import asyncio

    from agentstate import codec
    from agentstate.v1 import memory_pb2 as pb
    from agentstate.v1 import values_pb2
    from sidecar.api import memory as api
    from sidecar.state import memory as mem
    from sidecar.storage.store import Store

    def V(x):
        return values_pb2.Value(msgpack=codec.encode(x))
    rnd = random.Random(3)
    store = Store(str(tmp_path / "wide"))
    memory = mem.Memory(store)
    n, dims = 3000, 48
    for start in range(0, n, 500):
        asyncio.run(api.batch(memory, pb.BatchMemoryRequest(ops=[
            pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d"], key=f"k{i:05}", value=V({"i": i, "g": i % 3}), vectors={
                "t": pb.Vector(values=[rnd.gauss(0, 1) for _ in range(dims)])})) for i in range(start, start + 500)])))
    q = [rnd.gauss(0, 1) for _ in range(dims)]
    calls = []
    real_top = mem.mv.vectors.best_top
    try:
        mem.mv.vectors.best_top = lambda *a: calls.append(a[15]) or real_top(*a)
        for flt, hits in (({"$or": [{"g": 5}, {"i": {"$in": [7, 2999]}}]}, 2), ({"$or": [{"g": 1}, {"i": 0}]}, 10)):
            req = pb.SearchMemoryItemsRequest(path_prefix=["d"], limit=10, filter=pb.MemoryFilter(expression=V(flt)),
                                              vector=pb.VectorQuery(vector=pb.Vector(values=q)), refresh_ttl=False)
            s, _ = api.search_input("default", req)
            calls.clear()
            with store.read() as txn:
                got = [(f.key, f.score, f.field) for f in memory.search(txn, "default", s, memory.clock())[0]]
            assert calls and calls[0] == 40
            if hits == 2:
                assert calls[-1] >= n  # widened until every item had a chance
            real = memory._vector_resident
            memory._vector_resident = lambda *a: None
            try:
                with store.read() as txn:
                    want = [(f.key, f.score, f.field) for f in memory.search(txn, "default", s, memory.clock())[0]]
            finally:
                memory._vector_resident = real
            assert got == want and len(got) == hits
    finally:
        mem.mv.vectors.best_top = real_top
        store.close()
