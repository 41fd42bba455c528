"""Regenerate the golden vectors of the memory vector kernel (vectors.json) from the pure-Python twin.

    python tests/golden/generate_vectors.py

The kernel (sidecar/storage/_vectors_py.py and its compiled twin _native/_vectors_c.pyx + _vectors_dot.h) is
defined to give the same bits in both builds: float32 components widened to float64, eight interleaved
accumulators combined in a fixed order, ``dot / (sqrt(|row|^2) * sqrt(|q|^2))``, 0 for a zero norm. The
committed vectors.json is that contract: inputs (float32 rows and queries as little-endian hex, the masks of
``best_scores``) and the exact outputs (float64 scores and squared norms as little-endian hex; ``select_top``
indexes; the rank order a search shows, best first, ties by index). tests/test_memory_vectors_golden.py
replays it against both twins and never regenerates it. Regenerate only when the kernel's arithmetic is
meant to change, and review the diff: a failing golden test after a code change means the arithmetic
changed, not that the vectors are stale.
"""
from __future__ import annotations

import json
import random
import struct
import sys
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def f32(xs) -> bytes:
    return struct.pack(f"<{len(xs)}f", *xs)


def f64_hex(a) -> str:
    return struct.pack(f"<{len(a)}d", *a).hex()


def rows_of(rng: random.Random, dims: int, n: int, style: str) -> list[list[float]]:
    if style == "uniform":
        return [[rng.uniform(-2, 2) for _ in range(dims)] for _ in range(n)]
    if style == "integers":  # exact in float64: scores equal numpy's bit for bit too
        return [[float(rng.randint(-3, 3)) for _ in range(dims)] for _ in range(n)]
    if style == "wide":  # magnitudes from subnormal to near float32's max: the sums need float64
        return [[rng.choice([1, -1]) * 10.0 ** rng.uniform(-44, 38) for _ in range(dims)] for _ in range(n)]
    raise ValueError(style)


# (name, dims, rows, queries, style, seed): dims around the 8 lanes (1, 7, 8, 9, 17), a 768-dimension space
CASES = [
    ("lanes-1", 1, 6, 2, "uniform", 11),
    ("lanes-7", 7, 20, 2, "uniform", 12),
    ("lanes-8", 8, 20, 2, "integers", 13),
    ("lanes-9", 9, 20, 2, "uniform", 14),
    ("lanes-17-wide", 17, 24, 2, "wide", 15),
    ("ties-integers", 5, 30, 2, "integers", 16),
    ("dims-768", 768, 6, 2, "uniform", 17),
]


def case(name: str, dims: int, n: int, nq: int, style: str, seed: int) -> dict:
    from sidecar.storage import _vectors_py as k

    rng = random.Random(seed)
    rows = rows_of(rng, dims, n, style)
    rows[n // 3] = [0.0] * dims  # a zero row scores 0
    if n > 4:
        rows[n // 2] = list(rows[1])  # a duplicate row: a tie
    queries = rows_of(rng, dims, nq, style)
    if nq > 1 and style == "integers":
        queries[-1] = list(rows[2])  # a query equal to a row
    matrix = b"".join(f32(r) for r in rows)
    sq = array("d", [k.sq_norm(f32(r)) for r in rows])
    nslots = max(1, n // 2)
    row_slot = [i % nslots if i % 7 != 6 else -1 for i in range(n)]  # two rows per slot, some rows unused
    row_field = [i % 3 for i in range(n)]
    slot_path = [i % 3 if i % 5 != 4 else -1 for i in range(nslots)]
    path_ok = [1, 1, 0]
    slot_expires = [0 if i % 4 else 100 + i for i in range(nslots)]
    masks = [
        {"field_ok": None, "slot_ok": None, "now": 0},
        {"field_ok": [1, 0, 1], "slot_ok": None, "now": 102},
        {"field_ok": None, "slot_ok": [i % 2 for i in range(nslots)], "now": 10_000},
    ]
    out_queries = []
    for q in queries:
        qb = f32(q)
        scores = k.cosine_scores(matrix, dims, array("q", range(n)), qb)
        best = []
        for m in masks:
            b = k.best_scores(bytearray(matrix), dims, sq, qb, array("q", row_slot), array("q", row_field),
                              None if m["field_ok"] is None else bytes(m["field_ok"]), array("q", slot_path),
                              bytes(path_ok), array("q", slot_expires), m["now"],
                              None if m["slot_ok"] is None else bytes(m["slot_ok"]), nslots)
            present = [i for i, x in enumerate(b) if x != float("-inf")]
            best.append({"best": f64_hex(b),
                         "select_top": {str(kk): list(k.select_top(b, kk)) for kk in (1, 2, 3, 10)},
                         "ranked": sorted(present, key=lambda i: (-b[i], i))})
        out_queries.append({"query": qb.hex(), "scores": f64_hex(scores),
                            "ranked": sorted(range(n), key=lambda i: (-scores[i], i)), "best": best})
    return {"name": name, "dims": dims, "rows": n, "matrix": matrix.hex(), "sq_norms": f64_hex(sq),
            "row_slot": row_slot, "row_field": row_field, "slots": nslots, "slot_path": slot_path,
            "path_ok": path_ok, "slot_expires": slot_expires, "masks": masks, "queries": out_queries}


def main() -> int:
    sys.path.insert(0, str(ROOT))
    doc = {"about": "golden vectors of the memory vector kernel; see generate_vectors.py",
           "cases": [case(*c) for c in CASES]}
    (HERE / "vectors.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {HERE / 'vectors.json'}: {len(doc['cases'])} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
