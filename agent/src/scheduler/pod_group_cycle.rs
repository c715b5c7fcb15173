//! kube's pod group scheduling cycle (`schedule_one_podgroup.go`): a pod of a PodGroup is
//! scheduled with every other unscheduled member, one after the other on the cluster as
//! the earlier ones left it, each assumed where it fits. If the group as a whole passes
//! Permit (a gang: `minCount` members placed) the placements are made again for real and
//! bound; if not, none is, and every member waits for the next change.

use std::collections::{BTreeMap, BTreeSet};
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
use super::failure::{Failure, forget, handle_failure};
use super::group_domains::{Domains, leaf_domain_of};
use super::schedule_pod::schedule_pod;
use super::scheduling_cycle::{Placing, assume_reserve_permit};
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::framework::{CycleState, Framework, QueuedPodInfo};
use mcsched_engine::pod_groups::group_key_of;
use mcsched_engine::snapshot::PodInfo;
use mcsched_shared::keys;

/// kube's errPodGroupUnschedulable.
const GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// The most member attempts one placement search may make: domains tried × members.
/// kube has no such limit, but there only a PodGroup under an alpha gate the cluster's
/// admin turns on asks for the search; here a namespaced PlacementPolicy asks for it as
/// well, and the search runs inline in the one scheduling loop, which every other pod
/// waits behind. A key that makes every node a domain (`kubernetes.io/hostname`) turned
/// a gang of 500 on 1000 nodes into 500 000 attempts, 42 s of the loop (release build,
/// `placement_search_measured`); at the cap the worst search held it 0.23 to 0.30 s. A
/// group over it is refused before anything is simulated, naming the field that asked.
pub(super) const MAX_PLACEMENT_ATTEMPTS: usize = 10_000;

/// Where the topology key a group is kept within comes from.
#[derive(Debug, Clone, PartialEq)]
enum KeySource {
    /// The PodGroup's own `schedulingConstraints`: its `namespace/name`.
    PodGroup(String),
    /// A PlacementPolicy's `podGroupConstraints`: its reference (`PlacementPolicy ns/name`).
    Policy(String),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::PodGroup(key) => {
                write!(
                    f,
                    "PodGroup {key} spec.schedulingConstraints.topology[0].key"
                )
            }
            KeySource::Policy(reference) => {
                write!(f, "{reference} spec.podGroupConstraints.topology[0].key")
            }
        }
    }
}

/// Why the placement search was not run.
#[derive(Debug, thiserror::Error)]
enum PlacementError {
    /// kube's error: the group's members already bound say no one domain.
    #[error("cannot determine domain for already scheduled pods: {0}")]
    ScheduledDomain(String),
    /// Over [`MAX_PLACEMENT_ATTEMPTS`]: the group waits, as one that does not fit.
    #[error(
        "{GROUP_UNSCHEDULABLE}: its placement search would try {members} members in each of \
         {domains} domains of {key:?} ({origin}), {} attempts, more than the {} allowed",
        domains.saturating_mul(*members),
        MAX_PLACEMENT_ATTEMPTS
    )]
    TooManyAttempts {
        key: String,
        origin: KeySource,
        domains: usize,
        members: usize,
    },
}

/// The group `info`'s pod is scheduled with, when its PodGroup exists (kube: when the
/// GenericWorkload gate is on, which is when the API server serves PodGroups).
pub(super) fn group_to_schedule(shared: &Shared, info: &QueuedPodInfo) -> Option<String> {
    let key = group_key_of(&info.pod.object())?;
    shared.profiles.pod_groups.policy(&key).map(|_| key)
}

/// One member's attempt in the group's simulation.
enum Attempt {
    /// Fits on `node`; Permit passed (the group's quorum reached with it) or said Wait.
    Feasible {
        placing: Placing,
        passed: bool,
        permit_message: String,
        /// The leaf domain annotation to write on the pod before it is bound: it goes to
        /// a virtual node within a leaf's part of the group's domain.
        leaf_domain: Option<String>,
    },
    /// No node (or its node's Reserve or Permit refused it): its own failure.
    Failed {
        info: QueuedPodInfo,
        failure: Failure,
        record: CycleRecord,
        started: Instant,
    },
}

