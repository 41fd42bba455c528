"""limits: every documented size limit of the API, in one place (README "Limits")."""
from __future__ import annotations

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one request or response
# Identifiers end up in LMDB keys (at most 511 bytes): the longest, a pending write's
# tkey(8) + checkpoint_ns + NUL + checkpoint_id + NUL + task_id + NUL + idx(4), is exactly 511.
MAX_NAMESPACE_BYTES = 64
MAX_ID_BYTES = 128  # thread, checkpoint, task, run and request ids; idempotency keys
MAX_NAME_BYTES = 256  # channel names, metadata-free names that never go into keys
MAX_CHECKPOINT_NS_BYTES = 240
MAX_TASK_PATH_BYTES = 1024
MAX_METADATA_BYTES = 64 * 1024  # encoded metadata of one thread or checkpoint
MAX_CHANNELS = 10_000  # channels of one checkpoint
MAX_WRITES = 10_000  # pending writes of one PutWrites
MAX_IDS_PER_CALL = 1_000  # thread_ids of a prune, run_ids of a delete
MAX_BATCH_WRITES = 1_000  # requests of one BatchWrite
MAX_PAGE_SIZE = 1_000
DEFAULT_PAGE_SIZE = 100
# Value nesting depth: agentstate.codec.MAX_DEPTH (64).
MAX_EVENTS_PER_CALL = 1_000  # events of one AppendEvents or put; steps and effects of one put
MAX_PAYLOAD_BYTES = 64 * 1024  # encoded data of one event, body of one step input/output, effect outcome
MAX_TEXT_BYTES = 4 * 1024  # error texts, effect descriptions and digests, event types, step names
MAX_ARTIFACT_NAME_BYTES = 256  # like ids: keys stay under LMDB's 511 bytes
MAX_ARTIFACT_BYTES = 1 << 30  # one artifact version
MAX_UPLOAD_MESSAGE_BYTES = 4 * 1024 * 1024  # data of one UploadArtifact message
MIN_LEASE_MS = 100
MAX_CLAIM_WAIT_SECONDS = 300
REQUEST_ID_RETENTION_SECONDS = 24 * 3600  # how long a request_id is remembered
# Memory items (docs/memory.md §12)
MAX_MEMORY_LABELS = 32  # labels of one path
MAX_MEMORY_LABEL_BYTES = 128
MAX_MEMORY_PATH_BYTES = 384  # the labels of one path together
MAX_MEMORY_KEY_BYTES = 256
MAX_MEMORY_VALUE_BYTES = 1 << 20  # encoded value of one item
MAX_MEMORY_ACTOR_BYTES = 256
MAX_MEMORY_VECTORS = 1024  # per item
MAX_VECTOR_DIMS = 4096
MAX_VECTOR_FIELD_BYTES = 256
MAX_VECTOR_SPACE_BYTES = 128
MAX_MEMORY_SEARCH_LIMIT = 1000
DEFAULT_MEMORY_SEARCH_LIMIT = 10
MAX_MEMORY_OFFSET = 100_000
MAX_VECTOR_WINDOW = 10_000  # offset + limit of a vector query
MAX_MEMORY_BATCH_OPS = 1000
MAX_MEMORY_TTL_MS = 100 * 366 * 24 * 3600 * 1000  # 100 years
MEMORY_SWEEP_BATCH = 256  # expired items deleted per writer job

# Conversations (docs/conversations.md "Limits")
MAX_ITEMS_PER_APPEND = 1_000
MAX_ITEM_CONTENT_BYTES = 4 * 1024 * 1024  # encoded content of one item
MAX_ITEM_COMPACT_BYTES = 4 * 1024
MAX_ITEM_METADATA_BYTES = 64 * 1024
MAX_ITEM_NAME_BYTES = 256  # role, tool name, tokenizer
MAX_DEDUPE_KEY_BYTES = 64
MAX_ITEM_IDS_PER_GET = 1_000
MIN_IDLE_TTL_MS = 1_000
MAX_IDLE_TTL_MS = 365 * 24 * 3600 * 1000
SWEEP_RECLAIM_BATCH = 5_000  # keys one reclaim job deletes
MAX_PINS_PER_SCOPE = 100
MAX_PIN_CONTENT_BYTES = 1024 * 1024  # a pinned or knowledge item's encoded content
MAX_KNOWLEDGE_ITEMS = 1_000
MAX_BUDGET_TOKENS = 10_000_000
RETENTION_BATCH = 64  # checkpoints one retention job removes (each a nested transaction of the group commit)
MAX_RETENTION_REPORT = 10_000  # removed checkpoints an ApplyRetention response lists
