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
use kube::{Api, Client};
use mcsched_e2e::agent::lease_holder;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, audit, objects, wait};
use mcsched_shared::keys;
use rand::RngExt;
use serde_json::json;

const NODES: usize = 50;
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

/// One agent replica: its process, the user its requests carry, its Lease identity.
struct Replica {
    agent: Agent,
    user: String,
    identity: String,
}

async fn start_replica(cp: &ControlPlane, n: usize) -> anyhow::Result<Replica> {
    let user = format!("replica-{n}");
    let kubeconfig = cp.kubeconfig_as(&user)?;
    let agent = Agent::start_with(&kubeconfig, "mcsched", cp.dir(), &user, &[])?;
    let identity = wait::until(
        Duration::from_secs(60),
        &format!("{user} to start its election"),
        || async { Ok(agent.identity()) },
    )
    .await?;
    Ok(Replica {
        agent,
        user,
        identity,
    })
}

/// The replica holding the Lease.
async fn leader(leases: &Api<Lease>, replicas: &[Replica]) -> anyhow::Result<usize> {
    wait::until(TAKEOVER_TIMEOUT, "a leader among the replicas", || async {
        let h = lease_holder(leases, "mcsched").await?;
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
        let h = lease_holder(leases, "mcsched").await?;
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

async fn nodes(client: &Client, node_cpu: i64) -> anyhow::Result<()> {
    for i in 0..NODES {
        objects::ready_node(
            client,
            &format!("n{i}"),
            &format!("{node_cpu}m"),
            "64Gi",
            json!({"pool": "host"}),
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
    audit::keep(audit_log, "faults")
}

/// Every pod bound by exactly one successful binding, and no host node over `node_cpu`
/// (a virtual node holds what its leaf holds).
fn check_bound_once(
    audit_log: &Path,
    pods: &[Pod],
    node_cpu: i64,
) -> anyhow::Result<(Vec<audit::Request>, usize, usize)> {
    let requests = audit::pod_requests(audit_log)?;
    let bindings = audit::bindings(&requests);
    let mut wrong: Vec<String> = Vec::new();
    let mut unanswered = 0;
    for p in pods {
        let key = format!("default/{}", p.metadata.name.as_deref().unwrap_or_default());
        // Bound exactly once: one successful binding, or none and some whose senders were
        // killed before the API server answered (it logs 504 though the pod is bound).
        // Two of those are one leader's binding cut off before it took effect and the
        // next leader's cut off after: the API server takes no second binding of a
        // bound pod, and a sender that tried one got a 409, which is judged apart.
        let (ok, gone) = bindings.get(&key).copied().unwrap_or_default();
        match (ok, gone) {
            (1, _) => {}
            (0, 1..) => unanswered += 1,
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
        if node.starts_with("mcsched-") {
            continue;
        }
        let e = per_node.entry(node).or_default();
        e.0 += POD_CPU_MILLI;
        e.1 += 1;
    }
    for (node, (cpu, count)) in &per_node {
        anyhow::ensure!(
            *cpu <= node_cpu && *count <= NODE_PODS,
            "node {node} overcommitted: {cpu}m cpu of {node_cpu}m, {count} pods"
        );
    }
    let rejected = requests
        .iter()
        .filter(|r| r.what == "binding" && !r.succeeded() && !r.client_gone())
        .count();
    Ok((requests, rejected, unanswered))
}

/// Each refused binding with who sent it, when and why, beside the pod's bindings that
/// succeeded: whether a second replica or the same one (a retry) sent it.
fn refused_bindings(requests: &[audit::Request]) -> String {
    let bindings = |pod: &str| {
        requests
            .iter()
            .filter(|r| r.what == "binding" && r.pod == pod && r.succeeded())
            .map(|r| format!("bound by {} at {}", r.user, r.at))
            .collect::<Vec<_>>()
            .join(", ")
    };
    requests
        .iter()
        .filter(|r| r.what == "binding" && !r.succeeded() && !r.client_gone())
        .map(|r| {
            format!(
                "{} refused {} ({}) for {} at {} [{}]",
                r.pod,
                r.code,
                r.message,
                r.user,
                r.at,
                bindings(&r.pod)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Each host node's CPU: the host pods fill the nodes to 96 %, so that a scheduler placing
/// one pod too many on a node shows as an overcommit.
fn node_cpu_milli(host_pods: usize) -> i64 {
    let per_node = (host_pods as i64 * POD_CPU_MILLI) as f64 / NODES as f64 / 0.96;
    ((per_node / 10.0).ceil() as i64) * 10
}

/// Every successful write a replica made, on the host and in the leaf, fell inside an
/// interval when that replica held the Lease (as the host's audit log has the Lease's
/// writes); returns how many writes were judged per replica.
fn check_one_writer(
    host_writes: &[audit::Write],
    leaf_writes: &[audit::Write],
    replicas: &BTreeMap<String, String>,
    audit_logs: &[&Path],
) -> anyhow::Result<BTreeMap<String, usize>> {
    let leases = audit::lease_writes(host_writes, "kube-system", "mcsched");
    anyhow::ensure!(!leases.is_empty(), "no write of the Lease in the audit log");
    let mut judged: BTreeMap<String, usize> = BTreeMap::new();
    let mut outside: Vec<String> = Vec::new();
    let by_identity: HashMap<&str, &str> = replicas
        .iter()
        .map(|(user, identity)| (identity.as_str(), user.as_str()))
        .collect();
    // Host: the replicas impersonate a user each. The Lease's own writes are how the
    // intervals are known; a standby's failed attempts are not writes that succeeded.
    for w in host_writes.iter().filter(|w| w.succeeded()) {
        if !replicas.contains_key(&w.user) {
            continue;
        }
        *judged.entry(w.user.clone()).or_default() += 1;
        if w.resource == "leases" && w.name == "mcsched" {
            continue;
        }
        if !audit::held_at(&leases, &w.user, w.received, LEASE_DURATION) {
            outside.push(format!("host: {w}"));
        }
    }
    // Leaf: the replicas share the join's token; each names itself in its User-Agent.
    for w in leaf_writes
        .iter()
        .filter(|w| w.succeeded() && w.user.contains(keys::LEAF_ACCOUNT))
    {
        let replica = by_identity
            .iter()
            .find(|(identity, _)| w.user_agent.ends_with(*identity))
            .map(|(_, user)| *user);
        let Some(user) = replica else {
            outside.push(format!("leaf, no replica's User-Agent: {w}"));
            continue;
        };
        *judged.entry(format!("{user} (leaf)")).or_default() += 1;
        if !audit::held_at(&leases, user, w.received, LEASE_DURATION) {
            outside.push(format!("leaf: {w}"));
        }
    }
    if !outside.is_empty() {
        let kept: Vec<String> = audit_logs
            .iter()
            .map(|l| keep(l).map(|k| k.display().to_string()))
            .collect::<anyhow::Result<_>>()?;
        anyhow::bail!(
            "{} writes by a replica that did not hold the Lease (audit logs kept at {}): {}",
            outside.len(),
            kept.join(", "),
            outside
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(judged)
}

/// Three replicas, 3000 pods in six waves (a tenth of them sent to a leaf); in the middle
/// of each of the first five waves the leader is killed (SIGKILL) and a new replica started
/// in its place (as its Deployment would), in the sixth the leader is frozen (SIGSTOP) past
/// its Lease and resumed: it must exit having sent nothing. Read from the host's and the
/// leaf's audit logs (every write recorded): every pod bound by exactly one successful
/// binding and none refused, no host node (filled to 96 %) overcommitted, and every
/// successful write of every replica, host and leaf, made while it held the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_frozen_leaders_lose_no_pod_and_bind_none_twice() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Node;
    let want = pods_wanted();
    let to_leaf = |i: usize| i.is_multiple_of(10);
    let host_pods = (0..want).filter(|i| !to_leaf(*i)).count();
    let node_cpu = node_cpu_milli(host_pods);
    let leaf_options = ControlPlaneOptions {
        with_controller_manager: false,
        with_scheduler: true,
        simulate_kubelets: true,
    };
    let (cp, leaf) = tokio::try_join!(
        ControlPlane::start_with_args(
            "faults",
            ControlPlaneOptions::default(),
            &["--audit-log", "audit.log"],
        ),
        ControlPlane::start_with_args("faults-east", leaf_options, &["--audit-log", "audit.log"]),
    )?;
    nodes(&cp.client, node_cpu).await?;
    for i in 0..4 {
        objects::ready_node(
            &leaf.client,
            &format!("east-{i}"),
            "16",
            "64Gi",
            json!({"kubernetes.io/hostname": format!("east-{i}")}),
        )
        .await?;
    }
    objects::join_as_join_does(&cp.client, &leaf, "east", json!({})).await?;
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), "kube-system");
    let mut next = 1;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(start_replica(&cp, next).await?);
        next += 1;
    }
    // Every replica that ran, by user: its Lease identity.
    let mut ran: BTreeMap<String, String> = replicas
        .iter()
        .map(|r| (r.user.clone(), r.identity.clone()))
        .collect();
    leader(&leases, &replicas).await?;
    let virtual_node = keys::virtual_node_name("east");
    objects::wait_ready(
        &Api::<Node>::all(cp.client.clone()),
        &virtual_node,
        "True",
        TAKEOVER_TIMEOUT,
    )
    .await?;
    let make = move |name: &str| {
        let mut p = pod(name);
        let i: usize = name.trim_start_matches('p').parse().unwrap_or(1);
        // mcsched's profile lets any pod go to a virtual node: each pod is sent where the
        // test counts it.
        if to_leaf(i) {
            p["spec"]["nodeSelector"] =
                json!({"kubernetes.io/hostname": keys::virtual_node_name("east")});
            p["spec"]["tolerations"] = json!([{"key": keys::LEAF_TAINT, "operator": "Exists"}]);
        } else {
            p["spec"]["nodeSelector"] = json!({"pool": "host"});
        }
        p
    };

    let started = Instant::now();
    let mut takeovers: Vec<Duration> = Vec::new();
    let per_wave = want.div_ceil(WAVES);
    let mut frozen_user = String::new();
    // Writes the resumed old leader had queued before it froze, refused by its fence.
    let mut fenced = 0;
    let mut frozen_at = k8s_openapi::jiff::Timestamp::now();
    let mut resumed_at = k8s_openapi::jiff::Timestamp::now();
    for wave in 0..WAVES {
        let names: Vec<String> = (wave * per_wave..((wave + 1) * per_wave).min(want))
            .map(|i| format!("p{i:05}"))
            .collect();
        let creating = tokio::spawn(create_pods(cp.client.clone(), names, make));
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
            let r = start_replica(&cp, next).await?;
            ran.insert(r.user.clone(), r.identity.clone());
            replicas.push(r);
            next += 1;
        } else {
            frozen_at = k8s_openapi::jiff::Timestamp::now();
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
    // Every leaf pod's copy created and running there (its status back on the host), so
    // that the leaf's audit log holds the whole sync.
    let host_api: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    wait::until(
        ALL_BOUND_TIMEOUT,
        "every leaf pod Running from its copy",
        || async {
            let list = host_api.list(&ListParams::default()).await?.items;
            let running = list
                .iter()
                .filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(virtual_node.as_str())
                })
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok((running == want - host_pods).then_some(()))
        },
    )
    .await?;
    let host_log = cp.data_dir().join("audit.log");
    let leaf_log = leaf.data_dir().join("audit.log");
    let (requests, rejected, unanswered) = check_bound_once(&host_log, &pods, node_cpu)?;
    let host_writes = audit::writes(&host_log)?;
    let leaf_writes = audit::writes(&leaf_log)?;
    let judged = check_one_writer(&host_writes, &leaf_writes, &ran, &[&host_log, &leaf_log])?;
    if rejected > 0 {
        anyhow::bail!(
            "{rejected} bindings refused by the API server (a second writer's, or a stale cache's): {} (audit log kept at {})",
            refused_bindings(&requests),
            keep(&host_log)?.display()
        );
    }
    // The frozen leader was writing before it froze (a field no longer recorded would
    // make the next check pass for nothing), and wrote nothing, anywhere, after.
    let frozen_identity = ran.get(&frozen_user).cloned().unwrap_or_default();
    let by_frozen = |w: &&audit::Write| {
        w.user == frozen_user
            || (!frozen_identity.is_empty() && w.user_agent.ends_with(&frozen_identity))
    };
    let before: Vec<&audit::Write> = host_writes
        .iter()
        .chain(&leaf_writes)
        .filter(by_frozen)
        .filter(|w| w.succeeded() && w.received < frozen_at)
        .collect();
    anyhow::ensure!(
        before.iter().any(|w| w.subresource == "binding"),
        "the frozen leader ({frozen_user}) made no binding before it froze"
    );
    let after_resume: Vec<String> = host_writes
        .iter()
        .chain(&leaf_writes)
        .filter(by_frozen)
        .filter(|w| w.received >= resumed_at)
        .map(|w| w.to_string())
        .collect();
    assert!(
        after_resume.is_empty(),
        "the resumed old leader sent {} writes: {after_resume:?}",
        after_resume.len()
    );
    let leaf_copies = leaf_writes
        .iter()
        .filter(|w| {
            w.succeeded() && w.verb == "create" && w.resource == "pods" && w.subresource.is_empty()
        })
        .count();
    anyhow::ensure!(
        leaf_copies == want - host_pods,
        "{leaf_copies} copies created in the leaf for {} pods sent there",
        want - host_pods
    );
    let mut by_user: BTreeMap<&str, usize> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.what == "binding") {
        *by_user.entry(r.user.as_str()).or_default() += 1;
    }
    let worst = takeovers.iter().max().copied().unwrap_or_default();
    println!(
        "faults: {want} pods ({} to the leaf) bound exactly once each in {:.0} s across 5 \
         leader kills and 1 freeze ({unanswered} of them by a binding whose sender was killed \
         before the answer); takeovers {:?} s (worst {:.1} s; goal 17 s); bindings refused: \
         {rejected}; binding requests per replica: {by_user:?}; successful writes judged, all \
         while their replica held the Lease: {judged:?}; the frozen leader made {} writes \
         before it froze and none after it resumed ({fenced} queued writes refused by its \
         fence); host nodes filled to {:.0} %",
        want - host_pods,
        elapsed.as_secs_f64(),
        takeovers
            .iter()
            .map(|t| (t.as_secs_f64() * 10.0).round() / 10.0)
            .collect::<Vec<_>>(),
        worst.as_secs_f64(),
        before.len(),
        (host_pods as f64 * POD_CPU_MILLI as f64) / (NODES as f64 * node_cpu as f64) * 100.0
    );
    Ok(())
}

/// Creates the pods, retrying each while the API server does not answer (restarting).
async fn create_pods_through_outage(client: Client, names: Vec<String>) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
        .map(|name| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(restart_pod(&name))?;
                let deadline = Instant::now() + Duration::from_secs(120);
                loop {
                    match pods.create(&PostParams::default(), &p).await {
                        Ok(_) => return Ok(()),
                        // Created by an attempt whose answer the restart cut off.
                        Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
                        Err(e) if Instant::now() < deadline => {
                            let _ = e;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The value of a counter family's series whose labels start with `labels` summed, from
/// the agent's /metrics.
fn counter_sum(metrics: &str, family: &str, labels: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}_total{{{labels}")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The leaves joined to the host whose API server restarts, and which of its pods are
/// pinned to each (`p{i}` with i % 10 == 0 to the first, == 1 to the second; the rest go
/// where mcsched places them, host nodes or either leaf).
const RESTART_LEAVES: [&str; 2] = ["east", "west"];

fn restart_pod(name: &str) -> serde_json::Value {
    use mcsched_shared::keys;
    let i: usize = name.trim_start_matches('p').parse().unwrap_or(2);
    let mut p = pod(name);
    if let Some(leaf) = RESTART_LEAVES.get(i % 10) {
        p["spec"]["nodeSelector"] =
            json!({"kubernetes.io/hostname": keys::virtual_node_name(leaf)});
        p["spec"]["tolerations"] = json!([{"key": keys::LEAF_TAINT, "operator": "Exists"}]);
    }
    p
}

/// Every host pod bound to `leaf`'s virtual node Running, with exactly one copy in the
/// leaf; returns how many.
async fn one_copy_each(
    host: &Client,
    leaf_name: &str,
    leaf: &Client,
    agent: &Agent,
) -> anyhow::Result<usize> {
    use mcsched_shared::keys;
    let virtual_node = keys::virtual_node_name(leaf_name);
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), "default");
    let running = wait::until(
        ALL_BOUND_TIMEOUT,
        &format!("every pod on {virtual_node} Running from its copy"),
        || async {
            let on_leaf: Vec<Pod> = (host_pods.list(&ListParams::default()).await?.items)
                .into_iter()
                .filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(virtual_node.as_str())
                })
                .collect();
            let all_running = on_leaf
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            Ok(all_running.then_some(on_leaf))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let mut copies: HashMap<String, usize> = HashMap::new();
    for p in Api::<Pod>::all(leaf.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        if let Some(uid) =
            (p.metadata.annotations.as_ref()).and_then(|a| a.get(keys::HOST_POD_UID_ANNOTATION))
        {
            *copies.entry(uid.clone()).or_default() += 1;
        }
    }
    for p in &running {
        let n = (p.metadata.uid.as_ref())
            .and_then(|uid| copies.get(uid))
            .copied()
            .unwrap_or(0);
        anyhow::ensure!(
            n == 1,
            "host pod {:?} has {n} copies in leaf {leaf_name}",
            p.metadata.name
        );
    }
    anyhow::ensure!(
        copies.len() == running.len(),
        "leaf {leaf_name} holds copies of pods the host does not have there: {} copies, {} pods",
        copies.len(),
        running.len()
    );
    Ok(running.len())
}

/// One agent while the API server is restarted twice (gracefully) on the same etcd data,
/// which it compacts every 2 s, with pods being created through each restart, to host
/// nodes and to two joined leaves: the agent's watches come back to an API server whose
/// watch cache no longer has their resource versions (410 Gone) and relist, which its
/// metrics count. Every pod, those created during the outages too, is bound by exactly
/// one binding, none refused, and every pod sent to a leaf runs from exactly one copy
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_restarts_and_compaction_lose_no_pod() -> anyhow::Result<()> {
    let want = pods_wanted() / 2;
    let node_cpu = node_cpu_milli(want);
    let (mut cp, east, west) = tokio::try_join!(
        ControlPlane::start_with_args(
            "restarts",
            ControlPlaneOptions::default(),
            &[
                "--audit-log",
                "audit.log",
                "--etcd-compaction-interval",
                "2s",
            ],
        ),
        ControlPlane::start_with_args("restarts-east", ControlPlaneOptions::full(), &[]),
        ControlPlane::start_with_args("restarts-west", ControlPlaneOptions::full(), &[]),
    )?;
    nodes(&cp.client, node_cpu).await?;
    for (leaf, name) in [(&east, RESTART_LEAVES[0]), (&west, RESTART_LEAVES[1])] {
        for i in 0..4 {
            objects::ready_node(
                &leaf.client,
                &format!("{name}-{i}"),
                "32",
                "64Gi",
                json!({"kubernetes.io/hostname": format!("{name}-{i}")}),
            )
            .await?;
        }
        objects::join_as_join_does(&cp.client, leaf, name, json!({})).await?;
    }
    // Without election: the test is about watches; a leader's Lease renewal would end its
    // leadership during a restart longer than its renew deadline.
    let agent = Agent::start_with(
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "restarts",
        &["--leader-elect=false"],
    )?;
    let virtual_nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cp.client.clone());
    for leaf in RESTART_LEAVES {
        let name = mcsched_shared::keys::virtual_node_name(leaf);
        objects::wait_ready(&virtual_nodes, &name, "True", Duration::from_secs(120))
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    let started = Instant::now();
    let waves = 3;
    let per_wave = want.div_ceil(waves);
    let names = |wave: usize| -> Vec<String> {
        (wave * per_wave..((wave + 1) * per_wave).min(want))
            .map(|i| format!("p{i:05}"))
            .collect()
    };
    create_pods(cp.client.clone(), names(0), restart_pod).await?;
    for wave in 1..waves {
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(100..800))).await;
        // The wave is created while the API server goes down and comes back.
        let creating = tokio::spawn(create_pods_through_outage(cp.client.clone(), names(wave)));
        let t = Instant::now();
        cp.restart(false).await?;
        println!(
            "restart {wave}: API server restarted in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        creating.await??;
    }
    let pods = all_bound(&cp.client, want).await?;
    let (requests, rejected, _) =
        check_bound_once(&cp.data_dir().join("audit.log"), &pods, node_cpu)?;
    anyhow::ensure!(
        rejected == 0,
        "{rejected} bindings refused by the API server: {}",
        refused_bindings(&requests)
    );
    let mut in_leaves = Vec::new();
    for (leaf, name) in [(&east, RESTART_LEAVES[0]), (&west, RESTART_LEAVES[1])] {
        in_leaves.push(one_copy_each(&cp.client, name, &leaf.client, &agent).await?);
    }
    anyhow::ensure!(
        in_leaves.iter().all(|n| *n > 0),
        "pods in the leaves: {in_leaves:?}"
    );
    let m = agent_metrics(&cp, &agent).await?;
    let expired = counter_sum(&m, "mcsched_watch_expired", "");
    let relists = counter_sum(&m, "mcsched_watch_relists", "");
    anyhow::ensure!(
        expired >= 1.0 && relists >= 1.0,
        "no watch expired and relisted across the restarts: mcsched_watch_expired {expired}, \
         mcsched_watch_relists {relists}\n{}",
        m.lines()
            .filter(|l| l.starts_with("mcsched_watch"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "restarts: {want} pods bound exactly once each in {:.0} s across 2 API server restarts \
         with etcd compacted every 2 s, pods created through each, {in_leaves:?} of them \
         running from one copy each in leaves {RESTART_LEAVES:?}; bindings refused: \
         {rejected}; watches expired (410): {expired}, relists: {relists}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A leaf's API server killed (SIGKILL) and started again on its data while the host's
/// pods are being synced to it (killed once a pod is bound to the leaf's virtual node with
/// no copy there yet): every host pod ends Running from its leaf copy, and the leaf holds
/// exactly one copy of each. The agent's leaf watches come back to a new API server whose
/// watch cache does not hold their resource versions (its etcd compacted every 2 s too):
/// they expire (410) and relist, which the agent's metrics must count for the leaf's
/// resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_api_server_killed_mid_sync_leaves_one_copy_per_pod() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Node;
    use mcsched_shared::keys;
    let want = (pods_wanted() / 15).max(20);
    let (host, mut leaf) = tokio::try_join!(
        ControlPlane::start_with_args("fault-host", ControlPlaneOptions::full(), &[]),
        ControlPlane::start_with_args(
            "fault-east",
            ControlPlaneOptions::full(),
            &["--etcd-compaction-interval", "2s"]
        ),
    )?;
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

    let to_leaf = {
        let virtual_node = virtual_node.clone();
        move |name: &str| {
            json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"schedulerName": "mcsched",
                    "nodeSelector": {"kubernetes.io/hostname": virtual_node},
                    "tolerations": [{"key": keys::LEAF_TAINT, "operator": "Exists"}],
                    "containers": [{"name": "c", "image": "pause",
                        "resources": {"requests": {"cpu": format!("{POD_CPU_MILLI}m")}}}]},
            })
        }
    };
    let host_pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let leaf_pods: Api<Pod> = Api::all(leaf.client.clone());
    let half = want / 2;
    let names = |r: std::ops::Range<usize>| r.map(|i| format!("s{i:04}")).collect();
    // The first half created in the background: the kill comes while it is bound and
    // synced, once some pod is bound to the virtual node and not copied to the leaf yet.
    let creating = tokio::spawn(create_pods(
        host.client.clone(),
        names(0..half),
        to_leaf.clone(),
    ));
    let (bound, copied) = wait::until(
        Duration::from_secs(60),
        "a pod bound to the leaf's virtual node with no copy there yet",
        || async {
            let bound = (host_pods.list(&ListParams::default()).await?.items.iter())
                .filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(virtual_node.as_str())
                })
                .count();
            let copied = (leaf_pods.list(&ListParams::default()).await?.items.iter())
                .filter(|p| {
                    (p.metadata.annotations.as_ref())
                        .is_some_and(|a| a.contains_key(keys::HOST_POD_UID_ANNOTATION))
                })
                .count();
            Ok((bound > copied).then_some((bound, copied)))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let metrics_before = agent_metrics(&host, &agent).await?;
    let t = Instant::now();
    leaf.restart(true).await?;
    println!(
        "leaf API server killed with {bound} pods bound to it and {copied} copied, back in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    creating.await??;
    create_pods(host.client.clone(), names(half..want), to_leaf).await?;

    wait::until(
        ALL_BOUND_TIMEOUT,
        "every host pod Running from its leaf copy",
        || async {
            let list = host_pods.list(&ListParams::default()).await?.items;
            let running = list
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok((list.len() == want && running == want).then_some(()))
        },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let in_leaf = one_copy_each(&host.client, "east", &leaf.client, &agent).await?;
    anyhow::ensure!(
        in_leaf == want,
        "{in_leaf} host pods on the leaf's virtual node, {want} sent there"
    );
    // The leaf's watches, not the host's: the host's API server ran throughout.
    let metrics_after = agent_metrics(&host, &agent).await?;
    let leaf_count = |m: &str, family: &str| counter_sum(m, family, "resource=\"leaf ");
    let expired = leaf_count(&metrics_after, "mcsched_watch_expired")
        - leaf_count(&metrics_before, "mcsched_watch_expired");
    let relists = leaf_count(&metrics_after, "mcsched_watch_relists")
        - leaf_count(&metrics_before, "mcsched_watch_relists");
    anyhow::ensure!(
        expired >= 1.0 && relists >= 1.0,
        "no leaf watch expired and relisted across the leaf's restart: expired {expired}, \
         relists {relists}\n{}",
        metrics_after
            .lines()
            .filter(|l| l.starts_with("mcsched_watch"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "leaf restart: {want} host pods Running, one leaf copy each; leaf watches expired \
         (410) {expired}, relisted {relists}"
    );
    Ok(())
}

/// The agent's /metrics, read as the host's admin.
async fn agent_metrics(host: &ControlPlane, agent: &Agent) -> anyhow::Result<String> {
    let http = mcsched_e2e::api::admin_https(host)?;
    Ok(http
        .get(format!("{}/metrics", agent.url))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}
