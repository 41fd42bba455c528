"""The checkpointing benchmark suite: every workload, side by side with its peers, in one run.

    python benchmarks/run.py                  # the full suite (~7-9 minutes on a 2-core machine)
    python benchmarks/run.py --quick          # the CI variant (~1-2 minutes), same tables, small sizes
    python benchmarks/run.py --only put-latency,fleet --json results.json

Workloads (``--only``):

direct-lmdb
    The limit: raw LMDB puts of the bytes of one checkpoint (a 1 KB delta value, its index entry and a
    ~300-byte manifest) with no RPC and no request logic, committed with fsync in groups of 1, 16 and
    64 checkpoints. Its single-put commit p50 is the "durable LMDB commit" of the targets.
put-latency
    Sequential puts, each appending one 400-character message to a growing thread, p50/p99 of the
    client's wall time: a bare gRPC echo service on the sidecar's server stack (the floor; it returns
    the request's bytes), the sidecar in ``sync`` and ``process`` mode over a unary call and over
    StreamWrites (send one, wait for its ack), and LangGraph's SqliteSaver and
    langgraph-checkpoint-lmdb's LMDBSaver in process (``saver.put`` of the checkpoint LangGraph would
    store: the whole message list). Variants take turns in rounds, so machine noise hits them alike.
fleet
    16 agents (separate processes) each checkpointing a 1 KB delta (an appended item) to its own
    thread as fast as it can, per durability mode, over unary calls and over StreamWrites (up to 64
    puts in flight per agent): checkpoints/s, ack latency p50/p99, the sidecar's peak RSS (VmRSS, which counts
    the LMDB data file's mapped pages, so it grows with the data written) and its anonymous part (RssAnon).
memory
    benchmarks/bench_memory.py: memory items side by side with LangGraph's InMemoryStore, SqliteStore and
    PostgresStore (pgserver's PostgreSQL with pgvector): filter search next to the echo floor, vector top-10
    with a filter (checked against numpy), batched put throughput and bytes per item (SqliteStore's vector
    search is skipped, reason printed).
langgraph
    benchmarks/bench_langgraph_chat.py: the 800-turn chat with SidecarSaver, SqliteSaver,
    SqliteSaver + DeltaChannel, LMDBSaver, InMemorySaver and PostgresSaver (a PostgreSQL started
    here), bytes and ms per turn at turns 50, 200 and 800.
conversations
    benchmarks/bench_conversations.py: sessions of 10², 10⁴ and 10⁵ items (quick: 10², 10³), get_items(20)
    through SidecarSession and GetContext(8000) next to an echo floor of the same bytes, batched add_items,
    bytes per item, the SDK's SQLiteSession on the same stream, compaction-due to a watching worker.
backup
    benchmarks/bench_backup.py: BackupStore of a store of N checkpoints (quick: 4,000; full: 60,000), idle and
    under ``--agents`` writer processes (16); the writers' puts/s and ack p50/p99 in quiet windows next to
    the windows while backups run, and their ratio.
schemas
    benchmarks/bench_schemas.py: GetCheckpoint read latency of a value migrated on read (stored at version 1 of a
    three-version schema, read at 3) next to an unmigrated one (stored at 3), 20 and 200 messages (quick: 20),
    repeated reads and first reads of distinct checkpoints, as side-by-side ratios (target <= 1.2 x).
fairness
    benchmarks/bench_fairness.py: a client putting small checkpoints one at a time, its p99 alone next to its
    p99 while another client floods (32 concurrent puts on one connection), in alternating rounds (target:
    <= 3 x).
encryption
    benchmarks/bench_encryption.py: sequential puts and gets of a fresh 2 KB value against a sidecar without
    keys and one whose namespace is encrypted (--encryption-keys), p50/p99 and the ratio, and AES-256-GCM's
    seal/open of one record in process.

Targets are checked and printed as met/MISSED with the measured figure (never a pass/fail exit: a run
always exits 0 unless a workload broke). ``--json PATH`` writes every number, for comparing commits.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WORKLOADS = ("direct-lmdb", "put-latency", "fleet", "memory", "langgraph", "conversations", "backup",
             "schemas", "encryption", "fairness")
MSG_CHARS = 400
DELTA_BYTES = 1024


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))]


def ms(values_s: list[float]) -> dict:
    v = [x * 1e3 for x in values_s]
    return {"n": len(v), "p50_ms": round(pct(v, 50), 4), "p99_ms": round(pct(v, 99), 4),
            "mean_ms": round(statistics.fmean(v), 4)}


def machine() -> dict:
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "loadavg_at_start": [round(x, 2) for x in load]}


class Proc:
    """A server child process (sidecar or echo) on a unix socket."""

    def __init__(self, argv: list[str], sock: Path, log: Path) -> None:
        self.sock = sock
        self.address = f"unix:{sock}"
        self.proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not sock.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{argv[:4]} did not start: see {log}")
            time.sleep(0.02)
        import grpc
        ch = grpc.insecure_channel(self.address)
        grpc.channel_ready_future(ch).result(timeout=30)
        ch.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> tuple[int, int]:
        """(VmRSS, RssAnon) in bytes. VmRSS includes the LMDB data file's mapped pages (RssFile), which grow with
        the data written; RssAnon is the process's own memory."""
        out = {"VmRSS": 0, "RssAnon": 0}
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    key = line.split(":", 1)[0]
                    if key in out:
                        out[key] = int(line.split()[1]) * 1024
        except OSError:
            pass
        return out["VmRSS"], out["RssAnon"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def sidecar(base: Path, name: str, durability: str) -> Proc:
    data = base / name
    data.mkdir(parents=True)
    return Proc([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data), "--listen",
                 f"unix:{data / 'sidecar.sock'}", "--durability", durability, "--log-level", "WARNING"],
                data / "sidecar.sock", base / f"{name}.log")


