"""End to end: an agent re-prices 2,000 items in batches, recording progress in checkpoints and every
price change through the effect ledger, while the agent and the sidecar are SIGKILLed at random points
(at least 10 times) and restarted. At the end every item was re-priced exactly once.

The "price system" is an append-only file outside the sidecar: applying a change appends one line (one
``write`` on an O_APPEND file, so a killed agent leaves whole lines), and it can answer "was change K
applied?" — what a real API with idempotency keys or a read-back offers, and what reconciling an
UNKNOWN effect needs. The agent (this file run as a script) does, per batch:

    for each item: BeginEffect(key) → DONE: skip; PENDING: apply; UNKNOWN: apply only if not applied
    PutCheckpoint(progress, effect completions, a step, a batch event)   -- one transaction

It exits on any error (a killed sidecar included); the driver restarts whatever is dead.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

ITEMS = 2000
BATCH = 50
RUN_ID = "reprice-1"
THREAD = "catalog"
LEASE = 1.0


def new_price(item: int) -> str:
    return f"{(item * 7919) % 1000 / 10 + 0.99:.2f}"


class PriceSystem:
    """The external system the agent changes (see module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def apply(self, item: int, price: str, key: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{item},{price},{key}\n".encode())
        finally:
            os.close(fd)

    def lines(self) -> list[list[str]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [line.split(",") for line in text.splitlines() if line]

    def applied(self, key: str) -> bool:
        return any(parts[2] == key for parts in self.lines())


def agent(address: str, prices_path: str, seed: int) -> int:
    from agentstate import AlreadyExists, Client, NotFound, effect_done, event, status_name, step
    from agentstate.effects import DONE, UNKNOWN

    rng = random.Random(seed)
    prices = PriceSystem(Path(prices_path))
    with Client(address, timeout=10) as c:
        c.wait_ready(30)
        try:
            c.runs.create(THREAD, run_id=RUN_ID, create_thread=True, strategy="enqueue", lease_timeout=LEASE,
                          max_attempts=100_000, input={"items": ITEMS})
        except AlreadyExists:
            pass
        if status_name(c.runs.get(RUN_ID).status) == "success":
            return 0
        held = c.runs.claim(run_id=RUN_ID, wait=30)
        try:
            head = c.get_checkpoint(THREAD)
            progress = head.channels["progress"]
            from agentstate import from_value
            next_batch = from_value(progress.value)["next_batch"]
            parent, etag = head.checkpoint_id, head.etag
        except NotFound:
            next_batch, parent, etag = 0, "", ""
        for batch in range(next_batch, ITEMS // BATCH):
            completions = []
            for item in range(batch * BATCH, (batch + 1) * BATCH):
                key, price = f"reprice:{item}", new_price(item)
                began = held.begin_effect(key, description=f"set price of item {item}",
                                          request_digest=f"{item}={price}")
                if began.effect.state == DONE:
                    continue
                if began.effect.state == UNKNOWN and prices.applied(key):
                    outcome = {"item": item, "price": price, "reconciled": True}
                else:  # PENDING, or UNKNOWN and not applied
                    prices.apply(item, price, key)
                    outcome = {"item": item, "price": price}
                completions.append(effect_done(key, began.token, outcome))
                if rng.random() < 0.02:
                    time.sleep(0.01)
            put = held.put_checkpoint({"progress": {"next_batch": batch + 1}}, parent_id=parent,
                                      expected_head_etag=etag, metadata={"batch": batch}, effects=completions,
                                      steps=[step("tool", "reprice-batch", counters={"requests": len(completions)})],
                                      events=[event("batch-done", {"batch": batch}, client_event_id=f"batch-{batch}")])
            parent, etag = put.checkpoint.checkpoint_id, put.checkpoint.etag
        held.complete({"repriced": ITEMS})
    return 0


# ---------------------------------------------------------------- the test (driver)

def stuck(proc: subprocess.Popen, tmp_path: Path) -> None:
    """Make a stuck agent dump its threads (faulthandler) and print its log and the sidecar's."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGABRT)
        proc.wait(10)
    for name in ("agent.log", "data.log"):
        print(f"---- {name}\n" + (tmp_path / name).read_text(errors="replace")[-20000:])


def test_reprice_exactly_once_through_kills(tmp_path):
    from conftest import SidecarProcess

    from agentstate import status_name

    rng = random.Random(20_240_601)
    prices = PriceSystem(tmp_path / "prices.log")
    sidecar = SidecarProcess(tmp_path / "data", "--watchdog-interval", "0.05").start()
    agent_log = open(tmp_path / "agent.log", "ab")
    starts = 0

    def start_agent() -> subprocess.Popen:
        nonlocal starts
        starts += 1
        return subprocess.Popen([sys.executable, "-X", "faulthandler", __file__, "agent", sidecar.address,
                                 str(prices.path), str(starts)],
                                stdout=agent_log, stderr=subprocess.STDOUT, cwd=str(Path(__file__).parent))

    kinds = ["agent", "sidecar", "both"] * 4
    rng.shuffle(kinds)
    thresholds = sorted(rng.sample(range(40, ITEMS - 100), len(kinds)))  # kill when this many changes are applied
    kills: list[tuple[str, int]] = []
    proc = start_agent()
    try:
        for kind, threshold in zip(kinds, thresholds):
            deadline = time.monotonic() + 120
            while len(prices.lines()) < threshold:
                if time.monotonic() > deadline:
                    stuck(proc, tmp_path)
                    raise AssertionError(f"no progress past {len(prices.lines())} changes; kills so far {kills}")
                if proc.poll() is not None:  # it died on its own (e.g. the sidecar went away): restart it
                    proc = start_agent()
                time.sleep(rng.uniform(0.002, 0.02))
            if kind in ("agent", "both") and proc.poll() is None:
                proc.kill()
                proc.wait(10)
            if kind in ("sidecar", "both"):
                sidecar.kill()
            kills.append((kind, len(prices.lines())))
            if kind in ("sidecar", "both"):
                sidecar.start()
            if proc.poll() is not None:
                proc = start_agent()
        deadline = time.monotonic() + 180
        while True:
            rc = proc.wait(max(1, deadline - time.monotonic()))
            with sidecar.client() as c:
                if rc == 0 and status_name(c.runs.get(RUN_ID).status) == "success":
                    break
            assert time.monotonic() < deadline, "the agent did not finish"
            proc = start_agent()
    finally:
        if proc.poll() is None:
            proc.kill()
        agent_log.close()

    try:
        assert len(kills) >= 10 and {k for k, _ in kills} == {"agent", "sidecar", "both"}, kills
        lines = prices.lines()
        counts: dict[int, int] = {}
        for item, price, key in lines:
            assert key == f"reprice:{item}" and price == new_price(int(item))
            counts[int(item)] = counts.get(int(item), 0) + 1
        twice = {i: n for i, n in counts.items() if n != 1}
        assert not twice, f"re-priced more than once: {twice}"
        assert sorted(counts) == list(range(ITEMS)), f"missing: {sorted(set(range(ITEMS)) - set(counts))[:20]}"
        with sidecar.client() as c:
            from agentstate import from_value

            assert from_value(c.get_checkpoint(THREAD).channels["progress"].value) == {"next_batch": ITEMS // BATCH}
            done = list(c.effects.list(thread_id=THREAD, states=["done"], page_size=1000))
            assert len(done) == ITEMS
            reconciled = [e for e in done if from_value(e.outcome).get("reconciled")]
            batch_events = [e.client_event_id for e in c.events.list(THREAD) if e.type == "batch-done"]
            assert batch_events == [f"batch-{b}" for b in range(ITEMS // BATCH)]
            run = c.runs.get(RUN_ID)
            assert status_name(run.status) == "success" and run.usage.requests == ITEMS
            assert c.check_integrity().missing_blobs == 0
        print(f"kills: {kills}; agent starts: {starts}; run attempts: {run.attempt}; "
              f"effects reconciled after a crash: {len(reconciled)}")
    finally:
        sidecar.stop()


if __name__ == "__main__":
    if sys.argv[1] == "agent":
        sys.exit(agent(sys.argv[2], sys.argv[3], int(sys.argv[4])))
