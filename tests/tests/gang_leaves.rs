//! A gang across the host and two leaves, one leaf failing while its members are Pending
//! there: a Job of 6 whose gang (minCount 6) needs the room of the host (2 CPUs), leaf
//! `east` (2) and leaf `west` (2, no scheduler: its copies stay Pending). Placed whole;
//! then west's API server is frozen (SIGSTOP: it stops answering). The gang must be taken
//! back whole and placed again — all 6 Running on the host (given room meanwhile) and
//! east, none left on west — and never stay half running: after the take-back (which
//! evicts the members one by one within about a second) no sample may show members
//! Running while others are bound to west. Judged from the host pods' nodeName and phase,
//! sampled every second, and from the host's audit log (the members' bindings).
//! West's members stay Terminating while it is frozen (at most one copy of each, as pods
//! on an unreachable node), so they count as no longer the gang's; once west answers
//! again their copies and they must be gone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, audit, objects, wait};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
const GATES: &str = "--feature-gates=GenericWorkload=true,\
    TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true";
/// How long after the freeze the gang must run whole again: the 120 s Pending timeout,
/// the take-back, the Job's replacements and their placement.
const SETTLE: Duration = Duration::from_secs(200);
/// The take-back evicts the other members one by one: samples this soon after the first
/// deletion may catch it halfway.
const TAKE_BACK_MOMENT: Duration = Duration::from_secs(5);

/// Each member: (phase, node), deleted or not.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    node: Option<String>,
    phase: String,
    deleting: bool,
}

