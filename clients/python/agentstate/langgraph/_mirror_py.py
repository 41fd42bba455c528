"""_mirror_py: what a saver knows of a value, and the proof that a caller's value still equals it.

The pure-Python twin of ``agentstate.langgraph._mirror_c`` (built from
``_native/_mirror_c.pyx``); import either through :mod:`agentstate.langgraph._mirror`.
Both give the same answers; tests/test_mirror.py runs one suite against each.

Why: the savers remember what the sidecar holds for the items of list
channels (messages), so that a put sends only what changed and a read only
what is new. Callers change objects in place (a tool call's args edited
before it runs, a message's content amended by a node), so neither "the
same object as last time" nor "an object the saver handed out" proves that
an item is unchanged. A *mirror* does: a flat, private record of a value's
whole state, one tuple per value.

* ``freeze(obj)`` records ``obj`` as a mirror: a tuple that lists, in
  pre-order, every container (list, tuple, dict, pydantic model, dataclass
  instance) with its type and size, and every leaf as itself — strings,
  numbers, bytes, None, and immutable leaves (datetimes, UUIDs, enum
  members...) that the mirror then keeps alive. Aliasing inside the value is
  recorded (a container met again is a reference to its first place). A
  value holding anything else (a set, a class the walk does not know, a
  structure deeper than MAX_DEPTH) raises :class:`Unmirrorable`: the saver
  then never claims it unchanged and never hands it out twice.
* ``matches(obj, m)`` is True only when ``obj`` has exactly the state the
  mirror recorded: the same types (exactly), lengths, key order, and leaves
  (by value for str/int/bool/None/bytes, floats by their bits so 0.0 and
  -0.0 differ, every other immutable leaf by identity with the mirror's).
  Pydantic models compare ``__dict__``, ``__pydantic_extra__`` and
  ``__pydantic_fields_set__`` (private attributes are not serialized);
  dataclasses their ``__dict__`` and slots. A deterministic serializer that
  reads only that state (LangGraph's JsonPlusSerializer: ``model_dump()``,
  dataclass fields, containers) therefore gives ``obj`` the bytes it gave the
  value the mirror was made from.
* ``thaw(m)`` makes a new object with the recorded state (private
  attributes included): what the saver hands out, so no two reads ever share
  an object with each other or with the saver.
* ``common_prefix(items, recs)``: how many leading ``items`` match their
  record's ``proof``; ``hand_out(recs, fresh)``: one new object per record —
  its ``source`` thawed, or ``fresh(rec)`` when it has none (the compiled
  twin may give instead the object the record's last hand-out gave, when
  nothing else refers to it and it is exactly as a thaw would make it: as
  good as new, and nobody can tell; see its ``hand_out``).
* ``seal(recs)``: a cached list of records, hidden from the cyclic garbage
  collector where the compiled twin can (time only, no behaviour).

Why flat: a saver's records are made over many turns, so walking object
graphs spread over the heap costs a cache miss per container. A mirror is one
contiguous tuple whose leaves are mostly compared by identity (no access to
them at all), so checking and copying a long history touches little memory.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import ipaddress
import pathlib
import re
import struct
import sys
import uuid
import zoneinfo

NATIVE = False
MAX_DEPTH = 200  # nesting levels a mirror follows (msgpack itself refuses deeper values)


class Unmirrorable(ValueError):
    """The value holds something the mirror walk does not record faithfully."""


class Rec:
    """What a saver knows of one stored list item: the bytes the sidecar holds (``opaque``), the mirror of a
    value whose serialization gives those bytes (``proof``, or None), and the mirror of what reading those
    bytes gives (``source``: None until first read, UNMIRRORABLE when it cannot be mirrored)."""

    __slots__ = ("opaque", "proof", "source", "given")

    def __init__(self, opaque, proof=None, source=None):
        self.opaque = opaque
        self.proof = proof
        self.source = source
        self.given = None  # what the compiled twin's last hand-out of it gave (this twin never gives again)


#: Stands for a record whose value cannot be mirrored: each read makes it fresh from its bytes.
UNMIRRORABLE = object()


class _Op:
    """A mirror's marker of a container (never a leaf: no value of a caller's is an _Op)."""

    __slots__ = ("name", "code", "referenced")

    def __init__(self, name: str, code: int, referenced: bool = False) -> None:
        self.name, self.code, self.referenced = name, code, referenced

    def __repr__(self) -> str:
        return f"<{self.name}>"


# kinds of types
_VALUE, _SHARED, _LIST, _TUPLE, _DICT, _MODEL, _OBJECT, _UNKNOWN = range(8)
_REF, _NO_SLOT = 8, 9

# container markers: a plain one, and one for a container a later reference points back to
_OPS = {code: (_Op(name, code), _Op(name + "*", code, True))
        for code, name in ((_LIST, "list"), (_TUPLE, "tuple"), (_DICT, "dict"), (_MODEL, "model"),
                           (_OBJECT, "object"))}
REF = _Op("ref", _REF)  # followed by the position of the container met again
NO_SLOT = _Op("no-slot", _NO_SLOT)  # a slot without a value

_VALUE_TYPES = (str, int, float, bool, type(None), bytes)
_SHARED_TYPES = (
    _dt.datetime, _dt.date, _dt.time, _dt.timedelta, _dt.timezone, uuid.UUID, decimal.Decimal, zoneinfo.ZoneInfo,
    pathlib.PurePosixPath, pathlib.PosixPath, pathlib.PureWindowsPath, pathlib.WindowsPath, re.Pattern,
    ipaddress.IPv4Address, ipaddress.IPv4Interface, ipaddress.IPv4Network,
    ipaddress.IPv6Address, ipaddress.IPv6Interface, ipaddress.IPv6Network,
)
_KINDS: dict[type, int] = {t: _VALUE for t in _VALUE_TYPES}
_KINDS.update({t: _SHARED for t in _SHARED_TYPES})
_KINDS.update({list: _LIST, tuple: _TUPLE, dict: _DICT})
_SLOTS: dict[type, tuple[str, ...]] = {}  # _OBJECT types: their slot names (beside __dict__, when they have one)


def _own_slots(t: type, stop: type | None) -> list[str]:
    """Slot names the classes of ``t``'s MRO declare below ``stop``."""
    names: list[str] = []
    for c in t.__mro__:
        if c is stop or c is object:
            break
        slots = c.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        names.extend(s for s in slots if s not in ("__dict__", "__weakref__"))
    return names


