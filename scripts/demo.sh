#!/usr/bin/env bash
# The local demo: a host cluster and two leaf clusters (each: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, simulated kubelets), both leaves joined with
# `kubectl mcsched join cluster`, mcsched-agent beside kube-scheduler in the host, pods for
# each scheduler and Kosmos's MySQL example; shows where everything runs, in every
# cluster, and why; then stops everything it started.
#
# `kubectl mcsched install` installs the agent for real. Where this machine can run a real
# node (root, containerd, runc, the CNI plugins: `scripts/setup.sh` installs them), the
# host also gets one (a real kubelet on containerd, `mcsched-real-node`) and the agent runs
# there as a container of the image `make image` builds, as in any cluster. Elsewhere (or
# with MCSCHED_DEMO_AGENT=host) the simulated kubelet gives the agent's pod this machine's
# address and the agent binary runs beside the control plane, on that address, as the
# installed ServiceAccount and with the installed configuration. Either way, as the leader
# the agent points Service mcsched-api at itself and `kubectl mcsched explain` reaches it
# through the API server as the APIService v1alpha1.mcsched.io.
set -euo pipefail
cd "$(dirname "$0")/.."

CONTROLPLANE=${MCSCHED_CONTROLPLANE:-.build/controlplane}
# The debug builds, in $CARGO_TARGET_DIR when set (as cargo put them).
BIN=${CARGO_TARGET_DIR:-target}/debug
AGENT=${MCSCHED_AGENT:-$BIN/mcsched-agent}
CLI=${MCSCHED_CLI:-$BIN/kubectl-mcsched}
REAL_NODE=${MCSCHED_REAL_NODE:-$BIN/mcsched-real-node}
# container: the agent in a container on a real node; host: its binary on this machine;
# auto: container where this machine can run a real node.
MODE=${MCSCHED_DEMO_AGENT:-auto}
WORK=$(mktemp -d -t mcsched-demo-XXXXXX)
PIDS=()
NODE_PID=

cleanup() {
  local pid
  # The real node first, while its API server still answers: it removes its pods and
  # everything it made on this machine (bridge, nftables table, cgroups).
  if [ -n "$NODE_PID" ]; then
    kill -TERM "$NODE_PID" 2>/dev/null || true
    for _ in $(seq 1 600); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$NODE_PID" 2>/dev/null || true
    wait "$NODE_PID" 2>/dev/null || true
  fi
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
kc() { local c=$1; shift; kubectl --kubeconfig "$WORK/$c.kubeconfig" "$@"; }
k() { kc host "$@"; }
mcsched() { "$CLI" --kubeconfig "$WORK/host.kubeconfig" "$@"; }

# A non-loopback address of this machine: the API server refuses loopback addresses in
# EndpointSlices, and dials the agent there.
ADDRESS=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | grep -v '^127\.' | head -1 || true)
if [ -z "$ADDRESS" ]; then
  echo "this machine has no IPv4 address but loopback (hostname -I): the API server could not reach the agent"
  exit 1
fi

case "$MODE" in
  auto)
    # On a fresh machine the images are missing: they are this repository's to build, not
    # a reason to leave the real node out, so they are built when nothing else is missing.
    if ! missing=$("$REAL_NODE" --check) && ! grep -qv 'build it with `make ' <<<"$missing"; then
      make --no-print-directory image test-images
    fi
    if missing=$("$REAL_NODE" --check); then
      MODE=container
    else
      MODE=host
      echo "no real node here, so the agent binary runs on this machine instead of in a container; missing:"
      printf '  %s\n' "$missing"
      echo "(scripts/setup.sh, as root, installs the packages)"
    fi ;;
  container)
    if ! missing=$("$REAL_NODE" --check); then
      echo "MCSCHED_DEMO_AGENT=container, but this machine cannot run a real node; missing:"
      printf '  %s\n' "$missing"
      exit 1
    fi ;;
  host) ;;
  *) echo "MCSCHED_DEMO_AGENT=$MODE: expected container, host or auto"; exit 1 ;;
