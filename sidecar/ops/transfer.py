"""transfer: export a thread or a namespace into an export file, and import one (docs/export-format.md).

Export reads one snapshot of a store (a serving sidecar's data directory opened read-only, or an offline
one) and writes the file through storage/exportfile.py: per thread its record, checkpoints (parent links,
channel values in the value model), pending writes, runs, steps, events, artifacts, effects, fork
branches, conversation log, summaries, compactions, pins, calibration and the timers that schedule work
on them; per namespace also its memory items with their history and vectors, its vector spaces, its
conversation policies and pins. Internal numbers (thread keys, node ids, path and item ids) are never
written: records name threads, runs and memory items by their ids, values are deduplicated by BLAKE3.

Import verifies the whole file first without holding it (storage/exportfile.py scan: framing, BLAKE3,
counts, blobs, in one streaming pass that keeps only where records and blobs are; then plan(): every record
read back by offset, converted to the store's records, every value's tree rebuilt and checked against the
root hash the file names) and checks every conflict and quota in one snapshot, so a file that is damaged or
conflicts writes nothing. It then writes in short jobs (_Importer): the values (jobs of NODE_BATCH bytes or
NODE_JOB values, reached by nothing yet; garbage collection holds its sweeps meanwhile), then each thread whole
in one job (a large one's rows staged first in jobs of RECORD_JOB records under a key no record names), which
checks its conflicts and the quota again, then the namespace's memory and settings. A marker in ``meta``
counts the threads in: an import interrupted midway (a crash, a conflict or quota met meanwhile) is finished
by running it again (docs/lifecycle.md "Export and import").

Encrypted namespaces: an export writes their values in plaintext (the keys must be loaded, or it refuses
with ENCRYPTION_KEY_MISSING naming the namespace before writing anything), and its header's ``source``
says ``"encrypted": true``; an import seals the values under the target namespace's key when it has one.
"""
from __future__ import annotations

import array
import dataclasses
import gc
import os
import struct
import time
from typing import Callable

import msgspec
from agentstate.codec import array_header, map_header

from .. import __version__, limits
from ..errors import ApiError
from ..state import memory as memstate
from ..state import memory_vectors as mv
from ..storage import encryption, exportfile, hotpath as hp, layout, nodes, records, usage
from ..storage.exportfile import ExportFileError
from ..storage.layout import SEP
from . import threads as thread_ops

Progress = Callable[[str, int, int], None]
H = hp.HASH_SIZE
_U32 = struct.Struct(">I")
_str_encoder = msgspec.msgpack.Encoder()

# (record kind, table, key parts after the thread key, record struct (None: an index row), decoder)
# key parts: S string ended by NUL, s string to the end, Q u64, I u32, W a write index (u32, offset 2**31), B u8
THREAD_TABLES = (
    ("checkpoint", "ckpts", (("checkpoint_ns", "S"), ("checkpoint_id", "s")), layout.Manifest,
     layout.manifest_decoder),
    ("write", "writes", (("checkpoint_ns", "S"), ("checkpoint_id", "S"), ("task_id", "S"), ("idx", "W")),
     layout.WriteRec, layout.write_decoder),
    ("run_state", "tstate", (), layout.ThreadRunState, layout.tstate_decoder),
    ("step", "steps", (("run_seq", "Q"), ("step_id", "s")), layout.StepRec, layout.step_decoder),
    ("event", "events", (("seq", "Q"),), layout.EventRec, layout.event_decoder),
    ("event_id", "evids", (("client_event_id", "s"),), None, None),
    ("artifact", "artifacts", (("name", "S"), ("version", "I")), layout.ArtifactRec, layout.artifact_decoder),
    ("artifact_name", "artnames", (("name", "s"),), layout.ArtifactNameRec, layout.artname_decoder),
    ("branch", "branches", (("seq", "Q"),), layout.BranchRec, layout.branch_decoder),
    ("conversation_item", "citems", (("seq", "Q"),), layout.ItemRec, layout.item_decoder),
    ("conversation_item_id", "cids", (("client_item_id", "s"),), None, None),
    ("conversation_call", "ccalls", (("call_id", "s"),), None, None),
    ("conversation_state", "cstate", (), layout.ConvState, layout.convstate_decoder),
    ("conversation_config", "tconf", (), layout.ThreadConvConf, layout.tconf_decoder),
    ("summary", "csums", (("level", "B"), ("first_seq", "Q")), layout.SummaryRec, layout.summary_decoder),
    ("compaction", "ccomps", (("level", "B"), ("first_seq", "Q")), layout.CompactionRec, layout.compaction_decoder),
    ("pyramid", "cpyr", (), layout.PyramidState, layout.pyramid_decoder),
    ("pin", "tpins", (("pin_id", "s"),), layout.PinRec, layout.pin_decoder),
    ("calibration", "ccalib", (), layout.CalibRec, layout.calib_decoder),
)
_BY_KIND = {spec[0]: spec for spec in THREAD_TABLES}
#: index rows whose value is a sequence number (u64)
_SEQ_INDEXES = ("event_id", "conversation_item_id", "conversation_call")
#: record formats written on import (a record's newest format)
_FMT = {layout.WriteRec: 3}
#: fields never written: internal numbers of one store (a record's quota charge is counted again on import)
_INTERNAL = ("fmt", "tkey", "charge")
THREAD_KINDS = frozenset(_BY_KIND) | {"run", "effect", "schedule"}
NAMESPACE_KINDS = frozenset({"memory_space", "memory_path", "memory_item", "memory_revision", "namespace_config",
                             "namespace_pin"}) | {"schema"}  # the schema registry (state/schemas.py)


def conflict(what: str, message: str, **metadata) -> ApiError:
    reason = "IMPORT_THREAD_EXISTS" if what == "thread" else "IMPORT_CONFLICT"
    return ApiError(reason, message, **metadata)


def invalid_file(message: str, *, unsupported: bool = False) -> ApiError:
    return ApiError("EXPORT_VERSION_UNSUPPORTED" if unsupported else "EXPORT_FILE_INVALID", message, field="from")


# ----------------------------------------------------------------- keys

def split_key(parts, suffix: bytes) -> dict:
    out, pos = {}, 0
    for name, code in parts:
        if code == "S":
            end = suffix.index(SEP, pos)
            out[name], pos = suffix[pos:end].decode(), end + 1
        elif code == "s":
            out[name], pos = suffix[pos:].decode(), len(suffix)
        elif code == "Q":
            out[name], pos = layout.read_u64(suffix[pos:pos + 8]), pos + 8
        elif code == "I":
            out[name], pos = _U32.unpack(suffix[pos:pos + 4])[0], pos + 4
        elif code == "W":
            out[name], pos = _U32.unpack(suffix[pos:pos + 4])[0] - 2**31, pos + 4
        else:  # B
            out[name], pos = suffix[pos], pos + 1
    if pos != len(suffix):
        raise ValueError("key longer than its parts")
    return out


def join_key(parts, values: dict) -> bytes:
    out = []
    for name, code in parts:
        v = values[name]
        if code in "Ss":
            if not isinstance(v, str) or "\x00" in v:
                raise ValueError(f"{name}: not an identifier")
            out.append(v.encode() + (SEP if code == "S" else b""))
        elif code == "Q":
            out.append(layout.u64(v))
        elif code == "I":
            out.append(_U32.pack(v))
        elif code == "W":
            out.append(_U32.pack(v + 2**31))
        else:
            out.append(bytes((v,)))
    return b"".join(out)


# ----------------------------------------------------------------- records <-> fields

def fields_of(rec, drop=_INTERNAL) -> dict:
    out = {}
    for name in rec.__struct_fields__:
        if name in drop:
            continue
        v = getattr(rec, name)
        out[name] = bytes(v) if isinstance(v, msgspec.Raw) else v
    return out


_RAW_FIELDS: dict[type, frozenset] = {}


_FIELDS: dict[type, tuple] = {}


def _fields(cls) -> tuple:
    """msgspec.structs.fields(cls), once per class (it evaluates the annotations on every call)."""
    got = _FIELDS.get(cls)
    if got is None:
        got = _FIELDS[cls] = tuple(msgspec.structs.fields(cls))
    return got


def _raw_fields(cls) -> frozenset:
    got = _RAW_FIELDS.get(cls)
    if got is None:
        got = _RAW_FIELDS[cls] = frozenset(f.name for f in msgspec.structs.fields(cls)
                                           if "Raw" in str(f.type))
    return got


def record_bytes(cls, decoder, d: dict, **given) -> bytes:
    """The stored encoding of a ``cls`` record made of the file's fields ``d`` and ``given`` ones, decoded back
    with the store's own decoder (so a field of the wrong type is refused as the store would)."""
    raw = _raw_fields(cls)
    values = []
    for f in _fields(cls):
        name = f.name
        if name == "fmt":
            v = _FMT.get(cls, layout.FORMAT_VERSION)
        elif name in given:
            v = given[name]
        elif name in d:
            v = d[name]
        elif f.default is not msgspec.NODEFAULT:
            v = f.default
        else:
            raise ValueError(f"a {cls.__name__} record without {name!r}")
        if name in raw and isinstance(v, bytes):
            v = msgspec.Raw(v)
        values.append(v)
    data = layout.encode(values)
    try:
        decoder.decode(data)
    except msgspec.ValidationError as e:
        raise ValueError(f"a {cls.__name__} record: {e}") from None
    return data


