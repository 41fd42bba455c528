"""codec: the agentstate value encoding (reference implementation, pure Python).

A structured value is MessagePack with a few extension types (docs/encoding.md):

=====  ========  ===========================================================
code   type      payload
=====  ========  ===========================================================
1      big int   signed big-endian two's complement, minimal length; only for
                 ints outside [-2**63, 2**64 - 1]
2      datetime  flag (0 naive, 1 UTC offset, 2 IANA zone) + int64 BE
                 microseconds since 1970-01-01 (the UTC instant; wall clock
                 for naive) + [int32 BE offset seconds] + [zone name]
3      UUID      16 bytes
4      decimal   ASCII ``str(Decimal)``
5      set       canonical MessagePack array of the elements, sorted by their
                 canonical encodings, without duplicates
6      opaque    u8 length of type + type (UTF-8) + data
=====  ========  ===========================================================

The *canonical* encoding, which the sidecar hashes and stores, is what
:func:`encode` produces: shortest integer forms, every float as float64 (one
NaN), map keys (strings only) sorted by their UTF-8 bytes, and the extension
payloads above. :func:`canonicalize` turns any valid encoding into it.

This module is the pure-Python twin of the server's compiled hot path
(``sidecar._hotpath_c``); golden vectors in tests/ prove both give the same
bytes. It depends only on msgspec.
"""
from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import uuid as _uuid
from typing import Any, NamedTuple

import msgspec

__all__ = [
    "Opaque", "UnsupportedValue", "encode", "decode", "canonicalize", "normalize",
    "MAX_DEPTH", "EXT_BIGINT", "EXT_DATETIME", "EXT_UUID", "EXT_DECIMAL", "EXT_SET", "EXT_OPAQUE",
]

EXT_BIGINT = 1
EXT_DATETIME = 2
EXT_UUID = 3
EXT_DECIMAL = 4
EXT_SET = 5
EXT_OPAQUE = 6

#: Containers (lists, maps, sets) may nest this deep; deeper values are refused.
MAX_DEPTH = 64

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
#: Microseconds since the epoch of 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999.
MICROS_MIN = -62135596800_000000
MICROS_MAX = 253402300799_999999
OFFSET_LIMIT = 86400  # |UTC offset| < 24 h, in seconds

_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_EPOCH_AWARE = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_ONE_MICRO = _dt.timedelta(microseconds=1)
_NAN = float("nan")
_Ext = msgspec.msgpack.Ext
_encoder = msgspec.msgpack.Encoder()
_raw_decoder = msgspec.msgpack.Decoder(ext_hook=_Ext)


class Opaque(NamedTuple):
    """A framework's own serialisation, stored verbatim (``type`` names the format)."""

    type: str
    data: bytes


class UnsupportedValue(ValueError):
    """A value cannot be stored; ``path`` locates it (``$`` is the value itself)."""

    def __init__(self, reason: str, path: str = "$") -> None:
        self.reason = reason
        self.path = path
        super().__init__(f"{path}: {reason}")

    def under(self, step: str) -> "UnsupportedValue":
        """Return the same error seen from one level up (``step`` is the key or index)."""
        return UnsupportedValue(self.reason, "$" + step + self.path[1:])


def _key_step(key: Any) -> str:
    return f"[{key!r}]"


# ---------------------------------------------------------------- extensions

def bigint_payload(value: int) -> bytes:
    magnitude = value if value >= 0 else ~value
    return value.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


def datetime_payload(value: _dt.datetime) -> bytes:
    tz = value.tzinfo
    offset = None if tz is None else value.utcoffset()
    try:
        if offset is None:
            micros = (value.replace(tzinfo=None) - _EPOCH_NAIVE) // _ONE_MICRO
            return b"\x00" + micros.to_bytes(8, "big", signed=True)
        micros = (value - _EPOCH_AWARE) // _ONE_MICRO
    except OverflowError:
        raise UnsupportedValue("datetime out of range") from None
    seconds, rest = divmod(offset, _dt.timedelta(seconds=1))
    if rest or not -OFFSET_LIMIT < seconds < OFFSET_LIMIT:
        raise UnsupportedValue("datetime UTC offset must be whole seconds under 24 hours")
    if not MICROS_MIN <= micros <= MICROS_MAX:
        raise UnsupportedValue("datetime out of range")
    head = micros.to_bytes(8, "big", signed=True) + seconds.to_bytes(4, "big", signed=True)
    key = getattr(tz, "key", None)
    if isinstance(key, str) and key and type(tz).__name__ == "ZoneInfo":
        zone = key.encode()
        if len(zone) > 255:
            raise UnsupportedValue("datetime zone name longer than 255 bytes")
        return b"\x02" + head + zone
    return b"\x01" + head


