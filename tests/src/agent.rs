//! `mcsched-agent` as a child process, the way an operator runs it out of cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::process::Guarded;

pub struct Agent {
    process: Guarded,
    pub log: PathBuf,
    /// The agent's HTTPS endpoint (health, metrics, explanations).
    pub url: String,
}

/// Agents started before one keeps its port.
const PORT_ATTEMPTS: usize = 5;
/// How long a start waits for the agent to listen on its port (or exit).
const LISTEN_WAIT: Duration = Duration::from_secs(10);

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// `$MCSCHED_AGENT`, else the debug build in the workspace's target directory.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("MCSCHED_AGENT") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"));
    target.join("debug/mcsched-agent")
}

impl Agent {
    pub fn start(kubeconfig: &Path, scheduler_name: &str, log_dir: &Path) -> anyhow::Result<Self> {
        Self::start_with(kubeconfig, scheduler_name, log_dir, "agent", &[])
    }

    /// Starts an agent named `id` (its log is `agent-<id>.log`) with extra arguments.
    pub fn start_with(
        kubeconfig: &Path,
        scheduler_name: &str,
        log_dir: &Path,
        id: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1", kubeconfig, scheduler_name, log_dir, id, extra)
    }

    /// As `start_with`, serving on `address` (an address the API server's service proxy
    /// may reach: not loopback).
    pub fn start_on(
        address: &str,
        kubeconfig: &Path,
        scheduler_name: &str,
        log_dir: &Path,
        id: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let bin = binary();
        if !bin.exists() {
            bail!(
                "{} does not exist: build it with `cargo build --bins`",
                bin.display()
            );
        }
        let log = log_dir.join(format!("agent-{id}.log"));
        // The port is free when picked and bound by the agent only later: another process
        // may take it between the two, and the agent then exits saying so. It is picked
        // again then, a few times.
        for attempt in 1.. {
            let port = free_port()?;
            let mut cmd = Command::new(&bin);
            cmd.arg("--kubeconfig")
                .arg(kubeconfig)
                .arg("--scheduler-name")
                .arg(scheduler_name)
                .arg(format!("--bind-address={address}"))
                .arg(format!("--secure-port={port}"))
                .args(extra)
                .env("RUST_LOG", "info,mcsched_agent=debug");
            let process = Guarded::spawn(cmd, "mcsched-agent", &log)
                .with_context(|| format!("cannot start {}", bin.display()))?;
            let mut agent = Agent {
                process,
                log: log.clone(),
                url: format!("https://{address}:{port}"),
            };
            if attempt < PORT_ATTEMPTS && agent.lost_its_port(address, port) {
                continue;
            }
            return Ok(agent);
        }
        unreachable!("the loop returns at its last attempt")
    }

    /// Whether the agent exited because its port was taken, waiting until it listens,
    /// exits or [`LISTEN_WAIT`] passes.
    fn lost_its_port(&mut self, address: &str, port: u16) -> bool {
        let deadline = std::time::Instant::now() + LISTEN_WAIT;
        while std::time::Instant::now() < deadline {
            if let Some(child) = self.process.child_mut()
                && child.try_wait().ok().flatten().is_some()
            {
                let logs = self.logs();
                return logs.contains("cannot listen on") && logs.contains("in use");
            }
            if std::net::TcpStream::connect((address, port)).is_ok() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Sends SIGTERM and returns the exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.process.stop(Duration::from_secs(20))
    }

    /// Sends `signal` (libc's SIGSTOP, SIGCONT, ...) to the agent.
    pub fn signal(&self, signal: i32) -> anyhow::Result<()> {
        let pid = self
            .process
            .pid()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| anyhow::anyhow!("the agent is not running"))?;
        // SAFETY: kill(2) on our own child, not yet reaped.
        if unsafe { libc::kill(pid, signal) } != 0 {
            bail!("kill({pid}, {signal}): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// How the agent ended, waiting up to `timeout`; None if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self
                .process
                .child_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The identity it elects with, once it has logged it (its requests carry it in their
    /// User-Agent).
    pub fn identity(&self) -> Option<String> {
        self.logs().lines().find_map(|l| {
            l.contains("leader election on")
                .then(|| l.split("identity=").nth(1))
                .flatten()
                .and_then(|rest| rest.split_whitespace().next())
                .map(String::from)
        })
    }
}

/// Who holds the Lease `name` of kube-system (leader election's), if anyone.
pub async fn lease_holder(
    leases: &kube::Api<k8s_openapi::api::coordination::v1::Lease>,
    name: &str,
) -> anyhow::Result<Option<String>> {
    Ok(leases
        .get_opt(name)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}
