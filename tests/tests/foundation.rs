//! The first vertical slice against real control planes: kube-apiserver with RBAC,
//! kube-controller-manager, kube-scheduler and simulated kubelets, and mcsched-agent.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

async fn create_node(client: &Client, name: &str, cpu: &str) -> anyhow::Result<()> {
    mcsched_e2e::objects::create_node(
        client,
        json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
            }
        }),
    )
    .await
}

fn pod(name: &str, scheduler: Option<&str>, cpu: &str) -> anyhow::Result<Pod> {
    let mut spec = json!({
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]
    });
    if let Some(s) = scheduler {
        spec["schedulerName"] = json!(s);
    }
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": spec}),
    )?)
}

async fn node_of(pods: &Api<Pod>, name: &str) -> anyhow::Result<Option<String>> {
    let p = pods.get(name).await?;
    Ok(p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()))
}

async fn events_for(client: &Client, ns: &str, pod: &str) -> anyhow::Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!("regarding.name={pod}"));
    Ok(events.list(&lp).await?.items)
}

#[tokio::test]
async fn control_plane_is_a_real_kube_apiserver_with_rbac() -> anyhow::Result<()> {
    let cp = ControlPlane::start("plain", ControlPlaneOptions::default()).await?;
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(["version", "-o", "json"])
        .output()
        .context("kubectl must be on PATH")?;
    assert!(
        out.status.success(),
        "kubectl version failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let server = version["serverVersion"]["gitVersion"]
        .as_str()
        .unwrap_or_default();
    assert!(server.starts_with("v1.3"), "server version {server:?}");

    // The RBAC authorizer is on: an unbound ServiceAccount may do nothing.
    let can_i = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args([
            "auth",
            "can-i",
            "list",
            "secrets",
            "--as",
            "system:serviceaccount:default:nobody",
        ])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&can_i.stdout).trim(), "no");
    assert!(!can_i.status.success());

    // Hand-made nodes stay usable: no admission plugin taints them.
    create_node(&cp.client, "node-1", "4").await?;
    let node = Api::<Node>::all(cp.client.clone()).get("node-1").await?;
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.is_empty(), "new node was tainted: {taints:?}");
    Ok(())
}

#[tokio::test]
async fn control_planes_start_in_parallel_and_stop_on_drop() -> anyhow::Result<()> {
    let cps = ControlPlane::start_many(&["host", "leaf1", "leaf2"], ControlPlaneOptions::default())
        .await?;
    assert_eq!(cps.len(), 3);
    let mut urls: Vec<&str> = cps.iter().map(|c| c.url.as_str()).collect();
    urls.sort();
    urls.dedup();
    assert_eq!(urls.len(), 3, "each cluster has its own API server");
    for cp in &cps {
        create_namespace(&cp.client, &format!("only-in-{}", cp.name)).await?;
    }
    // Separate etcds: a namespace made in one cluster is absent from the others.
    let leaf1_ns = Api::<Namespace>::all(cps[1].client.clone());
    assert!(leaf1_ns.get_opt("only-in-host").await?.is_none());
    assert!(leaf1_ns.get_opt("only-in-leaf1").await?.is_some());

    let pids: Vec<u32> = cps.iter().filter_map(|c| c.pid()).collect();
    assert_eq!(pids.len(), 3);
    drop(cps);
    for pid in pids {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "control plane {pid} still running after drop");
    }
    Ok(())
}

#[tokio::test]
async fn full_cluster_runs_deployments_on_simulated_kubelets() -> anyhow::Result<()> {
    let cp = ControlPlane::start("full", ControlPlaneOptions::full()).await?;
    create_node(&cp.client, "worker-1", "4").await?;
    create_namespace(&cp.client, "apps").await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}
            }
        }
    }))?;
    Api::<Deployment>::namespaced(cp.client.clone(), "apps")
        .create(&PostParams::default(), &deployment)
        .await?;
    // The ReplicaSet controller makes the pods, kube-scheduler binds them and the kubelet
    // simulator runs them.
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "apps");
    let running = wait::until(TIMEOUT, "2 running web pods", || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await?;
        let running: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        Ok((running.len() == 2).then_some(running))
    })
    .await?;
    for p in &running {
        let status = p.status.as_ref().context("status")?;
        assert!(
            status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()),
            "no pod IP"
        );
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "pod not Ready");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("worker-1")
        );
    }
    let lease = Api::<Lease>::namespaced(cp.client.clone(), "kube-node-lease")
        .get("worker-1")
        .await?;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("worker-1")
    );
    Ok(())
}

