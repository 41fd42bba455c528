"""_vectors_py: the memory vector kernel in pure Python (twin of _native/_vectors_c.pyx, same bits).

See that file for the arithmetic: float64 products and sums of float32 components, eight interleaved
accumulators per sum, combined in a fixed order; the score is dot / (sqrt(|row|^2) * sqrt(|q|^2)), 0 when
either norm is 0.
"""
from __future__ import annotations

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
