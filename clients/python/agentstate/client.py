"""client: a thin synchronous client of the agentstate.v1 API.

    from agentstate import Client, Append
    with Client("unix:sidecar-data/sidecar.sock") as c:
        put = c.put_checkpoint("t1", {"messages": ["hi"]})
        c.put_checkpoint("t1", {"messages": Append(["hello"])}, parent_id=put.checkpoint.checkpoint_id)
        print(c.get_values("t1"))

Every call takes ``timeout`` (seconds, default the client's, 30 s): the
deadline of the whole call, retries included. A call that is safe to repeat
(reads, requests with a request_id, and mutations that are idempotent by key,
lease or token, such as a put with a checkpoint id, a heartbeat or a begun
effect: the table is :data:`agentstate.retries.RULES`) is retried on
transient failures (UNAVAILABLE, OVERLOADED, CONFLICT) with exponential
backoff until its deadline, waiting for the channel to be ready in between,
so it rides out a sidecar restart; mutations that are not get a fresh
request_id first (``auto_request_ids``), so a retry after a lost reply
returns the first result instead of applying twice. Failures raise an
:class:`agentstate.errors.AgentStateError` subclass. List calls return
iterators that fetch pages as needed.
"""
from __future__ import annotations

import datetime as _dt
import random
import time
from typing import Any, Iterable, Iterator, Mapping

import grpc

from . import _requests as rq
from . import transport
from .transport import TLS
from ._requests import DEFAULT_ADDRESS, RetryPolicy, channel_options
from .retries import DEFAULT_TIMEOUT
from .errors import DeadlineExceeded, from_rpc_error
from .v1 import admin_pb2, admin_pb2_grpc, threads_pb2 as pb, threads_pb2_grpc, values_pb2
from . import _lists
from .values import from_value, response_lists


def decode_map(entries) -> dict[str, Any]:
    """Decode a map<string, Value> (metadata) into Python values."""
    return {k: from_value(v) for k, v in entries.items()}


