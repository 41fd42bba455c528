#!/usr/bin/env python3
"""check_breaking.py: fail when proto/ breaks compatibility with the released agentstate.v1.

    python scripts/check_breaking.py              # compare proto/ with the baseline (CI)
    python scripts/check_breaking.py --self-test  # also prove the check catches breaking edits
    python scripts/check_breaking.py --record     # record proto/ as the new baseline (at a release)

The baseline is proto-baseline/agentstate.v1.json: a buf image (descriptors of
every proto file, without source info) of the protos as last released. No
version has been released yet, so it holds the v1 protos as first recorded;
re-record it only when a release is cut, never to make this check pass.

The rules are buf's PACKAGE category (buf.yaml): wire and JSON compatibility
plus source compatibility of the generated code. Adding files, messages,
fields, enum values and RPCs is fine; removing or renumbering fields, changing
their types, renaming anything or removing an RPC is not.

buf comes from the @bufbuild/buf npm package (clients/typescript devDependency).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "proto-baseline" / "agentstate.v1.json"
BUF = ROOT / "clients" / "typescript" / "node_modules" / ".bin" / "buf"


def buf() -> str:
    if not BUF.exists():
        raise SystemExit(f"{os.path.relpath(BUF, ROOT)} is missing: run `npm ci` in clients/typescript")
    return str(BUF)


def breaking(workspace: Path) -> subprocess.CompletedProcess:
    """Run buf breaking on the workspace (a dir with buf.yaml and proto/) against the baseline."""
    return subprocess.run([buf(), "breaking", "--against", str(BASELINE), "--error-format", "text"],
                          cwd=str(workspace), capture_output=True, text=True)


def record() -> None:
    with tempfile.TemporaryDirectory() as t:
        out = Path(t) / "image.json"
        subprocess.run([buf(), "build", "--exclude-source-info", "-o", str(out)], cwd=str(ROOT), check=True)
        image = json.loads(out.read_text())
    BASELINE.parent.mkdir(exist_ok=True)
    BASELINE.write_text(json.dumps(image, indent=1, sort_keys=True) + "\n")
    print(f"recorded {os.path.relpath(BASELINE, ROOT)}")


# Each edit: (description, file, regex, replacement, breaking?)
EDITS = [
    ("remove a field", "values.proto", r"\n  bytes base_root = 1;", "", True),
    ("renumber a field", "threads.proto", r"string thread_id = 2;\n  map<string, Value> metadata = 3;",
     "string thread_id = 2;\n  map<string, Value> metadata = 33;", True),
    ("change a field type", "admin.proto", r"uint64 threads = 1;", "string threads = 1;", True),
    ("remove an RPC", "admin.proto", r"\n  rpc CheckIntegrity\(CheckIntegrityRequest\) returns \(CheckIntegrityResponse\);", "",
     True),
    ("rename an enum value", "errors.proto", r"ETAG_MISMATCH = 6;", "STALE_ETAG = 6;", True),
    ("add a field", "admin.proto", r"bool native = 9;", "bool native = 9;\n  string extra_note = 10;", False),
    ("add a file", None, None, None, False),
]


def self_test() -> list[str]:
    """Apply each edit to a copy of proto/ and check buf's verdict; return failures."""
    failures = []
    for desc, name, pattern, repl, expect_break in EDITS:
        with tempfile.TemporaryDirectory() as t:
            ws = Path(t)
            shutil.copy(ROOT / "buf.yaml", ws / "buf.yaml")
            shutil.copytree(ROOT / "proto", ws / "proto")
            v1 = ws / "proto" / "agentstate" / "v1"
            if name is None:
                (v1 / "zz_new.proto").write_text(
                    'syntax = "proto3";\npackage agentstate.v1;\nmessage SelfTestAddition { string x = 1; }\n')
            else:
                text = (v1 / name).read_text()
                new, n = re.subn(pattern, repl, text, count=1)
                if n != 1:
                    failures.append(f"self-test edit '{desc}' did not apply (protos changed? update EDITS)")
                    continue
                (v1 / name).write_text(new)
            r = breaking(ws)
            broke = r.returncode != 0
            if r.returncode not in (0, 100) and not r.stdout.strip():
                failures.append(f"'{desc}': buf failed: {r.stderr.strip()}")
            elif broke != expect_break:
                failures.append(f"'{desc}': expected {'breaking' if expect_break else 'compatible'}, buf said "
                                f"{'breaking' if broke else 'compatible'}: {r.stdout.strip() or r.stderr.strip()}")
            else:
                first = (r.stdout.strip().splitlines() or ["ok"])[0]
                print(f"  self-test {desc}: {'breaking' if broke else 'compatible'} as expected ({first})")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="record proto/ as the baseline")
    ap.add_argument("--self-test", action="store_true", help="also check that breaking edits are caught")
    opts = ap.parse_args()
    if opts.record:
        record()
        return 0
    if not BASELINE.exists():
        print(f"no baseline at {os.path.relpath(BASELINE, ROOT)}")
        return 1
    r = breaking(ROOT)
    if r.returncode != 0:
        print("proto/ breaks compatibility with the released agentstate.v1 (proto-baseline/):")
        print(r.stdout + r.stderr)
        return 1
    print("proto/ is compatible with proto-baseline/agentstate.v1.json")
    if opts.self_test:
        failures = self_test()
        for f in failures:
            print("FAIL " + f)
        if failures:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