def opaque_payload(type_: str, data: bytes) -> bytes:
    if type(type_) is not str or type(data) is not bytes:
        raise UnsupportedValue("Opaque needs a str type and bytes data")
    name = type_.encode("utf-8", "strict")
    if not 0 < len(name) < 256:
        raise UnsupportedValue("opaque type must be 1 to 255 UTF-8 bytes")
    return bytes((len(name),)) + name + data


def array_header(n: int) -> bytes:
    """The shortest MessagePack header of an array of ``n`` items."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def map_header(n: int) -> bytes:
    """The shortest MessagePack header of a map of ``n`` entries."""
    if n < 16:
        return bytes((0x80 | n,))
    if n < 0x10000:
        return b"\xde" + n.to_bytes(2, "big")
    return b"\xdf" + n.to_bytes(4, "big")


def set_payload(encoded_elements: list[bytes]) -> bytes:
    unique = sorted(set(encoded_elements))
    return array_header(len(unique)) + b"".join(unique)


def _check_datetime_payload(data: bytes) -> bytes:
    n = len(data)
    flag = data[0] if n else -1
    if flag == 0 and n == 9:
        micros = int.from_bytes(data[1:9], "big", signed=True)
    elif flag in (1, 2) and n >= 13 and (flag == 2) == (n > 13):
        micros = int.from_bytes(data[1:9], "big", signed=True)
        offset = int.from_bytes(data[9:13], "big", signed=True)
        if not -OFFSET_LIMIT < offset < OFFSET_LIMIT:
            raise UnsupportedValue("datetime offset out of range")
        if flag == 2:
            if n - 13 > 255:
                raise UnsupportedValue("datetime zone name longer than 255 bytes")
            try:
                data[13:].decode("utf-8", "strict")
            except UnicodeDecodeError:
                raise UnsupportedValue("datetime zone name is not UTF-8") from None
    else:
        raise UnsupportedValue("malformed datetime extension")
    if not MICROS_MIN <= micros <= MICROS_MAX:
        raise UnsupportedValue("datetime out of range")
    return data


def _canonical_ext(ext: msgspec.msgpack.Ext, depth: int) -> Any:
    code, data = ext.code, bytes(ext.data)
    if code == EXT_BIGINT:
        if not data:
            raise UnsupportedValue("empty big int extension")
        value = int.from_bytes(data, "big", signed=True)
        if INT_MIN <= value <= INT_MAX:
            return value
        return _Ext(EXT_BIGINT, bigint_payload(value))
    if code == EXT_DATETIME:
        return _Ext(EXT_DATETIME, _check_datetime_payload(data))
    if code == EXT_UUID:
        if len(data) != 16:
            raise UnsupportedValue("UUID extension must hold 16 bytes")
        return _Ext(EXT_UUID, data)
    if code == EXT_DECIMAL:
        try:
            text = str(_decimal.Decimal(data.decode("ascii")))
        except (UnicodeDecodeError, _decimal.InvalidOperation):
            raise UnsupportedValue("malformed decimal extension") from None
        return _Ext(EXT_DECIMAL, text.encode("ascii"))
    if code == EXT_SET:
        if depth >= MAX_DEPTH:
            raise UnsupportedValue(f"nested deeper than {MAX_DEPTH}")
        try:
            items = _raw_decoder.decode(data)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            raise UnsupportedValue("malformed set extension") from None
        if type(items) is not list:
            raise UnsupportedValue("set extension must hold an array")
        return _Ext(EXT_SET, set_payload(_encode_elements(items, depth + 1)))
    if code == EXT_OPAQUE:
        if not data or len(data) < 1 + data[0] or data[0] == 0:
            raise UnsupportedValue("malformed opaque extension")
        try:
            data[1:1 + data[0]].decode("utf-8", "strict")
        except UnicodeDecodeError:
            raise UnsupportedValue("opaque type is not UTF-8") from None
        return _Ext(EXT_OPAQUE, data)
    raise UnsupportedValue(f"unknown extension type {code}")


def _encode_elements(items: Any, depth: int) -> list[bytes]:
    out = []
    for i, item in enumerate(items):
        try:
            out.append(_encoder.encode(normalize(item, depth)))
        except UnsupportedValue as e:
            raise e.under(f"{{set}}[{i}]") from None
    return out


# ---------------------------------------------------------------- normalise

def normalize(value: Any, depth: int = 0) -> Any:
    """Return ``value`` as plain MessagePack-ready objects in canonical form.

    Accepts None, bool, int, float, str, bytes (bytearray and memoryview read
    back as bytes), list and tuple (read back as list), dict with str keys,
    datetime, UUID, Decimal, set and frozenset (read back as set), Opaque and
    msgspec Ext of the types above. Anything else raises UnsupportedValue.
    """
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is int:
        if INT_MIN <= value <= INT_MAX:
            return value
        return _Ext(EXT_BIGINT, bigint_payload(value))
    if t is float:
        return _NAN if value != value else value
    if t is bytes:
        return value
    if t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise UnsupportedValue(f"nested deeper than {MAX_DEPTH}")
        out = []
        for i, item in enumerate(value):
            try:
                out.append(normalize(item, depth + 1))
            except UnsupportedValue as e:
                raise e.under(f"[{i}]") from None
        return out
    if t is dict:
        if depth >= MAX_DEPTH:
            raise UnsupportedValue(f"nested deeper than {MAX_DEPTH}")
        for key in value:
            if type(key) is not str:
                raise UnsupportedValue(f"map key {key!r} is not a string")
        out_map = {}
        for key in sorted(value):
            try:
                out_map[key] = normalize(value[key], depth + 1)
            except UnsupportedValue as e:
                raise e.under(_key_step(key)) from None
        return out_map
    if t is _Ext:
        return _canonical_ext(value, depth)
    if t is Opaque:
        return _Ext(EXT_OPAQUE, opaque_payload(value.type, value.data))
    if t is _dt.datetime:
        return _Ext(EXT_DATETIME, datetime_payload(value))
    if t is _uuid.UUID:
        return _Ext(EXT_UUID, value.bytes)
    if t is _decimal.Decimal:
        return _Ext(EXT_DECIMAL, str(value).encode("ascii"))
    if t is set or t is frozenset:
        if depth >= MAX_DEPTH:
            raise UnsupportedValue(f"nested deeper than {MAX_DEPTH}")
        return _Ext(EXT_SET, set_payload(_encode_elements(value, depth + 1)))
    if t is bytearray or t is memoryview:
        return bytes(value)
    raise UnsupportedValue(f"unsupported type {t.__module__}.{t.__qualname__}")


# ---------------------------------------------------------------- public API

def encode(value: Any) -> bytes:
    """Return the canonical encoding of a Python value (raises UnsupportedValue)."""
    normal = normalize(value)
    try:
        return _encoder.encode(normal)
    except UnicodeEncodeError:
        raise UnsupportedValue("string is not valid Unicode (lone surrogate)", _find_bad_string(value)) from None


def _find_bad_string(value: Any, path: str = "$") -> str:
    """Return the path of the first string (key or value) that is not valid Unicode."""
    if type(value) is str:
        return path
    if type(value) in (list, tuple):
        children = [(f"[{i}]", v) for i, v in enumerate(value)]
    elif type(value) is dict:
        children = []
        for k, v in value.items():
            try:
                k.encode()
            except UnicodeEncodeError:
                return path + _key_step(k)
            children.append((_key_step(k), v))
    else:
        return path
    for step, item in children:
        try:
            _encoder.encode(normalize(item))
        except UnicodeEncodeError:
            return _find_bad_string(item, path + step)
    return path


def decode_failure(e: Exception) -> str:
    """The reason given for input msgspec cannot decode.

    Our own words, so that the reason (and the golden vectors pinning it) do
    not change with msgspec's error texts between versions.
    """
    text = str(e)
    if isinstance(e, UnicodeDecodeError) or "UTF-8" in text or "utf-8" in text:
        return "not valid MessagePack: a string is not valid UTF-8"
    if "truncated" in text:
        return "not valid MessagePack: the input is truncated"
    if "trailing" in text:
        return "not valid MessagePack: bytes follow the value"
    return "not valid MessagePack: malformed input"


def canonicalize(data: bytes) -> bytes:
    """Return the canonical encoding of any valid encoded value (raises UnsupportedValue)."""
    try:
        value = _raw_decoder.decode(data)
    except RecursionError:
        raise UnsupportedValue(f"nested deeper than {MAX_DEPTH}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # msgspec raises the latter for bad UTF-8
        raise UnsupportedValue(decode_failure(e)) from None
    return _encoder.encode(normalize(value))


def _ext_to_python(code: int, data: memoryview) -> Any:
    data = bytes(data)
    if code == EXT_BIGINT:
        if not data:
            raise UnsupportedValue("empty big int extension")
        return int.from_bytes(data, "big", signed=True)
    if code == EXT_DATETIME:
        _check_datetime_payload(data)
        micros = int.from_bytes(data[1:9], "big", signed=True)
        if data[0] == 0:
            return _EPOCH_NAIVE + _dt.timedelta(microseconds=micros)
        offset = int.from_bytes(data[9:13], "big", signed=True)
        instant = _EPOCH_AWARE + _dt.timedelta(microseconds=micros)
        if data[0] == 2:
            zone = _zone(data[13:].decode())
            if zone is not None:
                return instant.astimezone(zone)
        tz = _dt.timezone.utc if offset == 0 else _dt.timezone(_dt.timedelta(seconds=offset))
        return instant.astimezone(tz)
    if code == EXT_UUID:
        if len(data) != 16:
            raise UnsupportedValue("UUID extension must hold 16 bytes")
        return _uuid.UUID(bytes=data)
    if code == EXT_DECIMAL:
        try:
            return _decimal.Decimal(data.decode("ascii"))
        except (UnicodeDecodeError, _decimal.InvalidOperation):
            raise UnsupportedValue("malformed decimal extension") from None
    if code == EXT_SET:
        items = _python_decoder.decode(data)
        if type(items) is not list:
            raise UnsupportedValue("set extension must hold an array")
        return {_hashable(item) for item in items}
    if code == EXT_OPAQUE:
        if not data or data[0] == 0 or len(data) < 1 + data[0]:
            raise UnsupportedValue("malformed opaque extension")
        n = data[0]
        try:
            name = data[1:1 + n].decode("utf-8", "strict")
        except UnicodeDecodeError:
            raise UnsupportedValue("opaque type is not UTF-8") from None
        return Opaque(name, data[1 + n:])
    raise UnsupportedValue(f"unknown extension type {code}")


def _hashable(value: Any) -> Any:
    """A set element as a Python set can hold it: arrays become tuples, sets frozensets."""
    t = type(value)
    if t is list:
        return tuple(_hashable(item) for item in value)
    if t is set:
        return frozenset(value)  # its elements went through this function already
    if t is dict:
        raise UnsupportedValue("a set holding a map cannot be read back as a Python set")
    return value


def _zone(name: str) -> Any:
    try:
        import zoneinfo

        return zoneinfo.ZoneInfo(name)
    except Exception:  # unknown zone or no tz database: fall back to the fixed offset
        return None


_python_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_to_python)


def decode(data: bytes) -> Any:
    """Return the Python value of an encoding (extension types become Python types).

    Inside a set, arrays read back as tuples and sets as frozensets (a Python
    set can only hold hashable values); a set holding a map raises
    UnsupportedValue.
    """
    return _python_decoder.decode(data)
