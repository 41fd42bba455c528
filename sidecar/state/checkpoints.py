"""checkpoints: a thread's checkpoint chains and pending writes — the rules of putting and reading them.

A put is planned (:func:`plan_put`: the base looked up, deltas applied to the
base's trees, nodes built and hashed: the CPU work) against a read snapshot
or the writer's transaction, then applied (:func:`apply_put`) in one write
transaction that re-checks everything the plan assumed (base checkpoint
unchanged, expected head) before writing anything. The API layer converts a
request's channel writes into :class:`ChannelOp` (whole values already built
as trees, delta items as canonical encodings) before planning; what a run's
put also records (steps, events, effect completions) is composed in
ops/puts.py.

Manifests, pending-write rows and the other records more than one resource
reads are in storage/records.py.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import msgspec

from agentstate import ids

from .. import limits
from ..errors import ApiError, checkpoint_not_found, thread_not_found
from ..storage import hotpath as hp
from ..storage import layout, metadata, nodes, records, usage
from ..storage.layout import Manifest
from ..storage.store import RetryJob, Store, now_us
from . import runstate

new_checkpoint_id = ids.new_id  # time-ordered UUIDv7 strings (the client makes the same)


# ----------------------------------------------------------------- put

class ChannelOp(NamedTuple):
    """One channel write of a put, converted: a whole value (``root``, whose nodes are in the put's
    ``built``), ``keep`` of the base's value, or a ``delta`` of it (list items appended after the first
    ``keep_first``, map keys set and deleted). ``field`` names it in errors (``channels['name']``).
    A tuple, so that the hot path's ``put_channels`` (storage/hotpath.py) hands the fields over as one."""

    name: str
    kind: str  # "value" | "keep" | "delta"
    field: str
    root: bytes = b""
    append: list = []  # (never mutated)
    keep_first: int | None = None
    sets: list = []  # [(key, encoding)] sorted by key
    deletes: list = []
    base_root: bytes = b""


@dataclass
class PutInput:
    """A validated PutCheckpoint: ids, the canonical metadata, the converted channel writes (``ops``, sorted
    by name) with the nodes their whole values need (``built``), and what the write re-checks."""

    ns: str
    thread_id: str
    cns: str
    checkpoint_id: str
    parent_id: str
    base_id: str
    base_field: str  # the request field that named the base (errors)
    metadata: bytes
    run_id: str | None  # the manifest's run (request run_id, else metadata run_id)
    schema_version: int
    ops: list[ChannelOp]
    built: list
    extra: bytes | None  # hash of the extra value (its node in ``built``)
    require_thread: bool = False
    expected_head_etag: str | None = None
    schema: str = ""  # the registered schema the values follow (state/schemas.py)


@dataclass
class PutPlan:
    ns: str
    thread_id: str
    cns: str
    checkpoint_id: str
    parent_id: str
    created_us: int
    metadata: bytes  # canonical encoding
    roots: dict  # channel -> root hash
    extra: bytes | None  # hash of the extra value
    schema_version: int
    run_id: str | None
    etag: str
    nodes: list = field(default_factory=list)  # canonical nodes built for this put
    base_id: str = ""
    base_roots: dict = field(default_factory=dict)  # channel -> root node id the plan assumed in the base
    known: dict = field(default_factory=dict)  # hash -> node id of stored nodes the new ones refer to
    require_thread: bool = False
    expected_head_etag: str | None = None
    schema: str = ""
    charge: int = 0  # the bytes this put is charged (storage/usage.py): its metadata and the nodes it built

    def manifest(self, ids: dict[bytes, bytes]) -> Manifest:
        return Manifest(layout.FORMAT_VERSION, layout.pack_id(self.parent_id), self.created_us,
                        msgspec.Raw(self.metadata), [(name, ids[h]) for name, h in sorted(self.roots.items())],
                        ids[self.extra] if self.extra else None, self.schema_version, self.run_id, self.schema)


def run_id_of(items: dict[str, bytes]) -> str | None:
    """The run a checkpoint's metadata names (``run_id``: a non-empty id string), for the run index."""
    enc = items.get("run_id")
    if enc is None:
        return None
    try:
        value = msgspec.msgpack.decode(enc)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, str) and value and "\x00" not in value and len(value) <= limits.MAX_ID_BYTES else None


@contextlib.contextmanager
def _reading(store: Store, txn):
    """``txn`` when given (a writer's transaction, which sees its own writes), else a read snapshot."""
    if txn is not None:
        yield txn
    else:
        with store.read() as snapshot:
            yield snapshot


