"""_requests: request builders shared by the sync and the asyncio client, and the retry rules.

Each ``*_request`` function turns Python arguments into one agentstate.v1
request message (values encoded and checked on the way, raising
InvalidArgument that names the field). :class:`RetryPolicy` and
:func:`retryable` decide when a failed call may be sent again.
"""
from __future__ import annotations

import datetime as _dt
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import grpc

from . import ids
from .errors import AgentStateError
from .v1 import threads_pb2 as pb
from .values import channel_write, check_key, encode_into

DEFAULT_ADDRESS = "unix:sidecar-data/sidecar.sock"
MAX_MESSAGE = 64 * 1024 * 1024
IF_EXISTS = {"error": pb.IF_EXISTS_ERROR, "return": pb.IF_EXISTS_RETURN, "merge": pb.IF_EXISTS_MERGE_METADATA}


def channel_options(extra: Iterable[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    return [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE),
            *extra]


# ------------------------------------------------------------------ retries

@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a failed call is sent again.

    Only calls that are safe to repeat are retried (see :func:`retryable`),
    only on transient failures (UNAVAILABLE, an OVERLOADED server, an ABORTED
    conflict), and never past the call's deadline. ``max_attempts`` counts
    the first try; 0 means "until the deadline". Backoff is exponential with
    full jitter, capped at ``max_backoff`` seconds.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.05
    max_backoff: float = 1.0
    multiplier: float = 2.0

    def backoff(self, attempt: int, jitter: float) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based); ``jitter`` in [0, 1)."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return cap * (0.5 + jitter / 2)

    def more(self, attempt: int) -> bool:
        return self.max_attempts <= 0 or attempt < self.max_attempts


NO_RETRY = RetryPolicy(max_attempts=1)

#: (status code, ErrorInfo reason or "" for any) of failures that may go away on their own.
TRANSIENT = {
    (grpc.StatusCode.UNAVAILABLE, ""),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED"),
    (grpc.StatusCode.ABORTED, "CONFLICT"),
}


def transient(err: AgentStateError) -> bool:
    return (err.code, "") in TRANSIENT or (err.code, err.reason) in TRANSIENT


#: Mutating requests that are safe to repeat without a request_id, by message name. Reads
#: (Get*, List*, Diff*, Check*, Watch*) always are; anything else only with a request_id.
IDEMPOTENT: dict[str, Callable[[Any], bool]] = {
    # the same id and content again is a no-op ("created" false)
    "PutCheckpointRequest": lambda r: bool(r.checkpoint_id),
    # writes are keyed by (task_id, idx): stored ones are kept, replaced ones get the same value
    "PutWritesRequest": lambda r: True,
    "DeleteThreadRequest": lambda r: r.allow_missing and not r.etag,
    "PruneCheckpointsRequest": lambda r: True,
    "DeleteCheckpointsForRunsRequest": lambda r: True,
    "CreateThreadRequest": lambda r: r.if_exists == pb.IF_EXISTS_RETURN,
    "CollectGarbageRequest": lambda r: True,
    # a batch is as safe to repeat as every request in it
    "BatchWriteRequest": lambda r: all(w.WhichOneof("op") and _idempotent(getattr(w, w.WhichOneof("op")))
                                       for w in r.writes),
}
_READ_PREFIXES = ("Get", "List", "Diff", "Check", "Watch")


def register_idempotent(message_name: str, predicate: Callable[[Any], bool]) -> None:
    """Declare requests of ``message_name`` for which ``predicate(request)`` is true safe to repeat."""
    IDEMPOTENT[message_name] = predicate


def _idempotent(request) -> bool:
    predicate = IDEMPOTENT.get(request.DESCRIPTOR.name)
    return predicate is not None and predicate(request)


def _has_request_id(request) -> bool:
    return "request_id" in request.DESCRIPTOR.fields_by_name


