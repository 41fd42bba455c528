"""The selector (sidecar.storage.hotpath) must load the compiled module unless told not to.

A build that silently falls back to pure Python would still pass every other
test (the twin gives the same bytes) while being many times slower, so this
fails, never skips, when the extension is missing.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

COMPILED_FUNCTIONS = [
    "hash_bytes", "canonicalize", "decompose", "encode_opaque", "opaque_parts", "cdc_cut_points", "value_node",
    "list_append", "list_length", "map_build", "map_update", "map_count", "build_list", "build_map", "children",
    "stored_node", "canonical_node", "stored_children", "stored_encoding", "stored_list_length", "stored_list_ids",
    "stored_list_encodings", "stored_map_entries",
    "encode", "normalize",  # last: not exported by sidecar.storage.hotpath
]


def test_selector_picks_the_expected_module():
    import sidecar.storage.hotpath as hp

    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert hp.implementation.__name__ == "sidecar.storage._hotpath_py"
        assert hp.NATIVE is False
    else:
        assert hp.implementation.__name__ == "sidecar.storage._hotpath_c", (
            "sidecar.storage.hotpath fell back to pure Python: build the extension (pip install -e . / "
            "python setup.py build_ext --inplace)")
        assert hp.NATIVE is True
        assert hp.implementation.__file__.endswith((".so", ".pyd"))


def test_compiled_module_is_really_compiled():
    import importlib

    mod = importlib.import_module("sidecar.storage._hotpath_c")  # ImportError here = not built: a failure
    assert mod.NATIVE is True
    for name in COMPILED_FUNCTIONS:
        fn = getattr(mod, name)
        assert type(fn).__name__ in ("cython_function_or_method", "builtin_function_or_method"), name


@pytest.mark.parametrize("env_value,expected", [(None, "sidecar.storage._hotpath_c"), ("1", "sidecar.storage._hotpath_py"),
                                                ("", "sidecar.storage._hotpath_c")])
def test_selector_in_a_fresh_interpreter(env_value, expected):
    env = {k: v for k, v in os.environ.items() if k != "SIDECAR_NO_EXTENSIONS"}
    if env_value is not None:
        env["SIDECAR_NO_EXTENSIONS"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", "import sidecar.storage.hotpath as h; print(h.implementation.__name__, h.NATIVE)"],
        env=env, cwd=str(ROOT), capture_output=True, text=True, check=True).stdout.split()
    assert out == [expected, str(expected.endswith("_c"))]


def test_migrate_selector_picks_the_compiled_module():
    """storage/migrate (list items migrated on read in their bytes) as hotpath: compiled unless told not to."""
    import importlib

    import sidecar.storage.migrate as mg

    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert mg.implementation.__name__ == "sidecar.storage._migrate_py" and mg.NATIVE is False
    else:
        assert mg.implementation.__name__ == "sidecar.storage._migrate_c", "storage/migrate fell back to pure Python"
        assert mg.NATIVE is True and mg.implementation.__file__.endswith((".so", ".pyd"))
    mod = importlib.import_module("sidecar.storage._migrate_c")  # ImportError here = not built: a failure
    for name in ("program", "apply_item", "migrate_list", "is_normal"):
        assert type(getattr(mod, name)).__name__ in ("cython_function_or_method", "builtin_function_or_method"), name
        assert getattr(mg, name) is getattr(mg.implementation, name), name


def test_selector_exports_every_name_from_the_chosen_module():
    import sidecar.storage.hotpath as hp

    for name in COMPILED_FUNCTIONS[:-2] + ["CorruptNode", "UnsupportedValue", "HASH_SIZE", "KIND_LIST", "TAG_MAP"]:
        assert getattr(hp, name) is getattr(hp.implementation, name), name


def test_the_read_path_selector_picks_the_expected_module():
    """sidecar.storage.reads (GetCheckpoint's list values as wire bytes) follows the same rule."""
    import importlib

    import sidecar.storage.reads as reads

    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert reads.implementation.__name__ == "sidecar.storage._reads_py"
        assert reads.NATIVE is False
    else:
        assert reads.implementation.__name__ == "sidecar.storage._reads_c", (
            "sidecar.storage.reads fell back to pure Python: build the extension (pip install -e .)")
        assert reads.NATIVE is True
    mod = importlib.import_module("sidecar.storage._reads_c")  # ImportError here = not built: a failure
    assert mod.NATIVE is True and mod.__file__.endswith((".so", ".pyd"))
    assert type(mod.list_wire).__name__ in ("cython_function_or_method", "builtin_function_or_method")


def test_the_client_list_decoding_selector_picks_the_expected_module():
    import importlib

    import agentstate._lists as lists

    if os.environ.get("SIDECAR_NO_EXTENSIONS"):
        assert lists.implementation.__name__ == "agentstate._lists_py" and lists.NATIVE is False
    else:
        assert lists.implementation.__name__ == "agentstate._lists_c", (
            "agentstate._lists fell back to pure Python: build the extension (pip install -e .)")
        assert lists.NATIVE is True
    mod = importlib.import_module("agentstate._lists_c")  # ImportError here = not built: a failure
    assert mod.NATIVE is True and mod.__file__.endswith((".so", ".pyd"))
