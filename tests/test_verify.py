"""storage/verify.py over every kind of record: the tables it decodes and the references it follows are the
ones storage/layout.py and storage/gc.py declare (one place each), so a conversation, memory items with
history and a run all verify clean, and damage under a memory item or a truncated conversation record is
found and named. AdminService.CheckIntegrity is the same check, summarised."""
from __future__ import annotations

from pathlib import Path

import lmdb
import pytest
from conftest import SidecarProcess
from inspect_seed import seed_conversation, seed_memory

from agentstate import Client
from sidecar.storage import layout, verify


def test_every_table_is_decoded_or_declared_raw():
    decoded, raw = set(layout.RECORD_DECODERS), set(layout.RAW_TABLES)
    assert not decoded & raw
    assert decoded | raw == set(layout.DB_NAMES)  # a new table must be classified
    assert {table for table, _ in layout.ROOT_REFS} <= decoded


@pytest.fixture
def seeded(tmp_path) -> Path:
    data = tmp_path / "data"
    proc = SidecarProcess(data, "--no-compress").start()
    try:
        with Client(proc.address) as c:
            seed_conversation(c, "chat")
            seed_memory(c)
            c.memory.put(["users", "cy"], "notes", {"text": "remember the blue door " * 8})
            c.put_checkpoint("job", {"step": 1}, checkpoint_id="c1")
            c.runs.create("job", claim=True, metadata={"kind": "nightly"})
            assert c.check_integrity().problems == []
    finally:
        proc.stop()
    return data


def _edit(data: Path, table: str, pick, change) -> bytes:
    """Apply ``change`` (bytes -> bytes) to the first record of ``table`` for which ``pick(key, value)``."""
    env = lmdb.open(str(data), max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    try:
        db = env.open_db(table.encode())
        with env.begin(write=True) as txn:
            for key, value in txn.cursor(db=db):
                if pick(bytes(key), bytes(value)):
                    txn.put(bytes(key), change(bytes(value)), db=db)
                    return bytes(key)
        raise AssertionError(f"no record of {table} picked")
    finally:
        env.close()


def test_a_store_with_every_kind_of_record_verifies_clean(seeded):
    report = verify.verify_path(str(seeded))
    assert report.clean, report.to_dict()
    assert report.records > report.checkpoints > 0


def test_damage_under_a_memory_item_is_found_and_named(seeded):
    env = lmdb.open(str(seeded), max_dbs=len(layout.DB_NAMES) + 8, subdir=True, readonly=True)
    db = env.open_db(b"memitems", create=False)
    with env.begin() as txn:
        items = [layout.memitem_decoder.decode(v) for _, v in txn.cursor(db=db)]
    env.close()
    node_id = max(items, key=lambda rec: rec.updated_us).value  # users/cy notes, the last put
    _edit(seeded, "nodes", lambda k, v: k == node_id, lambda v: v[:-1] + bytes([v[-1] ^ 0x01]))
    report = verify.verify_path(str(seeded))
    assert ("nodes", node_id.hex()) in {(d.table, d.key) for d in report.damaged}
    assert any(d.table == "memitems" and node_id.hex() in d.problem for d in report.damaged)


def test_a_truncated_conversation_record_is_found(seeded):
    key = _edit(seeded, "csums", lambda k, v: True, lambda v: v[: len(v) // 2])
    report = verify.verify_path(str(seeded))
    assert [(d.table, d.key) for d in report.damaged] == [("csums", key.hex())]


def test_check_integrity_is_the_summary_of_verify(seeded):
    key = _edit(seeded, "mempathid", lambda k, v: True, lambda v: b"\xc1")  # never valid MessagePack
    proc = SidecarProcess(seeded).start()
    try:
        with Client(proc.address) as c:
            got = c.check_integrity()
    finally:
        proc.stop()
    report = verify.verify_path(str(seeded))
    assert got.checked_checkpoints == report.checkpoints and got.checked_blobs == report.nodes
    assert got.missing_blobs == 0 and len(got.problems) == 1
    assert got.problems[0].startswith(f"mempathid {key.hex()}: does not decode")
