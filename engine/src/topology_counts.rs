//! Pods counted per topology domain, kept up to date as the cache gains and loses pods, so
//! that InterPodAffinity and PodTopologySpread read counts in each cycle instead of walking
//! every pod on every node (kube-scheduler walks them; the answers are the same).
//!
//! Two kinds of counts:
//! - per **pod query** (namespaces + label selector): the pods a term or a spread
//!   constraint selects, per node and per value of the topology keys asked for. Queries are
//!   kept on demand: a plugin asking for one that is not kept yet scans the pods itself in
//!   that cycle, and the cache keeps the query from its next snapshot on, until nobody has
//!   asked for it for [`UNUSED_FOR`].
//! - per **existing term**: the pod (anti-)affinity terms of the pods in the cache,
//!   identical terms grouped, with how many pods carry each per value of its topology key,
//!   so that an incoming pod is matched against each distinct term once.
//!
//! The maps are persistent (imbl): a snapshot's copy costs nothing, and a cycle's own changes
//! (nominated pods, preemption's what-ifs) copy only the paths they touch.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use mcsched_shared::selectors::label_selector_matches;

use crate::affinity::AffinityTerm;
use crate::node_info::{NodeInfo, PodInfo};

/// A persistent map hashed with foldhash: these maps are read for every node in every
/// cycle, where SipHash was most of the cost. Seeded per process.
pub(crate) type Map<K, V> =
    imbl::GenericHashMap<K, V, foldhash::fast::RandomState, imbl::shared_ptr::DefaultSharedPtr>;

/// Count per topology value (or per node name); zero counts are absent.
pub(crate) type Values = Map<Arc<str>, i64>;

/// A query nobody asked for in this long is no longer kept.
pub(crate) const UNUSED_FOR: Duration = Duration::from_secs(300);
/// At most this many queries are kept; beyond it, plugins scan.
const MAX_QUERIES: usize = 256;

/// Adds `by` to `value`'s count, dropping the entry at zero.
pub(crate) fn bump(values: &mut Values, value: &str, by: i64) {
    let now = values.get(value).copied().unwrap_or(0) + by;
    if now == 0 {
        values.remove(value);
    } else {
        values.insert(Arc::from(value), now);
    }
}

/// The pods a term or a spread constraint selects.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodQuery {
    pub(crate) namespaces: BTreeSet<String>,
    /// None selects nothing.
    pub(crate) selector: Option<LabelSelector>,
    /// PodTopologySpread counts no terminating pod; InterPodAffinity counts them.
    pub(crate) skip_terminating: bool,
}

impl PodQuery {
    /// A term's pods (InterPodAffinity); None for a term whose namespaceSelector is not
    /// folded into its namespaces yet.
    pub(crate) fn of_term(term: &AffinityTerm) -> Option<Self> {
        term.namespace_selector.is_none().then(|| PodQuery {
            namespaces: term.namespaces.iter().cloned().collect(),
            selector: term.selector.clone(),
            skip_terminating: false,
        })
    }

    /// A spread constraint's pods: the pod's namespace, terminating pods left out.
    pub(crate) fn of_constraint(namespace: &str, selector: Option<&LabelSelector>) -> Self {
        PodQuery {
            namespaces: BTreeSet::from([namespace.to_string()]),
            selector: selector.cloned(),
            skip_terminating: true,
        }
    }

    pub(crate) fn matches(&self, pod: &PodInfo) -> bool {
        self.namespaces.contains(&pod.namespace)
            && !(self.skip_terminating && pod.terminating())
            && label_selector_matches(self.selector.as_ref(), pod.labels())
    }

    fn key(&self) -> String {
        let selector = serde_json::to_string(&self.selector).unwrap_or_default();
        let namespaces: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        format!(
            "{}|{}|{selector}",
            u8::from(self.skip_terminating),
            namespaces.join(",")
        )
    }
}

