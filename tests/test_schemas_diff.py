"""Migrate on read for DiffCheckpoints, memory item history and BatchMemory (docs/lifecycle.md "Covered, and
not"), with the three versions of test_schemas.py and each failure policy."""
from __future__ import annotations

import grpc
from conftest import expect_error

from agentstate import from_value
from agentstate import schemas as s
from agentstate.memory import put_request, search_request
from agentstate.v1 import memory_pb2 as mpb

from test_schemas import _bad_chain, register_three, state_v1, state_v2, state_v3

FP = grpc.StatusCode.FAILED_PRECONDITION


def _changes(changes) -> dict:
    return {c.channel: (c.kind, c.from_root, c.to_root, c.lists, c.from_length, c.to_length, c.common_prefix,
                        c.appended) for c in changes}


def _roots(cp) -> dict:
    return {k: v.root for k, v in cp.channels.items()}


def _more(state: dict, message: dict) -> dict:
    out = dict(state)
    out["messages"] = [*state["messages"], message]
    return out


NEW_V1 = {"role": "user", "text": "more", "tokens": "9"}
NEW_V3 = {"role": "user", "content": "more", "tokens": 9, "meta": {}}


# ---------------------------------------------------------------- DiffCheckpoints

def test_diff_compares_the_values_migrated_to_the_readers_version(nsclient, tid):
    c = nsclient
    register_three(c, "agent")
    c.put_checkpoint(tid, state_v1(1), checkpoint_id="c1", schema="agent", schema_version=1)
    c.put_checkpoint(tid, state_v2(2), checkpoint_id="c2", parent_id="c1", schema="agent", schema_version=2)
    c.put_checkpoint(tid, _more(state_v3(2), NEW_V3), checkpoint_id="c3", parent_id="c2", schema="agent",
                     schema_version=3)
    c.put_checkpoint(tid, _more(state_v1(1), NEW_V1), checkpoint_id="c4", parent_id="c1", schema="agent",
                     schema_version=1)
    # the same states stored directly at version 3, on another thread: what the migrated diff must equal
    ref = f"{tid}-v3"
    c.put_checkpoint(ref, state_v3(1), checkpoint_id="r1", schema="agent", schema_version=3)
    c.put_checkpoint(ref, state_v3(2), checkpoint_id="r2", parent_id="r1", schema="agent", schema_version=3)
    c.put_checkpoint(ref, _more(state_v3(2), NEW_V3), checkpoint_id="r3", parent_id="r2", schema="agent",
                     schema_version=3)
    c.put_checkpoint(ref, _more(state_v3(1), NEW_V3), checkpoint_id="r4", parent_id="r1", schema="agent",
                     schema_version=3)
    for a, b in (("1", "2"), ("1", "3"), ("2", "3"), ("1", "4"), ("3", "1"), ("4", "3")):
        resp = c.diff(tid, "c" + a, "c" + b, read_schema_version=3, response=True)
        assert _changes(resp.changes) == _changes(c.diff(ref, "r" + a, "r" + b)), (a, b)
        assert resp.migration == s.MIGRATED and (resp.from_schema_version, resp.to_schema_version) == (3, 3)
    # c1 (v1) to c2 (v2): read at 3, only the last name and the first message differ
    got = _changes(c.diff(tid, "c1", "c2", read_schema_version=3))
    assert set(got) == {"profile", "messages"}
    assert got["messages"][3:] == (True, 2, 2, 0, False)
    # the roots are the ones GetCheckpoint returns at that version
    r1, r2 = (_roots(c.get_checkpoint(tid, cid, read_schema_version=3)) for cid in ("c1", "c2"))
    assert got["profile"][1:3] == (r1["profile"], r2["profile"])
    # a list grown by one message, both sides at version 1: appended, once migrated too
    grown = _changes(c.diff(tid, "c1", "c4", read_schema_version=3))
    assert set(grown) == {"messages"} and grown["messages"][3:] == (True, 2, 3, 2, True)
    # a stored v3 list against a migrated v1 one: items compared by their hashes
    c.put_checkpoint(tid, _more(state_v3(1), NEW_V3), checkpoint_id="c5", parent_id="c1", schema="agent",
                     schema_version=3)
    mixed = c.diff(tid, "c1", "c5", read_schema_version=3, response=True)
    assert _changes(mixed.changes) == _changes(c.diff(ref, "r1", "r4"))
    assert _changes(mixed.changes)["messages"][3:] == (True, 2, 3, 2, True)
    # c4 and c5 hold the same state at versions 1 and 3: no difference once migrated, many as stored
    same = c.diff(tid, "c4", "c5", read_schema_version=3, response=True)
    assert list(same.changes) == [] and same.migration == s.MIGRATED
    as_stored = c.diff(tid, "c4", "c5", response=True)
    assert {"notes", "memo", "legacy", "blob", "payload", "settings"} <= set(_changes(as_stored.changes))
    assert as_stored.migration == s.NOT_ASKED and as_stored.from_schema_version == 0
    # read at version 2: channels matched by their version-2 names
    at2 = _changes(c.diff(tid, "c1", "c4", read_schema_version=2))
    assert set(at2) == {"messages"} and at2["messages"][3:] == (True, 2, 3, 2, True)
    # two checkpoints at the version read: CURRENT, the same diff as without it
    cur = c.diff(ref, "r1", "r3", read_schema_version=3, response=True)
    assert cur.migration == s.CURRENT and _changes(cur.changes) == _changes(c.diff(ref, "r1", "r3"))
    # the stored checkpoints are untouched
    assert c.get_checkpoint(tid, "c1").schema_version == 1


