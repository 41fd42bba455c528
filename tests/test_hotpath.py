"""The write path, both implementations: golden vectors, properties, and compiled == pure Python.

Tests taking the ``impl`` fixture run once against ``sidecar.storage._hotpath_c`` (the
compiled module; the test fails if it is not built) and once against
``sidecar.storage._hotpath_py`` (the pure-Python twin). The golden vectors in
tests/golden/ were generated from the twin by tests/golden/generate.py and are
only ever read here.

Trees are built in canonical form and read back the way the server reads
them: as records (hash + stored node) under 8-byte ids, through
``stored_*`` functions and a ``fetch(id)`` callback (``Records`` below).
"""
from __future__ import annotations

import datetime as dt
import decimal
import importlib.util
import json
import math
import uuid
from pathlib import Path

import msgspec
import pytest
from blake3 import blake3
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentstate import codec

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"

_spec = importlib.util.spec_from_file_location("golden_generate", GOLDEN / "generate.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

VALUES = json.loads((GOLDEN / "values.json").read_text())
TREES = json.loads((GOLDEN / "trees.json").read_text())

Ext = msgspec.msgpack.Ext
# The impl fixture hands out a module (no state), so sharing it between examples is fine.
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                         HealthCheck.function_scoped_fixture])


def _py():
    return importlib.import_module("sidecar.storage._hotpath_py")


def _c():
    return importlib.import_module("sidecar.storage._hotpath_c")


def outcome(fn, *args):
    """("ok", result) or ("error", type name, reason, path) — comparable across implementations."""
    try:
        return ("ok", fn(*args))
    except codec.UnsupportedValue as e:
        return ("error", "UnsupportedValue", e.reason, e.path)
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__)


def store_of(nodes) -> dict:
    return dict(nodes)


class Records:
    """A tiny in-memory node store as the server keeps it: id -> record (hash + stored node).

    ``add`` translates canonical nodes with ``impl.stored_node`` in the order
    the builders emit them (children before parents) and gives each new node
    the next id, so every child has a smaller id than its parent. A node
    whose children are not stored yet cannot be added (KeyError).
    """

    def __init__(self, impl) -> None:
        self.impl = impl
        self.records: dict[bytes, bytes] = {}
        self.ids: dict[bytes, bytes] = {}  # hash -> id
        self.fetch = self.records.__getitem__

    def add(self, nodes) -> "Records":
        for h, node in nodes:
            if h not in self.ids:
                node_id = (len(self.records) + 1).to_bytes(8, "big")
                self.records[node_id] = h + self.impl.stored_node(node, self.ids.__getitem__)
                self.ids[h] = node_id
        return self

    def record(self, h: bytes) -> bytes:
        return self.records[self.ids[h]]

    def hash_of(self, node_id: bytes) -> bytes:
        return self.records[node_id][:32]

    def encoding(self, node_id: bytes) -> bytes:
        return self.impl.stored_encoding(self.fetch(node_id), self.fetch)

    def list_encodings(self, root: bytes) -> list[bytes]:
        return self.impl.stored_list_encodings(self.record(root), self.fetch)

    def map_items(self, root: bytes) -> list[tuple[str, bytes]]:
        """(key, value encoding) pairs of the map with root hash ``root``."""
        return [(k, self.encoding(i)) for k, i in self.impl.stored_map_entries(self.record(root), self.fetch)]


# ================================================================== golden vectors

def _encoding_matches(entry, enc: bytes) -> bool:
    if "encoding" in entry:
        return enc.hex() == entry["encoding"]
    return len(enc) == entry["encoding_length"] and blake3(enc).hexdigest() == entry["encoding_blake3"]


def test_golden_files_are_current_format():
    from sidecar.storage import layout
    assert VALUES["format"] == layout.FORMAT_NAME
    assert TREES["format"] == layout.FORMAT_NAME
    assert len(VALUES["values"]) > 150 and len(VALUES["errors"]) > 30


@pytest.mark.parametrize("entry", VALUES["values"], ids=lambda e: e["name"])
def test_golden_value(impl, entry):
    value = golden.from_desc(entry["value"])
    enc = impl.encode(value)
    assert _encoding_matches(entry, enc)
    assert impl.canonicalize(enc) == enc  # canonical bytes are a fixed point
    nodes: list = []
    assert impl.value_node(enc, nodes).hex() == entry["hash"]
    assert golden.nodes_digest(nodes) == entry["nodes"]
    records = Records(impl).add(nodes)
    assert impl.stored_encoding(records.record(bytes.fromhex(entry["hash"])), records.fetch) == enc


@pytest.mark.parametrize("entry", VALUES["errors"], ids=lambda e: e["name"])
def test_golden_error(impl, entry):
    value = golden.from_desc(entry["value"])
    with pytest.raises(codec.UnsupportedValue) as info:
        impl.encode(value)
    assert type(info.value) is codec.UnsupportedValue
    assert entry["error"] == {"type": "UnsupportedValue", "reason": info.value.reason, "path": info.value.path}


@pytest.mark.parametrize("entry", VALUES["canonicalize"], ids=lambda e: e["name"])
def test_golden_canonicalize(impl, entry):
    data = bytes.fromhex(entry["input"])
    if "canonical" in entry:
        assert impl.canonicalize(data).hex() == entry["canonical"]
        # the canonical form is canonical
        assert impl.canonicalize(bytes.fromhex(entry["canonical"])).hex() == entry["canonical"]
    else:
        assert outcome(impl.canonicalize, data) == ("error", "UnsupportedValue", entry["error"]["reason"],
                                                    entry["error"]["path"])


@pytest.mark.parametrize("entry", VALUES["decompose"], ids=lambda e: e["name"])
def test_golden_decompose(impl, entry):
    data = bytes.fromhex(entry["input"])
    if "error" in entry:
        assert outcome(impl.decompose, data) == ("error", "UnsupportedValue", entry["error"]["reason"],
                                                 entry["error"]["path"])
        return
    kind, payload = impl.decompose(data)
    assert kind == entry["kind"]
    if kind == impl.KIND_SCALAR:
        assert payload.hex() == entry["payload"]
    elif kind == impl.KIND_LIST:
        assert [e.hex() for e in payload] == entry["payload"]
    else:
        assert [[k, e.hex()] for k, e in payload] == entry["payload"]


@pytest.mark.parametrize("entry", VALUES["opaque_parts"], ids=lambda e: e["input"][:16] or "empty")
def test_golden_opaque_parts(impl, entry):
    parts = impl.opaque_parts(bytes.fromhex(entry["input"]))
    assert (None if parts is None else [parts[0], parts[1].hex()]) == entry["parts"]


@pytest.mark.parametrize("entry", TREES["lists"], ids=lambda e: f"n={e['length']}")
def test_golden_list(impl, entry):
    n = entry["length"]
    encs = [golden.item_encoding(i) for i in range(n)]
    nodes: list = []
    root = impl.build_list(encs, nodes)
    assert root.hex() == entry["root"]
    assert len(nodes) == entry["node_count"]
    assert golden.nodes_digest(nodes) == entry["nodes"]
    store = store_of(nodes)
    assert impl.list_length(store[root]) == n
    records = Records(impl).add(nodes)
    assert impl.stored_list_length(records.record(root)) == n
    assert records.list_encodings(root) == encs
    ids = impl.stored_list_ids(records.record(root), records.fetch)
    assert [records.hash_of(i) for i in ids] == [impl.value_node(e, []) for e in encs]
    for pattern in golden.APPEND_PATTERNS:
        nodes2: list = []
        impl.list_append(None, [], nodes2)
        root_node = nodes2[-1][1]
        i = step = 0
        h = nodes2[-1][0]
        while i < n:
            k = pattern[step % len(pattern)]
            step += 1
            h = impl.build_list(encs[i:i + k], nodes2, root_node)
            root_node = nodes2[-1][1]
            i += k
        assert h.hex() == entry["appends"][",".join(map(str, pattern))] == entry["root"]
        # every intermediate root is stored too; the final one reads back whole
        assert Records(impl).add(nodes2).list_encodings(h) == encs


@pytest.mark.parametrize("entry", TREES["maps"], ids=lambda e: f"size={e['size']}")
def test_golden_map(impl, entry):
    pairs = golden.map_pairs(entry["size"])
    nodes: list = []
    root = impl.build_map(pairs, nodes)
    assert root.hex() == entry["root"]
    assert len(nodes) == entry["node_count"]
    assert golden.nodes_digest(nodes) == entry["nodes"]
    store = store_of(nodes)
    assert impl.map_count(store[root]) == entry["size"]
    assert Records(impl).add(nodes).map_items(root) == sorted(pairs, key=lambda p: p[0].encode())


@pytest.mark.parametrize("entry", TREES["map_updates"], ids=lambda e: e["name"])
def test_golden_map_update(impl, entry):
    nodes: list = []
    root = impl.build_map(golden.map_pairs(entry["base"]), nodes)
    store = store_of(nodes)
    value_nodes: list = []
    sets = [(k, impl.value_node(codec.encode(v), value_nodes)) for k, v in entry["sets"]]
    store.update(value_nodes)
    upd: list = []
    # fetch sees only what was stored before the update (as the server's LMDB read does)
    new_root = impl.map_update(root, sets, entry["deletes"], store.__getitem__, upd)
    assert new_root.hex() == entry["root"]
    assert golden.nodes_digest(upd) == entry["nodes"]
    # the same content built whole has the same root
    final = dict(golden.map_pairs(entry["base"]))
    for k in entry["deletes"]:
        final.pop(k, None)
    for k, v in entry["sets"]:
        final[k] = codec.encode(v)
    assert impl.build_map(sorted(final.items()), []) == new_root
    # read back from the store as the server has it after the update
    records = Records(impl).add(nodes).add(value_nodes).add(upd)
    assert records.map_items(new_root) == sorted(final.items(), key=lambda p: p[0].encode())