/// The pods one query selects, per node and per value of each topology key asked for.
#[derive(Clone)]
pub(crate) struct QueryCounts {
    query: Arc<PodQuery>,
    pub(crate) per_node: Values,
    per_key: Map<Arc<str>, Values>,
    last_used: Arc<AtomicU64>,
}

impl QueryCounts {
    pub(crate) fn values(&self, key: &str) -> Option<&Values> {
        self.per_key.get(key)
    }

    fn place(&mut self, node: &NodeInfo, by: i64) {
        bump(&mut self.per_node, &node.name, by);
        let labels = node.labels();
        for (key, values) in self.per_key.iter_mut() {
            if let Some(v) = labels.get(&**key) {
                bump(values, v, by);
            }
        }
    }
}

/// The values one topology key takes, with how many nodes carry each.
#[derive(Clone, Default)]
pub(crate) struct Domains {
    pub(crate) values: Values,
    /// Nodes that have the key at all.
    pub(crate) nodes: usize,
}

/// Which of a pod's term lists a term comes from.
// The four lists' names in the pod's spec, each ending in Affinity.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TermKind {
    RequiredAffinity,
    RequiredAntiAffinity,
    PreferredAffinity(i32),
    PreferredAntiAffinity(i32),
}

/// Identical terms of the pods in the cache.
#[derive(Clone)]
pub(crate) struct TermGroup {
    pub(crate) kind: TermKind,
    pub(crate) term: Arc<AffinityTerm>,
    /// Pods carrying the term per value of its topology key (nodes without it: none).
    pub(crate) values: Values,
    carriers: i64,
}

fn term_key(kind: TermKind, t: &AffinityTerm) -> String {
    let mut namespaces: Vec<&str> = t.namespaces.iter().map(String::as_str).collect();
    namespaces.sort_unstable();
    format!(
        "{kind:?}|{}|{}|{}|{}",
        namespaces.join(","),
        serde_json::to_string(&t.selector).unwrap_or_default(),
        t.topology_key,
        serde_json::to_string(&t.namespace_selector).unwrap_or_default(),
    )
}

fn kinded_terms(pod: &PodInfo) -> impl Iterator<Item = (TermKind, &AffinityTerm)> {
    let t = &pod.terms;
    t.required_affinity
        .iter()
        .map(|x| (TermKind::RequiredAffinity, x))
        .chain(
            t.required_anti_affinity
                .iter()
                .map(|x| (TermKind::RequiredAntiAffinity, x)),
        )
        .chain(
            t.preferred_affinity
                .iter()
                .map(|w| (TermKind::PreferredAffinity(w.weight), &w.term)),
        )
        .chain(
            t.preferred_anti_affinity
                .iter()
                .map(|w| (TermKind::PreferredAntiAffinity(w.weight), &w.term)),
        )
}

fn clock() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_secs()
}

type Asked = Arc<Mutex<Vec<(PodQuery, String)>>>;

/// The counts a snapshot carries. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct TopologyCounts {
    queries: Map<String, QueryCounts>,
    domains: Map<Arc<str>, Domains>,
    terms: Map<String, TermGroup>,
    nodes: usize,
    /// Where plugins leave the queries they missed; None where no cache keeps counts
    /// (snapshots built from a node list), and then nothing is kept at all.
    asked: Option<Asked>,
    last_sweep: u64,
}

impl std::fmt::Debug for TopologyCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyCounts")
            .field("kept", &self.kept())
            .field("queries", &self.queries.len())
            .field("terms", &self.terms.len())
            .finish()
    }
}

impl TopologyCounts {
    /// Counts that a cache keeps.
    pub(crate) fn kept_by_cache() -> Self {
        TopologyCounts {
            asked: Some(Asked::default()),
            ..Default::default()
        }
    }

    /// Whether counts are kept at all (the existing pods' terms included).
    pub(crate) fn kept(&self) -> bool {
        self.asked.is_some()
    }

    /// How many pod queries are kept.
    #[cfg(test)]
    pub(crate) fn kept_queries(&self) -> usize {
        self.queries.len()
    }

