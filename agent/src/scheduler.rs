//! The scheduling loop: watch → pop → choose a node → assume → bind (concurrently, bounded)
//! → event.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use mcsched_shared::resources::{Resources, pod_requests};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::binder::Binder;
use crate::placement::{NodeUsage, choose_node};
use crate::queue::SchedulingQueue;

/// Pods that finished hold no resources, so they are not watched at all.
const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("the {0} cache never became ready")]
    CacheNotReady(&'static str),
}

#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    pub scheduler_name: String,
    pub parallel_bindings: usize,
}

/// A pod in flight: chosen a node, binding not yet visible in the pod cache.
#[derive(Debug, Clone)]
struct Assumed {
    uid: String,
    node: String,
    requests: Resources,
}

struct Scheduler {
    options: SchedulerOptions,
    pods: Store<Pod>,
    nodes: Store<Node>,
    queue: SchedulingQueue,
    binder: Arc<Binder>,
    assumed: Arc<Mutex<HashMap<String, Assumed>>>,
    bindings: Arc<Semaphore>,
}

fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Whether this scheduler must place the pod: it names us and is not bound or going.
pub fn is_ours(pod: &Pod, scheduler_name: &str) -> bool {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name)
        && spec
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
            .is_empty()
        && pod.metadata.deletion_timestamp.is_none()
}

/// Runs until `shutdown` completes, then lets bindings in flight finish.
pub async fn run(
    client: Client,
    options: SchedulerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SchedulerError> {
    let queue = SchedulingQueue::new();
    let (pods, pod_writer) = reflector::store();
    let (nodes, node_writer) = reflector::store();

    let pod_api: Api<Pod> = Api::all(client.clone());
    let name = options.scheduler_name.clone();
    let pod_queue = queue.clone();
    let pod_watch = watcher(
        pod_api,
        watcher::Config::default().fields(NON_TERMINAL_PODS),
    )
    .default_backoff()
    .reflect(pod_writer)
    .touched_objects()
    .for_each(move |res| {
        match res {
            Ok(pod) if is_ours(&pod, &name) => pod_queue.add(pod_key(&pod)),
            Ok(_) => {}
            Err(e) => warn!(error = %e, "pod watch failed; retrying"),
        }
        futures::future::ready(())
    });
    let node_api: Api<Node> = Api::all(client.clone());
    let node_watch = watcher(node_api, watcher::Config::default())
        .default_backoff()
        .reflect(node_writer)
        .for_each(|res| {
            if let Err(e) = res {
                warn!(error = %e, "node watch failed; retrying");
            }
            futures::future::ready(())
        });
    let watches = tokio::spawn(futures::future::join(pod_watch, node_watch));

    let instance = format!("{}-{}", options.scheduler_name, hostname());
    let scheduler = Scheduler {
        binder: Arc::new(Binder::new(client, &options.scheduler_name, instance)),
        bindings: Arc::new(Semaphore::new(options.parallel_bindings)),
        options,
        pods,
        nodes,
        queue: queue.clone(),
        assumed: Arc::default(),
    };

    tokio::pin!(shutdown);
    let ready = async {
        scheduler
            .pods
            .wait_until_ready()
            .await
            .map_err(|_| SchedulerError::CacheNotReady("pod"))?;
        scheduler
            .nodes
            .wait_until_ready()
            .await
            .map_err(|_| SchedulerError::CacheNotReady("node"))
    };
    tokio::select! {
        _ = &mut shutdown => { watches.abort(); return Ok(()); }
        res = ready => res?,
    }
    info!(scheduler = %scheduler.options.scheduler_name, "caches synced; scheduling");

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            key = queue.pop() => match key {
                Some(key) => scheduler.schedule_one(key).await,
                None => break,
            },
        }
    }
    info!("shutting down; waiting for bindings in flight");
    queue.close();
    let all = scheduler.options.parallel_bindings as u32;
    if tokio::time::timeout(SHUTDOWN_GRACE, scheduler.bindings.acquire_many(all))
        .await
        .is_err()
    {
        warn!("bindings still in flight after {SHUTDOWN_GRACE:?}; leaving them");
    }
    watches.abort();
    Ok(())
}

