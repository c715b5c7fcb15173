//! Watches, host and leaf alike: a kind streamed into [`Change`]s (re-lists turned into
//! applies and deletions of what vanished meanwhile, managed fields dropped), and the one
//! place that feeds a [`Cache`] from them and names the cluster event each change is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::control::lean_object::Lean;
use mcsched_engine::cache::Cache;
pub use mcsched_engine::change::{Change, key_of};
use mcsched_engine::framework::ClusterEvent;
use mcsched_engine::snapshot::VolumeObjects;
use mcsched_wire::ContentType;

/// Pods that finished hold no resources, so the host does not watch them at all.
pub const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// A cache shared by its watches and its readers.
pub type SharedCache = Arc<Mutex<Cache>>;

pub fn lock(cache: &Mutex<Cache>) -> MutexGuard<'_, Cache> {
    cache.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watches that are down: ended or failed, until their restart has listed again.
#[derive(Clone, Default)]
pub struct WatchHealth(Arc<Mutex<std::collections::BTreeSet<&'static str>>>);

impl WatchHealth {
    fn set(&self, kind: &'static str, down: bool) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if down {
            set.insert(kind);
        } else {
            set.remove(kind);
        }
    }

    pub fn down(&self) -> Vec<&'static str> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }
}

/// Where a watch reports its first complete list, and (host watches) its health.
#[derive(Clone)]
pub struct Ready {
    tx: tokio::sync::mpsc::Sender<&'static str>,
    health: Option<WatchHealth>,
}

impl Ready {
    /// A watch whose downtime counts for `/readyz`.
    pub fn supervised(tx: tokio::sync::mpsc::Sender<&'static str>, health: WatchHealth) -> Self {
        Ready {
            tx,
            health: Some(health),
        }
    }

    /// Reports `kind` listed without a watch (a kind the API server does not serve).
    pub async fn report(&self, kind: &'static str) {
        let _ = self.tx.send(kind).await;
    }

    /// A Ready whose reports go nowhere: for a watch started after its kind was reported.
    pub fn detached(&self) -> Self {
        let (tx, _) = tokio::sync::mpsc::channel(1);
        Ready {
            tx,
            health: self.health.clone(),
        }
    }

    fn set_down(&self, kind: &'static str, down: bool) {
        if let Some(h) = &self.health {
            h.set(kind, down);
        }
    }
}

impl From<tokio::sync::mpsc::Sender<&'static str>> for Ready {
    fn from(tx: tokio::sync::mpsc::Sender<&'static str>) -> Self {
        Ready { tx, health: None }
    }
}

/// What a watch remembers of an object it saw, to tell of its deletion when a relist no
/// longer shows it: the key (beside it), uid and labels, which is what the handlers of a
/// deletion read. Kept small: a watch remembers every pod of the cluster.
struct Seen {
    uid: Option<Box<str>>,
    labels: Box<[(Box<str>, Box<str>)]>,
}

impl Seen {
    fn of<K: Resource>(o: &K) -> Self {
        let meta = o.meta();
        Seen {
            uid: meta.uid.as_deref().map(Box::from),
            labels: meta
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
                .collect(),
        }
    }

