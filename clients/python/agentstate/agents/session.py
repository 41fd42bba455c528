"""session: ``SidecarSession``, a ``Session`` of the OpenAI Agents SDK whose items live in a sidecar thread.

It behaves as the SDK's reference ``SQLiteSession`` (openai-agents 0.24): ``get_items(limit)`` — ``limit``
None takes ``session_settings.limit``, still None gives every item; ``limit > 0`` the newest ``limit``,
oldest first; 0 gives ``[]``; a negative limit every item (SQLite's ``LIMIT -1``) —, ``add_items`` (one
``AppendItems`` that creates the thread; a value JSON cannot hold raises before anything is stored),
``pop_item`` (None when empty), ``clear_session``. Items are stored as their JSON text and returned as
``json.loads`` of it, so callers get new objects with the reference's key order, tuples as lists and
non-string keys as strings. A mutation already sent is awaited to its outcome when the caller is cancelled,
then the cancellation is raised (as the reference does).

Each event loop that uses the session gets its own :class:`~agentstate.AsyncClient` (``Runner.run_sync``
and repeated ``asyncio.run`` calls each run their own loop).

With ``summarizer=fn`` (``fn(compaction) -> str``, sync or async) the session has ``run_compaction``, so the
runner calls it after the turns it persisted (the SDK's ``OpenAIResponsesCompactionAwareSession``): it claims
this thread's due compactions and submits ``fn``'s summaries. The stored items never change (the sidecar's
compaction keeps every original); without a summarizer the method is absent, and workers elsewhere or the
server's fallback summarise. ``get_context`` and ``report_usage`` give GetContext's full answer and calibrate.

With ``context_budget=N`` (off by default; not the reference's behaviour) ``get_items`` returns the rendered
``GetContext(N)`` instead of the stored items (``limit`` is not applied then, except 0: a cut could part a
tool call from its result). It is meant for plain sessions: under ``EncryptedSession`` the server only sees
envelopes, so do not combine them.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import weakref
from typing import Any, Awaitable, TypeVar

from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from .. import codec, ids
from ..aio import AsyncClient
from ..errors import FailedPrecondition, NotFound
from ..values import from_value
from ..retries import DEFAULT_TIMEOUT
from ..v1 import conversations_pb2 as cpb
from . import _items

_T = TypeVar("_T")
DEFAULT_ADDRESS = "unix:sidecar-data/sidecar.sock"
MAX_ITEMS_PER_CALL = 1000  # the server's limit of one AppendItems


async def _settle(awaitable: Awaitable[_T]) -> _T:
    """Await a mutation to its outcome even if the caller is cancelled meanwhile; then re-raise the
    cancellation (so a cancelled caller never leaves it unknown whether the write happened)."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as e:
            cancelled = cancelled or e
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller sees
        raise cancelled
    return task.result()


def _decode(it: cpb.ConversationItem) -> tuple[bool, Any]:
    """(ok, item) of a stored item: the JSON text this adapter stored; anything else is skipped, as the
    reference skips rows that are not JSON."""
    if it.content.WhichOneof("kind") != "msgpack":
        return False, None
    try:
        text = from_value(it.content)
    except Exception:  # noqa: BLE001 - a foreign value
        return False, None
    if not isinstance(text, str):
        return False, None
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def _render(ci: cpb.ContextItem) -> Any:
    value = from_value(ci.content)
    if ci.source == cpb.CONTEXT_SOURCE_SUMMARY:
        return {"role": "developer", "content": f"Summary of earlier conversation ({ci.summary_id}): {value}"}
    if ci.source == cpb.CONTEXT_SOURCE_COMPRESSED_TOOL_CALL:
        return {"role": "assistant", "content": "Tool call (compressed): " + json.dumps(value, ensure_ascii=False,
                                                                                          sort_keys=True)}
    if ci.kind == cpb.ITEM_KIND_TOOL_RESULT and ci.duplicate_of_seq:
        return {"type": "function_call_output", "call_id": ci.call_id,
                "output": f"(the same result as call {value.get('duplicate_of', '')})"}
    if isinstance(value, str):
        try:
            return json.loads(value)  # an item this adapter stored, as stored
        except ValueError:
            return {"role": ci.role or "user", "content": value}
    return {"role": ci.role or "user", "content": json.dumps(value, ensure_ascii=False, sort_keys=True)}