def kind_of(t: type) -> int:
    """How the walk treats instances of ``t`` (decided once per type; both twins share the table)."""
    k = _KINDS.get(t)
    if k is not None:
        return k
    k = _UNKNOWN
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None) if pydantic is not None else None
    if isinstance(t, type) and issubclass(t, enum.Enum):
        k = _SHARED  # members are singletons
    elif base is not None and issubclass(t, base):
        if not _own_slots(t, base) and "__pydantic_fields__" in dir(t):
            k = _MODEL
    elif dataclasses.is_dataclass(t) and isinstance(t, type):
        slots = _own_slots(t, None)
        has_dict = any("__dict__" in c.__dict__ for c in t.__mro__ if c is not object) or not any(
            "__slots__" in c.__dict__ for c in t.__mro__ if c is not object)
        if slots or has_dict:
            _SLOTS[t] = tuple(slots)
            k = _OBJECT
    _KINDS[t] = k
    return k


_MISSING = object()
_get = object.__getattribute__
_set = object.__setattr__


# ---------------------------------------------------------------- freeze

def freeze(obj) -> tuple:
    """The mirror of ``obj`` (see the module docstring); raises Unmirrorable."""
    out: list = []
    _freeze(obj, 0, out, {})
    return tuple(out)


def _freeze(obj, depth: int, out: list, memo: dict) -> None:
    """Append ``obj``'s record to ``out``. ``memo`` maps the ids of containers met so far to their place,
    so a container met again becomes a reference (its first marker turns into the referenced kind). The
    root is not remembered: a path back to it, a cycle no serializer stores, is recorded with the cycle one
    level down. A tuple is remembered only once its items are recorded: a cycle through a tuple cannot be
    made again, so it runs into MAX_DEPTH."""
    t = type(obj)
    k = _KINDS.get(t)
    if k is None:
        k = kind_of(t)
    if k <= _SHARED:
        out.append(obj)
        return
    if k == _UNKNOWN:
        raise Unmirrorable(f"cannot mirror a {t.__module__}.{t.__qualname__}")
    if depth >= MAX_DEPTH:
        raise Unmirrorable("value nested too deep to mirror")
    seen = memo.get(id(obj))
    if seen is not None:
        out[seen] = _OPS[out[seen].code][1]
        out.append(REF)
        out.append(seen)
        return
    start = len(out)
    if depth and k != _TUPLE:
        memo[id(obj)] = start
    d = depth + 1
    out.append(_OPS[k][0])
    if k == _LIST or k == _TUPLE:
        out.append(len(obj))
        for x in obj:
            _freeze(x, d, out, memo)
        if depth and k == _TUPLE:
            memo[id(obj)] = start
    elif k == _DICT:
        out.append(len(obj))
        for key, value in obj.items():
            _freeze(key, d, out, memo)
            _freeze(value, d, out, memo)
    elif k == _MODEL:
        out.append(t)
        _freeze(_get(obj, "__dict__"), d, out, memo)
        extra = _get(obj, "__pydantic_extra__")
        _freeze(extra, d, out, memo) if extra is not None else out.append(None)
        out.append(tuple(_get(obj, "__pydantic_fields_set__")))
        private = _get(obj, "__pydantic_private__")
        _freeze(private, d, out, memo) if private is not None else out.append(None)
    else:
        out.append(t)
        state = getattr(obj, "__dict__", None)
        _freeze(state, d, out, memo) if state is not None else out.append(None)
        for name in _SLOTS[t]:
            value = getattr(obj, name, _MISSING)
            _freeze(value, d, out, memo) if value is not _MISSING else out.append(NO_SLOT)


