"""retries: which calls may be sent again, and how failed calls are retried.

:data:`RULES` is the one table of every agentstate.v1 RPC: whether a request
is safe to repeat *as sent* and why (docs/clients.md has the same table, and
the TypeScript and Go clients follow it; the tests hold all three to it).
A safe call that fails on a transient error (UNAVAILABLE, an OVERLOADED
server, an ABORTED conflict) is sent again with backoff until its deadline,
waiting for the channel to be ready in between, so a sidecar restart (back
in well under a second) costs a call a pause, not an error.

The kinds of rule:

``read-only``
    reads; always safe.
``idempotent``
    a repeat finds nothing left to do (prune by a policy, delete what is gone).
``by key``
    the request names what it creates or changes (a checkpoint id, a task id
    and index, client event ids, an effect's idempotency key with the
    holder's lease); the server answers a repeat from what the first one
    stored.
``by lease`` / ``by token``
    the request carries the holder's lease id (Heartbeat) or an effect's
    token (Complete/FailEffect): repeating it renews or records the same
    thing again.
``by request id``
    the server remembers the request_id with the first response (24 hours)
    and answers a repeat with it; the clients fill one in when the caller
    gave none (``auto_request_ids``).
``stream``
    streaming calls are not retried as calls (see the table for what their
    helpers do instead).

A conditional rule (``by key, else by request id``) is safe as sent when its
condition holds and otherwise needs a request id like any other write.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable

import grpc

from .errors import AgentStateError
from .v1 import admin_pb2, artifacts_pb2, conversations_pb2, effects_pb2, events_pb2, memory_pb2, runs_pb2, threads_pb2
from .v1 import retention_pb2
from .v1 import schemas_pb2
from .v1 import transfer_pb2

READ_ONLY = "read-only"
IDEMPOTENT_KIND = "idempotent"
BY_KEY = "by key"
BY_LEASE = "by lease"
BY_TOKEN = "by token"
BY_REQUEST_ID = "by request id"
STREAM = "stream"


@dataclass(frozen=True)
class Rule:
    """Whether requests of one RPC are safe to repeat as sent: ``kind`` (see module doc), ``why`` in words,
    and for a conditional rule the condition (``when(request)``); a request that fails it, or any request
    of kind ``by request id``, is safe only with a request_id."""

    kind: str
    why: str
    when: Callable[[Any], bool] | None = None

    @property
    def label(self) -> str:
        """The kind as the docs' table writes it ("by key, else by request id" for a conditional rule)."""
        return f"{self.kind}, else {BY_REQUEST_ID}" if self.when is not None else self.kind

    def safe_as_sent(self, request) -> bool:
        if self.kind in (BY_REQUEST_ID, STREAM):
            return False
        return self.when is None or bool(self.when(request))


def _named_put(r) -> bool:
    # an identical re-put of a checkpoint id succeeds without change (checked before expected_head_etag);
    # steps without a step_id and events without a client id would be recorded again
    return bool(r.checkpoint_id) and all(s.step_id for s in r.steps) and all(e.client_event_id for e in r.events)


def _batch_item(w) -> bool:
    op = w.WhichOneof("op")
    return op is not None and _safe_as_sent(getattr(w, op))


_READ = "reads only"

