"""summaries: compactions (ranges due for a summary), their claims, and applied summaries of a thread.

Rows (storage/layout.py): ``ccomps`` and ``csums`` keyed ``tkey level first_seq``; ``cqueue`` (claim order per
namespace, ``ns NUL due_us tkey level first_seq`` -> thread_id); ``cpyr`` (``tkey`` -> the high-water seq of
each level: the last seq of the newest compaction issued there). Ids are ``L<level>:<first>-<last>``.
Everything here takes plain values; which ranges are due, and what an append or pop does to them, is composed
in ops/compaction.py.
"""
from __future__ import annotations

import re
from typing import Iterator

from blake3 import blake3
import msgspec

from ..errors import ApiError, invalid
from ..storage import layout, records, valuetext
from ..storage.layout import CompactionRec, PyramidState, SummaryRec
from ..storage.store import Store

HASH_PREFIX = b"agentstate.v1 compaction\x00"
FALLBACK_PRODUCER = "agentstate.fallback/extractive-v1"
_ID = re.compile(r"L([0-9]{1,2}):([0-9]{1,20})-([0-9]{1,20})")
_enc = msgspec.msgpack.Encoder()


def make_id(level: int, first: int, last: int) -> str:
    return f"L{level}:{first}-{last}"


def parse_id(text: str, field: str) -> tuple[int, int, int]:
    m = _ID.fullmatch(text)
    if m is None:
        raise invalid(field, "not a summary id (L<level>:<first_seq>-<last_seq>)")
    level, first, last = (int(g) for g in m.groups())
    if not 1 <= level <= 16 or not 1 <= first <= last < 2**64:
        raise invalid(field, "level must be 1 to 16 and 1 <= first_seq <= last_seq")
    return level, first, last


def items_hash(first: int, last: int, pairs: list[tuple[int, bytes]]) -> bytes:
    """The content hash of a level-1 range: its live items' (seq, content hash)."""
    return blake3(HASH_PREFIX + _enc.encode([1, first, last, [[s, h] for s, h in pairs]])).digest()


def summaries_hash(level: int, first: int, last: int, pairs: list[tuple[str, str]]) -> bytes:
    """The content hash of a level-2-and-up range: its child summaries' (id, text)."""
    return blake3(HASH_PREFIX + _enc.encode([level, first, last, [[i, t] for i, t in pairs]])).digest()


# ----------------------------------------------------------------- the pyramid's high-water seqs

def pyramid(txn, store: Store, tkey: int) -> PyramidState:
    raw = txn.get(layout.u64(tkey), db=store.db["cpyr"])
    return PyramidState(layout.FORMAT_VERSION, []) if raw is None else layout.pyramid_decoder.decode(raw)


def high_water(p: PyramidState, level: int) -> int:
    return p.high_water[level - 1] if level <= len(p.high_water) else 0


def set_high_water(txn, store: Store, tkey: int, p: PyramidState, level: int, seq: int) -> None:
    while len(p.high_water) < level:
        p.high_water.append(0)
    p.high_water[level - 1] = seq
    txn.put(layout.u64(tkey), layout.encode(p), db=store.db["cpyr"])


# ----------------------------------------------------------------- compactions

def compaction(txn, store: Store, tkey: int, level: int, first: int) -> CompactionRec | None:
    raw = txn.get(layout.level_key(tkey, level, first), db=store.db["ccomps"])
    return None if raw is None else layout.compaction_decoder.decode(raw)


def issue(txn, store: Store, ns: str, thread_id: str, tkey: int, level: int, first: int, last: int,
          content_hash: bytes, input_count: int, children: list[int], now: int, fallback_us: int,
          max_summary_chars: int, due_event_seq: int) -> CompactionRec:
    """Store a due compaction and queue it for claims."""
    rec = CompactionRec(layout.FORMAT_VERSION, last, content_hash, input_count, children, now, fallback_us, "", 0,
                        "", 0, due_event_seq, max_summary_chars)
    txn.put(layout.level_key(tkey, level, first), layout.encode(rec), db=store.db["ccomps"])
    txn.put(layout.cqueue_key(ns, now, tkey, level, first), thread_id.encode(), db=store.db["cqueue"])
    return rec