# ----------------------------------------------------------------- export

@dataclasses.dataclass
class ExportSummary:
    path: str
    threads: int
    checkpoints: int
    records: int
    blobs: int
    bytes: int
    blake3: str
    seconds: float
    counts: dict
    encrypted: bool = False  # the namespace is encrypted in the store: the file holds its values in plaintext


def encrypted_here(store, ns: str, refuse: bool = False) -> bool:
    """Whether namespace ``ns`` of ``store`` is encrypted, so that an export writes its values in plaintext
    (the keys that open them must be loaded: ENCRYPTION_KEY_MISSING naming the namespace otherwise, before
    anything is written); EXPORT_PLAINTEXT_REFUSED when it is and ``refuse``."""
    if ns not in getattr(store, "encrypted", ()):
        return False
    if refuse:
        raise ApiError("EXPORT_PLAINTEXT_REFUSED", f"namespace {ns!r} is encrypted: its export would hold its "
                       f"values in plaintext, and the export was asked to refuse that", namespace=ns,
                       field="refuse_encrypted")
    keys = getattr(store, "keys", None)
    if keys is None or keys.scope(ns) is None:
        raise encryption.key_missing(ns)
    return True


def export(store, path: str | None, ns: str, thread_id: str | None = None, progress: Progress | None = None,
           source: str = "", *, refuse_encrypted: bool = False, out=None) -> ExportSummary:
    """Write the namespace ``ns`` (or only its thread ``thread_id``) of ``store`` into a new export file
    (or into the stream ``out``: a serving sidecar's ExportNamespace). An encrypted namespace's values are
    written in plaintext (encrypted_here)."""
    started = time.monotonic()
    tick = progress or (lambda phase, done, total: None)
    view = store  # a serving Store or a storage.readonly.ReadOnlyStore: both keep a clock and ns_idle_cache
    scope = {"namespace": ns, "thread": thread_id}
    src = {"sidecar_version": __version__, "store_format": layout.FORMAT_NAME, "data_dir": source}
    if encrypted_here(store, ns, refuse_encrypted):
        src["encrypted"] = True  # (only then: files of other namespaces are as before)
    w = exportfile.Writer(path, src, scope, out)
    try:
        with store.read() as txn:
            if thread_id is not None:
                rec = records.thread(txn, view, ns, thread_id)
                if rec is None:
                    raise ApiError("THREAD_NOT_FOUND", f"thread {thread_id!r} not found in namespace {ns!r}",
                                   field="thread", thread_id=thread_id)
                todo = [(thread_id, rec)]
            else:
                todo = list(records.threads_from(txn, view, ns))
            ex = _Exporter(txn, view, w, ns, [t for t, _ in todo])
            for i, (tid, rec) in enumerate(todo):
                ex.thread(tid, rec)
                tick("threads", i + 1, len(todo))
            if thread_id is None:
                ex.namespace()
        digest = w.finish()
    except BaseException:
        w.abort()
        raise
    counts = dict(w.counts)
    return ExportSummary(w.path, counts.get("thread", 0), counts.get("checkpoint", 0), sum(counts.values()) + 1,
                         counts.get("blob", 0), w.bytes, digest, time.monotonic() - started, counts,
                         bool(src.get("encrypted")))


class _Exporter:
    def __init__(self, txn, store, w: exportfile.Writer, ns: str, thread_ids: list[str]) -> None:
        self.txn, self.store, self.w, self.ns = txn, store, w, ns
        self.fetch = lambda node_id: txn.get(node_id, db=store.db["nodes"])
        self.values: dict[bytes, dict] = {}
        self.elements: dict[bytes, bytes] = {}  # value node id -> blob hash
        self._schedules(set(thread_ids))

    def value(self, node_id: bytes) -> dict:
        got = self.values.get(bytes(node_id))
        if got is not None:
            return got
        fetch = self.fetch
        rec = nodes.record(fetch, node_id)
        root, tag = bytes(rec[:H]), rec[H]
        element = self.element
        if tag == hp.TAG_LIST:
            v = {"shape": "list", "root": root, "items": [element(i) for i in hp.stored_list_ids(rec, fetch)]}
        elif tag == hp.TAG_MAP or tag == hp.TAG_MAP_INNER:
            v = {"shape": "map", "root": root, "entries": [[k, element(nid)]
                                                           for k, nid in sorted(hp.stored_map_entries(rec, fetch))]}
        else:
            v = {"shape": "value", "root": root, "h": self.w.blob(hp.stored_encoding(rec, fetch))}
        self.values[bytes(node_id)] = v
        return v

    def element(self, node_id: bytes) -> bytes:
        """The blob hash of a list item's or map entry's value node, read and hashed once per export (the
        lists of a history share their items)."""
        node_id = bytes(node_id)
        got = self.elements.get(node_id)
        if got is None:
            got = self.elements[node_id] = self.w.blob(hp.stored_encoding(nodes.record(self.fetch, node_id),
                                                                          self.fetch))
        return got

    def _rows(self, table: str, prefix: bytes):
        cursor = self.txn.cursor(db=self.store.db[table])
        if cursor.set_range(prefix):
            for key, value in cursor.iternext():
                key = bytes(key)
                if not key.startswith(prefix):
                    break
                yield key, bytes(value)

    def _schedules(self, thread_ids: set[str]) -> None:
        """The timer rows of the exported threads and their runs (watchdog, sweeper, compaction queue)."""
        ns, txn, db = self.ns, self.txn, self.store.db
        self.run_timers: dict[str, list] = {}
        for key, _ in txn.cursor(db=db["timers"]).iternext():
            due, kind, tns, run_id = layout.split_timer_key(key)
            if tns == ns:
                self.run_timers.setdefault(run_id, []).append(
                    ("lease" if kind == layout.TIMER_LEASE else "deadline", due))
        self.conv_timers: dict[str, list] = {}
        for key, _ in txn.cursor(db=db["ctimers"]).iternext():
            key = bytes(key)
            if key[8:9] == layout.CTIMER_FALLBACK:
                due, tns, tid, level, first = layout.split_fallback_timer_key(key)
                entry = {"what": "fallback", "due_us": due, "level": level, "first_seq": first}
            else:
                due, _, tns, tid = layout.split_ctimer_key(key)
                entry = {"what": "idle", "due_us": due}
            if tns == ns and tid in thread_ids:
                self.conv_timers.setdefault(tid, []).append(entry)
        self.queue: dict[int, list] = {}
        prefix = ns.encode() + SEP
        for key, _ in self._rows("cqueue", prefix):
            due, tkey, level, first = layout.split_cqueue_suffix(key, len(prefix) - 1)
            self.queue.setdefault(tkey, []).append({"what": "queue", "due_us": due, "level": level,
                                                    "first_seq": first})

    def thread(self, tid: str, trec: layout.ThreadRec) -> None:
        w, db, ns = self.w, self.store.db, self.ns
        w.write({"t": "thread", "id": tid, **fields_of(trec)})
        tprefix = layout.tkey_prefix(trec.tkey)
        for kind, table, parts, cls, decoder in THREAD_TABLES:
            for key, raw in self._rows(table, tprefix):
                out = {"t": kind, "thread": tid, **split_key(parts, key[8:])}
                if cls is None:
                    if kind in _SEQ_INDEXES:
                        out["seq"] = layout.read_u64(raw)
                    w.write(out)
                    continue
                fields = fields_of(decoder.decode(raw))
                if kind == "checkpoint":
                    m = decoder.decode(raw)
                    del fields["parent"]
                    fields["parent_id"] = m.parent_id
                    fields["channels"] = [[name, self.value(nid)] for name, nid in m.channels]
                    fields["extra"] = None if m.extra is None else self.value(m.extra)
                elif kind == "write":
                    fields["value"] = self.value(fields["value"])
                elif kind == "artifact":
                    fields["content"] = self.value(fields["content"])
                elif kind == "conversation_item" and fields.get("node") is not None:
                    fields["node"] = self.value(fields["node"])  # content over state.conversations.INLINE_MAX
                w.write({**out, **fields})
        for key, raw in self._rows("thruns", tprefix):
            run_id = raw.decode()
            run = txn_get(self.txn, db["runs"], layout.ns_key(ns, run_id))
            if run is None:
                continue
            w.write({"t": "run", "thread": tid, "run_id": run_id, **fields_of(layout.run_decoder.decode(run))})
            for what, due in self.run_timers.get(run_id, ()):
                w.write({"t": "schedule", "thread": tid, "what": what, "run_id": run_id, "due_us": due})
        for key, _ in self._rows("effthr", tprefix):
            ikey = key[8:].decode()
            eff = txn_get(self.txn, db["effects"], layout.ns_key(ns, ikey))
            if eff is not None:
                w.write({"t": "effect", "thread": tid, "idempotency_key": ikey,
                         **fields_of(layout.effect_decoder.decode(eff))})
        for entry in self.conv_timers.get(tid, []) + self.queue.get(trec.tkey, []):
            w.write({"t": "schedule", "thread": tid, **entry})

    def namespace(self) -> None:
        """The namespace's memory (items, history, vectors, spaces) and its conversation settings."""
        w, db, ns = self.w, self.store.db, self.ns
        spaces: dict[int, str] = {}
        prefix = ns.encode() + SEP
        for key, raw in self._rows("memspace", prefix):
            rec = layout.memspace_decoder.decode(raw)
            spaces[rec.space_id] = key[len(prefix):].decode()
            w.write({"t": "memory_space", "name": key[len(prefix):].decode(), "dims": rec.dims})
        for key, raw in self._rows("mempaths", prefix):
            labels = layout.mem_labels_of(key, len(prefix) - 1)
            prec = layout.mempath_decoder.decode(raw)
            w.write({"t": "memory_path", "labels": labels, "first_seq": prec.first_seq, "live": prec.live})
            pid = layout.u64(prec.path_id)
            for ikey, iraw in self._rows("memitems", pid):
                item = layout.memitem_decoder.decode(iraw)
                fields = fields_of(item)
                fields["value"] = self.value(item.value)
                vectors = []
                for f in item.vector_fields:
                    vraw = txn_get(self.txn, db["memvec"], layout.mem_vec_key(item.item_id, f))
                    if vraw is not None:
                        vec = layout.memvec_decoder.decode(vraw)
                        vectors.append({"field": f, "space": spaces.get(vec.space_id, item.space), "dims": vec.dims,
                                        "version": vec.version, "data": vec.data})
                w.write({"t": "memory_item", "labels": labels, "key": ikey[8:].decode(), **fields,
                         "vectors": vectors})
            for hkey, hraw in self._rows("memhist", pid):
                rev = layout.memrev_decoder.decode(hraw)
                fields = fields_of(rev)
                fields["value"] = None if rev.value is None else self.value(rev.value)
                w.write({"t": "memory_revision", "labels": labels, "version": layout.read_u64(hkey[-8:]), **fields})
        raw = txn_get(self.txn, db["nsconf"], ns.encode())
        if raw is not None:
            w.write({"t": "namespace_config", **fields_of(layout.nsconf_decoder.decode(raw))})
        for key, raw in self._rows("nspins", prefix):
            w.write({"t": "namespace_pin", "pin_id": key[len(prefix):].decode(),
                     **fields_of(layout.pin_decoder.decode(raw))})
        for key, raw in self._rows("schemas", prefix):  # the schema registry, with its migration steps
            w.write({"t": "schema", "name": key[len(prefix):].decode(), **fields_of(layout.schema_decoder.decode(raw))})


