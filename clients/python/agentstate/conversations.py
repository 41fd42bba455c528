"""conversations: the ConversationService facet of the client (``client.conversations``;
``AsyncClient.conversations`` has the same calls as coroutines, ``list`` as an async iterator).

Build items with :func:`item` (any Python value as content, encoded as everywhere in this client) and read
them back with :func:`item_value`. The log, compaction, pinned items, GetContext and ReportUsage are
served (docs/conversations.md).

    c.conversations.append("chat-1", [item("message", "hi", role="user", client_item_id="m1")],
                           create_thread=True)
    for it in c.conversations.list("chat-1", latest=20):
        print(it.seq, it.role, item_value(it))
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from google.protobuf import duration_pb2

from ._facet import AsyncFacet, Call, SyncFacet, listing, pages, unary
from .values import check_key, encode_into, from_value
from .v1 import conversations_pb2 as cpb, conversations_pb2_grpc
from .v1 import threads_pb2

KINDS = {"message": cpb.ITEM_KIND_MESSAGE, "tool_call": cpb.ITEM_KIND_TOOL_CALL,
         "tool_result": cpb.ITEM_KIND_TOOL_RESULT, "reasoning": cpb.ITEM_KIND_REASONING,
         "summary": cpb.ITEM_KIND_SUMMARY, "tool_definition": cpb.ITEM_KIND_TOOL_DEFINITION,
         "other": cpb.ITEM_KIND_OTHER}
KIND_NAMES = {v: k for k, v in KINDS.items()}
IDLE_ACTIONS = {"close": cpb.IDLE_ACTION_CLOSE, "delete": cpb.IDLE_ACTION_DELETE}
_DURABILITY = {None: threads_pb2.DURABILITY_UNSPECIFIED, "sync": threads_pb2.DURABILITY_SYNC,
               "process": threads_pb2.DURABILITY_PROCESS}


def item(kind: str | int, content: Any, *, role: str = "", client_item_id: str = "", call_id: str = "",
         tool_name: str = "", run_id: str = "", step_id: str = "", metadata: Mapping[str, Any] | None = None,
         tokens: tuple[int, str, bool] | None = None, compact: Any = None, dedupe_key: bytes = b"",
         schema: str = "", schema_version: int = 0) -> cpb.ItemInput:
    """An ItemInput: ``kind`` by name ("message", "tool_call", ...) or ItemKind number; ``tokens`` is
    (count, tokenizer, exact); ``schema`` and ``schema_version``: a registered schema the content (a map)
    follows (agentstate.schemas), so a read with ``read_schema_version`` migrates it."""
    k = KINDS[kind] if isinstance(kind, str) else kind
    out = cpb.ItemInput(kind=k, role=role, client_item_id=client_item_id, call_id=call_id, tool_name=tool_name,
                        run_id=run_id, step_id=step_id, dedupe_key=dedupe_key, schema=schema,
                        schema_version=schema_version)
    encode_into(content, out.content, "content")
    for key, v in (metadata or {}).items():
        encode_into(v, out.metadata[check_key(key, "metadata")], f"metadata[{key!r}]")
    if tokens is not None:
        out.tokens.count, out.tokens.tokenizer, out.tokens.exact = tokens
    if compact is not None:
        encode_into(compact, out.compact, "compact")
    return out


def item_value(it: cpb.ConversationItem) -> Any:
    """The Python value of a stored item's content (None when it was read with omit_content)."""
    return from_value(it.content) if it.HasField("content") else None


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


