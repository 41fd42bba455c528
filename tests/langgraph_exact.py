"""Shared pieces of tests/test_langgraph_exact.py: graph drivers, canonical histories, and the typed-state
graph, which also runs as a script (``python tests/langgraph_exact.py ADDRESS NAMESPACE``) so that the
strict-msgpack run can set LANGGRAPH_STRICT_MSGPACK=true before LangGraph is imported; the script prints the
differences between InMemorySaver's and the sidecar savers' histories and exits 1 when there are any.
"""
from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import operator
import sys
from typing import Annotated, Any, Optional

import pydantic
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from agentstate.langgraph import AsyncSidecarSaver, SidecarSaver

# (saver class, graph API): every combination a user can pick
COMBOS = [(SidecarSaver, "sync"), (SidecarSaver, "async"), (AsyncSidecarSaver, "sync"), (AsyncSidecarSaver, "async")]


def combo_id(combo) -> str:
    return f"{combo[0].__name__}-{combo[1]}"


class Api:
    """One graph API: ``sync`` calls graph.invoke & co, ``async`` awaits ainvoke & co."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    async def invoke(self, graph, inp, config, **kw):
        return await graph.ainvoke(inp, config, **kw) if self.kind == "async" else graph.invoke(inp, config, **kw)

    async def state(self, graph, config):
        return await graph.aget_state(config) if self.kind == "async" else graph.get_state(config)

    async def history(self, graph, config) -> list:
        if self.kind == "async":
            return [s async for s in graph.aget_state_history(config)]
        return list(graph.get_state_history(config))

    async def update(self, graph, config, values, as_node=None):
        if self.kind == "async":
            return await graph.aupdate_state(config, values, as_node=as_node)
        return graph.update_state(config, values, as_node=as_node)


async def close(saver) -> None:
    if isinstance(saver, AsyncSidecarSaver):
        await saver.aclose()
    elif isinstance(saver, SidecarSaver):
        saver.close()


def canon(v: Any) -> Any:
    """A value as comparable data, types included (a Plan and the dict of its fields differ)."""
    if isinstance(v, BaseMessage):
        return ("message", type(v).__name__, canon(v.model_dump()))
    if isinstance(v, pydantic.BaseModel):
        return ("model", type(v).__qualname__, canon(v.model_dump()))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return ("dataclass", type(v).__qualname__, canon({f.name: getattr(v, f.name) for f in dataclasses.fields(v)}))
    if isinstance(v, enum.Enum):
        return ("enum", type(v).__qualname__, canon(v.value))
    if isinstance(v, dict):
        return ("dict", tuple((canon(k), canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(canon(x) for x in v))
    if isinstance(v, float) and v != v:
        return ("float", "nan")
    return (type(v).__name__, v)


def history_of(snapshots: list) -> list:
    """A thread's get_state_history, oldest first, without what differs between savers by design (checkpoint,
    task and interrupt ids, timestamps): parents are positions in the list."""
    snaps = list(reversed(snapshots))
    index = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(snaps)}
    out = []
    for s in snaps:
        parent = (s.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        out.append({
            "values": canon(s.values), "next": s.next, "source": s.metadata.get("source"),
            "step": s.metadata.get("step"), "parent": index.get(parent, parent),
            "tasks": [(t.name, t.path, repr(t.error), tuple(canon(i.value) for i in t.interrupts), canon(t.result))
                      for t in s.tasks],
            "interrupts": tuple(canon(i.value) for i in s.interrupts),
        })
    return out


def diff(a: list, b: list) -> str:
    """The first difference between two canonical histories, readable."""
    if len(a) != len(b):
        return f"{len(a)} checkpoints against {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        for key in x:
            if x[key] != y[key]:
                return f"checkpoint {i} ({x['source']}, step {x['step']}), {key}:\n  {x[key]!r}\n  {y[key]!r}"
    return ""


# ---------------------------------------------------------------- typed state (schema types)

class Mode(enum.Enum):
    DRAFT = "draft"
    FINAL = "final"


class Step(pydantic.BaseModel):
    tool: str
    args: dict = {}


class Plan(pydantic.BaseModel):
    tool: str
    steps: list[Step] = []


@dataclasses.dataclass
class Budget:
    tokens: int
    spent: list


class Typed(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    plan: Optional[Plan]
    budget: Optional[Budget]
    mode: Optional[Mode]
    done: Annotated[list[Step], operator.add]


def typed_graph(saver):
    def planner(s):
        return {"plan": Plan(tool="search", steps=[Step(tool="search", args={"q": "x"})]),
                "budget": Budget(tokens=100, spent=[]), "mode": Mode.DRAFT,
                "messages": [AIMessage("planned", id=f"p-{len(s['messages'])}")]}

    def worker(s):
        plan, budget = s["plan"], s["budget"]  # a node that expects the classes back
        step = plan.steps[0]
        return {"done": [Step(tool=plan.tool, args={**step.args, "n": len(s.get("done", []))})],
                "budget": Budget(tokens=budget.tokens - 10, spent=[*budget.spent, 10]),
                "mode": Mode.FINAL if s["mode"] is Mode.DRAFT else s["mode"],
                "messages": [AIMessage(f"{plan.tool} {step.args['q']} {s['mode'].value}",
                                       id=f"w-{len(s['messages'])}")]}

    b = StateGraph(Typed)
    b.add_node("planner", planner)
    b.add_node("worker", worker)
    b.add_edge(START, "planner")
    b.add_edge("planner", "worker")
    b.add_edge("worker", END)
    return b.compile(checkpointer=saver)


async def typed_script(api: Api, saver, thread: str) -> tuple[list, list]:
    """Runs the typed graph twice, an update with a model and a replay; returns (trace, history)."""
    g = typed_graph(saver)
    c = {"configurable": {"thread_id": thread}}
    trace = []
    out = await api.invoke(g, {"messages": [HumanMessage("go", id="h-0")]}, c)
    trace.append(canon(out))
    snap = await api.state(g, c)
    trace.append((type(snap.values["plan"]).__name__, type(snap.values["budget"]).__name__,
                  type(snap.values["mode"]).__name__, [type(x).__name__ for x in snap.values["done"]]))
    plan = snap.values["plan"]
    if isinstance(plan, Plan):
        plan.steps.append(Step(tool="fetch"))  # changed in place, then given back
    await api.update(g, c, {"plan": plan, "mode": Mode.DRAFT}, as_node="planner")
    trace.append(canon(await api.invoke(g, None, c)))
    hist = await api.history(g, c)
    trace.append(canon((await api.invoke(g, None, hist[-2].config))))
    return trace, history_of(await api.history(g, c))


async def compare_typed(address: str, ns: str) -> list[str]:
    """InMemorySaver against each combination, read back through a fresh saver; the differences found."""
    problems = []
    for cls, kind in COMBOS:
        api = Api(kind)
        ref = InMemorySaver()
        want = await typed_script(api, ref, "t")
        thread = f"typed-{cls.__name__}-{kind}"
        saver = cls(address, namespace=ns)
        try:
            got = await typed_script(api, saver, thread)
        finally:
            await close(saver)
        if got[0] != want[0]:
            problems.append(f"{cls.__name__}/{kind}: trace differs:\n  {got[0]!r}\n  {want[0]!r}")
        if d := diff(got[1], want[1]):
            problems.append(f"{cls.__name__}/{kind}: history: {d}")
        fresh = cls(address, namespace=ns)
        try:
            again = history_of(await api.history(typed_graph(fresh), {"configurable": {"thread_id": thread}}))
        finally:
            await close(fresh)
        if d := diff(again, want[1]):
            problems.append(f"{cls.__name__}/{kind}: history read back by a fresh saver: {d}")
    return problems


if __name__ == "__main__":
    found = asyncio.run(compare_typed(sys.argv[1], sys.argv[2]))
    print(json.dumps(found, indent=1))
    sys.exit(1 if found else 0)