def txn_get(txn, db, key: bytes) -> bytes | None:
    got = txn.get(key, db=db)
    return None if got is None else bytes(got)


# ----------------------------------------------------------------- import

@dataclasses.dataclass
class ImportSummary:
    threads: int
    replaced: int
    checkpoints: int
    memory_items: int
    memory_revisions: int
    settings_kept: int
    records: int
    seconds: float
    namespace: str
    sealed: bool = False  # the values were sealed under the target namespace's key
    source_encrypted: bool = False  # the file came from an encrypted namespace
    resumed: int = 0  # threads an interrupted run of this same import had imported already (not written again)
    longest_job: float = 0.0  # seconds: the longest write job (the writer's hold) of the import


class _Blobs:
    """The blobs of a verified file, read from it on demand (exportfile.Index): never all in memory."""

    def __init__(self, index: exportfile.Index) -> None:
        self.index = index

    def __contains__(self, h) -> bool:
        return h in self.index.blob_at

    def __getitem__(self, h: bytes) -> bytes:
        return self.index.blob(h)

    def __len__(self) -> int:
        return len(self.index.blob_at)

    def __iter__(self):
        return iter(self.index.blob_at)

    def size(self, h: bytes) -> int:
        return self.index.blob_size(h)


class _Recs:
    """Records of the file by their place in it (read again each time they are iterated)."""

    def __init__(self, index: exportfile.Index, at=None) -> None:
        self.index = index
        self.at = array.array("I") if at is None else at
        self.late = array.array("I")  # (of a thread's: the places of its runs, effects and timers)

    def late_records(self):
        return self.index.records(self.late)

    def __iter__(self):
        return self.index.records(self.at)

    def __len__(self) -> int:
        return len(self.at)

    def __bool__(self) -> bool:
        return len(self.at) > 0


@dataclasses.dataclass
class _Plan:
    ns: str
    threads: list  # (thread record, _Recs: the thread's records)
    memory: _Recs
    blobs: _Blobs
    roots: dict  # the file's root hash -> the root this store builds (empty: the same, a file of this format)
    records: int
    header: dict
    blake3: str
    items: "_Items | None" = None  # the value node hash of each blob, built while checking
    index: exportfile.Index | None = None

    def root(self, v: dict) -> bytes:
        r = v.get("root", b"")
        return self.roots.get(r, r)

    def close(self) -> None:
        if self.index is not None:
            self.index.src.close()


class _Items:
    """The value node hash of each blob (and the sizes of its nodes), built once per import (a history's lists
    share their items: each checkpoint names every item again, and hashing them again made the import
    quadratic in time). Hashes and sizes only: a node's bytes are built again from the file when written."""

    def __init__(self, blobs) -> None:
        self.blobs = blobs
        self.built: dict[bytes, bytes] = {}

    def _get(self, h: bytes) -> bytes:
        got = self.built.get(h)
        if got is None:  # root hash, then (hash, 4-byte size) per node: bytes (no object for the cyclic GC)
            nodes: list = []
            root = hp.value_node(self.blobs[h], nodes)
            got = self.built[h] = root + b"".join(nh + len(n).to_bytes(4, "big") for nh, n in nodes)
        return got

    def hash(self, h: bytes) -> bytes:
        return self._get(h)[:H]

    def sizes(self, h: bytes) -> list:
        """[(node hash, canonical size), ...] of the blob's value node(s)."""
        got = self._get(h)
        return [(got[i:i + H], int.from_bytes(got[i + H:i + H + 4], "big")) for i in range(H, len(got), H + 4)]

    def node(self, h: bytes, out: list) -> bytes:
        """The blob's value node hash; its nodes (bytes) appended to ``out``."""
        nodes: list = []
        root = hp.value_node(self.blobs[h], nodes)
        out.extend(nodes)
        return root


def _rebuild(v: dict, blobs, built: list | None, items: _Items | None = None, elements: bool = True) -> bytes:
    """The root hash of value ``v`` of the file; its nodes appended to ``built``: the list's or map's own
    nodes, and with ``elements`` the value nodes of its blobs too (read from the file)."""
    out = built if built is not None else []
    shape = v["shape"]
    if items is None:
        items = _Items(blobs)
    elem = (lambda h: items.node(h, out)) if elements and built is not None else items.hash
    if shape == "list":
        return hp.list_append(None, [elem(h) for h in v["items"]], out)
    if shape == "map":
        return hp.map_build([(k, elem(h)) for k, h in sorted(v["entries"], key=lambda e: e[0].encode())], out)
    return elem(v["h"])


def _values_in(kind: str, rec: dict):
    if kind == "checkpoint":
        for ch in rec.get("channels") or ():
            yield f"channel {ch[0]!r}", ch[1]
        if rec.get("extra") is not None:
            yield "extra", rec["extra"]
    elif kind == "write" or kind == "memory_item":
        yield "value", rec.get("value")
    elif kind == "memory_revision":
        if rec.get("value") is not None:
            yield "value", rec["value"]
    elif kind == "artifact":
        yield "content", rec.get("content")
    elif kind == "conversation_item" and rec.get("node") is not None:
        yield "node", rec["node"]


