//! What pod sync copied into a leaf for the pods there — ConfigMaps, Secrets, claims,
//! ResourceClaimTemplates and ResourceClaims — kept following the host objects while a leaf
//! pod refers to them: an edit on the host reaches the copy, and a copy no pod of that leaf
//! refers to any more is deleted after a grace period. Only objects carrying this host's
//! marks are changed or deleted; a claim's copy holds data, and a ResourceClaim's copy its
//! allocation in the leaf, so either goes only once its host claim is gone and no leaf pod
//! refers to it, and neither is updated in place.
//!
//! Each object is kept on its own: one the leaf refuses (a quota, a webhook, an object of
//! that name that is not this host's) is reported — a Warning event on the host object, a
//! log line and `mcsched_leaf_copy_consecutive_failures` naming it — and retried after a
//! back-off of its own, while the others, in every namespace, are kept in step and the
//! unused ones collected. A host object deleted and created again may be immutable, or its
//! copy be: that copy is replaced (deleted under its UID and resourceVersion, then
//! created), as no update of an immutable object can succeed.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ConfigMap, ObjectReference, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::{Api, Client};
use mcsched_shared::keys;
use tracing::{debug, info, warn};

use super::cluster::LeafCluster;
pub use super::copied::{Copied, Dep, DepKind};
use super::dra_copies::{self, NotCopied};
use super::host_objects::{Found, HostObjects};
use crate::observe::events::{EventSink, EventType, Message};
use mcsched_engine::leaf::leaf_checks::is_ours;

/// A host object read by name is read again at most this often when no watch holds it.
const REREAD: Duration = Duration::from_secs(30);

/// The first back-off of a copy that failed; it doubles with each failure in a row, up
/// to [`MAX_BACKOFF`]. Reconcile rounds come every 30 s and on every watched change, so
/// without it a copy the leaf refuses would be written on each.
const FIRST_BACKOFF: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(320);

#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("no longer the leader: nothing written")]
    NotLeader,
    /// The leaf's copy changed between its read and its replacement: nothing deleted.
    #[error("leaf {what} changed since it was read; not replaced")]
    Changed { what: String },
    /// Some copies failed, each reported and retried on its own; the rest were kept.
    #[error(
        "{failed} leaf copies not kept in step (each reported with a Warning event and retried after its own back-off)"
    )]
    Incomplete { failed: usize },
    /// The host object may not be copied at all (a ResourceClaim allocated in the host).
    #[error(transparent)]
    NotCopied(#[from] NotCopied),
}

fn api_err(what: String) -> impl FnOnce(kube::Error) -> FollowError {
    move |source| FollowError::Api { what, source }
}

/// The objects `pod`'s copy refers to.
pub fn references(pod: &Pod) -> impl Iterator<Item = Dep> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let deps = mcsched_engine::leaf::transform::dependencies(pod);
    let of = move |kind: DepKind, names: Vec<String>| {
        let ns = ns.clone();
        names.into_iter().map(move |n| Dep::new(kind, &ns, &n))
    };
    let account =
        mcsched_engine::leaf::transform::service_account(pod).map(|sa| vec![sa.to_string()]);
    of(DepKind::ConfigMap, deps.config_maps)
        .chain(of(DepKind::Secret, deps.secrets))
        .chain(of(DepKind::Claim, deps.claims))
        .chain(of(DepKind::ResourceClaimTemplate, deps.claim_templates))
        .chain(of(DepKind::ResourceClaim, deps.resource_claims))
        .chain(of(DepKind::ServiceAccount, account.unwrap_or_default()))
}

/// The UID of the host object a leaf copy was made from (its mark).
pub fn host_uid(copy: &ObjectMeta) -> Option<&str> {
    copy.annotations
        .as_ref()?
        .get(keys::HOST_UID_ANNOTATION)
        .map(String::as_str)
}

/// The mark of an object pod sync creates: this host's id and the cluster, and the host
/// object's UID.
pub fn owned_meta(
    leaf: &LeafCluster,
    name: &str,
    ns: Option<&str>,
    from: &ObjectMeta,
) -> ObjectMeta {
    let mut labels = from.labels.clone().unwrap_or_default();
    labels.insert(keys::MANAGED_BY_LABEL.into(), keys::MANAGED_BY_VALUE.into());
    labels.insert(keys::MANAGED_CLUSTER_LABEL.into(), leaf.name.clone());
    labels.insert(keys::HOST_ID_LABEL.into(), leaf.host_id.clone());
    let mut annotations: BTreeMap<String, String> = from
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
        .collect();
    if let Some(uid) = &from.uid {
        annotations.insert(keys::HOST_UID_ANNOTATION.into(), uid.clone());
    }
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: ns.map(String::from),
        labels: Some(labels),
        annotations: Some(annotations),
        ..Default::default()
    }
}

/// Server-side apply as mcsched's field manager.
pub fn apply_params() -> PatchParams {
    // Strict, as pod copies are created: a leaf refuses a field it does not know rather
    // than drop it.
    PatchParams::apply(keys::FIELD_MANAGER)
        .force()
        .validation_strict()
}

