//! Pure data and rules shared by the agent and the CLI: no tokio, no network.

// Public only what another crate uses: anything else is pub(crate).
#![warn(unreachable_pub)]

pub mod api;
pub(crate) mod cluster_affinity;
pub mod config;
pub mod explain;
pub mod keys;
pub mod leaf_kubeconfig;
pub mod manifests;
pub(crate) mod names;
pub mod node;
pub mod overrides;
pub mod pod;
pub mod pod_group_versions;
pub mod pod_references;
pub mod policy;
pub mod quantity;
pub mod resources;
pub mod selectors;
pub mod taints;
pub mod yaml;
