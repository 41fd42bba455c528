"""layout: the LMDB layout — sub-databases, key encodings and record formats.

One LMDB environment holds these named sub-databases (docs/storage.md):

``meta``      b"format" -> format version; b"next_tkey" -> u64 counter
``nodes``     node id (u64 BE, increasing) -> record: hash + stored node (see _hotpath_py)
``hashes``    blake3 hash (32 bytes) -> node id
``threads``   ns NUL thread_id -> ThreadRec
``ckpts``     tkey(u64 BE) cns NUL checkpoint_id -> Manifest
``writes``    tkey cns NUL checkpoint_id NUL task_id NUL idx(u32 BE, offset 2**31) -> WriteRec
``runidx``    ns NUL run_id NUL tkey cns NUL checkpoint_id -> b""
``requests``  ns NUL request_id -> RequestRec (idempotent retries)
``reqtime``   created_us(u64 BE) ns NUL request_id -> b"" (expiry order)

Threads get an internal key (``tkey``) when created, so the per-thread tables
use a short fixed-width prefix and a deleted-then-recreated thread never sees
old records. Identifiers never contain NUL (validate.py), so NUL separates
key parts and prefix scans are exact. Checkpoint keys sort by id within
(thread, checkpoint_ns): the latest is the last key of the prefix.

Records are msgspec Structs encoded as MessagePack arrays whose first field is
the record format version; readers accept every version ever written.
"""
from __future__ import annotations

import struct
from typing import Any
import uuid

import msgspec
from blake3 import blake3

FORMAT_VERSION = 1
FORMAT_NAME = "agentstate-lmdb-1"

DB_NAMES = ("meta", "nodes", "hashes", "threads", "ckpts", "writes", "runidx", "requests", "reqtime")

SEP = b"\x00"
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


class ThreadRec(msgspec.Struct, array_like=True):
    fmt: int
    tkey: int
    created_us: int
    updated_us: int
    metadata: msgspec.Raw  # canonical MessagePack map
    version: int
    status: int


class Manifest(msgspec.Struct, array_like=True):
    fmt: int
    parent: Any  # parent checkpoint id packed by pack_id (str, or 16 UUID bytes)
    created_us: int
    metadata: msgspec.Raw  # canonical MessagePack map
    channels: list[tuple[str, bytes]]  # (name, root node id), sorted by name; the hash is in the record
    extra: bytes | None  # node id of the checkpoint's extra value, if any
    schema_version: int
    run_id: str | None  # metadata["run_id"] when it is a string (indexed in runidx)

    @property
    def parent_id(self) -> str:
        return unpack_id(self.parent)


class WriteRec(msgspec.Struct, array_like=True):
    fmt: int
    channel: str
    value: bytes  # node id of the value
    task_path: str


class RequestRec(msgspec.Struct, array_like=True):
    fmt: int
    fingerprint: bytes
    created_us: int
    response: bytes  # serialized response message


EMPTY_MAP = msgspec.Raw(b"\x80")

_enc = msgspec.msgpack.Encoder()
thread_decoder = msgspec.msgpack.Decoder(ThreadRec)
manifest_decoder = msgspec.msgpack.Decoder(Manifest)
write_decoder = msgspec.msgpack.Decoder(WriteRec)
request_decoder = msgspec.msgpack.Decoder(RequestRec)
metadata_decoder = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])
encode = _enc.encode


def u64(n: int) -> bytes:
    return _U64.pack(n)


def read_u64(b: bytes) -> int:
    return _U64.unpack(b)[0]


# ----------------------------------------------------------------- keys

def thread_key(ns: str, thread_id: str) -> bytes:
    return ns.encode() + SEP + thread_id.encode()


def thread_prefix(ns: str) -> bytes:
    return ns.encode() + SEP


def thread_id_of(key: bytes, ns_prefix_len: int) -> str:
    return bytes(key[ns_prefix_len:]).decode()


def tkey_prefix(tkey: int) -> bytes:
    return _U64.pack(tkey)


def cns_prefix(tkey: int, cns: str) -> bytes:
    return _U64.pack(tkey) + cns.encode() + SEP


def ckpt_key(tkey: int, cns: str, checkpoint_id: str) -> bytes:
    return _U64.pack(tkey) + cns.encode() + SEP + checkpoint_id.encode()


def split_ckpt_key(key: bytes) -> tuple[int, str, str]:
    """Return (tkey, cns, checkpoint_id) of a ckpts key."""
    key = bytes(key)
    sep = key.index(SEP, 8)
    return _U64.unpack_from(key)[0], key[8:sep].decode(), key[sep + 1:].decode()


def writes_prefix(tkey: int, cns: str, checkpoint_id: str) -> bytes:
    return ckpt_key(tkey, cns, checkpoint_id) + SEP


def write_key(tkey: int, cns: str, checkpoint_id: str, task_id: str, idx: int) -> bytes:
    return writes_prefix(tkey, cns, checkpoint_id) + task_id.encode() + SEP + _U32.pack(idx + 2**31)


def split_write_suffix(suffix: bytes) -> tuple[str, int]:
    """Return (task_id, idx) from the part of a writes key after its prefix."""
    suffix = bytes(suffix)
    return suffix[:-5].decode(), _U32.unpack(suffix[-4:])[0] - 2**31


def split_write_key(key: bytes) -> tuple[int, str, str, str, int]:
    """Return (tkey, cns, checkpoint_id, task_id, idx) of a writes key."""
    key = bytes(key)
    sep1 = key.index(SEP, 8)
    sep2 = key.index(SEP, sep1 + 1)
    task_id, idx = split_write_suffix(key[sep2 + 1:])
    return _U64.unpack_from(key)[0], key[8:sep1].decode(), key[sep1 + 1:sep2].decode(), task_id, idx


def run_prefix(ns: str, run_id: str) -> bytes:
    return ns.encode() + SEP + run_id.encode() + SEP


def run_key(ns: str, run_id: str, tkey: int, cns: str, checkpoint_id: str) -> bytes:
    return run_prefix(ns, run_id) + ckpt_key(tkey, cns, checkpoint_id)


def request_key(ns: str, request_id: str) -> bytes:
    return ns.encode() + SEP + request_id.encode()


def reqtime_key(created_us: int, req_key: bytes) -> bytes:
    return _U64.pack(created_us) + req_key


# ----------------------------------------------------------------- records

def pack_id(checkpoint_id: str) -> str | bytes:
    """A canonical lowercase UUID string is kept as its 16 bytes; anything else as the string."""
    if len(checkpoint_id) == 36:
        try:
            u = uuid.UUID(checkpoint_id)
        except ValueError:
            return checkpoint_id
        if str(u) == checkpoint_id:
            return u.bytes
    return checkpoint_id


def unpack_id(packed: str | bytes) -> str:
    return str(uuid.UUID(bytes=packed)) if isinstance(packed, bytes) else packed


def checkpoint_etag(checkpoint_id: str, parent_id: str, metadata: bytes, roots: list[tuple[str, bytes]],
                    extra: bytes | None, schema_version: int) -> str:
    """Content hash of a checkpoint (hex): ids, parent, metadata, (channel, root hash) pairs, extra hash."""
    core = _enc.encode((checkpoint_id, parent_id, msgspec.Raw(metadata), roots, extra, schema_version))
    return blake3(b"agentstate.v1 checkpoint" + core).hexdigest()


def thread_etag(rec: ThreadRec) -> str:
    return f"{rec.tkey:x}-{rec.version}"


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)
