"""Conversation items carry (schema, version) (docs/lifecycle.md "Schema versions and migrations"): appended with
the item, returned as stored, and migrated on read by ListItems / GetItems that name read_schema_version, over
three versions, with the compatibility window and the failure policies; history is not rewritten."""
from __future__ import annotations

import grpc
from conftest import expect_error

from agentstate import schemas as s
from agentstate.conversations import item, item_value
from agentstate.v1 import conversations_pb2 as cpb
from sidecar.state.conversations import content_hash
from sidecar.state.schemas import encode

FP = grpc.StatusCode.FAILED_PRECONDITION
MSG = [[], [s.rename("text", "content"), s.convert("tokens", "int")],
       [s.nest(["content", "tokens"], "body"), s.add("lang", "en")]]


def _call(method, req):
    from agentstate.errors import from_rpc_error
    try:
        return method(req, timeout=10)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


def _item(content, version: int | None, schema: str = "msg", **kw):
    out = item("message", content, role="user", **kw)
    if version is not None:
        out.schema, out.schema_version = schema, version
    return out


def _list(c, tid, read: int = 0, **kw):
    req = cpb.ListItemsRequest(namespace=c.namespace, thread_id=tid, read_schema_version=read, **kw)
    return list(_call(c.conversations.stub.ListItems, req).items)


def test_items_migrate_on_read_over_three_versions(nsclient, tid):
    c = nsclient
    c.schemas.register("msg", MSG, failure_policy="degrade")
    c.conversations.append(tid, [
        _item({"text": "hi", "tokens": "2"}, 1, client_item_id="a"),
        _item({"content": "v2", "tokens": 3}, 2),
        _item({"body": {"content": "v3", "tokens": 4}, "lang": "fr"}, 3),
        _item({"text": "bad", "tokens": "many"}, 1),
        _item({"free": "form"}, None),
        _item("not a map", 1),
    ], create_thread=True)
    stored = _list(c, tid)
    assert [(x.schema, x.schema_version, x.migration) for x in stored] == [
        ("msg", 1, s.NOT_ASKED), ("msg", 2, s.NOT_ASKED), ("msg", 3, s.NOT_ASKED), ("msg", 1, s.NOT_ASKED),
        ("", 0, s.NOT_ASKED), ("msg", 1, s.NOT_ASKED)]
    got = _list(c, tid, read=3)
    assert [item_value(x) for x in got] == [
        {"body": {"content": "hi", "tokens": 2}, "lang": "en"}, {"body": {"content": "v2", "tokens": 3}, "lang": "en"},
        {"body": {"content": "v3", "tokens": 4}, "lang": "fr"}, {"text": "bad", "tokens": "many"}, {"free": "form"},
        "not a map"]
    assert [(x.migration, x.schema_version, x.stored_schema_version) for x in got] == [
        (s.MIGRATED, 3, 1), (s.MIGRATED, 3, 2), (s.CURRENT, 3, 3), (s.DEGRADED, 1, 1), (s.NOT_ASKED, 0, 0),
        (s.DEGRADED, 1, 1)]
    assert "many" in got[3].migration_error and "map" in got[5].migration_error
    # the content hash and the stored items stay as they were
    assert [x.content_hash for x in got] == [x.content_hash for x in stored]
    assert [item_value(x) for x in _list(c, tid)] == [item_value(x) for x in stored]
    # at version 2; GetItems by seq and by client id
    assert item_value(_list(c, tid, read=2)[0]) == {"content": "hi", "tokens": 2}
    req = cpb.GetItemsRequest(namespace=c.namespace, thread_id=tid, seqs=[got[1].seq], client_item_ids=["a"],
                              read_schema_version=3)
    items = _call(c.conversations.stub.GetItems, req).items
    assert [item_value(x) for x in items] == [item_value(got[1]), item_value(got[0])]
    assert all(x.migration == s.MIGRATED for x in items)
    # omit_content: the status without the content
    slim = _list(c, tid, read=3, omit_content=True)
    assert slim[0].migration == s.MIGRATED and not slim[0].HasField("content")


