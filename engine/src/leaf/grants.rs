//! Which namespaces' ConfigMaps and Secrets the agent may read, as the API server's RBAC
//! says (SelfSubjectAccessReview). Pod sync copies what a pod refers to into its leaf; the
//! install grants neither kind cluster-wide, so a pod whose objects the agent may not read
//! is kept off the leaves, with the grant to add named, instead of failing in pod sync.

use std::sync::Arc;
use std::time::Duration;

use super::check_memory::{Asker, CheckMemory, Limits};

/// An answer is asked again after this long, so a grant added or removed is seen.
pub const RECHECK: Duration = Duration::from_secs(30);
/// Namespaces not looked up for this long are no longer rechecked.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// What pod sync copies from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Copied {
    ConfigMaps,
    Secrets,
}

impl Copied {
    pub fn resource(self) -> &'static str {
        match self {
            Copied::ConfigMaps => "configmaps",
            Copied::Secrets => "secrets",
        }
    }

    /// The ClusterRole an operator binds in a namespace to grant it.
    pub(crate) fn reader_role(self) -> String {
        match self {
            Copied::ConfigMaps => mcsched_shared::manifests::configmap_reader_name(),
            Copied::Secrets => mcsched_shared::manifests::secret_reader_name(),
        }
    }
}

/// Whether the agent may read a kind in a namespace: `None` while not known yet (a check
/// is then under way).
pub trait ReadAccess: Send + Sync {
    fn may_read(&self, namespace: &str, kind: Copied) -> Option<bool>;
    /// The namespace of the agent's ServiceAccount, for the grant to suggest.
    fn agent_namespace(&self) -> &str;
}

/// Everything readable: for tests and tools without an API server behind them.
pub(crate) struct ReadAll;

impl ReadAccess for ReadAll {
    fn may_read(&self, _: &str, _: Copied) -> Option<bool> {
        Some(true)
    }
    fn agent_namespace(&self) -> &str {
        mcsched_shared::keys::SYSTEM_NAMESPACE
    }
}

/// How much the memory of answers holds: a key per namespace and kind, so a host's
/// namespaces (a what-if's namespace is one the caller may write in).
pub const LIMITS: Limits = Limits {
    queue: 1024,
    entries: 8192,
    // Dry runs ask as live pods do: they name no namespace but their own.
    what_if_entries: 0,
    recheck: RECHECK,
    forget_after: FORGET_AFTER,
};

/// Answers from SelfSubjectAccessReviews, asked in the background on first use and
/// again every 30 s while wanted; a change of answer is a `LeafChange` for the queue.
pub struct Grants {
    memory: CheckMemory<(String, Copied)>,
    agent_namespace: String,
}

/// The grant an operator adds so that pod sync may copy `kind` from `namespace`.
pub fn grant_command(kind: Copied, namespace: &str, agent_namespace: &str) -> String {
    format!(
        "kubectl create rolebinding mcsched-{} -n {namespace} --clusterrole={} --serviceaccount={agent_namespace}:{}",
        kind.resource(),
        kind.reader_role(),
        mcsched_shared::keys::AGENT_NAME
    )
}

impl Grants {
    /// `agent_namespace`: where the agent's ServiceAccount lives, for the grants it names.
    pub fn new(agent_namespace: String) -> Arc<Self> {
        Self::with_limits(agent_namespace, LIMITS)
    }

    pub fn with_limits(agent_namespace: String, limits: Limits) -> Arc<Self> {
        let m = crate::metrics::global();
        Arc::new(Grants {
            memory: CheckMemory::new(
                limits,
                m.read_access_dropped.clone(),
                m.read_access_evicted.clone(),
            ),
            agent_namespace,
        })
    }

    /// How many answers are remembered, and questions queued.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.memory.remembered().0, self.memory.queued())
    }

    /// The questions asked and the answers remembered, for the agent that asks.
    pub fn memory(&self) -> &CheckMemory<(String, Copied)> {
        &self.memory
    }
}

impl ReadAccess for Grants {
    fn may_read(&self, namespace: &str, kind: Copied) -> Option<bool> {
        self.memory
            .want(&(namespace.to_string(), kind), Asker::Live)
    }

    fn agent_namespace(&self) -> &str {
        &self.agent_namespace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_thousand_namespaces_stay_bounded_and_drops_are_counted() {
        let grants = Grants::new("mcsched-system".into());
        let before = crate::metrics::global().read_access_dropped.get();
        for i in 0..30_000 {
            assert_eq!(grants.may_read(&format!("ns-{i}"), Copied::Secrets), None);
        }
        let (remembered, queued) = grants.sizes();
        assert_eq!(remembered, LIMITS.entries, "answers remembered");
        assert_eq!(queued, LIMITS.queue, "questions queued");
        // The counter is the process's: other tests may add to it meanwhile.
        let dropped = crate::metrics::global().read_access_dropped.get() - before;
        assert!(
            dropped >= (30_000 - LIMITS.queue) as u64,
            "{dropped} drops counted"
        );
    }
}
