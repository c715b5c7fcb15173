//! mcsched-agent: a Kubernetes scheduler that serves the pods naming its profile in
//! `spec.schedulerName`, on host nodes and on leaf clusters' virtual nodes.

pub mod args;
pub mod binder;
pub mod client;
pub mod framework;
pub mod placement;
pub mod plugins;
pub mod queue;
pub mod scheduler;
pub mod snapshot;
pub mod telemetry;
