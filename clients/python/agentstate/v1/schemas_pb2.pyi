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

class FailurePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_POLICY_UNSPECIFIED: _ClassVar[FailurePolicy]
    FAILURE_POLICY_FAIL: _ClassVar[FailurePolicy]
    FAILURE_POLICY_DEGRADE: _ClassVar[FailurePolicy]
    FAILURE_POLICY_NEW_RUN: _ClassVar[FailurePolicy]

class MigrationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MIGRATION_STATUS_UNSPECIFIED: _ClassVar[MigrationStatus]
    MIGRATION_STATUS_CURRENT: _ClassVar[MigrationStatus]
    MIGRATION_STATUS_MIGRATED: _ClassVar[MigrationStatus]
    MIGRATION_STATUS_DEGRADED: _ClassVar[MigrationStatus]
    MIGRATION_STATUS_NEW_RUN: _ClassVar[MigrationStatus]
    MIGRATION_STATUS_UNREGISTERED: _ClassVar[MigrationStatus]

class ValueType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VALUE_TYPE_UNSPECIFIED: _ClassVar[ValueType]
    VALUE_TYPE_STRING: _ClassVar[ValueType]
    VALUE_TYPE_INT: _ClassVar[ValueType]
    VALUE_TYPE_FLOAT: _ClassVar[ValueType]
    VALUE_TYPE_BOOL: _ClassVar[ValueType]
    VALUE_TYPE_LIST: _ClassVar[ValueType]
FAILURE_POLICY_UNSPECIFIED: FailurePolicy
FAILURE_POLICY_FAIL: FailurePolicy
FAILURE_POLICY_DEGRADE: FailurePolicy
FAILURE_POLICY_NEW_RUN: FailurePolicy
MIGRATION_STATUS_UNSPECIFIED: MigrationStatus
MIGRATION_STATUS_CURRENT: MigrationStatus
MIGRATION_STATUS_MIGRATED: MigrationStatus
MIGRATION_STATUS_DEGRADED: MigrationStatus
MIGRATION_STATUS_NEW_RUN: MigrationStatus
MIGRATION_STATUS_UNREGISTERED: MigrationStatus
VALUE_TYPE_UNSPECIFIED: ValueType
VALUE_TYPE_STRING: ValueType
VALUE_TYPE_INT: ValueType
VALUE_TYPE_FLOAT: ValueType
VALUE_TYPE_BOOL: ValueType
VALUE_TYPE_LIST: ValueType

class RenameField(_message.Message):
    __slots__ = ("path", "to")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    to: str
    def __init__(self, path: _Optional[_Iterable[str]] = ..., to: _Optional[str] = ...) -> None: ...

class DropField(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, path: _Optional[_Iterable[str]] = ...) -> None: ...

class AddField(_message.Message):
    __slots__ = ("path", "default")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    default: _values_pb2.Value
    def __init__(self, path: _Optional[_Iterable[str]] = ..., default: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...

class NestFields(_message.Message):
    __slots__ = ("path", "fields", "into")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    INTO_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    fields: _containers.RepeatedScalarFieldContainer[str]
    into: str
    def __init__(self, path: _Optional[_Iterable[str]] = ..., fields: _Optional[_Iterable[str]] = ..., into: _Optional[str] = ...) -> None: ...

class UnnestFields(_message.Message):
    __slots__ = ("path", "fields")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, path: _Optional[_Iterable[str]] = ..., fields: _Optional[_Iterable[str]] = ..., **kwargs) -> None: ...

class ConvertField(_message.Message):
    __slots__ = ("path", "to")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    to: ValueType
    def __init__(self, path: _Optional[_Iterable[str]] = ..., to: _Optional[_Union[ValueType, str]] = ...) -> None: ...

class MapItems(_message.Message):
    __slots__ = ("path", "steps")
    PATH_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    steps: _containers.RepeatedCompositeFieldContainer[MigrationStep]
    def __init__(self, path: _Optional[_Iterable[str]] = ..., steps: _Optional[_Iterable[_Union[MigrationStep, _Mapping]]] = ...) -> None: ...

