//! The engine's HTTPS surface against a real control plane: health, kube-scheduler's
//! metric names, explanations and simulations.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, audit, wait};
use mcsched_shared::explain::{Explanation, Outcome};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn node(client: &kube::Client, name: &str, cpu: &str, zone: &str) -> anyhow::Result<()> {
    mcsched_e2e::objects::create_node(
        client,
        json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
            "status": {
                "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }),
    )
    .await
}

fn pod(name: &str, cpu: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "mcsched",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]
        }
    })
}

#[tokio::test]
async fn health_metrics_explain_and_simulate() -> anyhow::Result<()> {
    let cp = ControlPlane::start("engine", ControlPlaneOptions::default()).await?;
    node(&cp.client, "small", "1", "a").await?;
    node(&cp.client, "big", "8", "b").await?;
    let agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let http = mcsched_e2e::api::admin_https(&cp)?;

    wait::until(TIMEOUT, "/readyz", || async {
        let r = http.get(format!("{}/readyz", agent.url)).send().await;
        Ok(r.ok().filter(|r| r.status().is_success()).map(|_| ()))
    })
    .await?;
    assert_eq!(
        http.get(format!("{}/healthz", agent.url))
            .send()
            .await?
            .text()
            .await?,
        "ok"
    );

    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("web", "2"))?,
    )
    .await?;
    wait::until(TIMEOUT, "default/web bound", || async {
        let p = pods.get("web").await?;
        Ok(p.spec.and_then(|s| s.node_name))
    })
    .await?;

    let explained: Explanation =
        mcsched_e2e::api::explain(&http, &agent.url, "default", "web").await?;
    assert_eq!(
        explained.outcome,
        Outcome::Scheduled {
            node: "big".into(),
            leaf_node: None
        }
    );
    let small = explained
        .nodes
        .iter()
        .find(|n| n.node == "small")
        .expect("small explained");
    assert!(!small.feasible);
    assert!(small.filters.iter().any(
        |f| f.plugin == "NodeResourcesFit" && f.reasons == vec!["Insufficient cpu".to_string()]
    ));

    // A what-if: 9 cores fit nowhere; nothing is created. The message is the live one,
    // PostFilter's part included (nothing to preempt: every node lacks cpu outright).
    let sim: Explanation =
        mcsched_e2e::api::what_if(&http, &agent.url, "default", &pod("what-if", "9")).await?;
    match &sim.outcome {
        Outcome::Unschedulable { message, .. } => {
            assert_eq!(
                message,
                "0/2 nodes are available: 2 Insufficient cpu. \
                 preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            )
        }
        other => panic!("unexpected outcome {other:?}"),
    }
    assert_eq!(sim.nodes.len(), 2);
    assert!(pods.get_opt("what-if").await?.is_none());
    let bad = http
        .post(format!(
            "{}{}",
            agent.url,
            mcsched_shared::api::namespaced_path("default", "whatifs")
        ))
        .body("not json")
        .send()
        .await?;
    assert_eq!(bad.status(), reqwest::StatusCode::BAD_REQUEST);

    // kube's system default spreading: a pod a Service selects spreads, by host and zone,
    // from the pods that Service selects. web-0 (app=web) runs on big.
    let mut web0 = pod("web-0", "100m");
    web0["metadata"]["labels"] = json!({"app": "web"});
    web0["spec"]["nodeName"] = json!("big");
    pods.create(&PostParams::default(), &serde_json::from_value(web0)?)
        .await?;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(cp.client.clone(), "default");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
            }))?,
        )
        .await?;
    let spread_scores = |app: &'static str| {
        let http = http.clone();
        let url = agent.url.clone();
        async move {
            let mut p = pod("spread", "100m");
            p["metadata"]["labels"] = json!({"app": app});
            let sim: Explanation = mcsched_e2e::api::what_if(&http, &url, "default", &p).await?;
            let mut raw: Vec<(String, i64)> = sim
                .nodes
                .iter()
                .flat_map(|n| {
                    n.scores
                        .iter()
                        .filter(|s| s.plugin == "PodTopologySpread")
                        .map(|s| (n.node.clone(), s.raw))
                })
                .collect();
            raw.sort();
            anyhow::Ok(raw)
        }
    };
    // Host and zone weights ln(2 + 2): big 1.39 + 2 + 1.39 + 4 ≈ 9, small 2 + 4 = 6.
    let want = vec![("big".to_string(), 9), ("small".to_string(), 6)];
    wait::until(
        TIMEOUT,
        "the Service to select the simulated pod",
        || async { Ok(Some(spread_scores("web").await?).filter(|r| *r == want)) },
    )
    .await?;
    // Nothing selects app=other: PodTopologySpread does not score it.
    assert_eq!(spread_scores("other").await?, vec![]);

    let metrics = http
        .get(format!("{}/metrics", agent.url))
        .send()
        .await?
        .text()
        .await?;
    // One pod scheduled (web; web-0 came with its node): the whole line, so that 10 to 19
    // do not pass for 1.
    let scheduled = "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"mcsched\"} ";
    let count = metrics
        .lines()
        .find_map(|l| l.strip_prefix(scheduled))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert_eq!(count, Some(1), "{scheduled}\n{metrics}");
    for name in [
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pending_pods{queue=\"active\"}",
        "scheduler_framework_extension_point_duration_seconds_bucket",
        "scheduler_queue_incoming_pods_total",
        "scheduler_preemption_attempts_total",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    let value = |metrics: &str, series: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse::<f64>().ok())
    };
    // web: one attempt, bound at once; NodeUnschedulable and NodeResourcesFit filtered
    // both nodes (one node left: nothing scored).
    for (series, want) in [
        ("scheduler_pod_scheduling_attempts_count", 1.0),
        ("scheduler_pod_scheduling_attempts_sum", 1.0),
        (
            "scheduler_pod_scheduling_sli_duration_seconds_count{attempts=\"1\"}",
            1.0,
        ),
        (
            "scheduler_plugin_evaluation_total{plugin=\"NodeResourcesFit\",extension_point=\"Filter\",profile=\"mcsched\"}",
            2.0,
        ),
        (
            "scheduler_plugin_evaluation_total{plugin=\"NodeUnschedulable\",extension_point=\"Filter\",profile=\"mcsched\"}",
            2.0,
        ),
    ] {
        assert_eq!(value(&metrics, series), Some(want), "{series}\n{metrics}");
    }
    // A pod no node can hold waits, counted under the plugin that rejected it.
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("too-big", "64"))?,
    )
    .await?;
    let series = "scheduler_unschedulable_pods{plugin=\"NodeResourcesFit\",profile=\"mcsched\"}";
    let scrape = || async {
        anyhow::Ok(
            http.get(format!("{}/metrics", agent.url))
                .send()
                .await?
                .text()
                .await?,
        )
    };
    wait::until(TIMEOUT, "too-big counted as unschedulable", || async {
        Ok(value(&scrape().await?, series).filter(|v| *v == 1.0))
    })
    .await?;
    pods.delete("too-big", &Default::default()).await?;
    wait::until(TIMEOUT, "too-big no longer counted", || async {
        Ok(value(&scrape().await?, series).filter(|v| *v == 0.0))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn preemption_evicts_a_lower_priority_pod_and_nominates_its_node() -> anyhow::Result<()> {
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let cp = ControlPlane::start(
        "preempt",
        ControlPlaneOptions {
            simulate_kubelets: true,
            ..Default::default()
        },
    )
    .await?;
    node(&cp.client, "only", "2", "a").await?;
    let classes: Api<PriorityClass> = Api::all(cp.client.clone());
    for (name, value) in [("low", 10), ("high", 1000)] {
        classes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?,
            )
            .await?;
    }
    let agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    let with_class = |name: &str, class: &str| -> anyhow::Result<Pod> {
        let mut p = pod(name, "1500m");
        p["spec"]["priorityClassName"] = json!(class);
        Ok(serde_json::from_value(p)?)
    };
    pods.create(&PostParams::default(), &with_class("victim", "low")?)
        .await?;
    wait::until(TIMEOUT, "victim bound", || async {
        Ok(pods.get("victim").await?.spec.and_then(|s| s.node_name))
    })
    .await?;

    pods.create(&PostParams::default(), &with_class("important", "high")?)
        .await?;
    // Nominated to the node its victim is evicted from, until it is bound there (the API
    // server clears the nomination with the binding).
    let nominated = std::sync::Mutex::new(None);
    let node = wait::until(TIMEOUT, "important bound after preemption", || async {
        let p = pods.get("important").await?;
        if let Some(n) = p
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            && let Ok(mut seen) = nominated.lock()
        {
            *seen = Some(n);
        }
        Ok(p.spec.and_then(|s| s.node_name))
    })
    .await?;
    assert_eq!(node, "only");
    assert_eq!(
        nominated.lock().ok().and_then(|n| n.clone()).as_deref(),
        Some("only"),
        "important was never seen nominated"
    );
    assert!(
        pods.get_opt("victim").await?.is_none(),
        "victim still exists"
    );
    let events: Api<Event> = Api::namespaced(cp.client.clone(), "default");
    let preempted = events
        .list(&kube::api::ListParams::default().fields("regarding.name=victim"))
        .await?
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("Preempted"));
    let note = preempted.and_then(|e| e.note).unwrap_or_default();
    assert!(
        note.starts_with("Preempted by pod ") && note.ends_with(" on node only"),
        "{note}"
    );
    let metrics = mcsched_e2e::api::admin_https(&cp)?
        .get(format!("{}/metrics", agent.url))
        .send()
        .await?
        .text()
        .await?;
    for (series, want) in [
        ("scheduler_preemption_victims_count ", "1"),
        ("scheduler_preemption_victims_sum ", "1.0"),
        ("scheduler_pod_scheduling_attempts_count ", "2"),
    ] {
        assert_eq!(
            metrics.lines().find_map(|l| l.strip_prefix(series)),
            Some(want),
            "{series}\n{metrics}"
        );
    }
    Ok(())
}

