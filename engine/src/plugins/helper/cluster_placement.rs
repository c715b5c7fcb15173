//! What the cluster-policy plugins (ClusterWeights, ClusterCapacity, ClusterTiers,
//! ClusterCost, PlacementPolicy) share: an owner's replicas already placed per cluster,
//! how many more replicas a node and each cluster can hold, and the rules that divide
//! replicas: by weights (the largest deficit) and into as few clusters as possible.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use mcsched_shared::resources::Resources;

use super::node_affinity::pod_matches_node;
use super::taints::filter_taints;
use crate::framework::{MAX_NODE_SCORE, MIN_NODE_SCORE};
use crate::leaf::cycle::LeafCycle;
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// The pods of controller `owner` on each cluster, bound or assumed, as the snapshot has
/// them. `cluster_of` names a node's cluster, or `None` to leave the node out. `pod`
/// itself is not counted, nor pods being deleted: their replacements are being placed,
/// and counting both would steer the replacement away from where the old one was.
pub(crate) fn placed_per_cluster<K: Eq + Hash>(
    snapshot: &Snapshot,
    owner: &str,
    pod: &PodInfo,
    cluster_of: impl Fn(&NodeInfo) -> Option<K>,
) -> HashMap<K, i64> {
    let mut placed: HashMap<K, i64> = HashMap::new();
    for node in snapshot.nodes.iter() {
        let Some(cluster) = cluster_of(node) else {
            continue;
        };
        let n = node
            .pods
            .iter()
            .filter(|p| p.uid != pod.uid && !p.terminating())
            .filter(|p| p.controller_uid() == Some(owner))
            .count() as i64;
        if n > 0 {
            *placed.entry(cluster).or_default() += n;
        }
    }
    placed
}

/// The clusters among `candidates` whose deficit is largest, ties included. A cluster's
/// deficit is its share of the owner's next `n+1` replicas less what it already holds:
/// `(n+1)·w/W − placed`, with `n` the replicas placed on weighted clusters and `W` the
/// sum of weights; compared multiplied by `W` so the arithmetic stays exact. Clusters
/// without a positive weight are never chosen. Placing every replica on the largest
/// deficit keeps each cluster within one replica of its exact share.
pub(crate) fn largest_deficit<K: Eq + Hash + Clone>(
    weights: &HashMap<K, i64>,
    placed: &HashMap<K, i64>,
    candidates: &HashSet<K>,
) -> HashSet<K> {
    let total: i128 = weights.values().map(|w| i128::from((*w).max(0))).sum();
    if total <= 0 {
        return HashSet::new();
    }
    let n: i128 = weights
        .keys()
        .map(|k| i128::from(placed.get(k).copied().unwrap_or(0)))
        .sum();
    let mut best: Option<i128> = None;
    let mut chosen = HashSet::new();
    for c in candidates {
        let w = i128::from(weights.get(c).copied().unwrap_or(0));
        if w <= 0 {
            continue;
        }
        let have = i128::from(placed.get(c).copied().unwrap_or(0));
        let deficit = (n + 1) * w - have * total;
        match best {
            Some(b) if deficit < b => {}
            Some(b) if deficit == b => {
                chosen.insert(c.clone());
            }
            _ => {
                best = Some(deficit);
                chosen.clear();
                chosen.insert(c.clone());
            }
        }
    }
    chosen
}

/// 100 for a chosen cluster, 0 otherwise.
pub(crate) fn favour(chosen: bool) -> i64 {
    if chosen {
        MAX_NODE_SCORE
    } else {
        MIN_NODE_SCORE
    }
}

/// How many more pods asking for `requests` fit on `node`: the smallest of
/// `floor(free/request)` over the resources the pod requests, and of the node's free pod
/// slots.
pub(crate) fn replicas_that_fit(requests: &Resources, node: &NodeInfo) -> i64 {
    let alloc = &node.allocatable;
    let used = &node.requested;
    let mut fit = alloc.allowed_pods - node.pods.len() as i64;
    let mut limit = |free: i64, want: i64| {
        if want > 0 {
            fit = fit.min(free.max(0) / want);
        }
    };
    limit(alloc.milli_cpu - used.milli_cpu, requests.milli_cpu);
    limit(alloc.memory - used.memory, requests.memory);
    limit(
        alloc.ephemeral_storage - used.ephemeral_storage,
        requests.ephemeral_storage,
    );
    for (name, want) in &requests.scalar {
        let have = alloc.scalar.get(name).copied().unwrap_or(0);
        let taken = used.scalar.get(name).copied().unwrap_or(0);
        limit(have - taken, *want);
    }
    fit.max(0)
}

