# cython: language_level=3
"""_vectors_c: the memory vector kernel, compiled (twin: sidecar/storage/_vectors_py.py).

cosine_scores(matrix, dims, rows, query) -> array('d'): for each row index in ``rows``, the cosine similarity
of that float32 row of ``matrix`` with the float32 ``query``, computed in float64 with eight interleaved
accumulators (lane i takes components i, i+8, ...) combined as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)); 0 when
either norm is 0. The loop runs without the GIL. Built with -ffp-contract=off so no fused multiply-add
changes a rounding: the twin does the same operations and gives the same bits.
"""
from array import array

from libc.math cimport sqrt, INFINITY

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


cdef extern from "_vectors_dot.h" nogil:
    double _dot "agentstate_dot"(const float* a, const float* b, Py_ssize_t n)


def sq_norm(data):
    """The squared norm of a float32 vector as _sums computes it (the x lanes): stored once per row."""
    cdef const float[::1] a = memoryview(data).cast("B").cast("f")
    cdef Py_ssize_t n = a.shape[0]
    if n == 0:
        return 0.0
    cdef double r
    with nogil:
        r = _dot(&a[0], &a[0], n)
    return r


def best_scores(matrix, Py_ssize_t dims, sqnorms, query, row_slot, row_field, field_ok, slot_path, path_ok,
                slot_expires, long long now, slot_ok, Py_ssize_t nslots, Py_ssize_t row_start=0,
                Py_ssize_t row_end=-1):
    """The best cosine score of each slot (an item) over its live rows, -inf for a slot without a wanted row.

    A row counts when ``row_slot[row] >= 0`` and (``field_ok`` is None or ``field_ok[row_field[row]]``); its slot
    when ``path_ok[slot_path[slot]]``, ``slot_expires[slot]`` is 0 or after ``now`` and (``slot_ok`` is None or
    ``slot_ok[slot]``). Scores equal :func:`cosine_scores` bit for bit (``sqnorms[row]`` from :func:`sq_norm`).
    Only rows ``row_start`` to ``row_end`` (exclusive; -1: the last) are scored, so two threads can share the
    rows (:func:`merge_max` combines their answers). The loop runs without the GIL."""
    cdef const float[::1] m = memoryview(matrix).cast("B").cast("f")
    cdef const float[::1] q = memoryview(query).cast("B").cast("f")
    cdef const double[::1] sq = sqnorms
    cdef const long long[::1] rs = row_slot
    cdef const long long[::1] rf = row_field
    cdef const long long[::1] sp = slot_path
    cdef const long long[::1] se = slot_expires
    cdef const unsigned char[::1] pok = memoryview(path_ok).cast("B")
    cdef const unsigned char[::1] fok
    cdef const unsigned char[::1] sok
    cdef bint use_f = field_ok is not None
    cdef bint use_s = slot_ok is not None
    if use_f:
        fok = memoryview(field_ok).cast("B")
    if use_s:
        sok = memoryview(slot_ok).cast("B")
    if q.shape[0] != dims:
        raise ValueError("query length differs from dims")
    cdef Py_ssize_t nrows = rs.shape[0]
    if row_end < 0 or row_end > nrows:
        row_end = nrows
    if row_start < 0:
        row_start = 0
    if sq.shape[0] < nrows or rf.shape[0] < nrows or nrows * dims > m.shape[0]:
        raise IndexError("row arrays shorter than the rows")
    if sp.shape[0] < nslots or se.shape[0] < nslots or (use_s and sok.shape[0] < nslots):
        raise IndexError("slot arrays shorter than the slots")
    out = array("d", [float("-inf")]) * nslots
    cdef double[::1] o = out
    cdef unsigned char[::1] ok = bytearray(nslots)
    cdef Py_ssize_t row, slot, p, f
    cdef double nb, na, dot, s
    cdef Py_ssize_t npaths = pok.shape[0]
    cdef Py_ssize_t nfields = fok.shape[0] if use_f else 0
    with nogil:
        nb = _dot(&q[0], &q[0], dims) if dims else 0.0
        for slot in range(nslots):
            p = sp[slot]
            if p < 0 or p >= npaths or not pok[p]:
                continue
            if se[slot] != 0 and se[slot] <= now:
                continue
            if use_s and not sok[slot]:
                continue
            ok[slot] = 1
        for row in range(row_start, row_end):
            slot = rs[row]
            if slot < 0 or slot >= nslots or not ok[slot]:
                continue
            if use_f:
                f = rf[row]
                if f < 0 or f >= nfields or not fok[f]:
                    continue
            na = sq[row]
            if na == 0.0 or nb == 0.0:
                s = 0.0
            else:
                dot = _dot(&m[row * dims], &q[0], dims)
                s = dot / (sqrt(na) * sqrt(nb))
            if s > o[slot]:
                o[slot] = s
    return out


