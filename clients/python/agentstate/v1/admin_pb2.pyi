from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

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
