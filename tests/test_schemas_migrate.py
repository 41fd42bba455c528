"""List items migrated on read in their bytes (sidecar/storage/migrate: _migrate_c and its pure twin _migrate_py),
checked against the engine it stands in for (state/schemas.py: decode, the map_items' inner steps, encode):
on random items and random step programs the fast path gives the engine's bytes or leaves the item to it
(None), never something else; the two twins give the same answer, byte for byte, None included; a list read
through ``_migrate_items`` equals the engine's item by item, an item the fast path leaves (a failing convert)
fails with the engine's error and path; and a read over the API of a value migrated this way equals the
client-side migration of the same value."""
from __future__ import annotations

import datetime
import decimal
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstate import Opaque, codec
from agentstate import schemas as s

from sidecar.state import schemas as engine
from sidecar.storage import _migrate_py as mpy
from sidecar.storage import hotpath as hp
from sidecar.storage import migrate
from sidecar.storage.layout import MigrationStepRec, SchemaVersionRec

try:
    from sidecar.storage import _migrate_c as mc
except ImportError:  # the pure build: the twin is checked against the engine alone
    mc = None

TWINS = [mpy] + ([mc] if mc is not None else [])
TYPES = {"string": 1, "int": 2, "float": 3, "bool": 4, "list": 5}


def _recs(steps) -> list[MigrationStepRec]:
    from sidecar.api.schemas import step_input
    return [step_input(x, f"s[{i}]") for i, x in enumerate(steps)]


def engine_item(inner_recs: list[MigrationStepRec], encoding: bytes):
    """The engine's answer for one item: ("ok", encoding) or ("error", message)."""
    rec = MigrationStepRec("map_items", ["m"], steps=inner_recs)
    op = engine._compile(rec, 2, 0)
    try:
        return "ok", engine.encode(engine.map_item(op.inner, engine.decode(encoding), ((), ["m"], 0)))
    except engine.MigrationError as e:
        return "error", str(e)


def program_of(inner_recs):
    """(pure program, compiled program or None) of the steps, or (None, None)."""
    return mpy.program(_tuples(inner_recs)), (mc.program(_tuples(inner_recs)) if mc is not None else None)


def _tuples(inner_recs):
    out = []
    for x in inner_recs:
        if x.kind == "convert" and not x.path:
            out.append(("convert", None, x.type))
        elif x.kind == "rename":
            out.append(("rename", x.path[0].encode(), x.to.encode()))
        elif x.kind == "drop":
            out.append(("drop", x.path[0].encode()))
        elif x.kind == "add":
            out.append(("add", x.path[0].encode(), x.default))
        else:
            out.append(("convert", x.path[0].encode(), x.type))
    return out


# ---------------------------------------------------------------- random items and programs

FIELDS = ["a", "b", "tokens", "text", "é", "zz", "a" * 40]
_scalars = (st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70)
            | st.sampled_from([0, 1, -1, 31, 32, -32, -33, 127, 128, 255, 256, -128, -129, 2 ** 31, -2 ** 31 - 1,
                               2 ** 63, 2 ** 64 - 1, -2 ** 63])
            | st.floats(allow_nan=True) | st.text(max_size=40)
            | st.sampled_from(["12", "-7", "007", "-0", "", "-", "1.5", "true", "false", "9" * 18, "9" * 19,
                               "0" * 25 + "5", "١٢", "12 "])
            | st.binary(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=4),
                       max_leaves=12)
_items = st.dictionaries(st.sampled_from(FIELDS), _values, max_size=6) | _values
_ext = st.sampled_from([Opaque("fw/serde", b"\x00\x01"), datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
                        uuid.UUID(int=7), decimal.Decimal("1.5"), {1, 2}, 2 ** 90])


def _step():
    field = st.sampled_from(FIELDS)
    return st.one_of(
        st.builds(s.rename, field, field),
        st.builds(s.drop, field),
        st.builds(s.add, field, _values),
        st.builds(s.convert, field, st.sampled_from(sorted(TYPES))),
        st.builds(lambda t: s.convert([], t), st.sampled_from(sorted(TYPES))))


def check(inner, item_encoding: bytes) -> None:
    recs = _recs(inner)
    want = engine_item(recs, item_encoding)
    prog_py, prog_c = program_of(recs)
    assert prog_py is not None and (mc is None or prog_c is not None)
    got_py = mpy.apply_item(prog_py, item_encoding)
    if mc is not None:
        assert mc.apply_item(prog_c, item_encoding) == got_py  # the twins: the same bytes, None alike
    if got_py is not None:
        assert want == ("ok", got_py)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_step(), max_size=6), _items)
