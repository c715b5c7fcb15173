//! Nodes that stand for other nodes: a leaf's virtual node stands for the leaf nodes
//! its pod could run on. Score weighs such a node as the best of them, as one flat cluster
//! of all the nodes would; the plugin that decided Filter on them says, per cycle, which
//! they are, so the framework needs to know nothing of leaves.

use std::sync::Arc;

use super::CycleState;
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

/// CycleState key of the cycle's [`Members`].
const MEMBERS_KEY: &str = "framework/members";

/// The nodes one node stands for in this cycle: those that passed Filter there.
#[derive(Clone)]
pub struct MemberNodes {
    /// The cluster they are in, as PreScore reads it (their pods, images, selectors).
    pub snapshot: Snapshot,
    /// The pod as it would run there (what Score reads of it).
    pub pod: Arc<PodInfo>,
    /// The nodes that passed Filter there (at least one).
    pub nodes: NodeList,
    /// The state Filter left there, which PreScore and Score go on from.
    pub state: CycleState,
}

/// Which nodes a node stands for, and where the pod goes among them.
pub trait Members: Send + Sync {
    /// What `node` stands for this cycle, or None when it stands for itself.
    fn members(&self, pod: &PodInfo, node: &NodeInfo) -> Option<MemberNodes>;
    /// If the pod goes to `node`, it runs on `member` (the best scored, ties drawn).
    fn choose(&self, node: &str, member: &str);
    /// How many nodes `node` stands for before Filter (0 when none is known), so that
    /// Filter's search is sized as in one flat cluster of all the nodes; 1 for a node
    /// standing for itself.
    fn size(&self, _node: &NodeInfo) -> usize {
        1
    }
    /// This cycle's search finds `want` feasible nodes in every `of` nodes: a node
    /// standing for others finds its share among its own, as the flat cluster's sample
    /// would hold them. Not called when the search is not sampled (explanations).
    fn sample(&self, _want: usize, _of: usize) {}
}

#[derive(Clone)]
struct Entry(Arc<dyn Members>);

impl CycleState {
    /// Makes `members` the cycle's: Score weighs the nodes it names by their members.
    pub(crate) fn set_members(&mut self, members: Arc<dyn Members>) {
        self.write(MEMBERS_KEY, Entry(members));
    }

    pub(crate) fn members(&self) -> Option<Arc<dyn Members>> {
        self.read::<Entry>(MEMBERS_KEY).map(|e| e.0.clone())
    }
}
