"""Probe how LangGraph's reference stores behave where the BaseStore contract leaves room.

Runs one list of cases against InMemoryStore, SqliteStore and PostgresStore (on a throwaway
PostgreSQL cluster, as benchmarks/bench_langgraph_chat.py starts it; skipped with a printed reason
when PostgreSQL is not installed) and prints, per case, what each store returned: the keys a filter
matched (in the order returned), or the exception type. docs/memory.md quotes this output; run it
again after upgrading langgraph-checkpoint*, and update the tables there when a line changes.

    .venv/bin/python scripts/probe_store_semantics.py            # all cases
    .venv/bin/python scripts/probe_store_semantics.py --no-postgres

SqliteStore's vector search loads the sqlite-vec extension, which this Python's sqlite3 cannot
(built without loadable extensions): the vector cases use pysqlite3-binary's sqlite3 when it is
importable (pip install pysqlite3-binary) and print "not run" otherwise.

This is research tooling for the memory design (issue 13), not part of the sidecar.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from langgraph.store.base import BaseStore  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

NS = ("probe",)

# Items of the filter cases: deliberately mixed types, missing fields, nested maps, a key with a dot.
ITEMS: dict[str, dict[str, Any]] = {
    "i1": {"n": 1, "s": "apple", "b": True, "nested": {"k": 1, "j": 2}, "l": [1, 2], "sn": "10"},
    "i10": {"n": 10, "s": "banana", "b": False, "nested": {"k": 2}, "l": [1], "sn": "9"},
    "f2": {"n": 2.0, "s": "cherry", "nested": {"k": 1}},
    "s3": {"n": "3", "s": "Date"},
    "none": {"n": None},
    "true": {"n": True},
    "empty": {},
    "dotted": {"a.b": 5, "a": {"b": 7}},
}

FILTERS: list[tuple[str, dict[str, Any]]] = [
    ("eq plain int", {"n": 1}),
    ("eq $eq int", {"n": {"$eq": 1}}),
    ("eq float 1.0", {"n": 1.0}),
    ("eq float 2 (stored 2.0)", {"n": 2}),
    ("eq True", {"n": True}),
    ("eq None", {"n": None}),
    ("eq $eq None", {"n": {"$eq": None}}),
    ("eq string", {"s": "apple"}),
    ("eq list", {"l": [1, 2]}),
    ("eq nested partial", {"nested": {"k": 1}}),
    ("eq nested full", {"nested": {"k": 1, "j": 2}}),
    ("dotted key 'nested.k'", {"nested.k": 1}),
    ("dotted key 'a.b' (literal key 5, path 7)", {"a.b": 5}),
    ("dotted key 'a.b' = 7", {"a.b": 7}),
    ("$ne 1", {"n": {"$ne": 1}}),
    ("$ne None", {"n": {"$ne": None}}),
    ("$gt 2", {"n": {"$gt": 2}}),
    ("$gte 2", {"n": {"$gte": 2}}),
    ("$lt 3", {"n": {"$lt": 3}}),
    ("$gt 5 on numeric strings", {"sn": {"$gt": 5}}),
    ("$gt '5' on numeric strings", {"sn": {"$gt": "5"}}),
    ("$gt 'b' on strings", {"s": {"$gt": "b"}}),
    ("$gt 0 and $lt 5", {"n": {"$gt": 0, "$lt": 5}}),
    ("$in [1, 10]", {"n": {"$in": [1, 10]}}),
    ("$or", {"$or": [{"n": 1}, {"n": 10}]}),
    ("$and", {"$and": [{"n": 1}]}),
    ("two keys (implicit and)", {"n": 1, "s": "apple"}),
]


def make_inmemory() -> Iterator[BaseStore]:
    yield InMemoryStore()


def make_inmemory_index() -> Iterator[BaseStore]:
    yield InMemoryStore(index=INDEX)


def make_sqlite(ttl: dict | None = None, index: dict | None = None) -> Iterator[BaseStore]:
    from langgraph.store.sqlite import SqliteStore

    import sqlite3

    with tempfile.TemporaryDirectory() as d:
        if index is not None and not hasattr(sqlite3.Connection, "enable_load_extension"):
            # This Python's sqlite3 cannot load extensions (sqlite-vec): use pysqlite3-binary's.
            import pysqlite3.dbapi2 as sqlite3  # type: ignore[no-redef]
        conn = sqlite3.connect(str(Path(d) / "s.db"), isolation_level=None, check_same_thread=False)
        try:
            store = SqliteStore(conn, ttl=ttl, index=index)
            store.setup()
            yield store
        finally:
            conn.close()


class _PG:
    cluster = None
    n = 0


def make_postgres(ttl: dict | None = None) -> Iterator[BaseStore]:
    from langgraph.store.postgres import PostgresStore
    import psycopg

    if _PG.cluster is None:
        from bench_langgraph_chat import Postgres

        _PG.cluster = Postgres(Path(tempfile.mkdtemp(prefix="probe-pg-")) / "pg")
    _PG.n += 1
    db = f"probe{_PG.n}"
    with psycopg.connect(_PG.cluster.dsn, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {db}")
    dsn = _PG.cluster.dsn.replace("/postgres?", f"/{db}?")
    with PostgresStore.from_conn_string(dsn, ttl=ttl) as store:
        store.setup()
        yield store


def run(make: Callable[..., Iterator[BaseStore]], fn: Callable[[BaseStore], Any], **kw: Any) -> str:
    gen = make(**kw)
    try:
        store = next(gen)
    except ImportError as e:
        return f"not run ({e})"
    try:
        return str(fn(store))
    except Exception as e:  # noqa: BLE001 - the exception type is the finding
        return f"raises {type(e).__name__}"
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)


def filter_case(flt: dict[str, Any]) -> Callable[[BaseStore], Any]:
    def fn(store: BaseStore) -> Any:
        for k, v in ITEMS.items():
            store.put(NS, k, v)
        return sorted(i.key for i in store.search(NS, filter=flt, limit=100))

    return fn


def order_without_query(store: BaseStore) -> Any:
    for k in ["a", "b", "c"]:
        store.put(("o", "x"), k, {"v": 1})
        time.sleep(1.1)  # SQLite's CURRENT_TIMESTAMP has whole seconds
    store.put(("o", "x"), "a", {"v": 2})  # update a: newest
    store.put(("o", "w"), "z", {"v": 1})  # a later namespace
    return [i.key for i in store.search(("o",))]


def created_at_on_update(store: BaseStore) -> Any:
    store.put(NS, "k", {"v": 1})
    first = store.get(NS, "k").created_at
    time.sleep(1.1)
    store.put(NS, "k", {"v": 2})
    return "kept" if store.get(NS, "k").created_at == first else "reset"


def batch_put_then_get(store: BaseStore) -> Any:
    from langgraph.store.base import GetOp, PutOp, SearchOp

    store.put(NS, "k", {"v": "old"})
    res = store.batch([PutOp(NS, "k", {"v": "new"}), GetOp(NS, "k"), SearchOp(NS)])
    return f"get sees {res[1].value['v']}; search sees {[i.value['v'] for i in res[2]]}"


def batch_two_puts(store: BaseStore) -> Any:
    from langgraph.store.base import PutOp

    store.batch([PutOp(NS, "k", {"v": 1}), PutOp(NS, "k", {"v": 2}), PutOp(NS, "j", {"v": 3}),
                 PutOp(NS, "j", None)])
    return f"k={store.get(NS, 'k').value}, j={store.get(NS, 'j')}"


def namespace_order(store: BaseStore) -> Any:
    for ns in [("a-b",), ("a", "b"), ("B",), ("a",), ("ab",)]:
        store.put(ns, "k", {})
    return store.list_namespaces()


def namespaces_after_delete_and_get(store: BaseStore) -> Any:
    store.put(("gone",), "k", {})
    store.delete(("gone",), "k")
    store.get(("never", "put"), "k")
    return store.list_namespaces()


def max_depth(store: BaseStore) -> Any:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a",), ("x", "y")]:
        store.put(ns, "k", {})
    return store.list_namespaces(max_depth=2)


def wildcard(store: BaseStore) -> Any:
    for ns in [("u", "1", "prefs"), ("u", "2", "prefs"), ("u", "2", "other"), ("u", "prefs")]:
        store.put(ns, "k", {})
    return [store.list_namespaces(prefix=("u", "*", "prefs")), store.list_namespaces(suffix=("prefs",)),
            store.list_namespaces(prefix=("u", "*"), suffix=("*", "prefs"))]


def mutate_returned(store: BaseStore) -> Any:
    value = {"tags": ["a"]}
    store.put(NS, "k", value)
    value["tags"].append("put-arg")  # the caller's own object, after put
    got = store.get(NS, "k")
    got.value["tags"].append("get-result")  # an object a read returned
    store.search(NS)[0].value["x"] = 1
    return store.get(NS, "k").value


def limit_offset_negative(store: BaseStore) -> Any:
    for k in "abc":
        store.put(NS, k, {})
    return [len(store.search(NS, limit=0)), len(store.search(NS, offset=5))]


def ttl_refresh(store: BaseStore) -> Any:
    # ttl 0.05 minutes = 3 s. Read at 2 s (refreshes when the store refreshes), check at 4 s.
    store.put(NS, "k", {"v": 1}, ttl=0.05)
    time.sleep(2)
    store.get(NS, "k")
    time.sleep(2)
    visible = store.get(NS, "k", refresh_ttl=False) is not None
    swept = store.sweep_ttl()
    return f"visible at 4s: {visible}; sweep_ttl deleted {swept}"


def ttl_expired_visible(store: BaseStore) -> Any:
    store.put(NS, "k", {"v": 1}, ttl=1 / 60)  # 1 s
    time.sleep(2.2)
    return (f"get: {store.get(NS, 'k', refresh_ttl=False) is not None}, "
            f"search: {len(store.search(NS, refresh_ttl=False))}, ns: {store.list_namespaces()}")


def ttl_put_none_clears(store: BaseStore) -> Any:
    store.put(NS, "k", {"v": 1}, ttl=1 / 60)
    store.put(NS, "k", {"v": 2}, ttl=None)
    time.sleep(2.2)
    store.sweep_ttl()
    return "kept" if store.get(NS, "k") is not None else "deleted"


# A deterministic embedder: each text names its vector (exact in float32), so scores are exact.
VECTORS = {"east": [1.0, 0.0], "north-east": [0.75, 0.75], "mostly-east": [0.875, 0.25], "north": [0.0, 1.0],
           "west": [-1.0, 0.0], "q": [1.0, 0.0]}


def embed(texts: Any) -> list[list[float]]:
    return [VECTORS.get(t, [0.0, 1.0]) for t in texts]


# SqliteStore reads the field list from "text_fields" and ignores IndexConfig's "fields" (it would embed
# the whole value, "$"): give both, so that all stores embed the same field.
INDEX = {"dims": 2, "embed": embed, "fields": ["t"], "text_fields": ["t"]}


def vector_cases() -> list[tuple[str, Callable[[BaseStore], Any]]]:
    def fill(store: BaseStore) -> None:
        store.put(NS, "n", {"t": "north", "g": 1})
        store.put(NS, "e", {"t": "east", "g": 1})
        store.put(NS, "ne", {"t": "north-east", "g": 2})
        store.put(NS, "e2", {"t": "east", "g": 2})  # ties with e
        store.put(NS, "w", {"t": "west", "g": 2})
        store.put(NS, "plain", {"t": "east", "g": 1}, index=False)  # no vector
        store.put(NS, "many", {"t": "west", "parts": ["north", "mostly-east"], "g": 3}, index=["t", "parts[*]"])

    def fmt(items: Any) -> str:
        return str([(i.key, None if i.score is None else round(i.score, 4)) for i in items])

    def top(store: BaseStore) -> Any:
        fill(store)
        return fmt(store.search(NS, query="q", limit=10))

    def page(store: BaseStore) -> Any:
        fill(store)
        return " | ".join(fmt(store.search(NS, query="q", limit=2, offset=o)) for o in (0, 2, 4, 6))

    def filtered(store: BaseStore) -> Any:
        fill(store)
        return fmt(store.search(NS, query="q", filter={"g": 2}, limit=10))

    def stale(store: BaseStore) -> Any:
        store.put(NS, "k", {"t": "east"})
        store.delete(NS, "k")
        store.put(NS, "k", {"t": "west"}, index=False)
        store.put(NS, "j", {"t": "east"})
        store.put(NS, "j", {"t": "west"}, index=False)
        return fmt(store.search(NS, query="q"))

    return [("stale vectors: k put (east), deleted, put unindexed (west); j put (east), put again unindexed (west)",
             stale),
            ("query 'q' = east, limit 10 (ties e/e2; 'plain' has no vector; 'many' has 2 vectors)", top),
            ("the same in pages of 2 (offset 0, 2, 4, 6)", page),
            ("query with filter g=2", filtered)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--only", choices=["filters", "behaviour", "ttl", "vectors"], action="append")
    args = ap.parse_args()
    stores: dict[str, Callable[..., Iterator[BaseStore]]] = {"inmemory": make_inmemory, "sqlite": make_sqlite}
    if not args.no_postgres:
        from bench_langgraph_chat import _pg_bindir

        if _pg_bindir() is None:
            print("postgres: skipped (PostgreSQL is not installed)")
        else:
            stores["postgres"] = make_postgres
    only = set(args.only or ["filters", "behaviour", "ttl", "vectors"])
    try:
        if "filters" in only:
            print("## filters (keys matched, sorted; items: " + ", ".join(ITEMS) + ")")
            for name, flt in FILTERS:
                print(f"- {name}: {flt}")
                for sname, make in stores.items():
                    print(f"    {sname:9} {run(make, filter_case(flt))}")
        cases = [
            ("search order without a query (a, b, c put 1 s apart, then a updated, then w/z)", order_without_query),
            ("created_at when an item is put again", created_at_on_update),
            ("batch [Put k=new, Get k, Search] after k=old", batch_put_then_get),
            ("batch [Put k=1, Put k=2, Put j=3, Put j=None]", batch_two_puts),
            ("list_namespaces order", namespace_order),
            ("list_namespaces after a delete of the only item and a get of a missing namespace",
             namespaces_after_delete_and_get),
            ("list_namespaces max_depth=2", max_depth),
            ("list_namespaces wildcards", wildcard),
            ("value after changing the put argument and returned objects in place", mutate_returned),
            ("search limit=0, offset past the end (counts)", limit_offset_negative),
        ]
        if "behaviour" in only:
            print("## behaviour")
            for name, fn in cases:
                print(f"- {name}")
                for sname, make in stores.items():
                    print(f"    {sname:9} {run(make, fn)}")
        if "ttl" in only:
            print("## TTL (InMemoryStore has no TTL: supports_ttl is False)")
            ttl_cases = [
                ("ttl 3 s, get at 2 s, check at 4 s", ttl_refresh, None),
                ("ttl 3 s, get at 2 s, check at 4 s, TTLConfig(refresh_on_read=True)", ttl_refresh,
                 {"refresh_on_read": True}),
                ("expired (1 s) but not swept: visible?", ttl_expired_visible, None),
                ("expired (1 s) but not swept, TTLConfig(omit_expired=True)", ttl_expired_visible,
                 {"omit_expired": True}),
                ("put with ttl, then put with ttl=None, wait past it, sweep", ttl_put_none_clears, None),
            ]
            for name, fn, cfg in ttl_cases:
                print(f"- {name}")
                for sname, make in stores.items():
                    if sname == "inmemory":
                        continue
                    print(f"    {sname:9} {run(make, fn, ttl=cfg)}")
        if "vectors" in only:
            print("## vectors (cosine; PostgresStore needs pgvector, which Debian 12 does not package: not run)")
            for name, fn in vector_cases():
                print(f"- {name}")
                print(f"    {'inmemory':9} {run(lambda: make_inmemory_index(), fn)}")
                print(f"    {'sqlite':9} {run(make_sqlite, fn, index=INDEX)}")
    finally:
        if _PG.cluster is not None:
            _PG.cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
