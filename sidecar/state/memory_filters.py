"""memory_filters: memory filter trees and their evaluation (docs/memory.md §3), pure functions.

A filter is a tree of :class:`All`, :class:`AnyOf`, :class:`Not` and :class:`Cond` nodes over an item's
decoded value. Each condition names its comparison mode:

``AGENTSTATE`` (the one documented behaviour): dotted keys are paths, numbers compare as numbers (``1 == 1.0``,
a bool is not a number), strings by code point (= UTF-8 byte) order, lists, maps and sets as whole values;
ordered comparisons of values of different kinds, of NaN and of missing paths are false; ``EQ null`` matches a
missing path; ``NE`` is exactly "not EQ", so it matches a missing path. Never fails.

``LANGGRAPH_PYTHON`` (LangGraph's InMemoryStore): a missing path reads as None; EQ/NE are Python's ``==`` and
``!=`` on the values as the Python client decodes them; ordered comparisons apply ``float()`` to the value,
then to the operand, and fail with the exception Python raises (:class:`EvaluationError`).

``LANGGRAPH_JS`` (LangGraph.js's InMemoryStore, its ``compareValues``): the value and the operand seen as the
JavaScript values a JS caller puts and filters with (:func:`js_number`, :func:`js_strict_equal`): EQ/NE are
``===``/``!==`` (a missing path is ``undefined``; numbers by value, safe integers and floats alike; integers
beyond 2^53 - 1 are bigints; lists, maps, bytes, datetimes, UUIDs, decimals, sets and opaque values are objects
and never ``===`` anything), IN/NIN ``Array.includes`` (SameValueZero: NaN is found), ordered comparisons
``Number(value) <op> Number(operand)`` (any NaN compares false). Never fails.

Evaluation is left to right and short-circuits (which matters only for errors). :func:`compile_expression`
turns a LangGraph-style filter map (``{"a.b": 1, "n": {"$gt": 2}, "$or": [...]}``) into a tree.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import re
import uuid as _uuid
from typing import Any, Callable

import msgspec

from agentstate import codec

from ..errors import ApiError

# agentstate.v1.FilterOperator (tests/test_layers-style checks in tests/test_memory_filters.py)
EQ, NE, GT, GTE, LT, LTE, IN, NIN, EXISTS, IS_TYPE, LENGTH_EQ, FAIL = range(1, 13)
# agentstate.v1.MemoryValueType
T_NULL, T_BOOL, T_NUMBER, T_STRING, T_BYTES, T_LIST, T_MAP, T_DATETIME, T_UUID, T_SET, T_OPAQUE = range(1, 12)
# agentstate.v1.ComparisonMode
AGENTSTATE, LANGGRAPH_PYTHON, LANGGRAPH_JS = 1, 2, 3

OPERATORS = {"$eq": EQ, "$ne": NE, "$gt": GT, "$gte": GTE, "$lt": LT, "$lte": LTE, "$in": IN, "$nin": NIN}
MAX_NODES = 1000
MAX_DEPTH = 32
MAX_IN_VALUES = 1000


class EvaluationError(Exception):
    """A LANGGRAPH_PYTHON comparison (or a FAIL node) failed: ``exception`` names the Python exception class."""

    def __init__(self, exception: str, message: str) -> None:
        super().__init__(message)
        self.exception = exception
        self.message = message


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class Digits(str):
    """A path segment of the expression form made of digits: a key in a map, an index in a list."""

    __slots__ = ()


class MSet(tuple):
    """A set value as the AGENTSTATE mode sees it: its elements (which may be maps), compared as a set."""

    __slots__ = ()


# ----------------------------------------------------------------- decoding

def _native_ext(code: int, data: memoryview) -> Any:
    if code == codec.EXT_SET:
        items = _native_decoder.decode(bytes(data))
        return MSet(items)
    return codec._ext_to_python(code, data)


_native_decoder = msgspec.msgpack.Decoder(ext_hook=_native_ext)


def decode_native(encoding: bytes) -> Any:
    """A stored canonical encoding as the AGENTSTATE mode compares it."""
    return _native_decoder.decode(encoding)


def decode_python(encoding: bytes) -> Any:
    """A stored canonical encoding as the Python client decodes it (LANGGRAPH_PYTHON mode)."""
    try:
        return codec.decode(encoding)
    except Exception:  # noqa: BLE001 - a set holding a map has no Python form: compare the native one
        return decode_native(encoding)


DECODERS: dict[int, Callable[[bytes], Any]] = {AGENTSTATE: decode_native, LANGGRAPH_PYTHON: decode_python,
                                               LANGGRAPH_JS: decode_native}


# ----------------------------------------------------------------- nodes

class Cond:
    __slots__ = ("path", "op", "value", "mode")

    def __init__(self, path: tuple, op: int, value: Any = None, mode: int = AGENTSTATE) -> None:
        self.path = path  # str segments are map keys, int segments list indexes
        self.op = op
        self.value = value  # decoded with the mode's decoder (a list for IN/NIN)
        self.mode = mode

    def __repr__(self) -> str:
        return f"Cond({self.path!r}, {self.op}, {self.value!r}, mode={self.mode})"


class All:
    __slots__ = ("children",)

    def __init__(self, children: list) -> None:
        self.children = children

    def __repr__(self) -> str:
        return f"All({self.children!r})"


class AnyOf:
    __slots__ = ("children",)

    def __init__(self, children: list) -> None:
        self.children = children

    def __repr__(self) -> str:
        return f"AnyOf({self.children!r})"


class Not:
    __slots__ = ("child",)

    def __init__(self, child) -> None:
        self.child = child

    def __repr__(self) -> str:
        return f"Not({self.child!r})"


def modes_of(node) -> set[int]:
    """The comparison modes a tree uses (each needs the item's value decoded its way)."""
    out: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Cond):
            out.add(n.mode)
        elif isinstance(n, Not):
            stack.append(n.child)
        else:
            stack.extend(n.children)
    return out


