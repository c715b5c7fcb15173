//! LeafNodeTaintToleration (Kosmos's): TaintToleration's Filter, except that the
//! leaf taint (`mcsched.io/leaf`, and Kosmos' `kosmos.io/node`) counts as tolerated, so
//! pods of this scheduler go to host nodes and virtual nodes alike. The taint still keeps
//! every other scheduler off virtual nodes.

use mcsched_shared::keys;

use super::helper::taints::{filter_taints, policy_tolerates};
use crate::framework::{ClusterEvent, CycleState, FilterPlugin, Plugin, Status};
use crate::snapshot::{NodeInfo, PodInfo};

pub(crate) const NAME: &str = "LeafNodeTaintToleration";

pub(crate) struct LeafNodeTaintToleration;

impl Plugin for LeafNodeTaintToleration {
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
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for LeafNodeTaintToleration {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        filter_taints(pod, node, |t| {
            keys::is_leaf_taint(&t.key) || policy_tolerates(state, node, t)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::helper::taints::UNTOLERATED;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    fn node(taints: serde_json::Value) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"}, "spec": {"taints": taints}
        }))
        .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn pod(tolerations: serde_json::Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"}, "spec": {"containers": [], "tolerations": tolerations}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn leaf_taints_are_tolerated_and_others_are_not() {
        let state = CycleState::new();
        let cases = [
            (
                json!([{"key": "mcsched.io/leaf", "value": "true", "effect": "NoSchedule"}]),
                true,
            ),
            (
                json!([{"key": "kosmos.io/node", "value": "true", "effect": "NoSchedule"}]),
                true,
            ),
            (
                json!([{"key": "mcsched.io/leaf", "value": "true", "effect": "NoSchedule"},
                       {"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
                false,
            ),
            (
                json!([{"key": "dedicated", "value": "db", "effect": "NoExecute"}]),
                false,
            ),
        ];
        for (taints, fits) in cases {
            let n = node(taints.clone());
            let s = LeafNodeTaintToleration.filter(&state, &pod(json!([])), &n);
            assert_eq!(s.is_success(), fits, "{taints}");
            if !fits {
                assert_eq!(s.message(), UNTOLERATED);
            }
        }
    }
}
