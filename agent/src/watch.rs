//! Watches, host and leaf alike: a kind streamed into [`Change`]s (re-lists turned into
//! applies and deletions of what vanished meanwhile, managed fields dropped), and the one
//! place that feeds a [`Cache`] from them and names the cluster event each change is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::cache::Cache;
use crate::framework::ClusterEvent;
use crate::snapshot::VolumeObjects;

/// Pods that finished hold no resources, so the host does not watch them at all.
pub const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// A cache shared by its watches and its readers.
pub type SharedCache = Arc<Mutex<Cache>>;

pub fn lock(cache: &Mutex<Cache>) -> MutexGuard<'_, Cache> {
    cache.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tells that a kind's first complete list has arrived.
pub type Ready = tokio::sync::mpsc::Sender<&'static str>;

/// `namespace/name`, or `/name` for cluster-scoped objects.
pub fn key_of<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.as_deref().unwrap_or_default(),
        o.name_any()
    )
}

/// managedFields are never read here, yet they are the bulk of a decoded object (nested
/// JSON maps): dropped before caching, as client-go informers' transforms commonly do.
fn without_managed_fields<K: Resource>(mut o: K) -> K {
    o.meta_mut().managed_fields = None;
    o
}

/// A watch event reduced to what a cache needs; `Apply`'s flag tells a new object.
pub enum Change<K> {
    Apply(Arc<K>, bool),
    Delete(Arc<K>),
}

impl<K> Change<K> {
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Apply(o, _) | Change::Delete(o) => o,
        }
    }
}

/// Streams one kind, turning re-lists into applies and deletions of objects that vanished
/// meanwhile, and reports the first complete list on `ready`.
pub async fn watch_kind<K, F>(
    api: Api<K>,
    config: watcher::Config,
    kind: &'static str,
    ready: Ready,
    mut apply: F,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default,
    F: FnMut(Change<K>) + Send,
{
    let mut known: HashMap<String, Arc<K>> = HashMap::new();
    let mut relist: Option<HashMap<String, Arc<K>>> = None;
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut reported = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => relist = Some(HashMap::new()),
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
    Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
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
    ready: Ready,
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
}
