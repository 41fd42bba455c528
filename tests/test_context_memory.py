"""GetContext's memory query (issue 12/13, docs/memory.md "GetContext"): memory hits in the knowledge layer.

The hits are the items SearchMemoryItems returns for the same query, in its order, after the request's own
knowledge items; each is named (path, key, version, score) in its context item and its explanation entry,
kept or dropped by the budget like any knowledge item; the context is deterministic (same bytes twice, hash
recomputed by the client); the query's search refreshes no TTL; bad queries name ``memory_query.<field>``.
"""
from __future__ import annotations

import uuid

import grpc
import pytest

from agentstate import AgentStateError, codec
from agentstate.conversations import context_hash, item, knowledge
from agentstate.memory import memory_query, search_request
from agentstate.v1 import conversations_pb2 as cpb


@pytest.fixture(scope="module")
def c(module_sidecar):
    with module_sidecar.client(namespace=f"cm-{uuid.uuid4().hex[:8]}") as client:
        yield client


def setup_thread(c) -> str:
    t = f"t-{uuid.uuid4().hex[:8]}"
    c.conversations.append(t, [item("message", "what do I like?", role="user")], create_thread=True)
    return t


def put_facts(c, root: str) -> None:
    facts = [("tea", {"fact": "likes green tea", "kind": "pref", "n": 3}, [1.0, 0.0]),
             ("cats", {"fact": "has two cats", "kind": "fact", "n": 1}, [0.6, 0.8]),
             ("city", {"fact": "lives in Lyon", "kind": "fact", "n": 2}, [0.0, 1.0]),
             ("coffee", {"fact": "no coffee after noon", "kind": "pref", "n": 5}, [0.9, 0.1])]
    for key, value, vec in facts:
        c.memory.put((root, "u1"), key, value, vectors={"fact": vec})


def hits_of(ctx) -> list[tuple]:
    return [(tuple(i.memory_hit.path), i.memory_hit.key, i.memory_hit.version,
             i.memory_hit.score if i.memory_hit.HasField("score") else None, i.knowledge_index)
            for i in ctx.items if i.HasField("memory_hit")]


def test_hits_join_the_knowledge_layer_as_the_search_finds_them(c):
    root = f"r{uuid.uuid4().hex[:6]}"
    put_facts(c, root)
    t = setup_thread(c)
    q = memory_query((root,), filter={"n": {"$gte": 2}}, vector=[1.0, 0.05], limit=3)
    ctx = c.conversations.get_context(t, 10_000, knowledge=[knowledge("a given fact", label="given")],
                                      memory_query=q)
    want = c.memory.stub.SearchMemoryItems(search_request(c.namespace, (root,), filter={"n": {"$gte": 2}},
                                                          vector=[1.0, 0.05], limit=3, refresh_ttl=False)).items
    assert [(tuple(s.item.path), s.item.key, s.item.version, s.score) for s in want] == [
        h[:4] for h in hits_of(ctx)]
    assert [h[1] for h in hits_of(ctx)] == ["tea", "coffee", "city"]
    assert [h[4] for h in hits_of(ctx)] == [1, 2, 3]  # after the request's one knowledge item
    know = [i for i in ctx.items if i.source == cpb.CONTEXT_SOURCE_KNOWLEDGE]
    assert [i.knowledge_index for i in know] == [0, 1, 2, 3]
    assert codec.decode(know[1].content.msgpack) == {"fact": "likes green tea", "kind": "pref", "n": 3}
    # the explanation lists the given item and each hit once, kept, pointing at its context item
    ke = [e for e in ctx.explanation if e.WhichOneof("source") == "knowledge_index"]
    assert [e.knowledge_index for e in ke] == [0, 1, 2, 3]
    assert [e.memory_hit.key for e in ke] == ["", "tea", "coffee", "city"]
    assert all(e.fate == cpb.FATE_KEPT and ctx.items[e.context_index].knowledge_index == e.knowledge_index
               for e in ke)
    assert context_hash(ctx.items) == ctx.context_hash
    again = c.conversations.get_context(t, 10_000, knowledge=[knowledge("a given fact", label="given")],
                                        memory_query=q)
    assert again.SerializeToString() == ctx.SerializeToString()
    # a filter without a vector: the search's order (newest first), no scores
    plain = c.conversations.get_context(t, 10_000, memory_query=memory_query((root,), filter={"kind": "fact"}))
    assert [(h[1], h[3], h[4]) for h in hits_of(plain)] == [("city", None, 0), ("cats", None, 1)]


def test_the_budget_drops_hits_like_other_knowledge(c):
    root = f"r{uuid.uuid4().hex[:6]}"
    put_facts(c, root)
    c.memory.put((root, "u1"), "long", {"fact": "words " * 400, "n": 9}, vectors={"fact": [1.0, 0.0]})
    t = setup_thread(c)
    q = memory_query((root,), vector=[1.0, 0.0], limit=5)
    full = c.conversations.get_context(t, 100_000, memory_query=q)
    need = sum(i.tokens for i in full.items)
    small = c.conversations.get_context(t, need - 1, memory_query=q)
    assert small.total_tokens <= need - 1
    fates = {e.memory_hit.key: e.fate for e in small.explanation if e.WhichOneof("source") == "knowledge_index"}
    assert set(fates) == {"tea", "long", "coffee", "cats", "city"}
    assert cpb.FATE_DROPPED_BUDGET in fates.values() and cpb.FATE_KEPT in fates.values()
    kept = {i.memory_hit.key for i in small.items if i.HasField("memory_hit")}
    assert kept == {k for k, f in fates.items() if f == cpb.FATE_KEPT}


def test_the_query_does_not_refresh_ttls():
    # (over gRPC a refresh moving an expiry by less than a second is skipped, so this is checked where the
    # search is made: the query's search never refreshes)
    from sidecar.api import assembly
    s = assembly.memory_query_input("default", memory_query(("a",), filter={"n": 1}), 1000)
    assert s.refresh is False and s.values is True and s.limit == 10 and s.prefix == ("a",)


@pytest.mark.parametrize("query, reason, field", [
    (memory_query(("a",), limit=1001), "INVALID_FIELD", "memory_query.limit"),
    (memory_query(("a",), filter={"$bad": 1}), "INVALID_FILTER", "memory_query.filter.expression['$bad']"),
    (memory_query(("",)), "INVALID_FIELD", "memory_query.path_prefix[0]"),
    (memory_query(("a",), vector=[1.0, 0.0], vector_space="nowhere"), "VECTOR_SPACE_NOT_FOUND",
     "memory_query.vector.space"),
])
def test_bad_queries_name_the_field(c, query, reason, field):
    t = setup_thread(c)
    with pytest.raises(AgentStateError) as e:
        c.conversations.get_context(t, 1000, memory_query=query)
    assert (e.value.reason, e.value.field) == (reason, field), e.value


def test_hits_and_knowledge_share_the_item_limit(c):
    t = setup_thread(c)
    with pytest.raises(AgentStateError) as e:
        c.conversations.get_context(t, 1000, knowledge=[knowledge(f"k{i}") for i in range(995)],
                                    memory_query=memory_query(("a",), limit=6))
    assert (e.value.code, e.value.reason, e.value.field) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED",
                                                             "memory_query.limit")  # as the knowledge limit
