import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from agentstate.v1 import values_pb2 as _values_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Artifact(_message.Message):
    __slots__ = ("namespace", "thread_id", "name", "version", "size", "content_root", "content_type", "metadata", "run_id", "step_id", "create_time", "official")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_ROOT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    OFFICIAL_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    name: str
    version: int
    size: int
    content_root: bytes
    content_type: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    run_id: str
    step_id: str
    create_time: _timestamp_pb2.Timestamp
    official: bool
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., size: _Optional[int] = ..., content_root: _Optional[bytes] = ..., content_type: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., official: _Optional[bool] = ...) -> None: ...

class UploadArtifactHeader(_message.Message):
    __slots__ = ("namespace", "thread_id", "name", "content_type", "metadata", "run_id", "step_id", "official", "expected_size", "request_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _values_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_values_pb2.Value, _Mapping]] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    OFFICIAL_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SIZE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    name: str
    content_type: str
    metadata: _containers.MessageMap[str, _values_pb2.Value]
    run_id: str
    step_id: str
    official: bool
    expected_size: int
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., name: _Optional[str] = ..., content_type: _Optional[str] = ..., metadata: _Optional[_Mapping[str, _values_pb2.Value]] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., official: _Optional[bool] = ..., expected_size: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class UploadArtifactRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: UploadArtifactHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[UploadArtifactHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadArtifactResponse(_message.Message):
    __slots__ = ("artifact", "new_bytes")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    NEW_BYTES_FIELD_NUMBER: _ClassVar[int]
    artifact: Artifact
    new_bytes: int
    def __init__(self, artifact: _Optional[_Union[Artifact, _Mapping]] = ..., new_bytes: _Optional[int] = ...) -> None: ...

class DownloadArtifactRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "name", "version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    name: str
    version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class DownloadArtifactResponse(_message.Message):
    __slots__ = ("artifact", "data")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    artifact: Artifact
    data: bytes
    def __init__(self, artifact: _Optional[_Union[Artifact, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class GetArtifactRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "name", "version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    name: str
    version: int
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetArtifactResponse(_message.Message):
    __slots__ = ("artifact",)
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    artifact: Artifact
    def __init__(self, artifact: _Optional[_Union[Artifact, _Mapping]] = ...) -> None: ...

class ListArtifactsRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "name", "run_id", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    name: str
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., name: _Optional[str] = ..., run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListArtifactsResponse(_message.Message):
    __slots__ = ("artifacts", "next_page_token")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    next_page_token: str
    def __init__(self, artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SetOfficialArtifactRequest(_message.Message):
    __slots__ = ("namespace", "thread_id", "name", "version", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    thread_id: str
    name: str
    version: int
    request_id: str
    def __init__(self, namespace: _Optional[str] = ..., thread_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetOfficialArtifactResponse(_message.Message):
    __slots__ = ("artifact",)
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    artifact: Artifact
    def __init__(self, artifact: _Optional[_Union[Artifact, _Mapping]] = ...) -> None: ...
