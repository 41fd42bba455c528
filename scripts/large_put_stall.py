"""Reproduce / measure the stall of small puts behind one large put (issue 16, "Resource limits").

Starts a sidecar on a unix socket in a temporary directory, then:
  1. times one PutCheckpoint of a map with N keys (default 300,000) alone;
  2. measures small puts of another client alone (baseline p50/p99/max);
  3. runs the large put again while the other client keeps putting small checkpoints,
     and reports the large put's time and outcome and the small puts' p50/p99/max during it.

Usage: .venv/bin/python scripts/large_put_stall.py [--keys 300000] [--small-writers 2] [--sidecar-from DIR]
(other arguments go to `sidecar serve`). To compare with an older commit:
  git archive COMMIT sidecar | tar -x -C /tmp/old && cp sidecar/storage/*.so /tmp/old/sidecar/storage/
  .venv/bin/python scripts/large_put_stall.py --sidecar-from /tmp/old
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from agentstate import AgentStateError, Client


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# --sidecar-from DIR: run the sidecar package found in DIR (another checkout, to compare), not the installed one
_LAUNCH = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]; "
           "sys.path[:0] = [{dir!r}, {clients!r}]; from sidecar.cli import main; sys.argv[0] = 'sidecar'; "
           "sys.exit(main())")


def start(data_dir: str, extra: list[str], sidecar_from: str | None = None):
    sock = os.path.join(data_dir, "sidecar.sock")
    log = open(data_dir + ".log", "ab")
    import agentstate
    clients = os.path.dirname(os.path.dirname(os.path.abspath(agentstate.__file__)))
    cmd = [sys.executable, "-c", _LAUNCH.format(dir=os.path.abspath(sidecar_from), clients=clients)] \
        if sidecar_from else [sys.executable, "-m", "sidecar"]
    proc = subprocess.Popen([*cmd, "serve", "--data-dir", data_dir,
                             "--listen", f"unix:{sock}", *extra], stdout=log, stderr=subprocess.STDOUT)
    c = Client(f"unix:{sock}")
    deadline = time.monotonic() + 30
    while True:
        try:
            c.wait_ready(1)
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("sidecar did not start")
    c.close()
    return proc, f"unix:{sock}"


def small_loop(addr, stop, out, errors, tag):
    with Client(addr, timeout=60) as c:
        i = 0
        while not stop.is_set():
            t = time.perf_counter()
            try:
                c.put_checkpoint(f"small-{tag}", {"messages": [f"m{i}"]}, checkpoint_id=f"{tag}-{i:08d}")
                out.append(time.perf_counter() - t)
            except AgentStateError as e:
                errors.append(str(e))
            i += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=300_000)
    ap.add_argument("--small-writers", type=int, default=2)
    ap.add_argument("--baseline-seconds", type=float, default=3.0)
    ap.add_argument("--sidecar-from", default=None, metavar="DIR",
                    help="run the sidecar package of this directory (e.g. an export of an older commit)")
    args, extra = ap.parse_known_args()
    root = tempfile.mkdtemp(prefix="stall-")
    proc, addr = start(os.path.join(root, "data"), extra, args.sidecar_from)

    try:
        big = {f"key-{i:07d}": i for i in range(args.keys)}
        with Client(addr, timeout=120) as c:
            c.put_checkpoint("warm", {"x": 1})
            t = time.perf_counter()
            c.put_checkpoint("big-alone", {"state": big})
            alone = time.perf_counter() - t
        print(f"large put alone ({args.keys} keys): {alone * 1000:.0f} ms")

        def run_small(seconds, during=None):
            stop = threading.Event()
            lat, errs = [], []
            ths = [threading.Thread(target=small_loop, args=(addr, stop, lat, errs, f"w{k}-{time.time_ns()}"))
                   for k in range(args.small_writers)]
            for th in ths:
                th.start()
            result = None
            if during is not None:
                time.sleep(0.5)
                n0 = len(lat)
                result = during()
                window = lat[n0:]
                stop.set()
            else:
                time.sleep(seconds)
                stop.set()
                window = lat
            for th in ths:
                th.join()
            return window, errs, result

        base, errs, _ = run_small(args.baseline_seconds)
        print(f"small puts alone ({args.small_writers} writers): n={len(base)} p50 {pct(base, .5) * 1000:.1f} ms "
              f"p99 {pct(base, .99) * 1000:.1f} ms max {max(base) * 1000:.1f} ms, errors {len(errs)}")

        def big_put():
            with Client(addr, timeout=120) as c:
                t = time.perf_counter()
                try:
                    c.put_checkpoint("big-loaded", {"state": {k: v + 10**7 for k, v in big.items()}})
                    return time.perf_counter() - t, "ok"
                except AgentStateError as e:
                    return time.perf_counter() - t, f"refused: {e}"

        during, errs, (big_s, outcome) = run_small(0, big_put)
        print(f"large put under small-write load: {big_s * 1000:.0f} ms, {outcome}")
        print(f"small puts during it: n={len(during)} p50 {pct(during, .5) * 1000:.1f} ms "
              f"p99 {pct(during, .99) * 1000:.1f} ms max {max(during) * 1000:.1f} ms, errors {len(errs)}"
              + (f" (first: {errs[0]})" if errs else ""))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