/// A create by pod sync's field manager.
fn create_params() -> PostParams {
    PostParams {
        field_manager: Some(keys::FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The leaf's copy of host ConfigMap `cm`.
pub fn config_map_copy(leaf: &LeafCluster, cm: &ConfigMap) -> ConfigMap {
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    ConfigMap {
        metadata: owned_meta(leaf, name, cm.metadata.namespace.as_deref(), &cm.metadata),
        data: cm.data.clone(),
        binary_data: cm.binary_data.clone(),
        immutable: cm.immutable,
    }
}

/// The leaf's copy of host Secret `s`.
pub fn secret_copy(leaf: &LeafCluster, s: &Secret) -> Secret {
    let name = s.metadata.name.as_deref().unwrap_or_default();
    Secret {
        metadata: owned_meta(leaf, name, s.metadata.namespace.as_deref(), &s.metadata),
        data: s.data.clone(),
        type_: s.type_.clone(),
        immutable: s.immutable,
        ..Default::default()
    }
}

/// The leaf's copy of host ResourceClaimTemplate `t`.
pub fn claim_template_copy(leaf: &LeafCluster, t: &ResourceClaimTemplate) -> ResourceClaimTemplate {
    let name = t.metadata.name.as_deref().unwrap_or_default();
    let meta = owned_meta(leaf, name, t.metadata.namespace.as_deref(), &t.metadata);
    dra_copies::template_copy(meta, t)
}

/// The leaf's copy of host ResourceClaim `c` (its labels, no annotation but the mark), or
/// why it is not made.
pub fn resource_claim_copy(
    leaf: &LeafCluster,
    c: &ResourceClaim,
) -> Result<ResourceClaim, NotCopied> {
    let name = c.metadata.name.as_deref().unwrap_or_default();
    let from = ObjectMeta {
        labels: c.metadata.labels.clone(),
        uid: c.metadata.uid.clone(),
        ..Default::default()
    };
    let meta = owned_meta(leaf, name, c.metadata.namespace.as_deref(), &from);
    dra_copies::claim_copy(meta, c)
}

/// What [`follow`] needs of the host and of pod sync.
pub struct Follow<'a> {
    pub host: &'a Client,
    pub leaf: &'a LeafCluster,
    pub objects: &'a HostObjects,
    /// Whether the host still has claim `namespace/name`.
    pub host_has_claim: &'a (dyn Fn(&str) -> bool + Sync),
    /// How long a copy stays unreferenced before it is deleted.
    pub grace: Duration,
    /// Fencing: checked right before each write.
    pub may_write: &'a (dyn Fn() -> bool + Sync),
    /// Whether every pod in the leaf is one of `refs`' pods: only then does an object
    /// missing from `refs` mean no leaf pod refers to it.
    pub complete: bool,
    /// Where a copy that fails is reported.
    pub events: &'a EventSink,
}

/// A host object as read for a copy: its resourceVersion and the copy to write.
enum Source {
    ConfigMap(Arc<ConfigMap>),
    Secret(Arc<Secret>),
    ClaimTemplate(Arc<ResourceClaimTemplate>),
}

impl Source {
    fn version(&self) -> String {
        match self {
            Source::ConfigMap(o) => o.metadata.resource_version.clone(),
            Source::Secret(o) => o.metadata.resource_version.clone(),
            Source::ClaimTemplate(o) => o.metadata.resource_version.clone(),
        }
        .unwrap_or_default()
    }
}

/// A copy's back-off after `failures` failures in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// Whether `dep` is still backing off from its last failure.
fn backing_off(f: &Follow<'_>, dep: &Dep, now: Instant) -> bool {
    copy_backing_off(f.leaf, dep, now)
}

/// Whether leaf `leaf`'s copy `dep` is still backing off from its last failure: pod sync
/// asks before it reports a refusal again.
pub fn copy_backing_off(leaf: &LeafCluster, dep: &Dep, now: Instant) -> bool {
    leaf.copied
        .lock()
        .get(dep)
        .and_then(|e| e.retry_at)
        .is_some_and(|at| now < at)
}

/// `dep` is in step (or needed nothing): its failures, if any, are over.
fn in_step(f: &Follow<'_>, dep: &Dep) {
    copy_in_step(f.leaf, dep);
}

/// Leaf `leaf`'s copy `dep` is in step, or no longer needed: its failures, if any, are
/// over, and it is named no more.
pub fn copy_in_step(leaf: &LeafCluster, dep: &Dep) {
    let recovered = match leaf.copied.lock().get_mut(dep) {
        Some(e) if e.failures > 0 => {
            e.failures = 0;
            e.retry_at = None;
            true
        }
        _ => false,
    };
    if recovered {
        mcsched_engine::metrics::global().leaf_copy_recovered(
            &leaf.name,
            dep.kind.api_kind(),
            &dep.namespace,
            &dep.name,
        );
        info!(cluster = %leaf.name, object = %dep, "leaf copy in step again, or no longer needed");
    }
}

/// Keeping `dep` failed with `e`: it backs off, and is named in a Warning event on the
/// host object, in the log and in the metrics.
fn failed(f: &Follow<'_>, dep: &Dep, e: &FollowError) {
    copy_failed(f.leaf, f.events, dep, e);
}

/// Leaf `leaf`'s copy `dep` failed, or was refused, with `e`: as [`follow`] reports its
/// own failures (pod sync reports a refusal of its own this way).
pub fn copy_failed(leaf: &LeafCluster, events: &EventSink, dep: &Dep, e: &FollowError) {
    let (failures, wait) = {
        let mut copied = leaf.copied.lock();
        let entry = copied.entry(dep.clone()).or_default();
        entry.failures = entry.failures.saturating_add(1);
        let wait = backoff(entry.failures);
        entry.retry_at = Some(Instant::now() + wait);
        // The retry reads the host object again, even where no watch holds it.
        entry.read_at = None;
        (entry.failures, wait)
    };
    let kind = dep.kind.api_kind();
    mcsched_engine::metrics::global().leaf_copy_failed(
        &leaf.name,
        kind,
        &dep.namespace,
        &dep.name,
        failures,
    );
    warn!(cluster = %leaf.name, object = %dep, error = %e, failures, retry_in_s = wait.as_secs(), "leaf copy not kept in step; the other copies go on, this one is retried after its back-off");
    events.send(Message::Event {
        reporting_controller: keys::AGENT_NAME.into(),
        regarding: ObjectReference {
            api_version: Some(dep.kind.api_version().into()),
            kind: Some(kind.into()),
            namespace: Some(dep.namespace.clone()),
            name: Some(dep.name.clone()),
            ..Default::default()
        },
        type_: EventType::Warning,
        reason: "LeafCopyFailed",
        action: "Syncing",
        note: format!(
            "leaf cluster {}: {e} ({failures} failed in a row; retried in {}s)",
            leaf.name,
            wait.as_secs()
        ),
    });
}

/// Brings the copies of what `refs` (the objects the leaf's pods refer to now) names in
/// line with the host, and deletes what no pod has referred to for `grace`.
pub async fn follow(f: &Follow<'_>, refs: &HashSet<Dep>) -> Result<(), FollowError> {
    // Only ConfigMaps and Secrets are watched (templates are read by name).
    let namespaces: BTreeSet<String> = refs
        .iter()
        .filter(|d| matches!(d.kind, DepKind::ConfigMap | DepKind::Secret))
        .map(|d| d.namespace.clone())
        .collect();
    let wake = f.leaf.sync_wake.clone();
    let changed: Arc<dyn Fn() + Send + Sync> = Arc::new(move || wake.notify_one());
    f.objects.want(f.host, &f.leaf.name, namespaces, &changed);
    let mut sorted: Vec<&Dep> = refs.iter().collect();
    sorted.sort();
    let mut failures = 0;
    for dep in sorted {
        if !dep.kind.follows_host() {
            // Only what pod sync recorded is ever collected: an account of the leaf's own
            // that a copy uses is not.
            if let Some(e) = f.leaf.copied.lock().get_mut(dep) {
                e.unused_since = None;
            } else if dep.kind.holds_state() {
                f.leaf.copied.lock().entry(dep.clone()).or_default();
            }
            continue;
        }
        if let Some(e) = f.leaf.copied.lock().get_mut(dep) {
            e.unused_since = None;
        }
        if backing_off(f, dep, Instant::now()) {
            continue;
        }
        match follow_one(f, dep).await {
            Ok(()) => in_step(f, dep),
            Err(FollowError::NotLeader) => return Err(FollowError::NotLeader),
            Err(e) => {
                failures += 1;
                failed(f, dep, &e);
            }
        }
    }
    if f.complete {
        failures += collect_unused(f, refs).await?;
    }
    match failures {
        0 => Ok(()),
        failed => Err(FollowError::Incomplete { failed }),
    }
}

/// Brings `dep`'s copy in line with its host object, if the copy is stale.
async fn follow_one(f: &Follow<'_>, dep: &Dep) -> Result<(), FollowError> {
    let Some(source) = read_host(f, dep).await? else {
        return Ok(());
    };
    let version = source.version();
    // `follow` marked it used already.
    let stale = f.leaf.copied.lock().entry(dep.clone()).or_default().version != version;
    if stale {
        refresh(f, dep, &source).await?;
        f.leaf.copied.copied(dep.clone(), Some(version));
    }
    Ok(())
}

/// The host object `dep` names, read by name when the watch (names and versions only)
/// shows a version the copy was not written from, or, where no watch has listed the
/// namespace, at most every [`REREAD`]. None when the host has none (the copy stays: a
/// kubelet keeps what it mounted), when the copy is in step, or when it is not due for a
/// read.
async fn read_host(f: &Follow<'_>, dep: &Dep) -> Result<Option<Source>, FollowError> {
    let (ns, name) = (&dep.namespace, &dep.name);
    let watched = match dep.kind {
        DepKind::ConfigMap => f.objects.config_map(ns, name),
        DepKind::Secret => f.objects.secret(ns, name),
        // Not watched: a template's spec never changes, so only one deleted and created
        // again (or relabelled) has a new version, and a read every REREAD finds it.
        DepKind::ResourceClaimTemplate => Found::Unknown,
        DepKind::Claim | DepKind::ResourceClaim | DepKind::ServiceAccount => return Ok(None),
    };
    match watched {
        Found::Watched(None) => return Ok(None),
        Found::Watched(Some(version)) => {
            let copied = f.leaf.copied.lock();
            if copied.get(dep).is_some_and(|e| e.version == version) {
                return Ok(None);
            }
        }
        Found::Unknown => {
            let mut copied = f.leaf.copied.lock();
            let entry = copied.entry(dep.clone()).or_default();
            if entry.read_at.is_some_and(|at| at.elapsed() < REREAD) {
                return Ok(None);
            }
            entry.read_at = Some(Instant::now());
        }
    }
    let what = format!("reading host {dep}");
    Ok(match dep.kind {
        DepKind::ConfigMap => Api::<ConfigMap>::namespaced(f.host.clone(), ns)
            .get_opt(name)
            .await
            .map_err(api_err(what))?
            .map(|o| Source::ConfigMap(Arc::new(o))),
        DepKind::Secret => Api::<Secret>::namespaced(f.host.clone(), ns)
            .get_opt(name)
            .await
            .map_err(api_err(what))?
            .map(|o| Source::Secret(Arc::new(o))),
        DepKind::ResourceClaimTemplate => {
            Api::<ResourceClaimTemplate>::namespaced(f.host.clone(), ns)
                .get_opt(name)
                .await
                .map_err(api_err(what))?
                .map(|o| Source::ClaimTemplate(Arc::new(o)))
        }
        DepKind::Claim | DepKind::ResourceClaim | DepKind::ServiceAccount => None,
    })
}

/// The leaf's `dep`: `Some(None)` when absent, `Some(Some(uid))` when it is this host's
/// copy, None when it is someone else's (never touched).
async fn ours_or_absent<K>(
    api: &Api<K>,
    leaf: &LeafCluster,
    dep: &Dep,
) -> Result<Option<Option<String>>, FollowError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let found = api
        .get_metadata_opt(&dep.name)
        .await
        .map_err(api_err(format!("reading leaf {dep}")))?;
    Ok(match found {
        None => Some(None),
        Some(m) if is_ours(&m.metadata, &leaf.name, &leaf.host_id) => Some(m.metadata.uid),
        Some(_) => None,
    })
}

/// Writes the copy of `source` over this host's copy in the leaf (or creates it).
async fn refresh(f: &Follow<'_>, dep: &Dep, source: &Source) -> Result<(), FollowError> {
    match source {
        Source::ConfigMap(cm) => {
            let immutable = cm.immutable == Some(true);
            apply_ours(f, dep, &config_map_copy(f.leaf, cm), immutable).await?
        }
        // The leaf gives its pods their own tokens.
        Source::Secret(s) if s.type_.as_deref() == Some("kubernetes.io/service-account-token") => {}
        Source::Secret(s) => {
            let immutable = s.immutable == Some(true);
            apply_ours(f, dep, &secret_copy(f.leaf, s), immutable).await?
        }
        // A template's spec is immutable: a copy of an earlier template of that name is
        // replaced, never updated.
        Source::ClaimTemplate(t) => {
            apply_ours(f, dep, &claim_template_copy(f.leaf, t), true).await?
        }
    }
    debug!(cluster = %f.leaf.name, object = %dep, "leaf copy follows its host object");
    Ok(())
}

/// Writes `copy` as the leaf's `dep`: created when the leaf has none (an object of that name
/// made meanwhile answers 409 and is someone else's unless it carries this host's marks),
/// else server-side applied over this host's copy with its UID and resourceVersion as
/// preconditions, so that an object replaced since it was read is never taken over.
/// A copy of an earlier host object of that name (deleted and created again on the host)
/// is replaced when the new one is `immutable`, or when the leaf refuses the update (the
/// copy of the earlier one is immutable): an immutable object's data never changes.
async fn apply_ours<K>(
    f: &Follow<'_>,
    dep: &Dep,
    copy: &K,
    immutable: bool,
) -> Result<(), FollowError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(f.leaf.client.clone(), &dep.namespace);
    let read = || async {
        api.get_metadata_opt(&dep.name)
            .await
            .map_err(api_err(format!("reading leaf {dep}")))
    };
    let found = match read().await? {
        Some(m) => m,
        None => {
            if !(f.may_write)() {
                return Err(FollowError::NotLeader);
            }
            match api.create(&create_params(), copy).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => match read().await? {
                    Some(m) => m,
                    // Gone again already: the next round creates it.
                    None => return Ok(()),
                },
                Err(e) => return Err(api_err(format!("creating leaf {dep}"))(e)),
            }
        }
    };
    if !is_ours(&found.metadata, &f.leaf.name, &f.leaf.host_id) {
        debug!(cluster = %f.leaf.name, object = %dep, "the leaf's object of that name is not this host's: left alone");
        return Ok(());
    }
    if !(f.may_write)() {
        return Err(FollowError::NotLeader);
    }
    let of_earlier_object = host_uid(&found.metadata) != host_uid(copy.meta());
    if of_earlier_object && immutable {
        return replace_ours(f, &api, dep, copy, &found).await;
    }
    let mut update = copy.clone();
    update.meta_mut().uid = found.metadata.uid.clone();
    update.meta_mut().resource_version = found.metadata.resource_version.clone();
    match api
        .patch(&dep.name, &apply_params(), &Patch::Apply(&update))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 422 && of_earlier_object => {
            debug!(cluster = %f.leaf.name, object = %dep, message = %s.message, "the leaf refused to update the copy of an earlier host object of that name: replaced");
            replace_ours(f, &api, dep, copy, &found).await
        }
        Err(e) => Err(api_err(format!("updating leaf {dep}"))(e)),
    }
}

