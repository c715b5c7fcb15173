//! kube-scheduler v1.37's pod group scheduling algorithm (`schedule_one_podgroup.go`):
//! the members are tried one after the other, each assumed where it fits so that the next
//! sees it there, and GangScheduling's PlacementFeasible says after each whether the group
//! can still meet its minCount; no member runs PostFilter (the group's PodGroupPostFilter
//! comes after, in the cycle). Under TopologyAwareWorkloadScheduling, or when a
//! PlacementPolicy keeps the group in one domain, this runs once per placement (a domain
//! of the topology key; all nodes without one), and PlacementScore picks among those that
//! work. Every member assumed is forgotten again before the algorithm returns: the cycle
//! assumes for real only the placement it binds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use super::Shared;
use super::failure::Failure;
use super::group_domains::{Domains, leaf_domain_of};
use super::schedule_pod::schedule_pod;
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::framework::{
    Code, CycleState, FitError, Framework, PlacementAssignments, PlacementProgress, QueuedPodInfo,
    Status,
};
use mcsched_engine::nominator::Nominating;
use mcsched_engine::pod_groups::GroupPolicy;
use mcsched_engine::preemption::MutableSnapshot;
use mcsched_engine::snapshot::{NodeInfo, PodInfo, Snapshot};

/// kube's errPodGroupUnschedulable.
pub(super) const GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// The most member attempts one placement search may make: domains tried × members.
/// kube has no such limit, but there only a PodGroup under an alpha gate the cluster's
/// admin turns on asks for the search; here a namespaced PlacementPolicy asks for it as
/// well, and the search runs inline in the one scheduling loop, which every other pod
/// waits behind. A key that makes every node a domain (`kubernetes.io/hostname`) turned
/// a gang of 500 on 1000 nodes into 500 000 attempts, 42 s of the loop (release build,
/// `placement_search_measured`); at the cap the worst search held it 0.23 to 0.30 s. A
/// group over it is refused before anything is simulated, naming the field that asked.
pub(super) const MAX_PLACEMENT_ATTEMPTS: usize = 10_000;

/// A status as kube's `fwk.Status` carries it: a code, reasons, and an error whose text
/// leads the message and alone stands for it where kube prints `AsError()`
/// (errPodGroupUnschedulable, or an internal error).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GroupStatus {
    pub(super) code: Code,
    pub(super) reasons: Vec<String>,
    pub(super) err: Option<String>,
}

impl GroupStatus {
    /// `fwk.NewStatus(Unschedulable, reasons...).WithError(errPodGroupUnschedulable)`.
    pub(super) fn group_unschedulable(reasons: Vec<String>) -> Self {
        GroupStatus {
            code: Code::Unschedulable,
            reasons,
            err: Some(GROUP_UNSCHEDULABLE.to_string()),
        }
    }

    /// `fwk.AsStatus(err)`.
    pub(super) fn error(err: impl Into<String>) -> Self {
        GroupStatus {
            code: Code::Error,
            reasons: Vec::new(),
            err: Some(err.into()),
        }
    }

    /// A plugin's status (no error in it).
    pub(super) fn of(status: &Status) -> Self {
        GroupStatus {
            code: status.code,
            reasons: status.reasons.iter().map(|r| r.to_string()).collect(),
            err: None,
        }
    }

    /// kube's `Message()`: the error, then the reasons.
    pub(super) fn message(&self) -> String {
        let mut parts: Vec<&str> = self.err.iter().map(String::as_str).collect();
        parts.extend(self.reasons.iter().map(String::as_str));
        parts.join(", ")
    }

    /// kube's `AsError()` text: the error alone when there is one.
    pub(super) fn as_error(&self) -> String {
        self.err.clone().unwrap_or_else(|| self.message())
    }

    pub(super) fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub(super) fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }

    pub(super) fn is_error(&self) -> bool {
        self.code == Code::Error
    }
}

/// Where the topology key a group is kept within comes from.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum KeySource {
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

/// The group a cycle schedules: kube's PodGroupInfo and its queued members, in the
/// order they are tried.
pub(super) struct Group {
    pub(super) key: String,
    pub(super) policy: Arc<GroupPolicy>,
    pub(super) members: Vec<QueuedPodInfo>,
    /// The key it is kept within one domain of, and who asked.
    pub(super) topology_key: Option<(String, KeySource)>,
    /// By placements (kube's TopologyAwareWorkloadScheduling; a PlacementPolicy's
    /// constraint needs no gate), else over every node at once.
    pub(super) by_placements: bool,
}

