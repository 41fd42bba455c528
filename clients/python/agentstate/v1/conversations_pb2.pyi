import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentstate.v1 import memory_pb2 as _memory_pb2
from agentstate.v1 import threads_pb2 as _threads_pb2
from agentstate.v1 import schemas_pb2 as _schemas_pb2
from agentstate.v1 import values_pb2 as _values_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ItemKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ITEM_KIND_UNSPECIFIED: _ClassVar[ItemKind]
    ITEM_KIND_MESSAGE: _ClassVar[ItemKind]
    ITEM_KIND_TOOL_CALL: _ClassVar[ItemKind]
    ITEM_KIND_TOOL_RESULT: _ClassVar[ItemKind]
    ITEM_KIND_REASONING: _ClassVar[ItemKind]
    ITEM_KIND_SUMMARY: _ClassVar[ItemKind]
    ITEM_KIND_TOOL_DEFINITION: _ClassVar[ItemKind]
    ITEM_KIND_OTHER: _ClassVar[ItemKind]

class ConfigScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_SCOPE_UNSPECIFIED: _ClassVar[ConfigScope]
    CONFIG_SCOPE_NAMESPACE: _ClassVar[ConfigScope]
    CONFIG_SCOPE_THREAD: _ClassVar[ConfigScope]

class IdleAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IDLE_ACTION_UNSPECIFIED: _ClassVar[IdleAction]
    IDLE_ACTION_CLOSE: _ClassVar[IdleAction]
    IDLE_ACTION_DELETE: _ClassVar[IdleAction]

class PolicySource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    POLICY_SOURCE_UNSPECIFIED: _ClassVar[PolicySource]
    POLICY_SOURCE_DEFAULT: _ClassVar[PolicySource]
    POLICY_SOURCE_NAMESPACE: _ClassVar[PolicySource]
    POLICY_SOURCE_THREAD: _ClassVar[PolicySource]

class CompactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPACTION_STATE_UNSPECIFIED: _ClassVar[CompactionState]
    COMPACTION_STATE_PENDING: _ClassVar[CompactionState]
    COMPACTION_STATE_CLAIMED: _ClassVar[CompactionState]

class ToolCompression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_COMPRESSION_UNSPECIFIED: _ClassVar[ToolCompression]
    TOOL_COMPRESSION_OUTSIDE_TAIL: _ClassVar[ToolCompression]
    TOOL_COMPRESSION_NONE: _ClassVar[ToolCompression]

class KnowledgePosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KNOWLEDGE_POSITION_UNSPECIFIED: _ClassVar[KnowledgePosition]
    KNOWLEDGE_POSITION_AFTER_SUMMARIES: _ClassVar[KnowledgePosition]
    KNOWLEDGE_POSITION_END: _ClassVar[KnowledgePosition]

class ContextSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTEXT_SOURCE_UNSPECIFIED: _ClassVar[ContextSource]
    CONTEXT_SOURCE_PINNED: _ClassVar[ContextSource]
    CONTEXT_SOURCE_SUMMARY: _ClassVar[ContextSource]
    CONTEXT_SOURCE_ITEM: _ClassVar[ContextSource]
    CONTEXT_SOURCE_COMPRESSED_TOOL_CALL: _ClassVar[ContextSource]
    CONTEXT_SOURCE_KNOWLEDGE: _ClassVar[ContextSource]