@pytest.mark.parametrize("entry", TREES["cdc"], ids=lambda e: e["seed"])
def test_golden_cdc(impl, entry):
    data = bytes(entry["length"]) if entry["seed"] == "zeros" else golden.pseudo_random(entry["seed"], entry["length"])
    assert impl.cdc_cut_points(data) == entry["cuts"]


def _chunked_value(name: str):
    return {
        "bytes 1MiB": lambda: golden.pseudo_random("chunked-bytes", 1 << 20),
        "str 100KiB": lambda: golden.pseudo_random("chunked-str", 75 * 1024).hex()[:100 * 1024],
        "bytes threshold+1": lambda: golden.pseudo_random("t1", 32 * 1024 - 2),
        "bytes at threshold": lambda: golden.pseudo_random("t0", 32 * 1024 - 3),
    }[name]()


@pytest.mark.parametrize("entry", TREES["chunked_values"], ids=lambda e: e["name"])
def test_golden_chunked_value(impl, entry):
    enc = impl.encode(_chunked_value(entry["name"]))
    assert len(enc) == entry["encoding_length"]
    assert impl.hash_bytes(enc).hex() == entry["encoding_blake3"]
    nodes: list = []
    h = impl.value_node(enc, nodes)
    assert h.hex() == entry["hash"]
    assert len(nodes) == entry["node_count"]
    assert golden.nodes_digest(nodes) == entry["nodes"]
    records = Records(impl).add(nodes)
    assert impl.stored_encoding(records.record(h), records.fetch) == enc
    if len(enc) > impl.CHUNK_THRESHOLD:
        assert records.record(h)[32] == impl.TAG_CHUNKED
        assert len(impl.stored_children(records.record(h)[32:])) == entry["node_count"] - 1


@pytest.mark.parametrize("entry", TREES["stored"], ids=lambda e: e["name"])
def test_golden_stored_records(impl, entry):
    """The stored form (ids, record layout) of trees written to a fresh store, and reading it back."""
    build = dict(golden.stored_cases())[entry["name"]]
    nodes: list = []
    root = build(impl, nodes)
    records = golden.stored_records(impl.stored_node, nodes)
    assert len(records) == entry["record_count"]
    assert golden.nodes_digest(records) == entry["records"]
    root_id, root_record = records[-1]
    assert (root_id.hex(), root_record.hex()) == (entry["root_id"], entry["root_record"])
    assert root_record[:32] == root
    store = dict(records)
    assert Records(impl).add(nodes).records == store  # the test store lays records out the same way
    tag = root_record[32]
    if tag == impl.TAG_LIST:
        n = int(entry["name"].split()[1])
        assert impl.stored_list_encodings(root_record, store.__getitem__) == [golden.item_encoding(i) for i in range(n)]
    elif tag in (impl.TAG_MAP, impl.TAG_MAP_INNER):
        n = int(entry["name"].split()[1])
        got = [(k, impl.stored_encoding(store[i], store.__getitem__))
               for k, i in impl.stored_map_entries(root_record, store.__getitem__)]
        assert got == golden.map_pairs(n)
    else:
        expect = {"chunked bytes 1MiB": lambda: impl.encode(golden.pseudo_random("chunked-bytes", 1 << 20)),
                  "value": lambda: golden.item_encoding(7)}[entry["name"]]()
        assert impl.stored_encoding(root_record, store.__getitem__) == expect


def test_golden_gear_table(impl):
    assert impl.GEAR == _py().GEAR
    assert len(set(impl.GEAR)) == 256


# ================================================================== properties: lists

item_encodings = st.lists(st.integers(0, 10**6).map(lambda i: codec.encode({"i": i})), max_size=140)


@SETTINGS
@given(encs=item_encodings, splits=st.lists(st.integers(0, 20), max_size=40))
def test_list_whole_equals_appends(impl, encs, splits):
    whole: list = []
    root = impl.build_list(encs, whole)
    nodes: list = []
    root_node = None
    i = 0
    h = None
    for k in splits + [len(encs)]:
        h = impl.build_list(encs[i:i + k], nodes, root_node)
        root_node = nodes[-1][1]
        i += k
        if i >= len(encs):
            break
    assert h == root
    # appending item hashes directly gives the same root as well
    hashes = [impl.value_node(e, []) for e in encs]
    n2: list = []
    r = None
    for j in range(0, len(hashes), 5):
        h2 = impl.list_append(r, hashes[j:j + 5], n2)
        r = n2[-1][1]
    if hashes:
        assert h2 == root


@SETTINGS
@given(encs=item_encodings)
def test_list_round_trip(impl, encs):
    nodes: list = []
    root = impl.build_list(encs, nodes)
    records = Records(impl).add(nodes)
    rec = records.record(root)
    assert impl.stored_list_length(rec) == len(encs)
    hashes = [records.hash_of(i) for i in impl.stored_list_ids(rec, records.fetch)]
    assert hashes == [impl.value_node(e, []) for e in encs]
    assert impl.stored_list_encodings(rec, records.fetch) == encs
    # a list rebuilt from its item hashes is the same list
    assert impl.list_append(None, hashes, []) == root


def test_list_append_rejects_bad_hash(impl):
    with pytest.raises(ValueError, match="item hash must be 32 bytes, not 5"):
        impl.list_append(None, [b"x" * 32, b"short"], [])


def test_list_generator_and_memoryview_hashes(impl):
    hashes = [blake3(bytes([i])).digest() for i in range(20)]
    expect = impl.list_append(None, hashes, [])
    assert impl.list_append(None, (h for h in hashes), []) == expect
    assert impl.list_append(None, [memoryview(h) for h in hashes], []) == expect


# ================================================================== properties: maps

keys = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)


@SETTINGS
@given(entries=st.dictionaries(keys, st.integers(), max_size=120), extra=st.dictionaries(keys, st.integers(), max_size=60),
       split=st.integers(0, 120), data=st.data())
def test_map_build_equals_updates(impl, entries, extra, split, data):
    final = {k: codec.encode(v) for k, v in entries.items()}
    whole: list = []
    root = impl.build_map(sorted(final.items()), whole)
    items = sorted(final.items())
    first = dict(items[:split])
    rest = items[split:]
    # start from some of the keys plus keys that will be deleted again (may shrink back to one leaf)
    junk = {("x" + k): codec.encode(v) for k, v in extra.items() if ("x" + k) not in final}
    base = {**first, **junk}
    nodes: list = []
    r = impl.build_map(sorted(base.items()), nodes)
    store = store_of(nodes)
    value_nodes: list = []
    sets = [(k, impl.value_node(e, value_nodes)) for k, e in rest]
    store.update(value_nodes)
    # apply in one or two updates
    cut = data.draw(st.integers(0, len(sets)))
    deletes = sorted(junk)
    dcut = data.draw(st.integers(0, len(deletes)))
    upd: list = []
    r = impl.map_update(r, sets[:cut], deletes[:dcut], store.__getitem__, upd)
    store.update(upd)
    upd2: list = []
    r = impl.map_update(r, sets[cut:], deletes[dcut:], store.__getitem__, upd2)
    assert r == root
    store.update(upd2)
    assert impl.map_count(store[r]) == len(final)
    records = Records(impl).add(nodes).add(value_nodes).add(upd).add(upd2)
    entries = impl.stored_map_entries(records.record(r), records.fetch)
    expect = sorted(final.items(), key=lambda p: p[0].encode())
    assert [(k, records.hash_of(i)) for k, i in entries] == [(k, impl.value_node(e, [])) for k, e in expect]
    assert [(k, records.encoding(i)) for k, i in entries] == expect


def test_map_collapses_back_to_a_leaf(impl):
    pairs = golden.map_pairs(40)
    nodes: list = []
    root = impl.build_map(pairs, nodes)
    store = store_of(nodes)
    assert store[root][0] == impl.TAG_MAP_INNER
    upd: list = []
    r = impl.map_update(root, [], [k for k, _ in pairs[:8]], store.__getitem__, upd)
    new = dict(upd)[r]
    assert new[0] == impl.TAG_MAP and impl.map_count(new) == 32
    assert r == impl.build_map(pairs[8:], [])


def test_map_build_repeated_key_keeps_last(impl):
    a, b = blake3(b"a").digest(), blake3(b"b").digest()
    assert impl.map_build([("k", a), ("j", a), ("k", b)], []) == impl.map_build([("j", a), ("k", b)], [])


def test_map_rejects_bad_input(impl):
    h = blake3(b"").digest()
    with pytest.raises(ValueError, match="value hash must be 32 bytes, not 3"):
        impl.map_build([("k", b"abc")], [])
    assert outcome(impl.map_build, [("k" * 65536, h)], []) == (
        "error", "UnsupportedValue", "map key longer than 65535 bytes", "$")
    nodes: list = []
    root = impl.map_build([("a", h)], nodes)
    with pytest.raises(ValueError, match="value hash must be 32 bytes"):
        impl.map_update(root, [("a", b"")], [], dict(nodes).__getitem__, [])
    assert impl.map_update(root, [], [], dict(nodes).__getitem__, []) == root


