//! kube-scheduler v1.37's `framework/preemption` package as DefaultPreemption uses it:
//! the victims (`types.go`: a pod, or a PodGroup's pods evicted together), their order and
//! the budgets they break (`util.go`), and the pod group evaluator of PodGroupPostFilter
//! (`podgrouppreemption.go`), where the preemptor is the whole pod group and the domain the
//! whole cluster. Every pod on a node is a possible victim, alone, or with every scheduled pod
//! of its PodGroup when that group's `disruptionMode` is `all`; those of lower priority
//! than the group are all removed, the group is scheduled again without them (by the
//! caller: the agent's pod group algorithm), and then as many of them as still let every
//! member placed there fit are put back, the most important first. What is left is
//! evicted.
//!
//! The caller runs the steps in kube's order: [`Preemptor::eligible`],
//! [`ongoing_preemption`], [`cluster_victims`] and [`potential_victims`] (none: the
//! [`NO_VICTIMS`] verdict), the victims' pods out of a [`MutableSnapshot`], its own
//! algorithm over it, then [`select_victims`] with the members that algorithm placed.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use mcsched_shared::selectors::label_selector_matches;

use crate::framework::{CycleState, Framework, Status};
use crate::pod_groups::{GroupPolicy, PodGroups, group_key_of};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// What PodGroupPostFilter's messages start with (kube's DefaultPreemption.PodGroupPostFilter).
pub const MESSAGE_PREFIX: &str = "pod group preemption: ";
/// kube's verdict when no pod on the cluster has a lower priority than the group.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming preemptor";
/// kube's verdict for a group that may not preempt.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// kube's verdict while the victims of an earlier preemption are still terminating.
pub const ONGOING: &str = "ongoing preemption on nominated nodes";

/// kube's `podGroupPreemptor`: the group, its priority and preemption policy, and its
/// members waiting to be scheduled.
#[derive(Debug, Clone)]
pub struct Preemptor {
    pub priority: i32,
    /// Its preemption policy is `Never`.
    pub never: bool,
    pub members: Vec<Arc<PodInfo>>,
}

impl Preemptor {
    /// kube's `newPodGroupPreemptor`: under the PodGroupPreemptionPolicy gate the group's
    /// own policy (PreemptLowerPriority when unset); without it, Never when any member
    /// says Never.
    pub fn new(group: &GroupPolicy, members: Vec<Arc<PodInfo>>, policy_gate: bool) -> Self {
        let never = if policy_gate {
            group.preemption_policy.as_deref() == Some("Never")
        } else {
            members.iter().any(|m| {
                m.object()
                    .spec
                    .as_ref()
                    .and_then(|s| s.preemption_policy.as_deref())
                    == Some("Never")
            })
        };
        Preemptor {
            priority: group.priority,
            never,
            members,
        }
    }

    /// kube's `preemptorEligibleToPreemptOthers`: the message when it may not preempt.
    pub fn eligible(&self) -> Result<(), &'static str> {
        if self.never {
            return Err(NOT_ELIGIBLE_NEVER);
        }
        Ok(())
    }
}

/// kube's `GetPodPriority` without CompositePodGroups: a member of an existing PodGroup
/// weighs as its group, any other pod as itself.
pub fn pod_priority(pod: &PodInfo, groups: &PodGroups) -> i32 {
    group_key_of(&pod.object())
        .and_then(|key| groups.policy(&key))
        .map_or_else(|| pod.priority(), |g| g.priority)
}

/// kube's `isOngoingPreemption`: on a node some member is nominated to, a pod of lower
/// priority than the group is terminating after a preemption. The nominations then stand
/// (kube's `buildCurrentNominatingInfos`).
pub fn ongoing_preemption(preemptor: &Preemptor, snapshot: &Snapshot, groups: &PodGroups) -> bool {
    let mut nominated: Vec<&str> = (preemptor.members.iter())
        .filter_map(|m| m.nominated_node_name())
        .collect();
    nominated.sort_unstable();
    nominated.dedup();
    nominated.into_iter().any(|node| {
        snapshot.get(node).is_some_and(|n| {
            n.pods.iter().any(|p| {
                pod_priority(p, groups) < preemptor.priority && terminating_by_preemption(p)
            })
        })
    })
}

/// kube's victim types, as MoreImportantVictim ranks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VictimKind {
    /// A pod of no PodGroup.
    Pod,
    /// A PodGroup's scheduled pods together (`disruptionMode: all`), or one member of a
    /// group disrupted pod by pod (kube types it by its group all the same).
    PodGroup,
}

