from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Value(_message.Message):
    __slots__ = ("msgpack", "opaque", "list", "map")
    MSGPACK_FIELD_NUMBER: _ClassVar[int]
    OPAQUE_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    msgpack: bytes
    opaque: OpaqueValue
    list: ListValue
    map: MapValue
    def __init__(self, msgpack: _Optional[bytes] = ..., opaque: _Optional[_Union[OpaqueValue, _Mapping]] = ..., list: _Optional[_Union[ListValue, _Mapping]] = ..., map: _Optional[_Union[MapValue, _Mapping]] = ...) -> None: ...

class OpaqueValue(_message.Message):
    __slots__ = ("type", "data")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    type: str
    data: bytes
    def __init__(self, type: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class ListValue(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, items: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class MapValue(_message.Message):
    __slots__ = ("entries",)
    class EntriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.MessageMap[str, Value]
    def __init__(self, entries: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class ValueDelta(_message.Message):
    __slots__ = ("base_root", "keep_first", "append", "set", "delete")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    BASE_ROOT_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIRST_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    base_root: bytes
    keep_first: int
    append: _containers.RepeatedCompositeFieldContainer[Value]
    set: _containers.MessageMap[str, Value]
    delete: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, base_root: _Optional[bytes] = ..., keep_first: _Optional[int] = ..., append: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., set: _Optional[_Mapping[str, Value]] = ..., delete: _Optional[_Iterable[str]] = ...) -> None: ...
