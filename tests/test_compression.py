"""Value nodes stored zstd-compressed (sidecar/storage/compression.py): exact reads, same hashes, the dictionary's life."""
from __future__ import annotations

import asyncio
import os
import random

import pytest
import zstandard

from agentstate import codec
from agentstate.v1 import threads_pb2 as pb
from sidecar.storage import compression, gc
from sidecar.api import checkpoints
from sidecar.storage import hotpath as hp
from sidecar.storage.store import Store

from conftest import store_values as read

H = hp.HASH_SIZE
WORDS = ("agent tool call result the of and message state graph checkpoint thread user assistant reply price "
         "item order mail sent retry step run value list map when then with from into").split()


def sentence(rnd: random.Random, n: int = 600) -> str:
    out = []
    while sum(map(len, out)) < n:
        out.append(rnd.choice(WORDS))
    return " ".join(out)


def message(rnd: random.Random, i: int) -> dict:
    return {"type": "ai" if i % 2 else "human", "id": f"msg-{i:06d}", "content": sentence(rnd),
            "additional_kwargs": {}, "response_metadata": {"model": "some-model", "finish": "stop"}}


def run(coro):
    return asyncio.run(coro)


def put(store: Store, thread_id: str, channels: dict, **kw) -> pb.PutCheckpointResponse:
    req = pb.PutCheckpointRequest(thread_id=thread_id, **kw)
    for name, v in channels.items():
        if isinstance(v, list):
            req.channels[name].value.list.SetInParent()
            for item in v:
                req.channels[name].value.list.items.add().msgpack = codec.encode(item)
        else:
            req.channels[name].value.msgpack = codec.encode(v)
    return run(checkpoints.put(store, req))


def records(store: Store) -> list[tuple[bytes, bytes]]:
    with store.read() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=store.db["nodes"])]


def tags(store: Store) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, rec in records(store):
        t = chr(rec[H])
        out[t] = out.get(t, 0) + 1
    return out


def forget_dictionaries() -> None:
    """As a new process would start: no dictionary registered, no decompressor, an empty read cache."""
    compression._dicts.clear()
    compression._local.__dict__.clear()
    compression.forget_cache()


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "data"))
    yield s
    s.close()


def test_values_are_stored_compressed_read_back_exactly_and_keep_their_hashes(tmp_path):
    rnd = random.Random(1)
    msgs = [message(rnd, i) for i in range(20)]
    doc = {"title": sentence(rnd, 80), "body": sentence(rnd, 3000)}  # a map: one node per entry
    note = sentence(rnd, 2000)  # one value node
    roots = {}
    for compress in (True, False):
        s = Store(str(tmp_path / f"c{compress}"), compress=compress)
        try:
            resp = put(s, "t", {"messages": msgs, "doc": doc, "note": note}, checkpoint_id="c1")
            roots[compress] = {n: cv.root for n, cv in resp.checkpoint.channels.items()}
            assert read(s, "t") == {"messages": msgs, "doc": doc, "note": note}
            kinds = tags(s)
            if compress:
                assert kinds.get("z") == 23 and "v" not in kinds, kinds
            else:
                assert kinds.get("v") == 23 and "z" not in kinds, kinds
            report = gc.check_integrity(s)  # every record's hash is checked against its canonical node
            assert report["problems"] == [] and report["missing_blobs"] == 0
        finally:
            s.close()
    # compression is invisible to content addressing: the same roots either way
    assert roots[True] == roots[False]
    assert roots[True]["note"] == hp.hash_bytes(b"v" + codec.encode(note))


def test_small_and_incompressible_values_are_stored_as_they_are(store):
    small = "x" * 20  # under compression.MIN_SIZE with its tag
    noise = os.urandom(4000)  # a zstd frame of it is larger than the value
    put(store, "t", {"a": small, "b": noise})
    assert read(store, "t") == {"a": small, "b": noise}
    assert tags(store) == {"v": 2}