def test_item_policies_and_window(nsclient, tid):
    c = nsclient
    c.schemas.register("msg", MSG, failure_policy="fail")
    c.conversations.append(tid, [_item({"text": "x", "tokens": "many"}, 1), _item({"text": "y", "tokens": "1"}, 1),
                                 _item({"body": {}, "lang": "en"}, 3)], create_thread=True)
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="msg", stored_version="1", read_version="3",
                      path="tokens"):
        _list(c, tid, read=3)
    c.schemas.register("msg", MSG, failure_policy="new_run", min_readable_version=2)  # NEW_RUN behaves as FAIL
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", min_readable_version="2"):
        _list(c, tid, read=3)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", stored_version="3", read_version="2"):
        _list(c, tid, read=2, start_seq=3)
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "read_schema_version"):
        _list(c, tid, read=4)
    # an unregistered schema: as stored, flagged
    c.conversations.append(tid, [_item({"a": 1}, 1, schema="nobody")])
    last = _list(c, tid, read=3, start_seq=4)[0]
    assert last.migration == s.UNREGISTERED and item_value(last) == {"a": 1}


def test_append_refuses_a_schema_without_a_version_and_writes_nothing(nsclient, tid):
    c = nsclient
    bad = item("message", {"a": 1}, role="user")
    bad.schema = "msg"
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "items[1].schema_version"):
        c.conversations.append(tid, [_item({"text": "ok"}, 1), bad], create_thread=True)
    bad.schema, bad.schema_version = "x" * 10_000, 1  # longer than an id may be
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "items[0].schema"):
        c.conversations.append(tid, [bad], create_thread=True)
    with expect_error(grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND"):  # nothing was created
        _list(c, tid)


def test_export_and_import_carry_item_schemas(tmp_path):
    import subprocess
    import sys

    from conftest import SidecarProcess

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sidecar", *args], capture_output=True, text=True, timeout=120)

    src = SidecarProcess(tmp_path / "src").start()
    try:
        with src.client(namespace="conv") as c:
            c.schemas.register("msg", MSG)
            c.conversations.append("t", [_item({"text": "hi", "tokens": "2"}, 1), _item({"x": 1}, None)],
                                   create_thread=True)
    finally:
        src.stop()
    out = cli("export", "--data-dir", str(tmp_path / "src"), "--namespace", "conv", "--to", str(tmp_path / "f.asx"))
    assert out.returncode == 0, out.stderr
    out = cli("import", "--from", str(tmp_path / "f.asx"), "--data-dir", str(tmp_path / "dst"))
    assert out.returncode == 0, out.stderr
    dst = SidecarProcess(tmp_path / "dst").start()
    try:
        with dst.client(namespace="conv") as c:
            got = _list(c, "t", read=3)
            assert [(x.schema, x.stored_schema_version, x.migration) for x in got] == [
                ("msg", 1, s.MIGRATED), ("", 0, s.NOT_ASKED)]
            assert item_value(got[0]) == {"body": {"content": "hi", "tokens": 2}, "lang": "en"}
    finally:
        dst.stop()


def test_migrate_thread_rewrites_conversation_items_in_place(nsclient, tid):
    c = nsclient
    c.schemas.register("msg", MSG, failure_policy="degrade")  # (the lazy read below goes past the bad item)
    big = "x" * 3000  # over state.conversations.INLINE_MAX: stored as a node
    c.conversations.append(tid, [
        _item({"text": "hi", "tokens": "2"}, 1, client_item_id="a"),
        _item({"content": "v2", "tokens": 3}, 2),
        _item({"body": {"content": "v3", "tokens": 4}, "lang": "fr"}, 3),
        _item({"text": "bad", "tokens": "many"}, 1),
        _item({"free": "form"}, None),
        _item({"text": big, "tokens": "9"}, 1),
        _item({"text": "other"}, 1, schema="else"),
    ], create_thread=True)
    before = _list(c, tid)
    lazy = _list(c, tid, read=3)
    progress = list(c.schemas.migrate_thread(tid, "msg", batch_size=2))
    last = progress[-1]
    assert (last.conversation_items_seen, last.conversation_items_migrated, last.conversation_items_current,
            last.conversation_items_other, last.conversation_items_failed) == (7, 3, 1, 2, 1)
    seen = [p.conversation_items_seen for p in progress]
    assert seen == sorted(seen) and len({x for x in seen if x}) == 4  # batches of 2: 2, 4, 6, 7
    assert [(f.thread_id, f.item_seq, f.stored_version) for f in last.failures] == [(tid, before[3].seq, 1)]
    assert "many" in last.failures[0].error
    after = _list(c, tid)
    assert [(x.seq, x.client_item_id, x.kind, x.role, x.create_time) for x in after] == \
        [(x.seq, x.client_item_id, x.kind, x.role, x.create_time) for x in before]
    assert [x.schema_version for x in after] == [3, 3, 3, 1, 0, 3, 1]
    # the eager rewrite stores what a migrate-on-read gave, with the content hash of what it stores
    assert [item_value(x) for x in after] == [item_value(x) for x in lazy[:6]] + [{"text": "other"}]
    assert [x.content_hash == y.content_hash for x, y in zip(after, before)] == [False, False] + [True] * 3 + \
        [False, True]
    assert all(x.content_hash == content_hash(encode(item_value(x))) for x in after)
    assert item_value(after[5]) == {"body": {"content": big, "tokens": 9}, "lang": "en"}
    assert [(x.migration, x.schema_version) for x in _list(c, tid, read=3)][:3] == [(s.CURRENT, 3)] * 3
    again = list(c.schemas.migrate_thread(tid, "msg"))[-1]
    assert (again.conversation_items_migrated, again.conversation_items_current,
            again.conversation_items_failed) == (0, 4, 1)
    assert c.check_integrity().missing_blobs == 0


def _ctx_items(resp):
    return [x for x in resp.items if x.source == cpb.CONTEXT_SOURCE_ITEM]


def test_get_context_migrates_log_items_on_read(nsclient, tid):
    c = nsclient
    c.schemas.register("msg", MSG, failure_policy="degrade")
    c.conversations.append(tid, [
        _item({"text": "hi", "tokens": "2"}, 1),
        _item({"content": "v2", "tokens": 3}, 2),
        _item({"body": {"content": "v3", "tokens": 4}, "lang": "fr"}, 3),
        _item({"text": "bad", "tokens": "many"}, 1),
        _item({"free": "form"}, None),
    ], create_thread=True)
    stored = c.conversations.get_context(tid, 100_000)
    got = c.conversations.get_context(tid, 100_000, read_schema_version=3)
    assert [item_value(x) for x in _ctx_items(stored)] == [
        {"text": "hi", "tokens": "2"}, {"content": "v2", "tokens": 3}, {"body": {"content": "v3", "tokens": 4},
                                                                         "lang": "fr"},
        {"text": "bad", "tokens": "many"}, {"free": "form"}]
    assert {(x.schema, x.schema_version, x.migration) for x in _ctx_items(stored)} == {("", 0, s.NOT_ASKED)}
    items = _ctx_items(got)
    assert [item_value(x) for x in items] == [
        {"body": {"content": "hi", "tokens": 2}, "lang": "en"}, {"body": {"content": "v2", "tokens": 3}, "lang": "en"},
        {"body": {"content": "v3", "tokens": 4}, "lang": "fr"}, {"text": "bad", "tokens": "many"}, {"free": "form"}]
    assert [(x.schema, x.migration, x.schema_version, x.stored_schema_version) for x in items] == [
        ("msg", s.MIGRATED, 3, 1), ("msg", s.MIGRATED, 3, 2), ("msg", s.CURRENT, 3, 3), ("msg", s.DEGRADED, 1, 1),
        ("", s.NOT_ASKED, 0, 0)]
    assert "many" in items[3].migration_error
    # what ListItems gives at that version, item by item
    assert [item_value(x) for x in items] == [item_value(x) for x in _list(c, tid, read=3)]
    # the selection and its hash are the stored items' (tokens counted as stored)
    assert got.context_hash == stored.context_hash and got.total_tokens == stored.total_tokens
    # version 2: a step back from 3 is a downgrade, degraded under this policy
    two = _ctx_items(c.conversations.get_context(tid, 100_000, read_schema_version=2))
    assert [(x.migration, x.schema_version) for x in two][:3] == [(s.MIGRATED, 2), (s.CURRENT, 2), (s.DEGRADED, 3)]
    assert item_value(two[0]) == {"content": "hi", "tokens": 2}


def test_get_context_fails_under_fail_and_new_run(nsclient, tid):
    c = nsclient
    c.schemas.register("msg", MSG)  # FAIL
    c.conversations.append(tid, [_item({"text": "ok", "tokens": "1"}, 1), _item({"text": "bad", "tokens": "x"}, 1)],
                           create_thread=True)
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="msg"):
        c.conversations.get_context(tid, 100_000, read_schema_version=3)
    assert len(_ctx_items(c.conversations.get_context(tid, 100_000))) == 2  # without the version: as stored
    c.schemas.register("msg", MSG, failure_policy="new_run")
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="msg"):  # no run to start from a log: as FAIL
        c.conversations.get_context(tid, 100_000, read_schema_version=3)
    c.schemas.register("msg", MSG, failure_policy="fail", min_readable_version=2)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", schema="msg"):
        c.conversations.get_context(tid, 100_000, read_schema_version=3)


