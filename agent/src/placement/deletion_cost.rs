//! Placements that keep their shape: for a policy whose Weighted division sets
//! `keepShape`, the leader keeps `controller.kubernetes.io/pod-deletion-cost` on each
//! owner's pods so that a ReplicaSet scaled down deletes first from the clusters most over
//! their share.
//!
//! The j-th oldest of an owner's pods in cluster k costs `-⌊1000·j/w_k⌋`: a ReplicaSet
//! deletes the lowest cost first, i.e. the largest `j/w_k` — the cluster whose count is
//! furthest above its weight — which keeps every cluster within a pod of its share as it
//! shrinks (apportionment run backwards). A pod's cost depends only on its rank in its own
//! cluster, so a new replica is one write and older pods keep theirs. Clusters the weights
//! leave out go first.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use mcsched_shared::policy::DivisionType;

use mcsched_engine::policies::PolicySet;
use mcsched_engine::snapshot::Snapshot;

pub const ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Below every weighted cluster's cost.
const UNWEIGHTED: i64 = -(1 << 30);

/// The deletion cost of the `j`-th (1-based, oldest first) pod of its owner in a cluster
/// of weight `w`.
pub fn cost(j: usize, w: i64) -> i64 {
    if w <= 0 {
        return UNWEIGHTED;
    }
    -((j as i64).saturating_mul(1000) / w)
}

/// Pod `namespace/name` → the cost it should carry, for every pod of a keepShape policy.
pub fn wanted(set: &PolicySet, snapshot: &Snapshot) -> BTreeMap<String, (String, i64)> {
    // (policy, owner) → cluster → pods (created, name, key).
    type Pods = Vec<(String, String, String)>;
    let mut groups: HashMap<(String, String), HashMap<String, Pods>> = HashMap::new();
    let mut weights: HashMap<String, BTreeMap<String, i64>> = HashMap::new();
    for node in snapshot.nodes.iter() {
        let cluster = node.cluster_name();
        for pod in &node.pods {
            if pod.terminating() {
                continue;
            }
            let Some(policy) = set.for_pod(&pod.meta) else {
                continue;
            };
            let Some(d) = &policy.spec.division else {
                continue;
            };
            if !d.keep_shape || d.type_ != DivisionType::Weighted || policy.invalid.is_some() {
                continue;
            }
            let Some(owner) = pod.controller_uid() else {
                continue;
            };
            weights.insert(policy.reference.clone(), d.weights.clone());
            let created = pod
                .meta
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            groups
                .entry((policy.reference.clone(), owner.to_string()))
                .or_default()
                .entry(cluster.to_string())
                .or_default()
                .push((created, pod.name.clone(), pod.key.clone()));
        }
    }
    let mut out = BTreeMap::new();
    for ((policy, _), clusters) in groups {
        let w = &weights[&policy];
        for (cluster, mut pods) in clusters {
            pods.sort();
            let weight = w.get(&cluster).copied().unwrap_or(0);
            for (j, (_, _, key)) in pods.into_iter().enumerate() {
                out.insert(key, (policy.clone(), cost(j + 1, weight)));
            }
        }
    }
    out
}

fn current(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .map(String::as_str)
}

