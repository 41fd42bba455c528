"""Schema versions and migrations (schemas.proto, docs/lifecycle.md): the registry, declared migrations over three
versions on structured values (migrate on read and eager), opaque values, the compatibility window and each
failure policy, client-side migrations, and the rules that keep history as it was unless asked."""
from __future__ import annotations

import copy

import grpc
import msgspec
import pytest
from conftest import expect_error

from agentstate import Opaque
from agentstate import schemas as s
from agentstate.schemas import Migrations, MigrationError
from agentstate.v1 import schemas_pb2 as spb

from sidecar.state import schemas as engine
from sidecar.storage.layout import SchemaVersionRec, MigrationStepRec

FP = grpc.StatusCode.FAILED_PRECONDITION
BLOB = Opaque("framework/serde", b"\x00\x01 not readable by the sidecar")

# ---------------------------------------------------------------- the three versions used throughout

V2 = [s.rename("notes", "memo"), s.drop("legacy"), s.add(["profile", "tz"], "UTC"),
      s.convert(["profile", "age"], "int"), s.nest(["first", "last"], "name", path=["profile"]),
      s.rename("blob", "payload")]  # an opaque channel moved whole: fine
V3 = [s.map_items("messages", s.rename("text", "content"), s.convert("tokens", "int"), s.add("meta", {})),
      s.unnest("name", path=["profile"]), s.add("settings", {"theme": "dark"}),
      s.map_items("tags", s.convert([], "string"))]


def state_v1(i: int = 0) -> dict:
    return {"profile": {"first": "Ada", "last": f"L{i}", "age": "36"},
            "messages": [{"role": "user", "text": f"hi {i}", "tokens": "3"},
                         {"role": "ai", "text": "hello", "tokens": 5.0}],
            "notes": "remember", "legacy": 1, "blob": BLOB, "tags": [1, True, "x"]}


def state_v2(i: int = 0) -> dict:
    return {"profile": {"name": {"first": "Ada", "last": f"L{i}"}, "age": 36, "tz": "UTC"},
            "messages": [{"role": "user", "text": f"hi {i}", "tokens": "3"},
                         {"role": "ai", "text": "hello", "tokens": 5.0}],
            "memo": "remember", "payload": BLOB, "tags": [1, True, "x"]}


def state_v3(i: int = 0) -> dict:
    return {"profile": {"first": "Ada", "last": f"L{i}", "age": 36, "tz": "UTC"},
            "messages": [{"role": "user", "content": f"hi {i}", "tokens": 3, "meta": {}},
                         {"role": "ai", "content": "hello", "tokens": 5, "meta": {}}],
            "memo": "remember", "payload": BLOB, "settings": {"theme": "dark"}, "tags": ["1", "true", "x"]}


def register_three(c, name: str, **kw):
    return c.schemas.register(name, [[], V2, V3], **kw)


def values_of(cp) -> dict:
    from agentstate import checkpoint_values
    return checkpoint_values(cp)


# ---------------------------------------------------------------- migrate on read, three versions

