//! kube's `schedulePod`, extenders included: the one way a pod is filtered and scored,
//! whoever asks — the live scheduling cycle, explanations of Pending pods, what-ifs and
//! the benchmarks — so that none of them can disagree with another. PostFilter
//! (preemption) runs on what it leaves, extenders' rejections included.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use mcsched_shared::explain::ExtenderAnswer;
use tracing::warn;

use crate::scheduler::extender::{Extender, ExtenderError, MAX_EXTENDER_PRIORITY};
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::framework::{
    CycleState, Filtered, FitError, Framework, MAX_NODE_SCORE, NodeStatuses, PostFilterResult,
    ScheduleResult, Status, fit_error, with_rejected,
};
use mcsched_engine::plugins::helper::placement_state;
use mcsched_engine::plugins::leaf_node_fit;
use mcsched_engine::snapshot::{NodeList, PodInfo, Snapshot};

/// Filter (plugins, then interested extenders) and Score (plugins, plus extenders'
/// priorities); `record_all` runs every filter on every node, for explanations. Runs the
/// framework's phases with `block_in_place`, so it needs a multi-threaded runtime or no
/// runtime at all.
pub async fn schedule_pod(
    fw: &Framework,
    extenders: &[Arc<Extender>],
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    record: &mut CycleRecord,
    record_all: bool,
) -> Result<ScheduleResult, Box<FitError>> {
    let interested: Vec<&Arc<Extender>> =
        extenders.iter().filter(|e| e.is_interested(pod)).collect();
    let result = if interested.is_empty() {
        tokio::task::block_in_place(|| fw.schedule(state, pod, snapshot, record, record_all))
    } else {
        with_extenders(fw, &interested, state, pod, snapshot, record, record_all).await
    };
    record.leaf_nodes = leaf_node_fit::leaf_nodes(state);
    record.leaf_notes = leaf_node_fit::leaf_notes(state);
    record.policy = placement_state::explained(state);
    result
}

/// kube's RunPostFilterPlugins on a failed cycle: the nomination and victims when one
/// succeeds (with the plugin that found them), or a result that clears an earlier
/// nomination; the plugins' message (a failure's, or v1.37's success one) goes into `fit`.
pub fn run_post_filter(
    fw: &Framework,
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    fit: &mut FitError,
) -> Option<(PostFilterResult, &'static str)> {
    if !fw.has_post_filter() || fit.num_all_nodes == 0 {
        return None;
    }
    let (res, status) = tokio::task::block_in_place(|| {
        fw.run_post_filter(state, pod, snapshot, &fit.diagnosis.node_statuses)
    });
    // Success too: v1.37's preemption says where it found room and for how many victims.
    if !status.reasons.is_empty() {
        fit.diagnosis.post_filter_msg = Some(status.message());
    }
    if status.is_success() {
        return Some((res, status.plugin));
    }
    res.clears_nomination.then_some((res, status.plugin))
}

async fn with_extenders(
    fw: &Framework,
    interested: &[&Arc<Extender>],
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    record: &mut CycleRecord,
    record_all: bool,
) -> Result<ScheduleResult, Box<FitError>> {
    let filtered =
        tokio::task::block_in_place(|| fw.filter_phase(state, pod, snapshot, record, record_all))?;
    let (mut feasible, mut statuses) = match filtered {
        Filtered::Nominated(node) => return Ok(ScheduleResult::nominated(node)),
        Filtered::Feasible(f, s) => (f, with_rejected(s, record)),
    };
    if let Err(e) = filter_by_extenders(interested, pod, &mut feasible, &mut statuses, record).await
    {
        let mut fit = fit_error(snapshot.len(), statuses);
        fit.diagnosis.pre_filter_msg = Some(e.to_string());
        return Err(Box::new(fit));
    }
    if feasible.is_empty() {
        return Err(Box::new(fit_error(snapshot.len(), statuses)));
    }
    let extra = if feasible.len() > 1 {
        prioritize_by_extenders(interested, pod, &feasible, record).await
    } else {
        None
    };
    let evaluated = record.num_evaluated;
    let feasible_nodes = feasible.len();
    let node = tokio::task::block_in_place(|| {
        fw.score_phase(state, pod, feasible, snapshot, record, extra.as_deref())
    });
    Ok(ScheduleResult {
        node,
        evaluated_nodes: evaluated,
        feasible_nodes,
    })
}

