"""assembly: ConversationService calls of the context — GetContext, ReportUsage — and the system layer's
pinned items (SetPinnedItem, ListPinnedItems, DeletePinnedItem). The algorithm is ops/assemble.py over the
snapshot ops/context.py reads.
"""
from __future__ import annotations

from agentstate.v1 import conversations_pb2 as cpb
from agentstate.v1 import memory_pb2 as mpb

from .. import limits
from ..errors import ApiError, invalid, limit
from ..ops import assemble
from ..ops import context as ctx_ops
from ..ops.assemble import Src
from ..state import calibration, conversations, pins, schemas, threads
from ..state.runstate import Tx
from ..storage import valuetext
from . import context, validate, wire
from . import memory as memory_api
from .context import Ctx
from .conversations import MAX_U32, _scope, _text, token_count


def _kind(value: int, field: str, default: int | None = None) -> int:
    if not value and default is not None:
        return default
    if value not in conversations.KINDS:
        raise invalid(field, "required (one of the ItemKind values)" if not value else f"unknown kind {value}")
    return value


def _content(msg, field: str) -> bytes:
    if not wire.has_value(msg, "content"):
        raise invalid(field, "required")
    enc = wire.value_encoding(msg.content, field)
    if len(enc) > limits.MAX_PIN_CONTENT_BYTES:
        raise limit("pin_content_bytes", f"{field}: encoded content is {len(enc)} bytes, over "
                    f"{limits.MAX_PIN_CONTENT_BYTES}", field=field)
    return enc


def knowledge_input(k: cpb.KnowledgeItem, i: int) -> Src:
    field = f"knowledge[{i}]"
    label = _text(k.label, f"{field}.label")
    kind = _kind(k.kind, f"{field}.kind", conversations.MESSAGE)
    role = _text(k.role, f"{field}.role")
    content = _content(k, f"{field}.content")
    tokens = token_count(k.tokens, f"{field}.tokens") if k.HasField("tokens") else None
    return Src(kind, role, content, valuetext.estimate(content, role), tokens, label=label)


def memory_query_input(ns: str, q: mpb.MemoryQuery, room: int):
    """The SearchInput of GetContext's memory query (fields named ``memory_query.<field>``); ``room`` is how
    many knowledge items the hits may add."""
    req = mpb.SearchMemoryItemsRequest(namespace=ns, path_prefix=q.path_prefix, order=q.order, limit=q.limit,
                                       refresh_ttl=False)
    if q.HasField("filter"):
        req.filter.CopyFrom(q.filter)
    if q.HasField("vector"):
        req.vector.CopyFrom(q.vector)
    s, _ = memory_api.search_input(ns, req, "memory_query")
    if s.limit > room:
        raise limit("knowledge_items", f"memory_query.limit: knowledge and memory hits are at most "
                    f"{limits.MAX_KNOWLEDGE_ITEMS} items ({room} left)", field="memory_query.limit")
    return s


def memory_hits(m, txn, ns: str, s) -> list:
    """The memory query's hits on the snapshot ``txn`` (errors name ``memory_query.<field>``)."""
    try:
        found, _ = m.search(txn, ns, s, m.clock())
    except ApiError as e:
        field = e.metadata.get("field")
        if not field:
            raise
        md = dict(e.metadata, field=f"memory_query.{field}")
        raise ApiError(e.reason, f"memory_query.{e.message}", **md) from None
    return found


def _hit_src(f) -> Src:
    label = "memory:" + "/".join(f.path) + ":" + f.key
    return Src(conversations.MESSAGE, "", f.value, valuetext.estimate(f.value, ""), None, label=label[:256])


def _set_hit(msg: cpb.ContextMemoryHit, f) -> None:
    msg.path.extend(f.path)
    msg.key, msg.version = f.key, f.rec.version
    if f.score is not None:
        msg.score, msg.field = f.score, f.field


def _item_schemas(txn, store, ns: str, tkey: int, res: assemble.Result, read: int) -> dict[int, tuple]:
    """{index in res.items: (ItemRec, Outcome or None)} of the log items whose content is the stored item's
    (not a deduplicated result's stand-in) and that carry a schema, each migrated to version ``read`` as
    ListItems does (state/schemas.value_on_read: the policy decides; FAIL and NEW_RUN raise)."""
    out: dict[int, tuple] = {}
    for i, o in enumerate(res.items):
        if o.source != cpb.CONTEXT_SOURCE_ITEM or not o.first:
            continue
        rec = conversations.get(txn, store, tkey, o.first)
        if rec is None or not rec.schema or bytes(o.content) != rec.inline:
            continue
        out[i] = (rec, schemas.value_on_read(txn, store, ns, rec.schema, rec.schema_version, read, rec.inline))
    return out