class Fate(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FATE_UNSPECIFIED: _ClassVar[Fate]
    FATE_KEPT: _ClassVar[Fate]
    FATE_SUMMARISED: _ClassVar[Fate]
    FATE_COMPRESSED: _ClassVar[Fate]
    FATE_DEDUPLICATED: _ClassVar[Fate]
    FATE_DROPPED_BUDGET: _ClassVar[Fate]
    FATE_DROPPED_ORPHAN: _ClassVar[Fate]
ITEM_KIND_UNSPECIFIED: ItemKind
ITEM_KIND_MESSAGE: ItemKind
ITEM_KIND_TOOL_CALL: ItemKind
ITEM_KIND_TOOL_RESULT: ItemKind
ITEM_KIND_REASONING: ItemKind
ITEM_KIND_SUMMARY: ItemKind
ITEM_KIND_TOOL_DEFINITION: ItemKind
ITEM_KIND_OTHER: ItemKind
CONFIG_SCOPE_UNSPECIFIED: ConfigScope
CONFIG_SCOPE_NAMESPACE: ConfigScope
CONFIG_SCOPE_THREAD: ConfigScope
IDLE_ACTION_UNSPECIFIED: IdleAction
IDLE_ACTION_CLOSE: IdleAction
IDLE_ACTION_DELETE: IdleAction
POLICY_SOURCE_UNSPECIFIED: PolicySource
POLICY_SOURCE_DEFAULT: PolicySource
POLICY_SOURCE_NAMESPACE: PolicySource
POLICY_SOURCE_THREAD: PolicySource
COMPACTION_STATE_UNSPECIFIED: CompactionState
COMPACTION_STATE_PENDING: CompactionState
COMPACTION_STATE_CLAIMED: CompactionState
TOOL_COMPRESSION_UNSPECIFIED: ToolCompression
TOOL_COMPRESSION_OUTSIDE_TAIL: ToolCompression
TOOL_COMPRESSION_NONE: ToolCompression
KNOWLEDGE_POSITION_UNSPECIFIED: KnowledgePosition
KNOWLEDGE_POSITION_AFTER_SUMMARIES: KnowledgePosition
KNOWLEDGE_POSITION_END: KnowledgePosition
CONTEXT_SOURCE_UNSPECIFIED: ContextSource
CONTEXT_SOURCE_PINNED: ContextSource
CONTEXT_SOURCE_SUMMARY: ContextSource
CONTEXT_SOURCE_ITEM: ContextSource
CONTEXT_SOURCE_COMPRESSED_TOOL_CALL: ContextSource
CONTEXT_SOURCE_KNOWLEDGE: ContextSource
FATE_UNSPECIFIED: Fate
FATE_KEPT: Fate
FATE_SUMMARISED: Fate
FATE_COMPRESSED: Fate
FATE_DEDUPLICATED: Fate
FATE_DROPPED_BUDGET: Fate
FATE_DROPPED_ORPHAN: Fate

class TokenCount(_message.Message):
    __slots__ = ("count", "tokenizer", "exact")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    count: int
    tokenizer: str
    exact: bool
    def __init__(self, count: _Optional[int] = ..., tokenizer: _Optional[str] = ..., exact: _Optional[bool] = ...) -> None: ...

class SeqRange(_message.Message):
    __slots__ = ("first_seq", "last_seq")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    last_seq: int
    def __init__(self, first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ...) -> None: ...

class ItemInput(_message.Message):
    __slots__ = ("client_item_id", "kind", "role", "content", "call_id", "tool_name", "run_id", "step_id", "metadata", "tokens", "compact", "dedupe_key", "schema", "schema_version")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    CLIENT_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_KEY_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    client_item_id: str
    kind: ItemKind
    role: str
    content: _values_pb2.Value
    call_id: str
    tool_name: str
    run_id: str
    step_id: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    tokens: TokenCount
    compact: _values_pb2.Value
    dedupe_key: bytes
    schema: str
    schema_version: int
    def __init__(self, client_item_id: _Optional[str] = ..., kind: _Optional[_Union[ItemKind, str]] = ..., role: _Optional[str] = ..., content: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., tokens: _Optional[_Union[TokenCount, _Mapping]] = ..., compact: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., dedupe_key: _Optional[bytes] = ..., schema: _Optional[str] = ..., schema_version: _Optional[int] = ...) -> None: ...

class ConversationItem(_message.Message):
    __slots__ = ("namespace", "thread_id", "seq", "client_item_id", "kind", "role", "content", "call_id", "tool_name", "run_id", "step_id", "metadata", "tokens", "compact", "dedupe_key", "content_hash", "estimated_tokens", "create_time", "schema", "schema_version", "stored_schema_version", "migration", "migration_error")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_KEY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    STORED_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    seq: int
    client_item_id: str
    kind: ItemKind
    role: str
    content: _values_pb2.Value
    call_id: str
    tool_name: str
    run_id: str
    step_id: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    tokens: TokenCount
    compact: _values_pb2.Value
    dedupe_key: bytes
    content_hash: bytes
    estimated_tokens: int
    create_time: _timestamp_pb2.Timestamp
    schema: str
    schema_version: int
    stored_schema_version: int
    migration: _schemas_pb2.MigrationStatus
    migration_error: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., seq: _Optional[int] = ..., client_item_id: _Optional[str] = ..., kind: _Optional[_Union[ItemKind, str]] = ..., role: _Optional[str] = ..., content: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., tokens: _Optional[_Union[TokenCount, _Mapping]] = ..., compact: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., dedupe_key: _Optional[bytes] = ..., content_hash: _Optional[bytes] = ..., estimated_tokens: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., schema: _Optional[str] = ..., schema_version: _Optional[int] = ..., stored_schema_version: _Optional[int] = ..., migration: _Optional[_Union[_schemas_pb2.MigrationStatus, str]] = ..., migration_error: _Optional[str] = ...) -> None: ...