def test_diff_of_a_checkpoint_newer_than_the_reader_is_unreadable(nsclient, tid):
    c = nsclient
    register_three(c, "agent")
    c.put_checkpoint(tid, state_v1(1), checkpoint_id="c1", schema="agent", schema_version=1)
    c.put_checkpoint(tid, state_v3(1), checkpoint_id="c3", parent_id="c1", schema="agent", schema_version=3)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", "to_checkpoint_id", checkpoint_id="c3", stored_version="3",
                      read_version="2"):
        c.diff(tid, "c1", "c3", read_schema_version=2)
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "read_schema_version", version="4"):
        c.diff(tid, "c1", "c3", read_schema_version=4)


def test_diff_policies(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="degrade")
    good, bad = _bad_chain(c, tid, "agent")  # c1 migrates, c2 does not
    # DEGRADE: both compared as stored, flagged, the reason given
    resp = c.diff(tid, "c1", "c2", read_schema_version=3, response=True)
    assert resp.migration == s.DEGRADED and "thirty-six" in resp.migration_error
    assert (resp.from_schema_version, resp.to_schema_version) == (1, 1)
    assert _changes(resp.changes) == _changes(c.diff(tid, "c1", "c2"))
    assert set(_changes(resp.changes)) == {"messages", "profile"}  # stored names (v3 would say nothing else)
    # FAIL: the error, naming the side that does not migrate
    for policy in ("fail", "new_run"):  # NEW_RUN behaves as FAIL: a diff names its checkpoints
        register_three(c, "agent", failure_policy=policy)
        with expect_error(FP, "SCHEMA_MIGRATION_FAILED", "to_checkpoint_id", checkpoint_id="c2",
                          step="2.3", path="profile/age"):
            c.diff(tid, "c1", "c2", read_schema_version=3)
        with expect_error(FP, "SCHEMA_MIGRATION_FAILED", "from_checkpoint_id", checkpoint_id="c2"):
            c.diff(tid, "c2", "c1", read_schema_version=3)
        assert c.diff(tid, "c1", "c1", read_schema_version=3) == []
    # a window that leaves version 1 out: unreadable, or under DEGRADE the stored diff
    register_three(c, "agent", failure_policy="fail", min_readable_version=2)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", "from_checkpoint_id", min_readable_version="2"):
        c.diff(tid, "c1", "c2", read_schema_version=3)


def test_diff_of_an_unregistered_schema_is_of_the_stored_values(nsclient, tid):
    c = nsclient
    c.put_checkpoint(tid, {"a": 1, "b": [1]}, checkpoint_id="x1", schema="nobody", schema_version=1)
    c.put_checkpoint(tid, {"a": 2, "b": [1, 2]}, checkpoint_id="x2", parent_id="x1", schema="nobody",
                     schema_version=1)
    resp = c.diff(tid, "x1", "x2", read_schema_version=3, response=True)
    assert resp.migration == s.UNREGISTERED and (resp.from_schema_version, resp.to_schema_version) == (1, 1)
    assert _changes(resp.changes) == _changes(c.diff(tid, "x1", "x2"))
    assert _changes(resp.changes)["b"][3:] == (True, 1, 2, 1, True)


# ---------------------------------------------------------------- memory item history

PROFILE = [[], [s.rename("nick", "handle"), s.convert("age", "int")], [s.nest(["handle", "age"], "about")]]


def _history(c, read: int, include_values: bool = True) -> list:
    return list(c.memory.history(["users"], "u1", include_values=include_values, read_schema_version=read))


