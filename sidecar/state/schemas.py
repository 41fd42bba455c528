"""schemas: a namespace's schema registry and the migration engine (docs/lifecycle.md).

A schema has versions 1..N; version k > 1 holds the declared steps (layout.MigrationStepRec) that turn a value of
version k-1 into one of version k. The engine applies them to a *document*: a map from names to plain Python
values as the canonical decoder gives them (None, bool, int, float, str, bytes, list, dict, and
``msgspec.msgpack.Ext`` for the extension types: datetimes, UUIDs, decimals, sets, big ints, opaque values).
For a checkpoint the document is its channels. A top-level entry may be an :class:`Unread` (a stored value
not decoded yet): steps that only move, rename or drop a whole entry leave it unread, so a read pays only for
the channels a migration looks into.

Nothing here knows protobuf or gRPC; the window and the failure policy are decided here (:func:`plan`), what
a failed read returns is the api layer's business.
"""
from __future__ import annotations

import itertools
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import msgspec
from agentstate.codec import bigint_payload
from blake3 import blake3

from ..errors import ApiError
from ..storage import hotpath as hp
from ..storage import compression, encryption, layout, migrate, nodes, reads, records
from ..storage.layout import SchemaRec, SchemaVersionRec, MigrationStepRec

# FailurePolicy (schemas.proto); 0 behaves as FAIL
POLICY_UNSPECIFIED, POLICY_FAIL, POLICY_DEGRADE, POLICY_NEW_RUN = 0, 1, 2, 3
# ValueType (schemas.proto)
TYPE_STRING, TYPE_INT, TYPE_FLOAT, TYPE_BOOL, TYPE_LIST = 1, 2, 3, 4, 5
TYPE_NAMES = {TYPE_STRING: "string", TYPE_INT: "int", TYPE_FLOAT: "float", TYPE_BOOL: "bool", TYPE_LIST: "list"}
# MigrationStatus (schemas.proto)
STATUS_NONE, STATUS_CURRENT, STATUS_MIGRATED, STATUS_DEGRADED, STATUS_NEW_RUN, STATUS_UNREGISTERED = range(6)

KINDS = ("rename", "drop", "add", "nest", "unnest", "convert", "map_items")
MAX_VERSIONS = 1000
MAX_STEPS = 1000  # per version, nested ones counted
MAX_DEPTH = 16  # map_items inside map_items
EXT_OPAQUE = 6

_decoder = msgspec.msgpack.Decoder(ext_hook=msgspec.msgpack.Ext)
_encoder = msgspec.msgpack.Encoder()
_sorted = msgspec.msgpack.Encoder(order="sorted")
_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


class MigrationError(Exception):
    """A step could not be applied: ``version`` is the version the step leads to, ``path`` where it failed."""

    def __init__(self, version: int, step: int, path: list[str], message: str) -> None:
        where = "/".join(path) or "(top)"
        super().__init__(f"version {version} step {step} at {where!r}: {message}")
        self.version, self.step, self.path = version, step, path


class Unreadable(Exception):
    """The stored version is outside what the schema and the reader allow."""

    def __init__(self, message: str, stored: int, read: int, min_readable: int) -> None:
        super().__init__(message)
        self.stored, self.read, self.min_readable = stored, read, min_readable


class Unread:
    """A document entry not decoded yet: ``load()`` gives its value. ``ref`` is what the caller stores it
    by (a root node id), so an entry the steps never looked into keeps its stored tree."""

    __slots__ = ("ref", "load")

    def __init__(self, ref: Any, load: Callable[[], Any]) -> None:
        self.ref, self.load = ref, load


# ----------------------------------------------------------------- values

def decode(encoding: bytes) -> Any:
    """A canonical encoding as Python values (extension types kept as ``msgspec.msgpack.Ext``)."""
    return _decoder.decode(encoding)


def encode(value: Any) -> bytes:
    """The canonical encoding of a (migrated) value. Values decoded from canonical encodings and changed by
    the steps are canonical once encoded with sorted map keys: msgspec writes the shortest ints, every
    float as float64, extension values as they were (tests/test_schemas.py checks it against canonicalize)."""
    try:
        return _sorted.encode(value)
    except (OverflowError, TypeError):  # e.g. a non-string map key: let the canonical encoder say
        return hp.canonicalize(_encoder.encode(value))


def parts(value: Any) -> tuple[int, Any]:
    """(KIND_LIST, [item encodings]), (KIND_MAP, [(key, encoding)] sorted) or (KIND_SCALAR, encoding): what a
    tree of ``value`` is built from and what a read sends (lists item by item, maps entry by entry)."""
    t = type(value)
    if t is list:
        return hp.KIND_LIST, [encode(x) for x in value]
    if t is dict and all(type(k) is str for k in value):
        return hp.KIND_MAP, [(k, encode(value[k])) for k in sorted(value)]
    return hp.KIND_SCALAR, encode(value)


def tree_of(shape: int, payload: Any, nodes: list) -> bytes:
    """Build a channel value tree from :func:`parts`; return its root hash (``nodes`` gets the nodes)."""
    if shape == hp.KIND_LIST:
        return hp.build_list(payload, nodes)
    if shape == hp.KIND_MAP:
        return hp.build_map(payload, nodes)
    return hp.value_node(payload, nodes)


def tree(value: Any, nodes: list) -> bytes:
    """Build ``value`` as a channel value tree, as a put stores it; return its root hash."""
    return tree_of(*parts(value), nodes)


def is_opaque(value: Any) -> bool:
    return isinstance(value, msgspec.msgpack.Ext) and value.code == EXT_OPAQUE


# ----------------------------------------------------------------- the engine