class CompactionPolicy(_message.Message):
    __slots__ = ("disabled", "trigger_items", "compact_items", "keep_last_items", "max_summary_chars", "pyramid_fan_in", "pyramid_keep_last", "max_levels", "fallback_after", "lease_timeout", "max_compact_chars")
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_ITEMS_FIELD_NUMBER: _ClassVar[int]
    COMPACT_ITEMS_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_ITEMS_FIELD_NUMBER: _ClassVar[int]
    MAX_SUMMARY_CHARS_FIELD_NUMBER: _ClassVar[int]
    PYRAMID_FAN_IN_FIELD_NUMBER: _ClassVar[int]
    PYRAMID_KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    MAX_LEVELS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_AFTER_FIELD_NUMBER: _ClassVar[int]
    LEASE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPACT_CHARS_FIELD_NUMBER: _ClassVar[int]
    disabled: bool
    trigger_items: int
    compact_items: int
    keep_last_items: int
    max_summary_chars: int
    pyramid_fan_in: int
    pyramid_keep_last: int
    max_levels: int
    fallback_after: _duration_pb2.Duration
    lease_timeout: _duration_pb2.Duration
    max_compact_chars: int
    def __init__(self, disabled: _Optional[bool] = ..., trigger_items: _Optional[int] = ..., compact_items: _Optional[int] = ..., keep_last_items: _Optional[int] = ..., max_summary_chars: _Optional[int] = ..., pyramid_fan_in: _Optional[int] = ..., pyramid_keep_last: _Optional[int] = ..., max_levels: _Optional[int] = ..., fallback_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_compact_chars: _Optional[int] = ...) -> None: ...

class IdlePolicy(_message.Message):
    __slots__ = ("ttl", "action")
    TTL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ttl: _duration_pb2.Duration
    action: IdleAction
    def __init__(self, ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., action: _Optional[_Union[IdleAction, str]] = ...) -> None: ...

class Conversation(_message.Message):
    __slots__ = ("namespace", "thread_id", "item_count", "first_seq", "last_seq", "summary_count", "pending_compactions", "estimated_tokens", "closed", "last_active_time", "expire_time", "compaction_policy", "compaction_policy_source", "idle_policy", "idle_policy_source", "calibration_factor")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_COUNT_FIELD_NUMBER: _ClassVar[int]
    PENDING_COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_POLICY_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_POLICY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    IDLE_POLICY_FIELD_NUMBER: _ClassVar[int]
    IDLE_POLICY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    item_count: int
    first_seq: int
    last_seq: int
    summary_count: int
    pending_compactions: int
    estimated_tokens: int
    closed: bool
    last_active_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    compaction_policy: CompactionPolicy
    compaction_policy_source: PolicySource
    idle_policy: IdlePolicy
    idle_policy_source: PolicySource
    calibration_factor: float
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., item_count: _Optional[int] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., summary_count: _Optional[int] = ..., pending_compactions: _Optional[int] = ..., estimated_tokens: _Optional[int] = ..., closed: _Optional[bool] = ..., last_active_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., compaction_policy: _Optional[_Union[CompactionPolicy, _Mapping]] = ..., compaction_policy_source: _Optional[_Union[PolicySource, str]] = ..., idle_policy: _Optional[_Union[IdlePolicy, _Mapping]] = ..., idle_policy_source: _Optional[_Union[PolicySource, str]] = ..., calibration_factor: _Optional[float] = ...) -> None: ...

class AppendItemsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "items", "expected_last_seq", "create_thread", "thread_metadata", "reopen", "run_id", "lease_id", "request_id", "durability", "read_schema_version")
    class ThreadMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATE_THREAD_FIELD_NUMBER: _ClassVar[int]
    THREAD_METADATA_FIELD_NUMBER: _ClassVar[int]
    REOPEN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    items: _containers.RepeatedCompositeFieldContainer[ItemInput]
    expected_last_seq: int
    create_thread: bool
    thread_metadata: _containers.MessageMap[str, _values_pb2.Value]
    reopen: bool
    run_id: str
    lease_id: str
    request_id: str
    durability: _threads_pb2.Durability
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[ItemInput, _Mapping]]] = ..., expected_last_seq: _Optional[int] = ..., create_thread: _Optional[bool] = ..., thread_metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., reopen: _Optional[bool] = ..., run_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[_threads_pb2.Durability, str]] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class AppendItemsResponse(_message.Message):
    __slots__ = ("items", "duplicates", "last_seq", "created", "compactions_due")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_DUE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ConversationItem]
    duplicates: int
    last_seq: int
    created: bool
    compactions_due: _containers.RepeatedCompositeFieldContainer[Compaction]
    def __init__(self, items: _Optional[_Iterable[_Union[ConversationItem, _Mapping]]] = ..., duplicates: _Optional[int] = ..., last_seq: _Optional[int] = ..., created: _Optional[bool] = ..., compactions_due: _Optional[_Iterable[_Union[Compaction, _Mapping]]] = ...) -> None: ...

class ListItemsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "start_seq", "end_seq", "latest", "page_size", "page_token", "omit_content", "read_schema_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    START_SEQ_FIELD_NUMBER: _ClassVar[int]
    END_SEQ_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OMIT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    start_seq: int
    end_seq: int
    latest: int
    page_size: int
    page_token: str
    omit_content: bool
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., start_seq: _Optional[int] = ..., end_seq: _Optional[int] = ..., latest: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., omit_content: _Optional[bool] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class ListItemsResponse(_message.Message):
    __slots__ = ("items", "next_page_token", "last_seq", "item_count")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ConversationItem]
    next_page_token: str
    last_seq: int
    item_count: int
    def __init__(self, items: _Optional[_Iterable[_Union[ConversationItem, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., last_seq: _Optional[int] = ..., item_count: _Optional[int] = ...) -> None: ...

class GetItemsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "seqs", "client_item_ids", "allow_missing", "omit_content", "read_schema_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    OMIT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    seqs: _containers.RepeatedScalarFieldContainer[int]
    client_item_ids: _containers.RepeatedScalarFieldContainer[str]
    allow_missing: bool
    omit_content: bool
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., seqs: _Optional[_Iterable[int]] = ..., client_item_ids: _Optional[_Iterable[str]] = ..., allow_missing: _Optional[bool] = ..., omit_content: _Optional[bool] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class GetItemsResponse(_message.Message):
    __slots__ = ("items", "missing_seqs", "missing_client_item_ids")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    MISSING_SEQS_FIELD_NUMBER: _ClassVar[int]
    MISSING_CLIENT_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ConversationItem]
    missing_seqs: _containers.RepeatedScalarFieldContainer[int]
    missing_client_item_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, items: _Optional[_Iterable[_Union[ConversationItem, _Mapping]]] = ..., missing_seqs: _Optional[_Iterable[int]] = ..., missing_client_item_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PopItemRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "expected_last_seq", "request_id", "durability")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    expected_last_seq: int
    request_id: str
    durability: _threads_pb2.Durability
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., expected_last_seq: _Optional[int] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[_threads_pb2.Durability, str]] = ...) -> None: ...

class PopItemResponse(_message.Message):
    __slots__ = ("item", "last_seq", "removed_summaries", "cancelled_compactions")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    REMOVED_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    item: ConversationItem
    last_seq: int
    removed_summaries: _containers.RepeatedScalarFieldContainer[str]
    cancelled_compactions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, item: _Optional[_Union[ConversationItem, _Mapping]] = ..., last_seq: _Optional[int] = ..., removed_summaries: _Optional[_Iterable[str]] = ..., cancelled_compactions: _Optional[_Iterable[str]] = ...) -> None: ...

class ClearItemsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "expected_last_seq", "request_id", "durability")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    expected_last_seq: int
    request_id: str
    durability: _threads_pb2.Durability
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., expected_last_seq: _Optional[int] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[_threads_pb2.Durability, str]] = ...) -> None: ...

class ClearItemsResponse(_message.Message):
    __slots__ = ("cleared_items", "cleared_summaries", "cancelled_compactions")
    CLEARED_ITEMS_FIELD_NUMBER: _ClassVar[int]
    CLEARED_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    cleared_items: int
    cleared_summaries: int
    cancelled_compactions: int
    def __init__(self, cleared_items: _Optional[int] = ..., cleared_summaries: _Optional[int] = ..., cancelled_compactions: _Optional[int] = ...) -> None: ...