/// Whether `node` could take `pod` at all, apart from room: not cordoned, its
/// NoSchedule/NoExecute taints tolerated, the pod's nodeSelector and required node
/// affinity satisfied. `must_be_ready`: leaf nodes count only while Ready, as in the
/// virtual node's allocatable; host nodes that are not Ready carry kube's not-ready
/// taints, which the taint check sees.
pub(crate) fn could_host(pod: &PodInfo, node: &NodeInfo, must_be_ready: bool) -> bool {
    (!must_be_ready || mcsched_shared::node::is_ready(&node.node))
        && !node.unschedulable
        && filter_taints(pod, node, |_| false).is_success()
        && pod_matches_node(pod, node)
}

/// How many more copies of `pod` each cluster can hold (`None` for the host): the host
/// over its real nodes, each connected leaf over its own nodes as the leaf copy of the
/// pod sees them.
pub(crate) fn fits_per_cluster(
    pod: &PodInfo,
    snapshot: &Snapshot,
    leaves: &LeafCycle,
) -> HashMap<Option<String>, i64> {
    let mut fits: HashMap<Option<String>, i64> = HashMap::new();
    let host: i64 = snapshot
        .nodes
        .iter()
        .filter(|n| n.cluster.is_none() && could_host(pod, n, false))
        .map(|n| replicas_that_fit(&pod.requests, n))
        .sum();
    fits.insert(None, host);
    // The leaf copy carries the leaf node selector, the overrides for its cluster, and
    // none of the host's constraints.
    let plain = leaves
        .leaf_pod(pod)
        .unwrap_or_else(|_| Arc::new(pod.clone()));
    for (name, view) in leaves.views.iter() {
        let labels = snapshot
            .nodes
            .iter()
            .find(|n| n.cluster.as_deref() == Some(name.as_str()))
            .and_then(|n| n.node.metadata.labels.clone())
            .unwrap_or_default();
        let leaf_pod = leaves
            .leaf_pod_in(pod, name, &labels)
            .map_or_else(|_| plain.clone(), |(p, _)| p);
        let n: i64 = view
            .snapshot
            .nodes
            .iter()
            .filter(|n| could_host(&leaf_pod, n, true))
            .map(|n| replicas_that_fit(&leaf_pod.requests, n))
            .sum();
        fits.insert(Some(name.clone()), n);
    }
    fits
}

/// Aggregated division: among `candidates`, those holding the most of the owner's pods if
/// any holds some, else those that fit the most.
pub(crate) fn fewest_clusters<K: Eq + Hash + Clone>(
    placed: &HashMap<K, i64>,
    fits: &HashMap<K, i64>,
    candidates: &HashSet<K>,
) -> HashSet<K> {
    let get = |m: &HashMap<K, i64>, c: &K| m.get(c).copied().unwrap_or(0);
    let rank = |c: &K| (get(placed, c), get(fits, c));
    let Some(best) = candidates.iter().map(rank).max() else {
        return HashSet::new();
    };
    candidates
        .iter()
        .filter(|c| rank(c) == best)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_with, pod_requesting};
    use std::sync::Arc;

    fn map(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn set(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_deficit_rule_divides_by_weight() {
        let w = map(&[("west", 2), ("east", 1)]);
        let both = set(&["west", "east"]);
        assert_eq!(largest_deficit(&w, &map(&[]), &both), set(&["west"]));
        assert_eq!(
            largest_deficit(&w, &map(&[("west", 1)]), &both),
            set(&["east"])
        );
        assert_eq!(
            largest_deficit(&w, &map(&[("west", 2), ("east", 1)]), &both),
            set(&["west"])
        );
        // Equal weights, equal counts: a tie, both chosen.
        let even = map(&[("west", 1), ("east", 1)]);
        assert_eq!(largest_deficit(&even, &map(&[]), &both), both);
        // The best cluster cannot take the pod: the best of those that can.
        assert_eq!(
            largest_deficit(&w, &map(&[]), &set(&["east", "host"])),
            set(&["east"])
        );
        // Nothing weighted is feasible, or every weight is 0: nobody is favoured.
        assert!(largest_deficit(&w, &map(&[]), &set(&["host"])).is_empty());
        assert!(largest_deficit(&map(&[("west", 0)]), &map(&[]), &set(&["west"])).is_empty());
    }

    #[test]
    fn replicas_that_fit_take_the_scarcest_resource_and_pod_slots() {
        let node = node_with("n", |_| {}); // 4 cpu, 8Gi, 110 pods
        let cpu = pod_requesting("a", &[("cpu", "1500m")]);
        assert_eq!(replicas_that_fit(&cpu.requests, &node), 2);
        let mem = pod_requesting("b", &[("cpu", "100m"), ("memory", "3Gi")]);
        assert_eq!(replicas_that_fit(&mem.requests, &node), 2);
        let nothing = pod_requesting("c", &[]);
        assert_eq!(replicas_that_fit(&nothing.requests, &node), 110);
        let gpu = pod_requesting("d", &[("nvidia.com/gpu", "1")]);
        assert_eq!(replicas_that_fit(&gpu.requests, &node), 0);
        let mut busy = node_with("busy", |_| {});
        busy.add_pod(Arc::new(pod_requesting("x", &[("cpu", "3")])));
        assert_eq!(replicas_that_fit(&cpu.requests, &busy), 0);
        assert_eq!(replicas_that_fit(&nothing.requests, &busy), 109);
    }
}

/// Virtual nodes for the cluster-policy plugins' unit tests, the engine's and the agent's.
#[cfg(any(test, feature = "testing"))]
pub mod tests_support {
    use k8s_openapi::api::core::v1::NodeCondition;

    use crate::plugins::testing::node_with;
    use crate::snapshot::NodeInfo;

    /// `mcsched-<cluster>`, labelled with its cluster and `labels`, Ready.
    pub fn virtual_node(cluster: &str, labels: &[(&str, &str)]) -> NodeInfo {
        node_with(&format!("mcsched-{cluster}"), |n| {
            let l = n.metadata.labels.get_or_insert_default();
            l.insert("mcsched.io/cluster".into(), cluster.into());
            for (k, v) in labels {
                l.insert(k.to_string(), v.to_string());
            }
            ready(n);
        })
    }

    pub(crate) fn ready(n: &mut k8s_openapi::api::core::v1::Node) {
        n.status.get_or_insert_default().conditions = Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]);
    }
}

