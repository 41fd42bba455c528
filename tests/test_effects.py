"""The effect ledger: begin / complete / fail, outcomes for repeats, conflicts under a live run, UNKNOWN
after a run died and its takeover, stale tokens, listing, and effect completions committed atomically with
a checkpoint put."""
from __future__ import annotations

import time
import uuid

import grpc
import pytest
from conftest import SidecarProcess, expect_error, store_state

from agentstate import effect_done, effect_failed, event, from_value, step
from agentstate.effects import DONE, FAILED, PENDING, UNKNOWN
from agentstate.v1 import threads_pb2 as tpb

CODES = grpc.StatusCode


@pytest.fixture(scope="module")
def fx_sidecar(tmp_path_factory):
    proc = SidecarProcess(tmp_path_factory.mktemp("effects") / "data", "--watchdog-interval", "0.05").start()
    yield proc
    proc.stop()


@pytest.fixture
def c(fx_sidecar):
    with fx_sidecar.client(namespace=f"ns-{uuid.uuid4().hex[:12]}") as client:
        yield client


def wait_for(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return value


def test_begin_complete_and_skip(c):
    held = c.runs.start("t", create_thread=True)
    b = held.begin_effect("mail:1", description="send the mail", request_digest="sha:abc", step_id="s1")
    assert b.effect.state == PENDING and b.token and b.effect.begins == 1
    assert held.begin_effect("mail:1").token == b.token  # the same holder asking again
    done = c.effects.complete("mail:1", b.token, {"message_id": 7})
    assert done.state == DONE and from_value(done.outcome) == {"message_id": 7} and done.HasField("complete_time")
    assert c.effects.complete("mail:1", b.token, {"message_id": 7}).state == DONE  # repeat answer
    again = held.begin_effect("mail:1", request_digest="sha:abc")
    assert again.effect.state == DONE and not again.token and from_value(again.effect.outcome) == {"message_id": 7}
    held.complete()
    later = c.runs.start("t")  # another run later: still skips
    assert later.begin_effect("mail:1").effect.state == DONE
    with expect_error(CODES.FAILED_PRECONDITION, "EFFECT_KEY_REUSED", field="request_digest"):
        later.begin_effect("mail:1", request_digest="sha:other")


def test_conflict_under_a_live_run(c):
    a = c.runs.start("a", create_thread=True)
    b = c.runs.start("b", create_thread=True)
    began = a.begin_effect("pay:9")
    with expect_error(CODES.ABORTED, "EFFECT_IN_PROGRESS", run_id=a.run_id):
        b.begin_effect("pay:9")
    c.effects.fail("pay:9", began.token, "card declined", retryable=True)
    retry = b.begin_effect("pay:9")  # a retryable failure may be begun again
    assert retry.effect.state == PENDING and retry.token != began.token and retry.effect.thread_id == "b"
    c.effects.fail("pay:9", retry.token, "card stolen", retryable=False)
    final = a.begin_effect("pay:9")
    assert final.effect.state == FAILED and not final.token and final.effect.error == "card stolen"
    with expect_error(CODES.FAILED_PRECONDITION, "EFFECT_TOKEN_STALE"):
        c.effects.complete("pay:9", retry.token)  # failed already
    assert [e.idempotency_key for e in c.effects.list(thread_id="b")] == ["pay:9"]
    assert list(c.effects.list(thread_id="a")) == []  # it moved with the retry


def test_unknown_after_the_run_died_and_takeover(c):
    held = c.runs.start("t", create_thread=True, lease_timeout=0.5)
    began = held.begin_effect("ship:1")
    held.begin_effect("ship:2")
    wait_for(lambda: c.runs.get(held.run_id).attempt == 2)  # lease expired, re-queued
    assert {e.idempotency_key: e.state for e in c.effects.list(thread_id="t")} == {"ship:1": UNKNOWN,
                                                                                   "ship:2": UNKNOWN}
    assert [e.idempotency_key for e in c.effects.list(run_id=held.run_id, states=["unknown"])] == ["ship:1", "ship:2"]
    again = c.runs.claim(thread_id="t")
    again.keep_alive(0.1)
    took = again.begin_effect("ship:1")
    assert took.effect.state == UNKNOWN and took.token != began.token and took.effect.begins == 2
    assert c.effects.get("ship:1").state == PENDING  # owned by a live lease again
    with expect_error(CODES.FAILED_PRECONDITION, "EFFECT_TOKEN_STALE", field="token"):
        c.effects.complete("ship:1", began.token, "late answer of the dead attempt")
    c.effects.complete("ship:1", took.token, "reconciled: it had shipped")
    assert [e.idempotency_key for e in c.effects.list(thread_id="t", states=["done"])] == ["ship:1"]
    assert [e.idempotency_key for e in c.effects.list(thread_id="t", states=["unknown"])] == ["ship:2"]


def test_every_effect_call_answers_a_repeat_as_it_answered_the_first(c):
    """BeginEffect, CompleteEffect and FailEffect are safe to repeat as sent (the clients retry them after a lost
    reply without a request_id): the same holder beginning a key again gets the same token and the same state."""
    held = c.runs.start("t", create_thread=True, lease_timeout=0.5)
    held.begin_effect("ship:1")
    wait_for(lambda: c.runs.get(held.run_id).attempt == 2)  # the holder died: ship:1 is UNKNOWN
    again = c.runs.claim(thread_id="t")
    again.keep_alive(0.1)
    took = again.begin_effect("ship:1")
    repeat = again.begin_effect("ship:1")  # e.g. a retry after the answer was lost: still "reconcile first"
    assert (took.effect.state, repeat.effect.state) == (UNKNOWN, UNKNOWN) and repeat.token == took.token
    assert repeat.effect.begins == 2
    fresh = again.begin_effect("ship:2")
    assert again.begin_effect("ship:2").effect.state == PENDING == fresh.effect.state
    c.effects.fail("ship:2", fresh.token, "no stock", retryable=True)
    assert c.effects.fail("ship:2", fresh.token, "no stock", retryable=True).state == FAILED  # repeated
    retried = again.begin_effect("ship:2")  # a retryable failure begun again: PENDING, and so is its repeat
    assert (retried.effect.state, again.begin_effect("ship:2").effect.state) == (PENDING, PENDING)
    c.effects.complete("ship:1", took.token, "reconciled")
    assert c.effects.complete("ship:1", took.token, "reconciled").state == DONE
    assert again.begin_effect("ship:1").effect.state == DONE


def test_ledger_checks(c):
    held = c.runs.start("t", create_thread=True)
    with expect_error(CODES.NOT_FOUND, "EFFECT_NOT_FOUND"):
        c.effects.complete("nope", "token")
    with expect_error(CODES.NOT_FOUND, "EFFECT_NOT_FOUND"):
        c.effects.get("nope")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="idempotency_key"):
        held.begin_effect("")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="thread_id"):
        list(c.effects.list())
    with expect_error(CODES.NOT_FOUND, "RUN_NOT_FOUND"):
        c.effects.begin("k", "no-such-run", "lease")
    with expect_error(CODES.FAILED_PRECONDITION, "LEASE_LOST"):
        c.effects.begin("k", held.run_id, "wrong-lease")


