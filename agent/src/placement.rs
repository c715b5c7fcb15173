//! Choosing a node for one pod: pure over the nodes and what is already requested on
//! them. Reasons and the summary message use kube-scheduler's wording, so a
//! `FailedScheduling` event reads the same whichever scheduler wrote it.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use mcsched_shared::node;
use mcsched_shared::resources::{self, Resources};
use mcsched_shared::taints;
use rand::RngExt;

pub const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const REASON_NOT_READY: &str = "node(s) were not ready";
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// What is already placed on a node: the summed requests and how many pods.
#[derive(Debug, Clone, Default)]
pub struct NodeUsage {
    pub requested: Resources,
    pub pods: i64,
}

impl NodeUsage {
    pub fn add_pod(&mut self, requests: &Resources) {
        self.requested.add(requests);
        self.pods += 1;
    }
}

/// No node can take the pod: every node's first failing reason, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitError {
    pub num_nodes: usize,
    pub reasons: BTreeMap<String, usize>,
}

impl std::fmt::Display for FitError {
    /// `0/3 nodes are available: 1 Insufficient cpu, 2 node(s) were unschedulable.`
    /// with reasons sorted as strings, as kube-scheduler sorts its histogram.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        parts.sort();
        write!(
            f,
            "0/{} nodes are available: {}.",
            self.num_nodes,
            parts.join(", ")
        )
    }
}

/// Picks the feasible node with the most free CPU and memory left after placing the pod
/// (LeastAllocated); ties are broken at random, as kube-scheduler's selectHost does.
pub fn choose_node<'a>(
    pod: &Pod,
    pod_requests: &Resources,
    nodes: impl IntoIterator<Item = &'a Node>,
    usage: &HashMap<String, NodeUsage>,
) -> Result<String, FitError> {
    let empty = NodeUsage::default();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut num_nodes = 0;
    let mut best: Option<(i64, String)> = None;
    let mut ties = 0u32;
    let mut rng = rand::rng();
    for n in nodes {
        num_nodes += 1;
        let name = n.metadata.name.clone().unwrap_or_default();
        let used = usage.get(&name).unwrap_or(&empty);
        let allocatable = match node::allocatable(n) {
            Ok(a) => a,
            Err(e) => {
                *reasons
                    .entry(format!("node(s) had invalid allocatable: {e}"))
                    .or_default() += 1;
                continue;
            }
        };
        if let Err(reason) = feasible(pod, pod_requests, n, &allocatable, used) {
            *reasons.entry(reason).or_default() += 1;
            continue;
        }
        let score = least_allocated(pod_requests, &allocatable, &used.requested);
        match &best {
            Some((top, _)) if score < *top => {}
            Some((top, _)) if score == *top => {
                ties += 1;
                if rng.random_range(0..=ties) == 0 {
                    best = Some((score, name));
                }
            }
            _ => {
                ties = 0;
                best = Some((score, name));
            }
        }
    }
    best.map(|(_, name)| name)
        .ok_or(FitError { num_nodes, reasons })
}

fn feasible(
    pod: &Pod,
    requests: &Resources,
    n: &Node,
    allocatable: &Resources,
    used: &NodeUsage,
) -> Result<(), String> {
    let spec = pod.spec.as_ref();
    let tolerations = spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    if node::is_unschedulable(n) {
        let unschedulable_taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerations
            .iter()
            .any(|t| taints::tolerates(t, &unschedulable_taint))
        {
            return Err(REASON_UNSCHEDULABLE.into());
        }
    }
    if !node::is_ready(n) {
        return Err(REASON_NOT_READY.into());
    }
    let node_taints = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if let Some(t) = taints::first_untolerated(node_taints, tolerations) {
        return Err(format!(
            "node(s) had untolerated taint {{{}: {}}}",
            t.key,
            t.value.as_deref().unwrap_or("")
        ));
    }
    insufficient(requests, allocatable, used)
}

