//! The agent's secure port and its aggregated API on a real API server: explanations
//! read under the caller's RBAC through the API server, and every other path
//! authenticated (client certificates, front proxy, TokenReview) and authorized
//! (SubjectAccessReview) as kube-scheduler's secure port does it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use mcsched_e2e::cli::{run, text};
use mcsched_e2e::objects::{create_node, user_token};
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
/// carry explanations, what-ifs and placement policies.
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
        n, 4,
        "install renders the explanation reader, the what-if creator and the policy viewer and editor roles"
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
        shown.starts_with(
            "error: you may not get pods in namespace team-b: pods \"web\" is forbidden"
        ),
        "{shown}"
    );
    assert!(
        !shown.contains("node-a"),
        "nothing of team-b leaks: {shown}"
    );
    // Even when the pod itself is readable, the explanation follows RBAC on its own.
    let reader = user_token(&cp.client, "team-b", "pod-reader").await?;
    Api::<ClusterRole>::all(cp.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
            }))?,
        )
        .await?;
    bind_in(&cp.client, "team-b", "pod-reader", "team-b", "pod-reader").await?;
    let reader_kc = kubeconfig_for(&cp, "pod-reader", &reader)?;
    let shown = wait::until(TIMEOUT, "pod-reader refused the explanation", || async {
        let out = run(&reader_kc, &["explain", "pod", "web", "-n", "team-b"])?;
        let shown = text(&out);
        Ok((!out.status.success() && shown.contains("explanations")).then_some(shown))
    })
    .await?;
    assert!(
        shown.contains("you may not get explanations.mcsched.io in namespace team-b")
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
    // The aggregator takes the agent's OpenAPI: kubectl explains the new kinds.
    let schema = wait::until(TIMEOUT, "kubectl explain whatifs.spec", || async {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig)
            .args(["explain", "whatifs.spec"])
            .output()?;
        Ok(out.status.success().then(|| text(&out)))
    })
    .await?;
    assert!(schema.contains("template"), "{schema}");
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

/// `kubectl mcsched explain --what-if` as `user`, in `ns`, for `pod`: the exit status and
/// the output (the explanation as JSON when it succeeds).
fn what_if_as(
    kubeconfig: &std::path::Path,
    ns: &str,
    pod: &serde_json::Value,
) -> anyhow::Result<(bool, String)> {
    let file = kubeconfig.with_extension(format!(
        "what-if-{}.json",
        pod["metadata"]["name"].as_str().unwrap_or("pod")
    ));
    std::fs::write(&file, serde_json::to_string(pod)?)?;
    let out = run(
        kubeconfig,
        &[
            "explain",
            "--what-if",
            "-n",
            ns,
            "-f",
            &file.to_string_lossy(),
            "-o",
            "json",
        ],
    )?;
    Ok((out.status.success(), text(&out)))
}

