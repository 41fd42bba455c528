import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentstate.v1 import schemas_pb2 as _schemas_pb2
from agentstate.v1 import threads_pb2 as _threads_pb2
from agentstate.v1 import values_pb2 as _values_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemoryOrigin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_ORIGIN_UNSPECIFIED: _ClassVar[MemoryOrigin]
    MEMORY_ORIGIN_EXPLICIT: _ClassVar[MemoryOrigin]
    MEMORY_ORIGIN_INFERRED: _ClassVar[MemoryOrigin]

class VectorUpdate(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VECTOR_UPDATE_UNSPECIFIED: _ClassVar[VectorUpdate]
    VECTOR_UPDATE_REPLACE: _ClassVar[VectorUpdate]
    VECTOR_UPDATE_MERGE: _ClassVar[VectorUpdate]

class FilterOperator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILTER_OPERATOR_UNSPECIFIED: _ClassVar[FilterOperator]
    FILTER_OPERATOR_EQ: _ClassVar[FilterOperator]
    FILTER_OPERATOR_NE: _ClassVar[FilterOperator]
    FILTER_OPERATOR_GT: _ClassVar[FilterOperator]
    FILTER_OPERATOR_GTE: _ClassVar[FilterOperator]
    FILTER_OPERATOR_LT: _ClassVar[FilterOperator]
    FILTER_OPERATOR_LTE: _ClassVar[FilterOperator]
    FILTER_OPERATOR_IN: _ClassVar[FilterOperator]
    FILTER_OPERATOR_NIN: _ClassVar[FilterOperator]
    FILTER_OPERATOR_EXISTS: _ClassVar[FilterOperator]
    FILTER_OPERATOR_IS_TYPE: _ClassVar[FilterOperator]
    FILTER_OPERATOR_LENGTH_EQ: _ClassVar[FilterOperator]
    FILTER_OPERATOR_FAIL: _ClassVar[FilterOperator]

class MemoryValueType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_VALUE_TYPE_UNSPECIFIED: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_NULL: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_BOOL: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_NUMBER: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_STRING: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_BYTES: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_LIST: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_MAP: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_DATETIME: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_UUID: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_SET: _ClassVar[MemoryValueType]
    MEMORY_VALUE_TYPE_OPAQUE: _ClassVar[MemoryValueType]

class ComparisonMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPARISON_MODE_UNSPECIFIED: _ClassVar[ComparisonMode]
    COMPARISON_MODE_AGENTSTATE: _ClassVar[ComparisonMode]
    COMPARISON_MODE_LANGGRAPH_PYTHON: _ClassVar[ComparisonMode]
    COMPARISON_MODE_LANGGRAPH_JS: _ClassVar[ComparisonMode]

class MemoryOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_ORDER_UNSPECIFIED: _ClassVar[MemoryOrder]
    MEMORY_ORDER_UPDATED_DESC: _ClassVar[MemoryOrder]
    MEMORY_ORDER_INSERTION: _ClassVar[MemoryOrder]
    MEMORY_ORDER_PATH_KEY: _ClassVar[MemoryOrder]

class Unscored(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNSCORED_UNSPECIFIED: _ClassVar[Unscored]
    UNSCORED_OMIT: _ClassVar[Unscored]
    UNSCORED_ONLY: _ClassVar[Unscored]

class RevisionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REVISION_KIND_UNSPECIFIED: _ClassVar[RevisionKind]
    REVISION_KIND_PUT: _ClassVar[RevisionKind]
    REVISION_KIND_DELETE: _ClassVar[RevisionKind]
    REVISION_KIND_EXPIRE: _ClassVar[RevisionKind]

class BatchSemantics(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_SEMANTICS_UNSPECIFIED: _ClassVar[BatchSemantics]
    BATCH_SEMANTICS_SEQUENTIAL: _ClassVar[BatchSemantics]
    BATCH_SEMANTICS_SNAPSHOT: _ClassVar[BatchSemantics]
MEMORY_ORIGIN_UNSPECIFIED: MemoryOrigin
MEMORY_ORIGIN_EXPLICIT: MemoryOrigin
MEMORY_ORIGIN_INFERRED: MemoryOrigin
VECTOR_UPDATE_UNSPECIFIED: VectorUpdate
VECTOR_UPDATE_REPLACE: VectorUpdate
VECTOR_UPDATE_MERGE: VectorUpdate
FILTER_OPERATOR_UNSPECIFIED: FilterOperator
FILTER_OPERATOR_EQ: FilterOperator
FILTER_OPERATOR_NE: FilterOperator
FILTER_OPERATOR_GT: FilterOperator
FILTER_OPERATOR_GTE: FilterOperator
FILTER_OPERATOR_LT: FilterOperator
FILTER_OPERATOR_LTE: FilterOperator
FILTER_OPERATOR_IN: FilterOperator
FILTER_OPERATOR_NIN: FilterOperator
FILTER_OPERATOR_EXISTS: FilterOperator
FILTER_OPERATOR_IS_TYPE: FilterOperator
FILTER_OPERATOR_LENGTH_EQ: FilterOperator
FILTER_OPERATOR_FAIL: FilterOperator
MEMORY_VALUE_TYPE_UNSPECIFIED: MemoryValueType
MEMORY_VALUE_TYPE_NULL: MemoryValueType
MEMORY_VALUE_TYPE_BOOL: MemoryValueType
MEMORY_VALUE_TYPE_NUMBER: MemoryValueType
MEMORY_VALUE_TYPE_STRING: MemoryValueType
MEMORY_VALUE_TYPE_BYTES: MemoryValueType
MEMORY_VALUE_TYPE_LIST: MemoryValueType
MEMORY_VALUE_TYPE_MAP: MemoryValueType
MEMORY_VALUE_TYPE_DATETIME: MemoryValueType
MEMORY_VALUE_TYPE_UUID: MemoryValueType
MEMORY_VALUE_TYPE_SET: MemoryValueType
MEMORY_VALUE_TYPE_OPAQUE: MemoryValueType
COMPARISON_MODE_UNSPECIFIED: ComparisonMode
COMPARISON_MODE_AGENTSTATE: ComparisonMode
COMPARISON_MODE_LANGGRAPH_PYTHON: ComparisonMode
COMPARISON_MODE_LANGGRAPH_JS: ComparisonMode
MEMORY_ORDER_UNSPECIFIED: MemoryOrder
MEMORY_ORDER_UPDATED_DESC: MemoryOrder
MEMORY_ORDER_INSERTION: MemoryOrder
MEMORY_ORDER_PATH_KEY: MemoryOrder
UNSCORED_UNSPECIFIED: Unscored
UNSCORED_OMIT: Unscored
UNSCORED_ONLY: Unscored
REVISION_KIND_UNSPECIFIED: RevisionKind
REVISION_KIND_PUT: RevisionKind
REVISION_KIND_DELETE: RevisionKind
REVISION_KIND_EXPIRE: RevisionKind
BATCH_SEMANTICS_UNSPECIFIED: BatchSemantics
BATCH_SEMANTICS_SEQUENTIAL: BatchSemantics
BATCH_SEMANTICS_SNAPSHOT: BatchSemantics

class MemoryProvenance(_message.Message):
    __slots__ = ("thread_id", "run_id", "conversation_seq", "step_id", "checkpoint_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    run_id: str
    conversation_seq: int
    step_id: str
    checkpoint_id: str
    def __init__(self, thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., conversation_seq: _Optional[int] = ..., step_id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ...) -> None: ...

class Vector(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class MemoryItem(_message.Message):
    __slots__ = ("namespace", "path", "key", "value", "create_time", "update_time", "etag", "version", "provenance", "origin", "actor", "ttl", "expire_time", "vector_space", "vector_fields", "vectors", "schema", "schema_version", "stored_schema_version", "migration", "migration_error")
    class VectorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Vector
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Vector, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SPACE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELDS_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    STORED_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    path: _containers.RepeatedScalarFieldContainer[str]
    key: str
    value: _values_pb2.Value
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    etag: str
    version: int
    provenance: MemoryProvenance
    origin: MemoryOrigin
    actor: str
    ttl: _duration_pb2.Duration
    expire_time: _timestamp_pb2.Timestamp
    vector_space: str
    vector_fields: _containers.RepeatedScalarFieldContainer[str]
    vectors: _containers.MessageMap[str, Vector]
    schema: str
    schema_version: int
    stored_schema_version: int
    migration: _schemas_pb2.MigrationStatus
    migration_error: str
    def __init__(self, namespace: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., version: _Optional[int] = ..., provenance: _Optional[_Union[MemoryProvenance, _Mapping]] = ..., origin: _Optional[_Union[MemoryOrigin, str]] = ..., actor: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., vector_space: _Optional[str] = ..., vector_fields: _Optional[_Iterable[str]] = ..., vectors: _Optional[_Mapping[str, Vector]] = ..., schema: _Optional[str] = ..., schema_version: _Optional[int] = ..., stored_schema_version: _Optional[int] = ..., migration: _Optional[_Union[_schemas_pb2.MigrationStatus, str]] = ..., migration_error: _Optional[str] = ...) -> None: ...

class PutMemoryItemRequest(_message.Message):
    __slots__ = ("namespace", "path", "key", "value", "vectors", "vector_space", "vector_update", "ttl", "provenance", "origin", "actor", "etag", "must_not_exist", "request_id", "durability", "schema", "schema_version")
    class VectorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Vector
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Vector, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SPACE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_UPDATE_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    MUST_NOT_EXIST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    path: _containers.RepeatedScalarFieldContainer[str]
    key: str
    value: _values_pb2.Value
    vectors: _containers.MessageMap[str, Vector]
    vector_space: str
    vector_update: VectorUpdate
    ttl: _duration_pb2.Duration
    provenance: MemoryProvenance
    origin: MemoryOrigin
    actor: str
    etag: str
    must_not_exist: bool
    request_id: str
    durability: _threads_pb2.Durability
    schema: str
    schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., vectors: _Optional[_Mapping[str, Vector]] = ..., vector_space: _Optional[str] = ..., vector_update: _Optional[_Union[VectorUpdate, str]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., provenance: _Optional[_Union[MemoryProvenance, _Mapping]] = ..., origin: _Optional[_Union[MemoryOrigin, str]] = ..., actor: _Optional[str] = ..., etag: _Optional[str] = ..., must_not_exist: _Optional[bool] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[_threads_pb2.Durability, str]] = ..., schema: _Optional[str] = ..., schema_version: _Optional[int] = ...) -> None: ...

class PutMemoryItemResponse(_message.Message):
    __slots__ = ("item", "created")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    item: MemoryItem
    created: bool
    def __init__(self, item: _Optional[_Union[MemoryItem, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetMemoryItemRequest(_message.Message):
    __slots__ = ("namespace", "path", "key", "refresh_ttl", "include_vectors", "allow_missing", "read_schema_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REFRESH_TTL_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VECTORS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    path: _containers.RepeatedScalarFieldContainer[str]
    key: str
    refresh_ttl: bool
    include_vectors: bool
    allow_missing: bool
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., key: _Optional[str] = ..., refresh_ttl: _Optional[bool] = ..., include_vectors: _Optional[bool] = ..., allow_missing: _Optional[bool] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class GetMemoryItemResponse(_message.Message):
    __slots__ = ("item",)
    ITEM_FIELD_NUMBER: _ClassVar[int]
    item: MemoryItem
    def __init__(self, item: _Optional[_Union[MemoryItem, _Mapping]] = ...) -> None: ...

class DeleteMemoryItemRequest(_message.Message):
    __slots__ = ("namespace", "path", "key", "purge", "allow_missing", "etag", "actor", "provenance", "request_id", "durability")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PURGE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    path: _containers.RepeatedScalarFieldContainer[str]
    key: str
    purge: bool
    allow_missing: bool
    etag: str
    actor: str
    provenance: MemoryProvenance
    request_id: str
    durability: _threads_pb2.Durability
    def __init__(self, namespace: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., key: _Optional[str] = ..., purge: _Optional[bool] = ..., allow_missing: _Optional[bool] = ..., etag: _Optional[str] = ..., actor: _Optional[str] = ..., provenance: _Optional[_Union[MemoryProvenance, _Mapping]] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[_threads_pb2.Durability, str]] = ...) -> None: ...

class DeleteMemoryItemResponse(_message.Message):
    __slots__ = ("deleted", "purged_revisions")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    PURGED_REVISIONS_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    purged_revisions: int
    def __init__(self, deleted: _Optional[bool] = ..., purged_revisions: _Optional[int] = ...) -> None: ...

class PathSegment(_message.Message):
    __slots__ = ("label", "any")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    ANY_FIELD_NUMBER: _ClassVar[int]
    label: str
    any: bool
    def __init__(self, label: _Optional[str] = ..., any: _Optional[bool] = ...) -> None: ...

class ListMemoryNamespacesRequest(_message.Message):
    __slots__ = ("namespace", "prefix", "suffix", "max_depth", "include_empty", "limit", "offset", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EMPTY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    prefix: _containers.RepeatedCompositeFieldContainer[PathSegment]
    suffix: _containers.RepeatedCompositeFieldContainer[PathSegment]
    max_depth: int
    include_empty: bool
    limit: int
    offset: int
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., prefix: _Optional[_Iterable[_Union[PathSegment, _Mapping]]] = ..., suffix: _Optional[_Iterable[_Union[PathSegment, _Mapping]]] = ..., max_depth: _Optional[int] = ..., include_empty: _Optional[bool] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class MemoryNamespace(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, path: _Optional[_Iterable[str]] = ...) -> None: ...

class ListMemoryNamespacesResponse(_message.Message):
    __slots__ = ("namespaces", "next_page_token")
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[MemoryNamespace]
    next_page_token: str
    def __init__(self, namespaces: _Optional[_Iterable[_Union[MemoryNamespace, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class FieldPath(_message.Message):
    __slots__ = ("segments",)
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[FieldPathSegment]
    def __init__(self, segments: _Optional[_Iterable[_Union[FieldPathSegment, _Mapping]]] = ...) -> None: ...

class FieldPathSegment(_message.Message):
    __slots__ = ("key", "index")
    KEY_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    key: str
    index: int
    def __init__(self, key: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class FieldCondition(_message.Message):
    __slots__ = ("path", "op", "value", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: FieldPath
    op: FilterOperator
    value: _values_pb2.Value
    mode: ComparisonMode
    def __init__(self, path: _Optional[_Union[FieldPath, _Mapping]] = ..., op: _Optional[_Union[FilterOperator, str]] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., mode: _Optional[_Union[ComparisonMode, str]] = ...) -> None: ...

class MemoryFilterList(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[MemoryFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[MemoryFilter, _Mapping]]] = ...) -> None: ...

class MemoryFilter(_message.Message):
    __slots__ = ("all", "any", "negate", "field", "expression")
    ALL_FIELD_NUMBER: _ClassVar[int]
    ANY_FIELD_NUMBER: _ClassVar[int]
    NEGATE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    all: MemoryFilterList
    any: MemoryFilterList
    negate: MemoryFilter
    field: FieldCondition
    expression: _values_pb2.Value
    def __init__(self, all: _Optional[_Union[MemoryFilterList, _Mapping]] = ..., any: _Optional[_Union[MemoryFilterList, _Mapping]] = ..., negate: _Optional[_Union[MemoryFilter, _Mapping]] = ..., field: _Optional[_Union[FieldCondition, _Mapping]] = ..., expression: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...

class VectorQuery(_message.Message):
    __slots__ = ("vector", "space", "fields", "unscored")
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    UNSCORED_FIELD_NUMBER: _ClassVar[int]
    vector: Vector
    space: str
    fields: _containers.RepeatedScalarFieldContainer[str]
    unscored: Unscored
    def __init__(self, vector: _Optional[_Union[Vector, _Mapping]] = ..., space: _Optional[str] = ..., fields: _Optional[_Iterable[str]] = ..., unscored: _Optional[_Union[Unscored, str]] = ...) -> None: ...

class SearchMemoryItemsRequest(_message.Message):
    __slots__ = ("namespace", "path_prefix", "filter", "vector", "order", "limit", "offset", "page_size", "page_token", "refresh_ttl", "omit_values", "include_vectors", "read_schema_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PATH_PREFIX_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REFRESH_TTL_FIELD_NUMBER: _ClassVar[int]
    OMIT_VALUES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VECTORS_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    path_prefix: _containers.RepeatedScalarFieldContainer[str]
    filter: MemoryFilter
    vector: VectorQuery
    order: MemoryOrder
    limit: int
    offset: int
    page_size: int
    page_token: str
    refresh_ttl: bool
    omit_values: bool
    include_vectors: bool
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., path_prefix: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[MemoryFilter, _Mapping]] = ..., vector: _Optional[_Union[VectorQuery, _Mapping]] = ..., order: _Optional[_Union[MemoryOrder, str]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., refresh_ttl: _Optional[bool] = ..., omit_values: _Optional[bool] = ..., include_vectors: _Optional[bool] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class ScoredMemoryItem(_message.Message):
    __slots__ = ("item", "score", "field")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    item: MemoryItem
    score: float
    field: str
    def __init__(self, item: _Optional[_Union[MemoryItem, _Mapping]] = ..., score: _Optional[float] = ..., field: _Optional[str] = ...) -> None: ...

class SearchMemoryItemsResponse(_message.Message):
    __slots__ = ("items", "next_page_token")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ScoredMemoryItem]
    next_page_token: str
    def __init__(self, items: _Optional[_Iterable[_Union[ScoredMemoryItem, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class MemoryQuery(_message.Message):
    __slots__ = ("path_prefix", "filter", "vector", "order", "limit")
    PATH_PREFIX_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    path_prefix: _containers.RepeatedScalarFieldContainer[str]
    filter: MemoryFilter
    vector: VectorQuery
    order: MemoryOrder
    limit: int
    def __init__(self, path_prefix: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[MemoryFilter, _Mapping]] = ..., vector: _Optional[_Union[VectorQuery, _Mapping]] = ..., order: _Optional[_Union[MemoryOrder, str]] = ..., limit: _Optional[int] = ...) -> None: ...

class MemoryItemRevision(_message.Message):
    __slots__ = ("version", "kind", "time", "actor", "provenance", "origin", "value", "value_root", "etag", "ttl", "vector_fields", "schema", "schema_version", "stored_schema_version", "migration", "migration_error")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUE_ROOT_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELDS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    STORED_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    version: int
    kind: RevisionKind
    time: _timestamp_pb2.Timestamp
    actor: str
    provenance: MemoryProvenance
    origin: MemoryOrigin
    value: _values_pb2.Value
    value_root: bytes
    etag: str
    ttl: _duration_pb2.Duration
    vector_fields: _containers.RepeatedScalarFieldContainer[str]
    schema: str
    schema_version: int
    stored_schema_version: int
    migration: _schemas_pb2.MigrationStatus
    migration_error: str
    def __init__(self, version: _Optional[int] = ..., kind: _Optional[_Union[RevisionKind, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., provenance: _Optional[_Union[MemoryProvenance, _Mapping]] = ..., origin: _Optional[_Union[MemoryOrigin, str]] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., value_root: _Optional[bytes] = ..., etag: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., vector_fields: _Optional[_Iterable[str]] = ..., schema: _Optional[str] = ..., schema_version: _Optional[int] = ..., stored_schema_version: _Optional[int] = ..., migration: _Optional[_Union[_schemas_pb2.MigrationStatus, str]] = ..., migration_error: _Optional[str] = ...) -> None: ...

class GetMemoryItemHistoryRequest(_message.Message):
    __slots__ = ("namespace", "path", "key", "include_values", "page_size", "page_token", "read_schema_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VALUES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    path: _containers.RepeatedScalarFieldContainer[str]
    key: str
    include_values: bool
    page_size: int
    page_token: str
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., key: _Optional[str] = ..., include_values: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class GetMemoryItemHistoryResponse(_message.Message):
    __slots__ = ("revisions", "next_page_token")
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    revisions: _containers.RepeatedCompositeFieldContainer[MemoryItemRevision]
    next_page_token: str
    def __init__(self, revisions: _Optional[_Iterable[_Union[MemoryItemRevision, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SweepExpiredMemoryItemsRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class SweepExpiredMemoryItemsResponse(_message.Message):
    __slots__ = ("expired_items",)
    EXPIRED_ITEMS_FIELD_NUMBER: _ClassVar[int]
    expired_items: int
    def __init__(self, expired_items: _Optional[int] = ...) -> None: ...

class MemoryOp(_message.Message):
    __slots__ = ("put", "get", "delete", "search", "list_namespaces")
    PUT_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    LIST_NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    put: PutMemoryItemRequest
    get: GetMemoryItemRequest
    delete: DeleteMemoryItemRequest
    search: SearchMemoryItemsRequest
    list_namespaces: ListMemoryNamespacesRequest
    def __init__(self, put: _Optional[_Union[PutMemoryItemRequest, _Mapping]] = ..., get: _Optional[_Union[GetMemoryItemRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteMemoryItemRequest, _Mapping]] = ..., search: _Optional[_Union[SearchMemoryItemsRequest, _Mapping]] = ..., list_namespaces: _Optional[_Union[ListMemoryNamespacesRequest, _Mapping]] = ...) -> None: ...

class MemoryOpResult(_message.Message):
    __slots__ = ("put", "get", "delete", "search", "list_namespaces")
    PUT_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    LIST_NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    put: PutMemoryItemResponse
    get: GetMemoryItemResponse
    delete: DeleteMemoryItemResponse
    search: SearchMemoryItemsResponse
    list_namespaces: ListMemoryNamespacesResponse
    def __init__(self, put: _Optional[_Union[PutMemoryItemResponse, _Mapping]] = ..., get: _Optional[_Union[GetMemoryItemResponse, _Mapping]] = ..., delete: _Optional[_Union[DeleteMemoryItemResponse, _Mapping]] = ..., search: _Optional[_Union[SearchMemoryItemsResponse, _Mapping]] = ..., list_namespaces: _Optional[_Union[ListMemoryNamespacesResponse, _Mapping]] = ...) -> None: ...

class BatchMemoryRequest(_message.Message):
    __slots__ = ("namespace", "ops", "semantics", "request_id", "durability")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    SEMANTICS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    ops: _containers.RepeatedCompositeFieldContainer[MemoryOp]
    semantics: BatchSemantics
    request_id: str
    durability: _threads_pb2.Durability
    def __init__(self, namespace: _Optional[str] = ..., ops: _Optional[_Iterable[_Union[MemoryOp, _Mapping]]] = ..., semantics: _Optional[_Union[BatchSemantics, str]] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[_threads_pb2.Durability, str]] = ...) -> None: ...

class BatchMemoryResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[MemoryOpResult]
    def __init__(self, results: _Optional[_Iterable[_Union[MemoryOpResult, _Mapping]]] = ...) -> None: ...
