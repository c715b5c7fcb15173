//! One pod against a snapshot of 5000 nodes holding 10000 pods, default plugins, every
//! node scored (percentageOfNodesToScore 100) — the engine's per-pod cost.

use std::collections::BTreeMap;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use mcsched_agent::config_bridge::default_spec;
use mcsched_agent::framework::runtime::CycleRecord;
use mcsched_agent::framework::{CycleState, Framework};
use mcsched_agent::plugins::default_registry;
use mcsched_agent::scheduler::schedule_pod;
use mcsched_agent::snapshot::{NodeInfo, PodInfo, Snapshot};

// As the agent binary: the allocator is part of the per-pod cost.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NODES: usize = 5000;
const PODS: usize = 10_000;

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

fn snapshot() -> Snapshot {
    let mut infos: Vec<NodeInfo> = (0..NODES)
        .map(|i| NodeInfo::new(Arc::new(node(i))))
        .collect();
    for i in 0..PODS {
        let n = i % NODES;
        infos[n].add_pod(Arc::new(PodInfo::new(Arc::new(pod(
            &format!("p{i}"),
            Some(format!("node-{n}")),
        )))));
    }
    Snapshot::from_nodes(infos.into_iter().map(Arc::new).collect())
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
    let snap = snapshot();
    let incoming = PodInfo::new(Arc::new(pod("incoming", None)));
    c.bench_function("schedule_one_5000_nodes_10000_pods", |b| {
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
    println!(
        "snapshot: {} nodes, {} pods, about {} bytes per node",
        snap.len(),
        PODS,
        mcsched_agent::snapshot::approximate_bytes(&snap) / NODES
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench
}
criterion_main!(benches);