def plan_put(store: Store, put: PutInput, txn=None) -> PutPlan:
    """Look the base up and apply the deltas to its trees, reading from ``txn`` (default: a fresh
    snapshot); BASE_MISMATCH when the base or a channel of it is missing or another than assumed."""
    built = put.built
    roots: dict[str, bytes] = {}
    base_roots: dict[str, bytes] = {}
    needs_base = [op for op in put.ops if op.kind != "value"]
    base: Manifest | None = None
    reader = None
    with _reading(store, txn) as txn:
        if needs_base:
            rec = records.thread(txn, store, put.ns, put.thread_id)
            base = None if rec is None else records.manifest(txn, store, rec.tkey, put.cns, put.base_id)
            if base is None:
                raise ApiError("BASE_MISMATCH", f"{put.base_field}: base checkpoint {put.base_id!r} not found in "
                               f"thread {put.thread_id!r} (checkpoint_ns {put.cns!r}); send whole values",
                               field=put.base_field, checkpoint_id=put.base_id)
            reader = nodes.CanonicalReader(txn, store, put.ns)
        base_channels = dict(base.channels) if base is not None else {}
        for op in put.ops:
            if op.kind == "value":
                roots[op.name] = op.root
                continue
            if op.name not in base_channels:
                raise ApiError("BASE_MISMATCH", f"{op.field}.{op.kind}: channel not in base checkpoint "
                               f"{put.base_id!r}" + ("; send the whole value" if op.kind == "delta" else ""),
                               field=f"{op.field}.{op.kind}")
            root_id = base_roots[op.name] = base_channels[op.name]
            root = reader.hash_of(root_id)
            roots[op.name] = root if op.kind == "keep" else apply_delta(op, root, root_id, reader, built)
    etag = layout.checkpoint_etag(put.checkpoint_id, put.parent_id, put.metadata, sorted(roots.items()), put.extra,
                                  put.schema_version, put.schema)
    return PutPlan(put.ns, put.thread_id, put.cns, put.checkpoint_id, put.parent_id, now_us(), put.metadata, roots,
                   put.extra, put.schema_version, put.run_id, etag, built, put.base_id, base_roots,
                   reader.known if reader is not None else {}, put.require_thread, put.expected_head_etag,
                   put.schema, len(put.metadata) + sum(len(node) for _, node in built))


def apply_delta(op: ChannelOp, root: bytes, root_id: bytes, reader: nodes.CanonicalReader, built: list) -> bytes:
    """The root of the base's value ``root`` (node ``root_id``) with the delta ``op`` applied."""
    f = op.field + ".delta"
    if op.base_root and op.base_root != root:
        raise ApiError("BASE_MISMATCH", f"{f}.base_root: the base checkpoint's value has another root; "
                       "send the whole value", field=f + ".base_root")
    rec = nodes.record(reader.fetch, root_id)
    tag = rec[hp.HASH_SIZE]
    is_list_op = bool(op.append) or op.keep_first is not None
    is_map_op = bool(op.sets) or bool(op.deletes)
    if tag == hp.TAG_LIST:
        if is_map_op:
            raise ApiError("BASE_MISMATCH", f"{f}: set/delete on a list value", field=f)
        # kept items, appended ones and the new root in one hot-path call (INVALID_ARGUMENT for a keep_first
        # over the list's length)
        return hp.list_delta(rec, op.append, op.keep_first, reader.fetch, reader.known, built, f)
    if tag == hp.TAG_MAP or tag == hp.TAG_MAP_INNER:
        if is_list_op:
            raise ApiError("BASE_MISMATCH", f"{f}: append/keep_first on a map value", field=f)
        return hp.map_delta(root, op.sets, op.deletes, reader.node, built, f)
    if is_list_op or is_map_op:
        raise ApiError("BASE_MISMATCH", f"{f}: the base value is neither a list nor a map", field=f)
    return root


@dataclass
class Applied:
    """What applying a put did: the checkpoint's creation time, whether it is new, its thread's tkey."""

    created_us: int
    created: bool
    tkey: int


