//! mcsched-agent: a Kubernetes scheduler that serves the pods naming its profile in
//! `spec.schedulerName`, on host nodes and on leaf clusters' virtual nodes.

pub mod affinity;
pub mod args;
pub mod cache;
pub mod change;
pub mod client;
pub mod cluster_failover;
pub mod config_bridge;
pub mod deletion_cost;
pub mod event_recorder;
pub mod events;
pub mod explain;
pub mod extender;
#[cfg(test)]
pub(crate) mod fake_api;
pub mod fence;
pub mod framework;
pub mod leader;
pub mod leaf;
pub mod lean_object;
pub mod metrics;
pub mod node_info;
pub mod node_tree;
pub mod nominator;
pub mod plugins;
pub mod pod_selectors;
pub mod policies;
pub mod policy_status;
pub mod preemption;
pub mod profiles;
pub mod queue;
pub mod ratelimit;
pub mod scheduler;
pub mod server;
pub mod snapshot;
pub mod telemetry;
pub mod topology_counts;
pub mod watch;
