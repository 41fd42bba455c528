"""storage: bytes, nodes and trees in one LMDB environment; no resource and no API in here.

The environment and its writes (``store``: group commit, durability modes,
map growth; ``wal``: the write-ahead log of ``process`` durability), the key
and record layout (``layout``) and the records more than one resource reaches
(``records``), the node store and hash index (``nodes``), compression of value
nodes (``compression``), garbage collection and the integrity check (``gc``),
and the hot path that hashes, chunks and encodes values (``hotpath``, which
picks the compiled ``_hotpath_c`` or the pure-Python ``_hotpath_py``).

Imports: the standard library, third-party packages, ``agentstate.codec``
(the value encoding, shared with the clients), ``sidecar.errors`` and
``sidecar.limits`` — never ``sidecar.state``, ``sidecar.ops`` or
``sidecar.api`` (tests/test_layers.py checks it).
"""
