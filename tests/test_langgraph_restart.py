"""The graph process and the sidecar both restart in the middle of a thread; the graph resumes at the right step."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SidecarProcess

pytest.importorskip("langgraph", reason="the langgraph extra is part of the test dependencies")

APP = Path(__file__).with_name("langgraph_app.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(APP.parent), os.environ.get("PYTHONPATH")]))}


def app(address: str, work: Path, mode: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(APP), address, "thread-1", str(work), mode], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def finish(p: subprocess.Popen, timeout: float = 60) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def calls(work: Path) -> list[str]:
    return (work / "calls").read_text().split()


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the graph process exited early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path.name} did not appear: {proc.communicate()}")
        time.sleep(0.05)


def test_crash_of_both_mid_step_resumes_from_the_pending_writes(tmp_path):
    """Killed (SIGKILL) while branch b runs and branch a's result is stored: after both restart, only b and
    what follows run again."""
    work = tmp_path / "work"
    work.mkdir()
    sidecar = SidecarProcess(tmp_path / "data").start()
    graph = app(sidecar.address, work, "start")
    try:
        wait_for(work / "b_blocked", graph)
    finally:
        graph.kill()
        graph.communicate(timeout=30)
        sidecar.kill()
    assert sorted(calls(work)) == ["a", "b", "s1"]

    sidecar = SidecarProcess(tmp_path / "data").start()
    try:
        final = finish(app(sidecar.address, work, "resume"))
    finally:
        sidecar.stop()
    assert final == {"log": ["s1", "a", "b", "join", "s4"]}
    # s1 and a ran once: their results were stored before the crash; b ran again, then the rest
    assert calls(work)[3:] == ["b", "join", "s4"] and calls(work).count("a") == 1


def test_restart_of_both_while_waiting_for_a_human(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    sidecar = SidecarProcess(tmp_path / "data").start()
    try:
        assert finish(app(sidecar.address, work, "hitl")) == {"interrupts": ["continue?"]}
    finally:
        sidecar.kill()  # the graph process has exited; the sidecar dies without a clean shutdown
    sidecar = SidecarProcess(tmp_path / "data").start()
    try:
        final = finish(app(sidecar.address, work, "answer"))
    finally:
        sidecar.stop()
    assert final == {"log": ["first", "answer yes", "last"]}
    assert calls(work) == ["first", "ask", "ask", "last"]  # "ask" runs again on resume (LangGraph's semantics)