def apply_put(tx: runstate.Tx, store: Store, plan: PutPlan, run_id: str, lease_id: str,
              ) -> tuple[Applied, layout.RunRec | None]:
    """Write a planned put; a run's put (``run_id``, ``lease_id``: checked ids) must come from the run's
    holder, one that names no run is refused while a run holds the thread. Returns what was done and the
    run record. An identical checkpoint already stored is answered, not written again. RetryJob when the
    base changed since the plan."""
    txn = tx.txn
    rec = records.thread(txn, store, plan.ns, plan.thread_id)
    if rec is None:
        if plan.require_thread:
            raise thread_not_found(plan.ns, plan.thread_id)
        if plan.base_roots:
            raise RetryJob()  # the base vanished with its thread
        rec = records.create_thread(txn, store, plan.ns, plan.thread_id)
    tkey = rec.tkey
    if plan.base_roots:
        base = records.manifest(txn, store, tkey, plan.cns, plan.base_id)
        if base is None:
            raise RetryJob()
        current = dict(base.channels)
        if any(current.get(ch) != root_id for ch, root_id in plan.base_roots.items()):
            raise RetryJob()
    run = None
    if run_id:
        run = runstate.check_holder(tx, plan.ns, run_id, lease_id, tkey)
    else:
        runstate.check_unclaimed_write(tx, plan.ns, tkey)
    key = layout.ckpt_key(tkey, plan.cns, plan.checkpoint_id)
    ckpts = store.db["ckpts"]
    fetch = nodes.fetcher(txn, store)
    old_raw = txn.get(key, db=ckpts)
    old = None if old_raw is None else layout.manifest_decoder.decode(old_raw)
    if old is not None and records.etag_of(plan.checkpoint_id, old, fetch) == plan.etag:
        return Applied(old.created_us, False, tkey), run
    if plan.expected_head_etag is not None:
        head = records.latest(txn, store, tkey, plan.cns)
        head_etag = "" if head is None else records.etag_of(head[0], head[1], fetch)
        if head_etag != plan.expected_head_etag:
            raise ApiError("ETAG_MISMATCH", f"expected_head_etag {plan.expected_head_etag!r} is stale; the head of "
                           f"thread {plan.thread_id!r} (checkpoint_ns {plan.cns!r}) is {head_etag!r}",
                           field="expected_head_etag", current_etag=head_etag,
                           checkpoint_id=head[0] if head else None)
    ids = nodes.write(txn, store, plan.nodes, plan.known,
                      [*plan.roots.values(), *((plan.extra,) if plan.extra else ())], plan.ns)
    m = plan.manifest(ids)
    keep = store.gc_keep
    if keep is not None:
        keep.update(ids.values())
    put = txn.put
    if old is not None and old.run_id is not None:
        txn.delete(layout.run_key(plan.ns, old.run_id, tkey, plan.cns, plan.checkpoint_id), db=store.db["runidx"])
    usage.put_checkpoint(txn, store, plan.ns, tkey, key, m, plan.charge,  # stores m with its charge
                         layout.ckpt_key(tkey, plan.cns, plan.base_id) if plan.base_roots else b"",
                         fresh=old is None)
    if m.run_id is not None:
        put(layout.run_key(plan.ns, m.run_id, tkey, plan.cns, plan.checkpoint_id),
            layout.run_entry(plan.ns, m.run_id), db=store.db["runidx"])
    return Applied(m.created_us, True, tkey), run


def record_run_checkpoint(plan: PutPlan, run: layout.RunRec) -> None:
    """A run's put moves its last checkpoint forward (the one it resumes from)."""
    if plan.cns == run.cns and (not run.last_checkpoint_id or plan.checkpoint_id >= run.last_checkpoint_id):
        run.last_checkpoint_id = plan.checkpoint_id


# ----------------------------------------------------------------- writes

@dataclass
class WritesPlan:
    ns: str
    thread_id: str
    cns: str
    checkpoint_id: str
    run_id: str
    lease_id: str
    rows: list  # (task_id, idx, replace, channel, value hash, task_path)
    nodes: list


