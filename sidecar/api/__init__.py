"""api: the gRPC face of the sidecar (agentstate.v1).

Servicers (``service``), the write stream and batches (``stream``,
``batch``), request validation (``validate``), conversion between protobuf
messages and what the lower layers take and return (``wire`` and the
per-service modules), ``request_id`` answers (``idempotency``) and the
per-server context (``context``: the store, watchers to wake, the garbage
collector to nudge). Errors raised below become gRPC statuses here.

Imports: everything below (``sidecar.ops``, ``sidecar.state``,
``sidecar.storage``, ``sidecar.errors``, ``sidecar.limits``); nothing below
imports this package (tests/test_layers.py checks it).
"""
