//! NodeResourcesFit: Filter checks that the node's free allocatable covers the pod's
//! requests (and its pod count); Score ranks nodes by LeastAllocated, MostAllocated or
//! RequestedToCapacityRatio over weighted resources; PlacementScore ranks a pod group's
//! placements by MostAllocated over all their nodes (kube's placementScorer, made under
//! TopologyAwareWorkloadScheduling).
//!
//! Extended resources backed by DRA (DRAExtendedResource, on in v1.37): a requested
//! extended resource that a DeviceClass serves (its `extendedResourceName`, or the
//! implicit `deviceclass.resource.kubernetes.io/<class>`) is not checked on a node whose
//! allocatable lacks it: DynamicResources allocates devices for it there. PreFilter
//! notes which of the pod's requests a class serves, since Filter sees no classes.

use std::collections::BTreeSet;
use std::sync::Arc;

use mcsched_shared::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, Resources};

use super::helper::resources::{ResourceKind, allocatable_and_requested};
use crate::dra_state::{DeviceObjects, is_dra_extended_resource_name};
use crate::framework::{
    ClusterEvent, Code, CycleState, FilterPlugin, MAX_NODE_SCORE, PlacementScorePlugin, Plugin,
    PreFilterPlugin, PreFilterResult, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "NodeResourcesFit";
pub(crate) const REASON_TOO_MANY_PODS: &str = "Too many pods";
const MAX_UTILIZATION: i64 = 100;
/// Shape scores are 0..=10 in the config and scaled to 0..=100.
const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
/// CycleState key of [`DraServed`].
const DRA_SERVED_KEY: &str = "PreFilterNodeResourcesFitDRA";

/// The pod's requested extended resources a DeviceClass serves.
#[derive(Debug, Clone, Default)]
struct DraServed(BTreeSet<String>);

/// Which of `requests`' extended resources a DeviceClass of `devices` serves.
pub(crate) fn dra_served(requests: &Resources, devices: &DeviceObjects) -> BTreeSet<String> {
    (requests.scalar.iter())
        .filter(|(name, want)| **want > 0 && is_dra_extended_resource_name(name))
        .filter(|(name, _)| devices.class_for_extended_resource(name).is_some())
        .map(|(name, _)| name.clone())
        .collect()
}

/// kube's `shouldDelegateResourceToDRA`: a class serves it and the node does not (a
/// device plugin's allocatable wins).
fn delegated_to_dra(served: &BTreeSet<String>, name: &str, node: &NodeInfo) -> bool {
    served.contains(name) && node.allocatable.scalar.get(name).copied().unwrap_or(0) <= 0
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// (utilization 0..=100, score 0..=10) points, utilization increasing.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FitArgs {
    pub(crate) ignored_resources: Vec<String>,
    pub(crate) ignored_resource_groups: Vec<String>,
    pub(crate) strategy: Strategy,
    /// Resource name and weight.
    pub(crate) resources: Vec<(String, i64)>,
}

impl Default for FitArgs {
    fn default() -> Self {
        FitArgs {
            ignored_resources: Vec::new(),
            ignored_resource_groups: Vec::new(),
            strategy: Strategy::LeastAllocated,
            resources: vec![(CPU.into(), 1), (MEMORY.into(), 1)],
        }
    }
}

pub(crate) struct NodeResourcesFit {
    args: FitArgs,
    scored: Vec<(ResourceKind, i64)>,
}

impl NodeResourcesFit {
    pub(crate) fn new(args: FitArgs) -> Self {
        let scored = args
            .resources
            .iter()
            .map(|(n, w)| (ResourceKind::of(n), *w))
            .collect();
        NodeResourcesFit { args, scored }
    }

    fn ignored(&self, name: &str) -> bool {
        self.args.ignored_resources.iter().any(|r| r == name)
            || name.split_once('/').is_some_and(|(group, _)| {
                self.args.ignored_resource_groups.iter().any(|g| g == group)
            })
    }
}

/// A resource the pod needs more of than the node has free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Insufficient {
    pub(crate) resource: String,
    pub(crate) reason: String,
    /// More than the node's whole allocatable: preemption cannot help.
    pub(crate) unresolvable: bool,
}

