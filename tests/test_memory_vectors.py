"""Memory vectors (docs/memory.md §5): the kernel twins (bit for bit, against numpy float64, the GIL released),
cosine top-k through the search with filters, ties, max pooling over fields, REPLACE/MERGE, UNSCORED_ONLY,
deep offsets, a search on an older snapshot than the index, and the index rebuilt after a SIGKILL.
"""
from __future__ import annotations

import asyncio
import os
import random
import struct
import threading
import time
from array import array

import grpc
import numpy as np
import pytest
from conftest import SidecarProcess

from agentstate import codec
from agentstate.v1 import memory_pb2 as pb
from agentstate.v1 import memory_pb2_grpc, values_pb2
from sidecar.api import memory as api
from sidecar.state import memory as mem
from sidecar.storage import _vectors_py, vectors
from sidecar.storage.store import Store

try:
    from sidecar.storage import _vectors_c
except ImportError:  # pragma: no cover - a build without a compiler
    _vectors_c = None

TWINS = [_vectors_py] + ([_vectors_c] if _vectors_c is not None else [])


def V(x):
    return values_pb2.Value(msgpack=codec.encode(x))


def f32(values) -> bytes:
    return array("f", values).tobytes()


def bits(xs) -> list[int]:
    return [struct.unpack("<Q", struct.pack("<d", x))[0] for x in xs]