def test_three_versions_migrate_on_read(nsclient, tid):
    c = nsclient
    resp = register_three(c, "agent")
    assert resp.created and resp.schema.latest_version == 3
    c.put_checkpoint(tid, state_v1(), checkpoint_id="c1", schema="agent", schema_version=1)
    c.put_checkpoint(tid, state_v2(), checkpoint_id="c2", parent_id="c1", schema="agent", schema_version=2)
    c.put_checkpoint(tid, state_v3(), checkpoint_id="c3", parent_id="c2", schema="agent", schema_version=3)
    for cid, stored, want2 in (("c1", 1, state_v2()), ("c2", 2, state_v2()), ("c3", 3, None)):
        cp = c.get_checkpoint(tid, cid, read_schema_version=3)
        assert values_of(cp) == state_v3(), cid
        assert (cp.schema, cp.schema_version, cp.stored_schema_version) == ("agent", 3, stored)
        assert cp.migration == (s.CURRENT if stored == 3 else s.MIGRATED)
        if want2 is not None:
            cp2 = c.get_checkpoint(tid, cid, read_schema_version=2)
            assert values_of(cp2) == want2 and cp2.schema_version == 2
    # history is not rewritten: read as stored, c1 is still version 1 with its values and its etag
    before = c.get_checkpoint(tid, "c1")
    assert values_of(before) == state_v1() and before.schema_version == 1 and before.migration == s.NOT_ASKED
    assert c.get_checkpoint(tid, "c1", read_schema_version=3).etag == before.etag
    # the root of a value migrated on read is the root the value has when stored as such
    other = f"{tid}-direct"
    direct = c.put_checkpoint(other, state_v3(), checkpoint_id="d", schema="agent", schema_version=3).checkpoint
    migrated = c.get_checkpoint(tid, "c1", read_schema_version=3)
    assert {k: v.root for k, v in migrated.channels.items()} == {k: v.root for k, v in direct.channels.items()}
    # a reader that knows a migrated root gets no content for it
    known = {k: v.root for k, v in migrated.channels.items()}
    again = c.get_checkpoint(tid, "c1", read_schema_version=3, known_roots=known)
    assert all(not cv.HasField("value") for cv in again.channels.values())
    # the latest (no id) reads the same way; ListCheckpoints migrates too
    assert values_of(c.get_checkpoint(tid, read_schema_version=3)) == state_v3()
    listed = list(c.list_checkpoints(tid, include_values=True, read_schema_version=3))
    assert [cp.checkpoint_id for cp in listed] == ["c3", "c2", "c1"]
    assert all(values_of(cp) == state_v3() for cp in listed)
    assert [cp.stored_schema_version for cp in listed] == [3, 2, 1]


def test_a_checkpoint_of_an_unregistered_schema_comes_back_as_stored(nsclient, tid):
    nsclient.put_checkpoint(tid, {"a": 1}, schema="nobody", schema_version=1)
    cp = nsclient.get_checkpoint(tid, read_schema_version=4)
    assert cp.migration == s.UNREGISTERED and cp.schema_version == 1 and values_of(cp) == {"a": 1}


def test_a_reader_ahead_of_the_registry_is_told_so(nsclient, tid):
    register_three(nsclient, "agent")
    nsclient.put_checkpoint(tid, state_v1(), schema="agent", schema_version=1)
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "read_schema_version", version="4"):
        nsclient.get_checkpoint(tid, read_schema_version=4)


def test_put_with_a_schema_needs_a_version(nsclient, tid):
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "schema_version"):
        nsclient.put_checkpoint(tid, {"a": 1}, schema="agent")
    with pytest.raises(Exception):
        nsclient.get_checkpoint(tid)


# ---------------------------------------------------------------- window and failure policies

def _bad_chain(c, tid, name):
    """c1 migrates; c2 (latest) does not: its age is not a number."""
    good = state_v1(1)
    bad = state_v1(2)
    bad["profile"]["age"] = "thirty-six"
    c.put_checkpoint(tid, good, checkpoint_id="c1", schema=name, schema_version=1)
    c.put_checkpoint(tid, bad, checkpoint_id="c2", parent_id="c1", schema=name, schema_version=1)
    return good, bad


def test_policy_fail(nsclient, tid):
    register_three(nsclient, "agent", failure_policy="fail")
    _bad_chain(nsclient, tid, "agent")
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="agent", stored_version="1", read_version="3",
                      step="2.3", path="profile/age") as info:
        nsclient.get_checkpoint(tid, read_schema_version=3)
    assert "thirty-six" in str(info.value) and "int" in str(info.value)
    assert values_of(nsclient.get_checkpoint(tid, "c1", read_schema_version=3)) == state_v3(1)


def test_policy_degrade(nsclient, tid):
    register_three(nsclient, "agent", failure_policy="degrade")
    _, bad = _bad_chain(nsclient, tid, "agent")
    cp = nsclient.get_checkpoint(tid, read_schema_version=3)
    assert cp.checkpoint_id == "c2" and cp.migration == s.DEGRADED
    assert values_of(cp) == bad and cp.schema_version == 1 == cp.stored_schema_version
    assert "profile/age" in cp.migration_error and "thirty-six" in cp.migration_error


