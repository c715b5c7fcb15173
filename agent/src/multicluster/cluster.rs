//! One joined leaf cluster: its client, its nodes and pods held by watches in a cache of
//! the same kind the host uses, and how recently it answered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ResourceQuota,
};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, info};

use super::OnEvent;
use super::ask_leaf::AskLeaf;
use crate::control::watch::{
    self, Change, SharedCache, Unwatched, key_of, watch_if_served, watch_kind,
};
use mcsched_engine::cache::Cache;
use mcsched_engine::framework::ClusterEvent;

/// A leaf that has not answered for this long is NotReady (as a node whose kubelet
/// stopped posting, after kube-controller-manager's node-monitor-grace-period).
pub const READY_GRACE: Duration = Duration::from_secs(40);

#[derive(Debug, Default, Clone)]
pub struct Health {
    pub last_ok: Option<Instant>,
    pub version: Option<String>,
    pub last_error: Option<String>,
}

/// What the agent watches in every leaf: nodes and pods for the leaf's room, the
/// storage objects that decide whether a pod's claims can be bound there, and the
/// ResourceQuotas, LimitRanges and namespaces' Pod Security labels its admission applies
/// to a copy. Nothing goes to a leaf before all have listed: a leaf whose namespaces
/// cannot be read (its reader role has allowed it since join's first version) takes no
/// pods, rather than have their Pod Security levels guessed. Nor before the first read of
/// the fields the leaf serves has ended (read or not: see [`super::served`]), so that no
/// copy goes unjudged while it is under way.
/// The DRA kinds count as listed when the leaf does not serve them or its reader role
/// (an older join's) does not grant them: pods without claims go there still, and those
/// with claims are told why not (see [`LeafCluster::devices`]).
const WATCHED: [&str; 13] = [
    "leaf node",
    "leaf pod",
    "leaf persistentvolume",
    "leaf persistentvolumeclaim",
    "leaf storageclass",
    "leaf resourcequota",
    "leaf limitrange",
    "leaf namespace",
    DEVICE_CLASSES,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    DEVICE_TAINT_RULES,
    super::served::SYNC_KIND,
];

const DEVICE_CLASSES: &str = "leaf deviceclass";
const RESOURCE_SLICES: &str = "leaf resourceslice";
const RESOURCE_CLAIMS: &str = "leaf resourceclaim";
const DEVICE_TAINT_RULES: &str = "leaf devicetaintrule";

pub struct LeafCluster {
    pub name: String,
    pub client: Client,
    /// This host's id (its kube-system namespace's UID): the mark on what pod sync owns.
    pub host_id: String,
    /// Namespace grants and name clashes, asked of the leaf for the leaf check.
    pub checks: Arc<mcsched_engine::leaf::leaf_checks::LeafChecks>,
    cache: SharedCache,
    /// Leaf pods that mirror host pods, by `namespace/name`, as pod sync reads them
    /// (`copy_view`).
    managed: Mutex<HashMap<String, Arc<Pod>>>,
    /// The kinds whose first list has arrived; synced once all of [`WATCHED`] have.
    synced: Mutex<HashSet<&'static str>>,
    /// Woken on every leaf change: the virtual node's status follows it.
    pub changed: Arc<Notify>,
    /// Woken on leaf pod changes and on host pod changes on the virtual node.
    pub sync_wake: Arc<Notify>,
    health: Mutex<Health>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The join Secret's resourceVersion this connection was made from.
    pub secret_version: String,
    /// The join Secret itself, for the token's renewal.
    pub join: Mutex<Option<super::join_secret::JoinSecret>>,
    /// Which PriorityClasses the leaf has, as last looked up, and when.
    priority_classes: Mutex<HashMap<String, (bool, Instant)>>,
    /// The leaf's ResourceQuotas and LimitRanges; copied on write, so a cycle's view of
    /// them is a pointer.
    admission: Mutex<Arc<mcsched_engine::leaf::admission::LeafAdmission>>,
    /// Leaf volumes the leaf check picked for pods sent here, until the leaf binds them.
    pub volumes_held: super::volume_reservations::VolumeReservations,
    /// The ConfigMaps, Secrets and claims pod sync copied here.
    pub copied: super::copied::Copied,
    /// Copies created and not recorded on their host pods yet, and forged pods found.
    pub ownership: super::ownership::Ownership,
    /// The fields the leaf's API server serves, as last read.
    served: Mutex<mcsched_engine::leaf::served_fields::Served>,
    /// Woken when a probe sees another version than the one those fields were read at.
    pub served_wake: Notify,
    /// What pod sync's dry runs found the leaf keeps and drops, at the version it reports.
    pub kept: Arc<mcsched_engine::leaf::kept_fields::KeptFields>,
    /// The smallest copy (bytes of JSON) the leaf's API server could not store (etcd's
    /// request limit): pod sync refuses copies as large before writing anything there.
    pub too_large: Mutex<Option<usize>>,
    /// The leaf's ResourceClaims: the devices they hold are not free for a copy's.
    claims: Arc<mcsched_engine::dra_state::ResourceClaims>,
    /// Leaf devices the leaf check allocated for pods sent here, until the leaf's
    /// scheduler has placed their copies.
    pub devices_held: super::device_reservations::DeviceReservations,
    /// The DRA kinds not watched, and why (see [`Self::devices`]).
    devices_unwatched: Mutex<std::collections::BTreeMap<&'static str, Unwatched>>,
}

