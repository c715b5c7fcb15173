use std::path::PathBuf;

use clap::Parser;

/// mcsched-agent schedules the pods whose spec.schedulerName names it.
#[derive(Debug, Clone, Parser)]
#[command(name = "mcsched-agent", version, about, long_about = None)]
pub struct Args {
    /// Kubeconfig of the cluster to schedule in; without it the in-cluster
    /// ServiceAccount configuration is used.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Context of the kubeconfig to use (its current context when not given).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// The spec.schedulerName this agent serves.
    #[arg(long, default_value = mcsched_shared::keys::DEFAULT_SCHEDULER_NAME, value_name = "NAME")]
    pub scheduler_name: String,

    /// How many bindings may be in flight at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel_bindings: u16,

    /// Log filter in tracing's EnvFilter syntax (RUST_LOG overrides it).
    #[arg(long, default_value = "info", value_name = "FILTER")]
    pub log: String,
}
