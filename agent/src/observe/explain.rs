//! The last scheduling attempt of each pod, as an explanation, in bounded memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use mcsched_shared::explain::{Explanation, NodeExplanation, Outcome, PluginScore, PluginVerdict};

use mcsched_engine::framework::FitError;
use mcsched_engine::framework::runtime::{CycleRecord, verdict};

/// How many pods' explanations are kept; the oldest goes first.
pub const CAPACITY: usize = 2000;
/// Nodes kept per stored explanation: the best scored first, then the rejected ones.
pub const MAX_NODES: usize = 50;

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

fn success(plugin: &str) -> PluginVerdict {
    PluginVerdict {
        plugin: plugin.to_string(),
        code: "Success".into(),
        reasons: Vec::new(),
    }
}

/// One node of an explanation as stored: what the wire form repeats for every node (the
/// filter plugins a feasible node passed, the score plugins' names and weights) is kept
/// once per explanation and put back on request. 2000 explanations of 50 nodes each
/// otherwise hold some 20 strings per node, hundreds of MiB on a large cluster. Node names
/// are the NodeInfos' own, shared; the scores of all nodes are one array of
/// the explanation (`StoredNodes::scores`), and what few nodes have sits in one optional box.
#[derive(Debug, Clone)]
struct StoredNode {
    node: Arc<str>,
    feasible: bool,
    total_score: Option<i64>,
    /// None: passed every filter of the cycle's `filter_plugins`.
    filters: Option<Box<[PluginVerdict]>>,
    rare: Option<Box<RareParts>>,
}

/// Set only for virtual nodes and nodes with nominated pods.
#[derive(Debug, Clone, Default)]
struct RareParts {
    leaf_node: Option<String>,
    leaf_ties: Option<usize>,
    leaf_notes: Vec<String>,
    nominated_pods: Vec<String>,
}

impl RareParts {
    fn boxed(
        leaf_node: Option<&String>,
        leaf_ties: Option<usize>,
        leaf_notes: Option<&Vec<String>>,
        nominated_pods: Option<&Vec<String>>,
    ) -> Option<Box<Self>> {
        let nominated_pods = nominated_pods.cloned().unwrap_or_default();
        (leaf_node.is_some() || !nominated_pods.is_empty()).then(|| {
            Box::new(RareParts {
                leaf_node: leaf_node.cloned(),
                leaf_ties,
                leaf_notes: leaf_notes.cloned().unwrap_or_default(),
                nominated_pods,
            })
        })
    }
}

/// The nodes of an explanation and their scores: feasible node `i` (they come first) has
/// its (raw, normalized) per score column at `scores[i * columns..(i + 1) * columns]`.
#[derive(Debug, Clone)]
struct StoredNodes {
    nodes: Vec<StoredNode>,
    scores: Box<[(i64, i64)]>,
}