/// NodeResourcesFit's checks, in its order: pod count, then cpu, memory,
/// ephemeral-storage and extended resources the pod asks for.
fn insufficient(
    requests: &Resources,
    allocatable: &Resources,
    used: &NodeUsage,
) -> Result<(), String> {
    if used.pods + 1 > allocatable.allowed_pods {
        return Err(REASON_TOO_MANY_PODS.into());
    }
    let checks = [
        (
            resources::CPU,
            requests.milli_cpu,
            allocatable.milli_cpu,
            used.requested.milli_cpu,
        ),
        (
            resources::MEMORY,
            requests.memory,
            allocatable.memory,
            used.requested.memory,
        ),
        (
            resources::EPHEMERAL_STORAGE,
            requests.ephemeral_storage,
            allocatable.ephemeral_storage,
            used.requested.ephemeral_storage,
        ),
    ];
    for (name, want, have, taken) in checks {
        if want > 0 && want > have - taken {
            return Err(format!("Insufficient {name}"));
        }
    }
    for (name, &want) in &requests.scalar {
        let have = allocatable.scalar.get(name).copied().unwrap_or(0);
        let taken = used.requested.scalar.get(name).copied().unwrap_or(0);
        if want > 0 && want > have - taken {
            return Err(format!("Insufficient {name}"));
        }
    }
    Ok(())
}

/// kube-scheduler's LeastAllocated over cpu and memory, 0..=100.
fn least_allocated(requests: &Resources, allocatable: &Resources, requested: &Resources) -> i64 {
    let free = |alloc: i64, used: i64, want: i64| {
        if alloc <= 0 {
            return 0;
        }
        let after = used + want;
        if after > alloc {
            0
        } else {
            (alloc - after) * 100 / alloc
        }
    };
    (free(
        allocatable.milli_cpu,
        requested.milli_cpu,
        requests.milli_cpu,
    ) + free(allocatable.memory, requested.memory, requests.memory))
        / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, PodSpec, Toleration};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, cpu: &str, ready: bool, unschedulable: bool, taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: Some(unschedulable),
                taints: Some(taints),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity(cpu.into())),
                    ("memory".to_string(), Quantity("8Gi".into())),
                    ("pods".to_string(), Quantity("110".into())),
                ])),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn pod(tolerations: Vec<Toleration>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                tolerations: Some(tolerations),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cpu(milli: i64) -> Resources {
        Resources {
            milli_cpu: milli,
            ..Default::default()
        }
    }

    #[test]
    fn picks_the_node_with_most_room() {
        let nodes = [
            node("a", "4", true, false, vec![]),
            node("b", "4", true, false, vec![]),
        ];
        let mut usage = HashMap::new();
        usage
            .entry("a".to_string())
            .or_insert_with(NodeUsage::default)
            .add_pod(&cpu(3000));
        let chosen = choose_node(&pod(vec![]), &cpu(500), &nodes, &usage).unwrap();
        assert_eq!(chosen, "b");
    }

    #[test]
    fn ties_are_broken_at_random() {
        let nodes: Vec<Node> = (0..4)
            .map(|i| node(&format!("n{i}"), "4", true, false, vec![]))
            .collect();
        let seen: std::collections::HashSet<String> = (0..200)
            .map(|_| choose_node(&pod(vec![]), &cpu(100), &nodes, &HashMap::new()).unwrap())
            .collect();
        assert_eq!(
            seen.len(),
            4,
            "every tied node should be chosen sometimes: {seen:?}"
        );
    }

    #[test]
    fn unfit_nodes_are_counted_in_kube_scheduler_words() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("db".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let nodes = [
            node("small", "1", true, false, vec![]),
            node("cordoned", "8", true, true, vec![]),
            node("down", "8", false, false, vec![]),
            node("tainted", "8", true, false, vec![taint.clone()]),
            node("small2", "1", true, false, vec![]),
        ];
        let err = choose_node(&pod(vec![]), &cpu(2000), &nodes, &HashMap::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, \
             1 node(s) were not ready, 1 node(s) were unschedulable, 2 Insufficient cpu."
        );
        let tolerate = Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        };
        let chosen =
            choose_node(&pod(vec![tolerate]), &cpu(2000), &nodes, &HashMap::new()).unwrap();
        assert_eq!(chosen, "tainted");
    }

    #[test]
    fn pod_count_is_a_limit() {
        let nodes = [node("a", "4", true, false, vec![])];
        let mut usage = HashMap::new();
        let u = usage
            .entry("a".to_string())
            .or_insert_with(NodeUsage::default);
        for _ in 0..110 {
            u.add_pod(&Resources::default());
        }
        let err = choose_node(&pod(vec![]), &Resources::default(), &nodes, &usage).unwrap_err();
        assert_eq!(err.to_string(), "0/1 nodes are available: 1 Too many pods.");
    }
}
