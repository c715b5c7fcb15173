//! The agent's secure port and its aggregated API on a real API server: explanations
//! read under the caller's RBAC through the API server, and every other path
//! authenticated (client certificates, front proxy, TokenReview) and authorized
//! (SubjectAccessReview) as kube-scheduler's secure port does it.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::cli::{run, text};
use mcsched_e2e::objects::create_node;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, api, wait};
use reqwest::StatusCode;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

fn node(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

fn pod(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "mcsched",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]
        }
    })
}

async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
    Ok(())
}

/// A ServiceAccount in `ns` and a token for it: a user of the cluster with exactly the
/// rights its bindings give.
async fn user_token(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}}))?,
    )
    .await?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = sas
        .create_token_request(name, &PostParams::default(), &request)
        .await?;
    Ok(answer.status.map(|s| s.token).unwrap_or_default())
}

/// A kubeconfig that is `token`'s user on `cp`.
fn kubeconfig_for(
    cp: &ControlPlane,
    name: &str,
    token: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let ca_b64 = serde_json::to_value(k8s_openapi::ByteString(cp.ca_pem()?))?
        .as_str()
        .unwrap_or_default()
        .to_string();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca_b64}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: c\n    user: {name}\n    namespace: default\ncurrent-context: {name}\n",
        cp.url
    );
    let path = cp.dir().join(format!("kubeconfig-{name}"));
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn bind_in(
    client: &kube::Client,
    ns: &str,
    role: &str,
    sa_ns: &str,
    sa: &str,
) -> anyhow::Result<()> {
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("{sa}-{role}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]
            }))?,
        )
        .await?;
    Ok(())
}

async fn bound(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &serde_json::from_value(pod(name))?)
        .await?;
    wait::until(TIMEOUT, &format!("{ns}/{name} bound"), || async {
        Ok(pods.get(name).await?.spec.and_then(|s| s.node_name))
    })
    .await?;
    Ok(())
}

/// The aggregated roles `install` adds, applied as it renders them, so `view` and `edit`
/// carry explanations and what-ifs.
async fn apply_aggregated_roles(client: &kube::Client) -> anyhow::Result<()> {
    let objects = mcsched_shared::manifests::render(&Default::default())?;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let mut n = 0;
    for o in objects {
        if let mcsched_shared::manifests::Object::ClusterRole(role) = o
            && role.metadata.labels.as_ref().is_some_and(|l| {
                l.contains_key("rbac.authorization.k8s.io/aggregate-to-view")
                    || l.contains_key("rbac.authorization.k8s.io/aggregate-to-edit")
            })
        {
            roles.create(&PostParams::default(), &role).await?;
            n += 1;
        }
    }
    assert_eq!(
        n, 2,
        "install renders the reader and the what-if creator roles"
    );
    Ok(())
}

#[tokio::test]
async fn explanations_are_read_through_the_api_server_under_the_callers_rbac() -> anyhow::Result<()>
{
    let cp = ControlPlane::start("security-rbac", ControlPlaneOptions::full()).await?;
    api::register(&cp.client).await?;
    apply_aggregated_roles(&cp.client).await?;
    create_node(&cp.client, node("node-a")).await?;
    let address = api::routable_address()?;
    let agent = Agent::start_on(
        &address,
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "agent",
        &["--advertise-address", &address],
    )?;
    api::wait_available(&cp.client, TIMEOUT)
        .await
        .map_err(|e| e.context(agent.logs()))?;

    for ns in ["team-a", "team-b"] {
        namespace(&cp.client, ns).await?;
        bound(&cp.client, ns, "web").await?;
    }
    let alice = user_token(&cp.client, "team-a", "alice").await?;
    bind_in(&cp.client, "team-a", "view", "team-a", "alice").await?;
    let nobody = user_token(&cp.client, "team-a", "nobody").await?;
    let alice_kc = kubeconfig_for(&cp, "alice", &alice)?;
    let nobody_kc = kubeconfig_for(&cp, "nobody", &nobody)?;

    // view in team-a: its pods are explained (RBAC aggregation may take a moment).
    let shown = wait::until(TIMEOUT, "alice explains team-a/web", || async {
        let out = run(&alice_kc, &["explain", "pod", "web", "-n", "team-a"])?;
        Ok(out.status.success().then(|| text(&out)))
    })
    .await
    .map_err(|e| {
        let out = run(&alice_kc, &["explain", "pod", "web", "-n", "team-a"])
            .map(|o| text(&o))
            .unwrap_or_default();
        e.context(format!("{out}\n{}", agent.logs()))
    })?;
    assert!(shown.contains("scheduled on node-a"), "{shown}");

    // Not in team-b, and nothing for a user without rights.
    let out = run(&alice_kc, &["explain", "pod", "web", "-n", "team-b"])?;
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(
        shown.contains("explanations.mcsched.io")
            && shown.contains("team-b")
            && shown.contains("forbidden"),
        "{shown}"
    );
    assert!(
        !shown.contains("node-a"),
        "nothing of team-b leaks: {shown}"
    );
    let out = run(&nobody_kc, &["explain", "pod", "web", "-n", "team-a"])?;
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(shown.contains("forbidden"), "{shown}");

    // kubectl reads it as any other resource.
    let out = std::process::Command::new("kubectl")
        .args(["--kubeconfig"])
        .arg(&alice_kc)
        .args([
            "get",
            "explanations.mcsched.io",
            "web",
            "-n",
            "team-a",
            "-o",
            "yaml",
        ])
        .output()?;
    let yaml = text(&out);
    assert!(out.status.success(), "{yaml}");
    assert!(yaml.contains("kind: Explanation"), "{yaml}");
    assert!(yaml.contains("node: node-a"), "{yaml}");
    let out = std::process::Command::new("kubectl")
        .args(["--kubeconfig"])
        .arg(&alice_kc)
        .args(["get", "explanations", "-n", "team-a"])
        .output()?;
    let table = text(&out);
    assert!(out.status.success(), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("web") && l.contains("Scheduled") && l.contains("node-a")),
        "{table}"
    );
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(["api-resources", "--api-group=mcsched.io"])
        .output()?;
    let resources = text(&out);
    assert!(
        resources.contains("explanations") && resources.contains("whatifs"),
        "{resources}"
    );
    Ok(())
}