def plan(contents: exportfile.Index, ns: str | None = None, progress: Progress | None = None) -> _Plan:
    """Check every record of a verified file (kinds, fields, values and their root hashes) without a store,
    reading the records one at a time; ExportFileError on the first problem. The plan holds where each
    thread's records are, not the records."""
    tick = progress or (lambda phase, done, total: None)
    header = contents.header
    scope = header.get("scope") or {}
    src_ns = scope.get("namespace")
    if not isinstance(src_ns, str):
        raise ExportFileError("the header names no namespace")
    target = ns or src_ns
    if not target or len(target.encode()) > limits.MAX_NAMESPACE_BYTES or "\x00" in target:
        raise ExportFileError(f"namespace {target!r}: 1 to {limits.MAX_NAMESPACE_BYTES} bytes, no NUL")
    same_format = (header.get("source") or {}).get("store_format") == layout.FORMAT_NAME
    blobs = _Blobs(contents)
    roots: dict[bytes, bytes] = {}  # (another format's roots only)
    checked: set[bytes] = set()
    threads: list = []
    memory = _Recs(contents)
    current = None
    labels_seen: set[tuple] = set()
    items = _Items(blobs)
    total = len(contents)
    for i, rec in enumerate(contents.records()):
        kind = rec["t"]
        where = f"record {i + 1} ({kind})"
        if kind == "thread":
            tid = rec.get("id")
            if not isinstance(tid, str) or not tid or len(tid.encode()) > limits.MAX_ID_BYTES or "\x00" in tid:
                raise ExportFileError(f"{where}: a thread id must be 1 to {limits.MAX_ID_BYTES} bytes, no NUL")
            current = (rec, _Recs(contents))
            threads.append(current)
        elif kind in THREAD_KINDS:
            if current is None or rec.get("thread") != current[0]["id"]:
                raise ExportFileError(f"{where}: not after its thread's record")
            current[1].at.append(i)
            if kind not in _BY_KIND:
                current[1].late.append(i)
        elif kind in NAMESPACE_KINDS:
            if kind == "memory_path":
                labels_seen.add(tuple(rec.get("labels") or ()))
            elif kind in ("memory_item", "memory_revision") and tuple(rec.get("labels") or ()) not in labels_seen:
                raise ExportFileError(f"{where}: not after its memory path's record")
            memory.at.append(i)
        else:
            raise ExportFileError(f"{where}: unknown record kind")
        for what, v in _values_in(kind, rec):
            exportfile.check_value(v, blobs, f"{where} {what}")
            root = v.get("root", b"")
            if root not in checked:
                try:
                    got = _rebuild(v, blobs, None, items, elements=False)
                except hp.UnsupportedValue as e:
                    raise ExportFileError(f"{where} {what}: not a value of the value model ({e})") from None
                if same_format and got != root:
                    raise ExportFileError(f"{where} {what}: the value does not hash to the root the file names")
                checked.add(root)
                if got != root:
                    roots[root] = got
        try:
            _check_fields(kind, rec)
        except Exception as e:  # noqa: BLE001 - any field the store's records cannot hold
            raise ExportFileError(f"{where}: {type(e).__name__}: {e}") from None
        if i % 1000 == 0:
            tick("checking", i, total)
    tick("checking", total, total)
    return _Plan(ns or src_ns, threads, memory, blobs, roots, total, header, contents.blake3, items, contents)


_NODE = b"\x00" * 8


def _check_fields(kind: str, rec: dict) -> None:
    """Convert the record as the import will (dummy internal numbers) so a bad field is found first."""
    if kind == "thread":
        record_bytes(layout.ThreadRec, layout.thread_decoder, rec, tkey=1)
    elif kind in _BY_KIND:
        _, _, parts, cls, decoder = _BY_KIND[kind]
        join_key(parts, rec)
        if cls is None:
            if kind in _SEQ_INDEXES and not isinstance(rec.get("seq"), int):
                raise ValueError("no seq")
        elif kind == "checkpoint":
            _manifest(rec, lambda v: _NODE)
        else:
            record_bytes(cls, decoder, rec, **_node_fields(kind, rec, lambda v: _NODE))
    elif kind == "run":
        join_key((("run_id", "s"),), rec)
        record_bytes(layout.RunRec, layout.run_decoder, rec, tkey=1)
    elif kind == "effect":
        join_key((("idempotency_key", "s"),), rec)
        record_bytes(layout.EffectRec, layout.effect_decoder, rec, tkey=1)
    elif kind == "schedule":
        if rec.get("what") not in ("lease", "deadline", "idle", "fallback", "queue") or not isinstance(
                rec.get("due_us"), int):
            raise ValueError("an unknown schedule")
        if rec["what"] in ("lease", "deadline") and not isinstance(rec.get("run_id"), str):
            raise ValueError("a run timer without a run id")
        if rec["what"] in ("fallback", "queue") and not (isinstance(rec.get("level"), int)
                                                         and isinstance(rec.get("first_seq"), int)):
            raise ValueError("a compaction timer without its range")
    elif kind == "memory_space":
        if not isinstance(rec.get("name"), str) or not isinstance(rec.get("dims"), int):
            raise ValueError("a vector space without name and dims")
    elif kind == "memory_path":
        layout.mem_path_key("", rec["labels"])
    elif kind == "memory_item":
        layout.mem_item_key(0, rec["key"])
        record_bytes(layout.MemItemRec, layout.memitem_decoder, rec, item_id=1, value=_NODE)
    elif kind == "memory_revision":
        layout.mem_hist_key(0, rec["key"], rec["version"])
        record_bytes(layout.MemRevRec, layout.memrev_decoder, rec, value=None if rec.get("value") is None else _NODE)
    elif kind == "namespace_config":
        record_bytes(layout.NsConvConf, layout.nsconf_decoder, rec)
    elif kind == "namespace_pin":
        record_bytes(layout.PinRec, layout.pin_decoder, rec)
    elif kind == "schema":
        layout.schema_key("", rec["name"])
        record_bytes(layout.SchemaRec, layout.schema_decoder, rec)


def _node_fields(kind: str, rec: dict, node_of) -> dict:
    if kind == "write":
        return {"value": node_of(rec["value"])}
    if kind == "artifact":
        return {"content": node_of(rec["content"])}
    if kind == "conversation_item":  # "node" is absent in files written before large contents became nodes
        return {"node": None if rec.get("node") is None else node_of(rec["node"])}
    return {}


def _manifest(rec: dict, node_of) -> bytes:
    return record_bytes(layout.Manifest, layout.manifest_decoder, rec, parent=layout.pack_id(rec["parent_id"]),
                        channels=[(name, node_of(v)) for name, v in rec["channels"]],
                        extra=None if rec.get("extra") is None else node_of(rec["extra"]))


#: how a conflict's message says to replace (the CLI's flag and the RPC's field)
REPLACE_HINT = "import with replace to replace it: sidecar import --replace, ImportNamespaceRequest.replace"


def check_conflicts(store, p: _Plan, replace: bool, skip: int = 0) -> None:
    """ALREADY_EXISTS (IMPORT_THREAD_EXISTS or IMPORT_CONFLICT) when the target holds what the file would
    create, unless ``replace`` (threads and memory items are then replaced); ``skip``: the first threads of
    the file are not looked at (a resumed import wrote them)."""
    with store.read() as txn:
        conflicts_in(txn, store, p, replace, p.threads[skip:])


def conflicts_in(txn, store, p: _Plan, replace: bool, threads=None, memory: bool = True) -> None:
    """check_conflicts in the transaction ``txn`` (an import's own write: nothing can come in between), of
    ``threads`` (default: the file's) and, with ``memory``, of its memory items and vector spaces."""
    ns, db = p.ns, store.db
    for trec, recs in p.threads if threads is None else threads:
        tid = trec["id"]
        if isinstance(recs, _Recs):
            recs = recs.late_records()  # (only runs and effects can conflict)
        existing = records.thread_any(txn, store, ns, tid)
        if existing is not None and not replace:
            raise conflict("thread", f"thread {tid!r} exists in namespace {ns!r} ({REPLACE_HINT})", field="thread",
                           thread_id=tid, namespace=ns)
        for rec in recs:
            if rec["t"] == "run":
                raw = txn_get(txn, db["runs"], layout.ns_key(ns, rec["run_id"]))
                if raw is not None and not (replace and layout.run_decoder.decode(raw).thread_id == tid):
                    raise conflict("run", f"run {rec['run_id']!r} of thread {tid!r} exists in namespace {ns!r} "
                                   f"on another thread", field="run_id", run_id=rec["run_id"], thread_id=tid)
            elif rec["t"] == "effect":
                raw = txn_get(txn, db["effects"], layout.ns_key(ns, rec["idempotency_key"]))
                if raw is not None and not (replace and layout.effect_decoder.decode(raw).thread_id == tid):
                    raise conflict("effect", f"effect {rec['idempotency_key']!r} of thread {tid!r} exists in "
                                   f"namespace {ns!r} on another thread", field="idempotency_key",
                                   idempotency_key=rec["idempotency_key"], thread_id=tid)
    if not memory:
        return
    if not replace:
        for rec in p.memory:
            if rec["t"] not in ("memory_item", "memory_revision"):
                continue
            praw = txn_get(txn, db["mempaths"], layout.mem_path_key(ns, rec["labels"]))
            if praw is None:
                continue
            pid = layout.mempath_decoder.decode(praw).path_id
            key = rec["key"]
            if txn_get(txn, db["memitems"], layout.mem_item_key(pid, key)) is not None or _has_history(
                    txn, db, pid, key):
                raise conflict("memory", f"memory item {key!r} at path {rec['labels']!r} exists in namespace "
                               f"{ns!r} ({REPLACE_HINT})", field="key", key=key,
                               path="/".join(rec["labels"]))
    for rec in p.memory:
        if rec["t"] == "memory_space":
            raw = txn_get(txn, db["memspace"], layout.mem_space_key(ns, rec["name"]))
            if raw is not None and layout.memspace_decoder.decode(raw).dims != rec["dims"]:
                raise conflict("space", f"vector space {rec['name']!r} of namespace {ns!r} has another "
                               f"dimension", field="space", space=rec["name"])


