//! PodGroupPodsCount (kube-scheduler v1.37, under TopologyAwareWorkloadScheduling): among
//! the placements a pod group fits in, the one that schedules the most of its members
//! scores best.

use std::sync::Arc;

use crate::framework::{MAX_NODE_SCORE, MIN_NODE_SCORE, PlacementScorePlugin, Plugin};
use crate::snapshot::{NodeInfo, PodInfo};

pub(crate) const NAME: &str = "PodGroupPodsCount";

pub(crate) struct PodGroupPodsCount;

impl Plugin for PodGroupPodsCount {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_placement_score(&self) -> Option<&dyn PlacementScorePlugin> {
        Some(self)
    }
}

impl PlacementScorePlugin for PodGroupPodsCount {
    /// The members scheduled before the cycle and those proposed in the placement.
    fn score_placement(
        &self,
        scheduled: usize,
        _nodes: &[Arc<NodeInfo>],
        proposed: &[Arc<PodInfo>],
    ) -> i64 {
        i64::try_from(scheduled.saturating_add(proposed.len())).unwrap_or(i64::MAX)
    }

    /// Scaled so that the most members is the highest score. kube errs when no placement
    /// has a member (its GangScheduling lets no such group through, which this plugin
    /// counts on).
    fn normalize_placement_scores(&self, scores: &mut [i64]) -> Result<(), String> {
        let max = scores.iter().copied().max().unwrap_or(0);
        if max == 0 {
            return Err(
                "no pods from pod group are assigned to any of the candidate placements".into(),
            );
        }
        for s in scores.iter_mut() {
            *s = MIN_NODE_SCORE + s.saturating_mul(MAX_NODE_SCORE - MIN_NODE_SCORE) / max;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placement_with_the_most_members_scores_highest() {
        let mut scores = vec![2, 4, 1];
        PodGroupPodsCount
            .normalize_placement_scores(&mut scores)
            .unwrap();
        assert_eq!(scores, vec![50, 100, 25]);
    }

    #[test]
    fn no_member_anywhere_is_kube_s_error() {
        let mut scores = vec![0, 0];
        let err = PodGroupPodsCount
            .normalize_placement_scores(&mut scores)
            .unwrap_err();
        assert_eq!(
            err,
            "no pods from pod group are assigned to any of the candidate placements"
        );
    }
}
