"""agentstate: Python client of the Agent State Sidecar (agentstate.v1).

Generated messages and stubs live in :mod:`agentstate.v1`; this package adds
a thin sync client (:class:`Client`), its asyncio twin (:class:`AsyncClient`),
the value encoding (:mod:`agentstate.codec`), typed exceptions
(:mod:`agentstate.errors`) and, with the ``langgraph`` extra installed, a
LangGraph checkpointer (:mod:`agentstate.langgraph`).
"""
from .retries import NO_RETRY, RULES, RetryPolicy, register_idempotent
from .aio import AsyncClient
from .transport import TLS
from .client import Client, checkpoint_values, decode_map
from .codec import Opaque, UnsupportedValue
from .errors import (AgentStateError, Aborted, AlreadyExists, DeadlineExceeded, FailedPrecondition, Internal,
                     InvalidArgument, LeaseExpired, NotFound, PermissionDenied, ResourceExhausted, Unauthenticated,
                     Unavailable)
from .errors import DataLoss
from .values import Append, Encoded, Keep, SetKeys, apply_list_delta, channel_value, from_value, to_value
from .held_runs import AsyncHeldRun, HeldRun
from .run_records import effect_done, effect_failed, event, status_name, step

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "TLS", "RetryPolicy", "NO_RETRY", "RULES", "register_idempotent", "checkpoint_values",
    "decode_map",
    "Opaque", "UnsupportedValue", "Append", "SetKeys", "Keep", "Encoded", "to_value", "from_value", "channel_value",
    "apply_list_delta", "AgentStateError", "InvalidArgument", "NotFound", "AlreadyExists", "FailedPrecondition",
    "ResourceExhausted", "Aborted", "Unavailable", "DeadlineExceeded", "Internal", "LeaseExpired",
    "Unauthenticated", "PermissionDenied",
    "HeldRun", "AsyncHeldRun", "step", "event", "effect_done", "effect_failed", "status_name",
    "DataLoss",
]
