"""conversations: a thread's conversation log — its items, their seqs, client ids and counters.

Rows (storage/layout.py): ``citems`` ``tkey seq`` -> ItemRec, ``cids`` ``tkey client_item_id`` -> seq,
``ccalls`` ``tkey call_id`` -> seq of the newest TOOL_CALL with that id, ``cstate`` ``tkey`` -> ConvState.
Seqs are given in commit order (``next_seq`` never goes back, not after a pop or a clear); the *last seq*
is the newest live item's. Everything here takes validated values (api/conversations.py) and returns
records; touching the thread record, idle timers and closing live in ops/conversations.py and ops/sweep.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import msgspec

from ..errors import ApiError
from ..storage import hotpath as hp
from ..storage import layout, nodes, records, usage, valuetext
from ..storage.layout import ConvState, ItemRec
from ..storage.store import Store

# agentstate.v1.ItemKind (tests/test_layers.py checks the numbers)
MESSAGE, TOOL_CALL, TOOL_RESULT, REASONING, SUMMARY, TOOL_DEFINITION, OTHER = 1, 2, 3, 4, 5, 6, 7
KINDS = (MESSAGE, TOOL_CALL, TOOL_RESULT, REASONING, SUMMARY, TOOL_DEFINITION, OTHER)
_TABLES = ("citems", "cids", "ccalls")
# Content whose canonical encoding is longer than this is stored in the node store (content-addressed,
# chunked and compressed like checkpoint values, shared by equal contents, reclaimed by GC); shorter content
# stays inline in its ItemRec (one read, no hash-index entry).
INLINE_MAX = 2048


@dataclass
class ItemIn:
    """An item to append, validated (api/conversations.item_input)."""

    kind: int
    role: str
    content: bytes  # canonical encoding
    client_item_id: str = ""
    call_id: str = ""
    tool_name: str = ""
    run_id: str = ""
    step_id: str = ""
    metadata: bytes | None = None  # canonical map, None when empty
    tokens: tuple[int, str, bool] | None = None
    compact: bytes | None = None
    dedupe_key: bytes | None = None
    schema: str = ""  # state/schemas.py
    schema_version: int = 0


def new_state() -> ConvState:
    return ConvState(layout.FORMAT_VERSION, 0, 0, 0, 1, 0, 0)


def state(txn, store: Store, tkey: int) -> ConvState | None:
    raw = txn.get(layout.u64(tkey), db=store.db["cstate"])
    return None if raw is None else layout.convstate_decoder.decode(raw)


def save_state(txn, store: Store, tkey: int, st: ConvState) -> None:
    txn.put(layout.u64(tkey), layout.encode(st), db=store.db["cstate"])


def content_hash(encoding: bytes) -> bytes:
    """The value hash the store gives this content (a value node's, chunked when large)."""
    return hp.value_node(encoding, [])


def load(txn, raw) -> ItemRec:
    """An ItemRec as stored, with ``inline`` holding its content whether inline or a node."""
    rec = layout.item_decoder.decode(raw)
    if rec.node is not None:
        rec.inline = nodes.value_encoding(rec.node, txn.get)
    return rec


def _store_content(txn, store: Store, ns: str, encoding: bytes) -> tuple[bytes, bytes]:
    """(content hash, node id) of content stored as a node of namespace ``ns`` (written once per distinct
    content; sealed in an encrypted namespace)."""
    built: list = []
    h = hp.value_node(encoding, built)
    ids = nodes.write(txn, store, built, {}, [h], ns)
    keep = store.gc_keep
    if keep is not None:
        keep.update(ids.values())
    return h, ids[h]


def get(txn, store: Store, tkey: int, seq: int) -> ItemRec | None:
    raw = txn.get(layout.seq_key(tkey, seq), db=store.db["citems"])
    return None if raw is None else load(txn, raw)


def seq_of_client_id(txn, store: Store, tkey: int, client_item_id: str) -> int | None:
    raw = txn.get(layout.tkey_str_key(tkey, client_item_id), db=store.db["cids"])
    return None if raw is None else layout.read_u64(raw)


def append(txn, store: Store, ns: str, tkey: int, items: list[ItemIn], expected_last_seq: int | None, now: int,
           default_run: str = "") -> tuple[list[tuple[int, ItemRec, bool]], ConvState]:
    """Append ``items`` in order: ([(seq, record, duplicate)] in request order, the log's state after).

    An item whose ``client_item_id`` the log holds (or an earlier item of the same request had) is answered
    with the stored item. With ``expected_last_seq`` the append happens only if the last seq equals it
    (SEQUENCE_MISMATCH otherwise) — unless every item is a duplicate of one stored before the request."""
    st = state(txn, store, tkey) or new_state()
    known = {}
    for it in items:
        if it.client_item_id and it.client_item_id not in known:
            known[it.client_item_id] = seq_of_client_id(txn, store, tkey, it.client_item_id)
    all_dup = bool(items) and all(it.client_item_id and known[it.client_item_id] is not None for it in items)
    if expected_last_seq is not None and not all_dup and expected_last_seq != st.last_seq:
        raise ApiError("SEQUENCE_MISMATCH", f"expected_last_seq is {expected_last_seq}, the thread's last seq is "
                       f"{st.last_seq}", field="expected_last_seq", last_seq=st.last_seq)
    db_items, db_ids, db_calls = store.db["citems"], store.db["cids"], store.db["ccalls"]
    out: list[tuple[int, ItemRec, bool]] = []
    for it in items:
        if it.client_item_id:
            seq = known[it.client_item_id]
            if seq is not None:
                rec = get(txn, store, tkey, seq)
                if rec is not None:
                    out.append((seq, rec, True))
                    continue
        seq = st.next_seq
        call_seq = 0
        if it.kind == TOOL_RESULT and it.call_id:
            raw_call = txn.get(layout.tkey_str_key(tkey, it.call_id), db=db_calls)
            call_seq = 0 if raw_call is None else layout.read_u64(raw_call)
        raw = valuetext.estimate(it.content, it.role, it.call_id, it.tool_name)
        if len(it.content) > INLINE_MAX:
            h, node = _store_content(txn, store, ns, it.content)
            inline = b""
        else:
            h, node, inline = content_hash(it.content), None, it.content
        rec = ItemRec(layout.FORMAT_VERSION, it.kind, it.role, it.client_item_id, it.call_id, it.tool_name,
                      it.run_id or default_run, it.step_id, now,
                      None if it.metadata is None else msgspec.Raw(it.metadata), it.tokens, raw,
                      st.cum_raw + raw, h, inline, it.compact, it.dedupe_key, call_seq, node, it.schema,
                      it.schema_version)
        txn.put(layout.seq_key(tkey, seq), layout.encode(rec), db=db_items)
        rec.inline = it.content
        if it.client_item_id:
            txn.put(layout.tkey_str_key(tkey, it.client_item_id), layout.u64(seq), db=db_ids)
            known[it.client_item_id] = seq
        if it.kind == TOOL_CALL and it.call_id:
            txn.put(layout.tkey_str_key(tkey, it.call_id), layout.u64(seq), db=db_calls)
        st.next_seq = seq + 1
        st.count += 1
        st.cum_raw += raw
        st.last_seq = seq
        if not st.first_seq:
            st.first_seq = seq
        out.append((seq, rec, False))
    save_state(txn, store, tkey, st)
    usage.conversation_added(txn, store, tkey, [(seq, usage.conversation_charge(rec.inline, None if rec.metadata is None
                                                  else bytes(rec.metadata))) for seq, rec, dup in out if not dup])
    return out, st


def items_from(txn, store: Store, tkey: int, first: int, last: int) -> Iterator[tuple[int, ItemRec]]:
    """(seq, record) of the live items with ``first <= seq <= last``, oldest first."""
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["citems"])
    found = cursor.set_range(layout.seq_key(tkey, max(first, 0)))
    while found:
        key = cursor.key()
        if not key.startswith(prefix):
            return
        seq = layout.split_seq_key(key)[1]
        if seq > last:
            return
        yield seq, load(txn, cursor.value())
        found = cursor.next()


