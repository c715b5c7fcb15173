//! What pod sync copied into one leaf for its pods (ConfigMaps, Secrets, claims, DRA claims and
//! their templates, accounts), with the host version each copy was written from: the state
//! `dependents.rs` keeps the copies by.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DepKind {
    ConfigMap,
    Secret,
    Claim,
    /// An account pod sync created for the leaf's pods (`join --service-accounts`).
    ServiceAccount,
    /// `resource.k8s.io/v1`: the leaf's claim controller makes its pods' claims from it.
    ResourceClaimTemplate,
    /// `resource.k8s.io/v1`, named by a pod: copied unallocated, allocated in the leaf.
    ResourceClaim,
}

/// One object a leaf pod refers to, in the pod's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dep {
    pub kind: DepKind,
    pub namespace: String,
    pub name: String,
}

impl DepKind {
    /// Whether the copy is kept in line with a host object of the same name (claims keep
    /// their leaf data, DRA claims their leaf allocation; accounts have no host object).
    pub fn follows_host(self) -> bool {
        matches!(
            self,
            DepKind::ConfigMap | DepKind::Secret | DepKind::ResourceClaimTemplate
        )
    }

    /// Whether the copy holds state of the leaf's (a volume's data, a device allocation):
    /// deleted only once its host object is gone too, never just for being unused.
    pub fn holds_state(self) -> bool {
        matches!(self, DepKind::Claim | DepKind::ResourceClaim)
    }

    /// The object's apiVersion.
    pub fn api_version(self) -> &'static str {
        match self {
            DepKind::ResourceClaimTemplate | DepKind::ResourceClaim => "resource.k8s.io/v1",
            _ => "v1",
        }
    }

    /// The object's kind as the API names it.
    pub fn api_kind(self) -> &'static str {
        match self {
            DepKind::ConfigMap => "ConfigMap",
            DepKind::Secret => "Secret",
            DepKind::Claim => "PersistentVolumeClaim",
            DepKind::ServiceAccount => "ServiceAccount",
            DepKind::ResourceClaimTemplate => "ResourceClaimTemplate",
            DepKind::ResourceClaim => "ResourceClaim",
        }
    }
}

impl Dep {
    pub fn new(kind: DepKind, namespace: &str, name: &str) -> Self {
        Dep {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for Dep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {}/{}", self.kind, self.namespace, self.name)
    }
}

#[derive(Debug, Default)]
pub(super) struct Entry {
    /// The host object's resourceVersion the copy was last written from.
    pub(super) version: String,
    /// Since when no pod of the leaf refers to it.
    pub(super) unused_since: Option<Instant>,
    /// When the host object was last read by name (no watch holding it).
    pub(super) read_at: Option<Instant>,
    /// Keeping this copy in step failed this many times in a row; it is not tried again
    /// before `retry_at`, so that one object the leaf keeps refusing costs a request per
    /// back-off, not one per round.
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
}

/// The objects pod sync copied into one leaf.
#[derive(Default)]
pub struct Copied {
    entries: Mutex<HashMap<Dep, Entry>>,
}

impl Copied {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Dep, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pod sync wrote `dep` from the host object at `version`.
    pub fn copied(&self, dep: Dep, version: Option<String>) {
        let mut e = self.lock();
        let entry = e.entry(dep).or_default();
        entry.version = version.unwrap_or_default();
        entry.unused_since = None;
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
