//! GangScheduling: all or nothing for the pods of a PodGroup with a gang policy. Its pods
//! wait outside the active queue until the group exists and `minCount` of them do; in the
//! pod group cycle, PlacementFeasible says whether a placement can still meet `minCount`
//! (v1.37), and the members placed wait at Permit until `minCount` of them are; then all
//! bind.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{
    ClusterEvent, Code, CycleState, Handle, PermitPlugin, PlacementFeasiblePlugin,
    PlacementProgress, Plugin, PreEnqueuePlugin, Status,
};
use crate::pod_groups::{GroupPolicy, PodGroups, group_key_of};
use crate::snapshot::PodInfo;

pub(crate) const NAME: &str = "GangScheduling";

/// How long the gang's pods wait at Permit for the rest (kube's permitTimeoutDuration).
const PERMIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

pub(crate) struct GangScheduling {
    groups: Arc<PodGroups>,
    handle: OnceLock<Handle>,
}

impl GangScheduling {
    pub(crate) fn new(groups: Arc<PodGroups>) -> Self {
        GangScheduling {
            groups,
            handle: OnceLock::new(),
        }
    }
}

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        NAME
    }
    fn set_handle(&self, handle: &Handle) {
        let _ = self.handle.set(handle.clone());
    }
    /// A new member may complete the gang; a new PodGroup may be the one it waits for
    /// (both are immutable where it matters, so updates do not count).
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::PodAdd, ClusterEvent::PodGroupAdd]
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
    fn as_placement_feasible(&self) -> Option<&dyn PlacementFeasiblePlugin> {
        Some(self)
    }
}

impl PlacementFeasiblePlugin for GangScheduling {
    /// kube's `PlacementFeasible`: a gang's minCount (1 for a basic group) against the
    /// members scheduled and those left to try.
    fn placement_feasible(&self, group: &GroupPolicy, progress: PlacementProgress) -> Status {
        let min = group.gang_min_count.unwrap_or(1);
        let PlacementProgress {
            remaining,
            scheduled,
        } = progress;
        if remaining.saturating_add(scheduled) < min {
            return Status::unschedulable(format!(
                "minCount ({min}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
            ));
        }
        if scheduled < min {
            return Status::new(
                Code::Wait,
                vec![
                    format!(
                        "minCount ({min}) is not yet satisfied: {scheduled} scheduled, {remaining} remaining"
                    )
                    .into(),
                ],
            );
        }
        Status::success()
    }
}

fn group_name(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, name)| name)
}

impl PreEnqueuePlugin for GangScheduling {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        let Some(key) = group_key_of(pod) else {
            return Status::success();
        };
        let Some(policy) = self.groups.policy(&key) else {
            return Status::unresolvable(format!(
                "waiting for pods's pod group {:?} to appear in scheduling queue",
                group_name(&key)
            ));
        };
        let Some(min) = policy.gang_min_count else {
            return Status::success();
        };
        if self.groups.state(&key).all_count() < min {
            return Status::unresolvable(
                "waiting for minCount pods from a gang to appear in scheduling queue",
            );
        }
        Status::success()
    }
}

