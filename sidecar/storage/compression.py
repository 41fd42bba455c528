"""compression: value nodes stored zstd-compressed, with a dictionary trained on the store's own values.

A value node (``v`` + encoding, see _hotpath_py) of at least ``MIN_SIZE``
bytes is stored as

    ``z`` + dictionary id (8 bytes; zeros: no dictionary) + zstd frame of the encoding

when that is smaller than the node. Only the stored form changes: the node's
hash is still the BLAKE3 hash of the canonical ``v`` node, so content
addressing, deduplication, etags and everything clients see are the same
with or without compression, and a read gives back the exact encoding. The
hot path's record readers (``stored_encoding``, ``canonical_node``, both
twins) unpack ``z`` records through :func:`unpack`; a record that does not
unpack (damaged frame, unknown dictionary) is a CorruptNode like any other
damage, and the integrity check reports it.

Why a dictionary: the values of one store are small and alike (an agent
framework's serialized messages: the same class paths, field names and
phrasing in every one). Compressed one by one without a dictionary they
shrink by about 30%; with a 16 KiB dictionary trained on the store's first
values, by 60-70% (measured on the LangGraph chat of benchmarks/, whose text
is drawn from a small vocabulary; real prose gains less).

Dictionary life cycle (decision):

* A store without a dictionary keeps the encodings of the value nodes it
  writes as samples until it has ``SAMPLE_BYTES`` (and ``MIN_SAMPLES``
  nodes); nodes written meanwhile are compressed without a dictionary.
* Then a ``DICT_SIZE`` dictionary is trained from the samples on a
  background thread (``zstd`` COVER training, ~15 ms) and written to
  ``meta`` (``zdict:`` + id -> dictionary, ``zdict`` -> id of the current
  one) by a write acknowledged only after its synced LMDB commit. Only then
  do new nodes use it, so no stored record ever names a dictionary that is
  not durably stored before it (also in ``process`` durability: the log
  replays in order).
* The id is the first 8 bytes of the dictionary's BLAKE3 hash, so the
  process-wide registry of dictionaries (what :func:`unpack` uses) can hold
  those of several stores. Dictionaries are never deleted (16 KiB each);
  one is trained per store; the id in every record leaves room to train
  newer ones later.
* Nodes are never rewritten: those written before the dictionary stay as
  they are.

Incompressible values (random or already-compressed bytes) are stored as
they are. After ``GIVE_UP_AFTER`` of them in a row, only every
``TRY_EVERY``-th value is tried until one compresses again, so a store of
such values does not pay for a compression attempt on every write.

``Store(compress=False)`` (``sidecar serve --no-compress``) stores every node
as it is; reading compressed records always works.

Read cache (decision): unpacking costs ~1 us per node (zstd with a
dictionary; most of it zstd's fixed cost per frame), which a read of a
1,600-message history would pay 1,600 times. So the encodings of compressed
nodes are kept in a process-wide cache of ``CACHE_BYTES``, keyed by node
hash (content-addressed, so shared safely by every store of the process and
never stale), filled when a node is written (recent values are the ones
read next) and when one is unpacked, oldest entry out first. The integrity
check never uses it: it unpacks every record from disk.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import zstandard
from blake3 import blake3

log = logging.getLogger("sidecar.compression")

TAG_PACKED = 0x7A  # z
_PACKED = bytes((TAG_PACKED,))
HASH_SIZE = 32
ID_SIZE = 8
NO_DICT = bytes(ID_SIZE)
#: Nodes shorter than this are stored as they are (a frame's header would eat most of the gain).
MIN_SIZE = 64
#: The longest encoding a value node holds (the hot path's CHUNK_THRESHOLD: longer ones are chunked).
MAX_ENCODING = 32 * 1024
LEVEL = 3
DICT_SIZE = 16 * 1024
#: After this many value nodes in a row did not get smaller, only every TRY_EVERY-th one is tried until one
#: does (random or already-compressed bytes cost ~6 us per KiB to try, for nothing).
GIVE_UP_AFTER = 32
TRY_EVERY = 16
SAMPLE_BYTES = 64 * 1024
MIN_SAMPLES = 64
META_CURRENT = b"zdict"
META_PREFIX = b"zdict:"

#: Bytes of encodings the read cache holds (plus ~100 bytes of bookkeeping per entry).
CACHE_BYTES = 32 * 1024 * 1024
_ENTRY_COST = 100

_dicts: dict[bytes, zstandard.ZstdCompressionDict] = {}
_registry_lock = threading.Lock()
_local = threading.local()  # per-thread decompressors: ZstdDecompressor objects are not thread-safe


def dict_id(data: bytes) -> bytes:
    return blake3(data).digest()[:ID_SIZE]


def register(data: bytes) -> bytes:
    """Make a dictionary known to :func:`unpack`; returns its id."""
    did = dict_id(data)
    with _registry_lock:
        if did not in _dicts:
            _dicts[did] = zstandard.ZstdCompressionDict(data)
    return did


def _decompressor(did: bytes) -> zstandard.ZstdDecompressor:
    cache = getattr(_local, "cache", None)
    if cache is None:
        cache = _local.cache = {}
    d = cache.get(did)
    if d is None:
        if did == NO_DICT:
            d = zstandard.ZstdDecompressor()
        else:
            zd = _dicts.get(did)
            if zd is None:
                raise ValueError(f"compressed node names unknown dictionary {did.hex()}")
            d = zstandard.ZstdDecompressor(dict_data=zd)
        cache[did] = d
    return d


def unpack(stored: bytes) -> bytes:
    """The encoding held by a stored ``z`` node; ValueError when it does not unpack."""
    if len(stored) < 1 + ID_SIZE or stored[0] != TAG_PACKED:
        raise ValueError("not a compressed node")
    d = _decompressor(bytes(stored[1:1 + ID_SIZE]))
    frame = bytes(stored[1 + ID_SIZE:])
    try:
        size = zstandard.frame_content_size(frame)
        if not 0 <= size <= MAX_ENCODING:  # a damaged header must not make us allocate gigabytes
            raise ValueError(f"compressed node claims {size} bytes")
        return d.decompress(frame)
    except zstandard.ZstdError as e:
        raise ValueError(f"compressed node does not unpack: {e}") from None


_cache: dict[bytes, bytes] = {}
_cache_bytes = 0
_cache_lock = threading.Lock()


def remember(h: bytes, encoding: bytes) -> None:
    """Keep a compressed node's encoding in the read cache (oldest entries out when it is full)."""
    global _cache_bytes
    with _cache_lock:
        if h in _cache:
            return
        _cache[h] = encoding
        _cache_bytes += len(encoding) + _ENTRY_COST
        while _cache_bytes > CACHE_BYTES and _cache:
            _cache_bytes -= len(_cache.pop(next(iter(_cache)))) + _ENTRY_COST


