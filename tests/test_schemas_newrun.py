"""The NEW_RUN failure policy on the server (ThreadService.ResumeThread, docs/lifecycle.md): the read falls back to
the newest ancestor that migrates and, in the same transaction, a run is created from it, linked to the chain that
does not migrate; nothing is created otherwise; a repeated request_id answers the first response."""
from __future__ import annotations

import grpc
from google.protobuf import duration_pb2
from conftest import expect_error

from agentstate import from_value, to_value
from agentstate import schemas as s
from agentstate.v1 import runs_pb2 as rpb
from agentstate.v1 import threads_pb2 as tpb
from test_schemas import _bad_chain, register_three, state_v3, values_of

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _resume(c, tid, read: int = 3, **kw):
    from agentstate.errors import from_rpc_error
    req = tpb.ResumeThreadRequest(namespace=c.namespace, thread_id=tid, read_schema_version=read, **kw)
    try:
        return c.threads.ResumeThread(req, timeout=10)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


def _runs(c, tid) -> list:
    req = rpb.ListRunsRequest(namespace=c.namespace, thread_id=tid)
    return list(c.runs.stub.ListRuns(req, timeout=10).runs)


def test_resume_thread_creates_the_linked_run_on_the_server(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="new_run")
    _bad_chain(c, tid, "agent")
    run = rpb.CreateRunRequest(claim=True, metadata={"who": to_value("worker-2")})
    resp = _resume(c, tid, run=run, request_id="r-1")
    cp = resp.checkpoint
    assert (cp.checkpoint_id, cp.migration, cp.unmigratable_checkpoint_id) == ("c1", s.NEW_RUN, "c2")
    assert values_of(cp) == state_v3(1) and cp.schema_version == 3
    assert resp.HasField("run") and resp.run.lease.lease_id
    created = resp.run.run
    assert created.start_checkpoint_id == "c1" and created.thread_id == tid
    meta = {k: from_value(v) for k, v in created.metadata.items()}
    assert meta["new_run_from"] == "c2" and meta["schema"] == "agent" and meta["schema_version"] == 3
    assert "thirty-six" in meta["reason"] and meta["who"] == "worker-2"
    # the run exists on the server, once: a repeat of the request answers the first response
    again = _resume(c, tid, run=run, request_id="r-1")
    assert again.run.run.run_id == created.run_id and again.run.lease.lease_id == resp.run.lease.lease_id
    assert [r.run_id for r in _runs(c, tid)] == [created.run_id]


def test_resume_thread_creates_nothing_unless_new_run(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="new_run")
    c.put_checkpoint(tid, state_v3(), checkpoint_id="c1", schema="agent", schema_version=3)
    resp = _resume(c, tid, run=rpb.CreateRunRequest(claim=True))
    assert resp.checkpoint.migration == s.CURRENT and not resp.HasField("run")
    assert _runs(c, tid) == []
    # FAIL: the read's error, no run
    other = f"{tid}-fail"
    register_three(c, "strict", failure_policy="fail")
    _bad_chain(c, other, "strict")
    with expect_error(grpc.StatusCode.FAILED_PRECONDITION, "SCHEMA_MIGRATION_FAILED"):
        _resume(c, other, run=rpb.CreateRunRequest(claim=True))
    assert _runs(c, other) == []
    # NEW_RUN with no ancestor that migrates: FAIL's error, no run
    lone = f"{tid}-lone"
    c.put_checkpoint(lone, {"profile": {"age": "x"}}, checkpoint_id="c0", schema="agent", schema_version=1)
    with expect_error(grpc.StatusCode.FAILED_PRECONDITION, "SCHEMA_MIGRATION_FAILED", path="profile/age"):
        _resume(c, lone, run=rpb.CreateRunRequest(claim=True))
    assert _runs(c, lone) == []
    with expect_error(grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND"):
        _resume(c, f"{tid}-missing")


def test_resume_thread_refuses_bad_requests_and_writes_nothing(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="new_run")
    _bad_chain(c, tid, "agent")
    with expect_error(INVALID, "INVALID_FIELD", "read_schema_version"):
        _resume(c, tid, read=0)
    for run, field in ((rpb.CreateRunRequest(thread_id="x"), "run.thread_id"),
                       (rpb.CreateRunRequest(start_checkpoint_id="c2"), "run.start_checkpoint_id"),
                       (rpb.CreateRunRequest(metadata={"schema": to_value("x")}), "run.metadata['schema']"),
                       (rpb.CreateRunRequest(lease_timeout=duration_pb2.Duration(nanos=50_000_000)), "run.lease_timeout")):
        with expect_error(INVALID, "INVALID_FIELD", field):
            _resume(c, tid, run=run)
    assert _runs(c, tid) == []


def test_the_python_helper_goes_through_the_server(nsclient, tid):
    c = nsclient
    register_three(c, "agent", failure_policy="new_run")
    _bad_chain(c, tid, "agent")
    cp, created = c.schemas.resume(tid, 3, request_id="once", metadata={"k": 1})
    assert cp.checkpoint_id == "c1" and created.run.start_checkpoint_id == "c1"
    again_cp, again = c.schemas.resume(tid, 3, request_id="once", metadata={"k": 1})
    assert again.run.run_id == created.run.run_id  # answered by the server from the first call
    assert len(_runs(c, tid)) == 1
