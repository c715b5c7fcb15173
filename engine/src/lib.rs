//! mcsched-engine: the scheduling engine, read as kube-scheduler's `pkg/scheduler` is: the
//! framework and its plugins, the backend (cache, snapshot, queue, nominator, the
//! PlacementPolicy index) and profiles built from configuration. It knows leaves only
//! through [`leaf`]: the views the agent's multi-cluster runtime hands to the leaf-aware
//! plugins each cycle. Its one API client is the binder's (and volume binding's).

// Public only what another crate uses: anything else is pub(crate).
#![warn(unreachable_pub)]

pub(crate) mod affinity;
pub mod cache;
pub mod change;
pub mod config_bridge;
pub mod dra_state;
pub mod framework;
pub mod leaf;
pub mod metrics;
pub mod node_info;
pub(crate) mod node_tree;
pub mod nominator;
pub mod plugins;
pub mod pod_groups;
pub mod pod_selectors;
pub mod policies;
pub mod preemption;
pub mod profiles;
pub mod queue;
pub mod snapshot;
pub(crate) mod topology_counts;
