"""Structured logs: `--log-format json` writes one JSON object per line, and every call's request log line
carries its namespace, thread, run and request ids (the text format appends them as key=value)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import grpc
import pytest
from conftest import SidecarProcess, expect_error

CODES = grpc.StatusCode


def records(proc: SidecarProcess) -> list[dict]:
    lines = [line for line in proc.log().splitlines() if line.strip()]
    out = []
    for line in lines:
        if line.startswith("sidecar ready: "):  # the ready line is for people and scripts, on stdout
            continue
        out.append(json.loads(line))  # every other line is one JSON object
    return out


def request_lines(proc: SidecarProcess, rpc: str, ns: str) -> list[dict]:
    """The request log lines of ``rpc`` in namespace ``ns``; waits a moment for the first one (a call's line
    is written as it ends, which may be just after its caller got the answer)."""
    deadline = time.monotonic() + 10
    while True:
        found = [r for r in records(proc) if r["logger"] == "sidecar.requests" and r.get("rpc") == rpc
                 and r.get("namespace") == ns]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.fixture(scope="module")
def json_sidecar(tmp_path_factory):
    proc = SidecarProcess(tmp_path_factory.mktemp("logs") / "data", "--log-format", "json",
                          "--log-level", "DEBUG").start()
    yield proc
    proc.stop()


def test_json_lines_with_request_ids(json_sidecar):
    ns = f"ns-{uuid.uuid4().hex[:8]}"
    with json_sidecar.client(namespace=ns) as c:
        c.put_checkpoint("th-1", {"x": 1}, request_id="req-put-1")
        held = c.runs.start("th-1", create_thread=False)
        held.heartbeat()
        held.complete()
        with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND"):
            c.get_thread("th-missing")
    startup = [r for r in records(json_sidecar) if r["logger"] == "sidecar.server"]
    assert any(r["message"].startswith("sidecar serving ") and r["level"] == "INFO" for r in startup)
    for r in records(json_sidecar):
        assert r["time"].endswith("Z") and {"level", "logger", "message"} <= r.keys()

    put = request_lines(json_sidecar, "ThreadService/PutCheckpoint", ns)
    assert len(put) == 1
    assert put[0] | {"duration_ms": 0, "peer": ""} == {
        "time": put[0]["time"], "level": "DEBUG", "logger": "sidecar.requests", "message": put[0]["message"],
        "rpc": "ThreadService/PutCheckpoint", "code": "OK", "duration_ms": 0, "namespace": ns,
        "thread_id": "th-1", "request_id": "req-put-1", "peer": ""}
    beat = request_lines(json_sidecar, "RunService/Heartbeat", ns)
    assert [(r["run_id"], r["code"]) for r in beat] == [(held.run_id, "OK")]
    created = request_lines(json_sidecar, "RunService/CreateRun", ns)
    assert created and created[0]["thread_id"] == "th-1" and created[0]["request_id"]  # the client made one
    missing = request_lines(json_sidecar, "ThreadService/GetThread", ns)
    assert [(r["level"], r["code"], r["reason"], r["thread_id"]) for r in missing] == \
        [("INFO", "NOT_FOUND", "THREAD_NOT_FOUND", "th-missing")]


def test_text_format_appends_the_ids(tmp_path):
    proc = SidecarProcess(tmp_path / "data", "--log-level", "INFO").start()  # text is the default
    try:
        with proc.client(namespace="ns-text") as c:
            c.put_checkpoint("th-ok", {"x": 1})
            with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND"):
                c.get_thread("th-gone")
    finally:
        proc.stop()
    lines = [line for line in proc.log().splitlines() if "sidecar.requests" in line]
    # INFO: only the failed call is logged
    assert len(lines) == 1, lines
    assert "INFO sidecar.requests: ThreadService/GetThread NOT_FOUND THREAD_NOT_FOUND in " in lines[0]
    assert "namespace=ns-text thread_id=th-gone" in lines[0]


def test_unknown_log_format_is_refused(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(tmp_path / "d"),
                          "--log-format", "xml"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--log-format" in out.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_cancelled_server_stream_is_logged_and_the_sidecar_lives(tmp_path, fmt):
    """A client cancelling a download or a watch after its first message: the call is counted and logged
    CANCELLED, and the sidecar keeps serving (reading the context of such a call used to crash it)."""
    from agentstate import Client
    from agentstate.v1 import artifacts_pb2 as apb
    from agentstate.v1 import events_pb2 as epb

    proc = SidecarProcess(tmp_path / "data", "--log-format", fmt).start()
    try:
        with Client(proc.address) as c:
            c.put_checkpoint("t", {"x": 1})
            c.artifacts.upload("t", "a.bin", b"0123456789" * 200_000)  # several chunks
            c.events.append("t", [epb.EventInput(type="note")])
            for call in (c.artifacts.stub.DownloadArtifact(apb.DownloadArtifactRequest(thread_id="t", name="a.bin")),
                         c.events.stub.WatchEvents(epb.WatchEventsRequest(thread_id="t"))):
                for _ in call:
                    call.cancel()
                    break
            time.sleep(0.5)
            assert proc.proc.poll() is None, proc.log()[-3000:]
            assert c.get_checkpoint("t").channels  # still serving
        log = proc.log()
        assert "DownloadArtifact" in log and "CANCELLED" in log, log[-3000:]
    finally:
        proc.stop()


def test_json_lines_carry_a_traceback():
    import logging

    from sidecar import logs
    formatter = logs.JsonFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("sidecar.service").makeRecord(
            "sidecar.service", logging.ERROR, __file__, 1, "internal error in %s", ("PutCheckpoint",),
            sys.exc_info(), extra={"rpc": "ThreadService/PutCheckpoint", "thread_id": "t-1", "run_id": ""})
    line = formatter.format(record)
    assert "\n" not in line  # one line per record, the traceback inside the JSON string
    out = json.loads(line)
    assert (out["level"], out["message"], out["rpc"], out["thread_id"]) == \
        ("ERROR", "internal error in PutCheckpoint", "ThreadService/PutCheckpoint", "t-1")
    assert "run_id" not in out  # empty ids are left out
    assert out["exception"].startswith("Traceback") and "ValueError: boom" in out["exception"]
