"""The LangGraph savers store exactly what they are given (issues 10 and 20), side by side with InMemorySaver.

Every scenario runs the same script against InMemorySaver (LangGraph's reference) and against the sidecar
savers — both classes, each through the sync and the async graph API — and compares the whole
get_state_history, read back through a fresh saver too. The caller does what real callers do: edits
objects returned by get_state before giving them back, nodes change earlier messages in place, results
are changed after invoke returned.
"""
from __future__ import annotations

import asyncio
import logging
import operator
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

pytest.importorskip("langgraph", reason="the langgraph extra is part of the test dependencies")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from agentstate.langgraph import AsyncSidecarSaver, SidecarSaver  # noqa: E402
from agentstate.langgraph._core import Known  # noqa: E402
from langgraph_exact import COMBOS, Api, canon, close, combo_id, compare_typed, diff, history_of  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lg(module_sidecar):
    return module_sidecar


@pytest.fixture
def ns():
    return f"exact-{uuid.uuid4().hex[:10]}"


def cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


async def side_by_side(address: str, ns: str, combo, script, **saver_kw) -> tuple:
    """Runs ``script(api, saver, thread)`` (returning a trace of what the caller saw) with InMemorySaver and
    with the combo's saver; asserts traces and histories are equal, also as a fresh saver reads them back."""
    cls, kind = combo
    api = Api(kind)
    want_trace, want = await script(api, InMemorySaver(), "t")
    saver = cls(address, namespace=ns, **saver_kw)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    try:
        got_trace, got = await script(api, saver, thread)
    finally:
        await close(saver)
    assert got_trace == want_trace
    assert not diff(got, want), diff(got, want)
    for reader_cls in (cls, SidecarSaver if cls is AsyncSidecarSaver else AsyncSidecarSaver):
        fresh = reader_cls(address, namespace=ns)
        try:
            again = history_of(await api.history(script.graph(fresh), cfg(thread)))
        finally:
            await close(fresh)
        assert not diff(again, want), f"read back by a fresh {reader_cls.__name__}: {diff(again, want)}"
    return got_trace, got


def scripted(graph_factory):
    """Marks a script with the graph it runs (side_by_side reads the history back through it)."""
    def wrap(fn):
        fn.graph = graph_factory
        return fn
    return wrap


# ---------------------------------------------------------------- 1. editing a tool call before it runs

class Chat(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    counter: Annotated[int, operator.add]


def tool_graph(saver):
    def agent(s):
        n = len(s["messages"])
        return {"messages": [AIMessage("", id=f"ai-{n}", tool_calls=[
            {"name": "search", "args": {"query": "the first query"}, "id": f"call-{n}"}])]}

    def tools(s):
        call = s["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage(f"searched {call['args']['query']}", tool_call_id=call["id"],
                                         id=f"tool-{len(s['messages'])}")]}

    b = StateGraph(Chat)
    b.add_node("agent", agent)
    b.add_node("tools", tools)
    b.add_edge(START, "agent")
    b.add_edge("agent", "tools")
    b.add_edge("tools", END)
    return b.compile(checkpointer=saver, interrupt_before=["tools"])


@scripted(tool_graph)
async def edit_tool_call(api: Api, saver, thread: str):
    g = tool_graph(saver)
    c = cfg(thread)
    trace = [canon(await api.invoke(g, {"messages": [HumanMessage("find it", id="h-0")]}, c))]
    snap = await api.state(g, c)
    msg = snap.values["messages"][-1]
    msg.tool_calls[0]["args"]["query"] = "a different query"  # LangGraph's documented human-in-the-loop edit
    await api.update(g, c, {"messages": [msg]})
    out = await api.invoke(g, None, c)
    trace.append(canon(out))
    trace.append(out["messages"][-1].content)
    return trace, history_of(await api.history(g, c))


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_an_edited_tool_call_runs_and_is_stored(lg, ns, combo):
    trace, _ = asyncio.run(side_by_side(lg.address, ns, combo, edit_tool_call))
    assert trace[-1] == "searched a different query"


