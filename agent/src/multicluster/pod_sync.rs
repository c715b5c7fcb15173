//! Pod sync: each host pod bound to a virtual node has one copy in its leaf (same
//! namespace and name, labelled with the cluster, annotated with the host pod's UID; its
//! leaf UID recorded on the host pod, which alone tells it from a forgery), with
//! the ConfigMaps, Secrets and PVCs it needs; the copy's status is written back; deletion
//! goes both ways. Reconciled from the two caches, so a restart or a new leader picks up
//! where the last one stopped, creating nothing twice and leaving nothing behind.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Pod, PodCondition, PodStatus, Secret,
    ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use mcsched_shared::keys;
use serde_json::json;
use tracing::{debug, info, warn};

use super::cluster::LeafCluster;
use super::dependents::{self, Dep, DepKind, apply_params, owned_meta};
use super::ownership::{self, Verdict};
use super::registry::Leaves;
use crate::control::watch::SharedCache;
use crate::observe::events::EventSink;
use mcsched_engine::leaf::leaf_checks::{Question, Synced, is_ours};
use mcsched_engine::leaf::rescheduling::{self, Avoided};
use mcsched_engine::leaf::transform;

/// What pod sync uses of the host besides its API: the host's cache (pods on the virtual
/// node), whether it is synced yet, the leaves' settings and avoidance, and events.
#[derive(Clone)]
pub struct HostSide {
    pub cache: SharedCache,
    pub synced: Arc<std::sync::atomic::AtomicBool>,
    pub leaves: Arc<Leaves>,
    pub events: EventSink,
    /// Whether this agent leads; checked right before each pod's writes.
    pub leader: tokio::sync::watch::Receiver<bool>,
    pub lease: crate::control::leader::LeaseHealth,
    /// The PodGroups and their members: a gang's copies wait for the whole gang.
    pub pod_groups: Arc<mcsched_engine::pod_groups::PodGroups>,
}

impl HostSide {
    fn cache(&self) -> std::sync::MutexGuard<'_, mcsched_engine::cache::Cache> {
        crate::control::watch::lock(&self.cache)
    }

    /// Fencing: an agent that no longer leads writes nothing, in the host or the leaf.
    fn fence(&self) -> Result<(), SyncError> {
        if crate::control::leader::may_act(&self.leader, &self.lease) {
            Ok(())
        } else {
            Err(SyncError::NotLeader)
        }
    }
}

/// Host pod condition saying the leaf copy exists, and where it runs.
pub const LEAF_POD_CONDITION: &str = "mcsched.io/LeafPod";
/// kube's condition on a pod about to be deleted by a controller (taint manager, PodGC).
const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// Periodic reconcile, for what no watch event announces.
const RESYNC: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Transform(#[from] transform::TransformError),
    #[error("no longer the leader: nothing written")]
    NotLeader,
    /// The leaf has an object of that name that mcsched did not create (or another host
    /// did): it is neither used nor touched, and the pod is not placed there.
    #[error("leaf has a {kind} {object} that this host's mcsched did not create; it is left alone")]
    Clash { kind: &'static str, object: String },
    /// The leaf's admin has not granted the namespace to mcsched.
    #[error(
        "leaf has not granted namespace {namespace} to mcsched (kubectl mcsched join cluster ... --namespaces ...,{namespace})"
    )]
    NotGranted { namespace: String },
    /// The leaf's admission (ResourceQuota, LimitRange, a webhook) refused the copy: the
    /// leaf check did not know yet, or it raced with another creation there.
    #[error("leaf refused pod {object}: {reason}")]
    AdmissionRefused { object: String, reason: String },
    /// The leaf has no ServiceAccount of the name the pod runs as, and its admin has not
    /// let mcsched create one there.
    #[error(
        "leaf has no ServiceAccount {object} and mcsched may not create it (kubectl mcsched join cluster ... --service-accounts)"
    )]
    NoServiceAccount { object: String },
    /// What the pod refers to is missing on the host: the copy waits, as a kubelet waits.
    #[error("{kind} {object} not found on the host; the leaf copy waits for it")]
    MissingOnHost { kind: &'static str, object: String },
    /// The pod's policy's overrides for this leaf cannot apply to the copy.
    #[error("{policy} cannot override the copy: {source}")]
    Override {
        policy: String,
        #[source]
        source: mcsched_shared::overrides::OverrideError,
    },
}

/// The overrides of `pod`'s policy for `leaf`, with the policy's reference: what the leaf
/// check applied when it sent the pod there.
fn overrides_for(
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
) -> Option<(String, Vec<mcsched_shared::overrides::ClusterOverride>)> {
    let cache = host_side.cache();
    let policy = cache.policies().for_pod(&pod.metadata)?;
    let overrides = policy.overrides()?;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())?;
    let labels = cache.labels_of_node(node).unwrap_or_default();
    let targeted: Vec<_> = overrides
        .iter()
        .filter(|o| o.targets(&leaf.name, &labels))
        .cloned()
        .collect();
    (!targeted.is_empty()).then(|| (policy.reference.clone(), targeted))
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A 403 that RBAC gave ("User ... cannot create resource ..."), not admission.
fn is_rbac_denial(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 && s.message.contains("cannot create resource"))
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SyncError {
    let what = what.into();
    move |source| SyncError::Api { what, source }
}

