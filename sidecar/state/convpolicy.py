"""convpolicy: the conversation policies of a namespace (``nsconf``) and a thread's own idle policy.

A namespace's idle policy is a NsConvConf row; a thread's own idle policy lives in its ThreadRec
(``idle_ttl_ms`` -1: inherit, 0: never, and ``idle_action``), so that storage/records.py can tell an
expired thread from the thread record alone (and the namespace's row, cached per namespace). The compaction
policy (``CompactionPolicy``) is kept as a tuple of its fields in FIELDS order, None for an unset field,
in the namespace's row or the thread's ``tconf`` row; the policy in effect is the thread's, else the
namespace's, else the default, its unset fields filled from DEFAULTS.
"""
from __future__ import annotations

from ..errors import invalid
from ..storage import layout, records
from ..storage.layout import NsConvConf, ThreadConvConf, ThreadRec
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


# ----------------------------------------------------------------- compaction policy

FIELDS = ("disabled", "trigger_items", "compact_items", "keep_last_items", "max_summary_chars", "pyramid_fan_in",
          "pyramid_keep_last", "max_levels", "fallback_after_ms", "lease_timeout_ms", "max_compact_chars")
DEFAULTS = (False, 20, 15, 5, 200, 4, 1, 8, 60_000, 60_000, 200)
#: (min, max) of each numeric field (docs/conversations.md, CompactionPolicy comments)
BOUNDS = {"trigger_items": (2, 100_000), "compact_items": (1, 100_000), "keep_last_items": (0, 10_000),
          "max_summary_chars": (16, 65_536), "pyramid_fan_in": (2, 1000), "pyramid_keep_last": (0, 1000),
          "max_levels": (1, 16), "fallback_after_ms": (0, 7 * 86_400_000), "lease_timeout_ms": (1000, 3_600_000),
          "max_compact_chars": (16, 65_536)}


class Policy:
    """A compaction policy with every field filled (attributes named as FIELDS)."""

    __slots__ = FIELDS

    def __init__(self, values: tuple) -> None:
        for name, v, d in zip(FIELDS, values, DEFAULTS):
            setattr(self, name, d if v is None else v)

    def as_tuple(self) -> tuple:
        return tuple(getattr(self, f) for f in FIELDS)


def check(values: tuple, field: str) -> tuple:
    """A policy tuple within its bounds (raises INVALID_ARGUMENT naming ``field.<name>``)."""
    filled = Policy(values)
    for name, (lo, hi) in BOUNDS.items():
        v = getattr(filled, name)
        if not lo <= v <= hi:
            raise invalid(f"{field}.{name.removesuffix('_ms')}",
                          f"must be from {lo} to {hi}")
    if filled.compact_items + filled.keep_last_items > filled.trigger_items:
        raise invalid(f"{field}.compact_items", "compact_items + keep_last_items must not exceed trigger_items")
    return tuple(values)


def thread_conf(txn, store: Store, tkey: int) -> ThreadConvConf | None:
    raw = txn.get(layout.u64(tkey), db=store.db["tconf"])
    return None if raw is None else layout.tconf_decoder.decode(raw)


def set_ns_compaction(txn, store: Store, ns: str, values: tuple | None) -> None:
    conf = ns_conf(txn, store, ns) or NsConvConf(layout.FORMAT_VERSION, None, None, None)
    conf.compaction = values
    if conf.idle is None and conf.compaction is None and conf.walk_from is None:
        txn.delete(ns.encode(), db=store.db["nsconf"])
    else:
        txn.put(ns.encode(), layout.encode(conf), db=store.db["nsconf"])


def set_thread_compaction(txn, store: Store, tkey: int, values: tuple | None) -> None:
    if values is None:
        txn.delete(layout.u64(tkey), db=store.db["tconf"])
    else:
        txn.put(layout.u64(tkey), layout.encode(ThreadConvConf(layout.FORMAT_VERSION, values)), db=store.db["tconf"])


def compaction(txn, store: Store, ns: str, tkey: int | None) -> tuple[Policy, int, tuple | None]:
    """(the policy in effect, its PolicySource, the scope's own values) for a thread (or, with tkey None, a
    namespace)."""
    if tkey is not None:
        tc = thread_conf(txn, store, tkey)
        if tc is not None and tc.compaction is not None:
            return Policy(tuple(tc.compaction)), records.SOURCE_THREAD, tuple(tc.compaction)
    conf = ns_conf(txn, store, ns)
    if conf is not None and conf.compaction is not None:
        own = tuple(conf.compaction) if tkey is None else None
        return Policy(tuple(conf.compaction)), records.SOURCE_NAMESPACE, own
    return Policy((None,) * len(FIELDS)), records.SOURCE_DEFAULT, None


def delete_thread_conf(txn, store: Store, tkey: int) -> None:
    txn.delete(layout.u64(tkey), db=store.db["tconf"])
