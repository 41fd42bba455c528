"""agentstate.agents.SidecarSession side by side with the OpenAI Agents SDK's own SQLiteSession: random
scripts of operations (callers mutating what they got back in place), the SDK's Runner (run, run_sync,
run_streamed) with a fake model and a tool, and inside the SDK's EncryptedSession. No network: the model is
a local fake."""
from __future__ import annotations

import asyncio
import copy
import json
import math
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

agents = pytest.importorskip("agents")  # the agents extra is in the test extra (pyproject.toml)

from agents import Agent, ModelResponse, Runner, SQLiteSession, Usage, function_tool, set_tracing_disabled  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import (Response, ResponseCompletedEvent, ResponseFunctionToolCall,  # noqa: E402
                                    ResponseOutputMessage, ResponseOutputText)

from agentstate import Client  # noqa: E402
from agentstate.agents import SidecarSession  # noqa: E402
from agentstate.agents import _items  # noqa: E402
from agentstate.conversations import item_value  # noqa: E402
from agentstate.v1 import conversations_pb2 as cpb  # noqa: E402

set_tracing_disabled(True)


def sid() -> str:
    return f"sess-{uuid.uuid4().hex[:12]}"


def canon(obj):
    """What the caller can observe: values, types (lists vs dicts) and key order; NaN equal to itself."""
    if isinstance(obj, dict):
        return ("dict", [(k, canon(v)) for k, v in obj.items()])
    if isinstance(obj, list):
        return ("list", [canon(v) for v in obj])
    if isinstance(obj, float) and math.isnan(obj):
        return ("nan",)
    return (type(obj).__name__, obj)


# ----------------------------------------------------------------- random scripts, side by side

json_keys = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.booleans(), st.none())
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True),
                    st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(json_keys, inner, max_size=4)),
    max_leaves=12)
sdk_items = st.one_of(
    st.builds(lambda role, text: {"role": role, "content": text}, st.sampled_from(["user", "assistant", "system"]),
              st.text(max_size=20)),
    st.builds(lambda cid, args: {"type": "function_call", "call_id": cid, "name": "tool", "arguments": args},
              st.sampled_from(["c1", "c2"]), st.text(max_size=10)),
    st.builds(lambda cid, out: {"type": "function_call_output", "call_id": cid, "output": out},
              st.sampled_from(["c1", "c2"]), st.text(max_size=10)),
    st.builds(lambda s: {"type": "reasoning", "summary": [{"type": "summary_text", "text": s}]}, st.text(max_size=8)),
    st.dictionaries(st.text(max_size=5), values, max_size=4),
)
ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(sdk_items, max_size=5)),
    st.tuples(st.just("get"), st.one_of(st.none(), st.integers(-3, 8))),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("clear"), st.none()),
    st.tuples(st.just("mutate"), st.integers(0, 10)),
), max_size=14)


async def _script(address, tmp_path, script, limit_setting):
    ref = SQLiteSession(sid(), str(tmp_path / f"{uuid.uuid4().hex}.db"),
                        session_settings={"limit": limit_setting} if limit_setting is not None else None)
    ours = SidecarSession(sid(), address, session_settings={"limit": limit_setting} if limit_setting is not None
                          else None)
    assert ours.session_settings == ref.session_settings
    last_ref, last_ours = [], []
    try:
        for op, arg in script:
            if op == "add":
                # both get their own copy (the runner hands each session its own list)
                await ref.add_items(copy.deepcopy(arg))
                await ours.add_items(copy.deepcopy(arg))
            elif op == "get":
                last_ref, last_ours = await ref.get_items(arg), await ours.get_items(arg)
                assert canon(last_ours) == canon(last_ref)
            elif op == "pop":
                a, b = await ref.pop_item(), await ours.pop_item()
                assert canon(b) == canon(a)
                last_ref, last_ours = [a], [b]
            elif op == "clear":
                await ref.clear_session()
                await ours.clear_session()
            elif op == "mutate":  # the caller changes what it got back; the stores must not change
                for got in (last_ref, last_ours):
                    if got and isinstance(got[arg % len(got)], dict):
                        got[arg % len(got)]["mutated"] = [1]
                        got[arg % len(got)].pop("role", None)
                    elif got:
                        got.append({"appended": True})
        assert canon(await ours.get_items()) == canon(await ref.get_items())
    finally:
        ref.close()
        await ours.aclose()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=ops, limit_setting=st.one_of(st.none(), st.integers(0, 4)))
