//! The last scheduling attempt of each pod, as an explanation, in bounded memory.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use mcsched_shared::explain::{Explanation, NodeExplanation, Outcome};

use crate::framework::FitError;
use crate::framework::runtime::CycleRecord;

/// How many pods' explanations are kept; the oldest goes first.
pub const CAPACITY: usize = 2000;
/// Nodes kept per explanation: the best scored first, then the rejected ones.
pub const MAX_NODES: usize = 200;

#[derive(Default)]
pub struct ExplanationStore {
    inner: Mutex<(HashMap<String, Explanation>, VecDeque<String>)>,
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Feasible nodes by score (best first), then the rejected ones, at most MAX_NODES.
pub fn trimmed(mut nodes: Vec<NodeExplanation>) -> Vec<NodeExplanation> {
    nodes.sort_by(|a, b| {
        b.feasible
            .cmp(&a.feasible)
            .then(b.total_score.cmp(&a.total_score))
            .then(a.node.cmp(&b.node))
    });
    nodes.truncate(MAX_NODES);
    nodes
}

pub fn explanation(
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
        num_feasible_nodes: record.num_feasible,
        nodes: trimmed(record.nodes.clone()),
        durations: record.durations.clone(),
        pre_filter: record.pre_filter.clone(),
        extenders: Vec::new(),
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
            leaf_node: None,
        };
        self.put(key, explanation(scheduler, key, record, outcome, num_all));
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
            explanation(scheduler, key, record, outcome, fit.num_all_nodes),
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
}