/// Replaces this host's copy `found` by `copy`: deleted only as it was read (its UID and
/// resourceVersion as preconditions, so neither an object made since under that name nor
/// a copy changed since is deleted), then created.
async fn replace_ours<K>(
    f: &Follow<'_>,
    api: &Api<K>,
    dep: &Dep,
    copy: &K,
    found: &PartialObjectMeta<K>,
) -> Result<(), FollowError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let (Some(uid), Some(version)) = (
        found.metadata.uid.clone(),
        found.metadata.resource_version.clone(),
    ) else {
        // Without both, the delete could not be held to the object read.
        return Err(FollowError::Changed {
            what: dep.to_string(),
        });
    };
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: Some(version),
        }),
        ..Default::default()
    };
    match api.delete(&dep.name, &dp).await {
        Ok(_) => {}
        // Gone already: created below.
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Err(FollowError::Changed {
                what: dep.to_string(),
            });
        }
        Err(e) => return Err(api_err(format!("deleting leaf {dep} to replace it"))(e)),
    }
    if !(f.may_write)() {
        return Err(FollowError::NotLeader);
    }
    match api.create(&create_params(), copy).await {
        Ok(_) => {
            info!(cluster = %f.leaf.name, object = %dep, "leaf copy replaced: its host object was deleted and created again, and one of them is immutable");
            Ok(())
        }
        Err(e) => Err(api_err(format!(
            "creating leaf {dep} in place of the copy deleted"
        ))(e)),
    }
}