# ================================================================== properties: chunking

def _check_cuts(impl, data, cuts):
    assert cuts == sorted(set(cuts))
    if not data:
        assert cuts == []
        return
    assert cuts[-1] == len(data)
    prev = 0
    for i, c in enumerate(cuts):
        size = c - prev
        assert size <= impl.CDC_MAX
        if i < len(cuts) - 1:
            assert size > impl.CDC_MIN
        prev = c


@SETTINGS
@given(data=st.binary(max_size=300_000) | st.integers(0, 2**32).map(lambda s: golden.pseudo_random(str(s), 200_000)))
def test_cdc_covers_input_within_bounds(impl, data):
    _check_cuts(impl, data, impl.cdc_cut_points(data))


MEGABYTE = golden.pseudo_random("edit-base", 1 << 20)


def _chunks(data, cuts):
    prev = 0
    out = []
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    return out


_BASE_CHUNKS: dict = {}


@settings(SETTINGS, max_examples=25)
@given(offset=st.integers(-50_000, 50_000), delete=st.integers(0, 64), insert=st.binary(max_size=64))
def test_cdc_local_edit_changes_few_chunks(impl, offset, delete, insert):
    assume(delete or insert)
    pos = len(MEGABYTE) // 2 + offset
    edited = MEGABYTE[:pos] + insert + MEGABYTE[pos + delete:]
    if impl.__name__ not in _BASE_CHUNKS:
        _BASE_CHUNKS[impl.__name__] = set(_chunks(MEGABYTE, impl.cdc_cut_points(MEGABYTE)))
    before = _BASE_CHUNKS[impl.__name__]
    after = _chunks(edited, impl.cdc_cut_points(edited))
    new = [c for c in after if c not in before]
    assert len(new) <= 3


# ================================================================== children

def _reachable(impl, root, store):
    seen = set()
    todo = [root]
    while todo:
        h = todo.pop()
        if h in seen:
            continue
        seen.add(h)
        for c in impl.children(store[h]):
            assert c in store, "children() named a hash nobody stored"
            todo.append(c)
    return seen


@SETTINGS
@given(kind=st.sampled_from(["list", "map", "chunked"]), n=st.integers(0, 300), seed=st.integers(0, 1000))
def test_children_lists_exactly_the_referenced_hashes(impl, kind, n, seed):
    nodes: list = []
    if kind == "list":
        root = impl.build_list([codec.encode([seed, i]) for i in range(n)], nodes)
    elif kind == "map":
        root = impl.build_map([(f"k{seed}-{i}", codec.encode(i)) for i in range(n)], nodes)
    else:
        root = impl.value_node(codec.encode(golden.pseudo_random(str(seed), 33_000 + n * 500)), nodes)
    store = store_of(nodes)
    # every node built is reachable from the root through children(), and nothing else is
    assert _reachable(impl, root, store) == set(store)
    for h, node in nodes:
        kids = impl.children(node)
        if node[0] in (impl.TAG_VALUE, ord("c")):
            assert kids == []
        assert all(len(k) == 32 for k in kids)


def test_children_of_each_node_kind(impl):
    h = [blake3(bytes([i])).digest() for i in range(20)]
    assert impl.children(b"v\x90") == []
    assert impl.children(b"c123") == []
    assert impl.children(b"C" + (10).to_bytes(8, "big") + (2).to_bytes(4, "big") + h[0] + h[1]) == [h[0], h[1]]
    assert impl.children(b"l" + b"".join(h[:8])) == h[:8]
    assert impl.children(b"n" + h[0] + h[1]) == [h[0], h[1]]
    nodes: list = []
    impl.list_append(None, h[:19], nodes)  # 2 leaves -> one peak of level 1, tail of 3
    assert impl.children(nodes[-1][1]) == [nodes[-2][0]] + h[16:19]
    leaf = b"M" + (2).to_bytes(4, "big") + b"\x00\x01a" + h[0] + b"\x00\x02bb" + h[1]
    assert impl.children(leaf) == [h[0], h[1]]
    inner = b"N" + (40).to_bytes(8, "big") + (0b1000000000000001).to_bytes(2, "big") + h[2] + h[3]
    assert impl.children(inner) == [h[2], h[3]]
    with pytest.raises(impl.CorruptNode, match="unknown node tag 0x7b"):
        impl.children(b"{")


# ================================================================== stored records

def _u(n: int, size: int) -> bytes:
    return n.to_bytes(size, "big")


def _check_children_first(records: Records) -> None:
    """Every record refers only to records stored before it (smaller ids)."""
    for node_id, rec in records.records.items():
        assert all(child < node_id for child in records.impl.stored_children(rec[32:]))


def test_stored_lists_of_every_length_whole_and_by_appends(impl):
    encs = [codec.encode({"n": i, "s": "x" * (i % 5)}) for i in range(71)]
    records = Records(impl)
    nodes: list = []
    h = impl.list_append(None, [], nodes)
    records.add(nodes)
    assert records.list_encodings(h) == []
    root_node = nodes[-1][1]
    appended = {0: h}
    i = step = 0
    while i < len(encs):  # appends of 1, 2, 3, 5, 8, 13, 1, 2, ... items, each stored before the next
        k = [1, 2, 3, 5, 8, 13][step % 6]
        step += 1
        nodes = []
        h = impl.build_list(encs[i:i + k], nodes, root_node)
        root_node = nodes[-1][1]
        records.add(nodes)
        i = min(i + k, len(encs))
        appended[i] = h
        assert records.list_encodings(h) == encs[:i]
    for n in range(len(encs) + 1):
        nodes = []
        h = impl.build_list(encs[:n], nodes)
        records.add(nodes)
        rec = records.record(h)
        assert impl.stored_list_length(rec) == n
        assert impl.stored_list_encodings(rec, records.fetch) == encs[:n]
        ids = impl.stored_list_ids(rec, records.fetch)
        assert [records.hash_of(x) for x in ids] == [impl.value_node(e, []) for e in encs[:n]]
        if n in appended:  # same content, same root hash: the appended list's record is this one
            assert appended[n] == h
        # one at a time: the same root, and nothing new to store
        nodes = []
        impl.list_append(None, [], nodes)
        for e in encs[:n]:
            impl.build_list([e], nodes, nodes[-1][1])
        assert nodes[-1][0] == h
    _check_children_first(records)


def test_stored_map_with_inner_nodes(impl):
    pairs = [(f"key{i:04d}", codec.encode(i)) for i in range(300)]
    pairs += [("", codec.encode(None)), ("é", codec.encode("e")), ("Z", codec.encode("Z")), ("日本", codec.encode(1.5)),
              ("big", codec.encode(golden.pseudo_random("map-big", 50_000)))]
    nodes: list = []
    root = impl.build_map(pairs, nodes)
    records = Records(impl).add(nodes)
    rec = records.record(root)
    assert rec[32] == impl.TAG_MAP_INNER
    tags = {records.fetch(child)[32] for child in impl.stored_children(rec[32:])}
    assert tags <= {impl.TAG_MAP, impl.TAG_MAP_INNER} and impl.TAG_MAP in tags
    assert records.map_items(root) == sorted(pairs, key=lambda p: p[0].encode())
    assert records.record(impl.value_node(pairs[-1][1], []))[32] == impl.TAG_CHUNKED
    _check_children_first(records)


@pytest.mark.parametrize("size", [0, 1, 32 * 1024 - 3, 32 * 1024 - 2, 100_000, 1 << 20])
def test_stored_values_chunked_and_whole(impl, size):
    enc = codec.encode(golden.pseudo_random(f"value-{size}", size))
    nodes: list = []
    h = impl.value_node(enc, nodes)
    records = Records(impl).add(nodes)
    rec = records.record(h)
    assert rec[32] == (impl.TAG_CHUNKED if len(enc) > impl.CHUNK_THRESHOLD else impl.TAG_VALUE)
    assert impl.stored_encoding(rec, records.fetch) == enc
    # as a list item and as a map value
    nodes = []
    lst = impl.build_list([enc, codec.encode(1), enc], nodes)
    mp = impl.build_map([("v", enc)], nodes)
    records.add(nodes)
    assert records.list_encodings(lst) == [enc, codec.encode(1), enc]
    assert records.map_items(mp) == [("v", enc)]


def _nodes_of_every_kind(impl) -> list:
    nodes: list = []
    impl.value_node(codec.encode(golden.pseudo_random("kinds", 80_000)), nodes)  # c..., C
    impl.build_list([codec.encode(i) for i in range(8 * 7 + 5)], nodes)  # v, l, n, L with 3 peaks and a tail
    impl.build_map([(f"k{i}", codec.encode(i)) for i in range(200)], nodes)  # M, N
    impl.build_map([], nodes)  # the empty map leaf
    impl.list_append(None, [], nodes)  # the empty list root
    return nodes


