"""layout: the LMDB layout — sub-databases, key encodings and record formats.

One LMDB environment holds these named sub-databases (docs/storage.md):

``meta``      b"format" -> format version; b"next_tkey" -> u64 counter
``nodes``     node id (u64 BE, increasing) -> record: hash + stored node (see _hotpath_py)
``hashes``    blake3 hash (32 bytes) -> node id
``threads``   ns NUL thread_id -> ThreadRec
``ckpts``     tkey(u64 BE) cns NUL checkpoint_id -> Manifest (its quota charge included: CkCharge)
``writes``    tkey cns NUL checkpoint_id NUL task_id NUL idx(u32 BE, offset 2**31) -> WriteRec (its charge included)
``runidx``    hash16(ns, run_id) tkey cns NUL checkpoint_id -> ns NUL run_id
``requests``  ns NUL request_id -> RequestRec (idempotent retries)
``reqtime``   created_us(u64 BE) ns NUL request_id -> b"" (expiry order)

Runs, steps, events, artifacts, effects and branches (sidecar/state/runs.py, steps.py, events.py, artifacts.py,
effects.py, branches.py):

``runs``      ns NUL run_id -> RunRec
``thruns``    tkey seq(u64 BE) -> run_id (a thread's runs in creation order)
``tstate``    tkey -> ThreadRunState (active run, FIFO queue, counters, usage)
``timers``    due_us(u64 BE) kind(1 byte: L lease, D deadline) ns NUL run_id -> b"" (watchdog order)
``steps``     tkey run_seq(u64 BE) step_id -> StepRec
``events``    tkey seq(u64 BE) -> EventRec
``evids``     tkey client_event_id -> seq(u64 BE) (dedupe)
``artifacts`` tkey name NUL version(u32 BE) -> ArtifactRec
``artnames``  tkey name -> ArtifactNameRec (latest and official version)
``uploads``   upload id (16 bytes) -> UploadRec (chunks of an upload in progress; GC roots)
``effects``   ns NUL idempotency_key -> EffectRec
``effthr``    tkey idempotency_key -> b"" (a thread's effects)
``branches``  tkey seq(u64 BE) -> BranchRec (fork branches of a thread)

Memory items (sidecar/state/memory.py, docs/memory.md §10):

``mempaths``  ns NUL label NUL label NUL ... -> MemPathRec (tuple order: NUL sorts first)
``mempathid`` path id(u64 BE) -> MemPathName [ns, labels] (reverse lookup)
``memitems``  path id key -> MemItemRec
``memids``    item id(u64 BE) -> path id + key
``memupd``    ns NUL ~updated_us(u64 BE) item id -> b"" (tenant-wide, newest first)
``memexp``    expires_us(u64 BE) item id -> b"" (sweeper order, all tenants)
``memhist``   path id blake3(key)[:16] version(u64 BE) -> MemRevRec (history, newest last)
``memvec``    item id field -> MemVecRec (one client-supplied float32 vector)
``memspace``  ns NUL space name -> MemSpaceRec (a vector space's id and dimension)
``memfld``    ns NUL hash(field path)[:8] type(1) value key(16) item id -> b"" (pre-filter, keys ordered per type)
``memfldx``   ns NUL item id -> b"" (items with too many leaves to index: always candidates)

Conversations (docs/conversations.md "LMDB layout"; sidecar/state/conversations.py owns citems, cids, ccalls,
cstate; state/convpolicy.py owns nsconf (a thread's own idle policy is in its ThreadRec); state/convtimers.py owns ctimers and reclaim):

``citems``    tkey seq(u64 BE) -> ItemRec (a thread's conversation log)
``cids``      tkey client_item_id -> seq(u64 BE) (idempotent appends)
``ccalls``    tkey call_id -> seq(u64 BE) of the newest TOOL_CALL with that id
``cstate``    tkey -> ConvState (the log's counters)
``nsconf``    ns -> NsConvConf (a namespace's idle and compaction policies)
``tconf``     tkey -> ThreadConvConf (a thread's own compaction policy; its idle policy is in its ThreadRec)
``csums``     tkey level(u8) first_seq(u64 BE) -> SummaryRec (applied summaries; state/summaries.py owns csums,
              ccomps, cqueue, cpyr)
``ccomps``    tkey level(u8) first_seq(u64 BE) -> CompactionRec (due, pending or claimed)
``cqueue``    ns NUL due_us(u64 BE) tkey level(u8) first_seq(u64 BE) -> thread_id (claim order per namespace)
``cpyr``      tkey -> PyramidState (high-water seqs per level)
``nspins``    ns NUL pin_id -> PinRec (a namespace's pinned items; state/pins.py)
``tpins``     tkey pin_id -> PinRec (a thread's pinned items)
``ccalib``    tkey -> CalibRec (the last 16 usage reports and the calibration factor; state/calibration.py)
``ctimers``   due_us(u64 BE) kind(1 byte: I idle, F fallback) ns NUL thread_id [NUL level(u8) first_seq(u64 BE)]
              -> tkey (the sweeper's order)
``reclaim``   tkey -> ns NUL thread_id (contents of a thread deleted by its idle policy, still to delete)
``nodescope`` node id -> scope (8 bytes) + ns: the node belongs to that encrypted namespace and is indexed in
              ``hashes`` under scope + hash (storage/encryption.py); nodes without an entry are shared

Retention (sidecar/state/retention.py, docs/lifecycle.md "Retention"):

``retpol``    ns NUL thread_id (empty: the namespace's own) -> RetentionRec

Schemas (sidecar/state/schemas.py, docs/lifecycle.md "Schema versions and migrations"):

``schemas``   ns NUL schema name -> SchemaRec (versions with their migration steps, window, policy)

Usage counters and quotas (sidecar/storage/usage.py, state/quotas.py; docs/security.md "Quotas"):

``usage``     b"n" ns -> UsageRec (a namespace's charged bytes, threads, items, checkpoints);
              b"t" tkey(u64 BE) -> UsageRec (a thread's charged bytes and checkpoints)
``ckcharge``  (legacy, empty) ckpts key -> ChargeRec: where counters version 2 kept a checkpoint's charge; moved into
              its Manifest's ``charge`` on open (storage/usage.py :func:`migrate`)
``wcharge``   (legacy, empty) writes key -> bytes charged (u64 BE): version 2's pending-write charges, moved into the
              WriteRec's ``charge`` on open
``icharge``   b"c" tkey seq (a conversation item), b"m" memitems key (a memory item) or b"h" memhist key (an old
              version of a memory item: its history) -> bytes charged (u64 BE)
``quotas``    ns -> QuotaRec (a namespace's own quotas)

Threads get an internal key (``tkey``) when created, so the per-thread tables
use a short fixed-width prefix and a deleted-then-recreated thread never sees
old records. Identifiers never contain NUL (validate.py), so NUL separates
key parts and prefix scans are exact. Checkpoint keys sort by id within
(thread, checkpoint_ns): the latest is the last key of the prefix.

Keys stay under LMDB's 511-byte limit (limits.py): namespaces are at most 64
bytes, identifiers 128, checkpoint namespaces 240, artifact names 256; the
run index keys runs by a 16-byte hash of (namespace, run id).

Records are msgspec Structs encoded as MessagePack arrays whose first field is
the record format version; readers accept every version ever written.
"""
from __future__ import annotations