/// Deletes the copies no leaf pod has referred to for the grace period; returns how many
/// could not be deleted (each reported, and retried after its back-off).
async fn collect_unused(f: &Follow<'_>, refs: &HashSet<Dep>) -> Result<usize, FollowError> {
    let now = Instant::now();
    let due: Vec<Dep> = {
        let mut copied = f.leaf.copied.lock();
        copied
            .iter_mut()
            .filter(|(dep, _)| !refs.contains(*dep))
            .filter_map(|(dep, entry)| {
                let since = *entry.unused_since.get_or_insert(now);
                // A ResourceClaim's host claim is read below, for the few that are due.
                let host_has_it = dep.kind == DepKind::Claim
                    && (f.host_has_claim)(&format!("{}/{}", dep.namespace, dep.name));
                let backing_off = entry.retry_at.is_some_and(|at| now < at);
                collectable(
                    dep.kind,
                    now.duration_since(since),
                    f.grace,
                    backing_off,
                    host_has_it,
                )
                .then(|| dep.clone())
            })
            .collect()
    };
    let mut failures = 0;
    for dep in due {
        if dep.kind == DepKind::ResourceClaim {
            match host_has_resource_claim(f, &dep).await {
                Ok(false) => {}
                Ok(true) => {
                    // Kept for its allocation; a refusal of it (allocated in the host)
                    // is over once no pod of the leaf wants it.
                    copy_in_step(f.leaf, &dep);
                    continue;
                }
                Err(e) => {
                    failures += 1;
                    failed(f, &dep, &e);
                    continue;
                }
            }
        }
        match delete_unused(f, &dep).await {
            Ok(true) => {
                let was_failing = f
                    .leaf
                    .copied
                    .lock()
                    .remove(&dep)
                    .is_some_and(|e| e.failures > 0);
                if was_failing {
                    mcsched_engine::metrics::global().leaf_copy_recovered(
                        &f.leaf.name,
                        dep.kind.api_kind(),
                        &dep.namespace,
                        &dep.name,
                    );
                }
            }
            Ok(false) => {}
            Err(FollowError::NotLeader) => return Err(FollowError::NotLeader),
            Err(e) => {
                failures += 1;
                failed(f, &dep, &e);
            }
        }
    }
    Ok(failures)
}

