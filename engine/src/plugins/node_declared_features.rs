//! NodeDeclaredFeatures (kube-scheduler v1.37, GA and on by default): a pod whose spec
//! needs a feature not every node has goes only to nodes listing it in
//! `status.declaredFeatures`. PreFilter infers what the pod needs from its spec with the
//! registry of [`features`] at the scheduler's version (kube's
//! `ndf.DefaultFramework.InferForPodScheduling`), Skip when nothing; Filter refuses a node
//! that does not declare all of it. A virtual node declares what some node of its leaf
//! declares, and the leaf check runs this plugin on each leaf node.
//!
//! Left out: kube's InPlacePodVerticalScalingSchedulerPreemption branch (alpha and off in
//! v1.37), which passes pods whose resize is deferred; and SignPod, as mcsched signs no
//! pods. kube's queueing hints (a node added or its declared features changed; the pod's
//! own update changing what it needs) are the node events and the pod update here: the
//! queue has no per-plugin hints, and an unschedulable pod whose spec changes is retried
//! by the queue itself.

pub(crate) mod features;

use features::{Feature, REGISTRY, SCHEDULER_VERSION, Version, infer_for_pod_scheduling};

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "NodeDeclaredFeatures";
pub(crate) const REASON: &str = "node(s) didn't match Pod's required features";
/// kube's preFilterStateKey.
const STATE_KEY: &str = "PreFilterNodeDeclaredFeatures";

