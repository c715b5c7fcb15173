//! Leaf clusters as virtual nodes, against real API servers: a host and a leaf control
//! plane (each with kube-controller-manager, kube-scheduler and simulated kubelets), the
//! leaf joined the way `kubectl mcsched join` leaves it (join Secret + virtual node), and
//! the agent doing the rest: virtual node status and Lease, leaf-accurate filtering, pod
//! sync both ways, restarts without duplicates, NotReady when the leaf goes silent.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::objects::{only_leaf_taint, ready_status, wait_ready};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::explain::{Explanation, Outcome};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn node(
    client: &Client,
    name: &str,
    cpu: &str,
    labels: serde_json::Value,
) -> anyhow::Result<()> {
    mcsched_e2e::objects::ready_node(client, name, cpu, "8Gi", labels).await
}

fn pod(name: &str, cpu: &str, node: Option<&str>) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": if node.is_some() { "default-scheduler" } else { "mcsched" },
            "nodeName": node,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]
        }
    })
}

/// The pod's FailedScheduling messages given once the leaf has answered what the leaf
/// check asks it (a first attempt may say "asking leaf cluster ..." or "checking ..."
/// while the leaf or the API server is being asked). An early attempt may also have seen
/// the cluster as it was a moment before (a node's taint not yet gone from the agent's
/// cache), so callers look for the message they expect among all of them.
/// A FailedScheduling repeated within minutes for the same pod version only counts up the
/// first event's series (client-go's rule, and kube-rs's), so the PodScheduled condition,
/// which carries the latest reason, is read too.
async fn failed_scheduling(client: &Client, pod: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!("regarding.name={pod}"));
    let condition = Api::<Pod>::namespaced(client.clone(), "default")
        .get_opt(pod)
        .await?
        .and_then(|p| p.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ == "PodScheduled" && c.status == "False")
        .filter_map(|c| c.message);
    Ok(events
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .filter_map(|e| e.note)
        .chain(condition)
        .filter(|n| !n.contains("checking") && !n.contains("asking leaf cluster"))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leaf_cluster_as_a_virtual_node() -> anyhow::Result<()> {
    let mut cps =
        ControlPlane::start_many(&["mc-host", "mc-east"], ControlPlaneOptions::full()).await?;
    let leaf = cps.pop().ok_or_else(|| anyhow::anyhow!("no leaf"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;

    // Leaf: four 4-CPU nodes, each half used by a pod of the leaf's own: 8 CPU free in
    // all, never more than 2 on one node. east-3 has an SSD.
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    for i in 1..=4 {
        let name = format!("east-{i}");
        let disk = if i == 3 { "ssd" } else { "hdd" };
        node(
            &leaf.client,
            &name,
            "4",
            json!({"kubernetes.io/hostname": name, "disk": disk}),
        )
        .await?;
        leaf_pods
            .create(
                &PostParams::default(),
                &serde_json::from_value(pod(&format!("busy-{i}"), "2", Some(&name)))?,
            )
            .await?;
    }
    // Host: one real node too small for anything below.
    node(
        &host.client,
        "host-a",
        "500m",
        json!({"kubernetes.io/hostname": "host-a"}),
    )
    .await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let mut agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;

    // The virtual node shows the leaf: capacity 16 CPU, allocatable 8 free, Ready, Lease.
    let nodes: Api<Node> = Api::all(host.client.clone());
    wait::until(TIMEOUT, "virtual node status from the leaf", || async {
        let n = nodes.get("mcsched-east").await?;
        let st = n.status.clone().unwrap_or_default();
        let cpu = |m: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| { m.and_then(|m| m.get("cpu")).map(|q| q.0.clone()) };
        let ok = cpu(st.capacity.as_ref()).as_deref() == Some("16")
            && cpu(st.allocatable.as_ref()).as_deref() == Some("8")
            && ready_status(&n).as_deref() == Some("True")
            // The leaf's node count, for `kubectl mcsched get clusters`.
            && n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::LEAF_NODE_COUNT_ANNOTATION))
                .map(String::as_str)
                == Some("4")
            && only_leaf_taint(&n);
        Ok(ok.then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let leases: Api<Lease> = Api::namespaced(host.client.clone(), "kube-node-lease");
    let lease = leases.get("mcsched-east").await?;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("mcsched-east")
    );

    // Fragmentation: 3 CPU fits the summed 8 but no leaf node; the reason names the
    // largest free leaf node.
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("big", "3", None))?,
    )
    .await?;
    let expected = |m: &String| {
        m.starts_with("0/2 nodes are available: ")
            && m.contains("1 Insufficient cpu")
            && m.contains(
                "1 leaf cluster east has no node that fits: 4 Insufficient cpu; \
                 largest free node east-1 (cpu 2, memory 8Gi, pods 109)",
            )
    };
    let seen = std::sync::Mutex::new(Vec::new());
    wait::until(TIMEOUT, "FailedScheduling of default/big", || async {
        let notes = failed_scheduling(&host.client, "big").await?;
        let found = notes.iter().any(expected);
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = notes;
        Ok(found.then_some(()))
    })
    .await
    .map_err(|e| e.context(format!("messages: {:?}", seen.lock().map(|s| s.clone()))))?;
    assert!(
        pods.get("big")
            .await?
            .spec
            .and_then(|s| s.node_name)
            .is_none()
    );

    // A pod that fits one leaf node goes to the virtual node, with what it refers to.
    let cms: Api<ConfigMap> = Api::namespaced(host.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "web-config"}, "data": {"mode": "fast"}}),
        )?,
    )
    .await?;
    let mut web = pod("web", "1", None);
    web["metadata"]["annotations"] = json!({"mcsched.io/leaf-node-selector": "{\"disk\":\"ssd\"}"});
    web["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "web-config"}}]);
    pods.create(&PostParams::default(), &serde_json::from_value(web)?)
        .await?;
    let bound = wait::until(TIMEOUT, "default/web bound", || async {
        Ok(pods.get("web").await?.spec.and_then(|s| s.node_name))
    })
    .await?;
    assert_eq!(bound, "mcsched-east");

    // The leaf runs it on the SSD node; status flows back to the host pod.
    let copy = wait::until(TIMEOUT, "leaf copy of default/web running", || async {
        let p = leaf_pods.get_opt("web").await?;
        Ok(p.filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let spec = copy.spec.clone().unwrap_or_default();
    assert_eq!(spec.node_name.as_deref(), Some("east-3"));
    assert_eq!(
        spec.node_selector,
        Some(BTreeMap::from([("disk".to_string(), "ssd".to_string())]))
    );
    assert_eq!(
        copy.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::MANAGED_CLUSTER_LABEL))
            .map(String::as_str),
        Some("east")
    );
    let leaf_cm = Api::<ConfigMap>::namespaced(leaf.client.clone(), "default")
        .get("web-config")
        .await?;
    assert_eq!(
        leaf_cm.data.and_then(|d| d.get("mode").cloned()).as_deref(),
        Some("fast")
    );
    let leaf_ip = copy.status.as_ref().and_then(|s| s.pod_ip.clone());
    assert!(leaf_ip.is_some());
    let host_web = wait::until(
        TIMEOUT,
        "host default/web Running with the leaf's IP",
        || async {
            let p = pods.get("web").await?;
            let st = p.status.clone().unwrap_or_default();
            Ok((st.phase.as_deref() == Some("Running") && st.pod_ip == leaf_ip).then_some(p))
        },
    )
    .await?;
    let leaf_condition = host_web
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "mcsched.io/LeafPod"))
        .and_then(|c| c.message.clone());
    assert_eq!(
        leaf_condition.as_deref(),
        Some("running in leaf cluster east on node east-3")
    );

    // The explanation names the leaf node the check found.
    let http = mcsched_e2e::api::admin_https(&host)?;
    let explanation: Explanation =
        mcsched_e2e::api::explain(&http, &agent.url, "default", "web").await?;
    match &explanation.outcome {
        Outcome::Scheduled { node, leaf_node } => {
            assert_eq!(node, "mcsched-east");
            assert_eq!(leaf_node.as_deref(), Some("east-3"));
        }
        other => panic!("unexpected outcome {other:?}"),
    }

    // A restarted agent resumes: the same copy, nothing created twice.
    agent.stop();
    let mut agent = Agent::start_with(&host.kubeconfig, "mcsched", host.dir(), "restarted", &[])?;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("api", "1", None))?,
    )
    .await?;
    wait::until(TIMEOUT, "leaf copy of default/api", || async {
        Ok(leaf_pods.get_opt("api").await?.map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let again = leaf_pods.get("web").await?;
    assert_eq!(
        again.metadata.uid, copy.metadata.uid,
        "web's copy was recreated"
    );
    let managed = leaf_pods
        .list(&ListParams::default().labels(&format!("{}=east", keys::MANAGED_CLUSTER_LABEL)))
        .await?;
    let mut names: Vec<String> = managed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["api", "web"]);

    // Freshness, measured (reported, not asserted): leaf status to host pod, and a leaf
    // change to the virtual node's allocatable. Both sides polled every 10 ms.
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("timed", "1", None))?,
    )
    .await?;
    let (mut leaf_running, mut host_running) = (None, None);
    let started = std::time::Instant::now();
    while host_running.is_none() && started.elapsed() < TIMEOUT {
        let running = |p: Option<Pod>| {
            p.and_then(|p| p.status)
                .and_then(|s| s.phase)
                .is_some_and(|ph| ph == "Running")
        };
        if leaf_running.is_none() && running(leaf_pods.get_opt("timed").await?) {
            leaf_running = Some(std::time::Instant::now());
        }
        if leaf_running.is_some() && running(pods.get_opt("timed").await?) {
            host_running = Some(std::time::Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (Some(l), Some(h)) = (leaf_running, host_running) else {
        anyhow::bail!("default/timed never ran in both clusters\n{}", agent.logs());
    };
    eprintln!(
        "measured: pod status written back {} ms after the leaf pod turned Running",
        h.duration_since(l).as_millis()
    );
    let before = std::time::Instant::now();
    leaf_pods
        .delete("busy-4", &DeleteParams::default().grace_period(0))
        .await?;
    loop {
        let n = nodes.get("mcsched-east").await?;
        let cpu = n
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("cpu").cloned())
            .map(|q| q.0);
        if cpu.as_deref() == Some("10") {
            break;
        }
        anyhow::ensure!(before.elapsed() < TIMEOUT, "allocatable stayed {cpu:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "measured: virtual node allocatable followed a leaf pod deletion in {} ms",
        before.elapsed().as_millis()
    );

    // Deleting the host pod deletes its copy, then the host pod is gone too.
    pods.delete("api", &DeleteParams::default()).await?;
    wait::until(TIMEOUT, "default/api gone in host and leaf", || async {
        let gone =
            pods.get_opt("api").await?.is_none() && leaf_pods.get_opt("api").await?.is_none();
        Ok(gone.then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    // A copy deleted in the leaf behind mcsched's back fails the host pod.
    leaf_pods
        .delete("web", &DeleteParams::default().grace_period(0))
        .await?;
    // A bare pod stays (nothing deletes it): phase Failed, reason LeafPodDeleted.
    wait::until(TIMEOUT, "host default/web Failed", || async {
        let status = pods.get("web").await?.status.unwrap_or_default();
        let failed = status.phase.as_deref() == Some("Failed")
            && status.reason.as_deref() == Some("LeafPodDeleted");
        Ok(failed.then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    agent.stop();
    Ok(())
}

async fn events_of(client: &Client, pod: &str, reason: &str) -> anyhow::Result<Vec<String>> {
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

/// Pods of the `app` Deployment in the host, with their nodes.
async fn app_pods(pods: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    Ok(pods
        .list(&ListParams::default().labels("app=app"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn phase_of(p: &Pod) -> Option<String> {
    p.status.as_ref().and_then(|s| s.phase.clone())
}

/// Prefers west, then east (host nodes get nothing from this).
fn preferring_west() -> serde_json::Value {
    json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "mcsched.io/cluster", "operator": "In", "values": ["west"]}]}},
        {"weight": 50, "preference": {"matchExpressions": [{"key": "mcsched.io/cluster", "operator": "In", "values": ["east"]}]}}
    ]}})
}

/// West has no scheduler, so copies sent there stay Pending: taken back (a controlled
/// pod is replaced by its owner, a bare pod deleted). Then east goes
/// silent: NotReady, its pods evicted and recreated on the host, and Ready again after.
#[tokio::test(flavor = "multi_thread")]
async fn pending_copies_come_back_and_a_silent_leaf_fails_over() -> anyhow::Result<()> {
    let (cps, west) = tokio::try_join!(
        ControlPlane::start_many(&["mr-host", "mr-east"], ControlPlaneOptions::full()),
        ControlPlane::start(
            "mr-west",
            ControlPlaneOptions {
                with_controller_manager: true,
                with_scheduler: false,
                simulate_kubelets: true,
            }
        )
    )?;
    let [host, east]: [ControlPlane; 2] = cps
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected two control planes"))?;
    node(
        &east.client,
        "east-1",
        "8",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    node(
        &west.client,
        "west-1",
        "8",
        json!({"kubernetes.io/hostname": "west-1"}),
    )
    .await?;
    node(
        &host.client,
        "host-a",
        "1500m",
        json!({"kubernetes.io/hostname": "host-a"}),
    )
    .await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &east, "east", json!({})).await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &west, "west", json!({})).await?;
    let mut agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "failover",
        &["--leaf-pending-timeout=8"],
    )?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    for n in ["mcsched-east", "mcsched-west"] {
        wait_ready(&nodes, n, "True", TIMEOUT)
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");

    // A Deployment's pod goes to west first, stays Pending there, and is replaced on east.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(host.client.clone(), "default");
    let not_ready = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0});
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "app"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                    "template": {"metadata": {"labels": {"app": "app"}}, "spec": {
                        "schedulerName": "mcsched",
                        "affinity": preferring_west(),
                        "tolerations": [not_ready("node.kubernetes.io/not-ready"), not_ready("node.kubernetes.io/unreachable")],
                        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}}
            }))?,
        )
        .await?;
    let first = wait::until(TIMEOUT, "an app pod on mcsched-west", || async {
        let ps = app_pods(&pods).await?;
        Ok(ps
            .into_iter()
            .find(|p| node_of(p).as_deref() == Some("mcsched-west")))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let first_name = first.metadata.name.clone().unwrap_or_default();
    wait::until(TIMEOUT, "the app pod replaced on mcsched-east", || async {
        let ps = app_pods(&pods).await?;
        Ok(ps.into_iter().find(|p| {
            node_of(p).as_deref() == Some("mcsched-east")
                && phase_of(p).as_deref() == Some("Running")
        }))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let notes = events_of(&host.client, &first_name, "LeafPodPending").await?;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("taken back so that its owner recreates it elsewhere")),
        "{notes:?}"
    );
    assert!(
        Api::<Pod>::namespaced(west.client.clone(), "default")
            .list(&ListParams::default().labels("app=app"))
            .await?
            .items
            .is_empty(),
        "the Pending copy in west is deleted"
    );

    // A bare pod whose copy stays Pending in west: deleted, as Kubernetes deletes a bare
    // pod on a lost node (no controller recreates it, and the agent creates no pods), with
    // a Warning saying why.
    let mut solo = pod("solo", "1", None);
    solo["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "mcsched.io/cluster", "operator": "In", "values": ["west"]}]}]}}});
    pods.create(&PostParams::default(), &serde_json::from_value(solo)?)
        .await?;
    wait::until(TIMEOUT, "default/solo deleted", || async {
        Ok(pods.get_opt("solo").await?.is_none().then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let notes = events_of(&host.client, "solo", "LeafPodPending").await?;
    assert!(
        notes.iter().any(|n| n.contains(
            "deleted, as a bare pod on a lost node is: it has no controller to recreate it elsewhere"
        )),
        "{notes:?}"
    );
    assert!(
        Api::<Pod>::namespaced(west.client.clone(), "default")
            .get_opt("solo")
            .await?
            .is_none(),
        "its copy in west is deleted"
    );

    // East goes silent: NotReady after 40 s; its app pod is evicted and replaced on the
    // host (west is avoided for the Deployment, east is tainted).
    east.pause();
    wait_ready(&nodes, "mcsched-east", "False", Duration::from_secs(120))
        .await
        .map_err(|e| e.context(agent.logs()))?;
    wait::until(
        Duration::from_secs(120),
        "the app pod replaced on host-a",
        || async {
            let ps = app_pods(&pods).await?;
            Ok(ps.into_iter().find(|p| {
                node_of(p).as_deref() == Some("host-a") && phase_of(p).as_deref() == Some("Running")
            }))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;

    // East answers again: Ready, and the copy of the evicted pod is removed there.
    east.resume();
    wait_ready(&nodes, "mcsched-east", "True", Duration::from_secs(90))
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let east_pods: Api<Pod> = Api::namespaced(east.client.clone(), "default");
    wait::until(TIMEOUT, "no app copy left in east", || async {
        let left = east_pods
            .list(&ListParams::default().labels("app=app"))
            .await?
            .items;
        Ok(left.is_empty().then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    agent.stop();
    Ok(())
}

fn storage_class() -> serde_json::Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local-wffc"}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"})
}

fn local_pv(name: &str, node: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": {
        "storageClassName": "local-wffc", "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/data"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
}

async fn storage(client: &Client, pv: &str, node: &str) -> anyhow::Result<()> {
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(storage_class())?,
        )
        .await?;
    Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(local_pv(pv, node))?,
        )
        .await?;
    Ok(())
}

/// A host and a leaf `east` joined to it, each with one 4-CPU node (`host-a`, `east-1`) and
/// one local WaitForFirstConsumer volume on it (`pv-host-a`, `pv-east-1`).
async fn host_and_leaf_with_a_volume_each(
    host_name: &str,
    leaf_name: &str,
) -> anyhow::Result<(ControlPlane, ControlPlane)> {
    let cps =
        ControlPlane::start_many(&[host_name, leaf_name], ControlPlaneOptions::full()).await?;
    let [host, leaf]: [ControlPlane; 2] = cps
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected two control planes"))?;
    for (cp, name) in [(&host, "host-a"), (&leaf, "east-1")] {
        node(
            &cp.client,
            name,
            "4",
            json!({"kubernetes.io/hostname": name}),
        )
        .await?;
        storage(&cp.client, &format!("pv-{name}"), name).await?;
    }
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    Ok((host, leaf))
}

/// The volume the leaf's claim `name` (in default) is bound to, once it is.
async fn leaf_claim_volume(leaf: &ControlPlane, name: &str) -> anyhow::Result<String> {
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(leaf.client.clone(), "default");
    wait::until(TIMEOUT, &format!("the leaf claim {name} bound"), || async {
        let c = claims.get_opt(name).await?;
        Ok(c.and_then(|c| c.spec.and_then(|s| s.volume_name)))
    })
    .await
}

/// Kosmos's MySQL example with Kosmos's scheduler configuration, unchanged: two replicas with
/// required anti-affinity on the hostname and a WaitForFirstConsumer claim each; the host
/// has one usable node, so one replica runs there on a host volume and the other in the
/// leaf, on a leaf volume, Running in both clusters.
#[tokio::test(flavor = "multi_thread")]
async fn kosmos_mysql_one_replica_on_the_host_one_in_the_leaf() -> anyhow::Result<()> {
    let (host, leaf) = host_and_leaf_with_a_volume_each("my-host", "my-east").await?;
    // Kosmos's configuration elects its leader in kosmos-system.
    Api::<Namespace>::all(host.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kosmos-system"}}))?,
        )
        .await?;
    let config = mcsched_e2e::repo_root().join("shared/testdata/config/kosmos-v1beta1.yaml");
    let config_arg = format!("--config={}", config.display());
    let mut agent = Agent::start_with(
        &host.kubeconfig,
        "kosmos-scheduler",
        host.dir(),
        "kosmos",
        &[&config_arg],
    )?;
    mcsched_e2e::objects::kosmos_mysql(&host.client, "kosmos-scheduler").await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let running_on = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let p = pods.get_opt(name).await?;
            Ok::<_, anyhow::Error>(
                p.filter(|p| phase_of(p).as_deref() == Some("Running"))
                    .and_then(|p| node_of(&p)),
            )
        }
    };
    let first = wait::until(Duration::from_secs(120), "mysql-0 Running", || {
        running_on("mysql-0")
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let second = wait::until(Duration::from_secs(120), "mysql-1 Running", || {
        running_on("mysql-1")
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let mut placed = [first, second];
    placed.sort();
    assert_eq!(placed, ["host-a", "mcsched-east"]);
    let on_host = if node_of(&pods.get("mysql-0").await?).as_deref() == Some("host-a") {
        "mysql-0"
    } else {
        "mysql-1"
    };
    let in_leaf = if on_host == "mysql-0" {
        "mysql-1"
    } else {
        "mysql-0"
    };

    // The host replica's claim is bound to the host volume by mcsched's PreBind.
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(host.client.clone(), "default");
    let host_claim = claims.get(&format!("data-{on_host}")).await?;
    assert_eq!(
        host_claim.spec.and_then(|s| s.volume_name).as_deref(),
        Some("pv-host-a")
    );
    // The other replica runs in the leaf on the leaf's volume; its host claim says where.
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let copy = wait::until(TIMEOUT, "the leaf copy Running", || async {
        let p = leaf_pods.get_opt(in_leaf).await?;
        Ok(p.filter(|p| phase_of(p).as_deref() == Some("Running")))
    })
    .await?;
    assert_eq!(node_of(&copy).as_deref(), Some("east-1"));
    let leaf_claim = leaf_claim_volume(&leaf, &format!("data-{in_leaf}")).await?;
    assert_eq!(leaf_claim, "pv-east-1");
    let marked = claims.get(&format!("data-{in_leaf}")).await?;
    assert_eq!(
        marked
            .metadata
            .annotations
            .and_then(|a| a.get(keys::BOUND_IN_CLUSTER_ANNOTATION).cloned())
            .as_deref(),
        Some("east")
    );
    agent.stop();
    Ok(())
}

/// One free volume in the leaf and two pods that both prefer the leaf, created together:
/// the leaf check holds the volume it picked for the first, so the second goes to the host
/// at once instead of being sent to the leaf too and waiting there for the pending
/// timeout (set far beyond this test's waits).
#[tokio::test(flavor = "multi_thread")]
async fn a_leaf_volume_is_held_for_the_pod_sent_to_it() -> anyhow::Result<()> {
    let (host, leaf) = host_and_leaf_with_a_volume_each("pv-host", "pv-east").await?;
    let mut agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "volumes",
        &["--leaf-pending-timeout=900"],
    )?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    wait_ready(&nodes, "mcsched-east", "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(host.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let names = ["vol-a", "vol-b"];
    for name in names {
        claims
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": format!("data-{name}")},
                    "spec": {"storageClassName": "local-wffc", "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "5Gi"}}}}))?,
            )
            .await?;
    }
    // Both pods at once: the second's cycle runs before the first's copy reaches the leaf.
    let create = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let mut p = pod(name, "100m", None);
            p["spec"]["affinity"] = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [
                    {"key": keys::CLUSTER_LABEL, "operator": "In", "values": ["east"]}]}}]}});
            p["spec"]["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}}]);
            pods.create(&PostParams::default(), &serde_json::from_value(p)?)
                .await?;
            anyhow::Ok(())
        }
    };
    let (a, b) = tokio::join!(create("vol-a"), create("vol-b"));
    a?;
    b?;
    let placed = wait::until(TIMEOUT, "both pods bound", || async {
        let mut placed = Vec::new();
        for name in names {
            match pods.get(name).await.ok().as_ref().and_then(node_of) {
                Some(n) => placed.push(n),
                None => return Ok(None),
            }
        }
        Ok(Some(placed))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let mut sorted = placed.clone();
    sorted.sort();
    assert_eq!(sorted, ["host-a", "mcsched-east"], "{}", agent.logs());
    // Each Running where it went, the leaf's on the leaf's only volume.
    let in_leaf = names[placed.iter().position(|n| n == "mcsched-east").unwrap_or(0)];
    for name in names {
        wait::until(TIMEOUT, &format!("{name} Running"), || async {
            let p = pods.get(name).await?;
            Ok((phase_of(&p).as_deref() == Some("Running")).then_some(()))
        })
        .await
        .map_err(|e| e.context(agent.logs()))?;
    }
    let leaf_claim = leaf_claim_volume(&leaf, &format!("data-{in_leaf}")).await?;
    assert_eq!(leaf_claim, "pv-east-1");
    agent.stop();
    Ok(())
}

/// The agent as installed (its ServiceAccount's RBAC, impersonated) and a leaf joined with
/// the real `kubectl mcsched join`: a pod mounting a ConfigMap goes to the leaf only from
/// a namespace where the operator let the agent read ConfigMaps; elsewhere it stays
/// Pending, and `explain` names the grant to add. Once granted, it goes. Edits of the host
/// ConfigMap reach the leaf's copy, which is deleted once no leaf pod refers to it.
#[tokio::test(flavor = "multi_thread")]
async fn configmaps_go_to_leaves_only_from_granted_namespaces() -> anyhow::Result<()> {
    let mut cps =
        ControlPlane::start_many(&["cm-host", "cm-east"], ControlPlaneOptions::full()).await?;
    let leaf = cps.pop().ok_or_else(|| anyhow::anyhow!("no leaf"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;
    node(
        &leaf.client,
        "east-1",
        "4",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    let kc = host.kubeconfig.clone();
    let cli = |args: &[&str]| -> anyhow::Result<String> {
        let out = mcsched_e2e::cli::run(&kc, args)?;
        let shown = mcsched_e2e::cli::text(&out);
        anyhow::ensure!(out.status.success(), "{args:?}: {shown}");
        Ok(shown)
    };
    cli(&["install", "--image", "mcsched/agent:test"])?;
    let leaf_kc = leaf.kubeconfig.to_string_lossy().to_string();
    cli(&[
        "join",
        "cluster",
        "--name",
        "east",
        "--cluster-kubeconfig",
        &leaf_kc,
        "--namespaces",
        "granted,shop",
    ])?;
    // The agent's ServiceAccount's rights; `explain` reads it through the API server.
    let agent =
        mcsched_e2e::api::agent_as_installed(&host, &["--leaf-unused-copy-grace=3"]).await?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    wait_ready(&nodes, "mcsched-east", "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;

    let namespaces: Api<Namespace> = Api::all(host.client.clone());
    for ns in ["granted", "shop"] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
        Api::<ConfigMap>::namespaced(host.client.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "app"}, "data": {"k": "v"}}))?,
            )
            .await?;
    }
    let grant = |ns: &str| {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&host.kubeconfig)
            .args([
                "create",
                "rolebinding",
                "mcsched-configmaps",
                "-n",
                ns,
                "--clusterrole=mcsched-agent-configmap-reader",
                "--serviceaccount=mcsched-system:mcsched-agent",
            ])
            .output()?;
        anyhow::ensure!(out.status.success(), "{}", mcsched_e2e::cli::text(&out));
        Ok(())
    };
    grant("granted")?;
    let web = |ns: &str| -> anyhow::Result<Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"schedulerName": "mcsched",
                "nodeSelector": {"mcsched.io/cluster": "east"},
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "app"}}]}
        }))?)
    };
    let granted: Api<Pod> = Api::namespaced(host.client.clone(), "granted");
    let shop: Api<Pod> = Api::namespaced(host.client.clone(), "shop");
    granted
        .create(&PostParams::default(), &web("granted")?)
        .await?;
    shop.create(&PostParams::default(), &web("shop")?).await?;

    // Granted: on the leaf, with its ConfigMap copied there.
    wait::until(TIMEOUT, "granted/web Running in east", || async {
        let p = granted.get("web").await?;
        Ok((node_of(&p).as_deref() == Some("mcsched-east")
            && phase_of(&p).as_deref() == Some("Running"))
        .then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        Api::<ConfigMap>::namespaced(leaf.client.clone(), "granted")
            .get_opt("app")
            .await?
            .is_some()
    );

    // Not granted: Pending, and explain names the grant.
    let want = "kubectl create rolebinding mcsched-configmaps -n shop \
                --clusterrole=mcsched-agent-configmap-reader \
                --serviceaccount=mcsched-system:mcsched-agent";
    let reason = wait::until(TIMEOUT, "shop/web kept off the leaf", || async {
        let out = mcsched_e2e::cli::run(&kc, &["explain", "pod", "web", "-n", "shop"])?;
        let shown = mcsched_e2e::cli::text(&out);
        Ok(shown.contains(want).then_some(shown))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        reason.contains("the agent may not read ConfigMaps in namespace shop"),
        "{reason}"
    );
    assert_eq!(node_of(&shop.get("web").await?), None);
    assert!(
        Api::<ConfigMap>::namespaced(leaf.client.clone(), "shop")
            .get_opt("app")
            .await?
            .is_none()
    );

    // The operator grants it: the agent sees the grant and the pod goes.
    grant("shop")?;
    wait::until(
        Duration::from_secs(90),
        "shop/web bound to mcsched-east",
        || async {
            Ok((node_of(&shop.get("web").await?).as_deref() == Some("mcsched-east")).then_some(()))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;

    let shop_copy = wait::until(TIMEOUT, "shop/app copied to the leaf", || async {
        Api::<ConfigMap>::namespaced(leaf.client.clone(), "shop")
            .get_opt("app")
            .await
            .map_err(Into::into)
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    // Edits on the host reach the leaf's copy: each one timed from the host's answer to
    // the copy showing it, sampled every 10 ms.
    let host_cms: Api<ConfigMap> = Api::namespaced(host.client.clone(), "granted");
    let leaf_cms: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), "granted");
    let mut took = Vec::new();
    for i in 0..20 {
        let value = format!("v{i}");
        host_cms
            .patch(
                "app",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": value}})),
            )
            .await?;
        let written = std::time::Instant::now();
        loop {
            let copy = leaf_cms.get("app").await?;
            if copy.data.and_then(|d| d.get("k").cloned()).as_deref() == Some(value.as_str()) {
                break;
            }
            anyhow::ensure!(
                written.elapsed() < Duration::from_secs(30),
                "edit {i} never reached the leaf\n{}",
                agent.logs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        took.push(written.elapsed());
    }
    took.sort();
    println!(
        "host ConfigMap edit to leaf copy, 20 edits: median {:?}, max {:?}",
        took[10], took[19]
    );

    // The copy stays while a leaf pod refers to it, past the grace period (3 s here) ...
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        leaf_cms.get_opt("app").await?.is_some(),
        "copy deleted while in use"
    );
    // ... and goes once none does.
    granted
        .delete("web", &DeleteParams::default().grace_period(0))
        .await?;
    wait::until(TIMEOUT, "granted/app's unused copy deleted", || async {
        Ok(leaf_cms.get_opt("app").await?.is_none().then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    // shop/web still refers to shop/app there: its copy stays, untouched.
    let shop_now = Api::<ConfigMap>::namespaced(leaf.client.clone(), "shop")
        .get_opt("app")
        .await?;
    assert_eq!(
        shop_now.and_then(|c| c.metadata.uid),
        shop_copy.metadata.uid,
        "shop/app's copy went"
    );
    Ok(())
}

/// A pod's ServiceAccount in its leaf: a leaf without one of that name, joined without
/// `--service-accounts`, is kept off with the reason in `explain`; a leaf joined with it
/// gets a marked account (no RBAC, the pod's automount), deleted once no copy uses it; an
/// account the leaf's admin creates makes the leaf feasible and is never touched.
#[tokio::test(flavor = "multi_thread")]
async fn a_pods_service_account_is_the_leafs_or_created_where_join_allows() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let mut cps = ControlPlane::start_many(
        &["sa-host", "sa-east", "sa-west"],
        ControlPlaneOptions::full(),
    )
    .await?;
    let west = cps.pop().ok_or_else(|| anyhow::anyhow!("no west"))?;
    let east = cps.pop().ok_or_else(|| anyhow::anyhow!("no east"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;
    for (leaf, name) in [(&east, "east-1"), (&west, "west-1")] {
        node(
            &leaf.client,
            name,
            "4",
            json!({"kubernetes.io/hostname": name}),
        )
        .await?;
    }
    let kc = host.kubeconfig.clone();
    let cli = |args: &[&str]| -> anyhow::Result<String> {
        let out = mcsched_e2e::cli::run(&kc, args)?;
        let shown = mcsched_e2e::cli::text(&out);
        anyhow::ensure!(out.status.success(), "{args:?}: {shown}");
        Ok(shown)
    };
    cli(&["install", "--image", "mcsched/agent:test"])?;
    let east_kc = east.kubeconfig.to_string_lossy().to_string();
    let west_kc = west.kubeconfig.to_string_lossy().to_string();
    cli(&[
        "join",
        "cluster",
        "--name",
        "east",
        "--cluster-kubeconfig",
        &east_kc,
        "--namespaces",
        "shop",
    ])?;
    let joined = cli(&[
        "join",
        "cluster",
        "--name",
        "west",
        "--cluster-kubeconfig",
        &west_kc,
        "--namespaces",
        "shop",
        "--service-accounts",
    ])?;
    assert!(
        joined.contains("may create the ServiceAccounts the host's pods name"),
        "{joined}"
    );
    // The agent as installed: its own ServiceAccount's rights, on the host and leaves.
    let agent =
        mcsched_e2e::api::agent_as_installed(&host, &["--leaf-unused-copy-grace=3"]).await?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    for n in ["mcsched-east", "mcsched-west"] {
        wait_ready(&nodes, n, "True", TIMEOUT)
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    Api::<Namespace>::all(host.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}}))?,
        )
        .await?;
    let account = |name: &str| -> anyhow::Result<ServiceAccount> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name}}))?)
    };
    Api::<ServiceAccount>::namespaced(host.client.clone(), "shop")
        .create(&PostParams::default(), &account("builder")?)
        .await?;
    let build = |name: &str, cluster: &str| -> anyhow::Result<Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"schedulerName": "mcsched", "serviceAccountName": "builder",
                "automountServiceAccountToken": false,
                "nodeSelector": {"mcsched.io/cluster": cluster},
                "containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": {"cpu": "100m"}}}]}
        }))?)
    };
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "shop");
    pods.create(&PostParams::default(), &build("in-east", "east")?)
        .await?;
    pods.create(&PostParams::default(), &build("in-west", "west")?)
        .await?;

    // West, joined with --service-accounts: the account is created there, marked.
    wait::until(TIMEOUT, "shop/in-west Running in west", || async {
        let p = pods.get("in-west").await?;
        Ok((node_of(&p).as_deref() == Some("mcsched-west")
            && phase_of(&p).as_deref() == Some("Running"))
        .then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let west_accounts: Api<ServiceAccount> = Api::namespaced(west.client.clone(), "shop");
    let created = west_accounts.get("builder").await?;
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(keys::MANAGED_CLUSTER_LABEL).map(String::as_str),
        Some("west"),
        "{created:?}"
    );
    assert!(labels.contains_key(keys::HOST_ID_LABEL), "{created:?}");
    assert_eq!(created.automount_service_account_token, Some(false));
    let shown = cli(&["explain", "pod", "in-west", "-n", "shop"])?;
    assert!(
        shown.contains("ServiceAccount shop/builder: the leaf has none; pod sync creates it"),
        "{shown}"
    );

    // East, joined without it and without such an account: Pending, explain says why.
    let why =
        "leaf cluster east has no ServiceAccount shop/builder and mcsched may not create one there";
    let shown = wait::until(TIMEOUT, "explain names the missing account", || async {
        let out = mcsched_e2e::cli::run(&kc, &["explain", "pod", "in-east", "-n", "shop"])?;
        let shown = mcsched_e2e::cli::text(&out);
        Ok(shown.contains(why).then_some(shown))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        shown.contains("kubectl mcsched join cluster east --service-accounts"),
        "{shown}"
    );
    assert_eq!(node_of(&pods.get("in-east").await?), None);
    let east_accounts: Api<ServiceAccount> = Api::namespaced(east.client.clone(), "shop");
    assert!(east_accounts.get_opt("builder").await?.is_none());

    // The leaf's admin creates it: the leaf is asked again (every 30 s) and the pod goes.
    let theirs = east_accounts
        .create(&PostParams::default(), &account("builder")?)
        .await?;
    wait::until(
        Duration::from_secs(90),
        "shop/in-east Running in east",
        || async {
            let p = pods.get("in-east").await?;
            Ok((node_of(&p).as_deref() == Some("mcsched-east")
                && phase_of(&p).as_deref() == Some("Running"))
            .then_some(()))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let shown = cli(&["explain", "pod", "in-east", "-n", "shop"])?;
    assert!(
        shown.contains("ServiceAccount shop/builder: the leaf has it"),
        "{shown}"
    );

    // No copy uses them any more: west's (ours) goes after the grace, east's (the
    // leaf admin's) stays as it was.
    for name in ["in-east", "in-west"] {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await?;
    }
    wait::until(TIMEOUT, "west's unused account deleted", || async {
        Ok(west_accounts
            .get_opt("builder")
            .await?
            .is_none()
            .then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = east_accounts.get_opt("builder").await?;
    assert_eq!(
        still.and_then(|a| a.metadata.resource_version),
        theirs.metadata.resource_version,
        "the leaf admin's account was changed or deleted"
    );
    Ok(())
}

/// A pod's copy keeps its PriorityClass where the leaf has one of that name (the leaf's
/// admission gives it the leaf's value); where the leaf has none the copy runs at the
/// leaf's default priority and a Warning on the host pod says so.
#[tokio::test(flavor = "multi_thread")]
async fn leaf_copies_keep_the_priority_class_the_leaf_has() -> anyhow::Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let mut cps =
        ControlPlane::start_many(&["pc-host", "pc-east"], ControlPlaneOptions::full()).await?;
    let leaf = cps.pop().ok_or_else(|| anyhow::anyhow!("no leaf"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;
    node(
        &leaf.client,
        "east-1",
        "4",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    let class = |name: &str, value: i32| -> anyhow::Result<PriorityClass> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name}, "value": value}),
        )?)
    };
    for (client, name, value) in [
        (&host.client, "urgent", 1000),
        (&host.client, "host-only", 500),
        (&leaf.client, "urgent", 700),
    ] {
        Api::<PriorityClass>::all(client.clone())
            .create(&PostParams::default(), &class(name, value)?)
            .await?;
    }
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    wait_ready(&nodes, "mcsched-east", "True", Duration::from_secs(120))
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    for (name, class) in [("keeps", "urgent"), ("drops", "host-only")] {
        let mut p = pod(name, "100m", None);
        p["spec"]["priorityClassName"] = json!(class);
        p["spec"]["tolerations"] = json!([{"key": keys::LEAF_TAINT, "operator": "Exists"}]);
        p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "mcsched-east"});
        pods.create(&PostParams::default(), &serde_json::from_value(p)?)
            .await?;
    }
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let copy = |name: &'static str| {
        let leaf_pods = leaf_pods.clone();
        async move {
            Ok(leaf_pods
                .get_opt(name)
                .await?
                .and_then(|p| p.spec)
                .map(|s| (s.priority_class_name, s.priority)))
        }
    };
    let kept = wait::until(TIMEOUT, "the leaf copy of default/keeps", || copy("keeps"))
        .await
        .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(kept, (Some("urgent".to_string()), Some(700)));
    let dropped = wait::until(TIMEOUT, "the leaf copy of default/drops", || copy("drops")).await?;
    assert_eq!(dropped, (None, Some(0)));
    let warnings = wait::until(TIMEOUT, "the PriorityClassNotInLeaf warning", || async {
        let notes = events_of(&host.client, "drops", "PriorityClassNotInLeaf").await?;
        Ok((!notes.is_empty()).then_some(notes))
    })
    .await?;
    assert!(
        warnings[0].contains("leaf cluster east has no PriorityClass host-only"),
        "{warnings:?}"
    );
    assert!(
        events_of(&host.client, "keeps", "PriorityClassNotInLeaf")
            .await?
            .is_empty()
    );
    Ok(())
}

