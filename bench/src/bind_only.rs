//! The bind-only client: binds every pending pod of its scheduler name to the next node
//! round-robin, no filtering, no scoring, as many bindings in flight as mcsched-agent
//! allows (`--parallel-bindings`, 64): what this API server on this machine can bind.
//! Run as `mcsched-bench bind-only` in a process of its own, so that its CPU time and
//! peak RSS are read from /proc like the schedulers'. With `--events` (the bind-events
//! baseline) it also writes each bound pod's Scheduled event as kube-scheduler and
//! mcsched-agent do: the API server's pace for a scheduler that writes those events.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta};
use kube::runtime::watcher;
use kube::{Api, Client};
use mcsched_wire::ContentType;
use tokio::sync::Semaphore;
use tracing::warn;

pub const SCHEDULER_NAME: &str = "bind-only";
/// mcsched-agent's default `--parallel-bindings` (agent/src/args.rs).
pub const MCSCHED_PARALLEL_BINDINGS: usize = 64;
/// Events written at once, as mcsched-agent's recorder allows (agent/src/events.rs).
const EVENTS_IN_FLIGHT: usize = 32;

pub async fn run(
    kubeconfig: &Path,
    scheduler: &str,
    concurrency: usize,
    write_events: bool,
    ct: ContentType,
) -> anyhow::Result<()> {
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
    let event_permits = Arc::new(Semaphore::new(EVENTS_IN_FLIGHT));
    let mut dispatched: HashSet<(String, String)> = HashSet::new();
    let mut next = 0usize;
    let mut events = match ct {
        ContentType::Protobuf => {
            let url = api.resource_url().to_string();
            mcsched_wire::read::watcher::<Pod>(client.clone(), url, cfg)?.boxed()
        }
        ContentType::Json => watcher(api, cfg).boxed(),
    };
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
        let event_permits = write_events.then(|| event_permits.clone());
        let scheduler = scheduler.to_string();
        tokio::spawn(async move {
            let bound = mcsched_wire::write::bind(&client, ct, &ns, &name, "", &node).await;
            drop(permit);
            if let Err(e) = bound {
                warn!(pod = %format!("{ns}/{name}"), %node, "binding failed: {e}");
                return;
            }
            let Some(event_permits) = event_permits else {
                return;
            };
            let Ok(_permit) = event_permits.acquire_owned().await else {
                return;
            };
            if let Err(e) = scheduled_event(&client, ct, &scheduler, &pod, &node).await {
                warn!(pod = %format!("{ns}/{name}"), "event failed: {e}");
            }
        });
    }
    Ok(())
}

/// The Scheduled event kube-scheduler (and mcsched-agent) writes for a bound pod.
async fn scheduled_event(
    client: &Client,
    ct: ContentType,
    scheduler: &str,
    pod: &Pod,
    node: &str,
) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Normal".into()),
        reason: Some("Scheduled".into()),
        action: Some("Binding".into()),
        note: Some(format!("Successfully assigned {ns}/{name} to {node}")),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            ..Default::default()
        }),
        reporting_controller: Some(scheduler.to_string()),
        reporting_instance: Some(format!("{scheduler}-bench")),
        ..Default::default()
    };
    mcsched_wire::write::create_event(client, ct, &event).await
}
