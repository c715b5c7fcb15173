//! Helpers for mcsched's end-to-end tests: real control planes (etcd + kube-apiserver and
//! friends, built from Go modules) and the mcsched binaries as child processes.

pub mod agent;
pub mod api;
pub mod audit;
pub mod cli;
pub mod controlplane;
pub mod dra;
pub mod objects;
pub mod placement;
pub mod process;
pub mod real_node;
pub mod tcp_proxy;
pub mod wait;

pub use agent::Agent;
pub use controlplane::{ControlPlane, ControlPlaneOptions};

use std::path::PathBuf;

/// The repository root, where `make` puts the control plane binary and cargo its targets.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}
