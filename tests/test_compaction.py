"""Compaction: the 20/15/5 policy and the pyramid end to end with a fake summariser worker, claims and leases
(a worker SIGKILLed between claim and submit), appends racing a compaction, stale and late summaries refused,
the due event in the thread's event log, the extractive fallback (with an injected clock), policies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import grpc
import pytest

from agentstate import AgentStateError, Client
from agentstate.conversations import compaction_hash, item, item_value
from agentstate.v1 import conversations_pb2 as cpb
from conftest import InProcess

from sidecar.state import summaries as state_summaries


def tid(prefix="comp") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def msg(text, role="user", **kw):
    return item("message", text, role=role, **kw)


def fails(fn, code, reason, field=None):
    with pytest.raises(AgentStateError) as e:
        fn()
    assert (e.value.code, e.value.reason) == (code, reason), e.value
    if field is not None:
        assert e.value.field == field, e.value
    return e.value


@pytest.fixture(scope="module")
def c(module_sidecar):
    with module_sidecar.client(namespace=f"ns-{uuid.uuid4().hex[:8]}") as client:
        yield client


def fake_summary(claim) -> str:
    comp = claim.compaction
    if comp.level == 1:
        return f"S{comp.level}[" + ",".join(str(item_value(i)) for i in comp.items) + "]"
    return f"S{comp.level}[" + "|".join(s.summary_id for s in comp.summaries) + "]"


def drain(c, thread_id="", worker="w1"):
    """Claim and submit until nothing is due; returns the claims' ids in order."""
    done = []
    while True:
        claim = c.conversations.claim_compaction(worker=worker, thread_id=thread_id)
        if claim is None:
            return done
        assert compaction_hash(claim.compaction) == claim.compaction.content_hash
        c.conversations.submit_summary(claim, fake_summary(claim)[:200], producer=f"{worker}/fake")
        done.append(claim.compaction.compaction_id)


def test_the_default_policy_and_the_pyramid_end_to_end(c):
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    eff = c.conversations.get_compaction_policy(thread_id=t).effective
    assert (eff.trigger_items, eff.compact_items, eff.keep_last_items, eff.max_summary_chars) == (20, 15, 5, 200)
    assert (eff.pyramid_fan_in, eff.pyramid_keep_last, eff.max_levels) == (4, 1, 8)
    due_ids = []
    for b in range(20):  # 200 items, 10 per append
        resp = c.conversations.append(t, [msg(f"m{b * 10 + i + 1}") for i in range(10)])
        due_ids += [d.compaction_id for d in resp.compactions_due]
    # level 1: the oldest 15 whenever 20 are in no compaction: 1-15, 16-30, ..., 181-195 (200 - 195 < 20)
    assert due_ids == [f"L1:{15 * k + 1}-{15 * (k + 1)}" for k in range(13)]
    done = drain(c, t)
    sums = list(c.conversations.list_summaries(t))
    l1 = [s for s in sums if s.level == 1]
    l2 = [s for s in sums if s.level == 2]
    assert [s.summary_id for s in l1] == due_ids
    # level 2: the oldest 4 level-1 summaries whenever 5 are in no level-2 compaction; level 3 would need 5
    assert [s.summary_id for s in l2] == ["L2:1-60", "L2:61-120", "L2:121-180"]
    assert [list(s.child_ids) for s in l2] == [due_ids[0:4], due_ids[4:8], due_ids[8:12]]
    assert not [s for s in sums if s.level > 2]
    assert sorted(done) == sorted(due_ids + [s.summary_id for s in l2])  # every range summarised exactly once
    assert all(not s.fallback and s.producer == "w1/fake" for s in sums)
    # every original stays readable and is reached from its summary
    summary, children, items = c.conversations.expand_summary(t, "L2:1-60", to_items=True)
    assert [item_value(i) for i in items] == [f"m{i}" for i in range(1, 61)]
    assert summary.item_count == 60 and summary.covered_estimated_tokens == sum(i.estimated_tokens for i in items)
    _, children, _ = c.conversations.expand_summary(t, "L2:61-120")
    assert [s.summary_id for s in children] == due_ids[4:8]
    _, _, items = c.conversations.expand_summary(t, "L1:16-30")
    assert [i.seq for i in items] == list(range(16, 31))
    assert len(c.conversations.latest(t)) == 200
    conv = c.conversations.conversation(t)
    assert conv.summary_count == 16 and conv.pending_compactions == 0
    fails(lambda: c.conversations.expand_summary(t, "L1:1-14"), grpc.StatusCode.NOT_FOUND, "SUMMARY_NOT_FOUND",
          "summary_id")


