#!/usr/bin/env bash
# The whole test suite, stage by stage, each stage timed; the first failing stage stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -a SUMMARY=()
SUITE_START=$(date +%s)

stage() {
  local name=$1
  shift
  local start=$(date +%s)
  echo
  echo "==> ${name}"
  if ! "$@"; then
    echo "<== ${name}: FAILED after $(($(date +%s) - start))s"
    exit 1
  fi
  local took=$(($(date +%s) - start))
  SUMMARY+=("$(printf '%-28s %5ss' "${name}" "${took}")")
  echo "<== ${name}: ${took}s"
}

# Every end-to-end test binary but real_node's, which has a stage of its own.
e2e_except_real_node() {
  local args=(--lib)
  for f in tests/tests/*.rs; do
    local name
    name=$(basename "$f" .rs)
    [[ "$name" == real_node ]] || args+=(--test "$name")
  done
  cargo test -p mcsched-e2e "${args[@]}"
}

# What a fresh machine lacks (rustfmt, clippy, the real node's Debian packages when root
# and apt allow), installed only when missing: the README's `make test` needs nothing run
# before it.
stage "set-up (scripts/setup.sh)" bash scripts/setup.sh
stage "cargo fmt --check" cargo fmt --all -- --check
stage "build controlplane (Go)" make --no-print-directory controlplane
# gofmt and go vet, with the build's compile flags: vet reuses what the build compiled.
stage "go vet" make --no-print-directory vet
stage "actionlint (workflows)" make --no-print-directory actionlint
stage "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
stage "cargo build" cargo build --workspace --bins
stage "unit tests" cargo test --workspace --exclude mcsched-e2e --exclude mcsched-bench
# The agent image (release build) and the test images, then the tests: control planes
# with simulated kubelets, then the real node (kubelet + containerd + runc + CNI as root;
# scripts/setup.sh installs the packages), where the agent runs from that image.
stage "image (make image)" make --no-print-directory image
stage "test images" make --no-print-directory test-images
stage "end-to-end tests" e2e_except_real_node
stage "real-node tests" cargo test -p mcsched-e2e --test real_node
# The README's first command: the demo, its agent in a container on a real node.
stage "demo (make demo)" bash scripts/demo.sh
stage "bench (quick variant)" cargo test -p mcsched-bench
# kube-scheduler's side of `make bench-engine`, one run per case: its cluster still builds
# and every case still places its pod.
stage "engine bench, kube side" .build/controlplane engine-bench --count 1

echo
echo "stage durations:"
printf '  %s\n' "${SUMMARY[@]}"
echo "  $(printf '%-28s %5ss' total $(($(date +%s) - SUITE_START)))"
