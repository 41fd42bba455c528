"""Golden vectors of the memory vector kernel (tests/golden/vectors.json, made by generate_vectors.py from the
pure-Python twin): both twins (sidecar.storage._vectors_py and the compiled _vectors_c) must give the
committed bytes exactly: squared norms, cosine scores, best_scores under masks (fields, paths, expiry, slot
filters), the same split in two halves merged with merge_max, select_top's indexes, and the rank order a
search shows (best first, ties by index). The file is never regenerated here; numpy checks the committed
scores independently (float64, 1e-12; exact for integer vectors)."""
from __future__ import annotations

import json
import math
import os
import struct
from array import array
from pathlib import Path

import numpy as np
import pytest

from sidecar.storage import _vectors_py, vectors

try:
    from sidecar.storage import _vectors_c
except ImportError:  # pragma: no cover - a build without a compiler
    _vectors_c = None

GOLDEN = json.loads((Path(__file__).resolve().parent / "golden" / "vectors.json").read_text())
CASES = GOLDEN["cases"]
TWINS = [pytest.param(_vectors_py, id="py"), pytest.param(_vectors_c, id="c")]


def test_the_compiled_twin_is_there_unless_switched_off():
    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert vectors.implementation is _vectors_py
    else:
        assert _vectors_c is not None and vectors.implementation is _vectors_c


def f64(hexed: str) -> list[float]:
    raw = bytes.fromhex(hexed)
    return list(struct.unpack(f"<{len(raw) // 8}d", raw))


def test_the_file_covers_what_it_says():
    assert {c["dims"] for c in CASES} >= {1, 7, 8, 9, 17, 768}
    for c in CASES:
        assert len(bytes.fromhex(c["matrix"])) == 4 * c["dims"] * c["rows"]
        for q in c["queries"]:
            assert len(q["best"]) == len(c["masks"])
            assert any(x == 0.0 for x in f64(q["scores"]))  # the zero row
    assert any(len(set(f64(q["scores"]))) < len(f64(q["scores"])) for c in CASES for q in c["queries"])  # ties


@pytest.mark.parametrize("impl", TWINS)
@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_both_twins_give_the_committed_bytes(impl, c):
    if impl is None:
        pytest.fail("the compiled kernel was not built (setup.py build_ext)")
    dims, n = c["dims"], c["rows"]
    matrix = bytes.fromhex(c["matrix"])
    rows = [matrix[i * 4 * dims:(i + 1) * 4 * dims] for i in range(n)]
    sq = array("d", [impl.sq_norm(r) for r in rows])
    assert sq.tobytes().hex() == c["sq_norms"]
    nslots = c["slots"]
    for q in c["queries"]:
        qb = bytes.fromhex(q["query"])
        scores = impl.cosine_scores(matrix, dims, array("q", range(n)), qb)
        assert scores.tobytes().hex() == q["scores"]
        assert sorted(range(n), key=lambda i: (-scores[i], i)) == q["ranked"]
        for m, want in zip(c["masks"], q["best"]):
            args = (bytearray(matrix), dims, sq, qb, array("q", c["row_slot"]), array("q", c["row_field"]),
                    None if m["field_ok"] is None else bytes(m["field_ok"]), array("q", c["slot_path"]),
                    bytes(c["path_ok"]), array("q", c["slot_expires"]), m["now"],
                    None if m["slot_ok"] is None else bytes(m["slot_ok"]), nslots)
            best = impl.best_scores(*args)
            assert best.tobytes().hex() == want["best"]
            half = n // 2
            merged = impl.merge_max(impl.best_scores(*args, 0, half), impl.best_scores(*args, half, n))
            assert merged.tobytes().hex() == want["best"]
            for k, idx in want["select_top"].items():
                assert list(impl.select_top(best, int(k))) == idx
            present = [i for i, x in enumerate(best) if x != float("-inf")]
            assert sorted(present, key=lambda i: (-best[i], i)) == want["ranked"]


@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_the_committed_scores_are_cosines(c):
    """numpy in float64 on the committed float32 inputs: equal to 1e-12, bit for bit for integer vectors."""
    dims, n = c["dims"], c["rows"]
    m = np.frombuffer(bytes.fromhex(c["matrix"]), dtype="<f4").reshape(n, dims).astype(np.float64)
    integral = bool(np.all(m == np.round(m)))
    for q in c["queries"]:
        v = np.frombuffer(bytes.fromhex(q["query"]), dtype="<f4").astype(np.float64)
        got = f64(q["scores"])
        for i in range(n):
            na, nb = float(m[i] @ m[i]), float(v @ v)
            want = 0.0 if na == 0 or nb == 0 else float(m[i] @ v) / (math.sqrt(na) * math.sqrt(nb))
            if integral and np.all(v == np.round(v)):
                assert got[i] == want, (c["name"], i)
            else:
                assert got[i] == pytest.approx(want, rel=1e-12, abs=1e-300), (c["name"], i)
