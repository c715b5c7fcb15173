//! The wire types of an explanation: what every plugin said about every node in one
//! scheduling attempt. The agent produces them; the CLI renders them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `namespace/name`.
    pub pod: String,
    pub scheduler_name: String,
    /// RFC 3339 time of the attempt.
    pub time: String,
    pub outcome: Outcome,
    pub num_all_nodes: usize,
    /// How many nodes Filter looked at (percentageOfNodesToScore may stop it early among
    /// host nodes), virtual nodes included.
    pub num_evaluated_nodes: usize,
    /// Of those, how many were virtual nodes: every one PreFilter allowed is evaluated.
    #[serde(default)]
    pub num_evaluated_virtual_nodes: usize,
    pub num_feasible_nodes: usize,
    pub nodes: Vec<NodeExplanation>,
    /// Extension points in the order they ran, with the time spent in each.
    pub durations: Vec<PhaseDuration>,
    /// A what-if's only: each PreEnqueue plugin's own verdict, as the queue would ask it
    /// before taking the pod in (GangScheduling holds a PodGroup's member until the group
    /// and `minCount` members exist).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_enqueue: Vec<PluginVerdict>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_filter: Vec<PluginVerdict>,
    /// A what-if's only, when a node fits: each Permit plugin's own verdict for the pod on
    /// the chosen node, nothing assumed or allowed (GangScheduling waits until `minCount`
    /// members are scheduled).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permit: Vec<PluginVerdict>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extenders: Vec<ExtenderAnswer>,
    /// The PlacementPolicy or ClusterPlacementPolicy that applied, and how it weighed
    /// the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<AppliedPolicy>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedPolicy {
    /// `PlacementPolicy shop/web`.
    pub name: String,
    /// What it weighed: the cluster group used, groups in use, the division's counts and
    /// the clusters it picked next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Fields in camelCase as every other field of the API (earlier builds wrote `leaf_node`
/// and `nominated_node`: still read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "result"
)]
pub enum Outcome {
    Scheduled {
        node: String,
        #[serde(default, alias = "leaf_node", skip_serializing_if = "Option::is_none")]
        leaf_node: Option<String>,
    },
    Unschedulable {
        message: String,
        #[serde(
            default,
            alias = "nominated_node",
            skip_serializing_if = "Option::is_none"
        )]
        nominated_node: Option<String>,
        /// The pods preemption evicts to make room on the nominated node, `namespace/name`;
        /// those of other namespaces where the caller may not list pods are one count
        /// (see [`is_count`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        victims: Vec<String>,
    },
    Error {
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    pub node: String,
    pub feasible: bool,
    pub filters: Vec<PluginVerdict>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scores: Vec<PluginScore>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_score: Option<i64>,
    /// For a virtual node: the leaf cluster's node that would host the pod. When the
    /// virtual node was scored, the one whose scores `scores` are (but for the plugins
    /// that score a cluster as a whole: ClusterWeights, ClusterCost, ClusterTiers,
    /// ClusterCapacity, PlacementPolicy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_node: Option<String>,
    /// For a scored virtual node: how many of the leaf's nodes scored as high as
    /// `leaf_node`; the virtual node counted as that many nodes in the pick among the top
    /// scores, as they would in one cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_ties: Option<usize>,
    /// For a virtual node: what the copy would use in the leaf that is worth saying (the
    /// ServiceAccount it runs as: the leaf's, or one pod sync creates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaf_notes: Vec<String>,
    /// Pods preemption nominated to this node, of the pod's priority or higher, whose room
    /// Filter kept free for them; counted as the victims are where they may not be named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nominated_pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginVerdict {
    pub plugin: String,
    /// Success, Unschedulable, UnschedulableAndUnresolvable, Error, Skip.
    pub code: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginScore {
    pub plugin: String,
    pub raw: i64,
    pub normalized: i64,
    pub weight: i64,
    pub weighted: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseDuration {
    pub extension_point: String,
    pub micros: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtenderAnswer {
    pub extender: String,
    pub verb: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scores: Vec<(String, i64)>,
}

impl Explanation {
    /// The entries that name other pods: preemption's victims and every node's nominated
    /// pods (keys `ns/name`, or a [`counted`] entry where names were withheld).
    pub fn pod_entries(&self) -> impl Iterator<Item = &str> {
        let victims: &[String] = match &self.outcome {
            Outcome::Unschedulable { victims, .. } => victims,
            _ => &[],
        };
        victims
            .iter()
            .chain(self.nodes.iter().flat_map(|n| n.nominated_pods.iter()))
            .map(String::as_str)
    }
}

/// What stands in a list of pods (victims, nominated pods) for `n` pods of other
/// namespaces whose names the caller may not see (it may not list pods there).
pub fn counted(n: usize) -> String {
    if n == 1 {
        "1 pod in another namespace".to_string()
    } else {
        format!("{n} pods in other namespaces")
    }
}

/// Whether an entry of such a list is a count, not a pod key `namespace/name` (a pod
/// key always has the slash; a count never does).
pub fn is_count(entry: &str) -> bool {
    !entry.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_counts_and_keys_as_keys() {
        assert_eq!(counted(1), "1 pod in another namespace");
        assert_eq!(counted(3), "3 pods in other namespaces");
        assert!(is_count(&counted(3)));
        assert!(!is_count("shop/web"));
    }

    #[test]
    fn outcomes_are_camel_case_on_the_wire_and_old_names_still_read() {
        let o = Outcome::Unschedulable {
            message: "m".into(),
            nominated_node: Some("n1".into()),
            victims: vec!["shop/low".into()],
        };
        assert_eq!(
            serde_json::to_value(&o).expect("serialize"),
            serde_json::json!({"result": "unschedulable", "message": "m", "nominatedNode": "n1", "victims": ["shop/low"]})
        );
        let s = Outcome::Scheduled {
            node: "mcsched-east".into(),
            leaf_node: Some("east-1".into()),
        };
        assert_eq!(
            serde_json::to_value(&s).expect("serialize"),
            serde_json::json!({"result": "scheduled", "node": "mcsched-east", "leafNode": "east-1"})
        );
        let old: Outcome = serde_json::from_value(serde_json::json!(
            {"result": "scheduled", "node": "mcsched-east", "leaf_node": "east-1"}
        ))
        .expect("old name");
        assert_eq!(old, s);
    }
}
