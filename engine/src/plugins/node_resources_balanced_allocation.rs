//! NodeResourcesBalancedAllocation: prefers nodes the pod leaves better balanced. As in
//! kube-scheduler v1.37 (unchanged since v1.36), the score is the change the pod makes:
//! with `balance` = 100 × (1 − standard deviation of the resource fractions), 50 + (50 +
//! balance with the pod − balance without it) / 2.

use mcsched_shared::resources::{CPU, MEMORY};

use super::helper::resources::{ResourceKind, allocatable_and_requested};
use crate::framework::{
    ClusterEvent, CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "NodeResourcesBalancedAllocation";

pub(crate) struct BalancedAllocation {
    resources: Vec<String>,
    kinds: Vec<ResourceKind>,
}

impl Default for BalancedAllocation {
    fn default() -> Self {
        BalancedAllocation::new(vec![CPU.into(), MEMORY.into()])
    }
}

impl BalancedAllocation {
    pub(crate) fn new(resources: Vec<String>) -> Self {
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

/// What the pod itself adds to `resource` in `allocatable_and_requested(.., true)`.
fn pod_part(pod: &PodInfo, resource: &ResourceKind) -> i64 {
    match resource {
        ResourceKind::Cpu => pod.requests.milli_cpu,
        ResourceKind::Memory => pod.requests.memory,
        ResourceKind::EphemeralStorage => pod.requests.ephemeral_storage,
        ResourceKind::Scalar(name) => pod.requests.scalar.get(name).copied().unwrap_or(0),
    }
}

/// 100 × (1 − the standard deviation of `fractions`), truncated as kube does.
#[inline(always)]
fn balance(fractions: &[f64]) -> i64 {
    let n = fractions.len();
    let std = match n {
        0 | 1 => 0.0,
        2 => (fractions[0] - fractions[1]).abs() / 2.0,
        _ => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// Fractions without allocating for the usual few resources: this runs for every node
/// of every cycle.
const INLINE: usize = 8;

/// With and without the pod, the requested fraction of `resource`'s allocatable; None
/// when the node has none of it (it then counts in neither balance).
#[inline(always)]
fn fractions(node: &NodeInfo, pod: &PodInfo, resource: &ResourceKind) -> Option<(f64, f64)> {
    let (alloc, req) = allocatable_and_requested(node, pod, resource, true);
    let fraction = |v: i64| (v as f64 / alloc as f64).min(1.0);
    (alloc > 0).then(|| (fraction(req), fraction(req - pod_part(pod, resource))))
}

/// The score from the balances with and without the pod.
#[inline(always)]
fn score_of(with: i64, without: i64) -> i64 {
    MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with - without) / 2
}

impl BalancedAllocation {
    /// Any other list of resources than the default pair.
    #[inline(never)]
    fn score_general(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (mut with, mut without) = ([0f64; INLINE], [0f64; INLINE]);
        let (mut with_spill, mut without_spill) = (Vec::new(), Vec::new());
        let mut n = 0;
        for r in &self.kinds {
            if let Some((w, wo)) = fractions(node, pod, r) {
                if n < INLINE {
                    (with[n], without[n]) = (w, wo);
                } else {
                    with_spill.push(w);
                    without_spill.push(wo);
                }
                n += 1;
            }
        }
        let (with, without) = if n <= INLINE {
            (balance(&with[..n]), balance(&without[..n]))
        } else {
            with_spill.splice(0..0, with);
            without_spill.splice(0..0, without);
            (balance(&with_spill), balance(&without_spill))
        };
        score_of(with, without)
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        // The default (cpu and memory) without the general path's buffers: this runs for
        // every scored node of every cycle.
        let [a, b] = self.kinds.as_slice() else {
            return Ok(self.score_general(pod, node));
        };
        let (with, without) = match (fractions(node, pod, a), fractions(node, pod, b)) {
            (Some((wa, woa)), Some((wb, wob))) => (balance(&[wa, wb]), balance(&[woa, wob])),
            (Some((w, wo)), None) | (None, Some((w, wo))) => (balance(&[w]), balance(&[wo])),
            (None, None) => (balance(&[]), balance(&[])),
        };
        Ok(score_of(with, without))
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
        // Before: cpu 2/4 = 0.5, memory 0 → std 0.25 → 75. After placement: cpu 3/4 = 0.75,
        // memory 2Gi/8Gi = 0.25 → std 0.25 → 75: no change, 50 + 50 / 2.
        let pod = pod_requesting("p", &[("cpu", "1"), ("memory", "2Gi")]);
        let s = BalancedAllocation::default().score(&CycleState::new(), &pod, &n);
        assert_eq!(s, Ok(75));
        // A pod that balances the node: before 75 as above, after cpu 2/4 and memory
        // 4Gi/8Gi → 100; 50 + (50 + 25) / 2 = 87.
        let pod = pod_requesting("p", &[("memory", "4Gi")]);
        let m = n;
        assert_eq!(
            BalancedAllocation::default().score(&CycleState::new(), &pod, &m),
            Ok(87)
        );
        // An empty node the pod leaves balanced: 100 before and after → 75.
        let even = node_with("even", |_| {});
        let pod = pod_requesting("p", &[("cpu", "2"), ("memory", "4Gi")]);
        assert_eq!(
            BalancedAllocation::default().score(&CycleState::new(), &pod, &even),
            Ok(75)
        );
    }

    /// The cpu-and-memory path scores as the general one, which a third resource no pod
    /// asks for (counted by neither) sends every call through.
    #[test]
    fn two_resource_path_matches_the_general_one() {
        let fast = BalancedAllocation::default();
        let general = BalancedAllocation::new(vec![
            CPU.into(),
            MEMORY.into(),
            "example.com/unasked".into(),
        ]);
        let allocatables = [
            ("4", "8Gi"),
            ("3", "0"),
            ("0", "5Gi"),
            ("0", "0"),
            ("7", "3Gi"),
        ];
        let requests: [&[(&str, &str)]; 5] = [
            &[("cpu", "1"), ("memory", "2Gi")],
            &[("cpu", "2500m")],
            &[("memory", "700Mi")],
            &[("cpu", "9"), ("memory", "20Gi")],
            &[("cpu", "333m"), ("memory", "1234567")],
        ];
        let mut compared = 0;
        for (cpu, memory) in allocatables {
            for existing in requests {
                let mut n = node_with("n", |n| {
                    if let Some(s) = n.status.as_mut() {
                        s.allocatable = Some(crate::plugins::testing::quantities(&[
                            ("cpu", cpu),
                            ("memory", memory),
                            ("pods", "110"),
                        ]));
                    }
                });
                n.add_pod(Arc::new(pod_requesting("e", existing)));
                for incoming in requests {
                    let pod = pod_requesting("p", incoming);
                    let state = CycleState::new();
                    assert_eq!(
                        fast.score(&state, &pod, &n),
                        general.score(&state, &pod, &n),
                        "allocatable {cpu}/{memory}, existing {existing:?}, incoming {incoming:?}"
                    );
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 125);
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
