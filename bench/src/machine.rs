//! Facts about the machine and the build that a result is only meaningful with.

use std::path::Path;
use std::process::Command;

#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub kube_version: String,
    pub commit: String,
    pub agent_build: String,
    pub started: String,
    pub load_at_start: String,
    pub load_at_end: String,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn command(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn gather(repo: &Path, agent: &Path) -> Facts {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let memory_gib = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or_default();
    let repo_s = repo.display().to_string();
    let mut commit = command("git", &["-C", &repo_s, "rev-parse", "--short", "HEAD"]);
    if !command(
        "git",
        &[
            "-C",
            &repo_s,
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )
    .is_empty()
    {
        commit.push_str(" (with uncommitted changes)");
    }
    let agent_build = if agent.components().any(|c| c.as_os_str() == "release") {
        "release"
    } else {
        "debug"
    };
    Facts {
        cpu,
        cores: std::thread::available_parallelism().map_or(0, usize::from),
        memory_gib,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        kube_version: String::new(),
        commit,
        agent_build: format!("{agent_build} ({})", agent.display()),
        started: command("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]),
        load_at_start: load_average(),
        load_at_end: String::new(),
    }
}
