"""agentstate.langgraph: LangGraph checkpointers backed by the Agent State Sidecar.

    from agentstate.langgraph import SidecarSaver, AsyncSidecarSaver

    graph = builder.compile(checkpointer=SidecarSaver("unix:sidecar-data/sidecar.sock"))
    # or, in asyncio code:
    graph = builder.compile(checkpointer=AsyncSidecarSaver("unix:sidecar-data/sidecar.sock"))
    # long-term memory (LangGraph's BaseStore), injected into nodes like InMemoryStore:
    graph = builder.compile(checkpointer=saver, store=SidecarStore("unix:sidecar-data/sidecar.sock"))

Needs LangGraph: ``pip install 'agentstate[langgraph]'``. See
docs/langgraph.md for what is stored and sent, durability and the
deserialization allow-list.
"""
try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without the extra installed
    raise ImportError("agentstate.langgraph needs LangGraph: pip install 'agentstate[langgraph]'") from e

from ._serde import SafeSerializer, UnsafeValueError
from ._writer import WriteBehindError
from .saver import AsyncSidecarSaver, SidecarSaver
from .store import AsyncSidecarStore, SidecarStore

__all__ = ["SidecarSaver", "AsyncSidecarSaver", "SidecarStore", "AsyncSidecarStore", "SafeSerializer", "UnsafeValueError", "WriteBehindError"]
