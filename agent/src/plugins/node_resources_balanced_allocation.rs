//! NodeResourcesBalancedAllocation: prefers nodes whose resource fractions stay close to
//! each other after placing the pod (1 − standard deviation of the fractions).

use mcsched_shared::resources::{CPU, MEMORY};

use super::node_resources_fit::{ResourceKind, allocatable_and_requested};
use crate::framework::{
    ClusterEvent, CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

pub struct BalancedAllocation {
    resources: Vec<String>,
    kinds: Vec<ResourceKind>,
}

impl Default for BalancedAllocation {
    fn default() -> Self {
        BalancedAllocation::new(vec![CPU.into(), MEMORY.into()])
    }
}

impl BalancedAllocation {
    pub fn new(resources: Vec<String>) -> Self {
        let kinds = resources.iter().map(|r| ResourceKind::of(r)).collect();
        BalancedAllocation { resources, kinds }
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PodDelete,
        ]
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for BalancedAllocation {
    /// A pod that requests none of the resources cannot unbalance anything.
    fn pre_score(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &crate::snapshot::NodeList,
        _snapshot: &Snapshot,
    ) -> Status {
        let requests_any = self.resources.iter().any(|r| match r.as_str() {
            CPU => pod.requests.milli_cpu > 0,
            MEMORY => pod.requests.memory > 0,
            "ephemeral-storage" => pod.requests.ephemeral_storage > 0,
            other => pod.requests.scalar.get(other).is_some_and(|v| *v > 0),
        });
        if requests_any {
            Status::success()
        } else {
            Status::skip()
        }
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        // A stack buffer: this runs for every node of every cycle.
        let mut buf = [0f64; 16];
        let mut spill = Vec::new();
        let mut n = 0;
        for r in &self.kinds {
            let (alloc, req) = allocatable_and_requested(node, pod, r, true);
            if alloc > 0 {
                let f = (req as f64 / alloc as f64).min(1.0);
                if n < buf.len() {
                    buf[n] = f;
                } else {
                    spill.push(f);
                }
                n += 1;
            }
        }
        let fractions = || buf.iter().take(n.min(16)).chain(spill.iter());
        let std = match n {
            0 | 1 => 0.0,
            2 => (buf[0] - buf[1]).abs() / 2.0,
            _ => {
                let mean = fractions().sum::<f64>() / n as f64;
                (fractions().map(|f| (f - mean).powi(2)).sum::<f64>() / n as f64).sqrt()
            }
        };
        Ok(((1.0 - std) * MAX_NODE_SCORE as f64) as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_with, pod_requesting};
    use std::sync::Arc;

    #[test]
    fn balanced_nodes_score_higher() {
        let mut n = node_with("n", |_| {});
        n.add_pod(Arc::new(pod_requesting("e", &[("cpu", "2")])));
        // After placement: cpu 3/4 = 0.75, memory 2Gi/8Gi = 0.25 → std 0.25 → 75.
        let pod = pod_requesting("p", &[("cpu", "1"), ("memory", "2Gi")]);
        let s = BalancedAllocation::default().score(&CycleState::new(), &pod, &n);
        assert_eq!(s, Ok(75));
        // cpu 2/4, memory 4Gi/8Gi → perfectly balanced.
        let even = node_with("even", |_| {});
        let pod = pod_requesting("p", &[("cpu", "2"), ("memory", "4Gi")]);
        assert_eq!(
            BalancedAllocation::default().score(&CycleState::new(), &pod, &even),
            Ok(100)
        );
    }

    #[test]
    fn best_effort_pods_skip() {
        let pod = pod_requesting("p", &[]);
        let s = BalancedAllocation::default().pre_score(
            &mut CycleState::new(),
            &pod,
            &Default::default(),
            &Snapshot::default(),
        );
        assert!(s.is_skip());
    }
}
