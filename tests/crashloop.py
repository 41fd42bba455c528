"""crashloop: kill -9 the sidecar under concurrent writers and prove nothing acknowledged is lost.

Shared by tests/test_crash.py (a short CI run) and benchmarks/soak_crash.py (a long one).

Pieces:

* :class:`Content` turns a small *recipe* (message id ranges, document version,
  sequence number) into the exact channel values and metadata of a checkpoint.
  Writer and verifier share it, so the writer's log names every value it sent
  without copying whole message lists into the log.
* :class:`Writer` runs in its own process (``python tests/crashloop.py writer``).
  It writes checkpoints to several threads and checkpoint namespaces, as whole
  values and as deltas (Append with and without keep_first, SetKeys with
  deletes, Keep), forks from older checkpoints, stores pending-write batches,
  retires, deletes and garbage-collects threads. Before each request it logs
  an ``intent`` (the recipe, how each channel was sent, and a digest of exactly
  what was sent, which the verifier rebuilds from the log alone); after each
  acknowledgement an ``ack`` (etag and roots returned). Every line is flushed
  at once. A request that failed because the sidecar died is either retried
  with the same request_id or abandoned; either way its outcome is unknown
  to the writer until the verifier looks.
* :class:`Verifier` reads the logs and the restarted sidecar and reports every
  problem it sees (see ``check_checkpoint`` and ``verify`` for the rules).
* :func:`run_loop` starts the sidecar (tests/conftest.py ``SidecarProcess``)
  and the writers, then repeats: run a random while, SIGKILL, pause the
  writers and wait until each has paused (it pauses before its next request,
  so every ack received before the kill is in its log by then), restart,
  verify the quiescent store, resume the writers (a writer resumes by retrying
  or abandoning the request the kill interrupted). It ends with a clean stop, restart, garbage
  collection and a full verification of every value in the store.

How a half-applied request would show: each checkpoint carries four channels
and metadata that must agree with each other (``count`` = len(messages) =
state.n = metadata.n; blake3 digest of the messages in state and metadata;
digest of ``doc`` in state and metadata; state.seq = metadata.seq and exactly
one rotating key ``k{seq % 4}``), and every checkpoint found in the store,
acknowledged or not, must be byte-identical to the intent its writer logged
(values, metadata, parent, schema version, and the roots and etag recomputed
from the intended values). Pending writes go in batches whose writes must be
all there or all absent. An unacknowledged thread deletion must leave the
thread whole or remove it whole.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import msgspec
from blake3 import blake3

from agentstate import Append, Client, Keep, RetryPolicy, SetKeys, codec
from agentstate.errors import AgentStateError, NotFound

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 3
CHANNELS = ("count", "doc", "messages", "state")
TRANSPORT_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED,
                   grpc.StatusCode.DEADLINE_EXCEEDED}

WORDS = (
    "the of and to in is that it for was on are as with his they at be this from have or by one had not but "
    "what all were when we there can an your which their said if do will each about how up out them then she "
    "many some so these would other into has more her two like him see time could no make than first been its "
    "who now people my made over did down only way find use may water long little very after words called just "
    "where most know get through back much before go good new write our used me man too any day same right look "
    "think also around another came come work three word must because does part even place well such here take "
    "why things help put years different away again off went old number great tell men say small every found "
    "still between name should home big give air line set own under read last never us left end along while "
    "might next sound below saw something thought both few those always looked show large often together asked "
    "house world going want school important until form food keep children feet land side without boy once "
    "animals life enough took sometimes four head above kind began almost live page got earth need far hand "
    "high year mother light parts country father let night following picture being study second eyes soon "
    "checkpoint thread channel agent tool model token retry latency queue socket commit snapshot branch merge"
).split()


def _words(rng: random.Random, nchars: int) -> str:
    out: list[str] = []
    n = -1
    while n < nchars:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def _digest(data: bytes) -> str:
    return blake3(data).hexdigest()[:32]


def expand(ranges: list) -> list[int]:
    return [k for a, b in ranges for k in range(a, b)]


def count_of(ranges: list) -> int:
    return sum(b - a for a, b in ranges)


def truncate(ranges: list, keep: int) -> list:
    out = []
    for a, b in ranges:
        if keep <= 0:
            break
        take = min(b - a, keep)
        out.append([a, a + take])
        keep -= take
    return out


def add_range(ranges: list, a: int, b: int) -> list:
    if a == b:
        return [list(r) for r in ranges]
    out = [list(r) for r in ranges]
    if out and out[-1][1] == a:
        out[-1][1] = b
    else:
        out.append([a, b])
    return out


# ----------------------------------------------------------------- content

class Content:
    """The values a writer (``wid``) puts, as a pure function of the run seed and a recipe."""

    DOC_CHARS = 40_000  # above the 32 KiB threshold: stored as content-defined chunks

    def __init__(self, seed: int, wid: int) -> None:
        self.seed = seed
        self.wid = wid
        self._messages: dict[tuple[int, int], dict] = {}
        self._docs: dict[tuple[int, int], str] = {}
        self._values: dict[tuple, tuple] = {}

    def _rng(self, *parts) -> random.Random:
        return random.Random("/".join(map(str, (self.seed, self.wid, *parts))))

    def message(self, tno: int, k: int) -> dict:
        key = (tno, k)
        m = self._messages.get(key)
        if m is None:
            rng = self._rng(tno, "m", k)
            m = {"id": k, "role": ("user", "assistant")[k % 2], "text": _words(rng, rng.randint(20, 300))}
            if len(self._messages) > 200_000:
                self._messages.clear()
            self._messages[key] = m
        return m

    def messages(self, tno: int, ranges: list) -> list[dict]:
        return [self.message(tno, k) for k in expand(ranges)]

    def doc(self, tno: int, v: int) -> str:
        key = (tno, v)
        d = self._docs.get(key)
        if d is None:
            base = self._docs.get((tno, -1))
            if base is None:
                base = self._docs[(tno, -1)] = _words(self._rng(tno, "doc"), self.DOC_CHARS)
            if v == 0:
                d = base
            else:  # one local edit per version: most CDC chunks are shared with other versions
                rng = self._rng(tno, "doc", v)
                pos = rng.randrange(len(base) - 400)
                d = base[:pos] + f"[edit {v}] " + _words(rng, 150) + base[pos + 200:]
            if len(self._docs) > 500:
                self._docs.clear()
            self._docs[key] = d
        return d

    def write_value(self, tno: int, batch: int, i: int, k: int) -> dict:
        rng = self._rng(tno, "w", batch, i)
        return {"batch": batch, "i": i, "of": k, "text": _words(rng, rng.randint(10, 120))}

    def values(self, it: dict) -> tuple[dict, dict]:
        """(channels, metadata) of a checkpoint intent, as Python values."""
        key = (it["tno"], it["seq"], it["doc"], it["source"], json.dumps(it["msgs"]))
        cached = self._values.get(key)
        if cached is not None:
            return cached
        tno, seq = it["tno"], it["seq"]
        msgs = self.messages(tno, it["msgs"])
        n = len(msgs)
        digest = _digest(codec.encode(msgs))
        doc = self.doc(tno, it["doc"])
        doc_digest = _digest(doc.encode())
        state = {"n": n, "digest": digest, "doc_digest": doc_digest, "doc_v": it["doc"], "seq": seq,
                 f"k{seq % 4}": seq}
        channels = {"messages": msgs, "count": n, "state": state, "doc": doc}
        metadata = {"writer": self.wid, "thread": tno, "seq": seq, "step": seq, "n": n, "digest": digest,
                    "doc_digest": doc_digest, "source": it["source"], "run_id": f"run-{self.wid}-{tno}-{seq // 8}"}
        if len(self._values) > 5000:
            self._values.clear()
        self._values[key] = (channels, metadata)
        return channels, metadata


def request_channels(content: Content, it: dict, parent_state: dict | None) -> tuple[dict, dict]:
    """The channel writes and metadata of a checkpoint intent, exactly as the writer passes them to put_checkpoint."""
    values, metadata = content.values(it)
    ops = it["ops"]
    channels: dict = {"count": values["count"]}
    if ops["messages"] == "whole":
        channels["messages"] = values["messages"]
    else:
        channels["messages"] = Append(content.messages(it["tno"], [it["append"]]), keep_first=it["keep_first"])
    if ops["state"] == "whole":
        channels["state"] = values["state"]
    else:
        old, new = parent_state, values["state"]
        channels["state"] = SetKeys(set={key: v for key, v in new.items() if old.get(key) != v},
                                    delete=[key for key in old if key not in new])
    channels["doc"] = values["doc"] if ops["doc"] == "whole" else Keep()
    return channels, metadata


def batch_writes(content: Content, it: dict) -> list[tuple]:
    """The pending writes of a batch intent, exactly as the writer passes them to put_writes."""
    return [(it["task"], i, ("messages", "state", "side")[i % 3], content.write_value(it["tno"], it["batch"], i, it["k"]),
             f"~{it['batch']}") for i in range(it["k"])]


def sent_digest(channels: dict, metadata: dict) -> str:
    """Digest of exactly what a put sends (whole values, delta items and keys, keeps, metadata)."""
    def describe(w):
        if isinstance(w, Append):
            return ["append", list(w.items), w.keep_first]
        if isinstance(w, SetKeys):
            return ["set", dict(w.set), sorted(w.delete)]
        if isinstance(w, Keep):
            return ["keep"]
        return ["value", w]

    return _digest(codec.encode([{k: describe(w) for k, w in channels.items()}, metadata]))


def consistency_problems(channels: dict, metadata: dict) -> list[str]:
    """Rules a checkpoint's values obey whatever its writer meant (a half-applied put breaks them)."""
    out = []
    if set(channels) != set(CHANNELS):
        return [f"channels {sorted(channels)} != {list(CHANNELS)}"]
    msgs, count, state, doc = channels["messages"], channels["count"], channels["state"], channels["doc"]
    if not isinstance(msgs, list) or not isinstance(state, dict) or not isinstance(doc, str):
        return [f"channel types {type(msgs).__name__}/{type(state).__name__}/{type(doc).__name__}"]
    n = len(msgs)
    if not (count == n == state.get("n") == metadata.get("n")):
        out.append(f"lengths disagree: len(messages)={n} count={count} state.n={state.get('n')} "
                   f"metadata.n={metadata.get('n')}")
    digest = _digest(codec.encode(msgs))
    if not (digest == state.get("digest") == metadata.get("digest")):
        out.append("messages digest disagrees with state/metadata")
    dd = _digest(doc.encode())
    if not (dd == state.get("doc_digest") == metadata.get("doc_digest")):
        out.append("doc digest disagrees with state/metadata")
    seq = metadata.get("seq")
    rotating = sorted(k for k in state if k.startswith("k"))
    if state.get("seq") != seq or rotating != [f"k{seq % 4}"] or state.get(f"k{seq % 4}") != seq:
        out.append(f"state seq/rotating keys {state.get('seq')} {rotating} disagree with metadata seq {seq}")
    ids = [m.get("id") for m in msgs]
    if len(set(ids)) != len(ids):
        out.append("duplicate message ids")
    return out