#[derive(Debug, Clone)]
struct Stored {
    /// The explanation without its nodes.
    head: Explanation,
    filter_plugins: Vec<&'static str>,
    /// Score plugins and weights, the columns of `StoredNodes::scores`.
    score_columns: Vec<(&'static str, i64)>,
    nodes: StoredNodes,
}

impl Stored {
    fn expand(&self) -> Explanation {
        let mut e = self.head.clone();
        e.nodes = self.nodes.expand(&self.filter_plugins, &self.score_columns);
        e
    }
}

impl StoredNodes {
    fn expand(
        &self,
        filter_plugins: &[&'static str],
        score_columns: &[(&'static str, i64)],
    ) -> Vec<NodeExplanation> {
        let columns = score_columns.len();
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let scores = if n.feasible {
                    self.scores
                        .get(i * columns..(i + 1) * columns)
                        .unwrap_or_default()
                } else {
                    &[]
                };
                expand_node(n, scores, filter_plugins, score_columns)
            })
            .collect()
    }
}

fn expand_node(
    n: &StoredNode,
    scores: &[(i64, i64)],
    filter_plugins: &[&'static str],
    score_columns: &[(&'static str, i64)],
) -> NodeExplanation {
    NodeExplanation {
        node: n.node.to_string(),
        feasible: n.feasible,
        filters: n.filters.as_deref().map_or_else(
            || filter_plugins.iter().map(|p| success(p)).collect(),
            <[PluginVerdict]>::to_vec,
        ),
        scores: score_columns
            .iter()
            .zip(scores.iter())
            .map(|(&(plugin, weight), &(raw, normalized))| PluginScore {
                plugin: plugin.to_string(),
                raw,
                normalized,
                weight,
                weighted: normalized * weight,
            })
            .collect(),
        total_score: n.total_score,
        leaf_node: n.rare.as_ref().and_then(|r| r.leaf_node.clone()),
        leaf_ties: n.rare.as_ref().and_then(|r| r.leaf_ties),
        leaf_notes: n
            .rare
            .as_ref()
            .map(|r| r.leaf_notes.clone())
            .unwrap_or_default(),
        nominated_pods: n
            .rare
            .as_ref()
            .map(|r| r.nominated_pods.clone())
            .unwrap_or_default(),
    }
}

/// Per node: every verdict when the cycle recorded them all; else the filters a feasible
/// node passed, or those a rejected node passed up to its first rejection.
fn stored_nodes(record: &CycleRecord, limit: usize) -> StoredNodes {
    let verdicts_of = |name: &str,
                       status: Option<&mcsched_engine::framework::Status>|
     -> Option<Box<[PluginVerdict]>> {
        if let Some(v) = record.verdicts.get(name) {
            return Some(v.as_slice().into());
        }
        let status = status?;
        let mut out = Vec::new();
        for p in &record.filter_plugins {
            if status.plugin == *p {
                out.push(verdict(p, status));
                return Some(out.into_boxed_slice());
            }
            out.push(success(p));
        }
        // A rejection after the profile's filters all passed: an extender's.
        if !status.plugin.is_empty() {
            out.push(verdict(status.plugin, status));
        }
        Some(out.into_boxed_slice())
    };
    // Pick the nodes before building anything: the best totals, then rejected nodes.
    let mut order: Vec<usize> = (0..record.feasible.len()).collect();
    // Best total first, ties in node order; only the first `limit` are sorted (hundreds
    // of feasible nodes per cycle, 50 kept).
    let key = |&j: &usize| {
        (
            std::cmp::Reverse(record.totals.get(j).copied().unwrap_or(0)),
            j,
        )
    };
    if limit > 0 && order.len() > limit {
        order.select_nth_unstable_by_key(limit - 1, key);
    }
    order.truncate(limit);
    order.sort_unstable_by_key(key);
    let columns = record.scores.len();
    let mut scores = Vec::with_capacity(order.len() * columns);
    let mut nodes: Vec<StoredNode> = order
        .into_iter()
        .map(|j| {
            let n = &record.feasible[j];
            scores.extend(record.scores.iter().map(|c| {
                (
                    c.raw.get(j).copied().unwrap_or(0),
                    c.normalized.get(j).copied().unwrap_or(0),
                )
            }));
            StoredNode {
                node: n.name.clone(),
                feasible: true,
                total_score: record.totals.get(j).copied(),
                filters: verdicts_of(&n.name, None),
                rare: RareParts::boxed(
                    record.leaf_nodes.get(&*n.name),
                    record.leaf_ties.get(&*n.name).copied(),
                    record.leaf_notes.get(&*n.name),
                    record.nominated.get(&*n.name),
                ),
            }
        })
        .collect();
    let room = limit.saturating_sub(nodes.len());
    nodes.extend(record.rejected.iter().take(room).map(|(n, s)| StoredNode {
        node: n.name.clone(),
        feasible: false,
        total_score: None,
        filters: verdicts_of(&n.name, Some(s)),
        rare: RareParts::boxed(None, None, None, record.nominated.get(&*n.name)),
    }));
    StoredNodes {
        nodes,
        scores: scores.into_boxed_slice(),
    }
}

fn score_columns(record: &CycleRecord) -> Vec<(&'static str, i64)> {
    record.scores.iter().map(|c| (c.plugin, c.weight)).collect()
}

pub fn node_explanations(record: &CycleRecord, limit: usize) -> Vec<NodeExplanation> {
    stored_nodes(record, limit).expand(&record.filter_plugins, &score_columns(record))
}

fn head(
    scheduler: &str,
    key: &str,
    record: &CycleRecord,
    outcome: Outcome,
    num_all_nodes: usize,
) -> Explanation {
    Explanation {
        pod: key.to_string(),
        scheduler_name: scheduler.to_string(),
        time: now(),
        outcome,
        num_all_nodes,
        num_evaluated_nodes: record.num_evaluated,
        num_evaluated_virtual_nodes: record.num_evaluated_virtual,
        num_feasible_nodes: record.num_feasible,
        nodes: Vec::new(),
        durations: record.durations.clone(),
        pre_enqueue: Vec::new(),
        pre_filter: record.pre_filter.clone(),
        permit: Vec::new(),
        extenders: record.extenders.clone(),
        policy: record.policy.clone(),
    }
}

/// `limit` bounds the nodes listed (stored explanations keep MAX_NODES; an explanation
/// computed on request lists every node).
pub fn explanation(
    scheduler: &str,
    key: &str,
    record: &CycleRecord,
    outcome: Outcome,
    num_all_nodes: usize,
    limit: usize,
) -> Explanation {
    let mut e = head(scheduler, key, record, outcome, num_all_nodes);
    e.nodes = node_explanations(record, limit);
    e
}

#[derive(Default)]
pub struct ExplanationStore {
    inner: Mutex<(HashMap<String, Stored>, VecDeque<String>)>,
}

impl ExplanationStore {
    fn stored(
        &self,
        scheduler: &str,
        key: &str,
        record: &CycleRecord,
        outcome: Outcome,
        num_all_nodes: usize,
    ) -> Stored {
        Stored {
            head: head(scheduler, key, record, outcome, num_all_nodes),
            filter_plugins: record.filter_plugins.clone(),
            score_columns: score_columns(record),
            nodes: stored_nodes(record, MAX_NODES),
        }
    }

    fn put(&self, key: &str, e: Stored) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(key.to_string(), e).is_none() {
            order.push_back(key.to_string());
            while order.len() > CAPACITY {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
    }

    pub fn record_success(
        &self,
        scheduler: &str,
        key: &str,
        record: &CycleRecord,
        node: &str,
        num_all: usize,
    ) {
        let outcome = Outcome::Scheduled {
            node: node.to_string(),
            leaf_node: record.leaf_nodes.get(node).cloned(),
        };
        let e = self.stored(scheduler, key, record, outcome, num_all);
        self.put(key, e);
    }

    pub fn record_failure(
        &self,
        scheduler: &str,
        key: &str,
        record: &CycleRecord,
        fit: &FitError,
        nominated_node: Option<String>,
        victims: Vec<String>,
    ) {
        let outcome = Outcome::Unschedulable {
            message: fit.to_string(),
            nominated_node,
            victims,
        };
        let e = self.stored(scheduler, key, record, outcome, fit.num_all_nodes);
        self.put(key, e);
    }

    /// A pod group member that fit (on `record`'s nodes) but whose group could not be
    /// placed whole: its nodes as the cycle saw them, the group's reason as the outcome.
    pub fn record_group_failure(
        &self,
        scheduler: &str,
        key: &str,
        record: &CycleRecord,
        message: &str,
        num_all: usize,
    ) {
        let outcome = Outcome::Unschedulable {
            message: message.to_string(),
            nominated_node: None,
            victims: Vec::new(),
        };
        let e = self.stored(scheduler, key, record, outcome, num_all);
        self.put(key, e);
    }

    pub fn get(&self, key: &str) -> Option<Explanation> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.get(key).map(Stored::expand)
    }

    /// Every kept explanation of pods in `namespace` (all namespaces: None).
    pub fn list(&self, namespace: Option<&str>) -> Vec<Explanation> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .0
            .iter()
            .filter(|(key, _)| {
                namespace.is_none_or(|ns| key.split_once('/').is_some_and(|(n, _)| n == ns))
            })
            .map(|(_, e)| e.expand())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> Arc<mcsched_engine::snapshot::NodeInfo> {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("node");
        Arc::new(mcsched_engine::snapshot::NodeInfo::new(Arc::new(node)))
    }

    #[test]
    fn memory_is_bounded() {
        let store = ExplanationStore::default();
        for i in 0..CAPACITY + 10 {
            store.record_success("s", &format!("ns/p{i}"), &CycleRecord::default(), "n", 1);
        }
        assert_eq!(store.len(), CAPACITY);
        assert!(store.get("ns/p0").is_none());
        assert!(store.get(&format!("ns/p{}", CAPACITY + 9)).is_some());
    }

    #[test]
    fn node_names_are_the_node_infos_own() {
        let node = info("old");
        let record = CycleRecord {
            feasible: mcsched_engine::snapshot::NodeList::from_nodes(vec![node.clone()]),
            totals: vec![1],
            ..Default::default()
        };
        let store = ExplanationStore::default();
        store.record_success("s", "ns/a", &record, "old", 1);
        store.record_success("s", "ns/b", &record, "old", 1);
        let node_of = |key: &str| {
            let guard = store.inner.lock().unwrap_or_else(|p| p.into_inner());
            guard.0.get(key).map(|e| e.nodes.nodes[0].node.clone())
        };
        for key in ["ns/a", "ns/b"] {
            assert!(node_of(key).is_some_and(|n| Arc::ptr_eq(&n, &node.name)));
        }
        assert_eq!(
            store
                .get("ns/b")
                .map(|e| e.nodes[0].node.clone())
                .as_deref(),
            Some("old")
        );
        // Evicted explanations let go of the name.
        for i in 0..CAPACITY {
            store.record_success("s", &format!("ns/p{i}"), &CycleRecord::default(), "n", 1);
        }
        assert_eq!(Arc::strong_count(&node.name), 1);
    }

    #[test]
    fn a_stored_explanation_expands_to_the_full_one() {
        let record = CycleRecord {
            filter_plugins: vec!["NodeName", "NodeResourcesFit"],
            feasible: mcsched_engine::snapshot::NodeList::from_nodes(vec![info("a"), info("b")]),
            scores: vec![mcsched_engine::framework::runtime::ScoreColumn {
                plugin: "NodeResourcesFit",
                weight: 2,
                raw: vec![10, 90],
                normalized: vec![11, 100],
            }],
            totals: vec![22, 200],
            leaf_nodes: HashMap::from([("a".to_string(), "leaf-1".to_string())]),
            leaf_ties: HashMap::from([("a".to_string(), 7)]),
            nominated: HashMap::from([("c".to_string(), vec!["ns/high".to_string()])]),
            rejected: vec![(
                info("c"),
                mcsched_engine::framework::Status::unschedulable("Insufficient cpu")
                    .with_plugin("NodeResourcesFit"),
            )],
            ..Default::default()
        };
        let store = ExplanationStore::default();
        store.record_success("s", "ns/p", &record, "b", 3);
        let got = store.get("ns/p").expect("stored");
        let full = explanation("s", "ns/p", &record, got.outcome.clone(), 3, MAX_NODES);
        assert_eq!(got.nodes, full.nodes);
        assert_eq!(got.nodes[0].node, "b");
        assert_eq!(got.nodes[0].scores[0].weighted, 200);
        assert_eq!(got.nodes[0].filters.len(), 2);
        assert_eq!(got.nodes[2].filters[1].code, "Unschedulable");
        assert_eq!(got.nodes[1].scores[0].raw, 10);
        assert_eq!(got.nodes[1].leaf_node.as_deref(), Some("leaf-1"));
        assert_eq!(got.nodes[1].leaf_ties, Some(7));
        assert_eq!(got.nodes[0].leaf_node, None);
        assert_eq!(got.nodes[2].nominated_pods, ["ns/high"]);
        assert!(got.nodes[2].scores.is_empty());
    }

    #[test]
    fn the_best_totals_are_kept_ties_in_node_order() {
        let totals: Vec<i64> = (0..40).map(|i| (i * 7) % 10).collect();
        let record = CycleRecord {
            feasible: mcsched_engine::snapshot::NodeList::from_nodes(
                (0..40).map(|i| info(&format!("n{i}"))).collect(),
            ),
            totals: totals.clone(),
            ..Default::default()
        };
        let mut want: Vec<usize> = (0..40).collect();
        want.sort_by_key(|&j| std::cmp::Reverse(totals[j]));
        for limit in [0, 1, 5, 12, 39, 40, 60] {
            let got: Vec<String> = node_explanations(&record, limit)
                .into_iter()
                .map(|n| n.node)
                .collect();
            let expected: Vec<String> = want.iter().take(limit).map(|j| format!("n{j}")).collect();
            assert_eq!(got, expected, "limit {limit}");
        }
    }

    #[test]
    fn a_leaf_rejection_shows_after_the_filters_the_virtual_node_passed() {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "mcsched-west"}}))
                .expect("node");
        let node = std::sync::Arc::new(mcsched_engine::snapshot::NodeInfo::new(
            std::sync::Arc::new(node),
        ));
        let record = CycleRecord {
            filter_plugins: vec!["NodeResourcesFit"],
            rejected: vec![(
                node,
                mcsched_engine::framework::Status::unschedulable("leaf cluster west: no room")
                    .with_plugin(mcsched_engine::plugins::leaf_node_fit::NAME),
            )],
            ..Default::default()
        };
        let nodes = node_explanations(&record, 10);
        let verdicts: Vec<(&str, &str)> = nodes[0]
            .filters
            .iter()
            .map(|v| (v.plugin.as_str(), v.code.as_str()))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("NodeResourcesFit", "Success"),
                ("LeafNodeFit", "Unschedulable")
            ]
        );
        assert_eq!(nodes[0].filters[1].reasons, ["leaf cluster west: no room"]);
    }
}
