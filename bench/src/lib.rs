//! mcsched's benchmark harness: scheduler_perf's workloads on real control planes, each
//! run once with kube-scheduler, mcsched-agent and bind-only clients (with and without
//! events), and the results as a Markdown table and a PNG chart.

pub mod bind_only;
pub mod chart;
pub mod freshness;
pub mod machine;
pub mod observe;
pub mod populate;
pub mod procstat;
pub mod report;
pub mod run;
pub mod schedulers;
pub mod stats;
pub mod suite;
pub mod validate;
pub mod workloads;