def apply(doc: dict, versions: Iterable[SchemaVersionRec]) -> dict:
    """Apply the steps of ``versions`` (in order) to ``doc`` in place and return it; MigrationError when a
    step does not fit the value."""
    for v in versions:
        for op in compiled(v):
            op(doc, ())
    return doc


_COMPILED: dict[bytes, list] = {}


def compiled(v: SchemaVersionRec) -> list:
    """The steps of one version as functions ``op(map, where)`` (cached by the version's encoding)."""
    key = _encoder.encode(v)
    ops = _COMPILED.get(key)
    if ops is None:
        if len(_COMPILED) >= 1024:
            _COMPILED.clear()
        ops = _COMPILED[key] = [_compile(step, v.version, i) for i, step in enumerate(v.steps)]
    return ops


class Plan:
    """The steps of a run of versions compiled once (by their encoding). ``ops``: every top-level step, in
    order. ``itemwise``: {channel: inner steps} of the channels that no step touches but map_items over
    the channel itself (one or more, from any version): such a list is migrated item by item from its
    stored tree, each item's result kept by the item's hash (:data:`_items`), so the items a checkpoint
    shares with one read before are not decoded, migrated or encoded again. ``rest``: ``ops`` without
    those map_items (run with the item-wise channels left unread). ``programs``: {channel: the item-wise
    steps as a storage/migrate program} where they are ones it runs on an item's bytes (each item the
    program leaves to the engine goes through ``itemwise`` as before); empty in the pure build."""

    __slots__ = ("key", "ops", "rest", "itemwise", "partial", "programs")

    def __init__(self, key: bytes, ops: list, rest: list, itemwise: dict, partial: list,
                 programs: dict | None = None) -> None:
        self.key, self.ops, self.rest, self.itemwise, self.partial = key, ops, rest, itemwise, partial
        self.programs = programs or {}


_PLANS: dict[bytes, Plan] = {}


def compile_plan(versions: list[SchemaVersionRec]) -> Plan:
    raw = _encoder.encode(versions)
    plan = _PLANS.get(raw)
    if plan is not None:
        return plan
    steps = [(st, op) for v in versions for st, op in zip(v.steps, compiled(v))]
    itemwise: dict[str, list] = {}
    for ch in {st.path[0] for st, _ in steps if st.kind == "map_items" and len(st.path) == 1}:
        if all(_leaves(st, ch) for st, _ in steps):
            itemwise[ch] = [x for st, op in steps if st.kind == "map_items" and st.path == [ch] for x in op.inner]
    rest = [op for st, op in steps if not (st.kind == "map_items" and len(st.path) == 1 and st.path[0] in itemwise)]
    partial = [_skip_absent(op, st.path[0]) if st.kind == "add" else op for st, op in steps]
    programs = {}
    # only compiled: in pure Python the byte-level twin is slower than decode, steps, encode (the twin is the
    # reference the compiled module is checked against, tests/test_schemas_migrate.py)
    for ch in (itemwise if migrate.NATIVE else ()):
        prog = item_program([x for st, _ in steps if st.kind == "map_items" and st.path == [ch] for x in st.steps])
        if prog is not None:
            programs[ch] = prog
    plan = Plan(blake3(raw).digest()[:16], [op for _, op in steps], rest, itemwise, partial, programs)
    if len(_PLANS) >= 1024:
        _PLANS.clear()
    _PLANS[raw] = plan
    return plan


def item_program(inner: list[MigrationStepRec]):
    """The inner steps of a map_items as a storage/migrate program (the steps on an item's own fields:
    rename, drop, add, convert; a convert of the item itself), or None when one is not of those."""
    out = []
    for x in inner:
        if x.kind == "convert" and not x.path:
            out.append(("convert", None, x.type))
            continue
        if len(x.path) != 1:
            return None
        key = x.path[0].encode()
        if x.kind == "rename":
            out.append(("rename", key, x.to.encode()))
        elif x.kind == "drop":
            out.append(("drop", key))
        elif x.kind == "add":
            out.append(("add", key, x.default))
        elif x.kind == "convert":
            out.append(("convert", key, x.type))
        else:
            return None
    return migrate.program(out)


def _skip_absent(op, first: str):
    """An AddField for a partial document (:func:`migrate_partial`): skipped when its channel is absent."""
    def partial_op(doc, where):
        if first in doc:
            op(doc, where)
    return partial_op


def migrate_partial(rec: SchemaRec, name: str, ch: str, encoding: bytes, stored: int, read: int) -> tuple | None:
    """One channel's value without the rest of its checkpoint (a pending write, a channel history's write or
    seed) migrated from ``stored`` to ``read``: the document {ch: value} through the steps, skipping those
    about channels it lacks (an AddField too). Returns (channel, encoding) of the one entry left (renamed,
    nested or unnested by top-level steps), None when the steps dropped it; MigrationError when it became
    several channels; Unreadable as :func:`plan`."""
    versions = plan(rec, name, stored, read)
    doc = {ch: decode(encoding)}
    for op in compile_plan(versions).partial:
        op(doc, ())
    if not doc:
        return None
    if len(doc) > 1:
        raise MigrationError(read, 0, [ch], f"the value of channel {ch!r} became {len(doc)} channels "
                             f"({', '.join(sorted(doc))}): a single channel's value cannot be migrated so")
    (out, value), = doc.items()
    return out, encode(value)


def _leaves(st: MigrationStepRec, ch: str) -> bool:
    """Whether top-level step ``st`` leaves channel ``ch``'s value alone (but for map_items over ``ch``)."""
    if st.path and st.path[0] == ch:
        return st.kind == "map_items" and len(st.path) == 1
    if not st.path and st.kind in ("nest", "unnest"):
        return st.to != ch and ch not in st.fields
    return not (st.kind == "rename" and len(st.path) == 1 and st.to == ch)