async fn members(pods: &Api<Pod>) -> anyhow::Result<BTreeMap<String, Member>> {
    Ok(pods
        .list(&ListParams::default().labels("gang=train"))
        .await?
        .items
        .into_iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let m = Member {
                node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
                phase: p.status.and_then(|s| s.phase).unwrap_or_default(),
                deleting: p.metadata.deletion_timestamp.is_some(),
            };
            (name, m)
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gang_over_host_and_two_leaves_is_taken_back_whole_when_a_leaf_fails()
-> anyhow::Result<()> {
    let no_scheduler = ControlPlaneOptions {
        with_controller_manager: true,
        with_scheduler: false,
        simulate_kubelets: true,
    };
    let (host, east, west) = tokio::try_join!(
        ControlPlane::start_with_args(
            "gl-host",
            ControlPlaneOptions::full(),
            &[GATES, "--audit-log", "audit.log"]
        ),
        ControlPlane::start_with_args("gl-east", ControlPlaneOptions::full(), &[GATES]),
        ControlPlane::start_with_args("gl-west", no_scheduler, &[GATES]),
    )?;
    for (cp, node) in [(&host, "host-a"), (&east, "east-1"), (&west, "west-1")] {
        objects::ready_node(
            &cp.client,
            node,
            "2",
            "16Gi",
            json!({"kubernetes.io/hostname": node}),
        )
        .await?;
    }
    objects::join_as_join_does(&host.client, &east, "east", json!({})).await?;
    objects::join_as_join_does(&host.client, &west, "west", json!({})).await?;
    let agent = Agent::start_with(&host.kubeconfig, "mcsched", host.dir(), "gl", &[])?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.client.clone());
    for n in ["mcsched-east", "mcsched-west"] {
        objects::wait_ready(&nodes, n, "True", TIMEOUT)
            .await
            .map_err(|e| e.context(agent.logs()))?;
    }
    // Each member taken back counts as a failure of the Job, and the Job controller holds
    // its replacements back 10 s doubled per failure since the last success: 320 s after
    // the 6 of a whole gang. Counted per index (each index failed once), 10 s.
    objects::gang_job_with(&host.client, "train", 6, json!({"backoffLimitPerIndex": 2})).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
    let placed = wait::until(TIMEOUT, "the gang bound whole, 2 per cluster", || async {
        let m = members(&pods).await?;
        let on = |n: &str| m.values().filter(|x| x.node.as_deref() == Some(n)).count();
        Ok((on("host-a") == 2 && on("mcsched-east") == 2 && on("mcsched-west") == 2).then_some(m))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    // east's copies run; west's stay Pending there.
    wait::until(TIMEOUT, "host and east members Running", || async {
        let m = members(&pods).await?;
        let running = m.values().filter(|x| x.phase == "Running").count();
        Ok((running == 4).then_some(()))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;

    west.pause();
    let frozen = Instant::now();
    // Room on the host for the gang without west.
    objects::ready_node(
        &host.client,
        "host-b",
        "2",
        "16Gi",
        json!({"kubernetes.io/hostname": "host-b"}),
    )
    .await?;
    // Whole again: all 6 running, none bound to west. A half-running sample is recorded in
    // the timeline and counted once the take-back has had its moment.
    let timeline: std::sync::Mutex<Vec<String>> = std::sync::Mutex::default();
    // When the first member was seen deleting, and the half-running samples after it.
    let taken_back: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::default();
    let half_running: std::sync::Mutex<Vec<String>> = std::sync::Mutex::default();
    let whole = wait::until(SETTLE, "the gang whole again without west", || async {
        let m = members(&pods).await?;
        let live: Vec<&Member> = m.values().filter(|x| !x.deleting).collect();
        let running = live.iter().filter(|x| x.phase == "Running").count();
        // West's members stay Terminating until west answers (at most one copy each, as
        // on an unreachable node); they are no longer the gang's, which the Job replaced.
        let on_west = live
            .iter()
            .filter(|x| x.node.as_deref() == Some("mcsched-west"))
            .count();
        let seen = format!(
            "{running} running, {on_west} on west, {} deleting",
            m.len() - live.len()
        );
        let mut t = timeline.lock().unwrap_or_else(|p| p.into_inner());
        if t.last().is_none_or(|l| !l.ends_with(&seen)) {
            t.push(format!("{:.0}s: {seen}", frozen.elapsed().as_secs_f64()));
        }
        drop(t);
        let mut began = taken_back.lock().unwrap_or_else(|p| p.into_inner());
        if began.is_none() && m.len() > live.len() {
            *began = Some(Instant::now());
        }
        if let Some(at) = *began
            && at.elapsed() > TAKE_BACK_MOMENT
            && running > 0
            && on_west > 0
        {
            half_running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{:.0}s: {seen}", frozen.elapsed().as_secs_f64()));
        }
        drop(began);
        Ok((running == 6 && on_west == 0).then_some((running, frozen.elapsed())))
    })
    .await;
    west.resume();
    // Once west answers, its copies go, and with them the Terminating host pods.
    let west_pods: Api<Pod> = Api::namespaced(west.client.clone(), "default");
    let cleaned = wait::until(
        TIMEOUT,
        "west's copies and their host pods gone",
        || async {
            let host_left = members(&pods)
                .await?
                .into_values()
                .filter(|x| x.node.as_deref() == Some("mcsched-west"))
                .count();
            let copies = west_pods.list(&ListParams::default()).await?.items.len();
            Ok((host_left == 0 && copies == 0).then_some(()))
        },
    )
    .await;
    let timeline = timeline.into_inner().unwrap_or_else(|p| p.into_inner());
    let bindings = audit::bindings(&audit::pod_requests(&host.data_dir().join("audit.log"))?);
    let twice: Vec<&String> = bindings
        .iter()
        .filter(|(_, (ok, _))| *ok > 1)
        .map(|(k, _)| k)
        .collect();
    assert!(twice.is_empty(), "members bound twice: {twice:?}");
    let (running, after) = whole.map_err(|e| {
        e.context(format!(
            "first placed {placed:?}; after the freeze: {timeline:?}\n{}",
            agent
                .logs()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        ))
    })?;
    let half_running = half_running.into_inner().unwrap_or_else(|p| p.into_inner());
    assert!(
        half_running.is_empty(),
        "half running after the take-back: {half_running:?}"
    );
    cleaned.map_err(|e| e.context(agent.logs()))?;
    println!(
        "gang over host and two leaves: placed 2/2/2, west frozen; whole again ({running} running) after {:.0} s: {timeline:?}",
        after.as_secs_f64()
    );
    Ok(())
}