# ----------------------------------------------------------------- writer process

@dataclass
class Acked:
    id: str
    msgs: list
    doc: int
    seq: int
    state: dict


@dataclass
class Slot:
    tno: int
    thread_id: str
    cns: str
    seq: int = 0
    next_msg: int = 0
    next_doc: int = 1
    next_batch: int = 0
    acked: list = field(default_factory=list)


class Fatal(Exception):
    pass


class Writer:
    def __init__(self, address: str, wid: int, log_path: str, seed: int, *, pause_path: str, slots: int = 3,
                 retire_at: int = 80, keep_retired: int = 3) -> None:
        self.address = address
        self.pause_path = pause_path
        self.wid = wid
        self.rng = random.Random(f"{seed}/writer/{wid}")
        self.content = Content(seed, wid)
        self.log = open(log_path, "a", encoding="utf-8")
        self.client: Client | None = None
        self.next_tno = 0
        self.retire_at = retire_at
        self.keep_retired = keep_retired
        self.slots = [self._new_slot(("", "sub", "")[i % 3]) for i in range(slots)]
        self.retired: list[str] = []
        self.stopping = False

    def _new_slot(self, cns: str) -> Slot:
        tno = self.next_tno
        self.next_tno += 1
        return Slot(tno, f"w{self.wid}-t{tno}", cns)

    def record(self, **entry) -> None:
        self.log.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self.log.flush()

    def attempt(self, op: str, fn):
        """Run ``fn(client)`` until acknowledged (result) or abandoned after a transport failure (None)."""
        while True:
            self._wait_if_paused()
            try:
                if self.client is None:
                    # a few quick attempts and no waiting for the channel (the client's defaults before it
                    # learnt to wait through a restart): a writer must notice the kill, so that it pauses
                    # when the loop asks and its own retry-or-abandon (below) is exercised
                    self.client = Client(self.address, timeout=15.0, retry=RetryPolicy(max_attempts=5),
                                         wait_for_ready=False)
                return fn(self.client)
            except AgentStateError as e:
                if e.reason or e.code not in TRANSPORT_CODES:
                    self.record(t="error", op=op, code=e.code.name, reason=e.reason, message=e.message)
                    raise Fatal(f"{op}: {e}") from None
                self.record(t="fail", op=op, code=e.code.name)
                self.client.close()
                self.client = None
                time.sleep(0.02 + 0.03 * self.rng.random())
                if self.stopping or self.rng.random() < 0.5:
                    self.record(t="abandon", op=op)
                    return None

    def _wait_if_paused(self) -> None:
        """The loop pauses writers (a file) while it verifies; they stop before sending anything."""
        if not os.path.exists(self.pause_path):
            return
        self.record(t="paused")
        while os.path.exists(self.pause_path) and not self.stopping:
            time.sleep(0.005)
        self.record(t="resumed")

    # ------------------------------------------------------------ operations

    def put_checkpoint(self, s: Slot) -> None:
        rng = self.rng
        s.seq += 1
        seq = s.seq
        cid = f"c{seq:06d}"
        if not s.acked:
            parent = None
            k = rng.randint(1, 3)
            msgs = add_range([], s.next_msg, s.next_msg + k)
            append, keep_first = [s.next_msg, s.next_msg + k], None
            s.next_msg += k
            doc_v, source = 0, "input"
            ops = {"messages": "whole", "state": "whole", "doc": "whole"}
        else:
            parent = s.acked[-1] if rng.random() < 0.85 else rng.choice(s.acked)
            n = count_of(parent.msgs)
            r = rng.random()
            keep_first = rng.randint(1, max(1, n - 1)) if r < 0.1 else None
            k = 0 if 0.1 <= r < 0.2 else rng.randint(1, 3)
            base = truncate(parent.msgs, keep_first) if keep_first is not None else parent.msgs
            msgs = add_range(base, s.next_msg, s.next_msg + k)
            append = [s.next_msg, s.next_msg + k]
            s.next_msg += k
            if rng.random() < 0.2:
                doc_v, doc_op = s.next_doc, "whole"
                s.next_doc += 1
            else:
                doc_v, doc_op = parent.doc, "keep"
            source = "loop" if parent is s.acked[-1] else "fork"
            ops = {"messages": "whole" if rng.random() < 0.12 else "append",
                   "state": "set" if rng.random() < 0.6 else "whole", "doc": doc_op}
        intent = dict(t="ckpt", thread=s.thread_id, tno=s.tno, cns=s.cns, id=cid,
                      parent=parent.id if parent else "", seq=seq, msgs=msgs, doc=doc_v, source=source, ops=ops,
                      append=append, keep_first=keep_first, rid=f"{s.thread_id}/{s.cns}/{cid}")
        channels, metadata = request_channels(self.content, intent, parent.state if parent else None)
        intent["sent"] = sent_digest(channels, metadata)
        values, _ = self.content.values(intent)
        self.record(**intent)
        resp = self.attempt("ckpt", lambda c: c.put_checkpoint(
            s.thread_id, channels, checkpoint_id=cid, parent_id=intent["parent"], checkpoint_ns=s.cns,
            metadata=metadata, schema_version=SCHEMA_VERSION, request_id=intent["rid"]))
        if resp is None:
            return
        ck = resp.checkpoint
        self.record(t="ack", kind="ckpt", thread=s.thread_id, cns=s.cns, id=cid, etag=ck.etag,
                    roots={name: cv.root.hex() for name, cv in ck.channels.items()}, created=resp.created)
        s.acked.append(Acked(cid, msgs, doc_v, seq, values["state"]))
        del s.acked[:-6]

    def put_writes(self, s: Slot) -> None:
        target = s.acked[-1]
        b = s.next_batch
        s.next_batch += 1
        k = self.rng.randint(1, 4)
        task = f"task-{b}"
        intent = dict(t="writes", thread=s.thread_id, tno=s.tno, cns=s.cns, ckpt=target.id, task=task, batch=b, k=k,
                      rid=f"{s.thread_id}/{s.cns}/{target.id}/{task}")
        writes = batch_writes(self.content, intent)
        intent["sent"] = _digest(codec.encode(writes))
        self.record(**intent)
        resp = self.attempt("writes", lambda c: c.put_writes(s.thread_id, target.id, writes, checkpoint_ns=s.cns,
                                                             request_id=intent["rid"]))
        if resp is not None:
            self.record(t="ack", kind="writes", thread=s.thread_id, cns=s.cns, ckpt=target.id, task=task,
                        stored=resp.stored, kept=resp.kept)

    def retire(self, i: int) -> None:
        s = self.slots[i]
        self.retired.append(s.thread_id)
        self.slots[i] = self._new_slot(s.cns)
        if len(self.retired) <= self.keep_retired:
            return
        victim = self.retired.pop(0)
        rid = f"delete/{victim}"
        self.record(t="delete", thread=victim, rid=rid)
        resp = self.attempt("delete", lambda c: c.delete_thread(victim, request_id=rid))
        if resp is None:
            return
        self.record(t="ack", kind="delete", thread=victim, deleted=resp.deleted, n=resp.deleted_checkpoints)
        if self.rng.random() < 0.5:
            self.record(t="gc")
            gc = self.attempt("gc", lambda c: c.collect_garbage())
            if gc is not None:
                self.record(t="ack", kind="gc", freed=gc.freed_blobs, reachable=gc.reachable_blobs)

    def step(self) -> None:
        i = self.rng.randrange(len(self.slots))
        s = self.slots[i]
        if s.acked and self.rng.random() < 0.2:
            self.put_writes(s)
        else:
            self.put_checkpoint(s)
        if s.acked and count_of(s.acked[-1].msgs) >= self.retire_at:
            self.retire(i)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        self.record(t="start", pid=os.getpid())
        try:
            while not self.stopping:
                self.step()
        except Fatal:
            return 3
        self.record(t="stop")
        return 0


