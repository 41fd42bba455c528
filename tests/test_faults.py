"""Faults around the store: a reader process killed while holding a read slot; I/O errors (EIO, ENOSPC)
injected into the sidecar's writes and syncs under write load.

LMDB keeps a reader's slot in the lock file until someone clears it; a process killed inside a read
transaction (an inspector, a backup, a test) leaves its slot behind, pinning the pages of its snapshot
so the data file would grow without bound. The sidecar clears such slots at start and every
``store.READER_CHECK_INTERVAL`` seconds.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import grpc
import lmdb
import pytest

from agentstate import NO_RETRY, AgentStateError, Client
from sidecar.storage import layout, store

from conftest import SidecarProcess

HOLDER = textwrap.dedent("""
    import sys, time, lmdb
    env = lmdb.open(sys.argv[1], readonly=True, lock=True, max_dbs=%d, subdir=True)
    txn = env.begin()          # a read slot, held
    print("holding", flush=True)
    time.sleep(600)
""") % (len(layout.DB_NAMES) + 8)


def reader_pids(data_dir) -> set[int]:
    env = lmdb.open(str(data_dir), readonly=True, lock=True, max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    try:
        lines = env.readers().splitlines()[1:]
        return {int(line.split()[0]) for line in lines if line.split()}
    finally:
        env.close()


def test_a_killed_readers_slot_is_cleared(fresh_sidecar):
    with fresh_sidecar.client() as c:
        c.put_checkpoint("t", {"n": 1})
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(fresh_sidecar.data_dir)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert holder.pid in reader_pids(fresh_sidecar.data_dir)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    deadline = time.monotonic() + store.READER_CHECK_INTERVAL * 3
    while holder.pid in reader_pids(fresh_sidecar.data_dir):
        assert time.monotonic() < deadline, "the dead reader's slot was not cleared"
        time.sleep(0.2)
    assert "cleared 1 stale LMDB reader slot" in fresh_sidecar.log()
    with fresh_sidecar.client() as c:  # and the store works on
        c.put_checkpoint("t", {"n": 2})
        assert c.get_values("t") == {"n": 2}


# ---------------------------------------------------------------- I/O errors under write load

SHIM_SOURCE = Path(__file__).resolve().parent / "faultshim.c"
EIO_ON, ENOSPC_ON, OFF, REPORT = (signal.SIGRTMIN + 1, signal.SIGRTMIN + 2, signal.SIGRTMIN + 3,
                                  signal.SIGRTMIN + 4)
#: what a write refused because of the disk may answer (each changes nothing); OVERLOADED when the
#: loop ran behind (reopening the environment, replaying the log in process mode, 2 shared cores)
DISK_REASONS = {"STORAGE_IO_ERROR", "STORAGE_FULL", "OVERLOADED"}


def build_shim(directory: Path) -> Path:
    out = directory / "faultshim.so"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM_SOURCE), "-ldl"], check=True)
    return out


@pytest.mark.parametrize("durability", ["sync", "process"])
def test_io_errors_under_write_load(tmp_path, durability):
    """EIO and ENOSPC injected into the sidecar's writes and syncs (an LD_PRELOAD shim, a share of the calls
    failing so that commits also fail half-way), in a loop under three writers: every acknowledged write is
    intact afterwards (and after a restart), every refused one has a disk reason and left nothing, the
    integrity check is clean and the sidecar writes again once the fault clears."""
    shim = build_shim(tmp_path)
    data = (tmp_path / "data").resolve()
    count_file = tmp_path / "injected"
    proc = SidecarProcess(data, "--durability", durability, env={
        "LD_PRELOAD": str(shim), "FAULTSHIM_DIR": str(data), "FAULTSHIM_OUT": str(count_file),
        "FAULTSHIM_PERCENT": "40"})
    proc.start()
    try:
        lost = _fault_loop(proc, count_file, durability)
    finally:
        proc.stop()
    restarted = SidecarProcess(data, "--durability", durability)
    restarted.start()
    try:
        with restarted.client(timeout=30) as c:
            lost += verify(c, *_fault_loop.results)
            assert c.get_values("after") == {"ok": True}
            report = c.check_integrity()
            assert report.missing_blobs == 0 and not report.problems, report
    finally:
        restarted.stop()
    print(f"writes lost: {lost}; environment reopened after fatal write errors: "
          f"{proc.log().count('LMDB environment reopened')}")
    assert lost == 0


def _fault_loop(proc: SidecarProcess, count_file: Path, durability: str) -> int:
    """Writers under injected faults; returns the acknowledged writes missing afterwards (checked live)."""
    acked: dict[str, dict[str, dict]] = {}
    refused: dict[str, list] = {}
    unclear: list = []
    stop = threading.Event()

    def writer(k: int) -> None:
        thread_id = f"w{k}"
        acked[thread_id], refused[thread_id] = {}, []
        rnd = random.Random(k)
        with Client(proc.address, retry=NO_RETRY, timeout=10) as c:
            i = 0
            while not stop.is_set():
                cid = f"{i:06d}"
                value = {"i": i, "text": "".join(rnd.choice("abcdefgh") for _ in range(rnd.randint(10, 3000)))}
                try:
                    c.put_checkpoint(thread_id, value, checkpoint_id=cid)
                    acked[thread_id][cid] = value
                except AgentStateError as e:
                    if e.reason in DISK_REASONS:
                        refused[thread_id].append(cid)
                    else:
                        unclear.append((cid, e.code, e.reason, str(e)))
                i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 10
        rounds = 0
        while time.monotonic() < deadline:
            time.sleep(0.3)
            proc.proc.send_signal(EIO_ON if rounds % 2 == 0 else ENOSPC_ON)
            time.sleep(0.2)
            proc.proc.send_signal(OFF)
            rounds += 1
        time.sleep(0.5)  # writes go through again before the writers stop
    finally:
        proc.proc.send_signal(OFF)
        stop.set()
        for t in threads:
            t.join(30)
    proc.proc.send_signal(REPORT)
    wait_until(lambda: count_file.exists() and count_file.read_text().strip())
    injected = int(count_file.read_text())
    n_acked = sum(len(v) for v in acked.values())
    n_refused = sum(len(v) for v in refused.values())
    print(f"\nfault loop ({durability}): {rounds} fault rounds, {injected} faults injected, {n_acked} writes "
          f"acknowledged, {n_refused} refused (disk reasons or OVERLOADED), {len(unclear)} other errors")
    assert not unclear, unclear[:5]
    assert injected > 0 and n_refused > 0 and n_acked > 0
    _fault_loop.results = (acked, refused)
    with Client(proc.address, timeout=30) as c:
        c.put_checkpoint("after", {"ok": True})  # recovered: writes work again
        lost = verify(c, acked, refused)
        report = c.check_integrity()
        assert report.missing_blobs == 0 and not report.problems, report
    return lost


def verify(c: Client, acked: dict, refused: dict) -> int:
    """Every acknowledged checkpoint with its value, none of the refused ones; returns the acked ones missing."""
    lost = 0
    for thread_id, cps in acked.items():
        stored = {cp.checkpoint_id for cp in c.list_checkpoints(thread_id)}
        for cid, value in cps.items():
            if cid not in stored:
                lost += 1
                continue
            assert c.get_values(thread_id, cid) == value, (thread_id, cid)
        written_anyway = stored.intersection(refused[thread_id])
        assert not written_anyway, f"refused writes were stored: {sorted(written_anyway)[:5]}"
    return lost


def wait_until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# ---------------------------------------------------------------- a full disk

def test_disk_full_then_space_again(tmp_path):
    """A filesystem of fixed size (the shim refuses, with ENOSPC, any write that would grow a file of the data
    directory past 4 MB): writes fill it and are then refused with STORAGE_FULL, changing nothing; reads go
    on; deleting threads and collecting garbage frees pages that new writes reuse; every acknowledged
    write that was not deleted is intact, also after a restart, and the integrity check is clean."""
    shim = build_shim(tmp_path)
    data = (tmp_path / "data").resolve()
    proc = SidecarProcess(data, "--no-compress", "--map-size", "64M", env={
        "LD_PRELOAD": str(shim), "FAULTSHIM_DIR": str(data), "FAULTSHIM_LIMIT": str(4 << 20),
        "FAULTSHIM_OUT": str(tmp_path / "injected")})
    proc.start()
    rnd = random.Random(7)
    acked: dict[str, dict] = {}
    try:
        with Client(proc.address, timeout=30) as c:  # (retries OVERLOADED on a busy machine, never STORAGE_FULL)
            full = 0
            for i in range(2000):
                value = {"blob": rnd.randbytes(20_000).hex()}
                try:
                    c.put_checkpoint(f"t{i}", value, checkpoint_id="c1")
                    acked[f"t{i}"] = value
                except AgentStateError as e:
                    assert (e.code, e.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL"), e
                    full += 1
                    if full == 5:
                        break
            assert full == 5 and len(acked) > 20, (full, len(acked))
            assert (data / "data.mdb").stat().st_size <= 4 << 20
            first = next(iter(acked))
            assert c.get_values(first) == acked[first]  # reads go on
            for tid in list(acked)[: len(acked) // 2]:
                c.delete_thread(tid)
                del acked[tid]
            assert c.collect_garbage().freed_blobs > 0
            for i in range(5):  # the freed pages hold new writes
                value = {"blob": rnd.randbytes(20_000).hex()}
                c.put_checkpoint(f"again{i}", value, checkpoint_id="c1")
                acked[f"again{i}"] = value
            assert all(c.get_values(tid) == v for tid, v in acked.items())
            report = c.check_integrity()
            assert report.missing_blobs == 0 and not report.problems, report
    finally:
        proc.stop()
    restarted = SidecarProcess(data)
    restarted.start()
    try:
        with restarted.client(timeout=30) as c:
            assert all(c.get_values(tid) == v for tid, v in acked.items())
            assert c.check_integrity().missing_blobs == 0
    finally:
        restarted.stop()
