//! The host's ConfigMaps and Secrets that leaf copies refer to, watched per namespace while
//! some leaf pod refers to one there, so that an edit on the host reaches the copies in the
//! leaves as it happens. Where the agent may only `get` them (a grant made before `list` and
//! `watch` were part of the reader roles) the watch never lists, and pod sync reads the
//! objects by name every resync instead.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::task::JoinHandle;
use tracing::{debug, info};

/// One namespace's watches.
struct Watched {
    config_maps: Store<ConfigMap>,
    secrets: Store<Secret>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Watched {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// What a lookup found.
pub enum Found<K> {
    /// The watch has listed the namespace: the object, or None when the host has none.
    Watched(Option<Arc<K>>),
    /// No list yet (or none allowed): ask the API server.
    Unknown,
}

/// The watched namespaces, and which leaves want each.
#[derive(Default)]
pub struct HostObjects {
    watched: Mutex<HashMap<String, Watched>>,
    wanted: Mutex<HashMap<String, BTreeSet<String>>>,
}

/// Watches `api` into a store, calling `changed` on every event after the first list.
fn spawn_watch<K>(
    api: Api<K>,
    what: &'static str,
    namespace: &str,
    changed: Arc<dyn Fn() + Send + Sync>,
) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let ns = namespace.to_string();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed(),
                Err(e) => {
                    debug!(namespace = %ns, kind = what, error = %e, "host watch for leaf copies")
                }
            }
        }
    });
    (store, task)
}

impl HostObjects {
    fn watched(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watched>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `leaf` refers to objects in `namespaces` now (and no others): watches start for
    /// namespaces nobody watched, and stop where no leaf refers to anything any more.
    /// `changed` is called on every change of a watched object.
    pub fn want(
        &self,
        host: &Client,
        leaf: &str,
        namespaces: BTreeSet<String>,
        changed: &Arc<dyn Fn() + Send + Sync>,
    ) {
        let all: BTreeSet<String> = {
            let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
            if namespaces.is_empty() {
                wanted.remove(leaf);
            } else {
                wanted.insert(leaf.to_string(), namespaces);
            }
            wanted.values().flatten().cloned().collect()
        };
        let mut watched = self.watched();
        watched.retain(|ns, _| {
            let keep = all.contains(ns);
            if !keep {
                info!(namespace = %ns, "no leaf copy refers to this namespace's ConfigMaps or Secrets any more: watch stopped");
            }
            keep
        });
        for ns in all {
            if watched.contains_key(&ns) {
                continue;
            }
            let (config_maps, cm_task) = spawn_watch(
                Api::<ConfigMap>::namespaced(host.clone(), &ns),
                "ConfigMap",
                &ns,
                changed.clone(),
            );
            let (secrets, s_task) = spawn_watch(
                Api::<Secret>::namespaced(host.clone(), &ns),
                "Secret",
                &ns,
                changed.clone(),
            );
            info!(namespace = %ns, "watching ConfigMaps and Secrets that leaf copies refer to");
            watched.insert(
                ns,
                Watched {
                    config_maps,
                    secrets,
                    tasks: [cm_task, s_task],
                },
            );
        }
    }

    pub fn config_map(&self, namespace: &str, name: &str) -> Found<ConfigMap> {
        let watched = self.watched();
        match watched.get(namespace) {
            Some(w) => lookup(&w.config_maps, namespace, name),
            None => Found::Unknown,
        }
    }

    pub fn secret(&self, namespace: &str, name: &str) -> Found<Secret> {
        let watched = self.watched();
        match watched.get(namespace) {
            Some(w) => lookup(&w.secrets, namespace, name),
            None => Found::Unknown,
        }
    }
}

fn lookup<K>(store: &Store<K>, namespace: &str, name: &str) -> Found<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    // A store is ready once its first list arrived; before that (or forbidden) it knows
    // nothing, not "none".
    if store.wait_until_ready().now_or_never().is_none() {
        return Found::Unknown;
    }
    Found::Watched(store.get(&ObjectRef::new(name).within(namespace)))
}