impl VictimKind {
    fn rank(self) -> u8 {
        match self {
            VictimKind::Pod => 1,
            VictimKind::PodGroup => 2,
        }
    }
}

/// What preemption evicts as one (kube's `DomainVictim`): a pod, or every scheduled pod
/// of a PodGroup, each with the node it is on.
#[derive(Debug, Clone)]
pub struct Victim {
    pub pods: Vec<(Arc<PodInfo>, String)>,
    pub priority: i32,
    pub kind: VictimKind,
    /// The earliest start of its pods, in seconds (a pod not started counts as now).
    earliest_start: i64,
}

impl Victim {
    pub(crate) fn new(pods: Vec<(Arc<PodInfo>, String)>, priority: i32, kind: VictimKind) -> Self {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let earliest_start = (pods.iter())
            .map(|(p, _)| p.start_time.as_ref().map_or(now, |t| t.0.as_second()))
            .min()
            .unwrap_or(now);
        Victim {
            pods,
            priority,
            kind,
            earliest_start,
        }
    }

    /// kube's `IsGroup`: counted as a pod group disruption.
    pub fn is_group(&self) -> bool {
        self.kind == VictimKind::PodGroup
    }
}

/// kube's `MoreImportantVictim` as an ordering, the more important first: higher
/// priority, then a group before a pod, then more pods, then the earlier start.
pub fn more_important_victim(a: &Victim, b: &Victim) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(b.kind.rank().cmp(&a.kind.rank()))
        .then(b.pods.len().cmp(&a.pods.len()))
        .then(a.earliest_start.cmp(&b.earliest_start))
}

/// Every scheduled pod (every one on a node) of each PodGroup whose `disruptionMode` is
/// `all`, with its node: what such a group's victim evicts (kube's
/// `searchCrossNodesVictimPods`, from the group's scheduled pods).
pub(crate) type AllModeMembers = HashMap<String, Vec<(Arc<PodInfo>, String)>>;

pub(crate) fn all_mode_members(snapshot: &Snapshot, groups: &PodGroups) -> AllModeMembers {
    let mut members = AllModeMembers::new();
    if !groups.any_disruption_all() {
        return members;
    }
    for node in snapshot.nodes.iter() {
        for pod in &node.pods {
            if let Some((key, _)) = all_mode_group(pod, groups) {
                (members.entry(key).or_default()).push((pod.clone(), node.name.to_string()));
            }
        }
    }
    members
}

/// The group `pod` belongs to, when its `disruptionMode` is `all`.
fn all_mode_group(pod: &PodInfo, groups: &PodGroups) -> Option<(String, Arc<GroupPolicy>)> {
    let key = group_key_of(&pod.object())?;
    let policy = groups.policy(&key)?;
    policy.disruption_all.then_some((key, policy))
}

/// kube's `getCrossNodesVictims` over `nodes`: every pod on them, once; a member of a
/// group with `disruptionMode: all` stands for the whole group, whose scheduled pods
/// (`members`) become one victim at its group's priority; a member of any other group is
/// a victim alone at its group's priority.
pub(crate) fn victims_on<'a>(
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
    groups: &PodGroups,
    members: &AllModeMembers,
) -> Vec<Victim> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut victims = Vec::new();
    for node in nodes {
        for pod in &node.pods {
            match all_mode_group(pod, groups) {
                Some((key, policy)) => {
                    if seen.insert(format!("podgroup/{key}")) {
                        let pods = members.get(&key).cloned().unwrap_or_default();
                        victims.push(Victim::new(pods, policy.priority, VictimKind::PodGroup));
                    }
                }
                None => {
                    if seen.insert(format!("pod/{}", pod.key)) {
                        let kind = if group_key_of(&pod.object()).is_some() {
                            VictimKind::PodGroup
                        } else {
                            VictimKind::Pod
                        };
                        let pods = vec![(pod.clone(), node.name.to_string())];
                        victims.push(Victim::new(pods, pod_priority(pod, groups), kind));
                    }
                }
            }
        }
    }
    victims
}

/// kube's `newDomainForWorkloadPreemption` for the cluster domain: the victims of every
/// node.
pub fn cluster_victims(snapshot: &Snapshot, groups: &PodGroups) -> Vec<Victim> {
    let members = all_mode_members(snapshot, groups);
    victims_on(snapshot.nodes.iter().map(|n| &**n), groups, &members)
}

/// kube's `isPreemptionAllowed`: the victims of lower priority than the group.
pub fn potential_victims(victims: Vec<Victim>, preemptor: &Preemptor) -> Vec<Victim> {
    (victims.into_iter())
        .filter(|v| v.priority < preemptor.priority)
        .collect()
}

