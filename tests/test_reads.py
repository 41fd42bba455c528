"""The read path's response building (sidecar/storage/reads.py): both twins, against the message built
item by item as GetCheckpoint built it before, the subtree cache (storage/wirecache.py), damage."""
from __future__ import annotations

import datetime as dt
import importlib
import uuid

import grpc
import pytest

from agentstate import codec
from agentstate.codec import Opaque
from agentstate.v1 import values_pb2
from sidecar.api import wire
from sidecar.storage import _hotpath_py as hpy
from sidecar.storage import compression, hotpath as hp, reads, wirecache


@pytest.fixture(params=["native", "python"])
def rimpl(request):
    if request.param == "native":
        return importlib.import_module("sidecar.storage._reads_c")  # ImportError = not built: a failure
    return importlib.import_module("sidecar.storage._reads_py")


@pytest.fixture(autouse=True)
def _fresh_caches():
    compression.forget_cache()
    yield
    compression.forget_cache()


class Records:
    """id -> record (hash + stored node) as the server keeps them; ``pack`` stores value nodes compressed."""

    def __init__(self, pack=None) -> None:
        self.records: dict[bytes, bytes] = {}
        self.ids: dict[bytes, bytes] = {}
        self.pack = pack
        self.log: list[bytes] = []

    def add(self, nodes) -> "Records":
        for h, node in nodes:
            if h not in self.ids:
                node_id = (len(self.records) + 1).to_bytes(8, "big")
                stored = hpy.stored_node(node, self.ids.__getitem__)
                if self.pack is not None and stored[:1] == b"v":
                    stored = self.pack(h, stored)
                self.records[node_id] = h + stored
                self.ids[h] = node_id
        return self

    def fetch(self, node_id: bytes):
        self.log.append(node_id)
        return self.records.get(node_id)

    def record(self, h: bytes) -> bytes:
        return self.records[self.ids[h]]


def store_list(encodings, pack=None) -> tuple[Records, bytes]:
    nodes: list = []
    root = hpy.build_list(encodings, nodes)
    recs = Records(pack).add(nodes)
    return recs, recs.record(root)


def item_by_item(rec: bytes, fetch) -> values_pb2.Value:
    """The Value as GetCheckpoint filled it before storage/reads.py: one items.add() per item."""
    out = values_pb2.Value()
    out.list.SetInParent()
    for enc in hp.stored_list_encodings(rec, fetch):
        wire.set_value(out.list.items.add(), enc)
    return out


def messages(n: int, seed: int = 0) -> list[bytes]:
    return [codec.encode({"role": "user" if i % 2 else "assistant", "content": f"message {seed}/{i} " * (1 + i % 23)})
            for i in range(n)]


