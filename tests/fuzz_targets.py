"""Fuzz targets: what the sidecar decodes from bytes it did not make (or that a damaged disk changed).

Each target takes one input and raises AssertionError (or lets an unexpected exception through) when
the code under test misbehaves; the exceptions a target expects for bad input are caught here.

- ``codec``: a client's MessagePack value through ``canonicalize`` and ``decompose`` — the compiled
  hot path and its pure-Python twin must agree (same result, or both refuse with UnsupportedValue).
- ``request``: request bodies: the first byte picks PutCheckpoint, PutWrites or BatchWrite, the rest is
  parsed (DecodeError allowed) and validated and converted as the server does (ApiError allowed).
- ``stored``: stored node records (value records, compressed ``z`` nodes, list and map nodes) through the
  readers: both twins must agree, and refuse damage with CorruptNode only (a sealed record they cannot
  open: ApiError ENCRYPTION_KEY_MISSING / ENCRYPTED_RECORD_INVALID, storage/encryption.py).

``scripts/fuzz.py TARGET`` runs one under atheris (coverage-guided); ``tests/test_fuzz_corpus.py`` replays
the committed corpus in ``tests/fuzz_corpus/TARGET/`` in every ``make test``.
"""
from __future__ import annotations

from google.protobuf.message import DecodeError

from agentstate.v1 import threads_pb2 as pb
from sidecar.errors import ApiError
from sidecar.storage import _hotpath_py as py
from sidecar.storage import hotpath

try:
    from sidecar.storage import _hotpath_c as c
except ImportError:  # pragma: no cover - a build without the compiled hot path: the twin alone
    c = None

TWINS = [m for m in (c, py) if m is not None]


def _outcome(fn, *args):
    """('ok', result) or ('refused', exception class name) for the exceptions a reader may raise."""
    try:
        return "ok", fn(*args)
    except (hotpath.UnsupportedValue, py.UnsupportedValue):  # (the twins' messages may differ)
        return "refused", "UnsupportedValue"
    except (hotpath.CorruptNode, py.CorruptNode):
        return "refused", "CorruptNode"
    except ApiError as e:  # a sealed (``e``) record: its key is not loaded, or it does not authenticate
        if e.reason not in ("ENCRYPTION_KEY_MISSING", "ENCRYPTED_RECORD_INVALID"):
            raise
        return "refused", e.reason


def _same(name: str, data: bytes, *args) -> None:
    results = [_outcome(getattr(m, name), data, *args) for m in TWINS]
    assert all(r == results[0] for r in results), f"{name}: the twins differ on {data!r}: {results}"


def codec(data: bytes) -> None:
    _same("canonicalize", data)
    _same("decompose", data)


_REQUESTS = (pb.PutCheckpointRequest, pb.PutWritesRequest, pb.BatchWriteRequest)


def request(data: bytes) -> None:
    if not data:
        return
    cls = _REQUESTS[data[0] % len(_REQUESTS)]
    try:
        req = cls.FromString(data[1:])
    except DecodeError:
        return
    from sidecar.api import checkpoints
    try:
        if cls is pb.PutCheckpointRequest:
            checkpoints.put_input(req)
        elif cls is pb.PutWritesRequest:
            checkpoints.prepare_writes(req)
        else:
            _batch(req)
    except ApiError:
        return


def _batch(req: pb.BatchWriteRequest) -> None:
    from sidecar.api import checkpoints
    for w in req.writes:
        op = w.WhichOneof("op")
        if op == "put_checkpoint":
            checkpoints.put_input(w.put_checkpoint)
        elif op == "put_writes":
            checkpoints.prepare_writes(w.put_writes)


def _fetch_from(data: bytes):
    """Records a reader may follow: the input itself, for the first reference followed (so chunk and child
    references resolve to more fuzzed bytes, not only to 'missing'), then nothing (a missing record)."""
    left = [1]

    def fetch(node_id: bytes):
        if left[0]:
            left[0] -= 1
            return data
        return None
    return fetch


def stored(data: bytes) -> None:
    _same_fetching("stored_encoding", data)
    _same("stored_children", data)
    _same("canonical_node", data, lambda node_id: bytes(32))
    for name in ("stored_list_encodings", "stored_map_entries"):
        if all(hasattr(m, name) for m in TWINS):
            _same_fetching(name, data)


def _same_fetching(name: str, data: bytes) -> None:
    results = [_outcome(getattr(m, name), data, _fetch_from(data)) for m in TWINS]
    assert all(r == results[0] for r in results), f"{name}: the twins differ on {data!r}: {results}"


TARGETS = {"codec": codec, "request": request, "stored": stored}
