"""errors: the one table of error reasons, their gRPC codes, and how they go on the wire.

Every failure the sidecar reports is an :class:`ApiError`. It becomes a gRPC
status with one ``google.rpc.ErrorInfo`` (domain ``agentstate.v1``) whose reason
is a name from ``agentstate.v1.ErrorReason`` (proto/agentstate/v1/errors.proto).
"""
from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "agentstate.v1"
#: Status messages and ErrorInfo metadata values echo requests (map keys in field paths, etags);
#: they are cut to these many UTF-8 bytes so the trailers stay well under gRPC's 8 KiB limit.
MAX_MESSAGE_BYTES = 512
MAX_METADATA_VALUE_BYTES = 512

#: reason -> gRPC status code. Keep in step with errors.proto.
REASONS: dict[str, grpc.StatusCode] = {
    "INVALID_FIELD": grpc.StatusCode.INVALID_ARGUMENT,
    "UNSUPPORTED_VALUE": grpc.StatusCode.INVALID_ARGUMENT,
    "THREAD_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "CHECKPOINT_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "THREAD_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "ETAG_MISMATCH": grpc.StatusCode.FAILED_PRECONDITION,
    "BASE_MISMATCH": grpc.StatusCode.FAILED_PRECONDITION,
    "LIMIT_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "REQUEST_ID_REUSED": grpc.StatusCode.INVALID_ARGUMENT,
    "STORAGE_FULL": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "OVERLOADED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "SHUTTING_DOWN": grpc.StatusCode.UNAVAILABLE,
    "CONFLICT": grpc.StatusCode.ABORTED,
    "INTERNAL_ERROR": grpc.StatusCode.INTERNAL,
    "RUN_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "RUN_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "THREAD_BUSY": grpc.StatusCode.FAILED_PRECONDITION,
    "RUN_NOT_ACTIVE": grpc.StatusCode.FAILED_PRECONDITION,
    "LEASE_LOST": grpc.StatusCode.FAILED_PRECONDITION,
    "BUDGET_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "STEP_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "STEP_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "STEP_ENDED": grpc.StatusCode.FAILED_PRECONDITION,
    "ARTIFACT_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "EFFECT_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "EFFECT_IN_PROGRESS": grpc.StatusCode.ABORTED,
    "EFFECT_TOKEN_STALE": grpc.StatusCode.FAILED_PRECONDITION,
    "EFFECT_KEY_REUSED": grpc.StatusCode.FAILED_PRECONDITION,
    # 29-36: conversations (api/conversations.py, compactions.py, assembly.py)
    "ITEM_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "SEQUENCE_MISMATCH": grpc.StatusCode.FAILED_PRECONDITION,
    "SESSION_CLOSED": grpc.StatusCode.FAILED_PRECONDITION,
    "SUMMARY_STALE": grpc.StatusCode.FAILED_PRECONDITION,
    "COMPACTION_DONE": grpc.StatusCode.FAILED_PRECONDITION,
    "SUMMARY_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "PINNED_ITEM_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "CONTEXT_BUDGET_TOO_SMALL": grpc.StatusCode.FAILED_PRECONDITION,
    # 37-43: memory (api/memory.py)
    "MEMORY_ITEM_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "MEMORY_ITEM_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "INVALID_FILTER": grpc.StatusCode.INVALID_ARGUMENT,
    "FILTER_EVALUATION_ERROR": grpc.StatusCode.INVALID_ARGUMENT,
    "VECTOR_DIMENSION_MISMATCH": grpc.StatusCode.INVALID_ARGUMENT,
    "VECTOR_INVALID": grpc.StatusCode.INVALID_ARGUMENT,
    "VECTOR_SPACE_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    # 50-59: authentication and authorization (api/auth.py), storage faults
    "AUTH_REQUIRED": grpc.StatusCode.UNAUTHENTICATED,
    "AUTH_INVALID": grpc.StatusCode.UNAUTHENTICATED,
    "NAMESPACE_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "ROLE_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "STORAGE_IO_ERROR": grpc.StatusCode.UNAVAILABLE,
    # 55-59: export and import (ops/transfer.py, docs/export-format.md)
    "EXPORT_FILE_INVALID": grpc.StatusCode.INVALID_ARGUMENT,
    "EXPORT_VERSION_UNSUPPORTED": grpc.StatusCode.FAILED_PRECONDITION,
    "IMPORT_THREAD_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "IMPORT_CONFLICT": grpc.StatusCode.ALREADY_EXISTS,
    # 65-69: retention (api/retention.py, docs/lifecycle.md "Retention")
    "RETENTION_LIMIT_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "RETENTION_POLICY_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    # 60-64: schema versions and migrations (api/schemas.py)
    "SCHEMA_MIGRATION_FAILED": grpc.StatusCode.FAILED_PRECONDITION,
    "SCHEMA_VERSION_UNREADABLE": grpc.StatusCode.FAILED_PRECONDITION,
    "SCHEMA_CONFLICT": grpc.StatusCode.FAILED_PRECONDITION,
    "SCHEMA_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    # 75-79: resource limits and fairness (api/callguard.py)
    "TOO_MANY_CALLS": grpc.StatusCode.RESOURCE_EXHAUSTED,
    # 76-79: namespace quotas (storage/usage.py, api/quotas.py)
    "QUOTA_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    # 70-74: encryption at rest (storage/encryption.py)
    "ENCRYPTION_KEY_MISSING": grpc.StatusCode.FAILED_PRECONDITION,
    "ENCRYPTED_RECORD_INVALID": grpc.StatusCode.DATA_LOSS,
    # 59, 80-81: export and import of encrypted namespaces, online transfer (api/transfer.py)
    "EXPORT_PLAINTEXT_REFUSED": grpc.StatusCode.FAILED_PRECONDITION,
    "IMPORT_PLAINTEXT_REFUSED": grpc.StatusCode.FAILED_PRECONDITION,
}


