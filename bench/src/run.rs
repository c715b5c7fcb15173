//! One run: a fresh control plane (and leaves), the workload's nodes and initial pods,
//! one scheduler, the measured pods, and what was measured.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::keys;
use tracing::info;

use crate::observe::Observer;
use crate::procstat::{self, Process, Usage};
use crate::schedulers::{self, Binaries, Running, Scheduler};
use crate::stats::{self, Throughput};
use crate::workloads::{
    self, INIT_NAMESPACE, Kind, MEASURED_LABEL, MEASURED_NAMESPACE, Phase, Size,
};

const WARMUP_NAMESPACE: &str = "warmup";
/// The host control plane's `--name`: its process (kube-apiserver and etcd) is the one
/// whose CPU the API server column reads.
pub const HOST_NAME: &str = "bench-host";
/// A run gives up when this long passes without a new binding.
const IDLE_LIMIT: Duration = Duration::from_secs(120);

/// Pods of the multi-cluster workload in the leaves once things settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeafOutcome {
    /// Host pods bound to virtual nodes.
    pub sent: usize,
    /// Their copies in the leaves still Pending (no node).
    pub pending: usize,
    /// Host pods on a virtual node without a copy in its leaf.
    pub missing: usize,
    /// From the first measured pod's creation until every pod ran somewhere (bound on a
    /// host node, or its leaf copy bound there); `None` if some never did.
    pub all_running_after: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct RunResult {
    pub workload: Kind,
    pub size: Size,
    pub scheduler: Scheduler,
    pub bound: usize,
    /// Pods per second from the first to the last binding.
    pub throughput: Option<f64>,
    pub per_second: Throughput,
    pub latency_p50: Option<Duration>,
    pub latency_p99: Option<Duration>,
    pub usage: Option<Usage>,
    /// The scheduler's process that `usage` was read from.
    pub scheduler_process: Option<Process>,
    /// How the scheduler's client encodes its requests (`Scheduler::encoding`).
    pub encoding: &'static str,
    /// CPU seconds of the host's control plane process (kube-apiserver and etcd, one
    /// process) over the measured phase: what this scheduler cost the API server.
    pub api_server_cpu_seconds: Option<f64>,
    /// The process `api_server_cpu_seconds` was read from, the same at both ends.
    pub api_server_process: Option<Process>,
    pub leaf: Option<LeafOutcome>,
    /// Wall time of the measured phase, creation of the first pod to the last binding.
    pub measured_for: Duration,
    /// Placements that break the workload's constraints (`validate`); the bind-only baselines'
    /// are not judged.
    pub violations: Vec<String>,
    /// Multi-cluster: how long each probed leaf change took to show in its virtual node's
    /// status during the measured phase (None: not within 30 s).
    pub status_lags: Vec<Option<Duration>>,
}

impl RunResult {
    pub fn all_bound(&self) -> bool {
        self.bound == self.size.pods
    }
}

fn leaf_name(i: usize) -> String {
    format!("leaf-{}", i + 1)
}

/// How long nothing may change in the leaves before the pods still Pending there are
/// counted as staying so.
pub struct Settle {
    pub idle: Duration,
}

