//! What `join` creates in a leaf so the agent can work there, and nothing more: a
//! ServiceAccount with a least-privilege ClusterRole, and a token for it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use mcsched_shared::keys;

pub const TOKEN_SECRET: &str = "mcsched-leaf-token";

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..Default::default()
    }
}

pub fn managed_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        keys::MANAGED_BY_LABEL.to_string(),
        keys::MANAGED_BY_VALUE.to_string(),
    )])
}

/// Read nodes, pods, events, PersistentVolumes and StorageClasses; manage the pods, ConfigMaps, Secrets and PVCs that pod
/// sync creates, and create the namespaces they go in. No wildcard, no node writes.
pub fn cluster_role() -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(keys::LEAF_ACCOUNT.into()),
            labels: Some(managed_labels()),
            ..Default::default()
        },
        rules: Some(vec![
            rule(
                &[""],
                &["nodes", "persistentvolumes"],
                &["get", "list", "watch"],
            ),
            // The leaf check judges a pod's claims on the leaf's own volumes and classes.
            rule(
                &["storage.k8s.io"],
                &["storageclasses"],
                &["get", "list", "watch"],
            ),
            rule(
                &[""],
                &["pods"],
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ],
            ),
            rule(&[""], &["pods/status"], &["get"]),
            rule(
                &[""],
                &["configmaps", "secrets", "persistentvolumeclaims"],
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ],
            ),
            rule(
                &[""],
                &["namespaces"],
                &["get", "list", "watch", "create", "delete"],
            ),
            rule(
                &["", "events.k8s.io"],
                &["events"],
                &["get", "list", "watch"],
            ),
        ]),
        ..Default::default()
    }
}

pub fn cluster_role_binding() -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(keys::LEAF_ACCOUNT.into()),
            labels: Some(managed_labels()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: keys::LEAF_ACCOUNT.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: keys::LEAF_ACCOUNT.into(),
            namespace: Some(keys::SYSTEM_NAMESPACE.into()),
            ..Default::default()
        }]),
    }
}

pub fn service_account() -> ServiceAccount {
    ServiceAccount {
        metadata: ObjectMeta {
            name: Some(keys::LEAF_ACCOUNT.into()),
            namespace: Some(keys::SYSTEM_NAMESPACE.into()),
            labels: Some(managed_labels()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A long-lived token Secret, filled by the leaf's token controller.
pub fn token_secret() -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(TOKEN_SECRET.into()),
            namespace: Some(keys::SYSTEM_NAMESPACE.into()),
            labels: Some(managed_labels()),
            annotations: Some(BTreeMap::from([(
                "kubernetes.io/service-account.name".to_string(),
                keys::LEAF_ACCOUNT.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/service-account-token".into()),
        ..Default::default()
    }
}

/// What the caller must be allowed in the leaf for join to succeed.
const NEEDED: &[(&str, &str, &str, bool)] = &[
    ("create", "", "namespaces", false),
    ("create", "", "serviceaccounts", true),
    ("create", "", "secrets", true),
    ("get", "", "secrets", true),
    ("create", "rbac.authorization.k8s.io", "clusterroles", false),
    (
        "create",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        false,
    ),
    ("get", "", "namespaces", false),
];

/// The permissions join needs that the caller lacks in the leaf, as `verb resource`.
pub async fn missing_permissions(leaf: &Client) -> Result<Vec<String>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(leaf.clone());
    let mut missing = Vec::new();
    for (verb, group, resource, namespaced) in NEEDED {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_string()),
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    namespace: namespaced.then(|| keys::SYSTEM_NAMESPACE.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            let scope = if *namespaced {
                format!(" in namespace {}", keys::SYSTEM_NAMESPACE)
            } else {
                String::new()
            };
            let group = if group.is_empty() {
                String::new()
            } else {
                format!(".{group}")
            };
            missing.push(format!("{verb} {resource}{group}{scope}"));
        }
    }
    Ok(missing)
}

/// Waits for the token controller to fill the token Secret: (token, ca.crt).
pub async fn wait_for_token(
    leaf: &Client,
    timeout: Duration,
) -> Result<Option<(String, Vec<u8>)>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(leaf.clone(), keys::SYSTEM_NAMESPACE);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let s = api.get(TOKEN_SECRET).await?;
        let data = s.data.unwrap_or_default();
        if let (Some(t), Some(ca)) = (data.get("token"), data.get("ca.crt"))
            && !t.0.is_empty()
        {
            return Ok(Some((
                String::from_utf8_lossy(&t.0).into_owned(),
                ca.0.clone(),
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A kubeconfig that reaches `server` as the leaf ServiceAccount: never the caller's
/// credentials.
pub fn kubeconfig(cluster: &str, server: &str, ca: &[u8], token: &str) -> serde_json::Value {
    // ByteString serialises as standard base64, which `*-data` fields want.
    let ca_b64 = serde_json::to_value(k8s_openapi::ByteString(ca.to_vec()))
        .unwrap_or(serde_json::Value::Null);
    let name = format!("mcsched-{cluster}");
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca_b64}}],
        "users": [{"name": keys::LEAF_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": keys::LEAF_ACCOUNT}}],
        "current-context": name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaf_role_has_no_wildcard_and_no_node_writes() {
        for r in cluster_role().rules.unwrap_or_default() {
            assert!(!r.verbs.iter().any(|v| v == "*"));
            assert!(!r.resources.iter().flatten().any(|x| x == "*"));
            if r.resources.iter().flatten().any(|x| x == "nodes") {
                assert_eq!(r.verbs, ["get", "list", "watch"]);
            }
        }
    }

    #[test]
    fn kubeconfig_carries_the_token_and_ca() {
        let k = kubeconfig("east", "https://10.0.0.1:6443", b"hello", "tok");
        assert_eq!(
            k["clusters"][0]["cluster"]["certificate-authority-data"],
            "aGVsbG8="
        );
        assert_eq!(k["users"][0]["user"]["token"], "tok");
        assert_eq!(k["current-context"], "mcsched-east");
    }
}
