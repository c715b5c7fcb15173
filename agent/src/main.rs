use anyhow::Context;
use clap::Parser;
use mcsched_agent::args::Args;
use mcsched_agent::plugins::default_registry;
use mcsched_agent::profiles::{DEFAULT_PLUGINS, Profiles, expand_multi_point};
use mcsched_agent::scheduler::{self, SchedulerOptions};
use mcsched_agent::{client, queue, telemetry};
use tokio::signal::unix::{SignalKind, signal};
use tracing::info;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init(&args.log);
    let registry = default_registry();
    let spec = expand_multi_point(&args.scheduler_name, DEFAULT_PLUGINS, &registry);
    let profiles = Profiles::build(&[spec], &registry, 16)?;
    let client = client::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let shutdown = async move {
        tokio::select! {
            _ = sigterm.recv() => info!("SIGTERM received"),
            _ = tokio::signal::ctrl_c() => info!("interrupt received"),
        }
    };
    let options = SchedulerOptions {
        parallel_bindings: usize::from(args.parallel_bindings),
        initial_backoff: queue::DEFAULT_INITIAL_BACKOFF,
        max_backoff: queue::DEFAULT_MAX_BACKOFF,
    };
    scheduler::run(client, profiles, options, shutdown).await?;
    info!("stopped");
    Ok(())
}
