"""agentstate.langgraph against a live sidecar: conformance, real graphs, durability, storage, safety.

Every scenario that LangGraph runs both ways runs with SidecarSaver (sync graph API) and
AsyncSidecarSaver (async graph API); the reference for "what LangGraph does" is InMemorySaver.
"""
from __future__ import annotations

import asyncio
import dataclasses
import gc
import operator
import threading
import time
import uuid
import weakref
from collections import Counter
from typing import Annotated, Any

import pytest
from conftest import SidecarProcess
from typing_extensions import TypedDict

pytest.importorskip("langgraph", reason="the langgraph extra is part of the test dependencies")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.channels import DeltaChannel  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import _messages_delta_reducer, add_messages  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from agentstate import AsyncClient, Client, Opaque, from_value  # noqa: E402
from agentstate.streams import WriteStream  # noqa: E402
from agentstate.errors import ResourceExhausted  # noqa: E402
from agentstate.langgraph import AsyncSidecarSaver, SidecarSaver, UnsafeValueError, WriteBehindError  # noqa: E402

FLAVORS = ["sync", "async"]


# ---------------------------------------------------------------- plumbing

@pytest.fixture(scope="module")
def lg_sidecar(module_sidecar):
    return module_sidecar


@pytest.fixture
def ns():
    return f"lg-{uuid.uuid4().hex[:12]}"


def new_saver(flavor: str, address: str, ns: str, **kw):
    return (SidecarSaver if flavor == "sync" else AsyncSidecarSaver)(address, namespace=ns, **kw)


class Driver:
    """One graph API for both flavors: the sync one calls graph.invoke & co, the async one awaits ainvoke & co."""

    def __init__(self, flavor: str, saver) -> None:
        self.flavor, self.saver = flavor, saver
        self.is_async = flavor == "async"

    async def invoke(self, graph, inp, config, **kw):
        return await graph.ainvoke(inp, config, **kw) if self.is_async else graph.invoke(inp, config, **kw)

    async def state(self, graph, config, **kw):
        return await graph.aget_state(config, **kw) if self.is_async else graph.get_state(config, **kw)

    async def history(self, graph, config, **kw) -> list:
        if self.is_async:
            return [s async for s in graph.aget_state_history(config, **kw)]
        return list(graph.get_state_history(config, **kw))

    async def update(self, graph, config, values, **kw):
        if self.is_async:
            return await graph.aupdate_state(config, values, **kw)
        return graph.update_state(config, values, **kw)

    async def tuple(self, config):
        return await self.saver.aget_tuple(config) if self.is_async else self.saver.get_tuple(config)

    async def close(self):
        if self.is_async:
            await self.saver.aclose()
        else:
            self.saver.close()


def run(flavor: str, address: str, ns: str, scenario, **saver_kw):
    async def main():
        d = Driver(flavor, new_saver(flavor, address, ns, **saver_kw))
        try:
            return await scenario(d)
        finally:
            await d.close()

    return asyncio.run(main())


def cfg(thread: str, **extra) -> dict:
    return {"configurable": {"thread_id": thread, **extra}}


def texts(messages) -> list[str]:
    return [f"{m.type}:{m.content}" for m in messages]


# ---------------------------------------------------------------- conformance

@pytest.mark.parametrize("cls", [SidecarSaver, AsyncSidecarSaver], ids=lambda c: c.__name__)
def test_conformance_full(lg_sidecar, cls, capsys):
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, DetectedCapabilities

    async def factory():
        saver = cls(lg_sidecar.address, namespace=f"conf-{uuid.uuid4().hex[:12]}")
        yield saver
        if isinstance(saver, AsyncSidecarSaver):
            await saver.aclose()
        else:
            saver.close()

    registered = checkpointer_test(name=cls.__name__)(factory)
    report = asyncio.run(validate(registered))
    detected = DetectedCapabilities.from_instance(cls(lg_sidecar.address))
    with capsys.disabled():
        report.print_report()
    assert detected.detected == ALL_CAPABILITIES and not detected.missing
    failures = {k: r.failures for k, r in report.results.items() if r.failures}
    assert report.conformance_level() == "FULL", failures
    assert sorted(k for k, r in report.results.items() if r.detected and r.passed) == \
        sorted(c.value for c in ALL_CAPABILITIES)
    assert sum(r.tests_passed for r in report.results.values()) > 80


# ---------------------------------------------------------------- human in the loop

