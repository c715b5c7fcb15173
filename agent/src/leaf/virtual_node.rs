//! The virtual node's life: its status follows the leaf (free resources of Ready,
//! schedulable leaf nodes; Ready while the leaf answers) and its Lease is renewed like a
//! kubelet's, so the host's node lifecycle controller treats it as any node.

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
use crate::snapshot::NodeInfo;

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
    lease: crate::leader::LeaseHealth,
) {
    let node_name = keys::virtual_node_name(&leaf.name);
    let nodes: Api<Node> = Api::all(host.clone());
    let leases: Api<Lease> = Api::namespaced(host, NODE_LEASE_NAMESPACE);
    let mut written: Option<(VirtualStatus, Instant)> = None;
    let mut last_probe: Option<Instant> = None;
    let mut last_renew: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = leaf.changed.notified() => tokio::time::sleep(DEBOUNCE).await,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {},
            r = leader.changed() => if r.is_err() { return },
        }
        if last_probe.is_none_or(|t| t.elapsed() >= LEASE_RENEW) {
            last_probe = Some(Instant::now());
            if !leaf.probe().await {
                debug!(cluster = %leaf.name, error = ?leaf.health().last_error, "leaf did not answer");
            }
        }
        if !crate::leader::may_act(&leader, &lease) {
            written = None;
            continue;
        }
        let ready = leaf.is_ready();
        if ready && last_renew.is_none_or(|t| t.elapsed() >= LEASE_RENEW) {
            match renew_lease(&leases, &nodes, &node_name).await {
                Ok(()) => last_renew = Some(Instant::now()),
                Err(e) => warn!(node = %node_name, error = %e, "renewing the node Lease failed"),
            }
        }
        if !leaf.is_synced() && ready {
            continue;
        }
        let (capacity, allocatable, leaf_nodes) = {
            let snap = leaf.cache().snapshot();
            leaf_resources(&snap.nodes)
        };
        let status = VirtualStatus {
            capacity,
            allocatable,
            ready,
            version: leaf.health().version,
            leaf_nodes,
        };
        let fresh = written
            .as_ref()
            .is_some_and(|(w, at)| *w == status && at.elapsed() < STATUS_REFRESH);
        if fresh {
            continue;
        }
        // Fencing: leadership may have ended while the leaf was probed and read.
        if !crate::leader::may_act(&leader, &lease) {
            written = None;
            continue;
        }
        let previous_ready = written.as_ref().map(|(w, _)| w.ready);
        match write_status(&nodes, &node_name, &status, previous_ready != Some(ready)).await {
            Ok(()) => {
                if previous_ready != Some(ready) {
                    info!(node = %node_name, ready, "virtual node readiness");
                }
                if written.as_ref().map(|(w, _)| w.leaf_nodes) != Some(status.leaf_nodes) {
                    // For `kubectl mcsched get clusters`; the status has no place for it.
                    let count = json!({"metadata": {"annotations": {
                        keys::LEAF_NODE_COUNT_ANNOTATION: status.leaf_nodes.to_string()}}});
                    if let Err(e) = nodes
                        .patch(&node_name, &PatchParams::default(), &Patch::Merge(&count))
                        .await
                    {
                        warn!(node = %node_name, error = %e, "annotating the leaf's node count failed");
                    }
                }
                written = Some((status, Instant::now()));
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
    let mut patch = json!({
        "status": {
            "capacity": quantities(&s.capacity),
            "allocatable": quantities(&s.allocatable),
            "conditions": [ready],
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