/// Owned pods and a placement loop for the cluster-policy plugins' unit tests.
#[cfg(test)]
pub(crate) mod replica_loop {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use crate::framework::{CycleState, Plugin};
    use crate::plugins::testing::pod_with;
    use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

    /// `pod` with a controller ownerReference to ReplicaSet `owner` (its UID).
    pub(crate) fn with_owner(pod: PodInfo, owner: &str) -> PodInfo {
        let mut p = (*pod.pod()).clone();
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: owner.into(),
            uid: owner.into(),
            controller: Some(true),
            ..Default::default()
        }]);
        PodInfo::new(Arc::new(p))
    }

    /// A pod named `name` owned by ReplicaSet `owner`, requesting nothing.
    pub(crate) fn owned_pod(name: &str, owner: &str) -> PodInfo {
        with_owner(
            pod_with(|p| {
                p.metadata.name = Some(name.into());
                p.metadata.uid = Some(format!("uid-{name}"));
            }),
            owner,
        )
    }

    /// Schedules `replicas` pods of ReplicaSet `rs-1` one by one with `plugin` alone:
    /// the feasible nodes are those `accept(node, replicas on it)` allows, the first
    /// highest score wins, and the pod joins that node before the next cycle. Returns
    /// how many landed on each node.
    pub(crate) fn run_replicas<P: Plugin>(
        plugin: &P,
        nodes: Vec<NodeInfo>,
        replicas: usize,
        accept: impl Fn(&str, i64) -> bool,
    ) -> BTreeMap<String, i64> {
        let mut nodes: Vec<Arc<NodeInfo>> = nodes.into_iter().map(Arc::new).collect();
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for i in 0..replicas {
            let pod = owned_pod(&format!("r-{i}"), "rs-1");
            let snapshot = Snapshot::from_nodes(nodes.clone());
            let feasible: Vec<Arc<NodeInfo>> = nodes
                .iter()
                .filter(|n| accept(&n.name, counts.get(&*n.name).copied().unwrap_or(0)))
                .cloned()
                .collect();
            let mut state = CycleState::new();
            let mut skipped = false;
            if let Some(ps) = plugin.as_pre_score() {
                skipped = ps
                    .pre_score(
                        &mut state,
                        &pod,
                        &crate::snapshot::NodeList::from_nodes(feasible.clone()),
                        &snapshot,
                    )
                    .is_skip();
            }
            let Some(score) = plugin.as_score() else {
                panic!("{} does not score", plugin.name());
            };
            let mut best: Option<(i64, usize)> = None;
            for (j, n) in feasible.iter().enumerate() {
                let s = if skipped {
                    0
                } else {
                    score.score(&state, &pod, n).unwrap_or(-1)
                };
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, j));
                }
            }
            let Some((_, j)) = best else { break };
            let name = feasible[j].name.clone();
            let idx = nodes.iter().position(|n| n.name == name).unwrap_or(0);
            let mut updated = (*nodes[idx]).clone();
            updated.add_pod(Arc::new(pod));
            nodes[idx] = Arc::new(updated);
            *counts.entry(name.to_string()).or_default() += 1;
        }
        counts
    }
}
