"""valuetext: what the conversation layer reads from a stored value without a resource rule — the server's
token estimate of an item (docs/conversations.md "Token counts").

``json_len(encoding)`` is ``J``: the length in bytes of a JSON-like rendering of a canonical encoding
(strings the UTF-8 length of their JSON form, escapes counted; numbers their decimal text, null/true/false 4/4/5, lists and sets 2 + elements +
separators, maps 2 + keys and values + separators, bytes as base64 in quotes, datetimes 34, UUIDs 38,
decimals and big ints their text + 2, opaque values their base64 + type). ``estimate`` adds the item's
strings and 8 format tokens. In a byte-level BPE tokenizer every token covers at least one byte, so the
estimate never counts fewer tokens than the text it stands for.
"""
from __future__ import annotations

import json as _json

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
        return len(_json.dumps(v, ensure_ascii=False).encode())  # quotes and escapes included
    if t is bool:
        return 4 if v else 5
    if v is None:
        return 4
    if t is int:
        return len(str(v))
    if t is float:
        return len(repr(v)) if v - v == 0 else len(_render(v))  # NaN and the infinities as rendered: quoted names
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


# ----------------------------------------------------------------- text_of (fallback summaries, compression)

_TEXT_KEYS = ("text", "content", "output", "arguments", "summary")


def _render(v) -> str:
    """The compact JSON rendering (docs/conversations.md "The fallback summary")."""
    t = type(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        if v != v:
            return '"NaN"'
        if v in (float("inf"), float("-inf")):
            return '"Infinity"' if v > 0 else '"-Infinity"'
        return repr(v)
    if t is str:
        return _json.dumps(v, ensure_ascii=False)
    if t is list:
        return "[" + ",".join(_render(x) for x in v) + "]"
    if t is dict:
        keys = sorted(v, key=lambda k: k.encode() if isinstance(k, str) else _render(k).encode())
        return "{" + ",".join(_json.dumps(k if isinstance(k, str) else _render(k), ensure_ascii=False) + ":"
                              + _render(v[k]) for k in keys) + "}"
    if t is bytes:
        return f'"<{len(v)} bytes>"'
    if t is _Ext:
        if v.code == EXT_BIGINT:  # an integer in decimal, like every int
            return str(int.from_bytes(v.data, "big", signed=True))
        return _json.dumps(_ext_text(v), ensure_ascii=False) if v.code != EXT_SET else _render(
            sorted(_decoder.decode(v.data), key=_render))
    return _json.dumps(str(v), ensure_ascii=False)


def _ext_text(v: _Ext) -> str:
    from agentstate import codec
    if v.code == EXT_OPAQUE:
        n = v.data[0] if v.data else 0
        return f"<opaque {v.data[1:1 + n].decode(errors='replace')}, {len(v.data) - 1 - n} bytes>"
    try:
        value = codec.decode(msgspec.msgpack.encode(msgspec.msgpack.Ext(v.code, v.data)))
    except Exception:  # noqa: BLE001 - a malformed extension is shown by its size
        return f"<{len(v.data)} bytes>"
    if hasattr(value, "isoformat"):
        text = value.isoformat()
        key = getattr(getattr(value, "tzinfo", None), "key", None)
        return f"{text}[{key}]" if key else text
    return str(value)


def _text_of(v, depth: int = 0) -> str:
    t = type(v)
    if v is None:
        return ""
    if t is str:
        s = v.lstrip()
        if s[:1] in ("{", "[") and depth < 64:
            try:
                parsed = _json.loads(v, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                return v
            return _text_of(_from_json(parsed), depth + 1)
        return v
    if t is list or (t is _Ext and v.code == EXT_SET):
        items = v if t is list else _decoder.decode(v.data)
        return "\n".join(x for x in (_text_of(i, depth + 1) for i in items) if x)
    if t is dict:
        for k in _TEXT_KEYS:
            if k in v:
                got = _text_of(v[k], depth + 1)
                if got:
                    return got
        return _render(v)
    return _render(v)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _from_json(v):
    return v  # json.loads already gives str/int/float/bool/None/list/dict (the last of a repeated key wins)


def text_of(encoding: bytes) -> str:
    """The text of a canonical encoding (docs/conversations.md "The fallback summary")."""
    return _text_of(_decoder.decode(encoding))


def cut(text: str, n: int) -> str:
    """``text`` within ``n`` code points: a longer one keeps its first n - 1 and gets an ellipsis."""
    return text if len(text) <= n else text[:n - 1] + "\u2026"
