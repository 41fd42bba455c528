"""conversations: ConversationService calls on the log — AppendItems, ListItems, GetItems, PopItem, ClearItems,
GetConversation — and the idle policy (SetIdlePolicy, GetIdlePolicy).

Each call validates its whole request first (field paths ``items[3].tokens.tokenizer``; nothing is written
when anything is wrong), then runs the log's rules (state/conversations.py through ops/conversations.py) in
one write transaction answered once per request_id, or reads one MVCC snapshot. Compaction, pinned items,
GetContext and ReportUsage are designed (docs/conversations.md) but not served yet: those RPCs answer
UNIMPLEMENTED.
"""
from __future__ import annotations

from agentstate.v1 import conversations_pb2 as cpb
from google.protobuf import duration_pb2

from .. import limits
from ..errors import ApiError, invalid, limit
from ..ops import conversations as conv_ops
from ..state import calibration, conversations, convpolicy, schemas, summaries, threads
from ..state.conversations import ItemIn
from ..state.runstate import Tx
from ..storage import records
from ..storage.layout import ConvState, ItemRec
from . import context, validate, wire
from .context import Ctx

MAX_U32 = 2**32 - 1


# ----------------------------------------------------------------- validation

def _text(value: str, field: str, max_bytes: int = limits.MAX_ITEM_NAME_BYTES) -> str:
    return validate.text(value, field, max_bytes)


def token_count(tc, field: str) -> tuple[int, str, bool]:
    if tc.count < 1:
        raise invalid(f"{field}.count", "must be at least 1")
    if not tc.tokenizer:
        raise invalid(f"{field}.tokenizer", "must not be empty")
    return tc.count, _text(tc.tokenizer, f"{field}.tokenizer"), tc.exact


def item_input(it: cpb.ItemInput, field: str) -> ItemIn:
    """A client's ItemInput, validated (errors name ``field``.kind and so on)."""
    if it.kind not in conversations.KINDS:
        raise invalid(f"{field}.kind", "required (one of the ItemKind values)" if not it.kind
                      else f"unknown kind {it.kind}")
    role = _text(it.role, f"{field}.role")
    if not wire.has_value(it, "content"):
        raise invalid(f"{field}.content", "required")
    content = wire.value_encoding(it.content, f"{field}.content")
    if len(content) > limits.MAX_ITEM_CONTENT_BYTES:
        raise limit("item_content_bytes", f"{field}.content: encoded content is {len(content)} bytes, over "
                    f"{limits.MAX_ITEM_CONTENT_BYTES}", field=f"{field}.content")
    call_id = validate.ident(it.call_id, f"{field}.call_id", required=False)
    if it.kind == conversations.TOOL_RESULT and not call_id:
        raise invalid(f"{field}.call_id", "a TOOL_RESULT needs the call_id of its TOOL_CALL")
    tool_name = _text(it.tool_name, f"{field}.tool_name")
    client_id = validate.ident(it.client_item_id, f"{field}.client_item_id", required=False)
    run_id = validate.ident(it.run_id, f"{field}.run_id", required=False)
    step_id = validate.ident(it.step_id, f"{field}.step_id", required=False)
    metadata = None
    if it.metadata:
        metadata = wire.metadata_encoding(it.metadata, f"{field}.metadata")
    tokens = token_count(it.tokens, f"{field}.tokens") if it.HasField("tokens") else None
    compact = None
    if wire.has_value(it, "compact"):
        compact = wire.value_encoding(it.compact, f"{field}.compact")
        if len(compact) > limits.MAX_ITEM_COMPACT_BYTES:
            raise limit("item_compact_bytes", f"{field}.compact: encoded compact is {len(compact)} bytes, over "
                        f"{limits.MAX_ITEM_COMPACT_BYTES}", field=f"{field}.compact")
    if len(it.dedupe_key) > limits.MAX_DEDUPE_KEY_BYTES:
        raise invalid(f"{field}.dedupe_key", f"longer than {limits.MAX_DEDUPE_KEY_BYTES} bytes")
    schema = validate.ident(it.schema, f"{field}.schema", required=False)
    if schema and it.schema_version < 1:
        raise invalid(f"{field}.schema_version", "must be at least 1 with a schema")
    return ItemIn(it.kind, role, content, client_id, call_id, tool_name, run_id, step_id, metadata, tokens,
                  compact, it.dedupe_key or None, schema, it.schema_version if schema else 0)


