import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentstate.v1 import effects_pb2 as _effects_pb2
from agentstate.v1 import events_pb2 as _events_pb2
from agentstate.v1 import runs_pb2 as _runs_pb2
from agentstate.v1 import schemas_pb2 as _schemas_pb2
from agentstate.v1 import values_pb2 as _values_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Durability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABILITY_UNSPECIFIED: _ClassVar[Durability]
    DURABILITY_SYNC: _ClassVar[Durability]
    DURABILITY_PROCESS: _ClassVar[Durability]

class ThreadStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    THREAD_STATUS_UNSPECIFIED: _ClassVar[ThreadStatus]
    THREAD_STATUS_IDLE: _ClassVar[ThreadStatus]
    THREAD_STATUS_BUSY: _ClassVar[ThreadStatus]
    THREAD_STATUS_INTERRUPTED: _ClassVar[ThreadStatus]
    THREAD_STATUS_ERROR: _ClassVar[ThreadStatus]

class IfExists(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IF_EXISTS_UNSPECIFIED: _ClassVar[IfExists]
    IF_EXISTS_ERROR: _ClassVar[IfExists]
    IF_EXISTS_RETURN: _ClassVar[IfExists]
    IF_EXISTS_MERGE_METADATA: _ClassVar[IfExists]

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_KIND_UNSPECIFIED: _ClassVar[ChangeKind]
    CHANGE_KIND_ADDED: _ClassVar[ChangeKind]
    CHANGE_KIND_REMOVED: _ClassVar[ChangeKind]
    CHANGE_KIND_MODIFIED: _ClassVar[ChangeKind]
DURABILITY_UNSPECIFIED: Durability
DURABILITY_SYNC: Durability
DURABILITY_PROCESS: Durability
THREAD_STATUS_UNSPECIFIED: ThreadStatus
THREAD_STATUS_IDLE: ThreadStatus
THREAD_STATUS_BUSY: ThreadStatus
THREAD_STATUS_INTERRUPTED: ThreadStatus
THREAD_STATUS_ERROR: ThreadStatus
IF_EXISTS_UNSPECIFIED: IfExists
IF_EXISTS_ERROR: IfExists
IF_EXISTS_RETURN: IfExists
IF_EXISTS_MERGE_METADATA: IfExists
CHANGE_KIND_UNSPECIFIED: ChangeKind
CHANGE_KIND_ADDED: ChangeKind
CHANGE_KIND_REMOVED: ChangeKind
CHANGE_KIND_MODIFIED: ChangeKind

class Thread(_message.Message):
    __slots__ = ("namespace", "thread_id", "metadata", "status", "create_time", "update_time", "etag", "last_active_time")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    status: ThreadStatus
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    etag: str
    last_active_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., status: _Optional[_Union[ThreadStatus, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., last_active_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateThreadRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "metadata", "if_exists", "request_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    if_exists: IfExists
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., if_exists: _Optional[_Union[IfExists, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateThreadResponse(_message.Message):
    __slots__ = ("thread", "created")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    created: bool
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetThreadRequest(_message.Message):
    __slots__ = ("namespace", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetThreadResponse(_message.Message):
    __slots__ = ("thread",)
    THREAD_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ...) -> None: ...

class ListThreadsRequest(_message.Message):
    __slots__ = ("namespace", "metadata_filter", "page_size", "page_token")
    class MetadataFilterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    metadata_filter: _containers.MessageMap[str, _values_pb2.Value]
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., metadata_filter: _Optional[_Mapping[str, _values_pb2.Value]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListThreadsResponse(_message.Message):
    __slots__ = ("threads", "next_page_token")
    THREADS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    threads: _containers.RepeatedCompositeFieldContainer[Thread]
    next_page_token: str
    def __init__(self, threads: _Optional[_Iterable[_Union[Thread, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateThreadRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "set_metadata", "remove_metadata_keys", "replace_metadata", "etag", "request_id")
    class SetMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SET_METADATA_FIELD_NUMBER: _ClassVar[int]
    REMOVE_METADATA_KEYS_FIELD_NUMBER: _ClassVar[int]
    REPLACE_METADATA_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    set_metadata: _containers.MessageMap[str, _values_pb2.Value]
    remove_metadata_keys: _containers.RepeatedScalarFieldContainer[str]
    replace_metadata: bool
    etag: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., set_metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., remove_metadata_keys: _Optional[_Iterable[str]] = ..., replace_metadata: _Optional[bool] = ..., etag: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class UpdateThreadResponse(_message.Message):
    __slots__ = ("thread",)
    THREAD_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ...) -> None: ...

class DeleteThreadRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "allow_missing", "etag", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    allow_missing: bool
    etag: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., allow_missing: _Optional[bool] = ..., etag: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteThreadResponse(_message.Message):
    __slots__ = ("deleted_checkpoints", "deleted")
    DELETED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted_checkpoints: int
    deleted: bool
    def __init__(self, deleted_checkpoints: _Optional[int] = ..., deleted: _Optional[bool] = ...) -> None: ...

class CopyThreadRequest(_message.Message):
    __slots__ = ("namespace", "source_thread_id", "target_thread_id", "metadata", "replace_metadata", "request_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REPLACE_METADATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    source_thread_id: str
    target_thread_id: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    replace_metadata: bool
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., source_thread_id: _Optional[str] = ..., target_thread_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., replace_metadata: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class CopyThreadResponse(_message.Message):
    __slots__ = ("thread", "copied_checkpoints")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    COPIED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    copied_checkpoints: int
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., copied_checkpoints: _Optional[int] = ...) -> None: ...

class ChannelWrite(_message.Message):
    __slots__ = ("value", "delta", "keep")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    value: _values_pb2.Value
    delta: _values_pb2.ValueDelta
    keep: bool
    def __init__(self, value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., delta: _Optional[_Union[_values_pb2.ValueDelta, _Mapping]] = ..., keep: _Optional[bool] = ...) -> None: ...

class PendingWrite(_message.Message):
    __slots__ = ("task_id", "idx", "channel", "value", "task_path", "replace")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    IDX_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TASK_PATH_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    idx: int
    channel: str
    value: _values_pb2.Value
    task_path: str
    replace: bool
    def __init__(self, task_id: _Optional[str] = ..., idx: _Optional[int] = ..., channel: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., task_path: _Optional[str] = ..., replace: _Optional[bool] = ...) -> None: ...

class ChannelValue(_message.Message):
    __slots__ = ("root", "value", "delta")
    ROOT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    root: bytes
    value: _values_pb2.Value
    delta: _values_pb2.ValueDelta
    def __init__(self, root: _Optional[bytes] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., delta: _Optional[_Union[_values_pb2.ValueDelta, _Mapping]] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "metadata", "channels", "extra", "create_time", "etag", "pending_writes", "schema_version", "schema", "stored_schema_version", "migration", "migration_error", "unmigratable_checkpoint_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    class ChannelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ChannelValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ChannelValue, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    PENDING_WRITES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STORED_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    UNMIGRATABLE_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    channels: _containers.MessageMap[str, ChannelValue]
    extra: _values_pb2.Value
    create_time: _timestamp_pb2.Timestamp
    etag: str
    pending_writes: _containers.RepeatedCompositeFieldContainer[PendingWrite]
    schema_version: int
    schema: str
    stored_schema_version: int
    migration: _schemas_pb2.MigrationStatus
    migration_error: str
    unmigratable_checkpoint_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., parent_checkpoint_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., channels: _Optional[_Mapping[str, ChannelValue]] = ..., extra: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., pending_writes: _Optional[_Iterable[_Union[PendingWrite, _Mapping]]] = ..., schema_version: _Optional[int] = ..., schema: _Optional[str] = ..., stored_schema_version: _Optional[int] = ..., migration: _Optional[_Union[_schemas_pb2.MigrationStatus, str]] = ..., migration_error: _Optional[str] = ..., unmigratable_checkpoint_id: _Optional[str] = ...) -> None: ...

class PutCheckpointRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "base_checkpoint_id", "metadata", "channels", "extra", "expected_head_etag", "schema_version", "require_thread", "request_id", "run_id", "lease_id", "steps", "events", "effects", "durability", "schema")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    class ChannelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ChannelWrite
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ChannelWrite, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_HEAD_ETAG_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_THREAD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    EFFECTS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str
    base_checkpoint_id: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    channels: _containers.MessageMap[str, ChannelWrite]
    extra: _values_pb2.Value
    expected_head_etag: str
    schema_version: int
    require_thread: bool
    request_id: str
    run_id: str
    lease_id: str
    steps: _containers.RepeatedCompositeFieldContainer[_runs_pb2.StepRecord]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.EventInput]
    effects: _containers.RepeatedCompositeFieldContainer[_effects_pb2.EffectCompletion]
    durability: Durability
    schema: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., parent_checkpoint_id: _Optional[str] = ..., base_checkpoint_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., channels: _Optional[_Mapping[str, ChannelWrite]] = ..., extra: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., expected_head_etag: _Optional[str] = ..., schema_version: _Optional[int] = ..., require_thread: _Optional[bool] = ..., request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[_runs_pb2.StepRecord, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.EventInput, _Mapping]]] = ..., effects: _Optional[_Iterable[_Union[_effects_pb2.EffectCompletion, _Mapping]]] = ..., durability: _Optional[_Union[Durability, str]] = ..., schema: _Optional[str] = ...) -> None: ...

class PutCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "created", "steps", "events", "effects", "lease_expire_time")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    EFFECTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    created: bool
    steps: _containers.RepeatedCompositeFieldContainer[_runs_pb2.Step]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.Event]
    effects: _containers.RepeatedCompositeFieldContainer[_effects_pb2.Effect]
    lease_expire_time: _timestamp_pb2.Timestamp
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., created: _Optional[bool] = ..., steps: _Optional[_Iterable[_Union[_runs_pb2.Step, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.Event, _Mapping]]] = ..., effects: _Optional[_Iterable[_Union[_effects_pb2.Effect, _Mapping]]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PutWritesRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "checkpoint_id", "writes", "request_id", "run_id", "lease_id", "durability")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    writes: _containers.RepeatedCompositeFieldContainer[PendingWrite]
    request_id: str
    run_id: str
    lease_id: str
    durability: Durability
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., writes: _Optional[_Iterable[_Union[PendingWrite, _Mapping]]] = ..., request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., durability: _Optional[_Union[Durability, str]] = ...) -> None: ...

