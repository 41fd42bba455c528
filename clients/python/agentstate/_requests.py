"""_requests: request builders shared by the sync and the asyncio client.

Each ``*_request`` function turns Python arguments into one agentstate.v1
request message (values encoded and checked on the way, raising
InvalidArgument that names the field). The retry rules (:class:`RetryPolicy`,
:func:`prepare`, the table of what is safe to repeat) are in
:mod:`agentstate.retries`, re-exported here.
"""
from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable, Mapping

from . import ids
from .retries import (IDEMPOTENT, NO_RETRY, RECONNECT_OPTIONS, TRANSIENT, RetryPolicy, prepare,  # noqa: F401
                      register_idempotent, retry_after, transient)
from .v1 import threads_pb2 as pb
from .values import channel_write, check_key, encode_into

DEFAULT_ADDRESS = "unix:sidecar-data/sidecar.sock"
MAX_MESSAGE = 64 * 1024 * 1024
IF_EXISTS = {"error": pb.IF_EXISTS_ERROR, "return": pb.IF_EXISTS_RETURN, "merge": pb.IF_EXISTS_MERGE_METADATA}


def channel_options(extra: Iterable[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    return [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE),
            *RECONNECT_OPTIONS, *extra]


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
