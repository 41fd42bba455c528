"""metrics: every Prometheus metric of the sidecar, defined here and nowhere else.

``--metrics-listen HOST:PORT`` serves them as Prometheus text at ``/metrics``
with the official ``prometheus_client`` library (its WSGI server, on a thread
of its own). Two kinds of source:

* per-call metrics, updated as calls end: :meth:`Metrics.wrap` wraps every RPC
  behaviour of the agentstate.v1 services (``api/service.add_to_server``'s
  ``wrap``), counting calls by service, method and status code, timing them,
  and writing the request log line (``sidecar/logs.py``);
* collected metrics, read when Prometheus scrapes: the store's plain counters
  and histograms (``storage/stats.py``), LMDB's map, the write-ahead log's
  files, the garbage collector's totals, the watchdog's actions, the
  checkpoint save tally (``api/context.SaveTally``), a census of runs and
  effects in one read snapshot (cached for ``CENSUS_SECONDS``), and the
  compactions: pending (an entry count), claimed and overdue (bounded reads,
  at most ``COMPACTION_SCAN_LIMIT`` records each) and the sweeper's fallbacks; the usage counters and
  quotas per namespace (``storage/usage.namespaces``, at most ``USAGE_NAMESPACE_LIMIT`` namespaces).

Nothing below this layer imports prometheus_client (tests/test_layers.py).
docs/operations.md lists the metrics with example alert rules.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
from socketserver import ThreadingMixIn
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.utils import floatToGoString

from . import __version__, logs
from .state import convtimers, effects, runs, runstate, summaries
from .storage import hotpath, stats, usage, wal

log = logging.getLogger("sidecar.metrics")

#: seconds a census of runs and effects (one pass over their records) is reused between scrapes
CENSUS_SECONDS = 1.0
#: records the claimed and overdue compaction gauges read at most per scrape (beyond: a lower bound)
COMPACTION_SCAN_LIMIT = 10_000
# namespaces given usage and quota gauges per scrape (in name order; the rest are counted in
# sidecar_namespace_usage_omitted)
USAGE_NAMESPACE_LIMIT = 1_000
REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0, 60.0)
_EFFECT_STATES = {effects.PENDING: "pending", effects.DONE: "done", effects.FAILED: "failed",
                  effects.UNKNOWN: "unknown"}


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"expected HOST:PORT, not {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"port out of range in {text!r}")
    return host, int(port)


class Metrics:
    """The registry of one sidecar (not prometheus_client's global one: tests run several in a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_cpu_seconds_total, open fds
        self.requests = Counter("sidecar_requests", "RPCs handled, by service, method and gRPC status code",
                                ["service", "method", "code"], registry=r)
        self.latency = Histogram("sidecar_request_duration_seconds",
                                 "Time from a call's start to its status (streams: their whole life)",
                                 ["service", "method"], buckets=REQUEST_BUCKETS, registry=r)
        self.in_progress = Gauge("sidecar_requests_in_progress", "RPCs started and not yet ended",
                                 ["service", "method"], registry=r)
        self._sources: _Sources | None = None
        self._http = None
        self.address: str | None = None

    # ------------------------------------------------------------ per call

    def wrap(self, service: str, method, behavior: Callable) -> Callable:
        """The behaviour of one RPC, counted, timed and logged (``api/service.add_to_server``'s wrap)."""
        name = method.name
        full = f"{service}/{name}"
        children: list = []  # (latency, in progress) of this method, made at its first call
        by_code: dict[str, Any] = {}
        ids = None if method.client_streaming else logs.id_getter(method.input_type)

        def begin():
            if not children:
                children.extend((self.latency.labels(service, name), self.in_progress.labels(service, name)))
            children[1].inc()
            return time.perf_counter()

        def finish(started: float, code: str, request, context) -> None:
            elapsed = time.perf_counter() - started
            latency, in_progress = children
            in_progress.dec()
            latency.observe(elapsed)
            child = by_code.get(code)
            if child is None:
                child = by_code[code] = self.requests.labels(service, name, code)
            child.inc()
            logs.request(full, code, elapsed, ids, request, context)

        if method.server_streaming:
            async def streaming(request, context):
                started = begin()
                code = "OK"
                try:
                    async for item in behavior(request, context):
                        yield item
                    code = _code(context, None)
                except BaseException as e:
                    code = _code(context, e)
                    raise
                finally:
                    finish(started, code, request, context)

            return streaming

        async def unary(request, context):
            started = begin()
            code = "OK"
            try:
                resp = await behavior(request, context)
                code = _code(context, None)
                return resp
            except BaseException as e:
                code = _code(context, e)
                raise
            finally:
                finish(started, code, request, context)

        return unary

    # ------------------------------------------------------------ collected

    def watch(self, store, collector, ctx, watchdog) -> None:
        """Collect the state of these (a running sidecar's parts) at every scrape."""
        self._sources = _Sources(store, collector, ctx, watchdog)
        self.registry.register(self._sources)

    def watch_sweeper(self, sweeper) -> None:
        """Also collect what the conversations' sweeper (api/sweeper.py) did (it starts after :meth:`watch`)."""
        if self._sources is not None:
            self._sources.sweeper = sweeper

    def serve(self, listen: str, authorizer=None) -> str:
        """Start the HTTP endpoint on ``HOST:PORT`` (port 0: any free one); returns ``host:port``. With an
        ``authorizer`` (api/auth.Authorizer, --auth-file) a scrape needs an admin bearer token: 401 without
        a valid one, 403 with a weaker one (the metrics describe the whole store)."""
        host, port = parse_listen(listen)
        disable_created_metrics()  # no *_created series: the process start time is process_start_time_seconds
        app = make_wsgi_app(self.registry)
        if authorizer is not None:
            app = _bearer_only(app, authorizer)
        self._http = make_server(host, port, app, _ThreadingWSGIServer, handler_class=_QuietHandler)
        threading.Thread(target=self._http.serve_forever, name="sidecar-metrics", daemon=True).start()
        bound = self._http.server_address[1]
        self.address = f"{listen.rpartition(':')[0]}:{bound}"
        return self.address

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - scrapes are not logged
        pass


def _bearer_only(app, authorizer):
    """The WSGI ``app`` behind an admin bearer token (api/auth.Authorizer.check_http)."""
    from .errors import ApiError  # noqa: PLC0415

    def guarded(environ, start_response):
        try:
            authorizer.check_http(environ.get("HTTP_AUTHORIZATION"), "admin")
        except ApiError as e:
            code = authorizer.http_status(e)
            headers = [("Content-Type", "text/plain; charset=utf-8")]
            if code == 401:
                headers.append(("WWW-Authenticate", "Bearer"))
            start_response("401 Unauthorized" if code == 401 else "403 Forbidden", headers)
            return [f"{e.reason}: {e}\n".encode()]
        return app(environ, start_response)

    return guarded


def _code(context, error: BaseException | None) -> str:
    """The status code a call ended with (an abort set it on the context before raising)."""
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"
    code = None
    try:
        code = context.code()
    except Exception:  # noqa: BLE001 - a context without one
        pass
    if code is None:
        return "OK" if error is None else "UNKNOWN"
    if isinstance(code, int):  # some grpc versions hand out the number
        code = next((c for c in grpc.StatusCode if c.value[0] == code), None)
        if code is None:
            return "UNKNOWN"
    return code.name


def _histogram(name: str, doc: str, h: stats.Histogram) -> HistogramMetricFamily:
    buckets = [(floatToGoString(bound), n) for bound, n in h.cumulative()]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h.sum)