    /// The vanished object `key` (`namespace/name`, as [`key_of`]) as far as remembered.
    fn tombstone<K: Resource + Default>(&self, key: &str) -> Arc<K> {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let mut o = K::default();
        *o.meta_mut() = ObjectMeta {
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            name: Some(name.to_string()),
            uid: self.uid.as_deref().map(String::from),
            labels: (!self.labels.is_empty()).then(|| {
                self.labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        };
        Arc::new(o)
    }
}

/// What a watched kind is: a Kubernetes object decoded by serde, in either encoding.
pub trait Watched:
    Resource<DynamicType: Default>
    + Clone
    + Default
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType: Default>
        + Clone
        + Default
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Streams one kind, turning re-lists into applies and deletions of objects that vanished
/// meanwhile (those carry only the object's name, uid and labels, all that is remembered
/// of it: the caches hold the objects, often compact, and a second decoded copy of every
/// pod here would be most of the agent's memory), and reports the first complete list on `ready`. Supervised: a stream that
/// ends, or a change whose handling panics, restarts the watch with backoff and a relist
/// (counted in `mcsched_watch_restarts_total`); the kind is down until that relist is done.
pub async fn watch_kind<K, F>(
    api: Api<K>,
    config: watcher::Config,
    kind: &'static str,
    ready: impl Into<Ready> + Send,
    apply: F,
) where
    K: Watched,
    F: FnMut(Change<K>) + Send,
{
    watch_kind_in(api, config, ContentType::Json, kind, ready, apply).await
}

/// As [`watch_kind`], listing and watching in `ct` where the kind is served in it (core/v1
/// kinds in protobuf), else in JSON.
pub async fn watch_kind_in<K, F>(
    api: Api<K>,
    config: watcher::Config,
    ct: ContentType,
    kind: &'static str,
    ready: impl Into<Ready> + Send,
    apply: F,
) where
    K: Watched,
    F: FnMut(Change<K>) + Send,
{
    supervise(
        || events(&api, &config, ct),
        restart_backoff(),
        kind,
        ready.into(),
        apply,
    )
    .await
}

/// Why [`watch_if_served`] has no watch of a kind (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unwatched {
    /// The API server does not serve it (404).
    NotServed,
    /// The agent may not list it (403), with the API server's message.
    Forbidden(String),
}

/// `watch_kind` once the API server serves the kind (404 until its CRD is installed) and
/// lets the agent list it; until then the kind counts as listed (empty) and
/// `unwatched` is told why, then told `None` as the watch starts.
pub async fn watch_if_served<K, F>(
    api: Api<K>,
    kind: &'static str,
    absent: &'static str,
    ready: Ready,
    unwatched: impl Fn(Option<Unwatched>) + Send,
    apply: F,
) where
    K: Watched,
    F: FnMut(Change<K>) + Send,
{
    let mut ready = ready;
    let mut reported = false;
    loop {
        match api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
        {
            // A kind the agent may not list answers 403 whether it is served or not (the
            // authorizer answers first): the agent goes on without it, as without one
            // not served, and says which.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => {
                if !reported {
                    if e.code == 404 {
                        tracing::info!(kind, "not served: {absent}");
                        unwatched(Some(Unwatched::NotServed));
                    } else {
                        tracing::warn!(kind, reason = %e.message, "not readable: none until the agent may list it");
                        unwatched(Some(Unwatched::Forbidden(e.message.clone())));
                    }
                    ready.report(kind).await;
                    ready = ready.detached();
                    reported = true;
                }
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            }
            _ => break,
        }
    }
    unwatched(None);
    watch_kind(api, watcher::Config::default(), kind, ready, apply).await
}

/// The pauses between a watch's restarts (see [`supervise`]).
fn restart_backoff() -> impl Backoff {
    DefaultBackoff::default()
}

/// The restart loop: runs the stream `start` gives until it ends (or handling a change
/// panics), then starts another after `backoff`'s next pause. With kube-runtime's
/// [`DefaultBackoff`] that is client-go's reflector backoff: 800 ms doubling to 30 s,
/// each pause lengthened by up to as much again at random (restarts of many watches
/// after an API server outage do not arrive together), and back to 800 ms once a watch
/// has run two minutes since the last restart.
async fn supervise<K, F, B>(
    mut start: impl FnMut() -> BoxStream<'static, Result<Event<Lean<K>>, watcher::Error>>,
    mut backoff: B,
    kind: &'static str,
    ready: Ready,
    mut apply: F,
) where
    K: Watched,
    F: FnMut(Change<K>) + Send,
    B: Backoff,
{
    let mut known: HashMap<String, Seen> = HashMap::new();
    let mut reported = false;
    loop {
        let ended = watch_once(start(), kind, &ready, &mut apply, &mut known, &mut reported).await;
        ready.set_down(kind, true);
        mcsched_engine::metrics::global().watch_restart(kind);
        // DefaultBackoff never runs out; a backoff that did would restart at once.
        let pause = backoff.next().unwrap_or_default();
        tracing::error!(
            kind,
            reason = ended,
            ?pause,
            "watch down; restarting with a relist"
        );
        tokio::time::sleep(pause).await;
    }
}

