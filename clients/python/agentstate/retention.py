"""retention: the RetentionService facet of the client (``client.retention``) — retention policies and usage.

    c.retention.set_policy(keep_last=50, max_age=7 * 86400, max_checkpoints=1000, on_limit="prune")
    c.retention.set_policy(thread_id="t1", keep_last=5)           # a thread's own replaces its namespace's
    report = c.retention.apply(dry_run=True)                      # what the policies would remove now
    u = c.retention.usage("t1")                                   # logical_bytes next to physical_bytes

Durations are seconds (floats). ``AsyncClient.retention`` (:class:`AsyncRetention`) has the same calls as
coroutines. See docs/lifecycle.md "Retention" for the rules and the keep-rules.
"""
from __future__ import annotations

from typing import Iterable

from google.protobuf import duration_pb2

from ._facet import AsyncFacet, Call, SyncFacet, unary
from .v1 import retention_pb2 as tpb, retention_pb2_grpc

REFUSE = tpb.LIMIT_ACTION_REFUSE
PRUNE = tpb.LIMIT_ACTION_PRUNE
LIMIT_ACTIONS = {"refuse": REFUSE, "prune": PRUNE}


def _duration(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def policy(*, keep_last: int = 0, max_age: float | None = None, thin_after: float | None = None,
           thin_interval: float | None = None, delete_idle_thread_after: float | None = None,
           max_checkpoints: int = 0, max_bytes: int = 0, on_limit: str = "refuse",
           history_channels: Iterable[str] = ()) -> tpb.RetentionPolicy:
    """A RetentionPolicy message (durations in seconds; ``on_limit`` "refuse" or "prune")."""
    if on_limit not in LIMIT_ACTIONS:
        raise ValueError(f"on_limit must be one of {sorted(LIMIT_ACTIONS)}, not {on_limit!r}")
    return tpb.RetentionPolicy(keep_last=keep_last, max_age=_duration(max_age), thin_after=_duration(thin_after),
                               thin_interval=_duration(thin_interval),
                               delete_idle_thread_after=_duration(delete_idle_thread_after),
                               max_checkpoints=max_checkpoints, max_bytes=max_bytes,
                               on_limit=LIMIT_ACTIONS[on_limit], history_channels=list(history_channels))


class RetentionCalls:
    """The RetentionService calls, written once (see :mod:`agentstate._facet`) for :class:`Retention` and
    :class:`AsyncRetention`."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.stub = retention_pb2_grpc.RetentionServiceStub(client.channel)

    @unary
    def set_policy(self, thread_id: str = "", *, timeout: float | None = None,
                   **rules) -> tpb.SetRetentionPolicyResponse:
        """Set the namespace's policy (or, with ``thread_id``, the thread's own); ``rules`` as :func:`policy`."""
        req = tpb.SetRetentionPolicyRequest(namespace=self.client.namespace, thread_id=thread_id,
                                            policy=policy(**rules))
        return (yield Call(self.stub.SetRetentionPolicy, req, timeout))

    @unary
    def clear_policy(self, thread_id: str = "", *, timeout: float | None = None) -> tpb.SetRetentionPolicyResponse:
        req = tpb.SetRetentionPolicyRequest(namespace=self.client.namespace, thread_id=thread_id, clear=True)
        return (yield Call(self.stub.SetRetentionPolicy, req, timeout))

    @unary
    def get_policy(self, thread_id: str = "", *, timeout: float | None = None) -> tpb.GetRetentionPolicyResponse:
        """The policy in effect and its source (NotFound when none is)."""
        req = tpb.GetRetentionPolicyRequest(namespace=self.client.namespace, thread_id=thread_id)
        return (yield Call(self.stub.GetRetentionPolicy, req, timeout))

    @unary
    def apply(self, thread_id: str = "", *, dry_run: bool = False,
              timeout: float | None = None) -> tpb.ApplyRetentionResponse:
        """Apply the namespace's policies now (or one thread's); ``dry_run`` reports without removing."""
        req = tpb.ApplyRetentionRequest(namespace=self.client.namespace, thread_id=thread_id, dry_run=dry_run)
        return (yield Call(self.stub.ApplyRetention, req, timeout))

    @unary
    def usage(self, thread_id: str = "", *, timeout: float | None = None) -> tpb.GetUsageResponse:
        """Checkpoints, pending writes, logical and physical bytes of a thread (or the whole namespace)."""
        req = tpb.GetUsageRequest(namespace=self.client.namespace, thread_id=thread_id)
        return (yield Call(self.stub.GetUsage, req, timeout))

    @unary
    def set_quota(self, *, max_bytes: int | None = None, max_threads: int | None = None,
                  max_items: int | None = None, clear: bool = False,
                  timeout: float | None = None) -> tpb.SetQuotaResponse:
        """Set the namespace's own quotas (None: the server's default; 0: unlimited), or ``clear`` them."""
        quota = None if clear else tpb.Quota(max_bytes=max_bytes, max_threads=max_threads, max_items=max_items)
        req = tpb.SetQuotaRequest(namespace=self.client.namespace, quota=quota, clear=clear)
        return (yield Call(self.stub.SetQuota, req, timeout))

    @unary
    def quota(self, thread_id: str = "", *, timeout: float | None = None) -> tpb.GetQuotaResponse:
        """The quotas in effect next to the namespace's charged usage (and the thread's, with ``thread_id``)."""
        req = tpb.GetQuotaRequest(namespace=self.client.namespace, thread_id=thread_id)
        return (yield Call(self.stub.GetQuota, req, timeout))


class Retention(RetentionCalls, SyncFacet):
    """RetentionService calls (``client.retention``)."""


class AsyncRetention(RetentionCalls, AsyncFacet):
    """RetentionService calls of the asyncio client (``async_client.retention``): coroutines."""