class PutWritesResponse(_message.Message):
    __slots__ = ("stored", "kept")
    STORED_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    stored: int
    kept: int
    def __init__(self, stored: _Optional[int] = ..., kept: _Optional[int] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "checkpoint_id", "channels", "omit_values", "known_roots", "include_pending_writes", "read_schema_version")
    class KnownRootsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    OMIT_VALUES_FIELD_NUMBER: _ClassVar[int]
    KNOWN_ROOTS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PENDING_WRITES_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    channels: _containers.RepeatedScalarFieldContainer[str]
    omit_values: bool
    known_roots: _containers.ScalarMap[str, bytes]
    include_pending_writes: bool
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., channels: _Optional[_Iterable[str]] = ..., omit_values: _Optional[bool] = ..., known_roots: _Optional[_Mapping[str, bytes]] = ..., include_pending_writes: _Optional[bool] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class GetCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "metadata_filter", "before_checkpoint_id", "limit", "page_size", "page_token", "include_values", "include_pending_writes", "known_roots", "read_schema_version")
    class MetadataFilterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    class KnownRootsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FILTER_FIELD_NUMBER: _ClassVar[int]
    BEFORE_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VALUES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PENDING_WRITES_FIELD_NUMBER: _ClassVar[int]
    KNOWN_ROOTS_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    metadata_filter: _containers.MessageMap[str, _values_pb2.Value]
    before_checkpoint_id: str
    limit: int
    page_size: int
    page_token: str
    include_values: bool
    include_pending_writes: bool
    known_roots: _containers.ScalarMap[str, bytes]
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., metadata_filter: _Optional[_Mapping[str, _values_pb2.Value]] = ..., before_checkpoint_id: _Optional[str] = ..., limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_values: _Optional[bool] = ..., include_pending_writes: _Optional[bool] = ..., known_roots: _Optional[_Mapping[str, bytes]] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints", "next_page_token")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    next_page_token: str
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PruneCheckpointsRequest(_message.Message):
    __slots__ = ("namespace", "thread_ids", "checkpoint_ns", "keep_latest", "older_than", "delete_all", "request_id", "history_channels")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_IDS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    KEEP_LATEST_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_FIELD_NUMBER: _ClassVar[int]
    DELETE_ALL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HISTORY_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_ids: _containers.RepeatedScalarFieldContainer[str]
    checkpoint_ns: str
    keep_latest: int
    older_than: _timestamp_pb2.Timestamp
    delete_all: bool
    request_id: str
    history_channels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, namespace: _Optional[str] = ..., thread_ids: _Optional[_Iterable[str]] = ..., checkpoint_ns: _Optional[str] = ..., keep_latest: _Optional[int] = ..., older_than: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delete_all: _Optional[bool] = ..., request_id: _Optional[str] = ..., history_channels: _Optional[_Iterable[str]] = ...) -> None: ...