def nth_newest(txn, store: Store, tkey: int, first: int, last: int, n: int) -> int:
    """The seq of the ``n``-th newest live item in ``[first, last]`` (the oldest there when it has fewer);
    0 when the range holds none."""
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["citems"])
    end = layout.seq_key(tkey, last + 1) if last < 2**64 - 1 else layout.prefix_end(prefix)
    if end is None or not cursor.set_range(end):
        found = cursor.last()
    else:
        found = cursor.prev()
    seq = 0
    while found and n > 0:
        key = cursor.key()
        if not key.startswith(prefix):
            break
        s = layout.split_seq_key(key)[1]
        if s < first:
            break
        if s <= last:
            seq = s
            n -= 1
        found = cursor.prev()
    return seq


def _newest_before(txn, store: Store, tkey: int, seq: int) -> int:
    """The seq of the newest live item before ``seq`` (0: none)."""
    prefix = layout.tkey_prefix(tkey)
    cursor = txn.cursor(db=store.db["citems"])
    if cursor.set_range(layout.seq_key(tkey, seq)):
        found = cursor.prev()
    else:
        found = cursor.last()
    if not found or not cursor.key().startswith(prefix):
        return 0
    return layout.split_seq_key(cursor.key())[1]


def pop(txn, store: Store, tkey: int, expected_last_seq: int | None) -> tuple[int, ItemRec | None, ConvState]:
    """Remove the newest item: (its seq, its record — None when the log is empty —, the state after)."""
    st = state(txn, store, tkey) or new_state()
    if expected_last_seq is not None and expected_last_seq != st.last_seq:
        raise ApiError("SEQUENCE_MISMATCH", f"expected_last_seq is {expected_last_seq}, the thread's last seq is "
                       f"{st.last_seq}", field="expected_last_seq", last_seq=st.last_seq)
    if not st.last_seq:
        return 0, None, st
    seq = st.last_seq
    rec = get(txn, store, tkey, seq)
    txn.delete(layout.seq_key(tkey, seq), db=store.db["citems"])
    if rec.client_item_id:
        txn.delete(layout.tkey_str_key(tkey, rec.client_item_id), db=store.db["cids"])
    if rec.kind == TOOL_CALL and rec.call_id:
        key = layout.tkey_str_key(tkey, rec.call_id)
        raw = txn.get(key, db=store.db["ccalls"])
        if raw is not None and layout.read_u64(raw) == seq:
            txn.delete(key, db=store.db["ccalls"])
    st.count -= 1
    st.cum_raw -= rec.raw
    st.last_seq = _newest_before(txn, store, tkey, seq) if st.count else 0
    if not st.count:
        st.first_seq = 0
    save_state(txn, store, tkey, st)
    usage.conversation_removed(txn, store, tkey, [seq])
    return seq, rec, st


