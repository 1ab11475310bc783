# The C ABI (bindings-c): libllmgov.so and libllmgov.a, the header check, the
# C tests under AddressSanitizer and under valgrind, and the Go package.
# Everything builds into the one cargo target directory ($CARGO_TARGET_DIR,
# else target/), in the debug profile `make test-rust` already built.
# The C tests and the Go tests run against a private redis-server each
# (installed if missing), for the Redis governor's tests; the others ignore it.

C_TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
C_LIB_DIR := $(C_TARGET_DIR)/debug
C_OUT := $(C_TARGET_DIR)/bindings-c
C_SRC := bindings-c/tests/c
C_TESTS := governor misuse threads acquire feedback routing routing_wait events prometheus cancel cost plan redis
C_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' bindings-c/Cargo.toml)
C_CFLAGS := -std=c11 -Wall -Wextra -Werror -g -pthread
# Compiles and links through the generated pkg-config file, as a user would.
C_PKG := PKG_CONFIG_PATH=$(C_OUT) pkg-config
C_LINK = $$($(C_PKG) --cflags --libs llmgov) -Wl,-rpath,$(C_LIB_DIR)
C_ASAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# A test that hangs (a lost wake-up leaves a waiter spinning) fails after
# five minutes instead of holding CI to its limit.
C_RUN := timeout 300
C_VALGRIND := $(C_RUN) valgrind -q --leak-check=full --error-exitcode=1 --num-callers=40 \
	--suppressions=$(C_SRC)/valgrind.supp
# cgo links the shared library found through CGO_LDFLAGS; the rpath lets the
# test binary find it at run time.
C_GO_ENV := CGO_ENABLED=1 CGO_LDFLAGS="-L$(C_LIB_DIR) -Wl,-rpath,$(C_LIB_DIR)"
# A private redis-server named in LLMGOV_REDIS_URL for the command that
# follows (see mk/redis.mk); one run directory per target, so that targets
# run in parallel do not share one.
C_WITH_REDIS = backend-redis/with-redis.sh $(C_TARGET_DIR)/c-redis-test/$@

.PHONY: test-c test-go lib-c c-header c-asan c-valgrind c-static c-readme c-examples bench-c
LANGUAGE_TESTS += test-c

## The C ABI's tests: header check, C tests (ASan, valgrind, static link), Go.
test-c: c-header c-asan c-valgrind c-static c-readme c-examples test-go

## libllmgov.so, libllmgov.a and llmgov.pc (debug).
lib-c:
	$(CARGO) build -p llmgov-c
	@mkdir -p $(C_OUT)
	sed -e 's|@LIBDIR@|$(C_LIB_DIR)|' -e 's|@INCLUDEDIR@|$(CURDIR)/bindings-c/include|' \
		-e 's|@VERSION@|$(C_VERSION)|' bindings-c/llmgov.pc.in > $(C_OUT)/llmgov.pc

## The committed header is what cbindgen makes of the sources.
c-header:
	$(CARGO) test -p llmgov-c --test header

c-asan: lib-c redis-server-installed
	$(C_WITH_REDIS) sh -c 'set -e; for t in $(C_TESTS); do \
		gcc $(C_CFLAGS) $(C_ASAN) $(C_SRC)/test_$$t.c $(C_LINK) -o $(C_OUT)/test_$$t-asan; \
		ASAN_OPTIONS=detect_leaks=1 $(C_RUN) $(C_OUT)/test_$$t-asan; \
	done'

c-valgrind: lib-c redis-server-installed
	$(C_WITH_REDIS) sh -c 'set -e; for t in $(C_TESTS); do \
		gcc $(C_CFLAGS) $(C_SRC)/test_$$t.c $(C_LINK) -o $(C_OUT)/test_$$t; \
		$(C_VALGRIND) $(C_OUT)/test_$$t; \
	done'

## The static library links and works alone.
c-static: lib-c
	gcc $(C_CFLAGS) $(C_SRC)/test_governor.c -Ibindings-c/include $(C_LIB_DIR)/libllmgov.a \
		$$($(C_PKG) --libs-only-other --libs-only-l --static llmgov | sed 's/-lllmgov//') -o $(C_OUT)/test_governor-static
	$(C_RUN) $(C_OUT)/test_governor-static

