//! Building test objects in a real cluster.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// Namespace `name`, created unless it is there already.
pub async fn namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A ServiceAccount in `ns` and a token for it: a user of the cluster with exactly the
/// rights its bindings give.
pub async fn user_token(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?,
    )
    .await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answer = sas
        .create_token_request(name, &PostParams::default(), &request)
        .await?;
    Ok(answer.status.and_then(|s| s.token).unwrap_or_default())
}

/// The node's Ready condition status (`True`, `False`, `Unknown`).
pub fn ready_status(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// kube-controller-manager lifts its not-ready taint a few seconds after Ready turns
/// True; until then mcsched's pods (which tolerate only the leaf taint) cannot go there.
pub fn only_leaf_taint(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_none_or(|t| t.iter().all(|t| t.key == mcsched_shared::keys::LEAF_TAINT))
}

/// Waits for node `name`'s Ready condition to be `want`; for `True`, also for every taint
/// but the leaf taint to be gone.
pub async fn wait_ready(
    nodes: &Api<Node>,
    name: &str,
    want: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    crate::wait::until(timeout, &format!("{name} Ready={want}"), || async {
        let n = nodes.get(name).await?;
        let ready = ready_status(&n).as_deref() == Some(want);
        Ok((ready && (want != "True" || only_leaf_taint(&n))).then_some(()))
    })
    .await
}

/// Creates a Node from JSON, then writes its status through `/status` (a create does not
/// keep the status it was given). A merge patch, as controllers may touch the new node
/// in between.
/// What `api` lists; nothing when listing fails (for what only adds to an error).
pub async fn list_or_empty<K>(api: &Api<K>) -> Vec<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

pub async fn create_node(client: &Client, node: serde_json::Value) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(node)?;
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Node> = Api::all(client.clone());
    api.create(&PostParams::default(), &node).await?;
    let status = serde_json::json!({ "status": node.status });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// A Ready node with `cpu`, `memory` and 110 pods allocatable.
pub async fn ready_node(
    client: &Client,
    name: &str,
    cpu: &str,
    memory: &str,
    labels: serde_json::Value,
) -> anyhow::Result<()> {
    create_node(
        client,
        serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "status": {
                "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }),
    )
    .await
}

/// The only kubeconfig form a join Secret may hold — server, CA and an expiring token —
/// for a leaf ServiceAccount bound to cluster-admin: the harness's stand-in for `join`'s
/// least-privilege account, whose own rights `leaf_safety.rs` and `join.rs` test.
pub async fn leaf_token_kubeconfig(leaf: &crate::ControlPlane) -> anyhow::Result<String> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use mcsched_shared::keys;

    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": keys::SYSTEM_NAMESPACE}}))?;
    let exists = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
    if let Err(e) = Api::<Namespace>::all(leaf.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        && !exists(&e)
    {
        return Err(e.into());
    }
    let accounts: Api<ServiceAccount> =
        Api::namespaced(leaf.client.clone(), keys::SYSTEM_NAMESPACE);
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": keys::LEAF_ACCOUNT}}))?;
    if let Err(e) = accounts.create(&PostParams::default(), &sa).await
        && !exists(&e)
    {
        return Err(e.into());
    }
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mcsched-leaf-test-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": keys::LEAF_ACCOUNT, "namespace": keys::SYSTEM_NAMESPACE}]
    }))?;
    if let Err(e) = Api::<ClusterRoleBinding>::all(leaf.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        && !exists(&e)
    {
        return Err(e.into());
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(keys::LEAF_ACCOUNT, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .unwrap_or_default();
    let ca = serde_json::to_value(ByteString(leaf.ca_pem()?))?;
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: leaf\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: mcsched-leaf\n  user:\n    token: {token}\ncontexts:\n- name: leaf\n  context:\n    cluster: leaf\n    user: mcsched-leaf\ncurrent-context: leaf\n",
        leaf.url,
        ca.as_str().unwrap_or_default()
    );
    mcsched_shared::leaf_kubeconfig::check(&text)?;
    Ok(text)
}

/// What `kubectl mcsched join cluster --name CLUSTER` leaves in the host for the agent:
/// the join Secret (with [`leaf_token_kubeconfig`]) and the tainted virtual node,
/// labelled as join labels it plus `labels`.
pub async fn join_as_join_does(
    host: &Client,
    leaf: &crate::ControlPlane,
    cluster: &str,
    labels: serde_json::Value,
) -> anyhow::Result<()> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use mcsched_shared::keys;

    let namespaces: Api<Namespace> = Api::all(host.clone());
    let ns =
        serde_json::from_value(serde_json::json!({"metadata": {"name": keys::SYSTEM_NAMESPACE}}))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(keys::cluster_secret_name(cluster)),
            namespace: Some(keys::SYSTEM_NAMESPACE.into()),
            labels: Some(std::collections::BTreeMap::from([(
                keys::CLUSTER_LABEL.to_string(),
                cluster.to_string(),
            )])),
            ..Default::default()
        },
        data: Some(std::collections::BTreeMap::from([(
            keys::KUBECONFIG_KEY.to_string(),
            ByteString(leaf_token_kubeconfig(leaf).await?.into_bytes()),
        )])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(host.clone(), keys::SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await?;
    let name = keys::virtual_node_name(cluster);
    let mut all = serde_json::json!({
        keys::CLUSTER_LABEL: cluster,
        "kubernetes.io/hostname": name,
        "type": "virtual-kubelet",
    });
    if let (Some(all), Some(extra)) = (all.as_object_mut(), labels.as_object()) {
        all.extend(extra.clone());
    }
    create_node(
        host,
        serde_json::json!({
            "metadata": {"name": name, "labels": all},
            "spec": {"taints": [{"key": keys::LEAF_TAINT, "value": "true", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "Joining"}]}
        }),
    )
    .await
}

/// Kosmos's MySQL example in namespace default, for profile `scheduler`: two replicas with
/// required anti-affinity on the hostname and a `local-wffc` WaitForFirstConsumer claim
/// each.
pub async fn kosmos_mysql(client: &Client, scheduler: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    Api::<StatefulSet>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "mysql"},
                "spec": {"replicas": 2, "serviceName": "mysql",
                    "selector": {"matchLabels": {"app": "mysql"}},
                    "template": {"metadata": {"labels": {"app": "mysql"}}, "spec": {
                        "schedulerName": scheduler,
                        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "mysql"}}}]}},
                        "containers": [{"name": "mysql", "image": "mysql:8",
                            "resources": {"requests": {"cpu": "1"}},
                            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}]}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                        "storageClassName": "local-wffc", "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "5Gi"}}}}]}
            }))?,
        )
        .await?;
    Ok(())
}

