# mcsched: `make demo` runs the local demo, `make test` the whole test suite.

SHELL := /bin/bash
BUILD := .build
# Cargo's output directory: $CARGO_TARGET_DIR when set, as cargo itself decides.
TARGET := $(or $(CARGO_TARGET_DIR),target)
CONTROLPLANE := $(BUILD)/controlplane
CONTROLPLANE_GO := $(wildcard tests/controlplane/*.go) Makefile
CONTROLPLANE_SRC := $(CONTROLPLANE_GO) tests/controlplane/go.mod tests/controlplane/go.sum
# The version window: hosts run v1.35-v1.37, leaves v1.34-v1.37. .build/controlplane is
# the newest (go.mod); each older minor gets a control plane of its own from the same
# sources and its own module file (tests/controlplane/go.v1.34.mod and .sum, ...), built
# with the controlplane_skew tag, which leaves out what only compiles against v1.37 (the
# oracle, the live oracle, the engine benchmark: kube-scheduler's internals).
CONTROLPLANE_OLD_MINORS := 1.34 1.35 1.36
CONTROLPLANE_OLD := $(foreach m,$(CONTROLPLANE_OLD_MINORS),$(BUILD)/controlplane-v$(m))
CONTROLPLANE_OLDEST_LEAF := $(BUILD)/controlplane-v$(firstword $(CONTROLPLANE_OLD_MINORS))
# Kubernetes' scheduling e2e suite (ginkgo), a test binary of the tests/conformance module.
CONFORMANCE_SUITE := $(BUILD)/conformance.test
CONFORMANCE_SRC := $(wildcard tests/conformance/*.go) tests/conformance/go.mod tests/conformance/go.sum Makefile
# The Kubernetes release the control plane is built from, stamped into its version so
# `kubectl version` and the components' compatibility checks see a real one.
# $(call k8s_version,MODFILE): the k8s.io/kubernetes version a module file of
# tests/controlplane pins; $(call version_ldflags,VERSION): the link flags stamping it.
k8s_version = $(shell awk '$$1=="k8s.io/kubernetes" {print $$2; exit}' tests/controlplane/$(1))
VERSION_PKGS := k8s.io/component-base/version k8s.io/client-go/pkg/version
version_ldflags = -s -w $(foreach p,$(VERSION_PKGS),-X $(p).gitVersion=$(1) -X $(p).gitMajor=1 -X $(p).gitMinor=$(word 2,$(subst ., ,$(1))) -X $(p).gitTreeState=clean)
K8S_VERSION := $(call k8s_version,go.mod)
LDFLAGS := $(call version_ldflags,$(K8S_VERSION))
# Flags that change how packages compile, the same for `go build` and `go vet`: vet then
# finds every k8s.io/kubernetes package the build compiled in the build cache instead of
# compiling the whole graph again (link flags like LDFLAGS do not matter to vet).
GO_FLAGS := -trimpath
# Every Go module of the repository; the docs' example extender is kept as the docs wrote it
# (vetted, not reformatted).
GO_MODULES := tests/controlplane tests/conformance tests/go-extender tests/quantity-oracle tools/image tools/lint
GO_FORMATTED := tests/controlplane tests/conformance tests/quantity-oracle tools/image tools/lint

.PHONY: feature-gates matrix all build controlplane controlplanes controlplane-oldest-leaf $(addprefix controlplane-v,$(CONTROLPLANE_OLD_MINORS)) conformance-suite conformance demo test differential lint fmt clean manifests bench bench-engine soak image test-images vet actionlint fuzz helm flake-hunt test-json test-upgrade

all: build

## controlplane: etcd + kube-apiserver (+ controller-manager, scheduler, kubelet simulator)
## from Go modules; rebuilt only when its sources change.
controlplane: $(CONTROLPLANE)

$(CONTROLPLANE): $(CONTROLPLANE_SRC)
	@mkdir -p $(BUILD)
	cd tests/controlplane && go build $(GO_FLAGS) -ldflags '$(LDFLAGS)' -o ../../$(CONTROLPLANE) .

## controlplanes: the control plane of every minor of the version window (v1.34-v1.37);
## controlplane-v1.34 (.build/controlplane-v1.34), -v1.35, -v1.36: one older minor, its
## oracle subcommands refused; controlplane-oldest-leaf: the oldest leaf minor's (v1.34).
controlplanes: $(CONTROLPLANE) $(CONTROLPLANE_OLD)

controlplane-oldest-leaf: $(CONTROLPLANE_OLDEST_LEAF)

$(addprefix controlplane-v,$(CONTROLPLANE_OLD_MINORS)): controlplane-v%: $(BUILD)/controlplane-v%

$(CONTROLPLANE_OLD): $(BUILD)/controlplane-v%: $(CONTROLPLANE_GO) tests/controlplane/go.v%.mod tests/controlplane/go.v%.sum
	@mkdir -p $(BUILD)
	cd tests/controlplane && go build $(GO_FLAGS) -modfile=go.v$*.mod -tags controlplane_skew,controlplane_v$(subst .,_,$*) -ldflags '$(call version_ldflags,$(call k8s_version,go.v$*.mod))' -o ../../$@ .

## conformance-suite: Kubernetes' scheduling e2e suite (k8s.io/kubernetes/test/e2e/scheduling,
## ginkgo) as one test binary, from the same modules and compile flags as the control plane
## (its packages come from the same Go build cache); `go vet` runs in `make vet`.
conformance-suite: $(CONFORMANCE_SUITE)

$(CONFORMANCE_SUITE): $(CONFORMANCE_SRC)
	@mkdir -p $(BUILD)
	cd tests/conformance && go test -c $(GO_FLAGS) -vet=off -ldflags '$(LDFLAGS)' -o ../../$(CONFORMANCE_SUITE) .

## conformance: Kubernetes' scheduling e2e suite, every spec, against a cluster whose default
## scheduler is kube-scheduler, then one whose default scheduler is mcsched-agent (profile
## default-scheduler, kube-scheduler off); same nodes (simulated, and a real node where this
## machine can run one: scripts/setup.sh, the agent then installed there by `kubectl mcsched
## install` from the image of its debug build), same focus. Writes
## tests/conformance/results.md and fails when a spec passes with kube-scheduler only.
## `make test` runs the [Conformance] specs alone, on simulated nodes.
conformance: $(CONTROLPLANE) $(CONFORMANCE_SUITE)
	bash scripts/setup.sh
	bash scripts/image.sh test
	bash scripts/image.sh conformance
	cargo build -p mcsched-agent --bin mcsched-agent
	cargo build -p kubectl-mcsched --bin kubectl-mcsched
	MCSCHED_IMAGE_BUILD=debug bash scripts/image.sh agent
	MCSCHED_CONFORMANCE=full cargo test -p mcsched-e2e --test conformance -- --nocapture

## build: the control plane and every Rust binary.
build: $(CONTROLPLANE)
	cargo build --workspace --bins

## image: the agent image without a container engine or registry: the release build of
## mcsched-agent with its shared libraries, CA certificates and a nonroot user, written to
## .build/image/mcsched-agent.tar (docker load / ctr images import / kind load
## image-archive) and .build/image/oci (OCI layout). IMAGE=REF tags it otherwise than
## `scripts/image-ref.sh` (what `kubectl mcsched install` deploys by default).
image:
	bash scripts/image.sh agent

## test-images: the pause and hello images the real-node tests import into containerd.
test-images:
	bash scripts/image.sh test

## demo: a local host cluster and two leaves, the agent (in a container on a real node where
## this machine can run one: root and scripts/setup.sh's packages), pods bound by mcsched;
## everything stopped after. MCSCHED_DEMO_AGENT=host runs the agent binary on the host.
demo: build
	bash scripts/setup.sh
	bash scripts/demo.sh

## manifests: manifests/install.yaml, the default install as `install --dry-run=client -o yaml`
## renders it (a test fails when the committed file differs).
manifests:
	cargo build -p kubectl-mcsched
	$(TARGET)/debug/kubectl-mcsched install --dry-run=client -o yaml > manifests/install.yaml

## test: set-up (scripts/setup.sh), formatting, lints, go vet, unit tests and end-to-end
## tests, each stage timed.
test:
	bash scripts/test.sh

## bench: scheduler_perf's workloads with kube-scheduler, mcsched-agent (release build) and a
## bind-only client, each on a fresh control plane; writes bench/results.md and
## bench/results.png. BENCH_FLAGS passes sizes, e.g. BENCH_FLAGS='--scale 0.2'.
bench: $(CONTROLPLANE)
	cargo build --release -p mcsched-agent -p mcsched-bench
	$(TARGET)/release/mcsched-bench --out bench --agent $(TARGET)/release/mcsched-agent $(BENCH_FLAGS)

## bench-engine: one pod at 5000 nodes and 10000 pods, mcsched's engine (criterion) against
## kube-scheduler's SchedulePod on the same cluster in the same run; writes bench/engine.md.
bench-engine: $(CONTROLPLANE)
	bash scripts/bench-engine.sh

## differential: differential.rs and differential_live.rs at their full sizes (`make test`
## runs about half of each): 2000 plugin-by-plugin cases, 500 black-box cases, 150 volume
## cases, 200 live-cycle cases.
differential: build
	MCSCHED_DIFF_PLUGIN_CASES=1000 MCSCHED_DIFF_CASES=500 MCSCHED_DIFF_VOLUME_CASES=150 \
		MCSCHED_DIFF_LIVE_CASES=100 \
		cargo test -p mcsched-e2e --test differential --test differential_live -- --nocapture

## soak: the long tests kept out of `make test` (the leaf Ready across two expiries of
## 10-minute tokens: 21 minutes; the fault-injection tests with 10000 pods).
soak: build
	cargo test -p mcsched-e2e --test leaf_ownership -- --ignored --nocapture
	MCSCHED_FAULT_PODS=10000 cargo test -p mcsched-e2e --test faults -- --nocapture --test-threads 1

## flake-hunt: each end-to-end test binary FLAKE_RUNS times (3) beside a CPU load of FLAKE_LOAD
## busy processes (one per core); passes and failures per binary in .build/flake-hunt.md,
## failed runs' logs in .build/flake-hunt/. FLAKE_TESTS picks binaries, FLAKE_ENV adds
## environment (scripts/flake-hunt.sh).
flake-hunt: build
	bash scripts/flake-hunt.sh

## test-json: the end-to-end tests that talk to the API server the most (faults,
## multicluster, differential) with every agent in JSON instead of protobuf
## (MCSCHED_KUBE_API_CONTENT_TYPE), once each, without added load; .build/test-json.md.
test-json: build
	FLAKE_RUNS=1 FLAKE_LOAD=0 FLAKE_TESTS="faults multicluster differential" FLAKE_OUT=.build/test-json FLAKE_TITLE="make test-json" \
		FLAKE_ENV=MCSCHED_KUBE_API_CONTENT_TYPE=application/json bash scripts/flake-hunt.sh

## test-upgrade: mcsched's own upgrade (tests/tests/upgrade.rs): the release at git
## revision UPGRADE_FROM (scripts/upgrade-from.sh builds it in .build/upgrade/REV, its own
## target, and packs its agent image) installed with 2 replicas on a real node, a leaf
## joined, upgraded to this build and rolled back under load, by `kubectl mcsched install`
## and by the Helm chart. Needs what real_node.rs needs (root, scripts/setup.sh) and the
## repository's history.
UPGRADE_FROM ?= 8886894
test-upgrade: $(CONTROLPLANE) helm
	cargo build --workspace --bins
	MCSCHED_IMAGE_BUILD=debug bash scripts/image.sh agent
	bash scripts/image.sh test
	MCSCHED_UPGRADE_FROM="$$(bash scripts/upgrade-from.sh $(UPGRADE_FROM))" \
		cargo test -p mcsched-e2e -p mcsched-bench --test upgrade -- --ignored --test-threads=1 --nocapture

## fuzz: the property tests at many cases (`cargo test` runs a few of each): the protobuf
## decoder's (mcsched-wire's `fuzz_` tests: arbitrary bytes and schema-made messages never
## panic, decode in O(n log n) work counted, maps keep their last entry, the API server's
## metadata bounds hold) and the policy overrides' (mcsched-shared's: arbitrary jsonPatch
## operations and typed overrides never panic, never make a copy past 1.5 MiB, and never
## widen what it refers to). FUZZ_CASES sets the cases of each (proptest's PROPTEST_CASES).
FUZZ_CASES ?= 20000
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) cargo test -p mcsched-wire --release --lib fuzz_
	PROPTEST_CASES=$(FUZZ_CASES) cargo test -p mcsched-shared --release --lib fuzz_

## vet: gofmt and go vet on the Go modules, with the build's compile flags (GO_FLAGS).
vet:
	@unformatted=$$(gofmt -l $(GO_FORMATTED)); if [ -n "$$unformatted" ]; then echo "gofmt -l: $$unformatted"; exit 1; fi
	@for m in $(GO_MODULES); do (cd $$m && go vet $(GO_FLAGS) ./...) || exit 1; done

## helm: Helm, built from its Go module (helm.sh/helm/v4 at HELM_VERSION, its own go.mod
## and go.sum, checked against the checksum database) into .build/helm, for the chart's
## test (tests/tests/helm.rs).
HELM_VERSION := v4.3.1
helm: $(BUILD)/helm

$(BUILD)/helm: Makefile
	@mkdir -p $(BUILD)
	GOBIN=$(abspath $(BUILD)) go install $(GO_FLAGS) -ldflags '-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)' helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

## actionlint: the GitHub workflows, with actionlint pinned in tools/lint/go.mod.
actionlint:
	@mkdir -p $(BUILD)
	cd tools/lint && go build $(GO_FLAGS) -o ../../$(BUILD)/actionlint github.com/rhysd/actionlint/cmd/actionlint
	$(BUILD)/actionlint -shellcheck= -pyflakes= -no-color

lint: vet actionlint
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all
	gofmt -w $(GO_FORMATTED)

clean:
	rm -rf $(BUILD)
	cargo clean

## feature-gates: the table of kube-scheduler's feature gates the agent's --feature-gates is
## checked against (shared/src/config/feature_gates.tsv), from the control plane's release.
feature-gates:
	cd tests/controlplane && go run $(GO_FLAGS) ./cmd/featuregates > ../../shared/src/config/feature_gates.tsv

## matrix: every host x leaf pair of the version window (hosts v1.35-v1.37, leaves
## v1.34-v1.37), each on control planes of its own minor: a plain pod in the leaf, a copy with
## a field the leaf lacks, a gang where the host serves PodGroups; prints the table that
## docs/kubernetes-versions.md keeps. `make test` runs the newest host with the oldest leaf.
matrix: controlplanes
	cargo build --workspace --bins
	MCSCHED_MATRIX=1 cargo test -p mcsched-e2e --test version_skew every_pair_of_the_window -- --nocapture
