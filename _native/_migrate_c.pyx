# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""_migrate_c: list items migrated on read in their encoding (built into ``sidecar.storage._migrate_c``).

The compiled twin of ``sidecar.storage._migrate_py`` (read its module doc for what a program is and when an
item is left to the engine): the same answers, byte for byte, None in the same cases
(tests/test_schemas_migrate.py). Import it through :mod:`sidecar.storage.migrate`.

How it is fast: an item's bytes are scanned once in C (the msgspec-normal check and the map's entries as
pointers into the bytes), the steps edit a C array of entries (converted scalars written into the entry),
and the result is written into one new bytes object; ``migrate_list`` runs the per-item loop (cache lookup,
fetch, the stored encoding, the step program, the value node's hash) without a Python frame per item, hashing
the items' value nodes with one reused blake3 hasher (update, digest, reset) instead of a new one per item.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy

from blake3 import blake3 as _blake3

from . import encryption as _encryption
from . import hotpath as _hp
from ._hotpath_py import CHUNK_THRESHOLD

NATIVE = True

DEF T_STRING = 1
DEF T_INT = 2
DEF T_FLOAT = 3
DEF T_BOOL = 4
DEF T_LIST = 5
DEF MAX_DEPTH = 64
DEF STACK_ENTRIES = 48

_OPS = {"rename": 0, "drop": 1, "add": 2, "convert": 3}
cdef int _TAG_VALUE = _hp.TAG_VALUE
cdef int _TAG_PACKED = _hp.TAG_PACKED
cdef int _TAG_SEALED = _encryption.TAG_SEALED
if _hp.HASH_SIZE != 32:
    raise ImportError("hash size differs from the compiled migration's: rebuild the extension")

# kinds of a head
DEF K_INT = 1
DEF K_UINT = 2   # an unsigned 64-bit value beyond int64
DEF K_FLOAT = 3
DEF K_NIL = 4
DEF K_BOOL = 5
DEF K_STR = 6
DEF K_BIN = 7
DEF K_EXT = 8
DEF K_ARRAY = 9
DEF K_MAP = 10


cdef struct Head:
    int kind
    int64_t ival      # K_INT value, K_BOOL 0/1
    uint64_t uval     # K_UINT value
    Py_ssize_t n      # length / count
    Py_ssize_t p      # where the payload starts


cdef inline uint64_t _be(const unsigned char* b, int w) nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(w):
        v = (v << 8) | b[i]
    return v


cdef bint _head(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, Head* h) nogil:
    """The head at ``pos`` in msgspec's form (False: not normal), as _migrate_py._head."""
    cdef unsigned char t
    cdef int w
    cdef uint64_t u
    cdef int64_t s
    if pos >= end:
        return False
    t = b[pos]
    h.p = pos + 1
    if t <= 0x7F:
        h.kind = K_INT
        h.ival = t
        return True
    if t >= 0xE0:
        h.kind = K_INT
        h.ival = <int64_t>t - 0x100
        return True
    if t <= 0x8F:
        h.kind = K_MAP
        h.n = t & 0x0F
        return True
    if t <= 0x9F:
        h.kind = K_ARRAY
        h.n = t & 0x0F
        return True
    if t <= 0xBF:
        h.kind = K_STR
        h.n = t & 0x1F
        return True
    if t == 0xC0:
        h.kind = K_NIL
        return True
    if t == 0xC2 or t == 0xC3:
        h.kind = K_BOOL
        h.ival = t == 0xC3
        return True
    if 0xCC <= t <= 0xCF:
        w = 1 << (t - 0xCC)
        if pos + 1 + w > end:
            return False
        u = _be(b + pos + 1, w)
        if u < (128 if w == 1 else (<uint64_t>1) << (4 * w)):
            return False
        h.p = pos + 1 + w
        if u > <uint64_t>0x7FFFFFFFFFFFFFFF:
            h.kind = K_UINT
            h.uval = u
        else:
            h.kind = K_INT
            h.ival = <int64_t>u
        return True
    if 0xD0 <= t <= 0xD3:
        w = 1 << (t - 0xD0)
        if pos + 1 + w > end:
            return False
        u = _be(b + pos + 1, w)
        if w == 1:
            s = <signed char>u
        elif w == 2:
            s = <short>u
        elif w == 4:
            s = <int>u
        else:
            s = <int64_t>u
        if s >= (-32 if w == 1 else -((<int64_t>1) << (4 * w - 1))):
            return False
        h.kind = K_INT
        h.ival = s
        h.p = pos + 1 + w
        return True
    if t == 0xCB:
        if pos + 9 > end:
            return False
        h.kind = K_FLOAT
        h.p = pos + 9
        return True
    if t == 0xD9 or t == 0xDA or t == 0xDB:
        w = 1 if t == 0xD9 else (2 if t == 0xDA else 4)
        if pos + 1 + w > end:
            return False
        h.n = <Py_ssize_t>_be(b + pos + 1, w)
        if h.n < (32 if w == 1 else (256 if w == 2 else 65536)):
            return False
        h.kind = K_STR
        h.p = pos + 1 + w
        return True
    if t == 0xC4 or t == 0xC5 or t == 0xC6:
        w = 1 if t == 0xC4 else (2 if t == 0xC5 else 4)
        if pos + 1 + w > end:
            return False
        h.n = <Py_ssize_t>_be(b + pos + 1, w)
        if h.n < (0 if w == 1 else (256 if w == 2 else 65536)):
            return False
        h.kind = K_BIN
        h.p = pos + 1 + w
        return True
    if t == 0xDC or t == 0xDD or t == 0xDE or t == 0xDF:
        w = 2 if (t == 0xDC or t == 0xDE) else 4
        if pos + 1 + w > end:
            return False
        h.n = <Py_ssize_t>_be(b + pos + 1, w)
        if h.n < (16 if w == 2 else 65536):
            return False
        h.kind = K_ARRAY if t <= 0xDD else K_MAP
        h.p = pos + 1 + w
        return True
    if 0xD4 <= t <= 0xD8:
        h.kind = K_EXT
        h.n = 1 << (t - 0xD4)
        return True
    if t == 0xC7 or t == 0xC8 or t == 0xC9:
        w = 1 << (t - 0xC7)
        if pos + 1 + w > end:
            return False
        h.n = <Py_ssize_t>_be(b + pos + 1, w)
        if h.n < (0 if w == 1 else ((<Py_ssize_t>1) << (8 * (w // 2)))):
            return False
        if h.n == 1 or h.n == 2 or h.n == 4 or h.n == 8 or h.n == 16:
            return False
        h.kind = K_EXT
        h.p = pos + 1 + w
        return True
    return False


cdef bint _utf8_ok(const unsigned char* s, Py_ssize_t n) nogil:
    """Strict UTF-8 (as Python's decoder: no overlong forms, no surrogates, nothing past U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c, c1
    cdef uint64_t word
    while i < n:
        if i + 8 <= n:  # ASCII eight bytes at a time
            memcpy(&word, s + i, 8)
            if (word & 0x8080808080808080ULL) == 0:
                i += 8
                continue
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2:
            return False
        if c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
            continue
        if c < 0xF0:
            if i + 2 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return False
            if c == 0xE0 and c1 < 0xA0:
                return False
            if c == 0xED and c1 >= 0xA0:
                return False
            i += 3
            continue
        if c < 0xF5:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            if c == 0xF0 and c1 < 0x90:
                return False
            if c == 0xF4 and c1 >= 0x90:
                return False
            i += 4
            continue
        return False
    return True


cdef inline int _keycmp(const unsigned char* a, Py_ssize_t an, const unsigned char* b, Py_ssize_t bn) nogil:
    cdef int c = memcmp(a, b, an if an < bn else bn)
    if c:
        return c
    return (an > bn) - (an < bn)


cdef bint _key(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, const unsigned char** k,
               Py_ssize_t* kl, Py_ssize_t* after) nogil:
    cdef Head h
    if not _head(b, pos, end, &h) or h.kind != K_STR or h.p + h.n > end or not _utf8_ok(b + h.p, h.n):
        return False
    k[0] = b + h.p
    kl[0] = h.n
    after[0] = h.p + h.n
    return True


cdef Py_ssize_t _skip(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth) nogil:
    """The end of the normal value at ``pos``, or -1."""
    cdef Head h
    cdef Py_ssize_t i, p
    cdef const unsigned char* k
    cdef const unsigned char* prev = NULL
    cdef Py_ssize_t kl, prevl = 0
    if depth > MAX_DEPTH or not _head(b, pos, end, &h):
        return -1
    p = h.p
    if h.kind == K_INT or h.kind == K_UINT or h.kind == K_NIL or h.kind == K_BOOL or h.kind == K_FLOAT:
        return p
    if h.kind == K_STR:
        if p + h.n > end or not _utf8_ok(b + p, h.n):
            return -1
        return p + h.n
    if h.kind == K_BIN:
        return p + h.n if p + h.n <= end else -1
    if h.kind == K_EXT:
        if p + 1 + h.n > end or b[p] == 0xFF:
            return -1
        return p + 1 + h.n
    if h.kind == K_ARRAY:
        for i in range(h.n):
            p = _skip(b, p, end, depth + 1)
            if p < 0:
                return -1
        return p
    for i in range(h.n):
        if not _key(b, p, end, &k, &kl, &p):
            return -1
        if prev != NULL and _keycmp(k, kl, prev, prevl) <= 0:
            return -1
        prev, prevl = k, kl
        p = _skip(b, p, end, depth + 1)
        if p < 0:
            return -1
    return p


def is_normal(encoding):
    """Whether ``encoding`` is one value in msgspec's own form (as _migrate_py.is_normal)."""
    cdef bytes e = bytes(encoding)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(e)
    return _skip(<const unsigned char*>PyBytes_AS_STRING(e), 0, n, 0) == n


# ----------------------------------------------------------------- writing

cdef inline Py_ssize_t _str_head_len(Py_ssize_t n) nogil:
    return 1 if n < 32 else (2 if n < 256 else (3 if n < 65536 else 5))


cdef inline Py_ssize_t _put_be(unsigned char* o, uint64_t v, int w) nogil:
    cdef int i
    for i in range(w):
        o[i] = (v >> (8 * (w - 1 - i))) & 0xFF
    return w


cdef Py_ssize_t _put_str_head(unsigned char* o, Py_ssize_t n) nogil:
    if n < 32:
        o[0] = 0xA0 | n
        return 1
    if n < 256:
        o[0] = 0xD9
        o[1] = n
        return 2
    if n < 65536:
        o[0] = 0xDA
        return 1 + _put_be(o + 1, n, 2)
    o[0] = 0xDB
    return 1 + _put_be(o + 1, n, 4)


cdef Py_ssize_t _put_int(unsigned char* o, int64_t v) nogil:
    """msgspec's encoding of int ``v`` (as _migrate_py._int)."""
    if v < 0:
        if v >= -32:
            o[0] = <unsigned char>(v + 0x100)
            return 1
        if v >= -128:
            o[0] = 0xD0
            return 1 + _put_be(o + 1, <uint64_t>v, 1)
        if v >= -32768:
            o[0] = 0xD1
            return 1 + _put_be(o + 1, <uint64_t>v, 2)
        if v >= -((<int64_t>1) << 31):
            o[0] = 0xD2
            return 1 + _put_be(o + 1, <uint64_t>v, 4)
        o[0] = 0xD3
        return 1 + _put_be(o + 1, <uint64_t>v, 8)
    if v < 128:
        o[0] = <unsigned char>v
        return 1
    if v < 256:
        o[0] = 0xCC
        return 1 + _put_be(o + 1, <uint64_t>v, 1)
    if v < 65536:
        o[0] = 0xCD
        return 1 + _put_be(o + 1, <uint64_t>v, 2)
    if v < (<int64_t>1) << 32:
        o[0] = 0xCE
        return 1 + _put_be(o + 1, <uint64_t>v, 4)
    o[0] = 0xCF
    return 1 + _put_be(o + 1, <uint64_t>v, 8)


# ----------------------------------------------------------------- conversions

cdef struct Entry:
    const unsigned char* k
    Py_ssize_t kl
    const unsigned char* v   # NULL: the value is in conv
    Py_ssize_t vl
    int pre                  # 1: the value is wrapped in a one-item list
    unsigned char conv[24]


cdef union _F:
    double d
    uint64_t u


cdef int _convert(const unsigned char* v, Py_ssize_t vl, int pre, int to, unsigned char* out,
                  Py_ssize_t* outl) nogil:
    """Convert the value (``pre``: wrapped in a list) to ``to``. 0: unchanged, 1: now ``out[:outl]``
    (unwrapped), 2: wrap it in a list, -1: not certain (the engine decides)."""
    cdef Head h
    cdef Py_ssize_t i, nd, start
    cdef int64_t acc
    cdef bint neg
    cdef _F f
    cdef char digits[24]
    cdef uint64_t m
    if pre:  # a list
        return 0 if to == T_LIST else -1
    if not _head(v, 0, vl, &h):
        return -1
    if h.kind == K_NIL:
        return 0
    if to == T_LIST:
        return 0 if h.kind == K_ARRAY else 2
    if to == T_STRING:
        if h.kind == K_STR:
            return 0
        if h.kind == K_BOOL:
            if h.ival:
                memcpy(out, b"\xa4true", 5)
                outl[0] = 5
            else:
                memcpy(out, b"\xa5false", 6)
                outl[0] = 6
            return 1
        if h.kind == K_INT:
            neg = h.ival < 0
            m = <uint64_t>(-(h.ival + 1)) + 1 if neg else <uint64_t>h.ival
            nd = 0
            while True:
                digits[nd] = <char>(48 + m % 10)
                nd += 1
                m //= 10
                if m == 0:
                    break
            if neg:
                digits[nd] = 45  # '-'
                nd += 1
            out[0] = 0xA0 | nd
            for i in range(nd):
                out[1 + i] = digits[nd - 1 - i]
            outl[0] = 1 + nd
            return 1
        if h.kind == K_UINT:
            m = h.uval
            nd = 0
            while m:
                digits[nd] = <char>(48 + m % 10)
                nd += 1
                m //= 10
            out[0] = 0xA0 | nd
            for i in range(nd):
                out[1 + i] = digits[nd - 1 - i]
            outl[0] = 1 + nd
            return 1
        return -1
    if to == T_INT:
        if h.kind == K_INT or h.kind == K_UINT:
            return 0
        if h.kind == K_BOOL:
            out[0] = 1 if h.ival else 0
            outl[0] = 1
            return 1
        if h.kind == K_STR:
            if h.p + h.n > vl:
                return -1
            start = h.p
            neg = h.n > 0 and v[start] == 45
            if neg:
                start += 1
            if start >= h.p + h.n:
                return -1
            for i in range(start, h.p + h.n):
                if v[i] < 48 or v[i] > 57:
                    return -1
            while start < h.p + h.n - 1 and v[start] == 48:  # leading zeros (one digit kept)
                start += 1
            if h.p + h.n - start > 18:
                return -1
            acc = 0
            for i in range(start, h.p + h.n):
                acc = acc * 10 + (v[i] - 48)
            outl[0] = _put_int(out, -acc if neg else acc)
            return 1
        return -1
    if to == T_FLOAT:
        if h.kind == K_FLOAT:
            return 0
        if h.kind == K_INT:
            f.d = <double>h.ival
            out[0] = 0xCB
            _put_be(out + 1, f.u, 8)
            outl[0] = 9
            return 1
        return -1
    if to == T_BOOL:
        if h.kind == K_BOOL:
            return 0
        if h.kind == K_INT and (h.ival == 0 or h.ival == 1):
            out[0] = 0xC3 if h.ival else 0xC2
            outl[0] = 1
            return 1
        if h.kind == K_STR and h.p + h.n <= vl:
            if h.n == 4 and memcmp(v + h.p, b"true", 4) == 0:
                out[0] = 0xC3
                outl[0] = 1
                return 1
            if h.n == 5 and memcmp(v + h.p, b"false", 5) == 0:
                out[0] = 0xC2
                outl[0] = 1
                return 1
        return -1
    return -1


# ----------------------------------------------------------------- programs

cdef class Program:
    """Steps compiled for :func:`apply_item` (made by :func:`program`)."""
    cdef int count
    cdef int* ops
    cdef int* types
    cdef list keep       # the bytes the pointers below point into
    cdef const unsigned char** a
    cdef Py_ssize_t* al
    cdef const unsigned char** b
    cdef Py_ssize_t* bl
    cdef int adds

    def __dealloc__(self):
        free(self.ops)
        free(self.types)
        free(self.a)
        free(self.al)
        free(self.b)
        free(self.bl)


cdef bint _is_utf8(object x):
    if type(x) is not bytes:
        return False
    return _utf8_ok(<const unsigned char*>PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x))


def program(steps):
    """The steps as a Program, or None (as _migrate_py.program)."""
    cdef list out = []
    cdef Program prog
    cdef int i, op
    for st in steps:
        op = _OPS.get(st[0], -1) if type(st) is tuple and len(st) > 0 else -1
        if op < 0:
            return None
        if op in (0, 1, 2) and not _is_utf8(st[1]):
            return None
        if op == 0:
            if len(st) != 3 or not _is_utf8(st[2]):
                return None
            out.append((0, st[1], st[2], 0))
        elif op == 1:
            out.append((1, st[1], b"", 0))
        elif op == 2:
            default = b"\xc0" if st[2] is None else st[2]
            if type(default) is not bytes or not is_normal(default):
                return None
            out.append((2, st[1], default, 0))
        else:
            key, to = st[1], st[2]
            if key is not None and not _is_utf8(key):
                return None
            if to not in (T_STRING, T_INT, T_FLOAT, T_BOOL, T_LIST):
                return None
            out.append((3 if key is not None else 4, key if key is not None else b"", b"", to))
    prog = Program.__new__(Program)
    prog.count = len(out)
    n = max(prog.count, 1)
    prog.ops = <int*>malloc(n * sizeof(int))
    prog.types = <int*>malloc(n * sizeof(int))
    prog.a = <const unsigned char**>malloc(n * sizeof(void*))
    prog.al = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    prog.b = <const unsigned char**>malloc(n * sizeof(void*))
    prog.bl = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    if not (prog.ops and prog.types and prog.a and prog.al and prog.b and prog.bl):
        raise MemoryError()
    prog.keep = []
    prog.adds = 0
    for i, (op, x, y, to) in enumerate(out):
        prog.keep.append(x)
        prog.keep.append(y)
        prog.ops[i] = op
        prog.types[i] = to
        prog.a[i] = <const unsigned char*>PyBytes_AS_STRING(x)
        prog.al[i] = PyBytes_GET_SIZE(x)
        prog.b[i] = <const unsigned char*>PyBytes_AS_STRING(y)
        prog.bl[i] = PyBytes_GET_SIZE(y)
        if op == 2:
            prog.adds += 1
    return prog


cdef inline const unsigned char* _val(Entry* e) nogil:
    if e.v == NULL:
        return <const unsigned char*>&e.conv[0]
    return e.v


cdef object _apply(Program prog, bytes encoding):
    cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(encoding)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(encoding)
    cdef Entry stack_entries[STACK_ENTRIES]
    cdef Entry* entries = stack_entries
    cdef Entry* e
    cdef Entry tmp
    cdef Py_ssize_t count = -1  # -1: the item is not in entries form
    cdef Py_ssize_t i, j, p, q, total, cap
    cdef const unsigned char* k
    cdef Py_ssize_t kl
    cdef const unsigned char* prev
    cdef Py_ssize_t prevl
    cdef Head h
    cdef int op, r
    cdef Py_ssize_t found, other
    cdef unsigned char conv[24]
    cdef unsigned char item_buf[24]
    cdef Py_ssize_t convl
    cdef const unsigned char* item = b   # the item itself while not a map of entries
    cdef Py_ssize_t iteml = end
    cdef int item_pre = 0
    cdef bint item_conv = False
    cdef unsigned char* o
    cdef bytes result
    if prog.count == 0 or prog.ops[0] == 4:  # else the map's entries are checked as they are read (below)
        if _skip(b, 0, end, 0) != end:
            return None
    try:
        for i in range(prog.count):
            op = prog.ops[i]
            if op == 4:
                if count >= 0:
                    return None
                r = _convert(item, iteml, item_pre, prog.types[i], conv, &convl)
                if r < 0:
                    return None
                if r == 1:
                    memcpy(item_buf, conv, convl)
                    item = item_buf
                    iteml = convl
                    item_pre = 0
                    item_conv = True
                elif r == 2:
                    item_pre = 1
                continue
            if count < 0:
                if item_pre or not _head(item, 0, iteml, &h) or h.kind != K_MAP:
                    return None
                if item_conv:
                    return None  # (a converted scalar is never a map)
                cap = h.n + prog.adds
                if cap > STACK_ENTRIES:
                    entries = <Entry*>malloc(cap * sizeof(Entry))
                    if entries == NULL:
                        raise MemoryError()
                p = h.p
                prev = NULL
                prevl = 0
                for j in range(h.n):
                    if not _key(b, p, end, &k, &kl, &p):
                        return None
                    if prev != NULL and _keycmp(k, kl, prev, prevl) <= 0:
                        return None
                    prev, prevl = k, kl
                    q = _skip(b, p, end, 1)
                    if q < 0:
                        return None
                    e = &entries[j]
                    e.k, e.kl, e.v, e.vl, e.pre = k, kl, b + p, q - p, 0
                    p = q
                if p != end:
                    return None
                count = h.n
            found = -1
            for j in range(count):
                if entries[j].kl == prog.al[i] and memcmp(entries[j].k, prog.a[i], prog.al[i]) == 0:
                    found = j
                    break
            if op == 0:
                if found < 0:
                    continue
                for j in range(count):
                    if entries[j].kl == prog.bl[i] and memcmp(entries[j].k, prog.b[i], prog.bl[i]) == 0:
                        return None
                entries[found].k = prog.b[i]
                entries[found].kl = prog.bl[i]
            elif op == 1:
                if found >= 0:
                    for j in range(found, count - 1):
                        entries[j] = entries[j + 1]
                    count -= 1
            elif op == 2:
                if found < 0:
                    e = &entries[count]
                    e.k, e.kl, e.v, e.vl, e.pre = prog.a[i], prog.al[i], prog.b[i], prog.bl[i], 0
                    count += 1
            else:
                if found < 0:
                    continue
                e = &entries[found]
                r = _convert(_val(e), e.vl, e.pre, prog.types[i], conv, &convl)
                if r < 0:
                    return None
                if r == 1:
                    memcpy(e.conv, conv, convl)
                    e.v = NULL
                    e.vl = convl
                    e.pre = 0
                elif r == 2:
                    e.pre = 1
        if count < 0:
            result = PyBytes_FromStringAndSize(NULL, iteml + item_pre)
            o = <unsigned char*>PyBytes_AS_STRING(result)
            if item_pre:
                o[0] = 0x91
            memcpy(o + item_pre, item, iteml)
            return result
        for i in range(1, count):  # insertion sort by key bytes
            tmp = entries[i]
            j = i - 1
            while j >= 0 and _keycmp(entries[j].k, entries[j].kl, tmp.k, tmp.kl) > 0:
                entries[j + 1] = entries[j]
                j -= 1
            entries[j + 1] = tmp  # (a converted value lives in the entry: it moves with it)
        total = 1 if count < 16 else (3 if count < 65536 else 5)
        for i in range(count):
            total += _str_head_len(entries[i].kl) + entries[i].kl + entries[i].pre + entries[i].vl
        result = PyBytes_FromStringAndSize(NULL, total)
        o = <unsigned char*>PyBytes_AS_STRING(result)
        if count < 16:
            o[0] = 0x80 | count
            p = 1
        elif count < 65536:
            o[0] = 0xDE
            p = 1 + _put_be(o + 1, count, 2)
        else:
            o[0] = 0xDF
            p = 1 + _put_be(o + 1, count, 4)
        for i in range(count):
            e = &entries[i]
            p += _put_str_head(o + p, e.kl)
            memcpy(o + p, e.k, e.kl)
            p += e.kl
            if e.pre:
                o[p] = 0x91
                p += 1
            memcpy(o + p, _val(e), e.vl)
            p += e.vl
        return result
    finally:
        if entries != stack_entries:
            free(entries)


def apply_item(Program prog, encoding):
    """``encoding`` through ``prog`` (as _migrate_py.apply_item)."""
    return _apply(prog, encoding if type(encoding) is bytes else bytes(encoding))


def migrate_list(Program prog, record, fetch, dict cache, bytes prefix, fallback):
    """As _migrate_py.migrate_list."""
    return migrate_items(prog, _hp.stored_list_ids(record, fetch), fetch, cache, prefix, fallback)[:3]


def migrate_items(Program prog, ids, fetch, dict cache, bytes prefix, fallback, Py_ssize_t start=0):
    """As _migrate_py.migrate_items."""
    cdef list encs = [], hashes = [], fresh = []
    cdef list id_list = ids if type(ids) is list else list(ids)
    cdef Py_ssize_t n, size
    cdef object hit, rec, enc, stored
    cdef bytes key, brec
    cdef bint plain = True, sealed
    cdef int tag
    stored_encoding = _hp.stored_encoding
    value_node = _hp.value_node
    hash_size = _hp.HASH_SIZE
    hasher = _blake3()  # one per call (never shared between threads), reused for the items' value nodes
    update, digest, reset = hasher.update, hasher.digest, hasher.reset
    for n in range(len(id_list)):
        node_id = id_list[n]
        rec = fetch(node_id)
        if rec is None:
            raise _hp.CorruptNode(f"missing node {bytes(node_id).hex()}")
        brec = rec if type(rec) is bytes else bytes(rec)
        size = PyBytes_GET_SIZE(brec)
        sealed = False
        if size <= 32:
            plain = False
        else:
            tag = (<const unsigned char*>PyBytes_AS_STRING(brec))[32]
            if tag != _TAG_VALUE and tag != _TAG_PACKED:
                plain = False
                sealed = tag == _TAG_SEALED  # opened on every read: neither from the cache nor kept (as the twin)
        key = prefix + brec[:hash_size]
        hit = None if sealed else cache.get(key)
        if hit is None:
            stored = stored_encoding(rec, fetch)
            enc = _apply(prog, stored if type(stored) is bytes else bytes(stored))
            if enc is None:
                enc = fallback(start + n, stored)
            if PyBytes_GET_SIZE(enc) <= CHUNK_THRESHOLD:  # one ``v`` node: hp.value_node's hash, made here
                update(b"v")
                update(enc)
                hit = (enc, digest())
                reset()
            else:
                hit = (enc, value_node(enc, []))
            if not sealed:
                fresh.append((key, hit))
        encs.append(hit[0])
        hashes.append(hit[1])
    return encs, hashes, fresh, plain
