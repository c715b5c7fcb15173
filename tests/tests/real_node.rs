//! A real node: the kubelet built from the control plane's modules, containerd, runc and
//! CNI from Debian, images built here and imported (nothing pulled). Fails, naming what is
//! missing, on a machine that cannot run one (`scripts/setup.sh` installs it).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use mcsched_e2e::real_node::{self, HELLO_IMAGE, RealNode};
use mcsched_e2e::{api, cli, wait};
use mcsched_shared::keys;

fn hello_pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{
                "name": "hello",
                "image": HELLO_IMAGE,
                "imagePullPolicy": "Never",
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "runAsNonRoot": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
            "terminationGracePeriodSeconds": 5,
        },
    }))?)
}

/// kube-scheduler binds a pod to the real node; the kubelet runs it in a container with
/// an address from the node's CNI bridge, serving HTTP there; deleting the pod stops the
/// container.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_runs_in_a_container_on_the_real_node() -> anyhow::Result<()> {
    let started = Instant::now();
    let cp = real_node::control_plane("real").await?;
    let node = RealNode::start(&cp, "node-1").await?;
    eprintln!("control plane and node Ready in {:?}", started.elapsed());
    real_node::wait_default_service_account(&cp, "default").await?;

    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    let created = Instant::now();
    pods.create(&PostParams::default(), &hello_pod("hello")?)
        .await?;
    let pod = wait::until(Duration::from_secs(60), "pod hello Ready", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("hello").await?;
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Ok(ready.then_some(pod))
        }
    })
    .await
    .with_context(|| format!("kubelet:\n{}", node.kubelet_log()))?;
    eprintln!("pod hello created to Ready in {:?}", created.elapsed());

    let spec = pod.spec.as_ref().context("no spec")?;
    assert_eq!(
        spec.node_name.as_deref(),
        Some("node-1"),
        "bound by kube-scheduler to the real node"
    );
    let status = pod.status.as_ref().context("no status")?;
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let container_id = status
        .container_statuses
        .as_ref()
        .and_then(|cs| cs.first())
        .and_then(|c| c.container_id.clone())
        .context("no container id")?;
    assert!(container_id.starts_with("containerd://"), "{container_id}");
    let id = container_id.trim_start_matches("containerd://").to_string();
    assert!(
        node.running_containers()?.contains(&id),
        "containerd runs {id}: {:?}",
        node.running_containers()?
    );
    let pod_ip = status.pod_ip.clone().context("no pod IP")?;
    let prefix = node.pod_subnet.trim_end_matches("0/24");
    assert!(
        pod_ip.starts_with(prefix),
        "pod IP {pod_ip} from the node's bridge {}",
        node.pod_subnet
    );

    // From the host to the pod's network namespace, over the node's bridge.
    let body = reqwest::get(format!("http://{pod_ip}:8080/"))
        .await?
        .text()
        .await?;
    assert_eq!(body, "hello from hello\n");

    pods.delete("hello", &DeleteParams::default()).await?;
    wait::until(
        Duration::from_secs(60),
        "pod hello gone and its container stopped",
        || {
            let pods = pods.clone();
            let id = id.clone();
            let running = node.running_containers();
            async move {
                let gone = pods.get_opt("hello").await?.is_none();
                Ok((gone && !running?.contains(&id)).then_some(()))
            }
        },
    )
    .await?;
    eprintln!("real-node test: {:?}", started.elapsed());
    Ok(())
}