class PruneCheckpointsResponse(_message.Message):
    __slots__ = ("deleted_checkpoints",)
    DELETED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    deleted_checkpoints: int
    def __init__(self, deleted_checkpoints: _Optional[int] = ...) -> None: ...

class DeleteCheckpointsForRunsRequest(_message.Message):
    __slots__ = ("namespace", "run_ids", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_ids: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteCheckpointsForRunsResponse(_message.Message):
    __slots__ = ("deleted_checkpoints",)
    DELETED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    deleted_checkpoints: int
    def __init__(self, deleted_checkpoints: _Optional[int] = ...) -> None: ...

class DiffCheckpointsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "from_checkpoint_id", "to_checkpoint_id", "read_schema_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    FROM_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TO_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    from_checkpoint_id: str
    to_checkpoint_id: str
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., from_checkpoint_id: _Optional[str] = ..., to_checkpoint_id: _Optional[str] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class ChannelChange(_message.Message):
    __slots__ = ("channel", "kind", "from_root", "to_root", "lists", "from_length", "to_length", "common_prefix", "appended")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FROM_ROOT_FIELD_NUMBER: _ClassVar[int]
    TO_ROOT_FIELD_NUMBER: _ClassVar[int]
    LISTS_FIELD_NUMBER: _ClassVar[int]
    FROM_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TO_LENGTH_FIELD_NUMBER: _ClassVar[int]
    COMMON_PREFIX_FIELD_NUMBER: _ClassVar[int]
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    channel: str
    kind: ChangeKind
    from_root: bytes
    to_root: bytes
    lists: bool
    from_length: int
    to_length: int
    common_prefix: int
    appended: bool
    def __init__(self, channel: _Optional[str] = ..., kind: _Optional[_Union[ChangeKind, str]] = ..., from_root: _Optional[bytes] = ..., to_root: _Optional[bytes] = ..., lists: _Optional[bool] = ..., from_length: _Optional[int] = ..., to_length: _Optional[int] = ..., common_prefix: _Optional[int] = ..., appended: _Optional[bool] = ...) -> None: ...

class DiffCheckpointsResponse(_message.Message):
    __slots__ = ("changes", "migration", "migration_error", "from_schema_version", "to_schema_version")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    FROM_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[ChannelChange]
    migration: _schemas_pb2.MigrationStatus
    migration_error: str
    from_schema_version: int
    to_schema_version: int
    def __init__(self, changes: _Optional[_Iterable[_Union[ChannelChange, _Mapping]]] = ..., migration: _Optional[_Union[_schemas_pb2.MigrationStatus, str]] = ..., migration_error: _Optional[str] = ..., from_schema_version: _Optional[int] = ..., to_schema_version: _Optional[int] = ...) -> None: ...

class GetChannelHistoryRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "checkpoint_id", "channels", "max_depth", "known_roots", "read_schema_version")
    class KnownRootsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    KNOWN_ROOTS_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    channels: _containers.RepeatedScalarFieldContainer[str]
    max_depth: int
    known_roots: _containers.ScalarMap[str, bytes]
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., channels: _Optional[_Iterable[str]] = ..., max_depth: _Optional[int] = ..., known_roots: _Optional[_Mapping[str, bytes]] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class ChannelHistory(_message.Message):
    __slots__ = ("channel", "writes", "seed", "seed_checkpoint_id", "migration", "migration_error")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SEED_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    channel: str
    writes: _containers.RepeatedCompositeFieldContainer[PendingWrite]
    seed: ChannelValue
    seed_checkpoint_id: str
    migration: _schemas_pb2.MigrationStatus
    migration_error: str
    def __init__(self, channel: _Optional[str] = ..., writes: _Optional[_Iterable[_Union[PendingWrite, _Mapping]]] = ..., seed: _Optional[_Union[ChannelValue, _Mapping]] = ..., seed_checkpoint_id: _Optional[str] = ..., migration: _Optional[_Union[_schemas_pb2.MigrationStatus, str]] = ..., migration_error: _Optional[str] = ...) -> None: ...

