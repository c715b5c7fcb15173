//! `/debug/pprof/profile` on a real agent and API server: a CPU profile only for a caller
//! RBAC lets `get` that non-resource URL (TokenReview and SubjectAccessReview done by the
//! API server), in a form `go tool pprof` reads; not there with `enableProfiling: false`.

use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::objects::{create_node, user_token};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, api, wait};
use reqwest::StatusCode;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn answering(http: &reqwest::Client, agent: &Agent) -> anyhow::Result<()> {
    wait::until(TIMEOUT, "the agent's /healthz", || async {
        let r = http.get(format!("{}/healthz", agent.url)).send().await;
        Ok(r.ok().filter(|r| r.status().is_success()).map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))
}

#[tokio::test]
async fn the_cpu_profile_is_served_to_whom_rbac_lets_get_it() -> anyhow::Result<()> {
    let cp = ControlPlane::start("profiling", ControlPlaneOptions::default()).await?;
    // No --config: mcsched's default configuration, whose enableProfiling is kube's true.
    let agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(TIMEOUT)
        .build()?;
    answering(&http, &agent).await?;
    let url = format!("{}/debug/pprof/profile?seconds=1", agent.url);

    assert_eq!(
        http.get(&url).send().await?.status(),
        StatusCode::UNAUTHORIZED
    );
    let nobody = user_token(&cp.client, "default", "nobody").await?;
    let r = http.get(&url).bearer_auth(&nobody).send().await?;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let body: serde_json::Value = r.json().await?;
    assert_eq!(
        body["message"],
        r#"forbidden: User "system:serviceaccount:default:nobody" cannot get path "/debug/pprof/profile""#
    );

    let profiler = user_token(&cp.client, "default", "profiler").await?;
    Api::<ClusterRole>::all(cp.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "cpu-profiler"},
                "rules": [{"nonResourceURLs": ["/debug/pprof/profile"], "verbs": ["get"]}]
            }))?,
        )
        .await?;
    Api::<ClusterRoleBinding>::all(cp.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "profiler-cpu-profiler"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cpu-profiler"},
                "subjects": [{"kind": "ServiceAccount", "name": "profiler", "namespace": "default"}]
            }))?,
        )
        .await?;
    // Work for the agent while it profiles itself: nodes to watch and cache.
    let work = async {
        for i in 0..20 {
            let name = format!("node-{i}");
            create_node(
                &cp.client,
                json!({
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "status": {
                        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}]
                    }
                }),
            )
            .await?;
        }
        anyhow::Ok(())
    };
    let (r, worked) = tokio::join!(http.get(&url).bearer_auth(&profiler).send(), work);
    worked?;
    let r = r?;
    assert_eq!(r.status(), StatusCode::OK, "{}", agent.logs());
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/octet-stream")
    );
    let body = r.bytes().await?;
    assert_eq!(&body[..2], &[0x1f, 0x8b], "gzipped, as Go serves it");
    // Go's own reader: the profile's sample types are cpu/nanoseconds.
    let file = cp.dir().join("agent.pprof");
    std::fs::write(&file, &body)?;
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&file)
        .output()
        .map_err(|e| anyhow::anyhow!("go tool pprof (Go must be installed): {e}"))?;
    let raw = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(raw.contains("cpu/nanoseconds"), "{raw}");

    // enableProfiling: false: even the cluster's admin finds nothing there.
    let config = cp.dir().join("no-profiling.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         enableProfiling: false\nleaderElection:\n  leaderElect: false\n\
         profiles:\n- schedulerName: quiet\n",
    )?;
    let quiet = Agent::start_with(
        &cp.kubeconfig,
        "quiet",
        cp.dir(),
        "quiet",
        &["--config", config.to_str().unwrap_or_default()],
    )?;
    answering(&http, &quiet).await?;
    let admin = api::admin_https(&cp)?;
    let r = admin
        .get(format!("{}/debug/pprof/profile?seconds=1", quiet.url))
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "{}", quiet.logs());
    // The same admin gets the enabled agent's.
    let r = admin.get(&url).send().await?;
    assert_eq!(r.status(), StatusCode::OK);
    Ok(())
}
