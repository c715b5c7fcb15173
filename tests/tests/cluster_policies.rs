//! Cluster policies against real API servers: a host and two leaves (west: eu-west,
//! on-premises, cost 5; east: us-east, aws, cost 1), both joined the way `kubectl
//! mcsched join` leaves them, and one agent running every profile of
//! `shared/testdata/config/cluster-policies-v1.yaml`. In sequence: nodeAffinity on the
//! virtual nodes' labels (by name, by label, by exclusion), topologySpreadConstraints
//! over regions, ClusterWeights 2:1 over a ReplicaSet of 30, ClusterCost, ClusterTiers,
//! ClusterCapacity Dynamic and Aggregated.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, placement, wait};
use mcsched_shared::explain::{Explanation, Outcome};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn node(
    client: &Client,
    name: &str,
    cpu: &str,
    labels: serde_json::Value,
) -> anyhow::Result<()> {
    mcsched_e2e::objects::ready_node(client, name, cpu, "32Gi", labels).await
}

/// A pod of profile `scheduler` requesting `cpu` (nothing when empty), with `extra`
/// merged into its spec.
fn pod(name: &str, scheduler: &str, cpu: &str, extra: serde_json::Value) -> serde_json::Value {
    let requests = if cpu.is_empty() {
        json!({})
    } else {
        json!({"cpu": cpu})
    };
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"test": name}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": requests}}]
        }
    });
    if let (Some(spec), Some(extra)) = (p["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    p
}

/// Required node affinity: `key operator values`.
fn affinity(key: &str, operator: &str, values: &[&str]) -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": operator, "values": values}]}]
    }}}})
}

async fn create(pods: &Api<Pod>, p: serde_json::Value) -> anyhow::Result<()> {
    pods.create(&PostParams::default(), &serde_json::from_value(p)?)
        .await?;
    Ok(())
}

/// The node each of `names` is bound to, once all are.
async fn bound(pods: &Api<Pod>, names: &[String], agent: &Agent) -> anyhow::Result<Vec<String>> {
    wait::until(TIMEOUT, &format!("{names:?} bound"), || async {
        let mut nodes = Vec::new();
        for n in names {
            match pods.get(n).await?.spec.and_then(|s| s.node_name) {
                Some(node) => nodes.push(node),
                None => return Ok(None),
            }
        }
        Ok(Some(nodes))
    })
    .await
    .map_err(|e| e.context(agent.logs()))
}