def test_fast_path_equals_the_engine_on_random_items_and_programs(inner, item):
    check(inner, codec.encode(item))


@settings(max_examples=300, deadline=None)
@given(st.lists(_step(), min_size=1, max_size=4), st.dictionaries(st.sampled_from(FIELDS), _ext, max_size=3))
def test_extension_values_move_as_the_engine_moves_them(inner, item):
    check(inner, codec.encode(item))


def test_the_common_steps_take_the_fast_path():
    """Not only 'None or right': the steps of a typical map_items are answered by the fast path."""
    inner = [s.rename("text", "content"), s.convert("tokens", "int"), s.add("meta", {}), s.drop("old")]
    item = codec.encode({"role": "user", "text": "hi " * 50, "tokens": "12", "old": [1, 2]})
    recs = _recs(inner)
    for twin in TWINS:
        out = twin.apply_item(twin.program(_tuples(recs)), item)
        assert out is not None and ("ok", out) == engine_item(recs, item)
    tags = _recs([s.convert([], "string")])
    for twin in TWINS:
        prog = twin.program(_tuples(tags))
        assert [twin.apply_item(prog, codec.encode(v)) for v in (1, True, "x", -40, 2 ** 64 - 1, None)] == [
            codec.encode(v) for v in ("1", "true", "x", "-40", str(2 ** 64 - 1), None)]


@pytest.mark.parametrize("raw", [
    b"\xcc\x05",  # uint8 for a fixint
    b"\xd0\x05",  # int8 for a positive
    b"\xd0\xf0",  # int8 for a negative fixint
    b"\xca\x3f\x80\x00\x00",  # float32
    b"\xd9\x01a",  # str8 for a fixstr
    b"\xa1\xff",  # invalid UTF-8
    b"\xa3\xed\xa0\x80",  # a surrogate
    b"\x82\xa1b\x01\xa1a\x02",  # keys out of order
    b"\x82\xa1a\x01\xa1a\x02",  # a repeated key
    b"\x81\x01\x02",  # an int key
    b"\xd6\xff\x00\x00\x00\x01",  # the timestamp extension (msgspec decodes it as a datetime)
    b"\xc7\x01\x05\x00",  # ext8 for a fixext 1
    b"\xc1",  # never used
    b"\x91",  # truncated
    b"\x01\x02",  # two values
    b"\xde\x00\x01\xa1a\x01",  # map16 for a fixmap
])
def test_bytes_msgspec_would_not_write_back_are_left_to_the_engine(raw):
    inner = _recs([s.rename("a", "c"), s.convert([], "list")])
    for twin in TWINS:
        assert twin.is_normal(raw) is False
        for steps in (inner[:1], inner[1:]):
            assert twin.apply_item(twin.program(_tuples(steps)), raw) is None


@settings(max_examples=500, deadline=None)
@given(_values)
def test_every_canonical_encoding_without_timestamps_is_normal_in_both_twins(value):
    enc = codec.encode(value)
    want = _normal_by_round_trip(enc)
    for twin in TWINS:
        assert twin.is_normal(enc) is want


def _normal_by_round_trip(enc: bytes) -> bool:
    try:
        return engine.encode(engine.decode(enc)) == enc
    except Exception:  # noqa: BLE001
        return False


@settings(max_examples=800, deadline=None)
@given(st.binary(max_size=24))
def test_normal_means_msgspec_writes_it_back_on_random_bytes(raw):
    """Random bytes: whatever a twin calls normal, msgspec decodes and writes back unchanged; the twins agree."""
    verdicts = {twin.is_normal(raw) for twin in TWINS}
    assert len(verdicts) == 1
    if verdicts.pop():
        assert _normal_by_round_trip(raw)


def test_programs_refuse_what_they_do_not_run():
    for twin in TWINS:
        assert twin.program([("nest", b"a", b"b")]) is None
        assert twin.program([("rename", b"a", "b")]) is None
        assert twin.program([("add", b"a", b"\xcc\x01")]) is None  # a default msgspec would write otherwise
        assert twin.program([("convert", b"a", 9)]) is None
        assert twin.program([("rename", b"\xff", b"b")]) is None
        assert twin.program([]) is not None
    nested = _recs([s.map_items("m", s.rename(["a", "b"], "c"))])[0].steps
    assert engine.item_program(nested) is None
    assert engine.item_program(_recs([s.map_items("m", s.rename("a", "c"))])[0].steps) is not None


