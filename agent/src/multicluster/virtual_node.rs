//! The virtual node's life: its status follows the leaf (free resources of Ready,
//! schedulable leaf nodes; the features any leaf node declares; Ready while the leaf
//! answers) and its Lease is renewed like a kubelet's, so the host's node lifecycle
//! controller treats it as any node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcsched_shared::keys;
use mcsched_shared::resources::Resources;
use serde_json::json;
use tracing::{debug, info, warn};

use super::cluster::LeafCluster;
use mcsched_engine::snapshot::NodeInfo;

/// As the kubelet: Lease renewed every 10 s, lasting 40 s.
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
pub const LEASE_DURATION_SECONDS: i32 = 40;
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Status is written on change, and at least this often so heartbeats stay fresh.
const STATUS_REFRESH: Duration = Duration::from_secs(60);
/// Leaf changes come in bursts (a deployment scaling); one status write per burst.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// What the virtual node reports; compared to skip writes that change nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualStatus {
    pub capacity: Resources,
    pub allocatable: Resources,
    pub ready: bool,
    pub version: Option<String>,
    pub leaf_nodes: usize,
    /// `status.declaredFeatures`: every feature some leaf node declares, sorted and
    /// unique, so the host's NodeDeclaredFeatures keeps a pod off the virtual node only
    /// when no leaf node could take it (the leaf check asks it of each leaf node). Every
    /// leaf node counts, usable or not: the leaf check judges the rest.
    pub declared_features: Vec<String>,
}

/// Capacity: the allocatable of the leaf's Ready, schedulable nodes; allocatable: what
/// is left on them after the leaf's own pods. Pods mcsched placed there are left out:
/// the host already counts them on the virtual node.
pub fn leaf_resources(nodes: &[Arc<NodeInfo>]) -> (Resources, Resources, usize) {
    let mut capacity = Resources::default();
    let mut free = Resources::default();
    let mut usable = 0;
    for n in nodes {
        if !mcsched_shared::node::is_ready(&n.node) || n.unschedulable {
            continue;
        }
        usable += 1;
        capacity.add(&n.allocatable);
        let mut left = n.allocatable.clone();
        for p in &n.pods {
            if !p.labels().contains_key(keys::MANAGED_CLUSTER_LABEL) {
                left.sub(&p.requests);
                left.allowed_pods -= 1;
            }
        }
        floor_at_zero(&mut left);
        free.add(&left);
    }
    (capacity, free, usable)
}

fn floor_at_zero(r: &mut Resources) {
    r.milli_cpu = r.milli_cpu.max(0);
    r.memory = r.memory.max(0);
    r.ephemeral_storage = r.ephemeral_storage.max(0);
    r.allowed_pods = r.allowed_pods.max(0);
    for v in r.scalar.values_mut() {
        *v = (*v).max(0);
    }
}

/// Resources as a Node's capacity/allocatable map.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    let mut m = BTreeMap::new();
    m.insert("cpu".into(), Quantity(format!("{}m", r.milli_cpu)));
    m.insert("memory".into(), Quantity(r.memory.to_string()));
    m.insert(
        "ephemeral-storage".into(),
        Quantity(r.ephemeral_storage.to_string()),
    );
    m.insert("pods".into(), Quantity(r.allowed_pods.to_string()));
    for (k, v) in &r.scalar {
        m.insert(k.clone(), Quantity(v.to_string()));
    }
    m
}

fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Keeps `leaf`'s virtual node and Lease current while this agent may act as the leader
/// (`leader`, and `lease` within its renew deadline).
pub async fn run(
    host: Client,
    leaf: Arc<LeafCluster>,
    mut leader: tokio::sync::watch::Receiver<bool>,
    lease: crate::control::leader::LeaseHealth,
) {
    let mut keeper = Keeper::new(host, leaf);
    loop {
        tokio::select! {
            _ = keeper.leaf.changed.notified() => tokio::time::sleep(DEBOUNCE).await,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {},
            r = leader.changed() => if r.is_err() { return },
        }
        keeper.tick(&leader, &lease).await;
    }
}

/// One virtual node's writer: what it last wrote, and when it last probed the leaf and
/// renewed the node's Lease. A struct so that tests can drive it one pass at a time.
struct Keeper {
    leaf: Arc<LeafCluster>,
    node_name: String,
    nodes: Api<Node>,
    leases: Api<Lease>,
    written: Option<(VirtualStatus, Instant)>,
    last_probe: Option<Instant>,
    last_renew: Option<Instant>,
}

impl Keeper {
    fn new(host: Client, leaf: Arc<LeafCluster>) -> Self {
        Keeper {
            node_name: keys::virtual_node_name(&leaf.name),
            nodes: Api::all(host.clone()),
            leases: Api::namespaced(host, NODE_LEASE_NAMESPACE),
            leaf,
            written: None,
            last_probe: None,
            last_renew: None,
        }
    }