# ----------------------------------------------------------------- AGENTSTATE comparisons

def kind(v: Any) -> int:
    t = type(v)
    if v is None:
        return T_NULL
    if t is bool:
        return T_BOOL
    if t is int or t is float or t is decimal.Decimal:
        return T_NUMBER
    if t is str:
        return T_STRING
    if t is bytes:
        return T_BYTES
    if t is list:
        return T_LIST
    if t is dict:
        return T_MAP
    if t is MSet:
        return T_SET
    if t is codec.Opaque:
        return T_OPAQUE
    if isinstance(v, _dt.datetime):
        return T_DATETIME
    if isinstance(v, _uuid.UUID):
        return T_UUID
    if isinstance(v, (set, frozenset)):
        return T_SET
    if isinstance(v, tuple):
        return T_LIST
    return T_OPAQUE


def _is_nan(v: Any) -> bool:
    if type(v) is float:
        return v != v
    if type(v) is decimal.Decimal:
        return v.is_nan()
    return False


def _aware(d: _dt.datetime) -> bool:
    return d.utcoffset() is not None


def equal(a: Any, b: Any) -> bool:
    """AGENTSTATE equality (docs/memory.md §3.2)."""
    ka, kb = kind(a), kind(b)
    if ka != kb:
        return False
    if ka == T_NUMBER:
        if _is_nan(a) or _is_nan(b):
            return False
        return a == b
    if ka == T_DATETIME:
        return _aware(a) == _aware(b) and a == b
    if ka == T_LIST:
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if ka == T_MAP:
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if ka == T_SET:
        la, lb = list(a), list(b)
        return (len(la) == len(lb) and all(any(equal(x, y) for y in lb) for x in la)
                and all(any(equal(y, x) for x in la) for y in lb))
    if ka == T_OPAQUE:
        return type(a) is type(b) and tuple(a) == tuple(b) if isinstance(a, tuple) else a == b
    return a == b


