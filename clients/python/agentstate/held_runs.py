"""held_runs: a claimed run, :class:`HeldRun` (sync) and :class:`AsyncHeldRun` (asyncio).

``client.runs.start`` / ``claim`` return one. Its calls carry the run id and
lease id: puts, writes, steps, events, effects, heartbeats, completion.
When the run was interrupted, cancelled, timed out or re-claimed after its
lease expired, they raise ``FailedPrecondition`` with reason
``RUN_NOT_ACTIVE`` or ``LEASE_LOST``: stop working on it. ``keep_alive``
heartbeats in the background: a daemon thread for :class:`HeldRun`, an
asyncio task for :class:`AsyncHeldRun`.

A sidecar restart does not lose a held run: the restarted sidecar gives
running leases one more lease timeout, so ``keep_alive`` treats UNAVAILABLE
and DEADLINE_EXCEEDED (any failure the server did not decide) as transient
and keeps trying until the lease itself would have expired. It reports the
run lost (``lost`` set, the returned event set) only when it is: the server
says so (``RUN_NOT_ACTIVE``, ``LEASE_LOST`` for a newer holder,
``RUN_NOT_FOUND``), or no renewal got through for a whole lease timeout
(:class:`~agentstate.errors.LeaseExpired`; counted on this process's clock
from when the last heartbeat's or the claim's answer came: the sidecar
renewed the lease just before it sent that answer, whereas a heartbeat
that waited through a restart was sent long before), after which the
sidecar is free to give the run to another holder.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterable, Mapping

from . import _requests as rq
from ._facet import AsyncFacet, Call, SyncFacet, unary
from .errors import AgentStateError, LeaseExpired
from .run_records import step
from .v1 import effects_pb2, events_pb2, runs_pb2 as rpb, threads_pb2
from .values import encode_into


#: ErrorInfo reasons after which a heartbeat will never succeed: the run is lost.
RUN_GONE = frozenset({"RUN_NOT_ACTIVE", "LEASE_LOST", "RUN_NOT_FOUND"})
#: Seconds between heartbeat attempts after a failure the call itself does not retry (e.g. INTERNAL).
RETRY_PAUSE = 0.1


class HeldRunCalls:
    """The calls of a claimed run, written once (see :mod:`agentstate._facet`) for :class:`HeldRun` and
    :class:`AsyncHeldRun`; ``keep_alive`` is each one's own."""

    def __init__(self, client, run: rpb.Run, lease: rpb.Lease) -> None:
        super().__init__(client)
        self.run = run
        self.lease = lease
        self.lost: Exception | None = None
        self._heartbeat_stop: threading.Event | asyncio.Event | None = None
        self._lease_until = time.monotonic() + self.lease_seconds

    run_id = property(lambda self: self.lease.run_id)
    lease_id = property(lambda self: self.lease.lease_id)
    thread_id = property(lambda self: self.lease.thread_id)
    resume_checkpoint_id = property(lambda self: self.lease.resume_checkpoint_id,
                                    doc="Where to continue: the run's last checkpoint, else where it started "
                                        '("" = empty thread).')

    @property
    def _ns(self) -> str:
        return self.client.namespace

    @property
    def lease_seconds(self) -> float:
        """The run's lease timeout (what each renewal is good for)."""
        d = self.run.lease_timeout
        return d.seconds + d.nanos / 1e9

    def lease_remaining(self) -> float:
        """Seconds until the lease expires unless renewed, as this process sees it (from when the last
        heartbeat was answered)."""
        return self._lease_until - time.monotonic()

    def _renewed(self) -> None:
        self._lease_until = max(self._lease_until, time.monotonic() + self.lease_seconds)

    def _after_failed_heartbeat(self, err: Exception) -> Exception | None:
        """The error that makes the run lost after a failed heartbeat, or None: try again."""
        if not isinstance(err, AgentStateError) or err.reason in RUN_GONE:
            return err
        if self.lease_remaining() > 0:
            return None
        expired = LeaseExpired(f"no heartbeat of run {self.run_id!r} got through for its lease timeout of "
                               f"{self.lease_seconds:g} s: its lease has expired, stop working on it "
                               f"(last failure: {err})")
        expired.__cause__ = err
        return expired

    def _stop_keep_alive(self) -> None:
        if self._heartbeat_stop is not None:
            self._heartbeat_stop.set()

    @unary
    def heartbeat(self, *, timeout: float | None = None) -> rpb.Run:
        """Renew the lease (safe to repeat: retried through a sidecar restart until ``timeout``)."""
        req = rpb.HeartbeatRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id)
        self.run = (yield Call(self.client.runs.stub.Heartbeat, req, timeout)).run
        self._renewed()
        return self.run

    @unary
    def complete(self, output: Any = None, *, interrupted: bool = False, request_id: str = "",
                 timeout: float | None = None) -> rpb.CompleteRunResponse:
        self._stop_keep_alive()
        req = rpb.CompleteRunRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id,
                                     interrupted=interrupted, request_id=request_id)
        if output is not None:
            encode_into(output, req.output, "output")
        resp = yield Call(self.client.runs.stub.CompleteRun, req, timeout)
        self.run = resp.run
        return resp

    @unary
    def fail(self, error: str = "", *, request_id: str = "", timeout: float | None = None) -> rpb.FailRunResponse:
        self._stop_keep_alive()
        req = rpb.FailRunRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id, error=error,
                                 request_id=request_id)
        resp = yield Call(self.client.runs.stub.FailRun, req, timeout)
        self.run = resp.run
        return resp

    # ------------------------------------------------------------ state writes

    @unary
    def put_checkpoint(self, channels: Mapping[str, Any], *, checkpoint_id: str = "", parent_id: str = "",
                       base_id: str = "", metadata: Mapping[str, Any] | None = None, extra: Any = None,
                       expected_head_etag: str | None = None, schema_version: int = 0,
                       steps: Iterable[rpb.StepRecord] = (), events: Iterable[events_pb2.EventInput] = (),
                       effects: Iterable[effects_pb2.EffectCompletion] = (), request_id: str = "",
                       timeout: float | None = None) -> threads_pb2.PutCheckpointResponse:
        """PutCheckpoint as this run, with steps, events and effect completions in the same transaction.
        ``parent_id`` defaults to nothing: pass the checkpoint you continue from."""
        req = rq.put_checkpoint_request(self._ns, self.thread_id, channels, checkpoint_id=checkpoint_id,
                                        parent_id=parent_id, base_id=base_id, checkpoint_ns=self.lease.checkpoint_ns,
                                        metadata=metadata, extra=extra, expected_head_etag=expected_head_etag,
                                        schema_version=schema_version, require_thread=False, request_id=request_id)
        req.checkpoint_id = checkpoint_id  # as given: without one the server names the run's checkpoint
        req.run_id, req.lease_id = self.run_id, self.lease_id
        req.steps.extend(steps)
        req.events.extend(events)
        req.effects.extend(effects)
        return (yield Call(self.client.threads.PutCheckpoint, req, timeout))

    @unary
    def put_writes(self, checkpoint_id: str, writes: Iterable[tuple], *, request_id: str = "",
                   timeout: float | None = None) -> threads_pb2.PutWritesResponse:
        """PutWrites as this run: tuples (task_id, idx, channel, value[, task_path[, replace]])."""
        req = rq.put_writes_request(self._ns, self.thread_id, checkpoint_id, writes, self.lease.checkpoint_ns,
                                    request_id)
        req.run_id, req.lease_id = self.run_id, self.lease_id
        return (yield Call(self.client.threads.PutWrites, req, timeout))

    def append_events(self, events: Iterable[events_pb2.EventInput], *, request_id: str = "",
                      timeout: float | None = None) -> events_pb2.AppendEventsResponse:
        return self.client.events.append(self.thread_id, events, run_id=self.run_id, lease_id=self.lease_id,
                                         request_id=request_id, timeout=timeout)

    # ------------------------------------------------------------ steps

    def _step_call(self, method: str, request_type, kind: str, name: str, request_id: str, timeout, fields) -> Call:
        req = request_type(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id,
                           step=step(kind, name, **fields), request_id=request_id)
        return Call(getattr(self.client.runs.stub, method), req, timeout)

    @unary
    def start_step(self, kind: str = "other", name: str = "", *, request_id: str = "",
                   timeout: float | None = None, **fields) -> rpb.Step:
        """StartStep; ``fields`` as :func:`step` (counters are what the step declares it will use)."""
        call = self._step_call("StartStep", rpb.StartStepRequest, kind, name, request_id, timeout, fields)
        return (yield call).step

    @unary
    def record_step(self, kind: str = "other", name: str = "", *, request_id: str = "",
                    timeout: float | None = None, **fields) -> rpb.Step:
        """RecordStep: a finished step; ``fields`` as :func:`step`."""
        call = self._step_call("RecordStep", rpb.RecordStepRequest, kind, name, request_id, timeout, fields)
        return (yield call).step

    def end_step(self, step_id: str, **fields) -> rpb.Step:
        return self.client.runs.end_step(self.run_id, step_id, **fields)

    # ------------------------------------------------------------ effects

    def begin_effect(self, idempotency_key: str, *, description: str = "", request_digest: str = "",
                     step_id: str = "", timeout: float | None = None) -> effects_pb2.BeginEffectResponse:
        return self.client.effects.begin(idempotency_key, self.run_id, self.lease_id, description=description,
                                         request_digest=request_digest, step_id=step_id, timeout=timeout)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(run_id={self.run_id!r}, thread_id={self.thread_id!r}, "
                f"lease_id={self.lease_id[:8]}...)")