impl PermitPlugin for GangScheduling {
    fn permit(&self, cycle: &CycleState, pod: &PodInfo, _node: &str) -> (Status, Duration) {
        let Some(key) = group_key_of(&pod.object()) else {
            return (Status::success(), Duration::ZERO);
        };
        let Some(policy) = self.groups.policy(&key) else {
            // v1.37's words: its snapshot lister's error for a key "podgroup/ns/name".
            let msg = format!(
                "failed to get podGroup {key}: pod group object not found for pod group podgroup/{key}"
            );
            return (Status::error(msg), Duration::ZERO);
        };
        let Some(min) = policy.gang_min_count else {
            return (Status::success(), Duration::ZERO);
        };
        let state = self.groups.state(&key);
        if state.scheduled_count() < min {
            return (
                Status::new(
                    crate::framework::Code::Wait,
                    vec!["waiting for minCount pods from a gang to be scheduled".into()],
                ),
                PERMIT_TIMEOUT,
            );
        }
        // Quorum: this pod goes on, and so do the members waiting for it (not for a what-if's
        // verdict, which changes nothing).
        if !cycle.is_dry_run()
            && let Some(handle) = self.handle.get()
        {
            for uid in state.assumed_uids() {
                if let Some(waiting) = handle.get_waiting_pod(&uid) {
                    waiting.allow(NAME);
                }
            }
        }
        (Status::success(), Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;
    use serde_json::json;

    fn member(name: &str) -> Arc<PodInfo> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"containers": [], "schedulingGroup": {"podGroupName": "g"}}
        }))
        .expect("pod");
        Arc::new(PodInfo::new(Arc::new(pod)))
    }

    fn group(policy: serde_json::Value) -> PodGroup {
        serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"schedulingPolicy": policy}
        }))
        .expect("group")
    }

    #[test]
    fn a_gang_waits_for_its_group_then_for_min_count_pods() {
        let groups = PodGroups::new();
        let plugin = GangScheduling::new(groups.clone());
        let a = member("a");
        let s = plugin.pre_enqueue(&a.object());
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "waiting for pods's pod group \"g\" to appear in scheduling queue"
        );
        groups.set_group(&group(json!({"gang": {"minCount": 2}})));
        groups.add_pod(a.clone());
        let s = plugin.pre_enqueue(&a.object());
        assert_eq!(
            s.message(),
            "waiting for minCount pods from a gang to appear in scheduling queue"
        );
        let b = member("b");
        groups.add_pod(b.clone());
        assert!(plugin.pre_enqueue(&a.object()).is_success());

        // Permit: the first placed waits, the second completes the quorum.
        groups.assume(&a);
        let (s, timeout) = plugin.permit(&CycleState::new(), &a, "n1");
        assert_eq!(
            (s.code, s.message().as_str(), timeout),
            (
                Code::Wait,
                "waiting for minCount pods from a gang to be scheduled",
                PERMIT_TIMEOUT
            )
        );
        groups.assume(&b);
        assert!(plugin.permit(&CycleState::new(), &b, "n2").0.is_success());
    }

    /// A what-if's Permit (a dry run's state) says what the live one would, and allows no
    /// member waiting for the quorum; the live one does.
    #[test]
    fn a_dry_run_permit_allows_no_waiting_member() {
        let groups = PodGroups::new();
        let plugin = GangScheduling::new(groups.clone());
        let handle = Handle::for_test();
        plugin.set_handle(&handle);
        groups.set_group(&group(json!({"gang": {"minCount": 2}})));
        let (a, b) = (member("a"), member("b"));
        groups.add_pod(a.clone());
        groups.add_pod(b.clone());
        groups.assume(&a);
        handle.park_for_test(a.clone(), "n1", NAME);
        groups.assume(&b);
        let mut dry = CycleState::new();
        dry.set_dry_run();
        assert!(plugin.permit(&dry, &b, "n2").0.is_success());
        let waiting = handle.get_waiting_pod("uid-a").expect("a waits");
        assert_eq!(waiting.pending_plugins(), vec![NAME]);
        assert!(plugin.permit(&CycleState::new(), &b, "n2").0.is_success());
        assert!(waiting.pending_plugins().is_empty());
    }

    /// kube's PlacementFeasible, word for word: Unschedulable once minCount is out of
    /// reach, Wait until it is met, then Success; a basic group needs one member.
    #[test]
    fn placement_feasible_counts_members_scheduled_and_left() {
        let plugin = GangScheduling::new(PodGroups::new());
        let gang = GroupPolicy {
            gang_min_count: Some(5),
            ..Default::default()
        };
        let at = |remaining, scheduled| PlacementProgress {
            remaining,
            scheduled,
        };
        let s = plugin.placement_feasible(&gang, at(1, 3));
        assert_eq!(
            (s.code, s.message().as_str()),
            (
                Code::Unschedulable,
                "minCount (5) cannot be satisfied: 3 scheduled, 1 remaining"
            )
        );
        let s = plugin.placement_feasible(&gang, at(2, 3));
        assert_eq!(
            (s.code, s.message().as_str()),
            (
                Code::Wait,
                "minCount (5) is not yet satisfied: 3 scheduled, 2 remaining"
            )
        );
        assert!(plugin.placement_feasible(&gang, at(0, 5)).is_success());
        let basic = GroupPolicy::default();
        assert_eq!(plugin.placement_feasible(&basic, at(3, 0)).code, Code::Wait);
        assert!(plugin.placement_feasible(&basic, at(2, 1)).is_success());
        assert_eq!(
            plugin.placement_feasible(&basic, at(0, 0)).message(),
            "minCount (1) cannot be satisfied: 0 scheduled, 0 remaining"
        );
    }

    #[test]
    fn a_basic_group_and_a_pod_of_no_group_pass() {
        let groups = PodGroups::new();
        let plugin = GangScheduling::new(groups.clone());
        groups.set_group(&group(json!({"basic": {}})));
        let a = member("a");
        assert!(plugin.pre_enqueue(&a.object()).is_success());
        assert!(plugin.permit(&CycleState::new(), &a, "n").0.is_success());
        let loner: Pod = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "ns"}, "spec": {"containers": []}
        }))
        .expect("pod");
        assert!(plugin.pre_enqueue(&loner).is_success());
    }
}
