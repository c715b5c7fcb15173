//! Pod sync: each host pod bound to a virtual node has one copy in its leaf (same
//! namespace and name, labelled with the cluster, annotated with the host pod's UID; its
//! leaf UID recorded on the host pod, which alone tells it from a forgery), with
//! the ConfigMaps, Secrets, PVCs and DRA claims and templates it needs; the copy's status is written back; deletion
//! goes both ways. Reconciled from the two caches, so a restart or a new leader picks up
//! where the last one stopped, creating nothing twice and leaving nothing behind.
//!
//! - `reconcile`: the loop, and what each host pod's copy needs next;
//! - `copy`: creating a copy and what it refers to;
//! - `status`: the copy's status written back to the host pod;
//! - `take_back`: copies taken back (Pending too long, refused) and deletions both ways;
//! - `forged`: leaf pods with this host's marks that are not the recorded copy.

mod copy;
mod forged;
mod reconcile;
mod status;
mod take_back;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};

use crate::control::watch::SharedCache;
use crate::multicluster::registry::Leaves;
use crate::observe::events::EventSink;
use mcsched_engine::leaf::transform;

pub use reconcile::run;

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
    /// The leaf's API server does not know a field of the copy (of the pod, or of a claim
    /// it needs): created with strict field validation, it refused the copy rather than
    /// drop the field.
    #[error(
        "leaf does not serve a field of {object} and refused it (created with strict field validation rather than have the field dropped): {reason}"
    )]
    FieldNotServed { object: String, reason: String },
    /// The leaf's API server knows every field of the copy but drops one (its feature gate
    /// is off there): a dry run of the creation came back without it, so the copy is not
    /// created rather than run without it, and the leaf check keeps pods carrying the field
    /// off the leaf until that is forgotten (the leaf reports another version, or
    /// `kept_fields::FORGET_AFTER` passed).
    #[error(
        "leaf{} drops {path} of {object} (its feature gate is off there, or its admission removes it): a dry run of the creation came back without it, so the copy is not created rather than run without it",
        version_note(.version)
    )]
    FieldDropped {
        object: String,
        path: String,
        version: String,
    },
    /// The leaf has no ServiceAccount of the name the pod runs as, and its admin has not
    /// let mcsched create one there.
    #[error(
        "leaf has no ServiceAccount {object} and mcsched may not create it (kubectl mcsched join cluster ... --service-accounts)"
    )]
    NoServiceAccount { object: String },
    /// The leaf's API server cannot store the copy (over etcd's request limit: the marks
    /// the copy carries grow a pod the host could just store). What was copied for it alone
    /// is deleted again, and a copy as large is not tried there again.
    #[error(
        "leaf refused pod {object}: its copy, {bytes} bytes, is too large to store there ({answer})"
    )]
    TooLarge {
        object: String,
        bytes: usize,
        answer: String,
    },
    /// What the pod refers to is missing on the host: the copy waits, as a kubelet waits.
    #[error("{kind} {object} not found on the host; the leaf copy waits for it")]
    MissingOnHost { kind: &'static str, object: String },
    /// The leaf holds this host's copy of an earlier host claim (a PersistentVolumeClaim or
    /// a ResourceClaim) of the same name: it holds that claim's data or allocation, so the
    /// new claim's pod waits until it is collected.
    #[error(
        "leaf has this host's copy of an earlier {kind} {object} (host UID {copied_from:?}, this claim's is {host_uid}); it holds that claim's data or allocation and is not reused: the pod waits until it is deleted, once no leaf pod uses it"
    )]
    StaleClaimCopy {
        kind: &'static str,
        object: String,
        copied_from: String,
        host_uid: String,
    },
    /// A host object the pod names may not be copied (a ResourceClaim allocated in the
    /// host): refused as the leaf's refusals are, and reported as a refused copy.
    #[error(transparent)]
    NotCopied(#[from] crate::multicluster::dra_copies::NotCopied),
    /// The pod's policy's overrides for this leaf cannot apply to the copy.
    #[error("{policy} cannot override the copy: {source}")]
    Override {
        policy: String,
        #[source]
        source: mcsched_shared::overrides::OverrideError,
    },
}

/// ` (v1.37.2)`, or nothing when the leaf's version is not known.
fn version_note(version: &str) -> String {
    if version.is_empty() {
        String::new()
    } else {
        format!(" ({version})")
    }
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

fn condition<'a>(status: Option<&'a PodStatus>, type_: &str) -> Option<&'a PodCondition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
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

#[cfg(test)]
mod decision_tests;
