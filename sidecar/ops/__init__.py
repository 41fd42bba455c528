"""ops: the transactions that touch several resources, composed in one place.

A put that also records a run's steps, events and effect completions;
deleting a thread with its runs, steps, events, artifacts and effects;
stopping, rolling back and forking runs. Each function here runs inside one
write transaction and calls the ``sidecar.state`` resource modules it needs,
in order; nothing else composes resources.

Imports: ``sidecar.state``, ``sidecar.storage``, ``sidecar.errors``,
``sidecar.limits`` — never ``sidecar.api`` (tests/test_layers.py checks it).
"""
