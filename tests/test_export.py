"""Export and import (ops/transfer.py, storage/exportfile.py, `sidecar export|import`, docs/export-format.md).

One seeded namespace on sidecar A: threads with metadata; a thread whose history forks (two children of one
checkpoint), with pending writes, a fork run's branch thread, a run with a step, events, an effect and an
artifact, a conversation with a summary, a pending compaction and pins; LangGraph checkpoints written by the
saver; memory items with history, a vector, a deleted one. It is exported while A serves, imported into a new
data directory, and sidecar B started on it must answer every read as A does. A file cut short or with one
byte changed is refused and nothing is written; conflicts are refused unless --replace; a golden file of
format version 1 must stay readable.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import msgspec
import pytest
from conftest import SidecarProcess

from agentstate import Append, event
from agentstate.conversations import item
from sidecar.storage import exportfile, verify

NS = f"ns-{uuid.uuid4().hex[:10]}"
GOLDEN = Path(__file__).resolve().parent / "golden" / "export-v1.asx"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sidecar", *args], capture_output=True, text=True, timeout=120)


def seed(c, small: bool = False) -> dict:
    from langgraph.checkpoint.base import empty_checkpoint

    from agentstate.langgraph import SidecarSaver

    c.create_thread("t-b", {"user": "bob", "tier": 1})
    c.put_checkpoint("t-a", {"messages": [{"role": "user", "content": "hi"}], "n": 1}, checkpoint_id="c1",
                     metadata={"step": 0})
    c.update_thread("t-a", {"user": "ann"})
    c.put_checkpoint("t-a", {"messages": Append([{"role": "ai", "content": "hello"}]), "n": 2,
                             "doc": {"title": "t", "body": "b" * 3000}}, checkpoint_id="c2", parent_id="c1",
                     metadata={"step": 1})
    c.put_writes("t-a", "c2", [("task-1", 0, "messages", [{"role": "tool", "content": "r"}]),
                               ("task-1", 1, "n", 5), ("task-2", -1, "__error__", "boom")])
    c.put_checkpoint("t-a", {"messages": Append([{"role": "user", "content": "bye"}]), "n": 3}, checkpoint_id="c3",
                     parent_id="c2")
    c.put_checkpoint("t-a", {"messages": Append([{"role": "user", "content": "other"}]), "n": 3,
                             "note": "x" * (33_000 if small else 70_000)}, checkpoint_id="c3b", parent_id="c2")
    # (c3b: a fork of c2, and a value long enough to be cut into chunks)
    c.put_checkpoint("t-a", {"scratch": [1, 2, 3]}, checkpoint_id="s1", checkpoint_ns="sub")
    held = c.runs.start("t-a", input={"q": "go"})
    forked = c.runs.start("t-a", strategy="fork", start_checkpoint_id="c2", branch_thread_id="t-a-branch")
    forked.put_checkpoint({"n": 9}, parent_id="c2", checkpoint_id="b1")
    forked.complete()
    s = held.start_step("model", "call the model", input={"prompt": "hi"})
    held.end_step(s.step_id, output={"text": "ok"}, counters={"tokens_in": 12, "tokens_out": 5})
    held.append_events([event("progress", {"pct": 50}, step_id=s.step_id, client_event_id="ev-1")])
    b = held.begin_effect("mail:1", description="send the mail", step_id=s.step_id)
    c.effects.complete("mail:1", b.token, {"message_id": 7})
    c.artifacts.upload("t-a", "report.txt", b"report body " * (100 if small else 5000), content_type="text/plain",
                       run_id=held.run_id)
    c.artifacts.upload("t-a", "report.txt", b"second version", content_type="text/plain")
    held.put_checkpoint({"messages": Append([{"role": "ai", "content": "sent"}]), "n": 4}, checkpoint_id="c4",
                        parent_id="c3", base_id="c3")
    held.complete({"answer": 42})
    # a conversation with a summary and a pending compaction, pins
    conv = c.conversations
    conv.append("t-conv", [], create_thread=True)
    conv.set_compaction_policy(thread_id="t-conv", trigger_items=4, compact_items=2, keep_last_items=1,
                                fallback_after=3600)  # no fallback summary while the test compares
    conv.append("t-conv", [item("message", f"m{i}", role="user", client_item_id=f"ci{i}") for i in range(4)]
                + [item("tool_call", {"name": "f"}, call_id="call-1", tool_name="f"),
                   item("tool_result", {"ok": True}, call_id="call-1", tool_name="f")])
    claim = conv.claim_compaction(worker="w", thread_id="t-conv")
    conv.submit_summary(claim, "a summary", producer="w/test")
    conv.append("t-conv", [item("message", f"late {i}", role="ai") for i in range(4)])  # another one due
    conv.append("t-conv", [item("tool_result", {"rows": ["a large result row"] * 400}, call_id="call-2",
                                tool_name="g")])  # over 2 KiB: its content is a node, exported as a value
    conv.set_pin("rules", "message", "be brief", thread_id="t-conv", role="system")
    conv.set_pin("ns-rules", "message", "namespace rule", role="system")
    conv.set_idle_policy(ttl=365 * 24 * 3600)  # a namespace policy: an idle timer on the conversation
    ctx = conv.get_context("t-conv", 8000)
    conv.report_usage("t-conv", ctx, 40)  # calibration
    # LangGraph checkpoints through the saver
    saver = SidecarSaver(c)
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": ["hi", "there"], "count": 2}
    cp["channel_versions"] = {"messages": 1, "count": 1}
    cfg = saver.put({"configurable": {"thread_id": "lg", "checkpoint_ns": ""}}, cp, {"source": "loop", "step": 1},
                    {"messages": 1, "count": 1})
    saver.put_writes(cfg, [("messages", ["more"]), ("count", 3)], "task-9")
    cp2 = empty_checkpoint()
    cp2["channel_values"] = {"messages": ["hi", "there", "more"], "count": 3}
    cp2["channel_versions"] = {"messages": 2, "count": 2}
    saver.put(cfg, cp2, {"source": "loop", "step": 2}, {"messages": 2, "count": 2})
    saver.close()
    # memory: history, vectors, a deleted item
    m = c.memory
    m.put(("users", "ann"), "prefs", {"lang": "en", "n": 1})
    m.put(("users", "ann"), "prefs", {"lang": "fr", "n": 2}, vectors={"emb": [1.0, 0.0, 0.5]}, schema="prefs",
          schema_version=2)  # a revision's schema travels with the history
    m.put(("users", "bob"), "prefs", {"lang": "de"})
    m.put(("users", "bob"), "gone", {"x": 1})
    m.delete(("users", "bob"), "gone")
    return {"held": held.run_id, "forked": forked.run_id}


def reads(c) -> dict:
    """Every read a client makes of the seeded namespace, as comparable values (store-local etags left out)."""
    from agentstate.langgraph import SidecarSaver

    def ser(msg):
        if isinstance(msg, (list, tuple)):
            return [ser(m) for m in msg]
        return msg.SerializeToString(deterministic=True)

    out: dict = {}
    threads = [t for t in c.list_threads()]
    for t in threads:
        t.etag = ""
    out["threads"] = sorted(ser(t) for t in threads)
    for t in threads:
        tid = t.thread_id
        out[tid, "checkpoints"] = [ser(x) for x in c.list_checkpoints(tid, include_values=True,
                                                                     include_pending_writes=True)]
        out[tid, "etags"] = [(x.checkpoint_ns, x.checkpoint_id, x.etag) for x in c.list_checkpoints(tid)]
        for x in c.list_checkpoints(tid):
            got = c.get_checkpoint(tid, x.checkpoint_id, checkpoint_ns=x.checkpoint_ns)
            out[tid, "get", x.checkpoint_ns, x.checkpoint_id] = ser(got)
        runs = list(c.runs.list(tid))
        for r in runs:
            r.etag = ""  # like a thread's etag, it holds the store's internal thread key
        out[tid, "runs"] = [ser(r) for r in runs]
        for r in c.runs.list(tid):
            out[tid, "steps", r.run_id] = [ser(s) for s in c.runs.list_steps(r.run_id)]
        out[tid, "events"] = [ser(e) for e in c.events.list(tid)]
        out[tid, "effects"] = [ser(e) for e in c.effects.list(thread_id=tid)]
        out[tid, "artifacts"] = [ser(a) for a in c.artifacts.list(tid)]
        for a in c.artifacts.list(tid):
            out[tid, "artifact", a.name, a.version] = c.artifacts.download(tid, a.name, version=a.version)[1]
        out[tid, "branches"] = [ser(b) for b in c.runs.list_branches(tid)]
        out[tid, "usage"] = ser(c.runs.thread_usage(tid))
        out[tid, "items"] = [ser(i) for i in c.conversations.list(tid)]
        out[tid, "conversation"] = ser(c.conversations.conversation(tid))
        out[tid, "summaries"] = [ser(s) for s in c.conversations.list_summaries(tid)]
        out[tid, "compactions"] = [ser(x) for x in c.conversations.list_compactions(tid)]
        out[tid, "pins"] = ser(c.conversations.list_pins(thread_id=tid, include_namespace=True))
    saver = SidecarSaver(c)
    for tup in saver.list({"configurable": {"thread_id": "lg"}}):
        got = saver.get_tuple(tup.config)
        out["lg", tup.config["configurable"]["checkpoint_id"]] = (got.config, got.checkpoint, got.metadata,
                                                                 got.parent_config, got.pending_writes)
    saver.close()
    items = c.memory.search(("users",), include_vectors=True)
    mem = []
    out["memory_values"] = sorted((tuple(it.item.path), it.item.key, ser(it.item.value)) for it in items)
    for it in items:
        it.item.etag = ""  # names the item inside one store (its item id)
        mem.append(ser(it))
    out["memory"] = sorted(mem)
    for path, key in ((("users", "ann"), "prefs"), (("users", "bob"), "prefs"), (("users", "bob"), "gone")):
        hist = list(c.memory.history(path, key, include_values=True))
        for h in hist:
            h.etag = ""
        out["history", path, key] = [ser(h) for h in hist]
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("export")
    a = SidecarProcess(base / "a").start()
    try:
        with a.client(namespace=NS) as c:
            ids = seed(c)
            before = reads(c)
        out = cli("export", "--data-dir", str(a.data_dir), "--namespace", NS, "--to", str(base / "ns.asx"))
        assert out.returncode == 0, out.stderr
        assert "export done" in out.stdout and "threads" in out.stderr  # progress on stderr, summary on stdout
        yield {"base": base, "a": a, "file": base / "ns.asx", "reads": before, "ids": ids}
    finally:
        a.stop()


def test_round_trip_across_two_sidecars_reads_the_same(exported):
    base = exported["base"]
    target = base / "b"
    check = cli("import", "--from", str(exported["file"]), "--check")
    assert check.returncode == 0 and "is intact" in check.stdout and "5 threads" in check.stdout, check.stdout
    assert not target.exists()
    out = cli("import", "--from", str(exported["file"]), "--data-dir", str(target))
    assert out.returncode == 0, out.stderr
    assert "import done" in out.stdout and "5 threads" in out.stdout, out.stdout
    report = verify.verify_path(str(target))
    assert report.clean, report.to_dict()
    b = SidecarProcess(target).start()
    try:
        with b.client(namespace=NS) as c:
            after = reads(c)
            assert c.check_integrity().missing_blobs == 0
    finally:
        b.stop()
    src = exported["reads"]
    assert set(after) == set(src)
    for k in src:
        assert after[k] == src[k], k
    # a namespace of its own: the same reads under another name
    other = base / "b2"
    out = cli("import", "--from", str(exported["file"]), "--data-dir", str(other), "--namespace", "moved")
    assert out.returncode == 0, out.stderr
    b2 = SidecarProcess(other).start()
    try:
        with b2.client(namespace="moved") as c:
            moved = reads(c)
    finally:
        b2.stop()
    assert moved.keys() == src.keys()
    for k in src:
        if k[-1] == "etags" or k == "memory_values" or (k[0] == "lg" and len(k[1]) == 36):  # saver tuples
            assert moved[k] == src[k], k


def test_a_thread_alone_with_its_forks_and_branch_links(exported, tmp_path):
    a = exported["a"]
    f = tmp_path / "t-a.asx"
    out = cli("export", "--data-dir", str(a.data_dir), "--namespace", NS, "--thread", "t-a", "--to", str(f))
    assert out.returncode == 0, out.stderr
    contents = exportfile.read(str(f))
    assert contents.header["scope"] == {"namespace": NS, "thread": "t-a"}
    assert contents.counts["thread"] == 1 and "memory_item" not in contents.counts
    cps = {r["checkpoint_id"]: r for r in contents.records if r["t"] == "checkpoint"}
    assert {k: v["parent_id"] for k, v in cps.items()} == {"c1": "", "c2": "c1", "c3": "c2", "c3b": "c2",
                                                           "c4": "c3", "s1": ""}
    assert [r["branch_thread_id"] for r in contents.records if r["t"] == "branch"] == ["t-a-branch"]
    target = tmp_path / "b"
    out = cli("import", "--from", str(f), "--data-dir", str(target))
    assert out.returncode == 0, out.stderr
    b = SidecarProcess(target).start()
    try:
        with b.client(namespace=NS) as c:
            tree = {x.checkpoint_id: x.parent_checkpoint_id for x in c.list_checkpoints("t-a")}
            assert tree == {k: v["parent_id"] for k, v in cps.items()}
            assert [x.branch_thread_id for x in c.runs.list_branches("t-a")] == []  # its branch thread is not here
            src = exported["reads"]
            assert [x.SerializeToString(deterministic=True) for x in c.list_checkpoints(
                "t-a", include_values=True, include_pending_writes=True)] == src[("t-a", "checkpoints")]
    finally:
        b.stop()
    # the branch thread exported alone and imported next to it: the link is whole again
    fb = tmp_path / "branch.asx"
    assert cli("export", "--data-dir", str(a.data_dir), "--namespace", NS, "--thread", "t-a-branch",
               "--to", str(fb)).returncode == 0
    out = cli("import", "--from", str(fb), "--data-dir", str(target))
    assert out.returncode == 0, out.stderr
    b = SidecarProcess(target).start()
    try:
        with b.client(namespace=NS) as c:
            src = exported["reads"]
            assert [x.SerializeToString(deterministic=True) for x in c.runs.list_branches("t-a")] == \
                src[("t-a", "branches")]
            assert [x.checkpoint_id for x in c.list_checkpoints("t-a-branch")] == [
                x[1] for x in src[("t-a-branch", "etags")]]
            # the imported store takes new writes on the imported chain
            c.put_checkpoint("t-a", {"n": 5}, checkpoint_id="c5", parent_id="c4")
            assert c.get_checkpoint("t-a").checkpoint_id == "c5"
    finally:
        b.stop()


def _rows(data_dir: Path) -> dict:
    env, dbs = verify.open_env(str(data_dir))
    try:
        with env.begin() as txn:
            return {name: txn.stat(db)["entries"] for name, db in dbs.items()}
    finally:
        env.close()


@pytest.mark.parametrize("damage", ["truncate", "flip", "drop-trailer", "append"])
def test_a_damaged_file_is_refused_and_nothing_is_written(exported, tmp_path, damage):
    data = exported["file"].read_bytes()
    bad = tmp_path / "bad.asx"
    if damage == "truncate":
        bad.write_bytes(data[:len(data) * 2 // 3])
    elif damage == "flip":
        b = bytearray(data)
        b[len(b) // 2] ^= 0x01
        bad.write_bytes(bytes(b))
    elif damage == "drop-trailer":
        # the last frame is the trailer
        pos, last = 0, 0
        while pos < len(data):
            last = pos
            pos += 4 + int.from_bytes(data[pos:pos + 4], "big")
        bad.write_bytes(data[:last])
    else:
        bad.write_bytes(data + (5).to_bytes(4, "big") + msgspec.msgpack.encode({"t": "x"}))
    target = tmp_path / "target"
    # a store that already holds something: it must be left exactly as it was
    s = SidecarProcess(target).start()
    with s.client(namespace="keep") as c:
        c.put_checkpoint("mine", {"v": 1}, checkpoint_id="k1")
    s.stop()
    before = _rows(target)
    out = cli("import", "--from", str(bad), "--data-dir", str(target))
    assert out.returncode == 2
    assert "nothing was imported" in out.stderr
    assert _rows(target) == before
    check = cli("import", "--from", str(bad), "--check")
    assert check.returncode == 2


def test_a_tampered_record_with_a_recomputed_trailer_is_refused(exported, tmp_path):
    """Someone who rewrites the trailer too: a blob whose bytes do not match its hash is still refused."""
    data = exported["file"].read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        frames.append(msgspec.msgpack.decode(data[pos + 4:pos + 4 + n]))
        pos += 4 + n
    for rec in frames:
        if rec["t"] == "blob" and b"hello" in rec["enc"]:
            rec["enc"] = rec["enc"].replace(b"hello", b"HELLO")
            break
    else:
        raise AssertionError("no blob to change")
    w_path = tmp_path / "tampered.asx"
    _rewrite(frames, w_path)
    out = cli("import", "--from", str(w_path), "--data-dir", str(tmp_path / "t"))
    assert out.returncode == 2 and "does not match its hash" in out.stderr, out.stderr
    assert not (tmp_path / "t" / "data.mdb").exists()


def test_a_newer_format_version_is_refused_with_its_reason(exported, tmp_path):
    from sidecar.ops import transfer
    data = exported["file"].read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        frames.append(msgspec.msgpack.decode(data[pos + 4:pos + 4 + n]))
        pos += 4 + n
    frames[0]["version"] = 2
    _rewrite(frames, tmp_path / "v2.asx")
    with pytest.raises(transfer.ApiError) as e:
        transfer.verify_file(str(tmp_path / "v2.asx"))
    assert e.value.reason == "EXPORT_VERSION_UNSUPPORTED" and e.value.metadata["field"] == "from"
    out = cli("import", "--from", str(tmp_path / "v2.asx"), "--data-dir", str(tmp_path / "t"))
    assert out.returncode == 2 and "EXPORT_VERSION_UNSUPPORTED" in out.stderr and "version 2" in out.stderr
    with pytest.raises(transfer.ApiError) as e:
        transfer.verify_file(str(exported["file"]), "bad\x00name")
    assert e.value.reason == "EXPORT_FILE_INVALID"


def _rewrite(frames: list[dict], path: Path) -> None:
    """Frames written again with a trailer that matches them."""
    from blake3 import blake3
    h, counts, body = blake3(), {}, b""
    for rec in frames:
        if rec["t"] == "end":
            continue
        data = msgspec.msgpack.encode(rec)
        frame = len(data).to_bytes(4, "big") + data
        h.update(frame)
        body += frame
        counts[rec["t"]] = counts.get(rec["t"], 0) + 1
    trailer = msgspec.msgpack.encode({"t": "end", "counts": counts, "blake3": h.hexdigest()})
    path.write_bytes(body + len(trailer).to_bytes(4, "big") + trailer)


def test_a_value_that_does_not_rebuild_its_root_is_refused(exported, tmp_path):
    data = exported["file"].read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        frames.append(msgspec.msgpack.decode(data[pos + 4:pos + 4 + n]))
        pos += 4 + n
    for rec in frames:
        if rec["t"] == "checkpoint" and rec["checkpoint_id"] == "c3":
            ch = dict(rec["channels"])["messages"]
            ch["items"] = ch["items"][:-1]  # an item dropped from a list, every blob still intact
            break
    _rewrite(frames, tmp_path / "f.asx")
    out = cli("import", "--from", str(tmp_path / "f.asx"), "--data-dir", str(tmp_path / "t"))
    assert out.returncode == 2 and "does not hash to the root" in out.stderr, out.stderr


def test_conflicts_are_refused_unless_replace(exported, tmp_path):
    f = exported["file"]
    target = tmp_path / "b"
    s = SidecarProcess(target).start()
    with s.client(namespace=NS) as c:
        c.put_checkpoint("t-b", {"mine": True}, checkpoint_id="m1")
    s.stop()
    before = _rows(target)
    out = cli("import", "--from", str(f), "--data-dir", str(target))
    assert out.returncode == 2
    assert "IMPORT_THREAD_EXISTS" in out.stderr and "'t-b'" in out.stderr and "nothing was imported" in out.stderr
    assert _rows(target) == before
    # the API's view of the same refusal: ALREADY_EXISTS with the reason and the thread
    from sidecar.errors import REASONS
    from sidecar.ops import transfer
    from sidecar.storage.store import Store
    import grpc
    assert REASONS["IMPORT_THREAD_EXISTS"] == grpc.StatusCode.ALREADY_EXISTS
    store = Store(str(target))
    try:
        with pytest.raises(transfer.ApiError) as e:
            transfer.import_file(store, str(f))
        assert e.value.reason == "IMPORT_THREAD_EXISTS" and e.value.metadata["thread_id"] == "t-b"
    finally:
        store.close()
    assert _rows(target) == before
    # a memory item in the way is a conflict too
    s = SidecarProcess(tmp_path / "m").start()
    with s.client(namespace=NS) as c:
        c.memory.put(("users", "ann"), "prefs", {"lang": "xx"})
    s.stop()
    out = cli("import", "--from", str(f), "--data-dir", str(tmp_path / "m"))
    assert out.returncode == 2 and "IMPORT_CONFLICT" in out.stderr and "'prefs'" in out.stderr
    # --replace: the exported thread and memory item replace the target's
    out = cli("import", "--from", str(f), "--data-dir", str(target), "--replace")
    assert out.returncode == 0, out.stderr
    assert "1 replaced" in out.stdout
    out = cli("import", "--from", str(f), "--data-dir", str(tmp_path / "m"), "--replace")
    assert out.returncode == 0, out.stderr
    s = SidecarProcess(target).start()
    try:
        with s.client(namespace=NS) as c:
            assert [x.checkpoint_id for x in c.list_checkpoints("t-b")] == []
            assert c.get_thread("t-b").metadata["user"].msgpack == msgspec.msgpack.encode("bob")
            after = reads(c)
    finally:
        s.stop()
    for k, v in exported["reads"].items():
        assert after[k] == v, k
    s = SidecarProcess(tmp_path / "m").start()
    try:
        with s.client(namespace=NS) as c:
            got = c.memory.get(("users", "ann"), "prefs")
            assert got.value.msgpack  # the exported value, not the target's
            from agentstate import codec
            assert codec.decode(got.value.msgpack)["lang"] == "fr"
    finally:
        s.stop()


def test_export_refuses_an_existing_file_and_a_missing_thread(exported, tmp_path):
    a = exported["a"]
    out = cli("export", "--data-dir", str(a.data_dir), "--namespace", NS, "--to", str(exported["file"]))
    assert out.returncode == 2 and "never overwrites" in out.stderr
    out = cli("export", "--data-dir", str(a.data_dir), "--namespace", NS, "--thread", "nope",
              "--to", str(tmp_path / "x.asx"))
    assert out.returncode == 2 and "nope" in out.stderr
    assert not (tmp_path / "x.asx").exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".export")]


def test_golden_version_1_file_stays_readable(tmp_path):
    """tests/golden/export-v1.asx was written by version 1 of the format (seed(small=True) in namespace
    "golden"): it holds every record kind and must import the same forever."""
    from agentstate import codec
    from agentstate.langgraph import SidecarSaver
    from sidecar.ops import transfer

    contents = exportfile.read(str(GOLDEN))
    assert contents.header["format"] == "agentstate-export" and contents.header["version"] == 1
    # (the golden file predates the schema registry in exports)
    assert set(contents.counts) == {"header", "blob"} | transfer.THREAD_KINDS | (transfer.NAMESPACE_KINDS - {"schema"}) \
        | {"thread"}
    target = tmp_path / "g"
    out = cli("import", "--from", str(GOLDEN), "--data-dir", str(target))
    assert out.returncode == 0, out.stderr
    # exported again from the imported store before any sidecar serves it: the same records (memory item ids
    # and insertion numbers are the store's own). Not after serving: the file's timers (compaction fallbacks,
    # memory TTLs) fall due in wall-clock time, and a serving sidecar then applies them.
    again = tmp_path / "again.asx"
    assert cli("export", "--data-dir", str(target), "--namespace", "golden", "--to", str(again)).returncode == 0
    def comparable(recs):
        out = []
        for r in recs:
            r = dict(r)
            if r["t"] == "schedule":
                continue
            if r["t"] == "conversation_state":
                r.pop("timer_us")
            if r["t"] == "namespace_config":
                r.pop("walk_from")
            if r["t"] in ("memory_item", "memory_revision"):
                r.pop("item_id", None)
                r.pop("etag", None)
                r.pop("ins_seq", None)
            if r["t"] == "memory_path":
                r.pop("first_seq", None)
            if r["t"] == "conversation_item":
                r.setdefault("node", None)  # the golden file predates large contents as nodes
            if r["t"] == "checkpoint":
                r.setdefault("schema", "")  # ... and schema names (docs/lifecycle.md "Schema versions")
            if r["t"] in ("memory_item", "memory_revision"):  # ... and revisions' schemas
                r.setdefault("schema", "")
                r.setdefault("schema_version", 0)
            if r["t"] == "conversation_item":  # ... and conversation items' schemas
                r.setdefault("schema", "")
                r.setdefault("schema_version", 0)
            out.append(r)
        return out
    assert comparable(exportfile.read(str(again)).records) == comparable(contents.records)
    # served with the test's clock at the file's own time: its timers (compaction fallbacks, memory TTLs, the
    # conversation's idle expiry) are the same distance away whenever the test runs
    from conftest import InProcess

    from agentstate import Client
    s = InProcess(target)
    s.clock.now = min(r["created_us"] for r in contents.records if r["t"] == "thread") + 600_000_000
    try:
        with Client(s.address, namespace="golden") as c:
            cps = {x.checkpoint_id: x for x in c.list_checkpoints("t-a", include_values=True,
                                                                 include_pending_writes=True)}
            assert {k: v.parent_checkpoint_id for k, v in cps.items()} == {
                "c1": "", "c2": "c1", "c3": "c2", "c3b": "c2", "c4": "c3", "s1": ""}
            msgs = [codec.decode(i.msgpack) for i in cps["c4"].channels["messages"].value.list.items]
            assert msgs == [{"role": "user", "content": "hi"}, {"role": "ai", "content": "hello"},
                            {"role": "user", "content": "bye"}, {"role": "ai", "content": "sent"}]
            assert codec.decode(cps["c3b"].channels["note"].value.msgpack) == "x" * 33_000
            assert cps["c2"].etag == GOLDEN_ETAG_C2
            assert sorted((w.task_id, w.channel) for w in cps["c2"].pending_writes) == [
                ("task-1", "messages"), ("task-1", "n"), ("task-2", "__error__")]
            outputs = [codec.decode(r.output.msgpack) for r in c.runs.list("t-a") if r.output.msgpack]
            assert {"answer": 42} in outputs
            done = [r for r in c.runs.list("t-a") if r.output.msgpack and codec.decode(r.output.msgpack)][0]
            assert [st.name for st in c.runs.list_steps(done.run_id)] == ["call the model"]
            assert [e.type for e in c.events.list("t-a") if e.type == "progress"] == ["progress"]
            assert codec.decode(c.effects.get("mail:1").outcome.msgpack) == {"message_id": 7}
            assert c.artifacts.download("t-a", "report.txt", version=1)[1] == b"report body " * 100
            assert [b.branch_thread_id for b in c.runs.list_branches("t-a")] == ["t-a-branch"]
            items = list(c.conversations.list("t-conv"))
            assert [codec.decode(i.content.msgpack) for i in items][:4] == ["m0", "m1", "m2", "m3"]
            assert "a summary" in [x.text for x in c.conversations.list_summaries("t-conv")]
            assert codec.decode(c.memory.get(("users", "ann"), "prefs").value.msgpack) == {"lang": "fr", "n": 2}
            assert len(list(c.memory.history(("users", "bob"), "gone"))) == 2  # put, then delete
            with SidecarSaver(c) as saver:
                got = saver.get_tuple({"configurable": {"thread_id": "lg", "checkpoint_ns": ""}})
                assert got.checkpoint["channel_values"] == {"messages": ["hi", "there", "more"], "count": 3}
    finally:
        s.close()


#: the etag (content hash) of golden checkpoint c2: the same bytes rebuild the same root on every import
GOLDEN_ETAG_C2 = "c9bce4c0a9e9728b2c829d9549cc9c311729adaff35cbcac634f6843e39f12b1"  # printed by make_golden


def make_golden(path: Path) -> None:  # pragma: no cover - run by hand: python tests/test_export.py
    """Write tests/golden/export-v1.asx from a fresh sidecar (kept for the record; the file is committed)."""
    import tempfile
    d = Path(tempfile.mkdtemp())
    s = SidecarProcess(d / "data").start()
    try:
        with s.client(namespace="golden") as c:
            seed(c, small=True)
            print("etag of c2:", c.get_checkpoint("t-a", "c2").etag)
    finally:
        s.stop()
    out = cli("export", "--data-dir", str(d / "data"), "--namespace", "golden", "--to", str(path))
    assert out.returncode == 0, out.stderr
    shutil.rmtree(d)


if __name__ == "__main__":  # pragma: no cover
    make_golden(GOLDEN)
