"""The LangGraph savers' mirrors (agentstate.langgraph._mirror): one suite, run against both twins.

What the savers rely on: a mirror matches the object it was made from, it stops matching after any
in-place change at any depth, whenever it matches LangGraph's serializer gives the same bytes for the
object and for what the mirror recorded, and a thawed mirror is a new object sharing nothing mutable
with the original or with another thaw.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import importlib
import os
import subprocess
import sys
import uuid
import weakref
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph", reason="the langgraph extra is part of the test dependencies")

import pydantic  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERDE = JsonPlusSerializer()


@pytest.fixture(params=["_mirror_c", "_mirror_py"])
def m(request):
    # both twins, whatever the selector picks (test_selector_* check the selector)
    return importlib.import_module(f"agentstate.langgraph.{request.param}")


# ---------------------------------------------------------------- values of every kind the walk knows

class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Step(pydantic.BaseModel):
    tool: str
    args: dict = {}


class Plan(pydantic.BaseModel):
    goal: str
    steps: list[Step] = []
    budget: Optional[float] = None


class Loose(pydantic.BaseModel, extra="allow"):
    name: str


class Secretive(pydantic.BaseModel):
    name: str
    _secret: int = pydantic.PrivateAttr(default=0)


@dataclasses.dataclass
class Point:
    x: int
    y: list


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: Any


@dataclasses.dataclass(slots=True)
class Slotted:
    a: Any
    b: int = 0


def message_samples() -> list:
    return [
        HumanMessage("hello", id="h-1"),
        AIMessage("", id="a-1", tool_calls=[{"name": "search", "args": {"query": "q", "n": [1, 2]}, "id": "c-1"}],
                  additional_kwargs={"x": {"y": [1, {"z": 2}]}}),
        ToolMessage("result", tool_call_id="c-1", id="t-1"),
    ]


def samples() -> list:
    return [
        None, True, 0, -0.0, 0.0, float("nan"), 1.5, 2**63 - 1, "s", b"b",
        [1, [2, [3]]], (1, [2]), {"a": {"b": [1, 2]}, 3: "int key"}, {},
        dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), dt.date(2026, 1, 2), uuid.UUID(int=7),
        decimal.Decimal("1.10"), Colour.RED,
        Plan(goal="g", steps=[Step(tool="t", args={"k": [1]})]), Loose(name="n", other={"x": 1}),
        Point(1, [2, 3]), Frozen([1]), Slotted([1], 2),
        *message_samples(),
        {"messages": message_samples(), "plan": Plan(goal="x")},
    ]


@pytest.mark.parametrize("value", samples(), ids=lambda v: type(v).__name__)
def test_a_mirror_matches_and_thaws_like_its_original(m, value):
    mir = m.freeze(value)
    assert type(mir) is tuple and m.matches(value, mir)
    copy = m.thaw(mir)
    assert SERDE.dumps_typed(copy) == SERDE.dumps_typed(value)
    assert m.matches(copy, mir)  # what reads hand out matches the mirror it came from
    assert _describe(m.freeze(copy)) == _describe(mir)


def _describe(mir: tuple) -> list:
    """A mirror with its markers by name (each twin has its own marker objects) and a model's set of fields
    as a set: comparable between the twins and between a value and its thawed copy (a set's iteration order
    depends on the string hash seed and on how it was built; matching compares fields as a set)."""
    return [repr(x) if type(x).__name__ in ("_Op", "Op")
            else frozenset(x) if type(x) is tuple and all(type(n) is str for n in x) else x for x in mir]


@pytest.mark.parametrize("value", samples(), ids=lambda v: type(v).__name__)
def test_both_twins_record_the_same_mirror(value):
    from agentstate.langgraph import _mirror_c, _mirror_py
    assert _describe(_mirror_c.freeze(value)) == _describe(_mirror_py.freeze(value))


def _mutables(obj, out=None, depth=0):
    """Every mutable container or object reachable from obj."""
    out = [] if out is None else out
    if isinstance(obj, (list, dict)) or isinstance(obj, pydantic.BaseModel) or (
            dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        out.append(obj)
    if isinstance(obj, dict):
        for v in obj.values():
            _mutables(v, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _mutables(v, out, depth + 1)
    elif isinstance(obj, pydantic.BaseModel):
        _mutables(obj.__dict__, out, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _mutables(getattr(obj, f.name), out, depth + 1)
    return out


@pytest.mark.parametrize("value", [v for v in samples() if _mutables(v)], ids=lambda v: type(v).__name__)
def test_a_thaw_shares_nothing_mutable(m, value):
    mir = m.freeze(value)
    one, two = m.thaw(mir), m.thaw(mir)
    mine = {id(x) for x in _mutables(one)}
    assert not mine & {id(x) for x in _mutables(value)}
    assert not mine & {id(x) for x in _mutables(two)}


def test_in_place_changes_at_any_depth_stop_matching(m):
    msgs = message_samples()
    mir = m.freeze(msgs)
    edits = [
        lambda v: setattr(v[0], "content", v[0].content + " (seen)"),
        lambda v: v[1].tool_calls[0]["args"].__setitem__("query", "other"),
        lambda v: v[1].tool_calls[0]["args"]["n"].append(3),
        lambda v: v[1].additional_kwargs["x"]["y"][1].__setitem__("z", 3),
        lambda v: v[1].additional_kwargs["x"].pop("y"),
        lambda v: v[2].__dict__.__setitem__("name", "renamed"),
        lambda v: v.append(HumanMessage("more")),
        lambda v: v.__setitem__(0, HumanMessage("hello", id="h-1", name="n")),
    ]
    for edit in edits:
        value = m.thaw(mir)
        assert m.matches(value, mir)
        edit(value)
        assert not m.matches(value, mir)
        assert m.matches(m.thaw(mir), mir)  # the mirror itself never moved


def test_types_and_bits_decide_not_equality(m):
    for a, b in [(1, True), (1, 1.0), (0.0, -0.0), ([1], (1,)), ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
                 (decimal.Decimal("1.0"), decimal.Decimal("1.00")), (Point(1, [2]), Point(1, [2.0]))]:
        assert not m.matches(a, m.freeze(b)), (a, b)
    nan = float("nan")
    assert m.matches(nan, m.freeze(nan)) and m.matches(float("nan"), m.freeze(nan))
    # an equal but separate immutable leaf of a kind compared by identity is not claimed unchanged
    assert not m.matches(dt.date(2026, 1, 2), m.freeze(dt.date(2026, 1, 2)))
    # nor is anything that is not exactly what was recorded
    assert not m.matches([1, 2], m.freeze([1])) and not m.matches({"a": 1}, m.freeze({"b": 1}))
    assert not m.matches(Plan(goal="g"), m.freeze(Step(tool="g")))


def test_pydantic_state_beyond_fields(m):
    p = Plan(goal="g")
    mir = m.freeze(p)
    q = m.thaw(mir)
    q.budget = 2.0  # assignment marks the field set and changes __dict__
    assert not m.matches(q, mir)
    q = m.thaw(mir)
    q.__pydantic_fields_set__.add("budget")  # the fields set alone
    assert not m.matches(q, mir)
    loose = Loose(name="n", other=1)
    lm = m.freeze(loose)
    loose2 = m.thaw(lm)
    loose2.__pydantic_extra__["other"] = 2
    assert not m.matches(loose2, lm)
    copy, again = m.thaw(lm), m.thaw(lm)
    assert type(copy) is Loose and copy.__pydantic_fields_set__ == loose.__pydantic_fields_set__
    assert copy.__pydantic_fields_set__ is not again.__pydantic_fields_set__
    assert copy.__pydantic_extra__ == {"other": 1} and copy.__pydantic_extra__ is not again.__pydantic_extra__


def test_aliasing_inside_a_value_is_kept(m):
    shared = {"k": [1]}
    value = [shared, shared, {"again": shared}, (shared,)]
    mir = m.freeze(value)
    copy = m.thaw(mir)
    assert copy[0] is copy[1] is copy[2]["again"] is copy[3][0] and copy[0] is not shared
    assert m.matches(value, mir) and m.matches(copy, mir)
    assert not m.matches([shared, {"k": [2]}, {"again": shared}, (shared,)], mir)
    inner: list = [1]
    inner.append(inner)  # a cycle below the root is kept as a cycle
    copy = m.thaw(m.freeze([inner]))
    assert copy[0][1] is copy[0] and copy[0] is not inner
    root: list = [1]
    root.append(root)  # a cycle back to the root (no serializer stores it) ends one level down, in both twins
    copy = m.thaw(m.freeze(root))
    assert copy[1][1] is copy[1] and copy[1] is not copy and copy is not root


def test_what_the_walk_does_not_know_is_refused(m):
    class Custom:
        def __init__(self):
            self.x = 1

    for value, twin in [({1, 2}, {1, 2}), ([Custom()], [Custom()]), (bytearray(b"x"), bytearray(b"x")),
                        ({"deep": [set()]}, {"deep": [set()]})]:
        with pytest.raises(m.Unmirrorable):
            m.freeze(value)
    deep: Any = []
    cur = deep
    for _ in range(m.MAX_DEPTH + 5):
        cur.append([])
        cur = cur[0]
    with pytest.raises(m.Unmirrorable):
        m.freeze(deep)


def test_records_prefix_and_hand_out(m):
    msgs = message_samples()
    recs = [m.Rec(SERDE.dumps_typed(x), m.freeze(x), m.freeze(x)) for x in msgs]
    assert m.common_prefix(msgs, recs) == 3
    assert m.common_prefix(msgs[:2], recs) == 2
    changed = m.hand_out(recs, None)
    changed[1].tool_calls[0]["args"]["query"] = "edited"
    assert m.common_prefix(changed, recs) == 1
    assert m.common_prefix(msgs, [m.Rec(b"", None)] + recs[1:]) == 0  # no proof: never unchanged
    made = []

    def fresh(rec):
        made.append(rec)
        return SERDE.loads_typed(rec.opaque)

    recs[0].source = None
    recs[2].source = m.UNMIRRORABLE
    out = m.hand_out(recs, fresh)
    assert made == [recs[0], recs[2]]
    assert [type(x) for x in out] == [type(x) for x in msgs]
    again = m.hand_out(recs, fresh)
    assert all(a is not b for a, b in zip(out, again))


def _hand_out_again(m, recs):
    """hand_out, and for each item whether it is the object the record's previous hand-out gave (a new
    object cannot have the old one's id: the record holds the old one until the new one is made)."""
    before = [id(r.given) if r.given is not None else None for r in recs]
    out = m.hand_out(recs, None)
    return out, [id(x) == b for x, b in zip(out, before)]