def clear(txn, store: Store, tkey: int, expected_last_seq: int | None) -> tuple[int, ConvState, bool]:
    """Remove every item (seqs go on from where they were): (items removed, the state after, whether any
    removed item's content was a node — garbage for the collector)."""
    st = state(txn, store, tkey) or new_state()
    if expected_last_seq is not None and expected_last_seq != st.last_seq:
        raise ApiError("SEQUENCE_MISMATCH", f"expected_last_seq is {expected_last_seq}, the thread's last seq is "
                       f"{st.last_seq}", field="expected_last_seq", last_seq=st.last_seq)
    n = st.count
    prefix = layout.tkey_prefix(tkey)
    had_nodes = any(layout.item_decoder.decode(raw).node is not None for _, raw in _rows(txn, store, prefix))
    for name in _TABLES:
        records.delete_prefix(txn, store.db[name], prefix)
    st.count = st.first_seq = st.last_seq = st.cum_raw = 0
    save_state(txn, store, tkey, st)
    usage.conversation_removed(txn, store, tkey, None)
    return n, st, had_nodes


def _rows(txn, store: Store, prefix: bytes):
    cursor = txn.cursor(db=store.db["citems"])
    found = cursor.set_range(prefix)
    while found and cursor.key().startswith(prefix):
        yield cursor.key(), cursor.value()
        found = cursor.next()


def set_timer(txn, store: Store, tkey: int, due_us: int) -> None:
    """Remember where the thread's idle row in ctimers is (0: none)."""
    st = state(txn, store, tkey)
    if st is not None and st.timer_us != due_us:
        st.timer_us = due_us
        save_state(txn, store, tkey, st)


def delete_some(txn, store: Store, tkey: int, limit: int) -> int:
    """Delete up to ``limit`` rows of a thread's log (for reclaiming in small jobs); returns how many.
    The state row goes last, once no item is left."""
    n = 0
    prefix = layout.tkey_prefix(tkey)
    for name in _TABLES:
        db = store.db[name]
        cursor = txn.cursor(db=db)
        if not cursor.set_range(prefix):
            continue
        while n < limit and cursor.key().startswith(prefix):
            n += 1
            if not cursor.delete():
                break
        if n >= limit:
            return n
    txn.delete(layout.u64(tkey), db=store.db["cstate"])
    return n


def delete_thread_conversation(txn, store: Store, tkey: int) -> None:
    """Delete a thread's whole log (with its ids, call index and state)."""
    prefix = layout.tkey_prefix(tkey)
    for name in _TABLES:
        records.delete_prefix(txn, store.db[name], prefix)
    txn.delete(layout.u64(tkey), db=store.db["cstate"])


def blocks(items: list[tuple[int, ItemRec]], trigger_items: int) -> list[tuple[int, int, bool]]:
    """The blocks of consecutive live items ``items`` (the log's newest ones, oldest first):
    [(first index, last index, holds an open group)] (docs/conversations.md "Tool-call groups and blocks").

    A group (one call id: its TOOL_CALL and the TOOL_RESULTs after it) binds the items from its call to its last
    result when complete, and to the newest item while open (a call followed by fewer than ``trigger_items``
    items); an orphan binds nothing. A REASONING item binds the item after it."""
    n = len(items)
    reach = list(range(n))  # reach[i]: the last index item i is bound to
    open_at = [False] * n
    calls: dict[str, int] = {}
    last_result: dict[str, int] = {}
    for i, (_, rec) in enumerate(items):
        if rec.call_id:
            if rec.kind == TOOL_CALL:
                calls.setdefault(rec.call_id, i)
            elif rec.kind == TOOL_RESULT and rec.call_id in calls:
                last_result[rec.call_id] = i
        if rec.kind == REASONING and i + 1 < n:
            reach[i] = i + 1
    for cid, ci in calls.items():
        if cid in last_result:
            reach[ci] = max(reach[ci], last_result[cid])
        elif n - 1 - ci < trigger_items:  # open: the tool may still be running
            reach[ci] = n - 1
            open_at[ci] = True
    out = []
    start, end, has_open = 0, -1, False
    for i in range(n):
        end = max(end, reach[i])
        has_open = has_open or open_at[i]
        if i == end:
            out.append((start, end, has_open))
            start, has_open = i + 1, False
    return out
