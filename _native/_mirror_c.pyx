# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""_mirror_c: the compiled twin of ``agentstate.langgraph._mirror_py`` (built into
``agentstate.langgraph._mirror_c``; import it through :mod:`agentstate.langgraph._mirror`).

Same functions, same answers (tests/test_mirror.py runs one suite against
both): ``freeze``, ``matches``, ``thaw``, ``common_prefix``, ``hand_out``,
``seal`` and the ``Rec`` record. What a mirror is and why it is flat: see the
twin. Here the walks run over CPython's containers directly (``PyDict_Next``,
list and tuple items by index, float bits by ``memcmp``) and over the mirror
tuple by index, so checking an item costs a few hundred nanoseconds and
touches the mirror's one tuple and the caller's objects, nothing else. Which
types are walked, and how, is decided once per type by the twin's ``kind_of``
(one table, ``_KINDS``, shared by both); ``Unmirrorable`` and ``UNMIRRORABLE``
are the twin's objects. The memo of containers met is made only when a
container has more references than the walk accounts for (most containers of
a message have one), and a thawed mirror keeps a table of what it built only
when the mirror refers back to something. ``hand_out`` may give again what it
gave before when nothing else can see it (the twin always thaws): see there.
"""

from cpython.dict cimport PyDict_Next, PyDict_SetItem, PyDict_GetItem, PyDict_Size
from cpython.list cimport PyList_Append, PyList_AsTuple, PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromVoidPtr
from cpython.object cimport PyObject, PyObject_GenericGetAttr, PyObject_GenericSetAttr
from cpython.ref cimport Py_INCREF, Py_REFCNT, Py_XDECREF
from cpython.set cimport PySet_New, PySet_Contains, PySet_GET_SIZE
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_SIZE, PyTuple_GET_ITEM
from libc.string cimport memcmp

import sysconfig
import weakref

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
cdef object _MISSING = _py._MISSING
cdef object _UNMIRRORABLE = _py.UNMIRRORABLE
cdef tuple _NO_ARGS = ()

cdef enum:
    K_VALUE = 0
    K_SHARED = 1
    K_LIST = 2
    K_TUPLE = 3
    K_DICT = 4
    K_MODEL = 5
    K_OBJECT = 6
    K_UNKNOWN = 7
    K_REF = 8
    K_NO_SLOT = 9

assert (_py._VALUE, _py._SHARED, _py._LIST, _py._TUPLE, _py._DICT, _py._MODEL, _py._OBJECT, _py._UNKNOWN,
        _py._REF, _py._NO_SLOT) == (K_VALUE, K_SHARED, K_LIST, K_TUPLE, K_DICT, K_MODEL, K_OBJECT, K_UNKNOWN,
                                    K_REF, K_NO_SLOT)

cdef str S_EXTRA = "__pydantic_extra__"
cdef str S_FIELDS = "__pydantic_fields_set__"
cdef str S_PRIVATE = "__pydantic_private__"
cdef str S_DICT = "__dict__"


cdef class Op:
    """A mirror's marker of a container (never a leaf: no value of a caller's is an Op)."""

    cdef readonly str name
    cdef readonly int code
    cdef readonly bint referenced

    def __init__(self, str name, int code, bint referenced=False):
        self.name, self.code, self.referenced = name, code, referenced

    def __repr__(self):
        return f"<{self.name}>"


# container markers by kind: [plain, referenced again later]
cdef list _OPS = [None] * 10
for _code, _name in ((K_LIST, "list"), (K_TUPLE, "tuple"), (K_DICT, "dict"), (K_MODEL, "model"),
                     (K_OBJECT, "object")):
    _OPS[_code] = (Op(_name, _code), Op(_name + "*", _code, True))
cdef Op REF = Op("ref", K_REF)
cdef Op NO_SLOT = Op("no-slot", K_NO_SLOT)


cdef class Rec:
    """What a saver knows of one stored list item (see the twin's ``Rec``)."""

    cdef public object opaque
    cdef public object proof
    cdef public object source
    cdef public object given  # the object the last hand-out of this record gave (see hand_out), or None

    def __init__(self, opaque, proof=None, source=None):
        self.opaque = opaque
        self.proof = proof
        self.source = source


cdef inline int _kind(type t) except -1:
    cdef PyObject* k = PyDict_GetItem(_KINDS, t)
    if k is not NULL:
        return <int><object>k
    return <int>_kind_of(t)


cdef inline bint _same_double(double x, double y):
    return memcmp(&x, &y, sizeof(double)) == 0


# ------------------------------------------------------------------ freeze

def freeze(obj):
    """The mirror of ``obj``; raises Unmirrorable."""
    cdef list out = []
    cdef PyObject* memo = NULL
    try:
        _freeze(obj, 0, Py_REFCNT(obj), out, &memo)
    finally:
        Py_XDECREF(memo)
    return PyList_AsTuple(out)


cdef int _remember(PyObject** memo, object ident, Py_ssize_t place) except -1:
    if memo[0] is NULL:
        d = {}
        Py_INCREF(d)
        memo[0] = <PyObject*>d
    PyDict_SetItem(<object>memo[0], ident, place)
    return 0


cdef int _freeze(object obj, int depth, Py_ssize_t refs, list out, PyObject** memo) except -1:
    """Append ``obj``'s record to ``out``. ``refs`` counts the references to ``obj`` the walk accounts for
    (its container's, plus a temporary one); an object with more may be met again by another path, so its
    place is remembered in ``memo`` (a dict of id -> place, made on first need). The root is never
    remembered; a tuple only once its items are recorded (as in the twin)."""
    cdef type t = type(obj)
    cdef int k = _kind(t)
    cdef Py_ssize_t i, n, start
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef PyObject* seen
    cdef object ident = None, v
    if k <= K_SHARED:
        PyList_Append(out, obj)
        return 0
    if k == K_UNKNOWN:
        raise Unmirrorable(f"cannot mirror a {t.__module__}.{t.__qualname__}")
    if depth >= MAX_DEPTH:
        raise Unmirrorable("value nested too deep to mirror")
    cdef bint shared = depth > 0 and Py_REFCNT(obj) > refs
    if shared:
        ident = PyLong_FromVoidPtr(<void*>obj)
        if memo[0] is not NULL:
            seen = PyDict_GetItem(<object>memo[0], ident)
            if seen is not NULL:
                i = <Py_ssize_t><object>seen
                out[i] = (<tuple>_OPS[(<Op>out[i]).code])[1]
                PyList_Append(out, REF)
                PyList_Append(out, <object>seen)
                return 0
    start = PyList_GET_SIZE(out)
    if shared and k != K_TUPLE:
        _remember(memo, ident, start)
    depth += 1
    PyList_Append(out, (<tuple>_OPS[k])[0])
    if k == K_LIST:
        n = PyList_GET_SIZE(obj)
        PyList_Append(out, n)
        for i in range(n):
            _freeze(<object>PyList_GET_ITEM(obj, i), depth, 1, out, memo)
    elif k == K_TUPLE:
        n = PyTuple_GET_SIZE(obj)
        PyList_Append(out, n)
        for i in range(n):
            _freeze(<object>PyTuple_GET_ITEM(obj, i), depth, 1, out, memo)
        if shared:
            _remember(memo, ident, start)
    elif k == K_DICT:
        PyList_Append(out, PyDict_Size(obj))
        while PyDict_Next(obj, &pos, &key, &value):
            _freeze(<object>key, depth, 1, out, memo)
            _freeze(<object>value, depth, 1, out, memo)
    elif k == K_MODEL:
        # each attribute below is held once by the object and once by the temporary reference here
        PyList_Append(out, t)
        _freeze(PyObject_GenericGetDict(obj, NULL), depth, 2, out, memo)
        v = PyObject_GenericGetAttr(obj, S_EXTRA)
        if v is None:
            PyList_Append(out, None)
        else:
            _freeze(v, depth, 2, out, memo)
        PyList_Append(out, tuple(PyObject_GenericGetAttr(obj, S_FIELDS)))
        v = PyObject_GenericGetAttr(obj, S_PRIVATE)
        if v is None:
            PyList_Append(out, None)
        else:
            _freeze(v, depth, 2, out, memo)
    else:
        PyList_Append(out, t)
        v = getattr(obj, S_DICT, None)
        if v is None:
            PyList_Append(out, None)
        else:
            _freeze(v, depth, 2, out, memo)
        for name in <tuple>_SLOTS[t]:
            v = getattr(obj, name, _MISSING)
            if v is _MISSING:
                PyList_Append(out, NO_SLOT)
            else:
                _freeze(v, depth, 2, out, memo)
    return 0


# ------------------------------------------------------------------ matches

def matches(obj, tuple m):
    """Whether ``obj`` has exactly the state the mirror ``m`` recorded."""
    return _match(obj, m, 0, 0) == PyTuple_GET_SIZE(m)


cdef inline bint _leaf_equal(object a, object e) except -1:
    if a is e:
        return True  # a leaf the mirror keeps alive: identity proves it
    cdef type t = type(a)
    if type(e) is not t or _kind(t) != K_VALUE:
        return False
    if t is float:
        return _same_double(<double>a, <double>e)
    return a == e


cdef inline object _at(tuple m, Py_ssize_t pos):
    return <object>PyTuple_GET_ITEM(m, pos)


cdef Py_ssize_t _match(object a, tuple m, Py_ssize_t pos, int depth) except -2:
    """Check ``a`` against the record at ``pos``: the position after it, or -1 when it differs."""
    cdef object e = _at(m, pos)
    cdef Py_ssize_t i, n, p, pa = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef int code
    cdef type t
    cdef object fields, names, v
    if type(e) is not Op:
        return pos + 1 if _leaf_equal(a, e) else -1
    if depth >= MAX_DEPTH:
        return -1
    code = (<Op>e).code
    if code == K_REF:
        if _match(a, m, <Py_ssize_t>_at(m, pos + 1), depth + 1) < 0:
            return -1
        return pos + 2
    t = type(a)
    depth += 1
    if code == K_LIST:
        if t is not list:
            return -1
        n = PyList_GET_SIZE(a)
        if n != <Py_ssize_t>_at(m, pos + 1):
            return -1
        p = pos + 2
        for i in range(n):
            p = _match(<object>PyList_GET_ITEM(a, i), m, p, depth)
            if p < 0:
                return -1
        return p
    if code == K_TUPLE:
        if t is not tuple:
            return -1
        n = PyTuple_GET_SIZE(a)
        if n != <Py_ssize_t>_at(m, pos + 1):
            return -1
        p = pos + 2
        for i in range(n):
            p = _match(<object>PyTuple_GET_ITEM(a, i), m, p, depth)
            if p < 0:
                return -1
        return p
    if code == K_DICT:
        if t is not dict or PyDict_Size(a) != <Py_ssize_t>_at(m, pos + 1):
            return -1
        p = pos + 2
        while PyDict_Next(a, &pa, &key, &value):
            p = _match(<object>key, m, p, depth)
            if p < 0:
                return -1
            p = _match(<object>value, m, p, depth)
            if p < 0:
                return -1
        return p
    if t is not _at(m, pos + 1):
        return -1
    if code == K_MODEL:
        p = _match(PyObject_GenericGetDict(a, NULL), m, pos + 2, depth)
        if p < 0:
            return -1
        p = _match(PyObject_GenericGetAttr(a, S_EXTRA), m, p, depth)  # None, or a dict
        if p < 0:
            return -1
        fields, names = PyObject_GenericGetAttr(a, S_FIELDS), _at(m, p)
        n = PyTuple_GET_SIZE(names)
        if type(fields) is not set or PySet_GET_SIZE(fields) != n:
            return -1
        for i in range(n):
            if not PySet_Contains(fields, <object>PyTuple_GET_ITEM(names, i)):
                return -1
        return _skip(m, p + 1)  # private attributes: not serialized
    p = _match(getattr(a, S_DICT, None), m, pos + 2, depth)  # None, or a dict
    if p < 0:
        return -1
    for name in <tuple>_SLOTS[t]:
        v = getattr(a, name, _MISSING)
        if _at(m, p) is NO_SLOT:
            if v is not _MISSING:
                return -1
            p += 1
        elif v is _MISSING:
            return -1
        else:
            p = _match(v, m, p, depth)
            if p < 0:
                return -1
    return p


cdef Py_ssize_t _skip(tuple m, Py_ssize_t pos) except -1:
    """The position after the record at ``pos``."""
    cdef object e = _at(m, pos)
    cdef Py_ssize_t i, n, p
    cdef int code
    if type(e) is not Op:
        return pos + 1
    code = (<Op>e).code
    if code == K_REF:
        return pos + 2
    if code == K_LIST or code == K_TUPLE or code == K_DICT:
        n = <Py_ssize_t>_at(m, pos + 1)
        if code == K_DICT:
            n *= 2
        p = pos + 2
        for i in range(n):
            p = _skip(m, p)
        return p
    if code == K_MODEL:
        p = _skip(m, _skip(m, pos + 2))  # __dict__, extra
        return _skip(m, p + 1)  # fields, private
    p = _skip(m, pos + 2)
    for name in <tuple>_SLOTS[_at(m, pos + 1)]:
        p = p + 1 if _at(m, p) is NO_SLOT else _skip(m, p)
    return p


# ------------------------------------------------------------------ thaw

def thaw(tuple m):
    """A new object with the state the mirror recorded."""
    return _thaw_one(m)


cdef inline object _thaw_one(tuple m):
    cdef Py_ssize_t pos = 0
    cdef PyObject* built = NULL
    try:
        return _thaw(m, 0, &pos, &built)
    finally:
        Py_XDECREF(built)


cdef int _keep(PyObject** built, Py_ssize_t place, object obj) except -1:
    if built[0] is NULL:
        d = {}
        Py_INCREF(d)
        built[0] = <PyObject*>d
    PyDict_SetItem(<object>built[0], place, obj)
    return 0


cdef object _thaw(tuple m, Py_ssize_t start, Py_ssize_t* pos, PyObject** built):
    """The object for the record at ``start``; ``pos`` is set to the position after it. ``built`` (a dict
    of place -> object, made on first need) holds the containers a later reference points back to."""
    cdef object e = _at(m, start)
    cdef Py_ssize_t i, n
    cdef int code
    cdef bint keep
    cdef object out, item, key, t, new, state
    if type(e) is not Op:
        pos[0] = start + 1
        return e
    code = (<Op>e).code
    keep = (<Op>e).referenced
    cdef PyObject* found
    if code == K_REF:
        pos[0] = start + 2
        found = PyDict_GetItem(<object>built[0], _at(m, start + 1)) if built[0] is not NULL else NULL
        if found is NULL:
            raise ValueError("a mirror refers to a place it did not record")
        return <object>found
    if code == K_LIST:
        n = <Py_ssize_t>_at(m, start + 1)
        out = PyList_New(n)
        if keep:
            _keep(built, start, out)
        pos[0] = start + 2
        for i in range(n):
            item = _thaw(m, pos[0], pos, built)
            Py_INCREF(item)
            PyList_SET_ITEM(out, i, item)
        return out
    if code == K_TUPLE:
        n = <Py_ssize_t>_at(m, start + 1)
        out = PyTuple_New(n)
        pos[0] = start + 2
        for i in range(n):
            item = _thaw(m, pos[0], pos, built)
            Py_INCREF(item)
            PyTuple_SET_ITEM(out, i, item)
        if keep:
            _keep(built, start, out)
        return out
    if code == K_DICT:
        n = <Py_ssize_t>_at(m, start + 1)
        out = {}
        if keep:
            _keep(built, start, out)
        pos[0] = start + 2
        for i in range(n):
            key = _thaw(m, pos[0], pos, built)
            PyDict_SetItem(out, key, _thaw(m, pos[0], pos, built))
        return out
    t = _at(m, start + 1)
    new = mirror_new_instance(t, _NO_ARGS)
    if keep:
        _keep(built, start, new)
    if code == K_MODEL:
        PyObject_GenericSetDict(new, _thaw(m, start + 2, pos, built), NULL)
        PyObject_GenericSetAttr(new, S_EXTRA, _thaw(m, pos[0], pos, built))
        PyObject_GenericSetAttr(new, S_FIELDS, PySet_New(_at(m, pos[0])))
        PyObject_GenericSetAttr(new, S_PRIVATE, _thaw(m, pos[0] + 1, pos, built))
        return new
    state = _thaw(m, start + 2, pos, built)
    if state is not None:
        PyObject_GenericSetDict(new, state, NULL)
    for name in <tuple>_SLOTS[t]:
        if _at(m, pos[0]) is NO_SLOT:
            pos[0] += 1
        else:
            PyObject_GenericSetAttr(new, name, _thaw(m, pos[0], pos, built))
    return new


# ------------------------------------------------------------------ records

def common_prefix(list items, list recs):
    """How many leading ``items`` match the proof of the record at the same position."""
    cdef Py_ssize_t n = min(PyList_GET_SIZE(items), PyList_GET_SIZE(recs))
    cdef Py_ssize_t k = 0
    cdef Rec rec
    cdef object proof
    while k < n:
        rec = <Rec?>PyList_GET_ITEM(recs, k)
        proof = rec.proof
        if proof is None or _match(<object>PyList_GET_ITEM(items, k), <tuple?>proof, 0, 0) != PyTuple_GET_SIZE(proof):
            break
        k += 1
    return k


#: Whether hand_out may give an object again (below). Not on a free-threaded build, where reference counts
#: are not exact from another thread's point of view.
cdef bint _REUSE = not sysconfig.get_config_var("Py_GIL_DISABLED")
cdef object _weakrefs = weakref.getweakrefcount


def hand_out(list recs, fresh):
    """A new object for each record: its source thawed, else ``fresh(rec)``.

    Or the object this record's previous hand-out gave, when nothing but the record refers to it any more
    and it is exactly as a thaw would make it (``_sole``): nobody can see that object, nor anything
    mutable inside it, so giving it again cannot be told from giving a new one, and costs a walk instead
    of a thaw (no allocation, nothing new for the cyclic collector to scan, nothing to free). A saver's
    reads in a chat hand out the history every turn; once a turn's state is dropped, its messages are
    such objects. The record keeps what it gave (``given``); the twin always thaws."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(recs)
    cdef list out = PyList_New(n)
    cdef Rec rec
    cdef object item, src, g
    for i in range(n):
        rec = <Rec?>PyList_GET_ITEM(recs, i)
        src = rec.source
        if src is None or src is _UNMIRRORABLE:
            item = fresh(rec)
            src = rec.source  # fresh may have mirrored what it made
        else:
            g = rec.given
            # references to g: the record's and this variable's, none else
            if g is not None and _REUSE and Py_REFCNT(g) == 2 and _sole(g, <tuple?>src, 0, 0, 2) == \
                    PyTuple_GET_SIZE(<tuple>src):
                item = g
            else:
                item = _thaw_one(<tuple?>src)
            g = None
        if _REUSE and type(src) is tuple:
            rec.given = item
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    return out


cdef Py_ssize_t _sole(object a, tuple m, Py_ssize_t pos, int depth, Py_ssize_t refs) except -2:
    """Check that ``a`` is what thawing the record at ``pos`` would make, and that nothing outside the walk
    refers to it or to any container inside it: the position after the record, or -1. ``refs`` counts the
    references to ``a`` the walk accounts for (its container's, plus a temporary one for attributes).
    Stricter than ``_match``: a container must have exactly those references; a mirror that refers back to
    a container (aliasing) never passes, nor does a plain object (reading its attributes may run code), a
    model with weak references, or a private attribute that differs; immutable leaves may be shared. A
    passing model gets a new ``__pydantic_fields_set__`` as a thaw would (a set's order of iteration
    depends on its history)."""
    cdef object e = _at(m, pos)
    cdef Py_ssize_t i, n, p, pa = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef int code
    cdef type t
    cdef object fields, names, v
    if type(e) is not Op:
        return pos + 1 if _leaf_equal(a, e) else -1
    if depth >= MAX_DEPTH:
        return -1
    code = (<Op>e).code
    if code == K_REF or (<Op>e).referenced or code == K_OBJECT:
        return -1
    if Py_REFCNT(a) != refs:
        return -1
    t = type(a)
    depth += 1
    if code == K_LIST:
        if t is not list:
            return -1
        n = PyList_GET_SIZE(a)
        if n != <Py_ssize_t>_at(m, pos + 1):
            return -1
        p = pos + 2
        for i in range(n):
            p = _sole(<object>PyList_GET_ITEM(a, i), m, p, depth, 1)
            if p < 0:
                return -1
        return p
    if code == K_TUPLE:
        if t is not tuple:
            return -1
        n = PyTuple_GET_SIZE(a)
        if n != <Py_ssize_t>_at(m, pos + 1):
            return -1
        p = pos + 2
        for i in range(n):
            p = _sole(<object>PyTuple_GET_ITEM(a, i), m, p, depth, 1)
            if p < 0:
                return -1
        return p
    if code == K_DICT:
        if t is not dict or PyDict_Size(a) != <Py_ssize_t>_at(m, pos + 1):
            return -1
        p = pos + 2
        while PyDict_Next(a, &pa, &key, &value):
            p = _sole(<object>key, m, p, depth, 1)
            if p < 0:
                return -1
            p = _sole(<object>value, m, p, depth, 1)
            if p < 0:
                return -1
        return p
    # K_MODEL
    if t is not _at(m, pos + 1) or _weakrefs(a):
        return -1
    # each attribute below is held once by the object and once by the temporary reference here
    p = _sole(PyObject_GenericGetDict(a, NULL), m, pos + 2, depth, 2)
    if p < 0:
        return -1
    p = _sole(PyObject_GenericGetAttr(a, S_EXTRA), m, p, depth, 2)  # None, or a dict
    if p < 0:
        return -1
    fields, names = PyObject_GenericGetAttr(a, S_FIELDS), _at(m, p)
    n = PyTuple_GET_SIZE(names)
    if type(fields) is not set or PySet_GET_SIZE(fields) != n:
        return -1
    for i in range(n):
        if not PySet_Contains(fields, <object>PyTuple_GET_ITEM(names, i)):
            return -1
    p = _sole(PyObject_GenericGetAttr(a, S_PRIVATE), m, p + 1, depth, 2)  # None, or a dict
    if p < 0:
        return -1
    PyObject_GenericSetAttr(a, S_FIELDS, PySet_New(names))
    return p


def seal(list recs):
    """Takes a list of records out of the cyclic garbage collector's sight (its records stay tracked). A
    saver's cache holds one such list per cached checkpoint, each as long as the history; every full
    collection would walk them all. Safe because a records list is never changed after it is made and
    holds only records, which never refer back to a list: it cannot be part of a reference cycle."""
    if PyObject_GC_IsTracked(recs):
        PyObject_GC_UnTrack(recs)
    return recs
