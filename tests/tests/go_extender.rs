//! The example scheduler extender of the Kubernetes docs' "Extending the scheduler", its
//! Go source unchanged (`tests/go-extender/`), built with `go build` and run on the port it
//! hard-codes (8080), behind mcsched-agent
//! with that page's KubeSchedulerConfiguration (only the extender's URL changed from the
//! in-cluster Service to 127.0.0.1).
//!
//! The example serves prioritize at `/priority` while its configuration says
//! `prioritizeVerb: "prioritize"`: as written, every prioritize call gets a 404, which
//! kube-scheduler ignores (the extender's scores count as zero) and so does mcsched. The
//! second run sets `prioritizeVerb: "priority"`, the path the code serves, and the
//! extender's scores by node order decide.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::process::Guarded;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::explain::{Explanation, Outcome};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
/// The example's `http.ListenAndServe(":8080", nil)`.
const EXAMPLE_PORT: u16 = 8080;
const SCHEDULER: &str = "my-scheduler-with-extender";

/// `go build` of the example's module into `dir` (Go's build cache makes reruns quick).
fn build_extender(dir: &Path) -> anyhow::Result<PathBuf> {
    let src = mcsched_e2e::repo_root().join("tests/go-extender");
    let bin = dir.join("my-scheduler-extender");
    let out = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .output()
        .context("cannot run go")?;
    if !out.status.success() {
        bail!(
            "go build in {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(bin)
}

async fn node(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    mcsched_e2e::objects::ready_node(
        client,
        name,
        "4",
        "8Gi",
        json!({"kubernetes.io/hostname": name}),
    )
    .await
}

/// The example's configuration (`shared/testdata/config/extending-extender-v1.yaml`) with the
/// URL pointed here and, optionally, the prioritize verb the example's code serves.
fn config(dir: &Path, name: &str, prioritize_verb: &str) -> anyhow::Result<PathBuf> {
    let example =
        mcsched_e2e::repo_root().join("shared/testdata/config/extending-extender-v1.yaml");
    let text = std::fs::read_to_string(&example)?
        .replace(
            "http://my-scheduler-extender.kube-system.svc:8080",
            &format!("http://127.0.0.1:{EXAMPLE_PORT}"),
        )
        .replace(
            "prioritizeVerb: \"prioritize\"",
            &format!("prioritizeVerb: \"{prioritize_verb}\""),
        );
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn create_pods(pods: &Api<Pod>, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"schedulerName": SCHEDULER,
                     "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]}
        }))?;
        pods.create(&PostParams::default(), &p).await?;
    }
    Ok(())
}

