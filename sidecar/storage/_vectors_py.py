"""_vectors_py: the memory vector kernel in pure Python (twin of _native/_vectors_c.pyx, same bits).

See that file for the arithmetic: float64 products and sums of float32 components, eight interleaved
accumulators per sum, combined in a fixed order; the score is dot / (sqrt(|row|^2) * sqrt(|q|^2)), 0 when
either norm is 0.
"""
from __future__ import annotations

import heapq
import math
from array import array

NATIVE = False


def _sums(a, b) -> tuple[float, float, float]:
    d = [0.0] * 8
    x = [0.0] * 8
    y = [0.0] * 8
    for i, (u, v) in enumerate(zip(a, b)):
        lane = i & 7
        d[lane] = d[lane] + u * v
        x[lane] = x[lane] + u * u
        y[lane] = y[lane] + v * v
    return (((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7])),
            ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7])),
            ((y[0] + y[1]) + (y[2] + y[3])) + ((y[4] + y[5]) + (y[6] + y[7])))


def cosine_scores(matrix, dims: int, rows, query) -> array:
    m = memoryview(matrix).cast("B").cast("f")
    q = memoryview(query).cast("B").cast("f").tolist()
    if len(q) != dims:
        raise ValueError("query length differs from dims")
    out = array("d")
    for row in rows:
        if row < 0 or (row + 1) * dims > len(m):
            raise IndexError("row out of range")
    for row in rows:
        a = m[row * dims:(row + 1) * dims].tolist()
        dot, na, nb = _sums(a, q)
        out.append(0.0 if na == 0.0 or nb == 0.0 else dot / (math.sqrt(na) * math.sqrt(nb)))
    return out


def _dot(a, b) -> float:
    d = [0.0] * 8
    for i, (u, v) in enumerate(zip(a, b)):
        lane = i & 7
        d[lane] = d[lane] + u * v
    return ((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]))


def sq_norm(data) -> float:
    a = memoryview(data).cast("B").cast("f").tolist()
    return _dot(a, a)


def best_scores(matrix, dims: int, sqnorms, query, row_slot, row_field, field_ok, slot_path, path_ok,
                slot_expires, now: int, slot_ok, nslots: int, row_start: int = 0, row_end: int = -1) -> array:
    m = memoryview(matrix).cast("B").cast("f")
    q = memoryview(query).cast("B").cast("f").tolist()
    if len(q) != dims:
        raise ValueError("query length differs from dims")
    nrows = len(row_slot)
    if row_end < 0 or row_end > nrows:
        row_end = nrows
    row_start = max(0, row_start)
    if len(sqnorms) < nrows or len(row_field) < nrows or nrows * dims > len(m):
        raise IndexError("row arrays shorter than the rows")
    if len(slot_path) < nslots or len(slot_expires) < nslots or (slot_ok is not None and len(slot_ok) < nslots):
        raise IndexError("slot arrays shorter than the slots")
    out = array("d", [float("-inf")]) * nslots
    ok = bytearray(nslots)
    nb = _dot(q, q)
    for slot in range(nslots):
        p = slot_path[slot]
        if p < 0 or p >= len(path_ok) or not path_ok[p]:
            continue
        if slot_expires[slot] != 0 and slot_expires[slot] <= now:
            continue
        if slot_ok is not None and not slot_ok[slot]:
            continue
        ok[slot] = 1
    for row in range(row_start, row_end):
        slot = row_slot[row]
        if slot < 0 or slot >= nslots or not ok[slot]:
            continue
        if field_ok is not None:
            f = row_field[row]
            if f < 0 or f >= len(field_ok) or not field_ok[f]:
                continue
        na = sqnorms[row]
        if na == 0.0 or nb == 0.0:
            s = 0.0
        else:
            s = _dot(m[row * dims:(row + 1) * dims].tolist(), q) / (math.sqrt(na) * math.sqrt(nb))
        if s > out[slot]:
            out[slot] = s
    return out


def select_top(best, k: int) -> array:
    if k <= 0:
        return array("q")
    present = [b for b in best if b != float("-inf")]
    thr = heapq.nlargest(k, present)[-1] if len(present) >= k else float("-inf")
    return array("q", [i for i, b in enumerate(best) if b != float("-inf") and b >= thr])


def merge_max(a, b) -> array:
    if len(a) != len(b):
        raise ValueError("lengths differ")
    for i, y in enumerate(b):
        if y > a[i]:
            a[i] = y
    return a


def quantize(data) -> tuple[bytes, float]:
    a = memoryview(data).cast("B").cast("f").tolist()
    m = max((abs(x) for x in a), default=0.0)
    s = m / 127.0
    if s == 0.0 or not math.isfinite(s):
        return bytes(len(a)), (0.0 if s == 0.0 else float("inf"))
    return array("b", [max(-127, min(127, round(x / s))) for x in a]).tobytes(), s


def best_top(matrix, dims: int, sqnorms, qmatrix, qscales, query, row_slot, row_field, field_ok, slot_path,
             path_ok, slot_expires, now: int, slot_ok, nslots: int, k: int, row_start: int = 0,
             row_end: int = -1) -> array:
    """best_scores cut to its top k (the compiled kernel prunes with the int8 rows; the answer is this one)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    nrows = len(row_slot)
    if len(qscales) < nrows or nrows * dims > len(qmatrix):
        raise IndexError("quantized rows shorter than the rows")
    out = best_scores(matrix, dims, sqnorms, query, row_slot, row_field, field_ok, slot_path, path_ok, slot_expires,
                      now, slot_ok, nslots, row_start, row_end)
    present = [b for b in out if b != float("-inf")]
    if len(present) >= k:
        thr = heapq.nlargest(k, present)[-1]
        for i, b in enumerate(out):
            if b < thr:
                out[i] = float("-inf")
    return out
