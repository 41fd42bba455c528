"""limits: every documented size limit of the API, in one place (README "Limits")."""
from __future__ import annotations

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one request or response
MAX_NAMESPACE_BYTES = 128
MAX_ID_BYTES = 256  # thread, checkpoint, task, run and request ids; channel names
MAX_CHECKPOINT_NS_BYTES = 512
MAX_TASK_PATH_BYTES = 1024
MAX_METADATA_BYTES = 64 * 1024  # encoded metadata of one thread or checkpoint
MAX_CHANNELS = 10_000  # channels of one checkpoint
MAX_WRITES = 10_000  # pending writes of one PutWrites
MAX_IDS_PER_CALL = 1_000  # thread_ids of a prune, run_ids of a delete
MAX_BATCH_WRITES = 1_000  # requests of one BatchWrite
MAX_PAGE_SIZE = 1_000
DEFAULT_PAGE_SIZE = 100
# Value nesting depth: agentstate.codec.MAX_DEPTH (64).
REQUEST_ID_RETENTION_SECONDS = 24 * 3600  # how long a request_id is remembered