impl super::served::Leaf for LeafCluster {
    fn name(&self) -> &str {
        &self.name
    }
    fn client(&self) -> &Client {
        &self.client
    }
    fn set_served(&self, served: mcsched_engine::leaf::served_fields::Served) {
        LeafCluster::set_served(self, served)
    }
    fn served_wake(&self) -> &Notify {
        &self.served_wake
    }
    fn version_moved(&self) -> bool {
        LeafCluster::version_moved(self)
    }
}

/// How long a PriorityClass lookup is trusted.
const PRIORITY_CLASS_TTL: Duration = Duration::from_secs(30);

impl LeafCluster {
    pub fn new(name: String, client: Client, secret_version: String, host_id: String) -> Arc<Self> {
        Arc::new(LeafCluster {
            checks: mcsched_engine::leaf::leaf_checks::LeafChecks::new(&name, &host_id),
            name,
            client,
            host_id,
            cache: Arc::new(Mutex::new(Cache::new())),
            managed: Mutex::default(),
            synced: Mutex::default(),
            changed: Arc::new(Notify::new()),
            sync_wake: Arc::new(Notify::new()),
            health: Mutex::default(),
            tasks: Mutex::default(),
            secret_version,
            join: Mutex::default(),
            priority_classes: Mutex::default(),
            admission: Mutex::default(),
            volumes_held: Default::default(),
            copied: Default::default(),
            ownership: Default::default(),
            served: Mutex::default(),
            served_wake: Notify::new(),
            kept: Default::default(),
            too_large: Mutex::default(),
            claims: Default::default(),
            devices_held: Default::default(),
            devices_unwatched: Mutex::default(),
        })
    }

    /// What the leaf check judges a copy's claims by beside the snapshot's classes and
    /// slices; unreadable while a DRA kind is not watched, as the leaf then would hand
    /// out devices the agent cannot see taken, or it has no devices to hand out.
    pub fn devices(&self) -> mcsched_engine::leaf::cycle::LeafDevices {
        self.devices_held.expire(&self.claims, Instant::now());
        let unwatched = self
            .devices_unwatched
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let unreadable = unwatched.iter().next().map(|(kind, why)| {
            let kind = kind.trim_start_matches("leaf ");
            match why {
                Unwatched::NotServed => format!(
                    "it does not serve resource.k8s.io/v1 {kind}s, so it has no devices to allocate"
                ),
                Unwatched::Forbidden(_) => format!(
                    "the agent may not read its {kind}s (re-run `kubectl mcsched join cluster {}` to grant it)",
                    self.name
                ),
            }
        });
        mcsched_engine::leaf::cycle::LeafDevices {
            claims: self.claims.clone(),
            unreadable,
        }
    }