class Chat(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    approved: bool


def approval_graph(saver):
    def draft(state):
        return {"messages": [AIMessage("draft")]}

    def ask(state):
        answer = interrupt({"question": "send it?"})
        return {"approved": answer == "yes", "messages": [AIMessage(f"human said {answer}")]}

    def finish(state):
        return {"messages": [AIMessage("sent" if state["approved"] else "dropped")]}

    b = StateGraph(Chat)
    b.add_node("draft", draft)
    b.add_node("ask", ask)
    b.add_node("finish", finish)
    b.add_edge(START, "draft")
    b.add_edge("draft", "ask")
    b.add_edge("ask", "finish")
    b.add_edge("finish", END)
    return b.compile(checkpointer=saver)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_interrupt_and_resume_with_command(lg_sidecar, ns, flavor):
    async def scenario(d: Driver):
        g = approval_graph(d.saver)
        c = cfg("hitl")
        out = await d.invoke(g, {"messages": [HumanMessage("hi")]}, c)
        assert [i.value for i in out["__interrupt__"]] == [{"question": "send it?"}]
        st = await d.state(g, c)
        assert st.next == ("ask",) and st.tasks[0].interrupts[0].value == {"question": "send it?"}
        assert texts(st.values["messages"]) == ["human:hi", "ai:draft"]
        # a second saver (an empty cache, as after a restart) sees the same interrupted state
        other = new_saver(d.flavor, lg_sidecar.address, ns)
        try:
            g2 = approval_graph(other)
            st2 = await Driver(d.flavor, other).state(g2, c)
            assert st2.next == ("ask",) and texts(st2.values["messages"]) == ["human:hi", "ai:draft"]
            out = await Driver(d.flavor, other).invoke(g2, Command(resume="yes"), c)
        finally:
            await Driver(d.flavor, other).close()
        assert texts(out["messages"]) == ["human:hi", "ai:draft", "ai:human said yes", "ai:sent"]
        assert out["approved"] is True
        st = await d.state(g, c)
        assert st.next == () and texts(st.values["messages"])[-1] == "ai:sent"

    run(flavor, lg_sidecar.address, ns, scenario)


# ---------------------------------------------------------------- time travel and forks

class Count(TypedDict):
    n: int
    trail: Annotated[list, operator.add]


def counter_graph(saver, steps: int = 3):
    b = StateGraph(Count)
    names = [f"s{i}" for i in range(steps)]
    for name in names:
        b.add_node(name, lambda s, name=name: {"n": s["n"] + 1, "trail": [name]})
    b.add_edge(START, names[0])
    for a, z in zip(names, names[1:]):
        b.add_edge(a, z)
    b.add_edge(names[-1], END)
    return b.compile(checkpointer=saver)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_time_travel_replays_from_a_checkpoint(lg_sidecar, ns, flavor):
    async def scenario(d: Driver):
        g = counter_graph(d.saver)
        c = cfg("tt")
        assert (await d.invoke(g, {"n": 0, "trail": []}, c))["n"] == 3
        history = await d.history(g, c)
        assert [h.metadata["step"] for h in history] == [3, 2, 1, 0, -1]
        assert [h.values.get("n") for h in history] == [3, 2, 1, 0, None]
        for newer, older in zip(history, history[1:]):
            assert newer.parent_config["configurable"]["checkpoint_id"] == \
                older.config["configurable"]["checkpoint_id"]
        # the filters and limits of get_state_history go through list()
        assert [h.metadata["step"] for h in await d.history(g, c, limit=2)] == [3, 2]
        assert [h.metadata["step"] for h in await d.history(g, c, before=history[1].config, limit=2)] == [1, 0]
        assert [h.metadata["step"] for h in await d.history(g, c, filter={"step": 1})] == [1]
        # replay from the checkpoint after step 1 (next: s2): only s2 runs again
        at1 = history[2]
        assert at1.next == ("s1",) and at1.values["trail"] == ["s0"]
        replay = await d.invoke(g, None, at1.config)
        assert replay == {"n": 3, "trail": ["s0", "s1", "s2"]}
        after = await d.history(g, c)
        # the same history as LangGraph's in-memory saver makes of the same calls
        ref = counter_graph(InMemorySaver())
        ref.invoke({"n": 0, "trail": []}, cfg("ref"))
        ref.invoke(None, list(ref.get_state_history(cfg("ref")))[2].config)
        ref_after = list(ref.get_state_history(cfg("ref")))
        assert [(h.metadata["source"], h.metadata["step"], h.values, h.next) for h in after] == \
            [(h.metadata["source"], h.metadata["step"], h.values, h.next) for h in ref_after]
        assert len(after) > len(history)
        new_ids = {h.config["configurable"]["checkpoint_id"] for h in after} - \
            {h.config["configurable"]["checkpoint_id"] for h in history}
        oldest_new = min(new_ids)
        parent_of_oldest_new = next(h for h in after if h.config["configurable"]["checkpoint_id"] == oldest_new)
        assert parent_of_oldest_new.parent_config["configurable"]["checkpoint_id"] == \
            at1.config["configurable"]["checkpoint_id"]
        # reading an old checkpoint by id (values rebuilt from the cached newer list)
        old = await d.state(g, history[3].config)
        assert old.values == {"n": 0, "trail": []}

    run(flavor, lg_sidecar.address, ns, scenario)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_fork_with_update_state(lg_sidecar, ns, flavor):
    async def scenario(d: Driver):
        g = counter_graph(d.saver)
        c = cfg("fork")
        await d.invoke(g, {"n": 0, "trail": []}, c)
        history = await d.history(g, c)
        at1 = history[2]  # after s0
        forked = await d.update(g, at1.config, {"n": 100, "trail": ["edited"]}, as_node="s0")
        fork_tuple = await d.tuple(forked)
        assert fork_tuple.parent_config["configurable"]["checkpoint_id"] == at1.config["configurable"]["checkpoint_id"]
        assert fork_tuple.metadata["source"] == "update"
        st = await d.state(g, forked)
        assert st.values == {"n": 100, "trail": ["s0", "edited"]} and st.next == ("s1",)
        out = await d.invoke(g, None, forked)
        assert out == {"n": 102, "trail": ["s0", "edited", "s1", "s2"]}
        # the latest is the forked branch; the original branch is still there
        assert (await d.state(g, c)).values["n"] == 102
        assert (await d.state(g, history[0].config)).values == {"n": 3, "trail": ["s0", "s1", "s2"]}

    run(flavor, lg_sidecar.address, ns, scenario)


# ---------------------------------------------------------------- subgraphs

class Outer(TypedDict, total=False):
    log: Annotated[list, operator.add]
    answer: str


def nested_graph(saver):
    def inner_ask(state):
        return {"log": [f"inner got {interrupt('inner question')}"], "answer": "42"}

    sub = StateGraph(Outer)
    sub.add_node("inner_start", lambda s: {"log": ["inner start"]})
    sub.add_node("inner_ask", inner_ask)
    sub.add_edge(START, "inner_start")
    sub.add_edge("inner_start", "inner_ask")
    sub.add_edge("inner_ask", END)

    b = StateGraph(Outer)
    b.add_node("before", lambda s: {"log": ["before"]})
    b.add_node("child", sub.compile())
    b.add_node("after", lambda s: {"log": [f"after {s['answer']}"]})
    b.add_edge(START, "before")
    b.add_edge("before", "child")
    b.add_edge("child", "after")
    b.add_edge("after", END)
    return b.compile(checkpointer=saver)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_subgraph_checkpoint_namespaces(lg_sidecar, ns, flavor):
    async def scenario(d: Driver):
        g = nested_graph(d.saver)
        c = cfg("nested")
        out = await d.invoke(g, {"log": []}, c)
        assert [i.value for i in out["__interrupt__"]] == ["inner question"]
        st = await d.state(g, c, subgraphs=True)
        assert st.next == ("child",)
        inner = st.tasks[0].state
        assert inner.values["log"] == ["before", "inner start"] and inner.next == ("inner_ask",)
        child_ns = inner.config["configurable"]["checkpoint_ns"]
        assert child_ns.startswith("child:")
        # the subgraph's checkpoints live in their own checkpoint namespace
        inner_history = [t async for t in d.saver.alist(cfg("nested", checkpoint_ns=child_ns))] if d.is_async \
            else list(d.saver.list(cfg("nested", checkpoint_ns=child_ns)))
        assert inner_history and all(t.config["configurable"]["checkpoint_ns"] == child_ns for t in inner_history)
        everything = [t async for t in d.saver.alist(cfg("nested"))] if d.is_async \
            else list(d.saver.list(cfg("nested")))
        assert {t.config["configurable"]["checkpoint_ns"] for t in everything} == {"", child_ns}
        out = await d.invoke(g, Command(resume="yes"), c)
        ref = nested_graph(InMemorySaver())
        ref.invoke({"log": []}, cfg("ref"))
        assert out == ref.invoke(Command(resume="yes"), cfg("ref"))
        assert out["log"][-2:] == ["inner got yes", "after 42"]

    run(flavor, lg_sidecar.address, ns, scenario)


# ---------------------------------------------------------------- parallel branches, failures, pending writes

class Fan(TypedDict):
    log: Annotated[list, operator.add]


def fan_graph(saver, calls: Counter, fail_b_times: int = 1):
    def a(state):
        calls["a"] += 1
        return {"log": ["a"]}

    def b(state):
        calls["b"] += 1
        if calls["b"] <= fail_b_times:
            raise RuntimeError("b is flaky")
        return {"log": ["b"]}

    g = StateGraph(Fan)
    g.add_node("fan", lambda s: {"log": ["fan"]})
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("join", lambda s: {"log": ["join"]})
    g.add_edge(START, "fan")
    g.add_edge("fan", "a")
    g.add_edge("fan", "b")
    g.add_edge(["a", "b"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_failed_node_is_retried_from_pending_writes(lg_sidecar, ns, flavor):
    async def scenario(d: Driver):
        calls: Counter = Counter()
        g = fan_graph(d.saver, calls)
        c = cfg("fan")
        with pytest.raises(RuntimeError, match="flaky"):
            await d.invoke(g, {"log": []}, c)
        assert calls == {"a": 1, "b": 1}
        tup = await d.tuple(c)
        by_channel = Counter(w[1] for w in tup.pending_writes)
        assert by_channel["__error__"] == 1 and by_channel["log"] == 1  # a's result and b's error
        st = await d.state(g, c)
        ref = fan_graph(InMemorySaver(), Counter())
        with pytest.raises(RuntimeError):
            ref.invoke({"log": []}, cfg("ref"))
        ref_st = ref.get_state(cfg("ref"))
        assert (st.next, st.values) == (ref_st.next, ref_st.values) == (("b",), {"log": ["fan", "a"]})
        # a brand-new saver, as after a restart: the resume re-runs only b
        calls2: Counter = Counter({"b": 1})
        other = new_saver(d.flavor, lg_sidecar.address, ns)
        try:
            out = await Driver(d.flavor, other).invoke(fan_graph(other, calls2), None, c)
        finally:
            await Driver(d.flavor, other).close()
        assert out == {"log": ["fan", "a", "b", "join"]}
        assert calls2 == {"b": 2}  # a's write was stored: a did not run again

    run(flavor, lg_sidecar.address, ns, scenario)


# ---------------------------------------------------------------- durability modes

@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_durability_modes_store_what_langgraph_stores(lg_sidecar, ns, flavor, durability):
    async def scenario(d: Driver):
        ref = InMemorySaver()
        out_ref = counter_graph(ref, 4).invoke({"n": 0, "trail": []}, cfg("ref"), durability=durability)
        ref_history = list(counter_graph(ref, 4).get_state_history(cfg("ref")))
        g = counter_graph(d.saver, 4)
        for turn in range(2):
            out = await d.invoke(g, {"n": 0, "trail": []} if turn == 0 else None, cfg("d"), durability=durability)
        assert out == out_ref
        history = await d.history(g, cfg("d"))
        assert [(h.metadata["source"], h.metadata["step"]) for h in history] == \
            [(h.metadata["source"], h.metadata["step"]) for h in ref_history]
        assert [h.values for h in history] == [h.values for h in ref_history]

    run(flavor, lg_sidecar.address, ns, scenario)


WRITE_REQUESTS = ("BatchWriteRequest", "PutCheckpointRequest", "PutWritesRequest")


class SlowWriteStream(WriteStream):
    """A write stream whose acknowledgements arrive ``delay`` seconds after each request was sent (a slow
    network: requests still overlap, as they do on a real stream)."""

    def __init__(self, client, delay: float, **kw) -> None:
        self.delay = delay
        self.sent_at: dict[int, float] = {}
        super().__init__(client, **kw)

    def send(self, request):
        fut = super().send(request)
        self.sent_at[self._seq] = time.monotonic()
        return fut

    def _ack(self, ack):
        due = self.sent_at.pop(ack.seq, time.monotonic()) + self.delay
        time.sleep(max(0.0, due - time.monotonic()))
        super()._ack(ack)


class SlowClient(Client):
    """A client whose writes take ``delay`` seconds longer, like a slow network."""

    delay = 0.2

    def _call(self, method, request, timeout):
        if type(request).__name__ in WRITE_REQUESTS:
            time.sleep(self.delay)
        return super()._call(method, request, timeout)

    def write_stream(self, *, window: int = 512, timeout: float | None = None):
        return SlowWriteStream(self, self.delay, window=window, timeout=timeout)


class SlowAsyncClient(AsyncClient):
    delay = 0.2

    async def _call(self, method, request, timeout):
        if type(request).__name__ in WRITE_REQUESTS:
            await asyncio.sleep(self.delay)
        return await super()._call(method, request, timeout)


def timed_graph(saver, starts: list):
    """Four steps, each noting when it started."""
    b = StateGraph(Count)
    names = [f"s{i}" for i in range(4)]
    for name in names:
        def step(s, name=name):
            starts.append(time.monotonic())
            return {"n": s["n"] + 1, "trail": [name]}
        b.add_node(name, step)
    b.add_edge(START, names[0])
    for a, z in zip(names, names[1:]):
        b.add_edge(a, z)
    b.add_edge(names[-1], END)
    return b.compile(checkpointer=saver)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_async_durability_does_not_block_the_graph_on_the_network(lg_sidecar, ns, flavor):
    """With durability="async" the steps go on while their checkpoints travel (pipelined on one stream) and
    invoke returns once all are stored; with "sync" each step waits for its checkpoint."""
    delay = SlowClient.delay
    observer = Client(lg_sidecar.address, namespace=ns)

    async def scenario(d: Driver):
        slow = SlowClient(lg_sidecar.address, namespace=ns)
        d.saver._writer._client_factory = lambda: slow
        for durability in ("async", "sync"):
            starts: list = []
            g = timed_graph(d.saver, starts)
            t0 = time.monotonic()
            out = await d.invoke(g, {"n": 0, "trail": []}, cfg(durability), durability=durability)
            total = time.monotonic() - t0
            assert out["n"] == 4
            last_step = starts[-1] - t0
            if durability == "async":
                assert last_step < 2 * delay, (durability, last_step)  # the steps did not wait for the puts
                assert delay <= total < 4 * delay, total  # pipelined, and the end of the run waited for them
            else:
                assert last_step >= 4 * delay, (durability, last_step)  # each step waited for its checkpoint
                assert total >= 5 * delay
            # either way invoke returns once every checkpoint is stored, in order: another client sees them
            stored = list(observer.list_checkpoints(durability))
            assert len(stored) == 6, (durability, len(stored))
            history = await d.history(g, cfg(durability))
            assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]
            for newer, older in zip(history, history[1:]):
                assert newer.parent_config["configurable"]["checkpoint_id"] == \
                    older.config["configurable"]["checkpoint_id"]

    async def main():
        client = (SlowAsyncClient if flavor == "async" else SlowClient)(lg_sidecar.address, namespace=ns)
        d = Driver(flavor, (AsyncSidecarSaver if flavor == "async" else SidecarSaver)(client))
        try:
            await scenario(d)
        finally:
            await d.close()
            await client.close() if flavor == "async" else client.close()
            observer.close()

    asyncio.run(main())


@pytest.mark.parametrize("flavor", FLAVORS)
def test_write_behind_returns_before_the_sidecar_answers(lg_sidecar, ns, flavor):
    """write_behind=True: in async mode put returns once queued; the outbox stores everything in order."""
    async def scenario(d: Driver):
        slow = SlowClient(lg_sidecar.address, namespace=ns)
        d.saver._writer._client_factory = lambda: slow
        g = counter_graph(d.saver, 4)
        started = time.monotonic()
        await d.invoke(g, {"n": 0, "trail": []}, cfg("bg"))
        assert time.monotonic() - started < 3 * SlowClient.delay  # 5 puts and 4 writes were still on their way
        # the saver reads its own writes: a read waits for what was queued before it
        history = await d.history(g, cfg("bg"))
        assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]
        for newer, older in zip(history, history[1:]):
            assert newer.parent_config["configurable"]["checkpoint_id"] == older.config["configurable"]["checkpoint_id"]
        assert d.saver._writer.batches < 9  # sent in batches
        slow.close()

    run(flavor, lg_sidecar.address, ns, scenario, write_behind=True)


def test_queued_writes_survive_a_sidecar_restart(tmp_path, ns):
    """Write-behind puts queued while the sidecar is down are stored, in order, once it is back."""
    proc = SidecarProcess(tmp_path / "data").start()
    saver = SidecarSaver(proc.address, namespace=ns, timeout=30, write_behind=True)
    slow = SlowClient(proc.address, namespace=ns, timeout=30, wait_for_ready=True,
                      retry=saver.client.retry)
    slow.delay = 0.3
    saver._writer._client_factory = lambda: slow
    try:
        g = counter_graph(saver, 4)
        g.invoke({"n": 0, "trail": []}, cfg("r"))  # returns with its writes still queued
        proc.kill()
        restart = threading.Timer(0.8, proc.start)
        restart.start()
        saver.flush(60)
        restart.join()
        history = list(g.get_state_history(cfg("r")))
        assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]
        assert history[0].values == {"n": 4, "trail": ["s0", "s1", "s2", "s3"]}
    finally:
        saver.close()
        slow.close()
        proc.stop()


