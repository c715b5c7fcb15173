//! NodePorts: a pod's host ports must be free on the node (0.0.0.0 conflicts with every IP).

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, Plugin, Status};
use crate::snapshot::{HostPort, NodeInfo, PodInfo};

pub(crate) const NAME: &str = "NodePorts";
pub(crate) const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub(crate) struct NodePorts;

fn conflicts(want: &HostPort, used: &HostPort) -> bool {
    want.port == used.port
        && want.protocol == used.protocol
        && (want.ip == used.ip || want.ip == "0.0.0.0" || used.ip == "0.0.0.0")
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::NodeAdd, ClusterEvent::PodDelete]
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let clash = pod
            .host_ports
            .iter()
            .any(|want| node.used_ports.iter().any(|used| conflicts(want, used)));
        if clash {
            Status::unschedulable(REASON)
        } else {
            Status::success()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_with, pod_with};
    use k8s_openapi::api::core::v1::ContainerPort;
    use std::sync::Arc;

    fn with_port(name: &str, port: i32, ip: Option<&str>, proto: &str) -> PodInfo {
        pod_with(|p| {
            p.metadata.name = Some(name.into());
            if let Some(s) = p.spec.as_mut() {
                s.containers[0].ports = Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(port),
                    host_ip: ip.map(String::from),
                    protocol: Some(proto.into()),
                    ..Default::default()
                }]);
            }
        })
    }

    #[test]
    fn port_conflicts() {
        let cases = [
            ((8080, None, "TCP"), (8080, None, "TCP"), false),
            ((8080, None, "TCP"), (8080, None, "UDP"), true),
            ((8080, None, "TCP"), (8081, None, "TCP"), true),
            (
                (8080, Some("10.0.0.1"), "TCP"),
                (8080, Some("10.0.0.2"), "TCP"),
                true,
            ),
            ((8080, Some("10.0.0.1"), "TCP"), (8080, None, "TCP"), false),
            ((8080, None, "TCP"), (8080, Some("10.0.0.2"), "TCP"), false),
        ];
        for ((ep, eip, eproto), (wp, wip, wproto), ok) in cases {
            let mut node = node_with("n", |_| {});
            node.add_pod(Arc::new(with_port("existing", ep, eip, eproto)));
            let s = NodePorts.filter(&CycleState::new(), &with_port("p", wp, wip, wproto), &node);
            assert_eq!(
                s.is_success(),
                ok,
                "{ep} {eip:?} {eproto} vs {wp} {wip:?} {wproto}"
            );
            if !ok {
                assert_eq!(s.message(), REASON);
            }
        }
    }
}
