//! The leaf copies of what pods refer to (ConfigMaps, Secrets, DRA claims and their
//! templates), on real control planes: an immutable ConfigMap deleted and created again on
//! the host is replaced in the leaf, and keeps no other copy from following its host object
//! or an unused one from going; a pod's ResourceClaimTemplate and unallocated named claim
//! are copied with the marks, an allocated one refused, and the copies collected as their
//! rules say; and what the agent holds of a namespace it watches for them.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::objects::namespace;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn create<K>(client: &Client, ns: &str, object: serde_json::Value) -> anyhow::Result<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    Ok(Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?)
}

/// A bare pod of namespace `ns` that can only go to leaf `east`, taking its environment
/// from `env_from`.
fn pod_to_east(name: &str, env_from: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "mcsched",
            "nodeSelector": {keys::CLUSTER_LABEL: "east"},
            "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
            "containers": [{"name": "c", "image": "pause", "envFrom": env_from}]
        }
    })
}

/// A host and a leaf `east` joined, with node east-1 in the leaf, namespaces `namespaces`
/// in both, and an agent (unused copies go 3 s after their last pod).
async fn host_and_leaf(
    names: [&str; 2],
    namespaces: &[&str],
) -> anyhow::Result<(ControlPlane, ControlPlane, Agent)> {
    let [host, leaf]: [ControlPlane; 2] =
        ControlPlane::start_many(&names, ControlPlaneOptions::full())
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("two control planes"))?;
    mcsched_e2e::objects::ready_node(
        &leaf.client,
        "east-1",
        "8",
        "16Gi",
        json!({"kubernetes.io/hostname": "east-1"}),
    )
    .await?;
    for c in [&host.client, &leaf.client] {
        for ns in namespaces {
            namespace(c, ns).await?;
        }
    }
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "agent",
        &["--leaf-unused-copy-grace=3"],
    )?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.client.clone());
    mcsched_e2e::objects::wait_ready(&nodes, "mcsched-east", "True", TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    Ok((host, leaf, agent))
}

fn data(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref()?.get(key).cloned()
}