def save_compaction(txn, store: Store, tkey: int, level: int, first: int, rec: CompactionRec) -> None:
    txn.put(layout.level_key(tkey, level, first), layout.encode(rec), db=store.db["ccomps"])


def end_compaction(txn, store: Store, ns: str, tkey: int, level: int, first: int, rec: CompactionRec) -> None:
    """The compaction is gone (applied or cancelled): its record and queue row."""
    txn.delete(layout.level_key(tkey, level, first), db=store.db["ccomps"])
    txn.delete(layout.cqueue_key(ns, rec.due_us, tkey, level, first), db=store.db["cqueue"])


def compactions_of(txn, store: Store, tkey: int) -> Iterator[tuple[int, int, CompactionRec]]:
    """(level, first_seq, record) of a thread's compactions, by level then first seq."""
    yield from _level_rows(txn, store.db["ccomps"], tkey, layout.compaction_decoder)


def queued(txn, store: Store, ns: str, after: bytes | None = None) -> Iterator[tuple[bytes, int, int, int, int, str]]:
    """(key, due_us, tkey, level, first_seq, thread_id) of a namespace's queued compactions, oldest due first,
    after key ``after``."""
    prefix = ns.encode() + layout.SEP
    cursor = txn.cursor(db=store.db["cqueue"])
    found = cursor.set_range(after + b"\x00" if after else prefix)
    while found:
        key = bytes(cursor.key())
        if not key.startswith(prefix):
            return
        due, tkey, level, first = layout.split_cqueue_suffix(key, len(prefix) - 1)
        yield key, due, tkey, level, first, bytes(cursor.value()).decode()
        found = cursor.next()


def claimable(rec: CompactionRec, now: int) -> bool:
    return not rec.lease_id or rec.lease_expires_us <= now


def claim(rec: CompactionRec, worker: str, lease_ms: int, now: int, lease_id: str) -> None:
    rec.lease_id, rec.lease_expires_us, rec.worker = lease_id, now + lease_ms * 1000, worker
    rec.attempts += 1


# ----------------------------------------------------------------- summaries

def summary(txn, store: Store, tkey: int, level: int, first: int) -> SummaryRec | None:
    raw = txn.get(layout.level_key(tkey, level, first), db=store.db["csums"])
    return None if raw is None else layout.summary_decoder.decode(raw)


def summaries_of(txn, store: Store, tkey: int, level: int | None = None, after_first: int = 0,
                 ) -> Iterator[tuple[int, int, SummaryRec]]:
    """(level, first_seq, record) of a thread's summaries, by level then first seq (one level when given,
    from first seq ``after_first`` + 1)."""
    yield from _level_rows(txn, store.db["csums"], tkey, layout.summary_decoder, level, after_first)


def _level_rows(txn, db, tkey: int, decoder, level: int | None = None, after_first: int = 0):
    prefix = layout.tkey_prefix(tkey) + (bytes((level,)) if level is not None else b"")
    cursor = txn.cursor(db=db)
    start = layout.level_key(tkey, level, after_first + 1) if level is not None else prefix
    found = cursor.set_range(start)
    while found:
        key = cursor.key()
        if not key.startswith(prefix):
            return
        _, lvl, first = layout.split_level_key(key)
        yield lvl, first, decoder.decode(cursor.value())
        found = cursor.next()


def apply(txn, store: Store, tkey: int, level: int, first: int, rec: SummaryRec) -> None:
    txn.put(layout.level_key(tkey, level, first), layout.encode(rec), db=store.db["csums"])


def remove_summary(txn, store: Store, tkey: int, level: int, first: int) -> None:
    txn.delete(layout.level_key(tkey, level, first), db=store.db["csums"])