def test_put_commits_effects_steps_and_events_atomically(c):
    held = c.runs.start("t", create_thread=True)
    e1, e2 = held.begin_effect("price:1"), held.begin_effect("price:2")
    base = held.put_checkpoint({"done": 0})
    put = held.put_checkpoint({"done": 2}, parent_id=base.checkpoint.checkpoint_id,
                              effects=[effect_done("price:1", e1.token, 101), effect_failed("price:2", e2.token,
                                                                                            "no stock")],
                              steps=[step("tool", "reprice", counters={"requests": 2})],
                              events=[event("progress", {"done": 2}, client_event_id="p2")])
    assert [e.state for e in put.effects] == [DONE, FAILED]
    assert [s.name for s in put.steps] == ["reprice"] and [e.type for e in put.events] == ["progress"]
    assert c.effects.get("price:1").state == DONE
    # one bad part fails the whole put: no checkpoint, no step, no event, no effect change
    e3 = held.begin_effect("price:3")
    before = store_state(c, "t")
    events_before = list(c.events.list("t"))
    with expect_error(CODES.FAILED_PRECONDITION, "EFFECT_TOKEN_STALE", field="effects[1].token"):
        held.put_checkpoint({"done": 3}, parent_id=put.checkpoint.checkpoint_id,
                            effects=[effect_done("price:3", e3.token, 102), effect_done("price:1", "stale", 0)],
                            steps=[step("tool", "reprice")], events=[event("progress", {"done": 3})])
    assert store_state(c, "t") == before and list(c.events.list("t")) == events_before
    assert c.effects.get("price:3").state == PENDING
    assert len(list(c.runs.list_steps(held.run_id))) == 1
    # records attached to a put need the run that makes them
    req = tpb.PutCheckpointRequest(namespace=c.namespace, thread_id="t2", events=[event("e")])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="run_id"):
        c._call(c.threads.PutCheckpoint, req, None)


def test_effect_records_written_before_taken_over_existed_still_read():
    import msgspec

    from sidecar.storage import layout
    old = msgspec.msgpack.encode([1, PENDING, "t", 7, "r", "l", "", "", "", "tok", None, "", False, 1, 10, 10, 0])
    rec = layout.effect_decoder.decode(old)
    assert (rec.token, rec.taken_over) == ("tok", False)