esac
if [ "$MODE" = container ]; then
  # The agent image (the release build; `make test` packs its debug build) and the pause
  # and hello images, built here: nothing
  # is pulled.
  make --no-print-directory image test-images
  APP_IMAGE=mcsched.test/hello:1
else
  APP_IMAGE=registry.k8s.io/pause:3.10
fi

# Every API server on that address: the agent, in a container or not, dials the leaves'.
start_cluster() {
  local extra=()
  if [ "$1" = host ]; then
    if [ "$MODE" = container ]; then
      extra=(--real-nodes)
    else
      extra=(--pod-address "mcsched-system/mcsched-agent-=$ADDRESS")
    fi
  fi
  "$CONTROLPLANE" --name "$1" --data-dir "$WORK/$1" --kubeconfig "$WORK/$1.kubeconfig" --bind-address "$ADDRESS" \
    --with-controller-manager --with-scheduler --simulate-kubelets "${extra[@]}" >"$WORK/$1.out" 2>"$WORK/$1.log" &
  PIDS+=($!)
}

wait_cluster() {
  for _ in $(seq 1 900); do
    grep -q '^READY' "$WORK/$1.out" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "control plane $1 not ready"; tail -20 "$WORK/$1.log"; exit 1
}

# node CLUSTER NAME CPU
node() {
  kc "$1" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: $2
  labels: {kubernetes.io/hostname: $2}
status:
  capacity: {cpu: "$3", memory: 8Gi, pods: "110"}
  allocatable: {cpu: "$3", memory: 8Gi, pods: "110"}
YAML
}

# local_volume CLUSTER NODE: a WaitForFirstConsumer class and a local volume on NODE.
local_volume() {
  kc "$1" apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local-wffc}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-$2}
spec:
  storageClassName: local-wffc
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  local: {path: /mnt/data}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$2]}]
YAML
}

say "starting three clusters: host, east, west (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, simulated kubelets)"
for c in host east west; do start_cluster "$c"; done
for c in host east west; do wait_cluster "$c"; done
k version

say "host nodes: node-a and node-b with 4 CPUs, node-c with 1; leaves: east-1, east-2, west-1 with 4 CPUs"
node host node-a 4; node host node-b 4; node host node-c 1
node east east-1 4; node east east-2 4; node west west-1 4
local_volume host node-a; local_volume east east-1   # west has no volume for MySQL
for c in host east west; do kc "$c" wait --for=condition=Ready node --all --timeout=60s >/dev/null; done

if [ "$MODE" = container ]; then
  say "a real node in the host: node-r (kubelet, containerd, runc, CNI bridge), the agent image imported"
  "$REAL_NODE" --kubeconfig "$WORK/host.kubeconfig" --pki-dir "$WORK/host/pki" --name node-r \
    --import .build/image/mcsched-agent.tar >"$WORK/node.out" 2>"$WORK/node.log" &
  NODE_PID=$!
  for _ in $(seq 1 900); do
    grep -q '^READY' "$WORK/node.out" 2>/dev/null && break
    kill -0 "$NODE_PID" 2>/dev/null || { echo "the real node did not start:"; tail -30 "$WORK/node.log"; exit 1; }
    sleep 0.2
  done
  grep -q '^READY' "$WORK/node.out" || { echo "the real node is not Ready"; tail -30 "$WORK/node.log"; exit 1; }
  k get node node-r -o wide
  IMAGE=$(cat .build/image/mcsched-agent.ref)
  say "kubectl mcsched install --image $IMAGE --node-selector kubernetes.io/hostname=node-r --wait"
  mcsched install --image "$IMAGE" --node-selector kubernetes.io/hostname=node-r --wait --timeout 180s
  k get pods -n mcsched-system -o wide
