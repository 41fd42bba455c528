"""memory_vectors: the resident vector index of memory items (docs/memory.md §5) and top-k selection.

The truth is ``memvec`` in LMDB. The index keeps, per (tenant namespace, vector space), the rows of every item
with vectors in that space: one contiguous float32 matrix (a ``bytearray``, rows reused through a free list),
each row's squared norm, its item slot and field, and per slot the item's path, expiry and version. A search
scores the matrix in the compiled kernel (storage/vectors.py ``best_scores``, GIL released) with the prefix,
the expiry, the queried fields and the field index's candidates as masks, so it reads records only for the
items it returns (and those a lazy filter checks).

Which snapshot the index shows: every memory write that changes an item with vectors (or gives one vectors)
stores a fresh random token for its namespace in ``meta`` and *stages* its changes here with the token it read
and the one it wrote (:meth:`Index.stage`; one entry per write job). Staged changes are applied only when a
reader's snapshot shows their token (:meth:`Index.view`): the write committed and readers see it. A job that
failed leaves a token no snapshot ever shows (its entry is dropped when the next job reads the older token); a
transaction lost after its jobs ran breaks the chain, and the namespace is rebuilt from the next reader's
snapshot. A snapshot older than the index (a reader that started before the latest staged changes were
applied) gets ``None``: the caller answers from its snapshot by the scan. Everything runs on the store's owner
loop (a lock guards it anyway); the index is rebuilt from LMDB at start and never persisted.
"""
from __future__ import annotations

import heapq
import os
import threading
from array import array

from ..storage import layout, vectors

TOKEN_KEY = b"mem_vtoken\x00"  # + namespace: the token of the namespace's last vector-relevant write
MAX_PENDING = 64  # staged entries per namespace before the writer catches up with its readers' snapshot
_HISTORY = 64  # tokens the index went through, to tell a snapshot behind it from a lost one


def token_key(ns: str) -> bytes:
    return TOKEN_KEY + ns.encode()


class Entry:
    """One item in the index."""

    __slots__ = ("item_id", "pidx", "key", "updated_us", "ins_seq", "version", "expires_us", "space", "slot",
                 "rows")

    def __init__(self, item_id, pidx, key, updated_us, ins_seq, version, expires_us, space):
        self.item_id, self.pidx, self.key = item_id, pidx, key
        self.updated_us, self.ins_seq, self.version, self.expires_us = updated_us, ins_seq, version, expires_us
        self.space = space
        self.slot = -1
        self.rows: list[tuple[str, int]] = []  # (field, row) in the record's field order


class Space:
    """The rows of one vector space of one namespace."""

    __slots__ = ("dims", "buf", "sqnorms", "row_slot", "row_field", "free_rows", "slot_path", "slot_expires",
                 "slot_entry", "free_slots", "fields", "field_ids", "qbuf", "qscales")

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.buf = bytearray()
        self.sqnorms = array("d")
        self.qbuf = bytearray()  # each row quantized to int8 (vectors.quantize): best_top's first pass
        self.qscales = array("d")
        self.row_slot = array("q")  # -1: a free row
        self.row_field = array("q")
        self.free_rows: list[int] = []
        self.slot_path = array("q")  # -1: a free slot
        self.slot_expires = array("q")
        self.slot_entry: list[Entry | None] = []
        self.free_slots: list[int] = []
        self.fields: list[str] = []
        self.field_ids: dict[str, int] = {}

    def add(self, e: Entry, vecs: list[tuple[str, bytes]]) -> None:
        if self.free_slots:
            slot = self.free_slots.pop()
            self.slot_path[slot], self.slot_expires[slot], self.slot_entry[slot] = e.pidx, e.expires_us, e
        else:
            slot = len(self.slot_entry)
            self.slot_path.append(e.pidx)
            self.slot_expires.append(e.expires_us)
            self.slot_entry.append(e)
        e.slot = slot
        width = self.dims * 4
        for f, data in vecs:
            fid = self.field_ids.get(f)
            if fid is None:
                fid = self.field_ids[f] = len(self.fields)
                self.fields.append(f)
            sq = vectors.sq_norm(data)
            q8, scale = vectors.quantize(data)
            if self.free_rows:
                row = self.free_rows.pop()
                self.buf[row * width:(row + 1) * width] = data
                self.qbuf[row * self.dims:(row + 1) * self.dims] = q8
                self.sqnorms[row], self.row_slot[row], self.row_field[row] = sq, slot, fid
                self.qscales[row] = scale
            else:
                row = len(self.row_slot)
                self.buf += data
                self.qbuf += q8
                self.qscales.append(scale)
                self.sqnorms.append(sq)
                self.row_slot.append(slot)
                self.row_field.append(fid)
            e.rows.append((f, row))

    def remove(self, e: Entry) -> None:
        for _, row in e.rows:
            self.row_slot[row] = -1
            self.free_rows.append(row)
        e.rows = []
        self.slot_path[e.slot] = -1
        self.slot_entry[e.slot] = None
        self.free_slots.append(e.slot)
        e.slot = -1


