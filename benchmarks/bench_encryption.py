"""What encryption at rest costs a put and a get: the same sequential calls against a sidecar without keys and
one whose namespace is encrypted (--encryption-keys), side by side in one run, and the seal/open cost itself.

    .venv/bin/python benchmarks/bench_encryption.py [--calls 1500] [--size 2048]
    .venv/bin/python benchmarks/run.py --only encryption

Each sidecar has its own data dir (``process`` durability, so fsync noise does not hide the difference).
The client puts checkpoints of a fresh ``--size``-byte text value (never deduplicated) and gets the latest
checkpoint with its value, one call at a time; variants take turns in rounds of 100 so the shared machine's
noise hits them alike. The table gives p50/p99 per call and the encrypted/plain ratio of the p50s. The
micro rows time AES-256-GCM sealing and opening of one such record in process (no RPC).
"""
from __future__ import annotations

import argparse
import base64
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from agentstate import Client  # noqa: E402

NS = "bench"
ROUND = 100


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))]


def _start(data: Path, *args: str) -> subprocess.Popen:
    data.mkdir(parents=True)
    log = data.parent / f"{data.name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data), "--listen",
                                 f"unix:{data}/s.sock", "--durability", "process", *args],
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if "sidecar ready" in log.read_text():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"sidecar did not start: {log.read_text()}")


def _text(rnd: random.Random, size: int) -> str:
    words = ["alpha", "beta", "gamma", "delta", "tool", "call", "result", "user", "assistant", "said"]
    out = []
    n = 0
    while n < size:
        w = rnd.choice(words) if rnd.random() < 0.7 else "%08x" % rnd.getrandbits(32)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


def micro(size: int, n: int = 5000) -> dict:
    """Seal and open of one ``size``-byte value record, in microseconds (p50)."""
    from sidecar.storage import encryption
    ring = encryption.parse(f'[[key]]\nnamespace = "m"\nid = "k"\nkey = "{encryption.new_key()}"\n')
    ids = encryption.install(ring, {})
    try:
        key = ring.keys["m"][0]
        h, body = os.urandom(32), b"v" + os.urandom(size)
        seal, opened = [], []
        for _ in range(n):
            t = time.perf_counter()
            rec = h + key.seal(h, body)
            seal.append(time.perf_counter() - t)
            t = time.perf_counter()
            encryption.open_record(rec)
            opened.append(time.perf_counter() - t)
        return {"seal_p50_us": round(_pct(seal, 50) * 1e6, 2), "open_p50_us": round(_pct(opened, 50) * 1e6, 2)}
    finally:
        encryption.uninstall(ids)


def run(base: Path, calls: int, size: int, log=print) -> dict:
    keys = base / "keys.toml"
    keys.write_text(f'[[key]]\nnamespace = "{NS}"\nid = "k1"\nkey = "{base64.b64encode(os.urandom(32)).decode()}"\n')
    keys.chmod(0o600)
    procs = {"plain": _start(base / "plain"), "encrypted": _start(base / "enc", "--encryption-keys", str(keys))}
    times: dict[str, dict[str, list[float]]] = {k: {"put": [], "get": []} for k in procs}
    clients = {k: Client(f"unix:{base / ('plain' if k == 'plain' else 'enc')}/s.sock", namespace=NS) for k in procs}
    rnd = random.Random(1)
    try:
        for c in clients.values():  # warm up: connection, first thread, compression dictionary samples
            for i in range(50):
                c.put_checkpoint("warm", {"v": _text(rnd, size)})
                c.get_checkpoint("warm")
        done = 0
        while done < calls:
            for name, c in clients.items():
                for i in range(ROUND):
                    value = _text(rnd, size)
                    t = time.perf_counter()
                    c.put_checkpoint("t", {"v": value})
                    times[name]["put"].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    c.get_checkpoint("t")
                    times[name]["get"].append(time.perf_counter() - t)
            done += ROUND
            log(f"  {done} of {calls} calls per variant")
    finally:
        for c in clients.values():
            c.close()
        for p in procs.values():
            p.terminate()
            p.wait(20)
    out: dict = {"calls": calls, "size": size}
    for name, t in times.items():
        out[name] = {op: {"p50_ms": round(_pct(v, 50) * 1e3, 4), "p99_ms": round(_pct(v, 99) * 1e3, 4),
                          "mean_ms": round(statistics.fmean(v) * 1e3, 4)} for op, v in t.items()}
    for op in ("put", "get"):
        out[f"{op}_ratio"] = round(out["encrypted"][op]["p50_ms"] / out["plain"][op]["p50_ms"], 3)
    out["micro"] = micro(size)
    return out


def table(r: dict) -> str:
    lines = [f"{'variant':12s} {'put p50 ms':>11s} {'put p99 ms':>11s} {'get p50 ms':>11s} {'get p99 ms':>11s}"]
    for name in ("plain", "encrypted"):
        v = r[name]
        lines.append(f"{name:12s} {v['put']['p50_ms']:11.3f} {v['put']['p99_ms']:11.3f} {v['get']['p50_ms']:11.3f} "
                     f"{v['get']['p99_ms']:11.3f}")
    lines.append(f"{'ratio':12s} {r['put_ratio']:10.3f}x {'':11s} {r['get_ratio']:10.3f}x")
    m = r["micro"]
    lines.append(f"AES-256-GCM of one {r['size']}-byte record in process: seal {m['seal_p50_us']:.1f} us, "
                 f"open {m['open_p50_us']:.1f} us (p50)")
    return "\n".join(lines)


def encryption_workload(base: Path, quick: bool, log) -> dict:
    """benchmarks/run.py's ``encryption`` workload."""
    d = base / "encryption"
    d.mkdir()
    return run(d, 500 if quick else 2000, 2048, log)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1500, help="puts and gets per variant (default 1500)")
    ap.add_argument("--size", type=int, default=2048, help="bytes of each put's value (default 2048)")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-encryption-") as tmp:
        r = run(Path(tmp), opts.calls, opts.size)
    print(f"encryption at rest ({r['calls']} sequential puts and gets of a {r['size']}-byte value per variant, "
          "process durability)")
    print(table(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