def test_a_failed_write_behind_is_reported(lg_sidecar, ns):
    saver = SidecarSaver(lg_sidecar.address, namespace=ns, write_behind=True)
    runtime = {"__pregel_runtime": object()}  # what LangGraph puts in a running graph's config
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
    too_big = {"source": "loop", "step": 0, "blob": "x" * 70_000}  # over the 64 KiB metadata limit
    try:
        config = cfg("wb", checkpoint_ns="", **runtime)
        saver.put(config, generate_checkpoint(), too_big, {})  # accepted: returns at once
        with pytest.raises(WriteBehindError) as raised:
            saver.flush()
        assert isinstance(raised.value.cause, ResourceExhausted)
        with pytest.raises(WriteBehindError):
            saver.get_tuple(cfg("wb"))
        assert isinstance(saver._writer.clear_failure(), ResourceExhausted)
        assert saver.get_tuple(cfg("wb")) is None
        # outside a graph run (or in sync mode) the same put fails in the caller
        with pytest.raises(ResourceExhausted):
            saver.put(cfg("wb", checkpoint_ns=""), generate_checkpoint(), too_big, {})
        saver.flush()
    finally:
        saver.close()


# ---------------------------------------------------------------- DeltaChannel

class DeltaChat(TypedDict):
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)]


