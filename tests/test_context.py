"""GetContext: properties of the assembly over random logs (hypothesis, directly on ops/assemble.py) — the budget
is never exceeded, no tool call without its result or result without its call, every source exactly once in
the explanation, deterministic — and the served call: pins, summaries, compression, dedupe, knowledge, the
context hash recomputed by the client, the same bytes after a restart, ReportUsage calibration."""
from __future__ import annotations

import uuid

import grpc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentstate import AgentStateError, from_value
from agentstate import codec
from agentstate.conversations import context_hash, item, knowledge
from agentstate.v1 import conversations_pb2 as cpb
from conftest import SidecarProcess

from sidecar.errors import ApiError
from sidecar.ops import assemble
from sidecar.ops.assemble import Params, Src, Sum
from sidecar.state import conversations as sc
from sidecar.storage import valuetext


# ----------------------------------------------------------------- random logs

def _src(seq, kind, content, role="", call_id="", tool_name="", tokens=None, dedupe=None):
    enc = codec.encode(content)
    return Src(kind, role, enc, valuetext.estimate(enc, role, call_id, tool_name), tokens, seq, call_id, tool_name,
               None, dedupe, sc.content_hash(enc))


@st.composite
def logs(draw):
    """Live items (with gaps from pops), applied summaries consistent with them, pins, knowledge, params."""
    shapes = draw(st.lists(st.sampled_from(["msg", "reason+msg", "call+result", "parallel", "open", "orphan",
                                            "dup_result", "dup_reason", "hosted"]), max_size=30))
    items, seq, n_call = [], 0, 0
    texts = ["short", "a much longer text " * 6, "x" * 300]

    def add(kind, content, **kw):
        nonlocal seq
        seq += draw(st.integers(1, 2))
        items.append(_src(seq, kind, content, **kw))

    for shape in shapes:
        n_call += 1
        cid = f"c{n_call}"
        if shape == "msg":
            add(sc.MESSAGE, draw(st.sampled_from(texts)), role=draw(st.sampled_from(["user", "assistant"])),
                tokens=draw(st.sampled_from([None, (5, "tok", True), (9, "other", False)])))
        elif shape == "reason+msg":
            add(sc.REASONING, "thinking about it")
            add(sc.MESSAGE, "answer", role="assistant")
        elif shape == "call+result":
            add(sc.TOOL_CALL, {"arguments": draw(st.sampled_from(texts))}, call_id=cid, tool_name="search")
            add(sc.TOOL_RESULT, draw(st.sampled_from(texts)), call_id=cid)
        elif shape == "parallel":
            add(sc.TOOL_CALL, {"q": 1}, call_id=cid + "a", tool_name="a")
            add(sc.TOOL_CALL, {"q": 2}, call_id=cid + "b", tool_name="b")
            add(sc.TOOL_RESULT, "ra", call_id=cid + "a")
            add(sc.TOOL_RESULT, "rb", call_id=cid + "b")
        elif shape == "open":
            add(sc.TOOL_CALL, {"q": "pending"}, call_id=cid, tool_name="slow")
        elif shape == "orphan":
            add(sc.TOOL_RESULT, "lost", call_id="never-called-" + cid)
        elif shape == "dup_result":
            for k in range(2):
                add(sc.TOOL_CALL, {"q": "same"}, call_id=f"{cid}-{k}", tool_name="search")
                add(sc.TOOL_RESULT, "the same long result " * 5, call_id=f"{cid}-{k}", dedupe=b"same")
        elif shape == "dup_reason":
            add(sc.REASONING, "same thought")
            add(sc.REASONING, "same thought")
            add(sc.MESSAGE, "m", role="assistant")
        else:
            add(sc.TOOL_CALL, {"hosted": True}, tool_name="web_search")
    trigger = draw(st.integers(2, 12))
    # summaries: level-1 ranges over a prefix, cut at block boundaries; level 2 over runs of them
    sums = []
    blocks = sc.blocks([(x.seq, x) for x in items], trigger)
    cuts = sorted(set(draw(st.lists(st.integers(0, max(len(blocks) - 1, 0)), max_size=6)))) if blocks else []
    start = 0
    l1 = []
    for cut in cuts:
        if cut < start:
            continue
        first, last = items[blocks[start][0]].seq, items[blocks[cut][1]].seq
        span = [x for x in items if first <= x.seq <= last]
        s = Sum(1, first, last, f"summary {first}-{last}", 12, sum(x.raw for x in span),
                draw(st.sampled_from([None, (3, "tok", True)])), len(span))
        l1.append(s)
        start = cut + 1
    # a pending compaction leaves the summaries after it out of the cover's run (a gap)
    gap = draw(st.integers(0, len(l1))) if l1 else 0
    applied = [s for k, s in enumerate(l1) if k != gap]
    sums += applied
    i = 0
    while i + 2 <= min(gap, len(applied)) and draw(st.booleans()):
        a, b = applied[i], applied[i + 1]
        sums.append(Sum(2, a.first, b.last, f"L2 {a.first}-{b.last}", 10, a.covered_raw + b.covered_raw,
                        None, a.item_count + b.item_count))
        i += 2
    pins = [Src(sc.MESSAGE, "system", codec.encode(t), valuetext.estimate(codec.encode(t), "system"),
                pin_id=f"p{k}") for k, t in enumerate(draw(st.lists(st.sampled_from(["be nice", "rules " * 10]),
                                                                      max_size=2)))]
    know = [Src(sc.MESSAGE, "", codec.encode(t), valuetext.estimate(codec.encode(t)), label=f"k{k}")
            for k, t in enumerate(draw(st.lists(st.sampled_from(["fact one", "fact two " * 20]), max_size=3)))]
    p = Params(budget=draw(st.integers(1, 3000)), keep_last=draw(st.integers(0, 8)), trigger_items=trigger,
               max_compact_chars=draw(st.sampled_from([16, 40, 200])), factor=draw(st.sampled_from([1.0, 0.3, 2.5])),
               tokenizer=draw(st.sampled_from(["", "tok"])), compress=draw(st.booleans()), dedupe=draw(st.booleans()),
               knowledge_at_end=draw(st.booleans()))
    return items, sums, pins, know, p


