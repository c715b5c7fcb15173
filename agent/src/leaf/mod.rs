//! Multi-cluster: leaf clusters joined to the host, each seen through its own watches
//! and shown to the host as one virtual node.

pub mod cluster;
pub mod feasibility;
pub mod leaf_claims;
pub mod pod_sync;
pub mod registry;
pub mod rescheduling;
pub mod transform;
pub mod virtual_node;
