//! kube-scheduler v1.37's pod group scheduling cycle (`schedule_one_podgroup.go`): the
//! group's queued members are checked together (one profile, the group's priority), the
//! algorithm ([`super::pod_group_algorithm`]) places them on the cluster as the earlier
//! ones leave it, and its verdict is the group's: when GangScheduling's minCount is met
//! the members placed are assumed for real, pass Permit and are bound; when it is not,
//! PodGroupPostFilter (pod group preemption, [`super::pod_group_preemption`]) may make
//! room, and every member waits, told why, the PodGroup's condition saying the same.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Api;
use kube::api::{Patch, PatchParams};
use mcsched_shared::pod_group_versions::{PodGroupV1alpha2, PodGroupVersion};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::Shared;
use super::failure::{Failure, handle_failure};
use super::pod_group_algorithm::{
    GROUP_UNSCHEDULABLE, Group, GroupResult, GroupStatus, KeySource, Outcome, World, run_root,
};
use super::pod_group_preemption::run_pod_group_post_filter;
use super::scheduling_cycle::{Placing, assume_reserve_permit};
use mcsched_engine::framework::{Code, Framework, QueuedPodInfo};
use mcsched_engine::nominator::Nominating;
use mcsched_engine::pod_groups::{GroupPolicy, group_key_of};
use mcsched_engine::snapshot::PodInfo;
use mcsched_shared::keys;

#[cfg(test)]
pub(super) use super::pod_group_algorithm::MAX_PLACEMENT_ATTEMPTS;

/// The group `info`'s pod is scheduled with, when its PodGroup exists (kube: when the
/// GenericWorkload gate is on, which is when the API server serves PodGroups).
pub(super) fn group_to_schedule(shared: &Shared, info: &QueuedPodInfo) -> Option<String> {
    let key = group_key_of(&info.pod.object())?;
    shared.profiles.pod_groups.policy(&key).map(|_| key)
}

/// kube's scheduleOnePodGroup and podGroupCycle for the group `key`, `first` popped.
pub(super) async fn pod_group_cycle(
    shared: &Arc<Shared>,
    bindings: &Arc<Semaphore>,
    leader: &tokio::sync::watch::Receiver<bool>,
    first: QueuedPodInfo,
    key: String,
) {
    let started = Instant::now();
    let members = take_members(shared, first);
    // kube's reconcilePodGroupWithSnapshot: the PodGroup as it is now.
    let Some(policy) = shared.profiles.pod_groups.policy(&key) else {
        let message = format!(
            "podgroup.scheduling.k8s.io {:?} not found",
            group_name(&key)
        );
        failure_before_scheduling(shared, &key, None, members, &message).await;
        return;
    };
    let fw = match validate(shared, &policy, &key, &members) {
        Ok(fw) => fw,
        Err(message) => {
            failure_before_scheduling(shared, &key, Some(&policy), members, &message).await;
            return;
        }
    };
    // kube's skipPodGroupPodSchedule: being deleted, or placed already.
    let members: Vec<QueuedPodInfo> = (members.into_iter())
        .filter(|m| {
            let assumed = shared.cache().assumed_uid(&m.pod.key) == Some(m.pod.uid.as_str());
            let skip = m.pod.terminating() || assumed;
            if skip {
                shared.queue.done(&m.pod);
            }
            !skip
        })
        .collect();
    if members.is_empty() {
        return;
    }
    debug!(group = %key, members = members.len(), "attempting to schedule pod group");
    let group = group_of(shared, key, policy, members);
    let mut result = run_root(shared, &fw, &group, &mut World::Cache).await;
    result.complete(&group.members);
    mcsched_engine::metrics::global()
        .pod_group_algorithm_duration
        .observe(started.elapsed().as_secs_f64());
    // PodGroupPostFilter when the group is Unschedulable (mcsched's refused search
    // aside: the same search would be refused again).
    if result.status.code == Code::Unschedulable && result.searched {
        let (nominations, status) = run_pod_group_post_filter(shared, &fw, leader, &group).await;
        apply_post_filter(&mut result, nominations, status);
    }
    submit(shared, bindings, leader, &fw, &group, result, started).await;
}

fn group_name(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, name)| name)
}

