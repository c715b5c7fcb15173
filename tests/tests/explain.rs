//! `kubectl mcsched explain` against a real API server and agent: a bound pod, a Pending
//! pod with its reasons grouped and what would make it schedulable, `--what-if` on a
//! manifest that is never created, all through the API server's mcsched.io API, and the
//! errors (no API installed, the agent gone).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::cli::{run, text};
use mcsched_e2e::objects::create_node;
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, wait};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

fn node(name: &str, cpu: &str, taints: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints},
        "status": {
            "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

fn pod(name: &str, scheduler: &str, cpu: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]
        }
    })
}

#[tokio::test]
async fn explain_bound_pending_and_what_if_pods() -> anyhow::Result<()> {
    let cp = ControlPlane::start("explain", ControlPlaneOptions::default()).await?;
    let kubeconfig = cp.kubeconfig.clone();
    create_node(&cp.client, node("node-a", "4", json!([]))).await?;
    create_node(&cp.client, node("node-b", "2", json!([]))).await?;
    create_node(
        &cp.client,
        node(
            "node-gpu",
            "8",
            json!([{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}]),
        ),
    )
    .await?;

    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("web", "mcsched", "3"))?,
    )
    .await?;
    // No API registered yet: explain says so instead of failing obscurely.
    let out = run(&kubeconfig, &["explain", "pod", "web"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("mcsched's API is not installed"),
        "{}",
        text(&out)
    );
    let mut agent = mcsched_e2e::api::start_agent(&cp, "mcsched", "agent", &[]).await?;
    wait::until(TIMEOUT, "default/web bound", || async {
        Ok(pods.get("web").await?.spec.and_then(|s| s.node_name))
    })
    .await?;

    // A bound pod: the winner first, the others with their first rejection.
    let out = run(&kubeconfig, &["explain", "pod", "web"])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("scheduled on node-a"), "{shown}");
    let rows: Vec<&str> = shown.lines().collect();
    let header = rows
        .iter()
        .position(|l| l.starts_with("NODE"))
        .expect("header");
    assert!(rows[header + 1].starts_with("node-a"), "{shown}");
    assert!(
        shown.contains("NodeResourcesFit: Insufficient cpu"),
        "node-b's rejection: {shown}"
    );
    assert!(
        shown.contains("TaintToleration: node(s) had untolerated taint(s)"),
        "the default profile's LeafNodeTaintToleration: {shown}"
    );
    assert!(
        !shown.contains("WHY"),
        "a bound pod needs no advice: {shown}"
    );

    kubectl_context_and_flags(&cp).await?;

    // Pending: 6 CPUs fit only on the tainted node; node-a and node-b lack cpu.
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("big", "mcsched", "6"))?,
    )
    .await?;
    let out = run(&kubeconfig, &["explain", "pod", "big"])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(
            "unschedulable: 0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
        ),
        "{shown}"
    );
    assert!(
        shown.lines().any(|l| l.starts_with("  2 node(s)")
            && l.contains("NodeResourcesFit")
            && l.contains("Insufficient cpu")
            && l.ends_with("Insufficient cpu (node-a, node-b)")),
        "{shown}"
    );
    assert!(
        shown.contains(
            "node-gpu: only LeafNodeTaintToleration rejects it (node(s) had untolerated taint(s))"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("the pod requests more cpu (6) than node-a, node-b have allocatable at all"),
        "kube-scheduler's UnschedulableAndUnresolvable for a request above allocatable: {shown}"
    );
    assert!(
        shown.contains("tolerate example.com/gpu=true:NoSchedule in spec.tolerations"),
        "the node's taint, read from the API server: {shown}"
    );
    assert!(
        shown.contains("preemption cannot help"),
        "every rejection is unresolvable: {shown}"
    );

    // The same pod with the toleration, as a what-if Deployment: fits on node-gpu, and
    // nothing is created.
    let dir = tempfile::tempdir()?;
    let manifest = dir.path().join("deployment.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: trainer}\nspec:\n  selector: {matchLabels: {app: trainer}}\n  template:\n    metadata: {labels: {app: trainer}}\n    spec:\n      tolerations: [{key: example.com/gpu, operator: Exists, effect: NoSchedule}]\n      containers:\n      - {name: c, image: pause, resources: {requests: {cpu: '6'}}}\n",
    )?;
    let file = manifest.to_string_lossy().to_string();
    let out = run(&kubeconfig, &["explain", "--what-if", "-f", file.as_str()])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("POD default/trainer-what-if  SCHEDULER mcsched"),
        "{shown}"
    );
    assert!(shown.contains("would be scheduled on node-gpu"), "{shown}");
    let deployments: Api<Deployment> = Api::namespaced(cp.client.clone(), "default");
    assert!(
        deployments
            .list(&Default::default())
            .await?
            .items
            .is_empty()
    );
    assert!(pods.get_opt("trainer-what-if").await?.is_none());

    // What-if as JSON, from stdin: the agent's explanation as it is.
    let mut child = std::process::Command::new(mcsched_e2e::cli::binary())
        .args(["--kubeconfig", &kubeconfig.to_string_lossy()])
        .args(["explain", "--what-if", "-f", "-", "-o", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(serde_json::to_string(&pod("huge", "", "64"))?.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    assert!(out.status.success(), "{}", text(&out));
    let e: mcsched_shared::explain::Explanation = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        e.scheduler_name, "mcsched",
        "an empty schedulerName takes --scheduler-name"
    );
    assert_eq!(e.num_feasible_nodes, 0);

    // Errors: exit 1 with the problem named; usage errors exit 2.
    let cases: [(&[&str], &str); 3] = [
        (&["explain", "pod", "nope"], "pod default/nope not found"),
        (
            &["explain", "--what-if", "-f", "/nonexistent.yaml"],
            "reading /nonexistent.yaml",
        ),
        (
            &[
                "explain",
                "--what-if",
                "-f",
                file.as_str(),
                "--scheduler-name",
                "default-scheduler",
            ],
            "",
        ),
    ];
    for (args, want) in cases {
        let out = run(&kubeconfig, args)?;
        let shown = text(&out);
        if want.is_empty() {
            // The manifest sets no scheduler: default-scheduler is not this agent's.
            assert_eq!(out.status.code(), Some(1), "{shown}");
            assert!(
                shown.contains(
                    "spec.schedulerName \"default-scheduler\" is not served by this agent"
                ),
                "{shown}"
            );
        } else {
            assert_eq!(out.status.code(), Some(1), "{args:?}: {shown}");
            assert!(shown.contains(want), "{args:?}: {shown}");
        }
    }
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("plain", "default-scheduler", "1"))?,
    )
    .await?;
    let out = run(&kubeconfig, &["explain", "pod", "plain"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("another scheduler may own it"),
        "{}",
        text(&out)
    );
    let bad = dir.path().join("service.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")?;
    let out = run(
        &kubeconfig,
        &["explain", "--what-if", "-f", &bad.to_string_lossy()],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("kind \"Service\" has no pod to simulate"),
        "{}",
        text(&out)
    );
    for usage in [
        &["explain"][..],
        &["explain", "-f", "x.yaml"],
        &["explain", "--what-if"],
    ] {
        let out = run(&kubeconfig, usage)?;
        assert_eq!(out.status.code(), Some(2), "{usage:?}: {}", text(&out));
    }

    // The explanation as YAML, as the API serves it.
    let out = run(&kubeconfig, &["explain", "pod", "big", "-o", "yaml"])?;
    assert!(out.status.success(), "{}", text(&out));
    let e: mcsched_shared::explain::Explanation = mcsched_shared::yaml::from_slice(&out.stdout)?;
    assert_eq!(e.pod, "default/big");
    assert_eq!(e.num_all_nodes, 3);
    let out = run(&kubeconfig, &["explain", "--what-if", "-f", &file])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("would be scheduled on node-gpu"),
        "{}",
        text(&out)
    );
    // The agent gone: the API server says the APIService is unavailable, and so does explain.
    agent.stop();
    let shown = wait::until(TIMEOUT, "explain with the agent gone", || async {
        let out = run(&kubeconfig, &["explain", "pod", "big"])?;
        let shown = text(&out);
        Ok((!out.status.success() && shown.contains("is not available")).then_some(shown))
    })
    .await?;
    assert!(
        shown.contains("the APIService v1alpha1.mcsched.io is not available"),
        "{shown}"
    );
    Ok(())
}

