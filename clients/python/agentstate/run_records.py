"""run_records: the messages a run writes and the names of run enums.

:func:`step`, :func:`event`, :func:`effect_done` and :func:`effect_failed`
build the records that RecordStep, AppendEvents and a put's ``steps``,
``events`` and ``effects`` take; ``STRATEGIES``, ``STATUSES``, ... map the
names the client takes to enum values. Shared by the run facets
(:mod:`agentstate.runs`) and held runs (:mod:`agentstate.held_runs`).
"""
from __future__ import annotations

from typing import Any, Mapping

from google.protobuf import duration_pb2

from .v1 import effects_pb2, events_pb2, runs_pb2 as rpb
from .values import encode_into

STRATEGIES = {"reject": rpb.MULTITASK_STRATEGY_REJECT, "enqueue": rpb.MULTITASK_STRATEGY_ENQUEUE,
              "interrupt": rpb.MULTITASK_STRATEGY_INTERRUPT, "rollback": rpb.MULTITASK_STRATEGY_ROLLBACK,
              "fork": rpb.MULTITASK_STRATEGY_FORK}
ON_LEASE_EXPIRED = {"requeue": rpb.LEASE_EXPIRY_REQUEUE, "hold": rpb.LEASE_EXPIRY_HOLD}
STEP_KINDS = {"model": rpb.STEP_KIND_MODEL, "tool": rpb.STEP_KIND_TOOL, "other": rpb.STEP_KIND_OTHER}
STATUSES = {name.lower(): rpb.RunStatus.Value("RUN_STATUS_" + name.upper())
            for name in ("pending", "running", "success", "error", "cancelled", "interrupted", "timeout")}


def status_name(status: int) -> str:
    """"pending", "running", ... for a RunStatus value."""
    return rpb.RunStatus.Name(status)[len("RUN_STATUS_"):].lower()


def duration(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(round(seconds * 1e9)))
    return d


def counters(values: Mapping[str, float] | rpb.ResourceCounters | None) -> rpb.ResourceCounters:
    """ResourceCounters from a dict with keys tokens_in, tokens_out, cost, wall_time_ms, requests."""
    if isinstance(values, rpb.ResourceCounters):
        return values
    return rpb.ResourceCounters(**dict(values or {}))


def payload(out: rpb.StepPayload, digest: str, body: Any, field: str) -> None:
    out.digest = digest
    if body is not None:
        encode_into(body, out.body, f"{field}.body")


def step(kind: str = "other", name: str = "", *, step_id: str = "", input: Any = None, input_digest: str = "",
         output: Any = None, output_digest: str = "", error: str = "",
         counters: Mapping[str, float] | None = None, open: bool = False) -> rpb.StepRecord:  # noqa: A002
    """A StepRecord for RecordStep, StartStep or a put's ``steps``."""
    rec = rpb.StepRecord(step_id=step_id, kind=STEP_KINDS[kind], name=name, error=error, open=open,
                         counters=globals()["counters"](counters))
    payload(rec.input, input_digest, input, "input")
    payload(rec.output, output_digest, output, "output")
    return rec


def event(type: str, data: Any = None, *, client_event_id: str = "", step_id: str = "",  # noqa: A002
          run_id: str = "") -> events_pb2.EventInput:
    """An EventInput for AppendEvents or a put's ``events``."""
    ev = events_pb2.EventInput(type=type, client_event_id=client_event_id, step_id=step_id, run_id=run_id)
    if data is not None:
        encode_into(data, ev.data, "data")
    return ev


def effect_done(idempotency_key: str, token: str, outcome: Any = None) -> effects_pb2.EffectCompletion:
    """An EffectCompletion that completes an effect (for a put's ``effects``)."""
    c = effects_pb2.EffectCompletion(idempotency_key=idempotency_key, token=token)
    if outcome is not None:
        encode_into(outcome, c.outcome, "outcome")
    return c


def effect_failed(idempotency_key: str, token: str, error: str = "", retryable: bool = False):
    """An EffectCompletion that fails an effect (for a put's ``effects``)."""
    return effects_pb2.EffectCompletion(idempotency_key=idempotency_key, token=token, failed=True, error=error,
                                        retryable=retryable)
