//! LeafNodeFit: a virtual node fits a pod only when some real node of its leaf does.
//! PreFilter takes the leaves' snapshots for the cycle, Filter judges each virtual node on
//! its leaf's own nodes (see [`checker`]), and Reserve counts the pod on the leaf node
//! found for it until the leaf's scheduler has placed the copy. Host nodes pass.

pub(crate) mod checker;
pub(crate) mod leaf_claims;
mod leaf_devices;
mod members;

use std::sync::Arc;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult,
    ReservePlugin, Status,
};
use crate::leaf::check_memory::Asker;
use crate::leaf::cycle::{LEAF_CYCLE_KEY, LeafCycle, LeafSnapshots};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};
use checker::LeafChecker;

pub const NAME: &str = "LeafNodeFit";

pub(crate) struct LeafNodeFit {
    checker: LeafChecker,
    leaves: Arc<dyn LeafSnapshots>,
}

impl LeafNodeFit {
    /// `fit` is the profile's NodeResourcesFit, so its pluginConfig holds in leaves too.
    pub(crate) fn new(fit: Option<Arc<dyn Plugin>>, leaves: Arc<dyn LeafSnapshots>) -> Self {
        LeafNodeFit {
            checker: LeafChecker::new(fit),
            leaves,
        }
    }

    /// The host's ResourceClaims (the copies' are made from them) and the profile's
    /// DynamicResourcesArgs.
    pub(crate) fn with_devices(
        mut self,
        host_claims: Arc<crate::dra_state::ResourceClaims>,
        args: crate::plugins::dynamic_resources::DynamicResourcesArgs,
    ) -> Self {
        self.checker = self.checker.with_devices(host_claims, args);
        self
    }
}

/// Virtual node → the leaf node this cycle's check found for the pod.
pub fn leaf_nodes(state: &CycleState) -> std::collections::HashMap<String, String> {
    state
        .read::<LeafCycle>(LEAF_CYCLE_KEY)
        .map(LeafCycle::choices)
        .unwrap_or_default()
}

/// Virtual node → what the check noted about the copy there (its ServiceAccount).
pub fn leaf_notes(state: &CycleState) -> std::collections::HashMap<String, Vec<String>> {
    state
        .read::<LeafCycle>(LEAF_CYCLE_KEY)
        .map(LeafCycle::notes)
        .unwrap_or_default()
}

impl Plugin for LeafNodeFit {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Only a new node (a leaf joining shows as one), leaves gaining room (their nodes,
    /// pods, storage, a leaf connecting) or the host claims a copy would take along can
    /// change its verdict.
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::LeafChange,
            ClusterEvent::PvcChange,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for LeafNodeFit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if snapshot.virtual_nodes == 0 {
            return (None, Status::skip());
        }
        let mut cycle = self.leaves.cycle(snapshot.volumes.clone());
        if let Some(policy) = snapshot.policies.for_pod(&pod.meta)
            && let Some(overrides) = policy.overrides()
        {
            cycle.set_overrides(policy.reference.clone(), overrides.to_vec());
        }
        // The pod waits for what the leaves have not answered yet (a profile may ignore
        // the leaf taint, so any pod may go to a leaf), rather than land elsewhere for
        // want of an answer; it is asked once per namespace and object name.
        // A dry run's questions are its own class: answered once, not kept for ten
        // minutes, never pushing out what live pods wait on.
        let asker = if state.is_dry_run() {
            Asker::WhatIf
        } else {
            Asker::Live
        };
        let waiting = checker::unanswered(&cycle, pod, asker);
        cycle.host_selectors = snapshot.pod_selectors.clone();
        state.set_members(Arc::new(members::LeafMembers(cycle.clone())));
        state.write(LEAF_CYCLE_KEY, cycle);
        match waiting {
            // Pending: requeued as soon as a leaf answers, without backoff.
            Some(msg) => (None, Status::pending(msg)),
            None => (None, Status::success()),
        }
    }

