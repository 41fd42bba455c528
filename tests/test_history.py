"""GetChannelHistory, PruneCheckpoints history_channels, and known roots that are longer lists."""
from __future__ import annotations

import datetime as dt
import time

import grpc
import pytest
from conftest import expect_error

from agentstate import Append, Keep, Opaque, apply_list_delta, channel_value, from_value

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND


def chain(client, tid, ids, channels_of, parent="", cns=""):
    """Put checkpoints ``ids`` one after the other; ``channels_of(i)`` gives each one's channels."""
    for i, cid in enumerate(ids):
        client.put_checkpoint(tid, channels_of(i), checkpoint_id=cid, parent_id=parent, checkpoint_ns=cns)
        parent = cid
    return parent


def history(client, tid, channels, checkpoint_id="", **kw):
    resp = client.get_channel_history(tid, channels, checkpoint_id, **kw)
    return resp, {h.channel: h for h in resp.channels}


def write_values(h):
    return [(w.task_id, w.idx, from_value(w.value)) for w in h.writes]


@pytest.fixture
def walked(client, tid):
    """a -> b -> c -> d. "log" is held by a only, "mid" by a and c, "never" by none; writes on every one."""
    def channels(i):
        out = {"other": i}
        if i == 0:
            out["log"] = ["seed"]
        if i in (0, 2):
            out["mid"] = f"mid@{i}"
        return out

    chain(client, tid, "abcd", channels)
    for cid in "abcd":
        # task ids and paths chosen so that path order differs from task-id order
        client.put_writes(tid, cid, [("t2", 0, "log", f"{cid}:t2:0", "~1"), ("t1", 1, "log", f"{cid}:t1:1", "~2"),
                                     ("t1", 0, "log", f"{cid}:t1:0", "~2"), ("t3", 0, "mid", f"{cid}:mid"),
                                     ("t3", 1, "never", f"{cid}:never"), ("t4", 0, "other", f"{cid}:other")])
    return tid


def test_history_walks_back_to_the_nearest_value(client, walked):
    resp, h = history(client, walked, ["log", "mid", "never"], "d")
    assert resp.checkpoint_id == "d" and [x.channel for x in resp.channels] == ["log", "mid", "never"]
    # oldest checkpoint first; within one by (task_path, task_id, idx); d's own writes are not history
    assert write_values(h["log"]) == [(t, i, f"{c}:{t}:{i}") for c in "abc" for t, i in
                                      (("t2", 0), ("t1", 0), ("t1", 1))]
    assert [w.task_path for w in h["log"].writes[:3]] == ["~1", "~2", "~2"]
    assert h["log"].seed_checkpoint_id == "a" and from_value(h["log"].seed.value) == ["seed"]
    # "mid" stops at c, its nearest holder (c's writes included, not b's)
    assert write_values(h["mid"]) == [("t3", 0, "c:mid")]
    assert h["mid"].seed_checkpoint_id == "c" and from_value(h["mid"].seed.value) == "mid@2"
    # never held: every ancestor's writes, no seed
    assert write_values(h["never"]) == [("t3", 1, f"{c}:never") for c in "abc"]
    assert not h["never"].HasField("seed") and h["never"].seed_checkpoint_id == ""
    assert resp.depth == 3


def test_history_of_the_latest_checkpoint_and_of_the_root(client, walked):
    resp, h = history(client, walked, ["mid"])
    assert resp.checkpoint_id == "d" and h["mid"].seed_checkpoint_id == "c"
    resp, h = history(client, walked, ["log", "log"], "a")  # the root has no ancestors; duplicates collapse
    assert len(resp.channels) == 1 and not h["log"].writes and not h["log"].HasField("seed")
    assert resp.depth == 0


def test_history_follows_the_parent_chain_of_a_fork(client, tid):
    chain(client, tid, ["a", "b"], lambda i: {"v": i} if i == 0 else {"x": i})
    client.put_checkpoint(tid, {"x": 9}, checkpoint_id="b2", parent_id="a")  # a fork next to b
    for cid in ("a", "b", "b2"):
        client.put_writes(tid, cid, [("t", 0, "log", cid)])
    client.put_checkpoint(tid, {"x": 10}, checkpoint_id="c", parent_id="b2")
    _, h = history(client, tid, ["log", "v"], "c")
    assert write_values(h["log"]) == [("t", 0, "a"), ("t", 0, "b2")]
    assert h["v"].seed_checkpoint_id == "a" and write_values(h["v"]) == []


def test_history_stops_at_a_missing_ancestor(client, tid):
    chain(client, tid, "abc", lambda i: {"v": i} if i == 0 else {"x": i})
    for cid in "abc":
        client.put_writes(tid, cid, [("t", 0, "log", cid)])
    assert client.prune([tid], keep_latest=2) == 1  # a is gone
    resp, h = history(client, tid, ["log", "v"], "c")
    assert write_values(h["log"]) == [("t", 0, "b")] and not h["v"].HasField("seed") and resp.depth == 1


