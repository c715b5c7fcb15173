//! The host's ConfigMaps and Secrets that leaf copies refer to, watched per namespace while
//! some leaf pod refers to one there, so that an edit on the host reaches the copies in the
//! leaves as it happens. Where the agent may only `get` them (a grant made before `list` and
//! `watch` were part of the reader roles) the watch never lists, and pod sync reads the
//! objects by name every resync instead.
//!
//! The watches ask for metadata only and keep each object's name and resourceVersion, no
//! more: a namespace's objects are mostly ones no leaf pod refers to (an editor's 1 MiB
//! ConfigMaps, every Secret there), and neither their data nor their labels and annotations
//! (a client-side apply's copy of the whole object among them) are the agent's to hold.
//! The few objects a copy needs are read by name when their version moves.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use tokio::task::JoinHandle;
use tracing::{debug, info};

/// One kind's objects in one namespace, as its watch last listed and followed them.
#[derive(Default)]
struct Listed {
    /// Whether a list has arrived: before that (or when listing is forbidden) the map
    /// knows nothing, which is not "none".
    ready: bool,
    /// Name to resourceVersion.
    versions: HashMap<Box<str>, Box<str>>,
}

type Shared = Arc<Mutex<Listed>>;

fn lock(listed: &Mutex<Listed>) -> MutexGuard<'_, Listed> {
    listed.lock().unwrap_or_else(|e| e.into_inner())
}

/// One namespace's watches.
struct Watched {
    config_maps: Shared,
    secrets: Shared,
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
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The watch has listed the namespace: the object's resourceVersion, or None when the
    /// host has none.
    Watched(Option<String>),
    /// No list yet (or none allowed): ask the API server.
    Unknown,
}

/// What the watches hold, for the tests that measure it.
#[cfg(test)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub namespaces: usize,
    pub objects: usize,
    /// The names' and versions' bytes (the maps' own overhead aside).
    pub bytes: usize,
}

/// The watched namespaces, and which leaves want each.
#[derive(Default)]
pub struct HostObjects {
    watched: Mutex<HashMap<String, Watched>>,
    wanted: Mutex<HashMap<String, BTreeSet<String>>>,
}

fn name_and_version<K>(o: &PartialObjectMeta<K>) -> Option<(Box<str>, Box<str>)> {
    let name = o.metadata.name.as_deref()?;
    let version = o.metadata.resource_version.as_deref().unwrap_or_default();
    Some((name.into(), version.into()))
}

/// Watches the metadata of `api`'s objects (an `Api` of `PartialObjectMeta` asks for
/// nothing else) into a map of names and versions, calling `changed` on every change
/// after the first list.
fn spawn_watch<K>(
    api: Api<PartialObjectMeta<K>>,
    what: &'static str,
    namespace: &str,
    changed: Arc<dyn Fn() + Send + Sync>,
) -> (Shared, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let listed = Shared::default();
    let into = listed.clone();
    let ns = namespace.to_string();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        // A relist replaces the map whole once it is complete, as a reflector's store.
        let mut relisted: Option<HashMap<Box<str>, Box<str>>> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => relisted = Some(HashMap::new()),
                Ok(Event::InitApply(o)) => {
                    if let (Some(map), Some((name, version))) =
                        (relisted.as_mut(), name_and_version(&o))
                    {
                        map.insert(name, version);
                    }
                }
                Ok(Event::InitDone) => {
                    let versions = relisted.take().unwrap_or_default();
                    debug!(namespace = %ns, kind = what, objects = versions.len(), "host objects listed for leaf copies (names and versions only)");
                    *lock(&into) = Listed {
                        ready: true,
                        versions,
                    };
                    changed();
                }
                Ok(Event::Apply(o)) => {
                    if let Some((name, version)) = name_and_version(&o) {
                        lock(&into).versions.insert(name, version);
                        changed();
                    }
                }
                Ok(Event::Delete(o)) => {
                    if let Some(name) = o.metadata.name.as_deref() {
                        lock(&into).versions.remove(name);
                        changed();
                    }
                }
                Err(e) => {
                    debug!(namespace = %ns, kind = what, error = %e, "host watch for leaf copies")
                }
            }
        }
    });
    (listed, task)
}

impl HostObjects {
    fn watched(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
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
                Api::<PartialObjectMeta<ConfigMap>>::namespaced(host.clone(), &ns),
                "ConfigMap",
                &ns,
                changed.clone(),
            );
            let (secrets, s_task) = spawn_watch(
                Api::<PartialObjectMeta<Secret>>::namespaced(host.clone(), &ns),
                "Secret",
                &ns,
                changed.clone(),
            );
            info!(namespace = %ns, "watching the names and versions of the ConfigMaps and Secrets that leaf copies refer to");
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

    /// ConfigMap `namespace/name`'s resourceVersion, as the watch knows it.
    pub fn config_map(&self, namespace: &str, name: &str) -> Found {
        let watched = self.watched();
        match watched.get(namespace) {
            Some(w) => lookup(&w.config_maps, name),
            None => Found::Unknown,
        }
    }

    /// Secret `namespace/name`'s resourceVersion, as the watch knows it.
    pub fn secret(&self, namespace: &str, name: &str) -> Found {
        let watched = self.watched();
        match watched.get(namespace) {
            Some(w) => lookup(&w.secrets, name),
            None => Found::Unknown,
        }
    }