    /// Nodes in the snapshot.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes
    }

    /// The pods `query` selects, or None when they are not kept (yet): the query is then
    /// asked for, and the caller counts by itself this time. `key`'s values and domains
    /// are kept with it.
    pub(crate) fn query(&self, query: &PodQuery, key: &str) -> Option<&QueryCounts> {
        let asked = self.asked.as_ref()?;
        let found = self
            .queries
            .get(&query.key())
            .filter(|q| q.per_key.contains_key(key));
        match found {
            Some(q) => {
                q.last_used.store(clock(), Ordering::Relaxed);
                Some(q)
            }
            None => {
                if let Ok(mut a) = asked.lock() {
                    a.push((query.clone(), key.to_string()));
                }
                None
            }
        }
    }

    /// The values `key` takes over all nodes; kept for the keys of kept queries.
    pub(crate) fn domains(&self, key: &str) -> Option<&Domains> {
        self.domains.get(key)
    }

    /// The distinct terms of the pods in the cache (empty unless [`Self::kept`]).
    pub(crate) fn terms(&self) -> impl Iterator<Item = &TermGroup> {
        self.terms.values()
    }

    /// `pod` joined (`by` 1) or left (−1) `node`.
    pub(crate) fn place(&mut self, pod: &PodInfo, node: &NodeInfo, by: i64) {
        if !self.kept() {
            return;
        }
        for (_, q) in self.queries.iter_mut() {
            if q.query.matches(pod) {
                q.place(node, by);
            }
        }
        if !pod.has_affinity {
            return;
        }
        let labels = node.labels();
        for (kind, t) in kinded_terms(pod) {
            let key = term_key(kind, t);
            let mut group = self.terms.remove(&key).unwrap_or_else(|| TermGroup {
                kind,
                term: Arc::new(t.clone()),
                values: Values::default(),
                carriers: 0,
            });
            group.carriers += by;
            if let Some(v) = labels.get(&t.topology_key) {
                bump(&mut group.values, v, by);
            }
            if group.carriers > 0 {
                self.terms.insert(key, group);
            }
        }
    }

    /// A node came (`by` 1, its pods with it) or went (−1).
    pub(crate) fn node(&mut self, node: &NodeInfo, by: i64) {
        if !self.kept() {
            return;
        }
        self.nodes = self.nodes.saturating_add_signed(by as isize);
        let labels = node.labels();
        for (key, d) in self.domains.iter_mut() {
            if let Some(v) = labels.get(&**key) {
                bump(&mut d.values, v, by);
                d.nodes = d.nodes.saturating_add_signed(by as isize);
            }
        }
        for pod in &node.pods {
            self.place(pod, node, by);
        }
    }

    /// Keeps what plugins asked for since the last call, and forgets queries unused for
    /// [`UNUSED_FOR`]; true when anything changed.
    pub(crate) fn keep_asked(&mut self, nodes: &[Arc<NodeInfo>]) -> bool {
        let Some(asked) = &self.asked else {
            return false;
        };
        let asked: Vec<(PodQuery, String)> = match asked.lock() {
            Ok(mut a) => std::mem::take(&mut *a),
            Err(_) => return false,
        };
        let mut changed = false;
        for (query, key) in asked {
            changed |= self.keep(query, &key, nodes);
        }
        let now = clock();
        if now >= self.last_sweep + 60 {
            self.last_sweep = now;
            let unused: Vec<String> = self
                .queries
                .iter()
                .filter(|(_, q)| {
                    now.saturating_sub(q.last_used.load(Ordering::Relaxed)) >= UNUSED_FOR.as_secs()
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in &unused {
                self.queries.remove(k);
            }
            let in_use: BTreeSet<Arc<str>> = self
                .queries
                .values()
                .flat_map(|q| q.per_key.keys().cloned())
                .collect();
            let stale: Vec<Arc<str>> = self
                .domains
                .keys()
                .filter(|k| !in_use.contains(*k))
                .cloned()
                .collect();
            for k in &stale {
                self.domains.remove(k);
            }
            changed |= !unused.is_empty() || !stale.is_empty();
        }
        changed
    }

    fn keep(&mut self, query: PodQuery, key: &str, nodes: &[Arc<NodeInfo>]) -> bool {
        let id = query.key();
        let present = self.queries.get(&id).map(|q| q.per_key.contains_key(key));
        if present == Some(true) {
            return false;
        }
        if present.is_none() {
            if self.queries.len() >= MAX_QUERIES {
                return false;
            }
            let mut per_node = Values::default();
            for n in nodes {
                let count = n.pods.iter().filter(|p| query.matches(p)).count() as i64;
                if count > 0 {
                    per_node.insert(n.name.clone(), count);
                }
            }
            self.queries.insert(
                id.clone(),
                QueryCounts {
                    query: Arc::new(query),
                    per_node,
                    per_key: Map::default(),
                    last_used: Arc::new(AtomicU64::new(clock())),
                },
            );
        }
        let key: Arc<str> = Arc::from(key);
        if !self.domains.contains_key(&key) {
            let mut d = Domains::default();
            for n in nodes {
                if let Some(v) = n.labels().get(&*key) {
                    bump(&mut d.values, v, 1);
                    d.nodes += 1;
                }
            }
            self.domains.insert(key.clone(), d);
        }
        if let Some(q) = self.queries.get_mut(&id) {
            let mut values = Values::default();
            for n in nodes {
                if let (Some(&count), Some(v)) = (q.per_node.get(&*n.name), n.labels().get(&*key)) {
                    bump(&mut values, v, count);
                }
            }
            q.per_key.insert(key, values);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_with, pod_with};

    fn node(name: &str, zone: &str) -> NodeInfo {
        node_with(name, |n| {
            n.metadata
                .labels
                .get_or_insert_default()
                .insert("zone".into(), zone.into());
        })
    }

    fn pod(name: &str, app: &str) -> Arc<PodInfo> {
        Arc::new(pod_with(|p| {
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some("default".into());
            p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        }))
    }

    fn web() -> PodQuery {
        PodQuery::of_constraint(
            "default",
            Some(&LabelSelector {
                match_labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            }),
        )
    }

    /// A query is missed once (and asked for), then kept and updated as pods come and go,
    /// ending with the counts a fresh scan gives.
    #[test]
    fn asked_queries_are_kept_and_follow_pods() {
        let mut counts = TopologyCounts::kept_by_cache();
        let mut a = node("a", "z1");
        let b = node("b", "z2");
        a.add_pod(pod("w1", "web"));
        a.add_pod(pod("d1", "db"));
        let mut nodes = vec![Arc::new(a), Arc::new(b)];
        for n in &nodes {
            counts.node(n, 1);
        }
        assert!(counts.query(&web(), "zone").is_none());
        assert!(counts.keep_asked(&nodes));
        let kept = counts.query(&web(), "zone").expect("kept after asking");
        assert_eq!(kept.values("zone").and_then(|v| v.get("z1")), Some(&1));
        assert_eq!(counts.domains("zone").map(|d| d.nodes), Some(2));

        let w2 = pod("w2", "web");
        let b = Arc::make_mut(&mut nodes[1]);
        b.add_pod(w2.clone());
        counts.place(&w2, b, 1);
        let kept = counts.query(&web(), "zone").expect("kept");
        assert_eq!(kept.values("zone").and_then(|v| v.get("z2")), Some(&1));
        assert_eq!(kept.per_node.get("b"), Some(&1));

        // A node going takes its pods' counts with it.
        counts.node(&nodes[0], -1);
        let kept = counts.query(&web(), "zone").expect("kept");
        assert_eq!(kept.values("zone").and_then(|v| v.get("z1")), None);
        assert_eq!(counts.domains("zone").map(|d| d.nodes), Some(1));
    }

    #[test]
    fn nothing_is_kept_outside_a_cache() {
        let counts = TopologyCounts::default();
        assert!(!counts.kept());
        assert!(counts.query(&web(), "zone").is_none());
    }
}
