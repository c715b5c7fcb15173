//! The scheduling loop: watch → cache → queue → pop → framework (filter, score) →
//! assume → reserve → bind (concurrently, bounded) → event.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::cache::Cache;
use crate::events::{EventSink, Message};
use crate::explain::ExplanationStore;
use crate::extender::Extender;
use crate::extender::MAX_EXTENDER_PRIORITY;
use crate::framework::runtime::CycleRecord;
use crate::framework::{
    BindContext, ClusterEvent, Code, CycleState, Filtered, FitError, Framework, MAX_NODE_SCORE,
    QueuedPodInfo, ScheduleResult, Status, fit_error,
};
use crate::pod_selectors::{Selector, SelectorKind};
use crate::profiles::Profiles;
use crate::queue::SchedulingQueue;
use crate::snapshot::PodInfo;
use mcsched_shared::explain::ExtenderAnswer;

/// Pods that finished hold no resources, so they are not watched at all.
pub(crate) const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";
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
    pub leaf: crate::leaf::registry::LeafSettings,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

/// Everything the loop, the binding tasks and the HTTP server share.
pub struct Shared {
    pub profiles: Profiles,
    pub cache: Mutex<Cache>,
    pub queue: Arc<SchedulingQueue>,
    pub events: EventSink,
    pub explanations: ExplanationStore,
    pub bind_ctx: BindContext,
    pub extenders: Vec<Arc<Extender>>,
    /// Joined leaf clusters.
    pub leaves: Arc<crate::leaf::registry::Leaves>,
    /// Set once pods and nodes are listed.
    pub synced: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub fn new(
        client: Client,
        profiles: Profiles,
        extenders: Vec<Arc<Extender>>,
        options: &SchedulerOptions,
    ) -> Arc<Self> {
        let queue = SchedulingQueue::new(
            options.initial_backoff,
            options.max_backoff,
            profiles.plugin_events.clone(),
        );
        Arc::new(Shared {
            profiles,
            cache: Mutex::new(Cache::new()),
            queue,
            events: EventSink::start(client.clone(), hostname()),
            explanations: ExplanationStore::default(),
            bind_ctx: BindContext { client },
            extenders,
            leaves: Arc::new(crate::leaf::registry::Leaves::new(options.leaf)),
            synced: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_ours(&self, pod: &Pod) -> bool {
        let spec = pod.spec.as_ref();
        let name = spec
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.profiles.get(name).is_some()
    }
}

pub(crate) fn key_of<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.as_deref().unwrap_or_default(),
        o.name_any()
    )
}

fn is_unbound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
        .is_empty()
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
    let mut watches = spawn_watches(&client, &shared, ready_tx);
    watches.push(spawn_leaves(&client, &shared, &options.namespace, &leader));
    let flusher = {
        let q = queue.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                q.flush();
                let p = q.pending();
                let m = crate::metrics::global();
                m.set_pending("active", p.active);
                m.set_pending("backoff", p.backoff);
                m.set_pending("unschedulable", p.unschedulable);
                m.set_pending("gated", p.gated);
            }
        })
    };

    tokio::pin!(shutdown);
    // Pods and nodes must be listed before the first decision, or capacity looks free.
    // Every kind, storage included: a decision on a half-listed cluster can be wrong.
    let mut synced = HashSet::new();
    while synced.len() < watches.len() - 1 {
        tokio::select! {
            _ = &mut shutdown => { abort_all(&watches, &flusher); return Ok(()); }
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
    abort_all(&watches, &flusher);
    Ok(())
}

/// The leaf registry; every leaf it connects gets its virtual-node and pod-sync loops.
fn spawn_leaves(
    client: &Client,
    shared: &Arc<Shared>,
    namespace: &str,
    leader: &tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let (host, s, l) = (client.clone(), shared.clone(), leader.clone());
    let on_leaf = move |leaf: Arc<crate::leaf::cluster::LeafCluster>| {
        leaf.adopt(tokio::spawn(crate::leaf::virtual_node::run(
            host.clone(),
            leaf.clone(),
            l.clone(),
        )));
        leaf.adopt(tokio::spawn(crate::leaf::pod_sync::run(
            host.clone(),
            s.clone(),
            leaf.clone(),
            l.clone(),
        )));
    };
    tokio::spawn(crate::leaf::registry::run(
        client.clone(),
        namespace.to_string(),
        shared.leaves.clone(),
        shared.queue.clone(),
        on_leaf,
    ))
}

fn abort_all(watches: &[tokio::task::JoinHandle<()>], flusher: &tokio::task::JoinHandle<()>) {
    for w in watches {
        w.abort();
    }
    flusher.abort();
}

async fn schedule_one(
    shared: &Arc<Shared>,
    bindings: &Arc<Semaphore>,
    leader: &tokio::sync::watch::Receiver<bool>,
    info: QueuedPodInfo,
) {
    let pod = info.pod.clone();
    let scheduler_name = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_else(|| "default-scheduler".into());
    let Some(fw) = shared.profiles.get(&scheduler_name).cloned() else {
        shared.queue.done(&pod.key);
        return;
    };
    if shared.cache().is_assumed(&pod.key) {
        shared.queue.done(&pod.key);
        return;
    }
    let started = std::time::Instant::now();
    let snapshot = shared.cache().snapshot();
    let mut state = CycleState::new();
    // Plugin timings for a sample of cycles only, as kube-scheduler.
    state.set_record_plugin_metrics(crate::metrics::sample_plugin_metrics(&mut rand::rng()));
    let leaf_cycle = shared.leaves.cycle(snapshot.volumes.clone());
    state.write(crate::leaf::feasibility::LEAF_CYCLE_KEY, leaf_cycle.clone());
    let mut record = CycleRecord::default();
    let result = run_cycle(shared, &fw, &mut state, &pod, &snapshot, &mut record).await;
    let metrics = crate::metrics::global();
    let outcome = if result.is_ok() {
        "Success"
    } else {
        "Unschedulable"
    };
    for d in &record.durations {
        metrics.extension_point(
            &d.extension_point,
            outcome,
            &scheduler_name,
            d.micros as f64 / 1e6,
        );
    }
    let node = match result {
        Ok(r) => r.node,
        Err(fit) => {
            let mut fit = *fit;
            let mut nominated = None;
            if fw.has_post_filter() && fit.num_all_nodes > 0 {
                metrics.preemption_attempts.inc();
                let (res, status) = tokio::task::block_in_place(|| {
                    fw.run_post_filter(&state, &pod, &snapshot, &fit.diagnosis.node_statuses)
                });
                if status.is_success() {
                    nominated = res.nominated_node.clone();
                    crate::preemption::evict(
                        &shared.bind_ctx.client,
                        &shared.events,
                        &fw,
                        status.plugin,
                        &pod,
                        &res.victims,
                    );
                } else if !status.reasons.is_empty() {
                    fit.diagnosis.post_filter_msg = Some(status.message());
                }
            }
            shared.explanations.record_failure(
                &scheduler_name,
                &pod.key,
                &record,
                &fit,
                nominated.clone(),
            );
            report_unschedulable(shared, &scheduler_name, info, &fit, nominated, started);
            return;
        }
    };
    shared
        .explanations
        .record_success(&scheduler_name, &pod.key, &record, &node, snapshot.len());

    shared.cache().assume(pod.clone(), &node);
    // A pod sent to a leaf also counts on the leaf node found for it, until the leaf's
    // scheduler has placed the copy.
    let leaf = snapshot
        .get(&node)
        .and_then(|n| n.cluster.clone())
        .and_then(|c| Some((c, record.leaf_nodes.get(&node)?.clone())));
    if let Some((cluster, leaf_node)) = &leaf
        && let Ok(leaf_pod) = leaf_cycle.leaf_pod(&pod)
    {
        shared.leaves.assume(cluster, leaf_pod, leaf_node);
    }
    let reserved = fw.run_reserve(&mut state, &pod, &node);
    let (permit, waits) = if reserved.is_success() {
        fw.run_permit(&state, &pod, &node)
    } else if reserved.is_rejected() {
        (reserved, Vec::new())
    } else {
        let msg = format!(
            "running Reserve plugin {:?}: {}",
            reserved.plugin,
            reserved.message()
        );
        (Status::error(msg).with_plugin(reserved.plugin), Vec::new())
    };
    let waiting = permit.code == Code::Wait;
    if waiting {
        fw.add_waiting_pod(pod.clone(), &node, &waits);
    } else if !permit.is_success() {
        fw.run_unreserve(&mut state, &pod, &node);
        forget_assumed(shared, &pod.key, &leaf);
        if permit.is_rejected() {
            // As kube: a FitError over the one node chosen.
            let fit = node_fit_error(&node, permit);
            shared
                .explanations
                .record_failure(&scheduler_name, &pod.key, &record, &fit, None);
            report_unschedulable(shared, &scheduler_name, info, &fit, None, started);
        } else {
            fail_with_error(shared, &scheduler_name, info, permit.message());
        }
        return;
    }

    // A waiting pod takes a binding slot only once allowed: the pods whose scheduling
    // would allow it must not be kept from binding by it.
    let slot = if waiting {
        None
    } else {
        match bindings.clone().acquire_owned().await {
            Ok(slot) => Some(slot),
            Err(_) => return,
        }
    };
    let shared = shared.clone();
    let leader = leader.clone();
    let bindings = bindings.clone();
    // A waiting pod's explanation turns into a failure should it be rejected.
    let waiting_record = waiting.then(|| record.clone());
    tokio::spawn(async move {
        let waited = fw.wait_on_permit(&pod).await;
        if !waited.is_success() {
            fw.run_unreserve(&mut state, &pod, &node);
            forget_assumed(&shared, &pod.key, &leaf);
            if waited.is_rejected() {
                debug!(pod = %pod.key, %node, status = %waited, "rejected while waiting on permit");
                let fit = node_fit_error(&node, waited);
                if let Some(record) = &waiting_record {
                    shared.explanations.record_failure(
                        &scheduler_name,
                        &pod.key,
                        record,
                        &fit,
                        None,
                    );
                }
                report_unschedulable(&shared, &scheduler_name, info, &fit, None, started);
            } else {
                fail_with_error(&shared, &scheduler_name, info, waited.message());
            }
            // The room it held is free again (kube's AssignedPodDelete), the pod itself
            // already requeued.
            shared.queue.on_event(ClusterEvent::PodDelete);
            return;
        }
        let _slot = match slot {
            Some(slot) => slot,
            None => match bindings.acquire_owned().await {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let ctx = shared.bind_ctx.clone();
        if !*leader.borrow() {
            // Lost the lease since this pod was placed: the new leader decides.
            fw.run_unreserve(&mut state, &pod, &node);
            forget_assumed(&shared, &pod.key, &leaf);
            shared.queue.add_backoff(info);
            return;
        }
        let mut status = fw.run_pre_bind(&ctx, &state, &pod, &node).await;
        if status.is_success() {
            // An interested extender with a bind verb binds instead of the Bind plugins.
            let binder = shared
                .extenders
                .iter()
                .find(|e| e.is_binder() && e.is_interested(&pod));
            status = match binder {
                Some(ext) => match ext.bind(&pod, &node).await {
                    Ok(()) => crate::framework::Status::success(),
                    Err(e) => crate::framework::Status::error(e.to_string()),
                },
                None => fw.run_bind(&ctx, &state, &pod, &node).await,
            };
        }
        if status.is_success() {
            debug!(pod = %pod.key, %node, "bound");
            crate::metrics::global().attempt(
                "scheduled",
                &scheduler_name,
                started.elapsed().as_secs_f64(),
            );
            shared.events.scheduled(&scheduler_name, &pod.pod, &node);
            fw.run_post_bind(&state, &pod, &node);
            shared.queue.done(&pod.key);
            return;
        }
        fw.run_unreserve(&mut state, &pod, &node);
        forget_assumed(&shared, &pod.key, &leaf);
        let gone = status.code == Code::Error && status.message().contains("binding rejected");
        warn!(pod = %pod.key, %node, status = %status, "binding failed");
        if gone {
            // Deleted or bound elsewhere meanwhile: the watch will tell.
            shared.queue.done(&pod.key);
        } else {
            fail_with_error(
                &shared,
                &scheduler_name,
                info,
                format!("Binding rejected: {status}"),
            );
        }
    });
}

/// Filter (plugins, then extenders) and score (plugins plus extenders' priorities).
async fn run_cycle(
    shared: &Shared,
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &crate::snapshot::Snapshot,
    record: &mut CycleRecord,
) -> Result<ScheduleResult, Box<FitError>> {
    let filtered =
        tokio::task::block_in_place(|| fw.filter_phase(state, pod, snapshot, record, false))?;
    let (mut feasible, mut statuses) = match filtered {
        Filtered::Nominated(node) => {
            return Ok(ScheduleResult {
                node,
                evaluated_nodes: 1,
                feasible_nodes: 1,
            });
        }
        Filtered::Feasible(f, s) => (f, s),
    };
    let interested: Vec<&Arc<Extender>> = shared
        .extenders
        .iter()
        .filter(|e| e.is_interested(pod))
        .collect();
    for ext in &interested {
        if ext.config.filter_verb.is_none() || feasible.is_empty() {
            continue;
        }
        let nodes: Vec<&Node> = feasible.iter().map(|n| n.node.as_ref()).collect();
        let mut answer = ExtenderAnswer {
            extender: ext.name().to_string(),
            verb: "filter".into(),
            error: None,
            failed_nodes: Vec::new(),
            scores: Vec::new(),
        };
        match ext.filter(&pod.pod, &nodes).await {
            Ok(res) => {
                let keep: HashSet<&str> = res.nodes.iter().map(String::as_str).collect();
                feasible.retain(|n| keep.contains(n.name.as_str()));
                for (node, reason) in &res.failed {
                    statuses.insert(
                        node.clone(),
                        Status::unschedulable(reason.clone()).with_plugin("extender"),
                    );
                    answer.failed_nodes.push((node.clone(), reason.clone()));
                }
                for (node, reason) in &res.failed_unresolvable {
                    statuses.insert(
                        node.clone(),
                        Status::unresolvable(reason.clone()).with_plugin("extender"),
                    );
                    answer.failed_nodes.push((node.clone(), reason.clone()));
                }
            }
            Err(e) if ext.config.ignorable => {
                warn!(extender = %ext.name(), error = %e, "ignorable extender failed; skipping it");
                answer.error = Some(e.to_string());
            }
            Err(e) => {
                answer.error = Some(e.to_string());
                record.extenders.push(answer);
                let mut fit = fit_error(snapshot.len(), statuses);
                fit.diagnosis.pre_filter_msg = Some(e.to_string());
                return Err(Box::new(fit));
            }
        }
        record.extenders.push(answer);
    }
    if feasible.is_empty() {
        return Err(Box::new(fit_error(snapshot.len(), statuses)));
    }
    let mut extra: Option<Vec<i64>> = None;
    if feasible.len() > 1 {
        let nodes: Vec<&Node> = feasible.iter().map(|n| n.node.as_ref()).collect();
        for ext in interested
            .iter()
            .filter(|e| e.config.prioritize_verb.is_some())
        {
            match ext.prioritize(&pod.pod, &nodes).await {
                Ok(scores) => {
                    let totals = extra.get_or_insert_with(|| vec![0; feasible.len()]);
                    for (t, n) in totals.iter_mut().zip(feasible.iter()) {
                        let s = scores.get(&n.name).copied().unwrap_or(0);
                        *t += s * ext.config.weight * (MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY);
                    }
                    record.extenders.push(ExtenderAnswer {
                        extender: ext.name().to_string(),
                        verb: "prioritize".into(),
                        error: None,
                        failed_nodes: Vec::new(),
                        scores: scores.into_iter().collect(),
                    });
                }
                // kube ignores prioritize errors: the extender's scores count as zero.
                Err(e) => {
                    warn!(extender = %ext.name(), error = %e, "extender prioritize failed");
                    record.extenders.push(ExtenderAnswer {
                        extender: ext.name().to_string(),
                        verb: "prioritize".into(),
                        error: Some(e.to_string()),
                        failed_nodes: Vec::new(),
                        scores: Vec::new(),
                    });
                }
            }
        }
    }
    let evaluated = record.num_evaluated;
    let feasible_nodes = feasible.len();
    let node = tokio::task::block_in_place(|| {
        fw.score_phase(state, pod, feasible, snapshot, record, extra.as_deref())
    });
    Ok(ScheduleResult {
        node,
        evaluated_nodes: evaluated,
        feasible_nodes,
    })
}

/// A placement that will not happen: its assumptions in the host and leaf caches go.
fn forget_assumed(shared: &Shared, key: &str, leaf: &Option<(String, String)>) {
    shared.cache().forget(key);
    if let Some((cluster, _)) = leaf {
        shared.leaves.forget(cluster, key);
    }
}

/// kube's FitError for a pod rejected after its node was chosen (Reserve, Permit,
/// WaitOnPermit): one node, rejected by that plugin.
fn node_fit_error(node: &str, status: Status) -> FitError {
    let mut statuses = crate::framework::NodeStatuses::new();
    statuses.insert(node.to_string(), status);
    fit_error(1, statuses)
}

/// The failure handling of an unschedulable pod: metrics, the FailedScheduling event,
/// the PodScheduled condition, and the unschedulable queue.
fn report_unschedulable(
    shared: &Shared,
    scheduler_name: &str,
    info: QueuedPodInfo,
    fit: &FitError,
    nominated: Option<String>,
    started: std::time::Instant,
) {
    let message = fit.to_string();
    debug!(pod = %info.pod.key, %message, "unschedulable");
    crate::metrics::global().attempt(
        "unschedulable",
        scheduler_name,
        started.elapsed().as_secs_f64(),
    );
    shared
        .events
        .failed_scheduling(scheduler_name, &info.pod.pod, message.clone());
    shared.events.send(Message::Unschedulable {
        namespace: info.pod.namespace.clone(),
        name: info.pod.name.clone(),
        reason: "Unschedulable",
        message,
        nominated_node: nominated,
    });
    let plugins = fit.diagnosis.unschedulable_plugins.clone();
    shared.queue.add_unschedulable(info, plugins);
}

fn fail_with_error(shared: &Shared, scheduler_name: &str, info: QueuedPodInfo, message: String) {
    crate::metrics::global().attempt("error", scheduler_name, 0.0);
    shared
        .events
        .failed_scheduling(scheduler_name, &info.pod.pod, message.clone());
    shared.events.send(Message::Unschedulable {
        namespace: info.pod.namespace.clone(),
        name: info.pod.name.clone(),
        reason: "SchedulerError",
        message,
        nominated_node: None,
    });
    shared.queue.add_backoff(info);
}

/// One task per watched kind; each applies events to the cache and tells the queue.
fn spawn_watches(
    client: &Client,
    shared: &Arc<Shared>,
    ready: tokio::sync::mpsc::Sender<&'static str>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let pods: Api<Pod> = Api::all(client.clone());
    let s = shared.clone();
    let r = ready.clone();
    tasks.push(tokio::spawn(watch_kind(
        pods,
        watcher::Config::default().fields(NON_TERMINAL_PODS),
        "pod",
        r,
        move |ev| on_pod_event(&s, ev),
    )));
    let nodes: Api<Node> = Api::all(client.clone());
    let s = shared.clone();
    tasks.push(tokio::spawn(watch_kind(
        nodes,
        watcher::Config::default(),
        "node",
        ready.clone(),
        move |ev| match ev {
            Change::Apply(n, is_new) => {
                s.cache().apply_node(n);
                s.queue.on_event(if is_new {
                    ClusterEvent::NodeAdd
                } else {
                    ClusterEvent::NodeUpdate
                });
            }
            Change::Delete(n) => s.cache().delete_node(&n.name_any()),
        },
    )));
    let s = shared.clone();
    tasks.push(tokio::spawn(watch_kind(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
        "namespace",
        ready.clone(),
        move |ev| {
            match ev {
                Change::Apply(ns, _) => s.cache().set_namespace(ns.name_any(), ns.labels().clone()),
                Change::Delete(ns) => s.cache().delete_namespace(&ns.name_any()),
            }
            s.queue.on_event(ClusterEvent::NamespaceChange);
        },
    )));
    macro_rules! storage_watch {
        ($kind:ty, $label:expr, $field:ident, $event:expr, $key:expr) => {{
            let s = shared.clone();
            tasks.push(tokio::spawn(watch_kind(
                Api::<$kind>::all(client.clone()),
                watcher::Config::default(),
                $label,
                ready.clone(),
                move |ev| {
                    {
                        let mut cache = s.cache();
                        let map = &mut cache.volumes_mut().$field;
                        match ev {
                            Change::Apply(o, _) => {
                                map.insert($key(&*o), o);
                            }
                            Change::Delete(o) => {
                                map.remove(&$key(&*o));
                            }
                        }
                    }
                    s.queue.on_event($event);
                },
            )));
        }};
    }
    storage_watch!(
        PersistentVolumeClaim,
        "persistentvolumeclaim",
        claims,
        ClusterEvent::PvcChange,
        |o: &PersistentVolumeClaim| key_of(o)
    );
    storage_watch!(
        PersistentVolume,
        "persistentvolume",
        volumes,
        ClusterEvent::PvChange,
        |o: &PersistentVolume| o.name_any()
    );
    storage_watch!(
        StorageClass,
        "storageclass",
        storage_classes,
        ClusterEvent::StorageClassChange,
        |o: &StorageClass| o.name_any()
    );
    storage_watch!(
        CSINode,
        "csinode",
        csi_nodes,
        ClusterEvent::CsiNodeChange,
        |o: &CSINode| o.name_any()
    );
    // What selects pods, for PodTopologySpread's default constraints.
    macro_rules! selector_watch {
        ($kind:ty, $label:expr, $sk:expr, $sel:expr) => {{
            let s = shared.clone();
            tasks.push(tokio::spawn(watch_kind(
                Api::<$kind>::all(client.clone()),
                watcher::Config::default(),
                $label,
                ready.clone(),
                move |ev| {
                    let (o, selector) = match ev {
                        Change::Apply(o, _) => {
                            let sel = $sel(&*o);
                            (o, Some(sel))
                        }
                        Change::Delete(o) => (o, None),
                    };
                    let ns = o.namespace().unwrap_or_default();
                    s.cache()
                        .pod_selectors_mut()
                        .set($sk, &ns, &o.name_any(), selector);
                },
            )));
        }};
    }
    selector_watch!(Service, "service", SelectorKind::Service, |o: &Service| {
        Selector::Map(o.spec.as_ref().and_then(|s| s.selector.clone()))
    });
    selector_watch!(
        ReplicationController,
        "replicationcontroller",
        SelectorKind::ReplicationController,
        |o: &ReplicationController| {
            Selector::Map(o.spec.as_ref().and_then(|s| s.selector.clone()))
        }
    );
    selector_watch!(
        ReplicaSet,
        "replicaset",
        SelectorKind::ReplicaSet,
        |o: &ReplicaSet| Selector::Label(o.spec.as_ref().map(|s| s.selector.clone()))
    );
    selector_watch!(
        StatefulSet,
        "statefulset",
        SelectorKind::StatefulSet,
        |o: &StatefulSet| Selector::Label(o.spec.as_ref().map(|s| s.selector.clone()))
    );
    let s = shared.clone();
    let pdbs: Arc<Mutex<std::collections::HashMap<String, Arc<PodDisruptionBudget>>>> =
        Arc::default();
    tasks.push(tokio::spawn(watch_kind(
        Api::<PodDisruptionBudget>::all(client.clone()),
        watcher::Config::default(),
        "poddisruptionbudget",
        ready,
        move |ev| {
            let mut all = pdbs.lock().unwrap_or_else(|e| e.into_inner());
            match ev {
                Change::Apply(p, _) => {
                    all.insert(key_of(&*p), p);
                }
                Change::Delete(p) => {
                    all.remove(&key_of(&*p));
                }
            }
            s.cache().set_pdbs(all.values().cloned().collect());
        },
    )));
    tasks
}

/// managedFields are never read here, yet they are the bulk of a decoded object (nested
/// JSON maps): dropped before caching, as client-go informers' transforms commonly do.
fn without_managed_fields<K: Resource>(mut o: K) -> K {
    o.meta_mut().managed_fields = None;
    o
}

/// A watch event reduced to what the cache needs; `Apply`'s flag tells a new object.
pub enum Change<K> {
    Apply(Arc<K>, bool),
    Delete(Arc<K>),
}

/// Streams one kind, turning re-lists into applies and deletions of objects that vanished
/// meanwhile, and reports the first complete list on `ready`.
pub(crate) async fn watch_kind<K, F>(
    api: Api<K>,
    config: watcher::Config,
    kind: &'static str,
    ready: tokio::sync::mpsc::Sender<&'static str>,
    mut apply: F,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default,
    F: FnMut(Change<K>) + Send,
{
    let mut known: std::collections::HashMap<String, Arc<K>> = std::collections::HashMap::new();
    let mut relist: Option<std::collections::HashMap<String, Arc<K>>> = None;
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut reported = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => relist = Some(std::collections::HashMap::new()),
            Ok(Event::InitApply(o)) => {
                let o = Arc::new(without_managed_fields(o));
                let key = key_of(&*o);
                let is_new = !known.contains_key(&key);
                if let Some(seen) = relist.as_mut() {
                    seen.insert(key, o.clone());
                }
                apply(Change::Apply(o, is_new));
            }
            Ok(Event::InitDone) => {
                if let Some(seen) = relist.take() {
                    for (key, o) in known.drain() {
                        if !seen.contains_key(&key) {
                            apply(Change::Delete(o));
                        }
                    }
                    known = seen;
                }
                if !reported {
                    reported = true;
                    let _ = ready.send(kind).await;
                }
            }
            Ok(Event::Apply(o)) => {
                let o = Arc::new(without_managed_fields(o));
                let is_new = known.insert(key_of(&*o), o.clone()).is_none();
                apply(Change::Apply(o, is_new));
            }
            Ok(Event::Delete(o)) => {
                known.remove(&key_of(&o));
                apply(Change::Delete(Arc::new(o)));
            }
            Err(e) => warn!(kind, error = %e, "watch failed; retrying"),
        }
    }
}

fn on_pod_event(shared: &Shared, change: Change<Pod>) {
    let on_virtual = match &change {
        Change::Apply(p, _) | Change::Delete(p) => p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| n.strip_prefix(mcsched_shared::keys::VIRTUAL_NODE_PREFIX))
            .map(String::from),
    };
    if let Some(cluster) = on_virtual {
        shared.leaves.host_changed(&cluster);
    }
    match change {
        Change::Apply(pod, is_new) => {
            let key = key_of(&*pod);
            if !is_unbound(&pod) {
                shared.cache().apply_pod(pod);
                shared.queue.delete(&key);
                shared.queue.on_event(if is_new {
                    ClusterEvent::PodAdd
                } else {
                    ClusterEvent::PodUpdate
                });
                return;
            }
            if !shared.is_ours(&pod) {
                return;
            }
            if pod.metadata.deletion_timestamp.is_some() {
                shared.queue.delete(&key);
                return;
            }
            let scheduler = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_default();
            let gated = shared
                .profiles
                .get(&scheduler)
                .is_some_and(|fw| !fw.run_pre_enqueue(&pod).is_success());
            shared.queue.add(Arc::new(PodInfo::new(pod)), gated);
        }
        Change::Delete(pod) => {
            let key = key_of(&*pod);
            let assumed = shared.cache().is_assumed(&key);
            if assumed {
                // A pod waiting on Permit is rejected; its binding task cleans up.
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                let scheduler = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
                if let Some(fw) = scheduler.and_then(|n| shared.profiles.get(n)) {
                    fw.handle().reject_waiting_pod(uid);
                }
            }
            let was_bound = !is_unbound(&pod) || assumed;
            shared.cache().remove_pod(&key);
            shared.queue.delete(&key);
            if was_bound {
                shared.queue.on_event(ClusterEvent::PodDelete);
            }
        }
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