fn secret_data(s: &Secret, key: &str) -> Option<String> {
    let bytes = s.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

fn host_uid_of(m: &kube::api::ObjectMeta) -> Option<String> {
    m.annotations
        .as_ref()?
        .get(keys::HOST_UID_ANNOTATION)
        .cloned()
}

/// Issue 49 (5): an immutable ConfigMap deleted and created again on the host, which the
/// leaf refuses to update in place, is replaced there; meanwhile the Secret rotated in
/// another namespace and a ConfigMap edited there reach their copies, and the copy no pod
/// refers to any more is deleted.
#[tokio::test(flavor = "multi_thread")]
async fn an_immutable_config_map_recreated_on_the_host_is_replaced_and_holds_up_no_other_copy()
-> anyhow::Result<()> {
    let (host, leaf, agent) = host_and_leaf(["dep-host", "dep-east"], &["shop", "store"]).await?;
    let settings = json!({"metadata": {"name": "settings"}, "data": {"v": "1"}, "immutable": true});
    create::<ConfigMap>(&host.client, "shop", settings).await?;
    create::<ConfigMap>(
        &host.client,
        "shop",
        json!({"metadata": {"name": "temp"}, "data": {"t": "1"}}),
    )
    .await?;
    create::<ConfigMap>(
        &host.client,
        "store",
        json!({"metadata": {"name": "conf"}, "data": {"k": "1"}}),
    )
    .await?;
    create::<Secret>(
        &host.client,
        "store",
        json!({"metadata": {"name": "creds"}, "stringData": {"password": "one"}}),
    )
    .await?;
    create::<Pod>(
        &host.client,
        "shop",
        pod_to_east("app", json!([{"configMapRef": {"name": "settings"}}])),
    )
    .await?;
    create::<Pod>(
        &host.client,
        "shop",
        pod_to_east("temp", json!([{"configMapRef": {"name": "temp"}}])),
    )
    .await?;
    create::<Pod>(
        &host.client,
        "store",
        pod_to_east(
            "app",
            json!([{"configMapRef": {"name": "conf"}}, {"secretRef": {"name": "creds"}}]),
        ),
    )
    .await?;

    let leaf_shop: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), "shop");
    let leaf_store: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), "store");
    let leaf_secrets: Api<Secret> = Api::namespaced(leaf.client.clone(), "store");
    let first = wait::until(TIMEOUT, "the copies in leaf east", || async {
        let (Some(s), Some(_), Some(_), Some(_)) = (
            leaf_shop.get_opt("settings").await?,
            leaf_shop.get_opt("temp").await?,
            leaf_store.get_opt("conf").await?,
            leaf_secrets.get_opt("creds").await?,
        ) else {
            return Ok(None);
        };
        Ok(Some(s))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(first.immutable, Some(true));
    assert_eq!(data(&first, "v").as_deref(), Some("1"));

    // The host's immutable ConfigMap replaced, the Secret rotated, the ConfigMap edited,
    // and the pod using temp gone.
    let host_shop: Api<ConfigMap> = Api::namespaced(host.client.clone(), "shop");
    host_shop
        .delete("settings", &DeleteParams::default())
        .await?;
    wait::until(TIMEOUT, "host shop/settings gone", || async {
        Ok(host_shop.get_opt("settings").await?.is_none().then_some(()))
    })
    .await?;
    let settings = json!({"metadata": {"name": "settings"}, "data": {"v": "2"}, "immutable": true});
    let recreated: ConfigMap = create(&host.client, "shop", settings).await?;
    let merge = |patch: serde_json::Value| Patch::Merge(patch);
    Api::<Secret>::namespaced(host.client.clone(), "store")
        .patch(
            "creds",
            &PatchParams::default(),
            &merge(json!({"stringData": {"password": "two"}})),
        )
        .await?;
    Api::<ConfigMap>::namespaced(host.client.clone(), "store")
        .patch(
            "conf",
            &PatchParams::default(),
            &merge(json!({"data": {"k": "2"}})),
        )
        .await?;
    Api::<Pod>::namespaced(host.client.clone(), "shop")
        .delete("temp", &DeleteParams::default().grace_period(0))
        .await?;

    let seen = std::sync::Mutex::new(BTreeMap::new());
    let outcome = wait::until(TIMEOUT, "every copy following its host object", || {
        let seen = &seen;
        let (leaf_shop, leaf_store, leaf_secrets) = (&leaf_shop, &leaf_store, &leaf_secrets);
        async move {
            let settings = leaf_shop.get_opt("settings").await?;
            let creds = leaf_secrets.get_opt("creds").await?;
            let conf = leaf_store.get_opt("conf").await?;
            let temp_gone = leaf_shop.get_opt("temp").await?.is_none();
            seen.lock().unwrap_or_else(|e| e.into_inner()).insert(
                "shop/settings",
                format!("{:?}", settings.as_ref().and_then(|s| data(s, "v"))),
            );
            seen.lock().unwrap_or_else(|e| e.into_inner()).insert(
                "store/creds",
                format!(
                    "{:?}",
                    creds.as_ref().and_then(|s| secret_data(s, "password"))
                ),
            );
            seen.lock().unwrap_or_else(|e| e.into_inner()).insert(
                "store/conf",
                format!("{:?}", conf.as_ref().and_then(|c| data(c, "k"))),
            );
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert("shop/temp gone", format!("{temp_gone}"));
            let done = settings.as_ref().and_then(|s| data(s, "v")).as_deref() == Some("2")
                && creds
                    .as_ref()
                    .and_then(|s| secret_data(s, "password"))
                    .as_deref()
                    == Some("two")
                && conf.as_ref().and_then(|c| data(c, "k")).as_deref() == Some("2")
                && temp_gone;
            Ok(done.then_some(settings))
        }
    })
    .await
    .map_err(|e| {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        e.context(format!("leaf copies: {seen:?}\n{}", agent.logs()))
    })?;
    let replaced = outcome.ok_or_else(|| anyhow::anyhow!("no settings copy"))?;
    assert_eq!(replaced.immutable, Some(true));
    assert_ne!(
        replaced.metadata.uid, first.metadata.uid,
        "replaced, not updated"
    );
    assert_eq!(
        host_uid_of(&replaced.metadata),
        recreated.metadata.uid,
        "a copy of the host object created again"
    );
    assert!(
        agent.logs().contains("leaf copy replaced"),
        "{}",
        agent.logs()
    );
    Ok(())
}

/// A bare pod of namespace `ns` bound to leaf `east`'s virtual node by its own
/// `nodeName` (mcsched's DynamicResources keeps pods with claims off virtual nodes), with
/// `claims` as its `spec.resourceClaims`, each used by its container.
fn claiming_pod_on_east(name: &str, claims: serde_json::Value) -> serde_json::Value {
    let used: Vec<serde_json::Value> = claims
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({"name": c["name"]}))
        .collect();
    json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "mcsched",
            "nodeName": keys::virtual_node_name("east"),
            "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
            "resourceClaims": claims,
            "containers": [{"name": "c", "image": "pause", "resources": {"claims": used}}]
        }
    })
}

