"""A graph process for test_langgraph_restart.py (run as a script, killed and restarted by the test).

    python tests/langgraph_app.py ADDRESS THREAD WORKDIR start|resume|hitl|answer

start   runs the fan-out graph (s1 -> a, b -> join -> s4) with durability="sync"; b, on its
        first run, waits until a's pending write is stored, says so (WORKDIR/b_blocked) and
        then blocks forever: the test kills this process and the sidecar there.
resume  continues the thread (invoke(None)) and prints the final state as JSON.
hitl    runs a graph that stops at an interrupt() in its second step (default durability).
answer  resumes that graph with Command(resume="yes") and prints the final state.
Every node appends its name to WORKDIR/calls, so the test can tell what ran how often.
"""
from __future__ import annotations

import json
import operator
import sys
import time
from pathlib import Path
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from agentstate.langgraph import SidecarSaver

address, thread, workdir, mode = sys.argv[1:5]
work = Path(workdir)
config = {"configurable": {"thread_id": thread}}
saver = SidecarSaver(address, namespace="restart")


class State(TypedDict):
    log: Annotated[list, operator.add]


def called(name: str) -> None:
    with open(work / "calls", "a") as f:
        f.write(name + "\n")


def node(name):
    def run(state):
        called(name)
        return {"log": [name]}
    return run


def b(state):
    called("b")
    blocked = work / "b_blocked"
    if not blocked.exists():
        # wait until a's result is stored as a pending write of the current checkpoint
        while not any(w[1] == "log" and w[2] == ["a"] for w in (saver.get_tuple(config).pending_writes or ())):
            time.sleep(0.02)
        blocked.write_text("b is blocked; kill me")
        while True:
            time.sleep(1)
    return {"log": ["b"]}


def ask(state):
    called("ask")
    return {"log": [f"answer {interrupt('continue?')}"]}


def fan_graph():
    g = StateGraph(State)
    for name in ("s1", "a", "join", "s4"):
        g.add_node(name, node(name))
    g.add_node("b", b)
    g.add_edge(START, "s1")
    g.add_edge("s1", "a")
    g.add_edge("s1", "b")
    g.add_edge(["a", "b"], "join")
    g.add_edge("join", "s4")
    g.add_edge("s4", END)
    return g.compile(checkpointer=saver)


def hitl_graph():
    g = StateGraph(State)
    g.add_node("first", node("first"))
    g.add_node("ask", ask)
    g.add_node("last", node("last"))
    g.add_edge(START, "first")
    g.add_edge("first", "ask")
    g.add_edge("ask", "last")
    g.add_edge("last", END)
    return g.compile(checkpointer=saver)


if mode == "start":
    fan_graph().invoke({"log": []}, config, durability="sync")
elif mode == "resume":
    print(json.dumps(fan_graph().invoke(None, config)))
elif mode == "hitl":
    out = hitl_graph().invoke({"log": []}, config)
    print(json.dumps({"interrupts": [i.value for i in out["__interrupt__"]]}))
elif mode == "answer":
    print(json.dumps(hitl_graph().invoke(Command(resume="yes"), config)))
saver.close()