#: Other process-wide read caches keyed by node hash (storage/wirecache.py): emptied with this one.
_also_forget: list[Callable[[], None]] = []


def forget_cache() -> None:
    """Empty the read cache, and every cache registered by :func:`on_forget` (tests, tools: as a new
    process starts)."""
    global _cache_bytes
    with _cache_lock:
        _cache.clear()
        _cache_bytes = 0
    for fn in _also_forget:
        fn()


def on_forget(fn: Callable[[], None]) -> None:
    """Have :func:`forget_cache` call ``fn`` too."""
    if fn not in _also_forget:
        _also_forget.append(fn)


def unpack_record(record: bytes) -> bytes:
    """The encoding held by a record (hash + ``z`` node), from the read cache when it is there."""
    h = bytes(record[:HASH_SIZE])
    encoding = _cache.get(h)
    if encoding is None:
        encoding = unpack(record[HASH_SIZE:])
        remember(h, encoding)
    return encoding


class Packer:
    """Compresses one store's value nodes as they are written (owner thread), and trains its dictionary."""

    def __init__(self, load: Callable[[], tuple[bytes | None, list[bytes]]],
                 save: Callable[[bytes, bytes], None], enabled: bool = True) -> None:
        """``load()`` -> (current dictionary id or None, every stored dictionary); ``save(id, data)`` stores
        one durably (blocking, from a background thread)."""
        self.enabled = enabled
        self._save = save
        current, stored = load()
        for data in stored:
            register(data)
        self._plain = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False, write_dict_id=False)
        self.current: tuple[bytes, zstandard.ZstdCompressor] = (NO_DICT, self._plain)
        if current is not None and current in _dicts:
            self.current = (current, self._compressor(_dicts[current]))
        self._samples: list[bytes] | None = [] if enabled and self.current[0] == NO_DICT else None
        self._sampled = 0
        self._misses = 0  # value nodes in a row that did not get smaller
        self.trainer: threading.Thread | None = None

    @staticmethod
    def _compressor(zd: zstandard.ZstdCompressionDict) -> zstandard.ZstdCompressor:
        return zstandard.ZstdCompressor(level=LEVEL, dict_data=zd, write_checksum=False, write_dict_id=False)

    def pack(self, h: bytes, stored: bytes, sample: bool = True) -> bytes:
        """The form to store a value node in (``stored`` = ``v`` + encoding, ``h`` its hash): compressed
        when smaller (and then its encoding goes into the read cache). ``sample=False`` (an encrypted
        namespace's value, encryption.py): never a sample for the dictionary, which is stored in the clear."""
        n = len(stored)
        if not self.enabled or n < MIN_SIZE:
            return stored
        encoding = stored[1:]
        if self._samples is not None and sample:
            self._sample(encoding)
        misses = self._misses
        if misses >= GIVE_UP_AFTER and misses % TRY_EVERY:
            self._misses = misses + 1
            return stored
        did, cctx = self.current
        frame = cctx.compress(encoding)
        if 1 + ID_SIZE + len(frame) >= n:
            self._misses = misses + 1
            return stored
        self._misses = 0
        remember(h, encoding)
        return _PACKED + did + frame

    def for_thread(self) -> Callable[[bytes, bytes], bytes]:
        """A ``pack`` for one other thread (a large request staged off the owner thread): its own
        compressor of the current dictionary (a zstd compressor must not be used by two threads at
        once), no sampling, no read cache (the owner thread does not see these nodes until they are
        written)."""
        if not self.enabled:
            return lambda h, stored: stored
        did, _ = self.current
        cctx = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False, write_dict_id=False) \
            if did == NO_DICT else self._compressor(_dicts[did])

        def pack(h: bytes, stored: bytes) -> bytes:
            n = len(stored)
            if n < MIN_SIZE:
                return stored
            frame = cctx.compress(stored[1:])
            if 1 + ID_SIZE + len(frame) >= n:
                return stored
            return _PACKED + did + frame

        return pack

    def _sample(self, encoding: bytes) -> None:
        samples = self._samples
        samples.append(encoding)
        self._sampled += len(encoding)
        if self._sampled >= SAMPLE_BYTES and len(samples) >= MIN_SAMPLES:
            self._samples = None
            self.trainer = threading.Thread(target=self._train, args=(samples,), name="sidecar-zdict", daemon=True)
            self.trainer.start()

    def _train(self, samples: list[bytes]) -> None:
        try:
            zd = zstandard.train_dictionary(DICT_SIZE, samples, level=LEVEL)
            data = zd.as_bytes()
            did = register(data)
            self._save(did, data)
        except Exception:  # noqa: BLE001 - compression simply goes on without a dictionary
            log.warning("training the compression dictionary failed; values stay compressed without one",
                        exc_info=True)
            return
        self.current = (did, self._compressor(_dicts[did]))
        log.info("compression dictionary %s (%d bytes) trained on %d values", did.hex(), len(data), len(samples))
