"""The memory workload (issue 13): the sidecar's memory items side by side with LangGraph's stores in one run.

    python benchmarks/bench_memory.py [--quick] [--json out.json]     (also: benchmarks/run.py --only memory)

filter search
    N items (full: 100,000; quick: 5,000) under ("docs", "g<0..9>"), values {"i": i, "g": i % 10, "text": ...}.
    p50 of a search under ("docs",) with a common filter ({"g": 3}, limit 10) and a rare equality ({"i": 17}),
    over gRPC, next to the echo floor of the same run (the bare gRPC echo service of put-latency answering a
    request of the same size), LangGraph's InMemoryStore, SqliteStore and PostgresStore (in process, no RPC;
    PostgresStore over a unix socket to the PostgreSQL started here). Target: sidecar p50 <= 3 x the echo floor.
vector top-10 with a filter
    M items (full: 50,000 x 768 dimensions; quick: 2,000 x 64) with one seeded random float32 vector each; p50
    of the top-10 by cosine under the filter {"g": {"$ne": 1}} over gRPC, and the check that the ids equal an
    exact numpy float64 computation over the same float32 rows. InMemoryStore (its numpy float64 search, the
    vectors given by a lookup "embedder") and PostgresStore (pgvector, exact search: ``ann_index_config``
    kind ``flat``, cosine) next to it. Target: p50 <= 20 ms. SqliteStore's vector search needs sqlite-vec
    loaded into sqlite3, which this Python's sqlite3 cannot (no enable_load_extension; pysqlite3 is not
    installed): skipped with that reason.
PostgreSQL
    Debian 12 packages no pgvector, so the PostgreSQL is PyPI's ``pgserver`` (a PostgreSQL build with pgvector,
    the bench extra), started in a temporary directory with its default settings (fsync and synchronous_commit
    on). Without pgserver, Debian's PostgreSQL (as bench_langgraph_chat.py starts it) serves the filter and put
    parts and PostgresStore's vector row is skipped with that reason.
put throughput and bytes per item
    Batched puts (BatchMemory of 100 puts, ``sync`` durability) of the filter items: items/s, and the growth of
    the LMDB data file per item; SqliteStore's batched puts (``store.batch`` of 100 PutOps) and its file growth.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))]


def timed(fn, n: int) -> dict:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return {"n": n, "p50_ms": round(pct(samples, 50), 4), "p99_ms": round(pct(samples, 99), 4),
            "mean_ms": round(statistics.fmean(samples), 4)}


def doc(i: int) -> dict:
    return {"i": i, "g": i % 10, "text": f"memory number {i} about topic {i % 97}"}


def run(base: Path, quick: bool, log, items: int | None = None, vectors: int | None = None, dims: int | None = None,
        reps: int | None = None) -> dict:
    import grpc
    import numpy as np
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.sqlite import SqliteStore

    from agentstate import Client
    from agentstate.memory import put_request, search_request
    from agentstate.v1 import memory_pb2 as mpb
    from run import Proc, sidecar

    n_items = items or (5_000 if quick else 100_000)
    n_vec, dims = vectors or (2_000 if quick else 50_000), dims or (64 if quick else 768)
    reps = reps or (30 if quick else 100)
    out: dict = {"items": n_items, "vector_items": n_vec, "dims": dims, "skipped": {}}
    procs = {"echo": Proc([sys.executable, str(HERE / "echo_server.py"), f"unix:{base / 'mecho.sock'}"],
                          base / "mecho.sock", base / "mecho.log"),
             "sidecar": sidecar(base, "memory", "sync")}
    pg = None
    try:
        pg = postgres(base / "pg")
    except Exception as e:  # noqa: BLE001 - reported as skipped
        out["skipped"]["PostgresStore"] = f"no PostgreSQL could be started: {type(e).__name__}: {e}"[:400]
    try:
        c = Client(procs["sidecar"].address, namespace="bench")
        data_file = base / "memory" / "data.mdb"
        # ---- put throughput (sync durability) and bytes per item
        size0 = data_file.stat().st_size
        t = time.perf_counter()
        for start in range(0, n_items, 100):
            ops = [mpb.MemoryOp(put=put_request("", ("docs", f"g{i % 10}"), f"k{i}", doc(i)))
                   for i in range(start, min(n_items, start + 100))]
            c.memory.batch(ops)
        took = time.perf_counter() - t
        c.store_stats()  # (a round trip: the commit of the last batch is done)
        grown = data_file.stat().st_size - size0
        out["put"] = {"sidecar": {"items_per_s": round(n_items / took), "bytes_per_item": round(grown / n_items)}}
        sq_path = base / "store.sqlite"
        import sqlite3
        sq_conn = sqlite3.connect(str(sq_path), check_same_thread=False, isolation_level=None)
        sq = SqliteStore(sq_conn)
        sq.setup()
        sq0 = sq_path.stat().st_size
        t = time.perf_counter()
        for start in range(0, n_items, 100):
            sq.batch([PutOp(("docs", f"g{i % 10}"), f"k{i}", doc(i)) for i in range(start, min(n_items, start + 100))])
        sq_took = time.perf_counter() - t
        out["put"]["SqliteStore"] = {"items_per_s": round(n_items / sq_took),
                                     "bytes_per_item": round((sq_path.stat().st_size - sq0) / n_items)}
        mem = InMemoryStore()
        t = time.perf_counter()
        for start in range(0, n_items, 100):
            mem.batch([PutOp(("docs", f"g{i % 10}"), f"k{i}", doc(i)) for i in range(start, min(n_items, start + 100))])
        out["put"]["InMemoryStore"] = {"items_per_s": round(n_items / (time.perf_counter() - t)), "bytes_per_item": None}
        pgs = None
        if pg is not None:
            from langgraph.store.postgres import PostgresStore
            pg_conn = pg.connect()
            pgs = PostgresStore(pg_conn)
            pgs.setup()
            pg0 = pg.db_bytes(pg_conn)
            t = time.perf_counter()
            for start in range(0, n_items, 100):
                pgs.batch([PutOp(("docs", f"g{i % 10}"), f"k{i}", doc(i))
                           for i in range(start, min(n_items, start + 100))])
            out["put"]["PostgresStore"] = {"items_per_s": round(n_items / (time.perf_counter() - t)),
                                           "bytes_per_item": round((pg.db_bytes(pg_conn) - pg0) / n_items)}
            out["postgres"] = pg.how
        log(f"  memory put: sidecar {out['put']['sidecar']}, SqliteStore {out['put']['SqliteStore']}")

        # ---- filter search
        echo_ch = grpc.insecure_channel(procs["echo"].address)
        echo = echo_ch.unary_unary("/bench.Echo/Echo", request_serializer=lambda b: b, response_deserializer=lambda b: b)
        out["filter"] = {}
        for label, flt in (("common", {"g": 3}), ("rare", {"i": 17})):
            req = search_request("bench", ("docs",), filter=flt, limit=10)
            payload = req.SerializeToString()
            reply = c.memory.stub.SearchMemoryItems(req, timeout=60)
            assert len(reply.items) == (10 if label == "common" else 1), (label, len(reply.items))
            echo_payload = payload + reply.SerializeToString()  # the floor carries the same bytes
            row = {"echo floor": timed(lambda: echo(echo_payload, timeout=60), reps),
                   "sidecar": timed(lambda: c.memory.stub.SearchMemoryItems(req, timeout=60), reps),
                   "InMemoryStore": timed(lambda: mem.search(("docs",), filter=flt, limit=10), reps),
                   "SqliteStore": timed(lambda: sq.search(("docs",), filter=flt, limit=10), max(5, reps // 3))}
            if pgs is not None:
                hits = pgs.search(("docs",), filter=flt, limit=10)  # (its order of equal update times is its own)
                assert len(hits) == len(reply.items) and all(
                    all(h.value[f] == v for f, v in flt.items()) for h in hits), label
                row["PostgresStore"] = timed(lambda: pgs.search(("docs",), filter=flt, limit=10), max(5, reps // 3))
            out["filter"][label] = row
            log(f"  memory filter {label}: " + ", ".join(f"{k} p50 {v['p50_ms']:.3f} ms" for k, v in row.items()))
        echo_ch.close()
        sq_conn.close()

        # ---- vectors
        rng = np.random.default_rng(42)
        matrix = rng.standard_normal((n_vec, dims)).astype(np.float32)
        t = time.perf_counter()
        for start in range(0, n_vec, 200):
            ops = [mpb.MemoryOp(put=put_request("", ("vec", f"g{i % 10}"), f"v{i}", {"i": i, "g": i % 10},
                                                vectors={"text": matrix[i].tolist()}, vector_space="bench"))
                   for i in range(start, min(n_vec, start + 200))]
            c.memory.batch(ops)
        out["vector_load_s"] = round(time.perf_counter() - t, 1)
        q = rng.standard_normal(dims).astype(np.float32)
        req = search_request("bench", ("vec",), filter={"g": {"$ne": 1}}, vector=q.tolist(), vector_space="bench",
                             limit=10, omit_values=True)
        got = [s.item.key for s in c.memory.stub.SearchMemoryItems(req, timeout=120).items]
        m64, q64 = matrix.astype(np.float64), q.astype(np.float64)
        scores = (m64 @ q64) / (np.linalg.norm(m64, axis=1) * np.linalg.norm(q64))
        keep = np.array([i % 10 != 1 for i in range(n_vec)])
        scores[~keep] = -np.inf
        want = [f"v{i}" for i in np.argsort(-scores, kind="stable")[:10]]
        vec = {"sidecar": timed(lambda: c.memory.stub.SearchMemoryItems(req, timeout=120), max(5, reps // 5)),
               "same_top10_as_numpy": got == want}
        texts = {f"t{i}": matrix[i].tolist() for i in range(n_vec)}
        qtext = "the query"
        texts[qtext] = q.tolist()
        lookup = {"dims": dims, "embed": lambda batch: [texts[x] for x in batch], "fields": ["t"]}
        mem_v = InMemoryStore(index=lookup)
        for start in range(0, n_vec, 500):
            mem_v.batch([PutOp(("vec", f"g{i % 10}"), f"v{i}", {"i": i, "g": i % 10, "t": f"t{i}"})
                         for i in range(start, min(n_vec, start + 500))])
        vec["InMemoryStore"] = timed(lambda: mem_v.search(("vec",), query=qtext, filter={"g": {"$ne": 1}}, limit=10),
                                     max(3, reps // 10))
        vec["InMemoryStore_same_top10"] = [h.key for h in mem_v.search(("vec",), query=qtext,
                                                                       filter={"g": {"$ne": 1}}, limit=10)] == want
        del mem_v
        if pg is not None and not pg.vectors:
            out["skipped"]["PostgresStore vectors"] = f"{pg.how}: no pgvector"
        elif pg is not None:
            from langgraph.store.postgres import PostgresStore
            pgv = PostgresStore(pg_conn, index={"dims": dims, "embed": lookup["embed"], "fields": ["t"],
                                                "distance_type": "cosine", "ann_index_config": {"kind": "flat"}})
            pgv.setup()
            t = time.perf_counter()
            for start in range(0, n_vec, 500):
                pgv.batch([PutOp(("vec", f"g{i % 10}"), f"v{i}", {"i": i, "g": i % 10, "t": f"t{i}"})
                           for i in range(start, min(n_vec, start + 500))])
            vec["PostgresStore_load_s"] = round(time.perf_counter() - t, 1)
            vec["PostgresStore"] = timed(lambda: pgv.search(("vec",), query=qtext, filter={"g": {"$ne": 1}}, limit=10),
                                         max(3, reps // 10))
            vec["PostgresStore_same_top10"] = [h.key for h in pgv.search(("vec",), query=qtext,
                                                                         filter={"g": {"$ne": 1}}, limit=10)] == want
        out["vector"] = vec
        out["skipped"]["SqliteStore vectors"] = ("sqlite-vec cannot be loaded: this Python's sqlite3 has no "
                                                 "enable_load_extension and pysqlite3 is not installed")
        log(f"  memory vector top-10: sidecar p50 {vec['sidecar']['p50_ms']:.2f} ms (same as numpy: "
            f"{vec['same_top10_as_numpy']}), InMemoryStore p50 {vec['InMemoryStore']['p50_ms']:.2f} ms"
            + (f", PostgresStore p50 {vec['PostgresStore']['p50_ms']:.2f} ms" if "PostgresStore" in vec else ""))
        c.close()
        if pg is not None:
            pg_conn.close()
    finally:
        for p in procs.values():
            p.stop()
        if pg is not None:
            pg.stop()
    return out


class _PG:
    """A throwaway PostgreSQL: ``dsn``, ``how`` (which build), ``vectors`` (pgvector available), ``stop``."""

    def __init__(self, dsn: str, how: str, vectors: bool, stop) -> None:
        self.dsn, self.how, self.vectors, self.stop = dsn, how, vectors, stop

    def connect(self):
        import psycopg
        from psycopg.rows import dict_row
        return psycopg.connect(self.dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)

    @staticmethod
    def db_bytes(conn) -> int:
        with conn.cursor() as cur:
            cur.execute("CHECKPOINT")
            cur.execute("SELECT pg_database_size(current_database()) AS n")
            return int(cur.fetchone()["n"])


def postgres(data: Path) -> _PG:
    """pgserver's PostgreSQL with pgvector when it is installed, else Debian's PostgreSQL without it."""
    try:
        import pgserver
    except ImportError:
        pgserver = None
    if pgserver is not None:
        srv = pgserver.get_server(str(data), cleanup_mode="stop")
        pg = _PG(srv.get_uri(), "pgserver's PostgreSQL with pgvector", True, srv.cleanup)
        with pg.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
            cur.execute("SELECT version() AS v, (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS x")
            row = cur.fetchone()
        pg.how += f" {row['x']} ({row['v'].split(' on ')[0]})"
        return pg
    from bench_langgraph_chat import Postgres
    deb = Postgres(data)
    return _PG(deb.dsn, "Debian's PostgreSQL (pgserver not installed)", False, deb.stop)


def checks(m: dict) -> list[tuple[str, bool, str]]:
    out = []
    for label in ("common", "rare"):
        row = m["filter"][label]
        echo, side = row["echo floor"]["p50_ms"], row["sidecar"]["p50_ms"]
        out.append((f"memory filter search ({label}, {m['items']:,} items): p50 <= 3 x echo floor ({3 * echo:.3f} ms)",
                    side <= 3 * echo, f"{side:.3f} ms = {side / echo:.1f} x"))
    v = m["vector"]
    out.append((f"memory vector top-10 with a filter ({m['vector_items']:,} x {m['dims']}): p50 <= 20 ms",
                v["sidecar"]["p50_ms"] <= 20, f"{v['sidecar']['p50_ms']:.2f} ms"))
    out.append(("memory vector top-10 equals the exact numpy computation", v["same_top10_as_numpy"],
                str(v["same_top10_as_numpy"])))
    return out


def table(m: dict) -> str:
    peers = ["InMemoryStore", "SqliteStore"] + (["PostgresStore"] if "PostgresStore" in m["filter"]["common"] else [])
    lines = [f"{'filter search (p50 ms)':24s} {'echo floor':>10s} {'sidecar':>8s} {'x floor':>7s}"
             + "".join(f" {p:>14s} {'x sidecar':>9s}" for p in peers)]
    for label in ("common", "rare"):
        r = m["filter"][label]
        side = r["sidecar"]["p50_ms"]
        floor = r["echo floor"]["p50_ms"]
        lines.append(f"{label:24s} {floor:10.3f} {side:8.3f} {side / floor:7.1f}"
                     + "".join(f" {r[p]['p50_ms']:14.3f} {r[p]['p50_ms'] / side:9.1f}" for p in peers))
    v = m["vector"]
    lines += ["", f"vector top-10 + filter ({m['vector_items']:,} x {m['dims']}, p50 ms)  same top-10 as numpy",
              f"  {'sidecar (gRPC)':22s} {v['sidecar']['p50_ms']:9.2f}  {v['same_top10_as_numpy']}"]
    for p in ("InMemoryStore", "PostgresStore"):
        if p in v:
            lines.append(f"  {p:22s} {v[p]['p50_ms']:9.2f}  {v[p + '_same_top10']}  "
                         f"({v[p]['p50_ms'] / v['sidecar']['p50_ms']:.1f} x sidecar)")
    if "postgres" in m:
        lines += ["", f"PostgreSQL: {m['postgres']}"]
    lines += ["", f"{'batched puts (100 per batch)':28s} {'items/s':>9s} {'bytes/item':>11s}"]
    for k, r in m["put"].items():
        lines.append(f"{k:28s} {r['items_per_s']:9,d} {r['bytes_per_item'] if r['bytes_per_item'] is not None else '-':>11}")
    for k, why in m["skipped"].items():
        lines.append(f"SKIPPED {k}: {why}")
    return "\n".join(lines)


def curve(base: Path, sizes: list[int], dims: int, reps: int, log, peer_max: int) -> dict:
    """Vector top-10 with a filter against the number of items N: the items are loaded in steps up to each N
    and the same search is timed at each (p50 over gRPC), next to InMemoryStore (up to ``peer_max`` items: its
    search grows fast) and an in-process numpy float64 computation of the exact top-10 (the reference the
    answer is checked against at every N)."""
    import numpy as np
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    from agentstate import Client
    from agentstate.memory import put_request, search_request
    from agentstate.v1 import memory_pb2 as mpb
    from run import sidecar

    rng = np.random.default_rng(42)
    top = max(sizes)
    matrix = rng.standard_normal((top, dims)).astype(np.float32)
    q = rng.standard_normal(dims).astype(np.float32)
    m64, q64 = matrix.astype(np.float64), q.astype(np.float64)
    flt = {"g": {"$ne": 1}}
    proc = sidecar(base, "memcurve", "sync")
    rows = []
    try:
        c = Client(proc.address, namespace="bench")
        req = search_request("bench", ("vec",), filter=flt, vector=q.tolist(), vector_space="bench", limit=10,
                             omit_values=True)
        loaded = 0
        for n in sorted(sizes):
            t = time.perf_counter()
            for start in range(loaded, n, 200):
                ops = [mpb.MemoryOp(put=put_request("", ("vec", f"g{i % 10}"), f"v{i}", {"i": i, "g": i % 10},
                                                    vectors={"text": matrix[i].tolist()}, vector_space="bench"))
                       for i in range(start, min(n, start + 200))]
                c.memory.batch(ops)
            load_s = time.perf_counter() - t
            loaded = n
            got = [s.item.key for s in c.memory.stub.SearchMemoryItems(req, timeout=120).items]

            def exact(n=n):
                sc = (m64[:n] @ q64) / (np.linalg.norm(m64[:n], axis=1) * np.linalg.norm(q64))
                sc[np.arange(n) % 10 == 1] = -np.inf
                return [f"v{i}" for i in np.argsort(-sc, kind="stable")[:10]]
            row = {"n": n, "load_s": round(load_s, 1), "same_top10_as_numpy": got == exact(),
                   "sidecar": timed(lambda: c.memory.stub.SearchMemoryItems(req, timeout=120), reps),
                   "numpy": timed(exact, max(3, reps // 4))}
            if n <= peer_max:
                texts = {f"t{i}": matrix[i].tolist() for i in range(n)}
                texts["the query"] = q.tolist()
                mem_v = InMemoryStore(index={"dims": dims, "embed": lambda batch: [texts[x] for x in batch],
                                             "fields": ["t"]})
                for start in range(0, n, 500):
                    mem_v.batch([PutOp(("vec", f"g{i % 10}"), f"v{i}", {"i": i, "g": i % 10, "t": f"t{i}"})
                                 for i in range(start, min(n, start + 500))])
                row["InMemoryStore"] = timed(lambda: mem_v.search(("vec",), query="the query", filter=flt, limit=10),
                                             3)
                del mem_v, texts
            rows.append(row)
            log(f"  N={n:,}: sidecar p50 {row['sidecar']['p50_ms']:.2f} ms (same as numpy: "
                f"{row['same_top10_as_numpy']}), numpy {row['numpy']['p50_ms']:.2f} ms"
                + (f", InMemoryStore {row['InMemoryStore']['p50_ms']:.1f} ms" if "InMemoryStore" in row else "")
                + f"; loaded in {row['load_s']} s")
        c.close()
    finally:
        proc.stop()
    return {"dims": dims, "filter": flt, "rows": rows}


def inproc(base: Path, sizes: list[int], dims: int, reps: int, log) -> dict:
    """The server-side time of the same vector top-10 with a filter: ``Memory.search`` called in this
    process on its own store (no gRPC), by the resident index and by the scan it replaced (every candidate
    read from the snapshot; ``_vector_resident`` switched off), side by side at each N, with the check that
    both give the same answer."""
    import asyncio

    import numpy as np

    sys.path.insert(0, str(HERE.parent))
    from agentstate.v1 import memory_pb2 as mpb
    from agentstate import codec
    from agentstate.v1 import values_pb2
    from sidecar.api import memory as api
    from sidecar.state import memory as mem
    from sidecar.storage.store import Store

    rng = np.random.default_rng(42)
    top = max(sizes)
    matrix = rng.standard_normal((top, dims)).astype(np.float32)
    q = rng.standard_normal(dims).astype(np.float32)
    store = Store(str(base / "inproc"), durability="process")
    memory = mem.Memory(store)
    rows = []
    try:
        loaded = 0
        for n in sorted(sizes):
            for start in range(loaded, n, 500):
                ops = [mpb.MemoryOp(put=mpb.PutMemoryItemRequest(
                    path=["vec", f"g{i % 10}"], key=f"v{i}", value=values_pb2.Value(msgpack=codec.encode(
                        {"i": i, "g": i % 10})), vector_space="bench",
                    vectors={"text": mpb.Vector(values=matrix[i].tolist())})) for i in range(start, min(n, start + 500))]
                asyncio.run(api.batch(memory, mpb.BatchMemoryRequest(ops=ops)))
            loaded = n
            req = mpb.SearchMemoryItemsRequest(path_prefix=["vec"], limit=10, omit_values=True,
                                               filter=mpb.MemoryFilter(expression=values_pb2.Value(
                                                   msgpack=codec.encode({"g": {"$ne": 1}}))),
                                               vector=mpb.VectorQuery(vector=mpb.Vector(values=q.tolist()),
                                                                      space="bench"))
            s, _ = api.search_input("default", req)
            s.refresh = False

            def search():
                with store.read() as txn:
                    return [(f.key, f.score) for f in memory.search(txn, "default", s, memory.clock())[0]]
            fast = search()
            resident = timed(search, reps)
            real = memory._vector_resident
            memory._vector_resident = lambda *a: None
            try:
                slow = search()
                scan = timed(search, max(2, reps // 10))  # (seconds each at 50,000 x 768)
            finally:
                memory._vector_resident = real
            row = {"n": n, "resident": resident, "scan": scan, "same_answer": fast == slow}
            rows.append(row)
            log(f"  in process N={n:,}: resident index p50 {resident['p50_ms']:.2f} ms, scan p50 "
                f"{scan['p50_ms']:.2f} ms ({scan['p50_ms'] / resident['p50_ms']:.1f}x), same answer: {fast == slow}")
    finally:
        store.close()
    return {"dims": dims, "rows": rows}


def curve_table(res: dict) -> str:
    lines = [f"vector top-10 + filter {res['filter']}, {res['dims']} dims, p50 ms",
             f"{'N':>8s} {'sidecar':>9s} {'numpy f64':>10s} {'InMemoryStore':>14s}  same top-10 as numpy"]
    for r in res["rows"]:
        mem = f"{r['InMemoryStore']['p50_ms']:.1f}" if "InMemoryStore" in r else "-"
        lines.append(f"{r['n']:>8,} {r['sidecar']['p50_ms']:>9.2f} {r['numpy']['p50_ms']:>10.2f} {mem:>14s}  "
                     f"{r['same_top10_as_numpy']}")
    return "\n".join(lines)


def plot_curve(res: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ns = [r["n"] for r in rows]
    ax.plot(ns, [r["sidecar"]["p50_ms"] for r in rows], marker="o", label="sidecar (gRPC, resident index)")
    ax.plot(ns, [r["numpy"]["p50_ms"] for r in rows], marker="s", label="numpy float64, in process")
    mem = [(r["n"], r["InMemoryStore"]["p50_ms"]) for r in rows if "InMemoryStore" in r]
    if mem:
        ax.plot([n for n, _ in mem], [v for _, v in mem], marker="^", label="LangGraph InMemoryStore, in process")
    ax.axhline(20, color="grey", linestyle="--", linewidth=1, label="target 20 ms")
    ax.set_xlabel("items with a vector (N)")
    ax.set_ylabel("p50 ms, top-10 with a filter")
    ax.set_yscale("log")
    ax.set_title(f"memory vector search, {res['dims']} dimensions")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--items", type=int, help="filter items (default 100,000; quick 5,000)")
    ap.add_argument("--vectors", type=int, help="vector items (default 50,000; quick 2,000)")
    ap.add_argument("--dims", type=int, help="vector dimensions (default 768; quick 64)")
    ap.add_argument("--reps", type=int, help="timed searches per variant (default 100; quick 30)")
    ap.add_argument("--curve", help="only the vector search against N: comma-separated sizes (e.g. 5000,50000)")
    ap.add_argument("--curve-peer-max", type=int, default=20_000, help="largest N InMemoryStore is timed at")
    ap.add_argument("--plot", help="with --curve: draw p50 against N into this PNG (matplotlib)")
    ap.add_argument("--inprocess", help="only the server-side vector search in this process, resident index "
                                        "against the scan: comma-separated sizes")
    opts = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    if opts.inprocess:
        res = inproc(base, [int(x) for x in opts.inprocess.split(",")], opts.dims or 768, opts.reps or 30,
                     lambda s: print(s, flush=True))
        if opts.json:
            Path(opts.json).write_text(json.dumps(res, indent=2))
        return 0
    if opts.curve:
        res = curve(base, [int(x) for x in opts.curve.split(",")], opts.dims or 768, opts.reps or 30,
                    lambda s: print(s, flush=True), opts.curve_peer_max)
        print(curve_table(res))
        if opts.plot:
            plot_curve(res, opts.plot)
            print(f"plot written to {opts.plot}")
        if opts.json:
            Path(opts.json).write_text(json.dumps(res, indent=2))
        return 0
    res = run(base, opts.quick, lambda s: print(s, flush=True), opts.items, opts.vectors, opts.dims, opts.reps)
    print(table(res))
    for label, ok, fig in checks(res):
        print(f"  [{'met' if ok else 'MISSED'}] {label}: {fig}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