def test_same_results_as_sqlite_session(module_sidecar, tmp_path, script, limit_setting):
    asyncio.run(_script(module_sidecar.address, tmp_path, script, limit_setting))


def test_values_json_cannot_hold_raise_before_anything_is_stored(module_sidecar, tmp_path):
    async def go():
        ref = SQLiteSession(sid(), str(tmp_path / "r.db"))
        ours = SidecarSession(sid(), module_sidecar.address)
        bad = [{"role": "user", "content": "ok"}, {"role": "user", "content": {1, 2}}]
        for s in (ref, ours):
            with pytest.raises(TypeError):
                await s.add_items(bad)
            assert await s.get_items() == []
        await ours.aclose()
        ref.close()
    asyncio.run(go())


def test_unknown_session_reads_as_empty(module_sidecar):
    async def go():
        s = SidecarSession(sid(), module_sidecar.address)
        assert await s.get_items() == [] and await s.get_items(3) == []
        assert await s.pop_item() is None
        await s.clear_session()
        await s.aclose()
    asyncio.run(go())


def test_items_are_described_to_the_server(module_sidecar):
    async def go():
        s = SidecarSession(sid(), module_sidecar.address, namespace="agents-ns")
        await s.add_items([
            {"role": "user", "content": "what is 1+2?"},
            {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"a\":1}", "id": "fc1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "3"},
            {"type": "reasoning", "summary": []},
            {"type": "web_search_call", "id": "ws", "status": "completed"},
            {"type": "item_reference", "id": "x"},
        ])
        await s.aclose()
        return s.session_id
    thread = asyncio.run(go())
    with Client(module_sidecar.address, namespace="agents-ns") as c:
        got = c.conversations.latest(thread)
    assert [(i.kind, i.role, i.call_id, i.tool_name) for i in got] == [
        (cpb.ITEM_KIND_MESSAGE, "user", "", ""), (cpb.ITEM_KIND_TOOL_CALL, "", "call_1", "add"),
        (cpb.ITEM_KIND_TOOL_RESULT, "", "call_1", ""), (cpb.ITEM_KIND_REASONING, "", "", ""),
        (cpb.ITEM_KIND_TOOL_CALL, "", "", ""), (cpb.ITEM_KIND_OTHER, "", "", "")]
    assert json.loads(item_value(got[0])) == {"role": "user", "content": "what is 1+2?"}
    assert got[2].dedupe_key == _items.describe({"type": "function_call_output", "call_id": "other",
                                                 "output": "3", "id": "z"})["dedupe_key"]
    assert all(i.client_item_id for i in got)


def test_a_cancelled_add_is_awaited_to_its_outcome(module_sidecar):
    async def go():
        s = SidecarSession(sid(), module_sidecar.address)
        task = asyncio.ensure_future(s.add_items([{"role": "user", "content": f"m{i}"} for i in range(300)]))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        got = await s.get_items()
        await s.aclose()
        return got
    got = asyncio.run(go())
    assert [g["content"] for g in got] == [f"m{i}" for i in range(300)]  # the append went through whole


# ----------------------------------------------------------------- under the SDK's Runner

class FakeModel(Model):
    """A model that answers a tool call when the last input item is the user's, else a message naming what it
    saw; it records every input it got."""

    def __init__(self) -> None:
        self.inputs: list = []
        self.calls = 0

    def _output(self, input):
        self.inputs.append(copy.deepcopy(input))
        self.calls += 1
        last = input[-1] if isinstance(input, list) and input else {}
        if isinstance(last, dict) and last.get("role") == "user":
            return [ResponseFunctionToolCall(type="function_call", call_id=f"call_{self.calls}", name="add",
                                             arguments=json.dumps({"a": self.calls, "b": 2}), id=f"fc_{self.calls}",
                                             status="completed")]
        return [ResponseOutputMessage(id=f"msg_{self.calls}", type="message", role="assistant", status="completed",
                                      content=[ResponseOutputText(type="output_text", annotations=[],
                                                                  text=f"seen {len(input)} items")])]

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None, **kw):
        return ModelResponse(output=self._output(input), usage=Usage(), response_id=self.response_id)

    response_id = None

    async def stream_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                              tracing, *, previous_response_id=None, conversation_id=None, prompt=None, **kw):
        out = self._output(input)
        resp = Response(id=f"resp_{self.calls}", created_at=0, model="fake", object="response", output=out,
                        parallel_tool_calls=False, tool_choice="auto", tools=[])
        yield ResponseCompletedEvent(type="response.completed", response=resp, sequence_number=0)


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _agent(model):
    return Agent(name="calc", instructions="add numbers", model=model, tools=[add])


