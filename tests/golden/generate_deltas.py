"""Generate deltas.json: a put's deltas of stored values (hot path ``list_delta`` and ``map_delta``) from the
pure-Python twin.

    python tests/golden/generate_deltas.py

Each list case stores a list of ``n`` items as a fresh store holds it (generate.stored_records: ids from 1,
children first) and applies a delta to its root record: items appended, the first ``keep_first`` kept. Each map
case applies sets and deletes to a map built whole. Pinned: the new root hash, the nodes emitted (digest, in
order), the stored nodes noted as known (list deltas), or the error (reason, message, field). Run this ONLY
when the storage format changes (as generate.py); tests/test_hotpath.py checks both twins against the file.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "python"))

_spec = importlib.util.spec_from_file_location("golden_generate", HERE / "generate.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

FIELD = "channels['messages'].delta"


def list_cases():
    """(base length, keep_first or None, number of items appended)."""
    out = []
    for n in (0, 1, 7, 8, 9, 17, 64, 65, 100, 1025):
        out += [(n, None, 0), (n, None, 1), (n, None, 9), (n, n, 2), (n, n + 1, 1)]
        out += [(n, k, j) for k in sorted({0, 1, n // 2, n - 1}) if 0 <= k < n for j in (0, 3)]
    return out


def map_cases():
    """(name, base size, sets as (key, value int), deletes)."""
    return [(name, n, sets, deletes) for name, n, sets, deletes in golden.map_update_cases()] + [
        ("3: a key too long", 3, [("k" * 70000, 1)], []),
        ("33: set 40 new", 33, [(f"new{i:03d}", i) for i in range(40)], []),
    ]


def list_base(hp, n: int):
    """(fetch, root record) of a stored list of ``n`` items."""
    nodes: list = []
    hp.build_list([golden.item_encoding(i) for i in range(n)], nodes)
    if n == 0:
        nodes = nodes[-1:]
    records = golden.stored_records(hp.stored_node, nodes)
    return dict(records).get, records[-1][1]


def error_of(e) -> dict:
    return {"reason": e.reason, "message": e.message, "field": e.metadata.get("field")}


def run_list(hp, n, keep_first, appended) -> dict:
    from sidecar.errors import ApiError

    fetch, record = list_base(hp, n)
    append = [golden.item_encoding(10_000 + i) for i in range(appended)]
    known: dict = {}
    built: list = []
    try:
        root = hp.list_delta(record, append, keep_first, fetch, known, built, FIELD)
    except ApiError as e:
        return {"error": error_of(e), "built": len(built)}
    return {"root": root.hex(), "built": golden.nodes_digest(built), "built_count": len(built),
            "known": golden.nodes_digest(sorted(known.items()))}


def run_map(hp, n, sets, deletes) -> dict:
    from agentstate import codec
    from sidecar.errors import ApiError

    nodes: list = []
    root = hp.build_map(golden.map_pairs(n), nodes)
    by_hash = dict(nodes)
    built: list = []
    try:
        new = hp.map_delta(root, [(k, codec.encode(v)) for k, v in sets], deletes, by_hash.__getitem__, built, FIELD)
    except ApiError as e:
        return {"error": error_of(e)}
    return {"root": new.hex(), "built": golden.nodes_digest(built), "built_count": len(built)}


def generate() -> dict:
    from sidecar.storage import _hotpath_py as hp

    return {
        "format": golden._format_name(),
        "field": FIELD,
        "lists": [{"n": n, "keep_first": k, "append": j, **run_list(hp, n, k, j)} for n, k, j in list_cases()],
        "maps": [{"name": name, **run_map(hp, n, sets, deletes)} for name, n, sets, deletes in map_cases()],
    }


if __name__ == "__main__":
    golden._write(HERE / "deltas.json", generate())