def _fill(out: cpb.GetContextResponse, res: assemble.Result, factor: float, explain: bool,
          hits: list | None = None, first_hit: int = 0, migrated: dict | None = None) -> None:
    for i, o in enumerate(res.items):
        ci = out.items.add(source=o.source, kind=o.kind, role=o.role, call_id=o.call_id, tool_name=o.tool_name,
                           tokens=min(o.tokens, MAX_U32), tokens_estimated=o.estimated, pin_id=o.pin_id,
                           summary_id=o.summary_id, level=o.level, duplicate_of_seq=o.duplicate_of_seq)
        content = o.content
        if migrated and i in migrated:
            rec, outcome = migrated[i]
            ci.schema, ci.schema_version = rec.schema, rec.schema_version
            ci.stored_schema_version = rec.schema_version
            if outcome is not None:
                ci.migration, ci.migration_error, ci.schema_version = outcome.status, outcome.error, \
                    outcome.version
                if outcome.channels is not None:
                    content = outcome.channels  # the migrated map's canonical encoding
        wire.set_value(ci.content, content)
        if o.first:
            ci.items.first_seq, ci.items.last_seq = o.first, o.last
        if o.knowledge_index is not None:
            ci.knowledge_index = o.knowledge_index
            if hits and o.knowledge_index >= first_hit:
                _set_hit(ci.memory_hit, hits[o.knowledge_index - first_hit])
    out.context_hash = res.context_hash
    out.stable_prefix_items = res.stable_prefix
    out.total_tokens, out.estimated_raw_tokens, out.client_counted_tokens = (res.total_tokens, res.estimated_raw,
                                                                             res.client_counted)
    out.calibration_factor = factor
    out.last_seq = res.last_seq
    if not explain:
        return
    for e in res.explanation:
        x = out.explanation.add(fate=e.fate, item_count=e.item_count, tokens=e.tokens, summary_id=e.summary_id,
                                duplicate_of_seq=e.duplicate_of_seq)
        if e.pin_id is not None:
            x.pin_id = e.pin_id
        elif e.knowledge_index is not None:
            x.knowledge_index = e.knowledge_index
            if hits and e.knowledge_index >= first_hit:
                _set_hit(x.memory_hit, hits[e.knowledge_index - first_hit])
        else:
            x.items.first_seq, x.items.last_seq = e.first, e.last
        if e.context_index is not None:
            x.context_index = e.context_index


async def get_context(ctx: Ctx, req: cpb.GetContextRequest) -> cpb.GetContextResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    if not 1 <= req.budget_tokens <= limits.MAX_BUDGET_TOKENS:
        raise invalid("budget_tokens", f"must be from 1 to {limits.MAX_BUDGET_TOKENS}")
    if len(req.knowledge) > limits.MAX_KNOWLEDGE_ITEMS:
        raise limit("knowledge_items", f"knowledge: at most {limits.MAX_KNOWLEDGE_ITEMS} items", field="knowledge")
    knowledge = [knowledge_input(k, i) for i, k in enumerate(req.knowledge)]
    tokenizer = _text(req.tokenizer, "tokenizer")
    keep = None
    if req.HasField("keep_last_items"):
        if req.keep_last_items > 10_000:
            raise invalid("keep_last_items", "at most 10000")
        keep = req.keep_last_items
    if req.tool_compression not in (0, cpb.TOOL_COMPRESSION_OUTSIDE_TAIL, cpb.TOOL_COMPRESSION_NONE):
        raise invalid("tool_compression", f"unknown value {req.tool_compression}")
    if req.knowledge_position not in (0, cpb.KNOWLEDGE_POSITION_AFTER_SUMMARIES, cpb.KNOWLEDGE_POSITION_END):
        raise invalid("knowledge_position", f"unknown value {req.knowledge_position}")
    query = None
    if req.HasField("memory_query"):
        if ctx.memory is None:  # pragma: no cover - every server sets it
            raise ApiError("INTERNAL_ERROR", "memory is not served here")
        query = memory_query_input(ns, req.memory_query, limits.MAX_KNOWLEDGE_ITEMS - len(knowledge))
    hits: list = []
    store = ctx.store
    with store.read() as txn:
        trec = threads.require(txn, store, ns, thread_id)
        if query is not None:
            hits = memory_hits(ctx.memory, txn, ns, query)
            knowledge = knowledge + [_hit_src(f) for f in hits]
        res, factor = ctx_ops.build(txn, store, ns, thread_id, trec.tkey, knowledge, budget=req.budget_tokens,
                                    tokenizer=tokenizer, keep_last=keep,
                                    compress=req.tool_compression != cpb.TOOL_COMPRESSION_NONE,
                                    dedupe=not req.disable_dedupe,
                                    knowledge_at_end=req.knowledge_position == cpb.KNOWLEDGE_POSITION_END)
        # (only when asked: the lookup reads each chosen item again)
        migrated = _item_schemas(txn, store, ns, trec.tkey, res, req.read_schema_version) \
            if req.read_schema_version else None
    out = cpb.GetContextResponse()
    _fill(out, res, factor, not req.omit_explanation, hits, len(req.knowledge), migrated)
    return out


