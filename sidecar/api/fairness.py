"""fairness: admission of unary calls in fair turns across clients (issue 16).

Every call of the sidecar runs on one event loop. Without admission, a client
with 200 calls outstanding has 200 handlers interleaved on that loop, and a
call of another client waits behind every step of all of them (its latency
grows with the flood's concurrency). :class:`FairQueue` sits in front of the
handlers (``api/callguard.py`` wraps every unary RPC with it):

- at most ``per_client`` calls of one client run their handler at once, at most
  ``capacity`` calls of all clients together; a call beyond either waits (an
  asyncio future, nothing runs for it) in its client's queue;
- when a running call ends, the freed turn goes to the next *client* in a
  round-robin ring of the clients that have calls waiting (each takes one call
  per turn, then goes to the back of the ring), not to the oldest call: a
  client with 200 calls waiting gets one turn per round like a client with one;
- (``api/callguard.py``) a client with ``max_calls_per_client`` calls in
  progress over all its connections is refused at once, ``RESOURCE_EXHAUSTED``
  ``TOO_MANY_CALLS`` (metadata ``scope: client``, ``limit``), before any work.

The fast path (nothing waiting, room in both limits) is two counter updates.

*Who is a client* (``CallGuard.client_of``): the credential when the sidecar
checks them (``--auth-file`` token or mutual-TLS subject: every connection of
one token is one client), else the TCP connection (``ipv4:HOST:PORT``), else
(a unix-socket call without a token, gRPC names no connection there) the one
client ``unix:``, which gets ``capacity`` turns (``per_client`` does not apply
to it, or every local client together would share one client's share).

A call keeps its turn until its handler returns, its wait for the commit of
its write included: then the work a client has in the sidecar at once (on the
loop, in the open transaction, in each commit) is bounded by its turns, and so
is what another client's call waits behind. (Giving the turn back when the
write starts waiting for its commit was tried: the flooding client's calls
then all reach the transaction, and the other client's p50 under the flood
was 12.8-32.4 ms instead of 5.9-11.7 ms in short runs of benchmarks/bench_fairness.py, with the
commits paced as storage/store.py COMMIT_PACE says: docs/security.md "Fairness".) The turn is
given back before the response is sent, so a client that does not read its
responses holds no turn. Calls that wait by
request (``ClaimRun``/``ClaimCompaction`` with a ``wait_timeout``), the
streaming RPCs and the AdminService are not admitted here (they would hold a
turn while they wait; the streams are bounded per connection, the admin RPCs
need the admin role).
"""
from __future__ import annotations

import asyncio
from collections import deque


DEFAULT_CAPACITY = 64  # handlers running at once, all clients together (it bounds a group commit too)
DEFAULT_PER_CLIENT = 2  # ... of one client
DEFAULT_MAX_CALLS_PER_CLIENT = 1024  # running + waiting calls of one client before TOO_MANY_CALLS (0: no limit)
UNIX = "unix:"


class _Client:
    __slots__ = ("running", "waiting", "in_ring")

    def __init__(self) -> None:
        self.running = 0
        self.waiting: deque[asyncio.Future] = deque()
        self.in_ring = False


class FairQueue:
    """Round-robin admission across clients (see the module doc)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, per_client: int = DEFAULT_PER_CLIENT) -> None:
        if capacity < 1 or per_client < 1:
            raise ValueError("capacity and per_client must be at least 1")
        self.capacity = capacity
        self.per_client = min(per_client, capacity)
        self.running = 0
        self.clients: dict[object, _Client] = {}
        self.ring: deque[object] = deque()  # clients with calls waiting and room under per_client, in turn order
        self.queued = 0  # calls that had to wait (a counter)
        self.order: list | None = None  # tests: the clients in the order their calls were admitted

    def _limit(self, key) -> int:
        return self.capacity if key == UNIX else self.per_client

    def try_acquire(self, key) -> bool:
        """A turn of client ``key`` at once, if there is one (no wait: the fast path of :meth:`acquire`)."""
        c = self.clients.get(key)
        if c is None:
            if self.ring or self.running >= self.capacity:
                return False
            c = self.clients[key] = _Client()
        elif self.ring or self.running >= self.capacity or c.running >= self._limit(key):
            return False
        c.running += 1
        self.running += 1
        if self.order is not None:
            self.order.append(key)
        return True

    async def acquire(self, key) -> None:
        """Wait for a turn of client ``key``. Every acquire that returns must be followed by one
        :meth:`release` (a wait cancelled after its turn was given gives the turn back itself)."""
        if self.try_acquire(key):
            return
        c = self.clients.get(key)
        if c is None:
            c = self.clients[key] = _Client()
        fut = asyncio.get_running_loop().create_future()
        c.waiting.append(fut)
        self.queued += 1
        if not c.in_ring and c.running < self._limit(key):
            c.in_ring = True
            self.ring.append(key)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # the turn was given just as the call was cancelled
                self.release(key)
            else:
                try:
                    c.waiting.remove(fut)
                except ValueError:
                    pass
                self._forget(key, c)
            raise

    def release(self, key) -> None:
        c = self.clients[key]
        c.running -= 1
        self.running -= 1
        if c.waiting and not c.in_ring and c.running < self._limit(key):
            c.in_ring = True
            self.ring.append(key)
        if self.ring:
            self._dispatch()
        if not c.running and not c.waiting and not c.in_ring:
            del self.clients[key]

    def _forget(self, key, c: _Client) -> None:
        if not c.running and not c.waiting and not c.in_ring and self.clients.get(key) is c:
            del self.clients[key]

    def _dispatch(self) -> None:
        """Give free turns to the clients of the ring, one call each per round."""
        while self.running < self.capacity and self.ring:
            key = self.ring.popleft()
            c = self.clients[key]
            c.in_ring = False
            while c.waiting and c.waiting[0].done():  # cancelled waits
                c.waiting.popleft()
            if not c.waiting:
                self._forget(key, c)
                continue
            c.waiting.popleft().set_result(None)
            c.running += 1
            self.running += 1
            if self.order is not None:
                self.order.append(key)
            if c.waiting and c.running < self._limit(key):
                c.in_ring = True
                self.ring.append(key)

    def waiting(self) -> int:
        return sum(len(c.waiting) for c in self.clients.values())