/// The identity an agent elects with, as it logs it (its requests carry it in their
/// User-Agent).
async fn identity(agent: &Agent) -> anyhow::Result<String> {
    wait::until(TIMEOUT, "the agent's election identity", || async {
        Ok(agent.identity())
    })
    .await
}

/// Two replicas: the Lease's holder binds, the standby writes nothing at all (the API
/// server's audit log, every write recorded, by User-Agent); SIGTERM makes the leader
/// release the Lease, so that the standby takes it before it could have expired, and binds.
#[tokio::test]
async fn only_the_leader_binds_and_a_standby_takes_over() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::jiff::Timestamp;
    const LEASE_DURATION: Duration = Duration::from_secs(15);
    let cp = ControlPlane::start_with_args(
        "leader",
        ControlPlaneOptions::default(),
        &["--audit-log", "audit.log"],
    )
    .await?;
    node(&cp.client, "n1", "8", "a").await?;
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), "kube-system");
    let holder = || async {
        Ok(leases
            .get_opt("mcsched")
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    };
    let mut first = Agent::start_with(&cp.kubeconfig, "mcsched", cp.dir(), "first", &[])?;
    let first_id = wait::until(TIMEOUT, "a leader", holder).await?;
    assert_eq!(identity(&first).await?, first_id);
    let second = Agent::start_with(&cp.kubeconfig, "mcsched", cp.dir(), "second", &[])?;
    let second_id = identity(&second).await?;

    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("one", "100m"))?,
    )
    .await?;
    wait::until(TIMEOUT, "default/one bound", || async {
        Ok(pods.get("one").await?.spec.and_then(|s| s.node_name))
    })
    .await?;
    // The standby synced its caches and stands by (its readiness says so) ...
    wait::until(TIMEOUT, "the second agent to stand by", || async {
        Ok(second.logs().contains("standing by").then_some(()))
    })
    .await?;
    // ... while the Lease stays the first's ...
    assert_eq!(holder().await?, Some(first_id.clone()));
    let audit_log = cp.data_dir().join("audit.log");
    let by = |id: &str, w: &audit::Write| w.user_agent.ends_with(id);
    // The API server logs a request's ResponseComplete stage after the response has gone
    // out: the pod can read bound before its binding is in the file.
    let binding = wait::until(
        Duration::from_secs(30),
        "the binding of default/one in the audit log",
        || async {
            Ok(audit::writes(&audit_log)?
                .into_iter()
                .find(|w| w.subresource == "binding" && w.name == "one" && w.succeeded()))
        },
    )
    .await?;
    assert!(by(&first_id, &binding), "default/one bound by {binding}");
    let writes = audit::writes(&audit_log)?;
    // ... and it wrote nothing: no binding, no event, no status, not even the Lease.
    let standby_writes: Vec<String> = writes
        .iter()
        .filter(|w| by(&second_id, w) && w.succeeded())
        .map(|w| w.to_string())
        .collect();
    assert!(
        standby_writes.is_empty(),
        "the standby wrote: {standby_writes:?}"
    );

    // SIGTERM: the leader releases the Lease; the standby takes it at its next try,
    // before the last renewal could have expired.
    let stopping = Timestamp::now();
    let status = first
        .stop()
        .ok_or_else(|| anyhow::anyhow!("first agent already gone"))?;
    assert!(status.success());
    let new_holder = wait::until(TIMEOUT, "a new leader", || async {
        Ok(holder().await?.filter(|h| *h != first_id))
    })
    .await?;
    assert_eq!(new_holder, second_id);
    let writes = audit::writes(&audit_log)?;
    let lease_write =
        |w: &&audit::Write| w.resource == "leases" && w.name == "mcsched" && w.succeeded();
    let last_renewal = writes
        .iter()
        .filter(lease_write)
        .filter(|w| by(&first_id, w) && w.received < stopping)
        .map(|w| w.completed)
        .max()
        .ok_or_else(|| anyhow::anyhow!("the leader never wrote the Lease"))?;
    let released = writes
        .iter()
        .filter(lease_write)
        .find(|w| by(&first_id, w) && w.received >= stopping)
        .ok_or_else(|| {
            anyhow::anyhow!("the leader did not write the Lease after SIGTERM: not released")
        })?
        .completed;
    let taken = writes
        .iter()
        .filter(lease_write)
        .find(|w| by(&second_id, w))
        .ok_or_else(|| anyhow::anyhow!("the standby never wrote the Lease"))?
        .completed;
    let expiry = last_renewal + k8s_openapi::jiff::SignedDuration::try_from(LEASE_DURATION)?;
    assert!(
        taken >= released && taken < expiry,
        "the standby took the Lease at {taken}, the leader released it at {released}; \
         its last renewal ({last_renewal}) expired at {expiry}"
    );
    println!(
        "handover: released {:.1} s after SIGTERM, taken {:.1} s after the release",
        released.duration_since(stopping).as_secs_f64(),
        taken.duration_since(released).as_secs_f64()
    );
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("two", "100m"))?,
    )
    .await?;
    wait::until(TIMEOUT, "default/two bound by the new leader", || async {
        Ok(pods.get("two").await?.spec.and_then(|s| s.node_name))
    })
    .await?;
    Ok(())
}