/// What PreFilter found the pod needs: feature names in the registry's order.
#[derive(Debug, Clone, PartialEq)]
struct Required(Vec<&'static str>);

pub(crate) struct NodeDeclaredFeatures {
    registry: &'static [Feature],
    version: Version,
}

impl Default for NodeDeclaredFeatures {
    fn default() -> Self {
        NodeDeclaredFeatures {
            registry: REGISTRY,
            version: SCHEDULER_VERSION,
        }
    }
}

impl Plugin for NodeDeclaredFeatures {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PodUpdate,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let obj = pod.object();
        let Some(spec) = obj.spec.as_ref() else {
            return (None, Status::skip());
        };
        let required = infer_for_pod_scheduling(self.registry, spec, self.version);
        if required.is_empty() {
            return (None, Status::skip());
        }
        state.write(STATE_KEY, Required(required));
        (None, Status::success())
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    /// Without PreFilter's state (a profile enabling only this Filter, or filters run on
    /// a state no PreFilter wrote) nothing is required: kube returns an error there; the
    /// house's filters pass, as InterPodAffinity's and PodTopologySpread's do.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(Required(required)) = state.read::<Required>(STATE_KEY) else {
            return Status::success();
        };
        let declared = mcsched_shared::node::declared_features(&node.node);
        if required.iter().all(|r| declared.iter().any(|d| d == r)) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testing::{node_with, pod_with};

    fn node_declaring(features: &[&str]) -> NodeInfo {
        node_with("node-1", |n| {
            n.status.get_or_insert_default().declared_features =
                Some(features.iter().map(|f| f.to_string()).collect());
        })
    }

    fn always(_: &k8s_openapi::api::core::v1::PodSpec) -> bool {
        true
    }
    fn never(_: &k8s_openapi::api::core::v1::PodSpec) -> bool {
        false
    }
    const fn mock(
        name: &'static str,
        infer: fn(&k8s_openapi::api::core::v1::PodSpec) -> bool,
        max_version: Option<Version>,
    ) -> Feature {
        Feature {
            name,
            infer_for_scheduling: infer,
            max_version,
        }
    }

    fn plugin(registry: &'static [Feature], version: Version) -> NodeDeclaredFeatures {
        NodeDeclaredFeatures { registry, version }
    }

    const V1_35: Version = Version(1, 35, 0);

    static ONE_OF_TWO: &[Feature] = &[
        mock("TestFeature1", always, None),
        mock("TestFeature2", never, None),
    ];
    static BOTH: &[Feature] = &[
        mock("TestFeature1", always, Some(Version(1, 38, 0))),
        mock("TestFeature2", always, Some(Version(1, 38, 0))),
    ];
    static NEITHER: &[Feature] = &[
        mock("TestFeature1", never, None),
        mock("TestFeature2", never, None),
    ];
    static PAST_MAX: &[Feature] = &[
        mock("TestFeature1", always, Some(Version(1, 33, 0))),
        mock("TestFeature2", never, None),
    ];

    /// Upstream's TestPreFilter (its "plugin disabled" case aside: the gate is locked on
    /// in v1.37).
    #[test]
    fn pre_filter_infers_the_pods_requirements() {
        let pod = pod_with(|_| {});
        let snapshot = Snapshot::from_nodes(Vec::new());
        for (name, registry, version, code, want) in [
            (
                "Pod with feature requirements",
                ONE_OF_TWO,
                V1_35,
                Code::Success,
                Some(vec!["TestFeature1"]),
            ),
            (
                "Pod with multiple feature requirements",
                BOTH,
                V1_35,
                Code::Success,
                Some(vec!["TestFeature1", "TestFeature2"]),
            ),
            ("Pod with no requirements", NEITHER, V1_35, Code::Skip, None),
            (
                "Feature not required, version > MaxVersion",
                PAST_MAX,
                Version(1, 34, 0),
                Code::Skip,
                None,
            ),
        ] {
            let mut state = CycleState::new();
            let (result, s) = plugin(registry, version).pre_filter(&mut state, &pod, &snapshot);
            assert!(result.is_none(), "{name}: PreFilter restricts no nodes");
            assert_eq!(s.code, code, "{name}");
            assert_eq!(
                state.read::<Required>(STATE_KEY).map(|r| r.0.clone()),
                want,
                "{name}"
            );
        }
    }

    /// Upstream's TestFilter (its "plugin disabled" case aside).
    #[test]
    fn filter_wants_every_required_feature_declared() {
        let pod = pod_with(|_| {});
        let nodes = || {
            [
                (
                    "Node matches requirements",
                    node_declaring(&["FeatureA", "FeatureB"]),
                    vec!["FeatureA"],
                    None,
                ),
                (
                    "Node does not match requirements",
                    node_declaring(&["FeatureB"]),
                    vec!["FeatureA"],
                    Some(REASON),
                ),
                (
                    "Node with multiple features, pod requires subset",
                    node_declaring(&["FeatureA", "FeatureB", "FeatureC"]),
                    vec!["FeatureA", "FeatureC"],
                    None,
                ),
                (
                    "Node has no declared features",
                    node_with("node-1", |_| {}),
                    vec!["FeatureA"],
                    Some(REASON),
                ),
                (
                    "Node with some but not all required features",
                    node_declaring(&["FeatureA"]),
                    vec!["FeatureA", "FeatureB"],
                    Some(REASON),
                ),
            ]
        };
        for (name, node, required, want) in nodes() {
            let mut state = CycleState::new();
            state.write(STATE_KEY, Required(required));
            let s = NodeDeclaredFeatures::default().filter(&state, &pod, &node);
            match want {
                None => assert!(s.is_success(), "{name}: {s}"),
                Some(reason) => {
                    assert_eq!(s.code, Code::UnschedulableAndUnresolvable, "{name}");
                    assert_eq!(s.message(), reason, "{name}");
                }
            }
        }
        // No pre-filter state (kube: an error; here nothing is required, see filter()).
        let s = NodeDeclaredFeatures::default().filter(
            &CycleState::new(),
            &pod,
            &node_with("node-1", |_| {}),
        );
        assert!(s.is_success(), "{s}");
    }

    /// The real registry end to end: a pod on the host network in a user namespace needs
    /// UserNamespacesHostNetworkSupport; a plain pod needs nothing.
    #[test]
    fn a_pod_needing_a_feature_fits_only_nodes_declaring_it() {
        let pl = NodeDeclaredFeatures::default();
        let snapshot = Snapshot::from_nodes(Vec::new());
        let needy = pod_with(|p| {
            let s = p.spec.get_or_insert_default();
            s.host_network = Some(true);
            s.host_users = Some(false);
        });
        let mut state = CycleState::new();
        let (_, s) = pl.pre_filter(&mut state, &needy, &snapshot);
        assert!(s.is_success(), "{s}");
        let with = node_declaring(&[
            "RestartAllContainersOnContainerExits",
            "UserNamespacesHostNetworkSupport",
        ]);
        let without = node_declaring(&["RestartAllContainersOnContainerExits"]);
        assert!(pl.filter(&state, &needy, &with).is_success());
        assert_eq!(pl.filter(&state, &needy, &without).message(), REASON);

        let plain = pod_with(|_| {});
        let (_, s) = pl.pre_filter(&mut CycleState::new(), &plain, &snapshot);
        assert!(s.is_skip(), "{s}");
    }

    /// Upstream's TestEventsToRegister: a node added or changed (its declared features),
    /// and the pod's own update.
    #[test]
    fn events_are_node_changes_and_the_pods_update() {
        assert_eq!(
            NodeDeclaredFeatures::default().events_to_register(),
            [
                ClusterEvent::NodeAdd,
                ClusterEvent::NodeUpdate,
                ClusterEvent::PodUpdate
            ]
        );
    }
}