def test_memory_history_migrates_each_revision_from_its_own_version(nsclient):
    c = nsclient
    c.schemas.register("profile", PROFILE, failure_policy="degrade")
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "36"}, schema="profile", schema_version=1)
    c.memory.put(["users"], "u1", {"handle": "ada", "age": 37}, schema="profile", schema_version=2)
    c.memory.put(["users"], "u1", {"about": {"handle": "ada", "age": 38}}, schema="profile", schema_version=3)
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "old"}, schema="profile", schema_version=1)
    c.memory.delete(["users"], "u1")
    c.memory.put(["users"], "u1", {"plain": True})
    stored = _history(c, 0)
    assert [r.version for r in stored] == [6, 5, 4, 3, 2, 1]
    assert [(r.schema, r.schema_version, r.stored_schema_version) for r in stored] == [
        ("", 0, 0), ("", 0, 0), ("profile", 1, 1), ("profile", 3, 3), ("profile", 2, 2), ("profile", 1, 1)]
    assert from_value(stored[-1].value) == {"nick": "ada", "age": "36"}
    got = _history(c, 3)
    assert [from_value(r.value) if r.HasField("value") else None for r in got] == [
        {"plain": True}, None, {"nick": "ada", "age": "old"}, {"about": {"handle": "ada", "age": 38}},
        {"about": {"handle": "ada", "age": 37}}, {"about": {"handle": "ada", "age": 36}}]
    assert [(r.migration, r.schema_version, r.stored_schema_version) for r in got] == [
        (s.NOT_ASKED, 0, 0), (s.NOT_ASKED, 0, 0), (s.DEGRADED, 1, 1), (s.CURRENT, 3, 3), (s.MIGRATED, 3, 2),
        (s.MIGRATED, 3, 1)]
    assert "old" in got[2].migration_error
    # value_root stays the stored value's hash; read at 2, the v3 revision is newer than the reader
    assert [r.value_root for r in got] == [r.value_root for r in stored]
    at2 = _history(c, 2)
    assert from_value(at2[-1].value) == {"handle": "ada", "age": 36} and at2[-1].migration == s.MIGRATED
    assert at2[3].migration == s.DEGRADED and from_value(at2[3].value) == {"about": {"handle": "ada", "age": 38}}
    # without values nothing is migrated (nothing to say); the stored history is unchanged
    assert all(r.migration == s.NOT_ASKED for r in _history(c, 3, include_values=False))
    assert [from_value(r.value) for r in _history(c, 0) if r.HasField("value")] == [
        from_value(r.value) for r in stored if r.HasField("value")]


def test_memory_history_policies(nsclient):
    c = nsclient
    c.schemas.register("profile", PROFILE, failure_policy="fail")
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "old"}, schema="profile", schema_version=1)
    c.memory.put(["users"], "u1", {"about": {"handle": "ada", "age": 38}}, schema="profile", schema_version=3)
    for policy in ("fail", "new_run"):
        c.schemas.register("profile", PROFILE, failure_policy=policy)
        with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="profile", stored_version="1", read_version="3",
                          path="age", revision="1") as info:
            _history(c, 3)
        assert "revision 1" in str(info.value)
        with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", stored_version="3", read_version="2", revision="2"):
            _history(c, 2)
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "read_schema_version"):
        _history(c, 4)
    c.memory.put(["other"], "u9", {"a": 1}, schema="nobody", schema_version=1)
    (rev,) = c.memory.history(["other"], "u9", include_values=True, read_schema_version=3)
    assert rev.migration == s.UNREGISTERED and rev.schema_version == 1 and from_value(rev.value) == {"a": 1}


def test_memory_history_of_a_migrated_namespace_keeps_the_old_values(nsclient):
    """MigrateNamespace puts a new revision; read at the latest version, the whole history reads alike."""
    c = nsclient
    c.schemas.register("profile", PROFILE)
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "36"}, schema="profile", schema_version=1)
    last = None
    for last in c.schemas.migrate_namespace("profile"):
        pass
    assert last.memory_items_migrated == 1
    revs = _history(c, 3)
    assert [(r.stored_schema_version, r.schema_version, r.migration) for r in revs] == [
        (3, 3, s.CURRENT), (1, 3, s.MIGRATED)]
    assert from_value(revs[0].value) == from_value(revs[1].value) == {"about": {"handle": "ada", "age": 36}}


# ---------------------------------------------------------------- BatchMemory

def _op_get(key: str, read: int) -> mpb.MemoryOp:
    return mpb.MemoryOp(get=mpb.GetMemoryItemRequest(path=["users"], key=key, read_schema_version=read))


def _op_search(read: int) -> mpb.MemoryOp:
    req = search_request("", ["users"], order="path_key")
    req.namespace = ""
    req.read_schema_version = read
    return mpb.MemoryOp(search=req)


def _op_put(key: str, val: dict, version: int) -> mpb.MemoryOp:
    req = put_request("", ["users"], key, val, schema="profile", schema_version=version)
    req.namespace = ""
    return mpb.MemoryOp(put=req)


