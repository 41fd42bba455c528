# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""_lists_c: the compiled twin of ``agentstate._lists_py`` (built into ``agentstate._lists_c``; import it
through :mod:`agentstate.values`). Same function, same answers: ``msgpack_array(wire)``, the MessagePack
array of a ListValue's msgpack items or None (see the twin); ``wire`` is bytes or any contiguous byte
buffer (a memoryview of a received response: agentstate.values.response_lists), read where it is. The
scan runs over the buffer without the GIL; the array is written into one bytes object, or
(``msgpack_array_into(wire, out)``) into a bytearray the caller keeps, so a long list read again and
again does not allocate (and the allocator give back) a new buffer each time.
"""
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

NATIVE = True
MAX_DEPTH = 128

cdef enum:
    C_MAX_DEPTH = 128
    C_NOGIL = 64 * 1024


cdef inline Py_ssize_t _varint(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, uint64_t* out) noexcept nogil:
    cdef uint64_t n = 0
    cdef int shift = 0
    cdef unsigned char c
    while pos < end and shift < 63:
        c = b[pos]
        pos += 1
        n |= (<uint64_t>(c & 0x7F)) << shift
        if c < 0x80:
            out[0] = n
            return pos
        shift += 7
    return -1


cdef inline uint64_t _be(const unsigned char* p, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(k):
        v = (v << 8) | p[i]
    return v


cdef Py_ssize_t _skip(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth) noexcept nogil:
    cdef unsigned char h
    cdef uint64_t count, i, size
    cdef int k = 0, extra = 0, fixed = -1
    if pos >= end or depth > C_MAX_DEPTH:
        return -1
    h = b[pos]
    pos += 1
    if h <= 0x7F or h >= 0xE0:
        return pos
    if 0xA0 <= h <= 0xBF:
        size = h & 0x1F
        return pos + <Py_ssize_t>size if <uint64_t>(end - pos) >= size else -1
    if 0x80 <= h <= 0x8F:
        count = (h & 0x0F) * 2
    elif 0x90 <= h <= 0x9F:
        count = h & 0x0F
    elif h == 0xDC or h == 0xDD or h == 0xDE or h == 0xDF:
        k = 2 if (h == 0xDC or h == 0xDE) else 4
        if end - pos < k:
            return -1
        count = _be(b + pos, k) * (2 if h >= 0xDE else 1)
        pos += k
    else:
        if h == 0xC0 or h == 0xC2 or h == 0xC3:
            fixed = 0
        elif h == 0xCC or h == 0xD0:
            fixed = 1
        elif h == 0xCD or h == 0xD1 or h == 0xD4:
            fixed = 2
        elif h == 0xD5:
            fixed = 3
        elif h == 0xCA or h == 0xCE or h == 0xD2:
            fixed = 4
        elif h == 0xD6:
            fixed = 5
        elif h == 0xCB or h == 0xCF or h == 0xD3:
            fixed = 8
        elif h == 0xD7:
            fixed = 9
        elif h == 0xD8:
            fixed = 17
        if fixed >= 0:
            return pos + fixed if end - pos >= fixed else -1
        if h == 0xC4 or h == 0xD9:
            k = 1
        elif h == 0xC5 or h == 0xDA:
            k = 2
        elif h == 0xC6 or h == 0xDB:
            k = 4
        elif h == 0xC7:
            k, extra = 1, 1
        elif h == 0xC8:
            k, extra = 2, 1
        elif h == 0xC9:
            k, extra = 4, 1
        else:  # 0xC1
            return -1
        if end - pos < k:
            return -1
        size = _be(b + pos, k) + <uint64_t>(k + extra)
        return pos + <Py_ssize_t>size if <uint64_t>(end - pos) >= size else -1
    i = 0
    while i < count:
        pos = _skip(b, pos, end, depth + 1)
        if pos < 0:
            return -1
        i += 1
    return pos


cdef Py_ssize_t _scan(const unsigned char* b, Py_ssize_t end, Py_ssize_t* starts, Py_ssize_t* lens,
                      Py_ssize_t cap) noexcept nogil:
    """Item count (filling starts/lens up to cap), or -1 when the wire is not msgpack items only."""
    cdef Py_ssize_t pos = 0, vend, p, n = 0
    cdef uint64_t vlen, elen
    while pos < end:
        if b[pos] != 0x0A:
            return -1
        pos = _varint(b, pos + 1, end, &vlen)
        if pos < 0 or vlen > <uint64_t>(end - pos):
            return -1
        vend = pos + <Py_ssize_t>vlen
        if pos >= vend or b[pos] != 0x0A:
            return -1
        p = _varint(b, pos + 1, vend, &elen)
        if p < 0 or elen == 0 or elen != <uint64_t>(vend - p):
            return -1
        if _skip(b, p, vend, 0) != vend:
            return -1
        if n < cap:
            starts[n] = p
            lens[n] = vend - p
        n += 1
        pos = vend
    return n


cdef const unsigned char* _buffer(object wire, Py_ssize_t* end, list keep) except? NULL:
    """The bytes of ``wire`` (bytes, or any contiguous byte buffer, read in place; else bytes() of it, as
    the twin); what must stay alive while they are read goes into ``keep``."""
    cdef const unsigned char[::1] view
    cdef bytes b
    if type(wire) is bytes:
        b = <bytes>wire
    else:
        try:
            view = wire
        except (TypeError, ValueError, BufferError):  # not a contiguous byte buffer
            b = bytes(wire)
        else:
            keep.append(view)
            end[0] = view.shape[0]
            return &view[0] if end[0] else <const unsigned char*>""
    keep.append(b)
    end[0] = PyBytes_GET_SIZE(b)
    return <const unsigned char*>PyBytes_AS_STRING(b)


cdef Py_ssize_t _array(const unsigned char* p, Py_ssize_t end, object into, list result) except -2:
    """Scan ``p[:end]``; -1 when not msgpack items only. Else the array's size, the array written into
    ``into`` (a bytearray, grown to hold it) or, when ``into`` is None, made and appended to ``result``."""
    cdef bytes made
    cdef Py_ssize_t cap = end // 3 + 1, n, i, total = 0, hl, pos
    cdef Py_ssize_t* starts = <Py_ssize_t*>malloc(cap * sizeof(Py_ssize_t))
    cdef Py_ssize_t* lens = <Py_ssize_t*>malloc(cap * sizeof(Py_ssize_t))
    cdef unsigned char* q
    if starts == NULL or lens == NULL:
        free(starts)
        free(lens)
        raise MemoryError()
    try:
        if end >= C_NOGIL:
            with nogil:
                n = _scan(p, end, starts, lens, cap)
        else:
            n = _scan(p, end, starts, lens, cap)
        if n < 0:
            return -1
        for i in range(n):
            total += lens[i]
        hl = 1 if n < 16 else (3 if n < 0x10000 else 5)
        if into is None:
            made = PyBytes_FromStringAndSize(NULL, hl + total)
            result.append(made)
            q = <unsigned char*>PyBytes_AS_STRING(made)
        else:
            if PyByteArray_GET_SIZE(into) < hl + total:
                PyByteArray_Resize(into, hl + total)
            q = <unsigned char*>PyByteArray_AS_STRING(into)
        if n < 16:
            q[0] = 0x90 | n
        elif n < 0x10000:
            q[0], q[1], q[2] = 0xDC, (n >> 8) & 0xFF, n & 0xFF
        else:
            q[0], q[1], q[2], q[3], q[4] = 0xDD, (n >> 24) & 0xFF, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF
        pos = hl
        for i in range(n):
            memcpy(q + pos, p + starts[i], lens[i])
            pos += lens[i]
        return pos
    finally:
        free(starts)
        free(lens)


def msgpack_array(wire):
    """The MessagePack array of a ListValue's msgpack items (see the twin), or None."""
    cdef Py_ssize_t end = 0
    cdef list keep = []
    cdef list out = []
    cdef const unsigned char* p = _buffer(wire, &end, keep)
    if _array(p, end, None, out) < 0:
        return None
    return out[0]


def msgpack_array_into(wire, out):
    """msgpack_array written at the start of ``out`` (a bytearray, grown when too short, never shrunk):
    its length, or -1 where msgpack_array is None (``out`` then unchanged)."""
    cdef Py_ssize_t end = 0
    cdef list keep = []
    cdef const unsigned char* p
    if type(out) is not bytearray:
        raise TypeError("out must be a bytearray")
    p = _buffer(wire, &end, keep)
    return _array(p, end, out, None)
