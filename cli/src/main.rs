//! `kubectl mcsched`: the kubectl plugin of mcsched.
//!
//! Exit codes follow kubectl: 0 success, 1 failure, 2 usage error (clap's own exit code).

mod apply;
mod cluster;
mod complete;
mod duration;
mod explain;
mod install;
mod kube_context;
mod policy;
mod printer;
mod progress;
mod rollout;
mod table;
mod uninstall;
mod version;

use clap::{Parser, Subcommand};
use kube_context::KubeArgs;
use std::process::ExitCode;

/// Multi-cluster scheduling for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "kubectl mcsched", bin_name = "kubectl mcsched", version, about)]
struct Cli {
    #[command(flatten)]
    kube: KubeArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Join a leaf cluster: it becomes the virtual node mcsched-NAME of the host.
    Join {
        #[command(subcommand)]
        what: JoinWhat,
    },
    /// Remove a joined leaf cluster from the host, and what join created in it.
    Unjoin {
        #[command(subcommand)]
        what: UnjoinWhat,
    },
    /// Explain a scheduling decision of the mcsched agent, or simulate one with --what-if.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        arg_required_else_help = true,
        after_help = "Both ask mcsched's aggregated API (mcsched.io/v1alpha1) through the API server, as you:\n  explain pod     get explanations.mcsched.io in the pod's namespace (roles view, edit, admin)\n  explain podgroup  get the PodGroup, list pods and get their explanations in its namespace\n  --what-if       create whatifs.mcsched.io in the pod's namespace (roles edit, admin)\n\nExamples:\n  kubectl mcsched explain pod web-0 -n shop\n  kubectl mcsched explain pod web-0 -o wide\n  kubectl mcsched explain podgroup train\n  kubectl mcsched explain --what-if -f deployment.yaml"
    )]
    Explain {
        #[command(subcommand)]
        what: Option<ExplainWhat>,
        #[command(flatten)]
        what_if: explain::WhatIfArgs,
    },
    /// Install the mcsched agent: RBAC, configuration, Deployment, Services, APIService (server-side apply).
    Install(install::InstallArgs),
    /// Remove everything install created (asks first).
    Uninstall(uninstall::UninstallArgs),
    /// List things mcsched manages.
    Get {
        #[command(subcommand)]
        what: GetWhat,
    },
    /// Print the client version and the installed agent's.
    Version(VersionArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completion { shell: clap_complete::Shell },
}

#[derive(Debug, clap::Args)]
struct VersionArgs {
    /// Only the client's version; the cluster is not contacted.
    #[arg(long)]
    client: bool,
}

#[derive(Debug, Subcommand)]
enum GetWhat {
    /// The joined leaf clusters: virtual node, readiness, version, nodes, room, pods.
    Clusters(cluster::get::GetArgs),
    /// Placement policies: selector, priority, clusters in use with their pods, readiness.
    Policies(policy::get::GetArgs),
}

#[derive(Debug, Subcommand)]
enum ExplainWhat {
    /// Why a pod went where it went (or could not go anywhere), plugin by plugin.
    Pod(explain::ExplainArgs),
    /// A PodGroup's members: where each went, down to the leaf node, or why it waits.
    #[command(name = "podgroup")]
    PodGroup(explain::pod_group::PodGroupArgs),
}

#[derive(Debug, Subcommand)]
enum JoinWhat {
    /// Join a leaf cluster (the host is the cluster of --kubeconfig/--context).
    Cluster(cluster::join::JoinArgs),
}

#[derive(Debug, Subcommand)]
enum UnjoinWhat {
    /// Unjoin a leaf cluster: drain its virtual node, remove what join created.
    Cluster(cluster::unjoin::UnjoinArgs),
}

fn main() -> ExitCode {
    // Cobra's hidden `__complete`, which kubectl_complete-mcsched calls: handled before clap
    // parses, so that the words being completed (a lone `-n`, a partial flag) are not taken
    // as this run's own flags.
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if argv.get(1).map(String::as_str) == Some("__complete") {
        use clap::CommandFactory;
        print!("{}", complete::complete(Cli::command(), &argv[2..]));
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(cli.kube.tracing_filter())
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", causes(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each said once: libraries often repeat their source's text
/// in their own message, which a plain `{:#}` would print again.
fn causes(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Join {
            what: JoinWhat::Cluster(args),
        } => cluster::join::run(&cli.kube, args).await,
        Command::Unjoin {
            what: UnjoinWhat::Cluster(args),
        } => cluster::unjoin::run(&cli.kube, args).await,
        Command::Explain {
            what: Some(ExplainWhat::Pod(args)),
            ..
        } => explain::run(&cli.kube, args).await,
        Command::Explain {
            what: Some(ExplainWhat::PodGroup(args)),
            ..
        } => explain::pod_group::run(&cli.kube, args).await,
        Command::Explain {
            what: None,
            what_if,
        } => explain::what_if(&cli.kube, what_if).await,
        Command::Install(args) => install::run(&cli.kube, args).await,
        Command::Uninstall(args) => uninstall::run(&cli.kube, args).await,
        Command::Get {
            what: GetWhat::Clusters(args),
        } => cluster::get::run(&cli.kube, args).await,
        Command::Get {
            what: GetWhat::Policies(args),
        } => policy::get::run(&cli.kube, args).await,
        Command::Version(args) => {
            println!("kubectl-mcsched {}", env!("CARGO_PKG_VERSION"));
            if args.client {
                return Ok(());
            }
            version::agent(&cli.kube).await
        }
        Command::Completion { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "kubectl-mcsched",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io)
            .context("failed to read kubeconfig from '/x': No such file")
            .context("reading kubeconfig /x");
        assert_eq!(
            super::causes(&e),
            "reading kubeconfig /x: failed to read kubeconfig from '/x': No such file"
        );
    }
}