import re
import struct
from typing import Any

import msgspec
from blake3 import blake3

FORMAT_VERSION = 1
FORMAT_NAME = "agentstate-lmdb-1"

DB_NAMES = ("meta", "nodes", "hashes", "threads", "ckpts", "writes", "runidx", "requests", "reqtime",
            "runs", "thruns", "tstate", "timers", "steps", "events", "evids", "artifacts", "artnames", "uploads",
            "effects", "effthr", "branches",
            "mempaths", "mempathid", "memitems", "memids", "memupd", "memexp", "memhist", "memvec", "memspace",
            "memfld", "memfldx",
            "citems", "cids", "ccalls", "cstate", "nsconf", "ctimers", "reclaim",
            "tconf", "csums", "ccomps", "cqueue", "cpyr", "nspins", "tpins", "ccalib",
            "retpol", "schemas", "nodescope",
            "usage", "ckcharge", "wcharge", "quotas", "icharge")

SEP = b"\x00"
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


class ThreadRec(msgspec.Struct, array_like=True):
    fmt: int
    tkey: int
    created_us: int
    updated_us: int
    metadata: msgspec.Raw  # canonical MessagePack map
    version: int
    status: int
    # conversations (records written before them read as these defaults): the last change of the
    # conversation log (0: the thread has none), the thread's own idle TTL (-1: its namespace's; 0: never)
    # and action (IdleAction), and whether the idle policy closed the conversation
    last_active_us: int = 0
    idle_ttl_ms: int = -1
    idle_action: int = 0
    closed: bool = False


class CkCharge(msgspec.Struct, array_like=True):
    """What a checkpoint is charged (storage/usage.py), kept in its manifest: ``nbytes``; ``base`` the checkpoint
    its put was a delta or keep of (None: none; True: the manifest's parent; else its packed id, pack_id);
    ``deps`` the packed ids of the live checkpoints built on it. Base and deps are in the same thread and
    checkpoint namespace, so a copy of a thread's rows keeps its links."""

    nbytes: int
    base: Any = None
    deps: list = []


class Manifest(msgspec.Struct, array_like=True):
    fmt: int
    parent: Any  # parent checkpoint id packed by pack_id (str, or 16 UUID bytes)
    created_us: int
    metadata: msgspec.Raw  # canonical MessagePack map
    channels: list[tuple[str, bytes]]  # (name, root node id), sorted by name; the hash is in the record
    extra: bytes | None  # node id of the checkpoint's extra value, if any
    schema_version: int
    run_id: str | None  # metadata["run_id"] when it is a string (indexed in runidx)
    schema: str = ""  # the registered schema the values follow (manifests written before it read as "")
    charge: CkCharge | None = None  # its quota charge (None: not counted, or a store of counters version 2)

    @property
    def parent_id(self) -> str:
        return unpack_id(self.parent)


