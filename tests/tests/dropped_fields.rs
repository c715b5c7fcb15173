//! A leaf that knows a field but drops it: a v1.37 host with the alpha EmptyDirVolumeMode
//! gate on (its pods keep `emptyDir.mode`) and a v1.37 leaf without it, whose API server
//! serves the field (its OpenAPI document has it, strict field validation accepts it) and
//! whose pod strategy clears it on create. Pod sync's dry run sees it: the first such pod
//! is not copied (a LeafRefused event names the field), the next is kept off the leaf by
//! the leaf check, which names it too; plain pods still run there, the real server's
//! defaults and admission taken for no drop.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::cli::{run, text};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const FIELD: &str = "spec.volumes[0].emptyDir.mode";

fn pod(name: &str, extra: serde_json::Value) -> anyhow::Result<Pod> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "mcsched",
            "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
            "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "500m"}}}]
        }
    });
    if let (Some(spec), Some(more)) = (p["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            spec.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(p)?)
}

fn with_mode(name: &str) -> anyhow::Result<Pod> {
    pod(
        name,
        json!({"volumes": [{"name": "scratch", "emptyDir": {"mode": 448}}]}),
    )
}

async fn notes(client: &Client, pod: &str, reason: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!("regarding.name={pod}"));
    Ok(events
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect())
}

async fn leaf_pod_names(leaf: &Client) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(leaf.clone(), "default");
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

#[tokio::test]
async fn a_field_the_leafs_gate_drops_is_never_dropped_silently() -> anyhow::Result<()> {
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start_with_args(
            "dropped-host",
            ControlPlaneOptions::full(),
            &["--feature-gates=EmptyDirVolumeMode=true"]
        ),
        ControlPlane::start("dropped-leaf", ControlPlaneOptions::full()),
    )?;
    let leaf_version = leaf.client.apiserver_version().await?.git_version;
    mcsched_e2e::objects::ready_node(
        &leaf.client,
        "leaf-1",
        "8",
        "16Gi",
        json!({"kubernetes.io/hostname": "leaf-1"}),
    )
    .await?;

    // The leaf knows the field and drops it, silently: what pod sync's dry run sees.
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answer = leaf_pods.create(&dry, &with_mode("probe")?).await?;
    let mode = answer
        .spec
        .and_then(|s| s.volumes)
        .and_then(|v| v.into_iter().next())
        .and_then(|v| v.empty_dir)
        .and_then(|e| e.mode);
    assert_eq!(mode, None, "the leaf ({leaf_version}) drops emptyDir.mode");

    let leaf_kc = leaf.kubeconfig.to_string_lossy().to_string();
    let out = run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "default",
        ],
    )?;
    assert_eq!(out.status.code(), Some(0), "join: {}", text(&out));
    let mut agent = mcsched_e2e::api::start_agent(&host, "mcsched", "dropped", &[]).await?;
    let virtual_node = format!("{}east", keys::VIRTUAL_NODE_PREFIX);
    let nodes: Api<Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, &virtual_node, "True", TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let logs = |e: anyhow::Error| anyhow::anyhow!("{e}\nagent log:\n{}", agent.logs());

    // A plain pod runs there: the real server's defaults, service account volume and
    // tolerations are not taken for fields dropped.
    pods.create(&PostParams::default(), &pod("plain", json!({}))?)
        .await?;
    wait::until(TIMEOUT, "plain Running on the host", || async {
        let p = pods.get("plain").await?;
        Ok((p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
    })
    .await
    .map_err(logs)?;

    // The first pod with the mode goes to the leaf (nothing known yet), and is not
    // copied: a bare pod, it waits, its event naming the field.
    pods.create(&PostParams::default(), &with_mode("mode")?)
        .await?;
    let note = wait::until(TIMEOUT, "mode's LeafRefused event", || async {
        Ok(notes(&host.client, "mode", "LeafRefused")
            .await?
            .into_iter()
            .next())
    })
    .await
    .map_err(logs)?;
    assert!(
        note.contains(&format!(
            "leaf ({leaf_version}) drops {FIELD} of pod default/mode"
        )),
        "{note}"
    );
    assert!(
        !leaf_pod_names(&leaf.client)
            .await?
            .contains(&"mode".to_string()),
        "no copy of mode in the leaf"
    );

    // The next one is kept off the leaf by the leaf check, which names the field.
    pods.create(&PostParams::default(), &with_mode("mode-2")?)
        .await?;
    let reason = mcsched_engine::leaf::kept_fields::drops("east", &leaf_version, FIELD);
    let message = wait::until(TIMEOUT, "mode-2 unschedulable", || async {
        let p = pods.get("mode-2").await?;
        Ok(p.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message)
            .filter(|m| m.contains(" drops ")))
    })
    .await
    .map_err(logs)?;
    assert!(message.contains(&reason), "{message:?} names {reason:?}");
    let node = pods.get("mode-2").await?.spec.and_then(|s| s.node_name);
    assert_eq!(node, None);
    assert!(
        !leaf_pod_names(&leaf.client)
            .await?
            .contains(&"mode-2".to_string())
    );
    let out = run(&host.kubeconfig, &["explain", "pod", "mode-2"])?;
    assert!(
        text(&out).contains("turn the field's feature gate on in that leaf"),
        "explain: {}",
        text(&out)
    );

    // Still a good leaf for the rest.
    pods.create(&PostParams::default(), &pod("plain-2", json!({}))?)
        .await?;
    wait::until(TIMEOUT, "plain-2 Running on the host", || async {
        let p = pods.get("plain-2").await?;
        Ok((p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
    })
    .await
    .map_err(logs)?;
    agent.stop();
    Ok(())
}
