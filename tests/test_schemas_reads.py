"""Migrate on read beyond GetCheckpoint's values (docs/lifecycle.md "Schema versions and migrations"): pending
writes, channel history (GetChannelHistory) and memory search results, with three versions, the failure policies,
and the item-wise first-read path (list items migrated one by one and reused by their hash) equal to the engine
applied to the whole value."""
from __future__ import annotations

import copy

import grpc
from conftest import expect_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import codec, from_value
from agentstate import schemas as s
from agentstate.memory import search_request
from agentstate.v1 import threads_pb2 as tpb

from sidecar.api.schemas import step_input
from sidecar.state import schemas as engine
from sidecar.storage.layout import SchemaVersionRec
from test_schemas import BLOB, V2, V3, register_three, state_v1, state_v3, values_of

FP = grpc.StatusCode.FAILED_PRECONDITION


def _writes(cp) -> list:
    return [(w.task_id, w.idx, w.channel, from_value(w.value)) for w in cp.pending_writes]


def _get(c, tid, cid="", **kw) -> tpb.Checkpoint:
    req = tpb.GetCheckpointRequest(namespace=c.namespace, thread_id=tid, checkpoint_id=cid,
                                   include_pending_writes=True, **kw)
    return _call(c.threads.GetCheckpoint, req).checkpoint


def _call(method, req):
    from agentstate.errors import from_rpc_error
    try:
        return method(req, timeout=10)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


MSG_V1 = [{"role": "user", "text": "later", "tokens": "7"}]
MSG_V3 = [{"role": "user", "content": "later", "tokens": 7, "meta": {}}]


def test_pending_writes_migrate_with_their_checkpoint(nsclient, tid):
    c = nsclient
    register_three(c, "agent")
    c.put_checkpoint(tid, state_v1(), checkpoint_id="c1", schema="agent", schema_version=1)
    c.put_writes(tid, "c1", [("t1", 0, "messages", MSG_V1), ("t1", 1, "notes", "n2"), ("t2", 0, "legacy", 5),
                             ("t2", 1, "profile", {"first": "B", "last": "C", "age": "4"}), ("t3", 0, "blob", BLOB)])
    as_stored = _get(c, tid, "c1")
    assert [w[2] for w in _writes(as_stored)] == ["messages", "notes", "legacy", "profile", "blob"]
    for read, want in ((3, [("t1", 0, "messages", MSG_V3), ("t1", 1, "memo", "n2"),
                            ("t2", 1, "profile", {"first": "B", "last": "C", "age": 4, "tz": "UTC"}),
                            ("t3", 0, "payload", BLOB)]),
                       (2, [("t1", 0, "messages", MSG_V1), ("t1", 1, "memo", "n2"),
                            ("t2", 1, "profile", {"name": {"first": "B", "last": "C"}, "age": 4, "tz": "UTC"}),
                            ("t3", 0, "payload", BLOB)])):
        cp = _get(c, tid, "c1", read_schema_version=read)
        # renamed channels carry their new names; the dropped channel's write is left out; steps about
        # channels a write does not carry (adds of settings, of profile.tz for the messages write) are skipped
        assert _writes(cp) == want, read
        assert values_of(cp) == (state_v3() if read == 3 else values_of(c.get_checkpoint(tid, "c1",
                                                                                        read_schema_version=2)))
    # ListCheckpoints migrates them too; the stored writes are unchanged
    listed = list(c.list_checkpoints(tid, include_values=True, read_schema_version=3))
    assert listed[0].checkpoint_id == "c1"
    req = tpb.ListCheckpointsRequest(namespace=c.namespace, thread_id=tid, include_values=True,
                                     include_pending_writes=True, read_schema_version=3)
    assert _writes(c.threads.ListCheckpoints(req, timeout=10).checkpoints[0]) == _writes(
        _get(c, tid, "c1", read_schema_version=3))
    assert _writes(_get(c, tid, "c1")) == _writes(as_stored)