class ApiError(Exception):
    """A failure to report to the client: reason (see REASONS), message and metadata."""

    def __init__(self, reason: str, message: str, **metadata: object) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown error reason {reason}")
        message = _cut(message, MAX_MESSAGE_BYTES)
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.metadata = {k: _cut(str(v), MAX_METADATA_VALUE_BYTES) for k, v in metadata.items() if v is not None}

    @property
    def code(self) -> grpc.StatusCode:
        return REASONS[self.reason]

    def to_status(self) -> status_pb2.Status:
        info = error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN, metadata=self.metadata)
        detail = any_pb2.Any()
        detail.Pack(info)
        return status_pb2.Status(code=self.code.value[0], message=self.message, details=[detail])

    def __repr__(self) -> str:
        return f"ApiError({self.reason}, {self.message!r}, {self.metadata})"


def _cut(text: str, limit: int) -> str:
    raw = text.encode(errors="replace")
    if len(raw) <= limit:
        return text
    return raw[:limit - 3].decode(errors="ignore") + "\u2026"


def invalid(field: str, message: str) -> ApiError:
    """INVALID_ARGUMENT naming the request field at fault."""
    return ApiError("INVALID_FIELD", f"{field}: {message}", field=field)


def unsupported_value(field: str, message: str) -> ApiError:
    return ApiError("UNSUPPORTED_VALUE", f"{field}: {message}", field=field)


def limit(name: str, message: str, field: str | None = None) -> ApiError:
    return ApiError("LIMIT_EXCEEDED", message, limit=name, field=field)


def thread_not_found(namespace: str, thread_id: str, field: str = "thread_id") -> ApiError:
    return ApiError("THREAD_NOT_FOUND", f"thread {thread_id!r} not found in namespace {namespace!r}",
                    thread_id=thread_id, field=field)


def checkpoint_not_found(thread_id: str, checkpoint_ns: str, checkpoint_id: str, field: str = "checkpoint_id") -> ApiError:
    what = f"checkpoint {checkpoint_id!r}" if checkpoint_id else "no checkpoint"
    return ApiError("CHECKPOINT_NOT_FOUND",
                    f"{what} in thread {thread_id!r} (checkpoint_ns {checkpoint_ns!r})",
                    thread_id=thread_id, checkpoint_id=checkpoint_id or None, field=field)


def run_not_found(namespace: str, run_id: str, field: str = "run_id") -> ApiError:
    return ApiError("RUN_NOT_FOUND", f"run {run_id!r} not found in namespace {namespace!r}", run_id=run_id,
                    field=field)