/// Keeps `leaf`'s pods in step with the host pods on its virtual node while leading.
pub async fn run(
    host: Client,
    host_side: HostSide,
    leaf: Arc<LeafCluster>,
    mut leader: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = leaf.sync_wake.notified() => {},
            _ = tokio::time::sleep(RESYNC) => {},
            r = leader.changed() => if r.is_err() { return },
        }
        let ready = *leader.borrow()
            && host_side.synced.load(std::sync::atomic::Ordering::Acquire)
            && leaf.is_synced();
        if ready {
            reconcile(&host, &host_side, &leaf).await;
        }
    }
}

/// The host pods bound (not merely assumed) to the leaf's virtual node, compact: each is
/// decoded when its turn comes, outside the cache's lock.
fn host_pods(
    host_side: &HostSide,
    node: &str,
) -> BTreeMap<String, Arc<mcsched_engine::snapshot::PodInfo>> {
    let mut cache = host_side.cache();
    let snapshot = cache.snapshot();
    let Some(info) = snapshot.get(node) else {
        return BTreeMap::new();
    };
    info.pods
        .iter()
        .filter(|p| !cache.is_assumed(&p.key))
        .map(|p| (p.key.clone(), p.clone()))
        .collect()
}

async fn reconcile(host: &Client, host_side: &HostSide, leaf: &LeafCluster) {
    let node = keys::virtual_node_name(&leaf.name);
    let hosts = host_pods(host_side, &node);
    let copies = leaf.managed();
    {
        let host_uids = hosts.values().map(|i| i.uid.as_str()).collect();
        let leaf_uids = copies
            .values()
            .filter_map(|c| c.metadata.uid.as_deref())
            .collect();
        leaf.ownership.retain(&host_uids, &leaf_uids);
    }
    let is_forged = |c: &Pod| {
        c.metadata
            .uid
            .as_deref()
            .is_some_and(|u| leaf.ownership.is_forged(u))
    };
    let mut refs = HashSet::new();
    for (key, info) in &hosts {
        let pod = info.pod();
        refs.extend(dependents::references(&pod));
        if let Err(e) = sync_one(host, host_side, leaf, &pod, copies.get(key)).await {
            if matches!(e, SyncError::NotLeader) {
                return;
            }
            warn!(cluster = %leaf.name, pod = %key, error = %e, "pod sync failed; retrying");
        }
    }
    let host_has_claim = |key: &str| host_side.cache().volumes.claims.contains_key(key);
    let may_write = || host_side.fence().is_ok();
    let follow = dependents::Follow {
        host,
        leaf,
        objects: &host_side.leaves.host_objects,
        host_has_claim: &host_has_claim,
        grace: host_side.leaves.settings.unused_copy_grace,
        may_write: &may_write,
        // A copy whose host pod is gone may still use what it refers to until it is.
        // A forged pod is not one of them.
        complete: copies
            .iter()
            .all(|(k, c)| hosts.contains_key(k) || is_forged(c)),
    };
    if let Err(e) = dependents::follow(&follow, &refs).await {
        if matches!(e, dependents::FollowError::NotLeader) {
            return;
        }
        warn!(cluster = %leaf.name, error = %e, "keeping leaf copies of ConfigMaps, Secrets and claims in step failed; retrying");
    }
    for (key, copy) in &copies {
        if hosts.contains_key(key) || copy.metadata.deletion_timestamp.is_some() || is_forged(copy)
        {
            continue;
        }
        // A stale cache of an old leader would take the new leader's copies for orphans.
        if host_side.fence().is_err() {
            return;
        }
        match forged_orphan(host, host_side, leaf, copy).await {
            Ok(false) => {}
            Ok(true) => continue,
            Err(e) => {
                warn!(cluster = %leaf.name, pod = %key, error = %e, "cannot tell whether a leaf pod without a host pod is this host's; retrying");
                continue;
            }
        }
        info!(cluster = %leaf.name, pod = %key, "deleting leaf pod without a host pod");
        if let Err(e) = delete_copy(leaf, copy, None).await {
            warn!(cluster = %leaf.name, pod = %key, error = %e, "deleting orphan failed");
        }
    }
}

/// Whether `copy`, a marked leaf pod without a host pod on the virtual node, is forged:
/// the host pod it names may still be there, terminal (the host cache holds no terminal
/// pods) — e.g. failed because its copy was replaced — with a record naming another leaf
/// pod. A copy whose host pod is gone, or replaced by a pod of the same name, cannot be
/// told from a forged one and goes as an orphan: deleting it is what keeps a StatefulSet
/// pod force-deleted on the host from running twice.
async fn forged_orphan(
    host: &Client,
    host_side: &HostSide,
    leaf: &LeafCluster,
    copy: &Pod,
) -> Result<bool, SyncError> {
    let ns = copy.metadata.namespace.clone().unwrap_or_default();
    let name = copy.metadata.name.clone().unwrap_or_default();
    let Some(named) = ownership::names_host_pod(copy) else {
        return Ok(false);
    };
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), &ns);
    let found = host_pods
        .get_opt(&name)
        .await
        .map_err(api_err(format!("reading host pod {ns}/{name}")))?;
    let Some(pod) = found.filter(|p| p.metadata.uid.as_deref() == Some(named)) else {
        return Ok(false);
    };
    match ownership::judge(&pod, copy, None, false) {
        Verdict::Forged { recorded } => {
            report_forged(host_side, leaf, &pod, copy, recorded.as_deref());
            Ok(true)
        }
        _ => Ok(false),
    }
}

fn condition<'a>(status: Option<&'a PodStatus>, type_: &str) -> Option<&'a PodCondition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

