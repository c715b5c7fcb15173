//! What the loop, the binding tasks and the HTTP server share.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use kube::Client;

use super::SchedulerOptions;
use crate::control::watch::SharedCache;
use crate::multicluster::registry::Leaves;
use crate::observe::events::EventSink;
use crate::observe::explain::ExplanationStore;
use crate::scheduler::extender::Extender;
use mcsched_engine::cache::Cache;
use mcsched_engine::framework::BindContext;
use mcsched_engine::profiles::Profiles;
use mcsched_engine::queue::SchedulingQueue;

pub struct Shared {
    pub profiles: Profiles,
    pub cache: SharedCache,
    pub queue: Arc<SchedulingQueue>,
    pub events: EventSink,
    pub explanations: ExplanationStore,
    pub bind_ctx: BindContext,
    pub extenders: Vec<Arc<Extender>>,
    /// Joined leaf clusters; the same the profiles' LeafNodeFit reads.
    pub leaves: Arc<Leaves>,
    /// Set once pods and nodes are listed.
    pub synced: Arc<AtomicBool>,
    /// When the leader Lease was last renewed, for `/healthz`.
    pub lease_health: crate::control::leader::LeaseHealth,
    /// Host watches that are down, for `/readyz`.
    pub watch_health: crate::control::watch::WatchHealth,
    /// Held while a pod group member's PreEnqueue verdicts (its own, its group's on a new
    /// member or PodGroup) are taken and queued.
    pub(super) gang_gates: Mutex<()>,
    /// Held while the PreEnqueue verdict of a pod with resource claims is taken and
    /// queued, and while a claim's change is applied and the pods naming it judged again:
    /// else a verdict taken before the claim came in could be queued after the claim's
    /// re-judging, and hold the pod back for good. Taken after `gang_gates`.
    pub(super) claim_gates: Mutex<()>,
}

impl Shared {
    pub fn new(
        client: Client,
        profiles: Profiles,
        extenders: Vec<Arc<Extender>>,
        leaves: Arc<Leaves>,
        options: &SchedulerOptions,
    ) -> Arc<Self> {
        // Preemption calls the extenders' preempt verb, as kube's through its Handle;
        // DynamicResources' PostFilter writes with the (fenced) client.
        for fw in profiles.frameworks.values() {
            fw.set_api(BindContext {
                client: client.clone(),
                content_type: options.content_type,
            });
            fw.set_extenders(
                extenders
                    .iter()
                    .map(|e| e.clone() as Arc<dyn mcsched_engine::framework::PreemptionExtender>)
                    .collect(),
            );
        }
        let queue = SchedulingQueue::new(
            options.initial_backoff,
            options.max_backoff,
            profiles.plugin_events.clone(),
            profiles.less.clone(),
        );
        Arc::new(Shared {
            profiles,
            cache: Arc::new(Mutex::new(Cache::new())),
            queue,
            events: EventSink::start(client.clone(), super::hostname(), options.content_type),
            explanations: ExplanationStore::default(),
            bind_ctx: BindContext {
                client,
                content_type: options.content_type,
            },
            extenders,
            leaves,
            synced: Arc::default(),
            lease_health: Default::default(),
            watch_health: Default::default(),
            gang_gates: Mutex::new(()),
            claim_gates: Mutex::new(()),
        })
    }

    pub fn cache(&self) -> MutexGuard<'_, Cache> {
        crate::control::watch::lock(&self.cache)
    }

    /// What pod sync needs of the host side.
    pub(super) fn host_side(
        &self,
        leader: tokio::sync::watch::Receiver<bool>,
    ) -> crate::multicluster::pod_sync::HostSide {
        crate::multicluster::pod_sync::HostSide {
            cache: self.cache.clone(),
            synced: self.synced.clone(),
            leaves: self.leaves.clone(),
            events: self.events.clone(),
            leader,
            lease: self.lease_health.clone(),
            pod_groups: self.profiles.pod_groups.clone(),
        }
    }
}