def checkpoint_values(checkpoint: pb.Checkpoint, list_wires: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Decode the channel values of a Checkpoint message (channels without content are skipped).
    ``list_wires``: channel -> its list's wire bytes as received (values.response_lists)."""
    out = {}
    for name, cv in checkpoint.channels.items():
        if cv.HasField("value"):
            out[name] = from_value(cv.value, list_wires.get(name) if list_wires else None)
    return out


def _with_wire(data: bytes) -> tuple[pb.GetCheckpointResponse, bytes]:
    """GetCheckpoint's response deserializer for get_values: the message, and the bytes it was parsed from."""
    return pb.GetCheckpointResponse.FromString(data), data


class Client:
    """Synchronous client. ``address`` is ``unix:PATH`` or ``HOST:PORT``.

    ``retry`` says how transient failures are retried (see RetryPolicy: by
    default until the deadline; ``agentstate.NO_RETRY`` turns it off).
    ``wait_for_ready`` says whether calls wait for the server to be reachable
    (up to their deadline) instead of failing at once with UNAVAILABLE: by
    default (None) the calls that may be retried wait and the others do not;
    True makes every call wait, False none.

    ``token`` is a bearer token for a sidecar started with ``--auth-file``
    (sent as metadata on every call, over TLS or a local connection only); ``tls``
    a :class:`agentstate.TLS` (or True: TLS with the system's roots) for a
    sidecar serving TLS. See :mod:`agentstate.transport`.
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, *, namespace: str = "default",
                 timeout: float = DEFAULT_TIMEOUT,
                 channel: grpc.Channel | None = None, retry: RetryPolicy | None = None,
                 auto_request_ids: bool = True, wait_for_ready: bool | None = None,
                 options: Iterable[tuple[str, Any]] = (), token: str | None = None,
                 tls: "TLS | bool | None" = None) -> None:
        self.address = address
        self.namespace = namespace
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.auto_request_ids = auto_request_ids
        self.wait_for_ready = wait_for_ready
        self._own_channel = channel is None
        self.channel = channel or transport.channel(address, channel_options(options), token, tls)
        own = [*channel_options(options), transport.OWN_CONNECTION]
        #: the long-lived streams' connections (agentstate.transport.StreamConnections)
        self.stream_connections = transport.StreamConnections(
            None if channel else lambda: transport.channel(address, own, token, tls), self.channel)
        self.threads = threads_pb2_grpc.ThreadServiceStub(self.channel)
        self._get_with_wire = self.channel.unary_unary(  # GetCheckpoint, answering (message, its bytes)
            "/agentstate.v1.ThreadService/GetCheckpoint", request_serializer=pb.GetCheckpointRequest.SerializeToString,
            response_deserializer=_with_wire, _registered_method=True)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        from . import artifacts, conversations, effects, events, memory, runs  # facets of the other services
        self.runs = runs.Runs(self)
        self.events = events.Events(self)
        self.artifacts = artifacts.Artifacts(self)
        self.effects = effects.Effects(self)
        self.memory = memory.Memory(self)
        self.conversations = conversations.Conversations(self)
        from . import retention  # noqa: PLC0415
        self.retention = retention.Retention(self)
        from . import schemas  # the SchemaService facet
        self.schemas = schemas.Schemas(self)
        from . import transfer  # the TransferService facet (export and import)
        self.transfer = transfer.Transfer(self)

    def close(self) -> None:
        self.stream_connections.close_all()
        if self._own_channel:
            self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method, request, timeout: float | None):
        """Send ``request`` with ``method`` (a stub method); retry as the policy allows."""
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        retryable = rq.prepare(request, self.auto_request_ids)
        wait = self.wait_for_ready if self.wait_for_ready is not None else retryable and self.retry.retries
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline of {budget}s exceeded "
                                       f"after {attempt - 1} attempts")
            try:
                return method(request, timeout=remaining, wait_for_ready=wait or None)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            if not (retryable and rq.transient(err) and self.retry.more(attempt)):
                raise err
            pause = max(self.retry.backoff(attempt, random.random()), rq.retry_after(err))
            if time.monotonic() + pause >= deadline:
                raise err
            time.sleep(pause)

    def wait_ready(self, timeout: float = 10.0) -> None:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    # ------------------------------------------------------------ threads

    def create_thread(self, thread_id: str = "", metadata: Mapping[str, Any] | None = None, *,
                      if_exists: str = "error", request_id: str = "", timeout: float | None = None) -> pb.Thread:
        req = rq.create_thread_request(self.namespace, thread_id, metadata, if_exists, request_id)
        return self._call(self.threads.CreateThread, req, timeout).thread

    def get_thread(self, thread_id: str, *, timeout: float | None = None) -> pb.Thread:
        return self._call(self.threads.GetThread, pb.GetThreadRequest(namespace=self.namespace, thread_id=thread_id),
                          timeout).thread

    def list_threads(self, metadata_filter: Mapping[str, Any] | None = None, *, page_size: int = 0,
                     timeout: float | None = None) -> Iterator[pb.Thread]:
        token = ""
        while True:
            req = rq.list_threads_request(self.namespace, metadata_filter, page_size, token)
            resp = self._call(self.threads.ListThreads, req, timeout)
            yield from resp.threads
            token = resp.next_page_token
            if not token:
                return

    def update_thread(self, thread_id: str, set_metadata: Mapping[str, Any] | None = None, *,
                      remove_keys: Iterable[str] = (), replace: bool = False, etag: str = "",
                      request_id: str = "", timeout: float | None = None) -> pb.Thread:
        req = rq.update_thread_request(self.namespace, thread_id, set_metadata, remove_keys, replace, etag,
                                       request_id)
        return self._call(self.threads.UpdateThread, req, timeout).thread

    def delete_thread(self, thread_id: str, *, allow_missing: bool = False, etag: str = "",
                      request_id: str = "", timeout: float | None = None) -> pb.DeleteThreadResponse:
        req = pb.DeleteThreadRequest(namespace=self.namespace, thread_id=thread_id, allow_missing=allow_missing,
                                     etag=etag, request_id=request_id)
        return self._call(self.threads.DeleteThread, req, timeout)

    def copy_thread(self, source_thread_id: str, target_thread_id: str, *,
                    metadata: Mapping[str, Any] | None = None, replace_metadata: bool = False,
                    request_id: str = "", timeout: float | None = None) -> pb.CopyThreadResponse:
        req = rq.copy_thread_request(self.namespace, source_thread_id, target_thread_id, metadata,
                                     replace_metadata, request_id)
        return self._call(self.threads.CopyThread, req, timeout)

    # ------------------------------------------------------------ checkpoints

    def put_checkpoint(self, thread_id: str, channels: Mapping[str, Any], *, checkpoint_id: str = "",
                       parent_id: str = "", base_id: str = "", checkpoint_ns: str = "",
                       metadata: Mapping[str, Any] | None = None, extra: Any = None,
                       expected_head_etag: str | None = None, schema_version: int = 0,
                       require_thread: bool = False, request_id: str = "", durability: str | None = None,
                       timeout: float | None = None, schema: str = "") -> pb.PutCheckpointResponse:
        """Store a checkpoint. Channel values are Python values or Append / SetKeys / Keep deltas.
        ``schema`` names a registered schema (agentstate.schemas) the values follow at ``schema_version``."""
        req = rq.put_checkpoint_request(self.namespace, thread_id, channels, checkpoint_id=checkpoint_id,
                                        parent_id=parent_id, base_id=base_id, checkpoint_ns=checkpoint_ns,
                                        metadata=metadata, extra=extra, expected_head_etag=expected_head_etag,
                                        schema_version=schema_version, require_thread=require_thread,
                                        request_id=request_id)
        req.durability = rq.durability(durability)
        req.schema = schema
        return self._call(self.threads.PutCheckpoint, req, timeout)

    def put_writes(self, thread_id: str, checkpoint_id: str, writes: Iterable[tuple], *, checkpoint_ns: str = "",
                   request_id: str = "", durability: str | None = None, timeout: float | None = None) -> pb.PutWritesResponse:
        """Store pending writes: tuples (task_id, idx, channel, value[, task_path[, replace]])."""
        req = rq.put_writes_request(self.namespace, thread_id, checkpoint_id, writes, checkpoint_ns, request_id)
        req.durability = rq.durability(durability)
        return self._call(self.threads.PutWrites, req, timeout)

    def get_checkpoint(self, thread_id: str, checkpoint_id: str = "", *, checkpoint_ns: str = "",
                       channels: Iterable[str] = (), omit_values: bool = False,
                       known_roots: Mapping[str, bytes] | None = None, include_pending_writes: bool = False,
                       timeout: float | None = None, read_schema_version: int = 0) -> pb.Checkpoint:
        """One checkpoint (the latest by default). ``read_schema_version``: the schema version this code
        understands; a checkpoint stored at an older one comes back migrated (``.migration`` says how)."""
        req = rq.get_checkpoint_request(self.namespace, thread_id, checkpoint_id, checkpoint_ns, channels,
                                        omit_values, known_roots, include_pending_writes)
        req.read_schema_version = read_schema_version
        return self._call(self.threads.GetCheckpoint, req, timeout).checkpoint

    def get_values(self, thread_id: str, checkpoint_id: str = "", *, checkpoint_ns: str = "",
                   timeout: float | None = None, read_schema_version: int = 0) -> dict[str, Any]:
        """The decoded channel values of a checkpoint (the latest by default). With the compiled list decoder,
        a long list is scanned in the response as received (values.response_lists), not serialized again."""
        if not _lists.NATIVE:
            return checkpoint_values(self.get_checkpoint(thread_id, checkpoint_id, checkpoint_ns=checkpoint_ns,
                                                         timeout=timeout, read_schema_version=read_schema_version))
        req = rq.get_checkpoint_request(self.namespace, thread_id, checkpoint_id, checkpoint_ns, (), False, None,
                                        False)
        req.read_schema_version = read_schema_version
        resp, data = self._call(self._get_with_wire, req, timeout)
        return checkpoint_values(resp.checkpoint, response_lists(data))

    def list_checkpoints(self, thread_id: str = "", *, checkpoint_ns: str | None = None,
                         metadata_filter: Mapping[str, Any] | None = None, before: str = "", limit: int = 0,
                         page_size: int = 0, include_values: bool = False, include_pending_writes: bool = False,
                         known_roots: Mapping[str, bytes] | None = None,
                         timeout: float | None = None, read_schema_version: int = 0) -> Iterator[pb.Checkpoint]:
        token = ""
        while True:
            req = rq.list_checkpoints_request(self.namespace, thread_id, checkpoint_ns, metadata_filter, before,
                                              limit, page_size, token, include_values, include_pending_writes,
                                              known_roots)
            req.read_schema_version = read_schema_version
            resp = self._call(self.threads.ListCheckpoints, req, timeout)
            yield from resp.checkpoints
            token = resp.next_page_token
            if not token:
                return

    def prune(self, thread_ids: Iterable[str], *, keep_latest: int | None = None,
              older_than: _dt.datetime | None = None, delete_all: bool = False, checkpoint_ns: str | None = None,
              history_channels: Iterable[str] = (), request_id: str = "", timeout: float | None = None) -> int:
        req = rq.prune_request(self.namespace, thread_ids, keep_latest, older_than, delete_all, checkpoint_ns,
                               history_channels, request_id)
        return self._call(self.threads.PruneCheckpoints, req, timeout).deleted_checkpoints

    def delete_for_runs(self, run_ids: Iterable[str], *, request_id: str = "", timeout: float | None = None) -> int:
        req = pb.DeleteCheckpointsForRunsRequest(namespace=self.namespace, run_ids=list(run_ids),
                                                 request_id=request_id)
        return self._call(self.threads.DeleteCheckpointsForRuns, req, timeout).deleted_checkpoints

    def diff(self, thread_id: str, from_checkpoint_id: str, to_checkpoint_id: str, *, checkpoint_ns: str = "",
             timeout: float | None = None, read_schema_version: int = 0, response: bool = False):
        """The channels that differ (ChannelChange list). ``read_schema_version``: both checkpoints compared as
        migrated to that version of their schema; ``response``: the whole DiffCheckpointsResponse instead
        (its ``migration`` and versions say how the values compared were read)."""
        req = pb.DiffCheckpointsRequest(namespace=self.namespace, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
                                        from_checkpoint_id=from_checkpoint_id, to_checkpoint_id=to_checkpoint_id,
                                        read_schema_version=read_schema_version)
        resp = self._call(self.threads.DiffCheckpoints, req, timeout)
        return resp if response else list(resp.changes)

    def get_channel_history(self, thread_id: str, channels: Iterable[str], checkpoint_id: str = "", *,
                            checkpoint_ns: str = "", max_depth: int = 0,
                            known_roots: Mapping[str, bytes] | None = None,
                            timeout: float | None = None, read_schema_version: int = 0,
                            ) -> pb.GetChannelHistoryResponse:
        """Pending writes to ``channels`` along the checkpoint's parent chain, and each channel's seed
        (``read_schema_version``: each migrated to that version of its schema)."""
        req = rq.channel_history_request(self.namespace, thread_id, channels, checkpoint_id, checkpoint_ns,
                                         max_depth, known_roots)
        req.read_schema_version = read_schema_version
        return self._call(self.threads.GetChannelHistory, req, timeout)

    def batch_write(self, requests: Iterable, *, request_id: str = "",
                    timeout: float | None = None) -> pb.BatchWriteResponse:
        """Apply PutCheckpointRequest / PutWritesRequest messages in order, all or nothing, in one call (the
        ``*_request`` builders of agentstate._requests make them)."""
        return self._call(self.threads.BatchWrite, rq.batch_write_request(self.namespace, requests, request_id),
                          timeout)

    def write_stream(self, *, window: int = 512, timeout: float | None = None):
        """A :class:`agentstate.streams.WriteStream`: pipelined puts and writes on one StreamWrites call
        (futures per request; ``flush()`` waits for all). Use it as a context manager."""
        from .streams import WriteStream

        return WriteStream(self, window=window, timeout=timeout)

    # ------------------------------------------------------------ admin

    def store_stats(self, *, timeout: float | None = None) -> admin_pb2.GetStoreStatsResponse:
        return self._call(self.admin.GetStoreStats, admin_pb2.GetStoreStatsRequest(), timeout)

    def collect_garbage(self, *, timeout: float | None = None) -> admin_pb2.CollectGarbageResponse:
        return self._call(self.admin.CollectGarbage, admin_pb2.CollectGarbageRequest(), timeout)

    def check_integrity(self, *, timeout: float | None = None) -> admin_pb2.CheckIntegrityResponse:
        return self._call(self.admin.CheckIntegrity, admin_pb2.CheckIntegrityRequest(), timeout)

    def backup_store(self, name: str | None = None, *, timeout: float | None = 600.0,
                     ) -> admin_pb2.BackupStoreResponse:
        """An online backup into the sidecar's backup directory, named ``name`` (default: backup-<UTC time>)."""
        request = admin_pb2.BackupStoreRequest(name=name or backup_name())
        return self._call(self.admin.BackupStore, request, timeout)


def backup_name() -> str:
    """backup-<UTC time>, the name of a backup the caller did not name (the sidecar's scheduled ones too)."""
    return time.strftime("backup-%Y%m%dT%H%M%SZ", time.gmtime())


__all__ = ["Client", "backup_name", "checkpoint_values", "decode_map", "values_pb2", "DEFAULT_ADDRESS", "RetryPolicy"]
