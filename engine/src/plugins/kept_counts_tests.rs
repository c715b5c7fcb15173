//! InterPodAffinity and PodTopologySpread give the same answers from the cache's kept
//! topology counts as from walking every pod: both run on one cluster, once on the cache's
//! snapshot and once on a snapshot of the same nodes that keeps nothing, while pods come,
//! go and are assumed, nodes are relabelled, and cycles add and remove pods (nominated
//! pods, preemption's what-ifs).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::inter_pod_affinity::InterPodAffinity;
use super::pod_topology_spread::PodTopologySpread;
use crate::cache::Cache;
use crate::framework::{CycleState, Plugin};
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

/// A small deterministic generator, so that a failure replays.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.next(from.len())]
    }
}

const APPS: [&str; 3] = ["a", "b", "c"];
const KEYS: [&str; 3] = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "region",
];

fn node(i: usize, rng: &mut Lcg) -> Node {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), format!("n{i}")),
        ("region".to_string(), format!("r{}", i % 2)),
    ]);
    // Some nodes lack a zone: they count for no constraint on it.
    if rng.next(6) != 0 {
        labels.insert(
            "topology.kubernetes.io/zone".into(),
            format!("z{}", rng.next(4)),
        );
    }
    if rng.next(3) == 0 {
        labels.insert("disk".into(), "ssd".into());
    }
    let taints = if rng.next(5) == 0 {
        json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("n{i}"), "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "500"}}
    }))
    .expect("node")
}

fn term(rng: &mut Lcg) -> Value {
    let mut t = json!({
        "labelSelector": {"matchLabels": {"app": rng.pick(&APPS)}},
        "topologyKey": rng.pick(&KEYS),
    });
    match rng.next(4) {
        0 => t["namespaces"] = json!(["default", "other"]),
        1 => t["namespaceSelector"] = json!({"matchLabels": {"team": "x"}}),
        _ => {}
    }
    t
}

