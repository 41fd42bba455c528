"""Events: append-only log per thread, client event ids, paging, WatchEvents (follow, resume), and
resuming a watch across a SIGKILL of the sidecar: every event exactly once, in order."""
from __future__ import annotations

import threading
import time
import uuid

import grpc
import pytest
from conftest import SidecarProcess, expect_error

from agentstate import AgentStateError, Client, event, from_value
from agentstate.v1 import events_pb2

CODES = grpc.StatusCode


@pytest.fixture
def c(sidecar):
    with sidecar.client(namespace=f"ns-{uuid.uuid4().hex[:12]}") as client:
        yield client


def test_append_list_and_dedupe(c):
    c.create_thread("t")
    first = c.events.append("t", [event("a", {"n": 1}, client_event_id="e1"), event("b")])
    assert [e.sequence for e in first.events] == [1, 2] and first.duplicates == 0
    again = c.events.append("t", [event("a", {"n": 1}, client_event_id="e1"), event("c", client_event_id="e3"),
                                  event("c", client_event_id="e3")])
    assert [e.sequence for e in again.events] == [1, 3, 3] and again.duplicates == 2
    listed = list(c.events.list("t", page_size=2))
    assert [(e.sequence, e.type) for e in listed] == [(1, "a"), (2, "b"), (3, "c")]
    assert from_value(listed[0].data) == {"n": 1} and listed[0].client_event_id == "e1"
    assert [e.sequence for e in c.events.list("t", after=2)] == [3]
    resp = c.events.stub.ListEvents(events_pb2.ListEventsRequest(namespace=c.namespace, thread_id="t",
                                                                 after_sequence=3))
    assert list(resp.events) == [] and resp.last_sequence == 3


