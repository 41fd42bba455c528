from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    INVALID_FIELD: _ClassVar[ErrorReason]
    UNSUPPORTED_VALUE: _ClassVar[ErrorReason]
    THREAD_NOT_FOUND: _ClassVar[ErrorReason]
    CHECKPOINT_NOT_FOUND: _ClassVar[ErrorReason]
    THREAD_ALREADY_EXISTS: _ClassVar[ErrorReason]
    ETAG_MISMATCH: _ClassVar[ErrorReason]
    BASE_MISMATCH: _ClassVar[ErrorReason]
    LIMIT_EXCEEDED: _ClassVar[ErrorReason]
    REQUEST_ID_REUSED: _ClassVar[ErrorReason]
    STORAGE_FULL: _ClassVar[ErrorReason]
    OVERLOADED: _ClassVar[ErrorReason]
    SHUTTING_DOWN: _ClassVar[ErrorReason]
    CONFLICT: _ClassVar[ErrorReason]
    INTERNAL_ERROR: _ClassVar[ErrorReason]
    RUN_NOT_FOUND: _ClassVar[ErrorReason]
    RUN_ALREADY_EXISTS: _ClassVar[ErrorReason]
    THREAD_BUSY: _ClassVar[ErrorReason]
    RUN_NOT_ACTIVE: _ClassVar[ErrorReason]
    LEASE_LOST: _ClassVar[ErrorReason]
    BUDGET_EXCEEDED: _ClassVar[ErrorReason]
    STEP_NOT_FOUND: _ClassVar[ErrorReason]
    STEP_ALREADY_EXISTS: _ClassVar[ErrorReason]
    STEP_ENDED: _ClassVar[ErrorReason]
    ARTIFACT_NOT_FOUND: _ClassVar[ErrorReason]
    EFFECT_NOT_FOUND: _ClassVar[ErrorReason]
    EFFECT_IN_PROGRESS: _ClassVar[ErrorReason]
    EFFECT_TOKEN_STALE: _ClassVar[ErrorReason]
    EFFECT_KEY_REUSED: _ClassVar[ErrorReason]
    AUTH_REQUIRED: _ClassVar[ErrorReason]
    AUTH_INVALID: _ClassVar[ErrorReason]
    NAMESPACE_DENIED: _ClassVar[ErrorReason]
    ROLE_DENIED: _ClassVar[ErrorReason]
    STORAGE_IO_ERROR: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
INVALID_FIELD: ErrorReason
UNSUPPORTED_VALUE: ErrorReason
THREAD_NOT_FOUND: ErrorReason
CHECKPOINT_NOT_FOUND: ErrorReason
THREAD_ALREADY_EXISTS: ErrorReason
ETAG_MISMATCH: ErrorReason
BASE_MISMATCH: ErrorReason
LIMIT_EXCEEDED: ErrorReason
REQUEST_ID_REUSED: ErrorReason
STORAGE_FULL: ErrorReason
OVERLOADED: ErrorReason
SHUTTING_DOWN: ErrorReason
CONFLICT: ErrorReason
INTERNAL_ERROR: ErrorReason
RUN_NOT_FOUND: ErrorReason
RUN_ALREADY_EXISTS: ErrorReason
THREAD_BUSY: ErrorReason
RUN_NOT_ACTIVE: ErrorReason
LEASE_LOST: ErrorReason
BUDGET_EXCEEDED: ErrorReason
STEP_NOT_FOUND: ErrorReason
STEP_ALREADY_EXISTS: ErrorReason
STEP_ENDED: ErrorReason
ARTIFACT_NOT_FOUND: ErrorReason
EFFECT_NOT_FOUND: ErrorReason
EFFECT_IN_PROGRESS: ErrorReason
EFFECT_TOKEN_STALE: ErrorReason
EFFECT_KEY_REUSED: ErrorReason
AUTH_REQUIRED: ErrorReason
AUTH_INVALID: ErrorReason
NAMESPACE_DENIED: ErrorReason
ROLE_DENIED: ErrorReason
STORAGE_IO_ERROR: ErrorReason
