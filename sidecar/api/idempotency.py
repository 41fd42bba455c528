"""idempotency: request_id handling for mutating calls.

A mutating request with a non-empty ``request_id`` is remembered (in the same
transaction as its effect) with a fingerprint of the request and the response
it got. A retry with the same id and the same request gets that response
again without re-applying; the same id with a different request fails with
REQUEST_ID_REUSED. Records expire after limits.REQUEST_ID_RETENTION_SECONDS
(garbage collection removes them).
"""
from __future__ import annotations

from typing import Any, Callable

from blake3 import blake3

from .. import limits
from ..storage import layout
from . import validate
from ..errors import ApiError
from ..storage.store import now_us


def fingerprint(method: str, request: Any) -> bytes:
    body = request.SerializeToString(deterministic=True)
    return blake3(method.encode() + b"\x00" + body).digest()


def run(txn, db: dict, ns: str, method: str, request: Any, response_type: type,
        apply: Callable[[Any], Any]) -> Any:
    """Apply ``apply(txn)`` once per (namespace, request_id); returns the response message."""
    request_id = validate.ident(getattr(request, "request_id", ""), "request_id", required=False)
    if not request_id:
        return apply(txn)
    key = layout.request_key(ns, request_id)
    fp = fingerprint(method, request)
    raw = txn.get(key, db=db["requests"])
    if raw is not None:
        rec = layout.request_decoder.decode(raw)
        if rec.fingerprint != fp:
            raise ApiError("REQUEST_ID_REUSED", f"request_id {request_id!r} was used for a different request",
                           field="request_id")
        return response_type.FromString(rec.response)
    response = apply(txn)
    created = now_us()
    txn.put(key, layout.encode(layout.RequestRec(1, fp, created, response.SerializeToString())), db=db["requests"])
    txn.put(layout.reqtime_key(created, key), b"", db=db["reqtime"])
    return response


def expire(txn, db: dict, now: int | None = None, max_records: int = 10_000) -> int:
    """Delete request records older than the retention; returns how many went."""
    horizon = (now or now_us()) - limits.REQUEST_ID_RETENTION_SECONDS * 1_000_000
    cursor = txn.cursor(db=db["reqtime"])
    removed = 0
    if not cursor.first():
        return 0
    while removed < max_records:
        key = cursor.key()
        if not key or layout.read_u64(key[:8]) >= horizon:
            break
        txn.delete(bytes(key[8:]), db=db["requests"])
        removed += 1
        cursor.delete()  # moves to the next record (key() is empty past the end)
    return removed
