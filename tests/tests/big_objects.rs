//! Objects near the API server's size limit sent to a leaf: pods that mount a ConfigMap
//! and a Secret of nearly 1 MiB each (the API server's limit on their data). The limit
//! on pods is measured on the leaf first: the largest pod of the same shape its API
//! server stores (etcd refuses a request over its --max-request-bytes, 1.5 MiB by
//! default; the API server passes that on as a 500). Then
//!
//! - a pod that limit minus 16 KiB (room for mcsched's marks, the leaf's binding and the
//!   copy's status): copied whole, its ConfigMap and Secret with it, Running;
//! - the same pod under a PlacementPolicy whose env override for the leaf adds 32 KiB:
//!   its copy is over the leaf's limit, though the host pod binds. Copied whole, or
//!   refused with a Warning event naming the pod and its size and nothing of it left in
//!   the leaf — no copy, no ConfigMap or Secret copied for it alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
/// The API server's limit on a ConfigMap's or a Secret's data (validation's
/// MaxSecretSize, 1 MiB), minus room for the key.
const DATA_BYTES: usize = 1024 * 1024 - 1024;
/// How far under the measured limit the pods are.
const MARGIN: usize = 16 * 1024;
/// What the second pod's override adds to its copy.
const PAD: usize = 32 * 1024;

/// A bare pod bound for leaf `east`, mounting ConfigMap `cm` and Secret `secret`, with
/// one environment value of `value_len` bytes: its size.
fn big_pod(name: &str, value_len: usize, cm: &str, secret: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "schedulerName": "mcsched",
            "nodeSelector": {keys::CLUSTER_LABEL: "east"},
            "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
            "volumes": [
                {"name": "cm", "configMap": {"name": cm}},
                {"name": "secret", "secret": {"secretName": secret}}
            ],
            "containers": [{
                "name": "c", "image": "pause",
                "env": [{"name": "BIG", "value": "x".repeat(value_len)}],
                "volumeMounts": [
                    {"name": "cm", "mountPath": "/cm"},
                    {"name": "secret", "mountPath": "/secret"}
                ]
            }]
        }
    })
}

fn json_len(v: &impl serde::Serialize) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0)
}

/// What the API server of a cluster stores of a pod of [`big_pod`]'s shape.
struct Limit {
    /// The longest environment value it stores (to 64 bytes).
    fits: usize,
    /// Its answer to one 64 bytes longer.
    refusal: String,
    /// Its answer to the deletion of a probe that fits, when it refused it (an update
    /// to mark it deleted grows it past the limit).
    delete_refusal: Option<String>,
}

/// Measures [`Limit`]: each probe is created under a name of its own in a namespace of
/// its own (no scheduler takes it), and deleted when the API server lets it be.
async fn limit(client: &Client) -> anyhow::Result<Limit> {
    mcsched_e2e::objects::namespace(client, "size-probe").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "size-probe");
    let (mut fits, mut refused) = (1024 * 1024, 2 * 1024 * 1024);
    let (mut refusal, mut delete_refusal) = (String::new(), None);
    while refused - fits > 64 {
        let mid = (fits + refused) / 2;
        let name = format!("probe-{mid}");
        let mut p = big_pod(&name, mid, "cm", "secret");
        p["metadata"]["namespace"] = json!("size-probe");
        // No scheduler takes it: a binding would grow it.
        p["spec"]["schedulerName"] = json!("nobody");
        let p: Pod = serde_json::from_value(p)?;
        match pods.create(&PostParams::default(), &p).await {
            Ok(_) => {
                fits = mid;
                if let Err(kube::Error::Api(s)) = pods
                    .delete(&name, &DeleteParams::default().grace_period(0))
                    .await
                {
                    delete_refusal = Some(format!("{} {}: {}", s.code, s.reason, s.message));
                }
            }
            Err(kube::Error::Api(s)) => {
                refused = mid;
                refusal = format!("{} {}: {}", s.code, s.reason, s.message);
            }
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::ensure!(!refusal.is_empty(), "no pod up to 2 MiB was refused");
    Ok(Limit {
        fits,
        refusal,
        delete_refusal,
    })
}

async fn create<K>(client: &Client, object: serde_json::Value) -> anyhow::Result<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    Ok(Api::<K>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?)
}

/// A ConfigMap and a Secret of nearly 1 MiB of data each.
async fn dependents(client: &Client, cm: &str, secret: &str) -> anyhow::Result<()> {
    create::<ConfigMap>(
        client,
        json!({"metadata": {"name": cm}, "data": {"k": "c".repeat(DATA_BYTES)}}),
    )
    .await?;
    create::<Secret>(
        client,
        json!({"metadata": {"name": secret}, "stringData": {"k": "s".repeat(DATA_BYTES)}}),
    )
    .await?;
    Ok(())
}

