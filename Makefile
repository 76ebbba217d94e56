# Capstan — the verbs. `make test` is what CI runs (through .ci/run).
CARGO ?= cargo
NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo yes)

.PHONY: help build test crds check-crds lint fmt e2e demo bench image

help: ## list the verbs
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary (capstan, devcluster)
	$(CARGO) build --workspace --bins

test: ## build once, then run every test (unit, conformance, e2e), and the conformance suites again on etcd
	$(CARGO) build --workspace --tests --bins
ifeq ($(NEXTEST),yes)
	$(CARGO) nextest run --workspace --no-fail-fast
	CAPSTAN_E2E_ETCD=1 $(CARGO) nextest run --workspace --no-fail-fast -E 'binary(/^conformance_/)'
else
	$(CARGO) test --workspace --no-fail-fast
	CAPSTAN_E2E_ETCD=1 $(CARGO) test -p capstan-e2e --no-fail-fast --test 'conformance_*'
endif

crds: ## regenerate crds/ (and the copies in the Helm chart and config/crd) from the Rust types
	$(CARGO) run -q -p capstan -- crd --out-dir crds
	$(CARGO) run -q -p capstan -- crd --out-dir charts/capstan/crds
	$(CARGO) run -q -p capstan -- crd --out-dir config/crd

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
	$(CARGO) build --release --bins
	$(CARGO) bench -p capstan-e2e --bench devcluster
	$(CARGO) bench -p capstan --bench source_render
	$(CARGO) bench -p capstan --bench appset
	$(CARGO) bench -p capstan --bench shard
	$(CARGO) bench -p capstan-e2e --bench operator
	$(CARGO) bench -p capstan-e2e --bench reporter

demo: ## the whole GitOps loop on the embedded devcluster, live (DEMO_ONESHOT=1: exit once Synced and Healthy)
	$(CARGO) build --workspace --bins
	DEMO_ONESHOT="$(DEMO_ONESHOT)" $(or $(CARGO_TARGET_DIR),target)/debug/capstan-demo

IMAGE ?= ghcr.io/capstan/capstan:$(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' charts/capstan/Chart.yaml)
CONTAINER_ENGINE ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)

image: ## build the container image (Dockerfile) with docker or podman; IMAGE=name:tag to choose the tag
ifeq ($(CONTAINER_ENGINE),)
	@echo "make image: neither docker nor podman is installed; install one of them (nothing was built)" >&2
	@exit 1
else
	$(CONTAINER_ENGINE) build --build-arg CAPSTAN_REVISION=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) -t $(IMAGE) .
endif
