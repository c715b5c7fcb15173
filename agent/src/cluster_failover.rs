//! Cluster tolerations with `tolerationSeconds`: a pod whose placement policy tolerates a
//! NoExecute taint of its cluster's virtual node (a NotReady or unreachable leaf) only for
//! a while is deleted by the leader once that while has passed since the taint was added —
//! what kube's taint manager does with a pod's own tolerations — so that its owner
//! recreates it elsewhere. Pods whose policy has no such toleration are left to the taint
//! manager and their own tolerations.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions};
use mcsched_shared::taints;

use crate::policies::PolicySet;
use crate::snapshot::Snapshot;

/// A pod to delete: `namespace/name`, its UID, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub key: String,
    pub uid: String,
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
        let tainted: Vec<_> = crate::plugins::helper::taints::node_taints(node)
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

/// Deletes what is due (UID-preconditioned: never a successor of the same name).
pub async fn run(client: &Client, set: &PolicySet, snapshot: &Snapshot) {
    for d in due(set, snapshot, k8s_openapi::jiff::Timestamp::now()) {
        let (ns, name) = d.key.split_once('/').unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(d.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match Api::<Pod>::namespaced(client.clone(), ns)
            .delete(name, &params)
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %d.key, reason = %d.reason, "deleted: its placement policy's toleration ran out")
            }
            Err(e) => {
                tracing::warn!(pod = %d.key, error = %e, "not deleted after its toleration ran out")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::helper::cluster_placement::tests_support::virtual_node;
    use crate::snapshot::PodInfo;
    use crate::watch::Change;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn a_pod_leaves_a_tainted_cluster_when_its_policy_says() {
        let mut set = PolicySet::default();
        set.apply_namespaced(Change::Apply(
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "fast", "namespace": "default"},
                "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "clusterTolerations": [
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]}})).unwrap()),
            false,
        ));
        let mut east = virtual_node("east", &[]);
        let mut n = (*east.node).clone();
        n.spec.get_or_insert_default().taints = Some(vec![serde_json::from_value(json!(
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-24T10:00:00Z"})).unwrap()]);
        east.set_node(Arc::new(n));
        for (name, app) in [("web-1", "web"), ("db-1", "db")] {
            let p: Pod = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"app": app}},
                "spec": {"nodeName": "mcsched-east", "containers": [{"name": "c", "image": "i"}]}})).unwrap();
            east.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        }
        let snapshot = Snapshot::from_nodes(vec![Arc::new(east)]);
        let at = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        assert!(due(&set, &snapshot, at("2026-11-24T10:00:20Z")).is_empty());
        let d = due(&set, &snapshot, at("2026-11-24T10:00:31Z"));
        assert_eq!(d.len(), 1, "only the policy's pod: {d:?}");
        assert_eq!(d[0].key, "default/web-1");
        assert_eq!(
            d[0].reason,
            "cluster east has taint node.kubernetes.io/unreachable:NoExecute for 31s; PlacementPolicy default/fast tolerates it for 30s"
        );
    }
}
