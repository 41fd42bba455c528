"""wirecache: the read path's cache of assembled list subtrees, keyed by node hash.

A GetCheckpoint of a list channel answers with a ``ListValue`` message holding one ``Value`` per
item. The read path (storage/reads.py) builds the protobuf wire bytes of that message from the
stored nodes, and keeps here the wire bytes of every list leaf (8 items) and of every perfect
subtree a list root refers to, keyed by the node's hash.

Why this is sound (decision): nodes are content-addressed, so a hash names one subtree, hence one
sequence of item encodings, hence one sequence of wire bytes; an entry is never stale and is
shared safely by every store of the process (as compression.py's read cache of unpacked
encodings is). Subtrees that hold a sealed (encrypted) or chunked item are never cached: a sealed
record must be opened (its key checked) on every read, so removing a key still refuses reads.

Bounded like compression.py's cache: ``CACHE_BYTES`` of wire bytes (plus ``_ENTRY_COST`` each),
oldest entry out first. ``compression.forget_cache()`` empties this cache too (as after a restart,
so damage on disk shows); the integrity check never reads through it.
"""
from __future__ import annotations

import threading

from . import compression

CACHE_BYTES = 32 * 1024 * 1024
_ENTRY_COST = 100

#: hash -> wire bytes. Read without the lock (a dict lookup is atomic under the GIL).
cache: dict[bytes, bytes] = {}
_bytes = 0
_lock = threading.Lock()


def remember(h: bytes, wire: bytes) -> None:
    """Keep the wire bytes of the subtree with hash ``h`` (oldest entries out when full)."""
    global _bytes
    cost = len(wire) + _ENTRY_COST
    if cost > CACHE_BYTES // 4:  # one huge subtree would flush everything else
        return
    with _lock:
        if h in cache:
            return
        cache[h] = wire
        _bytes += cost
        while _bytes > CACHE_BYTES and cache:
            _bytes -= len(cache.pop(next(iter(cache)))) + _ENTRY_COST


def forget() -> None:
    global _bytes
    with _lock:
        cache.clear()
        _bytes = 0


def size() -> tuple[int, int]:
    """(entries, bytes accounted)."""
    return len(cache), _bytes


compression.on_forget(forget)
