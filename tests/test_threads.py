"""ThreadService thread calls: create, get, list, update, delete, copy; namespace isolation."""
from __future__ import annotations

import uuid

import grpc
import msgspec
import pytest
from conftest import expect_error

from agentstate import Append, Client, decode_map
from agentstate.v1 import threads_pb2 as pb
from agentstate.v1 import values_pb2

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXISTS = grpc.StatusCode.ALREADY_EXISTS
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


def create(c: Client, thread_id: str = "", metadata=None, **fields) -> pb.CreateThreadResponse:
    """CreateThread through the raw stub (the client hides `created`)."""
    req = pb.CreateThreadRequest(namespace=c.namespace, thread_id=thread_id, **fields)
    for k, v in (metadata or {}).items():
        req.metadata[k].msgpack = msgspec.msgpack.encode(v)
    return c._call(c.threads.CreateThread, req, None)


def ids(threads) -> list[str]:
    return [t.thread_id for t in threads]


def checkpoint_dump(c: Client, thread_id: str) -> list[tuple]:
    """Every checkpoint of a thread, comparable across threads (thread id left out)."""
    out = []
    for cp in c.list_checkpoints(thread_id, include_values=True, include_pending_writes=True):
        cp.thread_id = ""
        out.append((cp.checkpoint_ns, cp.checkpoint_id, cp.etag, cp.SerializeToString(deterministic=True)))
    return sorted(out)


def populate(c: Client, thread_id: str, tag: str) -> list[str]:
    """Two checkpoint namespaces with pending writes; returns the checkpoint ids."""
    made = []
    for cns in ("", "inner|sub"):
        parent = ""
        for step in range(3):
            r = c.put_checkpoint(thread_id, {"messages": [f"{tag}-{cns}-{i}" for i in range(step + 1)],
                                             "shared": {"doc": "same everywhere " * 10}},
                                 checkpoint_ns=cns, parent_id=parent,
                                 metadata={"step": step, "run_id": f"run-{tag}"})
            parent = r.checkpoint.checkpoint_id
            made.append(parent)
            c.put_writes(thread_id, parent, [("task-a", 0, "messages", f"{tag}-write-{step}"),
                                             ("task-b", 1, "other", {"n": step})], checkpoint_ns=cns)
    return made


# ---------------------------------------------------------------- create / get

def test_create_with_empty_id_gets_a_server_uuid(nsclient, ns):
    first = create(nsclient)
    second = create(nsclient)
    assert first.created and second.created
    for r in (first, second):
        assert str(uuid.UUID(r.thread.thread_id)) == r.thread.thread_id
        assert r.thread.namespace == ns
        assert r.thread.status == pb.THREAD_STATUS_IDLE
        assert r.thread.etag
    assert first.thread.thread_id != second.thread.thread_id
    got = nsclient.get_thread(first.thread.thread_id)
    assert got == first.thread


def test_default_namespace_is_default(client, tid):
    r = client.threads.CreateThread(pb.CreateThreadRequest(thread_id=tid))
    assert r.thread.namespace == "default"
    assert client.get_thread(tid).namespace == "default"


def test_create_if_exists_policies(nsclient, tid):
    made = create(nsclient, tid, {"a": 1, "b": "x"})
    assert made.created
    assert decode_map(made.thread.metadata) == {"a": 1, "b": "x"}

    for policy in (pb.IF_EXISTS_UNSPECIFIED, pb.IF_EXISTS_ERROR):
        with expect_error(EXISTS, "THREAD_ALREADY_EXISTS", "thread_id", thread_id=tid):
            create(nsclient, tid, {"a": 2}, if_exists=policy)
    assert nsclient.get_thread(tid) == made.thread

    returned = create(nsclient, tid, {"a": 2}, if_exists=pb.IF_EXISTS_RETURN)
    assert not returned.created
    assert returned.thread == made.thread
    assert nsclient.get_thread(tid) == made.thread

    merged = create(nsclient, tid, {"a": 2, "c": [1]}, if_exists=pb.IF_EXISTS_MERGE_METADATA)
    assert not merged.created
    assert decode_map(merged.thread.metadata) == {"a": 2, "b": "x", "c": [1]}
    assert merged.thread.etag != made.thread.etag
    assert merged.thread.create_time == made.thread.create_time
    assert nsclient.get_thread(tid) == merged.thread

    # merging nothing changes nothing
    again = create(nsclient, tid, {}, if_exists=pb.IF_EXISTS_MERGE_METADATA)
    assert again.thread == merged.thread