def test_an_object_nobody_else_holds_is_given_again(m):
    """The compiled twin gives again what it gave before when nothing else refers to it, or to anything
    mutable inside it, and it is exactly as a thaw would make it; anything else gets a new object. Either
    way every item equals the record's value and shares nothing mutable with what a caller still holds.
    The Python twin always makes new objects."""
    msgs = message_samples()
    recs = [m.Rec(SERDE.dumps_typed(x), m.freeze(x), m.freeze(x)) for x in msgs]
    reuse = m.NATIVE

    def check(out):
        assert [SERDE.dumps_typed(x) for x in out] == [SERDE.dumps_typed(x) for x in msgs]
        assert all(m.matches(x, r.source) for x, r in zip(out, recs))

    first, again = _hand_out_again(m, recs)
    assert again == [False] * 3
    held, again = _hand_out_again(m, recs)  # the first read is still held: new objects
    assert again == [False] * 3 and all(a is not b for a, b in zip(first, held))
    assert all(a.additional_kwargs is not b.additional_kwargs for a, b in zip(first, held))
    del first, held
    out, again = _hand_out_again(m, recs)
    assert again == [reuse] * 3
    check(out)
    # changed in place (at any depth, a private attribute too), then dropped: a new object for that one
    out[1].tool_calls[0]["args"]["n"].append(3)
    out[0].content = "changed"
    del out
    out, again = _hand_out_again(m, recs)
    assert again == [False, False, reuse]
    check(out)
    # changed and changed back: as good as new
    out[0].content = "changed"
    out[0].content = "hello"
    del out
    out, again = _hand_out_again(m, recs)
    assert again == [reuse] * 3
    check(out)
    # something mutable inside still held elsewhere, or the object watched by a weak reference: new objects
    kwargs, args = out[1].additional_kwargs["x"], out[1].tool_calls[0]["args"]
    watched = weakref.ref(out[2])
    del out
    out, again = _hand_out_again(m, recs)
    assert again == [reuse, False, False]
    check(out)
    assert out[1].additional_kwargs["x"] is not kwargs and out[1].tool_calls[0]["args"] is not args
    kwargs["x"] = "the caller's own copy"
    assert out[1].additional_kwargs == msgs[1].additional_kwargs
    del out, kwargs, args, watched
    out, again = _hand_out_again(m, recs)
    assert again == [reuse] * 3
    # the fields set comes back as a thaw makes it (a new set), whatever happened to the old one or who holds it
    out[0].model_fields_set.add("name")
    out[0].model_fields_set.discard("name")
    fields = out[0].model_fields_set
    del out
    out, again = _hand_out_again(m, recs)
    assert again == [reuse] * 3
    assert out[0].model_fields_set is not fields
    assert list(out[0].model_fields_set) == list(m.thaw(recs[0].source).model_fields_set)
    check(out)
    # an extra field or a private attribute changed in place: a new object
    models = [Loose(name="n", other={"x": 1}), Secretive(name="s")]
    mrecs = [m.Rec(b"", m.freeze(x), m.freeze(x)) for x in models]
    got = m.hand_out(mrecs, None)
    got[0].other["x"] = 2
    got[1]._secret = 5
    del got
    got, again = _hand_out_again(m, mrecs)
    assert again == [False, False] and got[0].other == {"x": 1} and got[1]._secret == 0
    del got
    got, again = _hand_out_again(m, mrecs)
    assert again == [reuse, reuse] and got[0].other == {"x": 1} and got[1]._secret == 0