# ----------------------------------------------------------------- direct-lmdb

def direct_lmdb(base: Path, quick: bool, log) -> dict:
    import lmdb

    rng = random.Random(3)
    value = rng.randbytes(DELTA_BYTES)
    manifest = rng.randbytes(300)
    out = {}
    for group in (1, 16, 64):
        path = base / f"lmdb-{group}"
        env = lmdb.open(str(path), map_size=1 << 30, max_dbs=4, sync=True, metasync=True)
        nodes, ckpts, index = (env.open_db(n) for n in (b"nodes", b"ckpts", b"hashes"))
        total = (300 if quick else 3000) if group == 1 else (3000 if quick else 40000)
        commits: list[float] = []
        t0 = time.perf_counter()
        n = 0
        while n < total:
            t = time.perf_counter()
            with env.begin(write=True) as txn:
                for _ in range(group):
                    n += 1
                    key = n.to_bytes(8, "big")
                    txn.put(key, value, db=nodes, append=True)
                    txn.put(rng.randbytes(16), key, db=index)
                    txn.put(b"t%06d" % (n % 16) + key, manifest, db=ckpts)
            commits.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
        env.close()
        out[f"group_{group}"] = {"checkpoints_per_s": round(n / elapsed), "commit": ms(commits)}
        log(f"  direct-lmdb group {group}: {n / elapsed:,.0f} checkpoints/s, commit p50 "
            f"{pct(commits, 50) * 1e3:.3f} ms")
    out["durable_commit_p50_ms"] = out["group_1"]["commit"]["p50_ms"]
    return out


# ----------------------------------------------------------------- put-latency

def _put_request(thread: str, parent: str, text: str, step: int, first: bool):
    from agentstate import Append
    from agentstate import _requests as rq

    return rq.put_checkpoint_request("default", thread, {"messages": [text] if first else Append([text])},
                                     checkpoint_id="", parent_id=parent, base_id="", checkpoint_ns="",
                                     metadata={"source": "loop", "step": step}, extra=None, expected_head_etag=None,
                                     schema_version=0, require_thread=False, request_id="")


class _Variant:
    def __init__(self, name: str) -> None:
        self.name = name
        self.samples: list[float] = []
        self.step = 0
        self.rng = random.Random(name)

    def text(self) -> str:
        return "".join(self.rng.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(MSG_CHARS))

    def close(self) -> None:
        pass