/// A claim of one device of class `gpus` (the class need not exist: the API server does
/// not look it up, and no driver runs).
fn one_gpu() -> serde_json::Value {
    json!({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpus"}}]}})
}

/// Whether `m` carries pod sync's marks for leaf east, copied from host object `host_uid`.
fn marked_from(m: &kube::api::ObjectMeta, host_uid: Option<&String>) -> bool {
    let label = |k: &str| m.labels.as_ref().and_then(|l| l.get(k)).cloned();
    label(keys::MANAGED_CLUSTER_LABEL).as_deref() == Some("east")
        && label(keys::HOST_ID_LABEL).is_some_and(|h| !h.is_empty())
        && host_uid_of(m).as_ref() == host_uid
}

/// Dynamic Resource Allocation: a pod with a claim from a ResourceClaimTemplate and a
/// named, unallocated ResourceClaim, bound to a virtual node, gets both copied into the
/// leaf with pod sync's marks (the claim without status, so the leaf allocates it); a pod
/// naming a claim allocated in the host gets no copy, and the claim is reported as a
/// refused copy. Deleting the first pod collects the template's copy after the grace, but
/// the claim's copy, which holds its leaf allocation, only once its host claim is gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_pods_claim_template_and_unallocated_claim_are_copied_and_an_allocated_claim_refused()
-> anyhow::Result<()> {
    let (host, leaf, agent) = host_and_leaf(["dra-host", "dra-east"], &["shop"]).await?;
    let template: ResourceClaimTemplate = create(
        &host.client,
        "shop",
        json!({"metadata": {"name": "one-gpu", "labels": {"team": "ml"}},
            "spec": {"spec": one_gpu()}}),
    )
    .await?;
    let nic: ResourceClaim = create(
        &host.client,
        "shop",
        json!({"metadata": {"name": "nic"}, "spec": one_gpu()}),
    )
    .await?;
    // Allocated in the host, as the host's scheduler would have left it.
    create::<ResourceClaim>(
        &host.client,
        "shop",
        json!({"metadata": {"name": "held"}, "spec": one_gpu()}),
    )
    .await?;
    let host_claims: Api<ResourceClaim> = Api::namespaced(host.client.clone(), "shop");
    let mut held = host_claims.get("held").await?;
    held.status = Some(serde_json::from_value(json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com",
            "pool": "host-1", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["host-1"]}]}]}
    }}))?);
    host_claims
        .replace_status("held", &PostParams::default(), &held)
        .await?;

    create::<Pod>(
        &host.client,
        "shop",
        claiming_pod_on_east(
            "app",
            json!([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "nic", "resourceClaimName": "nic"}]),
        ),
    )
    .await?;
    let leaf_templates: Api<ResourceClaimTemplate> = Api::namespaced(leaf.client.clone(), "shop");
    let leaf_claims: Api<ResourceClaim> = Api::namespaced(leaf.client.clone(), "shop");
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "shop");
    let (t_copy, c_copy) = wait::until(TIMEOUT, "the template and the claim copied", || async {
        let (Some(t), Some(c), Some(_)) = (
            leaf_templates.get_opt("one-gpu").await?,
            leaf_claims.get_opt("nic").await?,
            leaf_pods.get_opt("app").await?,
        ) else {
            return Ok(None);
        };
        Ok(Some((t, c)))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        marked_from(&t_copy.metadata, template.metadata.uid.as_ref()),
        "{:?}",
        t_copy.metadata
    );
    assert_eq!(
        t_copy.metadata.labels.as_ref().and_then(|l| l.get("team")),
        Some(&"ml".to_string())
    );
    assert_eq!(t_copy.spec, template.spec);
    assert!(
        marked_from(&c_copy.metadata, nic.metadata.uid.as_ref()),
        "{:?}",
        c_copy.metadata
    );
    assert_eq!(c_copy.spec, nic.spec);
    assert!(
        c_copy
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none(),
        "copied unallocated: {:?}",
        c_copy.status
    );

    // The allocated claim: no copy of it nor of its pod, and both reported.
    create::<Pod>(
        &host.client,
        "shop",
        claiming_pod_on_east(
            "held-app",
            json!([{"name": "gpu", "resourceClaimName": "held"}]),
        ),
    )
    .await?;
    let events: Api<Event> = Api::namespaced(host.client.clone(), "shop");
    let refused = wait::until(TIMEOUT, "the allocated claim reported", || async {
        let all = events.list(&ListParams::default()).await?.items;
        let about = |kind: &str, name: &str, reason: &str| {
            all.iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.reason.as_deref() == Some(reason)
            })
        };
        let (Some(pod_event), Some(claim_event)) = (
            about("Pod", "held-app", "LeafRefused"),
            about("ResourceClaim", "held", "LeafCopyFailed"),
        ) else {
            return Ok(None);
        };
        Ok(Some((pod_event.clone(), claim_event.clone())))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    for event in [&refused.0, &refused.1] {
        let note = event.note.as_deref().unwrap_or_default();
        assert!(
            note.contains("ResourceClaim shop/held is allocated in the host cluster"),
            "{note}"
        );
        assert_eq!(event.type_.as_deref(), Some("Warning"));
    }
    assert_eq!(
        refused
            .1
            .regarding
            .as_ref()
            .and_then(|r| r.api_version.as_deref()),
        Some("resource.k8s.io/v1")
    );
    assert!(leaf_claims.get_opt("held").await?.is_none(), "not copied");
    assert!(
        leaf_pods.get_opt("held-app").await?.is_none(),
        "no copy of its pod"
    );
    assert!(
        agent.logs().contains("is allocated in the host cluster"),
        "{}",
        agent.logs()
    );

    // The first pod deleted: the template's copy goes after the grace (3 s); the claim's
    // stays while its host claim is there, and goes once it is not.
    Api::<Pod>::namespaced(host.client.clone(), "shop")
        .delete("app", &DeleteParams::default().grace_period(0))
        .await?;
    wait::until(TIMEOUT, "the template's copy collected", || async {
        Ok(leaf_templates
            .get_opt("one-gpu")
            .await?
            .is_none()
            .then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        leaf_claims.get_opt("nic").await?.is_some(),
        "kept while its host claim is there: {}",
        agent.logs()
    );
    host_claims.delete("nic", &DeleteParams::default()).await?;
    wait::until(TIMEOUT, "the claim's copy collected", || async {
        Ok(leaf_claims.get_opt("nic").await?.is_none().then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    Ok(())
}

/// The agent's resident set now and at its peak (VmRSS, VmHWM), in MiB: the agent process
/// whose command line names `kubeconfig`.
fn agent_memory(kubeconfig: &std::path::Path) -> anyhow::Result<(f64, f64)> {
    let want = kubeconfig.to_string_lossy().to_string();
    for entry in std::fs::read_dir("/proc")? {
        let path = entry?.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        // The control plane is given the same kubeconfig path; only the agent a scheduler name.
        let is_agent =
            args.iter().any(|a| a == "--scheduler-name") && args.iter().any(|a| a == &want);
        if !is_agent {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status"))?;
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_default()
        };
        return Ok((kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0));
    }
    anyhow::bail!("no mcsched-agent process for {want}")
}

/// Issue 49 (7), measured (bench/analysis.md): a namespace holding 1000 ConfigMaps of 1 MiB
/// that no pod refers to, next to the one a leaf pod uses. Run with `MCSCHED_AGENT` set to
/// the agent binary to measure; prints its resident set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement: 1 GiB of ConfigMaps; run by hand"]
async fn memory_with_a_namespace_of_unreferenced_config_maps() -> anyhow::Result<()> {
    let count: usize = std::env::var("MCSCHED_UNREFERENCED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let (host, leaf, agent) = host_and_leaf(["mem-host", "mem-east"], &["big"]).await?;
    let (rss, peak) = agent_memory(&host.kubeconfig)?;
    println!("agent joined, before any copy: VmRSS {rss:.0} MiB, VmHWM {peak:.0} MiB");
    // 1 MiB of data each: the API's limit for a ConfigMap, key included.
    let blob = "x".repeat(1024 * 1024 - 4);
    let started = std::time::Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let object =
                json!({"metadata": {"name": format!("blob-{i:04}")}, "data": {"blob": blob}});
            let client = host.client.clone();
            async move {
                create::<ConfigMap>(&client, "big", object)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    println!(
        "{count} ConfigMaps of 1 MiB created in {:.0?}",
        started.elapsed()
    );
    create::<ConfigMap>(
        &host.client,
        "big",
        json!({"metadata": {"name": "used"}, "data": {"k": "1"}}),
    )
    .await?;
    create::<Pod>(
        &host.client,
        "big",
        pod_to_east("app", json!([{"configMapRef": {"name": "used"}}])),
    )
    .await?;
    let leaf_cms: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), "big");
    wait::until(Duration::from_secs(300), "big/used copied", || async {
        Ok(leaf_cms.get_opt("used").await?.map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    // An edit reaching the copy shows the namespace's watch has listed and follows it.
    Api::<ConfigMap>::namespaced(host.client.clone(), "big")
        .patch(
            "used",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await?;
    wait::until(
        Duration::from_secs(300),
        "big/used's edit copied",
        || async {
            let copy = leaf_cms.get_opt("used").await?;
            Ok((copy.and_then(|c| data(&c, "k")).as_deref() == Some("2")).then_some(()))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    for wait_s in [0, 30] {
        tokio::time::sleep(Duration::from_secs(wait_s)).await;
        let (rss, peak) = agent_memory(&host.kubeconfig)?;
        println!(
            "{count} unreferenced 1 MiB ConfigMaps in a watched namespace, {wait_s}s after the copy followed an edit: VmRSS {rss:.0} MiB, VmHWM {peak:.0} MiB"
        );
    }
    Ok(())
}
