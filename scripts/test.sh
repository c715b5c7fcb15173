#!/usr/bin/env bash
# The whole test suite, stage by stage, each stage timed; the first failing stage stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -a SUMMARY=()
SUITE_START=$(date +%s)

# Work that no stage waits for at once, started niced (it takes the cores only when the
# stages leave them idle: the end-to-end tests mostly wait on control planes) and awaited
# later as a stage of its own; its output is shown when it fails.
declare -A BG_PID=() BG_LOG=() BG_START=()
background() {
  local name=$1
  shift
  BG_LOG[$name]=$(mktemp)
  BG_START[$name]=$(date +%s)
  echo "--> ${name}: started in the background"
  nice -n "${BG_NICE:-19}" "$@" >"${BG_LOG[$name]}" 2>&1 &
  BG_PID[$name]=$!
}
await() {
  local name=$1 rc=0
  wait "${BG_PID[$name]}" || rc=$?
  tail -5 "${BG_LOG[$name]}"
  echo "    (${name} ran $(($(date +%s) - BG_START[$name]))s in the background)"
  ((rc == 0)) || { cat "${BG_LOG[$name]}"; return 1; }
}

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

# Every end-to-end test binary but real_node's (which has a stage of its own) and the bench's quick variant, built once
# and run E2E_JOBS at a time, longest first: they spend most of their time waiting for
# control planes, so two share this machine's cores well. Each binary's output is kept
# apart and shown when it fails; every binary runs even after one failed.
E2E_JOBS=${E2E_JOBS:-2}
E2E_FIRST=(differential faults multicluster bench_quick gang_leaves leaf_ownership leaf_tokens go_extender leaf_safety differential_live placement_policies security join big_objects network_cut)
e2e_except_real_node() {
  local logs
  logs=$(mktemp -d)
  declare -A exe=()
  local name path prefix
  # The end-to-end tests, and the quick variant of `make bench` beside them (its control
  # planes wait as much as theirs do); the bench's binaries are named bench_*. One cargo
  # invocation for both: cargo unifies dependency features over the packages it is given,
  # and either package alone resolves some differently from `cargo build --workspace
  # --bins`, which built again tokio, hyper, kube and everything above them; together
  # they resolve as it did, and only the tests compile here.
  if ! cargo test -p mcsched-e2e -p mcsched-bench --lib --tests --no-run >"$logs/build.log" 2>&1; then
    cat "$logs/build.log"
    return 1
  fi
  grep -v '^  Executable' "$logs/build.log" | tail -2
  while read -r name path; do
    # The libraries' tests and tests/*.rs; the real node's binary has none worth a run.
    [[ $name == src/bin/* ]] && continue
    prefix=""
    if [[ $name == src/* ]]; then
      [[ ${path##*/} == mcsched_bench-* ]] && prefix=bench_
    elif [[ -f bench/tests/$name.rs ]]; then
      prefix=bench_
    fi
    exe[$prefix${name//\//_}]=$path
  done < <(sed -n 's#^  Executable \(unittests \)\{0,1\}\(tests/\)\{0,1\}\([^ ]*\)\.rs (\(.*\))$#\3 \4#p' "$logs/build.log")
  [[ -n ${exe[src_lib]:-} && -n ${exe[faults]:-} && -n ${exe[bench_quick]:-} ]] || { echo "no test binaries found"; cat "$logs/build.log"; return 1; }
  # Kubernetes' scheduling e2e suite, quick subset (tests/conformance.rs): two clusters
  # that mostly wait (the specs' fixed waits), for minutes; beside the pool rather than in
  # one of its slots, awaited after it.
  [[ -n ${exe[conformance]:-} ]] || { echo "no conformance test binary"; return 1; }
  local conformance_bin=${exe[conformance]}
  [[ $conformance_bin == /* ]] || conformance_bin=$PWD/$conformance_bin
  # Not niced: its API servers answer the specs' timed waits.
  BG_NICE=0 background "conformance (quick)" bash -c 'cd tests && RUST_BACKTRACE=0 exec "$1"' _ "$conformance_bin"
  local order=() n
  for n in "${E2E_FIRST[@]}"; do [[ -n ${exe[$n]:-} ]] && order+=("$n"); done
  for n in $(printf '%s\n' "${!exe[@]}" | sort); do
    [[ $n == real_node || $n == conformance || " ${order[*]} " == *" $n "* ]] || order+=("$n")
  done
  local -A pid_of=() started=()
  local failed=() running=0
  finish() { # waits for any one binary and reports it
    local done_pid rc=0 m
    # Only the pool's binaries: jobs started by `background` are awaited on their own.
    wait -n -p done_pid "${pid_of[@]}" || rc=$?
    for m in "${!pid_of[@]}"; do
      [[ ${pid_of[$m]} == "$done_pid" ]] || continue
      unset "pid_of[$m]"
      if ((rc == 0)); then
        echo "    ${m}: ok ($(($(date +%s) - started[$m]))s; $(grep -h '^test result' "$logs/$m.log" | tail -1))"
      else
        echo "    ${m}: FAILED after $(($(date +%s) - started[$m]))s:"
        # What failed and why first (a tail alone can be all backtrace), then the end.
        grep -h -B2 -A12 'panicked at\|^Error: ' "$logs/$m.log" | grep -v '^ *[0-9]*: \|^ *at ' | head -120 | sed 's/^/      /'
        echo "      ..."
        sed 's/^/      /' "$logs/$m.log" | tail -60
        failed+=("$m")
      fi
    done
    running=$((running - 1))
  }
  for n in "${order[@]}"; do
    ((running < E2E_JOBS)) || finish
    started[$n]=$(date +%s)
    # From the package's directory, as cargo runs them; cargo names them from the root.
    local bin=${exe[$n]}
    [[ $bin == /* ]] || bin=$PWD/$bin
    local dir=tests
    [[ $n == bench_* ]] && dir=bench
    # Without backtraces: a failure's message is what a reader of the log needs.
    (cd "$dir" && RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 exec "$bin") >"$logs/$n.log" 2>&1 &
    pid_of[$n]=$!
    running=$((running + 1))
  done
  while ((running > 0)); do finish; done
  ((${#failed[@]} == 0)) || { echo "failed: ${failed[*]} (logs in $logs)"; return 1; }
}

stage "set-up (scripts/setup.sh)" bash scripts/setup.sh
stage "cargo fmt --check" cargo fmt --all -- --check
# The oldest leaf minor's control plane too: version_skew.rs runs the newest host with it.
stage "build controlplane (Go)" make --no-print-directory controlplane controlplane-oldest-leaf conformance-suite
# kube's shared DRA allocator cases, generated from their Go module for the unit tests
# (dra/tests/upstream_cases.rs), awaited before them.
background "dra upstream cases" bash dra/tests/upstream/generate.sh
# Helm from its Go module, for helm.rs (which builds it itself when missing: on a fresh
# machine that took minutes inside the end-to-end stage, which it then outlasted).
background "helm (make helm)" make --no-print-directory helm
# gofmt and go vet, with the build's compile flags: vet reuses what the build compiled.
# Nothing depends on it: it runs beside the next stages and is awaited before the real node.
background "go vet" make --no-print-directory vet
stage "actionlint (workflows)" make --no-print-directory actionlint
# Clippy, in a target directory of its own (cargo locks the one it builds in, and the
# stages below would wait on it), niced beside the build and the tests: most of its CPU is
# what the end-to-end tests leave idle (a quarter of two cores, measured with vmstat over
# that stage). Awaited, its findings shown, with go vet.
background "cargo clippy -D warnings" env CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/clippy" \
  cargo clippy --workspace --all-targets -- -D warnings
# The dependencies' licenses, bans and sources (deny.toml), niced beside the rest as
# clippy is: on a fresh machine most of it is building cargo-deny itself.
background "cargo deny (licenses, bans, sources)" bash scripts/cargo-deny.sh
stage "cargo build" cargo build --workspace --bins
stage "dra upstream cases (awaited)" await "dra upstream cases"
stage "unit tests" cargo test --workspace --exclude mcsched-e2e --exclude mcsched-bench
# The agent image (release build) and the test images, then the tests: control planes
# with simulated kubelets, then the real node (kubelet + containerd + runc + CNI as root;
# scripts/setup.sh installs the packages), where the agent runs from that image. (Built
# beside the end-to-end tests instead, the image's build found few idle cores: it ran
# after them, and slowed them.)
# The image packs the debug build the stages above made (a release build of the
# workspace would add minutes of a 2-core machine to check the same packaging); the demo
# below uses it too. `make image` alone packs the release build.
export MCSCHED_IMAGE_BUILD=debug
stage "image (make image)" make --no-print-directory image
stage "test images" make --no-print-directory test-images
stage "helm (awaited)" await "helm (make helm)"
stage "end-to-end tests, quick bench" e2e_except_real_node
stage "conformance quick (awaited)" await "conformance (quick)"
stage "go vet (awaited)" await "go vet"
stage "cargo clippy -D warnings (awaited)" await "cargo clippy -D warnings"
stage "cargo deny (awaited)" await "cargo deny (licenses, bans, sources)"
# Both packages named, as the end-to-end build did: the same features, nothing rebuilt.
stage "real-node tests" cargo test -p mcsched-e2e -p mcsched-bench --test real_node
# The README's first command: the demo, its agent in a container on a real node.
stage "demo (make demo)" bash scripts/demo.sh
# kube-scheduler's side of `make bench-engine`, one run per case: its cluster still builds
# and every case still places its pod.
stage "engine bench, kube side" .build/controlplane engine-bench --count 1

echo
echo "stage durations:"
printf '  %s\n' "${SUMMARY[@]}"
echo "  $(printf '%-28s %5ss' total $(($(date +%s) - SUITE_START)))"
