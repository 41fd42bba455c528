"""The LangGraph chat benchmark of DESIGN.md §8: SidecarSaver against LangGraph's own savers.

    python benchmarks/bench_langgraph_chat.py [--turns 800] [--at 50,200,800] [--window 10] [--block 10] [--repeats 4]
                                              [--only sidecar,sqlite,...] [--json PATH] [--plot PNG]

A one-node chat graph (``messages: Annotated[list, add_messages]``; each turn
the user sends a 400-character message and the node answers with another, 3
checkpoints per turn) runs the same turns with:

  sidecar        SidecarSaver over a sidecar started here (unix socket), plain add_messages
  sidecar+wb     the same with write_behind=True (its own data directory and sidecar); its time
                 per turn includes flush(), i.e. the turn's checkpoints are stored when it ends
  sqlite         langgraph-checkpoint-sqlite's SqliteSaver, plain add_messages
  sqlite+delta   SqliteSaver with the messages in LangGraph's DeltaChannel
  lmdb           langgraph-checkpoint-lmdb's LMDBSaver, plain add_messages
  inmemory       LangGraph's InMemorySaver (no storage at all: the framework's own cost), plain add_messages
  postgres       langgraph-checkpoint-postgres's PostgresSaver on a PostgreSQL started here (initdb into a
                 temporary directory, unix socket; skipped with a message when PostgreSQL is not installed)

Each saver runs in a process of its own, as an application would, and the
savers take turns in blocks (``--block``, default the window of 10 turns:
turns 1-10 of each saver, then turns 11-20 of each, ..., the order rotating
every block), so a busy machine slows them alike. "ms/turn at N" is the
median wall time of ``graph.invoke`` over turns N-window+1..N (one block),
LangGraph's default durability ("async": invoke returns once its checkpoints
are stored). Before each block (untimed) the page cache is flushed
(``os.sync``), so no saver waits behind the disk writeback of another's: at
turn 800 the SQLite and LMDB savers write megabytes per turn, which
otherwise slows every fsync on the machine.

Why blocks, not single turns: on these machines (2 vCPUs) a process or
thread that was idle pays for it when it wakes, and the longer it idled the
more: a pipe round trip between two processes takes ~10 us back to back,
~0.5 ms after 100 ms idle, ~2.3 ms after 500 ms; a turn of the SqliteSaver
chat takes 6.4 ms back to back and 19 ms after 100 ms idle, the sidecar's
7 ms and 15 ms. Alternating every turn (``--block 1``) makes each saver idle
for as long as the others' turns take, which grows with the turn number
(SqliteSaver's from 8 to 57 ms), so the late turns of every saver were
measured after longer sleeps than the early ones. In blocks, only the first
turn of a block comes after the others' block; the window's median is taken
over warm turns, so "ms/turn at N" is the saver's cost at history length N.
The first turn count of ``--at`` (50) is a short history, where one window of
10 turns is a small sample: ``--repeats R`` (default 4) runs R more chats of
that length afterwards, each on a new thread of the same (warm) saver
processes, in the same blocks, and "ms/turn at 50" is the median over the
window's turns of all R+1 chats; the target line also prints each chat's own
ratio, so a spread shows. The bytes are measured before the short chats.
"bytes at N" is the size of each saver's data directory after turn
N (the sidecar's: the LMDB environment and its log, after its writes were acknowledged, without
the fixed 1 MiB disk-full reserve file `space.reserve` (storage/store.py);
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
    from langgraph.checkpoint.memory import InMemorySaver
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


#: the sidecar's 1 MiB disk-full reserve (storage/store.py RESERVE_NAME): a fixed preallocation it gives up
#: when the disk fills, not state, so not counted as the state's bytes (it is named in the table's note)
RESERVE_NAME = "space.reserve"


def dir_bytes(path: Path) -> int:
    """Bytes of a data directory (without the sidecar's space reserve), or of a SQLite database with its
    -wal / -shm / -journal files."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != RESERVE_NAME)
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


SAVERS = ("sidecar", "sidecar+wb", "sqlite", "sqlite+delta", "lmdb", "inmemory", "postgres")
DEFAULT_SAVERS = ("sidecar", "sqlite", "sqlite+delta", "lmdb", "inmemory", "postgres")


class Postgres:
    """A throwaway PostgreSQL cluster (initdb into ``data``, listening on a unix socket there only)."""

    def __init__(self, data: Path) -> None:
        self.data = data
        bindir = _pg_bindir()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL (initdb, pg_ctl) is not installed")
        data.mkdir(parents=True)
        self.run_as = []
        if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres (or nobody) account
            import pwd
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                user = pwd.getpwnam("nobody")
            os.chown(data, user.pw_uid, user.pw_gid)
            os.chmod(data.parent, 0o711)  # mkdtemp makes it 0700: the postgres user must reach its directory
            self.run_as = ["runuser", "-u", user.pw_name, "--"]
        self.pg_ctl = str(bindir / "pg_ctl")
        subprocess.run([*self.run_as, str(bindir / "initdb"), "-D", str(data / "db"), "-U", "postgres",
                        "--auth=trust", "--no-sync", "-E", "UTF8"], check=True, capture_output=True)
        opts = f"-k {data} -c listen_addresses='' -c fsync=on -c synchronous_commit=on"
        subprocess.run([*self.run_as, self.pg_ctl, "-D", str(data / "db"), "-l", str(data / "log"), "-o", opts,
                        "-w", "start"], check=True, capture_output=True)
        self.dsn = f"postgresql://postgres@/postgres?host={data}"

    def stop(self) -> None:
        subprocess.run([*self.run_as, self.pg_ctl, "-D", str(self.data / "db"), "-m", "fast", "stop"],
                       capture_output=True)

    def bytes(self) -> int:
        return dir_bytes(self.data / "db" / "base")


def _pg_bindir() -> Path | None:
    for cand in [shutil.which("pg_ctl"), *sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)]:
        if cand and Path(cand).exists():
            return Path(cand).resolve().parent
    return None


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
    elif name == "inmemory":
        saver = InMemorySaver()
        graph, path = chat_graph(Plain, saver, replies), None
        info = {}
    elif name == "postgres":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        pg_conn = psycopg.connect(address, autocommit=True, prepare_threshold=0)
        saver = PostgresSaver(pg_conn)
        saver.setup()
        graph, path = chat_graph(Plain, saver, replies), None
        info = {}
    else:
        (base_path / "lmdb").mkdir()
        saver = LMDBSaver(lmdb.open(str(base_path / "lmdb"), map_size=16 << 30, max_dbs=8))
        graph, path = chat_graph(Plain, saver, replies), base_path / "lmdb"
        info = {}
    main_config = config = {"configurable": {"thread_id": "chat"}}
    conn.send(info)
    while True:
        cmd, arg = conn.recv()
        if cmd == "thread":  # the next turns go to a new thread of this process (the short chats)
            config = {"configurable": {"thread_id": arg}}
            conn.send(None)
            continue
        if cmd == "turn":
            t = time.perf_counter()
            graph.invoke({"messages": [HumanMessage(questions[arg - 1])]}, config)
            if flush is not None:
                flush()  # write-behind: the turn ends when its checkpoints are stored
            conn.send(time.perf_counter() - t)
        elif cmd == "bytes":
            if name == "inmemory":
                conn.send(None)  # nothing stored
            elif name == "postgres":
                with pg_conn.cursor() as cur:
                    cur.execute("SELECT pg_database_size(current_database())")
                    conn.send(cur.fetchone()[0])
            else:
                conn.send(dir_bytes(path))
        else:  # stop: check the state, close
            messages = graph.get_state(main_config).values["messages"]
            ok = len(messages) == 2 * arg and messages[-2].content == questions[arg - 1]
            if name.startswith("sidecar"):
                saver.close()
            elif name.startswith("sqlite"):
                saver.conn.close()
            elif name == "postgres":
                pg_conn.close()
            conn.send(ok)
            return


