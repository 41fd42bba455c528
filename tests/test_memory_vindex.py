"""The resident vector index (docs/memory.md §5): side by side with the scan it replaced and with numpy.

Random scripts of puts (REPLACE and MERGE, two vector spaces, several fields, TTLs), deletes, failing batches
(their writes must never reach the index), clock moves (ties of update times, expiries) and searches (prefixes,
fields, filters the field index can and cannot serve, the three orders, offsets) run against one store; every
search is answered by the resident index and by the scan (``Memory._vector_scan``, which reads every candidate
from the snapshot) and the answers must be equal: the same items, scores, fields and order. A search on a
snapshot taken before later writes must answer as of that snapshot. Both durability modes run.
"""
from __future__ import annotations

import asyncio
from array import array

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import codec
from agentstate.v1 import memory_pb2 as pb
from agentstate.v1 import values_pb2
from google.protobuf import duration_pb2
from sidecar.api import memory as api
from sidecar.errors import ApiError
from sidecar.state import memory as mem
from sidecar.state import memory_vectors as mv
from sidecar.storage import vectors
from sidecar.storage.store import Store


def V(x):
    return values_pb2.Value(msgpack=codec.encode(x))


class ManualClock:
    """Time moves only when the script says so: puts share update times (ties) and TTLs run out."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000

    def __call__(self) -> int:
        return self.now


def run(coro):
    return asyncio.run(coro)


PATHS = [("a",), ("a", "x"), ("a", "y"), ("b",)]
KEYS = ["k0", "k1", "k2", "k3", "k4"]
FIELDS = ["f", "g", "h"]
comp = st.integers(-2, 2)
vec3 = st.lists(comp, min_size=3, max_size=3)
vec2 = st.lists(comp, min_size=2, max_size=2)

put_op = st.tuples(
    st.just("put"), st.sampled_from(PATHS), st.sampled_from(KEYS),
    st.fixed_dictionaries({"g": st.integers(0, 2), "s": st.sampled_from(["p", "q"])}),
    st.sampled_from(["", "two"]),  # the default space (3 dims) or "two" (2 dims)
    st.dictionaries(st.sampled_from(FIELDS), st.none(), max_size=3),
    st.sampled_from([pb.VECTOR_UPDATE_REPLACE, pb.VECTOR_UPDATE_MERGE]),
    st.one_of(st.none(), st.integers(1, 3)),  # ttl in minutes
    st.data())
del_op = st.tuples(st.just("del"), st.sampled_from(PATHS), st.sampled_from(KEYS))
fail_op = st.tuples(st.just("failbatch"), st.sampled_from(PATHS), st.sampled_from(KEYS), vec3)
tick_op = st.tuples(st.just("tick"), st.sampled_from([0, 1, 30_000, 61_000, 200_000]))  # ms
search_op = st.tuples(
    st.just("search"), st.sampled_from([(), ("a",), ("a", "x"), ("b",)]), st.sampled_from(["", "two"]),
    st.lists(st.sampled_from(FIELDS), unique=True, max_size=2),
    st.sampled_from([None, {"g": 1}, {"g": {"$ne": 1}}, {"s": "q"}, {"$or": [{"g": 0}, {"s": "p"}]},
                     {"g": {"$gte": 1}}, {"g": {"$in": [0, 2]}, "s": {"$lt": "q"}}]),
    st.sampled_from([pb.MEMORY_ORDER_UPDATED_DESC, pb.MEMORY_ORDER_INSERTION, pb.MEMORY_ORDER_PATH_KEY]),
    st.integers(1, 6), st.integers(0, 4), st.data())
snap_op = st.tuples(st.just("snapshot"))
script = st.lists(st.one_of(put_op, put_op, del_op, fail_op, tick_op, search_op, search_op, snap_op), max_size=40)


def put_req(path, key, value, space, fields, update, ttl, vec_of):
    req = pb.PutMemoryItemRequest(path=list(path), key=key, value=V(value), vector_space=space,
                                  vector_update=update)
    for f in fields:
        req.vectors[f].values.extend(vec_of(f))
    if ttl is not None:
        req.ttl.CopyFrom(duration_pb2.Duration(seconds=60 * ttl))
    return req


def search_input(prefix, space, fields, flt, order, limit, offset, q):
    req = pb.SearchMemoryItemsRequest(path_prefix=list(prefix), limit=limit, offset=offset, order=order,
                                      refresh_ttl=False,
                                      vector=pb.VectorQuery(vector=pb.Vector(values=q), fields=list(fields),
                                                            space=space))
    if flt is not None:
        req.filter.expression.CopyFrom(V(flt))
    s, _ = api.search_input("default", req)
    return s


def answer(found):
    return [(f.path, f.key, f.score, f.field, f.rec.version, f.value) for f in found]


def on_held(fn):
    """fn() or the reason it failed with (a space created after the snapshot does not exist in it)."""
    try:
        return fn()
    except ApiError as e:
        assert e.reason == "VECTOR_SPACE_NOT_FOUND"
        return e.reason


def before_pair(before):
    return before if isinstance(before, str) else (before, before)


def both(memory, txn, s, now, resident=True):
    """(resident answer, scan answer) of one search on the snapshot ``txn``; ``resident``: the index must
    answer it (not leave it to the scan)."""
    real = memory._vector_resident
    used = []
    memory._vector_resident = lambda *a: used.append(real(*a)) or used[-1]
    try:
        got, _ = memory.search(txn, "default", s, now)
    finally:
        memory._vector_resident = real
    assert not resident or used and used[0] is not None
    memory._vector_resident = lambda *a: None
    try:
        want, _ = memory.search(txn, "default", s, now)
    finally:
        memory._vector_resident = real
    return answer(got), answer(want)


@pytest.mark.parametrize("durability", ["sync", "process"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(ops=script)
def test_resident_index_answers_as_the_scan(tmp_path_factory, durability, ops):
    store = Store(str(tmp_path_factory.mktemp("vi") / "data"), durability=durability)
    clock = ManualClock()
    memory = mem.Memory(store, clock)
    held = None  # (snapshot context, snapshot, searches to check on it later)
    answered = 0
    try:
        for op in ops:
            kind = op[0]
            if kind == "put":
                _, path, key, value, space, fields, update, ttl, data = op
                dims = 2 if space == "two" else 3
                vec = data.draw(vec2 if dims == 2 else vec3)
                try:
                    run(api.put(memory, put_req(path, key, value, space, fields, update, ttl, lambda f: vec)))
                except ApiError as e:  # one space per item: a MERGE into another space, a dimension clash
                    assert e.reason in ("VECTOR_DIMENSION_MISMATCH", "INVALID_ARGUMENT"), e.reason
            elif kind == "del":
                try:
                    run(api.delete(memory, pb.DeleteMemoryItemRequest(path=list(op[1]), key=op[2])))
                except ApiError as e:
                    assert e.reason == "MEMORY_ITEM_NOT_FOUND"
            elif kind == "failbatch":  # a put that is applied, then an op that fails: nothing may remain
                _, path, key, vec = op
                batch = pb.BatchMemoryRequest(ops=[
                    pb.MemoryOp(put=put_req(path, key, {"g": 9, "s": "z"}, "", ["f"], pb.VECTOR_UPDATE_REPLACE,
                                            None, lambda f: vec)),
                    pb.MemoryOp(put=pb.PutMemoryItemRequest(path=list(path), key=key, value=V({}),
                                                            must_not_exist=True))])
                with pytest.raises(ApiError):
                    run(api.batch(memory, batch))
            elif kind == "tick":
                clock.now += op[1] * 1000
            elif kind == "snapshot":
                if held is None:
                    ctx = store.read()
                    held = (ctx, ctx.__enter__(), [])
            else:
                _, prefix, space, fields, flt, order, limit, offset, data = op
                q = data.draw(vec2 if space == "two" else vec3)
                s = search_input(prefix, space or "default", fields, flt, order, limit, offset, q)
                try:
                    with store.read() as txn:
                        got, want = both(memory, txn, s, clock.now)
                except ApiError as e:  # the space does not exist yet: both paths refuse alike
                    assert e.reason == "VECTOR_SPACE_NOT_FOUND"
                    continue
                assert got == want
                answered += 1
                if held is not None:
                    held[2].append((s, clock.now, on_held(lambda: answer(memory.search(held[1], "default", s,
                                                                                       clock.now)[0]))))
        if held is not None:  # the held snapshot still answers as it did, after every later write
            for s, now, before in held[2]:
                assert on_held(lambda: both(memory, held[1], s, now, resident=False)) == before_pair(before)
    finally:
        if held is not None:
            held[0].__exit__(None, None, None)
        store.close()


@pytest.mark.parametrize("split", [False, True])
def test_resident_index_top10_equals_numpy_and_the_scan(tmp_path, monkeypatch, split):
    monkeypatch.setattr(mv, "SPLIT", split)  # two threads score half the rows each, or one all of them
    monkeypatch.setattr(mv, "SPLIT_WORK", 0)
    monkeypatch.setattr(mv, "_cores_idle", lambda: True)  # (the split is skipped on a busy machine)
    store = Store(str(tmp_path / "data"))
    memory = mem.Memory(store, ManualClock())
    rng = np.random.default_rng(7)
    n, dims = 3000, 96
    matrix = rng.standard_normal((n, dims)).astype(np.float32)
    for start in range(0, n, 500):
        run(api.batch(memory, pb.BatchMemoryRequest(ops=[
            pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["d"], key=f"k{i:05}", value=V({"i": i, "g": i % 3}),
                                                    vectors={"t": pb.Vector(values=matrix[i].tolist())}))
            for i in range(start, min(n, start + 500))])))
    q = rng.standard_normal(dims).astype(np.float32)
    m64, q64 = matrix.astype(np.float64), q.astype(np.float64)
    scores = (m64 @ q64) / (np.linalg.norm(m64, axis=1) * np.linalg.norm(q64))
    for flt, keep in ((None, range(n)), ({"g": {"$ne": 1}}, [i for i in range(n) if i % 3 != 1]),
                      ({"g": 2}, [i for i in range(n) if i % 3 == 2])):
        s = search_input((), "default", [], flt, pb.MEMORY_ORDER_UPDATED_DESC, 10, 0, q.tolist())
        with store.read() as txn:
            got, want = both(memory, txn, s, memory.clock())
        assert got == want
        assert [k for _, k, *_ in got] == [f"k{i:05}" for i in sorted(keep, key=lambda i: -scores[i])[:10]]
        assert np.allclose([sc for _, _, sc, *_ in got], sorted(scores[list(keep)], reverse=True)[:10],
                           rtol=1e-12)
    store.close()


def test_the_kernel_twins_agree_on_masks(tmp_path):
    """best_scores and select_top: the compiled kernel and its twin give the same bits, masks included."""
    from sidecar.storage import _vectors_py
    try:
        from sidecar.storage import _vectors_c
    except ImportError:  # pragma: no cover - a build without a compiler
        pytest.skip("no compiled kernel in this build")
    rng = np.random.default_rng(2)
    rows, dims, slots = 90, 13, 40
    m = rng.integers(-3, 4, (rows, dims)).astype(np.float32)
    m[5] = 0.0
    buf = bytearray(m.tobytes())
    sq = array("d", [_vectors_py.sq_norm(m[i].tobytes()) for i in range(rows)])
    assert list(sq) == [_vectors_c.sq_norm(m[i].tobytes()) for i in range(rows)]
    row_slot = array("q", [i % slots if i % 11 else -1 for i in range(rows)])
    row_field = array("q", [i % 3 for i in range(rows)])
    slot_path = array("q", [i % 4 if i % 7 else -1 for i in range(slots)])
    slot_exp = array("q", [0 if i % 5 else 100 + i for i in range(slots)])
    q = rng.integers(-3, 4, dims).astype(np.float32).tobytes()
    for field_ok, slot_ok, now in ((None, None, 0), (b"\x01\x00\x01", None, 120),
                                   (None, bytes(i % 2 for i in range(slots)), 1000)):
        args = (buf, dims, sq, q, row_slot, row_field, field_ok, slot_path, b"\x01\x01\x00\x01", slot_exp, now,
                slot_ok, slots)
        a, b = _vectors_py.best_scores(*args), _vectors_c.best_scores(*args)
        assert a.tobytes() == b.tobytes()
        # each slot's best equals the old kernel's scores of its live, wanted rows
        old = vectors.cosine_scores(buf, dims, array("q", range(rows)), q)
        for slot in range(slots):
            ok = (slot_path[slot] >= 0 and slot_path[slot] != 2 and (slot_exp[slot] == 0 or slot_exp[slot] > now)
                  and (slot_ok is None or slot_ok[slot]))
            mine = [old[r] for r in range(rows) if row_slot[r] == slot and
                    (field_ok is None or field_ok[row_field[r]])]
            assert a[slot] == (max(mine) if ok and mine else float("-inf"))
        halves = [impl.merge_max(impl.best_scores(*args, 0, 37), impl.best_scores(*args, 37, rows))
                  for impl in (_vectors_py, _vectors_c)]
        assert halves[0].tobytes() == halves[1].tobytes() == a.tobytes()  # rows split in two, merged
        for k in (1, 3, 10, 100):
            assert list(_vectors_py.select_top(a, k)) == list(_vectors_c.select_top(a, k))
            present = sorted((x for x in a if x != float("-inf")), reverse=True)
            chosen = _vectors_c.select_top(a, k)
            if present:
                thr = present[min(k, len(present)) - 1]
                assert sorted(chosen) == [i for i, x in enumerate(a) if x != float("-inf") and x >= thr]
    with pytest.raises(ValueError):
        _vectors_c.best_scores(buf, dims, sq, q[:-4], row_slot, row_field, None, slot_path, b"\x01", slot_exp, 0,
                               None, slots)
    with pytest.raises(IndexError):
        _vectors_c.best_scores(buf, dims, sq, q, row_slot, row_field, None, slot_path, b"\x01", slot_exp, 0,
                               None, slots + 1)


def test_staged_writes_wait_for_their_commit(tmp_path):
    """A write's changes reach the index only when a reader's snapshot shows them; a snapshot from before
    them is answered by the scan (the index is ahead of it)."""
    store = Store(str(tmp_path / "data"))
    memory = mem.Memory(store, ManualClock())
    run(api.put(memory, put_req(("p",), "a", {}, "", ["t"], 0, None, lambda f: [1, 0, 0])))
    assert memory.build_index() == 1
    st_ = memory.index.namespaces["default"]
    assert not st_.pending and len(st_.items) == 1
    with store.read() as old:
        run(api.put(memory, put_req(("p",), "a", {}, "", ["t"], 0, None, lambda f: [0, 1, 0])))
        assert memory.index.namespaces["default"] is st_ and len(st_.pending) == 1  # staged, not applied
        assert st_.items[1].version == 1
        s = search_input((), "default", [], None, 1, 5, 0, [0, 1, 0])
        with store.read() as now_txn:
            got, want = both(memory, now_txn, s, memory.clock())
        assert got == want and got[0][2] == 1.0
        assert memory.index.namespaces["default"] is st_ and not st_.pending and st_.items[1].version == 2
        assert memory.index.view(old, memory.db["meta"], "default", None) is None  # older than the index
        got, want = both(memory, old, s, memory.clock(), resident=False)
        assert got == want and got[0][2] == 0.0
    store.close()


def test_many_writes_without_a_reader_stay_bounded(tmp_path):
    store = Store(str(tmp_path / "data"))
    memory = mem.Memory(store, ManualClock())
    for i in range(3 * mv.MAX_PENDING):
        run(api.put(memory, put_req(("p",), f"k{i}", {}, "", ["t"], 0, None, lambda f: [1, i, 0])))
    assert len(memory.index.namespaces["default"].pending) <= mv.MAX_PENDING + 1
    s = search_input((), "default", [], None, 1, 3, 0, [1, 0, 0])
    with store.read() as txn:
        got, want = both(memory, txn, s, memory.clock())
    assert got == want and got[0][1] == "k0"
    store.close()
