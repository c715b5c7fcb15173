//! NodeUnschedulable: cordoned nodes take only pods tolerating
//! `node.kubernetes.io/unschedulable:NoSchedule`.

use k8s_openapi::api::core::v1::Taint;
use mcsched_shared::taints;

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, Plugin, Status};
use crate::snapshot::{NodeInfo, PodInfo};

pub(crate) const NAME: &str = "NodeUnschedulable";
pub(crate) const REASON: &str = "node(s) were unschedulable";

pub(crate) struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerated = pod
            .object()
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| taints::tolerates(t, &taint)));
        if tolerated {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}
