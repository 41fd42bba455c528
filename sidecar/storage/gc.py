"""gc: garbage collection of nodes no checkpoint, pending write or artifact reaches.

Mark and sweep that never blocks writers for long and never removes a
reachable blob:

1. A writer job switches on the store's keep-set. From then on every write
   job adds the id of each node it stores or refers to (new nodes, reused
   nodes, kept roots, copied manifests, artifact chunks) to it.
2. Mark: in a read snapshot taken after (1), walk every manifest and pending
   write, artifact and upload in progress down to the leaves (roots_of).
3. Candidates: nodes of that snapshot that were not marked.
4. Sweep, in writer jobs of SWEEP_BATCH deletes: first mark everything the
   keep-set reaches *in the current state*, then delete the candidates still
   unmarked. Anything a write touched after the snapshot is in the keep-set,
   so it and everything under it survive. Candidates go in descending id
   order: a node's children always have smaller ids than the node (they are
   written first), so parents go before their children and every stored
   node keeps all its descendants at every moment — a write that finds a
   node by hash may rely on its whole subtree being there. While a large
   write is staged against a read snapshot (nodes.stage), sweeps wait
   (Store.hold_sweeps): what that snapshot showed stays.
5. Switch the keep-set off. The same cycle also drops expired request ids.

A crash in the middle loses nothing: each sweep batch is one transaction and
only deletes nodes proven unreachable at that moment (with their hash index
entries).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from . import hotpath as hp
from . import encryption, layout, nodes, records, stats, verify
from .store import Store

log = logging.getLogger("sidecar.gc")

SWEEP_BATCH = 2000
HOLD_WAIT = 0.05  # seconds a sweep waits while a large write is staged (Store.hold_sweeps)


@dataclass
class GcStats:
    reachable_blobs: int = 0
    freed_blobs: int = 0
    freed_bytes: int = 0
    seconds: float = 0.0


def roots_of(txn, store: Store):
    """Every node id a record of layout.ROOT_REFS refers to directly."""
    for table, refs in layout.ROOT_REFS:
        decode = layout.RECORD_DECODERS[table].decode
        for _, raw in txn.cursor(db=store.db[table]).iternext():
            yield from refs(decode(raw))


def mark(get, start, marked: set[bytes], missing: list | None = None) -> None:
    """Add every node id reachable from ``start`` to ``marked`` (``get``: id -> record or None)."""
    stack = [i for i in start if i not in marked]
    marked.update(stack)
    while stack:
        node_id = stack.pop()
        rec = get(node_id)
        if rec is None:
            if missing is not None:
                missing.append(node_id)
            continue
        for child in hp.stored_children(rec[hp.HASH_SIZE:]):
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
        self.totals = stats.GcTotals()  # read by the metrics endpoint

    @property
    def runs(self) -> int:
        return self.totals.runs

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
            try:
                result = self._collect()
            except BaseException:
                self.totals.failures += 1
                raise
            totals = self.totals
            totals.runs += 1
            totals.freed_blobs += result.freed_blobs
            totals.freed_bytes += result.freed_bytes
            totals.seconds.observe(result.seconds)
            return result

    def _collect(self) -> GcStats:
        store = self.store
        started = time.monotonic()
        stats = GcStats()
        node_db = store.db["nodes"]

        def switch_on(txn):
            store.gc_keep = set()

        store.write(switch_on, frees=True)
        try:
            marked: set[bytes] = set()
            with store.read() as txn:
                get = txn.get
                mark(lambda i: get(i, db=node_db), roots_of(txn, store), marked)
                candidates = [k for k in (bytes(k) for k in txn.cursor(db=node_db).iterprev(values=False))
                              if k not in marked]
            stats.reachable_blobs = len(marked)
            for i in range(0, len(candidates), SWEEP_BATCH):
                batch = candidates[i:i + SWEEP_BATCH]
                while True:  # a large write being staged holds sweeps (Store.hold_sweeps): wait for it
                    swept = store.write(lambda txn, batch=batch: self._sweep(txn, batch, marked), frees=True)
                    if swept is not None:
                        break
                    time.sleep(HOLD_WAIT)
                freed, nbytes = swept
                stats.freed_blobs += freed
                stats.freed_bytes += nbytes
        finally:
            def switch_off(txn):
                store.gc_keep = None
                records.expire_requests(txn, store.db)

            store.write(switch_off, frees=True)
        if stats.freed_blobs:
            # LMDB hands out the pages a transaction freed only from the second commit after it on. One
            # small commit now, so that the next write can use the space at once: on a full disk it is
            # the only space there is (tests/test_faults.py test_disk_full_then_space_again).
            store.write(lambda txn: txn.put(b"gc_runs", layout.u64(self.runs + 1), db=store.db["meta"]), frees=True)
        stats.seconds = time.monotonic() - started
        log.info("gc: %d reachable, freed %d blobs (%d bytes) in %.3fs", stats.reachable_blobs,
                 stats.freed_blobs, stats.freed_bytes, stats.seconds)
        return stats

    def _sweep(self, txn, batch: list[bytes], marked: set[bytes]) -> tuple[int, int] | None:
        store = self.store
        if store.sweep_holds:
            return None  # (owner thread: no hold can begin while this job runs)
        node_db = store.db["nodes"]
        node_db, scope_db = store.db["nodes"], store.db["nodescope"]
        keep = store.gc_keep or set()
        if keep:
            get = txn.get
            mark(lambda i: get(i, db=node_db), list(keep), marked)
            keep.clear()
        freed = nbytes = 0
        for node_id in batch:
            if node_id in marked:
                continue
            rec = txn.pop(node_id, db=node_db)
            if rec is not None:
                scope = txn.pop(node_id, db=scope_db)  # an encrypted namespace's node: indexed under its scope
                prefix = b"" if scope is None else bytes(scope[:encryption.SCOPE_SIZE])
                nodes.index_delete(txn, store, rec[:hp.HASH_SIZE], node_id, prefix)
                freed += 1
                nbytes += len(rec)
        return freed, nbytes


def check_integrity(store: Store) -> dict:
    """The summary of storage/verify.verify over the serving ``store`` (AdminService.CheckIntegrity):
    checkpoints and nodes checked, nodes referenced but missing, and up to 100 problems, one line each."""
    report = verify.verify(store.env, store.db, keys=store.keys)  # shredded values: key_missing, not damage
    problems = [f"missing node {node}" for node in report.missing_nodes[:50]]
    problems += [f"{d.table} {d.key}: {d.problem}" for d in report.damaged]
    problems += [f"{r.what} {r.namespace}/{r.thread_id}/{r.checkpoint_ns}/{r.checkpoint_id} reaches damaged or "
                 f"missing node(s) {', '.join(r.nodes)}" for r in report.reached]
    return {"checked_checkpoints": report.checkpoints, "checked_blobs": report.nodes,
            "missing_blobs": report.missing_total, "problems": problems[:100]}