class GetChannelHistoryResponse(_message.Message):
    __slots__ = ("checkpoint_id", "channels", "depth")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    channels: _containers.RepeatedCompositeFieldContainer[ChannelHistory]
    depth: int
    def __init__(self, checkpoint_id: _Optional[str] = ..., channels: _Optional[_Iterable[_Union[ChannelHistory, _Mapping]]] = ..., depth: _Optional[int] = ...) -> None: ...

class BatchedWrite(_message.Message):
    __slots__ = ("put_checkpoint", "put_writes")
    PUT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PUT_WRITES_FIELD_NUMBER: _ClassVar[int]
    put_checkpoint: PutCheckpointRequest
    put_writes: PutWritesRequest
    def __init__(self, put_checkpoint: _Optional[_Union[PutCheckpointRequest, _Mapping]] = ..., put_writes: _Optional[_Union[PutWritesRequest, _Mapping]] = ...) -> None: ...

class BatchWriteRequest(_message.Message):
    __slots__ = ("namespace", "writes", "request_id", "durability")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    writes: _containers.RepeatedCompositeFieldContainer[BatchedWrite]
    request_id: str
    durability: Durability
    def __init__(self, namespace: _Optional[str] = ..., writes: _Optional[_Iterable[_Union[BatchedWrite, _Mapping]]] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[Durability, str]] = ...) -> None: ...

