//! The pod group cycle's placement extension points as kube-scheduler v1.37's framework
//! runs them: PlacementFeasible (GangScheduling's, the one kube has) and the profile's
//! PlacementScore plugins with their placement weights.

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

    /// kube's `RunPlacementScorePlugins`, one total per placement: each of the profile's
    /// PlacementScore plugins scores every placement, normalizes its scores (if it
    /// does), and each score in [0, 100] counts times the plugin's placement weight.
    /// `scheduled`: the group's members scheduled before this cycle. Err: kube's error.
    pub fn run_placement_score(
        &self,
        scheduled: usize,
        placements: &[PlacementAssignments<'_>],
    ) -> Result<Vec<i64>, Status> {
        let mut per_plugin: Vec<(&'static str, i64, Vec<i64>)> = Vec::new();
        for (p, weight) in &self.placement_score {
            let Some(ps) = p.as_placement_score() else {
                continue;
            };
            let mut scores: Vec<i64> = (placements.iter())
                .map(|a| ps.score_placement(scheduled, a.nodes, &a.proposed))
                .collect();
            if let Err(e) = ps.normalize_placement_scores(&mut scores) {
                return Err(Status::error(format!(
                    "running NormalizePlacementScore on PlacementScore plugins: plugin {:?} failed with: {e}",
                    p.name()
                )));
            }
            per_plugin.push((p.name(), *weight, scores));
        }
        let mut totals = vec![0i64; placements.len()];
        for (name, weight, scores) in per_plugin {
            for (total, score) in totals.iter_mut().zip(scores) {
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&score) {
                    return Err(Status::error(format!(
                        "applying score defaultWeights on PlacementScore plugins: plugin {name:?} returns an invalid score {score}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing"
                    )));
                }
                *total += score * weight;
            }
        }
        Ok(totals)
    }
}