def test_ranges_never_split_a_tool_call_from_its_result(c):
    t = tid()
    items = [msg(f"m{i}") for i in range(1, 14)]  # seqs 1..13
    items += [item("tool_call", {"q": 1}, call_id="c1", tool_name="search"),  # 14
              item("reasoning", "thinking"),  # 15 (belongs to 16)
              item("tool_result", "found", call_id="c1")]  # 16
    items += [msg(f"n{i}") for i in range(17, 21)]  # 17..20
    resp = c.conversations.append(t, items, create_thread=True)
    # the 15th item is inside the block 14-16: the range ends before it
    assert [d.compaction_id for d in resp.compactions_due] == ["L1:1-13"]


def test_the_due_event_is_in_the_event_log(c, module_sidecar):
    t = tid()
    c.conversations.append(t, [msg(f"m{i}") for i in range(19)], create_thread=True)
    got = {}

    def watch():
        with module_sidecar.client(namespace=c.namespace) as w:
            for ev in w.events.watch(t):
                if ev.type == "agentstate.compaction.due":
                    got["event"] = ev
                    return

    th = threading.Thread(target=watch)
    th.start()
    time.sleep(0.3)
    resp = c.conversations.append(t, [msg("m20")])
    th.join(10)
    due = resp.compactions_due[0]
    from agentstate import from_value
    data = from_value(got["event"].data)
    assert data == {"compaction_id": "L1:1-15", "level": 1, "first_seq": 1, "last_seq": 15,
                    "content_hash": due.content_hash}
    assert got["event"].sequence == due.due_event_sequence


def test_stale_and_late_summaries_are_refused(c):
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    c.conversations.set_compaction_policy(thread_id=t, trigger_items=4, compact_items=2, keep_last_items=1)
    c.conversations.append(t, [msg("a"), msg("b"), msg("c"), msg("d")])
    claim = c.conversations.claim_compaction(worker="w", thread_id=t)
    assert claim.compaction.compaction_id == "L1:1-2" and claim.compaction.attempts == 1
    # a wrong hash
    bad = cpb.ClaimCompactionResponse()
    bad.CopyFrom(claim)
    bad.compaction.content_hash = b"\0" * 32
    fails(lambda: c.conversations.submit_summary(bad, "x", producer="w"), grpc.StatusCode.FAILED_PRECONDITION,
          "SUMMARY_STALE", "content_hash")
    # too long, empty producer, mismatched range
    fails(lambda: c.conversations.submit_summary(claim, "x" * 201, producer="w"), grpc.StatusCode.INVALID_ARGUMENT,
          "INVALID_FIELD", "text")
    fails(lambda: c.conversations.submit_summary(claim, "x", producer=""), grpc.StatusCode.INVALID_ARGUMENT,
          "INVALID_FIELD", "producer")
    wrong = cpb.ClaimCompactionResponse()
    wrong.CopyFrom(claim)
    wrong.compaction.last_seq = 3
    fails(lambda: c.conversations.submit_summary(wrong, "x", producer="w"), grpc.StatusCode.INVALID_ARGUMENT,
          "INVALID_FIELD", "last_seq")
    # the right one applies; the same lease and text again gets the stored summary; other text: COMPACTION_DONE
    first = c.conversations.submit_summary(claim, "sum of a, b", producer="w")
    assert first.summary.summary_id == "L1:1-2"
    again = c.conversations.submit_summary(claim, "sum of a, b", producer="w")
    assert again.summary == first.summary
    e = fails(lambda: c.conversations.submit_summary(claim, "other", producer="w"), grpc.StatusCode.FAILED_PRECONDITION,
              "COMPACTION_DONE")
    assert e.metadata["summary_id"] == "L1:1-2" and e.metadata["producer"] == "w"
    # a pop into a pending range cancels it: its summary is stale
    c.conversations.append(t, [msg("e"), msg("f")])  # 6 items: 3-4 due
    claim2 = c.conversations.claim_compaction(worker="w", thread_id=t)
    assert claim2.compaction.compaction_id == "L1:3-4"
    for _ in range(3):
        c.conversations.pop(t)  # pops 6, 5, 4 (4 is in the range)
    fails(lambda: c.conversations.submit_summary(claim2, "x", producer="w"), grpc.StatusCode.FAILED_PRECONDITION,
          "SUMMARY_STALE")
    assert [x.compaction_id for x in c.conversations.list_compactions(t)] == []
    # popping into an applied summary removes it
    popped = c.conversations.stub.PopItem(cpb.PopItemRequest(namespace=c.namespace, thread_id=t))
    popped = c.conversations.stub.PopItem(cpb.PopItemRequest(namespace=c.namespace, thread_id=t))
    assert list(popped.removed_summaries) == ["L1:1-2"]
    assert list(c.conversations.list_summaries(t)) == []
    types = [e.type for e in c.events.list(t)]
    assert types.count("agentstate.compaction.cancelled") == 1 and types.count("agentstate.compaction.applied") == 1


