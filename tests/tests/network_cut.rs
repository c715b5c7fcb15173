//! A leader cut off by the network: two agents with leader election, each talking to the
//! API server through its own TCP proxy (tests/src/tcp_proxy.rs), while pods are being
//! created. The leader's proxy stops answering — connections accepted, no byte forwarded
//! either way, open ones frozen, not closed: the leader's requests hang, none is
//! refused. Past renewDeadline the leader must stop acting and exit (its writes in flight,
//! hanging, must not hold it); the standby takes the Lease and binds the rest. Then the
//! line comes back, as a partition heals: a cut leader still acting would be seen
//! writing. Judged from the API server's audit log: no write by the cut leader after
//! cut + renewDeadline + MARGIN, the standby's Lease writes, every pod bound by exactly
//! one successful binding and none refused, none lost.
//!
//! Sizes: MCSCHED_CUT_PODS (default 900) pods created at 30 a second, and a burst of
//! 150 at once just before the cut, so that the leader has writes under way when it
//! falls.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::agent::lease_holder;
use mcsched_e2e::tcp_proxy::{TcpProxy, kubeconfig_through};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, audit, objects, wait};
use serde_json::json;

const NODES: usize = 20;
const NODE_CPU: &str = "8";
const POD_CPU: &str = "100m";
const PODS_PER_SECOND: u64 = 30;
/// Pods created at once just before the cut: the leader is binding them when it falls,
/// so that its writes hang on the cut line rather than none being under way.
const BURST: usize = 150;
/// The agent's defaults, kube-scheduler's: 15 s lease, 10 s renew deadline, 2 s retry;
/// the standby takes the Lease 15 to 17 s after the leader's last renewal.
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Past the cut's renew deadline, time for a leader that stepped down to have ended
/// whatever it was doing: its last renewal was at most a retry period (2 s) before the
/// cut, so its deadline is at most 10 s after it; 5 s more is slack for a loaded machine.
/// No write of the cut leader may reach the API server after cut + 10 s + this.
const MARGIN: Duration = Duration::from_secs(5);
/// After the heal, how long a cut leader still running would have to show itself.
const WATCHED_AFTER_HEAL: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(120);

fn pods_wanted() -> usize {
    std::env::var("MCSCHED_CUT_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(900)
}

/// One agent replica behind its own proxy: its process, the user its requests carry
/// (the admin impersonating it, so that the audit log tells the replicas apart), its
/// Lease identity.
struct Replica {
    agent: Agent,
    proxy: TcpProxy,
    user: String,
    identity: String,
}

async fn start_replica(
    cp: &ControlPlane,
    upstream: std::net::SocketAddr,
    n: usize,
) -> anyhow::Result<Replica> {
    let user = format!("replica-{n}");
    let impersonating = cp.kubeconfig_as(&user)?;
    let proxy = TcpProxy::start(upstream).await?;
    let kubeconfig = cp.dir().join(format!("kubeconfig-{user}"));
    kubeconfig_through(&impersonating, proxy.addr(), &kubeconfig)?;
    let agent = Agent::start_with(&kubeconfig, "mcsched", cp.dir(), &user, &[])?;
    let identity = wait::until(
        Duration::from_secs(60),
        &format!("{user} to start its election"),
        || async { Ok(agent.identity()) },
    )
    .await
    .map_err(|e| e.context(agent.logs()))?;
    Ok(Replica {
        agent,
        proxy,
        user,
        identity,
    })
}

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "mcsched", "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": POD_CPU}}}]},
    }))?)
}