/// The group to schedule: the topology key it is kept within (its own, else a
/// PlacementPolicy's) and whether it goes by placements.
fn group_of(
    shared: &Shared,
    key: String,
    policy: Arc<GroupPolicy>,
    members: Vec<QueuedPodInfo>,
) -> Group {
    let own_key =
        (policy.topology_keys.first().cloned()).map(|k| (k, KeySource::PodGroup(key.clone())));
    let policy_key = own_key
        .is_none()
        .then(|| policy_topology_key(shared, &members))
        .flatten();
    // kube's TopologyAwareWorkloadScheduling gate picks the algorithm: by placements
    // (one per domain, or all nodes without a key), or the members over every node. A
    // PlacementPolicy's constraint is mcsched's own, and needs no gate.
    let by_placements = shared.profiles.pod_groups.topology_aware() || policy_key.is_some();
    Group {
        key,
        policy,
        members,
        topology_key: own_key.or(policy_key),
        by_placements,
    }
}

/// The topology key of the PlacementPolicy selecting the group's first member (members
/// share their template's labels), when it asks to keep pod groups in one domain.
fn policy_topology_key(shared: &Shared, members: &[QueuedPodInfo]) -> Option<(String, KeySource)> {
    let first = members.first()?;
    let policy = shared.cache().policies().for_pod(&first.pod.meta)?;
    if policy.invalid.is_some() {
        // Its pods are kept Pending by the PlacementPolicy plugin, with the reason.
        return None;
    }
    let key = policy.spec.pod_group_constraints.as_ref()?.topology_key()?;
    Some((key.to_string(), KeySource::Policy(policy.reference.clone())))
}

/// `first` and every other member waiting in the queue, in kube's
/// PodGroupMemberPodsOrderingFunc order: higher priority, more attempts, longer queued,
/// then by name.
fn take_members(shared: &Shared, first: QueuedPodInfo) -> Vec<QueuedPodInfo> {
    let Some(key) = group_key_of(&first.pod.object()) else {
        return vec![first];
    };
    let mut members = vec![first];
    for (name, pod) in shared.profiles.pod_groups.state(&key).unscheduled() {
        if name == members[0].pod.name {
            continue;
        }
        if let Some(info) = shared.queue.pop_specific(mcsched_engine::queue::id(&pod)) {
            members.push(info);
        }
    }
    members.sort_by(|a, b| {
        (b.pod.priority().cmp(&a.pod.priority()))
            .then(b.attempts.cmp(&a.attempts))
            .then(a.timestamp().cmp(&b.timestamp()))
            .then(a.pod.name.cmp(&b.pod.name))
    });
    members
}

/// A pod's preemption policy, PreemptLowerPriority when unset.
fn preemption_policy(pod: &PodInfo) -> String {
    (pod.object().spec.as_ref())
        .and_then(|s| s.preemption_policy.clone())
        .unwrap_or_else(|| "PreemptLowerPriority".to_string())
}

/// kube's validatePodGroup: every member queued and scheduled of one profile, of the
/// group's priority, of one preemption policy (the group's, under the
/// PodGroupPreemptionPolicy gate); the profile exists. Its framework, or kube's error.
fn validate(
    shared: &Shared,
    policy: &GroupPolicy,
    key: &str,
    members: &[QueuedPodInfo],
) -> Result<Arc<Framework>, String> {
    let scheduler_name = (members.first())
        .map(|m| mcsched_shared::pod::scheduler_name(&m.pod.object()).to_string())
        .unwrap_or_default();
    let gate = shared.profiles.pod_groups.preemption_policy_gate();
    let mut group_policy = gate.then(|| {
        (policy.preemption_policy.clone()).unwrap_or_else(|| "PreemptLowerPriority".to_string())
    });
    let mut check = |pod: &PodInfo| -> Result<(), String> {
        let name = mcsched_shared::pod::scheduler_name(&pod.object()).to_string();
        if name != scheduler_name {
            return Err(format!(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: {name:?} and {scheduler_name:?}"
            ));
        }
        if pod.priority() != policy.priority {
            return Err(format!(
                "all pods in a single pod group should have the same priority as the pod group's priority, got {} and {}",
                pod.priority(),
                policy.priority
            ));
        }
        let own = preemption_policy(pod);
        match &group_policy {
            Some(p) if gate && *p != own => Err(format!(
                "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy, got {own} and {p}"
            )),
            Some(p) if *p != own => Err(format!(
                "all pods in a single pod group should have the same preemption policy, got {own} and {p}"
            )),
            Some(_) => Ok(()),
            None => {
                group_policy = Some(own);
                Ok(())
            }
        }
    };
    for m in members {
        check(&m.pod)?;
    }
    for pod in shared.profiles.pod_groups.state(key).scheduled() {
        check(&pod)?;
    }
    (shared.profiles.get(&scheduler_name).cloned())
        .ok_or_else(|| format!("profile not found for scheduler name {scheduler_name:?}"))
}