MIXED = [codec.encode(v) for v in [
    1, -7, 1.5, "x", "", None, True, [], {}, [1, [2, [3]]], {"a": {"b": [1, 2]}},
    dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc), uuid.UUID(int=5), {1, 2, 3}, 2**80, b"\x00\xff" * 40,
    Opaque("pkg.Type", b"payload"), Opaque("t", b""), Opaque("x" * 200, b"y" * 300), "é" * 70]]


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 200, 1600])
def test_list_wire_is_the_message_built_item_by_item(rimpl, n):
    recs, rec = store_list(messages(n))
    want = item_by_item(rec, recs.fetch)
    got = rimpl.list_wire(rec, recs.fetch)
    assert got == want.list.SerializeToString()
    v = values_pb2.Value()
    v.list.SetInParent()
    v.list.MergeFromString(got)
    assert v == want
    assert rimpl.list_wire(rec, recs.fetch) == got  # again, from the cache


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 17, 200, 1603])
def test_list_wire_parts_join_to_list_wire(n):
    """list_wire_parts: one part per peak of the root, then the tail items' entries; joined, list_wire's
    bytes; the same parts from both twins, cold and cached; a cached peak is the cache's own object."""
    c, py = importlib.import_module("sidecar.storage._reads_c"), importlib.import_module("sidecar.storage._reads_py")
    recs, rec = store_list(messages(n))
    want = item_by_item(rec, recs.fetch).list.SerializeToString()
    results = []
    for impl in (c, py, c, py):
        compression.forget_cache()
        cold = impl.list_wire_parts(rec, recs.fetch)
        cached = impl.list_wire_parts(rec, recs.fetch)
        assert all(type(p) is bytes for p in cold + cached)
        assert len(cold) == bin(n // 8).count("1") + (1 if n % 8 else 0)
        assert b"".join(cold) == want and impl.list_wire(rec, recs.fetch) == want
        peaks = [r[:32] for r in (recs.records[rec[41 + 8 * i:49 + 8 * i]] for i in range(bin(n // 8).count("1")))]
        assert all(part is wirecache.cache[h] for part, h in zip(cached, peaks))
        results.append((cold, cached))
    assert all(r == results[0] for r in results)


def test_list_wire_parts_damage_is_reported_as_list_wire_reports_it(rimpl):
    recs, rec = store_list(messages(40))
    item_id = next(i for i, r in recs.records.items() if r[32:33] == b"v")
    records = {k: v for k, v in recs.records.items() if k != item_id}
    outs = []
    for fn in (rimpl.list_wire, rimpl.list_wire_parts):
        compression.forget_cache()
        outs.append(_outcome(lambda: fn(rec, records.get)))
    assert outs[0] == outs[1] and outs[0][:2] == ("error", "CorruptNode")


@pytest.mark.parametrize("pack", [False, True])
def test_every_kind_of_item_and_both_twins_agree(pack):
    c, py = importlib.import_module("sidecar.storage._reads_c"), importlib.import_module("sidecar.storage._reads_py")
    packer = compression.Packer(lambda: (None, []), lambda did, data: None) if pack else None
    encs = (MIXED * 5)[:97] + [codec.encode("z" * 100_000)]  # the last one chunked
    recs, rec = store_list(encs, packer.pack if packer else None)
    if pack:
        assert any(r[32:33] == b"z" for r in recs.records.values())
    want = item_by_item(rec, recs.fetch).list.SerializeToString()
    assert any(v.WhichOneof("kind") == "opaque" for v in item_by_item(rec, recs.fetch).list.items)
    results = []
    for impl in (c, py, c, py):  # cold and cached, either twin first
        compression.forget_cache()
        results.append(impl.list_wire(rec, recs.fetch))
        results.append(impl.list_wire(rec, recs.fetch))
    assert set(results) == {want}


def test_a_cached_list_is_read_from_its_peaks(rimpl):
    recs, rec = store_list(messages(1600))
    first = rimpl.list_wire(rec, recs.fetch)
    assert len(recs.log) == len(recs.records) - 1  # every record below the root, once
    recs.log.clear()
    assert rimpl.list_wire(rec, recs.fetch) == first
    assert len(recs.log) == bin(1600 // 8).count("1")  # one fetch per peak (1024 + 512 + 64 items)
    entries, _ = wirecache.size()
    assert entries == 200 + 3  # every leaf and every peak


def test_an_appended_list_reuses_the_cached_subtrees(rimpl):
    encs = messages(1603)
    recs, rec = store_list(encs[:1600])
    rimpl.list_wire(rec, recs.fetch)
    nodes: list = []
    root = hpy.build_list(encs, nodes)
    recs.add(nodes)
    recs.log.clear()
    rec2 = recs.record(root)
    got = rimpl.list_wire(rec2, recs.fetch)
    assert len(recs.log) == 3 + 3  # the 3 peaks (cached) and the 3 tail items
    assert got == item_by_item(rec2, recs.fetch).list.SerializeToString()


def test_subtrees_with_a_chunked_item_are_not_cached(rimpl):
    encs = messages(16)
    encs[3] = codec.encode("q" * 100_000)
    recs, rec = store_list(encs)
    assert rimpl.list_wire(rec, recs.fetch) == item_by_item(rec, recs.fetch).list.SerializeToString()
    leaves = [r[:32] for r in recs.records.values() if r[32:33] == b"l"]
    assert len(leaves) == 2
    cached = [h in wirecache.cache for h in leaves]
    assert sorted(cached) == [False, True]  # the leaf holding the chunked item is not cached, the other is
    # and neither is the peak above them (its subtree holds the chunked item)
    inner = [r[:32] for r in recs.records.values() if r[32:33] == b"n"]
    assert inner and not any(h in wirecache.cache for h in inner)


def test_forget_cache_empties_the_wire_cache(rimpl):
    recs, rec = store_list(messages(64))
    rimpl.list_wire(rec, recs.fetch)
    assert wirecache.size()[0] > 0
    compression.forget_cache()
    assert wirecache.size() == (0, 0)


def test_the_cache_is_bounded(monkeypatch, rimpl):
    monkeypatch.setattr(wirecache, "CACHE_BYTES", 64 * 1024)
    recs, rec = store_list(messages(1600))
    rimpl.list_wire(rec, recs.fetch)
    entries, size = wirecache.size()
    assert 0 < size <= 64 * 1024
    assert rimpl.list_wire(rec, recs.fetch) == item_by_item(rec, recs.fetch).list.SerializeToString()


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))


def test_damage_is_reported_alike_by_both_twins():
    c, py = importlib.import_module("sidecar.storage._reads_c"), importlib.import_module("sidecar.storage._reads_py")
    recs, rec = store_list(messages(40))
    leaf_id = next(i for i, r in recs.records.items() if r[32:33] == b"l")
    item_id = next(i for i, r in recs.records.items() if r[32:33] == b"v")
    cases = {
        "short root": (rec[:20], recs.records),
        "not a root": (rec[:32] + b"l" + rec[33:], recs.records),
        "root length": (rec + b"\x00", recs.records),
        "missing leaf": (rec, {k: v for k, v in recs.records.items() if k != leaf_id}),
        "bad leaf": (rec, {**recs.records, leaf_id: recs.records[leaf_id][:40]}),
        "missing item": (rec, {k: v for k, v in recs.records.items() if k != item_id}),
        "short item": (rec, {**recs.records, item_id: recs.records[item_id][:32]}),
        "not a value": (rec, {**recs.records, item_id: recs.records[item_id][:32] + b"L" + bytes(8)}),
    }
    for name, (root, records) in cases.items():
        outs = []
        for impl in (c, py):
            compression.forget_cache()
            outs.append(_outcome(lambda: impl.list_wire(root, records.get)))
        assert outs[0] == outs[1], name
        assert outs[0][0] == "error" and outs[0][1] == "CorruptNode", (name, outs[0])


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 17, 65, 200])
def test_items_wire_is_list_wire_of_the_stored_list_of_those_items(rimpl, n):
    encs = (MIXED * 11)[:n] if n < 100 else messages(n)
    recs, rec = store_list(encs)
    want = item_by_item(rec, recs.fetch).list.SerializeToString()
    assert rimpl.items_wire(encs) == want == rimpl.list_wire(rec, recs.fetch)
    assert rimpl.items_wire(iter([memoryview(e) for e in encs])) == want  # any iterable, any buffer


def test_items_wire_twins_agree_on_every_kind_of_item():
    c, py = importlib.import_module("sidecar.storage._reads_c"), importlib.import_module("sidecar.storage._reads_py")
    encs = MIXED + [codec.encode("z" * 100_000), b"", b"\xd4\x06\x00", b"\xc7\x03\x06\xa1t"]
    for k in range(len(encs) + 1):
        assert c.items_wire(encs[:k]) == py.items_wire(encs[:k])
    # fixed vectors: items (field 1) of Values holding msgpack (field 1) or an opaque's type and data (field 2)
    assert py.items_wire([b"\x01", b"\xa1x"]) == bytes.fromhex("0a030a01010a040a02a178")
    opaque = codec.encode(Opaque("t", b"d"))
    assert py.items_wire([opaque]) == b"\x0a\x08\x12\x06\x0a\x01t\x12\x01d" == c.items_wire([opaque])


def test_memoryview_records_read_the_same(rimpl):
    recs, rec = store_list(messages(100))
    want = item_by_item(rec, recs.fetch).list.SerializeToString()
    assert rimpl.list_wire(memoryview(rec), lambda i: memoryview(recs.records[i])) == want


def test_the_selector(monkeypatch):
    import os
    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert reads.implementation.__name__ == "sidecar.storage._reads_py" and reads.NATIVE is False
    else:
        assert reads.implementation.__name__ == "sidecar.storage._reads_c" and reads.NATIVE is True


# ----------------------------------------------------------------- GetCheckpoint's serialized response

def _drive(coro):
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the handler suspended")


def test_get_wire_parses_to_the_response_get_builds(tmp_path):
    """The servicer answers with checkpoints.get_wire's bytes: list values spliced in as built. Parsed,
    they are get()'s message, for every kind of request."""
    from conftest import SidecarProcess

    from agentstate import Append, SetKeys
    from agentstate.v1 import threads_pb2 as pb
    from sidecar.api import checkpoints
    from sidecar.storage.store import Store

    side = SidecarProcess(tmp_path / "d").start()
    try:
        with side.client() as c:
            first = c.put_checkpoint("t", {"messages": [codec.decode(e) for e in messages(20)],
                                           "empty": [], "mixed": [codec.decode(e) for e in MIXED],
                                           "m": {"a": 1, "b": [1, 2]}, "s": "scalar"},
                                     metadata={"step": 1}, extra={"x": 1})
            second = c.put_checkpoint("t", {"messages": Append([{"role": "user", "content": "more"}]),
                                            "m": SetKeys({"c": 3})}, parent_id=first.checkpoint.checkpoint_id)
            c.put_writes("t", second.checkpoint.checkpoint_id, [("task", 0, "messages", [1, 2]), ("task", 1, "s", "w")])
            roots = {n: cv.root for n, cv in c.get_checkpoint("t", first.checkpoint.checkpoint_id).channels.items()}
    finally:
        side.stop()
    store = Store(str(tmp_path / "d"))
    try:
        requests = [
            pb.GetCheckpointRequest(thread_id="t"),
            pb.GetCheckpointRequest(thread_id="t", checkpoint_id=first.checkpoint.checkpoint_id),
            pb.GetCheckpointRequest(thread_id="t", channels=["messages", "s"]),
            pb.GetCheckpointRequest(thread_id="t", omit_values=True),
            pb.GetCheckpointRequest(thread_id="t", include_pending_writes=True),
            pb.GetCheckpointRequest(thread_id="t", known_roots={"messages": roots["messages"], "m": roots["m"]}),
            pb.GetCheckpointRequest(thread_id="t", known_roots={"empty": roots["empty"]}),
        ]
        for req in requests:
            want = _drive(checkpoints.get(store, req))
            got = _drive(checkpoints.get_wire(store, req))
            assert type(got) is bytes
            assert pb.GetCheckpointResponse.FromString(got) == want, req
            assert pb.GetCheckpointResponse.FromString(got).SerializeToString(deterministic=True) == \
                want.SerializeToString(deterministic=True)
        full = pb.GetCheckpointResponse.FromString(_drive(checkpoints.get_wire(store, requests[0])))
        assert len(full.checkpoint.channels["messages"].value.list.items) == 21
    finally:
        store.close()


def test_get_values_scans_the_lists_as_received(tmp_path):
    """Client.get_values: the lists found in the response as received (agentstate.values.response_lists)
    decode as the parsed message does; the values are what was put, in either build."""
    from conftest import SidecarProcess

    from agentstate import Append, Keep, values as client_values
    from agentstate.client import checkpoint_values
    from agentstate.v1 import threads_pb2 as pb

    msgs = [codec.decode(e) for e in messages(203)]
    mixed = [codec.decode(e) for e in MIXED]
    side = SidecarProcess(tmp_path / "d").start()
    try:
        with side.client() as c:
            first = c.put_checkpoint("t", {"messages": msgs[:200], "empty": [], "mixed": mixed, "one": ["x"],
                                           "m": {"a": 1, "b": [1, 2]}, "s": "scalar"})
            c.put_checkpoint("t", {"messages": Append(msgs[200:]), **{k: Keep() for k in ("empty", "mixed", "one", "m", "s")}},
                             parent_id=first.checkpoint.checkpoint_id, base_id=first.checkpoint.checkpoint_id)
            want = {"messages": msgs, "empty": [], "mixed": mixed, "one": ["x"], "m": {"a": 1, "b": [1, 2]},
                    "s": "scalar"}
            assert c.get_values("t") == want
            assert c.get_values("t", first.checkpoint.checkpoint_id)["messages"] == msgs[:200]
            async def aio_values():
                from agentstate import AsyncClient
                async with AsyncClient(side.address) as a:
                    return await a.get_values("t"), await a.get_values("t", first.checkpoint.checkpoint_id)

            import asyncio
            latest, older = asyncio.run(aio_values())
            assert latest == want and older["messages"] == msgs[:200]
            data = c.channel.unary_unary("/agentstate.v1.ThreadService/GetCheckpoint",
                                         request_serializer=pb.GetCheckpointRequest.SerializeToString)(
                pb.GetCheckpointRequest(namespace="default", thread_id="t"), timeout=30)
    finally:
        side.stop()
    found = client_values.response_lists(data)
    assert set(found) == {"messages", "empty", "mixed", "one"}
    ck = pb.GetCheckpointResponse.FromString(data).checkpoint
    assert checkpoint_values(ck, found) == checkpoint_values(ck) == want


# ----------------------------------------------------------------- whole answers kept (checkpoints.ANSWER_MIN)

def _big_messages(n: int, tag: str = "") -> list:
    return [{"role": "user" if i % 2 else "assistant", "content": f"{tag}{i} " + "w" * 400} for i in range(n)]


def test_a_kept_answer_is_the_answer_built_and_follows_the_checkpoint(tmp_path):
    """A big answer is kept and sent again only while the request resolves to the same checkpoint (id, etag,
    creation time); it is byte for byte the answer built without it; requests of other shapes never use it."""
    from conftest import SidecarProcess

    from agentstate import Append
    from agentstate.v1 import threads_pb2 as pb
    from sidecar.api import checkpoints
    from sidecar.storage.store import Store

    msgs = _big_messages(300)
    side = SidecarProcess(tmp_path / "d").start()
    try:
        with side.client() as c:
            first = c.put_checkpoint("t", {"messages": msgs[:200], "s": "x"}).checkpoint.checkpoint_id
            for _ in range(3):  # kept in the server, then the same again
                assert c.get_values("t") == {"messages": msgs[:200], "s": "x"}
            second = c.put_checkpoint("t", {"messages": Append(msgs[200:]), "s": "y"},
                                      parent_id=first, base_id=first).checkpoint.checkpoint_id
            for _ in range(2):
                assert c.get_values("t") == {"messages": msgs, "s": "y"}  # the new latest, not the kept one
            assert c.get_values("t", first) == {"messages": msgs[:200], "s": "x"}
            c.put_writes("t", second, [("task", 0, "s", "w")])
            ck = c.get_checkpoint("t", include_pending_writes=True)
            assert [w.channel for w in ck.pending_writes] == ["s"]
            roots = {n: cv.root for n, cv in c.get_checkpoint("t", first).channels.items()}
            c.delete_thread("t")
            with pytest.raises(Exception) as gone:
                c.get_checkpoint("t")
            assert gone.value.code.name == "NOT_FOUND"
            c.put_checkpoint("u", {"messages": msgs})
    finally:
        side.stop()
    store = Store(str(tmp_path / "d"))
    try:
        base = pb.GetCheckpointRequest(thread_id="u")
        compression.forget_cache()
        built = _drive(checkpoints.get_wire(store, base))
        again = _drive(checkpoints.get_wire(store, base))
        assert again is built and len(built) >= checkpoints.ANSWER_MIN  # kept, and sent as it is
        compression.forget_cache()  # forgotten (as at a restart): built again, the same bytes
        rebuilt = _drive(checkpoints.get_wire(store, base))
        assert rebuilt is not built and rebuilt == built
        assert pb.GetCheckpointResponse.FromString(built) == _drive(checkpoints.get(store, base))
        others = [pb.GetCheckpointRequest(thread_id="u", channels=["messages"]),
                  pb.GetCheckpointRequest(thread_id="u", known_roots={"messages": roots["messages"]}),
                  pb.GetCheckpointRequest(thread_id="u", include_pending_writes=True),
                  pb.GetCheckpointRequest(thread_id="u", omit_values=True),
                  pb.GetCheckpointRequest(thread_id="u", read_schema_version=1)]
        for req in others:
            got = _drive(checkpoints.get_wire(store, req))
            assert got is not built
            assert pb.GetCheckpointResponse.FromString(got) == _drive(checkpoints.get(store, req)), req
        kept = _drive(checkpoints.get_wire(store, others[0]))
        assert _drive(checkpoints.get_wire(store, others[0])) is kept  # named channels: kept under their names
        for req in others[1:]:
            assert _drive(checkpoints.get_wire(store, req)) is not _drive(checkpoints.get_wire(store, req))
    finally:
        store.close()


def test_kept_answers_are_bounded(tmp_path, monkeypatch):
    from conftest import SidecarProcess

    from agentstate.v1 import threads_pb2 as pb
    from sidecar.api import checkpoints
    from sidecar.storage.store import Store

    side = SidecarProcess(tmp_path / "d").start()
    try:
        with side.client() as c:
            for i in range(6):
                c.put_checkpoint(f"t{i}", {"messages": _big_messages(200, f"t{i}")})
    finally:
        side.stop()
    monkeypatch.setattr(checkpoints, "ANSWERS_BYTES", 3 * 100_000)
    store = Store(str(tmp_path / "d"))
    try:
        compression.forget_cache()
        answers = [_drive(checkpoints.get_wire(store, pb.GetCheckpointRequest(thread_id=f"t{i}"))) for i in range(6)]
        assert all(100_000 > len(a) >= checkpoints.ANSWER_MIN for a in answers)
        kept = checkpoints._answers[store]
        assert 0 < kept.size <= checkpoints.ANSWERS_BYTES and kept.size == sum(len(a) for _, a in kept.entries.values())
        assert _drive(checkpoints.get_wire(store, pb.GetCheckpointRequest(thread_id="t5"))) is answers[5]  # newest
        assert _drive(checkpoints.get_wire(store, pb.GetCheckpointRequest(thread_id="t0"))) is not answers[0]
    finally:
        store.close()


def test_answers_of_an_encrypted_namespace_are_never_kept(tmp_path):
    """A namespace with a key is read from its sealed records every time: once the key is removed (SIGHUP),
    its reads fail, however often the same checkpoint was read before."""
    import base64
    import os

    from conftest import SidecarProcess, expect_error

    keys = tmp_path / "keys.toml"
    keys.write_text("".join(f'[[key]]\nnamespace = "{ns}"\nid = "k1"\nkey = "{base64.b64encode(os.urandom(32)).decode()}"\n\n'
                            for ns in ("sec", "default")))
    keys.chmod(0o600)
    msgs = _big_messages(300)
    side = SidecarProcess(tmp_path / "d", "--encryption-keys", str(keys)).start()
    try:
        with side.client(namespace="sec") as c, side.client(namespace="open") as o, \
                side.client(namespace="") as d:  # "": the default namespace, as the server reads it
            for client in (c, o, d):
                client.put_checkpoint("t", {"messages": msgs})
            for _ in range(3):
                assert c.get_values("t") == {"messages": msgs} == o.get_values("t") == d.get_values("t")
            keys.write_text("")
            side.reload_keys()
            for _ in range(2):
                with expect_error(grpc.StatusCode.FAILED_PRECONDITION, "ENCRYPTION_KEY_MISSING", namespace="sec"):
                    c.get_checkpoint("t")
                with expect_error(grpc.StatusCode.FAILED_PRECONDITION, "ENCRYPTION_KEY_MISSING", namespace="default"):
                    d.get_checkpoint("t")
            assert o.get_values("t") == {"messages": msgs}
    finally:
        side.stop()
