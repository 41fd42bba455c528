"""Faults around the store: a reader process killed while holding a read slot.

LMDB keeps a reader's slot in the lock file until someone clears it; a process killed inside a read
transaction (an inspector, a backup, a test) leaves its slot behind, pinning the pages of its snapshot
so the data file would grow without bound. The sidecar clears such slots at start and every
``store.READER_CHECK_INTERVAL`` seconds.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import lmdb

from sidecar.storage import layout, store

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
