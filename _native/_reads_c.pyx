# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""_reads_c: compiled twin of ``sidecar/storage/_reads_py.py`` (the read path's response building).

``list_wire(record, fetch)``: the protobuf wire bytes of the ``ListValue`` message of a stored list;
``list_wire_parts(record, fetch)``: the same in parts (one per peak of the root, then the tail items),
so that a cached peak is handed on as it is, never copied here; each part built is assembled in one buffer: records fetched through ``fetch`` (a ``txn.get``), value records' encodings
taken from their buffers (``v``) or from compression.py's read cache (``z``), subtrees from and into
storage/wirecache.py. Anything rarer (a chunked or sealed item, a ``z`` record not in the cache, an
opaque value) goes through the same functions the twin calls, so both give the same bytes and the
same errors.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

from sidecar.storage import _reads_py as _twin
from sidecar.storage import compression as _compression
from sidecar.storage import hotpath as _hp
from sidecar.storage import wirecache as _wirecache

NATIVE = True

cdef enum:
    C_HASH = 32
    C_ID = 8
    C_LEAF_ITEMS = 8
    C_TAG_VALUE = 0x76
    C_TAG_LIST = 0x4C
    C_TAG_LEAF = 0x6C
    C_TAG_INNER = 0x6E
    C_TAG_PACKED = 0x7A

if (_hp.TAG_VALUE, _hp.TAG_LIST, _hp.TAG_LEAF, _hp.TAG_INNER, _hp.TAG_PACKED) != (
        C_TAG_VALUE, C_TAG_LIST, C_TAG_LEAF, C_TAG_INNER, C_TAG_PACKED) or _hp.ID_SIZE != C_ID:
    raise ImportError("node tags differ from the compiled read path's: rebuild the extension")

cdef object _Corrupt = _hp.CorruptNode
cdef object _stored_encoding = _hp.stored_encoding
cdef object _value_wire = _twin.value_wire
cdef dict _zcache = _compression._cache
cdef dict _cache = _wirecache.cache
cdef object _remember = _wirecache.remember


cdef struct Buf:
    unsigned char* data
    Py_ssize_t size
    Py_ssize_t cap