else
  say "kubectl mcsched install --wait"
  mcsched install --image ghcr.io/mcsched/mcsched-agent:v0.1.0 --wait --timeout 90s

  say "starting mcsched-agent as the installed ServiceAccount, with the installed configuration"
  k get configmap -n mcsched-system mcsched-agent-config -o jsonpath='{.data.config\.yaml}' >"$WORK/agent-config.yaml"
  # The admin kubeconfig, impersonating the ServiceAccount (kubeconfig's `as`).
  awk '{print} /^  user:$/ {print "    as: system:serviceaccount:mcsched-system:mcsched-agent"}' \
    "$WORK/host.kubeconfig" >"$WORK/agent.kubeconfig"
  POD_NAMESPACE=mcsched-system "$AGENT" --config "$WORK/agent-config.yaml" --kubeconfig "$WORK/agent.kubeconfig" \
    --bind-address "$ADDRESS" --advertise-address "$ADDRESS" 2>"$WORK/agent.log" &
  PIDS+=($!)
fi
# The leader publishes itself (EndpointSlice, caBundle); then the API server serves mcsched.io.
k wait --for=condition=Available apiservice/v1alpha1.mcsched.io --timeout=60s >/dev/null
mcsched version

say "kubectl mcsched join cluster: east (eu, on-premises) and west (us, cloud)"
mcsched join cluster --name east --cluster-kubeconfig "$WORK/east.kubeconfig" --namespaces default --region eu --provider onprem --cost 1
mcsched join cluster --name west --cluster-kubeconfig "$WORK/west.kubeconfig" --namespaces default --region us --provider cloud --cost 3
for _ in $(seq 1 150); do
  ready=$(k get nodes -l mcsched.io/cluster -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true)
  [ "$ready" -eq 2 ] && break
  sleep 0.2
done
k get nodes -L mcsched.io/cluster,topology.kubernetes.io/region,mcsched.io/provider \
  -o custom-columns='NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,CPU:.status.allocatable.cpu,CLUSTER:.metadata.labels.mcsched\.io/cluster,REGION:.metadata.labels.topology\.kubernetes\.io/region,PROVIDER:.metadata.labels.mcsched\.io/provider'

say "kubectl mcsched get clusters"
mcsched get clusters

# ServiceAccount admission (on with a real node) wants the namespace's default account.
for _ in $(seq 1 300); do k get serviceaccount default >/dev/null 2>&1 && break; sleep 0.2; done

say "four pods for mcsched (1 CPU each), one for the default scheduler"
for i in 1 2 3 4; do
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: mc-$i, namespace: default}
spec:
  schedulerName: mcsched
  containers:
  - name: app
    image: $APP_IMAGE
    resources: {requests: {cpu: "1", memory: 128Mi}}
YAML
done
k run plain --image="$APP_IMAGE" >/dev/null

say "Kosmos's MySQL: two replicas, required anti-affinity on the hostname, a WaitForFirstConsumer claim each"
k apply -f - >/dev/null <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: mysql, namespace: default}
spec:
  replicas: 2
  serviceName: mysql
  selector: {matchLabels: {app: mysql}}
  template:
    metadata: {labels: {app: mysql}}
    spec:
      schedulerName: mcsched
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - topologyKey: kubernetes.io/hostname
            labelSelector: {matchLabels: {app: mysql}}
      containers:
      - name: mysql
        image: mysql:8
        resources: {requests: {cpu: 500m, memory: 512Mi}}
        volumeMounts: [{name: data, mountPath: /var/lib/mysql}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      storageClassName: local-wffc
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 5Gi}}
YAML

for _ in $(seq 1 600); do
  running=$(k get pods -l app=mysql --no-headers 2>/dev/null | grep -c Running || true)
  pending=$(k get pods --no-headers --field-selector spec.nodeName= 2>/dev/null | wc -l)
  [ "$running" -eq 2 ] && [ "$pending" -eq 0 ] && break
  sleep 0.2
done

if [ "$MODE" = container ]; then
  say "a pod for mcsched on the real node: a container answering HTTP on 8080"
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  schedulerName: mcsched
  nodeSelector: {kubernetes.io/hostname: node-r}
  containers:
  - name: hello
    image: $APP_IMAGE
    ports: [{containerPort: 8080}]
    readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
    resources: {requests: {cpu: 100m, memory: 32Mi}}
YAML
  k wait --for=condition=Ready pod/hello --timeout=90s >/dev/null
  echo '$ kubectl get --raw /api/v1/namespaces/default/pods/hello:8080/proxy/'
  k get --raw /api/v1/namespaces/default/pods/hello:8080/proxy/