# ----------------------------------------------------------------- logs

@dataclass
class Logs:
    """Everything the writers logged so far (parsed incrementally)."""

    ckpt_intents: dict = field(default_factory=dict)  # (thread, cns, id) -> intent
    ckpt_acks: dict = field(default_factory=dict)  # (thread, cns, id) -> ack
    write_intents: dict = field(default_factory=dict)  # (thread, cns, ckpt, task) -> intent
    write_acks: set = field(default_factory=set)  # (thread, cns, ckpt, task)
    delete_intents: dict = field(default_factory=dict)  # thread -> intent
    delete_acks: set = field(default_factory=set)
    thread_writer: dict = field(default_factory=dict)  # thread -> wid
    errors: list = field(default_factory=list)
    counts: collections.Counter = field(default_factory=collections.Counter)


class LogReader:
    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.offsets = [0] * len(paths)
        self.logs = Logs()
        self.problems: list[str] = []

    def read(self) -> Logs:
        for wid, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[wid])
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            self.offsets[wid] += end
            for line in data[:end].splitlines():
                self._entry(wid, json.loads(line))
        return self.logs

    def _entry(self, wid: int, e: dict) -> None:
        lg = self.logs
        t = e["t"]
        lg.counts[t] += 1
        if t == "ckpt":
            key = (e["thread"], e["cns"], e["id"])
            if key in lg.ckpt_intents and lg.ckpt_intents[key] != e:
                self.problems.append(f"writer {wid} sent two different intents for {key}")
            lg.ckpt_intents[key] = {**e, "wid": wid}
            lg.thread_writer[e["thread"]] = wid
        elif t == "writes":
            lg.write_intents[(e["thread"], e["cns"], e["ckpt"], e["task"])] = {**e, "wid": wid}
        elif t == "delete":
            lg.delete_intents[e["thread"]] = e
        elif t == "ack":
            lg.counts["ack_" + e["kind"]] += 1
            if e["kind"] == "ckpt":
                lg.ckpt_acks[(e["thread"], e["cns"], e["id"])] = e
            elif e["kind"] == "writes":
                lg.write_acks.add((e["thread"], e["cns"], e["ckpt"], e["task"]))
            elif e["kind"] == "delete":
                lg.delete_acks.add(e["thread"])
        elif t == "error":
            lg.errors.append((wid, e))

    def size(self, wid: int) -> int:
        try:
            return self.paths[wid].stat().st_size
        except FileNotFoundError:
            return 0

    def outstanding_at(self, wid: int, offset: int) -> bool:
        """True when the last line writer ``wid`` logged before byte ``offset`` is a request without its ack."""
        try:
            with open(self.paths[wid], "rb") as f:
                f.seek(max(0, offset - 65536))
                data = f.read(min(offset, 65536))
        except FileNotFoundError:
            return False
        lines = data.rstrip(b"\n").rsplit(b"\n", 1)
        last = lines[-1] if lines else b""
        # after an intent (or a resume inside a retry loop) the writer is sending that request
        return any(last.startswith(b'{"t":"%s"' % t) for t in (b"ckpt", b"writes", b"delete", b"gc", b"resumed"))

    def paused_since(self, wid: int, offset: int) -> bool:
        """True when writer ``wid`` logged that it paused after byte ``offset`` of its log, or is still in the
        pause it logged before it: a writer that did not see the pause file go (the loop's run between two
        pauses can be shorter than a starved writer's sleep) never logged ``resumed``, so it sent nothing."""
        start = max(0, offset - 64)  # the record before the offset too
        try:
            with open(self.paths[wid], "rb") as f:
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return False
        before, after = data[:offset - start], data[offset - start:]
        if b'{"t":"paused"}' in after:
            return True
        return not after.strip() and before.rstrip(b"\n").rsplit(b"\n", 1)[-1] == b'{"t":"paused"}'


