"""A sidecar restart while an agent holds a run: the run is not given up, safe calls are retried.

The agent is what the README shows, with the client's defaults (no custom retry policy, no
``wait_for_ready``, no ``register_idempotent``): it holds a run with ``keep_alive``, re-prices items
through the effect ledger (begin, apply to an outside "price system", complete with the batch's
checkpoint), reads its run between batches, and stops when ``held.lost`` is set. The sidecar is
SIGKILLed and restarted on the same data directory.

* Ten restarts, each shorter than the lease: the agent never sees the run lost, finishes, and every
  effect is applied exactly once.
* One restart longer than the lease: the agent's keep_alive reports the run lost (its lease expired),
  the agent stops, and another holder takes the run over once the sidecar lets the lease expire; it
  reconciles the effects the first holder had begun (UNKNOWN) and every effect is applied exactly once.
* The asyncio client's keep_alive: three restarts ridden out, then a sidecar that stays away is reported
  as an expired lease.
"""
from __future__ import annotations

import random
import threading
import time

from conftest import SidecarProcess

from agentstate import Client, LeaseExpired, effect_done, event, from_value, status_name
from agentstate.effects import DONE, PENDING, UNKNOWN

THREAD = "catalog"
LEASE = 8.0  # seconds, for the runs that ride restarts out; a restart takes about 0.5 s, over 3 s on 2 busy cores
SHORT_LEASE = 2.0  # for the run whose sidecar stays away longer
INTERVAL = 0.2  # keep_alive's heartbeat interval
BATCH = 8


