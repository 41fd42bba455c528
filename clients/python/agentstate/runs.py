"""runs: the RunService facet of the client (``client.runs``) and :class:`HeldRun`, a claimed run.

    with Client(addr) as c:
        held = c.runs.start("thread-1", input={"q": "hi"}, strategy="enqueue", create_thread=True, wait=60)
        put = held.put_checkpoint({"messages": ["hi"]}, steps=[step("model", "gpt", counters={"tokens_in": 12})],
                                  events=[event("progress", {"done": 1})])
        held.complete({"answer": 42})

A :class:`HeldRun` carries the run id and lease id into every run-scoped
call (puts, steps, events, effects, heartbeats). When the run was
interrupted, cancelled, timed out or re-claimed after its lease expired,
those calls raise ``FailedPrecondition`` with reason ``RUN_NOT_ACTIVE`` or
``LEASE_LOST``: stop working on it.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from google.protobuf import duration_pb2

from .v1 import effects_pb2, events_pb2, runs_pb2 as rpb, runs_pb2_grpc, threads_pb2
from .values import channel_write, check_key, encode_into

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

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


def _fill_map(target, values: Mapping[str, Any] | None, field: str = "metadata") -> None:
    for k, v in (values or {}).items():
        encode_into(v, target[check_key(k, field)], f"{field}[{k!r}]")


def _duration(seconds: float | None) -> duration_pb2.Duration | None:
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


def _payload(out: rpb.StepPayload, digest: str, body: Any, field: str) -> None:
    out.digest = digest
    if body is not None:
        encode_into(body, out.body, f"{field}.body")


def step(kind: str = "other", name: str = "", *, step_id: str = "", input: Any = None, input_digest: str = "",
         output: Any = None, output_digest: str = "", error: str = "",
         counters: Mapping[str, float] | None = None, open: bool = False) -> rpb.StepRecord:  # noqa: A002
    """A StepRecord for RecordStep, StartStep or a put's ``steps``."""
    rec = rpb.StepRecord(step_id=step_id, kind=STEP_KINDS[kind], name=name, error=error, open=open,
                         counters=globals()["counters"](counters))
    _payload(rec.input, input_digest, input, "input")
    _payload(rec.output, output_digest, output, "output")
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


