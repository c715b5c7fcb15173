//! Placement policies in end-to-end tests: the policy CRDs as `install` renders them,
//! policies and ReplicaSets of `pause` pods, and where an owner's pods were bound, per
//! cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_shared::keys;
use mcsched_shared::policy::PlacementPolicy;
use serde_json::json;

use crate::{Agent, wait};

/// The CRDs as `install` renders them, created and Established.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let objects = mcsched_shared::manifests::render(&Default::default())?;
    for o in objects {
        if let mcsched_shared::manifests::Object::CustomResourceDefinition(crd) = o {
            crds.create(&PostParams::default(), &crd).await?;
            let name = crd.metadata.name.clone().unwrap_or_default();
            wait::until(
                Duration::from_secs(30),
                &format!("{name} Established"),
                || async {
                    let c = crds.get(&name).await?;
                    let est = c
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True");
                    Ok(est.then_some(()))
                },
            )
            .await?;
        }
    }
    Ok(())
}

/// A PlacementPolicy `name` in namespace default.
pub async fn policy(client: &Client, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
    let p: PlacementPolicy = serde_json::from_value(json!({
        "apiVersion": "policy.mcsched.io/v1alpha1", "kind": "PlacementPolicy",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec}))?;
    Api::<PlacementPolicy>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &p)
        .await?;
    Ok(())
}

/// A ReplicaSet `name` in namespace default: `replicas` pods labelled `app=name` for
/// profile `scheduler`, each requesting `cpu`, with `extra` merged into the pod spec.
pub async fn replica_set_with(
    client: &Client,
    name: &str,
    replicas: usize,
    cpu: &str,
    scheduler: &str,
    extra: serde_json::Value,
) -> anyhow::Result<()> {
    let mut spec = json!({
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    }))?;
    Api::<ReplicaSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &rs)
        .await?;
    Ok(())
}

/// A ReplicaSet of `replicas` pods of app `name` for profile mcsched.
pub async fn replica_set(
    client: &Client,
    name: &str,
    replicas: usize,
    cpu: &str,
) -> anyhow::Result<()> {
    replica_set_with(client, name, replicas, cpu, "mcsched", json!({})).await
}

/// The cluster a node belongs to: a virtual node's leaf, else `host`.
pub fn cluster_of(node: &str) -> &str {
    node.strip_prefix(keys::VIRTUAL_NODE_PREFIX)
        .unwrap_or(keys::HOST_CLUSTER_NAME)
}

/// Once all `replicas` of `app` are bound (and not terminating): the nodes they are on.
pub async fn bound_nodes(
    pods: &Api<Pod>,
    app: &str,
    replicas: usize,
    timeout: Duration,
    agent: &Agent,
) -> anyhow::Result<Vec<String>> {
    wait::until(
        timeout,
        &format!("{replicas} {app} replicas bound"),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await?;
            let nodes: Vec<String> = list
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.spec.and_then(|s| s.node_name))
                .collect();
            Ok((nodes.len() == replicas).then_some(nodes))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))
}

/// Once all `replicas` of `app` are bound: how many per cluster.
pub async fn placed(
    pods: &Api<Pod>,
    app: &str,
    replicas: usize,
    timeout: Duration,
    agent: &Agent,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let mut per = BTreeMap::new();
    for n in bound_nodes(pods, app, replicas, timeout, agent).await? {
        *per.entry(cluster_of(&n).to_string()).or_default() += 1;
    }
    Ok(per)
}

/// The explanation of the first pod of `app`, from the agent at `agent_url`.
pub async fn explain_first(
    cp: &crate::ControlPlane,
    agent_url: &str,
    pods: &Api<Pod>,
    app: &str,
) -> anyhow::Result<mcsched_shared::explain::Explanation> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items;
    let name = list
        .first()
        .and_then(|p| p.metadata.name.clone())
        .ok_or_else(|| anyhow::anyhow!("no pod of {app}"))?;
    let http = crate::api::admin_https(cp)?;
    crate::api::explain(&http, agent_url, "default", &name).await
}

/// Host nodes `prefix-NNNN` for `range`, Ready, each with `cpu`, 64Gi and 110 pods and its
/// hostname label: nodes as API objects at the sizes users run, created 16 at a time.
pub async fn many_nodes(
    client: &Client,
    prefix: &str,
    range: std::ops::Range<usize>,
    cpu: &str,
) -> anyhow::Result<()> {
    futures::stream::iter(range.map(|i| format!("{prefix}-{i:04}")))
        .map(|name| async move {
            crate::objects::ready_node(
                client,
                &name,
                cpu,
                "64Gi",
                json!({"kubernetes.io/hostname": name}),
            )
            .await
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The policy CRDs on `host`, then the agent (profile `mcsched`), returned once the virtual
/// nodes `virtual_nodes` are Ready.
pub async fn agent_with_policies(
    host: &crate::ControlPlane,
    virtual_nodes: &[&str],
    timeout: Duration,
) -> anyhow::Result<Agent> {
    install_crds(&host.client).await?;
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.client.clone());
    for vn in virtual_nodes {
        crate::objects::wait_ready(&nodes, vn, "True", timeout)
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    Ok(agent)
}