def test_a_worker_killed_between_claim_and_submit_loses_nothing(c, module_sidecar, tmp_path):
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    c.conversations.set_compaction_policy(thread_id=t, trigger_items=3, compact_items=2, keep_last_items=1)
    c.conversations.append(t, [msg("a"), msg("b"), msg("c")])
    script = tmp_path / "worker.py"
    script.write_text(
        "import sys, time\n"
        "from agentstate import Client\n"
        "with Client(sys.argv[1], namespace=sys.argv[2]) as c:\n"
        "    claim = c.conversations.claim_compaction(worker='doomed', thread_id=sys.argv[3], lease=1.0)\n"
        "    print(claim.lease_id, flush=True)\n"
        "    time.sleep(3600)\n")
    proc = subprocess.Popen([sys.executable, str(script), module_sidecar.address, c.namespace, t],
                            stdout=subprocess.PIPE, text=True)
    lease = proc.stdout.readline().strip()
    assert lease
    assert c.conversations.claim_compaction(worker="w2", thread_id=t) is None  # held
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    time.sleep(1.1)  # the dead worker's lease expires
    claim = c.conversations.claim_compaction(worker="w2", thread_id=t)
    assert claim is not None and claim.compaction.attempts == 2 and claim.lease_id != lease
    stale = cpb.ClaimCompactionResponse()
    stale.CopyFrom(claim)
    stale.lease_id = lease
    fails(lambda: c.conversations.submit_summary(stale, "late", producer="doomed"),
          grpc.StatusCode.FAILED_PRECONDITION, "LEASE_LOST", "lease_id")
    got = c.conversations.submit_summary(claim, "a and b", producer="w2")
    assert got.summary.summary_id == "L1:1-2" and got.summary.text == "a and b"


def test_appends_racing_a_compaction_are_never_lost(c, module_sidecar):
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    stop = threading.Event()
    errors = []

    def worker():
        with module_sidecar.client(namespace=c.namespace) as w:
            while not stop.is_set():
                try:
                    drain(w, t, "racer")
                except AgentStateError as e:  # a pop never happens here: nothing may be stale
                    errors.append(e)
                time.sleep(0.01)
            drain(w, t, "racer")

    th = threading.Thread(target=worker)
    th.start()
    for b in range(30):
        c.conversations.append(t, [msg(f"m{b * 7 + i + 1}") for i in range(7)])
    stop.set()
    th.join(30)
    assert not errors
    got = c.conversations.latest(t)
    assert [item_value(i) for i in got] == [f"m{i}" for i in range(1, 211)]
    by_seq = {i.seq: i for i in got}
    l1 = [s for s in c.conversations.list_summaries(t, level=1)]
    # level-1 summaries partition a prefix of the log, each summarising exactly its range's content
    expect = 1
    for s in l1:
        assert s.first_seq == expect
        rng = [by_seq[q] for q in range(s.first_seq, s.last_seq + 1)]
        assert s.content_hash == state_summaries.items_hash(s.first_seq, s.last_seq,
                                                            [(i.seq, i.content_hash) for i in rng])
        assert s.text == ("S1[" + ",".join(item_value(i) for i in rng) + "]")[:200]
        expect = s.last_seq + 1
    assert expect > 150