def block_ends(turns: int, block: int, at) -> list[int]:
    """The last turn of each block: every ``block`` turns, and at each turn of ``at``."""
    return sorted({*range(block, turns + 1, block), *(t for t in at if t <= turns), turns})


def run(turns: int = 800, at=(50, 200, 800), window: int = 10, names=DEFAULT_SAVERS, sync: bool = True,
        keep: bool = False, log=print, block: int | None = None, repeats: int = 0) -> dict:
    """Run the chat with the savers ``names``; returns the results (see main for the printed table).
    ``block``: turns each saver runs back to back before the next one's (default: ``window``).
    ``repeats``: after the long chat, each saver's process runs that many more chats of ``at[0]`` turns on new
    threads (warm processes, same blocks); "ms/turn at at[0]" is then the median over the window's turns of
    every chat, and the ratio of each chat on its own is kept in ``ratios_at_first`` (a spread, not one
    sample). The bytes are measured before the short chats."""
    result = _run_once(turns, at, window, names, sync, keep, log, block, repeats)
    first = result["at"][0]
    if repeats:
        samples = {n: [result["ms_by_turn"][n][max(0, first - window):first]]
                   + [chat[max(0, first - window):first] for chat in result["short_chats"][n]]
                   for n in result["savers"]}
        for n in result["savers"]:
            result["ms_per_turn"][n][first] = statistics.median(x for chat in samples[n] for x in chat)
        result["repeats"] = repeats
        if {"sidecar", "sqlite"} <= set(result["savers"]):
            result["ratios_at_first"] = [round(statistics.median(a) / statistics.median(b), 3)
                                         for a, b in zip(samples["sidecar"], samples["sqlite"])]
    result["checks"] = _checks(result)
    return result


