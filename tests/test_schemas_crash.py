"""An eager migration (MigrateNamespace) killed with SIGKILL half-way, then resumed to completion: after the
restart every checkpoint (and conversation item) is whole at its old version or at the new one (never half-migrated), reads that name
the new version give the same values either way, and calling the migration again finishes the rest."""
from __future__ import annotations

import subprocess
import sys

from conftest import SidecarProcess
from test_schemas import V2, V3, state_v1, state_v3, values_of

THREADS = 24
PER_THREAD = 25


def test_sigkill_during_migrate_namespace_then_resume(tmp_path):
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        with proc.client(namespace="mig") as c:
            c.schemas.register("agent", [[], V2, V3])
            for t in range(THREADS):
                parent = ""
                for i in range(PER_THREAD):
                    cid = f"c{i:03d}"
                    c.put_checkpoint(f"t{t:03d}", state_v1(t * 1000 + i), checkpoint_id=cid, parent_id=parent,
                                     schema="agent", schema_version=1)
                    parent = cid
            total = THREADS * PER_THREAD
            seen_progress = 0
            for p in c.schemas.migrate_namespace("agent", batch_size=1):
                seen_progress += 1
                if p.checkpoints_migrated >= total // 10:
                    proc.kill()  # a crash in the middle of the eager rewrite
                    break
            assert seen_progress > 1
    finally:
        proc.kill()

    proc.start()
    try:
        with proc.client(namespace="mig") as c:
            versions = {1: 0, 3: 0}
            for t in range(THREADS):
                cps = list(c.list_checkpoints(f"t{t:03d}", include_values=True))
                assert len(cps) == PER_THREAD
                for cp in cps:
                    n = t * 1000 + int(cp.checkpoint_id[1:])
                    versions[cp.schema_version] += 1  # KeyError if a checkpoint had another version
                    assert values_of(cp) == (state_v1(n) if cp.schema_version == 1 else state_v3(n))
                    lazy = c.get_checkpoint(f"t{t:03d}", cp.checkpoint_id, read_schema_version=3)
                    assert values_of(lazy) == state_v3(n)
            assert versions[3] >= total // 10 and versions[1] > 0, versions  # the kill came half-way

            progress = list(c.schemas.migrate_namespace("agent", batch_size=16))
            last = progress[-1]
            assert last.threads_done == THREADS and last.checkpoints_seen == total
            assert last.checkpoints_current == versions[3] and last.checkpoints_migrated == versions[1]
            assert last.checkpoints_failed == 0
            for t in range(THREADS):
                for cp in c.list_checkpoints(f"t{t:03d}", include_values=True):
                    n = t * 1000 + int(cp.checkpoint_id[1:])
                    assert cp.schema_version == 3 and values_of(cp) == state_v3(n)
            report = c.check_integrity()
            assert report.missing_blobs == 0 and not report.problems
            assert report.checked_checkpoints == total
    finally:
        proc.stop()
    # the offline check reads the schema record and every rewritten checkpoint too
    done = subprocess.run([sys.executable, "-m", "sidecar", "verify", "--data-dir", str(tmp_path / "data"), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


CONV_THREADS, ITEMS = 6, 60


def _msg_v1(n: int) -> dict:
    return {"text": ("x" * 2100 if n % 5 == 0 else "") + f"m{n}", "tokens": str(n)}  # some over INLINE_MAX


def _msg_v3(n: int) -> dict:
    v1 = _msg_v1(n)
    return {"body": {"content": v1["text"], "tokens": n}, "lang": "en"}


def test_sigkill_during_conversation_item_migration_then_resume(tmp_path):
    from agentstate import schemas as s
    from agentstate.conversations import item, item_value
    from sidecar.state.schemas import encode
    steps = [[], [s.rename("text", "content"), s.convert("tokens", "int")],
             [s.nest(["content", "tokens"], "body"), s.add("lang", "en")]]

    def msg(n):
        out = item("message", _msg_v1(n), role="user", client_item_id=f"i{n}")
        out.schema, out.schema_version = "msg", 1
        return out

    proc = SidecarProcess(tmp_path / "data").start()
    try:
        with proc.client(namespace="mig") as c:
            c.schemas.register("msg", steps)
            for t in range(CONV_THREADS):
                c.conversations.append(f"t{t}", [msg(t * 1000 + i) for i in range(ITEMS)], create_thread=True)
            before = c.retention.quota().usage.bytes
            total = CONV_THREADS * ITEMS
            killed = False
            for p in c.schemas.migrate_namespace("msg", batch_size=1, skip_memory=True):
                if p.conversation_items_migrated >= total // 10:
                    proc.kill()  # in the middle of the conversation part
                    killed = True
                    break
            assert killed
    finally:
        proc.kill()

    proc.start()
    try:
        with proc.client(namespace="mig") as c:
            versions = {1: 0, 3: 0}
            for t in range(CONV_THREADS):
                got = list(c.conversations.list(f"t{t}"))
                assert [x.client_item_id for x in got] == [f"i{t * 1000 + i}" for i in range(ITEMS)]
                for x in got:
                    n = int(x.client_item_id[1:])
                    versions[x.schema_version] += 1  # KeyError for any other version: never half-migrated
                    assert item_value(x) == (_msg_v1(n) if x.schema_version == 1 else _msg_v3(n))
            assert versions[3] >= total // 10 and versions[1] > 0, versions
            last = list(c.schemas.migrate_namespace("msg", batch_size=50, skip_memory=True))[-1]
            assert (last.conversation_items_seen, last.conversation_items_current, last.conversation_items_migrated,
                    last.conversation_items_failed) == (total, versions[3], versions[1], 0)
            for t in range(CONV_THREADS):
                for x in c.conversations.list(f"t{t}"):
                    assert x.schema_version == 3 and item_value(x) == _msg_v3(int(x.client_item_id[1:]))
            # every item's charge moved with it: the counter is the sum of the new sizes
            grew = sum(len(encode(_msg_v3(t * 1000 + i))) - len(encode(_msg_v1(t * 1000 + i)))
                       for t in range(CONV_THREADS) for i in range(ITEMS))
            assert c.retention.quota().usage.bytes == before + grew
            report = c.check_integrity()
            assert report.missing_blobs == 0 and not report.problems
    finally:
        proc.stop()
    done = subprocess.run([sys.executable, "-m", "sidecar", "verify", "--data-dir", str(tmp_path / "data"), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