def prepare(request, auto_request_ids: bool) -> bool:
    """Decide whether ``request`` may be retried; give it a request_id first when it needs one
    (and ``auto_request_ids`` is on) so that a retry after a lost reply is answered, not re-applied.
    A stream of requests (client-streaming calls such as UploadArtifact) cannot be replayed: never retried."""
    descriptor = getattr(request, "DESCRIPTOR", None)
    if descriptor is None:
        return False
    name = descriptor.name
    if name.startswith(_READ_PREFIXES):
        return True
    predicate = IDEMPOTENT.get(name)
    if predicate is not None and predicate(request):
        return True
    if _has_request_id(request):
        if not request.request_id and auto_request_ids:
            request.request_id = f"auto-{uuid.uuid4().hex}"
        return bool(request.request_id)
    return False


# ------------------------------------------------------------------ builders

def fill_map(target, values: Mapping[str, Any] | None, field_name: str = "metadata") -> None:
    for k, v in (values or {}).items():
        encode_into(v, target[check_key(k, field_name)], f"{field_name}[{k!r}]")


def create_thread_request(ns: str, thread_id: str, metadata, if_exists: str, request_id: str):
    req = pb.CreateThreadRequest(namespace=ns, thread_id=thread_id, if_exists=IF_EXISTS[if_exists],
                                 request_id=request_id)
    fill_map(req.metadata, metadata)
    return req


def list_threads_request(ns: str, metadata_filter, page_size: int, token: str):
    req = pb.ListThreadsRequest(namespace=ns, page_size=page_size, page_token=token)
    fill_map(req.metadata_filter, metadata_filter, "metadata_filter")
    return req


def update_thread_request(ns: str, thread_id: str, set_metadata, remove_keys, replace: bool, etag: str,
                          request_id: str):
    req = pb.UpdateThreadRequest(namespace=ns, thread_id=thread_id, remove_metadata_keys=list(remove_keys),
                                 replace_metadata=replace, etag=etag, request_id=request_id)
    fill_map(req.set_metadata, set_metadata, "set_metadata")
    return req


def copy_thread_request(ns: str, source: str, target: str, metadata, replace_metadata: bool, request_id: str):
    req = pb.CopyThreadRequest(namespace=ns, source_thread_id=source, target_thread_id=target,
                               replace_metadata=replace_metadata, request_id=request_id)
    fill_map(req.metadata, metadata)
    return req


def put_checkpoint_request(ns: str, thread_id: str, channels: Mapping[str, Any], *, checkpoint_id: str,
                           parent_id: str, base_id: str, checkpoint_ns: str, metadata, extra,
                           expected_head_etag: str | None, schema_version: int, require_thread: bool,
                           request_id: str) -> pb.PutCheckpointRequest:
    # A checkpoint id made here (time-ordered, like the server's) makes the put idempotent by id:
    # a retry needs no request_id, so the server keeps no request record for it. A caller that gives
    # its own request_id may resend the put itself, so then the server names the checkpoint.
    req = pb.PutCheckpointRequest(namespace=ns, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                  checkpoint_id=checkpoint_id or ('' if request_id else ids.new_id()), parent_checkpoint_id=parent_id,
                                  base_checkpoint_id=base_id, schema_version=schema_version,
                                  require_thread=require_thread, request_id=request_id)
    for name, value in channels.items():
        channel_write(value, req.channels[check_key(name, "channels")], f"channels[{name!r}]")
    fill_map(req.metadata, metadata)
    if extra is not None:
        encode_into(extra, req.extra, "extra")
    if expected_head_etag is not None:
        req.expected_head_etag = expected_head_etag
    return req


def put_writes_request(ns: str, thread_id: str, checkpoint_id: str, writes: Iterable[tuple], checkpoint_ns: str,
                       request_id: str) -> pb.PutWritesRequest:
    req = pb.PutWritesRequest(namespace=ns, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                              checkpoint_id=checkpoint_id, request_id=request_id)
    for i, w in enumerate(writes):
        task_id, idx, channel, value, *rest = w
        pw = req.writes.add(task_id=task_id, idx=idx, channel=channel,
                            task_path=rest[0] if rest else "", replace=bool(rest[1]) if len(rest) > 1 else False)
        encode_into(value, pw.value, f"writes[{i}].value")
    return req