# ----------------------------------------------------------------- AppendItems' answer at read_schema_version

def _status(x):
    return x.migration, x.schema_version, x.stored_schema_version


def test_append_answer_migrates_over_three_versions(nsclient, tid):
    c = nsclient
    c.schemas.register("msg", MSG, failure_policy="degrade")
    batch = [item("message", {"text": "hi", "tokens": "2"}, role="user", client_item_id="a", schema="msg",
                  schema_version=1),
             _item({"content": "v2", "tokens": 3}, 2), _item({"body": {"content": "v3", "tokens": 4}, "lang": "fr"}, 3),
             _item({"text": "bad", "tokens": "many"}, 1), _item({"free": "form"}, None), _item("not a map", 1)]
    resp = c.conversations.append(tid, batch, create_thread=True, read_schema_version=3)
    assert [_status(x) for x in resp.items] == [
        (s.MIGRATED, 3, 1), (s.MIGRATED, 3, 2), (s.CURRENT, 3, 3), (s.DEGRADED, 1, 1), (s.NOT_ASKED, 0, 0),
        (s.DEGRADED, 1, 1)]
    assert [x.schema for x in resp.items] == ["msg"] * 4 + ["", "msg"]
    assert "many" in resp.items[3].migration_error and "map" in resp.items[5].migration_error
    assert not any(x.HasField("content") for x in resp.items)  # the answer stays without content
    # what ListItems gives for the same items at that version, status by status
    listed = _list(c, tid, read=3)
    assert [(_status(x), x.migration_error) for x in resp.items] == [(_status(x), x.migration_error) for x in listed]
    # stored as appended
    assert [(x.schema_version, x.migration) for x in _list(c, tid)] == [
        (1, s.NOT_ASKED), (2, s.NOT_ASKED), (3, s.NOT_ASKED), (1, s.NOT_ASKED), (0, s.NOT_ASKED), (1, s.NOT_ASKED)]
    # without read_schema_version: as stored, not asked
    plain = c.conversations.append(tid, [_item({"content": "p", "tokens": 1}, 2)])
    assert _status(plain.items[0]) == (s.NOT_ASKED, 2, 2)
    # a duplicate appended by v3 code answers the item stored first (at v1), migrated to the reader's version
    dup = item("message", {"body": {"content": "hi", "tokens": 2}, "lang": "en"}, role="user",
               client_item_id="a", schema="msg", schema_version=3)
    again = c.conversations.append(tid, [dup], read_schema_version=3)
    assert again.duplicates == 1 and again.items[0].seq == resp.items[0].seq
    assert _status(again.items[0]) == (s.MIGRATED, 3, 1)
    assert _status(c.conversations.append(tid, [dup], read_schema_version=2).items[0]) == (s.MIGRATED, 2, 1)
    assert _status(c.conversations.append(tid, [dup], read_schema_version=1).items[0]) == (s.CURRENT, 1, 1)
    assert _status(c.conversations.append(tid, [dup]).items[0]) == (s.NOT_ASKED, 1, 1)
    assert len(_list(c, tid)) == 7  # the duplicates appended nothing


