#!/usr/bin/env python3
"""generate.py: regenerate every client's code from proto/ (one command).

    python scripts/generate.py          # write generated code
    python scripts/generate.py --check  # fail if committed generated code is stale

Generated files live apart from hand-written ones and are never edited by hand:
  clients/python/agentstate/v1/   (Python messages, stubs and .pyi types)
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto"
PY_OUT = ROOT / "clients" / "python"
PY_PKG = PY_OUT / "agentstate" / "v1"
PY_INIT = '"""Generated from proto/agentstate/v1 by scripts/generate.py. DO NOT EDIT."""\n'


def proto_files() -> list[str]:
    return sorted(str(p.relative_to(PROTO)) for p in (PROTO / "agentstate" / "v1").glob("*.proto"))


def gen_python(out: Path) -> None:
    from grpc_tools import protoc  # type: ignore[import-not-found]
    import grpc_tools

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    args = ["protoc", f"-I{PROTO}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", *proto_files()]
    cwd = os.getcwd()
    os.chdir(PROTO)
    try:
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed for python")
    finally:
        os.chdir(cwd)
    pkg = out / "agentstate" / "v1"
    (pkg / "__init__.py").write_text(PY_INIT)
    (out / "agentstate" / "__init__.py").unlink(missing_ok=True)


def generate_into(tmp: Path) -> dict[str, Path]:
    """Generate all languages under tmp; return {target dir in repo: generated dir}."""
    py = tmp / "python"
    py.mkdir()
    gen_python(py)
    return {str(PY_PKG): py / "agentstate" / "v1"}


def same_tree(a: Path, b: Path) -> bool:
    if not a.is_dir() or not b.is_dir():
        return False
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare with the committed code")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        produced = generate_into(Path(t))
        stale = [dst for dst, src in produced.items() if not same_tree(src, Path(dst))]
        if opts.check:
            for dst in stale:
                print(f"stale generated code: {os.path.relpath(dst, ROOT)} (run: python scripts/generate.py)")
            return 1 if stale else 0
        for dst, src in produced.items():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
            print(f"generated {os.path.relpath(dst, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
