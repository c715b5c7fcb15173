//! `kubectl mcsched`: the kubectl plugin of mcsched.

use clap::{Parser, Subcommand};

/// Multi-cluster scheduling for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "kubectl mcsched", bin_name = "kubectl mcsched", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the client version.
    Version,
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("kubectl-mcsched {}", env!("CARGO_PKG_VERSION")),
    }
}
