"""The write-ahead log of the ``process`` durability mode: replay applies an unbroken prefix of the
acknowledged records and stops at the first torn, corrupt, missing or out-of-order one."""
from __future__ import annotations

import os

from sidecar.storage import wal
def _write(path, first_seq: int, records: list[bytes]) -> str:
    name = os.path.join(path, wal.file_name(first_seq))
    with open(name, "wb") as f:
        for r in records:
            f.write(r)
    return name


def _ops(seq: int) -> list:
    return [[0, f"key-{seq}".encode(), f"value-{seq}".encode()], [1, b"gone", None]]


def _replay(path, applied: int = 0) -> tuple[int, list[int]]:
    seen: list[int] = []

    def apply(seq, ops):
        assert ops == _ops(seq)  # the exact change set comes back
        seen.append(seq)

    return wal.replay(str(path), applied, apply), seen


def test_records_round_trip_in_order(tmp_path):
    _write(tmp_path, 1, [wal.encode_record(s, _ops(s)) for s in (1, 2, 3)])
    _write(tmp_path, 4, [wal.encode_record(s, _ops(s)) for s in (4, 5)])
    assert _replay(tmp_path) == (5, [1, 2, 3, 4, 5])


def test_records_already_committed_are_skipped(tmp_path):
    _write(tmp_path, 1, [wal.encode_record(s, _ops(s)) for s in (1, 2, 3, 4)])
    assert _replay(tmp_path, applied=2) == (4, [3, 4])
    assert _replay(tmp_path, applied=4) == (4, [])


def test_a_torn_tail_ends_the_replay(tmp_path):
    recs = [wal.encode_record(s, _ops(s)) for s in (1, 2, 3)]
    _write(tmp_path, 1, [recs[0], recs[1], recs[2][: len(recs[2]) - 3]])  # the last write() cut short
    assert _replay(tmp_path) == (2, [1, 2])


def test_a_corrupt_record_ends_the_replay_and_nothing_after_it_is_applied(tmp_path):
    recs = [bytearray(wal.encode_record(s, _ops(s))) for s in (1, 2, 3)]
    recs[1][-1] ^= 0xFF  # one flipped bit in record 2's payload: its CRC no longer matches
    _write(tmp_path, 1, [bytes(r) for r in recs])
    _write(tmp_path, 4, [wal.encode_record(4, _ops(4))])
    assert _replay(tmp_path) == (1, [1])


def test_a_gap_ends_the_replay(tmp_path):
    _write(tmp_path, 1, [wal.encode_record(s, _ops(s)) for s in (1, 2)])
    _write(tmp_path, 4, [wal.encode_record(s, _ops(s)) for s in (4, 5)])  # record 3 is missing
    assert _replay(tmp_path) == (2, [1, 2])


def test_stale_bytes_after_a_record_end_the_replay(tmp_path):
    _write(tmp_path, 1, [wal.encode_record(s, _ops(s)) for s in (1, 2, 1, 3)])  # an old record reappears
    assert _replay(tmp_path) == (2, [1, 2])


def test_log_appends_and_drops_committed_files(tmp_path, monkeypatch):
    monkeypatch.setattr(wal, "ROTATE_BYTES", 1)  # every commit starts a new file
    log = wal.Log(str(tmp_path), 1)
    try:
        assert [log.append(_ops(s)) for s in (1, 2)] == [1, 2]
        log.committed(2)  # both records are in LMDB: a new file starts at 3, the old one goes
        assert log.append(_ops(3)) == 3
        assert [first for first, _ in wal.wal_files(str(tmp_path))] == [3]
    finally:
        log.close()
    assert _replay(tmp_path, applied=2) == (3, [3])
