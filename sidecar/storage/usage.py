"""usage: charged-usage counters per namespace and per thread, kept in the write transactions, and the
namespace quotas checked against them (docs/security.md "Quotas").

What is counted (``usage`` table, layout.UsageRec):

* **bytes** — *charged* bytes, deterministic and independent of what other namespaces store:
  a checkpoint put is charged the canonical bytes of the nodes its request built (a whole value: its whole
  tree; a delta: the new items and the path to them) plus its metadata; a pending write the canonical
  bytes of its value; a conversation item its content's canonical encoding plus its metadata map; a
  memory item its value's, and each old version of one (its history) its value's until purged (one ``icharge``
  row per live item and per old version; a conversation item's bytes go to the
  namespace's counter only, not its thread's); an artifact version its size. Deduplication against the rest of the store is not credited (that would depend on,
  and reveal, other tenants' content), and physical sharing is not attributable to one thread.
* **checkpoints** — live checkpoints.
* **threads** — thread records of the namespace.
* **items** — conversation items, memory items and artifact versions.

Where the charges are kept: a checkpoint's (its bytes, its base, the checkpoints built on it:
layout.CkCharge) in its own manifest, a pending write's in its record (WriteRec.charge), an item's (and an
old version of a memory item's) in one ``icharge`` row. A deletion refunds what the record it deletes holds.

An import is checked against the quotas before it writes anything (ops/transfer.py ``check_quota``) and its
record transaction again on the recount (:func:`check_total`).

Refunds: deleting a pending write refunds its charge. Deleting a checkpoint refunds its charge only when no
live checkpoint was built on it (a delta or keep of it, ``ChargeRec.deps``): otherwise its charge moves to
the first such checkpoint (its nodes are still shared by it), so pruning history never lets a namespace
hold more than it is charged for. A thread's whole usage is refunded when its record is dropped; rows of a
tkey without a thread row are not counted (a reclaim in progress). A store written before the counters
gets them built on open (:func:`rebuild`).

Quotas (``quotas`` table, else the server's defaults in ``Store.quota_defaults``) are checked by
:func:`add` whenever a counter grows: over a quota the call raises RESOURCE_EXHAUSTED ``QUOTA_EXCEEDED``
and its transaction is dropped. Shrinking is never refused.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
from agentstate.codec import array_header, map_header

from ..errors import ApiError
from . import encryption, layout
from . import hotpath as hp
from .layout import ChargeRec, QuotaRec, UsageRec

VERSION = b"3"  # meta b"usage": the counters' version (a store without it, or with version 1, gets them
# rebuilt on open). 2: conversation and memory items charged their bytes (``icharge``). 3: a checkpoint's charge
# kept in its manifest, a pending write's in its record, no longer one ``ckcharge`` / ``wcharge`` row each, and
# memory items' old versions (history) charged their bytes too (a version 2 store has its rows moved on open,
# exactly, and its history charged: :func:`migrate`).
MIGRATABLE = b"2"
QUOTAS = ("max_bytes", "max_threads", "max_items")
_str_encoder = msgspec.msgpack.Encoder()
UNSET = -1  # a QuotaRec field that takes the server's default


# ----------------------------------------------------------------- counters

def _row(txn, store, key: bytes) -> UsageRec | None:
    raw = txn.get(key, db=store.db["usage"])
    return None if raw is None else layout.usage_decoder.decode(raw)


def namespace(txn, store, ns: str) -> UsageRec:
    return _row(txn, store, layout.ns_usage_key(ns)) or UsageRec(1, 0, 0, 0, 0)


def thread(txn, store, tkey: int) -> UsageRec | None:
    """A thread's usage (None: no row — a thread already refunded, or reclaimed)."""
    return _row(txn, store, layout.thread_usage_key(tkey))


def add(txn, store, ns: str, tkey: int = 0, *, nbytes: int = 0, threads: int = 0, items: int = 0,
        checkpoints: int = 0) -> None:
    """Change the counters of namespace ``ns`` and of thread ``tkey`` (0: none) by the deltas; a thread
    without a row is not counted (nor is its namespace changed). QUOTA_EXCEEDED when a counter that grows
    ends over the namespace's quota."""
    db = store.db["usage"]
    if tkey:
        tk = layout.thread_usage_key(tkey)
        t = _row(txn, store, tk)
        if t is None:
            return
        t.nbytes += nbytes
        t.items += items
        t.checkpoints += checkpoints
        txn.put(tk, layout.encode(t), db=db)
    nk = layout.ns_usage_key(ns)
    n = _row(txn, store, nk) or UsageRec(1, 0, 0, 0, 0)
    n.nbytes += nbytes
    n.threads += threads
    n.items += items
    n.checkpoints += checkpoints
    if nbytes > 0 or threads > 0 or items > 0:
        _check(txn, store, ns, n, nbytes, threads, items)
    txn.put(nk, layout.encode(n), db=db)


def add_items(txn, store, tkey: int, items: int) -> None:
    """Items (conversation items, artifact versions) added to (or removed from) thread ``tkey``."""
    t = thread(txn, store, tkey)
    if t is not None and items:
        add(txn, store, t.ns, tkey, items=items)


def new_thread(txn, store, ns: str, tkey: int) -> None:
    txn.put(layout.thread_usage_key(tkey), layout.encode(UsageRec(1, 0, 0, 0, 0, ns)), db=store.db["usage"])
    add(txn, store, ns, threads=1)


def drop_thread(txn, store, ns: str, tkey: int) -> None:
    """The thread's record went: its whole usage is refunded and its item charge rows dropped (its contents
    may be deleted later, by a reclaim: those deletes then count nothing; the charges their records hold are
    no longer read)."""
    tk = layout.thread_usage_key(tkey)
    t = _row(txn, store, tk)
    if t is None:
        return
    txn.delete(tk, db=store.db["usage"])
    conv = _drop_item_rows(txn, store, ITEM_CONV + layout.tkey_prefix(tkey))
    add(txn, store, ns, nbytes=-t.nbytes - conv, threads=-1, items=-t.items, checkpoints=-t.checkpoints)