fn affinity(rng: &mut Lcg) -> Value {
    let mut a = json!({});
    if rng.next(3) == 0 {
        a["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!([term(rng)]);
    }
    if rng.next(2) == 0 {
        a["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!([term(rng)]);
    }
    if rng.next(3) == 0 {
        a["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
            json!([{"weight": 1 + rng.next(100), "podAffinityTerm": term(rng)}]);
    }
    if rng.next(3) == 0 {
        a["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
            json!([{"weight": 1 + rng.next(100), "podAffinityTerm": term(rng)}]);
    }
    a
}

fn spread(rng: &mut Lcg) -> Value {
    let n = 1 + rng.next(2);
    let cs: Vec<Value> = (0..n)
        .map(|_| {
            let mut c = json!({
                "maxSkew": 1 + rng.next(2),
                "topologyKey": rng.pick(&KEYS),
                "whenUnsatisfiable": rng.pick(&["DoNotSchedule", "ScheduleAnyway"]),
                "labelSelector": {"matchLabels": {"app": rng.pick(&APPS)}},
            });
            if rng.next(4) == 0 {
                c["minDomains"] = json!(1 + rng.next(5));
                c["whenUnsatisfiable"] = json!("DoNotSchedule");
            }
            if rng.next(4) == 0 {
                c["nodeTaintsPolicy"] = json!("Honor");
            }
            c
        })
        .collect();
    json!(cs)
}

fn pod(name: &str, node: Option<&str>, rng: &mut Lcg) -> Pod {
    let ns = if rng.next(4) == 0 { "other" } else { "default" };
    let mut spec = json!({"containers": [{"name": "c"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    if rng.next(2) == 0 {
        spec["affinity"] = affinity(rng);
    }
    if rng.next(2) == 0 {
        spec["topologySpreadConstraints"] = spread(rng);
    }
    if rng.next(5) == 0 {
        spec["nodeSelector"] = json!({"disk": "ssd"});
    }
    let mut meta = json!({
        "name": name, "namespace": ns, "uid": format!("uid-{name}"),
        "labels": {"app": rng.pick(&APPS)}
    });
    if rng.next(10) == 0 {
        meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    serde_json::from_value(json!({"metadata": meta, "spec": spec})).expect("pod")
}

/// Everything both plugins decide for `pod` on `snapshot`: filter verdicts per node,
/// normalized scores of the nodes that pass, and the verdicts again after a cycle removed
/// `removed` and added `added` (on their nodes) to its state.
fn decide(
    pod: &PodInfo,
    snapshot: &Snapshot,
    changes: &[(Arc<PodInfo>, usize, i64)],
) -> Vec<String> {
    let plugins: [Box<dyn Plugin>; 2] = [
        Box::new(InterPodAffinity::new(Default::default())),
        Box::new(PodTopologySpread::new(Default::default())),
    ];
    let mut out = Vec::new();
    for p in &plugins {
        let mut state = CycleState::new();
        let pf = p.as_pre_filter().expect("pre filter");
        let (_, s) = pf.pre_filter(&mut state, pod, snapshot);
        let filter = |state: &CycleState, n: &NodeInfo| {
            if s.is_skip() {
                return "ok".to_string();
            }
            let st = p.as_filter().expect("filter").filter(state, pod, n);
            format!("{:?} {}", st.code, st.message())
        };
        let verdicts: Vec<String> = snapshot.nodes.iter().map(|n| filter(&state, n)).collect();
        out.push(format!("{} filter: {verdicts:?}", p.name()));
        if !s.is_skip() {
            let mut changed = state.clone();
            for (other, at, by) in changes {
                let n = &snapshot.nodes[*at];
                let _ = if *by > 0 {
                    pf.add_pod(&mut changed, pod, other, n)
                } else {
                    pf.remove_pod(&mut changed, pod, other, n)
                };
            }
            let after: Vec<String> = snapshot.nodes.iter().map(|n| filter(&changed, n)).collect();
            out.push(format!("{} filter after changes: {after:?}", p.name()));
        }
        let passing: Vec<u32> = (0..snapshot.len() as u32)
            .filter(|&i| {
                verdicts[i as usize] == "ok" || verdicts[i as usize].starts_with("Success")
            })
            .collect();
        let list = NodeList::new(snapshot.nodes.clone(), passing);
        let ps = p.as_pre_score().expect("pre score");
        let s = ps.pre_score(&mut state, pod, &list, snapshot);
        if s.is_skip() || list.is_empty() {
            out.push(format!("{} score: skip", p.name()));
            continue;
        }
        let sc = p.as_score().expect("score");
        let mut scores: Vec<i64> = list
            .iter()
            .map(|n| sc.score(&state, pod, n).unwrap_or(i64::MIN))
            .collect();
        sc.normalize(&state, pod, &mut scores);
        out.push(format!("{} score: {scores:?}", p.name()));
    }
    out
}

fn walked(kept: &Snapshot) -> Snapshot {
    Snapshot {
        namespaces: kept.namespaces.clone(),
        ..Snapshot::from_nodes(kept.nodes.to_vec())
    }
}

#[test]
fn kept_counts_decide_as_walking_the_pods_does() {
    let mut rng = Lcg(7);
    let mut cache = Cache::new();
    cache.set_namespace(
        "default".into(),
        BTreeMap::from([("team".into(), "x".into())]),
    );
    cache.set_namespace("other".into(), BTreeMap::new());
    let nodes: Vec<Node> = (0..24).map(|i| node(i, &mut rng)).collect();
    for n in &nodes {
        cache.apply_node(Arc::new(n.clone()));
    }
    let mut existing = Vec::new();
    for i in 0..150 {
        let at = format!("n{}", rng.next(nodes.len()));
        let p = Arc::new(pod(&format!("e{i}"), Some(&at), &mut rng));
        cache.apply_pod(p.clone());
        existing.push(p);
    }
    let mut kept_reads = 0;
    for round in 0..120 {
        let incoming = PodInfo::new(Arc::new(pod(&format!("in{round}"), None, &mut rng)));
        // First ask (the cache then keeps what was missed), then compare.
        let _ = decide(&incoming, &cache.snapshot(), &[]);
        let snap = cache.snapshot();
        let changes: Vec<(Arc<PodInfo>, usize, i64)> = (0..3)
            .map(|_| {
                let at = rng.next(snap.len());
                let n = &snap.nodes[at];
                if rng.next(2) == 0 && !n.pods.is_empty() {
                    (n.pods[rng.next(n.pods.len())].clone(), at, -1)
                } else {
                    let p = pod(&format!("nominated{round}"), Some(&n.name), &mut rng);
                    (Arc::new(PodInfo::new(Arc::new(p))), at, 1)
                }
            })
            .collect();
        let from_kept = decide(&incoming, &snap, &changes);
        let from_walk = decide(&incoming, &walked(&snap), &changes);
        assert_eq!(
            from_kept,
            from_walk,
            "round {round}, pod {:?}",
            incoming.pod().spec
        );
        kept_reads = kept_reads.max(snap.topology.kept_queries());

        // The cluster moves on: the pod is assumed, a pod goes, a node is relabelled.
        let target = snap.nodes[rng.next(snap.len())].name.clone();
        cache.assume(Arc::new(incoming), &target);
        if rng.next(2) == 0 && !existing.is_empty() {
            let gone = existing.swap_remove(rng.next(existing.len()));
            cache.remove_pod(&format!(
                "{}/{}",
                gone.metadata.namespace.as_deref().unwrap_or_default(),
                gone.metadata.name.as_deref().unwrap_or_default()
            ));
        }
        if rng.next(8) == 0 {
            let i = rng.next(nodes.len());
            cache.apply_node(Arc::new(node(i, &mut rng)));
        }
    }
    // Decisions were read from kept queries (not only from walking).
    assert!(kept_reads > 10, "{kept_reads}");
    let counts = cache.snapshot().topology;
    assert!(counts.kept() && counts.terms().count() > 0, "{counts:?}");
}