    /// One pass: probe the leaf when due, renew the Lease, write the status if it changed
    /// or is due for a refresh; nothing written unless this agent may act as the leader.
    async fn tick(
        &mut self,
        leader: &tokio::sync::watch::Receiver<bool>,
        lease: &crate::control::leader::LeaseHealth,
    ) {
        let (leaf, node_name, nodes) = (&self.leaf, &self.node_name, &self.nodes);
        if self.last_probe.is_none_or(|t| t.elapsed() >= LEASE_RENEW) {
            self.last_probe = Some(Instant::now());
            if !leaf.probe().await {
                debug!(cluster = %leaf.name, error = ?leaf.health().last_error, "leaf did not answer");
            }
        }
        if !crate::control::leader::may_act(leader, lease) {
            self.written = None;
            return;
        }
        let ready = leaf.is_ready();
        if ready && self.last_renew.is_none_or(|t| t.elapsed() >= LEASE_RENEW) {
            match renew_lease(&self.leases, nodes, node_name).await {
                Ok(()) => self.last_renew = Some(Instant::now()),
                Err(e) => warn!(node = %node_name, error = %e, "renewing the node Lease failed"),
            }
        }
        if !leaf.is_synced() && ready {
            return;
        }
        let (capacity, allocatable, leaf_nodes, declared_features) = {
            let snap = leaf.cache().snapshot();
            let (capacity, allocatable, usable) = leaf_resources(&snap.nodes);
            let features =
                mcsched_shared::node::declared_features_union(snap.nodes.iter().map(|n| &*n.node));
            (capacity, allocatable, usable, features)
        };
        let status = VirtualStatus {
            capacity,
            allocatable,
            ready,
            version: leaf.health().version,
            leaf_nodes,
            declared_features,
        };
        let fresh = self
            .written
            .as_ref()
            .is_some_and(|(w, at)| *w == status && at.elapsed() < STATUS_REFRESH);
        if fresh {
            return;
        }
        // Fencing: leadership may have ended while the leaf was probed and read.
        if !crate::control::leader::may_act(leader, lease) {
            self.written = None;
            return;
        }
        let previous_ready = self.written.as_ref().map(|(w, _)| w.ready);
        match write_status(nodes, node_name, &status, previous_ready != Some(ready)).await {
            Ok(()) => {
                if previous_ready != Some(ready) {
                    info!(node = %node_name, ready, "virtual node readiness");
                }
                if self.written.as_ref().map(|(w, _)| w.leaf_nodes) != Some(status.leaf_nodes) {
                    // For `kubectl mcsched get clusters`; the status has no place for it.
                    let count = json!({"metadata": {"annotations": {
                        keys::LEAF_NODE_COUNT_ANNOTATION: status.leaf_nodes.to_string()}}});
                    if let Err(e) = nodes
                        .patch(node_name, &PatchParams::default(), &Patch::Merge(&count))
                        .await
                    {
                        warn!(node = %node_name, error = %e, "annotating the leaf's node count failed");
                    }
                }
                self.written = Some((status, Instant::now()));
            }
            Err(e) => {
                warn!(node = %node_name, error = %e, "writing the virtual node's status failed")
            }
        }
    }
}

