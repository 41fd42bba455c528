"""compaction: which ranges are due and what happens to them — issuing compactions after an append, a
summary or a policy change; claims; applying a worker's summary or the extractive fallback; what a pop or a
clear undoes (docs/conversations.md "Compaction policy and the pyramid").

Each function runs inside the caller's transaction (a ``runstate.Tx``): the due event goes into the thread's
event log in the same transaction as the compaction, and ``tx.touched`` gets ``(ns, "")`` so that claim waits
of the namespace wake after the commit.
"""
from __future__ import annotations

from ..state import conversations, convpolicy, convtimers, runstate, summaries
from ..state.convpolicy import Policy
from ..state.runstate import Tx
from ..storage import records, valuetext
from ..storage.layout import CompactionRec, EventRec, SummaryRec
from ..storage import layout

DUE, APPLIED, CANCELLED = "agentstate.compaction.due", "agentstate.compaction.applied", \
    "agentstate.compaction.cancelled"
KIND_LABELS = {conversations.MESSAGE: "message", conversations.TOOL_CALL: "tool_call",
               conversations.TOOL_RESULT: "tool_result", conversations.REASONING: "reasoning",
               conversations.SUMMARY: "summary", conversations.TOOL_DEFINITION: "tool_definition",
               conversations.OTHER: "other"}


def claim_key(ns: str) -> tuple[str, str]:
    """The Hub key claim waits of a namespace wait on (thread ids are never empty)."""
    return (ns, "")


def _event(tx: Tx, ns: str, thread_id: str, tkey: int, type_: str, now: int, **data) -> int:
    return tx.append_event(ns, thread_id, tkey, EventRec(layout.FORMAT_VERSION, "", "", type_,
                                                         runstate.encode_obj(data), "", now))


def _issue(tx: Tx, ns: str, thread_id: str, tkey: int, p: Policy, level: int, first: int, last: int,
           content_hash: bytes, input_count: int, children: list[int], now: int,
           out: list) -> None:
    sid = summaries.make_id(level, first, last)
    seq = _event(tx, ns, thread_id, tkey, DUE, now, compaction_id=sid, level=level, first_seq=first,
                 last_seq=last, content_hash=content_hash)
    fallback_us = now + p.fallback_after_ms * 1000 if p.fallback_after_ms else 0
    rec = summaries.issue(tx.txn, tx.store, ns, thread_id, tkey, level, first, last, content_hash, input_count,
                          children, now, fallback_us, p.max_summary_chars, seq)
    if fallback_us:
        convtimers.schedule_fallback(tx.txn, tx.store, ns, thread_id, tkey, level, first, 0, fallback_us)
    tx.touched.add(claim_key(ns))
    out.append((level, first, rec))
    if not fallback_us:  # fallback_after = 0: the fallback applies in this transaction
        apply_fallback(tx, ns, thread_id, tkey, level, first, rec, now, p, cascade=False)


def make_due(tx: Tx, ns: str, thread_id: str, tkey: int, now: int) -> list[tuple[int, int, CompactionRec]]:
    """Issue every compaction the thread's log makes due now (level 1, then the pyramid, until nothing more
    is due); returns [(level, first_seq, record)] in the order issued."""
    txn, store = tx.txn, tx.store
    p, _, _ = convpolicy.compaction(txn, store, ns, tkey)
    out: list = []
    if p.disabled:
        return out
    while True:
        before = len(out)
        _due_level1(tx, ns, thread_id, tkey, p, now, out)
        for level in range(2, p.max_levels + 1):
            _due_level(tx, ns, thread_id, tkey, p, level, now, out)
        if len(out) == before:
            return out


def _due_level1(tx: Tx, ns: str, thread_id: str, tkey: int, p: Policy, now: int, out: list) -> None:
    txn, store = tx.txn, tx.store
    pyr = summaries.pyramid(txn, store, tkey)
    h = summaries.high_water(pyr, 1)
    st = conversations.state(txn, store, tkey)
    if st is None or not st.last_seq:
        return
    u = list(conversations.items_from(txn, store, tkey, h + 1, st.last_seq))
    if len(u) < p.trigger_items:
        return
    blocks = conversations.blocks(u, p.trigger_items)
    block_of = {}
    for b, (s, e, _) in enumerate(blocks):
        for i in range(s, e + 1):
            block_of[i] = b
    start = 0
    while len(u) - start >= p.trigger_items:
        e = start + p.compact_items - 1
        bs, be, _ = blocks[block_of[e]]
        if e != be:
            e = bs - 1
        if e < start:  # the first block is longer than the range
            bs, be, has_open = blocks[block_of[start]]
            if has_open or len(u) - 1 - be < p.keep_last_items:
                return
            e = be
        rng = u[start:e + 1]
        first, last = rng[0][0], rng[-1][0]
        content_hash = summaries.items_hash(first, last, [(s, r.content_hash) for s, r in rng])
        summaries.set_high_water(txn, store, tkey, pyr, 1, last)
        _issue(tx, ns, thread_id, tkey, p, 1, first, last, content_hash, len(rng), [], now, out)
        start = e + 1


