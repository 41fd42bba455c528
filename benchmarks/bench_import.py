"""Import benchmark (not a test): time, peak RSS and each write job's hold of an offline import of a synthetic export.

    python benchmarks/bench_import.py make FILE THREADS CHECKPOINTS VALUE_BYTES   # e.g. /tmp/big.asx 200 100 8000: 20k ckpts, 204 MB
    DUR=process python benchmarks/bench_import.py run FILE TARGET_DIR            # DUR: the Store's durability (the CLI's: process)

Run from outside the repository with PYTHONPATH=<a checkout> to measure another tree (its Store.write is wrapped here,
so any version's jobs are timed the same way)."""
import os
import resource
import sys
import time

if sys.argv[1] == "make":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from test_import_stream import synth
    print(synth(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), value_bytes=int(sys.argv[5]), seed=9))
    sys.exit(0)

from sidecar.ops import transfer  # noqa: E402
from sidecar.storage.store import Store  # noqa: E402

holds = []
real_write = Store.write


def write(self, fn, *a, **k):
    def timed(txn):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(txn)
        finally:
            holds.append((time.perf_counter() - t0, time.thread_time() - c0))
    return real_write(self, timed, *a, **k)


Store.write = write
src, target = sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
store = Store(target, durability=os.environ.get("DUR", "sync"))
s = transfer.import_file(store, src)
store.close()
took = time.perf_counter() - t0
anon = [line for line in open("/proc/self/status") if line.startswith("RssAnon")][0].split()[1]
walls = sorted(h[0] for h in holds)
print(f"{transfer.__file__}: {s.checkpoints} checkpoints from {os.path.getsize(src) / 1e6:.0f} MB in {took:.1f} s; "
      f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (RssAnon after {int(anon) // 1024} MB); "
      f"{len(holds)} write jobs: longest {walls[-1] * 1000:.0f} ms wall ({max(h[1] for h in holds) * 1000:.0f} ms CPU), "
      f"99th percentile {walls[int(len(walls) * 0.99)] * 1000:.0f} ms, sum {sum(walls):.1f} s")
