"""memory_vectors: the in-memory vector index of memory items (a cache; docs/memory.md §5) and top-k selection.

The truth is ``memvec`` in LMDB. The index keeps, per vector space, one growable float32 matrix (a
``bytearray``, rows reused through a free list) and, per item, the version of the item its rows were loaded
for. A search hands it the candidates it read from its own snapshot (records with their versions): rows whose
version matches are used as they are; others are loaded from the snapshot (and kept when the snapshot is the
newer one; otherwise used once and freed). Writes only *discard* an item's rows, so a write that is rolled back
costs a reload, never a wrong answer. The index is filled from LMDB at start (:meth:`Index.build`) and is never
persisted. Everything here runs on the store's owner loop; the kernel (storage/vectors.py) releases the GIL.
"""
from __future__ import annotations

import heapq
from array import array

from ..storage import layout, vectors


class _Space:
    __slots__ = ("dims", "buf", "rows", "free")

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.buf = bytearray()
        self.rows = 0
        self.free: list[int] = []

    def alloc(self, data: bytes) -> int:
        width = self.dims * 4
        if self.free:
            row = self.free.pop()
        else:
            row = self.rows
            self.rows += 1
            if len(self.buf) < self.rows * width:
                self.buf.extend(bytes(max(width, len(self.buf))))  # capacity doubles
        self.buf[row * width:(row + 1) * width] = data
        return row

    def release(self, row: int) -> None:
        self.free.append(row)


class Index:
    def __init__(self) -> None:
        self.spaces: dict[int, _Space] = {}
        self.entries: dict[int, tuple[int, int, dict[str, int]]] = {}  # item id -> (version, space id, rows)

    def __len__(self) -> int:
        return len(self.entries)

    def discard(self, item_id: int) -> None:
        entry = self.entries.pop(item_id, None)
        if entry is not None:
            space = self.spaces[entry[1]]
            for row in entry[2].values():
                space.release(row)

    def _space(self, space_id: int, dims: int) -> _Space:
        sp = self.spaces.get(space_id)
        if sp is None:
            sp = self.spaces[space_id] = _Space(dims)
        return sp

    @staticmethod
    def _load(txn, db, rec) -> dict[str, layout.MemVecRec]:
        out = {}
        for f in rec.vector_fields:
            raw = txn.get(layout.mem_vec_key(rec.item_id, f), db=db["memvec"])
            if raw is not None:
                out[f] = layout.memvec_decoder.decode(raw)
        return out

    def _put(self, rec, vecs: dict) -> dict[str, int]:
        self.discard(rec.item_id)
        if not vecs:
            return {}
        first = next(iter(vecs.values()))
        sp = self._space(first.space_id, first.dims)
        rows = {f: sp.alloc(v.data) for f, v in vecs.items()}
        self.entries[rec.item_id] = (rec.version, first.space_id, rows)
        return rows

    def build(self, txn, db) -> int:
        """Load every stored vector (start-up); returns how many items have vectors."""
        n = 0
        for _, raw in txn.cursor(db=db["memitems"]).iternext():
            rec = layout.memitem_decoder.decode(raw)
            if rec.vector_fields:
                self._put(rec, self._load(txn, db, rec))
                n += 1
        return n

    def rows_for(self, txn, db, space: layout.MemSpaceRec, cands: list) -> "Candidates":
        """The rows of each candidate's wanted fields, as of the caller's snapshot. ``cands``: (record, fields)."""
        sp = self._space(space.space_id, space.dims)
        out = Candidates(sp)
        for i, (rec, wanted) in enumerate(cands):
            entry = self.entries.get(rec.item_id)
            if entry is not None and entry[0] == rec.version and entry[1] == space.space_id:
                rows = entry[2]
            else:
                vecs = {f: v for f, v in self._load(txn, db, rec).items() if v.space_id == space.space_id}
                if entry is None or entry[0] < rec.version:
                    rows = self._put(rec, vecs)
                else:  # the index holds a newer version than this snapshot: use the snapshot's rows once
                    rows = {f: sp.alloc(v.data) for f, v in vecs.items()}
                    out.temp.extend(rows.values())
            for f in wanted:
                row = rows.get(f)
                if row is not None:
                    out.rows.append(row)
                    out.owner.append(i)
                    out.fields.append(f)
        return out


class Candidates:
    __slots__ = ("space", "rows", "owner", "fields", "temp")

    def __init__(self, space: _Space) -> None:
        self.space = space
        self.rows = array("q")
        self.owner: list[int] = []
        self.fields: list[str] = []
        self.temp: list[int] = []


def top_items(c: Candidates, query: bytes, k: int | None, ties: list) -> list[tuple[int, float, str]]:
    """The best ``k`` candidates (all, ranked, when ``k`` is None) (candidate index, score, field) by cosine similarity to ``query``: an item
    scores the highest of its rows (the first such field on a tie); ties between items go by ``ties[i]`` (the
    request's order)."""
    try:
        scores = vectors.cosine_scores(c.space.buf, c.space.dims, c.rows, query)
    finally:
        for row in c.temp:
            c.space.release(row)
    best: dict[int, tuple[float, str]] = {}
    for owner, score, field in zip(c.owner, scores, c.fields):
        cur = best.get(owner)
        if cur is None or score > cur[0]:
            best[owner] = (score, field)
    keys = ((-sf[0], ties[owner], owner) for owner, sf in best.items())
    ranked = sorted(keys) if k is None else heapq.nsmallest(k, keys)
    return [(owner, -neg, best[owner][1]) for neg, _, owner in ranked]