# ----------------------------------------------------------------- quotas

def _value_bytes(p: _Plan, v: dict) -> int:
    """The canonical encoding's length of a file value (what usage charges a memory item or a conversation
    node: usage._value_bytes of the value once stored)."""
    shape = v["shape"]
    if shape == "list":
        return len(array_header(len(v["items"]))) + sum(p.blobs.size(h) for h in v["items"])
    if shape == "map":
        return len(map_header(len(v["entries"]))) + sum(len(_str_encoder.encode(k)) + p.blobs.size(h)
                                                        for k, h in v["entries"])
    return p.blobs.size(v["h"])


def file_usage(p: _Plan, with_bytes: bool = True, skip: int = 0) -> layout.UsageRec:
    """What the file's records will be charged once imported (storage/usage.py: what
    ``usage.rebuild_namespace`` counts of them): its threads; its conversation items, artifact versions and
    memory items; and, with ``with_bytes``, per thread the canonical bytes of the distinct nodes its
    checkpoints and pending writes reach plus their metadata, its artifacts' sizes and conversation items, and
    the memory items' values and old versions. CPU only (no store): the value nodes are built as the import
    builds them. ``skip``: the first threads are not counted (imported already: a resumed import)."""
    u = layout.UsageRec(1, 0, len(p.threads) - skip, 0, 0)
    items = p.items or _Items(p.blobs)
    for _, recs in p.threads[skip:]:
        seen_roots: set[bytes] = set()
        seen: set[bytes] = set()
        for rec in recs:
            kind = rec["t"]
            if kind == "artifact":
                u.items += 1
            elif kind == "conversation_state":
                u.items += layout.convstate_decoder.decode(record_bytes(layout.ConvState, layout.convstate_decoder,
                                                                        rec)).count
            if not with_bytes:
                continue
            if kind == "checkpoint":
                u.nbytes += len(bytes(layout.manifest_decoder.decode(_manifest(rec, lambda v: _NODE)).metadata))
            elif kind == "artifact":
                u.nbytes += layout.artifact_decoder.decode(record_bytes(
                    layout.ArtifactRec, layout.artifact_decoder, rec, **_node_fields(kind, rec, lambda v: _NODE))).size
            elif kind == "conversation_item":
                item = layout.item_decoder.decode(record_bytes(layout.ItemRec, layout.item_decoder, rec,
                                                               **_node_fields(kind, rec, lambda v: _NODE)))
                u.nbytes += (len(item.inline) if item.node is None else _value_bytes(p, rec["node"])) + (
                    len(bytes(item.metadata)) if item.metadata is not None else 0)
            if kind in ("checkpoint", "write"):
                for _, v in _values_in(kind, rec):
                    root = p.root(v)
                    if root in seen_roots:
                        continue
                    seen_roots.add(root)
                    built: list = []
                    _rebuild(v, p.blobs, built, items, elements=False)
                    for h, node in built:
                        if h not in seen:
                            seen.add(h)
                            u.nbytes += len(node)
                    for bh in _blobs_of(v):
                        for h, size in items.sizes(bh):
                            if h not in seen:
                                seen.add(h)
                                u.nbytes += size
    live = {(tuple(r["labels"]), r["key"]): r["version"] for r in p.memory if r["t"] == "memory_item"}
    u.items += len(live)
    if with_bytes:
        for rec in p.memory:
            if rec["t"] == "memory_item":
                u.nbytes += _value_bytes(p, rec["value"])
            elif rec["t"] == "memory_revision" and rec.get("value") is not None and live.get(
                    (tuple(rec["labels"]), rec["key"])) != rec["version"]:
                u.nbytes += _value_bytes(p, rec["value"])  # an old version: charged as history
    return u


def _blobs_of(v: dict) -> list:
    shape = v["shape"]
    return v["items"] if shape == "list" else [e[1] for e in v["entries"]] if shape == "map" else [v["h"]]


def replaced_usage(txn, store, p: _Plan, replace: bool, skip: int = 0) -> layout.UsageRec:
    """What the import refunds of what the target holds: the threads and memory items (with their history)
    a ``replace`` replaces."""
    u = layout.UsageRec(1, 0, 0, 0, 0)
    if not replace:
        return u
    ns, db = p.ns, store.db
    for trec, _ in p.threads[skip:]:
        old = records.thread_any(txn, store, ns, trec["id"])
        t = None if old is None else usage.thread(txn, store, old.tkey)
        if t is None:
            continue
        conv = usage.keys_of(txn, db["icharge"], usage.ITEM_CONV + layout.tkey_prefix(old.tkey))
        u.nbytes += t.nbytes + sum(layout.read_u64(txn.get(k, db=db["icharge"])) for k in conv)
        u.threads += 1
        u.items += t.items
    done = set()
    for rec in p.memory:
        if rec["t"] not in ("memory_item", "memory_revision"):
            continue
        labels, key = tuple(rec["labels"]), rec["key"]
        if (labels, key) in done:
            continue
        done.add((labels, key))
        praw = txn_get(txn, db["mempaths"], layout.mem_path_key(ns, labels))
        if praw is None:
            continue
        pid = layout.mempath_decoder.decode(praw).path_id
        if txn_get(txn, db["memitems"], layout.mem_item_key(pid, key)) is not None:
            u.items += 1
        rows = [usage.mem_item_key(layout.mem_item_key(pid, key))] + usage.keys_of(
            txn, db["icharge"], usage.hist_charge_key(layout.mem_hist_prefix(pid, key)))
        u.nbytes += sum(layout.read_u64(raw) for raw in (txn.get(k, db=db["icharge"]) for k in rows) if raw is not None)
    return u


def quota_in_effect(store, ns: str) -> usage.Quota:
    with store.read() as txn:
        return usage.quota_of(txn, store, ns)


def check_quota(store, p: _Plan, replace: bool, added: layout.UsageRec | None = None, skip: int = 0) -> None:
    """QUOTA_EXCEEDED (RESOURCE_EXHAUSTED, as any write) when the import would take its namespace over a quota
    (storage/usage.py), checked before anything is written; ``added``: :func:`file_usage` of the plan, else
    computed here (its bytes only when a max_bytes quota is in effect). The import's record transaction checks
    the recounted namespace again. ``skip``: the threads a resumed import has imported already."""
    q = quota_in_effect(store, p.ns)
    if not (q.max_bytes or q.max_threads or q.max_items):
        return
    if added is None:
        added = file_usage(p, with_bytes=bool(q.max_bytes), skip=skip)
    with store.read() as txn:
        before = usage.namespace(txn, store, p.ns)
        gone = replaced_usage(txn, store, p, replace, skip)
        after = layout.UsageRec(1, before.nbytes - gone.nbytes + added.nbytes if q.max_bytes else before.nbytes,
                                before.threads - gone.threads + added.threads, before.items - gone.items + added.items,
                                0)
        usage.check_total(txn, store, p.ns, before, after, "import")


def _has_history(txn, db, path_id: int, key: str) -> bool:
    prefix = layout.mem_hist_prefix(path_id, key)
    cursor = txn.cursor(db=db["memhist"])
    if cursor.set_range(prefix):
        for k, raw in cursor.iternext():
            if not bytes(k).startswith(prefix):
                return False
            if layout.memrev_decoder.decode(raw).key == key:
                return True
    return False


NODE_BATCH = 256 << 10  # value bytes per write job of an import (bounds the writer's hold of one job)
NODE_JOB = 256  # values per write job of an import (as NODE_BATCH: many small values)
MARKER = b"import/"  # meta: + namespace + NUL + the file's BLAKE3 (hex) -> an import under way (_Importer)
_marker_decoder = msgspec.msgpack.Decoder(dict)


def _marker_key(p: _Plan) -> bytes:
    return MARKER + p.ns.encode() + SEP + p.blake3.encode()


RECORD_JOB = 200  # records per write job of a large thread (staged under its key, then published)


@dataclasses.dataclass
class _Staged:
    """A thread being written: its new key, its charges so far, what waits for its record."""
    tkey: int | None = None
    charges: "usage.ThreadCharges | None" = None
    late: list = dataclasses.field(default_factory=list)  # its runs, effects and timers (few): for publish
    runidx: list = dataclasses.field(default_factory=list)
    checkpoints: int = 0


def _marker_of(store, p: _Plan) -> dict:
    with store.read() as txn:
        raw = txn_get(txn, store.db["meta"], _marker_key(p))
    return {} if raw is None else _marker_decoder.decode(raw)


def resumed_threads(store, p: _Plan) -> int:
    """How many of the file's threads (in file order) an interrupted import of this same file into this same
    namespace wrote already (its marker in ``meta``); 0 when none is under way."""
    done = _marker_of(store, p).get("done", 0)
    return done if isinstance(done, int) and 0 <= done <= len(p.threads) else 0