/// How many of `pods` sit on each node.
fn per_node<'a>(nodes: impl IntoIterator<Item = &'a String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for n in nodes {
        *counts.entry(n.clone()).or_default() += 1;
    }
    counts
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_policies_on_a_host_and_two_leaves() -> anyhow::Result<()> {
    let mut cps = ControlPlane::start_many(
        &["cp-host", "cp-west", "cp-east"],
        ControlPlaneOptions::full(),
    )
    .await?;
    let east = cps.pop().ok_or_else(|| anyhow::anyhow!("no east"))?;
    let west = cps.pop().ok_or_else(|| anyhow::anyhow!("no west"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;

    // One roomy node per leaf; one host node with room for two 1-CPU pods.
    node(
        &west.client,
        "west-1",
        "16",
        json!({"kubernetes.io/hostname": "west-1"}),
    )
    .await?;
    node(
        &east.client,
        "east-1",
        "16",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    node(
        &host.client,
        "host-a",
        "2",
        json!({"kubernetes.io/hostname": "host-a"}),
    )
    .await?;
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &west,
        "west",
        json!({keys::REGION_LABEL: "eu-west", keys::PROVIDER_LABEL: "onprem", keys::COST_LABEL: "5"}),
    )
    .await?;
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &east,
        "east",
        json!({keys::REGION_LABEL: "us-east", keys::PROVIDER_LABEL: "aws", keys::COST_LABEL: "1"}),
    )
    .await?;
    let config = mcsched_e2e::repo_root().join("shared/testdata/config/cluster-policies-v1.yaml");
    let config = format!("--config={}", config.display());
    let mut agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "policies",
        &[&config],
    )?;

    // Both leaves connected: their virtual nodes show the leaf's room and are Ready.
    let nodes: Api<Node> = Api::all(host.client.clone());
    for vn in ["mcsched-west", "mcsched-east"] {
        let waited = wait::until(
            TIMEOUT,
            &format!("{vn} Ready with the leaf's room"),
            || async {
                let n = nodes.get(vn).await?;
                let st = n.status.unwrap_or_default();
                let cpu = st
                    .allocatable
                    .as_ref()
                    .and_then(|a| a.get("cpu"))
                    .map(|q| q.0.clone());
                let ready = st
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                Ok((ready && cpu.as_deref() == Some("16")).then_some(()))
            },
        )
        .await;
        if let Err(e) = waited {
            let seen = nodes.get(vn).await.map(|n| n.status).ok();
            return Err(e.context(format!("{}\n{vn}: {seen:?}", agent.logs())));
        }
    }
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");

    // 1. By cluster name, label or exclusion: nodeAffinity on the virtual nodes' labels.
    create(
        &pods,
        pod(
            "to-west",
            "mcsched",
            "",
            affinity(keys::CLUSTER_LABEL, "In", &["west"]),
        ),
    )
    .await?;
    create(
        &pods,
        pod(
            "in-us",
            "mcsched",
            "",
            affinity(keys::REGION_LABEL, "In", &["us-east"]),
        ),
    )
    .await?;
    let not_west = names("not-west", 6);
    for n in &not_west {
        create(
            &pods,
            pod(
                n,
                "mcsched",
                "",
                affinity(keys::CLUSTER_LABEL, "NotIn", &["west"]),
            ),
        )
        .await?;
    }
    let placed = bound(&pods, &["to-west".into(), "in-us".into()], &agent).await?;
    assert_eq!(placed, ["mcsched-west", "mcsched-east"]);
    let placed = bound(&pods, &not_west, &agent).await?;
    assert!(
        placed.iter().all(|n| n == "host-a" || n == "mcsched-east"),
        "NotIn [west] placed on {placed:?}"
    );

    // 2. Spread over regions: 4 replicas, maxSkew 1 on the region label → 2 and 2. The
    // host node has no region, so DoNotSchedule leaves it out.
    let spread = names("spread", 4);
    for n in &spread {
        let mut p = pod(
            n,
            "mcsched",
            "",
            json!({"topologySpreadConstraints": [{
                "maxSkew": 1,
                "topologyKey": keys::REGION_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "spread"}}
            }]}),
        );
        p["metadata"]["labels"] = json!({"app": "spread"});
        create(&pods, p).await?;
    }
    let placed = bound(&pods, &spread, &agent).await?;
    assert_eq!(
        per_node(&placed),
        BTreeMap::from([("mcsched-east".into(), 2), ("mcsched-west".into(), 2)])
    );

    // 3. ClusterWeights west:2, east:1 over a ReplicaSet of 30 (kube-controller-manager
    // creates the pods): 20 and 10, one either way.
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "weighted", "namespace": "default"},
        "spec": {
            "replicas": 30,
            "selector": {"matchLabels": {"app": "weighted"}},
            "template": {
                "metadata": {"labels": {"app": "weighted"}},
                "spec": {
                    "schedulerName": "mcsched-weights",
                    "containers": [{"name": "c", "image": "pause"}]
                }
            }
        }
    }))?;
    Api::<ReplicaSet>::namespaced(host.client.clone(), "default")
        .create(&PostParams::default(), &rs)
        .await?;
    let weighted = wait::until(TIMEOUT, "30 weighted replicas bound", || async {
        let list = pods
            .list(&ListParams::default().labels("app=weighted"))
            .await?;
        let nodes: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|p| p.spec.and_then(|s| s.node_name))
            .collect();
        Ok((nodes.len() == 30).then_some(nodes))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let counts = per_node(&weighted);
    let on = |n: &str| counts.get(n).copied().unwrap_or(0);
    assert!(
        on("mcsched-west").abs_diff(20) <= 1 && on("mcsched-east").abs_diff(10) <= 1,
        "2:1 over 30 gave {counts:?}"
    );
    assert_eq!(on("mcsched-west") + on("mcsched-east"), 30, "{counts:?}");

    // 4. ClusterCost: east (1) is cheaper than west (5) and the host (hostCost 10).
    create(&pods, pod("cheap", "mcsched-cost", "", json!({}))).await?;
    let placed = bound(&pods, &["cheap".into()], &agent).await?;
    assert_eq!(placed, ["mcsched-east"]);
    // The explanation shows the policy as a score column: raw cost, normalised, weighted.
    let http = mcsched_e2e::api::admin_https(&host)?;
    let explanation: Explanation =
        mcsched_e2e::api::explain(&http, &agent.url, "default", "cheap").await?;
    assert!(
        matches!(&explanation.outcome, Outcome::Scheduled { node, .. } if node == "mcsched-east")
    );
    let cost = |node: &str| {
        explanation
            .nodes
            .iter()
            .find(|n| n.node == node)
            .and_then(|n| n.scores.iter().find(|s| s.plugin == "ClusterCost"))
            .map(|s| (s.raw, s.normalized, s.weighted))
    };
    assert_eq!(
        cost("mcsched-east"),
        Some((1, 100, 5000)),
        "{explanation:#?}"
    );
    assert_eq!(
        cost("mcsched-west"),
        Some((5, 55, 2750)),
        "{explanation:#?}"
    );
    assert_eq!(cost("host-a"), Some((10, 0, 0)), "{explanation:#?}");

    // 5. ClusterTiers host → on-premises (west) → east: four 1-CPU pods, the host node
    // holds two, the other two overflow to west; east stays empty while west has room.
    let tiered = names("tiered", 4);
    for n in &tiered {
        create(&pods, pod(n, "mcsched-tiers", "1", json!({}))).await?;
    }
    let placed = bound(&pods, &tiered, &agent).await?;
    assert_eq!(
        per_node(&placed),
        BTreeMap::from([("host-a".into(), 2), ("mcsched-west".into(), 2)])
    );

    // 6. ClusterCapacity Dynamic: west's own 10-CPU pod and the two tiered pods leave it 4
    // CPU free, east has 16, the host none; ten 1-CPU replicas divide 4:16, so 2 and 8 (an
    // even split, 5 and 5, is what Dynamic must not do).
    let local: Pod = serde_json::from_value(json!({
        "metadata": {"name": "west-local", "namespace": "default"},
        "spec": {"nodeName": "west-1", "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": "10"}}}]}
    }))?;
    Api::<Pod>::namespaced(west.client.clone(), "default")
        .create(&PostParams::default(), &local)
        .await?;
    // Until the agent's view of west has that pod, a 5-CPU pod would still fit there.
    let probe = pod(
        "probe",
        "mcsched-capacity",
        "5",
        affinity(keys::CLUSTER_LABEL, "In", &["west"]),
    );
    wait::until(TIMEOUT, "the agent to see west's own pod", || async {
        let answer = mcsched_e2e::api::what_if(&http, &agent.url, "default", &probe).await?;
        Ok(matches!(answer.outcome, Outcome::Unschedulable { .. }).then_some(()))
    })
    .await?;
    let dynamic = replica_set(
        &host.client,
        &pods,
        "dynamic",
        10,
        "mcsched-capacity",
        &agent,
    )
    .await?;
    let counts = per_node(&dynamic);
    let on = |n: &str| counts.get(n).copied().unwrap_or(0);
    assert!(
        (1..=3).contains(&on("mcsched-west")) && (7..=9).contains(&on("mcsched-east")),
        "Dynamic 4:16 over 10 gave {counts:?}"
    );
    assert_eq!(on("mcsched-west") + on("mcsched-east"), 10, "{counts:?}");

    // 7. ClusterCapacity Aggregated: three replicas, all in one cluster.
    let packed = replica_set(
        &host.client,
        &pods,
        "packed",
        3,
        "mcsched-aggregated",
        &agent,
    )
    .await?;
    let counts = per_node(&packed);
    assert_eq!(counts.len(), 1, "Aggregated spread over {counts:?}");
    assert!(
        counts.keys().all(|n| n.starts_with("mcsched-")),
        "{counts:?}"
    );
    agent.stop();
    Ok(())
}

/// A ReplicaSet of `replicas` 1-CPU pods for profile `scheduler`; the nodes its pods are
/// bound to, once all are.
async fn replica_set(
    host: &Client,
    pods: &Api<Pod>,
    name: &str,
    replicas: usize,
    scheduler: &str,
    agent: &Agent,
) -> anyhow::Result<Vec<String>> {
    placement::replica_set_with(host, name, replicas, "1", scheduler, json!({})).await?;
    placement::bound_nodes(pods, name, replicas, TIMEOUT, agent).await
}
