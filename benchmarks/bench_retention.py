"""What retention limits cost a put: puts on one long thread without a policy, with max_checkpoints and with
max_bytes, side by side in one run (an in-process sidecar; docs/lifecycle.md "Limits").

    .venv/bin/python benchmarks/bench_retention.py [--checkpoints 3000] [--puts 150]

The thread gets ``--checkpoints`` checkpoints, each with a pending write (written straight to the store), then
``--puts`` sequential PutCheckpoint calls are timed per case; the table gives the median and p99 per put and
the ratio to the put without a policy. Limits are set high enough never to refuse.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from agentstate import Client  # noqa: E402
from conftest import InProcess  # noqa: E402
from test_retention import fill  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoints", type=int, default=3000)
    ap.add_argument("--puts", type=int, default=150)
    args = ap.parse_args()
    side = InProcess(tempfile.mkdtemp())
    side.clock.now = int(time.time() * 1_000_000)
    side.sidecar.sweeper.retention_interval = 0
    fill(side, "bench", "long", args.checkpoints)
    rows = []
    try:
        with Client(side.address, namespace="bench") as c:
            for label, policy in (("no policy", None), ("max_checkpoints", {"max_checkpoints": 10 ** 9}),
                                  ("max_bytes", {"max_bytes": 10 ** 15})):
                if policy:
                    c.retention.set_policy("long", **policy)
                lat = []
                for i in range(args.puts):
                    started = time.perf_counter()
                    c.put_checkpoint("long", {"n": i})
                    lat.append(time.perf_counter() - started)
                lat.sort()
                rows.append((label, statistics.median(lat), lat[int(len(lat) * 0.99) - 1]))
    finally:
        side.close()
    base = rows[0][1]
    print(f"puts on a thread of {args.checkpoints} checkpoints (+ the puts before), {args.puts} per case")
    print(f"{'case':<18}{'median ms':>10}{'p99 ms':>10}{'ratio':>8}")
    for label, med, p99 in rows:
        print(f"{label:<18}{med * 1000:>10.2f}{p99 * 1000:>10.2f}{med / base:>8.2f}")


if __name__ == "__main__":
    main()
