"""storage_whatif: what the bench_core chat would cost on disk under alternative LMDB layouts.

    python benchmarks/storage_whatif.py [--turns 800]

A simulation, not the sidecar: it rebuilds the nodes and manifests the sidecar
stores for bench_core's chat (the same hot-path functions and record
encodings, replayed one transaction per checkpoint like the server's writer)
and writes them into scratch LMDB environments laid out in different ways:

  as-is        blobs keyed by their 32-byte hash (today's layout; checks the simulation)
  seq-keys     node bytes keyed by a u64 insertion sequence (pages fill up, appends
               are sequential) plus a hash -> sequence index for dedup lookups
  +delta-roots a list root that does not complete a leaf is ("A", n, previous root,
               new item) = 73 bytes instead of n, peaks and up to 7 tail hashes
  +binary-ids  checkpoint ids and parent ids as 16 binary bytes instead of 36-char text
  +16-byte index keys  the hash -> sequence index keyed by a 16-byte hash prefix (a hit is
               confirmed by hashing the stored node, so a prefix collision costs a lookup, not data)

Only sizes matter here, so replaced nodes are filler bytes of the right length.
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import uuid
from pathlib import Path

import lmdb
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_core  # noqa: E402

U64 = struct.Struct(">Q")


def replay(turns: int, seed: int):
    """[(new nodes [(hash, bytes, n_items or None)], checkpoint id, parent id, metadata encoding)] per checkpoint."""
    from agentstate import codec
    from sidecar.storage import hotpath as hp
    from sidecar.state.checkpoints import new_checkpoint_id  # time-ordered, like the server's

    conv = bench_core.conversation(turns, seed)
    seen: set[bytes] = set()
    out = []
    parent = ""
    for _turn, _kind, msgs, md in bench_core.checkpoint_plan(conv):
        nodes: list = []
        hp.build_list([codec.encode(m) for m in msgs], nodes)
        new = []
        for h, node in nodes:
            if h not in seen:
                seen.add(h)
                new.append((h, node, hp.list_length(node) if node[:1] == b"L" else None))
        cid = new_checkpoint_id()
        out.append((new, cid, parent, codec.encode(md), nodes[-1][0]))
        parent = cid
    return out


def write_env(path: str, groups, *, seq_keys: bool, delta_roots: bool, binary_ids: bool,
              short_index: bool = False) -> dict:
    from sidecar.storage import layout
    env = lmdb.open(path, map_size=1 << 32, max_dbs=8, sync=False, metasync=False)
    blobs = env.open_db(b"blobs")
    index = env.open_db(b"hindex") if seq_keys else None
    ckpts = env.open_db(b"ckpts")
    seq = 0
    enc = msgspec.msgpack.Encoder()
    for new, cid, parent, md, root in groups:
        with env.begin(write=True) as txn:
            for h, node, n in new:
                if delta_roots and n is not None:
                    m = n // 8
                    size = 9 + 32 * bin(m).count("1") if n % 8 == 0 else 1 + 8 + 32 + 32
                    node = b"A" * size
                if seq_keys:
                    seq += 1
                    txn.put(U64.pack(seq), node, db=blobs)
                    txn.put(h[:16] if short_index else h, U64.pack(seq), db=index)
                else:
                    txn.put(h, node, db=blobs)
            if binary_ids:
                key = U64.pack(1) + b"\0" + uuid.UUID(cid).bytes
                value = enc.encode((1, uuid.UUID(parent).bytes if parent else b"", 1_700_000_000_000_000,
                                    msgspec.Raw(md), [("messages", root)], None, 0, None))
            else:
                key = layout.ckpt_key(1, "", cid)
                value = layout.encode(layout.Manifest(1, parent, 1_700_000_000_000_000, msgspec.Raw(md),
                                                      [("messages", root)], None, 0, None))
            txn.put(key, value, db=ckpts)
    env.close()
    st = os.stat(os.path.join(path, "data.mdb"))
    return {"apparent": st.st_size, "allocated": st.st_blocks * 512}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=800)
    ap.add_argument("--seed", type=int, default=800)
    args = ap.parse_args(argv)
    payload = args.turns * 2 * bench_core.MSG_CHARS
    groups = replay(args.turns, args.seed)
    variants = [
        ("as-is (hash keys)", dict(seq_keys=False, delta_roots=False, binary_ids=False)),
        ("seq-keys + hash index", dict(seq_keys=True, delta_roots=False, binary_ids=False)),
        ("delta-roots only", dict(seq_keys=False, delta_roots=True, binary_ids=False)),
        ("seq-keys + delta-roots", dict(seq_keys=True, delta_roots=True, binary_ids=False)),
        ("seq-keys + delta-roots + binary-ids", dict(seq_keys=True, delta_roots=True, binary_ids=True)),
        ("... + 16-byte index keys", dict(seq_keys=True, delta_roots=True, binary_ids=True, short_index=True)),
    ]
    print(f"storage_whatif: {args.turns} turns, {3 * args.turns} checkpoints, payload {payload:,} bytes "
          "(data.mdb only, after all writes)")
    for name, kw in variants:
        with tempfile.TemporaryDirectory() as tmp:
            size = write_env(tmp, groups, **kw)
        print(f"  {name:<38} {size['allocated']:>10,} bytes allocated = {size['allocated'] / payload:.2f}x payload")
    return 0


if __name__ == "__main__":
    sys.exit(main())