async fn sync_one(
    host: &Client,
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
    copy: Option<&Arc<Pod>>,
) -> Result<(), SyncError> {
    host_side.fence()?;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), &ns);
    // Whether a leaf pod with this host's marks under the pod's name is its copy: by the
    // UID recorded on the host pod, never by the marks alone (see `ownership`).
    let judge = |c: &Pod| {
        let forged = c
            .metadata
            .uid
            .as_deref()
            .is_some_and(|u| leaf.ownership.is_forged(u));
        ownership::judge(pod, c, leaf.ownership.unrecorded(&uid).as_deref(), forged)
    };
    // The leaf's own answer, not a watch gap: the marked pod under the name, if any.
    let read_leaf = || async {
        let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
        let there = leaf_pods
            .get_opt(&name)
            .await
            .map_err(api_err(format!("reading leaf pod {ns}/{name}")))?;
        Ok::<_, SyncError>(there.filter(|c| is_ours(&c.metadata, &leaf.name, &leaf.host_id)))
    };
    let had_copy = condition(pod.status.as_ref(), LEAF_POD_CONDITION).is_some();
    if pod.metadata.deletion_timestamp.is_some() {
        // As a node partition in Kubernetes: the host pod stays Terminating until its leaf
        // confirms the copy is gone (or an operator force-deletes it), so a StatefulSet
        // never runs two copies; Deployments fail over through their ReplicaSets.
        if !leaf.is_ready() {
            debug!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf not answering; the host pod stays Terminating");
            return Ok(());
        }
        let grace = pod.metadata.deletion_grace_period_seconds;
        let there = match copy {
            Some(c) if matches!(judge(c), Verdict::Copy | Verdict::Adopt) => Some((**c).clone()),
            _ => read_leaf().await?,
        };
        if let Some(c) = there {
            match judge(&c) {
                Verdict::Copy | Verdict::Adopt => {
                    if c.metadata.deletion_timestamp.is_none() {
                        delete_copy(leaf, &c, grace).await?;
                    }
                    return Ok(());
                }
                // Not this pod's copy: left as it is, and this pod's copy is gone.
                Verdict::Forged { recorded } => {
                    report_forged(host_side, leaf, pod, &c, recorded.as_deref());
                }
                Verdict::Earlier => {}
            }
        }
        // No kubelet will finish this deletion: the leaf copy is gone, so do it.
        delete_host_pod_now(&host_pods, &name, &uid)
            .await
            .map_err(api_err(format!(
                "finishing deletion of host pod {ns}/{name}"
            )))?;
        return Ok(());
    }
    let status = pod.status.as_ref();
    match copy {
        None if had_copy => {
            // The leaf's watch may not show a copy created a moment ago: the leaf's API
            // server answers for it before the pod is given up.
            if let Some(c) = read_leaf().await? {
                match judge(&c) {
                    Verdict::Copy | Verdict::Adopt => return Ok(()),
                    Verdict::Forged { recorded } => {
                        return forged(host_side, leaf, &host_pods, pod, &c, recorded).await;
                    }
                    Verdict::Earlier => {}
                }
            }
            // The copy existed and is gone without the host asking: the pod is lost.
            if status.and_then(|s| s.phase.as_deref()) != Some("Failed") {
                info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf pod vanished; host pod failed");
                let message = format!("the pod's copy in leaf cluster {} was deleted", leaf.name);
                fail_host_pod(&host_pods, &name, "LeafPodDeleted", &message).await?;
            }
            Ok(())
        }
        None => {
            if let Some(reason) = super::gang_hold::held(&host_side.pod_groups, pod) {
                debug!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), %reason, "leaf copy held");
                return Ok(());
            }
            let placed = match create_copy(host, host_side, leaf, pod).await {
                Ok(p) => p,
                Err(e @ SyncError::MissingOnHost { .. }) => {
                    warn_event(host_side, pod, "LeafPodWaiting", "Syncing", e.to_string());
                    return Err(e);
                }
                Err(
                    e @ (SyncError::Clash { .. }
                    | SyncError::NotGranted { .. }
                    | SyncError::NoServiceAccount { .. }
                    | SyncError::AdmissionRefused { .. }),
                ) => {
                    return clash(host_side, leaf, &host_pods, pod, e).await;
                }
                Err(e) => return Err(e),
            };
            let found = match placed {
                Placed::Created(leaf_uid) => {
                    // Remembered until recorded: a retry records this UID, not whatever
                    // holds the name by then.
                    leaf.ownership.created(&uid, &leaf_uid);
                    let mut new = pod.status.clone().unwrap_or_default();
                    set_leaf_condition(&mut new, leaf, None);
                    return write_host_status(leaf, &host_pods, pod, &new, Some(&leaf_uid)).await;
                }
                Placed::Found(c) => c,
            };
            // A pod of this host's marks already holds the name (an earlier run's copy
            // whose watch event has not come yet, or not).
            match judge(&found) {
                Verdict::Copy | Verdict::Adopt => {
                    let mut new = pod.status.clone().unwrap_or_default();
                    set_leaf_condition(&mut new, leaf, None);
                    let leaf_uid = found.metadata.uid.clone().unwrap_or_default();
                    write_host_status(leaf, &host_pods, pod, &new, Some(&leaf_uid)).await
                }
                Verdict::Forged { recorded } => {
                    forged(host_side, leaf, &host_pods, pod, &found, recorded).await
                }
                // Deleted when the watch shows it; the new copy comes after.
                Verdict::Earlier => Ok(()),
            }
        }
        Some(c) => match judge(c) {
            Verdict::Earlier => {
                // A copy of an earlier pod of the same name: it goes before the new one
                // comes.
                if c.metadata.deletion_timestamp.is_none() {
                    delete_copy(leaf, c, None).await?;
                }
                Ok(())
            }
            Verdict::Forged { recorded } => {
                forged(host_side, leaf, &host_pods, pod, c, recorded).await
            }
            verdict @ (Verdict::Copy | Verdict::Adopt) => {
                let mut new = transform::host_status(&c.status.clone().unwrap_or_default(), status);
                let leaf_node = c.spec.as_ref().and_then(|s| s.node_name.clone());
                set_leaf_condition(&mut new, leaf, leaf_node.as_deref());
                let old = status.cloned().unwrap_or_default();
                let leaf_uid = c.metadata.uid.clone().unwrap_or_default();
                // Recorded when adopted, or when this agent's record write failed.
                let record = (ownership::recorded(pod) != Some(leaf_uid.as_str()))
                    .then_some(leaf_uid.as_str());
                if verdict == Verdict::Adopt {
                    info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), leaf_uid = %leaf_uid, "no copy UID recorded (created before records, or just before a crash): the copy found is adopted and recorded");
                }
                if record.is_some()
                    || transform::status_differs(&new, &old)
                    || condition(Some(&new), LEAF_POD_CONDITION).map(|c| &c.message)
                        != condition(Some(&old), LEAF_POD_CONDITION).map(|c| &c.message)
                {
                    debug!(pod = %format!("{ns}/{name}"), phase = ?new.phase, "leaf status to host");
                    write_host_status(leaf, &host_pods, pod, &new, record).await?;
                }
                let settings = host_side.leaves.settings;
                match rescheduling::pending_for(c) {
                    Some(waited) if waited >= settings.pending_timeout => {
                        take_back(host_side, leaf, &host_pods, pod, c, waited).await
                    }
                    _ => Ok(()),
                }
            }
        },
    }
}

