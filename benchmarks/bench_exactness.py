"""What exactness costs the LangGraph savers per chat turn (issue 10): the mirror checks and hand-outs.

    python benchmarks/bench_exactness.py [--turns 800] [--at 50,800] [--window 50]

Runs the chat of bench_langgraph_chat.py (one node, plain ``add_messages``,
400-character messages, 3 checkpoints per turn) with SidecarSaver in this
process, against a sidecar started here, and measures, per turn over the
``window`` turns up to each of ``--at``:

* the thread CPU time of each piece exactness adds: ``hand_out`` (a new
  object for every message of every read: the record's mirror thawed; a
  message read for the first time is deserialized, mirrored, and serialized
  once more to check that it reads back as it was stored), ``common_prefix``
  (every message of a put checked against its record's mirror), and
  ``freeze`` of the new messages a put sends (their mirror). The cyclic
  garbage collector is held off inside these pieces (the saver holds it off
  during hand-outs itself), so their figures are their own work;
* the time the cyclic garbage collector ran in the process (every
  generation). A read's new objects live through the turn; made with the
  collector running, they would meet a dozen young collections and be
  promoted, making full collections of the whole process heap (LangGraph,
  pydantic, grpc: ~130k objects, ~80 ms each here) come about every few turns
  at 800 turns; the saver pauses the collector while it makes them;
* the wall time of a turn, and the process CPU time per turn.

Every saver that returns new objects on each read pays the hand-out and the
collector too (InMemorySaver and SqliteSaver deserialize the whole history
every turn); the old SidecarSaver handed out the objects it had cached,
which was fast and wrong (an object changed by one caller changed what the
next read returned). Figures move with the machine; compare them within one
run (docs/langgraph.md).
"""
from __future__ import annotations

import argparse
import collections
import gc
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_langgraph_chat import Plain, Sidecar, chat_graph, text  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=800)
    ap.add_argument("--at", default="50,800", help="turns to report (comma-separated)")
    ap.add_argument("--window", type=int, default=50, help="turns averaged for each report")
    opts = ap.parse_args()
    at = sorted(int(x) for x in opts.at.split(","))

    import random

    from langchain_core.messages import HumanMessage

    from agentstate.langgraph import SidecarSaver, _core, _mirror

    cpu = collections.Counter()
    inside = [0]  # a piece called from another (fresh's freeze) counts for the outer one only

    def timed(owner, name, label):
        fn = getattr(owner, name)

        def wrapper(*a, **kw):
            if inside[0]:
                return fn(*a, **kw)
            inside[0] += 1
            enabled = gc.isenabled()
            gc.disable()
            t = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                cpu[label] += time.thread_time() - t
                inside[0] -= 1
                if enabled:
                    gc.enable()

        setattr(owner, name, wrapper)

    timed(_core, "hand_out", "hand_out")  # includes the first reads of new messages (Core._fresh)
    timed(_core, "common_prefix", "common_prefix")
    timed(_core, "freeze", "freeze")
    gc_time = [0.0, 0.0]

    def on_gc(phase, info):
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]

    gc.callbacks.append(on_gc)

    rnd = random.Random(8)
    questions = [text(rnd) for _ in range(opts.turns)]
    replies = {2 * i + 1: text(rnd) for i in range(opts.turns)}
    base = Path(tempfile.mkdtemp(prefix="bench-exact-"))
    sc = Sidecar(base / "sidecar")
    try:
        saver = SidecarSaver(sc.address)
        graph = chat_graph(Plain, saver, replies)
        config = {"configurable": {"thread_id": "chat"}}
        print(f"SidecarSaver, {opts.turns} turns, mirrors: {'compiled' if _mirror.NATIVE else 'pure Python'}; "
              f"per turn, averaged over the {opts.window} turns up to N (ms)")
        cols = ["hand_out", "common_prefix", "freeze"]
        print(f"{'N':>5s}" + "".join(f"{c:>15s}" for c in cols) + f"{'exact, all':>12s}{'gc':>9s}{'cpu':>9s}"
              f"{'wall':>9s}")
        start = None
        for turn in range(1, opts.turns + 1):
            if any(turn == n - opts.window + 1 for n in at):
                cpu.clear()
                gc_time[0] = 0.0
                start = (time.perf_counter(), time.process_time())
            graph.invoke({"messages": [HumanMessage(questions[turn - 1])]}, config)
            if turn in at and start is not None:
                n = min(opts.window, turn)
                wall, proc = time.perf_counter() - start[0], time.process_time() - start[1]
                per = {c: cpu[c] * 1e3 / n for c in cols}
                print(f"{turn:5d}" + "".join(f"{per[c]:15.3f}" for c in cols) + f"{sum(per.values()):12.3f}"
                      f"{gc_time[0] * 1e3 / n:9.2f}{proc * 1e3 / n:9.2f}{wall * 1e3 / n:9.2f}")
        saver.close()
    finally:
        sc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
