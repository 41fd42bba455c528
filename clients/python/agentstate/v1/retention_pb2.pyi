import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LimitAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIMIT_ACTION_UNSPECIFIED: _ClassVar[LimitAction]
    LIMIT_ACTION_REFUSE: _ClassVar[LimitAction]
    LIMIT_ACTION_PRUNE: _ClassVar[LimitAction]

class RetentionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETENTION_SOURCE_UNSPECIFIED: _ClassVar[RetentionSource]
    RETENTION_SOURCE_NONE: _ClassVar[RetentionSource]
    RETENTION_SOURCE_NAMESPACE: _ClassVar[RetentionSource]
    RETENTION_SOURCE_THREAD: _ClassVar[RetentionSource]
LIMIT_ACTION_UNSPECIFIED: LimitAction
LIMIT_ACTION_REFUSE: LimitAction
LIMIT_ACTION_PRUNE: LimitAction
RETENTION_SOURCE_UNSPECIFIED: RetentionSource
RETENTION_SOURCE_NONE: RetentionSource
RETENTION_SOURCE_NAMESPACE: RetentionSource
RETENTION_SOURCE_THREAD: RetentionSource

class RetentionPolicy(_message.Message):
    __slots__ = ("keep_last", "max_age", "thin_after", "thin_interval", "delete_idle_thread_after", "max_checkpoints", "max_bytes", "on_limit", "history_channels")
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_FIELD_NUMBER: _ClassVar[int]
    THIN_AFTER_FIELD_NUMBER: _ClassVar[int]
    THIN_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    DELETE_IDLE_THREAD_AFTER_FIELD_NUMBER: _ClassVar[int]
    MAX_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ON_LIMIT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    keep_last: int
    max_age: _duration_pb2.Duration
    thin_after: _duration_pb2.Duration
    thin_interval: _duration_pb2.Duration
    delete_idle_thread_after: _duration_pb2.Duration
    max_checkpoints: int
    max_bytes: int
    on_limit: LimitAction
    history_channels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keep_last: _Optional[int] = ..., max_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., thin_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., thin_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., delete_idle_thread_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_checkpoints: _Optional[int] = ..., max_bytes: _Optional[int] = ..., on_limit: _Optional[_Union[LimitAction, str]] = ..., history_channels: _Optional[_Iterable[str]] = ...) -> None: ...

class SetRetentionPolicyRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "policy", "clear", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    policy: RetentionPolicy
    clear: bool
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., policy: _Optional[_Union[RetentionPolicy, _Mapping]] = ..., clear: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetRetentionPolicyResponse(_message.Message):
    __slots__ = ("effective", "source")
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    effective: RetentionPolicy
    source: RetentionSource
    def __init__(self, effective: _Optional[_Union[RetentionPolicy, _Mapping]] = ..., source: _Optional[_Union[RetentionSource, str]] = ...) -> None: ...

class GetRetentionPolicyRequest(_message.Message):
    __slots__ = ("namespace", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetRetentionPolicyResponse(_message.Message):
    __slots__ = ("effective", "source")
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    effective: RetentionPolicy
    source: RetentionSource
    def __init__(self, effective: _Optional[_Union[RetentionPolicy, _Mapping]] = ..., source: _Optional[_Union[RetentionSource, str]] = ...) -> None: ...

class ApplyRetentionRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "dry_run")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    dry_run: bool
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RemovedCheckpoint(_message.Message):
    __slots__ = ("thread_id", "checkpoint_ns", "checkpoint_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    def __init__(self, thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_id: _Optional[str] = ...) -> None: ...

class ApplyRetentionResponse(_message.Message):
    __slots__ = ("removed_checkpoints", "removed", "removed_truncated", "deleted_thread_ids", "kept_by_rule", "stale_threads", "jobs")
    class KeptByRuleEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    REMOVED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DELETED_THREAD_IDS_FIELD_NUMBER: _ClassVar[int]
    KEPT_BY_RULE_FIELD_NUMBER: _ClassVar[int]
    STALE_THREADS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    removed_checkpoints: int
    removed: _containers.RepeatedCompositeFieldContainer[RemovedCheckpoint]
    removed_truncated: bool
    deleted_thread_ids: _containers.RepeatedScalarFieldContainer[str]
    kept_by_rule: _containers.ScalarMap[str, int]
    stale_threads: int
    jobs: int
    def __init__(self, removed_checkpoints: _Optional[int] = ..., removed: _Optional[_Iterable[_Union[RemovedCheckpoint, _Mapping]]] = ..., removed_truncated: _Optional[bool] = ..., deleted_thread_ids: _Optional[_Iterable[str]] = ..., kept_by_rule: _Optional[_Mapping[str, int]] = ..., stale_threads: _Optional[int] = ..., jobs: _Optional[int] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("namespace", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("threads", "checkpoints", "pending_writes", "logical_bytes", "physical_bytes")
    THREADS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_WRITES_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    threads: int
    checkpoints: int
    pending_writes: int
    logical_bytes: int
    physical_bytes: int
    def __init__(self, threads: _Optional[int] = ..., checkpoints: _Optional[int] = ..., pending_writes: _Optional[int] = ..., logical_bytes: _Optional[int] = ..., physical_bytes: _Optional[int] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ("max_bytes", "max_threads", "max_items")
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_THREADS_FIELD_NUMBER: _ClassVar[int]
    MAX_ITEMS_FIELD_NUMBER: _ClassVar[int]
    max_bytes: int
    max_threads: int
    max_items: int
    def __init__(self, max_bytes: _Optional[int] = ..., max_threads: _Optional[int] = ..., max_items: _Optional[int] = ...) -> None: ...

class QuotaUsage(_message.Message):
    __slots__ = ("bytes", "threads", "items", "checkpoints")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    threads: int
    items: int
    checkpoints: int
    def __init__(self, bytes: _Optional[int] = ..., threads: _Optional[int] = ..., items: _Optional[int] = ..., checkpoints: _Optional[int] = ...) -> None: ...

class SetQuotaRequest(_message.Message):
    __slots__ = ("namespace", "quota", "clear")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    quota: Quota
    clear: bool
    def __init__(self, namespace: _Optional[str] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., clear: _Optional[bool] = ...) -> None: ...

class SetQuotaResponse(_message.Message):
    __slots__ = ("quota", "own", "usage")
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    OWN_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    quota: Quota
    own: bool
    usage: QuotaUsage
    def __init__(self, quota: _Optional[_Union[Quota, _Mapping]] = ..., own: _Optional[bool] = ..., usage: _Optional[_Union[QuotaUsage, _Mapping]] = ...) -> None: ...

class GetQuotaRequest(_message.Message):
    __slots__ = ("namespace", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetQuotaResponse(_message.Message):
    __slots__ = ("quota", "own", "usage", "thread_usage")
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    OWN_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    THREAD_USAGE_FIELD_NUMBER: _ClassVar[int]
    quota: Quota
    own: bool
    usage: QuotaUsage
    thread_usage: QuotaUsage
    def __init__(self, quota: _Optional[_Union[Quota, _Mapping]] = ..., own: _Optional[bool] = ..., usage: _Optional[_Union[QuotaUsage, _Mapping]] = ..., thread_usage: _Optional[_Union[QuotaUsage, _Mapping]] = ...) -> None: ...