class Runs:
    """RunService calls (``client.runs``)."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.stub = runs_pb2_grpc.RunServiceStub(client.channel)

    @property
    def _ns(self) -> str:
        return self.client.namespace

    def _call(self, method, request, timeout):
        return self.client._call(method, request, timeout)

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
        _fill_map(req.metadata, metadata)
        if lease_timeout is not None:
            req.lease_timeout.CopyFrom(_duration(lease_timeout))
        if timeout_seconds is not None:
            req.timeout.CopyFrom(_duration(timeout_seconds))
        return self._call(self.stub.CreateRun, req, timeout)

    def start(self, thread_id: str, *, wait: float = 0.0, timeout: float | None = None, **create) -> "HeldRun":
        """Create a run and hold it: claimed at once when it became active, else claimed when its turn
        comes (waiting up to ``wait`` seconds; FailedPrecondition RUN_NOT_ACTIVE after that)."""
        resp = self.create(thread_id, claim=True, timeout=timeout, **create)
        if resp.HasField("lease"):
            return HeldRun(self.client, resp.run, resp.lease)
        return self.claim(run_id=resp.run.run_id, wait=wait, timeout=timeout)

    def claim(self, *, run_id: str = "", thread_id: str = "", wait: float = 0.0, request_id: str = "",
              timeout: float | None = None) -> "HeldRun":
        """ClaimRun: by run id, or the active run of a thread; waits up to ``wait`` seconds."""
        req = rpb.ClaimRunRequest(namespace=self._ns, run_id=run_id, thread_id=thread_id, request_id=request_id)
        if wait:
            req.wait_timeout.CopyFrom(_duration(wait))
        if timeout is None:
            timeout = max(self.client.timeout, wait + 10.0)
        resp = self._call(self.stub.ClaimRun, req, timeout)
        return HeldRun(self.client, resp.run, resp.lease)

    def get(self, run_id: str, *, timeout: float | None = None) -> rpb.Run:
        return self._call(self.stub.GetRun, rpb.GetRunRequest(namespace=self._ns, run_id=run_id), timeout).run

    def list(self, thread_id: str, *, statuses: Iterable[str] = (), page_size: int = 0,
             timeout: float | None = None) -> Iterator[rpb.Run]:
        token = ""
        while True:
            req = rpb.ListRunsRequest(namespace=self._ns, thread_id=thread_id, page_size=page_size,
                                      page_token=token, statuses=[STATUSES[s] for s in statuses])
            resp = self._call(self.stub.ListRuns, req, timeout)
            yield from resp.runs
            token = resp.next_page_token
            if not token:
                return

    def cancel(self, run_id: str, reason: str = "", *, request_id: str = "",
               timeout: float | None = None) -> rpb.CancelRunResponse:
        req = rpb.CancelRunRequest(namespace=self._ns, run_id=run_id, reason=reason, request_id=request_id)
        return self._call(self.stub.CancelRun, req, timeout)

    def resume(self, run_id: str, *, request_id: str = "", timeout: float | None = None) -> rpb.Run:
        req = rpb.ResumeRunRequest(namespace=self._ns, run_id=run_id, request_id=request_id)
        return self._call(self.stub.ResumeRun, req, timeout).run

    def heartbeat(self, run_id: str, lease_id: str, *, timeout: float | None = None) -> rpb.HeartbeatResponse:
        req = rpb.HeartbeatRequest(namespace=self._ns, run_id=run_id, lease_id=lease_id)
        return self._call(self.stub.Heartbeat, req, timeout)

    def end_step(self, run_id: str, step_id: str, *, output: Any = None, output_digest: str = "", error: str = "",
                 counters: Mapping[str, float] | None = None, request_id: str = "",
                 timeout: float | None = None) -> rpb.Step:
        req = rpb.EndStepRequest(namespace=self._ns, run_id=run_id, step_id=step_id, error=error,
                                 counters=globals()["counters"](counters), request_id=request_id)
        _payload(req.output, output_digest, output, "output")
        return self._call(self.stub.EndStep, req, timeout).step

    def list_steps(self, run_id: str, *, page_size: int = 0, timeout: float | None = None) -> Iterator[rpb.Step]:
        token = ""
        while True:
            req = rpb.ListStepsRequest(namespace=self._ns, run_id=run_id, page_size=page_size, page_token=token)
            resp = self._call(self.stub.ListSteps, req, timeout)
            yield from resp.steps
            token = resp.next_page_token
            if not token:
                return

    def thread_usage(self, thread_id: str, *, timeout: float | None = None) -> rpb.GetThreadUsageResponse:
        req = rpb.GetThreadUsageRequest(namespace=self._ns, thread_id=thread_id)
        return self._call(self.stub.GetThreadUsage, req, timeout)

    def list_branches(self, thread_id: str, *, page_size: int = 0,
                      timeout: float | None = None) -> Iterator[rpb.Branch]:
        token = ""
        while True:
            req = rpb.ListBranchesRequest(namespace=self._ns, thread_id=thread_id, page_size=page_size,
                                          page_token=token)
            resp = self._call(self.stub.ListBranches, req, timeout)
            yield from resp.branches
            token = resp.next_page_token
            if not token:
                return

    def promote(self, thread_id: str, branch_thread_id: str, *, expected_head_etag: str | None = None,
                request_id: str = "", timeout: float | None = None) -> rpb.PromoteBranchResponse:
        req = rpb.PromoteBranchRequest(namespace=self._ns, thread_id=thread_id, branch_thread_id=branch_thread_id,
                                       request_id=request_id)
        if expected_head_etag is not None:
            req.expected_head_etag = expected_head_etag
        return self._call(self.stub.PromoteBranch, req, timeout)


class HeldRun:
    """A claimed run: its calls carry run_id and lease_id (see module doc)."""

    def __init__(self, client: "Client", run: rpb.Run, lease: rpb.Lease) -> None:
        self.client = client
        self.run = run
        self.lease = lease
        self._heartbeat_stop: threading.Event | None = None

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    @property
    def thread_id(self) -> str:
        return self.lease.thread_id

    @property
    def resume_checkpoint_id(self) -> str:
        """Where to continue: the run's last checkpoint, else where it started ("" = empty thread)."""
        return self.lease.resume_checkpoint_id

    @property
    def _ns(self) -> str:
        return self.client.namespace

    def heartbeat(self, *, timeout: float | None = None) -> rpb.Run:
        self.run = self.client.runs.heartbeat(self.run_id, self.lease_id, timeout=timeout).run
        return self.run

    def keep_alive(self, interval: float) -> threading.Event:
        """Heartbeat every ``interval`` seconds in a daemon thread until the returned event is set
        (or a heartbeat fails: then the event is set and ``self.lost`` holds the error)."""
        stop = threading.Event()
        self.lost: Exception | None = None

        def loop():
            while not stop.wait(interval):
                try:
                    self.client.runs.heartbeat(self.run_id, self.lease_id)
                except Exception as e:  # noqa: BLE001 - reported through self.lost
                    self.lost = e
                    stop.set()

        threading.Thread(target=loop, name=f"heartbeat-{self.run_id}", daemon=True).start()
        self._heartbeat_stop = stop
        return stop

    def _stop_keep_alive(self) -> None:
        if self._heartbeat_stop is not None:
            self._heartbeat_stop.set()

    def complete(self, output: Any = None, *, interrupted: bool = False, request_id: str = "",
                 timeout: float | None = None) -> rpb.CompleteRunResponse:
        self._stop_keep_alive()
        req = rpb.CompleteRunRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id,
                                     interrupted=interrupted, request_id=request_id)
        if output is not None:
            encode_into(output, req.output, "output")
        resp = self.client._call(self.client.runs.stub.CompleteRun, req, timeout)
        self.run = resp.run
        return resp

    def fail(self, error: str = "", *, request_id: str = "", timeout: float | None = None) -> rpb.FailRunResponse:
        self._stop_keep_alive()
        req = rpb.FailRunRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id, error=error,
                                 request_id=request_id)
        resp = self.client._call(self.client.runs.stub.FailRun, req, timeout)
        self.run = resp.run
        return resp

    # ------------------------------------------------------------ state writes

    def put_checkpoint(self, channels: Mapping[str, Any], *, checkpoint_id: str = "", parent_id: str = "",
                       base_id: str = "", metadata: Mapping[str, Any] | None = None, extra: Any = None,
                       expected_head_etag: str | None = None, schema_version: int = 0,
                       steps: Iterable[rpb.StepRecord] = (), events: Iterable[events_pb2.EventInput] = (),
                       effects: Iterable[effects_pb2.EffectCompletion] = (), request_id: str = "",
                       timeout: float | None = None) -> threads_pb2.PutCheckpointResponse:
        """PutCheckpoint as this run, with steps, events and effect completions in the same transaction.
        ``parent_id`` defaults to nothing: pass the checkpoint you continue from."""
        req = threads_pb2.PutCheckpointRequest(
            namespace=self._ns, thread_id=self.thread_id, checkpoint_ns=self.lease.checkpoint_ns,
            checkpoint_id=checkpoint_id, parent_checkpoint_id=parent_id, base_checkpoint_id=base_id,
            schema_version=schema_version, request_id=request_id, run_id=self.run_id, lease_id=self.lease_id,
            steps=list(steps), events=list(events), effects=list(effects))
        for name, value in channels.items():
            channel_write(value, req.channels[check_key(name, "channels")], f"channels[{name!r}]")
        _fill_map(req.metadata, metadata)
        if extra is not None:
            encode_into(extra, req.extra, "extra")
        if expected_head_etag is not None:
            req.expected_head_etag = expected_head_etag
        return self.client._call(self.client.threads.PutCheckpoint, req, timeout)

    def put_writes(self, checkpoint_id: str, writes: Iterable[tuple], *, request_id: str = "",
                   timeout: float | None = None) -> threads_pb2.PutWritesResponse:
        """PutWrites as this run: tuples (task_id, idx, channel, value[, task_path[, replace]])."""
        req = threads_pb2.PutWritesRequest(namespace=self._ns, thread_id=self.thread_id,
                                           checkpoint_ns=self.lease.checkpoint_ns, checkpoint_id=checkpoint_id,
                                           request_id=request_id, run_id=self.run_id, lease_id=self.lease_id)
        for i, w in enumerate(writes):
            task_id, idx, channel, value, *rest = w
            pw = req.writes.add(task_id=task_id, idx=idx, channel=channel, task_path=rest[0] if rest else "",
                                replace=bool(rest[1]) if len(rest) > 1 else False)
            encode_into(value, pw.value, f"writes[{i}].value")
        return self.client._call(self.client.threads.PutWrites, req, timeout)

    def append_events(self, events: Iterable[events_pb2.EventInput], *, request_id: str = "",
                      timeout: float | None = None) -> events_pb2.AppendEventsResponse:
        return self.client.events.append(self.thread_id, events, run_id=self.run_id, lease_id=self.lease_id,
                                         request_id=request_id, timeout=timeout)

    # ------------------------------------------------------------ steps

    def start_step(self, kind: str = "other", name: str = "", *, request_id: str = "",
                   timeout: float | None = None, **fields) -> rpb.Step:
        """StartStep; ``fields`` as :func:`step` (counters are what the step declares it will use)."""
        req = rpb.StartStepRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id,
                                   step=step(kind, name, **fields), request_id=request_id)
        return self.client._call(self.client.runs.stub.StartStep, req, timeout).step

    def record_step(self, kind: str = "other", name: str = "", *, request_id: str = "",
                    timeout: float | None = None, **fields) -> rpb.Step:
        req = rpb.RecordStepRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id,
                                    step=step(kind, name, **fields), request_id=request_id)
        return self.client._call(self.client.runs.stub.RecordStep, req, timeout).step

    def end_step(self, step_id: str, **fields) -> rpb.Step:
        return self.client.runs.end_step(self.run_id, step_id, **fields)

    # ------------------------------------------------------------ effects

    def begin_effect(self, idempotency_key: str, *, description: str = "", request_digest: str = "",
                     step_id: str = "", timeout: float | None = None) -> effects_pb2.BeginEffectResponse:
        return self.client.effects.begin(idempotency_key, self.run_id, self.lease_id, description=description,
                                         request_digest=request_digest, step_id=step_id, timeout=timeout)

    def __repr__(self) -> str:
        return f"HeldRun(run_id={self.run_id!r}, thread_id={self.thread_id!r}, lease_id={self.lease_id[:8]}...)"