class BatchedWriteResult(_message.Message):
    __slots__ = ("put_checkpoint", "put_writes")
    PUT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PUT_WRITES_FIELD_NUMBER: _ClassVar[int]
    put_checkpoint: PutCheckpointResponse
    put_writes: PutWritesResponse
    def __init__(self, put_checkpoint: _Optional[_Union[PutCheckpointResponse, _Mapping]] = ..., put_writes: _Optional[_Union[PutWritesResponse, _Mapping]] = ...) -> None: ...

class BatchWriteResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchedWriteResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BatchedWriteResult, _Mapping]]] = ...) -> None: ...

class StreamedWrite(_message.Message):
    __slots__ = ("seq", "put_checkpoint", "put_writes")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PUT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PUT_WRITES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    put_checkpoint: PutCheckpointRequest
    put_writes: PutWritesRequest
    def __init__(self, seq: _Optional[int] = ..., put_checkpoint: _Optional[_Union[PutCheckpointRequest, _Mapping]] = ..., put_writes: _Optional[_Union[PutWritesRequest, _Mapping]] = ...) -> None: ...

class StreamWritesRequest(_message.Message):
    __slots__ = ("writes",)
    WRITES_FIELD_NUMBER: _ClassVar[int]
    writes: _containers.RepeatedCompositeFieldContainer[StreamedWrite]
    def __init__(self, writes: _Optional[_Iterable[_Union[StreamedWrite, _Mapping]]] = ...) -> None: ...

class WriteError(_message.Message):
    __slots__ = ("code", "message", "reason", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WriteAck(_message.Message):
    __slots__ = ("seq", "put_checkpoint", "put_writes", "error")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PUT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PUT_WRITES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    seq: int
    put_checkpoint: PutCheckpointResponse
    put_writes: PutWritesResponse
    error: WriteError
    def __init__(self, seq: _Optional[int] = ..., put_checkpoint: _Optional[_Union[PutCheckpointResponse, _Mapping]] = ..., put_writes: _Optional[_Union[PutWritesResponse, _Mapping]] = ..., error: _Optional[_Union[WriteError, _Mapping]] = ...) -> None: ...

class StreamWritesResponse(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[WriteAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[WriteAck, _Mapping]]] = ...) -> None: ...

class ResumeThreadRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "checkpoint_ns", "read_schema_version", "run", "include_pending_writes", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PENDING_WRITES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    checkpoint_ns: str
    read_schema_version: int
    run: _runs_pb2.CreateRunRequest
    include_pending_writes: bool
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., read_schema_version: _Optional[int] = ..., run: _Optional[_Union[_runs_pb2.CreateRunRequest, _Mapping]] = ..., include_pending_writes: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResumeThreadResponse(_message.Message):
    __slots__ = ("checkpoint", "run")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    run: _runs_pb2.CreateRunResponse
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., run: _Optional[_Union[_runs_pb2.CreateRunResponse, _Mapping]] = ...) -> None: ...