# ---------------------------------------------------------------- 2. a node changes an earlier message in place

def amending_graph(saver):
    def a(s):
        return {"messages": [AIMessage("hello", id=f"a-{len(s['messages'])}")]}

    def b(s):
        s["messages"][0].content += " (seen)"  # in place, then some other update
        return {"messages": [ToolMessage("noted", tool_call_id="x", id=f"b-{len(s['messages'])}")]}

    g = StateGraph(Chat)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


@scripted(amending_graph)
async def amend_in_place(api: Api, saver, thread: str):
    g = amending_graph(saver)
    c = cfg(thread)
    trace = []
    for turn in range(3):
        out = await api.invoke(g, {"messages": [HumanMessage(f"turn {turn}", id=f"h-{turn}")]}, c,
                               durability="sync")
        trace.append(canon(out))
        out["messages"][-1].content = "changed after invoke returned"  # must change nothing stored
    return trace, history_of(await api.history(g, c))


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_a_message_changed_in_place_by_a_node_is_stored(lg, ns, combo):
    trace, hist = asyncio.run(side_by_side(lg.address, ns, combo, amend_in_place))
    last = hist[-1]["values"]
    assert "turn 0 (seen) (seen) (seen)" in repr(last)


# ---------------------------------------------------------------- 3. callers that drop what they read

@scripted(amending_graph)
async def dropped_reads(api: Api, saver, thread: str):
    """Results and reads dropped by the caller, changed in place first or not: the compiled hand-out gives
    the objects of such a read again (nothing else refers to them), which must never show."""
    g = amending_graph(saver)
    c = cfg(thread)
    trace = []
    for turn in range(4):
        out = await api.invoke(g, {"messages": [HumanMessage(f"turn {turn}", id=f"h-{turn}")]}, c,
                               durability="sync")
        trace.append(canon(out))
        if turn % 2:
            out["messages"][0].content += " (changed by the caller, then dropped)"
            out["messages"][1].additional_kwargs["k"] = ["v"]
        del out
        snap = await api.state(g, c)
        trace.append(canon(snap.values))
        held = snap.values["messages"]
        held[-1].content = "changed in a read the caller keeps"
        kwargs = held[0].additional_kwargs
        other = (await api.state(g, c)).values  # read while the first one is held
        trace.append(canon(other))
        del snap, held, other
        kwargs["later"] = "a dict of a dropped read, kept and changed"
        trace.append(canon((await api.state(g, c)).values))
        del kwargs
        trace.append(canon((await api.state(g, c)).values))
    return trace, history_of(await api.history(g, c))


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_reads_dropped_by_the_caller_change_nothing(lg, ns, combo):
    asyncio.run(side_by_side(lg.address, ns, combo, dropped_reads))


def test_a_dropped_read_is_given_again_by_the_compiled_hand_out(lg, ns):
    """What makes the scenario above test something: with the compiled mirrors, a read's messages dropped by
    the caller come back as the same objects (a new object cannot have the old one's id: the saver holds the
    old one until the new one is made). A read the caller still holds is never given again."""
    from agentstate.langgraph import _mirror

    saver = SidecarSaver(lg.address, namespace=ns)
    try:
        g = amending_graph(saver)
        c = cfg("given-again")
        g.invoke({"messages": [HumanMessage("q", id="h")]}, c, durability="sync")
        ids = [id(m) for m in g.get_state(c).values["messages"]]
        again = [id(m) for m in g.get_state(c).values["messages"]]
        if _mirror.NATIVE:  # (the Python twin makes new objects, which may get the freed ones' ids)
            assert again == ids
        held = g.get_state(c).values["messages"]
        assert not {id(m) for m in g.get_state(c).values["messages"]} & {id(m) for m in held}
    finally:
        saver.close()


