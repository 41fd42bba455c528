"""schemas: a namespace's schema registry and the migration engine (docs/lifecycle.md).

A schema has versions 1..N; version k > 1 holds the declared steps (layout.StepRec) that turn a value of
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

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import msgspec

from ..errors import ApiError
from ..storage import hotpath as hp
from ..storage import layout, nodes, records
from ..storage.layout import SchemaRec, SchemaVersionRec, StepRec

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
    """The canonical encoding of a migrated value (map keys sorted, as every stored value)."""
    return hp.canonicalize(_encoder.encode(value))


def tree(value: Any, nodes: list) -> bytes:
    """Build ``value`` as a channel value tree (a list item by item, a map key by key, as a put stores it);
    return its root hash. ``nodes`` gets the canonical nodes."""
    shape, payload = hp.decompose(encode(value))
    if shape == hp.KIND_LIST:
        return hp.build_list(payload, nodes)
    if shape == hp.KIND_MAP:
        return hp.build_map(payload, nodes)
    return hp.value_node(payload, nodes)


def is_opaque(value: Any) -> bool:
    return isinstance(value, msgspec.msgpack.Ext) and value.code == EXT_OPAQUE


# ----------------------------------------------------------------- the engine

def apply(doc: dict, versions: Iterable[SchemaVersionRec]) -> dict:
    """Apply the steps of ``versions`` (in order) to ``doc`` in place and return it; MigrationError when a
    step does not fit the value."""
    for v in versions:
        for i, step in enumerate(v.steps):
            _step(doc, step, v.version, i, [])
    return doc


def _resolve(container: dict, key: str) -> Any:
    value = container[key]
    if isinstance(value, Unread):
        value = container[key] = value.load()
    return value


def _fail(ctx: tuple, path: list, message: str) -> MigrationError:
    version, index, prefix = ctx
    return MigrationError(version, index, prefix + list(path), message)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if is_opaque(value):
        return "an opaque value (the sidecar cannot read it: migrate it client-side)"
    if isinstance(value, msgspec.msgpack.Ext):
        return f"an extension value (type {value.code})"
    return {bool: "a bool", int: "an int", float: "a float", str: "a string", bytes: "bytes", list: "a list",
            dict: "a map"}.get(type(value), type(value).__name__)


def _map_at(doc: dict, path: list[str], ctx: tuple) -> dict | None:
    """The map at ``path`` (None when a key on the way is absent); fails when something else is there."""
    cur: Any = doc
    for i, key in enumerate(path):
        if key not in cur:
            return None
        cur = _resolve(cur, key)
        if not isinstance(cur, dict):
            raise _fail(ctx, path[:i + 1], f"expected a map, found {_kind(cur)}")
    return cur


def _step(doc: dict, step: StepRec, version: int, index: int, prefix: list[str]) -> None:
    ctx = (version, index, prefix)
    kind, path = step.kind, step.path
    parent_path, last = (path[:-1], path[-1]) if path else ([], None)
    if kind == "rename":
        parent = _map_at(doc, parent_path, ctx)
        if parent is None or last not in parent:
            return
        if step.to in parent:
            raise _fail(ctx, path, f"cannot rename to {step.to!r}: that field exists")
        parent[step.to] = parent.pop(last)
    elif kind == "drop":
        parent = _map_at(doc, parent_path, ctx)
        if parent is not None:
            parent.pop(last, None)
    elif kind == "add":
        parent = _map_at(doc, parent_path, ctx)
        if parent is None:
            raise _fail(ctx, parent_path, "the map to add the field to is absent")
        if last not in parent:
            parent[last] = decode(step.default) if step.default is not None else None
    elif kind == "nest":
        holder = _map_at(doc, path, ctx)
        if holder is None:
            return
        moved = {f: holder.pop(f) for f in step.fields if f in holder}
        if not moved:
            return
        if step.to in holder:
            into = _resolve(holder, step.to)
            if not isinstance(into, dict):
                raise _fail(ctx, path + [step.to], f"cannot nest into {_kind(into)}")
            clash = next((f for f in moved if f in into), None)
            if clash is not None:
                raise _fail(ctx, path + [step.to, clash], "cannot nest: that field exists")
        else:
            into = holder[step.to] = {}
        for f, value in moved.items():
            into[f] = value.load() if isinstance(value, Unread) else value
    elif kind == "unnest":
        holder = _map_at(doc, path, ctx)
        if holder is None or step.to not in holder:
            return
        inner = _resolve(holder, step.to)
        if not isinstance(inner, dict):
            raise _fail(ctx, path + [step.to], f"expected a map, found {_kind(inner)}")
        names = list(step.fields) if step.fields else list(inner)
        for f in names:
            if f in inner and f in holder:
                raise _fail(ctx, path + [f], "cannot unnest: that field exists")
        for f in names:
            if f in inner:
                holder[f] = inner.pop(f)
        if not inner:
            del holder[step.to]
    elif kind == "convert":
        parent = _map_at(doc, parent_path, ctx)
        if parent is None or last not in parent:
            return
        parent[last] = _convert(_resolve(parent, last), step.type, ctx, path)
    elif kind == "map_items":
        parent = _map_at(doc, parent_path, ctx)
        if parent is None or last not in parent:
            return
        items = _resolve(parent, last)
        if not isinstance(items, list):
            raise _fail(ctx, path, f"expected a list, found {_kind(items)}")
        for n, item in enumerate(items):
            where = prefix + path + [str(n)]
            for j, inner in enumerate(step.steps):
                if inner.path and not isinstance(item, dict):
                    raise MigrationError(version, index, where, f"expected a map item, found {_kind(item)}")
                if inner.path:
                    _step(item, inner, version, index, where)
                else:  # a step on the item itself (a convert with an empty path)
                    box = {"": item}
                    _step(box, StepRec(inner.kind, [""], inner.to, inner.fields, inner.default, inner.type,
                                       inner.steps), version, index, where)
                    item = items[n] = box[""]
    else:  # validated on registration
        raise _fail(ctx, path, f"unknown step kind {kind!r}")


def _convert(value: Any, to: int, ctx: tuple, path: list) -> Any:
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
            return int(value)
        if t is str and _INT.fullmatch(value):
            return int(value)
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
    raise _fail(ctx, path, f"cannot convert {shown} to {TYPE_NAMES.get(to, to)}")


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
    (name, ref) pairs in name order where ref is ("stored", root node id) or ("value", Python value)."""

    status: int
    version: int  # the version of the values returned
    channels: list[tuple[str, tuple[str, Any]]] | None = None
    error: str = ""
    unmigratable_id: str = ""