def test_a_parent_cycle_ends_the_chain(client, tid):
    """Parent ids may name checkpoints written later, so a chain can come back on itself (x's parent y,
    then y with parent x): walking it ends there, for GetChannelHistory and for a history-keeping prune,
    instead of running forever."""
    client.put_checkpoint(tid, {"x": 0}, checkpoint_id="x", parent_id="y")
    client.put_writes(tid, "x", [("t", 0, "log", "at x")])
    client.put_checkpoint(tid, {"x": 1}, checkpoint_id="y", parent_id="x")
    client.put_writes(tid, "y", [("t", 0, "log", "at y")])
    client.put_checkpoint(tid, {"x": 2}, checkpoint_id="z", parent_id="y")
    resp, h = history(client, tid, ["log", "v"], "z")
    assert write_values(h["log"]) == [("t", 0, "at x"), ("t", 0, "at y")] and resp.depth == 2
    assert not h["v"].HasField("seed")
    assert client.prune([tid], keep_latest=1, history_channels=["log", "v"]) == 0  # z needs y and x
    assert ids(client, tid) == ["x", "y", "z"]


def test_history_seed_with_known_roots(client, tid):
    first = client.put_checkpoint(tid, {"log": [1, 2, 3]}, checkpoint_id="a")
    root = first.checkpoint.channels["log"].root
    client.put_checkpoint(tid, {"log": Append([4])}, checkpoint_id="b", parent_id="a")
    client.put_checkpoint(tid, {"x": 1}, checkpoint_id="c", parent_id="b")
    _, h = history(client, tid, ["log"], "c", known_roots={"log": root})
    assert h["log"].seed_checkpoint_id == "b"
    assert h["log"].seed.WhichOneof("content") == "delta"
    assert channel_value(h["log"].seed, [1, 2, 3]) == [1, 2, 3, 4]
    _, h = history(client, tid, ["log"], "b", known_roots={"log": root})
    assert h["log"].seed.WhichOneof("content") is None and h["log"].seed.root == root


def test_history_errors(client, tid):
    with expect_error(NOT_FOUND, "THREAD_NOT_FOUND", "thread_id"):
        client.get_channel_history(tid, ["x"])
    client.put_checkpoint(tid, {"v": 1}, checkpoint_id="a")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND", "checkpoint_id"):
        client.get_channel_history(tid, ["x"], "nope")
    with expect_error(NOT_FOUND, "CHECKPOINT_NOT_FOUND"):
        client.get_channel_history(tid, ["x"], checkpoint_ns="other")
    with expect_error(INVALID, "INVALID_FIELD", "channels"):
        client.get_channel_history(tid, [])
    with expect_error(INVALID, "INVALID_FIELD", "channels[1]"):
        client.get_channel_history(tid, ["ok", "bad\x00"])
    with expect_error(INVALID, "INVALID_FIELD", "channels"):
        client.get_channel_history(tid, [f"c{i}" for i in range(1001)])


def test_history_depth_limit(client, tid):
    chain(client, tid, [f"c{i:02d}" for i in range(6)], lambda i: {"x": i})
    resp, _ = history(client, tid, ["log"], max_depth=5)
    assert resp.depth == 5
    with expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", "max_depth", limit="history_depth"):
        client.get_channel_history(tid, ["log"], max_depth=4)


# ---------------------------------------------------------------- prune keeping history

def ids(client, tid, cns=None):
    return sorted(cp.checkpoint_id for cp in client.list_checkpoints(tid, checkpoint_ns=cns))


def test_prune_keeps_the_chain_back_to_the_nearest_value(client, tid):
    # "log" is held at c01 and c04; the latest (c06) holds none: c05 and c04 must stay
    chain(client, tid, [f"c{i:02d}" for i in range(7)], lambda i: {"x": i, **({"log": [i]} if i in (1, 4) else {})})
    for i in range(7):
        client.put_writes(tid, f"c{i:02d}", [("t", 0, "log", i)])
    assert client.prune([tid], keep_latest=1, history_channels=["log"]) == 4
    assert ids(client, tid) == ["c04", "c05", "c06"]
    _, h = history(client, tid, ["log"], "c06")
    assert h["log"].seed_checkpoint_id == "c04" and write_values(h["log"]) == [("t", 0, 4), ("t", 0, 5)]
    # the writes of kept ancestors are kept with them
    assert [w.channel for w in client.get_checkpoint(tid, "c05", include_pending_writes=True).pending_writes] == ["log"]