def test_a_dictionary_is_trained_stored_and_used_and_a_reopened_store_reads_everything(tmp_path):
    path = str(tmp_path / "data")
    rnd = random.Random(2)
    s = Store(path)
    try:
        history = []
        n = 0
        while s.packer.trainer is None:  # values until the samples are enough to train on
            history += [message(rnd, n), message(rnd, n + 1)]
            n += 2
            put(s, "t", {"messages": history}, checkpoint_id=f"c{n:06d}")
            assert n < 1000, "no dictionary was trained"
        s.packer.trainer.join(30)
        did = s.packer.current[0]
        assert did != compression.NO_DICT
        with s.read() as txn:
            meta = s.db["meta"]
            assert bytes(txn.get(compression.META_CURRENT, db=meta)) == did
            data = bytes(txn.get(compression.META_PREFIX + did, db=meta))
        assert compression.dict_id(data) == did and len(data) <= compression.DICT_SIZE
        before = {k for k, _ in records(s)}
        for _ in range(20):
            history += [message(rnd, n)]
            n += 1
            put(s, "t", {"messages": history}, checkpoint_id=f"c{n:06d}")
        new = [rec for k, rec in records(s) if k not in before and rec[H] == compression.TAG_PACKED]
        assert len(new) == 20 and all(rec[H + 1:H + 9] == did for rec in new)
        # the dictionary pays: each new message is stored in well under half its encoding
        enc = len(codec.encode(history[-1]))
        assert max(len(rec) - H for rec in new) < enc / 2, (max(len(rec) - H for rec in new), enc)
        early = [rec for k, rec in records(s) if rec[H] == compression.TAG_PACKED and rec[H + 1:H + 9] != did]
        assert early, "the values written before the dictionary were compressed without one"
        assert all(rec[H + 1:H + 9] == compression.NO_DICT for rec in early)
    finally:
        s.close()
    forget_dictionaries()
    s = Store(path)  # loads the stored dictionary: no new training, everything reads
    try:
        assert s.packer.current[0] == did and s.packer.trainer is None
        assert read(s, "t")["messages"] == history
        assert read(s, "t", "c000004")["messages"] == history[:4]
        assert gc.check_integrity(s)["problems"] == []
    finally:
        s.close()


def test_process_durability_stores_the_dictionary_before_any_node_names_it(tmp_path):
    path = str(tmp_path / "data")
    rnd = random.Random(3)
    s = Store(path, durability="process")
    try:
        n = 0
        while s.packer.trainer is None:
            put(s, "t", {"m": message(rnd, n)}, checkpoint_id=f"c{n:06d}")
            n += 1
        s.packer.trainer.join(30)
        did = s.packer.current[0]
        assert did != compression.NO_DICT
        assert not any(rec[H + 1:H + 9] == did for _, rec in records(s))
        last = message(rnd, n)
        put(s, "t", {"m": last}, checkpoint_id=f"c{n:06d}")
        assert any(rec[H] == compression.TAG_PACKED and rec[H + 1:H + 9] == did for _, rec in records(s))
    finally:
        s.close()
    forget_dictionaries()
    s = Store(path, durability="process")
    try:
        assert s.packer.current[0] == did
        assert read(s, "t")["m"] == last
        assert read(s, "t", "c000000")["m"]["id"] == "msg-000000"
        assert gc.check_integrity(s)["problems"] == []
    finally:
        s.close()


def test_a_store_written_without_compression_reads_and_then_compresses(tmp_path):
    path = str(tmp_path / "data")
    rnd = random.Random(4)
    msgs = [message(rnd, i) for i in range(10)]
    s = Store(path, compress=False)
    try:
        put(s, "t", {"messages": msgs}, checkpoint_id="c1")
    finally:
        s.close()
    s = Store(path)
    try:
        assert read(s, "t") == {"messages": msgs}
        more = msgs + [message(rnd, 10)]
        put(s, "t", {"messages": more}, checkpoint_id="c2")
        assert tags(s)["v"] == 10 and tags(s)["z"] == 1
        assert read(s, "t") == {"messages": more} and read(s, "t", "c1") == {"messages": msgs}
    finally:
        s.close()


def test_a_damaged_compressed_node_is_corrupt_and_the_integrity_check_names_it(store):
    rnd = random.Random(5)
    put(store, "t", {"m": message(rnd, 0)})
    (node_id, rec), = [(k, r) for k, r in records(store) if r[H] == compression.TAG_PACKED]
    damaged = rec[:-5]  # a torn frame
    store.write(lambda txn: txn.put(node_id, damaged, db=store.db["nodes"]))
    assert read(store, "t")["m"]["id"] == "msg-000000"  # the read cache still holds what was written
    compression.forget_cache()  # as after a restart: the damage shows
    with pytest.raises(hp.CorruptNode):
        read(store, "t")
    problems = gc.check_integrity(store)["problems"]
    assert len(problems) == 2 and node_id.hex() in problems[0]  # the node, and the checkpoint it damages
    assert problems[1].startswith("checkpoint default/t//") and node_id.hex() in problems[1]


