//! The scheduler, along kube-scheduler's `pkg/scheduler` seams: the host's watches feed
//! the cache and the queue ([`event_handlers`]); the loop pops a pod into the
//! [`scheduling_cycle`] (one [`schedule_pod`] with extenders, PostFilter, assume, Reserve,
//! Permit) and hands what it placed to a [`binding_cycle`] task; failures take one path
//! ([`failure`]). Leaves plug in through the registry (their watches, virtual nodes and
//! pod sync) and through LeafNodeFit, an ordinary plugin.

mod binding_cycle;
mod event_handlers;
pub mod extender;
mod failure;
mod group_domains;
mod pod_group_algorithm;
mod pod_group_cycle;
mod pod_group_preemption;
pub mod preemption;
mod rebalance;
pub mod schedule_pod;
mod scheduling_cycle;
mod shared;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::observe::panics::guarded;
pub use schedule_pod::{run_post_filter, schedule_pod};
pub use shared::Shared;

const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("the {0} watch never delivered its first list")]
    CacheNotReady(&'static str),
}

#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    pub parallel_bindings: usize,
    /// Where the join Secrets of leaf clusters are read from.
    pub namespace: String,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// The encoding of bindings and events (clientConnection.contentType).
    pub content_type: mcsched_wire::ContentType,
    /// The encoding pod and node lists and watches are asked in (the first of
    /// clientConnection.acceptContentTypes, else contentType).
    pub watch_content_type: mcsched_wire::ContentType,
}

/// Runs until `shutdown` completes, then lets bindings in flight finish.
/// `leader` says whether this instance may schedule; without leader election it is
/// always true.
pub async fn run(
    shared: Arc<Shared>,
    options: SchedulerOptions,
    mut leader: tokio::sync::watch::Receiver<bool>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SchedulerError> {
    let client = shared.bind_ctx.client.clone();
    let queue = shared.queue.clone();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<&'static str>(16);
    let ready = crate::control::watch::Ready::supervised(ready_tx, shared.watch_health.clone());
    let mut watches =
        event_handlers::spawn_watches(&client, &shared, options.watch_content_type, ready);
    let host_watches = watches.len();
    watches.push(spawn_leaves(&client, &shared, &options.namespace, &leader));
    watches.push(spawn_flusher(&shared));
    watches.push(spawn_policy_status(&shared, &leader));

    tokio::pin!(shutdown);
    // Pods and nodes must be listed before the first decision, or capacity looks free.
    // Every kind, storage included: a decision on a half-listed cluster can be wrong.
    let mut synced = HashSet::new();
    while synced.len() < host_watches {
        tokio::select! {
            _ = &mut shutdown => { abort_all(&watches); return Ok(()); }
            r = ready_rx.recv() => match r {
                Some(kind) => { synced.insert(kind); }
                None => return Err(SchedulerError::CacheNotReady("pod, node or storage")),
            },
        }
    }
    shared
        .synced
        .store(true, std::sync::atomic::Ordering::Release);
    info!(profiles = ?shared.profiles.frameworks.keys().collect::<Vec<_>>(), "caches synced");

    let bindings = Arc::new(Semaphore::new(options.parallel_bindings));
    loop {
        if !*leader.borrow() {
            info!("standing by: another instance holds the leader lease");
            tokio::select! {
                _ = &mut shutdown => break,
                r = leader.wait_for(|l| *l) => if r.is_err() { break },
            }
            info!("leading: scheduling");
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = leader.changed() => continue,
            next = queue.pop() => match next {
                Some(info) => schedule_one(&shared, &bindings, &leader, info).await,
                None => break,
            },
        }
    }
    info!("shutting down; waiting for bindings in flight");
    queue.close();
    if tokio::time::timeout(
        SHUTDOWN_GRACE,
        bindings.acquire_many(options.parallel_bindings as u32),
    )
    .await
    .is_err()
    {
        warn!("bindings still in flight after {SHUTDOWN_GRACE:?}; leaving them");
    }
    abort_all(&watches);
    Ok(())
}

/// kube's scheduleOne: the scheduling cycle inline, the binding cycle as its own task.
async fn schedule_one(
    shared: &Arc<Shared>,
    bindings: &Arc<Semaphore>,
    leader: &tokio::sync::watch::Receiver<bool>,
    info: mcsched_engine::framework::QueuedPodInfo,
) {
    // Fencing: past the renew deadline nothing is decided, even before the elector says so.
    if !crate::control::leader::may_act(leader, &shared.lease_health) {
        shared.queue.add_backoff(info);
        return;
    }
    let retry = info.clone();
    if let Some(group) = pod_group_cycle::group_to_schedule(shared, &info) {
        let cycle = pod_group_cycle::pod_group_cycle(shared, bindings, leader, info, group);
        if let Err(panic) = guarded("pod_group", cycle).await {
            failure::after_panic(shared, retry, "pod group cycle", panic);
        }
        return;
    }
    match guarded(
        "scheduling",
        scheduling_cycle::scheduling_cycle(shared, leader, info),
    )
    .await
    {
        Ok(Some(placed)) => spawn_binding(shared, bindings, leader, placed).await,
        Ok(None) => {}
        Err(panic) => failure::after_panic(shared, retry, "scheduling cycle", panic),
    }
}

/// The binding cycle of a placed pod, as its own task.
async fn spawn_binding(
    shared: &Arc<Shared>,
    bindings: &Arc<Semaphore>,
    leader: &tokio::sync::watch::Receiver<bool>,
    placed: scheduling_cycle::Placed,
) {
    // A waiting pod takes a binding slot only once allowed: the pods whose scheduling
    // would allow it must not be kept from binding by it.
    let slot = if placed.waiting.is_some() {
        None
    } else {
        match bindings.clone().acquire_owned().await {
            Ok(slot) => Some(slot),
            Err(_) => return,
        }
    };
    let retry = placed.info.clone();
    let cycle = binding_cycle::binding_cycle(
        shared.clone(),
        leader.clone(),
        placed,
        slot,
        bindings.clone(),
    );
    let shared = shared.clone();
    tokio::spawn(async move {
        if let Err(panic) = guarded("binding", cycle).await {
            failure::after_panic(&shared, retry, "binding cycle", panic);
        }
    });
}

/// Backoff and unschedulable pods back into circulation, the pending-pods gauges and the
/// cache's sizes (each second, as kube's cache sets them).
fn spawn_flusher(shared: &Arc<Shared>) -> JoinHandle<()> {
    let q = shared.queue.clone();
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            q.flush();
            let p = q.pending();
            let m = mcsched_engine::metrics::global();
            m.set_pending("active", p.active);
            m.set_pending("backoff", p.backoff);
            m.set_pending("unschedulable", p.unschedulable);
            m.set_pending("gated", p.gated);
            m.set_unschedulable(&q.unschedulable_reasons());
            let (nodes, pods, assumed) = shared.cache().sizes();
            m.set_cache_size(nodes, pods, assumed);
        }
    })
}

