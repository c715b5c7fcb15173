//! SchedulingGates: a pod with `spec.schedulingGates` waits outside the active queue.

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{ClusterEvent, Plugin, PreEnqueuePlugin, Status};

pub(crate) const NAME: &str = "SchedulingGates";

pub(crate) struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::PodUpdate]
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        let gates: Vec<&str> = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .map(|g| g.iter().map(|g| g.name.as_str()).collect())
            .unwrap_or_default();
        if gates.is_empty() {
            return Status::success();
        }
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            gates.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSchedulingGate, PodSpec};

    #[test]
    fn gated_pods_wait() {
        let mut pod = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        assert!(SchedulingGates.pre_enqueue(&pod).is_success());
        if let Some(s) = pod.spec.as_mut() {
            s.scheduling_gates = Some(vec![
                PodSchedulingGate { name: "a".into() },
                PodSchedulingGate { name: "b".into() },
            ]);
        }
        let s = SchedulingGates.pre_enqueue(&pod);
        assert_eq!(s.message(), "waiting for scheduling gates: [a b]");
    }
}