def apply_writes(tx: runstate.Tx, store: Store, plan: WritesPlan) -> tuple[int, int]:
    """(stored, kept): store a checkpoint's pending writes; one already stored under (task_id, idx) is kept
    unless the write replaces (special channels). A run's writes must come from its holder (and renew its
    lease); writes that name no run are refused while a run holds the thread."""
    txn = tx.txn
    rec = records.thread(txn, store, plan.ns, plan.thread_id) or records.create_thread(txn, store, plan.ns,
                                                                                     plan.thread_id)
    if plan.run_id:
        runstate.renew_lease(tx, plan.ns, plan.run_id,
                             runstate.check_holder(tx, plan.ns, plan.run_id, plan.lease_id, rec.tkey))
    else:
        runstate.check_unclaimed_write(tx, plan.ns, rec.tkey)
    tx.flush()
    db = store.db["writes"]
    todo = []
    for task_id, idx, replace, channel, h, task_path in plan.rows:
        key = layout.write_key(rec.tkey, plan.cns, plan.checkpoint_id, task_id, idx)
        if replace or txn.get(key, db=db) is None:
            todo.append((key, channel, h, task_path))
    if todo:
        ids = nodes.write(txn, store, plan.nodes, {}, [h for _, _, h, _ in todo], plan.ns)
        size = _built_size(plan.nodes)
        for key, channel, h, task_path in todo:
            wrec = layout.WriteRec(3, channel, ids[h], task_path, plan.run_id or None)
            usage.put_write(txn, store, plan.ns, rec.tkey, key, wrec, size(h))  # stores it with its charge
        keep = store.gc_keep
        if keep is not None:
            keep.update(ids.values())
    return len(todo), len(plan.rows) - len(todo)


def _built_size(built: list):
    """``size(h)``: the canonical bytes of the built nodes the value with root hash ``h`` reaches (each once)."""
    by_hash = dict(built)

    def size(h: bytes) -> int:
        total, stack, seen = 0, [h], {h}
        while stack:
            node = by_hash.get(stack.pop())
            if node is None:
                continue  # a stored node the request referred to: not built by it
            total += len(node)
            if node[0] != hp.TAG_VALUE:
                for child in hp.children(node):
                    if child not in seen:
                        seen.add(child)
                        stack.append(child)
        return total

    return size


# ----------------------------------------------------------------- reads

def resolve(txn, store: Store, ns: str, thread_id: str, cns: str, checkpoint_id: str):
    """(thread record, checkpoint id, manifest) of a checkpoint, the latest of ``cns`` when no id is
    given; NOT_FOUND for an unknown thread or checkpoint."""
    rec = records.thread(txn, store, ns, thread_id)
    if rec is None:
        raise thread_not_found(ns, thread_id)
    if checkpoint_id:
        m = records.manifest(txn, store, rec.tkey, cns, checkpoint_id)
    else:
        found = records.latest(txn, store, rec.tkey, cns)
        checkpoint_id, m = found if found else ("", None)
    if m is None:
        raise checkpoint_not_found(thread_id, cns, checkpoint_id)
    return rec, checkpoint_id, m


def list_delta(txn, store: Store, ns: str, known: bytes, root_id: bytes, fetch, known_lists: dict | None = None,
               ) -> tuple[int, list[bytes]] | None:
    """When the list a client has (root hash ``known``) and the stored one (node ``root_id``) share a
    prefix: (keep_first, ids of the items to append). The stored list extends the known one: keep all of
    it and append the rest; it is a prefix of the known one: keep its length, append nothing. None when
    they are not so related. ``known_lists`` caches the known lists' item ids across the checkpoints of
    one call."""
    if len(known) != hp.HASH_SIZE:  # not a hash (LMDB refuses an empty key): send the whole value
        return None
    cached = known_lists.get(known) if known_lists is not None else None
    if cached is None:
        known_id = nodes.index_get(txn, store, known, ns)
        if known_id is None:
            return None
        old = nodes.record(fetch, known_id)
        cached = hp.stored_list_ids(old, fetch) if old[hp.HASH_SIZE] == hp.TAG_LIST else False
        if known_lists is not None:
            known_lists[known] = cached
    if cached is False:
        return None
    new = nodes.record(fetch, root_id)
    if new[hp.HASH_SIZE] != hp.TAG_LIST:
        return None
    old_ids = cached
    n_old, n_new = len(old_ids), hp.stored_list_length(new)
    new_ids = hp.stored_list_ids(new, fetch)
    if n_old <= n_new:
        if new_ids[:n_old] != old_ids:  # one id per content: equal ids = equal items
            return None
        return n_old, new_ids[n_old:]
    if old_ids[:n_new] != new_ids:
        return None
    return n_new, []