/// kube's `podTerminatingByPreemption`: being deleted after a scheduler preempted it.
pub(crate) fn terminating_by_preemption(p: &PodInfo) -> bool {
    p.terminating() && p.preempted
}

/// A PDB's selector as kube reads it: none or an empty one selects nothing here.
fn pdb_selector(pdb: &PodDisruptionBudget) -> Option<&LabelSelector> {
    let selector = pdb.spec.as_ref()?.selector.as_ref()?;
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    (!empty).then_some(selector)
}

/// kube's `podIsViolating` of `FilterVictimsWithPDBViolation` (pod group preemption's too): the first budget selecting
/// `pod` (not already counted in its `disruptedPods`) that evicting it overdraws.
/// `allowed` holds each budget's disruptions left, counted down.
pub(crate) fn pod_violates_pdb(
    pod: &PodInfo,
    pdbs: &[Arc<PodDisruptionBudget>],
    allowed: &mut [i32],
) -> bool {
    if pod.labels().is_empty() {
        return false;
    }
    for (i, pdb) in pdbs.iter().enumerate() {
        if pdb.metadata.namespace.as_deref() != Some(pod.namespace.as_str()) {
            continue;
        }
        let Some(selector) = pdb_selector(pdb) else {
            continue;
        };
        if !label_selector_matches(Some(selector), pod.labels()) {
            continue;
        }
        let disrupted = (pdb.status.as_ref())
            .and_then(|s| s.disrupted_pods.as_ref())
            .is_some_and(|d| d.contains_key(&pod.name));
        if disrupted {
            continue;
        }
        allowed[i] -= 1;
        if allowed[i] < 0 {
            return true;
        }
    }
    false
}

/// Each budget's disruptions allowed, to count down.
pub(crate) fn pdb_allowed(pdbs: &[Arc<PodDisruptionBudget>]) -> Vec<i32> {
    (pdbs.iter())
        .map(|p| {
            (p.status.as_ref())
                .and_then(|s| s.disruptions_allowed)
                .unwrap_or(0)
        })
        .collect()
}

/// kube's `FilterVictimsWithPDBViolation`: a victim any of whose pods would overdraw a
/// budget is violating as a whole (with how many of its pods do); the rest are not.
pub fn filter_victims_with_pdb_violation(
    victims: Vec<Victim>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<(Victim, usize)>, Vec<Victim>) {
    let mut allowed = pdb_allowed(pdbs);
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for v in victims {
        let count = (v.pods.iter())
            .filter(|(p, _)| pod_violates_pdb(p, pdbs, &mut allowed))
            .count();
        if count > 0 {
            violating.push((v, count));
        } else {
            fine.push(v);
        }
    }
    (violating, fine)
}

/// kube's mutable snapshot (`StartMutations` to `EndMutations`), as a copy: pods removed
/// from and added to its nodes. The counts a cache keeps are dropped with the first
/// change; plugins then count by scanning, as they do on any snapshot built here.
#[derive(Debug, Clone)]
pub struct MutableSnapshot {
    snapshot: Snapshot,
}

impl MutableSnapshot {
    pub fn new(snapshot: &Snapshot) -> Self {
        let mut snapshot = snapshot.clone();
        snapshot.topology = Default::default();
        MutableSnapshot { snapshot }
    }

    /// The cluster as changed so far.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn edit(&mut self, node: &str, edit: impl FnOnce(&mut NodeInfo) -> bool) -> bool {
        let Some(&i) = self.snapshot.index.get(node) else {
            return false;
        };
        let nodes = Arc::make_mut(&mut self.snapshot.nodes);
        let Some(entry) = nodes.get_mut(i) else {
            return false;
        };
        edit(Arc::make_mut(entry))
    }

    /// kube's `AddPod` (and `AssumePod`): `pod` on `node`; false when there is no such node.
    pub fn add_pod(&mut self, node: &str, pod: Arc<PodInfo>) -> bool {
        self.edit(node, |n| {
            n.add_pod(pod);
            true
        })
    }

    /// kube's `RemovePod` (and `ForgetPod`); false when it was not there.
    pub fn remove_pod(&mut self, node: &str, key: &str) -> bool {
        self.edit(node, |n| n.remove_pod(key))
    }
}

/// A member the algorithm placed on the cluster without the victims (kube's
/// `ProposedAssignment`): its node and the cycle state it was placed with, in the order
/// the algorithm placed them.
#[derive(Clone)]
pub struct Assignment {
    pub pod: Arc<PodInfo>,
    pub node: String,
    pub state: CycleState,
}

