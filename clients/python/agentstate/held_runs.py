"""held_runs: a claimed run, :class:`HeldRun` (sync) and :class:`AsyncHeldRun` (asyncio).

``client.runs.start`` / ``claim`` return one. Its calls carry the run id and
lease id: puts, writes, steps, events, effects, heartbeats, completion.
When the run was interrupted, cancelled, timed out or re-claimed after its
lease expired, they raise ``FailedPrecondition`` with reason
``RUN_NOT_ACTIVE`` or ``LEASE_LOST``: stop working on it. ``keep_alive``
heartbeats in the background: a daemon thread for :class:`HeldRun`, an
asyncio task for :class:`AsyncHeldRun`.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterable, Mapping

from . import _requests as rq
from ._facet import AsyncFacet, Call, SyncFacet, unary
from .run_records import step
from .v1 import effects_pb2, events_pb2, runs_pb2 as rpb, threads_pb2
from .values import encode_into


class HeldRunCalls:
    """The calls of a claimed run, written once (see :mod:`agentstate._facet`) for :class:`HeldRun` and
    :class:`AsyncHeldRun`; ``keep_alive`` is each one's own."""

    def __init__(self, client, run: rpb.Run, lease: rpb.Lease) -> None:
        super().__init__(client)
        self.run = run
        self.lease = lease
        self.lost: Exception | None = None
        self._heartbeat_stop: threading.Event | asyncio.Event | None = None

    run_id = property(lambda self: self.lease.run_id)
    lease_id = property(lambda self: self.lease.lease_id)
    thread_id = property(lambda self: self.lease.thread_id)
    resume_checkpoint_id = property(lambda self: self.lease.resume_checkpoint_id,
                                    doc="Where to continue: the run's last checkpoint, else where it started "
                                        '("" = empty thread).')

    @property
    def _ns(self) -> str:
        return self.client.namespace

    def _stop_keep_alive(self) -> None:
        if self._heartbeat_stop is not None:
            self._heartbeat_stop.set()

    @unary
    def heartbeat(self, *, timeout: float | None = None) -> rpb.Run:
        req = rpb.HeartbeatRequest(namespace=self._ns, run_id=self.run_id, lease_id=self.lease_id)
        self.run = (yield Call(self.client.runs.stub.Heartbeat, req, timeout)).run
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
        """Heartbeat every ``interval`` seconds in a daemon thread until the returned event is set
        (or a heartbeat fails: then the event is set and ``self.lost`` holds the error)."""
        stop = threading.Event()
        self.lost = None

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


class AsyncHeldRun(HeldRunCalls, AsyncFacet):
    """A claimed run of the asyncio client: the calls of :class:`HeldRun` as coroutines."""

    _heartbeat_task: asyncio.Task | None = None

    def keep_alive(self, interval: float) -> asyncio.Event:
        """Heartbeat every ``interval`` seconds in an asyncio task (of the running loop) until the returned
        event is set (or a heartbeat fails: then the event is set and ``self.lost`` holds the error)."""
        stop = asyncio.Event()
        self.lost = None

        async def loop():
            while not await _wait(stop, interval):
                try:
                    await self.client.runs.heartbeat(self.run_id, self.lease_id)
                except Exception as e:  # noqa: BLE001 - reported through self.lost
                    self.lost = e
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