# ----------------------------------------------------------------- item bytes (conversations, memory)
# A conversation item is charged the canonical encoding of its content plus its metadata map; a memory item
# the canonical encoding of its value. One ``icharge`` row per live item holds its charge. Conversation item
# bytes go to the namespace's counter only, not the thread's (the thread's bytes are what retention's
# max_bytes prunes checkpoints against); a dropped thread refunds them with the rest.

ITEM_CONV, ITEM_MEM = b"c", b"m"


def conv_item_key(tkey: int, seq: int) -> bytes:
    return ITEM_CONV + layout.u64(tkey) + layout.u64(seq)


def mem_item_key(item_key: bytes) -> bytes:
    return ITEM_MEM + item_key


def conversation_added(txn, store, tkey: int, charges: list[tuple[int, int]]) -> None:
    """Conversation items appended to thread ``tkey``: [(seq, bytes charged)] (a thread without a usage row
    is not counted)."""
    t = thread(txn, store, tkey)
    if t is None or not charges:
        return
    db = store.db["icharge"]
    for seq, n in charges:
        txn.put(conv_item_key(tkey, seq), layout.u64(n), db=db)
    add(txn, store, t.ns, tkey, items=len(charges))
    add(txn, store, t.ns, nbytes=sum(n for _, n in charges))


def conversation_removed(txn, store, tkey: int, seqs: list[int] | None) -> None:
    """Conversation items of thread ``tkey`` removed: the seqs, or None for all of them (a clear)."""
    t = thread(txn, store, tkey)
    if t is None:
        return
    db = store.db["icharge"]
    if seqs is None:
        prefix = ITEM_CONV + layout.tkey_prefix(tkey)
        n = len(keys_of(txn, db, prefix))
        refund = _drop_item_rows(txn, store, prefix)
    else:
        n, refund = 0, 0
        for seq in seqs:
            raw = txn.pop(conv_item_key(tkey, seq), db=db)
            if raw is not None:
                n += 1
                refund += layout.read_u64(raw)
    if n or refund:
        add(txn, store, t.ns, tkey, items=-n)
        add(txn, store, t.ns, nbytes=-refund)


def memory_put(txn, store, ns: str, item_key: bytes, nbytes: int) -> None:
    """A memory item (memitems ``item_key``) stored or replaced, charged ``nbytes`` (the item count is the
    caller's)."""
    db = store.db["icharge"]
    key = mem_item_key(item_key)
    old = txn.get(key, db=db)
    txn.put(key, layout.u64(nbytes), db=db)
    add(txn, store, ns, nbytes=nbytes - (layout.read_u64(old) if old is not None else 0))


# ----------------------------------------------------------------- memory history bytes
# An old version of a memory item (a PUT revision in ``memhist`` that is not the live item's current one) stays
# charged its value's canonical encoding until it is purged: one ``icharge`` row b"h" + its memhist key. A
# replace or delete moves the item's charge to its last PUT revision (nothing refunded: the value is still
# stored for the history RPC); a purge refunds the revisions it drops.

ITEM_HIST = b"h"


def hist_charge_key(hist_key: bytes) -> bytes:
    return ITEM_HIST + hist_key


def memory_to_history(txn, store, ns: str, item_key: bytes, hist_key: bytes) -> None:
    """The memory item at memitems ``item_key`` is replaced or removed: its charge moves to its revision at
    memhist ``hist_key`` (refunded instead when that revision holds no value: not expected)."""
    db = store.db["icharge"]
    raw = txn.pop(mem_item_key(item_key), db=db)
    if raw is None:
        return
    rev = txn.get(hist_key, db=store.db["memhist"])
    if rev is not None and layout.memrev_decoder.decode(rev).value is not None:
        txn.put(hist_charge_key(hist_key), raw, db=db)
    else:
        add(txn, store, ns, nbytes=-layout.read_u64(raw))


def history_purged(txn, store, ns: str, hist_keys: list[bytes]) -> None:
    """Memory revisions (memhist keys) deleted: the old versions among them are refunded."""
    db = store.db["icharge"]
    refund = 0
    for k in hist_keys:
        raw = txn.pop(hist_charge_key(k), db=db)
        if raw is not None:
            refund += layout.read_u64(raw)
    if refund:
        add(txn, store, ns, nbytes=-refund)


def _old_versions(txn, store, path_ns: dict[bytes, str], only: str | None):
    """(memhist key, namespace, value node id) of every PUT revision that is not its live item's current
    version (of namespace ``only``, else all)."""
    items_db = store.db["memitems"]
    for key, raw in txn.cursor(db=store.db["memhist"]):
        key = bytes(key)
        ns = path_ns.get(key[:8], "")
        if only is not None and ns != only:
            continue
        rev = layout.memrev_decoder.decode(raw)
        if rev.value is None:
            continue
        item = txn.get(key[:8] + rev.key.encode(), db=items_db)
        if item is not None and layout.memitem_decoder.decode(item).version == layout.read_u64(key[-8:]):
            continue
        yield key, ns, rev.value


def rebuild_history(txn, store, only: str | None = None) -> dict[str, int]:
    """Write the charge rows of the memory items' old versions (of namespace ``only``, else all) from the
    revisions: namespace -> bytes."""
    db = store.db["icharge"]
    path_ns = _path_namespaces(txn, store)
    for k in [k for k in keys_of(txn, db, ITEM_HIST) if only is None or path_ns.get(k[1:9], "") == only]:
        txn.delete(k, db=db)
    rows, out = [], {}
    for key, ns, value in list(_old_versions(txn, store, path_ns, only)):
        n = _value_bytes(txn, store, value)
        rows.append((hist_charge_key(key), n))
        out[ns] = out.get(ns, 0) + n
    for key, n in rows:
        txn.put(key, layout.u64(n), db=db)
    return out


def recount_history(txn, store, out: "Recount") -> None:
    """recount's part for the memory history: every old version has its charge row (and no row is left
    over); the rows' bytes go to their namespaces' recount."""
    path_ns = _path_namespaces(txn, store)
    rows = _item_rows(txn, store, ITEM_HIST)
    want = {hist_charge_key(k) for k, _, _ in _old_versions(txn, store, path_ns, None)}
    if set(rows) != want:
        out.problems.append(f"memory history and its charge rows differ ({len(want - set(rows))} old versions "
                            f"without a row, {len(set(rows) - want)} rows without an old version)")
    for k, n in rows.items():
        out.namespaces.setdefault(path_ns.get(k[1:9], ""), UsageRec(1, 0, 0, 0, 0)).nbytes += n