pub async fn run(
    kind: Kind,
    size: Size,
    scheduler: Scheduler,
    bins: &Binaries,
    log_dir: &Path,
    settle: &Settle,
) -> anyhow::Result<RunResult> {
    let run_dir = log_dir.join(format!("{kind}-{scheduler}"));
    std::fs::create_dir_all(&run_dir)?;
    info!(%kind, %scheduler, %size, "starting control planes");
    let host_start = ControlPlane::start_many(&[HOST_NAME], ControlPlaneOptions::default());
    let leaf_names: Vec<String> = (0..size.leaves).map(leaf_name).collect();
    let leaf_refs: Vec<&str> = leaf_names.iter().map(String::as_str).collect();
    let leaf_start = ControlPlane::start_many(
        &leaf_refs,
        ControlPlaneOptions {
            with_scheduler: true,
            ..Default::default()
        },
    );
    let (mut hosts, leaves) = tokio::try_join!(host_start, leaf_start)?;
    let host = hosts.pop().context("no host control plane")?;

    let populate = Instant::now();
    let host_nodes = crate::populate::nodes(
        &host.client,
        (0..size.nodes).map(|i| workloads::node(kind, i)).collect(),
    );
    let leaf_nodes = futures::future::try_join_all(leaves.iter().map(|l| {
        crate::populate::nodes(
            &l.client,
            (0..size.leaf_nodes)
                .map(|i| workloads::node(kind, i))
                .collect(),
        )
    }));
    tokio::try_join!(host_nodes, leaf_nodes)?;
    if kind == Kind::MultiClusterFragmented {
        for leaf in &leaves {
            crate::populate::namespaces(&leaf.client, &[workloads::LEAF_LOCAL_NAMESPACE]).await?;
            let fillers = (0..size.leaf_nodes)
                .map(|i| workloads::leaf_filler(&workloads::node_name(i)))
                .collect();
            crate::populate::pods(&leaf.client, fillers, |_| {}).await?;
        }
    }
    crate::populate::namespaces(
        &host.client,
        &[INIT_NAMESPACE, MEASURED_NAMESPACE, WARMUP_NAMESPACE],
    )
    .await?;
    // Initial pods are created bound, round-robin, so that every scheduler starts from
    // the same cluster; scheduler_perf has the scheduler under test place them.
    let init: Vec<_> = (0..size.init_pods)
        .map(|i| {
            let node = workloads::node_name(i % size.nodes.max(1));
            workloads::pod(
                kind,
                Phase::Init,
                INIT_NAMESPACE,
                &format!("init-{i}"),
                "default-scheduler",
                Some(&node),
            )
        })
        .collect();
    crate::populate::pods(&host.client, init, |_| {}).await?;
    info!("populated in {:.1}s", populate.elapsed().as_secs_f64());

    // Multi-cluster: the leaves join as `kubectl mcsched join` leaves them, and an agent
    // keeps their virtual nodes and syncs pods into them (the measured agent itself, or
    // one with a profile no pod uses when another scheduler is measured).
    let mut helpers: Vec<Running> = Vec::new();
    let mut measured: Option<Running> = None;
    if !leaves.is_empty() {
        for (leaf, name) in leaves.iter().zip(&leaf_names) {
            mcsched_e2e::objects::join_as_join_does(
                &host.client,
                leaf,
                name,
                serde_json::json!({}),
            )
            .await?;
        }
        if scheduler.is_mcsched() {
            measured = Some(schedulers::start(
                scheduler,
                bins,
                &host.kubeconfig,
                &run_dir,
            )?);
        } else {
            helpers.push(schedulers::start_agent(
                bins,
                scheduler.content_type(),
                &host.kubeconfig,
                &run_dir,
                "mcsched-sync-only",
            )?);
        }
        wait_virtual_nodes_ready(&host.client, &leaf_names).await?;
    }

    let observer = Observer::start(&host.client, &format!("{MEASURED_LABEL}=true")).await?;
    let mut sched = match measured.take() {
        Some(s) => s,
        None => schedulers::start(scheduler, bins, &host.kubeconfig, &run_dir)?,
    };
    let warmup = warm_up(&host.client, kind, scheduler).await;
    if let Err(e) = warmup {
        sched.stop();
        anyhow::bail!(
            "{scheduler} did not bind the warm-up pod: {e:#}\n{}",
            mcsched_e2e::controlplane::tail(&sched.log)
        );
    }

    info!(pods = size.pods, "creating the measured pods");
    let pods: Vec<_> = (0..size.pods)
        .map(|i| {
            workloads::pod(
                kind,
                Phase::Measured,
                MEASURED_NAMESPACE,
                &format!("pod-{i}"),
                scheduler.scheduler_name(),
                None,
            )
        })
        .collect();
    let probe = (!leaves.is_empty()).then(|| {
        crate::freshness::Probe::start(
            host.client.clone(),
            leaf_names
                .iter()
                .cloned()
                .zip(leaves.iter().map(|l| l.client.clone()))
                .collect(),
            workloads::node_name(0),
        )
    });
    let api_server = || -> Option<(Process, f64)> {
        let pid = host.pid()?;
        let process = procstat::process(pid).ok()?;
        Some((process, procstat::usage(pid).ok()?.cpu_seconds))
    };
    let api_server_before = api_server();
    let start = Instant::now();
    crate::populate::pods(&host.client, pods, |name| observer.created(name)).await?;
    info!(
        "measured pods created in {:.1}s; {} bound so far",
        start.elapsed().as_secs_f64(),
        observer.bound()
    );
    observer.wait_bound(size.pods, IDLE_LIMIT).await;
    let usage = sched.pid().and_then(|pid| procstat::usage(pid).ok());
    let scheduler_process = sched.pid().and_then(|pid| procstat::process(pid).ok());
    // Both readings from one process (same pid and start time), or no figure: a
    // replaced process's counters start again from zero.
    let (api_server_process, api_server_cpu_seconds) = match (api_server_before, api_server()) {
        (Some((p0, before)), Some((p1, after))) if p0 == p1 => (Some(p1), Some(after - before)),
        _ => (None, None),
    };
    let obs = observer.observation(start);
    info!(bound = obs.bound_at.len(), "measured phase over");
    let status_lags = match probe {
        Some(p) => p.finish().await?,
        None => Vec::new(),
    };

    let leaf = if leaves.is_empty() {
        None
    } else {
        let sent: BTreeMap<String, usize> = leaf_names
            .iter()
            .map(|n| {
                let vn = keys::virtual_node_name(n);
                let count = obs.per_node.get(&vn).copied().unwrap_or(0);
                (n.clone(), count)
            })
            .collect();
        let clients: Vec<&Client> = leaves.iter().map(|l| &l.client).collect();
        let mut outcome = settle_leaves(&clients, &leaf_names, &sent, settle.idle, start).await?;
        // Host pods run once bound (no kubelets); leaf copies once their leaf bound them.
        let last_binding = obs.bound_at.iter().max().copied().unwrap_or_default();
        outcome.all_running_after = outcome
            .all_running_after
            .filter(|_| obs.bound_at.len() == size.pods)
            .map(|leaves_done| leaves_done.max(last_binding));
        Some(outcome)
    };
    let mut violations = if scheduler.is_baseline() {
        Vec::new()
    } else {
        crate::validate::check(&host.client, kind).await?
    };
    // mcsched's claim: a pod goes to a leaf only if one of its nodes can run it. The
    // others' leftovers are reported, not judged (the aggregated view cannot know).
    if let Some(l) = leaf.filter(|l| scheduler.is_mcsched() && l.pending + l.missing > 0) {
        violations.push(format!(
            "{} of the {} pods sent to leaves stay Pending there ({} never synced)",
            l.pending + l.missing,
            l.sent,
            l.missing
        ));
    }
    // The measured agent syncs the leaves' pods in its run: stopped only now.
    sched.stop();
    for h in &mut helpers {
        h.stop();
    }
    for cp in leaves.iter().chain(std::iter::once(&host)) {
        kill(cp);
    }

    let measured_for = obs.bound_at.iter().max().copied().unwrap_or_default();
    Ok(RunResult {
        workload: kind,
        size,
        scheduler,
        bound: obs.bound_at.len(),
        throughput: stats::first_to_last(&obs.bound_at),
        per_second: stats::summarise(&stats::per_second_samples(&obs.bound_at)),
        latency_p50: stats::percentile(&obs.latencies, 50),
        latency_p99: stats::percentile(&obs.latencies, 99),
        usage,
        scheduler_process,
        encoding: scheduler.encoding(),
        api_server_cpu_seconds,
        api_server_process,
        leaf,
        measured_for,
        violations,
        status_lags,
    })
}