class Namespace:
    """The index of one tenant namespace."""

    def __init__(self) -> None:
        self.token: bytes | None = None  # None: not built (the next reader rebuilds it)
        self.history: list[bytes] = []
        self.pending: list[list] = []  # [txn, old token, new token, deltas]
        self.spaces: dict[str, Space] = {}
        self.items: dict[int, Entry] = {}
        self.path_ids: dict[int, int] = {}  # path id -> pidx
        self.paths: list[tuple[str, ...]] = []  # pidx -> labels
        self.first_seqs: list[int] = []  # pidx -> the path's first_seq (INSERTION order)
        self.path_of: list[int] = []  # pidx -> path id

    def _pidx(self, path_id: int, labels, first_seq: int) -> int:
        p = self.path_ids.get(path_id)
        if p is None:
            p = self.path_ids[path_id] = len(self.paths)
            self.paths.append(tuple(labels))
            self.first_seqs.append(first_seq)
            self.path_of.append(path_id)
        return p

    def apply(self, delta: tuple) -> None:
        kind = delta[0]
        if kind == "exp":
            e = self.items.get(delta[1])
            if e is not None:
                e.expires_us = delta[2]
                self.spaces[e.space].slot_expires[e.slot] = delta[2]
            return
        item_id = delta[1]
        old = self.items.pop(item_id, None)
        if old is not None:
            self.spaces[old.space].remove(old)
        if kind == "del":
            return
        _, _, path_id, labels, first_seq, key, updated_us, ins_seq, version, expires_us, space, vecs = delta
        if not vecs:
            return
        dims = len(vecs[0][1]) // 4
        sp = self.spaces.get(space)
        if sp is None or sp.dims != dims:
            sp = self.spaces[space] = Space(dims)
        e = Entry(item_id, self._pidx(path_id, labels, first_seq), key, updated_us, ins_seq, version, expires_us,
                  space)
        sp.add(e, vecs)
        self.items[item_id] = e

    def _advance(self, token: bytes) -> None:
        if self.token is not None:
            self.history.append(self.token)
            del self.history[:-_HISTORY]
        self.token = token


