//! Fault injection on real control planes: the leader killed and frozen while pods
//! arrive, and the API server restarted while etcd compacts under the watches. What
//! reached the API server is read from its audit log (`controlplane --audit-log`), not
//! from events or the agents' own logs: every pod must be bound by exactly one successful
//! binding, no node overcommitted, and a frozen leader that resumes must send nothing.
//!
//! Sizes: MCSCHED_FAULT_PODS (default 3000) pods in six waves, one fault per wave.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, audit, objects, wait};
use rand::RngExt;
use serde_json::json;

const NODES: usize = 50;
const NODE_CPU_MILLI: i64 = 8000;
const NODE_PODS: usize = 110;
const POD_CPU_MILLI: i64 = 100;
const WAVES: usize = 6;
const CREATE_CONCURRENCY: usize = 64;
/// kube-scheduler's defaults, which the agent shares: 15 s lease, 10 s renew deadline,
/// 2 s retry. A takeover is expected within 17 s.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(60);
const ALL_BOUND_TIMEOUT: Duration = Duration::from_secs(300);

fn pods_wanted() -> usize {
    std::env::var("MCSCHED_FAULT_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

/// A kubeconfig of the admin that impersonates `user` (still in system:masters), so that
/// the audit log tells the replicas' requests apart.
fn kubeconfig_as(cp: &ControlPlane, user: &str) -> anyhow::Result<PathBuf> {
    let mut kc = Kubeconfig::read_from(&cp.kubeconfig)?;
    for named in &mut kc.auth_infos {
        if let Some(a) = named.auth_info.as_mut() {
            a.impersonate = Some(user.to_string());
            a.impersonate_groups = Some(vec!["system:masters".into()]);
        }
    }
    let path = cp.dir().join(format!("kubeconfig-{user}"));
    std::fs::write(&path, serde_yaml::to_string(&kc)?)?;
    Ok(path)
}

/// One agent replica: its process, the user its requests carry, its Lease identity.
struct Replica {
    agent: Agent,
    user: String,
    identity: String,
}

async fn start_replica(cp: &ControlPlane, n: usize) -> anyhow::Result<Replica> {
    let user = format!("replica-{n}");
    let kubeconfig = kubeconfig_as(cp, &user)?;
    let agent = Agent::start_with(&kubeconfig, "mcsched", cp.dir(), &user, &[])?;
    let identity = wait::until(
        Duration::from_secs(60),
        &format!("{user} to start its election"),
        || async {
            Ok(agent.logs().lines().find_map(|l| {
                l.contains("leader election on")
                    .then(|| l.split("identity=").nth(1))
                    .flatten()
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(String::from)
            }))
        },
    )
    .await?;
    Ok(Replica {
        agent,
        user,
        identity,
    })
}

async fn holder(leases: &Api<Lease>) -> anyhow::Result<Option<String>> {
    Ok(leases
        .get_opt("mcsched")
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// The replica holding the Lease.
async fn leader(leases: &Api<Lease>, replicas: &[Replica]) -> anyhow::Result<usize> {
    wait::until(TAKEOVER_TIMEOUT, "a leader among the replicas", || async {
        let h = holder(leases).await?;
        Ok(replicas
            .iter()
            .position(|r| Some(&r.identity) == h.as_ref()))
    })
    .await
}

/// Waits until a replica other than `old` holds the Lease; how long it took since `since`.
async fn takeover(
    leases: &Api<Lease>,
    replicas: &[Replica],
    old: &str,
    since: Instant,
) -> anyhow::Result<Duration> {
    wait::until(TAKEOVER_TIMEOUT, "a standby to take the Lease", || async {
        let h = holder(leases).await?;
        Ok(
            h.filter(|h| h != old && replicas.iter().any(|r| &r.identity == h))
                .map(|_| since.elapsed()),
        )
    })
    .await
}

fn pod(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "mcsched", "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": format!("{POD_CPU_MILLI}m")}}}]},
    })
}