/// An Indexed Job of `count` pods of 1 CPU, labelled `gang=name`, allowed on virtual
/// nodes: with WorkloadWithJob, kube-controller-manager gives it a Workload and a PodGroup
/// of minCount `count` and its pods that group.
pub async fn gang_job(client: &Client, name: &str, count: i32) -> anyhow::Result<()> {
    gang_job_with(client, name, count, serde_json::json!({})).await
}

/// [`gang_job`] with `spec_extra`'s keys added to the Job's spec.
pub async fn gang_job_with(
    client: &Client,
    name: &str,
    count: i32,
    spec_extra: serde_json::Value,
) -> anyhow::Result<()> {
    let mut job = serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parallelism": count, "completions": count, "completionMode": "Indexed",
            // v1.37's Job asks for a gang here (WorkloadWithJob); without it its PodGroup
            // has the basic policy.
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": count}}},
            "template": {
                "metadata": {"labels": {"gang": name}},
                "spec": {
                    "schedulerName": "mcsched",
                    "restartPolicy": "Never",
                    "tolerations": [{"key": mcsched_shared::keys::LEAF_TAINT, "operator": "Exists"}],
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "1"}}}]
                }
            }
        }
    });
    if let (Some(spec), Some(extra)) = (job["spec"].as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(job)?;
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &job)
        .await?;
    Ok(())
}