def test_create_unknown_if_exists_policy_is_invalid(nsclient, tid):
    with expect_error(INVALID, "INVALID_FIELD", "if_exists"):
        create(nsclient, tid, if_exists=77)
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "thread_id"):
        nsclient.get_thread(tid)


def test_create_request_id_retry_returns_the_first_result(nsclient):
    first = create(nsclient, "", {"k": 1}, request_id="req-1")
    assert first.created
    # the retry gets the first response although the thread has changed since
    nsclient.update_thread(first.thread.thread_id, {"k": 2})
    retry = create(nsclient, "", {"k": 1}, request_id="req-1")
    assert retry == first
    assert len(list(nsclient.list_threads())) == 1

    with expect_error(INVALID, "REQUEST_ID_REUSED", "request_id"):
        create(nsclient, "", {"k": 2}, request_id="req-1")
    with expect_error(INVALID, "REQUEST_ID_REUSED", "request_id"):
        create(nsclient, "", {"k": 1}, request_id="req-1", if_exists=pb.IF_EXISTS_RETURN)
    # the same request id in another method is a different request too
    with expect_error(INVALID, "REQUEST_ID_REUSED", "request_id"):
        nsclient.update_thread(first.thread.thread_id, {"k": 3}, request_id="req-1")
    assert len(list(nsclient.list_threads())) == 1
    assert decode_map(nsclient.get_thread(first.thread.thread_id).metadata) == {"k": 2}


def test_request_ids_are_per_namespace(sidecar):
    with sidecar.client(namespace=f"ns-{uuid.uuid4().hex}") as a, \
            sidecar.client(namespace=f"ns-{uuid.uuid4().hex}") as b:
        ra = create(a, "", request_id="shared-id")
        rb = create(b, "", {"other": True}, request_id="shared-id")
        assert ra.created and rb.created
        assert ra.thread.thread_id != rb.thread.thread_id
        assert ids(a.list_threads()) == [ra.thread.thread_id]
        assert ids(b.list_threads()) == [rb.thread.thread_id]


def test_get_missing_thread(nsclient, tid):
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "thread_id", thread_id=tid):
        nsclient.get_thread(tid)


def test_thread_timestamps_and_etag(nsclient, tid):
    t = nsclient.create_thread(tid, {"x": 1})
    assert t.create_time == t.update_time
    assert t.create_time.seconds > 1_600_000_000
    u = nsclient.update_thread(tid, {"x": 2})
    assert u.create_time == t.create_time
    assert (u.update_time.seconds, u.update_time.nanos) >= (t.update_time.seconds, t.update_time.nanos)
    assert u.etag != t.etag


# ---------------------------------------------------------------- list

def test_list_metadata_filter_compares_exact_types(nsclient):
    values = {"int": 1, "float": 1.0, "bool": True, "str": "1", "list": [1], "map": {"v": 1}, "none": None}
    for name, value in values.items():
        nsclient.create_thread(f"t-{name}", {"k": value, "name": name})
    nsclient.create_thread("t-without")
    for name, value in values.items():
        assert ids(nsclient.list_threads({"k": value})) == [f"t-{name}"], name
    assert ids(nsclient.list_threads({"k": 2})) == []
    assert ids(nsclient.list_threads({"k": 1, "name": "int"})) == ["t-int"]
    assert ids(nsclient.list_threads({"k": 1, "name": "float"})) == []
    assert len(ids(nsclient.list_threads())) == len(values) + 1


def test_list_filter_values_compare_by_canonical_encoding(nsclient):
    nsclient.create_thread("a", {"k": {"x": 1, "y": [1, 2]}})
    nsclient.create_thread("b", {"k": {"x": 1}})
    # the same map with its keys in another order, an int in a longer form, and as a MapValue
    unsorted = b"\x82\xa1y\x92\x01\xcd\x00\x02\xa1x\x01"
    req = pb.ListThreadsRequest(namespace=nsclient.namespace)
    req.metadata_filter["k"].msgpack = unsorted
    assert ids(nsclient.threads.ListThreads(req).threads) == ["a"]
    req = pb.ListThreadsRequest(namespace=nsclient.namespace)
    entries = req.metadata_filter["k"].map.entries
    entries["x"].msgpack = b"\x01"
    entries["y"].list.items.add().msgpack = b"\x01"
    entries["y"].list.items.add().msgpack = b"\x02"
    assert ids(nsclient.threads.ListThreads(req).threads) == ["a"]


