# Every command a developer or CI needs. `make test` is what .ci/run calls.
CARGO ?= cargo

.PHONY: test test-rust demo bench lint

# Each language binding adds its own test target in mk/<language>.mk
# (`LANGUAGE_TESTS += test-python`), so the bindings never edit one shared
# recipe.
LANGUAGE_TESTS :=
-include mk/*.mk

## Runs every test of every language present.
test: lint test-rust $(LANGUAGE_TESTS)

## Formatting, clippy and rustdoc (broken links, bad doc markup), warnings
## as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

test-rust:
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc

## The main job: the seed batch case on the simulator, every strategy side by
## side with the lower bound, and an SVG plot (llmgov-demo.svg).
demo:
	$(CARGO) run -p llmgov-cli -- demo

## Criterion benchmarks (minutes; not part of `make test`).
bench:
	$(CARGO) bench -p llmgov --bench ledger
	$(CARGO) bench -p llmgov --bench scopes
	$(CARGO) bench -p llmgov --bench routing
