use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use mcsched_agent::api::server::publish::Publisher;
use mcsched_agent::api::server::tls::ServingCert;
use mcsched_agent::api::server::{self, ServerOptions};
use mcsched_agent::args::Args;
use mcsched_agent::control::client;
use mcsched_agent::control::leader::{ElectionConfig, Elector, Ended};
use mcsched_agent::multicluster::registry::{LeafSettings, Leaves};
use mcsched_agent::observe::telemetry::{self, LogFormat};
use mcsched_agent::scheduler::extender;
use mcsched_agent::scheduler::{self, SchedulerOptions, Shared};
use mcsched_engine::config_bridge;
use mcsched_engine::leaf::grants::Grants;
use mcsched_shared::config::{self, SchedulerConfig};
use mcsched_shared::keys;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

/// The configuration to run: the file, or mcsched's default profile (the one `install`
/// ships) with the flags' scheduler name, leader election and client limits.
fn configuration(args: &Args) -> Result<SchedulerConfig, config::ConfigErrors> {
    if let Some(path) = &args.config {
        return config::load_file_with(path, &args.feature_gates);
    }
    let text = config::mcsched_default::text(&args.scheduler_name, None);
    let mut cfg = config::load_with(&text, &args.feature_gates)?;
    let le = &mut cfg.leader_election;
    le.leader_elect = args.leader_elect;
    le.resource_name = args
        .leader_elect_resource_name
        .clone()
        .unwrap_or_else(|| args.scheduler_name.clone());
    le.resource_namespace = args.leader_elect_resource_namespace.clone();
    cfg.client_connection.qps = args.kube_api_qps;
    cfg.client_connection.burst = args.kube_api_burst;
    cfg.client_connection.content_type = args.kube_api_content_type.to_string();
    Ok(cfg)
}

// glibc's allocator hands the large per-cycle buffers (score columns, node lists) back to
// the kernel and faults them in again on the next cycle; mimalloc keeps them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` and `allow_thp` (its option enum's values).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Freed pages go back to the kernel after this long (mimalloc's default is a second; at
/// once costs page faults and TLB shootdowns on every cycle's buffers).
const PURGE_DELAY_MS: std::os::raw::c_long = 50;