/// Nothing of a finished run is kept: SIGKILL spares the API servers' graceful shutdown
/// (the guard then only reaps them and removes their directories).
fn kill(cp: &ControlPlane) {
    if let Some(pid) = cp.pid().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) on a child of ours that is not reaped before `cp` is dropped.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// One pod of the workload's kind that the scheduler must bind before measuring starts:
/// the scheduler is then up, its caches synced.
async fn warm_up(client: &Client, kind: Kind, scheduler: Scheduler) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), WARMUP_NAMESPACE);
    let pod: Pod = serde_json::from_value(workloads::pod(
        kind,
        Phase::Warmup,
        WARMUP_NAMESPACE,
        "warmup",
        scheduler.scheduler_name(),
        None,
    ))?;
    api.create(&PostParams::default(), &pod).await?;
    wait::until(
        Duration::from_secs(300),
        "the warm-up pod bound",
        || async {
            let p = api.get("warmup").await?;
            Ok(p.spec.and_then(|s| s.node_name).map(|_| ()))
        },
    )
    .await
}

async fn wait_virtual_nodes_ready(host: &Client, leaves: &[String]) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(host.clone());
    for leaf in leaves {
        let name = keys::virtual_node_name(leaf);
        wait::until(
            Duration::from_secs(180),
            &format!("virtual node {name} Ready with the leaf's allocatable"),
            || async {
                let n = nodes.get(&name).await?;
                let st = n.status.unwrap_or_default();
                let ready = st
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let has_cpu = st
                    .allocatable
                    .is_some_and(|a| a.get("cpu").is_some_and(|q| q.0 != "0"));
                Ok((ready && has_cpu).then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}

/// Waits until every pod sent to a leaf has a copy there that its kube-scheduler bound,
/// or until nothing changed for `idle`, and counts what is left over.
async fn settle_leaves(
    leaves: &[&Client],
    names: &[String],
    sent: &BTreeMap<String, usize>,
    idle: Duration,
    start: Instant,
) -> anyhow::Result<LeafOutcome> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut last_change = Instant::now();
    let mut last = None;
    loop {
        let mut outcome = LeafOutcome::default();
        for (client, name) in leaves.iter().zip(names) {
            let expected = sent.get(name).copied().unwrap_or(0);
            let pods: Api<Pod> = Api::namespaced((*client).clone(), MEASURED_NAMESPACE);
            let list = pods.list(&ListParams::default()).await?;
            let copies = list.items.len();
            let pending = list
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
                .count();
            outcome.sent += expected;
            outcome.pending += pending;
            outcome.missing += expected.saturating_sub(copies);
        }
        if outcome.pending == 0 && outcome.missing == 0 {
            // Polled every 2 s: as late as that after the last copy was bound.
            outcome.all_running_after = Some(if outcome.sent == 0 {
                Duration::ZERO
            } else {
                start.elapsed()
            });
            return Ok(outcome);
        }
        if last != Some(outcome) {
            last = Some(outcome);
            last_change = Instant::now();
        }
        if last_change.elapsed() > idle || Instant::now() > deadline {
            return Ok(outcome);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
