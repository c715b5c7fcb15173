use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcsched_bench::schedulers::{Binaries, Scheduler};
use mcsched_bench::suite::{self, Suite};
use mcsched_bench::workloads::{self, Kind, Size};
use mcsched_bench::{bind_only, run};

/// mcsched against kube-scheduler and a bind-only client, scheduler_perf's workloads on
/// real control planes; writes results.md and results.png.
#[derive(Debug, Parser)]
#[command(name = "mcsched-bench")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    /// Workloads to run (all when not given).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<Kind>,

    /// Schedulers to run (when not given: kube-scheduler, mcsched, mcsched-json,
    /// bind-only-json, bind-events, bind-events-json); bind-only is protobuf bind-only.
    #[arg(long, value_delimiter = ',')]
    schedulers: Vec<Scheduler>,

    /// Small sizes (100 nodes, 200 pods; tiny leaves): the variant `make test` runs.
    #[arg(long)]
    quick: bool,

    /// Multiplies every size (nodes, initial pods, pods, leaf nodes).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,

    /// A workload's size, WORKLOAD=NODES/INIT_PODS/PODS (repeatable); a multi-cluster
    /// workload may add /LEAVES/LEAF_NODES (leaf nodes per leaf).
    #[arg(long = "size", value_name = "WORKLOAD=N/I/P[/L/LN]")]
    sizes: Vec<String>,

    /// Where results.md and results.png go.
    #[arg(long, default_value = "bench")]
    out: PathBuf,

    /// Where the processes' logs go (a temporary directory when not given).
    #[arg(long)]
    log_dir: Option<PathBuf>,

    /// The mcsched-agent binary (default: target/release/mcsched-agent).
    #[arg(long, env = "MCSCHED_AGENT")]
    agent: Option<PathBuf>,

    /// Hand-written analysis appended to results.md.
    #[arg(long, default_value = "bench/analysis.md")]
    analysis: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Bind pending pods round-robin with no scheduling logic (run by the suite itself).
    BindOnly {
        #[arg(long)]
        kubeconfig: PathBuf,
        #[arg(long, default_value = bind_only::SCHEDULER_NAME)]
        scheduler_name: String,
        #[arg(long, default_value_t = bind_only::MCSCHED_PARALLEL_BINDINGS)]
        concurrency: usize,
        /// Also write each bound pod's Scheduled event, as kube-scheduler does.
        #[arg(long)]
        events: bool,
        /// The encoding of its pod watch, bindings and events.
        #[arg(long, default_value = mcsched_wire::PROTOBUF, value_name = "TYPE")]
        kube_api_content_type: mcsched_wire::ContentType,
    },
}