def _run_once(turns: int, at, window: int, names, sync: bool, keep: bool, log, block: int | None,
              repeats: int = 0) -> dict:
    """One chat of ``turns`` turns for every saver of ``names``, then ``repeats`` chats of ``at[0]`` turns
    on new threads (see ``run``)."""
    at = [n for n in at if n <= turns]
    block = max(1, block or window)
    names = list(names)
    base = Path(tempfile.mkdtemp(prefix="bench-chat-"))
    skipped = {}
    pg = None
    if "postgres" in names:
        try:
            pg = Postgres(base / "postgres")
        except (FileNotFoundError, subprocess.CalledProcessError, KeyError) as e:
            detail = getattr(e, "stderr", b"") or b""
            skipped["postgres"] = f"PostgreSQL could not be started: {e} {detail.decode(errors='replace')[-300:]}"
            names.remove("postgres")
            log(f"  SKIPPED postgres: {skipped['postgres']}")
    sidecars = {}
    ctx = mp.get_context("spawn")
    pipes, procs = {}, []
    try:
        for n in names:  # inside the try: a sidecar that does not start still stops PostgreSQL and the others
            if n.startswith("sidecar"):
                sidecars[n] = Sidecar(base / n)
        for n in names:
            parent, child = ctx.Pipe()
            address = sidecars[n].address if n in sidecars else (pg.dsn if n == "postgres" else "")
            proc = ctx.Process(target=worker, args=(n, child, str(base), address, turns), daemon=True)
            proc.start()
            procs.append(proc)
            pipes[n] = parent
        info = {n: pipes[n].recv() for n in names}
        native = next((i["native"] for i in info.values() if "native" in i), None)
        times = {n: [] for n in names}
        sizes = {n: {} for n in names}
        log(f"{len(names)} savers x {turns} turns, each saver in a process of its own, taking turns in blocks of "
            f"{block} (sidecar hot path: {'compiled' if native else 'pure Python'}); data in {base}")
        first = 1
        for k, last in enumerate(block_ends(turns, block, at)):
            order = names[k % len(names):] + names[:k % len(names)]
            for n in order:
                if sync:
                    os.sync()  # untimed: no saver's block waits behind another one's disk writeback
                for turn in range(first, last + 1):
                    pipes[n].send(("turn", turn))
                    times[n].append(pipes[n].recv())
            first = last + 1
            if last in at:
                for n in names:
                    pipes[n].send(("bytes", 0))
                    sizes[n][last] = pipes[n].recv()
                log(f"  turn {last}: " + ", ".join(f"{n} {statistics.median(times[n][-window:]) * 1e3:.1f} ms"
                                                  for n in names))
        short = {n: [] for n in names}
        for r in range(repeats):  # the short chats: new threads, warm processes, the same blocks
            log(f"  short chat {r + 1}/{repeats}: {at[0]} turns on a new thread")
            for n in names:
                pipes[n].send(("thread", f"short-{r}"))
                pipes[n].recv()
                short[n].append([])
            first = 1
            for k, last in enumerate(block_ends(at[0], block, [at[0]])):
                order = names[(k + r) % len(names):] + names[:(k + r) % len(names)]
                for n in order:
                    if sync:
                        os.sync()
                    for turn in range(first, last + 1):
                        pipes[n].send(("turn", turn))
                        short[n][-1].append(pipes[n].recv())
                first = last + 1
        for n in names:
            pipes[n].send(("stop", turns))
            assert pipes[n].recv(), f"{n}: wrong final state"
        for proc in procs:
            proc.join(60)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for sc in sidecars.values():
            sc.stop()
        if pg is not None:
            pg.stop()
    for n in names:  # after closing: what is left on disk (unless short chats added threads since)
        if n in sidecars and not repeats:
            sizes[n][at[-1]] = max(sizes[n][at[-1]], dir_bytes(base / n))
    result = {"turns": turns, "window": window, "block": block, "at": at, "native": native, "savers": names, "skipped": skipped,
              "ms_per_turn": {n: {t: statistics.median(times[n][max(0, t - window):t]) * 1e3 for t in at}
                              for n in names},
              "ms_by_turn": {n: [round(x * 1e3, 3) for x in times[n]] for n in names},
              "short_chats": {n: [[x * 1e3 for x in chat] for chat in short[n]] for n in names},
              "bytes": sizes}
    if not keep:
        shutil.rmtree(base, ignore_errors=True)
    return result