def item_inputs(items, field: str = "items") -> list[ItemIn]:
    if len(items) > limits.MAX_ITEMS_PER_APPEND:
        raise limit("items_per_append", f"{field}: at most {limits.MAX_ITEMS_PER_APPEND} items per call",
                    field=field)
    return [item_input(it, f"{field}[{i}]") for i, it in enumerate(items)]


def _expected(req) -> int | None:
    return req.expected_last_seq if req.HasField("expected_last_seq") else None


# ----------------------------------------------------------------- responses

def item_to_proto(ns: str, thread_id: str, seq: int, rec: ItemRec, out: cpb.ConversationItem,
                  omit_content: bool = False, outcome=None) -> cpb.ConversationItem:
    """``outcome``: state/schemas.value_on_read's for a read that named read_schema_version."""
    out.namespace, out.thread_id, out.seq = ns, thread_id, seq
    out.schema, out.schema_version = rec.schema, rec.schema_version
    out.stored_schema_version = rec.schema_version
    content = rec.inline
    if outcome is not None:
        out.migration, out.migration_error, out.schema_version = outcome.status, outcome.error, outcome.version
        if outcome.channels is not None:
            content = outcome.channels  # the migrated map's canonical encoding
    out.client_item_id, out.kind, out.role = rec.client_item_id, rec.kind, rec.role
    out.call_id, out.tool_name, out.run_id, out.step_id = rec.call_id, rec.tool_name, rec.run_id, rec.step_id
    if not omit_content:
        wire.set_value(out.content, content)
        if rec.compact is not None:
            wire.set_value(out.compact, rec.compact)
    if rec.metadata is not None:
        wire.fill_metadata(out.metadata, rec.metadata)
    if rec.tokens is not None:
        out.tokens.count, out.tokens.tokenizer, out.tokens.exact = rec.tokens
    if rec.dedupe_key:
        out.dedupe_key = rec.dedupe_key
    out.content_hash = rec.content_hash
    out.estimated_tokens = min(rec.raw, MAX_U32)
    wire.set_timestamp(out.create_time, rec.created_us)
    return out


def _duration(out: duration_pb2.Duration, ms: int) -> None:
    out.seconds, rest = divmod(ms, 1000)
    out.nanos = rest * 1_000_000


def idle_to_proto(ttl_ms: int, action: int, out: cpb.IdlePolicy) -> cpb.IdlePolicy:
    if ttl_ms:
        _duration(out.ttl, ttl_ms)
    out.action = action or cpb.IDLE_ACTION_CLOSE
    return out


def compaction_to_proto(ns: str, thread_id: str, level: int, first: int, rec, now: int,
                        out: cpb.Compaction) -> cpb.Compaction:
    out.namespace, out.thread_id = ns, thread_id
    out.compaction_id = summaries.make_id(level, first, rec.last_seq)
    out.level, out.first_seq, out.last_seq, out.input_count = level, first, rec.last_seq, rec.input_count
    out.content_hash = rec.content_hash
    held = bool(rec.lease_id) and rec.lease_expires_us > now
    out.state = cpb.COMPACTION_STATE_CLAIMED if held else cpb.COMPACTION_STATE_PENDING
    out.worker, out.attempts = rec.worker, rec.attempts
    wire.set_timestamp(out.due_time, rec.due_us)
    if rec.fallback_us:
        wire.set_timestamp(out.fallback_time, rec.fallback_us)
    if held:
        wire.set_timestamp(out.lease_expire_time, rec.lease_expires_us)
    out.max_summary_chars = rec.max_summary_chars
    out.due_event_sequence = rec.due_event_seq
    return out


