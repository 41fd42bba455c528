"""The ``schemas`` workload of benchmarks/run.py (also runnable alone: ``python benchmarks/bench_schemas.py
[--quick]``).

Read latency of a migrated value next to an unmigrated one, in one sidecar (``sync``), one run: a schema with
three versions (the steps of tests/test_schemas.py: renames, a drop, adds, a conversion, nest and unnest, and
``map_items`` over the message list, so every message is decoded, changed and encoded again on the read), and
threads whose checkpoint holds the same state, stored at version 3 ("unmigrated": read as it is) or at version 1
("migrated": migrated on read to 3), all read with ``GetCheckpoint(read_schema_version=3)``, alternating in
rounds so machine noise hits them alike, for message lists of 20 and 200 items (400 characters each;
``--quick``: 20). "Repeated" reads read one checkpoint again and again (the sidecar keeps the result of a
migration on read, keyed by the stored content, so these pay the migration once); "first" reads read each of
as many distinct checkpoints once: they share all messages but one with each other, as successive checkpoints of
one thread do, so the items migrated for one read are reused by the next by their hash (state/schemas.py
``_ItemCache``); "first, none shared" reads checkpoints whose every message is distinct (each item pays the
migration: printed, no target). A plain read (no read_schema_version) is
printed too. Target: migrated p50 <= 1.2 x unmigrated p50, checked for both.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import run as suite  # noqa: E402  (sidecar, ms)


def _states(n: int, k: int = 0, unshared: bool = False):
    """The same state at version 1 and at version 3; ``k`` varies one message (so distinct states that share
    the other messages, as successive checkpoints of a thread do), or every message with ``unshared``."""
    from agentstate import Opaque
    tag = f"u{k} " if unshared else ""
    msgs_v1 = [{"role": "user" if i % 2 == 0 else "ai", "text": f"{tag}{i}: " + "x" * 400, "tokens": str(100 + i)}
               for i in range(n)]
    msgs_v1[-1]["text"] = f"variant {k}: " + "y" * 400
    blob = Opaque("framework/serde", b"\x01" * 256)
    v1 = {"profile": {"first": "Ada", "last": "L", "age": "36"}, "messages": msgs_v1, "notes": "remember",
          "legacy": 1, "blob": blob, "tags": [1, True, "x"]}
    v3 = {"profile": {"first": "Ada", "last": "L", "age": 36, "tz": "UTC"},
          "messages": [{"role": m["role"], "content": m["text"], "tokens": int(m["tokens"]), "meta": {}}
                       for m in msgs_v1],
          "memo": "remember", "payload": blob, "settings": {"theme": "dark"}, "tags": ["1", "true", "x"]}
    return v1, v3


UNMIGRATED, MIGRATED = "unmigrated (v3 read at 3)", "migrated (v1 read at 3)"
FIRST_U, FIRST_M = "unmigrated, first read", "migrated, first read"
FIRST_UX, FIRST_MX = "unmigr., first, none shared", "migrated, first, none shared"
PLAIN = "plain read (no version)"
UNSHARED_PER_ROUND = 2  # reads per round of the "none shared" variants (each a checkpoint of its own)


def schemas(base: Path, quick: bool, log) -> dict:
    from agentstate import Client, checkpoint_values
    from test_schemas import V2, V3

    sizes = [20] if quick else [20, 200]
    rounds, per_round = (10, 20) if quick else (30, 30)
    proc = suite.sidecar(base, "schemas", "sync")
    out: dict = {"sizes": sizes, "reads_per_variant": rounds * per_round}
    try:
        with Client(proc.address, namespace="bench") as c:
            c.schemas.register("agent", [[], V2, V3])
            for n in sizes:
                distinct = rounds * per_round
                for k in range(distinct + 1):
                    v1, v3 = _states(n, k)
                    c.put_checkpoint(f"old-{n}-{k}", v1, schema="agent", schema_version=1)
                    c.put_checkpoint(f"new-{n}-{k}", v3, schema="agent", schema_version=3)
                    if k < rounds * UNSHARED_PER_ROUND:
                        v1, v3 = _states(n, k, unshared=True)
                        c.put_checkpoint(f"oldx-{n}-{k}", v1, schema="agent", schema_version=1)
                        c.put_checkpoint(f"newx-{n}-{k}", v3, schema="agent", schema_version=3)
                v1, v3 = _states(n, distinct)
                migrated = c.get_checkpoint(f"old-{n}-{distinct}", read_schema_version=3)
                assert checkpoint_values(migrated) == v3 and migrated.migration == 2  # MIGRATED: the same values
                first = {k: iter(range(distinct)) for k in (FIRST_U, FIRST_M, FIRST_UX, FIRST_MX)}
                variants = {
                    UNMIGRATED: lambda n=n: c.get_checkpoint(f"new-{n}-0", read_schema_version=3),
                    MIGRATED: lambda n=n: c.get_checkpoint(f"old-{n}-0", read_schema_version=3),
                    # every read of these is the first of its checkpoint: nothing cached from an earlier read
                    FIRST_U: lambda n=n: c.get_checkpoint(f"new-{n}-{next(first[FIRST_U])}", read_schema_version=3),
                    FIRST_M: lambda n=n: c.get_checkpoint(f"old-{n}-{next(first[FIRST_M])}", read_schema_version=3),
                    # and checkpoints that share no message with any other (every item pays the migration)
                    FIRST_UX: lambda n=n: c.get_checkpoint(f"newx-{n}-{next(first[FIRST_UX])}",
                                                           read_schema_version=3),
                    FIRST_MX: lambda n=n: c.get_checkpoint(f"oldx-{n}-{next(first[FIRST_MX])}",
                                                           read_schema_version=3),
                    PLAIN: lambda n=n: c.get_checkpoint(f"new-{n}-0"),
                }
                times: dict[str, list[float]] = {k: [] for k in variants}
                for name in (UNMIGRATED, MIGRATED, PLAIN):  # warm-up
                    for _ in range(5):
                        variants[name]()
                for _ in range(rounds):
                    for name, fn in variants.items():
                        for _ in range(UNSHARED_PER_ROUND if name in (FIRST_UX, FIRST_MX) else per_round):
                            t0 = time.perf_counter()
                            fn()
                            times[name].append(time.perf_counter() - t0)
                res = {k: suite.ms(v) for k, v in times.items()}
                res["ratio_p50"] = round(res[MIGRATED]["p50_ms"] / res[UNMIGRATED]["p50_ms"], 3)
                res["ratio_first_p50"] = round(res[FIRST_M]["p50_ms"] / res[FIRST_U]["p50_ms"], 3)
                res["ratio_first_unshared_p50"] = round(res[FIRST_MX]["p50_ms"] / res[FIRST_UX]["p50_ms"], 3)
                out[f"messages_{n}"] = res
                log(f"schemas: {n} messages, migrated/unmigrated p50 = {res['ratio_p50']:.2f} x repeated, "
                    f"{res['ratio_first_p50']:.2f} x first reads, {res['ratio_first_unshared_p50']:.2f} x first "
                    "reads sharing no message")
    finally:
        proc.stop()
    return out


def table(res: dict) -> str:
    lines = [f"{'messages':>8s} {'variant':28s} {'p50 ms':>9s} {'p99 ms':>9s} {'mean ms':>9s}"]
    for n in res["sizes"]:
        r = res[f"messages_{n}"]
        for k, v in r.items():
            if isinstance(v, dict):
                lines.append(f"{n:8d} {k:28s} {v['p50_ms']:9.3f} {v['p99_ms']:9.3f} {v['mean_ms']:9.3f}")
        lines.append(f"{n:8d} {'migrated / unmigrated p50':28s} {r['ratio_p50']:9.2f} x  (repeated reads)")
        lines.append(f"{n:8d} {'migrated / unmigrated p50':28s} {r['ratio_first_p50']:9.2f} x  (first reads)")
        lines.append(f"{n:8d} {'migrated / unmigrated p50':28s} {r['ratio_first_unshared_p50']:9.2f} x  "
                     "(first reads, no message shared: reported, no target)")
    return "\n".join(lines)


def checks(res: dict) -> list[tuple[str, bool, str]]:
    out = []
    for n in res["sizes"]:
        r = res[f"messages_{n}"]
        out.append((f"schemas {n} messages: migrated read p50 <= 1.2 x unmigrated p50 (repeated reads)",
                    r["ratio_p50"] <= 1.2, f"{r[MIGRATED]['p50_ms']:.3f} vs {r[UNMIGRATED]['p50_ms']:.3f} ms = "
                    f"{r['ratio_p50']:.2f} x"))
        out.append((f"schemas {n} messages: migrated read p50 <= 1.2 x unmigrated p50 (first reads)",
                    r["ratio_first_p50"] <= 1.2, f"{r[FIRST_M]['p50_ms']:.3f} vs {r[FIRST_U]['p50_ms']:.3f} ms = "
                    f"{r['ratio_first_p50']:.2f} x"))
    return out


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        result = schemas(Path(d), "--quick" in sys.argv, lambda m: print(m, file=sys.stderr))
    print(table(result))
    for label, ok, fig in checks(result):
        print(f"  [{'met' if ok else 'MISSED'}] {label}: {fig}")