cdef int _reserve(Buf* buf, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef unsigned char* grown
    if buf.size + n <= buf.cap:
        return 0
    cap = buf.cap * 2 if buf.cap else 64 * 1024
    while cap < buf.size + n:
        cap *= 2
    grown = <unsigned char*>realloc(buf.data, cap)
    if grown == NULL:
        raise MemoryError()
    buf.data = grown
    buf.cap = cap
    return 0


cdef inline Py_ssize_t _varint_len(Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k = 1
    while n >= 0x80:
        n >>= 7
        k += 1
    return k


cdef inline void _put_varint(Buf* buf, Py_ssize_t n) noexcept nogil:
    while n >= 0x80:
        buf.data[buf.size] = <unsigned char>((n & 0x7F) | 0x80)
        buf.size += 1
        n >>= 7
    buf.data[buf.size] = <unsigned char>n
    buf.size += 1


cdef int _put(Buf* buf, const unsigned char* src, Py_ssize_t n) except -1:
    _reserve(buf, n)
    memcpy(buf.data + buf.size, src, n)
    buf.size += n
    return 0


cdef inline bytes _fetch(object fetch, bytes key):
    node = fetch(key)
    if type(node) is bytes:
        return <bytes>node
    if node is None:
        raise _Corrupt(f"missing node {key.hex()}")
    return bytes(node)


cdef inline bint _ext_head(unsigned char c) noexcept nogil:
    return c == 0xC7 or c == 0xC8 or c == 0xC9 or (0xD4 <= c <= 0xD8)


cdef int _entry(Buf* buf, const unsigned char* e, Py_ssize_t elen) except -1:
    """Append the ``items`` entry of the item encoding ``e`` (``elen`` bytes)."""
    cdef Py_ssize_t vlen
    cdef bytes w
    if elen and _ext_head(e[0]):  # perhaps an opaque value: the twin's function decides
        w = _value_wire(PyBytes_FromStringAndSize(<char*>e, elen))
        _reserve(buf, 1 + 10 + PyBytes_GET_SIZE(w))
        buf.data[buf.size] = 0x0A
        buf.size += 1
        _put_varint(buf, PyBytes_GET_SIZE(w))
        memcpy(buf.data + buf.size, PyBytes_AS_STRING(w), PyBytes_GET_SIZE(w))
        buf.size += PyBytes_GET_SIZE(w)
        return 0
    vlen = 1 + _varint_len(elen) + elen
    _reserve(buf, 2 + 10 + 10 + elen)
    buf.data[buf.size] = 0x0A
    buf.size += 1
    _put_varint(buf, vlen)
    buf.data[buf.size] = 0x0A
    buf.size += 1
    _put_varint(buf, elen)
    memcpy(buf.data + buf.size, e, elen)
    buf.size += elen
    return 0


cdef int _item(Buf* buf, const unsigned char* item_id, object fetch) except -1:
    """Append one item's ``items`` entry; returns 1 when it may be cached, 0 when not."""
    cdef bytes rec = _fetch(fetch, PyBytes_FromStringAndSize(<char*>item_id, C_ID))
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec), elen
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(rec)
    cdef const unsigned char* e
    cdef int tag, ok
    cdef PyObject* hit
    cdef object enc
    if n <= C_HASH:
        raise _Corrupt("value record too short")
    tag = p[C_HASH]
    ok = tag == C_TAG_VALUE or tag == C_TAG_PACKED
    if tag == C_TAG_VALUE:
        e = p + C_HASH + 1
        elen = n - C_HASH - 1
    else:
        hit = NULL
        if tag == C_TAG_PACKED:
            hit = PyDict_GetItem(_zcache, PyBytes_FromStringAndSize(<char*>p, C_HASH))
        if hit != NULL and type(<object>hit) is bytes:
            enc = <object>hit
        else:
            enc = _stored_encoding(rec, fetch)
            if type(enc) is not bytes:
                enc = bytes(enc)
        e = <const unsigned char*>PyBytes_AS_STRING(enc)
        elen = PyBytes_GET_SIZE(enc)
    _entry(buf, e, elen)
    return ok


cdef int _check_node(const unsigned char* p, Py_ssize_t n, int level) except -1:
    """CorruptNode unless the record ``p`` (``n`` bytes) is a list leaf (``level`` 0) or an inner node."""
    if n <= C_HASH:
        raise _Corrupt("list node record too short")
    if level == 0:
        if p[C_HASH] != C_TAG_LEAF or n != C_HASH + 1 + C_LEAF_ITEMS * C_ID:
            raise _Corrupt("bad list leaf")
    elif p[C_HASH] != C_TAG_INNER or n != C_HASH + 1 + 2 * C_ID:
        raise _Corrupt("bad list inner node")
    return 0


cdef int _subtree(Buf* buf, const unsigned char* node_id, int level, object fetch) except -1:
    """Append the entries of a perfect subtree of height ``level`` below a peak (:func:`_peak`); 1 when it
    may be cached (a leaf is cached here)."""
    cdef bytes rec = _fetch(fetch, PyBytes_FromStringAndSize(<char*>node_id, C_ID))
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec), start, i
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(rec)
    cdef bytes h
    cdef PyObject* hit
    cdef int ok = 1
    _check_node(p, n, level)
    h = PyBytes_FromStringAndSize(<char*>p, C_HASH)
    hit = PyDict_GetItem(_cache, h)
    if hit != NULL and type(<object>hit) is bytes:
        _put(buf, <const unsigned char*>PyBytes_AS_STRING(<bytes>hit), PyBytes_GET_SIZE(<bytes>hit))
        return 1
    start = buf.size
    if level == 0:
        for i in range(C_LEAF_ITEMS):
            if not _item(buf, p + C_HASH + 1 + C_ID * i, fetch):
                ok = 0
    else:
        if not _subtree(buf, p + C_HASH + 1, level - 1, fetch):
            ok = 0
        if not _subtree(buf, p + C_HASH + 1 + C_ID, level - 1, fetch):
            ok = 0
    if ok and level == 0:
        _remember(h, PyBytes_FromStringAndSize(<char*>buf.data + start, buf.size - start))
    return ok


