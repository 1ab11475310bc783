# The Redis backend (backend-redis, crate llmgov-redis): installs redis-server
# if it is missing (Debian, as root), and runs the crate's tests (and, on
# request, its benchmarks) against a private one that with-redis.sh starts on
# a free loopback port without persistence, names in LLMGOV_REDIS_URL, and
# stops on the way out, pass or fail. Tests build into the one cargo target
# directory, in the debug profile `make test-rust` already built.

REDIS_RUN_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))/redis-test
WITH_REDIS := backend-redis/with-redis.sh $(REDIS_RUN_DIR)

.PHONY: test-redis bench-redis redis-server-installed
LANGUAGE_TESTS += test-redis

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
