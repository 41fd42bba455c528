"""Large item content in the node store (docs/conversations.md "LMDB layout"): content whose canonical
encoding is over state.conversations.INLINE_MAX bytes is stored as a value node — read back byte for
byte by every read, shared by equal contents, kept by the collector while an item refers to it and
reclaimed after pop, clear and idle expiry, and checked by verify."""
from __future__ import annotations

import random

import lmdb
import pytest

from agentstate import Client, codec
from agentstate.conversations import item, item_value
from conftest import InProcess

from sidecar.state import conversations
from sidecar.storage import hotpath as hp
from sidecar.storage import layout, verify

_rng = random.Random(12)
BIG = "\n".join(" ".join(f"{_rng.getrandbits(40):010x}" for _ in range(8)) for _ in range(120))  # ~10 KiB
BIG_MAP = {"output": BIG, "rows": [{"i": i, "v": f"value {i}" * 3} for i in range(100)]}


@pytest.fixture
def local(tmp_path):
    side = InProcess(tmp_path / "data")
    with Client(side.address) as client:
        side.client = client
        yield side
    side.close()


def item_recs(side, thread_id):
    store = side.sidecar.store
    with store.read() as txn:
        tkey = store_tkey(side, thread_id)
        return [(layout.split_seq_key(k)[1], layout.item_decoder.decode(v))
                for k, v in txn.cursor(db=store.db["citems"]) if k.startswith(layout.tkey_prefix(tkey))]


def store_tkey(side, thread_id, ns="default"):
    from sidecar.storage import records
    store = side.sidecar.store
    with store.read() as txn:
        return records.thread(txn, store, ns, thread_id).tkey


def node_bytes(side) -> int:
    store = side.sidecar.store
    with store.read() as txn:
        return sum(len(v) for _, v in txn.cursor(db=store.db["nodes"]))


def test_big_content_is_a_node_and_every_read_returns_it_byte_for_byte(local):
    c = local.client
    small = "s" * (conversations.INLINE_MAX - 3)  # str header 3 bytes: exactly INLINE_MAX encoded
    assert len(codec.encode(small)) == conversations.INLINE_MAX
    over = small + "!"
    c.conversations.append("t", [item("message", small, role="user"), item("message", over, role="user"),
                                 item("tool_call", {"arguments": "{}"}, call_id="c1", tool_name="dump"),
                                 item("tool_result", BIG_MAP, call_id="c1", client_item_id="r1"),
                                 item("message", BIG, role="assistant")], create_thread=True)
    recs = dict(item_recs(local, "t"))
    assert recs[1].node is None and recs[1].inline == codec.encode(small)  # at the threshold: inline
    for seq in (2, 4, 5):
        assert recs[seq].node is not None and recs[seq].inline == b""
    want = {1: small, 2: over, 4: BIG_MAP, 5: BIG}
    listed = {it.seq: it for it in c.conversations.list("t")}
    for seq, v in want.items():
        assert listed[seq].content.msgpack == codec.encode(v)  # the canonical bytes, as sent
        assert item_value(listed[seq]) == v
        # the content hash is the store's value hash, the same whether inline or a node
        assert listed[seq].content_hash == hp.value_node(codec.encode(v), [])
    by_id = c.conversations.get("t", client_item_ids=["r1"])
    assert by_id.items[0].content.msgpack == codec.encode(BIG_MAP)
    ctx = c.conversations.get_context("t", 100_000, keep_last_items=10)
    assert [i.content.msgpack for i in ctx.items][-1] == codec.encode(BIG)
    popped = c.conversations.pop("t")
    assert popped.seq == 5 and popped.content.msgpack == codec.encode(BIG)


def test_equal_big_contents_are_stored_once(local):
    c = local.client
    before = node_bytes(local)
    c.conversations.append("a", [item("tool_result", BIG, call_id="x")], create_thread=True)
    one = node_bytes(local) - before
    assert one > 1000  # the content went to the node store (compressed or not)
    c.conversations.append("a", [item("tool_result", BIG, call_id="y")])
    c.conversations.append("b", [item("message", BIG, role="user")], create_thread=True)
    assert node_bytes(local) - before == one  # two more items with the same content: no new node bytes
    nodes = {r.node for _, r in item_recs(local, "a") + item_recs(local, "b")}
    assert len(nodes) == 1


def test_gc_keeps_referenced_item_nodes_and_reclaims_them_after_pop_clear_and_expiry(local):
    c = local.client
    gc = local.sidecar.collector
    gc.collect()
    base = node_bytes(local)
    c.conversations.append("keep", [item("message", BIG, role="user")], create_thread=True)
    c.conversations.append("clear", [item("message", BIG, role="user"), item("message", BIG + "x", role="user")],
                           create_thread=True)
    c.conversations.append("pop", [item("message", BIG + "popped", role="user")], create_thread=True)
    assert gc.collect().freed_blobs == 0  # everything is referenced
    assert c.conversations.latest("keep")[0].content.msgpack == codec.encode(BIG)
    assert gc._timer is None
    c.conversations.clear("clear")
    assert gc._timer is not None  # a clear that dropped item nodes nudges the collector
    gc.cancel()
    c.conversations.pop("pop")
    assert gc._timer is not None
    gc.cancel()
    freed = gc.collect()
    assert freed.freed_blobs >= 2  # BIG + "x" and the popped one; BIG is still "keep"'s
    assert c.conversations.latest("keep")[0].content.msgpack == codec.encode(BIG)
    c.conversations.set_idle_policy(ttl=60, action="delete")
    c.conversations.append("keep", [])
    local.clock.advance(61)
    assert local.sweep().get("deleted", 0) >= 1
    assert gc._timer is not None  # the reclaim nudged it
    gc.cancel()
    gc.collect()
    assert node_bytes(local) == base  # nothing of the conversations is left


def test_verify_names_an_item_whose_content_node_is_damaged(tmp_path):
    side = InProcess(tmp_path / "data")
    try:
        with Client(side.address) as c:
            c.conversations.append("v", [item("message", "small", role="user"),
                                         item("message", BIG, role="user")], create_thread=True)
        node = dict(item_recs(side, "v"))[2].node
        tkey = store_tkey(side, "v")
    finally:
        side.close()
    data = str(tmp_path / "data")
    assert verify.verify_path(data).clean
    env = lmdb.open(data, max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    try:
        nodes_db = env.open_db(b"nodes")
        with env.begin(write=True) as txn:
            rec = bytearray(txn.get(node, db=nodes_db))
            rec[-5] ^= 0xFF  # a byte of the stored content (compressed or not)
            txn.put(node, bytes(rec), db=nodes_db)
    finally:
        env.close()
    report = verify.verify_path(data)
    assert not report.clean
    assert ("nodes", node.hex()) in [(d.table, d.key) for d in report.damaged]
    items = [d for d in report.damaged if d.table == "citems"]
    assert [d.key for d in items] == [layout.seq_key(tkey, 2).hex()] and items[0].problem.startswith("reaches damaged")