/// Where the algorithm assumes its members: the cache the cycle's snapshots are taken
/// from, or a snapshot pod group preemption changed (its victims taken out).
pub(super) enum World {
    Cache,
    Changed(MutableSnapshot),
}

impl World {
    fn snapshot(&self, shared: &Shared) -> Snapshot {
        match self {
            World::Cache => shared.cache().snapshot(),
            World::Changed(s) => s.snapshot().clone(),
        }
    }

    /// kube's assume in a pod group cycle (the snapshot's AssumePod): the pod there, its
    /// nomination dropped meanwhile.
    fn assume(&mut self, shared: &Shared, pod: &Arc<PodInfo>, node: &str) {
        match self {
            World::Cache => shared.cache().assume(pod.clone(), node),
            World::Changed(s) => {
                s.add_pod(node, pod.clone());
            }
        }
        shared
            .profiles
            .nominator
            .delete(mcsched_engine::queue::id(pod));
    }

    /// kube's unreserveAndForget in a pod group cycle: the pod gone again, and a
    /// nomination its status carries back with the nominator.
    fn forget(&mut self, shared: &Shared, pod: &Arc<PodInfo>, node: &str) {
        match self {
            World::Cache => shared.cache().forget(&pod.key, &pod.uid),
            World::Changed(s) => {
                s.remove_pod(node, &pod.key);
            }
        }
        if let Some(nominated) = pod.nominated_node_name() {
            shared
                .profiles
                .nominator
                .add(pod.clone(), Nominating::Override(nominated.to_string()));
        }
    }

    pub(super) fn into_changed(self) -> Option<MutableSnapshot> {
        match self {
            World::Cache => None,
            World::Changed(s) => Some(s),
        }
    }
}

/// A member's attempt (kube's algorithmResult).
pub(super) struct MemberResult {
    /// As it was tried (decoded; in a leaf's domain, with its leaf domain annotation).
    pub(super) info: QueuedPodInfo,
    pub(super) outcome: Outcome,
    /// kube's scheduleResult.nominatingInfo: None leaves the nomination as it is; pod
    /// group preemption sets it to where the member would go.
    pub(super) nominating: Option<Nominating>,
    pub(super) record: CycleRecord,
    pub(super) started: Instant,
}

pub(super) enum Outcome {
    /// Fits on `node`, assumed and reserved there (the state as Reserve left it).
    Placed {
        node: String,
        state: CycleState,
        /// The leaf domain annotation to write on the pod before it is bound: it goes to
        /// a virtual node within a leaf's part of the group's domain.
        leaf_domain: Option<String>,
        nodes: usize,
    },
    /// No node, or Reserve refused the one chosen: the member's own status.
    Rejected(Box<FitError>),
    Error(String),
    /// Not tried: the group's status as it was when the algorithm ended
    /// (completePodGroupAlgorithmResult).
    NotTried(GroupStatus),
}

impl MemberResult {
    fn placed(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Placed { node, .. } => Some(node),
            _ => None,
        }
    }

    /// The failure a rejected or errored member is handed to the failure handler with.
    pub(super) fn own_failure(&self) -> Option<Failure> {
        let nominating = self.nominating.clone().unwrap_or(Nominating::Noop);
        match &self.outcome {
            Outcome::Rejected(fit) => Some(Failure::Unschedulable {
                fit: fit.clone(),
                nominating,
                victims: Vec::new(),
            }),
            Outcome::Error(message) => Some(Failure::Error(message.clone())),
            Outcome::NotTried(status) if status.is_error() => {
                Some(Failure::Error(status.message()))
            }
            Outcome::NotTried(status) => Some(Failure::Group(status.message(), nominating)),
            Outcome::Placed { .. } => None,
        }
    }
}

/// The algorithm's verdict on a group (kube's podGroupAlgorithmResult).
pub(super) struct GroupResult {
    pub(super) status: GroupStatus,
    /// The members tried, in order; fewer than the group's when it stopped early.
    pub(super) members: Vec<MemberResult>,
    pub(super) any_scheduled: bool,
    /// Pod group preemption found room: the members wait for it.
    pub(super) waiting_on_preemption: bool,
    /// False when mcsched's cap refused the placement search: nothing was simulated,
    /// and PodGroupPostFilter would refuse the same search.
    pub(super) searched: bool,
}

impl GroupResult {
    fn of(status: GroupStatus) -> Self {
        GroupResult {
            status,
            members: Vec::new(),
            any_scheduled: false,
            waiting_on_preemption: false,
            searched: true,
        }
    }

