//! Per-cluster overrides of leaf copies, end to end: a host (one node, `host-a`, with a
//! local volume of class `local-wffc`) and two leaves joined the way `join` leaves them —
//! east (region us, one 2-CPU node) and west (region eu, one 4-CPU node whose local volume
//! is of class `standard`) — the policy CRDs as `install` renders them, and the agent.
//!
//! - Kosmos's MySQL shape (required anti-affinity on the hostname, a WaitForFirstConsumer
//!   claim per replica): one replica on the host's volume, the other in west only because
//!   an override maps the host's class to west's; the leaf's claim copy has that class and
//!   is bound to west's volume.
//! - An image override for the eu region: the copy in west pulls from the mirror.
//! - An override raising requests for east: east's node no longer fits, the pod goes
//!   elsewhere at once, and `explain` says east was judged with the raised requests.
//! - An override that cannot apply is refused, naming its field.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::PostParams;
use kube::{Api, Client};
use mcsched_e2e::objects::list_or_empty;
use mcsched_e2e::placement::{agent_with_policies, policy};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn class_and_volume(client: &Client, class: &str, node: &str) -> anyhow::Result<()> {
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": class},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer"}))?,
        )
        .await?;
    Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": format!("pv-{node}")}, "spec": {
                "storageClassName": class, "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/data"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}))?,
        )
        .await?;
    Ok(())
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The node pod `name` is bound to, once it is.
async fn bound(pods: &Api<Pod>, name: &str, agent: &Agent) -> anyhow::Result<String> {
    let found = wait::until(TIMEOUT, &format!("{name} bound"), || async {
        Ok(pods.get_opt(name).await?.as_ref().and_then(node_of))
    })
    .await;
    match found {
        Ok(node) => Ok(node),
        // The host's pods and volumes last, where a truncated log still shows them.
        Err(e) => Err(e.context(format!("{}\n{}", agent.logs(), volume_state(pods).await))),
    }
}

