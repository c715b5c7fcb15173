//! What mcsched may touch in a leaf, on real control planes: only objects with its own
//! host's mark (never the leaf owner's, never another host's), only credentials of the
//! one allowed form, renewed before they expire, and at most one copy of a pod while a
//! leaf is cut off.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::objects::namespace;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn node(client: &Client, name: &str) -> anyhow::Result<()> {
    mcsched_e2e::objects::ready_node(
        client,
        name,
        "4",
        "8Gi",
        json!({"kubernetes.io/hostname": name}),
    )
    .await
}

fn ready_status(n: &Node) -> Option<(String, Option<String>, Option<String>)> {
    let c = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_ready(client: &Client, name: &str, want: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait::until(
        Duration::from_secs(90),
        &format!("{name} Ready={want}"),
        || async {
            let n = nodes.get(name).await?;
            Ok((ready_status(&n).map(|r| r.0).as_deref() == Some(want)).then_some(()))
        },
    )
    .await
}

/// Spec of a pod that can only go to leaf `east` (or stay pending).
fn to_east(containers: serde_json::Value) -> serde_json::Value {
    json!({
        "schedulerName": "mcsched",
        "nodeSelector": {keys::CLUSTER_LABEL: "east"},
        "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
        "containers": containers
    })
}

async fn failed_scheduling(client: &Client, ns: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let named = |name: Option<&str>| name.is_some_and(|n| n.starts_with(prefix));
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut notes: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("FailedScheduling")
                && named(e.regarding.as_ref().and_then(|r| r.name.as_deref()))
        })
        .filter_map(|e| e.note)
        .collect();
    // An event repeated within minutes for the same pod version only counts up its
    // series (client-go's rule, and kube-rs's), keeping the first note: the PodScheduled
    // condition carries the latest reason.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for p in pods.list(&ListParams::default()).await?.items {
        if !named(p.metadata.name.as_deref()) {
            continue;
        }
        notes.extend(
            p.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c.type_ == "PodScheduled" && c.status == "False")
                .filter_map(|c| c.message),
        );
    }
    Ok(notes)
}