#[tokio::test]
async fn a_what_if_names_no_pod_of_a_namespace_the_caller_may_not_read() -> anyhow::Result<()> {
    let cp = ControlPlane::start("security-what-if", ControlPlaneOptions::full()).await?;
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

    // node-a full with another team's pod; a class that preempts it.
    for ns in ["team-a", "team-b"] {
        namespace(&cp.client, ns).await?;
    }
    let payroll = json!({
        "metadata": {"name": "payroll"},
        "spec": {
            "schedulerName": "mcsched",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "4"}}}]
        }
    });
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "team-b");
    pods.create(&PostParams::default(), &serde_json::from_value(payroll)?)
        .await?;
    wait::until(TIMEOUT, "team-b/payroll bound", || async {
        Ok(pods.get("payroll").await?.spec.and_then(|s| s.node_name))
    })
    .await?;
    Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(cp.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "urgent"}, "value": 1000000}))?,
        )
        .await?;
    let alice = user_token(&cp.client, "team-a", "alice").await?;
    bind_in(&cp.client, "team-a", "edit", "team-a", "alice").await?;
    let alice_kc = kubeconfig_for(&cp, "alice", &alice)?;
    let urgent = |extra: serde_json::Value| {
        let mut spec = json!({
            "schedulerName": "mcsched",
            "priorityClassName": "urgent",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "4"}}}]
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "urgent"}, "spec": spec})
    };

    // The cluster's admin sees the victim by name: what alice must not.
    let (ok, admin_view) = what_if_as(&cp.kubeconfig, "team-a", &urgent(json!({})))?;
    assert!(ok, "{admin_view}");
    assert!(
        admin_view.contains("team-b/payroll"),
        "preemption's victim, named to whoever may list pods there: {admin_view}"
    );
    // edit in team-a (RBAC aggregation may take a moment to give edit the what-if role).
    let (ok, alice_view) = wait::until(TIMEOUT, "alice may create what-ifs", || async {
        let (ok, out) = what_if_as(&alice_kc, "team-a", &urgent(json!({})))?;
        Ok((ok || !out.contains("forbidden")).then_some((ok, out)))
    })
    .await?;
    assert!(ok, "{alice_view}");
    let e: mcsched_shared::explain::Explanation = serde_json::from_str(&alice_view)?;
    let shown = serde_json::to_string(&e)?;
    assert!(
        !shown.contains("payroll") && !shown.contains("team-b"),
        "nothing of team-b leaks to an editor of team-a: {shown}"
    );
    assert!(
        shown.contains("1 pod in another namespace"),
        "the victim becomes a count: {shown}"
    );

    // A what-if's priority is its class's, as admission gives it; no node of the caller's choosing.
    let (ok, refused) = what_if_as(
        &alice_kc,
        "team-a",
        &urgent(json!({"priority": 2147483647})),
    )?;
    assert!(!ok, "{refused}");
    assert!(
        refused.contains("spec.template.spec.priority: Forbidden: the integer value of priority (2147483647) must not be provided in pod spec"),
        "{refused}"
    );
    let (ok, refused) = what_if_as(&alice_kc, "team-a", &urgent(json!({"nodeName": "node-a"})))?;
    assert!(!ok, "{refused}");
    assert!(
        refused.contains("spec.template.spec.nodeName: Forbidden"),
        "{refused}"
    );
    assert!(!refused.contains("payroll"), "{refused}");
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
    // A body over 1 MiB is refused before it is read: a 413, or, when the agent's answer
    // and close come while the client is still writing (a loaded machine), the write cut
    // off by the closed connection (what make test met: "Broken pipe"). Never an answer
    // to the request itself, and the port answers the next request.
    // On a client of its own: the connection it spoils is not the one asked next.
    let big = "x".repeat(2 << 20);
    let sent = api::admin_https(&cp)?
        .post(format!(
            "{}{}",
            agent.url,
            mcsched_shared::api::namespaced_path("default", "whatifs")
        ))
        .body(big)
        .send()
        .await;
    match sent {
        Ok(r) => assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE),
        Err(e) if cut_off_while_writing(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let r = admin.get(format!("{}/metrics", agent.url)).send().await?;
    assert_eq!(r.status(), StatusCode::OK);
    Ok(())
}

/// A request whose body the peer stopped reading: the connection closed (or reset) under
/// the write.
fn cut_off_while_writing(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            )
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Reads until the peer closes the connection (an error counts as closed), for at most
/// `limit`: false if it is still open then.
async fn closed_within(conn: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 512];
    tokio::time::timeout(limit, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap_or(false)
}

