//! How current the virtual nodes stay while the agent works: one leaf at a time, a leaf
//! node's pod capacity is raised by one, and the host's virtual node is read until its
//! capacity shows it. The time from the leaf's answer to the host showing it is the lag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use mcsched_shared::keys;
use serde_json::json;

/// A change not shown within this long counts as missed.
const GIVE_UP: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(25);
const BETWEEN: Duration = Duration::from_millis(250);

pub struct Probe {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<Vec<Option<Duration>>>>,
}

impl Probe {
    /// Probes `leaves` (name, client) round-robin on `leaf_node` until stopped.
    pub fn start(host: Client, leaves: Vec<(String, Client)>, leaf_node: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut lags = Vec::new();
            let mut round = 0usize;
            // Every leaf at least once, however short the measured phase.
            while round < leaves.len() || !stopped.load(Ordering::Relaxed) {
                let (name, client) = &leaves[round % leaves.len()];
                lags.push(one(&host, name, client, &leaf_node).await?);
                round += 1;
                tokio::time::sleep(BETWEEN).await;
            }
            Ok(lags)
        });
        Probe { stop, task }
    }

    /// The lags measured (None: not shown within 30 s).
    pub async fn finish(self) -> anyhow::Result<Vec<Option<Duration>>> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await?
    }
}

fn pods_capacity(n: &Node) -> Option<i64> {
    n.status
        .as_ref()?
        .capacity
        .as_ref()?
        .get("pods")?
        .0
        .parse()
        .ok()
}

async fn one(
    host: &Client,
    leaf: &str,
    client: &Client,
    leaf_node: &str,
) -> anyhow::Result<Option<Duration>> {
    let virtual_nodes: Api<Node> = Api::all(host.clone());
    let name = keys::virtual_node_name(leaf);
    let leaf_nodes: Api<Node> = Api::all(client.clone());
    let before = pods_capacity(&virtual_nodes.get(&name).await?).unwrap_or_default();
    let node = leaf_nodes.get(leaf_node).await?;
    let pods = pods_capacity(&node).unwrap_or_default() + 1;
    let patch = json!({"status": {
        "capacity": {"pods": pods.to_string()},
        "allocatable": {"pods": pods.to_string()},
    }});
    leaf_nodes
        .patch_status(leaf_node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let written = Instant::now();
    while written.elapsed() < GIVE_UP {
        if pods_capacity(&virtual_nodes.get(&name).await?).unwrap_or_default() > before {
            return Ok(Some(written.elapsed()));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(None)
}
