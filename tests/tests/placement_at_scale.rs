//! Placement at the sizes users run: a host of 400 and then 1000 nodes (API objects, as
//! in the benchmarks) and two leaves (east: us, aws, cost 1; west: eu, onprem, cost 5),
//! joined the way `join` leaves them, the policy CRDs, and one agent running every profile
//! of `shared/testdata/config/cluster-policies-v1.yaml`. Above 100 nodes
//! percentageOfNodesToScore samples the host's nodes; every virtual node must still be
//! weighed in every cycle, so each policy kind and each profile cluster plugin places as
//! it says whatever node the rotation starts at.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use mcsched_e2e::placement::{
    explain_first, install_crds, many_nodes, placed, policy, replica_set, replica_set_with,
};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(180);

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

/// Required node affinity to the leaves' virtual nodes only.
fn leaves_only() -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": keys::CLUSTER_LABEL, "operator": "Exists"}]}]}}}})
}

#[tokio::test(flavor = "multi_thread")]
async fn every_policy_kind_places_as_it_says_at_a_thousand_host_nodes() -> anyhow::Result<()> {
    let mut cps = ControlPlane::start_many(
        &["scale-host", "scale-east", "scale-west"],
        ControlPlaneOptions::full(),
    )
    .await?;
    let west = cps.pop().ok_or_else(|| anyhow::anyhow!("no west"))?;
    let east = cps.pop().ok_or_else(|| anyhow::anyhow!("no east"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;
    for (cp, name, cpu) in [(&east, "east-1", "64"), (&west, "west-1", "32")] {
        mcsched_e2e::objects::ready_node(
            &cp.client,
            name,
            cpu,
            "256Gi",
            json!({"kubernetes.io/hostname": name}),
        )
        .await?;
    }
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &east,
        "east",
        json!({keys::REGION_LABEL: "us", keys::PROVIDER_LABEL: "aws", keys::COST_LABEL: "1"}),
    )
    .await?;
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &west,
        "west",
        json!({keys::REGION_LABEL: "eu", keys::PROVIDER_LABEL: "onprem", keys::COST_LABEL: "5"}),
    )
    .await?;
    install_crds(&host.client).await?;
    let started = std::time::Instant::now();
    many_nodes(&host.client, "host", 0..400, "4").await?;
    println!("400 host nodes created in {:?}", started.elapsed());
    let config = mcsched_e2e::repo_root().join("shared/testdata/config/cluster-policies-v1.yaml");
    let config = format!("--config={}", config.display());
    let agent = Agent::start_with(&host.kubeconfig, "mcsched", host.dir(), "scale", &[&config])?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    for vn in ["mcsched-east", "mcsched-west"] {
        mcsched_e2e::objects::wait_ready(&nodes, vn, "True", TIMEOUT)
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");

    // The scenario of the sampling bug: the leaf first, then the host; and 1:1 between
    // the leaf and the host. Run at 400 host nodes, then again at 1000.
    for size in [400, 1000] {
        if size == 1000 {
            let started = std::time::Instant::now();
            many_nodes(&host.client, "host", 400..1000, "4").await?;
            println!("600 more host nodes created in {:?}", started.elapsed());
        }
        let groups = format!("groups-{size}");
        policy(
            &host.client,
            &groups,
            json!({"podSelector": {"matchLabels": {"app": groups}},
                "clusterGroups": [{"name": "leaf", "clusterNames": ["east"]},
                                  {"name": "home", "clusterNames": ["host"]}]}),
        )
        .await?;
        replica_set(&host.client, &groups, 12, "100m").await?;
        let got = placed(&pods, &groups, 12, TIMEOUT, &agent).await?;
        assert_eq!(got, counts(&[("east", 12)]), "{groups}");

        let halves = format!("halves-{size}");
        policy(
            &host.client,
            &halves,
            json!({"podSelector": {"matchLabels": {"app": halves}},
                "division": {"type": "Weighted", "weights": {"east": 1, "host": 1}}}),
        )
        .await?;
        replica_set(&host.client, &halves, 12, "100m").await?;
        let got = placed(&pods, &halves, 12, TIMEOUT, &agent).await?;
        assert_eq!(got, counts(&[("east", 6), ("host", 6)]), "{halves}");
        println!("{size} host nodes: {groups} and {halves} placed as their policies say");
    }
    let all_nodes = nodes
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    assert_eq!(all_nodes, 1002);

    // The other policy kinds, at 1000 host nodes.
    policy(
        &host.client,
        "exclusion",
        json!({"podSelector": {"matchLabels": {"app": "exclusion"}},
            "clusterAffinity": {"exclude": ["host", "east"]}}),
    )
    .await?;
    policy(
        &host.client,
        "cheapest",
        json!({"podSelector": {"matchLabels": {"app": "cheapest"}},
            "clusterAffinity": {"clusterNames": ["east", "west"]}, "preferCheapest": true}),
    )
    .await?;
    policy(
        &host.client,
        "three-clusters",
        json!({"podSelector": {"matchLabels": {"app": "three-clusters"}},
            "spread": [{"by": "cluster", "minGroups": 3}]}),
    )
    .await?;
    policy(
        &host.client,
        "one-region",
        json!({"podSelector": {"matchLabels": {"app": "one-region"}},
            "clusterAffinity": {"clusterNames": ["east", "west"]},
            "spread": [{"by": "region", "maxGroups": 1}]}),
    )
    .await?;
    for (app, n) in [
        ("exclusion", 6),
        ("cheapest", 6),
        ("three-clusters", 3),
        ("one-region", 6),
    ] {
        replica_set(&host.client, app, n, "100m").await?;
    }
    let got = placed(&pods, "exclusion", 6, TIMEOUT, &agent).await?;
    assert_eq!(got, counts(&[("west", 6)]), "exclusion");
    let got = placed(&pods, "cheapest", 6, TIMEOUT, &agent).await?;
    assert_eq!(got, counts(&[("east", 6)]), "cheapest");
    let got = placed(&pods, "three-clusters", 3, TIMEOUT, &agent).await?;
    assert_eq!(
        got,
        counts(&[("east", 1), ("host", 1), ("west", 1)]),
        "three-clusters"
    );
    let got = placed(&pods, "one-region", 6, TIMEOUT, &agent).await?;
    assert_eq!(got.len(), 1, "one-region used {got:?}");

    // Each profile cluster plugin, no policy selecting its pods.
    replica_set_with(
        &host.client,
        "weights",
        30,
        "100m",
        "mcsched-weights",
        json!({}),
    )
    .await?;
    let got = placed(&pods, "weights", 30, TIMEOUT, &agent).await?;
    let on = |c: &str| got.get(c).copied().unwrap_or(0);
    assert!(
        on("west").abs_diff(20) <= 1 && on("east").abs_diff(10) <= 1 && on("host") == 0,
        "ClusterWeights west:2 east:1: {got:?}"
    );
    replica_set_with(&host.client, "cost", 4, "100m", "mcsched-cost", json!({})).await?;
    let got = placed(&pods, "cost", 4, TIMEOUT, &agent).await?;
    assert_eq!(got, counts(&[("east", 4)]), "ClusterCost");
    // 6 CPU fits no host node (4 CPU each): the next tier is the on-premises west.
    replica_set_with(&host.client, "tiers", 2, "6", "mcsched-tiers", json!({})).await?;
    let got = placed(&pods, "tiers", 2, TIMEOUT, &agent).await?;
    assert_eq!(got, counts(&[("west", 2)]), "ClusterTiers");
    replica_set_with(
        &host.client,
        "tiers-host",
        4,
        "1",
        "mcsched-tiers",
        json!({}),
    )
    .await?;
    let got = placed(&pods, "tiers-host", 4, TIMEOUT, &agent).await?;
    assert_eq!(got, counts(&[("host", 4)]), "ClusterTiers, host first");
    replica_set_with(
        &host.client,
        "aggregated",
        6,
        "1",
        "mcsched-aggregated",
        json!({}),
    )
    .await?;
    let got = placed(&pods, "aggregated", 6, TIMEOUT, &agent).await?;
    assert_eq!(got.len(), 1, "ClusterCapacity Aggregated used {got:?}");
    // Dynamic over the leaves only: in proportion to their free CPU.
    replica_set_with(
        &host.client,
        "dynamic",
        12,
        "2",
        "mcsched-capacity",
        leaves_only(),
    )
    .await?;
    let got = placed(&pods, "dynamic", 12, TIMEOUT, &agent).await?;
    assert!(
        on_cluster(&got, "east") > on_cluster(&got, "west") && on_cluster(&got, "west") >= 2,
        "ClusterCapacity Dynamic: {got:?}"
    );

    // explain counts the host nodes sampled and the virtual nodes apart.
    let explanation = explain_first(&host, &agent.url, &pods, "groups-1000").await?;
    assert_eq!(
        explanation.num_evaluated_virtual_nodes, 2,
        "{explanation:?}"
    );
    assert!(
        explanation.num_evaluated_nodes < explanation.num_all_nodes,
        "{} of {}: the host's nodes are sampled",
        explanation.num_evaluated_nodes,
        explanation.num_all_nodes
    );
    Ok(())
}

fn on_cluster(got: &BTreeMap<String, usize>, cluster: &str) -> usize {
    got.get(cluster).copied().unwrap_or(0)
}
