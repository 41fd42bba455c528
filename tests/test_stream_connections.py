"""Long-lived streams on connections of their own (clients/python/agentstate/transport.StreamConnections).

The sidecar allows 3 streams at once per connection by default (``--max-streams-per-connection``), more
wait in the client; so follow watches and write streams go on dedicated connections and an open one never
holds up the client's other calls. Run against a live sidecar with the default limit.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from agentstate import AsyncClient, Client
from agentstate.run_records import event

from conftest import SidecarProcess
from test_fairness import TcpInProcess

STREAMS = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what() if callable(what) else what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def tcp_sidecar(tmp_path_factory):
    port = _free_port()
    proc = SidecarProcess(tmp_path_factory.mktemp("sc") / "data", "--listen", f"127.0.0.1:{port}").start()
    proc.port = port
    yield proc
    proc.stop()


def _open_streams(c: Client, prefix: str):
    """STREAMS follow-watches (each on its own thread of the client) and a write stream; returns
    (received events per watch, the watch threads, the write stream)."""
    got = [[] for _ in range(STREAMS)]
    started = threading.Barrier(STREAMS + 1)

    def watch(k):
        it = c.events.watch(f"{prefix}{k}", follow=True)
        started.wait()
        for ev in it:
            got[k].append(ev.sequence)
            if len(got[k]) == 2:
                return

    for k in range(STREAMS):
        c.create_thread(f"{prefix}{k}")
    threads = [threading.Thread(target=watch, args=(k,), daemon=True) for k in range(STREAMS)]
    for t in threads:
        t.start()
    started.wait(10)
    ws = c.write_stream()
    return got, threads, ws


def _exercise(c: Client, prefix: str):
    got, threads, ws = _open_streams(c, prefix)
    _wait(lambda: c.stream_connections.count() == STREAMS + 1, what="the streams' connections")
    c.events.append(f"{prefix}0", [event("x", {"i": 0})], timeout=5)  # the watches are in the server...
    _wait(lambda: got[0] == [1], what="watch 0's first event")
    t0 = time.monotonic()
    for i in range(5):  # ...and unary calls still go through, promptly
        c.put_checkpoint(f"{prefix}9", {"i": i}, timeout=5)
        assert c.get_values(f"{prefix}9", timeout=5) == {"i": i}
    elapsed = time.monotonic() - t0
    assert elapsed < 4, elapsed
    fut = ws.put_checkpoint(f"{prefix}w", {"v": 1})  # the write stream works alongside
    assert fut.result(10).checkpoint.checkpoint_id
    for k in range(STREAMS):  # every watch delivers
        c.events.append(f"{prefix}{k}", [event("y", {"k": k})], timeout=5)
    for k in range(1, STREAMS):
        c.events.append(f"{prefix}{k}", [event("z", {"k": k})], timeout=5)
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert all(g == [1, 2] for g in got), got
    assert c.stream_connections.count() == 1  # the finished watches closed theirs; the write stream's is open
    ws.close()
    _wait(lambda: c.stream_connections.count() == 0, what="the write stream's connection to close")


def test_follow_watches_and_a_write_stream_leave_unary_calls_free_over_unix(sidecar):
    with sidecar.client() as c:
        _exercise(c, "sc-unix-")


def test_follow_watches_and_a_write_stream_leave_unary_calls_free_over_tcp(tcp_sidecar):
    port = tcp_sidecar.port
    with Client(f"127.0.0.1:{port}") as c:
        _exercise(c, "sc-tcp-")


def test_closing_the_client_closes_open_stream_connections(tmp_path):
    """Watches still open and a write stream not closed: Client.close() closes their connections (counted
    by the client, and by the server: the TCP peers with calls in progress)."""
    port = _free_port()
    side = TcpInProcess(tmp_path / "d", port)
    peers = side.sidecar.guard.in_progress  # TCP peer (one connection) -> its calls in progress
    try:
        c = Client(f"127.0.0.1:{port}")
        c.create_thread("sc-close")
        its = [c.events.watch("sc-close", follow=True, resume=False) for _ in range(STREAMS)]
        errors = []

        def drain(it):
            try:
                for _ in it:
                    pass
            except Exception as e:  # noqa: BLE001 - the channel closed under it
                errors.append(e)

        threads = [threading.Thread(target=drain, args=(it,), daemon=True) for it in its]
        for t in threads:
            t.start()
        ws = c.write_stream()
        ws.put_checkpoint("sc-close-w", {"a": 0}).result(10)  # the write stream is in the server
        _wait(lambda: c.stream_connections.count() == STREAMS + 1, what="the streams' connections")
        # each stream is the one call in progress of a connection of its own
        _wait(lambda: sorted(peers.values()) == [1] * (STREAMS + 1),
              what=lambda: f"{STREAMS + 1} connections with one call each, have {dict(peers)}")
        c.put_checkpoint("sc-close-u", {"a": 1}, timeout=5)
        c.close()
        assert c.stream_connections.count() == 0
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        _wait(lambda: not peers, what=lambda: f"no calls in progress, have {dict(peers)}")
        with pytest.raises(Exception):
            ws.put_checkpoint("sc-close-u", {"a": 2}).result(5)
        with pytest.raises(ValueError):
            next(iter(c.events.watch("sc-close")))
    finally:
        side.close()


def test_a_watch_without_follow_stays_on_the_client_channel(sidecar):
    with sidecar.client() as c:
        c.create_thread("sc-nofollow")
        c.events.append("sc-nofollow", [event("x", {})], timeout=5)
        it = c.events.watch("sc-nofollow", follow=False)
        assert [e.sequence for e in it] == [1]
        assert c.stream_connections.count() == 0


def test_the_async_client_puts_streams_on_their_own_connections(tcp_sidecar):
    port = tcp_sidecar.port

    async def main():
        c = AsyncClient(f"127.0.0.1:{port}")
        prefix = "sc-aio-"
        got = [[] for _ in range(STREAMS)]

        async def watch(k):
            async for ev in c.events.watch(f"{prefix}{k}", follow=True):
                got[k].append(ev.sequence)
                return

        for k in range(STREAMS):
            await c.create_thread(f"{prefix}{k}")
        tasks = [asyncio.ensure_future(watch(k)) for k in range(STREAMS)]
        ws = c.write_stream()
        deadline = time.monotonic() + 10
        while c.stream_connections.count() < STREAMS + 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        t0 = time.monotonic()
        for i in range(5):
            await c.put_checkpoint(f"{prefix}9", {"i": i}, timeout=5)
            assert await c.get_values(f"{prefix}9", timeout=5) == {"i": i}
        assert time.monotonic() - t0 < 4
        fut = await ws.put_checkpoint(f"{prefix}w", {"v": 1})
        assert (await asyncio.wait_for(fut, 10)).checkpoint.checkpoint_id
        for k in range(STREAMS):
            await c.events.append(f"{prefix}{k}", [event("y", {"k": k})], timeout=5)
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert got == [[1]] * STREAMS
        await asyncio.sleep(0.1)  # the finished iterators closed their connections
        assert c.stream_connections.count() == 1
        async def hold():
            async for _ in c.events.watch(f"{prefix}0", after=1, follow=True, resume=False):
                pass

        watching = asyncio.ensure_future(hold())  # one left open, closed by the client's close
        while c.stream_connections.count() < 2:
            await asyncio.sleep(0.02)
        await c.close()
        assert c.stream_connections.count() == 0
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await asyncio.gather(ws._task, return_exceptions=True)

    asyncio.run(asyncio.wait_for(main(), 60))