# ---------------------------------------------------------------- issue 20: an unchanged version keeps its value

def keeping_graph(saver):
    def a(s):
        return {"messages": [AIMessage("hello", id=f"a-{len(s['messages'])}")]}

    def b(s):
        s["messages"][-1].content += " (mutated in place by b)"  # messages keep their version
        return {"counter": 1}

    g = StateGraph(Chat)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


@scripted(keeping_graph)
async def keep_unchanged(api: Api, saver, thread: str):
    g = keeping_graph(saver)
    c = cfg(thread)
    trace = []
    for turn in range(2):
        out = await api.invoke(g, {"messages": [HumanMessage(f"q{turn}", id=f"h-{turn}")]}, c, durability="sync")
        trace.append(canon(out))
        trace.append(canon((await api.state(g, c)).values))
    return trace, history_of(await api.history(g, c))


def _stale(k: Known | None) -> Known | None:
    """``k`` with wrong roots for its lists: an append against it meets BASE_MISMATCH and is planned again."""
    if k is None or not k.lists:
        return k
    return Known(k.versions, {ch: (b"\x01" * 32 if ch in k.lists else r) for ch, r in k.roots.items()}, k.lists)


REPLANS: list[str] = []  # threads a stale saver forgot (what it does on BASE_MISMATCH before planning again)


def _counting(core):
    real = core.forget

    def forget(thread_ids=None):
        REPLANS.extend(thread_ids or ["*"])
        return real(thread_ids)

    core.forget = forget


class StaleBase(SidecarSaver):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        _counting(self._core)

    def _base_of(self, config):
        return _stale(super()._base_of(config))


class AsyncStaleBase(AsyncSidecarSaver):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        _counting(self._core)

    def _base_of(self, config):
        return _stale(super()._base_of(config))


@pytest.mark.parametrize("variant", ["default", "no-cache", "evicted", "replanned"])
@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_an_unchanged_version_keeps_the_stored_value(lg, ns, combo, variant):
    cls, kind = combo
    kw: dict[str, Any] = {}
    if variant == "no-cache":
        kw["cache_size"] = 0
    elif variant == "evicted":
        kw["cache_size"] = 1
    elif variant == "replanned":
        combo = (StaleBase if cls is SidecarSaver else AsyncStaleBase, kind)

    script = keep_unchanged
    if variant == "evicted":
        @scripted(keeping_graph)
        async def script(api, saver, thread):
            # other threads' checkpoints push the parent out of the one-entry cache after each put
            if hasattr(saver, "_core"):
                real = saver._core.accept

                def accept_then_evict(pending):
                    out = real(pending)
                    saver._core.remember(("other", "", uuid.uuid4().hex), Known({}, {}), latest=True)
                    assert saver._core.known(*pending.key) is None
                    return out

                saver._core.accept = accept_then_evict
            return await keep_unchanged(api, saver, thread)

    REPLANS.clear()
    trace, hist = asyncio.run(side_by_side(lg.address, ns, combo, script, **kw))
    assert "(mutated in place by b)" not in repr(hist)
    if variant == "replanned":
        assert REPLANS, "no put met BASE_MISMATCH: the variant tested nothing"


# ---------------------------------------------------------------- 3. typed state comes back typed

def test_typed_state_comes_back_as_its_classes(lg, ns):
    """Pydantic models, dataclasses, enums and models inside lists, in LangGraph's default mode."""
    problems = asyncio.run(compare_typed(lg.address, ns))
    assert not problems, "\n".join(problems)


def test_typed_state_in_strict_mode(lg, ns):
    """LANGGRAPH_STRICT_MSGPACK=true: the graph's with_allowlist decides, for the savers as for InMemorySaver
    (LangGraph reads the setting at import, hence a process of its own)."""
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true", "PYTHONPATH": str(ROOT / "tests")}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "langgraph_exact.py"), lg.address, ns], env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr


# ---------------------------------------------------------------- property: random scripts, random edits

class PState(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    notes: dict
    counter: Annotated[int, operator.add]
    edits: list  # in-place edits the agent node makes before it answers


def edit(state: dict, spec: tuple) -> None:
    """Changes ``state`` in place where ``spec`` points (positions are taken modulo what is there)."""
    where, i, what = spec
    msgs = state.get("messages") or []
    if where == "notes":
        notes = state.get("notes")
        if isinstance(notes, dict):
            inner = notes.setdefault("inner", {"list": []})
            if isinstance(inner, dict):
                lst = inner.setdefault("list", [])
                lst.append(what) if i % 2 else inner.__setitem__(f"k{i % 3}", what)
        return
    if not msgs:
        return
    m = msgs[i % len(msgs)]
    if where == "content":
        m.content = f"{m.content}|{what}"
    elif where == "args" and getattr(m, "tool_calls", None):
        m.tool_calls[0]["args"]["query"] = what
        m.tool_calls[0]["args"].setdefault("history", []).append(what)
    elif where == "kwargs":
        m.additional_kwargs.setdefault("nested", {"items": []})["items"].append({"v": what})


def random_graph(saver):
    def agent(s):
        for spec in s.get("edits") or []:
            edit(s, spec)
        n = len(s.get("messages") or [])
        if n % 3 == 0:
            return {"messages": [AIMessage(f"answer {n}", id=f"ai-{n}")], "counter": 1, "edits": []}
        return {"messages": [AIMessage("", id=f"ai-{n}", tool_calls=[
            {"name": "search", "args": {"query": f"q{n}"}, "id": f"call-{n}"}])],
            "notes": {"inner": {"list": [n]}, "last": n}, "edits": []}

    def tools(s):
        last = s["messages"][-1]
        calls = getattr(last, "tool_calls", None) or [{"args": {"query": "none"}, "id": "none"}]
        return {"messages": [ToolMessage(f"searched {calls[0]['args'].get('query')}", tool_call_id=calls[0]["id"],
                                         id=f"tool-{len(s['messages'])}")], "counter": 1}

    def route(s):
        return "tools" if getattr(s["messages"][-1], "tool_calls", None) else END

    b = StateGraph(PState)
    b.add_node("agent", agent)
    b.add_node("tools", tools)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", route, ["tools", END])
    b.add_edge("tools", END)
    return b.compile(checkpointer=saver, interrupt_before=["tools"])


spec = st.tuples(st.sampled_from(["content", "args", "kwargs", "notes"]), st.integers(0, 9),
                 st.text("abcxyz", min_size=1, max_size=4))
ops = st.lists(st.one_of(
    st.tuples(st.just("invoke"), st.lists(spec, max_size=2), st.sampled_from(["sync", "async", "exit"])),
    st.tuples(st.just("resume"), st.sampled_from(["sync", "async", "exit"])),
    st.tuples(st.just("edit_and_update"), spec, st.sampled_from([None, "agent", "tools"])),
    st.tuples(st.just("edit_snapshot"), spec),  # changed in place and never given back: nothing changes
    st.tuples(st.just("edit_result"), spec),  # the last invoke's result changed in place
    st.tuples(st.just("drop_result")),  # the caller lets the last result go (its objects may be given again)
    st.tuples(st.just("update_notes"), st.text("ab", max_size=3), st.sampled_from([None, "agent"])),
    st.tuples(st.just("fork"), st.integers(0, 30), spec),
    st.tuples(st.just("replay"), st.integers(0, 30)),
), min_size=2, max_size=9)


def make_script(plan):
    @scripted(random_graph)
    async def script(api: Api, saver, thread: str):
        g = random_graph(saver)
        c = cfg(thread)
        trace: list = []
        result: Any = None
        n = 0
        for op in plan:
            kind = op[0]
            try:
                if kind == "invoke":
                    n += 1
                    # a run whose nodes change state in place waits for each checkpoint (durability "sync"): with
                    # "async" LangGraph serializes in the background while the next node runs, for every saver
                    durability = "sync" if op[1] else op[2]
                    result = await api.invoke(g, {"messages": [HumanMessage(f"human {n}", id=f"h-{n}")],
                                                  "edits": op[1]}, c, durability=durability)
                elif kind == "resume":
                    result = await api.invoke(g, None, c, durability=op[1])
                elif kind == "edit_and_update":
                    snap = await api.state(g, c)
                    if not snap.values.get("messages"):
                        continue
                    edit(snap.values, op[1])
                    i = op[1][1] % len(snap.values["messages"])
                    await api.update(g, c, {"messages": [snap.values["messages"][i]]}, as_node=op[2])
                elif kind == "edit_snapshot":
                    edit((await api.state(g, c)).values, op[1])
                elif kind == "edit_result":
                    if isinstance(result, dict):
                        edit(result, op[1])
                elif kind == "drop_result":
                    result = None
                elif kind == "update_notes":
                    snap = await api.state(g, c)
                    notes = snap.values.get("notes") or {}
                    notes.setdefault("inner", {"list": []})["by_update"] = op[1]
                    await api.update(g, c, {"notes": notes}, as_node=op[2])
                    notes["inner"]["after"] = "changed after update_state returned"
                elif kind == "fork":
                    hist = await api.history(g, c)
                    if not hist:
                        continue
                    old = hist[::-1][op[1] % len(hist)]
                    if not old.values.get("messages"):
                        continue
                    edit(old.values, op[2])
                    i = op[2][1] % len(old.values["messages"])
                    await api.update(g, old.config, {"messages": [old.values["messages"][i]]})
                elif kind == "replay":
                    hist = await api.history(g, c)
                    if hist:
                        result = await api.invoke(g, None, hist[::-1][op[1] % len(hist)].config, durability="sync")
            except Exception as e:  # noqa: BLE001 - what the caller sees, compared between the savers
                trace.append((kind, "raised", type(e).__name__))
                continue
            trace.append((kind, canon((await api.state(g, c)).values)))
        return trace, history_of(await api.history(g, c))

    return script


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(plan=ops, variant=st.sampled_from(["default", "no-cache", "tiny-cache", "replanned"]))
@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_random_scripts_store_what_in_memory_saver_stores(lg, ns, combo, plan, variant):
    cls, kind = combo
    kw: dict[str, Any] = {}
    if variant == "no-cache":
        kw["cache_size"] = 0
    elif variant == "tiny-cache":
        kw["cache_size"] = 1
    elif variant == "replanned":
        combo = (StaleBase if cls is SidecarSaver else AsyncStaleBase, kind)
    asyncio.run(side_by_side(lg.address, ns, combo, make_script(plan), **kw))


# ---------------------------------------------------------------- the end-of-run barrier, cancelled

def test_cancelling_ainvoke_during_the_barrier_logs_nothing(lg, ns, caplog):
    """Cancelling ainvoke while its end-of-run barrier waits for the pipelined writes: no InvalidStateError
    from the barrier's future (it was set after asyncio had cancelled it)."""
    from agentstate.streams import WriteStream

    class SlowStream(WriteStream):
        def send(self, request, *a, **kw):
            fut = super().send(request, *a, **kw)
            import time
            time.sleep(0.05)
            return fut

    async def main():
        saver = AsyncSidecarSaver(lg.address, namespace=ns)
        client = saver._blocking()
        client.write_stream = lambda **kw: SlowStream(client, **kw)
        g = amending_graph(saver)
        task = asyncio.ensure_future(g.ainvoke({"messages": [HumanMessage("x", id="h")]}, cfg("cancel")))
        await asyncio.sleep(0.08)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await saver.aflush()
        await saver.aclose()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    assert "InvalidStateError" not in caplog.text