#: Every RPC of agentstate.v1 ("Service.Method") and whether it is safe to repeat as sent.
RULES: dict[str, Rule] = {
    # ThreadService
    "ThreadService.CreateThread": Rule(
        BY_KEY, "with a thread_id and IF_EXISTS_RETURN the existing thread is returned; otherwise a repeat fails "
        "ALREADY_EXISTS, merges again or makes a second thread",
        lambda r: bool(r.thread_id) and r.if_exists == threads_pb2.IF_EXISTS_RETURN),
    "ThreadService.GetThread": Rule(READ_ONLY, _READ),
    "ThreadService.ListThreads": Rule(READ_ONLY, _READ),
    "ThreadService.UpdateThread": Rule(
        BY_REQUEST_ID, "a repeat fails ETAG_MISMATCH, or applies the change again over one made in between"),
    "ThreadService.DeleteThread": Rule(
        IDEMPOTENT_KIND, "with allow_missing and no etag, deleting a deleted thread is a no-op; otherwise a repeat "
        "fails NOT_FOUND", lambda r: r.allow_missing and not r.etag),
    "ThreadService.CopyThread": Rule(BY_REQUEST_ID, "a repeat fails ALREADY_EXISTS (the target exists)"),
    "ThreadService.PutCheckpoint": Rule(
        BY_KEY, "with a checkpoint_id, an identical re-put succeeds without change (checked before "
        "expected_head_etag), when its steps have step ids and its events client ids; without an id the server "
        "names a new checkpoint", _named_put),
    "ThreadService.PutWrites": Rule(
        BY_KEY, "writes are keyed by (task_id, idx): stored ones are kept, replaced ones get the same value"),
    "ThreadService.GetCheckpoint": Rule(READ_ONLY, _READ),
    "ThreadService.ListCheckpoints": Rule(READ_ONLY, _READ),
    "ThreadService.PruneCheckpoints": Rule(IDEMPOTENT_KIND, "the same policy applied again deletes nothing more"),
    "ThreadService.DeleteCheckpointsForRuns": Rule(IDEMPOTENT_KIND, "deleting deleted checkpoints is a no-op"),
    "ThreadService.DiffCheckpoints": Rule(READ_ONLY, _READ),
    "ThreadService.GetChannelHistory": Rule(READ_ONLY, _READ),
    "ThreadService.BatchWrite": Rule(
        BY_KEY, "as safe as every request in it (they carry no request ids of their own)",
        lambda r: all(_batch_item(w) for w in r.writes)),
    "ThreadService.StreamWrites": Rule(
        STREAM, "not retried as a call; the write stream sends its unacknowledged requests again on a new stream, "
        "each made safe first by the rules of PutCheckpoint and PutWrites"),
    # AdminService
    "AdminService.GetStoreStats": Rule(READ_ONLY, _READ),
    "AdminService.CollectGarbage": Rule(IDEMPOTENT_KIND, "collects what nothing references; again finds less"),
    "AdminService.CheckIntegrity": Rule(READ_ONLY, _READ),
    "AdminService.BackupStore": Rule(
        BY_KEY, "the request names the backup it creates; a repeat of one that went through fails "
        "INVALID_ARGUMENT (a backup of that name exists) and makes no second backup"),
    "AdminService.ReencryptNamespace": Rule(IDEMPOTENT_KIND, "records already under the current key are skipped; "
                                            "again finds nothing left to rewrite"),
    # RunService
    "RunService.CreateRun": Rule(
        BY_REQUEST_ID, "a repeat creates a second run (or fails ALREADY_EXISTS for a given run_id)"),
    "RunService.GetRun": Rule(READ_ONLY, _READ),
    "RunService.ListRuns": Rule(READ_ONLY, _READ),
    "RunService.ClaimRun": Rule(
        BY_REQUEST_ID, "a repeat of a claim that went through fails RUN_NOT_ACTIVE (the run is RUNNING now); "
        "with the request id it returns the first claim's lease"),
    "RunService.Heartbeat": Rule(BY_LEASE, "renews the lease that lease_id names; again renews it again"),
    "RunService.CompleteRun": Rule(
        BY_REQUEST_ID, "a repeat of a completion that went through fails RUN_NOT_ACTIVE (the run has ended)"),
    "RunService.FailRun": Rule(BY_REQUEST_ID, "as CompleteRun"),
    "RunService.CancelRun": Rule(
        BY_REQUEST_ID, "cancelling a cancelled run returns it unchanged (without next_run_id): harmless, and the "
        "request id gives the first answer"),
    "RunService.ResumeRun": Rule(
        BY_REQUEST_ID, "a repeat fails RUN_NOT_ACTIVE, or resumes the run a second time after its next lease "
        "expired"),
    "RunService.ListBranches": Rule(READ_ONLY, _READ),
    "RunService.PromoteBranch": Rule(BY_REQUEST_ID, "a repeat puts another head (or fails ETAG_MISMATCH)"),
    "RunService.StartStep": Rule(
        BY_REQUEST_ID, "a repeat fails STEP_ALREADY_EXISTS, or opens a second step when the server names it"),
    "RunService.EndStep": Rule(BY_REQUEST_ID, "a repeat fails STEP_ENDED"),
    "RunService.RecordStep": Rule(BY_REQUEST_ID, "as StartStep"),
    "RunService.ListSteps": Rule(READ_ONLY, _READ),
    "RunService.GetThreadUsage": Rule(READ_ONLY, _READ),
    # EventService
    "EventService.AppendEvents": Rule(
        BY_KEY, "when every event has a client_event_id a repeat returns the stored events; events without one "
        "would be appended again", lambda r: all(e.client_event_id for e in r.events)),
    "EventService.ListEvents": Rule(READ_ONLY, _READ),
    "EventService.WatchEvents": Rule(
        STREAM, "reads only; the watch helpers reopen a broken stream after the last sequence they yielded"),
    # ArtifactService
    "ArtifactService.UploadArtifact": Rule(
        STREAM, "a request stream is not replayed; an upload sent again with the same header.request_id returns "
        "the first version"),
    "ArtifactService.DownloadArtifact": Rule(STREAM, "reads only; a broken download is not resumed"),
    "ArtifactService.GetArtifact": Rule(READ_ONLY, _READ),
    "ArtifactService.ListArtifacts": Rule(READ_ONLY, _READ),
    "ArtifactService.SetOfficialArtifact": Rule(
        BY_REQUEST_ID, "a repeat could undo a change made in between"),
    # EffectService
    "EffectService.BeginEffect": Rule(
        BY_KEY, "the same holder (run_id, lease_id) beginning the same idempotency_key again gets the same token "
        "and the same state (PENDING, UNKNOWN after a take-over, DONE)"),
    "EffectService.CompleteEffect": Rule(
        BY_TOKEN, "completing a DONE effect again with its token returns it unchanged"),
    "EffectService.FailEffect": Rule(
        BY_TOKEN, "failing a FAILED effect again with its token returns it unchanged (EFFECT_TOKEN_STALE if another "
        "run began it again in between)"),
    "EffectService.GetEffect": Rule(READ_ONLY, _READ),
    "EffectService.ListEffects": Rule(READ_ONLY, _READ),
    # ConversationService
    "ConversationService.AppendItems": Rule(
        BY_KEY, "when every item has a client_item_id a repeat returns the stored items (without checking expected_last_seq); items without one would be appended again", lambda r: all(i.client_item_id for i in r.items)),
    "ConversationService.ListItems": Rule(READ_ONLY, _READ),
    "ConversationService.GetItems": Rule(READ_ONLY, _READ),
    "ConversationService.PopItem": Rule(
        BY_REQUEST_ID, "a repeat pops the next item"),
    "ConversationService.ClearItems": Rule(
        BY_REQUEST_ID, "a repeat clears what was appended in between"),
    "ConversationService.GetConversation": Rule(READ_ONLY, _READ),
    "ConversationService.SetPinnedItem": Rule(
        BY_REQUEST_ID, "a repeat could undo a change made in between (or fail ETAG_MISMATCH)"),
    "ConversationService.ListPinnedItems": Rule(READ_ONLY, _READ),
    "ConversationService.DeletePinnedItem": Rule(
        IDEMPOTENT_KIND, "with allow_missing, deleting a deleted pin is a no-op; otherwise a repeat fails PINNED_ITEM_NOT_FOUND", lambda r: r.allow_missing),
    "ConversationService.SetCompactionPolicy": Rule(
        BY_REQUEST_ID, "a repeat could undo a change made in between"),
    "ConversationService.GetCompactionPolicy": Rule(READ_ONLY, _READ),
    "ConversationService.SetIdlePolicy": Rule(
        BY_REQUEST_ID, "a repeat could undo a change made in between"),
    "ConversationService.GetIdlePolicy": Rule(READ_ONLY, _READ),
    "ConversationService.ClaimCompaction": Rule(
        BY_REQUEST_ID, "a repeat would claim another compaction; with the request id it returns the first claim and its lease"),
    "ConversationService.SubmitSummary": Rule(
        BY_LEASE, "the same lease sending the same text again gets the stored summary"),
    "ConversationService.ListCompactions": Rule(READ_ONLY, _READ),
    "ConversationService.ListSummaries": Rule(READ_ONLY, _READ),
    "ConversationService.ExpandSummary": Rule(READ_ONLY, _READ),
    "ConversationService.GetContext": Rule(READ_ONLY, _READ),
    "ConversationService.ReportUsage": Rule(
        BY_KEY, "a context hash's report replaces its earlier report"),
    # MemoryService
    "MemoryService.PutMemoryItem": Rule(
        BY_REQUEST_ID, "a repeat records another revision, or fails ETAG_MISMATCH or MEMORY_ITEM_ALREADY_EXISTS"),
    "MemoryService.GetMemoryItem": Rule(READ_ONLY, "reads only (a repeated TTL refresh is harmless)"),
    "MemoryService.DeleteMemoryItem": Rule(
        IDEMPOTENT_KIND, "with allow_missing and no etag, deleting a deleted item is a no-op; otherwise a repeat "
        "fails NOT_FOUND", lambda r: r.allow_missing and not r.etag),
    "MemoryService.BatchMemory": Rule(
        READ_ONLY, "a batch without puts or deletes reads only; one with writes would apply them again",
        lambda r: all(op.WhichOneof("op") not in ("put", "delete") for op in r.ops)),
    "MemoryService.ListMemoryNamespaces": Rule(READ_ONLY, _READ),
    "MemoryService.SearchMemoryItems": Rule(READ_ONLY, "reads only (a repeated TTL refresh is harmless)"),
    "MemoryService.GetMemoryItemHistory": Rule(READ_ONLY, _READ),
    "MemoryService.SweepExpiredMemoryItems": Rule(IDEMPOTENT_KIND, "sweeping again finds nothing more to expire"),
    "RetentionService.SetRetentionPolicy": Rule(BY_REQUEST_ID, "a repeat could undo a change made in between"),
    "RetentionService.GetRetentionPolicy": Rule(READ_ONLY, _READ),
    "RetentionService.ApplyRetention": Rule(
        IDEMPOTENT_KIND, "a repeat removes only what the policies name at that moment"),
    "RetentionService.GetUsage": Rule(READ_ONLY, _READ),
    "RetentionService.SetQuota": Rule(IDEMPOTENT_KIND, "setting the same quotas again leaves them as they are"),
    "RetentionService.GetQuota": Rule(READ_ONLY, _READ),
    # SchemaService
    "SchemaService.RegisterSchema": Rule(
        BY_KEY, "registering the same schema again (same versions, window and policy) changes nothing; with an etag a repeat fails SCHEMA_CONFLICT once the first one changed the schema", lambda r: not r.etag),
    "SchemaService.GetSchema": Rule(READ_ONLY, _READ),
    "SchemaService.ListSchemas": Rule(READ_ONLY, _READ),
    "SchemaService.MigrateThread": Rule(STREAM, "not retried as a call; calling it again resumes the migration (what is migrated is skipped)"),
    "SchemaService.MigrateNamespace": Rule(STREAM, "not retried as a call; calling it again resumes the migration (what is migrated is skipped)"),
    "ThreadService.ResumeThread": Rule(BY_REQUEST_ID, "under NEW_RUN it creates a run: a repeat would create another "
                                       "(or fail: the thread has an active run)"),
    # TransferService
    "TransferService.ExportNamespace": Rule(STREAM, "reads only; not retried as a call: a failed export is made again from the start (the helpers keep no part of it)"),
    "TransferService.ImportNamespace": Rule(STREAM, "a request stream is not replayed; a failed import wrote nothing, so it can be sent again whole"),
}

