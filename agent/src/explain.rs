//! The last scheduling attempt of each pod, as an explanation, in bounded memory.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use mcsched_shared::explain::{Explanation, NodeExplanation, Outcome, PluginScore, PluginVerdict};

use crate::framework::FitError;
use crate::framework::runtime::CycleRecord;

/// How many pods' explanations are kept; the oldest goes first.
pub const CAPACITY: usize = 2000;
/// Nodes kept per stored explanation: the best scored first, then the rejected ones.
pub const MAX_NODES: usize = 50;

#[derive(Default)]
pub struct ExplanationStore {
    inner: Mutex<(HashMap<String, Explanation>, VecDeque<String>)>,
}

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

/// Per node: every verdict when the cycle recorded them all; else the filters a feasible
/// node passed, or those a rejected node passed up to its first rejection.
pub fn node_explanations(record: &CycleRecord, limit: usize) -> Vec<NodeExplanation> {
    let verdicts_of =
        |name: &str, status: Option<&crate::framework::Status>| -> Vec<PluginVerdict> {
            if let Some(v) = record.verdicts.get(name) {
                return v.clone();
            }
            let mut out = Vec::new();
            for p in &record.filter_plugins {
                match status {
                    Some(s) if s.plugin == *p => {
                        out.push(PluginVerdict {
                            plugin: p.to_string(),
                            code: s.code.to_string(),
                            reasons: s.reasons.clone(),
                        });
                        break;
                    }
                    _ => out.push(success(p)),
                }
            }
            // A rejection by no profile plugin: the leaf check (LeafNodeFit) of a virtual node.
            if let Some(s) = status
                && !s.plugin.is_empty()
                && !record.filter_plugins.contains(&s.plugin)
            {
                out.push(PluginVerdict {
                    plugin: s.plugin.to_string(),
                    code: s.code.to_string(),
                    reasons: s.reasons.clone(),
                });
            }
            out
        };
    // Pick the nodes before building anything: the best totals, then rejected nodes.
    let mut order: Vec<usize> = (0..record.feasible.len()).collect();
    order.sort_by_key(|&j| std::cmp::Reverse(record.totals.get(j).copied().unwrap_or(0)));
    order.truncate(limit);
    let mut nodes: Vec<NodeExplanation> = order
        .into_iter()
        .map(|j| (j, &record.feasible[j]))
        .map(|(j, n)| NodeExplanation {
            node: n.name.clone(),
            feasible: true,
            filters: verdicts_of(&n.name, None),
            scores: record
                .scores
                .iter()
                .map(|c| PluginScore {
                    plugin: c.plugin.to_string(),
                    raw: c.raw.get(j).copied().unwrap_or(0),
                    normalized: c.normalized.get(j).copied().unwrap_or(0),
                    weight: c.weight,
                    weighted: c.normalized.get(j).copied().unwrap_or(0) * c.weight,
                })
                .collect(),
            total_score: record.totals.get(j).copied(),
            leaf_node: record.leaf_nodes.get(&n.name).cloned(),
        })
        .collect();
    let room = limit.saturating_sub(nodes.len());
    nodes.extend(
        record
            .rejected
            .iter()
            .take(room)
            .map(|(n, s)| NodeExplanation {
                node: n.name.clone(),
                feasible: false,
                filters: verdicts_of(&n.name, Some(s)),
                scores: Vec::new(),
                total_score: None,
                leaf_node: None,
            }),
    );
    nodes
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
    Explanation {
        pod: key.to_string(),
        scheduler_name: scheduler.to_string(),
        time: now(),
        outcome,
        num_all_nodes,
        num_evaluated_nodes: record.num_evaluated,
        num_feasible_nodes: record.num_feasible,
        nodes: node_explanations(record, limit),
        durations: record.durations.clone(),
        pre_filter: record.pre_filter.clone(),
        extenders: record.extenders.clone(),
    }
}

impl ExplanationStore {
    fn put(&self, key: &str, e: Explanation) {
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
        self.put(
            key,
            explanation(scheduler, key, record, outcome, num_all, MAX_NODES),
        );
    }

    pub fn record_failure(
        &self,
        scheduler: &str,
        key: &str,
        record: &CycleRecord,
        fit: &FitError,
        nominated_node: Option<String>,
    ) {
        let outcome = Outcome::Unschedulable {
            message: fit.to_string(),
            nominated_node,
        };
        self.put(
            key,
            explanation(
                scheduler,
                key,
                record,
                outcome,
                fit.num_all_nodes,
                MAX_NODES,
            ),
        );
    }

    pub fn get(&self, key: &str) -> Option<Explanation> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.get(key).cloned()
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
    fn a_leaf_rejection_shows_after_the_filters_the_virtual_node_passed() {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "mcsched-west"}}))
                .expect("node");
        let node = std::sync::Arc::new(crate::snapshot::NodeInfo::new(std::sync::Arc::new(node)));
        let record = CycleRecord {
            filter_plugins: vec!["NodeResourcesFit"],
            rejected: vec![(
                node,
                crate::framework::Status::unschedulable("leaf cluster west: no room")
                    .with_plugin(crate::leaf::feasibility::LEAF_NODE_FIT),
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
