"""verify: a full check of one store, reported by what the damage reaches.

``verify`` reads one MVCC snapshot (it never waits for writers, a running
sidecar keeps serving) and checks, in this order:

1. every record of every table of layout.RECORD_DECODERS decodes as its
   record type (a table's unreadable record is named by table and key);
2. every node record: its content re-hashed (children by their hashes, a
   compressed node unpacked from the record itself, never from the read
   cache, a sealed one opened with its key: its AES-GCM tag checked) equals
   the hash it is stored under, and the hash index maps that hash back to it
   (under its namespace's scope for an encrypted namespace's node). A sealed
   record whose key is not given is counted as ``key missing`` for its
   namespace: it cannot be checked (nor read), which is not damage;
3. every reference resolves: from each record of layout.ROOT_REFS (checkpoints,
   pending writes, artifacts, uploads, memory items and their revisions,
   conversation items stored as nodes) down to the leaves, no node is missing.

Damage is then reported by thread and checkpoint: each checkpoint (and
pending write) whose tree reaches a damaged or missing node is named with
its namespace, thread id, checkpoint namespace and id.

What it cannot see: a byte changed inside a non-node record that still
decodes to a valid record (a timestamp, a counter) — those records carry no
checksum of their own; node contents are covered by their BLAKE3 address.
"""
from __future__ import annotations

import time
from types import SimpleNamespace
from dataclasses import dataclass, field
from typing import Callable

import lmdb
import msgspec

from . import compression, encryption, layout, nodes, usage
from . import hotpath as hp
from ..errors import ApiError

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass
class Damage:
    """One damaged record: its table, key (hex) and what is wrong."""

    table: str
    key: str
    problem: str


@dataclass
class Reached:
    """A checkpoint or pending write whose tree reaches damage."""

    namespace: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    what: str  # "checkpoint" or "pending write"
    nodes: list[str] = field(default_factory=list)  # damaged or missing node ids (hex), at most 10


@dataclass
class Report:
    records: int = 0
    nodes: int = 0
    checkpoints: int = 0
    threads: int = 0
    damaged: list[Damage] = field(default_factory=list)
    missing_nodes: list[str] = field(default_factory=list)  # at most 100 of them
    missing_total: int = 0
    reached: list[Reached] = field(default_factory=list)
    seconds: float = 0.0
    sealed: dict[str, int] = field(default_factory=dict)  # namespace -> sealed records checked with their key
    key_missing: dict[str, int] = field(default_factory=dict)  # namespace -> sealed records whose key is not given

    @property
    def clean(self) -> bool:
        return not (self.damaged or self.missing_nodes or self.reached)

    def to_dict(self) -> dict:
        return msgspec.to_builtins(self) | {"clean": self.clean}


class _MissingChild(Exception):
    pass


def open_env(path: str) -> tuple[lmdb.Environment, dict]:
    """A read-only environment of the store in ``path`` (a running sidecar may have it open) and its tables."""
    env = lmdb.open(path, readonly=True, lock=True, subdir=True, max_dbs=len(layout.DB_NAMES) + 8,
                    max_readers=126, readahead=False)
    try:
        with env.begin() as txn:
            if txn.get(b"meta") is None:
                raise ValueError(f"{path}: not a sidecar store (no meta table)")
        dbs = {}
        for name in layout.DB_NAMES:
            try:
                dbs[name] = env.open_db(name.encode(), create=False)
            except lmdb.NotFoundError:
                dbs[name] = None  # an older store without this table
        with env.begin(db=dbs["meta"]) as txn:
            fmt = txn.get(b"format")
        if fmt is None or fmt.decode() != layout.FORMAT_NAME:
            raise ValueError(f"{path}: unknown store format {fmt!r}")
    except BaseException:
        env.close()
        raise
    return env, dbs


def _register_dictionaries(txn, meta) -> None:
    cursor = txn.cursor(db=meta)
    if cursor.set_range(compression.META_PREFIX):
        for key, value in cursor:
            if not bytes(key).startswith(compression.META_PREFIX):
                break
            compression.register(bytes(value))


def _count(txn, db) -> int:
    return 0 if db is None else txn.stat(db)["entries"]


def verify(env: lmdb.Environment, dbs: dict, progress: Progress | None = None,
           keys: encryption.KeyRing | None = None) -> Report:
    """Check the store of ``env`` (tables ``dbs``) in one read snapshot, opening sealed records with
    ``keys``; see the module docstring."""
    with env.begin() as txn:
        used, _ = encryption.remembered(txn, dbs["meta"])
    installed = encryption.install(keys, {kid: (ns, name) for kid, (ns, name, _) in used.items()})
    try:
        return _verify(env, dbs, progress, used)
    finally:
        encryption.uninstall(installed)


