"""_writer: a saver's ordered outbox, for requests that cannot go out at once.

A put or put_writes whose caller waits for it is sent from the caller's
thread when nothing is queued (``send_now``); otherwise — write-behind
requests, or waited ones while others are queued — it joins the outbox. One
background thread per saver sends the outbox in the order requests joined
it on one StreamWrites stream (``agentstate.streams.WriteStream``): requests
are pipelined — sent without waiting for the answers to earlier ones,
several to a message when they pile up — and applied by the sidecar in that
order, each acknowledged on its own. A broken stream (sidecar restarting) is
reopened and the unacknowledged requests sent again (every request is
idempotent) until ``retry_for`` seconds have passed. A waiting caller waits for its request's future; reads of the saver
wait for everything queued before them (``barrier``), so a saver always
reads its own writes.

Failures are never silent. A request that fails for good fails its future;
when nobody was waiting for it (write-behind), the writer also records the
error and every later call of the saver raises :class:`WriteBehindError`
until :meth:`Writer.clear_failure` — an accepted checkpoint that could not
be stored is reported, not dropped. Requests queued after it are still sent,
in order.

Each request gets its own outcome; a put refused with BASE_MISMATCH (the
sidecar's parent is not what the saver believed) is planned again without
any assumption about the parent (``replan``) and sent again, in order.

Lingering. A request nobody waits for (a pipelined graph run's, or
write-behind) stays in the outbox until a barrier asks for what is queued
(the end of the run, a read of the saver, ``flush``), a waited request joins
it, ``LINGER`` seconds have passed since the oldest one joined, or a
message's worth (``MAX_BATCH``) is queued. The requests of one LangGraph
turn (three puts and two put_writes a few milliseconds apart) then travel in
one stream message, which the sidecar applies in one loop pass and makes
durable in one group commit: one LMDB commit (two fsyncs) per turn instead
of one per request that happened to arrive alone, and the thread
and process wake-ups on both sides about halved (measured in the 50-turn chat: commits
2.5-2.8 -> 1.0 per turn, context switches per turn 56-61 -> 33-36 in the
sidecar, ~100 -> 49-60 in the client). What is stored and when a waiting
caller returns do not change; a request nobody waits for reaches the
sidecar at most ``LINGER`` later than before.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Callable

from ..client import Client
from ..errors import FailedPrecondition
from ..v1 import threads_pb2 as pb

log = logging.getLogger("agentstate.langgraph")

#: seconds a request nobody waits for may stay in the outbox for more to join it (see "Lingering")
LINGER = 0.005
#: queued requests that go out at once, lingering or not (a stream message carries at most 256)
MAX_BATCH = 256



class WriteBehindError(RuntimeError):
    """A checkpoint or write the saver accepted without waiting could not be stored."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"a write accepted earlier could not be stored: {cause}")
        self.cause = cause


@dataclass
class Item:
    request: Any  # pb.PutCheckpointRequest | pb.PutWritesRequest
    on_done: Callable[[Any], Any] | None = None  # called with the response before the future resolves
    replan: Callable[[Client], Any] | None = None  # a fresh request after BASE_MISMATCH, sent synchronously
    waited: bool = True  # a caller waits for the future (else: write-behind)
    direct: bool = False  # sent from the caller's thread, not through the outbox
    future: Future = field(default_factory=Future)
    size: int = 0
    queued_at: float = 0.0  # time.monotonic() when it joined the outbox