/// kube-scheduler's `fitsRequest`: pod count first, then cpu, memory, ephemeral-storage
/// and extended resources; every shortfall is reported.
pub(crate) fn fits_request(
    requests: &Resources,
    node: &NodeInfo,
    ignored: impl Fn(&str) -> bool,
) -> Vec<Insufficient> {
    let mut out = Vec::new();
    let alloc = &node.allocatable;
    let used = &node.requested;
    if node.pods.len() as i64 + 1 > alloc.allowed_pods {
        out.push(Insufficient {
            resource: "pods".into(),
            reason: REASON_TOO_MANY_PODS.into(),
            unresolvable: false,
        });
    }
    if requests.milli_cpu == 0
        && requests.memory == 0
        && requests.ephemeral_storage == 0
        && requests.scalar.values().all(|v| *v == 0)
    {
        return out;
    }
    let mut check = |name: &str, want: i64, have: i64, taken: i64| {
        if want > 0 && want > have.saturating_sub(taken) {
            out.push(Insufficient {
                resource: name.into(),
                reason: format!("Insufficient {name}"),
                unresolvable: want > have,
            });
        }
    };
    check(CPU, requests.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    check(MEMORY, requests.memory, alloc.memory, used.memory);
    check(
        EPHEMERAL_STORAGE,
        requests.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    );
    for (name, &want) in &requests.scalar {
        if ignored(name) {
            continue;
        }
        let have = alloc.scalar.get(name).copied().unwrap_or(0);
        let taken = used.scalar.get(name).copied().unwrap_or(0);
        check(name, want, have, taken);
    }
    out
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PodDelete,
            ClusterEvent::PodUpdate,
            // A class may come to serve an extended resource the pod requests.
            ClusterEvent::DeviceClassChange,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_placement_score(&self) -> Option<&dyn PlacementScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let served = dra_served(&pod.requests, &snapshot.devices);
        if !served.is_empty() {
            state.write(DRA_SERVED_KEY, DraServed(served));
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let served = state.read::<DraServed>(DRA_SERVED_KEY);
        let insufficient = fits_request(&pod.requests, node, |n| {
            self.ignored(n) || served.is_some_and(|s| delegated_to_dra(&s.0, n, node))
        });
        if insufficient.is_empty() {
            return Status::success();
        }
        let code = if insufficient.iter().any(|i| i.unresolvable) {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::new(
            code,
            insufficient.into_iter().map(|i| i.reason.into()).collect(),
        )
    }
}

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    scaled_ratio(capacity - requested, capacity)
}

/// `part × MAX_NODE_SCORE / whole`, exact. In i64 when the product fits (every
/// realistic capacity; software 128-bit division is several times slower and this runs
/// for every node of every cycle), else in i128: capacities in bytes times 100 can pass
/// i64.
fn scaled_ratio(part: i64, whole: i64) -> i64 {
    match part.checked_mul(MAX_NODE_SCORE) {
        Some(p) => p / whole,
        None => (i128::from(part) * i128::from(MAX_NODE_SCORE) / i128::from(whole)) as i64,
    }
}

fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    scaled_ratio(requested.min(capacity), capacity)
}

/// `helper.BuildBrokenLinearFunction` over the shape, scores scaled to 0..=100.
fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    let scaled: Vec<(i64, i64)> = shape
        .iter()
        .map(|&(u, s)| (u, s * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE)))
        .collect();
    super::helper::broken_linear(&scaled, p)
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut total = 0i64;
        let mut weights = 0i64;
        for (resource, weight) in &self.scored {
            let (alloc, req) = allocatable_and_requested(node, pod, resource, false);
            if alloc == 0 {
                continue;
            }
            let s = match &self.args.strategy {
                Strategy::LeastAllocated => least_requested(req, alloc),
                Strategy::MostAllocated => most_requested(req, alloc),
                Strategy::RequestedToCapacityRatio(shape) => {
                    if req > alloc {
                        broken_linear(shape, MAX_UTILIZATION)
                    } else {
                        broken_linear(shape, req * MAX_UTILIZATION / alloc)
                    }
                }
            };
            total += s * weight;
            weights += weight;
        }
        if weights == 0 {
            return Ok(0);
        }
        Ok(match self.args.strategy {
            Strategy::RequestedToCapacityRatio(_) => (total as f64 / weights as f64).round() as i64,
            _ => total / weights,
        })
    }
}