/// Reports a forged leaf pod on its host pod, once per leaf UID: a Warning event, a log
/// line and `mcsched_leaf_forged_copies_total`.
fn report_forged(
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
    forged: &Pod,
    recorded: Option<&str>,
) {
    let leaf_uid = forged.metadata.uid.clone().unwrap_or_default();
    if !leaf.ownership.forged(&leaf_uid) {
        return;
    }
    mcsched_engine::metrics::global().leaf_forged_copy(&leaf.name);
    let object = format!(
        "{}/{}",
        forged.metadata.namespace.as_deref().unwrap_or_default(),
        forged.metadata.name.as_deref().unwrap_or_default()
    );
    let expected = match recorded {
        Some(r) => format!("the copy mcsched created has UID {r}"),
        None => "no copy UID is recorded on this pod".to_string(),
    };
    warn!(cluster = %leaf.name, pod = %object, leaf_uid = %leaf_uid, recorded = ?recorded, "forged leaf copy: left alone, nothing of it written to the host");
    warn_event(
        host_side,
        pod,
        "ForgedLeafCopy",
        "Syncing",
        format!(
            "leaf cluster {}: pod {object} (UID {leaf_uid}) carries this host's marks but is not this pod's copy ({expected}); it is neither adopted nor deleted, and nothing of it is written to this pod",
            leaf.name
        ),
    );
}

/// A forged pod holds the name of `pod`'s copy. The forged pod is never adopted, deleted
/// or read. Where `pod` had a copy, that copy is gone: the pod fails as for a copy
/// deleted in the leaf (`LeafPodReplaced`), so its controller replaces it and Services
/// drop it; where it never had one, the name is taken as by any pod that is not this
/// host's (a clash: a pod with a controller goes elsewhere, a bare pod waits).
async fn forged(
    host_side: &HostSide,
    leaf: &LeafCluster,
    host_pods: &Api<Pod>,
    pod: &Pod,
    forged: &Pod,
    recorded: Option<String>,
) -> Result<(), SyncError> {
    report_forged(host_side, leaf, pod, forged, recorded.as_deref());
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let had_copy =
        recorded.is_some() || condition(pod.status.as_ref(), LEAF_POD_CONDITION).is_some();
    if !had_copy {
        let e = SyncError::Clash {
            kind: "Pod",
            object: format!("{ns}/{name}"),
        };
        return clash(host_side, leaf, host_pods, pod, e).await;
    }
    host_side.fence()?;
    if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") {
        return Ok(());
    }
    let message = format!(
        "the pod's copy in leaf cluster {} was deleted and pod {ns}/{name} there (UID {}) is not it",
        leaf.name,
        forged.metadata.uid.as_deref().unwrap_or_default()
    );
    fail_host_pod(host_pods, &name, "LeafPodReplaced", &message).await
}

/// Fails a host pod whose copy is gone, as a kubelet fails a pod it lost: Failed, not
/// Ready (terminal pods leave every EndpointSlice).
async fn fail_host_pod(
    host_pods: &Api<Pod>,
    name: &str,
    reason: &str,
    message: &str,
) -> Result<(), SyncError> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let not = |type_: &str| json!({"type": type_, "status": "False", "reason": reason, "lastTransitionTime": now});
    let patch = json!({"status": {
        "phase": "Failed",
        "reason": reason,
        "message": message,
        // Strategic merge keys conditions by type: the others stay.
        "conditions": [not("Ready"), not("ContainersReady")],
    }});
    host_pods
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(api_err(format!("failing host pod {name}")))?;
    Ok(())
}

