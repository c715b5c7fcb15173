//! Why no node was found, summarised the way kube-scheduler's `FitError` prints it.

use std::collections::{BTreeMap, HashSet};

use super::NodeStatuses;

#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    pub node_statuses: NodeStatuses,
    /// Plugins that rejected the pod somewhere: the queue requeues on their events.
    pub unschedulable_plugins: HashSet<&'static str>,
    /// Plugins that answered Pending (kube's PendingPlugins): the pod is requeued on their
    /// events without backoff, having waited for an answer, not wasted a cycle.
    pub pending_plugins: HashSet<&'static str>,
    /// A PreFilter's rejection, which stands for every node.
    pub pre_filter_msg: Option<String>,
    pub post_filter_msg: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct FitError {
    pub num_all_nodes: usize,
    pub diagnosis: Diagnosis,
}

impl std::fmt::Display for FitError {
    /// `0/N nodes are available: <count> <reason>, ....` with every reason of every node
    /// counted and the "count reason" strings sorted, then the PostFilter's message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.num_all_nodes == 0 && self.diagnosis.pre_filter_msg.is_none() {
            // kube-scheduler's ErrNoNodesAvailable.
            return write!(f, "no nodes available to schedule pods");
        }
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        if let Some(msg) = &self.diagnosis.pre_filter_msg {
            write!(f, " {msg}.")?;
        } else {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            for status in self.diagnosis.node_statuses.values() {
                for r in &status.reasons {
                    *reasons.entry(r.as_ref()).or_default() += 1;
                }
            }
            let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            if !parts.is_empty() {
                write!(f, " {}.", parts.join(", "))?;
            }
        }
        // PostFilter's message as it is (preemption's own FitError ends in a period).
        if let Some(msg) = &self.diagnosis.post_filter_msg {
            write!(f, " {msg}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Status;

    #[test]
    fn message_matches_kube_scheduler() {
        let mut d = Diagnosis::default();
        d.node_statuses
            .insert("a".into(), Status::unschedulable("Insufficient cpu"));
        d.node_statuses.insert(
            "b".into(),
            Status::new(
                crate::framework::Code::Unschedulable,
                vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            ),
        );
        d.node_statuses.insert(
            "c".into(),
            Status::unresolvable("node(s) didn't match Pod's node affinity/selector"),
        );
        d.post_filter_msg = Some(
            "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
                .into(),
        );
        let e = FitError {
            num_all_nodes: 3,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector, \
             2 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn no_nodes_at_all() {
        let e = FitError::default();
        assert_eq!(e.to_string(), "no nodes available to schedule pods");
    }

    #[test]
    fn pre_filter_rejection_stands_alone() {
        let e = FitError {
            num_all_nodes: 5,
            diagnosis: Diagnosis {
                pre_filter_msg: Some("pod has unbound immediate PersistentVolumeClaims".into()),
                ..Default::default()
            },
        };
        assert_eq!(
            e.to_string(),
            "0/5 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        );
    }
}
