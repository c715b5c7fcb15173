//! The installed agent's version, as its Deployment runs it.

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use mcsched_shared::keys;

use crate::kube_context::KubeArgs;

/// `agent: ghcr.io/mcsched/mcsched-agent:v0.1.0 in mcsched-system (1/1 ready)`, or that
/// none is installed there. Fails, as `kubectl version` does, when the cluster cannot be
/// reached.
pub async fn agent(kube: &KubeArgs) -> anyhow::Result<()> {
    let namespace = kube.namespace_or(keys::SYSTEM_NAMESPACE).to_string();
    let client = kube.client().await?;
    let api: Api<Deployment> = Api::namespaced(client, &namespace);
    let Some(d) = api
        .get_opt(keys::AGENT_NAME)
        .await
        .with_context(|| format!("reading deployment {namespace}/{}", keys::AGENT_NAME))?
    else {
        println!("agent: not installed in namespace {namespace} (kubectl mcsched install)");
        return Ok(());
    };
    let image = d
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_else(|| "-".into());
    let want = d.spec.replicas.unwrap_or(1);
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    println!("agent: {image} in namespace {namespace} ({ready}/{want} ready)");
    Ok(())
}
