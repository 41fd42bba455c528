"""Usage counters and namespace quotas (storage/usage.py, RetentionService.SetQuota/GetQuota; docs/security.md
"Quotas"): every write path charges and every delete refunds, the counters equal a recount after random
sequences of writes, a write over a quota is refused with RESOURCE_EXHAUSTED QUOTA_EXCEEDED and changes
nothing, deletes go through over quota, old stores get their counters built, and they survive a restart."""
from __future__ import annotations

import hashlib
import shutil
import os
import uuid

import grpc
import lmdb
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstate import Append, Client, Keep
from agentstate.conversations import item
from sidecar.storage import compression, layout, nodes, usage
from sidecar.storage.store import Store

from conftest import InProcess, expect_error


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    side = InProcess(tmp_path_factory.mktemp("quotas"))
    side.sidecar.sweeper.retention_interval = 0
    yield side
    side.close()


@pytest.fixture()
def c(local):
    with Client(local.address, namespace=f"q-{uuid.uuid4().hex[:8]}") as client:
        yield client


def digest(local, skip: tuple[str, ...] = ()) -> str:
    """A hash of every table but those in ``skip``, and but the compression dictionary's rows of ``meta``: it is
    trained from the first values any write packs, in the background, and a training started by another
    test's writes may store it at any moment (it changes no value: records name the dictionary they use)."""
    store = local.sidecar.store
    h = hashlib.sha256()
    with store.read() as txn:
        for name in layout.DB_NAMES:
            if name in skip:
                continue
            for k, v in txn.cursor(db=store.db[name]):
                if name == "meta" and bytes(k).startswith(compression.META_CURRENT):
                    continue
                h.update(name.encode() + bytes(k) + bytes(v))
    return h.hexdigest()


def value_len(txn, store, node_id: bytes) -> int:
    """What the store reads back as the value's encoding (usage._value_bytes computes it apart)."""
    n = len(nodes.value_encoding(node_id, lambda i: txn.get(i, db=store.db["nodes"])))
    assert usage._value_bytes(txn, store, node_id) == n
    return n


def recount_clean(local) -> usage.Recount:
    store = local.sidecar.store
    with store.read() as txn:
        r = usage.recount(txn, store)
        # the recount sums the item charge rows; each row must be what its record's content or value encodes to
        want = {}
        for key, raw in txn.cursor(db=store.db["citems"]):
            rec = layout.item_decoder.decode(raw)
            want[b"c" + bytes(key)] = len(rec.inline) if rec.node is None else value_len(txn, store, rec.node)
        live = {}
        for key, raw in txn.cursor(db=store.db["memitems"]):
            rec = layout.memitem_decoder.decode(raw)
            want[b"m" + bytes(key)] = value_len(txn, store, rec.value)
            live[(bytes(key[:8]), bytes(key[8:]).decode())] = rec.version
        for key, raw in txn.cursor(db=store.db["memhist"]):  # an old version: a PUT not the live one
            rev = layout.memrev_decoder.decode(raw)
            if rev.value is not None and live.get((bytes(key[:8]), rev.key)) != layout.read_u64(bytes(key[-8:])):
                want[b"h" + bytes(key)] = value_len(txn, store, rev.value)
        rows = {bytes(k): layout.read_u64(v) for k, v in txn.cursor(db=store.db["icharge"])}
    assert r.problems == []
    assert rows == want
    return r


enc = msgspec.msgpack.encode  # canonical for these values (str, a one-key map)


def used(c, thread_id: str = ""):
    return c.retention.quota(thread_id)


def zero(u) -> bool:
    return (u.bytes, u.threads, u.items, u.checkpoints) == (0, 0, 0, 0)


# ----------------------------------------------------------------- charging and refunds

def test_each_write_path_charges_and_each_delete_refunds(local, c):
    assert zero(used(c).usage)
    blob = os.urandom(3000).hex()
    first = c.put_checkpoint("t", {"v": blob}).checkpoint.checkpoint_id
    u = used(c, "t")
    assert u.usage.threads == 1 and u.usage.checkpoints == 1 and u.usage.bytes >= 6000
    assert u.thread_usage.bytes == u.usage.bytes and u.thread_usage.checkpoints == 1
    # a pending write is charged its value, and refunded with its checkpoint
    before = u.usage.bytes
    c.put_writes("t", first, [("task", 0, "w", "x" * 500)])
    after_writes = used(c).usage.bytes
    assert after_writes - before >= 500
    # conversation items, memory items and artifact versions are items; an artifact is charged its size, a
    # conversation item its content's canonical encoding (inline or a node alike), a memory item its value's
    big = "x" * 3000  # over conversations.INLINE_MAX: stored as a node
    c.conversations.append("t", [item("message", "hi", role="user"), item("message", big, role="user")])
    conv = len(enc("hi")) + len(enc(big))
    assert used(c).usage.bytes == after_writes + conv
    assert used(c, "t").thread_usage.bytes == after_writes  # a thread's bytes: its checkpoints, writes, artifacts
    c.memory.put(["users", "u1"], "prefs", {"tone": "dry"})
    assert used(c).usage.bytes == after_writes + conv + len(enc({"tone": "dry"}))
    # a replace is charged its new value in full: the old one stays charged as history (an old version)
    c.memory.put(["users", "u1"], "prefs", {"tone": "d" * 100})
    mem, hist = len(enc({"tone": "d" * 100})), len(enc({"tone": "dry"}))
    c.artifacts.upload("t", "report.txt", b"a" * 1234)
    u = used(c)
    assert u.usage.items == 4 and u.usage.bytes == after_writes + 1234 + conv + mem + hist
    recount_clean(local)
    c.conversations.pop("t")
    assert used(c).usage.bytes == after_writes + 1234 + len(enc("hi")) + mem + hist
    c.memory.delete(["users", "u1"], "prefs")  # the item goes, its value stays in its history: still charged
    assert used(c).usage.items == 2 and used(c).usage.bytes == after_writes + 1234 + len(enc("hi")) + mem + hist
    recount_clean(local)
    c.memory.delete(["users", "u1"], "prefs", purge=True)  # purging the history refunds it
    assert used(c).usage.items == 2 and used(c).usage.bytes == after_writes + 1234 + len(enc("hi"))
    c.conversations.clear("t")
    assert used(c).usage.items == 1 and used(c).usage.bytes == after_writes + 1234  # the artifact
    c.conversations.append("t", [item("message", "again", role="user")])  # refunded with its thread below
    # a fork copies and charges; deleting both threads refunds everything
    c.copy_thread("t", "t2")
    u = used(c)
    assert u.usage.threads == 2 and u.usage.checkpoints == 2
    recount_clean(local)
    c.delete_thread("t")
    c.delete_thread("t2")
    assert zero(used(c).usage)
    recount_clean(local)


