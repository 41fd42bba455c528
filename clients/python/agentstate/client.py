"""client: a thin synchronous client of the agentstate.v1 API.

    from agentstate import Client, Append
    with Client("unix:sidecar-data/sidecar.sock") as c:
        put = c.put_checkpoint("t1", {"messages": ["hi"]})
        c.put_checkpoint("t1", {"messages": Append(["hello"])}, parent_id=put.checkpoint.checkpoint_id)
        print(c.get_values("t1"))

Every call takes ``timeout`` (seconds, default the client's) and raises an
:class:`agentstate.errors.AgentStateError` subclass on failure. List calls
return iterators that fetch pages as needed.
"""
from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable, Iterator, Mapping

import grpc

from .errors import from_rpc_error
from .v1 import admin_pb2, admin_pb2_grpc, threads_pb2 as pb, threads_pb2_grpc, values_pb2
from .values import channel_write, check_key, encode_into, from_value

DEFAULT_ADDRESS = "unix:sidecar-data/sidecar.sock"
_IF_EXISTS = {"error": pb.IF_EXISTS_ERROR, "return": pb.IF_EXISTS_RETURN, "merge": pb.IF_EXISTS_MERGE_METADATA}
_MAX_MESSAGE = 64 * 1024 * 1024


def channel_options() -> list[tuple[str, Any]]:
    return [("grpc.max_receive_message_length", _MAX_MESSAGE), ("grpc.max_send_message_length", _MAX_MESSAGE)]


def _fill_map(target, values: Mapping[str, Any] | None, field: str = "metadata") -> None:
    for k, v in (values or {}).items():
        encode_into(v, target[check_key(k, field)], f"{field}[{k!r}]")


def decode_map(entries) -> dict[str, Any]:
    """Decode a map<string, Value> (metadata) into Python values."""
    return {k: from_value(v) for k, v in entries.items()}


def checkpoint_values(checkpoint: pb.Checkpoint) -> dict[str, Any]:
    """Decode the channel values of a Checkpoint message (channels without content are skipped)."""
    out = {}
    for name, cv in checkpoint.channels.items():
        if cv.HasField("value"):
            out[name] = from_value(cv.value)
    return out


