//! Cluster tolerations with `tolerationSeconds`: a pod whose placement policy tolerates a
//! NoExecute taint of its cluster's virtual node (a NotReady or unreachable leaf) only for
//! a while is evicted by the leader once that while has passed since the taint was added —
//! what kube's taint manager does with a pod's own tolerations — so that its owner
//! recreates it elsewhere. Through the Eviction API, as the rebalancer: PodDisruptionBudgets
//! hold, and only in namespaces whose admin lets the agent evict (the placement keeper
//! grant). Pods whose policy has no such toleration are left to the taint manager and their
//! own tolerations.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    DeleteOptions, ObjectMeta, Preconditions as K8sPreconditions,
};
use kube::Client;
use kube::api::{Api, PostParams};
use mcsched_shared::taints;

use mcsched_engine::policies::PolicySet;
use mcsched_engine::snapshot::Snapshot;

/// A pod to evict: `namespace/name`, its UID, its policy, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub key: String,
    pub uid: String,
    pub policy: String,
    pub reason: String,
}

/// The pods on virtual nodes whose policy's toleration of a NoExecute taint there has run
/// out at `now`.
pub fn due(set: &PolicySet, snapshot: &Snapshot, now: k8s_openapi::jiff::Timestamp) -> Vec<Due> {
    let mut out = Vec::new();
    if set.is_empty() {
        return out;
    }
    for node in snapshot.nodes.iter().filter(|n| n.cluster.is_some()) {
        let tainted: Vec<_> = mcsched_engine::plugins::helper::taints::node_taints(node)
            .iter()
            .filter(|t| t.effect == "NoExecute")
            .collect();
        if tainted.is_empty() {
            continue;
        }
        for pod in &node.pods {
            if pod.terminating() {
                continue;
            }
            let Some(policy) = set.for_pod(&pod.meta) else {
                continue;
            };
            if policy.invalid.is_some() {
                continue;
            }
            for taint in &tainted {
                // The shortest of the policy's limited tolerations of this taint.
                let Some(seconds) = policy
                    .spec
                    .cluster_tolerations
                    .iter()
                    .filter(|tol| taints::tolerates(tol, taint))
                    .filter_map(|tol| tol.toleration_seconds)
                    .min()
                else {
                    continue;
                };
                let since = taint.time_added.as_ref().map(|t| t.0).unwrap_or(now);
                let waited = now.duration_since(since).as_secs();
                if waited >= seconds.max(0) {
                    out.push(Due {
                        key: pod.key.clone(),
                        uid: pod.uid.clone(),
                        policy: policy.reference.clone(),
                        reason: format!(
                            "cluster {} has taint {}:{} for {waited}s; {} tolerates it for {seconds}s",
                            node.cluster.as_deref().unwrap_or_default(),
                            taint.key,
                            taint.effect,
                            policy.reference
                        ),
                    });
                    break;
                }
            }
        }
    }
    out
}