/// Preemption across clusters: a high-priority pod preempts a lower-priority host pod that
/// runs in the leaf — the dry run takes the victim's copy out of the leaf's view, so the
/// room its eviction makes there counts — then takes its place in the leaf.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_preempts_onto_a_virtual_node() -> anyhow::Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let mut cps =
        ControlPlane::start_many(&["pre-host", "pre-east"], ControlPlaneOptions::full()).await?;
    let leaf = cps.pop().ok_or_else(|| anyhow::anyhow!("no leaf"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;
    node(
        &leaf.client,
        "east-1",
        "2",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    for (name, value) in [("low", 100), ("high", 1000)] {
        let pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?;
        Api::<PriorityClass>::all(host.client.clone())
            .create(&PostParams::default(), &pc)
            .await?;
    }
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    wait_ready(&nodes, "mcsched-east", "True", Duration::from_secs(120))
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let create = |name: &str, class: &str| -> anyhow::Result<Pod> {
        let mut p = pod(name, "1500m", None);
        p["spec"]["priorityClassName"] = json!(class);
        p["spec"]["tolerations"] = json!([{"key": keys::LEAF_TAINT, "operator": "Exists"}]);
        Ok(serde_json::from_value(p)?)
    };
    let running = |name: &'static str| {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt(name)
                .await?
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .and_then(|p| p.spec)
                .and_then(|s| s.node_name))
        }
    };
    pods.create(&PostParams::default(), &create("victim", "low")?)
        .await?;
    let node = wait::until(TIMEOUT, "default/victim Running in the leaf", || {
        running("victim")
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(node, "mcsched-east");

    pods.create(&PostParams::default(), &create("urgent", "high")?)
        .await?;
    let node = wait::until(
        Duration::from_secs(120),
        "default/urgent Running in the leaf in the victim's place",
        || running("urgent"),
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(node, "mcsched-east");
    assert!(
        pods.get_opt("victim").await?.is_none(),
        "the victim is still there"
    );
    let preempted = events_of(&host.client, "victim", "Preempted").await?;
    assert!(
        preempted
            .iter()
            .any(|n| n.starts_with("Preempted by pod") && n.contains("on node mcsched-east")),
        "{preempted:?}"
    );
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    assert!(leaf_pods.get_opt("victim").await?.is_none());
    assert!(leaf_pods.get_opt("urgent").await?.is_some());
    Ok(())
}

/// The leaf's admission and its own pods decide too: east's namespace ResourceQuota is
/// used up by a pod of east's own, and west's only node runs a database the new pod's
/// required anti-affinity excludes. Both leaves are refused by the leaf check with their
/// reasons, in the FailedScheduling message and in `explain`, and nothing is created in
/// either; once east's quota has room again, the pod goes there. Then a refusal only the
/// leaf's admission knows: west refuses a ReplicaSet's pod once and is avoided for it.
#[tokio::test(flavor = "multi_thread")]
async fn leaf_quotas_and_leaf_pods_keep_a_pod_off_their_leaf() -> anyhow::Result<()> {
    let cps = ControlPlane::start_many(
        &["lq-host", "lq-east", "lq-west"],
        ControlPlaneOptions::full(),
    )
    .await?;
    let [host, east, west]: [ControlPlane; 3] = cps
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected three control planes"))?;
    node(
        &host.client,
        "host-a",
        "500m",
        json!({"kubernetes.io/hostname": "host-a"}),
    )
    .await?;
    node(
        &east.client,
        "east-1",
        "4",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    node(
        &west.client,
        "west-1",
        "4",
        json!({"kubernetes.io/hostname": "west-1"}),
    )
    .await?;

    // east: one pod allowed in default, and a pod of east's own uses it.
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(east.client.clone(), "default");
    quotas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "compute"},
                "spec": {"hard": {"pods": "1"}}}))?,
        )
        .await?;
    let east_pods: Api<Pod> = Api::namespaced(east.client.clone(), "default");
    wait::until(TIMEOUT, "east's quota counted", || async {
        let q = quotas.get("compute").await?;
        let counted = q.status.and_then(|s| s.used).is_some();
        Ok(counted.then_some(()))
    })
    .await?;
    east_pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("resident", "100m", Some("east-1")))?,
        )
        .await?;
    // west: the leaf's own database on its only node.
    let mut db = pod("db", "100m", Some("west-1"));
    db["metadata"]["labels"] = json!({"app": "db"});
    let west_pods: Api<Pod> = Api::namespaced(west.client.clone(), "default");
    west_pods
        .create(&PostParams::default(), &serde_json::from_value(db)?)
        .await?;

    mcsched_e2e::objects::join_as_join_does(&host.client, &east, "east", json!({})).await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &west, "west", json!({})).await?;
    let mut agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    for vn in ["mcsched-east", "mcsched-west"] {
        wait_ready(&nodes, vn, "True", TIMEOUT)
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }

    let mut web = pod("web", "1", None);
    web["metadata"]["labels"] = json!({"app": "web"});
    web["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}});
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    pods.create(&PostParams::default(), &serde_json::from_value(web)?)
        .await?;
    let quota_reason = "leaf cluster east would refuse the copy: ResourceQuota: exceeded quota: \
                        compute, requested: pods=1, used: pods=1, limited: pods=1";
    let affinity_reason = "leaf cluster west has no node that fits: \
                           1 node(s) didn't match pod anti-affinity rules";
    let message = wait::until(TIMEOUT, "FailedScheduling naming both leaves", || async {
        let m = failed_scheduling(&host.client, "web").await?;
        Ok(m.into_iter()
            .find(|m| m.contains(quota_reason) && m.contains(affinity_reason)))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        message.starts_with("0/3 nodes are available: "),
        "{message}"
    );

    // `explain` names each leaf's reason under LeafNodeFit, node by node.
    let http = mcsched_e2e::api::admin_https(&host)?;
    let explanation: Explanation =
        mcsched_e2e::api::explain(&http, &agent.url, "default", "web").await?;
    assert!(
        matches!(explanation.outcome, Outcome::Unschedulable { .. }),
        "{:?}",
        explanation.outcome
    );
    let leaf_reason = |vn: &str| {
        explanation
            .nodes
            .iter()
            .find(|n| n.node == vn)
            .and_then(|n| n.filters.iter().find(|f| f.plugin == "LeafNodeFit"))
            .map(|f| f.reasons.join("; "))
    };
    assert_eq!(leaf_reason("mcsched-east").as_deref(), Some(quota_reason));
    assert!(
        leaf_reason("mcsched-west").is_some_and(|r| r.starts_with(affinity_reason)),
        "{:?}",
        leaf_reason("mcsched-west")
    );
    assert!(east_pods.get_opt("web").await?.is_none(), "a copy in east");
    assert!(west_pods.get_opt("web").await?.is_none(), "a copy in west");

    // Room in east's quota: the quota's change retries the pod, which goes there.
    east_pods
        .delete("resident", &DeleteParams::default().grace_period(0))
        .await?;
    let bound = wait::until(TIMEOUT, "default/web bound", || async {
        Ok(pods.get("web").await?.spec.and_then(|s| s.node_name))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(bound, "mcsched-east");
    let copy = wait::until(TIMEOUT, "web's copy in east", || async {
        Ok(east_pods.get_opt("web").await?)
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    // The copy keeps its node-level anti-affinity for east's scheduler.
    assert!(
        copy.spec
            .and_then(|s| s.affinity)
            .and_then(|a| a.pod_anti_affinity)
            .is_some()
    );
    assert!(west_pods.get_opt("web").await?.is_none(), "a copy in west");

    // A refusal the leaf check cannot see: west's ValidatingAdmissionPolicy denies pods
    // labelled app=refused. A ReplicaSet's pod prefers west, is refused there, and is
    // deleted for its owner to recreate; west is then avoided for that owner, so the new
    // pod goes to east at once: one refusal, no loop.
    quotas
        .patch(
            "compute",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "10"}}})),
        )
        .await?;
    deny_label_in(&west, "app", "refused").await?;
    let rs: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "refused", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "refused"}},
            "template": {"metadata": {"labels": {"app": "refused"}}, "spec": {
                "schedulerName": "mcsched",
                "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": {"matchExpressions": [
                        {"key": keys::CLUSTER_LABEL, "operator": "In", "values": ["west"]}]}}]}},
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}}
    }))?;
    Api::<k8s_openapi::api::apps::v1::ReplicaSet>::namespaced(host.client.clone(), "default")
        .create(&PostParams::default(), &rs)
        .await?;
    let (name, node) = wait::until(TIMEOUT, "a pod of refused bound in east", || async {
        let list = pods
            .list(&ListParams::default().labels("app=refused"))
            .await?;
        Ok(list.items.into_iter().find_map(|p| {
            let node = p.spec.and_then(|s| s.node_name)?;
            (node == "mcsched-east" && p.metadata.deletion_timestamp.is_none())
                .then(|| (p.metadata.name.unwrap_or_default(), node))
        }))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(node, "mcsched-east");
    wait::until(TIMEOUT, "the refused pod's copy in east", || async {
        Ok(east_pods.get_opt(&name).await?)
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let events: Api<Event> = Api::namespaced(host.client.clone(), "default");
    // Pod name → what its LeafRefused events said (one pass may meet a refusal twice
    // before the deletion is seen; a loop refuses more than one pod).
    let mut refusals: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events.list(&ListParams::default()).await?.items {
        let pod = e.regarding.as_ref().and_then(|r| r.name.clone());
        if let (Some("LeafRefused"), Some(pod), Some(note)) = (e.reason.as_deref(), pod, e.note)
            && pod.starts_with("refused-")
        {
            refusals.entry(pod).or_default().push(note);
        }
    }
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(
        refusals
            .values()
            .flatten()
            .any(|n| n.contains("leaf cluster west")
                && n.contains("west is avoided for the owner's pods for 300s")),
        "{refusals:?}"
    );
    assert!(
        west_pods
            .list(&ListParams::default().labels("app=refused"))
            .await?
            .items
            .is_empty(),
        "a copy in west"
    );
    // The replacement's explanation says why west was passed over.
    let explanation: Explanation =
        mcsched_e2e::api::explain(&http, &agent.url, "default", &name).await?;
    let west_reason = explanation
        .nodes
        .iter()
        .find(|n| n.node == "mcsched-west")
        .and_then(|n| n.filters.iter().find(|f| f.plugin == "LeafNodeFit"))
        .map(|f| f.reasons.join("; "));
    assert_eq!(
        west_reason.as_deref(),
        Some("leaf cluster west is avoided for a while: it refused this owner's pods"),
        "{explanation:?}"
    );
    agent.stop();
    Ok(())
}

/// A ValidatingAdmissionPolicy in `leaf` denying pods labelled `key=value`, once it is
/// in force (a dry-run create of such a pod is refused).
async fn deny_label_in(leaf: &ControlPlane, key: &str, value: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let expression = format!(
        "!has(object.metadata.labels) || !('{key}' in object.metadata.labels) || object.metadata.labels['{key}'] != '{value}'"
    );
    let vap: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": "deny-label"},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": expression,
                "message": format!("pods labelled {key}={value} are not allowed here")}]}
    }))?;
    Api::<ValidatingAdmissionPolicy>::all(leaf.client.clone())
        .create(&PostParams::default(), &vap)
        .await?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": "deny-label"},
        "spec": {"policyName": "deny-label", "validationActions": ["Deny"]}
    }))?;
    Api::<ValidatingAdmissionPolicyBinding>::all(leaf.client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe", "labels": {key: value}},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}
    }))?;
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    wait::until(TIMEOUT, "the leaf's admission policy in force", || async {
        let answer = leaf_pods
            .create(&PostParams { dry_run: true, ..Default::default() }, &probe)
            .await;
        let refused = matches!(&answer, Err(kube::Error::Api(s)) if s.message.contains("are not allowed here"));
        Ok(refused.then_some(()))
    })
    .await
}