def test_stored_node_round_trips_every_node_kind(impl):
    nodes = _nodes_of_every_kind(impl)
    assert {node[0] for _, node in nodes} == set(b"vcCLlnMN")
    records = Records(impl).add(nodes)
    for h, node in nodes:
        stored = records.record(h)[32:]
        assert impl.stored_node(node, records.ids.__getitem__) == stored
        assert impl.canonical_node(stored, records.hash_of) == node
        assert impl.hash_bytes(impl.canonical_node(stored, records.hash_of)) == h
        assert impl.stored_children(stored) == [records.ids[c] for c in impl.children(node)]
        assert len(stored) == len(node) - (32 - 8) * len(impl.children(node))
        assert stored[0] == node[0]
    _check_children_first(records)


def test_stored_node_converts_in_order_and_joins_any_bytes_like(impl):
    h = [blake3(bytes([i])).digest() for i in range(8)]
    leaf = b"l" + b"".join(h)
    seen = []

    def id_of(x):
        seen.append(x)
        return bytearray(h.index(x).to_bytes(8, "big"))

    assert impl.stored_node(leaf, id_of) == b"l" + b"".join(i.to_bytes(8, "big") for i in range(8))
    assert seen == h and all(type(x) is bytes for x in seen)
    mleaf = b"M" + _u(2, 4) + b"\x00\x01a" + h[0] + b"\x00\x02bb" + h[1]
    assert impl.stored_node(mleaf, lambda x: memoryview(x[:8])) == (b"M" + _u(2, 4) + b"\x00\x01a" + h[0][:8]
                                                                      + b"\x00\x02bb" + h[1][:8])
    # a reference may be converted to any length (b"".join semantics)
    assert impl.canonical_node(b"n" + b"A" * 8 + b"B" * 8, lambda x: x[:1]) == b"nAB"
    with pytest.raises(TypeError):
        impl.stored_node(leaf, lambda x: 7)
    assert impl.stored_node(b"v\x01", id_of) == b"v\x01"


# ------------------------------------------------------------------ damaged records

H0 = bytes(32)
#: records the damaged ones below refer to
DAMAGE_STORE = {
    b"P" * 8: H0 + b"n" + bytes(16),  # list inner node
    b"F" * 8: H0 + b"l" + b"V" * 64,  # list leaf of 8 items V
    b"G" * 8: H0 + b"l" + b"V" * 56,  # list leaf one id short
    b"V" * 8: H0 + b"v\x01",  # value 1
    b"K" * 8: H0 + b"c1234",  # chunk of 4 bytes
    b"S" * 8: H0[:20],  # too short to be a record
}

DAMAGED_RECORDS = [
    ("list root tag", "list", H0 + b"X" + bytes(8), "not a list root"),
    ("list root short", "list", H0 + b"L\x00", "list root length mismatch"),
    ("list root length", "list", H0 + b"L" + _u(3, 8) + b"V" * 8, "list root length mismatch"),
    ("list root trailing", "list", H0 + b"L" + _u(1, 8) + b"V" * 8 + b"x", "list root length mismatch"),
    ("list peak not a leaf", "list", H0 + b"L" + _u(8, 8) + b"P" * 8, "bad list leaf"),
    ("list peak not an inner node", "list", H0 + b"L" + _u(16, 8) + b"F" * 8, "bad list inner node"),
    ("list leaf short", "list", H0 + b"L" + _u(9, 8) + b"G" * 8 + b"V" * 8, "bad list leaf"),
    ("list item not a value", "items", H0 + b"L" + _u(2, 8) + b"V" * 8 + b"F" * 8,
     "record does not hold a value (tag 0x6c)"),
    ("map leaf count", "map", H0 + b"M\xff\xff\xff\xff\x00\x01a", "map leaf length mismatch"),
    ("map leaf trailing", "map", H0 + b"M" + bytes(4) + b"x", "map leaf length mismatch"),
    ("map leaf id truncated", "map", H0 + b"M" + _u(1, 4) + b"\x00\x01a" + b"V" * 5, "map leaf length mismatch"),
    ("map inner length", "map", H0 + b"N" + bytes(8) + b"\x00\x01", "node 'N' length mismatch"),
    ("map wrong tag", "map", H0 + b"Q123", "not a map node"),
    ("map child not a map", "map", H0 + b"N" + _u(40, 8) + _u(1, 2) + b"V" * 8, "not a map node"),
    ("value wrong tag", "value", H0 + b"l" + b"V" * 64, "record does not hold a value (tag 0x6c)"),
    ("chunked node length", "value", H0 + b"C" + bytes(8) + _u(2, 4) + b"K" * 8, "chunked value node length mismatch"),
    ("chunked short", "value", H0 + b"C\x00", "chunked value node length mismatch"),
    ("chunk not a chunk", "value", H0 + b"C" + _u(1, 8) + _u(1, 4) + b"V" * 8,
     "chunked value refers to a record that is not a chunk"),
    ("chunk record short", "value", H0 + b"C" + _u(4, 8) + _u(1, 4) + b"S" * 8,
     "chunked value refers to a record that is not a chunk"),
    ("chunked total", "value", H0 + b"C" + _u(9, 8) + _u(2, 4) + b"K" * 16, "chunked value length mismatch"),
]

DAMAGED_NODES = [
    ("unknown tag", b"{", "unknown node tag 0x7b"),
    ("list root", b"L" + _u(9, 8) + b"V" * 8, "node 'L' length mismatch"),
    ("list root short", b"L\x00", "node 'L' length mismatch"),
    ("list leaf short", b"l" + b"V" * 56, "node 'l' length mismatch"),
    ("list inner long", b"n" + b"V" * 24, "node 'n' length mismatch"),
    ("chunked count", b"C" + _u(4, 8) + _u(2, 4) + b"K" * 8, "node 'C' length mismatch"),
    ("map inner bitmap", b"N" + _u(40, 8) + _u(3, 2) + b"V" * 8, "node 'N' length mismatch"),
    ("map leaf count", b"M\xff\xff\xff\xff\x00\x01a", "map leaf length mismatch"),
    ("map leaf trailing", b"M" + _u(1, 4) + b"\x00\x01a" + b"V" * 8 + b"x", "map leaf length mismatch"),
    ("map leaf short", b"M\x00", "map leaf length mismatch"),
]


def _logged(store: dict, log: list):
    def fetch(node_id):
        log.append(bytes(node_id))
        return store[node_id]

    return fetch


def _readers(kind: str) -> list[str]:
    return {"list": ["stored_list_ids", "stored_list_encodings"], "items": ["stored_list_encodings"],
            "map": ["stored_map_entries"], "value": ["stored_encoding"]}[kind]


@pytest.mark.parametrize("name,kind,record,message", DAMAGED_RECORDS, ids=[c[0] for c in DAMAGED_RECORDS])
def test_damaged_records_raise_corrupt_node(impl, name, kind, record, message):
    assert impl.CorruptNode is _py().CorruptNode  # one class: `except CorruptNode` works for both
    for fn in _readers(kind):
        with pytest.raises(impl.CorruptNode) as info:
            getattr(impl, fn)(record, DAMAGE_STORE.__getitem__)
        assert str(info.value) == message, fn


@pytest.mark.parametrize("name,node,message", DAMAGED_NODES, ids=[c[0] for c in DAMAGED_NODES])
def test_damaged_nodes_raise_corrupt_node(impl, name, node, message):
    calls: list = []
    for fn, convert in [("children", None), ("stored_children", None), ("stored_node", calls.append),
                        ("canonical_node", calls.append)]:
        with pytest.raises(impl.CorruptNode) as info:
            getattr(impl, fn)(node) if convert is None else getattr(impl, fn)(node, convert)
        assert str(info.value) == message, fn
    assert calls == []  # the layout is checked before any reference is converted
    with pytest.raises(impl.CorruptNode, match="empty node"):  # (was IndexError until the fuzzer found it)
        impl.stored_children(b"")


def test_damaged_map_leaf_count_is_not_looped_over(impl):
    """A map leaf claiming 2**32 - 1 entries is given up on at the end of its bytes, not after 2**32 steps."""
    import time

    node = b"M\xff\xff\xff\xff" + b"\x00\x01a" + b"V" * 8
    t0 = time.perf_counter()
    for _ in range(20):
        for call in [lambda: impl.stored_children(node), lambda: impl.children(node),
                     lambda: impl.canonical_node(node, bytes), lambda: impl.stored_map_entries(H0 + node, bytes)]:
            with pytest.raises(impl.CorruptNode, match="map leaf length mismatch"):
                call()
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("name,kind,record,message", DAMAGED_RECORDS, ids=[c[0] for c in DAMAGED_RECORDS])
def test_cross_damaged_records_same_fetches(name, kind, record, message):
    """Both implementations fetch the same ids, in the same order, before giving up."""
    for fn in _readers(kind):
        logs = []
        for impl in (_py(), _c()):
            log: list = []
            with pytest.raises(impl.CorruptNode):
                getattr(impl, fn)(record, _logged(DAMAGE_STORE, log))
            logs.append(log)
        assert logs[0] == logs[1], fn


# ================================================================== compiled == pure Python

def _fixed_offsets():
    return st.integers(-86399, 86399).map(lambda s: dt.timezone(dt.timedelta(seconds=s)))


