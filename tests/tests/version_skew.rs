//! The version window, on real API servers of each minor: hosts on v1.35–v1.37, leaves on
//! v1.34–v1.37 (control planes built from each release's Go modules, `make
//! controlplane-v1.3X`). For a host and a leaf joined by `kubectl mcsched join`, the agent
//! runs a plain pod in the leaf with its status back; a pod carrying a field the leaf does
//! not serve never goes there, and says which field; a gang is scheduled all or nothing
//! where the host serves PodGroups (v1beta1 on v1.37, v1alpha2 on v1.36), and where it
//! serves none (v1.35) the CLI says so.
//!
//! `make test` runs the newest host with the oldest leaf; `make matrix` runs every pair
//! (`MCSCHED_MATRIX=1`) and prints the table docs/kubernetes-versions.md keeps.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::cli::{run, text};
use mcsched_e2e::controlplane::{
    DEFAULT_MINOR, HOST_MINORS, LEAF_MINORS, OLDEST_LEAF_MINOR, workload_feature_gates,
};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use mcsched_shared::pod_group_versions::PodGroupVersion;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// What a pair gave: one row of the matrix.
#[derive(Debug, Default)]
struct Row {
    host: String,
    leaf: String,
    plain_pod_runs_in_leaf: bool,
    /// `None`: the host keeps no field the leaf lacks or drops (no such pod was tried).
    unserved_field_refused: Option<bool>,
    /// The PodGroup version the host serves and whether its gang was placed whole.
    gang: Option<(PodGroupVersion, bool)>,
}

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

/// The host's feature gates: workload-aware scheduling where the minor has it, and on
/// v1.37 the alpha EmptyDirVolumeMode, so that its pods may carry `emptyDir.mode`, a field
/// no older minor serves.
fn host_gates(minor: &str) -> Option<String> {
    let mut gates: Vec<&str> = workload_feature_gates(minor).into_iter().collect();
    if minor == "1.37" {
        gates.push("EmptyDirVolumeMode=true");
    }
    (!gates.is_empty()).then(|| format!("--feature-gates={}", gates.join(",")))
}

async fn node_of(pods: &Api<Pod>, name: &str) -> anyhow::Result<Option<String>> {
    Ok(pods
        .get_opt(name)
        .await?
        .and_then(|p| p.spec)
        .and_then(|s| s.node_name))
}

/// The pod's PodScheduled=False message, once it has one that is not a leaf check still
/// being asked.
async fn unschedulable_message(pods: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    wait::until(TIMEOUT, &format!("{name} unschedulable"), || async {
        let p = pods.get(name).await?;
        Ok(p.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message)
            .filter(|m| !m.contains("checking") && !m.contains("asking leaf cluster")))
    })
    .await
}

