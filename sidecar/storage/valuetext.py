"""valuetext: what the conversation layer reads from a stored value without a resource rule — the server's
token estimate of an item (docs/conversations.md "Token counts").

``json_len(encoding)`` is ``J``: the length in bytes of a JSON-like rendering of a canonical encoding
(strings 2 + UTF-8 length, numbers their decimal text, null/true/false 4/4/5, lists and sets 2 + elements +
separators, maps 2 + keys and values + separators, bytes as base64 in quotes, datetimes 34, UUIDs 38,
decimals and big ints their text + 2, opaque values their base64 + type). ``estimate`` adds the item's
strings and 8 format tokens. In a byte-level BPE tokenizer every token covers at least one byte, so the
estimate never counts fewer tokens than the text it stands for.
"""
from __future__ import annotations

import msgspec

EXT_BIGINT, EXT_DATETIME, EXT_UUID, EXT_DECIMAL, EXT_SET, EXT_OPAQUE = 1, 2, 3, 4, 5, 6
FORMAT_TOKENS = 8


class _Ext:
    __slots__ = ("code", "data")

    def __init__(self, code: int, data: memoryview) -> None:
        self.code = code
        self.data = bytes(data)


_decoder = msgspec.msgpack.Decoder(ext_hook=_Ext)


def _b64(n: int) -> int:
    return 2 + 4 * ((n + 2) // 3)


def _len(v) -> int:
    t = type(v)
    if t is str:
        return 2 + len(v.encode())
    if t is bool:
        return 4 if v else 5
    if v is None:
        return 4
    if t is int:
        return len(str(v))
    if t is float:
        return len(repr(v))
    if t is list:
        return 2 + sum(_len(x) for x in v) + max(len(v) - 1, 0)
    if t is dict:
        return 2 + sum(_len(k) + 1 + _len(x) for k, x in v.items()) + max(len(v) - 1, 0)
    if t is bytes:
        return _b64(len(v))
    if t is _Ext:
        code, data = v.code, v.data
        if code == EXT_BIGINT:
            return len(str(int.from_bytes(data, "big", signed=True))) + 2
        if code == EXT_DATETIME:
            return 34 + (len(data) - 13 + 2 if len(data) > 13 else 0)  # "[Zone]" when a zone is named
        if code == EXT_UUID:
            return 38
        if code == EXT_DECIMAL:
            return len(data) + 2
        if code == EXT_SET:
            return _len(_decoder.decode(data))
        if code == EXT_OPAQUE:
            return _b64(len(data)) + len(data)  # base64 of the data, the type name inside it at most
        return _b64(len(data))
    return _b64(len(msgspec.msgpack.encode(v)))  # nothing else decodes from a canonical encoding


def json_len(encoding: bytes) -> int:
    """``J`` of a canonical encoding."""
    return _len(_decoder.decode(encoding))


def estimate(encoding: bytes, role: str = "", call_id: str = "", tool_name: str = "") -> int:
    """The server's conservative token estimate of an item (``raw``)."""
    return FORMAT_TOKENS + json_len(encoding) + len(role.encode()) + len(call_id.encode()) + len(
        tool_name.encode())