def _drop_charges(txn, db, prefix: bytes) -> int:
    """Delete the charge rows (u64 values) of ``db`` under ``prefix``; returns the bytes they charged."""
    cursor = txn.cursor(db=db)
    total = 0
    if not cursor.set_range(prefix):
        return 0
    while cursor.key().startswith(prefix):
        total += layout.read_u64(cursor.value())
        if not cursor.delete():
            break
    return total


def _drop_item_rows(txn, store, prefix: bytes) -> int:
    return _drop_charges(txn, store.db["icharge"], prefix)


def conversation_charge(content: bytes, metadata: bytes | None) -> int:
    return len(content) + (len(metadata) if metadata is not None else 0)


# ----------------------------------------------------------------- checkpoints
# A checkpoint's charge (layout.CkCharge: its bytes, its base, the checkpoints built on it) is kept in its own
# manifest record, its base and deps as checkpoint ids of the same thread and checkpoint namespace (a base
# that is the manifest's parent as True). Inside this module charges are ChargeRec with whole ckpts keys.

def _prefix_of(key: bytes) -> bytes:
    """The (thread, checkpoint namespace) part of a ckpts key, NUL included."""
    return key[:key.index(layout.SEP, 8) + 1]


def _unpack(key: bytes, m: layout.Manifest) -> ChargeRec | None:
    c = m.charge
    if c is None:
        return None
    prefix = _prefix_of(key)
    if c.base is None:
        base = b""
    else:
        base = prefix + layout.unpack_id(m.parent if c.base is True else c.base).encode()
    return ChargeRec(1, c.nbytes, base, [prefix + layout.unpack_id(d).encode() for d in c.deps])


def _pack(key: bytes, rec: ChargeRec, m: layout.Manifest) -> layout.CkCharge:
    n = len(_prefix_of(key))
    base = None
    if rec.base:
        base = layout.pack_id(rec.base[n:].decode())
        if base == m.parent:
            base = True
    return layout.CkCharge(rec.nbytes, base, [layout.pack_id(d[n:].decode()) for d in rec.deps])


def _load(txn, store, key: bytes) -> tuple[layout.Manifest, ChargeRec | None] | None:
    """(the manifest at ckpts ``key``, its charge) or None when there is no checkpoint there."""
    raw = txn.get(key, db=store.db["ckpts"])
    if raw is None:
        return None
    m = layout.manifest_decoder.decode(raw)
    return m, _unpack(key, m)


def _charge(txn, store, key: bytes) -> ChargeRec | None:
    got = _load(txn, store, key)
    return None if got is None else got[1]


def _save(txn, store, key: bytes, rec: ChargeRec, m: layout.Manifest | None = None) -> None:
    """Write ``rec`` as the charge of the checkpoint at ``key`` (its manifest ``m`` if known)."""
    if m is None:
        got = _load(txn, store, key)
        if got is None:
            return
        m = got[0]
    m.charge = _pack(key, rec, m)
    txn.put(key, layout.encode(m), db=store.db["ckpts"])


def put_checkpoint(txn, store, ns: str, tkey: int, key: bytes, m: layout.Manifest, nbytes: int,
                   base: bytes = b"", *, fresh: bool = False) -> None:
    """Store manifest ``m`` at ckpts ``key``, charged ``nbytes``, built on checkpoint ``base`` (a delta or keep
    of it; b"": whole values). A rewrite of a live checkpoint releases the old one's charge first (``fresh``:
    the caller just saw that no checkpoint is stored at ``key``, so there is none to look up). A thread
    without a usage row is not counted (the manifest is stored without a charge)."""
    if thread(txn, store, tkey) is None:
        m.charge = None
        txn.put(key, layout.encode(m), db=store.db["ckpts"])
        return
    old = None if fresh else _charge(txn, store, key)
    new_ckpt = 1
    if old is not None:
        refund = _release(txn, store, key, old)
        add(txn, store, ns, tkey, nbytes=-refund)
        new_ckpt = 0
    if base and base != key:
        if not _add_dep(txn, store, base, key):
            base = b""
    else:
        base = b""
    m.charge = _pack(key, ChargeRec(1, nbytes, base, []), m)
    txn.put(key, layout.encode(m), db=store.db["ckpts"])
    add(txn, store, ns, tkey, nbytes=nbytes, checkpoints=new_ckpt)


def _packed_form(x) -> bool:
    """Whether a checkpoint id in a charge is as ``_pack`` writes it (16 UUID bytes, or an ASCII string that
    is no canonical UUID), so that unpacking and packing it again gives it back unchanged."""
    if type(x) is bytes:
        return len(x) == 16
    return type(x) is str and x.isascii() and layout.pack_id(x) is x


def _add_dep(txn, store, base: bytes, key: bytes) -> bool:
    """Note checkpoint ``key`` as built on ``base`` (same thread and checkpoint namespace) in the charge
    kept in base's manifest; False when base has no charge (or no manifest). The charge is changed in its
    packed form when it is in the form ``_pack`` writes (always, for what this module wrote): the bytes
    ``_save(..., _unpack(...) + key)`` would write, without the round trip; else by that round trip."""
    db = store.db["ckpts"]
    raw = txn.get(base, db=db)
    if raw is None:
        return False
    bm = layout.manifest_decoder.decode(raw)
    c = bm.charge
    if c is None:
        return False
    cid = key[len(_prefix_of(key)):].decode()
    if (c.base is None or c.base is True or (c.base != bm.parent and _packed_form(c.base))) and \
            all(_packed_form(d) for d in c.deps) and cid.isascii():
        c.deps.append(layout.pack_id(cid))
        txn.put(base, layout.encode(bm), db=db)
        return True
    rec = _unpack(base, bm)
    rec.deps.append(key)
    _save(txn, store, base, rec, bm)
    return True


