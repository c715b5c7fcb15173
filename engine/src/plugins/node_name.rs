//! NodeName: a pod that names a node (`spec.nodeName` set before scheduling) fits only there.

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, Plugin, Status};
use crate::snapshot::{NodeInfo, PodInfo};

pub(crate) const NAME: &str = "NodeName";
pub(crate) const REASON: &str = "node(s) didn't match the requested node name";

pub(crate) struct NodeName;

impl Plugin for NodeName {
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

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.node_name() {
            Some(wanted) if wanted != &*node.name => Status::unresolvable(REASON),
            _ => Status::success(),
        }
    }
}
