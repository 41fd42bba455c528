"""runs: the RunService facet of the client (``client.runs``, and ``AsyncClient.runs`` with the same calls
as coroutines).

    with Client(addr) as c:
        held = c.runs.start("thread-1", input={"q": "hi"}, strategy="enqueue", create_thread=True, wait=60)
        put = held.put_checkpoint({"messages": ["hi"]}, steps=[step("model", "gpt", counters={"tokens_in": 12})],
                                  events=[event("progress", {"done": 1})])
        held.complete({"answer": 42})

    async with AsyncClient(addr) as c:
        held = await c.runs.start("thread-1", create_thread=True)
        await held.put_checkpoint({"messages": ["hi"]})
        await held.complete({"answer": 42})

``start`` and ``claim`` return a :class:`agentstate.held_runs.HeldRun`
(:class:`~agentstate.held_runs.AsyncHeldRun` from the asyncio client): it
carries the run id and lease id into every run-scoped call (puts, steps,
events, effects, heartbeats). When the run was interrupted, cancelled, timed
out or re-claimed after its lease expired, those calls raise
``FailedPrecondition`` with reason ``RUN_NOT_ACTIVE`` or ``LEASE_LOST``:
stop working on it.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ._facet import AsyncFacet, Call, SyncFacet, listing, pages, unary
from ._requests import fill_map
from .held_runs import AsyncHeldRun, HeldRun
from .run_records import (ON_LEASE_EXPIRED, STATUSES, STEP_KINDS, STRATEGIES, counters, duration, effect_done,
                          effect_failed, event, payload, status_name, step)
from .v1 import runs_pb2 as rpb, runs_pb2_grpc
from .values import encode_into


class RunCalls:
    """The RunService calls, written once (see :mod:`agentstate._facet`) for :class:`Runs` and
    :class:`AsyncRuns`; ``held_run`` is the class of the runs they hold."""

    held_run: type = HeldRun

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = runs_pb2_grpc.RunServiceStub(client.channel)

    @property
    def _ns(self) -> str:
        return self.client.namespace

    @unary
    def create(self, thread_id: str, *, input: Any = None, metadata: Mapping[str, Any] | None = None,  # noqa: A002
               strategy: str = "reject", run_id: str = "", checkpoint_ns: str = "",
               start_checkpoint_id: str = "", claim: bool = False, create_thread: bool = False,
               lease_timeout: float | None = None, on_lease_expired: str = "requeue", max_attempts: int = 0,
               timeout_seconds: float | None = None, budget: Mapping[str, float] | None = None,
               branch_thread_id: str = "", request_id: str = "",
               timeout: float | None = None) -> rpb.CreateRunResponse:
        """CreateRun. ``strategy``: reject, enqueue, interrupt, rollback or fork; ``lease_timeout`` and
        ``timeout_seconds`` in seconds; ``budget`` like :func:`counters`."""
        req = rpb.CreateRunRequest(namespace=self._ns, thread_id=thread_id, run_id=run_id,
                                   multitask_strategy=STRATEGIES[strategy], checkpoint_ns=checkpoint_ns,
                                   start_checkpoint_id=start_checkpoint_id, claim=claim,
                                   create_thread=create_thread, on_lease_expired=ON_LEASE_EXPIRED[on_lease_expired],
                                   max_attempts=max_attempts, budget=counters(budget),
                                   branch_thread_id=branch_thread_id, request_id=request_id)
        if input is not None:
            encode_into(input, req.input, "input")
        fill_map(req.metadata, metadata)
        if lease_timeout is not None:
            req.lease_timeout.CopyFrom(duration(lease_timeout))
        if timeout_seconds is not None:
            req.timeout.CopyFrom(duration(timeout_seconds))
        return (yield Call(self.stub.CreateRun, req, timeout))

    @unary
    def start(self, thread_id: str, *, wait: float = 0.0, timeout: float | None = None, **create) -> HeldRun:
        """Create a run and hold it: claimed at once when it became active, else claimed when its turn
        comes (waiting up to ``wait`` seconds; FailedPrecondition RUN_NOT_ACTIVE after that)."""
        resp = yield from RunCalls.create.plan(self, thread_id, claim=True, timeout=timeout, **create)
        if resp.HasField("lease"):
            return self.held_run(self.client, resp.run, resp.lease)
        return (yield from RunCalls.claim.plan(self, run_id=resp.run.run_id, wait=wait, timeout=timeout))

    @unary
    def claim(self, *, run_id: str = "", thread_id: str = "", wait: float = 0.0, request_id: str = "",
              timeout: float | None = None) -> HeldRun:
        """ClaimRun: by run id, or the active run of a thread; waits up to ``wait`` seconds."""
        req = rpb.ClaimRunRequest(namespace=self._ns, run_id=run_id, thread_id=thread_id, request_id=request_id)
        if wait:
            req.wait_timeout.CopyFrom(duration(wait))
        if timeout is None:
            timeout = max(self.client.timeout, wait + 10.0)
        resp = yield Call(self.stub.ClaimRun, req, timeout)
        return self.held_run(self.client, resp.run, resp.lease)

    @unary
    def get(self, run_id: str, *, timeout: float | None = None) -> rpb.Run:
        return (yield Call(self.stub.GetRun, rpb.GetRunRequest(namespace=self._ns, run_id=run_id), timeout)).run

    @listing
    def list(self, thread_id: str, *, statuses: Iterable[str] = (), page_size: int = 0,
             timeout: float | None = None):
        """The runs of a thread (Iterator / AsyncIterator of Run), optionally of some ``statuses``."""
        return pages(self.stub.ListRuns, lambda token: rpb.ListRunsRequest(
            namespace=self._ns, thread_id=thread_id, page_size=page_size, page_token=token,
            statuses=[STATUSES[s] for s in statuses]), "runs", timeout)

    @unary
    def cancel(self, run_id: str, reason: str = "", *, request_id: str = "",
               timeout: float | None = None) -> rpb.CancelRunResponse:
        req = rpb.CancelRunRequest(namespace=self._ns, run_id=run_id, reason=reason, request_id=request_id)
        return (yield Call(self.stub.CancelRun, req, timeout))

    @unary
    def resume(self, run_id: str, *, request_id: str = "", timeout: float | None = None) -> rpb.Run:
        req = rpb.ResumeRunRequest(namespace=self._ns, run_id=run_id, request_id=request_id)
        return (yield Call(self.stub.ResumeRun, req, timeout)).run

    @unary
    def heartbeat(self, run_id: str, lease_id: str, *, timeout: float | None = None) -> rpb.HeartbeatResponse:
        req = rpb.HeartbeatRequest(namespace=self._ns, run_id=run_id, lease_id=lease_id)
        return (yield Call(self.stub.Heartbeat, req, timeout))

    @unary
    def end_step(self, run_id: str, step_id: str, *, output: Any = None, output_digest: str = "", error: str = "",
                 counters: Mapping[str, float] | None = None, request_id: str = "",
                 timeout: float | None = None) -> rpb.Step:
        req = rpb.EndStepRequest(namespace=self._ns, run_id=run_id, step_id=step_id, error=error,
                                 counters=globals()["counters"](counters), request_id=request_id)
        payload(req.output, output_digest, output, "output")
        return (yield Call(self.stub.EndStep, req, timeout)).step

    @listing
    def list_steps(self, run_id: str, *, page_size: int = 0, timeout: float | None = None):
        """The steps of a run (Iterator / AsyncIterator of Step)."""
        return pages(self.stub.ListSteps, lambda token: rpb.ListStepsRequest(
            namespace=self._ns, run_id=run_id, page_size=page_size, page_token=token), "steps", timeout)

    @unary
    def thread_usage(self, thread_id: str, *, timeout: float | None = None) -> rpb.GetThreadUsageResponse:
        req = rpb.GetThreadUsageRequest(namespace=self._ns, thread_id=thread_id)
        return (yield Call(self.stub.GetThreadUsage, req, timeout))

    @listing
    def list_branches(self, thread_id: str, *, page_size: int = 0, timeout: float | None = None):
        """The branches of a thread (Iterator / AsyncIterator of Branch)."""
        return pages(self.stub.ListBranches, lambda token: rpb.ListBranchesRequest(
            namespace=self._ns, thread_id=thread_id, page_size=page_size, page_token=token), "branches", timeout)

    @unary
    def promote(self, thread_id: str, branch_thread_id: str, *, expected_head_etag: str | None = None,
                request_id: str = "", timeout: float | None = None) -> rpb.PromoteBranchResponse:
        req = rpb.PromoteBranchRequest(namespace=self._ns, thread_id=thread_id, branch_thread_id=branch_thread_id,
                                       request_id=request_id)
        if expected_head_etag is not None:
            req.expected_head_etag = expected_head_etag
        return (yield Call(self.stub.PromoteBranch, req, timeout))


class Runs(RunCalls, SyncFacet):
    """RunService calls (``client.runs``)."""


class AsyncRuns(RunCalls, AsyncFacet):
    """RunService calls of the asyncio client (``async_client.runs``): coroutines, list calls async
    iterators; ``start`` and ``claim`` give an :class:`AsyncHeldRun`."""

    held_run = AsyncHeldRun


__all__ = ["Runs", "AsyncRuns", "HeldRun", "AsyncHeldRun", "step", "event", "effect_done", "effect_failed",
           "counters", "status_name", "STRATEGIES", "ON_LEASE_EXPIRED", "STEP_KINDS", "STATUSES"]
