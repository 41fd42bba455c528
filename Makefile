# The two commands of the README:
#   make serve   set up (first time) and run the sidecar with its defaults
#   make test    set up (first time) and run every test
# Set-up is a virtualenv in .venv with this package (compiled hot path included), the
# TypeScript client's npm dependencies (npm ci) and the Go client's modules (go test fetches them).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

NODE_DIR := clients/typescript
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
GO_DIR := clients/go
# The sidecar the TypeScript and Go tests start runs on this Python.
SIDECAR_PY = $(abspath $(PY))

.PHONY: serve test test-native test-pure test-ts test-go conformance generate check-generated check-breaking clean

$(STAMP): pyproject.toml setup.py $(wildcard _native/*.pyx _native/*.pxd _native/*.h) clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	SIDECAR_REQUIRE_EXTENSIONS=1 $(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

serve: $(STAMP)
	$(VENV)/bin/sidecar serve

test: $(STAMP) check-generated check-breaking test-native test-pure test-ts test-go conformance

# Every test, with the compiled hot path (the default build); two pytest workers (pytest-xdist), each test
# file in one worker (its module-scoped sidecars are started once).
PYTEST_WORKERS ?= 2
test-native: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# The server-level suites and the LangGraph savers' exactness suite again with the pure-Python twins
# (twin equality itself is in test_hotpath.py and test_mirror.py).
test-pure: $(STAMP)
	SIDECAR_NO_EXTENSIONS=1 $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile tests/test_native_loaded.py tests/test_checkpoints.py tests/test_threads.py tests/test_errors.py tests/test_store.py tests/test_artifacts.py tests/test_history.py tests/test_batch.py tests/test_compression.py \
	  tests/test_memory.py tests/test_memory_filters.py tests/test_memory_vectors.py \
	  tests/test_mirror.py tests/test_langgraph_exact.py tests/test_conversations.py tests/test_context.py tests/test_valuetext.py \
	  tests/test_valuetext_golden.py tests/test_conversation_nodes.py tests/test_memory_vindex.py tests/test_encryption.py \
	  tests/test_limits.py tests/test_fairness.py tests/test_verify.py tests/test_schemas_diff.py tests/test_wal_batch.py tests/test_memory_probe.py \
	  tests/test_import_quotas.py tests/test_schemas_migrate.py tests/test_import_stream.py tests/test_reads.py \
	  tests/test_stream_connections.py

# The TypeScript client: unit tests, API tests, stream tests, LangGraph.js validation and graph tests.
test-ts: $(STAMP) $(NODE_STAMP)
	cd $(NODE_DIR) && SIDECAR_PYTHON=$(SIDECAR_PY) npm test

# The Go client: codec, API and stream tests.
test-go: $(STAMP)
	cd $(GO_DIR) && SIDECAR_PYTHON=$(SIDECAR_PY) go test -count=1 ./...

# The cross-language scenario suite (clients/conformance) against one live sidecar.
conformance: $(STAMP) $(NODE_STAMP)
	cd $(NODE_DIR) && npm run build
	$(PY) clients/conformance/run.py

# Regenerate Python, TypeScript and Go code from proto/ (one command).
generate: $(STAMP) $(NODE_STAMP)
	$(PY) scripts/generate.py

check-generated: $(STAMP) $(NODE_STAMP)
	$(PY) scripts/generate.py --check
	$(PY) clients/conformance/pin_encodings.py --check

# proto/ must stay compatible with the released agentstate.v1 (proto-baseline/); the self-test
# proves the check catches breaking edits.
check-breaking: $(STAMP) $(NODE_STAMP)
	$(PY) scripts/check_breaking.py --self-test

clean:
	rm -rf $(VENV) build *.egg-info _native/*.c sidecar/storage/*.so clients/python/agentstate/*.so clients/python/agentstate/langgraph/*.so $(NODE_DIR)/node_modules $(NODE_DIR)/dist .tools