class ConversationCalls:
    """The ConversationService calls, written once (see :mod:`agentstate._facet`) for :class:`Conversations`
    and :class:`AsyncConversations`."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = conversations_pb2_grpc.ConversationServiceStub(client.channel)

    @unary
    def append(self, thread_id: str, items: Iterable[cpb.ItemInput], *, expected_last_seq: int | None = None,
               create_thread: bool = False, thread_metadata: Mapping[str, Any] | None = None, reopen: bool = False,
               run_id: str = "", lease_id: str = "", request_id: str = "", durability: str | None = None,
               timeout: float | None = None, read_schema_version: int = 0) -> cpb.AppendItemsResponse:
        """AppendItems: the stored items (without content) in request order, the last seq, duplicates.
        ``read_schema_version``: each answered item's migration to that version of its schema (``migration``,
        ``schema_version``, ``stored_schema_version``; a FAIL policy fails the call and appends nothing)."""
        req = cpb.AppendItemsRequest(namespace=self.client.namespace, thread_id=thread_id, items=list(items),
                                     expected_last_seq=expected_last_seq, create_thread=create_thread,
                                     reopen=reopen, run_id=run_id, lease_id=lease_id, request_id=request_id,
                                     durability=_DURABILITY[durability], read_schema_version=read_schema_version)
        for key, v in (thread_metadata or {}).items():
            encode_into(v, req.thread_metadata[check_key(key, "thread_metadata")], f"thread_metadata[{key!r}]")
        return (yield Call(self.stub.AppendItems, req, timeout))

    @listing
    def list(self, thread_id: str, *, start_seq: int = 0, end_seq: int = 0, latest: int = 0, page_size: int = 0,
             omit_content: bool = False, timeout: float | None = None, read_schema_version: int = 0):
        """The live items of a seq range (or its newest ``latest``), oldest first, every page
        (``read_schema_version``: each content migrated to that version of its schema)."""
        return pages(self.stub.ListItems, lambda token: cpb.ListItemsRequest(
            namespace=self.client.namespace, thread_id=thread_id, start_seq=start_seq, end_seq=end_seq,
            latest=latest, page_size=page_size, page_token=token, omit_content=omit_content,
            read_schema_version=read_schema_version), "items", timeout)

    @unary
    def latest(self, thread_id: str, n: int = 0, *, page_size: int = 0, timeout: float | None = None,
               read_schema_version: int = 0) -> list[cpb.ConversationItem]:
        """The newest ``n`` items (all with 0), oldest first, read page by page as one listing."""
        out: list[cpb.ConversationItem] = []
        token = ""
        while True:
            resp = yield Call(self.stub.ListItems, cpb.ListItemsRequest(
                namespace=self.client.namespace, thread_id=thread_id, latest=n, page_size=page_size,
                page_token=token, read_schema_version=read_schema_version), timeout)
            out.extend(resp.items)
            token = resp.next_page_token
            if not token:
                return out

    @unary
    def get(self, thread_id: str, seqs: Iterable[int] = (), client_item_ids: Iterable[str] = (), *,
            allow_missing: bool = False, omit_content: bool = False, timeout: float | None = None,
            read_schema_version: int = 0) -> cpb.GetItemsResponse:
        req = cpb.GetItemsRequest(namespace=self.client.namespace, thread_id=thread_id, seqs=list(seqs),
                                  client_item_ids=list(client_item_ids), allow_missing=allow_missing,
                                  omit_content=omit_content, read_schema_version=read_schema_version)
        return (yield Call(self.stub.GetItems, req, timeout))

    @unary
    def pop(self, thread_id: str, *, expected_last_seq: int | None = None, request_id: str = "",
            durability: str | None = None, timeout: float | None = None) -> cpb.ConversationItem | None:
        """PopItem: the removed newest item, None when the log was empty."""
        req = cpb.PopItemRequest(namespace=self.client.namespace, thread_id=thread_id,
                                 expected_last_seq=expected_last_seq, request_id=request_id,
                                 durability=_DURABILITY[durability])
        resp = yield Call(self.stub.PopItem, req, timeout)
        return resp.item if resp.HasField("item") else None

    @unary
    def clear(self, thread_id: str, *, expected_last_seq: int | None = None, request_id: str = "",
              durability: str | None = None, timeout: float | None = None) -> cpb.ClearItemsResponse:
        req = cpb.ClearItemsRequest(namespace=self.client.namespace, thread_id=thread_id,
                                    expected_last_seq=expected_last_seq, request_id=request_id,
                                    durability=_DURABILITY[durability])
        return (yield Call(self.stub.ClearItems, req, timeout))

    @unary
    def conversation(self, thread_id: str, *, timeout: float | None = None) -> cpb.Conversation:
        """GetConversation: counts, last seq, last activity, expiry and the idle policy in effect."""
        resp = yield Call(self.stub.GetConversation, cpb.GetConversationRequest(
            namespace=self.client.namespace, thread_id=thread_id), timeout)
        return resp.conversation

    @unary
    def set_idle_policy(self, *, thread_id: str = "", ttl: float | None = None, action: str = "close",
                        clear: bool = False, request_id: str = "", timeout: float | None = None,
                        ) -> cpb.SetIdlePolicyResponse:
        """SetIdlePolicy of the namespace (no ``thread_id``) or of one thread; ``ttl`` in seconds (a thread's
        ``ttl=0`` means it never expires), ``action`` "close" or "delete"; ``clear`` removes the scope's own."""
        scope = cpb.CONFIG_SCOPE_THREAD if thread_id else cpb.CONFIG_SCOPE_NAMESPACE
        req = cpb.SetIdlePolicyRequest(namespace=self.client.namespace, scope=scope, thread_id=thread_id,
                                       clear=clear, request_id=request_id)
        if not clear:
            req.policy.action = IDLE_ACTIONS[action]
            if ttl:
                req.policy.ttl.CopyFrom(_duration(ttl))
        return (yield Call(self.stub.SetIdlePolicy, req, timeout))

    @unary
    def get_idle_policy(self, *, thread_id: str = "", timeout: float | None = None) -> cpb.GetIdlePolicyResponse:
        scope = cpb.CONFIG_SCOPE_THREAD if thread_id else cpb.CONFIG_SCOPE_NAMESPACE
        return (yield Call(self.stub.GetIdlePolicy, cpb.GetIdlePolicyRequest(
            namespace=self.client.namespace, scope=scope, thread_id=thread_id), timeout))


    # ------------------------------------------------------------- compaction

    @unary
    def set_compaction_policy(self, *, thread_id: str = "", clear: bool = False, request_id: str = "",
                              timeout: float | None = None, **fields: Any) -> cpb.SetCompactionPolicyResponse:
        """SetCompactionPolicy of the namespace (no ``thread_id``) or one thread. ``fields`` are
        CompactionPolicy's (``trigger_items=20, compact_items=15, ...``; ``fallback_after`` and
        ``lease_timeout`` in seconds)."""
        scope = cpb.CONFIG_SCOPE_THREAD if thread_id else cpb.CONFIG_SCOPE_NAMESPACE
        req = cpb.SetCompactionPolicyRequest(namespace=self.client.namespace, scope=scope, thread_id=thread_id,
                                             clear=clear, request_id=request_id)
        if not clear:
            req.policy.SetInParent()
            for name, v in fields.items():
                if name in ("fallback_after", "lease_timeout"):
                    getattr(req.policy, name).CopyFrom(_duration(v))
                else:
                    setattr(req.policy, name, v)
        return (yield Call(self.stub.SetCompactionPolicy, req, timeout))

    @unary
    def get_compaction_policy(self, *, thread_id: str = "", timeout: float | None = None,
                              ) -> cpb.GetCompactionPolicyResponse:
        scope = cpb.CONFIG_SCOPE_THREAD if thread_id else cpb.CONFIG_SCOPE_NAMESPACE
        return (yield Call(self.stub.GetCompactionPolicy, cpb.GetCompactionPolicyRequest(
            namespace=self.client.namespace, scope=scope, thread_id=thread_id), timeout))

    @unary
    def claim_compaction(self, *, worker: str, thread_id: str = "", lease: float | None = None, wait: float = 0.0,
                         timeout: float | None = None) -> cpb.ClaimCompactionResponse | None:
        """ClaimCompaction: the oldest due claimable compaction of the namespace (or of one thread) with its
        inputs and a lease, waiting up to ``wait`` seconds; None when there was none."""
        req = cpb.ClaimCompactionRequest(namespace=self.client.namespace, thread_id=thread_id, worker=worker)
        if lease:
            req.lease_timeout.CopyFrom(_duration(lease))
        if wait:
            req.wait_timeout.CopyFrom(_duration(wait))
        call_timeout = timeout if timeout is not None else (self.client.timeout + wait)
        resp = yield Call(self.stub.ClaimCompaction, req, call_timeout)
        return resp if resp.HasField("compaction") else None

    @unary
    def submit_summary(self, claim: cpb.ClaimCompactionResponse, text: str, *, producer: str,
                       tokens: tuple[int, str, bool] | None = None, request_id: str = "",
                       timeout: float | None = None) -> cpb.SubmitSummaryResponse:
        """SubmitSummary of a claim (its ids, range and content hash are sent back as the claim gave them)."""
        comp = claim.compaction
        req = cpb.SubmitSummaryRequest(namespace=self.client.namespace, thread_id=comp.thread_id,
                                       compaction_id=comp.compaction_id, lease_id=claim.lease_id, level=comp.level,
                                       first_seq=comp.first_seq, last_seq=comp.last_seq,
                                       content_hash=comp.content_hash, text=text, producer=producer,
                                       request_id=request_id)
        if tokens is not None:
            req.tokens.count, req.tokens.tokenizer, req.tokens.exact = tokens
        return (yield Call(self.stub.SubmitSummary, req, timeout))

    @listing
    def list_compactions(self, thread_id: str = "", *, page_size: int = 0, timeout: float | None = None):
        return pages(self.stub.ListCompactions, lambda token: cpb.ListCompactionsRequest(
            namespace=self.client.namespace, thread_id=thread_id, page_size=page_size, page_token=token),
            "compactions", timeout)

    @listing
    def list_summaries(self, thread_id: str, *, level: int = 0, page_size: int = 0, timeout: float | None = None):
        return pages(self.stub.ListSummaries, lambda token: cpb.ListSummariesRequest(
            namespace=self.client.namespace, thread_id=thread_id, level=level, page_size=page_size,
            page_token=token), "summaries", timeout)

    @unary
    def expand_summary(self, thread_id: str, summary_id: str, *, to_items: bool = False, omit_content: bool = False,
                       timeout: float | None = None) -> tuple[cpb.Summary, list[cpb.Summary], list[cpb.ConversationItem]]:
        """ExpandSummary, every page: (the summary, its child summaries, its original items)."""
        token, children, items = "", [], []
        while True:
            resp = yield Call(self.stub.ExpandSummary, cpb.ExpandSummaryRequest(
                namespace=self.client.namespace, thread_id=thread_id, summary_id=summary_id, to_items=to_items,
                omit_content=omit_content, page_size=1000, page_token=token), timeout)
            children.extend(resp.children)
            items.extend(resp.items)
            token = resp.next_page_token
            if not token:
                return resp.summary, children, items


    # ------------------------------------------------------------- context

    @unary
    def get_context(self, thread_id: str, budget_tokens: int, *, knowledge: Iterable[cpb.KnowledgeItem] = (),
                    tokenizer: str = "", keep_last_items: int | None = None, tool_compression: bool = True,
                    knowledge_at_end: bool = False, dedupe: bool = True, explanation: bool = True,
                    memory_query=None, read_schema_version: int = 0,
                    timeout: float | None = None) -> cpb.GetContextResponse:
        """GetContext: the model's input for ``budget_tokens`` (check it with :func:`context_hash`);
        ``memory_query`` (:func:`agentstate.memory.memory_query`) adds memory hits to the knowledge layer;
        ``read_schema_version`` migrates the log items' contents to that version (as :meth:`list` does)."""
        req = cpb.GetContextRequest(
            namespace=self.client.namespace, thread_id=thread_id, budget_tokens=budget_tokens,
            knowledge=list(knowledge), tokenizer=tokenizer, keep_last_items=keep_last_items,
            tool_compression=cpb.TOOL_COMPRESSION_OUTSIDE_TAIL if tool_compression else cpb.TOOL_COMPRESSION_NONE,
            knowledge_position=cpb.KNOWLEDGE_POSITION_END if knowledge_at_end
            else cpb.KNOWLEDGE_POSITION_AFTER_SUMMARIES, disable_dedupe=not dedupe, omit_explanation=not explanation,
            read_schema_version=read_schema_version)
        if memory_query is not None:
            req.memory_query.CopyFrom(memory_query)
        return (yield Call(self.stub.GetContext, req, timeout))

    @unary
    def report_usage(self, thread_id: str, context: cpb.GetContextResponse, input_tokens: int, *, model: str = "",
                     request_id: str = "", timeout: float | None = None) -> cpb.ReportUsageResponse:
        """ReportUsage: the model's real input tokens for a context GetContext returned (calibrates)."""
        req = cpb.ReportUsageRequest(namespace=self.client.namespace, thread_id=thread_id,
                                     context_hash=context.context_hash,
                                     estimated_raw_tokens=context.estimated_raw_tokens,
                                     client_counted_tokens=context.client_counted_tokens, input_tokens=input_tokens,
                                     model=model, request_id=request_id)
        return (yield Call(self.stub.ReportUsage, req, timeout))

    @unary
    def set_pin(self, pin_id: str, kind: str | int, content: Any, *, thread_id: str = "", position: int = 0,
                role: str = "", tool_name: str = "", tokens: tuple[int, str, bool] | None = None,
                expected_etag: str | None = None, request_id: str = "", timeout: float | None = None,
                ) -> cpb.SetPinnedItemResponse:
        """SetPinnedItem of the namespace (no ``thread_id``) or one thread."""
        scope = cpb.CONFIG_SCOPE_THREAD if thread_id else cpb.CONFIG_SCOPE_NAMESPACE
        req = cpb.SetPinnedItemRequest(namespace=self.client.namespace, scope=scope, thread_id=thread_id,
                                       pin_id=pin_id, position=position,
                                       kind=KINDS[kind] if isinstance(kind, str) else kind, role=role,
                                       tool_name=tool_name, expected_etag=expected_etag, request_id=request_id)
        encode_into(content, req.content, "content")
        if tokens is not None:
            req.tokens.count, req.tokens.tokenizer, req.tokens.exact = tokens
        return (yield Call(self.stub.SetPinnedItem, req, timeout))

    @unary
    def list_pins(self, *, thread_id: str = "", include_namespace: bool = False, timeout: float | None = None,
                  ) -> list[cpb.PinnedItem]:
        scope = cpb.CONFIG_SCOPE_THREAD if thread_id else cpb.CONFIG_SCOPE_NAMESPACE
        resp = yield Call(self.stub.ListPinnedItems, cpb.ListPinnedItemsRequest(
            namespace=self.client.namespace, scope=scope, thread_id=thread_id, include_namespace=include_namespace),
            timeout)
        return list(resp.items)

    @unary
    def delete_pin(self, pin_id: str, *, thread_id: str = "", allow_missing: bool = False, request_id: str = "",
                   timeout: float | None = None) -> bool:
        scope = cpb.CONFIG_SCOPE_THREAD if thread_id else cpb.CONFIG_SCOPE_NAMESPACE
        resp = yield Call(self.stub.DeletePinnedItem, cpb.DeletePinnedItemRequest(
            namespace=self.client.namespace, scope=scope, thread_id=thread_id, pin_id=pin_id,
            allow_missing=allow_missing, request_id=request_id), timeout)
        return resp.deleted