class GetConversationRequest(_message.Message):
    __slots__ = ("namespace", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetConversationResponse(_message.Message):
    __slots__ = ("conversation",)
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    conversation: Conversation
    def __init__(self, conversation: _Optional[_Union[Conversation, _Mapping]] = ...) -> None: ...

class PinnedItem(_message.Message):
    __slots__ = ("namespace", "thread_id", "scope", "pin_id", "position", "kind", "role", "content", "tool_name", "tokens", "estimated_tokens", "etag", "create_time", "update_time")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PIN_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    scope: ConfigScope
    pin_id: str
    position: int
    kind: ItemKind
    role: str
    content: _values_pb2.Value
    tool_name: str
    tokens: TokenCount
    estimated_tokens: int
    etag: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., pin_id: _Optional[str] = ..., position: _Optional[int] = ..., kind: _Optional[_Union[ItemKind, str]] = ..., role: _Optional[str] = ..., content: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., tool_name: _Optional[str] = ..., tokens: _Optional[_Union[TokenCount, _Mapping]] = ..., estimated_tokens: _Optional[int] = ..., etag: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetPinnedItemRequest(_message.Message):
    __slots__ = ("namespace", "scope", "thread_id", "pin_id", "position", "kind", "role", "content", "tool_name", "tokens", "expected_etag", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PIN_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ETAG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    scope: ConfigScope
    thread_id: str
    pin_id: str
    position: int
    kind: ItemKind
    role: str
    content: _values_pb2.Value
    tool_name: str
    tokens: TokenCount
    expected_etag: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., thread_id: _Optional[str] = ..., pin_id: _Optional[str] = ..., position: _Optional[int] = ..., kind: _Optional[_Union[ItemKind, str]] = ..., role: _Optional[str] = ..., content: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., tool_name: _Optional[str] = ..., tokens: _Optional[_Union[TokenCount, _Mapping]] = ..., expected_etag: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetPinnedItemResponse(_message.Message):
    __slots__ = ("item", "created")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    item: PinnedItem
    created: bool
    def __init__(self, item: _Optional[_Union[PinnedItem, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ListPinnedItemsRequest(_message.Message):
    __slots__ = ("namespace", "scope", "thread_id", "include_namespace")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    scope: ConfigScope
    thread_id: str
    include_namespace: bool
    def __init__(self, namespace: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., thread_id: _Optional[str] = ..., include_namespace: _Optional[bool] = ...) -> None: ...

class ListPinnedItemsResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[PinnedItem]
    def __init__(self, items: _Optional[_Iterable[_Union[PinnedItem, _Mapping]]] = ...) -> None: ...

class DeletePinnedItemRequest(_message.Message):
    __slots__ = ("namespace", "scope", "thread_id", "pin_id", "allow_missing", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PIN_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    scope: ConfigScope
    thread_id: str
    pin_id: str
    allow_missing: bool
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., thread_id: _Optional[str] = ..., pin_id: _Optional[str] = ..., allow_missing: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeletePinnedItemResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class SetCompactionPolicyRequest(_message.Message):
    __slots__ = ("namespace", "scope", "thread_id", "policy", "clear", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    scope: ConfigScope
    thread_id: str
    policy: CompactionPolicy
    clear: bool
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., thread_id: _Optional[str] = ..., policy: _Optional[_Union[CompactionPolicy, _Mapping]] = ..., clear: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetCompactionPolicyResponse(_message.Message):
    __slots__ = ("effective", "source", "compactions_due")
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_DUE_FIELD_NUMBER: _ClassVar[int]
    effective: CompactionPolicy
    source: PolicySource
    compactions_due: _containers.RepeatedCompositeFieldContainer[Compaction]
    def __init__(self, effective: _Optional[_Union[CompactionPolicy, _Mapping]] = ..., source: _Optional[_Union[PolicySource, str]] = ..., compactions_due: _Optional[_Iterable[_Union[Compaction, _Mapping]]] = ...) -> None: ...

class GetCompactionPolicyRequest(_message.Message):
    __slots__ = ("namespace", "scope", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    scope: ConfigScope
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetCompactionPolicyResponse(_message.Message):
    __slots__ = ("policy", "effective", "source")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    policy: CompactionPolicy
    effective: CompactionPolicy
    source: PolicySource
    def __init__(self, policy: _Optional[_Union[CompactionPolicy, _Mapping]] = ..., effective: _Optional[_Union[CompactionPolicy, _Mapping]] = ..., source: _Optional[_Union[PolicySource, str]] = ...) -> None: ...

class SetIdlePolicyRequest(_message.Message):
    __slots__ = ("namespace", "scope", "thread_id", "policy", "clear", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    scope: ConfigScope
    thread_id: str
    policy: IdlePolicy
    clear: bool
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., thread_id: _Optional[str] = ..., policy: _Optional[_Union[IdlePolicy, _Mapping]] = ..., clear: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetIdlePolicyResponse(_message.Message):
    __slots__ = ("effective", "source")
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    effective: IdlePolicy
    source: PolicySource
    def __init__(self, effective: _Optional[_Union[IdlePolicy, _Mapping]] = ..., source: _Optional[_Union[PolicySource, str]] = ...) -> None: ...

class GetIdlePolicyRequest(_message.Message):
    __slots__ = ("namespace", "scope", "thread_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    scope: ConfigScope
    thread_id: str
    def __init__(self, namespace: _Optional[str] = ..., scope: _Optional[_Union[ConfigScope, str]] = ..., thread_id: _Optional[str] = ...) -> None: ...

class GetIdlePolicyResponse(_message.Message):
    __slots__ = ("policy", "effective", "source")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    policy: IdlePolicy
    effective: IdlePolicy
    source: PolicySource
    def __init__(self, policy: _Optional[_Union[IdlePolicy, _Mapping]] = ..., effective: _Optional[_Union[IdlePolicy, _Mapping]] = ..., source: _Optional[_Union[PolicySource, str]] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("namespace", "thread_id", "summary_id", "level", "first_seq", "last_seq", "item_count", "child_ids", "text", "producer", "fallback", "tokens", "estimated_tokens", "content_hash", "covered_estimated_tokens", "create_time")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHILD_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    COVERED_ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    summary_id: str
    level: int
    first_seq: int
    last_seq: int
    item_count: int
    child_ids: _containers.RepeatedScalarFieldContainer[str]
    text: str
    producer: str
    fallback: bool
    tokens: TokenCount
    estimated_tokens: int
    content_hash: bytes
    covered_estimated_tokens: int
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., summary_id: _Optional[str] = ..., level: _Optional[int] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., item_count: _Optional[int] = ..., child_ids: _Optional[_Iterable[str]] = ..., text: _Optional[str] = ..., producer: _Optional[str] = ..., fallback: _Optional[bool] = ..., tokens: _Optional[_Union[TokenCount, _Mapping]] = ..., estimated_tokens: _Optional[int] = ..., content_hash: _Optional[bytes] = ..., covered_estimated_tokens: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Compaction(_message.Message):
    __slots__ = ("namespace", "thread_id", "compaction_id", "level", "first_seq", "last_seq", "input_count", "content_hash", "state", "worker", "attempts", "due_time", "fallback_time", "lease_expire_time", "max_summary_chars", "items", "summaries", "due_event_sequence")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    INPUT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_SUMMARY_CHARS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    DUE_EVENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    compaction_id: str
    level: int
    first_seq: int
    last_seq: int
    input_count: int
    content_hash: bytes
    state: CompactionState
    worker: str
    attempts: int
    due_time: _timestamp_pb2.Timestamp
    fallback_time: _timestamp_pb2.Timestamp
    lease_expire_time: _timestamp_pb2.Timestamp
    max_summary_chars: int
    items: _containers.RepeatedCompositeFieldContainer[ConversationItem]
    summaries: _containers.RepeatedCompositeFieldContainer[Summary]
    due_event_sequence: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., compaction_id: _Optional[str] = ..., level: _Optional[int] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., input_count: _Optional[int] = ..., content_hash: _Optional[bytes] = ..., state: _Optional[_Union[CompactionState, str]] = ..., worker: _Optional[str] = ..., attempts: _Optional[int] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fallback_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_summary_chars: _Optional[int] = ..., items: _Optional[_Iterable[_Union[ConversationItem, _Mapping]]] = ..., summaries: _Optional[_Iterable[_Union[Summary, _Mapping]]] = ..., due_event_sequence: _Optional[int] = ...) -> None: ...

class ClaimCompactionRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "worker", "lease_timeout", "wait_timeout", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    LEASE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    worker: str
    lease_timeout: _duration_pb2.Duration
    wait_timeout: _duration_pb2.Duration
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., worker: _Optional[str] = ..., lease_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., wait_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ClaimCompactionResponse(_message.Message):
    __slots__ = ("compaction", "lease_id")
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    compaction: Compaction
    lease_id: str
    def __init__(self, compaction: _Optional[_Union[Compaction, _Mapping]] = ..., lease_id: _Optional[str] = ...) -> None: ...

class SubmitSummaryRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "compaction_id", "lease_id", "level", "first_seq", "last_seq", "content_hash", "text", "producer", "tokens", "request_id", "durability")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    compaction_id: str
    lease_id: str
    level: int
    first_seq: int
    last_seq: int
    content_hash: bytes
    text: str
    producer: str
    tokens: TokenCount
    request_id: str
    durability: _threads_pb2.Durability
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., compaction_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., level: _Optional[int] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., content_hash: _Optional[bytes] = ..., text: _Optional[str] = ..., producer: _Optional[str] = ..., tokens: _Optional[_Union[TokenCount, _Mapping]] = ..., request_id: _Optional[str] = ..., durability: _Optional[_Union[_threads_pb2.Durability, str]] = ...) -> None: ...

class SubmitSummaryResponse(_message.Message):
    __slots__ = ("summary", "compactions_due")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_DUE_FIELD_NUMBER: _ClassVar[int]
    summary: Summary
    compactions_due: _containers.RepeatedCompositeFieldContainer[Compaction]
    def __init__(self, summary: _Optional[_Union[Summary, _Mapping]] = ..., compactions_due: _Optional[_Iterable[_Union[Compaction, _Mapping]]] = ...) -> None: ...

class ListCompactionsRequest(_message.Message):
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

class ListCompactionsResponse(_message.Message):
    __slots__ = ("compactions", "next_page_token")
    COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    compactions: _containers.RepeatedCompositeFieldContainer[Compaction]
    next_page_token: str
    def __init__(self, compactions: _Optional[_Iterable[_Union[Compaction, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSummariesRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "level", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    level: int
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., level: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSummariesResponse(_message.Message):
    __slots__ = ("summaries", "next_page_token")
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    summaries: _containers.RepeatedCompositeFieldContainer[Summary]
    next_page_token: str
    def __init__(self, summaries: _Optional[_Iterable[_Union[Summary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ExpandSummaryRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "summary_id", "to_items", "omit_content", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_ID_FIELD_NUMBER: _ClassVar[int]
    TO_ITEMS_FIELD_NUMBER: _ClassVar[int]
    OMIT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    summary_id: str
    to_items: bool
    omit_content: bool
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., summary_id: _Optional[str] = ..., to_items: _Optional[bool] = ..., omit_content: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ExpandSummaryResponse(_message.Message):
    __slots__ = ("summary", "children", "items", "next_page_token")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    summary: Summary
    children: _containers.RepeatedCompositeFieldContainer[Summary]
    items: _containers.RepeatedCompositeFieldContainer[ConversationItem]
    next_page_token: str
    def __init__(self, summary: _Optional[_Union[Summary, _Mapping]] = ..., children: _Optional[_Iterable[_Union[Summary, _Mapping]]] = ..., items: _Optional[_Iterable[_Union[ConversationItem, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class KnowledgeItem(_message.Message):
    __slots__ = ("label", "kind", "role", "content", "tokens")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    label: str
    kind: ItemKind
    role: str
    content: _values_pb2.Value
    tokens: TokenCount
    def __init__(self, label: _Optional[str] = ..., kind: _Optional[_Union[ItemKind, str]] = ..., role: _Optional[str] = ..., content: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., tokens: _Optional[_Union[TokenCount, _Mapping]] = ...) -> None: ...

class GetContextRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "budget_tokens", "knowledge", "tokenizer", "keep_last_items", "tool_compression", "knowledge_position", "disable_dedupe", "omit_explanation", "memory_query", "read_schema_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_ITEMS_FIELD_NUMBER: _ClassVar[int]
    TOOL_COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_POSITION_FIELD_NUMBER: _ClassVar[int]
    DISABLE_DEDUPE_FIELD_NUMBER: _ClassVar[int]
    OMIT_EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_QUERY_FIELD_NUMBER: _ClassVar[int]
    READ_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    budget_tokens: int
    knowledge: _containers.RepeatedCompositeFieldContainer[KnowledgeItem]
    tokenizer: str
    keep_last_items: int
    tool_compression: ToolCompression
    knowledge_position: KnowledgePosition
    disable_dedupe: bool
    omit_explanation: bool
    memory_query: _memory_pb2.MemoryQuery
    read_schema_version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., budget_tokens: _Optional[int] = ..., knowledge: _Optional[_Iterable[_Union[KnowledgeItem, _Mapping]]] = ..., tokenizer: _Optional[str] = ..., keep_last_items: _Optional[int] = ..., tool_compression: _Optional[_Union[ToolCompression, str]] = ..., knowledge_position: _Optional[_Union[KnowledgePosition, str]] = ..., disable_dedupe: _Optional[bool] = ..., omit_explanation: _Optional[bool] = ..., memory_query: _Optional[_Union[_memory_pb2.MemoryQuery, _Mapping]] = ..., read_schema_version: _Optional[int] = ...) -> None: ...

class ContextMemoryHit(_message.Message):
    __slots__ = ("path", "key", "version", "score", "field")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    key: str
    version: int
    score: float
    field: str
    def __init__(self, path: _Optional[_Iterable[str]] = ..., key: _Optional[str] = ..., version: _Optional[int] = ..., score: _Optional[float] = ..., field: _Optional[str] = ...) -> None: ...

class ContextItem(_message.Message):
    __slots__ = ("source", "kind", "role", "call_id", "tool_name", "content", "tokens", "tokens_estimated", "pin_id", "summary_id", "level", "items", "knowledge_index", "duplicate_of_seq", "memory_hit", "schema", "schema_version", "stored_schema_version", "migration", "migration_error")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    PIN_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_ID_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_OF_SEQ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_HIT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    STORED_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    source: ContextSource
    kind: ItemKind
    role: str
    call_id: str
    tool_name: str
    content: _values_pb2.Value
    tokens: int
    tokens_estimated: bool
    pin_id: str
    summary_id: str
    level: int
    items: SeqRange
    knowledge_index: int
    duplicate_of_seq: int
    memory_hit: ContextMemoryHit
    schema: str
    schema_version: int
    stored_schema_version: int
    migration: _schemas_pb2.MigrationStatus
    migration_error: str
    def __init__(self, source: _Optional[_Union[ContextSource, str]] = ..., kind: _Optional[_Union[ItemKind, str]] = ..., role: _Optional[str] = ..., call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., content: _Optional[_Union[_values_pb2.Value, _Mapping]] = ..., tokens: _Optional[int] = ..., tokens_estimated: _Optional[bool] = ..., pin_id: _Optional[str] = ..., summary_id: _Optional[str] = ..., level: _Optional[int] = ..., items: _Optional[_Union[SeqRange, _Mapping]] = ..., knowledge_index: _Optional[int] = ..., duplicate_of_seq: _Optional[int] = ..., memory_hit: _Optional[_Union[ContextMemoryHit, _Mapping]] = ..., schema: _Optional[str] = ..., schema_version: _Optional[int] = ..., stored_schema_version: _Optional[int] = ..., migration: _Optional[_Union[_schemas_pb2.MigrationStatus, str]] = ..., migration_error: _Optional[str] = ...) -> None: ...

class ExplanationEntry(_message.Message):
    __slots__ = ("pin_id", "items", "knowledge_index", "fate", "item_count", "tokens", "context_index", "summary_id", "duplicate_of_seq", "memory_hit")
    PIN_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    FATE_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_OF_SEQ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_HIT_FIELD_NUMBER: _ClassVar[int]
    pin_id: str
    items: SeqRange
    knowledge_index: int
    fate: Fate
    item_count: int
    tokens: int
    context_index: int
    summary_id: str
    duplicate_of_seq: int
    memory_hit: ContextMemoryHit
    def __init__(self, pin_id: _Optional[str] = ..., items: _Optional[_Union[SeqRange, _Mapping]] = ..., knowledge_index: _Optional[int] = ..., fate: _Optional[_Union[Fate, str]] = ..., item_count: _Optional[int] = ..., tokens: _Optional[int] = ..., context_index: _Optional[int] = ..., summary_id: _Optional[str] = ..., duplicate_of_seq: _Optional[int] = ..., memory_hit: _Optional[_Union[ContextMemoryHit, _Mapping]] = ...) -> None: ...

class GetContextResponse(_message.Message):
    __slots__ = ("items", "context_hash", "stable_prefix_items", "total_tokens", "estimated_raw_tokens", "client_counted_tokens", "calibration_factor", "last_seq", "explanation")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    STABLE_PREFIX_ITEMS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_RAW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_COUNTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ContextItem]
    context_hash: bytes
    stable_prefix_items: int
    total_tokens: int
    estimated_raw_tokens: int
    client_counted_tokens: int
    calibration_factor: float
    last_seq: int
    explanation: _containers.RepeatedCompositeFieldContainer[ExplanationEntry]
    def __init__(self, items: _Optional[_Iterable[_Union[ContextItem, _Mapping]]] = ..., context_hash: _Optional[bytes] = ..., stable_prefix_items: _Optional[int] = ..., total_tokens: _Optional[int] = ..., estimated_raw_tokens: _Optional[int] = ..., client_counted_tokens: _Optional[int] = ..., calibration_factor: _Optional[float] = ..., last_seq: _Optional[int] = ..., explanation: _Optional[_Iterable[_Union[ExplanationEntry, _Mapping]]] = ...) -> None: ...

class ReportUsageRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "context_hash", "estimated_raw_tokens", "client_counted_tokens", "input_tokens", "model", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_RAW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_COUNTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    context_hash: bytes
    estimated_raw_tokens: int
    client_counted_tokens: int
    input_tokens: int
    model: str
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., context_hash: _Optional[bytes] = ..., estimated_raw_tokens: _Optional[int] = ..., client_counted_tokens: _Optional[int] = ..., input_tokens: _Optional[int] = ..., model: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReportUsageResponse(_message.Message):
    __slots__ = ("calibration_factor", "reports")
    CALIBRATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    calibration_factor: float
    reports: int
    def __init__(self, calibration_factor: _Optional[float] = ..., reports: _Optional[int] = ...) -> None: ...