timezones = st.none() | st.just(dt.timezone.utc) | _fixed_offsets() | st.timezones()
datetimes = st.builds(lambda d, tz, fold: d.replace(tzinfo=tz, fold=fold), st.datetimes(), timezones, st.integers(0, 1))
scalars = (
    st.none() | st.booleans()
    | st.integers() | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63, -2**63 - 1, -33, -32, 127, 128])
    | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([float("nan"), -0.0, math.inf])
    | st.text() | st.text(st.characters(codec=None), max_size=5)  # may hold lone surrogates
    | st.binary() | st.binary().map(bytearray)
    | datetimes | st.uuids() | st.decimals(allow_nan=True, allow_infinity=True)
    | st.builds(codec.Opaque, st.text(max_size=4), st.binary(max_size=8))
    | st.builds(Ext, st.integers(-3, 8), st.binary(max_size=20))
    | st.sampled_from([1j, object(), dt.date(2020, 1, 1), frozenset({1j})])
)
hashables = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.binary(max_size=5)
                         | st.floats(allow_nan=False) | st.uuids(),
                         lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=6)
values = st.recursive(
    scalars | st.sets(hashables, max_size=5) | st.frozensets(hashables, max_size=3),
    lambda inner: (st.lists(inner, max_size=6) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=5), inner, max_size=6)
                   | st.dictionaries(st.text(max_size=3) | st.integers(0, 3), inner, max_size=3)),
    max_leaves=25,
)


def _norm_repr(x):
    """A comparable picture of a normalized value (keeps types, key order, Ext contents, NaN)."""
    if type(x) is Ext:
        return ("Ext", x.code, bytes(x.data))
    if type(x) is list:
        return ("list", [_norm_repr(v) for v in x])
    if type(x) is dict:
        return ("dict", [(k, _norm_repr(v)) for k, v in x.items()])
    return (type(x).__name__, repr(x))


@SETTINGS
@given(value=values)
def test_cross_encode_normalize(value):
    py, c = _py(), _c()
    a, b = outcome(py.encode, value), outcome(c.encode, value)
    assert a == b
    na, nb = outcome(py.normalize, value), outcome(c.normalize, value)
    assert na[0] == nb[0]
    if na[0] == "ok":
        assert _norm_repr(na[1]) == _norm_repr(nb[1])
    else:
        assert na == nb
    if a[0] == "ok":
        enc = a[1]
        assert c.canonicalize(enc) == py.canonicalize(enc) == enc
        assert c.decompose(enc) == py.decompose(enc)
        n1: list = []
        n2: list = []
        assert c.value_node(enc, n1) == py.value_node(enc, n2)
        assert n1 == n2


@SETTINGS
@given(value=values, depth=st.integers(0, 70))
def test_cross_normalize_depth(value, depth):
    a, b = outcome(_py().normalize, value, depth), outcome(_c().normalize, value, depth)
    assert a[0] == b[0]
    assert (_norm_repr(a[1]) == _norm_repr(b[1])) if a[0] == "ok" else a == b


@SETTINGS
@given(data=st.binary(max_size=200))
def test_cross_arbitrary_bytes(data):
    py, c = _py(), _c()
    assert outcome(c.canonicalize, data) == outcome(py.canonicalize, data)
    assert outcome(c.decompose, data) == outcome(py.decompose, data)
    assert outcome(c.opaque_parts, data) == outcome(py.opaque_parts, data)


@SETTINGS
@given(body=st.binary(max_size=40), head=st.sampled_from(["str", "key", "opaque", "zone"]))
def test_cross_utf8_validation(body, head):
    """Any byte string as a str / map key / opaque type / zone name: same verdict as Python's strict decoder."""
    n = len(body)
    if head == "str":
        data = (bytes([0xA0 | n]) if n < 32 else bytes([0xD9, n])) + body
    elif head == "key":
        data = bytes([0x81]) + (bytes([0xA0 | n]) if n < 32 else bytes([0xD9, n])) + body + b"\xc0"
    elif head == "opaque":
        payload = bytes([max(n, 1)]) + body.ljust(1, b"a")
        data = msgspec.msgpack.encode(Ext(6, payload))
    else:
        payload = b"\x02" + bytes(8) + bytes(4) + body.ljust(1, b"a")
        data = msgspec.msgpack.encode(Ext(2, payload))
    py, c = _py(), _c()
    assert outcome(c.canonicalize, data) == outcome(py.canonicalize, data)
    assert outcome(c.decompose, data) == outcome(py.decompose, data)


def _loose(value, draw) -> bytes:
    """A valid but (randomly) non-canonical MessagePack encoding of a plain value."""
    if value is None:
        return b"\xc0"
    if value is True or value is False:
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        forms = []
        if 0 <= value < 128:
            forms.append(bytes([value]))
        if -32 <= value < 0:
            forms.append(bytes([value & 0xFF]))
        for code, size, signed in [(0xCC, 1, False), (0xCD, 2, False), (0xCE, 4, False), (0xCF, 8, False),
                                   (0xD0, 1, True), (0xD1, 2, True), (0xD2, 4, True), (0xD3, 8, True)]:
            try:
                forms.append(bytes([code]) + value.to_bytes(size, "big", signed=signed))
            except OverflowError:
                pass
        if not forms:
            return msgspec.msgpack.encode(Ext(1, codec.bigint_payload(value)))
        return draw(st.sampled_from(forms))
    if isinstance(value, float):
        import struct

        forms = [b"\xcb" + struct.pack(">d", value)]
        try:
            if struct.unpack(">f", struct.pack(">f", value))[0] == value or value != value:
                forms.append(b"\xca" + struct.pack(">f", value))
        except OverflowError:
            pass
        return draw(st.sampled_from(forms))
    if isinstance(value, str):
        raw = value.encode()
        n = len(raw)
        forms = [b"\xdb" + n.to_bytes(4, "big") + raw]
        if n < 256:
            forms.append(b"\xd9" + bytes([n]) + raw)
        if n < 65536:
            forms.append(b"\xda" + n.to_bytes(2, "big") + raw)
        if n < 32:
            forms.append(bytes([0xA0 | n]) + raw)
        return draw(st.sampled_from(forms))
    if isinstance(value, bytes):
        n = len(value)
        forms = [b"\xc6" + n.to_bytes(4, "big") + value, b"\xc5" + n.to_bytes(2, "big") + value]
        if n < 256:
            forms.append(b"\xc4" + bytes([n]) + value)
        return draw(st.sampled_from(forms))
    if isinstance(value, list):
        n = len(value)
        head = draw(st.sampled_from(([bytes([0x90 | n])] if n < 16 else []) + [b"\xdc" + n.to_bytes(2, "big"),
                                                                             b"\xdd" + n.to_bytes(4, "big")]))
        return head + b"".join(_loose(v, draw) for v in value)
    if isinstance(value, dict):
        items = list(value.items())
        items = draw(st.permutations(items))
        n = len(items)
        head = draw(st.sampled_from(([bytes([0x80 | n])] if n < 16 else []) + [b"\xde" + n.to_bytes(2, "big"),
                                                                             b"\xdf" + n.to_bytes(4, "big")]))
        return head + b"".join(_loose(k, draw) + _loose(v, draw) for k, v in items)
    raise AssertionError(value)


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**64, 2**65) | st.floats(allow_nan=True) | st.text(max_size=40)
    | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=8), inner, max_size=20),
    max_leaves=40,
)


@SETTINGS
@given(value=plain, data=st.data())
def test_cross_canonicalize_loose_encodings(value, data):
    loose = _loose(value, data.draw)
    py, c = _py(), _c()
    expect = codec.encode(value)
    assert py.canonicalize(loose) == c.canonicalize(loose) == expect
    assert py.decompose(loose) == c.decompose(loose) == py.decompose(expect)


@SETTINGS
@given(value=st.lists(st.builds(codec.Opaque, st.text(min_size=1, max_size=10), st.binary(max_size=50)), max_size=10)
       | st.lists(datetimes, max_size=6) | st.lists(st.uuids(), max_size=4))
def test_cross_canonical_extensions_fast_path(value):
    """Opaque, datetime and UUID extensions are recognised as canonical by the compiled scanner."""
    py, c = _py(), _c()
    a = outcome(py.encode, value)
    assert a == outcome(c.encode, value)
    if a[0] == "ok":
        assert c.canonicalize(a[1]) is a[1]  # returned as is: no decode, no re-encode
        assert c.decompose(a[1]) == py.decompose(a[1])


def test_canonical_bytes_returned_without_copy():
    c = _c()
    enc = codec.encode([{"role": "user", "content": "hi"}, 1.5, -7, "x" * 300])
    assert c.canonicalize(enc) is enc
    non = msgspec.msgpack.encode({"b": 1, "a": 2})
    assert c.canonicalize(non) == codec.canonicalize(non) != non


def test_cross_fetch_read_path():
    """stored_list_encodings / stored_encoding through a fetch callback (the server's read path)."""
    py, c = _py(), _c()
    encs = [codec.encode({"role": "user", "content": "m" * (i % 50), "i": i}) for i in range(1600)]
    encs[7] = codec.encode("x" * 100_000)  # one chunked item
    nodes: list = []
    root = py.build_list(encs, nodes)
    records = Records(py).add(nodes)
    assert Records(c).add(nodes).records == records.records  # the same records, byte for byte
    rec = records.record(root)
    logs = []
    for impl in (py, c):
        log: list = []
        assert impl.stored_list_encodings(rec, _logged(records.records, log)) == encs
        logs.append(log)
    assert logs[0] == logs[1]
    # every record below the root is fetched exactly once (all items differ)
    assert sorted(logs[1]) == sorted(set(records.records) - {records.ids[root]})
    for e in [encs[7], encs[8]]:
        item = records.record(py.value_node(e, []))
        assert c.stored_encoding(item, records.fetch) == py.stored_encoding(item, records.fetch) == e
    # memoryview results from fetch (lmdb with buffers=True) read the same
    assert c.stored_list_encodings(memoryview(rec), lambda i: memoryview(records.records[i])) == encs
    assert c.stored_list_ids(rec, records.fetch) == py.stored_list_ids(rec, records.fetch)


