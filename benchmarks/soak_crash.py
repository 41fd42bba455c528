"""soak_crash: the crash loop of tests/test_crash.py for many cycles, with a summary.

    python benchmarks/soak_crash.py                 # 200 kills, 3 writers
    python benchmarks/soak_crash.py --cycles 1000 --writers 4 --keep

Each cycle: writers (separate processes) put checkpoints and pending writes for a random
while, the sidecar is killed with SIGKILL, restarted, and everything the writers were
acknowledged is verified (tests/crashloop.py explains the rules). Exits 1 on any problem.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import crashloop  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200, help="kill/restart/verify cycles (default %(default)s)")
    ap.add_argument("--writers", type=int, default=3, help="writer processes (default %(default)s)")
    ap.add_argument("--seed", type=int, default=int(time.time()), help="run seed (default: the time)")
    ap.add_argument("--run-max", type=float, default=1.5, help="longest run between kills, seconds")
    ap.add_argument("--retire-at", type=int, default=40, help="messages after which a writer starts a new thread")
    ap.add_argument("--sample", type=int, default=10, help="known checkpoints re-read in full per cycle")
    ap.add_argument("--workdir", type=Path, default=None, help="where to keep data and logs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir afterwards")
    ap.add_argument("--keep-going", action="store_true", help="do not stop at the first cycle with problems")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary as JSON here")
    ap.add_argument("--map-size", default=None, help="initial LMDB map size for the sidecar, e.g. 1M (it grows)")
    args = ap.parse_args(argv)

    from sidecar.storage import hotpath
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="soak-crash-"))
    print(f"soak_crash: {args.cycles} cycles, {args.writers} writers, seed {args.seed}, work dir {workdir}, "
          f"native hot path: {hotpath.NATIVE}", flush=True)
    every = max(1, args.cycles // 20)

    def progress(cycle, delay, problems, verifier):
        if problems or (cycle + 1) % every == 0:
            s = verifier.stats
            print(f"  cycle {cycle + 1:4d}: killed after {delay:5.3f}s, {s.get('acked_checkpoints', 0)} acked "
                  f"checkpoints so far, {s.get('checkpoints_listed', 0)} stored, problems: {len(problems)}",
                  flush=True)
            for p in problems[:10]:
                print("    " + p, flush=True)

    try:
        r = crashloop.run_loop(workdir, cycles=args.cycles, writers=args.writers, seed=args.seed,
                               run_max=args.run_max, retire_at=args.retire_at, sample=args.sample,
                               stop_on_problem=not args.keep_going, progress=progress,
                               server_args=("--map-size", args.map_size) if args.map_size else ())
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    lc, st = r.log_counts, r.stats
    summary = {
        "native": hotpath.NATIVE, "seed": args.seed, "writers": args.writers, "cycles": r.cycles, "kills": r.kills,
        "seconds": round(r.seconds, 1), "problems": len(r.problems),
        "acked_checkpoints": st.get("acked_checkpoints", 0), "acked_write_batches": st.get("acked_write_batches", 0),
        "put_attempts_failed": lc.get("fail", 0), "requests_abandoned": lc.get("abandon", 0),
        "writers_with_request_outstanding_at_kill": r.outstanding_at_kill,
        "committed_before_ack_lost": st.get("unacked_but_stored", 0),
        "threads_deleted": lc.get("ack_delete", 0), "gc_runs": lc.get("ack_gc", 0), "map_growths": r.map_growths,
        "full_checkpoint_reads": st.get("full_reads", 0), "pending_writes_checked": st.get("pending_writes_checked", 0),
        "integrity_checks": st.get("integrity_checks", 0), "checkpoints_at_end": st.get("checkpoints_listed", 0),
        "restart_s_median": round(statistics.median(r.restart_seconds), 3) if r.restart_seconds else None,
        "restart_s_max": round(max(r.restart_seconds), 3) if r.restart_seconds else None,
        "verify_s_median": round(statistics.median(r.verify_seconds), 3) if r.verify_seconds else None,
    }
    width = max(map(len, summary))
    print("\nsummary")
    for k, v in summary.items():
        print(f"  {k:<{width}}  {v}")
    if r.problems:
        print("\nproblems (first 50):")
        for p in r.problems[:50]:
            print("  " + p)
    if args.json:
        args.json.write_text(json.dumps({**summary, "problem_list": r.problems[:500]}, indent=2))
    print("\nRESULT:", "FAIL" if r.problems else "OK")
    return 1 if r.problems else 0


if __name__ == "__main__":
    sys.exit(main())
