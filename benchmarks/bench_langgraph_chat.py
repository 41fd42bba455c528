"""The LangGraph chat benchmark of DESIGN.md §8: SidecarSaver against LangGraph's own savers.

    python benchmarks/bench_langgraph_chat.py [--turns 800] [--at 50,200,800] [--window 10] [--json PATH]

A one-node chat graph (``messages: Annotated[list, add_messages]``; each turn
the user sends a 400-character message and the node answers with another, 3
checkpoints per turn) runs the same turns with:

  sidecar        SidecarSaver over a sidecar started here (unix socket), plain add_messages
  sidecar+wb     the same with write_behind=True (its own data directory and sidecar); its time
                 per turn includes flush(), i.e. the turn's checkpoints are stored when it ends
  sqlite         langgraph-checkpoint-sqlite's SqliteSaver, plain add_messages
  sqlite+delta   SqliteSaver with the messages in LangGraph's DeltaChannel
  lmdb           langgraph-checkpoint-lmdb's LMDBSaver, plain add_messages

The savers take turns (turn 1 of each, then turn 2 of each, ..., the order
rotating every turn), so a busy machine slows them alike. "ms/turn at N" is
the median wall time of ``graph.invoke`` over turns N-window+1..N, LangGraph's
default durability ("async": invoke returns once its checkpoints are
stored). "bytes at N" is the size of each saver's data directory after turn
N (the sidecar's: the LMDB environment, after its writes were acknowledged;
SQLite: the database file with its journal). Messages are unique text
(seeded), 1,600 x 400 characters = 0.64 MB of payload in 800 turns.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    import lmdb
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.channels import DeltaChannel
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import _messages_delta_reducer, add_messages
    from langgraph_checkpoint_lmdb import LMDBSaver
    from typing_extensions import TypedDict
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"{e}: pip install -e '.[bench]' (langgraph, langgraph-checkpoint-sqlite, "
                     "langgraph-checkpoint-lmdb)")

from agentstate import Client  # noqa: E402
from agentstate.langgraph import SidecarSaver  # noqa: E402

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more "
         "write go see number no way could people my than first water been call who oil its now find long down "
         "day did get come made may part agent graph state message tool result checkpoint thread sidecar").split()


def text(rnd: random.Random, n: int = 400) -> str:
    out = []
    size = 0
    while size < n:
        w = rnd.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


class Plain(TypedDict):
    messages: Annotated[list, add_messages]


class Delta(TypedDict):
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer)]


def chat_graph(schema, checkpointer, replies: dict):
    def bot(state):
        return {"messages": [AIMessage(replies[len(state["messages"])])]}

    b = StateGraph(schema)
    b.add_node("bot", bot)
    b.add_edge(START, "bot")
    b.add_edge("bot", END)
    return b.compile(checkpointer=checkpointer)


def dir_bytes(path: Path) -> int:
    """Bytes of a data directory, or of a SQLite database with its -wal / -shm / -journal files."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*") if f.is_file())


