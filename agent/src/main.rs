use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use mcsched_agent::args::Args;
use mcsched_agent::leader::{ElectionConfig, Elector};
use mcsched_agent::plugins::default_registry;
use mcsched_agent::profiles::{DEFAULT_PLUGINS, Profiles, expand_multi_point};
use mcsched_agent::scheduler::{self, SchedulerOptions, Shared};
use mcsched_agent::server::{self, ServerOptions};
use mcsched_agent::{client, queue, telemetry};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init(&args.log);
    let registry = default_registry();
    let spec = expand_multi_point(&args.scheduler_name, DEFAULT_PLUGINS, &registry);
    let profiles = Profiles::build(&[(spec, registry)], 16)?;
    let client = client::connect(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
        args.kube_api_qps,
        args.kube_api_burst,
    )
    .await?;
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
    let shared = Shared::new(client, profiles, Vec::new(), &options);

    let handle = axum_server::Handle::new();
    if args.secure_port != 0 {
        let opts = ServerOptions {
            addr: SocketAddr::new(args.bind_address, args.secure_port),
            cert_file: args.tls_cert_file.clone(),
            key_file: args.tls_private_key_file.clone(),
        };
        let (s, h) = (Arc::clone(&shared), handle.clone());
        tokio::spawn(async move {
            if let Err(e) = server::serve(s, opts, h).await {
                error!(error = %e, "HTTPS server stopped");
            }
        });
    }

    let (leader_tx, leader) = tokio::sync::watch::channel(!args.leader_elect);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let election = args.leader_elect.then(|| {
        let cfg = ElectionConfig {
            lease_name: args
                .leader_elect_resource_name
                .clone()
                .unwrap_or_else(|| args.scheduler_name.clone()),
            lease_namespace: args.leader_elect_resource_namespace.clone(),
            identity: format!("{}_{:016x}", scheduler::hostname(), rand::random::<u64>()),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        info!(lease = %cfg.lease_name, namespace = %cfg.lease_namespace, identity = %cfg.identity, "leader election on");
        tokio::spawn(Elector::new(shared.bind_ctx.client.clone(), cfg).run(leader_tx, stop_rx))
    });
    scheduler::run(shared, options, leader, shutdown).await?;
    let _ = stop_tx.send(true);
    if let Some(e) = election {
        // Releasing the lease lets a standby take over at once.
        let _ = tokio::time::timeout(Duration::from_secs(5), e).await;
    }
    handle.graceful_shutdown(Some(std::time::Duration::from_secs(2)));
    info!("stopped");
    Ok(())
}