impl Scheduler {
    async fn schedule_one(&self, key: String) {
        let Some((namespace, name)) = key.split_once('/') else {
            return;
        };
        let Some(pod) = self.pods.get(&ObjectRef::new(name).within(namespace)) else {
            self.queue.forget(&key);
            return;
        };
        if !is_ours(&pod, &self.options.scheduler_name) || self.lock_assumed().contains_key(&key) {
            return;
        }
        let requests = match pod_requests(&pod) {
            Ok(r) => r,
            Err(e) => {
                self.fail(&key, &pod, format!("invalid resource requests: {e}"))
                    .await;
                return;
            }
        };
        let usage = self.usage();
        let nodes = self.nodes.state();
        match choose_node(&pod, &requests, nodes.iter().map(|n| n.as_ref()), &usage) {
            Ok(node) => self.assume_and_bind(key, pod, node, requests).await,
            Err(fit) => self.fail(&key, &pod, fit.to_string()).await,
        }
    }

    async fn fail(&self, key: &str, pod: &Pod, message: String) {
        info!(pod = %key, %message, "unschedulable");
        if let Err(e) = self.binder.failed_scheduling(pod, message).await {
            warn!(pod = %key, error = %e, "could not record FailedScheduling event");
        }
        self.queue.add_after_backoff(key.to_string());
    }

    async fn assume_and_bind(&self, key: String, pod: Arc<Pod>, node: String, requests: Resources) {
        self.lock_assumed().insert(
            key.clone(),
            Assumed {
                uid: pod.uid().unwrap_or_default(),
                node: node.clone(),
                requests,
            },
        );
        let Ok(permit) = self.bindings.clone().acquire_owned().await else {
            return;
        };
        let binder = self.binder.clone();
        let assumed = self.assumed.clone();
        let queue = self.queue.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let namespace = pod.namespace().unwrap_or_default();
            match binder.bind(&namespace, &pod.name_any(), &node).await {
                Ok(()) => {
                    info!(pod = %key, %node, "bound");
                    queue.forget(&key);
                    if let Err(e) = binder.scheduled(&pod, &node).await {
                        warn!(pod = %key, error = %e, "could not record Scheduled event");
                    }
                }
                Err(e) => {
                    assumed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                    if is_gone_or_taken(&e) {
                        debug!(pod = %key, error = %e, "pod deleted or bound elsewhere");
                        queue.forget(&key);
                    } else {
                        warn!(pod = %key, %node, error = %e, "binding failed; retrying");
                        queue.add_after_backoff(key);
                    }
                }
            }
        });
    }

    fn lock_assumed(&self) -> std::sync::MutexGuard<'_, HashMap<String, Assumed>> {
        self.assumed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests per node from bound pods plus assumed ones whose binding the cache has not
    /// shown yet; an assumption is dropped once the cache shows the pod bound or gone.
    fn usage(&self) -> HashMap<String, NodeUsage> {
        let mut usage: HashMap<String, NodeUsage> = HashMap::new();
        for pod in self.pods.state() {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            if node.is_empty() {
                continue;
            }
            let requests = pod_requests(&pod).unwrap_or_default();
            usage
                .entry(node.to_string())
                .or_default()
                .add_pod(&requests);
        }
        self.lock_assumed().retain(|key, a| {
            let Some((namespace, name)) = key.split_once('/') else {
                return false;
            };
            let cached = self.pods.get(&ObjectRef::new(name).within(namespace));
            match cached {
                Some(p) if p.uid().as_deref() == Some(a.uid.as_str()) => {
                    let bound = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty());
                    if !bound {
                        usage
                            .entry(a.node.clone())
                            .or_default()
                            .add_pod(&a.requests);
                    }
                    !bound
                }
                _ => false,
            }
        });
        usage
    }
}

/// 404 (pod deleted) and 409 (already bound) end the attempt for good.
fn is_gone_or_taken(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