    /// The members placed, in order, as pod group preemption's proposed assignments.
    pub(super) fn assignments(&self) -> Vec<mcsched_engine::preemption::Assignment> {
        (self.members.iter())
            .filter_map(|m| match &m.outcome {
                Outcome::Placed { node, state, .. } => {
                    Some(mcsched_engine::preemption::Assignment {
                        pod: m.info.pod.clone(),
                        node: node.clone(),
                        state: state.clone(),
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// kube's completePodGroupAlgorithmResult: a result for every member, those not
    /// tried with the group's status.
    pub(super) fn complete(&mut self, members: &[QueuedPodInfo]) {
        for info in members.iter().skip(self.members.len()) {
            self.members.push(MemberResult {
                info: info.clone(),
                outcome: Outcome::NotTried(self.status.clone()),
                nominating: None,
                record: CycleRecord::default(),
                started: Instant::now(),
            });
        }
    }
}

/// kube's runRootSchedulingAlgorithm for a PodGroup: the algorithm by placements or over
/// every node, every assumption undone after; a success that schedules no member is not
/// one.
pub(super) async fn run_root(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    group: &Group,
    world: &mut World,
) -> GroupResult {
    let mut result = if group.by_placements {
        by_placements(shared, fw, group, world).await
    } else {
        default_algorithm(shared, fw, group, world, None).await
    };
    if result.status.is_success() && !result.any_scheduled {
        result.status = GroupStatus::group_unschedulable(Vec::new());
    }
    result
}

/// A placement to try: a domain of the group's topology key, or every node.
#[derive(Debug, Clone)]
struct Placement {
    /// None: every node.
    domain: Option<String>,
}

/// kube's RunPlacementGeneratePlugins: the profile's PlacementGenerate plugin given the
/// domains of the group's key it may go to (only the one its scheduled members are in,
/// when it has some), or one placement of every node when the group has no key or the
/// profile no such plugin (kube leaves the group's own constraint unenforced then; a
/// PlacementPolicy's is mcsched's and holds: one placement per domain). Err: kube's
/// statuses (an error when the scheduled members say no one domain; "no feasible
/// placements found" when there is no domain), or mcsched's cap.
fn generate_placements(
    shared: &Shared,
    fw: &Framework,
    group: &Group,
    snapshot: &Snapshot,
) -> Result<(Vec<Placement>, Option<Domains>), GroupResult> {
    let every_node = || vec![Placement { domain: None }];
    let generator = fw.placement_generator();
    let Some((topology_key, origin)) = &group.topology_key else {
        return match generator.map(|g| g.generate_placements(None)) {
            None => Ok((every_node(), None)),
            Some(Ok(p)) => Ok((
                p.into_iter().map(|domain| Placement { domain }).collect(),
                None,
            )),
            Some(Err(status)) => Err(GroupResult::of(GroupStatus::of(&status))),
        };
    };
    if generator.is_none() && matches!(origin, KeySource::PodGroup(_)) {
        return Ok((every_node(), None));
    }
    let domains = Domains::new(shared, topology_key);
    let mut required: Option<String> = None;
    for pod in shared.profiles.pod_groups.state(&group.key).scheduled() {
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
        let scheduled_domain = |e: String| {
            GroupResult::of(GroupStatus::error(format!(
                "cannot determine domain for already scheduled pods: {e}"
            )))
        };
        let Some(domain) = domain else {
            return Err(scheduled_domain(format!(
                "no topology domain found for pod {}",
                pod.key
            )));
        };
        match &required {
            Some(d) if *d != domain => {
                return Err(scheduled_domain(format!(
                    "more than 1 domain found for pod group: {d}, {domain}"
                )));
            }
            _ => required = Some(domain),
        }
    }
    let all: BTreeSet<String> = (domains.all(snapshot).into_iter())
        .filter(|d| required.as_ref().is_none_or(|r| r == d))
        .collect();
    let generated = match generator {
        Some(g) => g.generate_placements(Some(&all)),
        None if all.is_empty() => Err(Status::unschedulable("no feasible placements found")),
        None => Ok(all.iter().cloned().map(Some).collect()),
    };
    let generated = match generated {
        Ok(p) => p,
        Err(status) => return Err(GroupResult::of(GroupStatus::of(&status))),
    };
    // One domain costs what the search without a key would: only more than one multiplies.
    let members = group.members.len();
    if generated.len() > 1 && generated.len().saturating_mul(members) > MAX_PLACEMENT_ATTEMPTS {
        let message = format!(
            "{GROUP_UNSCHEDULABLE}: its placement search would try {members} members in each \
             of {} domains of {topology_key:?} ({origin}), {} attempts, more than the \
             {MAX_PLACEMENT_ATTEMPTS} allowed",
            generated.len(),
            generated.len().saturating_mul(members),
        );
        let mut refused = GroupResult::of(GroupStatus {
            code: Code::Unschedulable,
            reasons: Vec::new(),
            err: Some(message),
        });
        refused.searched = false;
        return Err(refused);
    }
    let placements = (generated.into_iter())
        .map(|domain| Placement { domain })
        .collect();
    Ok((placements, Some(domains)))
}

/// kube's podGroupSchedulingPlacementAlgorithm: the default algorithm in each placement,
/// its assumptions undone after each; an error ends it. None feasible: the first
/// placement's result, its status saying how many there were. Else the best by
/// PlacementScore (a tie at random), or the one.
async fn by_placements(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    group: &Group,
    world: &mut World,
) -> GroupResult {
    let snapshot = world.snapshot(shared);
    let (placements, domains) = match generate_placements(shared, fw, group, &snapshot) {
        Ok(p) => p,
        Err(result) => return result,
    };
    drop(snapshot);
    let metrics = mcsched_engine::metrics::global();
    let profile = fw.scheduler_name.as_str();
    metrics.placements_generated(profile, placements.len());
    let mut first: Option<GroupResult> = None;
    let mut feasible: Vec<(Placement, GroupResult)> = Vec::new();
    for placement in &placements {
        let domain = domains.as_ref().zip(placement.domain.as_deref());
        let evaluation = std::time::Instant::now();
        let result = default_algorithm(shared, fw, group, world, domain).await;
        // An error is the scheduler's fault, not the placement's verdict: kube counts it
        // under neither result.
        if !result.status.is_error() {
            let seconds = evaluation.elapsed().as_secs_f64();
            metrics.placement_evaluated(profile, result.status.is_success(), seconds);
        }
        debug!(group = %group.key, domain = ?placement.domain, status = %result.status.message(), "pod group placement simulated");
        // The cache holds no simulated member between placements: let the runtime's other
        // tasks (watches, bindings) in before the next.
        tokio::task::yield_now().await;
        if result.status.is_error() {
            return result;
        }
        if result.status.is_success() {
            feasible.push((placement.clone(), result));
        } else if first.is_none() {
            first = Some(result);
        }
    }
    if feasible.is_empty() {
        let Some(mut result) = first else {
            return GroupResult::of(GroupStatus::error("no placement was tried"));
        };
        result.status = GroupStatus::group_unschedulable(vec![format!(
            "0/{} placements are available, first placement status: {}",
            placements.len(),
            result.status.as_error()
        )]);
        return result;
    }
    if feasible.len() == 1 {
        return feasible.swap_remove(0).1;
    }
    // kube's findBestPlacement: PlacementScore over the cluster as it is now.
    let snapshot = world.snapshot(shared);
    let nodes: Vec<Vec<Arc<NodeInfo>>> = (feasible.iter())
        .map(|(p, _)| match (domains.as_ref(), p.domain.as_deref()) {
            (Some(d), Some(v)) => (snapshot.nodes.iter())
                .filter(|n| d.contains(n, v))
                .cloned()
                .collect(),
            _ => snapshot.nodes.to_vec(),
        })
        .collect();
    let assignments: Vec<PlacementAssignments<'_>> = (feasible.iter().zip(&nodes))
        .map(|((_, r), nodes)| PlacementAssignments {
            nodes,
            proposed: (r.members.iter())
                .filter(|m| m.placed().is_some())
                .map(|m| m.info.pod.clone())
                .collect(),
        })
        .collect();
    let scheduled = shared
        .profiles
        .pod_groups
        .state(&group.key)
        .scheduled_count();
    let scores = match fw.run_placement_score(scheduled, &assignments) {
        Ok(s) => s,
        Err(status) => return GroupResult::of(GroupStatus::error(status.message())),
    };
    drop(assignments);
    let mut best = 0;
    let mut best_tie = rand::random::<u64>();
    for (i, score) in scores.iter().enumerate().skip(1) {
        let tie = rand::random::<u64>();
        if *score > scores[best] || (*score == scores[best] && tie > best_tie) {
            best = i;
            best_tie = tie;
        }
    }
    debug!(group = %group.key, domain = ?feasible[best].0.domain, ?scores, "pod group placement chosen");
    feasible.swap_remove(best).1
}

/// kube's podGroupSchedulingDefaultAlgorithm: PlacementFeasible first, then each member
/// in order (assumed and reserved where it fits), PlacementFeasible after each; an
/// Unschedulable verdict stops it, and so does a member's error. A Wait at the end is the
/// group's Unschedulable. Every member assumed is forgotten before it returns.
async fn default_algorithm(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    group: &Group,
    world: &mut World,
    domain: Option<(&Domains, &str)>,
) -> GroupResult {
    let mut result = GroupResult::of(GroupStatus::group_unschedulable(Vec::new()));
    let mut progress = PlacementProgress {
        remaining: group.members.len(),
        scheduled: shared
            .profiles
            .pod_groups
            .state(&group.key)
            .scheduled_count(),
    };
    let feasible = fw.run_placement_feasible(&group.policy, progress);
    if feasible.code == Code::Error {
        result.status = GroupStatus::error(format!(
            "failed to evaluate placement feasibility: {}",
            feasible.message()
        ));
        return result;
    }
    if feasible.code == Code::Unschedulable {
        result.status = GroupStatus::group_unschedulable(GroupStatus::of(&feasible).reasons);
        return result;
    }
    result.status = GroupStatus::of(&feasible);
    let mut any_scheduled = false;
    for info in &group.members {
        let member = attempt(shared, fw, world, info.clone(), domain).await;
        let placed = member.placed().is_some();
        let error = match &member.outcome {
            Outcome::Error(e) => Some(e.clone()),
            _ => None,
        };
        match &member.outcome {
            Outcome::Placed { node, .. } => {
                debug!(pod = %member.info.pod.key, %node, "pod group member fits");
            }
            Outcome::Rejected(fit) => {
                debug!(pod = %member.info.pod.key, failure = %fit, "pod group member does not fit");
            }
            _ => {}
        }
        result.members.push(member);
        if let Some(e) = error {
            result.status = GroupStatus::error(format!(
                "failed to schedule other pod from a pod group: {e}"
            ));
            break;
        }
        progress.remaining -= 1;
        if placed {
            progress.scheduled += 1;
        }
        let feasible = fw.run_placement_feasible(&group.policy, progress);
        if feasible.code == Code::Error {
            result.status = GroupStatus::error(format!(
                "failed to evaluate placement feasibility: {}",
                feasible.message()
            ));
            break;
        }
        result.status = GroupStatus::of(&feasible);
        if feasible.code == Code::Unschedulable {
            break;
        }
        any_scheduled |= placed;
    }
    if result.status.code == Code::Wait {
        result.status = GroupStatus::group_unschedulable(result.status.reasons.clone());
    }
    // The revert functions: every member assumed, forgotten in the reverse order.
    for member in result.members.iter_mut().rev() {
        if let Outcome::Placed { node, state, .. } = &mut member.outcome {
            fw.run_unreserve(state, &member.info.pod, node);
            world.forget(shared, &member.info.pod, node);
        }
    }
    result.any_scheduled = any_scheduled && result.status.is_success();
    result
}

/// kube's podGroupPodSchedulingAlgorithm: one member through the scheduling algorithm
/// (no PostFilter in a pod group cycle), then assumed and reserved where it fits.
async fn attempt(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    world: &mut World,
    mut info: QueuedPodInfo,
    domain: Option<(&Domains, &str)>,
) -> MemberResult {
    let started = Instant::now();
    info.pod = info.pod.decoded();
    let mut snapshot = world.snapshot(shared);
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
    let member = |outcome, record| MemberResult {
        info: info.clone(),
        outcome,
        nominating: None,
        record,
        started,
    };
    let node = match result {
        Ok(r) => r.node,
        Err(fit) => return member(Outcome::Rejected(fit), record),
    };
    let leaf_domain = domain.and_then(|(domains, _)| {
        let n = snapshot.get(&node)?;
        domains
            .within_leaf(n)
            .then(|| leaf_domain_of(&pod))
            .flatten()
    });
    let nodes = snapshot.len();
    drop(snapshot);
    world.assume(shared, &pod, &node);
    let reserved = fw.run_reserve(&mut state, &pod, &node);
    if !reserved.is_success() {
        fw.run_unreserve(&mut state, &pod, &node);
        world.forget(shared, &pod, &node);
        let outcome = if reserved.is_rejected() {
            match Failure::on_node(&node, reserved) {
                Failure::Unschedulable { fit, .. } => Outcome::Rejected(fit),
                other => Outcome::Error(other.to_string()),
            }
        } else {
            Outcome::Error(format!(
                "running Reserve plugin {:?}: {}",
                reserved.plugin,
                reserved.message()
            ))
        };
        return member(outcome, record);
    }
    member(
        Outcome::Placed {
            node,
            state,
            leaf_domain,
            nodes,
        },
        record,
    )
}
