//! What one cycle found out, for explanations: each plugin's verdicts and scores, kept
//! as the cycle runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use mcsched_shared::explain::{PhaseDuration, PluginVerdict};

use crate::framework::Status;
use crate::snapshot::{NodeInfo, NodeList};

/// What one cycle found out, kept compact (numbers and shared pointers) so recording
/// costs little; explain.rs turns it into an explanation when one is wanted.
#[derive(Default, Clone)]
pub struct CycleRecord {
    pub pre_filter: Vec<PluginVerdict>,
    pub durations: Vec<PhaseDuration>,
    pub num_evaluated: usize,
    /// Of `num_evaluated`, how many were virtual nodes (all those PreFilter allowed).
    pub num_evaluated_virtual: usize,
    pub num_feasible: usize,
    /// Filter plugins that ran (not skipped by their PreFilter), in order.
    pub filter_plugins: Vec<&'static str>,
    /// (extension point, plugin, calls) for `scheduler_plugin_evaluation_total`: PreFilter
    /// and PreScore once unless skipped, Filter and Score once per node called on.
    pub evaluations: Vec<(&'static str, &'static str, u64)>,
    /// Nodes a filter rejected, with the first rejection.
    pub rejected: Vec<(Arc<NodeInfo>, Status)>,
    /// With `record_all`: every filter verdict of every node, by node name.
    pub verdicts: HashMap<String, Vec<PluginVerdict>>,
    /// With `record_all`: the nominated pods Filter counted on a node, by node name.
    pub nominated: HashMap<String, Vec<String>>,
    pub feasible: NodeList,
    /// One column per score plugin, aligned with `feasible`.
    pub scores: Vec<ScoreColumn>,
    pub totals: Vec<i64>,
    /// What each extender answered.
    pub extenders: Vec<mcsched_shared::explain::ExtenderAnswer>,
    /// Virtual node → the leaf node found able to host the pod (filled by the scheduling
    /// cycle from what the leaf check found).
    pub leaf_nodes: HashMap<String, String>,
    /// Virtual node → what the leaf check noted about the copy there.
    pub leaf_notes: HashMap<String, Vec<String>>,
    /// Scored virtual node → how many of its leaf nodes scored as high as the one whose
    /// scores it took (its `leaf_nodes` entry): it counted as that many in the pick.
    pub leaf_ties: HashMap<String, usize>,
    /// The placement policy applied (filled by the scheduling cycle).
    pub policy: Option<mcsched_shared::explain::AppliedPolicy>,
}

#[derive(Debug, Clone)]
pub struct ScoreColumn {
    pub plugin: &'static str,
    pub weight: i64,
    pub raw: Vec<i64>,
    pub normalized: Vec<i64>,
}

impl CycleRecord {
    pub(super) fn timed(&mut self, point: &str, started: Instant) {
        self.durations.push(PhaseDuration {
            extension_point: point.to_string(),
            micros: started.elapsed().as_micros() as u64,
        });
    }
}

/// What one plugin said of one node, as explanations show it.
pub fn verdict(plugin: &str, s: &Status) -> PluginVerdict {
    PluginVerdict {
        plugin: plugin.to_string(),
        code: s.code.to_string(),
        reasons: s.reasons.iter().map(|r| r.to_string()).collect(),
    }
}
