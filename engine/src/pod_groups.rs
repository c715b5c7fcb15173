//! PodGroups (`scheduling.k8s.io/v1beta1`, or v1alpha2 read as it: `mcsched_shared::pod_group_versions`)
//! kube-scheduler's PodGroup lister and the cache's `podGroupStates`. A pod is a member
//! of the group its `spec.schedulingGroup.podGroupName` names, in its namespace.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use mcsched_shared::pod_group_versions::PodGroupVersion;

use crate::snapshot::PodInfo;

/// `namespace/name` of the PodGroup `pod` belongs to, if it belongs to one.
pub fn group_key_of(pod: &Pod) -> Option<String> {
    let name = pod
        .spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .as_deref()?;
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    Some(format!("{ns}/{name}"))
}

/// What scheduling reads of a PodGroup's spec (immutable in v1alpha2 but for nothing;
/// v1beta1's minCount may change).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupPolicy {
    /// The gang policy's minCount; None: the basic policy.
    pub gang_min_count: Option<usize>,
    /// `schedulingConstraints.topology` keys: the group's pods share one value of each.
    pub topology_keys: Vec<String>,
    /// `schedulingConstraints` is set (even without keys).
    pub has_constraints: bool,
    pub generation: i64,
    /// `status.conditions` as last seen, for the scheduler's own condition.
    pub conditions: Vec<Condition>,
    pub uid: String,
    /// `spec.priority` (kube's PodGroupPriority: 0 when unset), which its members must
    /// share and which preemption weighs it by, as preemptor and as victim.
    pub priority: i32,
    /// `spec.preemptionPolicy` (read under the PodGroupPreemptionPolicy gate).
    pub preemption_policy: Option<String>,
    /// `spec.disruptionMode.all`: preemption evicts the group's scheduled pods together
    /// or not at all.
    pub disruption_all: bool,
}

impl GroupPolicy {
    pub fn of(group: &PodGroup) -> Self {
        let spec = &group.spec;
        GroupPolicy {
            gang_min_count: spec
                .scheduling_policy
                .gang
                .as_ref()
                .map(|g| usize::try_from(g.min_count).unwrap_or(0)),
            topology_keys: spec
                .scheduling_constraints
                .as_ref()
                .and_then(|c| c.topology.as_ref())
                .map(|t| t.iter().map(|t| t.key.clone()).collect())
                .unwrap_or_default(),
            has_constraints: spec.scheduling_constraints.is_some(),
            generation: group.metadata.generation.unwrap_or(0),
            conditions: group
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default(),
            uid: group.metadata.uid.clone().unwrap_or_default(),
            priority: spec.priority.unwrap_or(0),
            preemption_policy: spec.preemption_policy.clone(),
            disruption_all: spec
                .disruption_mode
                .as_ref()
                .is_some_and(|m| m.all.is_some()),
        }
    }
}

/// One group's pods as the scheduler sees them (kube's `podGroupStateData`).
#[derive(Debug, Clone, Default)]
pub struct GroupState {
    /// Every known member, by uid.
    all: HashMap<String, Arc<PodInfo>>,
    unscheduled: HashSet<String>,
    /// Assumed by this scheduler, binding not seen yet.
    assumed: HashSet<String>,
    /// Bound (spec.nodeName set).
    assigned: HashSet<String>,
}

impl GroupState {
    pub fn all_count(&self) -> usize {
        self.all.len()
    }

    /// Assumed and assigned: kube's ScheduledPodsCount.
    pub fn scheduled_count(&self) -> usize {
        self.assumed.len() + self.assigned.len()
    }

    pub fn assigned_count(&self) -> usize {
        self.assigned.len()
    }

    pub fn assumed_uids(&self) -> Vec<String> {
        self.assumed.iter().cloned().collect()
    }

    /// Members neither assumed nor bound, by name (kube's UnscheduledPods).
    pub fn unscheduled(&self) -> BTreeMap<String, Arc<PodInfo>> {
        self.unscheduled
            .iter()
            .filter_map(|uid| self.all.get(uid))
            .map(|p| (p.name.clone(), p.clone()))
            .collect()
    }