def test_list_pages_through_many_threads(nsclient):
    names = sorted(f"t{i:03d}" for i in range(53)) + ["t", "t0", "u"]  # ids that prefix each other
    mod3 = {name: int(name[1:]) % 3 if name[1:].isdigit() else -1 for name in names}
    for name in names:
        nsclient.create_thread(name, {"mod3": mod3[name]})
    expected = sorted(names)

    token, seen, pages = "", [], 0
    while True:
        resp = nsclient.threads.ListThreads(pb.ListThreadsRequest(namespace=nsclient.namespace, page_size=5,
                                                                  page_token=token))
        assert len(resp.threads) <= 5
        seen += ids(resp.threads)
        pages += 1
        token = resp.next_page_token
        if not token:
            break
    assert seen == expected
    assert pages >= len(expected) // 5

    # filtered paging: every third thread, pages of 4
    want = [n for n in expected if mod3[n] == 0]
    assert len(want) > 10
    assert ids(nsclient.list_threads({"mod3": 0}, page_size=4)) == want
    assert ids(nsclient.list_threads(page_size=1000)) == expected
    assert ids(nsclient.list_threads(page_size=1)) == expected


def test_list_page_token_is_bound_to_its_request(nsclient, sidecar):
    for i in range(4):
        nsclient.create_thread(f"t{i}", {"even": i % 2 == 0})
    first = nsclient.threads.ListThreads(pb.ListThreadsRequest(namespace=nsclient.namespace, page_size=1))
    assert first.next_page_token
    other = pb.ListThreadsRequest(namespace=nsclient.namespace, page_size=1, page_token=first.next_page_token)
    other.metadata_filter["even"].msgpack = b"\xc3"
    with expect_error(INVALID, "INVALID_FIELD", "page_token"):
        nsclient._call(nsclient.threads.ListThreads, other, None)
    with sidecar.client(namespace=nsclient.namespace + "-other") as c2:
        req = pb.ListThreadsRequest(namespace=c2.namespace, page_size=1, page_token=first.next_page_token)
        with expect_error(INVALID, "INVALID_FIELD", "page_token"):
            c2._call(c2.threads.ListThreads, req, None)
    for bad in ("!!!", "AAAA", first.next_page_token[:-2]):
        req = pb.ListThreadsRequest(namespace=nsclient.namespace, page_token=bad)
        with expect_error(INVALID, "INVALID_FIELD", "page_token"):
            nsclient._call(nsclient.threads.ListThreads, req, None)
    # the same request with the token goes on where the first page ended
    same = pb.ListThreadsRequest(namespace=nsclient.namespace, page_size=1, page_token=first.next_page_token)
    assert ids(nsclient.threads.ListThreads(same).threads) == ["t1"]


def test_list_page_size_limit(nsclient):
    with expect_error(INVALID, "INVALID_FIELD", "page_size"):
        list(nsclient.list_threads(page_size=1001))


# ---------------------------------------------------------------- update

def test_update_set_remove_replace(nsclient, tid):
    t0 = nsclient.create_thread(tid, {"a": 1, "b": 2, "c": 3})
    t1 = nsclient.update_thread(tid, {"a": "one", "d": [4]}, remove_keys=["b", "missing"])
    assert decode_map(t1.metadata) == {"a": "one", "c": 3, "d": [4]}
    assert t1.etag != t0.etag
    t2 = nsclient.update_thread(tid, {"only": True}, replace=True)
    assert decode_map(t2.metadata) == {"only": True}
    t3 = nsclient.update_thread(tid, {}, replace=True)
    assert decode_map(t3.metadata) == {}
    assert len({t0.etag, t1.etag, t2.etag, t3.etag}) == 4
    assert nsclient.get_thread(tid) == t3


def test_update_keys_that_are_not_identifiers(nsclient, tid):
    """Metadata keys are free-form strings: what can be set can be removed."""
    odd = ["with\x00nul", "k" * 300, ""]
    nsclient.create_thread(tid, {k: 1 for k in odd} | {"keep": 2})
    t = nsclient.update_thread(tid, remove_keys=odd)
    assert decode_map(t.metadata) == {"keep": 2}


