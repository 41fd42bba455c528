"""A graph process in two code versions, for test_schemas_upgrade.py (the hot upgrade of docs/lifecycle.md).

    python tests/schema_app.py ADDRESS THREAD v1|v2|v2-nomig|v3

v1       state {topic, notes: [str]}: research -> draft -> publish; publish kills its own process (SIGKILL)
         before it returns, so the run stops with its latest checkpoint taken after draft.
v2       the same graph, new code: the topic is a {"name"} map, notes are {"text", "chars"} maps and there is
         a ``status`` field; the saver
         has schema "research" at version 2 with a client-side migration from version 1. It resumes the thread
         (invoke(None)) and prints the final state as JSON.
v2-nomig v2 without the migration (to show the old state does not fit the new code).
v3       asks for version 3, which no migration reaches: the load fails with MigrationError.
"""
from __future__ import annotations

import json
import operator
import os
import signal
import sys
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agentstate.langgraph import SidecarSaver
from agentstate.schemas import Migrations, MigrationError

address, thread, mode = sys.argv[1:4]
config = {"configurable": {"thread_id": thread}}


class StateV1(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


class StateV2(TypedDict):
    topic: dict
    notes: Annotated[list, operator.add]
    status: str


migrations = Migrations("research")


@migrations.step(1)
def notes_become_maps(values: dict) -> dict:
    values["notes"] = [{"text": n, "chars": len(n)} for n in values.get("notes", [])]
    values.setdefault("status", "draft")
    values["topic"] = {"name": values["topic"]}  # a channel the resumed run never writes again
    return values


def build_v1():
    g = StateGraph(StateV1)
    g.add_node("research", lambda s: {"notes": [f"facts about {s['topic']}"]})
    g.add_node("draft", lambda s: {"notes": ["a first draft"]})

    def publish(s):
        os.kill(os.getpid(), signal.SIGKILL)  # the v1 process stops here, for good

    g.add_node("publish", publish)
    g.add_edge(START, "research")
    g.add_edge("research", "draft")
    g.add_edge("draft", "publish")
    g.add_edge("publish", END)
    return g


def build_v2():
    g = StateGraph(StateV2)
    g.add_node("research", lambda s: {"notes": [{"text": f"facts about {s['topic']['name']}", "chars": 0}]})
    g.add_node("draft", lambda s: {"notes": [{"text": "a first draft", "chars": 13}]})

    def publish(s):
        total = sum(n["chars"] for n in s["notes"])  # the v2 shape: fails on v1's strings
        return {"status": f"published {s['topic']['name']} ({s['status']} -> done, {total} chars)",
                "notes": [{"text": "published", "chars": 9}]}

    g.add_node("publish", publish)
    g.add_edge(START, "research")
    g.add_edge("research", "draft")
    g.add_edge("draft", "publish")
    g.add_edge("publish", END)
    return g


if mode == "v1":
    saver = SidecarSaver(address, namespace="upgrade", schema="research", schema_version=1)
    build_v1().compile(checkpointer=saver).invoke({"topic": "lmdb", "notes": []}, config, durability="sync")
    sys.exit(3)  # not reached: publish kills the process
saver = SidecarSaver(address, namespace="upgrade", schema="research",
                     schema_version=3 if mode == "v3" else 2,
                     migrations=None if mode == "v2-nomig" else migrations)
graph = build_v2().compile(checkpointer=saver)
try:
    final = graph.invoke(None, config, durability="sync")
except MigrationError as e:
    print(json.dumps({"migration_error": str(e)}))
    sys.exit(4)
except (TypeError, KeyError) as e:
    print(json.dumps({"code_error": f"{type(e).__name__}: {e}"}))
    sys.exit(5)
saver.close()
print(json.dumps(final))