/// A leaf namespace holding its owner's ConfigMap, Secret, claim and pod of the names a
/// host workload uses: none is used, changed or deleted, the workload is not sent there,
/// and the scheduler says why.
#[tokio::test(flavor = "multi_thread")]
async fn the_leaf_owners_objects_are_never_used_changed_or_deleted() -> anyhow::Result<()> {
    let [host, leaf]: [ControlPlane; 2] =
        ControlPlane::start_many(&["own-host", "own-east"], ControlPlaneOptions::full())
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("two control planes"))?;
    node(&leaf.client, "east-1").await?;
    for c in [&host.client, &leaf.client] {
        namespace(c, "shop").await?;
        Api::<k8s_openapi::api::storage::v1::StorageClass>::all(c.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "local-wffc"},
                    "provisioner": "kubernetes.io/no-provisioner",
                    "volumeBindingMode": "WaitForFirstConsumer"}))?,
            )
            .await?;
    }
    // The leaf owner's objects.
    let leaf_cms: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), "shop");
    let leaf_secrets: Api<Secret> = Api::namespaced(leaf.client.clone(), "shop");
    let leaf_claims: Api<PersistentVolumeClaim> = Api::namespaced(leaf.client.clone(), "shop");
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "shop");
    leaf_cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "settings"}, "data": {"owner": "leaf"}}),
            )?,
        )
        .await?;
    leaf_secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "creds"}, "stringData": {"password": "leaf"}}),
            )?,
        )
        .await?;
    leaf_claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "data"}, "spec": {
                "storageClassName": "local-wffc",
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))?,
        )
        .await?;
    leaf_pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
                "nodeName": "east-1", "containers": [{"name": "c", "image": "pause"}]}}))?,
        )
        .await?;
    // The pod's status is the leaf kubelet's to change (and it may, at any time): its
    // metadata and spec are compared instead of its resourceVersion.
    let versions = || async {
        let web = leaf_pods.get("web").await?;
        let mut meta = web.metadata;
        meta.resource_version = None;
        meta.managed_fields = None;
        anyhow::Ok((
            [
                leaf_cms.get("settings").await?.metadata.resource_version,
                leaf_secrets.get("creds").await?.metadata.resource_version,
                leaf_claims.get("data").await?.metadata.resource_version,
            ],
            serde_json::to_value((meta, web.spec))?,
        ))
    };
    let before = versions().await?;

    // The host has a ConfigMap and a Secret of the same names, and workloads using each.
    let host_cms: Api<ConfigMap> = Api::namespaced(host.client.clone(), "shop");
    host_cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "settings"}, "data": {"owner": "host"}}),
            )?,
        )
        .await?;
    Api::<Secret>::namespaced(host.client.clone(), "shop")
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "creds"}, "stringData": {"password": "host"}}),
            )?,
        )
        .await?;
    Api::<PersistentVolumeClaim>::namespaced(host.client.clone(), "shop")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "data"}, "spec": {
                "storageClassName": "local-wffc",
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))?,
        )
        .await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    wait_ready(&host.client, "mcsched-east", "True")
        .await
        .map_err(|e| e.context(agent.logs()))?;

    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(host.client.clone(), "shop");
    let container =
        |mount: serde_json::Value| json!([{"name": "c", "image": "pause", "envFrom": mount}]);
    for (name, spec) in [
        (
            "uses-settings",
            to_east(container(json!([{"configMapRef": {"name": "settings"}}]))),
        ),
        (
            "uses-creds",
            to_east(container(json!([{"secretRef": {"name": "creds"}}]))),
        ),
        ("uses-data", {
            let mut s = to_east(json!([{"name": "c", "image": "pause"}]));
            s["volumes"] = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]);
            s
        }),
    ] {
        deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
                }))?,
            )
            .await?;
    }
    // A bare pod named as the leaf owner's.
    Api::<Pod>::namespaced(host.client.clone(), "shop")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"},
                "spec": to_east(json!([{"name": "c", "image": "pause"}]))}))?,
        )
        .await?;

    for (prefix, want) in [
        (
            "uses-settings",
            "has a ConfigMap shop/settings that this host's mcsched did not create",
        ),
        (
            "uses-creds",
            "has a Secret shop/creds that this host's mcsched did not create",
        ),
        (
            "uses-data",
            "has a PersistentVolumeClaim shop/data that this host's mcsched did not create",
        ),
        (
            "web",
            "has a pod shop/web that this host's mcsched did not create",
        ),
    ] {
        wait::until(
            TIMEOUT,
            &format!("{prefix} refused by leaf east"),
            || async {
                let notes = failed_scheduling(&host.client, "shop", prefix).await?;
                Ok(notes.iter().any(|n| n.contains(want)).then_some(()))
            },
        )
        .await
        .map_err(|e| e.context(agent.logs()))?;
    }
    // Nothing of the leaf owner's was touched, and no copy was made next to it.
    assert_eq!(
        versions().await?,
        before,
        "the leaf owner's objects are unchanged"
    );
    let copies = leaf_pods
        .list(&ListParams::default().labels(keys::HOST_ID_LABEL))
        .await?
        .items;
    assert!(
        copies.is_empty(),
        "no copy in the leaf: {:?}",
        copies.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
    let cm = leaf_cms.get("settings").await?;
    assert_eq!(
        cm.data.and_then(|d| d.get("owner").cloned()).as_deref(),
        Some("leaf")
    );
    Ok(())
}

/// A join Secret rewritten to run a program or read a file: refused, the virtual node
/// says why, and nothing runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_join_secret_that_would_run_or_read_anything_is_refused() -> anyhow::Result<()> {
    let [host, leaf]: [ControlPlane; 2] =
        ControlPlane::start_many(&["ref-host", "ref-east"], ControlPlaneOptions::default())
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("two control planes"))?;
    node(&leaf.client, "east-1").await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    wait_ready(&host.client, "mcsched-east", "True")
        .await
        .map_err(|e| e.context(agent.logs()))?;

    let marker = host.dir().join("exec-ran");
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    let name = keys::cluster_secret_name("east");
    let current = secrets.get(&name).await?;
    let text = String::from_utf8(
        current
            .data
            .and_then(|d| d.get(keys::KUBECONFIG_KEY).cloned())
            .map(|b| b.0)
            .unwrap_or_default(),
    )?;
    let token = mcsched_shared::leaf_kubeconfig::token(&text).unwrap_or_default();
    let exec = text.replace(
        &format!("token: {token}"),
        &format!(
            "exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch {}\"]",
            marker.display()
        ),
    );
    assert_ne!(exec, text);
    let patch = json!({"data": {keys::KUBECONFIG_KEY: ByteString(exec.into_bytes())}});
    secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    let (_, reason, message) = wait::until(TIMEOUT, "the virtual node refused", || async {
        let n = nodes.get("mcsched-east").await?;
        Ok(ready_status(&n).filter(|r| r.1.as_deref() == Some("LeafKubeconfigRefused")))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert_eq!(reason.as_deref(), Some("LeafKubeconfigRefused"));
    let message = message.unwrap_or_default();
    assert!(message.contains("users[0].user.exec"), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!marker.exists(), "the exec plugin ran");
    Ok(())
}

/// A token's `jti` claim: the API server records it with each request made with the
/// token (`authentication.kubernetes.io/credential-id: JTI=...`).
fn jti(token: &str) -> anyhow::Result<String> {
    use base64::Engine as _;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("not a JWT"))?;
    let bytes =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('='))?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes)?;
    claims
        .get("jti")
        .and_then(|v| v.as_str())
        .map(String::from)
        .ok_or_else(|| anyhow::anyhow!("no jti in the token"))
}

