"""context: what the servicers of runs, events, artifacts and effects share at run time.

:class:`Ctx` holds the store, the :class:`Hub` that wakes watchers (WatchEvents,
ClaimRun waits) after a commit, the garbage collector's nudge and the default
lease; :func:`write` runs one call's transaction (idempotent per request_id)
and wakes the watchers of the threads it touched.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..errors import ApiError
from ..state import runstate
from ..state.runstate import Tx
from ..storage.layout import RunRec
from ..storage.store import Store
from . import idempotency, validate

DEFAULT_LEASE_MS = 30_000


class SaveTally:
    """Checkpoint saves (PutCheckpoint, and each put of a BatchWrite or StreamWrites) that succeeded and
    that failed, by ErrorReason: the save failure rate operators alert on (sidecar/metrics.py reads it)."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed: dict[str, int] = {}

    def succeeded(self, n: int = 1) -> None:
        self.ok += n

    def failure(self, e: BaseException, n: int = 1) -> None:
        if isinstance(e, asyncio.CancelledError) or n <= 0:
            return  # the caller went away: not the save's failure
        reason = e.reason if isinstance(e, ApiError) else "INTERNAL_ERROR"
        self.failed[reason] = self.failed.get(reason, 0) + n


@dataclass
class RetentionTotals:
    """What retention passes did since the server started (sidecar/metrics.py reads it)."""

    passes: int = 0
    removed: int = 0  # checkpoints removed by retention passes (the sweeper's and ApplyRetention's)
    deleted_threads: int = 0


@dataclass
class Ctx:
    """What the run, event, artifact and effect calls need from the server."""

    store: Store
    hub: "Hub"
    on_garbage: Callable[[], None] | None = None
    default_lease_ms: int = DEFAULT_LEASE_MS
    saves: SaveTally = field(default_factory=SaveTally)
    retention: RetentionTotals = field(default_factory=RetentionTotals)
    memory: Any = None  # state.memory.Memory, for GetContext's memory query (set by the server)

    def notify(self, touched: Iterable[tuple[str, str]]) -> None:
        self.hub.notify(touched)


class Hub:
    """Wakes watchers of a thread (WatchEvents, ClaimRun waits) after commits. Event-loop only."""

    #: Versions of keys nobody waits on are forgotten beyond this many keys. A watcher that read a version
    #: just before may then miss one wake-up; it re-reads on its next poll (WATCH_POLL_SECONDS).
    MAX_KEYS = 50_000

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], int] = {}
        self._waiters: dict[tuple[str, str], asyncio.Event] = {}
        self.closed = False

    def version(self, key: tuple[str, str]) -> int:
        return self._versions.get(key, 0)

    def notify(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            self._versions[key] = self._versions.get(key, 0) + 1
            ev = self._waiters.pop(key, None)
            if ev is not None:
                ev.set()
        if len(self._versions) > self.MAX_KEYS:
            self._versions = {k: v for k, v in self._versions.items() if k in self._waiters}

    def close(self) -> None:
        """The server is stopping: wake every waiter (watches and claim waits end with SHUTTING_DOWN)."""
        self.closed = True
        for ev in self._waiters.values():
            ev.set()
        self._waiters.clear()

    def check_open(self) -> None:
        if self.closed:
            raise ApiError("SHUTTING_DOWN", "the sidecar is shutting down; resume elsewhere or later")

    async def wait(self, key: tuple[str, str], version: int, timeout: float) -> None:
        """Return when ``key`` was notified after ``version`` was read, or after ``timeout``."""
        self.check_open()
        if self.version(key) != version:
            return
        ev = self._waiters.get(key)
        if ev is None:
            ev = self._waiters[key] = asyncio.Event()
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        self.check_open()


async def write(ctx: Ctx, ns: str, method: str, req, response_type, fn: Callable[[Tx], Any],
                durability: str | None = None):
    """Run ``fn(tx)`` in one write transaction (idempotent per request_id); wake watchers after commit."""
    def job(txn):
        tx = Tx(txn, ctx.store)

        def apply(_txn):
            resp = fn(tx)
            tx.flush()
            return resp

        resp = idempotency.run(txn, ctx.store.db, ns, method, req, response_type, apply)
        return resp, tx.touched, tx.garbage

    resp, touched, garbage = await ctx.store.run(job, durability)
    ctx.notify(touched)
    if garbage and ctx.on_garbage is not None:
        ctx.on_garbage()
    return resp




def holder(tx: Tx, ns: str, run_id: str, lease_id: str, tkey: int | None = None, field: str = "run_id") -> RunRec:
    """``runstate.check_holder`` for the ids of a request (each checked first, INVALID_ARGUMENT naming it)."""
    validate.ident(run_id, field)
    validate.ident(lease_id, "lease_id")
    return runstate.check_holder(tx, ns, run_id, lease_id, tkey, field)
