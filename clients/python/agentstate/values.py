"""values: Python values <-> agentstate.v1 Value messages, and the delta helpers."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple

import grpc

from . import _lists, codec
from .codec import Opaque
from .errors import InvalidArgument
from .v1 import threads_pb2, values_pb2

__all__ = ["Append", "SetKeys", "Keep", "Encoded", "to_value", "from_value", "channel_write", "channel_value",
           "apply_list_delta", "response_lists"]


@dataclass(frozen=True)
class Append:
    """Delta for a list channel: keep the first ``keep_first`` items (all when None), then append ``items``."""

    items: Iterable[Any] = ()
    keep_first: int | None = None
    base_root: bytes = b""


@dataclass(frozen=True)
class SetKeys:
    """Delta for a map channel: set ``set`` keys and remove ``delete`` keys."""

    set: Mapping[str, Any] = field(default_factory=dict)
    delete: Iterable[str] = ()
    base_root: bytes = b""


@dataclass(frozen=True)
class Keep:
    """Take the channel's value from the base checkpoint unchanged."""


class Encoded(NamedTuple):
    """A structured value already in the agentstate encoding (codec.encode's bytes): sent as is (the
    server checks it), so a value that was encoded once is not encoded again."""

    data: bytes


def to_value(value: Any, out: values_pb2.Value | None = None) -> values_pb2.Value:
    """Encode a Python value (raises codec.UnsupportedValue naming the path)."""
    out = out if out is not None else values_pb2.Value()
    if type(value) is Opaque:
        codec.opaque_payload(value.type, value.data)  # checks type and data like the server does
        out.opaque.type = value.type
        out.opaque.data = value.data
    elif type(value) is Encoded:
        out.msgpack = value.data
    else:
        out.msgpack = codec.encode(value)
    return out


def from_value(value: values_pb2.Value, list_wire=None) -> Any:
    """Decode a Value message into Python objects. ``list_wire``: when the value is a list, the wire bytes of
    its ListValue as received (:func:`response_lists`), scanned instead of the message serialized again."""
    kind = value.WhichOneof("kind")
    if kind == "msgpack":
        return codec.decode(value.msgpack)
    if kind == "opaque":
        return Opaque(value.opaque.type, value.opaque.data)
    if kind == "list":
        items = value.list.items
        if _lists.NATIVE and len(items) > 1:  # all msgpack items: one decoder call for the whole list
            got = _decode_list(value.list.SerializeToString() if list_wire is None else list_wire)
            if got is not _NOT_DECODED:
                return got
        return [from_value(v) for v in items]
    if kind == "map":
        # a protobuf map has no order on the wire: give the entries the order of the canonical encoding
        # (keys by their UTF-8 bytes), so a map reads back the same every time
        entries = value.map.entries
        return {k: from_value(entries[k]) for k in sorted(entries, key=_utf8)}
    return None


# The response wire: GetCheckpointResponse.checkpoint (1) -> Checkpoint.channels (7, map entries: key 1,
# value 2) -> ChannelValue.value (2; delta 3 is the other member of its oneof) -> Value.list (3; msgpack 1,
# opaque 2, map 4 the other members of its oneof).
_CHECKPOINT, _CHANNELS, _CV_VALUE, _CV_DELTA, _LIST = 1, 7, 2, 3, 3
_OTHER_KINDS = frozenset((1, 2, 4))


def _fields(b: memoryview, pos: int, end: int):
    """(field number, wire type, start, end) of each field of the message in ``b[pos:end]``: for a
    length-delimited field its payload, else its value's bytes. ValueError when malformed or a group."""
    while pos < end:
        key, pos = _varint(b, pos, end)
        number, kind = key >> 3, key & 7
        if kind == 0:
            _, nxt = _varint(b, pos, end)
        elif kind == 1:
            nxt = pos + 8
        elif kind == 2:
            n, pos = _varint(b, pos, end)
            nxt = pos + n
        elif kind == 5:
            nxt = pos + 4
        else:
            raise ValueError("group or bad wire type")
        if nxt > end or number == 0:
            raise ValueError("truncated")
        yield number, kind, pos, nxt
        pos = nxt