def test_update_with_etag(nsclient, tid):
    t0 = nsclient.create_thread(tid, {"v": 0})
    t1 = nsclient.update_thread(tid, {"v": 1}, etag=t0.etag)
    with expect_error(PRECONDITION, "ETAG_MISMATCH", "etag", etag=t0.etag, current_etag=t1.etag):
        nsclient.update_thread(tid, {"v": 2}, remove_keys=["v"], replace=True, etag=t0.etag)
    assert nsclient.get_thread(tid) == t1
    t2 = nsclient.update_thread(tid, {"v": 2}, etag=t1.etag)
    assert decode_map(t2.metadata) == {"v": 2}


def test_update_request_id_retry(nsclient, tid):
    t0 = nsclient.create_thread(tid, {"n": 0})
    first = nsclient.update_thread(tid, {"n": 1}, etag=t0.etag, request_id="u1")
    # the etag is stale now, but a retry returns the first result instead of failing or applying again
    again = nsclient.update_thread(tid, {"n": 1}, etag=t0.etag, request_id="u1")
    assert again == first
    assert nsclient.get_thread(tid) == first
    with expect_error(INVALID, "REQUEST_ID_REUSED"):
        nsclient.update_thread(tid, {"n": 2}, request_id="u1")


def test_update_missing_thread(nsclient, tid):
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "thread_id"):
        nsclient.update_thread(tid, {"a": 1})
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
        nsclient.get_thread(tid)


# ---------------------------------------------------------------- delete

def test_delete_removes_everything_of_the_thread(fresh_sidecar):
    with fresh_sidecar.client() as c:
        c.create_thread("keep")
        populate(c, "keep", "keep")
        before = c.store_stats()
        made = populate(c, "doomed", "doomed")
        assert c.store_stats().pending_writes == before.pending_writes + 2 * len(made)

        r = c.delete_thread("doomed")
        assert r.deleted and r.deleted_checkpoints == len(made)
        after = c.store_stats()
        assert (after.threads, after.checkpoints, after.pending_writes) == (
            before.threads, before.checkpoints, before.pending_writes)
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            c.get_thread("doomed")
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            c.get_checkpoint("doomed")
        assert list(c.list_checkpoints("doomed")) == []
        assert c.delete_for_runs(["run-doomed"]) == 0

        # a thread made again under the same id starts empty: no old checkpoints or pending writes
        c.create_thread("doomed")
        assert list(c.list_checkpoints("doomed")) == []
        for cns in ("", "inner|sub"):
            with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND"):
                c.get_checkpoint("doomed", checkpoint_ns=cns)
        r = c.put_checkpoint("doomed", {"x": 1}, checkpoint_id=made[0])
        cp = c.get_checkpoint("doomed", made[0], include_pending_writes=True)
        assert list(cp.pending_writes) == []
        assert len(list(c.list_checkpoints("keep"))) == len(made)


def test_delete_allow_missing_and_etag(nsclient, tid):
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "thread_id"):
        nsclient.delete_thread(tid)
    r = nsclient.delete_thread(tid, allow_missing=True)
    assert not r.deleted and r.deleted_checkpoints == 0

    t0 = nsclient.create_thread(tid)
    nsclient.put_checkpoint(tid, {"a": 1})
    t1 = nsclient.update_thread(tid, {"x": 1})
    with expect_error(PRECONDITION, "ETAG_MISMATCH", "etag", current_etag=t1.etag):
        nsclient.delete_thread(tid, etag=t0.etag)
    assert nsclient.get_thread(tid) == t1
    assert len(list(nsclient.list_checkpoints(tid))) == 1
    r = nsclient.delete_thread(tid, etag=t1.etag, request_id="del-1")
    assert r.deleted and r.deleted_checkpoints == 1
    # a retry gets the first answer, not NOT_FOUND
    assert nsclient.delete_thread(tid, etag=t1.etag, request_id="del-1") == r