def _checks(result: dict) -> dict:
    """The targets of issue 10 (when sidecar, sqlite and sqlite+delta ran) and of issue 17 (sidecar next to
    InMemorySaver, and flat) over ``result``."""
    out = _checks_issue10(result)
    at, names, ms = result["at"], result["savers"], result["ms_per_turn"]
    last, first = at[-1], at[0]
    if {"sidecar", "inmemory"} <= set(names):
        out[f"langgraph: sidecar <= 1.25 x inmemory ms/turn at {first} (issue 17)"] = {
            "met": ms["sidecar"][first] <= 1.25 * ms["inmemory"][first],
            "figure": f"{ms['sidecar'][first]:.2f} vs {ms['inmemory'][first]:.2f} ms = "
                      f"{ms['sidecar'][first] / ms['inmemory'][first]:.2f} x"}
    if "sidecar" in names and last != first:
        out[f"langgraph: sidecar ms/turn at {last} <= 1.2 x at {first} (flat, issue 17)"] = {
            "met": ms["sidecar"][last] <= 1.2 * ms["sidecar"][first],
            "figure": f"{ms['sidecar'][last] / ms['sidecar'][first]:.2f} x"}
    return out


def _checks_issue10(result: dict) -> dict:
    """The targets of issue 10 over ``result`` (empty unless sidecar, sqlite and sqlite+delta ran)."""
    at, names, sizes = result["at"], result["savers"], result["bytes"]
    last, first = at[-1], at[0]
    if {"sidecar", "sqlite", "sqlite+delta"} <= set(names):
        ms = result["ms_per_turn"]
        spread = result.get("ratios_at_first")
        spread = f" (each chat: {', '.join(f'{x:.2f}' for x in spread)})" if spread else ""
        checks = [
            (f"langgraph: sidecar <= 0.4 x sqlite ms/turn at {last}", ms["sidecar"][last] <= 0.4 * ms["sqlite"][last],
             f"{ms['sidecar'][last] / ms['sqlite'][last]:.2f} x"),
            (f"langgraph: sidecar <= 0.8 x sqlite+delta ms/turn at {last}",
             ms["sidecar"][last] <= 0.8 * ms["sqlite+delta"][last],
             f"{ms['sidecar'][last] / ms['sqlite+delta'][last]:.2f} x"),
            (f"langgraph: sidecar <= 1.25 x sqlite ms/turn at {first}",
             ms["sidecar"][first] <= 1.25 * ms["sqlite"][first],
             f"{ms['sidecar'][first] / ms['sqlite'][first]:.2f} x{spread}"),
            (f"langgraph: sidecar ms/turn at {last} <= 1.3 x at {first} (flat)",
             ms["sidecar"][last] <= 1.3 * ms["sidecar"][first], f"{ms['sidecar'][last] / ms['sidecar'][first]:.2f} x"),
        ]
        size = {n: sizes[n][last] for n in ("sidecar", "sqlite", "sqlite+delta")}
        if all(size.values()):
            checks += [
                (f"langgraph: sidecar bytes <= 1/300 of sqlite at {last}", 300 * size["sidecar"] <= size["sqlite"],
                 f"1/{size['sqlite'] / size['sidecar']:.0f} ({size['sidecar']:,} vs {size['sqlite']:,})"),
                (f"langgraph: sidecar bytes <= 1/5 of sqlite+delta at {last}",
                 5 * size["sidecar"] <= size["sqlite+delta"],
                 f"1/{size['sqlite+delta'] / size['sidecar']:.2f} ({size['sidecar']:,} vs {size['sqlite+delta']:,})"),
            ]
        return {label: {"met": ok, "figure": figure} for label, ok, figure in checks}
    return {}


