"""_mirror_py: the savers' private copies of values, and the proof that a caller's value still equals one.

The pure-Python twin of ``agentstate.langgraph._mirror_c`` (built from
``_native/_mirror_c.pyx``); import either through :mod:`agentstate.langgraph._mirror`.
Both give the same answers; tests/test_mirror.py runs one suite against each.

Why: the savers remember what the sidecar holds for the items of list
channels (messages), so that a put sends only what changed and a read only
what is new. Callers change objects in place (a tool call's args edited
before it runs, a message's content amended by a node), so neither "the
same object as last time" nor "an object the saver handed out" proves that
an item is unchanged. A *mirror* does:

* ``mirror(obj)`` makes a private copy: new lists, dicts, tuples, pydantic
  models and dataclass instances all the way down; immutable leaves
  (strings, numbers, bytes, datetimes, UUIDs, enum members...) shared.
  Aliasing inside the value is kept (like ``copy.deepcopy``). A value
  holding anything else (a set, a class the walk does not know, a structure
  deeper than MAX_DEPTH) raises :class:`Unmirrorable`: the saver then never
  claims that value unchanged and never hands it out twice.
* ``matches(obj, m)`` is True only when ``obj`` has exactly the state ``m``
  recorded: the same types (exactly), lengths, key order, and leaves (by
  value for str/int/bool/None/bytes, floats by their bits so 0.0 and
  -0.0 differ, every other immutable leaf by identity with the mirror's).
  Pydantic models compare ``__dict__``, ``__pydantic_extra__`` and
  ``__pydantic_fields_set__`` (private attributes are not serialized);
  dataclasses their ``__dict__`` and slots. A deterministic serializer that
  reads only that state (LangGraph's JsonPlusSerializer: ``model_dump()``,
  dataclass fields, containers) therefore gives ``obj`` the bytes it gave
  ``m``'s original. ``m`` must be a mirror (never an object a caller holds):
  an identical object then can only be a shared immutable leaf.
* ``common_prefix(items, recs)``: how many leading ``items`` match their
  record's ``proof``.
* ``seal(recs)``: a cached list of records, hidden from the cyclic garbage
  collector where the compiled twin can (time only, no behaviour).
* ``hand_out(recs, fresh)``: one new object per record — a mirror of its
  ``source``, or ``fresh(rec)`` when it has none — so no two reads ever
  share an object with each other or with the saver.
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
    """The value holds something the mirror walk does not copy faithfully."""


class Rec:
    """What a saver knows of one stored list item: the bytes the sidecar holds (``opaque``), a private object
    whose serialization gives those bytes (``proof``, or None), and a private object equal to what reading
    those bytes gives (``source``: None until first read, UNMIRRORABLE when it cannot be copied)."""

    __slots__ = ("opaque", "proof", "source")

    def __init__(self, opaque, proof=None, source=None):
        self.opaque = opaque
        self.proof = proof
        self.source = source


#: Stands for a record whose value cannot be mirrored: each read makes it fresh from its bytes.
UNMIRRORABLE = object()

# kinds of types
_VALUE, _SHARED, _LIST, _TUPLE, _DICT, _MODEL, _OBJECT, _UNKNOWN = range(8)

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

_MODEL_STATE = ("__pydantic_extra__", "__pydantic_fields_set__", "__pydantic_private__")


def _own_slots(t: type, stop: type | None) -> list[str] | None:
    """Slot names the classes of ``t``'s MRO declare below ``stop``; None when one holds state elsewhere."""
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


def _forget(ident, copy) -> None:
    """The root's copy is not remembered (see _copy)."""


def mirror(obj):
    """A private copy of ``obj`` (see the module docstring); raises Unmirrorable."""
    return _copy(obj, 0, {})


