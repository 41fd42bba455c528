"""_mirror: picks the compiled mirror walk (``agentstate.langgraph._mirror_c``, built from
``_native/_mirror_c.pyx``) or its pure-Python twin (``_mirror_py``) when the extension is missing or
``SIDECAR_NO_EXTENSIONS`` is set to a non-empty value. Both give the same answers; what a mirror is and why
the savers need one: see ``_mirror_py``.
"""
from __future__ import annotations

import os

NO_EXTENSIONS = bool(os.environ.get("SIDECAR_NO_EXTENSIONS"))

if NO_EXTENSIONS:
    from . import _mirror_py as _impl
else:
    try:
        from . import _mirror_c as _impl  # type: ignore[attr-defined, no-redef]
    except ImportError:  # pragma: no cover - a standalone install of the client, or no compiler
        from . import _mirror_py as _impl  # type: ignore[no-redef]

NATIVE: bool = _impl.NATIVE
implementation = _impl

Rec = _impl.Rec
Unmirrorable = _impl.Unmirrorable
UNMIRRORABLE = _impl.UNMIRRORABLE
freeze = _impl.freeze
thaw = _impl.thaw
matches = _impl.matches
common_prefix = _impl.common_prefix
hand_out = _impl.hand_out
seal = _impl.seal