/// The Warning events on host pod `name`, as `reason: message`.
async fn warnings(client: &Client, name: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    Ok(events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name},type=Warning")))
        .await?
        .items
        .into_iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_near_the_size_limit_are_copied_whole_or_refused_with_nothing_left_behind()
-> anyhow::Result<()> {
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start("big-host", ControlPlaneOptions::full()),
        ControlPlane::start("big-east", ControlPlaneOptions::full()),
    )?;
    mcsched_e2e::objects::ready_node(
        &leaf.client,
        "east-1",
        "8",
        "16Gi",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    let leaf_limit = limit(&leaf.client).await?;
    let limit = leaf_limit.fits;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    mcsched_e2e::placement::install_crds(&host.client).await?;
    let agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "big",
        &["--leaf-unused-copy-grace=3"],
    )?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, "mcsched-east", "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let host_pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let leaf_cms: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), "default");
    let leaf_secrets: Api<Secret> = Api::namespaced(leaf.client.clone(), "default");

    // Under the limit by MARGIN: copied whole, Running from its copy.
    dependents(&host.client, "cm-a", "secret-a").await?;
    create::<Pod>(
        &host.client,
        big_pod("big-a", limit - MARGIN, "cm-a", "secret-a"),
    )
    .await?;
    wait::until(TIMEOUT, "big-a Running from its copy", || async {
        let p = host_pods.get("big-a").await?;
        Ok((p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let host_a = host_pods.get("big-a").await?;
    let copy_a = leaf_pods.get("big-a").await?;
    let env_len = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.env.as_ref())
            .and_then(|e| e.first())
            .and_then(|e| e.value.as_ref())
            .map_or(0, String::len)
    };
    assert_eq!(
        env_len(&copy_a),
        limit - MARGIN,
        "big-a's copy keeps its value"
    );
    let cm = leaf_cms.get("cm-a").await?;
    assert_eq!(
        cm.data.and_then(|d| d.get("k").map(String::len)),
        Some(DATA_BYTES),
        "cm-a copied whole"
    );
    let s = leaf_secrets.get("secret-a").await?;
    assert_eq!(
        s.data.and_then(|d| d.get("k").map(|b| b.0.len())),
        Some(DATA_BYTES),
        "secret-a copied whole"
    );
    let (host_len, copy_len) = (json_len(&host_a), json_len(&copy_a));

    // The same size, its copy grown past the leaf's limit by its policy's override.
    mcsched_e2e::placement::policy(
        &host.client,
        "pad",
        json!({"podSelector": {"matchLabels": {"app": "big-b"}},
               "overrides": [{"target": {"clusterNames": ["east"]},
                              "env": [{"operator": "add", "name": "PAD",
                                       "value": "p".repeat(PAD)}]}]}),
    )
    .await?;
    let b_len = limit - MARGIN;
    dependents(&host.client, "cm-b", "secret-b").await?;
    create::<Pod>(&host.client, big_pod("big-b", b_len, "cm-b", "secret-b")).await?;
    let refused = wait::until(TIMEOUT, "big-b Running or refused", || async {
        let p = host_pods.get("big-b").await?;
        if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
            return Ok(Some(None));
        }
        Ok(warnings(&host.client, "big-b")
            .await?
            .into_iter()
            .find(|w| w.contains("too large"))
            .map(Some))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let outcome = match &refused {
        None => {
            let copy = leaf_pods.get("big-b").await?;
            assert_eq!(env_len(&copy), b_len, "big-b's copy keeps its value");
            assert!(json_len(&copy) > json_len(&copy_a) + PAD / 2, "padded");
            let cm = leaf_cms.get("cm-b").await?;
            assert_eq!(
                cm.data.and_then(|d| d.get("k").map(String::len)),
                Some(DATA_BYTES)
            );
            let s = leaf_secrets.get("secret-b").await?;
            assert_eq!(
                s.data.and_then(|d| d.get("k").map(|b| b.0.len())),
                Some(DATA_BYTES)
            );
            "copied whole".to_string()
        }
        Some(refused) => {
            assert!(
                refused.contains("default/big-b") && refused.contains("bytes"),
                "the refusal names the pod and its size: {refused}"
            );
            // Past the unused-copy grace (3 s) and a reconcile round (30 s): nothing of
            // big-b in the leaf, and no dependent copied for it alone.
            tokio::time::sleep(Duration::from_secs(35)).await;
            let left: Vec<&str> = [
                leaf_pods.get_opt("big-b").await?.map(|_| "pod big-b"),
                leaf_cms.get_opt("cm-b").await?.map(|_| "ConfigMap cm-b"),
                leaf_secrets
                    .get_opt("secret-b")
                    .await?
                    .map(|_| "Secret secret-b"),
            ]
            .into_iter()
            .flatten()
            .collect();
            assert!(
                left.is_empty(),
                "left in the leaf for a pod refused there: {left:?}\n{}",
                agent.logs()
            );
            format!("refused ({refused}), nothing of it left in the leaf")
        }
    };
    // big-a is untouched by big-b's fate.
    assert!(leaf_cms.get_opt("cm-a").await?.is_some());
    assert!(leaf_pods.get_opt("big-a").await?.is_some());
    println!(
        "big objects: the leaf stores a pod of this shape up to an env value of {limit} bytes, \
         one longer refused with {:?}, the deletion of one that fits {:?}; big-a ({host_len} \
         bytes as served on the host, its copy {copy_len}) copied whole with a ConfigMap and \
         a Secret of {DATA_BYTES} bytes each; big-b ({b_len}-byte value, its copy {PAD} bytes \
         more): {outcome}",
        leaf_limit.refusal,
        leaf_limit.delete_refusal.as_deref().unwrap_or("answered")
    );
    Ok(())
}
