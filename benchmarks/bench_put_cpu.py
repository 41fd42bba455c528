"""Server CPU per PutCheckpoint: the handler in-process, no gRPC.

    python benchmarks/bench_put_cpu.py [--puts N] [--profile] [--workload chat|whole]

Builds N PutCheckpoint requests the way the Python client does (agentstate._requests) for one
thread of a chat-like LangGraph graph: every put appends 2 messages (a role and 400 characters
each) to ``messages`` by a delta on the previous checkpoint, keeps two channels, writes two small
ones, with LangGraph-like metadata (``chat``); or sends every channel whole (``whole``: messages
growing to N*2 items). The requests are built before timing; the first WARM are put untimed (the compression dictionary
is trained meanwhile, and waited for); then the rest are handed to the server's
handler (api/checkpoints.put) one after another on the store's owner loop, and
``time.process_time()`` of this process over the N puts (commits included, fsync off) is divided
by N. ``--profile`` prints cProfile's top functions by cumulative time instead of timing.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import random
import string
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "python"))

from agentstate import Append, Keep, ids  # noqa: E402
from agentstate._requests import put_checkpoint_request  # noqa: E402

from sidecar.api import checkpoints as api  # noqa: E402
from sidecar.storage import hotpath  # noqa: E402
from sidecar.storage.store import Store  # noqa: E402


WARM = 300  # puts before the timing starts


def requests(n: int, workload: str) -> list:
    rnd = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "     .,"
    out, parent, history = [], "", []
    for step in range(n):
        msgs = [{"role": r, "content": "".join(rnd.choices(alphabet, k=400)), "id": f"m{step}-{r}"}
                for r in ("user", "assistant")]
        history.extend(msgs)
        cid = ids.new_id()
        small = {"branch:to:agent": None, "step_counter": step}
        if workload == "chat" and parent:
            channels = {"messages": Append(msgs), "context": Keep(), "__start__": Keep(), **small}
        else:
            channels = {"messages": list(history), "context": {"user": "u1", "locale": "en"},
                        "__start__": {"messages": []}, **small}
        meta = {"source": "loop", "step": step, "parents": {}, "writes": {"agent": {"messages": msgs[1:]}}}
        out.append(put_checkpoint_request("bench", "t1", channels, checkpoint_id=cid, parent_id=parent,
                                          base_id="", checkpoint_ns="", metadata=meta, extra=None,
                                          expected_head_etag=None, schema_version=0, require_thread=False,
                                          request_id=""))
        parent = cid
    return out


async def drive(store: Store, reqs: list) -> None:
    for r in reqs:
        await api.put(store, r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--puts", type=int, default=1300)
    ap.add_argument("--workload", choices=("chat", "whole"), default="chat")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sort", default="cumulative", help="pstats sort key with --profile (cumulative, tottime)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh stores timed one after another; the median is kept")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object instead")
    args = ap.parse_args()
    reqs = requests(args.puts, args.workload)
    per = []
    for _ in range(1 if args.profile else args.repeat):
        with tempfile.TemporaryDirectory() as d:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            store = Store(d, sync=False, loop=loop)
            # warm-up: the thread, its first checkpoints, and the compression dictionary (trained once per
            # store in a thread of its own: its CPU would otherwise count against the puts timed)
            loop.run_until_complete(drive(store, reqs[:WARM]))
            trainer = store.packer.trainer
            while trainer is not None and trainer.is_alive():  # it stores the dictionary by a write: loop on
                loop.run_until_complete(asyncio.sleep(0.01))
            rest = reqs[WARM:]
            if args.profile:
                prof = cProfile.Profile()
                prof.enable()
                loop.run_until_complete(drive(store, rest))
                prof.disable()
                pstats.Stats(prof).sort_stats(args.sort).print_stats(45)
            else:
                t0 = time.process_time()
                loop.run_until_complete(drive(store, rest))
                per.append((time.process_time() - t0) / len(rest))
            store.close()
            loop.close()
    if per:
        per.sort()
        if args.json:
            print(json.dumps({"workload": args.workload, "puts": len(reqs) - WARM, "cpu_per_put_s": per[len(per) // 2],
                              "runs_s": per, "compiled": hotpath.NATIVE}))
            return
        print(f"{args.workload}: {len(reqs) - WARM} puts, server CPU per put {per[len(per) // 2] * 1e3:.3f} ms "
              f"(median of {len(per)}: {', '.join(f'{p * 1e3:.3f}' for p in per)}; compiled={hotpath.NATIVE})")


if __name__ == "__main__":
    main()
