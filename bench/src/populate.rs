//! Creating nodes, namespaces and pods fast: many requests in flight from one client
//! without a client-side rate limit, as scheduler_perf's lifted clients do.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::Value;

/// Requests in flight while populating a cluster.
pub const CONCURRENCY: usize = 64;
const ATTEMPTS: u32 = 5;

/// Retries what a busy API server may refuse for a moment (429, 5xx, a dropped
/// connection); AlreadyExists counts as done.
async fn with_retries<F, Fut>(what: &str, mut op: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match op().await {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(kube::Error::Api(e)) if e.code < 429 || attempt >= ATTEMPTS => {
                anyhow::bail!("{what}: {e}")
            }
            Err(e) if attempt >= ATTEMPTS => anyhow::bail!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await,
        }
    }
}

/// Creates the nodes, then writes their status (a create drops it), all concurrently.
pub async fn nodes(client: &Client, nodes: Vec<Value>) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    stream::iter(nodes)
        .map(|n| {
            let api = api.clone();
            async move {
                let node: Node = serde_json::from_value(n)?;
                let name = node.metadata.name.clone().unwrap_or_default();
                let status = serde_json::json!({ "status": node.status });
                with_retries(&format!("create node {name}"), || async {
                    api.create(&PostParams::default(), &node).await.map(|_| ())
                })
                .await?;
                with_retries(&format!("status of node {name}"), || async {
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await
                        .map(|_| ())
                })
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await
}

pub async fn namespaces(client: &Client, names: &[&str]) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    for name in names {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        with_retries(&format!("create namespace {name}"), || async {
            api.create(&PostParams::default(), &ns).await.map(|_| ())
        })
        .await?;
    }
    Ok(())
}

/// Creates the pods concurrently; `before_create` is called with each pod's name right
/// before its request is sent (the observer's creation time).
pub async fn pods<F>(client: &Client, pods: Vec<Value>, before_create: F) -> anyhow::Result<()>
where
    F: Fn(&str) + Sync,
{
    let before = &before_create;
    stream::iter(pods)
        .map(|p| async move {
            let pod: Pod = serde_json::from_value(p)?;
            let name = pod.metadata.name.clone().unwrap_or_default();
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            before(&name);
            with_retries(&format!("create pod {ns}/{name}"), || async {
                api.create(&PostParams::default(), &pod).await.map(|_| ())
            })
            .await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await
}