def test_policy_new_run(nsclient, tid):
    register_three(nsclient, "agent", failure_policy="new_run")
    _bad_chain(nsclient, tid, "agent")
    cp = nsclient.get_checkpoint(tid, read_schema_version=3)
    assert (cp.checkpoint_id, cp.migration, cp.unmigratable_checkpoint_id) == ("c1", s.NEW_RUN, "c2")
    assert values_of(cp) == state_v3(1) and cp.schema_version == 3
    assert "thirty-six" in cp.migration_error
    # the caller goes on from there: a put with c1 as parent forks next to the chain that does not migrate
    nsclient.put_checkpoint(tid, state_v3(7), checkpoint_id="c3", parent_id="c1", schema="agent", schema_version=3)
    latest = nsclient.get_checkpoint(tid, read_schema_version=3)
    assert (latest.checkpoint_id, latest.migration) == ("c3", s.CURRENT) and values_of(latest) == state_v3(7)
    # a read of a given checkpoint does not fall back: it fails as FAIL would
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED"):
        nsclient.get_checkpoint(tid, "c2", read_schema_version=3)
    # nothing migrates: the failure itself
    lone = f"{tid}-lone"
    bad = state_v1()
    bad["messages"] = "not a list"
    nsclient.put_checkpoint(lone, bad, schema="agent", schema_version=1)
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", path="messages"):
        nsclient.get_checkpoint(lone, read_schema_version=3)


def test_window_and_newer_values(nsclient, tid):
    c = nsclient
    register_three(c, "agent", min_readable_version=2)
    c.put_checkpoint(tid, state_v1(), checkpoint_id="old", schema="agent", schema_version=1)
    c.put_checkpoint(tid, state_v3(), checkpoint_id="new", schema="agent", schema_version=3)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", schema="agent", stored_version="1", read_version="3",
                      min_readable_version="2"):
        c.get_checkpoint(tid, "old", read_schema_version=3)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", stored_version="3", read_version="2") as info:
        c.get_checkpoint(tid, "new", read_schema_version=2)
    assert "newer" in str(info.value)
    # the window and the policy may change; the versions stay
    c.schemas.register("agent", [[], V2, V3], min_readable_version=2, failure_policy="degrade")
    cp = c.get_checkpoint(tid, "old", read_schema_version=3)
    assert cp.migration == s.DEGRADED and values_of(cp) == state_v1() and "window" in cp.migration_error


def test_opaque_values_move_whole_but_cannot_be_looked_into(nsclient, tid):
    c = nsclient
    c.schemas.register("op", [[], [s.rename("blob", "payload")], [s.add(["payload", "x"], 1)]],
                       failure_policy="degrade")
    c.put_checkpoint(tid, {"blob": BLOB}, schema="op", schema_version=1)
    cp = c.get_checkpoint(tid, read_schema_version=2)
    assert cp.migration == s.MIGRATED and values_of(cp) == {"payload": BLOB}
    cp = c.get_checkpoint(tid, read_schema_version=3)
    assert cp.migration == s.DEGRADED and values_of(cp) == {"blob": BLOB}
    assert "opaque" in cp.migration_error and "client-side" in cp.migration_error


# ---------------------------------------------------------------- the registry

def test_registry_versions_are_append_only(nsclient):
    c = nsclient
    first = c.schemas.register("agent", [[], V2])
    assert first.created and first.schema.etag
    same = c.schemas.register("agent", [[], V2])
    assert not same.created and same.schema.etag == first.schema.etag
    grown = c.schemas.register("agent", [[], V2, V3], etag=first.schema.etag)
    assert not grown.created and grown.schema.latest_version == 3 and grown.schema.etag != first.schema.etag
    with expect_error(FP, "SCHEMA_CONFLICT", "schema.versions[1]", version="2"):
        c.schemas.register("agent", [[], [s.drop("x")], V3])
    with expect_error(FP, "SCHEMA_CONFLICT", "schema.versions"):
        c.schemas.register("agent", [[], V2])
    with expect_error(FP, "SCHEMA_CONFLICT", "etag"):
        c.schemas.register("agent", [[], V2, V3], failure_policy="degrade", etag=first.schema.etag)
    got = c.schemas.get("agent")
    assert got.latest_version == 3 and got.failure_policy == spb.FAILURE_POLICY_FAIL
    # the steps come back as registered
    assert list(got.versions[1].steps) == V2 and list(got.versions[2].steps) == V3
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "name"):
        c.schemas.get("nobody")


def test_list_schemas_pages(nsclient):
    names = [f"s{i:02d}" for i in range(7)]
    for n in reversed(names):
        nsclient.schemas.register(n, [[]])
    assert [x.name for x in nsclient.schemas.list(page_size=3)] == names