# ---------------------------------------------------------------- matches

class _Mismatch(Exception):
    pass


_pack_double = struct.Struct("<d").pack


def matches(obj, m: tuple) -> bool:
    """Whether ``obj`` has exactly the state the mirror ``m`` recorded (see the module docstring)."""
    try:
        return _match(obj, m, 0, 0) == len(m)
    except _Mismatch:
        return False


def _leaf_equal(a, e) -> bool:
    if a is e:
        return True  # a leaf the mirror keeps alive: identity proves it
    t = type(a)
    if type(e) is not t or _KINDS.get(t, _UNKNOWN) != _VALUE:
        return False
    if t is float:
        return _pack_double(a) == _pack_double(e)
    return a == e


def _match(a, m: tuple, pos: int, depth: int) -> int:
    """Check ``a`` against the record at ``pos``; the position after it (raises _Mismatch)."""
    e = m[pos]
    if type(e) is not _Op:
        if _leaf_equal(a, e):
            return pos + 1
        raise _Mismatch
    if depth >= MAX_DEPTH:
        raise _Mismatch
    code = e.code
    if code == _REF:
        _match(a, m, m[pos + 1], depth + 1)
        return pos + 2
    t = type(a)
    d = depth + 1
    if code == _LIST or code == _TUPLE:
        if t is not (list if code == _LIST else tuple) or len(a) != m[pos + 1]:
            raise _Mismatch
        p = pos + 2
        for x in a:
            p = _match(x, m, p, d)
        return p
    if code == _DICT:
        if t is not dict or len(a) != m[pos + 1]:
            raise _Mismatch
        p = pos + 2
        for key, value in a.items():
            p = _match(value, m, _match(key, m, p, d), d)
        return p
    if t is not m[pos + 1]:
        raise _Mismatch
    if code == _MODEL:
        p = _match(_get(a, "__dict__"), m, pos + 2, d)
        p = _match(_get(a, "__pydantic_extra__"), m, p, d)  # None, or a dict
        fields, names = _get(a, "__pydantic_fields_set__"), m[p]
        if len(fields) != len(names) or not all(n in fields for n in names):
            raise _Mismatch
        return _skip(m, p + 1)  # private attributes: not serialized
    p = _match(getattr(a, "__dict__", None), m, pos + 2, d)  # None, or a dict
    for name in _SLOTS[t]:
        value = getattr(a, name, _MISSING)
        if m[p] is NO_SLOT:
            if value is not _MISSING:
                raise _Mismatch
            p += 1
        elif value is _MISSING:
            raise _Mismatch
        else:
            p = _match(value, m, p, d)
    return p