class Index:
    def __init__(self) -> None:
        self.namespaces: dict[str, Namespace] = {}
        self.lock = threading.RLock()

    def __len__(self) -> int:
        return sum(len(st.items) for st in self.namespaces.values())

    def _ns(self, ns: str) -> Namespace:
        st = self.namespaces.get(ns)
        if st is None:
            st = self.namespaces[ns] = Namespace()
        return st

    # ---------------------------------------------------------- writers

    def stage(self, txn, meta_db, ns: str, delta: tuple) -> bool:
        """Record ``delta`` of the write running in ``txn`` (its namespace token written once per job).
        True when the namespace has so many staged entries that the writer should catch up (:meth:`view`
        with a snapshot of its readers)."""
        with self.lock:
            st = self._ns(ns)
            last = st.pending[-1] if st.pending else None
            if last is not None and last[0] is txn:
                last[3].append(delta)
                return False
            key = token_key(ns)
            raw = txn.get(key, db=meta_db)
            old = b"" if raw is None else bytes(raw)
            if old == st.token:
                st.pending.clear()  # entries after the index's token were of failed jobs
            else:
                for i, entry in enumerate(st.pending):
                    if entry[2] == old:
                        del st.pending[i + 1:]  # later entries failed
                        break
                else:  # this write's view is not reachable from the index (a lost transaction): rebuild
                    st.token = None
                    st.history.clear()
                    st.pending.clear()
            new = os.urandom(8)
            txn.put(key, new, db=meta_db)
            st.pending.append([txn, old, new, [delta]])
            return len(st.pending) > MAX_PENDING

    # ---------------------------------------------------------- readers

    def view(self, txn, meta_db, ns: str, rebuild) -> Namespace | None:
        """The namespace's index as of the snapshot ``txn`` (the caller holds :attr:`lock` while it uses it),
        or None when the snapshot is older than the index. ``rebuild(txn)`` yields the put deltas of every item
        with vectors in the snapshot, for a namespace not built or no longer reachable."""
        raw = txn.get(token_key(ns), db=meta_db)
        snap = b"" if raw is None else bytes(raw)
        st = self._ns(ns)
        if st.token is not None and snap == st.token:
            return st
        for i, entry in enumerate(st.pending):
            if entry[2] == snap and (st.token is not None and self._chain(st, i)):
                for e in st.pending[:i + 1]:
                    for d in e[3]:
                        st.apply(d)
                    st._advance(e[2])
                del st.pending[:i + 1]
                return st
        if st.token is not None and snap in st.history:
            return None
        fresh = Namespace()
        for d in rebuild(txn):
            fresh.apply(d)
        fresh.token = snap
        for i, entry in enumerate(st.pending):  # staged writes after this snapshot stay staged
            if entry[1] == snap:
                fresh.pending = st.pending[i:]
                break
        self.namespaces[ns] = fresh
        return fresh

    @staticmethod
    def _chain(st: Namespace, i: int) -> bool:
        prev = st.token
        for e in st.pending[:i + 1]:
            if e[1] != prev:
                return False
            prev = e[2]
        return True


def search(st: Namespace, space: str, query: bytes, prefix: tuple, fields, now: int, allowed,
           k: int | None = None) -> tuple:
    """(best score per slot, the space) of a vector query over the namespace's index; ``allowed``: item ids
    the filter may match (None: any). With ``k``, only slots that may be among the top k keep a score
    (vectors.best_top: the slots at or above the k-th best score of each half of the rows keep their exact
    score, the others -inf), so ``vectors.select_top(best, k)`` is the same as without ``k``; cheaper."""
    sp = st.spaces.get(space)
    if sp is None:
        return array("d"), None
    plen = len(prefix)
    path_ok = bytes(1 if p[:plen] == prefix else 0 for p in st.paths) if plen else b"\x01" * len(st.paths)
    field_ok = None
    if fields:
        field_ok = bytes(1 if f in fields else 0 for f in sp.fields)
    slot_ok = None
    if allowed is not None:
        slot_ok = bytearray(len(sp.slot_entry))
        for item_id in allowed:
            e = st.items.get(item_id)
            if e is not None and e.space == space:
                slot_ok[e.slot] = 1
    if k is None:
        kernel = vectors.best_scores
        args = (sp.buf, sp.dims, sp.sqnorms, query, sp.row_slot, sp.row_field, field_ok, sp.slot_path, path_ok,
                sp.slot_expires, now, slot_ok, len(sp.slot_entry))
    else:
        kernel = vectors.best_top
        args = (sp.buf, sp.dims, sp.sqnorms, sp.qbuf, sp.qscales, query, sp.row_slot, sp.row_field, field_ok,
                sp.slot_path, path_ok, sp.slot_expires, now, slot_ok, len(sp.slot_entry), k)
    nrows = len(sp.row_slot)
    if not SPLIT or nrows * sp.dims < (SPLIT_WORK if k is None else 3 * SPLIT_WORK) or not _cores_idle():
        return kernel(*args), sp
    half = nrows // 2  # the kernel releases the GIL: the other half runs on a second thread meanwhile
    other = _pool().submit(kernel, *args, half, nrows)
    try:
        first = kernel(*args, 0, half)
    finally:
        second = other.result()
    return vectors.merge_max(first, second), sp


