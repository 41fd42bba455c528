"""A real small filesystem (issue 16, Faults): the sidecar's data directory on an 8 MiB tmpfs, filled up by
the kernel's own ENOSPC (no shim), with the LMDB map left to grow (disk full) or kept small so that it
fills and cannot grow (map full). Needs root (or CAP_SYS_ADMIN) to mount; CI runs as root: there a
missing permission fails the test instead of skipping it."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid

import grpc
import pytest

from agentstate import AgentStateError, Client

from conftest import SidecarProcess
from sidecar.storage.store import RESERVE_BYTES, RESERVE_NAME

SIZE = 8 << 20


@pytest.fixture
def smallfs(tmp_path):
    mnt = tmp_path / f"small-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        message = (f"cannot mount a {SIZE >> 20} MiB tmpfs at {mnt} (needs root or CAP_SYS_ADMIN): "
                   f"{done.stderr.strip() or done.returncode}")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(c: Client, rnd: random.Random, acked: dict, prefix: str) -> int:
    """Put incompressible checkpoints until five are refused; every refusal must be STORAGE_FULL."""
    full = 0
    for i in range(4000):
        value = {"blob": rnd.randbytes(16_000).hex()}
        try:
            c.put_checkpoint(f"{prefix}{i}", value, checkpoint_id="c1")
            acked[f"{prefix}{i}"] = value
        except AgentStateError as e:
            assert (e.code, e.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL"), e
            assert "nothing was written" in str(e)
            full += 1
            if full == 5:
                break
    return full


def _verify(data) -> dict:
    out = subprocess.run([sys.executable, "-m", "sidecar", "verify", "--data-dir", str(data), "--json", "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    import json
    return json.loads(out.stdout)


@pytest.mark.parametrize("durability,map_size", [("sync", None), ("process", None), ("sync", "1M")],
                         ids=["disk-full-sync", "disk-full-process", "map-full"])
def test_small_filesystem_fills_then_recovers(smallfs, durability, map_size):
    data = smallfs / "data"
    args = ["--no-compress", "--durability", durability] + (["--map-size", map_size] if map_size else [])
    proc = SidecarProcess(data, *args)
    proc.log_path = smallfs.parent / f"{smallfs.name}-{durability}.log"  # the log off the small filesystem
    proc.start()
    rnd = random.Random(11)
    acked: dict[str, dict] = {}
    try:
        with Client(proc.address, timeout=60) as c:
            full = _fill(c, rnd, acked, "t")
            assert full == 5 and len(acked) > 20, (full, len(acked))
            st = os.statvfs(smallfs)
            # full but for the reserve the store gave up so that deletes find room (Store.full); in process
            # mode it stops earlier, keeping room to commit what its log holds (twice the log's bytes since the
            # last commit, plus the reserve: on a slow machine the log between two commits passed 1.5 MiB, and
            # CI once saw 4 MiB + 4 KiB free, so the bound allows 5 MiB of the 8 still free)
            free = st.f_bavail * st.f_frsize
            assert map_size or free <= (RESERVE_BYTES + (256 << 10) if durability == "sync" else SIZE * 5 // 8), free
            assert not (data / RESERVE_NAME).exists()
            with pytest.raises(AgentStateError) as info:  # new writes: refused at once while the disk is full
                c.put_checkpoint("one-more", {"x": 1})
            assert info.value.reason == "STORAGE_FULL", info.value
            first = next(iter(acked))
            assert c.get_values(first) == acked[first]  # reads go on
            assert all(c.get_values(tid) == v for tid, v in acked.items())  # nothing acknowledged lost
            for tid in list(acked)[: len(acked) // 2]:
                c.delete_thread(tid)
                del acked[tid]
            assert c.collect_garbage().freed_blobs > 0
            for i in range(5):  # the freed pages hold new writes
                value = {"blob": rnd.randbytes(16_000).hex()}
                c.put_checkpoint(f"again{i}", value, checkpoint_id="c1")
                acked[f"again{i}"] = value
            assert all(c.get_values(tid) == v for tid, v in acked.items())
            report = c.check_integrity()
            assert report.missing_blobs == 0 and not report.problems, report
    finally:
        proc.stop()
    assert "Traceback" not in proc.log(), proc.log()[-3000:]
    restarted = SidecarProcess(data, "--durability", durability)
    restarted.log_path = proc.log_path
    restarted.start()
    try:
        with restarted.client(timeout=60) as c:
            assert all(c.get_values(tid) == v for tid, v in acked.items())
            assert c.check_integrity().missing_blobs == 0
    finally:
        restarted.stop()
    report = _verify(data)
    assert report["clean"] and not report["damaged"], report