/// A copy Pending too long is taken back: a pod with a controller is deleted so that its
/// owner recreates it elsewhere, with this leaf avoided for the owner; a bare pod is
/// deleted as Kubernetes deletes a bare pod on a lost node (nothing recreates it, and
/// mcsched creates no pods). Either way a Warning event and a DisruptionTarget condition
/// say why before the pod goes.
async fn take_back(
    host_side: &HostSide,
    leaf: &LeafCluster,
    host_pods: &Api<Pod>,
    pod: &Pod,
    copy: &Pod,
    waited: Duration,
) -> Result<(), SyncError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let settings = host_side.leaves.settings;
    let waited_s = waited.as_secs();
    let note = if rescheduling::has_controller(pod) {
        let backoff = host_side.leaves.avoidance.avoid(
            rescheduling::owner_key(pod),
            &leaf.name,
            Avoided::Pending,
            settings.avoid_for,
        );
        format!(
            "pod stayed Pending in leaf cluster {} for {waited_s}s; taken back so that its owner recreates it elsewhere; {} is avoided for the owner's pods for {}s",
            leaf.name,
            leaf.name,
            backoff.as_secs()
        )
    } else {
        format!(
            "pod stayed Pending in leaf cluster {} for {waited_s}s; deleted, as a bare pod on a lost node is: it has no controller to recreate it elsewhere",
            leaf.name
        )
    };
    host_side.fence()?;
    info!(cluster = %leaf.name, pod = %name, "taking a pod back from its leaf");
    warn_event(
        host_side,
        pod,
        "LeafPodPending",
        "Rescheduling",
        note.clone(),
    );
    disruption_target(host_pods, &name, "LeafPodPending", &note).await;
    delete_copy(leaf, copy, Some(0)).await?;
    delete_host_pod_now(host_pods, &name, &uid)
        .await
        .map_err(api_err(format!("deleting host pod {name}")))?;
    let why = format!("Pending there for {waited_s}s");
    super::gang_hold::take_back_gang(
        &host_side.pod_groups,
        &host_side.events,
        host_pods,
        pod,
        &leaf.name,
        &why,
    )
    .await;
    Ok(())
}

fn warn_event(
    host_side: &HostSide,
    pod: &Pod,
    reason: &'static str,
    action: &'static str,
    note: String,
) {
    let scheduler = mcsched_shared::pod::scheduler_name(pod).to_string();
    host_side
        .events
        .send(crate::observe::events::Message::Event {
            reporting_controller: scheduler,
            regarding: crate::observe::events::object_ref(pod),
            type_: crate::observe::events::EventType::Warning,
            reason,
            action,
            note,
        });
}

/// The leaf holds an object of a name the pod needs that is not this host's, has not
/// granted the pod's namespace, or its admission refused the copy: nothing is created
/// there. A pod with a controller goes, and the leaf is avoided for its owner for a
/// back-off that doubles at each refusal, so the owner's new pod goes elsewhere; a bare
/// pod waits with a Warning event, as mcsched deletes no user's pod for a conflict it did
/// not cause.
async fn clash(
    host_side: &HostSide,
    leaf: &LeafCluster,
    host_pods: &Api<Pod>,
    pod: &Pod,
    e: SyncError,
) -> Result<(), SyncError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if !rescheduling::has_controller(pod) {
        warn_event(
            host_side,
            pod,
            "LeafRefused",
            "Syncing",
            format!("leaf cluster {}: {e}", leaf.name),
        );
        return Err(e);
    }
    host_side.fence()?;
    // The leaf check may not see why (an admission webhook or policy it cannot judge):
    // without avoiding the leaf the owner's next pod could be sent back to it.
    let backoff = host_side.leaves.avoidance.avoid(
        rescheduling::owner_key(pod),
        &leaf.name,
        Avoided::Refused,
        host_side.leaves.settings.avoid_for,
    );
    let note = format!(
        "leaf cluster {}: {e}; the pod is deleted so that its owner recreates it elsewhere; {} is avoided for the owner's pods for {}s",
        leaf.name,
        leaf.name,
        backoff.as_secs()
    );
    warn_event(host_side, pod, "LeafRefused", "Rescheduling", note.clone());
    disruption_target(host_pods, &name, "LeafRefused", &note).await;
    delete_host_pod_now(host_pods, &name, &uid)
        .await
        .map_err(api_err(format!("deleting host pod {name}")))?;
    super::gang_hold::take_back_gang(
        &host_side.pod_groups,
        &host_side.events,
        host_pods,
        pod,
        &leaf.name,
        "refused there",
    )
    .await;
    Ok(())
}

/// kube's DisruptionTarget condition, saying why a pod is about to go.
async fn disruption_target(host_pods: &Api<Pod>, name: &str, reason: &str, note: &str) {
    let condition = json!({"status": {"conditions": [{
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": reason,
        "message": note,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    // Strategic merge keys conditions by type: the others stay.
    if let Err(e) = host_pods
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(condition))
        .await
    {
        warn!(pod = %name, error = %e, "cannot set the DisruptionTarget condition");
    }
}

fn set_leaf_condition(status: &mut PodStatus, leaf: &LeafCluster, leaf_node: Option<&str>) {
    let message = match leaf_node {
        Some(n) => format!("running in leaf cluster {} on node {n}", leaf.name),
        None => format!("created in leaf cluster {}", leaf.name),
    };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let existing = conditions
        .iter()
        .find(|c| c.type_ == LEAF_POD_CONDITION)
        .cloned();
    conditions.retain(|c| c.type_ != LEAF_POD_CONDITION);
    conditions.push(PodCondition {
        type_: LEAF_POD_CONDITION.into(),
        status: "True".into(),
        reason: Some("LeafPodCreated".into()),
        message: Some(message),
        last_transition_time: existing.and_then(|c| c.last_transition_time).or_else(|| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ))
        }),
        ..Default::default()
    });
}

/// Writes `status` to the host pod and, with `record`, the UID of its leaf copy.
/// Both go through `pods/status` in one patch — the agent may patch a pod's status (as
/// kube-scheduler) but not the pod, and the status strategy keeps metadata changes — so a
/// host pod never shows a copy without its record. The pod's UID in the patch makes it
/// fail against another pod of the same name.
async fn write_host_status(
    leaf: &LeafCluster,
    pods: &Api<Pod>,
    pod: &Pod,
    status: &PodStatus,
    record: Option<&str>,
) -> Result<(), SyncError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let patch = match record {
        Some(r) => json!({
            "metadata": {"uid": uid, "annotations": {keys::LEAF_POD_UID_ANNOTATION: r}},
            "status": status,
        }),
        None => json!({ "status": status }),
    };
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(api_err(format!("writing status of host pod {name}")))?;
    if record.is_some() {
        leaf.ownership.recorded(&uid);
    }
    Ok(())
}