/// Writes the costs that differ; returns, per policy, the first write refused (with the
/// grant that allows it, for the agent's ServiceAccount in `agent_namespace`), for its
/// status.
pub async fn write(
    client: &Client,
    set: &PolicySet,
    snapshot: &Snapshot,
    agent_namespace: &str,
) -> HashMap<String, String> {
    let mut refused: HashMap<String, String> = HashMap::new();
    let pods: HashMap<&str, &ObjectMeta> = snapshot
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .map(|p| (p.key.as_str(), &p.meta))
        .collect();
    for (key, (policy, cost)) in wanted(set, snapshot) {
        let Some(pod) = pods.get(key.as_str()) else {
            continue;
        };
        let value = cost.to_string();
        if current(pod) == Some(value.as_str()) || refused.contains_key(&policy) {
            continue;
        }
        let (ns, name) = key.split_once('/').unwrap_or_default();
        // The pod's UID as a precondition: never the annotation of a successor of that name.
        let patch = serde_json::json!({"metadata": {
            "uid": pod.uid,
            "annotations": {ANNOTATION: value}}});
        match Api::<Pod>::namespaced(client.clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 403 => {
                refused.insert(
                    policy,
                    format!(
                        "the agent may not patch pods in namespace {ns} to keep their pod-deletion-cost: {}",
                        mcsched_engine::policies::placement_keeper_grant(ns, agent_namespace)
                    ),
                );
            }
            Err(e) => tracing::debug!(pod = %key, error = %e, "pod-deletion-cost not written"),
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::watch::Change;
    use mcsched_engine::plugins::helper::cluster_placement::tests_support::virtual_node;
    use mcsched_engine::snapshot::PodInfo;
    use serde_json::json;
    use std::sync::Arc;

    /// Scales down by deleting the lowest cost first, as a ReplicaSet does.
    fn scale_down(
        costs: &BTreeMap<String, (String, i64)>,
        cluster_of: impl Fn(&str) -> String,
        to: usize,
    ) -> BTreeMap<String, usize> {
        let mut ranked: Vec<(i64, &String)> = costs.iter().map(|(k, (_, c))| (*c, k)).collect();
        ranked.sort();
        let keep = &ranked[ranked.len() - to..];
        let mut per = BTreeMap::new();
        for (_, k) in keep {
            *per.entry(cluster_of(k)).or_default() += 1;
        }
        per
    }

    #[test]
    fn a_scaled_down_owner_keeps_its_split() {
        let mut set = PolicySet::default();
        set.apply_namespaced(Change::Apply(
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"},
                "spec": {"podSelector": {}, "division": {"type": "Weighted", "weights": {"east": 2, "west": 1}, "keepShape": true}}})).unwrap()),
            false,
        ));
        let mut east = virtual_node("east", &[]);
        let mut west = virtual_node("west", &[]);
        let replica = |name: String, node: &str, minute: usize| {
            let p: Pod = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": name,
                "creationTimestamp": format!("2026-11-24T10:{minute:02}:00Z"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})).unwrap();
            Arc::new(PodInfo::new(Arc::new(p)))
        };
        for i in 0..8 {
            east.add_pod(replica(format!("e{i}"), "mcsched-east", i));
        }
        for i in 0..4 {
            west.add_pod(replica(format!("w{i}"), "mcsched-west", i));
        }
        let snapshot = Snapshot::from_nodes(vec![Arc::new(east), Arc::new(west)]);
        let costs = wanted(&set, &snapshot);
        assert_eq!(costs.len(), 12);
        // The oldest in east costs -500, the youngest -4000; west's -1000 … -4000.
        assert_eq!(costs["default/e0"].1, -500);
        assert_eq!(costs["default/e7"].1, -4000);
        assert_eq!(costs["default/w3"].1, -4000);
        let cluster_of = |k: &str| {
            if k.starts_with("default/e") {
                "east".to_string()
            } else {
                "west".to_string()
            }
        };
        assert_eq!(
            scale_down(&costs, cluster_of, 6),
            BTreeMap::from([("east".into(), 4), ("west".into(), 2)])
        );
        assert_eq!(
            scale_down(&costs, cluster_of, 3),
            BTreeMap::from([("east".into(), 2), ("west".into(), 1)])
        );
        // Without keepShape nothing is written.
        let mut plain = PolicySet::default();
        plain.apply_namespaced(Change::Apply(
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"},
                "spec": {"podSelector": {}, "division": {"type": "Weighted", "weights": {"east": 2, "west": 1}}}})).unwrap()),
            false,
        ));
        assert!(wanted(&plain, &snapshot).is_empty());
    }
}
