//! The bind-only client: binds every pending pod of its scheduler name to the next node
//! round-robin, no filtering, no scoring, as many bindings in flight as mcsched-agent
//! allows (`--parallel-bindings`, 64): what this API server on this machine can bind.
//! Run as `mcsched-bench bind-only` in a process of its own, so that its CPU time and
//! peak RSS are read from /proc like the schedulers'.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::Semaphore;
use tracing::warn;

pub const SCHEDULER_NAME: &str = "bind-only";
/// mcsched-agent's default `--parallel-bindings` (agent/src/args.rs).
pub const MCSCHED_PARALLEL_BINDINGS: usize = 64;

pub async fn run(kubeconfig: &Path, scheduler: &str, concurrency: usize) -> anyhow::Result<()> {
    let client = mcsched_e2e::controlplane::client_for(kubeconfig).await?;
    let mut nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    nodes.sort();
    anyhow::ensure!(!nodes.is_empty(), "no nodes to bind to");

    let api: Api<Pod> = Api::all(client.clone());
    let cfg = watcher::Config::default()
        .fields(&format!("spec.schedulerName={scheduler},spec.nodeName="));
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut dispatched: HashSet<(String, String)> = HashSet::new();
    let mut next = 0usize;
    let mut events = std::pin::pin!(watcher(api, cfg));
    while let Some(ev) = events.next().await {
        let pod = match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
            Ok(_) => continue,
            Err(e) => {
                warn!("pod watch: {e}");
                continue;
            }
        };
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
        {
            continue;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if !dispatched.insert((ns.clone(), name.clone())) {
            continue;
        }
        let node = nodes[next % nodes.len()].clone();
        next += 1;
        let permit = Arc::clone(&permits).acquire_owned().await?;
        let client = client.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = bind(&client, &ns, &name, &node).await {
                warn!(pod = %format!("{ns}/{name}"), %node, "binding failed: {e}");
            }
        });
    }
    Ok(())
}

/// POST pods/{name}/binding, as kube-scheduler's DefaultBinder does.
async fn bind(client: &Client, ns: &str, name: &str, node: &str) -> Result<(), kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
        .map(|_| ())
}
