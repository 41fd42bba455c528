#!/usr/bin/env python3
"""Run the cross-language scenario suite against one live sidecar.

    python clients/conformance/run.py [--langs py,ts,go] [--address ADDR]

Starts a sidecar (unless --address names a running one), then
  1. write pass: each language plays every scenario in its own namespace, checking every
     expectation, and records what it stored;
  2. read pass: each language reads what every other language wrote and compares values,
     canonical bytes, root hashes and etags byte for byte, with the writer's record and with
     its own write of the same scenario.
The TypeScript runner must be built (`npm run build` in clients/typescript); the Go runner
runs with `go run`. Prints each runner's result and a closing `N passed, M failed` line.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TS = ROOT / "clients" / "typescript"
GO = ROOT / "clients" / "go"


def command(lang: str) -> tuple[list[str], Path]:
    if lang == "py":
        return [sys.executable, str(HERE / "runner.py")], ROOT
    if lang == "ts":
        return ["node", str(TS / "dist" / "conformance" / "runner.js")], TS
    if lang == "go":
        return ["go", "run", "./conformance"], GO
    raise SystemExit(f"unknown language {lang}")


def start_sidecar(tmp: Path) -> tuple[subprocess.Popen, str]:
    data = tmp / "data"
    sock = data / "sidecar.sock"
    address = f"unix:{sock}"
    log = open(tmp / "sidecar.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--data-dir", str(data), "--listen", address],
                            stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))
    import grpc

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"sidecar exited: {(tmp / 'sidecar.log').read_text()}")
        if sock.exists():
            ch = grpc.insecure_channel(address)
            try:
                grpc.channel_ready_future(ch).result(timeout=1)
                return proc, address
            except grpc.FutureTimeoutError:
                pass
            finally:
                ch.close()
        time.sleep(0.05)
    raise SystemExit("sidecar did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--langs", default="py,ts,go")
    ap.add_argument("--address", default="")
    opts = ap.parse_args()
    langs = [x for x in opts.langs.split(",") if x]
    if "ts" in langs and not (TS / "dist" / "conformance" / "runner.js").exists():
        raise SystemExit("build the TypeScript runner first: (cd clients/typescript && npm run build)")
    tmp = Path(tempfile.mkdtemp(prefix="conformance-"))
    proc = None
    passed = failed = 0
    try:
        address = opts.address
        if not address:
            proc, address = start_sidecar(tmp)
        run = uuid.uuid4().hex[:8]
        records = tmp / "records"
        records.mkdir()
        for mode in ("write", "read"):
            for lang in langs:
                cmd, cwd = command(lang)
                args = ["--address", address, "--lang", lang, "--run", run, "--dir", str(records), "--mode", mode]
                if mode == "read":
                    args += ["--peers", ",".join(x for x in langs if x != lang)]
                started = time.monotonic()
                r = subprocess.run(cmd + args, cwd=str(cwd), capture_output=True, text=True)
                out = (r.stdout + r.stderr).strip()
                m = re.search(r"conformance\[[^\]]+\]: (\d+) passed, (\d+) failed", out)
                p, f = (int(m.group(1)), int(m.group(2))) if m else (0, 1)
                if r.returncode != 0 and f == 0:
                    f = 1
                passed += p
                failed += f
                lines = out.splitlines()
                shown = lines if f else lines[-1:]
                for line in shown[-60:]:
                    print(f"  {line}")
                print(f"{mode:5s} {lang}: {p} passed, {f} failed ({time.monotonic() - started:.1f}s)")
                if mode == "write" and f:
                    print(f"  ({lang} write pass failed; its records may be incomplete)")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"conformance: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
