"""errors: exceptions the client raises, mapped from gRPC status codes and ErrorInfo reasons."""
from __future__ import annotations

import grpc

try:
    from google.rpc import error_details_pb2, status_pb2
except ImportError:  # pragma: no cover - googleapis-common-protos is a dependency
    error_details_pb2 = status_pb2 = None


class AgentStateError(Exception):
    """A call failed. ``code`` is the gRPC status code, ``reason`` the agentstate ErrorReason name,
    ``metadata`` the ErrorInfo metadata (e.g. "field", "limit", "current_etag")."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str = "", metadata: dict | None = None):
        super().__init__(f"{code.name}: {message}" + (f" [{reason}]" if reason else ""))
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})

    @property
    def field(self) -> str | None:
        return self.metadata.get("field")


class InvalidArgument(AgentStateError): ...
class NotFound(AgentStateError): ...
class AlreadyExists(AgentStateError): ...
class FailedPrecondition(AgentStateError): ...
class ResourceExhausted(AgentStateError): ...
class Aborted(AgentStateError): ...
class Unavailable(AgentStateError): ...
class DeadlineExceeded(AgentStateError): ...
class Internal(AgentStateError): ...
class Unauthenticated(AgentStateError): ...
class PermissionDenied(AgentStateError): ...
class DataLoss(AgentStateError): ...


class LeaseExpired(DeadlineExceeded):
    """A held run's lease ran out on the holder's clock before a heartbeat got through (the sidecar was
    unreachable for a whole lease timeout): the run is lost to this holder. Raised by the client, not sent
    by the server; ``__cause__`` is the last failure."""

    def __init__(self, message: str) -> None:
        super().__init__(grpc.StatusCode.DEADLINE_EXCEEDED, message)


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.DATA_LOSS: DataLoss,
}


def from_rpc_error(e: grpc.RpcError) -> AgentStateError:
    """Turn a grpc.RpcError (sync or aio) into the matching AgentStateError."""
    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
    message = e.details() if callable(getattr(e, "details", None)) else str(e)
    reason, metadata = "", {}
    trailing = e.trailing_metadata() if callable(getattr(e, "trailing_metadata", None)) else None
    for key, value in trailing or ():
        if key == "grpc-status-details-bin" and status_pb2 is not None:
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    reason, metadata = info.reason, dict(info.metadata)
    cls = _BY_CODE.get(code, AgentStateError)
    return cls(code, message or "", reason, metadata)