class _Importer:
    """Writes a verified plan as a sequence of write jobs (:meth:`jobs`), each short and each leaving the store
    consistent: the values first (every blob's value node, then per thread the nodes of its lists and maps:
    jobs of about NODE_BATCH bytes, reached by nothing yet; garbage collection holds its sweeps meanwhile),
    then one job per thread holding all its records (a thread appears whole or not at all), then one job for
    the namespace's memory and settings. Each thread job checks the thread's conflicts and the namespace's
    quota again and advances a marker in ``meta`` (the file's BLAKE3, how many threads are in): an import
    interrupted (a crash, a conflict or a quota met midway) is finished by running it again, which skips the
    threads the marker counts. The last job drops the marker."""

    def __init__(self, store, p: _Plan, replace: bool = False, skip: int = 0, tick=None) -> None:
        self.store, self.p, self.db = store, p, store.db
        self.replace, self.skip = replace, skip
        self.staged = _marker_of(store, p).get("staging")  # [thread id, key]: rows an interrupted run left
        self.tick = tick or (lambda phase, done, total: None)
        self.node_ids: dict[bytes, bytes] = {}  # of the thread being written (reset per thread)
        self.items = p.items or _Items(p.blobs)
        self.checkpoints = self.replaced = 0
        self.result = (0, 0, 0, 0, 0)
        self.job_seconds: list[float] = []  # each write job's time in the writer (wall clock)
        self.job_cpu: list[float] = []

    def _timed(self, fn, final: bool = False):
        def job(txn):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(txn)
            finally:
                self.job_seconds.append(time.perf_counter() - t0)
                self.job_cpu.append(time.thread_time() - c0)  # (its CPU: the same less any wait for a core)
        job.final = final  # the import's last job (it drops the marker)
        return job

    def jobs(self):
        """The import's write jobs, in order (each ``fn(txn)``); the CPU work between them (reading the file,
        building nodes) is done by the generator, outside any transaction."""
        p = self.p
        last_thread = len(p.threads) - 1 if not p.memory else -1
        # 1. every blob's value node (elements of lists and maps, and single values)
        batch, size, done = [], 0, 0
        for h in p.blobs:
            built: list = []
            root = self.items.node(h, built)
            batch.append((root, built))
            size += p.blobs.size(h) + 64
            done += 1
            if size >= NODE_BATCH or len(batch) >= NODE_JOB:
                yield self._timed(lambda txn, b=batch: self.write_nodes(txn, b))
                self.tick("importing values", done, len(p.blobs))
                batch, size = [], 0
        if batch:
            yield self._timed(lambda txn, b=batch: self.write_nodes(txn, b))
        self.tick("importing values", done, len(p.blobs))
        # 2. per thread: the nodes of its lists and maps, then its records
        if self.staged is not None:  # what an interrupted run of this import staged (no record names it)
            yield self._timed(lambda txn: self.drop_staged(txn, self.staged))
        for i in range(self.skip, len(p.threads)):
            trec, recs = p.threads[i]
            yield from self._composites(recs)
            st = _Staged()
            # a large thread: its rows in parts of RECORD_JOB records, then it appears (with the last part);
            # the records are read here, outside the jobs
            starts = range(0, len(recs), RECORD_JOB) if len(recs) else [0]
            for j in starts:
                at = recs.at[j:j + RECORD_JOB]
                part = list(zip(at, p.index.records(at)))
                st.late.extend(rec for _, rec in part if rec["t"] not in _BY_KIND)
                if j + RECORD_JOB < len(recs):
                    yield self._timed(lambda txn, i=i, trec=trec, st=st, part=part: self.stage_job(txn, i, trec, st,
                                                                                                   part))
                    self.tick("importing records of a large thread", j + len(part), len(recs))
                else:
                    yield self._timed(lambda txn, i=i, trec=trec, st=st, part=part: self.publish_job(
                        txn, i, trec, st, part, i == last_thread), i == last_thread)
            self.tick("importing threads", i + 1, len(p.threads))
        # 3. the namespace's memory and settings
        if p.memory:
            yield from self._composites(p.memory)
            yield self._timed(self.namespace_job, True)

    def _composites(self, recs):
        """Write jobs storing the list and map nodes of the values of ``recs`` (their elements are stored)."""
        p = self.p
        batch, size, seen = [], 0, set()
        for rec in recs:
            for _, v in _values_in(rec["t"], rec):
                if v["shape"] == "value":
                    continue
                root = p.root(v)
                if root in seen:
                    continue
                seen.add(root)
                built: list = []
                _rebuild(v, p.blobs, built, self.items, elements=False)
                batch.append((root, built))
                size += sum(len(n) for _, n in built)
                if size >= NODE_BATCH or len(batch) >= NODE_JOB:
                    yield self._timed(lambda txn, b=batch: self.write_nodes(txn, b))
                    batch, size = [], 0
        if batch:
            yield self._timed(lambda txn, b=batch: self.write_nodes(txn, b))

    def node(self, txn, v: dict) -> bytes:
        root = self.p.root(v)
        got = self.node_ids.get(root)
        if got is None:
            got = nodes.index_get(txn, self.store, root, self.p.ns)
            if got is None:  # (written by the jobs before; built again should they be gone)
                built: list = []
                _rebuild(v, self.p.blobs, built, self.items)
                got = nodes.write(txn, self.store, built, {}, [root], self.p.ns)[root]
            self.node_ids[root] = bytes(got)
        return self.node_ids[root]

    def write_nodes(self, txn, batch: list) -> None:
        """Store the values of ``batch`` ([(root, nodes)]) that the store does not hold yet."""
        keep = self.store.gc_keep
        for root, built in batch:
            got = nodes.index_get(txn, self.store, root, self.p.ns)
            if got is None:
                got = nodes.write(txn, self.store, built, {}, [root], self.p.ns)[root]
            if keep is not None:
                keep.add(bytes(got))

    def _marker(self, txn, done: int, last: bool, staging: tuple | None = None) -> None:
        key, meta = _marker_key(self.p), self.db["meta"]
        if last:
            txn.delete(key, db=meta)
        else:
            txn.put(key, _str_encoder.encode({"done": done, "threads": len(self.p.threads), "replace": self.replace,
                                              "blake3": self.p.blake3,
                                              "staging": list(staging) if staging else None}), db=meta)

    def stage_job(self, txn, i: int, trec: dict, st: "_Staged", recs: list) -> None:
        """Part of thread ``i``'s rows ([(place, record)]) under its new key (the first part takes the key and
        notes it in the marker: an import interrupted here leaves rows no record names, dropped when it is run
        again)."""
        if st.tkey is None:
            self.node_ids = {}  # (a cache per thread: bounded by one thread's values)
            st.tkey = records.new_tkey(txn, self.store)
            st.charges = usage.ThreadCharges(self.store, self.p.ns, st.tkey)
            self._marker(txn, i, False, staging=(trec["id"], st.tkey))
        self.stage(txn, st, recs)
        self._keep()

    def publish_job(self, txn, i: int, trec: dict, st: "_Staged", part: list, last: bool) -> None:
        """Thread ``i`` appears, whole: its conflicts checked again, its old self refunded and dropped
        (replace), its record and the rows under other keys, its counters, the namespace's quota checked again,
        the marker advanced (dropped after the file's last part)."""
        store, ns = self.store, self.p.ns
        self.stage_job(txn, i, trec, st, part)  # the last part (a small thread: all of it)
        conflicts_in(txn, store, self.p, self.replace, [(trec, st.late)], memory=False)
        before = usage.namespace(txn, store, ns)
        rep = self.publish(txn, trec, st, self.replace)
        t = st.charges.finish(txn)
        conv = usage.rebuild_conversation(txn, store, st.tkey)[1]
        after = usage.namespace(txn, store, ns)
        after.nbytes += t.nbytes + conv
        after.threads += 1
        after.items += t.items
        after.checkpoints += t.checkpoints
        txn.put(layout.ns_usage_key(ns), layout.encode(after), db=self.db["usage"])
        # over a quota (something else wrote meanwhile): QUOTA_EXCEEDED, and this thread does not appear
        usage.check_total(txn, store, ns, before, after, "import")
        self._marker(txn, i + 1, last)
        self._keep()
        self.checkpoints += st.checkpoints
        self.replaced += rep

    def drop_staged(self, txn, staged) -> None:
        """The rows an interrupted run staged for a thread that never appeared (the marker names them)."""
        tid, tkey = staged
        thread_ops.delete_contents(txn, self.store, self.p.ns, tid, tkey)  # (published, the marker says no more)
        self._marker(txn, self.skip, False)

    def _keep(self) -> None:
        keep = self.store.gc_keep
        if keep is not None:
            keep.update(self.node_ids.values())

    def namespace_job(self, txn) -> None:
        """The namespace's memory and settings in ``txn``: conflicts and quota checked again, marker dropped."""
        store, ns = self.store, self.p.ns
        self.node_ids = {}
        conflicts_in(txn, store, self.p, self.replace, [])
        before = usage.namespace(txn, store, ns)
        mem_before = (usage.rebuild_memory(txn, store, ns).get(ns, 0) + usage.rebuild_history(txn, store, ns).get(ns, 0),
                      usage._memory_items(txn, store).get(ns, 0))
        items, revs, kept = self.namespace(txn, self.replace)
        mem_after = (usage.rebuild_memory(txn, store, ns).get(ns, 0) + usage.rebuild_history(txn, store, ns).get(ns, 0),
                     usage._memory_items(txn, store).get(ns, 0))
        after = layout.UsageRec(1, before.nbytes + mem_after[0] - mem_before[0], before.threads,
                                before.items + mem_after[1] - mem_before[1], before.checkpoints)
        txn.put(layout.ns_usage_key(ns), layout.encode(after), db=self.db["usage"])
        usage.check_total(txn, store, ns, before, after, "import")
        self._marker(txn, len(self.p.threads), True)
        keep = store.gc_keep
        if keep is not None:
            keep.update(self.node_ids.values())
        self.result = (0, 0, items, revs, kept)

    def stage(self, txn, st: "_Staged", recs) -> None:
        """Write the rows of ``recs`` stored under the thread's key (checkpoints, pending writes, steps, events,
        conversation, ...) under ``st.tkey``, which no thread record names yet: nothing reads them until
        :meth:`publish`. The records under other keys (runs, effects, timers) wait for it (``st.late``)."""
        db, ns = self.db, self.p.ns
        tkey = st.tkey
        tp = layout.tkey_prefix(tkey)
        node_of = lambda v: self.node(txn, v)  # noqa: E731
        charges = st.charges
        for _, rec in recs:
            kind = rec["t"]
            if kind not in _BY_KIND:
                continue  # (in st.late)
            _, table, parts, cls, decoder = _BY_KIND[kind]
            key = tp + join_key(parts, rec)
            if cls is None:
                value = layout.u64(rec["seq"]) if kind in _SEQ_INDEXES else b""
            elif kind == "checkpoint":
                charges.checkpoint(txn, key, layout.manifest_decoder.decode(_manifest(rec, node_of)))
                st.checkpoints += 1
                if rec.get("run_id") is not None:
                    st.runidx.append((layout.run_key(ns, rec["run_id"], tkey, rec["checkpoint_ns"],
                                                     rec["checkpoint_id"]), layout.run_entry(ns, rec["run_id"])))
                continue
            elif kind == "write":
                charges.write(txn, key, layout.write_decoder.decode(
                    record_bytes(cls, decoder, rec, **_node_fields(kind, rec, node_of))))
                continue
            else:
                value = record_bytes(cls, decoder, rec, **_node_fields(kind, rec, node_of))
            txn.put(key, value, db=db[table])

    def publish(self, txn, trec: dict, st: "_Staged", replace: bool) -> bool:
        """The thread's record (replacing the one of that id, with ``replace``), its runs, effects and timers,
        its counters: the staged thread appears whole. Whether one was replaced."""
        store, db, ns = self.store, self.db, self.p.ns
        tid = trec["id"]
        replaced = False
        old = records.thread_any(txn, store, ns, tid)
        if old is not None:
            if not replace:
                raise conflict("thread", f"thread {tid!r} exists in namespace {ns!r} ({REPLACE_HINT})",
                               field="thread", thread_id=tid, namespace=ns)
            usage.drop_thread(txn, store, ns, old.tkey)
            thread_ops.delete_contents(txn, store, ns, tid, old.tkey)
            txn.delete(layout.thread_key(ns, tid), db=db["threads"])
            replaced = True
        tkey = st.tkey
        txn.put(layout.thread_key(ns, tid), record_bytes(layout.ThreadRec, layout.thread_decoder, trec, tkey=tkey),
                db=db["threads"])
        for key, value in st.runidx:
            txn.put(key, value, db=db["runidx"])
        for rec in st.late:
            kind = rec["t"]
            if kind == "run":
                txn.put(layout.ns_key(ns, rec["run_id"]), record_bytes(layout.RunRec, layout.run_decoder, rec,
                                                                       tkey=tkey), db=db["runs"])
                txn.put(layout.seq_key(tkey, rec["seq"]), rec["run_id"].encode(), db=db["thruns"])
            elif kind == "effect":
                ikey = rec["idempotency_key"]
                txn.put(layout.ns_key(ns, ikey), record_bytes(layout.EffectRec, layout.effect_decoder, rec, tkey=tkey),
                        db=db["effects"])
                txn.put(layout.tkey_str_key(tkey, ikey), b"", db=db["effthr"])
            elif kind == "schedule":
                what, due = rec["what"], rec["due_us"]
                if what in ("lease", "deadline"):
                    txn.put(layout.timer_key(due, layout.TIMER_LEASE if what == "lease" else layout.TIMER_DEADLINE,
                                             ns, rec["run_id"]), b"", db=db["timers"])
                elif what == "idle":
                    txn.put(layout.ctimer_key(due, layout.CTIMER_IDLE, ns, tid), layout.u64(tkey), db=db["ctimers"])
                elif what == "fallback":
                    txn.put(layout.fallback_timer_key(due, ns, tid, rec["level"], rec["first_seq"]), layout.u64(tkey),
                            db=db["ctimers"])
                else:
                    txn.put(layout.cqueue_key(ns, due, tkey, rec["level"], rec["first_seq"]), tid.encode(),
                            db=db["cqueue"])
        return replaced

    def namespace(self, txn, replace: bool) -> tuple[int, int, int]:
        """Write the namespace's memory and settings; (items, revisions, settings kept as the target had them)."""
        store, db, ns = self.store, self.db, self.p.ns
        meta = db["meta"]
        mem = memstate.Memory(store)
        recs = self.p.memory
        spaces: dict[str, int] = {}
        for rec in recs:
            if rec["t"] == "memory_space":
                key = layout.mem_space_key(ns, rec["name"])
                raw = txn_get(txn, db["memspace"], key)
                if raw is None:
                    sid = layout.next_counter(txn, meta, memstate._NEXT_SPACE)
                    txn.put(key, layout.encode(layout.MemSpaceRec(layout.FORMAT_VERSION, sid, rec["dims"])),
                            db=db["memspace"])
                else:
                    sid = layout.memspace_decoder.decode(raw).space_id
                spaces[rec["name"]] = sid
        if replace:
            for rec in recs:
                if rec["t"] in ("memory_item", "memory_revision"):
                    mem.delete(txn, ns, memstate.DeleteInput(tuple(rec["labels"]), rec["key"], purge=True,
                                                             allow_missing=True), store.clock())
        # insertion order: the source's sequence numbers of paths and items, renumbered in that order
        seqs = sorted({r["first_seq"] for r in recs if r["t"] == "memory_path"}
                      | {r["ins_seq"] for r in recs if r["t"] == "memory_item"})
        new_seq = {s: layout.next_counter(txn, meta, memstate._NEXT_SEQ) for s in seqs}
        paths: dict[tuple, layout.MemPathRec] = {}
        for rec in recs:
            if rec["t"] == "memory_path":
                labels = tuple(rec["labels"])
                raw = txn_get(txn, db["mempaths"], layout.mem_path_key(ns, labels))
                if raw is None:
                    prec = layout.MemPathRec(layout.FORMAT_VERSION, layout.next_counter(txn, meta, memstate._NEXT_PATH),
                                             new_seq[rec["first_seq"]], 0)
                    txn.put(layout.u64(prec.path_id), layout.encode(layout.MemPathName(layout.FORMAT_VERSION, ns,
                                                                                       list(labels))),
                            db=db["mempathid"])
                else:
                    prec = layout.mempath_decoder.decode(raw)
                paths[labels] = prec
        item_ids: dict[int, int] = {}
        items = sorted((r for r in recs if r["t"] == "memory_item"), key=lambda r: r["item_id"])
        for rec in items:
            prec = paths[tuple(rec["labels"])]
            item_id = layout.next_counter(txn, meta, memstate._NEXT_ITEM)
            item_ids[rec["item_id"]] = item_id
            value_id = self.node(txn, rec["value"])
            data = record_bytes(layout.MemItemRec, layout.memitem_decoder, rec, item_id=item_id,
                                ins_seq=new_seq[rec["ins_seq"]], value=value_id)
            txn.put(layout.mem_item_key(prec.path_id, rec["key"]), data, db=db["memitems"])
            txn.put(layout.u64(item_id), layout.mem_item_key(prec.path_id, rec["key"]), db=db["memids"])
            txn.put(layout.mem_upd_key(ns, rec["updated_us"], item_id), b"", db=db["memupd"])
            if rec["expires_us"]:
                txn.put(layout.mem_exp_key(rec["expires_us"], item_id), b"", db=db["memexp"])
            mem._index_fields(txn, ns, item_id, self.p.blobs[rec["value"]["h"]] if rec["value"]["shape"] == "value"
                              else nodes.value_encoding(value_id, txn.get), add=True)
            for vec in rec.get("vectors") or ():
                sid = spaces.get(vec["space"])
                if sid is None:
                    raise ExportFileError(f"memory item {rec['key']!r}: a vector in space {vec['space']!r} the file "
                                          f"does not declare")
                txn.put(layout.mem_vec_key(item_id, vec["field"]),
                        layout.encode(layout.MemVecRec(layout.FORMAT_VERSION, sid, vec["dims"], vec["version"],
                                                       vec["data"])), db=db["memvec"])
            prec.live += 1
        for labels, prec in paths.items():
            txn.put(layout.mem_path_key(ns, labels), layout.encode(prec), db=db["mempaths"])
        revs = 0
        for rec in recs:
            if rec["t"] != "memory_revision":
                continue
            prec = paths[tuple(rec["labels"])]
            etag = rec["etag"]
            old_id, _, ver = etag.partition("-")
            try:
                if int(old_id, 16) in item_ids:
                    etag = layout.mem_etag(item_ids[int(old_id, 16)], int(ver))
            except ValueError:
                pass
            value = None if rec.get("value") is None else self.node(txn, rec["value"])
            txn.put(layout.mem_hist_key(prec.path_id, rec["key"], rec["version"]),
                    record_bytes(layout.MemRevRec, layout.memrev_decoder, rec, value=value, etag=etag),
                    db=db["memhist"])
            revs += 1
        kept = 0
        for rec in recs:
            if rec["t"] == "namespace_config":
                if txn.get(ns.encode(), db=db["nsconf"]) is None:
                    txn.put(ns.encode(), record_bytes(layout.NsConvConf, layout.nsconf_decoder, rec),
                            db=db["nsconf"])
                else:
                    kept += 1
            elif rec["t"] == "namespace_pin":
                key = layout.ns_key(ns, rec["pin_id"])
                if txn.get(key, db=db["nspins"]) is None:
                    txn.put(key, record_bytes(layout.PinRec, layout.pin_decoder, rec), db=db["nspins"])
                else:
                    kept += 1
            elif rec["t"] == "schema":  # as namespace settings: the target's own schema of that name is kept
                key = layout.schema_key(ns, rec["name"])
                if txn.get(key, db=db["schemas"]) is None:
                    txn.put(key, record_bytes(layout.SchemaRec, layout.schema_decoder, rec), db=db["schemas"])
                else:
                    kept += 1
        if any(rec.get("vectors") for rec in items):
            # a token no reader's index has seen: a serving sidecar's resident vector index rebuilds the
            # namespace from the next reader's snapshot (state/memory_vectors.py), imported vectors included
            txn.put(mv.token_key(ns), os.urandom(8), db=meta)
        store.ns_idle_cache.clear()
        return len(items), revs, kept


