"""The ``conversations`` workload of benchmarks/run.py (also runnable alone:
``python benchmarks/bench_conversations.py [--quick]``).

On sessions of 10², 10⁴ and 10⁵ items (``--quick``: 10² and 10³), built by batched ``AppendItems`` of
Agents-SDK-like items (their JSON text, as ``SidecarSession`` stores them) under the default compaction policy
with ``fallback_after = 0`` (so summaries exist as in a long session):

* ``get_items(limit=20)`` through ``agentstate.agents.SidecarSession`` and ``GetContext(budget 8000)``: p50/p99;
* the echo floor in the same run: a bare gRPC echo (benchmarks/echo_server.py) of as many bytes as the
  ``get_items`` reply carries, measured *interleaved* with the reads (blocks of ``BLOCK`` calls: get_items,
  the SQLiteSession's, GetContext, echo, repeated), so that both see the same machine; the ratio a target
  checks is the median over the blocks of (the read's block p50 / the echo's block p50), which a burst of
  load on the shared machine moves far less than the ratio of two p50s taken minutes apart;
* ``add_items`` from one client, batched (1,000 items per call), ``sync`` durability: items/s, and the store's
  data-file growth per item next to the payload bytes per item;
* the SDK's ``SQLiteSession`` on the same item stream: its ``add_items`` rate, ``get_items(20)`` p50/p99 and its
  file size per item;
* compaction-due to a watching worker: the time from the acknowledgement of the append that makes a range due
  to the ``agentstate.compaction.due`` event reaching a ``WatchEvents`` stream, p50/p99.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as suite  # noqa: E402  (Proc, sidecar, ms, pct)


def _items(start: int, n: int) -> list[dict]:
    out = []
    for i in range(start, start + n):
        if i % 4 == 1:
            out.append({"type": "function_call", "call_id": f"call_{i}", "name": "lookup",
                        "arguments": json.dumps({"query": f"order {i}"})})
        elif i % 4 == 2:
            out.append({"type": "function_call_output", "call_id": f"call_{i - 1}",
                        "output": f"order {i - 1} shipped on day {i % 28 + 1}; carrier tracking ok"})
        else:
            role = "user" if i % 4 == 0 else "assistant"
            out.append({"role": role, "content": f"message {i}: " + "lorem ipsum dolor sit amet " * 6})
    return out


def _inputs(items: list[dict]):
    from agentstate import codec, ids
    from agentstate.agents import _items as adapter
    from agentstate.v1 import conversations_pb2 as cpb
    out = []
    for it in items:
        d = adapter.describe(it)
        out.append(cpb.ItemInput(kind=d["kind"], role=d["role"], call_id=d["call_id"], tool_name=d["tool_name"],
                                 dedupe_key=d["dedupe_key"], client_item_id=ids.new_id(),
                                 content={"msgpack": codec.encode(adapter.to_text(it))}))
    return out


BLOCK = 20  # calls per measurement block (reads and echo alternate block by block)


class _Echo:
    """A bare gRPC echo client of ``size``-byte messages (the floor every unary call pays)."""

    def __init__(self, address: str, size: int) -> None:
        import grpc
        self.ch = grpc.insecure_channel(address)
        self.call = self.ch.unary_unary("/bench.Echo/Echo", request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        self.payload = os.urandom(size)
        for _ in range(20):
            self.call(self.payload, timeout=30)

    def samples(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            self.call(self.payload, timeout=30)
            out.append(time.perf_counter() - t)
        return out

    def close(self) -> None:
        self.ch.close()


def _echo_floor(address: str, size: int, n: int) -> list[float]:
    e = _Echo(address, size)
    try:
        return e.samples(n)
    finally:
        e.close()


def _block_ratio(reads: list[list[float]], echoes: list[list[float]]) -> float:
    """The median over blocks of (p50 of the block's reads / p50 of the block's echoes)."""
    import statistics
    return round(statistics.median(statistics.median(r) / statistics.median(e) for r, e in zip(reads, echoes)), 3)


def _due_latency(address: str, log, triggers: int) -> list[float]:
    """Append one item at a time to a thread with trigger 3 / compact 1: every append makes a range due."""
    from agentstate import Client
    from agentstate.conversations import item
    got: dict[int, float] = {}
    ready = threading.Event()

    with Client(address, namespace="due") as c:
        c.conversations.append("t", [], create_thread=True)
        c.conversations.set_compaction_policy(thread_id="t", trigger_items=3, compact_items=1, keep_last_items=1,
                                              fallback_after=3600)
        c.conversations.append("t", [item("message", "a", role="user"), item("message", "b", role="user")])

        def watch():
            with Client(address, namespace="due") as w:
                ready.set()
                for ev in w.events.watch("t"):
                    if ev.type == "agentstate.compaction.due":
                        from agentstate import from_value
                        got[from_value(ev.data)["last_seq"]] = time.perf_counter()
                        if len(got) >= triggers:
                            return

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        ready.wait(10)
        time.sleep(0.3)
        acked: dict[int, float] = {}
        for i in range(triggers):
            resp = c.conversations.append("t", [item("message", f"m{i}", role="user")])
            acked[resp.compactions_due[0].last_seq] = time.perf_counter()
            time.sleep(0.02)
        th.join(30)
    return [max(got[k] - acked[k], 0.0) for k in acked if k in got]


def conversations(base: Path, quick: bool, log, sizes: tuple[int, ...] | None = None) -> dict:
    from agents import SQLiteSession

    from agentstate import Client
    from agentstate.agents import SidecarSession
    from agentstate.v1 import conversations_pb2 as cpb

    sizes = sizes or ((100, 1000) if quick else (100, 10_000, 100_000))
    reads = 60 if quick else 400  # in blocks of BLOCK, interleaved with the echo
    echo = suite.Proc([sys.executable, str(HERE / "echo_server.py"), f"unix:{base / 'cecho.sock'}"],
                      base / "cecho.sock", base / "cecho.log")
    side = suite.sidecar(base, "conv-sync", "sync")
    out: dict = {"sizes": list(sizes), "reads_per_size": reads}
    try:
        with Client(side.address) as c:
            c.conversations.set_compaction_policy(fallback_after=0)  # summaries exist as in a long session
            stats0 = c.store_stats().data_file_bytes
            for size in sizes:
                sid = f"s{size}"
                items = _items(1, size)
                payload = sum(len(json.dumps(i)) for i in items)
                inputs = _inputs(items)
                before = c.store_stats().data_file_bytes
                t = time.perf_counter()
                for k in range(0, size, 1000):
                    c.conversations.append(sid, inputs[k:k + 1000], create_thread=True, durability="sync")
                add_s = time.perf_counter() - t
                grown = c.store_stats().data_file_bytes - before
                # the reference on the same stream
                ref = SQLiteSession(sid, str(base / f"ref-{size}.sqlite"))
                t = time.perf_counter()
                for k in range(0, size, 1000):
                    asyncio.run(ref.add_items(items[k:k + 1000]))
                ref_add_s = time.perf_counter() - t
                session = SidecarSession(sid, side.address)
                reply = c.conversations.stub.ListItems(cpb.ListItemsRequest(thread_id=sid, latest=20))
                echo_c = _Echo(echo.address, reply.ByteSize())

                async def timed(fn, n, warm=0):
                    for _ in range(warm):
                        await fn()
                    samples = []
                    for _ in range(n):
                        t0 = time.perf_counter()
                        await fn()
                        samples.append(time.perf_counter() - t0)
                    return samples

                def ctx_block(n, warm=0):
                    for _ in range(warm):
                        c.conversations.get_context(sid, 8000)
                    samples = []
                    for _ in range(n):
                        t0 = time.perf_counter()
                        c.conversations.get_context(sid, 8000)
                        samples.append(time.perf_counter() - t0)
                    return samples

                async def measure():
                    blocks: dict[str, list[list[float]]] = {"ours": [], "theirs": [], "ctx": [], "echo": []}
                    for b in range(max(1, reads // BLOCK)):
                        warm = 10 if b == 0 else 0
                        blocks["ours"].append(await timed(lambda: session.get_items(20), BLOCK, warm))
                        blocks["theirs"].append(await timed(lambda: ref.get_items(20), BLOCK, warm))
                        blocks["ctx"].append(ctx_block(BLOCK, warm))
                        blocks["echo"].append(echo_c.samples(BLOCK))
                    await session.aclose()
                    return blocks

                blocks = asyncio.run(measure())
                echo_c.close()
                ours, theirs, ctx_samples, echo_samples = (sum(blocks[k], []) for k in ("ours", "theirs", "ctx", "echo"))
                ctx = c.conversations.get_context(sid, 8000)
                conv = c.conversations.conversation(sid)
                ref.close()
                row = {"add_items_per_s": round(size / add_s), "sqlite_add_items_per_s": round(size / ref_add_s),
                       "payload_bytes_per_item": round(payload / size, 1),
                       "store_bytes_per_item": round(grown / size, 1) if grown > 0 else None,
                       "sqlite_bytes_per_item": round(os.path.getsize(base / f"ref-{size}.sqlite") / size, 1),
                       "get_items_20": suite.ms(ours), "sqlite_get_items_20": suite.ms(theirs),
                       "get_context_8000": suite.ms(ctx_samples), "get_items_reply_bytes": reply.ByteSize(),
                       "echo": suite.ms(echo_samples), "blocks": len(blocks["ctx"]),
                       "get_items_20_vs_echo": _block_ratio(blocks["ours"], blocks["echo"]),
                       "get_context_8000_vs_echo": _block_ratio(blocks["ctx"], blocks["echo"]),
                       "context_items": len(ctx.items), "context_tokens": ctx.total_tokens,
                       "summaries": conv.summary_count}
                out[str(size)] = row
                log(f"  conversations {size:>7d} items: add {row['add_items_per_s']:,}/s (sqlite "
                    f"{row['sqlite_add_items_per_s']:,}/s), get_items(20) p50 {row['get_items_20']['p50_ms']:.3f} ms "
                    f"(sqlite {row['sqlite_get_items_20']['p50_ms']:.3f}), GetContext p50 "
                    f"{row['get_context_8000']['p50_ms']:.3f} ms, {row['summaries']} summaries; interleaved echo p50 "
                    f"{row['echo']['p50_ms']:.3f} ms, block ratios get_items {row['get_items_20_vs_echo']:.2f} x, "
                    f"GetContext {row['get_context_8000_vs_echo']:.2f} x")
            out["store_bytes_total"] = c.store_stats().data_file_bytes - stats0
        size_ref = max(out[str(s)]["get_items_reply_bytes"] for s in sizes)
        out["echo"] = suite.ms(_echo_floor(echo.address, size_ref, reads))
        out["echo"]["bytes"] = size_ref
        out["compaction_due"] = suite.ms(_due_latency(side.address, log, 30 if quick else 100))
        log(f"  conversations echo floor ({size_ref} bytes) p50 {out['echo']['p50_ms']:.3f} ms; compaction due "
            f"p50 {out['compaction_due']['p50_ms']:.3f} ms p99 {out['compaction_due']['p99_ms']:.3f} ms")
    finally:
        side.stop()
        echo.stop()
    return out


def checks(r: dict) -> list[tuple[str, bool, str]]:
    sizes = r["sizes"]
    mid, small, big = str(sizes[1]), str(sizes[0]), str(sizes[-1])
    echo = r["echo"]["p50_ms"]
    out = []
    for key, name in (("get_items_20", "get_items(20)"), ("get_context_8000", "GetContext(8000)")):
        v = r[mid][key]["p50_ms"]
        ratio = r[mid].get(f"{key}_vs_echo")
        if ratio is None:  # a result file from before the interleaved measurement
            out.append((f"conversations {name} p50 at {mid} items <= 3 x echo p50 ({3 * echo:.3f} ms)",
                        v <= 3 * echo, f"{v:.3f} ms = {v / echo:.2f} x"))
            continue
        e = r[mid]["echo"]["p50_ms"]
        out.append((f"conversations {name} p50 at {mid} items <= 3 x echo p50 (median of {r[mid]['blocks']} "
                    f"interleaved blocks' ratios)", ratio <= 3,
                    f"{ratio:.2f} x (pooled: {v:.3f} ms vs echo {e:.3f} ms = {v / e:.2f} x)"))
        a, b = r[small][key]["p50_ms"], r[big][key]["p50_ms"]
        out.append((f"conversations {name} p50 at {big} items <= 1.3 x p50 at {small}", b <= 1.3 * a,
                    f"{b:.3f} vs {a:.3f} ms = {b / a:.2f} x"))
    batched = [r[str(s)]["add_items_per_s"] for s in sizes if s >= 1000]  # full batches of 1,000
    rate = min(batched) if batched else r[small]["add_items_per_s"]
    out.append(("conversations add_items batched, sync: >= 5,000 items/s", rate >= 5000, f"{rate:,}/s"))
    due = r["compaction_due"]["p99_ms"]
    out.append(("conversations compaction-due event to a watcher: p99 <= 10 ms", due <= 10, f"{due:.3f} ms"))
    return out


def table(r: dict) -> str:
    lines = [f"{'items':>8s} {'add/s':>8s} {'sqlite add/s':>12s} {'get20 p50':>10s} {'get20 p99':>10s} "
             f"{'sqlite get20 p50':>16s} {'ctx p50':>9s} {'ctx p99':>9s} {'B/item':>8s} {'payload B':>9s} "
             f"{'sqlite B/item':>13s}"]
    for s in r["sizes"]:
        x = r[str(s)]
        lines.append(f"{s:8d} {x['add_items_per_s']:8,d} {x['sqlite_add_items_per_s']:12,d} "
                     f"{x['get_items_20']['p50_ms']:10.3f} {x['get_items_20']['p99_ms']:10.3f} "
                     f"{x['sqlite_get_items_20']['p50_ms']:16.3f} {x['get_context_8000']['p50_ms']:9.3f} "
                     f"{x['get_context_8000']['p99_ms']:9.3f} {str(x['store_bytes_per_item']):>8s} "
                     f"{x['payload_bytes_per_item']:9.1f} {x['sqlite_bytes_per_item']:13.1f}")
    for s in r["sizes"]:
        x = r[str(s)]
        if "get_context_8000_vs_echo" in x:
            lines.append(f"{s:8d} items, interleaved with the echo of {x['get_items_reply_bytes']} bytes (p50 "
                         f"{x['echo']['p50_ms']:.3f} ms), median of {x['blocks']} block ratios: get_items(20) "
                         f"{x['get_items_20_vs_echo']:.2f} x, GetContext(8000) {x['get_context_8000_vs_echo']:.2f} x")
    lines.append(f"echo floor ({r['echo']['bytes']} bytes): p50 {r['echo']['p50_ms']:.3f} ms; compaction-due to a "
                 f"watcher: p50 {r['compaction_due']['p50_ms']:.3f} ms, p99 {r['compaction_due']['p99_ms']:.3f} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    chosen = next((tuple(int(x) for x in a.split("=", 1)[1].split(",")) for a in sys.argv if a.startswith("--sizes=")),
                  None)
    base = Path(tempfile.mkdtemp(prefix="bench-conv-"))
    res = conversations(base, quick, print, chosen)
    print(table(res))
    for label, ok, fig in checks(res):
        print(f"  [{'met' if ok else 'MISSED'}] {label}: {fig}")