pub(super) async fn pod_group_cycle(
    shared: &Arc<Shared>,
    bindings: &Arc<Semaphore>,
    leader: &tokio::sync::watch::Receiver<bool>,
    first: QueuedPodInfo,
    key: String,
) {
    let members = take_members(shared, first);
    let Some(fw) = framework_for(shared, &members) else {
        return;
    };
    let scheduler_name = fw.scheduler_name.clone();
    let members: Vec<QueuedPodInfo> = members
        .into_iter()
        .filter(|m| {
            // kube's skipPodSchedule: being deleted, or placed already.
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
    debug!(group = %key, members = members.len(), "scheduling a pod group");
    let started = Instant::now();

    let own_key = shared
        .profiles
        .pod_groups
        .policy(&key)
        .and_then(|p| p.topology_keys.first().cloned())
        .map(|k| (k, KeySource::PodGroup(key.clone())));
    let policy_key = own_key
        .is_none()
        .then(|| policy_topology_key(shared, &members))
        .flatten();
    let topology_key = own_key.or(policy_key.clone());
    // kube's TopologyAwareWorkloadScheduling gate picks the algorithm: by placements
    // (one per domain, or all nodes without a key), or the members over every node. A
    // PlacementPolicy's constraint is mcsched's own, and needs no gate.
    let by_domain = shared.profiles.pod_groups.topology_aware() || policy_key.is_some();
    let (outcomes, quorum, group_message) = if !by_domain {
        let sim = simulate(shared, &fw, &members, None, None).await;
        (sim.attempts, sim.quorum, GROUP_UNSCHEDULABLE.to_string())
    } else {
        match by_placements(shared, &fw, &key, topology_key.as_ref(), &members).await {
            Ok(placement) => placement,
            Err(e) => {
                let message = e.to_string();
                let (reason, failure): (_, fn(String) -> Failure) = match e {
                    PlacementError::ScheduledDomain(_) => ("SchedulerError", Failure::Error),
                    // It waits as a group that fits nowhere: fewer domains or members, or
                    // another key, may let it be searched.
                    PlacementError::TooManyAttempts { .. } => {
                        metrics_algorithm(started);
                        mcsched_engine::metrics::global().pod_group_attempt(
                            "unschedulable",
                            &scheduler_name,
                            started.elapsed().as_secs_f64(),
                        );
                        ("Unschedulable", Failure::Group)
                    }
                };
                debug!(group = %key, %message, "pod group not searched");
                for m in members {
                    handle_failure(
                        shared,
                        &scheduler_name,
                        m,
                        failure(message.clone()),
                        None,
                        started,
                    );
                }
                set_condition(shared, &key, "False", reason, &message).await;
                return;
            }
        }
    };
    metrics_algorithm(started);

    let metrics = mcsched_engine::metrics::global();
    let (mut placed, mut refused) = (0usize, 0usize);
    for outcome in outcomes {
        match outcome {
            Attempt::Failed {
                info,
                failure,
                record,
                started,
            } => {
                refused += 1;
                handle_failure(
                    shared,
                    &scheduler_name,
                    info,
                    failure,
                    Some(&record),
                    started,
                );
            }
            Attempt::Feasible {
                placing,
                permit_message,
                ..
            } if !quorum => {
                refused += 1;
                let message = format!("{GROUP_UNSCHEDULABLE}, {permit_message}");
                handle_failure(
                    shared,
                    &scheduler_name,
                    placing.info,
                    Failure::Group(message),
                    Some(&placing.record),
                    placing.started,
                );
            }
            Attempt::Feasible {
                placing,
                leaf_domain,
                ..
            } => {
                if let Some(domain) = leaf_domain
                    && let Err(e) = write_leaf_domain(shared, &placing.info.pod, &domain).await
                {
                    refused += 1;
                    handle_failure(
                        shared,
                        &scheduler_name,
                        placing.info,
                        Failure::Error(format!("writing the pod's leaf domain: {e}")),
                        Some(&placing.record),
                        placing.started,
                    );
                    continue;
                }
                let node = placing.node.clone();
                let key = placing.info.pod.key.clone();
                let nodes = placing.record.feasible.len();
                let record = placing.record.clone();
                match assume_reserve_permit(shared, placing, true) {
                    Ok(p) => {
                        placed += 1;
                        shared.explanations.record_success(
                            &scheduler_name,
                            &key,
                            &record,
                            &node,
                            nodes,
                        );
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
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (status, reason, message) = if quorum {
        metrics.pod_group_attempt("scheduled", &scheduler_name, elapsed);
        ("True", "Scheduled", String::new())
    } else {
        metrics.pod_group_attempt("unschedulable", &scheduler_name, elapsed);
        ("False", "Unschedulable", group_message)
    };
    debug!(group = %key, placed, refused, quorum, "pod group cycle done");
    set_condition(shared, &key, status, reason, &message).await;
}

/// The members placed one after the other, each on the cluster as the earlier ones left
/// it (within `domain`'s nodes when given), then every placement undone.
struct Simulation {
    attempts: Vec<Attempt>,
    /// Some member passed Permit: the group may be bound.
    quorum: bool,
    feasible: usize,
    /// Stopped by its [`Cut`] before every member was tried: this domain cannot be chosen,
    /// and its attempts tell nothing.
    cut_short: bool,
}

/// When a domain's simulation may stop: once the members left could no longer make it
/// the chosen placement. The outcome stays kube's: a domain stopped so could never have
/// been chosen, and the first domain without quorum, whose statuses the members report,
/// is simulated whole (the cut is given only after it, or after a domain with quorum).
/// A gang of identical members that fits nowhere, retried at changes in the cluster, so
/// costs in each domain after the first the members it holds and one more, not all.
#[derive(Debug, Clone, Copy)]
struct Cut {
    /// Feasible members quorum needs in this domain: minCount less the members
    /// scheduled already (at least one: quorum is a member passing Permit).
    quorum: usize,
    /// The most members placed in a domain with quorum so far: PodGroupPodsCount chooses
    /// one with as many or more (ties at random).
    best: usize,
}

impl Cut {
    fn stops(&self, quorum: bool, feasible: usize, left: usize) -> bool {
        let most = feasible + left;
        (!quorum && most < self.quorum) || most < self.best
    }
}

async fn simulate(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    members: &[QueuedPodInfo],
    domain: Option<(&Domains, &str)>,
    cut: Option<Cut>,
) -> Simulation {
    let mut attempts = Vec::with_capacity(members.len());
    let mut quorum = false;
    let mut feasible = 0;
    let mut cut_short = false;
    for (i, info) in members.iter().enumerate() {
        if cut.is_some_and(|c| c.stops(quorum, feasible, members.len() - i)) {
            cut_short = true;
            break;
        }
        let mut info = info.clone();
        info.pod = info.pod.decoded();
        let attempt = attempt(shared, fw, info, domain).await;
        match &attempt {
            Attempt::Feasible {
                placing,
                passed,
                permit_message,
                ..
            } => {
                feasible += 1;
                quorum |= *passed;
                debug!(pod = %placing.info.pod.key, node = %placing.node, passed, permit = %permit_message, "pod group member fits");
            }
            Attempt::Failed { info, failure, .. } => {
                debug!(pod = %info.pod.key, failure = %failure, "pod group member does not fit");
            }
        }
        attempts.push(attempt);
    }
    for a in &attempts {
        if let Attempt::Feasible { placing, .. } = a {
            let mut state = placing.state.clone();
            forget(shared, fw, &mut state, &placing.info.pod, &placing.node);
        }
    }
    Simulation {
        attempts,
        quorum,
        feasible,
        cut_short,
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

/// kube's placement algorithm with TopologyPlacementGenerator and PodGroupPodsCount: the
/// group simulated in each domain of `topology_key` (only the one its scheduled members
/// are in, if any; without a key, one placement of every node), and the placement that
/// places the most members chosen. The members' outcomes there, whether the group may be
/// bound, and the group's message when it may not; Err: no domain can be told for the
/// members already scheduled, or the search would make more than
/// [`MAX_PLACEMENT_ATTEMPTS`].
async fn by_placements(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    key: &str,
    topology_key: Option<&(String, KeySource)>,
    members: &[QueuedPodInfo],
) -> Result<(Vec<Attempt>, bool, String), PlacementError> {
    let Some((topology_key, origin)) = topology_key else {
        let sim = simulate(shared, fw, members, None, None).await;
        let message = if sim.quorum {
            String::new()
        } else {
            format!("0/1 placements are available, first placement status: {GROUP_UNSCHEDULABLE}")
        };
        return Ok((sim.attempts, sim.quorum, message));
    };
    let domains = Domains::new(shared, topology_key);
    let snapshot = shared.cache().snapshot();
    let mut required: Option<String> = None;
    for pod in shared.profiles.pod_groups.state(key).scheduled() {
        let node = pod
            .node_name()
            .map(String::from)
            .or_else(|| shared.cache().node_of(&pod.key).map(String::from));
        let node = node.as_deref().and_then(|n| snapshot.get(n));
        // In a leaf that spans domains, the one it was placed in is on the pod.
        let domain = match node {
            Some(n) if domains.within_leaf(n) => leaf_domain_of(&pod)
                .and_then(|raw| serde_json::from_str::<BTreeMap<String, String>>(&raw).ok())
                .and_then(|mut d| d.remove(domains.key())),
            Some(n) => domains.of(n).into_iter().next(),
            None => None,
        };
        let Some(domain) = domain else {
            return Err(PlacementError::ScheduledDomain(format!(
                "no topology domain found for pod {}",
                pod.key
            )));
        };
        match &required {
            Some(d) if *d != domain => {
                return Err(PlacementError::ScheduledDomain(format!(
                    "more than 1 domain found for pod group: {d}, {domain}"
                )));
            }
            _ => required = Some(domain),
        }
    }
    let all: BTreeSet<String> = domains
        .all(&snapshot)
        .into_iter()
        .filter(|d| required.as_ref().is_none_or(|r| r == d))
        .collect();
    drop(snapshot);
    // One domain costs what the search without a key would: only more than one multiplies.
    if all.len() > 1 && all.len().saturating_mul(members.len()) > MAX_PLACEMENT_ATTEMPTS {
        return Err(PlacementError::TooManyAttempts {
            key: topology_key.clone(),
            origin: origin.clone(),
            domains: all.len(),
            members: members.len(),
        });
    }
    let needed = match shared.profiles.pod_groups.policy(key) {
        Some(p) => p.gang_min_count.map_or(1, |min| {
            let scheduled = shared.profiles.pod_groups.state(key).scheduled_count();
            min.saturating_sub(scheduled).max(1)
        }),
        None => 1,
    };
    let mut first: Option<Simulation> = None;
    let mut best: Option<Simulation> = None;
    for domain in &all {
        let cut = (first.is_some() || best.is_some()).then(|| Cut {
            quorum: needed,
            best: best.as_ref().map_or(0, |b| b.feasible),
        });
        let sim = simulate(shared, fw, members, Some((&domains, domain)), cut).await;
        debug!(group = %key, %domain, quorum = sim.quorum, feasible = sim.feasible, cut_short = sim.cut_short, "pod group placement simulated");
        // The cache holds no simulated member between domains: let the runtime's other
        // tasks (watches, bindings) in before the next.
        tokio::task::yield_now().await;
        if sim.cut_short {
            continue;
        }
        if sim.quorum {
            // PodGroupPodsCount: the most members placed (kube breaks ties at random).
            let better = best.as_ref().is_none_or(|b| {
                sim.feasible > b.feasible || (sim.feasible == b.feasible && rand::random::<bool>())
            });
            if better {
                best = Some(sim);
            }
        } else if first.is_none() {
            first = Some(sim);
        }
    }
    if let Some(best) = best {
        return Ok((best.attempts, true, String::new()));
    }
    let message = format!(
        "0/{} placements are available, first placement status: {GROUP_UNSCHEDULABLE}",
        all.len()
    );
    let attempts = match first {
        Some(sim) => sim.attempts,
        None => members
            .iter()
            .map(|m| Attempt::Failed {
                info: m.clone(),
                failure: Failure::Group(message.clone()),
                record: CycleRecord::default(),
                started: Instant::now(),
            })
            .collect(),
    };
    Ok((attempts, false, message))
}

fn metrics_algorithm(started: Instant) {
    mcsched_engine::metrics::global()
        .pod_group_algorithm_duration
        .observe(started.elapsed().as_secs_f64());
}

/// `first` and every other member waiting in the queue, highest priority first, then
/// the longest waiting (kube's podGroupInfoForPod).
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
        b.pod
            .priority()
            .cmp(&a.pod.priority())
            .then(a.initial_attempt.cmp(&b.initial_attempt))
    });
    members
}

/// The one profile of every member; each member fails with kube's error otherwise.
fn framework_for(shared: &Arc<Shared>, members: &[QueuedPodInfo]) -> Option<Arc<Framework>> {
    let names: Vec<String> = members
        .iter()
        .map(|m| mcsched_shared::pod::scheduler_name(&m.pod.object()).to_string())
        .collect();
    let mismatch = names.iter().find(|n| *n != &names[0]);
    let fw = shared.profiles.get(&names[0]).cloned();
    match (mismatch, fw) {
        (None, Some(fw)) => Some(fw),
        (mismatch, _) => {
            let message = match mismatch {
                Some(other) => format!(
                    "all pods in a single pod group should have the same .spec.schedulerName set, got: {other:?} and {:?}",
                    names[0]
                ),
                None => format!("profile not found for scheduler name {:?}", names[0]),
            };
            for m in members {
                let name = mcsched_shared::pod::scheduler_name(&m.pod.object()).to_string();
                if shared.profiles.get(&name).is_none() {
                    shared.queue.done(&m.pod);
                    continue;
                }
                handle_failure(
                    shared,
                    &name,
                    m.clone(),
                    Failure::Error(message.clone()),
                    None,
                    Instant::now(),
                );
            }
            None
        }
    }
}

/// One member through the algorithm, assumed where it fits so that the next members see
/// it there (kube's podGroupPodSchedulingAlgorithm; PostFilter is not run for members).
async fn attempt(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    mut info: QueuedPodInfo,
    domain: Option<(&Domains, &str)>,
) -> Attempt {
    let started = Instant::now();
    let mut snapshot = shared.cache().snapshot();
    if let Some((domains, value)) = domain {
        snapshot = snapshot.restricted_to(|n| domains.contains(n, value));
        info.pod = domains.member_in(&info.pod, value);
    }
    let pod = info.pod.clone();
    let mut state = CycleState::new();
    let mut record = CycleRecord::default();
    let result = schedule_pod(
        fw,
        &shared.extenders,
        &mut state,
        &pod,
        &snapshot,
        &mut record,
        false,
    )
    .await;
    record.feasible = record.feasible.detached();
    let within_leaf = |node: &str| {
        let (domains, _) = domain?;
        let n = snapshot.get(node)?;
        domains
            .within_leaf(n)
            .then(|| leaf_domain_of(&pod))
            .flatten()
    };
    let (node, leaf_domain) = match result {
        Ok(r) => {
            let leaf_domain = within_leaf(&r.node);
            (r.node, leaf_domain)
        }
        Err(mut fit) => {
            // PostFilter runs as in kube's pod-by-pod cycle, for its verdict; a
            // nomination is not acted on here (members are not preempted for).
            super::schedule_pod::run_post_filter(fw, &state, &pod, &snapshot, &mut fit);
            return Attempt::Failed {
                info,
                failure: Failure::Unschedulable {
                    fit,
                    nominating: mcsched_engine::nominator::Nominating::Noop,
                    victims: Vec::new(),
                },
                record,
                started,
            };
        }
    };
    drop(snapshot);
    let placing = Placing {
        fw: fw.clone(),
        state,
        info,
        node,
        record,
        started,
    };
    // Assumed, reserved and through Permit; a pod told to wait is not parked: the
    // simulation is undone before anything binds.
    let kept = placing.record.clone();
    match assume_reserve_permit(shared, placing, false) {
        Ok(placed) => {
            let passed = placed.waiting.is_none();
            let permit_message = placed.permit_message;
            Attempt::Feasible {
                placing: Placing {
                    fw: placed.fw,
                    state: placed.state,
                    info: placed.info,
                    node: placed.node,
                    record: kept,
                    started,
                },
                passed,
                permit_message,
                leaf_domain,
            }
        }
        Err(r) => Attempt::Failed {
            info: r.info,
            failure: r.failure,
            record: r.record,
            started,
        },
    }
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
