//! Multi-cluster: leaf clusters joined to the host, each seen through its own watches
//! and shown to the host as one virtual node.

pub mod ask_grants;
pub mod ask_leaf;
pub mod cluster;
pub mod copied;
mod copy_create;
pub mod dependents;
pub mod device_reservations;
pub mod dra_copies;
mod gang_hold;
pub mod host_objects;
pub mod join_secret;
pub mod ownership;
pub mod pod_sync;
pub mod registry;
pub mod served;
pub mod token_renewal;
pub mod virtual_node;
pub mod volume_reservations;

pub use mcsched_engine::leaf::OnEvent;