fn answer(ext: &Extender, verb: &str) -> ExtenderAnswer {
    ExtenderAnswer {
        extender: ext.name().to_string(),
        verb: verb.into(),
        error: None,
        failed_nodes: Vec::new(),
        scores: Vec::new(),
    }
}

/// kube's findNodesThatPassExtenders: each extender with a filter verb narrows the
/// feasible nodes in turn; its rejections join `statuses` as the "extender" plugin's. An
/// error ends the cycle unless the extender is ignorable.
async fn filter_by_extenders(
    interested: &[&Arc<Extender>],
    pod: &PodInfo,
    feasible: &mut NodeList,
    statuses: &mut NodeStatuses,
    record: &mut CycleRecord,
) -> Result<(), ExtenderError> {
    for ext in interested {
        if ext.config.filter_verb.is_none() || feasible.is_empty() {
            continue;
        }
        let nodes: Vec<&Node> = feasible.iter().map(|n| n.node.as_ref()).collect();
        let mut answer = answer(ext, "filter");
        match ext.filter(&pod.pod(), &nodes).await {
            Ok(res) => {
                let keep: HashSet<&str> = res.nodes.iter().map(String::as_str).collect();
                let dropped: Vec<_> = feasible
                    .iter()
                    .filter(|n| !keep.contains(&*n.name))
                    .cloned()
                    .collect();
                feasible.retain(|n| keep.contains(&*n.name));
                for (node, reason) in &res.failed {
                    statuses.insert(
                        node.clone(),
                        Status::unschedulable(reason.clone()).with_plugin("extender"),
                    );
                    answer.failed_nodes.push((node.clone(), reason.clone()));
                }
                for (node, reason) in &res.failed_unresolvable {
                    statuses.insert(
                        node.clone(),
                        Status::unresolvable(reason.clone()).with_plugin("extender"),
                    );
                    answer.failed_nodes.push((node.clone(), reason.clone()));
                }
                record_dropped(record, ext, dropped, statuses);
            }
            Err(e) if ext.config.ignorable => {
                warn!(extender = %ext.name(), error = %e, "ignorable extender failed; skipping it");
                answer.error = Some(e.to_string());
            }
            Err(e) => {
                answer.error = Some(e.to_string());
                record.extenders.push(answer);
                return Err(e);
            }
        }
        record.extenders.push(answer);
    }
    Ok(())
}

/// Nodes an extender dropped join the explanation's rejected nodes, after the filters
/// they passed; one it dropped without a reason says so.
fn record_dropped(
    record: &mut CycleRecord,
    ext: &Extender,
    dropped: Vec<Arc<mcsched_engine::snapshot::NodeInfo>>,
    statuses: &NodeStatuses,
) {
    for node in dropped {
        let status = statuses.get(&*node.name).cloned().unwrap_or_else(|| {
            Status::unschedulable(format!("filtered out by extender {}", ext.name()))
                .with_plugin("extender")
        });
        if let Some(verdicts) = record.verdicts.get_mut(&*node.name) {
            verdicts.push(mcsched_engine::framework::runtime::verdict(
                status.plugin,
                &status,
            ));
        }
        record.rejected.push((node, status));
    }
}

/// Extenders' priorities, weighted and scaled to node scores as kube's prioritizeNodes
/// does, aligned with `feasible`; `None` when no extender prioritizes. Errors count as
/// zero scores, as in kube.
async fn prioritize_by_extenders(
    interested: &[&Arc<Extender>],
    pod: &PodInfo,
    feasible: &NodeList,
    record: &mut CycleRecord,
) -> Option<Vec<i64>> {
    let mut extra: Option<Vec<i64>> = None;
    let nodes: Vec<&Node> = feasible.iter().map(|n| n.node.as_ref()).collect();
    for ext in interested
        .iter()
        .filter(|e| e.config.prioritize_verb.is_some())
    {
        let mut answer = answer(ext, "prioritize");
        match ext.prioritize(&pod.pod(), &nodes).await {
            Ok(scores) => {
                let totals = extra.get_or_insert_with(|| vec![0; feasible.len()]);
                for (t, n) in totals.iter_mut().zip(feasible.iter()) {
                    let s = scores.get(&*n.name).copied().unwrap_or(0);
                    *t += s * ext.config.weight * (MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY);
                }
                answer.scores = scores.into_iter().collect();
            }
            Err(e) => {
                warn!(extender = %ext.name(), error = %e, "extender prioritize failed");
                answer.error = Some(e.to_string());
            }
        }
        record.extenders.push(answer);
    }
    extra
}