class EchoUnary(_Variant):
    def __init__(self, name, address):
        super().__init__(name)
        import grpc
        from agentstate.v1 import threads_pb2 as pb
        self.channel = grpc.insecure_channel(address)
        self.call = self.channel.unary_unary("/bench.Echo/Echo", request_serializer=pb.PutCheckpointRequest.SerializeToString,
                                             response_deserializer=pb.PutCheckpointRequest.FromString)

    def put(self):
        self.step += 1
        req = _put_request("echo", "p", self.text(), self.step, False)
        t = time.perf_counter()
        self.call(req, timeout=30)
        return time.perf_counter() - t

    def close(self):
        self.channel.close()


class EchoStream(EchoUnary):
    def __init__(self, name, address):
        super().__init__(name, address)
        import queue
        from agentstate.v1 import threads_pb2 as pb
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        stream = self.channel.stream_stream("/bench.Echo/EchoStream",
                                            request_serializer=pb.StreamWritesRequest.SerializeToString,
                                            response_deserializer=pb.StreamWritesRequest.FromString)

        def gen():
            while (item := self.q.get()) is not None:
                yield item

        self.responses = stream(gen())

    def put(self):
        from agentstate.v1 import threads_pb2 as pb
        self.step += 1
        t = time.perf_counter()
        req = pb.StreamWritesRequest(writes=[pb.StreamedWrite(seq=self.step, put_checkpoint=_put_request(
            "echo", "p", self.text(), self.step, False))])
        self.q.put(req)
        next(self.responses)
        return time.perf_counter() - t

    def close(self):
        self.q.put(None)
        self.channel.close()


class SidecarUnary(_Variant):
    def __init__(self, name, address):
        super().__init__(name)
        from agentstate import Client
        self.client = Client(address, timeout=60)
        self.parent = ""

    def _send(self, req):
        return self.client._call(self.client.threads.PutCheckpoint, req, None)

    def put(self):
        first = not self.parent
        t = time.perf_counter()
        req = _put_request("lat", self.parent, self.text(), self.step, first)
        resp = self._send(req)
        took = time.perf_counter() - t
        self.parent = resp.checkpoint.checkpoint_id
        self.step += 1
        return took

    def close(self):
        self.client.close()


class SidecarStream(SidecarUnary):
    def __init__(self, name, address):
        super().__init__(name, address)
        self.ws = self.client.write_stream()

    def _send(self, req):
        return self.ws.send(req).result()

    def close(self):
        self.ws.close()
        super().close()


class LangGraphSaverPut(_Variant):
    """``saver.put`` of the checkpoint LangGraph stores after a message was appended (in process)."""

    def __init__(self, name, saver):
        super().__init__(name)
        from langchain_core.messages import HumanMessage
        from langgraph.checkpoint.base import empty_checkpoint
        self.saver = saver
        self.Msg = HumanMessage
        self.messages: list = []
        self.checkpoint = empty_checkpoint()
        self.config = {"configurable": {"thread_id": "lat", "checkpoint_ns": ""}}

    def put(self):
        from langgraph.checkpoint.base import create_checkpoint
        t = time.perf_counter()
        self.messages = self.messages + [self.Msg(self.text(), id=f"m{self.step}")]
        version = self.step + 1
        cp = create_checkpoint(self.checkpoint, None, self.step)
        cp["channel_values"] = {"messages": self.messages}
        cp["channel_versions"] = {"messages": version}
        self.config = self.saver.put(self.config, cp, {"source": "loop", "step": self.step},
                                     {"messages": version})
        took = time.perf_counter() - t
        self.checkpoint = cp
        self.step += 1
        return took