# ---------------------------------------------------------------- a stored list, through _migrate_items

def _stored_list(encodings: list[bytes]) -> tuple[bytes, dict]:
    """A stored list root record of fewer than 8 items (only a tail) and {id: record} of it and its items."""
    assert len(encodings) < 8  # LEAF_ITEMS: no leaf nodes
    recs: dict[bytes, bytes] = {}
    ids = []
    for n, enc in enumerate(encodings):
        node_id = (1000 + n).to_bytes(hp.ID_SIZE, "big")
        recs[node_id] = hp.hash_bytes(b"v" + enc) + b"v" + enc
        ids.append(node_id)
    root = hp.hash_bytes(b"root") + b"L" + len(ids).to_bytes(8, "big") + b"".join(ids)
    return root, recs


def _plan(inner) -> engine.Plan:
    return engine.compile_plan([SchemaVersionRec(2, _recs([s.map_items("m", *inner)]))])


def _engine_items(plan: engine.Plan, encodings: list[bytes]):
    doc = {"m": [engine.decode(e) for e in encodings]}
    for op in plan.ops:
        op(doc, ())
    out = [engine.encode(x) for x in doc["m"]]
    return out, hp.list_append(None, [hp.value_node(e, []) for e in out], [])


@settings(max_examples=150, deadline=None)
@given(st.lists(_step(), min_size=1, max_size=5), st.lists(st.dictionaries(st.sampled_from(FIELDS), _values, max_size=4),
                                              max_size=7))
def test_a_stored_list_migrates_as_the_engine_migrates_it(inner, items):
    plan = _plan(inner)
    assert "m" in plan.itemwise and ("m" in plan.programs) is migrate.NATIVE  # pure build: the engine's path
    encodings = [codec.encode(x) for x in items]
    root, recs = _stored_list(encodings)
    try:
        want = _engine_items(plan, encodings)
    except engine.MigrationError as e:
        want = e
    recs_ = _recs(inner)
    for twin in TWINS:  # each twin's list loop, whichever build this is
        fallback = lambda n, stored: engine.encode(engine.map_item(plan.itemwise["m"], engine.decode(stored),  # noqa: E731
                                                                    ((), ["m"], n)))
        try:
            encs, hashes, fresh = twin.migrate_list(twin.program(_tuples(recs_)), root, recs.get, {}, b"p", fallback)
        except engine.MigrationError as e:
            assert isinstance(want, engine.MigrationError) and (str(e), e.path) == (str(want), want.path)
        else:
            assert (encs, hp.list_append(None, hashes, [])) == want
            assert [hit for _, hit in fresh] == list(zip(encs, hashes))
    engine._items.entries.clear()
    for _ in range(2):  # then from the item cache
        try:
            got = engine._migrate_items(plan, "m", root, recs.get)
        except engine.MigrationError as e:
            assert isinstance(want, engine.MigrationError) and (str(e), e.path) == (str(want), want.path)
        else:
            assert got == want


def test_an_item_the_fast_path_leaves_fails_with_the_engines_error_and_path():
    plan = _plan([s.convert("tokens", "int")])
    root, recs = _stored_list([codec.encode({"tokens": "1"}), codec.encode({"tokens": "x"}),
                               codec.encode({"tokens": "also bad"})])
    with pytest.raises(engine.MigrationError) as e:
        engine._migrate_items(plan, "m", root, recs.get)
    assert e.value.path == ["m", "1", "tokens"] and "cannot convert 'x' to int" in str(e.value)


def test_a_missing_item_node_is_a_corrupt_node_in_both_twins():
    prog_recs = _recs([s.drop("a")])
    root, recs = _stored_list([codec.encode({"a": 1}), codec.encode({"a": 2})])
    del recs[(1001).to_bytes(hp.ID_SIZE, "big")]
    for twin in TWINS:
        with pytest.raises(hp.CorruptNode, match="missing node"):
            twin.migrate_list(twin.program(_tuples(prog_recs)), root, recs.get, {}, b"p", None)


def test_the_selector_picks_the_build():
    import os
    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert migrate.implementation is mpy and migrate.NATIVE is False
    else:
        assert migrate.implementation is mc and migrate.NATIVE is True


