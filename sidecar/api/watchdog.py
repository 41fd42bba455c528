"""watchdog: the clock-driven task that fires due lease and deadline timers, and the leases after a restart.

Leases and run deadlines are rows of the ``timers`` table ordered by due
time (state/runs.py). The :class:`Watchdog` looks for due ones every
``interval`` seconds and fires each in its own write job that re-checks the
run first (``runs.fire_timer``), then wakes the watchers of the threads it
changed. A timer whose job fails is retried a minute later; the others go on.
"""
from __future__ import annotations

import asyncio
import logging
import time

from ..errors import ApiError
from ..state import runs
from ..state.runstate import Tx
from ..storage.store import Store, now_us
from .context import Ctx

log = logging.getLogger("sidecar.runs")

FAILED_TIMER_RETRY_SECONDS = 60
MAX_TIMERS_PER_TICK = 1000


def extend_leases_after_restart(store: Store) -> int:
    """Give every RUNNING lease one more lease timeout from now (no holder could heartbeat while the
    sidecar was down). Returns how many were extended."""
    def job(txn):
        tx = Tx(txn, store)
        n = runs.extend_leases(tx)
        tx.flush()
        return n

    return store.write(job)


class Watchdog:
    """The clock-driven task: fires due lease and deadline timers (see module doc)."""

    def __init__(self, ctx: Ctx, interval: float = 1.0) -> None:
        self.ctx = ctx
        self.interval = interval
        self._task: asyncio.Task | None = None
        self._failed: dict[bytes, float] = {}  # timer key -> when to try again
        self.fired = 0
        #: what fired timers did ("lease_requeued", "lease_held", "timeout", "stale"; "failed": a job
        #: that raised), read by the metrics endpoint
        self.actions: dict[str, int] = {}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sidecar-watchdog")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.reason != "SHUTTING_DOWN":
                    log.warning("watchdog: %s", e)
            except Exception:  # noqa: BLE001 - the watchdog must keep going
                log.exception("watchdog tick failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> int:
        store = self.ctx.store
        now = now_us()
        with store.read() as txn:
            due_keys = runs.due_timers(txn, store, now, MAX_TIMERS_PER_TICK)
        if not due_keys:
            return 0

        def job(key):
            def run(txn):
                tx = Tx(txn, store)
                action = runs.fire_timer(tx, key)
                tx.flush()
                return tx.touched, action
            return run

        mono = time.monotonic()
        due_keys = [k for k in due_keys if self._failed.get(k, 0) <= mono]
        futures = [(k, asyncio.wrap_future(store.submit(job(k)))) for k in due_keys]
        for key, fut in futures:
            try:
                touched, action = await fut
            except ApiError:
                raise
            except Exception:  # noqa: BLE001 - one bad timer must not stop the others
                log.exception("watchdog: timer %s failed; retrying in %d s", key.hex(), FAILED_TIMER_RETRY_SECONDS)
                self._failed[key] = mono + FAILED_TIMER_RETRY_SECONDS
                self._count("failed")
                continue
            self._count(action or "stale")
            self._failed.pop(key, None)
            self.ctx.notify(touched)
        self.fired += len(due_keys)
        return len(due_keys)

    def _count(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1
