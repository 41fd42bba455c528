"""describe: the conformance suite's language-neutral value descriptions <-> Python values.

A description is a JSON object with one tag (see values.json). This is the Python
twin of the TypeScript and Go runners' `fromDesc`.
"""
from __future__ import annotations

import datetime as dt
import decimal
import uuid
import zoneinfo
from typing import Any

from agentstate import Opaque


def parse_datetime(text: str) -> dt.datetime:
    zone = None
    if text.endswith("]"):
        text, zone = text[:-1].split("[", 1)
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if zone is not None:
        zoned = value.astimezone(zoneinfo.ZoneInfo(zone))
        if zoned.utcoffset() != value.utcoffset():
            raise ValueError(f"{text}: offset does not match zone {zone}")
        value = zoned
    return value


def from_desc(d: dict) -> Any:
    (tag, arg), = d.items()
    if tag == "nil":
        return None
    if tag == "bool":
        return bool(arg)
    if tag == "int":
        return int(arg)
    if tag == "float":
        return float(arg)
    if tag == "str":
        return arg
    if tag == "bytes":
        return bytes.fromhex(arg)
    if tag == "list":
        return [from_desc(x) for x in arg]
    if tag == "map":
        return {k: from_desc(v) for k, v in arg.items()}
    if tag == "datetime":
        return parse_datetime(arg)
    if tag == "uuid":
        return uuid.UUID(arg)
    if tag == "decimal":
        return decimal.Decimal(arg)
    if tag == "set":
        return {_hashable(from_desc(x)) for x in arg}
    if tag == "opaque":
        return Opaque(arg["type"], bytes.fromhex(arg["data"]))
    raise ValueError(f"unknown value tag {tag!r}")


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, set):
        return frozenset(v)
    return v