class SidecarSession(SessionABC):
    """An Agents SDK session stored in thread ``session_id`` of ``namespace`` on the sidecar at ``address``."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, address: str = DEFAULT_ADDRESS, *, namespace: str = "default",
                 session_settings: SessionSettings | dict[str, Any] | None = None,
                 timeout: float = DEFAULT_TIMEOUT, client_options: dict[str, Any] | None = None,
                 summarizer: Any = None, worker: str = "agentstate.agents.SidecarSession",
                 context_budget: int | None = None) -> None:
        self.session_id = session_id
        self.address = address
        self.namespace = namespace
        self.session_settings = (coerce_session_settings(session_settings) if session_settings is not None
                                 else SessionSettings())
        self.timeout = timeout
        self._client_options = dict(client_options or {})
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = \
            weakref.WeakKeyDictionary()
        self.summarizer = summarizer
        self.worker = worker
        self.context_budget = context_budget
        if summarizer is not None:
            self.run_compaction = self._run_compaction  # the SDK calls it only when it exists

    async def _run_compaction(self, args: Any = None) -> int:
        """Claim this thread's due compactions (no waiting) and submit the summarizer's texts; returns how many
        were applied. A summary refused as stale or done (another worker, the fallback) is dropped."""
        conv = self._client().conversations
        done = 0
        while True:
            try:
                claim = await conv.claim_compaction(worker=self.worker, thread_id=self.session_id)
            except NotFound:
                return done
            if claim is None:
                return done
            text = self.summarizer(claim.compaction)
            if inspect.isawaitable(text):
                text = await text
            text = str(text)[:claim.compaction.max_summary_chars] or "(empty)"
            try:
                await _settle(conv.submit_summary(claim, text, producer=self.worker))
                done += 1
            except FailedPrecondition:
                continue

    async def get_context(self, budget_tokens: int, **kw: Any):
        """GetContext of this session's thread (items, context hash, explanation)."""
        return await self._client().conversations.get_context(self.session_id, budget_tokens, **kw)

    async def report_usage(self, context: Any, input_tokens: int, **kw: Any):
        """ReportUsage of the model's real input tokens for a context from :meth:`get_context` (calibrates)."""
        return await self._client().conversations.report_usage(self.session_id, context, input_tokens, **kw)

    # ------------------------------------------------------------- clients

    def _client(self) -> AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = AsyncClient(self.address, namespace=self.namespace, timeout=self.timeout,
                                 **self._client_options)
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close this event loop's client (the others close with their loops)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    # ------------------------------------------------------------- the Session protocol

    async def get_items(self, limit: int | None = None) -> list[Any]:
        n = resolve_session_limit(limit, self.session_settings)
        if n == 0:
            return []
        if self.context_budget is not None:
            return await self._context_items()
        conv = self._client().conversations
        window = n if n is not None and n > 0 else 0
        while True:
            try:
                stored = await conv.latest(self.session_id, window, page_size=1000)
            except NotFound:
                return []
            items = [item for ok, item in map(_decode, stored) if ok]
            if not window or len(items) >= window or len(stored) < window:
                return items[-window:] if window else items
            window *= 2  # foreign items among the newest: read further back so ``limit`` counts ours

    async def _context_items(self) -> list[Any]:
        """The context mode: GetContext(context_budget) rendered as SDK items (not the reference's behaviour;
        off by default): summaries as developer messages, compressed tool calls as assistant messages with
        the compressed form, deduplicated tool results as outputs naming the kept copy, the rest as stored."""
        try:
            ctx = await self._client().conversations.get_context(self.session_id, self.context_budget)
        except NotFound:
            return []
        return [_render(ci) for ci in ctx.items]

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        texts = [_items.to_text(item) for item in items]  # TypeError/ValueError before anything is stored
        inputs = []
        for item, text in zip(items, texts):
            d = _items.describe(item)
            inputs.append(cpb.ItemInput(kind=d["kind"], role=d["role"], call_id=d["call_id"],
                                        tool_name=d["tool_name"], dedupe_key=d["dedupe_key"],
                                        client_item_id=ids.new_id(), content={"msgpack": codec.encode(text)}))
        await _settle(self._append(inputs))

    async def _append(self, inputs: list[cpb.ItemInput]) -> None:
        conv = self._client().conversations
        for start in range(0, len(inputs), MAX_ITEMS_PER_CALL):
            await conv.append(self.session_id, inputs[start:start + MAX_ITEMS_PER_CALL], create_thread=True)

    async def pop_item(self) -> Any | None:
        return await _settle(self._pop())

    async def _pop(self) -> Any | None:
        conv = self._client().conversations
        while True:
            try:
                it = await conv.pop(self.session_id)
            except NotFound:
                return None
            if it is None:
                return None
            ok, item = _decode(it)
            if ok:
                return item
            # a foreign item is dropped and the next one popped, as the reference drops rows that are not JSON

    async def clear_session(self) -> None:
        await _settle(self._clear())

    async def _clear(self) -> None:
        try:
            await self._client().conversations.clear(self.session_id)
        except NotFound:
            pass

