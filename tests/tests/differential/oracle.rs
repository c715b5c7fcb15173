//! The real kube-scheduler as an oracle: `controlplane oracle` (tests/controlplane/oracle_*.go)
//! builds kube-scheduler v1.37 on a control plane's API server, with a client that only
//! reads, and answers what each of its plugins says about a pod on its cache's snapshot.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use mcsched_e2e::ControlPlane;
use mcsched_e2e::process::Guarded;
use serde::{Deserialize, Serialize};

const START_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub namespace: String,
    pub name: String,
    /// Hold the request until the oracle's snapshot shows exactly this state.
    pub expect: Expect,
    pub timeout_seconds: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Expect {
    /// Exactly these nodes.
    pub nodes: Vec<String>,
    /// Exactly these bound pods (`namespace/name`).
    pub pods: Vec<String>,
    /// At least these namespaces.
    pub namespaces: Vec<String>,
    /// At least these Services (`namespace/name`).
    pub services: Vec<String>,
    /// At least these nominations in kube-scheduler's queue (`namespace/name=node`).
    pub nominated: Vec<String>,
    /// At least these PodGroups (`namespace/name`).
    #[serde(rename = "podGroups")]
    pub pod_groups: Vec<String>,
    /// Exactly this many members of each PodGroup (`namespace/name`) counted by the cache.
    #[serde(rename = "podGroupMembers")]
    pub pod_group_members: std::collections::BTreeMap<String, usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub plugin: String,
    pub code: String,
    #[serde(default)]
    pub reasons: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Score {
    pub plugin: String,
    pub raw: i64,
    pub normalized: i64,
    pub weight: i64,
    pub weighted: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAnswer {
    pub node: String,
    pub feasible: bool,
    /// The framework's first rejection (nominated pods counted).
    #[serde(default)]
    pub status: Option<Verdict>,
    /// Every filter plugin not skipped at PreFilter, each called alone (with the nominated
    /// pods, then without where that passes, as the framework does).
    #[serde(default)]
    pub filters: Vec<Verdict>,
    /// The pods nominated here that Filter counted (`namespace/name`, sorted).
    #[serde(default)]
    pub nominated_pods: Vec<String>,
    #[serde(default)]
    pub scores: Vec<Score>,
    #[serde(default)]
    pub total_score: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub profile: String,
    pub num_all_nodes: usize,
    /// Each PreEnqueue plugin called alone.
    #[serde(default)]
    pub pre_enqueue: Vec<Verdict>,
    /// Each Permit plugin called alone for the pod on its first best node (none when no
    /// node fits).
    #[serde(default)]
    pub permit: Vec<Verdict>,
    /// Each PreFilter plugin called alone.
    #[serde(default)]
    pub pre_filter: Vec<Verdict>,
    pub pre_filter_status: Verdict,
    #[serde(default)]
    pub nodes: Vec<NodeAnswer>,
    #[serde(default)]
    pub feasible: Vec<String>,
    /// The feasible nodes of the highest total score.
    #[serde(default)]
    pub best: Vec<String>,
    pub unschedulable: bool,
    /// kube-scheduler's FailedScheduling message (FitError with PostFilter's part).
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub post_filter: Option<Verdict>,
    #[serde(default)]
    pub nominated_node: String,
    /// DefaultPreemption's dry run on each node where preemption might help.
    #[serde(default)]
    pub candidates: Vec<Candidate>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    pub node: String,
    #[serde(default)]
    pub victims: Vec<Victim>,
    #[serde(default)]
    pub pdb_violations: i64,
    /// Why the node is no candidate.
    #[serde(default)]
    pub status: Option<Verdict>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    pub pod: String,
    pub priority: i32,
    #[serde(default)]
    pub start_time: Option<String>,
}

pub struct Oracle {
    _process: Guarded,
    url: String,
    http: reqwest::Client,
    pub log: PathBuf,
}

impl Oracle {
    /// Starts `controlplane oracle` on `cp`'s API server with kube-scheduler's default
    /// profile, or the KubeSchedulerConfiguration `config` (the first profile judges), and
    /// kube's feature gates `feature_gates` (`A=true,B=false`, as kube-scheduler's
    /// `--feature-gates`; empty: the defaults).
    pub async fn start(
        cp: &ControlPlane,
        config: Option<&std::path::Path>,
        feature_gates: &str,
    ) -> anyhow::Result<Self> {
        let bin = mcsched_e2e::controlplane::binary();
        let log = cp.dir().join("oracle.log");
        let mut cmd = Command::new(&bin);
        cmd.arg("oracle").arg("--kubeconfig").arg(&cp.kubeconfig);
        if !feature_gates.is_empty() {
            cmd.arg(format!("--feature-gates={feature_gates}"));
        }
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        let mut process = Guarded::spawn(cmd, "kube-scheduler oracle", &log)
            .with_context(|| format!("cannot start {} oracle", bin.display()))?;
        let stdout = process
            .child_mut()
            .and_then(|c| c.stdout.take())
            .context("oracle stdout not captured")?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.strip_prefix("READY oracle ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(url)) => url,
            _ => bail!(
                "the oracle did not start within {START_TIMEOUT:?}:\n{}",
                mcsched_e2e::controlplane::tail(&log)
            ),
        };
        Ok(Oracle {
            _process: process,
            url,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()?,
            log,
        })
    }

    pub async fn judge(&self, request: &Request) -> anyhow::Result<Answer> {
        let resp = self
            .http
            .post(format!("{}/judge", self.url))
            .json(request)
            .send()
            .await?;
        let status = resp.status();
        let body = resp.text().await?;
        if !status.is_success() {
            bail!(
                "oracle on {}/{}: {status}: {body}",
                request.namespace,
                request.name
            );
        }
        serde_json::from_str(&body).with_context(|| format!("oracle answer: {body}"))
    }
}