class WriteRec(msgspec.Struct, array_like=True):
    fmt: int  # 1: four fields; 2: run_id added; 3: charge added
    channel: str
    value: bytes  # node id of the value
    task_path: str
    run_id: str | None = None  # the run whose put wrote it (format 2)
    charge: int = -1  # the bytes its put was charged (storage/usage.py; -1: none recorded, format 3)


class RequestRec(msgspec.Struct, array_like=True):
    fmt: int
    fingerprint: bytes
    created_us: int
    response: bytes  # serialized response message


#: ResourceCounters as stored: [tokens_in, tokens_out, cost, wall_time_ms, requests]
Counters = tuple[int, int, float, int, int]
ZERO_COUNTERS: Counters = (0, 0, 0.0, 0, 0)


class RunRec(msgspec.Struct, array_like=True):
    fmt: int
    thread_id: str
    tkey: int
    seq: int  # creation order within the thread (thruns key)
    status: int  # RunStatus
    strategy: int  # MultitaskStrategy
    created_us: int
    updated_us: int
    started_us: int  # first claim (0: never claimed)
    ended_us: int
    input: bytes | None  # canonical encoding
    metadata: msgspec.Raw
    output: bytes | None
    error: str
    cns: str
    start_checkpoint_id: str
    last_checkpoint_id: str
    lease_id: str
    lease_expires_us: int
    lease_timeout_ms: int
    on_expiry: int  # LeaseExpiry
    max_attempts: int
    attempt: int
    timeout_ms: int
    deadline_us: int
    budget: Counters
    usage: Counters
    branch_of: str
    stopped_by: str
    rolled_back: bool
    held: bool
    version: int
    steps: int  # steps recorded


class ThreadRunState(msgspec.Struct, array_like=True):
    fmt: int
    active: str | None  # the thread's active run
    queue: list[str]  # queued runs, FIFO
    last_event: int  # newest event sequence number
    runs: int  # runs created (the next run's seq is runs + 1)
    branches: int  # branches created
    last_status: int  # RunStatus of the last run that ended (drives the thread status)
    usage: Counters
    steps: int
    parent_thread: str | None  # for a fork branch: the thread it forked from


class StepRec(msgspec.Struct, array_like=True):
    fmt: int
    kind: int
    name: str
    input_digest: str
    input_body: bytes | None  # canonical encoding
    output_digest: str
    output_body: bytes | None
    error: str
    counters: Counters
    start_us: int
    end_us: int  # 0 while open
    attempt: int


class EventRec(msgspec.Struct, array_like=True):
    fmt: int
    run_id: str
    step_id: str
    type: str
    data: bytes | None  # canonical encoding
    client_event_id: str
    created_us: int


class ArtifactRec(msgspec.Struct, array_like=True):
    fmt: int
    content: bytes  # node id of the value (MessagePack bin of the file)
    root: bytes  # its hash
    size: int
    content_type: str
    metadata: msgspec.Raw
    run_id: str
    step_id: str
    created_us: int


class ArtifactNameRec(msgspec.Struct, array_like=True):
    fmt: int
    latest: int
    official: int  # 0: none


class UploadRec(msgspec.Struct, array_like=True):
    fmt: int
    created_us: int
    chunks: list[bytes]  # node ids of the chunks stored so far


class EffectRec(msgspec.Struct, array_like=True):
    fmt: int
    state: int  # EffectState PENDING, DONE or FAILED (UNKNOWN is computed)
    thread_id: str
    tkey: int
    run_id: str
    lease_id: str  # the lease the effect was begun under
    step_id: str
    description: str
    request_digest: str
    token: str
    outcome: bytes | None
    error: str
    retryable: bool
    begins: int
    created_us: int
    updated_us: int
    completed_us: int
    # the current token was given by taking the effect over (answered UNKNOWN): the same holder beginning it
    # again is answered UNKNOWN again (records written before this field read as False)
    taken_over: bool = False


class BranchRec(msgspec.Struct, array_like=True):
    fmt: int
    branch_thread_id: str
    cns: str
    fork_checkpoint_id: str
    run_id: str
    created_us: int
    promoted_us: int


#: A memory item's provenance as stored: (thread_id, run_id, conversation_seq or None, step_id, checkpoint_id)
Provenance = tuple[str, str, "int | None", str, str]
NO_PROVENANCE: Provenance = ("", "", None, "", "")


class MemPathRec(msgspec.Struct, array_like=True):
    fmt: int
    path_id: int
    first_seq: int  # when the path was first written (INSERTION order)
    live: int  # items stored under it (expired ones count until swept)


class MemPathName(msgspec.Struct, array_like=True):
    fmt: int
    ns: str
    labels: list[str]


