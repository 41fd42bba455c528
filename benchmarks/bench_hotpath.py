"""Benchmark the write path: compiled (sidecar.storage._hotpath_c) against pure Python (sidecar.storage._hotpath_py).

    python benchmarks/bench_hotpath.py [--rounds N] [--json PATH]

Write path = what the server does with a value a client sends, plus the
client's encoding of its Python objects:
encode (Python objects -> canonical bytes) -> decompose -> value nodes
(content-defined chunking for big encodings) -> blake3 of every node -> list /
map tree. Both implementations run in the same process, interleaved round by
round, so a busy machine slows both alike; the table reports the median
round (min in the JSON too). Their outputs are checked to be identical.

Workloads:
  (a) checkpoint put, the whole server put path: benchmarks/bench_put_cpu.py's chat workload (a LangGraph-like
      put appending 2 messages to "messages" by a delta, with keeps, small channels and metadata) handed to
      the server's PutCheckpoint handler in-process: validation, conversion, delta application, tree
      building, node and hash-index writes, manifest, usage, commit. Server CPU (time.process_time) per
      put; the two builds run in separate processes (SIDECAR_NO_EXTENSIONS=1 for pure Python), alternating
      round by round. Until issue 17 this row timed only what (a0) times.
  (a0) checkpoint values only: a "messages" channel holding 100 messages {"role", "content": 400 chars},
      encode -> decompose -> nodes -> hash -> tree, both modules in this process
  (b) 1 MB string (chunked by CDC)
Overall = total time of (a)+(b) pure / total compiled; the geometric mean of
the per-workload ratios is printed too ((a0) is in neither). A second table times the read and
append calls the server makes per request (not part of the overall number).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import string
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sidecar.storage import _hotpath_py as PY  # noqa: E402

try:
    from sidecar.storage import _hotpath_c as C  # noqa: E402
except ImportError:  # pragma: no cover
    raise SystemExit("sidecar.storage._hotpath_c is not built: pip install -e . (or python setup.py build_ext --inplace)")


def messages(n: int, size: int = 400, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "     .,"
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": "".join(rnd.choices(alphabet, k=size))} for i in range(n)]


def big_string(n: int = 1 << 20, seed: int = 2) -> str:
    rnd = random.Random(seed)
    words = ["".join(rnd.choices(string.ascii_lowercase, k=rnd.randint(2, 10))) for _ in range(5000)]
    out = []
    total = 0
    while total < n:
        w = rnd.choice(words)
        out.append(w)
        total += len(w) + 1
    return " ".join(out)[:n]


def write_path(impl, value) -> tuple[bytes, list]:
    """Python value -> stored nodes; returns (root hash, nodes)."""
    nodes: list = []
    kind, payload = impl.decompose(impl.encode(value))
    if kind == impl.KIND_LIST:
        root = impl.build_list(payload, nodes)
    elif kind == impl.KIND_MAP:
        root = impl.build_map(payload, nodes)
    else:
        root = impl.value_node(payload, nodes)
    return root, nodes


def stored_records(nodes: list) -> list[tuple[bytes, bytes]]:
    """(id, record) pairs as the server stores built nodes: ids 1, 2, ... children first, record = hash + stored node."""
    ids: dict[bytes, bytes] = {}
    out = []
    for h, node in nodes:
        if h not in ids:
            node_id = (len(ids) + 1).to_bytes(8, "big")
            out.append((node_id, h + PY.stored_node(node, ids.__getitem__)))
            ids[h] = node_id
    return out


def time_call(fn, min_time: float = 0.05) -> float:
    """Seconds per call (runs the call repeatedly for at least ``min_time``)."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return dt / n
        n = max(n * 2, int(n * min_time / max(dt, 1e-9)) + 1)


def put_path(pure: bool, puts: int) -> float:
    """Server CPU seconds per put of bench_put_cpu.py's chat workload, in a fresh process of one build."""
    env = dict(os.environ)
    env.pop("SIDECAR_NO_EXTENSIONS", None)
    if pure:
        env["SIDECAR_NO_EXTENSIONS"] = "1"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_put_cpu.py"), "--puts", str(puts),
                          "--repeat", "1", "--json"], env=env, check=True, capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["compiled"] is not pure, "the build asked for is not the one that ran"
    return res["cpu_per_put_s"]