class MigrationStep(_message.Message):
    __slots__ = ("rename", "drop", "add", "nest", "unnest", "convert", "map_items")
    RENAME_FIELD_NUMBER: _ClassVar[int]
    DROP_FIELD_NUMBER: _ClassVar[int]
    ADD_FIELD_NUMBER: _ClassVar[int]
    NEST_FIELD_NUMBER: _ClassVar[int]
    UNNEST_FIELD_NUMBER: _ClassVar[int]
    CONVERT_FIELD_NUMBER: _ClassVar[int]
    MAP_ITEMS_FIELD_NUMBER: _ClassVar[int]
    rename: RenameField
    drop: DropField
    add: AddField
    nest: NestFields
    unnest: UnnestFields
    convert: ConvertField
    map_items: MapItems
    def __init__(self, rename: _Optional[_Union[RenameField, _Mapping]] = ..., drop: _Optional[_Union[DropField, _Mapping]] = ..., add: _Optional[_Union[AddField, _Mapping]] = ..., nest: _Optional[_Union[NestFields, _Mapping]] = ..., unnest: _Optional[_Union[UnnestFields, _Mapping]] = ..., convert: _Optional[_Union[ConvertField, _Mapping]] = ..., map_items: _Optional[_Union[MapItems, _Mapping]] = ...) -> None: ...

class SchemaVersion(_message.Message):
    __slots__ = ("version", "steps", "description")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    version: int
    steps: _containers.RepeatedCompositeFieldContainer[MigrationStep]
    description: str
    def __init__(self, version: _Optional[int] = ..., steps: _Optional[_Iterable[_Union[MigrationStep, _Mapping]]] = ..., description: _Optional[str] = ...) -> None: ...