class Writer:
    def __init__(self, client_factory: Callable[[], Client], namespace: str, retry_for: float) -> None:
        self._client_factory = client_factory
        self.namespace = namespace
        self.retry_for = retry_for
        self._queue: deque[Item] = deque()
        self._cond = threading.Condition()
        self._last: Future | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._busy = False  # requests are on their way
        self._waited = 0  # queued requests whose callers wait for them (they go out at once)
        self._urgent = False  # a barrier asked for what is queued: it goes out at once
        self._outstanding = 0  # requests sent and not yet acknowledged
        self._stream = None  # the WriteStream (made on first use)
        self.failure: BaseException | None = None
        self.batches = 0  # groups of requests handed to the stream (for tests and benchmarks)
        self.sent = 0  # requests stored

    # ------------------------------------------------------------ callers

    def check(self) -> None:
        """Raise when an accepted write failed (see clear_failure)."""
        if self.failure is not None:
            raise WriteBehindError(self.failure)

    def clear_failure(self) -> BaseException | None:
        err, self.failure = self.failure, None
        return err

    def submit(self, item: Item) -> Future:
        self.check()
        item.size = item.request.ByteSize()
        with self._cond:
            if self._closed:
                raise RuntimeError("the saver is closed")
            item.queued_at = time.monotonic()
            self._queue.append(item)
            self._waited += item.waited
            self._last = item.future
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentstate-saver-writer", daemon=True)
                self._thread.start()
                _live.add(self)
            self._cond.notify()
        return item.future

    def idle(self) -> bool:
        """Nothing queued or being sent: a request may go out directly without overtaking one."""
        with self._cond:
            return not self._queue and not self._busy

    def send_now(self, client: Client, item: Item) -> Any:
        """Send one request from the caller's thread (when idle()); returns on_done's value or raises."""
        return self._finish(item, self._call_one(client, item))

    def barrier(self) -> Future:
        """A future that resolves when everything queued so far is stored (or has failed)."""
        with self._cond:
            last = self._last
            if self._queue:  # someone waits for what is queued: no lingering
                self._urgent = True
                self._cond.notify()
        if last is None:
            done: Future = Future()
            done.set_result(None)
            return done
        out: Future = Future()
        last.add_done_callback(lambda _: _release(out))
        return out

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued so far is stored; raise if an accepted write failed."""
        self.barrier().result(timeout)
        self.check()

    def close(self, timeout: float | None = 60.0) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        _live.discard(self)

    # ------------------------------------------------------------ the thread

    def _take(self) -> list[Item] | None:
        with self._cond:
            while True:
                while not self._queue:
                    if self._closed:
                        return None
                    self._cond.wait()
                if self._closed or self._urgent or self._waited or len(self._queue) >= MAX_BATCH:
                    break
                left = self._queue[0].queued_at + LINGER - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)  # lingering: more may join, or a barrier ask for it
            self._urgent = False
            self._waited = 0
            batch = list(self._queue)
            self._queue.clear()
            self._outstanding += len(batch)
            self._busy = True
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                if self._stream is not None:
                    self._stream.close(5)
                return
            self._send_batch(batch)
            # (no reference to the batch is kept while the thread waits for the next one: its puts' plans
            # hold the caller's channel values, which must not outlive the run because of the saver)
            del batch

    def _send_batch(self, batch: list[Item]) -> None:
        for item in batch:
            try:
                fut = self._get_stream().send(item.request)
            except BaseException as e:  # noqa: BLE001 - never let the thread die with items pending
                self._settle(item, None, e)
                continue
            fut.add_done_callback(lambda f, item=item: self._settle(item, f, None))
        self.batches += 1

    def _client(self) -> Client:
        return self._client_factory()

    def _get_stream(self):
        ws = self._stream
        if ws is None or ws._broken is not None:
            ws = self._stream = self._client().write_stream(timeout=self.retry_for)
        return ws

    def _settle(self, item: Item, fut, error: BaseException | None) -> None:
        """An acknowledgement (in stream order): finish the item, replanning a put the sidecar refused
        with BASE_MISMATCH and sending it again synchronously (later ones wait for it)."""
        try:
            if error is None:
                error = fut.exception()
            if error is None:
                self._done(item, fut.result())
            elif isinstance(error, FailedPrecondition) and error.reason == "BASE_MISMATCH" and item.replan:
                client = self._client()
                try:
                    item.request = item.replan(client)
                    resp = client._call(self._method(client, item), item.request, self.retry_for)
                except BaseException as e:  # noqa: BLE001 - reported through the future
                    self._fail(item, e)
                else:
                    self._done(item, resp)
            else:
                self._fail(item, error)
        finally:
            with self._cond:
                self._outstanding -= 1
                if not self._outstanding and not self._queue:
                    self._busy = False

    @staticmethod
    def _method(client: Client, item: Item):
        return (client.threads.PutCheckpoint if isinstance(item.request, pb.PutCheckpointRequest)
                else client.threads.PutWrites)

    def _call_one(self, client: Client, item: Item) -> Any:
        method = self._method(client, item)
        try:
            return client._call(method, item.request, self.retry_for)
        except FailedPrecondition as e:
            if e.reason != "BASE_MISMATCH" or item.replan is None:
                raise
            item.request = item.replan(client)
            return client._call(method, item.request, self.retry_for)

    def _finish(self, item: Item, resp: Any) -> Any:
        self.sent += 1
        return item.on_done(resp) if item.on_done is not None else resp

    def _done(self, item: Item, resp: Any) -> None:
        try:
            value = self._finish(item, resp)
        except BaseException as e:  # noqa: BLE001
            self._fail(item, e)
            return
        item.future.set_result(value)

    def _fail(self, item: Item, err: BaseException) -> None:
        if not item.waited and self.failure is None:
            self.failure = err
            log.error("a write-behind request failed: %s", err)
        item.future.set_exception(err)
        if not item.waited:
            item.future.exception()  # mark retrieved: the failure is reported through check()


def _release(waiter: Future) -> None:
    """Resolve a barrier's future, unless its waiter gave up (an asyncio task awaiting it was cancelled, which
    cancels the future)."""
    try:
        waiter.set_result(None)
    except InvalidStateError:
        pass


_live: weakref.WeakSet[Writer] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:  # pragma: no cover - process teardown
    deadline = time.monotonic() + 30
    for w in list(_live):
        try:
            w.barrier().result(max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001
            pass
