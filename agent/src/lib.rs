//! mcsched-agent: a Kubernetes scheduler that serves the pods naming its profile in
//! `spec.schedulerName`, on host nodes and on leaf clusters' virtual nodes.

pub mod args;
pub mod client;
pub mod cluster_failover;
pub mod deletion_cost;
pub mod event_recorder;
pub mod events;
pub mod explain;
pub mod extender;
#[cfg(test)]
pub(crate) mod fake_api;
pub mod fence;
pub mod leader;
pub mod leaf;
pub mod lean_object;
pub mod policy_status;
pub mod preemption;
pub mod ratelimit;
pub mod scheduler;
pub mod server;
pub mod telemetry;
pub mod watch;
