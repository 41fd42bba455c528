"""Crash safety: SIGKILL the sidecar over and over under concurrent writers (see crashloop.py for the rules).

``test_kill_loop`` is the CI run (30 kills, about a minute). ``test_verifier_catches_damage``
damages a store on purpose and checks that the same verifier reports it, so a green kill loop
means something.
"""
from __future__ import annotations

import os

import lmdb
import msgspec
import pytest

import crashloop
from conftest import SidecarProcess

KILLS = int(os.environ.get("CRASH_TEST_KILLS", "30"))
SEED = int(os.environ.get("CRASH_TEST_SEED", "20240611"))


def _summary(r: crashloop.LoopResult) -> str:
    from sidecar.storage import hotpath
    return (f"{r.kills} kills in {r.seconds:.1f}s (native hot path: {hotpath.NATIVE}); "
            f"requests outstanding at a kill: {r.outstanding_at_kill}; map growths: {r.map_growths}; "
            f"log: {r.log_counts}; verifier: {r.stats}")


@pytest.mark.timeout(900)
def test_kill_loop(tmp_path):
    # a 1 MiB initial map, so the map also grows under the loop (batch aborted, map doubled, batch rerun);
    # how often depends on timing (a restart maps twice the file), so it is reported, not asserted
    result = crashloop.run_loop(tmp_path, cycles=KILLS, writers=3, seed=SEED, run_min=0.05, run_max=1.0,
                                retire_at=40, server_args=("--map-size", "1M"))
    print(_summary(result))
    assert not result.problems, "\n".join(result.problems[:50]) + "\n" + _summary(result)
    assert result.kills >= 20
    # the loop really ran under load: acknowledged work, kills that hit requests, retries and abandons
    assert result.stats["acked_checkpoints"] > 100
    assert result.log_counts.get("ack_writes", 0) > 10
    assert result.stats["full_reads"] >= result.stats["checkpoints_listed"]
    assert result.outstanding_at_kill > 0
    assert result.log_counts.get("fail", 0) > 0


