"""sweeper: the clock-driven task of conversations' idle expiry (ops/sweep.py does the work).

Every ``interval`` seconds it takes the due rows of ``ctimers`` and runs each in its own small write job
(move, close, or drop the thread record and queue its contents), then reclaims queued threads in jobs of at
most ``limits.SWEEP_RECLAIM_BATCH`` rows, then walks namespaces whose idle policy changed (1,000 threads a
job), and every ``retention_interval`` seconds applies the retention policies (api/retention.py
``run_pass``: plans in read snapshots off the event loop, removals in jobs of ``limits.RETENTION_BATCH``
checkpoints). Each job is one nested transaction of the group commit, like a request, so writers wait at most one
small job. :meth:`Sweeper.sweep` runs one whole pass (tests call it with an injected clock).
"""
from __future__ import annotations

import asyncio
import logging
import time

from .. import limits
from ..errors import ApiError
from ..ops import sweep
from ..state import convpolicy, convtimers
from ..state.runstate import Tx
from . import retention
from .context import Ctx

log = logging.getLogger("sidecar.sweeper")

MAX_ROWS_PER_PASS = 1000
WALK_BATCH = 1000


class Sweeper:
    def __init__(self, ctx: Ctx, interval: float = 1.0, reclaim_batch: int = limits.SWEEP_RECLAIM_BATCH,
                 retention_interval: float = 60.0) -> None:
        self.ctx = ctx
        self.retention_interval = retention_interval  # 0: retention policies are applied only on request
        self._retention_due = 0.0
        self._pruned_seen = 0
        self.retention_report: retention.Report | None = None  # the last pass's
        self.interval = interval
        self.reclaim_batch = reclaim_batch
        self._task: asyncio.Task | None = None
        self.counts: dict[str, int] = {}
        self.jobs = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sidecar-sweeper")

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
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.reason != "SHUTTING_DOWN":
                    log.warning("sweeper: %s", e)
            except Exception:  # noqa: BLE001 - the sweeper must keep going
                log.exception("sweep failed")
            await asyncio.sleep(self.interval)

    async def sweep(self) -> dict[str, int]:
        """One pass; returns what it did ({"closed": n, "deleted": n, "moved": n, "dropped": n, "reclaim_jobs": n})."""
        store = self.ctx.store
        done: dict[str, int] = {}
        with store.read() as txn:
            rows = convtimers.due(txn, store, store.clock(), MAX_ROWS_PER_PASS)
        for due_us, ns, thread_id, tkey in rows:
            def job(txn, row=(due_us, ns, thread_id, tkey)):
                tx = Tx(txn, store)
                what = sweep.idle_job(tx, *row)
                tx.flush()
                return what, tx.touched

            what, touched = await store.run(job)
            self.jobs += 1
            self.ctx.notify(touched)
            if what:
                done[what] = done.get(what, 0) + 1
        with store.read() as txn:
            fallbacks = convtimers.due_fallbacks(txn, store, store.clock(), MAX_ROWS_PER_PASS)
        for row in fallbacks:
            def fjob(txn, row=row):
                tx = Tx(txn, store)
                applied = sweep.fallback_job(tx, *row)
                tx.flush()
                return applied, tx.touched

            applied, touched = await store.run(fjob)
            self.jobs += 1
            self.ctx.notify(touched)
            if applied:
                done["fallbacks"] = done.get("fallbacks", 0) + 1
        if self.retention_interval > 0 and time.monotonic() >= self._retention_due:
            self._retention_due = time.monotonic() + self.retention_interval
            await self.retention()
        jobs = await self.reclaim()
        if jobs:
            done["reclaim_jobs"] = jobs
        with store.read() as txn:
            walks = convpolicy.walks(txn, store)
        for ns, walk_from in walks:
            await store.run(lambda txn, ns=ns, w=walk_from: sweep.walk_job(txn, store, ns, w, WALK_BATCH))
            self.jobs += 1
        for k, v in done.items():
            self.counts[k] = self.counts.get(k, 0) + v
        return done

    async def reclaim(self) -> int:
        """Delete the contents of queued threads (idle DELETE, retention's idle threads); returns the jobs."""
        store = self.ctx.store
        n = 0
        with store.read() as txn:
            more = convtimers.pending_reclaims(txn, store) > 0
        while more:
            more = await store.run(lambda txn: sweep.reclaim_job(txn, store, self.reclaim_batch))
            self.jobs += 1
            n += 1
        if n and self.ctx.on_garbage is not None:
            self.ctx.on_garbage()  # reclaimed threads' nodes (checkpoint values, item contents) may be garbage
        return n

    async def retention(self, ns: str | None = None, *, dry_run: bool = False) -> retention.Report:
        """One retention pass over every namespace with a policy (or ``ns``); idle threads it deletes are
        reclaimed right after."""
        report = await retention.run_pass(self.ctx, ns, dry_run=dry_run)
        self.jobs += report.jobs
        if not dry_run:
            self.retention_report = report
            pruned = self.ctx.store.stats.retention_pruned_on_put
            if pruned != self._pruned_seen:  # puts pruned by their policies: their nodes are garbage now
                self._pruned_seen = pruned
                if self.ctx.on_garbage is not None:
                    self.ctx.on_garbage()
            if report.deleted_threads:
                await self.reclaim()
            if report.removed_count or report.stale:
                log.info("retention: %d checkpoints removed, %d idle threads deleted, %d threads changed "
                         "meanwhile (%d jobs, longest %.1f ms)", report.removed_count, len(report.deleted_threads),
                         report.stale, report.jobs, report.max_job_seconds * 1000)
        return report
