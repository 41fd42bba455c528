"""The conversation log (ConversationService): appends with server seqs, conditional and idempotent appends,
reads, pop and clear, token counts, several writers, bad input, deleting threads, and idle expiry with an
injected clock (an in-process sidecar whose store clock the test moves)."""
from __future__ import annotations

import asyncio
import threading
import uuid

import grpc
import pytest

from agentstate import AgentStateError, Client, decode_map
from agentstate.conversations import item, item_value
from agentstate.v1 import conversations_pb2 as cpb
from agentstate.errors import from_rpc_error
from conftest import InProcess

from sidecar.state import conversations
from sidecar.storage import records, valuetext


def tid(prefix="conv") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def msg(text, cid="", role="user", **kw):
    return item("message", text, role=role, client_item_id=cid, **kw)


@pytest.fixture(scope="module")
def c(module_sidecar):
    with module_sidecar.client() as client:
        yield client


def fails(fn, code, reason, field=None):
    with pytest.raises(AgentStateError) as e:
        fn()
    assert e.value.code == code, e.value
    assert e.value.reason == reason, e.value
    if field is not None:
        assert e.value.field == field, e.value
    return e.value


def snapshot(c, thread_id):
    """Everything a client can see of a conversation (for 'nothing changed' checks)."""
    items = [(i.seq, i.client_item_id, i.SerializeToString()) for i in c.conversations.list(thread_id)]
    conv = c.conversations.conversation(thread_id)
    conv.ClearField("last_active_time")  # compared separately where it matters
    return items, conv.SerializeToString()


# ----------------------------------------------------------------- appends and reads


def test_item_metadata_is_stored_and_read_back(c, tmp_path):
    """An item's metadata map comes back as given, from every read, and an item without one has none
    (the record's field used to be declared ``Raw | None``, which msgspec decodes as None only: every read
    of an item with metadata failed INTERNAL)."""
    t = tid()
    c.conversations.append(t, [msg("with", "a", metadata={"source": "crm", "n": 3, "tags": ["x", "y"]}),
                               msg("without", "b")], create_thread=True)
    got = list(c.conversations.list(t))
    assert [decode_map(i.metadata) for i in got] == [{"source": "crm", "n": 3, "tags": ["x", "y"]}, {}]
    assert [item_value(i) for i in got] == ["with", "without"]
    again = c.conversations.append(t, [msg("with", "a", metadata={"source": "crm", "n": 3, "tags": ["x", "y"]})])
    assert again.duplicates == 1  # the retry of the first item is recognised, metadata and all


def test_append_gives_consecutive_seqs_and_reads_return_content_byte_for_byte(c):
    t = tid()
    resp = c.conversations.append(t, [msg("hello", "a"), msg({"x": [1, 2.5, None]}, "b", role="assistant")],
                                  create_thread=True, thread_metadata={"user": "u1"})
    assert resp.created and resp.last_seq == 2 and resp.duplicates == 0
    assert [i.seq for i in resp.items] == [1, 2]
    assert not resp.items[0].HasField("content")  # append answers without content
    resp2 = c.conversations.append(t, [msg("third")])
    assert [i.seq for i in resp2.items] == [3] and not resp2.created
    got = list(c.conversations.list(t))
    assert [(i.seq, i.role, item_value(i)) for i in got] == [
        (1, "user", "hello"), (2, "assistant", {"x": [1, 2.5, None]}), (3, "user", "third")]
    assert got[0].content_hash and got[0].content_hash != got[2].content_hash
    assert got[0].create_time.seconds > 0
    thread = c.get_thread(t)
    assert thread.last_active_time.seconds > 0
    assert decode_map(thread.metadata) == {"user": "u1"}