async fn bound(pods: &Api<Pod>, name: &str, agent: &Agent) -> anyhow::Result<String> {
    wait::until(TIMEOUT, &format!("{name} bound"), || async {
        Ok(pods.get(name).await?.spec.and_then(|s| s.node_name))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\nagent log:\n{}", agent.logs()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_go_extender_filters_and_binds_unchanged() -> anyhow::Result<()> {
    if std::net::TcpListener::bind(("0.0.0.0", EXAMPLE_PORT)).is_err() {
        bail!("port {EXAMPLE_PORT}, which the example extender hard-codes, is in use");
    }
    let cp = ControlPlane::start("go-extender", ControlPlaneOptions::default()).await?;
    let bin = build_extender(cp.dir())?;
    for n in ["n1", "n2", "n3"] {
        node(&cp.client, n).await?;
    }
    // The example's bind.go reads its kubeconfig as controller-runtime does: $KUBECONFIG.
    let ext_log = cp.dir().join("extender.log");
    let mut cmd = Command::new(&bin);
    cmd.env("KUBECONFIG", &cp.kubeconfig);
    let _extender = Guarded::spawn(cmd, "the docs' example extender", &ext_log)?;
    let http = mcsched_e2e::api::admin_https(&cp)?;
    wait::until(TIMEOUT, "the extender listening", || async {
        // GET is refused with 405 by the example's handlers: it is up.
        let r = http
            .get(format!("http://127.0.0.1:{EXAMPLE_PORT}/filter"))
            .send()
            .await;
        Ok(r.ok().map(|_| ()))
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");

    // 1. The example's configuration as written.
    let as_written = config(cp.dir(), "go-extender.yaml", "prioritize")?;
    let mut agent = Agent::start_with(
        &cp.kubeconfig,
        "unused",
        cp.dir(),
        "go-extender",
        &[&format!("--config={}", as_written.display())],
    )?;
    create_pods(&pods, &["a0", "a1"]).await?;
    for name in ["a0", "a1"] {
        let node = bound(&pods, name, &agent).await?;
        let log = std::fs::read_to_string(&ext_log)?;
        assert!(
            log.contains(&format!("pod default/{name} is bind to {node}")),
            "the example's bind verb bound {name}:\n{log}"
        );
    }
    let log = std::fs::read_to_string(&ext_log)?;
    assert!(
        log.contains("my-scheduler-extender filter called."),
        "{log}"
    );
    assert!(
        !log.contains("prioritize called"),
        "nothing serves /prioritize in the example:\n{log}"
    );
    assert!(
        agent.logs().contains("extender prioritize failed"),
        "{}",
        agent.logs()
    );
    agent.stop();

    // 2. With the verb the example's code serves, its scores by node order count in the totals.
    let served = config(cp.dir(), "go-extender-priority.yaml", "priority")?;
    let agent = Agent::start_with(
        &cp.kubeconfig,
        "unused",
        cp.dir(),
        "go-extender-priority",
        &[&format!("--config={}", served.display())],
    )?;
    for name in ["b0", "b1", "b2"] {
        create_pods(&pods, &[name]).await?;
        let node = bound(&pods, name, &agent).await?;
        let explained: Explanation =
            mcsched_e2e::api::explain(&http, &agent.url, "default", name).await?;
        assert_eq!(
            explained.outcome,
            Outcome::Scheduled {
                node: node.clone(),
                leaf_node: None
            }
        );
        let scores = explained
            .extenders
            .iter()
            .find(|a| a.verb == "prioritize")
            .map(|a| a.scores.clone())
            .context("no prioritize answer explained")?;
        // Host i of the nodes sent scores i: 0, 1, 2 (×10 each, weight 1).
        let mut values: Vec<i64> = scores.iter().map(|(_, s)| *s).collect();
        values.sort();
        assert_eq!(values, vec![0, 1, 2], "{scores:?}");
        // Each node's total is its plugins' weighted scores plus the extender's score × 10
        // (weight 1), and the pod went to a node with the highest total. (The extender's
        // 20 need not win: pods already on its favourite can cost it as much in
        // NodeResourcesFit and BalancedAllocation, and a tie is broken at random.)
        let detail = serde_json::to_string_pretty(&explained.nodes).unwrap_or_default();
        let extender_score = |n: &str| scores.iter().find(|(m, _)| m == n).map_or(0, |s| s.1);
        for n in &explained.nodes {
            let plugins: i64 = n.scores.iter().map(|s| s.weighted).sum();
            assert_eq!(
                n.total_score,
                Some(plugins + extender_score(&n.node) * 10),
                "{}: {scores:?}\n{detail}",
                n.node
            );
        }
        let best = explained.nodes.iter().filter_map(|n| n.total_score).max();
        let chosen = explained.nodes.iter().find(|n| n.node == node);
        assert_eq!(
            chosen.and_then(|n| n.total_score),
            best,
            "{node} is not among the best totals: {scores:?}\n{detail}"
        );
        let log = std::fs::read_to_string(&ext_log)?;
        assert!(
            log.contains(&format!("pod default/{name} is bind to {node}")),
            "{log}"
        );
    }
    let log = std::fs::read_to_string(&ext_log)?;
    assert!(log.contains("my-scheduler-extender prioritize called."));
    Ok(())
}