class Client:
    """Synchronous client. ``address`` is ``unix:PATH`` or ``HOST:PORT``."""

    def __init__(self, address: str = DEFAULT_ADDRESS, *, namespace: str = "default", timeout: float = 30.0,
                 channel: grpc.Channel | None = None) -> None:
        self.address = address
        self.namespace = namespace
        self.timeout = timeout
        self._own_channel = channel is None
        self.channel = channel or grpc.insecure_channel(address, options=channel_options())
        self.threads = threads_pb2_grpc.ThreadServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        from . import artifacts, effects, events, runs  # facets of the run, event, artifact and effect services
        self.runs = runs.Runs(self)
        self.events = events.Events(self)
        self.artifacts = artifacts.Artifacts(self)
        self.effects = effects.Effects(self)

    def close(self) -> None:
        if self._own_channel:
            self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method, request, timeout: float | None):
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def wait_ready(self, timeout: float = 10.0) -> None:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    # ------------------------------------------------------------ threads

    def create_thread(self, thread_id: str = "", metadata: Mapping[str, Any] | None = None, *,
                      if_exists: str = "error", request_id: str = "", timeout: float | None = None) -> pb.Thread:
        req = pb.CreateThreadRequest(namespace=self.namespace, thread_id=thread_id,
                                     if_exists=_IF_EXISTS[if_exists], request_id=request_id)
        _fill_map(req.metadata, metadata)
        return self._call(self.threads.CreateThread, req, timeout).thread

    def get_thread(self, thread_id: str, *, timeout: float | None = None) -> pb.Thread:
        return self._call(self.threads.GetThread, pb.GetThreadRequest(namespace=self.namespace, thread_id=thread_id),
                          timeout).thread

    def list_threads(self, metadata_filter: Mapping[str, Any] | None = None, *, page_size: int = 0,
                     timeout: float | None = None) -> Iterator[pb.Thread]:
        token = ""
        while True:
            req = pb.ListThreadsRequest(namespace=self.namespace, page_size=page_size, page_token=token)
            _fill_map(req.metadata_filter, metadata_filter, "metadata_filter")
            resp = self._call(self.threads.ListThreads, req, timeout)
            yield from resp.threads
            token = resp.next_page_token
            if not token:
                return

    def update_thread(self, thread_id: str, set_metadata: Mapping[str, Any] | None = None, *,
                      remove_keys: Iterable[str] = (), replace: bool = False, etag: str = "",
                      request_id: str = "", timeout: float | None = None) -> pb.Thread:
        req = pb.UpdateThreadRequest(namespace=self.namespace, thread_id=thread_id,
                                     remove_metadata_keys=list(remove_keys), replace_metadata=replace, etag=etag,
                                     request_id=request_id)
        _fill_map(req.set_metadata, set_metadata, "set_metadata")
        return self._call(self.threads.UpdateThread, req, timeout).thread

    def delete_thread(self, thread_id: str, *, allow_missing: bool = False, etag: str = "",
                      request_id: str = "", timeout: float | None = None) -> pb.DeleteThreadResponse:
        req = pb.DeleteThreadRequest(namespace=self.namespace, thread_id=thread_id, allow_missing=allow_missing,
                                     etag=etag, request_id=request_id)
        return self._call(self.threads.DeleteThread, req, timeout)

    def copy_thread(self, source_thread_id: str, target_thread_id: str, *,
                    metadata: Mapping[str, Any] | None = None, replace_metadata: bool = False,
                    request_id: str = "", timeout: float | None = None) -> pb.CopyThreadResponse:
        req = pb.CopyThreadRequest(namespace=self.namespace, source_thread_id=source_thread_id,
                                   target_thread_id=target_thread_id, replace_metadata=replace_metadata,
                                   request_id=request_id)
        _fill_map(req.metadata, metadata)
        return self._call(self.threads.CopyThread, req, timeout)

    # ------------------------------------------------------------ checkpoints

    def put_checkpoint(self, thread_id: str, channels: Mapping[str, Any], *, checkpoint_id: str = "",
                       parent_id: str = "", base_id: str = "", checkpoint_ns: str = "",
                       metadata: Mapping[str, Any] | None = None, extra: Any = None,
                       expected_head_etag: str | None = None, schema_version: int = 0,
                       require_thread: bool = False, request_id: str = "",
                       timeout: float | None = None) -> pb.PutCheckpointResponse:
        """Store a checkpoint. Channel values are Python values or Append / SetKeys / Keep deltas."""
        req = pb.PutCheckpointRequest(namespace=self.namespace, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                      checkpoint_id=checkpoint_id, parent_checkpoint_id=parent_id,
                                      base_checkpoint_id=base_id, schema_version=schema_version,
                                      require_thread=require_thread, request_id=request_id)
        for name, value in channels.items():
            channel_write(value, req.channels[check_key(name, "channels")], f"channels[{name!r}]")
        _fill_map(req.metadata, metadata)
        if extra is not None:
            encode_into(extra, req.extra, "extra")
        if expected_head_etag is not None:
            req.expected_head_etag = expected_head_etag
        return self._call(self.threads.PutCheckpoint, req, timeout)

    def put_writes(self, thread_id: str, checkpoint_id: str, writes: Iterable[tuple], *, checkpoint_ns: str = "",
                   request_id: str = "", timeout: float | None = None) -> pb.PutWritesResponse:
        """Store pending writes: tuples (task_id, idx, channel, value[, task_path[, replace]])."""
        req = pb.PutWritesRequest(namespace=self.namespace, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                  checkpoint_id=checkpoint_id, request_id=request_id)
        for i, w in enumerate(writes):
            task_id, idx, channel, value, *rest = w
            pw = req.writes.add(task_id=task_id, idx=idx, channel=channel,
                                task_path=rest[0] if rest else "", replace=bool(rest[1]) if len(rest) > 1 else False)
            encode_into(value, pw.value, f"writes[{i}].value")
        return self._call(self.threads.PutWrites, req, timeout)

    def get_checkpoint(self, thread_id: str, checkpoint_id: str = "", *, checkpoint_ns: str = "",
                       channels: Iterable[str] = (), omit_values: bool = False,
                       known_roots: Mapping[str, bytes] | None = None, include_pending_writes: bool = False,
                       timeout: float | None = None) -> pb.Checkpoint:
        req = pb.GetCheckpointRequest(namespace=self.namespace, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                      checkpoint_id=checkpoint_id, channels=list(channels), omit_values=omit_values,
                                      known_roots=dict(known_roots or {}),
                                      include_pending_writes=include_pending_writes)
        return self._call(self.threads.GetCheckpoint, req, timeout).checkpoint

    def get_values(self, thread_id: str, checkpoint_id: str = "", *, checkpoint_ns: str = "",
                   timeout: float | None = None) -> dict[str, Any]:
        """The decoded channel values of a checkpoint (the latest by default)."""
        return checkpoint_values(self.get_checkpoint(thread_id, checkpoint_id, checkpoint_ns=checkpoint_ns,
                                                     timeout=timeout))

    def list_checkpoints(self, thread_id: str = "", *, checkpoint_ns: str | None = None,
                         metadata_filter: Mapping[str, Any] | None = None, before: str = "", limit: int = 0,
                         page_size: int = 0, include_values: bool = False, include_pending_writes: bool = False,
                         timeout: float | None = None) -> Iterator[pb.Checkpoint]:
        token = ""
        while True:
            req = pb.ListCheckpointsRequest(namespace=self.namespace, thread_id=thread_id,
                                            before_checkpoint_id=before, limit=limit, page_size=page_size,
                                            page_token=token, include_values=include_values,
                                            include_pending_writes=include_pending_writes)
            if checkpoint_ns is not None:
                req.checkpoint_ns = checkpoint_ns
            _fill_map(req.metadata_filter, metadata_filter, "metadata_filter")
            resp = self._call(self.threads.ListCheckpoints, req, timeout)
            yield from resp.checkpoints
            token = resp.next_page_token
            if not token:
                return

    def prune(self, thread_ids: Iterable[str], *, keep_latest: int | None = None,
              older_than: _dt.datetime | None = None, delete_all: bool = False, checkpoint_ns: str | None = None,
              request_id: str = "", timeout: float | None = None) -> int:
        req = pb.PruneCheckpointsRequest(namespace=self.namespace, thread_ids=list(thread_ids),
                                         request_id=request_id)
        if checkpoint_ns is not None:
            req.checkpoint_ns = checkpoint_ns
        if keep_latest is not None:
            req.keep_latest = keep_latest
        elif older_than is not None:
            req.older_than.FromDatetime(older_than)
        elif delete_all:
            req.delete_all = True
        return self._call(self.threads.PruneCheckpoints, req, timeout).deleted_checkpoints

    def delete_for_runs(self, run_ids: Iterable[str], *, request_id: str = "", timeout: float | None = None) -> int:
        req = pb.DeleteCheckpointsForRunsRequest(namespace=self.namespace, run_ids=list(run_ids),
                                                 request_id=request_id)
        return self._call(self.threads.DeleteCheckpointsForRuns, req, timeout).deleted_checkpoints

    def diff(self, thread_id: str, from_checkpoint_id: str, to_checkpoint_id: str, *, checkpoint_ns: str = "",
             timeout: float | None = None) -> list[pb.ChannelChange]:
        req = pb.DiffCheckpointsRequest(namespace=self.namespace, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                        from_checkpoint_id=from_checkpoint_id, to_checkpoint_id=to_checkpoint_id)
        return list(self._call(self.threads.DiffCheckpoints, req, timeout).changes)

    # ------------------------------------------------------------ admin

    def store_stats(self, *, timeout: float | None = None) -> admin_pb2.GetStoreStatsResponse:
        return self._call(self.admin.GetStoreStats, admin_pb2.GetStoreStatsRequest(), timeout)

    def collect_garbage(self, *, timeout: float | None = None) -> admin_pb2.CollectGarbageResponse:
        return self._call(self.admin.CollectGarbage, admin_pb2.CollectGarbageRequest(), timeout)

    def check_integrity(self, *, timeout: float | None = None) -> admin_pb2.CheckIntegrityResponse:
        return self._call(self.admin.CheckIntegrity, admin_pb2.CheckIntegrityRequest(), timeout)


__all__ = ["Client", "checkpoint_values", "decode_map", "values_pb2", "DEFAULT_ADDRESS"]