def test_garbage_collection_after_delete_frees_only_unshared_blobs(fresh_sidecar):
    shared = {"doc": "a long shared document " * 200, "items": list(range(40))}
    with fresh_sidecar.client() as c:
        c.put_checkpoint("survivor", {"shared": shared, "own": ["survivor"]})
        c.put_writes("survivor", c.get_checkpoint("survivor").checkpoint_id, [("t", 0, "ch", shared)])
        base = c.store_stats().blobs

        parent = ""
        for step in range(4):
            parent = c.put_checkpoint("victim", {"shared": shared, "own": Append([f"private {step}" * 50])
                                                 if parent else ["private start"]},
                                      parent_id=parent).checkpoint.checkpoint_id
        c.put_writes("victim", parent, [("t", 0, "ch", {"private write": 1}), ("t", 1, "ch", shared)])
        c.put_checkpoint("victim", {"shared": shared}, checkpoint_ns="sub")
        grown = c.store_stats().blobs
        assert grown > base

        c.delete_thread("victim")
        gc = c.collect_garbage()
        assert gc.freed_blobs == grown - base
        assert gc.freed_bytes > 0
        assert gc.reachable_blobs == base
        assert c.store_stats().blobs == base
        integrity = c.check_integrity()
        assert integrity.missing_blobs == 0 and not integrity.problems
        assert c.get_values("survivor") == {"shared": shared, "own": ["survivor"]}
        cp = c.get_checkpoint("survivor", include_pending_writes=True)
        assert len(cp.pending_writes) == 1
        # a second collection finds nothing more
        assert c.collect_garbage().freed_blobs == 0


# ---------------------------------------------------------------- copy

def test_copy_copies_the_whole_tree_and_shares_values(fresh_sidecar):
    with fresh_sidecar.client() as c:
        c.create_thread("src", {"owner": "me", "n": 1})
        made = populate(c, "src", "src")
        before = c.store_stats()
        src_dump = checkpoint_dump(c, "src")

        r = c.copy_thread("src", "dst", metadata={"n": 2, "copied": True})
        assert r.copied_checkpoints == len(made)
        assert r.thread.thread_id == "dst"
        assert decode_map(r.thread.metadata) == {"owner": "me", "n": 2, "copied": True}
        after = c.store_stats()
        assert after.blobs == before.blobs and after.blob_bytes == before.blob_bytes
        assert after.checkpoints == 2 * before.checkpoints
        assert after.pending_writes == 2 * before.pending_writes
        assert after.threads == before.threads + 1
        assert checkpoint_dump(c, "dst") == src_dump
        for cns in ("", "inner|sub"):
            a = c.get_checkpoint("src", checkpoint_ns=cns, include_pending_writes=True)
            b = c.get_checkpoint("dst", checkpoint_ns=cns, include_pending_writes=True)
            assert a.etag == b.etag and a.checkpoint_id == b.checkpoint_id
            assert list(a.pending_writes) == list(b.pending_writes) and len(a.pending_writes) == 2

        # the copy is independent: changing or deleting the source leaves it whole
        c.put_checkpoint("src", {"messages": Append(["more"])}, parent_id=made[2])
        c.delete_thread("src")
        c.collect_garbage()
        assert checkpoint_dump(c, "dst") == src_dump
        assert c.check_integrity().missing_blobs == 0


def test_copy_replace_metadata_and_run_index(nsclient, tid):
    nsclient.create_thread(tid, {"a": 1})
    populate(nsclient, tid, "r")
    r = nsclient.copy_thread(tid, tid + "-copy", metadata={"b": 2}, replace_metadata=True)
    assert decode_map(r.thread.metadata) == {"b": 2}
    r = nsclient.copy_thread(tid, tid + "-copy2")
    assert decode_map(r.thread.metadata) == {"a": 1}
    # copied checkpoints are found by their run id like the originals
    assert nsclient.delete_for_runs(["run-r"]) == 18
    for t in (tid, tid + "-copy", tid + "-copy2"):
        assert list(nsclient.list_checkpoints(t)) == []


def test_copy_errors(nsclient, tid):
    nsclient.create_thread(tid)
    nsclient.put_checkpoint(tid, {"a": 1})
    nsclient.create_thread("taken", {"mine": True})
    taken = nsclient.get_thread("taken")
    with expect_error(EXISTS, "THREAD_ALREADY_EXISTS", "target_thread_id", thread_id="taken"):
        nsclient.copy_thread(tid, "taken")
    assert nsclient.get_thread("taken") == taken
    assert list(nsclient.list_checkpoints("taken")) == []
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "source_thread_id"):
        nsclient.copy_thread("no-such-thread", "target")
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
        nsclient.get_thread("target")
    with expect_error(INVALID, "INVALID_FIELD", "target_thread_id"):
        nsclient.copy_thread(tid, tid)
    with expect_error(INVALID, "INVALID_FIELD", "target_thread_id"):
        nsclient.copy_thread(tid, "")