## The quick starts of README.md and bindings-c/README.md, run as written:
## the first ```c and ```go blocks from each one's "Quick start (C)" and
## "Quick start (Go)" headings; then bindings-c/README.md's Redis examples,
## against a private redis-server.
C_QUICKSTART = awk '/^\#\# Quick start \($(2)\)/{s=1} s&&/^```$(3)$$/{f=1;next} f&&/^```$$/{exit} f' $(1)
# The C and Go blocks under bindings-c/README.md's "Redis:" heading.
C_REDIS_README = awk '/^\#\# Redis:/{s=1} s&&/^```$(1)$$/{f=1;next} f&&/^```$$/{exit} f' bindings-c/README.md
c-readme: lib-c redis-server-installed
	set -e; for readme in README.md bindings-c/README.md; do \
		$(call C_QUICKSTART,$$readme,C,c) > $(C_OUT)/quickstart.c; \
		gcc $(C_CFLAGS) $(C_ASAN) $(C_OUT)/quickstart.c $(C_LINK) -o $(C_OUT)/quickstart; \
		$(C_OUT)/quickstart > $(C_OUT)/quickstart.out; \
		grep -q 'retry after [0-9]* ms$$' $(C_OUT)/quickstart.out; \
		mkdir -p $(C_OUT)/quickstart_go; \
		$(call C_QUICKSTART,$$readme,Go,go) > $(C_OUT)/quickstart_go/main.go; \
		printf 'module quickstart\n\ngo 1.24\n\nrequire llmgov.dev/llmgov v0.0.0\n\nreplace llmgov.dev/llmgov => %s\n' \
			$(CURDIR)/bindings-c/go > $(C_OUT)/quickstart_go/go.mod; \
		(cd $(C_OUT)/quickstart_go && $(C_GO_ENV) go run . > ../quickstart_go.out); \
		grep -q 'retry after [0-9.]*s$$' $(C_OUT)/quickstart_go.out; \
		echo "$$readme: quick starts ran: $$(cat $(C_OUT)/quickstart.out) / $$(cat $(C_OUT)/quickstart_go.out)"; \
	done
	$(call C_REDIS_README,c) > $(C_OUT)/readme_redis.c
	gcc $(C_CFLAGS) $(C_ASAN) $(C_OUT)/readme_redis.c $(C_LINK) -o $(C_OUT)/readme_redis
	mkdir -p $(C_OUT)/readme_redis_go
	$(call C_REDIS_README,go) > $(C_OUT)/readme_redis_go/main.go
	printf 'module readmeredis\n\ngo 1.24\n\nrequire llmgov.dev/llmgov v0.0.0\n\nreplace llmgov.dev/llmgov => %s\n' \
		$(CURDIR)/bindings-c/go > $(C_OUT)/readme_redis_go/go.mod
	$(C_WITH_REDIS) sh -c '$(C_OUT)/readme_redis > $(C_OUT)/readme_redis.out \
		&& cd $(C_OUT)/readme_redis_go && $(C_GO_ENV) go run . > ../readme_redis_go.out'
	grep -q '^ok: {"degraded":false,' $(C_OUT)/readme_redis.out
	grep -q '^degraded: false, redis calls: [1-9]' $(C_OUT)/readme_redis_go.out
	@echo "bindings-c/README.md: Redis examples ran: $$(cat $(C_OUT)/readme_redis.out) / $$(cat $(C_OUT)/readme_redis_go.out)"

## bindings-c/examples/profiles.c, compiled and run under ASan: the second
## deployment takes over when the first is full.
c-examples: lib-c
	gcc $(C_CFLAGS) $(C_ASAN) bindings-c/examples/profiles.c $(C_LINK) -o $(C_OUT)/example_profiles
	$(C_OUT)/example_profiles > $(C_OUT)/example_profiles.out
	grep -q '^request 1: gpt-4o on azure/eastus$$' $(C_OUT)/example_profiles.out

# Go's `llmgov top` tests run target/debug/llmgov.
test-go: lib-c redis-server-installed
	$(CARGO) build -p llmgov-cli
	cd bindings-c/go && $(C_GO_ENV) go vet ./...
	$(C_WITH_REDIS) sh -c 'cd bindings-c/go && $(C_GO_ENV) go test -race -count=1 ./...'

## The round trip from C and from Go (cgo included) beside Rust's, in one
## run, release build: the figures in BENCHMARKS.md.
bench-c:
	$(CARGO) build --release -p llmgov-c
	@mkdir -p $(C_OUT)
	gcc -std=c11 -O2 -Wall -Wextra -Werror -Ibindings-c/include bindings-c/bench/roundtrip.c \
		-L$(C_TARGET_DIR)/release -lllmgov -Wl,-rpath,$(C_TARGET_DIR)/release -o $(C_OUT)/bench_roundtrip
	$(C_OUT)/bench_roundtrip
	cd bindings-c/go && CGO_ENABLED=1 CGO_LDFLAGS="-L$(C_TARGET_DIR)/release -Wl,-rpath,$(C_TARGET_DIR)/release" \
		go test -run '^$$' -bench TryAcquireSettle -benchtime 2000000x -count 5 .
	$(CARGO) bench -p llmgov-c --bench roundtrip