async def report_usage(ctx: Ctx, req: cpb.ReportUsageRequest) -> cpb.ReportUsageResponse:
    ns = validate.namespace(req.namespace)
    thread_id = validate.ident(req.thread_id, "thread_id")
    if len(req.context_hash) != 32:
        raise invalid("context_hash", "must be 32 bytes")
    if req.input_tokens < 1:
        raise invalid("input_tokens", "must be at least 1")
    for name in ("estimated_raw_tokens", "client_counted_tokens", "input_tokens"):
        if getattr(req, name) > 2**62:
            raise invalid(name, "at most 2**62")
    _text(req.model, "model")

    def apply(tx: Tx) -> cpb.ReportUsageResponse:
        trec = threads.require(tx.txn, tx.store, ns, thread_id)
        rec = calibration.report(tx.txn, tx.store, trec.tkey, req.context_hash, req.estimated_raw_tokens,
                                 req.client_counted_tokens, req.input_tokens)
        return cpb.ReportUsageResponse(calibration_factor=rec.factor, reports=len(rec.reports))

    return await context.write(ctx, ns, "ReportUsage", req, cpb.ReportUsageResponse, apply)


# ----------------------------------------------------------------- pinned items

def pin_to_proto(ns: str, thread_id: str, scope: int, pin_id: str, rec, out: cpb.PinnedItem) -> cpb.PinnedItem:
    out.namespace, out.thread_id, out.scope, out.pin_id = ns, thread_id, scope, pin_id
    out.position, out.kind, out.role, out.tool_name = rec.position, rec.kind, rec.role, rec.tool_name
    wire.set_value(out.content, rec.content)
    if rec.tokens is not None:
        out.tokens.count, out.tokens.tokenizer, out.tokens.exact = rec.tokens
    out.estimated_tokens = min(rec.raw, MAX_U32)
    out.etag = pins.etag(rec)
    wire.set_timestamp(out.create_time, rec.created_us)
    wire.set_timestamp(out.update_time, rec.updated_us)
    return out


async def set_pin(ctx: Ctx, req: cpb.SetPinnedItemRequest) -> cpb.SetPinnedItemResponse:
    ns = validate.namespace(req.namespace)
    scope, thread_id = _scope(req)
    pin_id = validate.ident(req.pin_id, "pin_id")
    kind = _kind(req.kind, "kind")
    role = _text(req.role, "role")
    content = _content(req, "content")
    tool_name = _text(req.tool_name, "tool_name")
    tokens = token_count(req.tokens, "tokens") if req.HasField("tokens") else None
    expected = req.expected_etag if req.HasField("expected_etag") else None
    raw = valuetext.estimate(content, role, "", tool_name)

    def apply(tx: Tx) -> cpb.SetPinnedItemResponse:
        tkey = threads.require(tx.txn, tx.store, ns, thread_id).tkey if thread_id else None
        rec, created = pins.set_(tx.txn, tx.store, ns, tkey, pin_id, req.position, kind, role, content, tool_name,
                                 tokens, raw, expected, tx.store.clock())
        resp = cpb.SetPinnedItemResponse(created=created)
        pin_to_proto(ns, thread_id, scope, pin_id, rec, resp.item)
        return resp

    return await context.write(ctx, ns, "SetPinnedItem", req, cpb.SetPinnedItemResponse, apply)


async def list_pins(ctx: Ctx, req: cpb.ListPinnedItemsRequest) -> cpb.ListPinnedItemsResponse:
    ns = validate.namespace(req.namespace)
    scope, thread_id = _scope(req)
    store = ctx.store
    out = cpb.ListPinnedItemsResponse()
    with store.read() as txn:
        if thread_id:
            tkey = threads.require(txn, store, ns, thread_id).tkey
            if req.include_namespace:
                for pin_id, rec in pins.scope(txn, store, ns, None):
                    pin_to_proto(ns, "", cpb.CONFIG_SCOPE_NAMESPACE, pin_id, rec, out.items.add())
            for pin_id, rec in pins.scope(txn, store, ns, tkey):
                pin_to_proto(ns, thread_id, scope, pin_id, rec, out.items.add())
        else:
            for pin_id, rec in pins.scope(txn, store, ns, None):
                pin_to_proto(ns, "", scope, pin_id, rec, out.items.add())
    return out


async def delete_pin(ctx: Ctx, req: cpb.DeletePinnedItemRequest) -> cpb.DeletePinnedItemResponse:
    ns = validate.namespace(req.namespace)
    scope, thread_id = _scope(req)
    pin_id = validate.ident(req.pin_id, "pin_id")

    def apply(tx: Tx) -> cpb.DeletePinnedItemResponse:
        tkey = threads.require(tx.txn, tx.store, ns, thread_id).tkey if thread_id else None
        deleted = pins.delete(tx.txn, tx.store, ns, tkey, pin_id)
        if not deleted and not req.allow_missing:
            raise ApiError("PINNED_ITEM_NOT_FOUND", f"no pinned item {pin_id!r} in this scope", field="pin_id",
                           pin_id=pin_id)
        return cpb.DeletePinnedItemResponse(deleted=deleted)

    return await context.write(ctx, ns, "DeletePinnedItem", req, cpb.DeletePinnedItemResponse, apply)