def test_pruning_whole_values_refunds_them(local, c):
    c.put_checkpoint("w", {"v": os.urandom(2000).hex()})
    one = used(c).usage.bytes
    for _ in range(3):
        c.put_checkpoint("w", {"v": os.urandom(2000).hex()})
    assert used(c).usage.bytes == 4 * one  # the same shape of put costs the same
    cid = sorted(x.checkpoint_id for x in c.list_checkpoints("w"))[0]  # the oldest
    c.put_writes("w", cid, [("task", 0, "w", "p" * 700)])
    c.prune(["w"], keep_latest=1)
    u = used(c).usage
    assert (u.bytes, u.checkpoints) == (one, 1)  # three checkpoints and the pending write refunded
    recount_clean(local)


def test_charges_are_the_same_whatever_other_namespaces_hold(local, c):
    """Deduplication against other writes is not credited: the same put costs the same in a namespace whose
    nodes are all stored already (and so does not reveal what others store)."""
    blob = os.urandom(4000).hex()
    c.put_checkpoint("a", {"v": blob, "n": 1})
    with Client(local.address, namespace=c.namespace + "-other") as other:
        other.put_checkpoint("a", {"v": blob, "n": 1})
        assert other.retention.quota().usage.bytes == used(c).usage.bytes


def test_a_delta_is_charged_what_it_adds_and_pruning_its_base_refunds_nothing(local, c):
    msgs = [f"message {i} " * 30 for i in range(50)]
    cid = c.put_checkpoint("chat", {"m": msgs}).checkpoint.checkpoint_id
    whole = used(c).usage.bytes
    ids = [cid]
    for i in range(5):
        cid = c.put_checkpoint("chat", {"m": Append([f"more {i} " * 30])}, base_id=cid, parent_id=cid
                               ).checkpoint.checkpoint_id
        ids.append(cid)
    grown = used(c).usage.bytes
    assert 0 < grown - whole < whole / 5  # five appended items, not five whole copies
    # the old checkpoints' nodes are still shared by the newest: removing them refunds nothing
    c.prune(["chat"], keep_latest=1)
    assert used(c).usage.bytes == grown and used(c).usage.checkpoints == 1
    recount_clean(local)
    c.delete_thread("chat")
    assert zero(used(c).usage)


def test_a_keep_builds_on_its_base_too(local, c):
    big = os.urandom(5000).hex()
    base = c.put_checkpoint("k", {"big": big, "n": 0}).checkpoint.checkpoint_id
    nxt = c.put_checkpoint("k", {"big": Keep(), "n": 1}, base_id=base, parent_id=base).checkpoint.checkpoint_id
    total = used(c).usage.bytes
    c.prune(["k"], keep_latest=1)  # the first checkpoint goes; its value lives on in the second
    assert used(c).usage.bytes == total
    assert [x.checkpoint_id for x in c.list_checkpoints("k")] == [nxt]
    recount_clean(local)


# ----------------------------------------------------------------- quotas

def test_max_bytes_refuses_with_the_numbers_and_changes_nothing(local, c):
    c.put_checkpoint("t", {"v": "x" * 1000})
    have = used(c).usage.bytes
    r = c.retention.set_quota(max_bytes=have + 100)
    assert r.own and r.quota.max_bytes == have + 100 and r.usage.bytes == have
    before = digest(local)
    for attempt in range(2):  # with a request id, and its retry
        with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes",
                          namespace=c.namespace, limit=str(have + 100), usage=str(have)) as info:
            c.put_checkpoint("t", {"v": os.urandom(2000).hex()}, request_id="rq-1")
        assert int(info.value.metadata["requested"]) > 100
        assert digest(local) == before
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes"):
        c.put_checkpoint("new-thread", {"v": "y" * 500})  # a new thread's put: the thread is not made either
    assert digest(local) == before
    c.put_checkpoint("t", {"v": "z"})  # a small one still fits
    # lowered below what is held: every write that adds is refused, deletes go through
    c.retention.set_quota(max_bytes=1)
    cid = next(iter(c.list_checkpoints("t"))).checkpoint_id
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes"):
        c.put_writes("t", cid, [("task", 0, "w", "v")])
    c.prune(["t"], keep_latest=1)
    c.delete_thread("t")
    assert zero(used(c).usage)
    recount_clean(local)