def delta_graph(saver):
    b = StateGraph(DeltaChat)
    b.add_node("bot", lambda s: {"messages": [AIMessage(f"reply {len(s['messages'])}")]})
    b.add_edge(START, "bot")
    b.add_edge("bot", END)
    return b.compile(checkpointer=saver)


class Counting(Client):
    calls: Counter

    def _call(self, method, request, timeout):
        self.calls[type(request).__name__] += 1
        return super()._call(method, request, timeout)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_delta_channel(lg_sidecar, ns, flavor):
    turns = 8

    async def scenario(d: Driver):
        ref = InMemorySaver()
        gr, g = delta_graph(ref), delta_graph(d.saver)
        for t in range(turns):
            gr.invoke({"messages": [HumanMessage(f"q{t}")]}, cfg("ref"))
            await d.invoke(g, {"messages": [HumanMessage(f"q{t}")]}, cfg("dc"))
        want = texts(gr.get_state(cfg("ref")).values["messages"])
        assert len(want) == 2 * turns and texts((await d.state(g, cfg("dc"))).values["messages"]) == want
        ref_history = [texts(h.values.get("messages", [])) for h in gr.get_state_history(cfg("ref"))]
        history = await d.history(g, cfg("dc"))
        assert [texts(h.values.get("messages", [])) for h in history] == ref_history
        # snapshots are stored every 3 updates; between them the channel is absent from the checkpoint
        held = [bool(t.checkpoint["channel_values"].get("messages")) for t in
                (d.saver.list(cfg("dc")) if not d.is_async else [x async for x in d.saver.alist(cfg("dc"))])]
        assert any(held) and not all(held)
        # one call walks the ancestors (no read per ancestor)
        counting = Counting(lg_sidecar.address, namespace=ns)
        counting.calls = Counter()
        with SidecarSaver(counting) as probe:
            hist = probe.get_delta_channel_history(config=cfg("dc", checkpoint_ns=""), channels=["messages"])
        assert counting.calls == {"GetChannelHistoryRequest": 1}, counting.calls
        assert set(hist) == {"messages"} and hist["messages"]["writes"]
        counting.close()
        # prune keeps the ancestors the delta channel needs: the state is intact afterwards
        before = len(history)
        if d.is_async:
            await d.saver.aprune(["dc"])
        else:
            d.saver.prune(["dc"])
        kept = await d.history(g, cfg("dc"))
        assert 1 < len(kept) < before
        assert texts((await d.state(g, cfg("dc"))).values["messages"]) == want
        # and the thread goes on
        gr.invoke({"messages": [HumanMessage("more")]}, cfg("ref"))
        await d.invoke(g, {"messages": [HumanMessage("more")]}, cfg("dc"))
        assert texts((await d.state(g, cfg("dc"))).values["messages"]) == \
            texts(gr.get_state(cfg("ref")).values["messages"])
        # a copy has the whole chain, so it rebuilds the channel too
        if d.is_async:
            await d.saver.acopy_thread("dc", "dc-copy")
        else:
            d.saver.copy_thread("dc", "dc-copy")
        assert texts((await d.state(g, cfg("dc-copy"))).values["messages"]) == \
            texts((await d.state(g, cfg("dc"))).values["messages"])

    run(flavor, lg_sidecar.address, ns, scenario)


