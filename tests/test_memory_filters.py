"""Memory filter evaluation (sidecar/state/memory_filters.py, docs/memory.md §3), as pure functions.

AGENTSTATE mode: every operator, nested paths, type mixes, the documented edge cases, and properties (NE is
exactly not EQ, IN is an OR of EQs, expressions mean their typed trees). LANGGRAPH_PYTHON mode: each
comparison against LangGraph InMemoryStore's own ``_apply_operator`` on random values, exception type and
message included.
"""
from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.memory import _apply_operator

from agentstate import codec
from sidecar.state import memory_filters as mf

A, PY = mf.AGENTSTATE, mf.LANGGRAPH_PYTHON


def match(node, value, mode=A) -> bool:
    enc = codec.encode(value)
    return mf.matcher(node)(enc)


def c(path, op, operand=None, mode=A):
    return mf.Cond(tuple(path), op, operand, mode)


# ---------------------------------------------------------------- AGENTSTATE: the documented cases

AWARE = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)
NAIVE = dt.datetime(2024, 1, 1, 12)


@pytest.mark.parametrize("value, operand, eq", [
    (1, 1.0, True),
    (1, True, False),
    (True, True, True),
    (2**64, 2.0**64, True),
    (2**64 + 1, 2.0**64, False),
    (decimal.Decimal("1.10"), 1.1, False),
    (decimal.Decimal("1.5"), 1.5, True),
    (float("nan"), float("nan"), False),
    ("a", "a", True),
    (b"a", "a", False),
    (AWARE, AWARE.astimezone(dt.timezone(dt.timedelta(hours=2))), True),
    (AWARE, NAIVE, False),
    ([1, {"a": 2}], [1.0, {"a": 2}], True),
    ([1, 2], [2, 1], False),
    ({"a": 1}, {"a": 1, "b": None}, False),
    ({1, 2}, {2.0, 1}, True),
    (uuid.UUID(int=5), uuid.UUID(int=5), True),
    (codec.Opaque("t", b"x"), codec.Opaque("t", b"x"), True),
    (codec.Opaque("t", b"x"), codec.Opaque("u", b"x"), False),
    (None, None, True),
])
def test_equality(value, operand, eq):
    assert match(c(["v"], mf.EQ, mf.decode_native(codec.encode(operand))), {"v": value}) is eq
    assert match(c(["v"], mf.NE, mf.decode_native(codec.encode(operand))), {"v": value}) is (not eq)


@pytest.mark.parametrize("value, operand, lt", [
    (1, 2.5, True), (decimal.Decimal("3"), 2, False), ("Date", "b", True), ("é", "z", False),
    (b"\x00", b"\x01", True), (False, True, True), (NAIVE, NAIVE + dt.timedelta(1), True),
    (AWARE, AWARE + dt.timedelta(1), True),
])
def test_ordered_comparisons(value, operand, lt):
    v = {"v": value}
    assert match(c(["v"], mf.LT, operand), v) is lt
    assert match(c(["v"], mf.GTE, operand), v) is (not lt)


@pytest.mark.parametrize("value, operand", [
    ("3", 2), (True, 0), (None, 1), (AWARE, NAIVE), ([1], [0]), ({"a": 1}, {"a": 0}), (float("nan"), 1),
    (1, "1"), (decimal.Decimal("NaN"), 1),
])
def test_incomparable_values_never_match(value, operand):
    for op in (mf.GT, mf.GTE, mf.LT, mf.LTE):
        assert not match(c(["v"], op, operand), {"v": value})


def test_missing_paths():
    doc = {"a": {"b": [10, {"c": 1}]}, "s": "x"}
    assert match(c(["a", "b", 1, "c"], mf.EQ, 1), doc)
    assert match(c(["a", "b", 5], mf.EQ, None), doc)  # past the end: missing, and EQ null matches missing
    assert not match(c(["s", "t"], mf.EXISTS), doc)  # into a string: missing
    assert match(c(["s", "t"], mf.NE, 1), doc)  # NE matches a missing path
    assert not match(c(["s", "t"], mf.NE, None), doc)
    assert not match(c(["zz"], mf.GT, 0), doc) and not match(c(["zz"], mf.LTE, 0), doc)
    assert match(c(["zz"], mf.NIN, [1, 2]), doc) and not match(c(["zz"], mf.NIN, [None]), doc)
    assert match(c(["zz"], mf.IN, [None]), doc)
    assert match(c([], mf.IS_TYPE, mf.T_MAP), doc) and match(c([], mf.LENGTH_EQ, 2), doc)
    assert match(c(["a", "b"], mf.IS_TYPE, mf.T_LIST), doc) and match(c(["a", "b"], mf.LENGTH_EQ, 2), doc)
    assert match({"v": None} and c(["v"], mf.EXISTS), {"v": None})  # a stored null is present
    with pytest.raises(mf.EvaluationError):
        match(c([], mf.FAIL, ("ValueError", "boom")), doc)


