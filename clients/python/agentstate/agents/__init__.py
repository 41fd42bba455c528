"""agentstate.agents: a session store of the OpenAI Agents SDK on the sidecar (``pip install
'agentstate[agents]'``).

    from agentstate.agents import SidecarSession
    session = SidecarSession("user-42", "unix:sidecar-data/sidecar.sock", namespace="support")
    result = await Runner.run(agent, "hello", session=session)

A session is a thread; its items are the thread's conversation log (docs/conversations.md).
"""
from .session import SidecarSession

__all__ = ["SidecarSession"]