def test_naive_prune_would_break_a_delta_channel(lg_sidecar, ns):
    """Why prune keeps history: without history_channels the rebuilt channel comes back short."""
    with SidecarSaver(lg_sidecar.address, namespace=ns) as saver:
        g = delta_graph(saver)
        for t in range(5):
            g.invoke({"messages": [HumanMessage(f"q{t}")]}, cfg("naive"))
        assert len(g.get_state(cfg("naive")).values["messages"]) == 10
        saver.client.prune(["naive"], keep_latest=1)
        saver._core.forget()
        assert len(g.get_state(cfg("naive")).values["messages"]) < 10


# ---------------------------------------------------------------- what goes over the wire and onto disk

class Recording(Client):
    def _call(self, method, request, timeout):
        resp = super()._call(method, request, timeout)
        self.log.append((type(request).__name__, request.ByteSize(), resp.ByteSize()))
        return resp


def chat_graph(saver):
    b = StateGraph(Chat)
    b.add_node("bot", lambda s: {"messages": [AIMessage("a" * 400)]})
    b.add_edge(START, "bot")
    b.add_edge("bot", END)
    return b.compile(checkpointer=saver)


def test_a_long_chat_sends_and_stores_one_message_per_message(tmp_path, ns):
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        rec = Recording(proc.address, namespace=ns)
        rec.log = []
        saver = SidecarSaver(rec)
        g = chat_graph(saver)
        c = cfg("long")
        sizes = {}
        for turn in range(1, 161):
            if turn in (81, 161):
                rec.log.clear()
            g.invoke({"messages": [HumanMessage("h" * 400)]}, c)
            if turn in (80, 160):
                saver.flush()
                sizes[turn] = (rec.store_stats().blob_bytes, list(rec.log))
        assert len(g.get_state(c).values["messages"]) == 320
        (bytes80, _), (bytes160, log) = sizes[80], sizes[160]
        # the second half stored about as much as the first: linear, one copy of each message
        assert bytes160 - bytes80 < 1.3 * bytes80, (bytes80, bytes160)
        # ~700 bytes per message stored, plus trees and checkpoints; LangGraph gives messages their ids in place
        # while background threads serialize the same objects as pending writes, so whether a pending write
        # dedupes with its list item depends on thread timing (pipelined puts shift it): up to ~1.7 KB/message
        assert bytes160 < 320 * 1800
        # and every request and response of the last 80 turns was small though the history is ~190 KB
        sent = [s for name, s, _ in log if name != "GetStoreStatsRequest"]
        received = [r for name, _, r in log if name in ("GetCheckpointRequest",)]
        assert sent and max(sent) < 8000, max(sent)
        assert received and max(received) < 8000, max(received)
        saver.close()
        rec.close()
    finally:
        proc.stop()