def test_append_answer_fail_new_run_and_window(nsclient, tid):
    c = nsclient
    c.schemas.register("msg", MSG, failure_policy="fail")
    first = c.conversations.append(tid, [_item({"text": "ok", "tokens": "1"}, 1, client_item_id="ok")],
                                   create_thread=True, read_schema_version=3)
    assert _status(first.items[0]) == (s.MIGRATED, 3, 1)
    bad = _item({"text": "bad", "tokens": "many"}, 1, client_item_id="bad")
    fine = _item({"body": {}, "lang": "en"}, 3)
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="msg", stored_version="1", read_version="3",
                      path="tokens"):
        c.conversations.append(tid, [fine, bad], read_schema_version=3, request_id="r1")
    assert [x.seq for x in _list(c, tid)] == [1]  # nothing appended, the good item neither
    c.schemas.register("msg", MSG, failure_policy="new_run")  # no run to start from a log: as FAIL
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="msg"):
        c.conversations.append(tid, [fine, bad], read_schema_version=3)
    assert [x.seq for x in _list(c, tid)] == [1]
    # the failed call left no request record: the id is free for the append without the version
    done = c.conversations.append(tid, [fine, bad], request_id="r1")
    assert [_status(x) for x in done.items] == [(s.NOT_ASKED, 3, 3), (s.NOT_ASKED, 1, 1)]
    assert [x.seq for x in _list(c, tid)] == [1, 2, 3]
    # a stored item's duplicate fails too (the answer is the stored item, which does not migrate)
    with expect_error(FP, "SCHEMA_MIGRATION_FAILED", schema="msg"):
        c.conversations.append(tid, [bad], read_schema_version=3)
    # under the window: an item older than min_readable_version is unreadable at any version
    c.schemas.register("msg", MSG, failure_policy="fail", min_readable_version=2)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", schema="msg", min_readable_version="2"):
        c.conversations.append(tid, [_item({"text": "old", "tokens": "1"}, 1)], read_schema_version=3)
    with expect_error(FP, "SCHEMA_VERSION_UNREADABLE", stored_version="3", read_version="2"):
        c.conversations.append(tid, [fine], read_schema_version=2)
    assert len(_list(c, tid)) == 3
    ok = c.conversations.append(tid, [fine], read_schema_version=3)
    assert _status(ok.items[0]) == (s.CURRENT, 3, 3)
    # DEGRADE under the same window: the old item appended, answered as stored, flagged
    c.schemas.register("msg", MSG, failure_policy="degrade", min_readable_version=2)
    old = c.conversations.append(tid, [_item({"text": "old", "tokens": "1"}, 1)], read_schema_version=3)
    assert _status(old.items[0]) == (s.DEGRADED, 1, 1) and old.items[0].migration_error
    # a version past the schema's latest: SCHEMA_NOT_FOUND naming the field, nothing appended
    with expect_error(grpc.StatusCode.NOT_FOUND, "SCHEMA_NOT_FOUND", "read_schema_version"):
        c.conversations.append(tid, [fine], read_schema_version=4)
    assert len(_list(c, tid)) == 5
    # an unregistered schema: appended, flagged
    other = c.conversations.append(tid, [_item({"a": 1}, 1, schema="nobody")], read_schema_version=3)
    assert _status(other.items[0]) == (s.UNREGISTERED, 1, 1)


