"""Backup, restore and verify (storage/backup.py, storage/verify.py, `sidecar backup|restore|verify`,
AdminService.BackupStore): a backup taken under a 16-writer load holds every checkpoint acknowledged
before it began and verifies clean; verify finds a flipped byte and names the thread and checkpoint it
damages; restore refuses what it must and changes nothing then."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import lmdb
import pytest
from conftest import SidecarProcess, expect_error

from agentstate import Client
from agentstate.v1 import admin_pb2
from sidecar.storage import backup, layout, verify
from sidecar.storage.store import Store

ROOT = Path(__file__).resolve().parent.parent


def sidecar_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sidecar", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def heads(data_dir: Path) -> dict[str, set[str]]:
    """thread id -> checkpoint ids, read straight from a store that no sidecar serves."""
    env, dbs = verify.open_env(str(data_dir))
    try:
        with env.begin() as txn:
            names = {layout.thread_decoder.decode(v).tkey: bytes(k).partition(layout.SEP)[2].decode()
                     for k, v in txn.cursor(db=dbs["threads"])}
            out: dict[str, set[str]] = {}
            for k, _ in txn.cursor(db=dbs["ckpts"]):
                tkey, _cns, cid = layout.split_ckpt_key(k)
                out.setdefault(names[tkey], set()).add(cid)
        return out
    finally:
        env.close()


def fill(address: str, threads: int = 3, turns: int = 4) -> None:
    with Client(address) as c:
        for t in range(threads):
            parent = ""
            for i in range(turns):
                cid = f"c{i:03d}"
                c.put_checkpoint(f"t{t}", {"messages": [f"m{j} of thread {t}" * 5 for j in range(i + 1)],
                                           "n": i}, checkpoint_id=cid, parent_id=parent)
                parent = cid


@pytest.mark.parametrize("durability", ["sync", "process"])
def test_a_backup_under_16_writers_holds_every_acknowledged_checkpoint(tmp_path, durability):
    proc = SidecarProcess(tmp_path / "data", "--durability", durability).start()
    acked: list[tuple[float, str, str]] = []  # (ack time, thread, checkpoint)
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with Client(proc.address) as c:
                parent = ""
                i = 0
                while not stop.is_set():
                    cid = f"c{i:05d}"
                    c.put_checkpoint(f"w{w}", {"messages": [f"turn {j}" for j in range(i % 20 + 1)], "i": i},
                                     checkpoint_id=cid, parent_id=parent)
                    with lock:
                        acked.append((time.monotonic(), f"w{w}", cid))
                    parent = cid
                    i += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    try:
        pool = [threading.Thread(target=writer, args=(w,)) for w in range(16)]
        for t in pool:
            t.start()
        time.sleep(1.0)
        with Client(proc.address) as c:
            began = time.monotonic()
            r = c.backup_store("under-load")
        time.sleep(0.3)  # writers keep going while and after it runs
        stop.set()
        for t in pool:
            t.join(30)
        assert not errors, errors
        assert r.path == str(backup.default_dir(str(tmp_path / "data")) + "/under-load")
        before = [(t, cid) for when, t, cid in acked if when < began]
        assert len(before) > 100 and len(acked) > len(before)  # a real load, before and during
    finally:
        proc.stop()
    manifest, report = backup.check_backup(r.path)
    assert report.clean, report.to_dict()
    assert manifest.checkpoints == r.checkpoints == report.checkpoints and manifest.blake3 == r.blake3
    restored = tmp_path / "restored"
    out = sidecar_cli("restore", "--from", r.path, "--data-dir", str(restored))
    assert out.returncode == 0, out.stderr
    assert "restore done" in out.stdout and "clean" in out.stdout
    got = heads(restored)
    missing = [(t, cid) for t, cid in before if cid not in got.get(t, set())]
    assert not missing, missing[:5]
    # the restored store serves
    again = SidecarProcess(restored).start()
    try:
        with again.client() as c:
            t, cid = before[-1]
            assert c.get_checkpoint(t, cid).checkpoint_id == cid
            assert c.check_integrity().missing_blobs == 0
    finally:
        again.stop()


def test_backup_offline_then_verify_and_restore_with_the_cli(tmp_path):
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        fill(proc.address)
        # while it serves, the CLI backs up through it (into its backup directory), --to is refused
        out = sidecar_cli("backup", "--data-dir", str(tmp_path / "data"), "--name", "online", "--quiet")
        assert out.returncode == 0, out.stderr
        assert (tmp_path / "data-backups" / "online" / "backup.json").exists()
        refused = sidecar_cli("backup", "--data-dir", str(tmp_path / "data"), "--to", str(tmp_path / "x"))
        assert refused.returncode == 2 and "--to" in refused.stderr and not (tmp_path / "x").exists()
        # verify works on a serving store (read-only)
        live = sidecar_cli("verify", "--data-dir", str(tmp_path / "data"), "--json")
        assert live.returncode == 0, live.stderr
        assert json.loads(live.stdout)["clean"] is True and json.loads(live.stdout)["checkpoints"] == 12
    finally:
        proc.stop()
    out = sidecar_cli("backup", "--data-dir", str(tmp_path / "data"), "--to", str(tmp_path / "offline"))
    assert out.returncode == 0, out.stderr
    assert "backup done" in out.stdout and "12 checkpoints" in out.stdout
    assert "copying" in out.stderr and "hashing" in out.stderr  # progress lines
    manifest = json.loads((tmp_path / "offline" / "backup.json").read_text())
    assert manifest["format"] == "agentstate-backup-1" and manifest["checkpoints"] == 12
    assert manifest["blake3"] == backup.file_hash(str(tmp_path / "offline" / "data.mdb"))
    again = sidecar_cli("backup", "--data-dir", str(tmp_path / "data"), "--to", str(tmp_path / "offline"))
    assert again.returncode == 2 and "never overwrites" in again.stderr
    ok = sidecar_cli("verify", "--backup", str(tmp_path / "offline"))
    assert ok.returncode == 0 and "clean" in ok.stdout, ok.stdout + ok.stderr
    # restore over the existing store needs --replace; the old one is moved aside, whole
    before = heads(tmp_path / "data")
    refused = sidecar_cli("restore", "--from", str(tmp_path / "offline"), "--data-dir", str(tmp_path / "data"))
    assert refused.returncode == 2 and "--replace" in refused.stderr
    assert heads(tmp_path / "data") == before
    done = sidecar_cli("restore", "--from", str(tmp_path / "offline"), "--data-dir", str(tmp_path / "data"),
                       "--replace")
    assert done.returncode == 0, done.stderr
    assert heads(tmp_path / "data") == before
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("data.replaced-")]
    assert len(aside) == 1 and heads(aside[0]) == before


def _flip_a_node_of(data_dir: Path, thread_id: str, channel: str) -> bytes:
    """Flip one byte of the root node of ``channel`` in the newest checkpoint of ``thread_id``; its id."""
    env = lmdb.open(str(data_dir), max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    try:
        dbs = {n: env.open_db(n.encode()) for n in ("threads", "ckpts", "nodes")}
        with env.begin(write=True) as txn:
            tkey = next(layout.thread_decoder.decode(v).tkey for k, v in txn.cursor(db=dbs["threads"])
                        if bytes(k).endswith(layout.SEP + thread_id.encode()))
            manifests = [(k, layout.manifest_decoder.decode(v)) for k, v in txn.cursor(db=dbs["ckpts"])
                         if layout.split_ckpt_key(k)[0] == tkey]
            _, m = max(manifests, key=lambda kv: bytes(kv[0]))
            node_id = dict(m.channels)[channel]
            rec = bytearray(txn.get(node_id, db=dbs["nodes"]))
            rec[-1] ^= 0x01
            txn.put(node_id, bytes(rec), db=dbs["nodes"])
        return node_id
    finally:
        env.close()


def test_verify_finds_a_flipped_byte_and_names_the_checkpoints_it_damages(tmp_path):
    proc = SidecarProcess(tmp_path / "data", "--no-compress").start()
    try:
        with Client(proc.address) as c:
            c.put_checkpoint("intact", {"note": "nothing to see here " * 10}, checkpoint_id="a1")
            c.put_checkpoint("damaged", {"note": "this one will be damaged " * 10}, checkpoint_id="b1")
            c.put_checkpoint("damaged", {"note": "this one will be damaged " * 10, "n": 2}, checkpoint_id="b2",
                             parent_id="b1")
    finally:
        proc.stop()
    assert verify.verify_path(str(tmp_path / "data")).clean
    node_id = _flip_a_node_of(tmp_path / "data", "damaged", "note")
    report = verify.verify_path(str(tmp_path / "data"))
    assert not report.clean
    assert [(d.table, d.key) for d in report.damaged] == [("nodes", node_id.hex())]
    named = {(r.thread_id, r.checkpoint_id, r.what) for r in report.reached}
    assert named == {("damaged", "b1", "checkpoint"), ("damaged", "b2", "checkpoint")}  # both share the node
    assert all(r.nodes == [node_id.hex()] for r in report.reached)
    out = sidecar_cli("verify", "--data-dir", str(tmp_path / "data"))
    assert out.returncode == 1
    assert "DAMAGE" in out.stdout and "'b2' of thread 'damaged'" in out.stdout and "intact" not in out.stdout
    # a backup of a damaged store is refused at restore time, and nothing is restored
    assert sidecar_cli("backup", "--data-dir", str(tmp_path / "data"), "--to", str(tmp_path / "b")).returncode == 0
    refused = sidecar_cli("restore", "--from", str(tmp_path / "b"), "--data-dir", str(tmp_path / "new"))
    assert refused.returncode == 2 and "damaged" in refused.stderr and not (tmp_path / "new").exists()


def test_verify_finds_a_missing_node_and_an_undecodable_record(tmp_path):
    s = Store(str(tmp_path / "data"), compress=False)
    try:
        from test_store import put  # noqa: PLC0415
        put(s, "t", {"messages": ["a" * 100, "b" * 100]}, checkpoint_id="c1")
        put(s, "u", {"x": 1}, checkpoint_id="d1")
    finally:
        s.close()
    env = lmdb.open(str(tmp_path / "data"), max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    try:
        nodes_db, runs_db = env.open_db(b"nodes"), env.open_db(b"runs")
        with env.begin(write=True) as txn:
            # a leaf of t's list goes missing; a runs record is garbage
            leaves = [k for k, v in txn.cursor(db=nodes_db) if b"a" * 100 in bytes(v)]
            assert leaves
            txn.delete(leaves[0], db=nodes_db)
            txn.put(b"ns\x00r-1", b"\xc1not msgpack", db=runs_db)
    finally:
        env.close()
    report = verify.verify_path(str(tmp_path / "data"))
    assert report.missing_nodes == [leaves[0].hex()]
    assert {(r.thread_id, r.checkpoint_id) for r in report.reached} == {("t", "c1")}
    assert [d.table for d in report.damaged] == ["runs"]


def test_restore_refuses_a_live_store_and_a_changed_backup(tmp_path):
    proc = SidecarProcess(tmp_path / "data").start()
    try:
        fill(proc.address, threads=1, turns=2)
        with Client(proc.address) as c:
            asked = time.time()
            r = c.backup_store("b")
            answered = time.time()
        with open(os.path.join(r.path, "backup.json")) as f:
            created_us = json.load(f)["created_us"]
        stamp = r.create_time.seconds * 1_000_000 + r.create_time.nanos // 1000
        assert stamp == created_us and asked * 1e6 <= stamp <= answered * 1e6  # to the microsecond
        before = heads(tmp_path / "data")
        live = sidecar_cli("restore", "--from", r.path, "--data-dir", str(tmp_path / "data"), "--replace")
        assert live.returncode == 2 and "running sidecar" in live.stderr
        with Client(proc.address) as c:
            assert {cp.checkpoint_id for cp in c.list_checkpoints("t0")} == before["t0"]
    finally:
        proc.stop()
    with open(os.path.join(r.path, "data.mdb"), "r+b") as f:  # a changed byte anywhere in the file
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    changed = sidecar_cli("restore", "--from", r.path, "--data-dir", str(tmp_path / "new"))
    assert changed.returncode == 2 and "BLAKE3" in changed.stderr and not (tmp_path / "new").exists()
    assert sidecar_cli("verify", "--backup", r.path).returncode == 2
    not_a_backup = sidecar_cli("restore", "--from", str(tmp_path), "--data-dir", str(tmp_path / "new"))
    assert not_a_backup.returncode == 2 and "not a backup" in not_a_backup.stderr


def test_backup_store_refuses_bad_names_with_the_field(fresh_sidecar):
    with fresh_sidecar.client() as c:
        for name in ["../escape", ".hidden", "a/b", "x" * 129, "sp ace"]:
            with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "name"):
                c.backup_store(name)
        with pytest.raises(grpc.RpcError) as unnamed_raw:  # the raw RPC needs a name (the helpers make one)
            c.admin.BackupStore(admin_pb2.BackupStoreRequest())
        assert unnamed_raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert unnamed_raw.value.details() == "name: is required"
        first = c.backup_store("once")
        with expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "name"):
            c.backup_store("once")
        assert backup.read_manifest(first.path).blake3 == first.blake3
        assert sorted(os.listdir(backup.default_dir(str(fresh_sidecar.data_dir)))) == ["once"]
        unnamed = c.backup_store()
        assert os.path.basename(unnamed.path).startswith("backup-")


def test_scheduled_backups_keep_the_newest(tmp_path):
    backups = tmp_path / "bk"
    proc = SidecarProcess(tmp_path / "data", "--backup-dir", str(backups), "--backup-interval", "1.05",
                          "--backup-keep", "2").start()
    try:
        fill(proc.address, threads=1, turns=2)
        with proc.client() as c:
            c.backup_store("operator-named")  # never pruned
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            timed = sorted(n for n in os.listdir(backups) if n.startswith("backup-")) if backups.exists() else []
            if "scheduled backup" in proc.log() and proc.log().count("scheduled backup") >= 3:
                break
            time.sleep(0.2)
        time.sleep(0.2)
        timed = sorted(n for n in os.listdir(backups) if n.startswith("backup-"))
        assert proc.log().count("scheduled backup") >= 3, proc.log()[-2000:]
        assert len(timed) == 2 and "operator-named" in os.listdir(backups)
        for n in timed:
            assert backup.check_backup(str(backups / n))[1].clean
    finally:
        proc.stop()


def test_prune_timed_touches_only_time_named_backups(tmp_path):
    for name in ["backup-20260101T000000Z", "backup-20260102T000000Z", "backup-20260103T000000Z", "mine",
                 "backup-half"]:
        (tmp_path / name).mkdir()
        if name != "backup-half":  # an unfinished or foreign directory has no manifest: left alone
            (tmp_path / name / "backup.json").write_text("{}")
    deleted = backup.prune_timed(str(tmp_path), keep=1)
    assert [os.path.basename(p) for p in deleted] == ["backup-20260101T000000Z", "backup-20260102T000000Z"]
    assert sorted(os.listdir(tmp_path)) == ["backup-20260103T000000Z", "backup-half", "mine"]