/// Evicts pod `ns/name` if its UID is still `uid`. The Eviction is written out here, not
/// with kube's `evict`: its `EvictParams` serialize as `delete_options`, which the API
/// server ignores, and the UID precondition with it.
pub async fn evict(client: &Client, ns: &str, name: &str, uid: &str) -> Result<(), kube::Error> {
    let eviction = Eviction {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            ..Default::default()
        },
        delete_options: Some(DeleteOptions {
            preconditions: Some(K8sPreconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        }),
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .create_subresource::<_, serde_json::Value>(
            "eviction",
            name,
            &PostParams::default(),
            &eviction,
        )
        .await?;
    Ok(())
}

/// Evicts what is due (UID-preconditioned: never a successor of the same name); returns,
/// by policy, why the agent may not (the grant to add) for the policies' status.
pub async fn run(
    client: &Client,
    set: &PolicySet,
    snapshot: &Snapshot,
    agent_namespace: &str,
) -> HashMap<String, String> {
    let mut refused = HashMap::new();
    for d in due(set, snapshot, k8s_openapi::jiff::Timestamp::now()) {
        let (ns, name) = d.key.split_once('/').unwrap_or_default();
        match evict(client, ns, name, &d.uid).await {
            Ok(_) => {
                tracing::info!(pod = %d.key, reason = %d.reason, "evicted: its placement policy's toleration ran out")
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                refused.insert(
                    d.policy.clone(),
                    format!(
                        "the agent may not evict pods in namespace {ns} when their cluster toleration runs out: {}",
                        mcsched_engine::policies::placement_keeper_grant(ns, agent_namespace)
                    ),
                );
            }
            // A PodDisruptionBudget allows no disruption now: tried again next round.
            Err(kube::Error::Api(e)) if e.code == 429 => {
                tracing::info!(pod = %d.key, reason = %d.reason, message = %e.message, "not evicted yet after its toleration ran out: a PodDisruptionBudget allows no disruption now")
            }
            Err(e) => {
                tracing::warn!(pod = %d.key, error = %e, "not evicted after its toleration ran out")
            }
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

    /// A policy tolerating `east`'s unreachable taint for 30 s, the taint there since long
    /// ago, and pods `web-1` (the policy's) and `db-1` on it.
    fn long_tainted() -> (PolicySet, Snapshot) {
        east_tainted_at("2020-01-01T00:00:00Z")
    }

    fn east_tainted_at(since: &str) -> (PolicySet, Snapshot) {
        let mut set = PolicySet::default();
        set.apply_namespaced(Change::Apply(
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "fast", "namespace": "default"},
                "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "clusterTolerations": [
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]}})).unwrap()),
            false,
        ));
        let mut east = virtual_node("east", &[]);
        let mut n = (*east.node).clone();
        n.spec.get_or_insert_default().taints = Some(vec![
            serde_json::from_value(json!(
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": since}))
            .unwrap(),
        ]);
        east.set_node(Arc::new(n));
        for (name, app) in [("web-1", "web"), ("db-1", "db")] {
            let p: Pod = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"app": app}},
                "spec": {"nodeName": "mcsched-east", "containers": [{"name": "c", "image": "i"}]}})).unwrap();
            east.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        }
        (set, Snapshot::from_nodes(vec![Arc::new(east)]))
    }

    #[tokio::test]
    async fn failover_evicts_so_a_disruption_budget_holds_and_never_deletes() {
        let (set, snapshot) = long_tainted();
        // The API server's answer when a PodDisruptionBudget allows no disruption.
        let (client, calls, sent) = crate::fake_api::recording(|_, _, _| {
            (
                429,
                crate::fake_api::status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                ),
            )
        });
        let refused = run(&client, &set, &snapshot, "mcsched-system").await;
        assert!(refused.is_empty(), "{refused:?}");
        let evictions = crate::fake_api::sent(
            &sent,
            "POST",
            "/api/v1/namespaces/default/pods/web-1/eviction",
        );
        assert_eq!(evictions.len(), 1, "{calls:?}");
        assert_eq!(
            evictions[0]["deleteOptions"]["preconditions"]["uid"], "web-1",
            "{evictions:?}"
        );
        assert!(
            !crate::fake_api::called(&calls, "DELETE", "/pods/web-1"),
            "the budget holds: no delete around it"
        );
        assert_eq!(
            calls.lock().map(|c| c.len()).unwrap_or_default(),
            1,
            "db-1's policy has no toleration: left alone"
        );
    }

    #[tokio::test]
    async fn failover_without_the_namespaces_consent_names_the_grant() {
        let (set, snapshot) = long_tainted();
        let (client, calls) = crate::fake_api::client(|_, _| {
            (
                403,
                crate::fake_api::status(403, "Forbidden", "cannot create pods/eviction"),
            )
        });
        let refused = run(&client, &set, &snapshot, "mcsched-system").await;
        let why = refused
            .get("PlacementPolicy default/fast")
            .cloned()
            .unwrap_or_default();
        assert!(
            why.contains("may not evict pods in namespace default")
                && why.contains("kubectl create rolebinding mcsched-placement-keeper -n default"),
            "{refused:?}"
        );
        assert!(!crate::fake_api::called(&calls, "DELETE", "/pods/web-1"));
    }

    #[test]
    fn a_pod_leaves_a_tainted_cluster_when_its_policy_says() {
        let (set, snapshot) = east_tainted_at("2026-11-24T10:00:00Z");
        let at = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        assert!(due(&set, &snapshot, at("2026-11-24T10:00:20Z")).is_empty());
        let d = due(&set, &snapshot, at("2026-11-24T10:00:31Z"));
        assert_eq!(d.len(), 1, "only the policy's pod: {d:?}");
        assert_eq!(d[0].key, "default/web-1");
        assert_eq!(d[0].policy, "PlacementPolicy default/fast");
        assert_eq!(
            d[0].reason,
            "cluster east has taint node.kubernetes.io/unreachable:NoExecute for 31s; PlacementPolicy default/fast tolerates it for 30s"
        );
    }
}