/// The host pod's `deletionGracePeriodSeconds` (an int64) as the delete option kube's
/// client takes (a u32): saturated, never truncated — 2^32 must not become 0, an
/// immediate kill.
fn grace_seconds(grace: i64) -> u32 {
    u32::try_from(grace.max(0)).unwrap_or(u32::MAX)
}

async fn delete_copy(leaf: &LeafCluster, copy: &Pod, grace: Option<i64>) -> Result<(), SyncError> {
    let ns = copy.metadata.namespace.clone().unwrap_or_default();
    let name = copy.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
    let dp = DeleteParams {
        grace_period_seconds: grace.map(grace_seconds),
        preconditions: copy.metadata.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(()),
        Err(e) => Err(api_err(format!("deleting leaf pod {ns}/{name}"))(e)),
    }
}

/// Whether the leaf already has `kind` `ns/name`: not at all, as this host's copy, or as
/// someone else's object (a clash: never used, changed or deleted).
async fn leaf_object<K>(
    leaf: &LeafCluster,
    ns: &str,
    name: &str,
    kind: Synced,
) -> Result<bool, SyncError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(leaf.client.clone(), ns);
    let found = api
        .get_metadata_opt(name)
        .await
        .map_err(api_err(format!("reading leaf {} {ns}/{name}", kind.kind())))?;
    match found {
        None => Ok(false),
        Some(m) if is_ours(&m.metadata, &leaf.name, &leaf.host_id) => Ok(true),
        Some(_) => {
            leaf.checks.learned(
                Question::Foreign(kind, ns.to_string(), name.to_string()),
                true,
            );
            Err(SyncError::Clash {
                kind: kind.kind(),
                object: format!("{ns}/{name}"),
            })
        }
    }
}

/// A host object the copy needs is missing, unless every reference to it is optional.
fn missing(
    deps: &transform::Dependencies,
    kind: &'static str,
    ns: &str,
    name: &str,
) -> Result<(), SyncError> {
    if deps.is_optional(kind, name) {
        Ok(())
    } else {
        Err(SyncError::MissingOnHost {
            kind,
            object: format!("{ns}/{name}"),
        })
    }
}

/// What holds the copy's name in the leaf after [`create_copy`].
enum Placed {
    /// The copy, created now: its UID, as the leaf's API server gave it.
    Created(String),
    /// A pod with this host's marks that was there already (metadata only).
    Found(Box<Pod>),
}

