//! Every workload with every scheduler in turn, then results.md and the chart.

use std::path::PathBuf;
use std::time::Instant;

use tracing::{error, info};

use crate::machine;
use crate::report::{self, Report};
use crate::run::{self, RunResult};
use crate::schedulers::{Binaries, Scheduler};
use crate::workloads::{Kind, Size};

pub struct Suite {
    pub runs: Vec<(Kind, Size)>,
    pub schedulers: Vec<Scheduler>,
    pub bins: Binaries,
    /// Where results.md and the chart go.
    pub out_dir: PathBuf,
    /// Logs of every process of every run.
    pub log_dir: PathBuf,
    pub reduced: Option<String>,
    /// Hand-written analysis appended to results.md, read once the runs are over.
    pub analysis: PathBuf,
    pub repo: PathBuf,
    pub settle: run::Settle,
}

pub const RESULTS_FILE: &str = "results.md";
pub const CHART_FILE: &str = "results.png";

pub struct Outcome {
    pub results: Vec<RunResult>,
    pub failures: Vec<String>,
}

pub async fn run(suite: &Suite) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let mut facts = machine::gather(&suite.repo, &suite.bins.agent);
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for (kind, size) in &suite.runs {
        for sched in &suite.schedulers {
            let t = Instant::now();
            match run::run(
                *kind,
                *size,
                *sched,
                &suite.bins,
                &suite.log_dir,
                &suite.settle,
            )
            .await
            {
                Ok(r) => {
                    info!(
                        workload = %kind, scheduler = %sched, bound = r.bound, pods = size.pods,
                        pods_per_s = r.throughput.unwrap_or_default(),
                        "run done in {:.0}s", t.elapsed().as_secs_f64()
                    );
                    results.push(r);
                }
                Err(e) => {
                    error!(workload = %kind, scheduler = %sched, "run failed: {e:#}");
                    failures.push(format!("{kind} with {sched}: {e:#}"));
                }
            }
        }
    }
    facts.load_at_end = machine::load_average();
    facts.kube_version = kube_version(&suite.repo);

    std::fs::create_dir_all(&suite.out_dir)?;
    let title = format!(
        "mcsched vs kube-scheduler vs bind-only, {} cores, load {}",
        facts.cores, facts.load_at_start
    );
    crate::chart::draw(&suite.out_dir.join(CHART_FILE), &results, &title)?;
    let mut text = report::render(&Report {
        facts: &facts,
        results: &results,
        reduced: suite.reduced.clone(),
        chart_file: CHART_FILE,
        wall_time: started.elapsed(),
        analysis: std::fs::read_to_string(&suite.analysis).ok(),
    });
    if !failures.is_empty() {
        text.push_str("\n## Runs that failed\n\n");
        for f in &failures {
            text.push_str(&format!("- {f}\n"));
        }
    }
    std::fs::write(suite.out_dir.join(RESULTS_FILE), text)?;
    Ok(Outcome { results, failures })
}

/// The Kubernetes release the control plane is built from (its go.mod, which the
/// Makefile also stamps into the binaries' version).
fn kube_version(repo: &std::path::Path) -> String {
    std::fs::read_to_string(repo.join("tests/controlplane/go.mod"))
        .ok()
        .and_then(|s| {
            s.lines()
                .map(str::split_whitespace)
                .find_map(|mut w| (w.next() == Some("k8s.io/kubernetes")).then(|| w.next()))
                .flatten()
                .map(String::from)
        })
        .unwrap_or_else(|| "unknown".into())
}