def _verify(env: lmdb.Environment, dbs: dict, progress: Progress | None, used: dict) -> Report:
    report = Report()
    started = time.monotonic()
    tick = progress or (lambda phase, done, total: None)
    scope_db = dbs.get("nodescope")
    with env.begin(buffers=False) as txn:
        _register_dictionaries(txn, dbs["meta"])
        node_db = dbs["nodes"]
        tables = SimpleNamespace(db=dbs)  # what nodes.index_get reads of a store
        total_records = sum(_count(txn, dbs[name]) for name in layout.RECORD_DECODERS)
        done = 0
        for name, decoder in layout.RECORD_DECODERS.items():
            db = dbs[name]
            if db is None:
                continue
            for key, value in txn.cursor(db=db):
                done += 1
                if done % 5000 == 0:
                    tick("records", done, total_records)
                try:
                    decoder.decode(value)
                except (msgspec.DecodeError, msgspec.ValidationError) as e:
                    report.damaged.append(Damage(name, key.hex(), f"does not decode: {e}"))
        report.records = done
        tick("records", done, total_records)

        # 2. every node against its address
        bad_nodes: set[bytes] = set()
        total_nodes = _count(txn, node_db)

        def hash_of(child: bytes) -> bytes:
            rec = txn.get(child, db=node_db)
            if rec is None:
                raise _MissingChild(child)
            return rec[:hp.HASH_SIZE]

        n = 0
        for node_id, rec in txn.cursor(db=node_db):
            n += 1
            if n % 5000 == 0:
                tick("nodes", n, total_nodes)
            if len(rec) <= hp.HASH_SIZE:
                bad_nodes.add(node_id)
                report.damaged.append(Damage("nodes", node_id.hex(), "record too short"))
                continue
            h = rec[:hp.HASH_SIZE]
            if encryption.is_sealed(rec):
                ns = used.get(encryption.key_id_of(rec), ("(unknown key)",))[0]
                try:
                    rec = encryption.open_record(rec)
                except ApiError as e:
                    if e.reason == "ENCRYPTION_KEY_MISSING":
                        report.key_missing[ns] = report.key_missing.get(ns, 0) + 1
                        rec = None
                    else:
                        bad_nodes.add(node_id)
                        report.damaged.append(Damage("nodes", node_id.hex(), e.message))
                        continue
                else:
                    report.sealed[ns] = report.sealed.get(ns, 0) + 1
            try:
                if rec is None:
                    pass  # cannot be re-hashed without its key
                else:
                    canonical = hp.canonical_node(rec[hp.HASH_SIZE:], hash_of)
                    if hp.hash_bytes(canonical) != h:
                        raise hp.CorruptNode("content does not match its hash")
            except _MissingChild:
                continue  # its content cannot be re-hashed without the child: step 3 reports the child
            except (hp.CorruptNode, ValueError) as e:
                bad_nodes.add(node_id)
                report.damaged.append(Damage("nodes", node_id.hex(), str(e)))
                continue
            scope = txn.get(node_id, db=scope_db) if scope_db is not None else None
            prefix = b"" if scope is None else scope[:encryption.SCOPE_SIZE]
            if not nodes.indexed(txn, tables, h, node_id, prefix):
                report.damaged.append(Damage("hashes", h.hex(), f"does not map back to node {node_id.hex()}"))
        report.nodes = n
        tick("nodes", n, total_nodes)

        # 3. references, by what reaches them
        names = {}
        for key, raw in txn.cursor(db=dbs["threads"]):
            try:
                rec = layout.thread_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            ns, _, thread_id = key.partition(layout.SEP)
            names[rec.tkey] = (ns.decode(errors="replace"), thread_id.decode(errors="replace"))
        report.threads = len(names)
        status: dict[bytes, bool] = {}  # node id -> its subtree is sound
        missing: set[bytes] = set()

        def sound(root: bytes, found: list[bytes]) -> bool:
            """Whether everything under ``root`` is there and intact (memoised; iterative)."""
            if root in status:
                if not status[root]:
                    found.append(root)
                return status[root]
            stack = [(root, False)]
            while stack:
                node_id, expanded = stack.pop()
                if node_id in status:
                    continue
                rec = txn.get(node_id, db=node_db)
                if rec is None:
                    missing.add(node_id)
                    status[node_id] = False
                    continue
                try:
                    children = hp.stored_children(rec[hp.HASH_SIZE:])
                except hp.CorruptNode:
                    status[node_id] = False
                    continue
                if not expanded:  # a damaged node's children are walked too: they may be missing
                    stack.append((node_id, True))
                    stack.extend((c, False) for c in children if c not in status)
                else:
                    status[node_id] = node_id not in bad_nodes and all(status.get(c, False) for c in children)
            if not status[root]:
                found.extend(_bad_leaves(root))
            return status[root]

        def _bad_leaves(root: bytes) -> list[bytes]:
            out, stack, seen = [], [root], set()
            while stack and len(out) < 10:
                node_id = stack.pop()
                if node_id in seen:
                    continue
                seen.add(node_id)
                if node_id in missing or node_id in bad_nodes:
                    out.append(node_id)
                    continue
                rec = txn.get(node_id, db=node_db)
                try:
                    kids = hp.stored_children(rec[hp.HASH_SIZE:]) if rec is not None else []
                except hp.CorruptNode:
                    out.append(node_id)
                    continue
                stack.extend(c for c in kids if status.get(c) is False)
            return out

        total_ckpts = _count(txn, dbs["ckpts"])
        n = 0
        for key, raw in txn.cursor(db=dbs["ckpts"]):
            n += 1
            if n % 2000 == 0:
                tick("checkpoints", n, total_ckpts)
            try:
                m = layout.manifest_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # reported above
            roots = [node_id for _, node_id in m.channels] + ([m.extra] if m.extra is not None else [])
            found: list[bytes] = []
            for root in roots:
                sound(root, found)
            if found:
                tkey, cns, checkpoint_id = layout.split_ckpt_key(key)
                ns, thread_id = names.get(tkey, ("?", f"(thread key {tkey})"))
                report.reached.append(Reached(ns, thread_id, cns, checkpoint_id, "checkpoint",
                                              sorted({f.hex() for f in found})[:10]))
        report.checkpoints = n
        tick("checkpoints", n, total_ckpts)
        for key, raw in txn.cursor(db=dbs["writes"]):
            try:
                w = layout.write_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            found = []
            sound(w.value, found)
            if found:
                tkey, cns, checkpoint_id = _write_owner(key)
                ns, thread_id = names.get(tkey, ("?", f"(thread key {tkey})"))
                report.reached.append(Reached(ns, thread_id, cns, checkpoint_id, "pending write",
                                              sorted({f.hex() for f in found})[:10]))
        for name, ids in layout.ROOT_REFS:
            if name in ("ckpts", "writes"):
                continue  # above, named by thread and checkpoint
            decoder = layout.RECORD_DECODERS[name]
            if dbs[name] is None:
                continue
            for key, raw in txn.cursor(db=dbs[name]):
                try:
                    rec = decoder.decode(raw)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                found = []
                for root in ids(rec):
                    sound(root, found)
                if found:
                    report.damaged.append(Damage(name, key.hex(), "reaches damaged or missing nodes: "
                                                 + ", ".join(sorted({f.hex() for f in found})[:10])))
        report.missing_nodes = sorted(m.hex() for m in missing)[:100]
        report.missing_total = len(missing)
        # usage counters (storage/usage.py) against a recount; a store without them gets them built on open
        if all(dbs.get(name) is not None for name in ("usage", "ckcharge", "wcharge", "quotas", "icharge")) and txn.get(
                b"usage", db=dbs["meta"]) == usage.VERSION:
            tick("usage counters", 0, 1)
            for problem in usage.recount(txn, SimpleNamespace(db=dbs)).problems[:100]:
                report.damaged.append(Damage("usage", "", problem))
            tick("usage counters", 1, 1)
    report.seconds = time.monotonic() - started
    return report


def _write_owner(key: bytes) -> tuple[int, str, str]:
    """(tkey, checkpoint namespace, checkpoint id) of a pending-write row key (``ckpt_key`` + task + idx)."""
    key = bytes(key)
    tkey = int.from_bytes(key[:8], "big")
    first = key.index(layout.SEP, 8)
    second = key.find(layout.SEP, first + 1)
    return tkey, key[8:first].decode(errors="replace"), key[first + 1:second if second >= 0 else None].decode(
        errors="replace")


def verify_path(path: str, progress: Progress | None = None, keys: encryption.KeyRing | None = None) -> Report:
    """Open the store in ``path`` read-only and verify it (sealed records with ``keys``)."""
    env, dbs = open_env(path)
    try:
        return verify(env, dbs, progress, keys)
    finally:
        env.close()
