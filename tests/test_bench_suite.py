"""The benchmark suite's quick variant runs (CI) and produces a well-formed table and JSON.

No timing is asserted: the numbers depend on the machine. What is checked is that every workload ran,
that each table has its rows, that every target was evaluated (met or MISSED, with a figure), and that
the JSON carries the same numbers, so the suite cannot silently rot.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_quick_suite_produces_tables_and_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--agents", "4",
                           "--json", str(out)], capture_output=True, text=True, timeout=590, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    print(text)
    for title in ("direct-lmdb (", "put-latency (", "fleet (", "memory (", "langgraph (", "conversations (", "backup (", "schemas (",
                  "encryption at rest (", "fairness (", "targets"):
        assert title in text, title
    res = json.loads(out.read_text())
    assert res["quick"] is True and res["workloads"] == ["direct-lmdb", "put-latency", "fleet", "memory", "langgraph",
                                                         "conversations", "backup", "schemas", "encryption",
                                                         "fairness"]
    sc = res["schemas"]["messages_20"]
    assert sc["ratio_p50"] > 0 and sc["ratio_first_p50"] > 0 and "migrated / unmigrated p50" in text
    enc = res["encryption"]
    for variant in ("plain", "encrypted"):
        for op in ("put", "get"):
            assert 0 < enc[variant][op]["p50_ms"] <= enc[variant][op]["p99_ms"], (variant, op)
    assert enc["put_ratio"] > 0 and enc["micro"]["seal_p50_us"] > 0 and "encryption at rest (" in text
    fr = res["fairness"]
    assert fr["flood_puts"] > 0 and 0 < fr["alone"]["p50_ms"] <= fr["alone"]["p99_ms"] and fr["ratio_p99"] > 0
    for group in (1, 16, 64):
        assert res["direct-lmdb"][f"group_{group}"]["checkpoints_per_s"] > 0
    variants = ["echo unary", "echo stream", "sidecar sync unary", "sidecar sync stream", "sidecar process unary",
                "sidecar process stream", "SqliteSaver", "LMDBSaver"]
    for v in variants:
        row = res["put-latency"][v]
        assert row["n"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"], (v, row)
        assert v in text
    for mode in ("sync unary", "sync stream", "process unary", "process stream"):
        row = res["fleet"][mode]
        assert row["checkpoints_per_s"] > 0 and row["errors"] == 0, (mode, row)
        assert 0 < row["sidecar_peak_anon_mb"] <= row["sidecar_peak_rss_mb"], (mode, row)
    mem = res["memory"]
    for label in ("common", "rare"):
        for peer in ("echo floor", "sidecar", "InMemoryStore", "SqliteStore"):
            row = mem["filter"][label][peer]
            assert row["n"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"], (label, peer, row)
    assert mem["vector"]["same_top10_as_numpy"] is True and mem["vector"]["InMemoryStore_same_top10"] is True
    assert mem["put"]["sidecar"]["items_per_s"] > 0 and mem["put"]["sidecar"]["bytes_per_item"] > 0
    if "PostgresStore" in mem["filter"]["common"]:  # pgserver's or Debian's PostgreSQL: the peer ran
        for label in ("common", "rare"):
            row = mem["filter"][label]["PostgresStore"]
            assert row["n"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"], (label, row)
        assert mem["put"]["PostgresStore"]["items_per_s"] > 0
    else:  # or its skip printed with the reason
        assert "SKIPPED PostgresStore" in text
    if os.environ.get("CI"):  # .ci/run installs PostgreSQL and the bench extra (pgserver): the peer must run
        assert "PostgresStore" in mem["filter"]["common"], mem.get("skipped")
    lg = res["langgraph"]
    for saver in ("sidecar", "sqlite", "sqlite+delta", "lmdb", "inmemory"):
        assert set(lg["ms_per_turn"][saver]) == {"5", "10", "20"}, saver
    assert "postgres" in lg["savers"] or "postgres" in lg["skipped"]  # run, or its skip printed
    if os.environ.get("CI"):  # .ci/run installs PostgreSQL: there the peer must really run
        assert "postgres" in lg["savers"], lg["skipped"]
    if "postgres" in lg["skipped"]:
        assert "SKIPPED" in text
    cv = res["conversations"]
    for size in cv["sizes"]:
        row = cv[str(size)]
        assert row["add_items_per_s"] > 0 and row["sqlite_add_items_per_s"] > 0, row
        for key in ("get_items_20", "sqlite_get_items_20", "get_context_8000"):
            assert 0 < row[key]["p50_ms"] <= row[key]["p99_ms"], (size, key, row[key])
        assert row["echo"]["n"] == row["get_context_8000"]["n"] and row["blocks"] >= 1  # interleaved blocks
        assert row["get_items_20_vs_echo"] > 0 and row["get_context_8000_vs_echo"] > 0
    assert cv["echo"]["p50_ms"] > 0 and cv["compaction_due"]["n"] > 0
    bk = res["backup"]
    assert bk["idle"]["backup_s"] > 0 and bk["idle"]["bytes"] > 0 and bk["under_load"]["backups"] >= 1
    for phase in ("before", "during"):
        row = bk["writers"][phase]
        assert row["puts"] > 0 and 0 < row["ack_p50_ms"] <= row["ack_p99_ms"], (phase, row)
    assert bk["writers"]["ratio_during_over_before"] > 0 and "during / before" in text
    labels = list(res["checks"])
    assert len(labels) >= 10 and all(isinstance(c["met"], bool) and c["figure"] for c in res["checks"].values())
    for label, check in res["checks"].items():
        assert f"[{'met' if check['met'] else 'MISSED'}] {label}" in text