def put_latency(base: Path, quick: bool, log) -> dict:
    import sqlite3

    import lmdb
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph_checkpoint_lmdb import LMDBSaver

    n = 150 if quick else 1000
    rounds = 5
    procs = {"echo": Proc([sys.executable, str(HERE / "echo_server.py"), f"unix:{base / 'echo.sock'}"],
                          base / "echo.sock", base / "echo.log"),
             "sync": sidecar(base, "lat-sync", "sync"), "process": sidecar(base, "lat-process", "process")}
    (base / "lmdbsaver").mkdir()
    variants = [EchoUnary("echo unary", procs["echo"].address), EchoStream("echo stream", procs["echo"].address),
                SidecarUnary("sidecar sync unary", procs["sync"].address),
                SidecarStream("sidecar sync stream", procs["sync"].address),
                SidecarUnary("sidecar process unary", procs["process"].address),
                SidecarStream("sidecar process stream", procs["process"].address),
                LangGraphSaverPut("SqliteSaver", SqliteSaver(sqlite3.connect(str(base / "lat.sqlite"),
                                                                             check_same_thread=False))),
                LangGraphSaverPut("LMDBSaver", LMDBSaver(lmdb.open(str(base / "lmdbsaver"), map_size=16 << 30,
                                                                   max_dbs=8)))]
    try:
        for v in variants:  # warm-up (connections, first put of the thread); not counted
            for _ in range(10 if quick else 30):
                v.put()
        v_order = list(variants)
        for r in range(rounds):
            random.Random(r).shuffle(v_order)
            for v in v_order:
                for _ in range(n // rounds):
                    v.samples.append(v.put())
    finally:
        for v in variants:
            v.close()
        for p in procs.values():
            p.stop()
    out = {v.name: ms(v.samples) for v in variants}
    out["puts_per_variant"] = n
    for v in variants:
        log(f"  put-latency {v.name:24s} p50 {out[v.name]['p50_ms']:.3f} ms  p99 {out[v.name]['p99_ms']:.3f} ms")
    return out


# ----------------------------------------------------------------- fleet

def _agent(address: str, idx: int, transport: str, seconds: float, start_at: float, conn) -> None:
    """One agent process: put 1 KB deltas to its own thread as fast as it can until the time is up."""
    from agentstate import Append, Client
    from agentstate import _requests as rq

    rng = random.Random(idx)
    client = Client(address, timeout=120)
    thread = f"agent-{idx}"
    first = client.put_checkpoint(thread, {"items": [rng.randbytes(DELTA_BYTES)]}, checkpoint_id=f"{0:012d}")
    parent = first.checkpoint.checkpoint_id
    latencies: list[float] = []
    done = 0
    errors = 0

    def request(i: int):
        return rq.put_checkpoint_request("default", thread, {"items": Append([rng.randbytes(DELTA_BYTES)])},
                                         checkpoint_id=f"{i:012d}", parent_id=f"{i - 1:012d}", base_id="",
                                         checkpoint_ns="", metadata={"step": i}, extra=None,
                                         expected_head_etag=None, schema_version=0, require_thread=False,
                                         request_id="")

    while time.time() < start_at:
        time.sleep(0.001)
    end = time.monotonic() + seconds
    i = 1
    if transport == "unary":
        while time.monotonic() < end:
            t = time.perf_counter()
            client._call(client.threads.PutCheckpoint, request(i), None)
            latencies.append(time.perf_counter() - t)
            done += 1
            i += 1
    else:
        ws = client.write_stream(window=64)
        inflight = []
        while time.monotonic() < end:
            t = time.perf_counter()
            fut = ws.send(request(i))
            fut.add_done_callback(lambda f, t=t: latencies.append(time.perf_counter() - t))
            inflight.append(fut)
            i += 1
            if len(inflight) >= 4096:
                for f in inflight:
                    if f.exception() is not None:
                        errors += 1
                done += len(inflight)
                inflight = []
        for f in inflight:
            if f.exception() is not None:
                errors += 1
        done += len(inflight)
        ws.close()
    elapsed = time.monotonic() - (end - seconds)
    client.close()
    del parent
    sample = latencies if len(latencies) <= 20000 else random.Random(idx).sample(latencies, 20000)
    conn.send({"done": done, "errors": errors, "elapsed": elapsed, "latencies": sample})


def fleet(base: Path, quick: bool, log, agents: int = 16) -> dict:
    seconds = 3.0 if quick else 20.0
    ctx = mp.get_context("spawn")
    out = {"agents": agents, "seconds": seconds}
    for durability in ("sync", "process"):
        for transport in ("unary", "stream"):
            name = f"{durability} {transport}"
            side = sidecar(base, f"fleet-{durability}-{transport}", durability)
            pipes, procs = [], []
            try:
                start_at = time.time() + (4.0 if quick else 6.0)  # every agent imported and connected by then
                for i in range(agents):
                    parent, child = ctx.Pipe()
                    p = ctx.Process(target=_agent, args=(side.address, i, transport, seconds, start_at, child),
                                    daemon=True)
                    p.start()
                    procs.append(p)
                    pipes.append(parent)
                rss = [side.rss_bytes()]
                while time.time() < start_at + seconds + 1:
                    time.sleep(0.25)
                    rss.append(side.rss_bytes())
                results = []
                for parent in pipes:
                    while not parent.poll(0.25):
                        rss.append(side.rss_bytes())
                    results.append(parent.recv())
                for p in procs:
                    p.join(30)
            finally:
                for p in procs:
                    if p.is_alive():
                        p.kill()
                side.stop()
            total = sum(r["done"] for r in results)
            elapsed = max(r["elapsed"] for r in results)
            lat = [x for r in results for x in r["latencies"]]
            out[name] = {"checkpoints_per_s": round(total / elapsed), "checkpoints": total,
                         "errors": sum(r["errors"] for r in results), "ack": ms(lat),
                         "sidecar_peak_rss_mb": round(max(r[0] for r in rss) / 2**20, 1),
                         "sidecar_peak_anon_mb": round(max(r[1] for r in rss) / 2**20, 1)}
            log(f"  fleet {name:15s} {total / elapsed:8,.0f} checkpoints/s  ack p50 {out[name]['ack']['p50_ms']:.2f} "
                f"ms p99 {out[name]['ack']['p99_ms']:.2f} ms  sidecar RSS {out[name]['sidecar_peak_rss_mb']} MB "
                f"(anonymous {out[name]['sidecar_peak_anon_mb']} MB)")
    return out


# ----------------------------------------------------------------- langgraph

def langgraph(base: Path, quick: bool, log) -> dict:
    import bench_langgraph_chat as chat

    if quick:
        return chat.run(turns=20, at=(5, 10, 20), window=5, log=log)
    return chat.run(turns=800, at=(50, 200, 800), window=10, log=log, repeats=4)


# ----------------------------------------------------------------- memory

def memory(base: Path, quick: bool, log) -> dict:
    import bench_memory

    return bench_memory.run(base, quick, log)


# ----------------------------------------------------------------- report

def _conversations(base: Path, quick: bool, log) -> dict:
    import bench_conversations
    return bench_conversations.conversations(base, quick, log)


def _schemas(base: Path, quick: bool, log) -> dict:
    import bench_schemas
    return bench_schemas.schemas(base, quick, log)


def _encryption(base: Path, quick: bool, log) -> dict:
    import bench_encryption
    return bench_encryption.encryption_workload(base, quick, log)


def _fairness(base: Path, quick: bool, log) -> dict:
    import bench_fairness
    return bench_fairness.fairness(base, quick, log)


def checks(res: dict) -> list[tuple[str, bool, str]]:
    out = []
    d = res.get("direct-lmdb")
    p = res.get("put-latency")
    if p:
        commit = d["durable_commit_p50_ms"] if d else None
        for transport in ("unary", "stream"):
            echo = p[f"echo {transport}"]["p50_ms"]
            proc = p[f"sidecar process {transport}"]["p50_ms"]
            out.append((f"put-latency process {transport}: p50 <= 1.2 x echo {transport} p50 ({1.2 * echo:.3f} ms)",
                        proc <= 1.2 * echo, f"{proc:.3f} ms = {proc / echo:.2f} x"))
            if commit is not None:
                sync = p[f"sidecar sync {transport}"]["p50_ms"]
                limit = echo + 1.5 * commit
                out.append((f"put-latency sync {transport}: p50 <= echo {transport} p50 + 1.5 x durable commit "
                            f"({echo:.3f} + 1.5 x {commit:.3f} = {limit:.3f} ms)", sync <= limit, f"{sync:.3f} ms"))
        echo_u = p["echo unary"]["p50_ms"]
        proc_s = p["sidecar process stream"]["p50_ms"]
        out.append((f"put-latency process stream vs the unary echo floor: p50 <= 1.2 x {echo_u:.3f} ms",
                    proc_s <= 1.2 * echo_u, f"{proc_s / echo_u:.2f} x"))
        if commit is not None:
            sync_s = p["sidecar sync stream"]["p50_ms"]
            out.append((f"put-latency sync stream vs the unary echo floor: p50 <= {echo_u + 1.5 * commit:.3f} ms",
                        sync_s <= echo_u + 1.5 * commit, f"{sync_s:.3f} ms"))
    f = res.get("fleet")
    if f:
        su, ss, ps = f["sync unary"]["checkpoints_per_s"], f["sync stream"]["checkpoints_per_s"], \
            f["process stream"]["checkpoints_per_s"]
        out.append(("fleet sync: stream >= 3 x unary", ss >= 3 * su, f"{ss:,} vs {su:,} = {ss / max(su, 1):.2f} x"))
        out.append(("fleet sync: >= 5,000 checkpoints/s", ss >= 5000, f"{ss:,}/s"))
        out.append(("fleet process: >= 8,000 checkpoints/s", ps >= 8000, f"{ps:,}/s"))
        rss = max(v["sidecar_peak_rss_mb"] for k, v in f.items() if isinstance(v, dict))
        anon = max(v["sidecar_peak_anon_mb"] for k, v in f.items() if isinstance(v, dict))
        out.append(("fleet: sidecar RSS <= 250 MB", rss <= 250, f"{rss} MB (of it anonymous at most {anon} MB)"))
    if res.get("memory"):
        import bench_memory
        out += bench_memory.checks(res["memory"])
    lg = res.get("langgraph")
    if lg and "checks" in lg:
        out += [(label, c["met"], c["figure"]) for label, c in lg["checks"].items()]
    cv = res.get("conversations")
    if cv:
        import bench_conversations
        out += bench_conversations.checks(cv)
    sc = res.get("schemas")
    if sc:
        import bench_schemas
        out += bench_schemas.checks(sc)
    fr = res.get("fairness")
    if fr:
        import bench_fairness
        out += bench_fairness.checks(fr)
    return out


def report(res: dict) -> str:
    lines = []
    d = res.get("direct-lmdb")
    if d:
        lines += ["", "direct-lmdb (the limit: raw LMDB puts of one checkpoint's bytes, fsync per commit)",
                  f"{'group':>8s} {'checkpoints/s':>15s} {'commit p50 ms':>15s} {'commit p99 ms':>15s}"]
        for g in (1, 16, 64):
            r = d[f"group_{g}"]
            lines.append(f"{g:8d} {r['checkpoints_per_s']:15,d} {r['commit']['p50_ms']:15.3f} "
                         f"{r['commit']['p99_ms']:15.3f}")
    p = res.get("put-latency")
    if p:
        lines += ["", f"put-latency (sequential puts of one appended 400-char message, {p['puts_per_variant']} each)",
                  f"{'variant':26s} {'p50 ms':>9s} {'p99 ms':>9s} {'mean ms':>9s}"]
        for k, v in p.items():
            if isinstance(v, dict):
                lines.append(f"{k:26s} {v['p50_ms']:9.3f} {v['p99_ms']:9.3f} {v['mean_ms']:9.3f}")
    f = res.get("fleet")
    if f:
        lines += ["", f"fleet ({f['agents']} agent processes, 1 KB deltas, {f['seconds']:.0f} s each)",
                  f"{'mode':15s} {'checkpoints/s':>14s} {'ack p50 ms':>11s} {'ack p99 ms':>11s} {'errors':>7s} "
                  f"{'sidecar RSS MB':>15s} {'of it anon MB':>14s}"]
        for k, v in f.items():
            if isinstance(v, dict):
                lines.append(f"{k:15s} {v['checkpoints_per_s']:14,d} {v['ack']['p50_ms']:11.2f} "
                             f"{v['ack']['p99_ms']:11.2f} {v['errors']:7d} {v['sidecar_peak_rss_mb']:15.1f} "
                             f"{v['sidecar_peak_anon_mb']:14.1f}")
    m = res.get("memory")
    if m:
        import bench_memory
        lines += ["", f"memory ({m['items']:,} items for filters, {m['vector_items']:,} x {m['dims']} for vectors)",
                  bench_memory.table(m)]
    lg = res.get("langgraph")
    if lg:
        import bench_langgraph_chat as chat
        lines += ["", f"langgraph (the chat of DESIGN.md §8, {lg['turns']} turns, median of {lg['window']} turns)",
                  chat.table(lg)]
    cv = res.get("conversations")
    if cv:
        import bench_conversations
        lines += ["", "conversations (Agents SDK items; SidecarSession and GetContext side by side with SQLiteSession)",
                  bench_conversations.table(cv)]
    bk = res.get("backup")
    if bk:
        import bench_backup
        lines += ["", f"backup ({bk['checkpoints']:,} checkpoints, {bk['agents']} writer processes, {bk['rounds']} rounds "
                  f"of {bk['window_s']:.0f} s quiet + {bk['window_s']:.0f} s backing up)", bench_backup.table(bk)]
    sc = res.get("schemas")
    if sc:
        import bench_schemas
        lines += ["", "schemas (read latency of a value migrated on read next to an unmigrated one)",
                  bench_schemas.table(sc)]
    en = res.get("encryption")
    if en:
        import bench_encryption
        lines += ["", f"encryption at rest ({en['calls']} sequential puts and gets of a {en['size']}-byte value "
                  "per variant, process durability)", bench_encryption.table(en)]
    fr = res.get("fairness")
    if fr:
        import bench_fairness
        lines += ["", f"fairness (a victim client's small puts, {fr['rounds']} rounds of {fr['puts_per_round']} alone "
                  "and as many while another client floods)", bench_fairness.table(fr)]
    c = checks(res)
    if c:
        lines += ["", "targets"]
        lines += [f"  [{'met' if ok else 'MISSED'}] {label}: {fig}" for label, ok, fig in c]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the CI variant: small sizes, same tables")
    ap.add_argument("--only", default="", help="comma-separated subset of " + ", ".join(WORKLOADS))
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--agents", type=int, default=16, help="fleet: agent processes (default 16)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    opts = ap.parse_args(argv)
    names = [w for w in WORKLOADS if not opts.only or w in opts.only.split(",")]
    unknown = set(opts.only.split(",")) - set(WORKLOADS) - {""}
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}")
    from sidecar.storage import hotpath
    def log(msg: str) -> None:
        print(msg, flush=True)

    base = Path(tempfile.mkdtemp(prefix="bench-suite-"))
    res: dict = {"suite": "agentstate checkpointing", "quick": opts.quick, "machine": machine(),
                 "native_hot_path": hotpath.NATIVE, "workloads": names, "seconds": {}}
    log(f"benchmark suite ({'quick' if opts.quick else 'full'}): {', '.join(names)}; {res['machine']}")
    started = time.monotonic()
    try:
        for name in names:
            t = time.monotonic()
            log(f"== {name}")
            fn = {"direct-lmdb": direct_lmdb, "put-latency": put_latency, "langgraph": langgraph,
                  "memory": memory, "conversations": _conversations, "schemas": _schemas,
                  "encryption": _encryption, "fairness": _fairness}.get(name)
            if name == "fleet":
                res[name] = fleet(base, opts.quick, log, opts.agents)
            elif name == "backup":
                import bench_backup
                res[name] = bench_backup.run(base, opts.quick, log, opts.agents)
            else:
                res[name] = fn(base, opts.quick, log)
            res["seconds"][name] = round(time.monotonic() - t, 1)
    finally:
        if not opts.keep:
            shutil.rmtree(base, ignore_errors=True)
    res["seconds"]["total"] = round(time.monotonic() - started, 1)
    res["checks"] = {label: {"met": ok, "figure": fig} for label, ok, fig in checks(res)}
    try:
        res["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    print(report(res))
    print(f"\n(total {res['seconds']['total']:.0f} s; load average at start {res['machine']['loadavg_at_start']}, "
          f"at end {res['machine'].get('loadavg_at_end')})")
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=2, default=str))
        print(f"results written to {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