def table(result: dict) -> str:
    at = result["at"]
    head = f"{'saver':14s}" + "".join(f"{'bytes@' + str(t):>16s}" for t in at) + \
        "".join(f"{'ms/turn@' + str(t):>13s}" for t in at)
    lines = [head, "-" * len(head)]
    for n in result["savers"]:
        sizes = result["bytes"][n]
        lines.append(f"{n:14s}" + "".join(f"{'-' if sizes[t] is None else format(sizes[t], ',d'):>16s}" for t in at)
                     + "".join(f"{result['ms_per_turn'][n][t]:13.1f}" for t in at))
    for n, why in result.get("skipped", {}).items():
        lines.append(f"{n:14s}  SKIPPED: {why}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    """ms/turn (median of each block of ``window`` turns) and bytes stored, against the turn, one line per
    saver, written to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = result["window"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for n in result["savers"]:
        per_turn = result["ms_by_turn"][n]
        ends = list(range(window, len(per_turn) + 1, window))
        left.plot(ends, [statistics.median(per_turn[e - window:e]) for e in ends], label=n, linewidth=1.4)
        stored = {t: b for t, b in result["bytes"][n].items() if b}
        if stored:
            right.plot(list(stored), list(stored.values()), marker="o", label=n, linewidth=1.4)
    left.set(xlabel="turn", ylabel=f"ms per turn (median of {window})", title="time per turn")
    right.set(xlabel="turn", ylabel="bytes on disk", yscale="log", title="storage")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"LangGraph chat, {result['turns']} turns, 400-character messages, 3 checkpoints per turn")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=800)
    ap.add_argument("--at", default="50,200,800", help="turns to report (comma-separated)")
    ap.add_argument("--window", type=int, default=10, help="turns per timing median")
    ap.add_argument("--block", type=int, default=None,
                    help="turns each saver runs back to back before the next one's (default: the window; "
                         "1 = the savers alternate every turn)")
    ap.add_argument("--only", default="", help="comma-separated subset of " + ", ".join(SAVERS)
                    + " (default: " + ", ".join(DEFAULT_SAVERS) + ")")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--plot", help="also draw ms/turn and bytes against the turn into this PNG (matplotlib)")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--repeats", type=int, default=4,
                    help="short chats of the first --at turns run after the long one, pooled into its figure "
                         "(default 4; 0 = the long chat's window only)")
    ap.add_argument("--no-sync", dest="sync", action="store_false",
                    help="do not flush the page cache (os.sync) between turns")
    opts = ap.parse_args()
    names = [n for n in SAVERS if n in opts.only.split(",")] if opts.only else list(DEFAULT_SAVERS)
    result = run(opts.turns, [int(x) for x in opts.at.split(",")], opts.window, names, opts.sync, opts.keep,
                 block=opts.block, repeats=opts.repeats)
    print()
    print(table(result))
    for label, check in result.get("checks", {}).items():
        print(f"  [{'met' if check['met'] else 'MISSED'}] {label}: {check['figure']}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(result, indent=2))
    if opts.plot:
        plot(result, opts.plot)
        print(f"plot written to {opts.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
