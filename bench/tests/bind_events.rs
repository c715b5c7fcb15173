//! The bind-events baseline against a real API server: it binds its pods round-robin and
//! writes each one's Scheduled event as kube-scheduler does; plain bind-only writes none.

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use mcsched_e2e::process::Guarded;
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, objects, wait};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn pod(client: &kube::Client, name: &str, scheduler: &str) -> anyhow::Result<()> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"schedulerName": scheduler,
                         "containers": [{"name": "c", "image": "pause"}]}
            }))?,
        )
        .await?;
    Ok(())
}

fn bind_only(cp: &ControlPlane, scheduler: &str, events: bool) -> anyhow::Result<Guarded> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcsched-bench"));
    cmd.arg("bind-only")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .arg("--scheduler-name")
        .arg(scheduler)
        .stdout(Stdio::null());
    if events {
        cmd.arg("--events");
    }
    Ok(Guarded::spawn(
        cmd,
        scheduler,
        &cp.dir().join(format!("{scheduler}.log")),
    )?)
}

async fn scheduled_events(client: &kube::Client, pod: &str) -> anyhow::Result<Vec<Event>> {
    Ok(Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default().fields(&format!("regarding.name={pod}")))
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn bind_events_binds_and_writes_scheduled_events_bind_only_writes_none() -> anyhow::Result<()>
{
    let cp = ControlPlane::start("bench-events", ControlPlaneOptions::default()).await?;
    for n in ["n1", "n2"] {
        objects::ready_node(&cp.client, n, "4", "8Gi", json!({})).await?;
    }
    let _with = bind_only(&cp, "bind-events", true)?;
    let _without = bind_only(&cp, "bind-only", false)?;
    for p in ["e1", "e2"] {
        pod(&cp.client, p, "bind-events").await?;
    }
    pod(&cp.client, "b1", "bind-only").await?;

    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    let mut nodes = Vec::new();
    for p in ["e1", "e2", "b1"] {
        let node = wait::until(TIMEOUT, &format!("{p} bound"), || async {
            Ok(pods.get(p).await?.spec.and_then(|s| s.node_name))
        })
        .await?;
        nodes.push(node);
    }
    // Round-robin over the sorted nodes.
    assert_eq!(nodes[..2], ["n1".to_string(), "n2".to_string()]);

    for (p, node) in [("e1", "n1"), ("e2", "n2")] {
        let events = wait::until(TIMEOUT, &format!("{p}'s Scheduled event"), || async {
            let e = scheduled_events(&cp.client, p).await?;
            Ok((!e.is_empty()).then_some(e))
        })
        .await?;
        assert_eq!(events.len(), 1, "{events:?}");
        let e = &events[0];
        assert_eq!(
            e.note.as_deref(),
            Some(format!("Successfully assigned default/{p} to {node}").as_str())
        );
        assert_eq!(e.action.as_deref(), Some("Binding"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.reporting_controller.as_deref(), Some("bind-events"));
        let regarding = e.regarding.clone().unwrap_or_default();
        assert_eq!(regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(
            regarding.uid,
            pods.get(p).await?.metadata.uid,
            "the event regards the pod it bound"
        );
    }
    // Plain bind-only: bound, and still no event a while later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(scheduled_events(&cp.client, "b1").await?.is_empty());
    Ok(())
}