@pytest.mark.timeout(900)
def test_kill_loop_process_mode(tmp_path):
    """--durability process: writes are acknowledged once they are in the write-ahead log (not fsynced), so
    at each SIGKILL acknowledged writes exist only in the log and the open transaction; the restart must
    replay them: every acknowledged checkpoint and write is there, byte for byte, nothing half-applied.
    A long commit interval keeps most acknowledged writes out of LMDB when the kill comes."""
    result = crashloop.run_loop(tmp_path, cycles=max(10, KILLS // 2), writers=3, seed=SEED + 1, run_min=0.05,
                                run_max=1.0, retire_at=40,
                                server_args=("--map-size", "1M", "--durability", "process", "--commit-interval", "2"))
    print(_summary(result))
    assert not result.problems, "\n".join(result.problems[:50]) + "\n" + _summary(result)
    assert result.stats["acked_checkpoints"] > 100
    assert result.outstanding_at_kill > 0
    log = (tmp_path / "data.log").read_text(errors="replace")
    assert "replayed" in log  # the restarts really had acknowledged writes to take from the log


def _store_rows(data_dir):
    """(env, dbs) of a stopped sidecar's LMDB, opened directly."""
    from sidecar.storage import layout
    env = lmdb.open(str(data_dir), max_dbs=len(layout.DB_NAMES) + 8, subdir=True)
    return env, {name: env.open_db(name.encode()) for name in layout.DB_NAMES}


def test_verifier_catches_damage(tmp_path):
    """Break a store in four ways a crash could; the verifier must name each."""
    from sidecar.storage import layout
    from sidecar.storage.gc import mark

    result = crashloop.run_loop(tmp_path, cycles=3, writers=2, seed=7, run_min=0.5, run_max=1.0, retire_at=1000)
    assert not result.problems, result.problems[:20]
    logs = crashloop.LogReader([tmp_path / f"writer{w}.jsonl" for w in range(2)]).read()
    env, db = _store_rows(tmp_path / "data")
    tkeys = {}
    with env.begin(db=db["threads"]) as txn:
        for key, raw in txn.cursor():
            tkeys[layout.thread_decoder.decode(raw).tkey] = bytes(key).split(b"\0", 1)[1].decode()
    manifests = {}
    with env.begin() as txn:
        for key, raw in txn.cursor(db=db["ckpts"]):
            tkey, cns, cid = layout.split_ckpt_key(key)
            manifests[(tkeys[tkey], cns, cid)] = (bytes(key), layout.manifest_decoder.decode(raw))
    acked = [k for k in manifests if k in logs.ckpt_acks]

    # (a) a half-applied put: a checkpoint whose messages root is its parent's, metadata and count new
    half = next(k for k in acked if manifests[k][1].parent_id
                and (k[0], k[1], manifests[k][1].parent_id) in manifests
                and dict(manifests[k][1].channels)["messages"]
                != dict(manifests[(k[0], k[1], manifests[k][1].parent_id)][1].channels)["messages"])
    key_a, m = manifests[half]
    parent_roots = dict(manifests[(half[0], half[1], m.parent_id)][1].channels)
    m.channels = [(name, parent_roots["messages"] if name == "messages" else root) for name, root in m.channels]
    # (b) an acknowledged checkpoint lost
    lost = next(k for k in acked if k != half and k[0] != half[0])
    # (c) a node gone: a list leaf that only one checkpoint reaches would do; any leaf shows up in integrity
    # (d) half a pending-write batch
    batch = next(wk for wk in logs.write_acks if logs.write_intents[wk]["k"] >= 2 and wk[:3] in manifests
                 and wk[:3] not in (half, lost))
    with env.begin(write=True) as txn:
        txn.put(key_a, layout.encode(m), db=db["ckpts"])
        txn.delete(manifests[lost][0], db=db["ckpts"])
        bkey, bm = manifests[batch[:3]]
        txn.delete(layout.write_key(layout.split_ckpt_key(bkey)[0], batch[1], batch[2], batch[3], 1),
                   db=db["writes"])
        # not one the checkpoint of (d) reaches through its channels or pending writes: that
        # checkpoint must still read, so that (d) is seen
        batch_tkey, batch_cns, batch_cid = layout.split_ckpt_key(bkey)
        prefix = layout.writes_prefix(batch_tkey, batch_cns, batch_cid)
        write_roots = [layout.write_decoder.decode(raw).value for key, raw in txn.cursor(db=db["writes"])
                       if bytes(key).startswith(prefix)]
        spared: set[bytes] = set()
        mark(lambda i: txn.get(i, db=db["nodes"]), [root for _, root in bm.channels] + write_roots, spared)
        victim = None
        for node_id, record in txn.cursor(db=db["nodes"]):
            # a list leaf: record = hash + stored node (docs/storage.md)
            if bytes(record[32:33]) == b"l" and bytes(node_id) not in spared:
                victim = bytes(node_id)
                break
        assert victim is not None
        txn.delete(victim, db=db["nodes"])
    env.close()

    side = SidecarProcess(tmp_path / "data").start()
    try:
        verifier = crashloop.Verifier(7, [tmp_path / f"writer{w}.jsonl" for w in range(2)])
        with side.client() as c:
            problems = verifier.verify(c, full=True)
    finally:
        side.stop()
    text = "\n".join(problems)
    assert f"{half}: lengths disagree" in text, text[:3000]  # the consistency rules alone see it
    assert f"{half}: roots" in text and f"{half}: etag" in text  # and so does the intent log
    assert f"{lost}: acknowledged checkpoint missing" in text
    assert f"{batch[:3]}: task {batch[3]} has writes" in text and "(half a batch)" in text
    assert "check_integrity: " in text and "missing blobs" in text
    assert "does not read" in text  # a checkpoint reaching the lost leaf fails to read


def test_crash_writer_content_is_deterministic():
    """Writer and verifier rebuild the same values from a recipe (the logs rely on it)."""
    a, b = crashloop.Content(5, 1), crashloop.Content(5, 1)
    it = {"tno": 2, "seq": 9, "doc": 3, "source": "loop", "msgs": [[0, 4], [7, 9]]}
    assert msgspec.msgpack.encode(a.values(it)) == msgspec.msgpack.encode(b.values(it))
    channels, metadata = a.values(it)
    assert [m["id"] for m in channels["messages"]] == [0, 1, 2, 3, 7, 8]
    assert len(channels["doc"]) > 32 * 1024
    assert crashloop.consistency_problems(channels, metadata) == []
    broken = dict(channels, count=channels["count"] + 1)
    assert crashloop.consistency_problems(broken, metadata)
    assert crashloop.Content(6, 1).values(it) != a.values(it)