class MemItemRec(msgspec.Struct, array_like=True):
    fmt: int
    item_id: int
    ins_seq: int  # when the item was created (INSERTION order)
    created_us: int
    updated_us: int
    version: int
    value: bytes  # node id of the value (a map)
    origin: int  # MemoryOrigin
    actor: str
    provenance: Provenance
    ttl_ms: int | None  # None: never expires
    expires_us: int  # 0: never
    space: str  # vector space of its vectors ("" when none)
    vector_fields: list[str]  # sorted
    schema: str = ""  # the registered schema the value follows (records written before it read as "", 0)
    schema_version: int = 0


class MemRevRec(msgspec.Struct, array_like=True):
    fmt: int
    key: str  # the item's full key (checked on read: the record key holds a hash of it)
    kind: int  # RevisionKind
    time_us: int
    actor: str
    provenance: Provenance
    origin: int
    ttl_ms: int | None
    value: bytes | None  # node id of the value (PUT)
    vector_fields: list[str]
    etag: str
    schema: str = ""  # the put's (schema, version), as MemItemRec's (revisions written before read as "", 0)
    schema_version: int = 0


class MemVecRec(msgspec.Struct, array_like=True):
    fmt: int
    space_id: int
    dims: int
    version: int  # the item version that wrote it
    data: bytes  # float32 little-endian components


class MemSpaceRec(msgspec.Struct, array_like=True):
    fmt: int
    space_id: int
    dims: int
class ItemRec(msgspec.Struct, array_like=True):
    fmt: int
    kind: int  # ItemKind
    role: str
    client_item_id: str
    call_id: str
    tool_name: str
    run_id: str
    step_id: str
    created_us: int
    metadata: msgspec.Raw  # canonical MessagePack map, or None (stored as nil; see __post_init__)
    tokens: tuple[int, str, bool] | None  # the client's (count, tokenizer, exact)
    raw: int  # the server's estimate (docs/conversations.md "Token counts")
    cum_raw: int  # running sum of raw over the live items up to this one (range sums without reading)
    content_hash: bytes  # the content's value hash (as a value node of the store)
    inline: bytes  # the canonical encoding of the content (b"" when it is a node)
    compact: bytes | None  # canonical encoding of what tool-call compression shows
    dedupe_key: bytes | None
    call_seq: int  # a TOOL_RESULT's TOOL_CALL (0: none found)
    node: bytes | None = None  # content over state.conversations.INLINE_MAX: the id of its value's root node
    schema: str = ""  # the registered schema the content follows (state/schemas.py; older records: "", 0)
    schema_version: int = 0

    def __post_init__(self):
        # an item without metadata is stored with nil there; msgspec decodes ``Raw | None`` as None only (so
        # an item with metadata could not be read), so the field is a Raw and nil becomes None here
        if self.metadata is not None and bytes(self.metadata) == b"\xc0":
            self.metadata = None


class ConvState(msgspec.Struct, array_like=True):
    fmt: int
    count: int  # live items
    first_seq: int  # oldest live item (0: none)
    last_seq: int  # newest live item (0: none)
    next_seq: int  # the next append's seq (seqs are never reused)
    cum_raw: int  # sum of the live items' raw estimates
    timer_us: int  # the due time of the thread's idle row in ctimers (0: none)


class NsConvConf(msgspec.Struct, array_like=True):
    fmt: int
    compaction: tuple | None  # the namespace's compaction policy (state/convpolicy.py)
    idle: tuple[int, int] | None  # (ttl_ms, IdleAction); None: no idle expiry
    walk_from: str | None = None  # the sweeper's walk over the namespace's threads (None: done)


class ThreadConvConf(msgspec.Struct, array_like=True):
    fmt: int
    compaction: tuple | None  # the thread's own compaction policy (state/convpolicy.py), None: inherit


class CompactionRec(msgspec.Struct, array_like=True):
    fmt: int
    last_seq: int
    content_hash: bytes
    input_count: int
    children: list[int]  # first seqs of the level-below summaries it covers (level 2 and up)
    due_us: int
    fallback_us: int  # 0: no fallback timer
    lease_id: str
    lease_expires_us: int
    worker: str
    attempts: int
    due_event_seq: int
    max_summary_chars: int


class SummaryRec(msgspec.Struct, array_like=True):
    fmt: int
    last_seq: int
    item_count: int
    text: str
    producer: str
    fallback: bool
    tokens: tuple[int, str, bool] | None
    raw: int
    content_hash: bytes
    covered_raw: int
    children: list[int]
    created_us: int
    attempts: int
    lease_id: str  # the lease it was submitted under (a repeat of the same submit gets it back)


class PyramidState(msgspec.Struct, array_like=True):
    fmt: int
    high_water: list[int]  # per level (index level - 1): the last seq of the newest compaction issued


class PinRec(msgspec.Struct, array_like=True):
    fmt: int
    position: int
    kind: int
    role: str
    content: bytes  # canonical encoding
    tool_name: str
    tokens: tuple[int, str, bool] | None
    raw: int
    version: int
    created_us: int
    updated_us: int


class CalibRec(msgspec.Struct, array_like=True):
    fmt: int
    reports: list[tuple[bytes, int, int, int]]  # (context_hash, estimated_raw, client_counted, input_tokens)
    factor: float


