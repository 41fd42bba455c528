# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""_hotpath_c: the compiled write path (built into ``sidecar.storage._hotpath_c``).

The compiled twin of ``sidecar.storage._hotpath_py`` (node formats, chunking, trees)
and ``agentstate.codec`` (the canonical value encoding). Every function gives
byte-identical results and raises the same errors as the pure-Python twin;
tests/golden/ and tests/test_hotpath.py prove it. Import it through
:mod:`sidecar.storage.hotpath`.

How it is fast:

* Values: a C-level type walk checks and normalises Python values and hands
  them to msgspec (``Encoder(order="deterministic")`` sorts map keys by their
  UTF-8 bytes, which is the order the twin sorts them in). The walk copies a
  container only when something inside it changes (a big int, a NaN, a
  datetime...), so plain JSON-like data is encoded without building a second
  object tree. Whenever the fast walk or msgspec refuses a value, the value is
  walked again by the faithful port of ``codec.normalize``, which raises
  exactly the twin's error (reason and path); errors are rare, so they may be
  slow.
* Encodings that are already canonical (what clients send) are recognised by
  a C scanner over the bytes (shortest ints, one NaN, float64 only, strict
  UTF-8, sorted unique string keys, canonical datetime/UUID/opaque
  extensions): ``canonicalize`` returns them as they are and ``decompose``
  slices them, without decoding. Anything the scanner is unsure about goes the
  twin's way (msgspec decode, normalise, encode).
  The scan runs without the GIL for encodings of 256 KiB or more.
* Content-defined chunking runs in C over the byte buffer (the gear hash
  rolled four bytes per step) with the GIL released for inputs over
  CHUNK_THRESHOLD bytes.
* Tree nodes are assembled in C buffers (no per-item ``b"".join``); list
  state (peaks and tail) lives in a C struct; map items are partitioned by
  key-hash nibble in C arrays.
* Stored records (hash + node with 8-byte child ids, read by id through a
  Python ``fetch`` callback) are parsed in place: a list's item ids are
  gathered from its leaf records into one C buffer, then each item record is
  fetched once and its encoding copied out, so the only Python objects made
  per item are its id, the fetched record and the result. References are
  swapped (canonical <-> stored form) by one routine that checks a node's
  layout before converting any reference, as the twin does.
* Hashing uses the ``blake3`` package (Rust, via PyO3); BLAKE3 is not
  reimplemented here. blake3-py releases the GIL while hashing inputs of 2048
  bytes or more (its GIL_MINSIZE, the same threshold as CPython's hashlib;
  see ``update`` and ``__new__`` in blake3-py's src/lib.rs), both in
  ``blake3(data)`` and in ``update``; smaller inputs are hashed with the GIL
  held, where releasing it would cost more than the hash. So chunk nodes
  (> 4 KiB) are hashed without the GIL and small value/tree nodes with it.
  Calls that hash many nodes reuse one hasher (``_Hasher``: update, digest,
  reset), which costs less per node than a new ``blake3`` object.

``CorruptNode`` is the twin's class (imported from ``sidecar.storage._hotpath_py``),
so ``except CorruptNode`` catches it from either module; ``UnsupportedValue``
is ``agentstate.codec.UnsupportedValue``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.buffer cimport PyObject_CheckBuffer
from cpython.datetime cimport (
    datetime_day, datetime_hour, datetime_microsecond, datetime_minute, datetime_month, datetime_second,
    datetime_tzinfo, datetime_year, import_datetime, timedelta_days, timedelta_microseconds, timedelta_seconds,
)
from cpython.dict cimport PyDict_Next
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy

import datetime as _dt
import decimal as _decimal
import struct as _struct
import uuid as _uuid

import msgspec
from blake3 import blake3 as _blake3_type

from agentstate import codec as _codec
from sidecar.storage._hotpath_py import CorruptNode
from sidecar.storage import _hotpath_py as _twin
from sidecar import limits as _limits
from sidecar import errors as _errors
from sidecar.storage import compression as _compression
from sidecar.storage import encryption as _encryption

import_datetime()

NATIVE = True

HASH_SIZE = 32
LEAF_ITEMS = 8
MAP_LEAF_MAX = 32
CHUNK_THRESHOLD = 32 * 1024
CDC_MIN = 4 * 1024
CDC_AVG = 16 * 1024
CDC_MAX = 64 * 1024
CDC_MASK_SMALL = ((1 << 16) - 1) << 48
CDC_MASK_LARGE = ((1 << 12) - 1) << 52
MAX_DEPTH = _codec.MAX_DEPTH

KIND_SCALAR = 0
KIND_LIST = 1
KIND_MAP = 2

TAG_VALUE = 0x76  # v
TAG_CHUNK = 0x63  # c
TAG_CHUNKED = 0x43  # C
TAG_LIST = 0x4C  # L
TAG_LEAF = 0x6C  # l
TAG_INNER = 0x6E  # n
TAG_MAP = 0x4D  # M
TAG_MAP_INNER = 0x4E  # N
#: Stored form only: a value node kept compressed (sidecar/compression.py).
TAG_PACKED = _compression.TAG_PACKED  # z (sidecar/compression.py owns the format)
#: Stored form only: a value node of an encrypted namespace, sealed (sidecar/storage/encryption.py).
TAG_SEALED = _encryption.TAG_SEALED  # e

#: Stored records (see the twin's section "stored records"): record = hash + stored node.
ID_SIZE = 8

UnsupportedValue = _codec.UnsupportedValue

# C mirrors of the constants above (the Python names stay the public ones).
cdef enum:
    C_HASH = 32
    C_ID = 8
    C_LEAF_ITEMS = 8
    C_MAP_LEAF_MAX = 32
    C_CHUNK_THRESHOLD = 32 * 1024
    C_CDC_MIN = 4 * 1024
    C_CDC_AVG = 16 * 1024
    C_CDC_MAX = 64 * 1024
    C_MAX_DEPTH = 64
    # The canonical-bytes scanner gives up (and lets the decoder decide) past this depth.
    C_SCAN_DEPTH = 32
    C_OFFSET_LIMIT = 86400
    # Scan bigger inputs without the GIL.
    C_SCAN_NOGIL = 256 * 1024
    C_EXT_BIGINT = 1
    C_EXT_DATETIME = 2
    C_EXT_UUID = 3
    C_EXT_DECIMAL = 4
    C_EXT_SET = 5
    C_EXT_OPAQUE = 6
    C_TAG_VALUE = 0x76
    C_TAG_CHUNK = 0x63
    C_TAG_CHUNKED = 0x43
    C_TAG_LIST = 0x4C
    C_TAG_LEAF = 0x6C
    C_TAG_INNER = 0x6E
    C_TAG_MAP = 0x4D
    C_TAG_MAP_INNER = 0x4E
    C_TAG_PACKED = 0x7A  # == TAG_PACKED (checked at import)
    C_TAG_SEALED = 0x65  # == TAG_SEALED (checked at import)

if TAG_PACKED != C_TAG_PACKED:  # the C mirror must follow compression.py's tag
    raise ImportError(f"compressed node tag {TAG_PACKED:#x} != compiled {C_TAG_PACKED:#x}: rebuild the extension")
if TAG_SEALED != C_TAG_SEALED:  # and encryption.py's
    raise ImportError(f"sealed node tag {TAG_SEALED:#x} != compiled {C_TAG_SEALED:#x}: rebuild the extension")

cdef uint64_t C_MASK_SMALL = ((<uint64_t>1 << 16) - 1) << 48
cdef uint64_t C_MASK_LARGE = ((<uint64_t>1 << 12) - 1) << 52
cdef int64_t C_MICROS_MIN = _codec.MICROS_MIN
cdef int64_t C_MICROS_MAX = _codec.MICROS_MAX

cdef uint64_t _GEAR_C[256]
GEAR = tuple(
    int.from_bytes(_blake3_type(b"agentstate.v1 gear" + bytes((i,))).digest()[:8], "little") for i in range(256)
)
for _i in range(256):
    _GEAR_C[_i] = GEAR[_i]

cdef object _B3 = _blake3_type
cdef object _Ext = msgspec.msgpack.Ext
cdef object _UV = _codec.UnsupportedValue
cdef object _Corrupt = CorruptNode
cdef object _DecodeError = msgspec.DecodeError
cdef object _InvalidOperation = _decimal.InvalidOperation
cdef object _Decimal = _decimal.Decimal
cdef type _DATETIME = _dt.datetime
cdef type _UUID = _uuid.UUID
cdef type _DECIMAL = _decimal.Decimal
cdef type _EXT_TYPE = msgspec.msgpack.Ext
cdef type _OPAQUE_TYPE = _codec.Opaque
cdef object _NAN = float("nan")
cdef uint64_t _NAN_BITS = _struct.unpack(">Q", _struct.pack(">d", _NAN))[0]
cdef object _INT_MAX = _codec.INT_MAX
cdef object _INT_MIN = _codec.INT_MIN
cdef str _TOO_DEEP = f"nested deeper than {_codec.MAX_DEPTH}"

_plain_encoder = msgspec.msgpack.Encoder()
_sorted_encoder = msgspec.msgpack.Encoder(order="deterministic")
_raw_decoder = msgspec.msgpack.Decoder(ext_hook=msgspec.msgpack.Ext)
cdef object _plain_encode = _plain_encoder.encode
cdef object _sorted_encode = _sorted_encoder.encode
cdef object _raw_decode = _raw_decoder.decode


# ================================================================== byte helpers

cdef inline uint64_t _ld64(const unsigned char* p) noexcept nogil:
    return ((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40) | (<uint64_t>p[3] << 32)
            | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16) | (<uint64_t>p[6] << 8) | <uint64_t>p[7])


cdef inline uint64_t _ld32(const unsigned char* p) noexcept nogil:
    return (<uint64_t>p[0] << 24) | (<uint64_t>p[1] << 16) | (<uint64_t>p[2] << 8) | <uint64_t>p[3]


cdef inline uint64_t _ld16(const unsigned char* p) noexcept nogil:
    return (<uint64_t>p[0] << 8) | <uint64_t>p[1]