/// kube's handlePodGroupFailureBeforeScheduling: each member fails with the error (a
/// member of no profile here just leaves the queue), and the PodGroup's condition says it.
async fn failure_before_scheduling(
    shared: &Shared,
    key: &str,
    policy: Option<&GroupPolicy>,
    members: Vec<QueuedPodInfo>,
    message: &str,
) {
    debug!(group = %key, %message, "pod group not scheduled");
    for m in members {
        let name = mcsched_shared::pod::scheduler_name(&m.pod.object()).to_string();
        if shared.profiles.get(&name).is_none() {
            shared.queue.done(&m.pod);
            continue;
        }
        handle_failure(
            shared,
            &name,
            m,
            Failure::Error(message.to_string()),
            None,
            Instant::now(),
        );
    }
    if policy.is_some() {
        set_condition(shared, key, "False", "SchedulerError", message).await;
    }
}

/// kube's applyPodGroupPostFilterResult: room found, the group waits for it, each member
/// nominated where it would go; an error is the group's status; any other verdict is
/// added to the group's message.
fn apply_post_filter(
    result: &mut GroupResult,
    nominations: Option<BTreeMap<String, String>>,
    status: GroupStatus,
) {
    if status.is_success() {
        result.waiting_on_preemption = true;
        let nominations = nominations.unwrap_or_default();
        for m in &mut result.members {
            if let Some(node) = nominations.get(&m.info.pod.key) {
                m.nominating = Some(Nominating::Override(node.clone()));
            }
        }
    }
    if status.is_error() {
        result.status = status;
    } else {
        result.status.reasons.push(status.message());
    }
}

