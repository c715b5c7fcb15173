//! A pod's nodeSelector and required node affinity, as NodeAffinity, PodTopologySpread and
//! the cluster-policy plugins match them against a node.

use k8s_openapi::api::core::v1::{NodeAffinity, NodeSelector, Pod};
use mcsched_shared::selectors::node_selector_matches;

use crate::snapshot::{NodeInfo, PodInfo};

/// The pod's `affinity.nodeAffinity`.
pub(crate) fn pod_node_affinity(pod: &Pod) -> Option<&NodeAffinity> {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
}

/// A node affinity's required terms.
pub(crate) fn required(a: Option<&NodeAffinity>) -> Option<&NodeSelector> {
    a.and_then(|a| {
        a.required_during_scheduling_ignored_during_execution
            .as_ref()
    })
}

/// Whether the pod's own nodeSelector and required affinity accept the node.
pub(crate) fn pod_matches_node(pod: &PodInfo, node: &NodeInfo) -> bool {
    let labels = node.labels();
    let pod = pod.object();
    let selector_ok = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .is_none_or(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)));
    selector_ok
        && required(pod_node_affinity(&pod))
            .is_none_or(|ns| node_selector_matches(ns, labels, &node.name))
}