def test_unknown_thread_without_create_is_not_found_and_creates_nothing(c):
    t = tid()
    fails(lambda: c.conversations.append(t, [msg("x")]), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND", "thread_id")
    fails(lambda: c.get_thread(t), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    for call in (lambda: list(c.conversations.list(t)), lambda: c.conversations.pop(t),
                 lambda: c.conversations.clear(t), lambda: c.conversations.conversation(t),
                 lambda: c.conversations.get(t, [1])):
        fails(call, grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND", "thread_id")


def test_latest_ranges_and_paging(c):
    t = tid()
    c.conversations.append(t, [msg(f"m{i}") for i in range(1, 251)], create_thread=True)
    vals = lambda items: [item_value(i) for i in items]  # noqa: E731
    assert vals(c.conversations.latest(t, 20)) == [f"m{i}" for i in range(231, 251)]
    assert vals(c.conversations.latest(t, 1000)) == [f"m{i}" for i in range(1, 251)]
    assert len(c.conversations.latest(t)) == 250
    # pages of 7 over a range, and the latest 30 of a range
    assert [i.seq for i in c.conversations.list(t, start_seq=10, end_seq=40, page_size=7)] == list(range(10, 41))
    assert [i.seq for i in c.conversations.list(t, start_seq=10, end_seq=100, latest=30, page_size=8)] == \
        list(range(71, 101))
    assert [i.seq for i in c.conversations.list(t, start_seq=245)] == list(range(245, 251))
    assert list(c.conversations.list(t, start_seq=300)) == []
    # a latest listing is pinned by its first page: items appended between pages do not shift it
    first = c.conversations.stub.ListItems(cpb.ListItemsRequest(thread_id=t, latest=10, page_size=4))
    c.conversations.append(t, [msg("late")])
    rest = []
    token = first.next_page_token
    while token:
        page = c.conversations.stub.ListItems(cpb.ListItemsRequest(thread_id=t, latest=10, page_size=4,
                                                                     page_token=token))
        rest.extend(page.items)
        token = page.next_page_token
    assert [i.seq for i in list(first.items) + rest] == list(range(241, 251))
    # a token of another listing is refused
    with pytest.raises(grpc.RpcError) as err:
        c.conversations.stub.ListItems(cpb.ListItemsRequest(thread_id=t, latest=11, page_token=first.next_page_token))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # omit_content
    light = list(c.conversations.list(t, start_seq=1, end_seq=2, omit_content=True))
    assert [i.HasField("content") for i in light] == [False, False] and light[0].estimated_tokens > 0


def test_get_items_by_seq_and_client_id(c):
    t = tid()
    c.conversations.append(t, [msg("a", "id-a"), msg("b", "id-b"), msg("c")], create_thread=True)
    got = c.conversations.get(t, [3, 1], ["id-b"])
    assert [(i.seq, item_value(i)) for i in got.items] == [(3, "c"), (1, "a"), (2, "b")]
    fails(lambda: c.conversations.get(t, [1, 9]), grpc.StatusCode.NOT_FOUND, "ITEM_NOT_FOUND", "seqs[1]")
    fails(lambda: c.conversations.get(t, [], ["id-a", "nope"]), grpc.StatusCode.NOT_FOUND, "ITEM_NOT_FOUND",
          "client_item_ids[1]")
    got = c.conversations.get(t, [9, 2], ["nope"], allow_missing=True)
    assert [i.seq for i in got.items] == [2] and list(got.missing_seqs) == [9]
    assert list(got.missing_client_item_ids) == ["nope"]


# ----------------------------------------------------------------- conditional and idempotent appends

def test_expected_last_seq_makes_an_append_conditional(c):
    t = tid()
    c.conversations.append(t, [msg("1"), msg("2")], create_thread=True, expected_last_seq=0)
    before = snapshot(c, t)
    e = fails(lambda: c.conversations.append(t, [msg("x")], expected_last_seq=1), grpc.StatusCode.FAILED_PRECONDITION,
              "SEQUENCE_MISMATCH", "expected_last_seq")
    assert e.metadata["last_seq"] == "2"
    assert snapshot(c, t) == before
    assert c.conversations.append(t, [msg("3")], expected_last_seq=2).last_seq == 3
    # two writers that both read up to seq 3: exactly one wins
    results = []
    for text in ("device-a", "device-b"):
        try:
            results.append(c.conversations.append(t, [msg(text)], expected_last_seq=3).last_seq)
        except AgentStateError as err:
            results.append(err.reason)
    assert results == [4, "SEQUENCE_MISMATCH"]


def test_client_item_ids_make_retries_idempotent(c):
    t = tid()
    first = c.conversations.append(t, [msg("a", "x1"), msg("b", "x2")], create_thread=True)
    c.conversations.append(t, [msg("other")])
    # the retry of a request that went through: every item a duplicate, expected_last_seq not checked
    again = c.conversations.append(t, [msg("a", "x1"), msg("b", "x2")], expected_last_seq=0)
    assert again.duplicates == 2 and [i.seq for i in again.items] == [i.seq for i in first.items] == [1, 2]
    assert again.last_seq == 3
    # a partly new request is checked
    fails(lambda: c.conversations.append(t, [msg("a", "x1"), msg("new", "x3")], expected_last_seq=0),
          grpc.StatusCode.FAILED_PRECONDITION, "SEQUENCE_MISMATCH")
    mixed = c.conversations.append(t, [msg("a", "x1"), msg("new", "x3"), msg("new", "x3")])
    assert [i.seq for i in mixed.items] == [1, 4, 4] and mixed.duplicates == 2
    assert [item_value(i) for i in c.conversations.list(t)] == ["a", "b", "other", "new"]
    # ids of popped items are forgotten
    c.conversations.pop(t)
    readd = c.conversations.append(t, [msg("new again", "x3")])
    assert readd.duplicates == 0 and readd.items[0].seq == 5


def test_request_id_answers_a_retry_with_the_first_answer(c):
    t = tid()
    r1 = c.conversations.append(t, [msg("a")], create_thread=True, request_id="req-1-" + t)
    r2 = c.conversations.append(t, [msg("a")], create_thread=True, request_id="req-1-" + t)
    assert r1 == r2
    assert len(c.conversations.latest(t)) == 1
    p1 = c.conversations.pop(t, request_id="pop-" + t)
    p2 = c.conversations.pop(t, request_id="pop-" + t)
    assert p1 == p2 and item_value(p1) == "a"


# ----------------------------------------------------------------- pop and clear

def test_pop_and_clear_never_reuse_seqs(c):
    t = tid()
    c.conversations.append(t, [msg(f"m{i}") for i in range(1, 6)], create_thread=True)
    popped = c.conversations.pop(t)
    assert popped.seq == 5 and item_value(popped) == "m5"
    conv = c.conversations.conversation(t)
    assert (conv.item_count, conv.first_seq, conv.last_seq) == (4, 1, 4)
    assert c.conversations.append(t, [msg("m6")]).items[0].seq == 6
    fails(lambda: c.conversations.pop(t, expected_last_seq=5), grpc.StatusCode.FAILED_PRECONDITION,
          "SEQUENCE_MISMATCH", "expected_last_seq")
    cleared = c.conversations.clear(t)
    assert cleared.cleared_items == 5
    conv = c.conversations.conversation(t)
    assert (conv.item_count, conv.first_seq, conv.last_seq, conv.estimated_tokens) == (0, 0, 0, 0)
    assert c.conversations.pop(t) is None
    assert c.conversations.append(t, [msg("after")]).items[0].seq == 7
    assert [i.seq for i in c.conversations.latest(t, 5)] == [7]


def test_pop_everything_then_the_estimate_sum_is_zero(c):
    t = tid()
    c.conversations.append(t, [msg("x" * n) for n in (1, 50, 500)], create_thread=True)
    total = c.conversations.conversation(t).estimated_tokens
    assert total == sum(i.estimated_tokens for i in c.conversations.latest(t))
    for _ in range(3):
        assert c.conversations.pop(t) is not None
    conv = c.conversations.conversation(t)
    assert (conv.item_count, conv.estimated_tokens, conv.last_seq) == (0, 0, 0)


# ----------------------------------------------------------------- tokens

def test_token_counts_are_kept_and_the_estimate_over_counts(c):
    t = tid()
    texts = ["hello world", "héllo wörld ✓ 日本語", "", "a" * 3000]
    c.conversations.append(t, [msg(texts[0], tokens=(3, "o200k_base", True)),
                               msg(texts[1], tokens=(9, "mine", False))] + [msg(x) for x in texts[2:]],
                           create_thread=True)
    got = c.conversations.latest(t)
    assert (got[0].tokens.count, got[0].tokens.tokenizer, got[0].tokens.exact) == (3, "o200k_base", True)
    assert (got[1].tokens.count, got[1].tokens.tokenizer, got[1].tokens.exact) == (9, "mine", False)
    assert not got[2].HasField("tokens")
    for it, text in zip(got, texts):
        # every token of a byte-level BPE tokenizer covers at least one byte of the text
        assert it.estimated_tokens >= len(text.encode()) + len(it.role.encode())
        assert it.estimated_tokens == valuetext.estimate(it.content.msgpack, it.role)


def test_json_len_of_values():
    from agentstate import codec
    assert valuetext.json_len(codec.encode("ab")) == 4
    assert valuetext.json_len(codec.encode({"k": [1, None, True]})) == len('{"k":[1,null,true]}')
    assert valuetext.json_len(codec.encode(b"abcd")) == 2 + 8
    assert valuetext.json_len(codec.encode(1.5)) == 3
    assert valuetext.json_len(codec.encode(uuid.UUID(int=7))) == 38


# ----------------------------------------------------------------- several writers

def test_several_writers_are_ordered_by_the_server(module_sidecar):
    t = tid("multi")
    with module_sidecar.client() as c0:
        c0.conversations.append(t, [], create_thread=True)
    writers, batches, per = 4, 15, 3

    def write(w):
        with module_sidecar.client() as cw:
            for b in range(batches):
                cw.conversations.append(t, [msg(f"{w}:{b}:{k}", f"{w}-{b}-{k}") for k in range(per)])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    with module_sidecar.client() as c0:
        got = c0.conversations.latest(t)
    assert [i.seq for i in got] == list(range(1, writers * batches * per + 1))
    values = [item_value(i) for i in got]
    assert sorted(values) == sorted(f"{w}:{b}:{k}" for w in range(writers) for b in range(batches)
                                    for k in range(per))
    # each request's items are contiguous and in request order; each writer's requests in its order
    for start in range(0, len(values), per):
        w, b, k = values[start].split(":")
        assert k == "0" and values[start:start + per] == [f"{w}:{b}:{j}" for j in range(per)]
    for w in range(writers):
        mine = [int(v.split(":")[1]) for v in values if v.startswith(f"{w}:") and v.endswith(":0")]
        assert mine == list(range(batches))


# ----------------------------------------------------------------- bad input

def _bad_items():
    big = "x" * (4 * 1024 * 1024 + 10)
    no_content = cpb.ItemInput(kind=cpb.ITEM_KIND_MESSAGE, role="user")
    return [
        ("kind", cpb.ItemInput(role="user", content=msg("x").content), grpc.StatusCode.INVALID_ARGUMENT,
         "INVALID_FIELD", "items[1].kind"),
        ("kind99", cpb.ItemInput(kind=99, content=msg("x").content), grpc.StatusCode.INVALID_ARGUMENT,
         "INVALID_FIELD", "items[1].kind"),
        ("content", no_content, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "items[1].content"),
        ("bad msgpack", cpb.ItemInput(kind=1, content={"msgpack": b"\xc1"}), grpc.StatusCode.INVALID_ARGUMENT,
         "UNSUPPORTED_VALUE", None),
        ("oversized", msg(big), grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "items[1].content"),
        ("result without call", item("tool_result", "r"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD",
         "items[1].call_id"),
        ("tokens count", msg("x", tokens=(0, "o200k_base", True)), grpc.StatusCode.INVALID_ARGUMENT,
         "INVALID_FIELD", "items[1].tokens.count"),
        ("tokenizer", msg("x", tokens=(3, "", True)), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD",
         "items[1].tokens.tokenizer"),
        ("long tokenizer", msg("x", tokens=(3, "t" * 300, True)), grpc.StatusCode.INVALID_ARGUMENT,
         "INVALID_FIELD", "items[1].tokens.tokenizer"),
        ("client id NUL", msg("x", "a\x00b"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD",
         "items[1].client_item_id"),
        ("long call id", item("tool_call", "x", call_id="c" * 200), grpc.StatusCode.INVALID_ARGUMENT,
         "INVALID_FIELD", "items[1].call_id"),
        ("long role", msg("x", role="r" * 300), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD",
         "items[1].role"),
        ("dedupe key", msg("x", dedupe_key=b"k" * 65), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD",
         "items[1].dedupe_key"),
        ("compact", msg("x", compact="c" * 5000), grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED",
         "items[1].compact"),
    ]


@pytest.mark.parametrize("case", _bad_items(), ids=lambda case: case[0])
def test_bad_items_are_refused_and_change_nothing(c, case):
    _, bad, code, reason, field = case
    t = tid("bad")
    c.conversations.append(t, [msg("keep", "k1")], create_thread=True)
    before = snapshot(c, t)
    active = c.get_thread(t).last_active_time
    e = fails(lambda: c.conversations.append(t, [msg("good", "k2"), bad]), code, reason, field)
    if field is None:
        assert e.field.startswith("items[1].content")
    assert snapshot(c, t) == before
    assert c.get_thread(t).last_active_time == active
    # nothing of the good item either: its id is still free
    assert c.conversations.append(t, [msg("good", "k2")]).duplicates == 0


def test_bad_requests_name_their_field(c):
    t = tid("bad")
    c.conversations.append(t, [msg("a")], create_thread=True)
    stub = c.conversations.stub

    def rpc(method, req, code, reason, field):
        with pytest.raises(grpc.RpcError) as e:
            method(req)
        assert e.value.code() == code
        got = from_rpc_error(e.value)
        assert (got.reason, got.field) == (reason, field)

    rpc(stub.ListItems, cpb.ListItemsRequest(thread_id=t, start_seq=5, end_seq=2), grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD", "end_seq")
    rpc(stub.ListItems, cpb.ListItemsRequest(thread_id=t, page_size=5000), grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD", "page_size")
    rpc(stub.ListItems, cpb.ListItemsRequest(thread_id=t, page_token="garbage!"), grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD", "page_token")
    rpc(stub.GetItems, cpb.GetItemsRequest(thread_id=t, seqs=[0]), grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD", "seqs[0]")
    rpc(stub.GetItems, cpb.GetItemsRequest(thread_id=t, seqs=list(range(1, 1002))),
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "seqs")
    rpc(stub.AppendItems, cpb.AppendItemsRequest(thread_id="", items=[msg("x")]), grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD", "thread_id")
    rpc(stub.AppendItems, cpb.AppendItemsRequest(thread_id=t, items=[msg("x")] * 1001),
        grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "items")
    rpc(stub.AppendItems, cpb.AppendItemsRequest(thread_id=t, items=[msg("x")], lease_id="l"),
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "run_id")
    rpc(stub.AppendItems, cpb.AppendItemsRequest(thread_id=t, items=[msg("x")], run_id="nope", lease_id="l"),
        grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND", "run_id")
    rpc(stub.SetIdlePolicy, cpb.SetIdlePolicyRequest(scope=cpb.CONFIG_SCOPE_NAMESPACE, namespace="ns-bad",
                                                     policy=cpb.IdlePolicy(ttl={"nanos": 5})),
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "policy.ttl")
    rpc(stub.SetIdlePolicy, cpb.SetIdlePolicyRequest(policy=cpb.IdlePolicy(ttl={"seconds": 60})),
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "scope")
    rpc(stub.SetIdlePolicy, cpb.SetIdlePolicyRequest(scope=cpb.CONFIG_SCOPE_THREAD, thread_id=t,
                                                     policy=cpb.IdlePolicy(ttl={"seconds": 400 * 86400})),
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "policy.ttl")
    assert [item_value(i) for i in c.conversations.latest(t)] == ["a"]


# ----------------------------------------------------------------- run-scoped appends, thread deletion

def test_run_scoped_append_needs_the_holder(c):
    t = tid("run")
    c.conversations.append(t, [], create_thread=True)
    held = c.runs.start(t)
    got = c.conversations.append(t, [msg("by the run")], run_id=held.run_id, lease_id=held.lease_id)
    assert got.items[0].run_id == held.run_id
    fails(lambda: c.conversations.append(t, [msg("x")], run_id=held.run_id, lease_id="stale"),
          grpc.StatusCode.FAILED_PRECONDITION, "LEASE_LOST")
    assert len(c.conversations.latest(t)) == 1


def test_deleting_a_thread_deletes_its_conversation(c):
    t = tid("del")
    c.conversations.append(t, [msg("a", "id1"), msg("b")], create_thread=True)
    c.delete_thread(t)
    fails(lambda: c.conversations.latest(t), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    again = c.conversations.append(t, [msg("new", "id1")], create_thread=True)
    assert again.created and again.duplicates == 0 and again.items[0].seq == 1
    assert [item_value(i) for i in c.conversations.latest(t)] == ["new"]


# ----------------------------------------------------------------- in-process sidecar with a clock

@pytest.fixture
def local(tmp_path):
    side = InProcess(tmp_path / "data")
    with Client(side.address) as client:
        side.client = client
        yield side
    side.close()


def test_idle_delete_is_invisible_at_once_and_reclaimed_by_the_sweep(local):
    c = local.client
    c.conversations.set_idle_policy(ttl=1800, action="delete")
    c.conversations.append("s1", [msg("hi", "h1"), msg("there")], create_thread=True)
    c.conversations.append("s2", [msg("other")], create_thread=True)
    c.put_checkpoint("s1", {"x": 1})
    conv = c.conversations.conversation("s1")
    assert conv.expire_time.seconds * 10**6 == local.clock.now // 10**6 * 10**6 + 1800 * 10**6
    local.clock.advance(1000)
    c.conversations.append("s2", [msg("still here")])  # s2 active later than s1
    local.clock.advance(801)  # s1 idle for 1801 s, s2 for 801 s
    fails(lambda: c.get_thread("s1"), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    fails(lambda: c.conversations.latest("s1"), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    fails(lambda: c.get_checkpoint("s1"), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    assert [t.thread_id for t in c.list_threads()] == ["s2"]
    assert local.rows("citems") == 4  # not reclaimed yet: nothing swept
    done = local.sweep()
    assert done.get("deleted") == 1 and done.get("moved") == 1
    assert local.rows("citems") == 2 and local.rows("reclaim") == 0 and local.rows("ckpts") == 0
    assert local.rows("cids") == 0
    # the id is free again: a new, empty thread
    again = c.conversations.append("s1", [msg("new", "h1")], create_thread=True)
    assert again.created and again.items[0].seq == 1 and again.duplicates == 0


def test_recreating_an_expired_thread_before_the_sweep_reclaims_the_old_one(local):
    c = local.client
    c.conversations.set_idle_policy(ttl=60, action="delete")
    c.conversations.append("s", [msg(f"m{i}") for i in range(10)], create_thread=True)
    local.clock.advance(61)
    again = c.conversations.append("s", [msg("fresh")], create_thread=True)
    assert again.created and [item_value(i) for i in c.conversations.latest("s")] == ["fresh"]
    assert local.rows("reclaim") == 1
    local.sweep()
    assert local.rows("reclaim") == 0 and local.rows("citems") == 1
    assert [item_value(i) for i in c.conversations.latest("s")] == ["fresh"]


def test_idle_close_refuses_writes_until_reopened(local):
    c = local.client
    c.conversations.append("s", [msg("a")], create_thread=True)
    c.conversations.set_idle_policy(thread_id="s", ttl=30 * 60, action="close")
    local.clock.advance(30 * 60)
    # closed from the expiry instant, before any sweep; reads still work
    assert c.conversations.conversation("s").closed
    for call in (lambda: c.conversations.append("s", [msg("b")]), lambda: c.conversations.pop("s"),
                 lambda: c.conversations.clear("s")):
        fails(call, grpc.StatusCode.FAILED_PRECONDITION, "SESSION_CLOSED")
    assert [item_value(i) for i in c.conversations.latest("s")] == ["a"]
    assert local.sweep().get("closed") == 1
    events = [e.type for e in c.events.list("s")]
    assert events == ["agentstate.session.closed"]
    fails(lambda: c.conversations.append("s", [msg("b")]), grpc.StatusCode.FAILED_PRECONDITION, "SESSION_CLOSED")
    c.conversations.append("s", [msg("b")], reopen=True)
    assert not c.conversations.conversation("s").closed
    assert [item_value(i) for i in c.conversations.latest("s")] == ["a", "b"]
    local.clock.advance(29 * 60)
    c.conversations.pop("s")  # active again
    local.clock.advance(29 * 60)
    assert not c.conversations.conversation("s").closed
    assert not local.sweep().get("closed")


def test_thread_policy_overrides_the_namespace_and_activity_moves_expiry(local):
    c = local.client
    c.conversations.set_idle_policy(ttl=100, action="delete")
    c.conversations.append("keep", [msg("a")], create_thread=True)
    c.conversations.set_idle_policy(thread_id="keep", ttl=0)  # never expires
    got = c.conversations.get_idle_policy(thread_id="keep")
    assert got.source == cpb.POLICY_SOURCE_THREAD and not got.effective.HasField("ttl")
    c.conversations.append("busy", [msg("a")], create_thread=True)
    for _ in range(5):
        local.clock.advance(60)
        c.conversations.append("busy", [msg("more")])
        local.sweep()
    assert c.get_thread("busy") and c.get_thread("keep")
    local.clock.advance(101)
    local.sweep()
    fails(lambda: c.get_thread("busy"), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    assert c.get_thread("keep")
    # clearing the thread's own policy: the namespace's applies again (from the last activity)
    c.conversations.set_idle_policy(thread_id="keep", clear=True)
    fails(lambda: c.get_thread("keep"), grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    ns = c.conversations.get_idle_policy()
    assert ns.source == cpb.POLICY_SOURCE_NAMESPACE and ns.effective.ttl.seconds == 100
    assert ns.effective.action == cpb.IDLE_ACTION_DELETE


def test_a_namespace_policy_set_later_is_walked_onto_existing_threads(local):
    c = local.client
    for i in range(5):
        c.conversations.append(f"t{i}", [msg("a")], create_thread=True)
    c.create_thread("no-conversation")
    assert local.rows("ctimers") == 0
    c.conversations.set_idle_policy(ttl=10, action="delete")
    local.sweep()  # the walk places the rows
    assert local.rows("ctimers") == 5
    local.clock.advance(11)
    assert local.sweep().get("deleted") == 5
    assert [t.thread_id for t in c.list_threads()] == ["no-conversation"]
    assert local.rows("citems") == 0 and local.rows("cstate") == 0 and local.rows("threads") == 1


def test_a_large_thread_is_reclaimed_in_small_jobs_while_others_append(tmp_path):
    side = InProcess(tmp_path / "data", reclaim_batch=500)
    try:
        with Client(side.address) as c:
            c.conversations.set_idle_policy(ttl=5, action="delete")
            for b in range(6):
                c.conversations.append("big", [msg(f"m{b}-{i}", f"id{b}-{i}") for i in range(500)],
                                       create_thread=True)
            c.conversations.append("small", [msg("x")], create_thread=True)
            side.clock.advance(3)
            c.conversations.append("small", [msg("y")])
            side.clock.advance(3)
            jobs_before = side.sidecar.sweeper.jobs
            running = asyncio.run_coroutine_threadsafe(side.sidecar.sweeper.sweep(), side.loop)
            for i in range(20):  # writers go on while the sweep runs (each sweep job is one small transaction)
                c.conversations.append("small", [msg(f"during-{i}")])
            done = running.result(60)
            assert done["deleted"] == 1
            # 3000 items + 3000 ids = 6000 rows: at least 12 jobs of 500, each its own transaction
            assert done["reclaim_jobs"] >= 12 and side.sidecar.sweeper.jobs - jobs_before >= 14
            assert side.rows("citems") == 22 and side.rows("cids") == 0
            assert [item_value(i) for i in c.conversations.latest("small")] == \
                ["x", "y"] + [f"during-{i}" for i in range(20)]
    finally:
        side.close()


def test_thread_deletion_deletes_every_conversation_row(local):
    c = local.client
    c.conversations.append("d", [item("tool_call", {"q": 1}, call_id="c1", client_item_id="i1"),
                                 item("tool_result", "ok", call_id="c1")], create_thread=True)
    assert local.rows("citems") == 2 and local.rows("cids") == 1 and local.rows("ccalls") == 1
    c.delete_thread("d")
    for table in ("citems", "cids", "ccalls", "cstate"):
        assert local.rows(table) == 0, table


def test_a_tool_result_points_at_its_call(local):
    c = local.client
    c.conversations.append("t", [item("tool_call", {"q": 1}, call_id="c1", tool_name="search"),
                                 item("tool_result", "ok", call_id="c1")], create_thread=True)
    store = local.sidecar.store
    with store.read() as txn:
        trec = records.thread(txn, store, "default", "t")
        assert conversations.get(txn, store, trec.tkey, 2).call_seq == 1
        assert conversations.get(txn, store, trec.tkey, 1).call_seq == 0


def test_the_asyncio_client_has_the_same_calls(module_sidecar):
    from agentstate import AsyncClient

    async def go():
        async with AsyncClient(module_sidecar.address) as ac:
            t = tid("aio")
            resp = await ac.conversations.append(t, [msg(f"m{i}", f"id{i}") for i in range(12)], create_thread=True)
            assert resp.last_seq == 12
            latest = await ac.conversations.latest(t, 5, page_size=2)
            listed = [i.seq async for i in ac.conversations.list(t, start_seq=3, end_seq=9, page_size=4)]
            popped = await ac.conversations.pop(t)
            got = await ac.conversations.get(t, client_item_ids=["id0"])
            conv = await ac.conversations.conversation(t)
            return [i.seq for i in latest], listed, popped.seq, got.items[0].seq, conv.item_count

    assert asyncio.run(go()) == ([8, 9, 10, 11, 12], list(range(3, 10)), 12, 1, 11)