def knowledge(content: Any, *, label: str = "", kind: str | int = "message", role: str = "",
              tokens: tuple[int, str, bool] | None = None) -> cpb.KnowledgeItem:
    """A KnowledgeItem for GetContext."""
    out = cpb.KnowledgeItem(label=label, kind=KINDS[kind] if isinstance(kind, str) else kind, role=role)
    encode_into(content, out.content, "content")
    if tokens is not None:
        out.tokens.count, out.tokens.tokenizer, out.tokens.exact = tokens
    return out


def context_hash(items: Iterable[cpb.ContextItem]) -> bytes:
    """The context hash of GetContext's items (docs/conversations.md "Step 8"); equals the response's
    ``context_hash``. Needs the blake3 package."""
    from blake3 import blake3
    import msgspec
    from . import codec
    body = []
    for it in items:
        if it.content.WhichOneof("kind") == "msgpack":
            enc = it.content.msgpack
        else:
            enc = codec.encode(from_value(it.content))
        body.append([it.source, it.kind, it.role, it.call_id, it.tool_name, msgspec.Raw(enc)])
    return blake3(b"agentstate.v1 context\x00" + msgspec.msgpack.encode(body)).digest()


def compaction_hash(compaction: cpb.Compaction) -> bytes:
    """The content hash of a claimed compaction computed from its inputs (docs/conversations.md "Content hash
    of a range"); equals ``compaction.content_hash`` while the range is unchanged. Needs the blake3 package."""
    from blake3 import blake3
    import msgspec
    if compaction.level == 1:
        body = [[it.seq, it.content_hash] for it in compaction.items]
    else:
        body = [[s.summary_id, s.text] for s in compaction.summaries]
    return blake3(b"agentstate.v1 compaction\x00" + msgspec.msgpack.encode(
        [compaction.level, compaction.first_seq, compaction.last_seq, body])).digest()