def test_a_pending_write_that_does_not_migrate_follows_the_policy(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="degrade")
    c.put_checkpoint(tid, state_v1(), checkpoint_id="c1", schema="agent", schema_version=1)
    c.put_writes(tid, "c1", [("t1", 0, "messages", {"not": "a list"})])
    cp = _get(c, tid, "c1", read_schema_version=3)
    # the checkpoint and its writes are one: all as stored, flagged
    assert cp.migration == s.DEGRADED and "messages" in cp.migration_error
    assert values_of(cp) == state_v1() and _writes(cp) == [("t1", 0, "messages", {"not": "a list"})]
    # without the writes the checkpoint itself migrates
    assert c.get_checkpoint(tid, "c1", read_schema_version=3).migration == s.MIGRATED
    c.schemas.register("agent", [[], V2, V3], failure_policy="fail")
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", path="messages"):
        _get(c, tid, "c1", read_schema_version=3)


def test_channel_history_migrates_each_write_and_the_seed(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="degrade")
    c.put_checkpoint(tid, state_v1(), checkpoint_id="c1", schema="agent", schema_version=1)  # the seed
    c.put_writes(tid, "c1", [("t", 0, "messages", MSG_V1)])
    c.put_checkpoint(tid, {"other": 1}, checkpoint_id="c2", parent_id="c1", schema="agent", schema_version=2)
    c.put_writes(tid, "c2", [("t", 0, "messages", [{"role": "ai", "text": "v2", "tokens": 2.0}])])
    c.put_checkpoint(tid, {"other": 2}, checkpoint_id="c3", parent_id="c2", schema="agent", schema_version=3)
    c.put_writes(tid, "c3", [("t", 0, "messages", [{"role": "ai", "content": "v3", "tokens": 3, "meta": {}}])])
    c.put_checkpoint(tid, {"other": 3}, checkpoint_id="c4", parent_id="c3", schema="agent", schema_version=3)
    stored = c.get_channel_history(tid, ["messages", "notes"], "c4").channels
    assert stored[0].migration == s.NOT_ASKED and stored[0].seed_checkpoint_id == "c1"
    h = c.get_channel_history(tid, ["messages", "notes"], "c4", read_schema_version=3).channels
    msgs, notes = h
    assert msgs.migration == s.MIGRATED and msgs.seed_checkpoint_id == "c1"
    assert [from_value(w.value) for w in msgs.writes] == [
        MSG_V3, [{"role": "ai", "content": "v2", "tokens": 2, "meta": {}}],
        [{"role": "ai", "content": "v3", "tokens": 3, "meta": {}}]]
    assert from_value(msgs.seed.value) == state_v3()["messages"]
    # the migrated seed's root is the root of that value as stored (known_roots work on it)
    direct = c.put_checkpoint(f"{tid}-d", state_v3(), schema="agent", schema_version=3).checkpoint
    assert msgs.seed.root == direct.channels["messages"].root
    again = c.get_channel_history(tid, ["messages"], "c4", read_schema_version=3,
                                  known_roots={"messages": msgs.seed.root}).channels[0]
    assert not again.seed.HasField("value") and again.seed.root == msgs.seed.root
    # a renamed channel: the seed is the migrated value under its new name
    assert notes.seed_checkpoint_id == "c1" and from_value(notes.seed.value) == "remember"
    # a write that does not migrate: DEGRADE gives the channel's history as stored, flagged
    c.put_writes(tid, "c2", [("u", 0, "messages", "not a list")])
    bad = c.get_channel_history(tid, ["messages"], "c4", read_schema_version=3).channels[0]
    assert bad.migration == s.DEGRADED and "messages" in bad.migration_error
    assert [from_value(w.value) for w in bad.writes] == [from_value(w.value) for w in c.get_channel_history(
        tid, ["messages"], "c4").channels[0].writes]
    c.schemas.register("agent", [[], V2, V3], failure_policy="fail")
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED"):
        c.get_channel_history(tid, ["messages"], "c4", read_schema_version=3)
    # read at version 2: the v3 writes are newer than the reader: unreadable
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", stored_version="3", read_version="2"):
        c.get_channel_history(tid, ["messages"], "c4", read_schema_version=2)