def _next_live(txn, store, tkey: int, after: int) -> int:
    for seq, _ in conversations.items_from(txn, store, tkey, after + 1, 2**64 - 1):
        return seq
    return 0


def _due_level(tx: Tx, ns: str, thread_id: str, tkey: int, p: Policy, level: int, now: int, out: list) -> None:
    txn, store = tx.txn, tx.store
    pyr = summaries.pyramid(txn, store, tkey)
    h = summaries.high_water(pyr, level)
    run: list[tuple[int, SummaryRec]] = []
    expect = _next_live(txn, store, tkey, h)
    for _, first, rec in summaries.summaries_of(txn, store, tkey, level - 1, h):
        if first != expect:
            break
        run.append((first, rec))
        expect = _next_live(txn, store, tkey, rec.last_seq)
    while len(run) >= p.pyramid_fan_in + p.pyramid_keep_last:
        take, run = run[:p.pyramid_fan_in], run[p.pyramid_fan_in:]
        first, last = take[0][0], take[-1][1].last_seq
        content_hash = summaries.summaries_hash(level, first, last, [
            (summaries.make_id(level - 1, f, r.last_seq), r.text) for f, r in take])
        summaries.set_high_water(txn, store, tkey, pyr, level, last)
        _issue(tx, ns, thread_id, tkey, p, level, first, last, content_hash, len(take), [f for f, _ in take], now,
               out)


def inputs(txn, store, tkey: int, level: int, first: int, rec: CompactionRec):
    """A compaction's inputs: [(seq, ItemRec)] of a level-1 range, [(id, SummaryRec)] of a higher one."""
    if level == 1:
        return list(conversations.items_from(txn, store, tkey, first, rec.last_seq))
    out = []
    for f in rec.children:
        s = summaries.summary(txn, store, tkey, level - 1, f)
        if s is not None:
            out.append((summaries.make_id(level - 1, f, s.last_seq), s))
    return out


def _covered(txn, store, tkey: int, level: int, first: int, rec: CompactionRec) -> tuple[int, int]:
    """(item count, Σ raw) of the original items a compaction covers (from the running sums)."""
    if level == 1:
        items = list(conversations.items_from(txn, store, tkey, first, rec.last_seq))
        return len(items), sum(r.raw for _, r in items)
    n = raw = 0
    for f in rec.children:
        s = summaries.summary(txn, store, tkey, level - 1, f)
        if s is not None:
            n, raw = n + s.item_count, raw + s.covered_raw
    return n, raw


def _apply(tx: Tx, ns: str, thread_id: str, tkey: int, level: int, first: int, rec: CompactionRec, text: str,
           producer: str, fallback: bool, tokens, lease_id: str, now: int) -> SummaryRec:
    txn, store = tx.txn, tx.store
    count, covered = _covered(txn, store, tkey, level, first, rec)
    s = summaries.new_summary(level, rec.last_seq, count, text, producer, fallback, tokens, rec.content_hash,
                              covered, list(rec.children), now, rec.attempts, lease_id)
    summaries.apply(txn, store, tkey, level, first, s)
    summaries.end_compaction(txn, store, ns, tkey, level, first, rec)
    if rec.fallback_us:
        convtimers.schedule_fallback(txn, store, ns, thread_id, tkey, level, first, rec.fallback_us, 0)
    _event(tx, ns, thread_id, tkey, APPLIED, now, compaction_id=summaries.make_id(level, first, rec.last_seq),
           producer=producer, fallback=fallback)
    return s


def submit(tx: Tx, ns: str, thread_id: str, tkey: int, level: int, first: int, last: int, lease_id: str,
           text: str, content_hash: bytes, producer: str, tokens, now: int,
           ) -> tuple[SummaryRec, list[tuple[int, int, CompactionRec]]]:
    """SubmitSummary's checks and, when they pass, the summary applied and the next level's compactions."""
    done, rec = summaries.check_submit(tx.txn, tx.store, tkey, level, first, last, lease_id, text, content_hash)
    if done is not None:
        return done, []
    s = _apply(tx, ns, thread_id, tkey, level, first, rec, text, producer, False, tokens, lease_id, now)
    return s, make_due(tx, ns, thread_id, tkey, now)


