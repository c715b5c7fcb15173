//! ClusterCost: the cheapest cluster first (Karmada's price-aware placement). A node's
//! raw score is what a pod costs there: a virtual node's `mcsched.io/cost` label, the
//! `hostCost` arg on the host's own nodes, `defaultCost` on a virtual node without a
//! usable label. NormalizeScore maps the cheapest to 100 and the dearest to 0.

use mcsched_shared::config::ClusterCostArgs;
use mcsched_shared::keys;

use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin, ScorePlugin, Status};
use crate::snapshot::{NodeInfo, PodInfo};

pub(crate) const NAME: &str = "ClusterCost";

pub(crate) struct ClusterCost {
    host_cost: i64,
    default_cost: i64,
}

impl ClusterCost {
    pub(crate) fn new(args: &ClusterCostArgs) -> Self {
        ClusterCost {
            host_cost: args.host_cost,
            default_cost: args.default_cost,
        }
    }

    pub(crate) fn cost_of(&self, node: &NodeInfo) -> i64 {
        if node.cluster.is_none() {
            return self.host_cost;
        }
        // `join --cost` writes a non-negative integer; anything else is treated as
        // unlabelled rather than failing the cycle.
        node.labels()
            .get(keys::COST_LABEL)
            .and_then(|c| c.parse::<i64>().ok())
            .filter(|c| *c >= 0)
            .unwrap_or(self.default_cost)
    }
}

impl Plugin for ClusterCost {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl ScorePlugin for ClusterCost {
    /// A cluster's score: a virtual node is scored itself, not as its leaf nodes.
    fn scores_members(&self) -> bool {
        false
    }

    fn score(&self, _state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(self.cost_of(node))
    }

    /// Linear between the cheapest (100) and the dearest (0) feasible node; all equal
    /// costs prefer nothing (100 each).
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        let (Some(&min), Some(&max)) = (scores.iter().min(), scores.iter().max()) else {
            return Status::success();
        };
        for s in scores.iter_mut() {
            *s = if max == min {
                MAX_NODE_SCORE
            } else {
                // i128: costs are user numbers and may be large.
                (i128::from(MAX_NODE_SCORE) * i128::from(max - *s) / i128::from(max - min)) as i64
            };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::helper::cluster_placement::tests_support::virtual_node;
    use crate::plugins::testing::{node_with, pod_with};

    #[test]
    fn the_cheapest_cluster_scores_highest() {
        let p = ClusterCost::new(&ClusterCostArgs {
            host_cost: 10,
            default_cost: 3,
        });
        let nodes = [
            node_with("host-a", |_| {}),
            virtual_node("west", &[("mcsched.io/cost", "5")]),
            virtual_node("east", &[("mcsched.io/cost", "1")]),
            virtual_node("bare", &[]),
            virtual_node("odd", &[("mcsched.io/cost", "cheap")]),
        ];
        let pod = pod_with(|_| {});
        let state = CycleState::new();
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| p.score(&state, &pod, n).unwrap_or(-1))
            .collect();
        assert_eq!(scores, vec![10, 5, 1, 3, 3]);
        assert!(p.normalize(&state, &pod, &mut scores).is_success());
        assert_eq!(scores, vec![0, 55, 100, 77, 77]);
    }

    #[test]
    fn equal_costs_prefer_nothing() {
        let p = ClusterCost::new(&ClusterCostArgs::default());
        let mut scores = vec![0, 0];
        p.normalize(&CycleState::new(), &pod_with(|_| {}), &mut scores);
        assert_eq!(scores, vec![100, 100]);
    }
}