/// Creates pod `name`, trying again for a while when the API server, loaded, fails (etcd's
/// "request timed out"); one an earlier try created is there already.
async fn create(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let p = pod(name)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &p).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code >= 500 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Creates `want` pods at PODS_PER_SECOND, each from its own task so that a slow answer
/// does not slow the rate; returns the names created.
async fn create_pods(client: Client, want: usize) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / PODS_PER_SECOND));
    let mut tasks = Vec::with_capacity(want);
    for i in 0..want {
        tick.tick().await;
        let (pods, name) = (pods.clone(), format!("p{i:05}"));
        tasks.push(tokio::spawn(async move {
            create(&pods, &name).await?;
            anyhow::Ok(name)
        }));
    }
    let mut names = Vec::with_capacity(want);
    for t in tasks {
        names.push(t.await??);
    }
    Ok(names)
}

/// Creates `n` pods `b0000`... at once (32 at a time); returns their names.
async fn create_burst(client: Client, n: usize) -> anyhow::Result<Vec<String>> {
    use futures::StreamExt;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let created: Vec<anyhow::Result<String>> = futures::stream::iter(0..n)
        .map(|i| {
            let (pods, name) = (pods.clone(), format!("b{i:04}"));
            async move {
                create(&pods, &name).await?;
                anyhow::Ok(name)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    created.into_iter().collect()
}

fn bound(list: &[Pod]) -> usize {
    list.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

/// A copy of the audit log under target/network_cut/, for a failure to be looked into.
fn keep(audit_log: &Path) -> String {
    audit::keep(audit_log, "network_cut")
        .map_or_else(|e| format!("(not kept: {e})"), |p| p.display().to_string())
}

fn plus(t: Timestamp, d: Duration) -> anyhow::Result<Timestamp> {
    Ok(t.checked_add(SignedDuration::try_from(d)?)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_by_the_network_stops_writing_and_the_standby_binds_every_pod_once()
-> anyhow::Result<()> {
    let want = pods_wanted();
    let cp = ControlPlane::start_with_args(
        "network-cut",
        ControlPlaneOptions::default(),
        &["--audit-log", "audit.log"],
    )
    .await?;
    for i in 0..NODES {
        objects::ready_node(&cp.client, &format!("n{i}"), NODE_CPU, "64Gi", json!({})).await?;
    }
    let upstream: std::net::SocketAddr = cp
        .url
        .strip_prefix("https://")
        .ok_or_else(|| anyhow::anyhow!("control plane URL {} is not https", cp.url))?
        .parse()?;
    let mut replicas = [
        start_replica(&cp, upstream, 1).await?,
        start_replica(&cp, upstream, 2).await?,
    ];
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), "kube-system");
    let l = wait::until(TIMEOUT, "a leader among the replicas", || async {
        let h = lease_holder(&leases, "mcsched").await?;
        Ok(replicas
            .iter()
            .position(|r| Some(&r.identity) == h.as_ref()))
    })
    .await?;
    let s = 1 - l;
    let (cut_user, cut_identity) = (replicas[l].user.clone(), replicas[l].identity.clone());
    let (standby_user, standby_identity) = (replicas[s].user.clone(), replicas[s].identity.clone());

    let started = Instant::now();
    let creating = tokio::spawn(create_pods(cp.client.clone(), want));
    // Under load: the leader has bound a good share, and pods keep coming.
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    let before_cut = wait::until(TIMEOUT, "the leader binding pods", || async {
        let n = bound(&pods.list(&ListParams::default()).await?.items);
        Ok((n >= want / 8).then_some(n))
    })
    .await
    .map_err(|e| e.context(replicas[l].agent.logs()))?;
    let burst = tokio::spawn(create_burst(cp.client.clone(), BURST));
    wait::until(TIMEOUT, "the leader binding the burst", || async {
        let list = pods.list(&ListParams::default()).await?.items;
        let burst_bound = list
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with('b'))
            })
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        Ok((burst_bound >= BURST / 10).then_some(()))
    })
    .await
    .map_err(|e| e.context(replicas[l].agent.logs()))?;
    let cut_at = Timestamp::now();
    let cut = Instant::now();
    replicas[l].proxy.cut();
    let stats_at_cut = replicas[l].proxy.stats();

    // Its leadership ends at its renew deadline, and with it the process, as
    // kube-scheduler's: its writes in flight hang on the cut line and must not hold it.
    let mut exited_before_heal = None;
    while exited_before_heal.is_none() && cut.elapsed() < RENEW_DEADLINE + MARGIN {
        exited_before_heal = replicas[l]
            .agent
            .wait_exit(Duration::from_millis(1))
            .map(|st| (st, cut.elapsed()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let takeover = wait::until(TIMEOUT, "the standby to take the Lease", || async {
        Ok(
            (lease_holder(&leases, "mcsched").await?.as_deref() == Some(standby_identity.as_str()))
                .then(|| cut.elapsed()),
        )
    })
    .await
    .map_err(|e| e.context(replicas[s].agent.logs()))?;
    // The line stays cut at least until the cut leader may no longer write.
    if let Some(rest) = (RENEW_DEADLINE + MARGIN).checked_sub(cut.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let heal_at = Timestamp::now();
    let stats_before_heal = replicas[l].proxy.stats();
    replicas[l].proxy.heal();

    let mut names = creating.await??;
    names.extend(burst.await??);
    let total = names.len();
    let list = wait::until(TIMEOUT, "every pod bound", || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok((list.len() == total && bound(&list) == total).then_some(list))
    })
    .await
    .map_err(|e| e.context(replicas[s].agent.logs()))?;
    // A cut leader still running has had the line back for this long.
    if let Some(rest) = WATCHED_AFTER_HEAL.checked_sub(
        Timestamp::now()
            .duration_since(heal_at)
            .try_into()
            .unwrap_or_default(),
    ) {
        tokio::time::sleep(rest).await;
    }
    let exit = match exited_before_heal {
        Some(e) => Some(e),
        None => replicas[l]
            .agent
            .wait_exit(Duration::from_secs(5))
            .map(|st| (st, cut.elapsed())),
    };

    let log = cp.data_dir().join("audit.log");
    let writes = audit::writes(&log)?;
    let by_cut = |w: &&audit::Write| w.user == cut_user || w.user_agent.ends_with(&cut_identity);
    let deadline = plus(cut_at, RENEW_DEADLINE + MARGIN)?;
    // It was binding before the cut: a user or identity no longer recorded would make the
    // next check pass for nothing.
    let bound_by_cut = writes
        .iter()
        .filter(by_cut)
        .filter(|w| w.subresource == "binding" && w.succeeded() && w.received < cut_at)
        .count();
    anyhow::ensure!(
        bound_by_cut > 0,
        "the leader ({cut_user}) made no binding before the cut"
    );
    let late: Vec<String> = writes
        .iter()
        .filter(by_cut)
        .filter(|w| w.received >= deadline)
        .map(|w| w.to_string())
        .collect();
    assert!(
        late.is_empty(),
        "the cut leader sent {} writes after cut + renewDeadline + {MARGIN:?} ({deadline}; \
         healed at {heal_at}; audit log kept at {}): {:?}\n{}",
        late.len(),
        keep(&log),
        late.iter().take(20).collect::<Vec<_>>(),
        replicas[l].agent.logs()
    );
    // Sent before the cut (the proxy forwarded nothing after it), received after it by
    // an API server under load; their answers never reached the leader.
    let between: Vec<f64> = writes
        .iter()
        .filter(by_cut)
        .filter(|w| w.received >= cut_at && w.received < deadline)
        .map(|w| w.received.duration_since(cut_at).as_secs_f64())
        .collect();
    let latest = between.iter().copied().fold(0.0, f64::max);
    let between = between.len();

    // The standby took the Lease after the cut, and bound pods.
    let leases_after: Vec<_> = audit::lease_writes(&writes, "kube-system", "mcsched")
        .into_iter()
        .filter(|(_, t)| *t > cut_at)
        .collect();
    anyhow::ensure!(
        leases_after.iter().any(|(u, _)| *u == standby_user),
        "no Lease write by the standby ({standby_user}) after the cut: {leases_after:?}"
    );

    // Every pod bound by exactly one successful binding, none refused (a refusal is a
    // second writer or a stale cache), none lost.
    let requests = audit::pod_requests(&log)?;
    let bindings = audit::bindings(&requests);
    // Bound exactly once: one successful binding, or none and some the API server
    // answered "context canceled" (504), its client gone or its own timeout past, though
    // the pod is bound (every pod is, above): the binding took effect before the answer
    // was lost. Two successful ones, or a bound pod without any, is wrong.
    let mut unanswered = 0;
    let wrong: Vec<String> = names
        .iter()
        .map(|n| format!("default/{n}"))
        .filter_map(|k| {
            let (ok, gone) = bindings.get(&k).copied().unwrap_or_default();
            match (ok, gone) {
                (1, _) => None,
                (0, 1..) => {
                    unanswered += 1;
                    None
                }
                _ => Some(format!(
                    "{k}: {ok} successful bindings, {gone} answered \"context canceled\""
                )),
            }
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "pods not bound exactly once (audit log kept at {}): {wrong:?}",
        keep(&log)
    );
    let refused: Vec<String> = requests
        .iter()
        .filter(|r| r.what == "binding" && !r.succeeded() && !r.client_gone())
        .map(|r| format!("{} {} by {}: {}", r.pod, r.code, r.user, r.message))
        .collect();
    assert!(
        refused.is_empty(),
        "bindings refused (audit log kept at {}): {refused:?}",
        keep(&log)
    );
    assert_eq!(list.len(), want + BURST, "pods lost");
    let mut by_user: BTreeMap<&str, usize> = BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.what == "binding" && r.succeeded())
    {
        *by_user.entry(r.user.as_str()).or_default() += 1;
    }
    anyhow::ensure!(
        by_user.get(standby_user.as_str()).copied().unwrap_or(0) > 0,
        "the standby bound nothing: {by_user:?}"
    );

    let (status, exited_after) = exit.ok_or_else(|| {
        anyhow::anyhow!("the cut leader still runs\n{}", replicas[l].agent.logs())
    })?;
    let agent_log = replicas[l].agent.logs();
    assert_eq!(status.code(), Some(1), "{agent_log}");
    assert!(agent_log.contains("leader election lost"), "{agent_log}");
    assert!(
        exited_before_heal.is_some(),
        "the cut leader exited {:.1} s after the cut, not within renewDeadline + {MARGIN:?} \
         (the line healed at {:.1} s)\n{agent_log}",
        exited_after.as_secs_f64(),
        heal_at.duration_since(cut_at).as_secs_f64()
    );
    println!(
        "network cut: {total} pods bound exactly once each in {:.0} s; the leader ({cut_user}) \
         cut after {before_cut} were bound and a burst of {BURST} was being bound, having made {bound_by_cut} bindings; the standby \
         ({standby_user}) held the Lease {:.1} s after the cut; the cut leader exited {:.1} s \
         after the cut, before the heal; the API server received {between} of its writes after \
         the cut (the last {latest:.3} s after it, sent before it) and none after cut + \
         renewDeadline + {MARGIN:?} (the line healed at {:.1} s and watched {WATCHED_AFTER_HEAL:?} \
         more); its proxy accepted {} connections during the cut and forwarded nothing \
         ({} bytes up before the cut, {} at the heal); successful bindings per replica: \
         {by_user:?} ({unanswered} bound by one answered \"context canceled\"); refused: 0",
        started.elapsed().as_secs_f64(),
        takeover.as_secs_f64(),
        exited_after.as_secs_f64(),
        heal_at.duration_since(cut_at).as_secs_f64(),
        stats_before_heal.accepted_while_cut,
        stats_at_cut.bytes_up,
        stats_before_heal.bytes_up,
    );
    Ok(())
}