/// What one resource of a node counts toward a placement's MostAllocated score: its
/// allocatable and what its pods ask for (cpu and memory with the non-zero defaults, as
/// kube's scorers without `useRequested`); (0, 0) leaves it out.
fn placement_resource(node: &NodeInfo, resource: &ResourceKind, wanted: i64) -> (i64, i64) {
    let a = &node.allocatable;
    match resource {
        ResourceKind::Cpu => (a.milli_cpu, node.non_zero_milli_cpu),
        ResourceKind::Memory => (a.memory, node.non_zero_memory),
        ResourceKind::EphemeralStorage => (a.ephemeral_storage, node.requested.ephemeral_storage),
        // An extended resource counts only when asked for.
        ResourceKind::Scalar(_) if wanted == 0 => (0, 0),
        ResourceKind::Scalar(name) => match a.scalar.get(name) {
            Some(&alloc) => (alloc, node.requested.scalar.get(name).copied().unwrap_or(0)),
            None => (0, 0),
        },
    }
}

/// What a member asks for of one resource, as the scorers count it.
fn pod_request(pod: &PodInfo, resource: &ResourceKind) -> i64 {
    match resource {
        ResourceKind::Cpu => pod.non_zero_milli_cpu,
        ResourceKind::Memory => pod.non_zero_memory,
        ResourceKind::EphemeralStorage => pod.requests.ephemeral_storage,
        ResourceKind::Scalar(name) => pod.requests.scalar.get(name).copied().unwrap_or(0),
    }
}

impl PlacementScorePlugin for NodeResourcesFit {
    /// kube's `resourceAllocationScorer.scorePlacement` with MostAllocated: the members'
    /// requests and every node's in the placement, over the placement's allocatable,
    /// summed per resource (the members' sum as it runs decides whether an extended
    /// resource counts, as there).
    fn score_placement(
        &self,
        _scheduled: usize,
        nodes: &[Arc<NodeInfo>],
        proposed: &[Arc<PodInfo>],
    ) -> i64 {
        let n = self.scored.len();
        let mut requested = vec![0i64; n];
        for pod in proposed {
            for (i, (resource, _)) in self.scored.iter().enumerate() {
                requested[i] = requested[i].saturating_add(pod_request(pod, resource));
            }
        }
        let (mut allocatable, mut allocated) = (vec![0i64; n], vec![0i64; n]);
        for node in nodes {
            for (i, (resource, _)) in self.scored.iter().enumerate() {
                let (alloc, used) = placement_resource(node, resource, requested[i]);
                if alloc == 0 {
                    continue;
                }
                allocatable[i] = allocatable[i].saturating_add(alloc);
                allocated[i] = allocated[i].saturating_add(used);
                requested[i] = requested[i].saturating_add(used);
            }
        }
        let (mut total, mut weights) = (0i64, 0i64);
        for (i, (_, weight)) in self.scored.iter().enumerate() {
            if allocatable[i] == 0 {
                continue;
            }
            total += most_requested(requested[i], allocatable[i]) * weight;
            weights += weight;
        }
        if weights == 0 { 0 } else { total / weights }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_with, pod_requesting, quantities};
    use std::sync::Arc;

    fn node(cpu: &str, mem: &str, pods: &str, existing: &[&[(&str, &str)]]) -> NodeInfo {
        let mut n = node_with("n", |n| {
            if let Some(s) = n.status.as_mut() {
                s.allocatable = Some(quantities(&[
                    ("cpu", cpu),
                    ("memory", mem),
                    ("pods", pods),
                    ("example.com/gpu", "2"),
                ]));
            }
        });
        for (i, req) in existing.iter().enumerate() {
            n.add_pod(Arc::new(pod_requesting(&format!("e{i}"), req)));
        }
        n
    }