def test_the_saver_keeps_no_state_of_a_finished_run(lg_sidecar, ns):
    """Once invoke returned and the caller dropped the result, nothing the run made is alive because of the
    saver: its outbox thread used to keep the last batch of requests (whose plans hold the caller's channel
    values) until the next one, so the last state of a thread outlived the run by a whole turn. (The
    messages the run's read handed out are the saver's own: the compiled hand-out keeps them, to give
    them again when nothing else holds them, _mirror.hand_out.)"""
    saver = SidecarSaver(lg_sidecar.address, namespace=ns)
    g = chat_graph(saver)
    for turn in range(3):
        out = g.invoke({"messages": [HumanMessage(f"h{turn}")]}, cfg("drop"))
        refs = [weakref.ref(m) for m in out["messages"][-2:]]  # this turn's question and answer
        assert all(r() is not None for r in refs)
        del out
        gc.collect()
        assert saver._writer.idle()
        assert [r for r in refs if r() is not None] == [], turn
    assert texts(g.get_state(cfg("drop")).values["messages"]) == \
        ["human:h0", "ai:" + "a" * 400, "human:h1", "ai:" + "a" * 400, "human:h2", "ai:" + "a" * 400]
    saver.close()


def test_history_does_not_resend_the_messages(lg_sidecar, ns):
    """get_state_history of a long chat, from a saver that knows nothing yet: the first checkpoint comes whole,
    the others relative to it (a list of n checkpoints does not carry n copies of the messages)."""
    with SidecarSaver(lg_sidecar.address, namespace=ns) as writer:
        g = chat_graph(writer)
        for turn in range(40):
            g.invoke({"messages": [HumanMessage(f"question {turn} " + "q" * 300)]}, cfg("hist"))
        expected = [(h.metadata["step"], texts(h.values.get("messages", []))) for h in g.get_state_history(cfg("hist"))]
    rec = Recording(lg_sidecar.address, namespace=ns)
    rec.log = []
    with SidecarSaver(rec) as reader:
        got = [(h.metadata["step"], texts(h.values.get("messages", [])))
               for h in chat_graph(reader).get_state_history(cfg("hist"))]
    assert got == expected and len(got) == 120
    listed = sum(r for name, _, r in rec.log if name == "ListCheckpointsRequest")
    whole = sum(len(m) for _, msgs in expected for m in msgs)  # what resending every list would carry, at least
    assert listed < whole / 5, (listed, whole)
    rec.close()