def test_max_bytes_refuses_conversation_and_memory_bytes(local, c):
    c.conversations.append("t", [item("message", "a" * 100, role="user")], create_thread=True)
    c.memory.put(["p"], "k", {"a": "b" * 100})
    have = used(c).usage.bytes
    c.retention.set_quota(max_bytes=have + 50)
    before = digest(local)
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes",
                      usage=str(have), requested=str(len(enc("c" * 60)))):
        c.conversations.append("t", [item("message", "c" * 60, role="user")])
    assert digest(local) == before
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes",
                      requested=str(len(enc({"a": "b" * 60})))):
        c.memory.put(["p"], "k", {"a": "b" * 60})  # a replace adds its whole value (the old one: history)
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes"):
        c.memory.put(["p"], "k2", {"a": "b" * 60})
    assert digest(local) == before
    c.conversations.append("t", [item("message", "c" * 30, role="user")])  # what fits goes in
    c.memory.put(["p"], "k", {"a": "b"})
    c.conversations.clear("t")
    c.memory.delete(["p"], "k")
    assert used(c).usage.bytes == len(enc({"a": "b" * 100})) + len(enc({"a": "b"}))  # its history, charged
    c.retention.set_quota(max_bytes=used(c).usage.bytes + len(enc({"a": "b" * 60})) + 5)
    c.memory.put(["p"], "k3", {"a": "b" * 60})
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes"):
        c.memory.put(["p"], "k4", {"a": "b" * 60})  # the history still counts against the quota
    c.memory.delete(["p"], "k", purge=True)  # purging it makes room
    c.memory.put(["p"], "k4", {"a": "b" * 60})
    for k in ("k3", "k4"):
        c.memory.delete(["p"], k, purge=True)
    c.delete_thread("t")
    assert zero(used(c).usage)
    recount_clean(local)


def test_a_large_put_is_charged_and_refused_before_its_nodes_are_stored(local, c):
    """A put over 256 KiB is staged off the loop (api/checkpoints._put_large): it is charged like any put,
    and one over the quota is refused before any of its nodes is written."""
    c.put_checkpoint("t", {"n": 0})
    have = used(c).usage.bytes
    c.retention.set_quota(max_bytes=have + 100_000)
    big = {"v": os.urandom(200_000).hex(), "m": [os.urandom(1000).hex() for _ in range(100)]}
    before = digest(local)
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_bytes"):
        c.put_checkpoint("t", big)
    assert digest(local) == before
    c.retention.set_quota(max_bytes=have + 10_000_000)
    c.put_checkpoint("t", big)
    assert used(c).usage.bytes - have >= 600_000
    recount_clean(local)


def test_max_threads_every_way_of_making_one(local, c):
    c.retention.set_quota(max_threads=2)
    c.put_checkpoint("a", {"n": 1})
    c.create_thread("b")
    before = digest(local)
    for make in (lambda: c.put_checkpoint("c", {"n": 1}), lambda: c.create_thread("c"),
                 lambda: c.copy_thread("a", "c"),
                 lambda: c.conversations.append("c", [item("message", "hi", role="user")], create_thread=True)):
        with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_threads", limit="2",
                          usage="2", requested="1"):
            make()
        assert digest(local) == before
    c.put_checkpoint("a", {"n": 2})  # writing to a thread it has is fine
    c.delete_thread("b")  # deletes are always allowed ...
    c.create_thread("c")  # ... and make room
    assert used(c).usage.threads == 2


def test_max_items_memory_conversations_artifacts(local, c):
    c.retention.set_quota(max_items=3)
    c.create_thread("t")
    c.memory.put(["p"], "k1", {"a": 1})
    c.conversations.append("t", [item("message", "one", role="user")])
    c.artifacts.upload("t", "f", b"data")
    before = digest(local)
    for add in (lambda: c.memory.put(["p"], "k2", {"a": 2}),
                lambda: c.conversations.append("t", [item("message", "two", role="user")]),
                lambda: c.artifacts.upload("t", "f", b"more")):
        with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_items", limit="3"):
            add()
        assert digest(local) == before
    c.memory.put(["p"], "k1", {"a": 3})  # replacing an item adds none
    c.memory.delete(["p"], "k1")
    c.memory.put(["p"], "k2", {"a": 2})
    assert used(c).usage.items == 3
    recount_clean(local)


def test_defaults_from_the_server_and_clearing(tmp_path):
    side = InProcess(tmp_path, quota_max_threads=1, quota_max_items=0)
    try:
        with Client(side.address, namespace="d") as c:
            q = c.retention.quota()
            assert not q.own and q.quota.max_threads == 1 and q.quota.max_bytes == 0
            c.create_thread("one")
            with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_threads"):
                c.create_thread("two")
            r = c.retention.set_quota(max_threads=5)  # its own; the unset fields stay the defaults
            assert r.own and r.quota.max_threads == 5
            c.create_thread("two")
            r = c.retention.set_quota(clear=True)
            assert not r.own and r.quota.max_threads == 1 and r.usage.threads == 2
    finally:
        side.close()


def test_set_quota_needs_a_quota(local, c):
    from agentstate.v1 import retention_pb2 as tpb
    before = digest(local)
    with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "quota"):
        c._call(c.retention.stub.SetQuota, tpb.SetQuotaRequest(namespace=c.namespace), None)
    assert digest(local) == before


def test_retention_max_bytes_reads_the_counter(local, c):
    """A retention byte limit is checked against the thread's charged bytes (no scan); prune mode removes
    whole-value checkpoints until the thread is under it."""
    c.put_checkpoint("r", {"n": 0})
    c.retention.set_policy("r", max_bytes=30_000, on_limit="prune")
    for i in range(10):
        c.put_checkpoint("r", {"n": i, "blob": os.urandom(5000).hex()})
        assert used(c, "r").thread_usage.bytes <= 30_000
    assert 2 <= len(list(c.list_checkpoints("r"))) < 10
    recount_clean(local)


# ----------------------------------------------------------------- counters equal a recount

ops = st.lists(st.tuples(st.sampled_from(["put", "delta", "keep", "rewrite", "writes", "prune", "delete",
                                           "fork", "items", "pop", "memory", "forget", "purge", "clear"]),
                         st.integers(0, 1), st.integers(0, 5)), min_size=5, max_size=40)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(ops)