/// Tokens renewed early (the flag caps their age at 5 s): the agent requests a new token
/// as the leaf account and writes it into the join Secret; after each renewal a pod is sent
/// to the leaf, and the leaf's audit log shows its copy created with the new token.
#[tokio::test(flavor = "multi_thread")]
async fn leaf_tokens_are_renewed_and_the_leaf_stays_ready() -> anyhow::Result<()> {
    let (host, leaf) = tokio::try_join!(
        ControlPlane::start("tok-host", ControlPlaneOptions::default()),
        ControlPlane::start_with_args(
            "tok-east",
            ControlPlaneOptions::default(),
            &["--audit-log", "audit.log"]
        ),
    )?;
    node(&leaf.client, "east-1").await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start_with(
        &host.kubeconfig,
        "mcsched",
        host.dir(),
        "tokens",
        &["--leaf-token-renew-after=5"],
    )?;
    wait_ready(&host.client, "mcsched-east", "True")
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    let name = keys::cluster_secret_name("east");
    let token = || async {
        let s = secrets.get(&name).await?;
        let text = String::from_utf8(
            s.data
                .and_then(|d| d.get(keys::KUBECONFIG_KEY).cloned())
                .map(|b| b.0)
                .unwrap_or_default(),
        )?;
        mcsched_shared::leaf_kubeconfig::check(&text)?;
        anyhow::Ok(mcsched_shared::leaf_kubeconfig::token(&text).unwrap_or_default())
    };
    let host_pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let mut seen = vec![token().await?];
    for round in 1..=2 {
        let last = seen.last().cloned().unwrap_or_default();
        let next = wait::until(
            Duration::from_secs(60),
            &format!("renewal {round}"),
            || async {
                let t = token().await?;
                Ok((t != last).then_some(t))
            },
        )
        .await
        .map_err(|e| e.context(agent.logs()))?;
        let next_jti = jti(&next)?;
        anyhow::ensure!(
            next_jti != jti(&last)?,
            "renewal {round} kept the token's jti"
        );
        seen.push(next);
        // A pod for the leaf now: its copy must be created with the renewed token.
        let pod_name = format!("after-{round}");
        host_pods
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": pod_name, "namespace": "default"},
                    "spec": to_east(json!([{"name": "c", "image": "pause",
                        "resources": {"requests": {"cpu": "10m"}}}]))
                }))?,
            )
            .await?;
        wait::until(
            TIMEOUT,
            &format!("{pod_name}'s copy in the leaf"),
            || async { Ok(leaf_pods.get_opt(&pod_name).await?.map(|_| ())) },
        )
        .await
        .map_err(|e| e.context(agent.logs()))?;
        // The API server logs a request's ResponseComplete stage after the response has
        // gone out: a client may read the copy before its create is in the file.
        let audit_log = leaf.data_dir().join("audit.log");
        let created = wait::until(
            Duration::from_secs(30),
            &format!("the leaf's audit log to show the create of {pod_name}"),
            || async {
                Ok(mcsched_e2e::audit::writes(&audit_log)?
                    .into_iter()
                    .find(|w| {
                        w.verb == "create"
                            && w.resource == "pods"
                            && w.subresource.is_empty()
                            && w.name == pod_name
                            && w.succeeded()
                    }))
            },
        )
        .await?;
        // With a renewal every 5 s the copy may already go out with a later token; never
        // with one that renewal `round` replaced.
        let stale: Vec<String> = seen[..round]
            .iter()
            .map(|t| jti(t).map(|j| format!("JTI={j}")))
            .collect::<anyhow::Result<_>>()?;
        assert!(
            created.credential_id.starts_with("JTI=") && !stale.contains(&created.credential_id),
            "{pod_name}'s copy was created with a token older than renewal {round}'s \
             ({next_jti}): {created}"
        );
        assert!(
            created.user_agent.starts_with("mcsched-agent/"),
            "{created}"
        );
        wait_ready(&host.client, "mcsched-east", "True")
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    // Each one a bound token of the leaf account, with an expiry.
    for t in &seen {
        let (iat, exp) = mcsched_agent::multicluster::token_renewal::validity(t)
            .ok_or_else(|| anyhow::anyhow!("token without expiry"))?;
        assert!(exp > iat);
    }
    Ok(())
}