/// A pod for mcsched running the hello image, optionally only in leaf `cluster`.
fn mcsched_pod(name: &str, cluster: Option<&str>) -> anyhow::Result<Pod> {
    let mut pod = hello_pod(name)?;
    let spec = pod.spec.as_mut().context("no spec")?;
    spec.scheduler_name = Some(keys::DEFAULT_SCHEDULER_NAME.into());
    if let Some(cluster) = cluster {
        spec.node_selector = Some([(keys::CLUSTER_LABEL.to_string(), cluster.to_string())].into());
    }
    Ok(pod)
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn container_id(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .container_id
        .clone()
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map_or(0, |c| c.restart_count)
}

/// Waits until pod `name` is Ready (and Running on some node) and returns it.
async fn ready_pod(pods: &Api<Pod>, name: &str, timeout: Duration) -> anyhow::Result<Pod> {
    wait::until(timeout, &format!("pod {name} Ready"), || {
        let pods = pods.clone();
        let name = name.to_string();
        async move { Ok(pods.get_opt(&name).await?.filter(is_ready)) }
    })
    .await
}

/// The Ready agent pods, sorted by name.
async fn agent_pods(pods: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    let selector = format!("app.kubernetes.io/name={}", keys::AGENT_NAME);
    let mut list = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    list.sort_by_key(|p| p.metadata.name.clone());
    Ok(list)
}

/// The pod whose name starts the Lease holder's identity (`<hostname>_<random>`; the
/// hostname in a pod is the pod's name).
async fn leader(leases: &Api<Lease>) -> anyhow::Result<Option<String>> {
    Ok(leader_identity(leases)
        .await?
        .and_then(|h| h.split_once('_').map(|(pod, _)| pod.to_string())))
}

/// The agent Lease's holder identity (`<pod>_<random>`): a restarted container of the
/// same pod holds it under a new identity.
async fn leader_identity(leases: &Api<Lease>) -> anyhow::Result<Option<String>> {
    for lease in leases.list(&ListParams::default()).await?.items {
        if let Some(holder) = lease.spec.and_then(|s| s.holder_identity)
            && holder.starts_with(keys::AGENT_NAME)
            && holder.contains('_')
        {
            return Ok(Some(holder));
        }
    }
    Ok(None)
}

/// The kernel's view of a container's main process: what the securityContext asked for
/// is what the process got.
fn process_facts(pid: u32) -> anyhow::Result<(String, String)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    Ok((status, mountinfo))
}

fn status_field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
        .unwrap_or_default()
}