SERVICES = tuple(module.DESCRIPTOR.services_by_name[name] for module, name in (
    (threads_pb2, "ThreadService"), (admin_pb2, "AdminService"), (runs_pb2, "RunService"),
    (events_pb2, "EventService"), (artifacts_pb2, "ArtifactService"), (effects_pb2, "EffectService"),
    (conversations_pb2, "ConversationService"), (memory_pb2, "MemoryService"),
    (retention_pb2, "RetentionService"), (schemas_pb2, "SchemaService"),
    (transfer_pb2, "TransferService")))

#: The rule of each RPC by its request message's full name (one request message per RPC).
_BY_REQUEST: dict[str, Rule] = {m.input_type.full_name: RULES[f"{s.name}.{m.name}"]
                                for s in SERVICES for m in s.methods}

#: Rules added with :func:`register_idempotent`, by request message name: consulted first.
IDEMPOTENT: dict[str, Callable[[Any], bool]] = {}

_READ_PREFIXES = ("Get", "List", "Diff", "Check", "Watch")  # requests of other services (e.g. health checks)


def register_idempotent(message_name: str, predicate: Callable[[Any], bool]) -> None:
    """Declare requests of ``message_name`` for which ``predicate(request)`` is true safe to repeat."""
    IDEMPOTENT[message_name] = predicate