/// The kind's watcher events, lean: from protobuf where asked for and served (core/v1
/// kinds), else from JSON without managedFields.
fn events<K>(
    api: &Api<K>,
    config: &watcher::Config,
    ct: ContentType,
) -> BoxStream<'static, Result<Event<Lean<K>>, watcher::Error>>
where
    K: Watched,
{
    let dt = K::DynamicType::default();
    let client = Client::from(api.clone());
    let protobuf = (ct == ContentType::Protobuf)
        .then(|| {
            let url = api.resource_url().to_string();
            mcsched_wire::read::watcher::<K>(client.clone(), url, config.clone()).ok()
        })
        .flatten();
    match protobuf {
        // Decoded straight into K, managedFields left out as the lean decode does.
        Some(s) => s.map(|r| r.map(lean_event)).default_backoff().boxed(),
        // Decoded without managedFields: never read here, yet the bulk of a decoded
        // object (nested JSON maps), as client-go informers' transforms commonly drop them.
        None => {
            let lean: Api<Lean<K>> = match api.namespace() {
                Some(ns) => Api::namespaced_with(client, ns, &dt),
                None => Api::all_with(client, &dt),
            };
            watcher::watcher(lean, config.clone())
                .default_backoff()
                .boxed()
        }
    }
}

/// One run of a watch, until its stream ends or handling a change panics; why it ended.
async fn watch_once<K, F>(
    mut stream: BoxStream<'static, Result<Event<Lean<K>>, watcher::Error>>,
    kind: &'static str,
    ready: &Ready,
    apply: &mut F,
    known: &mut HashMap<String, Seen>,
    reported: &mut bool,
) -> &'static str
where
    K: Watched,
    F: FnMut(Change<K>) + Send,
{
    let mut relist: Option<HashMap<String, Seen>> = None;
    let mut apply = |change: Change<K>| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| apply(change))).is_ok()
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => {
                if *reported {
                    mcsched_engine::metrics::global().watch_relist(kind);
                }
                relist = Some(HashMap::new())
            }
            Ok(Event::InitApply(Lean(o))) => {
                let o = Arc::new(o);
                let key = key_of(&*o);
                let is_new = !known.contains_key(&key);
                if let Some(seen) = relist.as_mut() {
                    seen.insert(key, Seen::of(&*o));
                }
                if !apply(Change::Apply(o, is_new)) {
                    return "handling a change panicked";
                }
            }
            Ok(Event::InitDone) => {
                if let Some(seen) = relist.take() {
                    // Every vanished object is deleted even if one's handling panics; that
                    // one stays known, to be deleted again after the next relist.
                    let mut failed = HashMap::new();
                    for (key, gone) in known.drain() {
                        if !seen.contains_key(&key) && !apply(Change::Delete(gone.tombstone(&key)))
                        {
                            failed.insert(key, gone);
                        }
                    }
                    *known = seen;
                    if !failed.is_empty() {
                        known.extend(failed);
                        return "handling a change panicked";
                    }
                }
                ready.set_down(kind, false);
                if !*reported {
                    *reported = true;
                    let _ = ready.tx.send(kind).await;
                }
            }
            Ok(Event::Apply(Lean(o))) => {
                let o = Arc::new(o);
                let is_new = known.insert(key_of(&*o), Seen::of(&*o)).is_none();
                if !apply(Change::Apply(o, is_new)) {
                    return "handling a change panicked";
                }
            }
            Ok(Event::Delete(Lean(o))) => {
                known.remove(&key_of(&o));
                if !apply(Change::Delete(Arc::new(o))) {
                    return "handling a change panicked";
                }
            }
            // The watcher retries these itself, relisting when it must.
            Err(e) => {
                if is_expired(&e) {
                    mcsched_engine::metrics::global().watch_expired(kind);
                }
                warn!(kind, error = %e, "watch failed; retrying")
            }
        }
    }
    "the stream ended"
}

