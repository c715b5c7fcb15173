//! kube's `eventhandlers.go`: the host's watches feed the cache and tell the queue what
//! changed; pods of this agent's profiles that are not bound yet enter the queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use super::Shared;
use crate::control::watch::{
    self, Change, NON_TERMINAL_PODS, Ready, key_of, watch_if_served, watch_kind, watch_kind_in,
};
use mcsched_engine::framework::ClusterEvent;
use mcsched_engine::pod_selectors::{Selector, SelectorKind};
use mcsched_engine::snapshot::PodInfo;
use mcsched_shared::pod_group_versions::{self, PodGroupV1alpha2, PodGroupVersion};
use mcsched_wire::ContentType;

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
    ct: ContentType,
    ready: Ready,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let s = shared.clone();
    tasks.push(tokio::spawn(watch_kind_in(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().fields(NON_TERMINAL_PODS),
        ct,
        "pod",
        ready.clone(),
        move |ev| on_pod_event(&s, ev),
    )));
    let s = shared.clone();
    tasks.push(tokio::spawn(watch_kind_in(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        ct,
        "node",
        ready.clone(),
        move |ev| on_node_event(&s, ev),
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
    // VolumeBinding's storage capacity checks and NodeVolumeLimits' driver check.
    tasks.push(watch::spawn_storage::<CSIDriver>(
        client,
        cache.clone(),
        "csidriver",
        ready.clone(),
        to_queue(),
    ));
    tasks.push(watch::spawn_storage::<CSIStorageCapacity>(
        client,
        cache.clone(),
        "csistoragecapacity",
        ready.clone(),
        to_queue(),
    ));
    tasks.extend(spawn_device_watches(client, shared, &ready));
    tasks.extend(spawn_selector_watches(client, shared, &ready));
    tasks.extend(spawn_policy_watches(client, shared, &ready));
    tasks.push(tokio::spawn(watch_pod_groups(
        client.clone(),
        shared.clone(),
        ready.clone(),
    )));
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

/// resource.k8s.io/v1's DeviceClasses, ResourceSlices and DeviceTaintRules into the cache, ResourceClaims
/// into the profiles' claim tracker, once the API server serves them (v1.34 on).
fn spawn_device_watches(
    client: &Client,
    shared: &Arc<Shared>,
    ready: &Ready,
) -> Vec<JoinHandle<()>> {
    const ABSENT: &str = "resource.k8s.io/v1 is not served: pods with resource claims wait";
    let s = shared.clone();
    let classes = tokio::spawn(watch_if_served(
        Api::<DeviceClass>::all(client.clone()),
        "deviceclass",
        ABSENT,
        ready.clone(),
        |_| {},
        move |ev| on_device_class_event(&s, ev),
    ));
    let s = shared.clone();
    let slices = tokio::spawn(watch_if_served(
        Api::<ResourceSlice>::all(client.clone()),
        "resourceslice",
        ABSENT,
        ready.clone(),
        |_| {},
        move |ev| on_resource_slice_event(&s, ev),
    ));
    let s = shared.clone();
    let claims = tokio::spawn(watch_if_served(
        Api::<ResourceClaim>::all(client.clone()),
        "resourceclaim",
        ABSENT,
        ready.clone(),
        |_| {},
        move |ev| on_resource_claim_event(&s, ev),
    ));
    // GA and on in v1.37; older API servers serve the kind in beta versions only, and
    // there devices carry only their slices' taints, as kube-scheduler of that version.
    let s = shared.clone();
    let taint_rules = tokio::spawn(watch_if_served(
        Api::<DeviceTaintRule>::all(client.clone()),
        "devicetaintrule",
        "resource.k8s.io/v1 DeviceTaintRules are not served: devices carry their slices' taints alone",
        ready.clone(),
        |_| {},
        move |ev| on_device_taint_rule_event(&s, ev),
    ));
    vec![classes, slices, claims, taint_rules]
}

fn on_device_class_event(shared: &Shared, change: Change<DeviceClass>) {
    let started = Instant::now();
    let (label, helps) = match &change {
        Change::Apply(_, true) => ("DeviceClassAdd", true),
        Change::Apply(_, false) => ("DeviceClassUpdate", true),
        Change::Delete(_) => ("DeviceClassDelete", false),
    };
    {
        let mut cache = shared.cache();
        let classes = &mut cache.devices_mut().classes;
        match change {
            Change::Apply(c, _) => {
                classes.insert(c.name_any(), c);
            }
            Change::Delete(c) => {
                classes.remove(&c.name_any());
            }
        }
    }
    // kube's DynamicResources registers a class added or updated, not deleted.
    if helps {
        shared.queue.on_event(ClusterEvent::DeviceClassChange);
    }
    handled(label, started);
}

fn on_resource_slice_event(shared: &Shared, change: Change<ResourceSlice>) {
    let started = Instant::now();
    let (label, helps) = match &change {
        Change::Apply(_, true) => ("ResourceSliceAdd", true),
        Change::Apply(_, false) => ("ResourceSliceUpdate", true),
        Change::Delete(_) => ("ResourceSliceDelete", false),
    };
    {
        let mut cache = shared.cache();
        let devices = cache.devices_mut();
        match change {
            Change::Apply(sl, _) => {
                devices.apply_slice(sl);
            }
            Change::Delete(sl) => devices.remove_slice(&sl.name_any()),
        }
    }
    if helps {
        shared.queue.on_event(ClusterEvent::ResourceSliceChange);
    }
    handled(label, started);
}

/// A DeviceTaintRule's taint goes onto the devices it selects, as though their slices
/// carried it (kube's resource slice tracker); a change of some device's taints is those
/// slices' update, so the pods DynamicResources turned back are retried.
fn on_device_taint_rule_event(shared: &Shared, change: Change<DeviceTaintRule>) {
    let started = Instant::now();
    let (name, rule) = match change {
        Change::Apply(r, _) => (r.name_any(), Some(r)),
        Change::Delete(r) => (r.name_any(), None),
    };
    let changed = shared.cache().devices_mut().set_taint_rule(&name, rule);
    // kube-scheduler handles no rule event, only the tracker's slice updates: counted
    // under the same label.
    if changed {
        shared.queue.on_event(ClusterEvent::ResourceSliceChange);
        handled("ResourceSliceUpdate", started);
    }
}

/// A claim into the assume cache; pods waiting at PreEnqueue for it are judged again
/// (kube's pre-queueing hint finds them by its pod-by-claim index), and the pods that
/// DynamicResources turned back are retried.
fn on_resource_claim_event(shared: &Shared, change: Change<ResourceClaim>) {
    let started = Instant::now();
    let claims = &shared.profiles.resource_claims;
    let label = match &change {
        Change::Apply(_, true) => "ResourceClaimAdd",
        Change::Apply(_, false) => "ResourceClaimUpdate",
        Change::Delete(_) => "ResourceClaimDelete",
    };
    let claim = change.object().clone();
    let namespace = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    {
        // See Shared::claim_gates: the claim and the verdicts it changes, as one step.
        let _claim_gates = shared.claim_gates.lock().unwrap_or_else(|e| e.into_inner());
        match change {
            Change::Apply(c, _) => {
                claims.apply(c);
            }
            Change::Delete(c) => {
                claims.delete(&key_of(&*c));
            }
        }
        shared.queue.add_all(regate(shared, |pod| {
            mcsched_engine::dra_state::pod_refers_to(pod, &namespace, &name)
        }));
    }
    shared.queue.on_event(ClusterEvent::ResourceClaimChange);
    handled(label, started);
}

/// The placement policies, both kinds into one set. Where the CRDs are not installed
/// (an agent run without `install`) the kinds count as listed and empty, and are looked
/// for again every 30 s.
fn spawn_policy_watches(
    client: &Client,
    shared: &Arc<Shared>,
    ready: &Ready,
) -> Vec<JoinHandle<()>> {
    let set: Arc<Mutex<mcsched_engine::policies::PolicySet>> = Arc::default();
    let (s, all) = (shared.clone(), set.clone());
    let namespaced = tokio::spawn(watch_if_served(
        Api::<mcsched_shared::policy::PlacementPolicy>::all(client.clone()),
        "placementpolicy",
        "its CRD is not installed: no placement policies until it is",
        ready.clone(),
        |_| {},
        move |ev| publish_policies(&s, &all, |set| set.apply_namespaced(ev)),
    ));
    let s = shared.clone();
    let cluster = tokio::spawn(watch_if_served(
        Api::<mcsched_shared::policy::ClusterPlacementPolicy>::all(client.clone()),
        "clusterplacementpolicy",
        "its CRD is not installed: no placement policies until it is",
        ready.clone(),
        |_| {},
        move |ev| publish_policies(&s, &set, |set| set.apply_cluster(ev)),
    ));
    vec![namespaced, cluster]
}

fn publish_policies(
    shared: &Shared,
    set: &Mutex<mcsched_engine::policies::PolicySet>,
    change: impl FnOnce(&mut mcsched_engine::policies::PolicySet),
) {
    let snapshot = {
        let mut all = set.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut all);
        Arc::new(all.clone())
    };
    shared.cache().set_policies(snapshot);
    shared.queue.on_event(ClusterEvent::PolicyChange);
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
        K: crate::control::watch::Watched,
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
            |o| Selector::Label(Some(o.spec.selector.clone())),
        ),
        spawn::<StatefulSet>(
            client,
            shared,
            ready,
            "statefulset",
            SelectorKind::StatefulSet,
            |o| Selector::Label(Some(o.spec.selector.clone())),
        ),
    ]
}

