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

go_vet() {
  (cd tests/controlplane && go vet ./...)
  # Seed 002's extender, kept as the seed wrote it (the extender_seed002 test builds it).
  (cd tests/extender-seed002 && go vet ./...)
}

stage "cargo fmt --check" cargo fmt --all -- --check
stage "build controlplane (Go)" make --no-print-directory controlplane
stage "go vet" go_vet
stage "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
stage "cargo build" cargo build --workspace --bins
stage "unit tests" cargo test --workspace --exclude mcsched-e2e --exclude mcsched-bench
stage "end-to-end tests" cargo test -p mcsched-e2e
stage "bench (quick variant)" cargo test -p mcsched-bench

echo
echo "stage durations:"
printf '  %s\n' "${SUMMARY[@]}"
echo "  $(printf '%-28s %5ss' total $(($(date +%s) - SUITE_START)))"