async def _stream(agent, text, session):
    result = Runner.run_streamed(agent, text, session=session)
    async for _ in result.stream_events():
        pass
    return result


def _compare_runs(mode, address, tmp_path):
    ref_model, our_model = FakeModel(), FakeModel()
    ref = SQLiteSession(sid(), str(tmp_path / f"{mode}.db"))
    ours = SidecarSession(sid(), address)
    outputs = {}
    for name, session, model in (("ref", ref, ref_model), ("ours", ours, our_model)):
        agent = _agent(model)
        finals = []
        for text in ("first", "second"):
            if mode == "run":
                res = asyncio.run(Runner.run(agent, text, session=session))
            elif mode == "run_sync":
                res = Runner.run_sync(agent, text, session=session)
            else:
                res = asyncio.run(_stream(agent, text, session))
            finals.append(res.final_output)
        outputs[name] = finals
    assert outputs["ours"] == outputs["ref"]
    assert outputs["ours"][1] == "seen 7 items"  # the first run's 4 items, the input, the call, its output
    assert canon(our_model.inputs) == canon(ref_model.inputs)
    stored_ref = asyncio.run(ref.get_items())
    stored_ours = asyncio.run(ours.get_items())
    assert canon(stored_ours) == canon(stored_ref)
    assert [i.get("type", "message") for i in stored_ours] == [
        "message", "function_call", "function_call_output", "message"] * 2
    ref.close()


@pytest.mark.parametrize("mode", ["run", "run_sync", "run_streamed"])
def test_runner_with_a_fake_model_same_as_sqlite_session(module_sidecar, tmp_path, mode):
    _compare_runs(mode, module_sidecar.address, tmp_path)


def test_session_settings_limit_under_the_runner(module_sidecar, tmp_path):
    from agents import RunConfig
    from agents.memory import SessionSettings
    ref_model, our_model = FakeModel(), FakeModel()
    ref = SQLiteSession(sid(), str(tmp_path / "limit.db"))
    ours = SidecarSession(sid(), module_sidecar.address)
    for session, model in ((ref, ref_model), (ours, our_model)):
        agent = _agent(model)
        for text in ("a", "b", "c"):
            Runner.run_sync(agent, text, session=session,
                            run_config=RunConfig(session_settings=SessionSettings(limit=3)))
    assert canon(our_model.inputs) == canon(ref_model.inputs)
    ref.close()