def _varint(b: memoryview, pos: int, end: int) -> tuple[int, int]:
    n = shift = 0
    while pos < end and shift < 64:
        c = b[pos]
        pos += 1
        n |= (c & 0x7F) << shift
        if c < 0x80:
            return n, pos
        shift += 7
    raise ValueError("bad varint")


def response_lists(wire) -> dict[str, memoryview]:
    """Channel name -> the ListValue wire bytes of its value (a slice of ``wire``, a serialized
    GetCheckpointResponse), for each channel whose list is there once and unambiguously: one map entry of
    that name in the whole response, with one key and one value, whose ChannelValue has one ``value`` and no
    ``delta``, whose Value has one ``list`` and no other kind. The message parsed from ``wire`` then holds
    exactly the items of that slice (:func:`from_value`'s ``list_wire``). Anything else (or malformed
    bytes): the channel is left out, and is decoded from the parsed message as before."""
    b = memoryview(wire)
    found: dict[str, memoryview | None] = {}
    try:
        for number, kind, start, end in _fields(b, 0, len(b)):
            if number != _CHECKPOINT or kind != 2:
                continue
            for n2, k2, s2, e2 in _fields(b, start, end):
                if n2 != _CHANNELS or k2 != 2:
                    continue
                keys, values = [], []
                for n3, k3, s3, e3 in _fields(b, s2, e2):
                    if n3 == 1:
                        keys.append((k3, s3, e3))
                    elif n3 == 2:
                        values.append((k3, s3, e3))
                if len(keys) != 1 or keys[0][0] != 2:
                    return {}  # an entry whose channel cannot be told here: none is taken from the wire
                name = bytes(b[keys[0][1]:keys[0][2]]).decode("utf-8")
                found[name] = _list_of(b, values[0]) if name not in found and len(values) == 1 else None
    except (ValueError, UnicodeDecodeError):
        return {}
    return {name: lw for name, lw in found.items() if lw is not None}


def _list_of(b: memoryview, value_field) -> memoryview | None:
    """The ListValue slice inside one ChannelValue (see :func:`response_lists`), or None."""
    kind, start, end = value_field
    if kind != 2:
        return None
    values = []
    for number, k, s, e in _fields(b, start, end):
        if number == _CV_VALUE:
            values.append((k, s, e))
        elif number == _CV_DELTA:
            return None
    if len(values) != 1 or values[0][0] != 2:
        return None
    lists = []
    for number, k, s, e in _fields(b, values[0][1], values[0][2]):
        if number == _LIST:
            lists.append((k, s, e))
        elif number in _OTHER_KINDS:
            return None
    if len(lists) != 1 or lists[0][0] != 2:
        return None
    return b[lists[0][1]:lists[0][2]]


_NOT_DECODED = object()
#: each thread's buffer for the MessagePack array of a long list (msgpack_array_into): kept, so reading
#: a long list again and again does not allocate a new one each time (the allocator then gave the memory
#: back and took it again: ~175 page faults per read of 1,600 messages, ~0.2 ms); at most SCRATCH_MAX
#: bytes are kept (a bigger array goes into a new bytes object, as before)
_scratch = threading.local()
SCRATCH_MAX = 8 * 1024 * 1024