def summary_to_proto(ns: str, thread_id: str, level: int, first: int, rec, out: cpb.Summary,
                     txn=None, store=None, tkey: int = 0) -> cpb.Summary:
    """A Summary message (its child ids read through ``txn`` when given)."""
    out.namespace, out.thread_id = ns, thread_id
    out.summary_id = summaries.make_id(level, first, rec.last_seq)
    out.level, out.first_seq, out.last_seq, out.item_count = level, first, rec.last_seq, rec.item_count
    if txn is not None and level > 1:
        for f in rec.children:
            child = summaries.summary(txn, store, tkey, level - 1, f)
            if child is not None:
                out.child_ids.append(summaries.make_id(level - 1, f, child.last_seq))
    out.text, out.producer, out.fallback = rec.text, rec.producer, rec.fallback
    if rec.tokens is not None:
        out.tokens.count, out.tokens.tokenizer, out.tokens.exact = rec.tokens
    out.estimated_tokens = min(rec.raw, MAX_U32)
    out.content_hash = rec.content_hash
    out.covered_estimated_tokens = rec.covered_raw
    wire.set_timestamp(out.create_time, rec.created_us)
    return out


def policy_to_proto(p: convpolicy.Policy, out: cpb.CompactionPolicy) -> cpb.CompactionPolicy:
    out.disabled = p.disabled
    for name in ("trigger_items", "compact_items", "keep_last_items", "max_summary_chars", "pyramid_fan_in",
                 "pyramid_keep_last", "max_levels", "max_compact_chars"):
        setattr(out, name, getattr(p, name))
    _duration(out.fallback_after, p.fallback_after_ms)
    _duration(out.lease_timeout, p.lease_timeout_ms)
    return out


def own_policy_to_proto(values: tuple, out: cpb.CompactionPolicy) -> cpb.CompactionPolicy:
    """A scope's own policy as set (unset fields stay unset)."""
    d = dict(zip(convpolicy.FIELDS, values))
    out.disabled = bool(d["disabled"])
    for name in ("trigger_items", "compact_items", "keep_last_items", "max_summary_chars", "pyramid_fan_in",
                 "pyramid_keep_last", "max_levels", "max_compact_chars"):
        if d[name] is not None:
            setattr(out, name, d[name])
    if d["fallback_after_ms"] is not None:
        _duration(out.fallback_after, d["fallback_after_ms"])
    if d["lease_timeout_ms"] is not None:
        _duration(out.lease_timeout, d["lease_timeout_ms"])
    return out


def conversation_to_proto(txn, store, ns: str, thread_id: str, rec, st: ConvState | None,
                          out: cpb.Conversation) -> cpb.Conversation:
    out.namespace, out.thread_id = ns, thread_id
    if st is not None:
        out.item_count, out.first_seq, out.last_seq, out.estimated_tokens = (st.count, st.first_seq, st.last_seq,
                                                                              st.cum_raw)
    out.closed = records.idle_state(txn, store, ns, rec) == records.IDLE_CLOSE
    if rec.last_active_us:
        wire.set_timestamp(out.last_active_time, rec.last_active_us)
    ttl, action, source = records.idle_policy(txn, store, ns, rec)
    idle_to_proto(ttl, action, out.idle_policy)
    out.idle_policy_source = source
    expiry = records.expire_us(txn, store, ns, rec)
    if expiry:
        wire.set_timestamp(out.expire_time, expiry)
    out.calibration_factor = calibration.factor(txn, store, rec.tkey)
    out.summary_count = sum(1 for _ in summaries.summaries_of(txn, store, rec.tkey))
    out.pending_compactions = sum(1 for _ in summaries.compactions_of(txn, store, rec.tkey))
    p, out.compaction_policy_source, _ = convpolicy.compaction(txn, store, ns, rec.tkey)
    policy_to_proto(p, out.compaction_policy)
    return out


# ----------------------------------------------------------------- calls