/// Keeps the resident set near the live heap. With transparent huge pages, every 2 MiB
/// of the allocator's arenas that a few objects touch is resident in full, and freed
/// pages were given back only a second later: at 5000 nodes the agent was resident at
/// a multiple of its live heap (measured in bench/analysis.md). MIMALLOC_ALLOW_THP and
/// MIMALLOC_PURGE_DELAY in the environment still take precedence.
fn tune_allocator() {
    // SAFETY: prctl(2) with PR_SET_THP_DISABLE takes integer arguments only and changes
    // only this process's huge-page policy; mi_option_set_default only stores an option
    // value.
    unsafe {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
        libmimalloc_sys::mi_option_set_default(MI_OPTION_ALLOW_THP, 0);
        libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}

/// Why the agent exits before it runs: a line of text, or in JSON an error event like
/// every other line (`--logging-format=json`).
fn fatal(args: &Args, message: &str) {
    match args.log.logging_format {
        LogFormat::Text => eprintln!("mcsched-agent: {message}"),
        LogFormat::Json => error!("{message}"),
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let args = Args::parse();
    telemetry::init(&args.log);
    let cfg = match configuration(&args) {
        Ok(c) => c,
        Err(errs) => {
            let source = args
                .config
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "flags".into());
            fatal(&args, &format!("invalid configuration ({source}):\n{errs}"));
            return ExitCode::from(1);
        }
    };
    let settings = LeafSettings {
        pending_timeout: Duration::from_secs(args.leaf_pending_timeout),
        avoid_for: Duration::from_secs(args.leaf_avoid_duration),
        token_renew_after: (args.leaf_token_renew_after > 0)
            .then(|| Duration::from_secs(args.leaf_token_renew_after)),
        unused_copy_grace: Duration::from_secs(args.leaf_unused_copy_grace),
        api_qps: args.leaf_api_qps,
        api_burst: args.leaf_api_burst,
    };
    // Pods go to leaves only when the agent may read what pod sync copies there.
    let grants = Grants::new(args.namespace.clone());
    let leaves = Arc::new(Leaves::with_grants(settings, grants));
    // Building the frameworks checks what the file cannot: that every plugin is ours.
    let profiles = match config_bridge::profiles(&cfg, leaves.clone()) {
        Ok(p) => p,
        Err(e) => {
            fatal(&args, &format!("invalid configuration: {e}"));
            return ExitCode::from(1);
        }
    };
    // kube-scheduler schedules CompositePodGroups (scheduling.k8s.io/v1alpha3) under this
    // alpha gate; mcsched does not, and says so rather than schedule their pods as if the
    // hierarchy were not there.
    if args.feature_gates.enabled("CompositePodGroup") {
        fatal(
            &args,
            "--feature-gates: CompositePodGroup is not supported by mcsched \
             (kube-scheduler's alpha scheduling of scheduling.k8s.io/v1alpha3 \
             CompositePodGroups); leave it off (docs/kubernetes-versions.md)",
        );
        return ExitCode::from(1);
    }
    profiles.pod_groups.set_topology_aware(
        args.feature_gates
            .enabled("TopologyAwareWorkloadScheduling"),
    );
    profiles
        .pod_groups
        .set_preemption_policy_gate(args.feature_gates.enabled("PodGroupPreemptionPolicy"));
    if args.check {
        print!("{}", config::render_profiles(&cfg));
        return ExitCode::SUCCESS;
    }
    for w in &cfg.warnings {
        warn!("configuration: {w}");
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            fatal(&args, &format!("cannot start the runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    let format = args.log.logging_format;
    match runtime.block_on(run(args, cfg, profiles, leaves)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            // In JSON the line above is the whole story: a log pipeline parses every line.
            if format == LogFormat::Text {
                eprintln!("mcsched-agent: {e:#}");
            }
            ExitCode::from(1)
        }
    }
}

async fn run(
    args: Args,
    cfg: SchedulerConfig,
    profiles: mcsched_engine::profiles::Profiles,
    leaves: Arc<Leaves>,
) -> anyhow::Result<()> {
    // The scheduling client's, the leaves' and the extenders' binding writes stop at the
    // wire once the Lease is lost (armed below, once the election exists).
    let fence = leaves.fence.clone();
    let identity = format!("{}_{:016x}", scheduler::hostname(), rand::random::<u64>());
    client::set_identity(&identity);
    let extenders = extender::extenders(&cfg, &fence)?;
    let kubeconfig = args
        .kubeconfig
        .clone()
        .or_else(|| cfg.client_connection.kubeconfig.as_ref().map(PathBuf::from));
    let cc = &cfg.client_connection;
    let client = client::connect_fenced(
        kubeconfig.as_deref(),
        args.context.as_deref(),
        cc.qps,
        cc.burst,
        &fence,
    )
    .await?;
    leaves.set_eviction_client(
        client::connect_evicting(
            kubeconfig.as_deref(),
            args.context.as_deref(),
            cc.qps,
            cc.burst,
            &fence,
        )
        .await?,
    );
    // The mark on every object pod sync creates in a leaf: another host's, or the leaf
    // owner's, are never touched.
    leaves.set_host_id(
        mcsched_agent::multicluster::registry::host_id(&client)
            .await
            .context("reading the host's id (the UID of namespace kube-system)")?,
    );
    let mut sigterm = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    // Losing the Lease ends the agent as a signal would, then it exits non-zero (as
    // kube-scheduler does) and restarts as a standby.
    let (lost_tx, mut lost_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        tokio::select! {
            _ = sigterm.recv() => info!("SIGTERM received"),
            _ = tokio::signal::ctrl_c() => info!("interrupt received"),
            Ok(()) = &mut lost_rx => error!("leader election lost; stopping"),
        }
    };
    let options = SchedulerOptions {
        namespace: args.namespace.clone(),
        parallel_bindings: usize::from(args.parallel_bindings),
        initial_backoff: Duration::from_secs(cfg.pod_initial_backoff_seconds),
        max_backoff: Duration::from_secs(cfg.pod_max_backoff_seconds),
        content_type: cc
            .content_type
            .parse()
            .context("clientConnection.contentType")?,
        watch_content_type: cc
            .response_content_type()
            .parse()
            .context("clientConnection.acceptContentTypes")?,
    };
    let shared = Shared::new(client, profiles, extenders, leaves, &options);

    let le = &cfg.leader_election;
    let (leader_tx, leader) = tokio::sync::watch::channel(!le.leader_elect);
    fence.arm(leader.clone(), shared.lease_health.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let handle = axum_server::Handle::new();
    if args.secure_port != 0 {
        let cert = serving_cert(&args)?;
        if let Some(address) = args.advertise_address {
            let publisher = Publisher {
                client: shared.bind_ctx.client.clone(),
                namespace: args.namespace.clone(),
                address,
                port: args.secure_port,
                ca_bundle: cert.ca_pem.clone(),
            };
            let (rx, lease) = (leader.clone(), shared.lease_health.clone());
            tokio::spawn(publisher.run(rx, lease));
        } else {
            info!(
                "no --advertise-address (POD_IP): the mcsched.io API is not published to the API server"
            );
        }
        // Its own client: authentication and authorization calls made for a flood of
        // requests queue behind neither scheduling nor the Lease.
        let auth_client = client::connect(
            kubeconfig.as_deref(),
            args.context.as_deref(),
            cc.qps,
            cc.burst,
        )
        .await?;
        let addr = SocketAddr::new(args.bind_address, args.secure_port);
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (--bind-address, --secure-port)"))?;
        let opts = ServerOptions {
            listener,
            cert,
            auth_client,
            always_allow_paths: args.authorization_always_allow_paths.clone(),
            token_ttl: args.authentication_token_webhook_cache_ttl,
            authorized_ttl: args.authorization_webhook_cache_authorized_ttl,
            unauthorized_ttl: args.authorization_webhook_cache_unauthorized_ttl,
            max_dry_runs: usize::from(args.max_concurrent_what_ifs),
            request_timeout: args.request_timeout,
            connections: server::connections::ConnectionOptions {
                header_read_timeout: args.header_read_timeout,
                idle_timeout: args.idle_timeout,
                max_connections: args.max_connections,
                max_connections_per_ip: args.max_connections_per_ip,
            },
            health_addr: (args.health_port != 0)
                .then(|| SocketAddr::new(args.health_bind_address, args.health_port)),
            enable_profiling: cfg.enable_profiling,
        };
        let (s, h) = (Arc::clone(&shared), handle.clone());
        tokio::spawn(async move {
            if let Err(e) = server::serve(s, opts, h).await {
                error!(error = %e, "HTTPS server stopped");
            }
        });
    }
    // Without election the sender must outlive the scheduler: the leaf tasks stop when
    // it is dropped.
    let mut fixed_leader = None;
    let election = if !le.leader_elect {
        fixed_leader = Some(leader_tx);
        None
    } else {
        let ec = ElectionConfig {
            lease_name: le.resource_name.clone(),
            lease_namespace: le.resource_namespace.clone(),
            identity,
            lease_duration: le.lease_duration,
            renew_deadline: le.renew_deadline,
            retry_period: le.retry_period,
        };
        info!(lease = %ec.lease_name, namespace = %ec.lease_namespace, identity = %ec.identity, "leader election on");
        // Its own client on its own thread and runtime, so that neither scheduling, nor
        // API requests, nor dry runs keeping the main runtime's workers busy can delay
        // a renewal.
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<Ended>();
        let (kc, context, qps, burst) =
            (kubeconfig.clone(), args.context.clone(), cc.qps, cc.burst);
        let health = shared.lease_health.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<anyhow::Result<()>>();
        std::thread::Builder::new()
            .name("leader-election".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let e =
                            anyhow::Error::new(e).context("cannot start the election's runtime");
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let lease_client = match client::connect(
                        kc.as_deref(),
                        context.as_deref(),
                        qps,
                        burst,
                    )
                    .await
                    {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let ended = Elector::new(lease_client, ec, health)
                        .run(leader_tx, stop_rx)
                        .await;
                    if ended == Ended::Lost {
                        let _ = lost_tx.send(());
                    }
                    let _ = ended_tx.send(ended);
                });
            })
            .context("cannot start the leader election thread")?;
        match ready_rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.context("leader election")),
            Err(_) => anyhow::bail!("leader election: its thread ended before starting"),
        }
        Some(ended_rx)
    };
    scheduler::run(shared, options, leader, shutdown).await?;
    drop(fixed_leader);
    let _ = stop_tx.send(true);
    let mut lost = false;
    if let Some(e) = election {
        // Releasing the lease lets a standby take over at once.
        lost = matches!(
            tokio::time::timeout(Duration::from_secs(5), e).await,
            Ok(Ok(Ended::Lost))
        );
    }
    handle.graceful_shutdown(Some(Duration::from_secs(2)));
    if lost {
        anyhow::bail!("leader election lost");
    }
    info!("stopped");
    Ok(())
}

/// The serving certificate: the operator's files, or one the agent makes for the names
/// it is reached by (the API's Service, this host, the advertised address).
fn serving_cert(args: &Args) -> anyhow::Result<ServingCert> {
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_private_key_file) {
        return Ok(ServingCert::from_files(cert, key)?);
    }
    let ns = &args.namespace;
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        scheduler::hostname(),
    ];
    for service in [keys::API_SERVICE, keys::AGENT_NAME] {
        names.push(format!("{service}.{ns}.svc"));
        names.push(format!("{service}.{ns}.svc.cluster.local"));
    }
    if let Some(a) = args.advertise_address {
        names.push(a.to_string());
    }
    names.sort();
    names.dedup();
    Ok(ServingCert::generate(names)?)
}
