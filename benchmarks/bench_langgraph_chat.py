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

Each saver runs in a process of its own, as an application would, and the
savers take turns (turn 1 of each, then turn 2 of each, ..., the order
rotating every turn), so a busy machine slows them alike. "ms/turn at N" is
the median wall time of ``graph.invoke`` over turns N-window+1..N, LangGraph's
default durability ("async": invoke returns once its checkpoints are
stored). Between turns (untimed) the page cache is flushed (``os.sync``), so
no saver's turn waits behind the disk writeback of another's: at turn 800 the
SQLite and LMDB savers write megabytes per turn, which otherwise slows every
fsync on the machine. "bytes at N" is the size of each saver's data directory after turn
N (the sidecar's: the LMDB environment, after its writes were acknowledged;
SQLite: the database file with its journal). Messages are unique text
(seeded), 1,600 x 400 characters = 0.64 MB of payload in 800 turns.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
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
        data.mkdir(parents=True)
        log = open(data.parent / f"{data.name}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data),
                                      "--listen", self.address], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (data / "sidecar.sock").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the sidecar did not start: see {data.parent / (data.name + '.log')}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


SAVERS = ("sidecar", "sidecar+wb", "sqlite", "sqlite+delta", "lmdb")


def worker(name: str, conn, base: str, address: str, turns: int) -> None:
    """One saver in a process of its own (as an application would run it): runs the turns it is told to."""
    base_path = Path(base)
    rnd = random.Random(8)
    questions = [text(rnd) for _ in range(turns)]
    replies = {2 * i + 1: text(rnd) for i in range(turns)}
    flush = None
    if name.startswith("sidecar"):
        saver = SidecarSaver(address, write_behind=name == "sidecar+wb")
        graph, path = chat_graph(Plain, saver, replies), base_path / name
        flush = saver.flush if saver.write_behind else None
        info = {"native": saver.client.store_stats().native}
    elif name.startswith("sqlite"):
        saver = SqliteSaver(sqlite3.connect(str(base_path / f"{name}.sqlite"), check_same_thread=False))
        graph, path = chat_graph(Delta if name == "sqlite+delta" else Plain, saver, replies), \
            base_path / f"{name}.sqlite"
        info = {}
    else:
        (base_path / "lmdb").mkdir()
        saver = LMDBSaver(lmdb.open(str(base_path / "lmdb"), map_size=16 << 30, max_dbs=8))
        graph, path = chat_graph(Plain, saver, replies), base_path / "lmdb"
        info = {}
    config = {"configurable": {"thread_id": "chat"}}
    conn.send(info)
    while True:
        cmd, arg = conn.recv()
        if cmd == "turn":
            t = time.perf_counter()
            graph.invoke({"messages": [HumanMessage(questions[arg - 1])]}, config)
            if flush is not None:
                flush()  # write-behind: the turn ends when its checkpoints are stored
            conn.send(time.perf_counter() - t)
        elif cmd == "bytes":
            conn.send(dir_bytes(path))
        else:  # stop: check the state, close
            messages = graph.get_state(config).values["messages"]
            ok = len(messages) == 2 * arg and messages[-2].content == questions[arg - 1]
            if name.startswith("sidecar"):
                saver.close()
            elif name.startswith("sqlite"):
                saver.conn.close()
            conn.send(ok)
            return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=800)
    ap.add_argument("--at", default="50,200,800", help="turns to report (comma-separated)")
    ap.add_argument("--window", type=int, default=10, help="turns per timing median")
    ap.add_argument("--only", default="", help="comma-separated subset of " + ", ".join(SAVERS))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--no-sync", dest="sync", action="store_false",
                    help="do not flush the page cache (os.sync) between turns")
    opts = ap.parse_args()
    at = [n for n in (int(x) for x in opts.at.split(",")) if n <= opts.turns]
    names = [n for n in SAVERS if not opts.only or n in opts.only.split(",")]

    base = Path(tempfile.mkdtemp(prefix="bench-chat-"))
    sidecars = {n: Sidecar(base / n) for n in names if n.startswith("sidecar")}
    ctx = mp.get_context("spawn")
    pipes, procs = {}, []
    try:
        for n in names:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(n, child, str(base), sidecars[n].address if n in sidecars else "",
                                                    opts.turns), daemon=True)
            proc.start()
            procs.append(proc)
            pipes[n] = parent
        info = {n: pipes[n].recv() for n in names}
        native = next((i["native"] for i in info.values() if "native" in i), None)
        times = {n: [] for n in names}
        sizes = {n: {} for n in names}
        print(f"{len(names)} savers x {opts.turns} turns, each saver in a process of its own, taking turns "
              f"(sidecar hot path: {'compiled' if native else 'pure Python'}); data in {base}", flush=True)
        for turn in range(1, opts.turns + 1):
            order = names[turn % len(names):] + names[:turn % len(names)]
            for n in order:
                if opts.sync:
                    os.sync()  # untimed: no saver's turn waits behind another one's disk writeback
                pipes[n].send(("turn", turn))
                times[n].append(pipes[n].recv())
            if turn in at:
                for n in names:
                    pipes[n].send(("bytes", 0))
                    sizes[n][turn] = pipes[n].recv()
                print(f"  turn {turn}: " + ", ".join(f"{n} {statistics.median(times[n][-opts.window:]) * 1e3:.1f} ms"
                                                    for n in names), flush=True)
        for n in names:
            pipes[n].send(("stop", opts.turns))
            assert pipes[n].recv(), f"{n}: wrong final state"
        for proc in procs:
            proc.join(60)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for sc in sidecars.values():
            sc.stop()
    for n in names:  # after closing: what is left on disk
        if n in sidecars:
            sizes[n][at[-1]] = max(sizes[n][at[-1]], dir_bytes(base / n))
    result = {"turns": opts.turns, "window": opts.window, "native": native,
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
