"""wire: conversion between API messages and what the store holds.

Values (proto ``Value``) become canonical encodings and trees; stored
encodings become ``Value`` messages again; timestamps and page tokens are
converted here too. Errors name the request field (and the path inside a
value) at fault.
"""
from __future__ import annotations

import base64
from typing import Callable, Iterable

import msgspec
from blake3 import blake3
from google.protobuf import timestamp_pb2

from agentstate.v1 import values_pb2

from ..storage import hotpath as hp
from .. import limits
from ..storage import metadata, nodes, reads
from ..errors import invalid, limit
from ..storage.layout import metadata_decoder

Value = values_pb2.Value
Fetch = Callable[[bytes], bytes]


# ----------------------------------------------------------------- values in
# (the walk is the hot path's: storage/hotpath.py wire_*, compiled, one call per value or per put)

def value_encoding(v: Value, field: str, depth: int = 0) -> bytes:
    """Canonical encoding of a whole Value (items and entries included)."""
    return hp.wire_encoding(v, field, depth)


def value_tree(v: Value, field: str, nodes: list) -> bytes:
    """Store a channel value as a tree (lists and maps item by item); return its root hash."""
    return hp.wire_tree(v, field, nodes)


def item_encodings(items: Iterable[Value], field: str) -> list[bytes]:
    return hp.wire_items(items, field)


def metadata_encoding(entries, field: str) -> bytes:
    """Canonical encoding of a metadata map (map<string, Value>), within the size limit."""
    return metadata.encode(metadata_items(entries, field), field)


def metadata_items(entries, field: str) -> dict[str, bytes]:
    """{key: canonical encoding} of a map<string, Value> (for filters and merges)."""
    return hp.wire_entries(entries, field)


# ----------------------------------------------------------------- values out

def set_value(out: Value, encoding: bytes) -> None:
    """Fill ``out`` with a stored encoding (opaque values come back as opaque)."""
    parts = hp.opaque_parts(encoding)
    if parts is None:
        out.msgpack = encoding
    else:
        out.opaque.type, out.opaque.data = parts


def read_value(out: Value, root_id: bytes, fetch: Fetch) -> None:
    """Fill ``out`` with the value whose root node has id ``root_id`` (``fetch``: id -> record)."""
    rec = nodes.record(fetch, root_id)
    tag = rec[hp.HASH_SIZE]
    if tag == hp.TAG_LIST:  # the ListValue's wire bytes in one call (storage/reads.py), parsed once
        out.list.SetInParent()
        out.list.MergeFromString(reads.list_wire(rec, fetch))
    elif tag == hp.TAG_MAP or tag == hp.TAG_MAP_INNER:
        out.map.SetInParent()
        entries = out.map.entries
        for k, node_id in hp.stored_map_entries(rec, fetch):
            set_value(entries[k], hp.stored_encoding(nodes.record(fetch, node_id), fetch))
    else:
        set_value(out, hp.stored_encoding(rec, fetch))


def fill_metadata(out_map, raw: bytes | msgspec.Raw) -> None:
    for k, enc in metadata_decoder.decode(raw).items():
        set_value(out_map[k], bytes(enc))


# ----------------------------------------------------------------- timestamps

def set_timestamp(ts: timestamp_pb2.Timestamp, micros: int) -> None:
    ts.seconds, rest = divmod(micros, 1_000_000)
    ts.nanos = rest * 1000


def timestamp_us(ts: timestamp_pb2.Timestamp, field: str) -> int:
    if not 0 <= ts.nanos < 1_000_000_000:
        raise invalid(field, "nanos out of range")
    return ts.seconds * 1_000_000 + ts.nanos // 1000


# ----------------------------------------------------------------- page tokens

_token_encoder = msgspec.msgpack.Encoder()
_token_decoder = msgspec.msgpack.Decoder(tuple)


def fingerprint(*parts: object) -> bytes:
    """Short hash of the request fields a page token is bound to."""
    return blake3(_token_encoder.encode(parts)).digest()[:8]


def make_token(fp: bytes, position: tuple) -> str:
    return base64.urlsafe_b64encode(_token_encoder.encode((1, fp, position))).decode().rstrip("=")


def read_token(token: str, fp: bytes, field: str = "page_token") -> tuple | None:
    """The position in a page token (None for an empty token); INVALID_ARGUMENT if foreign."""
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        version, got_fp, position = _token_decoder.decode(raw)
    except Exception:
        raise invalid(field, "malformed page token") from None
    if version != 1 or got_fp != fp or not isinstance(position, (list, tuple)):
        raise invalid(field, "page token does not belong to this request (filters changed?)")
    return tuple(position)


_DURABILITY = {0: None, 1: "sync", 2: "process"}


def durability(value: int, field: str = "durability") -> str | None:
    """A request's Durability as the store's name for it (None: the server's mode)."""
    try:
        return _DURABILITY[value]
    except KeyError:
        raise invalid(field, f"unknown durability {value}") from None


# ----------------------------------------------------------------- small fields of runs, steps, events, effects

MAX_COUNTER = 2**62  # per counter of one step or budget (sums saturate below 2**63)
MAX_COST = 1e18
#: Timestamps the API accepts: years 1 to 9999 (as google.protobuf.Timestamp documents).
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799


def counters_of(c, field: str):
    """A ResourceCounters message as the stored counters tuple (tokens in/out, cost, wall ms, requests)."""
    if not (0 <= c.cost <= MAX_COST):
        raise invalid(f"{field}.cost", f"must be a number from 0 to {MAX_COST:g}")
    for name in ("tokens_in", "tokens_out", "wall_time_ms", "requests"):
        if getattr(c, name) > MAX_COUNTER:
            raise invalid(f"{field}.{name}", f"at most {MAX_COUNTER}")
    return (c.tokens_in, c.tokens_out, float(c.cost), c.wall_time_ms, c.requests)


def fill_counters(out, c) -> None:
    out.tokens_in, out.tokens_out, out.cost, out.wall_time_ms, out.requests = c


def bounded_timestamp_us(ts, field: str) -> int:
    """Microseconds of a Timestamp within years 1..9999 (INVALID_ARGUMENT otherwise)."""
    if not MIN_SECONDS <= ts.seconds <= MAX_SECONDS:
        raise invalid(field, "out of range (years 1 to 9999)")
    return timestamp_us(ts, field)


def payload(v, field: str) -> bytes | None:
    """Canonical encoding of an optional small Value (events, step bodies, outcomes)."""
    if v is None or v.WhichOneof("kind") is None:
        return None
    enc = value_encoding(v, field)
    if len(enc) > limits.MAX_PAYLOAD_BYTES:
        raise limit("payload_bytes", f"{field}: encoded value is {len(enc)} bytes, over {limits.MAX_PAYLOAD_BYTES}",
                    field=field)
    return enc


def has_value(msg, name: str) -> bool:
    return msg.HasField(name) and getattr(msg, name).WhichOneof("kind") is not None
