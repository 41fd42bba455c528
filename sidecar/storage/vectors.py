"""vectors: the memory vector kernel (cosine scores of float32 rows, float64 arithmetic).

Picks the compiled module (``sidecar.storage._vectors_c``, built from ``_native/_vectors_c.pyx``; its loop
releases the GIL) and falls back to the pure-Python twin (``sidecar.storage._vectors_py``) when the extension
is missing or ``SIDECAR_NO_EXTENSIONS`` is set. Both give bit-identical scores (tests/test_memory_vectors.py).
"""
from __future__ import annotations

import os

if os.environ.get("SIDECAR_NO_EXTENSIONS"):
    from . import _vectors_py as _impl
else:
    try:
        from . import _vectors_c as _impl  # type: ignore[attr-defined, no-redef]
    except ImportError:  # pragma: no cover - builds without a compiler
        from . import _vectors_py as _impl  # type: ignore[no-redef]

NATIVE: bool = _impl.NATIVE
implementation = _impl
cosine_scores = _impl.cosine_scores
sq_norm = _impl.sq_norm
best_scores = _impl.best_scores
select_top = _impl.select_top
merge_max = _impl.merge_max
quantize = _impl.quantize
best_top = _impl.best_top
