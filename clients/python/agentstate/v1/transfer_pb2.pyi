from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExportNamespaceRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "refuse_encrypted", "chunk_bytes")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    REFUSE_ENCRYPTED_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    refuse_encrypted: bool
    chunk_bytes: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., refuse_encrypted: _Optional[bool] = ..., chunk_bytes: _Optional[int] = ...) -> None: ...

class TransferProgress(_message.Message):
    __slots__ = ("phase", "done", "total")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    phase: str
    done: int
    total: int
    def __init__(self, phase: _Optional[str] = ..., done: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class ExportSummary(_message.Message):
    __slots__ = ("threads", "checkpoints", "records", "blobs", "bytes", "blake3", "encrypted")
    THREADS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BLAKE3_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_FIELD_NUMBER: _ClassVar[int]
    threads: int
    checkpoints: int
    records: int
    blobs: int
    bytes: int
    blake3: str
    encrypted: bool
    def __init__(self, threads: _Optional[int] = ..., checkpoints: _Optional[int] = ..., records: _Optional[int] = ..., blobs: _Optional[int] = ..., bytes: _Optional[int] = ..., blake3: _Optional[str] = ..., encrypted: _Optional[bool] = ...) -> None: ...

class ExportNamespaceResponse(_message.Message):
    __slots__ = ("data", "progress", "summary")
    DATA_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    progress: TransferProgress
    summary: ExportSummary
    def __init__(self, data: _Optional[bytes] = ..., progress: _Optional[_Union[TransferProgress, _Mapping]] = ..., summary: _Optional[_Union[ExportSummary, _Mapping]] = ...) -> None: ...

class ImportHeader(_message.Message):
    __slots__ = ("namespace", "replace", "check_only", "size", "allow_plaintext")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    CHECK_ONLY_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PLAINTEXT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    replace: bool
    check_only: bool
    size: int
    allow_plaintext: bool
    def __init__(self, namespace: _Optional[str] = ..., replace: _Optional[bool] = ..., check_only: _Optional[bool] = ..., size: _Optional[int] = ..., allow_plaintext: _Optional[bool] = ...) -> None: ...

class ImportNamespaceRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: ImportHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[ImportHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ImportNamespaceResponse(_message.Message):
    __slots__ = ("namespace", "threads", "replaced", "checkpoints", "memory_items", "memory_revisions", "settings_kept", "records", "bytes", "blake3", "sealed", "source_encrypted")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ITEMS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REVISIONS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_KEPT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BLAKE3_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ENCRYPTED_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    threads: int
    replaced: int
    checkpoints: int
    memory_items: int
    memory_revisions: int
    settings_kept: int
    records: int
    bytes: int
    blake3: str
    sealed: bool
    source_encrypted: bool
    def __init__(self, namespace: _Optional[str] = ..., threads: _Optional[int] = ..., replaced: _Optional[int] = ..., checkpoints: _Optional[int] = ..., memory_items: _Optional[int] = ..., memory_revisions: _Optional[int] = ..., settings_kept: _Optional[int] = ..., records: _Optional[int] = ..., bytes: _Optional[int] = ..., blake3: _Optional[str] = ..., sealed: _Optional[bool] = ..., source_encrypted: _Optional[bool] = ...) -> None: ...