def test_counters_equal_a_recount_after_random_writes_and_deletes(local, c, seq):
    pool = [os.urandom(400).hex() for _ in range(6)]
    for op, t, k in seq:
        tid = f"t{t}"
        existing = [x.checkpoint_id for x in c.list_checkpoints(tid)] if _exists(c, tid) else []
        if op == "put" or (not existing and op in ("delta", "keep", "rewrite", "writes")):
            c.put_checkpoint(tid, {"v": pool[k], "m": [pool[k][:50]]})
        elif op == "delta":
            base = existing[-1]
            c.put_checkpoint(tid, {"m": Append([pool[k][:80]]), "v": Keep()}, base_id=base, parent_id=base)
        elif op == "keep":
            base = existing[k % len(existing)]
            c.put_checkpoint(tid, {"v": Keep(), "m": [k]}, base_id=base, parent_id=base)
        elif op == "rewrite":
            c.put_checkpoint(tid, {"v": pool[(k + 1) % 6], "m": [k]}, checkpoint_id=existing[k % len(existing)])
        elif op == "writes":
            c.put_writes(tid, existing[k % len(existing)], [(f"task{k}", 0, "ch", pool[k][:100])])
        elif op == "prune" and existing:
            c.prune([tid], keep_latest=1 + k % 3)
        elif op == "delete":
            c.delete_thread(tid, allow_missing=True)
        elif op == "fork" and existing and not _exists(c, f"t{(t + 1) % 2}"):
            c.copy_thread(tid, f"t{(t + 1) % 2}")
        elif op == "items":  # k 5: content over INLINE_MAX, stored as a node
            content = pool[k] * 3 if k == 5 else pool[k][:30 * (k + 1)]
            c.conversations.append(tid, [item("message", content, role="user")], create_thread=True)
        elif op == "clear" and _exists(c, tid):
            c.conversations.clear(tid)
        elif op == "pop" and _exists(c, tid):
            c.conversations.pop(tid)
        elif op == "memory":
            c.memory.put(["m", tid], f"k{k % 3}", {"v": pool[k][:20 * (k + 1)]})  # replaces change the size
        elif op == "forget":  # the item goes, its versions stay charged as history
            c.memory.delete(["m", tid], f"k{k}")
        elif op == "purge":  # the item and its history go: refunded
            c.memory.delete(["m", tid], f"k{k % 3}", purge=True)
        r = recount_clean(local)
        got = used(c).usage
        want = r.namespaces.get(c.namespace, layout.UsageRec(1, 0, 0, 0, 0))
        assert (got.bytes, got.threads, got.items, got.checkpoints) == (want.nbytes, want.threads, want.items,
                                                                        want.checkpoints), op
    for t in range(2):
        c.delete_thread(f"t{t}", allow_missing=True)
    for t in range(2):
        for k in range(6):
            c.memory.delete(["m", f"t{t}"], f"k{k}", purge=True)
    assert zero(used(c).usage)  # everything deleted (history purged): everything refunded


def _exists(c, tid: str) -> bool:
    try:
        c.get_thread(tid)
        return True
    except Exception:
        return False


# ----------------------------------------------------------------- old stores, restarts, verify

