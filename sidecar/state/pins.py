"""pins: the pinned items of a namespace (``nspins``) and of a thread (``tpins``) — GetContext's system layer.

At most ``limits.MAX_PINS_PER_SCOPE`` per scope; listed in context order: by position, then pin id (UTF-8
bytes), the namespace's before the thread's.
"""
from __future__ import annotations

from .. import limits
from ..errors import ApiError
from ..storage import layout, records
from ..storage.layout import PinRec
from ..storage.store import Store


def _db_key(store: Store, ns: str, tkey: int | None, pin_id: str):
    if tkey is None:
        return store.db["nspins"], layout.ns_key(ns, pin_id)
    return store.db["tpins"], layout.tkey_str_key(tkey, pin_id)


def etag(rec: PinRec) -> str:
    return f"{rec.created_us:x}-{rec.version}"


def get(txn, store: Store, ns: str, tkey: int | None, pin_id: str) -> PinRec | None:
    db, key = _db_key(store, ns, tkey, pin_id)
    raw = txn.get(key, db=db)
    return None if raw is None else layout.pin_decoder.decode(raw)


def scope(txn, store: Store, ns: str, tkey: int | None) -> list[tuple[str, PinRec]]:
    """(pin_id, record) of one scope in context order."""
    if tkey is None:
        db, prefix = store.db["nspins"], layout.thread_prefix(ns)
    else:
        db, prefix = store.db["tpins"], layout.tkey_prefix(tkey)
    out = []
    cursor = txn.cursor(db=db)
    if cursor.set_range(prefix):
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                break
            out.append((bytes(key[len(prefix):]).decode(), layout.pin_decoder.decode(value)))
    out.sort(key=lambda p: (p[1].position, p[0].encode()))
    return out


def set_(txn, store: Store, ns: str, tkey: int | None, pin_id: str, position: int, kind: int, role: str,
         content: bytes, tool_name: str, tokens, raw: int, expected_etag: str | None, now: int,
         ) -> tuple[PinRec, bool]:
    """Create or replace a pin: (record, created)."""
    old = get(txn, store, ns, tkey, pin_id)
    if expected_etag is not None and expected_etag != (etag(old) if old is not None else ""):
        raise ApiError("ETAG_MISMATCH", f"pin {pin_id!r} has another etag", field="expected_etag",
                       current_etag=etag(old) if old is not None else "")
    if old is None and len(scope(txn, store, ns, tkey)) >= limits.MAX_PINS_PER_SCOPE:
        raise ApiError("LIMIT_EXCEEDED", f"at most {limits.MAX_PINS_PER_SCOPE} pinned items per scope",
                       limit="pins_per_scope", field="pin_id")
    rec = PinRec(layout.FORMAT_VERSION, position, kind, role, content, tool_name, tokens, raw,
                 (old.version + 1) if old is not None else 1, old.created_us if old is not None else now, now)
    db, key = _db_key(store, ns, tkey, pin_id)
    txn.put(key, layout.encode(rec), db=db)
    return rec, old is None


def delete(txn, store: Store, ns: str, tkey: int | None, pin_id: str) -> bool:
    db, key = _db_key(store, ns, tkey, pin_id)
    return txn.delete(key, db=db)


def delete_thread_pins(txn, store: Store, tkey: int) -> None:
    records.delete_prefix(txn, store.db["tpins"], layout.tkey_prefix(tkey))
