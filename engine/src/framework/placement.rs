//! The pod group cycle's placement extension points as kube-scheduler v1.37's framework
//! runs them: PlacementFeasible (GangScheduling's, the one kube has) and PlacementScore
//! (NodeResourcesFit's, weighted as its Score, and PodGroupPodsCount's).

use std::sync::Arc;

use super::{Code, Framework, MAX_NODE_SCORE, MIN_NODE_SCORE, PlacementProgress, Status};
use crate::pod_groups::GroupPolicy;
use crate::snapshot::{NodeInfo, PodInfo};

/// A placement the pod group was found feasible in (kube's `PodGroupAssignments`): its
/// nodes and the members proposed there.
pub struct PlacementAssignments<'a> {
    pub nodes: &'a [Arc<NodeInfo>],
    pub proposed: Vec<Arc<PodInfo>>,
}

impl Framework {
    /// kube's `RunPlacementFeasiblePlugins`: the first Unschedulable ends it; a Wait is
    /// kept (the last one) while the others succeed; any other code is an error.
    pub fn run_placement_feasible(
        &self,
        group: &GroupPolicy,
        progress: PlacementProgress,
    ) -> Status {
        let mut status = Status::success();
        for p in self.plugins() {
            let Some(pf) = p.as_placement_feasible() else {
                continue;
            };
            let s = pf.placement_feasible(group, progress);
            match s.code {
                Code::Success => {}
                Code::Wait => status = s.with_plugin(p.name()),
                Code::Unschedulable => return s.with_plugin(p.name()),
                Code::Error => {
                    return Status::error(format!(
                        "running PlacementFeasible plugin: {}",
                        s.message()
                    ))
                    .with_plugin(p.name());
                }
                other => {
                    return Status::error(format!(
                        "unexpected status from PlacementFeasible plugin: {other}"
                    ))
                    .with_plugin(p.name());
                }
            }
        }
        status
    }

    /// kube's `RunPlacementScorePlugins`, one total per placement: each PlacementScore
    /// plugin's score times its weight, and PodGroupPodsCount's (weight 1, which kube
    /// adds with TopologyAwareWorkloadScheduling): the members scheduled already and
    /// proposed there, scaled so that the most is 100. Err: PodGroupPodsCount's error when
    /// no placement has a member.
    pub fn run_placement_score(
        &self,
        scheduled: usize,
        placements: &[PlacementAssignments<'_>],
    ) -> Result<Vec<i64>, Status> {
        let mut totals = vec![0i64; placements.len()];
        for p in self.plugins() {
            let Some(ps) = p.as_placement_score() else {
                continue;
            };
            let Some(weight) = self.score_weight(p.name()) else {
                continue;
            };
            for (total, placement) in totals.iter_mut().zip(placements) {
                let score = ps.score_placement(placement.nodes, &placement.proposed);
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&score) {
                    return Err(Status::error(format!(
                        "applying score defaultWeights on PlacementScore plugins: plugin {:?} returns an invalid score {score}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        p.name()
                    )));
                }
                *total += score * weight;
            }
        }
        let counts: Vec<i64> = (placements.iter())
            .map(|p| (scheduled + p.proposed.len()) as i64)
            .collect();
        let max = counts.iter().copied().max().unwrap_or(0);
        if max == 0 {
            return Err(Status::error(
                "running NormalizePlacementScore on PlacementScore plugins: plugin \"PodGroupPodsCount\" failed with: no pods from pod group are assigned to any of the candidate placements",
            ));
        }
        for (total, count) in totals.iter_mut().zip(counts) {
            *total += MIN_NODE_SCORE + count * (MAX_NODE_SCORE - MIN_NODE_SCORE) / max;
        }
        Ok(totals)
    }
}
