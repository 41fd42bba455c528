"""bench_core: the core benchmarks, side by side in one run.

    python benchmarks/bench_core.py [--quick] [--json PATH] [--turns N] [--workdir DIR] [--keep] [--profile]

1. Storage growth. A chat of N turns (default 800): a 400-character user and a
   400-character assistant message per turn (seeded, vocabulary-drawn text),
   three checkpoints per turn (1: the turn's input, list unchanged; 2: user
   message appended; 3: assistant message appended). Every checkpoint holds the
   WHOLE message list, put through ``agentstate.Client.put_checkpoint`` as a whole
   value. The same 3N checkpoints (same lists, same metadata) go to LangGraph's
   SqliteSaver (in-process, file-backed, its own ``put`` with a ``messages``
   channel holding the whole list, as LangGraph stores it). Reported: the
   sidecar data directory (apparent file sizes and allocated blocks) against the
   unique payload (N*2*400 bytes) and against SqliteSaver's database file.
2. Flat cost. Put latency of the same delta (``Append`` of one fresh 400-char
   message against a parent) with the parent at turn 10 and at turn N,
   interleaved, client-measured end to end; and the read of the latest full
   state at turn N (2N messages): server-side (the server's GetCheckpoint
   handler run in-process against the same data dir after the server stopped,
   plus the response serialisation) and end to end (Python client RPC).

Prints the hot-path implementation in use (``sidecar.storage.hotpath.NATIVE``) for this
process and for the server. ``--quick`` is a short CI variant (60 turns).
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # conftest.SidecarProcess
sys.path.insert(0, str(Path(__file__).resolve().parent))

from textgen import TextGen  # noqa: E402

MSG_CHARS = 400
TARGET_PAYLOAD_RATIO = 3.0
TARGET_VS_SQLITE = 300.0
TARGET_FLAT = 1.3
TARGET_GET_MS = 2.0


# ----------------------------------------------------------------- helpers

def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def summary_ms(samples_s: list[float]) -> dict:
    ms = [x * 1000 for x in samples_s]
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 4), "p99_ms": round(pct(ms, 99), 4),
            "mean_ms": round(statistics.fmean(ms), 4), "min_ms": round(min(ms), 4), "max_ms": round(max(ms), 4)}


def dir_sizes(path: Path) -> dict:
    """Apparent (st_size) and allocated (st_blocks * 512, what du counts) bytes of every file under path."""
    files = {}
    for p in sorted(path.rglob("*")):
        if p.is_file() and not p.is_socket():
            st = p.stat()
            files[str(p.relative_to(path))] = {"apparent": st.st_size, "allocated": st.st_blocks * 512}
    return {"apparent": sum(f["apparent"] for f in files.values()),
            "allocated": sum(f["allocated"] for f in files.values()), "files": files}


def du_bytes(path: Path) -> int | None:
    """`du -sB1` of a directory, as a cross-check of dir_sizes (None if du is missing)."""
    try:
        out = subprocess.run(["du", "-sB1", str(path)], capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None


def conversation(turns: int, seed: int) -> list[tuple[dict, dict]]:
    gen = TextGen(seed)
    out = []
    for _ in range(turns):
        out.append(({"role": "user", "content": gen.text(MSG_CHARS)},
                    {"role": "assistant", "content": gen.text(MSG_CHARS)}))
    return out


def checkpoint_plan(conv: list[tuple[dict, dict]]):
    """Yield (turn, kind, messages, metadata) for the 3 checkpoints of each turn (whole lists)."""
    msgs: list[dict] = []
    step = -1
    for t, (user, assistant) in enumerate(conv, 1):
        yield t, 1, list(msgs), {"source": "input", "step": step, "parents": {}}
        step += 1
        msgs.append(user)
        yield t, 2, list(msgs), {"source": "loop", "step": step, "parents": {}}
        step += 1
        msgs.append(assistant)
        yield t, 3, list(msgs), {"source": "loop", "step": step, "parents": {}}
        step += 1


# ----------------------------------------------------------------- sidecar: storage growth

def sidecar_growth(workdir: Path, conv, log) -> dict:
    from conftest import SidecarProcess

    data = workdir / "sidecar-data"
    shutil.rmtree(data, ignore_errors=True)
    side = SidecarProcess(data).start()
    thread = "bench-chat"
    heads: dict[int, str] = {}  # turn -> id of its 3rd checkpoint
    put_s: dict[int, list[float]] = {}
    try:
        with side.client(timeout=120.0) as c:
            server_native = c.store_stats().native
            parent = ""
            t_all = time.perf_counter()
            for turn, kind, msgs, md in checkpoint_plan(conv):
                t0 = time.perf_counter()
                r = c.put_checkpoint(thread, {"messages": msgs}, parent_id=parent, metadata=md)
                put_s.setdefault(turn, []).append(time.perf_counter() - t0)
                parent = r.checkpoint.checkpoint_id
                if kind == 3:
                    heads[turn] = parent
                if turn % 100 == 0 and kind == 3:
                    log(f"  sidecar: turn {turn}, {time.perf_counter() - t_all:.1f}s")
            total = time.perf_counter() - t_all
            stats = c.store_stats()
            integrity = c.check_integrity()
    finally:
        side.stop()
    turns = len(conv)
    return {"data_dir": data, "heads": heads, "thread": thread, "server_native": server_native,
            "write_seconds": total, "ms_per_turn": total / turns * 1000,
            "ms_per_turn_first10": sum(sum(put_s[t]) for t in range(1, 11)) / 10 * 1000,
            "ms_per_turn_last10": sum(sum(put_s[t]) for t in range(turns - 9, turns + 1)) / 10 * 1000,
            "checkpoints": stats.checkpoints, "blobs": stats.blobs, "blob_bytes": stats.blob_bytes,
            "integrity_missing": integrity.missing_blobs}


def lmdb_breakdown(data_dir: Path) -> dict:
    """Where the bytes of data.mdb go: pages per sub-database, payload per sub-database, blob kinds."""
    import lmdb

    from sidecar.storage import layout
    env = lmdb.open(str(data_dir), readonly=True, lock=False, max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    try:
        info = env.info()
        psize = env.stat()["psize"]
        out = {"page_size": psize, "file_pages": info["last_pgno"] + 1, "dbs": {}, "blob_kinds": {}}
        used = 2  # two meta pages
        main = env.stat()
        used += main["branch_pages"] + main["leaf_pages"] + main["overflow_pages"]
        with env.begin() as txn:
            for name in layout.DB_NAMES:
                db = env.open_db(name.encode(), txn=txn, create=False)
                s = txn.stat(db)
                pages = s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]
                used += pages
                kv = 0
                kinds: Counter = Counter()
                kind_bytes: Counter = Counter()
                for k, v in txn.cursor(db=db):
                    kv += len(k) + len(v)
                    if name == "nodes":
                        tag = chr(v[32])  # a node record is its hash, then the stored node
                        kinds[tag] += 1
                        kind_bytes[tag] += len(v)
                out["dbs"][name] = {"entries": s["entries"], "depth": s["depth"], "branch_pages": s["branch_pages"],
                                    "leaf_pages": s["leaf_pages"], "overflow_pages": s["overflow_pages"],
                                    "page_bytes": pages * psize, "key_value_bytes": kv,
                                    "fill": round(kv / (pages * psize), 3) if pages else None}
                if name == "nodes":
                    out["blob_kinds"] = {t: {"count": kinds[t], "bytes": kind_bytes[t]} for t in sorted(kinds)}
        out["used_pages"] = used
        out["free_pages"] = out["file_pages"] - used  # freelist pages (+ the free DB's own pages)
        # what an offline compacting copy (mdb_env_copy2 with MDB_CP_COMPACT) would leave: packed pages, no free ones
        with tempfile.TemporaryDirectory() as tmp:
            env.copy(tmp, compact=True)
            st = os.stat(os.path.join(tmp, "data.mdb"))
            out["compacted_copy"] = {"apparent": st.st_size, "allocated": st.st_blocks * 512}
        return out
    finally:
        env.close()


# ----------------------------------------------------------------- LangGraph SqliteSaver

def sqlite_growth(workdir: Path, conv, log) -> dict:
    from langgraph.checkpoint.base import LATEST_VERSION
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.checkpoint.sqlite import SqliteSaver

    db_path = workdir / "langgraph.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
    conn = sqlite3.connect(str(db_path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    thread = "bench-chat"
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    version = None
    t_all = time.perf_counter()
    put_s: dict[int, float] = {}
    for turn, kind, msgs, md in checkpoint_plan(conv):
        t0 = time.perf_counter()
        if kind != 1:  # the messages channel changed
            version = saver.get_next_version(version, None)
            new_versions = {"messages": version}
        else:
            new_versions = {}
        versions = {"messages": version} if version is not None else {}
        checkpoint = {
            "v": LATEST_VERSION, "id": str(uuid6(clock_seq=md["step"])),
            "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {"messages": msgs} if msgs else {},
            "channel_versions": dict(versions),
            "versions_seen": {"agent": dict(versions)} if kind == 3 else {},
            "updated_channels": ["messages"] if new_versions else [],
        }
        config = saver.put(config, checkpoint, md, new_versions)
        put_s[turn] = put_s.get(turn, 0.0) + time.perf_counter() - t0
        if turn % 100 == 0 and kind == 3:
            log(f"  sqlite: turn {turn}, {time.perf_counter() - t_all:.1f}s")
    total = time.perf_counter() - t_all
    open_sizes = dir_sizes_of([db_path, Path(str(db_path) + "-wal"), Path(str(db_path) + "-shm")])
    (n_ckpts,) = conn.execute("select count(*) from checkpoints").fetchone()
    (payload,) = conn.execute("select sum(length(checkpoint) + length(metadata)) from checkpoints").fetchone()
    conn.close()  # checkpoints the WAL into the database file and removes it
    closed = dir_sizes_of([db_path, Path(str(db_path) + "-wal"), Path(str(db_path) + "-shm")])
    turns = len(conv)
    return {"db_path": str(db_path), "checkpoints": n_ckpts, "write_seconds": total, "ms_per_turn": total / turns * 1000,
            "ms_per_turn_first10": sum(put_s[t] for t in range(1, 11)) / 10 * 1000,
            "ms_per_turn_last10": sum(put_s[t] for t in range(turns - 9, turns + 1)) / 10 * 1000,
            "row_payload_bytes": payload, "open": open_sizes, "closed": closed}


def dir_sizes_of(paths: list[Path]) -> dict:
    app = alloc = 0
    for p in paths:
        if p.exists():
            st = p.stat()
            app += st.st_size
            alloc += st.st_blocks * 512
    return {"apparent": app, "allocated": alloc}


# ----------------------------------------------------------------- flat cost

def server_side_get(data_dir: Path, thread: str, expect_items: int, iterations: int, profile: bool) -> dict:
    """Time the server's GetCheckpoint handler in-process on the stopped server's data dir."""
    from agentstate.v1 import threads_pb2 as pb
    from sidecar.api import checkpoints
    from sidecar.storage.store import Store

    store = Store(str(data_dir))
    req = pb.GetCheckpointRequest(thread_id=thread)  # latest checkpoint, all channels, values

    def handler() -> pb.GetCheckpointResponse:
        coro = checkpoints.get(store, req)  # no awaits inside: drive it without an event loop
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        raise RuntimeError("GetCheckpoint handler suspended")

    try:
        resp = handler()
        items = len(resp.checkpoint.channels["messages"].value.list.items)
        if items != expect_items:
            raise RuntimeError(f"server-side get returned {items} messages, expected {expect_items}")
        size = resp.ByteSize()
        for _ in range(10):
            handler().SerializeToString()
        handle_s, ser_s, both_s = [], [], []
        for _ in range(iterations):
            t0 = time.perf_counter()
            r = handler()
            t1 = time.perf_counter()
            r.SerializeToString()
            t2 = time.perf_counter()
            handle_s.append(t1 - t0)
            ser_s.append(t2 - t1)
            both_s.append(t2 - t0)
        prof = None
        if profile:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(30):
                handler().SerializeToString()
            pr.disable()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(12)
            prof = buf.getvalue()
    finally:
        store.close()
    return {"items": items, "response_bytes": size, "handler": summary_ms(handle_s),
            "serialize": summary_ms(ser_s), "handler_plus_serialize": summary_ms(both_s), "profile": prof}


def flat_cost(data_dir: Path, thread: str, heads: dict, turns: int, samples: int, get_samples: int,
              seed: int, log) -> dict:
    from conftest import SidecarProcess
    from agentstate import Append

    side = SidecarProcess(data_dir).start()
    gen = TextGen(seed + 1)
    early, late = 10, turns
    put_s: dict[int, list[float]] = {early: [], late: []}
    try:
        with side.client(timeout=120.0) as c:
            # end-to-end get of the latest full state (before any fork below changes "latest")
            get_s = []
            for i in range(get_samples + 5):
                t0 = time.perf_counter()
                ck = c.get_checkpoint(thread)
                dt = time.perf_counter() - t0
                if len(ck.channels["messages"].value.list.items) != 2 * turns:
                    raise RuntimeError("end-to-end get returned the wrong list")
                if i >= 5:
                    get_s.append(dt)
            # the same delta (one fresh 400-char message) against the turn-10 and turn-N parents, interleaved
            rng = random.Random(seed)
            for i in range(samples + 20):
                order = [early, late]
                rng.shuffle(order)
                for t in order:
                    msg = {"role": "assistant", "content": gen.text(MSG_CHARS)}
                    t0 = time.perf_counter()
                    c.put_checkpoint(thread, {"messages": Append([msg])}, parent_id=heads[t],
                                     metadata={"source": "fork", "step": 3 * t, "parents": {}})
                    dt = time.perf_counter() - t0
                    if i >= 20:  # warm-up discarded
                        put_s[t].append(dt)
            stats = c.store_stats()
    finally:
        side.stop()
    e, lt = summary_ms(put_s[early]), summary_ms(put_s[late])
    return {"early_turn": early, "late_turn": late, "put_early": e, "put_late": lt,
            "ratio_median": round(lt["median_ms"] / e["median_ms"], 3), "ratio_p99": round(lt["p99_ms"] / e["p99_ms"], 3),
            "get_e2e": summary_ms(get_s), "checkpoints_after": stats.checkpoints}


# ----------------------------------------------------------------- report

def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def report(res: dict) -> str:
    s, q, f, g = res["sidecar"], res["sqlite"], res["flat"], res["get_server"]
    payload = res["unique_payload_bytes"]
    d = s["dir"]
    lines = []
    w = lines.append
    w(f"bench_core: {res['turns']} turns, {res['checkpoints']} checkpoints, unique payload {payload:,} bytes "
      f"({res['turns']}*2*{MSG_CHARS} chars)")
    w(f"hot path: bench process native={res['native']} ({res['impl']}), server native={s['server_native']}; "
      f"python {res['python']}; {res['cpus']} CPUs; load average at start/end {res['load'][0]:.2f}/{res['load'][1]:.2f}")
    w("")
    hdr = f"{'metric':<52} {'sidecar':>16} {'SqliteSaver':>16} {'target':>14}  {'ok':<4}"
    w(hdr)
    w("-" * len(hdr))

    def row(name, a, b="", target="", ok=None):
        w(f"{name:<52} {a:>16} {b:>16} {target:>14}  {'' if ok is None else ('yes' if ok else 'NO'):<4}")

    row("store on disk, apparent bytes (file sizes)", f"{d['apparent']:,}", f"{q['closed']['apparent']:,}")
    row("store on disk, allocated bytes (du)", f"{d['allocated']:,}", f"{q['closed']['allocated']:,}")
    row("  = ", human(d["allocated"]), human(q["closed"]["allocated"]))
    r_alloc = d["allocated"] / payload
    r_app = d["apparent"] / payload
    row("sidecar / unique payload (allocated)", f"{r_alloc:.2f}x", "", f"<= {TARGET_PAYLOAD_RATIO:.1f}x",
        r_alloc <= TARGET_PAYLOAD_RATIO)
    row("sidecar / unique payload (apparent)", f"{r_app:.2f}x", f"{q['closed']['apparent'] / payload:.0f}x")
    vs = q["closed"]["allocated"] / d["allocated"]
    row("sidecar size / SqliteSaver size (allocated)", f"1/{vs:.0f}", "1", f"<= 1/{TARGET_VS_SQLITE:.0f}",
        vs >= TARGET_VS_SQLITE)
    row("  (apparent)", f"1/{q['closed']['apparent'] / d['apparent']:.0f}", "1")
    if "lc_messages" in q:
        lq = q["lc_messages"]
        row("  SqliteSaver with LangChain message objects (info)", "", f"{lq['closed']['allocated']:,}")
        row("  sidecar (dict messages) / that (allocated)", f"1/{lq['closed']['allocated'] / d['allocated']:.0f}")
    row("write time per turn (3 whole-list puts), mean", f"{s['ms_per_turn']:.1f} ms", f"{q['ms_per_turn']:.1f} ms")
    row("  first 10 turns / last 10 turns", f"{s['ms_per_turn_first10']:.1f}/{s['ms_per_turn_last10']:.1f} ms",
        f"{q['ms_per_turn_first10']:.1f}/{q['ms_per_turn_last10']:.1f} ms")
    e, lt = f["put_early"], f["put_late"]
    row(f"put Append(1 msg), parent at turn {f['early_turn']}: median/p99",
        f"{e['median_ms']:.3f}/{e['p99_ms']:.3f} ms")
    row(f"put Append(1 msg), parent at turn {f['late_turn']}: median/p99",
        f"{lt['median_ms']:.3f}/{lt['p99_ms']:.3f} ms")
    row(f"  turn {f['late_turn']} / turn {f['early_turn']}, median", f"{f['ratio_median']:.2f}x", "",
        f"<= {TARGET_FLAT}x", f["ratio_median"] <= TARGET_FLAT)
    row(f"  turn {f['late_turn']} / turn {f['early_turn']}, p99", f"{f['ratio_p99']:.2f}x", "",
        f"<= {TARGET_FLAT}x", f["ratio_p99"] <= TARGET_FLAT)
    gh, gb = g["handler"], g["handler_plus_serialize"]
    row(f"get latest ({g['items']} msgs), server handler: med/p99", f"{gh['median_ms']:.2f}/{gh['p99_ms']:.2f} ms",
        "", f"< {TARGET_GET_MS} ms", gh["median_ms"] < TARGET_GET_MS)
    row("  handler + response serialisation: med/p99", f"{gb['median_ms']:.2f}/{gb['p99_ms']:.2f} ms", "",
        f"< {TARGET_GET_MS} ms", gb["median_ms"] < TARGET_GET_MS)
    ge = f["get_e2e"]
    row("  end-to-end RPC (Python client): med/p99", f"{ge['median_ms']:.2f}/{ge['p99_ms']:.2f} ms")
    w("")
    w("where the sidecar's bytes go (data.mdb after a clean stop):")
    lb = s["lmdb"]
    w(f"  page size {lb['page_size']}, file pages {lb['file_pages']}, in use {lb['used_pages']}, "
      f"free (reusable) {lb['free_pages']}")
    for name, x in lb["dbs"].items():
        if x["entries"]:
            w(f"  {name:<9} {x['entries']:>7} records, depth {x['depth']}, pages {x['branch_pages']}b+{x['leaf_pages']}l+"
              f"{x['overflow_pages']}o = {x['page_bytes']:>10,} B, key+value bytes {x['key_value_bytes']:>10,}, "
              f"fill {x['fill']}")
    kinds = {"v": "whole values", "z": "compressed values", "L": "list roots", "l": "list leaves", "n": "list inner", "M": "map leaves",
             "N": "map inner", "C": "chunked", "c": "chunks"}
    for tag, x in lb["blob_kinds"].items():
        w(f"  blobs {tag!r} ({kinds.get(tag, '?')}): {x['count']} nodes, {x['bytes']:,} bytes")
    for fname, x in d["files"].items():
        w(f"  file {fname}: apparent {x['apparent']:,}, allocated {x['allocated']:,}")
    w(f"  du -sB1 of the data dir: {d['du']}")
    cc = lb["compacted_copy"]
    w(f"  (not the target number) a compacting copy of data.mdb (mdb_env_copy2 MDB_CP_COMPACT) would be "
      f"{cc['allocated']:,} bytes allocated = {cc['allocated'] / payload:.2f}x payload")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short CI variant (60 turns, fewer samples)")
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--samples", type=int, default=None, help="puts per parent for the flat-cost numbers")
    ap.add_argument("--get-samples", type=int, default=None)
    ap.add_argument("--seed", type=int, default=800)
    ap.add_argument("--json", type=Path, default=None, help="write all numbers here")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the server-side get")
    ap.add_argument("--sqlite-lc-messages", action="store_true",
                    help="also store the chat in SqliteSaver as LangChain HumanMessage/AIMessage objects (with ids), "
                         "what add_messages would keep; informational, not the compared number")
    args = ap.parse_args(argv)
    turns = args.turns or (60 if args.quick else 800)
    if turns < 11:
        ap.error("--turns must be at least 11")
    samples = args.samples or (60 if args.quick else 300)
    get_samples = args.get_samples or (30 if args.quick else 200)

    from sidecar.storage import hotpath
    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    load_start = os.getloadavg()[0]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-core-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        conv = conversation(turns, args.seed)
        payload = sum(len(u["content"].encode()) + len(a["content"].encode()) for u, a in conv)
        log(f"bench_core: {turns} turns in {workdir}; native hot path: {hotpath.NATIVE}")
        s = sidecar_growth(workdir, conv, log)
        data_dir = s.pop("data_dir")
        s["dir"] = dir_sizes(data_dir)
        s["dir"]["du"] = du_bytes(data_dir)
        s["lmdb"] = lmdb_breakdown(data_dir)
        log("  server-side get (in-process, server stopped)")
        g = server_side_get(data_dir, s["thread"], 2 * turns, get_samples, args.profile)
        log("  flat cost (server restarted)")
        f = flat_cost(data_dir, s["thread"], s.pop("heads"), turns, samples, get_samples, args.seed, log)
        log("  LangGraph SqliteSaver")
        q = sqlite_growth(workdir, conv, log)
        if args.sqlite_lc_messages:
            import uuid

            from langchain_core.messages import AIMessage, HumanMessage

            log("  LangGraph SqliteSaver, LangChain message objects")
            rng = random.Random(args.seed)
            lc = [(HumanMessage(content=u["content"], id=str(uuid.UUID(int=rng.getrandbits(128)))),
                   AIMessage(content=a["content"], id=str(uuid.UUID(int=rng.getrandbits(128))))) for u, a in conv]
            q["lc_messages"] = sqlite_growth(workdir, lc, log)
        res = {"turns": turns, "checkpoints": 3 * turns, "unique_payload_bytes": payload, "native": hotpath.NATIVE,
               "impl": hotpath.implementation.__name__, "python": sys.version.split()[0], "cpus": os.cpu_count(),
               "load": [load_start, os.getloadavg()[0]],
               "sidecar": s, "sqlite": q, "flat": f, "get_server": g}
        res["ratios"] = {
            "sidecar_allocated_over_payload": round(s["dir"]["allocated"] / payload, 3),
            "sidecar_apparent_over_payload": round(s["dir"]["apparent"] / payload, 3),
            "sqlite_over_sidecar_allocated": round(q["closed"]["allocated"] / s["dir"]["allocated"], 1),
            "sqlite_over_sidecar_apparent": round(q["closed"]["apparent"] / s["dir"]["apparent"], 1),
            "flat_put_median": f["ratio_median"], "flat_put_p99": f["ratio_p99"],
        }
        print(report(res))
        if g["profile"]:
            print("\nprofile of the server-side get (30 calls, by own time):")
            print(g["profile"])
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(res, indent=2, default=str))
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
