//! Leaves as the leaf-aware plugins see them: the per-cycle views ([`cycle`]) the agent's
//! multi-cluster runtime fills in, and the client-free models those plugins judge by:
//! the leaf's admission, the fields its API server serves and those it drops, the copy a
//! leaf would receive, the checks and grants the agent asks leaves about (the asking
//! itself is the agent's), and owners kept away.

pub mod admission;
pub mod check_memory;
pub mod cycle;
pub mod grants;
pub mod kept_fields;
pub mod leaf_checks;
pub(crate) mod node_search;
pub mod rescheduling;
pub mod served_fields;
pub mod transform;
pub mod unknown_fields;

/// What a leaf's watches tell the host's scheduling queue.
pub type OnEvent = std::sync::Arc<dyn Fn(crate::framework::ClusterEvent) + Send + Sync>;