def test_memory_search_results_migrate(nsclient):
    c = nsclient
    c.schemas.register("profile", [[], [s.rename("nick", "handle"), s.convert("age", "int")],
                                   [s.nest(["handle", "age"], "about")]], failure_policy="degrade")
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "36"}, schema="profile", schema_version=1)
    c.memory.put(["users"], "u2", {"handle": "bob", "age": 40}, schema="profile", schema_version=2)
    c.memory.put(["users"], "u3", {"about": {"handle": "cy", "age": 1}}, schema="profile", schema_version=3)
    c.memory.put(["users"], "u4", {"nick": "dee", "age": "old"}, schema="profile", schema_version=1)
    c.memory.put(["users"], "u5", {"plain": True})

    def search(read: int, **kw):
        req = search_request(c.namespace, ["users"], order="path_key", **kw)
        req.read_schema_version = read
        return {x.item.key: x.item for x in _call(c.memory.stub.SearchMemoryItems, req).items}

    got = search(3)
    assert {k: from_value(v.value) for k, v in got.items()} == {
        "u1": {"about": {"handle": "ada", "age": 36}}, "u2": {"about": {"handle": "bob", "age": 40}},
        "u3": {"about": {"handle": "cy", "age": 1}}, "u4": {"nick": "dee", "age": "old"}, "u5": {"plain": True}}
    assert [(got[k].migration, got[k].schema_version, got[k].stored_schema_version) for k in sorted(got)] == [
        (s.MIGRATED, 3, 1), (s.MIGRATED, 3, 2), (s.CURRENT, 3, 3), (s.DEGRADED, 1, 1), (s.NOT_ASKED, 0, 0)]
    assert "old" in got["u4"].migration_error
    # filters see the stored values; without a version everything is as stored
    assert from_value(search(0)["u1"].value) == {"nick": "ada", "age": "36"}
    assert set(search(3, filter={"nick": "ada"})) == {"u1"}
    # the client's search takes the version as an argument
    hits = c.memory.search(["users"], order="path_key", read_schema_version=3)
    assert [(x.item.key, x.item.migration) for x in hits] == [(k, got[k].migration) for k in sorted(got)]
    c.schemas.register("profile", [[], [s.rename("nick", "handle"), s.convert("age", "int")],
                                   [s.nest(["handle", "age"], "about")]], failure_policy="fail")
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", path="age"):
        search(3)


# ---------------------------------------------------------------- the item-wise first read equals the engine

_item = st.fixed_dictionaries({"role": st.sampled_from(["user", "ai"]), "text": st.text(max_size=12),
                               "tokens": st.integers(0, 10 ** 6).map(str)},
                              optional={"extra": st.integers(-2 ** 62, 2 ** 62) | st.none()})


