"""Agent State Sidecar: a gRPC state service for agents, on embedded LMDB."""
__version__ = "0.1.0"