def verify_file(path, ns: str | None = None, progress: Progress | None = None) -> _Plan:
    """Read, verify and check every record of an export file (a path, or an exportfile.Source: a spooled
    stream; no store needed), keeping where its records and blobs are, not what they hold (memory grows with
    the number of records and distinct values, not with the bytes); EXPORT_FILE_INVALID or
    EXPORT_VERSION_UNSUPPORTED when it cannot be imported whole. The plan reads the file again when imported:
    ``close()`` it after."""
    src = None
    try:
        src = path if isinstance(path, exportfile.Source) else exportfile.Source(path)
        return plan(exportfile.scan(src, progress), ns, progress)
    except ExportFileError as e:
        if src is not None and src is not path:
            src.close()
        raise invalid_file(str(e), unsupported=e.unsupported) from None
    except BaseException:
        if src is not None and src is not path:
            src.close()
        raise


def sealing(store, p: _Plan, allow_plaintext: bool = False) -> bool:
    """Whether the import seals the file's values (the target namespace is encrypted here; its key must be
    loaded: ENCRYPTION_KEY_MISSING); IMPORT_PLAINTEXT_REFUSED when the file comes from an encrypted
    namespace, the target namespace has no key and ``allow_plaintext`` is not given."""
    sealed = store.scope(p.ns) is not None
    if not sealed and source_encrypted(p) and not allow_plaintext:
        raise ApiError("IMPORT_PLAINTEXT_REFUSED", f"the file holds the values of an encrypted namespace and "
                       f"namespace {p.ns!r} has no key here: they would be stored unencrypted (give it a key in "
                       f"--encryption-keys, or import with --allow-plaintext)", namespace=p.ns,
                       field="allow_plaintext")
    return sealed


