import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentstate.v1 import values_pb2 as _values_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EffectState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EFFECT_STATE_UNSPECIFIED: _ClassVar[EffectState]
    EFFECT_STATE_PENDING: _ClassVar[EffectState]
    EFFECT_STATE_DONE: _ClassVar[EffectState]
    EFFECT_STATE_FAILED: _ClassVar[EffectState]
    EFFECT_STATE_UNKNOWN: _ClassVar[EffectState]
EFFECT_STATE_UNSPECIFIED: EffectState
EFFECT_STATE_PENDING: EffectState
EFFECT_STATE_DONE: EffectState
EFFECT_STATE_FAILED: EffectState
EFFECT_STATE_UNKNOWN: EffectState

class Effect(_message.Message):
    __slots__ = ("namespace", "idempotency_key", "state", "thread_id", "run_id", "step_id", "description", "request_digest", "outcome", "error", "retryable", "begins", "create_time", "update_time", "complete_time")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    BEGINS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    idempotency_key: str
    state: EffectState
    thread_id: str
    run_id: str
    step_id: str
    description: str
    request_digest: str
    outcome: _values_pb2.Value
    error: str
    retryable: bool
    begins: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    complete_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., state: _Optional[_Union[EffectState, str]] = ..., thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., description: _Optional[str] = ..., request_digest: _Optional[str] = ..., outcome: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ..., begins: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class BeginEffectRequest(_message.Message):
    __slots__ = ("namespace", "idempotency_key", "run_id", "lease_id", "step_id", "description", "request_digest")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    idempotency_key: str
    run_id: str
    lease_id: str
    step_id: str
    description: str
    request_digest: str
    def __init__(self, namespace: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., step_id: _Optional[str] = ..., description: _Optional[str] = ..., request_digest: _Optional[str] = ...) -> None: ...

class BeginEffectResponse(_message.Message):
    __slots__ = ("effect", "token")
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    effect: Effect
    token: str
    def __init__(self, effect: _Optional[_Union[Effect, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class EffectCompletion(_message.Message):
    __slots__ = ("idempotency_key", "token", "outcome", "failed", "error", "retryable")
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    token: str
    outcome: _values_pb2.Value
    failed: bool
    error: str
    retryable: bool
    def __init__(self, idempotency_key: _Optional[str] = ..., token: _Optional[str] = ..., outcome: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., failed: _Optional[bool] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class CompleteEffectRequest(_message.Message):
    __slots__ = ("namespace", "idempotency_key", "token", "outcome")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    idempotency_key: str
    token: str
    outcome: _values_pb2.Value
    def __init__(self, namespace: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., token: _Optional[str] = ..., outcome: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...

class CompleteEffectResponse(_message.Message):
    __slots__ = ("effect",)
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    effect: Effect
    def __init__(self, effect: _Optional[_Union[Effect, _Mapping]] = ...) -> None: ...

class FailEffectRequest(_message.Message):
    __slots__ = ("namespace", "idempotency_key", "token", "error", "retryable")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    idempotency_key: str
    token: str
    error: str
    retryable: bool
    def __init__(self, namespace: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., token: _Optional[str] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class FailEffectResponse(_message.Message):
    __slots__ = ("effect",)
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    effect: Effect
    def __init__(self, effect: _Optional[_Union[Effect, _Mapping]] = ...) -> None: ...

class GetEffectRequest(_message.Message):
    __slots__ = ("namespace", "idempotency_key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    idempotency_key: str
    def __init__(self, namespace: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class GetEffectResponse(_message.Message):
    __slots__ = ("effect",)
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    effect: Effect
    def __init__(self, effect: _Optional[_Union[Effect, _Mapping]] = ...) -> None: ...

class ListEffectsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "run_id", "states", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    run_id: str
    states: _containers.RepeatedScalarFieldContainer[EffectState]
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., states: _Optional[_Iterable[_Union[EffectState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEffectsResponse(_message.Message):
    __slots__ = ("effects", "next_page_token")
    EFFECTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    effects: _containers.RepeatedCompositeFieldContainer[Effect]
    next_page_token: str
    def __init__(self, effects: _Optional[_Iterable[_Union[Effect, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