# ---------------------------------------------------------------- property: matches => same bytes

leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True),
                   st.text(max_size=8), st.binary(max_size=8))


def _models(children):
    return st.one_of(
        st.builds(lambda g, s: Plan(goal=g, steps=[Step(tool=t, args=a) for t, a in s]), st.text(max_size=4),
                  st.lists(st.tuples(st.text(max_size=3), st.dictionaries(st.text(max_size=3), children, max_size=2)),
                           max_size=2)),
        st.builds(Point, st.integers(-2**63, 2**63 - 1), st.lists(children, max_size=3)),
        st.builds(lambda c, k: AIMessage(c, additional_kwargs=k), st.text(max_size=5),
                  st.dictionaries(st.text(max_size=3), children, max_size=3)),
    )


values = st.recursive(leaves, lambda children: st.one_of(
    st.lists(children, max_size=4), st.tuples(children, children),
    st.dictionaries(st.text(max_size=4), children, max_size=4), _models(children)), max_leaves=12)


def _dumps(v):
    """LangGraph's serialization of v, or None for a value it cannot serialize (never stored)."""
    try:
        return SERDE.dumps_typed(v)
    except (TypeError, ValueError):
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(a=values, b=values)
def test_matching_implies_the_same_serialization(m, a, b):
    mb = m.freeze(b)
    assert m.matches(b, mb)
    if m.matches(a, mb):
        assert _dumps(a) == _dumps(b)
    if _dumps(b) is not None:
        assert _dumps(m.thaw(mb)) == _dumps(b)
    # the twins agree
    other = importlib.import_module("agentstate.langgraph._mirror_py")
    assert other.matches(a, other.freeze(b)) == m.matches(a, mb)
    assert _describe(other.freeze(b)) == _describe(mb)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(v=values, data=st.data())
