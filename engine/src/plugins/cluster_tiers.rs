//! ClusterTiers: host first, then overflow to leaves tier by tier (Karmada's "local
//! first, then the cloud"). A tier names clusters (the host is `host`) or selects nodes
//! by label; a node belongs to the first tier that takes it and scores
//! `100·(tiers − i)/tiers` for tier `i`, nodes in no tier 0. With a weight above the
//! other plugins' sum, a later tier is used only while no earlier one has room.

use mcsched_shared::config::{ClusterTier, ClusterTiersArgs};
use mcsched_shared::selectors::label_selector_matches;

use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin, ScorePlugin, Status};
use crate::snapshot::{NodeInfo, PodInfo};

pub(crate) const NAME: &str = "ClusterTiers";

pub(crate) struct ClusterTiers {
    tiers: Vec<ClusterTier>,
}

impl ClusterTiers {
    pub(crate) fn new(args: &ClusterTiersArgs) -> Self {
        ClusterTiers {
            tiers: args.tiers.clone(),
        }
    }

    /// The index of the first tier `node` belongs to.
    fn tier_of(&self, node: &NodeInfo) -> Option<usize> {
        let cluster = node.cluster_name();
        self.tiers.iter().position(|t| match t {
            ClusterTier::Clusters(names) => names.iter().any(|n| n == cluster),
            ClusterTier::Selector(sel) => label_selector_matches(Some(sel), node.labels()),
        })
    }
}

impl Plugin for ClusterTiers {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl ScorePlugin for ClusterTiers {
    /// A cluster's score: a virtual node is scored itself, not as its leaf nodes.
    fn scores_members(&self) -> bool {
        false
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        // The pod's placement policy orders the clusters instead.
        if super::helper::placement_state::overrides_profile(state) {
            return Ok(0);
        }
        let len = self.tiers.len() as i64;
        Ok(match self.tier_of(node) {
            Some(i) => MAX_NODE_SCORE * (len - i as i64) / len,
            None => 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::helper::cluster_placement::tests_support::virtual_node;
    use crate::plugins::testing::{node_with, pod_with};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use std::collections::BTreeMap;

    #[test]
    fn host_first_then_on_premises_then_cloud() {
        let onprem = LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "mcsched.io/provider".to_string(),
                "onprem".to_string(),
            )])),
            ..Default::default()
        };
        let p = ClusterTiers::new(&ClusterTiersArgs {
            tiers: vec![
                ClusterTier::Clusters(vec!["host".into()]),
                ClusterTier::Selector(onprem),
                ClusterTier::Clusters(vec!["east".into(), "south".into()]),
            ],
        });
        let nodes = [
            node_with("host-a", |_| {}),
            virtual_node("west", &[("mcsched.io/provider", "onprem")]),
            virtual_node("north", &[("mcsched.io/provider", "onprem")]),
            virtual_node("east", &[("mcsched.io/provider", "aws")]),
            virtual_node("south", &[]),
            virtual_node("elsewhere", &[("mcsched.io/provider", "gcp")]),
        ];
        let pod = pod_with(|_| {});
        let scores: Vec<i64> = nodes
            .iter()
            .map(|n| p.score(&CycleState::new(), &pod, n).unwrap_or(-1))
            .collect();
        assert_eq!(scores, vec![100, 66, 66, 33, 33, 0]);
    }

    #[test]
    fn the_first_matching_tier_wins() {
        let p = ClusterTiers::new(&ClusterTiersArgs {
            tiers: vec![
                ClusterTier::Clusters(vec!["west".into()]),
                ClusterTier::Selector(LabelSelector::default()),
            ],
        });
        let pod = pod_with(|_| {});
        let west = virtual_node("west", &[]);
        let host = node_with("host-a", |_| {});
        assert_eq!(p.score(&CycleState::new(), &pod, &west), Ok(100));
        // An empty selector takes every node.
        assert_eq!(p.score(&CycleState::new(), &pod, &host), Ok(50));
    }
}
