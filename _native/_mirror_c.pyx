# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""_mirror_c: the compiled twin of ``agentstate.langgraph._mirror_py`` (built into
``agentstate.langgraph._mirror_c``; import it through :mod:`agentstate.langgraph._mirror`).

Same functions, same answers (tests/test_mirror.py runs one suite against
both): ``mirror``, ``matches``, ``common_prefix``, ``hand_out`` and the
``Rec`` record. The walk runs over CPython's containers directly
(``PyDict_Next`` on both dicts in step, list and tuple items by index,
float bits by ``memcmp``), so checking a 1,600-message history costs about a
microsecond per message. Which types are walked, and how, is decided once per
type by the twin's ``kind_of`` (one table, ``_KINDS``, shared by both);
``Unmirrorable`` and ``UNMIRRORABLE`` are the twin's objects.
"""

from cpython.dict cimport PyDict_Next, PyDict_SetItem, PyDict_GetItem, PyDict_Size
from cpython.list cimport PyList_New, PyList_SET_ITEM, PyList_GET_SIZE, PyList_GET_ITEM
from cpython.object cimport PyObject, PyObject_GenericGetAttr, PyObject_GenericSetAttr
from cpython.long cimport PyLong_FromVoidPtr
from cpython.ref cimport Py_INCREF, Py_REFCNT, Py_XDECREF
from cpython.set cimport PySet_New
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_SIZE, PyTuple_GET_ITEM
from libc.string cimport memcmp

from agentstate.langgraph import _mirror_py as _py

cdef extern from "Python.h":
    object PyObject_GenericGetDict(object o, void* context)
    int PyObject_GenericSetDict(object o, object value, void* context) except -1
    int PyObject_GC_IsTracked(object o)
    void PyObject_GC_UnTrack(object o)

cdef extern from *:
    """
    /* An instance of t made the way object.__new__(t) makes it (no __init__ runs). */
    static PyObject* mirror_new_instance(PyObject* t, PyObject* no_args) {
        return PyBaseObject_Type.tp_new((PyTypeObject*)t, no_args, NULL);
    }
    """
    object mirror_new_instance(object t, object no_args)

NATIVE = True
MAX_DEPTH = _py.MAX_DEPTH
Unmirrorable = _py.Unmirrorable
UNMIRRORABLE = _py.UNMIRRORABLE

cdef dict _KINDS = _py._KINDS
cdef dict _SLOTS = _py._SLOTS
cdef object _kind_of = _py.kind_of
cdef tuple _NO_ARGS = ()
cdef object _MISSING = _py._MISSING
cdef object _UNMIRRORABLE = _py.UNMIRRORABLE

cdef enum:
    K_VALUE = 0
    K_SHARED = 1
    K_LIST = 2
    K_TUPLE = 3
    K_DICT = 4
    K_MODEL = 5
    K_OBJECT = 6
    K_UNKNOWN = 7

assert (_py._VALUE, _py._SHARED, _py._LIST, _py._TUPLE, _py._DICT, _py._MODEL, _py._OBJECT, _py._UNKNOWN) == \
    (K_VALUE, K_SHARED, K_LIST, K_TUPLE, K_DICT, K_MODEL, K_OBJECT, K_UNKNOWN)

cdef str S_DICT = "__dict__"
cdef str S_EXTRA = "__pydantic_extra__"
cdef str S_FIELDS = "__pydantic_fields_set__"
cdef str S_PRIVATE = "__pydantic_private__"


cdef class Rec:
    """What a saver knows of one stored list item (see the twin's ``Rec``)."""

    cdef public object opaque
    cdef public object proof
    cdef public object source

    def __init__(self, opaque, proof=None, source=None):
        self.opaque = opaque
        self.proof = proof
        self.source = source


cdef inline int _kind(type t) except -1:
    cdef PyObject* k = PyDict_GetItem(_KINDS, t)
    if k is not NULL:
        return <int><object>k
    return <int>_kind_of(t)


# ------------------------------------------------------------------ mirror

def mirror(obj):
    """A private copy of ``obj``; raises Unmirrorable."""
    cdef PyObject* memo = NULL
    try:
        return _copy(obj, 0, &memo, Py_REFCNT(obj))
    finally:
        Py_XDECREF(memo)


cdef inline void _remember(PyObject** memo, object ident, object copy) except *:
    if memo[0] is NULL:
        d = {}
        Py_INCREF(d)
        memo[0] = <PyObject*>d
    PyDict_SetItem(<object>memo[0], ident, copy)


cdef object _copy(object obj, int depth, PyObject** memo, Py_ssize_t refs):
    """The mirror of ``obj``. ``refs`` counts the references to ``obj`` the walk itself accounts for (its
    container's, plus a temporary one); an object with more may be reached again by another path, so its
    copy is remembered (``memo``, made on first use) and reused: aliasing inside a value is kept, and most
    containers of a message (one reference each) cost no memo entry. The root is never remembered: a path
    back to it, a cycle no serializer stores, is copied with the cycle one level down (as in the twin)."""
    cdef type t = type(obj)
    cdef int k = _kind(t)
    cdef Py_ssize_t i, n
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef PyObject* done
    cdef object out, item, new, extra, private, name, v, state
    cdef object ident = None
    if k <= K_SHARED:
        return obj
    if k == K_UNKNOWN:
        raise Unmirrorable(f"cannot mirror a {t.__module__}.{t.__qualname__}")
    if depth >= MAX_DEPTH:
        raise Unmirrorable("value nested too deep to mirror")
    cdef bint shared = Py_REFCNT(obj) > refs
    if shared:
        ident = PyLong_FromVoidPtr(<void*>obj)
        if memo[0] is not NULL:
            done = PyDict_GetItem(<object>memo[0], ident)
            if done is not NULL:
                return <object>done
    depth += 1
    if k == K_LIST:
        n = PyList_GET_SIZE(obj)
        out = PyList_New(n)
        if shared:
            _remember(memo, ident, out)
        for i in range(n):
            item = _copy(<object>PyList_GET_ITEM(obj, i), depth, memo, 1)
            Py_INCREF(item)
            PyList_SET_ITEM(out, i, item)
        return out
    if k == K_TUPLE:
        n = PyTuple_GET_SIZE(obj)
        out = PyTuple_New(n)
        for i in range(n):
            item = _copy(<object>PyTuple_GET_ITEM(obj, i), depth, memo, 1)
            Py_INCREF(item)
            PyTuple_SET_ITEM(out, i, item)
        if shared:
            _remember(memo, ident, out)
        return out
    if k == K_DICT:
        out = {}
        if shared:
            _remember(memo, ident, out)
        while PyDict_Next(obj, &pos, &key, &value):
            PyDict_SetItem(out, _copy(<object>key, depth, memo, 1), _copy(<object>value, depth, memo, 1))
        return out
    new = mirror_new_instance(t, _NO_ARGS)
    if shared:
        _remember(memo, ident, new)
    if k == K_MODEL:
        # each attribute below is held once by the object and once by the temporary reference here
        PyObject_GenericSetDict(new, _copy(PyObject_GenericGetDict(obj, NULL), depth, memo, 2), NULL)
        extra = PyObject_GenericGetAttr(obj, S_EXTRA)
        PyObject_GenericSetAttr(new, S_EXTRA, None if extra is None else _copy(extra, depth, memo, 2))
        PyObject_GenericSetAttr(new, S_FIELDS, PySet_New(PyObject_GenericGetAttr(obj, S_FIELDS)))
        private = PyObject_GenericGetAttr(obj, S_PRIVATE)
        PyObject_GenericSetAttr(new, S_PRIVATE, None if private is None else _copy(private, depth, memo, 2))
        return new
    state = getattr(obj, S_DICT, None)
    if state is not None:
        PyObject_GenericSetDict(new, _copy(state, depth, memo, 2), NULL)
    for name in <tuple>_SLOTS[t]:
        v = getattr(obj, name, _MISSING)
        if v is not _MISSING:
            PyObject_GenericSetAttr(new, name, _copy(v, depth, memo, 2))
    return new


# ------------------------------------------------------------------ matches

def matches(obj, m):
    """Whether ``obj`` has exactly the state the mirror ``m`` recorded."""
    return _match(obj, m, 0)


cdef inline bint _same_double(double x, double y):
    return memcmp(&x, &y, sizeof(double)) == 0


cdef bint _match(object a, object b, int depth) except -1:
    if a is b:
        return True  # b is a mirror: only a shared immutable leaf is identical
    cdef type t = type(a)
    if type(b) is not t:
        return False
    cdef int k = _kind(t)
    cdef Py_ssize_t i, n
    if k == K_VALUE:
        if t is float:
            return _same_double(<double>a, <double>b)
        return a == b
    if k == K_SHARED or k == K_UNKNOWN or depth >= MAX_DEPTH:
        return False
    depth += 1
    if k == K_LIST:
        n = PyList_GET_SIZE(a)
        if PyList_GET_SIZE(b) != n:
            return False
        for i in range(n):
            if not _match(<object>PyList_GET_ITEM(a, i), <object>PyList_GET_ITEM(b, i), depth):
                return False
        return True
    if k == K_TUPLE:
        n = PyTuple_GET_SIZE(a)
        if PyTuple_GET_SIZE(b) != n:
            return False
        for i in range(n):
            if not _match(<object>PyTuple_GET_ITEM(a, i), <object>PyTuple_GET_ITEM(b, i), depth):
                return False
        return True
    if k == K_DICT:
        return _match_dicts(a, b, depth)
    if k == K_MODEL:
        if not _match_dicts(PyObject_GenericGetDict(a, NULL), PyObject_GenericGetDict(b, NULL), depth):
            return False
        ea, eb = PyObject_GenericGetAttr(a, S_EXTRA), PyObject_GenericGetAttr(b, S_EXTRA)
        if (ea is None) != (eb is None) or (ea is not None and not _match(ea, eb, depth)):
            return False
        return PyObject_GenericGetAttr(a, S_FIELDS) == PyObject_GenericGetAttr(b, S_FIELDS)
    sa, sb = getattr(a, S_DICT, None), getattr(b, S_DICT, None)
    if (sa is None) != (sb is None) or (sa is not None and not _match(sa, sb, depth)):
        return False
    for name in <tuple>_SLOTS[t]:
        xa, xb = getattr(a, name, _MISSING), getattr(b, name, _MISSING)
        if (xa is _MISSING) != (xb is _MISSING) or (xa is not _MISSING and not _match(xa, xb, depth)):
            return False
    return True


cdef bint _match_dicts(object a, object b, int depth) except -1:
    if type(a) is not dict or type(b) is not dict:
        return _match(a, b, depth)
    if PyDict_Size(a) != PyDict_Size(b):
        return False
    cdef Py_ssize_t pa = 0, pb = 0
    cdef PyObject *ka
    cdef PyObject *va
    cdef PyObject *kb
    cdef PyObject *vb
    while PyDict_Next(a, &pa, &ka, &va):
        if not PyDict_Next(b, &pb, &kb, &vb):
            return False
        if not (_match(<object>ka, <object>kb, depth) and _match(<object>va, <object>vb, depth)):
            return False
    return True


# ------------------------------------------------------------------ records

def common_prefix(list items, list recs):
    """How many leading ``items`` match the proof of the record at the same position."""
    cdef Py_ssize_t n = min(PyList_GET_SIZE(items), PyList_GET_SIZE(recs))
    cdef Py_ssize_t k = 0
    cdef Rec rec
    while k < n:
        rec = <Rec?>PyList_GET_ITEM(recs, k)
        if rec.proof is None or not _match(<object>PyList_GET_ITEM(items, k), rec.proof, 0):
            break
        k += 1
    return k


def hand_out(list recs, fresh):
    """A new object for each record: a mirror of its source, else ``fresh(rec)``."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(recs)
    cdef list out = PyList_New(n)
    cdef Rec rec
    cdef object item, src
    cdef PyObject* memo = NULL
    for i in range(n):
        rec = <Rec?>PyList_GET_ITEM(recs, i)
        src = rec.source
        if src is None or src is _UNMIRRORABLE:
            item = fresh(rec)
        else:
            try:
                item = _copy(src, 0, &memo, Py_REFCNT(src))
            finally:
                Py_XDECREF(memo)
                memo = NULL
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    return out


def seal(list recs):
    """Takes a list of records out of the cyclic garbage collector's sight (its records stay tracked). A
    saver's cache holds one such list per cached checkpoint, each as long as the history; every full
    collection would walk them all. Safe because a records list is never changed after it is made and
    holds only records, which never refer back to a list: it cannot be part of a reference cycle."""
    if PyObject_GC_IsTracked(recs):
        PyObject_GC_UnTrack(recs)
    return recs