# ---------------------------------------------------------------- over the API

def test_a_read_migrated_on_the_fast_path_equals_the_client_side_migration(nsclient, tid):
    from agentstate import checkpoint_values
    v2 = [s.map_items("messages", s.rename("text", "content"), s.convert("tokens", "int"), s.add("meta", {}),
                      s.drop("junk"), s.convert("flag", "bool"), s.convert("n", "string"), s.convert("x", "float")),
          s.map_items("tags", s.convert([], "list"))]
    nsclient.schemas.register("fast", [[], v2])
    messages = [{"role": "user", "text": f"{i} " + "é" * (i * 7), "tokens": str(i * 1000), "junk": [i, {"b": None}],
                 "flag": "true" if i % 2 else 0, "n": -i * 70000, "x": i, "content_not": 1.5}
                for i in range(40)]
    value = {"messages": messages, "tags": [1, [2], "x", None, {"k": b"\x00"}]}
    nsclient.put_checkpoint(tid, value, schema="fast", schema_version=1)
    got = nsclient.get_checkpoint(tid, read_schema_version=2)
    assert got.migration == engine.STATUS_MIGRATED
    values = checkpoint_values(got)
    expected = {"messages": [{"role": m["role"], "content": m["text"], "tokens": int(m["tokens"]), "meta": {},
                              "flag": m["flag"] in ("true", 1), "n": str(m["n"]), "x": float(m["x"]),
                              "content_not": 1.5} for m in messages],
                "tags": [[1], [2], ["x"], None, [{"k": b"\x00"}]]}
    assert values == expected
    # and as the engine migrates the same value
    doc = {k: engine.decode(codec.encode(v)) for k, v in value.items()}
    engine.apply(doc, [SchemaVersionRec(2, _recs(v2))])
    assert {k: codec.encode(v) for k, v in values.items()} == {k: engine.encode(v) for k, v in doc.items()}


# ---------------------------------------------------------------- a stored list tree, by its subtrees

from sidecar.storage import _hotpath_py as hpy  # noqa: E402
from sidecar.storage import _reads_py as rpy  # noqa: E402
from sidecar.storage import compression, reads  # noqa: E402


class _Tree:
    """id -> record of stored lists as the server keeps them (hash + stored node), every fetch logged."""

    def __init__(self) -> None:
        self.records: dict[bytes, bytes] = {}
        self.ids: dict[bytes, bytes] = {}
        self.log: list[bytes] = []

    def add(self, encodings: list[bytes]) -> bytes:
        """Store a list of ``encodings``; its root record."""
        built: list = []
        root = hpy.build_list(encodings, built)
        for h, node in built:
            if h not in self.ids:
                node_id = (len(self.records) + 1).to_bytes(hp.ID_SIZE, "big")
                self.records[node_id] = h + hpy.stored_node(node, self.ids.__getitem__)
                self.ids[h] = node_id
        return self.records[self.ids[root]]

    def fetch(self, node_id: bytes):
        self.log.append(node_id)
        return self.records.get(node_id)


def _fresh() -> None:
    engine._items.clear()
    engine._subtrees.clear()


def _check_list(plan: engine.Plan, tree: _Tree, encodings: list[bytes]):
    """``_migrate_items`` of the stored list of ``encodings`` equals the engine on the whole list: the same
    encodings, the root ``hp.list_append`` builds, the wire bytes of those items (item by item, both twins)."""
    root = tree.add(encodings)
    want = _engine_items(plan, encodings)
    got, h = engine._migrate_items(plan, "m", root, tree.fetch)
    assert (list(got), h) == want
    wire = b"".join(got.wire)
    assert wire == rpy.items_wire(want[0]) == reads.items_wire(want[0])
    from agentstate.v1 import values_pb2
    from sidecar.api import wire as api_wire
    v = values_pb2.ListValue()
    for enc in want[0]:
        api_wire.set_value(v.items.add(), enc)
    assert wire == v.SerializeToString()  # what GetCheckpoint built item by item before
    return root, got