def check_submit(txn, store: Store, tkey: int, level: int, first: int, last: int, lease_id: str, text: str,
                 content_hash: bytes) -> tuple[SummaryRec | None, CompactionRec | None]:
    """The checks of SubmitSummary after validation, in the documented order: (the stored summary to answer a
    repeat with, None) or (None, the compaction to apply)."""
    sid = make_id(level, first, last)
    done = summary(txn, store, tkey, level, first)
    if done is not None and done.last_seq == last:
        if done.lease_id == lease_id and done.text == text and not done.fallback:
            return done, None
        raise ApiError("COMPACTION_DONE", f"{sid} was summarised already", summary_id=sid, producer=done.producer)
    rec = compaction(txn, store, tkey, level, first)
    if rec is None or rec.last_seq != last:
        raise ApiError("SUMMARY_STALE", f"{sid} is not pending (its items were popped or cleared, or it never was "
                       "due)", summary_id=sid)
    if lease_id != rec.lease_id:
        raise ApiError("LEASE_LOST", f"lease_id is not the current lease of {sid} (another worker claimed it)",
                       field="lease_id", summary_id=sid)
    if content_hash != rec.content_hash:
        raise ApiError("SUMMARY_STALE", f"content_hash does not match {sid}'s current content", field="content_hash",
                       summary_id=sid)
    return None, rec


def new_summary(level: int, last: int, item_count: int, text: str, producer: str, fallback: bool, tokens,
                content_hash: bytes, covered_raw: int, children: list[int], now: int, attempts: int,
                lease_id: str) -> SummaryRec:
    raw = valuetext.estimate(msgspec.msgpack.encode(text))  # the rendered SUMMARY item: escapes counted as J does
    return SummaryRec(layout.FORMAT_VERSION, last, item_count, text, producer, fallback, tokens, raw, content_hash,
                      covered_raw, children, now, attempts, lease_id)


def fallback_text(lines: list[tuple[str, str]], max_chars: int) -> str:
    """extractive-v1: each input as ``label: text`` (whitespace collapsed), cut to an equal share of
    ``max_chars``, joined with newlines and cut to ``max_chars``."""
    n = max(len(lines), 1)
    w = max(8, (max_chars - (n - 1)) // n)
    out = []
    for label, text in lines:
        text = " ".join(text.split())
        line = f"{label}: {text}" if label else text
        out.append(valuetext.cut(line, w))
    return valuetext.cut("\n".join(out), max_chars)


def delete_thread_summaries(txn, store: Store, ns: str, tkey: int) -> list[tuple[int, int, CompactionRec]]:
    """Delete a thread's summaries, compactions (with their queue rows) and pyramid; returns the compactions
    it deleted (so their timers can go too)."""
    comps = list(compactions_of(txn, store, tkey))
    for level, first, rec in comps:
        end_compaction(txn, store, ns, tkey, level, first, rec)
    prefix = layout.tkey_prefix(tkey)
    records.delete_prefix(txn, store.db["csums"], prefix)
    txn.delete(layout.u64(tkey), db=store.db["cpyr"])
    return comps


# ----------------------------------------------------------------- counts for the metrics

def count_pending(txn, store: Store) -> int:
    """Compactions due and not yet applied (claimed or not), all namespaces: LMDB's entry count, O(1)."""
    return txn.stat(store.db["ccomps"])["entries"]


def count_claimed(txn, store: Store, now: int, limit: int) -> tuple[int, bool]:
    """(compactions under a live lease among the first ``limit`` records read, whether that was all of them):
    reads at most ``limit`` compaction records."""
    n = seen = 0
    cursor = txn.cursor(db=store.db["ccomps"])
    if not cursor.first():
        return 0, True
    for value in cursor.iternext(keys=False, values=True):
        if seen >= limit:
            return n, False
        seen += 1
        rec = layout.compaction_decoder.decode(value)
        if rec.lease_id and rec.lease_expires_us > now:
            n += 1
    return n, True
