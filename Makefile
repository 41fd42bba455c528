# The two commands of the README:
#   make serve   set up (first time) and run the sidecar with its defaults
#   make test    set up (first time) and run every test
# Set-up is a virtualenv in .venv with this package (compiled hot path included).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test test-native test-pure generate check-generated clean

$(STAMP): pyproject.toml setup.py $(wildcard _native/*.pyx _native/*.pxd) clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	SIDECAR_REQUIRE_EXTENSIONS=1 $(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/sidecar serve

test: $(STAMP) check-generated test-native test-pure

# Every test, with the compiled hot path (the default build).
test-native: $(STAMP)
	$(PY) -m pytest -q

# The server-level suites again with the pure-Python twin (twin equality itself is in test_hotpath.py).
test-pure: $(STAMP)
	SIDECAR_NO_EXTENSIONS=1 $(PY) -m pytest -q tests/test_native_loaded.py tests/test_checkpoints.py tests/test_threads.py tests/test_errors.py tests/test_store.py tests/test_history.py tests/test_batch.py

generate: $(STAMP)
	$(PY) scripts/generate.py

check-generated: $(STAMP)
	$(PY) scripts/generate.py --check

clean:
	rm -rf $(VENV) build *.egg-info _native/*.c sidecar/*.so
