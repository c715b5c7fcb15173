//! ClusterWeights: the replicas of one owner divided between clusters by static weights
//! (Karmada's static weight division). Each replica goes to the feasible
//! cluster furthest below its share, so 2:1 over 30 replicas gives 20/10.

use std::collections::{HashMap, HashSet};

use mcsched_shared::config::ClusterWeightsArgs;

use super::helper::cluster_placement::{favour, largest_deficit, placed_per_cluster};
use crate::framework::{CycleState, Plugin, PreScorePlugin, ScorePlugin, Status};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "ClusterWeights";

pub(crate) struct ClusterWeights {
    weights: HashMap<String, i64>,
    host_cluster_name: String,
}

impl ClusterWeights {
    pub(crate) fn new(args: &ClusterWeightsArgs) -> Self {
        ClusterWeights {
            weights: args.weights.iter().map(|(c, w)| (c.clone(), *w)).collect(),
            host_cluster_name: args.host_cluster_name.clone(),
        }
    }

    /// A virtual node's leaf, or the host's name for a host node.
    fn cluster_of<'a>(&'a self, node: &'a NodeInfo) -> &'a str {
        node.cluster.as_deref().unwrap_or(&self.host_cluster_name)
    }
}

/// The clusters this cycle's pod should go to.
#[derive(Clone)]
struct Chosen(HashSet<String>);

impl Plugin for ClusterWeights {
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

impl PreScorePlugin for ClusterWeights {
    /// Skip for pods without a controller (nothing to divide) or with no weights.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &crate::snapshot::NodeList,
        snapshot: &Snapshot,
    ) -> Status {
        let Some(owner) = pod.controller_uid() else {
            return Status::skip();
        };
        if self.weights.is_empty() || super::helper::placement_state::overrides_profile(state) {
            return Status::skip();
        }
        let placed = placed_per_cluster(snapshot, owner, pod, |n| {
            let c = self.cluster_of(n);
            self.weights.contains_key(c).then(|| c.to_string())
        });
        let candidates: HashSet<String> = nodes
            .iter()
            .map(|n| self.cluster_of(n).to_string())
            .collect();
        state.write(
            NAME,
            Chosen(largest_deficit(&self.weights, &placed, &candidates)),
        );
        Status::success()
    }
}

impl ScorePlugin for ClusterWeights {
    /// A cluster's score: a virtual node is scored itself, not as its leaf nodes.
    fn scores_members(&self) -> bool {
        false
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let chosen = state
            .read::<Chosen>(NAME)
            .is_some_and(|c| c.0.contains(self.cluster_of(node)));
        Ok(favour(chosen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::helper::cluster_placement::replica_loop::{
        owned_pod, run_replicas, with_owner,
    };
    use crate::plugins::helper::cluster_placement::tests_support::virtual_node;
    use crate::plugins::testing::{node_with, pod_with};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn plugin(weights: &[(&str, i64)]) -> ClusterWeights {
        ClusterWeights::new(&ClusterWeightsArgs {
            weights: weights
                .iter()
                .map(|(c, w)| (c.to_string(), *w))
                .collect::<BTreeMap<_, _>>(),
            host_cluster_name: "host".into(),
        })
    }

    #[test]
    fn two_to_one_over_thirty_replicas_gives_twenty_and_ten() {
        let p = plugin(&[("west", 2), ("east", 1)]);
        let nodes = vec![
            node_with("host-a", |_| {}),
            virtual_node("west", &[]),
            virtual_node("east", &[]),
        ];
        let counts = run_replicas(&p, nodes, 30, |_, _| true);
        assert_eq!(counts.get("mcsched-west"), Some(&20), "{counts:?}");
        assert_eq!(counts.get("mcsched-east"), Some(&10), "{counts:?}");
        assert_eq!(counts.get("host-a"), None, "{counts:?}");
    }

    #[test]
    fn the_host_takes_part_under_its_cluster_name() {
        let p = ClusterWeights::new(&ClusterWeightsArgs {
            weights: BTreeMap::from([("home".to_string(), 1), ("west".to_string(), 3)]),
            host_cluster_name: "home".into(),
        });
        let nodes = vec![
            node_with("host-a", |_| {}),
            node_with("host-b", |_| {}),
            virtual_node("west", &[]),
        ];
        let counts = run_replicas(&p, nodes, 8, |_, _| true);
        let host = counts.get("host-a").unwrap_or(&0) + counts.get("host-b").unwrap_or(&0);
        assert_eq!(host, 2, "{counts:?}");
        assert_eq!(counts.get("mcsched-west"), Some(&6), "{counts:?}");
    }

    #[test]
    fn a_full_cluster_leaves_its_share_to_the_others() {
        let p = plugin(&[("west", 2), ("east", 1)]);
        let nodes = vec![virtual_node("west", &[]), virtual_node("east", &[])];
        // West takes no more than 4: the other replicas go east.
        let counts = run_replicas(&p, nodes, 9, |node, placed| {
            node != "mcsched-west" || placed < 4
        });
        assert_eq!(counts.get("mcsched-west"), Some(&4), "{counts:?}");
        assert_eq!(counts.get("mcsched-east"), Some(&5), "{counts:?}");
    }

    #[test]
    fn pods_without_a_controller_are_skipped() {
        let p = plugin(&[("west", 2)]);
        let mut state = CycleState::new();
        let bare = pod_with(|_| {});
        let s = p.pre_score(&mut state, &bare, &Default::default(), &Snapshot::default());
        assert!(s.is_skip());
        let owned = owned_pod("r-1", "rs-1");
        let s = p.pre_score(
            &mut state,
            &owned,
            &Default::default(),
            &Snapshot::default(),
        );
        assert!(s.is_success());
    }

    #[test]
    fn other_owners_and_terminating_pods_do_not_count() {
        let p = plugin(&[("west", 1), ("east", 1)]);
        let mut west = virtual_node("west", &[]);
        // Two pods of another ReplicaSet and one terminating replica on west.
        west.add_pod(Arc::new(owned_pod("other-1", "rs-2")));
        west.add_pod(Arc::new(owned_pod("other-2", "rs-2")));
        west.add_pod(Arc::new(with_owner(
            pod_with(|p| {
                p.metadata.name = Some("old".into());
                p.metadata.uid = Some("uid-old".into());
                p.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }),
            "rs-1",
        )));
        let mut east = virtual_node("east", &[]);
        east.add_pod(Arc::new(owned_pod("mine", "rs-1")));
        let nodes = vec![Arc::new(west), Arc::new(east)];
        let snapshot = Snapshot::from_nodes(nodes.clone());
        let pod = owned_pod("new", "rs-1");
        let mut state = CycleState::new();
        assert!(
            p.pre_score(
                &mut state,
                &pod,
                &crate::snapshot::NodeList::from_nodes(nodes.clone()),
                &snapshot
            )
            .is_success()
        );
        let scores: Vec<i64> = nodes
            .iter()
            .map(|n| p.score(&state, &pod, n).unwrap_or(-1))
            .collect();
        assert_eq!(scores, vec![100, 0]);
    }
}
