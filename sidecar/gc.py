"""gc: garbage collection of blobs no checkpoint or pending write reaches.

Mark and sweep that never blocks writers for long and never removes a
reachable blob:

1. A writer job switches on the store's keep-set. From then on every write
   job adds each hash it stores or refers to (new nodes, kept roots, copied
   manifests) to it.
2. Mark: in a read snapshot taken after (1), walk every manifest and pending
   write down to the leaves.
3. Candidates: blobs of that snapshot that were not marked.
4. Sweep, in writer jobs of SWEEP_BATCH deletes: first mark everything the
   keep-set reaches *in the current state*, then delete the candidates still
   unmarked. Anything a write touched after the snapshot is in the keep-set,
   so it and everything under it survive.
5. Switch the keep-set off. The same cycle also drops expired request ids.

A crash in the middle loses nothing: each sweep batch is one transaction and
only deletes blobs proven unreachable at that moment.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from . import hotpath as hp
from . import idempotency, layout
from .store import Store

log = logging.getLogger("sidecar.gc")

SWEEP_BATCH = 2000


@dataclass
class GcStats:
    reachable_blobs: int = 0
    freed_blobs: int = 0
    freed_bytes: int = 0
    seconds: float = 0.0


def roots_of(txn, store: Store):
    """Every hash a manifest or pending write refers to directly."""
    for _, raw in txn.cursor(db=store.db["ckpts"]).iternext():
        m = layout.manifest_decoder.decode(raw)
        for _, root in m.channels:
            yield root
        if m.extra is not None:
            yield m.extra
    for _, raw in txn.cursor(db=store.db["writes"]).iternext():
        yield layout.write_decoder.decode(raw).value


def mark(get, start, marked: set[bytes], missing: list | None = None) -> None:
    """Add every hash reachable from ``start`` to ``marked`` (``get`` returns node bytes or None)."""
    stack = [h for h in start if h not in marked]
    marked.update(stack)
    while stack:
        h = stack.pop()
        node = get(h)
        if node is None:
            if missing is not None:
                missing.append(h)
            continue
        for child in hp.children(node):
            if child not in marked:
                marked.add(child)
                stack.append(child)


class GarbageCollector:
    """Runs collections on demand or shortly after deletes (one at a time)."""

    def __init__(self, store: Store, delay: float = 2.0) -> None:
        self.store = store
        self.delay = delay
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._timer_lock = threading.Lock()
        self.runs = 0

    def soon(self) -> None:
        """Schedule a collection ``delay`` seconds from now (coalescing requests)."""
        with self._timer_lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.delay, self._scheduled)
            self._timer.daemon = True
            self._timer.start()

    def _scheduled(self) -> None:
        with self._timer_lock:
            self._timer = None
        try:
            self.collect()
        except Exception:  # noqa: BLE001 - a background run must not kill the process
            log.exception("background garbage collection failed")

    def cancel(self) -> None:
        with self._timer_lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def collect(self) -> GcStats:
        with self._lock:
            return self._collect()

    def _collect(self) -> GcStats:
        store = self.store
        started = time.monotonic()
        stats = GcStats()
        blobs = store.db["blobs"]

        def switch_on(txn):
            store.gc_keep = set()

        store.write(switch_on)
        try:
            marked: set[bytes] = set()
            with store.read() as txn:
                get = txn.get
                mark(lambda h: get(h, db=blobs), roots_of(txn, store), marked)
                candidates = [bytes(k) for k in txn.cursor(db=blobs).iternext(values=False) if bytes(k) not in marked]
            stats.reachable_blobs = len(marked)
            for i in range(0, len(candidates), SWEEP_BATCH):
                batch = candidates[i:i + SWEEP_BATCH]
                freed, nbytes = store.write(lambda txn, batch=batch: self._sweep(txn, batch, marked))
                stats.freed_blobs += freed
                stats.freed_bytes += nbytes
        finally:
            def switch_off(txn):
                store.gc_keep = None
                idempotency.expire(txn, store.db)

            store.write(switch_off)
        stats.seconds = time.monotonic() - started
        self.runs += 1
        log.info("gc: %d reachable, freed %d blobs (%d bytes) in %.3fs", stats.reachable_blobs,
                 stats.freed_blobs, stats.freed_bytes, stats.seconds)
        return stats

    def _sweep(self, txn, batch: list[bytes], marked: set[bytes]) -> tuple[int, int]:
        store = self.store
        blobs = store.db["blobs"]
        keep = store.gc_keep or set()
        if keep:
            get = txn.get
            mark(lambda h: get(h, db=blobs), list(keep), marked)
            keep.clear()
        freed = nbytes = 0
        for h in batch:
            if h in marked:
                continue
            node = txn.pop(h, db=blobs)
            if node is not None:
                freed += 1
                nbytes += len(node)
        return freed, nbytes


def check_integrity(store: Store) -> dict:
    """Walk everything reachable; report references to missing blobs."""
    marked: set[bytes] = set()
    missing: list[bytes] = []
    with store.read() as txn:
        blobs = store.db["blobs"]
        get = txn.get
        mark(lambda h: get(h, db=blobs), roots_of(txn, store), marked, missing)
        checkpoints = txn.stat(store.db["ckpts"])["entries"]
    problems = [f"missing blob {h.hex()}" for h in missing[:100]]
    return {"checked_checkpoints": checkpoints, "checked_blobs": len(marked) - len(missing),
            "missing_blobs": len(missing), "problems": problems}
