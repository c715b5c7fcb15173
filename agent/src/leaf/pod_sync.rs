//! Pod sync: each host pod bound to a virtual node has one copy in its leaf (same
//! namespace and name, labelled with the cluster, annotated with the host pod's UID), with
//! the ConfigMaps, Secrets and PVCs it needs; the copy's status is written back; deletion
//! goes both ways. Reconciled from the two caches, so a restart or a new leader picks up
//! where the last one stopped, creating nothing twice and leaving nothing behind.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Pod, PodCondition, PodStatus, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use mcsched_shared::keys;
use serde_json::json;
use tracing::{debug, info, warn};

use super::cluster::LeafCluster;
use super::registry::Leaves;
use super::rescheduling;
use super::transform;
use crate::events::EventSink;
use crate::watch::SharedCache;

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
    pub lease: crate::leader::LeaseHealth,
}

impl HostSide {
    fn cache(&self) -> std::sync::MutexGuard<'_, crate::cache::Cache> {
        crate::watch::lock(&self.cache)
    }

    /// Fencing: an agent that no longer leads writes nothing, in the host or the leaf.
    fn fence(&self) -> Result<(), SyncError> {
        if crate::leader::may_act(&self.leader, &self.lease) {
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
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
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

/// The host pods bound (not merely assumed) to the leaf's virtual node.
fn host_pods(host_side: &HostSide, node: &str) -> BTreeMap<String, Arc<Pod>> {
    let mut cache = host_side.cache();
    let snapshot = cache.snapshot();
    let Some(info) = snapshot.get(node) else {
        return BTreeMap::new();
    };
    info.pods
        .iter()
        .filter(|p| !cache.is_assumed(&p.key))
        .map(|p| (p.key.clone(), p.pod.clone()))
        .collect()
}

async fn reconcile(host: &Client, host_side: &HostSide, leaf: &LeafCluster) {
    let node = keys::virtual_node_name(&leaf.name);
    let hosts = host_pods(host_side, &node);
    let copies = leaf.managed();
    for (key, pod) in &hosts {
        if let Err(e) = sync_one(host, host_side, leaf, pod, copies.get(key)).await {
            if matches!(e, SyncError::NotLeader) {
                return;
            }
            warn!(cluster = %leaf.name, pod = %key, error = %e, "pod sync failed; retrying");
        }
    }
    for (key, copy) in &copies {
        if hosts.contains_key(key) || copy.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // A stale cache of an old leader would take the new leader's copies for orphans.
        if host_side.fence().is_err() {
            return;
        }
        info!(cluster = %leaf.name, pod = %key, "deleting leaf pod without a host pod");
        if let Err(e) = delete_copy(leaf, copy, None).await {
            warn!(cluster = %leaf.name, pod = %key, error = %e, "deleting orphan failed");
        }
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
    let copy_uid = |c: &Pod| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::HOST_POD_UID_ANNOTATION))
            .cloned()
    };
    if pod.metadata.deletion_timestamp.is_some() {
        // An unreachable leaf cannot confirm; the host pod goes now (its owner replaces
        // it elsewhere) and the copy is removed as an orphan once the leaf answers.
        let copy = copy.filter(|_| leaf.is_ready());
        match copy {
            Some(c) if c.metadata.deletion_timestamp.is_none() => {
                let grace = pod.metadata.deletion_grace_period_seconds;
                delete_copy(leaf, c, grace).await?;
            }
            Some(_) => {}
            None => {
                // No kubelet will finish this deletion: the leaf copy is gone, so do it.
                delete_host_pod_now(&host_pods, &name, &uid)
                    .await
                    .map_err(api_err(format!(
                        "finishing deletion of host pod {ns}/{name}"
                    )))?;
            }
        }
        return Ok(());
    }
    let status = pod.status.as_ref();
    match copy {
        None if condition(status, LEAF_POD_CONDITION).is_some() => {
            // The leaf's watch may not show a copy created a moment ago: the leaf's API
            // server answers for it before the pod is given up.
            let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
            let there = leaf_pods
                .get_opt(&name)
                .await
                .map_err(api_err(format!("reading leaf pod {ns}/{name}")))?;
            if there.is_some_and(|c| copy_uid(&c).as_deref() == Some(uid.as_str())) {
                return Ok(());
            }
            // The copy existed and is gone without the host asking: the pod is lost.
            if status.and_then(|s| s.phase.as_deref()) != Some("Failed") {
                info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf pod vanished; host pod failed");
                let patch = json!({"status": {
                    "phase": "Failed",
                    "reason": "LeafPodDeleted",
                    "message": format!("the pod's copy in leaf cluster {} was deleted", leaf.name),
                }});
                host_pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map_err(api_err(format!("failing host pod {ns}/{name}")))?;
            }
            Ok(())
        }
        None => {
            create_copy(host, leaf, pod).await?;
            let mut new = pod.status.clone().unwrap_or_default();
            set_leaf_condition(&mut new, leaf, None);
            write_host_status(&host_pods, &name, &new).await
        }
        Some(c) if copy_uid(c).as_deref() != Some(uid.as_str()) => {
            // A copy of an earlier pod of the same name: it goes before the new one comes.
            if c.metadata.deletion_timestamp.is_none() {
                delete_copy(leaf, c, None).await?;
            }
            Ok(())
        }
        Some(c) => {
            let mut new = transform::host_status(&c.status.clone().unwrap_or_default(), status);
            let leaf_node = c.spec.as_ref().and_then(|s| s.node_name.clone());
            set_leaf_condition(&mut new, leaf, leaf_node.as_deref());
            let old = status.cloned().unwrap_or_default();
            if transform::status_differs(&new, &old)
                || condition(Some(&new), LEAF_POD_CONDITION).map(|c| &c.message)
                    != condition(Some(&old), LEAF_POD_CONDITION).map(|c| &c.message)
            {
                debug!(pod = %format!("{ns}/{name}"), phase = ?new.phase, "leaf status to host");
                write_host_status(&host_pods, &name, &new).await?;
            }
            let settings = host_side.leaves.settings;
            match rescheduling::pending_for(c) {
                Some(waited) if waited >= settings.pending_timeout => {
                    take_back(host_side, leaf, &host_pods, pod, c, waited).await
                }
                _ => Ok(()),
            }
        }
    }
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
        host_side.leaves.avoidance.avoid(
            rescheduling::owner_key(pod),
            &leaf.name,
            settings.avoid_for,
        );
        format!(
            "pod stayed Pending in leaf cluster {} for {waited_s}s; taken back so that its owner recreates it elsewhere; {} is avoided for the owner's pods for {}s",
            leaf.name,
            leaf.name,
            settings.avoid_for.as_secs()
        )
    } else {
        format!(
            "pod stayed Pending in leaf cluster {} for {waited_s}s; deleted, as a bare pod on a lost node is: it has no controller to recreate it elsewhere",
            leaf.name
        )
    };
    host_side.fence()?;
    info!(cluster = %leaf.name, pod = %name, "taking a pod back from its leaf");
    warn_event(host_side, pod, note.clone());
    let condition = json!({"status": {"conditions": [{
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": "LeafPodPending",
        "message": note,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    // Strategic merge keys conditions by type: the others stay.
    if let Err(e) = host_pods
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(condition))
        .await
    {
        warn!(pod = %name, error = %e, "cannot set the DisruptionTarget condition");
    }
    delete_copy(leaf, copy, Some(0)).await?;
    delete_host_pod_now(host_pods, &name, &uid)
        .await
        .map_err(api_err(format!("deleting host pod {name}")))?;
    Ok(())
}

fn warn_event(host_side: &HostSide, pod: &Pod, note: String) {
    let scheduler = mcsched_shared::pod::scheduler_name(pod).to_string();
    host_side.events.send(crate::events::Message::Event {
        reporting_controller: scheduler,
        regarding: crate::events::object_ref(pod),
        type_: kube::runtime::events::EventType::Warning,
        reason: "LeafPodPending",
        action: "Rescheduling",
        note,
    });
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

async fn write_host_status(
    pods: &Api<Pod>,
    name: &str,
    status: &PodStatus,
) -> Result<(), SyncError> {
    let patch = json!({ "status": status });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(api_err(format!("writing status of host pod {name}")))?;
    Ok(())
}

async fn delete_copy(leaf: &LeafCluster, copy: &Pod, grace: Option<i64>) -> Result<(), SyncError> {
    let ns = copy.metadata.namespace.clone().unwrap_or_default();
    let name = copy.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
    let dp = DeleteParams {
        grace_period_seconds: grace.map(|g| g.max(0) as u32),
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

fn owned_meta(leaf: &LeafCluster, name: &str, ns: Option<&str>, from: &ObjectMeta) -> ObjectMeta {
    let mut labels = from.labels.clone().unwrap_or_default();
    labels.insert(keys::MANAGED_BY_LABEL.into(), keys::MANAGED_BY_VALUE.into());
    labels.insert(keys::MANAGED_CLUSTER_LABEL.into(), leaf.name.clone());
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: ns.map(String::from),
        labels: Some(labels),
        annotations: from.annotations.clone().map(|a: BTreeMap<String, String>| {
            a.into_iter()
                .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
                .collect()
        }),
        ..Default::default()
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(keys::FIELD_MANAGER).force()
}

/// The namespace, the objects the pod refers to, then the pod.
async fn create_copy(host: &Client, leaf: &LeafCluster, pod: &Pod) -> Result<(), SyncError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespaces: Api<Namespace> = Api::all(leaf.client.clone());
    let present = namespaces
        .get_opt(&ns)
        .await
        .map_err(api_err(format!("reading leaf namespace {ns}")))?;
    if present.is_none() {
        let created = Namespace {
            metadata: owned_meta(leaf, &ns, None, &ObjectMeta::default()),
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &created).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(409) => {}
            Err(e) => return Err(api_err(format!("creating leaf namespace {ns}"))(e)),
        }
    }
    let deps = transform::dependencies(pod);
    let host_cms: Api<ConfigMap> = Api::namespaced(host.clone(), &ns);
    let leaf_cms: Api<ConfigMap> = Api::namespaced(leaf.client.clone(), &ns);
    for cm_name in &deps.config_maps {
        let Some(cm) = host_cms
            .get_opt(cm_name)
            .await
            .map_err(api_err(format!("reading host ConfigMap {ns}/{cm_name}")))?
        else {
            continue;
        };
        let copy = ConfigMap {
            metadata: owned_meta(leaf, cm_name, Some(&ns), &cm.metadata),
            data: cm.data,
            binary_data: cm.binary_data,
            immutable: cm.immutable,
        };
        leaf_cms
            .patch(cm_name, &apply_params(), &Patch::Apply(&copy))
            .await
            .map_err(api_err(format!(
                "copying ConfigMap {ns}/{cm_name} to the leaf"
            )))?;
    }
    let host_secrets: Api<Secret> = Api::namespaced(host.clone(), &ns);
    let leaf_secrets: Api<Secret> = Api::namespaced(leaf.client.clone(), &ns);
    for s_name in &deps.secrets {
        let Some(s) = host_secrets
            .get_opt(s_name)
            .await
            .map_err(|e| {
                // The install grants Secrets per namespace only: say how to grant this one.
                let hint = if code(&e) == Some(403) {
                    format!(
                        " (let the agent read Secrets in {ns}: kubectl create rolebinding mcsched-secrets -n {ns} --clusterrole={} --serviceaccount=<agent namespace>:{})",
                        mcsched_shared::manifests::secret_reader_name(),
                        keys::AGENT_NAME
                    )
                } else {
                    String::new()
                };
                api_err(format!("reading host Secret {ns}/{s_name}{hint}"))(e)
            })?
        else {
            continue;
        };
        if s.type_.as_deref() == Some("kubernetes.io/service-account-token") {
            continue;
        }
        let copy = Secret {
            metadata: owned_meta(leaf, s_name, Some(&ns), &s.metadata),
            data: s.data,
            type_: s.type_,
            immutable: s.immutable,
            ..Default::default()
        };
        leaf_secrets
            .patch(s_name, &apply_params(), &Patch::Apply(&copy))
            .await
            .map_err(api_err(format!("copying Secret {ns}/{s_name} to the leaf")))?;
    }
    let host_claims: Api<PersistentVolumeClaim> = Api::namespaced(host.clone(), &ns);
    let leaf_claims: Api<PersistentVolumeClaim> = Api::namespaced(leaf.client.clone(), &ns);
    for c_name in &deps.claims {
        let Some(c) = host_claims
            .get_opt(c_name)
            .await
            .map_err(api_err(format!("reading host PVC {ns}/{c_name}")))?
        else {
            continue;
        };
        if leaf_claims
            .get_opt(c_name)
            .await
            .map_err(api_err(format!("reading leaf PVC {ns}/{c_name}")))?
            .is_some()
        {
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
                    ..Default::default()
                },
            ),
            spec: Some(transform::leaf_claim_spec(&spec)),
            status: None,
        };
        match leaf_claims.create(&PostParams::default(), &copy).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(409) => {}
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
    let copy = transform::leaf_pod(pod, &leaf.name)?;
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
    match leaf_pods.create(&PostParams::default(), &copy).await {
        Ok(_) => {
            info!(cluster = %leaf.name, pod = %format!("{ns}/{name}"), "leaf pod created");
            Ok(())
        }
        // Created by an earlier run whose watch event has not arrived yet.
        Err(e) if code(&e) == Some(409) => Ok(()),
        Err(e) => Err(api_err(format!("creating leaf pod {ns}/{name}"))(e)),
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