def check(items, sums, pins, know, p):
    try:
        res = assemble.assemble(items, sums, pins, know, p)
    except ApiError as e:
        assert e.reason == "CONTEXT_BUDGET_TOO_SMALL"
        assert int(e.metadata["required_tokens"]) > p.budget
        return None
    out = res.items
    # the budget
    assert res.total_tokens == sum(o.tokens for o in out) <= p.budget
    # no orphaned call or result among verbatim items
    for i, o in enumerate(out):
        if o.source != assemble.ITEM or not o.call_id:
            continue
        if o.kind == sc.TOOL_RESULT:
            assert any(x.source == assemble.ITEM and x.kind == sc.TOOL_CALL and x.call_id == o.call_id
                       for x in out[:i]), o
        if o.kind == sc.TOOL_CALL:
            assert any(x.source == assemble.ITEM and x.kind == sc.TOOL_RESULT and x.call_id == o.call_id
                       for x in out[i + 1:]), o
    # every source exactly once
    ex = res.explanation
    assert [e.pin_id for e in ex if e.pin_id is not None] == [x.pin_id for x in pins]
    assert sorted(e.knowledge_index for e in ex if e.knowledge_index is not None) == list(range(len(know)))
    ranges = [e for e in ex if e.pin_id is None and e.knowledge_index is None]
    covered = []
    for e in ranges:
        span = [x.seq for x in items if e.first <= x.seq <= e.last]
        assert span and span[0] == e.first and span[-1] == e.last and len(span) == e.item_count, e
        covered += span
    assert covered == [x.seq for x in items]
    # context indices point at items; every item is carried for some source
    for e in ex:
        if e.context_index is not None:
            assert 0 <= e.context_index < len(out)
    assert {e.context_index for e in ex if e.context_index is not None} == set(range(len(out)))
    # the stable prefix: pins and summaries first
    assert all(o.source in (assemble.PINNED, assemble.FROM_SUMMARY) for o in out[:res.stable_prefix])
    assert all(o.source not in (assemble.PINNED, assemble.FROM_SUMMARY) for o in out[res.stable_prefix:])
    # deterministic
    again = assemble.assemble(items, sums, pins, know, p)
    assert again.items == out and again.context_hash == res.context_hash and again.explanation == ex
    return res