cdef inline void _st64(unsigned char* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[7 - i] = <unsigned char>(v & 0xFF)
        v >>= 8


cdef inline void _st32(unsigned char* p, uint64_t v) noexcept nogil:
    p[0] = <unsigned char>((v >> 24) & 0xFF)
    p[1] = <unsigned char>((v >> 16) & 0xFF)
    p[2] = <unsigned char>((v >> 8) & 0xFF)
    p[3] = <unsigned char>(v & 0xFF)


cdef inline void _st16(unsigned char* p, uint64_t v) noexcept nogil:
    p[0] = <unsigned char>((v >> 8) & 0xFF)
    p[1] = <unsigned char>(v & 0xFF)


cdef inline uint64_t _be_slice(const unsigned char* p, Py_ssize_t n, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """int.from_bytes(data[a:b], "big") with Python's slice clamping (0 <= a <= b)."""
    cdef uint64_t v = 0
    if b > n:
        b = n
    while a < b:
        v = (v << 8) | p[a]
        a += 1
    return v


cdef inline bytes _new(Py_ssize_t n):
    return PyBytes_FromStringAndSize(NULL, n)


cdef inline unsigned char* _w(bytes b) noexcept:
    return <unsigned char*>PyBytes_AS_STRING(b)


cdef inline const unsigned char* _r(bytes b) noexcept:
    return <const unsigned char*>PyBytes_AS_STRING(b)


cdef bytes _to_bytes(object obj):
    if PyObject_CheckBuffer(obj):
        return bytes(obj)
    raise TypeError(f"a bytes-like object is required, not '{type(obj).__name__}'")


cdef inline bytes _b(object obj):
    if type(obj) is bytes:
        return <bytes>obj
    return _to_bytes(obj)


cdef inline bytes _slice(bytes b, Py_ssize_t a, Py_ssize_t n):
    """b[a:a+n] (the caller checked the bounds)."""
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(b) + a, n)


cdef inline bytes _fetch(object fetch, object h):
    node = fetch(h)
    if type(node) is bytes:
        return <bytes>node
    if node is None:  # a plain txn.get can be the fetch: a missing node is damage, not a TypeError
        raise CorruptNode(f"missing node {bytes(h).hex()}")
    return _to_bytes(node)


cdef class _NodeWriter


cdef class _Hasher:
    """One blake3 hasher reused for many small inputs (update, digest, reset).

    Making a ``blake3`` object per hash costs more than hashing a few hundred
    bytes, so calls that hash many nodes make one of these. It is local to
    that call (never shared between threads): blake3-py releases the GIL inside
    ``update`` for inputs of 2048 bytes or more, so a shared hasher could be
    interleaved by another thread.
    """
    cdef object _update, _digest, _reset

    def __cinit__(self):
        h = _B3()
        self._update = h.update
        self._digest = h.digest
        self._reset = h.reset

    cdef inline bytes hash(self, bytes data):
        cdef bytes out
        self._update(data)
        out = self._digest()
        self._reset()
        return out


cdef inline bytes _hash(object data, _Hasher hs):
    if hs is None:
        return _B3(data).digest()
    return hs.hash(data)


# Long builds (a map of 300,000 keys) run in a worker thread while the event loop serves other requests:
# every _YIELD_EVERY units of work the GIL is released for a moment, so a thread waiting for it (the
# loop) gets it within its switch interval instead of after the whole build. Output is unchanged.
DEF _YIELD_EVERY = 256
cdef Py_ssize_t _work = 0


cdef inline void _tick() noexcept:
    global _work
    _work += 1
    if _work >= _YIELD_EVERY:
        _work = 0
        with nogil:
            pass


cdef inline bytes _emit(object nodes, bytes node, _Hasher hs):
    """Hash ``node``, append (hash, node) to ``nodes`` and return the hash."""
    _tick()
    cdef bytes h = _B3(node).digest() if hs is None else hs.hash(node)
    nodes.append((h, node))
    return h


cdef bint _utf8_ok(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """Whether s[:n] is UTF-8 that Python's strict decoder accepts (no surrogates, overlongs, > U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef uint64_t w
    cdef unsigned char c, c1
    while i < n:
        while i + 8 <= n:
            memcpy(&w, s + i, 8)
            if w & <uint64_t>0x8080808080808080:
                break
            i += 8
        if i >= n:
            break
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
            if c == 0xE0:
                if c1 < 0xA0 or c1 > 0xBF:
                    return False
            elif c == 0xED:
                if c1 < 0x80 or c1 > 0x9F:
                    return False
            elif (c1 & 0xC0) != 0x80:
                return False
            if (s[i + 2] & 0xC0) != 0x80:
                return False
            i += 3
            continue
        if c < 0xF5:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if c == 0xF0:
                if c1 < 0x90 or c1 > 0xBF:
                    return False
            elif c == 0xF4:
                if c1 < 0x80 or c1 > 0x8F:
                    return False
            elif (c1 & 0xC0) != 0x80:
                return False
            if (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            i += 4
            continue
        return False
    return True


def hash_bytes(data):
    return _B3(data).digest()


# ================================================================== values: normalisation

cdef inline bint _int_fits(object value) except -1:
    """Whether an int is inside [-2**63, 2**64 - 1] (a plain MessagePack int)."""
    cdef int overflow = 0
    PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow == 0:
        return True
    if overflow < 0:
        return False
    return value <= _INT_MAX


cdef bytes _bigint_payload(object value):
    magnitude = value if value >= 0 else ~value
    return value.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


cdef inline int64_t _days_from_civil(int64_t y, int64_t m, int64_t d) noexcept nogil:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    cdef int64_t era, yoe, doy, doe
    if m <= 2:
        y -= 1
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef inline int64_t _floordiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef bytes _datetime_payload(object value):
    cdef int64_t wall, off_us, micros, seconds
    cdef bytes out, zone
    cdef unsigned char* p
    tz = datetime_tzinfo(value)
    offset = None if tz is None else value.utcoffset()
    wall = ((_days_from_civil(datetime_year(value), datetime_month(value), datetime_day(value)) * 86400
             + datetime_hour(value) * 3600 + datetime_minute(value) * 60 + datetime_second(value)) * 1000000
            + datetime_microsecond(value))
    if offset is None:
        out = _new(9)
        p = _w(out)
        p[0] = 0
        _st64(p + 1, <uint64_t>wall)
        return out
    off_us = (<int64_t>timedelta_days(offset) * 86400 + timedelta_seconds(offset)) * 1000000 \
        + timedelta_microseconds(offset)
    micros = wall - off_us
    seconds = _floordiv(off_us, 1000000)
    if seconds * 1000000 != off_us or not -C_OFFSET_LIMIT < seconds < C_OFFSET_LIMIT:
        raise _UV("datetime UTC offset must be whole seconds under 24 hours")
    if not C_MICROS_MIN <= micros <= C_MICROS_MAX:
        raise _UV("datetime out of range")
    key = getattr(tz, "key", None)
    if isinstance(key, str) and key and type(tz).__name__ == "ZoneInfo":
        zone = key.encode()
        if len(zone) > 255:
            raise _UV("datetime zone name longer than 255 bytes")
        out = _new(13 + len(zone))
        p = _w(out)
        p[0] = 2
        memcpy(p + 13, _r(zone), len(zone))
    else:
        out = _new(13)
        p = _w(out)
        p[0] = 1
    _st64(p + 1, <uint64_t>micros)
    _st32(p + 9, <uint64_t>(<int32_t>seconds))
    return out


cdef bytes _opaque_payload(object type_, object data):
    cdef bytes name, out
    cdef Py_ssize_t tn, dn
    cdef unsigned char* p
    if type(type_) is not str or type(data) is not bytes:
        raise _UV("Opaque needs a str type and bytes data")
    name = type_.encode("utf-8", "strict")
    tn = len(name)
    if not 0 < tn < 256:
        raise _UV("opaque type must be 1 to 255 UTF-8 bytes")
    dn = PyBytes_GET_SIZE(data)
    out = _new(1 + tn + dn)
    p = _w(out)
    p[0] = <unsigned char>tn
    memcpy(p + 1, _r(name), tn)
    memcpy(p + 1 + tn, PyBytes_AS_STRING(data), dn)
    return out


cdef inline Py_ssize_t _array_header(unsigned char* p, Py_ssize_t n) noexcept nogil:
    if n < 16:
        p[0] = 0x90 | <unsigned char>n
        return 1
    if n < 0x10000:
        p[0] = 0xDC
        _st16(p + 1, n)
        return 3
    p[0] = 0xDD
    _st32(p + 1, n)
    return 5


cdef bytes _set_payload(list encoded):
    cdef list unique = sorted(set(encoded))
    cdef Py_ssize_t total = 5, n = len(unique), pos, ln
    cdef bytes e, out
    cdef unsigned char* p
    for e in unique:
        total += PyBytes_GET_SIZE(e)
    cdef unsigned char head[5]
    pos = _array_header(head, n)
    out = _new(total - 5 + pos)
    p = _w(out)
    memcpy(p, head, pos)
    for e in unique:
        ln = PyBytes_GET_SIZE(e)
        memcpy(p + pos, PyBytes_AS_STRING(e), ln)
        pos += ln
    return out


cdef bytes _check_datetime_payload(bytes data):
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef const unsigned char* p = _r(data)
    cdef int flag = p[0] if n else -1
    cdef int64_t micros, offset
    if flag == 0 and n == 9:
        micros = <int64_t>_ld64(p + 1)
    elif (flag == 1 or flag == 2) and n >= 13 and (flag == 2) == (n > 13):
        micros = <int64_t>_ld64(p + 1)
        offset = <int32_t>_ld32(p + 9)
        if not -C_OFFSET_LIMIT < offset < C_OFFSET_LIMIT:
            raise _UV("datetime offset out of range")
        if flag == 2:
            if n - 13 > 255:
                raise _UV("datetime zone name longer than 255 bytes")
            try:
                PyUnicode_DecodeUTF8(<char*>p + 13, n - 13, "strict")
            except UnicodeDecodeError:
                raise _UV("datetime zone name is not UTF-8") from None
    else:
        raise _UV("malformed datetime extension")
    if not C_MICROS_MIN <= micros <= C_MICROS_MAX:
        raise _UV("datetime out of range")
    return data


cdef object _canonical_ext(object ext, int depth):
    code = ext.code
    cdef bytes data = bytes(ext.data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef const unsigned char* p = _r(data)
    if code == C_EXT_BIGINT:
        if not n:
            raise _UV("empty big int extension")
        value = int.from_bytes(data, "big", signed=True)
        if _INT_MIN <= value <= _INT_MAX:
            return value
        return _Ext(C_EXT_BIGINT, _bigint_payload(value))
    if code == C_EXT_DATETIME:
        return _Ext(C_EXT_DATETIME, _check_datetime_payload(data))
    if code == C_EXT_UUID:
        if n != 16:
            raise _UV("UUID extension must hold 16 bytes")
        return _Ext(C_EXT_UUID, data)
    if code == C_EXT_DECIMAL:
        try:
            text = str(_Decimal(data.decode("ascii")))
        except (UnicodeDecodeError, _InvalidOperation):
            raise _UV("malformed decimal extension") from None
        return _Ext(C_EXT_DECIMAL, text.encode("ascii"))
    if code == C_EXT_SET:
        if depth >= C_MAX_DEPTH:
            raise _UV(_TOO_DEEP)
        try:
            items = _raw_decode(data)
        except (_DecodeError, UnicodeDecodeError, RecursionError):
            raise _UV("malformed set extension") from None
        if type(items) is not list:
            raise _UV("set extension must hold an array")
        return _Ext(C_EXT_SET, _set_payload(_encode_elements(items, depth + 1)))
    if code == C_EXT_OPAQUE:
        if not n or n < 1 + p[0] or p[0] == 0:
            raise _UV("malformed opaque extension")
        try:
            PyUnicode_DecodeUTF8(<char*>p + 1, p[0], "strict")
        except UnicodeDecodeError:
            raise _UV("opaque type is not UTF-8") from None
        return _Ext(C_EXT_OPAQUE, data)
    raise _UV(f"unknown extension type {code}")


cdef list _encode_elements(object items, int depth):
    cdef list out = []
    cdef Py_ssize_t i = 0
    for item in items:
        try:
            out.append(_plain_encode(_norm(item, depth)))
        except _UV as e:
            raise e.under(f"{{set}}[{i}]") from None
        i += 1
    return out


cdef object _norm_leaf(object value, type t, int depth):
    """normalize() of everything but list, tuple and dict (faithful to the twin)."""
    cdef double d
    if t is str or t is bool or value is None:
        return value
    if t is int:
        if _int_fits(value):
            return value
        return _Ext(C_EXT_BIGINT, _bigint_payload(value))
    if t is float:
        d = PyFloat_AS_DOUBLE(value)
        return _NAN if d != d else value
    if t is bytes:
        return value
    if t is _EXT_TYPE:
        return _canonical_ext(value, depth)
    if t is _OPAQUE_TYPE:
        return _Ext(C_EXT_OPAQUE, _opaque_payload(value[0], value[1]))
    if t is _DATETIME:
        return _Ext(C_EXT_DATETIME, _datetime_payload(value))
    if t is _UUID:
        return _Ext(C_EXT_UUID, value.bytes)
    if t is _DECIMAL:
        return _Ext(C_EXT_DECIMAL, str(value).encode("ascii"))
    if t is set or t is frozenset:
        if depth >= C_MAX_DEPTH:
            raise _UV(_TOO_DEEP)
        return _Ext(C_EXT_SET, _set_payload(_encode_elements(value, depth + 1)))
    if t is bytearray or t is memoryview:
        return bytes(value)
    raise _UV(f"unsupported type {t.__module__}.{t.__qualname__}")


cdef object _norm(object value, int depth):
    """Faithful port of agentstate.codec.normalize (same result, same errors in the same order)."""
    cdef type t = type(value)
    cdef Py_ssize_t i
    cdef list out
    cdef dict out_map
    if t is list or t is tuple:
        if depth >= C_MAX_DEPTH:
            raise _UV(_TOO_DEEP)
        out = []
        i = 0
        for item in value:
            try:
                out.append(_norm(item, depth + 1))
            except _UV as e:
                raise e.under(f"[{i}]") from None
            i += 1
        return out
    if t is dict:
        if depth >= C_MAX_DEPTH:
            raise _UV(_TOO_DEEP)
        for key in value:
            if type(key) is not str:
                raise _UV(f"map key {key!r} is not a string")
        out_map = {}
        for key in sorted(value):
            try:
                out_map[key] = _norm(value[key], depth + 1)
            except _UV as e:
                raise e.under(f"[{key!r}]") from None
        return out_map
    return _norm_leaf(value, t, depth)


cdef object _cow(object value, int depth):
    """The value ready for the key-sorting msgspec encoder; containers are copied only if a member changes.

    Any exception means "ask the faithful walk" (the caller retries with _norm).
    """
    cdef type t = type(value)
    cdef double d
    cdef Py_ssize_t i, n, pos
    cdef PyObject* k
    cdef PyObject* v
    cdef object item, new, out
    if t is str:
        return value
    if t is int:
        if _int_fits(value):
            return value
        return _Ext(C_EXT_BIGINT, _bigint_payload(value))
    if t is dict:
        if depth >= C_MAX_DEPTH:
            raise _UV(_TOO_DEEP)
        out = None
        pos = 0
        while PyDict_Next(value, &pos, &k, &v):
            if type(<object>k) is not str:
                raise _UV("map key is not a string")
            item = <object>v
            new = _cow(item, depth + 1)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[<object>k] = new
        return value if out is None else out
    if t is list:
        if depth >= C_MAX_DEPTH:
            raise _UV(_TOO_DEEP)
        out = None
        n = PyList_GET_SIZE(value)
        for i in range(n):
            item = <object>PyList_GET_ITEM(value, i)
            new = _cow(item, depth + 1)
            if new is not item:
                if out is None:
                    out = list(value)
                out[i] = new
        return value if out is None else out
    if t is tuple:
        if depth >= C_MAX_DEPTH:
            raise _UV(_TOO_DEEP)
        out = None
        n = PyTuple_GET_SIZE(value)
        for i in range(n):
            item = <object>PyTuple_GET_ITEM(value, i)
            new = _cow(item, depth + 1)
            if new is not item:
                if out is None:
                    out = list(value)
                out[i] = new
        return value if out is None else out
    if t is float:
        d = PyFloat_AS_DOUBLE(value)
        return _NAN if d != d else value
    if t is bool or value is None or t is bytes or t is bytearray:
        return value
    return _norm_leaf(value, t, depth)


cdef bytes _enc(object value, int depth):
    """Canonical encoding of a (decoded or Python) value; raises the twin's errors."""
    try:
        return _sorted_encode(_cow(value, depth))
    except Exception:
        pass
    return _plain_encode(_norm(value, depth))


def normalize(value, int depth=0):
    """Return ``value`` as plain MessagePack-ready objects in canonical form (see agentstate.codec.normalize)."""
    return _norm(value, depth)


def encode(value):
    """Return the canonical encoding of a Python value (raises UnsupportedValue)."""
    try:
        return _sorted_encode(_cow(value, 0))
    except Exception:
        pass
    normal = _norm(value, 0)
    try:
        return _plain_encode(normal)
    except UnicodeEncodeError:
        raise _UV("string is not valid Unicode (lone surrogate)", _find_bad_string(value, "$")) from None


cdef str _find_bad_string(object value, str path):
    """Path of the first string (key or value) that is not valid Unicode (port of the twin's)."""
    cdef list kids
    if type(value) is str:
        return path
    if type(value) in (list, tuple):
        kids = [(f"[{i}]", v) for i, v in enumerate(value)]
    elif type(value) is dict:
        kids = []
        for k, v in value.items():
            try:
                k.encode()
            except UnicodeEncodeError:
                return path + f"[{k!r}]"
            kids.append((f"[{k!r}]", v))
    else:
        return path
    for step, item in kids:
        try:
            _plain_encode(_norm(item, 0))
        except UnicodeEncodeError:
            return _find_bad_string(item, path + step)
    return path


# ================================================================== values: canonical bytes scanner

cdef Py_ssize_t _scan_str(const unsigned char* p, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t end) noexcept nogil:
    if n > end - pos or not _utf8_ok(p + pos, n):
        return -1
    return pos + n


cdef Py_ssize_t _str_head(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* size) noexcept nogil:
    """Start of the data of the canonical str header at pos (its length in *size), or -1."""
    cdef unsigned char b
    cdef Py_ssize_t n
    if pos >= end:
        return -1
    b = p[pos]
    if 0xA0 <= b <= 0xBF:
        size[0] = b & 0x1F
        return pos + 1
    if b == 0xD9:
        if pos + 2 > end:
            return -1
        n = p[pos + 1]
        if n < 32:
            return -1
        size[0] = n
        return pos + 2
    if b == 0xDA:
        if pos + 3 > end:
            return -1
        n = <Py_ssize_t>_ld16(p + pos + 1)
        if n < 0x100:
            return -1
        size[0] = n
        return pos + 3
    if b == 0xDB:
        if pos + 5 > end:
            return -1
        n = <Py_ssize_t>_ld32(p + pos + 1)
        if n < 0x10000:
            return -1
        size[0] = n
        return pos + 5
    return -1


cdef Py_ssize_t _container_head(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                                Py_ssize_t* count, bint* is_map) noexcept nogil:
    """Start of the members of the canonical array/map header at pos, or -1."""
    cdef unsigned char b
    cdef Py_ssize_t n
    if pos >= end:
        return -1
    b = p[pos]
    if 0x90 <= b <= 0x9F or 0x80 <= b <= 0x8F:
        count[0] = b & 0x0F
        is_map[0] = b < 0x90
        return pos + 1
    if b == 0xDC or b == 0xDE:
        if pos + 3 > end:
            return -1
        n = <Py_ssize_t>_ld16(p + pos + 1)
        if n < 16:
            return -1
        count[0] = n
        is_map[0] = b == 0xDE
        return pos + 3
    if b == 0xDD or b == 0xDF:
        if pos + 5 > end:
            return -1
        n = <Py_ssize_t>_ld32(p + pos + 1)
        if n < 0x10000:
            return -1
        count[0] = n
        is_map[0] = b == 0xDF
        return pos + 5
    return -1


cdef Py_ssize_t _scan_ext(const unsigned char* p, Py_ssize_t d, Py_ssize_t size, int code,
                          Py_ssize_t end) noexcept nogil:
    """End of a canonical datetime/UUID/opaque extension payload at d, or -1 (other codes: -1)."""
    cdef int flag
    cdef int64_t micros, offset
    if size > end - d:
        return -1
    if code == C_EXT_UUID:
        return d + size if size == 16 else -1
    if code == C_EXT_OPAQUE:
        if size < 1 or p[d] == 0 or size < 1 + p[d] or not _utf8_ok(p + d + 1, p[d]):
            return -1
        return d + size
    if code == C_EXT_DATETIME:
        if size < 1:
            return -1
        flag = p[d]
        if flag == 0 and size == 9:
            micros = <int64_t>_ld64(p + d + 1)
        elif (flag == 1 or flag == 2) and size >= 13 and (flag == 2) == (size > 13):
            micros = <int64_t>_ld64(p + d + 1)
            offset = <int32_t>_ld32(p + d + 9)
            if not -C_OFFSET_LIMIT < offset < C_OFFSET_LIMIT:
                return -1
            if flag == 2 and (size - 13 > 255 or not _utf8_ok(p + d + 13, size - 13)):
                return -1
        else:
            return -1
        if micros < C_MICROS_MIN or micros > C_MICROS_MAX:
            return -1
        return d + size
    return -1


cdef Py_ssize_t _scan(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end, int depth) noexcept nogil:
    """End of the canonical encoding starting at pos, or -1 when it is not canonical (or not sure).

    Canonical means: what the twin's canonicalize() would return for it, byte for byte.
    """
    cdef unsigned char b
    cdef Py_ssize_t n, i, kpos, klen, pk, pklen, start
    cdef uint64_t u
    cdef bint is_map
    cdef int cmp
    if pos >= end:
        return -1
    b = p[pos]
    if b < 0x80 or b >= 0xE0:  # fixints
        return pos + 1
    if 0xA0 <= b <= 0xBF or b == 0xD9 or b == 0xDA or b == 0xDB:
        start = _str_head(p, pos, end, &n)
        if start < 0:
            return -1
        return _scan_str(p, start, n, end)
    if b <= 0x9F or b == 0xDC or b == 0xDD or b == 0xDE or b == 0xDF:
        if depth >= C_SCAN_DEPTH:
            return -1
        pos = _container_head(p, pos, end, &n, &is_map)
        if pos < 0 or n > end - pos:
            return -1
        if not is_map:
            for i in range(n):
                pos = _scan(p, pos, end, depth + 1)
                if pos < 0:
                    return -1
            return pos
        pk = -1
        pklen = 0
        for i in range(n):
            kpos = _str_head(p, pos, end, &klen)
            if kpos < 0 or _scan_str(p, kpos, klen, end) < 0:
                return -1
            if pk >= 0:
                cmp = memcmp(p + pk, p + kpos, pklen if pklen < klen else klen)
                if cmp > 0 or (cmp == 0 and pklen >= klen):
                    return -1  # keys out of order or repeated
            pk = kpos
            pklen = klen
            pos = _scan(p, kpos + klen, end, depth + 1)
            if pos < 0:
                return -1
        return pos
    if b == 0xC0 or b == 0xC2 or b == 0xC3:
        return pos + 1
    if b == 0xCC:
        if pos + 2 > end or p[pos + 1] < 0x80:
            return -1
        return pos + 2
    if b == 0xCD:
        if pos + 3 > end or _ld16(p + pos + 1) < 0x100:
            return -1
        return pos + 3
    if b == 0xCE:
        if pos + 5 > end or _ld32(p + pos + 1) < 0x10000:
            return -1
        return pos + 5
    if b == 0xCF:
        if pos + 9 > end or _ld64(p + pos + 1) < (<uint64_t>1 << 32):
            return -1
        return pos + 9
    if b == 0xD0:
        if pos + 2 > end or <int8_t>p[pos + 1] >= -32:
            return -1
        return pos + 2
    if b == 0xD1:
        if pos + 3 > end or <int16_t>_ld16(p + pos + 1) >= -128:
            return -1
        return pos + 3
    if b == 0xD2:
        if pos + 5 > end or <int32_t>_ld32(p + pos + 1) >= -32768:
            return -1
        return pos + 5
    if b == 0xD3:
        if pos + 9 > end or <int64_t>_ld64(p + pos + 1) >= -(<int64_t>1 << 31):
            return -1
        return pos + 9
    if b == 0xCB:
        if pos + 9 > end:
            return -1
        u = _ld64(p + pos + 1)
        if (u & <uint64_t>0x7FF0000000000000) == <uint64_t>0x7FF0000000000000 \
                and (u & <uint64_t>0x000FFFFFFFFFFFFF) and u != _NAN_BITS:
            return -1  # a NaN other than the one canonical NaN
        return pos + 9
    if b == 0xC4:
        if pos + 2 > end:
            return -1
        n = p[pos + 1]
        return pos + 2 + n if n <= end - pos - 2 else -1
    if b == 0xC5:
        if pos + 3 > end:
            return -1
        n = <Py_ssize_t>_ld16(p + pos + 1)
        return pos + 3 + n if n >= 0x100 and n <= end - pos - 3 else -1
    if b == 0xC6:
        if pos + 5 > end:
            return -1
        n = <Py_ssize_t>_ld32(p + pos + 1)
        return pos + 5 + n if n >= 0x10000 and n <= end - pos - 5 else -1
    if 0xD4 <= b <= 0xD8:  # fixext 1..16
        if pos + 2 > end:
            return -1
        return _scan_ext(p, pos + 2, 1 << (b - 0xD4), p[pos + 1], end)
    if b == 0xC7:
        if pos + 3 > end:
            return -1
        n = p[pos + 1]
        if n == 1 or n == 2 or n == 4 or n == 8 or n == 16:
            return -1
        return _scan_ext(p, pos + 3, n, p[pos + 2], end)
    if b == 0xC8:
        if pos + 4 > end:
            return -1
        n = <Py_ssize_t>_ld16(p + pos + 1)
        if n < 0x100:
            return -1
        return _scan_ext(p, pos + 4, n, p[pos + 3], end)
    if b == 0xC9:
        if pos + 6 > end:
            return -1
        n = <Py_ssize_t>_ld32(p + pos + 1)
        if n < 0x10000:
            return -1
        return _scan_ext(p, pos + 6, n, p[pos + 5], end)
    return -1  # 0xC1, float32 (0xCA) and anything else: let the decoder decide


cdef bint _is_canonical(bytes data) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef const unsigned char* p = _r(data)
    cdef Py_ssize_t end
    if n == 0:
        return False
    if n < C_SCAN_NOGIL:
        return _scan(p, 0, n, 0) == n
    with nogil:
        end = _scan(p, 0, n, 0)
    return end == n


cdef object _decode(object data):
    try:
        return _raw_decode(data)
    except RecursionError:
        raise _UV(_TOO_DEEP) from None
    except (_DecodeError, UnicodeDecodeError) as e:  # msgspec raises the latter for bad UTF-8
        raise _UV(_codec.decode_failure(e)) from None


def canonicalize(data):
    """Return the canonical encoding of any valid encoded value (raises UnsupportedValue)."""
    if type(data) is bytes and _is_canonical(<bytes>data):
        return data
    return _enc(_decode(data), 0)


cdef object _decompose_canonical(bytes data):
    """decompose() of canonical bytes by slicing, or None when the bytes are not canonical."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef const unsigned char* p = _r(data)
    cdef Py_ssize_t pos, count, i, e, kpos, klen, pk = -1, pklen = 0
    cdef bint is_map
    cdef int cmp
    cdef list out
    if n == 0:
        return None
    pos = _container_head(p, 0, n, &count, &is_map)
    if pos < 0:
        if _scan(p, 0, n, 0) == n:
            return (KIND_SCALAR, data)
        return None
    if count > n - pos:
        return None
    out = []
    for i in range(count):
        _tick()
        if is_map:
            kpos = _str_head(p, pos, n, &klen)
            if kpos < 0 or _scan_str(p, kpos, klen, n) < 0:
                return None
            if pk >= 0:
                cmp = memcmp(p + pk, p + kpos, pklen if pklen < klen else klen)
                if cmp > 0 or (cmp == 0 and pklen >= klen):
                    return None
            pk = kpos
            pklen = klen
            pos = kpos + klen
        e = _scan(p, pos, n, 1)
        if e < 0:
            return None
        if is_map:
            out.append((PyUnicode_DecodeUTF8(<char*>p + kpos, klen, NULL), _slice(data, pos, e - pos)))
        else:
            out.append(_slice(data, pos, e - pos))
        pos = e
    if pos != n:
        return None
    return (KIND_MAP if is_map else KIND_LIST, out)


def decompose(data):
    """Split an encoded value into what the trees store (see the twin's docstring). Raises UnsupportedValue."""
    cdef list out
    cdef Py_ssize_t i
    if type(data) is bytes:
        fast = _decompose_canonical(<bytes>data)
        if fast is not None:
            return fast
    value = _decode(data)
    t = type(value)
    if t is list:
        out = []
        i = 0
        for item in value:
            try:
                out.append(_enc(item, 1))
            except _UV as e:
                raise e.under(f"[{i}]") from None
            i += 1
        return KIND_LIST, out
    if t is dict:
        for key in value:
            if type(key) is not str:
                raise _UV(f"map key {key!r} is not a string")
        out = []
        for key in sorted(value):
            try:
                out.append((key, _enc(value[key], 1)))
            except _UV as e:
                raise e.under(f"[{key!r}]") from None
        return KIND_MAP, out
    return KIND_SCALAR, _enc(value, 0)


def encode_opaque(type_, data):
    """Canonical encoding of an opaque value (extension 6)."""
    return _plain_encode(_Ext(C_EXT_OPAQUE, _opaque_payload(type_, data)))


def opaque_parts(encoding):
    """Return (type, data) when ``encoding`` is an opaque value, else None."""
    cdef bytes enc = _b(encoding)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(enc), size, start
    cdef const unsigned char* p = _r(enc)
    cdef int head, code, tlen
    if n < 3:
        return None
    head = p[0]
    if head == 0xC7:
        size, code, start = p[1], p[2], 3
    elif head == 0xC8:
        if n < 4:
            return None
        size, code, start = <Py_ssize_t>_ld16(p + 1), p[3], 4
    elif head == 0xC9:
        if n < 6:
            return None
        size, code, start = <Py_ssize_t>_ld32(p + 1), p[5], 6
    elif 0xD4 <= head <= 0xD8:
        size, code, start = 1 << (head - 0xD4), p[1], 2
    else:
        return None
    if code != C_EXT_OPAQUE or start + size != n or size == 0:
        return None
    tlen = p[start]
    return enc[start + 1:start + 1 + tlen].decode(), enc[start + 1 + tlen:]


# ================================================================== chunking

cdef inline Py_ssize_t _gear_roll(const unsigned char* s, Py_ssize_t i, Py_ssize_t stop, uint64_t* hp,
                                   uint64_t mask) noexcept nogil:
    """Roll the gear hash h = (h << 1) + GEAR[byte] over s[i:stop].

    Returns the offset just after the first byte where ``h & mask == 0`` (a cut),
    or -1 with *hp updated. Four bytes per step: h4 is computed from h directly
    (h << 4 plus a sum of the four gear values that does not depend on h), so
    the loop-carried chain is one shift and one add per four bytes instead of
    per byte; h1..h3 only feed the cut test. Same result as the byte loop.
    """
    cdef uint64_t h = hp[0], g0, g1, g2, g3, t, h1, h2, h3, h4
    while i + 4 <= stop:
        g0 = _GEAR_C[s[i]]
        g1 = _GEAR_C[s[i + 1]]
        g2 = _GEAR_C[s[i + 2]]
        g3 = _GEAR_C[s[i + 3]]
        t = (g0 << 1) + g1
        h1 = (h << 1) + g0
        h2 = (h << 2) + t
        h3 = (h2 << 1) + g2
        h4 = (h << 4) + (t << 2) + (g2 << 1) + g3
        if ((h1 & mask) == 0) | ((h2 & mask) == 0) | ((h3 & mask) == 0) | ((h4 & mask) == 0):
            if (h1 & mask) == 0:
                return i + 1
            if (h2 & mask) == 0:
                return i + 2
            if (h3 & mask) == 0:
                return i + 3
            return i + 4
        h = h4
        i += 4
    while i < stop:
        h = (h << 1) + _GEAR_C[s[i]]
        i += 1
        if (h & mask) == 0:
            return i
    hp[0] = h
    return -1


cdef Py_ssize_t _cdc(const unsigned char* data, Py_ssize_t n, Py_ssize_t* cuts) noexcept nogil:
    """Write the chunk end offsets of data[:n] to cuts; return how many."""
    cdef Py_ssize_t count = 0, start = 0, remaining, end, normal, cut
    cdef uint64_t h
    while start < n:
        remaining = n - start
        if remaining <= C_CDC_MIN:
            cuts[count] = n
            count += 1
            break
        end = remaining if remaining < C_CDC_MAX else C_CDC_MAX
        normal = end if end < C_CDC_AVG else C_CDC_AVG
        h = 0
        # stricter mask up to the average size, looser after it
        cut = _gear_roll(data + start, C_CDC_MIN, normal, &h, C_MASK_SMALL)
        if cut < 0:
            cut = _gear_roll(data + start, normal, end, &h, C_MASK_LARGE)
            if cut < 0:
                cut = end
        start += cut
        cuts[count] = start
        count += 1
    return count


cdef Py_ssize_t* _cut(bytes data, Py_ssize_t* count) except NULL:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef const unsigned char* p = _r(data)
    cdef Py_ssize_t* cuts = <Py_ssize_t*>malloc((n // C_CDC_MIN + 2) * sizeof(Py_ssize_t))
    if cuts == NULL:
        raise MemoryError()
    if n > C_CHUNK_THRESHOLD:
        with nogil:
            count[0] = _cdc(p, n, cuts)
    else:
        count[0] = _cdc(p, n, cuts)
    return cuts


def cdc_cut_points(data):
    """End offsets of the content-defined chunks of ``data`` (FastCDC-style gear hash)."""
    cdef bytes buf = _b(data)
    cdef Py_ssize_t count, i
    cdef Py_ssize_t* cuts = _cut(buf, &count)
    try:
        return [cuts[i] for i in range(count)]
    finally:
        free(cuts)


cdef bytes _value_node(object encoding, object nodes, _Hasher hs):
    cdef bytes enc = _b(encoding)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(enc)
    cdef bytes node
    cdef unsigned char* p
    if n <= C_CHUNK_THRESHOLD:
        node = _new(n + 1)
        p = _w(node)
        p[0] = C_TAG_VALUE
        memcpy(p + 1, PyBytes_AS_STRING(enc), n)
        return _emit(nodes, node, hs)
    return _chunked_value_node(enc, nodes, hs)


cdef bytes _chunked_value_node(bytes enc, object nodes, _Hasher hs):
    cdef Py_ssize_t n = PyBytes_GET_SIZE(enc), count, i, prev = 0, cut
    cdef Py_ssize_t* cuts = _cut(enc, &count)
    cdef bytes top, node, h
    cdef unsigned char* q
    cdef unsigned char* p
    if hs is None:
        hs = _Hasher()
    try:
        top = _new(13 + C_HASH * count)
        q = _w(top)
        q[0] = C_TAG_CHUNKED
        _st64(q + 1, <uint64_t>n)
        _st32(q + 9, <uint64_t>count)
        for i in range(count):
            cut = cuts[i]
            node = _new(cut - prev + 1)
            p = _w(node)
            p[0] = C_TAG_CHUNK
            memcpy(p + 1, PyBytes_AS_STRING(enc) + prev, cut - prev)
            h = _emit(nodes, node, hs)
            memcpy(q + 13 + C_HASH * i, PyBytes_AS_STRING(h), C_HASH)
            prev = cut
    finally:
        free(cuts)
    return _emit(nodes, top, hs)


def value_node(encoding, nodes):
    """Append the node(s) storing ``encoding`` to ``nodes``; return the value's hash."""
    return _value_node(encoding, nodes, None)


# ================================================================== lists

cdef struct ListState:
    uint64_t n
    int npeaks
    int level[64]
    unsigned char peak[64][32]
    int ntail
    unsigned char tail[8 * 32]


cdef int _list_parse(ListState* st, object root) except -1:
    cdef bytes node = _b(root)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(node), pos
    cdef const unsigned char* p = _r(node)
    cdef uint64_t m
    cdef int k, peaks = 0
    if n == 0 or p[0] != C_TAG_LIST:
        raise _Corrupt("not a list root")
    if n < 9:
        raise _Corrupt("list root length mismatch")
    st.n = _ld64(p + 1)
    m = st.n // C_LEAF_ITEMS
    st.ntail = <int>(st.n % C_LEAF_ITEMS)
    for k in range(64):
        if (m >> k) & 1:
            peaks += 1
    if n != 9 + C_HASH * (peaks + st.ntail):
        raise _Corrupt("list root length mismatch")
    st.npeaks = 0
    pos = 9
    for k in range(63, -1, -1):
        if (m >> k) & 1:
            st.level[st.npeaks] = k
            memcpy(st.peak[st.npeaks], p + pos, C_HASH)
            st.npeaks += 1
            pos += C_HASH
    memcpy(st.tail, p + pos, C_HASH * st.ntail)
    return 0


cdef inline void _list_empty(ListState* st) noexcept:
    st.n = 0
    st.npeaks = 0
    st.ntail = 0


cdef int _list_push(ListState* st, const unsigned char* h, object nodes, _Hasher hs) except -1:
    cdef bytes node, cur
    cdef unsigned char* p
    cdef int level
    memcpy(st.tail + C_HASH * st.ntail, h, C_HASH)
    st.ntail += 1
    st.n += 1
    if st.ntail < C_LEAF_ITEMS:
        return 0
    node = _new(1 + C_HASH * C_LEAF_ITEMS)
    p = _w(node)
    p[0] = C_TAG_LEAF
    memcpy(p + 1, st.tail, C_HASH * C_LEAF_ITEMS)
    cur = _emit(nodes, node, hs)
    st.ntail = 0
    level = 0
    while st.npeaks and st.level[st.npeaks - 1] == level:
        node = _new(1 + 2 * C_HASH)
        p = _w(node)
        p[0] = C_TAG_INNER
        memcpy(p + 1, st.peak[st.npeaks - 1], C_HASH)
        memcpy(p + 1 + C_HASH, PyBytes_AS_STRING(cur), C_HASH)
        cur = _emit(nodes, node, hs)
        st.npeaks -= 1
        level += 1
    st.level[st.npeaks] = level
    memcpy(st.peak[st.npeaks], PyBytes_AS_STRING(cur), C_HASH)
    st.npeaks += 1
    return 0


cdef bytes _list_finish(ListState* st, object nodes, _Hasher hs):
    cdef bytes node = _new(9 + C_HASH * (st.npeaks + st.ntail))
    cdef unsigned char* p = _w(node)
    cdef int i
    p[0] = C_TAG_LIST
    _st64(p + 1, st.n)
    for i in range(st.npeaks):
        memcpy(p + 9 + C_HASH * i, st.peak[i], C_HASH)
    memcpy(p + 9 + C_HASH * st.npeaks, st.tail, C_HASH * st.ntail)
    return _emit(nodes, node, hs)


cdef inline bytes _hash_arg(object h, str what):
    cdef Py_ssize_t n
    if type(h) is bytes:
        n = PyBytes_GET_SIZE(h)
        if n == C_HASH:
            return <bytes>h
    else:
        n = len(h)
        if n == C_HASH:
            return _to_bytes(h)
    raise ValueError(f"{what} hash must be {C_HASH} bytes, not {n}")


def list_append(root, item_hashes, nodes):
    """Append items to the list whose root node is ``root`` (None: empty list).

    New nodes (the new root last) are appended to ``nodes``; returns the new root hash.
    """
    cdef ListState st
    cdef bytes h
    cdef _Hasher hs = None
    if root is None:
        _list_empty(&st)
    else:
        _list_parse(&st, root)
    if type(item_hashes) is not list and type(item_hashes) is not tuple:
        item_hashes = list(item_hashes)
    if len(item_hashes) + st.ntail >= C_LEAF_ITEMS:
        hs = _Hasher()
    for item in item_hashes:
        h = _hash_arg(item, "item")
        _list_push(&st, _r(h), nodes, hs)
    return _list_finish(&st, nodes, hs)


def list_length(root):
    cdef bytes node = _b(root)
    return _be_slice(_r(node), PyBytes_GET_SIZE(node), 1, 9)


def build_list(encodings, nodes, root=None):
    """Store each item encoding as a value node and append them to ``root`` (None: new list)."""
    cdef ListState st
    cdef list hashes = []
    cdef bytes h
    cdef _Hasher hs = _Hasher()
    for e in encodings:
        hashes.append(_value_node(e, nodes, hs))
    if root is None:
        _list_empty(&st)
    else:
        _list_parse(&st, root)
    for h in hashes:
        _list_push(&st, _r(h), nodes, hs)
    return _list_finish(&st, nodes, hs)


# ================================================================== maps

cdef struct MapItem:
    const unsigned char* key
    Py_ssize_t klen
    const unsigned char* value
    unsigned char khash[32]


cdef bytes _map_leaf(MapItem* items, Py_ssize_t count, object nodes, _Hasher hs):
    cdef Py_ssize_t size = 5, i, pos = 5
    cdef bytes node
    cdef unsigned char* p
    for i in range(count):
        size += 2 + items[i].klen + C_HASH
    node = _new(size)
    p = _w(node)
    p[0] = C_TAG_MAP
    _st32(p + 1, <uint64_t>count)
    for i in range(count):
        _st16(p + pos, <uint64_t>items[i].klen)
        memcpy(p + pos + 2, items[i].key, items[i].klen)
        pos += 2 + items[i].klen
        memcpy(p + pos, items[i].value, C_HASH)
        pos += C_HASH
    return _emit(nodes, node, hs)


cdef inline int _nibble(const unsigned char* kh, int depth) noexcept nogil:
    cdef unsigned char b = kh[depth >> 1]
    return (b >> 4) if not (depth & 1) else (b & 15)


cdef bytes _map_build_c(MapItem* items, Py_ssize_t count, int depth, object nodes, _Hasher hs):
    """items: sorted by key bytes, key hashes filled in when count > MAP_LEAF_MAX."""
    cdef Py_ssize_t counts[16]
    cdef Py_ssize_t offsets[16]
    cdef Py_ssize_t i, off
    cdef int nib, nchildren = 0, bitmap = 0
    cdef MapItem* tmp
    cdef unsigned char child_hashes[16 * 32]
    cdef bytes node, h
    cdef unsigned char* p
    if count <= C_MAP_LEAF_MAX or depth >= 2 * C_HASH:
        return _map_leaf(items, count, nodes, hs)
    for nib in range(16):
        counts[nib] = 0
    for i in range(count):
        counts[_nibble(items[i].khash, depth)] += 1
    off = 0
    for nib in range(16):
        offsets[nib] = off
        off += counts[nib]
    tmp = <MapItem*>malloc(count * sizeof(MapItem))
    if tmp == NULL:
        raise MemoryError()
    for i in range(count):  # stable: each group keeps key order
        nib = _nibble(items[i].khash, depth)
        tmp[offsets[nib]] = items[i]
        offsets[nib] += 1
    memcpy(items, tmp, count * sizeof(MapItem))
    free(tmp)
    off = 0
    for nib in range(16):
        if counts[nib]:
            bitmap |= 1 << nib
            h = _map_build_c(items + off, counts[nib], depth + 1, nodes, hs)
            memcpy(child_hashes + C_HASH * nchildren, PyBytes_AS_STRING(h), C_HASH)
            nchildren += 1
            off += counts[nib]
    node = _new(11 + C_HASH * nchildren)
    p = _w(node)
    p[0] = C_TAG_MAP_INNER
    _st64(p + 1, <uint64_t>count)
    _st16(p + 9, <uint64_t>bitmap)
    memcpy(p + 11, child_hashes, C_HASH * nchildren)
    return _emit(nodes, node, hs)


cdef bytes _map_build_items(list items, int depth, object nodes, bint hashed, _Hasher hs):
    """Build a (sub)map from a sorted list of (key bytes, key hash or None, value hash bytes)."""
    cdef Py_ssize_t count = len(items), i
    cdef MapItem* arr
    cdef bytes k, v, kh
    cdef bint need_hash = count > C_MAP_LEAF_MAX and depth < 2 * C_HASH
    arr = <MapItem*>malloc((count if count else 1) * sizeof(MapItem))
    if arr == NULL:
        raise MemoryError()
    try:
        for i in range(count):
            _tick()
            item = <tuple>items[i]
            k = <bytes>item[0]
            v = <bytes>item[2]
            arr[i].key = _r(k)
            arr[i].klen = PyBytes_GET_SIZE(k)
            arr[i].value = _r(v)
            if need_hash:
                kh = <bytes>item[1] if hashed else _hash(k, hs)
                memcpy(arr[i].khash, _r(kh), C_HASH)
        return _map_build_c(arr, count, depth, nodes, hs)
    finally:
        free(arr)


cdef bytes _check_key(object key):
    cdef bytes kb = key.encode()
    if PyBytes_GET_SIZE(kb) > 0xFFFF:
        raise _UV("map key longer than 65535 bytes")
    return kb


cdef bytes _map_build_from(object pairs, object nodes, _Hasher hs):
    cdef dict merged = {}
    for k, v in pairs:
        _tick()
        merged[_check_key(k)] = _hash_arg(v, "value")
    return _map_build_items([(k, None, v) for k, v in sorted(merged.items())], 0, nodes, False, hs)


def map_build(pairs, nodes):
    """Build a map from (key, value hash) pairs; returns the root hash (a repeated key keeps its last value)."""
    return _map_build_from(pairs, nodes, _Hasher())


cdef list _parse_map_leaf(bytes node):
    cdef Py_ssize_t n = PyBytes_GET_SIZE(node), pos = 5, klen
    cdef const unsigned char* p = _r(node)
    cdef uint64_t count, j
    cdef list out = []
    if n < 5:
        raise _Corrupt("map leaf length mismatch")
    count = _ld32(p + 1)
    for j in range(count):
        if pos + 2 > n:
            raise _Corrupt("map leaf length mismatch")
        klen = <Py_ssize_t>_ld16(p + pos)
        if pos + 2 + klen + C_HASH > n:
            raise _Corrupt("map leaf length mismatch")
        out.append((_slice(node, pos + 2, klen), _slice(node, pos + 2 + klen, C_HASH)))
        pos += 2 + klen + C_HASH
    if pos != n:
        raise _Corrupt("map leaf length mismatch")
    return out


cdef dict _parse_map_inner(bytes node, uint64_t* total):
    cdef Py_ssize_t n = PyBytes_GET_SIZE(node), pos = 11
    cdef const unsigned char* p = _r(node)
    cdef int nib, bitmap, bits = 0
    cdef dict children = {}
    if n < 11:
        raise _Corrupt("map inner node length mismatch")
    bitmap = <int>_ld16(p + 9)
    for nib in range(16):
        if (bitmap >> nib) & 1:
            bits += 1
    if n != 11 + C_HASH * bits:
        raise _Corrupt("map inner node length mismatch")
    total[0] = _ld64(p + 1)
    for nib in range(16):
        if (bitmap >> nib) & 1:
            children[nib] = _slice(node, pos, C_HASH)
            pos += C_HASH
    return children


cdef int _map_collect(bytes node, object fetch, list out) except -1:
    cdef uint64_t total
    if PyBytes_GET_SIZE(node) == 0:
        raise IndexError("index out of range")
    if _r(node)[0] == C_TAG_MAP:
        out.extend(_parse_map_leaf(node))
    elif _r(node)[0] == C_TAG_MAP_INNER:
        for child in _parse_map_inner(node, &total).values():
            _map_collect(_fetch(fetch, child), fetch, out)
    else:
        raise _Corrupt("not a map node")
    return 0


cdef uint64_t _map_count(bytes root) except? 0:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(root)
    cdef const unsigned char* p = _r(root)
    if n == 0:
        raise IndexError("index out of range")
    if p[0] == C_TAG_MAP:
        return _be_slice(p, n, 1, 5)
    return _be_slice(p, n, 1, 9)


def map_count(root):
    return _map_count(_b(root))


def map_update(root_hash, sets, deletes, fetch, nodes):
    """Set and delete keys of a map; returns the new root hash (deletes apply first)."""
    cdef dict changes = {}
    for key in deletes:
        changes[_check_key(key)] = None
    for key, h in sets:
        changes[_check_key(key)] = _hash_arg(h, "value")
    if not changes:
        return root_hash
    cdef _Hasher hs = _Hasher()
    items = sorted([(k, hs.hash(k), v) for k, v in changes.items()])
    return _map_update(root_hash, 0, items, fetch, nodes, hs, len(nodes))[0]


cdef class _FreshFetch:
    """fetch() that first looks among the nodes an update made (they are not in the store yet)."""
    cdef dict fresh
    cdef object fetch

    def __init__(self, dict fresh, fetch):
        self.fresh = fresh
        self.fetch = fetch

    def __call__(self, h):
        node = self.fresh.get(h)
        return self.fetch(h) if node is None else node


cdef tuple _map_update(object node_hash, int depth, list changes, object fetch, object nodes, _Hasher hs,
                       Py_ssize_t start):
    """``nodes[start:]`` are the nodes this update made (not in the store yet)."""
    cdef bytes node = _fetch(fetch, node_hash)
    cdef uint64_t total64
    cdef Py_ssize_t total, old, new_count, n
    cdef dict merged, children, groups
    cdef list items, raw, group, added
    cdef bytes out, kh
    cdef unsigned char* p
    cdef int nib, bitmap, i
    if PyBytes_GET_SIZE(node) == 0:
        raise IndexError("index out of range")
    if _r(node)[0] == C_TAG_MAP:
        merged = dict(_parse_map_leaf(node))
        for key, _, value in changes:
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        items = [(k, None, v) for k, v in sorted(merged.items())]
        return _map_build_items(items, depth, nodes, False, hs), len(items)
    if _r(node)[0] != C_TAG_MAP_INNER:
        raise _Corrupt("not a map node")
    children = _parse_map_inner(node, &total64)
    total = <Py_ssize_t>total64
    groups = {}
    for item in changes:
        kh = <bytes>item[1]
        nib = _nibble(_r(kh), depth)
        group = groups.get(nib)
        if group is None:
            groups[nib] = [item]
        else:
            group.append(item)
    for nib_obj, group in groups.items():
        child = children.get(nib_obj)
        if child is None:
            added = [item for item in group if item[2] is not None]
            if added:
                children[nib_obj] = _map_build_items(added, depth + 1, nodes, True, hs)
                total += len(added)
            continue
        old = <Py_ssize_t>_map_count(_fetch(fetch, child))
        new_child, new_count = _map_update(child, depth + 1, group, fetch, nodes, hs, start)
        total += new_count - old
        if new_count:
            children[nib_obj] = new_child
        else:
            del children[nib_obj]
    if total <= C_MAP_LEAF_MAX:
        # Collapse to one leaf; children rebuilt by this update are only in ``nodes`` so far.
        fresh_fetch = _FreshFetch(dict(nodes[start:]), fetch)
        raw = []
        for child in children.values():
            _map_collect(_fetch(fresh_fetch, child), fresh_fetch, raw)
        raw.sort()
        # at most MAP_LEAF_MAX entries: always one leaf
        return _map_build_items([(k, None, v) for k, v in raw], depth, nodes, False, hs), total
    bitmap = 0
    for nib_obj in children:
        bitmap |= 1 << <int>nib_obj
    n = len(children)
    out = _new(11 + C_HASH * n)
    p = _w(out)
    p[0] = C_TAG_MAP_INNER
    _st64(p + 1, <uint64_t>total)
    _st16(p + 9, <uint64_t>bitmap)
    i = 0
    for nib_obj in sorted(children):
        memcpy(p + 11 + C_HASH * i, PyBytes_AS_STRING(<bytes>children[nib_obj]), C_HASH)
        i += 1
    return _emit(nodes, out, hs), total


# ================================================================== composite builders

def build_map(pairs, nodes):
    """Store each (key, encoding) pair's value and build the map."""
    cdef _Hasher hs = _Hasher()
    return _map_build_from([(k, _value_node(e, nodes, hs)) for k, e in pairs], nodes, hs)


# ================================================================== child references (canonical and stored nodes)
#
# Ports of the twin's _ref_layout / _map_leaf_refs / _swap_refs. A node's
# layout is checked against its length before any reference is converted.

cdef inline Py_ssize_t _popcount(uint64_t v) noexcept nogil:
    cdef Py_ssize_t c = 0
    while v:
        v &= v - 1
        c += 1
    return c


cdef int _ref_layout(const unsigned char* p, Py_ssize_t n, Py_ssize_t size, Py_ssize_t* start,
                     Py_ssize_t* count) except -1:
    """First reference offset and reference count of a fixed-layout node (n >= 1; not a map leaf).

    Raises CorruptNode for an unknown tag or when the node's length does not
    match its references (``size`` bytes each).
    """
    cdef int tag = p[0]
    cdef uint64_t v
    if tag == C_TAG_LIST:
        v = _be_slice(p, n, 1, 9)
        start[0] = 9
        count[0] = _popcount(v // C_LEAF_ITEMS) + <Py_ssize_t>(v % C_LEAF_ITEMS)
    elif tag == C_TAG_LEAF:
        start[0] = 1
        count[0] = C_LEAF_ITEMS
    elif tag == C_TAG_INNER:
        start[0] = 1
        count[0] = 2
    elif tag == C_TAG_CHUNKED:
        start[0] = 13
        count[0] = <Py_ssize_t>_be_slice(p, n, 9, 13)
    elif tag == C_TAG_MAP_INNER:
        start[0] = 11
        count[0] = _popcount(_be_slice(p, n, 9, 11))
    elif tag == C_TAG_VALUE or tag == C_TAG_CHUNK:
        start[0] = n
        count[0] = 0
    else:
        raise _Corrupt(f"unknown node tag {tag:#x}")
    if start[0] + count[0] * size != n:
        raise _Corrupt(f"node {chr(tag)!r} length mismatch")
    return 0


cdef Py_ssize_t _map_leaf_count(const unsigned char* p, Py_ssize_t n, Py_ssize_t size) except -1:
    """Entry count of a map leaf with ``size``-byte references; CorruptNode unless the entries fill it exactly."""
    cdef uint64_t count = _be_slice(p, n, 1, 5), j
    cdef Py_ssize_t pos = 5
    for j in range(count):
        pos += 2 + <Py_ssize_t>_be_slice(p, n, pos, pos + 2) + size
        if pos > n:  # a damaged count: stop before looping over garbage
            break
    if pos != n:
        raise _Corrupt("map leaf length mismatch")
    return <Py_ssize_t>count


cdef object _swap_refs(object node_obj, Py_ssize_t old, Py_ssize_t new, object convert,
                       _NodeWriter writer=None):
    """Rewrite every ``old``-byte reference of a node with ``convert`` (port of the twin's _swap_refs).

    ``convert`` None: return the references themselves, as a list (unless ``writer`` is given: then each
    reference is converted by ``writer.resolve``, with no Python call in between).
    """
    cdef bytes node = _b(node_obj), out, r
    cdef Py_ssize_t n = PyBytes_GET_SIZE(node), start = 0, count, i, pos, off, size, seg
    cdef const unsigned char* p = _r(node)
    cdef unsigned char* q
    cdef bint is_map
    cdef list refs
    if n == 0:
        raise _Corrupt("empty node")
    is_map = p[0] == C_TAG_MAP
    refs = []
    if is_map:
        count = _map_leaf_count(p, n, old)
        pos = 5
        for i in range(count):
            off = pos + 2 + <Py_ssize_t>_ld16(p + pos)
            refs.append(PyBytes_FromStringAndSize(<char*>p + off, old))
            pos = off + old
    else:
        _ref_layout(p, n, old, &start, &count)
        for i in range(count):
            refs.append(PyBytes_FromStringAndSize(<char*>p + start + old * i, old))
    if convert is None and writer is None:
        return refs
    if count == 0:
        return node
    # convert every reference (in order), then join like b"".join: any bytes-like result, of any length
    size = n - old * count
    for i in range(count):
        refs[i] = writer.resolve(<bytes>refs[i]) if writer is not None else convert(refs[i])
    for i in range(count):
        r = _b(refs[i])
        refs[i] = r
        size += PyBytes_GET_SIZE(r)
    out = _new(size)
    q = _w(out)
    if is_map:
        pos = 5
        seg = 0  # bytes of ``node`` not yet copied start at ``seg``
        off = 0  # write position in ``out``
        for i in range(count):
            pos = pos + 2 + <Py_ssize_t>_ld16(p + pos)  # offset of reference i
            memcpy(q + off, p + seg, pos - seg)
            off += pos - seg
            r = <bytes>refs[i]
            memcpy(q + off, PyBytes_AS_STRING(r), PyBytes_GET_SIZE(r))
            off += PyBytes_GET_SIZE(r)
            pos += old
            seg = pos
    else:
        memcpy(q, p, start)
        off = start
        for i in range(count):
            r = <bytes>refs[i]
            memcpy(q + off, PyBytes_AS_STRING(r), PyBytes_GET_SIZE(r))
            off += PyBytes_GET_SIZE(r)
    return out


def children(node):
    """Hashes a canonical node refers to."""
    return _swap_refs(node, C_HASH, C_HASH, None)


def stored_node(node, id_of):
    """The stored form of a canonical node (``id_of`` maps a child hash to its id)."""
    return _swap_refs(node, C_HASH, C_ID, id_of)


def canonical_node(stored, hash_of):
    """The canonical node of a stored one (``hash_of`` maps a child id to its hash)."""
    cdef bytes b = _b(stored)
    if PyBytes_GET_SIZE(b) and _r(b)[0] == C_TAG_PACKED:
        return b"v" + _unpacked(_compression.unpack, b)  # from the record itself, never the read cache
    if PyBytes_GET_SIZE(b) and _r(b)[0] == C_TAG_SEALED:
        raise _Corrupt("a sealed node: open its record first (encryption.plain)")
    return _swap_refs(b, C_ID, C_HASH, hash_of)


cdef bytes _unpacked(object unpack, bytes data):
    """``unpack(data)``: the encoding of a compressed (``z``) value node; CorruptNode when it does not unpack."""
    try:
        return unpack(data)
    except ValueError as e:
        raise _Corrupt(str(e)) from None


def stored_children(stored):
    """Ids a stored node refers to."""
    cdef bytes b = _b(stored)
    if PyBytes_GET_SIZE(b) and _r(b)[0] == C_TAG_PACKED:  # a compressed value: no references
        if PyBytes_GET_SIZE(b) < 1 + C_ID:
            raise _Corrupt("compressed node length mismatch")
        return []
    if PyBytes_GET_SIZE(b) and _r(b)[0] == C_TAG_SEALED:  # a sealed value or chunk: no references
        return []
    return _swap_refs(b, C_ID, C_ID, None)


# ================================================================== stored records: reads
#
# The server's read path: records (hash + stored node) fetched by id through
# a Python ``fetch(id) -> record`` callback, once per record. Ids are taken
# from the records' buffers in C; the only Python objects made per list item
# are its id, the fetched record and the encoding returned.

cdef inline bytes _id_at(const unsigned char* p):
    return PyBytes_FromStringAndSize(<char*>p, C_ID)


cdef bytes _stored_enc(bytes rec, object fetch):
    """The value encoding held by a value record (port of the twin's stored_encoding)."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec), i, size, pos, cn
    cdef const unsigned char* p = _r(rec)
    cdef uint64_t total, count
    cdef int tag
    cdef list parts
    cdef bytes chunk, out
    cdef unsigned char* q
    if n <= C_HASH:
        raise _Corrupt("value record too short")
    tag = p[C_HASH]
    if tag == C_TAG_VALUE:
        return PyBytes_FromStringAndSize(<char*>p + C_HASH + 1, n - C_HASH - 1)
    if tag == C_TAG_PACKED:
        return _unpacked(_compression.unpack_record, rec)
    if tag == C_TAG_SEALED:
        # ApiError (key missing, does not authenticate), never garbage; a sealed ``c`` is refused below
        return _stored_enc(_encryption.open_record(rec), fetch)
    if tag == C_TAG_CHUNKED:
        total = _be_slice(p, n, C_HASH + 1, C_HASH + 9)
        count = _be_slice(p, n, C_HASH + 9, C_HASH + 13)
        if <uint64_t>n != C_HASH + 13 + count * C_ID:
            raise _Corrupt("chunked value node length mismatch")
        parts = []
        size = 0
        for i in range(<Py_ssize_t>count):
            chunk = _fetch(fetch, _id_at(p + C_HASH + 13 + C_ID * i))
            if PyBytes_GET_SIZE(chunk) > C_HASH and _r(chunk)[C_HASH] == C_TAG_SEALED:
                chunk = _encryption.open_record(chunk)
            cn = PyBytes_GET_SIZE(chunk)
            if cn <= C_HASH or _r(chunk)[C_HASH] != C_TAG_CHUNK:
                raise _Corrupt("chunked value refers to a record that is not a chunk")
            parts.append(chunk)
            size += cn - C_HASH - 1
        if <uint64_t>size != total:
            raise _Corrupt("chunked value length mismatch")
        out = _new(size)
        q = _w(out)
        pos = 0
        for chunk in parts:
            cn = PyBytes_GET_SIZE(chunk) - C_HASH - 1
            memcpy(q + pos, PyBytes_AS_STRING(chunk) + C_HASH + 1, cn)
            pos += cn
        return out
    raise _Corrupt(f"record does not hold a value (tag {tag:#x})")


def stored_encoding(record, fetch):
    """The value encoding held by a value record (``v``, or ``C`` reassembled from its chunks)."""
    return _stored_enc(_b(record), fetch)


def stored_list_length(record):
    cdef bytes rec = _b(record)
    return _be_slice(_r(rec), PyBytes_GET_SIZE(rec), C_HASH + 1, C_HASH + 9)


cdef struct IdBuf:
    unsigned char* data
    Py_ssize_t size
    Py_ssize_t cap


cdef int _idbuf_add(IdBuf* buf, const unsigned char* src, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef unsigned char* grown
    if buf.size + n > buf.cap:
        cap = buf.cap * 2 if buf.cap else 64 * C_ID
        while cap < buf.size + n:
            cap *= 2
        grown = <unsigned char*>realloc(buf.data, cap)
        if grown == NULL:
            raise MemoryError()
        buf.data = grown
        buf.cap = cap
    memcpy(buf.data + buf.size, src, n)
    buf.size += n
    return 0


cdef int _expand_ids(bytes node_id, int level, object fetch, IdBuf* buf) except -1:
    """Append the item ids under a list subtree of height ``level`` to ``buf`` (left to right)."""
    cdef bytes rec = _fetch(fetch, node_id)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec)
    cdef const unsigned char* p = _r(rec)
    if n <= C_HASH:
        raise _Corrupt("list node record too short")
    if level == 0:
        if p[C_HASH] != C_TAG_LEAF or n != C_HASH + 1 + C_LEAF_ITEMS * C_ID:
            raise _Corrupt("bad list leaf")
        _idbuf_add(buf, p + C_HASH + 1, C_LEAF_ITEMS * C_ID)
        return 0
    if p[C_HASH] != C_TAG_INNER or n != C_HASH + 1 + 2 * C_ID:
        raise _Corrupt("bad list inner node")
    _expand_ids(_id_at(p + C_HASH + 1), level - 1, fetch, buf)
    _expand_ids(_id_at(p + C_HASH + 1 + C_ID), level - 1, fetch, buf)
    return 0


cdef Py_ssize_t _list_ids(bytes rec, object fetch, IdBuf* buf) except -1:
    """Put the ids of a list's full leaves in ``buf``; return where its tail ids start in ``rec``.

    The tail (``n % 8`` ids) runs from there to the end of ``rec``.
    """
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec), pos = C_HASH + 9
    cdef const unsigned char* p = _r(rec)
    cdef uint64_t count, m
    cdef int k
    if n <= C_HASH:
        raise _Corrupt("list root record too short")
    if p[C_HASH] != C_TAG_LIST:
        raise _Corrupt("not a list root")
    count = _be_slice(p, n, C_HASH + 1, C_HASH + 9)
    m = count // C_LEAF_ITEMS
    if <uint64_t>n != <uint64_t>pos + (<uint64_t>_popcount(m) + count % C_LEAF_ITEMS) * C_ID:
        raise _Corrupt("list root length mismatch")
    for k in range(63, -1, -1):
        if (m >> k) & 1:
            _expand_ids(_id_at(p + pos), k, fetch, buf)
            pos += C_ID
    return pos


def stored_list_ids(record, fetch):
    """Item ids of a list, in order, from its root record."""
    cdef bytes rec = _b(record)
    cdef IdBuf buf
    cdef Py_ssize_t tail, i
    cdef list out
    buf.data = NULL
    buf.size = buf.cap = 0
    try:
        tail = _list_ids(rec, fetch, &buf)
        out = [_id_at(buf.data + i) for i in range(0, buf.size, C_ID)]
        out.extend([_id_at(_r(rec) + i) for i in range(tail, PyBytes_GET_SIZE(rec), C_ID)])
        return out
    finally:
        free(buf.data)


cdef inline bytes _item_encoding(const unsigned char* item_id, object fetch):
    cdef bytes rec = _fetch(fetch, _id_at(item_id))
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec)
    if n > C_HASH and _r(rec)[C_HASH] == C_TAG_VALUE:
        return PyBytes_FromStringAndSize(PyBytes_AS_STRING(rec) + C_HASH + 1, n - C_HASH - 1)
    return _stored_enc(rec, fetch)


def stored_list_encodings(record, fetch):
    """Item encodings of a list, in order, from its root record.

    Every tree record is read first (the ids of all items), then each item's
    record: the same fetches, in the same order, as the twin.
    """
    cdef bytes rec = _b(record)
    cdef IdBuf buf
    cdef Py_ssize_t tail, i, n
    cdef list out = []
    buf.data = NULL
    buf.size = buf.cap = 0
    try:
        tail = _list_ids(rec, fetch, &buf)
        for i in range(0, buf.size, C_ID):
            out.append(_item_encoding(buf.data + i, fetch))
    finally:
        free(buf.data)
    n = PyBytes_GET_SIZE(rec)
    for i in range(tail, n, C_ID):
        out.append(_item_encoding(_r(rec) + i, fetch))
    return out


cdef int _collect_map(bytes rec, object fetch, list out) except -1:
    """Append the (key bytes, value id) entries under a map record to ``out``."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(rec) - C_HASH, count, i, pos, klen, start
    cdef const unsigned char* p = _r(rec) + C_HASH  # the stored node
    cdef list ids
    if n <= 0:
        raise _Corrupt("map node record too short")
    if p[0] == C_TAG_MAP:
        count = _map_leaf_count(p, n, C_ID)
        pos = 5
        for i in range(count):
            klen = <Py_ssize_t>_ld16(p + pos)
            out.append((PyBytes_FromStringAndSize(<char*>p + pos + 2, klen), _id_at(p + pos + 2 + klen)))
            pos += 2 + klen + C_ID
    elif p[0] == C_TAG_MAP_INNER:
        _ref_layout(p, n, C_ID, &start, &count)
        ids = [_id_at(p + start + C_ID * i) for i in range(count)]
        for child in ids:
            _collect_map(_fetch(fetch, child), fetch, out)
    else:
        raise _Corrupt("not a map node")
    return 0


def stored_map_entries(record, fetch):
    """(key, value id) pairs of a map, sorted by key bytes, from its root record."""
    cdef list raw = []
    cdef bytes k
    _collect_map(_b(record), fetch, raw)
    raw.sort()
    try:
        return [(PyUnicode_DecodeUTF8(PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k), "strict"), v) for k, v in raw]
    except UnicodeDecodeError:
        raise _Corrupt("map key is not UTF-8") from None


# ================================================================== stored records: writes
#
# The write half of storage/nodes.write (port of the twin's write_nodes): the top-down walk over a
# request's built nodes, hash-index lookups and inserts, reference swapping and record assembly in one
# compiled loop. LMDB is called through the transaction's own ``get`` / ``put`` (py-lmdb's C methods, or
# the process mode's recorder), positionally and in the twin's order, so both twins write the same records.

DEF _INDEX_KEY = 16
INDEX_KEY = _INDEX_KEY


class _Missing(Exception):
    pass


cdef class _NodeWriter:
    cdef object get, put, records, index, scopes, pack, new_id, seal_fn, tag, sealed_tags, no_seal
    cdef dict ids, by_hash
    cdef bytes prefix
    cdef Py_ssize_t index_key

    cdef bytes resolve(self, bytes h):
        cdef object node_id = self.ids.get(h)
        cdef object rec, node, stored
        cdef bytes short, out
        if node_id is not None:
            return <bytes>node_id
        if PyBytes_GET_SIZE(h) < self.index_key:
            short = self.prefix + h
        else:
            short = self.prefix + PyBytes_FromStringAndSize(PyBytes_AS_STRING(h), self.index_key)
        node_id = self.get(short, None, self.index)
        if node_id is not None:
            rec = self.get(node_id, None, self.records)
            if rec is None or rec[:C_HASH] != h:
                node_id = self.get(self.prefix + h, None, self.index)  # the short key belongs to another hash
        if node_id is None:
            node = self.by_hash.get(h)
            if node is None:
                raise _Missing()
            stored = _swap_refs(node, C_HASH, C_ID, None, self)  # children first: they get smaller ids
            if PyBytes_GET_SIZE(<bytes>stored) and _r(<bytes>stored)[0] == C_TAG_VALUE:
                stored = self.pack(h, stored, self.no_seal)
            node_id = self.new_id()
            if self.seal_fn is not None:
                if stored[0] in self.sealed_tags:
                    stored = self.seal_fn(h, stored)
                self.put(node_id, self.tag, True, True, False, self.scopes)
            self.put(node_id, h + stored, True, True, True, self.records)
            if not self.put(short, node_id, True, False, False, self.index):
                self.put(self.prefix + h, node_id, True, True, False, self.index)
        self.ids[h] = node_id
        return node_id


def write_nodes(txn, dbs, built, known, roots, prefix, pack, new_id, seal=None,
                Py_ssize_t index_key=_INDEX_KEY):
    """Store what is missing of the trees whose root hashes are ``roots``; return hash -> id (None when a
    node is neither built nor stored). See the twin's write_nodes."""
    cdef _NodeWriter w = _NodeWriter.__new__(_NodeWriter)
    w.records, w.index, w.scopes = dbs
    w.ids = dict(known)
    w.by_hash = dict(built)
    w.get, w.put = txn.get, txn.put
    w.prefix = _b(prefix)
    w.pack, w.new_id = pack, new_id
    w.seal_fn = w.tag = w.sealed_tags = None
    if seal is not None:
        w.seal_fn, w.tag, w.sealed_tags = seal
    w.no_seal = w.seal_fn is None
    if index_key < 0:
        raise ValueError("index_key must not be negative")
    w.index_key = index_key
    try:
        for h in roots:
            w.resolve(_b(h))
    except _Missing:
        return None
    return w.ids


cdef class _HashNoter:
    """hash_of for canonical_node_known: a child's hash is the head of its record, noted in ``known``."""
    cdef object fetch
    cdef dict known

    def __call__(self, node_id):
        cdef bytes rec = _fetch(self.fetch, node_id)
        cdef bytes h
        if PyBytes_GET_SIZE(rec) < C_HASH:
            h = rec
        else:
            h = _slice(rec, 0, C_HASH)
        self.known[h] = node_id
        return h


def canonical_node_known(stored, fetch, known):
    """``canonical_node`` reading children's hashes from their records (see the twin)."""
    cdef _HashNoter noter = _HashNoter.__new__(_HashNoter)
    noter.fetch = fetch
    noter.known = known
    return canonical_node(stored, noter)


# ================================================================== values of an API request
#
# The twin's wire_* and put_channels (see there): the same walk over the message objects, without building a
# field name per value. Any refusal (an unsupported value, a bad name, a missing kind...) runs the twin on the
# same input, which raises the faithful error naming the field; nodes this call added are dropped first.

cdef Py_ssize_t C_MAX_NAME = _limits.MAX_NAME_BYTES
cdef int C_MAX_WIRE_DEPTH = 64


class _Refused(Exception):
    pass


cdef inline bytes _header(unsigned char base, unsigned char m16, Py_ssize_t n):
    cdef unsigned char head[5]
    if n < 16:
        head[0] = base | <unsigned char>n
        return PyBytes_FromStringAndSize(<char*>head, 1)
    if n < 0x10000:
        head[0] = m16
        _st16(head + 1, n)
        return PyBytes_FromStringAndSize(<char*>head, 3)
    head[0] = m16 + 1
    _st32(head + 1, n)
    return PyBytes_FromStringAndSize(<char*>head, 5)


cdef bytes _canon(object data):
    if type(data) is bytes and _is_canonical(<bytes>data):
        return <bytes>data
    return _enc(_decode(data), 0)


cdef bytes _wenc(object v, int depth):
    cdef list parts
    kind = v.WhichOneof("kind")
    if kind == "msgpack":
        return _canon(v.msgpack)
    if kind == "opaque":
        o = v.opaque
        return encode_opaque(o.type, o.data)
    if kind is None or depth >= C_MAX_WIRE_DEPTH:
        raise _Refused()
    if kind == "list":
        items = v.list.items
        parts = [_header(0x90, 0xDC, len(items))]
        for item in items:
            parts.append(_wenc(item, depth + 1))
        return b"".join(parts)
    entries = v.map.entries
    keys = sorted(entries)
    parts = [_header(0x80, 0xDE, len(keys))]
    for k in keys:
        parts.append(_plain_encode(k))
        parts.append(_wenc(entries[k], depth + 1))
    return b"".join(parts)


cdef bytes _wtree(object v, list nodes):
    cdef list encs
    cdef _Hasher hs
    kind = v.WhichOneof("kind")
    if kind == "list":
        encs = [_wenc(item, 1) for item in v.list.items]
        return build_list(encs, nodes)
    if kind == "map":
        entries = v.map.entries
        return build_map([(k, _wenc(entries[k], 1)) for k in sorted(entries)], nodes)
    if kind == "msgpack":
        shape, payload = decompose(v.msgpack)
        if shape == KIND_LIST:
            return build_list(payload, nodes)
        if shape == KIND_MAP:
            return build_map(payload, nodes)
        return _value_node(payload, nodes, None)
    return _value_node(_wenc(v, 0), nodes, None)


cdef inline list _nodes_list(object nodes):
    if type(nodes) is not list:
        raise TypeError("nodes must be a list")
    return <list>nodes


def wire_encoding(v, field, int depth=0):
    """Canonical encoding of a whole ``Value`` (see the twin)."""
    try:
        return _wenc(v, depth)
    except Exception:
        pass
    return _twin.wire_encoding(v, field, depth)


def wire_tree(v, field, nodes):
    """Store a ``Value`` as a tree; return its root hash (see the twin)."""
    cdef list out = _nodes_list(nodes)
    cdef Py_ssize_t n0 = len(out)
    try:
        return _wtree(v, out)
    except Exception:
        del out[n0:]
    return _twin.wire_tree(v, field, out)


def wire_items(items, field):
    """Canonical encodings of a repeated ``Value`` field (see the twin)."""
    try:
        return [_wenc(item, 1) for item in items]
    except Exception:
        pass
    return _twin.wire_items(items, field)


def wire_entries(entries, field):
    """{key: canonical encoding} of a ``map<string, Value>`` field (see the twin)."""
    cdef dict out = {}
    try:
        for k in entries:
            out[k] = _wenc(entries[k], 1)
        return out
    except Exception:
        pass
    return _twin.wire_entries(entries, field)


cdef inline bint _name_ok(object name):
    cdef Py_ssize_t n
    if type(name) is not str:
        return False
    n = len(<str>name)
    if n == 0 or n > C_MAX_NAME or "\x00" in <str>name:
        return False
    return n * 4 <= C_MAX_NAME or len((<str>name).encode()) <= C_MAX_NAME


cdef list _put_channels(object channels, list built, bint has_base):
    cdef list ops = []
    cdef list names
    if not has_base:
        for name, w in channels.items():
            op = w.WhichOneof("op")
            if op == "delta" or op == "keep":
                raise _Refused()
    names = sorted(channels)
    for name in names:
        if not _name_ok(name):
            raise _Refused()
        w = channels[name]
        op = w.WhichOneof("op")
        f = f"channels[{name!r}]"
        if op == "value":
            ops.append((name, "value", f, _wtree(w.value, built), [], None, [], [], b""))
        elif op == "keep":
            if not w.keep:
                raise _Refused()
            ops.append((name, "keep", f, b"", [], None, [], [], b""))
        elif op == "delta":
            delta = w.delta
            sets = delta.set
            ops.append((name, "delta", f, b"", [_wenc(item, 1) for item in delta.append],
                        delta.keep_first if delta.HasField("keep_first") else None,
                        [(k, _wenc(sets[k], 1)) for k in sorted(sets)], list(delta.delete), delta.base_root))
        else:
            raise _Refused()
    return ops


def put_channels(channels, built, has_base, base_field):
    """A PutCheckpoint's channel writes, checked and converted (see the twin)."""
    cdef list out = _nodes_list(built)
    cdef Py_ssize_t n0 = len(out)
    try:
        return _put_channels(channels, out, bool(has_base))
    except Exception:
        del out[n0:]
    return _twin.put_channels(channels, out, has_base, base_field)



# ================================================================== deltas of stored values (see the twin)

def list_delta(record, append, keep_first, fetch, known, nodes, field):
    """A stored list with a delta applied (first ``keep_first`` items kept, ``append`` appended)."""
    cdef bytes rec = _b(record)
    cdef bytes h
    cdef list kept, ids
    cdef Py_ssize_t i, k
    cdef ListState st
    cdef _Hasher hs
    n = stored_list_length(rec)
    if keep_first is not None and keep_first != n:
        if keep_first > n:
            raise _errors.invalid(f"{field}.keep_first", f"{keep_first} is more than the list's {n} items")
        ids = stored_list_ids(rec, fetch)
        k = keep_first
        kept = []
        for i in range(k if k < len(ids) else len(ids)):
            node_id = ids[i]
            h = _fetch(fetch, node_id)
            if PyBytes_GET_SIZE(h) > C_HASH:
                h = _slice(h, 0, C_HASH)
            known[h] = node_id
            kept.append(h)
        hs = _Hasher()
        for e in append:
            kept.append(_value_node(e, nodes, hs))
        _list_empty(&st)
        for h in kept:
            _list_push(&st, _r(_hash_arg(h, "item")), nodes, hs)
        return _list_finish(&st, nodes, hs)
    if not append:
        return _slice(rec, 0, C_HASH) if PyBytes_GET_SIZE(rec) > C_HASH else rec
    return build_list(append, nodes, canonical_node_known(_slice(rec, C_HASH, PyBytes_GET_SIZE(rec) - C_HASH)
                                                          if PyBytes_GET_SIZE(rec) >= C_HASH else b"",
                                                          fetch, known))


def map_delta(root, sets, deletes, node, nodes, field):
    """A stored map with keys set and deleted."""
    cdef _Hasher hs = _Hasher()
    pairs = [(k, _value_node(enc, nodes, hs)) for k, enc in sets]
    try:
        return map_update(root, pairs, deletes, node, nodes)
    except _UV as e:
        raise _errors.unsupported_value(field, e.reason) from None