/// The leaf's join Secret was refused: the virtual node is NotReady and says why (its
/// pods stay where they are; nothing new goes there).
pub async fn refuse(host: &Client, cluster: &str, why: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(host.clone());
    let now = now_time();
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "LeafKubeconfigRefused",
        "message": why, "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    nodes
        .patch_status(
            &keys::virtual_node_name(cluster),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await?;
    Ok(())
}

async fn write_status(
    nodes: &Api<Node>,
    name: &str,
    s: &VirtualStatus,
    transition: bool,
) -> Result<(), kube::Error> {
    let now = now_time();
    let (status, reason, message) = if s.ready {
        (
            "True",
            "LeafClusterReady",
            format!("leaf cluster answers; {} usable nodes", s.leaf_nodes),
        )
    } else {
        (
            "False",
            "LeafClusterUnreachable",
            format!(
                "leaf cluster has not answered for more than {}s",
                super::cluster::READY_GRACE.as_secs()
            ),
        )
    };
    let mut ready = json!({
        "type": "Ready", "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now,
    });
    let current = nodes.get_status(name).await?;
    let old = current
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    let changed = transition || old.is_none_or(|c| c.status != status);
    ready["lastTransitionTime"] = match old {
        Some(c) if !changed => json!(c.last_transition_time),
        _ => json!(now),
    };
    // declaredFeatures is an atomic list: the patch replaces it whole, `[]` clearing it.
    let mut patch = json!({
        "status": {
            "capacity": quantities(&s.capacity),
            "allocatable": quantities(&s.allocatable),
            "conditions": [ready],
            "declaredFeatures": s.declared_features,
        }
    });
    if let Some(v) = &s.version {
        patch["status"]["nodeInfo"] = json!({"kubeletVersion": v});
    }
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    Ok(())
}

async fn renew_lease(
    leases: &Api<Lease>,
    nodes: &Api<Node>,
    name: &str,
) -> Result<(), kube::Error> {
    let renew = MicroTime(k8s_openapi::jiff::Timestamp::now());
    match leases.get_opt(name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(renew);
            spec.holder_identity = Some(name.to_string());
            spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
            leases.replace(name, &PostParams::default(), &lease).await?;
        }
        None => {
            // Owned by the node, as the kubelet does, so it goes when the node goes.
            let node = nodes.get(name).await?;
            let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: name.to_string(),
                uid: node.metadata.uid.unwrap_or_default(),
                ..Default::default()
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(NODE_LEASE_NAMESPACE.into()),
                    owner_references: Some(vec![owner]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.to_string()),
                    lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                    renew_time: Some(renew),
                    ..Default::default()
                }),
            };
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::leader::LeaseHealth;
    use crate::fake_api::{self, Calls, Requests};

    fn node(name: &str, extra: serde_json::Value) -> Arc<NodeInfo> {
        let n = json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let n: Node = serde_json::from_value(fake_api::merged(n, extra)).expect("node");
        Arc::new(NodeInfo::new(Arc::new(n)))
    }

    fn not_ready() -> serde_json::Value {
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    }

    #[test]
    fn room_counts_ready_schedulable_leaf_nodes_only() {
        let nodes = [
            node("ready", json!({})),
            node("cordoned", json!({"spec": {"unschedulable": true}})),
            node("down", not_ready()),
        ];
        let (capacity, free, usable) = leaf_resources(&nodes);
        assert_eq!(usable, 1);
        assert_eq!(capacity.milli_cpu, 4000);
        assert_eq!(free.milli_cpu, 4000);
        assert_eq!(capacity.allowed_pods, 110);
    }

    /// The leaf's own pods take room; mcsched's copies are counted on the host already.
    #[test]
    fn the_leafs_own_pods_take_room_and_copies_do_not() {
        use mcsched_engine::plugins::testing::pod_requesting;
        let n = node("ready", json!({}));
        let mut info = (*n).clone();
        info.add_pod(Arc::new(pod_requesting("theirs", &[("cpu", "1")])));
        let mut copy = (*pod_requesting("copy", &[("cpu", "2")]).pod()).clone();
        copy.metadata.labels = Some(BTreeMap::from([(
            keys::MANAGED_CLUSTER_LABEL.to_string(),
            "east".to_string(),
        )]));
        info.add_pod(Arc::new(mcsched_engine::snapshot::PodInfo::new(Arc::new(
            copy,
        ))));
        let (capacity, free, _) = leaf_resources(&[Arc::new(info)]);
        assert_eq!(capacity.milli_cpu, 4000);
        assert_eq!(free.milli_cpu, 3000);
        assert_eq!(free.allowed_pods, 109);
    }

    struct Fixture {
        keeper: Keeper,
        host_calls: Calls,
        host_sent: Requests,
    }

    /// A synced leaf `east` with one Ready 4-cpu node, answering its probes, and a host
    /// holding the virtual node.
    fn fixture() -> Fixture {
        let (host, host_calls, host_sent) = fake_api::recording(|method, path, sent| {
            let node = json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "mcsched-east", "uid": "node-uid"}});
            match (method, path) {
                ("GET", "/api/v1/nodes/mcsched-east" | "/api/v1/nodes/mcsched-east/status") => {
                    (200, node)
                }
                ("GET", _) => (404, fake_api::status(404, "NotFound", "not found")),
                ("PATCH", _) => (200, node),
                _ => (201, sent.clone()),
            }
        });
        let (leaf_client, _) = fake_api::client(|_, path| {
            if path == "/version" {
                (
                    200,
                    json!({"major": "1", "minor": "33", "gitVersion": "v1.33.1",
                        "gitCommit": "x", "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
                        "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"}),
                )
            } else {
                (404, fake_api::status(404, "NotFound", "not found"))
            }
        });
        let leaf = LeafCluster::new("east".into(), leaf_client, "1".into(), "h1".into());
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "east-1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node");
        leaf.cache().apply_node(Arc::new(n));
        leaf.mark_synced();
        Fixture {
            keeper: Keeper::new(host, leaf),
            host_calls,
            host_sent,
        }
    }

    impl Fixture {
        fn status_writes(&self) -> Vec<serde_json::Value> {
            fake_api::sent(&self.host_sent, "PATCH", "/nodes/mcsched-east/status")
        }

        /// The leaf last answered longer ago than READY_GRACE (or now), and is not probed
        /// again before the next pass.
        fn leaf_answered(&mut self, silent: bool) {
            let at = if silent {
                Instant::now()
                    .checked_sub(super::super::cluster::READY_GRACE + Duration::from_secs(1))
            } else {
                Some(Instant::now())
            };
            self.keeper.leaf.answered_at(at);
            self.keeper.last_probe = Some(Instant::now());
        }
    }

    fn ready_condition(write: &serde_json::Value) -> (String, String) {
        let c = &write["status"]["conditions"][0];
        assert_eq!(c["type"], "Ready");
        (
            c["status"].as_str().unwrap_or_default().to_string(),
            c["reason"].as_str().unwrap_or_default().to_string(),
        )
    }

    #[tokio::test]
    async fn an_answering_leaf_makes_its_virtual_node_ready_with_the_leafs_room() {
        let mut f = fixture();
        let (_tx, leader) = tokio::sync::watch::channel(true);
        f.keeper.tick(&leader, &LeaseHealth::default()).await;
        let writes = f.status_writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(
            ready_condition(&writes[0]),
            ("True".into(), "LeafClusterReady".into())
        );
        assert_eq!(writes[0]["status"]["capacity"]["cpu"], "4000m");
        assert_eq!(writes[0]["status"]["allocatable"]["pods"], "110");
        // No leaf node declares a feature: nor does the virtual node.
        assert_eq!(writes[0]["status"]["declaredFeatures"], json!([]));
        assert!(fake_api::called(
            &f.host_calls,
            "POST",
            "/namespaces/kube-node-lease/leases"
        ));
        // Nothing changed: nothing written again.
        f.keeper.tick(&leader, &LeaseHealth::default()).await;
        assert_eq!(f.status_writes().len(), 1);
    }

    /// A leaf node of `east` declaring `features`, not Ready when `!ready`.
    fn leaf_node(name: &str, features: &[&str], ready: bool) -> Arc<Node> {
        let ready = if ready { "True" } else { "False" };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": ready}],
                    "declaredFeatures": features}
            }))
            .expect("node"),
        )
    }

    #[tokio::test]
    async fn the_virtual_node_declares_every_feature_some_leaf_node_declares() {
        let mut f = fixture();
        let leaf = f.keeper.leaf.clone();
        leaf.cache().apply_node(leaf_node(
            "east-2",
            &["UserNamespacesHostNetworkSupport", "VolumeBindMountOptions"],
            true,
        ));
        leaf.cache().apply_node(leaf_node(
            "east-3",
            &[
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport",
            ],
            false,
        ));
        let (_tx, leader) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        f.keeper.tick(&leader, &lease).await;
        let writes = f.status_writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(
            writes[0]["status"]["declaredFeatures"],
            json!([
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport",
                "VolumeBindMountOptions"
            ]),
            "sorted, once each, the NotReady node's too"
        );
        // A leaf node's features change: the virtual node's follow at once.
        leaf.cache().apply_node(leaf_node("east-2", &[], true));
        f.keeper.tick(&leader, &lease).await;
        let writes = f.status_writes();
        assert_eq!(writes.len(), 2);
        assert_eq!(
            writes[1]["status"]["declaredFeatures"],
            json!([
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport"
            ])
        );
    }

    #[tokio::test]
    async fn the_virtual_node_follows_the_leaf_from_ready_to_not_ready_and_back() {
        let mut f = fixture();
        let (_tx, leader) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        f.keeper.tick(&leader, &lease).await;
        f.leaf_answered(true);
        f.keeper.tick(&leader, &lease).await;
        f.leaf_answered(false);
        f.keeper.tick(&leader, &lease).await;
        let seen: Vec<_> = f.status_writes().iter().map(ready_condition).collect();
        assert_eq!(
            seen,
            [
                ("True".to_string(), "LeafClusterReady".to_string()),
                ("False".to_string(), "LeafClusterUnreachable".to_string()),
                ("True".to_string(), "LeafClusterReady".to_string()),
            ]
        );
    }

    #[tokio::test]
    async fn a_standby_writes_no_virtual_node_status_or_lease() {
        let mut f = fixture();
        let (_tx, leader) = tokio::sync::watch::channel(false);
        f.keeper.tick(&leader, &LeaseHealth::default()).await;
        assert_eq!(fake_api::writes(&f.host_calls), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_leader_past_its_renew_deadline_writes_no_virtual_node_status_or_lease() {
        let mut f = fixture();
        let (_tx, leader) = tokio::sync::watch::channel(true);
        let lease = LeaseHealth::default();
        lease.renewed_for_test(Duration::ZERO);
        f.keeper.tick(&leader, &lease).await;
        assert_eq!(fake_api::writes(&f.host_calls), Vec::<String>::new());
    }
}