def numpy_scores(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    m64, q64 = matrix.astype(np.float64), q.astype(np.float64)
    norms = np.linalg.norm(m64, axis=1) * np.linalg.norm(q64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (m64 @ q64) / norms
    out[norms == 0] = 0.0
    return out


# ---------------------------------------------------------------- the kernel

AWKWARD = [
    [0.0] * 8,  # zero row scores 0
    [1e-40, -1e-40, 1e-41] + [0.0] * 5,  # subnormals
    [3e38, -3e38, 1.0, 0, 0, 0, 0, 0],  # squares overflow float32, not float64
    [1, 2, 3, 4, 5, 6, 7, 8],
    [-1, -2, -3, -4, -5, -6, -7, -8],
    [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
]


def test_the_selector_picks_the_expected_kernel():
    assert _vectors_c is not None, "the compiled kernel was not built (setup.py)"
    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert vectors.implementation is _vectors_py and not vectors.NATIVE
    else:
        assert vectors.implementation is _vectors_c and vectors.NATIVE


@pytest.mark.parametrize("dims, n, seed", [(8, 6, 0), (3, 50, 1), (768, 40, 2), (17, 33, 3), (1, 5, 4)])
def test_twins_agree_bit_for_bit_and_match_numpy(dims, n, seed):
    rng = random.Random(seed)
    rows = [[rng.uniform(-2, 2) for _ in range(dims)] for _ in range(n)]
    if dims == 8:
        rows = AWKWARD
    matrix = np.array(rows, dtype=np.float32)
    q = np.array([rng.uniform(-1, 1) for _ in range(dims)], dtype=np.float32)
    order = array("q", rng.sample(range(len(rows)), len(rows)))
    results = [twin.cosine_scores(bytearray(matrix.tobytes()), dims, order, q.tobytes()) for twin in TWINS]
    for r in results[1:]:
        assert bits(r) == bits(results[0])
    want = numpy_scores(matrix, q)[list(order)]
    assert np.allclose(np.array(results[0]), want, rtol=1e-12, atol=1e-300)


def test_integer_vectors_score_exactly_as_numpy():
    rng = random.Random(7)
    matrix = np.array([[rng.randint(-9, 9) for _ in range(64)] for _ in range(100)], dtype=np.float32)
    q = np.array([rng.randint(-9, 9) for _ in range(64)], dtype=np.float32)
    got = vectors.cosine_scores(bytearray(matrix.tobytes()), 64, array("q", range(100)), q.tobytes())
    want = numpy_scores(matrix, q)
    assert bits(got) == bits(want.tolist())


def test_kernel_checks_its_arguments():
    for twin in TWINS:
        with pytest.raises(ValueError):
            twin.cosine_scores(bytearray(f32([1, 2])), 2, array("q", [0]), f32([1]))
        with pytest.raises(IndexError):
            twin.cosine_scores(bytearray(f32([1, 2])), 2, array("q", [1]), f32([1, 2]))
        assert list(twin.cosine_scores(bytearray(), 2, array("q"), f32([1, 2]))) == []


@pytest.mark.skipif(_vectors_c is None, reason="no compiled kernel in this build")
def test_native_kernel_releases_the_gil():
    dims, n = 768, 20000
    matrix = bytearray(np.random.default_rng(0).standard_normal((n, dims), dtype=np.float32).tobytes())
    rows = array("q", list(range(n)) * 3)
    q = f32([1.0] * dims)
    ticks = [0]
    inside = threading.Event()
    done = threading.Event()

    def spin():
        inside.wait()
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    inside.set()
    seen = []
    try:
        for _ in range(5):  # a busy machine may not run the spinner during one call: a few tries
            before = ticks[0]
            start = time.perf_counter()
            _vectors_c.cosine_scores(matrix, dims, rows, q)  # one C call: with the GIL held no Python thread ticks
            seen.append((ticks[0] - before, time.perf_counter() - start))
            if seen[-1][0] > 0:
                break
    finally:
        done.set()
        t.join()
    assert any(during > 0 for during, _ in seen), seen


# ---------------------------------------------------------------- search, in-process

class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000

    def __call__(self) -> int:
        self.now += 1000  # every call a millisecond later: no two puts share an update time
        return self.now


@pytest.fixture
def local(tmp_path):
    store = Store(str(tmp_path / "data"))
    memory = mem.Memory(store, Clock())
    yield memory
    store.close()


def run(coro):
    return asyncio.run(coro)


def put(memory, path, key, value, vectors=None, space="", update=0):
    req = pb.PutMemoryItemRequest(path=list(path), key=key, value=V(value), vector_space=space, vector_update=update)
    for name, vec in (vectors or {}).items():
        req.vectors[name].values.extend(vec)
    return run(api.put(memory, req))


def vsearch(memory, q, *, prefix=(), limit=10, offset=0, fields=(), space="", flt=None, order=0, unscored=0):
    req = pb.SearchMemoryItemsRequest(path_prefix=list(prefix), limit=limit, offset=offset, order=order,
                                      vector=pb.VectorQuery(vector=pb.Vector(values=q), fields=list(fields),
                                                            space=space, unscored=unscored))
    if flt is not None:
        req.filter.expression.CopyFrom(V(flt))
    return [(s.item.key, s.score if s.HasField("score") else None, s.field) for s in
            run(api.search(memory, req)).items]


def test_top_k_with_a_filter_equals_numpy(local):
    rng = np.random.default_rng(11)
    n, dims = 600, 48
    matrix = rng.standard_normal((n, dims)).astype(np.float32)
    ops = [pb.MemoryOp(put=pb.PutMemoryItemRequest(path=["docs", f"g{i % 4}"], key=f"k{i:04}", value=V({"i": i, "g": i % 4}),
                                                   vectors={"text": pb.Vector(values=matrix[i].tolist())}))
           for i in range(n)]
    for start in range(0, n, 200):
        run(api.batch(local, pb.BatchMemoryRequest(ops=ops[start:start + 200])))
    q = rng.standard_normal(dims).astype(np.float32)
    scores = numpy_scores(matrix, q)
    keep = [i for i in range(n) if i % 4 != 1]
    want = sorted(keep, key=lambda i: -scores[i])[:10]
    got = vsearch(local, q.tolist(), flt={"g": {"$ne": 1}})
    assert [k for k, _, _ in got] == [f"k{i:04}" for i in want]
    assert np.allclose([s for _, s, _ in got], scores[want], rtol=1e-12)
    assert all(f == "text" for _, _, f in got)
    # the best items fail the filter: the next ones come, offsets count passing items only
    best5 = sorted(range(n), key=lambda i: -scores[i])[:5]
    rest = [i for i in sorted(range(n), key=lambda i: -scores[i]) if i not in best5]
    got = vsearch(local, q.tolist(), flt={"i": {"$nin": best5}}, limit=4, offset=3)
    assert [k for k, _, _ in got] == [f"k{i:04}" for i in rest[3:7]]
    # a prefix limits the candidates; deep offsets stay exact
    in_g2 = sorted([i for i in range(n) if i % 4 == 2], key=lambda i: -scores[i])
    assert [k for k, _, _ in vsearch(local, q.tolist(), prefix=("docs", "g2"), limit=5, offset=40)] == [
        f"k{i:04}" for i in in_g2[40:45]]


def test_ties_max_pooling_fields_and_updates(local):
    put(local, ("p",), "a", {"n": 1}, {"x": [1, 0], "y": [0, 1]})
    put(local, ("p",), "b", {"n": 2}, {"x": [1, 0]})
    put(local, ("p",), "c", {"n": 3}, {"y": [1, 1]})
    put(local, ("p",), "none", {"n": 4})
    # ties: a and b both score 1 on [1, 0]; UPDATED_DESC puts the newer (b) first, INSERTION the older (a)
    assert [k for k, _, _ in vsearch(local, [1, 0])][:2] == ["b", "a"]
    assert [k for k, _, _ in vsearch(local, [1, 0], order=pb.MEMORY_ORDER_INSERTION)][:2] == ["a", "b"]
    # max over the item's fields; only the queried fields when given
    got = dict((k, (s, f)) for k, s, f in vsearch(local, [0, 1]))
    assert got["a"] == (1.0, "y") and got["b"] == (0.0, "x")
    assert [k for k, _, _ in vsearch(local, [0, 1], fields=["x"])] == ["b", "a"]  # c has no x; both score 0
    assert [k for k, _, _ in vsearch(local, [1, 0], unscored=pb.UNSCORED_ONLY)] == ["none"]
    assert vsearch(local, [0, 0])[0][1] == 0.0  # a zero query scores 0
    # REPLACE (default) leaves exactly the given vectors; MERGE keeps the other fields
    put(local, ("p",), "a", {"n": 1}, {"x": [0, 1]})
    assert dict((k, f) for k, _, f in vsearch(local, [0, 1]))["a"] == "x"
    put(local, ("p",), "a", {"n": 1}, {"y": [1, 0]}, update=pb.VECTOR_UPDATE_MERGE)
    item = run(api.get(local, pb.GetMemoryItemRequest(path=["p"], key="a", include_vectors=True))).item
    assert list(item.vector_fields) == ["x", "y"] and list(item.vectors["x"].values) == [0, 1]
    put(local, ("p",), "a", {"n": 1})  # REPLACE with none: no vectors
    assert "a" not in [k for k, _, _ in vsearch(local, [0, 1])]
    run(api.delete(local, pb.DeleteMemoryItemRequest(path=["p"], key="b")))
    assert [k for k, _, _ in vsearch(local, [1, 0])] == ["c"]


def test_a_search_on_an_older_snapshot_than_the_index(local):
    put(local, ("p",), "a", {}, {"t": [1, 0]})
    put(local, ("p",), "b", {}, {"t": [0, 1]})
    q = mem.SearchInput(vector=mem.VectorQuery(f32([1, 0]), 2, "default"), refresh=False)
    with local.store.read() as old:
        put(local, ("p",), "a", {}, {"t": [0, 1]})
        assert vsearch(local, [0, 1])[0][:2] == ("a", 1.0)  # this search loads a's new rows into the index
        # the index now holds a's new vector; the old snapshot must still see the old one
        found, _ = local.search(old, "default", q, local.clock())
        assert [(f.key, f.score) for f in found] == [("a", 1.0), ("b", 0.0)]
    now = [(k, s) for k, s, _ in vsearch(local, [1, 0])]
    assert now == [("a", 0.0), ("b", 0.0)]


def test_the_index_is_rebuilt_from_lmdb(tmp_path):
    path = str(tmp_path / "data")
    store = Store(path)
    memory = mem.Memory(store, Clock())
    rng = np.random.default_rng(3)
    for i in range(50):
        put(memory, ("r",), f"k{i}", {"i": i}, {"t": rng.standard_normal(16).tolist()})
    q = rng.standard_normal(16).tolist()
    before = vsearch(memory, q, limit=20)
    store.close()
    store = Store(path)
    memory = mem.Memory(store, Clock())
    assert memory.build_index() == 50 and len(memory.index) == 50
    assert vsearch(memory, q, limit=20) == before
    store.close()


# ---------------------------------------------------------------- over gRPC, after a SIGKILL

def test_vectors_survive_a_sigkill(tmp_path):
    proc = SidecarProcess(tmp_path / "data").start()
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((200, 32)).astype(np.float32)
    q = rng.standard_normal(32).astype(np.float32)

    def search(stub):
        resp = stub.SearchMemoryItems(pb.SearchMemoryItemsRequest(
            limit=15, vector=pb.VectorQuery(vector=pb.Vector(values=q.tolist())),
            filter=pb.MemoryFilter(expression=V({"i": {"$lt": 150}}))), timeout=20)
        return [(s.item.key, s.score) for s in resp.items]

    try:
        with grpc.insecure_channel(proc.address) as ch:
            stub = memory_pb2_grpc.MemoryServiceStub(ch)
            for i in range(200):
                stub.PutMemoryItem(pb.PutMemoryItemRequest(path=["k"], key=f"k{i:03}", value=V({"i": i}),
                                                           vectors={"e": pb.Vector(values=matrix[i].tolist())}),
                                   timeout=20)
            before = search(stub)
        scores = numpy_scores(matrix, q)
        assert [k for k, _ in before] == [f"k{i:03}" for i in sorted(range(150), key=lambda i: -scores[i])[:15]]
        proc.kill()
        proc.start()
        with grpc.insecure_channel(proc.address) as ch:
            assert search(memory_pb2_grpc.MemoryServiceStub(ch)) == before
        assert "vectors of 200 memory items loaded" in proc.log()
    finally:
        proc.stop()