class Prices:
    """The outside system the agent changes: it can say whether a change was applied (as reconciling
    an UNKNOWN effect needs)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def apply(self, key: str) -> None:
        with self._lock:
            self.lines.append(key)

    def applied(self, key: str) -> bool:
        with self._lock:
            return key in self.lines


class Agent:
    """Re-prices items batch after batch as ``held``; counts what the ledger answered."""

    def __init__(self, client: Client, held, prices: Prices) -> None:
        self.c, self.held, self.prices = client, held, prices
        self.answers: dict[int, int] = {}
        self.reconciled = 0
        self.slow_calls = 0  # calls that took long enough to have waited through an outage
        self.parent = held.resume_checkpoint_id

    def timed(self, fn, *args, **kw):
        start = time.monotonic()
        try:
            return fn(*args, **kw)
        finally:
            self.slow_calls += time.monotonic() - start > 0.2

    def next_batch(self) -> int:
        if not self.parent:
            return 0
        return from_value(self.c.get_checkpoint(THREAD, self.parent).channels["progress"].value)

    def batch(self, batch: int, after_apply=None) -> bool:
        """One batch; False when the run was lost on the way (nothing more is done)."""
        completions = []
        for i in range(BATCH):
            key = f"price:{batch}:{i}"
            began = self.timed(self.held.begin_effect, key, request_digest=f"{key}=new")
            if self.held.lost is not None:
                return False
            self.answers[began.effect.state] = self.answers.get(began.effect.state, 0) + 1
            if began.effect.state == DONE:
                continue
            if began.effect.state == UNKNOWN and self.prices.applied(key):
                self.reconciled += 1
            else:
                self.prices.apply(key)
            completions.append(effect_done(key, began.token, {"key": key}))
            if after_apply is not None:
                after_apply(batch, i)
            time.sleep(0.003)
        self.timed(self.c.runs.get, self.held.run_id)  # a read between batches
        put = self.timed(self.held.put_checkpoint, {"progress": batch + 1}, parent_id=self.parent,
                         effects=completions, events=[event("batch-done", {"batch": batch},
                                                            client_event_id=f"batch-{batch}")])
        self.parent = put.checkpoint.checkpoint_id
        return self.held.lost is None


def check_exactly_once(c: Client, prices: Prices, batches: int) -> None:
    keys = [f"price:{b}:{i}" for b in range(batches) for i in range(BATCH)]
    assert sorted(prices.lines) == sorted(keys), "an effect was applied twice or not at all"
    done = {e.idempotency_key for e in c.effects.list(thread_id=THREAD, states=["done"], page_size=1000)}
    assert done == set(keys)
    assert [e.client_event_id for e in c.events.list(THREAD) if e.type == "batch-done"] == \
        [f"batch-{b}" for b in range(batches)]


def test_a_held_run_rides_out_ten_restarts_within_its_lease(tmp_path):
    sidecar = SidecarProcess(tmp_path / "data", "--watchdog-interval", "0.05").start()
    prices = Prices()
    outages: list[float] = []
    restarts_done = threading.Event()
    failure: list[BaseException] = []

    def restart_ten_times() -> None:
        rng = random.Random(18)
        try:
            for _ in range(10):
                time.sleep(rng.uniform(0.25, 0.5))
                start = time.monotonic()
                sidecar.kill()
                sidecar.start()
                outages.append(time.monotonic() - start)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failure.append(e)
        finally:
            restarts_done.set()

    restarter = threading.Thread(target=restart_ten_times, daemon=True)
    try:
        with Client(sidecar.address) as c:
            held = c.runs.start(THREAD, create_thread=True, lease_timeout=LEASE)
            held.keep_alive(INTERVAL)
            agent = Agent(c, held, prices)
            restarter.start()
            batches = 0
            while not restarts_done.is_set() or batches < 2:
                assert agent.batch(batches), f"the run was reported lost: {held.lost!r} (outages {outages})"
                batches += 1
            assert held.lost is None, f"{held.lost!r} (outages {outages})"
            held.complete({"batches": batches})
            assert not failure, failure
            assert len(outages) == 10 and max(outages) < LEASE, outages
            assert agent.slow_calls >= 5, agent.slow_calls  # the agent's calls did wait through the outages
            assert agent.answers == {PENDING: batches * BATCH}, agent.answers
            run = c.runs.get(held.run_id)
            assert (status_name(run.status), run.attempt) == ("success", 1)
            check_exactly_once(c, prices, batches)
        print(f"{batches} batches, outages {min(outages):.2f}-{max(outages):.2f} s, "
              f"{agent.slow_calls} calls waited through one")
    finally:
        restarter.join(30)
        sidecar.stop()


def test_a_restart_longer_than_the_lease_loses_the_run_to_another_holder(tmp_path):
    sidecar = SidecarProcess(tmp_path / "data", "--watchdog-interval", "0.05").start()
    prices = Prices()
    killed = threading.Event()
    outage: list[float] = []

    def kill_mid_batch(batch: int, i: int) -> None:
        if batch == 1 and i == 2:  # three changes of batch 1 applied, its checkpoint not put
            sidecar.kill()
            killed.set()

    try:
        with Client(sidecar.address) as c:
            held = c.runs.start(THREAD, create_thread=True, lease_timeout=SHORT_LEASE)
            lost = held.keep_alive(INTERVAL)

            def restart_after_the_run_is_lost() -> None:
                killed.wait(30)
                start = time.monotonic()
                lost.wait(30)
                sidecar.start()
                outage.append(time.monotonic() - start)

            restarter = threading.Thread(target=restart_after_the_run_is_lost, daemon=True)
            restarter.start()
            first = Agent(c, held, prices)
            assert first.batch(0, kill_mid_batch)
            try:
                kept_going = first.batch(1, kill_mid_batch)
            except Exception as e:  # noqa: BLE001 - the sidecar may already refuse the old lease
                assert getattr(e, "reason", "") in ("LEASE_LOST", "RUN_NOT_ACTIVE"), e
                kept_going = False
            restarter.join(30)
            assert not kept_going and isinstance(held.lost, LeaseExpired), held.lost
            assert outage and outage[0] > SHORT_LEASE, outage

            with Client(sidecar.address) as c2:  # another agent: takes the run over when the sidecar lets go
                again = c2.runs.claim(run_id=held.run_id, wait=30)
                again.keep_alive(INTERVAL)
                assert again.run.attempt == 2 and again.resume_checkpoint_id == first.parent
                second = Agent(c2, again, prices)
                batch = second.next_batch()
                assert batch == 1
                for b in range(batch, 4):
                    assert second.batch(b)
                again.complete()
                assert again.lost is None
                # items 0-2 of batch 1 were applied by the first holder: reconciled, not applied again
                assert second.reconciled == 3 and second.answers.get(UNKNOWN, 0) in (3, 4), second.answers
                run = c2.runs.get(held.run_id)
                assert (status_name(run.status), run.attempt) == ("success", 2)
                check_exactly_once(c2, prices, 4)
    finally:
        sidecar.stop()


def test_the_asyncio_keep_alive_rides_out_restarts_and_reports_an_expired_lease(tmp_path):
    import asyncio

    from agentstate import AsyncClient

    sidecar = SidecarProcess(tmp_path / "data", "--watchdog-interval", "0.05").start()

    async def main():
        async with AsyncClient(sidecar.address) as c:
            held = await c.runs.start(THREAD, create_thread=True, lease_timeout=LEASE)
            lost = held.keep_alive(INTERVAL)
            for _ in range(3):
                await asyncio.sleep(0.3)
                await asyncio.to_thread(sidecar.kill)
                await asyncio.to_thread(sidecar.start)
            began = await held.begin_effect("price:0")  # safe to repeat: no request id, retried if need be
            await asyncio.sleep(2 * INTERVAL)
            assert held.lost is None and not lost.is_set(), held.lost
            assert held.lease_remaining() > LEASE / 2  # heartbeats get through again (2.4 s of restarts went by)
            await c.effects.complete("price:0", began.token, 1)
            await asyncio.to_thread(sidecar.kill)  # and now for good
            await asyncio.wait_for(lost.wait(), LEASE + 5)
            assert isinstance(held.lost, LeaseExpired), held.lost

    try:
        asyncio.run(main())
    finally:
        sidecar.stop()
