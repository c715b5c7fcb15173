//! The joined leaves, from the join Secrets in the agent's namespace: one connection
//! per Secret, replaced when the Secret changes, closed when it goes.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use mcsched_shared::keys;
use tracing::{info, warn};

use super::OnEvent;
use super::ask_grants::AskGrants;
use super::cluster::LeafCluster;
use crate::control::watch::{Change, watch_kind};
use mcsched_engine::leaf::cycle::{Access, LeafChoice, LeafCycle, LeafSnapshots, LeafView};
use mcsched_engine::leaf::grants::Grants;
use mcsched_engine::snapshot::{PodInfo, VolumeObjects};

#[derive(Debug, thiserror::Error)]
pub enum JoinSecretError {
    #[error("secret {secret}: no label {label}")]
    NoClusterLabel { secret: String, label: &'static str },
    #[error("secret {secret}: no data key {key}")]
    NoKubeconfig { secret: String, key: &'static str },
    #[error("secret {secret}: data.{key} is not a kubeconfig: {reason}")]
    BadKubeconfig {
        secret: String,
        key: &'static str,
        reason: String,
    },
}

/// The leaf clients' rate limit by default: four times kube-scheduler's client's (50/100),
/// as pod sync writes a copy, and often a ConfigMap or Secret, for each pod bound there —
/// enough for a few hundred pods a second per leaf, bounded all the same.
pub const DEFAULT_LEAF_API_QPS: f32 = 200.0;
pub const DEFAULT_LEAF_API_BURST: u32 = 400;

/// How the agent treats leaf copies that stay Pending.
#[derive(Debug, Clone, Copy)]
pub struct LeafSettings {
    /// A copy Pending this long is taken back.
    pub pending_timeout: std::time::Duration,
    /// The cluster is then avoided for the pod's owner this long.
    pub avoid_for: std::time::Duration,
    /// A leaf token is renewed at most this long after it was issued (else at 80 % of
    /// its lifetime).
    pub token_renew_after: Option<std::time::Duration>,
    /// A ConfigMap, Secret or claim copied into a leaf that no pod there has referred to
    /// for this long is deleted (a claim only once its host claim is gone too).
    pub unused_copy_grace: std::time::Duration,
    /// Requests a second to each leaf's API server, and the burst above it (qps <= 0:
    /// no limit): a leaf is someone else's cluster, and what the agent asks of it grows
    /// with what pods and what-ifs name.
    pub api_qps: f32,
    pub api_burst: u32,
}

impl Default for LeafSettings {
    fn default() -> Self {
        LeafSettings {
            pending_timeout: std::time::Duration::from_secs(120),
            avoid_for: std::time::Duration::from_secs(300),
            token_renew_after: None,
            unused_copy_grace: std::time::Duration::from_secs(30),
            api_qps: DEFAULT_LEAF_API_QPS,
            api_burst: DEFAULT_LEAF_API_BURST,
        }
    }
}

/// The leaves known to this agent.
#[derive(Default)]
pub struct Leaves {
    clusters: RwLock<BTreeMap<String, Arc<LeafCluster>>>,
    pub settings: LeafSettings,
    pub avoidance: mcsched_engine::leaf::rescheduling::Avoidance,
    /// What the agent may read for pod sync; checked against RBAC when `grants` is set.
    access: Access,
    grants: Option<Arc<Grants>>,
    /// This host's id, the mark on every object pod sync creates in a leaf.
    host_id: std::sync::OnceLock<String>,
    /// Refuses the leaf clients' writes once this agent may no longer act as the leader.
    pub fence: crate::control::fence::Fence,
    /// The host's ConfigMaps and Secrets that leaf copies refer to, watched.
    pub host_objects: super::host_objects::HostObjects,
    /// Gang members taken back whose eviction was refused, tried again: shared by every
    /// leaf's pod sync, as a gang may span leaves.
    pub(crate) gang_take_backs: super::gang_hold::TakeBacks,
    /// The host client pod sync evicts with: a 429 (a PodDisruptionBudget's refusal) is
    /// answered at once, not retried by the client for minutes.
    eviction_client: std::sync::OnceLock<Client>,
}

impl Leaves {
    /// Leaves whose pods' ConfigMaps and Secrets are taken as readable: for tests and
    /// in-process use; the agent uses [`Leaves::with_grants`].
    pub fn new(settings: LeafSettings) -> Self {
        Leaves {
            settings,
            ..Default::default()
        }
    }

    /// Leaves whose pods go to a leaf only when the agent may read what pod sync copies.
    pub fn with_grants(settings: LeafSettings, grants: Arc<Grants>) -> Self {
        Leaves {
            settings,
            access: Access(grants.clone()),
            grants: Some(grants),
            ..Default::default()
        }
    }

    /// Set once at start: the host client without kube's retry of 429 answers.
    pub fn set_eviction_client(&self, client: Client) {
        let _ = self.eviction_client.set(client);
    }

    /// The client to evict host pods with, when the agent set one.
    pub fn eviction_client(&self) -> Option<Client> {
        self.eviction_client.get().cloned()
    }

    /// Where the agent's ServiceAccount lives, for the grants pod sync suggests.
    pub fn agent_namespace(&self) -> &str {
        self.access.0.agent_namespace()
    }

    /// Set once at start, from the host's kube-system namespace.
    pub fn set_host_id(&self, id: String) {
        let _ = self.host_id.set(id);
    }

    pub fn host_id(&self) -> &str {
        self.host_id.get().map(String::as_str).unwrap_or_default()
    }

    pub fn get(&self, name: &str) -> Option<Arc<LeafCluster>> {
        self.read().get(name).cloned()
    }

    /// A host pod deleted: its assumption in a leaf's view (a Reserve whose copy never
    /// came, the pod evicted first) goes with it, or the pod its owner recreates under the
    /// same name would meet it there as a pod that is not this host's. Only that
    /// incarnation's (by UID): the recreated pod's own assumption stays.
    pub fn forget_deleted(&self, key: &str, uid: &str) {
        if uid.is_empty() {
            return;
        }
        for c in self.all() {
            c.cache().forget(key, uid);
        }
    }

    pub fn all(&self) -> Vec<Arc<LeafCluster>> {
        self.read().values().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<LeafCluster>>> {
        self.clusters.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<LeafCluster>>> {
        self.clusters.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Host pods on `cluster`'s virtual node changed: pod sync has work.
    pub fn host_changed(&self, cluster: &str) {
        if let Some(c) = self.get(cluster) {
            c.sync_wake.notify_one();
        }
    }

    fn insert(&self, cluster: Arc<LeafCluster>) -> Option<Arc<LeafCluster>> {
        self.write().insert(cluster.name.clone(), cluster)
    }

    fn remove(&self, name: &str) -> Option<Arc<LeafCluster>> {
        self.write().remove(name)
    }
}

impl LeafSnapshots for Leaves {
    fn cycle(&self, host_volumes: Arc<VolumeObjects>) -> LeafCycle {
        let views = self
            .read()
            .iter()
            .filter(|(_, c)| c.is_synced())
            .map(|(name, c)| {
                // Its own statement: the cache's guard must be gone before
                // `admission_view` takes the lock again.
                let snapshot = c.cache().snapshot();
                let snapshot = c.volumes_held.apply(snapshot);
                let view = LeafView {
                    cluster: name.clone(),
                    snapshot,
                    checks: c.checks.clone(),
                    host_id: c.host_id.clone(),
                    admission: c.admission_view(),
                    served: c.served(),
                    kept: c.kept.clone(),
                    devices: c.devices(),
                };
                (name.clone(), Arc::new(view))
            })
            .collect();
        let unsynced = self
            .read()
            .iter()
            .filter(|(_, c)| !c.is_synced())
            .map(|(name, c)| (name.clone(), c.unsynced_kinds()))
            .collect();
        let mut cycle = LeafCycle::new(Arc::new(views));
        cycle.unsynced = Arc::new(unsynced);
        cycle.avoid = self.avoidance.current();
        cycle.host_volumes = host_volumes;
        cycle.access = self.access.clone();
        cycle
    }

    /// Counted until the leaf's own scheduler has placed the copy, so pods sent in quick
    /// succession do not overfill the leaf.
    fn assume(&self, pod: Arc<PodInfo>, choice: &LeafChoice) {
        if let Some(c) = self.get(&choice.cluster) {
            c.volumes_held
                .hold(&pod.key, &choice.volumes, self.settings.pending_timeout);
            c.hold_devices(
                &pod.key,
                &choice.devices.claims,
                self.settings.pending_timeout,
            );
            c.cache().assume(pod, &choice.leaf_node);
        }
    }

    fn forget(&self, cluster: &str, key: &str) {
        if let Some(c) = self.get(cluster) {
            c.cache().forget(key, "");
            c.volumes_held.release(key);
            c.release_devices(key);
        }
    }
}

/// This host's id: the UID of its kube-system namespace (listed by name: the scheduler's
/// rights include listing namespaces, not getting them), as `join` and `unjoin` read it.
pub async fn host_id(host: &Client) -> Result<String, kube::Error> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(host.clone());
    let list = api
        .list_metadata(&kube::api::ListParams::default().fields("metadata.name=kube-system"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .find_map(|n| n.metadata.uid)
        .unwrap_or_default())
}

/// Each leaf client's own token bucket, as client-go gives each client one.
pub fn rate_limit(settings: &LeafSettings) -> crate::control::ratelimit::RateLimitLayer {
    crate::control::ratelimit::RateLimitLayer::new(settings.api_qps, settings.api_burst)
}

/// A client for the leaf named by a join Secret, its writes behind `fence`, its requests
/// limited by `settings`' rate.
pub async fn connect(
    secret: &Secret,
    fence: &crate::control::fence::Fence,
    settings: &LeafSettings,
) -> Result<(String, Client), JoinSecretError> {
    let name = secret.name_any();
    let cluster = secret
        .labels()
        .get(keys::CLUSTER_LABEL)
        .cloned()
        .ok_or_else(|| JoinSecretError::NoClusterLabel {
            secret: name.clone(),
            label: keys::CLUSTER_LABEL,
        })?;
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(keys::KUBECONFIG_KEY))
        .ok_or_else(|| JoinSecretError::NoKubeconfig {
            secret: name.clone(),
            key: keys::KUBECONFIG_KEY,
        })?;
    let bad = |reason: String| JoinSecretError::BadKubeconfig {
        secret: name.clone(),
        key: keys::KUBECONFIG_KEY,
        reason,
    };
    let text = std::str::from_utf8(&raw.0).map_err(|e| bad(e.to_string()))?;
    // Nothing in it may run a program, read a file or present another identity.
    mcsched_shared::leaf_kubeconfig::check(text).map_err(|e| bad(e.to_string()))?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| bad(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    let metrics = crate::control::request_metrics::RequestMetricsLayer::new(&config.cluster_url);
    let client =
        kube::client::ClientBuilder::try_from(crate::control::client::with_user_agent(config))
            .map_err(|e| bad(e.to_string()))?
            // The fence under the rate limit: checked when the request leaves, not when it
            // queues; the metrics under both (as the host client's).
            .with_layer(&metrics)
            .with_layer(&crate::control::fence::FenceLayer::new(fence.clone()))
            .with_layer(&rate_limit(settings))
            .build();
    Ok((cluster, client))
}

/// What token renewal needs of a join Secret (its kubeconfig was checked by `connect`).
fn join_secret(secret: &Secret) -> Option<super::join_secret::JoinSecret> {
    let raw = secret.data.as_ref()?.get(keys::KUBECONFIG_KEY)?;
    let lifetime = secret
        .annotations()
        .get(keys::TOKEN_LIFETIME_ANNOTATION)
        .and_then(|d| mcsched_shared::config::duration::parse(d).ok());
    Some(super::join_secret::JoinSecret {
        name: secret.name_any(),
        namespace: secret.namespace().unwrap_or_default(),
        kubeconfig: String::from_utf8(raw.0.clone()).ok()?,
        lifetime,
    })
}

/// Watches the join Secrets of `namespace` and keeps `leaves` connected to them.
pub async fn run(
    host: Client,
    namespace: String,
    leaves: Arc<Leaves>,
    on_event: OnEvent,
    on_leaf: impl Fn(Arc<LeafCluster>) + Send + 'static,
    on_refused: impl Fn(String, String) + Send + 'static,
) {
    if let Some(grants) = &leaves.grants {
        tokio::spawn(grants.clone().run(host.clone(), on_event.clone()));
    }
    let (ready, _ready_rx) = tokio::sync::mpsc::channel(1);
    let api: Api<Secret> = Api::namespaced(host, &namespace);
    let config = watcher::Config::default().labels(keys::CLUSTER_LABEL);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Change<Secret>>();
    tokio::spawn(watch_kind(api, config, "join secret", ready, move |ev| {
        let _ = tx.send(ev);
    }));
    while let Some(ev) = rx.recv().await {
        match ev {
            Change::Apply(secret, _) => {
                let version = secret.resource_version().unwrap_or_default();
                let (cluster, client) =
                    match connect(&secret, &leaves.fence, &leaves.settings).await {
                        Ok(c) => c,
                        Err(e) => {
                            warn!(error = %e, "refusing join secret");
                            // A leaf whose Secret turned unusable is disconnected, not kept
                            // on credentials its owner no longer vouches for.
                            if let Some(cluster) = secret.labels().get(keys::CLUSTER_LABEL) {
                                if let Some(old) = leaves.remove(cluster) {
                                    old.stop();
                                }
                                on_refused(cluster.clone(), e.to_string());
                            }
                            continue;
                        }
                    };
                if leaves
                    .get(&cluster)
                    .is_some_and(|c| c.secret_version == version)
                {
                    continue;
                }
                let leaf =
                    LeafCluster::new(cluster.clone(), client, version, leaves.host_id().into());
                *leaf.join.lock().unwrap_or_else(|e| e.into_inner()) = join_secret(&secret);
                leaf.start(on_event.clone());
                if let Some(old) = leaves.insert(leaf.clone()) {
                    old.stop();
                }
                info!(%cluster, "leaf cluster connected");
                on_leaf(leaf);
            }
            Change::Delete(secret) => {
                if let Some(cluster) = secret.labels().get(keys::CLUSTER_LABEL)
                    && let Some(old) = leaves.remove(cluster)
                {
                    old.stop();
                    info!(%cluster, "leaf cluster left");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn leaf(name: &str, synced: bool) -> Arc<LeafCluster> {
        let (client, _) = crate::fake_api::client(|_, _| (200, json!({})));
        let leaf = LeafCluster::new(name.into(), client, "1".into(), "h1".into());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-1")},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        }))
        .expect("node");
        leaf.cache().apply_node(Arc::new(node));
        if synced {
            leaf.mark_synced();
        }
        leaf
    }

    /// A leaf asked for more than its budget sees the burst, then the rate: in a second
    /// of (paused) time, at most burst + qps requests of the 200 queued.
    #[tokio::test(start_paused = true)]
    async fn a_leaf_client_is_rate_limited() {
        let (fake, calls) = crate::fake_api::client(|_, _| {
            (404, crate::fake_api::status(404, "NotFound", "not found"))
        });
        let service = tower::service_fn(move |req| {
            let fake = fake.clone();
            async move { fake.send(req).await }
        });
        let settings = LeafSettings {
            api_qps: 10.0,
            api_burst: 5,
            ..Default::default()
        };
        let client = kube::client::ClientBuilder::new(service, "default")
            .with_layer(&rate_limit(&settings))
            .build();
        for i in 0..200 {
            let api: Api<Secret> = Api::namespaced(client.clone(), "shop");
            tokio::spawn(async move { api.get_metadata_opt(&format!("s-{i}")).await });
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let sent = calls.lock().map(|c| c.len()).unwrap_or_default();
        // 5 at once, then 10 in the second (one more when a refill lands on its end).
        assert!(
            (5..=16).contains(&sent),
            "{sent} requests in the first second"
        );
    }

    #[tokio::test]
    async fn cycles_see_synced_leaves_and_assumptions_land_in_their_leaf() {
        let leaves = Leaves::new(LeafSettings::default());
        let (east, west) = (leaf("east", true), leaf("west", false));
        leaves.insert(east.clone());
        leaves.insert(west.clone());

        let doc = json!({"components": {"schemas": {"io.k8s.api.core.v1.Pod":
            {"type": "object", "properties": {"spec": {"type": "object"}}}}}});
        let fields = mcsched_engine::leaf::served_fields::ServedFields::from_document(
            &serde_json::to_vec(&doc).unwrap_or_default(),
            "v1.34.4",
        )
        .expect("document");
        east.set_served(mcsched_engine::leaf::served_fields::Served::Known(
            Arc::new(fields),
        ));
        let cycle = leaves.cycle(Arc::default());
        assert_eq!(cycle.views.keys().collect::<Vec<_>>(), ["east"]);
        assert_eq!(cycle.views["east"].snapshot.len(), 1);
        assert!(
            matches!(&cycle.views["east"].served,
                mcsched_engine::leaf::served_fields::Served::Known(f) if f.git_version() == "v1.34.4"),
            "the leaf check sees what the leaf serves"
        );

        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        let pod = Arc::new(PodInfo::new(Arc::new(pod)));
        let choice = |cluster: &str, leaf_node: &str| LeafChoice {
            cluster: cluster.into(),
            leaf_node: leaf_node.into(),
            volumes: vec![("pv-1".into(), "default/data".into())],
            notes: Vec::new(),
            devices: Default::default(),
        };
        leaves.assume(pod.clone(), &choice("east", "east-1"));
        assert!(east.cache().is_assumed("default/p"));
        assert_eq!(east.volumes_held.len(), 1);
        assert!(!west.cache().is_assumed("default/p"));
        leaves.forget("east", "default/p");
        assert!(!east.cache().is_assumed("default/p"));
        assert!(east.volumes_held.is_empty());
        // Unknown clusters are ignored, not a panic.
        leaves.assume(pod, &choice("gone", "x"));

        let woken = east.sync_wake.notified();
        leaves.host_changed("east");
        tokio::time::timeout(std::time::Duration::from_secs(1), woken)
            .await
            .expect("pod sync woken");

        assert!(leaves.remove("east").is_some());
        assert!(leaves.cycle(Arc::default()).views.is_empty());
    }

    #[tokio::test]
    async fn a_deleted_host_pods_assumption_goes_and_its_successors_stays() {
        let leaves = Leaves::new(LeafSettings::default());
        let east = leaf("east", true);
        leaves.insert(east.clone());
        let incarnation = |uid: &str| {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "db-1", "namespace": "default", "uid": uid},
                "spec": {"containers": [{"name": "c", "image": "i"}]}
            }))
            .expect("pod");
            Arc::new(PodInfo::new(Arc::new(pod)))
        };
        let choice = LeafChoice {
            cluster: "east".into(),
            leaf_node: "east-1".into(),
            volumes: Vec::new(),
            notes: Vec::new(),
            devices: Default::default(),
        };
        // Reserved, then evicted before its copy came: the assumption goes.
        leaves.assume(incarnation("old"), &choice);
        leaves.forget_deleted("default/db-1", "old");
        assert!(!east.cache().is_assumed("default/db-1"));
        // Its successor under the same name, reserved before the old one's deletion is
        // seen, keeps its own.
        leaves.assume(incarnation("new"), &choice);
        leaves.forget_deleted("default/db-1", "old");
        assert!(east.cache().is_assumed("default/db-1"));
    }
}
