//! ClusterCapacity: an owner's replicas placed by how many more each cluster can hold
//! (Karmada's dynamic and aggregated division), counted leaf-accurately: per
//! real node, `min(floor(free/request))` over the pod's requests and the free pod slots,
//! summed over the leaf's nodes from this cycle's leaf snapshots (the host's over its own
//! nodes). A summed allocatable would count room no single node has.
//!
//! - Dynamic: ClusterWeights' deficit rule with `w_c = placed_c + fits_c`, so replicas
//!   are divided in proportion to what each cluster can hold in all.
//! - Aggregated: as few clusters as possible: a cluster already holding the owner's pods
//!   (the fullest first), else the one that fits the most.
//!
//! A pod without a controller is a group of one: it goes where the most such pods fit.

use std::collections::{HashMap, HashSet};

use mcsched_shared::config::{CapacityMode, ClusterCapacityArgs};

use super::helper::cluster_placement::{
    favour, fewest_clusters, fits_per_cluster, largest_deficit, placed_per_cluster,
};
use crate::framework::{CycleState, Plugin, PreScorePlugin, ScorePlugin, Status};
use crate::leaf::cycle::{LEAF_CYCLE_KEY, LeafCycle};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "ClusterCapacity";

/// A cluster: `None` for the host's own nodes, else the leaf's name.
type Cluster = Option<String>;

pub(crate) struct ClusterCapacity {
    mode: CapacityMode,
}

impl ClusterCapacity {
    pub(crate) fn new(args: &ClusterCapacityArgs) -> Self {
        ClusterCapacity { mode: args.mode }
    }
}

#[derive(Clone)]
struct Chosen(HashSet<Cluster>);

impl Plugin for ClusterCapacity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for ClusterCapacity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &crate::snapshot::NodeList,
        snapshot: &Snapshot,
    ) -> Status {
        if super::helper::placement_state::overrides_profile(state) {
            return Status::skip();
        }
        let leaves = state
            .read::<LeafCycle>(LEAF_CYCLE_KEY)
            .cloned()
            .unwrap_or_default();
        let fits = fits_per_cluster(pod, snapshot, &leaves);
        let placed = match pod.controller_uid() {
            Some(owner) => placed_per_cluster(snapshot, owner, pod, |n| Some(n.cluster.clone())),
            None => HashMap::new(),
        };
        let candidates: HashSet<Cluster> = nodes.iter().map(|n| n.cluster.clone()).collect();
        let chosen = match self.mode {
            CapacityMode::Dynamic => {
                let mut weights: HashMap<Cluster, i64> = fits.clone();
                for (c, n) in &placed {
                    *weights.entry(c.clone()).or_default() += n;
                }
                largest_deficit(&weights, &placed, &candidates)
            }
            CapacityMode::Aggregated => fewest_clusters(&placed, &fits, &candidates),
        };
        state.write(NAME, Chosen(chosen));
        Status::success()
    }
}