def _release(txn, store, key: bytes, rec: ChargeRec) -> int:
    """Take ``key``'s charge out of the chain (its own manifest is the caller's: deleted or rewritten); returns
    the bytes refunded (0 when its charge moved to a checkpoint built on it, which then takes its place in the
    chain)."""
    got = _load(txn, store, rec.base) if rec.base else None
    bm, b = (got if got is not None else (None, None))
    if b is not None and key in b.deps:
        b.deps.remove(key)
    refunded = rec.nbytes
    heir = None
    while rec.deps:
        heir_key = rec.deps[0]
        hgot = _load(txn, store, heir_key)
        if hgot is not None and hgot[1] is not None:
            hm, heir = hgot
            break
        rec.deps.pop(0)  # (a checkpoint gone without its base knowing: not expected)
    if heir is not None:
        heir.nbytes += rec.nbytes
        heir.base = rec.base if b is not None else b""
        for d in rec.deps[1:]:
            dgot = _load(txn, store, d)
            if dgot is not None and dgot[1] is not None:
                dgot[1].base = heir_key
                _save(txn, store, d, dgot[1], dgot[0])
                heir.deps.append(d)
        _save(txn, store, heir_key, heir, hm)
        if b is not None:
            b.deps.append(heir_key)
        refunded = 0
    if b is not None:
        _save(txn, store, rec.base, b, bm)
    return refunded


def delete_checkpoint(txn, store, ns: str, key: bytes) -> None:
    """Checkpoint ``key`` and its pending writes are about to be deleted (their records still stored): refund
    them."""
    tkey = layout.read_u64(key[:8])
    if thread(txn, store, tkey) is None:
        return
    rec = _charge(txn, store, key)
    refund = 0 if rec is None else _release(txn, store, key, rec)
    refund += writes_charge(txn, store, key + layout.SEP)
    add(txn, store, ns, tkey, nbytes=-refund, checkpoints=-1 if rec is not None else 0)


def chain_bytes(txn, store, key: bytes) -> int:
    """The charges of checkpoint ``key`` and of the checkpoints it was built on (what a copy of it alone
    carries)."""
    total, seen = 0, set()
    while key and key not in seen:
        seen.add(key)
        rec = _charge(txn, store, key)
        if rec is None:
            break
        total += rec.nbytes
        key = rec.base
    return total


def copy_checkpoint(txn, store, ns: str, src_key: bytes, dst_key: bytes, m: layout.Manifest) -> None:
    """Store ``m``, checkpoint ``src_key``'s manifest, at ``dst_key`` of another thread (its pending writes are
    the caller's, :func:`put_write_raw`): charged its chain's bytes there, as whole values."""
    dst_tkey = layout.read_u64(dst_key[:8])
    put_checkpoint(txn, store, ns, dst_tkey, dst_key, m, chain_bytes(txn, store, src_key))


def copy_thread(txn, store, ns: str, dst_tkey: int) -> None:
    """Every checkpoint and pending write of a thread was copied, records as they were, to the new thread
    ``dst_tkey`` (the charges and their links within the thread came with them): charge them there."""
    if thread(txn, store, dst_tkey) is None:
        return
    charges, writes = thread_charges(txn, store, dst_tkey)
    add(txn, store, ns, dst_tkey, nbytes=sum(r.nbytes for r in charges.values()) + sum(writes.values()),
        checkpoints=len(charges))


# ----------------------------------------------------------------- pending writes
# A pending write's charge is in its own record (WriteRec.charge).

def _write_charge(raw) -> int:
    return max(layout.write_decoder.decode(raw).charge, 0)


def put_write(txn, store, ns: str, tkey: int, key: bytes, rec: layout.WriteRec, nbytes: int) -> None:
    """Store pending write ``rec`` at writes ``key`` (a new one, or a replace), charged ``nbytes``."""
    db = store.db["writes"]
    old = txn.get(key, db=db)
    old_n = 0 if old is None else _write_charge(old)
    rec.fmt, rec.charge = 3, nbytes
    txn.put(key, layout.encode(rec), db=db)
    if thread(txn, store, tkey) is not None:
        add(txn, store, ns, tkey, nbytes=nbytes - old_n)


def put_write_raw(txn, store, ns: str, tkey: int, key: bytes, raw: bytes) -> None:
    """Store a pending write's record as it is (a copy of another checkpoint's: charged what that one was)."""
    db = store.db["writes"]
    old = txn.get(key, db=db)
    delta = _write_charge(raw) - (0 if old is None else _write_charge(old))
    txn.put(key, raw, db=db)
    if delta and thread(txn, store, tkey) is not None:
        add(txn, store, ns, tkey, nbytes=delta)