def _full_outcome(fn):
    """("ok", result) or ("error", type name, message): errors compared by class and text."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))


def _all_stored_calls(impl, records: dict, root: bytes) -> list:
    """Every stored-form function on the record ``root`` of ``records``: outcomes and the fetches made."""
    rec = records[root]
    out = []
    for fn in ["stored_encoding", "stored_list_ids", "stored_list_encodings", "stored_map_entries"]:
        log: list = []
        out.append((fn, _full_outcome(lambda: getattr(impl, fn)(rec, _logged(records, log))), log))
    out.append(("stored_list_length", _full_outcome(lambda: impl.stored_list_length(rec))))
    node = rec[32:]
    for fn, convert in [("stored_children", None), ("children", None),
                        ("canonical_node", lambda i: records.get(i, b"?")[:32]),
                        ("stored_node", lambda h: blake3(h).digest()[:8])]:
        log = []

        def logged(x, convert=convert, log=log):
            log.append(x)
            return convert(x)

        out.append((fn, _full_outcome(lambda: getattr(impl, fn)(node) if convert is None
                                      else getattr(impl, fn)(node, logged)), log))
    return out


def _cross_base():
    """A store (made by the twin) with a list, maps (leaf and inner nodes) and chunked values."""
    py = _py()
    nodes: list = []
    roots = [
        py.build_list([codec.encode([i, "x" * (i % 7)]) for i in range(75)]
                      + [codec.encode(golden.pseudo_random("cross-list", 40_000))], nodes),
        py.build_map([(f"k{i}", codec.encode(i)) for i in range(60)]
                     + [("big", codec.encode(golden.pseudo_random("cross-map", 40_000)))], nodes),
        py.build_map([("a", codec.encode(1)), ("b", codec.encode([2]))], nodes),
    ]
    records = Records(py).add(nodes)
    return records.records, [records.ids[h] for h in roots]


CROSS_RECORDS, CROSS_ROOTS = _cross_base()


@settings(SETTINGS, max_examples=400)
@given(data=st.data())
def test_cross_stored_functions_on_damaged_records(data):
    """One record of a store damaged at random: both implementations give the same results or the
    same errors (class and message) after the same fetches, from any record."""
    records = dict(CROSS_RECORDS)
    target = data.draw(st.sampled_from(sorted(records)))
    rec = bytearray(records[target])
    op = data.draw(st.sampled_from(["byte", "truncate", "extend", "tag", "counts"]))
    if op == "byte":
        rec[data.draw(st.integers(32, len(rec) - 1))] = data.draw(st.integers(0, 255))
    elif op == "truncate":
        del rec[data.draw(st.integers(0, len(rec) - 1)):]
    elif op == "extend":
        rec += data.draw(st.binary(min_size=1, max_size=16))
    elif op == "tag":
        rec[32] = data.draw(st.sampled_from(b"vcCLlnMNz"))
    else:  # the count / length / bitmap fields right after the tag
        start = data.draw(st.integers(33, 44))
        field = data.draw(st.binary(min_size=1, max_size=4))
        rec[start:start + len(field)] = field
    records[target] = bytes(rec)
    root = data.draw(st.sampled_from(CROSS_ROOTS + [target]))
    assert _all_stored_calls(_py(), records, root) == _all_stored_calls(_c(), records, root)


@SETTINGS
@given(tag=st.sampled_from(b"vcCLlnMNz"), body=st.binary(max_size=90), counts=st.binary(max_size=12))
def test_cross_stored_functions_on_arbitrary_nodes(tag, body, counts):
    records = {b"R" * 8: bytes(32) + bytes([tag]) + counts + body}
    assert _all_stored_calls(_py(), records, b"R" * 8) == _all_stored_calls(_c(), records, b"R" * 8)


@SETTINGS
@given(items=st.lists(st.binary(max_size=60) | st.integers(0, 3).map(lambda i: golden.pseudo_random(str(i), 33_000)),
                      max_size=80),
       entries=st.dictionaries(keys, st.integers(), max_size=70), data=st.data())
def test_cross_stored_round_trip(items, entries, data):
    """Valid trees: both make the same records and read the same values back (either one's records)."""
    py, c = _py(), _c()
    encs = [codec.encode(x) for x in items]
    pairs = sorted((k, codec.encode(v)) for k, v in entries.items())
    nodes: list = []
    lst = py.build_list(encs, nodes)
    mp = py.build_map(pairs, nodes)
    rp, rc = Records(py).add(nodes), Records(c).add(nodes)
    assert rp.records == rc.records and rp.ids == rc.ids
    fetch = rp.fetch
    for impl in (py, c):
        assert impl.stored_list_encodings(rp.record(lst), fetch) == encs
        assert [(k, impl.stored_encoding(fetch(i), fetch)) for k, i in impl.stored_map_entries(rp.record(mp), fetch)] \
            == sorted(pairs, key=lambda p: p[0].encode())
    root = data.draw(st.sampled_from(sorted(rp.records)))
    assert _all_stored_calls(py, rp.records, root) == _all_stored_calls(c, rp.records, root)


def test_cross_nodes_lists_identical_for_updates():
    py, c = _py(), _c()
    pairs = golden.map_pairs(300)
    n1: list = []
    n2: list = []
    assert py.build_map(pairs, n1) == c.build_map(pairs, n2)
    assert n1 == n2
    root = n1[-1][0]
    store = dict(n1)
    h = py.value_node(codec.encode("new"), [])
    store[h] = b"v" + codec.encode("new")
    sets = [("key00010", h), ("zzz", h)]
    deletes = [f"key{i:05d}" for i in range(0, 300, 3)]
    u1: list = []
    u2: list = []
    assert py.map_update(root, sets, deletes, store.__getitem__, u1) == c.map_update(root, sets, deletes,
                                                                                   store.__getitem__, u2)
    assert u1 == u2


def test_exports_match():
    py, c = _py(), _c()
    names = ["NATIVE", "HASH_SIZE", "LEAF_ITEMS", "MAP_LEAF_MAX", "CHUNK_THRESHOLD", "CDC_MIN", "CDC_AVG", "CDC_MAX",
             "CDC_MASK_SMALL", "CDC_MASK_LARGE", "KIND_SCALAR", "KIND_LIST", "KIND_MAP", "TAG_VALUE", "TAG_CHUNK",
             "TAG_CHUNKED", "TAG_LIST", "TAG_LEAF", "TAG_INNER", "TAG_MAP", "TAG_MAP_INNER", "GEAR", "ID_SIZE"]
    for name in names:
        if name != "NATIVE":
            assert getattr(c, name) == getattr(py, name), name
    assert c.NATIVE is True and py.NATIVE is False
    assert c.UnsupportedValue is py.UnsupportedValue is codec.UnsupportedValue
    assert c.CorruptNode is py.CorruptNode


def test_both_modules_have_every_name_the_selector_takes():
    """sidecar.storage.hotpath takes these names from whichever module it loads: both must have all of them."""
    import re

    names = re.findall(r"= _impl\.(\w+)", (ROOT / "sidecar" / "storage" / "hotpath.py").read_text())
    assert "stored_list_encodings" in names and len(names) > 30
    py, c = _py(), _c()
    assert [n for n in names if not hasattr(c, n)] == []
    assert [n for n in names if not hasattr(py, n)] == []
    # and the compiled module keeps nothing the twin dropped
    for gone in ["read_encoding", "list_item_hashes", "list_encodings", "map_entries"]:
        assert not hasattr(py, gone) and not hasattr(c, gone), gone


def test_scalar_types_round_trip_through_both():
    py, c = _py(), _c()
    for v in [decimal.Decimal("1.10"), uuid.UUID(int=1), dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc), {1, 2},
              codec.Opaque("t", b"d"), 2**100, float("nan")]:
        assert py.encode(v) == c.encode(v)


def _other_thread_ran_during(call) -> int:
    """How many times another Python thread ran while ``call()`` ran (0 if it holds the GIL throughout).

    The switch interval is made huge, so this thread never hands the GIL over
    at a bytecode boundary; the spinner gives it back after every step
    (sleep(0)). The spinner can then only run while ``call`` itself releases
    the GIL, which makes the count deterministic.
    """
    import sys
    import threading
    import time

    count = [0]
    stop = [False]

    def spin():
        while not stop[0]:
            count[0] += 1
            time.sleep(0)

    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    t = threading.Thread(target=spin)
    t.start()
    try:
        while count[0] < 10:
            time.sleep(0.001)
        before = count[0]
        call()
        during = count[0] - before
    finally:
        stop[0] = True
        sys.setswitchinterval(old)
        t.join()
    return during


