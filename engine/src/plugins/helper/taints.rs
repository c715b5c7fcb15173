//! Taints and tolerations as TaintToleration, LeafNodeTaintToleration, PodTopologySpread
//! and the cluster-policy plugins judge them.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::{Taint, Toleration};
use mcsched_shared::taints;

use crate::framework::{CycleState, Status};
use crate::snapshot::{NodeInfo, PodInfo};

/// kube-scheduler v1.36's and v1.37's wording (older releases named the taint).
pub(crate) const UNTOLERATED: &str = "node(s) had untolerated taint(s)";

pub(crate) fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

pub fn node_taints(node: &NodeInfo) -> &[Taint] {
    &node.taints
}

/// Whether the pod's placement policy tolerates `taint` on `node` (a cluster's virtual node).
pub(crate) fn policy_tolerates(state: &CycleState, node: &NodeInfo, taint: &Taint) -> bool {
    node.cluster.is_some()
        && super::placement_state::cluster_tolerations(state)
            .iter()
            .any(|tol| taints::tolerates(tol, taint))
}

/// The Filter both TaintToleration and LeafNodeTaintToleration use; `ignore` picks taints
/// that count as tolerated.
pub(crate) fn filter_taints(
    pod: &PodInfo,
    node: &NodeInfo,
    ignore: impl Fn(&Taint) -> bool,
) -> Status {
    let obj = pod.object();
    let tols = tolerations(&obj);
    let untolerated = node_taints(node)
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .filter(|t| !ignore(t))
        .any(|t| !tols.iter().any(|tol| taints::tolerates(tol, t)));
    if untolerated {
        Status::unresolvable(UNTOLERATED)
    } else {
        Status::success()
    }
}