/// Two hosts join one leaf under the same name: each one's pods run there, and each
/// leaves the other's copies alone, also when its own pods go.
#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_share_a_leaf_without_touching_each_others_copies() -> anyhow::Result<()> {
    let [one, two, leaf]: [ControlPlane; 3] = ControlPlane::start_many(
        &["two-host-a", "two-host-b", "two-east"],
        ControlPlaneOptions::full(),
    )
    .await?
    .try_into()
    .map_err(|_| anyhow::anyhow!("three control planes"))?;
    node(&leaf.client, "east-1").await?;
    let mut agents = Vec::new();
    for (host, pod) in [(&one, "from-one"), (&two, "from-two")] {
        mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
        agents.push(Agent::start(&host.kubeconfig, "mcsched", host.dir())?);
        wait_ready(&host.client, "mcsched-east", "True").await?;
        Api::<Pod>::namespaced(host.client.clone(), "default")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": pod},
                    "spec": to_east(json!([{"name": "c", "image": "pause"}]))}))?,
            )
            .await?;
    }
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let running = |name: &'static str| {
        let leaf_pods = leaf_pods.clone();
        async move {
            let p = leaf_pods.get_opt(name).await?;
            anyhow::Ok(p.is_some_and(|p| {
                p.status.and_then(|s| s.phase).as_deref() == Some("Running")
                    && p.metadata.deletion_timestamp.is_none()
            }))
        }
    };
    for name in ["from-one", "from-two"] {
        wait::until(TIMEOUT, &format!("{name} running in the leaf"), || async {
            Ok(running(name).await?.then_some(()))
        })
        .await
        .map_err(|e| {
            e.context(
                agents
                    .iter()
                    .map(|a| a.logs())
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        })?;
    }
    // Marked by different hosts.
    let ids: BTreeMap<String, String> = leaf_pods
        .list(&ListParams::default().labels(keys::HOST_ID_LABEL))
        .await?
        .items
        .into_iter()
        .filter_map(|p| {
            let id = p
                .metadata
                .labels
                .as_ref()?
                .get(keys::HOST_ID_LABEL)?
                .clone();
            Some((p.metadata.name?, id))
        })
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_ne!(ids["from-one"], ids["from-two"]);
    // Host one's pod goes: its copy goes; host two's stays through both agents' resyncs.
    Api::<Pod>::namespaced(one.client.clone(), "default")
        .delete("from-one", &DeleteParams::default())
        .await?;
    wait::until(TIMEOUT, "from-one's copy gone", || async {
        Ok(leaf_pods.get_opt("from-one").await?.is_none().then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert!(running("from-two").await?, "host two's copy was touched");
    Ok(())
}

fn running_on(p: &Pod) -> Option<String> {
    let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    (running && p.metadata.deletion_timestamp.is_none())
        .then(|| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .flatten()
}

/// A leaf cut off (its control plane frozen past the eviction timeouts, then resumed)
/// with a 3-replica StatefulSet and a 3-replica Deployment on it: no StatefulSet pod ever
/// runs twice (host and leaf counted together), the Deployment runs elsewhere meanwhile,
/// and after the resume nothing is duplicated or lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leaf_never_leaves_two_copies_of_a_statefulset_pod() -> anyhow::Result<()> {
    let [host, leaf]: [ControlPlane; 2] =
        ControlPlane::start_many(&["part-host", "part-east"], ControlPlaneOptions::full())
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("two control planes"))?;
    node(&leaf.client, "east-1").await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    wait_ready(&host.client, "mcsched-east", "True")
        .await
        .map_err(|e| e.context(agent.logs()))?;
    // The node lifecycle controller lifts the not-ready taint a moment after Ready: pods
    // that tolerate it for 0 s and are bound before would be evicted at once.
    let nodes: Api<Node> = Api::all(host.client.clone());
    wait::until(TIMEOUT, "mcsched-east without NoExecute taints", || async {
        let n = nodes.get("mcsched-east").await?;
        let no_execute = n
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.effect == "NoExecute");
        Ok((!no_execute).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let evict_at_once = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0});
    let spec = json!({
        "schedulerName": "mcsched",
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": keys::CLUSTER_LABEL, "operator": "In", "values": ["east"]}]}}]}},
        "tolerations": [
            {"key": keys::LEAF_TAINT, "operator": "Exists"},
            evict_at_once("node.kubernetes.io/not-ready"),
            evict_at_once("node.kubernetes.io/unreachable")],
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]
    });
    let workload = |kind: &str, name: &str| {
        let mut w = json!({
            "metadata": {"name": name},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec.clone()}}
        });
        if kind == "StatefulSet" {
            w["spec"]["serviceName"] = json!(name);
            w["spec"]["podManagementPolicy"] = json!("Parallel");
        }
        w
    };
    Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(host.client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(workload("StatefulSet", "db"))?,
        )
        .await?;
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(host.client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(workload("Deployment", "app"))?,
        )
        .await?;
    let host_pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    let listed = |api: &Api<Pod>, app: &str| {
        let (api, lp) = (
            api.clone(),
            ListParams::default().labels(&format!("app={app}")),
        );
        async move { anyhow::Ok(api.list(&lp).await?.items) }
    };
    wait::until(
        Duration::from_secs(90),
        "6 copies running in east",
        || async {
            let n = listed(&leaf_pods, "db").await?.len() + listed(&leaf_pods, "app").await?.len();
            let running = [
                listed(&host_pods, "db").await?,
                listed(&host_pods, "app").await?,
            ]
            .concat()
            .iter()
            .filter(|p| running_on(p).as_deref() == Some("mcsched-east"))
            .count();
            Ok((n == 6 && running == 6).then_some(()))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    // Room on the host for what must move.
    node(&host.client, "host-a").await?;

    // Cut off: the leaf copies keep running in there, unseen.
    let db_in_leaf: Vec<String> = listed(&leaf_pods, "db")
        .await?
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    leaf.pause();
    let host_copies = |pods: &[Pod], name: &str| {
        pods.iter()
            .filter(|p| p.metadata.name.as_deref() == Some(name))
            .filter(|p| running_on(p).is_some_and(|n| n != "mcsched-east"))
            .count()
    };
    // Every sample is checked as it is taken: one with two copies fails the test at once.
    let two_copies = |db_host: &[Pod], db_leaf: Option<&[Pod]>| -> anyhow::Result<()> {
        for name in &db_in_leaf {
            let in_leaf = db_leaf.map_or(1, |pods| {
                pods.iter()
                    .filter(|p| p.metadata.name.as_deref() == Some(name.as_str()))
                    .filter(|p| running_on(p).is_some())
                    .count()
            });
            let copies = host_copies(db_host, name) + in_leaf;
            anyhow::ensure!(copies <= 1, "{name} runs {copies} times");
        }
        Ok(())
    };
    // During the partition the frozen leaf cannot be asked: its copies still run there.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(150);
    let mut samples = 0;
    let mut moved_at = None;
    while tokio::time::Instant::now() < deadline {
        two_copies(&listed(&host_pods, "db").await?, None)
            .map_err(|e| e.context(format!("during the partition\n{}", agent.logs())))?;
        samples += 1;
        let apps = listed(&host_pods, "app").await?;
        let on_host = apps
            .iter()
            .filter(|p| running_on(p).as_deref() == Some("host-a"))
            .count();
        if on_host == 3 && moved_at.is_none() {
            moved_at = Some(tokio::time::Instant::now());
        }
        // A fixed window after the Deployment moved: what follows a move is watched too.
        if moved_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(30)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::ensure!(
        moved_at.is_some(),
        "the Deployment's replicas did not run elsewhere: {}",
        agent.logs()
    );
    println!("partition: {samples} samples, no StatefulSet pod ran twice");

    leaf.resume();
    // After: sampled host and leaf together until settled and for 20 s more, each
    // sample checked at once; settled is each StatefulSet pod running exactly once, the
    // Deployment's 3, and no leftover copy of an evicted pod in the leaf.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(150);
    let mut settled_at = None;
    let mut after = 0;
    while settled_at.is_none_or(|t: tokio::time::Instant| t.elapsed() < Duration::from_secs(20)) {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not settled 150 s after the partition\n{}",
            agent.logs()
        );
        let (db_host, db_leaf) = (
            listed(&host_pods, "db").await?,
            // The leaf answers again, or (a moment after the resume) not yet.
            listed(&leaf_pods, "db").await.ok(),
        );
        if let Some(db_leaf) = &db_leaf {
            two_copies(&db_host, Some(db_leaf))
                .map_err(|e| e.context(format!("after the partition\n{}", agent.logs())))?;
            after += 1;
            let db_running = db_host.iter().filter(|p| running_on(p).is_some()).count();
            let apps = listed(&host_pods, "app").await?;
            let app_running = apps.iter().filter(|p| running_on(p).is_some()).count();
            let app_in_leaf = listed(&leaf_pods, "app").await?.len();
            let settled = db_running == 3 && app_running == 3 && app_in_leaf == 0;
            if settled && settled_at.is_none() {
                settled_at = Some(tokio::time::Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("after the partition: {after} samples of host and leaf, never two copies");
    Ok(())
}

/// Joined as `join` joins, granting one namespace: pods there run in the leaf under the
/// leaf account's least privilege; a workload in a namespace the leaf did not grant is
/// kept off it, and the scheduler and `explain` name the grant to add.
#[tokio::test(flavor = "multi_thread")]
async fn only_the_namespaces_a_leaf_grants_are_sent_there() -> anyhow::Result<()> {
    let [host, leaf]: [ControlPlane; 2] =
        ControlPlane::start_many(&["ns-host", "ns-east"], ControlPlaneOptions::full())
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("two control planes"))?;
    node(&leaf.client, "east-1").await?;
    for ns in ["apps", "web"] {
        namespace(&host.client, ns).await?;
    }
    let leaf_kc = leaf.kubeconfig.to_string_lossy().to_string();
    let out = mcsched_e2e::cli::run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "east",
            "--cluster-kubeconfig",
            &leaf_kc,
            "--namespaces",
            "apps",
        ],
    )?;
    anyhow::ensure!(out.status.success(), "{}", mcsched_e2e::cli::text(&out));
    let agent = mcsched_e2e::api::start_agent(&host, "mcsched", "grants", &[]).await?;
    wait_ready(&host.client, "mcsched-east", "True")
        .await
        .map_err(|e| e.context(agent.logs()))?;
    for ns in ["apps", "web"] {
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(host.client.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "site"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "site"}},
                        "template": {"metadata": {"labels": {"app": "site"}},
                            "spec": to_east(json!([{"name": "c", "image": "pause"}]))}}
                }))?,
            )
            .await?;
    }
    // Granted: its copy runs in the leaf (created with the leaf account's own rights).
    let leaf_apps: Api<Pod> = Api::namespaced(leaf.client.clone(), "apps");
    wait::until(TIMEOUT, "apps/site running in the leaf", || async {
        let running = leaf_apps
            .list(&ListParams::default().labels("app=site"))
            .await?
            .items
            .iter()
            .any(|p| running_on(p).is_some());
        Ok(running.then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    // Not granted: kept off, with the grant named.
    let want = "leaf cluster east has not granted namespace web to mcsched";
    let note = wait::until(TIMEOUT, "web/site refused by east", || async {
        let notes = failed_scheduling(&host.client, "web", "site").await?;
        Ok(notes.into_iter().find(|n| n.contains(want)))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    assert!(
        note.contains("--namespaces <granted namespaces>,web"),
        "{note}"
    );
    let pending = Api::<Pod>::namespaced(host.client.clone(), "web")
        .list(&ListParams::default().labels("app=site"))
        .await?
        .items
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none() && running_on(p).is_none())
        .and_then(|p| p.metadata.name)
        .ok_or_else(|| anyhow::anyhow!("no pending web/site pod"))?;
    let out = mcsched_e2e::cli::run(&host.kubeconfig, &["explain", "pod", &pending, "-n", "web"])?;
    let shown = mcsched_e2e::cli::text(&out);
    assert!(shown.contains(want), "{shown}");
    assert!(
        Api::<k8s_openapi::api::core::v1::Namespace>::all(leaf.client.clone())
            .get_opt("web")
            .await?
            .is_none(),
        "no namespace made in the leaf"
    );
    Ok(())
}

/// The soak behind `make soak`: joined with the shortest token the API server issues
/// (10 minutes), the leaf stays Ready across two expiries, the agent renewing each token
/// at 80 % of its lifetime.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "21 minutes: run with `make soak`"]
async fn the_leaf_stays_ready_across_two_token_expiries() -> anyhow::Result<()> {
    let [host, leaf]: [ControlPlane; 2] =
        ControlPlane::start_many(&["soak-host", "soak-east"], ControlPlaneOptions::default())
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("two control planes"))?;
    node(&leaf.client, "east-1").await?;
    let leaf_kc = leaf.kubeconfig.to_string_lossy().to_string();
    let out = mcsched_e2e::cli::run(
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
            "--token-lifetime",
            "10m",
        ],
    )?;
    anyhow::ensure!(out.status.success(), "{}", mcsched_e2e::cli::text(&out));
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    wait_ready(&host.client, "mcsched-east", "True")
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let secrets: Api<Secret> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    let name = keys::cluster_secret_name("east");
    let token = || async {
        let s = secrets.get(&name).await?;
        let text = String::from_utf8(
            s.data
                .and_then(|d| d.get(keys::KUBECONFIG_KEY).cloned())
                .map(|b| b.0)
                .unwrap_or_default(),
        )?;
        anyhow::Ok(mcsched_shared::leaf_kubeconfig::token(&text).unwrap_or_default())
    };
    let first = token().await?;
    let (_, first_exp) = mcsched_agent::multicluster::token_renewal::validity(&first)
        .ok_or_else(|| anyhow::anyhow!("no expiry"))?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    let mut tokens = vec![first];
    let end = std::time::SystemTime::now() + Duration::from_secs(21 * 60);
    while std::time::SystemTime::now() < end {
        let n = nodes.get("mcsched-east").await?;
        let ready = ready_status(&n).map(|r| r.0);
        assert_eq!(ready.as_deref(), Some("True"), "{}", agent.logs());
        let t = token().await?;
        if tokens.last() != Some(&t) {
            tokens.push(t);
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    assert!(
        now > first_exp + 600,
        "two lifetimes of the first token passed"
    );
    assert!(
        tokens.len() >= 3,
        "renewed at least twice: {} tokens",
        tokens.len()
    );
    println!(
        "{} tokens over 21 minutes, the leaf Ready throughout",
        tokens.len()
    );
    Ok(())
}

/// The IP a leaf user gives the pod they pass off as a copy.
const FORGED_IP: &str = "10.66.6.6";

/// As a leaf user who may delete and create pods in the namespace (here the leaf's
/// admin): deletes `name`'s copy and creates a pod of their own under its name, with its
/// labels and annotations and a Running, Ready status at [`FORGED_IP`]. Its UID.
async fn forge(leaf_pods: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    let copy = leaf_pods.get(name).await?;
    leaf_pods
        .delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await?;
    wait::until(TIMEOUT, &format!("{name}'s copy gone"), || async {
        Ok(leaf_pods.get_opt(name).await?.is_none().then_some(()))
    })
    .await?;
    let forged = leaf_pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name, "labels": copy.metadata.labels,
                    "annotations": copy.metadata.annotations},
                "spec": {"nodeName": "east-1", "containers": [{"name": "c", "image": "pause"}]}
            }))?,
        )
        .await?;
    let status = json!({"status": {"phase": "Running", "podIP": FORGED_IP,
        "podIPs": [{"ip": FORGED_IP}], "hostIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    leaf_pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    forged
        .metadata
        .uid
        .ok_or_else(|| anyhow::anyhow!("forged pod without a UID"))
}

/// The ForgedLeafCopy events on host pod `name` naming leaf pod `uid`.
async fn forged_events(client: &Client, name: &str, uid: &str) -> anyhow::Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("ForgedLeafCopy")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.note.as_deref().is_some_and(|n| n.contains(uid))
        })
        .collect())
}

