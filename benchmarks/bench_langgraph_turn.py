"""Where a LangGraph chat turn's wall time goes with SidecarSaver (issue 17): its two waits and the rest.

    python benchmarks/bench_langgraph_turn.py [--turns 800] [--at 50,200,800] [--window 20] [--block 10]

Runs the chat of bench_langgraph_chat.py (one node, plain ``add_messages``,
400-character messages, 3 checkpoints per turn) in this process, with
SidecarSaver against a sidecar started here and with LangGraph's
InMemorySaver on a graph of its own, the two taking turns in blocks of
``--block`` turns (so a busy machine slows both alike), and reports per turn,
the median over the ``window`` turns up to each N of ``--at``:

* ``wall``: the wall time of ``graph.invoke`` (InMemorySaver's beside it, and the ratio);
* the saver's two waits: ``read`` is the GetCheckpoint call of the
  ``get_tuple`` that opens the run (the round trip, without decoding the
  answer), ``barrier`` the end of the run waiting until the run's puts and
  writes are acknowledged (they travel together on the saver's stream, so this
  is mostly the sidecar applying them and committing);
* ``rest``: wall minus the two waits: LangGraph and the saver's own work;
* CPU per turn (ms): the client process (``cpu``) and the sidecar process
  (``server``, from /proc, 10 ms clock ticks: a mean over the window, coarse),
  and the thread CPU of what grows with the history on the client:
  ``hand_out`` (a new object per message of the read), ``prefix`` (a put's
  messages checked against their mirrors), ``reducer`` (add_messages, twice
  a turn: LangGraph's own), ``gc`` (the cyclic collector's pauses, wall).

Instrumentation wraps the saver's methods in this process only; it costs a few
microseconds a turn. Figures move with the machine (2 cores shared with other
work here): read them as proportions within one run, with the load average.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_langgraph_chat import Plain, Sidecar, chat_graph, text  # noqa: E402


def _proc_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=800)
    ap.add_argument("--at", default="50,200,800", help="turns to report (comma-separated)")
    ap.add_argument("--window", type=int, default=20, help="turns of each median")
    ap.add_argument("--block", type=int, default=10, help="turns each saver runs before the other's")
    opts = ap.parse_args()
    at = sorted(int(x) for x in opts.at.split(",") if int(x) <= opts.turns)

    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from agentstate.langgraph import SidecarSaver, _core, _mirror

    acc: dict[str, float] = {}

    def add(label: str, dt: float) -> None:
        acc[label] = acc.get(label, 0.0) + dt

    def timed(owner, name, label, clock):
        fn = getattr(owner, name)

        def wrapper(*a, **kw):
            t = clock()
            try:
                return fn(*a, **kw)
            finally:
                add(label, clock() - t)

        setattr(owner, name, wrapper)

    gc_start = [0.0]

    def on_gc(phase, info):
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            add("gc", time.perf_counter() - gc_start[0])

    rnd = random.Random(8)
    questions = [text(rnd) for _ in range(opts.turns)]
    replies = {2 * i + 1: text(rnd) for i in range(opts.turns)}
    base = Path(tempfile.mkdtemp(prefix="bench-turn-"))
    sc = Sidecar(base / "sidecar")
    try:
        saver = SidecarSaver(sc.address)
        timed(_core, "hand_out", "hand_out", time.thread_time)
        timed(_core, "common_prefix", "prefix", time.thread_time)
        client = saver.client

        # the read's round trip: the GetCheckpoint call get_tuple makes (the saver's _call of that method)
        call = saver._call

        def call_timed(method, request):
            t = time.perf_counter()
            try:
                return call(method, request)
            finally:
                if method is client.threads.GetCheckpoint:
                    add("read", time.perf_counter() - t)

        saver._call = call_timed
        timed(saver._writer, "flush", "barrier", time.perf_counter)  # end_run's flush (and get_tuple's, ~0)
        graphs = {"sidecar": chat_graph(Plain, saver, replies), "inmemory": chat_graph(Plain, InMemorySaver(), replies)}
        for g in graphs.values():
            channel = g.channels["messages"]
            op = channel.operator

            def reducer(a, b, op=op):
                t = time.thread_time()
                try:
                    return op(a, b)
                finally:
                    add("reducer", time.thread_time() - t)

            channel.operator = reducer
        gc.callbacks.append(on_gc)
        config = {"configurable": {"thread_id": "chat"}}
        rows: dict[str, list[dict]] = {n: [] for n in graphs}
        print(f"{opts.turns} turns, sidecar and InMemorySaver in this process taking turns in blocks of {opts.block} "
              f"(mirrors: {'compiled' if _mirror.NATIVE else 'pure Python'}); medians over {opts.window} turns, ms")
        cols = ("wall", "read", "barrier", "rest", "cpu", "server", "hand_out", "prefix", "reducer", "gc")
        print(f"{'N':>5s}{'inmem':>8s}{'ratio':>7s}" + "".join(f"{c:>9s}" for c in cols) + "   load")
        turn = {n: 0 for n in graphs}
        while turn["sidecar"] < opts.turns:
            for name, g in graphs.items():
                for _ in range(opts.block):
                    if turn[name] >= opts.turns:
                        break
                    i = turn[name] = turn[name] + 1
                    acc.clear()
                    c0, s0, t0 = time.process_time(), _proc_cpu(sc.proc.pid), time.perf_counter()
                    g.invoke({"messages": [HumanMessage(questions[i - 1])]}, config)
                    row = dict(acc, wall=time.perf_counter() - t0, cpu=time.process_time() - c0)
                    if name == "sidecar":
                        row["server"] = _proc_cpu(sc.proc.pid) - s0
                        row["rest"] = row["wall"] - row.get("read", 0.0) - row.get("barrier", 0.0)
                    rows[name].append(row)
            done = turn["sidecar"]
            for n in list(at):
                if n <= done < n + opts.block and turn["inmemory"] >= n:
                    win = {k: v[n - opts.window:n] for k, v in rows.items()}
                    med = {c: statistics.median(r.get(c, 0.0) for r in win["sidecar"]) * 1e3 for c in cols}
                    med["server"] = statistics.mean(r["server"] for r in win["sidecar"]) * 1e3
                    inmem = statistics.median(r["wall"] for r in win["inmemory"]) * 1e3
                    print(f"{n:5d}{inmem:8.2f}{med['wall'] / inmem:7.2f}" + "".join(f"{med[c]:9.2f}" for c in cols)
                          + f"   {os.getloadavg()[0]:.2f}", flush=True)
                    at.remove(n)
        saver.close()
    finally:
        sc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
