"""Fairness (issue 16): does a flooding client starve another one? One client process floods the sidecar
(one TCP connection, 32 threads putting 2 KB checkpoints at once) while a second client puts small
checkpoints one at a time; the second client's p99 alone is printed next to its p99 under the flood.

    .venv/bin/python benchmarks/bench_fairness.py [--rounds 4] [--puts 150] [--streams N]
    .venv/bin/python benchmarks/run.py --only fairness

Target: the flooded p99 within 3x of the p99 alone. Alone and flooded are measured in alternating rounds
(the flooder is stopped with SIGSTOP for the "alone" rounds), so the load of other processes on a shared
machine weighs on both alike. The sidecar runs with its defaults; ``--streams N`` runs it with
--max-streams-per-connection N instead (0: gRPC's default, no limit).
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from agentstate import Client  # noqa: E402

FLOOD = """
import sys, threading
from agentstate import Client
c = Client(sys.argv[1], options=[("grpc.use_local_subchannel_pool", 1)], timeout=120)
def flood(k):
    i = 0
    while True:
        try:
            c.put_checkpoint(f"flood-{k}", {"v": i, "pad": "x" * 2000}, checkpoint_id=f"{i:08d}")
        except Exception:
            pass
        i += 1
for k in range(32):
    threading.Thread(target=flood, args=(k,), daemon=True).start()
print("flooding", flush=True)
threading.Event().wait()
"""


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _victim(addr: str, n: int, tag: str) -> list[float]:
    out = []
    with Client(addr, options=[("grpc.use_local_subchannel_pool", 1)], timeout=60) as c:
        for i in range(n):
            started = time.perf_counter()
            c.put_checkpoint(f"victim-{tag}", {"v": i}, checkpoint_id=f"{i:06d}")
            out.append(time.perf_counter() - started)
    return out


def _start(data: Path, port: int, streams: int | None, extra: list[str] = ()) -> subprocess.Popen:
    data.mkdir(parents=True)
    log = data.parent / "sidecar.log"
    args = (["--max-streams-per-connection", str(streams)] if streams is not None else []) + list(extra)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data), "--listen",
                                 f"127.0.0.1:{port}", *args], stdout=out, stderr=subprocess.STDOUT, text=True,
                                cwd=ROOT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if "sidecar ready" in log.read_text():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"sidecar did not start: {log.read_text()}")


def run(base: Path, rounds: int = 4, puts: int = 150, streams: int | None = None, log=print,
        extra: list[str] = ()) -> dict:
    port = _free_port()
    addr = f"127.0.0.1:{port}"
    proc = _start(base / "data", port, streams, extra)
    flooder = None
    try:
        _victim(addr, 50, "warm")
        flooder = subprocess.Popen([sys.executable, "-c", FLOOD, addr], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        if flooder.stdout.readline().strip() != "flooding":
            raise RuntimeError("the flooding client did not start")
        alone: list[float] = []
        loaded: list[float] = []
        flooding = time.perf_counter()  # the flood runs from its start until the first SIGSTOP
        flood_seconds = 0.0
        for r in range(rounds):
            flooder.send_signal(signal.SIGSTOP)
            flood_seconds += time.perf_counter() - flooding
            time.sleep(0.3)
            alone += _victim(addr, puts, f"alone{r}")
            flooder.send_signal(signal.SIGCONT)
            flooding = time.perf_counter()
            time.sleep(0.5)
            loaded += _victim(addr, puts, f"loaded{r}")
            log(f"  fairness round {r + 1}/{rounds}: p99 alone {_p(alone, 0.99) * 1e3:.1f} ms, "
                f"flooded {_p(loaded, 0.99) * 1e3:.1f} ms")
        flooder.kill()
        flood_seconds += time.perf_counter() - flooding
        flooder.wait()
        flooder = None
        with Client(addr, timeout=30) as c:
            flood_puts = c.store_stats().checkpoints - len(alone) - len(loaded) - 50
    finally:
        if flooder is not None:
            flooder.kill()
            flooder.wait()
        proc.terminate()
        proc.wait(30)
    return {"rounds": rounds, "puts_per_round": puts, "streams_per_connection": streams, "flood_puts": flood_puts,
            "sidecar_args": list(extra), "flood_puts_per_second": round(flood_puts / flood_seconds, 1),
            "alone": {"p50_ms": round(_p(alone, 0.5) * 1e3, 3), "p99_ms": round(_p(alone, 0.99) * 1e3, 3)},
            "flooded": {"p50_ms": round(_p(loaded, 0.5) * 1e3, 3), "p99_ms": round(_p(loaded, 0.99) * 1e3, 3)},
            "ratio_p99": round(_p(loaded, 0.99) / _p(alone, 0.99), 2)}


def fairness(base: Path, quick: bool, log) -> dict:
    """The benchmarks/run.py workload (quick: 2 rounds of 60 puts)."""
    return run(base, rounds=2 if quick else 4, puts=60 if quick else 150, log=log)


def table(res: dict) -> str:
    lines = [f"{'victim client':26s}{'p50':>10s}{'p99':>10s}", "-" * 46]
    for label, key in (("alone", "alone"), ("while another floods", "flooded")):
        lines.append(f"{label:26s}{res[key]['p50_ms']:9.2f}ms{res[key]['p99_ms']:9.2f}ms")
    lines.append(f"flooded / alone p99: {res['ratio_p99']:.2f} x ({res['flood_puts']:,} flood puts, "
                 f"{res['flood_puts_per_second']:,.0f}/s while flooding, "
                 f"--max-streams-per-connection {_streams(res['streams_per_connection'])}"
                 f"{''.join(' ' + a for a in res.get('sidecar_args', ()))})")
    return "\n".join(lines)


def _streams(n: int | None) -> str:
    if n is None:
        try:
            from sidecar.api.callguard import DEFAULT_MAX_STREAMS
        except ImportError:
            return "default"
        n = DEFAULT_MAX_STREAMS
        return f"{n or 'off'} (default)"
    return f"{n or 'off'}"


def checks(res: dict) -> list[tuple[str, bool, str]]:
    return [("fairness: a flooded client's p99 <= 3 x its p99 alone", res["ratio_p99"] <= 3.0,
             f"{res['ratio_p99']:.2f} x")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--puts", type=int, default=150, help="victim puts per round and mode")
    ap.add_argument("--streams", type=int, default=None,
                    help="--max-streams-per-connection of the sidecar (0: off; default: the sidecar's default)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--sidecar-arg", action="append", default=[], metavar="ARG",
                    help="one more argument of `sidecar serve` (repeatable), e.g. --sidecar-arg=--fair-calls=0")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp:
        res = run(Path(tmp), opts.rounds, opts.puts, opts.streams, extra=opts.sidecar_arg)
    print(table(res))
    for label, ok, fig in checks(res):
        print(f"  [{'met' if ok else 'MISSED'}] {label}: {fig}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
