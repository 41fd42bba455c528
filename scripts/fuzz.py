"""Coverage-guided fuzzing (atheris / libFuzzer) of the targets in tests/fuzz_targets.py.

    .venv/bin/pip install atheris                      # (not needed by `make test`, which replays the corpus)
    .venv/bin/python scripts/fuzz.py codec --runs 200000
    .venv/bin/python scripts/fuzz.py all --time 600    # each target for 600 s
    .venv/bin/python scripts/fuzz.py stored --seed-only

The corpus of each target is tests/fuzz_corpus/TARGET/ (committed; tests/test_fuzz_corpus.py replays it).
A run starts from it, adds what reaches new coverage, then merges the corpus down to a minimal set
(libFuzzer -merge=1), and prints a summary: executions, corpus before/after, crashes (saved as
crash-* files in the current directory; a crash is a test failure to fix, then its input goes into
the corpus). The Python code (the pure-Python twin, the api validation, the codec) is instrumented for
coverage; the compiled twin runs on every input too and must agree with the Python one, but its
branches do not guide the search.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz_corpus"
TARGETS = ("codec", "request", "stored")
MAX_LEN = 4096


def seeds(target: str) -> list[bytes]:
    """Valid inputs to start from (the golden values, requests a client sends, stored nodes)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import json

    golden = json.loads((ROOT / "tests" / "golden" / "values.json").read_text())["values"]
    encodings = [bytes.fromhex(v["encoding"]) for v in golden if "encoding" in v]
    if target == "codec":
        return encodings
    if target == "request":
        from agentstate import Append, SetKeys
        from agentstate import _requests as rq
        from agentstate.v1 import threads_pb2 as pb
        out = []
        for i, channels in enumerate(({"messages": ["hi", {"role": "ai"}]}, {"m": {"a": 1}},
                                      {"l": Append([1, 2])}, {"d": SetKeys(set={"k": 1}, delete=["x"])})):
            req = rq.put_checkpoint_request("ns", f"t{i}", channels, checkpoint_id=f"c{i}", parent_id="p",
                                            base_id="p" if i > 1 else "", checkpoint_ns="", metadata={"step": i},
                                            extra=None, expected_head_etag=None, schema_version=0,
                                            require_thread=False, request_id="")
            out.append(b"\x00" + req.SerializeToString())
        w = pb.PutWritesRequest(namespace="ns", thread_id="t", checkpoint_id="c", writes=[
            pb.PendingWrite(task_id="task", idx=0, channel="c", value=pb.ChannelWrite().value),
            pb.PendingWrite(task_id="task", idx=1, channel="c", value=pb.ChannelWrite(value={"msgpack": b"\x01"}).value)])
        out.append(b"\x01" + w.SerializeToString())
        b = pb.BatchWriteRequest(namespace="ns", writes=[pb.BatchedWrite(put_checkpoint=pb.PutCheckpointRequest(
            namespace="ns", thread_id="t"))])
        out.append(b"\x02" + b.SerializeToString())
        return out
    if target == "stored":
        from sidecar.storage import _hotpath_py as hp
        from sidecar.storage import compression
        out = []
        ids = {}

        def id_of(h: bytes) -> bytes:
            return ids.setdefault(h, len(ids).to_bytes(hp.ID_SIZE, "big"))
        for enc in encodings + [bytes(5000), b"\xda" + (9000).to_bytes(2, "big") + b"x" * 9000]:
            nodes: list = []
            hp.value_node(enc, nodes)
            for h, node in nodes:
                out.append(h + hp.stored_node(node, id_of))
        nodes = []
        hp.build_list([b"\x01", b"\x02", b"\xa1a"] * 40, nodes)
        hp.build_map([(f"k{i}", bytes([i % 100])) for i in range(60)], nodes)
        out += [h + hp.stored_node(node, id_of) for h, node in nodes]
        import zstandard
        for enc in encodings[:8] + [b"\xa5hello" * 50]:  # compressed value nodes (no dictionary)
            out.append(bytes(32) + b"z" + compression.NO_DICT + zstandard.ZstdCompressor().compress(enc))
        return out
    raise SystemExit(f"unknown target {target}")


def write_seeds(target: str) -> int:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    import hashlib
    n = 0
    for data in seeds(target):
        name = d / f"seed-{hashlib.sha1(data).hexdigest()[:16]}"
        if not name.exists():
            name.write_bytes(data[:MAX_LEN])
            n += 1
    return n


def run(target: str, runs: int | None, seconds: int | None) -> int:
    corpus = CORPUS / target
    before = len(list(corpus.iterdir()))
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    args = [sys.executable, __file__, "--worker", target, str(work), str(corpus), f"-max_len={MAX_LEN}",
            "-print_final_stats=1", "-rss_limit_mb=2048"]
    if runs:
        args.append(f"-runs={runs}")
    if seconds:
        args.append(f"-max_total_time={seconds}")
    proc = subprocess.run(args, capture_output=True, text=True)
    stats = [line for line in proc.stderr.splitlines() if line.startswith("stat::")]
    crashes = [line for line in proc.stderr.splitlines() if "crash-" in line or "Uncaught" in line]
    merged = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-merged-"))
    subprocess.run([sys.executable, __file__, "--worker", target, "-merge=1", str(merged), str(corpus), str(work)],
                   capture_output=True, text=True)
    if any(merged.iterdir()):
        for f in corpus.iterdir():
            f.unlink()
        for f in merged.iterdir():
            shutil.copy(f, corpus / f.name)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(merged, ignore_errors=True)
    after = len(list(corpus.iterdir()))
    execs = next((line.split(":")[-1].strip() for line in stats if "number_of_executed_units" in line), "?")
    print(f"{target}: {execs} executions, exit {proc.returncode}, corpus {before} -> {after} inputs, "
          f"{len(crashes)} crash lines")
    if proc.returncode != 0:
        print(proc.stderr[-4000:])
    return proc.returncode


def worker(target: str, argv: list[str]) -> None:
    import atheris
    sys.path.insert(0, str(ROOT / "tests"))
    with atheris.instrument_imports(include=["sidecar", "agentstate", "fuzz_targets"]):
        import fuzz_targets
    fn = fuzz_targets.TARGETS[target]
    # libFuzzer re-runs argv[0] for -merge: a wrapper that starts this worker again
    wrapper = Path(tempfile.gettempdir()) / f"fuzz-worker-{target}-{os.getpid()}.sh"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" --worker {target} "$@"\n')
    wrapper.chmod(0o700)
    atheris.Setup([str(wrapper), *argv], fn)
    atheris.Fuzz()


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("target", choices=[*TARGETS, "all"])
    p.add_argument("--runs", type=int, default=None, help="executions per target")
    p.add_argument("--time", type=int, default=None, help="seconds per target")
    p.add_argument("--seed-only", action="store_true", help="only (re)write the seed inputs into the corpus")
    args = p.parse_args()
    rc = 0
    for target in TARGETS if args.target == "all" else (args.target,):
        print(f"{target}: {write_seeds(target)} new seed inputs")
        if not args.seed_only:
            rc |= run(target, args.runs, args.time if args.time or args.runs else 60)
    return rc


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
