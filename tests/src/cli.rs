//! Running the real `kubectl-mcsched` binary the way a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::Context;

/// The debug build in the workspace's target directory (`$CARGO_TARGET_DIR` when set).
pub fn binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"));
    target.join("debug/kubectl-mcsched")
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

/// `unjoin cluster CLUSTER --yes` from the host, acting in the leaf with its admin's
/// kubeconfig `leaf_kubeconfig`, as the leaf's owner runs it.
pub fn unjoin_as_leaf_admin(
    kubeconfig: &Path,
    cluster: &str,
    leaf_kubeconfig: &Path,
) -> anyhow::Result<Output> {
    let leaf_kc = leaf_kubeconfig.to_string_lossy();
    run(
        kubeconfig,
        &[
            "unjoin",
            "cluster",
            cluster,
            "--yes",
            "--cluster-kubeconfig",
            &leaf_kc,
        ],
    )
}

/// Standard output then standard error, for assertions and their messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `kubectl auth can-i ARGS...` with `kubeconfig`, read strictly: `yes` (exit 0) is true,
/// `no` (exit 1, with or without the authorizer's ` - reason`) is false, and anything
/// else — kubectl failing, an unknown resource type — is an error, never a "no".
pub fn can_i(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<bool> {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["auth", "can-i"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running kubectl (it must be on PATH)")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let answer = stdout.trim();
    anyhow::ensure!(
        !stderr.contains("doesn't have a resource type"),
        "kubectl auth can-i {args:?}: {stderr}"
    );
    match (out.status.code(), answer) {
        (Some(0), "yes") => Ok(true),
        (Some(1), a) if a == "no" || a.starts_with("no - ") => Ok(false),
        (code, _) => anyhow::bail!(
            "kubectl auth can-i {args:?} answered neither yes nor no (exit {code:?}): {stdout}{stderr}"
        ),
    }
}