/// Whether an unreferenced copy of `kind`, unused for `unused_for`, is deleted now: once
/// the grace period is over and it is not backing off from a failure, and a copy that holds
/// state of the leaf's (a claim's data, a ResourceClaim's allocation) only once its host
/// object is gone too.
fn collectable(
    kind: DepKind,
    unused_for: Duration,
    grace: Duration,
    backing_off: bool,
    host_has_it: bool,
) -> bool {
    unused_for >= grace && !backing_off && !(kind.holds_state() && host_has_it)
}

/// Whether the host still has ResourceClaim `dep` (by name, as for PVCs).
async fn host_has_resource_claim(f: &Follow<'_>, dep: &Dep) -> Result<bool, FollowError> {
    Api::<ResourceClaim>::namespaced(f.host.clone(), &dep.namespace)
        .get_metadata_opt(&dep.name)
        .await
        .map(|m| m.is_some())
        .map_err(api_err(format!("reading host {dep}")))
}

/// Deletes the unused copy `dep` if it is this host's; true once it is gone.
async fn delete_unused(f: &Follow<'_>, dep: &Dep) -> Result<bool, FollowError> {
    let (client, ns) = (f.leaf.client.clone(), dep.namespace.as_str());
    match dep.kind {
        DepKind::ConfigMap => delete_ours(f, &Api::<ConfigMap>::namespaced(client, ns), dep).await,
        DepKind::Secret => delete_ours(f, &Api::<Secret>::namespaced(client, ns), dep).await,
        DepKind::ServiceAccount => {
            delete_ours(f, &Api::<ServiceAccount>::namespaced(client, ns), dep).await
        }
        DepKind::Claim => {
            delete_ours(
                f,
                &Api::<PersistentVolumeClaim>::namespaced(client, ns),
                dep,
            )
            .await
        }
        DepKind::ResourceClaimTemplate => {
            delete_ours(
                f,
                &Api::<ResourceClaimTemplate>::namespaced(client, ns),
                dep,
            )
            .await
        }
        DepKind::ResourceClaim => {
            delete_ours(f, &Api::<ResourceClaim>::namespaced(client, ns), dep).await
        }
    }
}