/// PodGroups in the newest version the API server serves (v1beta1 on v1.37, v1alpha2 on
/// v1.36), v1alpha2 ones read as v1beta1; none served: looked for again every 30 s,
/// and said once why gangs are not scheduled.
async fn watch_pod_groups(client: Client, shared: Arc<Shared>, ready: Ready) {
    let mut ready = ready;
    let mut reported = false;
    let version = loop {
        match served_pod_group_version(&client).await {
            Ok(Some(v)) => break v,
            Ok(None) => {
                if !reported {
                    tracing::info!(
                        kind = "podgroup",
                        "not served: {}; no pod groups until it does",
                        pod_group_versions::none_served()
                    );
                }
            }
            Err(e) => {
                if !reported {
                    tracing::warn!(kind = "podgroup", reason = %e, "not readable: none until the agent may list it");
                }
            }
        }
        if !reported {
            ready.report("podgroup").await;
            ready = ready.detached();
            reported = true;
        }
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    };
    tracing::info!(kind = "podgroup", version = %version.api_version(), "PodGroups served");
    shared.profiles.pod_groups.set_served(Some(version));
    let s = shared.clone();
    match version {
        PodGroupVersion::V1beta1 => {
            watch_kind(
                Api::<PodGroup>::all(client),
                watcher::Config::default(),
                "podgroup",
                ready,
                move |ev| on_pod_group_event(&s, ev),
            )
            .await
        }
        PodGroupVersion::V1alpha2 => {
            watch_kind(
                Api::<PodGroupV1alpha2>::all(client),
                watcher::Config::default(),
                "podgroup",
                ready,
                move |ev| {
                    on_pod_group_event(
                        &s,
                        match ev {
                            Change::Apply(g, new) => {
                                Change::Apply(Arc::new(PodGroup::from((*g).clone())), new)
                            }
                            Change::Delete(g) => {
                                Change::Delete(Arc::new(PodGroup::from((*g).clone())))
                            }
                        },
                    )
                },
            )
            .await
        }
    }
}