def _skip(m: tuple, pos: int) -> int:
    """The position after the record at ``pos``."""
    e = m[pos]
    if type(e) is not _Op:
        return pos + 1
    code = e.code
    if code == _REF:
        return pos + 2
    if code == _LIST or code == _TUPLE:
        p = pos + 2
        for _ in range(m[pos + 1]):
            p = _skip(m, p)
        return p
    if code == _DICT:
        p = pos + 2
        for _ in range(2 * m[pos + 1]):
            p = _skip(m, p)
        return p
    if code == _MODEL:
        p = _skip(m, _skip(m, pos + 2))  # __dict__, extra
        return _skip(m, p + 1)  # fields, private
    p = _skip(m, pos + 2)
    for _ in _SLOTS[m[pos + 1]]:
        p = p + 1 if m[p] is NO_SLOT else _skip(m, p)
    return p


# ---------------------------------------------------------------- thaw

def thaw(m: tuple):
    """A new object with the state the mirror recorded."""
    return _thaw(m, 0, {})[0]


def _thaw(m: tuple, pos: int, built: dict):
    e = m[pos]
    if type(e) is not _Op:
        return e, pos + 1
    code = e.code
    if code == _REF:
        return built[m[pos + 1]], pos + 2
    if code == _LIST:
        out: list = []
        if e.referenced:
            built[pos] = out
        p = pos + 2
        for _ in range(m[pos + 1]):
            x, p = _thaw(m, p, built)
            out.append(x)
        return out, p
    if code == _TUPLE:
        items = []
        p = pos + 2
        for _ in range(m[pos + 1]):
            x, p = _thaw(m, p, built)
            items.append(x)
        out = tuple(items)
        if e.referenced:
            built[pos] = out
        return out, p
    if code == _DICT:
        d: dict = {}
        if e.referenced:
            built[pos] = d
        p = pos + 2
        for _ in range(m[pos + 1]):
            key, p = _thaw(m, p, built)
            d[key], p = _thaw(m, p, built)
        return d, p
    t = m[pos + 1]
    new = object.__new__(t)
    if e.referenced:
        built[pos] = new
    if code == _MODEL:
        state, p = _thaw(m, pos + 2, built)
        _set(new, "__dict__", state)
        extra, p = _thaw(m, p, built)
        _set(new, "__pydantic_extra__", extra)
        _set(new, "__pydantic_fields_set__", set(m[p]))
        private, p = _thaw(m, p + 1, built)
        _set(new, "__pydantic_private__", private)
        return new, p
    state, p = _thaw(m, pos + 2, built)
    if state is not None:
        _set(new, "__dict__", state)
    for name in _SLOTS[t]:
        if m[p] is NO_SLOT:
            p += 1
        else:
            value, p = _thaw(m, p, built)
            _set(new, name, value)
    return new, p


# ---------------------------------------------------------------- records

def common_prefix(items: list, recs: list) -> int:
    """How many leading ``items`` match the proof of the record at the same position."""
    n = min(len(items), len(recs))
    k = 0
    while k < n:
        proof = recs[k].proof
        if proof is None or not matches(items[k], proof):
            break
        k += 1
    return k


def hand_out(recs: list, fresh) -> list:
    """A new object for each record: its source thawed, else ``fresh(rec)`` (which may set the source).
    (The compiled twin may instead give again an object it gave before that nothing else refers to, which
    cannot be told apart from a new one; exact reference counts are not something Python code can read
    reliably, so this twin always makes new ones.)"""
    out = []
    for rec in recs:
        src = rec.source
        out.append(fresh(rec) if src is None or src is UNMIRRORABLE else thaw(src))
    return out


def seal(recs: list) -> list:
    """The compiled twin takes a cached list of records out of the cyclic garbage collector's sight (a
    saving of time, not a change of behaviour); Python code cannot, so this returns the list as it is."""
    return recs