def test_after_a_run_of_incompressible_values_compression_is_tried_now_and_then_until_it_pays_again():
    packer = compression.Packer(lambda: (None, []), lambda did, data: None)
    noise = [b"v" + codec.encode(os.urandom(1000)) for _ in range(compression.GIVE_UP_AFTER + 1)]
    text = [b"v" + codec.encode(sentence(random.Random(i), 800)) for i in range(2 * compression.TRY_EVERY)]
    assert all(packer.pack(bytes(32), v) == v for v in noise)  # the last one was still tried (and missed)
    out = [packer.pack(bytes(32), v) for v in text]
    # not tried until the next TRY_EVERY-th value; from the first that compresses on, all are tried again
    first = next(i for i, o in enumerate(out) if o[:1] == b"z")
    assert 0 < first < compression.TRY_EVERY
    assert all(o == v for o, v in zip(out[:first], text)) and all(o[:1] == b"z" for o in out[first:])
    assert all(compression.unpack(o) == v[1:] for o, v in zip(out[first:], text[first:]))


def test_the_read_cache_is_filled_on_write_and_read_and_stays_within_its_budget(store, monkeypatch):
    rnd = random.Random(6)
    msgs = [message(rnd, i) for i in range(30)]
    compression.forget_cache()
    put(store, "t", {"messages": msgs})
    packed = [rec for _, rec in records(store) if rec[H] == compression.TAG_PACKED]
    assert len(packed) == 30 and all(compression._cache.get(rec[:H]) is not None for rec in packed)
    compression.forget_cache()
    assert read(store, "t")["messages"] == msgs  # unpacked from disk, and remembered
    assert all(compression.unpack(rec[H:]) == compression._cache[rec[:H]] for rec in packed)
    monkeypatch.setattr(compression, "CACHE_BYTES", 5 * (700 + compression._ENTRY_COST))
    compression.forget_cache()
    assert read(store, "t")["messages"] == msgs
    assert 0 < len(compression._cache) <= 5 and compression._cache_bytes <= compression.CACHE_BYTES
    # the newest entries stay: the last items read
    assert set(compression._cache) == {rec[:H] for rec in packed[-len(compression._cache):]}


def test_packed_records_in_both_twins(impl):
    enc = codec.encode({"content": "the same words again and again " * 20})
    cctx = zstandard.ZstdCompressor(level=compression.LEVEL, write_checksum=False)
    stored = b"z" + compression.NO_DICT + cctx.compress(enc)
    record = hp.hash_bytes(b"v" + enc) + stored
    assert impl.stored_encoding(record, None) == enc
    assert impl.canonical_node(stored, None) == b"v" + enc
    assert impl.stored_children(stored) == []
    # ``z`` exists only in the stored form: no canonical node has it
    for fn in (impl.children, lambda n: impl.stored_node(n, None)):
        with pytest.raises(hp.CorruptNode, match="unknown node tag 0x7a"):
            fn(stored)
    with pytest.raises(hp.CorruptNode, match="compressed node length mismatch"):
        impl.stored_children(b"z\x00")
    # a list whose items are packed reads item by item like any other
    ids = {b"%08d" % i: record for i in range(3)}
    nodes: list = []
    root = impl.build_list([enc] * 3, nodes)
    built = dict(nodes)
    item_hash = hp.hash_bytes(b"v" + enc)
    stored_root = impl.stored_node(built[root], lambda h: b"%08d" % 0 if h == item_hash else None)
    assert impl.stored_list_encodings(root + stored_root, ids.get) == [enc] * 3
    other = codec.encode("another value, never cached " * 4)
    unknown = b"z" + b"\x01" * compression.ID_SIZE + cctx.compress(other)
    with pytest.raises(hp.CorruptNode, match="unknown dictionary"):
        impl.stored_encoding(hp.hash_bytes(b"v" + other) + unknown, None)
    with pytest.raises(hp.CorruptNode, match="does not unpack"):
        impl.canonical_node(stored[:-4], None)
    # a header claiming more than a value node can hold is refused before anything is allocated
    assert compression.MAX_ENCODING == impl.CHUNK_THRESHOLD
    huge = b"z" + compression.NO_DICT + cctx.compress(b"\x00" * (compression.MAX_ENCODING + 1))
    with pytest.raises(hp.CorruptNode, match="claims 32769 bytes"):
        impl.stored_encoding(hp.hash_bytes(b"v") + huge, None)