/// Creates the pods `make` builds as fast as the API server takes them.
async fn create_pods(
    client: Client,
    names: Vec<String>,
    make: impl Fn(&str) -> serde_json::Value,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let make = &make;
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
        .map(|name| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(make(&name))?;
                pods.create(&PostParams::default(), &p).await?;
                Ok(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn nodes(client: &Client) -> anyhow::Result<()> {
    for i in 0..NODES {
        objects::ready_node(
            client,
            &format!("n{i}"),
            &format!("{}m", NODE_CPU_MILLI),
            "64Gi",
            json!({}),
        )
        .await?;
    }
    Ok(())
}

/// Waits until every pod is bound; returns them.
async fn all_bound(client: &Client, want: usize) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let last = std::sync::Mutex::new(0);
    let r = wait::until(ALL_BOUND_TIMEOUT, "every pod bound", || async {
        let list = pods.list(&ListParams::default()).await?.items;
        let bound = list
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        *last.lock().unwrap_or_else(|p| p.into_inner()) = bound;
        Ok((list.len() == want && bound == want).then_some(list))
    })
    .await;
    r.map_err(|e| {
        let bound = *last.lock().unwrap_or_else(|p| p.into_inner());
        e.context(format!("{bound} of {want} bound"))
    })
}

/// A copy of the audit log under target/faults/, for a failure to be looked into.
fn keep(audit_log: &Path) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| mcsched_e2e::repo_root().join("target"))
        .join("faults");
    std::fs::create_dir_all(&dir)?;
    let to = dir.join(format!(
        "audit-{}.log",
        k8s_openapi::jiff::Timestamp::now().as_second()
    ));
    std::fs::copy(audit_log, &to)?;
    Ok(to)
}

/// Every pod bound by exactly one successful binding, and no node overcommitted.
fn check_bound_once(
    audit_log: &Path,
    pods: &[Pod],
) -> anyhow::Result<(Vec<audit::Request>, usize, usize)> {
    let requests = audit::pod_requests(audit_log)?;
    let bindings = audit::bindings(&requests);
    let mut wrong: Vec<String> = Vec::new();
    let mut unanswered = 0;
    for p in pods {
        let key = format!("default/{}", p.metadata.name.as_deref().unwrap_or_default());
        // Bound exactly once: one successful binding, or none and one whose sender was
        // killed before the API server answered (it logs 504 though the pod is bound).
        let (ok, gone) = bindings.get(&key).copied().unwrap_or_default();
        match (ok, gone) {
            (1, _) => {}
            (0, 1) => unanswered += 1,
            _ => wrong.push(format!(
                "{key}: {ok} successful bindings, {gone} cut off by a killed sender"
            )),
        }
    }
    if !wrong.is_empty() {
        let kept = keep(audit_log)?;
        anyhow::bail!(
            "pods not bound exactly once: {} (audit log kept at {})",
            wrong.join(", "),
            kept.display()
        );
    }
    let mut per_node: HashMap<String, (i64, usize)> = HashMap::new();
    for p in pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let e = per_node.entry(node).or_default();
        e.0 += POD_CPU_MILLI;
        e.1 += 1;
    }
    for (node, (cpu, count)) in &per_node {
        anyhow::ensure!(
            *cpu <= NODE_CPU_MILLI && *count <= NODE_PODS,
            "node {node} overcommitted: {cpu}m cpu, {count} pods"
        );
    }
    let rejected = requests
        .iter()
        .filter(|r| r.what == "binding" && !r.succeeded() && !r.client_gone())
        .count();
    Ok((requests, rejected, unanswered))
}

