//! The kubernetes-mixin's scheduler dashboard against a real agent: every metric name it
//! reads (tests/data/kubernetes-mixin-scheduler-metrics.txt) has samples on /metrics once a
//! pod was scheduled.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

const MIXIN_METRICS: &str = include_str!("../data/kubernetes-mixin-scheduler-metrics.txt");

/// The names of `section` (`[exposed]` or `[not applicable]`) of the list.
fn section(name: &str) -> Vec<&'static str> {
    let mut inside = false;
    let mut names = Vec::new();
    for line in MIXIN_METRICS.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == name;
        } else if inside && !line.is_empty() && !line.starts_with('#') {
            names.push(line);
        }
    }
    names
}

/// Sample lines of the family `name` (a `{` or a space after it: not a longer name's).
fn samples<'a>(metrics: &'a str, name: &str) -> Vec<&'a str> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

#[test]
fn the_list_has_both_sections() {
    assert_eq!(section("[exposed]").len(), 7);
    assert_eq!(section("[not applicable]"), ["go_goroutines"]);
}

#[tokio::test]
async fn every_name_the_scheduler_dashboard_reads_is_exposed() -> anyhow::Result<()> {
    let cp = ControlPlane::start("dashboard", ControlPlaneOptions::default()).await?;
    mcsched_e2e::objects::create_node(
        &cp.client,
        json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }),
    )
    .await?;
    let agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let http = mcsched_e2e::api::admin_https(&cp)?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "schedulerName": "mcsched",
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]
            }
        }))?,
    )
    .await?;
    wait::until(TIMEOUT, "default/web bound", || async {
        let p = pods.get("web").await?;
        Ok(p.spec.and_then(|s| s.node_name))
    })
    .await?;

    // The pod's SLI is observed once its binding is; the cache's sizes each second.
    let metrics = wait::until(TIMEOUT, "the dashboard's metrics", || async {
        let metrics = http
            .get(format!("{}/metrics", agent.url))
            .send()
            .await?
            .text()
            .await?;
        let missing = section("[exposed]")
            .into_iter()
            .any(|name| samples(&metrics, name).is_empty());
        Ok((!missing).then_some(metrics))
    })
    .await;
    let metrics = match metrics {
        Ok(m) => m,
        Err(e) => {
            let last = http
                .get(format!("{}/metrics", agent.url))
                .send()
                .await?
                .text()
                .await?;
            let missing: Vec<_> = section("[exposed]")
                .into_iter()
                .filter(|name| samples(&last, name).is_empty())
                .collect();
            anyhow::bail!("{e}: {missing:?} missing from /metrics:\n{last}");
        }
    };
    // The one pod, scheduled at its first attempt.
    assert!(
        samples(&metrics, "scheduler_schedule_attempts_total").contains(
            &r#"scheduler_schedule_attempts_total{result="scheduled",profile="mcsched"} 1"#
        ),
        "{metrics}"
    );
    // The agent's own requests to the API server: its watches' lists at least, by the
    // server's host:port.
    let host = cp.url.split_once("://").map_or(cp.url.as_str(), |(_, h)| h);
    let host = host.trim_end_matches('/');
    let get = format!(r#"rest_client_requests_total{{code="200",host="{host}",method="GET"}} "#);
    assert!(
        metrics.lines().any(|l| l.starts_with(&get)),
        "{get}\n{metrics}"
    );
    let leading = r#"leader_election_master_status{name="#;
    let status: Vec<_> = samples(&metrics, "leader_election_master_status");
    assert!(
        status.iter().all(|l| l.starts_with(leading)) && status.iter().any(|l| l.ends_with(" 1")),
        "{status:?}"
    );
    for line in [
        r#"scheduler_cache_size{type="nodes"} 1"#,
        r#"scheduler_cache_size{type="pods"} 1"#,
        r#"scheduler_cache_size{type="assumed_pods"} 0"#,
    ] {
        let seen = wait::until(TIMEOUT, line, || async {
            let m = http
                .get(format!("{}/metrics", agent.url))
                .send()
                .await?
                .text()
                .await?;
            Ok(m.lines().any(|l| l == line).then_some(()))
        })
        .await;
        assert!(seen.is_ok(), "{line}");
    }
    for name in [
        "scheduler_scheduling_algorithm_duration_seconds_bucket",
        "scheduler_event_handling_duration_seconds_bucket",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
        "process_virtual_memory_bytes",
    ] {
        assert!(!samples(&metrics, name).is_empty(), "{name}\n{metrics}");
    }
    // Go's own, not the agent's.
    for name in section("[not applicable]") {
        assert!(samples(&metrics, name).is_empty(), "{name}\n{metrics}");
    }
    Ok(())
}