def test_a_store_without_counters_gets_them_on_open_and_verify_checks_them(tmp_path):
    from sidecar.storage import verify
    side = InProcess(tmp_path)
    try:
        with Client(side.address, namespace="old") as c:
            cid = c.put_checkpoint("t", {"v": "x" * 2000, "m": ["a", "b"]}).checkpoint.checkpoint_id
            c.put_checkpoint("t", {"m": Append(["c"])}, base_id=cid, parent_id=cid)
            c.put_writes("t", cid, [("task", 0, "w", "y" * 300)])
            c.conversations.append("t2", [item("message", "hi", role="user")], create_thread=True)
            c.memory.put(["p"], "k", {"a": 1})
            kept = c.retention.quota().usage
    finally:
        side.close()
    env = lmdb.open(str(tmp_path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:  # as a store written before the counters: no tables, no marker
        for name in ("usage", "ckcharge", "wcharge", "quotas", "icharge"):
            txn.drop(env.open_db(name.encode(), txn=txn), delete=True)
        txn.delete(b"usage", db=env.open_db(b"meta", txn=txn))
    env.close()
    assert verify.verify_path(str(tmp_path)).clean  # nothing to check yet: not damage
    store = Store(str(tmp_path))
    try:
        with store.read() as txn:
            assert usage.recount(txn, store).problems == []
            u = usage.namespace(txn, store, "old")
        assert (u.threads, u.items, u.checkpoints) == (kept.threads, kept.items, kept.checkpoints)
        assert u.nbytes > 2000
    finally:
        store.close()
    assert verify.verify_path(str(tmp_path)).clean
    # a counter changed behind the store's back is found by verify
    env = lmdb.open(str(tmp_path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:
        db = env.open_db(b"usage", txn=txn)
        rec = layout.usage_decoder.decode(txn.get(layout.ns_usage_key("old"), db=db))
        rec.items += 1
        txn.put(layout.ns_usage_key("old"), layout.encode(rec), db=db)
    env.close()
    report = verify.verify_path(str(tmp_path))
    assert not report.clean and any(d.table == "usage" and "old" in d.problem for d in report.damaged)


def test_a_store_with_version_1_counters_gets_item_bytes_on_open(tmp_path):
    """Version 1 of the counters charged conversation and memory items no bytes: such a store (marker b"1",
    no icharge rows, namespace counters without item bytes) is rebuilt on open, and verify leaves it alone
    until then (its counters are not damage, only older)."""
    from sidecar.storage import verify
    side = InProcess(tmp_path)
    try:
        with Client(side.address, namespace="v1") as c:
            c.put_checkpoint("t", {"v": "x" * 500})
            c.conversations.append("t", [item("message", "y" * 3000, role="user"), item("message", "hi")])
            c.memory.put(["p"], "k", {"a": "z" * 40})
            want = c.retention.quota().usage
    finally:
        side.close()
    conv_mem = len(enc("y" * 3000)) + len(enc("hi")) + len(enc({"a": "z" * 40}))
    env = lmdb.open(str(tmp_path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"icharge", txn=txn), delete=False)
        db = env.open_db(b"usage", txn=txn)
        rec = layout.usage_decoder.decode(txn.get(layout.ns_usage_key("v1"), db=db))
        rec.nbytes -= conv_mem
        txn.put(layout.ns_usage_key("v1"), layout.encode(rec), db=db)
        txn.put(b"usage", b"1", db=env.open_db(b"meta", txn=txn))
    env.close()
    assert verify.verify_path(str(tmp_path)).clean
    store = Store(str(tmp_path))
    try:
        with store.read() as txn:
            assert store.env.begin(db=store.db["meta"]).get(b"usage") == usage.VERSION
            assert usage.recount(txn, store).problems == []
            u = usage.namespace(txn, store, "v1")
        assert (u.nbytes, u.threads, u.items, u.checkpoints) == (want.bytes, want.threads, want.items,
                                                                 want.checkpoints)
    finally:
        store.close()
    assert verify.verify_path(str(tmp_path)).clean


def test_verify_finds_a_missing_item_charge_row(tmp_path):
    from sidecar.storage import verify
    side = InProcess(tmp_path)
    try:
        with Client(side.address, namespace="m") as c:
            c.memory.put(["p"], "k", {"a": 1})
    finally:
        side.close()
    assert verify.verify_path(str(tmp_path)).clean
    env = lmdb.open(str(tmp_path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"icharge", txn=txn), delete=False)
    env.close()
    report = verify.verify_path(str(tmp_path))
    assert any(d.table == "usage" and "memory items and their charge rows differ" in d.problem
               for d in report.damaged)


def test_check_integrity_recounts_the_counters_as_verify_does(local, c):
    """AdminService.CheckIntegrity runs storage/verify.verify over the serving store, usage recount included."""
    c.conversations.append("t", [item("message", "hi", role="user")], create_thread=True)
    assert not [p for p in c.check_integrity().problems if p.startswith("usage")]
    store = local.sidecar.store
    key = layout.ns_usage_key(c.namespace)

    def shift(by: int):
        def fn(txn):
            rec = layout.usage_decoder.decode(txn.get(key, db=store.db["usage"]))
            rec.nbytes += by
            txn.put(key, layout.encode(rec), db=store.db["usage"])
        return fn

    store.write(shift(5))
    try:
        problems = [p for p in c.check_integrity().problems if p.startswith("usage")]
        assert len(problems) == 1 and repr(c.namespace) in problems[0] and "!= recount" in problems[0]
    finally:
        store.write(shift(-5))
    assert not [p for p in c.check_integrity().problems if p.startswith("usage")]
    c.delete_thread("t")
    recount_clean(local)


def test_counters_and_quotas_survive_a_restart(tmp_path):
    side = InProcess(tmp_path)
    try:
        with Client(side.address, namespace="r") as c:
            c.put_checkpoint("t", {"v": "x" * 3000})
            c.retention.set_quota(max_threads=1)
            before = c.retention.quota().usage
    finally:
        side.close()
    side = InProcess(tmp_path)
    try:
        with Client(side.address, namespace="r") as c:
            q = c.retention.quota()
            assert q.usage == before and q.quota.max_threads == 1
            with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", quota="max_threads"):
                c.create_thread("u")
    finally:
        side.close()


def test_retention_sweeps_idle_deletes_and_reclaims_refund(tmp_path):
    from sidecar.state import checkpoints as ckpt_mod, threads as threads_mod
    from sidecar.storage import records as records_mod
    side = InProcess(tmp_path)
    side.clock.now = 1_900_000_000_000_000
    saved = [(m, m.now_us) for m in (ckpt_mod, records_mod, threads_mod)]
    for m, _ in saved:
        m.now_us = side.clock  # checkpoints and threads stamped by the test's clock
    side.sidecar.sweeper.retention_interval = 0
    try:
        with Client(side.address, namespace="sw") as c:
            for i in range(5):
                side.clock.advance(1)
                c.put_checkpoint("k", {"n": i, "v": os.urandom(500).hex()})
            c.put_checkpoint("idle", {"n": 0})
            c.conversations.append("idle", [item("message", "hi", role="user")])
            c.artifacts.upload("idle", "f", b"x" * 100)
            full = used(c).usage
            c.retention.set_policy("k", keep_last=2)
            r = c.retention.apply("k")
            assert r.removed_checkpoints == 3
            u = used(c).usage
            assert u.checkpoints == full.checkpoints - 3 and full.bytes - u.bytes >= 3 * 1000
            c.retention.clear_policy("k")  # (a thread's own policy replaces its namespace's)
            c.retention.set_policy(delete_idle_thread_after=60)
            side.clock.advance(120)
            assert list(c.retention.apply().deleted_thread_ids) == ["idle", "k"]
            assert zero(used(c).usage)
            side.sweep()  # the deleted threads' contents reclaimed: nothing more to refund
            assert zero(used(c).usage)
            store = side.sidecar.store
            with store.read() as txn:
                assert usage.recount(txn, store).problems == []
    finally:
        for m, fn in saved:
            m.now_us = fn
        side.close()


# ----------------------------------------------------------------- memory history

def _history_store(tmp_path, ns: str):
    """A store whose namespace ``ns`` holds a memory item with two old versions and a deleted item's history;
    returns (usage, the old versions' bytes)."""
    side = InProcess(tmp_path)
    try:
        with Client(side.address, namespace=ns) as c:
            c.memory.put(["p"], "k", {"a": "x" * 50})
            c.memory.put(["p"], "k", {"a": "y" * 70})
            c.memory.put(["p"], "k", {"a": "z" * 10})
            c.memory.put(["p"], "gone", {"b": "w" * 30})
            c.memory.delete(["p"], "gone")
            u = c.retention.quota().usage
    finally:
        side.close()
    hist = len(enc({"a": "x" * 50})) + len(enc({"a": "y" * 70})) + len(enc({"b": "w" * 30}))
    assert u.bytes == hist + len(enc({"a": "z" * 10})) and u.items == 1
    return u, hist


def test_a_store_with_version_2_counters_gets_its_history_charged_on_open(tmp_path):
    """Version 2 of the counters did not charge memory history: such a store (marker b"2", no b"h" rows,
    namespace counters without history bytes) is rebuilt on open and comes out exact; verify leaves it alone
    until then."""
    from sidecar.storage import verify
    want, hist = _history_store(tmp_path, "h2")
    env = lmdb.open(str(tmp_path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:
        db = env.open_db(b"icharge", txn=txn)
        rows = [bytes(k) for k in txn.cursor(db=db).iternext(values=False) if bytes(k[:1]) == b"h"]
        assert len(rows) == 3
        for k in rows:
            txn.delete(k, db=db)
        udb = env.open_db(b"usage", txn=txn)
        rec = layout.usage_decoder.decode(txn.get(layout.ns_usage_key("h2"), db=udb))
        rec.nbytes -= hist
        txn.put(layout.ns_usage_key("h2"), layout.encode(rec), db=udb)
        txn.put(b"usage", b"2", db=env.open_db(b"meta", txn=txn))
    env.close()
    assert verify.verify_path(str(tmp_path)).clean  # older counters: not damage
    store = Store(str(tmp_path))
    try:
        assert store.env.begin(db=store.db["meta"]).get(b"usage") == usage.VERSION
        with store.read() as txn:
            assert usage.recount(txn, store).problems == []
            u = usage.namespace(txn, store, "h2")
        assert (u.nbytes, u.items) == (want.bytes, want.items)
    finally:
        store.close()
    assert verify.verify_path(str(tmp_path)).clean


def test_verify_finds_history_charges_missing_or_uncounted(tmp_path):
    from sidecar.storage import verify
    _, hist = _history_store(tmp_path, "hv")
    assert verify.verify_path(str(tmp_path)).clean
    env = lmdb.open(str(tmp_path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:  # the counter without the history's bytes (as before the change)
        udb = env.open_db(b"usage", txn=txn)
        rec = layout.usage_decoder.decode(txn.get(layout.ns_usage_key("hv"), db=udb))
        rec.nbytes -= hist
        txn.put(layout.ns_usage_key("hv"), layout.encode(rec), db=udb)
    env.close()
    report = verify.verify_path(str(tmp_path))
    problems = [d.problem for d in report.damaged if d.table == "usage"]
    assert len(problems) == 1 and "'hv'" in problems[0] and f"counter bytes={rec.nbytes} " in problems[0] \
        and f"recount bytes={rec.nbytes + hist} " in problems[0], problems
    env = lmdb.open(str(tmp_path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:  # and one old version's charge row gone with it
        db = env.open_db(b"icharge", txn=txn)
        k, v = next((bytes(k), bytes(v)) for k, v in txn.cursor(db=db) if bytes(k[:1]) == b"h")
        txn.delete(k, db=db)
        udb = env.open_db(b"usage", txn=txn)
        rec.nbytes += hist - layout.read_u64(v)  # the counter agrees with the rows left
        txn.put(layout.ns_usage_key("hv"), layout.encode(rec), db=udb)
    env.close()
    problems = [d.problem for d in verify.verify_path(str(tmp_path)).damaged if d.table == "usage"]
    assert any("memory history and its charge rows differ (1 old versions without a row" in p for p in problems)


def test_purging_history_refunds_exactly_and_deleting_does_not(local, c):
    c.memory.put(["p"], "k", {"a": "x" * 40})
    c.memory.put(["p"], "k", {"a": "x" * 40})  # the same value again: a second version, charged again
    assert used(c).usage.bytes == 2 * len(enc({"a": "x" * 40}))
    c.memory.delete(["p"], "k")
    assert used(c).usage.bytes == 2 * len(enc({"a": "x" * 40})) and used(c).usage.items == 0
    c.memory.put(["p"], "k", {"a": "q"})  # re-created after a delete: its old versions stay history
    assert used(c).usage.bytes == 2 * len(enc({"a": "x" * 40})) + len(enc({"a": "q"}))
    recount_clean(local)
    c.memory.delete(["p"], "k", purge=True)
    assert zero(used(c).usage)
    recount_clean(local)


# ----------------------------------------------------------------- counters version 2 (one charge row each)

def _as_version_2(path) -> None:
    """Rewrite a store as counters version 2 kept it: each checkpoint's charge in a ``ckcharge`` row (a ChargeRec
    of whole ckpts keys) and each pending write's in a ``wcharge`` row (u64), the manifests and write records
    without the charge field, the marker b"2"."""
    env = lmdb.open(str(path), max_dbs=len(layout.DB_NAMES) + 8)
    with env.begin(write=True) as txn:
        db = {n: env.open_db(n.encode(), txn=txn) for n in ("ckpts", "writes", "ckcharge", "wcharge", "meta")}
        for key, raw in list(txn.cursor(db=db["ckpts"])):
            m = layout.manifest_decoder.decode(raw)
            if m.charge is not None:
                txn.put(key, layout.encode(usage._unpack(bytes(key), m)), db=db["ckcharge"])
            txn.put(key, layout.encode(list(msgspec.structs.astuple(m))[:-1]), db=db["ckpts"])
        for key, raw in list(txn.cursor(db=db["writes"])):
            w = layout.write_decoder.decode(raw)
            assert w.charge >= 0
            txn.put(key, layout.u64(w.charge), db=db["wcharge"])
            txn.put(key, layout.encode([2, w.channel, w.value, w.task_path, w.run_id]), db=db["writes"])
        txn.put(b"usage", b"2", db=db["meta"])
    env.close()


def _tables(path, names=("ckpts", "writes", "usage", "ckcharge", "wcharge")) -> dict:
    env = lmdb.open(str(path), max_dbs=len(layout.DB_NAMES) + 8, readonly=True, lock=False)
    with env.begin() as txn:
        out = {n: {bytes(k): bytes(v) for k, v in txn.cursor(db=env.open_db(n.encode(), txn=txn))} for n in names}
    env.close()
    return out


def test_a_store_with_version_2_charge_rows_is_moved_on_open_and_refunds_exactly(tmp_path):
    """A store of counters version 2 (a ``ckcharge`` row per checkpoint, a ``wcharge`` row per pending write) has
    its rows moved into the manifests and write records on open, byte for byte what this version writes, and
    every later refund (a prune that moves charges to the checkpoints built on the pruned ones, a fork's base
    deleted, writes with their checkpoint, a whole thread) is the same as on the store never converted."""
    from sidecar.storage import verify
    side = InProcess(tmp_path / "a")
    try:
        with Client(side.address, namespace="v2") as c:
            cid = c.put_checkpoint("t", {"v": "x" * 2000, "m": ["a", "b"]}).checkpoint.checkpoint_id
            ids = [cid]
            for i in range(4):  # a chain of deltas, each built on the one before
                ids.append(c.put_checkpoint("t", {"m": Append([f"c{i}" * 50])}, base_id=ids[-1],
                                            parent_id=ids[-1]).checkpoint.checkpoint_id)
            # a fork: two more checkpoints built on the second one (its charge has three dependents)
            for j in range(2):
                c.put_checkpoint("t", {"m": Append([f"f{j}" * 40])}, base_id=ids[1], parent_id=ids[1])
            sub = c.put_checkpoint("t", {"m": ["s"]}, checkpoint_ns="sub").checkpoint.checkpoint_id
            c.put_checkpoint("t", {"m": Append(["n"])}, base_id=sub, parent_id=ids[0], checkpoint_ns="sub")
            for i, k in enumerate(ids):
                c.put_writes("t", k, [("task", 0, "w", "y" * (100 + i)), ("task", 1, "w2", {"z": i})])
            c.copy_thread("t", "t2")
            c.put_checkpoint("u", {"v": "q" * 700})
    finally:
        side.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    want = _tables(tmp_path / "a")
    _as_version_2(tmp_path / "b")
    old = _tables(tmp_path / "b")
    assert len(old["ckcharge"]) == len(want["ckpts"]) and len(old["wcharge"]) == len(want["writes"])
    assert old["usage"] == want["usage"]
    assert verify.verify_path(str(tmp_path / "b")).clean  # older counters, not damage
    store = Store(str(tmp_path / "b"))
    try:
        with store.read() as txn:
            assert txn.get(b"usage", db=store.db["meta"]) == usage.VERSION
            assert usage.recount(txn, store).problems == []
    finally:
        store.close()
    assert _tables(tmp_path / "b") == want  # the rows moved: the records and counters of this version exactly
    assert verify.verify_path(str(tmp_path / "b")).clean
    seen = {}
    for name in ("a", "b"):
        side = InProcess(tmp_path / name)
        steps = []
        try:
            with Client(side.address, namespace="v2") as c:
                steps.append(used(c, "t").thread_usage.bytes)
                assert c.prune(["t"], keep_latest=5, checkpoint_ns="") == 2  # ids[0], ids[1]: charges move
                steps.append((used(c, "t").thread_usage.bytes, used(c).usage.bytes))
                assert c.prune(["t"], keep_latest=1, checkpoint_ns="") == 4
                steps.append((used(c, "t").thread_usage.bytes, used(c).usage.bytes))
                store = side.sidecar.store
                with store.read() as txn:
                    assert usage.recount(txn, store).problems == []
                c.delete_thread("t")
                steps.append(used(c).usage.bytes)
                c.prune(["t2"], keep_latest=2)
                steps.append(used(c).usage.bytes)
                c.delete_thread("t2")
                c.delete_thread("u")
                assert zero(used(c).usage)
                with store.read() as txn:
                    assert usage.recount(txn, store).problems == []
        finally:
            side.close()
        seen[name] = steps
    assert seen["a"] == seen["b"]
    assert seen["a"][0] > seen["a"][1][0] > seen["a"][2][0] > 0  # (each prune refunded something)


def test_verify_finds_a_checkpoint_or_write_without_its_charge_and_leftover_version_2_rows(tmp_path):
    from sidecar.storage import verify
    side = InProcess(tmp_path)
    try:
        with Client(side.address, namespace="d") as c:
            cid = c.put_checkpoint("t", {"v": "x" * 300}).checkpoint.checkpoint_id
            c.put_checkpoint("t", {"v": "y"}, base_id=cid, parent_id=cid)
            c.put_writes("t", cid, [("task", 0, "w", "z" * 40)])
    finally:
        side.close()
    assert verify.verify_path(str(tmp_path)).clean

    def damage(fn) -> list[str]:
        shutil.copytree(tmp_path, tmp_path.parent / "damaged", dirs_exist_ok=True)
        env = lmdb.open(str(tmp_path.parent / "damaged"), max_dbs=len(layout.DB_NAMES) + 8)
        with env.begin(write=True) as txn:
            fn(txn, lambda n: env.open_db(n.encode(), txn=txn))
        env.close()
        out = [d.problem for d in verify.verify_path(str(tmp_path.parent / "damaged")).damaged if d.table == "usage"]
        shutil.rmtree(tmp_path.parent / "damaged")
        return out

    def strip_checkpoint(txn, db):
        key, raw = next(iter(txn.cursor(db=db("ckpts"))))
        txn.put(key, layout.encode(msgspec.structs.replace(layout.manifest_decoder.decode(raw), charge=None)),
                db=db("ckpts"))

    def strip_write(txn, db):
        key, raw = next(iter(txn.cursor(db=db("writes"))))
        txn.put(key, layout.encode(msgspec.structs.replace(layout.write_decoder.decode(raw), charge=-1)),
                db=db("writes"))

    def leftover(txn, db):
        txn.put(b"k", layout.u64(1), db=db("wcharge"))

    assert any("checkpoints without a charge" in p for p in damage(strip_checkpoint))
    assert any("pending writes without a charge" in p for p in damage(strip_write))
    assert any("wcharge: rows of counters version 2 left" in p for p in damage(leftover))


def test_an_eager_conversation_migration_recharges_the_new_sizes(local, c):
    from agentstate import schemas as s
    c.schemas.register("m", [[], [s.add("lang", "en")], [s.rename("text", "body"), s.drop("extra")]])

    def msg(value, version):
        out = item("message", value, role="user")
        out.schema, out.schema_version = "m", version
        return out

    grow, shrink, big = {"text": "a"}, {"text": "b", "extra": "e" * 200}, {"text": "x" * 3000}
    c.conversations.append("t", [msg(grow, 1), msg(big, 1), msg({"text": "c"}, 1), msg(shrink, 2)],
                           create_thread=True)
    have = used(c).usage
    assert have.bytes == len(enc(grow)) + len(enc(shrink)) + len(enc(big)) + len(enc({"text": "c"}))
    # room for the first item's growth only: the two after it that grow are refused and left alone (the last
    # one shrinks)
    grown = len(enc({"body": "a", "lang": "en"})) - len(enc(grow))
    c.retention.set_quota(max_bytes=have.bytes + grown + 1)
    last = list(c.schemas.migrate_thread("t", "m", batch_size=1))[-1]
    assert (last.conversation_items_migrated, last.conversation_items_failed) == (2, 2)
    assert [f.item_seq for f in last.failures] == [2, 3] and all("QUOTA" in f.error or "quota" in f.error
                                                                 for f in last.failures)
    want = len(enc({"body": "a", "lang": "en"})) + len(enc({"body": "b"})) + len(enc(big)) + len(enc({"text": "c"}))
    assert used(c).usage.bytes == want and used(c).usage.items == have.items
    recount_clean(local)
    c.retention.set_quota(max_bytes=0)
    last = list(c.schemas.migrate_thread("t", "m"))[-1]
    assert (last.conversation_items_migrated, last.conversation_items_current) == (2, 2)
    want += len(enc({"body": "x" * 3000, "lang": "en"})) - len(enc(big)) + len(enc({"body": "c", "lang": "en"})) \
        - len(enc({"text": "c"}))
    assert used(c).usage.bytes == want
    recount_clean(local)
    c.delete_thread("t")
    assert used(c).usage.bytes == 0


class _Txn:
    """A dict standing in for a write transaction's ckpts table (get/put by key)."""

    def __init__(self, data):
        self.data = dict(data)

    def get(self, key, db=None):
        return self.data.get(key)

    def put(self, key, value, db=None):
        self.data[key] = bytes(value)


class _Db:
    db = {"ckpts": "ckpts"}


_U1, _U2, _U3 = (str(uuid.UUID(int=i * 0x1234567)) for i in (1, 2, 3))


@pytest.mark.parametrize("charge_base", [None, True, "parent", "other", "text-id", _U3])
@pytest.mark.parametrize("deps", [[], ["u2"], ["u2", "text-dep"], [_U2], ["é"]])
@pytest.mark.parametrize("new_id", [_U1, "plain-id", "é-id"])
def test_add_dep_writes_what_the_round_trip_wrote(charge_base, deps, new_id):
    """A put on a base notes itself in the base's charge: the bytes are those of the unpack/append/pack round
    trip (_save of _unpack + key) for every form a charge can be stored in (packed UUIDs, plain ids, a
    base stored as the parent's id instead of True, an unpacked UUID string)."""
    parent = layout.pack_id(_U3)
    pack = {"parent": parent, "other": layout.pack_id(_U2), "u2": layout.pack_id(_U2)}
    c = layout.CkCharge(7, pack.get(charge_base, charge_base), [pack.get(d, d) for d in deps])
    m = layout.Manifest(layout.FORMAT_VERSION, parent, 5, msgspec.Raw(b"\x80"), [], None, 0, None, "", c)
    base = layout.ckpt_key(9, "ns", "base-id")
    key = layout.ckpt_key(9, "ns", new_id)
    start = {base: layout.encode(m)}
    fast = _Txn(start)
    assert usage._add_dep(fast, _Db(), base, key)
    slow = _Txn(start)
    got = layout.manifest_decoder.decode(slow.data[base])
    rec = usage._unpack(base, got)
    rec.deps.append(key)
    usage._save(slow, _Db(), base, rec, got)
    assert fast.data == slow.data
    assert layout.manifest_decoder.decode(fast.data[base]).charge.deps[-1] == layout.pack_id(new_id)


def test_add_dep_without_a_charge():
    m = layout.Manifest(layout.FORMAT_VERSION, "", 5, msgspec.Raw(b"\x80"), [], None, 0, None, "", None)
    base = layout.ckpt_key(9, "", "b")
    txn = _Txn({base: layout.encode(m)})
    assert not usage._add_dep(txn, _Db(), base, layout.ckpt_key(9, "", "k"))
    assert not usage._add_dep(txn, _Db(), layout.ckpt_key(9, "", "missing"), layout.ckpt_key(9, "", "k"))
    assert txn.data == {base: layout.encode(m)}
