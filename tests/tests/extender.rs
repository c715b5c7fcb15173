//! mcsched with a scheduler extender (the `extenders:` block of the Kubernetes docs' "Extending the scheduler"): the extender's
//! filter, prioritize and bind verbs decide, through a configuration file, and decide
//! explanations and what-ifs the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use k8s_openapi::api::core::v1::{Binding, Pod};
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use mcsched_shared::explain::{Explanation, Outcome};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn node(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    mcsched_e2e::objects::create_node(
        client,
        json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }),
    )
    .await
}

#[derive(Default)]
struct Calls {
    filter: AtomicUsize,
    prioritize: AtomicUsize,
    bind: AtomicUsize,
    preempt: AtomicUsize,
}

/// An extender like the docs' example: filter drops `n2`, prioritize prefers `n3`, bind posts
/// the Binding itself, and preempt keeps every candidate but `n1` (with the victims it
/// was given, answered by UID as kube's extenders do). Answers use lower-case keys here
/// and there, as Go accepts them.
async fn serve_extender(client: kube::Client, calls: Arc<Calls>) -> anyhow::Result<u16> {
    let (c1, c2, c3, c4) = (calls.clone(), calls.clone(), calls.clone(), calls);
    let app = axum::Router::new()
        .route(
            "/preempt",
            post(move |Json(args): Json<Value>| {
                let c = c4.clone();
                async move {
                    c.preempt.fetch_add(1, Ordering::SeqCst);
                    let kept: serde_json::Map<String, Value> = args["NodeNameToVictims"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(node, _)| node != "n1")
                        .map(|(node, v)| {
                            let uids: Vec<Value> = v["Pods"]
                                .as_array()
                                .cloned()
                                .unwrap_or_default()
                                .iter()
                                .map(|p| json!({"uid": p["metadata"]["uid"]}))
                                .collect();
                            (node, json!({"pods": uids, "numPDBViolations": v["NumPDBViolations"]}))
                        })
                        .collect();
                    Json(json!({"nodeNameToMetaVictims": kept}))
                }
            }),
        )
        .route(
            "/filter",
            post(move |Json(args): Json<Value>| {
                let c = c1.clone();
                async move {
                    c.filter.fetch_add(1, Ordering::SeqCst);
                    let items: Vec<Value> = args["Nodes"]["items"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|n| n["metadata"]["name"] != "n2")
                        .collect();
                    Json(json!({"Nodes": {"items": items}, "failedNodes": {"n2": "extender says no"}, "Error": ""}))
                }
            }),
        )
        .route(
            "/prioritize",
            post(move |Json(args): Json<Value>| {
                let c = c2.clone();
                async move {
                    c.prioritize.fetch_add(1, Ordering::SeqCst);
                    let list: Vec<Value> = args["Nodes"]["items"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .map(|n| {
                            let name = n["metadata"]["name"].as_str().unwrap_or_default().to_string();
                            json!({"Host": name, "score": if name == "n3" { 10 } else { 0 }})
                        })
                        .collect();
                    Json(Value::Array(list))
                }
            }),
        )
        .route(
            "/bind",
            post(move |Json(args): Json<Value>| {
                let (c, client) = (c3.clone(), client.clone());
                async move {
                    c.bind.fetch_add(1, Ordering::SeqCst);
                    let ns = args["PodNamespace"].as_str().unwrap_or_default().to_string();
                    let name = args["PodName"].as_str().unwrap_or_default().to_string();
                    let binding: Result<Binding, _> = serde_json::from_value(json!({
                        "metadata": {"name": name, "namespace": ns},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]}
                    }));
                    let result = match binding {
                        Ok(b) => Api::<Pod>::namespaced(client, &ns)
                            .create_subresource::<_, Value>("binding", &name, &PostParams::default(), &b)
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    Json(json!({"Error": result.err().unwrap_or_default()}))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(port)
}

/// A control plane with nodes n1, n2 and n3, the extender above, and mcsched-agent
/// serving profile `scheduler` with an `extenders:` entry of `verbs` pointed at it.
async fn with_extender(
    name: &str,
    scheduler: &str,
    verbs: &str,
) -> anyhow::Result<(ControlPlane, Arc<Calls>, Agent)> {
    let cp = ControlPlane::start(name, ControlPlaneOptions::default()).await?;
    for n in ["n1", "n2", "n3"] {
        node(&cp.client, n).await?;
    }
    let calls = Arc::new(Calls::default());
    let port = serve_extender(cp.client.clone(), calls.clone()).await?;
    let config = cp.dir().join("scheduler-config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: {scheduler}
leaderElection:
  leaderElect: false
extenders:
- urlPrefix: \"http://127.0.0.1:{port}\"
{verbs}"
        ),
    )?;
    let config_arg = format!("--config={}", config.display());
    let agent = mcsched_e2e::api::start_agent(&cp, "unused", name, &[&config_arg]).await?;
    Ok((cp, calls, agent))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extender_filters_prioritizes_and_binds() -> anyhow::Result<()> {
    // the docs example's configuration, pointed at this extender.
    let (cp, calls, agent) = with_extender(
        "extender",
        "my-scheduler-with-extender",
        "  enableHTTPS: false
  filterVerb: \"filter\"
  prioritizeVerb: \"prioritize\"
  bindVerb: \"bind\"
  weight: 1
  nodeCacheCapable: false
",
    )
    .await?;

    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    for i in 0..3 {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p{i}")},
            "spec": {"schedulerName": "my-scheduler-with-extender",
                     "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]}
        }))?;
        pods.create(&PostParams::default(), &p).await?;
    }
    for i in 0..3 {
        let name = format!("p{i}");
        let node = wait::until(TIMEOUT, &format!("{name} bound"), || async {
            Ok(pods.get(&name).await?.spec.and_then(|s| s.node_name))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e:#}\nagent log:\n{}", agent.logs()))?;
        assert_eq!(
            node, "n3",
            "the extender's priority (10 × weight 1 × 10) decides"
        );
    }
    assert!(calls.filter.load(Ordering::SeqCst) >= 3);
    assert!(calls.prioritize.load(Ordering::SeqCst) >= 3);
    assert_eq!(
        calls.bind.load(Ordering::SeqCst),
        3,
        "the extender, not DefaultBinder, binds"
    );
    Ok(())
}

/// The explanation the agent gives for `pod` (never created) through `kubectl mcsched
/// explain --what-if -o json`.
fn what_if(cp: &ControlPlane, pod: &Value) -> anyhow::Result<Explanation> {
    let file = cp.dir().join(format!(
        "{}.json",
        pod["metadata"]["name"].as_str().unwrap_or("what-if")
    ));
    std::fs::write(&file, serde_json::to_vec(pod)?)?;
    let file = file.to_string_lossy().to_string();
    let out = mcsched_e2e::cli::run(
        &cp.kubeconfig,
        &["explain", "--what-if", "-f", &file, "-o", "json"],
    )?;
    anyhow::ensure!(out.status.success(), "{}", mcsched_e2e::cli::text(&out));
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// One path for every decision: an extender that rejects a node changes what-if
/// explanations (and the PostFilter dry run in them) exactly as it changes the live
/// decision. Before the engine's one schedule_pod, a what-if of a pod that fits only on
/// the rejected node answered "scheduled on" it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extenders_rejection_changes_what_if_as_it_changes_the_live_decision()
-> anyhow::Result<()> {
    let (cp, calls, agent) = with_extender(
        "extender-what-if",
        "with-extender",
        "  filterVerb: \"filter\"
  prioritizeVerb: \"prioritize\"
  weight: 1
",
    )
    .await?;
    let pod = |name: &str, pinned: bool| {
        let mut spec = json!({"schedulerName": "with-extender",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]});
        if pinned {
            spec["nodeSelector"] = json!({"kubernetes.io/hostname": "n2"});
        }
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    };
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");

    // Live: a pod only n2 could take stays Pending with the extender's reason.
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("pinned", true))?,
    )
    .await?;
    let live = wait::until(TIMEOUT, "pinned reported unschedulable", || async {
        let p = pods.get("pinned").await?;
        Ok(p.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
            .and_then(|c| c.message))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\nagent log:\n{}", agent.logs()))?;
    assert!(live.contains("extender says no"), "{live}");
    assert!(
        live.contains("preemption: 0/3 nodes are available"),
        "PostFilter ran on the extender's verdict: {live}"
    );
    assert_eq!(
        pods.get("pinned").await?.spec.and_then(|s| s.node_name),
        None
    );

    // What-if of the same pod: the same verdict, word for word, PostFilter's part too.
    let e = what_if(&cp, &pod("pinned-what-if", true))?;
    match &e.outcome {
        Outcome::Unschedulable {
            message,
            nominated_node,
            ..
        } => {
            assert_eq!(message, &live, "what-if and live disagree");
            assert_eq!(nominated_node, &None);
        }
        other => panic!("what-if of a pod only n2 fits: {other:?}, live: {live}"),
    }
    let n2 = e
        .nodes
        .iter()
        .find(|n| n.node == "n2")
        .expect("n2 explained");
    assert!(!n2.feasible);
    assert!(
        e.extenders
            .iter()
            .any(|a| a.verb == "filter" && a.failed_nodes.iter().any(|(n, _)| n == "n2")),
        "the extender's answer is in the explanation: {:?}",
        e.extenders
    );

    // The explanation of the Pending pod itself says the same.
    let out = mcsched_e2e::cli::run(&cp.kubeconfig, &["explain", "pod", "pinned", "-o", "json"])?;
    let pending: Explanation = serde_json::from_slice(&out.stdout)
        .map_err(|err| anyhow::anyhow!("{err}: {}", mcsched_e2e::cli::text(&out)))?;
    assert!(
        matches!(&pending.outcome, Outcome::Unschedulable { message, .. } if message == &live),
        "{:?}",
        pending.outcome
    );

    // A free pod: the extender's priority picks n3, live and in the what-if alike.
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("free", false))?,
    )
    .await?;
    let bound = wait::until(TIMEOUT, "free bound", || async {
        Ok(pods.get("free").await?.spec.and_then(|s| s.node_name))
    })
    .await?;
    assert_eq!(bound, "n3");
    let e = what_if(&cp, &pod("free-what-if", false))?;
    assert_eq!(
        e.outcome,
        Outcome::Scheduled {
            node: "n3".into(),
            leaf_node: None
        }
    );
    assert!(calls.prioritize.load(Ordering::SeqCst) >= 2);
    Ok(())
}

/// The extender's preempt verb takes part in preemption as in kube-scheduler: of three
/// full nodes, preemption alone would pick n1 (the lowest-priority victim), but the
/// extender drops n1 from the candidates, so the pod is nominated to n2 and only n2's
/// victim goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extenders_preempt_verb_narrows_the_candidates() -> anyhow::Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let (cp, calls, agent) = with_extender(
        "extender-preempt",
        "with-extender",
        "  preemptVerb: \"preempt\"\n",
    )
    .await?;
    for (name, value) in [("p10", 10), ("p20", 20), ("p30", 30), ("urgent", 1000)] {
        let pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?;
        Api::<PriorityClass>::all(cp.client.clone())
            .create(&PostParams::default(), &pc)
            .await?;
    }
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    for (node, class) in [("n1", "p10"), ("n2", "p20"), ("n3", "p30")] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("busy-{node}"), "namespace": "default"},
            "spec": {"nodeName": node, "priorityClassName": class,
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "4"}}}]},
        }))?;
        pods.create(&PostParams::default(), &p).await?;
    }
    let urgent: Pod = serde_json::from_value(json!({
        "metadata": {"name": "urgent", "namespace": "default"},
        "spec": {"schedulerName": "with-extender", "priorityClassName": "urgent",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "3"}}}]},
    }))?;
    pods.create(&PostParams::default(), &urgent).await?;
    let nominated = wait::until(TIMEOUT, "default/urgent nominated", || async {
        Ok(pods
            .get("urgent")
            .await?
            .status
            .and_then(|s| s.nominated_node_name))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\nagent log:\n{}", agent.logs()))?;
    assert_eq!(nominated, "n2");
    // No kubelet here: an evicted pod stays Terminating.
    let terminating = |name: &'static str| {
        let pods = pods.clone();
        async move {
            Ok::<bool, anyhow::Error>(
                pods.get_opt(name)
                    .await?
                    .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
            )
        }
    };
    wait::until(TIMEOUT, "n2's victim evicted", || async {
        Ok(terminating("busy-n2").await?.then_some(()))
    })
    .await?;
    assert!(!terminating("busy-n1").await?, "n1's pod was preempted");
    assert!(!terminating("busy-n3").await?, "n3's pod was preempted");
    assert!(calls.preempt.load(Ordering::SeqCst) >= 1);
    Ok(())
}