# ----------------------------------------------------------------- verifier

class Verifier:
    def __init__(self, seed: int, log_paths: list[Path]) -> None:
        from sidecar.storage import hotpath, layout  # the store's own hashing: recompute roots and etags

        self.hp = hotpath
        self.layout = layout
        self.reader = LogReader(log_paths)
        self.contents = [Content(seed, wid) for wid in range(len(log_paths))]
        self._expected: dict[tuple, tuple[str, dict]] = {}
        self._requests_ok: set[tuple] = set()
        self.verified: dict[tuple, str] = {}  # checkpoint key -> etag, fully checked
        self.writes_seen: dict[tuple, set] = {}  # checkpoint key -> tasks seen at the last full check
        self.gone_threads: set[str] = set()  # deleted (acknowledged) and seen gone
        self.unacked_seen: set[tuple] = set()  # checkpoints stored although their put was never acknowledged
        self.stats: collections.Counter = collections.Counter()
        self.rng = random.Random(seed)

    # ------------------------------------------------------------ expectations

    def expected(self, it: dict) -> tuple[str, dict]:
        """(etag, {channel: root}) the store must hold for a checkpoint intent."""
        key = (it["thread"], it["cns"], it["id"])
        got = self._expected.get(key)
        if got is None:
            hp, layout = self.hp, self.layout
            channels, metadata = self.contents[it["wid"]].values(it)
            nodes: list = []
            roots = {
                "messages": hp.build_list([codec.encode(m) for m in channels["messages"]], nodes),
                "count": hp.value_node(codec.encode(channels["count"]), nodes),
                "state": hp.build_map([(k, codec.encode(v)) for k, v in sorted(channels["state"].items())], nodes),
                "doc": hp.value_node(codec.encode(channels["doc"]), nodes),
            }
            etag = layout.checkpoint_etag(it["id"], it["parent"], codec.encode(metadata), sorted(roots.items()), None,
                                          SCHEMA_VERSION)
            got = (etag, {k: v.hex() for k, v in roots.items()})
            self._expected[key] = got
        return got

    def request_problems(self, it: dict, logs: Logs) -> list[str]:
        """Rebuild the exact request from the log (recipe + parent) and compare with the digest the writer logged."""
        key = (it["thread"], it["cns"], it["id"])
        if key in self._requests_ok:
            return []
        parent_state = None
        if it["ops"]["state"] == "set":
            parent = logs.ckpt_intents.get((it["thread"], it["cns"], it["parent"]))
            if parent is None:
                return [f"{key}: delta against parent {it['parent']!r} that was never sent"]
            parent_state = self.contents[parent["wid"]].values(parent)[0]["state"]
        channels, metadata = request_channels(self.contents[it["wid"]], it, parent_state)
        if sent_digest(channels, metadata) != it["sent"]:
            return [f"{key}: the request rebuilt from the log differs from what the writer sent"]
        self._requests_ok.add(key)
        return []

    def check_checkpoint(self, ck, logs: Logs, *, values: bool) -> list[str]:
        """Problems of one checkpoint read from the store (values and pending writes when ``values``)."""
        key = (ck.thread_id, ck.checkpoint_ns, ck.checkpoint_id)
        where = f"{key}"
        it = logs.ckpt_intents.get(key)
        if it is None:  # sent after the logs were read? Its intent was flushed before the request went out.
            it = self.reader.read().ckpt_intents.get(key)
        if it is None:
            return [f"{where}: in the store but never sent by any writer"]
        out = self.request_problems(it, logs)
        etag, roots = self.expected(it)
        got_roots = {name: cv.root.hex() for name, cv in ck.channels.items()}
        if got_roots != roots:
            out.append(f"{where}: roots {got_roots} != expected {roots}")
        if ck.etag != etag:
            out.append(f"{where}: etag {ck.etag} != expected {etag}")
        if ck.parent_checkpoint_id != it["parent"] or ck.schema_version != SCHEMA_VERSION:
            out.append(f"{where}: parent {ck.parent_checkpoint_id!r}/schema {ck.schema_version} != intent")
        want_channels, want_md = self.contents[it["wid"]].values(it)
        got_md = {k: v.msgpack for k, v in ck.metadata.items()}
        if got_md != {k: codec.encode(v) for k, v in want_md.items()}:
            out.append(f"{where}: metadata bytes differ from the intent")
        ack = logs.ckpt_acks.get(key)
        if ack is not None and (ack["etag"] != ck.etag or ack["roots"] != got_roots):
            out.append(f"{where}: differs from its acknowledgement (etag {ack['etag']} vs {ck.etag})")
        if not values:
            return out
        out += self._check_values(ck, want_channels, where)
        decoded = {name: _decode_channel(cv) for name, cv in ck.channels.items()}
        out += [f"{where}: {p}" for p in consistency_problems(decoded, {k: codec.decode(v) for k, v in got_md.items()})]
        out += self._check_writes(ck, key, logs, where)
        return out

    def _check_values(self, ck, want: dict, where: str) -> list[str]:
        out = []
        for name in CHANNELS:
            cv = ck.channels.get(name)
            if cv is None or not cv.HasField("value"):
                out.append(f"{where}: channel {name} has no value")
                continue
            v = cv.value
            w = want[name]
            if name == "messages":
                ok = v.WhichOneof("kind") == "list" and [i.msgpack for i in v.list.items] == [codec.encode(m) for m in w]
            elif name == "state":
                ok = v.WhichOneof("kind") == "map" and {k: e.msgpack for k, e in v.map.entries.items()} == {
                    k: codec.encode(x) for k, x in w.items()}
            else:
                ok = v.WhichOneof("kind") == "msgpack" and v.msgpack == codec.encode(w)
            if not ok:
                out.append(f"{where}: channel {name} bytes differ from the intent")
        return out

    def _check_writes(self, ck, key: tuple, logs: Logs, where: str) -> list[str]:
        out = []
        groups: dict[str, list] = collections.defaultdict(list)
        for w in ck.pending_writes:
            groups[w.task_id].append(w)
        for task, ws in groups.items():
            it = logs.write_intents.get((*key, task)) or self.reader.read().write_intents.get((*key, task))
            if it is None:
                out.append(f"{where}: pending writes of task {task} never sent")
                continue
            sent = batch_writes(self.contents[it["wid"]], it)
            if _digest(codec.encode(sent)) != it["sent"]:
                out.append(f"{where}: task {task}: the batch rebuilt from the log differs from what the writer sent")
            if sorted(w.idx for w in ws) != list(range(it["k"])):
                out.append(f"{where}: task {task} has writes {sorted(w.idx for w in ws)} of {it['k']} (half a batch)")
            for w in ws:
                if not 0 <= w.idx < it["k"]:
                    continue
                _task, _idx, channel, value, path = sent[w.idx]
                if w.value.msgpack != codec.encode(value) or w.channel != channel or w.task_path != path:
                    out.append(f"{where}: task {task} write {w.idx} differs from the intent")
        self.writes_seen[key] = set(groups)
        self.stats["pending_writes_checked"] += len(ck.pending_writes)
        return out

    # ------------------------------------------------------------ one verification pass

    def verify(self, client: Client, *, full: bool = False, sample: int = 10) -> list[str]:
        """Check the running sidecar against the logs; returns problems (empty: all good).

        Call it while no writer has a request outstanding (they are paused, or stopped). ``full`` reads
        every value of every checkpoint; otherwise checkpoints not fully read before (and ones with newly
        acknowledged pending writes) are read in full, the rest checked by roots and etag against their
        intents, plus a random sample of them read in full again.
        """
        problems: list[str] = []
        threads = {t.thread_id for t in client.list_threads(page_size=1000)}
        listed = {(c.thread_id, c.checkpoint_ns, c.checkpoint_id): c
                  for c in client.list_checkpoints(page_size=1000)}
        logs = self.reader.read()
        problems += self.reader.problems
        self.reader.problems = []
        problems += [f"writer {wid} got an unexpected error: {e}" for wid, e in logs.errors]
        deleting = set(logs.delete_intents)

        # 1. every stored checkpoint was sent, and equals its intent (roots, etag, metadata, parent)
        for ck in listed.values():
            problems += self.check_checkpoint(ck, logs, values=False)
        self.stats["checkpoints_listed"] = len(listed)

        # 2. read in full: everything (full), or new checkpoints, new pending writes and a sample
        writes_by_ckpt: dict[tuple, set] = collections.defaultdict(set)
        for wk in logs.write_acks:
            writes_by_ckpt[wk[:3]].add(wk[3])
        todo: list[tuple] = []
        if full:
            try:
                for ck in client.list_checkpoints(page_size=50, include_values=True, include_pending_writes=True):
                    key = (ck.thread_id, ck.checkpoint_ns, ck.checkpoint_id)
                    problems += self.check_checkpoint(ck, logs, values=True)
                    self.verified[key] = ck.etag
                    self.stats["full_reads"] += 1
            except AgentStateError as e:  # some checkpoint does not read: find which, one by one
                problems.append(f"listing checkpoints with values failed: {e}")
                todo = list(listed)
        else:
            todo = [k for k in listed if k not in self.verified
                    or not writes_by_ckpt.get(k, set()) <= self.writes_seen.get(k, set())]
            chosen = set(todo)
            known = [k for k in listed if k not in chosen]
            todo += self.rng.sample(known, min(sample, len(known)))
        for key in todo:
            thread, cns, cid = key
            try:
                ck = client.get_checkpoint(thread, cid, checkpoint_ns=cns, include_pending_writes=True)
            except AgentStateError as e:
                problems.append(f"{key}: listed but does not read: {e}")
                continue
            problems += self.check_checkpoint(ck, logs, values=True)
            self.verified[key] = ck.etag
            self.stats["full_reads"] += 1

        # 3. every acknowledged checkpoint is there, unless a delete of its thread was sent
        acked_by_thread: dict[str, set] = collections.defaultdict(set)
        for key, ack in logs.ckpt_acks.items():
            acked_by_thread[key[0]].add(key)
            it = logs.ckpt_intents.get(key)
            if it is None:
                problems.append(f"{key}: acknowledged but no intent logged")
            else:
                problems += self.request_problems(it, logs)
                if (ack["etag"], ack["roots"]) != self.expected(it):
                    problems.append(f"{key}: acknowledgement (etag/roots) differs from the intent")
            if key not in listed and key[0] not in deleting:
                problems.append(f"{key}: acknowledged checkpoint missing")

        # 4. every acknowledged pending-write batch is there, unless its checkpoint went with its thread
        for wk in logs.write_acks:
            key = wk[:3]
            if key in listed and wk[3] not in self.writes_seen.get(key, set()):
                problems.append(f"{wk}: acknowledged pending writes missing")
            elif key not in listed and key[0] not in deleting:
                problems.append(f"{wk}: acknowledged pending writes missing with their checkpoint")

        # 5. deletions: acknowledged -> the thread is gone; unacknowledged -> all of it or none of it
        by_thread: dict[str, set] = collections.defaultdict(set)
        for key in listed:
            by_thread[key[0]].add(key)
        for thread in deleting:
            present = by_thread.get(thread, set())
            if thread in logs.delete_acks:
                if present or thread in threads:
                    problems.append(f"{thread}: deleted (acknowledged) but the thread or "
                                    f"{len(present)} checkpoints remain")
                else:
                    self.gone_threads.add(thread)
            elif present and not acked_by_thread[thread] <= present:
                problems.append(f"{thread}: unacknowledged delete left part of the thread "
                                f"({len(acked_by_thread[thread] - present)} acknowledged checkpoints gone)")
            elif (thread in threads) != bool(present):
                problems.append(f"{thread}: unacknowledged delete left the thread record without its checkpoints "
                                "or the reverse")

        # 6. a thread exists exactly when it has checkpoints (a put creates both or neither)
        if threads != set(by_thread):
            problems.append(f"threads without checkpoints {sorted(threads - set(by_thread))[:5]}, "
                            f"checkpoints without thread {sorted(set(by_thread) - threads)[:5]}")

        # 7. no blob is missing
        report = client.check_integrity()
        if report.missing_blobs:
            problems.append(f"check_integrity: {report.missing_blobs} missing blobs: {list(report.problems)[:3]}")
        if report.checked_checkpoints != len(listed):
            problems.append(f"check_integrity walked {report.checked_checkpoints} checkpoints, listed {len(listed)}")
        self.stats["integrity_checks"] += 1
        self.unacked_seen.update(k for k in listed if k not in logs.ckpt_acks)
        self.stats["unacked_but_stored"] = len(self.unacked_seen)
        self.stats["deleted_threads_gone"] = len(self.gone_threads)
        self.stats["acked_checkpoints"] = len(logs.ckpt_acks)
        self.stats["acked_write_batches"] = len(logs.write_acks)
        return problems


