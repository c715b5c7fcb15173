//! A real node for a control plane started elsewhere (`make demo`'s host): containerd of
//! its own, runc, the CNI bridge and the kubelet built into `controlplane`, with the
//! pause and hello test images and any given archives imported. Prints `READY <node>`
//! once the Node is Ready, runs until SIGTERM or SIGINT, then removes every pod and
//! everything it made on this machine.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use mcsched_e2e::real_node::{self, NodeCluster, RealNode};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser)]
#[command(about = "Run a real node (containerd + kubelet) for a test control plane")]
struct Args {
    /// The control plane's admin kubeconfig (written by `controlplane --kubeconfig`).
    #[arg(long, required_unless_present = "check")]
    kubeconfig: Option<PathBuf>,
    /// The control plane's certificate directory (`<its --data-dir>/pki`), whose CA signs
    /// the node's credentials.
    #[arg(long, required_unless_present = "check")]
    pki_dir: Option<PathBuf>,
    /// The Node's name.
    #[arg(long, required_unless_present = "check")]
    name: Option<String>,
    /// An image archive (docker-load or OCI) to import into the node's containerd.
    #[arg(long = "import", value_name = "ARCHIVE")]
    imports: Vec<PathBuf>,
    /// Print what this machine lacks to run a real node and exit 1 if anything; 0 if none.
    #[arg(long)]
    check: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.check {
        let missing = real_node::missing();
        for m in &missing {
            println!("{m}");
        }
        std::process::exit(if missing.is_empty() { 0 } else { 1 });
    }
    let mut terminate = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let (Some(kubeconfig), Some(pki_dir), Some(name)) = (args.kubeconfig, args.pki_dir, args.name)
    else {
        anyhow::bail!("--kubeconfig, --pki-dir and --name are required");
    };
    let cluster = NodeCluster::from_files(&kubeconfig, &pki_dir).await?;
    let mut node = RealNode::start_in(&cluster, &name).await?;
    for archive in &args.imports {
        node.import(archive)?;
    }
    println!("READY {} {}", node.name, node.address);
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    node.stop();
    Ok(())
}