@settings(max_examples=300, deadline=None)
@given(logs())
def test_assembly_properties(log):
    check(*log)


def test_a_huge_budget_keeps_everything_verbatim_except_orphans():
    items = [_src(1, sc.MESSAGE, "hi", role="user"), _src(2, sc.TOOL_CALL, {"q": 1}, call_id="c", tool_name="t"),
             _src(3, sc.TOOL_RESULT, "r", call_id="c"), _src(4, sc.TOOL_RESULT, "lost", call_id="x")]
    res = check(items, [], [], [], Params(10**6, 10, 20, 200))
    assert [o.first for o in res.items] == [1, 2, 3]
    assert [(e.first, e.last, e.fate) for e in res.explanation] == [
        (1, 1, assemble.KEPT), (2, 2, assemble.KEPT), (3, 3, assemble.KEPT), (4, 4, assemble.DROPPED_ORPHAN)]


def test_compression_format_and_dedupe_stub():
    long = "result text " * 40
    items = [_src(1, sc.TOOL_CALL, {"arguments": "query=cats"}, call_id="c1", tool_name="search"),
             _src(2, sc.TOOL_RESULT, long, call_id="c1", dedupe=b"k"),
             _src(3, sc.TOOL_CALL, {"arguments": "query=cats"}, call_id="c2", tool_name="search"),
             _src(4, sc.TOOL_RESULT, long, call_id="c2", dedupe=b"k"),
             _src(5, sc.MESSAGE, "thanks", role="user")]
    res = check(items, [], [], [], Params(10**6, 1, 20, 16))
    comp = [o for o in res.items if o.source == assemble.COMPRESSED]
    assert [codec.decode(o.content) for o in comp] == [
        {"tool": "search", "arguments": "query=cats", "result": "result text res\u2026"}] * 2
    assert [(o.first, o.last) for o in comp] == [(1, 2), (3, 4)]
    res = check(items, [], [], [], Params(10**6, 1, 20, 16, compress=False))
    stub = [o for o in res.items if o.duplicate_of_seq]
    assert [(o.first, codec.decode(o.content), o.duplicate_of_seq) for o in stub] == [(2, {"duplicate_of": "c2"}, 4)]


def test_the_budget_drops_the_oldest_units_as_one_entry():
    items = [_src(i, sc.MESSAGE, f"message number {i} " * 5, role="user") for i in range(1, 11)]
    pins = [Src(sc.MESSAGE, "system", codec.encode("rules"), 20, pin_id="sys")]
    last3 = sum(x.raw for x in items[-3:])
    res = check(items, [], pins, [], Params(20 + last3, 10, 20, 200))
    assert [o.first for o in res.items[1:]] == [8, 9, 10]
    assert (res.explanation[1].first, res.explanation[1].last, res.explanation[1].fate) == (1, 7,
                                                                                          assemble.DROPPED_BUDGET)
    with pytest.raises(ApiError) as e:
        assemble.assemble(items, [], pins, [], Params(20 + items[-1].raw - 1, 10, 20, 200))
    assert e.value.reason == "CONTEXT_BUDGET_TOO_SMALL"
    assert e.value.metadata["required_tokens"] == str(20 + items[-1].raw)


# ----------------------------------------------------------------- the served call

@pytest.fixture(scope="module")
def c(module_sidecar):
    with module_sidecar.client(namespace=f"ctx-{uuid.uuid4().hex[:8]}") as client:
        yield client


def fill(c, t):
    c.conversations.append(t, [], create_thread=True)
    c.conversations.set_compaction_policy(thread_id=t, trigger_items=6, compact_items=4, keep_last_items=2,
                                          fallback_after=0)
    c.conversations.set_pin("rules", "message", "You are helpful.", role="system")
    c.conversations.set_pin("tools", "tool_definition", {"name": "search"}, thread_id=t, tool_name="search")
    batch = []
    for i in range(6):
        batch += [item("message", f"question {i} " * 3, role="user"),
                  item("tool_call", {"arguments": f"q={i}"}, call_id=f"c{i}", tool_name="search"),
                  item("tool_result", "long result " * 30, call_id=f"c{i}"),
                  item("message", f"answer {i}", role="assistant")]
    c.conversations.append(t, batch)


