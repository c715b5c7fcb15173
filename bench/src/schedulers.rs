//! The schedulers under test, each started as a process of its own against the API
//! server, with the same lifted client limits, so /proc tells each one's CPU and memory.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use mcsched_e2e::process::Guarded;

use crate::bind_only;

/// scheduler_perf lifts its clients' limits (QPS and burst 5000); every scheduler here
/// gets the same.
pub const CLIENT_QPS: u32 = 5000;
pub const CLIENT_BURST: u32 = 5000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    KubeScheduler,
    Mcsched,
    McschedJson,
    BindOnly,
    BindOnlyJson,
    /// bind-only writing each pod's Scheduled event too: the API server's work per pod of
    /// mcsched-agent and kube-scheduler (a binding and an event), with no scheduling.
    BindEvents,
    BindEventsJson,
}

impl Scheduler {
    /// The schedulers run when none are named: what the targets compare in one run
    /// (mcsched in each encoding against bind-events in the same one, against bind-only
    /// in JSON, the ceiling before protobuf, and against kube-scheduler).
    pub const ALL: [Scheduler; 6] = [
        Scheduler::KubeScheduler,
        Scheduler::Mcsched,
        Scheduler::McschedJson,
        Scheduler::BindOnlyJson,
        Scheduler::BindEvents,
        Scheduler::BindEventsJson,
    ];
    /// Every scheduler `--schedulers` accepts, in the order results show them.
    pub const KNOWN: [Scheduler; 7] = [
        Scheduler::KubeScheduler,
        Scheduler::Mcsched,
        Scheduler::McschedJson,
        Scheduler::BindOnly,
        Scheduler::BindOnlyJson,
        Scheduler::BindEvents,
        Scheduler::BindEventsJson,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Scheduler::KubeScheduler => "kube-scheduler",
            Scheduler::Mcsched => "mcsched",
            Scheduler::McschedJson => "mcsched-json",
            Scheduler::BindOnly => "bind-only",
            Scheduler::BindOnlyJson => "bind-only-json",
            Scheduler::BindEvents => "bind-events",
            Scheduler::BindEventsJson => "bind-events-json",
        }
    }

    /// How its client encodes the hot requests (pod watch, bindings, events):
    /// kube-scheduler's clientConnection.contentType defaults to protobuf, and so does
    /// mcsched-agent's `--kube-api-content-type`; the `-json` ones are told JSON.
    pub fn content_type(self) -> mcsched_wire::ContentType {
        match self {
            Scheduler::KubeScheduler
            | Scheduler::Mcsched
            | Scheduler::BindOnly
            | Scheduler::BindEvents => mcsched_wire::ContentType::Protobuf,
            Scheduler::McschedJson | Scheduler::BindOnlyJson | Scheduler::BindEventsJson => {
                mcsched_wire::ContentType::Json
            }
        }
    }

    /// `content_type` as the results name it.
    pub fn encoding(self) -> &'static str {
        match self.content_type() {
            mcsched_wire::ContentType::Protobuf => "protobuf",
            mcsched_wire::ContentType::Json => "JSON",
        }
    }

    pub fn is_mcsched(self) -> bool {
        matches!(self, Scheduler::Mcsched | Scheduler::McschedJson)
    }

    /// A bind-only client, with or without events, in either encoding.
    pub fn is_baseline(self) -> bool {
        matches!(
            self,
            Scheduler::BindOnly
                | Scheduler::BindOnlyJson
                | Scheduler::BindEvents
                | Scheduler::BindEventsJson
        )
    }

    fn writes_events(self) -> bool {
        matches!(self, Scheduler::BindEvents | Scheduler::BindEventsJson)
    }

    /// The pods' spec.schedulerName for this scheduler (each run has a control plane of
    /// its own, so the encodings share names).
    pub fn scheduler_name(self) -> &'static str {
        match self {
            Scheduler::KubeScheduler => "default-scheduler",
            Scheduler::Mcsched | Scheduler::McschedJson => "mcsched",
            Scheduler::BindOnly | Scheduler::BindOnlyJson => bind_only::SCHEDULER_NAME,
            Scheduler::BindEvents | Scheduler::BindEventsJson => "bind-events",
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for Scheduler {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheduler::KNOWN
            .into_iter()
            .find(|k| k.label().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let known: Vec<_> = Scheduler::KNOWN.iter().map(|k| k.label()).collect();
                format!("unknown scheduler {s:?}; one of {}", known.join(", "))
            })
    }
}

