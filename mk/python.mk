# The Python package (bindings-python): built in debug with maturin into the
# one cargo target directory ($CARGO_TARGET_DIR, else target/), type stubs
# checked by mypy.stubtest, the pytest suite (scenarios, API, the OpenAI and
# Anthropic SDKs against `llmgov mock-server`), and `pip install
# ./bindings-python` building the abi3 wheel from the same debug artifacts.

PY_TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
PY_VENV := $(PY_TARGET_DIR)/python-venv
PY := $(PY_VENV)/bin/python
PY_WHEELS := $(PY_TARGET_DIR)/python-wheels
PY_WHEEL_VENV := $(PY_TARGET_DIR)/python-wheel-venv
PY_BENCH_VENV := $(PY_TARGET_DIR)/python-bench-venv
PYTHON ?= python3

.PHONY: test-python python-develop python-stubtest python-pytest python-wheel bench-python
LANGUAGE_TESTS += test-python

## The Python package's tests: stubs, pytest, and the pip-installed wheel.
test-python: python-stubtest python-pytest python-wheel

$(PY_VENV)/.installed: bindings-python/requirements-test.txt
	$(PYTHON) -m venv $(PY_VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r bindings-python/requirements-test.txt
	touch $@

## The extension in debug, installed in the test venv (editable).
python-develop: $(PY_VENV)/.installed
	cd bindings-python && CARGO_TARGET_DIR=$(PY_TARGET_DIR) VIRTUAL_ENV=$(PY_VENV) \
		$(PY_VENV)/bin/maturin develop --quiet

python-stubtest: python-develop
	cd $(PY_TARGET_DIR) && $(PY) -m mypy.stubtest llmgov

# The SDK tests start the mock server: target/debug/llmgov.
python-pytest: python-develop
	$(CARGO) build -p llmgov-cli
	CARGO_TARGET_DIR=$(PY_TARGET_DIR) $(PY) -m pytest bindings-python/tests -q

## `pip install ./bindings-python` into a fresh venv: pip builds the abi3
## wheel through maturin (PEP 517) in the debug profile, reusing the
## artifacts python-develop built instead of compiling the core again.
python-wheel: python-develop
	rm -rf $(PY_WHEELS) $(PY_WHEEL_VENV)
	CARGO_TARGET_DIR=$(PY_TARGET_DIR) MATURIN_PEP517_ARGS="--profile dev" \
		$(PY) -m pip wheel -q --no-deps -w $(PY_WHEELS) ./bindings-python
	ls $(PY_WHEELS)/llmgov-*-cp39-abi3-*.whl
	$(PYTHON) -m venv $(PY_WHEEL_VENV)
	$(PY_WHEEL_VENV)/bin/pip install -q $(PY_WHEELS)/llmgov-*.whl pytest
	cd $(PY_TARGET_DIR) && $(PY_WHEEL_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		$(CURDIR)/bindings-python/tests/test_scenarios.py

## Python benchmarks (release build, peers installed in their own venv; not
## part of `make test`). Figures in BENCHMARKS.md. The release wheel is
## installed (not `maturin develop`, whose editable module in
## bindings-python/python/ the next debug `make test-python` replaces).
bench-python:
	test -x $(PY_BENCH_VENV)/bin/python || $(PYTHON) -m venv $(PY_BENCH_VENV)
	$(PY_BENCH_VENV)/bin/pip install -q -r bindings-python/requirements-bench.txt
	rm -rf $(PY_TARGET_DIR)/python-bench-wheels
	cd bindings-python && CARGO_TARGET_DIR=$(PY_TARGET_DIR) \
		$(PY_BENCH_VENV)/bin/maturin build --release --quiet -i $(PY_BENCH_VENV)/bin/python \
		-o $(PY_TARGET_DIR)/python-bench-wheels
	$(PY_BENCH_VENV)/bin/pip install -q --force-reinstall --no-deps $(PY_TARGET_DIR)/python-bench-wheels/llmgov-*.whl
	cd $(PY_TARGET_DIR) && $(PY_BENCH_VENV)/bin/python $(CURDIR)/bindings-python/benches/bench.py
