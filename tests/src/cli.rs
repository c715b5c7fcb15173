//! Running the real `kubectl-mcsched` binary the way a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::Context;

pub fn binary() -> PathBuf {
    crate::repo_root().join("target/debug/kubectl-mcsched")
}

/// `kubectl-mcsched --kubeconfig KUBECONFIG ARGS...`, without a terminal on stdin.
pub fn run(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<Output> {
    Command::new(binary())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", binary().display()))
}

/// Standard output then standard error, for assertions and their messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