/// Three replicas, 3000 pods in six waves; in the middle of each of the first five the
/// leader is killed (SIGKILL) and a new replica started in its place (as its Deployment
/// would), in the sixth the leader is frozen (SIGSTOP) past its Lease and resumed: it must
/// send nothing and exit. Afterwards every pod is bound exactly once (the audit log's
/// successful bindings), no node is overcommitted, and each takeover is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_frozen_leaders_lose_no_pod_and_bind_none_twice() -> anyhow::Result<()> {
    let want = pods_wanted();
    let cp = ControlPlane::start_with_args(
        "faults",
        ControlPlaneOptions::default(),
        &["--audit-log", "audit.log"],
    )
    .await?;
    nodes(&cp.client).await?;
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), "kube-system");
    let mut next = 1;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(start_replica(&cp, next).await?);
        next += 1;
    }
    leader(&leases, &replicas).await?;

    let started = Instant::now();
    let mut takeovers: Vec<Duration> = Vec::new();
    let per_wave = want.div_ceil(WAVES);
    let mut frozen_user = String::new();
    // Writes the resumed old leader had queued before it froze, refused by its fence.
    let mut fenced = 0;
    let mut resumed_at = k8s_openapi::jiff::Timestamp::now();
    for wave in 0..WAVES {
        let names: Vec<String> = (wave * per_wave..((wave + 1) * per_wave).min(want))
            .map(|i| format!("p{i:05}"))
            .collect();
        let creating = tokio::spawn(create_pods(cp.client.clone(), names, pod));
        // A random moment while the wave is being created and scheduled.
        let delay = rand::rng().random_range(200..1500);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let l = leader(&leases, &replicas).await?;
        let old = replicas[l].identity.clone();
        if wave < WAVES - 1 {
            replicas[l].agent.signal(libc::SIGKILL)?;
            let killed_at = Instant::now();
            let mut dead = replicas.remove(l);
            dead.agent.wait_exit(Duration::from_secs(10));
            let t = takeover(&leases, &replicas, &old, killed_at).await?;
            println!(
                "wave {wave}: {} (leader) killed, takeover after {:.1} s",
                dead.user,
                t.as_secs_f64()
            );
            takeovers.push(t);
            replicas.push(start_replica(&cp, next).await?);
            next += 1;
        } else {
            replicas[l].agent.signal(libc::SIGSTOP)?;
            let frozen = Instant::now();
            let t = takeover(&leases, &replicas, &old, frozen).await?;
            println!(
                "wave {wave}: {} (leader) frozen, takeover after {:.1} s",
                replicas[l].user,
                t.as_secs_f64()
            );
            takeovers.push(t);
            // Longer than the Lease, whatever the takeover took.
            let past_lease = LEASE_DURATION + Duration::from_secs(2);
            if let Some(rest) = past_lease.checked_sub(frozen.elapsed()) {
                tokio::time::sleep(rest).await;
            }
            frozen_user = replicas[l].user.clone();
            resumed_at = k8s_openapi::jiff::Timestamp::now();
            replicas[l].agent.signal(libc::SIGCONT)?;
            let status = replicas[l]
                .agent
                .wait_exit(Duration::from_secs(30))
                .ok_or_else(|| anyhow::anyhow!("the resumed old leader still runs"))?;
            let log = replicas[l].agent.logs();
            assert_eq!(status.code(), Some(1), "{log}");
            assert!(log.contains("leader election lost"), "{log}");
            fenced = log.matches("write refused").count();
        }
        creating.await??;
    }
    let pods = all_bound(&cp.client, want).await?;
    let elapsed = started.elapsed();
    let (requests, rejected, unanswered) =
        check_bound_once(&cp.data_dir().join("audit.log"), &pods)?;
    let after_resume: Vec<&audit::Request> = requests
        .iter()
        .filter(|r| r.user == frozen_user && r.at >= resumed_at)
        .collect();
    assert!(
        after_resume.is_empty(),
        "the resumed old leader sent {} requests: {after_resume:?}",
        after_resume.len()
    );
    let mut by_user: BTreeMap<&str, usize> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.what == "binding") {
        *by_user.entry(r.user.as_str()).or_default() += 1;
    }
    let worst = takeovers.iter().max().copied().unwrap_or_default();
    println!(
        "faults: {want} pods bound exactly once each in {:.0} s across 5 leader kills and 1 \
         freeze ({unanswered} of them by a binding whose sender was killed before the answer); \
         takeovers {:?} s (worst {:.1} s; goal 17 s); bindings refused by the API server: \
         {rejected}; binding requests per replica: {by_user:?}; the resumed leader sent nothing \
         ({fenced} queued writes refused by its fence)",
        elapsed.as_secs_f64(),
        takeovers
            .iter()
            .map(|t| (t.as_secs_f64() * 10.0).round() / 10.0)
            .collect::<Vec<_>>(),
        worst.as_secs_f64()
    );
    Ok(())
}

