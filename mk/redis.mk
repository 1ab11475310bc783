# The Redis backend (backend-redis, crate llmgov-redis): installs redis-server
# if it is missing (Debian, as root), starts a private one on a free loopback
# port without persistence, runs the crate's tests against it through
# LLMGOV_REDIS_URL, and stops it on the way out, pass or fail. The tests
# build into the one cargo target directory, in the debug profile
# `make test-rust` already built.

REDIS_RUN_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))/redis-test

.PHONY: test-redis redis-server-installed
LANGUAGE_TESTS += test-redis

redis-server-installed:
	@command -v redis-server >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
	@redis-server --version

## The Redis backend's tests, multi-process ones included, on a real redis-server.
test-redis: redis-server-installed
	@mkdir -p $(REDIS_RUN_DIR)
	@set -e; \
	port=$$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	redis-server --port $$port --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
	  --dir $(REDIS_RUN_DIR) --pidfile $(REDIS_RUN_DIR)/redis.pid --logfile $(REDIS_RUN_DIR)/redis.log; \
	trap 'redis-cli -p '$$port' shutdown nosave >/dev/null 2>&1 || kill $$(cat $(REDIS_RUN_DIR)/redis.pid) 2>/dev/null; true' EXIT; \
	for i in $$(seq 100); do redis-cli -p $$port ping >/dev/null 2>&1 && break; sleep 0.1; done; \
	echo "redis-server on 127.0.0.1:$$port"; \
	export LLMGOV_REDIS_URL=redis://127.0.0.1:$$port; \
	$(CARGO) test -p llmgov-redis --all-targets; \
	$(CARGO) test -p llmgov-redis --doc
