#!/usr/bin/env bash
# The engine benchmark against kube-scheduler's, in one run on this machine: one pod at
# 5000 nodes and 10000 pods, every node scored (agent/benches/schedule_one.rs with
# criterion, `controlplane engine-bench` with Go's testing.Benchmark on the same
# cluster). Writes bench/engine.md; fails when the two engines find different numbers of
# feasible nodes, which would mean they did not do the same work.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-bench/engine.md}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

cargo bench -p mcsched-agent --bench schedule_one 2>&1 | tee "$LOG"
.build/controlplane engine-bench | tee -a "$LOG"

CASES=(
  schedule_one_5000_nodes_10000_pods
  schedule_one_anti_affinity_5000_nodes_10000_pods
  schedule_one_two_spread_constraints_5000_nodes_10000_pods
)

# criterion's mean of a case and its 95 % interval, in ns: "mean low high".
mean_ns() {
  local part
  part=$(grep -o '"mean":{"confidence_interval":{[^}]*},"point_estimate":[0-9.e+-]*' \
    "${CARGO_TARGET_DIR:-target}/criterion/$1/new/estimates.json")
  local key
  for key in point_estimate lower_bound upper_bound; do
    grep -o "\"$key\":[0-9.e+-]*" <<<"$part" | cut -d: -f2
  done | paste -sd' '
}

{
  echo "# Engine benchmark: mcsched-agent against kube-scheduler"
  echo
  echo "\`make bench-engine\` on $(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')."
  echo "One pod scheduled against 5000 nodes holding 10000 pods, default plugins, every node"
  echo "scored: mcsched's \`schedule_pod\` (criterion's mean, 95 % interval) and kube-scheduler"
  echo "$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' tests/controlplane/go.mod)'s \`SchedulePod\` (median of five one-second runs, [fastest, slowest])."
  echo
  echo "| case | feasible nodes | mcsched ms | kube-scheduler ms | kube-scheduler ÷ mcsched |"
  echo "|---|---|---|---|---|"
} >"$OUT"

for c in "${CASES[@]}"; do
  ours=$(grep -m1 "^$c: [0-9]* feasible nodes" "$LOG" | awk '{print $2}')
  line=$(grep -m1 "^$c	" "$LOG")
  theirs=$(cut -f2 <<<"$line" | awk '{print $1}')
  if [[ -z "$ours" || -z "$theirs" ]]; then
    echo "bench-engine: $c: no result from one of the engines" >&2
    exit 1
  fi
  if [[ "$ours" != "$theirs" ]]; then
    echo "bench-engine: $c: mcsched found $ours feasible nodes, kube-scheduler $theirs" >&2
    exit 1
  fi
  kube_ns=$(cut -f4 <<<"$line" | awk '{print $1}')
  kube_range=$(cut -f5 <<<"$line" | tr -d '[],')
  read -r klo khi <<<"$kube_range"
  read -r mean lo hi <<<"$(mean_ns "$c")"
  awk -v c="$c" -v f="$ours" -v m="$mean" -v l="$lo" -v h="$hi" -v k="$kube_ns" -v kl="$klo" -v kh="$khi" \
    'BEGIN { printf "| %s | %s | %.3f [%.3f, %.3f] | %.3f [%.3f, %.3f] | %.1f |\n", c, f, m / 1e6, l / 1e6, h / 1e6, k / 1e6, kl / 1e6, kh / 1e6, k / m }' >>"$OUT"
done

echo
cat "$OUT"
