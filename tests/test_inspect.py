"""`sidecar inspect` against a live sidecar (gRPC), and read-only on its data directory while it runs.

One seeded namespace: three threads with metadata; a thread whose history forks (two children of
one checkpoint) and has a fork run's branch thread; a run with a step, events, an effect and an
artifact. Every view is checked in --json (the model) and in its human form, and the data-dir
source must give the same JSON as the gRPC one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from conftest import SidecarProcess
from inspect_seed import seed_conversation, seed_memory

from agentstate import Append, event
from sidecar.cli import main

NS = f"ns-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    proc = SidecarProcess(tmp_path_factory.mktemp("inspect") / "data").start()
    with proc.client(namespace=NS) as c:
        c.create_thread("t-b", {"user": "bob", "tier": 1})
        c.create_thread("t-c", {"user": "ann", "tier": 2})
        c.put_checkpoint("t-a", {"messages": [{"role": "user", "content": "hi"}], "n": 1}, checkpoint_id="c1",
                         metadata={"step": 0})
        c.update_thread("t-a", {"user": "ann", "tier": 1})
        c.put_checkpoint("t-a", {"messages": Append([{"role": "ai", "content": "hello"}]), "n": 2},
                         checkpoint_id="c2", parent_id="c1", metadata={"step": 1})
        c.put_checkpoint("t-a", {"messages": Append([{"role": "user", "content": "bye"}]), "n": 3},
                         checkpoint_id="c3", parent_id="c2", metadata={"step": 2})
        c.put_checkpoint("t-a", {"messages": Append([{"role": "user", "content": "other"}]), "n": 3,
                                 "note": "x" * 2000}, checkpoint_id="c3b", parent_id="c2", metadata={"step": 2})
        held = c.runs.start("t-a", input={"q": "go"})
        forked = c.runs.start("t-a", strategy="fork", start_checkpoint_id="c2", branch_thread_id="t-a-branch")
        forked.put_checkpoint({"n": 9}, parent_id="c2", checkpoint_id="b1")
        forked.complete()
        s = held.start_step("model", "call the model", input={"prompt": "hi"})
        held.end_step(s.step_id, output={"text": "ok"}, counters={"tokens_in": 12, "tokens_out": 5})
        held.append_events([event("progress", {"pct": 50}, step_id=s.step_id)])
        b = held.begin_effect("mail:1", description="send the mail", step_id=s.step_id)
        c.effects.complete("mail:1", b.token, {"message_id": 7})
        c.artifacts.upload("t-a", "report.txt", b"report body", content_type="text/plain", run_id=held.run_id)
        held.put_checkpoint({"messages": Append([{"role": "ai", "content": "sent"}]), "n": 4}, checkpoint_id="c4",
                            parent_id="c3", base_id="c3")
        held.complete({"answer": 42})
        # a conversation with a summary pyramid, and memory items (tests at the end of this file)
        done = seed_conversation(c, "chat")
        seed_memory(c)
    yield proc, held.run_id, forked.run_id, done
    proc.stop()


def inspect(capsys, source: list[str], *args: str, json_out: bool = True):
    rc = main(["inspect", *args, *source, "--namespace", NS, *(["--json"] if json_out else [])])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out) if json_out else out


@pytest.fixture(params=["address", "data-dir"])
def source(request, seeded):
    proc = seeded[0]
    return ["--address", proc.address] if request.param == "address" else ["--data-dir", str(proc.data_dir)]


def test_threads_by_metadata(capsys, source):
    everything = inspect(capsys, source, "threads")
    assert [t["thread_id"] for t in everything["threads"]] == ["chat", "t-a", "t-a-branch", "t-b", "t-c"]
    ann = inspect(capsys, source, "threads", "--filter", "user=ann")
    assert [(t["thread_id"], t["metadata"]) for t in ann["threads"]] == [  # the branch has its thread's metadata
        ("t-a", {"tier": 1, "user": "ann"}), ("t-a-branch", {"tier": 1, "user": "ann"}),
        ("t-c", {"tier": 2, "user": "ann"})]
    tier2 = inspect(capsys, source, "threads", "--filter", "user=ann", "--filter", "tier=2")  # 2 is a number
    assert [t["thread_id"] for t in tier2["threads"]] == ["t-c"]
    assert inspect(capsys, source, "threads", "--filter", "tier=\"2\"")["threads"] == []  # the string "2"
    text = inspect(capsys, source, "threads", "--filter", "user=ann", json_out=False)
    assert text.splitlines()[0].split() == ["THREAD", "STATUS", "UPDATED", "METADATA"]
    assert text.splitlines()[1].startswith("t-a ") and '"user": "ann"' in text and text.endswith("3 thread(s)\n")


def test_tree_with_forks_and_branches(capsys, source, seeded):
    tree = inspect(capsys, source, "tree", "t-a")
    nodes = {n["checkpoint_id"]: n for n in tree["checkpoints"]}
    assert [n["checkpoint_id"] for n in tree["checkpoints"]] == ["c1", "c2", "c3", "c3b", "c4"]  # oldest first
    assert nodes["c2"]["children"] == ["c3", "c3b"] and nodes["c2"]["fork"]
    assert [k for k, n in nodes.items() if n["fork"]] == ["c2"]
    assert nodes["c3"]["children"] == ["c4"] and nodes["c3b"]["children"] == []
    assert [k for k, n in nodes.items() if n["head"]] == ["c4"] and tree["heads"] == {"": "c4"}
    assert [(b["branch_thread_id"], b["run_id"]) for b in nodes["c2"]["branches"]] == [("t-a-branch", seeded[2])]
    assert nodes["c1"]["metadata"] == {"step": 0}
    text = inspect(capsys, source, "tree", "t-a", json_out=False)
    lines = text.splitlines()
    assert lines[0] == "thread t-a (5 checkpoint(s))"
    assert lines[1].startswith("c1  ") and "step=0" in lines[1]
    assert lines[2].startswith("c2  ") and "[fork: 2 children]" in lines[2]
    assert lines[3] == f"  ⎇ branch thread t-a-branch (run {seeded[2]})"
    assert lines[4].startswith("├── c3  ")
    assert lines[5].startswith("│   c4  ") and lines[5].endswith("[HEAD]")
    assert lines[6].startswith("└── c3b  ")


def test_one_checkpoints_values(capsys, source):
    cp = inspect(capsys, source, "checkpoint", "t-a", "c3b")
    assert cp["values"] == {"messages": [{"role": "user", "content": "hi"}, {"role": "ai", "content": "hello"},
                                         {"role": "user", "content": "other"}], "n": 3, "note": "x" * 2000}
    assert (cp["parent_checkpoint_id"], cp["metadata"]) == ("c2", {"step": 2})
    latest = inspect(capsys, source, "checkpoint", "t-a")
    assert latest["checkpoint_id"] == "c4" and latest["values"]["n"] == 4
    text = inspect(capsys, source, "checkpoint", "t-a", "c3b", json_out=False)
    assert "  parent    c2" in text and '  n: 3' in text
    assert "(2002 characters; --full)" in text  # long values are shortened
    full = inspect(capsys, source, "checkpoint", "t-a", "c3b", "--full", json_out=False)
    assert '  note: "' + "x" * 2000 + '"' in full


def test_diff_of_two_checkpoints(capsys, source):
    d = inspect(capsys, source, "diff", "t-a", "c3", "c3b")
    changes = {c["channel"]: c for c in d["changes"]}
    assert set(changes) == {"messages", "note"}
    m = changes["messages"]
    assert (m["kind"], m["from_length"], m["to_length"], m["common_prefix"], m["appended"]) == \
        ("modified", 3, 3, 2, False)
    assert m["removed"] == [{"role": "user", "content": "bye"}] and m["added"] == [{"role": "user", "content": "other"}]
    assert (changes["note"]["kind"], changes["note"]["to"]) == ("added", "x" * 2000)
    grown = inspect(capsys, source, "diff", "t-a", "c1", "c2")
    by = {c["channel"]: c for c in grown["changes"]}
    assert by["messages"]["appended"] and by["messages"]["added"] == [{"role": "ai", "content": "hello"}]
    assert (by["n"]["from"], by["n"]["to"]) == (1, 2)
    text = inspect(capsys, source, "diff", "t-a", "c3", "c3b", json_out=False)
    assert "  ~ messages: list 3 -> 3 items, first 2 shared" in text
    assert '      - {"content": "bye", "role": "user"}' in text and "  + note (added)" in text
    assert inspect(capsys, source, "diff", "t-a", "c3", "c3")["changes"] == []


def test_bytes_per_channel(capsys, source):
    b = inspect(capsys, source, "bytes", "t-a", "c3b")
    rows = {r["channel"]: r for r in b["channels"]}
    assert [r["channel"] for r in b["channels"]][0] == "note"  # the biggest first
    assert rows["note"]["bytes"] > 2000 > rows["messages"]["bytes"] > rows["n"]["bytes"] > 0
    assert b["total_bytes"] == sum(r["bytes"] for r in b["channels"])
    assert abs(sum(r["share"] for r in b["channels"]) - 1) < 0.01
    assert (rows["messages"]["kind"], rows["messages"]["items"]) == ("list", 3)
    # changed_in: c1 (new), c2, c3, c3b and c4 each changed messages and n; note appeared once
    assert (rows["messages"]["changed_in"], rows["n"]["changed_in"], rows["note"]["changed_in"]) == (5, 5, 1)
    assert b["checkpoints_in_history"] == 5
    text = inspect(capsys, source, "bytes", "t-a", "c3b", json_out=False)
    assert text.splitlines()[2].split()[0] == "note"


def test_run_timeline(capsys, source, seeded):
    r = inspect(capsys, source, "run", seeded[1])
    assert (r["thread_id"], r["status"], r["counts"]) == \
        ("t-a", "success", {"steps": 1, "events": r["counts"]["events"], "effects": 1, "artifacts": 1})
    kinds = [(i["kind"], i["what"]) for i in r["timeline"]]
    assert kinds[0] == ("run", "created") and kinds[-1][0] == "run" and kinds[-1][1] == "ended success"
    assert ("step", "model call the model started") in kinds and ("step", "model call the model ended") in kinds
    assert ("event", "progress") in kinds and ("effect", "mail:1 begun") in kinds and ("effect", "mail:1 done") in kinds
    assert ("artifact", "report.txt v1") in kinds
    order = [k for k in kinds if k[0] != "event" or k[1] == "progress"]
    assert order.index(("step", "model call the model started")) < order.index(("event", "progress")) < \
        order.index(("effect", "mail:1 begun")) < order.index(("artifact", "report.txt v1"))
    times = [i["time"] for i in r["timeline"]]
    assert times == sorted(times)
    ended = next(i for i in r["timeline"] if i["what"] == "model call the model ended")
    assert (ended["tokens_in"], ended["tokens_out"]) == (12, 5)
    assert r["timeline"][-1]["output"] == {"answer": 42}
    assert r["usage"]["tokens_in"] == 12
    text = inspect(capsys, source, "run", seeded[1], json_out=False)
    assert text.startswith(f"run {seeded[1]} on thread t-a: success, attempt 1\n")
    assert "  effect    mail:1 done" in text


def test_a_threads_runs(capsys, source, seeded):
    runs = inspect(capsys, source, "runs", "t-a")["runs"]
    assert [(r["run_id"], r["status"], r["last_checkpoint_id"]) for r in runs] == [(seeded[1], "success", "c4")]
    branch = inspect(capsys, source, "runs", "t-a-branch")["runs"]
    assert [(r["run_id"], r["branch_of"]) for r in branch] == [(seeded[2], "t-a")]
    text = inspect(capsys, source, "runs", "t-a", json_out=False)
    assert text.splitlines()[1].startswith(f"{seeded[1]}  success ")


def test_the_data_dir_source_answers_like_the_sidecar(capsys, seeded):
    proc = seeded[0]
    for view in (["threads"], ["tree", "t-a"], ["checkpoint", "t-a", "c3"], ["diff", "t-a", "c1", "c4"],
                 ["bytes", "t-a"], ["runs", "t-a"], ["run", seeded[1]]):
        by_grpc = inspect(capsys, ["--address", proc.address], *view)
        by_dir = inspect(capsys, ["--data-dir", str(proc.data_dir)], *view)
        assert by_dir == by_grpc, view


def test_errors_and_read_only(capsys, seeded, tmp_path):
    proc = seeded[0]
    for src in (["--address", proc.address], ["--data-dir", str(proc.data_dir)]):
        assert main(["inspect", "tree", "no-such-thread", *src, "--namespace", NS]) == 1
        assert "NOT_FOUND" in capsys.readouterr().err
    assert main(["inspect", "stats", "--data-dir", str(tmp_path / "nothing")]) == 2
    assert "no sidecar data directory" in capsys.readouterr().err
    before = os.stat(proc.data_dir / "data.mdb").st_mtime_ns
    stats = inspect(capsys, ["--data-dir", str(proc.data_dir)], "stats")
    assert stats["threads"] == 5 and stats["checkpoints"] >= 6  # t-a, its branch, t-b, t-c, chat
    assert os.stat(proc.data_dir / "data.mdb").st_mtime_ns == before  # nothing written


def test_the_console_command(seeded):
    proc = seeded[0]
    out = subprocess.run([sys.executable, "-m", "sidecar", "inspect", "tree", "t-a", "--address", proc.address,
                          "--namespace", NS], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("thread t-a (5 checkpoint(s))\n")


# ----------------------------------------------------------------- conversations, context, memory

@pytest.fixture(scope="module")
def conv_seeded(seeded):
    return seeded[3]  # the summary ids in the order the seeding submitted them


def test_a_conversation_with_its_summaries(capsys, source, conv_seeded):
    assert conv_seeded == ["L1:1-2", "L1:3-4", "L1:5-6", "L2:1-4"]
    m = inspect(capsys, source, "conversation", "chat")
    c = m["conversation"]
    assert (c["item_count"], c["first_seq"], c["last_seq"], c["summary_count"], c["pending_compactions"]) == \
        (9, 1, 9, 4, 1)
    assert [i["seq"] for i in m["items"]] == list(range(1, 10))
    assert m["items"][2]["content"] == "book a table for two" and m["items"][2]["role"] == "user"
    by_seq = {i["seq"]: i for i in m["items"]}
    assert by_seq[1]["summaries"] == ["L1:1-2", "L2:1-4"] and by_seq[4]["summaries"] == ["L1:3-4", "L2:1-4"]
    assert by_seq[5]["summaries"] == ["L1:5-6"]
    assert by_seq[7]["summaries"] == [] and by_seq[7]["pending_compaction"] == "L1:7-8"
    assert by_seq[9]["summaries"] == [] and by_seq[9]["pending_compaction"] is None
    assert m["unsummarised_items"] == 3
    assert m["pyramid"] == [{"level": 2, "summary_ids": ["L2:1-4"]},
                            {"level": 1, "summary_ids": ["L1:1-2", "L1:3-4", "L1:5-6"]}]
    sums = {s["summary_id"]: s for s in m["summaries"]}
    assert sums["L2:1-4"]["child_ids"] == ["L1:1-2", "L1:3-4"] and sums["L2:1-4"]["item_count"] == 4
    assert sums["L1:3-4"]["parent_id"] == "L2:1-4" and sums["L1:5-6"]["parent_id"] is None
    assert sums["L1:1-2"]["text"] == "summary of L1:1-2" and sums["L1:1-2"]["producer"] == "inspect-test/model"
    assert [(x["compaction_id"], x["state"]) for x in m["compactions"]] == [("L1:7-8", "pending")]
    assert m["compaction_policy"]["trigger_items"] == 3 and m["compaction_policy"]["source"] == "thread"
    newest = inspect(capsys, source, "conversation", "chat", "--last", "2")
    assert [i["seq"] for i in newest["items"]] == [8, 9] and newest["shown_items"] == 2

    text = inspect(capsys, source, "conversation", "chat", json_out=False)
    lines = text.splitlines()
    assert lines[0] == "conversation chat: 9 item(s), seq 1..9, 4 summary(ies), 1 pending compaction(s), " \
        f"~{c['estimated_tokens']} tokens"
    assert "  L2:1-4  covers summaries L1:1-2, L1:3-4 (4 item(s)" in text
    assert "    L1:5-6  covers items 5-6 (2 item(s)" in text
    assert "  L1:7-8  pending, attempts 0" in text
    row = next(line for line in lines if line.split()[:1] == ["3"])
    assert row.split()[:3] == ["3", "message", "user"] and "L1:3-4 < L2:1-4" in row and "book a table" in row
    assert "(L1:7-8 due)" in next(line for line in lines if line.split()[:1] == ["7"])


def _fates(m: dict) -> dict:
    """{seq or pin id: (fate, summary_id)} of an explanation (each source exactly once)."""
    out = {}
    for e in m["explanation"]:
        if e["source"] == "pinned":
            keys = [e["pin_id"]]
        else:
            keys = list(range(e["first_seq"], e["last_seq"] + 1))
        for k in keys:
            assert k not in out, k
            out[k] = (e["fate"], e["summary_id"])
    return out


def test_the_context_for_a_budget(capsys, source, conv_seeded):
    big = inspect(capsys, source, "context", "chat", "--budget", "100000")
    fates = _fates(big)
    assert set(fates) == {"rules", *range(1, 10)}  # every pinned and live item once
    assert fates["rules"] == ("kept", "")
    assert all(fates[s] == ("summarised", "L2:1-4") for s in range(1, 5))
    assert all(fates[s] == ("summarised", "L1:5-6") for s in (5, 6))
    assert all(fates[s][0] == "kept" for s in (7, 8, 9))  # L1:7-8 is not summarised yet
    assert [(i["source"], i["pin_id"] or i["summary_id"] or i["first_seq"]) for i in big["items"]] == [
        ("pinned", "rules"), ("summary", "L2:1-4"), ("summary", "L1:5-6"), ("item", 7), ("item", 8), ("item", 9)]
    assert big["items"][1]["content"] == "summary of L2:1-4" and big["stable_prefix_items"] == 3
    assert big["total_tokens"] == sum(i["tokens"] for i in big["items"]) <= 100000
    assert big["by_fate"]["summarised"]["items"] == 6 and len(big["context_hash"]) == 64

    # one token short of all of it: something old is dropped to fit, the newest is kept
    tight = inspect(capsys, source, "context", "chat", "--budget", str(big["total_tokens"] - 1))
    tf = _fates(tight)
    assert set(tf) == set(fates)
    assert "dropped_budget" in tight["by_fate"] and tight["total_tokens"] <= big["total_tokens"] - 1
    assert tf[9][0] == "kept" and tf["rules"][0] == "kept"
    dropped = next(e for e in tight["explanation"] if e["fate"] == "dropped_budget")
    assert dropped["why"] == "left out: over the budget" and dropped["context_index"] is None

    text = inspect(capsys, source, "context", "chat", "--budget", "100000", json_out=False)
    assert text.startswith(f"context of thread chat for a budget of 100000 tokens: 6 item(s), "
                           f"{big['total_tokens']} tokens, stable prefix 3 item(s), last seq 9")
    tokens = "~" + str(big["items"][1]["tokens"])
    assert f"   1  summary      {tokens:>6}  " in text and "L2:1-4 (items 1-4): summary of L2:1-4" in text
    assert "  items 1-4 (4)" in text and "summarised" in text and "-> #1 as L2:1-4" in text
    assert "  pin rules" in text


def test_a_context_budget_too_small(capsys, source, conv_seeded):
    rc = main(["inspect", "context", "chat", "--budget", "1", *source, "--namespace", NS])
    err = capsys.readouterr().err
    assert rc == 1 and "GetContext: FAILED_PRECONDITION" in err


def test_memory_paths_items_and_history(capsys, source, conv_seeded):
    paths = inspect(capsys, source, "memory-paths")
    assert paths["paths"] == [["docs"], ["users", "ann"], ["users", "bob"]]
    assert inspect(capsys, source, "memory-paths", "users")["paths"] == [["users", "ann"], ["users", "bob"]]
    items = inspect(capsys, source, "memory-items", "users")["items"]
    assert [(i["path"], i["key"], i["value"]) for i in items] == [
        (["users", "ann"], "prefs", {"theme": "light", "lang": "en"}), (["users", "bob"], "prefs", {"theme": "dark"})]
    assert len(inspect(capsys, source, "memory-items")["items"]) == 3
    one = inspect(capsys, source, "memory-item", "users/ann", "prefs")
    assert one["item"]["version"] == 2 and one["item"]["actor"] == "agent-2" and one["item"]["origin"] == "inferred"
    assert one["item"]["provenance"] == {"thread_id": "chat-1", "conversation_seq": 3}
    assert [(r["version"], r["kind"], r["actor"], r["value"]) for r in one["history"]] == [
        (2, "put", "agent-2", {"theme": "light", "lang": "en"}), (1, "put", "agent-1", {"theme": "dark"})]
    gone = inspect(capsys, source, "memory-item", '["users", "ann"]', "scratch")
    assert gone["item"] is None and [(r["kind"], r["actor"]) for r in gone["history"]] == [
        ("delete", "cleaner"), ("put", "")]
    # the inspector never refreshes a TTL
    before = inspect(capsys, source, "memory-item", "docs", "readme")["item"]["expire_time"]
    time.sleep(0.01)
    inspect(capsys, source, "memory-items", "docs")
    assert inspect(capsys, source, "memory-item", "docs", "readme")["item"]["expire_time"] == before

    text = inspect(capsys, source, "memory-paths", json_out=False)
    assert text.splitlines() == ["docs", "users/ann", "users/bob", "3 path(s)"]
    text = inspect(capsys, source, "memory-item", "users/ann", "prefs", json_out=False)
    assert text.splitlines()[0] == "memory item users/ann 'prefs'"
    assert "  v2  " in text and "  v1  " in text and '{"theme": "dark"}' in text
    assert "deleted or expired" in inspect(capsys, source, "memory-item", "users/ann", "scratch", json_out=False)
    assert main(["inspect", "memory-item", "users/ann", "never", *source, "--namespace", NS]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err


def test_the_data_dir_answers_like_the_sidecar_for_conversations_and_memory(capsys, seeded, conv_seeded):
    proc = seeded[0]
    tight = inspect(capsys, ["--address", proc.address], "context", "chat", "--budget", "100000")["total_tokens"] - 1
    for view in (["conversation", "chat"], ["context", "chat", "--budget", "100000"],
                 ["context", "chat", "--budget", str(tight)], ["memory-paths"], ["memory-items"],
                 ["memory-item", "users/ann", "prefs"], ["memory-item", "users/ann", "scratch"]):
        by_grpc = inspect(capsys, ["--address", proc.address], *view)
        by_dir = inspect(capsys, ["--data-dir", str(proc.data_dir)], *view)
        assert by_dir == by_grpc, view


# ----------------------------------------------------------------- credentials

def test_a_sidecar_with_an_auth_file_needs_the_token(capsys, tmp_path, monkeypatch):
    from sidecar.api import auth

    reader, other = auth.new_token(), auth.new_token()
    (tmp_path / "auth.toml").write_text("\n".join((auth.entry_toml(reader, "read", [NS], "reader"),
                                                   auth.entry_toml(other, "admin", ["elsewhere"], "other"))))
    proc = SidecarProcess(tmp_path / "data", "--auth-file", str(tmp_path / "auth.toml")).start()
    try:
        monkeypatch.delenv("SIDECAR_TOKEN", raising=False)
        src = ["--address", proc.address]
        assert main(["inspect", "threads", *src, "--namespace", NS]) == 1
        assert "UNAUTHENTICATED" in capsys.readouterr().err
        assert main(["inspect", "threads", *src, "--namespace", NS, "--token", other]) == 1
        assert "PERMISSION_DENIED" in capsys.readouterr().err
        assert main(["inspect", "threads", *src, "--namespace", NS, "--token", reader, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["threads"] == []
        monkeypatch.setenv("SIDECAR_TOKEN", reader)  # the default, as for `sidecar backup`
        assert main(["inspect", "threads", *src, "--namespace", NS, "--json"]) == 0
        capsys.readouterr()
        assert main(["inspect", "threads", "--address", "example.com:7421", "--token", reader]) == 2
        assert "only over TLS" in capsys.readouterr().err  # never sent in the clear to a remote host
    finally:
        proc.stop()