    /// Preemption across clusters: a victim on a virtual node runs in the leaf, so its
    /// copy leaves the leaf's view too, and the check sees the room its eviction makes.
    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(cluster) = node.cluster.as_deref()
            && let Some(cycle) = state.read_mut::<LeafCycle>(LEAF_CYCLE_KEY)
        {
            cycle.remove_copy(cluster, removed);
        }
        Status::success()
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if node.cluster.is_some()
            && let Some(cycle) = state.read_mut::<LeafCycle>(LEAF_CYCLE_KEY)
        {
            cycle.restore_copy(added);
        }
        Status::success()
    }
}

impl FilterPlugin for LeafNodeFit {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.cluster.is_none() {
            return Status::success();
        }
        match state.read::<LeafCycle>(LEAF_CYCLE_KEY) {
            Some(cycle) => self.checker.check(cycle, pod, node),
            None => self.checker.check(&LeafCycle::default(), pod, node),
        }
    }
}

impl ReservePlugin for LeafNodeFit {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(cycle) = state.read::<LeafCycle>(LEAF_CYCLE_KEY) else {
            return Status::success();
        };
        if let Some(choice) = cycle.placement(node)
            && let Ok(leaf_pod) = cycle.built_leaf_pod(pod, &choice.cluster)
        {
            self.leaves.assume(leaf_pod, &choice);
        }
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        if let Some(choice) = state
            .read::<LeafCycle>(LEAF_CYCLE_KEY)
            .and_then(|c| c.placement(node))
        {
            self.leaves.forget(&choice.cluster, &pod.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::cycle::LeafView;
    use crate::plugins::testing::{node_with, pod_requesting, pod_with};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// One leaf `east` with one 4-CPU node; assumptions recorded.
    #[derive(Default)]
    struct FakeLeaves {
        assumed: Mutex<Vec<(String, String, String)>>,
        forgotten: Mutex<Vec<(String, String)>>,
    }

    impl LeafSnapshots for FakeLeaves {
        fn cycle(&self, host_volumes: Arc<crate::snapshot::VolumeObjects>) -> LeafCycle {
            let n = node_with("east-1", |_| {});
            let view = LeafView {
                admission: Default::default(),
                cluster: "east".into(),
                snapshot: Snapshot::from_nodes(vec![Arc::new(n)]),
                checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
                host_id: String::new(),
                served: Default::default(),
                kept: Default::default(),
                devices: Default::default(),
            };
            let mut c = LeafCycle::new(Arc::new(BTreeMap::from([(
                "east".to_string(),
                Arc::new(view),
            )])));
            c.host_volumes = host_volumes;
            c
        }
        fn assume(&self, pod: Arc<PodInfo>, choice: &crate::leaf::cycle::LeafChoice) {
            self.assumed.lock().expect("lock").push((
                choice.cluster.clone(),
                pod.key.clone(),
                choice.leaf_node.clone(),
            ));
        }
        fn forget(&self, cluster: &str, key: &str) {
            self.forgotten
                .lock()
                .expect("lock")
                .push((cluster.into(), key.into()));
        }
    }

    fn virtual_node() -> Arc<NodeInfo> {
        Arc::new(node_with("mcsched-east", |n| {
            n.metadata.labels = Some(BTreeMap::from([(
                mcsched_shared::keys::CLUSTER_LABEL.to_string(),
                "east".to_string(),
            )]));
        }))
    }

    #[test]
    fn judges_virtual_nodes_on_their_leaf_and_reserves_there() {
        let leaves = Arc::new(FakeLeaves::default());
        let plugin = LeafNodeFit::new(None, leaves.clone());
        let host = Arc::new(node_with("host-1", |_| {}));
        let vn = virtual_node();
        let snap = Snapshot::from_nodes(vec![host.clone(), vn.clone()]);
        let mut state = CycleState::new();
        let pod = pod_requesting("p", &[("cpu", "1")]);
        let (_, s) = plugin.pre_filter(&mut state, &pod, &snap);
        assert!(s.is_success(), "{s}");
        assert!(plugin.filter(&state, &pod, &host).is_success());
        assert!(plugin.filter(&state, &pod, &vn).is_success());
        assert_eq!(
            leaf_nodes(&state).get("mcsched-east").map(String::as_str),
            Some("east-1")
        );

        assert!(
            plugin
                .reserve(&mut state, &pod, "mcsched-east")
                .is_success()
        );
        plugin.unreserve(&mut state, &pod, "mcsched-east");
        assert_eq!(
            *leaves.assumed.lock().expect("lock"),
            [("east".to_string(), pod.key.clone(), "east-1".to_string())]
        );
        assert_eq!(
            *leaves.forgotten.lock().expect("lock"),
            [("east".to_string(), pod.key.clone())]
        );

        let big = pod_requesting("big", &[("cpu", "64")]);
        let mut state = CycleState::new();
        plugin.pre_filter(&mut state, &big, &snap);
        let s = plugin.filter(&state, &big, &vn);
        assert!(s.is_rejected());
        assert!(
            s.message()
                .starts_with("leaf cluster east has no node that fits"),
            "{s}"
        );
    }

    #[test]
    fn skips_a_cluster_without_virtual_nodes() {
        let plugin = LeafNodeFit::new(None, Arc::new(crate::leaf::cycle::NoLeaves));
        let snap = Snapshot::from_nodes(vec![Arc::new(node_with("host-1", |_| {}))]);
        let (_, s) = plugin.pre_filter(&mut CycleState::new(), &pod_requesting("p", &[]), &snap);
        assert!(s.is_skip());
    }

    #[test]
    fn evicting_a_host_pod_frees_its_copys_room_in_the_leaf() {
        // east-1 (4 CPU) runs the copy of host pod `victim` (3 CPU): 1 CPU free there.
        let victim = pod_requesting("victim", &[("cpu", "3")]);
        let copy = {
            let mut raw = (*victim.pod()).clone();
            raw.metadata.annotations = Some(BTreeMap::from([(
                mcsched_shared::keys::HOST_POD_UID_ANNOTATION.to_string(),
                victim.uid.clone(),
            )]));
            Arc::new(PodInfo::new(Arc::new(raw)))
        };
        let mut east = node_with("east-1", |_| {});
        east.add_pod(copy);
        let view = LeafView {
            admission: Default::default(),
            cluster: "east".into(),
            snapshot: Snapshot::from_nodes(vec![Arc::new(east)]),
            checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
            host_id: String::new(),
            served: Default::default(),
            kept: Default::default(),
            devices: Default::default(),
        };
        let cycle = LeafCycle::new(Arc::new(BTreeMap::from([(
            "east".to_string(),
            Arc::new(view),
        )])));
        let plugin = LeafNodeFit::new(None, Arc::new(crate::leaf::cycle::NoLeaves));
        let vn = virtual_node();
        let pod = pod_requesting("urgent", &[("cpu", "2")]);
        let mut state = CycleState::new();
        state.write(LEAF_CYCLE_KEY, cycle);
        assert!(plugin.filter(&state, &pod, &vn).is_rejected());

        // Preemption's what-if on a copy of the state: the copy goes, the pod fits there.
        let mut what_if = state.clone();
        let victim = Arc::new(victim);
        assert!(
            plugin
                .remove_pod(&mut what_if, &pod, &victim, &vn)
                .is_success()
        );
        assert!(plugin.filter(&what_if, &pod, &vn).is_success());
        assert!(
            plugin.filter(&state, &pod, &vn).is_rejected(),
            "the cycle's own view is untouched"
        );
        // Spared after all: the room is taken again.
        assert!(
            plugin
                .add_pod(&mut what_if, &pod, &victim, &vn)
                .is_success()
        );
        assert!(plugin.filter(&what_if, &pod, &vn).is_rejected());
        // A host pod of that name without this host's copy in the leaf frees nothing.
        let stranger = pod_with(|p| {
            p.metadata.name = Some("victim".into());
            p.metadata.uid = Some("another-uid".into());
        });
        let mut what_if = state.clone();
        plugin.remove_pod(&mut what_if, &pod, &stranger, &vn);
        assert!(plugin.filter(&what_if, &pod, &vn).is_rejected());
    }
}