def test_prune_history_without_any_value_keeps_back_to_the_oldest_write(client, tid):
    chain(client, tid, [f"c{i}" for i in range(6)], lambda i: {"x": i})
    for i in (2, 4):
        client.put_writes(tid, f"c{i}", [("t", 0, "log", i)])
    client.prune([tid], keep_latest=1, history_channels=["log", "absent"])
    assert ids(client, tid) == ["c2", "c3", "c4", "c5"]


def test_prune_history_channel_held_by_the_kept_checkpoint(client, tid):
    chain(client, tid, [f"c{i}" for i in range(4)], lambda i: {"log": [i]})
    client.prune([tid], keep_latest=1, history_channels=["log"])
    assert ids(client, tid) == ["c3"]


def test_prune_history_per_checkpoint_namespace_and_older_than(client, tid):
    chain(client, tid, [f"c{i}" for i in range(4)], lambda i: {"x": i, **({"log": i} if i == 1 else {})})
    chain(client, tid, [f"s{i}" for i in range(3)], lambda i: {"x": i}, cns="sub")
    client.put_writes(tid, "s1", [("t", 0, "log", 1)], checkpoint_ns="sub")
    client.prune([tid], keep_latest=1, history_channels=["log"])
    assert ids(client, tid, "") == ["c1", "c2", "c3"] and ids(client, tid, "sub") == ["s1", "s2"]
    # older_than: everything is older than "now"; the kept set is empty, so nothing is held back
    time.sleep(0.01)
    assert client.prune([tid], older_than=dt.datetime.now(dt.timezone.utc), history_channels=["log"]) == 5
    assert ids(client, tid) == []


def test_prune_history_channels_validation(client, tid):
    client.put_checkpoint(tid, {"x": 1})
    with expect_error(INVALID, "INVALID_FIELD", "history_channels[0]"):
        client.prune([tid], keep_latest=1, history_channels=["bad\x00"])
    with expect_error(INVALID, "INVALID_FIELD", "history_channels"):
        client.prune([tid], keep_latest=1, history_channels=[f"c{i}" for i in range(1001)])
    # delete_all ignores them
    assert client.prune([tid], delete_all=True, history_channels=["x"]) == 1


# ---------------------------------------------------------------- known roots of longer lists

def test_known_root_longer_than_the_value(client, tid):
    client.put_checkpoint(tid, {"l": [1, 2]}, checkpoint_id="a")
    b = client.put_checkpoint(tid, {"l": Append([3, 4, 5])}, checkpoint_id="b", parent_id="a")
    client.put_checkpoint(tid, {"l": Append([9], keep_first=1)}, checkpoint_id="c", parent_id="b")
    longer = b.checkpoint.channels["l"].root
    cp = client.get_checkpoint(tid, "a", known_roots={"l": longer})
    d = cp.channels["l"]
    assert d.WhichOneof("content") == "delta" and d.delta.keep_first == 2 and not d.delta.append
    assert d.delta.base_root == longer
    assert apply_list_delta([1, 2, 3, 4, 5], d.delta) == [1, 2]
    # [1, 9] is no prefix of [1..5]: whole value
    assert from_value(client.get_checkpoint(tid, "c", known_roots={"l": longer}).channels["l"].value) == [1, 9]


def test_list_with_known_roots(client, tid):
    head = chain(client, tid, [f"c{i:02d}" for i in range(12)],
                 lambda i: {"l": [Opaque("t", b"0")]} if i == 0 else {"l": Append([Opaque("t", bytes([i]))]),
                                                                     "s": i})
    latest = client.get_checkpoint(tid, head)
    root = latest.channels["l"].root
    items = from_value(latest.channels["l"].value)
    listed = list(client.list_checkpoints(tid, include_values=True, known_roots={"l": root}, page_size=5))
    assert [cp.checkpoint_id for cp in listed] == [f"c{i:02d}" for i in range(11, -1, -1)]
    for n, cp in zip(range(12, 0, -1), listed):
        cv = cp.channels["l"]
        if n == 12:
            assert cv.WhichOneof("content") is None
        else:
            assert cv.WhichOneof("content") == "delta" and cv.delta.keep_first == n and not cv.delta.append
        assert channel_value(cv, items) == items[:n]
        assert ("s" in cp.channels) == (n > 1)
    # without include_values known_roots changes nothing
    bare = next(client.list_checkpoints(tid, known_roots={"l": root}))
    assert bare.channels["l"].WhichOneof("content") is None and bare.channels["l"].root == root


def test_keep_then_history(client, tid):
    """Kept channels count as held (the manifest has them) for the history walk."""
    client.put_checkpoint(tid, {"log": [0]}, checkpoint_id="a")
    client.put_checkpoint(tid, {"log": Keep()}, checkpoint_id="b", parent_id="a")
    client.put_checkpoint(tid, {"x": 1}, checkpoint_id="c", parent_id="b")
    _, h = history(client, tid, ["log"], "c")
    assert h["log"].seed_checkpoint_id == "b"