class Schema(_message.Message):
    __slots__ = ("namespace", "name", "versions", "min_readable_version", "failure_policy", "create_time", "update_time", "etag", "latest_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_READABLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    LATEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    versions: _containers.RepeatedCompositeFieldContainer[SchemaVersion]
    min_readable_version: int
    failure_policy: FailurePolicy
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    etag: str
    latest_version: int
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[SchemaVersion, _Mapping]]] = ..., min_readable_version: _Optional[int] = ..., failure_policy: _Optional[_Union[FailurePolicy, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., latest_version: _Optional[int] = ...) -> None: ...

class RegisterSchemaRequest(_message.Message):
    __slots__ = ("namespace", "schema", "etag", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schema: Schema
    etag: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., etag: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RegisterSchemaResponse(_message.Message):
    __slots__ = ("schema", "created")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    schema: Schema
    created: bool
    def __init__(self, schema: _Optional[_Union[Schema, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetSchemaRequest(_message.Message):
    __slots__ = ("namespace", "name")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetSchemaResponse(_message.Message):
    __slots__ = ("schema",)
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    schema: Schema
    def __init__(self, schema: _Optional[_Union[Schema, _Mapping]] = ...) -> None: ...

class ListSchemasRequest(_message.Message):
    __slots__ = ("namespace", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchemasResponse(_message.Message):
    __slots__ = ("schemas", "next_page_token")
    SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schemas: _containers.RepeatedCompositeFieldContainer[Schema]
    next_page_token: str
    def __init__(self, schemas: _Optional[_Iterable[_Union[Schema, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class MigrationFailure(_message.Message):
    __slots__ = ("thread_id", "checkpoint_ns", "checkpoint_id", "stored_version", "error", "memory_path", "memory_key", "item_seq")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STORED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PATH_FIELD_NUMBER: _ClassVar[int]
    MEMORY_KEY_FIELD_NUMBER: _ClassVar[int]
    ITEM_SEQ_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    stored_version: int
    error: str
    memory_path: _containers.RepeatedScalarFieldContainer[str]
    memory_key: str
    item_seq: int
    def __init__(self, thread_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., stored_version: _Optional[int] = ..., error: _Optional[str] = ..., memory_path: _Optional[_Iterable[str]] = ..., memory_key: _Optional[str] = ..., item_seq: _Optional[int] = ...) -> None: ...

class MigrationProgress(_message.Message):
    __slots__ = ("threads_done", "checkpoints_seen", "checkpoints_migrated", "checkpoints_current", "checkpoints_other", "checkpoints_failed", "failures", "thread_id", "memory_items_seen", "memory_items_migrated", "memory_items_current", "memory_items_other", "memory_items_failed", "conversation_items_seen", "conversation_items_migrated", "conversation_items_current", "conversation_items_other", "conversation_items_failed")
    THREADS_DONE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_SEEN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_MIGRATED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_CURRENT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_OTHER_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ITEMS_SEEN_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ITEMS_MIGRATED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ITEMS_CURRENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ITEMS_OTHER_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ITEMS_FAILED_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ITEMS_SEEN_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ITEMS_MIGRATED_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ITEMS_CURRENT_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ITEMS_OTHER_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ITEMS_FAILED_FIELD_NUMBER: _ClassVar[int]
    threads_done: int
    checkpoints_seen: int
    checkpoints_migrated: int
    checkpoints_current: int
    checkpoints_other: int
    checkpoints_failed: int
    failures: _containers.RepeatedCompositeFieldContainer[MigrationFailure]
    thread_id: str
    memory_items_seen: int
    memory_items_migrated: int
    memory_items_current: int
    memory_items_other: int
    memory_items_failed: int
    conversation_items_seen: int
    conversation_items_migrated: int
    conversation_items_current: int
    conversation_items_other: int
    conversation_items_failed: int
    def __init__(self, threads_done: _Optional[int] = ..., checkpoints_seen: _Optional[int] = ..., checkpoints_migrated: _Optional[int] = ..., checkpoints_current: _Optional[int] = ..., checkpoints_other: _Optional[int] = ..., checkpoints_failed: _Optional[int] = ..., failures: _Optional[_Iterable[_Union[MigrationFailure, _Mapping]]] = ..., thread_id: _Optional[str] = ..., memory_items_seen: _Optional[int] = ..., memory_items_migrated: _Optional[int] = ..., memory_items_current: _Optional[int] = ..., memory_items_other: _Optional[int] = ..., memory_items_failed: _Optional[int] = ..., conversation_items_seen: _Optional[int] = ..., conversation_items_migrated: _Optional[int] = ..., conversation_items_current: _Optional[int] = ..., conversation_items_other: _Optional[int] = ..., conversation_items_failed: _Optional[int] = ...) -> None: ...

class MigrateThreadRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "schema", "target_version", "batch_size")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TARGET_VERSION_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    schema: str
    target_version: int
    batch_size: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., schema: _Optional[str] = ..., target_version: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class MigrateThreadResponse(_message.Message):
    __slots__ = ("progress", "done")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    progress: MigrationProgress
    done: bool
    def __init__(self, progress: _Optional[_Union[MigrationProgress, _Mapping]] = ..., done: _Optional[bool] = ...) -> None: ...

class MigrateNamespaceRequest(_message.Message):
    __slots__ = ("namespace", "schema", "target_version", "batch_size", "skip_memory")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TARGET_VERSION_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SKIP_MEMORY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schema: str
    target_version: int
    batch_size: int
    skip_memory: bool
    def __init__(self, namespace: _Optional[str] = ..., schema: _Optional[str] = ..., target_version: _Optional[int] = ..., batch_size: _Optional[int] = ..., skip_memory: _Optional[bool] = ...) -> None: ...

class MigrateNamespaceResponse(_message.Message):
    __slots__ = ("progress", "done")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    progress: MigrationProgress
    done: bool
    def __init__(self, progress: _Optional[_Union[MigrationProgress, _Mapping]] = ..., done: _Optional[bool] = ...) -> None: ...
