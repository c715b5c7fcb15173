//! The placement policies' status, written by the leader: the pods each policy places per
//! cluster, and a Ready condition saying why not when it is invalid or no Ready cluster
//! satisfies it. Written only when it changed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use mcsched_shared::policy::{
    ClusterPlacementPolicy, ClusterPods, PlacementPolicy, PlacementPolicyStatus, selector_string,
};

use mcsched_engine::policies::{Policy, PolicySet};
use mcsched_engine::snapshot::{NodeInfo, Snapshot};

/// How often the status is recomputed.
pub const INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

fn node_ready(node: &NodeInfo) -> bool {
    mcsched_shared::node::is_ready(&node.node) && !node.unschedulable
}

/// Whether a cluster is one the policy may use (by affinity and groups).
fn allowed(p: &Policy, node: &NodeInfo) -> bool {
    p.spec.allows(node.cluster_name(), node.labels())
}

/// Why no Ready cluster will do: the clusters it allows that are not Ready, and those it
/// does not allow.
fn why_none(p: &Policy, snapshot: &Snapshot) -> String {
    let mut not_ready: Vec<&str> = Vec::new();
    let mut not_allowed: Vec<&str> = Vec::new();
    for n in snapshot.nodes.iter() {
        let c = n.cluster_name();
        if allowed(p, n) {
            not_ready.push(c);
        } else {
            not_allowed.push(c);
        }
    }
    for v in [&mut not_ready, &mut not_allowed] {
        v.sort();
        v.dedup();
    }
    not_allowed.retain(|c| !not_ready.contains(c));
    let mut parts = Vec::new();
    if !not_ready.is_empty() {
        parts.push(format!("not Ready: {}", not_ready.join(", ")));
    }
    if !not_allowed.is_empty() {
        parts.push(format!(
            "not allowed by its cluster affinity and groups: {}",
            not_allowed.join(", ")
        ));
    }
    if parts.is_empty() {
        parts.push("no cluster has a node".into());
    }
    format!("no Ready cluster satisfies it ({})", parts.join("; "))
}

/// Each policy's status as the snapshot shows it (the condition's transition time is
/// filled in when written).
pub fn statuses(
    set: &PolicySet,
    snapshot: &Snapshot,
    shape_refused: &HashMap<String, String>,
) -> HashMap<String, PlacementPolicyStatus> {
    let mut counts: HashMap<String, BTreeMap<String, i64>> = HashMap::new();
    for node in snapshot.nodes.iter() {
        for pod in &node.pods {
            if pod.terminating() {
                continue;
            }
            if let Some(p) = set.for_pod(&pod.meta) {
                *counts
                    .entry(p.reference.clone())
                    .or_default()
                    .entry(node.cluster_name().to_string())
                    .or_default() += 1;
            }
        }
    }
    set.all()
        .map(|p| {
            let per_cluster = counts.remove(&p.reference).unwrap_or_default();
            let condition = match &p.invalid {
                Some(e) => ("False", "Invalid", e.to_string()),
                None => {
                    let mut usable: Vec<&str> = snapshot
                        .nodes
                        .iter()
                        .filter(|n| node_ready(n) && allowed(p, n))
                        .map(|n| n.cluster_name())
                        .collect();
                    usable.sort();
                    usable.dedup();
                    if usable.is_empty() {
                        ("False", "NoReadyCluster", why_none(p, snapshot))
                    } else {
                        (
                            "True",
                            "ClustersReady",
                            format!("Ready clusters it may use: {}", usable.join(", ")),
                        )
                    }
                }
            };
            let mut conditions = vec![Condition {
                type_: "Ready".into(),
                status: condition.0.into(),
                reason: condition.1.into(),
                message: condition.2,
                observed_generation: p.generation,
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            }];
            let keeps = p.spec.division.as_ref().is_some_and(|d| d.keep_shape);
            if (keeps || p.spec.rebalance.is_some()) && p.invalid.is_none() {
                let (status, reason, message) = match shape_refused.get(&p.reference) {
                    Some(why) => ("False", "Forbidden", why.clone()),
                    None => (
                        "True",
                        "Kept",
                        match (keeps, p.spec.rebalance.is_some()) {
                            (true, true) => "pod-deletion-cost kept on its pods; rebalancing",
                            (true, false) => "pod-deletion-cost kept on its pods",
                            _ => "rebalancing",
                        }
                        .to_string(),
                    ),
                };
                conditions.push(Condition {
                    type_: "PlacementKept".into(),
                    status: status.into(),
                    reason: reason.into(),
                    message,
                    observed_generation: p.generation,
                    last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                });
            }
            let status = PlacementPolicyStatus {
                observed_generation: p.generation,
                selector: Some(selector_string(&p.spec.pod_selector)),
                clusters_in_use: (!per_cluster.is_empty()).then(|| {
                    per_cluster
                        .iter()
                        .map(|(c, n)| format!("{c}:{n}"))
                        .collect::<Vec<_>>()
                        .join(",")
                }),
                clusters: per_cluster
                    .into_iter()
                    .map(|(name, pods)| ClusterPods { name, pods })
                    .collect(),
                conditions,
            };
            (p.reference.clone(), status)
        })
        .collect()
}

