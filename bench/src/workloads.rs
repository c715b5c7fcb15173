//! The workloads, shaped after kube-scheduler's `scheduler_perf`
//! (test/integration/scheduler_perf/config/performance-config.yaml and its templates):
//! the same node and pod templates, resources and labels.

use std::fmt;
use std::str::FromStr;

use mcsched_shared::keys;
use serde_json::{Value, json};

/// The namespace of the initial pods (scheduler_perf's first createPods op, `sched-0`).
pub const INIT_NAMESPACE: &str = "sched-0";
/// The namespace of the measured pods (`sched-1`).
pub const MEASURED_NAMESPACE: &str = "sched-1";
/// Label on every measured pod: the observer watches only these.
pub const MEASURED_LABEL: &str = "mcsched-bench/measured";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SchedulingBasic,
    SchedulingPodAntiAffinity,
    TopologySpreading,
    SchedulingNodeAffinity,
    MultiCluster,
    /// Leaves whose nodes are each 2.5 of 4 CPUs used: a leaf's summed free room is large,
    /// while no node of it fits a 2-CPU pod (the node-aware scheduling challenge).
    MultiClusterFragmented,
    /// MultiCluster with many small leaves (16 by default, each a control plane of its
    /// own) beside a host of 1000 nodes: what each leaf costs the agent, and how current
    /// the virtual nodes stay.
    MultiClusterManyLeaves,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::SchedulingBasic,
        Kind::SchedulingPodAntiAffinity,
        Kind::TopologySpreading,
        Kind::SchedulingNodeAffinity,
        Kind::MultiCluster,
        Kind::MultiClusterFragmented,
        Kind::MultiClusterManyLeaves,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::SchedulingBasic => "SchedulingBasic",
            Kind::SchedulingPodAntiAffinity => "SchedulingPodAntiAffinity",
            Kind::TopologySpreading => "TopologySpreading",
            Kind::SchedulingNodeAffinity => "SchedulingNodeAffinity",
            Kind::MultiCluster => "MultiCluster",
            Kind::MultiClusterFragmented => "MultiClusterFragmented",
            Kind::MultiClusterManyLeaves => "MultiClusterManyLeaves",
        }
    }

    /// Workloads with leaf clusters joined as virtual nodes.
    pub fn is_multi_cluster(self) -> bool {
        matches!(
            self,
            Kind::MultiCluster | Kind::MultiClusterFragmented | Kind::MultiClusterManyLeaves
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown workload {s:?}; one of {}", names.join(", "))
            })
    }
}

/// How many nodes, initial pods and measured pods; for the multi-cluster workload,
/// `nodes` are the host's and each of `leaves` leaves has `leaf_nodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub nodes: usize,
    pub init_pods: usize,
    pub pods: usize,
    pub leaves: usize,
    pub leaf_nodes: usize,
}

impl Size {
    fn single(nodes: usize, init_pods: usize, pods: usize) -> Self {
        Size {
            nodes,
            init_pods,
            pods,
            leaves: 0,
            leaf_nodes: 0,
        }
    }

    /// Every count multiplied by `f` (at least 1 where it was not 0).
    pub fn scaled(self, f: f64) -> Self {
        let s = |n: usize| {
            if n == 0 {
                0
            } else {
                ((n as f64 * f).round() as usize).max(1)
            }
        };
        Size {
            nodes: s(self.nodes),
            init_pods: s(self.init_pods),
            pods: s(self.pods),
            leaves: self.leaves,
            leaf_nodes: s(self.leaf_nodes),
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.leaves > 0 {
            write!(
                f,
                "{} host nodes + {}×{} leaf nodes, {} pods",
                self.nodes, self.leaves, self.leaf_nodes, self.pods
            )
        } else if self.init_pods > 0 {
            write!(
                f,
                "{} nodes, {} initial + {} measured pods",
                self.nodes, self.init_pods, self.pods
            )
        } else {
            write!(f, "{} nodes, {} pods", self.nodes, self.pods)
        }
    }
}

/// The sizes. Initial pods follow scheduler_perf where the issue gives a total
/// (SchedulingPodAntiAffinity: 1000 + 1000).
pub fn default_size(kind: Kind) -> Size {
    match kind {
        Kind::SchedulingBasic => Size::single(5000, 1000, 10000),
        Kind::SchedulingPodAntiAffinity => Size::single(5000, 1000, 1000),
        Kind::TopologySpreading => Size::single(5000, 0, 5000),
        Kind::SchedulingNodeAffinity => Size::single(5000, 0, 10000),
        Kind::MultiCluster => Size {
            nodes: 500,
            init_pods: 0,
            pods: 5000,
            leaves: 4,
            leaf_nodes: 1000,
        },
        // The host holds 2 × 250 of the 2-CPU pods; the leaves' 2000 nodes add 3000 CPUs
        // of free room in their virtual nodes, on which none fits.
        Kind::MultiClusterFragmented => Size {
            nodes: 250,
            init_pods: 0,
            pods: 400,
            leaves: 4,
            leaf_nodes: 500,
        },
        Kind::MultiClusterManyLeaves => Size {
            nodes: 1000,
            init_pods: 0,
            pods: 2000,
            leaves: 16,
            leaf_nodes: 100,
        },
    }
}

/// The small sizes of the quick variant that `make test` runs.
pub fn quick_size(kind: Kind) -> Size {
    match kind {
        Kind::SchedulingPodAntiAffinity => Size::single(100, 20, 60),
        Kind::MultiCluster => Size {
            nodes: 20,
            init_pods: 0,
            pods: 100,
            leaves: 2,
            leaf_nodes: 10,
        },
        Kind::MultiClusterFragmented => Size {
            nodes: 10,
            init_pods: 0,
            pods: 16,
            leaves: 2,
            leaf_nodes: 5,
        },
        Kind::MultiClusterManyLeaves => Size {
            nodes: 20,
            init_pods: 0,
            pods: 60,
            leaves: 3,
            leaf_nodes: 5,
        },
        _ => Size::single(100, 20, 200),
    }
}

pub fn node_name(i: usize) -> String {
    format!("node-{i}")
}

/// scheduler_perf's node-default.yaml (4 CPU, 32Gi, 110 pods, Ready) with the labels
/// its labelNodePrepareStrategy adds, plus `kubernetes.io/hostname` as a kubelet sets it
/// (without it the anti-affinity workload's topologyKey would match no node at all).
pub fn node(kind: Kind, i: usize) -> Value {
    let name = node_name(i);
    let mut labels = json!({ "kubernetes.io/hostname": name });
    match kind {
        Kind::TopologySpreading => {
            labels["topology.kubernetes.io/zone"] = json!(format!("moon-{}", i % 3 + 1));
        }
        Kind::SchedulingNodeAffinity => {
            labels["topology.kubernetes.io/zone"] = json!("zone1");
        }
        _ => {}
    }
    let resources = json!({"pods": "110", "cpu": "4", "memory": "32Gi"});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
            "phase": "Running"
        }
    })
}