def _v3_of(v1: dict) -> dict:
    return engine.encode(engine.apply(copy.deepcopy(v1), [SchemaVersionRec(2, [step_input(x, "s") for x in V2]),
                                                          SchemaVersionRec(3, [step_input(x, "s") for x in V3])]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # unique threads per example
@given(st.lists(_item, max_size=8), st.lists(_item, max_size=3))
def test_item_wise_first_reads_equal_the_engine_on_the_whole_value(nsclient, messages, more):
    import uuid
    c = nsclient
    register_three(c, "agent")
    state = state_v1()
    del state["blob"]  # (an opaque value decodes differently in the engine and the client)
    state["messages"] = messages
    grown = copy.deepcopy(state)
    grown["messages"] = messages + more  # shares items with the first: those come from the item cache
    for value in (state, grown):
        tid = f"p-{uuid.uuid4().hex[:12]}"
        c.put_checkpoint(tid, value, schema="agent", schema_version=1)
        cp = c.get_checkpoint(tid, read_schema_version=3)
        assert cp.migration == s.MIGRATED
        want = codec.decode(_v3_of(value))  # the engine on the whole value, as the client decodes it
        assert values_of(cp) == want
        direct = c.put_checkpoint(f"{tid}-3", want, schema="agent", schema_version=3)
        assert {k: v.root for k, v in cp.channels.items()} == {
            k: v.root for k, v in direct.checkpoint.channels.items()}


def test_the_plan_takes_item_wise_only_the_lists_nothing_else_touches():
    def plan(*versions):
        return engine.compile_plan([SchemaVersionRec(i + 2, [step_input(x, "s") for x in v])
                                    for i, v in enumerate(versions)])

    assert set(plan(V2, V3).itemwise) == {"messages", "tags"}
    assert plan([s.map_items("l", s.drop("a"))], [s.rename("l", "m")]).itemwise == {}
    assert plan([s.map_items("l", s.drop("a"))], [s.nest(["l"], "n")]).itemwise == {}
    assert plan([s.map_items("l", s.drop("a"))], [s.rename("k", "l")]).itemwise == {}
    assert plan([s.map_items(["l", "x"], s.drop("a"))]).itemwise == {}
    two = plan([s.map_items("l", s.drop("a"))], [s.map_items("l", s.rename("b", "c"))])
    assert len(two.itemwise["l"]) == 2 and two.rest == []


def test_the_item_cache_stays_within_its_bound():
    cache = engine._ItemCache()
    cache.MAX_BYTES = 10_000
    for i in range(500):
        cache.put(i.to_bytes(4, "big") * 8, (b"x" * 50, b"h" * 32))
        assert cache.size <= 10_000 + 300
        assert cache.size == sum(len(k) + len(v[0]) + 128 for k, v in cache.entries.items())
    assert (499).to_bytes(4, "big") * 8 in cache.entries


def test_the_other_channels_part_is_reused_only_for_the_same_other_channels(nsclient):
    """Checkpoints that share their messages but not their other channels, or the other way round: each read
    equals the engine on the whole value; one whose other channels fail fails with the engine's error every
    time, whatever was read before with the same lists or the same other channels."""
    import uuid
    c = nsclient
    register_three(c, "agent")
    base = state_v1()
    del base["blob"]
    base["messages"] = [{"role": "user", "text": f"m{i}", "tokens": str(i)} for i in range(20)]
    variants = []
    for last, msgs in (("L0", 20), ("L1", 20), ("L1", 21), ("L0", 21), ("L2", 19)):
        v = copy.deepcopy(base)
        v["profile"]["last"] = last
        v["messages"] = v["messages"][:msgs] if msgs <= 20 else v["messages"] + [
            {"role": "ai", "text": "more", "tokens": "7"}]
        variants.append(v)
    bad = copy.deepcopy(variants[1])
    bad["profile"]["age"] = "thirty"  # the convert to int fails: the other channels' part raises
    bad_too = copy.deepcopy(variants[4])
    bad_too["profile"]["age"] = "thirty"
    for value in variants + [bad, variants[1], bad_too, bad]:
        tid = f"r-{uuid.uuid4().hex[:12]}"
        c.put_checkpoint(tid, value, schema="agent", schema_version=1)
        if value["profile"]["age"] == "thirty":
            with expect_error(FP, "SCHEMA_MIGRATION_FAILED", path="profile/age"):
                c.get_checkpoint(tid, read_schema_version=3)
            continue
        cp = c.get_checkpoint(tid, read_schema_version=3)
        assert cp.migration == s.MIGRATED
        assert values_of(cp) == codec.decode(_v3_of(value))
        direct = c.put_checkpoint(f"{tid}-3", codec.decode(_v3_of(value)), schema="agent", schema_version=3)
        assert cp.channels == c.get_checkpoint(f"{tid}-3", read_schema_version=3).channels
        assert {k: v.root for k, v in cp.channels.items()} == {
            k: v.root for k, v in direct.checkpoint.channels.items()}