/// What was last written per policy, so that unchanged status is not written again and
/// a condition keeps its transition time while its status holds.
#[derive(Default)]
pub struct Writer {
    written: HashMap<String, PlacementPolicyStatus>,
}

impl Writer {
    /// Writes what changed; errors are logged and retried next round.
    pub async fn write(
        &mut self,
        client: &Client,
        set: &PolicySet,
        snapshot: &Snapshot,
        shape_refused: &HashMap<String, String>,
    ) {
        let by_ref: HashMap<String, Arc<Policy>> = set
            .all()
            .map(|p| (p.reference.clone(), p.clone()))
            .collect();
        self.written.retain(|r, _| by_ref.contains_key(r));
        for (reference, mut status) in statuses(set, snapshot, shape_refused) {
            let previous = self.written.get(&reference);
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            for c in &mut status.conditions {
                c.last_transition_time = previous
                    .and_then(|p| {
                        p.conditions
                            .iter()
                            .find(|o| o.type_ == c.type_ && o.status == c.status)
                    })
                    .map(|o| o.last_transition_time.clone())
                    .unwrap_or_else(|| now.clone());
            }
            if previous == Some(&status) {
                continue;
            }
            let Some(p) = by_ref.get(&reference) else {
                continue;
            };
            let patch = Patch::Merge(serde_json::json!({"status": status}));
            let params = PatchParams::default();
            let result = if p.is_cluster_wide() {
                Api::<ClusterPlacementPolicy>::all(client.clone())
                    .patch_status(&p.name, &params, &patch)
                    .await
                    .map(|_| ())
            } else {
                Api::<PlacementPolicy>::namespaced(client.clone(), &p.namespace)
                    .patch_status(&p.name, &params, &patch)
                    .await
                    .map(|_| ())
            };
            match result {
                Ok(()) => {
                    self.written.insert(reference, status);
                }
                Err(e) => {
                    tracing::warn!(policy = %reference, error = %e, "writing the policy's status")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::watch::Change;
    use mcsched_engine::plugins::helper::cluster_placement::tests_support::virtual_node;
    use mcsched_engine::snapshot::PodInfo;
    use serde_json::json;

    #[test]
    fn counts_per_cluster_and_says_why_not_ready() {
        let mut set = PolicySet::default();
        set.apply_namespaced(Change::Apply(
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default", "generation": 2},
                "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "clusterAffinity": {"clusterNames": ["east"]}}})).unwrap()),
            false,
        ));
        set.apply_namespaced(Change::Apply(
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "nowhere", "namespace": "default"},
                "spec": {"podSelector": {"matchLabels": {"app": "none"}}, "clusterAffinity": {"clusterNames": ["mars"]}}})).unwrap()),
            false,
        ));
        let mut east = virtual_node("east", &[]);
        for i in 0..3 {
            let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("w{i}"), "namespace": "default", "labels": {"app": "web"}},
                "spec": {"nodeName": "mcsched-east", "containers": [{"name": "c", "image": "i"}]}})).unwrap();
            east.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        }
        let snapshot = Snapshot::from_nodes(vec![Arc::new(east)]);
        let all = statuses(&set, &snapshot, &HashMap::new());
        let web = &all["PlacementPolicy default/web"];
        assert_eq!(web.clusters_in_use.as_deref(), Some("east:3"));
        assert_eq!(web.selector.as_deref(), Some("app=web"));
        assert_eq!(web.observed_generation, Some(2));
        assert_eq!(web.conditions[0].status, "True");
        let nowhere = &all["PlacementPolicy default/nowhere"];
        assert_eq!(nowhere.clusters_in_use, None);
        assert_eq!(
            (
                nowhere.conditions[0].status.as_str(),
                nowhere.conditions[0].reason.as_str()
            ),
            ("False", "NoReadyCluster")
        );
        assert_eq!(
            nowhere.conditions[0].message,
            "no Ready cluster satisfies it (not allowed by its cluster affinity and groups: east)"
        );
    }
}