def select_top(best, Py_ssize_t k):
    """The slots whose score (``best``, -inf: none) is at least the k-th highest, in slot order: the top ``k``
    with every slot tied with the k-th (the caller orders ties)."""
    cdef const double[::1] b = best
    cdef Py_ssize_t n = b.shape[0]
    cdef Py_ssize_t i, cnt = 0, j, c
    cdef double thr = -INFINITY, t
    heap = array("d", bytes(8 * (k if k > 0 else 1)))
    cdef double[::1] h = heap
    if k <= 0:
        return array("q")
    with nogil:
        for i in range(n):  # a min-heap of the k best scores
            t = b[i]
            if t == -INFINITY:
                continue
            if cnt < k:
                j = cnt
                cnt += 1
                while j > 0 and h[(j - 1) // 2] > t:
                    h[j] = h[(j - 1) // 2]
                    j = (j - 1) // 2
                h[j] = t
            elif t > h[0]:
                j = 0
                while True:
                    c = 2 * j + 1
                    if c >= k:
                        break
                    if c + 1 < k and h[c + 1] < h[c]:
                        c += 1
                    if h[c] >= t:
                        break
                    h[j] = h[c]
                    j = c
                h[j] = t
        if cnt == k:
            thr = h[0]
    out = array("q")
    for i in range(n):
        if b[i] != -INFINITY and b[i] >= thr:
            out.append(i)
    return out


def merge_max(a, b):
    """``a`` with each element the larger of ``a[i]`` and ``b[i]`` (two halves of :func:`best_scores`)."""
    cdef double[::1] x = a
    cdef const double[::1] y = b
    cdef Py_ssize_t i
    if y.shape[0] != x.shape[0]:
        raise ValueError("lengths differ")
    with nogil:
        for i in range(x.shape[0]):
            if y[i] > x[i]:
                x[i] = y[i]
    return a


cdef extern from "_vectors_dot.h" nogil:
    float _qdot "agentstate_qdot"(const signed char* a, const float* b, Py_ssize_t n)

from libc.math cimport lrint, fabs, isfinite, NAN
from libc.stdlib cimport malloc, free


def quantize(data):
    """(int8 components as bytes, scale s) of a float32 vector: q[i] = round(x[i] / s) with s = max|x| / 127
    (0 for a zero vector), so |x[i] - s * q[i]| <= s / 2 (and a hair: the division rounds)."""
    cdef const float[::1] a = memoryview(data).cast("B").cast("f")
    cdef Py_ssize_t n = a.shape[0], i
    cdef double m = 0.0, s
    out = bytearray(n)
    cdef unsigned char[::1] o = out
    cdef long v
    for i in range(n):
        if fabs(a[i]) > m:
            m = fabs(a[i])
    s = m / 127.0
    if s == 0.0 or not isfinite(s):
        return bytes(out), (0.0 if s == 0.0 else float("inf"))
    for i in range(n):
        v = lrint(<double>a[i] / s)
        if v > 127:
            v = 127
        elif v < -127:
            v = -127
        o[i] = <unsigned char>(v & 0xFF)
    return bytes(out), s


cdef double _kth(const double* v, Py_ssize_t n, Py_ssize_t k, double* h) noexcept nogil:
    """The k-th highest of the values of ``v`` other than -inf (-inf when there are fewer than k); ``h``:
    room for k doubles (a min-heap)."""
    cdef Py_ssize_t i, j, c, cnt = 0
    cdef double t
    for i in range(n):
        t = v[i]
        if t == -INFINITY or t != t:
            continue
        if cnt < k:
            j = cnt
            cnt += 1
            while j > 0 and h[(j - 1) // 2] > t:
                h[j] = h[(j - 1) // 2]
                j = (j - 1) // 2
            h[j] = t
        elif t > h[0]:
            j = 0
            while True:
                c = 2 * j + 1
                if c >= k:
                    break
                if c + 1 < k and h[c + 1] < h[c]:
                    c += 1
                if h[c] >= t:
                    break
                h[j] = h[c]
                j = c
            h[j] = t
    return h[0] if cnt == k else -INFINITY


def best_top(matrix, Py_ssize_t dims, sqnorms, qmatrix, qscales, query, row_slot, row_field, field_ok, slot_path,
             path_ok, slot_expires, long long now, slot_ok, Py_ssize_t nslots, Py_ssize_t k, Py_ssize_t row_start=0,
             Py_ssize_t row_end=-1):
    """:func:`best_scores` kept to its top ``k``: each slot's best score when it is at least the k-th highest
    of the best scores over these rows, else -inf (every slot kept when fewer than k have a score). The same
    bits as best_scores followed by that cut (the twin does exactly that), but cheaper: a first pass scores
    every wanted row approximately from its int8 copy (``qmatrix``, ``qscales``: :func:`quantize` of each row)
    with a proven error bound, the k-th highest lower bound among the slots is a threshold no top-k slot is
    below, and only the rows whose upper bound reaches it are scored exactly (reading float32 rows for them
    only). Bound of a row with scale s: |x.q - s * qdot| <= s * |q|_1 * (1/2 + 127 * (n / 32 + 72) * 2^-23)
    (quantization, then the float32 sums of qdot), over |x| |q|, plus 1e-12 |score| + 1e-9 for the float64
    roundings; a bound that is not finite keeps the row. The loops run without the GIL."""
    cdef const float[::1] m = memoryview(matrix).cast("B").cast("f")
    cdef const signed char[::1] qm = memoryview(qmatrix).cast("B").cast("b")
    cdef const double[::1] qs = qscales
    cdef const float[::1] q = memoryview(query).cast("B").cast("f")
    cdef const double[::1] sq = sqnorms
    cdef const long long[::1] rs = row_slot
    cdef const long long[::1] rf = row_field
    cdef const long long[::1] sp = slot_path
    cdef const long long[::1] se = slot_expires
    cdef const unsigned char[::1] pok = memoryview(path_ok).cast("B")
    cdef const unsigned char[::1] fok
    cdef const unsigned char[::1] sok
    cdef bint use_f = field_ok is not None
    cdef bint use_s = slot_ok is not None
    if use_f:
        fok = memoryview(field_ok).cast("B")
    if use_s:
        sok = memoryview(slot_ok).cast("B")
    if k < 1:
        raise ValueError("k must be at least 1")
    if q.shape[0] != dims:
        raise ValueError("query length differs from dims")
    cdef Py_ssize_t nrows = rs.shape[0]
    if row_end < 0 or row_end > nrows:
        row_end = nrows
    if row_start < 0:
        row_start = 0
    if sq.shape[0] < nrows or rf.shape[0] < nrows or nrows * dims > m.shape[0]:
        raise IndexError("row arrays shorter than the rows")
    if qs.shape[0] < nrows or nrows * dims > qm.shape[0]:
        raise IndexError("quantized rows shorter than the rows")
    if sp.shape[0] < nslots or se.shape[0] < nslots or (use_s and sok.shape[0] < nslots):
        raise IndexError("slot arrays shorter than the slots")
    out = array("d", [float("-inf")]) * nslots
    lows = array("d", [float("-inf")]) * nslots
    cdef double[::1] o = out
    cdef double[::1] lo = lows
    cdef unsigned char[::1] ok = bytearray(nslots)
    cdef Py_ssize_t span = row_end - row_start if row_end > row_start else 0
    ups = array("d", bytes(8 * (span if span > 0 else 1)))
    cdef double[::1] up = ups
    cdef Py_ssize_t row, slot, p, f, i
    cdef double nb, na, dot, s, l1 = 0.0, c, e, den, thr, rel
    cdef Py_ssize_t npaths = pok.shape[0]
    cdef Py_ssize_t nfields = fok.shape[0] if use_f else 0
    cdef double* heap = <double*>malloc(sizeof(double) * k)
    if heap == NULL:
        raise MemoryError()
    try:
        with nogil:
            nb = _dot(&q[0], &q[0], dims) if dims else 0.0
            for i in range(dims):
                l1 = l1 + fabs(q[i])
            rel = 0.5000001 + 127.0 * (<double>(dims // 32) + 72.0) * 1.1920928955078125e-07
            for slot in range(nslots):
                p = sp[slot]
                if p < 0 or p >= npaths or not pok[p]:
                    continue
                if se[slot] != 0 and se[slot] <= now:
                    continue
                if use_s and not sok[slot]:
                    continue
                ok[slot] = 1
            for row in range(row_start, row_end):  # pass 1: bounds from the int8 rows
                up[row - row_start] = NAN  # (not wanted)
                slot = rs[row]
                if slot < 0 or slot >= nslots or not ok[slot]:
                    continue
                if use_f:
                    f = rf[row]
                    if f < 0 or f >= nfields or not fok[f]:
                        continue
                na = sq[row]
                if na == 0.0 or nb == 0.0:
                    c = 0.0  # the exact score is 0 too
                    e = 0.0
                else:
                    den = sqrt(na) * sqrt(nb)
                    s = qs[row]
                    c = s * <double>_qdot(&qm[row * dims], &q[0], dims) / den
                    e = s * l1 * rel / den
                    e = e + 1e-12 * fabs(c) + 1e-9
                    if not isfinite(c) or not isfinite(e):
                        up[row - row_start] = INFINITY
                        continue
                up[row - row_start] = c + e
                if c - e > lo[slot]:
                    lo[slot] = c - e
            thr = _kth(&lo[0], nslots, k, heap) if nslots else -INFINITY
            for row in range(row_start, row_end):  # pass 2: the exact scores of the rows that may count
                if not (up[row - row_start] >= thr):  # (NaN: not wanted)
                    continue
                slot = rs[row]
                na = sq[row]
                if na == 0.0 or nb == 0.0:
                    s = 0.0
                else:
                    dot = _dot(&m[row * dims], &q[0], dims)
                    s = dot / (sqrt(na) * sqrt(nb))
                if s > o[slot]:
                    o[slot] = s
            thr = _kth(&o[0], nslots, k, heap) if nslots else -INFINITY
            for slot in range(nslots):
                if o[slot] < thr:
                    o[slot] = -INFINITY
    finally:
        free(heap)
    return out