    /// What the watches hold now.
    #[cfg(test)]
    pub fn held(&self) -> Held {
        let watched = self.watched();
        let mut held = Held {
            namespaces: watched.len(),
            ..Held::default()
        };
        for w in watched.values() {
            for listed in [&w.config_maps, &w.secrets] {
                let listed = lock(listed);
                held.objects += listed.versions.len();
                held.bytes += listed
                    .versions
                    .iter()
                    .map(|(n, v)| n.len() + v.len())
                    .sum::<usize>();
            }
        }
        held
    }
}

fn lookup(listed: &Mutex<Listed>, name: &str) -> Found {
    let listed = lock(listed);
    if !listed.ready {
        return Found::Unknown;
    }
    Found::Watched(listed.versions.get(name).map(|v| v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::client::Body;
    use serde_json::{Value, json};
    use std::convert::Infallible;
    use std::time::Duration;

    /// What the fake host served: the bytes of its answers, and each request's Accept.
    #[derive(Default)]
    struct Served {
        bytes: usize,
        accepts: Vec<String>,
    }

    /// A host whose namespace shop holds ConfigMaps and Secrets `o-0` … `o-{n-1}` (their
    /// resourceVersions 100 …) of `size` bytes of data each, answering lists as an API
    /// server does: metadata only when asked for it. Watches never answer.
    fn host(n: usize, size: usize) -> (Client, Arc<Mutex<Served>>) {
        let served = Arc::new(Mutex::new(Served::default()));
        let record = served.clone();
        let service = tower::service_fn(move |req: http::Request<Body>| {
            let record = record.clone();
            async move {
                let accept = req
                    .headers()
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                if let Ok(mut s) = record.lock() {
                    s.accepts.push(accept.clone());
                }
                if req.uri().query().is_some_and(|q| q.contains("watch=true")) {
                    futures::future::pending::<()>().await;
                }
                let kind = if req.uri().path().ends_with("/configmaps") {
                    "ConfigMap"
                } else {
                    "Secret"
                };
                let metadata_only = accept.contains("as=PartialObjectMetadataList");
                let items: Vec<Value> = (0..n)
                    .map(|i| {
                        let metadata = json!({"name": format!("o-{i}"), "namespace": "shop",
                            "uid": format!("uid-{i}"), "resourceVersion": format!("{}", 100 + i),
                            "annotations": {"team": "web"}});
                        if metadata_only {
                            json!({"apiVersion": "meta.k8s.io/v1",
                                "kind": "PartialObjectMetadata", "metadata": metadata})
                        } else {
                            json!({"apiVersion": "v1", "kind": kind, "metadata": metadata,
                                "data": {"k": "A".repeat(size)}})
                        }
                    })
                    .collect();
                let (api_version, list_kind) = if metadata_only {
                    ("meta.k8s.io/v1", "PartialObjectMetadataList".to_string())
                } else {
                    ("v1", format!("{kind}List"))
                };
                let body = serde_json::to_vec(&json!({"apiVersion": api_version,
                    "kind": list_kind, "metadata": {"resourceVersion": "200"}, "items": items}))
                .unwrap_or_default();
                if let Ok(mut s) = record.lock() {
                    s.bytes += body.len();
                }
                let response = http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Body::from(body));
                Ok::<_, Infallible>(response.unwrap_or_else(|_| http::Response::new(Body::empty())))
            }
        });
        (Client::new(service, "default"), served)
    }

    /// A namespace of 40 ConfigMaps and 40 Secrets of 64 KiB each, none of them referred
    /// to: the watches ask for metadata only, and hold a name and a version of each;
    /// the data never reaches the agent.
    #[tokio::test]
    async fn a_namespace_is_watched_by_names_and_versions_only() {
        let (n, size) = (40, 64 * 1024);
        let (client, served) = host(n, size);
        let objects = HostObjects::default();
        assert_eq!(objects.config_map("shop", "o-7"), Found::Unknown);
        let changed: Arc<dyn Fn() + Send + Sync> = Arc::new(|| {});
        objects.want(
            &client,
            "east",
            BTreeSet::from(["shop".to_string()]),
            &changed,
        );
        for _ in 0..500 {
            if objects.config_map("shop", "o-0") != Found::Unknown
                && objects.secret("shop", "o-0") != Found::Unknown
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            objects.config_map("shop", "o-7"),
            Found::Watched(Some("107".into()))
        );
        assert_eq!(
            objects.secret("shop", "o-39"),
            Found::Watched(Some("139".into()))
        );
        assert_eq!(objects.config_map("shop", "o-40"), Found::Watched(None));

        let held = objects.held();
        assert_eq!((held.namespaces, held.objects), (1, 2 * n));
        assert!(held.bytes < 2 * n * 16, "{held:?}");
        let served = served.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            served.bytes < n * size,
            "{} bytes served for {} objects of {size} bytes unreferenced (accepts: {:?})",
            served.bytes,
            2 * n,
            served.accepts
        );
        assert!(
            served
                .accepts
                .iter()
                .all(|a| a.contains("as=PartialObjectMetadata")),
            "{:?}",
            served.accepts
        );

        // No leaf refers to anything there any more: the watches stop, and hold nothing.
        objects.want(&client, "east", BTreeSet::new(), &changed);
        assert_eq!(objects.held(), Held::default());
        assert_eq!(objects.config_map("shop", "o-7"), Found::Unknown);
    }
}
