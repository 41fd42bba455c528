"""Hot upgrade (docs/lifecycle.md): a LangGraph run that checkpointed under v1 code is stopped (its process killed
in the middle of a step), and a process running v2 code, whose state schema changed, resumes it from its latest
checkpoint through the saver's client-side migration. Without the migration the v2 code fails on the old
state; a version no migration reaches fails with MigrationError."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

APP = Path(__file__).with_name("schema_app.py")


def run(address: str, thread: str, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(APP), address, thread, mode], capture_output=True, text=True,
                          timeout=120)


def stopped_v1_run(module_sidecar) -> str:
    thread = f"up-{uuid.uuid4().hex[:8]}"
    done = run(module_sidecar.address, thread, "v1")
    assert done.returncode == -signal.SIGKILL, done.stderr
    with module_sidecar.client(namespace="upgrade") as c:
        latest = c.get_checkpoint(thread)
    assert (latest.schema, latest.schema_version) == ("research", 1)
    return thread


def test_v2_code_resumes_a_v1_run_from_its_latest_checkpoint(module_sidecar):
    thread = stopped_v1_run(module_sidecar)
    with module_sidecar.client(namespace="upgrade") as c:
        before = [(cp.checkpoint_id, cp.schema_version) for cp in c.list_checkpoints(thread)]
    done = run(module_sidecar.address, thread, "v2")
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout.strip().splitlines()[-1])
    assert final == {
        "topic": {"name": "lmdb"},
        "notes": [{"text": "facts about lmdb", "chars": 16}, {"text": "a first draft", "chars": 13},
                  {"text": "published", "chars": 9}],
        "status": "published lmdb (draft -> done, 29 chars)",
    }
    with module_sidecar.client(namespace="upgrade") as c:
        after = [(cp.checkpoint_id, cp.schema, cp.schema_version) for cp in c.list_checkpoints(thread)]
    # the resumed run's checkpoints are stored at version 2; the v1 history is left as it was
    new = after[:len(after) - len(before)]
    assert new and all((schema, version) == ("research", 2) for _, schema, version in new)
    assert [(cid, n) for cid, _, n in after[len(new):]] == before
    # what v2 stored is in the v2 shape (no channel was kept from the v1 parent): read without any migration
    from agentstate.langgraph import SidecarSaver  # noqa: PLC0415
    with SidecarSaver(module_sidecar.address, namespace="upgrade", schema="research", schema_version=2) as saver:
        stored = saver.get_tuple({"configurable": {"thread_id": thread}}).checkpoint["channel_values"]
    assert stored["notes"] == final["notes"] and stored["status"] == final["status"]
    assert stored["topic"] == {"name": "lmdb"}  # migrated, though no v2 step wrote it


def test_without_the_migration_the_new_code_does_not_fit_the_old_state(module_sidecar):
    thread = stopped_v1_run(module_sidecar)
    done = run(module_sidecar.address, thread, "v2-nomig")
    assert done.returncode == 5, done.stderr
    assert "code_error" in json.loads(done.stdout.strip().splitlines()[-1])


def test_a_version_no_migration_reaches_fails_clearly(module_sidecar):
    thread = stopped_v1_run(module_sidecar)
    done = run(module_sidecar.address, thread, "v3")
    assert done.returncode == 4, done.stderr
    msg = json.loads(done.stdout.strip().splitlines()[-1])["migration_error"]
    assert "from version 1 to 3" in msg and "no client-side step from version 2" in msg