def test_batch_memory_get_and_search_migrate(nsclient):
    c = nsclient
    c.schemas.register("profile", PROFILE, failure_policy="degrade")
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "36"}, schema="profile", schema_version=1)
    c.memory.put(["users"], "u2", {"handle": "bob", "age": 40}, schema="profile", schema_version=2)
    c.memory.put(["users"], "u4", {"nick": "dee", "age": "old"}, schema="profile", schema_version=1)
    results = c.memory.batch([_op_get("u1", 3), _op_get("u2", 3), _op_get("u4", 3), _op_get("u1", 0),
                              _op_search(3), _op_get("u1", 2)])
    items = [r.get.item for r in results[:4]] + [results[5].get.item]
    assert [(from_value(i.value), i.migration, i.schema_version, i.stored_schema_version) for i in items] == [
        ({"about": {"handle": "ada", "age": 36}}, s.MIGRATED, 3, 1),
        ({"about": {"handle": "bob", "age": 40}}, s.MIGRATED, 3, 2),
        ({"nick": "dee", "age": "old"}, s.DEGRADED, 1, 1),
        ({"nick": "ada", "age": "36"}, s.NOT_ASKED, 1, 1),
        ({"handle": "ada", "age": 36}, s.MIGRATED, 2, 1)]
    # each equals what GetMemoryItem answers
    for key in ("u1", "u2", "u4"):
        one = c.memory.get(["users"], key, read_schema_version=3)
        got = next(i for i in items if i.key == key)
        assert (from_value(one.value), one.migration, one.migration_error) == (
            from_value(got.value), got.migration, got.migration_error)
    found = {x.item.key: x.item for x in results[4].search.items}
    assert {k: (from_value(v.value), v.migration) for k, v in found.items()} == {
        "u1": ({"about": {"handle": "ada", "age": 36}}, s.MIGRATED),
        "u2": ({"about": {"handle": "bob", "age": 40}}, s.MIGRATED),
        "u4": ({"nick": "dee", "age": "old"}, s.DEGRADED)}
    # a put in the same (sequential) batch is read back migrated
    (_, back) = c.memory.batch([_op_put("u5", {"nick": "eve", "age": "5"}, 1), _op_get("u5", 3)])
    assert from_value(back.get.item.value) == {"about": {"handle": "eve", "age": 5}}
    assert back.get.item.migration == s.MIGRATED
    # stored items are untouched
    assert from_value(c.memory.get(["users"], "u1").value) == {"nick": "ada", "age": "36"}


def test_batch_memory_migration_failure_fails_the_batch_and_names_the_op(nsclient):
    c = nsclient
    c.schemas.register("profile", PROFILE, failure_policy="fail")
    c.memory.put(["users"], "u4", {"nick": "dee", "age": "old"}, schema="profile", schema_version=1)
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", "ops[1].get", index="1", path="age"):
        c.memory.batch([_op_put("u6", {"nick": "f", "age": "1"}, 1), _op_get("u4", 3)])
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", "ops[0].search", index="0"):
        c.memory.batch([_op_search(3)])
    # the batch is one transaction: the put before the failing get was not kept
    assert c.memory.get(["users"], "u6") is None
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "ops[0].get.read_schema_version"):
        c.memory.batch([_op_get("u4", 4)])


# ---------------------------------------------------------------- the async client

def test_async_client_diff_and_history_name_the_version(sidecar, nsclient, tid):
    import asyncio

    from agentstate import AsyncClient

    c = nsclient
    register_three(c, "agent")
    c.put_checkpoint(tid, _more(state_v1(1), NEW_V1), checkpoint_id="c4", schema="agent", schema_version=1)
    c.put_checkpoint(tid, _more(state_v3(1), NEW_V3), checkpoint_id="c5", parent_id="c4", schema="agent",
                     schema_version=3)
    c.schemas.register("profile", PROFILE)
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "36"}, schema="profile", schema_version=1)

    async def body():
        async with AsyncClient(sidecar.address, namespace=c.namespace) as ac:
            resp = await ac.diff(tid, "c4", "c5", read_schema_version=3, response=True)
            plain = await ac.diff(tid, "c4", "c5")
            revs = [r async for r in ac.memory.history(["users"], "u1", include_values=True,
                                                       read_schema_version=3)]
            return resp, plain, revs

    resp, plain, revs = asyncio.run(body())
    assert list(resp.changes) == [] and resp.migration == s.MIGRATED and len(plain) > 0
    assert [(from_value(r.value), r.migration) for r in revs] == [({"about": {"handle": "ada", "age": 36}},
                                                                    s.MIGRATED)]
