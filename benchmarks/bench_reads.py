"""bench_reads: the get of the latest checkpoint of a long chat, next to the echo floor, in one run.

    python benchmarks/bench_reads.py [--messages 1600] [--rounds 10] [--per-round 40] [--json PATH]
                                     [--baseline DIR]

A thread is built of ``--messages`` 400-character chat messages ({"role", "content"} maps, seeded text),
appended 16 at a time. Then, in rounds (order shuffled per round), the client's wall time of:

- ``echo``: a bare gRPC echo of a small PutCheckpointRequest (benchmarks/echo_server.py, the put-latency
  floor of benchmarks/run.py);
- ``get``: ``Client.get_checkpoint(thread)`` (the latest checkpoint, all channels, values) through the
  sidecar of this checkout;
- ``get baseline`` (with ``--baseline DIR``): the same through a sidecar run from another checkout
  (``DIR`` on PYTHONPATH, its own data dir holding the same puts), so old and new builds take turns;
- ``get_values``: ``Client.get_values(thread)``, the same read decoded into Python values.

After the servers stop, the GetCheckpoint handler is timed in-process on this checkout's data dir (as
bench_core does), in fresh processes of each build taking turns: ``checkpoints.get`` alone, plus
SerializeToString, and (where it exists) ``checkpoints.get_wire``, the serialized answer the servicer
sends (where answers are kept, checkpoints.ANSWER_MIN: the kept one, and also built every time with none
kept). ``echo of the response's size``: the echo server's ``Blob`` returning as many bytes as the get's
response (the transport floor of this read).

Prints p50/p99 of each and the target of benchmarks/run.py's ``get-latest`` workload: get p50 <= 1.5 x
echo p50 + 0.5 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from textgen import TextGen  # noqa: E402

MSG_CHARS = 400


def pct(values, q):
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))]


def ms(values_s):
    v = [x * 1e3 for x in values_s]
    return {"n": len(v), "p50_ms": round(pct(v, 50), 4), "p99_ms": round(pct(v, 99), 4),
            "mean_ms": round(statistics.fmean(v), 4)}


def start(argv, sock: Path, log: Path, env=None, cwd=None):
    import grpc
    proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=cwd)
    deadline = time.monotonic() + 60
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{argv[:4]} did not start: see {log}")
        time.sleep(0.02)
    ch = grpc.insecure_channel(f"unix:{sock}")
    grpc.channel_ready_future(ch).result(timeout=60)
    ch.close()
    return proc


def stop(proc) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def sidecar(base: Path, name: str, checkout: Path | None):
    data = base / name
    data.mkdir(parents=True)
    env = dict(os.environ)
    cwd = None
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), str(checkout / "clients" / "python")])
        cwd = str(checkout)
    sock = data / "sidecar.sock"
    proc = start([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data), "--listen", f"unix:{sock}",
                  "--durability", "process", "--log-level", "WARNING"], sock, base / f"{name}.log", env, cwd)
    return proc, f"unix:{sock}", data


def fill(address: str, thread: str, messages: int, seed: int) -> None:
    from agentstate import Append, Client
    gen = TextGen(seed)
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": gen.text(MSG_CHARS)} for i in range(messages)]
    with Client(address, timeout=120) as c:
        parent = ""
        for i in range(0, messages, 16):
            batch = msgs[i:i + 16]
            r = c.put_checkpoint(thread, {"messages": batch if i == 0 else Append(batch)}, parent_id=parent,
                                 metadata={"source": "loop", "step": i})
            parent = r.checkpoint.checkpoint_id
        got = c.get_values(thread)["messages"]
        if got != msgs:
            raise SystemExit("the sidecar did not return the messages put")


def server_side(data_dir: Path, thread: str, expect: int, iterations: int) -> dict:
    from agentstate.v1 import threads_pb2 as pb
    from sidecar.api import checkpoints
    from sidecar.storage.store import Store

    store = Store(str(data_dir))
    req = pb.GetCheckpointRequest(thread_id=thread)

    def handler():
        coro = checkpoints.get(store, req)
        try:
            coro.send(None)
        except StopIteration as stop_:
            return stop_.value
        raise RuntimeError("GetCheckpoint handler suspended")

    try:
        r = handler()
        if len(r.checkpoint.channels["messages"].value.list.items) != expect:
            raise SystemExit("server-side get returned the wrong list")
        for _ in range(20):
            handler().SerializeToString()
        hs, both = [], []
        for _ in range(iterations):
            t0 = time.perf_counter()
            r = handler()
            t1 = time.perf_counter()
            r.SerializeToString()
            t2 = time.perf_counter()
            hs.append(t1 - t0)
            both.append(t2 - t0)
        wire_s = []
        if hasattr(checkpoints, "get_wire"):  # what the servicer answers with (serialized there)
            for _ in range(iterations):
                t0 = time.perf_counter()
                coro = checkpoints.get_wire(store, req)
                try:
                    coro.send(None)
                except StopIteration:
                    pass
                wire_s.append(time.perf_counter() - t0)
        built_s = []
        if hasattr(checkpoints, "ANSWER_MIN"):  # answers kept (checkpoints.ANSWER_MIN): also timed with none kept
            checkpoints.ANSWER_MIN = 1 << 62
            checkpoints._forget_answers()
            for _ in range(iterations):
                t0 = time.perf_counter()
                coro = checkpoints.get_wire(store, req)
                try:
                    coro.send(None)
                except StopIteration:
                    pass
                built_s.append(time.perf_counter() - t0)
    finally:
        store.close()
    return {"handler": hs, "handler_plus_serialize": both, "get_wire": wire_s, "get_wire_built": built_s}


def handler_process(data_dir: Path, thread: str, args, checkout: Path | None) -> dict:
    """server_side in a fresh process of this checkout or of ``checkout`` (the baseline)."""
    env = dict(os.environ)
    cwd = None
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), str(checkout / "clients" / "python")])
        cwd = str(checkout)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--handler-only", str(data_dir), thread,
                          str(args.messages), str(args.handler_iterations)], env=env, cwd=cwd, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def merge(runs: list[dict]) -> dict:
    """Pooled samples of several handler processes."""
    out = {}
    for key in ("handler", "handler_plus_serialize", "get_wire", "get_wire_built"):
        samples = [x for r in runs for x in r.get(key, [])]
        if samples:
            out[key] = ms(samples)
    return out


def run(args) -> dict:
    import grpc
    from agentstate import Client
    from agentstate import _requests as rq
    from agentstate.v1 import threads_pb2 as pb
    from sidecar.storage import hotpath

    base = Path(tempfile.mkdtemp(prefix="bench-reads-"))
    procs = []
    res = {"messages": args.messages, "native": hotpath.NATIVE, "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        echo = start([sys.executable, str(HERE / "echo_server.py"), f"unix:{base / 'echo.sock'}"], base / "echo.sock",
                     base / "echo.log")
        procs.append(echo)
        new, new_addr, new_data = sidecar(base, "new", None)
        procs.append(new)
        addrs = {"get": new_addr}
        if args.baseline:
            old, old_addr, _ = sidecar(base, "baseline", Path(args.baseline).resolve())
            procs.append(old)
            addrs["get baseline"] = old_addr
        thread = "chat"
        for a in addrs.values():
            fill(a, thread, args.messages, seed=7)
        ch = grpc.insecure_channel(f"unix:{base / 'echo.sock'}")
        echo_call = ch.unary_unary("/bench.Echo/Echo", request_serializer=pb.PutCheckpointRequest.SerializeToString,
                                   response_deserializer=pb.PutCheckpointRequest.FromString)
        echo_req = rq.put_checkpoint_request("default", "echo", {"messages": ["x" * MSG_CHARS]}, checkpoint_id="",
                                             parent_id="p", base_id="", checkpoint_ns="",
                                             metadata={"source": "loop", "step": 1}, extra=None,
                                             expected_head_etag=None, schema_version=0, require_thread=False,
                                             request_id="")
        clients = {name: Client(a, timeout=120) for name, a in addrs.items()}

        def do_echo():
            t = time.perf_counter()
            echo_call(echo_req, timeout=30)
            return time.perf_counter() - t

        size = pb.GetCheckpointResponse(checkpoint=clients["get"].get_checkpoint(thread)).ByteSize()
        res["response_bytes"] = size
        blob_call = ch.unary_unary("/bench.Echo/Blob")
        blob_req = str(size).encode()

        def do_blob():
            t = time.perf_counter()
            blob_call(blob_req, timeout=30)
            return time.perf_counter() - t

        def getter(c):
            def do():
                t = time.perf_counter()
                ck = c.get_checkpoint(thread)
                dt = time.perf_counter() - t
                if len(ck.channels["messages"].value.list.items) != args.messages:
                    raise SystemExit("wrong list")
                return dt
            return do

        def values(c):
            def do():
                t = time.perf_counter()
                v = c.get_values(thread)
                dt = time.perf_counter() - t
                if len(v["messages"]) != args.messages:
                    raise SystemExit("wrong list")
                return dt
            return do

        variants = {"echo": do_echo, "echo of the response's size": do_blob}
        for name, c in clients.items():
            variants[name] = getter(c)
        variants["get_values"] = values(clients["get"])
        if args.baseline:
            variants["get_values baseline"] = values(clients["get baseline"])
        samples = {k: [] for k in variants}
        for fn in variants.values():
            for _ in range(20):
                fn()
        order = list(variants)
        for r in range(args.rounds):
            random.Random(r).shuffle(order)
            for k in order:
                for _ in range(args.per_round):
                    samples[k].append(variants[k]())
        for c in clients.values():
            c.close()
        ch.close()
        for p in procs:
            stop(p)
        procs = []
        res.update({k: ms(v) for k, v in samples.items()})
        if args.baseline:  # alternate: new, baseline, new, baseline, ... (each its own process)
            runs: dict[str, list] = {"new": [], "baseline": []}
            for i in range(2 * args.handler_processes):
                which = "new" if i % 2 == 0 else "baseline"
                runs[which].append(handler_process(new_data, thread, args, None if which == "new"
                                                   else Path(args.baseline).resolve()))
            res["server"], res["server baseline"] = merge(runs["new"]), merge(runs["baseline"])
        else:
            res["server"] = merge([handler_process(new_data, thread, args, None)
                                   for _ in range(args.handler_processes)])
        res["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(base, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1600)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=40)
    ap.add_argument("--handler-iterations", type=int, default=300)
    ap.add_argument("--baseline", default="")
    ap.add_argument("--handler-processes", type=int, default=3, help="handler timing processes per build")
    ap.add_argument("--json", default="")
    ap.add_argument("--handler-only", nargs=4, metavar=("DATA_DIR", "THREAD", "MESSAGES", "ITERATIONS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.handler_only:
        d, t, n, it = args.handler_only
        print(json.dumps(server_side(Path(d), t, int(n), int(it))))
        return
    res = run(args)
    print(f"bench_reads: {args.messages} messages, native={res['native']}, load {res['loadavg_at_start']} -> "
          f"{res['loadavg_at_end']}")
    for k in [k for k in res if isinstance(res[k], dict) and "p50_ms" in res[k]]:
        print(f"  {k:22s} p50 {res[k]['p50_ms']:.3f} ms  p99 {res[k]['p99_ms']:.3f} ms  (n={res[k]['n']})")
    print(f"  response: {res['response_bytes']:,} bytes")
    for name in ("server", "server baseline"):
        if name in res:
            s = res[name]
            print(f"  {name}: handler (in process) p50 {s['handler']['p50_ms']:.3f} ms  p99 {s['handler']['p99_ms']:.3f} ms;"
                  f" + serialise p50 {s['handler_plus_serialize']['p50_ms']:.3f} ms  "
                  f"p99 {s['handler_plus_serialize']['p99_ms']:.3f} ms")
            if "get_wire" in s:
                print(f"  {name}: get_wire (the servicer's serialized answer) p50 {s['get_wire']['p50_ms']:.3f} ms  "
                      f"p99 {s['get_wire']['p99_ms']:.3f} ms")
            if "get_wire_built" in s:
                print(f"  {name}: get_wire with no answer kept (built every time) p50 "
                      f"{s['get_wire_built']['p50_ms']:.3f} ms  p99 {s['get_wire_built']['p99_ms']:.3f} ms")
    limit = 1.5 * res["echo"]["p50_ms"] + 0.5
    got = res["get"]["p50_ms"]
    print(f"  target: get p50 <= 1.5 x echo p50 + 0.5 ms = {limit:.3f} ms: {'met' if got <= limit else 'MISSED'} "
          f"({got:.3f} ms)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