def apply_fallback(tx: Tx, ns: str, thread_id: str, tkey: int, level: int, first: int, rec: CompactionRec,
                   now: int, p: Policy | None = None, cascade: bool = True) -> SummaryRec:
    """The server's extractive summary of a compaction (docs/conversations.md "The fallback summary")."""
    txn, store = tx.txn, tx.store
    if p is None:
        p, _, _ = convpolicy.compaction(txn, store, ns, tkey)
    lines = []
    for key, r in inputs(txn, store, tkey, level, first, rec):
        if level == 1:
            label = r.role or KIND_LABELS.get(r.kind, "other")
            if r.tool_name:
                label += f"({r.tool_name})"
            lines.append((label, valuetext.text_of(r.compact if r.compact is not None else r.inline)))
        else:
            lines.append(("", r.text))
    text = summaries.fallback_text(lines, rec.max_summary_chars)
    s = _apply(tx, ns, thread_id, tkey, level, first, rec, text, summaries.FALLBACK_PRODUCER, True, None, "", now)
    if cascade:
        make_due(tx, ns, thread_id, tkey, now)
    return s


def fallback_job(tx: Tx, due_us: int, ns: str, thread_id: str, level: int, first: int, tkey: int) -> bool:
    """The sweeper's job for one due fallback row: applies the fallback if the compaction is still pending."""
    txn, store = tx.txn, tx.store
    convtimers.schedule_fallback(txn, store, ns, thread_id, tkey, level, first, due_us, 0)
    trec = records.thread(txn, store, ns, thread_id)
    if trec is None or trec.tkey != tkey:
        return False
    rec = summaries.compaction(txn, store, tkey, level, first)
    if rec is None or rec.fallback_us != due_us:
        return False
    rec.fallback_us = 0  # its row is gone already
    apply_fallback(tx, ns, thread_id, tkey, level, first, rec, store.clock())
    return True


def after_pop(tx: Tx, ns: str, thread_id: str, tkey: int, seq: int, now: int) -> tuple[list[str], list[str]]:
    """What popping item ``seq`` (the newest) undoes: (removed summary ids, cancelled compaction ids). Every
    summary and pending compaction reaching ``seq`` goes; each level's high-water seq moves back before it."""
    txn, store = tx.txn, tx.store
    pyr = summaries.pyramid(txn, store, tkey)
    removed, cancelled = [], []
    for level, first, s in list(summaries.summaries_of(txn, store, tkey)):
        if s.last_seq >= seq:
            summaries.remove_summary(txn, store, tkey, level, first)
            removed.append(summaries.make_id(level, first, s.last_seq))
            summaries.set_high_water(txn, store, tkey, pyr, level, min(summaries.high_water(pyr, level), first - 1))
    for level, first, rec in list(summaries.compactions_of(txn, store, tkey)):
        if rec.last_seq >= seq:
            _cancel(tx, ns, thread_id, tkey, level, first, rec, "pop", now)
            cancelled.append(summaries.make_id(level, first, rec.last_seq))
            summaries.set_high_water(txn, store, tkey, pyr, level, min(summaries.high_water(pyr, level), first - 1))
    return removed, cancelled


def _cancel(tx: Tx, ns: str, thread_id: str, tkey: int, level: int, first: int, rec: CompactionRec, reason: str,
            now: int) -> None:
    summaries.end_compaction(tx.txn, tx.store, ns, tkey, level, first, rec)
    if rec.fallback_us:
        convtimers.schedule_fallback(tx.txn, tx.store, ns, thread_id, tkey, level, first, rec.fallback_us, 0)
    _event(tx, ns, thread_id, tkey, CANCELLED, now, compaction_id=summaries.make_id(level, first, rec.last_seq),
           reason=reason)


def after_clear(tx: Tx, ns: str, thread_id: str, tkey: int, now: int) -> tuple[int, int]:
    """(summaries removed, compactions cancelled) by ClearItems."""
    txn, store = tx.txn, tx.store
    n_sums = sum(1 for _ in summaries.summaries_of(txn, store, tkey))
    comps = list(summaries.compactions_of(txn, store, tkey))
    for level, first, rec in comps:
        _cancel(tx, ns, thread_id, tkey, level, first, rec, "clear", now)
    summaries.delete_thread_summaries(txn, store, ns, tkey)
    # the pyramid starts again after the cleared items (seqs are never reused)
    st = conversations.state(txn, store, tkey)
    if st is not None:
        pyr = summaries.pyramid(txn, store, tkey)
        summaries.set_high_water(txn, store, tkey, pyr, 1, st.next_seq - 1)
    return n_sums, len(comps)


def delete_thread(txn, store, ns: str, thread_id: str, tkey: int) -> None:
    """Delete a thread's summaries, compactions with their queue and fallback rows, and its own policy."""
    for level, first, rec in summaries.delete_thread_summaries(txn, store, ns, tkey):
        if rec.fallback_us:
            convtimers.schedule_fallback(txn, store, ns, thread_id, tkey, level, first, rec.fallback_us, 0)
    convpolicy.delete_thread_conf(txn, store, tkey)
