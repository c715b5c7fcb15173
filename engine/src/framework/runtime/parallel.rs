//! How Filter and Score spread over the pool: nodes in chunks, and a phase on the
//! cycle's own thread when it is small.

use std::sync::Arc;

use mcsched_shared::explain::PluginVerdict;

use super::*;
use crate::framework::Status;
use crate::snapshot::{NodeInfo, Snapshot};

/// Nodes one parallel Filter task checks in a row.
pub(super) const FILTER_CHUNK: usize = 128;
/// How many nodes ahead of the filters a node's fields are asked into the CPU's cache.
pub(super) const PREFETCH_AHEAD: usize = 4;
/// How many nodes ahead the Node object's labels are asked for: nearer than
/// PREFETCH_AHEAD, whose line holds the pointer to them.
pub(super) const PREFETCH_LABELS_AHEAD: usize = 2;
/// Nodes one parallel Score task scores at least.
pub(super) const SCORE_CHUNK: usize = 256;
/// Below this many nodes to check or score, a phase runs on the cycle's own thread: waking
/// the other workers (and their spinning until they sleep again) cost more CPU than the
/// few hundred nodes take, which is what percentageOfNodesToScore leaves in large clusters.
/// Plugins that walk many nodes of their own (a leaf's) use it too.
pub(crate) const PARALLEL_MIN_NODES: usize = 1024;

/// What one chunk of nodes left after Filter.
#[derive(Default)]
pub(super) struct FilterChunk {
    pub(super) processed: usize,
    pub(super) feasible: Vec<u32>,
    pub(super) rejected: Vec<(Arc<NodeInfo>, Status)>,
    pub(super) verdicts: Vec<(String, Vec<PluginVerdict>)>,
    /// Nodes with nominated pods counted, and those pods' keys.
    pub(super) nominated: Vec<(String, Vec<String>)>,
    pub(super) timings: Timings,
    /// `called[n]`: how many times the active filters ran on a node until the n-th
    /// stopped them (the last entry: all passed), so the chunk counts one number per node
    /// instead of one per call.
    pub(super) called: Vec<u64>,
}

impl FilterChunk {
    /// Adds a later chunk's findings, keeping at most `want` feasible nodes in all.
    pub(super) fn merge(&mut self, chunk: FilterChunk, want: usize) {
        self.processed += chunk.processed;
        for (all, n) in self.called.iter_mut().zip(&chunk.called) {
            *all += n;
        }
        self.timings.extend(chunk.timings);
        let room = want.saturating_sub(self.feasible.len());
        self.feasible.extend(chunk.feasible.into_iter().take(room));
        self.rejected.extend(chunk.rejected);
        self.verdicts.extend(chunk.verdicts);
        self.nominated.extend(chunk.nominated);
    }
}

impl Framework {
    /// Whether a cycle on `snapshot` has a phase large enough to run in parallel.
    pub(super) fn parallel(&self, snapshot: &Snapshot, record_all: bool) -> bool {
        record_all
            || num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, snapshot.len())
                >= PARALLEL_MIN_NODES
    }

    /// Runs `f` on the pool when `parallel`; otherwise on this thread: a cycle whose phases
    /// all run serially would pay two thread switches per pod for nothing.
    pub(super) fn on_pool<R: Send>(&self, parallel: bool, f: impl FnOnce() -> R + Send) -> R {
        if parallel { self.pool.install(f) } else { f() }
    }
}
