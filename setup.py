"""Build script: packages plus the compiled hot path.

``_native/_hotpath_c.pyx`` is compiled (Cython) into the extension module
``sidecar.storage._hotpath_c``, ``_native/_vectors_c.pyx`` (the memory vector kernel) into
``sidecar.storage._vectors_c``, ``_native/_migrate_c.pyx`` (list items migrated on read) into
``sidecar.storage._migrate_c``, ``_native/_reads_c.pyx`` (the read path's response building) into
``sidecar.storage._reads_c``, ``_native/_mirror_c.pyx`` (the LangGraph savers'
value mirrors) into ``agentstate.langgraph._mirror_c``, and ``_native/_lists_c.pyx`` (the client's
decoding of long list values) into ``agentstate._lists_c``. If they cannot be built
(no compiler), the install still succeeds and the selectors (``sidecar.storage.hotpath``,
``sidecar.storage.migrate``, ``sidecar.storage.reads``, ``agentstate.langgraph._mirror``,
``agentstate._lists``) use the pure-Python twins; set
``SIDECAR_REQUIRE_EXTENSIONS=1`` to make a failed build an error instead.
The ``agentstate`` client package (clients/python) ships in the same
distribution, since the server uses its generated stubs and codec.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from Cython.Build import cythonize
except ImportError:  # pragma: no cover
    cythonize = None


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001
            self._failed(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._failed(e)

    def _failed(self, e):
        if os.environ.get("SIDECAR_REQUIRE_EXTENSIONS"):
            raise e
        print(f"WARNING: the compiled hot path could not be built ({e}); using pure Python", file=sys.stderr)


ext_modules = []
if cythonize is not None and not os.environ.get("SIDECAR_NO_EXTENSIONS"):
    ext_modules = cythonize(
        [Extension("sidecar.storage._hotpath_c", ["_native/_hotpath_c.pyx"], extra_compile_args=["-O3"]),
         Extension("sidecar.storage._migrate_c", ["_native/_migrate_c.pyx"], extra_compile_args=["-O3"]),
         Extension("sidecar.storage._reads_c", ["_native/_reads_c.pyx"], extra_compile_args=["-O3"]),
         Extension("agentstate.langgraph._mirror_c", ["_native/_mirror_c.pyx"], extra_compile_args=["-O3"]),
         Extension("agentstate._lists_c", ["_native/_lists_c.pyx"], extra_compile_args=["-O3"]),
         Extension("sidecar.storage._vectors_c", ["_native/_vectors_c.pyx"], include_dirs=["_native"],
                   depends=["_native/_vectors_dot.h"],
                   extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"])],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
        quiet=True,
    )
elif os.environ.get("SIDECAR_REQUIRE_EXTENSIONS"):
    raise SystemExit("Cython is required to build the compiled hot path")

setup(
    packages=["sidecar", "sidecar.storage", "sidecar.state", "sidecar.ops", "sidecar.api", "agentstate", "agentstate.v1",
              "agentstate.langgraph", "agentstate.agents"],
    package_dir={"agentstate": "clients/python/agentstate"},
    package_data={"agentstate": ["py.typed"], "agentstate.v1": ["*.pyi"], "sidecar": ["web_templates/*.html"]},
    ext_modules=ext_modules,
    cmdclass={"build_ext": OptionalBuildExt},
)
