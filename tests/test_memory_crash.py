"""Memory items under SIGKILL: writers put items (values, vectors, request ids) while the sidecar is killed at
random moments and restarted; after each restart every acknowledged item is there with its value and vectors,
items whose put was in flight are there whole or not at all, the field index and the vector index (rebuilt
from LMDB) answer as the stored items say, and the history has one PUT per item.
"""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
from conftest import SidecarProcess

from agentstate import AgentStateError, Client, RetryPolicy

CYCLES = 6


def expected(n: int) -> tuple[dict, list[float]]:
    return {"n": n, "g": n % 5, "text": f"memory {n} " + "x" * (n % 40)}, [float(n % 7 + 1), float(n % 5), 1.0]


class Writer(threading.Thread):
    def __init__(self, address: str, start_at: int, wid: int) -> None:
        super().__init__(daemon=True)
        self.client = Client(address, namespace="crash", timeout=3.0,
                             retry=RetryPolicy(initial_backoff=0.02, max_backoff=0.2))
        self.n = start_at
        self.wid = wid
        self.acked: set[int] = set()
        self.tried: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            n = self.n
            self.n += 1
            value, vec = expected(n)
            self.tried.add(n)
            try:
                self.client.memory.put(("crash", f"w{self.wid}"), f"k{n}", value, vectors={"e": vec})
                self.acked.add(n)
            except AgentStateError:
                pass  # the sidecar went away mid-call: this put may or may not be stored

    def close(self) -> None:
        self.stop.set()
        self.join(10)
        self.client.close()


def items(c: Client, **kw) -> list:
    """Every item under ("crash",) that the search returns, page by page."""
    from agentstate.memory import search_request
    out, token = [], ""
    while True:
        req = search_request("crash", ("crash",), order="path_key", limit=0, refresh_ttl=False, **kw)
        req.page_size, req.page_token = 500, token
        resp = c._call(c.memory.stub.SearchMemoryItems, req, None)
        out.extend(resp.items)
        token = resp.next_page_token
        if not token:
            return out


def check(address: str, acked: set, tried: set) -> int:
    with Client(address, namespace="crash") as c:
        present = {}
        for s in items(c, include_vectors=True):
            present[int(s.item.key[1:])] = s.item
        for n, item in present.items():
            value, vec = expected(n)
            assert n in tried, n
            assert c.memory.value(item) == value, n  # whole, never half-written
            assert list(item.vectors["e"].values) == vec and list(item.vector_fields) == ["e"], n
            assert item.version == 1, n
        missing = sorted(acked - set(present))
        assert not missing, f"acknowledged items lost: {missing[:10]}"
        # the field index answers as the items say
        for g in range(5):
            got = {int(s.item.key[1:]) for s in items(c, filter={"g": g})}
            assert got == {n for n in present if n % 5 == g}, g
        # the vector index (rebuilt at start) ranks as the stored vectors do
        q = [2.0, 1.0, 1.0]
        hits = c.memory.search(("crash",), vector=q, limit=10, order="path_key", refresh_ttl=False)
        keys = sorted(present)
        rows = np.array([expected(n)[1] for n in keys])
        scores = rows @ np.array(q) / (np.linalg.norm(rows, axis=1) * np.linalg.norm(q))
        assert [h.score for h in hits] == pytest.approx(sorted(scores, reverse=True)[:10], rel=1e-12)
        # one PUT revision per item
        for n in random.Random(len(present)).sample(keys, min(10, len(keys))):
            item = present[n]
            assert [r.kind for r in c.memory.history(tuple(item.path), item.key)] == [1], n
        return len(present)


@pytest.mark.timeout(300)
def test_memory_survives_sigkill(tmp_path):
    rng = random.Random(13)
    proc = SidecarProcess(tmp_path / "data").start()
    acked: set[int] = set()
    tried: set[int] = set()
    next_n = 0
    kills = 0
    try:
        for _ in range(CYCLES):
            writers = [Writer(proc.address, next_n + wid * 1_000_000, wid) for wid in (0, 1)]
            for w in writers:
                w.start()
            time.sleep(rng.uniform(0.3, 0.8))
            proc.kill()  # SIGKILL while the writers have puts in flight
            kills += 1
            for w in writers:
                w.close()
                acked |= w.acked
                tried |= w.tried
            next_n = max(w.n for w in writers) + 1
            proc.start()
            stored = check(proc.address, acked, tried)
        assert kills == CYCLES and len(acked) > 50 and stored >= len(acked)
        assert len(tried - acked) >= CYCLES  # every kill hit puts in flight
    finally:
        proc.stop()