#: split the scoring over two threads (compiled kernel only) when the machine has two cores or more and there is this much work
#: (rows x dimensions; three times as much for best_top, which reads a quarter of the bytes first), and the
#: 1-minute load average is below the number of cores (on a busy machine the second thread waits for a core
#: and the query waits for it: measured slower than one thread at load 17 on 2 cores); SIDECAR_VECTOR_THREADS=1
#: keeps it on one thread
SPLIT = vectors.NATIVE and (os.cpu_count() or 1) > 1 and os.environ.get("SIDECAR_VECTOR_THREADS", "2") != "1"
SPLIT_WORK = 2_000_000
_CORES = os.cpu_count() or 1


def _cores_idle() -> bool:
    try:
        return os.getloadavg()[0] < _CORES
    except OSError:  # pragma: no cover - no load average on this system
        return True
_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor
        _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-vectors")
    return _POOL


class _Rows:
    __slots__ = ("dims", "buf")

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.buf = bytearray()


class Candidates:
    """The rows of a scan's candidates, read from its own snapshot (the scan path: docs/memory.md §5)."""

    __slots__ = ("space", "rows", "owner", "fields", "temp")

    def __init__(self, space: _Rows) -> None:
        self.space = space
        self.rows = array("q")
        self.owner: list[int] = []
        self.fields: list[str] = []
        self.temp: list[int] = []


def load_rows(txn, db, space: layout.MemSpaceRec, cands: list) -> Candidates:
    """The rows of each candidate's wanted fields as of the snapshot ``txn``. ``cands``: (record, fields)."""
    out = Candidates(_Rows(space.dims))
    n = 0
    vdb = db["memvec"]
    for i, (rec, wanted) in enumerate(cands):
        for f in wanted:
            raw = txn.get(layout.mem_vec_key(rec.item_id, f), db=vdb)
            if raw is None:
                continue
            v = layout.memvec_decoder.decode(raw)
            if v.space_id != space.space_id:
                continue
            out.space.buf += v.data
            out.rows.append(n)
            n += 1
            out.owner.append(i)
            out.fields.append(f)
    return out


def top_items(c: Candidates, query: bytes, k: int | None, ties: list) -> list[tuple[int, float, str]]:
    """The best ``k`` candidates (all, ranked, when ``k`` is None) (candidate index, score, field) by cosine similarity to ``query``: an item
    scores the highest of its rows (the first such field on a tie); ties between items go by ``ties[i]`` (the
    request's order)."""
    scores = vectors.cosine_scores(c.space.buf, c.space.dims, c.rows, query)
    best: dict[int, tuple[float, str]] = {}
    for owner, score, field in zip(c.owner, scores, c.fields):
        cur = best.get(owner)
        if cur is None or score > cur[0]:
            best[owner] = (score, field)
    keys = ((-sf[0], ties[owner], owner) for owner, sf in best.items())
    ranked = sorted(keys) if k is None else heapq.nsmallest(k, keys)
    return [(owner, -neg, best[owner][1]) for neg, _, owner in ranked]