def run(rounds: int, puts: int = 800) -> dict:
    results = {}
    py_t, c_t = [], []
    for _ in range(rounds):
        py_t.append(put_path(True, puts))
        c_t.append(put_path(False, puts))
    results["(a) checkpoint put, whole server path"] = {
        "python_s": statistics.median(py_t), "compiled_s": statistics.median(c_t),
        "python_min_s": min(py_t), "compiled_min_s": min(c_t), "puts": puts}
    workloads = {
        "(a0) checkpoint values only, 100 messages": messages(100),
        "(b) 1 MB string": big_string(),
    }
    for name, value in workloads.items():
        (r1, n1), (r2, n2) = write_path(PY, value), write_path(C, value)
        assert r1 == r2 and n1 == n2, f"{name}: the implementations disagree"
        py_t, c_t = [], []
        for _ in range(rounds):
            py_t.append(time_call(lambda: write_path(PY, value)))
            c_t.append(time_call(lambda: write_path(C, value)))
        results[name] = {"python_s": statistics.median(py_t), "compiled_s": statistics.median(c_t),
                         "python_min_s": min(py_t), "compiled_min_s": min(c_t), "nodes": len(n1)}

    # other per-request calls (reads go through a fetch callback, as the server's LMDB reads do)
    history = [C.encode(m) for m in messages(1600, seed=3)]
    nodes: list = []
    PY.build_list(history, nodes)
    root_node = nodes[-1][1]
    records = stored_records(nodes)
    root_record = records[-1][1]
    fetch = dict(records).__getitem__
    new = [C.encode(m) for m in messages(3, seed=4)]
    calls = {
        "stored_list_encodings, 1,600 items": lambda impl: impl.stored_list_encodings(root_record, fetch),
        "append 3 messages to 1,600": lambda impl: impl.build_list(new, [], root_node),
        "canonicalize 1 message": lambda impl: impl.canonicalize(history[0]),
    }
    extra = {}
    for name, fn in calls.items():
        assert fn(PY) == fn(C), name
        py_t = [time_call(lambda: fn(PY), 0.03) for _ in range(rounds)]
        c_t = [time_call(lambda: fn(C), 0.03) for _ in range(rounds)]
        extra[name] = {"python_s": statistics.median(py_t), "compiled_s": statistics.median(c_t),
                       "python_min_s": min(py_t), "compiled_min_s": min(c_t)}

    counted = [r for name, r in results.items() if not name.startswith("(a0)")]
    total_py = sum(r["python_s"] for r in counted)
    total_c = sum(r["compiled_s"] for r in counted)
    ratios = [r["python_s"] / r["compiled_s"] for r in counted]
    return {
        "workloads": results,
        "overall": {"python_s": total_py, "compiled_s": total_c, "speedup_total_time": total_py / total_c,
                    "speedup_geometric_mean": math.exp(sum(map(math.log, ratios)) / len(ratios))},
        "other_calls": extra,
        "rounds": rounds,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
    }


def fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def print_table(res: dict) -> None:
    rows = [(name, r["python_s"], r["compiled_s"]) for name, r in res["workloads"].items()]
    width = max(len(r[0]) for r in rows + [("overall (a)+(b)",)] + [(n,) for n in res["other_calls"]])
    head = f"{'write path':<{width}}  {'pure Python':>12}  {'compiled':>12}  {'speedup':>8}"
    print(head)
    print("-" * len(head))
    for name, p, c in rows:
        print(f"{name:<{width}}  {fmt_time(p):>12}  {fmt_time(c):>12}  {p / c:>7.1f}x")
    o = res["overall"]
    print("-" * len(head))
    print(f"{'overall (a)+(b), total time':<{width}}  {fmt_time(o['python_s']):>12}  {fmt_time(o['compiled_s']):>12}  "
          f"{o['speedup_total_time']:>7.1f}x")
    print(f"{'overall, geometric mean':<{width}}  {'':>12}  {'':>12}  {o['speedup_geometric_mean']:>7.1f}x")
    print()
    head2 = f"{'other hot-path calls':<{width}}  {'pure Python':>12}  {'compiled':>12}  {'speedup':>8}"
    print(head2)
    print("-" * len(head2))
    for name, r in res["other_calls"].items():
        print(f"{name:<{width}}  {fmt_time(r['python_s']):>12}  {fmt_time(r['compiled_s']):>12}  "
              f"{r['python_s'] / r['compiled_s']:>7.1f}x")
    print(f"\n(median of {res['rounds']} interleaved rounds; Python {res['python']}, {res['machine']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds per workload (default 7)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--puts", type=int, default=800, help="puts per process in (a) (default 800; 300 more warm up)")
    args = ap.parse_args()
    res = run(args.rounds, args.puts + 300)
    print_table(res)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
