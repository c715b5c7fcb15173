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

# criterion's estimate `what` (mean or median) of a case as "ms [low, high]".
estimate() {
  local file=target/criterion/$1/new/estimates.json what=$2
  local part
  part=$(grep -o "\"$what\":{\"confidence_interval\":{[^}]*},\"point_estimate\":[0-9.e+-]*" "$file")
  local lo hi pt
  lo=$(grep -o '"lower_bound":[0-9.e+-]*' <<<"$part" | cut -d: -f2)
  hi=$(grep -o '"upper_bound":[0-9.e+-]*' <<<"$part" | cut -d: -f2)
  pt=$(grep -o '"point_estimate":[0-9.e+-]*' <<<"$part" | cut -d: -f2)
  awk -v p="$pt" -v l="$lo" -v h="$hi" 'BEGIN { printf "%.3f [%.3f, %.3f]", p / 1e6, l / 1e6, h / 1e6 }'
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
  mean_ns=$(grep -o '"mean":{"confidence_interval":{[^}]*},"point_estimate":[0-9.e+-]*' \
    "target/criterion/$c/new/estimates.json" | grep -o '"point_estimate":[0-9.e+-]*' | cut -d: -f2)
  read -r klo khi <<<"$kube_range"
  awk -v c="$c" -v f="$ours" -v ours="$(estimate "$c" mean)" -v k="$kube_ns" -v lo="$klo" -v hi="$khi" -v m="$mean_ns" \
    'BEGIN { printf "| %s | %s | %s | %.3f [%.3f, %.3f] | %.1f |\n", c, f, ours, k / 1e6, lo / 1e6, hi / 1e6, k / m }' >>"$OUT"
done

echo
cat "$OUT"
