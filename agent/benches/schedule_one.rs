//! One pod against a snapshot of 5000 nodes holding 10000 pods, default plugins, every
//! node scored (percentageOfNodesToScore 100) — the engine's per-pod cost: a plain pod, a
//! pod with required anti-affinity (scheduler_perf's pod-with-pod-anti-affinity: 1000 of
//! the existing pods carry the same term, one per node) and a pod with two spread
//! constraints (zone DoNotSchedule, hostname ScheduleAnyway, over all 10000 pods).

use std::collections::BTreeMap;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{
    Affinity, Container, Node, NodeStatus, Pod, PodAffinityTerm, PodAntiAffinity, PodSpec,
    ResourceRequirements, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use mcsched_agent::scheduler::schedule_pod;
use mcsched_engine::cache::Cache;
use mcsched_engine::config_bridge::default_spec;
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::framework::{CycleState, Framework};
use mcsched_engine::plugins::default_registry;
use mcsched_engine::snapshot::PodInfo;

// As the agent binary: the allocator is part of the per-pod cost.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NODES: usize = 5000;
const PODS: usize = 10_000;
/// Existing pods with scheduler_perf's anti-affinity term, on nodes 0..ANTI_AFFINE.
const ANTI_AFFINE: usize = 1000;

fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

fn node(i: usize) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(format!("node-{i}"));
    n.metadata.labels = Some(BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), format!("node-{i}")),
        (
            "topology.kubernetes.io/zone".to_string(),
            format!("zone-{}", i % 3),
        ),
    ]));
    n.status = Some(NodeStatus {
        allocatable: Some(q(&[("cpu", "32"), ("memory", "128Gi"), ("pods", "110")])),
        ..Default::default()
    });
    n
}

fn pod(name: &str, node: Option<String>) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.labels = Some(BTreeMap::from([("app".to_string(), "bench".to_string())]));
    p.spec = Some(PodSpec {
        node_name: node,
        containers: vec![Container {
            name: "c".into(),
            image: Some("registry.k8s.io/pause:3.10".into()),
            resources: Some(ResourceRequirements {
                requests: Some(q(&[("cpu", "100m"), ("memory", "500Mi")])),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..Default::default()
    }
}

/// A green pod that no other green pod may share a hostname with.
fn anti_affine(mut p: Pod) -> Pod {
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("color".into(), "green".into());
    if let Some(spec) = p.spec.as_mut() {
        spec.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(selector("color", "green")),
                    topology_key: "kubernetes.io/hostname".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    p
}

fn spread(mut p: Pod) -> Pod {
    let constraint = |key: &str, when: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: when.into(),
        label_selector: Some(selector("app", "bench")),
        ..Default::default()
    };
    if let Some(spec) = p.spec.as_mut() {
        spec.topology_spread_constraints = Some(vec![
            constraint("topology.kubernetes.io/zone", "DoNotSchedule"),
            constraint("kubernetes.io/hostname", "ScheduleAnyway"),
        ]);
    }
    p
}

/// The cluster as the agent's cache holds it, topology counts included.
fn cache() -> Cache {
    let mut cache = Cache::new();
    for i in 0..NODES {
        cache.apply_node(Arc::new(node(i)));
    }
    for i in 0..PODS {
        let n = i % NODES;
        let mut p = pod(&format!("p{i}"), Some(format!("node-{n}")));
        if i < ANTI_AFFINE {
            p = anti_affine(p);
        }
        cache.apply_pod(Arc::new(p));
    }
    cache
}

fn bench(c: &mut Criterion) {
    let reg = default_registry();
    let mut spec = match default_spec("bench") {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    spec.percentage_of_nodes_to_score = Some(100);
    let parallelism = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let fw = match Framework::new(&spec, &reg, parallelism) {
        Ok(f) => f,
        Err(e) => panic!("{e}"),
    };
    let mut cache = cache();
    let cases = [
        ("schedule_one_5000_nodes_10000_pods", pod("incoming", None)),
        (
            "schedule_one_anti_affinity_5000_nodes_10000_pods",
            anti_affine(pod("incoming", None)),
        ),
        (
            "schedule_one_two_spread_constraints_5000_nodes_10000_pods",
            spread(pod("incoming", None)),
        ),
    ];
    for (name, incoming) in cases {
        let incoming = PodInfo::new(Arc::new(incoming));
        // Each case must place its pod: a benchmark of a failing cycle measures nothing.
        // The first cycle asks for the topology counts it needs; the cache keeps them
        // from its next snapshot on, as for the agent's second pod of a workload.
        let mut placed = Err(());
        let mut snap = cache.snapshot();
        for _ in 0..2 {
            snap = cache.snapshot();
            let mut state = CycleState::new();
            let mut record = CycleRecord::default();
            placed = futures::executor::block_on(schedule_pod(
                &fw,
                &[],
                &mut state,
                &incoming,
                &snap,
                &mut record,
                false,
            ))
            .map(|r| r.feasible_nodes)
            .map_err(|_| ());
        }
        match placed {
            // `make bench-engine` compares this with kube-scheduler's count on the same
            // cluster: equal work, not only equal size.
            Ok(feasible) => println!("{name}: {feasible} feasible nodes"),
            Err(e) => panic!("{name}: the pod does not fit: {e:?}"),
        }
        c.bench_function(name, |b| {
            b.iter(|| {
                let mut state = CycleState::new();
                let mut record = CycleRecord::default();
                // The one path every caller takes; no extenders here, so it is the
                // framework's cycle as such.
                futures::executor::block_on(schedule_pod(
                    &fw,
                    &[],
                    &mut state,
                    &incoming,
                    &snap,
                    &mut record,
                    false,
                ))
                .map(|r| r.node)
                .ok()
            })
        });
    }
    let snap = cache.snapshot();
    println!(
        "snapshot: {} nodes, {} pods, about {} bytes per node",
        snap.len(),
        PODS,
        mcsched_engine::snapshot::approximate_bytes(&snap) / NODES
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench
}
criterion_main!(benches);