def test_policy_bounds_and_scopes(c):
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    fails(lambda: c.conversations.set_compaction_policy(thread_id=t, trigger_items=10, compact_items=8,
                                                        keep_last_items=5),
          grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "policy.compact_items")
    fails(lambda: c.conversations.set_compaction_policy(thread_id=t, max_levels=17), grpc.StatusCode.INVALID_ARGUMENT,
          "INVALID_FIELD", "policy.max_levels")
    fails(lambda: c.conversations.set_compaction_policy(thread_id=t, lease_timeout=0.5),
          grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "policy.lease_timeout")
    c.conversations.set_compaction_policy(trigger_items=30, compact_items=10)  # the namespace's
    got = c.conversations.get_compaction_policy(thread_id=t)
    assert got.source == cpb.POLICY_SOURCE_NAMESPACE and got.effective.trigger_items == 30
    assert not got.HasField("policy")
    c.conversations.set_compaction_policy(thread_id=t, disabled=True)
    got = c.conversations.get_compaction_policy(thread_id=t)
    assert got.source == cpb.POLICY_SOURCE_THREAD and got.effective.disabled and got.policy.disabled
    resp = c.conversations.append(t, [msg(f"m{i}") for i in range(100)])
    assert list(resp.compactions_due) == []
    # enabling it again makes the due ranges due at once
    set_resp = c.conversations.set_compaction_policy(thread_id=t, clear=True)
    assert [d.compaction_id for d in set_resp.compactions_due] == [f"L1:{10 * k + 1}-{10 * (k + 1)}"
                                                                     for k in range(8)]
    c.conversations.set_compaction_policy(clear=True)


# ----------------------------------------------------------------- the fallback, with an injected clock

@pytest.fixture
def local(tmp_path):
    side = InProcess(tmp_path / "data")
    with Client(side.address) as client:
        side.client = client
        yield side
    side.close()


def test_the_fallback_applies_when_no_worker_submits(local):
    c = local.client
    c.conversations.append("t", [msg("hello   there\n  you"), item("tool_call", {"arguments": "x=1"}, call_id="c1",
                                                                     tool_name="calc", role="assistant"),
                                 item("tool_result", "2", call_id="c1")] + [msg(f"m{i}") for i in range(17)],
                           create_thread=True)
    comps = list(c.conversations.list_compactions("t"))
    assert [x.compaction_id for x in comps] == ["L1:1-15"]
    assert comps[0].fallback_time.seconds == comps[0].due_time.seconds + 60
    claim = c.conversations.claim_compaction(worker="slow")
    local.clock.advance(59)
    assert not local.sweep().get("fallbacks")
    local.clock.advance(1)
    assert local.sweep()["fallbacks"] == 1
    s = next(iter(c.conversations.list_summaries("t")))
    assert s.fallback and s.producer == "agentstate.fallback/extractive-v1"
    lines = s.text.split("\n")
    assert len(s.text) <= 200 and len(lines) == 15
    # w = max(8, (200 - 14) // 15) = 12 code points a line
    assert lines[:4] == ["user: hello…", "assistant(c…", "tool_result…", "user: m0"]
    assert s.text == state_summaries.fallback_text(
        [("user", "hello   there\n  you"), ("assistant(calc)", "x=1"), ("tool_result", "2")]
        + [("user", f"m{i}") for i in range(12)], 200)
    # the worker that held it gets COMPACTION_DONE
    fails(lambda: c.conversations.submit_summary(claim, "too late", producer="slow"),
          grpc.StatusCode.FAILED_PRECONDITION, "COMPACTION_DONE")


def test_fallback_after_zero_applies_in_the_same_transaction_and_cascades(local):
    c = local.client
    c.conversations.set_compaction_policy(trigger_items=3, compact_items=2, keep_last_items=1, fallback_after=0,
                                          pyramid_fan_in=2, pyramid_keep_last=0, max_summary_chars=40)
    resp = c.conversations.append("t", [msg(f"item number {i}") for i in range(1, 10)], create_thread=True)
    sums = {s.summary_id: s for s in c.conversations.list_summaries("t")}
    assert [d.compaction_id for d in resp.compactions_due][:4] == ["L1:1-2", "L1:3-4", "L1:5-6", "L1:7-8"]
    assert {"L1:1-2", "L1:3-4", "L1:5-6", "L1:7-8", "L2:1-4", "L2:5-8", "L3:1-8"} <= set(sums)
    assert all(s.fallback for s in sums.values())
    assert sums["L1:1-2"].text == "user: item number 1\nuser: item number 2"
    assert list(c.conversations.list_compactions("t")) == []


