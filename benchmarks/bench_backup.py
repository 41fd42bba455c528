"""Backup time, and the throughput of writers while a backup runs (issue 14).

A sidecar (``sync`` durability) is filled with N checkpoints (16 threads, each checkpoint appending a 1 KB
item, the fleet workload's shape). Then:

1. idle: BackupStore with no writer, the copy's time, bytes and MB/s (median of a few);
2. writers: ``agents`` processes (16 by default) put 1 KB deltas as fast as they can, unary calls, each to its
   own thread. For the first window no backup runs (the *before* rate); for the second window backups are
   taken one after another through the admin RPC (each deleted when done, so the disk does not fill) and
   only the acknowledgements that arrive while a backup is running are counted (the *during* rate).

Printed side by side: puts/s before and during, their ratio, the ack p99 in both, and the backup time
idle next to under load. Acknowledgement times come from CLOCK_MONOTONIC, one clock for all processes on
Linux.

    python benchmarks/bench_backup.py [--quick]       (or benchmarks/run.py --only backup)
"""
from __future__ import annotations

import multiprocessing as mp
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DELTA = 1024


def _fill(address: str, n: int, threads: int = 16) -> None:
    from agentstate import Append, Client
    from agentstate import _requests as rq

    rng = random.Random(7)
    with Client(address, timeout=300) as c:
        ws = c.write_stream(window=256)
        futs = []
        per = max(1, n // threads)
        for i in range(per):
            for t in range(threads):
                value = [rng.randbytes(DELTA)] if i == 0 else Append([rng.randbytes(DELTA)])
                futs.append(ws.send(rq.put_checkpoint_request(
                    "default", f"fill-{t}", {"items": value}, checkpoint_id=f"{i:012d}",
                    parent_id=f"{i - 1:012d}" if i else "", base_id="", checkpoint_ns="", metadata={"step": i},
                    extra=None, expected_head_etag=None, schema_version=0, require_thread=False, request_id="")))
            if len(futs) > 4096:
                for f in futs:
                    f.result()
                futs = []
        for f in futs:
            f.result()
        ws.close()


def _writer(address: str, idx: int, conn) -> None:
    """Unary puts of 1 KB deltas to one thread from ``start_at`` to ``stop_at`` (wall clock, sent once every
    writer is connected); sends back the CLOCK_MONOTONIC time and latency of every acknowledgement."""
    from agentstate import Append, Client
    from agentstate import _requests as rq

    rng = random.Random(idx)
    client = Client(address, timeout=120)
    thread = f"writer-{idx}"
    client.put_checkpoint(thread, {"items": [rng.randbytes(DELTA)]}, checkpoint_id=f"{0:012d}")
    acks: list[tuple[float, float]] = []
    conn.send("ready")
    start_at, stop_at = conn.recv()
    while time.time() < start_at:
        time.sleep(0.001)
    i = 1
    while time.time() < stop_at:
        req = rq.put_checkpoint_request("default", thread, {"items": Append([rng.randbytes(DELTA)])},
                                        checkpoint_id=f"{i:012d}", parent_id=f"{i - 1:012d}", base_id="",
                                        checkpoint_ns="", metadata={"step": i}, extra=None, expected_head_etag=None,
                                        schema_version=0, require_thread=False, request_id="")
        t = time.monotonic()
        client._call(client.threads.PutCheckpoint, req, None)
        now = time.monotonic()
        acks.append((now, now - t))
        i += 1
    client.close()
    conn.send(acks)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))] if s else 0.0


