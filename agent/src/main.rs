use anyhow::Context;
use clap::Parser;
use mcsched_agent::args::Args;
use mcsched_agent::scheduler::{self, SchedulerOptions};
use mcsched_agent::{client, telemetry};
use tokio::signal::unix::{SignalKind, signal};
use tracing::info;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init(&args.log);
    let client = client::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let shutdown = async move {
        tokio::select! {
            _ = sigterm.recv() => info!("SIGTERM received"),
            _ = tokio::signal::ctrl_c() => info!("interrupt received"),
        }
    };
    let options = SchedulerOptions {
        scheduler_name: args.scheduler_name,
        parallel_bindings: usize::from(args.parallel_bindings),
    };
    scheduler::run(client, options, shutdown).await?;
    info!("stopped");
    Ok(())
}