def test_the_example_worker_summarises_what_is_due(module_sidecar):
    ns = f"ex-{uuid.uuid4().hex[:8]}"
    with Client(module_sidecar.address, namespace=ns) as c:
        c.conversations.append("t", [msg(f"message number {i} with words") for i in range(40)], create_thread=True)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, os.path.join(root, "examples", "compaction_worker.py"),
                              module_sidecar.address, "--namespace", ns, "--once"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "summarised 2 compactions"
        sums = list(c.conversations.list_summaries("t"))
        assert [s.summary_id for s in sums] == ["L1:1-15", "L1:16-30"]
        assert sums[0].text.split("\n")[0] == "user: message number 0 with"
        assert sums[0].producer == "example-worker/first-words"


def test_a_claim_retried_with_its_request_id_gets_the_same_lease(c):
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    c.conversations.set_compaction_policy(thread_id=t, trigger_items=3, compact_items=1, keep_last_items=1)
    c.conversations.append(t, [msg("a"), msg("b"), msg("c"), msg("d")])  # L1:1-1 and L1:2-2 due
    req = cpb.ClaimCompactionRequest(namespace=c.namespace, thread_id=t, worker="w", request_id=f"claim-{t}")
    first = c.conversations.stub.ClaimCompaction(req)
    again = c.conversations.stub.ClaimCompaction(req)
    assert first.lease_id and again == first
    other = c.conversations.claim_compaction(worker="w", thread_id=t)
    assert other.compaction.compaction_id != first.compaction.compaction_id
    # nothing claimable is not remembered: the same request id claims once something is due
    empty = cpb.ClaimCompactionRequest(namespace=c.namespace, thread_id=t, worker="w", request_id=f"later-{t}")
    assert not c.conversations.stub.ClaimCompaction(empty).HasField("compaction")
    c.conversations.append(t, [msg("e")])
    assert c.conversations.stub.ClaimCompaction(empty).HasField("compaction")


def test_a_waiting_claim_wakes_when_a_range_becomes_due(c, module_sidecar):
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    c.conversations.set_compaction_policy(thread_id=t, trigger_items=3, compact_items=1, keep_last_items=1)
    c.conversations.append(t, [msg("a"), msg("b")])
    got = {}

    def wait():
        with module_sidecar.client(namespace=c.namespace) as w:
            started = time.monotonic()
            got["claim"] = w.conversations.claim_compaction(worker="waiter", thread_id=t, wait=20.0)
            got["waited"] = time.monotonic() - started

    th = threading.Thread(target=wait)
    th.start()
    time.sleep(0.5)
    appended = time.monotonic()
    c.conversations.append(t, [msg("c")])
    th.join(20)
    assert got["claim"] is not None and got["claim"].compaction.compaction_id == "L1:1-1"
    # answered soon after the append, long before the wait ends (a waiting claim wakes on the commit, and also
    # re-checks once a second for leases that expire meanwhile)
    assert got["waited"] < 20 and time.monotonic() - appended < 5


def test_the_compaction_worker_helper(c):
    from agentstate.conversations import CompactionWorker
    t = tid()
    c.conversations.append(t, [], create_thread=True)
    c.conversations.set_compaction_policy(thread_id=t, trigger_items=3, compact_items=1, keep_last_items=1)
    c.conversations.append(t, [msg(f"m{i}") for i in range(8)])  # L1:1-1 ... L1:6-6 due
    w = CompactionWorker(c, lambda comp: "s:" + ",".join(item_value(i) for i in comp.items) or "s",
                         worker="helper", thread_id=t)
    stale = c.conversations.claim_compaction(worker="other", thread_id=t)  # held by someone else: left alone
    assert w.run_once() == 5 and w.dropped == 0
    sums = list(c.conversations.list_summaries(t, level=1))
    assert len(sums) == 5 and all(s.producer == "helper" for s in sums)
    assert stale.compaction.compaction_id not in {s.summary_id for s in sums}
    stop = threading.Event()
    th = threading.Thread(target=w.run, args=(stop, 0.5))
    th.start()
    c.conversations.append(t, [msg("x"), msg("y")])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and w.applied < 6:
        time.sleep(0.05)
    stop.set()
    th.join(10)
    assert w.applied >= 6
