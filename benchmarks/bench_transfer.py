"""Export and import through serving sidecars (TransferService, issue 14): times, and what an import does to
the other writers of the sidecar it goes into.

Sidecar A (``sync`` durability) is filled with N checkpoints (16 threads, each checkpoint appending a 1 KB
item) in one namespace. Then:

1. the namespace is exported from A over gRPC (``client.transfer.export_to``) and offline from its data
   directory (``sidecar export --data-dir``, read-only beside A): time, bytes, MiB/s of each;
2. sidecar B serves an empty store; one probe client puts small checkpoints into another namespace of B, one
   after another, the whole time; the file is imported into B over gRPC. Printed: the import's time, and the
   probe's put latency (p50, p99, max) before the import next to while it runs — the longest wait is the
   import's last job (every record in one transaction), the values having been written in ~1 MiB jobs.

    python benchmarks/bench_transfer.py [--checkpoints N]      (about 30 s at the default 8,000)
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NS = "bench"


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))] if s else 0.0


def main(base: Path, n: int) -> None:
    import run as suite  # benchmarks/run.py: the sidecar process helper
    from bench_backup import _fill

    from agentstate import Client

    a = suite.sidecar(base, "a", "sync")
    b = suite.sidecar(base, "b", "sync")
    try:
        t = time.monotonic()
        _fill(a.address, n)
        print(f"filled {n:,} checkpoints in {time.monotonic() - t:.1f} s", flush=True)
        # (bench_backup's _fill writes namespace "default")
        f_on, f_off = base / "online.asx", base / "offline.asx"
        with Client(a.address, namespace="default", timeout=600) as c:
            t = time.monotonic()
            s = c.transfer.export_to(str(f_on))
            online_s = time.monotonic() - t
        t = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "sidecar", "export", "--data-dir", str(base / "a"),
                              "--namespace", "default", "--to", str(f_off), "--quiet"], capture_output=True, text=True)
        offline_s = time.monotonic() - t
        assert out.returncode == 0, out.stderr
        size = s.bytes
        print(f"export over gRPC: {online_s:.2f} s for {size / 2**20:.1f} MiB ({size / 2**20 / online_s:.1f} MiB/s), "
              f"{s.checkpoints:,} checkpoints, {s.blobs:,} distinct values", flush=True)
        print(f"export offline (sidecar export --data-dir, a new process): {offline_s:.2f} s", flush=True)

        lat: list[tuple[float, float]] = []
        stop = threading.Event()

        def probe():
            with Client(b.address, namespace="probe", timeout=120) as p:
                i = 0
                while not stop.is_set():
                    i += 1
                    t0 = time.monotonic()
                    p.put_checkpoint("p", {"n": i}, checkpoint_id=f"c{i}", parent_id=f"c{i - 1}" if i > 1 else None)
                    t1 = time.monotonic()
                    lat.append((t0, t1 - t0))

        th = threading.Thread(target=probe)
        th.start()
        time.sleep(2.0)
        with Client(b.address, namespace="default", timeout=600) as c:
            t0 = time.monotonic()
            r = c.transfer.import_from(str(f_on))
            t1 = time.monotonic()
        time.sleep(0.5)
        stop.set()
        th.join()
        before = [x for t, x in lat if t + x < t0]
        during = [x for t, x in lat if t < t1 and t + x > t0]
        print(f"import over gRPC: {t1 - t0:.2f} s ({r.checkpoints:,} checkpoints, {r.records:,} records)")
        print("probe puts on the target       p50 ms   p99 ms   max ms   puts")
        for name, xs in (("before the import", before), ("while it runs", during)):
            print(f"  {name:<26} {statistics.median(xs) * 1e3:8.1f} {_pct(xs, 99) * 1e3:8.1f} "
                  f"{max(xs) * 1e3:8.1f} {len(xs):6d}")
    finally:
        a.stop()
        b.stop()


if __name__ == "__main__":
    import argparse
    import tempfile

    sys.path.insert(0, str(HERE))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", type=int, default=8000)
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-transfer-"))
    try:
        main(tmp, opts.checkpoints)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
