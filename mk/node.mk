# The Node package (bindings-node/, npm package `llmgov`). Needs only Node 20+,
# npm and Rust: npm installs @napi-rs/cli, TypeScript and the test peers.
#
# test-node: install (npm ci, from package-lock.json); build the addon (debug)
# into the shared cargo target dir, reusing the workspace build's artifacts,
# and the TypeScript layer; fail if that
# changed the committed generated index.js / index.d.ts; type-check the
# typings; then node --test (scenarios, API, bad input, and the openai and
# Anthropic SDKs against target/debug/llmgov mock-server, which
# `cargo test --workspace` builds earlier in `make test`; RedisGovernor
# against a private redis-server that backend-redis/with-redis.sh starts,
# names in LLMGOV_REDIS_URL and stops, in a run directory of its own).
LANGUAGE_TESTS += test-node

# Absolute, since napi's cargo runs inside bindings-node.
NODE_CARGO_TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
# The cargo napi runs: builds the addon with the workspace build's feature
# resolution, without an explicit --target and with make's PATH (not npm's),
# so that it reuses every crate `cargo test --workspace --all-targets`
# compiled (see the script; measured in bindings-node/README.md).
NODE_CARGO := $(abspath bindings-node/scripts/cargo-workspace.mjs)
# test/redis.test.mjs's server: not test-redis's run dir, so both can run at once.
NODE_WITH_REDIS := backend-redis/with-redis.sh $(NODE_CARGO_TARGET_DIR)/node-redis-test

.PHONY: test-node bench-node

test-node: redis-server-installed
	cd bindings-node && npm ci --ignore-scripts --no-audit --no-fund
	cd bindings-node && CARGO_TARGET_DIR=$(NODE_CARGO_TARGET_DIR) CARGO=$(NODE_CARGO) LLMGOV_CARGO_PATH="$$PATH" node scripts/check-generated.mjs
	CARGO_TARGET_DIR=$(NODE_CARGO_TARGET_DIR) $(CARGO) build -p llmgov-cli  # the mock server and `llmgov top` the tests run
	$(NODE_WITH_REDIS) sh -c 'cd bindings-node && CARGO_TARGET_DIR=$(NODE_CARGO_TARGET_DIR) node --test --test-concurrency=1 --test-timeout=300000 test/*.test.mjs'

## The Node round-trip benchmark (release build); figures in BENCHMARKS.md.
bench-node:
	cd bindings-node && npm ci --ignore-scripts --no-audit --no-fund
	cd bindings-node && CARGO_TARGET_DIR=$(NODE_CARGO_TARGET_DIR) npm run bench