    #[test]
    fn scaled_ratio_is_exact_on_both_paths() {
        let exact = |p: i64, w: i64| (i128::from(p) * 100 / i128::from(w)) as i64;
        // The i64 path: 32 GiB nodes, odd byte counts.
        for (p, w) in [
            (0, 1),
            (1, 3),
            (34_359_738_367, 34_359_738_368),
            (12_345, 67_890),
        ] {
            assert_eq!(scaled_ratio(p, w), exact(p, w), "{p}/{w}");
        }
        // Products past i64 (exabyte-sized capacities) take the i128 path.
        let big = i64::MAX / 3;
        assert!(big.checked_mul(MAX_NODE_SCORE).is_none());
        assert_eq!(scaled_ratio(big, big + 7), exact(big, big + 7));
        assert_eq!(scaled_ratio(big, big + 7), 99);
        assert_eq!(least_requested(0, i64::MAX), 100);
        assert_eq!(most_requested(i64::MAX, i64::MAX), 100);
    }

    #[test]
    fn filter_table() {
        let fit = NodeResourcesFit::new(FitArgs::default());
        type Case<'a> = (
            &'a str,
            NodeInfo,
            Vec<(&'a str, &'a str)>,
            Code,
            Vec<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "fits",
                node("4", "8Gi", "110", &[&[("cpu", "1")]]),
                vec![("cpu", "3")],
                Code::Success,
                vec![],
            ),
            (
                "cpu short",
                node("4", "8Gi", "110", &[&[("cpu", "2")]]),
                vec![("cpu", "3")],
                Code::Unschedulable,
                vec!["Insufficient cpu"],
            ),
            (
                "cpu and memory short",
                node("4", "8Gi", "110", &[&[("cpu", "2"), ("memory", "7Gi")]]),
                vec![("cpu", "3"), ("memory", "2Gi")],
                Code::Unschedulable,
                vec!["Insufficient cpu", "Insufficient memory"],
            ),
            (
                "more than the node has",
                node("4", "8Gi", "110", &[]),
                vec![("cpu", "5")],
                Code::UnschedulableAndUnresolvable,
                vec!["Insufficient cpu"],
            ),
            (
                "pod count",
                node("4", "8Gi", "1", &[&[]]),
                vec![],
                Code::Unschedulable,
                vec!["Too many pods"],
            ),
            (
                "extended resource",
                node("4", "8Gi", "110", &[&[("example.com/gpu", "2")]]),
                vec![("example.com/gpu", "1")],
                Code::Unschedulable,
                vec!["Insufficient example.com/gpu"],
            ),
        ];
        for (name, node, req, code, reasons) in cases {
            let pod = pod_requesting("p", &req);
            let s = fit.filter(&CycleState::new(), &pod, &node);
            assert_eq!(s.code, code, "{name}");
            assert_eq!(s.reasons, reasons, "{name}");
        }
    }

    #[test]
    fn ignored_resources_are_not_checked() {
        let fit = NodeResourcesFit::new(FitArgs {
            ignored_resource_groups: vec!["example.com".into()],
            ..Default::default()
        });
        let pod = pod_requesting("p", &[("example.com/gpu", "5")]);
        assert!(
            fit.filter(&CycleState::new(), &pod, &node("4", "8Gi", "110", &[]))
                .is_success()
        );
    }

    /// DRAExtendedResource: a class serving the resource (its explicit name or the
    /// implicit `deviceclass.resource.kubernetes.io/<class>`) lets nodes whose allocatable
    /// lacks it pass (DynamicResources allocates there); a device plugin's allocatable
    /// is still checked; without a class it is insufficient as ever.
    #[test]
    fn extended_resources_a_device_class_serves_are_left_to_dra() {
        let fit = NodeResourcesFit::new(FitArgs::default());
        let class: k8s_openapi::api::resource::v1::DeviceClass =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "gpu.example.com"},
                "spec": {"extendedResourceName": "example.com/gpu"}
            }))
            .expect("class");
        let mut devices = DeviceObjects::default();
        devices
            .classes
            .insert("gpu.example.com".into(), Arc::new(class));
        let snapshot = Snapshot {
            devices: Arc::new(devices),
            ..Snapshot::from_nodes(Vec::new())
        };
        let without = node_with("n", |_| {});
        let run = |pod: &PodInfo, node: &NodeInfo, snapshot: &Snapshot| {
            let mut state = CycleState::new();
            let (_, s) = fit.pre_filter(&mut state, pod, snapshot);
            assert!(s.is_success());
            let s = fit.filter(&state, pod, node);
            (s.code, s.message())
        };
        let gpu = pod_requesting("p", &[("example.com/gpu", "1")]);
        let insufficient = (
            Code::UnschedulableAndUnresolvable,
            "Insufficient example.com/gpu".to_string(),
        );
        assert_eq!(
            run(&gpu, &without, &snapshot),
            (Code::Success, String::new())
        );
        let implicit = pod_requesting(
            "p",
            &[("deviceclass.resource.kubernetes.io/gpu.example.com", "1")],
        );
        assert_eq!(
            run(&implicit, &without, &snapshot),
            (Code::Success, String::new())
        );
        assert_eq!(
            run(&gpu, &without, &Snapshot::from_nodes(Vec::new())),
            insufficient
        );
        // The device plugin's two, both taken.
        let taken = node("4", "8Gi", "110", &[&[("example.com/gpu", "2")]]);
        assert_eq!(
            run(&gpu, &taken, &snapshot),
            (
                Code::Unschedulable,
                "Insufficient example.com/gpu".to_string()
            )
        );
        // Another extended resource no class serves is checked.
        let fpga = pod_requesting("p", &[("example.com/gpu", "1"), ("example.com/fpga", "1")]);
        assert_eq!(
            run(&fpga, &without, &snapshot),
            (
                Code::UnschedulableAndUnresolvable,
                "Insufficient example.com/fpga".to_string()
            )
        );
    }

    #[test]
    fn scoring_strategies() {
        // Node: 4 cpu, 8Gi; existing 1 cpu / 2Gi; pod 1 cpu / 2Gi → 50 % used after placement.
        let n = node("4", "8Gi", "110", &[&[("cpu", "1"), ("memory", "2Gi")]]);
        let pod = pod_requesting("p", &[("cpu", "1"), ("memory", "2Gi")]);
        let score = |strategy| {
            NodeResourcesFit::new(FitArgs {
                strategy,
                ..Default::default()
            })
            .score(&CycleState::new(), &pod, &n)
            .unwrap_or(-1)
        };
        assert_eq!(score(Strategy::LeastAllocated), 50);
        assert_eq!(score(Strategy::MostAllocated), 50);
        assert_eq!(
            score(Strategy::RequestedToCapacityRatio(vec![(0, 0), (100, 10)])),
            50
        );
        assert_eq!(
            score(Strategy::RequestedToCapacityRatio(vec![(0, 10), (100, 0)])),
            50
        );
        assert_eq!(
            score(Strategy::RequestedToCapacityRatio(vec![(0, 0), (40, 10)])),
            100
        );
    }

    #[test]
    fn zero_request_pods_score_with_defaults() {
        // 100m of 4 cpu and 200Mi of 8Gi: (97 + 97) / 2.
        let n = node("4", "8Gi", "110", &[]);
        let pod = pod_requesting("p", &[]);
        let s = NodeResourcesFit::new(FitArgs::default())
            .score(&CycleState::new(), &pod, &n)
            .unwrap_or(-1);
        assert_eq!(s, 97);
    }

    /// Requests and capacities at the edge of i64 are judged, never overflowed.
    #[test]
    fn absurd_sizes_neither_panic_nor_fit() {
        let max = "9223372036854775807";
        let huge = [("cpu", max), ("memory", max)];
        let n = node(max, max, "110", &[&huge, &huge]);
        let fit = NodeResourcesFit::new(FitArgs::default());
        let state = CycleState::new();
        let p = pod_requesting("p", &huge);
        let s = fit.filter(&state, &p, &n);
        assert!(s.is_rejected(), "{s}");
        assert!(fit.score(&state, &p, &n).is_ok());
        let roomy = node(max, max, "110", &[]);
        let small = pod_requesting("s", &[("cpu", "1"), ("memory", "1Gi")]);
        assert!(fit.filter(&state, &small, &roomy).is_success());
        assert!(fit.score(&state, &small, &roomy).is_ok());
    }
}