EMPTY_MAP = msgspec.Raw(b"\x80")

_enc = msgspec.msgpack.Encoder()
thread_decoder = msgspec.msgpack.Decoder(ThreadRec)
manifest_decoder = msgspec.msgpack.Decoder(Manifest)
write_decoder = msgspec.msgpack.Decoder(WriteRec)
request_decoder = msgspec.msgpack.Decoder(RequestRec)
metadata_decoder = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])
run_decoder = msgspec.msgpack.Decoder(RunRec)
tstate_decoder = msgspec.msgpack.Decoder(ThreadRunState)
step_decoder = msgspec.msgpack.Decoder(StepRec)
event_decoder = msgspec.msgpack.Decoder(EventRec)
artifact_decoder = msgspec.msgpack.Decoder(ArtifactRec)
artname_decoder = msgspec.msgpack.Decoder(ArtifactNameRec)
upload_decoder = msgspec.msgpack.Decoder(UploadRec)
effect_decoder = msgspec.msgpack.Decoder(EffectRec)
branch_decoder = msgspec.msgpack.Decoder(BranchRec)
mempath_decoder = msgspec.msgpack.Decoder(MemPathRec)
mempathname_decoder = msgspec.msgpack.Decoder(MemPathName)
memitem_decoder = msgspec.msgpack.Decoder(MemItemRec)
memrev_decoder = msgspec.msgpack.Decoder(MemRevRec)
memvec_decoder = msgspec.msgpack.Decoder(MemVecRec)
memspace_decoder = msgspec.msgpack.Decoder(MemSpaceRec)
item_decoder = msgspec.msgpack.Decoder(ItemRec)
convstate_decoder = msgspec.msgpack.Decoder(ConvState)
nsconf_decoder = msgspec.msgpack.Decoder(NsConvConf)
tconf_decoder = msgspec.msgpack.Decoder(ThreadConvConf)
compaction_decoder = msgspec.msgpack.Decoder(CompactionRec)
summary_decoder = msgspec.msgpack.Decoder(SummaryRec)
pyramid_decoder = msgspec.msgpack.Decoder(PyramidState)
pin_decoder = msgspec.msgpack.Decoder(PinRec)
calib_decoder = msgspec.msgpack.Decoder(CalibRec)


def u64(n: int) -> bytes:
    return _U64.pack(n)


def read_u64(b: bytes) -> int:
    return _U64.unpack(b)[0]


# ----------------------------------------------------------------- keys

def thread_key(ns: str, thread_id: str) -> bytes:
    return ns.encode() + SEP + thread_id.encode()


def thread_prefix(ns: str) -> bytes:
    return ns.encode() + SEP


def thread_id_of(key: bytes, ns_prefix_len: int) -> str:
    return bytes(key[ns_prefix_len:]).decode()


def tkey_prefix(tkey: int) -> bytes:
    return _U64.pack(tkey)


def cns_prefix(tkey: int, cns: str) -> bytes:
    return _U64.pack(tkey) + cns.encode() + SEP


def ckpt_key(tkey: int, cns: str, checkpoint_id: str) -> bytes:
    return _U64.pack(tkey) + cns.encode() + SEP + checkpoint_id.encode()


def split_ckpt_key(key: bytes) -> tuple[int, str, str]:
    """Return (tkey, cns, checkpoint_id) of a ckpts key."""
    key = bytes(key)
    sep = key.index(SEP, 8)
    return _U64.unpack_from(key)[0], key[8:sep].decode(), key[sep + 1:].decode()


def writes_prefix(tkey: int, cns: str, checkpoint_id: str) -> bytes:
    return ckpt_key(tkey, cns, checkpoint_id) + SEP


def write_key(tkey: int, cns: str, checkpoint_id: str, task_id: str, idx: int) -> bytes:
    return writes_prefix(tkey, cns, checkpoint_id) + task_id.encode() + SEP + _U32.pack(idx + 2**31)


def split_write_suffix(suffix: bytes) -> tuple[str, int]:
    """Return (task_id, idx) from the part of a writes key after its prefix."""
    suffix = bytes(suffix)
    return suffix[:-5].decode(), _U32.unpack(suffix[-4:])[0] - 2**31


def split_write_key(key: bytes) -> tuple[int, str, str, str, int]:
    """Return (tkey, cns, checkpoint_id, task_id, idx) of a writes key."""
    key = bytes(key)
    sep1 = key.index(SEP, 8)
    sep2 = key.index(SEP, sep1 + 1)
    task_id, idx = split_write_suffix(key[sep2 + 1:])
    return _U64.unpack_from(key)[0], key[8:sep1].decode(), key[sep1 + 1:sep2].decode(), task_id, idx


def run_prefix(ns: str, run_id: str) -> bytes:
    """16-byte hash of (namespace, run id): keeps runidx keys under LMDB's 511 bytes."""
    return blake3(b"agentstate.v1 runidx" + run_entry(ns, run_id)).digest()[:16]


def run_entry(ns: str, run_id: str) -> bytes:
    """The value of every runidx entry: checked on reads, so a hash collision never crosses runs."""
    return ns.encode() + SEP + run_id.encode()


