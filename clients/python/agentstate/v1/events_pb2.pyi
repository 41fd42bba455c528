import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentstate.v1 import values_pb2 as _values_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Event(_message.Message):
    __slots__ = ("namespace", "thread_id", "sequence", "run_id", "step_id", "type", "data", "client_event_id", "create_time")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLIENT_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    sequence: int
    run_id: str
    step_id: str
    type: str
    data: _values_pb2.Value
    client_event_id: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., sequence: _Optional[int] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., type: _Optional[str] = ..., data: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., client_event_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EventInput(_message.Message):
    __slots__ = ("type", "data", "client_event_id", "run_id", "step_id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLIENT_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    data: _values_pb2.Value
    client_event_id: str
    run_id: str
    step_id: str
    def __init__(self, type: _Optional[str] = ..., data: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., client_event_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ...) -> None: ...

class AppendEventsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "events", "run_id", "lease_id", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    events: _containers.RepeatedCompositeFieldContainer[EventInput]
    run_id: str
    lease_id: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[EventInput, _Mapping]]] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class AppendEventsResponse(_message.Message):
    __slots__ = ("events", "duplicates")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    duplicates: int
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., duplicates: _Optional[int] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "after_sequence", "run_id", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    after_sequence: int
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., after_sequence: _Optional[int] = ..., run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token", "last_sequence")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next_page_token: str
    last_sequence: int
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., last_sequence: _Optional[int] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "after_sequence", "run_id", "follow")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    after_sequence: int
    run_id: str
    follow: bool
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., after_sequence: _Optional[int] = ..., run_id: _Optional[str] = ..., follow: _Optional[bool] = ...) -> None: ...

class WatchEventsResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: Event
    def __init__(self, event: _Optional[_Union[Event, _Mapping]] = ...) -> None: ...
