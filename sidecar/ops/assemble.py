"""assemble: GetContext's algorithm over plain values (docs/conversations.md "Context assembly", steps 1-9).

No LMDB, no protobuf: ops/context.py reads one snapshot into these dataclasses, api/assembly.py turns the
result into a GetContextResponse. So the rules are property-tested directly (tests/test_context.py).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import msgspec
from blake3 import blake3

from ..errors import ApiError
from ..state.conversations import REASONING, SUMMARY, TOOL_CALL, TOOL_RESULT, blocks
from ..storage import valuetext

# agentstate.v1.ContextSource and Fate (tests/test_layers.py checks the numbers)
PINNED, FROM_SUMMARY, ITEM, COMPRESSED, KNOWLEDGE = 1, 2, 3, 4, 5
KEPT, SUMMARISED, F_COMPRESSED, DEDUPLICATED, DROPPED_BUDGET, DROPPED_ORPHAN = 1, 2, 3, 4, 5, 6
HASH_PREFIX = b"agentstate.v1 context\x00"
_enc = msgspec.msgpack.Encoder()


@dataclass
class Src:
    """A log item, a pinned item or a knowledge item as GetContext sees it."""

    kind: int
    role: str
    content: bytes  # canonical encoding
    raw: int  # the server's uncalibrated estimate
    tokens: tuple[int, str, bool] | None = None
    seq: int = 0
    call_id: str = ""
    tool_name: str = ""
    compact: bytes | None = None
    dedupe_key: bytes | None = None
    content_hash: bytes = b""
    pin_id: str = ""
    label: str = ""


@dataclass
class Sum:
    level: int
    first: int
    last: int
    text: str
    raw: int
    covered_raw: int
    tokens: tuple[int, str, bool] | None = None
    item_count: int = 0  # live items covered (a summary's range never loses one: a pop into it removes it)


@dataclass
class Params:
    budget: int
    keep_last: int
    trigger_items: int
    max_compact_chars: int
    factor: float = 1.0
    tokenizer: str = ""
    compress: bool = True
    dedupe: bool = True
    knowledge_at_end: bool = False


@dataclass
class Out:
    """One context item."""

    source: int
    kind: int
    role: str
    call_id: str
    tool_name: str
    content: bytes
    tokens: int
    estimated: bool
    pin_id: str = ""
    summary_id: str = ""
    level: int = 0
    first: int = 0
    last: int = 0
    knowledge_index: int | None = None
    duplicate_of_seq: int = 0
    raw: int = 0  # the uncalibrated estimate of this rendered item (what estimated_raw_tokens sums)


@dataclass
class Entry:
    """One explanation entry: a pin, a seq range or a knowledge index."""

    fate: int
    tokens: int
    pin_id: str | None = None
    first: int = 0
    last: int = 0
    knowledge_index: int | None = None
    item_count: int = 1
    context_index: int | None = None
    summary_id: str = ""
    duplicate_of_seq: int = 0


@dataclass
class Result:
    items: list[Out]
    explanation: list[Entry]
    stable_prefix: int
    total_tokens: int
    estimated_raw: int
    client_counted: int
    context_hash: bytes = b""
    last_seq: int = 0
    dropped: list = field(default_factory=list)


def _est(p: Params, raw: int) -> int:
    return math.ceil(p.factor * raw)


def tok(p: Params, s) -> tuple[int, bool]:
    """(tokens, estimated) of a source or summary."""
    t = s.tokens
    if t is not None and (not p.tokenizer or t[1] == p.tokenizer):
        return t[0], False
    return _est(p, s.raw), True


def summary_id(s: Sum) -> str:
    return f"L{s.level}:{s.first}-{s.last}"


def context_hash(items: list[Out]) -> bytes:
    body = [[o.source, o.kind, o.role, o.call_id, o.tool_name, msgspec.Raw(o.content)] for o in items]
    return blake3(HASH_PREFIX + _enc.encode(body)).digest()


def _cover(live: list[Src], sums: list[Sum], t: float) -> list[Sum]:
    """The cover: top down, the highest-level applied summaries that start at the first live item after the
    last covered seq and end before the tail."""
    by_level: dict[int, list[Sum]] = {}
    for s in sorted(sums, key=lambda s: (s.level, s.first)):
        by_level.setdefault(s.level, []).append(s)
    seqs = [x.seq for x in live]

    def next_live(c: int) -> int | None:
        i = bisect.bisect_right(seqs, c)
        return seqs[i] if i < len(seqs) else None

    c = 0
    out: list[Sum] = []
    for level in sorted(by_level, reverse=True):
        for s in by_level[level]:
            if s.first <= c:
                continue
            if s.first != next_live(c) or not s.last < t:
                break
            out.append(s)
            c = s.last
    return out


def tail_start(live: list[Src], p: Params) -> float:
    """Step 3's ``t``: the first seq of the verbatim tail (the newest ``keep_last`` live items extended back to
    the start of their block), infinity when ``keep_last`` is 0."""
    if p.keep_last <= 0 or not live:
        return math.inf
    oldest = max(len(live) - p.keep_last, 0)
    for bs, be, _ in blocks([(x.seq, x) for x in live], p.trigger_items):
        if bs <= oldest <= be:
            return live[bs].seq
    return math.inf


def assemble(live: list[Src], sums: list[Sum], pins: list[Src], knowledge: list[Src], p: Params) -> Result:
    """Steps 2-9 over one snapshot: ``live`` the live items oldest first, ``sums`` the applied summaries,
    ``pins`` the system layer in context order, ``knowledge`` the request's in request order."""
    t = tail_start(live, p)
    cover = _cover(live, sums, t)
    c = cover[-1].last if cover else 0
    return assemble_from([x for x in live if x.seq > c], cover, t, pins, knowledge, p,
                         live[-1].seq if live else 0)