def run_key(ns: str, run_id: str, tkey: int, cns: str, checkpoint_id: str) -> bytes:
    return run_prefix(ns, run_id) + ckpt_key(tkey, cns, checkpoint_id)


def run_checkpoints(txn, db, ns: str, run_id: str) -> list[bytes]:
    """ckpts keys of the checkpoints indexed under (namespace, run id)."""
    prefix, entry = run_prefix(ns, run_id), run_entry(ns, run_id)
    cursor = txn.cursor(db=db)
    out = []
    if cursor.set_range(prefix):
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                break
            if value == entry:
                out.append(bytes(key[len(prefix):]))
    return out


def request_key(ns: str, request_id: str) -> bytes:
    return ns.encode() + SEP + request_id.encode()


def reqtime_key(created_us: int, req_key: bytes) -> bytes:
    return _U64.pack(created_us) + req_key


def ns_key(ns: str, ident: str) -> bytes:
    """``ns NUL id``: keys of runs and effects."""
    return ns.encode() + SEP + ident.encode()


def seq_key(tkey: int, seq: int) -> bytes:
    """``tkey seq``: keys of thruns, events and branches."""
    return _U64.pack(tkey) + _U64.pack(seq)


def split_seq_key(key: bytes) -> tuple[int, int]:
    return _U64.unpack_from(key)[0], _U64.unpack_from(key, 8)[0]


def tkey_str_key(tkey: int, text: str) -> bytes:
    """``tkey text``: keys of evids, artnames, effthr."""
    return _U64.pack(tkey) + text.encode()


CTIMER_IDLE = b"I"
CTIMER_FALLBACK = b"F"


def level_key(tkey: int, level: int, first_seq: int) -> bytes:
    """``tkey level first_seq``: keys of csums and ccomps."""
    return _U64.pack(tkey) + bytes((level,)) + _U64.pack(first_seq)


def split_level_key(key: bytes) -> tuple[int, int, int]:
    key = bytes(key)
    return _U64.unpack_from(key)[0], key[8], _U64.unpack_from(key, 9)[0]


def cqueue_key(ns: str, due_us: int, tkey: int, level: int, first_seq: int) -> bytes:
    return ns.encode() + SEP + _U64.pack(due_us) + level_key(tkey, level, first_seq)


def split_cqueue_suffix(key: bytes, ns_len: int) -> tuple[int, int, int, int]:
    """(due_us, tkey, level, first_seq) of a cqueue key whose namespace part is ``ns_len`` bytes."""
    key = bytes(key)
    due = _U64.unpack_from(key, ns_len + 1)[0]
    return (due, *split_level_key(key[ns_len + 9:]))


def fallback_timer_key(due_us: int, ns: str, thread_id: str, level: int, first_seq: int) -> bytes:
    return (_U64.pack(due_us) + CTIMER_FALLBACK + ns_key(ns, thread_id) + SEP + bytes((level,))
            + _U64.pack(first_seq))


def split_fallback_timer_key(key: bytes) -> tuple[int, str, str, int, int]:
    """(due_us, ns, thread_id, level, first_seq) of a fallback row of ctimers."""
    key = bytes(key)
    ns, _, rest = key[9:].partition(SEP)
    thread_id, tail = rest[:-10], rest[-9:]
    return _U64.unpack_from(key)[0], ns.decode(), thread_id.decode(), tail[0], _U64.unpack_from(tail, 1)[0]


def ctimer_key(due_us: int, kind: bytes, ns: str, thread_id: str) -> bytes:
    return _U64.pack(due_us) + kind + ns_key(ns, thread_id)


def split_ctimer_key(key: bytes) -> tuple[int, bytes, str, str]:
    """(due_us, kind, ns, thread_id) of a ctimers key."""
    key = bytes(key)
    ns, _, thread_id = key[9:].partition(SEP)
    return _U64.unpack_from(key)[0], key[8:9], ns.decode(), thread_id.decode()


TIMER_LEASE = b"L"
TIMER_DEADLINE = b"D"


def timer_key(due_us: int, kind: bytes, ns: str, run_id: str) -> bytes:
    return _U64.pack(due_us) + kind + ns_key(ns, run_id)


def split_timer_key(key: bytes) -> tuple[int, bytes, str, str]:
    """(due_us, kind, ns, run_id) of a timers key."""
    key = bytes(key)
    ns, _, run_id = key[9:].partition(SEP)
    return _U64.unpack_from(key)[0], key[8:9], ns.decode(), run_id.decode()


def step_prefix(tkey: int, run_seq: int) -> bytes:
    """Steps of one run: its thread's tkey and the run's seq (keys stay far below LMDB's 511 bytes)."""
    return _U64.pack(tkey) + _U64.pack(run_seq)


def step_key(tkey: int, run_seq: int, step_id: str) -> bytes:
    return step_prefix(tkey, run_seq) + step_id.encode()


def artifact_prefix(tkey: int, name: str) -> bytes:
    return _U64.pack(tkey) + name.encode() + SEP