@pytest.mark.parametrize("schema, field", [
    (spb.Schema(name="x"), "schema.versions"),
    (spb.Schema(name="", versions=[spb.SchemaVersion(version=1)]), "schema.name"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=2)]), "schema.versions[0].version"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=1, steps=[s.drop("a")])]), "schema.versions[0].steps"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=1), spb.SchemaVersion(version=2, steps=[
        spb.MigrationStep(rename=spb.RenameField(path=["a"]))])]), "schema.versions[1].steps[0].rename.to"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=1), spb.SchemaVersion(version=2, steps=[
        spb.MigrationStep()])]), "schema.versions[1].steps[0]"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=1), spb.SchemaVersion(version=2, steps=[
        spb.MigrationStep(convert=spb.ConvertField(path=["a"]))])]), "schema.versions[1].steps[0].convert.to"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=1), spb.SchemaVersion(version=2, steps=[
        spb.MigrationStep(add=spb.AddField(path=["a"]))])]), "schema.versions[1].steps[0].add.default"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=1), spb.SchemaVersion(version=2, steps=[
        s.map_items("m", s.drop([]))])]), "schema.versions[1].steps[0].map_items.steps[0].drop.path"),
    (spb.Schema(name="x", versions=[spb.SchemaVersion(version=1)], min_readable_version=2),
     "schema.min_readable_version"),
])
def test_register_refuses_bad_schemas_and_stores_nothing(nsclient, schema, field):
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", field):
        _register_raw(nsclient, schema)
    assert list(nsclient.schemas.list()) == []


def _register_raw(c, schema):
    from agentstate.errors import from_rpc_error
    try:
        return c.schemas.stub.RegisterSchema(spb.RegisterSchemaRequest(namespace=c.namespace, schema=schema),
                                             timeout=10)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


# ---------------------------------------------------------------- eager migration

def test_migrate_thread_rewrites_in_place_with_progress(nsclient, tid):
    c = nsclient
    register_three(c, "agent")
    parent = ""
    for i in range(10):
        version, state = (1, state_v1(i)) if i < 6 else (2, state_v2(i))
        c.put_checkpoint(tid, state, checkpoint_id=f"c{i:02d}", parent_id=parent, schema="agent",
                         schema_version=version)
        parent = f"c{i:02d}"
    c.put_checkpoint(tid, {"x": 1}, checkpoint_id="d-other", checkpoint_ns="sub")  # no schema: left alone
    lazy = {cp.checkpoint_id: (values_of(cp), {k: v.root for k, v in cp.channels.items()})
            for cp in c.list_checkpoints(tid, include_values=True, read_schema_version=3)}
    progress = list(c.schemas.migrate_thread(tid, "agent", batch_size=3))
    assert len(progress) >= 4  # one message per batch of 3 (11 checkpoints) and the summary
    seen = [p.checkpoints_seen for p in progress]
    assert seen == sorted(seen) and seen[-1] == 11
    last = progress[-1]
    assert (last.checkpoints_migrated, last.checkpoints_current, last.checkpoints_other, last.checkpoints_failed,
            last.threads_done) == (10, 0, 1, 0, 1)
    for cp in c.list_checkpoints(tid, checkpoint_ns="", include_values=True):
        i = int(cp.checkpoint_id[1:])
        assert cp.schema_version == 3 and values_of(cp) == state_v3(i)
        assert cp.parent_checkpoint_id == ("" if i == 0 else f"c{i - 1:02d}")
        # eager and lazy agree to the root hash
        assert (values_of(cp), {k: v.root for k, v in cp.channels.items()}) == lazy[cp.checkpoint_id]
    assert c.get_checkpoint(tid, "d-other", checkpoint_ns="sub").schema_version == 0
    again = list(c.schemas.migrate_thread(tid, "agent"))[-1]
    assert (again.checkpoints_migrated, again.checkpoints_current) == (0, 10)


def test_migrate_leaves_what_does_not_migrate_and_reports_it(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="degrade")
    _, bad = _bad_chain(c, tid, "agent")
    last = list(c.schemas.migrate_thread(tid, "agent", target_version=2))[-1]
    assert (last.checkpoints_migrated, last.checkpoints_failed) == (1, 1)
    assert [(f.checkpoint_id, f.stored_version) for f in last.failures] == [("c2", 1)]
    assert "thirty-six" in last.failures[0].error
    assert values_of(c.get_checkpoint(tid, "c2")) == bad
    assert values_of(c.get_checkpoint(tid, "c1")) == state_v2(1)
    # the target may be reached in steps: 2 now, 3 later
    last = list(c.schemas.migrate_thread(tid, "agent"))[-1]
    assert (last.checkpoints_migrated, last.checkpoints_failed) == (1, 1)
    assert values_of(c.get_checkpoint(tid, "c1")) == state_v3(1)