/// kube's submitPodGroupAlgorithmResult: with the group feasible, the members placed are
/// assumed, reserved and through Permit for real, and bound; every other member fails
/// with its own status, the group's, or (placed in a group that is not) the group's
/// message after "pod group is unschedulable"; the PodGroup's condition says the group's.
async fn submit(
    shared: &Arc<Shared>,
    bindings: &Arc<Semaphore>,
    leader: &tokio::sync::watch::Receiver<bool>,
    fw: &Arc<Framework>,
    group: &Group,
    result: GroupResult,
    started: Instant,
) {
    let scheduler_name = fw.scheduler_name.clone();
    let status = result.status.clone();
    let waiting = result.waiting_on_preemption;
    let (mut placed, mut refused) = (0usize, 0usize);
    for m in result.members {
        if status.is_error() {
            refused += 1;
            let failure = match &m.outcome {
                Outcome::Error(e) => Failure::Error(e.clone()),
                _ => Failure::Error(status.message()),
            };
            handle_failure(
                shared,
                &scheduler_name,
                m.info,
                failure,
                Some(&m.record),
                m.started,
            );
            continue;
        }
        let own = m.own_failure();
        let Outcome::Placed {
            node,
            state,
            leaf_domain,
            nodes,
        } = m.outcome
        else {
            refused += 1;
            if let Some(failure) = own {
                handle_failure(
                    shared,
                    &scheduler_name,
                    m.info,
                    failure,
                    Some(&m.record),
                    m.started,
                );
            }
            continue;
        };
        if !status.is_success() {
            refused += 1;
            let failure = if !status.is_rejected() {
                Failure::Error(format!(
                    "received unexpected pod group scheduling algorithm status code: {}",
                    status.code
                ))
            } else if waiting {
                Failure::Group(status.message(), m.nominating.unwrap_or(Nominating::Noop))
            } else {
                Failure::Group(
                    format!("{GROUP_UNSCHEDULABLE}, {}", status.message()),
                    Nominating::Override(String::new()),
                )
            };
            handle_failure(
                shared,
                &scheduler_name,
                m.info,
                failure,
                Some(&m.record),
                m.started,
            );
            continue;
        }
        if let Some(domain) = leaf_domain
            && let Err(e) = write_leaf_domain(shared, &m.info.pod, &domain).await
        {
            refused += 1;
            let failure = Failure::Error(format!("writing the pod's leaf domain: {e}"));
            handle_failure(
                shared,
                &scheduler_name,
                m.info,
                failure,
                Some(&m.record),
                m.started,
            );
            continue;
        }
        let key = m.info.pod.key.clone();
        let record = m.record.clone();
        let placing = Placing {
            fw: fw.clone(),
            state,
            info: m.info,
            node: node.clone(),
            record: m.record,
            started: m.started,
        };
        match assume_reserve_permit(shared, placing) {
            Ok(p) => {
                placed += 1;
                (shared.explanations).record_success(&scheduler_name, &key, &record, &node, nodes);
                super::spawn_binding(shared, bindings, leader, p).await;
            }
            Err(r) => {
                refused += 1;
                handle_failure(
                    shared,
                    &scheduler_name,
                    r.info,
                    r.failure,
                    Some(&r.record),
                    started,
                );
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let metrics = mcsched_engine::metrics::global();
    let (condition, reason, message, outcome) = if status.is_success() {
        ("True", "Scheduled", status.message(), "scheduled")
    } else if status.is_rejected() {
        let outcome = if waiting {
            "waiting_on_preemption"
        } else {
            "unschedulable"
        };
        ("False", "Unschedulable", status.message(), outcome)
    } else {
        ("False", "SchedulerError", status.as_error(), "error")
    };
    metrics.pod_group_attempt(outcome, &scheduler_name, elapsed);
    debug!(group = %group.key, placed, refused, outcome, %message, "pod group cycle done");
    set_condition(shared, &group.key, condition, reason, &message).await;
}

/// The leaf domain annotation on the host's pod, which its copy is made from.
async fn write_leaf_domain(
    shared: &Shared,
    pod: &PodInfo,
    domain: &str,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(shared.bind_ctx.client.clone(), &pod.namespace);
    let patch = serde_json::json!({
        "metadata": {"uid": pod.uid, "annotations": {keys::LEAF_DOMAIN_ANNOTATION: domain}}
    });
    api.patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Sets the PodGroupInitiallyScheduled condition (v1alpha2: PodGroupScheduled) as kube's
/// updatePodGroupCondition: a True one is
/// not turned False by a later cycle for more members.
async fn set_condition(shared: &Shared, key: &str, status: &str, reason: &str, message: &str) {
    let groups = &shared.profiles.pod_groups;
    let (Some(policy), Some(version)) = (groups.policy(key), groups.served()) else {
        return;
    };
    let condition = version.scheduled_condition();
    let existing = policy.conditions.iter().find(|c| c.type_ == condition);
    if existing.is_some_and(|c| c.status == "True") && status != "True" {
        return;
    }
    if existing.is_some_and(|c| {
        c.status == status
            && c.reason == reason
            && c.message == message
            && c.observed_generation == Some(policy.generation)
    }) {
        return;
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let transition = match existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now,
    };
    let mut conditions: Vec<Condition> = policy
        .conditions
        .iter()
        .filter(|c| c.type_ != condition)
        .cloned()
        .collect();
    conditions.push(Condition {
        type_: condition.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(policy.generation),
        last_transition_time: transition,
    });
    let Some((ns, name)) = key.split_once('/') else {
        return;
    };
    let client = shared.bind_ctx.client.clone();
    let patch = Patch::Merge(serde_json::json!({"status": {"conditions": conditions}}));
    let params = PatchParams::default();
    let patched = match version {
        PodGroupVersion::V1beta1 => Api::<PodGroup>::namespaced(client, ns)
            .patch_status(name, &params, &patch)
            .await
            .map(|_| ()),
        PodGroupVersion::V1alpha2 => Api::<PodGroupV1alpha2>::namespaced(client, ns)
            .patch_status(name, &params, &patch)
            .await
            .map(|_| ()),
    };
    if let Err(e) = patched {
        warn!(group = %key, error = %e, "failed to update PodGroup status");
    }
}

#[cfg(test)]
#[path = "pod_group_cycle_tests.rs"]
mod tests;