def thread_checkpoints_desc(txn, store: Store, tkey: int, cns: str | None, before: str, after: tuple | None,
                            ) -> Iterator[tuple[str, str, bytes, bytes]]:
    """Yield (checkpoint_id, cns, key, raw manifest) newest first within one thread.

    ``after`` = (checkpoint_id, cns) resumes strictly after that position.
    """
    db = store.db["ckpts"]
    if cns is not None:
        prefixes = [layout.cns_prefix(tkey, cns)]
    else:
        prefixes = []
        tprefix = layout.tkey_prefix(tkey)
        cursor = txn.cursor(db=db)
        found = cursor.set_range(tprefix)
        while found:
            key = bytes(cursor.key())
            if not key.startswith(tprefix):
                break
            sep = key.index(layout.SEP, 8)
            prefixes.append(key[:sep + 1])
            end = layout.prefix_end(key[:sep + 1])
            found = end is not None and cursor.set_range(end)
    iters = [_prefix_desc(txn, db, p, before, after) for p in prefixes]
    heads = []
    for it in iters:
        item = next(it, None)
        if item is not None:
            heads.append([item, it])
    while heads:
        best = max(range(len(heads)), key=lambda i: (heads[i][0][0], heads[i][0][1]))
        item, it = heads[best]
        yield item
        nxt = next(it, None)
        if nxt is None:
            heads.pop(best)
        else:
            heads[best][0] = nxt


def _prefix_desc(txn, db, prefix: bytes, before: str, after: tuple | None):
    """Checkpoints of one (thread, cns) newest first, below ``before`` and after ``after``.

    The merged order over checkpoint namespaces is (checkpoint_id, cns)
    descending; ``after`` = (checkpoint_id, cns) is the last item already sent.
    """
    cns = prefix[8:-1].decode()
    bound, inclusive = None, False
    if before:
        bound = before
    if after is not None:
        a_id, a_cns = after
        if bound is None or a_id < bound:
            bound, inclusive = a_id, cns < a_cns
        elif a_id == bound:
            inclusive = False
    cursor = txn.cursor(db=db)
    if bound is None:
        end = layout.prefix_end(prefix)
        ok = cursor.prev() if end is not None and cursor.set_range(end) else cursor.last()
    else:
        start = prefix + bound.encode()
        ok = cursor.set_range(start)
        if not (ok and inclusive and cursor.key() == start):
            ok = cursor.prev() if ok else cursor.last()
    while ok:
        key = cursor.key()
        if not key.startswith(prefix):
            return
        yield bytes(key[len(prefix):]).decode(), cns, bytes(key), cursor.value()
        ok = cursor.prev()


def matching(txn, store: Store, ns: str, thread_id: str, cns: str | None, before: str, wanted: dict[str, bytes],
             position) -> Iterator[tuple[str, layout.ThreadRec, str, str, Manifest]]:
    """(thread_id, thread record, checkpoint_id, cns, manifest) of the checkpoints whose metadata holds
    ``wanted``: one thread's, or every thread's of the namespace in thread-id order, each thread's newest
    first, below ``before``; ``position`` (thread_id, checkpoint_id, cns) resumes after a page's last."""
    if thread_id:
        rec = records.thread(txn, store, ns, thread_id)
        thread_list = [] if rec is None else [(thread_id, rec)]
    else:
        thread_list = records.threads_from(txn, store, ns, position[0] if position else None)
    for tid, rec in thread_list:
        after = None
        if position and tid == position[0]:
            after = (position[1], position[2])
        for cid, c_ns, _key, raw in thread_checkpoints_desc(txn, store, rec.tkey, cns, before, after):
            m = layout.manifest_decoder.decode(raw)
            if metadata.matches(m.metadata, wanted):
                yield tid, rec, cid, c_ns, m


# ----------------------------------------------------------------- deletes

def prune_candidates(txn, store: Store, tkey: int, cns: str | None, *, keep_latest: int = 0,
                     older_than_us: int = 0, delete_all: bool = False) -> list[list[bytes]]:
    """Per checkpoint namespace (key order, oldest first), the ckpts keys of all of its checkpoints and the
    keys a prune policy would delete: [(all keys, doomed keys)]."""
    db = store.db["ckpts"]
    prefix = layout.tkey_prefix(tkey) if cns is None else layout.cns_prefix(tkey, cns)
    groups: dict[str, list[bytes]] = {}
    for key in records.checkpoint_keys(txn, store, prefix):
        groups.setdefault(layout.split_ckpt_key(key)[1], []).append(key)
    out = []
    for keys in groups.values():
        if keep_latest:
            doomed = keys[:-keep_latest] if len(keys) > keep_latest else []
        elif delete_all:
            doomed = keys
        else:
            doomed = [k for k in keys if layout.manifest_decoder.decode(txn.get(k, db=db)).created_us < older_than_us]
        out.append((keys, doomed))
    return out