def get_checkpoint_request(ns: str, thread_id: str, checkpoint_id: str, checkpoint_ns: str, channels,
                           omit_values: bool, known_roots, include_pending_writes: bool):
    return pb.GetCheckpointRequest(namespace=ns, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                   checkpoint_id=checkpoint_id, channels=list(channels), omit_values=omit_values,
                                   known_roots=dict(known_roots or {}),
                                   include_pending_writes=include_pending_writes)


def list_checkpoints_request(ns: str, thread_id: str, checkpoint_ns: str | None, metadata_filter, before: str,
                             limit: int, page_size: int, token: str, include_values: bool,
                             include_pending_writes: bool, known_roots) -> pb.ListCheckpointsRequest:
    req = pb.ListCheckpointsRequest(namespace=ns, thread_id=thread_id, before_checkpoint_id=before, limit=limit,
                                    page_size=page_size, page_token=token, include_values=include_values,
                                    include_pending_writes=include_pending_writes,
                                    known_roots=dict(known_roots or {}))
    if checkpoint_ns is not None:
        req.checkpoint_ns = checkpoint_ns
    fill_map(req.metadata_filter, metadata_filter, "metadata_filter")
    return req


def prune_request(ns: str, thread_ids, keep_latest: int | None, older_than: _dt.datetime | None, delete_all: bool,
                  checkpoint_ns: str | None, history_channels, request_id: str) -> pb.PruneCheckpointsRequest:
    req = pb.PruneCheckpointsRequest(namespace=ns, thread_ids=list(thread_ids), request_id=request_id,
                                     history_channels=list(history_channels))
    if checkpoint_ns is not None:
        req.checkpoint_ns = checkpoint_ns
    if keep_latest is not None:
        req.keep_latest = keep_latest
    elif older_than is not None:
        req.older_than.FromDatetime(older_than)
    elif delete_all:
        req.delete_all = True
    return req


def channel_history_request(ns: str, thread_id: str, channels, checkpoint_id: str, checkpoint_ns: str,
                            max_depth: int, known_roots) -> pb.GetChannelHistoryRequest:
    return pb.GetChannelHistoryRequest(namespace=ns, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                       checkpoint_id=checkpoint_id, channels=list(channels), max_depth=max_depth,
                                       known_roots=dict(known_roots or {}))


__all__ = ["RetryPolicy", "NO_RETRY", "register_idempotent", "DEFAULT_ADDRESS", "channel_options"]


DURABILITY = {None: pb.DURABILITY_UNSPECIFIED, "": pb.DURABILITY_UNSPECIFIED, "sync": pb.DURABILITY_SYNC,
              "process": pb.DURABILITY_PROCESS}


def durability(name: str | None) -> int:
    """The Durability enum value of None (the server's mode), "sync" or "process"."""
    try:
        return DURABILITY[name]
    except KeyError:
        raise ValueError(f"durability must be None, 'sync' or 'process', not {name!r}") from None


def batch_write_request(ns: str, requests: Iterable, request_id: str = "") -> pb.BatchWriteRequest:
    """A BatchWrite of PutCheckpointRequest / PutWritesRequest messages (namespaces set to ``ns``)."""
    req = pb.BatchWriteRequest(namespace=ns, request_id=request_id)
    for r in requests:
        item = req.writes.add()
        if isinstance(r, pb.PutCheckpointRequest):
            item.put_checkpoint.CopyFrom(r)
            item.put_checkpoint.namespace = ns
        elif isinstance(r, pb.PutWritesRequest):
            item.put_writes.CopyFrom(r)
            item.put_writes.namespace = ns
        else:
            raise TypeError(f"a batch holds PutCheckpointRequest and PutWritesRequest, not {type(r).__name__}")
    return req