class HeldRun(HeldRunCalls, SyncFacet):
    """A claimed run of the sync client (see module doc)."""

    def keep_alive(self, interval: float) -> threading.Event:
        """Heartbeat every ``interval`` seconds in a daemon thread until the returned event is set, or the
        run is lost: then the event is set and ``self.lost`` holds why (see module doc; a sidecar restart
        within the lease is ridden out)."""
        stop = threading.Event()
        self.lost = None

        def beat() -> Exception | None:
            while not stop.is_set():
                try:
                    self.heartbeat(timeout=max(self.lease_remaining(), 0.001))
                    return None
                except Exception as e:  # noqa: BLE001 - reported through self.lost
                    lost = None if stop.is_set() else self._after_failed_heartbeat(e)  # stopped: not lost
                    if lost is not None:
                        return lost
                stop.wait(min(RETRY_PAUSE, max(self.lease_remaining(), 0)))
            return None

        def loop():
            while not stop.wait(interval):
                lost = beat()
                if lost is not None:
                    self.lost = lost
                    stop.set()

        threading.Thread(target=loop, name=f"heartbeat-{self.run_id}", daemon=True).start()
        self._heartbeat_stop = stop
        return stop


class AsyncHeldRun(HeldRunCalls, AsyncFacet):
    """A claimed run of the asyncio client: the calls of :class:`HeldRun` as coroutines."""

    _heartbeat_task: asyncio.Task | None = None

    def keep_alive(self, interval: float) -> asyncio.Event:
        """Heartbeat every ``interval`` seconds in an asyncio task (of the running loop) until the returned
        event is set, or the run is lost: then the event is set and ``self.lost`` holds why (as
        :meth:`HeldRun.keep_alive`)."""
        stop = asyncio.Event()
        self.lost = None

        async def beat() -> Exception | None:
            while not stop.is_set():
                try:
                    await self.heartbeat(timeout=max(self.lease_remaining(), 0.001))
                    return None
                except Exception as e:  # noqa: BLE001 - reported through self.lost
                    lost = None if stop.is_set() else self._after_failed_heartbeat(e)  # stopped: not lost
                    if lost is not None:
                        return lost
                await _wait(stop, min(RETRY_PAUSE, max(self.lease_remaining(), 0)))
            return None

        async def loop():
            while not await _wait(stop, interval):
                lost = await beat()
                if lost is not None:
                    self.lost = lost
                    stop.set()

        self._heartbeat_task = asyncio.get_running_loop().create_task(loop(), name=f"heartbeat-{self.run_id}")
        self._heartbeat_stop = stop
        return stop


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` was set within ``seconds``."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except asyncio.TimeoutError:
        return False
    return True