def order(a: Any, b: Any) -> int | None:
    """-1, 0 or 1 when ``a`` and ``b`` are comparable in AGENTSTATE mode, else None."""
    ka, kb = kind(a), kind(b)
    if ka != kb:
        return None
    if ka == T_NUMBER:
        if _is_nan(a) or _is_nan(b):
            return None
    elif ka == T_DATETIME:
        if _aware(a) != _aware(b):
            return None
    elif ka not in (T_STRING, T_BYTES, T_BOOL):
        return None
    return -1 if a < b else (1 if a > b else 0)


def _agentstate(op: int, v: Any, operand: Any) -> bool:
    if op == EQ:
        return (operand is None) if v is MISSING else equal(v, operand)
    if op == NE:
        return (operand is not None) if v is MISSING else not equal(v, operand)
    if op == IN:
        return any((x is None) if v is MISSING else equal(v, x) for x in operand)
    if op == NIN:
        return not any((x is None) if v is MISSING else equal(v, x) for x in operand)
    if v is MISSING:
        return False
    c = order(v, operand)
    if c is None:
        return False
    if op == GT:
        return c > 0
    if op == GTE:
        return c >= 0
    if op == LT:
        return c < 0
    return c <= 0  # LTE


# ----------------------------------------------------------------- LANGGRAPH_PYTHON comparisons

def _float(x: Any) -> float:
    try:
        return float(x)
    except Exception as e:  # noqa: BLE001 - reported as InMemoryStore would raise it
        raise EvaluationError(type(e).__name__, str(e)) from None


def _python(op: int, v: Any, operand: Any) -> bool:
    if v is MISSING:
        v = None
    try:
        if op == EQ:
            return bool(v == operand)
        if op == NE:
            return bool(v != operand)
        if op == IN:
            return any(v == x for x in operand)
        if op == NIN:
            return not any(v == x for x in operand)
    except EvaluationError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. comparing naive and aware datetimes is fine; others surface
        raise EvaluationError(type(e).__name__, str(e)) from None
    left = _float(v)
    right = _float(operand)
    if op == GT:
        return left > right
    if op == GTE:
        return left >= right
    if op == LT:
        return left < right
    return left <= right  # LTE


# ----------------------------------------------------------------- LANGGRAPH_JS comparisons

MAX_SAFE_INTEGER = 2**53 - 1
_NAN = float("nan")
# StrWhiteSpaceChar: WhiteSpace and LineTerminator (ECMA-262 §7.2, §7.3)
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_DECIMAL = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|Infinity)\Z")
_JS_RADIX = re.compile(r"0(?:([xX])([0-9a-fA-F]+)|([oO])([0-7]+)|([bB])([01]+))\Z")


def _int_to_double(v: int) -> float:
    try:
        return float(v)  # round to nearest, ties to even, as Number(bigint)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def js_string_to_number(text: str) -> float:
    """``Number(text)`` (ECMA-262 StringToNumber): whitespace trimmed, "" is 0, decimal literals with an
    optional sign, ``Infinity``, and unsigned 0x/0o/0b integers; anything else is NaN."""
    t = text.strip(_JS_SPACE)
    if not t:
        return 0.0
    if _JS_DECIMAL.match(t):
        sign = -1.0 if t[0] == "-" else 1.0
        body = t.lstrip("+-")
        return sign * float("inf") if body == "Infinity" else float(t)  # float() rounds correctly
    m = _JS_RADIX.match(t)
    if m:
        digits, base = (m.group(2), 16) if m.group(1) else ((m.group(4), 8) if m.group(3) else (m.group(6), 2))
        return _int_to_double(int(digits, base))
    return _NAN


