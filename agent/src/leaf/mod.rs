//! Multi-cluster: leaf clusters joined to the host, each seen through its own watches
//! and shown to the host as one virtual node.

pub mod admission;
pub mod check_memory;
pub mod cluster;
pub mod copied;
pub mod cycle;
pub mod dependents;
pub mod grants;
pub mod host_objects;
pub mod join_secret;
pub mod leaf_checks;
pub mod ownership;
pub mod pod_sync;
pub mod registry;
pub mod rescheduling;
pub mod token_renewal;
pub mod transform;
pub mod virtual_node;
pub mod volume_reservations;

/// What a leaf's watches tell the host's scheduling queue.
pub type OnEvent = std::sync::Arc<dyn Fn(crate::framework::ClusterEvent) + Send + Sync>;
