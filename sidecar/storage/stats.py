"""stats: plain counters and histograms the store and the garbage collector keep about themselves.

No metrics library here: these are Python numbers updated on the owner thread
(or under a lock by the collector) and read, whenever someone asks, by the
top layer (``sidecar.metrics`` turns them into Prometheus families). Reading
them from another thread may see a histogram mid-update by one observation;
that is fine for monitoring.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

#: seconds: 50 us .. 10 s (a synced LMDB commit is typically 0.1-20 ms)
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0)
#: writes acknowledged by one commit
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Histogram:
    """Counts of observations at or below each upper bound (cumulative when read), their sum and count."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), ending with (inf, count)."""
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            out.append((bound, total))
        return out


@dataclass
class StoreStats:
    """What the store's write path did since it opened (owner thread writes, anyone reads)."""

    commit_failures: int = 0  # commits LMDB refused (map full and grown, disk errors)
    #: write jobs that ended in an error, by ErrorReason (or exception type): their caller got the error and
    #: nothing of them was kept (a RetryJob is prepared again by its caller)
    write_failures: dict[str, int] = field(default_factory=dict)
    map_grows: int = 0
    commit_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    group_size: Histogram = field(default_factory=lambda: Histogram(GROUP_BUCKETS))
    wal_append_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    #: checkpoints LIMIT_ACTION_PRUNE removed in puts' transactions (ops/retention.py; a put that failed after
    #: pruning counts too): the sweeper schedules a garbage collection when it grew
    retention_pruned_on_put: int = 0


@dataclass
class GcTotals:
    """What the garbage collector did since the server started."""

    runs: int = 0
    failures: int = 0
    freed_blobs: int = 0
    freed_bytes: int = 0
    seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