def test_get_context_served_and_hash_recomputed(c):
    t = f"ctx-{uuid.uuid4().hex[:8]}"
    fill(c, t)
    ctx = c.conversations.get_context(t, 8000, knowledge=[knowledge("a retrieved fact", label="mem1")])
    sources = [i.source for i in ctx.items]
    assert sources[:2] == [cpb.CONTEXT_SOURCE_PINNED, cpb.CONTEXT_SOURCE_PINNED]
    assert cpb.CONTEXT_SOURCE_SUMMARY in sources and cpb.CONTEXT_SOURCE_KNOWLEDGE in sources
    assert ctx.stable_prefix_items == sources.index(cpb.CONTEXT_SOURCE_KNOWLEDGE)
    assert ctx.total_tokens == sum(i.tokens for i in ctx.items) <= 8000
    assert context_hash(ctx.items) == ctx.context_hash
    again = c.conversations.get_context(t, 8000, knowledge=[knowledge("a retrieved fact", label="mem1")])
    assert again.SerializeToString() == ctx.SerializeToString()
    # every live item exactly once
    seqs = []
    for e in ctx.explanation:
        if e.WhichOneof("source") == "items":
            seqs += list(range(e.items.first_seq, e.items.last_seq + 1))
    assert seqs == list(range(1, 25))
    # a small budget drops the oldest conversation first, then fails when even the newest unit cannot fit
    small = c.conversations.get_context(t, 200, knowledge=[knowledge("fact " * 100)])
    assert small.total_tokens <= 200 and cpb.CONTEXT_SOURCE_KNOWLEDGE not in [i.source for i in small.items]
    with pytest.raises(AgentStateError) as e:
        c.conversations.get_context(t, 10)
    assert (e.value.code, e.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONTEXT_BUDGET_TOO_SMALL")
    assert int(e.value.metadata["required_tokens"]) > 10


def test_report_usage_calibrates(c):
    t = f"ctx-{uuid.uuid4().hex[:8]}"
    c.conversations.append(t, [item("message", "hello there " * 20, role="user")], create_thread=True)
    ctx = c.conversations.get_context(t, 10**6)
    assert ctx.calibration_factor == 1.0 and ctx.estimated_raw_tokens == ctx.total_tokens
    rep = c.conversations.report_usage(t, ctx, input_tokens=ctx.estimated_raw_tokens // 4)
    want = 1.1 * (ctx.estimated_raw_tokens // 4) / ctx.estimated_raw_tokens
    assert rep.reports == 1 and rep.calibration_factor == pytest.approx(want)
    after = c.conversations.get_context(t, 10**6)
    assert after.calibration_factor == rep.calibration_factor
    assert after.total_tokens < ctx.total_tokens and after.context_hash == ctx.context_hash
    with pytest.raises(AgentStateError) as e:
        c.conversations.report_usage(t, ctx, input_tokens=0)
    assert e.value.field == "input_tokens"


def test_pins_and_bad_context_requests(c):
    t = f"ctx-{uuid.uuid4().hex[:8]}"
    c.conversations.append(t, [item("message", "x", role="user")], create_thread=True)
    r = c.conversations.set_pin("b", "message", "second", thread_id=t, position=2)
    c.conversations.set_pin("a", "message", "first", thread_id=t, position=1)
    assert [p.pin_id for p in c.conversations.list_pins(thread_id=t)] == ["a", "b"]
    with pytest.raises(AgentStateError) as e:
        c.conversations.set_pin("b", "message", "x", thread_id=t, expected_etag="stale")
    assert e.value.reason == "ETAG_MISMATCH"
    c.conversations.set_pin("b", "message", "second v2", thread_id=t, expected_etag=r.item.etag)
    assert c.conversations.delete_pin("a", thread_id=t)
    with pytest.raises(AgentStateError) as e:
        c.conversations.delete_pin("a", thread_id=t)
    assert (e.value.reason, e.value.field) == ("PINNED_ITEM_NOT_FOUND", "pin_id")
    assert not c.conversations.delete_pin("a", thread_id=t, allow_missing=True)
    stub = c.conversations.stub
    for req, field in ((cpb.GetContextRequest(thread_id=t, budget_tokens=0), "budget_tokens"),
                       (cpb.GetContextRequest(thread_id=t, budget_tokens=10**8), "budget_tokens"),
                       (cpb.GetContextRequest(thread_id=t, budget_tokens=100,
                                              knowledge=[cpb.KnowledgeItem(label="x")]), "knowledge[0].content")):
        with pytest.raises(grpc.RpcError) as err:
            stub.GetContext(req)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        from agentstate.errors import from_rpc_error
        assert from_rpc_error(err.value).field == field


def test_same_context_bytes_after_a_restart(tmp_path):
    proc = SidecarProcess(tmp_path / "data").start()
    t = "restart"
    try:
        with proc.client() as c:
            fill(c, t)
            first = c.conversations.get_context(t, 3000).SerializeToString()
    finally:
        proc.stop()
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        with proc.client() as c:
            again = c.conversations.get_context(t, 3000)
            assert again.SerializeToString() == first
            assert from_value(again.items[0].content) == "You are helpful."
    finally:
        proc.stop()


# ----------------------------------------------------------------- the bounded read equals the whole-log one

@pytest.fixture(scope="module")
def inproc(tmp_path_factory):
    from conftest import InProcess
    from agentstate import Client
    side = InProcess(tmp_path_factory.mktemp("ctxbounded") / "data")
    with Client(side.address) as client:
        side.client = client
        yield side
    side.close()


steps = st.lists(st.one_of(
    st.tuples(st.just("msgs"), st.integers(1, 12)),
    st.tuples(st.just("tool"), st.booleans()),  # with or without its result
    st.tuples(st.just("late_result"), st.integers(0, 5)),
    st.tuples(st.just("reason"), st.none()),
    st.tuples(st.just("pop"), st.integers(1, 4)),
), max_size=25)


@settings(max_examples=40, deadline=None)
@example(script=[("msgs", 3), ("tool", False), ("msgs", 3)], trigger=8, keep=2, budget=4000, fan_in=2)  # open call
@example(script=[("msgs", 9), ("tool", True), ("late_result", 0), ("msgs", 2)], trigger=3, keep=1, budget=4000,
         fan_in=2)
@given(script=steps, trigger=st.integers(3, 8), keep=st.integers(0, 6), budget=st.integers(50, 4000),
       fan_in=st.integers(2, 3))
def test_the_bounded_read_gives_the_whole_log_answer(inproc, script, trigger, keep, budget, fan_in):
    from sidecar.ops import context as ctx_ops
    from sidecar.storage import records
    c = inproc.client
    t = f"b-{uuid.uuid4().hex[:10]}"
    c.conversations.append(t, [], create_thread=True)
    c.conversations.set_compaction_policy(thread_id=t, trigger_items=trigger, compact_items=max(1, trigger - 2),
                                          keep_last_items=min(keep, 2), fallback_after=0, pyramid_fan_in=fan_in,
                                          pyramid_keep_last=0)
    calls = []
    for op, arg in script:
        if op == "msgs":
            c.conversations.append(t, [item("message", f"m {k} " * (k % 5 + 1), role="user") for k in range(arg)])
        elif op == "tool":
            cid = f"c{len(calls)}"
            calls.append(cid)
            batch = [item("tool_call", {"arguments": "x"}, call_id=cid, tool_name="f")]
            if arg:
                batch.append(item("tool_result", "result " * 10, call_id=cid))
            c.conversations.append(t, batch)
        elif op == "late_result" and calls:
            c.conversations.append(t, [item("tool_result", "late", call_id=calls[arg % len(calls)])])
        elif op == "reason":
            c.conversations.append(t, [item("reasoning", "hmm"), item("message", "ok", role="assistant")])
        elif op == "pop":
            for _ in range(arg):
                c.conversations.pop(t)
    store = inproc.sidecar.store
    with store.read() as txn:
        trec = records.thread(txn, store, "default", t)
        for k in (keep, 0, 3):
            got = []
            for bounded in (True, False):
                try:
                    res, _ = ctx_ops.build(txn, store, "default", t, trec.tkey, [], budget=budget, tokenizer="",
                                           keep_last=k, compress=True, dedupe=True, knowledge_at_end=False,
                                           bounded=bounded)
                    got.append((res.items, res.explanation, res.context_hash, res.stable_prefix, res.estimated_raw))
                except ApiError as e:
                    got.append((e.reason, e.metadata))
            assert got[0] == got[1]
