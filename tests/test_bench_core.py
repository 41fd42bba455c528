"""bench_core --quick runs end to end and reports sane, self-consistent numbers (no timing asserts)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_core_quick(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_core.py"), "--quick", "--turns", "20",
                           "--samples", "10", "--get-samples", "10", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SqliteSaver" in proc.stdout and "hot path:" in proc.stdout
    res = json.loads(out.read_text())
    assert res["unique_payload_bytes"] == 20 * 2 * 400
    assert res["sidecar"]["checkpoints"] == 60 and res["sqlite"]["checkpoints"] == 60
    assert res["sidecar"]["integrity_missing"] == 0
    assert res["get_server"]["items"] == 40
    # 20 turns: 40 message values (compressed: 400 characters each), 40 list roots and the leaves of 40 items
    # are stored once
    kinds = res["sidecar"]["lmdb"]["blob_kinds"]
    assert kinds["z"]["count"] == 40 and "v" not in kinds
    assert kinds["L"]["count"] == 41 and kinds["l"]["count"] == 5
    assert res["sidecar"]["dir"]["allocated"] > 0 and res["sqlite"]["closed"]["apparent"] > 0
    assert res["flat"]["put_early"]["n"] == 10 and res["flat"]["put_late"]["n"] == 10