def test_async_client_append_and_reads_name_the_version(sidecar, nsclient, tid):
    import asyncio

    from agentstate import AsyncClient

    c = nsclient
    c.schemas.register("msg", MSG)

    async def body():
        async with AsyncClient(sidecar.address, namespace=c.namespace) as ac:
            resp = await ac.conversations.append(tid, [_item({"text": "hi", "tokens": "2"}, 1, client_item_id="a")],
                                                 create_thread=True, read_schema_version=3)
            listed = [x async for x in ac.conversations.list(tid, read_schema_version=2)]
            got = await ac.conversations.get(tid, client_item_ids=["a"], read_schema_version=3)
            latest = await ac.conversations.latest(tid, 1, read_schema_version=3)
            return resp, listed, got, latest

    resp, listed, got, latest = asyncio.run(body())
    assert _status(resp.items[0]) == (s.MIGRATED, 3, 1)
    assert [(item_value(x), _status(x)) for x in listed] == [({"content": "hi", "tokens": 2}, (s.MIGRATED, 2, 1))]
    assert item_value(got.items[0]) == item_value(latest[0]) == {"body": {"content": "hi", "tokens": 2}, "lang": "en"}
    # the sync client's reads take it too
    assert item_value(next(iter(c.conversations.list(tid, read_schema_version=3)))) == item_value(got.items[0])
    assert item_value(c.conversations.get(tid, [1], read_schema_version=2).items[0]) == item_value(listed[0])