class _ItemCache:
    """Migrated list items by (plan, channel, the stored item's hash) -> (canonical encoding, its value
    node's hash); bounded in
    bytes (the oldest half goes when full). Reads take no lock (a dict lookup); writes do."""

    MAX_BYTES = 32 << 20

    def __init__(self) -> None:
        self.entries: dict[bytes, tuple] = {}  # key -> (encoding, item hash)
        self.size = 0
        self.lock = threading.Lock()

    @staticmethod
    def cost(key: bytes, hit: tuple) -> int:
        return len(key) + len(hit[0]) + 128

    def put_many(self, fresh: list) -> None:
        """(key, hit) pairs, as :meth:`put` each."""
        if not fresh:
            return
        with self.lock:
            for key, hit in fresh:
                if key in self.entries:
                    continue
                self.entries[key] = hit
                self.size += self.cost(key, hit)
            self._trim()

    def put(self, key: bytes, hit: tuple) -> None:
        with self.lock:
            if key in self.entries:
                return
            self.entries[key] = hit
            self.size += self.cost(key, hit)
            self._trim()

    def _trim(self) -> None:
        if self.size > self.MAX_BYTES:
            for k in list(itertools.islice(self.entries, len(self.entries) // 2 + 1)):
                self.size -= self.cost(k, self.entries.pop(k))

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.size = 0


class _SubtreeCache(_ItemCache):
    """Migrated list subtrees by (plan, channel, the stored subtree node's hash) -> (the migrated subtree's
    hash, its items' encodings (a tuple), the ``items`` wire bytes of them (storage/reads.items_wire)): a
    list leaf (8 items) and each perfect subtree a list root names, as storage/wirecache.py keeps the stored
    ones, and for the same reason sound (a hash names one sequence of stored items, hence one of migrated
    ones); never one holding a sealed or chunked item (a sealed record is opened on every read)."""

    @staticmethod
    def cost(key: bytes, hit: tuple) -> int:
        return len(key) + len(hit[2]) + 8 * len(hit[1]) + 128


_items = _ItemCache()
_subtrees = _SubtreeCache()
# emptied by compression.forget_cache() as storage/wirecache.py is (what a new process would read), which
# Store.set_keys calls too: nothing migrated from a removed key's records outlives its reload
compression.on_forget(_items.clear)
compression.on_forget(_subtrees.clear)


class MigratedItems(list):
    """The item encodings of a list migrated on read (the ``payload`` of its ("parts", ...) entry, a list)
    with ``wire``: the ``ListValue`` wire bytes of them (what a read sends, storage/reads.items_wire) as a
    tuple of parts to be joined (each whole ``items`` entries: a kept subtree's bytes are not copied here)."""

    __slots__ = ("wire",)


def _migrate_items(plan: Plan, ch: str, rec: bytes, fetch) -> tuple[MigratedItems, bytes]:
    """The item encodings of stored list ``rec`` (channel ``ch``) migrated by the plan's item-wise steps,
    and the root hash of the list they make. Walked as storage/reads.list_wire walks a stored list: each
    perfect subtree the root names (and each leaf under one not kept) is taken from :data:`_subtrees` by the
    stored node's hash, so the unchanged part of a list a read before migrated costs a lookup per peak; the
    items of a subtree not kept come from :data:`_items` by their hash or are migrated (:func:`_items_at`).
    The root hash is the one ``hp.list_append`` builds from the migrated items' hashes: a migrated list has
    the stored one's length, hence the same shape."""
    prefix = plan.key + ch.encode() + b"\x00"
    rec = bytes(rec)
    if len(rec) <= hp.HASH_SIZE:
        raise hp.CorruptNode("list root record too short")
    if rec[hp.HASH_SIZE] != hp.TAG_LIST:
        raise hp.CorruptNode("not a list root")
    n = hp.stored_list_length(rec)
    m = n // hp.LEAF_ITEMS
    pos = hp.HASH_SIZE + 9
    ids = hp.ID_SIZE
    if len(rec) != pos + (bin(m).count("1") + n % hp.LEAF_ITEMS) * ids:
        raise hp.CorruptNode("list root length mismatch")
    encs = MigratedItems()
    wires: list[bytes] = []
    node = [b"L", n.to_bytes(8, "big")]
    for k in range(m.bit_length() - 1, -1, -1):
        if m >> k & 1:
            h, sub, parts, _ = _subtree(plan, ch, prefix, rec[pos:pos + ids], k, fetch, len(encs), True)
            encs += sub
            wires += parts
            node.append(h)
            pos += ids
    tail = [rec[pos + i * ids:pos + (i + 1) * ids] for i in range(n % hp.LEAF_ITEMS)]
    if tail:
        t_encs, t_hashes, _ = _items_at(plan, ch, prefix, tail, fetch, len(encs))
        encs += t_encs
        wires.append(reads.items_wire(t_encs))
        node += t_hashes
    encs.wire = tuple(wires)
    return encs, hp.hash_bytes(b"".join(node))


def _subtree(plan: Plan, ch: str, prefix: bytes, node_id: bytes, level: int, fetch, start: int, peak: bool):
    """(migrated hash, item encodings, wire parts, may be kept) of the stored perfect subtree of height
    ``level`` (0: a leaf) whose node id is ``node_id``, its first item at index ``start`` of the list."""
    rec = fetch(node_id)
    if rec is None:
        raise hp.CorruptNode(f"missing node {bytes(node_id).hex()}")
    rec = bytes(rec)
    base = hp.HASH_SIZE + 1
    ids = hp.ID_SIZE
    if len(rec) <= hp.HASH_SIZE:
        raise hp.CorruptNode("list node record too short")
    if level == 0:
        if rec[hp.HASH_SIZE] != hp.TAG_LEAF or len(rec) != base + hp.LEAF_ITEMS * ids:
            raise hp.CorruptNode("bad list leaf")
    elif rec[hp.HASH_SIZE] != hp.TAG_INNER or len(rec) != base + 2 * ids:
        raise hp.CorruptNode("bad list inner node")
    key = prefix + rec[:hp.HASH_SIZE]
    hit = _subtrees.entries.get(key)
    if hit is not None:
        return hit[0], hit[1], [hit[2]], True
    if level == 0:
        encs, hashes, plain = _items_at(plan, ch, prefix, [rec[base + i * ids:base + (i + 1) * ids]
                                                           for i in range(hp.LEAF_ITEMS)], fetch, start)
        h = hp.hash_bytes(b"l" + b"".join(hashes))
        parts = [reads.items_wire(encs)]
    else:
        ha, ea, pa, oka = _subtree(plan, ch, prefix, rec[base:base + ids], level - 1, fetch, start, False)
        hb, eb, pb, okb = _subtree(plan, ch, prefix, rec[base + ids:base + 2 * ids], level - 1, fetch,
                                   start + (hp.LEAF_ITEMS << (level - 1)), False)
        h = hp.hash_bytes(b"n" + ha + hb)
        encs, parts, plain = [*ea, *eb], pa + pb, oka and okb
    if plain and (level == 0 or peak):
        wire = b"".join(parts)
        encs = tuple(encs)
        _subtrees.put(key, (h, encs, wire))
        parts = [wire]
    return h, encs, parts, plain


def _items_at(plan: Plan, ch: str, prefix: bytes, ids: list, fetch, start: int) -> tuple[list, list, bool]:
    """(migrated encodings, their value hashes, whether every record is a plain or packed value node) of the
    list items whose node ids are ``ids``, the first at index ``start``: each from :data:`_items` by the
    stored item's hash, or migrated (on its bytes by the plan's program when it has one, else by the
    engine) and kept there."""
    inner = plan.itemwise[ch]
    path = [ch]
    cache = _items.entries
    prog = plan.programs.get(ch)
    if prog is not None:  # on the items' bytes (storage/migrate), an item it leaves through the steps here
        encs, hashes, fresh, plain = migrate.migrate_items(
            prog, ids, fetch, cache, prefix, lambda n, stored: encode(map_item(inner, decode(stored), ((), path, n))),
            start)
        _items.put_many(fresh)
        return encs, hashes, plain
    encs, hashes, plain = [], [], True
    for n, node_id in enumerate(ids, start):
        item_rec = nodes.record(fetch, node_id)
        if item_rec[hp.HASH_SIZE] not in (hp.TAG_VALUE, hp.TAG_PACKED):
            plain = False
        sealed = encryption.is_sealed(item_rec)  # opened on every read (as storage/migrate.migrate_items)
        key = prefix + item_rec[:hp.HASH_SIZE]
        hit = None if sealed else cache.get(key)
        if hit is None:
            enc = encode(map_item(inner, decode(hp.stored_encoding(item_rec, fetch)), ((), path, n)))
            hit = (enc, hp.value_node(enc, []))
            if not sealed:
                _items.put(key, hit)
        encs.append(hit[0])
        hashes.append(hit[1])
    return encs, hashes, plain


def _where(prefix) -> list[str]:
    """The path a ``where`` chain stands for: () or (outer chain, path, item index)."""
    out: list[str] = []
    while prefix:
        prefix, path, n = prefix
        out[:0] = [*path, str(n)]
    return out


def _resolve(container: dict, key: str) -> Any:
    value = container[key]
    if type(value) is Unread:
        value = container[key] = value.load()
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if is_opaque(value):
        return "an opaque value (the sidecar cannot read it: migrate it client-side)"
    if isinstance(value, msgspec.msgpack.Ext):
        return f"an extension value (type {value.code})"
    return {bool: "a bool", int: "an int", float: "a float", str: "a string", bytes: "bytes", list: "a list",
            dict: "a map"}.get(type(value), type(value).__name__)


def _compile(step: MigrationStepRec, version: int, index: int):
    kind, path = step.kind, list(step.path)
    parent_path, last = (path[:-1], path[-1]) if path else ([], None)
    to, fields = step.to, list(step.fields)

    def fail(where, at: list, message: str) -> MigrationError:
        return MigrationError(version, index, _where(where) + list(at), message)

    def map_at(doc: dict, at: list, where) -> dict | None:
        """The map at ``at`` (None when a key on the way is absent); fails when something else is there."""
        if not at:
            return doc
        cur: Any = doc
        for i, key in enumerate(at):
            if key not in cur:
                return None
            cur = _resolve(cur, key)
            if type(cur) is not dict:
                raise fail(where, at[:i + 1], f"expected a map, found {_kind(cur)}")
        return cur

    if kind == "rename":
        def op(doc, where):
            parent = map_at(doc, parent_path, where)
            if parent is None or last not in parent:
                return
            if to in parent:
                raise fail(where, path, f"cannot rename to {to!r}: that field exists")
            parent[to] = parent.pop(last)
    elif kind == "drop":
        def op(doc, where):
            parent = map_at(doc, parent_path, where)
            if parent is not None:
                parent.pop(last, None)
    elif kind == "add":
        default = step.default
        value = decode(default) if default is not None else None
        shared = type(value) not in (list, dict)  # immutable: one decoded value serves every item

        def op(doc, where):
            parent = map_at(doc, parent_path, where)
            if parent is None:
                raise fail(where, parent_path, "the map to add the field to is absent")
            if last not in parent:
                parent[last] = value if shared else decode(default)
    elif kind == "nest":
        def op(doc, where):
            holder = map_at(doc, path, where)
            if holder is None:
                return
            moved = {f: holder.pop(f) for f in fields if f in holder}
            if not moved:
                return
            if to in holder:
                into = _resolve(holder, to)
                if type(into) is not dict:
                    raise fail(where, path + [to], f"cannot nest into {_kind(into)}")
                clash = next((f for f in moved if f in into), None)
                if clash is not None:
                    raise fail(where, path + [to, clash], "cannot nest: that field exists")
            else:
                into = holder[to] = {}
            for f, value in moved.items():
                into[f] = value.load() if type(value) is Unread else value
    elif kind == "unnest":
        def op(doc, where):
            holder = map_at(doc, path, where)
            if holder is None or to not in holder:
                return
            inner = _resolve(holder, to)
            if type(inner) is not dict:
                raise fail(where, path + [to], f"expected a map, found {_kind(inner)}")
            names = fields or list(inner)
            for f in names:
                if f in inner and f in holder:
                    raise fail(where, path + [f], "cannot unnest: that field exists")
            for f in names:
                if f in inner:
                    holder[f] = inner.pop(f)
            if not inner:
                del holder[to]
    elif kind == "convert":
        target = step.type

        def convert(value, where):
            return _convert(value, target, lambda message: fail(where, path, message))

        if not path:  # only inside map_items: the item itself
            return convert

        def op(doc, where):
            parent = map_at(doc, parent_path, where)
            if parent is None or last not in parent:
                return
            parent[last] = convert(_resolve(parent, last), where)
    elif kind == "map_items":
        inner = [(_compile(x, version, index), bool(x.path), version, index) for x in step.steps]

        def op(doc, where):
            parent = map_at(doc, parent_path, where)
            if parent is None or last not in parent:
                return
            items = _resolve(parent, last)
            if type(items) is not list:
                raise fail(where, path, f"expected a list, found {_kind(items)}")
            for n, item in enumerate(items):
                items[n] = map_item(inner, item, (where, path, n))

        op.inner = inner  # (state/schemas.Plan: an item-wise channel runs these per stored item)
    else:  # validated on registration
        def op(doc, where):
            raise fail(where, path, f"unknown step kind {kind!r}")
    return op


def map_item(inner: list, item: Any, at) -> Any:
    """One list item through a map_items' compiled inner steps ``inner`` [(fn, on_fields, version, index)];
    ``at`` is the item's where-chain; returns the item (a convert may replace it)."""
    for fn, on_fields, version, index in inner:
        if on_fields:
            if type(item) is not dict:
                raise MigrationError(version, index, _where(at), f"expected a map item, found {_kind(item)}")
            fn(item, at)
        else:
            item = fn(item, at)
    return item


def _convert(value: Any, to: int, fail) -> Any:
    if value is None:
        return None
    t = type(value)
    if to == TYPE_LIST:
        return value if t is list else [value]
    if to == TYPE_STRING:
        if t is str:
            return value
        if t is bool:
            return "true" if value else "false"
        if t is int:
            return str(value)
        if t is float:
            return repr(value)
    elif to == TYPE_INT:
        if t is int:
            return value
        if t is bool:
            return int(value)
        if t is float and math.isfinite(value) and value.is_integer():
            return _int(int(value))
        if t is str and _INT.fullmatch(value):
            return _int(int(value))
    elif to == TYPE_FLOAT:
        if t is float:
            return value
        if t is int:
            return float(value)
        if t is str and _FLOAT.fullmatch(value):
            return float(value)
    elif to == TYPE_BOOL:
        if t is bool:
            return value
        if t is int and value in (0, 1):
            return bool(value)
        if t is str and value in ("true", "false"):
            return value == "true"
    shown = repr(value) if t in (int, float, str) and len(repr(value)) <= 64 else _kind(value)
    raise fail(f"cannot convert {shown} to {TYPE_NAMES.get(to, to)}")


def _int(value: int) -> Any:
    """An int as the canonical encoding holds it: beyond 64 bits, the big-int extension."""
    if -2 ** 63 <= value < 2 ** 64:
        return value
    return msgspec.msgpack.Ext(1, bigint_payload(value))


# ----------------------------------------------------------------- window and policy

def latest_version(rec: SchemaRec) -> int:
    return rec.versions[-1].version if rec.versions else 0


def min_readable(rec: SchemaRec) -> int:
    return max(rec.min_readable, 1)


def policy(rec: SchemaRec) -> int:
    return rec.policy or POLICY_FAIL


def plan(rec: SchemaRec, name: str, stored: int, read: int) -> list[SchemaVersionRec]:
    """The versions whose steps take a value stored at ``stored`` to ``read``. SCHEMA_NOT_FOUND when
    ``read`` is not a registered version (a reader ahead of the registry); :class:`Unreadable` when
    ``stored`` is older than the window or newer than ``read``."""
    latest = latest_version(rec)
    if read > latest:
        raise ApiError("SCHEMA_NOT_FOUND", f"schema {name!r} has no version {read} (latest: {latest}); "
                       "register it first", schema=name, version=read, field="read_schema_version")
    low = min_readable(rec)
    if stored > read:
        raise Unreadable(f"stored at version {stored} of schema {name!r}, newer than version {read} the reader "
                         "understands", stored, read, low)
    if stored < low:
        raise Unreadable(f"stored at version {stored} of schema {name!r}, older than its compatibility window "
                         f"(oldest readable: {low})", stored, read, low)
    return rec.versions[stored:read]  # versions are 1..N in order: index k holds version k+1


def unreadable_error(name: str, e: Unreadable) -> ApiError:
    return ApiError("SCHEMA_VERSION_UNREADABLE", str(e), schema=name, stored_version=e.stored, read_version=e.read,
                    min_readable_version=e.min_readable)


def failed_error(name: str, stored: int, read: int, e: MigrationError) -> ApiError:
    return ApiError("SCHEMA_MIGRATION_FAILED", f"schema {name!r} from version {stored} to {read}: {e}",
                    schema=name, stored_version=stored, read_version=read, step=f"{e.version}.{e.step}",
                    path="/".join(e.path))


# ----------------------------------------------------------------- the registry

def schema_etag(rec: SchemaRec) -> str:
    return f"{rec.created_us:x}-{rec.revision}"


def get(txn, store, ns: str, name: str) -> SchemaRec | None:
    raw = txn.get(layout.schema_key(ns, name), db=store.db["schemas"])
    return None if raw is None else layout.schema_decoder.decode(raw)


def require(txn, store, ns: str, name: str, field: str = "schema") -> SchemaRec:
    rec = get(txn, store, ns, name)
    if rec is None:
        raise ApiError("SCHEMA_NOT_FOUND", f"no schema {name!r} in namespace {ns!r}", schema=name, field=field)
    return rec


@dataclass
class Registration:
    """A validated RegisterSchema."""

    ns: str
    name: str
    versions: list[SchemaVersionRec]
    min_readable: int
    policy: int
    etag: str


def register(txn, store, r: Registration, now_us: int) -> tuple[SchemaRec, bool]:
    """Create or update a schema; versions are append-only (SCHEMA_CONFLICT when one would change)."""
    old = get(txn, store, r.ns, r.name)
    if r.etag and (old is None or schema_etag(old) != r.etag):
        raise ApiError("SCHEMA_CONFLICT", f"schema {r.name!r}: etag {r.etag!r} is stale "
                       f"(current: {schema_etag(old) if old else 'none'})", schema=r.name, field="etag")
    if r.min_readable > r.versions[-1].version:
        raise ApiError("INVALID_FIELD", f"schema.min_readable_version: {r.min_readable} is newer than the latest "
                       f"version {r.versions[-1].version}", field="schema.min_readable_version")
    if old is not None:
        enc = msgspec.msgpack.encode
        if len(r.versions) < len(old.versions):
            raise ApiError("SCHEMA_CONFLICT", f"schema {r.name!r}: registered versions cannot be removed "
                           f"(it has {len(old.versions)}, the request {len(r.versions)})", schema=r.name,
                           version=len(r.versions) + 1, field="schema.versions")
        for a, b in zip(old.versions, r.versions):
            if enc(a) != enc(b):
                raise ApiError("SCHEMA_CONFLICT", f"schema {r.name!r}: version {a.version} is registered with "
                               "other steps; versions cannot change (register a new one)", schema=r.name,
                               version=a.version, field=f"schema.versions[{a.version - 1}]")
        same = (enc(old.versions) == enc(r.versions) and old.min_readable == r.min_readable
                and old.policy == r.policy)
        if same:
            return old, False
        rec = SchemaRec(layout.FORMAT_VERSION, r.versions, r.min_readable, r.policy, old.created_us, now_us,
                        old.revision + 1)
    else:
        rec = SchemaRec(layout.FORMAT_VERSION, r.versions, r.min_readable, r.policy, now_us, now_us, 1)
    txn.put(layout.schema_key(r.ns, r.name), layout.encode(rec), db=store.db["schemas"])
    return rec, old is None


def list_from(txn, store, ns: str, after: str | None) -> Iterator[tuple[str, SchemaRec]]:
    """The namespace's schemas in name order, after ``after``."""
    prefix = ns.encode() + layout.SEP
    cursor = txn.cursor(db=store.db["schemas"])
    start = prefix + after.encode() + b"\x00" if after is not None else prefix
    if not cursor.set_range(start):
        return
    for key, raw in cursor:
        if not key.startswith(prefix):
            return
        yield bytes(key[len(prefix):]).decode(), layout.schema_decoder.decode(raw)


# ----------------------------------------------------------------- migrate on read

@dataclass
class Outcome:
    """What a read returns for one checkpoint: ``channels`` None means the values as stored; otherwise
    (name, ref) pairs in name order where ref is ("stored", root node id) or ("parts", (shape, payload,
    root hash)) of a value migrated on read (:func:`parts`, :func:`tree_of`); the payload of a list migrated
    item by item is a :class:`MigratedItems` (its encodings, with the ListValue wire bytes a read sends)."""

    status: int
    version: int  # the version of the values returned
    channels: list[tuple[str, tuple[str, Any]]] | None = None
    error: str = ""
    unmigratable_id: str = ""
    # the pending writes migrated with the values: (task_id, idx, channel, task_path, encoding), in key
    # order, a write the steps dropped left out; None: the writes as stored
    writes: list | None = None


MAX_FALLBACK = 10_000  # ancestors a NEW_RUN read looks at


class _Cache:
    """Migrations on read by their input: the schema versions applied and the stored channels' (name, root
    hash). Stored values never change (content addressing), so an entry is exact; it holds no node ids
    (those are the store's), only which stored channel an output is and the encodings of migrated values."""

    MAX_BYTES = 64 << 20

    def __init__(self) -> None:
        from collections import OrderedDict  # noqa: PLC0415
        self.entries: OrderedDict[bytes, tuple[list, int]] = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()  # reads run on the event loop and in executor threads (ListCheckpoints)

    def get(self, key: bytes):
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None:
                self.entries.move_to_end(key)
                return hit[0]
        return None

    def put(self, key: bytes, value: list, size: int) -> None:
        if size > self.MAX_BYTES // 8:
            return
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.size -= old[1]
            self.entries[key] = (value, size)
            self.size += size
            while self.size > self.MAX_BYTES and self.entries:
                _, (_, n) = self.entries.popitem(last=False)
                self.size -= n

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.size = 0


_cache = _Cache()
compression.on_forget(_cache.clear)


def migrate_values(rec: SchemaRec, name: str, channels: list[tuple[str, bytes]], stored: int, read: int,
                   fetch) -> list[tuple[str, tuple[str, Any]]]:
    """The channels of a manifest migrated from ``stored`` to ``read``: (name, ("stored", node id)) for a
    stored value the steps only moved, (name, ("parts", (shape, payload, root hash))) for a migrated one
    (Unreadable, MigrationError, SCHEMA_NOT_FOUND as :func:`plan` and :func:`apply`)."""
    versions = plan(rec, name, stored, read)
    ids = dict(channels)
    steps = compile_plan(versions)
    head = steps.key + _encoder.encode((stored, read))
    roots = [(ch, nodes.record(fetch, node_id)) for ch, node_id in channels]
    key = blake3(b"".join([head, *(ch.encode() + b"\x00" + r[:hp.HASH_SIZE] for ch, r in roots)])).digest()
    out = _cache.get(key)
    if out is None:
        lists: dict | None = {}
        for ch, r in roots:
            if ch in steps.itemwise:
                if r[hp.HASH_SIZE] != hp.TAG_LIST:  # not a stored list: the whole steps say what is wrong
                    lists = None
                    break
                lists[ch] = r
        if lists:
            lists = {ch: _migrate_items(steps, ch, r, fetch) for ch, r in lists.items()}
            # the other channels' part: what steps.rest makes of them depends on them and on which channels
            # are there, never on the item-wise lists' content (no step but their map_items reads them:
            # Plan), so it is kept by their roots alone and reused when only the lists changed
            rest_key = blake3(b"".join([b"rest\x00", head, *(ch.encode() + b"\x00" + (
                b"list" if ch in lists else r[:hp.HASH_SIZE]) for ch, r in roots)])).digest()
            rest = _cache.get(rest_key)
            if rest is None:
                rest, size = _run(steps.rest, channels, fetch, lists)
                _cache.put(rest_key, rest, size + 64 * len(rest))
            out, size = [], 0
            for ch, ref in rest:
                if ref is None:
                    payload, root = lists[ch]
                    size += sum(map(len, payload.wire))  # about its encodings (a few bytes an item more)
                    ref = ("parts", (hp.KIND_LIST, payload, root))
                out.append((ch, ref))
        else:
            out, size = _run(steps.ops, channels, fetch, {})
        _cache.put(key, out, size + 64 * len(out))
    return [(ch, ("stored", ids[ref[1]]) if ref[0] == "from" else ref) for ch, ref in out]


def _run(ops: list, channels: list[tuple[str, bytes]], fetch, lists: dict) -> tuple[list, int]:
    """The document of ``channels`` through ``ops``: [(name, ref)] in name order (ref ("from", the stored
    channel it is), ("parts", ...) of a value migrated, or None for a channel in ``lists``: left unread, the
    caller puts its list there) and the bytes of the encodings made."""
    doc: dict = {ch: Unread(ch, lambda node_id=node_id: decode(nodes.value_encoding(node_id, fetch)))
                 for ch, node_id in channels}
    for op in ops:
        op(doc, ())
    out, size = [], 0
    for ch, v in sorted(doc.items()):
        if ch in lists:
            out.append((ch, None))
        elif type(v) is Unread:
            out.append((ch, ("from", v.ref)))
        else:
            shape, payload = parts(v)
            size += len(payload) if shape == hp.KIND_SCALAR else sum(
                len(x) if shape == hp.KIND_LIST else len(x[1]) + len(x[0]) for x in payload)
            out.append((ch, ("parts", (shape, payload, tree_of(shape, payload, [])))))
    return out, size


def _outcome(rec: SchemaRec, m, read: int, fetch, writes=None) -> Outcome:
    """``writes``: the checkpoint's pending-write rows (task_id, idx, WriteRec) to migrate with it (they are
    taken to be at the checkpoint's version), or None when the read returns none."""
    if m.schema_version == read:
        return Outcome(STATUS_CURRENT, read)
    out = Outcome(STATUS_MIGRATED, read, migrate_values(rec, m.schema, m.channels, m.schema_version, read, fetch))
    if writes is not None:
        out.writes = []
        for task_id, idx, w in writes:
            moved = migrate_partial(rec, m.schema, w.channel, nodes.value_encoding(w.value, fetch),
                                    m.schema_version, read)
            if moved is not None:
                out.writes.append((task_id, idx, moved[0], w.task_path, moved[1]))
    return out


def on_read(txn, store, ns: str, tkey: int, cns: str, checkpoint_id: str, m, fetch, read: int,
            fallback: bool = False, writes: bool = False):
    """(checkpoint_id, manifest, Outcome) of a read of ``m`` by a reader of version ``read`` (0: as stored),
    by the schema's failure policy: FAIL raises SCHEMA_MIGRATION_FAILED / SCHEMA_VERSION_UNREADABLE,
    DEGRADE answers the stored values flagged, NEW_RUN (only with ``fallback``: a read of the latest
    checkpoint) answers the newest ancestor that migrates. With ``writes`` the checkpoint's pending writes
    are migrated with it (a write that does not migrate fails the checkpoint as a value would)."""
    def rows(cid: str):
        return list(records.write_rows(txn, store, tkey, cns, cid)) if writes else None

    if not read or not m.schema:
        return checkpoint_id, m, Outcome(STATUS_NONE, m.schema_version)
    rec = get(txn, store, ns, m.schema)
    if rec is None:
        return checkpoint_id, m, Outcome(STATUS_UNREGISTERED, m.schema_version)
    try:
        return checkpoint_id, m, _outcome(rec, m, read, fetch, rows(checkpoint_id))
    except (Unreadable, MigrationError) as e:
        failure = e
    rule = policy(rec)
    if rule == POLICY_DEGRADE:
        return checkpoint_id, m, Outcome(STATUS_DEGRADED, m.schema_version, None, str(failure))
    if rule == POLICY_NEW_RUN and fallback:
        cur = m
        for _ in range(MAX_FALLBACK):
            parent = cur.parent_id
            cur = records.manifest(txn, store, tkey, cns, parent) if parent else None
            if cur is None:
                break
            if cur.schema != m.schema:
                continue
            try:
                out = _outcome(rec, cur, read, fetch, rows(parent))
            except (Unreadable, MigrationError):
                continue
            out.status, out.error, out.unmigratable_id = STATUS_NEW_RUN, str(failure), checkpoint_id
            return parent, cur, out
    if isinstance(failure, Unreadable):
        raise unreadable_error(m.schema, failure)
    raise failed_error(m.schema, m.schema_version, read, failure)


def value_on_read(txn, store, ns: str, name: str, stored: int, read: int, encoding: bytes) -> Outcome:
    """A single stored map value (a memory item's) read by a reader of version ``read``: the Outcome's
    ``channels`` is the migrated map's canonical encoding, or None for the value as stored. The policy as
    :func:`on_read`, NEW_RUN behaving as FAIL."""
    if not read or not name:
        return Outcome(STATUS_NONE, stored)
    rec = get(txn, store, ns, name)
    if rec is None:
        return Outcome(STATUS_UNREGISTERED, stored)
    if stored == read:
        return Outcome(STATUS_CURRENT, read)
    try:
        versions = plan(rec, name, stored, read)
        value = decode(encoding)
        if type(value) is not dict:
            raise MigrationError(read, 0, [], f"expected a map, found {_kind(value)}")
        return Outcome(STATUS_MIGRATED, read, encode(apply(value, versions)))
    except (Unreadable, MigrationError) as e:
        failure = e
    if policy(rec) == POLICY_DEGRADE:
        return Outcome(STATUS_DEGRADED, stored, None, str(failure))
    if isinstance(failure, Unreadable):
        raise unreadable_error(name, failure)
    raise failed_error(name, stored, read, failure)



def history_on_read(txn, store, ns: str, tkey: int, cns: str, found, read: int, fetch):
    """One channel's history (state/history.ChannelHistory ``found``) read by a reader of version ``read``:
    each write and the seed migrated as that one channel's value (:func:`migrate_partial`) from the version
    of the ancestor it is on. Returns (status, error, writes, seed): writes [(task_path, task_id, idx,
    channel, encoding)] (a dropped write left out), seed None, ("stored", root node id), ("parts", (shape,
    payload, root hash)) or ("dropped", None). A failure under DEGRADE gives everything as stored (status
    DEGRADED); under FAIL and NEW_RUN it raises, as a checkpoint read does."""
    schemas_seen: dict[str, SchemaRec | None] = {}
    statuses: set[int] = set()
    ch = found.channel

    def one(m, load):
        """(moved, migrated): (channel, encoding) or None (dropped); whether the steps ran."""
        if not m.schema:
            return (ch, None), False
        if m.schema not in schemas_seen:
            schemas_seen[m.schema] = get(txn, store, ns, m.schema)
        rec = schemas_seen[m.schema]
        if rec is None:
            statuses.add(STATUS_UNREGISTERED)
            return (ch, None), False
        if m.schema_version == read:
            statuses.add(STATUS_CURRENT)
            return (ch, None), False
        try:
            moved = migrate_partial(rec, m.schema, ch, load(), m.schema_version, read)
        except (Unreadable, MigrationError) as e:
            raise _Failed(rec, m.schema, m.schema_version, e) from None
        statuses.add(STATUS_MIGRATED)
        return moved, True

    writes: list = []
    seed = None
    try:
        for cid, rows in zip(found.write_ids, found.writes):
            m = records.manifest(txn, store, tkey, cns, cid)
            for task_path, task_id, idx, node_id in rows:
                load = lambda node_id=node_id: nodes.value_encoding(node_id, fetch)  # noqa: E731
                moved, migrated = one(m, load)
                if moved is not None:
                    writes.append((task_path, task_id, idx, moved[0], moved[1] if migrated else load()))
        if found.seed is not None:
            seed_id, root_id = found.seed
            moved, migrated = one(records.manifest(txn, store, tkey, cns, seed_id),
                                  lambda: nodes.value_encoding(root_id, fetch))
            if moved is None:
                seed = ("dropped", None)
            elif migrated:
                shape, payload = parts(decode(moved[1]))
                seed = ("parts", (shape, payload, tree_of(shape, payload, [])))
            else:
                seed = ("stored", root_id)
    except _Failed as f:
        if policy(f.rec) == POLICY_DEGRADE:
            return STATUS_DEGRADED, str(f.error), None, None
        if isinstance(f.error, Unreadable):
            raise unreadable_error(f.name, f.error)
        raise failed_error(f.name, f.stored, read, f.error)
    status = next((s for s in (STATUS_MIGRATED, STATUS_CURRENT, STATUS_UNREGISTERED) if s in statuses), STATUS_NONE)
    return status, "", writes, seed


class _Failed(Exception):
    def __init__(self, rec: SchemaRec, name: str, stored: int, error: Exception) -> None:
        super().__init__(str(error))
        self.rec, self.name, self.stored, self.error = rec, name, stored, error