/// One host and one leaf of the given minors, joined by the CLI, the agent on the host;
/// every check of the pair, in order.
async fn pair(host_minor: &'static str, leaf_minor: &'static str) -> anyhow::Result<Row> {
    let tag = format!(
        "{}-{}",
        host_minor.replace('.', ""),
        leaf_minor.replace('.', "")
    );
    let host_args: Vec<String> = host_gates(host_minor).into_iter().collect();
    let host_args: Vec<&str> = host_args.iter().map(String::as_str).collect();
    let (host_name, leaf_name) = (format!("skew-host-{tag}"), format!("skew-leaf-{tag}"));
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start_minor(
            &host_name,
            host_minor,
            ControlPlaneOptions::full(),
            &host_args
        ),
        ControlPlane::start_minor(&leaf_name, leaf_minor, ControlPlaneOptions::full(), &[]),
    )?;
    let leaf_version = leaf.client.apiserver_version().await?.git_version;
    assert!(
        leaf_version.starts_with(&format!("v{leaf_minor}.")),
        "the leaf runs {leaf_version}, not v{leaf_minor}"
    );
    mcsched_e2e::objects::ready_node(
        &leaf.client,
        "leaf-1",
        "8",
        "16Gi",
        json!({"kubernetes.io/hostname": "leaf-1"}),
    )
    .await?;
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
    // Serving its API through the host's aggregator, so that `explain` works.
    let agent = mcsched_e2e::api::start_agent(&host, "mcsched", "skew", &[]).await?;
    let virtual_node = format!("{}east", keys::VIRTUAL_NODE_PREFIX);
    let nodes: Api<Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, &virtual_node, "True", TIMEOUT).await?;

    let mut row = Row {
        host: host.client.apiserver_version().await?.git_version,
        leaf: leaf_version.clone(),
        ..Row::default()
    };
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");

    // A plain pod runs in the leaf, its phase back on the host.
    pods.create(&PostParams::default(), &pod("plain", json!({}))?)
        .await?;
    wait::until(TIMEOUT, "plain Running on the host", || async {
        let p = pods.get("plain").await?;
        let running = p.status.and_then(|s| s.phase).as_deref() == Some("Running");
        Ok(running.then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\nagent log:\n{}", agent.logs()))?;
    assert_eq!(
        node_of(&pods, "plain").await?.as_deref(),
        Some(&*virtual_node)
    );
    row.plain_pod_runs_in_leaf = true;

    // `emptyDir.mode` (v1.37, alpha, on in this host): a leaf older than v1.37 does not
    // serve it, a v1.37 leaf with the gate off drops it; either way the pod must never run
    // there without it.
    if host_minor == "1.37" {
        pods.create(
            &PostParams::default(),
            &pod(
                "mode",
                json!({"volumes": [{"name": "scratch", "emptyDir": {"mode": 448}}]}),
            )?,
        )
        .await?;
        let kept = pods
            .get("mode")
            .await?
            .spec
            .and_then(|s| s.volumes)
            .and_then(|v| v.into_iter().next())
            .and_then(|v| v.empty_dir)
            .and_then(|e| e.mode);
        assert_eq!(kept, Some(448), "the host keeps emptyDir.mode");
        if leaf_minor != "1.37" {
            let message = unschedulable_message(&pods, "mode").await?;
            let reason = mcsched_engine::leaf::served_fields::not_served(
                "east",
                &leaf_version,
                "spec.volumes[0].emptyDir.mode",
            );
            assert!(message.contains(&reason), "{message:?} names {reason:?}");
            assert_eq!(node_of(&pods, "mode").await?, None);
            assert!(
                leaf_pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .all(|p| !p.metadata.name.as_deref().unwrap_or("").contains("mode")),
                "no copy of mode in the leaf"
            );
            let out = run(&host.kubeconfig, &["explain", "pod", "mode"])?;
            assert!(text(&out).contains(&reason), "explain: {}", text(&out));
            row.unserved_field_refused = Some(true);
        } else {
            // A v1.37 leaf serves the field but, its gate off, drops it: pod sync's dry
            // run sees that, the copy is not made, and the event names the field.
            let note = wait::until(TIMEOUT, "mode's LeafRefused event", || async {
                let events: Api<Event> = Api::namespaced(host.client.clone(), "default");
                let lp = ListParams::default().fields("regarding.name=mode");
                Ok(events
                    .list(&lp)
                    .await?
                    .items
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some("LeafRefused"))
                    .find_map(|e| e.note))
            })
            .await?;
            assert!(
                note.contains("drops spec.volumes[0].emptyDir.mode"),
                "{note}"
            );
            assert!(
                leaf_pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .all(|p| !p.metadata.name.as_deref().unwrap_or("").contains("mode")),
                "no copy of mode in the leaf"
            );
            row.unserved_field_refused = Some(true);
        }
    }

    // A gang of 2, all or nothing, where the host serves PodGroups.
    match host_minor {
        "1.37" | "1.36" => {
            let version = if host_minor == "1.37" {
                PodGroupVersion::V1beta1
            } else {
                PodGroupVersion::V1alpha2
            };
            let group = json!({
                "apiVersion": version.api_version(), "kind": "PodGroup",
                "metadata": {"name": "pair", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
            });
            create_dynamic(&host.client, version, &group).await?;
            for i in 0..2 {
                pods.create(
                    &PostParams::default(),
                    &pod(
                        &format!("member-{i}"),
                        json!({"schedulingGroup": {"podGroupName": "pair"}}),
                    )?,
                )
                .await?;
            }
            wait::until(TIMEOUT, "both members bound", || async {
                let a = node_of(&pods, "member-0").await?;
                let b = node_of(&pods, "member-1").await?;
                Ok((a.is_some() && b.is_some()).then_some(()))
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}\nagent log:\n{}", agent.logs()))?;
            let condition = wait::until(TIMEOUT, "the group's condition", || async {
                let g = get_dynamic(&host.client, version, "pair").await?;
                Ok(g["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| c["type"] == version.scheduled_condition())
                            .cloned()
                    })
                    .filter(|c| c["status"] == "True"))
            })
            .await?;
            assert_eq!(condition["reason"], "Scheduled", "{condition}");
            row.gang = Some((version, true));
        }
        _ => {
            // No PodGroup API (v1.35): the CLI says why there are no gangs.
            let out = run(&host.kubeconfig, &["explain", "podgroup", "pair"])?;
            assert_eq!(out.status.code(), Some(1), "{}", text(&out));
            assert!(
                text(&out).contains("the API server serves none of scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha2"),
                "{}",
                text(&out)
            );
        }
    }
    Ok(row)
}

fn api_resource(version: PodGroupVersion) -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "scheduling.k8s.io".into(),
        version: version.version().into(),
        api_version: version.api_version(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    }
}

async fn create_dynamic(
    client: &Client,
    version: PodGroupVersion,
    object: &serde_json::Value,
) -> anyhow::Result<()> {
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &api_resource(version));
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object.clone())?,
    )
    .await?;
    Ok(())
}