def test_migrate_namespace_and_bad_requests(nsclient, tid):
    c = nsclient
    register_three(c, "agent")
    for t in range(3):
        c.put_checkpoint(f"{tid}-{t}", state_v1(t), schema="agent", schema_version=1)
    progress = list(c.schemas.migrate_namespace("agent", target_version=2))
    assert progress[-1].threads_done == 3 and progress[-1].checkpoints_migrated == 3
    for t in range(3):
        assert values_of(c.get_checkpoint(f"{tid}-{t}")) == state_v2(t)
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "target_version"):
        list(c.schemas.migrate_namespace("agent", target_version=9))
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "schema"):
        list(c.schemas.migrate_thread(f"{tid}-0", "nobody"))
    with expect_error(grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND"):
        list(c.schemas.migrate_thread("no-such-thread", "agent"))
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "batch_size"):
        list(c.schemas.migrate_thread(f"{tid}-0", "agent", batch_size=5000))


# ---------------------------------------------------------------- the engine on its own

def _recs(steps) -> list:
    from sidecar.api.schemas import step_input
    return [step_input(x, f"s[{i}]") for i, x in enumerate(steps)]


def test_engine_conversions():
    conv = lambda v, to: engine.apply({"v": v}, [SchemaVersionRec(2, _recs([s.convert("v", to)]))])["v"]  # noqa: E731
    assert conv("12", "int") == 12 and conv(3.0, "int") == 3 and conv(True, "int") == 1 and conv(None, "int") is None
    assert conv(2, "float") == 2.0 and conv("1.5e3", "float") == 1500.0
    assert conv(7, "string") == "7" and conv(0.1, "string") == "0.1" and conv(False, "string") == "false"
    assert conv(1, "bool") is True and conv("false", "bool") is False
    assert conv(5, "list") == [5] and conv([5], "list") == [5]
    for v, to in (("1.5", "int"), (2.5, "int"), (float("inf"), "int"), ("x", "float"), (True, "float"),
                  (2, "bool"), ("yes", "bool"), ([1], "string"), ({"a": 1}, "int")):
        with pytest.raises(engine.MigrationError):
            conv(v, to)


def test_engine_structural_edge_cases():
    def run(doc, steps):
        return engine.apply(copy.deepcopy(doc), [SchemaVersionRec(2, _recs(steps))])

    assert run({"a": 1}, [s.rename("zz", "b"), s.drop("zz"), s.convert("zz", "int")]) == {"a": 1}  # absent: no-op
    with pytest.raises(engine.MigrationError, match="exists"):
        run({"a": 1, "b": 2}, [s.rename("a", "b")])
    with pytest.raises(engine.MigrationError, match="absent"):
        run({"a": 1}, [s.add(["m", "x"], 1)])
    with pytest.raises(engine.MigrationError, match="expected a map"):
        run({"m": [1]}, [s.add(["m", "x"], 1)])
    assert run({"m": {"x": 0}}, [s.add(["m", "x"], 1)]) == {"m": {"x": 0}}  # present: kept
    assert run({"a": 1, "b": 2, "c": 3}, [s.nest(["a", "b", "q"], "ab")]) == {"ab": {"a": 1, "b": 2}, "c": 3}
    assert run({"a": 1, "ab": {"z": 0}}, [s.nest(["a"], "ab")]) == {"ab": {"z": 0, "a": 1}}
    with pytest.raises(engine.MigrationError, match="exists"):
        run({"a": 1, "ab": {"a": 0}}, [s.nest(["a"], "ab")])
    assert run({"n": {"a": 1, "b": 2}}, [s.unnest("n", ["a"])]) == {"n": {"b": 2}, "a": 1}
    assert run({"n": {"a": 1}}, [s.unnest("n")]) == {"a": 1}
    with pytest.raises(engine.MigrationError, match="exists"):
        run({"n": {"a": 1}, "a": 0}, [s.unnest("n")])
    assert run({"l": [{"a": 1}, {"a": 2}]}, [s.map_items("l", s.rename("a", "b"))]) == {"l": [{"b": 1}, {"b": 2}]}
    with pytest.raises(engine.MigrationError, match="map item") as info:
        run({"l": [{"a": 1}, 3]}, [s.map_items("l", s.rename("a", "b"))])
    assert info.value.path == ["l", "1"]
    # nested lists of maps
    doc = {"turns": [{"calls": [{"n": "1"}, {"n": "2"}]}]}
    assert run(doc, [s.map_items("turns", s.map_items("calls", s.convert("n", "int")))]) == \
        {"turns": [{"calls": [{"n": 1}, {"n": 2}]}]}


