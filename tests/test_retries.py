"""The table of what is safe to repeat (agentstate.retries.RULES): it covers every RPC, docs/clients.md
shows the same table, and the client retries by it: safe calls until their deadline, waiting for the
channel, unsafe ones only with a request id. keep_alive tells a lost run from a sidecar that is away."""
from __future__ import annotations

import re
import time
from pathlib import Path

import grpc
import pytest
from test_client import FakeRpcError, Flaky

from agentstate import (NO_RETRY, RULES, Client, DeadlineExceeded, LeaseExpired, RetryPolicy, Unavailable,
                        effect_done, event, step)
from agentstate import retries
from agentstate.held_runs import HeldRun
from agentstate.v1 import effects_pb2 as fpb
from agentstate.v1 import events_pb2 as epb
from agentstate.v1 import runs_pb2 as rpb
from agentstate.v1 import threads_pb2 as pb
from sidecar.errors import ApiError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "clients.md"


def docs_table() -> dict[str, tuple[str, str]]:
    """The rows of docs/clients.md "Which calls are retried": RPC -> (rule, why)."""
    text = DOCS.read_text()
    section = text[text.index("## Which calls are retried"):]
    section = section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+\.\w+)` \| ([^|]+) \| (.+) \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    return rows


def test_the_table_has_every_rpc_and_nothing_else():
    rpcs = {f"{s.name}.{m.name}" for s in retries.SERVICES for m in s.methods}
    assert set(RULES) == rpcs
    streaming = {f"{s.name}.{m.name}" for s in retries.SERVICES for m in s.methods
                 if m.client_streaming or m.server_streaming}
    assert {name for name, rule in RULES.items() if rule.kind == retries.STREAM} == streaming
    for name, rule in RULES.items():
        service, method = name.split(".")
        has_request_id = "request_id" in next(
            m for s in retries.SERVICES if s.name == service for m in s.methods if m.name == method
        ).input_type.fields_by_name
        if rule.kind == retries.BY_REQUEST_ID or rule.when is not None:
            assert has_request_id, f"{name} falls back on a request_id it does not have"
        assert rule.why, name


def test_the_docs_show_the_same_table():
    rows = docs_table()
    assert set(rows) == set(RULES)
    for name, rule in RULES.items():
        assert rows[name] == (rule.label, rule.why), f"docs/clients.md says {rows[name]} for {name}"


def test_decisions():
    safe = retries.prepare
    # by lease, by token, by key: no request id needed (none of these requests has the field)
    assert safe(rpb.HeartbeatRequest(run_id="r", lease_id="l"), False)
    assert safe(fpb.BeginEffectRequest(idempotency_key="k", run_id="r", lease_id="l"), False)
    assert safe(fpb.CompleteEffectRequest(idempotency_key="k", token="t"), False)
    assert safe(fpb.FailEffectRequest(idempotency_key="k", token="t"), False)
    # appends: by client event ids, else by request id
    ids = epb.AppendEventsRequest(thread_id="t", events=[event("e", client_event_id="1"), event("f", client_event_id="2")])
    assert safe(ids, False) and not ids.request_id
    mixed = epb.AppendEventsRequest(thread_id="t", events=[event("e", client_event_id="1"), event("f")])
    assert not safe(mixed, False) and safe(mixed, True) and mixed.request_id.startswith("auto-")
    # a named put that records a step without an id (or an event without one) needs a request id
    assert safe(pb.PutCheckpointRequest(thread_id="t", checkpoint_id="c", steps=[step("tool", "x", step_id="s")],
                                        events=[event("e", client_event_id="e1")],
                                        effects=[effect_done("k", "t", 1)]), False)
    for risky in (pb.PutCheckpointRequest(thread_id="t", checkpoint_id="c", steps=[step("tool", "x")]),
                  pb.PutCheckpointRequest(thread_id="t", checkpoint_id="c", events=[event("e")])):
        assert not safe(risky, False) and safe(risky, True) and risky.request_id
    # a thread the server names is created again by a repeat
    assert not safe(pb.CreateThreadRequest(if_exists=pb.IF_EXISTS_RETURN), False)
    assert safe(pb.CreateThreadRequest(thread_id="t", if_exists=pb.IF_EXISTS_RETURN), False)
    # by request id: claims, completions, steps
    for req in (rpb.ClaimRunRequest(run_id="r"), rpb.CompleteRunRequest(run_id="r", lease_id="l"),
                rpb.StartStepRequest(run_id="r", lease_id="l")):
        assert not safe(req, False) and safe(req, True) and req.request_id.startswith("auto-")


@pytest.fixture
def offline():
    with Client("unix:/nonexistent/agentstate.sock", timeout=5,
                retry=RetryPolicy(initial_backoff=0.001, max_backoff=0.01)) as c:
        yield c


def test_the_default_policy_retries_until_the_deadline(offline):
    assert RetryPolicy().max_attempts == 0 and Client.__init__.__kwdefaults__["timeout"] == 30.0
    m = Flaky(50)
    assert offline._call(m, fpb.BeginEffectRequest(idempotency_key="k", run_id="r", lease_id="l"), None) == "ok"
    assert len(m.requests) == 51 and len(set(m.requests)) == 1  # sent as it was: no request id added


class Recorder(Flaky):
    def __call__(self, request, timeout=None, wait_for_ready=None):
        self.waits = getattr(self, "waits", []) + [wait_for_ready]
        return super().__call__(request, timeout, wait_for_ready)


def test_safe_calls_wait_for_the_channel_and_others_do_not():
    with Client("unix:/nonexistent/agentstate.sock", auto_request_ids=False) as c:
        m = Recorder(0)
        c._call(m, rpb.HeartbeatRequest(run_id="r", lease_id="l"), None)
        m2 = Recorder(0)
        c._call(m2, rpb.CompleteRunRequest(run_id="r", lease_id="l"), None)  # not safe without a request id
        assert m.waits == [True] and m2.waits == [None]
    with Client("unix:/nonexistent/agentstate.sock", retry=NO_RETRY) as c:
        m = Recorder(0)
        c._call(m, pb.GetThreadRequest(thread_id="t"), None)
        assert m.waits == [None]  # no retries: fail fast
    with Client("unix:/nonexistent/agentstate.sock", wait_for_ready=False) as c:
        m = Recorder(0)
        c._call(m, pb.GetThreadRequest(thread_id="t"), None)
        assert m.waits == [None]


def test_a_safe_call_outlives_an_outage_of_a_real_channel(tmp_path):
    """A read sent while nothing listens waits (wait_for_ready) and gets through once the sidecar is up."""
    from conftest import SidecarProcess
    import threading

    proc = SidecarProcess(tmp_path / "data")
    starter = threading.Timer(1.0, proc.start)
    try:
        with Client(proc.address) as c:
            starter.start()
            start = time.monotonic()
            assert list(c.list_threads()) == []
            assert time.monotonic() - start > 0.9
    finally:
        starter.cancel()
        starter.join()
        proc.stop()


# ---------------------------------------------------------------- keep_alive's verdicts (no server)

class FakeRuns:
    """Stands in for client.runs.stub: Heartbeat answers from a script of errors and replies."""

    def __init__(self, script, run: rpb.Run) -> None:
        self.script = list(script)
        self.run = run
        self.calls = 0

    def Heartbeat(self, request, timeout=None, wait_for_ready=None):  # noqa: N802 - a stub method
        self.calls += 1
        item = self.script.pop(0) if self.script else "ok"
        if item == "ok":
            return rpb.HeartbeatResponse(run=self.run)
        if item == "hang":
            time.sleep(timeout)
            raise FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED)
        if item == "slowly ok":  # waited through an outage, then went through
            time.sleep(0.5)
            return rpb.HeartbeatResponse(run=self.run)
        if item == "slowly gone":
            time.sleep(0.3)
            raise FakeRpcError(ApiError("RUN_NOT_ACTIVE", "it ended"))
        raise FakeRpcError(item)


def held_with(script, lease: float = 0.4):
    c = Client("unix:/nonexistent/agentstate.sock", timeout=5,
               retry=RetryPolicy(initial_backoff=0.005, max_backoff=0.02))
    run = rpb.Run(run_id="r", lease_timeout={"seconds": int(lease), "nanos": int(lease % 1 * 1e9)})
    c.runs.stub = FakeRuns(script, run)
    return c, HeldRun(c, run, rpb.Lease(run_id="r", lease_id="l", thread_id="t"))


def test_keep_alive_rides_out_failures_shorter_than_the_lease():
    c, held = held_with([grpc.StatusCode.UNAVAILABLE] * 5 + [ApiError("INTERNAL_ERROR", "oops")]
                        + [grpc.StatusCode.UNAVAILABLE] * 5, lease=1.0)
    stop = held.keep_alive(0.05)
    time.sleep(1.5)
    assert held.lost is None and not stop.is_set() and c.runs.stub.calls > 15
    stop.set()


@pytest.mark.parametrize("reason", ["RUN_NOT_ACTIVE", "LEASE_LOST", "RUN_NOT_FOUND"])
def test_keep_alive_reports_what_the_server_says_at_once(reason):
    c, held = held_with([grpc.StatusCode.UNAVAILABLE, ApiError(reason, "gone")])
    stop = held.keep_alive(0.05)
    assert stop.wait(5) and held.lost.reason == reason and c.runs.stub.calls == 2


def test_keep_alive_reports_the_lease_expired_when_nothing_gets_through_for_a_lease():
    start = time.monotonic()
    c, held = held_with(["hang"] * 100)
    stop = held.keep_alive(0.05)
    assert stop.wait(5)
    took = time.monotonic() - start
    assert isinstance(held.lost, LeaseExpired) and isinstance(held.lost, DeadlineExceeded), held.lost
    assert isinstance(held.lost.__cause__, (DeadlineExceeded, Unavailable))
    assert 0.4 <= took < 2, took  # the lease (0.4 s from the claim's answer), not the call's 5 s deadline


def test_a_heartbeat_that_fails_after_keep_alive_was_stopped_does_not_make_the_run_lost():
    """complete() stops keep_alive; a heartbeat still in flight then hears RUN_NOT_ACTIVE (the run ended)."""
    c, held = held_with(["slowly gone"], lease=2.0)
    stop = held.keep_alive(0.01)
    time.sleep(0.1)
    stop.set()  # what complete() and fail() do
    time.sleep(0.5)
    assert c.runs.stub.calls == 1 and held.lost is None


def test_the_lease_counts_from_the_heartbeat_s_answer_not_from_when_it_was_sent():
    """A heartbeat that waited through a restart renewed the lease when it went through, just before its
    answer: counting from when it was first sent would take that wait off the next lease."""
    c, held = held_with(["slowly ok"], lease=1.0)
    held.heartbeat()
    assert held.lease_remaining() > 0.9