def test_append_checks(c):
    with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND"):
        c.events.append("missing", [event("a")])
    c.create_thread("t")
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="events[1].type"):
        c.events.append("t", [event("ok"), event("agentstate.run.fake")])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="events[0].type"):
        c.events.append("t", [event("")])
    with expect_error(CODES.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", field="events[0].data", limit="payload_bytes"):
        c.events.append("t", [event("big", "x" * 70_000)])
    with expect_error(CODES.INVALID_ARGUMENT, "INVALID_FIELD", field="run_id"):
        c.events.append("t", [event("a")], lease_id="lease-without-run")
    assert list(c.events.list("t")) == []  # failed appends wrote nothing


def test_run_events_and_filters(c):
    held = c.runs.start("t", create_thread=True)
    held.append_events([event("token", i) for i in range(3)])
    c.events.append("t", [event("note")])
    mine = list(c.events.list("t", run_id=held.run_id))
    assert [e.type for e in mine] == ["agentstate.run.created", "agentstate.run.activated",
                                      "agentstate.run.started", "token", "token", "token"]
    assert all(e.run_id == held.run_id for e in mine)
    other = c.runs.create("t", strategy="enqueue").run
    with expect_error(CODES.FAILED_PRECONDITION, "RUN_NOT_ACTIVE"):
        c.events.append("t", [event("x")], run_id=other.run_id, lease_id="nope")


def test_watch_follows_new_events(c):
    c.create_thread("t")
    c.events.append("t", [event("old")])
    seen = []

    def watch():
        for ev in c.events.watch("t", after=0):
            seen.append((ev.sequence, ev.type))
            if len(seen) == 4:
                return

    w = threading.Thread(target=watch)
    w.start()
    for i in range(3):
        time.sleep(0.1)
        c.events.append("t", [event(f"new{i}")])
    w.join(20)
    assert not w.is_alive()
    assert seen == [(1, "old"), (2, "new0"), (3, "new1"), (4, "new2")]
    # without follow the stream ends after the stored events
    assert [e.sequence for e in c.events.watch("t", after=2, follow=False)] == [3, 4]


def test_watch_unknown_thread_and_deleted_thread(c):
    with expect_error(CODES.NOT_FOUND, "THREAD_NOT_FOUND"):
        list(c.events.watch("missing", follow=False))
    c.create_thread("t")
    c.events.append("t", [event("a")])
    errors = []

    def watch():
        try:
            for _ in c.events.watch("t"):
                pass
        except AgentStateError as e:
            errors.append(e)

    w = threading.Thread(target=watch)
    w.start()
    time.sleep(0.3)
    c.delete_thread("t")
    c.create_thread("t")  # a new thread with the same id is another log
    c.events.append("t", [event("b")])
    w.join(20)
    assert not w.is_alive() and errors and errors[0].reason == "THREAD_NOT_FOUND"


def test_malformed_watch_request_is_invalid_argument(sidecar):
    with grpc.insecure_channel(sidecar.address) as ch:
        call = ch.unary_stream("/agentstate.v1.EventService/WatchEvents", request_serializer=None,
                               response_deserializer=None)
        with pytest.raises(grpc.RpcError) as info:
            list(call(b"\x0a\xff\xff", timeout=10))
        assert info.value.code() == CODES.INVALID_ARGUMENT


def test_watch_resumes_across_a_sidecar_sigkill(tmp_path):
    """A producer appends numbered events (retrying a batch with the same client ids when the sidecar is
    gone); a watcher follows with resume. The sidecar is SIGKILLed twice mid-stream and restarted. The
    watcher must see every event exactly once, in order, with increasing sequence numbers."""
    proc = SidecarProcess(tmp_path / "data").start()
    total, batch = 600, 20
    seen: list[tuple[int, str]] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def watcher():
        try:
            with Client(proc.address) as wc:
                for ev in wc.events.watch("t", retry_for=60):
                    seen.append((ev.sequence, ev.client_event_id))
                    if len(seen) == total:
                        return
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    def producer():
        try:
            with Client(proc.address, timeout=5) as pc:
                i = 0
                while i < total:
                    evs = [event("n", j, client_event_id=f"e{j}") for j in range(i, min(i + batch, total))]
                    try:
                        pc.events.append("t", evs)
                        i += batch
                    except AgentStateError as e:
                        if e.code not in (CODES.UNAVAILABLE, CODES.DEADLINE_EXCEEDED):
                            raise
                        time.sleep(0.05)  # sidecar down: send the same batch again
                    time.sleep(0.02)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    try:
        with proc.client() as c:
            c.create_thread("t")
        w = threading.Thread(target=watcher)
        p = threading.Thread(target=producer)
        w.start()
        p.start()
        for threshold in (150, 350):  # kill mid-stream, twice, at points the watcher has reached
            deadline = time.monotonic() + 60
            while len(seen) < threshold and time.monotonic() < deadline and not errors:
                time.sleep(0.01)
            proc.kill()
            time.sleep(0.3)
            proc.start()
        p.join(120)
        done.wait(120)
        assert not errors, errors
        assert len(seen) == total
        assert [cid for _, cid in seen] == [f"e{j}" for j in range(total)]
        seqs = [s for s, _ in seen]
        assert seqs == sorted(set(seqs))
        with proc.client() as c:
            stored = list(c.events.list("t"))
        assert [e.client_event_id for e in stored] == [f"e{j}" for j in range(total)]  # no duplicates stored
        assert [e.sequence for e in stored] == seqs
    finally:
        proc.stop()


def test_shutdown_ends_open_watches_with_shutting_down(tmp_path):
    """SIGTERM: a following watch is ended at once with UNAVAILABLE / SHUTTING_DOWN (so a client resumes
    elsewhere or later) instead of holding the drain for the whole grace period."""
    proc = SidecarProcess(tmp_path / "data", "--grace", "60").start()
    errors = []
    try:
        with proc.client() as c:
            c.create_thread("t")
            c.events.append("t", [event("a")])
            started = threading.Event()

            def watch():
                try:
                    for _ in c.events.watch("t", resume=False):
                        started.set()
                except AgentStateError as e:
                    errors.append(e)

            w = threading.Thread(target=watch)
            w.start()
            assert started.wait(20)
            assert proc.stop() == 0
            w.join(20)
    finally:
        proc.stop()
    assert errors and (errors[0].code, errors[0].reason) == (CODES.UNAVAILABLE, "SHUTTING_DOWN"), errors
