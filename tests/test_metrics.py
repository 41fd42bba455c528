"""`--metrics-listen`: Prometheus text at /metrics, scraped over HTTP after real RPCs.

Each test reads the metrics before and after what it does and checks how the values moved (the
sidecar is shared by the module's tests, so absolute values are only checked where nothing else
can change them).
"""
from __future__ import annotations

import socket
import time
import urllib.request
import uuid

import grpc
import pytest
from conftest import SidecarProcess, expect_error
from prometheus_client.parser import text_string_to_metric_families

from agentstate import Client, Keep
from agentstate import _requests as rq

CODES = grpc.StatusCode
MAX_QUEUE = 1234


def put_request(c, thread_id: str, channels: dict, cid: str, parent: str = ""):
    return rq.put_checkpoint_request(c.namespace, thread_id, channels, checkpoint_id=cid, parent_id=parent,
                                     base_id="", checkpoint_ns="", metadata=None, extra=None,
                                     expected_head_etag=None, schema_version=0, require_thread=False, request_id="")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraper:
    def __init__(self, url: str) -> None:
        self.url = url

    def text(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            return resp.read().decode()

    def scrape(self) -> dict:
        """{(sample name, sorted label items): value} of one scrape."""
        out = {}
        for family in text_string_to_metric_families(self.text()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out


def value(m: dict, name: str, **labels) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def started(tmp_path_factory, *args: str) -> tuple[SidecarProcess, Scraper]:
    port = free_port()
    proc = SidecarProcess(tmp_path_factory.mktemp("metrics") / "data", "--metrics-listen", f"127.0.0.1:{port}",
                          *args).start()
    return proc, Scraper(f"http://127.0.0.1:{port}/metrics")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    proc, scraper = started(tmp_path_factory, "--watchdog-interval", "0.05", "--max-queue", str(MAX_QUEUE))
    yield proc, scraper
    proc.stop()


@pytest.fixture
def c(served):
    with served[0].client(namespace=f"ns-{uuid.uuid4().hex[:12]}") as client:
        yield client


@pytest.fixture
def m(served):
    return served[1]


def wait_for(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.05)
    return result


def test_requests_by_rpc_and_status_code_with_latency(c, m):
    before = m.scrape()
    c.put_checkpoint("t", {"x": 1})
    for _ in range(3):
        with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND"):
            c.get_thread("missing")
    get = dict(service="ThreadService", method="GetThread")
    # a failed call is counted as its handler ends, just after its status went out: wait a moment for it
    after = wait_for(lambda: (s := m.scrape()) and value(s, "sidecar_request_duration_seconds_count", **get) - value(
        before, "sidecar_request_duration_seconds_count", **get) >= 3 and s)
    rpc = dict(service="ThreadService", method="PutCheckpoint")
    assert value(after, "sidecar_requests_total", code="OK", **rpc) - \
        value(before, "sidecar_requests_total", code="OK", **rpc) == 1
    assert value(after, "sidecar_requests_total", code="NOT_FOUND", **get) - \
        value(before, "sidecar_requests_total", code="NOT_FOUND", **get) == 3
    assert value(after, "sidecar_requests_total", code="OK", **get) == value(before, "sidecar_requests_total",
                                                                              code="OK", **get)
    assert value(after, "sidecar_request_duration_seconds_count", **get) - \
        value(before, "sidecar_request_duration_seconds_count", **get) == 3
    took = value(after, "sidecar_request_duration_seconds_sum", **get) - \
        value(before, "sidecar_request_duration_seconds_sum", **get)
    assert 0 < took < 30
    # the buckets are cumulative and end with every call
    assert value(after, "sidecar_request_duration_seconds_bucket", le="+Inf", **get) == \
        value(after, "sidecar_request_duration_seconds_count", **get)
    assert value(after, "sidecar_requests_in_progress", **get) == 0


def test_streaming_rpcs_are_counted(c, m):
    before = m.scrape()
    c.put_checkpoint("t", {"x": 1})
    list(c.events.list("t"))  # unary
    with c.write_stream() as ws:  # a bidirectional stream: one call
        ws.put_checkpoint("t", {"x": 2}).result(10)
    after = m.scrape()
    rpc = dict(service="ThreadService", method="StreamWrites", code="OK")
    assert value(after, "sidecar_requests_total", **rpc) - value(before, "sidecar_requests_total", **rpc) == 1


def test_a_failed_put_counts_as_a_save_failure(c, m):
    first = c.put_checkpoint("t", {"x": 1})
    before = m.scrape()
    with expect_error(CODES.FAILED_PRECONDITION, "ETAG_MISMATCH"):
        c.put_checkpoint("t", {"x": 2}, parent_id=first.checkpoint.checkpoint_id, expected_head_etag="stale")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD"):
        c.put_checkpoint("t", {"x": 3}, checkpoint_id="self", parent_id="self")  # names itself
    mid = m.scrape()
    assert value(mid, "sidecar_checkpoint_saves_total") - value(before, "sidecar_checkpoint_saves_total") == 2
    assert value(mid, "sidecar_checkpoint_save_failures_total", reason="ETAG_MISMATCH") - \
        value(before, "sidecar_checkpoint_save_failures_total", reason="ETAG_MISMATCH") == 1
    assert value(mid, "sidecar_checkpoint_save_failures_total", reason="INVALID_FIELD") - \
        value(before, "sidecar_checkpoint_save_failures_total", reason="INVALID_FIELD") == 1
    # the same put succeeding: one more save, no more failures
    c.put_checkpoint("t", {"x": 2}, parent_id=first.checkpoint.checkpoint_id,
                     expected_head_etag=first.checkpoint.etag)
    after = m.scrape()
    assert value(after, "sidecar_checkpoint_saves_total") - value(mid, "sidecar_checkpoint_saves_total") == 1
    failures = [k for k in after if k[0] == "sidecar_checkpoint_save_failures_total"]
    assert failures and all(after[k] == mid[k] for k in failures)


def test_save_failures_in_streams_and_batches(c, m):
    before = m.scrape()
    with c.write_stream() as ws:
        ok = ws.put_checkpoint("t", {"x": 1}, checkpoint_id="a")
        bad = ws.put_checkpoint("t", {"x": 1}, checkpoint_id="b", parent_id="b")  # names itself
        ws.flush()
    assert ok.result(10).created
    with pytest.raises(Exception):
        bad.result(10)
    c.batch_write([put_request(c, "t2", {"y": 1}, "p1"), put_request(c, "t2", {"y": 2}, "p2", "p1")])
    with expect_error(CODES.FAILED_PRECONDITION, "BASE_MISMATCH"):  # the second refers to a missing base: both fail
        c.batch_write([put_request(c, "t3", {"y": 1}, "q1"), put_request(c, "t3", {"y": Keep()}, "q2", "nope")])
    after = m.scrape()
    failed = {k[1]: after[k] - before.get(k, 0) for k in after if k[0] == "sidecar_checkpoint_save_failures_total"}
    saves = value(after, "sidecar_checkpoint_saves_total") - value(before, "sidecar_checkpoint_saves_total")
    assert (saves, failed[(("reason", "INVALID_FIELD"),)], failed[(("reason", "BASE_MISMATCH"),)]) == (6, 1, 2), \
        (saves, failed)


def test_write_path_metrics_move(c, m):
    before = m.scrape()
    for i in range(3):
        c.put_checkpoint("t", {"x": i})
    after = m.scrape()
    commits = value(after, "sidecar_store_commits_total") - value(before, "sidecar_store_commits_total")
    assert commits >= 3  # sync durability: each acknowledged put was in a commit of its own here
    assert value(after, "sidecar_store_commit_seconds_count") - value(before, "sidecar_store_commit_seconds_count") \
        == commits
    grouped = value(after, "sidecar_store_group_commit_size_sum") - value(before, "sidecar_store_group_commit_size_sum")
    assert grouped >= 3
    assert value(after, "sidecar_store_writes_in_flight") == 0
    assert value(after, "sidecar_store_writes_in_flight_limit") == MAX_QUEUE
    used, size = value(after, "sidecar_lmdb_used_bytes"), value(after, "sidecar_lmdb_map_size_bytes")
    assert 0 < used <= value(after, "sidecar_lmdb_data_file_bytes") <= size
    assert value(after, "sidecar_disk_free_bytes") > 0
    assert value(after, "sidecar_wal_bytes") == 0  # sync durability writes no log
    assert value(after, "process_resident_memory_bytes") > 0
    assert value(after, "sidecar_build_info", durability="sync", native=str(_native()).lower(),
                 version=_version()) == 1


def test_gc_runs_and_bytes_reclaimed(c, m):
    c.put_checkpoint("gone", {"blob": "z" * 50_000})
    c.delete_thread("gone")
    before = m.scrape()
    freed = c.collect_garbage()
    after = wait_for(lambda: (s := m.scrape()) and value(s, "sidecar_gc_runs_total") > value(
        before, "sidecar_gc_runs_total") and s)
    runs = value(after, "sidecar_gc_runs_total") - value(before, "sidecar_gc_runs_total")
    assert runs >= 1  # ours (a scheduled one after the delete may have run too)
    reclaimed = value(after, "sidecar_gc_freed_bytes_total") - value(before, "sidecar_gc_freed_bytes_total")
    assert reclaimed >= freed.freed_bytes > 0
    assert value(after, "sidecar_gc_duration_seconds_count") == value(after, "sidecar_gc_runs_total")


def test_runs_by_status_effects_by_state_and_lease_expiry(c, m):
    before = m.scrape()
    held = c.runs.start("t", create_thread=True, lease_timeout=3.0, max_attempts=2)
    b = held.begin_effect("mail:1", description="send")
    time.sleep(1.1)  # the census is at most a second old
    mid = m.scrape()
    assert value(mid, "sidecar_runs", status="running") - value(before, "sidecar_runs", status="running") == 1
    assert value(mid, "sidecar_effects", state="pending") - value(before, "sidecar_effects", state="pending") == 1
    # no heartbeat: the lease expires, the watchdog re-queues the run; the pending effect reads UNKNOWN
    wait_for(lambda: c.runs.get(held.run_id).status == 1)  # RUN_STATUS_PENDING
    after = wait_for(lambda: (s := m.scrape()) and value(s, "sidecar_lease_expiries_total") > value(
        mid, "sidecar_lease_expiries_total") and s)
    assert value(after, "sidecar_watchdog_actions_total", action="lease_requeued") - \
        value(mid, "sidecar_watchdog_actions_total", action="lease_requeued") == 1
    time.sleep(1.1)
    after = m.scrape()
    assert value(after, "sidecar_runs", status="pending") - value(mid, "sidecar_runs", status="pending") == 1
    assert value(after, "sidecar_effects", state="unknown") - value(mid, "sidecar_effects", state="unknown") == 1
    again = c.runs.claim(run_id=held.run_id)
    c.effects.complete("mail:1", again.begin_effect("mail:1").token, {"ok": True})
    again.complete()
    assert b.token
    time.sleep(1.1)
    done = m.scrape()
    assert value(done, "sidecar_runs", status="success") - value(before, "sidecar_runs", status="success") == 1
    assert value(done, "sidecar_effects", state="done") - value(before, "sidecar_effects", state="done") == 1


def test_process_durability_write_ahead_log(tmp_path_factory):
    proc, m = started(tmp_path_factory, "--durability", "process", "--commit-interval", "30")
    try:
        before = m.scrape()
        with proc.client() as c:
            c.put_checkpoint("t", {"x": "y" * 1000})
        after = m.scrape()
        assert value(after, "sidecar_wal_append_seconds_count") - value(before, "sidecar_wal_append_seconds_count") \
            >= 1
        assert value(after, "sidecar_wal_bytes") > value(before, "sidecar_wal_bytes")
        assert value(after, "sidecar_build_info", durability="process", native=str(_native()).lower(),
                     version=_version()) == 1
    finally:
        proc.stop()


def test_the_endpoint_is_off_unless_asked(sidecar):
    with Client(sidecar.address) as c:
        c.put_checkpoint(f"t-{uuid.uuid4()}", {"x": 1})
    assert "metrics at" not in sidecar.log()


def test_a_bad_listen_address_is_refused(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(tmp_path / "d"),
                          "--metrics-listen", "no-port"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--metrics-listen" in out.stderr


def _native() -> bool:
    from sidecar.storage import hotpath
    return hotpath.NATIVE


def _version() -> str:
    from sidecar import __version__
    return __version__



def test_a_taken_port_is_a_start_up_error(tmp_path):
    import subprocess
    import sys
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(tmp_path / "d"),
                              "--listen", f"unix:{tmp_path}/s.sock", "--metrics-listen", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Address already in use" in out.stderr, out.stderr


def test_compaction_gauges_follow_due_claimed_done_and_overdue(tmp_path):
    """Pending, claimed and overdue compactions and the sweeper's fallbacks, on a sidecar with a clock of the
    test's (the sweeper runs when told)."""
    from agentstate.conversations import item
    from conftest import InProcess

    port = free_port()
    side = InProcess(tmp_path / "data", metrics_listen=f"127.0.0.1:{port}")
    m = Scraper(f"http://127.0.0.1:{port}/metrics")

    def gauges():
        s = m.scrape()
        return (tuple(value(s, f"sidecar_compactions_{k}") for k in ("pending", "claimed", "overdue")),
                value(s, "sidecar_compaction_fallbacks_total"))

    def say(c, thread_id, *texts):
        c.conversations.append(thread_id, [item("message", t, role="user") for t in texts], create_thread=True)

    try:
        with Client(side.address, namespace="ns-compactions", timeout=10) as c:
            # every 3 live items not yet in a compaction, the oldest 2 are due (the fallback after 60 s)
            c.conversations.set_compaction_policy(trigger_items=3, compact_items=2, keep_last_items=1,
                                                  fallback_after=60)
            assert gauges() == ((0, 0, 0), 0)
            say(c, "t-1", "a", "b")
            assert gauges() == ((0, 0, 0), 0)  # not due yet
            say(c, "t-1", "c")
            assert gauges() == ((1, 0, 0), 0)  # L1:1-2 due
            say(c, "t-2", "a", "b", "c")
            assert gauges() == ((2, 0, 0), 0)
            claim = c.conversations.claim_compaction(worker="w-1", thread_id="t-1", lease=30)
            assert gauges() == ((2, 1, 0), 0)
            side.clock.advance(31)  # the lease expired: pending again, not claimed
            assert gauges() == ((2, 0, 0), 0)
            claim = c.conversations.claim_compaction(worker="w-2", thread_id="t-1", lease=30)
            assert gauges() == ((2, 1, 0), 0)
            c.conversations.submit_summary(claim, "a and b", producer="w-2")
            assert gauges() == ((1, 0, 0), 0)  # done
            side.clock.advance(30)  # t-2's range became due 61 s ago: past its fallback time
            assert gauges() == ((1, 0, 1), 0)
            say(c, "t-1", "d", "e")  # L1:3-4 due now: pending, not overdue
            assert gauges() == ((2, 0, 1), 0)
            assert side.sweep().get("fallbacks") == 1  # the sweeper applies t-2's fallback
            assert gauges() == ((1, 0, 0), 1)
            side.clock.advance(61)
            assert gauges() == ((1, 0, 1), 1)
            side.sweep()
            assert gauges() == ((0, 0, 0), 2)
            assert [s.producer for s in c.conversations.list_summaries("t-1")] == [
                "w-2", "agentstate.fallback/extractive-v1"]
    finally:
        side.close()


def test_retention_counts_the_checkpoints_it_removes(c, m):
    for i in range(5):
        c.put_checkpoint("kept-short", {"n": i})
    c.retention.set_policy("kept-short", keep_last=2)
    before = m.scrape()
    c.retention.apply("kept-short", dry_run=True)
    c.retention.apply("kept-short")  # (or the sweeper's own pass, if it came first: the counter counts both)
    assert len(list(c.list_checkpoints("kept-short"))) == 2
    after = m.scrape()
    assert value(after, "sidecar_retention_checkpoints_removed_total") - value(
        before, "sidecar_retention_checkpoints_removed_total") == 3  # the dry run removed nothing