fn lean_event<K>(e: Event<K>) -> Event<Lean<K>> {
    match e {
        Event::Apply(o) => Event::Apply(Lean(o)),
        Event::Delete(o) => Event::Delete(Lean(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(Lean(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// 410 Gone: the watch's resource version is no longer served; the watcher relists.
fn is_expired(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchError(s) => s.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 410,
        _ => false,
    }
}

/// Applies a node change to `cache`; the cluster event it is, if any can help a pod (a
/// node leaving frees nothing).
pub fn apply_node(cache: &mut Cache, change: Change<Node>) -> Option<ClusterEvent> {
    match change {
        Change::Apply(n, is_new) => {
            cache.apply_node(n);
            Some(if is_new {
                ClusterEvent::NodeAdd
            } else {
                ClusterEvent::NodeUpdate
            })
        }
        Change::Delete(n) => {
            cache.delete_node(&n.name_any());
            None
        }
    }
}

/// A storage kind the volume plugins read, kept in [`VolumeObjects`].
pub trait StorageKind:
    Resource + Clone + Default + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
    const KIND: &'static str;
    const EVENT: ClusterEvent;
    fn map(v: &mut VolumeObjects) -> &mut HashMap<String, Arc<Self>>;
    fn key(&self) -> String {
        self.name_any()
    }
}

impl StorageKind for PersistentVolumeClaim {
    const KIND: &'static str = "persistentvolumeclaim";
    const EVENT: ClusterEvent = ClusterEvent::PvcChange;
    fn map(v: &mut VolumeObjects) -> &mut HashMap<String, Arc<Self>> {
        &mut v.claims
    }
    fn key(&self) -> String {
        key_of(self)
    }
}

impl StorageKind for PersistentVolume {
    const KIND: &'static str = "persistentvolume";
    const EVENT: ClusterEvent = ClusterEvent::PvChange;
    fn map(v: &mut VolumeObjects) -> &mut HashMap<String, Arc<Self>> {
        &mut v.volumes
    }
}

impl StorageKind for StorageClass {
    const KIND: &'static str = "storageclass";
    const EVENT: ClusterEvent = ClusterEvent::StorageClassChange;
    fn map(v: &mut VolumeObjects) -> &mut HashMap<String, Arc<Self>> {
        &mut v.storage_classes
    }
}

impl StorageKind for CSINode {
    const KIND: &'static str = "csinode";
    const EVENT: ClusterEvent = ClusterEvent::CsiNodeChange;
    fn map(v: &mut VolumeObjects) -> &mut HashMap<String, Arc<Self>> {
        &mut v.csi_nodes
    }
}

impl StorageKind for CSIDriver {
    const KIND: &'static str = "csidriver";
    const EVENT: ClusterEvent = ClusterEvent::CsiDriverChange;
    fn map(v: &mut VolumeObjects) -> &mut HashMap<String, Arc<Self>> {
        &mut v.csi_drivers
    }
}

impl StorageKind for CSIStorageCapacity {
    const KIND: &'static str = "csistoragecapacity";
    const EVENT: ClusterEvent = ClusterEvent::StorageCapacityChange;
    fn map(v: &mut VolumeObjects) -> &mut HashMap<String, Arc<Self>> {
        &mut v.storage_capacities
    }
    fn key(&self) -> String {
        key_of(self)
    }
}

/// Applies a storage object's change to `cache`; the cluster event it is.
pub fn apply_storage<K: StorageKind>(cache: &mut Cache, change: Change<K>) -> ClusterEvent
where
    K::DynamicType: Default,
{
    let map = K::map(cache.volumes_mut());
    match change {
        Change::Apply(o, _) => {
            map.insert(o.key(), o);
        }
        Change::Delete(o) => {
            map.remove(&o.key());
        }
    }
    K::EVENT
}

/// Watches one storage kind into `cache`, telling `on_event` of every change. `label`
/// names the watch in logs and readiness (`"persistentvolume"`, `"leaf persistentvolume"`).
pub fn spawn_storage<K: StorageKind>(
    client: &Client,
    cache: SharedCache,
    label: &'static str,
    ready: impl Into<Ready> + Send + 'static,
    on_event: impl Fn(ClusterEvent) + Send + 'static,
) -> JoinHandle<()>
where
    K::DynamicType: Default,
{
    tokio::spawn(watch_kind(
        Api::<K>::all(client.clone()),
        watcher::Config::default(),
        label,
        ready,
        move |change| {
            let event = apply_storage(&mut lock(&cache), change);
            on_event(event);
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pvc(ns: &str, name: &str) -> Arc<PersistentVolumeClaim> {
        let mut c = PersistentVolumeClaim::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        Arc::new(c)
    }

    #[test]
    fn storage_changes_land_under_their_keys_with_their_events() {
        let mut cache = Cache::new();
        let e = apply_storage(&mut cache, Change::Apply(pvc("a", "data"), true));
        assert_eq!(e, ClusterEvent::PvcChange);
        assert!(cache.volumes_mut().claims.contains_key("a/data"));
        let mut sc = StorageClass::default();
        sc.metadata.name = Some("fast".into());
        let e = apply_storage(&mut cache, Change::Apply(Arc::new(sc.clone()), true));
        assert_eq!(e, ClusterEvent::StorageClassChange);
        assert!(cache.volumes_mut().storage_classes.contains_key("fast"));
        apply_storage(&mut cache, Change::Delete(pvc("a", "data")));
        assert!(cache.volumes_mut().claims.is_empty());
        apply_storage(&mut cache, Change::Delete(Arc::new(sc)));
        assert!(cache.volumes_mut().storage_classes.is_empty());
    }

    /// An API server that lists one ConfigMap and holds every watch open.
    fn one_configmap() -> kube::Client {
        let service = tower::service_fn(|req: http::Request<kube::client::Body>| {
            let watching = req.uri().query().is_some_and(|q| q.contains("watch=true"));
            async move {
                if watching {
                    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                }
                let list = serde_json::json!({"kind": "ConfigMapList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": "1"},
                    "items": [{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}]});
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&list).unwrap_or_default(),
                        ))
                        .unwrap_or_else(|_| http::Response::new(kube::client::Body::empty())),
                )
            }
        });
        kube::Client::new(service, "ns")
    }

    #[tokio::test]
    async fn a_panicking_handler_restarts_the_watch_with_a_relist() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let health = WatchHealth::default();
        let (tx, mut listed) = tokio::sync::mpsc::channel(4);
        let ready = Ready::supervised(tx, health.clone());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (calls, names) = (
            Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            seen.clone(),
        );
        let apply = move |c: Change<ConfigMap>| {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                panic!("the first change fails");
            }
            names.lock().expect("lock").push(c.object().name_any());
        };
        tokio::spawn(watch_kind(
            Api::<ConfigMap>::all(one_configmap()),
            watcher::Config::default(),
            "test-configmap",
            ready,
            apply,
        ));
        let kind = tokio::time::timeout(std::time::Duration::from_secs(10), listed.recv())
            .await
            .expect("listed after the restart");
        assert_eq!(kind, Some("test-configmap"));
        assert_eq!(*seen.lock().expect("lock"), ["a"]);
        assert!(health.down().is_empty());
        assert!(
            mcsched_engine::metrics::global()
                .encode()
                .contains("mcsched_watch_restarts_total{resource=\"test-configmap\"} 1"),
            "restart counted"
        );
    }

    /// When the restart loop starts each of its watches: the first `fail` end at once,
    /// the next one runs `healthy` and ends, the one after ends at once, and the rest
    /// never end.
    async fn restarts(fail: usize, healthy: std::time::Duration) -> Vec<tokio::time::Instant> {
        use k8s_openapi::api::core::v1::ConfigMap;
        let starts = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, mut done) = tokio::sync::mpsc::channel::<()>(1);
        let seen = starts.clone();
        let start =
            move || -> BoxStream<'static, Result<Event<Lean<ConfigMap>>, watcher::Error>> {
                let mut s = seen.lock().expect("lock");
                s.push(tokio::time::Instant::now());
                let n = s.len();
                if n <= fail || n == fail + 2 {
                    futures::stream::empty().boxed()
                } else if n == fail + 1 {
                    futures::stream::once(tokio::time::sleep(healthy))
                        .filter_map(|()| async { None })
                        .boxed()
                } else {
                    let _ = done_tx.try_send(());
                    futures::stream::pending().boxed()
                }
            };
        let (tx, _listed) = tokio::sync::mpsc::channel(1);
        let task = tokio::spawn(supervise(
            start,
            restart_backoff(),
            "test-backoff",
            Ready::from(tx),
            |_: Change<ConfigMap>| {},
        ));
        done.recv().await.expect("the last watch started");
        task.abort();
        starts.lock().expect("lock").clone()
    }

    /// The pause before restart `i` (from 0) of a watch that keeps failing: 800 ms
    /// doubling to 30 s, each up to twice that with jitter.
    fn pause_bounds(i: u32) -> (std::time::Duration, std::time::Duration) {
        let base = (std::time::Duration::from_millis(800) * 2u32.pow(i.min(16)))
            .min(std::time::Duration::from_secs(30));
        (base, base * 2)
    }

    #[tokio::test(start_paused = true)]
    async fn restarts_back_off_with_jitter_and_start_over_after_a_healthy_watch() {
        use std::time::Duration;
        let fail = 8;
        let healthy = Duration::from_secs(180);
        let starts = restarts(fail, healthy).await;
        assert_eq!(starts.len(), fail + 3);
        let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        for (i, gap) in gaps[..fail].iter().enumerate() {
            let (low, high) = pause_bounds(i as u32);
            assert!(
                (low..high).contains(gap),
                "restart {i}: {gap:?} not in [{low:?}, {high:?})"
            );
        }
        assert!(
            gaps[fail - 1] >= Duration::from_secs(30),
            "capped at 30 s (plus jitter): {gaps:?}"
        );
        // The watch that ran three minutes was healthy: the pause after it is the first
        // one again, not the 30 s (and more) the failures had reached.
        let after_healthy = gaps[fail] - healthy;
        let (low, high) = pause_bounds(0);
        assert!(
            (low..high).contains(&after_healthy),
            "after a healthy watch: {after_healthy:?}"
        );
        // Then it grows again from there.
        let (low, high) = pause_bounds(1);
        assert!((low..high).contains(&gaps[fail + 1]), "{gaps:?}");
    }

    #[test]
    fn restart_pauses_are_jittered_within_their_bounds() {
        // Fresh backoffs' first and fourth pauses: spread over [d, 2d), not all d.
        for i in [0u32, 3] {
            let (low, high) = pause_bounds(i);
            let pauses: std::collections::BTreeSet<std::time::Duration> = (0..200)
                .map(|_| restart_backoff().nth(i as usize).expect("never runs out"))
                .collect();
            let (min, max) = (pauses.first().copied(), pauses.last().copied());
            assert!(min.is_some_and(|m| m >= low), "{min:?} < {low:?}");
            assert!(max.is_some_and(|m| m < high), "{max:?} >= {high:?}");
            assert!(pauses.len() > 100, "jittered: {} distinct", pauses.len());
            assert!(
                max.zip(min).is_some_and(|(a, b)| a - b > (high - low) / 2),
                "spread over the range: {min:?}..{max:?}"
            );
        }
    }

    /// A relist that no longer shows an object deletes it with the metadata remembered of
    /// it (name, uid, labels), not a decoded copy of the whole object.
    #[tokio::test]
    async fn an_object_gone_at_a_relist_is_deleted_with_its_name_uid_and_labels() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let lists = Arc::new(AtomicUsize::new(0));
        let watches = Arc::new(AtomicUsize::new(0));
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let watching = req.uri().query().is_some_and(|q| q.contains("watch=true"));
            let (lists, watches) = (lists.clone(), watches.clone());
            async move {
                let cm = |name: &str| {
                    serde_json::json!({"metadata": {"name": name, "namespace": "ns",
                        "uid": format!("uid-{name}"), "labels": {"app": name},
                        "resourceVersion": "1"}, "data": {"big": "x".repeat(64)}})
                };
                let body = if watching {
                    if watches.fetch_add(1, Ordering::SeqCst) > 0 {
                        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                    }
                    // The handler panics on this one, and again on its deletion after the
                    // relist: b is deleted all the same.
                    serde_json::to_vec(&serde_json::json!({"type": "ADDED", "object": cm("boom")}))
                        .unwrap_or_default()
                } else {
                    let items = if lists.fetch_add(1, Ordering::SeqCst) == 0 {
                        vec![cm("a"), cm("b")]
                    } else {
                        vec![cm("a")]
                    };
                    serde_json::to_vec(&serde_json::json!({"kind": "ConfigMapList",
                        "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}))
                    .unwrap_or_default()
                };
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body))
                        .unwrap_or_else(|_| http::Response::new(kube::client::Body::empty())),
                )
            }
        });
        let client = kube::Client::new(service, "ns");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let apply = move |c: Change<ConfigMap>| {
            let o = c.object();
            if o.name_any() == "boom" {
                panic!("handling this change fails");
            }
            let what = match &c {
                Change::Apply(..) => "apply",
                Change::Delete(_) => "delete",
            };
            record.lock().expect("lock").push((
                what,
                format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()),
                o.metadata.uid.clone(),
                o.labels().get("app").cloned(),
                o.data.is_some(),
            ));
        };
        let (tx, _listed) = tokio::sync::mpsc::channel(4);
        tokio::spawn(watch_kind(
            Api::<ConfigMap>::all(client),
            watcher::Config::default(),
            "test-relist",
            Ready::supervised(tx, WatchHealth::default()),
            apply,
        ));
        let deleted = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                if let Some(d) = seen
                    .lock()
                    .expect("lock")
                    .iter()
                    .find(|e| e.0 == "delete")
                    .cloned()
                {
                    return d;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("b deleted after the relist");
        assert_eq!(
            deleted,
            (
                "delete",
                "ns/b".to_string(),
                Some("uid-b".to_string()),
                Some("b".to_string()),
                false
            )
        );
        let applied: Vec<String> = seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|e| e.0 == "apply")
            .map(|e| e.1.clone())
            .collect();
        assert_eq!(applied, ["ns/a", "ns/b", "ns/a"]);
    }
}
