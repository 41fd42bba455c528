"""effects: the EffectService facet of the client (``client.effects``) — the side-effect ledger.

    held = c.runs.start("orders", create_thread=True)
    b = held.begin_effect("charge:order-17", request_digest=digest)
    if b.effect.state == DONE:                  # it happened already: use the recorded outcome
        outcome = from_value(b.effect.outcome)
    else:                                       # PENDING (go ahead) or UNKNOWN (find out first)
        outcome = charge_unless_charged(...)
        c.effects.complete("charge:order-17", b.token, outcome)

``AsyncClient.effects`` (:class:`AsyncEffects`) has the same calls as coroutines.
"""
from __future__ import annotations

from typing import Any, Iterable

from ._facet import AsyncFacet, Call, SyncFacet, listing, pages, unary
from .values import encode_into
from .v1 import effects_pb2 as fpb, effects_pb2_grpc

PENDING = fpb.EFFECT_STATE_PENDING
DONE = fpb.EFFECT_STATE_DONE
FAILED = fpb.EFFECT_STATE_FAILED
UNKNOWN = fpb.EFFECT_STATE_UNKNOWN
STATES = {"pending": PENDING, "done": DONE, "failed": FAILED, "unknown": UNKNOWN}


class EffectCalls:
    """The EffectService calls, written once (see :mod:`agentstate._facet`) for :class:`Effects` and
    :class:`AsyncEffects`."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = effects_pb2_grpc.EffectServiceStub(client.channel)

    @unary
    def begin(self, idempotency_key: str, run_id: str, lease_id: str, *, description: str = "",
              request_digest: str = "", step_id: str = "", timeout: float | None = None) -> fpb.BeginEffectResponse:
        req = fpb.BeginEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key, run_id=run_id,
                                     lease_id=lease_id, description=description, request_digest=request_digest,
                                     step_id=step_id)
        return (yield Call(self.stub.BeginEffect, req, timeout))

    @unary
    def complete(self, idempotency_key: str, token: str, outcome: Any = None, *,
                 timeout: float | None = None) -> fpb.Effect:
        req = fpb.CompleteEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key, token=token)
        if outcome is not None:
            encode_into(outcome, req.outcome, "outcome")
        return (yield Call(self.stub.CompleteEffect, req, timeout)).effect

    @unary
    def fail(self, idempotency_key: str, token: str, error: str = "", *, retryable: bool = False,
             timeout: float | None = None) -> fpb.Effect:
        req = fpb.FailEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key, token=token,
                                    error=error, retryable=retryable)
        return (yield Call(self.stub.FailEffect, req, timeout)).effect

    @unary
    def get(self, idempotency_key: str, *, timeout: float | None = None) -> fpb.Effect:
        req = fpb.GetEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key)
        return (yield Call(self.stub.GetEffect, req, timeout)).effect

    @listing
    def list(self, *, thread_id: str = "", run_id: str = "", states: Iterable[str] = (), page_size: int = 0,
             timeout: float | None = None):
        """The effects of a thread or a run (Iterator / AsyncIterator of Effect), optionally of some ``states``."""
        return pages(self.stub.ListEffects, lambda token: fpb.ListEffectsRequest(
            namespace=self.client.namespace, thread_id=thread_id, run_id=run_id, states=[STATES[s] for s in states],
            page_size=page_size, page_token=token), "effects", timeout)


class Effects(EffectCalls, SyncFacet):
    """EffectService calls (``client.effects``)."""


class AsyncEffects(EffectCalls, AsyncFacet):
    """EffectService calls of the asyncio client (``async_client.effects``): coroutines, ``list`` an async
    iterator."""