class Conversations(ConversationCalls, SyncFacet):
    """``client.conversations``."""


class AsyncConversations(ConversationCalls, AsyncFacet):
    """``async_client.conversations``."""


class CompactionWorker:
    """The worker loop around your model (docs/conversations.md "The worker loop"): claims due compactions of
    the client's namespace (or of one thread), asks ``summarize(compaction) -> str`` and submits the text.
    A summary refused as stale, done or with a lost lease is dropped (``dropped`` counts them); a worker
    killed between claim and submit loses nothing (its lease expires, the next claim takes over)."""

    def __init__(self, client, summarize, *, worker: str = "agentstate.CompactionWorker", thread_id: str = "",
                 lease: float | None = None, producer: str | None = None) -> None:
        self.client, self.summarize, self.worker, self.thread_id = client, summarize, worker, thread_id
        self.lease, self.producer = lease, producer or worker
        self.applied = self.dropped = 0

    def _one(self, wait: float) -> bool:
        from .errors import FailedPrecondition
        claim = self.client.conversations.claim_compaction(worker=self.worker, thread_id=self.thread_id,
                                                           lease=self.lease, wait=wait)
        if claim is None:
            return False
        text = str(self.summarize(claim.compaction))[:claim.compaction.max_summary_chars] or "(empty)"
        try:
            self.client.conversations.submit_summary(claim, text, producer=self.producer)
            self.applied += 1
        except FailedPrecondition:  # SUMMARY_STALE, COMPACTION_DONE, LEASE_LOST: drop it, claim again
            self.dropped += 1
        return True

    def run_once(self) -> int:
        """Summarise what is due now (no waiting); returns how many summaries were applied."""
        before = self.applied
        while self._one(0.0):
            pass
        return self.applied - before

    def run(self, stop=None, wait: float = 30.0) -> None:
        """Work until ``stop`` (a threading.Event) is set, waiting up to ``wait`` seconds per claim."""
        while stop is None or not stop.is_set():
            self._one(wait)