/// Fencing: a leader frozen (SIGSTOP) past its renew deadline loses the Lease to the
/// standby, which binds what comes meanwhile; resumed, the old leader acts no more — its
/// deadline has passed before its elector even runs — and exits with "leader election
/// lost" and status 1, to come back as a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_resumes_fenced_and_exits() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let cp = ControlPlane::start("fencing", ControlPlaneOptions::default()).await?;
    node(&cp.client, "n1", "8", "a").await?;
    let config = cp.dir().join("fast-lease.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceName: fenced
  resourceNamespace: kube-system
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 1s
profiles:
- schedulerName: mcsched
",
    )?;
    let config_arg = format!("--config={}", config.display());
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), "kube-system");
    let holder = || async {
        Ok(leases
            .get_opt("fenced")
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    };
    let mut first = Agent::start_with(&cp.kubeconfig, "x", cp.dir(), "fenced-1", &[&config_arg])?;
    let first_id = wait::until(TIMEOUT, "a leader", holder).await?;
    let second = Agent::start_with(&cp.kubeconfig, "x", cp.dir(), "fenced-2", &[&config_arg])?;
    wait::until(TIMEOUT, "the second agent to stand by", || async {
        Ok(second.logs().contains("standing by").then_some(()))
    })
    .await?;

    first.signal(libc::SIGSTOP)?;
    let frozen_at = std::time::Instant::now();
    wait::until(TIMEOUT, "the standby to take the Lease", || async {
        Ok(holder().await?.filter(|h| *h != first_id))
    })
    .await?;
    println!("takeover after {:?} frozen", frozen_at.elapsed());
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("during", "100m"))?,
    )
    .await?;
    wait::until(
        TIMEOUT,
        "default/during bound by the new leader",
        || async { Ok(pods.get("during").await?.spec.and_then(|s| s.node_name)) },
    )
    .await?;

    first.signal(libc::SIGCONT)?;
    let status = first
        .wait_exit(Duration::from_secs(30))
        .ok_or_else(|| anyhow::anyhow!("the old leader still runs:\n{}", first.logs()))?;
    assert_eq!(status.code(), Some(1), "{}", first.logs());
    let log = first.logs();
    assert!(log.contains("leader election lost"), "{log}");
    assert!(
        !log.contains("default/during"),
        "the fenced leader touched the new leader's pod: {log}"
    );
    Ok(())
}
