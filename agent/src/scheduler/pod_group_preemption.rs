//! The pod group cycle's PodGroupPostFilter (kube v1.37's
//! `RunPodGroupPostFilterPlugins`, with DefaultPreemption's pod group preemption): when
//! the group did not fit, whether evicting pods of lower priority makes room for it. The evaluation is the engine's
//! (`mcsched_engine::preemption`); the group is scheduled again on the cluster
//! without the victims by the same algorithm, and the victims left are evicted by the
//! agent's executor, as kube's async preemption.

use std::collections::BTreeMap;
use std::sync::Arc;

use tracing::{debug, info};

use super::Shared;
use super::pod_group_algorithm::{Group, GroupStatus, World, run_root};
use super::preemption::{Preemptor as Evictor, evict_for};
use mcsched_engine::framework::{Code, Framework, PodGroupRelief};
use mcsched_engine::preemption::{
    MESSAGE_PREFIX, MutableSnapshot, NO_VICTIMS, ONGOING, Preemptor, cluster_victims,
    ongoing_preemption, potential_victims, select_victims,
};

/// What PodGroupPostFilter found: where each member would go (`namespace/name` → node;
/// an empty node clears its nomination), when it found room.
pub(super) type Nominations = BTreeMap<String, String>;

/// kube's `RunPodGroupPostFilterPlugins` over the profile's PodGroupPostFilter plugins,
/// in order: the first success or unresolvable verdict as it is; else Unschedulable with
/// every plugin's reasons; an error wrapped with its plugin's name.
pub(super) async fn run_pod_group_post_filter(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    leader: &tokio::sync::watch::Receiver<bool>,
    group: &Group,
) -> (Option<Nominations>, GroupStatus) {
    let mut reasons = Vec::new();
    for (plugin, relief) in fw.pod_group_post_filters() {
        let (nominations, status) = match relief {
            PodGroupRelief::Preemption => {
                pod_group_post_filter(shared, fw, leader, group, plugin).await
            }
            PodGroupRelief::Nothing => (None, verdicts(Code::Unschedulable, Vec::new())),
        };
        match status.code {
            Code::Success | Code::UnschedulableAndUnresolvable => return (nominations, status),
            Code::Unschedulable => reasons.extend(status.reasons),
            _ => {
                let message = format!(
                    "error in {plugin:?} PodGroupPostFilter plugins: {}",
                    status.message()
                );
                return (None, GroupStatus::error(message));
            }
        }
    }
    (None, verdicts(Code::Unschedulable, reasons))
}

/// DefaultPreemption's `PodGroupPostFilter`: the evaluator's verdict, its message after
/// "pod group preemption: ".
async fn pod_group_post_filter(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    leader: &tokio::sync::watch::Receiver<bool>,
    group: &Group,
    plugin: &'static str,
) -> (Option<Nominations>, GroupStatus) {
    let (nominations, mut status) = preempt(shared, fw, leader, group, plugin).await;
    mcsched_engine::metrics::global().workload_preemption_attempt(&status.code.to_string());
    let message = status.message();
    if !message.is_empty() {
        status = verdicts(status.code, vec![format!("{MESSAGE_PREFIX}{message}")]);
    }
    (nominations, status)
}

fn verdicts(code: Code, reasons: Vec<String>) -> GroupStatus {
    GroupStatus {
        code,
        reasons,
        err: None,
    }
}

fn verdict(code: Code, message: &str) -> GroupStatus {
    verdicts(code, vec![message.to_string()])
}

/// kube's `PodGroupEvaluator.Preempt`: eligibility, an ongoing preemption, then the
/// victims, the group scheduled without them, and the ones it still needs gone evicted.
async fn preempt(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    leader: &tokio::sync::watch::Receiver<bool>,
    group: &Group,
    plugin: &'static str,
) -> (Option<Nominations>, GroupStatus) {
    let groups = &shared.profiles.pod_groups;
    let members = group.members.iter().map(|m| m.pod.clone()).collect();
    let preemptor = Preemptor::new(&group.policy, members, groups.preemption_policy_gate());
    if let Err(message) = preemptor.eligible() {
        debug!(group = %group.key, reason = message, "pod group is not eligible for preemption");
        return (None, verdict(Code::Unschedulable, message));
    }
    let snapshot = shared.cache().snapshot();
    if ongoing_preemption(&preemptor, &snapshot, groups) {
        // kube's buildCurrentNominatingInfos: every member where its status says.
        let current = (preemptor.members.iter())
            .map(|m| {
                let node = m.nominated_node_name().unwrap_or_default().to_string();
                (m.key.clone(), node)
            })
            .collect();
        return (Some(current), verdict(Code::Success, ONGOING));
    }
    // kube's evaluate and selectVictimsOnDomain, timed as kube's evaluate.
    let started = std::time::Instant::now();
    let evaluated = |status: GroupStatus| {
        mcsched_engine::metrics::global().preemption_evaluated(
            "podgroup",
            &status.code.to_string(),
            started.elapsed().as_secs_f64(),
        );
        status
    };
    let potential = potential_victims(cluster_victims(&snapshot, groups), &preemptor);
    if potential.is_empty() {
        return (
            None,
            evaluated(verdict(Code::UnschedulableAndUnresolvable, NO_VICTIMS)),
        );
    }
    let mut without = MutableSnapshot::new(&snapshot);
    drop(snapshot);
    for v in &potential {
        for (pod, node) in &v.pods {
            without.remove_pod(node, &pod.key);
        }
    }
    let mut world = World::Changed(without);
    let rerun = run_root(shared, fw, group, &mut world).await;
    if !rerun.status.is_success() {
        return (None, evaluated(rerun.status));
    }
    let mut assignments = rerun.assignments();
    let Some(mut without) = world.into_changed() else {
        return (
            None,
            evaluated(GroupStatus::error("pod group preemption lost its snapshot")),
        );
    };
    let selected = match tokio::task::block_in_place(|| {
        select_victims(fw, &mut without, potential, &mut assignments)
    }) {
        Ok(s) => s,
        Err(s) => return (None, evaluated(GroupStatus::error(s.message()))),
    };
    evaluated(verdict(Code::Success, ""));
    // kube's actuatePodGroupPreemption, asynchronous: the candidate is the cluster.
    if crate::control::leader::may_act(leader, &shared.lease_health) {
        mcsched_engine::metrics::global().preempting(
            "podgroup",
            selected.victims.len(),
            selected.group_disruptions,
            selected.pdb_violations,
        );
        let by = Evictor {
            kind: "podgroup",
            uid: group.policy.uid.clone(),
            key: group.key.clone(),
            candidate: Some("cluster".to_string()),
        };
        // Lower-priority pods nominated to the candidate lose their nomination: none are
        // nominated to "cluster".
        evict_for(
            &shared.bind_ctx.client,
            &shared.events,
            fw,
            plugin,
            &by,
            &selected.victims,
            &[],
        );
        info!(group = %group.key, victims = selected.victims.len(), pdb_violations = selected.pdb_violations, group_disruptions = selected.group_disruptions, "pod group preempting");
    }
    let message = format!(
        "found a placement for podgroup, preempting {} victims",
        selected.victims.len()
    );
    (Some(selected.nominated), verdict(Code::Success, &message))
}