def source_encrypted(p: _Plan) -> bool:
    return bool((p.header.get("source") or {}).get("encrypted"))


def _summary(p: _Plan, result, started: float, sealed: bool, imp: "_Importer | None" = None) -> ImportSummary:
    checkpoints, replaced, items, revs, kept = result
    return ImportSummary(len(p.threads), replaced, checkpoints, items, revs, kept, p.records,
                         time.monotonic() - started, p.ns, sealed, source_encrypted(p),
                         imp.skip if imp is not None else 0, max(imp.job_seconds, default=0.0) if imp else 0.0)


def _result(imp: "_Importer") -> tuple:
    return (imp.checkpoints, imp.replaced) + imp.result[2:]


def _stopped(e: ApiError, imp: "_Importer") -> ApiError:
    """An error met after threads of the import were written (its marker is stored): the message says how
    many are in and how to finish (each is whole; running the same import again finishes it)."""
    done = resumed_threads(imp.store, imp.p)
    if done:
        e.message = (f"{e.message}; the import stopped after {done:,} of {len(imp.p.threads):,} threads, each "
                     f"imported whole: run the same import again to finish it")
        e.args = (e.message,)
        e.metadata["threads_imported"] = str(done)
    return e


def import_file(store, path, *, ns: str | None = None, replace: bool = False,
                progress: Progress | None = None, allow_plaintext: bool = False) -> ImportSummary:
    """Verify the export file ``path`` whole (or take the plan :func:`verify_file` made of it), check
    conflicts and quotas, then write it into ``store`` (a writable Store no sidecar serves) in short jobs
    (_Importer): each thread whole in one. An import interrupted midway is finished by running it again."""
    started = time.monotonic()
    tick = progress or (lambda phase, done, total: None)
    p = path if isinstance(path, _Plan) else verify_file(path, ns, progress)
    try:
        sealed = sealing(store, p, allow_plaintext)
        skip = resumed_threads(store, p)
        check_conflicts(store, p, replace, skip)
        check_quota(store, p, replace, skip=skip)  # before any value is written
        imp = _Importer(store, p, replace, skip, tick)
        # the plan's index and everything else alive now are left out of the cyclic collector's full passes
        # while the jobs run: a full collection otherwise walks them all, inside whichever job it lands in
        # (tens of ms a pass on a big file, more in a process with a larger heap); they return at the end
        with store.hold_sweeps():
            gc.freeze()
            try:
                for job in imp.jobs():
                    if p.index is not None:
                        p.index.src.check_unchanged()
                    # every job but the last as the store's durability (a "process" store: a crash loses at most
                    # a tail of whole jobs, which running the import again redoes); the last one synced
                    store.write(job, "sync" if job.final else None)
            except ExportFileError as e:  # (the file changed after it was verified)
                raise _stopped(invalid_file(str(e)), imp) from None
            except ApiError as e:
                raise _stopped(e, imp) from None
            finally:
                gc.unfreeze()
        return _summary(p, _result(imp), started, sealed, imp)
    finally:
        if not isinstance(path, _Plan):
            p.close()


async def _now(fn, *args):
    return fn(*args)


async def import_served(store, p: _Plan, *, replace: bool = False, check_only: bool = False,
                        allow_plaintext: bool = False, run_off_loop=None) -> ImportSummary:
    """(A serving sidecar's owner loop) :func:`import_file` of a verified plan while others read and write:
    conflicts and quotas checked in a snapshot first (a refusal writes nothing); then the import's short write
    jobs (_Importer; the file read and the nodes built off the loop by ``run_off_loop(fn, *args)``), each
    thread whole in one job that checks its conflicts and the quota again."""
    started = time.monotonic()
    off = run_off_loop if run_off_loop is not None else (lambda fn, *a: _now(fn, *a))
    sealed = sealing(store, p, allow_plaintext)
    skip = resumed_threads(store, p)
    await off(check_conflicts, store, p, replace, skip)  # (reads every record of the file: off the loop)
    q = quota_in_effect(store, p.ns)
    if q.max_bytes or q.max_threads or q.max_items:  # before any value is written (the file's part off the loop)
        added = (await run_off_loop(file_usage, p, bool(q.max_bytes), skip) if run_off_loop is not None
                 else file_usage(p, bool(q.max_bytes), skip))
        check_quota(store, p, replace, added, skip)
    if check_only:  # what the import would write
        kinds = await off(lambda: [rec["t"] for _, recs in p.threads[skip:] for rec in recs]
                          + [rec["t"] for rec in p.memory])
        return _summary(p, (kinds.count("checkpoint"), 0, kinds.count("memory_item"), kinds.count("memory_revision"),
                            0), started, sealed)
    store.check_load()
    imp = _Importer(store, p, replace, skip)
    jobs = imp.jobs()
    end = object()
    with store.hold_sweeps():
        try:
            while True:
                job = await run_off_loop(next, jobs, end) if run_off_loop is not None else next(jobs, end)
                if job is end:
                    break
                await store.run(job, flow_controlled=True)
        except ApiError as e:
            raise _stopped(e, imp) from None
    return _summary(p, _result(imp), started, sealed, imp)