def writes_charge(txn, store, prefix: bytes) -> int:
    """The charges of the pending writes stored under writes key ``prefix``."""
    total = 0
    cursor = txn.cursor(db=store.db["writes"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            total += _write_charge(raw)
    return total


def refund_writes(txn, store, ns: str, tkey: int, nbytes: int) -> None:
    """Pending writes charged ``nbytes`` in all (their records' charges) were deleted from thread ``tkey``."""
    if nbytes and thread(txn, store, tkey) is not None:
        add(txn, store, ns, tkey, nbytes=-nbytes)


def thread_charges(txn, store, tkey: int) -> tuple[dict[bytes, ChargeRec], dict[bytes, int]]:
    """(ckpts key -> its ChargeRec, ckpts key -> the charges of its pending writes) of one thread (checkpoints
    and writes without a recorded charge are left out)."""
    prefix = layout.tkey_prefix(tkey)
    charges: dict[bytes, ChargeRec] = {}
    cursor = txn.cursor(db=store.db["ckpts"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            key = bytes(key)
            rec = _unpack(key, layout.manifest_decoder.decode(raw))
            if rec is not None:
                charges[key] = rec
    writes: dict[bytes, int] = {}
    for ck, n in _write_charges(txn, store, prefix):
        if n >= 0:
            writes[ck] = writes.get(ck, 0) + n
    return charges, writes


def _write_charges(txn, store, prefix: bytes):
    """(ckpts key of its checkpoint, charge recorded: -1 none) of each pending write under ``prefix``."""
    cursor = txn.cursor(db=store.db["writes"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            tk, cns, cid, _, _ = layout.split_write_key(bytes(key))
            yield layout.ckpt_key(tk, cns, cid), layout.write_decoder.decode(raw).charge


def refund_curve(charges: dict[bytes, ChargeRec], writes: dict[bytes, int], total: int, gone: set[bytes],
                 order: list[bytes]) -> list[int]:
    """The thread's charged bytes after removing the checkpoints ``gone`` and then the first k of ``order``,
    for k = 0..len(order), by the same rule as :func:`delete_checkpoint` (simulated on copies)."""
    rows = {k: [r.nbytes, r.base, list(r.deps)] for k, r in charges.items()}

    def remove(key: bytes) -> int:
        r = rows.pop(key, None)
        refund = writes.get(key, 0)
        if r is None:
            return refund
        nbytes, base, deps = r
        b = rows.get(base) if base else None
        if b is not None and key in b[2]:
            b[2].remove(key)
        deps = [d for d in deps if d in rows]
        if deps:
            heir = rows[deps[0]]
            heir[0] += nbytes
            heir[1] = base if b is not None else b""
            for d in deps[1:]:
                rows[d][1] = deps[0]
                heir[2].append(d)
            if b is not None:
                b[2].append(deps[0])
            return refund
        return refund + nbytes

    left = total
    for key in gone:
        left -= remove(key)
    out = [left]
    for key in order:
        left -= remove(key)
        out.append(left)
    return out


# ----------------------------------------------------------------- quotas

@dataclass
class Quota:
    max_bytes: int = 0  # 0: unlimited
    max_threads: int = 0
    max_items: int = 0
    own: bool = False  # the namespace has its own row (else: the server's defaults)


def quota_of(txn, store, ns: str) -> Quota:
    raw = txn.get(ns.encode(), db=store.db["quotas"])
    defaults = getattr(store, "quota_defaults", None) or (0, 0, 0)
    if raw is None:
        return Quota(*defaults)
    rec = layout.quota_decoder.decode(raw)
    own = (rec.max_bytes, rec.max_threads, rec.max_items)
    return Quota(*(d if v == UNSET else v for v, d in zip(own, defaults)), own=True)


def set_quota(txn, store, ns: str, values: tuple[int, int, int] | None, now: int) -> None:
    """Set a namespace's own quotas (UNSET fields: the server's default), or clear them (None)."""
    if values is None:
        txn.delete(ns.encode(), db=store.db["quotas"])
    else:
        txn.put(ns.encode(), layout.encode(QuotaRec(1, *values, now)), db=store.db["quotas"])


def check(txn, store, ns: str, *, nbytes: int = 0, threads: int = 0, items: int = 0) -> None:
    """QUOTA_EXCEEDED if adding these to namespace ``ns`` now would go over a quota (a large put asks before
    it stores its staged nodes; its write checks again)."""
    n = namespace(txn, store, ns)
    n.nbytes += nbytes
    n.threads += threads
    n.items += items
    _check(txn, store, ns, n, nbytes, threads, items)


def check_total(txn, store, ns: str, before: UsageRec, after: UsageRec, what: str = "write") -> None:
    """QUOTA_EXCEEDED if namespace ``ns`` going from usage ``before`` to ``after`` (a write that recounts it
    whole: an import) takes a counter that grows over its quota; the same reason and message as any write."""
    _check(txn, store, ns, after, after.nbytes - before.nbytes, after.threads - before.threads,
           after.items - before.items, what)


def _check(txn, store, ns: str, n: UsageRec, nbytes: int, threads: int, items: int,
           what: str = "write") -> None:
    q = quota_of(txn, store, ns)
    for name, grew, value, limit, unit in (("max_bytes", nbytes, n.nbytes, q.max_bytes, "bytes"),
                                           ("max_threads", threads, n.threads, q.max_threads, "threads"),
                                           ("max_items", items, n.items, q.max_items, "items")):
        if grew > 0 and limit and value > limit:
            raise ApiError("QUOTA_EXCEEDED", f"namespace {ns!r} would hold {value} {unit} (this {what} adds "
                           f"{grew}); its quota {name} is {limit}", namespace=ns, quota=name, usage=value - grew,
                           requested=grew, limit=limit)


def namespaces(txn, store, limit: int) -> tuple[list[tuple[str, UsageRec, Quota]], int]:
    """(namespace, its usage, the quotas in effect) of the first ``limit`` namespaces with a counter, in name
    order, and how many more there are (for the metrics)."""
    out, more = [], 0
    cursor = txn.cursor(db=store.db["usage"])
    if cursor.set_range(b"n"):
        for key, raw in cursor.iternext():
            if not key.startswith(b"n"):
                break
            if len(out) >= limit:
                more += 1
                continue
            ns = bytes(key[1:]).decode()
            out.append((ns, layout.usage_decoder.decode(raw), quota_of(txn, store, ns)))
    return out, more


# ----------------------------------------------------------------- rebuild and recount

def _physical(get, roots, seen: set[bytes]) -> int:
    """Canonical bytes (what a put is charged for a node it builds) of the nodes reachable from ``roots`` not in
    ``seen`` (which gets them)."""
    total = 0
    stack = [r for r in roots if r not in seen]
    seen.update(stack)

    def hash_of(node_id: bytes) -> bytes:
        child = get(node_id)
        if child is None:
            raise hp.CorruptNode("missing node")
        return bytes(child[:hp.HASH_SIZE])

    while stack:
        rec = get(stack.pop())
        if rec is None:
            continue
        try:
            total += len(hp.canonical_node(encryption.plain(rec)[hp.HASH_SIZE:], hash_of))
        except Exception:  # a damaged or unreadable (sealed, no key) record: its stored size
            total += len(rec)
        for child in hp.stored_children(rec[hp.HASH_SIZE:]):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return total


def _thread_items(txn, store, tkey: int) -> tuple[int, int]:
    """(items, bytes) of a thread's conversation items and artifact versions (artifacts are charged their
    size)."""
    raw = txn.get(layout.tkey_prefix(tkey), db=store.db["cstate"])
    n = layout.convstate_decoder.decode(raw).count if raw is not None else 0
    size = 0
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["artifacts"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            n += 1
            size += layout.artifact_decoder.decode(raw).size
    return n, size


def _memory_items(txn, store) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, raw in txn.cursor(db=store.db["mempaths"]):
        ns = bytes(key).partition(layout.SEP)[0].decode()
        out[ns] = out.get(ns, 0) + layout.mempath_decoder.decode(raw).live
    return out


def stored_bytes(txn, store, m: layout.Manifest) -> int:
    """The canonical bytes of the nodes a manifest reaches, each once (the charge of a checkpoint made of
    stored nodes: a promotion's)."""
    nodes_db = store.db["nodes"]
    roots = [i for _, i in m.channels] + ([m.extra] if m.extra is not None else [])
    return _physical(lambda i: txn.get(i, db=nodes_db), roots, set())


def rebuild_thread(txn, store, ns: str, tkey: int) -> UsageRec:
    """Build one thread's charges (in its manifests and pending-write records) and counter from what it stores
    (a store or thread written without counters): each checkpoint, in key order, is charged its metadata and
    the canonical bytes of the nodes it reaches first in its thread, and is taken as built on the one before it
    in its checkpoint namespace; a pending write the canonical bytes of what its value reaches first."""
    prefix = layout.tkey_prefix(tkey)
    nodes_db = store.db["nodes"]
    get = lambda i: txn.get(i, db=nodes_db)  # noqa: E731
    seen: set[bytes] = set()
    rows: dict[bytes, tuple[layout.Manifest, ChargeRec]] = {}
    last_of: dict[str, bytes] = {}
    total = 0
    cursor = txn.cursor(db=store.db["ckpts"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            key = bytes(key)
            m = layout.manifest_decoder.decode(raw)
            roots = [i for _, i in m.channels] + ([m.extra] if m.extra is not None else [])
            n = len(bytes(m.metadata)) + _physical(get, roots, seen)
            cns = layout.split_ckpt_key(key)[1]
            base = last_of.get(cns, b"")
            if base:
                rows[base][1].deps.append(key)
            rows[key] = (m, ChargeRec(1, n, base, []))
            last_of[cns] = key
            total += n
    for key, (m, rec) in rows.items():
        _save(txn, store, key, rec, m)
    wrows = []
    cursor = txn.cursor(db=store.db["writes"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            w = layout.write_decoder.decode(raw)
            n = _physical(get, [w.value], seen)
            w.fmt, w.charge = 3, n
            wrows.append((bytes(key), w))
            total += n
    for key, w in wrows:
        txn.put(key, layout.encode(w), db=store.db["writes"])
    items, art_bytes = _thread_items(txn, store, tkey)
    rec = UsageRec(1, total + art_bytes, 0, items, len(rows), ns)
    txn.put(layout.thread_usage_key(tkey), layout.encode(rec), db=store.db["usage"])
    return rec


class ThreadCharges:
    """:func:`rebuild_thread` in steps, for a thread written in several transactions before its record exists
    (ops/transfer.py: a large thread of an import): give its checkpoints in key order (:meth:`checkpoint`, each
    stored once its charge is known: when the next of its checkpoint namespace comes, or at :meth:`finish`),
    then its pending writes (:meth:`write`); :meth:`finish` stores the thread's counter row. Holds the ids of
    the nodes charged so far (a node is charged to the first checkpoint that reaches it)."""

    def __init__(self, store, ns: str, tkey: int) -> None:
        self.store, self.ns, self.tkey = store, ns, tkey
        self.seen: set[bytes] = set()
        self.last: dict[str, tuple[bytes, layout.Manifest, ChargeRec]] = {}
        self.total = 0
        self.checkpoints = 0

    def checkpoint(self, txn, key: bytes, m: layout.Manifest) -> None:
        nodes_db = self.store.db["nodes"]
        roots = [i for _, i in m.channels] + ([m.extra] if m.extra is not None else [])
        n = len(bytes(m.metadata)) + _physical(lambda i: txn.get(i, db=nodes_db), roots, self.seen)
        cns = layout.split_ckpt_key(key)[1]
        base = b""
        prev = self.last.get(cns)
        if prev is not None:
            prev[2].deps.append(key)
            _save(txn, self.store, prev[0], prev[2], prev[1])
            base = prev[0]
        self.last[cns] = (key, m, ChargeRec(1, n, base, []))
        self.total += n
        self.checkpoints += 1

    def write(self, txn, key: bytes, w: layout.WriteRec) -> None:
        nodes_db = self.store.db["nodes"]
        n = _physical(lambda i: txn.get(i, db=nodes_db), [w.value], self.seen)
        w.fmt, w.charge = 3, n
        txn.put(key, layout.encode(w), db=self.store.db["writes"])
        self.total += n

    def finish(self, txn) -> UsageRec:
        for key, m, rec in self.last.values():
            _save(txn, self.store, key, rec, m)
        self.last = {}
        items, art_bytes = _thread_items(txn, self.store, self.tkey)
        rec = UsageRec(1, self.total + art_bytes, 0, items, self.checkpoints, self.ns)
        txn.put(layout.thread_usage_key(self.tkey), layout.encode(rec), db=self.store.db["usage"])
        return rec


def _value_bytes(txn, store, node_id: bytes) -> int:
    """The canonical encoding's length of the value rooted at ``node_id`` (what its write was charged), as
    ``nodes.value_encoding`` builds it (not importable here: nodes imports the store, which imports this
    module; tests/test_quotas.py checks the two agree); a value that cannot be read (damaged, or sealed without
    its key) counts its root record's stored size."""
    nodes_db = store.db["nodes"]
    fetch = lambda i: txn.get(i, db=nodes_db)  # noqa: E731
    try:
        rec = fetch(node_id)
        if rec is None:
            return 0
        tag = rec[hp.HASH_SIZE]
        if tag == hp.TAG_LIST:
            items = hp.stored_list_encodings(rec, fetch)
            return len(array_header(len(items))) + sum(len(i) for i in items)
        if tag == hp.TAG_MAP or tag == hp.TAG_MAP_INNER:
            entries = hp.stored_map_entries(rec, fetch)
            return len(map_header(len(entries))) + sum(
                len(_str_encoder.encode(k)) + len(hp.stored_encoding(fetch(i), fetch)) for k, i in entries)
        return len(hp.stored_encoding(rec, fetch))
    except Exception:
        raw = fetch(node_id)
        return 0 if raw is None else len(raw)


def rebuild_conversation(txn, store, tkey: int) -> tuple[int, int]:
    """Write the charge rows of a thread's conversation items from its records: (items, bytes)."""
    db = store.db["icharge"]
    _drop_item_rows(txn, store, ITEM_CONV + layout.tkey_prefix(tkey))
    prefix = layout.tkey_prefix(tkey)
    rows = []
    cursor = txn.cursor(db=store.db["citems"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            rec = layout.item_decoder.decode(raw)
            size = len(rec.inline) if rec.node is None else _value_bytes(txn, store, rec.node)
            n = size + (len(bytes(rec.metadata)) if rec.metadata is not None else 0)
            rows.append((ITEM_CONV + bytes(key), n))
    for key, n in rows:
        txn.put(key, layout.u64(n), db=db)
    return len(rows), sum(n for _, n in rows)


def _path_namespaces(txn, store) -> dict[bytes, str]:
    """Memory path id (u64 BE) -> its namespace, from ``mempaths`` (where the item counts come from too)."""
    out = {}
    for key, raw in txn.cursor(db=store.db["mempaths"]):
        out[layout.u64(layout.mempath_decoder.decode(raw).path_id)] = bytes(key).partition(layout.SEP)[0].decode()
    return out


def rebuild_memory(txn, store, only: str | None = None) -> dict[str, int]:
    """Write the charge rows of the memory items (of namespace ``only``, else all) from their records:
    namespace -> bytes."""
    db = store.db["icharge"]
    path_ns = _path_namespaces(txn, store)
    stale = [k for k in keys_of(txn, db, ITEM_MEM) if only is None or path_ns.get(k[1:9], "") == only]
    for k in stale:
        txn.delete(k, db=db)
    rows, out = [], {}
    for key, raw in txn.cursor(db=store.db["memitems"]):
        key = bytes(key)
        ns = path_ns.get(key[:8], "")
        if only is not None and ns != only:
            continue
        n = _value_bytes(txn, store, layout.memitem_decoder.decode(raw).value)
        rows.append((ITEM_MEM + key, n))
        out[ns] = out.get(ns, 0) + n
    for key, n in rows:
        txn.put(key, layout.u64(n), db=db)
    return out


def _item_rows(txn, store, prefix: bytes) -> dict[bytes, int]:
    out = {}
    cursor = txn.cursor(db=store.db["icharge"])
    if cursor.set_range(prefix):
        for key, raw in cursor.iternext():
            if not key.startswith(prefix):
                break
            out[bytes(key)] = layout.read_u64(raw)
    return out


def rebuild(txn, store, progress=None) -> int:
    """Build every counter and charge row from what the store holds; returns the threads counted."""
    for name in ("usage", "ckcharge", "wcharge", "icharge"):
        txn.drop(store.db[name], delete=False)
    totals: dict[str, UsageRec] = {}
    n = 0
    for key, raw in txn.cursor(db=store.db["threads"]):
        ns = bytes(key).partition(layout.SEP)[0].decode()
        t = rebuild_thread(txn, store, ns, t_key(raw))
        u = totals.setdefault(ns, UsageRec(1, 0, 0, 0, 0))
        u.nbytes += t.nbytes + rebuild_conversation(txn, store, t_key(raw))[1]
        u.threads += 1
        u.items += t.items
        u.checkpoints += t.checkpoints
        n += 1
        if progress is not None:
            progress(n)
    for ns, items in _memory_items(txn, store).items():
        totals.setdefault(ns, UsageRec(1, 0, 0, 0, 0)).items += items
    for ns, nbytes in rebuild_memory(txn, store).items():
        totals.setdefault(ns, UsageRec(1, 0, 0, 0, 0)).nbytes += nbytes
    for ns, nbytes in rebuild_history(txn, store).items():
        totals.setdefault(ns, UsageRec(1, 0, 0, 0, 0)).nbytes += nbytes
    for ns, u in totals.items():
        txn.put(layout.ns_usage_key(ns), layout.encode(u), db=store.db["usage"])
    txn.put(b"usage", VERSION, db=store.db["meta"])
    return n


def migrate(txn, store, batch: int = 10_000) -> tuple[int, int]:
    """Version 2 to 3: move each ``ckcharge`` row into its checkpoint's manifest and each ``wcharge`` row into
    its pending write's record, as they are (the counters stay exact), empty both tables, and charge the memory
    items' old versions (:func:`rebuild_history`, added to their namespaces' bytes); returns (checkpoint rows,
    write rows) moved. A row whose record is gone (not expected) is dropped: it charged nothing recount
    would see."""
    ck, wc = store.db["ckcharge"], store.db["wcharge"]
    ckpts, writes = store.db["ckpts"], store.db["writes"]
    moved = [0, 0]

    def rows(db):
        """The rows of ``db``, read ``batch`` at a time (each batch's records are rewritten before the next
        batch is read)."""
        after = None
        while True:
            cursor = txn.cursor(db=db)
            found = cursor.set_range(after + b"\x00") if after is not None else cursor.first()
            got = []
            while found and len(got) < batch:
                got.append((bytes(cursor.key()), bytes(cursor.value())))
                found = cursor.next()
            if not got:
                return
            yield from got
            after = got[-1][0]

    for key, raw in rows(ck):
        mraw = txn.get(key, db=ckpts)
        if mraw is None:
            continue
        rec = layout.charge_decoder.decode(raw)
        prefix = _prefix_of(key)
        rec.base = rec.base if rec.base.startswith(prefix) else b""  # (links never leave their cns)
        rec.deps = [d for d in rec.deps if d.startswith(prefix)]
        _save(txn, store, key, rec, layout.manifest_decoder.decode(mraw))
        moved[0] += 1
    for key, raw in rows(wc):
        wraw = txn.get(key, db=writes)
        if wraw is None:
            continue
        w = layout.write_decoder.decode(wraw)
        w.fmt, w.charge = 3, layout.read_u64(raw)
        txn.put(key, layout.encode(w), db=writes)
        moved[1] += 1
    txn.drop(ck, delete=False)
    txn.drop(wc, delete=False)
    for ns, nbytes in rebuild_history(txn, store).items():  # version 2 did not charge memory history
        u = namespace(txn, store, ns)
        u.nbytes += nbytes
        txn.put(layout.ns_usage_key(ns), layout.encode(u), db=store.db["usage"])
    txn.put(b"usage", VERSION, db=store.db["meta"])
    return moved[0], moved[1]


def t_key(raw) -> int:
    return layout.thread_decoder.decode(raw).tkey


def rebuild_namespace(txn, store, ns: str) -> None:
    """Recount one namespace (after an import wrote its records directly)."""
    u = UsageRec(1, rebuild_memory(txn, store, ns).get(ns, 0) + rebuild_history(txn, store, ns).get(ns, 0), 0,
                 _memory_items(txn, store).get(ns, 0), 0)
    prefix = layout.thread_prefix(ns)
    live = [layout.thread_decoder.decode(raw).tkey for key, raw in txn.cursor(db=store.db["threads"])
            if bytes(key).startswith(prefix)]
    db = store.db["usage"]
    live_set = set(live)
    stale = [bytes(k) for k, v in txn.cursor(db=db) if bytes(k[:1]) == b"t"
             and layout.usage_decoder.decode(v).ns == ns and layout.read_u64(bytes(k[1:])) not in live_set]
    for k in stale:  # threads replaced by the import
        drop_thread(txn, store, ns, layout.read_u64(k[1:]))
    for tkey in live:
        t = rebuild_thread(txn, store, ns, tkey)
        u.nbytes += t.nbytes + rebuild_conversation(txn, store, tkey)[1]
        u.threads += 1
        u.items += t.items
        u.checkpoints += t.checkpoints
    txn.put(layout.ns_usage_key(ns), layout.encode(u), db=store.db["usage"])


@dataclass
class Recount:
    """What the counters should say, recounted from the records and the charge rows, and what disagrees."""

    namespaces: dict[str, UsageRec] = field(default_factory=dict)
    threads: dict[int, UsageRec] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def recount(txn, store) -> Recount:
    """Recount every counter from the stored records and their charges and compare with the ``usage`` rows;
    also checks that every live checkpoint and pending write of a counted thread holds its charge, that the
    base/deps links of the checkpoints' charges agree, and that the version 2 charge tables are empty."""
    out = Recount()
    for name in ("ckcharge", "wcharge"):
        if txn.stat(store.db[name])["entries"]:
            out.problems.append(f"{name}: rows of counters version 2 left (they are moved on open)")
    for key, raw in txn.cursor(db=store.db["threads"]):
        ns = bytes(key).partition(layout.SEP)[0].decode()
        tkey = layout.thread_decoder.decode(raw).tkey
        prefix = layout.tkey_prefix(tkey)
        charges, writes = thread_charges(txn, store, tkey)
        ckpts = set(keys_of(txn, store.db["ckpts"], prefix))
        if set(charges) != ckpts:
            out.problems.append(f"thread {tkey} ({ns}): {len(ckpts ^ set(charges))} checkpoints without a charge")
        if any(n < 0 for _, n in _write_charges(txn, store, prefix)):
            out.problems.append(f"thread {tkey} ({ns}): pending writes without a charge")
        for k, r in charges.items():
            if r.base and (r.base not in charges or k not in charges[r.base].deps):
                out.problems.append(f"thread {tkey} ({ns}): a checkpoint's charge base does not list it")
            for d in r.deps:
                if d not in charges or charges[d].base != k:
                    out.problems.append(f"thread {tkey} ({ns}): a checkpoint's charge dependent does not name it")
        items, art_bytes = _thread_items(txn, store, tkey)
        t = UsageRec(1, sum(r.nbytes for r in charges.values()) + sum(writes.values()) + art_bytes, 0, items,
                     len(ckpts), ns)
        out.threads[tkey] = t
        conv = _item_rows(txn, store, ITEM_CONV + prefix)
        if {k[1:] for k in conv} != set(keys_of(txn, store.db["citems"], prefix)):
            out.problems.append(f"thread {tkey} ({ns}): conversation items and their charge rows differ")
        u = out.namespaces.setdefault(ns, UsageRec(1, 0, 0, 0, 0))
        u.nbytes += t.nbytes + sum(conv.values())
        u.threads += 1
        u.items += t.items
        u.checkpoints += t.checkpoints
        stored = thread(txn, store, tkey)
        if stored is None or (stored.nbytes, stored.items, stored.checkpoints) != (t.nbytes, t.items, t.checkpoints):
            out.problems.append(f"thread {tkey} ({ns}): counter {_fmt(stored)} != recount {_fmt(t)}")
    for k in keys_of(txn, store.db["usage"], b"t"):
        if layout.read_u64(k[1:]) not in out.threads:
            out.problems.append(f"thread {layout.read_u64(k[1:])}: a usage row without a thread")
    for k in keys_of(txn, store.db["icharge"], ITEM_CONV):
        if layout.read_u64(k[1:9]) not in out.threads:
            out.problems.append(f"thread {layout.read_u64(k[1:9])}: a conversation item charge row without a thread")
    for ns, items in _memory_items(txn, store).items():
        out.namespaces.setdefault(ns, UsageRec(1, 0, 0, 0, 0)).items += items
    mem = _item_rows(txn, store, ITEM_MEM)
    if {k[1:] for k in mem} != {bytes(k) for k in txn.cursor(db=store.db["memitems"]).iternext(values=False)}:
        out.problems.append("memory items and their charge rows differ")
    path_ns = _path_namespaces(txn, store)
    for k, n in mem.items():
        out.namespaces.setdefault(path_ns.get(k[1:9], ""), UsageRec(1, 0, 0, 0, 0)).nbytes += n
    recount_history(txn, store, out)
    stored_ns = {bytes(k[1:]).decode(): layout.usage_decoder.decode(v)
                 for k, v in txn.cursor(db=store.db["usage"]) if bytes(k[:1]) == b"n"}
    for ns in set(stored_ns) | set(out.namespaces):
        want = out.namespaces.get(ns, UsageRec(1, 0, 0, 0, 0))
        got = stored_ns.get(ns, UsageRec(1, 0, 0, 0, 0))
        if (got.nbytes, got.threads, got.items, got.checkpoints) != (want.nbytes, want.threads, want.items,
                                                                    want.checkpoints):
            out.problems.append(f"namespace {ns!r}: counter {_fmt(got)} != recount {_fmt(want)}")
    return out


def keys_of(txn, db, prefix: bytes) -> list[bytes]:
    cursor = txn.cursor(db=db)
    out = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            out.append(bytes(key))
    return out


def _fmt(u: UsageRec | None) -> str:
    if u is None:
        return "(none)"
    return f"bytes={u.nbytes} threads={u.threads} items={u.items} checkpoints={u.checkpoints}"