/// The namespace, the objects the pod refers to, then the pod. Nothing in the leaf that
/// is not this host's is used, overwritten or adopted; nothing missing on the host is
/// replaced by the leaf's object of the same name.
async fn create_copy(
    host: &Client,
    host_side: &HostSide,
    leaf: &LeafCluster,
    pod: &Pod,
) -> Result<Placed, SyncError> {
    let agent_namespace = host_side.leaves.agent_namespace();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespaces: Api<Namespace> = Api::all(leaf.client.clone());
    let present = namespaces
        .get_metadata_opt(&ns)
        .await
        .map_err(api_err(format!("reading leaf namespace {ns}")))?;
    if present.is_none() {
        // Only a leaf that granted all namespaces lets the account create one.
        let created = Namespace {
            metadata: owned_meta(leaf, &ns, None, &ObjectMeta::default()),
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &created).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(409) => {}
            Err(e) if code(&e) == Some(403) => return Err(not_granted(leaf, &ns)),
            Err(e) => return Err(api_err(format!("creating leaf namespace {ns}"))(e)),
        }
    }
    let deps = transform::dependencies(pod);
    let overrides = overrides_for(host_side, leaf, pod);
    let targeted: Vec<_> = overrides.iter().flat_map(|(_, o)| o.iter()).collect();
    let host_cms: Api<ConfigMap> = Api::namespaced(host.clone(), &ns);
    let leaf_cms: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), &ns);
    for cm_name in &deps.config_maps {
        let Some(cm) = host_cms
            .get_opt(cm_name)
            .await
            .map_err(api_err(format!("reading host ConfigMap {ns}/{cm_name}")))?
        else {
            missing(&deps, "ConfigMap", &ns, cm_name)?;
            continue;
        };
        leaf_object::<ConfigMap>(leaf, &ns, cm_name, Synced::ConfigMap).await?;
        leaf_cms
            .patch(
                cm_name,
                &apply_params(),
                &Patch::Apply(&dependents::config_map_copy(leaf, &cm)),
            )
            .await
            .map_err(api_err(format!(
                "copying ConfigMap {ns}/{cm_name} to the leaf"
            )))?;
        leaf.copied.copied(
            Dep::new(DepKind::ConfigMap, &ns, cm_name),
            cm.metadata.resource_version,
        );
    }
    let host_secrets: Api<Secret> = Api::namespaced(host.clone(), &ns);
    let leaf_secrets: Api<Secret> = Api::namespaced(leaf.client.clone(), &ns);
    for s_name in &deps.secrets {
        let Some(s) = host_secrets.get_opt(s_name).await.map_err(|e| {
            // The install grants Secrets per namespace only: say how to grant this one.
            let hint = if code(&e) == Some(403) {
                format!(
                    " (let the agent read Secrets in {ns}: {})",
                    mcsched_engine::leaf::grants::grant_command(
                        mcsched_engine::leaf::grants::Copied::Secrets,
                        &ns,
                        agent_namespace
                    )
                )
            } else {
                String::new()
            };
            api_err(format!("reading host Secret {ns}/{s_name}{hint}"))(e)
        })?
        else {
            missing(&deps, "Secret", &ns, s_name)?;
            continue;
        };
        if s.type_.as_deref() == Some("kubernetes.io/service-account-token") {
            continue;
        }
        leaf_object::<Secret>(leaf, &ns, s_name, Synced::Secret).await?;
        leaf_secrets
            .patch(
                s_name,
                &apply_params(),
                &Patch::Apply(&dependents::secret_copy(leaf, &s)),
            )
            .await
            .map_err(api_err(format!("copying Secret {ns}/{s_name} to the leaf")))?;
        leaf.copied.copied(
            Dep::new(DepKind::Secret, &ns, s_name),
            s.metadata.resource_version,
        );
    }
    let host_claims: Api<PersistentVolumeClaim> = Api::namespaced(host.clone(), &ns);
    let leaf_claims: Api<PersistentVolumeClaim> = Api::namespaced(leaf.client.clone(), &ns);
    for c_name in &deps.claims {
        let Some(c) = host_claims
            .get_opt(c_name)
            .await
            .map_err(api_err(format!("reading host PVC {ns}/{c_name}")))?
        else {
            return Err(SyncError::MissingOnHost {
                kind: "PersistentVolumeClaim",
                object: format!("{ns}/{c_name}"),
            });
        };
        // This host's copy from an earlier pod keeps its data: reused as it is.
        leaf.copied
            .copied(Dep::new(DepKind::Claim, &ns, c_name), None);
        if leaf_object::<PersistentVolumeClaim>(leaf, &ns, c_name, Synced::Claim).await? {
            continue;
        }
        let spec = c.spec.unwrap_or_default();
        let copy = PersistentVolumeClaim {
            metadata: owned_meta(
                leaf,
                c_name,
                Some(&ns),
                &ObjectMeta {
                    labels: c.metadata.labels,
                    uid: c.metadata.uid,
                    ..Default::default()
                },
            ),
            spec: Some(transform::leaf_claim_spec(&spec)).map(|mut s| {
                if let Some(class) = s.storage_class_name.take() {
                    let leaf_class =
                        mcsched_shared::overrides::storage_class(&targeted, &class).to_string();
                    s.storage_class_name = Some(leaf_class);
                }
                s
            }),
            status: None,
        };
        match leaf_claims.create(&PostParams::default(), &copy).await {
            Ok(_) => {}
            // Created meanwhile: whose it is decides, on the next pass.
            Err(e) if code(&e) == Some(409) => {
                leaf_object::<PersistentVolumeClaim>(leaf, &ns, c_name, Synced::Claim).await?;
            }
            Err(e) => return Err(api_err(format!("creating leaf PVC {ns}/{c_name}"))(e)),
        }
        // From now on the claim's data lives in this leaf: LeafNodeVolumeBinding keeps
        // the claim's pods there.
        let mark =
            json!({"metadata": {"annotations": {keys::BOUND_IN_CLUSTER_ANNOTATION: leaf.name}}});
        host_claims
            .patch(c_name, &PatchParams::default(), &Patch::Merge(&mark))
            .await
            .map_err(api_err(format!("marking host PVC {ns}/{c_name}")))?;
    }
    if let Some(sa) = transform::service_account(pod) {
        ensure_service_account(leaf, pod, &ns, sa).await?;
    }
    let mut copy = transform::leaf_pod(pod, &leaf.name, &leaf.host_id)?;
    if let Some((policy, _)) = &overrides {
        mcsched_shared::overrides::apply(&mut copy, &targeted).map_err(|source| {
            SyncError::Override {
                policy: policy.clone(),
                source,
            }
        })?;
    }
    keep_priority_class(host_side, leaf, pod, &mut copy).await;
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
    match super::copy_create::create(host, &leaf.client, &ns, &name, &copy).await {
        Ok(created) => {
            info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf pod created");
            Ok(Placed::Created(created.metadata.uid.unwrap_or_default()))
        }
        // Created by an earlier run whose watch event has not arrived yet, or a pod of
        // the same name that is not this host's (or only looks it: judged by the caller).
        Err(e) if code(&e) == Some(409) => {
            let there = leaf_pods
                .get_metadata_opt(&name)
                .await
                .map_err(api_err(format!("reading leaf pod {ns}/{name}")))?;
            match there {
                Some(m) if is_ours(&m.metadata, &leaf.name, &leaf.host_id) => {
                    Ok(Placed::Found(Box::new(Pod {
                        metadata: m.metadata,
                        ..Default::default()
                    })))
                }
                Some(_) => Err(SyncError::Clash {
                    kind: "Pod",
                    object: format!("{ns}/{name}"),
                }),
                // Gone meanwhile: created on the next pass.
                None => Err(api_err(format!("creating leaf pod {ns}/{name}"))(e)),
            }
        }
        Err(e) if is_rbac_denial(&e) => Err(not_granted(leaf, &ns)),
        // Quotas and webhooks answer 403; a ValidatingAdmissionPolicy 422 unless it names
        // another reason; a webhook may answer 400.
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
            Err(SyncError::AdmissionRefused {
                object: format!("{ns}/{name}"),
                reason: s.message,
            })
        }
        Err(e) => Err(api_err(format!("creating leaf pod {ns}/{name}"))(e)),
    }
}