async def append(ctx: Ctx, req: cpb.AppendItemsRequest) -> cpb.AppendItemsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    run_id = validate.ident(req.run_id, "run_id", required=False)
    if req.lease_id and not run_id:
        raise invalid("run_id", "is required with lease_id")
    if run_id:
        validate.ident(req.lease_id, "lease_id")
    checked = item_inputs(req.items)
    metadata = wire.metadata_encoding(req.thread_metadata, "thread_metadata") if req.thread_metadata else None
    durability = wire.durability(req.durability)
    expected = _expected(req)

    def apply(tx: Tx) -> cpb.AppendItemsResponse:
        got, st, created, due = conv_ops.append(tx, ns, thread_id, checked, expected_last_seq=expected,
                                           create=req.create_thread, metadata=metadata, reopen=req.reopen,
                                           run_id=run_id, lease_id=req.lease_id)
        resp = cpb.AppendItemsResponse(last_seq=st.last_seq, created=created)
        for seq, rec, dup in got:  # with read_schema_version a FAIL policy raises here: nothing is appended
            item_to_proto(ns, thread_id, seq, rec, resp.items.add(), omit_content=True,
                          outcome=_migrated(tx.txn, tx.store, ns, rec, req))
            resp.duplicates += dup
        for level, first, rec in due:
            compaction_to_proto(ns, thread_id, level, first, rec, tx.store.clock(), resp.compactions_due.add())
        return resp

    return await context.write(ctx, ns, "AppendItems", req, cpb.AppendItemsResponse, apply, durability)


def _thread(txn, store, ns: str, thread_id: str):
    return threads.require(txn, store, ns, thread_id)


def _migrated(txn, store, ns: str, item: ItemRec, req):
    """The migration of an item's content a read's read_schema_version asks for (None: not asked)."""
    if not req.read_schema_version:
        return None
    return schemas.value_on_read(txn, store, ns, item.schema, item.schema_version, req.read_schema_version,
                                 item.inline)


async def list_(ctx: Ctx, req: cpb.ListItemsRequest) -> cpb.ListItemsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    if req.end_seq and req.end_seq < req.start_seq:
        raise invalid("end_seq", f"{req.end_seq} is less than start_seq {req.start_seq}")
    size = validate.page_size(req.page_size)
    store = ctx.store
    out = cpb.ListItemsResponse()
    with store.read() as txn:
        rec = _thread(txn, store, ns, thread_id)
        fp = wire.fingerprint("items", ns, thread_id, rec.tkey, req.start_seq, req.end_seq, req.latest,
                              req.omit_content)
        position = wire.read_token(req.page_token, fp)
        st = conversations.state(txn, store, rec.tkey)
        if st is not None:
            out.last_seq, out.item_count = st.last_seq, st.count
        if position is not None:
            first, last = position
        else:
            first = max(req.start_seq, 1)
            last = req.end_seq or (st.last_seq if st is not None else 0)
            if req.latest and last >= first:
                first = conversations.nth_newest(txn, store, rec.tkey, first, last, req.latest) or last + 1
        n = 0
        if st is not None and last >= first:
            for seq, item in conversations.items_from(txn, store, rec.tkey, first, last):
                if n == size:
                    out.next_page_token = wire.make_token(fp, (seq, last))
                    break
                item_to_proto(ns, thread_id, seq, item, out.items.add(), req.omit_content,
                              _migrated(txn, store, ns, item, req))
                n += 1
    return out