def assemble_from(unc: list[Src], cover: list[Sum], t: float, pins: list[Src], knowledge: list[Src], p: Params,
                  last_seq: int) -> Result:
    """Steps 4-9 from the tail's first seq ``t``, the cover and the uncovered items (the live items after the
    cover): all that ops/context.py reads of a long log."""
    # step 4: orphans, compression, dedupe over the uncovered items
    fate: dict[int, int] = {}
    calls = {x.call_id: i for i, x in enumerate(unc) if x.kind == TOOL_CALL and x.call_id}
    results: dict[str, list[int]] = {}
    for i, x in enumerate(unc):
        if x.kind == TOOL_RESULT:
            ci = calls.get(x.call_id)
            if ci is None or ci > i:
                fate[x.seq] = DROPPED_ORPHAN
            else:
                results.setdefault(x.call_id, []).append(i)
    for cid, ci in calls.items():
        if cid not in results:
            fate[unc[ci].seq] = DROPPED_ORPHAN
    rendered: dict[int, Out] = {}  # by the seq of the item that carries it
    carried_by: dict[int, int] = {}  # seq -> seq of the carrying item
    if p.compress:
        for i, x in enumerate(unc):
            if x.kind != TOOL_CALL or x.seq >= t or fate.get(x.seq) == DROPPED_ORPHAN:
                continue
            members = [i] + (results.get(x.call_id, []) if x.call_id else [])
            if any(unc[j].seq >= t for j in members):
                continue
            if i > 0 and unc[i - 1].kind == REASONING and unc[i - 1].seq not in fate:
                members = [i - 1] + members
            arg = valuetext.cut(valuetext.text_of(x.compact if x.compact is not None else x.content),
                                p.max_compact_chars)
            res = valuetext.cut("\n".join(valuetext.text_of(unc[j].compact if unc[j].compact is not None
                                                            else unc[j].content)
                                          for j in results.get(x.call_id, []) if x.call_id),
                                p.max_compact_chars)
            content = _enc.encode({"arguments": arg, "result": res, "tool": x.tool_name})
            raw = valuetext.estimate(content, "", x.call_id, x.tool_name)
            ctoks = _est(p, raw)
            if ctoks < sum(tok(p, unc[j])[0] for j in members):
                seqs = sorted(unc[j].seq for j in members)
                rendered[x.seq] = Out(COMPRESSED, TOOL_CALL, "", x.call_id, x.tool_name, content, ctoks, True,
                                      first=seqs[0], last=seqs[-1], raw=raw)
                for j in members:
                    fate[unc[j].seq] = F_COMPRESSED
                    carried_by[unc[j].seq] = x.seq
    dup_of: dict[int, int] = {}
    stub: dict[int, Out] = {}
    if p.dedupe:
        newest: dict[tuple[int, bytes], int] = {}  # (kind, key) -> seq of the newest verbatim copy so far
        nxt: dict[int, tuple[bytes, int]] = {}
        for x in reversed(unc):
            if x.kind not in (REASONING, TOOL_RESULT) or x.seq in fate:
                continue
            key = x.dedupe_key or x.content_hash
            prev = nxt.get(x.kind)  # the next item of the same kind (in seq order)
            nxt[x.kind] = (key, x.seq)
            if prev is None or prev[0] != key:
                newest[(x.kind, key)] = x.seq
                continue
            keep_seq = newest.get((x.kind, key), prev[1])
            if x.kind == REASONING:
                fate[x.seq] = DEDUPLICATED
                dup_of[x.seq] = keep_seq
            else:
                kept = next(y for y in unc if y.seq == keep_seq)
                content = _enc.encode({"duplicate_of": kept.call_id})
                raw = valuetext.estimate(content, x.role, x.call_id, x.tool_name)
                if _est(p, raw) < tok(p, x)[0]:
                    fate[x.seq] = DEDUPLICATED
                    dup_of[x.seq] = keep_seq
                    stub[x.seq] = Out(ITEM, x.kind, x.role, x.call_id, x.tool_name, content, _est(p, raw), True,
                                      first=x.seq, last=x.seq, duplicate_of_seq=keep_seq, raw=raw)
                else:
                    newest[(x.kind, key)] = x.seq
    for x in unc:
        f = fate.get(x.seq)
        if f is None:
            fate[x.seq] = KEPT
            n, est = tok(p, x)
            o = Out(ITEM, x.kind, x.role, x.call_id, x.tool_name, x.content, n, est, first=x.seq, last=x.seq,
                    raw=x.raw)
            rendered[x.seq] = o
            carried_by[x.seq] = x.seq
        elif f == DEDUPLICATED and x.seq in stub:
            rendered[x.seq] = stub[x.seq]
            carried_by[x.seq] = x.seq
    # units: the system layer, each cover summary, each block of uncovered items
    sys_out = []
    for pin in pins:
        n, est = tok(p, pin)
        sys_out.append(Out(PINNED, pin.kind, pin.role, pin.call_id, pin.tool_name, pin.content, n, est,
                           pin_id=pin.pin_id, raw=pin.raw))
    S = sum(o.tokens for o in sys_out)
    units: list[tuple[list[Out], int, int]] = []  # (items, first seq, last seq of the unit's live items)
    cover_out: list[Out] = []  # the rendered summary of each cover summary, in cover order
    for s in cover:
        n, est = tok(p, s)
        o = Out(FROM_SUMMARY, SUMMARY, "", "", "", _enc.encode(s.text), n, est, summary_id=summary_id(s),
                level=s.level, first=s.first, last=s.last, raw=s.raw)
        cover_out.append(o)
        units.append(([o], s.first, s.last))
    unc_blocks = blocks([(x.seq, x) for x in unc], p.trigger_items) if unc else []
    for bs, be, _ in unc_blocks:
        outs = [rendered[x.seq] for x in unc[bs:be + 1] if x.seq in rendered]
        units.append((outs, unc[bs].seq, unc[be].seq))
    know = []
    for k in knowledge:
        n, est = tok(p, k)
        know.append(Out(KNOWLEDGE, k.kind, k.role, "", "", k.content, n, est, knowledge_index=len(know), raw=k.raw))
    C = sum(o.tokens for u in units for o in u[0])
    N = sum(o.tokens for o in know)
    newest_unit = sum(o.tokens for o in units[-1][0]) if units else 0
    if S + newest_unit > p.budget:
        raise ApiError("CONTEXT_BUDGET_TOO_SMALL", f"the system layer and the newest conversation unit need "
                       f"{S + newest_unit} tokens, the budget is {p.budget}", field="budget_tokens",
                       required_tokens=S + newest_unit)
    kept_know = list(know)
    drop_units = 0
    if S + C + N > p.budget:
        if S + C <= p.budget:
            while kept_know and S + C + sum(o.tokens for o in kept_know) > p.budget:
                kept_know.pop()
        else:
            kept_know = []
            total = C
            while total + S > p.budget and drop_units < len(units) - 1:
                total -= sum(o.tokens for o in units[drop_units][0])
                drop_units += 1
    kept_units = units[drop_units:]
    n_cover_kept = sum(1 for u in kept_units if u[0] and u[0][0].source == FROM_SUMMARY)
    cover_items = [u[0][0] for u in kept_units if u[0] and u[0][0].source == FROM_SUMMARY]
    log_items = [o for u in kept_units if not (u[0] and u[0][0].source == FROM_SUMMARY) for o in u[0]]
    items = sys_out + cover_items
    if not p.knowledge_at_end:
        items += kept_know
    items += log_items
    if p.knowledge_at_end:
        items += kept_know
    index = {id(o): i for i, o in enumerate(items)}
    # the explanation
    expl: list[Entry] = []
    for o in sys_out:
        expl.append(Entry(KEPT, o.tokens, pin_id=o.pin_id, context_index=index[id(o)]))
    dropped_last = units[drop_units - 1][2] if drop_units else 0
    live_entries: list[Entry] = []
    if dropped_last:
        gone_sums = [s for s in cover if s.last <= dropped_last]
        gone = [x for x in unc if x.seq <= dropped_last]
        first = gone_sums[0].first if gone_sums else gone[0].seq
        live_entries.append(Entry(DROPPED_BUDGET, _est(p, sum(s.covered_raw for s in gone_sums) + sum(
            x.raw for x in gone)), first=first, last=dropped_last,
            item_count=sum(s.item_count for s in gone_sums) + len(gone)))
    for s, o in zip(cover, cover_out):
        if s.last <= dropped_last:
            continue
        live_entries.append(Entry(SUMMARISED, _est(p, s.covered_raw), first=s.first, last=s.last,
                                  item_count=s.item_count, context_index=index[id(o)], summary_id=o.summary_id))
    for x in unc:
        if x.seq <= dropped_last:
            continue
        f = fate[x.seq]
        ci = None
        carrier = carried_by.get(x.seq)
        if carrier is not None and carrier in rendered and id(rendered[carrier]) in index:
            ci = index[id(rendered[carrier])]
        e = Entry(f, tok(p, x)[0], first=x.seq, last=x.seq, context_index=ci, duplicate_of_seq=dup_of.get(x.seq, 0))
        prev = live_entries[-1] if live_entries else None
        if (prev is not None and prev.fate == e.fate and prev.context_index == e.context_index
                and not prev.summary_id and prev.duplicate_of_seq == e.duplicate_of_seq
                and prev.fate != DROPPED_BUDGET):
            prev.last, prev.item_count, prev.tokens = x.seq, prev.item_count + 1, prev.tokens + e.tokens
        else:
            live_entries.append(e)
    expl += live_entries
    kept_ids = {id(o) for o in kept_know}
    for o in know:
        expl.append(Entry(KEPT if id(o) in kept_ids else DROPPED_BUDGET, o.tokens, knowledge_index=o.knowledge_index,
                          context_index=index.get(id(o)) if id(o) in kept_ids else None))
    total = sum(o.tokens for o in items)
    client = sum(o.tokens for o in items if not o.estimated)
    est_raw = sum(o.raw for o in items if o.estimated)  # Σ raw of the items counted by estimate
    return Result(items, expl, len(sys_out) + n_cover_kept, total, est_raw, client, context_hash(items), last_seq)