fi

say "host: pods, their scheduler and their node (mcsched-* are leaf clusters; node-r, when there, is a real kubelet)"
k get pods -o custom-columns='NAME:.metadata.name,SCHEDULER:.spec.schedulerName,NODE:.spec.nodeName,STATUS:.status.phase,IP:.status.podIP'
say "host: claims"
k get pvc -o custom-columns='NAME:.metadata.name,STATUS:.status.phase,VOLUME:.spec.volumeName,IN LEAF:.metadata.annotations.mcsched\.io/bound-in-cluster'
for c in east west; do
  say "leaf $c: kubectl get pods -o wide"
  kc "$c" get pods -o wide
done

say "Scheduled events, by reporting scheduler"
k get events.events.k8s.io --field-selector reason=Scheduled \
  -o custom-columns='POD:.regarding.name,REPORTED BY:.reportingController,NOTE:.note'

leaf_replica=$(k get pods -l app=mysql -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' | awk '$2 ~ /^mcsched-/ {print $1; exit}')
host_replica=$(k get pods -l app=mysql -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' | awk '$2 !~ /^mcsched-/ && $2 != "" {print $1; exit}')
if [ -n "$leaf_replica" ]; then
  say "kubectl mcsched explain pod $leaf_replica"
  mcsched explain pod "$leaf_replica"
fi

say "kubectl mcsched get clusters (pods synced into each leaf)"
mcsched get clusters

say "GPUs through DRA (no driver runs: ResourceSlices as API objects): one a100 on host node-b, three in leaf east (two on east-1, one on east-2); a training Job of 4 pods asking for an a100 each"
# gpu_class CLUSTER: the driver's DeviceClass, which each cluster's admin defines.
gpu_class() {
  kc "$1" apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
YAML
}
# gpu_slice CLUSTER NODE DEVICE...: the node's a100s, as a driver would publish them.
gpu_slice() {
  local c=$1 n=$2 d devices=""
  shift 2
  for d in "$@"; do devices+="  - {name: $d, attributes: {model: {string: a100}}}"$'\n'; done
  kc "$c" apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: $n-gpus}
spec:
  driver: gpu.example.com
  nodeName: $n
  pool: {name: $n, generation: 1, resourceSliceCount: 1}
  devices:
$devices
YAML
}
gpu_class host; gpu_class east
gpu_slice host node-b gpu-0
gpu_slice east east-1 gpu-0 gpu-1; gpu_slice east east-2 gpu-0
k apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: a100, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "a100"'}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: default}
spec:
  parallelism: 4
  completions: 4
  completionMode: Indexed
  template:
    spec:
      schedulerName: mcsched
      restartPolicy: Never
      tolerations: [{key: mcsched.io/leaf, operator: Exists}]
      resourceClaims: [{name: gpu, resourceClaimTemplateName: a100}]
      containers:
      - name: trainer
        image: $APP_IMAGE
        resources: {claims: [{name: gpu}]}
YAML
for _ in $(seq 1 300); do
  bound=$(k get pods -l job-name=train -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true)
  [ "$bound" -eq 4 ] && break
  sleep 0.2
done
k get pods -l job-name=train -o custom-columns='NAME:.metadata.name,NODE:.spec.nodeName,STATUS:.status.phase'
say "leaf east: the copies' claims, made by east's claim controller from the template's copy and allocated by east's own scheduler"
for _ in $(seq 1 150); do
  allocated=$(kc east get resourceclaims -o jsonpath='{range .items[*]}{.status.allocation.devices.results[0].device}{"\n"}{end}' 2>/dev/null | grep -c . || true)
  [ "$allocated" -eq 3 ] && break
  sleep 0.2
done
kc east get resourceclaims -o custom-columns='CLAIM:.metadata.name,NODE:.status.allocation.devices.results[0].pool,DEVICE:.status.allocation.devices.results[0].device,FOR POD:.status.reservedFor[0].name'
gpu_leaf=$(k get pods -l job-name=train -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' | awk '$2 ~ /^mcsched-/ {print $1; exit}')
gpu_on_host=$(k get pods -l job-name=train -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c '^node-b$' || true)
gpu_in_leaf=$(k get pods -l job-name=train -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c '^mcsched-east$' || true)
if [ -n "$gpu_leaf" ]; then
  say "kubectl mcsched explain pod $gpu_leaf (the leaf node and the device its claim would get)"
  mcsched explain pod "$gpu_leaf"
fi

say "a pod that fits nowhere (16 CPUs): kubectl mcsched explain pod big"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: default}
spec:
  schedulerName: mcsched
  containers:
  - name: app
    image: $APP_IMAGE
    resources: {requests: {cpu: "16"}}
YAML
mcsched explain pod big

say "what if: kubectl mcsched explain --what-if -f web.yaml (a Deployment asking for 3 CPUs a replica in the us region; nothing is created)"
mcsched explain --what-if -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      schedulerName: mcsched
      nodeSelector: {topology.kubernetes.io/region: us}
      containers:
      - name: web
        image: nginx
        resources: {requests: {cpu: "3"}}
YAML

unbound=$(k get pods --no-headers --field-selector spec.nodeName=,metadata.name!=big 2>/dev/null | wc -l)
by_mcsched=$(k get events.events.k8s.io --field-selector reason=Scheduled -o jsonpath='{range .items[?(@.reportingController=="mcsched")]}{.regarding.name}{"\n"}{end}' | grep -c -E '^(mc-|mysql-)' || true)
leaf_running=0
if [ -n "$leaf_replica" ]; then
  for c in east west; do
    leaf_running=$((leaf_running + $(kc "$c" get pod "$leaf_replica" --no-headers 2>/dev/null | grep -c Running || true)))
  done
fi
agent_ok=true
if [ "$MODE" = container ]; then
  # The agent really ran in a container on the real node.
  agent=$(k get pods -n mcsched-system -l app.kubernetes.io/name=mcsched-agent \
    -o jsonpath='{range .items[*]}{.spec.nodeName} {.status.phase} {.status.containerStatuses[0].containerID}{"\n"}{end}')
  echo "$agent" | grep -qE '^node-r Running containerd://' || agent_ok=false
fi
if ! $agent_ok || [ "$unbound" -ne 0 ] || [ "$by_mcsched" -ne 6 ] || [ -z "$host_replica" ] || [ "$leaf_running" -ne 1 ] ||
  [ "$gpu_on_host" -ne 1 ] || [ "$gpu_in_leaf" -ne 3 ] || [ "$allocated" -ne 3 ]; then
  echo "demo failed: agent pods '${agent:-not checked}', $unbound pods unbound, $by_mcsched bound by mcsched, MySQL on host: '${host_replica}', in a leaf: '${leaf_replica}' (running there: $leaf_running), training pods on node-b: $gpu_on_host, in east: $gpu_in_leaf (claims allocated there: $allocated)"
  if [ "$MODE" = container ]; then
    # The API server's proxy to the kubelet needs node-r to resolve, which it may not:
    # the kubelet's own files instead (<its root>/logs/<namespace>_<pod>_<uid>/...).
    k logs -n mcsched-system deploy/mcsched-agent --tail 30 2>/dev/null ||
      find "${TMPDIR:-/tmp}" -path '*/logs/mcsched-system_mcsched-agent-*' -name '*.log' 2>/dev/null |
      while read -r f; do echo "== $f"; tail -200 "$f"; done
  else
    tail -30 "$WORK/agent.log"
  fi
  exit 1
fi

if [ "$MODE" = container ]; then
  say "done: the agent ran in a container on node-r; it bound 7 pods (hello in a container on node-r, MySQL's $host_replica on a host node and $leaf_replica in a leaf) and the 4 training pods (1 on node-b's a100, 3 on east's), default-scheduler 1; stopping everything"
else
  say "done: 6 pods bound by mcsched (MySQL: $host_replica on a host node, $leaf_replica in a leaf) and the 4 training pods (1 on node-b's a100, 3 on east's), 1 by default-scheduler; stopping everything"
fi