def js_number(v: Any) -> float:
    """``Number(v)`` of the JavaScript value a stored or given value stands for."""
    if v is MISSING:
        return _NAN
    if v is None:
        return 0.0
    t = type(v)
    if t is bool:
        return 1.0 if v else 0.0
    if t is int:
        return _int_to_double(v)
    if t is float:
        return v
    if t is str:
        return js_string_to_number(v)
    if t is list or t is bytes:  # Array/Uint8Array: ToString joins the elements with ","
        if not v:
            return 0.0
        if len(v) > 1:
            return _NAN  # a "," is never part of a number
        x = v[0]
        return 0.0 if x is None else js_number(x) if type(x) is not bool else _NAN  # String(true) is "true"
    if t is decimal.Decimal:
        return js_string_to_number(str(v))  # the client's Decimal: its canonical text
    return _NAN  # maps, sets, datetimes, UUIDs, opaque values


def _js_kind(v: Any) -> int:
    """0 undefined, 1 null, 2 boolean, 3 number, 4 bigint, 5 string, 6 an object."""
    if v is MISSING:
        return 0
    if v is None:
        return 1
    t = type(v)
    if t is bool:
        return 2
    if t is float:
        return 3
    if t is int:
        return 3 if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER else 4
    if t is str:
        return 5
    return 6


def js_strict_equal(a: Any, b: Any, nan_equal: bool = False) -> bool:
    """``a === b`` (``nan_equal``: SameValueZero, as ``Array.includes``)."""
    ka = _js_kind(a)
    if ka != _js_kind(b) or ka == 6:
        return False
    if ka == 3:
        fa, fb = float(a), float(b)
        return fa == fb or (nan_equal and fa != fa and fb != fb)
    if ka <= 1:
        return True
    return a == b


def _js(op: int, v: Any, operand: Any) -> bool:
    if op == EQ:
        return js_strict_equal(v, operand)
    if op == NE:
        return not js_strict_equal(v, operand)
    if op == IN:
        return any(js_strict_equal(v, x, True) for x in operand)
    if op == NIN:
        return not any(js_strict_equal(v, x, True) for x in operand)
    left, right = js_number(v), js_number(operand)
    if op == GT:
        return left > right
    if op == GTE:
        return left >= right
    if op == LT:
        return left < right
    return left <= right  # LTE


# ----------------------------------------------------------------- evaluation

def resolve(value: Any, path: tuple) -> Any:
    """The value at ``path`` (MISSING when a key is absent, an index out of range, or a step goes into a
    value that is not a map or list)."""
    for seg in path:
        if type(seg) is Digits and type(value) is list:
            seg = int(seg)
        if type(seg) is not int:
            if type(value) is not dict:
                return MISSING
            value = value.get(seg, MISSING)
            if value is MISSING:
                return MISSING
        else:
            if type(value) is not list:
                return MISSING
            if seg >= len(value):
                return MISSING
            value = value[seg]
    return value


def _type_matches(v: Any, t: int, mode: int) -> bool:
    if mode == LANGGRAPH_PYTHON:
        if t == T_MAP:
            return isinstance(v, dict)
        if t == T_LIST:
            return isinstance(v, (list, tuple)) and type(v) is not codec.Opaque
    return kind(v) == t


def evaluate(node, views: dict[int, Any]) -> bool:
    """Whether an item matches ``node``; ``views`` holds the item's value decoded per mode (modes_of)."""
    if type(node) is Cond:
        op = node.op
        if op == FAIL:
            raise EvaluationError(*node.value)
        v = resolve(views[node.mode], node.path)
        if op == EXISTS:
            return v is not MISSING
        if op == IS_TYPE:
            return v is not MISSING and _type_matches(v, node.value, node.mode)
        if op == LENGTH_EQ:
            return (v is not MISSING and kind(v) in (T_LIST, T_MAP, T_SET) and not _is_opaque(v)
                    and len(v) == node.value)
        if node.mode == LANGGRAPH_PYTHON:
            return _python(op, v, node.value)
        if node.mode == LANGGRAPH_JS:
            return _js(op, v, node.value)
        return _agentstate(op, v, node.value)
    if type(node) is All:
        for child in node.children:
            if not evaluate(child, views):
                return False
        return True
    if type(node) is AnyOf:
        for child in node.children:
            if evaluate(child, views):
                return True
        return False
    return not evaluate(node.child, views)