def artifact_key(tkey: int, name: str, version: int) -> bytes:
    return artifact_prefix(tkey, name) + _U32.pack(version)


def split_artifact_key(key: bytes) -> tuple[int, str, int]:
    """(tkey, name, version) of an artifacts key."""
    key = bytes(key)
    return _U64.unpack_from(key)[0], key[8:-5].decode(), _U32.unpack(key[-4:])[0]


MASK64 = 2**64 - 1


def mem_path_key(ns: str, labels) -> bytes:
    """``ns NUL label NUL ...``: tuple order of paths (a prefix's paths share its key as a prefix)."""
    return ns.encode() + SEP + b"".join(label.encode() + SEP for label in labels)


def mem_labels_of(key: bytes, ns_len: int) -> list[str]:
    parts = bytes(key[ns_len + 1:]).split(SEP)
    return [p.decode() for p in parts[:-1]]


def mem_item_key(path_id: int, key: str) -> bytes:
    return _U64.pack(path_id) + key.encode()


def mem_upd_key(ns: str, updated_us: int, item_id: int) -> bytes:
    return ns.encode() + SEP + _U64.pack(MASK64 - updated_us) + _U64.pack(item_id)


def mem_exp_key(expires_us: int, item_id: int) -> bytes:
    return _U64.pack(expires_us) + _U64.pack(item_id)


def mem_hist_prefix(path_id: int, key: str) -> bytes:
    return _U64.pack(path_id) + blake3(b"agentstate.v1 memhist" + key.encode()).digest()[:16]


def mem_hist_key(path_id: int, key: str, version: int) -> bytes:
    return mem_hist_prefix(path_id, key) + _U64.pack(version)


def mem_vec_key(item_id: int, field: str) -> bytes:
    return _U64.pack(item_id) + field.encode()


def mem_space_key(ns: str, space: str) -> bytes:
    return ns.encode() + SEP + space.encode()


def mem_etag(item_id: int, version: int) -> str:
    return f"{item_id:x}-{version}"


def next_counter(txn, meta_db, name: bytes) -> int:
    """The next value of a counter in ``meta`` (starting at 1)."""
    raw = txn.get(name, db=meta_db)
    n = read_u64(raw) if raw is not None else 1
    txn.put(name, _U64.pack(n + 1), db=meta_db)
    return n


# ----------------------------------------------------------------- records

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def pack_id(checkpoint_id: str) -> str | bytes:
    """A canonical lowercase UUID string is kept as its 16 bytes; anything else as the string.

    Canonical = what ``str(uuid.UUID(s)) == s`` accepts: 8-4-4-4-12 lowercase ASCII hex digits (checked
    by a pattern, a few times per put, instead of parsing and printing a UUID object)."""
    if len(checkpoint_id) == 36 and _CANONICAL_UUID.match(checkpoint_id):
        return bytes.fromhex(checkpoint_id.replace("-", ""))
    return checkpoint_id


def unpack_id(packed: str | bytes) -> str:
    """The checkpoint id ``pack_id`` packed (``str(uuid.UUID(bytes=packed))`` for 16 bytes)."""
    if not isinstance(packed, bytes):
        return packed
    if len(packed) != 16:
        raise ValueError("bytes is not a 16-char string")
    h = packed.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def checkpoint_etag(checkpoint_id: str, parent_id: str, metadata: bytes, roots: list[tuple[str, bytes]],
                    extra: bytes | None, schema_version: int, schema: str = "") -> str:
    """Content hash of a checkpoint (hex): ids, parent, metadata, (channel, root hash) pairs, extra hash
    (and the schema name when there is one, so etags of checkpoints without one are as they were)."""
    fields = (checkpoint_id, parent_id, msgspec.Raw(metadata), roots, extra, schema_version)
    core = _enc.encode(fields + (schema,) if schema else fields)
    return blake3(b"agentstate.v1 checkpoint" + core).hexdigest()


def thread_etag(rec: ThreadRec) -> str:
    return f"{rec.tkey:x}-{rec.version}"


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


# ----------------------------------------------------------------- retention (state/retention.py)

class RetentionRec(msgspec.Struct, array_like=True):
    """A namespace's or a thread's retention policy (0 / empty: the rule is off)."""

    fmt: int
    tkey: int  # the thread's tkey (0: a namespace's policy); a recreated thread's old row names another
    keep_last: int
    max_age_us: int
    thin_after_us: int
    thin_interval_us: int
    idle_after_us: int  # delete the thread when nothing was written to it for this long
    max_checkpoints: int  # per thread
    max_bytes: int  # per thread, charged bytes (storage/usage.py)
    on_limit: int  # LimitAction: 1 refuse, 2 prune
    history_channels: list[str]
    updated_us: int


retention_decoder = msgspec.msgpack.Decoder(RetentionRec)


def retention_key(ns: str, thread_id: str = "") -> bytes:
    return ns.encode() + SEP + thread_id.encode()


# ----------------------------------------------------------------- schemas