def test_expression_compiles_to_its_tree():
    tree = mf.compile_expression({"a.b": 1, "n": {"$gt": 1, "$lt": 5}, "$or": [{"x": 1}, {"y": {"$in": [1]}}]})
    assert isinstance(tree, mf.All) and len(tree.children) == 3
    first = tree.children[0]
    assert (first.path, first.op, first.value) == (("a", "b"), mf.EQ, 1)
    assert isinstance(tree.children[2], mf.AnyOf)
    for bad in ({"$nope": 1}, {"a": {"$gt": 1, "b": 1}}, {"a": {"$in": 5}}, {"$and": 1}, 5):
        with pytest.raises(Exception) as info:
            mf.compile_expression(bad)
        assert getattr(info.value, "reason", None) == "INVALID_FILTER"


# ---------------------------------------------------------------- properties

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.5, 1.0, 2.0, -0.0, 2**70]),
                    st.sampled_from(["a", "b", "A", "", "1", "é"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from("abc"), inner, max_size=3)),
                      max_leaves=6)
docs = st.dictionaries(st.sampled_from("abcd"), values, max_size=4)
paths = st.lists(st.one_of(st.sampled_from("abcd"), st.integers(0, 2)), min_size=0, max_size=3)


@settings(max_examples=300, deadline=None)
@given(doc=docs, path=paths, operand=values, ops=st.lists(values, max_size=3))
def test_agentstate_laws(doc, path, operand, ops):
    eq = match(c(path, mf.EQ, operand), doc)
    assert match(c(path, mf.NE, operand), doc) is (not eq)
    assert match(c(path, mf.IN, ops), doc) is any(match(c(path, mf.EQ, o), doc) for o in ops)
    assert match(c(path, mf.NIN, ops), doc) is (not match(c(path, mf.IN, ops), doc))
    lt, gt = match(c(path, mf.LT, operand), doc), match(c(path, mf.GT, operand), doc)
    lte, gte = match(c(path, mf.LTE, operand), doc), match(c(path, mf.GTE, operand), doc)
    assert not (lt and gt)
    assert lte is (lt or (eq and gte))
    if eq and operand is not None:
        assert lte is gte  # equal values are comparable or not, both ways alike
    assert match(mf.Not(c(path, mf.EXISTS)), doc) is (not match(c(path, mf.EXISTS), doc))


@settings(max_examples=200, deadline=None)
@given(doc=docs, key=st.sampled_from("abcd"), sub=st.sampled_from("abc"), operand=scalars)
def test_dotted_expression_keys_are_paths(doc, key, sub, operand):
    assert match(mf.compile_expression({f"{key}.{sub}": operand}), doc) is match(c([key, sub], mf.EQ, operand), doc)
    both = mf.compile_expression({key: {"$ne": operand}, "$or": [{sub: operand}, {key: operand}]})
    expected = (match(c([key], mf.NE, operand), doc)
                and (match(c([sub], mf.EQ, operand), doc) or match(c([key], mf.EQ, operand), doc)))
    assert match(both, doc) is expected


# ---------------------------------------------------------------- LANGGRAPH_PYTHON against InMemoryStore

py_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(2**1030, 2**1031),
                      st.floats(allow_nan=False, width=32), st.sampled_from(["1", "2.5", "x", "", " 3 ", "inf"]),
                      st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.sampled_from("ab"), st.integers(0, 1),
                                                                                max_size=2))
PY_OPS = {"$eq": mf.EQ, "$ne": mf.NE, "$gt": mf.GT, "$gte": mf.GTE, "$lt": mf.LT, "$lte": mf.LTE}


def reference(value, op_name, operand):
    try:
        return bool(_apply_operator(value, op_name, operand)), None
    except Exception as e:  # noqa: BLE001
        return None, (type(e).__name__, str(e))


def ours(value, op, operand, present=True):
    doc = {"v": value} if present else {}
    node = c(["v"], op, mf.decode_python(codec.encode(operand)), PY)
    try:
        return match(node, doc, PY), None
    except mf.EvaluationError as e:
        return None, (e.exception, e.message)


@settings(max_examples=500, deadline=None)
@given(value=py_values, op_name=st.sampled_from(sorted(PY_OPS)), operand=py_values, present=st.booleans())
def test_langgraph_python_mode_is_inmemorystore(value, op_name, operand, present):
    want = reference(value if present else None, op_name, operand)
    assert ours(value, PY_OPS[op_name], operand, present) == want
