import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetStoreStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStoreStatsResponse(_message.Message):
    __slots__ = ("threads", "checkpoints", "pending_writes", "blobs", "blob_bytes", "data_file_bytes", "map_size_bytes", "format_version", "native")
    THREADS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_WRITES_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    BLOB_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAP_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NATIVE_FIELD_NUMBER: _ClassVar[int]
    threads: int
    checkpoints: int
    pending_writes: int
    blobs: int
    blob_bytes: int
    data_file_bytes: int
    map_size_bytes: int
    format_version: str
    native: bool
    def __init__(self, threads: _Optional[int] = ..., checkpoints: _Optional[int] = ..., pending_writes: _Optional[int] = ..., blobs: _Optional[int] = ..., blob_bytes: _Optional[int] = ..., data_file_bytes: _Optional[int] = ..., map_size_bytes: _Optional[int] = ..., format_version: _Optional[str] = ..., native: _Optional[bool] = ...) -> None: ...

class CollectGarbageRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CollectGarbageResponse(_message.Message):
    __slots__ = ("reachable_blobs", "freed_blobs", "freed_bytes")
    REACHABLE_BLOBS_FIELD_NUMBER: _ClassVar[int]
    FREED_BLOBS_FIELD_NUMBER: _ClassVar[int]
    FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    reachable_blobs: int
    freed_blobs: int
    freed_bytes: int
    def __init__(self, reachable_blobs: _Optional[int] = ..., freed_blobs: _Optional[int] = ..., freed_bytes: _Optional[int] = ...) -> None: ...

class CheckIntegrityRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckIntegrityResponse(_message.Message):
    __slots__ = ("checked_checkpoints", "checked_blobs", "missing_blobs", "problems")
    CHECKED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CHECKED_BLOBS_FIELD_NUMBER: _ClassVar[int]
    MISSING_BLOBS_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    checked_checkpoints: int
    checked_blobs: int
    missing_blobs: int
    problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, checked_checkpoints: _Optional[int] = ..., checked_blobs: _Optional[int] = ..., missing_blobs: _Optional[int] = ..., problems: _Optional[_Iterable[str]] = ...) -> None: ...

class BackupStoreRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class BackupStoreResponse(_message.Message):
    __slots__ = ("path", "format", "create_time", "bytes", "blake3", "checkpoints", "threads", "blobs", "sidecar_version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BLAKE3_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    SIDECAR_VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    format: str
    create_time: _timestamp_pb2.Timestamp
    bytes: int
    blake3: str
    checkpoints: int
    threads: int
    blobs: int
    sidecar_version: str
    def __init__(self, path: _Optional[str] = ..., format: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., bytes: _Optional[int] = ..., blake3: _Optional[str] = ..., checkpoints: _Optional[int] = ..., threads: _Optional[int] = ..., blobs: _Optional[int] = ..., sidecar_version: _Optional[str] = ...) -> None: ...

class ReencryptNamespaceRequest(_message.Message):
    __slots__ = ("namespace", "batch_size")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    batch_size: int
    def __init__(self, namespace: _Optional[str] = ..., batch_size: _Optional[int] = ...) -> None: ...

class ReencryptNamespaceResponse(_message.Message):
    __slots__ = ("key_id", "records", "rewritten", "already_current", "structure_nodes", "key_missing", "damaged")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    REWRITTEN_FIELD_NUMBER: _ClassVar[int]
    ALREADY_CURRENT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURE_NODES_FIELD_NUMBER: _ClassVar[int]
    KEY_MISSING_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    records: int
    rewritten: int
    already_current: int
    structure_nodes: int
    key_missing: int
    damaged: int
    def __init__(self, key_id: _Optional[str] = ..., records: _Optional[int] = ..., rewritten: _Optional[int] = ..., already_current: _Optional[int] = ..., structure_nodes: _Optional[int] = ..., key_missing: _Optional[int] = ..., damaged: _Optional[int] = ...) -> None: ...