def test_savers_sharing_a_thread_stay_consistent(lg_sidecar, ns):
    """Two savers (two processes, say) take turns on one thread: each one's cache goes stale and recovers."""
    s1, s2 = SidecarSaver(lg_sidecar.address, namespace=ns), SidecarSaver(lg_sidecar.address, namespace=ns)
    try:
        g1, g2 = chat_graph(s1), chat_graph(s2)
        c = cfg("shared")
        for turn in range(3):
            g1.invoke({"messages": [HumanMessage(f"one {turn}")]}, c)
            g2.invoke({"messages": [HumanMessage(f"two {turn}")]}, c)
        got = texts(g1.get_state(c).values["messages"])
        assert got == texts(g2.get_state(c).values["messages"]) and len(got) == 12
        assert got[::2] == [f"human:{w} {t}" for t in range(3) for w in ("one", "two")]
    finally:
        s1.close()
        s2.close()


def test_a_stale_base_falls_back_to_whole_values(lg_sidecar, ns):
    """When the sidecar's parent is not what the saver remembers, the put is resent whole, not lost."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
    with SidecarSaver(lg_sidecar.address, namespace=ns) as saver:
        m1, m2 = HumanMessage("one", id="1"), AIMessage("two", id="2")
        first = generate_checkpoint(channel_values={"messages": [m1]}, channel_versions={"messages": "1"})
        p = saver.put(cfg("stale", checkpoint_ns=""), first, {"step": 0}, {"messages": "1"})
        # someone else rewrites the parent (same id, other content)
        other = SidecarSaver(lg_sidecar.address, namespace=ns)
        other.put(cfg("stale", checkpoint_ns=""), {**first, "channel_values": {"messages": [HumanMessage("x")]}},
                  {"step": 0}, {"messages": "1"})
        other.close()
        second = generate_checkpoint(channel_values={"messages": [m1, m2]}, channel_versions={"messages": "2"})
        saver.put(p, second, {"step": 1}, {"messages": "2"})  # an append against a base that changed
        saver._core.forget()
        got = saver.get_tuple(cfg("stale", checkpoint_ns=""))
        assert texts(got.checkpoint["channel_values"]["messages"]) == ["human:one", "ai:two"]


# ---------------------------------------------------------------- safe deserialization

CONSTRUCTED = Counter()


@dataclasses.dataclass
class Point:
    x: int
    y: int

    def __post_init__(self):
        CONSTRUCTED["point"] += 1


class WithPoint(TypedDict):
    p: Any


def point_graph(saver):
    b = StateGraph(WithPoint)
    b.add_node("make", lambda s: {"p": Point(1, 2)})
    b.add_edge(START, "make")
    b.add_edge("make", END)
    return b.compile(checkpointer=saver)


def test_strict_mode_rebuilds_only_listed_classes(lg_sidecar, ns, caplog):
    """strict=True (what LANGGRAPH_STRICT_MSGPACK=true selects by default): a class outside LangGraph's safe
    set and the saver's allowed_modules comes back as its fields, nothing is called to load it, and
    LangGraph's warning names it. (The default, LangGraph's permissive mode: tests/test_langgraph_exact.py.)"""
    with SidecarSaver(lg_sidecar.address, namespace=ns, strict=True) as saver:
        point_graph(saver).invoke({"p": None}, cfg("pt"))
        saver._core.forget()
        before = CONSTRUCTED["point"]
        _blocked_warned().discard(("test_langgraph", "Point"))  # LangGraph warns once per type and process
        with caplog.at_level("WARNING"):
            value = saver.get_tuple(cfg("pt")).checkpoint["channel_values"]["p"]
        assert value == {"x": 1, "y": 2} and not isinstance(value, Point)
        assert CONSTRUCTED["point"] == before  # nothing was called to load it
        assert "Blocked deserialization of test_langgraph.Point" in caplog.text
    allowed = SidecarSaver(lg_sidecar.address, namespace=ns, allowed_modules=[Point], strict=True)
    try:
        assert allowed.get_tuple(cfg("pt")).checkpoint["channel_values"]["p"] == Point(1, 2)
    finally:
        allowed.close()


def _blocked_warned() -> set:
    """Types LangGraph already warned about as blocked in this process (it warns once per type)."""
    from langgraph.checkpoint.serde import jsonplus
    return jsonplus._warned_blocked_types


def test_pickles_are_never_loaded(lg_sidecar, ns):
    import pickle

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled!')",))

    with Client(lg_sidecar.address, namespace=ns) as c:
        c.put_checkpoint("pk", {"x": Opaque("pickle", pickle.dumps(Boom()))}, checkpoint_id="c1",
                         extra={"v": 4, "ts": "", "channel_versions": {"x": "1"}, "versions_seen": {}},
                         metadata={"step": 0})
        c.put_writes("pk", "c1", [("t", 0, "w", Opaque("pickle", pickle.dumps(Boom())))])
    with SidecarSaver(lg_sidecar.address, namespace=ns) as saver:
        with pytest.raises(UnsafeValueError):
            saver.get_tuple(cfg("pk"))
    with pytest.raises(ValueError, match="pickle"):
        SidecarSaver(lg_sidecar.address, serde=JsonPlusSerializer(pickle_fallback=True))
    with pytest.raises(UnsafeValueError):
        SidecarSaver(lg_sidecar.address)._core.loads(Opaque("pickle", b"\x80\x04N."))


def test_a_list_write_shares_its_items_with_the_channel_list(tmp_path, ns):
    """A pending write whose value is a list (the messages a node returns) is stored as a list tree, item by
    item, so its items are the very nodes of the channel list they extend; a list written as one blob (as
    earlier versions did) still reads back."""
    from langgraph.checkpoint.base import empty_checkpoint

    # its own store, so blob_bytes counts this test's nodes only; uncompressed, so they count as their size
    proc = SidecarProcess(tmp_path / "data", "--no-compress").start()
    try:
        with Client(proc.address, namespace=ns) as c, SidecarSaver(c) as saver:
            human, ai = HumanMessage("h" * 500, id="h-1"), AIMessage("a" * 500, id="a-1")
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": [human, ai]}
            cp["channel_versions"] = {"messages": 1}
            config = saver.put({"configurable": {"thread_id": "w", "checkpoint_ns": ""}}, cp,
                               {"source": "loop", "step": 1}, {"messages": 1})
            before = c.store_stats().blob_bytes
            saver.put_writes(config, [("messages", [ai]), ("note", "n" * 500)], "task-1")
            added = c.store_stats().blob_bytes - before
            # the note (a new ~500-byte blob) and a one-item list node: the message itself was stored already
            assert 500 < added < 500 + 300, added
            cid = config["configurable"]["checkpoint_id"]
            stored = {w.channel: w.value for w in c.get_checkpoint("w", cid, include_pending_writes=True).pending_writes}
            items = from_value(stored["messages"])
            assert type(items) is list and len(items) == 1 and type(items[0]) is Opaque
            # a list written as one serialized blob reads back the same
            c.put_writes("w", cid, [("task-0", 0, "messages", Opaque(*saver.serde.dumps_typed([human])))])
            writes = {(t, ch): v for t, ch, v in saver.get_tuple(config).pending_writes}
            assert writes[("task-1", "messages")] == [ai] and writes[("task-1", "note")] == "n" * 500
            assert writes[("task-0", "messages")] == [human]
    finally:
        proc.stop()