def test_unread_entries_are_decoded_only_when_a_step_looks_into_them():
    loads = []
    doc = {name: engine.Unread(name, lambda name=name: loads.append(name) or {"x": 1}) for name in "abcd"}
    engine.apply(doc, [SchemaVersionRec(2, _recs([s.rename("a", "z"), s.drop("b"), s.add(["c", "y"], 2)]))])
    assert loads == ["c"] and isinstance(doc["z"], engine.Unread) and doc["z"].ref == "a" and "b" not in doc
    assert doc["c"] == {"x": 1, "y": 2} and isinstance(doc["d"], engine.Unread)


def test_step_records_round_trip_through_msgpack():
    from sidecar.storage import layout
    recs = _recs(V2 + V3)
    raw = msgspec.msgpack.encode(layout.SchemaRec(1, [SchemaVersionRec(1, []), SchemaVersionRec(2, recs)], 1, 0,
                                                  1, 1, 1))
    assert layout.schema_decoder.decode(raw).versions[1].steps == recs
    assert all(isinstance(r, MigrationStepRec) for r in recs)


# ---------------------------------------------------------------- client-side migrations

def test_client_side_migrations_run_in_order():
    m = Migrations("agent")

    @m.step(1)
    def _(values):
        values["memo"] = values.pop("notes")
        return values

    @m.step(2)
    def _(values):
        values["memo"] = values["memo"].upper()  # returns None: changed in place

    assert m.latest == 3
    assert m.upgrade({"notes": "hi"}, 1, 3) == {"memo": "HI"}
    assert m.upgrade({"memo": "x"}, 2, 3) == {"memo": "X"}
    assert m.upgrade({"memo": "x"}, 3, 3) == {"memo": "x"}
    with pytest.raises(MigrationError, match="newer"):
        m.upgrade({}, 3, 2)
    with pytest.raises(MigrationError, match="no client-side step from version 3"):
        m.upgrade({}, 1, 4)
    with pytest.raises(MigrationError, match="KeyError"):
        m.upgrade({}, 1, 2)
    with pytest.raises(ValueError):
        m.step(1)(lambda v: v)


def test_constants_equal_the_protos():
    assert (engine.POLICY_FAIL, engine.POLICY_DEGRADE, engine.POLICY_NEW_RUN) == (
        spb.FAILURE_POLICY_FAIL, spb.FAILURE_POLICY_DEGRADE, spb.FAILURE_POLICY_NEW_RUN)
    assert (engine.TYPE_STRING, engine.TYPE_INT, engine.TYPE_FLOAT, engine.TYPE_BOOL, engine.TYPE_LIST) == (
        spb.VALUE_TYPE_STRING, spb.VALUE_TYPE_INT, spb.VALUE_TYPE_FLOAT, spb.VALUE_TYPE_BOOL, spb.VALUE_TYPE_LIST)
    assert (engine.STATUS_NONE, engine.STATUS_CURRENT, engine.STATUS_MIGRATED, engine.STATUS_DEGRADED,
            engine.STATUS_NEW_RUN, engine.STATUS_UNREGISTERED) == (
        spb.MIGRATION_STATUS_UNSPECIFIED, spb.MIGRATION_STATUS_CURRENT, spb.MIGRATION_STATUS_MIGRATED,
        spb.MIGRATION_STATUS_DEGRADED, spb.MIGRATION_STATUS_NEW_RUN, spb.MIGRATION_STATUS_UNREGISTERED)