/// One agent while the API server is restarted twice (gracefully) mid-stream on the same
/// etcd data, which it compacts every 2 s: the agent's watches resume from revisions that
/// are gone (410) and relist. Every pod is bound exactly once and none is left Pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_restarts_and_compaction_lose_no_pod() -> anyhow::Result<()> {
    let want = pods_wanted() / 2;
    let mut cp = ControlPlane::start_with_args(
        "restarts",
        ControlPlaneOptions::default(),
        &[
            "--audit-log",
            "audit.log",
            "--etcd-compaction-interval",
            "2s",
        ],
    )
    .await?;
    nodes(&cp.client).await?;
    // Without election: the test is about watches; a leader's Lease renewal would end its
    // leadership during a restart longer than its renew deadline.
    let agent = Agent::start_with(
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "restarts",
        &["--leader-elect=false"],
    )?;
    let started = Instant::now();
    let waves = 3;
    let per_wave = want.div_ceil(waves);
    for wave in 0..waves {
        let names: Vec<String> = (wave * per_wave..((wave + 1) * per_wave).min(want))
            .map(|i| format!("p{i:05}"))
            .collect();
        create_pods(cp.client.clone(), names, pod).await?;
        if wave < waves - 1 {
            tokio::time::sleep(Duration::from_millis(rand::rng().random_range(100..800))).await;
            let t = Instant::now();
            cp.restart(false).await?;
            println!(
                "wave {wave}: API server restarted in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            // Two compactions at least: the watches' last revisions are gone.
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
    let pods = all_bound(&cp.client, want).await?;
    let (_, rejected, _) = check_bound_once(&cp.data_dir().join("audit.log"), &pods)?;
    let log = agent.logs();
    let relists = log.matches("410").count() + log.matches("too old").count();
    println!(
        "restarts: {want} pods bound exactly once each in {:.0} s across 2 API server restarts \
         with etcd compacted every 2 s; bindings refused: {rejected}; agent log lines about \
         expired watches: {relists}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A leaf's API server killed (SIGKILL) and started again on its data while the host's
/// pods are being synced to it: every host pod ends Running from its leaf copy, and the
/// leaf holds exactly one copy of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_api_server_killed_mid_sync_leaves_one_copy_per_pod() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Node;
    use mcsched_shared::keys;
    let want = (pods_wanted() / 15).max(20);
    let mut cps =
        ControlPlane::start_many(&["fault-host", "fault-east"], ControlPlaneOptions::full())
            .await?;
    let mut leaf = cps.pop().ok_or_else(|| anyhow::anyhow!("no leaf"))?;
    let host = cps.pop().ok_or_else(|| anyhow::anyhow!("no host"))?;
    for i in 0..4 {
        objects::ready_node(
            &leaf.client,
            &format!("east-{i}"),
            "8",
            "32Gi",
            json!({"kubernetes.io/hostname": format!("east-{i}")}),
        )
        .await?;
    }
    objects::join_as_join_does(&host.client, &leaf, "east", json!({})).await?;
    let agent = Agent::start(&host.kubeconfig, "mcsched", host.dir())?;
    let nodes: Api<Node> = Api::all(host.client.clone());
    let virtual_node = keys::virtual_node_name("east");
    objects::wait_ready(&nodes, &virtual_node, "True", Duration::from_secs(120))
        .await
        .map_err(|e| e.context(agent.logs()))?;

    let to_leaf = |name: &str| {
        json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "mcsched",
                "nodeSelector": {"kubernetes.io/hostname": virtual_node},
                "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
                "containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": {"cpu": format!("{POD_CPU_MILLI}m")}}}]},
        })
    };
    let host_pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let half = want / 2;
    let names = |r: std::ops::Range<usize>| r.map(|i| format!("s{i:04}")).collect();
    create_pods(host.client.clone(), names(0..half), to_leaf).await?;
    // While the first half is being bound and synced.
    tokio::time::sleep(Duration::from_millis(rand::rng().random_range(200..1500))).await;
    let t = Instant::now();
    leaf.restart(true).await?;
    println!(
        "leaf API server killed and back in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    create_pods(host.client.clone(), names(half..want), to_leaf).await?;

    let running = wait::until(
        ALL_BOUND_TIMEOUT,
        "every host pod Running from its leaf copy",
        || async {
            let list = host_pods.list(&ListParams::default()).await?.items;
            let running = list
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok((list.len() == want && running == want).then_some(list))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let leaf_pods: Api<Pod> = Api::all(leaf.client.clone());
    let mut copies: HashMap<String, usize> = HashMap::new();
    for p in leaf_pods.list(&ListParams::default()).await?.items {
        if let Some(uid) = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::HOST_POD_UID_ANNOTATION))
        {
            *copies.entry(uid.clone()).or_default() += 1;
        }
    }
    for p in &running {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let n = copies.get(&uid).copied().unwrap_or(0);
        assert_eq!(
            n, 1,
            "host pod {:?} has {n} copies in the leaf",
            p.metadata.name
        );
    }
    assert_eq!(
        copies.len(),
        want,
        "leaf copies of pods the host does not have: {copies:?}"
    );
    println!("leaf restart: {want} host pods Running, one leaf copy each");
    Ok(())
}