/// The placement policies' status, their pods' deletion after a cluster toleration ran
/// out, the pod-deletion-cost of those that keep their shape and the evictions of those
/// that rebalance, by the leader every few seconds.
fn spawn_policy_status(
    shared: &Arc<Shared>,
    leader: &tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<()> {
    let (shared, leader) = (shared.clone(), leader.clone());
    tokio::spawn(async move {
        let mut writer = crate::placement::policy_status::Writer::default();
        let mut rebalancer = rebalance::Rebalancer::default();
        let mut tick = tokio::time::interval(crate::placement::policy_status::INTERVAL);
        loop {
            tick.tick().await;
            if !shared.synced.load(std::sync::atomic::Ordering::Acquire)
                || !crate::control::leader::may_act(&leader, &shared.lease_health)
            {
                continue;
            }
            let snapshot = shared.cache().snapshot();
            if snapshot.policies.is_empty() {
                continue;
            }
            let set = snapshot.policies.clone();
            let client = &shared.bind_ctx.client;
            // Evictions answer a disruption budget's 429 at once, as client-go does.
            let evicting = shared
                .leaves
                .eviction_client()
                .unwrap_or_else(|| client.clone());
            let mut refused = crate::placement::cluster_failover::run(
                &evicting,
                &set,
                &snapshot,
                shared.leaves.agent_namespace(),
            )
            .await;
            refused.extend(
                crate::placement::deletion_cost::write(
                    client,
                    &set,
                    &snapshot,
                    shared.leaves.agent_namespace(),
                )
                .await,
            );
            refused.extend(rebalancer.round(&shared, &snapshot).await);
            writer.write(client, &set, &snapshot, &refused).await;
        }
    })
}

/// The leaf registry; every leaf it connects gets its virtual-node and pod-sync loops,
/// and its changes reach the queue as leaf events.
fn spawn_leaves(
    client: &Client,
    shared: &Arc<Shared>,
    namespace: &str,
    leader: &tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<()> {
    let (host, host_side, l) = (
        client.clone(),
        shared.host_side(leader.clone()),
        leader.clone(),
    );
    let lease = shared.lease_health.clone();
    let events = shared.events.clone();
    let renew_after = shared.leaves.settings.token_renew_after;
    let (refuse_host, refuse_leader, refuse_lease) =
        (client.clone(), leader.clone(), shared.lease_health.clone());
    let on_leaf = move |leaf: Arc<crate::multicluster::cluster::LeafCluster>| {
        leaf.adopt(tokio::spawn(crate::multicluster::virtual_node::run(
            host.clone(),
            leaf.clone(),
            l.clone(),
            lease.clone(),
        )));
        leaf.adopt(tokio::spawn(crate::multicluster::pod_sync::run(
            host.clone(),
            host_side.clone(),
            leaf.clone(),
            l.clone(),
        )));
        let join = leaf.join.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(join) = join {
            leaf.adopt(tokio::spawn(crate::multicluster::token_renewal::run(
                host.clone(),
                leaf.clone(),
                join,
                l.clone(),
                lease.clone(),
                events.clone(),
                renew_after,
            )));
        }
    };
    let queue = shared.queue.clone();
    tokio::spawn(crate::multicluster::registry::run(
        client.clone(),
        namespace.to_string(),
        shared.leaves.clone(),
        Arc::new(move |event| queue.on_event(event)),
        on_leaf,
        move |cluster: String, why: String| {
            let (host, leader, lease) = (
                refuse_host.clone(),
                refuse_leader.clone(),
                refuse_lease.clone(),
            );
            tokio::spawn(async move {
                if !crate::control::leader::may_act(&leader, &lease) {
                    return;
                }
                if let Err(e) =
                    crate::multicluster::virtual_node::refuse(&host, &cluster, &why).await
                {
                    tracing::warn!(%cluster, error = %e, "cannot mark the virtual node refused");
                }
            });
        },
    ))
}

fn abort_all(tasks: &[JoinHandle<()>]) {
    for t in tasks {
        t.abort();
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
