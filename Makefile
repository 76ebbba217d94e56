# Capstan — the verbs. `make test` is what CI runs (through .ci/run).
CARGO ?= cargo
NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo yes)

.PHONY: help build test crds check-crds lint fmt e2e demo bench

help: ## list the verbs
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary (capstan, devcluster)
	$(CARGO) build --workspace --bins

test: ## build once, then run every test (unit, conformance, e2e)
	$(CARGO) build --workspace --tests --bins
ifeq ($(NEXTEST),yes)
	$(CARGO) nextest run --workspace --no-fail-fast
else
	$(CARGO) test --workspace --no-fail-fast
endif

crds: ## regenerate crds/ from the Rust types
	$(CARGO) run -q -p capstan -- crd --out-dir crds

lint: ## formatting and clippy, warnings are errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## format the code
	$(CARGO) fmt --all

e2e: ## only the end-to-end and conformance tests (they start devcluster and use the real kubectl)
	$(CARGO) build -p capstan-e2e --tests --bins
ifeq ($(NEXTEST),yes)
	$(CARGO) nextest run -p capstan-e2e --no-fail-fast
else
	$(CARGO) test -p capstan-e2e --no-fail-fast
endif

bench: ## benchmarks, release profile (figures go to docs/benchmarks.md)
	$(CARGO) bench -p capstan-e2e --bench devcluster
	$(CARGO) bench -p capstan --bench source_render

demo: ## the whole GitOps loop on the embedded devcluster (arrives with the demo issue)
	@echo "make demo arrives with the 'First run' issue; for now see README.md 'Start devcluster'" >&2; exit 1