/// A leaf user deletes a copy and creates a pod of their own with its name, labels,
/// annotations and a status they set — once while the agent runs, once while no agent
/// runs (then only the UID recorded on the host pod tells, not the agent's memory): the
/// host pod never takes the forged pod's IP or Ready, it fails as its copy is gone, the
/// forged pod is neither adopted nor deleted, and a Warning event on the host pod says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_copy_is_never_adopted_deleted_or_read_into_the_host() -> anyhow::Result<()> {
    let [host, leaf]: [ControlPlane; 2] =
        ControlPlane::start_many(&["forge-host", "forge-east"], ControlPlaneOptions::full())
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("two control planes"))?;
    node(&leaf.client, "east-1").await?;
    mcsched_e2e::objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let mut agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    wait_ready(&host.client, "mcsched-east", "True")
        .await
        .map_err(|e| e.context(agent.logs()))?;
    let host_pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    for name in ["web", "db"] {
        host_pods
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name},
                    "spec": to_east(json!([{"name": "c", "image": "pause"}]))}))?,
            )
            .await?;
    }
    // Each host pod Running at its copy's IP, with its copy's leaf UID recorded.
    let mut copies = BTreeMap::new();
    for name in ["web", "db"] {
        let (ip, uid) = wait::until(
            TIMEOUT,
            &format!("{name} running, its copy recorded"),
            || async {
                let (Some(p), Some(c)) = (
                    host_pods.get_opt(name).await?,
                    leaf_pods.get_opt(name).await?,
                ) else {
                    return Ok(None);
                };
                let record = p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(keys::LEAF_POD_UID_ANNOTATION))
                    .cloned();
                let status = p.status.unwrap_or_default();
                let running = status.phase.as_deref() == Some("Running") && status.pod_ip.is_some();
                Ok(
                    (running && record.is_some() && record == c.metadata.uid).then(|| {
                        (
                            status.pod_ip.unwrap_or_default(),
                            record.unwrap_or_default(),
                        )
                    }),
                )
            },
        )
        .await
        .map_err(|e| e.context(agent.logs()))?;
        copies.insert(name, (ip, uid));
    }
    // The host pod shows nothing of the forged pod, and is no longer Running or Ready.
    let check = |name: &'static str, replaced_only: bool| {
        let (host_pods, leaf_pods, copies) = (host_pods.clone(), leaf_pods.clone(), &copies);
        async move {
            let p = host_pods.get(name).await?;
            let status = p.status.unwrap_or_default();
            let ips: Vec<String> = status
                .pod_ips
                .iter()
                .flatten()
                .map(|i| i.ip.clone())
                .chain(status.pod_ip.clone())
                .collect();
            anyhow::ensure!(
                !ips.iter().any(|ip| ip == FORGED_IP),
                "host pod {name} took the forged pod's IP: {ips:?}"
            );
            anyhow::ensure!(
                status.pod_ip.as_deref() == Some(copies[name].0.as_str()),
                "host pod {name}: IP {:?}, its copy's was {}",
                status.pod_ip,
                copies[name].0
            );
            anyhow::ensure!(
                status.phase.as_deref() == Some("Failed"),
                "host pod {name} is {:?}, its copy is gone",
                status.phase
            );
            let reasons: &[&str] = if replaced_only {
                &["LeafPodReplaced"]
            } else {
                // The agent may see the copy gone before the forged pod comes.
                &["LeafPodReplaced", "LeafPodDeleted"]
            };
            anyhow::ensure!(
                status
                    .reason
                    .as_deref()
                    .is_some_and(|r| reasons.contains(&r)),
                "host pod {name}: reason {:?}",
                status.reason
            );
            let ready = status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.clone());
            anyhow::ensure!(
                ready.as_deref() != Some("True"),
                "host pod {name} still Ready"
            );
            // The forged pod is there, untouched.
            let forged = leaf_pods.get(name).await?;
            let forged_status = forged.status.unwrap_or_default();
            anyhow::ensure!(
                forged.metadata.deletion_timestamp.is_none()
                    && forged_status.pod_ip.as_deref() == Some(FORGED_IP),
                "the forged pod {name} was deleted or changed"
            );
            anyhow::Ok(forged.metadata.uid.unwrap_or_default())
        }
    };

    // While the agent runs.
    let forged_web = forge(&leaf_pods, "web").await?;
    wait::until(TIMEOUT, "ForgedLeafCopy event on web", || async {
        Ok((!forged_events(&host.client, "web", &forged_web)
            .await?
            .is_empty())
        .then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let note = forged_events(&host.client, "web", &forged_web).await?[0]
        .note
        .clone()
        .unwrap_or_default();
    for part in [
        "leaf cluster east",
        "default/web",
        &forged_web,
        &copies["web"].1,
    ] {
        anyhow::ensure!(
            note.contains(part),
            "{part} not in the event's note: {note}"
        );
    }
    // Settled a moment (the watch events of the forged pod's status come after its create).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = check("web", false)
        .await
        .map_err(|e| e.context(agent.logs()))?;
    anyhow::ensure!(seen == forged_web, "another pod holds web's name");
    let web = host_pods.get("web").await?.status.unwrap_or_default();
    println!(
        "forged while the agent ran: host pod web {:?} ({:?})",
        web.phase, web.reason
    );

    // While no agent runs: the next one knows its copy only by the host pod's record.
    agent.stop();
    let forged_db = forge(&leaf_pods, "db").await?;
    let agent = Agent::start_with(&host.kubeconfig, "mcsched", host.dir(), "restarted", &[])?;
    wait::until(
        Duration::from_secs(90),
        "ForgedLeafCopy event on db",
        || async {
            Ok((!forged_events(&host.client, "db", &forged_db)
                .await?
                .is_empty())
            .then_some(()))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    check("db", true)
        .await
        .map_err(|e| e.context(agent.logs()))?;

    // Past a resync (30 s), which also passes over pods without a host pod on the
    // virtual node (both host pods are Failed now): nothing changed, and db's forged pod
    // was reported once, not at every resync.
    tokio::time::sleep(Duration::from_secs(35)).await;
    for name in ["web", "db"] {
        check(name, name == "db")
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    let db_events = forged_events(&host.client, "db", &forged_db).await?;
    anyhow::ensure!(
        db_events.len() == 1 && db_events[0].series.is_none(),
        "db's forged pod reported more than once: {db_events:?}"
    );
    Ok(())
}
