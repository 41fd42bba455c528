"""reads: the read path's response building (GetCheckpoint values as protobuf wire bytes).

Picks the compiled module (``sidecar.storage._reads_c``, built from ``_native/_reads_c.pyx``) and falls
back to the pure-Python twin (``sidecar.storage._reads_py``) when it is missing or
``SIDECAR_NO_EXTENSIONS`` is set, as storage/hotpath.py does. Both give byte-identical results.

``list_wire(record, fetch)``: the wire bytes of the ``ListValue`` message of a stored list (see
_reads_py), parsed into the response with one ``MergeFromString`` instead of one ``items.add()`` and
field assignment per item. ``list_wire_parts(record, fetch)``: the same in parts (one per peak of the
root, then the tail items; ``b"".join`` gives list_wire), for a caller that frames the list and joins once
(api/checkpoints.get_wire): a cached peak is not copied before that join. Assembled subtrees are cached by node hash (storage/wirecache.py).
``items_wire(encodings)``: the same bytes for a list given as its item encodings (a list migrated on read,
state/schemas.py, which keeps them by the stored subtree's hash itself).
"""
from __future__ import annotations

from . import hotpath

if hotpath.NO_EXTENSIONS:
    from . import _reads_py as _impl
else:
    try:
        from . import _reads_c as _impl  # type: ignore[attr-defined, no-redef]
    except ImportError:  # pragma: no cover - exercised by builds without a compiler
        from . import _reads_py as _impl  # type: ignore[no-redef]

NATIVE: bool = _impl.NATIVE
implementation = _impl

list_wire = _impl.list_wire
items_wire = _impl.items_wire
list_wire_parts = _impl.list_wire_parts