def _safe_as_sent(request) -> bool:
    descriptor = request.DESCRIPTOR
    extra = IDEMPOTENT.get(descriptor.name)
    if extra is not None and extra(request):
        return True
    rule = _BY_REQUEST.get(descriptor.full_name)
    if rule is None:
        return descriptor.name.startswith(_READ_PREFIXES)
    return rule.safe_as_sent(request)


def prepare(request, auto_request_ids: bool) -> bool:
    """Decide whether ``request`` may be retried; give it a request_id first when it needs one (and
    ``auto_request_ids`` is on) so that a retry after a lost reply is answered, not re-applied. A stream
    of requests (client-streaming calls such as UploadArtifact) cannot be replayed: never retried."""
    if getattr(request, "DESCRIPTOR", None) is None:
        return False
    if _safe_as_sent(request):
        return True
    if "request_id" in request.DESCRIPTOR.fields_by_name:
        if not request.request_id and auto_request_ids:
            request.request_id = f"auto-{uuid.uuid4().hex}"
        return bool(request.request_id)
    return False


# ------------------------------------------------------------------ the retry policy

#: The deadline of a call, retries included, when neither the call nor the client sets one (seconds).
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a failed call is sent again.

    Only calls that are safe to repeat are retried (see :data:`RULES`), only
    on transient failures (UNAVAILABLE, an OVERLOADED server, an ABORTED
    conflict), and never past the call's deadline (the client's ``timeout``,
    30 s by default). ``max_attempts`` counts the first try; 0 (the default)
    means "until the deadline", so a call outlives a sidecar restart. Backoff
    is exponential with jitter, capped at ``max_backoff`` seconds.
    """

    max_attempts: int = 0
    initial_backoff: float = 0.05
    max_backoff: float = 1.0
    multiplier: float = 2.0

    def backoff(self, attempt: int, jitter: float) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based); ``jitter`` in [0, 1)."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return cap * (0.5 + jitter / 2)

    def more(self, attempt: int) -> bool:
        return self.max_attempts <= 0 or attempt < self.max_attempts

    @property
    def retries(self) -> bool:
        return self.max_attempts != 1


NO_RETRY = RetryPolicy(max_attempts=1)

#: (status code, ErrorInfo reason or "" for any) of failures that may go away on their own.
TRANSIENT = {
    (grpc.StatusCode.UNAVAILABLE, ""),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED"),
    (grpc.StatusCode.ABORTED, "CONFLICT"),
}


def transient(err: AgentStateError) -> bool:
    return (err.code, "") in TRANSIENT or (err.code, err.reason) in TRANSIENT


def retry_after(err: AgentStateError) -> float:
    """The pause the server asked for (ErrorInfo "retry_after_ms" of OVERLOADED), in seconds; 0 if none."""
    try:
        return max(0.0, int(err.metadata.get("retry_after_ms", 0)) / 1000)
    except ValueError:
        return 0.0


#: Channel options of the clients' own channels: reconnect soon after the sidecar comes back. gRPC's
#: default waits 1 s after the first failed connect, then 1.6 s, 2.6 s, ... up to 2 minutes, so a client
#: could stay away for seconds after a restart that took half of one; trying every 250 ms at most costs a
#: connect() while the sidecar is down and keeps the gap after it is back short of a lease.
RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 250))