#[tokio::test]
async fn the_secure_port_authenticates_and_authorizes_every_other_path() -> anyhow::Result<()> {
    let cp = ControlPlane::start("security-port", ControlPlaneOptions::default()).await?;
    create_node(&cp.client, node("node-a")).await?;
    let agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let anonymous = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()?;
    wait::until(TIMEOUT, "the agent's /readyz", || async {
        let r = anonymous.get(format!("{}/readyz", agent.url)).send().await;
        Ok(r.ok().filter(|r| r.status().is_success()).map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let explanation_path = format!(
        "{}{}/web",
        agent.url,
        mcsched_shared::api::namespaced_path("default", "explanations")
    );

    // Health is open, as kube-scheduler's always-allowed paths.
    for path in ["/healthz", "/livez", "/readyz"] {
        let r = anonymous.get(format!("{}{path}", agent.url)).send().await?;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    // No credentials: 401, with a Status body.
    for url in [format!("{}/metrics", agent.url), explanation_path.clone()] {
        let r = anonymous.get(&url).send().await?;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{url}");
        let body: serde_json::Value = r.json().await?;
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "Unauthorized");
    }
    // The front proxy's headers without its certificate name nobody.
    let r = anonymous
        .get(&explanation_path)
        .header("X-Remote-User", "mcsched-admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A token that is no token.
    let r = anonymous
        .get(format!("{}/metrics", agent.url))
        .bearer_auth("not-a-token")
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // A ServiceAccount without rights: 403; bound to get /metrics: 200.
    let nobody = user_token(&cp.client, "default", "nobody").await?;
    let r = anonymous
        .get(format!("{}/metrics", agent.url))
        .bearer_auth(&nobody)
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let body: serde_json::Value = r.json().await?;
    assert_eq!(
        body["message"],
        r#"forbidden: User "system:serviceaccount:default:nobody" cannot get path "/metrics""#
    );
    let scraper = user_token(&cp.client, "default", "scraper").await?;
    Api::<ClusterRole>::all(cp.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "metrics-reader"},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
            }))?,
        )
        .await?;
    Api::<ClusterRoleBinding>::all(cp.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "scraper-metrics"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "default"}]
            }))?,
        )
        .await?;
    let r = anonymous
        .get(format!("{}/metrics", agent.url))
        .bearer_auth(&scraper)
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await?.contains("scheduler_pending_pods"));
    // The scraper may read metrics, not explanations.
    let r = anonymous
        .get(&explanation_path)
        .bearer_auth(&scraper)
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // The cluster's client certificates: the admin (system:masters) is let through.
    let admin = api::admin_https(&cp)?;
    let r = admin.get(format!("{}/metrics", agent.url)).send().await?;
    assert_eq!(r.status(), StatusCode::OK);
    // A body over 1 MiB is refused before it is read.
    let big = "x".repeat(2 << 20);
    let r = admin
        .post(format!(
            "{}{}",
            agent.url,
            mcsched_shared::api::namespaced_path("default", "whatifs")
        ))
        .body(big)
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    Ok(())
}