class MigrationStepRec(msgspec.Struct, array_like=True):
    """One declared migration step (state/schemas.py): ``kind`` is rename, drop, add, nest, unnest, convert
    or map_items; ``default`` the canonical encoding of an add's value; ``steps`` a map_items' inner steps."""
    kind: str
    path: list[str]
    to: str = ""  # rename: the new name; nest: the map moved into; unnest: the map moved out of
    fields: list[str] = []
    default: bytes | None = None
    type: int = 0  # convert: a ValueType
    steps: list["MigrationStepRec"] = []


class SchemaVersionRec(msgspec.Struct, array_like=True):
    version: int
    steps: list[MigrationStepRec]
    description: str = ""


class SchemaRec(msgspec.Struct, array_like=True):
    fmt: int
    versions: list[SchemaVersionRec]
    min_readable: int
    policy: int  # FailurePolicy
    created_us: int
    updated_us: int
    revision: int


schema_decoder = msgspec.msgpack.Decoder(SchemaRec)


def schema_key(ns: str, name: str) -> bytes:
    return ns.encode() + SEP + name.encode()


encode = _enc.encode


# The record decoder of each table whose values are records (what storage/verify.py decodes: a byte flipped
# in any of them that breaks the record is found there). Every other table of DB_NAMES holds raw ids, seqs,
# keys or empty values and is in RAW_TABLES; tests/test_verify.py checks that the two cover DB_NAMES.
RECORD_DECODERS = {
    "threads": thread_decoder, "ckpts": manifest_decoder, "writes": write_decoder, "requests": request_decoder,
    "runs": run_decoder, "tstate": tstate_decoder, "steps": step_decoder, "events": event_decoder,
    "artifacts": artifact_decoder, "artnames": artname_decoder, "uploads": upload_decoder,
    "effects": effect_decoder, "branches": branch_decoder,
    "mempaths": mempath_decoder, "mempathid": mempathname_decoder, "memitems": memitem_decoder,
    "memhist": memrev_decoder, "memvec": memvec_decoder, "memspace": memspace_decoder,
    "citems": item_decoder, "cstate": convstate_decoder, "nsconf": nsconf_decoder, "tconf": tconf_decoder,
    "csums": summary_decoder, "ccomps": compaction_decoder, "cpyr": pyramid_decoder,
    "nspins": pin_decoder, "tpins": pin_decoder, "ccalib": calib_decoder,
    "retpol": retention_decoder, "schemas": schema_decoder,
}
RAW_TABLES = frozenset(("meta", "nodes", "hashes", "runidx", "reqtime", "thruns", "timers", "evids", "effthr",
                        "memids", "memupd", "memexp", "memfld", "memfldx", "cids", "ccalls", "ctimers", "reclaim",
                        "cqueue", "nodescope"))

# The node references of each table whose records point into the node store: (table, record -> node ids).
# One place: the collector (storage/gc.py) marks from these, storage/verify.py checks that each resolves.
ROOT_REFS = (
    ("ckpts", lambda m: [*(node_id for _, node_id in m.channels), *(() if m.extra is None else (m.extra,))]),
    ("writes", lambda w: [w.value]),
    ("artifacts", lambda a: [a.content]),
    ("uploads", lambda u: list(u.chunks)),
    ("memitems", lambda m: [m.value]),
    ("memhist", lambda r: [] if r.value is None else [r.value]),
    ("citems", lambda i: [] if i.node is None else [i.node]),  # content over state.conversations.INLINE_MAX
)


# ----------------------------------------------------------------- usage counters and quotas (storage/usage.py)

class UsageRec(msgspec.Struct, array_like=True):
    """Charged usage of a namespace (``usage`` b"n" ns) or of a thread (b"t" tkey: threads and items are 0)."""

    fmt: int
    nbytes: int
    threads: int
    items: int
    checkpoints: int
    ns: str = ""  # a thread's row: its namespace


class ChargeRec(msgspec.Struct, array_like=True):
    """What one checkpoint is charged (storage/usage.py): ``nbytes``; ``base`` the ckpts key of the checkpoint
    its put was a delta or keep of (b"": none); ``deps`` the ckpts keys of the live checkpoints built on it."""

    fmt: int
    nbytes: int
    base: bytes
    deps: list[bytes]


class QuotaRec(msgspec.Struct, array_like=True):
    """A namespace's own quotas (0: unlimited; -1: the server's default)."""

    fmt: int
    max_bytes: int
    max_threads: int
    max_items: int
    updated_us: int


usage_decoder = msgspec.msgpack.Decoder(UsageRec)
charge_decoder = msgspec.msgpack.Decoder(ChargeRec)
quota_decoder = msgspec.msgpack.Decoder(QuotaRec)


def ns_usage_key(ns: str) -> bytes:
    return b"n" + ns.encode()


def thread_usage_key(tkey: int) -> bytes:
    return b"t" + _U64.pack(tkey)


RECORD_DECODERS.update({"usage": usage_decoder, "ckcharge": charge_decoder, "quotas": quota_decoder})
RAW_TABLES = RAW_TABLES | {"wcharge", "icharge"}