fn parse_size(s: &str) -> anyhow::Result<(Kind, Size)> {
    let (k, v) = s.split_once('=').context("expected WORKLOAD=N/I/P")?;
    let kind: Kind = k.parse().map_err(anyhow::Error::msg)?;
    let n: Vec<usize> = v
        .split('/')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("sizes in {v:?}"))?;
    let base = workloads::default_size(kind);
    let (nodes, init_pods, pods, leaves, leaf_nodes) = match n[..] {
        [nodes, init_pods, pods] => (nodes, init_pods, pods, base.leaves, base.leaf_nodes),
        [nodes, init_pods, pods, leaves, leaf_nodes] if kind.is_multi_cluster() => {
            anyhow::ensure!(leaves > 0, "a multi-cluster workload needs a leaf in {v:?}");
            (nodes, init_pods, pods, leaves, leaf_nodes)
        }
        _ if kind.is_multi_cluster() => {
            anyhow::bail!("expected N/I/P or N/I/P/LEAVES/LEAF_NODES in {v:?}")
        }
        _ => anyhow::bail!("expected three numbers N/I/P in {v:?}"),
    };
    Ok((
        kind,
        Size {
            nodes,
            init_pods,
            pods,
            leaves,
            leaf_nodes,
        },
    ))
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcsched-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcsched-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(Command::BindOnly {
        kubeconfig,
        scheduler_name,
        concurrency,
        events,
        kube_api_content_type,
    }) = &args.command
    {
        let (events, ct) = (*events, *kube_api_content_type);
        bind_only::run(kubeconfig, scheduler_name, *concurrency, events, ct).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let repo = mcsched_e2e::repo_root();
    let kinds = if args.workloads.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.workloads.clone()
    };
    let overrides: Vec<(Kind, Size)> = args
        .sizes
        .iter()
        .map(|s| parse_size(s))
        .collect::<anyhow::Result<_>>()?;
    let runs: Vec<(Kind, Size)> = kinds
        .iter()
        .map(|k| {
            let base = if args.quick {
                workloads::quick_size(*k)
            } else {
                workloads::default_size(*k)
            };
            let size = overrides
                .iter()
                .find(|(o, _)| o == k)
                .map(|(_, s)| *s)
                .unwrap_or(base)
                .scaled(args.scale);
            (*k, size)
        })
        .collect();
    let reduced = runs
        .iter()
        .any(|(k, s)| *s != workloads::default_size(*k))
        .then(|| {
            let why = if args.quick {
                "the quick variant (`--quick`)".to_string()
            } else {
                format!(
                    "--scale {} {}",
                    args.scale,
                    args.sizes
                        .iter()
                        .map(|s| format!("--size {s}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            };
            format!("{why}; the issue's sizes are those of `make bench` without flags.")
        });
    let agent = args
        .agent
        .clone()
        .unwrap_or_else(|| repo.join("target/release/mcsched-agent"));
    let bins = Binaries {
        controlplane: mcsched_e2e::controlplane::binary(),
        agent,
        bench: std::env::current_exe()?,
    };
    for (what, p) in [
        ("controlplane", &bins.controlplane),
        ("mcsched-agent", &bins.agent),
    ] {
        anyhow::ensure!(p.exists(), "{what} not found at {}", p.display());
    }
    let tmp;
    let log_dir = match &args.log_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("mcsched-bench-")
                .tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let suite = Suite {
        runs,
        schedulers: if args.schedulers.is_empty() {
            Scheduler::ALL.to_vec()
        } else {
            args.schedulers.clone()
        },
        bins,
        out_dir: args.out.clone(),
        log_dir,
        reduced,
        analysis: args.analysis.clone(),
        repo,
        // A copy still Pending after this long with nothing changing stays so: the leaf's
        // scheduler binds copies within seconds when they fit at all.
        settle: run::Settle {
            idle: Duration::from_secs(if args.quick { 15 } else { 60 }),
        },
    };
    let outcome = suite::run(&suite).await?;
    println!(
        "{}",
        std::fs::read_to_string(args.out.join(suite::RESULTS_FILE))?
    );
    let unbound: Vec<String> = outcome
        .results
        .iter()
        .filter(|r| !r.all_bound())
        .map(|r| {
            format!(
                "{} with {}: {}/{} bound",
                r.workload, r.scheduler, r.bound, r.size.pods
            )
        })
        .collect();
    let broken: Vec<String> = outcome
        .results
        .iter()
        .flat_map(|r| {
            r.violations
                .iter()
                .map(move |v| format!("{} with {}: {v}", r.workload, r.scheduler))
        })
        .collect();
    if !outcome.failures.is_empty() || !unbound.is_empty() || !broken.is_empty() {
        for f in outcome.failures.iter().chain(&unbound).chain(&broken) {
            eprintln!("mcsched-bench: {f}");
        }
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_name_leaves_for_multi_cluster_workloads_only() {
        let (kind, size) = parse_size("MultiCluster=1000/0/2000/16/50").expect("size");
        assert_eq!(kind, Kind::MultiCluster);
        assert_eq!(
            (size.nodes, size.pods, size.leaves, size.leaf_nodes),
            (1000, 2000, 16, 50)
        );
        let (_, size) = parse_size("MultiCluster=10/0/20").expect("size");
        assert_eq!(
            size.leaves,
            workloads::default_size(Kind::MultiCluster).leaves
        );
        for bad in [
            "SchedulingBasic=10/0/20/4/5",
            "MultiCluster=10/0/20/0/5",
            "MultiCluster=10/0",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