    /// Members bound or assumed, with their node.
    pub fn scheduled(&self) -> Vec<Arc<PodInfo>> {
        self.assigned
            .iter()
            .chain(self.assumed.iter())
            .filter_map(|uid| self.all.get(uid))
            .cloned()
            .collect()
    }

    fn add(&mut self, pod: Arc<PodInfo>) {
        let uid = pod.uid.clone();
        if pod.node_name().is_some() {
            self.unscheduled.remove(&uid);
            self.assumed.remove(&uid);
            self.assigned.insert(uid.clone());
        } else if !self.assumed.contains(&uid) {
            self.unscheduled.insert(uid.clone());
        }
        self.all.insert(uid, pod);
    }

    fn remove(&mut self, uid: &str) {
        self.all.remove(uid);
        self.unscheduled.remove(uid);
        self.assumed.remove(uid);
        self.assigned.remove(uid);
    }

    fn assume(&mut self, uid: &str) {
        if !self.all.contains_key(uid) {
            return;
        }
        self.unscheduled.remove(uid);
        if !self.assigned.contains(uid) {
            self.assumed.insert(uid.to_string());
        }
    }

    fn forget(&mut self, uid: &str) {
        if !self.assumed.remove(uid) {
            return;
        }
        if !self.assigned.contains(uid) {
            self.unscheduled.insert(uid.to_string());
        }
    }
}

/// Every PodGroup and every group's members. Shared by the watches that feed it, the
/// scheduling cycles that assume and forget members, and GangScheduling.
#[derive(Default)]
pub struct PodGroups {
    groups: RwLock<HashMap<String, Arc<GroupPolicy>>>,
    states: RwLock<States>,
    /// kube-scheduler's TopologyAwareWorkloadScheduling gate: groups are placed by the
    /// placement algorithm (one simulation per topology domain).
    topology_aware: std::sync::atomic::AtomicBool,
    /// kube-scheduler's PodGroupPreemptionPolicy gate: a group's own preemptionPolicy,
    /// not its members', says whether it may preempt.
    preemption_policy_gate: std::sync::atomic::AtomicBool,
    /// The PodGroup API version the API server serves, once the watch found it: the
    /// status the scheduler writes goes there, its condition named as that version names it.
    served: RwLock<Option<PodGroupVersion>>,
}

/// Each group's members, and each member's group by uid: a deletion found by a relist
/// carries only the pod's metadata.
#[derive(Default)]
struct States {
    by_group: HashMap<String, GroupState>,
    group_of: HashMap<String, String>,
}