MAX_FALLBACK = 10_000  # ancestors a NEW_RUN read looks at


def migrate_values(rec: SchemaRec, name: str, channels: list[tuple[str, bytes]], stored: int, read: int,
                   fetch) -> list[tuple[str, tuple[str, Any]]]:
    """The channels of a manifest migrated from ``stored`` to ``read`` (Unreadable, MigrationError,
    SCHEMA_NOT_FOUND as :func:`plan` and :func:`apply`)."""
    versions = plan(rec, name, stored, read)
    doc: dict = {}
    for ch, node_id in channels:
        doc[ch] = Unread(node_id, lambda node_id=node_id: decode(nodes.value_encoding(node_id, fetch)))
    apply(doc, versions)
    return [(ch, ("stored", v.ref) if isinstance(v, Unread) else ("value", v)) for ch, v in sorted(doc.items())]


def _outcome(rec: SchemaRec, m, read: int, fetch) -> Outcome:
    if m.schema_version == read:
        return Outcome(STATUS_CURRENT, read)
    return Outcome(STATUS_MIGRATED, read, migrate_values(rec, m.schema, m.channels, m.schema_version, read, fetch))


def on_read(txn, store, ns: str, tkey: int, cns: str, checkpoint_id: str, m, fetch, read: int,
            fallback: bool = False):
    """(checkpoint_id, manifest, Outcome) of a read of ``m`` by a reader of version ``read`` (0: as stored),
    by the schema's failure policy: FAIL raises SCHEMA_MIGRATION_FAILED / SCHEMA_VERSION_UNREADABLE,
    DEGRADE answers the stored values flagged, NEW_RUN (only with ``fallback``: a read of the latest
    checkpoint) answers the newest ancestor that migrates."""
    if not read or not m.schema:
        return checkpoint_id, m, Outcome(STATUS_NONE, m.schema_version)
    rec = get(txn, store, ns, m.schema)
    if rec is None:
        return checkpoint_id, m, Outcome(STATUS_UNREGISTERED, m.schema_version)
    try:
        return checkpoint_id, m, _outcome(rec, m, read, fetch)
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
                out = _outcome(rec, cur, read, fetch)
            except (Unreadable, MigrationError):
                continue
            out.status, out.error, out.unmigratable_id = STATUS_NEW_RUN, str(failure), checkpoint_id
            return parent, cur, out
    if isinstance(failure, Unreadable):
        raise unreadable_error(m.schema, failure)
    raise failed_error(m.schema, m.schema_version, read, failure)
