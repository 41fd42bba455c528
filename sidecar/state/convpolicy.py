"""convpolicy: the conversation policies of a namespace (``nsconf``) and a thread's own idle policy.

A namespace's idle policy is a NsConvConf row; a thread's own idle policy lives in its ThreadRec
(``idle_ttl_ms`` -1: inherit, 0: never, and ``idle_action``), so that storage/records.py can tell an
expired thread from the thread record alone (and the namespace's row, cached per namespace). The compaction
policy of docs/conversations.md is designed but not served yet.
"""
from __future__ import annotations

from ..storage import layout, records
from ..storage.layout import NsConvConf, ThreadRec
from ..storage.store import Store


def ns_conf(txn, store: Store, ns: str) -> NsConvConf | None:
    raw = txn.get(ns.encode(), db=store.db["nsconf"])
    return None if raw is None else layout.nsconf_decoder.decode(raw)


def set_ns_idle(txn, store: Store, ns: str, policy: tuple[int, int] | None) -> None:
    """Set (or with None clear) a namespace's idle policy; the sweeper then walks the namespace's threads to
    place their idle rows (``walk_from``)."""
    conf = ns_conf(txn, store, ns) or NsConvConf(layout.FORMAT_VERSION, None, None, None)
    conf.idle = policy
    conf.walk_from = "" if policy is not None else None
    if conf.idle is None and conf.compaction is None:
        txn.delete(ns.encode(), db=store.db["nsconf"])
    else:
        txn.put(ns.encode(), layout.encode(conf), db=store.db["nsconf"])
    store.ns_idle_cache.pop(ns, None)


def set_walk(txn, store: Store, ns: str, walk_from: str | None) -> None:
    conf = ns_conf(txn, store, ns)
    if conf is not None:
        conf.walk_from = walk_from
        txn.put(ns.encode(), layout.encode(conf), db=store.db["nsconf"])


def walks(txn, store: Store) -> list[tuple[str, str]]:
    """(ns, walk_from) of the namespaces whose threads the sweeper still has to walk."""
    out = []
    cursor = txn.cursor(db=store.db["nsconf"])
    if cursor.first():
        for key, value in cursor.iternext():
            conf = layout.nsconf_decoder.decode(value)
            if conf.walk_from is not None:
                out.append((bytes(key).decode(), conf.walk_from))
    return out


def set_thread_idle(txn, store: Store, ns: str, thread_id: str, rec: ThreadRec, policy: tuple[int, int] | None,
                    ) -> None:
    """Set a thread's own idle policy (None: inherit its namespace's)."""
    if policy is None:
        rec.idle_ttl_ms, rec.idle_action = -1, 0
    else:
        rec.idle_ttl_ms, rec.idle_action = policy
    records.save_thread(txn, store, ns, thread_id, rec)
