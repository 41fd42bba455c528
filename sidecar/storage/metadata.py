"""metadata: the canonical encoding of a metadata map (a thread's, a checkpoint's, a run's, an artifact's).

A metadata map is stored as one canonical MessagePack map of string keys to
encoded values, keys in UTF-8 byte order; here it is handled as
``{key: canonical encoding of the value}``, so merging, filtering and
comparing never decode a value.
"""
from __future__ import annotations

import msgspec

from agentstate.codec import map_header

from .. import limits
from ..errors import limit
from .layout import metadata_decoder

_str_encoder = msgspec.msgpack.Encoder()


def encode(items: dict[str, bytes], field: str) -> bytes:
    """The canonical encoding of ``items`` (within the size limit: LIMIT_EXCEEDED naming ``field``)."""
    keys = sorted(items)
    enc = map_header(len(keys)) + b"".join(_str_encoder.encode(k) + items[k] for k in keys)
    if len(enc) > limits.MAX_METADATA_BYTES:
        raise limit("metadata_bytes", f"{field}: encoded metadata is {len(enc)} bytes, over "
                    f"{limits.MAX_METADATA_BYTES}", field=field)
    return enc


def items(raw: bytes | msgspec.Raw) -> dict[str, bytes]:
    """{key: canonical encoding} of stored metadata."""
    return {k: bytes(v) for k, v in metadata_decoder.decode(raw).items()}


def matches(raw: bytes | msgspec.Raw, wanted: dict[str, bytes]) -> bool:
    """Whether stored metadata holds every key of ``wanted`` with exactly that encoded value."""
    if not wanted:
        return True
    have = metadata_decoder.decode(raw)
    for k, enc in wanted.items():
        got = have.get(k)
        if got is None or bytes(got) != enc:
            return False
    return True
