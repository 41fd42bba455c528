"""calibration: a thread's usage reports (``ccalib``) and the factor that scales the server's token estimate
(docs/conversations.md "Token counts": f = clamp(1.1 × max (input - client) / raw, 1/16, 4), 1 without
reports; the last 16 reports, one per context hash)."""
from __future__ import annotations

from ..storage import layout
from ..storage.layout import CalibRec
from ..storage.store import Store

MAX_REPORTS = 16


def get(txn, store: Store, tkey: int) -> CalibRec | None:
    raw = txn.get(layout.u64(tkey), db=store.db["ccalib"])
    return None if raw is None else layout.calib_decoder.decode(raw)


def factor(txn, store: Store, tkey: int) -> float:
    rec = get(txn, store, tkey)
    return 1.0 if rec is None else rec.factor


def compute(reports) -> float:
    ratios = [(actual - client) / raw for _, raw, client, actual in reports if raw > 0]
    if not ratios:
        return 1.0
    return min(max(1.1 * max(ratios), 1 / 16), 4.0)


def report(txn, store: Store, tkey: int, context_hash: bytes, raw: int, client: int, actual: int) -> CalibRec:
    rec = get(txn, store, tkey) or CalibRec(layout.FORMAT_VERSION, [], 1.0)
    reports = [r for r in rec.reports if bytes(r[0]) != context_hash]
    reports.append((context_hash, raw, client, actual))
    rec.reports = reports[-MAX_REPORTS:]
    rec.factor = compute(rec.reports)
    txn.put(layout.u64(tkey), layout.encode(rec), db=store.db["ccalib"])
    return rec


def delete_thread_calibration(txn, store: Store, tkey: int) -> None:
    txn.delete(layout.u64(tkey), db=store.db["ccalib"])