/// Where the programs are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub controlplane: PathBuf,
    pub agent: PathBuf,
    /// This program, re-run as `mcsched-bench bind-only`.
    pub bench: PathBuf,
}

pub struct Running {
    process: Guarded,
    pub log: PathBuf,
}

impl Running {
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    pub fn stop(&mut self) {
        self.process.stop(Duration::from_secs(20));
    }
}

/// Starts `scheduler` against the API server of `kubeconfig`; logs go to `dir`.
pub fn start(
    scheduler: Scheduler,
    bins: &Binaries,
    kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<Running> {
    let mut cmd;
    match scheduler {
        Scheduler::KubeScheduler => {
            cmd = Command::new(&bins.controlplane);
            cmd.arg("scheduler")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .arg("--data-dir")
                .arg(dir.join("kube-scheduler"))
                .arg(format!("--client-qps={CLIENT_QPS}"))
                .arg(format!("--client-burst={CLIENT_BURST}"));
        }
        Scheduler::Mcsched | Scheduler::McschedJson => {
            return start_agent(bins, scheduler.content_type(), kubeconfig, dir, "mcsched");
        }
        Scheduler::BindOnly
        | Scheduler::BindOnlyJson
        | Scheduler::BindEvents
        | Scheduler::BindEventsJson => {
            cmd = Command::new(&bins.bench);
            cmd.arg("bind-only")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .arg("--scheduler-name")
                .arg(scheduler.scheduler_name())
                .arg(format!(
                    "--concurrency={}",
                    bind_only::MCSCHED_PARALLEL_BINDINGS
                ))
                .arg(format!(
                    "--kube-api-content-type={}",
                    scheduler.content_type()
                ))
                .env("RUST_LOG", "warn");
            if scheduler.writes_events() {
                cmd.arg("--events");
            }
        }
    }
    spawn(cmd, scheduler.label(), dir)
}

/// mcsched-agent serving `scheduler_name`, with its defaults but for the lifted client
/// limits, no leader election and no HTTPS server. With a name no pod uses it only keeps
/// the virtual nodes and syncs the pods other schedulers bound to them into the leaves.
pub fn start_agent(
    bins: &Binaries,
    content_type: mcsched_wire::ContentType,
    kubeconfig: &Path,
    dir: &Path,
    scheduler_name: &str,
) -> anyhow::Result<Running> {
    let mut cmd = Command::new(&bins.agent);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--scheduler-name")
        .arg(scheduler_name)
        .arg(format!("--kube-api-qps={CLIENT_QPS}"))
        .arg(format!("--kube-api-burst={CLIENT_BURST}"))
        .arg(format!(
            "--parallel-bindings={}",
            bind_only::MCSCHED_PARALLEL_BINDINGS
        ))
        .arg(format!("--kube-api-content-type={content_type}"))
        .arg("--leader-elect=false")
        .arg("--secure-port=0")
        // Counted at the end, not taken back in the middle of a run.
        .arg("--leaf-pending-timeout=3600")
        .env("RUST_LOG", "info");
    spawn(cmd, &format!("agent-{scheduler_name}"), dir)
}

fn spawn(cmd: Command, what: &str, dir: &Path) -> anyhow::Result<Running> {
    std::fs::create_dir_all(dir)?;
    let log = dir.join(format!("{what}.log"));
    let mut process =
        Guarded::spawn(cmd, what, &log).with_context(|| format!("cannot start {what}"))?;
    // Nothing is read from stdout: drain it so that the child never blocks on a pipe.
    if let Some(mut out) = process.child_mut().and_then(|c| c.stdout.take()) {
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while matches!(out.read(&mut buf), Ok(n) if n > 0) {}
        });
    }
    Ok(Running { process, log })
}
