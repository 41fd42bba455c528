"""_facet: facet methods written once, run by the sync or the asyncio client.

A facet method (``client.runs.create``, ``client.events.list``, ...) is
written once, as a *plan*: a generator that builds each request, yields it
as a :class:`Call` and gets the reply back, and returns the result (a list
plan also yields the items it lists between its calls). :func:`unary` and
:func:`listing` mark plans; :class:`SyncFacet` and :class:`AsyncFacet` run
them with their client's ``_call`` (deadline, retries, typed errors): a sync
facet returns the result or an iterator, an async facet a coroutine or an
async iterator. So every request is built in one place, and the sync and
async facets only differ in how they wait.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Generator, NamedTuple

import grpc

from .errors import from_rpc_error


class Call(NamedTuple):
    """One unary (or client-streaming) call of a plan: a stub method, its request, the call's timeout."""

    method: Any
    request: Any
    timeout: float | None


class Done(NamedTuple):
    """The end of a plan, with its result."""

    value: Any


Plan = Generator[Any, Any, Any]


def advance(plan: Plan, reply: Any = None) -> Any:
    """Send ``reply`` into ``plan``: its next Call or listed item, or Done(result) at its end."""
    try:
        return plan.send(reply)
    except StopIteration as stop:
        return Done(stop.value)


def pages(method, build: Callable[[str], Any], field: str, timeout: float | None) -> Plan:
    """Plan of a paged List call: ``build(page_token)`` makes each request; yields the items in ``field``."""
    token = ""
    while True:
        resp = yield Call(method, build(token), timeout)
        yield from getattr(resp, field)
        token = resp.next_page_token
        if not token:
            return


class unary:  # noqa: N801 - used as a decorator
    """Marks a facet method written as a plan that returns one result; ``.plan`` is the plan itself."""

    runner = "_run"

    def __init__(self, plan: Callable[..., Plan]) -> None:
        self.plan = plan
        functools.update_wrapper(self, plan)

    def __get__(self, facet, owner=None):
        if facet is None:
            return self
        plan = self.plan.__get__(facet, owner)
        run = getattr(facet, self.runner)

        @functools.wraps(plan)
        def method(*args, **kwargs):
            return run(plan(*args, **kwargs))

        return method


class listing(unary):  # noqa: N801 - used as a decorator
    """Marks a facet method written as a plan that yields the items it lists."""

    runner = "_iterate"


class SyncFacet:
    """Runs plans with a sync :class:`agentstate.Client`."""

    def __init__(self, client) -> None:
        self.client = client

    def _run(self, plan: Plan) -> Any:
        step = advance(plan)
        while not isinstance(step, Done):
            step = advance(plan, self.client._call(*step))
        return step.value

    def _iterate(self, plan: Plan):
        step = advance(plan)
        while not isinstance(step, Done):
            if isinstance(step, Call):
                step = advance(plan, self.client._call(*step))
            else:
                yield step
                step = advance(plan)

    def _stream(self, method, request, timeout: float | None):
        """The messages of a server-streaming call (no retries), errors raised as AgentStateError."""
        try:
            yield from method(request, timeout=self.client.timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None


class AsyncFacet:
    """Runs plans with an :class:`agentstate.AsyncClient`: coroutines and async iterators."""

    def __init__(self, client) -> None:
        self.client = client

    async def _run(self, plan: Plan) -> Any:
        step = advance(plan)
        while not isinstance(step, Done):
            step = advance(plan, await self.client._call(*step))
        return step.value

    async def _iterate(self, plan: Plan):
        step = advance(plan)
        while not isinstance(step, Done):
            if isinstance(step, Call):
                step = advance(plan, await self.client._call(*step))
            else:
                yield step
                step = advance(plan)

    async def _stream(self, method, request, timeout: float | None):
        try:
            async for message in method(request, timeout=self.client.timeout if timeout is None else timeout):
                yield message
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