    /// Holds the devices the check allocated for `pod` here (see
    /// [`super::device_reservations`]).
    pub fn hold_devices(
        &self,
        pod: &str,
        claims: &[Arc<k8s_openapi::api::resource::v1::ResourceClaim>],
        ttl: Duration,
    ) {
        self.devices_held.hold(&self.claims, pod, claims, ttl);
    }

    pub fn release_devices(&self, pod: &str) {
        self.devices_held.release(&self.claims, pod);
    }

    fn set_unwatched(&self, kind: &'static str, why: Option<Unwatched>) {
        let mut unwatched = self
            .devices_unwatched
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match why {
            Some(w) => unwatched.insert(kind, w),
            None => unwatched.remove(kind),
        };
    }

    /// The leaf's DeviceClasses, ResourceSlices and DeviceTaintRules into its cache (as the
    /// host's: slices carry the rules' taints), its ResourceClaims into its tracker.
    fn spawn_device_watches(
        self: &Arc<Self>,
        ready: &tokio::sync::mpsc::Sender<&'static str>,
        on_event: &OnEvent,
    ) -> Vec<JoinHandle<()>> {
        const ABSENT: &str =
            "resource.k8s.io/v1 is not served there: pods with claims do not go to this leaf";
        let client = &self.client;
        let changed = {
            let (me, on) = (self.clone(), on_event.clone());
            move || {
                me.changed.notify_one();
                on(ClusterEvent::LeafChange);
            }
        };
        let unwatched = |kind: &'static str| {
            let me = self.clone();
            move |why| me.set_unwatched(kind, why)
        };
        let (me, on) = (self.clone(), changed.clone());
        let classes = tokio::spawn(watch_if_served(
            Api::<DeviceClass>::all(client.clone()),
            DEVICE_CLASSES,
            ABSENT,
            ready.clone().into(),
            unwatched(DEVICE_CLASSES),
            move |ev| {
                {
                    let mut cache = me.cache();
                    let classes = &mut cache.devices_mut().classes;
                    match ev {
                        Change::Apply(c, _) => classes.insert(c.name_any(), c),
                        Change::Delete(c) => classes.remove(&c.name_any()),
                    };
                }
                on();
            },
        ));
        let (me, on) = (self.clone(), changed.clone());
        let slices = tokio::spawn(watch_if_served(
            Api::<ResourceSlice>::all(client.clone()),
            RESOURCE_SLICES,
            ABSENT,
            ready.clone().into(),
            unwatched(RESOURCE_SLICES),
            move |ev| {
                {
                    let mut cache = me.cache();
                    let devices = cache.devices_mut();
                    match ev {
                        Change::Apply(sl, _) => {
                            devices.apply_slice(sl);
                        }
                        Change::Delete(sl) => devices.remove_slice(&sl.name_any()),
                    }
                }
                on();
            },
        ));
        let (me, on) = (self.clone(), changed.clone());
        let claims = tokio::spawn(watch_if_served(
            Api::<ResourceClaim>::all(client.clone()),
            RESOURCE_CLAIMS,
            ABSENT,
            ready.clone().into(),
            unwatched(RESOURCE_CLAIMS),
            move |ev| {
                match ev {
                    Change::Apply(c, _) => {
                        me.claims.apply(c);
                    }
                    Change::Delete(c) => {
                        me.claims.delete(&key_of(&*c));
                    }
                }
                on();
            },
        ));
        // A leaf of v1.34-v1.36 serves DeviceTaintRules in beta versions only: its devices
        // carry their slices' taints alone there, as for its own scheduler (the kind is
        // then not counted as unreadable).
        let (me, on) = (self.clone(), changed);
        let taint_rules = tokio::spawn(watch_if_served(
            Api::<DeviceTaintRule>::all(client.clone()),
            DEVICE_TAINT_RULES,
            "resource.k8s.io/v1 DeviceTaintRules are not served there: its devices carry their slices' taints alone",
            ready.clone().into(),
            {
                let me = self.clone();
                move |why| {
                    let why = why.filter(|w| *w != Unwatched::NotServed);
                    me.set_unwatched(DEVICE_TAINT_RULES, why)
                }
            },
            move |ev| {
                let (name, rule) = match ev {
                    Change::Apply(r, _) => (r.name_any(), Some(r)),
                    Change::Delete(r) => (r.name_any(), None),
                };
                if me.cache().devices_mut().set_taint_rule(&name, rule) {
                    on();
                }
            },
        ));
        vec![classes, slices, claims, taint_rules]
    }

    /// Whether the leaf has the PriorityClass `name` (asked at most every 30 s); an error
    /// when it cannot be asked (e.g. a leaf joined before the agent was allowed to read
    /// PriorityClasses there).
    pub async fn has_priority_class(&self, name: &str) -> Result<bool, kube::Error> {
        if let Some(&(has, at)) = self
            .priority_classes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            && at.elapsed() < PRIORITY_CLASS_TTL
        {
            return Ok(has);
        }
        let api: Api<k8s_openapi::api::scheduling::v1::PriorityClass> =
            Api::all(self.client.clone());
        let has = api.get_metadata_opt(name).await?.is_some();
        self.priority_classes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), (has, Instant::now()));
        Ok(has)
    }

    /// What the leaf check knows of the fields the leaf serves.
    pub fn served(&self) -> mcsched_engine::leaf::served_fields::Served {
        self.served
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_served(&self, served: mcsched_engine::leaf::served_fields::Served) {
        *self.served.lock().unwrap_or_else(|e| e.into_inner()) = served;
    }

    /// Whether the leaf last reported another version than the one its served fields were
    /// read at (an upgrade, or a reconnect to another API server).
    pub fn version_moved(&self) -> bool {
        let probed = self.health().version;
        match &*self.served.lock().unwrap_or_else(|e| e.into_inner()) {
            mcsched_engine::leaf::served_fields::Served::Known(f) => {
                probed.is_some_and(|v| v != f.git_version())
            }
            _ => false,
        }
    }

    /// The version the leaf last reported (its probe's, else the one its served fields
    /// were read at); empty when neither is known yet.
    pub fn version(&self) -> String {
        if let Some(v) = self.health().version {
            return v;
        }
        match &*self.served.lock().unwrap_or_else(|e| e.into_inner()) {
            mcsched_engine::leaf::served_fields::Served::Known(f) => f.git_version().to_string(),
            _ => String::new(),
        }
    }

    pub fn cache(&self) -> MutexGuard<'_, Cache> {
        watch::lock(&self.cache)
    }

    /// What the leaf's admission will judge a copy by: its quotas and limit ranges, and
    /// (when it has quotas) the copies assumed here that its watch has not shown yet.
    pub fn admission_view(&self) -> mcsched_engine::leaf::cycle::AdmissionView {
        let rules = self
            .admission
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let pending = if rules.has_quotas() {
            let managed = self.managed.lock().unwrap_or_else(|e| e.into_inner());
            self.cache()
                .assumed_pods()
                .filter(|p| !managed.contains_key(&p.key))
                .map(|p| p.pod())
                .collect()
        } else {
            Vec::new()
        };
        mcsched_engine::leaf::cycle::AdmissionView {
            rules,
            pending: Arc::new(pending),
        }
    }

    fn admission_mut(
        &self,
        change: impl FnOnce(&mut mcsched_engine::leaf::admission::LeafAdmission),
    ) {
        let mut a = self.admission.lock().unwrap_or_else(|e| e.into_inner());
        change(Arc::make_mut(&mut a));
    }

    pub fn managed(&self) -> HashMap<String, Arc<Pod>> {
        self.managed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// As if every watch had delivered its first list.
    #[cfg(test)]
    pub(crate) fn mark_synced(&self) {
        self.synced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(WATCHED);
    }

    /// As if the pod watch had delivered `pod`.
    #[cfg(test)]
    pub(crate) fn saw_pod(&self, pod: Pod) {
        let ignore: OnEvent = Arc::new(|_| {});
        self.on_pod(Change::Apply(Arc::new(pod), true), &ignore);
    }

    /// As if the leaf's API server last answered at `at` (None: never).
    #[cfg(test)]
    pub(crate) fn answered_at(&self, at: Option<Instant>) {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_ok = at;
    }

    /// The watches whose first list has not arrived yet.
    pub fn unsynced_kinds(&self) -> Vec<&'static str> {
        let synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        WATCHED
            .iter()
            .filter(|k| !synced.contains(*k))
            .copied()
            .collect()
    }

    pub fn is_synced(&self) -> bool {
        self.synced.lock().unwrap_or_else(|e| e.into_inner()).len() == WATCHED.len()
    }

    pub fn health(&self) -> Health {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn is_ready(&self) -> bool {
        self.health()
            .last_ok
            .is_some_and(|t| t.elapsed() < READY_GRACE)
    }

    /// Asks the leaf's API server for its version: the heartbeat.
    pub async fn probe(&self) -> bool {
        let answer =
            tokio::time::timeout(Duration::from_secs(5), self.client.apiserver_version()).await;
        if let Ok(Ok(v)) = &answer
            && self.health().version.as_ref() != Some(&v.git_version)
        {
            // What Pod Security's `latest` means in this leaf.
            self.admission_mut(|a| {
                a.set_leaf_version(&v.git_version);
            });
        }
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        match answer {
            Ok(Ok(v)) => {
                h.last_ok = Some(Instant::now());
                h.version = Some(v.git_version);
                h.last_error = None;
                drop(h);
                // What dry runs taught of another version is forgotten.
                self.kept.at_version(&self.version(), Instant::now());
                if self.version_moved() {
                    // Read again: the leaf now serves what its new version does.
                    self.served_wake.notify_one();
                }
                true
            }
            Ok(Err(e)) => {
                h.last_error = Some(e.to_string());
                false
            }
            Err(_) => {
                h.last_error = Some("no answer within 5s".into());
                false
            }
        }
    }

    /// Starts the leaf's watches; every leaf change is a [`ClusterEvent::LeafChange`] to
    /// the host queue, as it changes what the virtual node can take.
    pub fn start(self: &Arc<Self>, on_event: OnEvent) {
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<&'static str>(4);
        let mut tasks = vec![tokio::spawn(
            self.checks
                .clone()
                .run(self.client.clone(), on_event.clone()),
        )];
        tasks.push(tokio::spawn(super::served::keep(
            self.clone(),
            ready_tx.clone(),
            on_event.clone(),
        )));
        let me = self.clone();
        let on = on_event.clone();
        tasks.push(tokio::spawn(watch_kind(
            Api::<Node>::all(self.client.clone()),
            watcher::Config::default(),
            "leaf node",
            ready_tx.clone(),
            move |ev| {
                watch::apply_node(&mut me.cache(), ev);
                me.changed.notify_one();
                on(ClusterEvent::LeafChange);
            },
        )));
        let me = self.clone();
        let on = on_event.clone();
        tasks.push(tokio::spawn(watch_kind(
            Api::<Pod>::all(self.client.clone()),
            watcher::Config::default(),
            "leaf pod",
            ready_tx.clone(),
            move |ev| me.on_pod(ev, &on),
        )));
        let storage_event = {
            let (me, on) = (self.clone(), on_event.clone());
            move || {
                let (me, on) = (me.clone(), on.clone());
                move |_| {
                    me.changed.notify_one();
                    on(ClusterEvent::LeafChange);
                }
            }
        };
        let client = &self.client;
        tasks.push(watch::spawn_storage::<PersistentVolume>(
            client,
            self.cache.clone(),
            "leaf persistentvolume",
            ready_tx.clone(),
            storage_event(),
        ));
        tasks.push(watch::spawn_storage::<PersistentVolumeClaim>(
            client,
            self.cache.clone(),
            "leaf persistentvolumeclaim",
            ready_tx.clone(),
            storage_event(),
        ));
        tasks.push(watch::spawn_storage::<StorageClass>(
            client,
            self.cache.clone(),
            "leaf storageclass",
            ready_tx.clone(),
            storage_event(),
        ));
        let (me, on) = (self.clone(), on_event.clone());
        tasks.push(tokio::spawn(watch_kind(
            Api::<ResourceQuota>::all(client.clone()),
            watcher::Config::default(),
            "leaf resourcequota",
            ready_tx.clone(),
            move |ev| {
                me.admission_mut(|a| a.apply_quota(ev));
                me.changed.notify_one();
                on(ClusterEvent::LeafChange);
            },
        )));
        let (me, on) = (self.clone(), on_event.clone());
        tasks.push(tokio::spawn(watch_kind(
            Api::<LimitRange>::all(client.clone()),
            watcher::Config::default(),
            "leaf limitrange",
            ready_tx.clone(),
            move |ev| {
                me.admission_mut(|a| a.apply_limit_range(ev));
                me.changed.notify_one();
                on(ClusterEvent::LeafChange);
            },
        )));
        let (me, on) = (self.clone(), on_event.clone());
        tasks.push(tokio::spawn(watch_kind(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
            "leaf namespace",
            ready_tx.clone(),
            move |ev| {
                // Only a change of level is news: namespaces' other updates are not.
                let (ns, level) = mcsched_engine::leaf::admission::LeafAdmission::level_of(&ev);
                let known = me
                    .admission
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .has_level(&ns, level);
                if !known {
                    me.admission_mut(|a| a.set_level(ns, level));
                    me.changed.notify_one();
                    on(ClusterEvent::LeafChange);
                }
            },
        )));
        tasks.extend(self.spawn_device_watches(&ready_tx, &on_event));
        let me = self.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(kind) = ready_rx.recv().await {
                me.synced
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(kind);
                if me.is_synced() {
                    info!(cluster = %me.name, nodes = me.cache().node_count(), "leaf cluster synced");
                    me.changed.notify_one();
                    me.sync_wake.notify_one();
                    on_event(ClusterEvent::LeafChange);
                }
            }
        }));
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(tasks);
    }

    fn on_pod(&self, ev: Change<Pod>, on_event: &OnEvent) {
        let (pod, deleted) = match ev {
            Change::Apply(p, _) => (p, false),
            Change::Delete(p) => (p, true),
        };
        let key = key_of(&*pod);
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        {
            let mut cache = self.cache();
            if deleted || terminal {
                cache.remove_pod(&key);
            } else {
                cache.apply_pod(pod.clone());
            }
        }
        // Only this host's copies: another host's, or the leaf owner's pods of the same
        // names, are never synced, adopted or deleted.
        let ours =
            mcsched_engine::leaf::leaf_checks::is_ours(&pod.metadata, &self.name, &self.host_id);
        // A copy placed by the leaf's scheduler has its claims allocated there: the
        // leaf's claims now hold what the check held for it.
        let placed = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if ours && (placed || deleted) && !self.devices_held.is_empty() {
            self.release_devices(&key);
        }
        if ours {
            let mut managed = self.managed.lock().unwrap_or_else(|e| e.into_inner());
            if deleted {
                managed.remove(&key);
            } else {
                managed.insert(key.clone(), Arc::new(copy_view(&pod)));
            }
        }
        if deleted || terminal {
            debug!(cluster = %self.name, pod = %key, "leaf pod gone; room in the leaf");
            on_event(ClusterEvent::LeafChange);
        }
        self.changed.notify_one();
        if ours {
            self.sync_wake.notify_one();
        }
    }

    /// Ties a task working for this leaf to its lifetime.
    pub fn adopt(&self, task: JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    pub fn stop(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// What pod sync reads of a leaf copy: its metadata, the leaf node it was placed on and
/// its status. The spec's containers and volumes, most of a decoded pod, are left out: a
/// leaf copy is held for every pod sent to the leaf.
fn copy_view(copy: &Pod) -> Pod {
    Pod {
        metadata: copy.metadata.clone(),
        spec: copy
            .spec
            .as_ref()
            .map(|s| k8s_openapi::api::core::v1::PodSpec {
                node_name: s.node_name.clone(),
                ..Default::default()
            }),
        status: copy.status.clone(),
    }
}