class _Sources:
    """A custom collector: reads the sidecar's parts when Prometheus scrapes."""

    def __init__(self, store, collector, ctx, watchdog) -> None:
        self.store = store
        self.collector = collector
        self.ctx = ctx
        self.watchdog = watchdog
        self.sweeper = None
        self._census: tuple[float, Any] | None = None
        self._census_lock = threading.Lock()

    def describe(self):
        return []  # collected families vary (labels of what happened); do not call collect() at register

    def census(self):
        """(runs by status, held runs, effects by state), at most CENSUS_SECONDS old."""
        with self._census_lock:
            now = time.monotonic()
            if self._census is None or now - self._census[0] >= CENSUS_SECONDS:
                store = self.store
                with store.read() as txn:
                    by_status, held = runs.count_by_status(txn, store)
                    by_state = effects.count_by_state(txn, store, time.time_ns() // 1000)
                self._census = (now, (by_status, held, by_state))
            return self._census[1]

    def collect(self):
        store = self.store
        s = store.stats
        info = GaugeMetricFamily("sidecar_build_info", "The sidecar's version, hot path and durability mode "
                                 "(value 1)", labels=["version", "native", "durability"])
        info.add_metric([__version__, str(hotpath.NATIVE).lower(), store.durability], 1)
        yield info

        # the write path
        yield GaugeMetricFamily("sidecar_store_writes_in_flight",
                                "Writes submitted and not yet acknowledged (the queue OVERLOADED bounds)",
                                value=store._inflight)
        yield GaugeMetricFamily("sidecar_store_writes_in_flight_limit",
                                "Writes in flight at which new ones get OVERLOADED (--max-queue)",
                                value=store.max_queue)
        yield GaugeMetricFamily("sidecar_store_writes_awaiting_commit",
                                "Writes applied to the open transaction, waiting for its synced commit",
                                value=len(store._waiting))
        yield GaugeMetricFamily("sidecar_store_loop_lag_seconds",
                                "How late the owner event loop runs callbacks (OVERLOADED past 0.5 s)",
                                value=store.loop_lag)
        yield CounterMetricFamily("sidecar_store_commits", "LMDB write transactions committed (each with fsync)",
                                  value=store.commits)
        yield CounterMetricFamily("sidecar_store_commit_failures",
                                  "LMDB commits that failed (map full: grown and retried; disk errors)",
                                  value=s.commit_failures)
        yield _histogram("sidecar_store_commit_seconds",
                         "Duration of one LMDB commit, fsync of data and meta pages included", s.commit_seconds)
        yield _histogram("sidecar_store_group_commit_size", "Write jobs one LMDB commit made durable",
                         s.group_size)
        failures = CounterMetricFamily("sidecar_store_write_failures",
                                       "Write jobs that ended in an error, by ErrorReason (nothing of them kept)",
                                       labels=["reason"])
        for reason, n in sorted(s.write_failures.items()):
            failures.add_metric([reason], n)
        yield failures
        yield CounterMetricFamily("sidecar_store_map_grows", "Times the LMDB map was doubled", value=s.map_grows)

        # write-ahead log (process durability)
        yield _histogram("sidecar_wal_append_seconds", "Duration of one write-ahead log batch write (one write(), no fsync)",
                         s.wal_append_seconds)
        wal_bytes = 0
        for _, name in wal.wal_files(store.path):
            try:
                wal_bytes += os.path.getsize(name)
            except FileNotFoundError:
                pass
        yield GaugeMetricFamily("sidecar_wal_bytes", "Bytes in write-ahead log files (process durability)",
                                value=wal_bytes)

        # LMDB
        info = store.env.info()
        psize = store.env.stat()["psize"]
        yield GaugeMetricFamily("sidecar_lmdb_map_size_bytes", "The LMDB map size (it doubles when full)",
                                value=info["map_size"])
        yield GaugeMetricFamily("sidecar_lmdb_used_bytes", "Bytes of the map in use (pages up to the last used)",
                                value=(info["last_pgno"] + 1) * psize)
        yield GaugeMetricFamily("sidecar_lmdb_data_file_bytes", "Size of data.mdb on disk",
                                value=store.data_file_bytes())
        yield GaugeMetricFamily("sidecar_lmdb_readers", "LMDB reader slots in use", value=info["num_readers"])
        yield GaugeMetricFamily("sidecar_disk_free_bytes", "Free bytes on the data directory's file system "
                                "(the map can only grow into these)", value=shutil.disk_usage(store.path).free)

        # garbage collection
        if self.collector is not None:
            t = self.collector.totals
            yield CounterMetricFamily("sidecar_gc_runs", "Garbage collections finished", value=t.runs)
            yield CounterMetricFamily("sidecar_gc_failures", "Garbage collections that failed", value=t.failures)
            yield CounterMetricFamily("sidecar_gc_freed_blobs", "Nodes (blobs) garbage collection deleted",
                                      value=t.freed_blobs)
            yield CounterMetricFamily("sidecar_gc_freed_bytes", "Bytes of nodes garbage collection deleted",
                                      value=t.freed_bytes)
            yield _histogram("sidecar_gc_duration_seconds", "Duration of one garbage collection", t.seconds)

        # checkpoint saves
        if self.ctx is not None:
            saves = self.ctx.saves
            failed = sum(saves.failed.values())
            yield CounterMetricFamily("sidecar_checkpoint_saves",
                                      "Checkpoint saves attempted (PutCheckpoint, puts in BatchWrite and "
                                      "StreamWrites)", value=saves.ok + failed)
            fam = CounterMetricFamily("sidecar_checkpoint_save_failures",
                                      "Checkpoint saves that failed, by ErrorReason", labels=["reason"])
            for reason, n in sorted(saves.failed.items()):
                fam.add_metric([reason], n)
            yield fam

        # the watchdog
        if self.watchdog is not None:
            actions = dict(self.watchdog.actions)
            fam = CounterMetricFamily("sidecar_watchdog_actions",
                                      "Due timers the watchdog fired, by what they did (lease_requeued: run back "
                                      "in the queue to resume from its last checkpoint; lease_held: held for an "
                                      "operator; timeout: run ended TIMEOUT; stale; failed)", labels=["action"])
            for action, n in sorted(actions.items()):
                fam.add_metric([action], n)
            yield fam
            yield CounterMetricFamily("sidecar_lease_expiries", "Run leases that expired (requeued or held)",
                                      value=actions.get("lease_requeued", 0) + actions.get("lease_held", 0))

        # census
        by_status, held, by_state = self.census()
        fam = GaugeMetricFamily("sidecar_runs", "Runs by status (all namespaces)", labels=["status"])
        for status, label in sorted(runstate.STATUS_NAMES.items()):
            fam.add_metric([label], by_status.get(status, 0))
        yield fam
        yield GaugeMetricFamily("sidecar_runs_held", "Runs held for an operator after their lease expired",
                                value=held)
        fam = GaugeMetricFamily("sidecar_effects", "Effects by state as read now (all namespaces)",
                                labels=["state"])
        for state, label in sorted(_EFFECT_STATES.items()):
            fam.add_metric([label], by_state.get(state, 0))
        yield fam

        # compactions (docs/operations.md "Metrics": what each costs)
        with store.read() as txn:
            now = store.clock()
            pending = summaries.count_pending(txn, store)
            claimed, _ = summaries.count_claimed(txn, store, now, COMPACTION_SCAN_LIMIT)
            overdue, _ = convtimers.count_due_fallbacks(txn, store, now, COMPACTION_SCAN_LIMIT)
        yield GaugeMetricFamily("sidecar_compactions_pending", "Compactions due and not yet summarised, claimed "
                                "or not (all namespaces)", value=pending)
        yield GaugeMetricFamily("sidecar_compactions_claimed", "Pending compactions a worker holds under a live "
                                "lease", value=claimed)
        yield GaugeMetricFamily("sidecar_compactions_overdue", "Pending compactions past their fallback time "
                                "(fallback_after since due): no worker summarised them and the sweeper has not "
                                "applied the fallback yet", value=overdue)
        if self.sweeper is not None:
            yield CounterMetricFamily("sidecar_compaction_fallbacks", "Fallback summaries the sweeper applied "
                                      "because no worker summarised a compaction within fallback_after",
                                      value=self.sweeper.counts.get("fallbacks", 0))
        # usage and quotas per namespace (storage/usage.py; docs/security.md "Quotas")
        with store.read() as txn:
            rows, omitted = usage.namespaces(txn, store, USAGE_NAMESPACE_LIMIT)
        fams = {name: GaugeMetricFamily(f"sidecar_namespace_{name}", doc, labels=["namespace"]) for name, doc in (
            ("bytes", "Charged bytes of the namespace (the max_bytes quota counts these)"),
            ("threads", "Threads of the namespace"),
            ("items", "Conversation items, memory items and artifact versions of the namespace"),
            ("checkpoints", "Live checkpoints of the namespace"))}
        quota = GaugeMetricFamily("sidecar_namespace_quota", "The quota in effect for the namespace (its own or "
                                  "the server's default; 0: unlimited)", labels=["namespace", "quota"])
        for ns, u, q in rows:
            for name, value in (("bytes", u.nbytes), ("threads", u.threads), ("items", u.items),
                                ("checkpoints", u.checkpoints)):
                fams[name].add_metric([ns], max(0, value))
            for name in usage.QUOTAS:
                quota.add_metric([ns, name], getattr(q, name))
        yield from fams.values()
        yield quota
        yield GaugeMetricFamily("sidecar_namespace_usage_omitted", f"Namespaces past the first "
                                f"{USAGE_NAMESPACE_LIMIT} (by name) that have no usage gauges", value=omitted)
        # retention (api/retention.py: the sweeper's passes and ApplyRetention)
        if self.ctx is not None:
            r = self.ctx.retention
            yield CounterMetricFamily("sidecar_retention_passes", "Retention passes that removed or could remove "
                                      "(dry runs not counted)", value=r.passes)
            yield CounterMetricFamily("sidecar_retention_checkpoints_removed",
                                      "Checkpoints retention passes removed (those of deleted idle threads too)",
                                      value=r.removed)
            yield CounterMetricFamily("sidecar_retention_threads_deleted", "Idle threads retention deleted",
                                      value=r.deleted_threads)
