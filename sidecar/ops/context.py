"""context: GetContext's read — one MVCC snapshot of a thread (policy, calibration, pins, summaries, live items)
into ops/assemble.py's values, and the assembly itself. It never writes.

Built: every live item and summary of the thread is read (the backward walk of docs/conversations.md "Cost",
which bounds the records read by the budget, is designed and not built yet).
"""
from __future__ import annotations

from ..state import calibration, conversations, convpolicy, pins, summaries
from ..storage import records
from . import assemble
from .assemble import Params, Src, Sum


def pin_srcs(txn, store, ns: str, tkey: int) -> list[Src]:
    out = []
    for scope_key in (None, tkey):
        for pin_id, r in pins.scope(txn, store, ns, scope_key):
            out.append(Src(r.kind, r.role, r.content, r.raw, r.tokens, tool_name=r.tool_name, pin_id=pin_id))
    return out


def build(txn, store, ns: str, thread_id: str, tkey: int, knowledge: list[Src], *, budget: int, tokenizer: str,
          keep_last: int | None, compress: bool, dedupe: bool, knowledge_at_end: bool) -> tuple[assemble.Result,
                                                                                             float]:
    policy, _, _ = convpolicy.compaction(txn, store, ns, tkey)
    f = calibration.factor(txn, store, tkey)
    live = [Src(r.kind, r.role, r.inline, r.raw, r.tokens, seq, r.call_id, r.tool_name, r.compact, r.dedupe_key,
                r.content_hash)
            for seq, r in conversations.items_from(txn, store, tkey, 1, 2**64 - 1)]
    sums = [Sum(level, first, r.last_seq, r.text, r.raw, r.covered_raw, r.tokens)
            for level, first, r in summaries.summaries_of(txn, store, tkey)]
    p = Params(budget, policy.keep_last_items if keep_last is None else keep_last, policy.trigger_items,
               policy.max_compact_chars, f, tokenizer, compress, dedupe, knowledge_at_end)
    return assemble.assemble(live, sums, pin_srcs(txn, store, ns, tkey), knowledge, p), f


def thread(txn, store, ns: str, thread_id: str):
    return records.thread(txn, store, ns, thread_id)
