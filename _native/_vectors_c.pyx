# cython: language_level=3
"""_vectors_c: the memory vector kernel, compiled (twin: sidecar/storage/_vectors_py.py).

cosine_scores(matrix, dims, rows, query) -> array('d'): for each row index in ``rows``, the cosine similarity
of that float32 row of ``matrix`` with the float32 ``query``, computed in float64 with eight interleaved
accumulators (lane i takes components i, i+8, ...) combined as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)); 0 when
either norm is 0. The loop runs without the GIL. Built with -ffp-contract=off so no fused multiply-add
changes a rounding: the twin does the same operations and gives the same bits.
"""
from array import array

from libc.math cimport sqrt

NATIVE = True


cdef inline void _sums(const float* a, const float* b, Py_ssize_t n, double* dot, double* na, double* nb) noexcept nogil:
    cdef double d[8]
    cdef double x[8]
    cdef double y[8]
    cdef Py_ssize_t i, lane
    cdef double u, v
    for lane in range(8):
        d[lane] = 0.0
        x[lane] = 0.0
        y[lane] = 0.0
    for i in range(n):
        lane = i & 7
        u = a[i]
        v = b[i]
        d[lane] = d[lane] + u * v
        x[lane] = x[lane] + u * u
        y[lane] = y[lane] + v * v
    dot[0] = ((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]))
    na[0] = ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]))
    nb[0] = ((y[0] + y[1]) + (y[2] + y[3])) + ((y[4] + y[5]) + (y[6] + y[7]))


def cosine_scores(matrix, Py_ssize_t dims, rows, query):
    cdef const float[::1] m = memoryview(matrix).cast("B").cast("f")
    cdef const float[::1] q = memoryview(query).cast("B").cast("f")
    cdef const long long[::1] r
    cdef Py_ssize_t n = len(rows)
    out = array("d", bytes(8 * n))
    cdef double[::1] o = out
    cdef Py_ssize_t j, row
    cdef double dot, na, nb, denom
    if q.shape[0] != dims:
        raise ValueError("query length differs from dims")
    if n == 0:
        return out
    r = rows
    for j in range(n):
        if r[j] < 0 or (r[j] + 1) * dims > m.shape[0]:
            raise IndexError("row out of range")
    with nogil:
        for j in range(n):
            row = r[j]
            _sums(&m[row * dims], &q[0], dims, &dot, &na, &nb)
            if na == 0.0 or nb == 0.0:
                o[j] = 0.0
            else:
                denom = sqrt(na) * sqrt(nb)
                o[j] = dot / denom
    return out