async def get(ctx: Ctx, req: cpb.GetItemsRequest) -> cpb.GetItemsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    if len(req.seqs) + len(req.client_item_ids) > limits.MAX_ITEM_IDS_PER_GET:
        raise invalid("seqs", f"at most {limits.MAX_ITEM_IDS_PER_GET} seqs and client_item_ids in all")
    ids = [validate.ident(v, f"client_item_ids[{i}]") for i, v in enumerate(req.client_item_ids)]
    for i, seq in enumerate(req.seqs):
        if seq < 1:
            raise invalid(f"seqs[{i}]", "a seq is at least 1")
    store = ctx.store
    out = cpb.GetItemsResponse()
    with store.read() as txn:
        rec = _thread(txn, store, ns, thread_id)
        for i, seq in enumerate(req.seqs):
            item = conversations.get(txn, store, rec.tkey, seq)
            if item is None:
                if not req.allow_missing:
                    raise ApiError("ITEM_NOT_FOUND", f"thread {thread_id!r} has no item with seq {seq}",
                                   field=f"seqs[{i}]", seq=seq)
                out.missing_seqs.append(seq)
                continue
            item_to_proto(ns, thread_id, seq, item, out.items.add(), req.omit_content,
                          _migrated(txn, store, ns, item, req))
        for i, cid in enumerate(ids):
            seq = conversations.seq_of_client_id(txn, store, rec.tkey, cid)
            item = None if seq is None else conversations.get(txn, store, rec.tkey, seq)
            if item is None:
                if not req.allow_missing:
                    raise ApiError("ITEM_NOT_FOUND", f"thread {thread_id!r} has no item with client_item_id "
                                   f"{cid!r}", field=f"client_item_ids[{i}]", client_item_id=cid)
                out.missing_client_item_ids.append(cid)
                continue
            item_to_proto(ns, thread_id, seq, item, out.items.add(), req.omit_content,
                          _migrated(txn, store, ns, item, req))
    return out


async def pop(ctx: Ctx, req: cpb.PopItemRequest) -> cpb.PopItemResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    durability = wire.durability(req.durability)
    expected = _expected(req)

    garbage = []

    def apply(tx: Tx) -> cpb.PopItemResponse:
        seq, rec, st, removed, cancelled = conv_ops.pop(tx, ns, thread_id, expected)
        resp = cpb.PopItemResponse(last_seq=st.last_seq, removed_summaries=removed,
                                   cancelled_compactions=cancelled)
        if rec is not None:
            item_to_proto(ns, thread_id, seq, rec, resp.item)
            if rec.node is not None:
                garbage.append(rec.node)
        return resp

    resp = await context.write(ctx, ns, "PopItem", req, cpb.PopItemResponse, apply, durability)
    if garbage and ctx.on_garbage is not None:  # the popped content's node may be unreachable now
        ctx.on_garbage()
    return resp


async def clear(ctx: Ctx, req: cpb.ClearItemsRequest) -> cpb.ClearItemsResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    durability = wire.durability(req.durability)
    expected = _expected(req)

    garbage = []

    def apply(tx: Tx) -> cpb.ClearItemsResponse:
        items, sums, comps, had_nodes = conv_ops.clear(tx, ns, thread_id, expected)
        if had_nodes:
            garbage.append(True)
        return cpb.ClearItemsResponse(cleared_items=items, cleared_summaries=sums, cancelled_compactions=comps)

    resp = await context.write(ctx, ns, "ClearItems", req, cpb.ClearItemsResponse, apply, durability)
    if garbage and ctx.on_garbage is not None:  # the cleared contents' nodes may be unreachable now
        ctx.on_garbage()
    return resp


async def get_conversation(ctx: Ctx, req: cpb.GetConversationRequest) -> cpb.GetConversationResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    store = ctx.store
    out = cpb.GetConversationResponse()
    with store.read() as txn:
        rec = _thread(txn, store, ns, thread_id)
        st = conversations.state(txn, store, rec.tkey)
        conversation_to_proto(txn, store, ns, thread_id, rec, st, out.conversation)
    return out


# ----------------------------------------------------------------- idle policy

def _scope(req) -> tuple[int, str]:
    if req.scope == cpb.CONFIG_SCOPE_NAMESPACE:
        if req.thread_id:
            raise invalid("thread_id", "must be empty for CONFIG_SCOPE_NAMESPACE")
        return req.scope, ""
    if req.scope == cpb.CONFIG_SCOPE_THREAD:
        return req.scope, validate.ident(req.thread_id, "thread_id")
    raise invalid("scope", "required (CONFIG_SCOPE_NAMESPACE or CONFIG_SCOPE_THREAD)" if not req.scope
                  else f"unknown scope {req.scope}")