/// The newest PodGroup version served, by listing one of each (a 404: not served). A 403
/// is an error whether the version is served or not: the authorizer answers first.
async fn served_pod_group_version(client: &Client) -> Result<Option<PodGroupVersion>, kube::Error> {
    for version in PodGroupVersion::ALL {
        let params = kube::api::ListParams::default().limit(1);
        let listed = match version {
            PodGroupVersion::V1beta1 => Api::<PodGroup>::all(client.clone())
                .list_metadata(&params)
                .await
                .map(|_| ()),
            PodGroupVersion::V1alpha2 => Api::<PodGroupV1alpha2>::all(client.clone())
                .list_metadata(&params)
                .await
                .map(|_| ()),
        };
        match listed {
            Ok(()) => return Ok(Some(version)),
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// A PodGroup appeared, changed or went. Only a new one, or a gang whose minCount changed
/// (mutable in v1beta1), may release the pods that wait for it.
fn on_pod_group_event(shared: &Shared, change: Change<PodGroup>) {
    let started = Instant::now();
    let event = match &change {
        Change::Apply(_, true) => "PodGroupAdd",
        Change::Apply(_, false) => "PodGroupUpdate",
        Change::Delete(_) => "PodGroupDelete",
    };
    apply_pod_group_change(shared, change);
    handled(event, started);
}

/// scheduler_event_handling_duration_seconds under kube's label for the event (its
/// ClusterEvent's: the resource, then the action).
fn handled(event: &str, started: Instant) {
    mcsched_engine::metrics::global().event_handled(event, started.elapsed().as_secs_f64());
}

fn apply_pod_group_change(shared: &Shared, change: Change<PodGroup>) {
    let groups = &shared.profiles.pod_groups;
    match change {
        Change::Apply(group, is_new) => {
            // Its members' gates under the lock their own events judge them under.
            let _gates = shared.gang_gates.lock().unwrap_or_else(|e| e.into_inner());
            let min_changed = groups.set_group(&group);
            if is_new || min_changed {
                shared.queue.add_all(regate_group(shared, &key_of(&*group)));
                shared.queue.on_event(ClusterEvent::PodGroupAdd);
            }
        }
        Change::Delete(group) => groups.remove_group(&key_of(&*group)),
    }
}

/// PreEnqueue again for the gated pods of the group `key` (kube's queueing hints for a
/// new member or PodGroup): each with its new gate, to queue together (kube queues the
/// group as one: no member may start a cycle of the group before the others are in).
fn regate_group(
    shared: &Shared,
    key: &str,
) -> Vec<(Arc<PodInfo>, Option<mcsched_engine::framework::Rejection>)> {
    regate(shared, |pod| {
        mcsched_engine::pod_groups::group_key_of(pod).as_deref() == Some(key)
    })
}

/// PreEnqueue again for the gated pods `which` selects, each with its new gate.
fn regate(
    shared: &Shared,
    which: impl Fn(&Pod) -> bool,
) -> Vec<(Arc<PodInfo>, Option<mcsched_engine::framework::Rejection>)> {
    let mut regated = Vec::new();
    for pod in shared.queue.gated_pods() {
        let object = pod.pod();
        if !which(&object) {
            continue;
        }
        let Some(fw) = shared.profiles.for_pod(&object) else {
            continue;
        };
        let gate = fw.run_pre_enqueue(&object);
        let gate = (!gate.is_success()).then(|| mcsched_engine::framework::Rejection {
            profile: fw.scheduler_name.clone(),
            plugins: vec![gate.plugin],
        });
        if gate.is_none() {
            shared.profiles.nominator.update(pod.clone());
        }
        regated.push((pod, gate));
    }
    regated
}

fn on_node_event(shared: &Shared, change: Change<Node>) {
    let started = Instant::now();
    let label = match &change {
        Change::Apply(_, true) => "NodeAdd",
        Change::Apply(_, false) => "NodeUpdate",
        Change::Delete(_) => "NodeDelete",
    };
    if let Some(event) = watch::apply_node(&mut shared.cache(), change) {
        shared.queue.on_event(event);
    }
    handled(label, started);
}

fn on_pod_event(shared: &Shared, change: Change<Pod>) {
    let on_virtual = change
        .object()
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .and_then(|n| n.strip_prefix(mcsched_shared::keys::VIRTUAL_NODE_PREFIX))
        .map(String::from);
    let started = Instant::now();
    if let Some(event) = apply_pod_change(shared, change) {
        handled(event, started);
    }
    // Only now: pod sync reads the bound pods from the cache, and a wake-up that found
    // the pod still assumed there would leave its copy to the next resync.
    if let Some(cluster) = on_virtual {
        shared.leaves.host_changed(&cluster);
    }
}

/// The pod's change applied, and kube's label for it: an assigned pod's or one this
/// agent's profiles schedule (kube's handlers see no other).
fn apply_pod_change(shared: &Shared, change: Change<Pod>) -> Option<&'static str> {
    match change {
        Change::Apply(pod, is_new) => {
            let id = mcsched_engine::queue::pod_id(&pod);
            let group = mcsched_engine::pod_groups::group_key_of(&pod);
            if !is_unbound(&pod) {
                if group.is_some() {
                    shared
                        .profiles
                        .pod_groups
                        .add_pod(Arc::new(PodInfo::compact(pod.clone())));
                }
                // A pod new to the cache's bound ones is kube's AssignedPodAdd, though the
                // watch saw it before (its binding landed, or it was assumed).
                let event = {
                    let mut cache = shared.cache();
                    let key = key_of(&*pod);
                    let known = cache.pod_info(&key).is_some() && !cache.is_assumed(&key);
                    cache.apply_pod(pod);
                    if known {
                        "AssignedPodUpdate"
                    } else {
                        "AssignedPodAdd"
                    }
                };
                if group.is_some() {
                    // A member bound anywhere may complete the gang whose copies wait.
                    for leaf in shared.leaves.all() {
                        shared.leaves.host_changed(&leaf.name);
                    }
                }
                shared.queue.delete(&id);
                shared.profiles.nominator.delete(&id);
                shared.queue.on_event(if is_new {
                    ClusterEvent::PodAdd
                } else {
                    ClusterEvent::PodUpdate
                });
                return Some(event);
            }
            let fw = shared.profiles.for_pod(&pod)?;
            let event = if is_new {
                "UnscheduledPodAdd"
            } else {
                "UnscheduledPodUpdate"
            };
            if pod.metadata.deletion_timestamp.is_some() {
                shared.queue.delete(&id);
                shared.profiles.nominator.delete(&id);
                return Some(event);
            }
            // A member's gate and its group's are judged and queued under one lock, as the
            // PodGroup's arrival judges them: else a verdict taken before the other came
            // in could be queued after it, and hold a member back for good.
            let _gates = group
                .is_some()
                .then(|| shared.gang_gates.lock().unwrap_or_else(|e| e.into_inner()));
            let with_claims = (pod.spec.as_ref())
                .and_then(|s| s.resource_claims.as_ref())
                .is_some_and(|c| !c.is_empty());
            let _claim_gates =
                with_claims.then(|| shared.claim_gates.lock().unwrap_or_else(|e| e.into_inner()));
            if group.is_some() {
                // A member counts towards its gang's minCount before its own PreEnqueue.
                shared
                    .profiles
                    .pod_groups
                    .add_pod(Arc::new(PodInfo::compact(pod.clone())));
            }
            let gate = fw.run_pre_enqueue(&pod);
            let gate = (!gate.is_success()).then(|| mcsched_engine::framework::Rejection {
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
            match group {
                Some(group) if is_new => {
                    // A new member may complete its gang: the others wait at PreEnqueue or
                    // after a cycle that found too few (kube moves every pod on it). The
                    // ones let through go in at once, this one too.
                    let mut pods = vec![(info, gate)];
                    pods.extend(regate_group(shared, &group));
                    shared.queue.add_all(pods);
                    shared.queue.on_event(ClusterEvent::PodAdd);
                }
                _ => shared.queue.add(info, gate),
            }
            Some(event)
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
            shared
                .profiles
                .pod_groups
                .remove_member(pod.metadata.uid.as_deref().unwrap_or_default());
            shared.cache().remove_pod(&key);
            shared
                .leaves
                .forget_deleted(&key, pod.metadata.uid.as_deref().unwrap_or_default());
            let id = mcsched_engine::queue::pod_id(&pod);
            shared.queue.delete(&id);
            shared.profiles.nominator.delete(&id);
            if was_bound {
                shared.queue.on_event(ClusterEvent::PodDelete);
                Some("AssignedPodDelete")
            } else {
                Some("UnscheduledPodDelete")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{schedule, shared_with};
    use super::*;
    use serde_json::json;

    /// A pod `default/{name}` requesting 1 cpu, changed by the JSON merged into it.
    fn pod(name: &str, extra: serde_json::Value) -> Arc<Pod> {
        let p = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"schedulerName": "mcsched",
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}
        });
        let p = crate::fake_api::merged(p, extra);
        Arc::new(serde_json::from_value(p).expect("pod"))
    }

    fn bound(node: &str) -> serde_json::Value {
        json!({"spec": {"nodeName": node}})
    }

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": {"cpu": "64", "memory": "8Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .expect("node"),
        )
    }

    /// (unschedulable, backoff + active): where the pod that fits nowhere waits.
    fn waiting(shared: &Shared) -> (usize, usize) {
        let q = shared.queue.pending();
        (q.unschedulable, q.backoff + q.active)
    }

    /// A shared state whose one node (4 cpu) cannot take `big` (64 cpu): `big` waits in
    /// unschedulablePods, rejected by NodeResourcesFit.
    async fn with_a_pod_waiting_for_room() -> Arc<Shared> {
        let (shared, _) = shared_with((201, json!({})));
        schedule(&shared, "big", "64", true).await;
        assert_eq!(waiting(&shared), (1, 0));
        shared
    }

    /// A shared state whose profile's DynamicResources reads the claims the watch feeds.
    fn shared_with_claims() -> Arc<Shared> {
        let (client, _) = crate::fake_api::client(|_, _| (201, json!({})));
        let spec = mcsched_engine::config_bridge::default_spec("mcsched").expect("profile");
        let leaves = Arc::new(crate::multicluster::registry::Leaves::new(
            Default::default(),
        ));
        let claims = mcsched_engine::dra_state::ResourceClaims::new();
        let registry = mcsched_engine::plugins::registry_with(
            &Default::default(),
            leaves.clone(),
            mcsched_engine::pod_groups::PodGroups::new(),
            claims.clone(),
        );
        let mut profiles =
            mcsched_engine::profiles::Profiles::build(&[(spec, registry)], 1).expect("profiles");
        profiles.resource_claims = claims;
        let options = super::super::SchedulerOptions {
            parallel_bindings: 1,
            namespace: "mcsched-system".into(),
            initial_backoff: std::time::Duration::from_secs(1),
            max_backoff: std::time::Duration::from_secs(10),
            content_type: mcsched_wire::ContentType::Json,
            watch_content_type: mcsched_wire::ContentType::Json,
        };
        Shared::new(client, profiles, Vec::new(), leaves, &options)
    }

    fn claim(name: &str) -> Arc<ResourceClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                    "resourceVersion": "1"},
                "spec": {"devices": {"requests": []}}
            }))
            .expect("claim"),
        )
    }

    /// A pod naming a claim that does not exist waits at PreEnqueue; that claim's arrival
    /// lets it in, another claim's does not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pod_waiting_for_its_claim_is_queued_when_the_claim_comes() {
        let shared = shared_with_claims();
        let p = pod(
            "p",
            json!({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "mine"}]}}),
        );
        on_pod_event(&shared, Change::Apply(p, true));
        let q = shared.queue.pending();
        assert_eq!((q.gated, q.active), (1, 0));
        on_resource_claim_event(&shared, Change::Apply(claim("theirs"), true));
        assert_eq!(shared.queue.pending().gated, 1, "another claim let it in");
        on_resource_claim_event(&shared, Change::Apply(claim("mine"), true));
        let q = shared.queue.pending();
        assert_eq!((q.gated, q.active), (0, 1));
        assert!(
            shared
                .profiles
                .resource_claims
                .get("default", "mine")
                .is_ok()
        );
        on_resource_claim_event(&shared, Change::Delete(claim("mine")));
        let left = &shared.profiles.resource_claims;
        assert!(left.get("default", "mine").is_err() && left.get("default", "theirs").is_ok());
    }

    /// Classes and slices land in the snapshot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn device_classes_and_slices_land_in_the_snapshot() {
        let shared = shared_with_claims();
        let class: Arc<DeviceClass> =
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "gpu"}})).expect("class"));
        let slice: Arc<ResourceSlice> = Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {"driver": "d",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}}}))
            .expect("slice"),
        );
        on_device_class_event(&shared, Change::Apply(class.clone(), true));
        on_resource_slice_event(&shared, Change::Apply(slice.clone(), true));
        let snap = shared.cache().snapshot();
        assert!(snap.devices.classes.contains_key("gpu"));
        assert!(snap.devices.slices.contains_key("s"));
        on_device_class_event(&shared, Change::Delete(class));
        on_resource_slice_event(&shared, Change::Delete(slice));
        let snap = shared.cache().snapshot();
        assert!(snap.devices.classes.is_empty() && snap.devices.slices.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unbound_pod_of_this_scheduler_is_queued_not_cached() {
        let (shared, _) = shared_with((201, json!({})));
        on_pod_event(&shared, Change::Apply(pod("p", json!({})), true));
        assert_eq!(shared.queue.pending().active, 1);
        assert!(shared.cache().pod_info("default/p").is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unbound_pod_of_another_scheduler_is_neither_queued_nor_cached() {
        let (shared, _) = shared_with((201, json!({})));
        let other = pod("p", json!({"spec": {"schedulerName": "default-scheduler"}}));
        on_pod_event(&shared, Change::Apply(other, true));
        assert_eq!(shared.queue.pending(), Default::default());
        assert!(shared.cache().pod_info("default/p").is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pod_once_bound_is_cached_and_leaves_the_queue() {
        let (shared, _) = shared_with((201, json!({})));
        on_pod_event(&shared, Change::Apply(pod("p", json!({})), true));
        assert_eq!(shared.queue.pending().active, 1);
        on_pod_event(&shared, Change::Apply(pod("p", bound("n1")), false));
        assert_eq!(shared.queue.pending(), Default::default());
        let cached = shared.cache().pod_info("default/p").cloned();
        let pod = cached.expect("cached").pod();
        let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        assert_eq!(on, Some("n1"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bound_pod_of_another_scheduler_is_cached() {
        let (shared, _) = shared_with((201, json!({})));
        let mut theirs = pod("q", bound("n1"));
        Arc::make_mut(&mut theirs)
            .spec
            .as_mut()
            .unwrap()
            .scheduler_name = Some("default-scheduler".into());
        on_pod_event(&shared, Change::Apply(theirs, true));
        assert!(shared.cache().pod_info("default/q").is_some());
        assert_eq!(shared.queue.pending(), Default::default());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gated_pod_waits_gated() {
        let (shared, _) = shared_with((201, json!({})));
        let gated = pod(
            "g",
            json!({"spec": {"schedulingGates": [{"name": "wait"}]}}),
        );
        on_pod_event(&shared, Change::Apply(gated, true));
        let q = shared.queue.pending();
        assert_eq!((q.gated, q.active), (1, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unbound_pod_being_deleted_leaves_the_queue() {
        let (shared, _) = shared_with((201, json!({})));
        on_pod_event(&shared, Change::Apply(pod("p", json!({})), true));
        let deleting = pod(
            "p",
            json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}),
        );
        on_pod_event(&shared, Change::Apply(deleting, false));
        assert_eq!(shared.queue.pending(), Default::default());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deleting_a_bound_pod_frees_its_room_and_retries_pods_waiting_for_room() {
        let shared = with_a_pod_waiting_for_room().await;
        on_pod_event(&shared, Change::Apply(pod("small", bound("n1")), true));
        assert!(shared.cache().pod_info("default/small").is_some());
        on_pod_event(&shared, Change::Delete(pod("small", bound("n1"))));
        assert!(shared.cache().pod_info("default/small").is_none());
        assert_eq!(waiting(&shared), (0, 1), "PodDelete did not move the pod");
    }

    /// A deletion found by a relist carries only metadata: the cache says it was bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bound_pod_deleted_during_a_relist_retries_pods_waiting_for_room() {
        let shared = with_a_pod_waiting_for_room().await;
        on_pod_event(&shared, Change::Apply(pod("small", bound("n1")), true));
        assert_eq!(waiting(&shared), (1, 0));
        let meta_only = Pod {
            metadata: pod("small", json!({})).metadata.clone(),
            ..Default::default()
        };
        on_pod_event(&shared, Change::Delete(Arc::new(meta_only)));
        assert!(shared.cache().pod_info("default/small").is_none());
        assert_eq!(waiting(&shared), (0, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unbound_pods_coming_and_going_retry_nothing() {
        let shared = with_a_pod_waiting_for_room().await;
        on_pod_event(&shared, Change::Apply(pod("other", json!({})), true));
        on_pod_event(&shared, Change::Delete(pod("other", json!({}))));
        assert_eq!(waiting(&shared).0, 1, "an unbound pod freed no room");
    }

    /// NodeResourcesFit registers PodUpdate and PodDelete, not PodAdd: a pod added to a
    /// node takes room, an update may give some back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bound_pod_added_retries_nothing_and_its_update_retries_pods_waiting_for_room() {
        let shared = with_a_pod_waiting_for_room().await;
        on_pod_event(&shared, Change::Apply(pod("small", bound("n1")), true));
        assert_eq!(waiting(&shared), (1, 0), "moved on PodAdd");
        on_pod_event(&shared, Change::Apply(pod("small", bound("n1")), false));
        assert_eq!(waiting(&shared), (0, 1), "not moved on PodUpdate");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_node_is_cached_and_retries_pods_waiting_for_room() {
        let shared = with_a_pod_waiting_for_room().await;
        on_node_event(&shared, Change::Apply(node("n2"), true));
        assert_eq!(shared.cache().node_count(), 2);
        assert_eq!(waiting(&shared), (0, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_updated_node_is_cached_and_retries_pods_waiting_for_room() {
        let shared = with_a_pod_waiting_for_room().await;
        on_node_event(&shared, Change::Apply(node("n1"), false));
        let snapshot = shared.cache().snapshot();
        let n1 = snapshot.get("n1").expect("n1 cached");
        assert_eq!(
            n1.allocatable.milli_cpu, 64_000,
            "the update was not applied"
        );
        assert_eq!(waiting(&shared), (0, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deleted_node_leaves_the_cache_and_retries_nothing() {
        let shared = with_a_pod_waiting_for_room().await;
        on_node_event(&shared, Change::Delete(node("n1")));
        assert_eq!(shared.cache().node_count(), 0);
        assert_eq!(waiting(&shared), (1, 0));
    }
}
