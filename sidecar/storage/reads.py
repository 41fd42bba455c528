"""reads: the read path's response building (GetCheckpoint values as protobuf wire bytes).

Picks the compiled module (``sidecar.storage._reads_c``, built from ``_native/_reads_c.pyx``) and falls
back to the pure-Python twin (``sidecar.storage._reads_py``) when it is missing or
``SIDECAR_NO_EXTENSIONS`` is set, as storage/hotpath.py does. Both give byte-identical results.

``list_wire(record, fetch)``: the wire bytes of the ``ListValue`` message of a stored list (see
_reads_py), parsed into the response with one ``MergeFromString`` instead of one ``items.add()`` and
field assignment per item. Assembled subtrees are cached by node hash (storage/wirecache.py).
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
