//! Multi-cluster: leaf clusters joined to the host, each seen through its own watches
//! and shown to the host as one virtual node.

pub mod feasibility;
pub mod transform;