def _decode_channel(cv):
    v = cv.value
    kind = v.WhichOneof("kind")
    if kind == "list":
        return [codec.decode(i.msgpack) for i in v.list.items]
    if kind == "map":
        return {k: codec.decode(e.msgpack) for k, e in v.map.entries.items()}
    if kind == "msgpack":
        return codec.decode(v.msgpack)
    return None


# ----------------------------------------------------------------- the loop

@dataclass
class LoopResult:
    cycles: int = 0
    kills: int = 0
    problems: list = field(default_factory=list)
    seconds: float = 0.0
    restart_seconds: list = field(default_factory=list)
    verify_seconds: list = field(default_factory=list)
    outstanding_at_kill: int = 0  # writers that had sent (or were sending) a request when a kill hit
    stats: dict = field(default_factory=dict)
    log_counts: dict = field(default_factory=dict)
    map_growths: int = 0  # times a sidecar grew its LMDB map (the server logs each)


def run_loop(workdir: Path, *, cycles: int, writers: int = 3, seed: int = 1, run_min: float = 0.05,
             run_max: float = 1.0, retire_at: int = 80, sample: int = 10, stop_on_problem: bool = True,
             server_args: tuple = (), progress=None) -> LoopResult:
    """The crash loop: ``cycles`` times run, SIGKILL, restart, verify; then a clean full verification."""
    from conftest import SidecarProcess  # tests/ is on sys.path (pytest, or the soak script)

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{seed}/kills")
    result = LoopResult()
    started = time.monotonic()
    side = SidecarProcess(workdir / "data", *server_args)
    log_paths = [workdir / f"writer{w}.jsonl" for w in range(writers)]
    verifier = Verifier(seed, log_paths)
    pause = workdir / "pause"
    pause.unlink(missing_ok=True)
    procs: list[subprocess.Popen] = []
    side.start()
    try:
        for w in range(writers):
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "crashloop.py"), "writer", "--address", side.address, "--wid", str(w),
                 "--log", str(log_paths[w]), "--seed", str(seed), "--retire-at", str(retire_at), "--pause", str(pause)],
                stdout=open(workdir / f"writer{w}.out", "ab"), stderr=subprocess.STDOUT))
        for cycle in range(cycles):
            # randomised kill timing: sometimes right after the restart, mostly somewhere in a busy stretch
            delay = rng.uniform(0.0, 0.05) if rng.random() < 0.2 else rng.uniform(run_min, run_max)
            time.sleep(delay)
            _check_writers(procs, workdir)
            offsets = [verifier.reader.size(w) for w in range(writers)]
            side.kill()
            result.kills += 1
            pause.touch()
            side.socket.unlink(missing_ok=True)  # the dead server's socket; a fresh start binds a new one
            _wait_for_pause(verifier.reader, offsets, procs, workdir)
            result.outstanding_at_kill += sum(verifier.reader.outstanding_at(w, offsets[w]) for w in range(writers))
            t0 = time.monotonic()
            side.start()
            result.restart_seconds.append(time.monotonic() - t0)
            t0 = time.monotonic()
            with side.client(timeout=60.0) as c:
                problems = verifier.verify(c, sample=sample)
            result.verify_seconds.append(time.monotonic() - t0)
            pause.unlink()
            result.cycles += 1
            result.problems += [f"cycle {cycle}: {p}" for p in problems]
            if progress:
                progress(cycle, delay, problems, verifier)
            if problems and stop_on_problem:
                break
        # clean end: writers finish their current operation, the sidecar stops gracefully
        pause.unlink(missing_ok=True)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        if any(p.returncode for p in procs):
            result.problems.append(f"writer exit codes {[p.returncode for p in procs]}: "
                                   + _writer_output(workdir, writers))
        side.stop()
        side.start()
        with side.client(timeout=120.0) as c:
            result.problems += [f"final: {p}" for p in verifier.verify(c, full=True)]
            c.collect_garbage()
            result.problems += [f"after gc: {p}" for p in verifier.verify(c, full=True)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        side.kill()
    result.seconds = time.monotonic() - started
    result.map_growths = side.log().count("grew LMDB map")
    result.stats = dict(verifier.stats)
    result.log_counts = dict(verifier.reader.logs.counts)
    return result


def _writer_output(workdir: Path, writers: int) -> str:
    out = []
    for w in range(writers):
        try:
            out.append(f"--- writer {w} ---\n" + (workdir / f"writer{w}.out").read_text(errors="replace")[-3000:])
        except FileNotFoundError:
            pass
    return "\n".join(out)


def _check_writers(procs: list[subprocess.Popen], workdir: Path) -> None:
    dead = [(i, p.returncode) for i, p in enumerate(procs) if p.poll() is not None]
    if dead:
        raise RuntimeError(f"writers exited early {dead}:\n{_writer_output(workdir, len(procs))}")


def _wait_for_pause(reader: LogReader, offsets: list[int], procs, workdir: Path, timeout: float = 90.0) -> None:
    """Wait until every writer logged that it paused after the kill.

    A writer logs each ack before its next request and pauses before sending
    one, so once it has paused every ack it got before the kill is in its log,
    and it sends nothing more until the pause file goes.
    """
    deadline = time.monotonic() + timeout
    waiting = set(range(len(offsets)))
    while waiting:
        waiting = {w for w in waiting if not reader.paused_since(w, offsets[w])}
        if not waiting:
            return
        _check_writers(procs, workdir)
        if time.monotonic() > deadline:
            raise RuntimeError(f"writers {sorted(waiting)} did not pause")
        time.sleep(0.01)


# ----------------------------------------------------------------- command line (writer process)

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("writer")
    w.add_argument("--address", required=True)
    w.add_argument("--wid", type=int, required=True)
    w.add_argument("--log", required=True)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--pause", required=True, help="while this file exists, send nothing")
    w.add_argument("--retire-at", type=int, default=80)
    args = ap.parse_args(argv)
    return Writer(args.address, args.wid, args.log, args.seed, pause_path=args.pause, retire_at=args.retire_at).run()


if __name__ == "__main__":
    sys.exit(main())