def delete_for_runs(txn, store: Store, ns: str, run_ids: list[str]) -> int:
    """Delete every checkpoint (with its pending writes) the run index holds for these runs."""
    deleted = 0
    idx = store.db["runidx"]
    for run_id in run_ids:
        prefix = layout.run_prefix(ns, run_id)
        keys = layout.run_checkpoints(txn, idx, ns, run_id)
        for ckey in keys:
            records.delete_checkpoint_at(txn, store, ns, ckey)
            txn.delete(prefix + ckey, db=idx)
        deleted += len(keys)
    return deleted


# ----------------------------------------------------------------- diff

@dataclass
class Change:
    """How one channel differs between two checkpoints (roots are hashes; b"" when absent)."""

    channel: str
    kind: str  # "added" | "removed" | "modified"
    from_root: bytes
    to_root: bytes
    lists: bool = False  # both values are lists: the length figures below are set
    from_length: int = 0
    to_length: int = 0
    common_prefix: int = 0


def diff_pair(txn, store: Store, ns: str, thread_id: str, cns: str, from_id: str, to_id: str
              ) -> tuple[int, Manifest, Manifest]:
    """(thread key, from manifest, to manifest) of a diff; NOT_FOUND naming the field when one is missing."""
    rec = records.thread(txn, store, ns, thread_id)
    if rec is None:
        raise thread_not_found(ns, thread_id)
    a = records.manifest(txn, store, rec.tkey, cns, from_id)
    if a is None:
        raise checkpoint_not_found(thread_id, cns, from_id, "from_checkpoint_id")
    b = records.manifest(txn, store, rec.tkey, cns, to_id)
    if b is None:
        raise checkpoint_not_found(thread_id, cns, to_id, "to_checkpoint_id")
    return rec.tkey, a, b


def diff(txn, store: Store, ns: str, thread_id: str, cns: str, from_id: str, to_id: str) -> list[Change]:
    """The channels that differ between checkpoints ``from_id`` and ``to_id`` of one (thread, cns)."""
    _, a, b = diff_pair(txn, store, ns, thread_id, cns, from_id, to_id)
    fetch = nodes.fetcher(txn, store)
    return diff_sides(stored_side(a, fetch), stored_side(b, fetch), fetch, False)


def stored_side(m: Manifest, fetch) -> dict:
    """{channel: (root hash, ("stored", root node id))} of a manifest's stored values."""
    return {name: (h, ("stored", i)) for name, h, i in records.root_hashes(m, fetch)[0]}


def migrated_side(channels, fetch) -> dict:
    """The same of a checkpoint's channels migrated on read (state/schemas.Outcome.channels: ("stored", node
    id) or ("parts", (shape, payload, root hash)))."""
    out = {}
    for name, (kind, ref) in channels:
        if kind == "stored":
            out[name] = (nodes.record(fetch, ref)[:hp.HASH_SIZE], ("stored", ref))
        else:
            out[name] = (ref[2], ("parts", ref))
    return out


def _list_items(value, fetch, by_hash: bool) -> list[bytes] | None:
    """The items of a side's channel value as ids to compare (node ids, or item hashes when ``by_hash``);
    None when the value is not a list."""
    kind, ref = value
    if kind == "parts":
        shape, payload, _ = ref
        return [hp.value_node(enc, []) for enc in payload] if shape == hp.KIND_LIST else None
    record = nodes.record(fetch, ref)
    if record[hp.HASH_SIZE] != hp.TAG_LIST:
        return None
    ids = hp.stored_list_ids(record, fetch)
    return [nodes.record(fetch, i)[:hp.HASH_SIZE] for i in ids] if by_hash else ids


def diff_sides(old: dict, new: dict, fetch, by_hash: bool) -> list[Change]:
    """The changes between two sides (:func:`stored_side`, :func:`migrated_side`); ``by_hash``: compare list
    items by their hashes (needed when a side was migrated on read: its items have no node ids)."""
    out = []
    for name in sorted(set(old) | set(new)):
        ra, rb = old.get(name), new.get(name)
        if ra is not None and rb is not None and ra[0] == rb[0]:
            continue
        ch = Change(name, "added" if ra is None else "removed" if rb is None else "modified",
                    ra[0] if ra else b"", rb[0] if rb else b"")
        out.append(ch)
        if ra is None or rb is None:
            continue
        ia = _list_items(ra[1], fetch, by_hash)
        ib = _list_items(rb[1], fetch, by_hash) if ia is not None else None
        if ia is not None and ib is not None:
            common = 0
            for x, y in zip(ia, ib):
                if x != y:
                    break
                common += 1
            ch.lists = True
            ch.from_length, ch.to_length, ch.common_prefix = len(ia), len(ib), common
    return out