async fn get_dynamic(
    client: &Client,
    version: PodGroupVersion,
    name: &str,
) -> anyhow::Result<serde_json::Value> {
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &api_resource(version));
    Ok(serde_json::to_value(api.get(name).await?)?)
}

/// The newest host with the oldest leaf: what `make test` runs of the window.
#[tokio::test(flavor = "multi_thread")]
async fn the_newest_host_runs_pods_in_the_oldest_leaf_and_never_with_a_field_dropped()
-> anyhow::Result<()> {
    let row = pair(DEFAULT_MINOR, OLDEST_LEAF_MINOR).await?;
    assert_eq!(row.unserved_field_refused, Some(true));
    assert!(matches!(row.gang, Some((PodGroupVersion::V1beta1, true))));
    Ok(())
}

/// Every host × leaf pair of the window (`make matrix`); prints the table.
#[tokio::test(flavor = "multi_thread")]
async fn every_pair_of_the_window() -> anyhow::Result<()> {
    if std::env::var_os("MCSCHED_MATRIX").is_none() {
        eprintln!("every_pair_of_the_window: run by `make matrix` (MCSCHED_MATRIX=1)");
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for host in HOST_MINORS {
        for leaf in LEAF_MINORS {
            // A pair's failed assertion ends that pair only: the table shows the others.
            match tokio::spawn(pair(host, leaf)).await {
                Ok(Ok(r)) => rows.push(r),
                Ok(Err(e)) => failed.push(format!("host v{host}, leaf v{leaf}: {e:#}")),
                Err(e) => {
                    let panic = e.try_into_panic().ok();
                    let why = panic
                        .as_ref()
                        .and_then(|p| {
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        })
                        .unwrap_or_else(|| "cancelled".into());
                    failed.push(format!("host v{host}, leaf v{leaf}: {why}"));
                }
            }
        }
    }
    println!("| host | leaf | plain pod in the leaf | copy with a field the leaf lacks | gangs |");
    println!("|---|---|---|---|---|");
    for r in &rows {
        let field = match r.unserved_field_refused {
            Some(true) if r.leaf.starts_with("v1.37") => {
                "not copied (the leaf drops it), field named"
            }
            Some(true) => "refused (not served), field named",
            Some(false) => "NOT refused",
            None => "—",
        };
        let gang = match r.gang {
            Some((v, true)) => format!("all or nothing ({})", v.api_version()),
            Some((v, false)) => format!("FAILED ({})", v.api_version()),
            None => "none served: said so".to_string(),
        };
        println!(
            "| {} | {} | {} | {field} | {gang} |",
            r.host,
            r.leaf,
            if r.plain_pod_runs_in_leaf {
                "runs, status back"
            } else {
                "NO"
            }
        );
    }
    assert!(
        failed.is_empty(),
        "pairs that failed:\n{}",
        failed.join("\n")
    );
    Ok(())
}

/// Gates the agent refuses as kube-scheduler v1.37 does, and one mcsched leaves out.
#[test]
fn the_agent_refuses_gates_v1_37_does_not_know_and_composite_pod_groups() -> anyhow::Result<()> {
    let agent = mcsched_e2e::agent::binary();
    let run = |gates: &str| {
        std::process::Command::new(&agent)
            .arg(format!("--feature-gates={gates}"))
            .arg("--check")
            .stdin(std::process::Stdio::null())
            .output()
    };
    let out = run("GangScheduling=true")?;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unrecognized feature gate: GangScheduling"),
        "{out:?}"
    );
    let out =
        run("GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true")?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("CompositePodGroup is not supported by mcsched"),
        "{out:?}"
    );
    let out = run("GenericWorkload=true,TopologyAwareWorkloadScheduling=true")?;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    Ok(())
}