/// Item by item, what a user gets from `kubectl mcsched install --image <make image's
/// image> --replicas 2 --wait` on a cluster with a real node, then a leader killed through
/// containerd, a leaf with its own real node, and `uninstall`.
#[tokio::test(flavor = "multi_thread")]
async fn the_installed_agent_runs_in_containers_on_the_real_node() -> anyhow::Result<()> {
    let started = Instant::now();
    let (archive, image) = real_node::agent_image()?;
    let (host, leaf) = tokio::try_join!(
        real_node::control_plane("host"),
        real_node::control_plane("leaf")
    )?;
    let (host_node, leaf_node) = tokio::try_join!(
        RealNode::start(&host, "host-node"),
        RealNode::start(&leaf, "leaf-node")
    )?;
    host_node.import(&archive)?;
    eprintln!(
        "[{:?}] two control planes, two real nodes, image imported",
        started.elapsed()
    );

    // kubectl mcsched install --image IMAGE --replicas 2 --wait; meanwhile each agent's
    // /readyz is polled, to time its container from process start to ready.
    let agent_ns: Api<Pod> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    let install_started = Instant::now();
    let install = Command::new(cli::binary())
        .arg("--kubeconfig")
        .arg(&host.kubeconfig)
        .args(["install", "--image", &image, "--replicas", "2", "--wait"])
        .args(["--timeout", "180s", "--yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let install = tokio::task::spawn_blocking(move || install.wait_with_output());
    let ready_after = time_to_ready(&agent_ns, &host_node, || install.is_finished()).await;
    let out = install.await??;
    if !out.status.success() {
        let mut diagnosis = String::new();
        for p in agent_pods(&agent_ns).await.unwrap_or_default() {
            diagnosis += &format!("{}: {:?}\n", p.metadata.name.unwrap_or_default(), p.status);
        }
        bail!(
            "install failed: {}\n{diagnosis}\nkubelet:\n{}",
            cli::text(&out),
            host_node.kubelet_log()
        );
    }
    let install_took = install_started.elapsed();
    eprintln!(
        "[{:?}] install --wait returned after {install_took:?}; agent containers from \
         process start to /readyz 200: {ready_after:?}",
        started.elapsed()
    );

    // Both agent pods Running and Ready in containers on the real node, no restarts.
    let agents = agent_pods(&agent_ns).await?;
    assert_eq!(agents.len(), 2, "two agent pods");
    let mut agent_containers = Vec::new();
    for pod in &agents {
        let name = pod.metadata.name.clone().unwrap_or_default();
        assert!(is_ready(pod), "{name} Ready");
        let spec = pod.spec.as_ref().context("no spec")?;
        assert_eq!(
            spec.node_name.as_deref(),
            Some("host-node"),
            "{name} on the real node"
        );
        let container = &spec.containers[0];
        assert_eq!(container.image.as_deref(), Some(image.as_str()));
        // In-cluster configuration: no kubeconfig given, the ServiceAccount's token mounted.
        let args = container.args.clone().unwrap_or_default();
        assert!(
            !args.iter().any(|a| a.contains("kubeconfig")),
            "{name}: {args:?}"
        );
        let id = container_id(pod).with_context(|| format!("{name} has no container"))?;
        assert!(id.starts_with("containerd://"), "{id}");
        let pid = host_node.container_pid(&id)?;
        let (status, mountinfo) = process_facts(pid)?;
        // runAsNonRoot, runAsUser/Group 65532: real, effective, saved and fs ids.
        assert_eq!(
            status_field(&status, "Uid:"),
            "65532\t65532\t65532\t65532",
            "{name}"
        );
        assert_eq!(
            status_field(&status, "Gid:"),
            "65532\t65532\t65532\t65532",
            "{name}"
        );
        // allowPrivilegeEscalation: false, capabilities dropped, RuntimeDefault seccomp.
        assert_eq!(status_field(&status, "NoNewPrivs:"), "1", "{name}");
        assert_eq!(
            status_field(&status, "CapEff:"),
            "0000000000000000",
            "{name}"
        );
        assert_eq!(
            status_field(&status, "CapBnd:"),
            "0000000000000000",
            "{name}"
        );
        assert_eq!(
            status_field(&status, "Seccomp:"),
            "2",
            "{name}: seccomp filter mode"
        );
        // readOnlyRootFilesystem: the container's / is mounted read-only.
        let root = mountinfo
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some("/"))
            .context("no root mount")?;
        assert!(
            root.split_whitespace()
                .nth(5)
                .is_some_and(|o| o.split(',').any(|o| o == "ro")),
            "{name}: root filesystem read-only: {root}"
        );
        let token = format!("/proc/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount/token");
        assert!(
            std::path::Path::new(&token).exists(),
            "{name}: token mounted"
        );
        let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
        let environ = String::from_utf8_lossy(&environ);
        assert!(
            environ.contains("KUBERNETES_SERVICE_HOST=10.0.0.1"),
            "{name}: in-cluster env"
        );
        let pod_ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .context("no pod IP")?;
        assert!(
            environ.contains(&format!("POD_IP={pod_ip}")),
            "{name}: POD_IP"
        );
        // Probes over HTTPS: readiness on /readyz and liveness on /healthz, unauthenticated
        // by design; everything else on the secure port wants credentials.
        for (probe, path) in [
            (container.readiness_probe.as_ref(), "/readyz"),
            (container.liveness_probe.as_ref(), "/healthz"),
        ] {
            let get = probe
                .and_then(|p| p.http_get.as_ref())
                .context("no HTTP probe")?;
            assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
            assert_eq!(get.path.as_deref(), Some(path));
        }
        let https = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()?;
        let base = format!("https://{pod_ip}:{}", keys::AGENT_PORT);
        for path in ["/healthz", "/readyz"] {
            let res = https.get(format!("{base}{path}")).send().await?;
            assert_eq!(res.status(), 200, "{name}{path}");
        }
        let metrics = https.get(format!("{base}/metrics")).send().await?;
        assert!(
            metrics.status() == 401 || metrics.status() == 403,
            "{name}/metrics without credentials: {}",
            metrics.status()
        );
        let memory = host_node.container_memory(&id)?;
        let (started_at, ready_at) = startup(pod);
        eprintln!(
            "agent {name}: container started {started_at}, Ready {ready_at}; RSS {:.1} MiB (peak {:.1} MiB)",
            memory.rss_bytes as f64 / 1048576.0,
            memory.peak_rss_bytes as f64 / 1048576.0
        );
        agent_containers.push(id);
    }

    // One leader: the Lease names one agent pod, the API is served through it.
    let leases: Api<Lease> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    let first_leader = wait::until(Duration::from_secs(60), "a leader", || {
        let leases = leases.clone();
        async move { leader(&leases).await }
    })
    .await?;
    assert!(
        agents
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(&first_leader))
    );
    api::wait_available(&host.client, Duration::from_secs(60)).await?;

    // Pods for mcsched, bound and Running in containers on the real node.
    real_node::wait_default_service_account(&host, "default").await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    for name in ["web-1", "web-2"] {
        pods.create(&PostParams::default(), &mcsched_pod(name, None)?)
            .await?;
    }
    for name in ["web-1", "web-2"] {
        let pod = ready_pod(&pods, name, Duration::from_secs(90)).await?;
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("host-node")
        );
        let id = container_id(&pod).context("no container")?;
        host_node.container_pid(&id)?;
    }
    assert_bound_by_mcsched(&host, "web-1").await?;

    // kubectl mcsched explain pod, through the aggregated API and the leader.
    let out = cli::run(&host.kubeconfig, &["explain", "pod", "web-1"])?;
    let explained = cli::text(&out);
    assert!(out.status.success(), "explain: {explained}");
    assert!(
        explained.contains("host-node"),
        "explain names the node: {explained}"
    );

    // The leader's container killed through containerd: the standby takes the Lease and
    // binds the next pod; the kubelet restarts the killed container.
    let leader_pod = agents
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(&first_leader))
        .context("leader pod")?;
    let killed = container_id(leader_pod).context("leader container")?;
    let first_identity = leader_identity(&leases)
        .await?
        .context("the leader's identity")?;
    let killed_at = Instant::now();
    host_node.kill_container(&killed)?;
    // The standby, or the killed pod's restarted container if the kubelet restarts it
    // before the Lease expires: either is a new identity that leads.
    let second_leader = wait::until(Duration::from_secs(90), "a new leader to take over", || {
        let leases = leases.clone();
        let first = first_identity.clone();
        async move { Ok(leader_identity(&leases).await?.filter(|l| *l != first)) }
    })
    .await?;
    let who = if second_leader.starts_with(&format!("{first_leader}_")) {
        "the killed pod, restarted"
    } else {
        "the standby"
    };
    eprintln!(
        "[{:?}] {second_leader} ({who}) took over {:?} after the kill",
        started.elapsed(),
        killed_at.elapsed()
    );
    pods.create(&PostParams::default(), &mcsched_pod("web-3", None)?)
        .await?;
    ready_pod(&pods, "web-3", Duration::from_secs(90)).await?;
    assert_bound_by_mcsched(&host, "web-3").await?;
    let restarted = wait::until(
        Duration::from_secs(90),
        "the killed agent restarted",
        || {
            let agent_ns = agent_ns.clone();
            let first = first_leader.clone();
            async move {
                Ok(agent_ns
                    .get_opt(&first)
                    .await?
                    .filter(|p| restarts(p) >= 1 && is_ready(p)))
            }
        },
    )
    .await?;
    assert_ne!(
        container_id(&restarted),
        Some(killed.clone()),
        "a new container"
    );

    // A leaf with its own real node: a pod for it is synced there and runs in a container.
    let leaf_pods: Api<Pod> = Api::namespaced(leaf.client.clone(), "default");
    real_node::wait_default_service_account(&leaf, "default").await?;
    let out = cli::run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            "leaf",
            "--cluster-kubeconfig",
            &leaf.kubeconfig.to_string_lossy(),
            "--namespaces",
            "default",
        ],
    )?;
    assert!(out.status.success(), "join: {}", cli::text(&out));
    pods.create(&PostParams::default(), &mcsched_pod("far", Some("leaf"))?)
        .await?;
    let copy = ready_pod(&leaf_pods, "far", Duration::from_secs(120)).await?;
    assert_eq!(
        copy.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("leaf-node")
    );
    let copy_container = container_id(&copy).context("leaf copy has no container")?;
    leaf_node.container_pid(&copy_container)?;
    let far = wait::until(Duration::from_secs(60), "host pod far Running", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("far").await?;
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            Ok(running.then_some(pod))
        }
    })
    .await?;
    assert_eq!(
        far.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("mcsched-leaf")
    );

    // unjoin, then uninstall: everything goes, the agent containers stop.
    let out = cli::run(
        &host.kubeconfig,
        &[
            "unjoin",
            "cluster",
            "leaf",
            "--cluster-kubeconfig",
            &leaf.kubeconfig.to_string_lossy(),
            "--yes",
        ],
    )?;
    assert!(out.status.success(), "unjoin: {}", cli::text(&out));
    let out = cli::run(&host.kubeconfig, &["uninstall", "--yes"])?;
    assert!(out.status.success(), "uninstall: {}", cli::text(&out));
    let namespaces: Api<Namespace> = Api::all(host.client.clone());
    wait::until(
        Duration::from_secs(120),
        "namespace mcsched-system gone and agent containers stopped",
        || {
            let namespaces = namespaces.clone();
            let running = host_node.running_containers();
            let agents: Vec<String> = agent_containers
                .iter()
                .map(|c| c.trim_start_matches("containerd://").to_string())
                .collect();
            async move {
                let gone = namespaces.get_opt(keys::SYSTEM_NAMESPACE).await?.is_none();
                let running = running?;
                Ok((gone && !agents.iter().any(|a| running.contains(a))).then_some(()))
            }
        },
    )
    .await?;
    let out = cli::run(&host.kubeconfig, &["uninstall", "--yes"])?;
    assert!(
        cli::text(&out).contains("not installed"),
        "nothing left: {}",
        cli::text(&out)
    );
    let apiservices: Api<DynamicObject> = Api::all_with(
        host.client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiregistration.k8s.io",
            "v1",
            "APIService",
        )),
    );
    assert!(apiservices.get_opt(keys::API_SERVICE_NAME).await?.is_none());
    eprintln!("real-node install test: {:?}", started.elapsed());
    Ok(())
}

