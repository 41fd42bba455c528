"""effects: the EffectService facet of the client (``client.effects``) — the side-effect ledger.

    held = c.runs.start("orders", create_thread=True)
    b = held.begin_effect("charge:order-17", request_digest=digest)
    if b.effect.state == DONE:                  # it happened already: use the recorded outcome
        outcome = from_value(b.effect.outcome)
    else:                                       # PENDING (go ahead) or UNKNOWN (find out first)
        outcome = charge_unless_charged(...)
        c.effects.complete("charge:order-17", b.token, outcome)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

from .values import encode_into
from .v1 import effects_pb2 as fpb, effects_pb2_grpc

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

PENDING = fpb.EFFECT_STATE_PENDING
DONE = fpb.EFFECT_STATE_DONE
FAILED = fpb.EFFECT_STATE_FAILED
UNKNOWN = fpb.EFFECT_STATE_UNKNOWN
STATES = {"pending": PENDING, "done": DONE, "failed": FAILED, "unknown": UNKNOWN}


class Effects:
    """EffectService calls (``client.effects``)."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.stub = effects_pb2_grpc.EffectServiceStub(client.channel)

    def begin(self, idempotency_key: str, run_id: str, lease_id: str, *, description: str = "",
              request_digest: str = "", step_id: str = "", timeout: float | None = None) -> fpb.BeginEffectResponse:
        req = fpb.BeginEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key, run_id=run_id,
                                     lease_id=lease_id, description=description, request_digest=request_digest,
                                     step_id=step_id)
        return self.client._call(self.stub.BeginEffect, req, timeout)

    def complete(self, idempotency_key: str, token: str, outcome: Any = None, *,
                 timeout: float | None = None) -> fpb.Effect:
        req = fpb.CompleteEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key, token=token)
        if outcome is not None:
            encode_into(outcome, req.outcome, "outcome")
        return self.client._call(self.stub.CompleteEffect, req, timeout).effect

    def fail(self, idempotency_key: str, token: str, error: str = "", *, retryable: bool = False,
             timeout: float | None = None) -> fpb.Effect:
        req = fpb.FailEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key, token=token,
                                    error=error, retryable=retryable)
        return self.client._call(self.stub.FailEffect, req, timeout).effect

    def get(self, idempotency_key: str, *, timeout: float | None = None) -> fpb.Effect:
        req = fpb.GetEffectRequest(namespace=self.client.namespace, idempotency_key=idempotency_key)
        return self.client._call(self.stub.GetEffect, req, timeout).effect

    def list(self, *, thread_id: str = "", run_id: str = "", states: Iterable[str] = (), page_size: int = 0,
             timeout: float | None = None) -> Iterator[fpb.Effect]:
        token = ""
        while True:
            req = fpb.ListEffectsRequest(namespace=self.client.namespace, thread_id=thread_id, run_id=run_id,
                                         states=[STATES[s] for s in states], page_size=page_size, page_token=token)
            resp = self.client._call(self.stub.ListEffects, req, timeout)
            yield from resp.effects
            token = resp.next_page_token
            if not token:
                return
