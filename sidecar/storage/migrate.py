"""migrate: list items migrated on read in their encoding (state/schemas.py's fast path for ``map_items``).

Picks the compiled module (``sidecar.storage._migrate_c``, built from ``_native/_migrate_c.pyx``) and falls back
to the pure-Python twin (``sidecar.storage._migrate_py``, whose module doc says what a program is and when an
item is left to the engine) when the extension is missing or ``SIDECAR_NO_EXTENSIONS`` is set. Both give
byte-identical results (tests/test_schemas_migrate.py). state/schemas.py uses it only when compiled
(``NATIVE``): in pure Python, walking the bytes costs more than msgspec's decode and encode around the steps,
so the pure build keeps that path and the twin serves as the reference the compiled module is checked against.
``migrate_items`` is ``migrate_list`` for given item ids (a list leaf or tail, state/schemas.py walking a stored
list by its subtrees), the first at a given index, and says whether every item record is a plain value node.
"""
from __future__ import annotations

import os

if os.environ.get("SIDECAR_NO_EXTENSIONS"):
    from . import _migrate_py as _impl
else:
    try:
        from . import _migrate_c as _impl  # type: ignore[attr-defined, no-redef]
    except ImportError:  # pragma: no cover - builds without a compiler
        from . import _migrate_py as _impl  # type: ignore[no-redef]

NATIVE: bool = _impl.NATIVE
implementation = _impl
program = _impl.program
apply_item = _impl.apply_item
migrate_list = _impl.migrate_list
migrate_items = _impl.migrate_items
is_normal = _impl.is_normal