/// The ServiceAccount `sa` the copy runs as: the leaf's when it has one of that name (any
/// pod of the namespace there may run as it), else created, marked as this host's, with no
/// RBAC and the pod's `automountServiceAccountToken`, where `join --service-accounts`
/// allows it.
async fn ensure_service_account(
    leaf: &LeafCluster,
    pod: &Pod,
    ns: &str,
    sa: &str,
) -> Result<(), SyncError> {
    let api: Api<ServiceAccount> = Api::namespaced(leaf.client.clone(), ns);
    let exists = |found: bool| {
        leaf.checks.learned(
            Question::ServiceAccount(ns.to_string(), sa.to_string()),
            found,
        )
    };
    let no_account = || {
        leaf.checks
            .learned(Question::MayCreateServiceAccounts(ns.to_string()), false);
        SyncError::NoServiceAccount {
            object: format!("{ns}/{sa}"),
        }
    };
    let found = api
        .get_metadata_opt(sa)
        .await
        .map_err(api_err(format!("reading leaf ServiceAccount {ns}/{sa}")))?;
    if let Some(m) = found {
        if is_ours(&m.metadata, &leaf.name, &leaf.host_id) {
            leaf.copied
                .copied(Dep::new(DepKind::ServiceAccount, ns, sa), None);
        }
        exists(true);
        return Ok(());
    }
    let account = ServiceAccount {
        metadata: owned_meta(leaf, sa, Some(ns), &ObjectMeta::default()),
        automount_service_account_token: pod
            .spec
            .as_ref()
            .and_then(|s| s.automount_service_account_token),
        ..Default::default()
    };
    // Recorded first: a copy created and then lost before the record is collected all
    // the same (only while it is ours and unused).
    leaf.copied
        .copied(Dep::new(DepKind::ServiceAccount, ns, sa), None);
    match api.create(&PostParams::default(), &account).await {
        Ok(_) => {
            info!(cluster = %leaf.name, account = %format!("{ns}/{sa}"), "leaf ServiceAccount created");
        }
        Err(e) if code(&e) == Some(409) => {}
        Err(e) if is_rbac_denial(&e) => return Err(no_account()),
        Err(e) => {
            return Err(api_err(format!("creating leaf ServiceAccount {ns}/{sa}"))(
                e,
            ));
        }
    }
    exists(true);
    Ok(())
}

/// The copy keeps the pod's PriorityClass when the leaf has one of that name (the leaf's
/// admission then gives it the leaf's value of it, and its scheduler may preempt for it);
/// otherwise it runs at the leaf's default priority, and a Warning says so.
async fn keep_priority_class(host_side: &HostSide, leaf: &LeafCluster, pod: &Pod, copy: &mut Pod) {
    let Some(class) = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.clone())
        .filter(|c| !c.is_empty())
    else {
        return;
    };
    let note = match leaf.has_priority_class(&class).await {
        Ok(true) => {
            if let Some(s) = copy.spec.as_mut() {
                s.priority_class_name = Some(class);
            }
            return;
        }
        Ok(false) => format!(
            "leaf cluster {} has no PriorityClass {class}: the pod's copy there runs at the \
             leaf's default priority",
            leaf.name
        ),
        Err(e) => format!(
            "cannot look up PriorityClass {class} in leaf cluster {} ({e}): the pod's copy \
             there runs at the leaf's default priority; joining the leaf again with this \
             version of kubectl mcsched grants the lookup",
            leaf.name
        ),
    };
    warn_event(host_side, pod, "PriorityClassNotInLeaf", "Syncing", note);
}

fn not_granted(leaf: &LeafCluster, ns: &str) -> SyncError {
    leaf.checks
        .learned(Question::Granted(ns.to_string()), false);
    SyncError::NotGranted {
        namespace: ns.to_string(),
    }
}

/// Deletes this incarnation (`uid`) of a host pod at once, as no kubelet will; false when
/// it is already gone or replaced by a pod of the same name.
async fn delete_host_pod_now(
    host_pods: &Api<Pod>,
    name: &str,
    uid: &str,
) -> Result<bool, kube::Error> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match host_pods.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Leaf pods by host key, for tests and explanations.
pub fn copies_by_key(leaf: &LeafCluster) -> HashMap<String, Arc<Pod>> {
    leaf.managed()
}

#[cfg(test)]
#[path = "pod_sync_tests.rs"]
mod decision_tests;

#[cfg(test)]
mod tests {
    use super::grace_seconds;

    #[test]
    fn a_grace_period_beyond_u32_saturates_instead_of_truncating() {
        assert_eq!(grace_seconds(30), 30);
        assert_eq!(grace_seconds(-5), 0);
        assert_eq!(
            grace_seconds(1 << 32),
            u32::MAX,
            "2^32 is no immediate kill"
        );
        assert_eq!(grace_seconds((1 << 32) + 30), u32::MAX);
        assert_eq!(grace_seconds(i64::MAX), u32::MAX);
    }
}