/// The host's pods, claims and volumes in `default`, one line each: what a placement
/// that never came was up against.
async fn volume_state(pods: &Api<Pod>) -> String {
    let client = pods.clone().into_client();
    let mut lines = Vec::new();
    for p in list_or_empty(pods).await {
        lines.push(format!(
            "pod {} node={:?} phase={:?} deleting={}",
            p.metadata.name.clone().unwrap_or_default(),
            node_of(&p),
            p.status.as_ref().and_then(|s| s.phase.clone()),
            p.metadata.deletion_timestamp.is_some()
        ));
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    for c in list_or_empty(&claims).await {
        lines.push(format!(
            "claim {} volume={:?} annotations={:?}",
            c.metadata.name.clone().unwrap_or_default(),
            c.spec.as_ref().and_then(|s| s.volume_name.clone()),
            c.metadata.annotations.unwrap_or_default()
        ));
    }
    let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client);
    for v in list_or_empty(&volumes).await {
        lines.push(format!(
            "volume {} phase={:?} claimRef={:?}",
            v.metadata.name.clone().unwrap_or_default(),
            v.status.as_ref().and_then(|s| s.phase.clone()),
            v.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .map(|r| (r.name.clone(), r.uid.clone()))
        ));
    }
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn overrides_adapt_leaf_copies_and_the_leaf_check_judges_them() -> anyhow::Result<()> {
    let cps = ControlPlane::start_many(
        &["ov-host", "ov-east", "ov-west"],
        ControlPlaneOptions::full(),
    )
    .await?;
    let [host, east, west]: [ControlPlane; 3] = cps
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected three control planes"))?;
    for (cp, node, cpu) in [
        (&host, "host-a", "4"),
        (&east, "east-1", "2"),
        (&west, "west-1", "4"),
    ] {
        mcsched_e2e::objects::ready_node(
            &cp.client,
            node,
            cpu,
            "8Gi",
            json!({"kubernetes.io/hostname": node}),
        )
        .await?;
    }
    class_and_volume(&host.client, "local-wffc", "host-a").await?;
    class_and_volume(&west.client, "standard", "west-1").await?;
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &east,
        "east",
        json!({keys::REGION_LABEL: "us"}),
    )
    .await?;
    mcsched_e2e::objects::join_as_join_does(
        &host.client,
        &west,
        "west",
        json!({keys::REGION_LABEL: "eu"}),
    )
    .await?;
    let mut agent = agent_with_policies(&host, &["mcsched-east", "mcsched-west"], TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");

    // An override that cannot apply: the agent keeps the policy's pods Pending and its
    // status names the field (the schema already refuses an unknown operator).
    // Sent as it is, as kubectl would: the typed client could not even express it.
    let resource = kube::api::ApiResource::erase::<mcsched_shared::policy::PlacementPolicy>(&());
    let raw: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy.mcsched.io/v1alpha1", "kind": "PlacementPolicy",
        "metadata": {"name": "bad-op", "namespace": "default"},
        "spec": {"podSelector": {"matchLabels": {"app": "none"}},
                 "overrides": [{"image": [{"component": "Tag", "operator": "rename", "value": "1"}]}]}}))?;
    let refused =
        Api::<kube::api::DynamicObject>::namespaced_with(host.client.clone(), "default", &resource)
            .create(&PostParams::default(), &raw)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
    assert!(
        refused.contains("spec.overrides[0].image[0].operator"),
        "{refused}"
    );
    policy(
        &host.client,
        "bad-tag",
        json!({"podSelector": {"matchLabels": {"app": "none"}},
               "overrides": [{"image": [{"component": "Tag", "operator": "replace", "value": "a/b"}]}]}),
    )
    .await?;
    let policies: Api<mcsched_shared::policy::PlacementPolicy> =
        Api::namespaced(host.client.clone(), "default");
    let message = wait::until(TIMEOUT, "bad-tag's Ready condition", || async {
        let p = policies.get("bad-tag").await?;
        Ok(p.status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.status == "False")
            .map(|c| c.message))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        message.contains("spec.overrides[0].image[0].value"),
        "{message}"
    );

    // MySQL: one replica on the host's volume, the other in west through the class map.
    policy(
        &host.client,
        "mysql",
        json!({"podSelector": {"matchLabels": {"app": "mysql"}},
               "overrides": [{"target": {"clusterNames": ["west"]},
                              "storageClasses": {"local-wffc": "standard"}}]}),
    )
    .await?;
    mcsched_e2e::objects::kosmos_mysql(&host.client, "mcsched").await?;
    let mut placed = Vec::new();
    for name in ["mysql-0", "mysql-1"] {
        placed.push(bound(&pods, name, &agent).await?);
    }
    let mut sorted = placed.clone();
    sorted.sort();
    assert_eq!(sorted, ["host-a", "mcsched-west"], "{}", agent.logs());
    let in_leaf = if placed[0] == "mcsched-west" {
        "mysql-0"
    } else {
        "mysql-1"
    };
    let claim = format!("data-{in_leaf}");
    let leaf_claims: Api<PersistentVolumeClaim> = Api::namespaced(west.client.clone(), "default");
    let copy = wait::until(TIMEOUT, "west's claim copy bound", || async {
        Ok(leaf_claims.get_opt(&claim).await?.filter(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.volume_name.as_ref())
                .is_some()
        }))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let spec = copy.spec.unwrap_or_default();
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(spec.volume_name.as_deref(), Some("pv-west-1"));
    let leaf_pods: Api<Pod> = Api::namespaced(west.client.clone(), "default");
    wait::until(TIMEOUT, "the MySQL copy Running in west", || async {
        Ok(leaf_pods
            .get_opt(in_leaf)
            .await?
            .filter(running)
            .map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    // The eu mirror: an image override for the region's clusters.
    policy(
        &host.client,
        "web",
        json!({"podSelector": {"matchLabels": {"app": "web"}},
               "clusterAffinity": {"clusterNames": ["west"]},
               "overrides": [{"target": {"labelSelector": {"matchLabels": {keys::REGION_LABEL: "eu"}}},
                              "image": [{"component": "Registry", "operator": "replace", "value": "mirror.eu.example"}]}]}),
    )
    .await?;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"schedulerName": "mcsched", "containers": [{"name": "web", "image": "nginx:1.27",
                "resources": {"requests": {"cpu": "100m"}}}]}}))?,
    )
    .await?;
    assert_eq!(bound(&pods, "web", &agent).await?, "mcsched-west");
    let copy = wait::until(TIMEOUT, "the web copy in west", || async {
        leaf_pods.get_opt("web").await.map_err(Into::into)
    })
    .await?;
    let image = copy
        .spec
        .map(|s| s.containers[0].image.clone().unwrap_or_default());
    assert_eq!(image.as_deref(), Some("mirror.eu.example/nginx:1.27"));
    // The host pod keeps its own image.
    let host_image = pods
        .get("web")
        .await?
        .spec
        .map(|s| s.containers[0].image.clone().unwrap_or_default());
    assert_eq!(host_image.as_deref(), Some("nginx:1.27"));
    // Explain says what the override changed in west's copy.
    let http = mcsched_e2e::api::admin_https(&host)?;
    let explanation = mcsched_e2e::api::explain(&http, &agent.url, "default", "web").await?;
    let notes = explanation
        .nodes
        .iter()
        .find(|n| n.node == "mcsched-west")
        .map(|n| n.leaf_notes.clone())
        .unwrap_or_default();
    assert_eq!(
        notes,
        [
            "PlacementPolicy default/web overrides image web: nginx:1.27 → mirror.eu.example/nginx:1.27"
        ]
    );

    // Requests raised for east: east's 2-CPU node no longer fits, so the pod goes to the
    // next group at once, and explain says east was judged with the raised requests.
    policy(
        &host.client,
        "batch",
        json!({"podSelector": {"matchLabels": {"app": "batch"}},
               "clusterGroups": [{"name": "first", "clusterNames": ["east"]},
                                 {"name": "then", "clusterNames": ["west"]}],
               "overrides": [{"target": {"clusterNames": ["east"]},
                              "resources": [{"requests": {"cpu": "3"}}]}]}),
    )
    .await?;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "batch", "labels": {"app": "batch"}},
            "spec": {"schedulerName": "mcsched", "containers": [{"name": "job", "image": "pause",
                "resources": {"requests": {"cpu": "1"}}}]}}),
        )?,
    )
    .await?;
    assert_eq!(
        bound(&pods, "batch", &agent).await?,
        "mcsched-west",
        "{}",
        agent.logs()
    );
    let east_says = |e: &mcsched_shared::explain::Explanation| {
        e.nodes
            .iter()
            .find(|n| n.node == "mcsched-east")
            .map(|n| format!("{:?}", n))
            .unwrap_or_default()
    };
    let explanation = mcsched_e2e::api::explain(&http, &agent.url, "default", "batch").await?;
    let said = east_says(&explanation);
    assert!(
        said.contains("Insufficient cpu")
            && said.contains("PlacementPolicy default/batch overrides requests job: cpu=1 → cpu=3"),
        "{said}"
    );
    // A what-if of the same manifest is judged the same way, overrides applied.
    let what_if = mcsched_e2e::api::what_if(
        &http,
        &agent.url,
        "default",
        &json!({"metadata": {"name": "batch-2", "labels": {"app": "batch"}},
            "spec": {"schedulerName": "mcsched", "containers": [{"name": "job", "image": "pause",
                "resources": {"requests": {"cpu": "1"}}}]}}),
    )
    .await?;
    let said = east_says(&what_if);
    assert!(
        said.contains("overrides requests job: cpu=1 → cpu=3"),
        "{said}"
    );
    let west_notes = explanation
        .nodes
        .iter()
        .find(|n| n.node == "mcsched-west")
        .map(|n| n.leaf_notes.clone())
        .unwrap_or_default();
    assert!(
        west_notes.is_empty(),
        "no override targets west: {west_notes:?}"
    );
    agent.stop();
    Ok(())
}
