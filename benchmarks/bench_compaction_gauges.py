"""Cost of the compaction gauges at their scan limit: 10,000 pending compactions (half claimed) and
10,000 overdue fallback rows, read as a scrape reads them.

Run: python benchmarks/bench_compaction_gauges.py (a few seconds). Prints the count and the time of each read,
twice (the second with LMDB's pages in the page cache, as a scrape sees them).
"""
from __future__ import annotations

import tempfile
import time

from sidecar.storage.store import Store
from sidecar.state import summaries, convtimers
from sidecar.metrics import COMPACTION_SCAN_LIMIT as LIMIT

N = LIMIT
store = Store(tempfile.mkdtemp())
now = store.clock()
def fill(txn):
    for i in range(N):
        rec = summaries.issue(txn, store, "ns", f"t-{i}", i + 1, 1, 1, 15, b"\0" * 32, 15, [], now - 120_000_000,
                              now - 60_000_000, 200, 1)
        if i % 2:
            summaries.claim(rec, "w", 60_000, now, f"lease-{i}")
            summaries.save_compaction(txn, store, i + 1, 1, 1, rec)
        convtimers.schedule_fallback(txn, store, "ns", f"t-{i}", i + 1, 1, 1, 0, now - 60_000_000)
store.write(fill)
from sidecar.storage import hotpath  # noqa: E402

print(f"native hot path: {hotpath.NATIVE}")
for _ in range(2):
    t = time.perf_counter()
    with store.read() as txn:
        p = summaries.count_pending(txn, store)
        t1 = time.perf_counter()
        c = summaries.count_claimed(txn, store, store.clock(), LIMIT)
        t2 = time.perf_counter()
        o = convtimers.count_due_fallbacks(txn, store, store.clock(), LIMIT)
        t3 = time.perf_counter()
print(f"pending={p} ({(t1 - t) * 1e3:.3f} ms)  claimed={c} ({(t2 - t1) * 1e3:.1f} ms)  overdue={o} ({(t3 - t2) * 1e3:.1f} ms)")
store.close()
