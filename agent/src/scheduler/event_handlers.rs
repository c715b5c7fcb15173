//! kube's `eventhandlers.go`: the host's watches feed the cache and tell the queue what
//! changed; pods of this agent's profiles that are not bound yet enter the queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use super::Shared;
use crate::framework::ClusterEvent;
use crate::pod_selectors::{Selector, SelectorKind};
use crate::snapshot::PodInfo;
use crate::watch::{self, Change, NON_TERMINAL_PODS, Ready, key_of, watch_kind};

fn is_unbound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
        .is_empty()
}

/// One task per watched kind; every one must list before the first decision.
pub(super) fn spawn_watches(
    client: &Client,
    shared: &Arc<Shared>,
    ready: Ready,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let s = shared.clone();
    tasks.push(tokio::spawn(watch_kind(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().fields(NON_TERMINAL_PODS),
        "pod",
        ready.clone(),
        move |ev| on_pod_event(&s, ev),
    )));
    let s = shared.clone();
    tasks.push(tokio::spawn(watch_kind(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        "node",
        ready.clone(),
        move |ev| {
            if let Some(event) = watch::apply_node(&mut s.cache(), ev) {
                s.queue.on_event(event);
            }
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
    let to_queue = || {
        let q = shared.queue.clone();
        move |event| q.on_event(event)
    };
    let cache = &shared.cache;
    tasks.push(watch::spawn_storage::<PersistentVolumeClaim>(
        client,
        cache.clone(),
        "persistentvolumeclaim",
        ready.clone(),
        to_queue(),
    ));
    tasks.push(watch::spawn_storage::<PersistentVolume>(
        client,
        cache.clone(),
        "persistentvolume",
        ready.clone(),
        to_queue(),
    ));
    tasks.push(watch::spawn_storage::<StorageClass>(
        client,
        cache.clone(),
        "storageclass",
        ready.clone(),
        to_queue(),
    ));
    tasks.push(watch::spawn_storage::<CSINode>(
        client,
        cache.clone(),
        "csinode",
        ready.clone(),
        to_queue(),
    ));
    tasks.extend(spawn_selector_watches(client, shared, &ready));
    tasks.extend(spawn_policy_watches(client, shared, &ready));
    let s = shared.clone();
    let pdbs: Arc<Mutex<HashMap<String, Arc<PodDisruptionBudget>>>> = Arc::default();
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

/// The placement policies, both kinds into one set. Where the CRDs are not installed
/// (an agent run without `install`) the kinds count as listed and empty, and are looked
/// for again every 30 s.
fn spawn_policy_watches(
    client: &Client,
    shared: &Arc<Shared>,
    ready: &Ready,
) -> Vec<JoinHandle<()>> {
    let set: Arc<Mutex<crate::policies::PolicySet>> = Arc::default();
    let (s, all) = (shared.clone(), set.clone());
    let namespaced = tokio::spawn(watch_if_served(
        Api::<mcsched_shared::policy::PlacementPolicy>::all(client.clone()),
        "placementpolicy",
        ready.clone(),
        move |ev| publish_policies(&s, &all, |set| set.apply_namespaced(ev)),
    ));
    let s = shared.clone();
    let cluster = tokio::spawn(watch_if_served(
        Api::<mcsched_shared::policy::ClusterPlacementPolicy>::all(client.clone()),
        "clusterplacementpolicy",
        ready.clone(),
        move |ev| publish_policies(&s, &set, |set| set.apply_cluster(ev)),
    ));
    vec![namespaced, cluster]
}

fn publish_policies(
    shared: &Shared,
    set: &Mutex<crate::policies::PolicySet>,
    change: impl FnOnce(&mut crate::policies::PolicySet),
) {
    let snapshot = {
        let mut all = set.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut all);
        Arc::new(all.clone())
    };
    shared.cache().set_policies(snapshot);
    shared.queue.on_event(ClusterEvent::PolicyChange);
}

/// `watch_kind` once the API server serves the kind (404 until its CRD is installed).
async fn watch_if_served<K, F>(api: Api<K>, kind: &'static str, ready: Ready, apply: F)
where
    K: kube::Resource
        + Clone
        + Default
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default,
    F: FnMut(Change<K>) + Send,
{
    let mut ready = ready;
    let mut reported = false;
    loop {
        match api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 404 => {
                if !reported {
                    tracing::info!(
                        kind,
                        "not served (its CRD is not installed): no placement policies until it is"
                    );
                    ready.report(kind).await;
                    ready = ready.detached();
                    reported = true;
                }
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            }
            _ => break,
        }
    }
    watch_kind(api, watcher::Config::default(), kind, ready, apply).await
}

/// What selects pods, for PodTopologySpread's default constraints.
fn spawn_selector_watches(
    client: &Client,
    shared: &Arc<Shared>,
    ready: &Ready,
) -> Vec<JoinHandle<()>> {
    fn spawn<K>(
        client: &Client,
        shared: &Arc<Shared>,
        ready: &Ready,
        label: &'static str,
        kind: SelectorKind,
        selector: fn(&K) -> Selector,
    ) -> JoinHandle<()>
    where
        K: kube::Resource
            + Clone
            + Default
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default,
    {
        let s = shared.clone();
        tokio::spawn(watch_kind(
            Api::<K>::all(client.clone()),
            watcher::Config::default(),
            label,
            ready.clone(),
            move |ev| {
                let sel = match &ev {
                    Change::Apply(o, _) => Some(selector(o)),
                    Change::Delete(_) => None,
                };
                let o = ev.object();
                let ns = o.namespace().unwrap_or_default();
                s.cache()
                    .pod_selectors_mut()
                    .set(kind, &ns, &o.name_any(), sel);
            },
        ))
    }
    vec![
        spawn::<Service>(
            client,
            shared,
            ready,
            "service",
            SelectorKind::Service,
            |o| Selector::Map(o.spec.as_ref().and_then(|s| s.selector.clone())),
        ),
        spawn::<ReplicationController>(
            client,
            shared,
            ready,
            "replicationcontroller",
            SelectorKind::ReplicationController,
            |o| Selector::Map(o.spec.as_ref().and_then(|s| s.selector.clone())),
        ),
        spawn::<ReplicaSet>(
            client,
            shared,
            ready,
            "replicaset",
            SelectorKind::ReplicaSet,
            |o| Selector::Label(o.spec.as_ref().map(|s| s.selector.clone())),
        ),
        spawn::<StatefulSet>(
            client,
            shared,
            ready,
            "statefulset",
            SelectorKind::StatefulSet,
            |o| Selector::Label(o.spec.as_ref().map(|s| s.selector.clone())),
        ),
    ]
}

fn on_pod_event(shared: &Shared, change: Change<Pod>) {
    let on_virtual = change
        .object()
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .and_then(|n| n.strip_prefix(mcsched_shared::keys::VIRTUAL_NODE_PREFIX))
        .map(String::from);
    if let Some(cluster) = on_virtual {
        shared.leaves.host_changed(&cluster);
    }
    match change {
        Change::Apply(pod, is_new) => {
            let id = crate::queue::pod_id(&pod);
            if !is_unbound(&pod) {
                shared.cache().apply_pod(pod);
                shared.queue.delete(&id);
                shared.profiles.nominator.delete(&id);
                shared.queue.on_event(if is_new {
                    ClusterEvent::PodAdd
                } else {
                    ClusterEvent::PodUpdate
                });
                return;
            }
            let Some(fw) = shared.profiles.for_pod(&pod) else {
                return;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                shared.queue.delete(&id);
                shared.profiles.nominator.delete(&id);
                return;
            }
            let gate = fw.run_pre_enqueue(&pod);
            let gate = (!gate.is_success()).then(|| crate::framework::Rejection {
                profile: fw.scheduler_name.clone(),
                plugins: vec![gate.plugin],
            });
            let gated = gate.is_some();
            // Queued compact: a burst of pending pods is most of what the agent holds.
            let info = Arc::new(PodInfo::compact(pod));
            // kube nominates only pods that reach activeQ: not gated ones.
            if gated {
                shared.profiles.nominator.delete(&id);
            } else {
                shared.profiles.nominator.update(info.clone());
            }
            shared.queue.add(info, gate);
        }
        Change::Delete(pod) => {
            let key = key_of(&*pod);
            // A deletion found by a relist carries only the pod's metadata: whether it was
            // placed, and by which profile, is the cache's to say.
            let (assumed, cached) = {
                let cache = shared.cache();
                (cache.is_assumed(&key), cache.pod_info(&key).cloned())
            };
            if assumed && let Some(cached) = &cached {
                // A pod waiting on Permit is rejected; its binding task cleans up.
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                if let Some(fw) = shared.profiles.for_pod(&cached.pod()) {
                    fw.handle().reject_waiting_pod(uid);
                }
            }
            let was_bound = !is_unbound(&pod) || cached.is_some();
            shared.cache().remove_pod(&key);
            let id = crate::queue::pod_id(&pod);
            shared.queue.delete(&id);
            shared.profiles.nominator.delete(&id);
            if was_bound {
                shared.queue.on_event(ClusterEvent::PodDelete);
            }
        }
    }
}