/// Deletes the leaf's `dep` if it is this host's copy (by its UID, so an object recreated
/// meanwhile under that name is not touched); true once it is gone or not ours to delete.
async fn delete_ours<K>(f: &Follow<'_>, api: &Api<K>, dep: &Dep) -> Result<bool, FollowError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let uid = match ours_or_absent(api, f.leaf, dep).await? {
        Some(Some(uid)) => uid,
        // Absent, or someone else's: nothing of ours to delete.
        _ => return Ok(true),
    };
    if !(f.may_write)() {
        return Err(FollowError::NotLeader);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&dep.name, &dp).await {
        Ok(_) => {
            info!(cluster = %f.leaf.name, object = %dep, "leaf copy deleted: no pod there refers to it any more");
            Ok(true)
        }
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => Ok(true),
        Err(e) => Err(api_err(format!("deleting leaf {dep}"))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api;
    use serde_json::json;

    const CM: &str = "/api/v1/namespaces/shop/configmaps";

    type Answer =
        dyn Fn(&str, &str, &serde_json::Value) -> (u16, serde_json::Value) + Send + Sync + 'static;

    /// A host and a leaf answering as their closures say, and a sink whose events go to a
    /// third fake API server, recorded.
    struct World {
        host: Client,
        leaf: Arc<LeafCluster>,
        calls: fake_api::Calls,
        sent: fake_api::Requests,
        objects: HostObjects,
        events: EventSink,
        event_calls: fake_api::Requests,
    }

    fn world(cluster: &str, host: Box<Answer>, leaf: Box<Answer>) -> World {
        let (leaf_client, calls, sent) = fake_api::recording(leaf);
        let (host, _, _) = fake_api::recording(host);
        let (events_client, _, event_calls) = fake_api::recording(|_, _, body| (201, body.clone()));
        World {
            host,
            leaf: LeafCluster::new(cluster.into(), leaf_client, "1".into(), "h1".into()),
            calls,
            sent,
            objects: HostObjects::default(),
            events: EventSink::start(
                events_client,
                "test".into(),
                mcsched_wire::ContentType::Json,
            ),
            event_calls,
        }
    }

    impl World {
        fn follow(&self, complete: bool) -> Follow<'_> {
            Follow {
                host: &self.host,
                leaf: &self.leaf,
                objects: &self.objects,
                host_has_claim: &|_| false,
                grace: Duration::ZERO,
                may_write: &|| true,
                complete,
                events: &self.events,
            }
        }
    }

    /// `apply_ours` of ConfigMap shop/settings (host UID `host-uid`, `immutable`) against
    /// a leaf answering with `answer`.
    async fn write_immutable(
        immutable: bool,
        answer: impl Fn(&str, &str, &serde_json::Value) -> (u16, serde_json::Value)
        + Send
        + Sync
        + 'static,
    ) -> (Result<(), FollowError>, fake_api::Calls, fake_api::Requests) {
        let w = world(
            "east",
            Box::new(|_, _, _| (404, json!({}))),
            Box::new(answer),
        );
        let f = w.follow(false);
        let host_cm: ConfigMap = serde_json::from_value(json!({"metadata": {
            "name": "settings", "namespace": "shop", "uid": "host-uid"}, "data": {"k": "v"},
            "immutable": immutable}))
        .expect("cm");
        let dep = Dep::new(DepKind::ConfigMap, "shop", "settings");
        let r = apply_ours(&f, &dep, &config_map_copy(&w.leaf, &host_cm), immutable).await;
        (r, w.calls.clone(), w.sent.clone())
    }

    async fn write_copy(
        answer: impl Fn(&str, &str, &serde_json::Value) -> (u16, serde_json::Value)
        + Send
        + Sync
        + 'static,
    ) -> (Result<(), FollowError>, fake_api::Calls, fake_api::Requests) {
        write_immutable(false, answer).await
    }

    fn found(labels: serde_json::Value) -> (u16, serde_json::Value) {
        found_copy_of(labels, "host-uid")
    }

    /// The leaf's object shop/settings (UID leaf-uid, resourceVersion 42), a copy of the
    /// host object of UID `host_uid` as its annotation says.
    fn found_copy_of(labels: serde_json::Value, host_uid: &str) -> (u16, serde_json::Value) {
        (
            200,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "settings", "namespace": "shop", "uid": "leaf-uid",
                "resourceVersion": "42", "labels": labels,
                "annotations": {keys::HOST_UID_ANNOTATION: host_uid}}}),
        )
    }

    fn ours() -> serde_json::Value {
        json!({keys::MANAGED_CLUSTER_LABEL: "east", keys::HOST_ID_LABEL: "h1"})
    }

    fn not_found() -> (u16, serde_json::Value) {
        (404, fake_api::status(404, "NotFound", "not found"))
    }

    /// Waits for an event POSTed to `namespace` and returns its body.
    async fn event_in(calls: &fake_api::Requests, namespace: &str) -> serde_json::Value {
        let path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events");
        for _ in 0..200 {
            if let Some(e) = fake_api::sent(calls, "POST", &path).pop() {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no event in {namespace}");
    }

    /// The metrics lines of leaf `cluster`'s copies that fail now.
    fn failing(cluster: &str) -> Vec<String> {
        let prefix = "mcsched_leaf_copy_consecutive_failures{";
        let label = format!("cluster=\"{cluster}\"");
        mcsched_engine::metrics::global()
            .encode()
            .lines()
            .filter(|l| l.starts_with(prefix) && l.contains(&label))
            .map(String::from)
            .collect()
    }

    /// One ConfigMap the leaf refuses (in a namespace sorted first) stops neither the
    /// refresh of a rotated Secret of another namespace nor the collection of an unused
    /// copy; it is named in an event and a metric, and not tried again before its
    /// back-off is over.
    #[tokio::test]
    async fn one_refused_copy_stops_none_of_the_others() {
        let refuse = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let refusing = refuse.clone();
        let host: Box<Answer> = Box::new(|method, path, _| match (method, path) {
            ("GET", "/api/v1/namespaces/a/configmaps/settings") => (
                200,
                json!({"metadata": {"name": "settings", "namespace": "a", "uid": "host-a",
                    "resourceVersion": "5"}, "data": {"k": "v2"}}),
            ),
            ("GET", "/api/v1/namespaces/b/secrets/creds") => (
                200,
                json!({"metadata": {"name": "creds", "namespace": "b", "uid": "host-b",
                    "resourceVersion": "9"}, "data": {"password": "cm90YXRlZA=="}}),
            ),
            // No lists: the objects are read by name.
            _ => (403, fake_api::status(403, "Forbidden", "forbidden")),
        });
        let leaf: Box<Answer> = Box::new(move |method, path, body| {
            let meta = |ns: &str, name: &str| {
                (
                    200,
                    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": {"name": name, "namespace": ns, "uid": format!("leaf-{name}"),
                        "resourceVersion": "3", "labels": {keys::MANAGED_CLUSTER_LABEL: "iso",
                        keys::HOST_ID_LABEL: "h1"}, "annotations": {
                        keys::HOST_UID_ANNOTATION: format!("host-{ns}")}}}),
                )
            };
            match (method, path) {
                ("GET", "/api/v1/namespaces/a/configmaps/settings") => meta("a", "settings"),
                ("GET", "/api/v1/namespaces/b/secrets/creds") => meta("b", "creds"),
                ("GET", "/api/v1/namespaces/z/configmaps/old") => meta("z", "old"),
                ("PATCH", "/api/v1/namespaces/a/configmaps/settings")
                    if refusing.load(std::sync::atomic::Ordering::SeqCst) =>
                {
                    (
                        403,
                        fake_api::status(403, "Forbidden", "admission webhook denied it"),
                    )
                }
                ("PATCH", _) => (200, body.clone()),
                ("DELETE", _) => (200, fake_api::status(200, "", "")),
                _ => not_found(),
            }
        });
        let w = world("iso", host, leaf);
        let settings = Dep::new(DepKind::ConfigMap, "a", "settings");
        let creds = Dep::new(DepKind::Secret, "b", "creds");
        let old = Dep::new(DepKind::ConfigMap, "z", "old");
        for dep in [&settings, &creds, &old] {
            w.leaf.copied.copied(dep.clone(), Some("1".into()));
        }
        let refs = HashSet::from([settings.clone(), creds.clone()]);

        let r = follow(&w.follow(true), &refs).await;
        let writes = fake_api::writes(&w.calls);
        for want in [
            "PATCH /api/v1/namespaces/a/configmaps/settings",
            "PATCH /api/v1/namespaces/b/secrets/creds",
            "DELETE /api/v1/namespaces/z/configmaps/old",
        ] {
            assert!(writes.iter().any(|c| c == want), "{want}: {writes:?}");
        }
        assert!(
            matches!(r, Err(FollowError::Incomplete { failed: 1 })),
            "{r:?}"
        );
        assert_eq!(w.leaf.copied.lock()[&creds].version, "9");
        assert!(!w.leaf.copied.lock().contains_key(&old));
        let event = event_in(&w.event_calls, "a").await;
        assert_eq!(event["reason"], "LeafCopyFailed");
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["regarding"]["kind"], "ConfigMap");
        assert_eq!(event["regarding"]["name"], "settings");
        let note = event["note"].as_str().unwrap_or_default();
        assert!(note.contains("admission webhook denied it"), "{note}");
        assert_eq!(
            failing("iso"),
            [
                "mcsched_leaf_copy_consecutive_failures{cluster=\"iso\",kind=\"ConfigMap\",namespace=\"a\",name=\"settings\"} 1"
            ]
        );

        // At once again: the refused copy is backing off, and asked nothing.
        let before = w.calls.lock().map(|c| c.len()).unwrap_or_default();
        let r = follow(&w.follow(true), &refs).await;
        assert!(r.is_ok(), "{r:?}");
        let after: Vec<String> = w
            .calls
            .lock()
            .map(|c| c[before..].to_vec())
            .unwrap_or_default();
        assert!(
            !after.iter().any(|c| c.contains("/a/configmaps/settings")),
            "{after:?}"
        );

        // Its back-off over, the leaf takes it: in step, and no longer named.
        refuse.store(false, std::sync::atomic::Ordering::SeqCst);
        if let Some(e) = w.leaf.copied.lock().get_mut(&settings) {
            e.retry_at = Some(Instant::now());
        }
        let r = follow(&w.follow(true), &refs).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(w.leaf.copied.lock()[&settings].version, "5");
        assert!(failing("iso").is_empty(), "{:?}", failing("iso"));
    }

    #[test]
    fn a_failing_copy_backs_off_doubling_up_to_its_cap() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 320, 320]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    /// An immutable host object deleted and created again: this host's copy of the
    /// earlier one is deleted as it was read (its UID and resourceVersion) and created
    /// anew, never updated; a copy changed since is not deleted, and one that is not this
    /// host's is not touched.
    #[tokio::test]
    async fn an_immutable_object_recreated_on_the_host_is_replaced_in_the_leaf() {
        let (r, calls, sent) = write_immutable(true, |method, _, body| match method {
            "GET" => found_copy_of(ours(), "earlier-host-uid"),
            "DELETE" => (200, fake_api::status(200, "Success", "")),
            _ => (201, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            fake_api::writes(&calls),
            [format!("DELETE {CM}/settings"), format!("POST {CM}")]
        );
        let deleted = &fake_api::sent(&sent, "DELETE", "/settings")[0];
        assert_eq!(deleted["preconditions"]["uid"], "leaf-uid");
        assert_eq!(deleted["preconditions"]["resourceVersion"], "42");
        let created = &fake_api::sent(&sent, "POST", CM)[0];
        assert_eq!(created["immutable"], true);
        assert_eq!(
            created["metadata"]["annotations"][keys::HOST_UID_ANNOTATION],
            "host-uid"
        );

        // The copy changed between its read and the delete: nothing deleted, nor created.
        let (r, calls, _) = write_immutable(true, |method, path, _| match method {
            "GET" => found_copy_of(ours(), "earlier-host-uid"),
            "DELETE" => (409, fake_api::status(409, "Conflict", path)),
            _ => (201, json!({})),
        })
        .await;
        assert!(matches!(r, Err(FollowError::Changed { .. })), "{r:?}");
        assert_eq!(fake_api::writes(&calls), [format!("DELETE {CM}/settings")]);

        // Someone else's of that name: neither deleted nor written.
        let (r, calls, _) = write_immutable(true, |method, _, body| match method {
            "GET" => found_copy_of(json!({keys::HOST_ID_LABEL: "another-host"}), "x"),
            _ => (200, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert!(fake_api::writes(&calls).is_empty());

        // The same host object (only its labels changed): updated, not replaced.
        let (r, calls, _) = write_immutable(true, |method, _, body| match method {
            "GET" => found_copy_of(ours(), "host-uid"),
            _ => (200, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(fake_api::writes(&calls), [format!("PATCH {CM}/settings")]);

        // A mutable host object in place of an immutable one: the leaf refuses the update
        // of the immutable copy, which is replaced.
        let (r, calls, _) = write_immutable(false, |method, path, body| match method {
            "GET" => found_copy_of(ours(), "earlier-host-uid"),
            "PATCH" => (
                422,
                fake_api::status(422, "Invalid", &format!("{path}: field is immutable")),
            ),
            "DELETE" => (200, fake_api::status(200, "Success", "")),
            _ => (201, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            fake_api::writes(&calls),
            [
                format!("PATCH {CM}/settings"),
                format!("DELETE {CM}/settings"),
                format!("POST {CM}")
            ]
        );
    }

    #[tokio::test]
    async fn a_copy_is_created_and_one_made_meanwhile_is_not_taken_over() {
        // Absent when read, then someone's of that name is there when created.
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let (r, calls, _) = write_copy(move |method, path, _| match method {
            "GET" if reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 => {
                (404, fake_api::status(404, "NotFound", "not found"))
            }
            "GET" => found(json!({"team": "theirs"})),
            "POST" => (409, fake_api::status(409, "AlreadyExists", path)),
            _ => (500, json!({})),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            fake_api::writes(&calls),
            [format!("POST {CM}")],
            "created, never patched over theirs"
        );

        // Absent: created, with this host's marks, and nothing else.
        let (r, calls, sent) = write_copy(|method, _, body| match method {
            "GET" => (404, fake_api::status(404, "NotFound", "not found")),
            _ => (201, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(fake_api::writes(&calls), [format!("POST {CM}")]);
        let created = fake_api::sent(&sent, "POST", CM);
        assert_eq!(created[0]["metadata"]["labels"][keys::HOST_ID_LABEL], "h1");
    }

    #[tokio::test]
    async fn this_hosts_copy_is_updated_only_as_it_was_read() {
        let (r, calls, sent) = write_copy(move |method, _, body| match method {
            "GET" => found(ours()),
            _ => (200, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(fake_api::writes(&calls), [format!("PATCH {CM}/settings")]);
        let patch = &fake_api::sent(&sent, "PATCH", "/settings")[0];
        assert_eq!(patch["metadata"]["uid"], "leaf-uid");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        // Someone else's of that name: not written at all.
        let (r, calls, _) = write_copy(|method, _, body| match method {
            "GET" => found(json!({keys::HOST_ID_LABEL: "another-host"})),
            _ => (200, body.clone()),
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert!(fake_api::writes(&calls).is_empty());
    }

    #[test]
    fn a_pod_refers_to_its_config_maps_secrets_and_claims_in_its_namespace() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "envFrom": [{"secretRef": {"name": "creds"}}]}],
                "volumes": [
                    {"name": "a", "configMap": {"name": "settings"}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": "data"}}],
                "resourceClaims": [
                    {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                    {"name": "nic", "resourceClaimName": "nic"}]}
        }))
        .expect("pod");
        let mut refs: Vec<Dep> = references(&pod).collect();
        refs.sort();
        assert_eq!(
            refs,
            [
                Dep::new(DepKind::ConfigMap, "shop", "settings"),
                Dep::new(DepKind::Secret, "shop", "creds"),
                Dep::new(DepKind::Claim, "shop", "data"),
                Dep::new(DepKind::ResourceClaimTemplate, "shop", "one-gpu"),
                Dep::new(DepKind::ResourceClaim, "shop", "nic"),
            ]
        );
        let copied = Copied::default();
        copied.copied(refs[0].clone(), Some("7".into()));
        copied.copied(refs[0].clone(), Some("8".into()));
        assert_eq!(copied.len(), 1);
        assert_eq!(copied.lock()[&refs[0]].version, "8");
    }

    #[test]
    fn unused_copies_go_after_the_grace_and_stateful_ones_only_with_their_host_object() {
        let grace = Duration::from_secs(60);
        let (early, late) = (Duration::from_secs(59), Duration::from_secs(60));
        for kind in [
            DepKind::ConfigMap,
            DepKind::Secret,
            DepKind::ServiceAccount,
            DepKind::ResourceClaimTemplate,
        ] {
            assert!(!collectable(kind, early, grace, false, false), "{kind:?}");
            assert!(collectable(kind, late, grace, false, false), "{kind:?}");
            // Its host object is no reason to keep a copy of data the host has.
            assert!(collectable(kind, late, grace, false, true), "{kind:?}");
            assert!(!collectable(kind, late, grace, true, false), "{kind:?}");
        }
        for kind in [DepKind::Claim, DepKind::ResourceClaim] {
            assert!(!collectable(kind, late, grace, false, true), "{kind:?}");
            assert!(collectable(kind, late, grace, false, false), "{kind:?}");
            assert!(!collectable(kind, early, grace, false, false), "{kind:?}");
            assert!(!collectable(kind, late, grace, true, false), "{kind:?}");
        }
    }

    /// Unreferenced copies of a ResourceClaimTemplate and of two ResourceClaims: the
    /// template goes; the claim whose host claim is still there stays (and its refusal, an
    /// allocation in the host, is no longer named), and the one whose host claim is gone
    /// goes. A ResourceClaimTemplate a pod refers to is read by name and its copy applied.
    #[tokio::test]
    async fn unused_dra_copies_go_but_a_claim_only_once_its_host_claim_is_gone() {
        const RC: &str = "/apis/resource.k8s.io/v1/namespaces/shop/resourceclaims";
        const RCT: &str = "/apis/resource.k8s.io/v1/namespaces/shop/resourceclaimtemplates";
        let host: Box<Answer> = Box::new(|method, path, _| match (method, path) {
            ("GET", p) if p == format!("{RC}/kept") => (
                200,
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": {"name": "kept", "namespace": "shop", "uid": "host-kept"}}),
            ),
            ("GET", p) if p == format!("{RCT}/used") => (
                200,
                json!({"metadata": {"name": "used", "namespace": "shop", "uid": "host-used",
                    "resourceVersion": "4"},
                    "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                        "exactly": {"deviceClassName": "gpus"}}]}}}}),
            ),
            _ => not_found(),
        });
        let leaf: Box<Answer> = Box::new(|method, path, body| match method {
            "GET" if path.contains("/resourceclaimtemplates/used") => not_found(),
            "GET" => {
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                (
                    200,
                    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": {"name": name, "namespace": "shop", "uid": format!("leaf-{name}"),
                        "resourceVersion": "3", "labels": {keys::MANAGED_CLUSTER_LABEL: "dra",
                        keys::HOST_ID_LABEL: "h1"}}}),
                )
            }
            "DELETE" => (200, fake_api::status(200, "Success", "")),
            _ => (201, body.clone()),
        });
        let w = world("dra", host, leaf);
        let template = Dep::new(DepKind::ResourceClaimTemplate, "shop", "old");
        let kept = Dep::new(DepKind::ResourceClaim, "shop", "kept");
        let gone = Dep::new(DepKind::ResourceClaim, "shop", "gone");
        let used = Dep::new(DepKind::ResourceClaimTemplate, "shop", "used");
        for dep in [&template, &kept, &gone] {
            w.leaf.copied.copied(dep.clone(), None);
        }
        // `kept` was refused (allocated in the host) while a pod wanted it.
        let refused = FollowError::NotCopied(NotCopied::AllocatedInHost {
            claim: "shop/kept".into(),
        });
        copy_failed(&w.leaf, &w.events, &kept, &refused);
        if let Some(e) = w.leaf.copied.lock().get_mut(&kept) {
            e.retry_at = None;
        }
        assert_eq!(failing("dra").len(), 1, "{:?}", failing("dra"));

        let r = follow(&w.follow(true), &HashSet::from([used.clone()])).await;
        assert!(r.is_ok(), "{r:?}");
        let mut writes = fake_api::writes(&w.calls);
        writes.sort();
        assert_eq!(
            writes,
            [
                format!("DELETE {RC}/gone"),
                format!("DELETE {RCT}/old"),
                format!("POST {RCT}"),
            ]
        );
        let created = &fake_api::sent(&w.sent, "POST", RCT)[0];
        assert_eq!(created["kind"], "ResourceClaimTemplate");
        assert_eq!(created["metadata"]["labels"][keys::HOST_ID_LABEL], "h1");
        assert_eq!(
            created["metadata"]["annotations"][keys::HOST_UID_ANNOTATION],
            "host-used"
        );
        assert_eq!(
            created["spec"]["spec"]["devices"]["requests"][0]["name"],
            "gpu"
        );
        let copied = w.leaf.copied.lock();
        assert!(copied.contains_key(&kept), "kept for its allocation");
        assert!(!copied.contains_key(&gone) && !copied.contains_key(&template));
        assert_eq!(copied[&used].version, "4");
        drop(copied);
        assert!(failing("dra").is_empty(), "{:?}", failing("dra"));
    }
}