def test_compiled_chunking_releases_the_gil():
    """Another Python thread keeps running while the compiled module chunks a large buffer."""
    c = _c()
    data = golden.pseudo_random("gil", 64 << 20)
    assert _other_thread_ran_during(lambda: c.cdc_cut_points(data)) > 0
    # value_node of a big encoding: chunking (ours) and hashing (blake3-py, for inputs of 2 KiB or more)
    assert _other_thread_ran_during(lambda: c.value_node(data[:16 << 20], [])) > 0
    # checking that a big encoding is canonical (UTF-8 validation of a 32 MiB string)
    text = c.encode("é" * (16 << 20))
    assert _other_thread_ran_during(lambda: c.canonicalize(text)) > 0
    # the probe does tell: a C call that holds the GIL (bytes.replace) lets nothing run
    assert _other_thread_ran_during(lambda: data.replace(b"\x00", b"\x01")) == 0


# ------------------------------------------------------------------ write_nodes (storage/nodes.write's walk)

@pytest.mark.parametrize("entry", TREES["written"], ids=lambda e: e["name"])
def test_golden_written(impl, entry):
    """The puts write_nodes makes storing a tree in a fresh store (records, index entries, flags, order),
    and the records read back as the tree."""
    build = dict(golden.stored_cases())[entry["name"]]
    nodes: list = []
    root = build(impl, nodes)
    log, ids = golden.written(impl, nodes, [root])
    assert (len(log), golden.nodes_digest(log)) == (entry["put_count"], entry["puts"])
    records = {k[len(b"nodes:--"):]: v for k, v in log if k.startswith(b"nodes:")}
    assert set(ids) == {h for h, _ in nodes} and len(records) == len(ids)
    fetch = records.__getitem__
    rec = fetch(ids[root])
    assert rec[:32] == root
    if rec[32] == impl.TAG_LIST:
        want = [item_enc for item_enc in _py().stored_list_encodings(rec, fetch)]
        assert impl.stored_list_encodings(rec, fetch) == want
        assert len(want) == int(entry["name"].split()[1])
    # every record's children have smaller ids (written first) and its hash is its canonical node's
    for node_id, record in records.items():
        assert all(c < node_id for c in impl.stored_children(record[32:]))


def _write_case(impl):
    """A put as the server makes them: a list extended by appends and a map, over a store that already
    holds part of it (some nodes found by hash, one short index key owned by another hash)."""
    nodes: list = []
    base = impl.build_list([golden.item_encoding(i) for i in range(21)], nodes)
    root = nodes[-1][1]
    old_log, old_ids = golden.written(impl, nodes, [base])
    txn = golden.WriteLog({(db, k[len(db) + 3:]): v for db, (k, v) in
                           ((kk.split(b":")[0].decode(), (kk, vv)) for kk, vv in old_log)})
    fresh: list = []
    appended = impl.build_list([golden.item_encoding(i) for i in range(21, 40)], fresh, root)
    m = impl.build_map(golden.map_pairs(50), fresh)
    value = impl.value_node(b"\xa3abc", fresh)
    # a short index key taken by another hash: the new node goes under its full key
    clash = fresh[-1][0][:16]
    txn.data[("hashes", clash)] = b"\x00" * 7 + b"\x01"
    known = {h: old_ids[h] for h in old_ids}
    counter = iter(range(100, 1 << 40))
    packed = []

    def pack(h, stored, sample):
        packed.append((h, sample))
        return b"z" + stored[::-1] if len(stored) > 40 else stored

    out = impl.write_nodes(txn, golden.WRITE_DBS, fresh, known, [appended, m, value], b"",
                           pack, lambda: next(counter).to_bytes(8, "big"))
    return txn.log, out, packed


def test_write_nodes_twins_agree():
    """The compiled write_nodes makes exactly the twin's puts (dedup by hash, index clash, pack calls)."""
    c, py = _write_case(_c()), _write_case(_py())
    assert c == py
    log, ids, packed = py
    assert any(k.startswith(b"hashes:o-") and len(k) == len(b"hashes:o-") + 32 for k, _ in log)  # the full key
    assert packed and all(sample for _, sample in packed)


@pytest.mark.parametrize("scoped", [False, True])
def test_write_nodes_sealed_twins_agree(scoped):
    """An encrypted namespace's write: index keys under its scope, value records sealed, a nodescope
    entry per new node: the same puts from both twins."""
    outs = []
    for impl in (_c(), _py()):
        nodes: list = []
        root = impl.build_map(golden.map_pairs(40), nodes)
        counter = iter(range(1, 1 << 40))
        seal = (lambda h, stored: b"e" + h[:4] + stored, b"SCOPE123ns", frozenset((0x76, 0x7A, 0x63))) \
            if scoped else None
        txn = golden.WriteLog()
        ids = impl.write_nodes(txn, golden.WRITE_DBS, nodes, {}, [root], b"SCOPE123" if scoped else b"",
                               lambda h, s, sample: s if sample else s + b"!", lambda: next(counter).to_bytes(8, "big"),
                               seal)
        outs.append((txn.log, ids))
    assert outs[0] == outs[1]
    log = outs[1][0]
    if scoped:
        assert sum(k.startswith(b"nodescope:") for k, _ in log) == len(outs[1][1])
        assert all(k.startswith(b"hashes:--SCOPE123") for k, _ in log if k.startswith(b"hashes:"))
        assert any(v[32:33] == b"e" for k, v in log if k.startswith(b"nodes:"))


def test_write_nodes_missing(impl):
    """A root neither built nor stored: None (nodes.write raises RetryJob), nothing after it written."""
    nodes: list = []
    impl.value_node(b"\x01", nodes)
    missing = bytes(32)
    log, ids = golden.written(impl, nodes, [nodes[0][0], missing])
    assert ids is None and len(log) == 2  # the first root's record and index entry only


def test_canonical_node_known(impl):
    """canonical_node_known = canonical_node with each child's hash read from its record, noted in known."""
    nodes: list = []
    root = impl.build_list([golden.item_encoding(i) for i in range(27)], nodes)
    records = Records(impl).add(nodes)
    rec = records.record(root)
    known: dict = {}
    assert impl.canonical_node_known(rec[32:], records.fetch, known) == dict(nodes)[root]
    assert known == {records.fetch(i)[:32]: i for i in impl.stored_children(rec[32:])} and len(known) == 2 + 3  # 2 peaks, 3 tail items
    with pytest.raises(impl.CorruptNode, match="missing node"):
        impl.canonical_node_known(rec[32:], {}.get, {})


def test_write_nodes_short_index_keys_twins_agree():
    """A 1-byte index key (nearly every node collides, as tests/test_store.py forces): the same puts."""
    outs = []
    for impl in (_c(), _py()):
        nodes: list = []
        root = impl.build_list([golden.item_encoding(i) for i in range(300)], nodes)
        counter = iter(range(1, 1 << 40))
        txn = golden.WriteLog()
        ids = impl.write_nodes(txn, golden.WRITE_DBS, nodes, {}, [root], b"", lambda h, s, sample: s,
                               lambda: next(counter).to_bytes(8, "big"), None, 1)
        outs.append((txn.log, ids))
    assert outs[0] == outs[1]
    assert sum(k.startswith(b"hashes:o-") for k, _ in outs[1][0]) > 100  # most went under their full key


# ----------------------------------------------------------------- values of an API request (wire_*, put_channels)

from agentstate.v1 import threads_pb2, values_pb2  # noqa: E402

from sidecar.errors import ApiError  # noqa: E402


def api_outcome(fn, *args):
    """("ok", result) or ("error", reason, message, metadata): an API error compared whole (field included)."""
    try:
        return ("ok", fn(*args))
    except ApiError as e:
        return ("error", e.reason, e.message, e.metadata)
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))


_msgpack_bytes = st.one_of(
    st.builds(codec.encode, st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                         lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                                             max_size=3),
                                         max_leaves=6)),
    st.builds(msgspec.msgpack.encode, st.dictionaries(st.text(max_size=3), st.integers(-999, 999), max_size=3)),  # unsorted
    st.binary(max_size=12),  # mostly not MessagePack at all
)
_names = st.one_of(st.text(min_size=1, max_size=6), st.just(""), st.just("a\x00b"), st.just("x" * 257),
                   st.just("é" * 100), st.just("é" * 129))


def _fill_value(v, spec) -> None:
    kind, body = spec
    if kind == "msgpack":
        v.msgpack = body
    elif kind == "opaque":
        v.opaque.type, v.opaque.data = body
    elif kind == "list":
        v.list.SetInParent()
        for item in body:
            _fill_value(v.list.items.add(), item)
    elif kind == "map":
        v.map.SetInParent()
        for k, item in body:
            _fill_value(v.map.entries[k], item)


value_specs = st.recursive(
    st.one_of(st.tuples(st.just("msgpack"), _msgpack_bytes),
              st.tuples(st.just("opaque"), st.tuples(st.sampled_from(["t", "", "x" * 256]), st.binary(max_size=5))),
              st.just(("none", None))),
    lambda c: st.one_of(st.tuples(st.just("list"), st.lists(c, max_size=3)),
                        st.tuples(st.just("map"), st.lists(st.tuples(st.text(max_size=3), c), max_size=3))),
    max_leaves=8)


def value_of(spec) -> values_pb2.Value:
    v = values_pb2.Value()
    _fill_value(v, spec)
    return v


