"""context: GetContext's read — one MVCC snapshot of a thread (policy, calibration, pins, the cover of summaries,
the uncovered items) into ops/assemble.py's values, and the assembly itself. It never writes.

The read is bounded by the tail and the cover, not by the length of the log (docs/conversations.md "Cost"):
the tail's first seq comes from the newest items (read backwards until their blocks are known), the cover
from a few seeks per level, and only the items after the cover are read. ``bounded=False`` reads everything
and runs the whole-log definition instead (tests/test_context.py checks both agree).
"""
from __future__ import annotations

import math

from ..state import calibration, conversations, convpolicy, pins, summaries
from ..state.conversations import REASONING, TOOL_RESULT
from ..storage import layout
from . import assemble
from .assemble import Params, Src, Sum

MAX_LEVEL = 16


def pin_srcs(txn, store, ns: str, tkey: int) -> list[Src]:
    out = []
    for scope_key in (None, tkey):
        for pin_id, r in pins.scope(txn, store, ns, scope_key):
            out.append(Src(r.kind, r.role, r.content, r.raw, r.tokens, tool_name=r.tool_name, pin_id=pin_id))
    return out


def _src(seq: int, r) -> Src:
    return Src(r.kind, r.role, r.inline, r.raw, r.tokens, seq, r.call_id, r.tool_name, r.compact, r.dedupe_key,
               r.content_hash)


def _sum(level: int, first: int, r) -> Sum:
    return Sum(level, first, r.last_seq, r.text, r.raw, r.covered_raw, r.tokens, r.item_count)


def _newest(txn, store, tkey: int, n: int) -> list[tuple[int, object]]:
    """The newest ``n`` live items, oldest first."""
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["citems"])
    end = layout.prefix_end(prefix)
    found = cursor.prev() if end is not None and cursor.set_range(end) else cursor.last()
    out = []
    while found and len(out) < n:
        key = cursor.key()
        if not key.startswith(prefix):
            break
        out.append((layout.split_seq_key(key)[1], conversations.load(txn, cursor.value())))
        found = cursor.prev()
    out.reverse()
    return out


def tail_start(txn, store, tkey: int, count: int, p: Params) -> float:
    """``t`` from the newest items: enough of them that every block reaching the newest ``keep_last`` is whole
    (at least ``trigger_items``, so no older call can be open; the calls of their results; the reasoning
    before them)."""
    return _tail(txn, store, tkey, count, p)[0]


def _tail(txn, store, tkey: int, count: int, p: Params) -> tuple[float, list[Src]]:
    """(``t``, the newest live items read to find it, oldest first: every live item from the first of them)."""
    if p.keep_last <= 0 or not count:
        return math.inf, []
    r = max(p.keep_last, p.trigger_items)
    while True:
        suffix = _newest(txn, store, tkey, r)
        if len(suffix) < r or len(suffix) >= count:
            break
        first = suffix[0][0]
        if any(rec.kind == TOOL_RESULT and 0 < rec.call_seq < first for _, rec in suffix):
            r *= 2
            continue
        before = _newest_before(txn, store, tkey, first)
        if before is not None and before.kind == REASONING:
            r += 1
            continue
        break
    srcs = [_src(s, rec) for s, rec in suffix]
    return assemble.tail_start(srcs, p), srcs


def _newest_before(txn, store, tkey: int, seq: int):
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["citems"])
    if not cursor.set_range(layout.seq_key(tkey, seq)) or not cursor.prev():
        return None
    if not cursor.key().startswith(prefix):
        return None
    return conversations.load(txn, cursor.value())


def cover(txn, store, tkey: int, t: float) -> list[Sum]:
    """The cover, top down: at each level from the highest, the applied summaries after the covered prefix
    that start at its next live item and end before the tail (a few seeks per level). Levels above the
    highest one a compaction was ever issued at (the pyramid's high-water list) hold no summary: not read."""
    c = 0
    out: list[Sum] = []
    items = txn.cursor(db=store.db["citems"])
    prefix = layout.tkey_prefix(tkey)

    def next_live(c: int) -> int | None:
        if not items.set_range(layout.seq_key(tkey, c + 1)):
            return None
        key = items.key()
        return layout.split_seq_key(key)[1] if key.startswith(prefix) else None

    top = min(MAX_LEVEL, len(summaries.pyramid(txn, store, tkey).high_water))
    for level in range(top, 0, -1):
        for _, first, rec in summaries.summaries_of(txn, store, tkey, level, c):
            if first != next_live(c) or not rec.last_seq < t:
                break
            out.append(_sum(level, first, rec))
            c = rec.last_seq
    return out


def build(txn, store, ns: str, thread_id: str, tkey: int, knowledge: list[Src], *, budget: int, tokenizer: str,
          keep_last: int | None, compress: bool, dedupe: bool, knowledge_at_end: bool, bounded: bool = True,
          ) -> tuple[assemble.Result, float]:
    policy, _, _ = convpolicy.compaction(txn, store, ns, tkey)
    f = calibration.factor(txn, store, tkey)
    p = Params(budget, policy.keep_last_items if keep_last is None else keep_last, policy.trigger_items,
               policy.max_compact_chars, f, tokenizer, compress, dedupe, knowledge_at_end)
    system = pin_srcs(txn, store, ns, tkey)
    if not bounded:
        live = [_src(seq, r) for seq, r in conversations.items_from(txn, store, tkey, 1, 2**64 - 1)]
        sums = [_sum(level, first, r) for level, first, r in summaries.summaries_of(txn, store, tkey)]
        return assemble.assemble(live, sums, system, knowledge, p), f
    st = conversations.state(txn, store, tkey)
    count, last = (st.count, st.last_seq) if st is not None else (0, 0)
    t, newest = _tail(txn, store, tkey, count, p)
    cov = cover(txn, store, tkey, t)
    c = cov[-1].last if cov else 0
    if newest and (c + 1 >= newest[0].seq or len(newest) == count):  # the items after c were read already
        unc = [x for x in newest if x.seq > c]
    else:
        unc = [_src(seq, r) for seq, r in conversations.items_from(txn, store, tkey, c + 1, 2**64 - 1)]
    return assemble.assemble_from(unc, cov, t, system, knowledge, p, last), f
