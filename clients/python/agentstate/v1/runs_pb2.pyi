import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentstate.v1 import values_pb2 as _values_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_PENDING: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_SUCCESS: _ClassVar[RunStatus]
    RUN_STATUS_ERROR: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]
    RUN_STATUS_INTERRUPTED: _ClassVar[RunStatus]
    RUN_STATUS_TIMEOUT: _ClassVar[RunStatus]

class MultitaskStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MULTITASK_STRATEGY_UNSPECIFIED: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_REJECT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ENQUEUE: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_INTERRUPT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ROLLBACK: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_FORK: _ClassVar[MultitaskStrategy]

class LeaseExpiry(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_EXPIRY_UNSPECIFIED: _ClassVar[LeaseExpiry]
    LEASE_EXPIRY_REQUEUE: _ClassVar[LeaseExpiry]
    LEASE_EXPIRY_HOLD: _ClassVar[LeaseExpiry]

class StepKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_KIND_UNSPECIFIED: _ClassVar[StepKind]
    STEP_KIND_MODEL: _ClassVar[StepKind]
    STEP_KIND_TOOL: _ClassVar[StepKind]
    STEP_KIND_OTHER: _ClassVar[StepKind]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_PENDING: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_SUCCESS: RunStatus
RUN_STATUS_ERROR: RunStatus
RUN_STATUS_CANCELLED: RunStatus
RUN_STATUS_INTERRUPTED: RunStatus
RUN_STATUS_TIMEOUT: RunStatus
MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy
MULTITASK_STRATEGY_REJECT: MultitaskStrategy
MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy
MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy
MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy
MULTITASK_STRATEGY_FORK: MultitaskStrategy
LEASE_EXPIRY_UNSPECIFIED: LeaseExpiry
LEASE_EXPIRY_REQUEUE: LeaseExpiry
LEASE_EXPIRY_HOLD: LeaseExpiry
STEP_KIND_UNSPECIFIED: StepKind
STEP_KIND_MODEL: StepKind
STEP_KIND_TOOL: StepKind
STEP_KIND_OTHER: StepKind

class ResourceCounters(_message.Message):
    __slots__ = ("tokens_in", "tokens_out", "cost", "wall_time_ms", "requests")
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    tokens_in: int
    tokens_out: int
    cost: float
    wall_time_ms: int
    requests: int
    def __init__(self, tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., cost: _Optional[float] = ..., wall_time_ms: _Optional[int] = ..., requests: _Optional[int] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("namespace", "thread_id", "run_id", "status", "multitask_strategy", "input", "metadata", "output", "error", "active", "queue_position", "held", "checkpoint_ns", "start_checkpoint_id", "last_checkpoint_id", "attempt", "max_attempts", "on_lease_expired", "lease_timeout", "lease_expire_time", "timeout", "deadline", "budget", "usage", "create_time", "start_time", "end_time", "update_time", "branch_of", "stopped_by", "rolled_back", "etag")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    START_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ON_LEASE_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    LEASE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    BRANCH_OF_FIELD_NUMBER: _ClassVar[int]
    STOPPED_BY_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    run_id: str
    status: RunStatus
    multitask_strategy: MultitaskStrategy
    input: _values_pb2.Value
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    output: _values_pb2.Value
    error: str
    active: bool
    queue_position: int
    held: bool
    checkpoint_ns: str
    start_checkpoint_id: str
    last_checkpoint_id: str
    attempt: int
    max_attempts: int
    on_lease_expired: LeaseExpiry
    lease_timeout: _duration_pb2.Duration
    lease_expire_time: _timestamp_pb2.Timestamp
    timeout: _duration_pb2.Duration
    deadline: _timestamp_pb2.Timestamp
    budget: ResourceCounters
    usage: ResourceCounters
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    branch_of: str
    stopped_by: str
    rolled_back: bool
    etag: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., multitask_strategy: _Optional[_Union[MultitaskStrategy, str]] = ..., input: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., output: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., error: _Optional[str] = ..., active: _Optional[bool] = ..., queue_position: _Optional[int] = ..., held: _Optional[bool] = ..., checkpoint_ns: _Optional[str] = ..., start_checkpoint_id: _Optional[str] = ..., last_checkpoint_id: _Optional[str] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., on_lease_expired: _Optional[_Union[LeaseExpiry, str]] = ..., lease_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., budget: _Optional[_Union[ResourceCounters, _Mapping]] = ..., usage: _Optional[_Union[ResourceCounters, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., branch_of: _Optional[str] = ..., stopped_by: _Optional[str] = ..., rolled_back: _Optional[bool] = ..., etag: _Optional[str] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("run_id", "lease_id", "expire_time", "resume_checkpoint_id", "thread_id", "checkpoint_ns")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    RESUME_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    lease_id: str
    expire_time: _timestamp_pb2.Timestamp
    resume_checkpoint_id: str
    thread_id: str
    checkpoint_ns: str
    def __init__(self, run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resume_checkpoint_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ...) -> None: ...

class CreateRunRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "run_id", "input", "metadata", "multitask_strategy", "checkpoint_ns", "start_checkpoint_id", "claim", "create_thread", "lease_timeout", "on_lease_expired", "max_attempts", "timeout", "budget", "branch_thread_id", "request_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    START_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    CREATE_THREAD_FIELD_NUMBER: _ClassVar[int]
    LEASE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ON_LEASE_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    BRANCH_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    run_id: str
    input: _values_pb2.Value
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    multitask_strategy: MultitaskStrategy
    checkpoint_ns: str
    start_checkpoint_id: str
    claim: bool
    create_thread: bool
    lease_timeout: _duration_pb2.Duration
    on_lease_expired: LeaseExpiry
    max_attempts: int
    timeout: _duration_pb2.Duration
    budget: ResourceCounters
    branch_thread_id: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., input: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., multitask_strategy: _Optional[_Union[MultitaskStrategy, str]] = ..., checkpoint_ns: _Optional[str] = ..., start_checkpoint_id: _Optional[str] = ..., claim: _Optional[bool] = ..., create_thread: _Optional[bool] = ..., lease_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., on_lease_expired: _Optional[_Union[LeaseExpiry, str]] = ..., max_attempts: _Optional[int] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., budget: _Optional[_Union[ResourceCounters, _Mapping]] = ..., branch_thread_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateRunResponse(_message.Message):
    __slots__ = ("run", "lease", "stopped_run_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STOPPED_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run: Run
    lease: Lease
    stopped_run_id: str
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., stopped_run_id: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("namespace", "run_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "statuses", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    statuses: _containers.RepeatedScalarFieldContainer[RunStatus]
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[RunStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ClaimRunRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "thread_id", "wait_timeout", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    thread_id: str
    wait_timeout: _duration_pb2.Duration
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., wait_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ClaimRunResponse(_message.Message):
    __slots__ = ("run", "lease")
    RUN_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    run: Run
    lease: Lease
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "lease_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    lease_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("run", "lease_expire_time")
    RUN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    run: Run
    lease_expire_time: _timestamp_pb2.Timestamp
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CompleteRunRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "lease_id", "output", "interrupted", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    lease_id: str
    output: _values_pb2.Value
    interrupted: bool
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., output: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., interrupted: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class CompleteRunResponse(_message.Message):
    __slots__ = ("run", "next_run_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run: Run
    next_run_id: str
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., next_run_id: _Optional[str] = ...) -> None: ...

class FailRunRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "lease_id", "error", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    lease_id: str
    error: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., error: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class FailRunResponse(_message.Message):
    __slots__ = ("run", "next_run_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run: Run
    next_run_id: str
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., next_run_id: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "reason", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    reason: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run", "next_run_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run: Run
    next_run_id: str
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., next_run_id: _Optional[str] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResumeRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class Branch(_message.Message):
    __slots__ = ("thread_id", "branch_thread_id", "checkpoint_ns", "fork_checkpoint_id", "run_id", "head_checkpoint_id", "create_time", "promote_time")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    FORK_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    HEAD_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROMOTE_TIME_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    branch_thread_id: str
    checkpoint_ns: str
    fork_checkpoint_id: str
    run_id: str
    head_checkpoint_id: str
    create_time: _timestamp_pb2.Timestamp
    promote_time: _timestamp_pb2.Timestamp
    def __init__(self, thread_id: _Optional[str] = ..., branch_thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., fork_checkpoint_id: _Optional[str] = ..., run_id: _Optional[str] = ..., head_checkpoint_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., promote_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListBranchesRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListBranchesResponse(_message.Message):
    __slots__ = ("branches", "next_page_token")
    BRANCHES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    branches: _containers.RepeatedCompositeFieldContainer[Branch]
    next_page_token: str
    def __init__(self, branches: _Optional[_Iterable[_Union[Branch, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PromoteBranchRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "branch_thread_id", "expected_head_etag", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_HEAD_ETAG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    branch_thread_id: str
    expected_head_etag: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., branch_thread_id: _Optional[str] = ..., expected_head_etag: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class PromoteBranchResponse(_message.Message):
    __slots__ = ("checkpoint_id", "etag", "copied_checkpoints")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    COPIED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    etag: str
    copied_checkpoints: int
    def __init__(self, checkpoint_id: _Optional[str] = ..., etag: _Optional[str] = ..., copied_checkpoints: _Optional[int] = ...) -> None: ...

class StepPayload(_message.Message):
    __slots__ = ("digest", "body")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    digest: str
    body: _values_pb2.Value
    def __init__(self, digest: _Optional[str] = ..., body: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("namespace", "thread_id", "run_id", "step_id", "kind", "name", "input", "output", "error", "counters", "start_time", "end_time", "attempt")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    run_id: str
    step_id: str
    kind: StepKind
    name: str
    input: StepPayload
    output: StepPayload
    error: str
    counters: ResourceCounters
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    attempt: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., name: _Optional[str] = ..., input: _Optional[_Union[StepPayload, _Mapping]] = ..., output: _Optional[_Union[StepPayload, _Mapping]] = ..., error: _Optional[str] = ..., counters: _Optional[_Union[ResourceCounters, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ...) -> None: ...

class StepRecord(_message.Message):
    __slots__ = ("step_id", "kind", "name", "input", "output", "error", "counters", "start_time", "end_time", "open")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    step_id: str
    kind: StepKind
    name: str
    input: StepPayload
    output: StepPayload
    error: str
    counters: ResourceCounters
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    open: bool
    def __init__(self, step_id: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., name: _Optional[str] = ..., input: _Optional[_Union[StepPayload, _Mapping]] = ..., output: _Optional[_Union[StepPayload, _Mapping]] = ..., error: _Optional[str] = ..., counters: _Optional[_Union[ResourceCounters, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., open: _Optional[bool] = ...) -> None: ...

class StartStepRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "lease_id", "step", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    lease_id: str
    step: StepRecord
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., step: _Optional[_Union[StepRecord, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class StartStepResponse(_message.Message):
    __slots__ = ("step", "run_usage")
    STEP_FIELD_NUMBER: _ClassVar[int]
    RUN_USAGE_FIELD_NUMBER: _ClassVar[int]
    step: Step
    run_usage: ResourceCounters
    def __init__(self, step: _Optional[_Union[Step, _Mapping]] = ..., run_usage: _Optional[_Union[ResourceCounters, _Mapping]] = ...) -> None: ...

class EndStepRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "step_id", "output", "error", "counters", "end_time", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    step_id: str
    output: StepPayload
    error: str
    counters: ResourceCounters
    end_time: _timestamp_pb2.Timestamp
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., output: _Optional[_Union[StepPayload, _Mapping]] = ..., error: _Optional[str] = ..., counters: _Optional[_Union[ResourceCounters, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class EndStepResponse(_message.Message):
    __slots__ = ("step", "run_usage")
    STEP_FIELD_NUMBER: _ClassVar[int]
    RUN_USAGE_FIELD_NUMBER: _ClassVar[int]
    step: Step
    run_usage: ResourceCounters
    def __init__(self, step: _Optional[_Union[Step, _Mapping]] = ..., run_usage: _Optional[_Union[ResourceCounters, _Mapping]] = ...) -> None: ...

class RecordStepRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "lease_id", "step", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    lease_id: str
    step: StepRecord
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., step: _Optional[_Union[StepRecord, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class RecordStepResponse(_message.Message):
    __slots__ = ("step", "run_usage")
    STEP_FIELD_NUMBER: _ClassVar[int]
    RUN_USAGE_FIELD_NUMBER: _ClassVar[int]
    step: Step
    run_usage: ResourceCounters
    def __init__(self, step: _Optional[_Union[Step, _Mapping]] = ..., run_usage: _Optional[_Union[ResourceCounters, _Mapping]] = ...) -> None: ...

class ListStepsRequest(_message.Message):
    __slots__ = ("namespace", "run_id", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListStepsResponse(_message.Message):
    __slots__ = ("steps", "next_page_token")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    next_page_token: str
    def __init__(self, steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetThreadUsageRequest(_message.Message):
    __slots__ = ("namespace", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetThreadUsageResponse(_message.Message):
    __slots__ = ("usage", "runs", "steps")
    USAGE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    usage: ResourceCounters
    runs: int
    steps: int
    def __init__(self, usage: _Optional[_Union[ResourceCounters, _Mapping]] = ..., runs: _Optional[int] = ..., steps: _Optional[int] = ...) -> None: ...