def idle_policy_input(p: cpb.IdlePolicy, field: str, thread_scope: bool) -> tuple[int, int]:
    if p.action not in (cpb.IDLE_ACTION_UNSPECIFIED, cpb.IDLE_ACTION_CLOSE, cpb.IDLE_ACTION_DELETE):
        raise invalid(f"{field}.action", f"unknown action {p.action}")
    ttl = p.ttl
    if ttl.seconds < 0 or ttl.nanos < 0 or ttl.nanos >= 1_000_000_000:
        raise invalid(f"{field}.ttl", "must be a positive duration")
    ms = ttl.seconds * 1000 + ttl.nanos // 1_000_000
    if ms == 0 and ttl.nanos == 0:
        if not thread_scope:
            raise invalid(f"{field}.ttl", "a namespace's policy needs a ttl (clear removes the policy)")
        return 0, p.action or cpb.IDLE_ACTION_CLOSE  # a thread that never expires, whatever its namespace says
    if not limits.MIN_IDLE_TTL_MS <= ms <= limits.MAX_IDLE_TTL_MS:
        raise invalid(f"{field}.ttl", "must be from 1 s to 365 days")
    return ms, p.action or cpb.IDLE_ACTION_CLOSE


async def set_idle(ctx: Ctx, req: cpb.SetIdlePolicyRequest) -> cpb.SetIdlePolicyResponse:
    ns = validate.namespace(req.namespace)
    scope, thread_id = _scope(req)
    policy = None
    if not req.clear:
        if not req.HasField("policy"):
            raise invalid("policy", "required unless clear")
        policy = idle_policy_input(req.policy, "policy", scope == cpb.CONFIG_SCOPE_THREAD)

    def apply(tx: Tx) -> cpb.SetIdlePolicyResponse:
        txn, store = tx.txn, tx.store
        resp = cpb.SetIdlePolicyResponse()
        if scope == cpb.CONFIG_SCOPE_NAMESPACE:
            convpolicy.set_ns_idle(txn, store, ns, policy)
            if policy is None:
                resp.source = records.SOURCE_DEFAULT
                idle_to_proto(0, 0, resp.effective)
            else:
                resp.source = records.SOURCE_NAMESPACE
                idle_to_proto(*policy, resp.effective)
            return resp
        rec = threads.require(txn, store, ns, thread_id)
        convpolicy.set_thread_idle(txn, store, ns, thread_id, rec, policy)
        conv_ops.place_timer(txn, store, ns, thread_id, rec)
        ttl, action, resp.source = records.idle_policy(txn, store, ns, rec)
        idle_to_proto(ttl, action, resp.effective)
        return resp

    try:
        return await context.write(ctx, ns, "SetIdlePolicy", req, cpb.SetIdlePolicyResponse, apply)
    finally:
        ctx.store.ns_idle_cache.pop(ns, None)  # a read racing the write may have cached the old policy


async def get_idle(ctx: Ctx, req: cpb.GetIdlePolicyRequest) -> cpb.GetIdlePolicyResponse:
    ns = validate.namespace(req.namespace)
    scope, thread_id = _scope(req)
    store = ctx.store
    out = cpb.GetIdlePolicyResponse()
    with store.read() as txn:
        if scope == cpb.CONFIG_SCOPE_NAMESPACE:
            conf = convpolicy.ns_conf(txn, store, ns)
            if conf is not None and conf.idle is not None:
                idle_to_proto(*conf.idle, out.policy)
                idle_to_proto(*conf.idle, out.effective)
                out.source = records.SOURCE_NAMESPACE
            else:
                idle_to_proto(0, 0, out.effective)
                out.source = records.SOURCE_DEFAULT
            return out
        rec = threads.require(txn, store, ns, thread_id)
        if rec.idle_ttl_ms >= 0:
            idle_to_proto(rec.idle_ttl_ms, rec.idle_action, out.policy)
        ttl, action, out.source = records.idle_policy(txn, store, ns, rec)
        idle_to_proto(ttl, action, out.effective)
    return out
