"""Eager migrations beyond checkpoint values (docs/lifecycle.md "Eager migration"): MigrateThread rewrites a
checkpoint's pending writes with it, MigrateNamespace rewrites memory items too (a new revision each, with
progress), and a SIGKILL in the middle of a memory migration resumes to completion."""
from __future__ import annotations

import subprocess
import sys

from conftest import SidecarProcess

from agentstate import from_value
from agentstate import schemas as s
from agentstate.v1 import threads_pb2 as tpb
from test_schemas import V2, V3, register_three, state_v1, state_v3, values_of

PROFILE = [[], [s.rename("nick", "handle"), s.convert("age", "int")], [s.nest(["handle", "age"], "about")]]


def test_migrate_thread_rewrites_pending_writes_too(nsclient, tid):
    c = nsclient
    register_three(c, "agent")
    c.put_checkpoint(tid, state_v1(), checkpoint_id="c1", schema="agent", schema_version=1)
    c.put_writes(tid, "c1", [("t", 0, "messages", [{"role": "ai", "text": "w", "tokens": "1"}]),
                             ("t", 1, "legacy", 2), ("t", 2, "notes", "x")])
    req = tpb.GetCheckpointRequest(namespace=c.namespace, thread_id=tid, checkpoint_id="c1",
                                   include_pending_writes=True, read_schema_version=3)
    lazy = c.threads.GetCheckpoint(req, timeout=10).checkpoint
    last = list(c.schemas.migrate_thread(tid, "agent"))[-1]
    assert last.checkpoints_migrated == 1
    req.read_schema_version = 0
    eager = c.threads.GetCheckpoint(req, timeout=10).checkpoint
    assert eager.schema_version == 3 and values_of(eager) == state_v3()
    got = [(w.task_id, w.idx, w.channel, from_value(w.value)) for w in eager.pending_writes]
    assert got == [("t", 0, "messages", [{"role": "ai", "content": "w", "tokens": 1, "meta": {}}]),
                   ("t", 2, "memo", "x")]
    assert got == [(w.task_id, w.idx, w.channel, from_value(w.value)) for w in lazy.pending_writes]
    assert c.check_integrity().missing_blobs == 0


def test_migrate_namespace_rewrites_memory_items(nsclient, tid):
    c = nsclient
    c.schemas.register("profile", PROFILE)
    register_three(c, "agent")
    c.put_checkpoint(tid, state_v1(), schema="agent", schema_version=1)
    for i in range(7):
        c.memory.put(["users", f"g{i % 2}"], f"u{i}", {"nick": f"n{i}", "age": str(20 + i)}, schema="profile",
                     schema_version=1)
    c.memory.put(["users"], "v2", {"handle": "h", "age": 3}, schema="profile", schema_version=2)
    c.memory.put(["users"], "done", {"about": {"handle": "d", "age": 1}}, schema="profile", schema_version=3)
    c.memory.put(["users"], "bad", {"nick": "b", "age": "old"}, schema="profile", schema_version=1)
    c.memory.put(["users"], "plain", {"x": 1})
    before = c.memory.get(["users", "g0"], "u0")
    # the checkpoints are of another schema: counted as such
    progress = list(c.schemas.migrate_namespace("profile", batch_size=2))
    last = progress[-1]
    assert (last.memory_items_seen, last.memory_items_migrated, last.memory_items_current,
            last.memory_items_other, last.memory_items_failed) == (11, 8, 1, 1, 1)
    assert last.checkpoints_other == 1 and last.checkpoints_migrated == 0
    mem = [p.memory_items_seen for p in progress]
    assert mem == sorted(mem) and len([p for p in progress if p.memory_items_seen]) >= 5  # batches of 2
    assert [(list(f.memory_path), f.memory_key, f.stored_version) for f in last.failures] == [(["users"], "bad", 1)]
    assert "old" in last.failures[0].error
    after = c.memory.get(["users", "g0"], "u0")
    assert from_value(after.value) == {"about": {"handle": "n0", "age": 20}} and after.schema_version == 3
    assert after.version == before.version + 1 and after.etag != before.etag
    assert from_value(c.memory.get(["users"], "v2").value) == {"about": {"handle": "h", "age": 3}}
    assert from_value(c.memory.get(["users"], "bad").value) == {"nick": "b", "age": "old"}
    # history keeps the old value; searches see the new one (the field index was updated)
    revs = list(c.memory.history(["users", "g0"], "u0"))
    assert len(revs) == 2
    found = c.memory.search(["users"], filter={"about.handle": "n3"})
    assert [x.item.key for x in found] == ["u3"]
    again = list(c.schemas.migrate_namespace("profile"))[-1]
    assert (again.memory_items_migrated, again.memory_items_current) == (0, 9)
    skipped = list(c.schemas.migrate_namespace("profile", skip_memory=True))[-1]
    assert skipped.memory_items_seen == 0


THREADS, PER_THREAD, ITEMS = 4, 5, 400


def test_sigkill_during_memory_migration_then_resume(tmp_path):
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        with proc.client(namespace="mig") as c:
            c.schemas.register("agent", [[], V2, V3])
            for t in range(THREADS):
                for i in range(PER_THREAD):
                    c.put_checkpoint(f"t{t}", state_v1(t * 100 + i), checkpoint_id=f"c{i}", schema="agent",
                                     schema_version=1)
            ops = []
            for i in range(ITEMS):
                ops.append((["kb", f"p{i % 7}"], f"k{i:04d}", {"notes": f"n{i}", "legacy": i,
                                                             "profile": {"first": "A", "last": str(i),
                                                                         "age": str(i)}}))
            for path, key, value in ops:
                c.memory.put(path, key, value, schema="agent", schema_version=1)
            killed = False
            for p in c.schemas.migrate_namespace("agent", batch_size=1):
                if p.memory_items_migrated >= ITEMS // 10:
                    proc.kill()  # in the middle of the memory part
                    killed = True
                    break
            assert killed
    finally:
        proc.kill()

    proc.start()
    try:
        with proc.client(namespace="mig") as c:
            versions = {1: 0, 3: 0}
            for path, key, value in ops:
                item = c.memory.get(path, key)
                versions[item.schema_version] += 1  # KeyError for any other version: never half-migrated
                if item.schema_version == 3:
                    assert from_value(item.value) == {"memo": value["notes"], "settings": {"theme": "dark"},
                                                      "profile": {"first": "A", "last": value["profile"]["last"],
                                                                  "age": int(value["profile"]["age"]),
                                                                  "tz": "UTC"}}
            assert versions[3] >= ITEMS // 10 and versions[1] > 0, versions
            last = list(c.schemas.migrate_namespace("agent", batch_size=50))[-1]
            assert last.memory_items_current == versions[3] and last.memory_items_migrated == versions[1]
            assert last.memory_items_failed == 0 and last.checkpoints_current == THREADS * PER_THREAD
            assert all(c.memory.get(path, key).schema_version == 3 for path, key, _ in ops)
            assert values_of(c.get_checkpoint("t0", "c0")) == state_v3(0)
    finally:
        proc.stop()
    done = subprocess.run([sys.executable, "-m", "sidecar", "verify", "--data-dir", str(tmp_path / "data"), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