class Sidecar:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.address = f"unix:{data / 'sidecar.sock'}"
        log = open(data.parent / "sidecar.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data),
                                      "--listen", self.address], stdout=log, stderr=subprocess.STDOUT)
        with Client(self.address, wait_for_ready=True, timeout=30) as c:
            self.native = c.store_stats().native

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=800)
    ap.add_argument("--at", default="50,200,800", help="turns to report (comma-separated)")
    ap.add_argument("--window", type=int, default=10, help="turns per timing median")
    ap.add_argument("--only", default="", help="comma-separated subset of savers to run")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    opts = ap.parse_args()
    at = [n for n in (int(x) for x in opts.at.split(",")) if n <= opts.turns]
    rnd = random.Random(8)
    questions = [text(rnd) for _ in range(opts.turns)]
    replies = {2 * i + 1: text(rnd) for i in range(opts.turns)}

    base = Path(tempfile.mkdtemp(prefix="bench-chat-"))
    sidecar = Sidecar(base / "sidecar")
    sidecar_wb = Sidecar(base / "sidecar-wb")
    conns = []
    savers: dict = {}
    after: dict = {}
    try:
        ssaver = SidecarSaver(sidecar.address)
        savers["sidecar"] = (chat_graph(Plain, ssaver, replies), base / "sidecar")
        wbsaver = SidecarSaver(sidecar_wb.address, write_behind=True)
        savers["sidecar+wb"] = (chat_graph(Plain, wbsaver, replies), base / "sidecar-wb")
        after["sidecar+wb"] = wbsaver.flush
        for name, schema in (("sqlite", Plain), ("sqlite+delta", Delta)):
            conn = sqlite3.connect(str(base / f"{name}.sqlite"), check_same_thread=False)
            conns.append(conn)
            savers[name] = (chat_graph(schema, SqliteSaver(conn), replies), base / f"{name}.sqlite")
        (base / "lmdb").mkdir()
        env = lmdb.open(str(base / "lmdb"), map_size=16 << 30, max_dbs=8)
        savers["lmdb"] = (chat_graph(Plain, LMDBSaver(env), replies), base / "lmdb")
        if opts.only:
            savers = {k: v for k, v in savers.items() if k in opts.only.split(",")}
        names = list(savers)
        times = {n: [] for n in names}
        sizes = {n: {} for n in names}
        config = {"configurable": {"thread_id": "chat"}}
        print(f"{len(names)} savers x {opts.turns} turns (sidecar hot path: "
              f"{'compiled' if sidecar.native else 'pure Python'}); data in {base}", flush=True)
        for turn in range(1, opts.turns + 1):
            order = names[turn % len(names):] + names[:turn % len(names)]
            for name in order:
                graph, _ = savers[name]
                t = time.perf_counter()
                graph.invoke({"messages": [HumanMessage(questions[turn - 1])]}, config)
                if name in after:
                    after[name]()
                times[name].append(time.perf_counter() - t)
            if turn in at:
                for name in names:
                    sizes[name][turn] = dir_bytes(savers[name][1])
                print(f"  turn {turn}: " + ", ".join(f"{n} {statistics.median(times[n][-opts.window:]) * 1e3:.1f} ms"
                                                    for n in names), flush=True)
        for name in names:
            check = savers[name][0].get_state(config).values["messages"]
            assert len(check) == 2 * opts.turns and check[-2].content == questions[-1], name
        ssaver.close()
        wbsaver.close()
    finally:
        for c in conns:
            c.close()
        sidecar.stop()
        sidecar_wb.stop()
    result = {"turns": opts.turns, "window": opts.window, "native": sidecar.native,
              "ms_per_turn": {n: {t: statistics.median(times[n][t - opts.window:t]) * 1e3 for t in at} for n in names},
              "bytes": sizes}
    print()
    head = f"{'saver':14s}" + "".join(f"{'bytes@' + str(t):>16s}" for t in at) + \
        "".join(f"{'ms/turn@' + str(t):>13s}" for t in at)
    print(head)
    print("-" * len(head))
    for n in names:
        print(f"{n:14s}" + "".join(f"{sizes[n][t]:16,d}" for t in at) +
              "".join(f"{result['ms_per_turn'][n][t]:13.1f}" for t in at))
    last, first = at[-1], at[0]
    if {"sidecar", "sqlite", "sqlite+delta"} <= set(names):
        sc, sq, sd = sizes["sidecar"][last], sizes["sqlite"][last], sizes["sqlite+delta"][last]
        ms = result["ms_per_turn"]
        checks = [
            (f"bytes: sidecar <= 1/300 of sqlite at {last}", sc * 300 <= sq, f"1/{sq / sc:.0f}"),
            (f"bytes: sidecar <= 1/5 of sqlite+delta at {last}", sc * 5 <= sd, f"1/{sd / sc:.2f}"),
            (f"time: sidecar <= 0.4 x sqlite at {last}", ms["sidecar"][last] <= 0.4 * ms["sqlite"][last],
             f"{ms['sidecar'][last] / ms['sqlite'][last]:.2f} x"),
            (f"time: sidecar at {last} <= 1.3 x sidecar at {first}", ms["sidecar"][last] <= 1.3 * ms["sidecar"][first],
             f"{ms['sidecar'][last] / ms['sidecar'][first]:.2f} x"),
            (f"time: sidecar <= 1.25 x sqlite at {first}", ms["sidecar"][first] <= 1.25 * ms["sqlite"][first],
             f"{ms['sidecar'][first] / ms['sqlite'][first]:.2f} x"),
        ]
        print()
        for label, ok, figure in checks:
            print(f"  [{'met' if ok else 'MISSED'}] {label}: {figure}")
        result["checks"] = {label: {"met": ok, "figure": figure} for label, ok, figure in checks}
    if opts.json:
        Path(opts.json).write_text(json.dumps(result, indent=2))
    if not opts.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