/// What the evaluation chose: the pods to evict (their victims in MoreImportantVictim
/// order), how many budgets and pod group disruptions that costs, and where each member
/// placed is nominated.
#[derive(Debug, Clone, Default)]
pub struct Selected {
    pub victims: Vec<Arc<PodInfo>>,
    pub pdb_violations: usize,
    pub group_disruptions: usize,
    /// Member (`namespace/name`) → node.
    pub nominated: BTreeMap<String, String>,
}

/// The victim's pods back on their nodes, told to every member's PreFilter state
/// (kube's `addVictimPodsWithPreFilter`, `removeVictimPodsWithPreFilter` with `add`
/// false).
fn move_victim(
    fw: &Framework,
    snapshot: &mut MutableSnapshot,
    victim: &Victim,
    assignments: &mut [Assignment],
    add: bool,
) -> Result<(), Status> {
    for (pod, node) in &victim.pods {
        if add {
            snapshot.add_pod(node, pod.clone());
        } else {
            snapshot.remove_pod(node, &pod.key);
        }
        let Some(info) = snapshot.snapshot().get(node).cloned() else {
            continue;
        };
        for a in assignments.iter_mut() {
            let s = fw.run_pre_filter_extension(&mut a.state, &a.pod, pod, &info, add);
            if !s.is_success() {
                return Err(Status::error(s.message()).with_plugin(s.plugin));
            }
        }
    }
    Ok(())
}

/// kube's `reprieveVictim`: the victim back; whether every member still passes Filter
/// (the nominated pods counted) on its node, each member added there and reserved before
/// the next is checked, as the algorithm placed them; the members are taken out again
/// after, and the victim too when it does not fit.
fn reprieve(
    fw: &Framework,
    snapshot: &mut MutableSnapshot,
    victim: &Victim,
    assignments: &mut [Assignment],
) -> Result<bool, Status> {
    move_victim(fw, snapshot, victim, assignments, true)?;
    let mut added = Vec::new();
    let mut fits = true;
    for i in 0..assignments.len() {
        let node = assignments[i].node.clone();
        let Some(info) = snapshot.snapshot().get(&node).cloned() else {
            continue;
        };
        let a = &assignments[i];
        if !fw
            .run_filters(&a.state, &a.pod, &info, false)
            .0
            .is_success()
        {
            move_victim(fw, snapshot, victim, assignments, false)?;
            fits = false;
            break;
        }
        let a = &mut assignments[i];
        snapshot.add_pod(&node, a.pod.clone());
        // A Reserve failure is not a verdict here, as in kube.
        let _ = fw.run_reserve(&mut a.state, &a.pod, &node);
        added.push(i);
    }
    for i in added.into_iter().rev() {
        let a = &mut assignments[i];
        fw.run_unreserve(&mut a.state, &a.pod, &a.node);
        snapshot.remove_pod(&a.node, &a.pod.key);
    }
    Ok(fits)
}

/// kube's `selectVictimsOnDomain` once the group was scheduled on `snapshot` without the
/// `potential` victims (all removed from it): the victims sorted by importance, those
/// whose eviction breaks a budget reprieved first, then the others, each kept if every
/// member still fits with it; the rest are evicted. Every member placed is nominated to
/// its node.
pub fn select_victims(
    fw: &Framework,
    snapshot: &mut MutableSnapshot,
    mut potential: Vec<Victim>,
    assignments: &mut [Assignment],
) -> Result<Selected, Status> {
    potential.sort_by(more_important_victim);
    let pdbs = snapshot.snapshot().pdbs.clone();
    let (violating, fine) = filter_victims_with_pdb_violation(potential, &pdbs);
    let mut evicted: Vec<Victim> = Vec::new();
    let mut pdb_violations = 0;
    for (v, count) in violating {
        if !reprieve(fw, snapshot, &v, assignments)? {
            pdb_violations += count;
            evicted.push(v);
        }
    }
    for v in fine {
        if !reprieve(fw, snapshot, &v, assignments)? {
            evicted.push(v);
        }
    }
    evicted.sort_by(more_important_victim);
    let group_disruptions = evicted.iter().filter(|v| v.is_group()).count();
    let victims = (evicted.into_iter())
        .flat_map(|v| v.pods.into_iter().map(|(p, _)| p))
        .collect();
    let nominated = (assignments.iter())
        .map(|a| (a.pod.key.clone(), a.node.clone()))
        .collect();
    Ok(Selected {
        victims,
        pdb_violations,
        group_disruptions,
        nominated,
    })
}

#[cfg(test)]
#[path = "preemption_tests.rs"]
mod tests;