impl PodGroups {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn topology_aware(&self) -> bool {
        self.topology_aware
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_topology_aware(&self, on: bool) {
        self.topology_aware
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn preemption_policy_gate(&self) -> bool {
        self.preemption_policy_gate
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_preemption_policy_gate(&self, on: bool) {
        self.preemption_policy_gate
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn served(&self) -> Option<PodGroupVersion> {
        *self.served.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_served(&self, version: Option<PodGroupVersion>) {
        *self.served.write().unwrap_or_else(|e| e.into_inner()) = version;
    }

    fn groups(&self) -> RwLockReadGuard<'_, HashMap<String, Arc<GroupPolicy>>> {
        self.groups.read().unwrap_or_else(|e| e.into_inner())
    }

    fn states_mut(&self) -> RwLockWriteGuard<'_, States> {
        self.states.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Some PodGroup's `disruptionMode` is `all`: preemption must gather its pods.
    pub(crate) fn any_disruption_all(&self) -> bool {
        self.groups().values().any(|g| g.disruption_all)
    }

    /// The PodGroup `namespace/name`, if it exists.
    pub fn policy(&self, key: &str) -> Option<Arc<GroupPolicy>> {
        self.groups().get(key).cloned()
    }

    /// Adds or replaces a PodGroup; true when its gang's minCount changed (mutable since
    /// v1beta1: a lower one may let waiting members through).
    pub fn set_group(&self, group: &PodGroup) -> bool {
        let ns = group.metadata.namespace.as_deref().unwrap_or("default");
        let name = group.metadata.name.as_deref().unwrap_or_default();
        let policy = GroupPolicy::of(group);
        let min = policy.gang_min_count;
        let old = self
            .groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(format!("{ns}/{name}"), Arc::new(policy));
        old.is_some_and(|o| o.gang_min_count != min)
    }

    pub fn remove_group(&self, key: &str) {
        self.groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Every PodGroup at once, after a watch (re)listed them.
    pub fn replace_groups(&self, groups: &[PodGroup]) {
        let all = groups
            .iter()
            .map(|g| {
                let ns = g.metadata.namespace.as_deref().unwrap_or("default");
                let name = g.metadata.name.as_deref().unwrap_or_default();
                (format!("{ns}/{name}"), Arc::new(GroupPolicy::of(g)))
            })
            .collect();
        *self.groups.write().unwrap_or_else(|e| e.into_inner()) = all;
    }

    /// A member appeared or changed (bound, or not yet). Pods of no group are ignored.
    pub fn add_pod(&self, pod: Arc<PodInfo>) {
        let Some(key) = group_key_of(&pod.object()) else {
            return;
        };
        let mut states = self.states_mut();
        states.group_of.insert(pod.uid.clone(), key.clone());
        states.by_group.entry(key).or_default().add(pod);
    }

    /// The member `uid` is gone (deleted, or finished); nothing if it was none.
    pub fn remove_member(&self, uid: &str) {
        let mut states = self.states_mut();
        let Some(key) = states.group_of.remove(uid) else {
            return;
        };
        if let Some(s) = states.by_group.get_mut(&key) {
            s.remove(uid);
            if s.all.is_empty() {
                states.by_group.remove(&key);
            }
        }
    }

    /// The scheduler placed `pod` (assumed in the cache).
    pub fn assume(&self, pod: &PodInfo) {
        if let Some(key) = group_key_of(&pod.object())
            && let Some(s) = self.states_mut().by_group.get_mut(&key)
        {
            s.assume(&pod.uid);
        }
    }

    /// The placement of `pod` was undone (forgotten in the cache).
    pub fn forget(&self, pod: &PodInfo) {
        if let Some(key) = group_key_of(&pod.object())
            && let Some(s) = self.states_mut().by_group.get_mut(&key)
        {
            s.forget(&pod.uid);
        }
    }

    /// A copy of the group's state; an empty one when no member is known.
    pub fn state(&self, key: &str) -> GroupState {
        self.states
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_group
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn member(name: &str, node: Option<&str>) -> Arc<PodInfo> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"containers": [], "nodeName": node,
                "schedulingGroup": {"podGroupName": "g"}}
        }))
        .expect("pod");
        Arc::new(PodInfo::new(Arc::new(pod)))
    }

    #[test]
    fn members_move_from_unscheduled_to_assumed_to_assigned() {
        let groups = PodGroups::new();
        let (a, b) = (member("a", None), member("b", None));
        groups.add_pod(a.clone());
        groups.add_pod(b.clone());
        let s = groups.state("ns/g");
        assert_eq!((s.all_count(), s.scheduled_count()), (2, 0));
        assert_eq!(s.unscheduled().keys().collect::<Vec<_>>(), ["a", "b"]);

        groups.assume(&a);
        let s = groups.state("ns/g");
        assert_eq!(s.scheduled_count(), 1);
        assert_eq!(s.assumed_uids(), ["uid-a"]);
        groups.forget(&a);
        assert_eq!(groups.state("ns/g").scheduled_count(), 0);

        groups.assume(&a);
        groups.add_pod(member("a", Some("n1")));
        let s = groups.state("ns/g");
        assert_eq!((s.scheduled_count(), s.assigned_count()), (1, 1));
        // A bound member stays scheduled when its assumption is forgotten.
        groups.forget(&a);
        assert_eq!(groups.state("ns/g").scheduled_count(), 1);

        groups.remove_member(&a.uid);
        groups.remove_member(&b.uid);
        assert_eq!(groups.state("ns/g").all_count(), 0);
        assert!(groups.states.read().expect("lock").by_group.is_empty());
    }

    #[test]
    fn a_pod_of_no_group_is_not_a_member() {
        let groups = PodGroups::new();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "ns", "uid": "u"},
            "spec": {"containers": []}
        }))
        .expect("pod");
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(pod))));
        assert!(groups.states.read().expect("lock").by_group.is_empty());
    }
}
