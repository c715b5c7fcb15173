//! What the leaf check must know of a leaf that its caches do not hold, asked of the
//! leaf's API server in the background: whether the leaf's admin granted a namespace to
//! mcsched (a SelfSubjectAccessReview: may the leaf account create pods there), and
//! whether an object a pod needs there already exists without mcsched's mark (a name
//! clash: the pod is not sent to that leaf, rather than mount or overwrite the leaf
//! owner's object). Unknown until answered; each answer, and each change of one, is a
//! `LeafChange` that retries the pods waiting on it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcsched_shared::keys;

use super::check_memory::{Asker, CheckMemory, Limits};

/// An answer is asked again after this long, so a grant or a clash that changed is seen.
pub const RECHECK: Duration = Duration::from_secs(30);
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// A kind pod sync copies into a leaf by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Synced {
    ConfigMap,
    Secret,
    Claim,
    /// `resource.k8s.io/v1`, as the two below.
    ResourceClaimTemplate,
    ResourceClaim,
}

impl Synced {
    pub fn kind(self) -> &'static str {
        match self {
            Synced::ConfigMap => "ConfigMap",
            Synced::Secret => "Secret",
            Synced::Claim => "PersistentVolumeClaim",
            Synced::ResourceClaimTemplate => "ResourceClaimTemplate",
            Synced::ResourceClaim => "ResourceClaim",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Question {
    /// May the leaf account create pods in this namespace?
    Granted(String),
    /// Is there an object of this kind, namespace and name that is not this host's?
    Foreign(Synced, String, String),
    /// Is there a ServiceAccount of this namespace and name (anyone's: a copy may run as
    /// the leaf's own account, as any pod of that namespace there may)?
    ServiceAccount(String, String),
    /// May the leaf account create ServiceAccounts in this namespace
    /// (`join --service-accounts`)?
    MayCreateServiceAccounts(String),
}

/// Whether `meta` carries this host's mark for `cluster`: the only objects pod sync may
/// use, change or delete.
pub fn is_ours(meta: &ObjectMeta, cluster: &str, host_id: &str) -> bool {
    let labels = meta.labels.as_ref();
    labels
        .and_then(|l| l.get(keys::MANAGED_CLUSTER_LABEL))
        .is_some_and(|c| c == cluster)
        && labels
            .and_then(|l| l.get(keys::HOST_ID_LABEL))
            .is_some_and(|h| h == host_id)
}

/// A leaf's system namespaces are never granted, whatever its RBAC says: join's
/// admission policy refuses the leaf account every write there, `--all-namespaces`
/// included (whose ClusterRoleBinding a SelfSubjectAccessReview would count).
fn never_granted(q: &Question) -> Option<bool> {
    match q {
        Question::Granted(ns) | Question::MayCreateServiceAccounts(ns)
            if keys::is_protected_leaf_namespace(ns) =>
        {
            Some(false)
        }
        _ => None,
    }
}

/// How much a leaf's checks hold: with the leaf client's rate limit, what a flood of
/// pods or what-ifs naming objects can cost the leaf and the agent.
pub const LIMITS: Limits = Limits {
    queue: 1024,
    entries: 10_000,
    // About fifteen what-ifs of 64 names each (what-if admission's cap).
    what_if_entries: 1_000,
    recheck: RECHECK,
    forget_after: FORGET_AFTER,
};

pub struct LeafChecks {
    cluster: String,
    host_id: String,
    /// Every namespace granted and no clash, without asking: in-process tests.
    settled: bool,
    memory: CheckMemory<Question>,
}

impl LeafChecks {
    pub fn new(cluster: &str, host_id: &str) -> Arc<Self> {
        Self::with_limits(cluster, host_id, LIMITS)
    }

    pub fn with_limits(cluster: &str, host_id: &str, limits: Limits) -> Arc<Self> {
        let (dropped, evicted) = crate::metrics::global().leaf_check_counters(cluster);
        Arc::new(LeafChecks {
            cluster: cluster.to_string(),
            host_id: host_id.to_string(),
            settled: false,
            memory: CheckMemory::new(limits, dropped, evicted),
        })
    }

    /// Checks that answer every namespace granted and no clash, without a leaf behind.
    #[cfg(test)]
    pub(crate) fn settled(cluster: &str) -> Arc<Self> {
        let memory = CheckMemory::new(LIMITS, Default::default(), Default::default());
        // Nothing answers: its questions are never asked.
        let _ = memory.take_receiver();
        Arc::new(LeafChecks {
            cluster: cluster.to_string(),
            host_id: String::new(),
            settled: true,
            memory,
        })
    }

    fn settled_answer(q: &Question) -> bool {
        matches!(
            q,
            Question::Granted(_)
                | Question::ServiceAccount(..)
                | Question::MayCreateServiceAccounts(_)
        )
    }

    /// The answer if known; otherwise None, and the question is asked (for a live pod,
    /// again every 30 s while wanted; for a what-if, once).
    pub fn want(&self, q: &Question, asker: Asker) -> Option<bool> {
        if let Some(a) = never_granted(q) {
            return Some(a);
        }
        if self.settled {
            return Some(Self::settled_answer(q));
        }
        self.memory.want(q, asker)
    }

    /// The answer if known, without asking: for the filters of a cycle whose PreFilter
    /// asked with [`LeafChecks::want`].
    pub fn answer(&self, q: &Question) -> Option<bool> {
        if let Some(a) = never_granted(q) {
            return Some(a);
        }
        if self.settled {
            return Some(Self::settled_answer(q));
        }
        self.memory.known(q)
    }

    /// Records what pod sync itself found (a clash met while copying), so that the next
    /// check knows at once.
    pub fn learned(&self, q: Question, answer: bool) {
        self.memory.learned(q, answer);
    }

    /// How many questions are remembered (all, what-ifs' only) and queued.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize, usize) {
        let (all, what_ifs) = self.memory.remembered();
        (all, what_ifs, self.memory.queued())
    }

    /// The leaf this checks, and the host whose mark is ours there.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// The questions asked and the answers remembered, for the agent that asks.
    pub fn memory(&self) -> &CheckMemory<Question> {
        &self.memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(i: usize) -> Question {
        Question::Foreign(Synced::Secret, "shop".into(), format!("s-{i}"))
    }

    /// A what-if may name 64 objects, but thousands of what-ifs name thousands: the
    /// queue and the memory stay bounded, the drops are counted, and what live pods
    /// wait on is neither pushed out nor delayed behind them.
    #[test]
    fn thirty_thousand_what_if_names_stay_bounded_and_live_answers_stay() {
        let cluster = "flood-what-if";
        let checks = LeafChecks::new(cluster, "h1");
        let granted = Question::Granted("shop".into());
        checks.learned(granted.clone(), true);
        let waiting = secret(0);
        assert_eq!(checks.want(&waiting, Asker::Live), None);
        for i in 1..=30_000 {
            assert_eq!(checks.want(&secret(i), Asker::WhatIf), None);
        }
        let (all, what_ifs, queued) = checks.sizes();
        assert!(all <= LIMITS.entries, "{all} questions remembered");
        assert!(
            what_ifs <= LIMITS.what_if_entries,
            "{what_ifs} what-if questions remembered"
        );
        assert!(queued <= LIMITS.queue, "{queued} questions queued");
        let (dropped, _) = crate::metrics::global().leaf_check_counters(cluster);
        assert_eq!(
            dropped.get(),
            (30_001 - LIMITS.queue) as u64,
            "drops counted"
        );
        assert_eq!(checks.answer(&granted), Some(true), "a live answer is kept");
        assert!(
            checks.memory.unanswered(&waiting),
            "a live question is kept"
        );
        let text = crate::metrics::global().encode();
        let line = format!(
            "mcsched_leaf_check_questions_dropped_total{{cluster=\"{cluster}\"}} {}",
            dropped.get()
        );
        assert!(text.lines().any(|l| l == line), "{line}");
    }

    #[test]
    fn thirty_thousand_live_names_stay_bounded() {
        let cluster = "flood-live";
        let checks = LeafChecks::new(cluster, "h1");
        for i in 0..30_000 {
            checks.want(&secret(i), Asker::Live);
        }
        let (all, _, queued) = checks.sizes();
        assert_eq!(all, LIMITS.entries, "questions remembered");
        assert_eq!(queued, LIMITS.queue, "questions queued");
        let (dropped, evicted) = crate::metrics::global().leaf_check_counters(cluster);
        assert_eq!(dropped.get(), (30_000 - LIMITS.queue) as u64);
        assert_eq!(evicted.get(), (30_000 - LIMITS.entries) as u64);
        assert!(checks.memory.unanswered(&secret(29_999)), "the latest kept");
        assert!(
            !checks.memory.unanswered(&secret(0)),
            "the least recently wanted forgotten"
        );
    }

    #[test]
    fn only_this_hosts_mark_for_this_cluster_is_ours() {
        let meta = |labels: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(json!({"labels": labels})).unwrap()
        };
        assert!(is_ours(
            &meta(json!({"mcsched.io/managed-by-cluster": "east", "mcsched.io/host-id": "h1"})),
            "east",
            "h1"
        ));
        assert!(!is_ours(
            &meta(json!({"mcsched.io/managed-by-cluster": "east", "mcsched.io/host-id": "h2"})),
            "east",
            "h1"
        ));
        assert!(!is_ours(
            &meta(json!({"mcsched.io/managed-by-cluster": "east"})),
            "east",
            "h1"
        ));
        assert!(!is_ours(&meta(json!({})), "east", "h1"));
    }
}