impl ScorePlugin for ClusterCapacity {
    /// A cluster's score: a virtual node is scored itself, not as its leaf nodes.
    fn scores_members(&self) -> bool {
        false
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let chosen = state
            .read::<Chosen>(NAME)
            .is_some_and(|c| c.0.contains(&node.cluster));
        Ok(favour(chosen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::cycle::LeafView;
    use crate::plugins::helper::cluster_placement::replica_loop::with_owner;
    use crate::plugins::helper::cluster_placement::replicas_that_fit;
    use crate::plugins::helper::cluster_placement::tests_support::{ready, virtual_node};
    use crate::plugins::testing::{node_with, pod_requesting, quantities};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// A leaf node with `cpu` allocatable and 110 pod slots, Ready.
    fn leaf_node(name: &str, cpu: &str) -> NodeInfo {
        node_with(name, |n| {
            if let Some(s) = n.status.as_mut() {
                s.allocatable = Some(quantities(&[
                    ("cpu", cpu),
                    ("memory", "64Gi"),
                    ("pods", "110"),
                ]));
            }
            ready(n);
        })
    }

    /// The world the plugin sees: host nodes and virtual nodes in the host snapshot, and
    /// each leaf's own nodes.
    struct World {
        host: Vec<Arc<NodeInfo>>,
        leaves: BTreeMap<String, Vec<Arc<NodeInfo>>>,
    }

    impl World {
        fn cycle(&self) -> LeafCycle {
            let views = self
                .leaves
                .iter()
                .map(|(name, nodes)| {
                    let view = LeafView {
                        admission: Default::default(),
                        cluster: name.clone(),
                        snapshot: Snapshot::from_nodes(nodes.clone()),
                        checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
                        host_id: String::new(),
                        served: Default::default(),
                        kept: Default::default(),
                        devices: Default::default(),
                    };
                    (name.clone(), Arc::new(view))
                })
                .collect();
            LeafCycle::new(Arc::new(views))
        }

        /// How many more `pod`s the cluster of host node `node` can take.
        fn room(&self, node: &NodeInfo, pod: &PodInfo) -> i64 {
            let nodes = match &node.cluster {
                None => std::slice::from_ref(
                    self.host
                        .iter()
                        .find(|n| n.name == node.name)
                        .unwrap_or_else(|| panic!("{}", node.name)),
                )
                .to_vec(),
                Some(c) => self.leaves.get(c).cloned().unwrap_or_default(),
            };
            nodes
                .iter()
                .map(|n| replicas_that_fit(&pod.requests, n))
                .sum()
        }

        /// Binds `pod` to host node `idx`; on a virtual node it also lands on the
        /// leaf's first node with room, as the leaf's scheduler would put it.
        fn place(&mut self, idx: usize, pod: PodInfo) {
            let pod = Arc::new(pod);
            if let Some(c) = self.host[idx].cluster.clone()
                && let Some(nodes) = self.leaves.get_mut(&c)
                && let Some(j) = nodes
                    .iter()
                    .position(|n| replicas_that_fit(&pod.requests, n) > 0)
            {
                let mut n = (*nodes[j]).clone();
                n.add_pod(pod.clone());
                nodes[j] = Arc::new(n);
            }
            let mut n = (*self.host[idx]).clone();
            n.add_pod(pod);
            self.host[idx] = Arc::new(n);
        }
    }

    /// A 1-CPU pod of ReplicaSet `rs-1`.
    fn replica(name: &str) -> PodInfo {
        with_owner(pod_requesting(name, &[("cpu", "1")]), "rs-1")
    }

    /// Schedules `replicas` 1-CPU pods of one ReplicaSet with the plugin alone (first
    /// highest score wins; clusters without room are infeasible); counts per node.
    fn run(plugin: &ClusterCapacity, world: &mut World, replicas: usize) -> BTreeMap<String, i64> {
        let mut counts = BTreeMap::new();
        for i in 0..replicas {
            let pod = replica(&format!("r-{i}"));
            let snapshot = Snapshot::from_nodes(world.host.clone());
            let feasible: Vec<(usize, Arc<NodeInfo>)> = world
                .host
                .iter()
                .enumerate()
                .filter(|(_, n)| world.room(n, &pod) > 0)
                .map(|(i, n)| (i, n.clone()))
                .collect();
            let nodes: Vec<Arc<NodeInfo>> = feasible.iter().map(|(_, n)| n.clone()).collect();
            let mut state = CycleState::new();
            state.write(LEAF_CYCLE_KEY, world.cycle());
            assert!(
                plugin
                    .pre_score(
                        &mut state,
                        &pod,
                        &crate::snapshot::NodeList::from_nodes(nodes.clone()),
                        &snapshot
                    )
                    .is_success()
            );
            let mut best: Option<(i64, usize)> = None;
            for (idx, n) in &feasible {
                let s = plugin.score(&state, &pod, n).unwrap_or(-1);
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, *idx));
                }
            }
            let Some((_, idx)) = best else { break };
            *counts.entry(world.host[idx].name.to_string()).or_default() += 1;
            world.place(idx, pod);
        }
        counts
    }

    /// Host: one 4-CPU node. Leaves: west with 3 nodes of 10 CPU (room 30, but only
    /// 8 on each node after its own 2-CPU pods), east with one 10-CPU node.
    fn world() -> World {
        let busy = |name: &str| {
            let mut n = leaf_node(name, "10");
            n.add_pod(Arc::new(pod_requesting(
                &format!("{name}-own"),
                &[("cpu", "2")],
            )));
            Arc::new(n)
        };
        World {
            host: vec![
                Arc::new(node_with("host-a", |_| {})),
                Arc::new(virtual_node("west", &[])),
                Arc::new(virtual_node("east", &[])),
            ],
            leaves: BTreeMap::from([
                ("west".to_string(), vec![busy("w1"), busy("w2"), busy("w3")]),
                ("east".to_string(), vec![busy("e1")]),
            ]),
        }
    }