cdef inline int _popcount(unsigned long long v) noexcept nogil:
    cdef int c = 0
    while v:
        v &= v - 1
        c += 1
    return c


cdef bytes _peak(const unsigned char* node_id, int level, object fetch):
    """The entries of the perfect subtree (a peak of the root) of height ``level`` as one bytes object: the
    cached one itself, or the one built (and cached when it may be), as :func:`_subtree` with ``peak``."""
    cdef bytes rec = _fetch(fetch, PyBytes_FromStringAndSize(<char*>node_id, C_ID))
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec), i
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(rec)
    cdef bytes h, w
    cdef PyObject* hit
    cdef int ok = 1
    cdef Buf buf
    _check_node(p, n, level)
    h = PyBytes_FromStringAndSize(<char*>p, C_HASH)
    hit = PyDict_GetItem(_cache, h)
    if hit != NULL and type(<object>hit) is bytes:
        return <bytes>hit
    buf.data = NULL
    buf.size = buf.cap = 0
    try:
        if level == 0:
            for i in range(C_LEAF_ITEMS):
                if not _item(&buf, p + C_HASH + 1 + C_ID * i, fetch):
                    ok = 0
        else:
            if not _subtree(&buf, p + C_HASH + 1, level - 1, fetch):
                ok = 0
            if not _subtree(&buf, p + C_HASH + 1 + C_ID, level - 1, fetch):
                ok = 0
        w = PyBytes_FromStringAndSize(<char*>buf.data, buf.size)
    finally:
        free(buf.data)
    if ok:
        _remember(h, w)
    return w


def list_wire_parts(record, fetch):
    """:func:`list_wire` in parts (a list whose ``b"".join`` is that): one bytes object per peak of the root,
    the cached one itself when there is one, then the tail items' entries (one more, when there are any);
    a caller that frames the list joins them once, with its own headers."""
    cdef bytes rec = record if type(record) is bytes else bytes(record)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec), pos = C_HASH + 9, i
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(rec)
    cdef unsigned long long count = 0, m
    cdef int k
    cdef Buf buf
    cdef list parts = []
    if n <= C_HASH:
        raise _Corrupt("list root record too short")
    if p[C_HASH] != C_TAG_LIST:
        raise _Corrupt("not a list root")
    if n < C_HASH + 9:
        raise _Corrupt("list root length mismatch")
    for i in range(8):
        count = (count << 8) | p[C_HASH + 1 + i]
    m = count // C_LEAF_ITEMS
    if <unsigned long long>n != <unsigned long long>pos + (<unsigned long long>_popcount(m) + count % C_LEAF_ITEMS) * C_ID:
        raise _Corrupt("list root length mismatch")
    for k in range(63, -1, -1):
        if (m >> k) & 1:
            parts.append(_peak(p + pos, k, fetch))
            pos += C_ID
    if count % C_LEAF_ITEMS:
        buf.data = NULL
        buf.size = buf.cap = 0
        try:
            for i in range(<Py_ssize_t>(count % C_LEAF_ITEMS)):
                _item(&buf, p + pos + C_ID * i, fetch)
            parts.append(PyBytes_FromStringAndSize(<char*>buf.data, buf.size))
        finally:
            free(buf.data)
    return parts


def list_wire(record, fetch):
    """The ``ListValue`` wire bytes of the list whose root record is ``record``."""
    parts = list_wire_parts(record, fetch)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def items_wire(encodings):
    """The ``ListValue`` wire bytes of a list of the item encodings ``encodings`` (as _reads_py.items_wire)."""
    cdef Buf buf
    cdef bytes enc
    buf.data = NULL
    buf.size = buf.cap = 0
    try:
        for x in encodings:
            enc = x if type(x) is bytes else bytes(x)
            _entry(&buf, <const unsigned char*>PyBytes_AS_STRING(enc), PyBytes_GET_SIZE(enc))
        return PyBytes_FromStringAndSize(<char*>buf.data, buf.size)
    finally:
        free(buf.data)