_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "ai"]), "text": st.text(max_size=30),
                                  "tokens": st.sampled_from(["1", "22", "x", 7, "-3"])},
                                 optional={"junk": _values, "a": _values})


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, max_size=70), st.integers(min_value=0, max_value=3))
def test_a_stored_list_tree_migrates_by_subtrees_as_the_engine_migrates_it(items, seed):
    plan = _plan([s.rename("text", "content"), s.convert("tokens", "int"), s.add("meta", {}), s.drop("junk")])
    tree = _Tree()
    encodings = [codec.encode(x) for x in items]
    _fresh()
    try:
        want = _engine_items(plan, encodings)
    except engine.MigrationError as e:
        want = e
    for _ in range(3):  # cold; then from the subtrees kept; then from the items kept alone
        try:
            _check_list(plan, tree, encodings)
        except engine.MigrationError as e:
            assert isinstance(want, engine.MigrationError) and (str(e), e.path) == (str(want), want.path)
        else:
            assert not isinstance(want, engine.MigrationError)
        engine._subtrees.clear()
    # successive versions of the list (appended, last changed, one in the middle changed, cut), each as the
    # engine migrates it, with what the reads before kept
    good = [e for e, x in zip(encodings, items) if type(x["tokens"]) is int or x["tokens"].lstrip("-").isdigit()]
    nxt = [codec.encode({"role": "ai", "text": f"v{seed}/{i}", "tokens": str(i)}) for i in range(12)]
    for version in (good, good + nxt[:1], good + nxt[:9], good[:-1] + nxt[1:2], good[: len(good) // 2] + nxt,
                    nxt[:3] + good, good[:5]):
        _check_list(plan, tree, version)


def test_only_the_changed_part_of_a_list_is_read_again():
    plan = _plan([s.rename("text", "content"), s.convert("tokens", "int")])
    tree = _Tree()
    msgs = [codec.encode({"role": "user", "text": f"m{i}", "tokens": str(i)}) for i in range(203)]
    _fresh()
    _check_list(plan, tree, msgs[:200])  # 25 leaves: peaks of 16, 8 and 1 leaves
    assert len(engine._subtrees.entries) == 25 + 2  # every leaf, and the two peaks above leaves
    tree.log.clear()
    _check_list(plan, tree, msgs[:200])
    assert len(tree.log) == 3  # the peaks, kept
    tree.log.clear()
    _check_list(plan, tree, msgs[:203])
    assert len(tree.log) == 3 + 3  # the same peaks, kept, and the three tail items
    changed = msgs[:199] + [codec.encode({"role": "ai", "text": "new", "tokens": "9"})]
    tree.log.clear()
    _check_list(plan, tree, changed)
    assert len(tree.log) == 2 + 1 + 8  # two peaks kept; the last leaf, new, and its items (7 of them kept)


def test_a_subtree_holding_a_chunked_item_is_not_kept():
    plan = _plan([s.drop("junk")])
    tree = _Tree()
    msgs = [codec.encode({"i": i, "junk": 1}) for i in range(16)]
    msgs[3] = codec.encode({"i": 3, "big": "q" * (hpy.CHUNK_THRESHOLD + 10)})
    _fresh()
    root, _ = _check_list(plan, tree, msgs)
    leaves = [r[:32] for r in tree.records.values() if r[32:33] == b"l"]
    kept = [plan.key + b"m\x00" + h in engine._subtrees.entries for h in leaves]
    assert sorted(kept) == [False, True]  # the leaf with the chunked item is not kept, the other is
    assert not any(plan.key + b"m\x00" + r[:32] in engine._subtrees.entries
                   for r in tree.records.values() if r[32:33] == b"n")  # nor the peak above both
    _check_list(plan, tree, msgs)  # and read again as the engine migrates it


def test_a_failing_item_after_a_kept_subtree_names_its_index():
    plan = _plan([s.convert("tokens", "int")])
    tree = _Tree()
    good = [codec.encode({"tokens": str(i)}) for i in range(16)]
    _fresh()
    _check_list(plan, tree, good)
    bad = good[:8] + good[8:11] + [codec.encode({"tokens": "nope"})] + good[12:]
    with pytest.raises(engine.MigrationError) as e:
        engine._migrate_items(plan, "m", tree.add(bad), tree.fetch)
    assert e.value.path == ["m", "11", "tokens"] and "cannot convert 'nope' to int" in str(e.value)
    del tree.records[tree.ids[hp.hash_bytes(b"v" + good[9])]]
    engine._subtrees.clear()
    with pytest.raises(hp.CorruptNode, match="missing node"):
        engine._migrate_items(plan, "m", tree.add(good), tree.fetch)


def test_migrate_items_twins_agree_from_an_offset():
    recs_ = _recs([s.rename("a", "b"), s.convert("n", "int")])
    tree = _Tree()
    encs = [codec.encode({"a": i, "n": str(i)}) for i in range(6)] + [codec.encode({"n": "x"}), codec.encode(
        {"n": "q" * (hpy.CHUNK_THRESHOLD + 1)})]
    root = tree.add(encs + [codec.encode(0)])
    ids = hp.stored_list_ids(root, tree.fetch)[:8]
    plan = _plan([s.rename("a", "b"), s.convert("n", "int")])
    outs = []
    for twin in TWINS:
        seen = []

        def fallback(n, stored):
            seen.append(n)
            return b"\xa4left"  # what the engine would say stands in here: the index is what is checked

        got = twin.migrate_items(twin.program(_tuples(recs_)), ids[2:], tree.fetch, {}, b"p", fallback, 10)
        outs.append((got, seen))
        assert seen == [14, 15]  # the item that does not convert and the chunked one, at their list index
        assert got[3] is False  # a chunked item's record: not a plain value node
        assert twin.migrate_items(twin.program(_tuples(recs_)), ids[:3], tree.fetch, {}, b"p", fallback)[3] is True
        assert twin.migrate_list(twin.program(_tuples(recs_)), root, tree.fetch, {}, b"p",
                                 lambda n, stored: b"\xc0")[0][:6] == [engine.encode({"b": i, "n": i}) for i in range(6)]
    assert outs[0] == outs[-1]
    assert plan.itemwise  # (the engine's plan for the same steps takes the list item-wise)


# ---------------------------------------------------------------- over the API: migrated == stored at the version

def test_first_reads_of_migrated_checkpoints_equal_the_same_state_stored_at_the_version(nsclient, tid):
    """Checkpoints stored at version 1 and read at 3 (each read the first of its checkpoint, sharing messages
    with the ones before, as a thread's do) answer exactly what the same state stored at version 3 answers:
    the same channel values and roots, spliced (GetCheckpoint), parsed item by item (ListCheckpoints), or
    only the root (known_roots); and the values the engine gives for the stored ones."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_schemas import _states  # the state at version 1 and at 3
    from agentstate import checkpoint_values
    from test_schemas import V2, V3

    nsclient.schemas.register("agent", [[], V2, V3])
    for n in (1, 9, 70):
        for k in range(4):
            v1, v3 = _states(n, k, unshared=k == 3)
            if k == 2:  # a longer list: the one before, appended to
                v1, v3 = _states(n + 5, k)
            nsclient.put_checkpoint(f"{tid}-old-{n}-{k}", v1, schema="agent", schema_version=1)
            nsclient.put_checkpoint(f"{tid}-new-{n}-{k}", v3, schema="agent", schema_version=3)
            a = nsclient.get_checkpoint(f"{tid}-old-{n}-{k}", read_schema_version=3)
            b = nsclient.get_checkpoint(f"{tid}-new-{n}-{k}", read_schema_version=3)
            assert a.migration == engine.STATUS_MIGRATED and b.migration == engine.STATUS_CURRENT
            assert a.channels == b.channels and checkpoint_values(a) == v3
            again = nsclient.get_checkpoint(f"{tid}-old-{n}-{k}", read_schema_version=3)
            assert again.channels == b.channels
            listed = list(nsclient.list_checkpoints(f"{tid}-old-{n}-{k}", include_values=True,
                                                    read_schema_version=3))
            assert [c.channels for c in listed] == [b.channels]
            known = {"messages": b.channels["messages"].root}
            ka = nsclient.get_checkpoint(f"{tid}-old-{n}-{k}", read_schema_version=3, known_roots=known)
            kb = nsclient.get_checkpoint(f"{tid}-new-{n}-{k}", read_schema_version=3, known_roots=known)
            assert ka.channels["messages"] == kb.channels["messages"] == pb_root(b.channels["messages"].root)
            # the engine on the stored values
            stored = checkpoint_values(nsclient.get_checkpoint(f"{tid}-old-{n}-{k}"))
            doc = {ch: engine.decode(codec.encode(v)) for ch, v in stored.items()}
            engine.apply(doc, [SchemaVersionRec(2, _recs(V2)), SchemaVersionRec(3, _recs(V3))])
            assert {ch: codec.encode(v) for ch, v in checkpoint_values(a).items()} == \
                {ch: engine.encode(v) for ch, v in doc.items()}


def pb_root(root: bytes):
    from agentstate.v1 import threads_pb2 as pb
    return pb.ChannelValue(root=root)
