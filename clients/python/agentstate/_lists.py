"""_lists: picks the compiled decoding aid for long list values (``agentstate._lists_c``, built from
``_native/_lists_c.pyx``) or its pure-Python twin (``_lists_py``) when the extension is missing or
``SIDECAR_NO_EXTENSIONS`` is set to a non-empty value. Both give the same answers; what it does: see
``_lists_py``. :func:`agentstate.values.from_value` uses it only when compiled (the twin's scan in Python
costs more than it saves).
"""
from __future__ import annotations

import os

NO_EXTENSIONS = bool(os.environ.get("SIDECAR_NO_EXTENSIONS"))

if NO_EXTENSIONS:
    from . import _lists_py as _impl
else:
    try:
        from . import _lists_c as _impl  # type: ignore[attr-defined, no-redef]
    except ImportError:  # pragma: no cover - a standalone install of the client, or no compiler
        from . import _lists_py as _impl  # type: ignore[no-redef]

NATIVE: bool = _impl.NATIVE
implementation = _impl

msgpack_array = _impl.msgpack_array
msgpack_array_into = _impl.msgpack_array_into
