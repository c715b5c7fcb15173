#!/usr/bin/env bash
# `make flake-hunt`: each end-to-end test binary run FLAKE_RUNS times, one at a time, beside
# a CPU load of FLAKE_LOAD busy processes (CI runs two binaries at once beside niced
# clippy, and the suite's flakes were tests racing their own environment under such load).
# Writes the count of passes and failures per binary to .build/flake-hunt.md and keeps
# each failed run's log in .build/flake-hunt/; exits 1 when any run failed.
#
#   FLAKE_RUNS   runs per binary (3)
#   FLAKE_LOAD   busy processes beside each run (the number of cores)
#   FLAKE_TESTS  the binaries, space-separated (every tests/tests/*.rs but conformance
#                and real_node, which have targets of their own)
#   FLAKE_ENV    extra environment for each run, e.g. FLAKE_ENV='MCSCHED_KUBE_API_CONTENT_TYPE=application/json'
#   FLAKE_TITLE  the report's title (make flake-hunt)
#   FLAKE_OUT    where the report (FLAKE_OUT.md) and failed logs (FLAKE_OUT/) go (.build/flake-hunt)
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${FLAKE_RUNS:-3}
load=${FLAKE_LOAD:-$(nproc)}
if [[ -n ${FLAKE_TESTS:-} ]]; then
  read -r -a tests <<<"$FLAKE_TESTS"
else
  tests=()
  for f in tests/tests/*.rs; do
    n=$(basename "$f" .rs)
    [[ $n == conformance || $n == real_node ]] || tests+=("$n")
  done
fi
read -r -a extra_env <<<"${FLAKE_ENV:-}"

out=${FLAKE_OUT:-.build/flake-hunt}
rm -rf "$out"
mkdir -p "$out"
# Both packages, as scripts/test.sh builds them: the same features, nothing rebuilt.
cargo build --workspace --bins
# The agent image and the test images, as `make test` builds them (install, helm and the
# demo's tests load them).
MCSCHED_IMAGE_BUILD=debug make --no-print-directory image test-images
cargo test -p mcsched-e2e -p mcsched-bench --tests --no-run 2>&1 | tail -1

busy=()
stop_load() { ((${#busy[@]} == 0)) || kill "${busy[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for ((i = 0; i < load; i++)); do
  bash -c 'while :; do :; done' &
  busy+=($!)
done

report=$out.md
{
  echo "# ${FLAKE_TITLE:-make flake-hunt}: $runs runs per binary beside $load busy processes ($(nproc) cores)"
  echo
  echo "commit $(git rev-parse --short HEAD)${FLAKE_ENV:+, with $FLAKE_ENV}, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| binary | passed | failed | seconds per run |"
  echo "|---|---|---|---|"
} >"$report"
total_failed=0
for t in "${tests[@]}"; do
  passed=0 failed=0 secs=()
  for ((r = 1; r <= runs; r++)); do
    log="$out/$t-$r.log"
    start=$(date +%s)
    if env "${extra_env[@]}" RUST_BACKTRACE=0 cargo test -p mcsched-e2e -p mcsched-bench --test "$t" >"$log" 2>&1; then
      passed=$((passed + 1))
      rm -f "$log"
    else
      failed=$((failed + 1))
    fi
    secs+=($(($(date +%s) - start)))
    echo "flake-hunt: $t run $r: $([[ -f $log ]] && echo "FAILED ($log)" || echo ok) in ${secs[-1]}s"
  done
  total_failed=$((total_failed + failed))
  echo "| $t | $passed | $failed | ${secs[*]} |" >>"$report"
done
cat "$report"
((total_failed == 0))