/// Which template a pod of the workload uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Init,
    Measured,
    Warmup,
}

/// A pod of scheduler_perf's templates (pod-default, pod-with-pod-anti-affinity,
/// pod-with-topology-spreading, pod-with-node-affinity), named `name` in `namespace`.
/// Initial pods are created already bound (`node`), measured ones for `scheduler`.
pub fn pod(
    kind: Kind,
    phase: Phase,
    namespace: &str,
    name: &str,
    scheduler: &str,
    node: Option<&str>,
) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{
                "image": "registry.k8s.io/pause:3.10",
                "name": "pause",
                "ports": [{"containerPort": 80}],
                "resources": {
                    "limits": {"cpu": "100m", "memory": "500Mi"},
                    "requests": {"cpu": "100m", "memory": "500Mi"}
                }
            }]
        }
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    if phase == Phase::Measured {
        pod["metadata"]["labels"][MEASURED_LABEL] = json!("true");
    }
    match (kind, phase) {
        (_, Phase::Warmup) => {}
        (Kind::SchedulingPodAntiAffinity, _) => {
            pod["metadata"]["labels"]["color"] = json!("green");
            pod["spec"]["affinity"] = json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"color": "green"}},
                    "topologyKey": "kubernetes.io/hostname",
                    "namespaces": [MEASURED_NAMESPACE, INIT_NAMESPACE]
                }]
            }});
        }
        (Kind::TopologySpreading, Phase::Measured) => {
            pod["metadata"]["labels"]["color"] = json!("blue");
            pod["spec"]["topologySpreadConstraints"] = json!([{
                "maxSkew": 5,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"color": "blue"}}
            }]);
        }
        (Kind::SchedulingNodeAffinity, _) => {
            pod["spec"]["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                    "matchExpressions": [{
                        "key": "topology.kubernetes.io/zone",
                        "operator": "In",
                        "values": ["zone1", "zone2"]
                    }]
                }]}
            }});
        }
        _ => {}
    }
    if kind == Kind::MultiClusterFragmented && phase == Phase::Measured {
        pod["spec"]["containers"][0]["resources"] = json!({
            "limits": {"cpu": "2", "memory": "1Gi"},
            "requests": {"cpu": "2", "memory": "1Gi"}
        });
    }
    if kind.is_multi_cluster() {
        // Free to go anywhere, virtual nodes included, for every scheduler.
        pod["spec"]["tolerations"] = json!([{
            "key": keys::LEAF_TAINT, "operator": "Exists", "effect": "NoSchedule"
        }]);
    }
    pod
}

/// The leaves' own pod on leaf node `node` in MultiClusterFragmented: 2.5 of its 4 CPUs
/// used, so 1.5 are free, too little for a measured pod.
pub fn leaf_filler(node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("filler-{node}"), "namespace": LEAF_LOCAL_NAMESPACE},
        "spec": {
            "nodeName": node,
            "containers": [{
                "image": "registry.k8s.io/pause:3.10",
                "name": "pause",
                "resources": {"requests": {"cpu": "2500m", "memory": "1Gi"}}
            }]
        }
    })
}

/// The namespace of the leaves' own pods.
pub const LEAF_LOCAL_NAMESPACE: &str = "leaf-local";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>(), Ok(k));
        }
        assert!("nope".parse::<Kind>().is_err());
    }

    #[test]
    fn templates_carry_scheduler_perf_shapes() {
        let p = pod(
            Kind::SchedulingPodAntiAffinity,
            Phase::Measured,
            MEASURED_NAMESPACE,
            "p",
            "mcsched",
            None,
        );
        assert_eq!(p["metadata"]["labels"]["color"], "green");
        assert_eq!(p["metadata"]["labels"][MEASURED_LABEL], "true");
        let t = pod(
            Kind::TopologySpreading,
            Phase::Init,
            INIT_NAMESPACE,
            "p",
            "x",
            Some("node-0"),
        );
        assert!(t["spec"].get("topologySpreadConstraints").is_none());
        assert_eq!(t["spec"]["nodeName"], "node-0");
        let n = node(Kind::TopologySpreading, 4);
        assert_eq!(
            n["metadata"]["labels"]["topology.kubernetes.io/zone"],
            "moon-2"
        );
        assert_eq!(
            default_size(Kind::SchedulingBasic).scaled(0.01),
            Size::single(50, 10, 100)
        );
    }
}