def _copy(obj, depth, memo):
    """The mirror of ``obj``; copies are remembered by the original's id (``memo``), so aliasing inside a
    value is kept. The root is not remembered (as in the compiled twin, which cannot tell whether it is
    shared): a path back to it, a cycle no serializer stores, is copied with the cycle one level down."""
    t = type(obj)
    k = _KINDS.get(t)
    if k is None:
        k = kind_of(t)
    if k <= _SHARED:
        return obj
    if k == _UNKNOWN:
        raise Unmirrorable(f"cannot mirror a {t.__module__}.{t.__qualname__}")
    if depth >= MAX_DEPTH:
        raise Unmirrorable("value nested too deep to mirror")
    done = memo.get(id(obj))
    if done is not None:
        return done
    d = depth + 1
    remember = memo.__setitem__ if depth else _forget
    if k == _LIST:
        out = []
        remember(id(obj), out)
        out.extend([_copy(x, d, memo) for x in obj])
        return out
    if k == _TUPLE:
        out = tuple([_copy(x, d, memo) for x in obj])
        remember(id(obj), out)
        return out
    if k == _DICT:
        out = {}
        remember(id(obj), out)
        for key, value in obj.items():
            out[_copy(key, d, memo)] = _copy(value, d, memo)
        return out
    new = object.__new__(t)
    remember(id(obj), new)
    if k == _MODEL:
        object.__setattr__(new, "__dict__", _copy(obj.__dict__, d, memo))
        extra, fields_set, private = (object.__getattribute__(obj, n) for n in _MODEL_STATE)
        object.__setattr__(new, "__pydantic_extra__", None if extra is None else _copy(extra, d, memo))
        object.__setattr__(new, "__pydantic_fields_set__", set(fields_set))
        object.__setattr__(new, "__pydantic_private__", None if private is None else _copy(private, d, memo))
        return new
    state = getattr(obj, "__dict__", None)
    if state is not None:
        object.__setattr__(new, "__dict__", _copy(state, d, memo))
    for name in _SLOTS[t]:
        value = getattr(obj, name, _MISSING)
        if value is not _MISSING:
            object.__setattr__(new, name, _copy(value, d, memo))
    return new


def matches(obj, m) -> bool:
    """Whether ``obj`` has exactly the state the mirror ``m`` recorded (see the module docstring)."""
    return _match(obj, m, 0)


_pack_double = struct.Struct("<d").pack


def _match(a, b, depth) -> bool:
    if a is b:
        return True  # b is a mirror: only a shared immutable leaf is identical
    t = type(a)
    if type(b) is not t:
        return False
    k = _KINDS.get(t)
    if k is None:
        k = kind_of(t)
    if k == _VALUE:
        if t is float:
            return _pack_double(a) == _pack_double(b)
        return a == b
    if k == _SHARED or k == _UNKNOWN or depth >= MAX_DEPTH:
        return False
    d = depth + 1
    if k == _LIST or k == _TUPLE:
        return len(a) == len(b) and all(_match(x, y, d) for x, y in zip(a, b))
    if k == _DICT:
        if len(a) != len(b):
            return False
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            if not (_match(ka, kb, d) and _match(va, vb, d)):
                return False
        return True
    if k == _MODEL:
        if not _match(a.__dict__, b.__dict__, d):
            return False
        ea, eb = object.__getattribute__(a, "__pydantic_extra__"), object.__getattribute__(b, "__pydantic_extra__")
        if (ea is None) != (eb is None) or (ea is not None and not _match(ea, eb, d)):
            return False
        return object.__getattribute__(a, "__pydantic_fields_set__") == \
            object.__getattribute__(b, "__pydantic_fields_set__")
    sa, sb = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
    if (sa is None) != (sb is None) or (sa is not None and not _match(sa, sb, d)):
        return False
    for name in _SLOTS[t]:
        va, vb = getattr(a, name, _MISSING), getattr(b, name, _MISSING)
        if (va is _MISSING) != (vb is _MISSING) or (va is not _MISSING and not _match(va, vb, d)):
            return False
    return True


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
    """A new object for each record: a mirror of its source, else ``fresh(rec)`` (which may set the source)."""
    out = []
    for rec in recs:
        src = rec.source
        out.append(fresh(rec) if src is None or src is UNMIRRORABLE else mirror(src))
    return out


def seal(recs: list) -> list:
    """The compiled twin takes a cached list of records out of the cyclic garbage collector's sight (a
    saving of time, not a change of behaviour); Python code cannot, so this returns the list as it is."""
    return recs
