#!/usr/bin/env bash
# The local demo: a host control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler and simulated kubelets), mcsched-agent beside kube-scheduler, pods for
# each; shows who bound what, then stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

CONTROLPLANE=${MCSCHED_CONTROLPLANE:-.build/controlplane}
AGENT=${MCSCHED_AGENT:-target/debug/mcsched-agent}
WORK=$(mktemp -d -t mcsched-demo-XXXXXX)
KUBECONFIG_FILE="$WORK/host.kubeconfig"
PIDS=()

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
k() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

say "starting the host cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, simulated kubelets)"
"$CONTROLPLANE" --name host --data-dir "$WORK/host" --kubeconfig "$KUBECONFIG_FILE" \
  --with-controller-manager --with-scheduler --simulate-kubelets >"$WORK/host.out" 2>"$WORK/host.log" &
PIDS+=($!)
for _ in $(seq 1 600); do
  grep -q '^READY' "$WORK/host.out" 2>/dev/null && break
  kill -0 "${PIDS[0]}" 2>/dev/null || { tail -20 "$WORK/host.log"; exit 1; }
  sleep 0.2
done
grep '^READY' "$WORK/host.out" || { echo "host control plane not ready"; tail -20 "$WORK/host.log"; exit 1; }
k version

say "three nodes: two with 4 CPUs, one with 1"
for spec in node-a:4 node-b:4 node-c:1; do
  name=${spec%%:*} cpu=${spec##*:}
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels: {kubernetes.io/hostname: $name}
status:
  capacity: {cpu: "$cpu", memory: 8Gi, pods: "110"}
  allocatable: {cpu: "$cpu", memory: 8Gi, pods: "110"}
YAML
done
k wait --for=condition=Ready node --all --timeout=60s >/dev/null
k get nodes

say "starting mcsched-agent --scheduler-name mcsched"
"$AGENT" --kubeconfig "$KUBECONFIG_FILE" --scheduler-name mcsched 2>"$WORK/agent.log" &
PIDS+=($!)

say "four pods for mcsched (2 CPUs each), one for the default scheduler"
for i in 1 2 3 4; do
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: mc-$i, namespace: default}
spec:
  schedulerName: mcsched
  containers:
  - name: app
    image: registry.k8s.io/pause:3.10
    resources: {requests: {cpu: "2", memory: 128Mi}}
YAML
done
k run plain --image=registry.k8s.io/pause:3.10 >/dev/null

for _ in $(seq 1 150); do
  pending=$(k get pods --no-headers --field-selector spec.nodeName= 2>/dev/null | wc -l)
  [ "$pending" -eq 0 ] && break
  sleep 0.2
done

say "pods, their scheduler and their node"
k get pods -o custom-columns='NAME:.metadata.name,SCHEDULER:.spec.schedulerName,NODE:.spec.nodeName,STATUS:.status.phase,IP:.status.podIP'

say "Scheduled events, by reporting scheduler"
k get events.events.k8s.io --field-selector reason=Scheduled \
  -o custom-columns='POD:.regarding.name,REPORTED BY:.reportingController,NOTE:.note'

unbound=$(k get pods --no-headers --field-selector spec.nodeName= 2>/dev/null | wc -l)
by_mcsched=$(k get events.events.k8s.io --field-selector reason=Scheduled -o jsonpath='{range .items[?(@.reportingController=="mcsched")]}{.regarding.name}{"\n"}{end}' | grep -c '^mc-' || true)
if [ "$unbound" -ne 0 ] || [ "$by_mcsched" -ne 4 ]; then
  echo "demo failed: $unbound pods unbound, $by_mcsched bound by mcsched"
  tail -20 "$WORK/agent.log"
  exit 1
fi

say "done: 4 pods bound by mcsched, 1 by default-scheduler; stopping everything"