#[tokio::test]
async fn slow_clients_cannot_hold_the_secure_port_or_fail_the_probes() -> anyhow::Result<()> {
    const LIMIT: usize = 8;
    let cp = ControlPlane::start("security-slow", ControlPlaneOptions::default()).await?;
    create_node(&cp.client, node("node-a")).await?;
    let health_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let agent = Agent::start_with(
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "agent",
        &[
            &format!("--max-connections={LIMIT}"),
            "--header-read-timeout=4s",
            &format!("--health-port={health_port}"),
            "--health-bind-address=127.0.0.1",
        ],
    )?;
    let health = format!("http://127.0.0.1:{health_port}");
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    wait::until(TIMEOUT, "the health port answers", || async {
        Ok(plain
            .get(format!("{health}/healthz"))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == StatusCode::OK)
            .map(|_| ()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    // Every place of the secure port taken by clients that never send a byte, and one
    // more: it is closed at once, unserved, and counted (which one is the accept tasks'
    // order).
    let secure: std::net::SocketAddr = agent.url.trim_start_matches("https://").parse()?;
    let mut slow = Vec::new();
    let connected = std::time::Instant::now();
    for _ in 0..=LIMIT {
        slow.push(tokio::net::TcpStream::connect(secure).await?);
    }
    let refused = || async {
        let metrics = plain
            .get(format!("{health}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        anyhow::Ok(
            metrics
                .lines()
                .find_map(|l| l.strip_prefix("mcsched_secure_port_refused_connections_total "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0),
        )
    };
    wait::until(TIMEOUT, "a connection refused", || async {
        Ok((refused().await? > 0.0).then_some(()))
    })
    .await?;
    let mut closed = 0;
    for conn in slow.iter_mut() {
        closed += usize::from(closed_within(conn, Duration::from_millis(100)).await);
    }
    assert_eq!(
        closed, 1,
        "one connection beyond --max-connections closed at once, the others held (until the header-read timeout)"
    );
    assert_eq!(refused().await?, 1.0);

    // The probes, on their own port, answer while the secure port is full.
    let probe = plain.get(format!("{health}/healthz")).send().await?;
    assert_eq!(probe.status(), StatusCode::OK);

    // The slow clients are cut off by the header-read timeout, and the port serves again.
    // (4 s from their connect, as the TLS handshake is bounded by it; the handshake's
    // own default is 10 s.)
    let deadline = connected + Duration::from_secs(8);
    for (i, conn) in slow.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(
            closed_within(conn, left).await,
            "slow client {i} still holds a place after --header-read-timeout"
        );
    }
    let tls = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let answer = tls.get(format!("{}/healthz", agent.url)).send().await?;
    assert!(
        answer.status() == StatusCode::OK
            || answer.status() == StatusCode::UNAUTHORIZED
            || answer.status() == StatusCode::FORBIDDEN,
        "the secure port serves again: {}",
        answer.status()
    );
    Ok(())
}

/// The Lease's renewTime every time it changes, until `stop`.
async fn watch_renewals(
    client: kube::Client,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<(std::time::Instant, String, i32)> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client, "kube-system");
    let mut seen: Vec<(std::time::Instant, String, i32)> = Vec::new();
    let mut last = None;
    while !*stop.borrow() {
        if let Ok(Some(l)) = leases.get_opt("mcsched").await
            && let Some(spec) = l.spec
        {
            let renew = spec.renew_time.map(|t| format!("{:?}", t.0));
            if renew != last {
                seen.push((
                    std::time::Instant::now(),
                    spec.holder_identity.unwrap_or_default(),
                    spec.lease_transitions.unwrap_or(0),
                ));
                last = renew;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test]
async fn a_flood_of_what_ifs_is_turned_away_and_the_leader_keeps_its_lease() -> anyhow::Result<()> {
    use futures::StreamExt;
    const NODES: usize = 5000;
    const WHAT_IFS: usize = 200;
    let cp = ControlPlane::start("security-flood", ControlPlaneOptions::default()).await?;
    futures::stream::iter(0..NODES)
        .map(|i| create_node(&cp.client, node(&format!("n{i:04}"))))
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    let agent = Agent::start(&cp.kubeconfig, "mcsched", cp.dir())?;
    let http = api::admin_https(&cp)?;
    wait::until(TIMEOUT, "the agent ready and leading", || async {
        let ready = http
            .get(format!("{}/readyz", agent.url))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            cp.client.clone(),
            "kube-system",
        )
        .get_opt("mcsched")
        .await?;
        Ok((ready && lease.is_some()).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let renewals = tokio::spawn(watch_renewals(cp.client.clone(), stop_rx));
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    let flood = futures::stream::iter(0..WHAT_IFS)
        .map(|i| {
            let http = http.clone();
            let url = agent.url.clone();
            async move {
                let r = api::post_what_if(&http, &url, "default", &pod(&format!("what-if-{i}")))
                    .await?;
                let retry_after = r.headers().get("retry-after").is_some();
                anyhow::Ok((r.status(), retry_after))
            }
        })
        .buffer_unordered(WHAT_IFS)
        .collect::<Vec<_>>();
    // Pods created while the flood runs are scheduled all the same.
    let creating = async {
        for i in 0..10 {
            pods.create(
                &PostParams::default(),
                &serde_json::from_value(pod(&format!("live-{i}")))?,
            )
            .await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok(())
    };
    let (answers, created) = tokio::join!(flood, creating);
    created?;
    let answers = answers.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let ok = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    let turned_away = answers
        .iter()
        .filter(|(s, retry)| *s == StatusCode::TOO_MANY_REQUESTS && *retry)
        .count();
    println!(
        "{WHAT_IFS} concurrent what-ifs at {NODES} nodes: {ok} answered, {turned_away} got 429 with Retry-After"
    );
    assert_eq!(
        ok + turned_away,
        WHAT_IFS,
        "every answer is 201 or 429: {answers:?}"
    );
    assert!(ok >= 1, "the limit lets some through");
    assert!(
        turned_away >= WHAT_IFS / 2,
        "the limit holds: {ok} answered at once"
    );
    for i in 0..10 {
        let name = format!("live-{i}");
        wait::until(TIMEOUT, &format!("{name} bound"), || async {
            Ok(pods.get(&name).await?.spec.and_then(|s| s.node_name))
        })
        .await
        .map_err(|e| e.context(agent.logs()))?;
    }
    // A few more renewals after the flood, then the Lease's history.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let _ = stop_tx.send(true);
    let seen = renewals.await?;
    let holders: std::collections::BTreeSet<&str> =
        seen.iter().map(|(_, h, _)| h.as_str()).collect();
    let transitions: std::collections::BTreeSet<i32> = seen.iter().map(|(_, _, t)| *t).collect();
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let max_gap = gaps.iter().max().copied().unwrap_or_default();
    println!(
        "Lease renewals seen: {}, renew gaps: max {max_gap:?}, all {gaps:?}",
        seen.len()
    );
    assert_eq!(holders.len(), 1, "no leader change: {holders:?}");
    assert_eq!(transitions.len(), 1, "no leader change: {transitions:?}");
    assert!(seen.len() >= 3, "the Lease kept being renewed: {seen:?}");
    Ok(())
}

/// The port the API's EndpointSlice sends the API server to.
async fn published_port(client: &kube::Client) -> anyhow::Result<Option<i32>> {
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), mcsched_shared::keys::SYSTEM_NAMESPACE);
    Ok(slices
        .get_opt(mcsched_shared::keys::API_SERVICE)
        .await?
        .and_then(|s| s.ports)
        .and_then(|p| p.first().and_then(|p| p.port)))
}

fn port_of(agent: &Agent) -> i32 {
    agent
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_api_server_reaches_the_leader_and_follows_a_takeover() -> anyhow::Result<()> {
    let cp = ControlPlane::start("security-leader", ControlPlaneOptions::default()).await?;
    api::register(&cp.client).await?;
    create_node(&cp.client, node("node-a")).await?;
    let address = api::routable_address()?;
    let extra = ["--advertise-address", address.as_str()];
    let mut first = Agent::start_on(
        &address,
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "first",
        &extra,
    )?;
    api::wait_available(&cp.client, TIMEOUT)
        .await
        .map_err(|e| e.context(first.logs()))?;
    let second = Agent::start_on(
        &address,
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "second",
        &extra,
    )?;
    assert_eq!(published_port(&cp.client).await?, Some(port_of(&first)));
    bound(&cp.client, "default", "web").await?;

    let explanation = |client: kube::Client| async move {
        let req = http::Request::get(format!(
            "{}/web",
            mcsched_shared::api::namespaced_path("default", "explanations")
        ))
        .body(Vec::<u8>::new())?;
        let e: mcsched_shared::api::Explanation = client.request(req).await?;
        anyhow::Ok(e)
    };
    let e = explanation(cp.client.clone()).await?;
    assert!(
        matches!(&e.status.outcome, mcsched_shared::explain::Outcome::Scheduled { node, .. } if node == "node-a"),
        "{e:?}"
    );

    // The leader goes: the standby takes the Lease and the API with it.
    first.stop();
    wait::until(
        Duration::from_secs(90),
        "the API's EndpointSlice on the new leader",
        || async {
            Ok((published_port(&cp.client).await? == Some(port_of(&second))).then_some(()))
        },
    )
    .await
    .map_err(|e| e.context(second.logs()))?;
    api::wait_available(&cp.client, TIMEOUT).await?;
    bound(&cp.client, "default", "after").await?;
    let req = http::Request::get(format!(
        "{}/after",
        mcsched_shared::api::namespaced_path("default", "explanations")
    ))
    .body(Vec::<u8>::new())?;
    let after: mcsched_shared::api::Explanation =
        wait::until(TIMEOUT, "the new leader's explanation", || {
            let client = cp.client.clone();
            let req = http::Request::get(req.uri().to_string()).body(Vec::<u8>::new());
            async move { Ok(client.request(req?).await.ok()) }
        })
        .await?;
    assert_eq!(after.metadata.name.as_deref(), Some("after"));
    Ok(())
}

/// An agent whose secure port another process holds exits saying so, as kube-scheduler
/// does, instead of scheduling with no probes, metrics or explanations.
#[tokio::test]
async fn an_agent_that_cannot_listen_on_its_secure_port_exits() -> anyhow::Result<()> {
    let cp = ControlPlane::start("taken-port", ControlPlaneOptions::default()).await?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = taken.local_addr()?.port();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(mcsched_e2e::agent::binary())
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig)
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg("--leader-elect=false")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the agent still runs 60 s after it could not listen"))??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the agent exited with {}",
        out.status
    );
    let want = format!("cannot listen on 127.0.0.1:{port} (--bind-address, --secure-port)");
    assert!(
        stderr.contains(&want) && stderr.contains("in use"),
        "its error says {stderr:?}, not {want:?}"
    );
    drop(taken);
    Ok(())
}
