"""rekey: rewrite an encrypted namespace's sealed records under its current key (``sidecar reencrypt``).

After a key is added (rotation), records sealed with the older keys stay
readable as long as those keys are listed. Re-encrypting rewrites each of the
namespace's sealed records that names another key: opened with its key,
sealed again with the current one (a new nonce), put back under the same node
id, hash and index entry — nothing else of the store changes, so readers see
the same values before, during and after. Then the old key can be removed
from the key file.

It goes through the namespace's records (``nodescope``) in id order, in
transactions of ``batch`` records (each committed by itself, synced): a run
that is stopped loses nothing and a new run resumes, because records already
under the current key are skipped (and ``start_after`` lets it begin past the
last id a run reported). A record whose key is not loaded is counted and left
as it is (it cannot be opened); one that does not authenticate is counted as
damaged and left as it is (``sidecar verify`` names it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import encryption
from ..errors import ApiError
from .store import Store

BATCH = 500

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass
class Summary:
    namespace: str
    key: str = ""  # the current key's name
    records: int = 0  # sealed and plain records of the namespace looked at
    rewritten: int = 0  # sealed with an older key, now with the current one
    current: int = 0  # already under the current key
    plain: int = 0  # structure nodes (lists, maps: hold ids, not values), never sealed
    key_missing: int = 0  # sealed with a key that is not loaded: left as they are
    damaged: int = 0  # did not authenticate: left as they are
    last_id: str = ""  # hex of the last node id looked at (to resume with start_after)
    by_key: dict[str, int] = field(default_factory=dict)  # rewritten records per old key name


def reencrypt(store: Store, namespace: str, *, batch: int = BATCH, start_after: bytes = b"",
              progress: Progress | None = None) -> Summary:
    """Rewrite ``namespace``'s records sealed with older keys under its current key (see the module
    docstring); ENCRYPTION_KEY_MISSING when the namespace has no key loaded."""
    scope = store.scope(namespace)
    if scope is None:
        raise ValueError(f"namespace {namespace!r} is not encrypted (no key in the key file, none ever used)")
    tag = scope.tag()
    current = scope.current
    summary = Summary(namespace, current.name)
    tick = progress or (lambda phase, done, total: None)
    scope_db, node_db = store.db["nodescope"], store.db["nodes"]
    with store.read() as txn:
        ids = [bytes(k) for k, v in txn.cursor(db=scope_db) if bytes(v) == tag and bytes(k) > start_after]
    total = len(ids)
    tick("records", 0, total)

    def job(txn, part: list[bytes]) -> None:
        for node_id in part:
            rec = txn.get(node_id, db=node_db)
            if rec is None:
                continue  # collected since the list was taken
            rec = bytes(rec)
            summary.records += 1
            if not encryption.is_sealed(rec):
                summary.plain += 1
                continue
            kid = encryption.key_id_of(rec)
            if kid == current.id:
                summary.current += 1
                continue
            try:
                plain = encryption.open_record(rec)
            except ApiError as e:
                if e.reason == "ENCRYPTION_KEY_MISSING":
                    summary.key_missing += 1
                else:
                    summary.damaged += 1
                continue
            old = store.keys.by_id.get(kid) if store.keys is not None else None
            name = old.name if old is not None else kid.hex()
            h = plain[:encryption.HASH_SIZE]
            txn.put(node_id, h + current.seal(h, plain[encryption.HASH_SIZE:]), db=node_db)
            summary.rewritten += 1
            summary.by_key[name] = summary.by_key.get(name, 0) + 1

    for i in range(0, total, batch):
        part = ids[i:i + batch]
        store.write(lambda txn, part=part: job(txn, part), durability="sync")
        summary.last_id = part[-1].hex()
        tick("records", i + len(part), total)
    return summary