/// Without -n, the namespace is the kubeconfig context's, as kubectl's; and kubectl's
/// connection and impersonation flags reach the API server.
async fn kubectl_context_and_flags(cp: &ControlPlane) -> anyhow::Result<()> {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;

    mcsched_e2e::objects::namespace(&cp.client, "team-a").await?;
    let team: Api<Pod> = Api::namespaced(cp.client.clone(), "team-a");
    let mut solo = pod("solo", "mcsched", "100m");
    solo["metadata"]["namespace"] = json!("team-a");
    team.create(&PostParams::default(), &serde_json::from_value(solo)?)
        .await?;
    wait::until(TIMEOUT, "team-a/solo bound", || async {
        Ok(team.get("solo").await?.spec.and_then(|s| s.node_name))
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(&cp.kubeconfig, &kubeconfig)?;
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["config", "set-context", "--current", "--namespace=team-a"])
        .output()?;
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&kubeconfig, &["explain", "pod", "solo"])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("POD team-a/solo"), "{shown}");
    let out = run(&kubeconfig, &["explain", "pod", "solo", "-n", "default"])?;
    assert!(
        text(&out).contains("pod default/solo not found"),
        "-n over the context: {}",
        text(&out)
    );
    let out = run(&cp.kubeconfig, &["explain", "pod", "solo"])?;
    assert!(
        text(&out).contains("pod default/solo not found"),
        "a context without a namespace: {}",
        text(&out)
    );

    // --as: the API server answers as the user impersonated, who may read nothing.
    let out = run(&cp.kubeconfig, &["explain", "pod", "web", "--as", "alice"])?;
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("you may not get pods in namespace default")
            && shown.contains("User \"alice\" cannot get resource \"pods\""),
        "{shown}"
    );
    let out = run(
        &cp.kubeconfig,
        &[
            "explain",
            "pod",
            "web",
            "--as",
            "alice",
            "--as-group",
            "system:masters",
        ],
    )?;
    assert!(out.status.success(), "a group impersonated: {}", text(&out));

    // --server, --certificate-authority and --token alone (a kubeconfig without a
    // context): a ServiceAccount's token, which RBAC gives nothing.
    let accounts: Api<ServiceAccount> = Api::namespaced(cp.client.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "reader"}}))?,
        )
        .await?;
    let token = accounts
        .create_token_request("reader", &PostParams::default(), &TokenRequest::default())
        .await?
        .status
        .and_then(|s| s.token)
        .unwrap_or_default();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "apiVersion: v1\nkind: Config\n")?;
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, cp.ca_pem()?)?;
    let ca = ca.to_string_lossy().to_string();
    let flags = [
        "-s",
        cp.url.as_str(),
        "--certificate-authority",
        ca.as_str(),
        "--token",
        token.as_str(),
    ];
    let mut args = vec!["explain", "pod", "web"];
    args.extend_from_slice(&flags);
    let out = run(&empty, &args)?;
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown
            .contains("User \"system:serviceaccount:default:reader\" cannot get resource \"pods\""),
        "{shown}"
    );
    let out = run(
        &empty,
        &[
            "explain",
            "pod",
            "web",
            "-s",
            cp.url.as_str(),
            "--token",
            token.as_str(),
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        !text(&out).contains("cannot get resource"),
        "without the CA the server is not trusted: {}",
        text(&out)
    );
    let out = run(
        &cp.kubeconfig,
        &["explain", "pod", "web", "--request-timeout", "soon"],
    )?;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("Invalid timeout value"),
        "{}",
        text(&out)
    );
    let out = run(
        &cp.kubeconfig,
        &["explain", "pod", "web", "--request-timeout", "30"],
    )?;
    assert!(out.status.success(), "{}", text(&out));
    Ok(())
}