def test_inside_encrypted_session(module_sidecar, tmp_path):
    from agents.extensions.memory import EncryptedSession
    key = "k" * 43 + "="
    ref_model, our_model = FakeModel(), FakeModel()
    ref = EncryptedSession(sid(), SQLiteSession(sid(), str(tmp_path / "enc.db")), encryption_key=key)
    inner = SidecarSession(sid(), module_sidecar.address)
    ours = EncryptedSession(inner.session_id, inner, encryption_key=key)
    for session, model in ((ref, ref_model), (ours, our_model)):
        agent = _agent(model)
        for text in ("first", "second"):
            Runner.run_sync(agent, text, session=session)
    assert canon(our_model.inputs[-1]) == canon(ref_model.inputs[-1])
    assert len(our_model.inputs[-1]) == 7  # the first run's 4 items decrypted and fed back, then this run's 3
    assert canon(asyncio.run(ours.get_items())) == canon(asyncio.run(ref.get_items()))
    # the server sees envelopes only
    with Client(module_sidecar.address) as c:
        stored = c.conversations.latest(inner.session_id)
    assert stored and all(i.kind == cpb.ITEM_KIND_OTHER for i in stored)
    assert all(json.loads(item_value(i)).get("__enc__") == 1 for i in stored)
    assert "first" not in "".join(item_value(i) for i in stored)
    popped_ref, popped_ours = asyncio.run(ref.pop_item()), asyncio.run(ours.pop_item())
    assert canon(popped_ours) == canon(popped_ref)


def test_run_compaction_with_a_summarizer_under_the_runner(module_sidecar):
    seen = []

    async def summarise(compaction):
        seen.append(compaction.compaction_id)
        return "summary of " + ", ".join(str(json.loads(item_value(i)).get("type", "message")) for i in compaction.items)

    session = SidecarSession(sid(), module_sidecar.address, summarizer=summarise)
    plain = SidecarSession(sid(), module_sidecar.address)
    assert callable(getattr(session, "run_compaction", None)) and not hasattr(plain, "run_compaction")
    with Client(module_sidecar.address) as c:
        c.conversations.append(session.session_id, [], create_thread=True)
        c.conversations.set_compaction_policy(thread_id=session.session_id, trigger_items=4, compact_items=2,
                                              keep_last_items=1)
    model = FakeModel()
    model.response_id = "resp-1"
    agent = _agent(model)
    for text in ("first", "second", "third"):
        Runner.run_sync(agent, text, session=session)
    with Client(module_sidecar.address) as c:
        sums = list(c.conversations.list_summaries(session.session_id))
        stored = c.conversations.latest(session.session_id)
    assert seen and [s.summary_id for s in sums if s.level == 1] == [x for x in seen if x.startswith("L1")]
    assert all(s.producer == "agentstate.agents.SidecarSession" and s.text.startswith("summary of") for s in sums)
    assert len(stored) == 12  # the originals stay: 3 runs of 4 items
    ctx = asyncio.run(session.get_context(8000))
    assert ctx.total_tokens <= 8000 and any(i.source == cpb.CONTEXT_SOURCE_SUMMARY for i in ctx.items)


def test_the_context_mode_feeds_the_runner_summaries_within_the_budget(module_sidecar):
    session = SidecarSession(sid(), module_sidecar.address, context_budget=4000)
    with Client(module_sidecar.address) as c:
        c.conversations.append(session.session_id, [], create_thread=True)
        c.conversations.set_compaction_policy(thread_id=session.session_id, trigger_items=4, compact_items=2,
                                              keep_last_items=2, fallback_after=0)
        c.conversations.set_pin("sys", "message", _items.to_text({"role": "system", "content": "be brief"}),
                                thread_id=session.session_id)
    model = FakeModel()
    agent = _agent(model)
    for text in ("first", "second", "third"):
        Runner.run_sync(agent, text, session=session)
    last = model.inputs[-2]  # the third run's first model call (each run calls the model twice)
    roles = [i.get("role") for i in last if isinstance(i, dict)]
    assert last[0] == {"role": "system", "content": "be brief"}
    assert "developer" in roles and any(str(i.get("content", "")).startswith("Summary of earlier conversation")
                                        for i in last if isinstance(i, dict))
    calls = {i["call_id"] for i in last if isinstance(i, dict) and i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in last if isinstance(i, dict) and i.get("type") == "function_call_output"}
    assert calls == outputs  # no call without its result or result without its call
    with Client(module_sidecar.address) as c:
        assert len(c.conversations.latest(session.session_id)) == 12  # the stored items are all there
    assert asyncio.run(session.get_items(0)) == []