# ---------------------------------------------------------------- migrated values are encoded canonically

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_scalars = (st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70)
            | st.floats(allow_nan=True) | st.text(max_size=8) | st.binary(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_encode_of_decoded_values_is_canonical(value):
    from agentstate import codec
    from sidecar.storage import hotpath as hp
    canonical = codec.encode(value)
    again = engine.encode(engine.decode(canonical))
    assert again == canonical and hp.canonicalize(again) == again
    # a converted big int is stored as the canonical encoder stores it
    big = engine.apply({"v": "123456789012345678901234567890"},
                       [SchemaVersionRec(2, _recs([s.convert("v", "int")]))])
    assert engine.encode(big) == codec.encode({"v": 123456789012345678901234567890})


# ---------------------------------------------------------------- memory items carry (schema, version) too

def test_memory_items_migrate_on_read(nsclient):
    from agentstate import from_value
    c = nsclient
    c.schemas.register("profile", [[], [s.rename("nick", "handle"), s.convert("age", "int")],
                                   [s.nest(["handle", "age"], "about")]], failure_policy="degrade")
    c.memory.put(["users"], "u1", {"nick": "ada", "age": "36"}, schema="profile", schema_version=1)
    as_stored = c.memory.get(["users"], "u1")
    assert (as_stored.schema, as_stored.schema_version, as_stored.migration) == ("profile", 1, s.NOT_ASKED)
    item = c.memory.get(["users"], "u1", read_schema_version=3)
    assert from_value(item.value) == {"about": {"handle": "ada", "age": 36}}
    assert (item.schema_version, item.stored_schema_version, item.migration) == (3, 1, s.MIGRATED)
    assert item.etag == as_stored.etag and from_value(c.memory.get(["users"], "u1").value) == {"nick": "ada",
                                                                                                "age": "36"}
    c.memory.put(["users"], "u2", {"nick": "bob", "age": "old"}, schema="profile", schema_version=1)
    bad = c.memory.get(["users"], "u2", read_schema_version=2)
    assert bad.migration == s.DEGRADED and "old" in bad.migration_error
    assert from_value(bad.value) == {"nick": "bob", "age": "old"} and bad.schema_version == 1
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "schema_version"):
        c.memory.put(["users"], "u3", {"a": 1}, schema="profile")


def test_the_migration_cache_stays_within_its_bound():
    cache = engine._Cache()
    cache.MAX_BYTES = 1000
    for i in range(50):
        cache.put(bytes([i]), [("c", ("parts", (0, b"x", b"h")))], 100)
        assert cache.size <= 1000 and cache.size == sum(n for _, n in cache.entries.values())
    assert cache.get(bytes([49])) is not None and cache.get(bytes([0])) is None
    cache.put(b"big", [], 1000 // 8 + 1)  # too big for the cache: not kept
    assert cache.get(b"big") is None


def test_resume_starts_a_linked_run_under_new_run(nsclient, tid):
    from agentstate import from_value
    c = nsclient
    register_three(c, "agent", failure_policy="new_run")
    _bad_chain(c, tid, "agent")
    cp, created = c.schemas.resume(tid, 3)
    assert cp.checkpoint_id == "c1" and created is not None and created.lease.lease_id
    run = created.run
    assert run.start_checkpoint_id == "c1"
    meta = {k: from_value(v) for k, v in run.metadata.items()}
    assert meta["new_run_from"] == "c2" and meta["schema"] == "agent" and meta["schema_version"] == 3
    assert "thirty-six" in meta["reason"]
    # the run's put goes on from c1 (a fork next to the chain that does not migrate)
    c.threads.PutCheckpoint(_run_put(c, tid, run.run_id, created.lease.lease_id), timeout=10)
    again, none = c.schemas.resume(tid, 3)
    assert (again.checkpoint_id, again.migration, none) == ("c3", s.CURRENT, None)
    assert values_of(again) == state_v3(5)


def _run_put(c, tid, run_id, lease_id):
    from agentstate import _requests as rq
    req = rq.put_checkpoint_request(c.namespace, tid, state_v3(5), checkpoint_id="c3", parent_id="c1", base_id="",
                                    checkpoint_ns="", metadata=None, extra=None, expected_head_etag=None,
                                    schema_version=3, require_thread=False, request_id="")
    req.schema, req.run_id, req.lease_id = "agent", run_id, lease_id
    return req


def test_the_migration_step_record_leaves_the_run_step_record_alone():
    from sidecar.storage import layout
    assert layout.StepRec is not layout.MigrationStepRec
    assert layout.step_decoder.type is layout.StepRec and "name" in layout.StepRec.__struct_fields__