def test_copy_request_id_retry(nsclient, tid):
    nsclient.create_thread(tid)
    nsclient.put_checkpoint(tid, {"a": 1})
    first = nsclient.copy_thread(tid, "copy", request_id="c1")
    assert nsclient.copy_thread(tid, "copy", request_id="c1") == first
    with expect_error(INVALID, "REQUEST_ID_REUSED"):
        nsclient.copy_thread(tid, "copy-2", request_id="c1")


# ---------------------------------------------------------------- namespace isolation

def test_nothing_crosses_a_namespace(sidecar):
    base = f"iso-{uuid.uuid4().hex[:8]}"
    # "x" and "x-y": one namespace is a prefix of the other
    with sidecar.client(namespace=base) as a, sidecar.client(namespace=base + "-y") as b:
        a.create_thread("t", {"side": "a"})
        made_a = populate(a, "t", "shared-run")
        a.put_checkpoint("t", {"messages": ["a only"]}, checkpoint_id="zzz", metadata={"run_id": "run-x"})

        # same thread id, other namespace: invisible until made there
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            b.get_thread("t")
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            b.get_checkpoint("t")
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            b.diff("t", made_a[0], made_a[1])
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            b.copy_thread("t", "stolen")
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            b.update_thread("t", {"side": "b"})
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            b.delete_thread("t")
        assert list(b.list_threads()) == []
        assert list(b.list_checkpoints()) == []
        assert list(b.list_checkpoints("t")) == []
        assert b.prune(["t"], delete_all=True) == 0
        assert b.delete_for_runs(["run-shared-run", "run-x"]) == 0

        b.create_thread("t", {"side": "b"})
        b.put_checkpoint("t", {"messages": ["b only"]}, checkpoint_id="zzz", metadata={"run_id": "run-x"})
        b.put_writes("t", "zzz", [("task", 0, "c", "b's write")])
        assert decode_map(a.get_thread("t").metadata) == {"side": "a"}
        assert decode_map(b.get_thread("t").metadata) == {"side": "b"}
        assert a.get_values("t", "zzz") == {"messages": ["a only"]}
        assert list(a.get_checkpoint("t", "zzz", include_pending_writes=True).pending_writes) == []
        assert ids(a.list_threads()) == ["t"] and ids(b.list_threads()) == ["t"]
        assert [cp.checkpoint_id for cp in b.list_checkpoints()] == ["zzz"]
        assert len(list(a.list_checkpoints())) == len(made_a) + 1

        # copying, pruning and deleting in b leave a alone
        b.copy_thread("t", "t2")
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            a.get_thread("t2")
        a_dump = checkpoint_dump(a, "t")
        assert b.delete_for_runs(["run-x"]) == 2
        assert b.prune(["t", "t2"], delete_all=True) == 0
        b.delete_thread("t")
        assert checkpoint_dump(a, "t") == a_dump
        assert decode_map(a.get_thread("t").metadata) == {"side": "a"}
        # and the other way round
        assert a.delete_for_runs(["run-x"]) == 1
        assert b.get_thread("t2").thread_id == "t2"
        with expect_error(NOT_FOUND, "THREAD_NOT_FOUND"):
            a.diff("t2", "zzz", "zzz")


def test_values_in_metadata_forms(nsclient, tid):
    """Metadata sent as ListValue/MapValue is stored like the same value sent as msgpack."""
    req = pb.CreateThreadRequest(namespace=nsclient.namespace, thread_id=tid)
    items = req.metadata["k"].list.items
    items.add().msgpack = b"\x01"
    items.add().map.entries["x"].msgpack = b"\xa1y"
    req.metadata["o"].opaque.CopyFrom(values_pb2.OpaqueValue(type="pickle", data=b"\x80\x04"))
    nsclient.threads.CreateThread(req)
    assert ids(nsclient.list_threads({"k": [1, {"x": "y"}]})) == [tid]
    meta = nsclient.get_thread(tid).metadata
    assert meta["o"].opaque.type == "pickle" and meta["o"].opaque.data == b"\x80\x04"


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 257])
def test_thread_id_validation(nsclient, bad):
    field = "thread_id"
    if bad == "":
        with expect_error(INVALID, "INVALID_FIELD", field):
            nsclient.get_thread(bad)
        return
    with expect_error(INVALID, "INVALID_FIELD", field):
        nsclient.create_thread(bad)
    assert list(nsclient.list_threads()) == []