def run(base: Path, quick: bool, log, agents: int = 16) -> dict:
    import run as suite  # benchmarks/run.py: the sidecar process helper
    from agentstate import Client

    n = 4000 if quick else 60000
    window = 2.0 if quick else 6.0
    rounds = 2 if quick else 4
    side = suite.sidecar(base, "backup", "sync")
    out: dict = {"checkpoints": n, "agents": agents, "window_s": window, "rounds": rounds}
    try:
        t = time.monotonic()
        _fill(side.address, n)
        log(f"  backup: filled {n:,} checkpoints in {time.monotonic() - t:.1f} s")
        client = Client(side.address, timeout=600)
        backups = Path(str(base / "backup") + "-backups")

        def one(name: str) -> tuple[float, float, float, int]:
            t0 = time.monotonic()
            r = client.backup_store(name)
            t1 = time.monotonic()
            shutil.rmtree(r.path, ignore_errors=True)
            return t0, t1, t1 - t0, r.bytes

        idle = [one(f"idle-{i}") for i in range(3)]
        idle_s = statistics.median(x[2] for x in idle)
        size = idle[-1][3]
        out["idle"] = {"backup_s": round(idle_s, 4), "bytes": size, "mb_per_s": round(size / 2**20 / idle_s, 1)}
        log(f"  backup idle: {idle_s * 1e3:.0f} ms for {size / 2**20:.1f} MiB ({out['idle']['mb_per_s']} MiB/s)")
        ctx = mp.get_context("spawn")
        pipes, procs = [], []
        for i in range(agents):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_writer, args=(side.address, i, child), daemon=True)
            p.start()
            procs.append(p)
            pipes.append(parent)
        for parent in pipes:
            if not parent.poll(120) or parent.recv() != "ready":
                raise RuntimeError("a writer did not start")
        start_at = time.time() + 0.2
        stop_at = start_at + 1.0 + 2 * rounds * window + 0.5
        for parent in pipes:
            parent.send((start_at, stop_at))
        while time.time() < start_at + 1.0:  # warm-up: every writer past its first calls
            time.sleep(0.01)
        quiet: list[tuple[float, float]] = []
        during: list[tuple[float, float, float, int]] = []
        k = 0
        for _ in range(rounds):  # quiet and backup windows take turns, so machine noise hits both alike
            q0 = time.monotonic()
            while time.monotonic() < q0 + window:
                time.sleep(0.01)
            quiet.append((q0, time.monotonic()))
            b0 = time.monotonic()
            while time.monotonic() < b0 + window:
                during.append(one(f"load-{k}"))
                k += 1
        acks = []
        for parent in pipes:
            acks.extend(parent.recv())
        for p in procs:
            p.join(30)
        client.close()
    finally:
        for p in locals().get("procs", []):
            if p.is_alive():
                p.kill()
        side.stop()
        shutil.rmtree(str(base / "backup") + "-backups", ignore_errors=True)
    before = [lat for when, lat in acks if any(q0 <= when < q1 for q0, q1 in quiet)]
    in_backup = [lat for when, lat in acks if any(t0 <= when < t1 for t0, t1, _, _ in during)]
    busy = sum(t1 - t0 for t0, t1, _, _ in during)
    before_rate = len(before) / sum(q1 - q0 for q0, q1 in quiet)
    during_rate = len(in_backup) / busy if busy else 0.0
    load_s = statistics.median(x[2] for x in during)
    out["writers"] = {
        "before": {"puts_per_s": round(before_rate), "puts": len(before), "ack_p50_ms": round(_pct(before, 50) * 1e3, 3),
                   "ack_p99_ms": round(_pct(before, 99) * 1e3, 3)},
        "during": {"puts_per_s": round(during_rate), "puts": len(in_backup),
                   "ack_p50_ms": round(_pct(in_backup, 50) * 1e3, 3), "ack_p99_ms": round(_pct(in_backup, 99) * 1e3, 3)},
        "ratio_during_over_before": round(during_rate / before_rate, 3) if before_rate else None,
    }
    out["under_load"] = {"backups": len(during), "backup_s": round(load_s, 4), "busy_s": round(busy, 3),
                         "ratio_over_idle": round(load_s / idle_s, 2)}
    log(f"  backup under {agents} writers: {len(during)} backups, median {load_s * 1e3:.0f} ms; writers "
        f"{before_rate:,.0f} puts/s before, {during_rate:,.0f} puts/s during ({out['writers']['ratio_during_over_before']} x)")
    return out


def table(b: dict) -> str:
    w = b["writers"]
    lines = [f"{'':24s} {'puts/s':>10s} {'ack p50 ms':>11s} {'ack p99 ms':>11s} {'puts':>8s}"]
    for k in ("before", "during"):
        r = w[k]
        lines.append(f"{'writers ' + k + ' a backup':24s} {r['puts_per_s']:10,d} {r['ack_p50_ms']:11.2f} "
                     f"{r['ack_p99_ms']:11.2f} {r['puts']:8,d}")
    lines.append(f"{'during / before':24s} {w['ratio_during_over_before']:10.2f}")
    lines += ["", f"{'backup of the store':24s} {'ms':>10s} {'MiB':>11s} {'MiB/s':>11s}",
              f"{'idle':24s} {b['idle']['backup_s'] * 1e3:10.0f} {b['idle']['bytes'] / 2**20:11.1f} "
              f"{b['idle']['mb_per_s']:11.1f}",
              f"{'under the writers':24s} {b['under_load']['backup_s'] * 1e3:10.0f} {'':11s} "
              f"{b['idle']['bytes'] / 2**20 / b['under_load']['backup_s']:11.1f}   "
              f"({b['under_load']['ratio_over_idle']:.2f} x idle, {b['under_load']['backups']} backups)"]
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    import json
    import tempfile

    sys.path.insert(0, str(HERE))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--json")
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    try:
        res = run(tmp, opts.quick, lambda m: print(m, flush=True), opts.agents)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nbackup ({res['checkpoints']:,} checkpoints, {res['agents']} writers, {res['rounds']} rounds of "
          f"{res['window_s']:.0f} s quiet + {res['window_s']:.0f} s backing up)")
    print(table(res))
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=2))
