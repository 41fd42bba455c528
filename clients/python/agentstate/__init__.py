"""agentstate: Python client of the Agent State Sidecar (agentstate.v1).

Generated messages and stubs live in :mod:`agentstate.v1`; this package adds
a thin client, the value encoding (:mod:`agentstate.codec`) and typed
exceptions (:mod:`agentstate.errors`).
"""
from .client import Client, checkpoint_values, decode_map
from .codec import Opaque, UnsupportedValue
from .errors import (AgentStateError, Aborted, AlreadyExists, DeadlineExceeded, FailedPrecondition, Internal,
                     InvalidArgument, NotFound, ResourceExhausted, Unavailable)
from .values import Append, Keep, SetKeys, from_value, to_value
from .runs import HeldRun, effect_done, effect_failed, event, status_name, step

__version__ = "0.1.0"

__all__ = [
    "Client", "checkpoint_values", "decode_map", "Opaque", "UnsupportedValue", "Append", "SetKeys", "Keep",
    "to_value", "from_value", "AgentStateError", "InvalidArgument", "NotFound", "AlreadyExists",
    "FailedPrecondition", "ResourceExhausted", "Aborted", "Unavailable", "DeadlineExceeded", "Internal",
    "HeldRun", "step", "event", "effect_done", "effect_failed", "status_name",
]