def _is_opaque(v: Any) -> bool:
    return type(v) is codec.Opaque


def matcher(node) -> Callable[[bytes], bool] | None:
    """A function from an item's value encoding to whether it matches (None: no filter, everything matches)."""
    if node is None:
        return None
    decoders = [(mode, DECODERS[mode]) for mode in sorted(modes_of(node))]
    if len(decoders) == 1:
        mode, dec = decoders[0]

        def match_one(encoding: bytes) -> bool:
            return evaluate(node, {mode: dec(encoding)})
        return match_one

    def match(encoding: bytes) -> bool:
        return evaluate(node, {mode: dec(encoding) for mode, dec in decoders})
    return match


# ----------------------------------------------------------------- the expression form

def _bad(field: str, message: str) -> ApiError:
    return ApiError("INVALID_FILTER", f"{field}: {message}", field=field)


def compile_expression(expr: Any, field: str = "filter.expression") -> Any:
    """A LangGraph-style filter map (decoded with :func:`decode_native`) as a tree in AGENTSTATE mode;
    INVALID_FILTER naming the part at fault when it is malformed."""
    counter = [0]
    return _compile_map(expr, field, 0, counter)


def _count(counter: list, field: str, depth: int) -> None:
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise _bad(field, f"more than {MAX_NODES} filter nodes")
    if depth > MAX_DEPTH:
        raise _bad(field, f"nested deeper than {MAX_DEPTH}")


def _compile_map(expr: Any, field: str, depth: int, counter: list):
    _count(counter, field, depth)
    if type(expr) is not dict:
        raise _bad(field, f"a filter expression must be a map, not {_kind_name(expr)}")
    children = []
    for key, value in expr.items():
        sub = f"{field}[{key!r}]"
        if key in ("$and", "$or"):
            if type(value) is not list:
                raise _bad(sub, f"{key} takes a list of filter maps")
            parts = [_compile_map(x, f"{sub}[{i}]", depth + 1, counter) for i, x in enumerate(value)]
            children.append(All(parts) if key == "$and" else AnyOf(parts))
        elif key.startswith("$"):
            raise _bad(sub, f"unknown operator {key!r} (field conditions go under a field name)")
        else:
            path = tuple(Digits(p) if p.isdigit() and p.isascii() else p for p in key.split("."))
            children.append(_compile_field(path, value, sub, depth + 1, counter))
    return children[0] if len(children) == 1 else All(children)


def _compile_field(path: tuple, value: Any, field: str, depth: int, counter: list):
    _count(counter, field, depth)
    if type(value) is dict and value and any(k.startswith("$") for k in value):
        if not all(k.startswith("$") for k in value):
            raise _bad(field, "mixes operators and plain keys")
        conds = []
        for op_name, operand in value.items():
            sub = f"{field}[{op_name!r}]"
            op = OPERATORS.get(op_name)
            if op is None:
                raise _bad(sub, f"unknown operator {op_name!r} (one of {', '.join(OPERATORS)})")
            if op in (IN, NIN):
                if type(operand) is not list:
                    raise _bad(sub, f"{op_name} takes a list")
                if len(operand) > MAX_IN_VALUES:
                    raise _bad(sub, f"{op_name} takes at most {MAX_IN_VALUES} values")
            _count(counter, sub, depth + 1)
            conds.append(Cond(path, op, operand, AGENTSTATE))
        return conds[0] if len(conds) == 1 else All(conds)
    return Cond(path, EQ, value, AGENTSTATE)


def _kind_name(v: Any) -> str:
    return {T_NULL: "null", T_BOOL: "a bool", T_NUMBER: "a number", T_STRING: "a string", T_BYTES: "bytes",
            T_LIST: "a list", T_MAP: "a map", T_DATETIME: "a datetime", T_UUID: "a UUID", T_SET: "a set",
            T_OPAQUE: "an opaque value"}[kind(v)]