#[tokio::test]
async fn mcsched_binds_its_pods_and_leaves_others_to_the_default_scheduler() -> anyhow::Result<()> {
    let cp = ControlPlane::start("slice", ControlPlaneOptions::full()).await?;
    create_node(&cp.client, "small", "1").await?;
    create_node(&cp.client, "big", "8").await?;
    create_namespace(&cp.client, "demo").await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "demo");

    let mut agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    pods.create(&PostParams::default(), &pod("ours", Some("mcsched"), "2")?)
        .await?;
    pods.create(&PostParams::default(), &pod("theirs", None, "100m")?)
        .await?;

    // Only "big" has 2 free cores.
    let node = wait::until(TIMEOUT, "mcsched to bind demo/ours", || {
        node_of(&pods, "ours")
    })
    .await?;
    assert_eq!(node, "big", "agent log:\n{}", agent.logs());

    let events = wait::until(TIMEOUT, "the Scheduled event of demo/ours", || async {
        let evs = events_for(&cp.client, "demo", "ours").await?;
        Ok(evs
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Scheduled"))
            .map(|e| vec![e]))
    })
    .await?;
    let scheduled = &events[0];
    assert_eq!(scheduled.reporting_controller.as_deref(), Some("mcsched"));
    assert_eq!(
        scheduled.note.as_deref(),
        Some("Successfully assigned demo/ours to big")
    );
    assert_eq!(scheduled.type_.as_deref(), Some("Normal"));

    // The default scheduler binds the other pod, and mcsched never speaks of it.
    wait::until(TIMEOUT, "default-scheduler to bind demo/theirs", || {
        node_of(&pods, "theirs")
    })
    .await?;
    let theirs = wait::until(TIMEOUT, "the default scheduler's event", || async {
        let evs = events_for(&cp.client, "demo", "theirs").await?;
        Ok((!evs.is_empty()).then_some(evs))
    })
    .await?;
    let reporters: BTreeMap<String, usize> = theirs.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.reporting_controller.clone().unwrap_or_default())
            .or_default() += 1;
        m
    });
    assert!(reporters.contains_key("default-scheduler"), "{reporters:?}");
    assert!(
        !reporters.contains_key("mcsched"),
        "mcsched touched a pod it does not own: {reporters:?}"
    );
    assert!(
        !agent.logs().contains("demo/theirs"),
        "mcsched considered demo/theirs"
    );

    let status = agent.stop().context("agent already gone")?;
    assert!(
        status.success(),
        "agent did not stop cleanly on SIGTERM: {status:?}\n{}",
        agent.logs()
    );
    Ok(())
}

#[tokio::test]
async fn a_pod_waits_for_the_agent_and_is_bound_once_it_starts() -> anyhow::Result<()> {
    // No kube-scheduler here: nobody else could bind it.
    let cp = ControlPlane::start("late", ControlPlaneOptions::default()).await?;
    create_node(&cp.client, "node-1", "4").await?;
    create_namespace(&cp.client, "late").await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "late");
    pods.create(
        &PostParams::default(),
        &pod("early", Some("mcsched"), "500m")?,
    )
    .await?;

    // Nothing here can bind it (no scheduler runs), so waiting would prove nothing: it is
    // Pending now, and the agent started later binds it.
    let p = pods.get("early").await?;
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Pending"));

    let _agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let node = wait::until(TIMEOUT, "late/early to be bound", || {
        node_of(&pods, "early")
    })
    .await?;
    assert_eq!(node, "node-1");
    Ok(())
}

#[tokio::test]
async fn an_unschedulable_pod_gets_failed_scheduling_in_kube_scheduler_words() -> anyhow::Result<()>
{
    let cp = ControlPlane::start("unfit", ControlPlaneOptions::default()).await?;
    create_node(&cp.client, "node-1", "1").await?;
    create_node(&cp.client, "node-2", "1").await?;
    create_namespace(&cp.client, "unfit").await?;
    let _agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "unfit");
    pods.create(&PostParams::default(), &pod("huge", Some("mcsched"), "3")?)
        .await?;
    let note = wait::until(TIMEOUT, "FailedScheduling for unfit/huge", || async {
        let evs = events_for(&cp.client, "unfit", "huge").await?;
        Ok(evs
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
            .and_then(|e| e.note))
    })
    .await?;
    // More than any node has: preemption cannot help either, and says so like kube-scheduler.
    const MESSAGE: &str = "0/2 nodes are available: 2 Insufficient cpu. \
        preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.";
    assert_eq!(note, MESSAGE);
    assert_eq!(node_of(&pods, "huge").await?, None);
    // kube-scheduler's PodScheduled=False/Unschedulable condition, with the same message.
    let condition = wait::until(TIMEOUT, "PodScheduled=False on unfit/huge", || async {
        let p = pods.get("huge").await?;
        Ok(p.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False"))
    })
    .await?;
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(condition.message.as_deref(), Some(MESSAGE));
    Ok(())
}