    #[test]
    fn fits_are_counted_per_leaf_node() {
        let w = world();
        let pod = pod_requesting("p", &[("cpu", "3")]);
        let snapshot = Snapshot::from_nodes(w.host.clone());
        let fits = fits_per_cluster(&pod, &snapshot, &w.cycle());
        // 8 free CPU per leaf node: 2 pods of 3 CPU each, not floor(24/3) = 8.
        assert_eq!(fits.get(&Some("west".to_string())), Some(&6));
        assert_eq!(fits.get(&Some("east".to_string())), Some(&2));
        assert_eq!(fits.get(&None), Some(&1));
    }

    #[test]
    fn dynamic_divides_in_proportion_to_room() {
        // Room for 1-CPU pods: host 4, west 24, east 8 (36 in all); 18 replicas take
        // half of each cluster's room: 2, 12, 4.
        let mut w = world();
        let p = ClusterCapacity::new(&ClusterCapacityArgs {
            mode: CapacityMode::Dynamic,
        });
        let counts = run(&p, &mut w, 18);
        let near = |node: &str, want: i64| {
            let got = counts.get(node).copied().unwrap_or(0);
            assert!(
                (got - want).abs() <= 1,
                "{node}: {got} for {want} in {counts:?}"
            );
        };
        near("host-a", 2);
        near("mcsched-west", 12);
        near("mcsched-east", 4);
        assert_eq!(counts.values().sum::<i64>(), 18);
    }

    #[test]
    fn aggregated_fills_the_roomiest_cluster_then_the_next() {
        let mut w = world();
        let p = ClusterCapacity::new(&ClusterCapacityArgs {
            mode: CapacityMode::Aggregated,
        });
        let counts = run(&p, &mut w, 30);
        // West holds 24, then east (8 more) before the host (4).
        assert_eq!(counts.get("mcsched-west"), Some(&24), "{counts:?}");
        assert_eq!(counts.get("mcsched-east"), Some(&6), "{counts:?}");
        assert_eq!(counts.get("host-a"), None, "{counts:?}");
    }

    #[test]
    fn aggregated_stays_where_the_owner_already_is() {
        let mut w = world();
        // Two replicas already on the host: the next ones join them while it has room.
        w.place(0, replica("old-1"));
        w.place(0, replica("old-2"));
        let p = ClusterCapacity::new(&ClusterCapacityArgs {
            mode: CapacityMode::Aggregated,
        });
        let counts = run(&p, &mut w, 3);
        assert_eq!(counts.get("host-a"), Some(&2), "{counts:?}");
        assert_eq!(counts.get("mcsched-west"), Some(&1), "{counts:?}");
    }

    #[test]
    fn a_pod_without_owner_goes_where_most_fit() {
        let w = world();
        let p = ClusterCapacity::new(&ClusterCapacityArgs::default());
        let pod = pod_requesting("bare", &[("cpu", "1")]);
        let snapshot = Snapshot::from_nodes(w.host.clone());
        let mut state = CycleState::new();
        state.write(LEAF_CYCLE_KEY, w.cycle());
        assert!(
            p.pre_score(
                &mut state,
                &pod,
                &crate::snapshot::NodeList::from_nodes(w.host.clone()),
                &snapshot
            )
            .is_success()
        );
        let scores: Vec<i64> = w
            .host
            .iter()
            .map(|n| p.score(&state, &pod, n).unwrap_or(-1))
            .collect();
        assert_eq!(scores, vec![0, 100, 0]);
    }

    #[test]
    fn leaf_nodes_that_are_cordoned_tainted_or_not_ready_hold_nothing() {
        let mut w = world();
        let cordoned = node_with("e2", |n| {
            n.spec.get_or_insert_default().unschedulable = Some(true);
            ready(n);
        });
        let tainted = node_with("e3", |n| {
            n.spec.get_or_insert_default().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "gpu".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]);
            ready(n);
        });
        let not_ready = node_with("e4", |_| {});
        if let Some(east) = w.leaves.get_mut("east") {
            east.extend([cordoned, tainted, not_ready].map(Arc::new));
        }
        let pod = pod_requesting("p", &[("cpu", "1")]);
        let fits = fits_per_cluster(&pod, &Snapshot::from_nodes(w.host.clone()), &w.cycle());
        assert_eq!(fits.get(&Some("east".to_string())), Some(&8));
    }
}
