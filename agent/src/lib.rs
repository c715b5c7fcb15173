//! mcsched-agent: a Kubernetes scheduler that serves the pods naming its profile in
//! `spec.schedulerName`, on host nodes and on leaf clusters' virtual nodes. The engine
//! (framework, plugins, cache, queue) is `mcsched-engine`; this crate is its runtime.

pub mod api;
pub mod args;
pub mod control;
#[cfg(test)]
pub(crate) mod fake_api;
pub mod multicluster;
pub mod observe;
pub mod placement;
pub mod scheduler;