def _decode_list(wire) -> Any:
    """The items of a ListValue wire (only msgpack items) decoded in one decoder call, or _NOT_DECODED
    (then decoded item by item: the same value or the same error as before)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or len(wire) > SCRATCH_MAX:
        array = _lists.msgpack_array(wire)
        if buf is None and array is not None and len(array) <= SCRATCH_MAX:
            _scratch.buf = bytearray(len(array))
        if array is None:
            return _NOT_DECODED
        try:
            return codec.decode(array)
        except Exception:  # noqa: BLE001 - decoded item by item: the same error as before
            return _NOT_DECODED
    n = _lists.msgpack_array_into(wire, buf)
    if n < 0:
        return _NOT_DECODED
    view = memoryview(buf)[:n]
    try:
        return codec.decode(view)
    except Exception:  # noqa: BLE001 - decoded item by item: the same error as before
        return _NOT_DECODED
    finally:
        view.release()
        if len(buf) > SCRATCH_MAX:
            _scratch.buf = None


def _utf8(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


def invalid_value(field: str, e: codec.UnsupportedValue) -> InvalidArgument:
    """The client-side twin of the server's UNSUPPORTED_VALUE error."""
    path = field + e.path[1:]
    return InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"{path}: {e.reason}", "UNSUPPORTED_VALUE",
                           {"field": path})


def check_key(key: Any, field: str) -> str:
    """A map key or channel name must be a str (InvalidArgument naming ``field`` otherwise)."""
    if type(key) is not str:
        raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: key {key!r} is not a string",
                              "INVALID_FIELD", {"field": field})
    return key


def encode_into(value: Any, out: values_pb2.Value, field: str) -> None:
    """to_value, raising InvalidArgument (reason UNSUPPORTED_VALUE) that names ``field`` and the path."""
    try:
        to_value(value, out)
    except codec.UnsupportedValue as e:
        raise invalid_value(field, e) from None


def channel_write(value: Any, out: threads_pb2.ChannelWrite, field: str = "value") -> None:
    """Fill a ChannelWrite from a value, Append, SetKeys or Keep (InvalidArgument names ``field``)."""
    try:
        _channel_write(value, out)
    except codec.UnsupportedValue as e:
        raise invalid_value(field, e) from None


def _channel_write(value: Any, out: threads_pb2.ChannelWrite) -> None:
    if isinstance(value, Keep):
        out.keep = True
    elif isinstance(value, Append):
        d = out.delta
        d.SetInParent()
        if value.base_root:
            d.base_root = value.base_root
        if value.keep_first is not None:
            d.keep_first = value.keep_first
        for i, item in enumerate(value.items):
            try:
                to_value(item, d.append.add())
            except codec.UnsupportedValue as e:
                raise e.under(f".append[{i}]") from None
    elif isinstance(value, SetKeys):
        d = out.delta
        d.SetInParent()
        if value.base_root:
            d.base_root = value.base_root
        for k, v in value.set.items():
            try:
                to_value(v, d.set[k])
            except codec.UnsupportedValue as e:
                raise e.under(f".set[{k!r}]") from None
        d.delete.extend(value.delete)
    elif isinstance(value, list) and value and all(type(v) is Opaque for v in value):
        items = out.value.list.items
        out.value.list.SetInParent()
        for i, v in enumerate(value):
            try:
                to_value(v, items.add())
            except codec.UnsupportedValue as e:
                raise e.under(f"[{i}]") from None
    else:
        to_value(value, out.value)


def channel_value(cv: threads_pb2.ChannelValue, known: list | None = None) -> Any:
    """Decode a ChannelValue read with known_roots. ``known`` is the decoded list the client holds for
    the root it sent: a channel without content is that list again, a delta applies to it. Raises
    ValueError when content refers to a known value that was not given."""
    kind = cv.WhichOneof("content")
    if kind == "value":
        return from_value(cv.value)
    if known is None:
        raise ValueError("the channel came back relative to a known root, but no known value was given")
    if kind is None:
        return list(known)
    return apply_list_delta(known, cv.delta)


def apply_list_delta(items: list, delta: values_pb2.ValueDelta) -> list:
    """The list ``delta`` makes of ``items``: its first keep_first items (all when unset), then the appended
    ones decoded."""
    keep = delta.keep_first if delta.HasField("keep_first") else len(items)
    if keep > len(items):
        raise ValueError(f"keep_first {keep} is more than the {len(items)} items held")
    return list(items[:keep]) + [from_value(v) for v in delta.append]