async fn assert_bound_by_mcsched(cp: &mcsched_e2e::ControlPlane, pod: &str) -> anyhow::Result<()> {
    let events: Api<Event> = Api::namespaced(cp.client.clone(), "default");
    let pod = pod.to_string();
    wait::until(
        Duration::from_secs(30),
        &format!("{pod} Scheduled by mcsched"),
        || {
            let events = events.clone();
            let pod = pod.clone();
            async move {
                let list = events
                    .list(&ListParams::default().fields("reason=Scheduled"))
                    .await?;
                Ok(list
                    .items
                    .iter()
                    .any(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod.as_str())
                            && e.reporting_controller.as_deref()
                                == Some(keys::DEFAULT_SCHEDULER_NAME)
                    })
                    .then_some(()))
            }
        },
    )
    .await
}

/// For each agent pod, seconds from its container's process start to its first 200 on
/// /readyz, polled every 50 ms until both answered or `done` says to stop.
async fn time_to_ready(
    agent_ns: &Api<Pod>,
    node: &RealNode,
    done: impl Fn() -> bool,
) -> BTreeMap<String, f64> {
    let mut ready_after = BTreeMap::new();
    let Ok(https) = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(1))
        .build()
    else {
        return ready_after;
    };
    while ready_after.len() < 2 && !done() {
        for pod in agent_pods(agent_ns).await.unwrap_or_default() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
            let (Some(ip), Some(id)) = (ip, container_id(&pod)) else {
                continue;
            };
            if ready_after.contains_key(&name) {
                continue;
            }
            let Ok(pid) = node.container_pid(&id) else {
                continue;
            };
            let url = format!("https://{ip}:{}/readyz", keys::AGENT_PORT);
            if https
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
                && let (Ok(now), Ok(start)) = (
                    real_node::seconds_since_boot(),
                    real_node::process_started(pid),
                )
            {
                ready_after.insert(name, now - start);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ready_after
}

/// When the container started and when the pod became Ready (the API's second precision).
fn startup(pod: &Pod) -> (String, String) {
    let status = pod.status.as_ref();
    let started = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    (started, ready)
}
