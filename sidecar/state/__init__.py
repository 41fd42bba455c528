"""state: one module per resource, each holding that resource's rules over its records.

A resource module (threads, checkpoints, history, runs, events, effects,
artifacts, ...) takes validated Python values — never a protobuf request —
reads and writes its records through ``sidecar.storage`` inside the
transaction it is given, and returns records or plain values. ``runstate`` is
the one shared piece: the transaction context of run-scoped writes (run records
and thread run states cached for one write, the lease checks every
run-scoped write passes, server events).

Imports: ``sidecar.storage``, ``sidecar.errors``, ``sidecar.limits`` and
``sidecar.state.runstate``; a resource module never imports another resource
module, ``sidecar.ops`` or ``sidecar.api`` (tests/test_layers.py checks it).
Work that touches several resources in one transaction is composed in
``sidecar.ops``.
"""