def test_a_random_in_place_edit_is_always_seen(m, v, data):
    mir = m.freeze(v)
    copy = m.thaw(mir)
    targets = _mutables(copy)
    if not targets:
        return
    t = targets[data.draw(st.integers(0, len(targets) - 1))]
    before = _dumps(copy)
    if isinstance(t, list):
        t.append("added")
    elif isinstance(t, dict):
        t["added-key-\u2603"] = 1
    elif isinstance(t, pydantic.BaseModel):
        t.__dict__[next(iter(t.__dict__))] = "replaced-\u2603"
    else:
        setattr(t, dataclasses.fields(t)[0].name, "replaced-\u2603")
    if _dumps(copy) != before:  # an edit the serializer sees must be seen by the mirror
        assert not m.matches(copy, mir)


# ---------------------------------------------------------------- the selector

def test_selector_picks_the_expected_module():
    from agentstate.langgraph import _mirror

    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert _mirror.implementation.__name__ == "agentstate.langgraph._mirror_py" and not _mirror.NATIVE
    else:
        assert _mirror.implementation.__name__ == "agentstate.langgraph._mirror_c", (
            "agentstate.langgraph._mirror fell back to pure Python: build the extension (pip install -e .)")
        assert _mirror.NATIVE and _mirror.implementation.__file__.endswith((".so", ".pyd"))
        for name in ("freeze", "thaw", "matches", "common_prefix", "hand_out", "seal"):
            assert type(getattr(_mirror, name)).__name__ in ("cython_function_or_method",
                                                             "builtin_function_or_method"), name


@pytest.mark.parametrize("env_value,expected", [(None, "_mirror_c"), ("1", "_mirror_py")])
def test_selector_in_a_fresh_interpreter(env_value, expected):
    env = {k: v for k, v in os.environ.items() if k != "SIDECAR_NO_EXTENSIONS"}
    if env_value is not None:
        env["SIDECAR_NO_EXTENSIONS"] = env_value
    out = subprocess.run([sys.executable, "-c", "from agentstate.langgraph import _mirror as m; "
                          "print(m.implementation.__name__)"], env=env, cwd=str(ROOT), capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == f"agentstate.langgraph.{expected}"