write_specs = st.one_of(
    st.tuples(st.just("value"), value_specs),
    st.tuples(st.just("keep"), st.booleans()),
    st.tuples(st.just("delta"), st.tuples(st.lists(value_specs, max_size=3), st.none() | st.integers(0, 5),
                                          st.lists(st.tuples(st.text(max_size=3), value_specs), max_size=2),
                                          st.lists(st.text(max_size=3), max_size=2), st.binary(max_size=3))),
    st.just(("none", None)),
)


def request_of(channels) -> threads_pb2.PutCheckpointRequest:
    req = threads_pb2.PutCheckpointRequest()
    for name, (op, body) in channels:
        w = req.channels[name]
        if op == "value":
            _fill_value(w.value, body)
        elif op == "keep":
            w.keep = body
        elif op == "delta":
            append, keep_first, sets, deletes, base_root = body
            w.delta.SetInParent()
            for item in append:
                _fill_value(w.delta.append.add(), item)
            if keep_first is not None:
                w.delta.keep_first = keep_first
            for k, item in sets:
                _fill_value(w.delta.set[k], item)
            w.delta.delete.extend(deletes)
            w.delta.base_root = base_root
        else:
            w.SetInParent()
    return req


def _put_channels(impl, req, has_base):
    built: list = []
    got = api_outcome(impl.put_channels, req.channels, built, has_base, "parent_checkpoint_id")
    return got, built if got[0] == "ok" else None


@SETTINGS
@given(channels=st.lists(st.tuples(_names, write_specs), max_size=4), has_base=st.booleans())
def test_cross_put_channels(channels, has_base):
    """A put's channel writes converted by the compiled walk: exactly the twin's ops, nodes and errors (field
    names included)."""
    req = request_of(channels)
    assert _put_channels(_c(), req, has_base) == _put_channels(_py(), req, has_base)


@SETTINGS
@given(channels=st.lists(st.tuples(st.text(min_size=1, max_size=6), write_specs.filter(lambda w: w[0] != "none")),
                         max_size=4))
def test_cross_put_channels_valid_names(channels):
    """As above, with a base and good names: mostly puts that convert (trees built, items encoded)."""
    req = request_of(channels)
    assert _put_channels(_c(), req, True) == _put_channels(_py(), req, True)


@SETTINGS
@given(spec=value_specs, depth=st.integers(0, 3))
def test_cross_wire_values(spec, depth):
    """wire_encoding, wire_tree, wire_items and wire_entries of any Value: the twin's bytes, nodes, errors."""
    py, c = _py(), _c()
    v = value_of(spec)
    assert api_outcome(c.wire_encoding, v, "f", depth) == api_outcome(py.wire_encoding, v, "f", depth)
    n1: list = [(b"h", b"kept")]
    n2: list = [(b"h", b"kept")]
    assert api_outcome(c.wire_tree, v, "f", n1) == api_outcome(py.wire_tree, v, "f", n2)
    assert n1 == n2  # (a refusal leaves what the twin leaves)
    items = [v, value_of(("msgpack", b"\x01"))]
    assert api_outcome(c.wire_items, items, "g") == api_outcome(py.wire_items, items, "g")
    entries = {"k": v, "a": value_of(("msgpack", b"\xc0"))}
    assert api_outcome(c.wire_entries, entries, "m") == api_outcome(py.wire_entries, entries, "m")


def test_wire_errors_name_the_field_path():
    """The compiled walk's refusals name the field down to the value at fault, as the twin's do."""
    deep = ("msgpack", b"\x01")
    for _ in range(65):  # the 65th list is at depth 64
        deep = ("list", [deep])
    bad = ("map", [("k", ("list", [("msgpack", b"\x01"), ("msgpack", b"\xc1")]))])
    for impl in (_c(), _py()):
        e = api_outcome(impl.wire_encoding, value_of(bad), "channels['x'].value")
        assert e[:2] == ("error", "UNSUPPORTED_VALUE")
        assert e[3]["field"] == "channels['x'].value.map.entries['k'].list.items[1].msgpack"
        e = api_outcome(impl.wire_encoding, value_of(deep), "v")
        assert e[1] == "UNSUPPORTED_VALUE" and e == api_outcome(_py().wire_encoding, value_of(deep), "v")
        assert api_outcome(impl.wire_encoding, value_of(deep[1][0]), "v")[0] == "ok"  # one level less
        req = request_of([("b", ("delta", ([("msgpack", b"\x01"), ("none", None)], None, [], [], b""))),
                          ("a", ("keep", True))])
        built = [(b"h", b"kept")]
        e = api_outcome(impl.put_channels, req.channels, built, True, "parent_checkpoint_id")
        assert e[3]["field"] == "channels['b'].delta.append[1]"
        assert built == [(b"h", b"kept")]
        e = api_outcome(impl.put_channels, req.channels, [], False, "base_checkpoint_id")
        assert e[:2] == ("error", "BASE_MISMATCH") and e[3]["field"] == "base_checkpoint_id"


def test_put_channels_output():
    """What the compiled call hands over for a typical put: sorted ops, trees in ``built``, the twin's bytes."""
    req = request_of([("messages", ("delta", ([("msgpack", codec.encode({"role": "user"}))], 3,
                                              [("k", ("msgpack", b"\x02"))], ["d"], b"r"))),
                      ("context", ("keep", True)),
                      ("step", ("value", ("msgpack", codec.encode([1, 2])))),
                      ("opq", ("value", ("opaque", ("t", b"data"))))])
    b1: list = []
    b2: list = []
    ops = _c().put_channels(req.channels, b1, True, "parent_checkpoint_id")
    assert ops == _py().put_channels(req.channels, b2, True, "parent_checkpoint_id") and b1 == b2
    assert [op[:3] for op in ops] == [("context", "keep", "channels['context']"),
                                      ("messages", "delta", "channels['messages']"),
                                      ("opq", "value", "channels['opq']"), ("step", "value", "channels['step']")]
    assert ops[1][4:] == ([codec.encode({"role": "user"})], 3, [("k", b"\x02")], ["d"], b"r")
    n: list = []
    py = _py()
    assert ops[2][3] == py.value_node(py.encode_opaque("t", b"data"), n)
    assert ops[3][3] == py.build_list([b"\x01", b"\x02"], n)
    assert b1 == n  # (only whole values build nodes)


# ----------------------------------------------------------------- deltas of stored values (list_delta, map_delta)

_dspec = importlib.util.spec_from_file_location("golden_generate_deltas", GOLDEN / "generate_deltas.py")
golden_deltas = importlib.util.module_from_spec(_dspec)
_dspec.loader.exec_module(golden_deltas)
DELTAS = json.loads((GOLDEN / "deltas.json").read_text())


def test_golden_deltas_cover_the_cases():
    assert DELTAS["format"] == golden._format_name()
    assert [(e["n"], e["keep_first"], e["append"]) for e in DELTAS["lists"]] == golden_deltas.list_cases()
    assert [e["name"] for e in DELTAS["maps"]] == [c[0] for c in golden_deltas.map_cases()]
    assert any("error" in e for e in DELTAS["lists"]) and any("error" in e for e in DELTAS["maps"])


@pytest.mark.parametrize("entry", DELTAS["lists"], ids=lambda e: f"n{e['n']}-k{e['keep_first']}-a{e['append']}")
def test_golden_list_delta(impl, entry):
    got = golden_deltas.run_list(impl, entry["n"], entry["keep_first"], entry["append"])
    assert got == {k: v for k, v in entry.items() if k not in ("n", "keep_first", "append")}


@pytest.mark.parametrize("entry", DELTAS["maps"], ids=lambda e: e["name"])
def test_golden_map_delta(impl, entry):
    case = {c[0]: c for c in golden_deltas.map_cases()}[entry["name"]]
    assert golden_deltas.run_map(impl, *case[1:]) == {k: v for k, v in entry.items() if k != "name"}


def test_list_delta_equals_the_whole_list(impl):
    """A delta's result is the root of the list sent whole (kept prefix + appended items)."""
    fetch, record = golden_deltas.list_base(impl, 70)
    items = [golden.item_encoding(i) for i in range(70)]
    new = [golden.item_encoding(500 + i) for i in range(5)]
    for keep in (None, 70, 69, 33, 8, 0):
        want = impl.build_list((items if keep is None else items[:keep]) + new, [])
        assert impl.list_delta(record, new, keep, fetch, {}, [], "f") == want
    assert impl.list_delta(record, [], None, fetch, {}, [], "f") == record[:32]


@SETTINGS
@given(n=st.integers(0, 200), keep=st.none() | st.integers(0, 210), appended=st.integers(0, 20))
def test_cross_list_delta(n, keep, appended):
    outs = []
    for impl in (_c(), _py()):
        fetch, record = golden_deltas.list_base(impl, n)
        known: dict = {}
        built: list = []
        got = api_outcome(impl.list_delta, record, [golden.item_encoding(i) for i in range(appended)], keep, fetch,
                          known, built, "f")
        outs.append((got, known, built))
    assert outs[0] == outs[1]


def test_list_delta_missing_record_is_corrupt(impl):
    fetch, record = golden_deltas.list_base(impl, 20)
    with pytest.raises(impl.CorruptNode):
        impl.list_delta(record, [b"\x01"], 5, lambda node_id: None, {}, [], "f")
    with pytest.raises(impl.CorruptNode):
        impl.list_delta(record, [b"\x01"], None, lambda node_id: None, {}, [], "f")
