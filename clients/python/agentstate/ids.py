"""ids: time-ordered identifiers (UUIDv7 strings).

Checkpoint ids order a thread's history (the newest checkpoint has the
greatest id), so they must grow with time. ``new_id`` returns UUIDv7 strings
that are strictly increasing within a process: a 48-bit millisecond clock,
then a 12-bit counter (seeded randomly each millisecond), then 62 random
bits. The client fills in checkpoint ids with it, which makes every put
idempotent by id; the server uses the same function when a request has none.
"""
from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_seq = 0


def new_id() -> str:
    """A new UUIDv7 string, greater than every id this process made before."""
    global _last_ms, _seq
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _seq += 1
            if _seq >= 1 << 12:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _seq = 0
            ms = _last_ms
        else:
            _last_ms, _seq = ms, int.from_bytes(os.urandom(1), "big")
        seq = _seq
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | rand
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
