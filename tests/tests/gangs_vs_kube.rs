//! PodGroups scheduled by mcsched and by kube-scheduler v1.36, side by side: the same
//! generated cases in two control planes with the GenericWorkload, GangScheduling and
//! TopologyAwareWorkloadScheduling gates on, one scheduled by kube-scheduler (in-process,
//! profile `default-scheduler`), the other by mcsched-agent. Each case is its own nodes
//! (one to three, labelled with the case and a zone) and one PodGroup: a gang of
//! `minCount` 2 to 6 with one pod fewer, as many, or one more; now and then a basic group,
//! or a gang kept in one zone (`topology: [{key: topology.kubernetes.io/zone}]`); each pod
//! asks for 1 or 2 CPUs and selects its case's nodes. Once every group is settled both
//! must agree, case by case, on how many members are bound, on the PodGroupScheduled
//! condition (status, reason, message), and on the PodScheduled conditions (reason and
//! message) of the members left unbound, as a multiset: which of equal members kube
//! tries first is its queue's timing. For a gang kept in one zone the numbers in those
//! messages are not compared either: kube tries the zones in a Go map's order and reports
//! the first one's.
//!
//! MCSCHED_GANG_CASES (default 16) cases of seed MCSCHED_GANG_SEED (default fixed).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1alpha2::PodGroup;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use serde_json::json;

const GATES: &str =
    "--feature-gates=GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true";
const SEED: u64 = 20261126;
const ZONE: &str = "topology.kubernetes.io/zone";
const TIMEOUT: Duration = Duration::from_secs(120);

/// splitmix64, as the other differential tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
struct Case {
    name: String,
    /// CPUs of each node; node i is in zone `z{i % 2}`.
    nodes: Vec<u32>,
    /// None: a basic group.
    min_count: Option<u32>,
    pods: u32,
    cpu: u32,
    in_one_zone: bool,
}

fn cases(seed: u64, count: usize) -> Vec<Case> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|i| {
            let nodes = (0..1 + rng.below(3))
                .map(|_| 2 + rng.below(3) as u32)
                .collect();
            let basic = rng.below(8) == 0;
            let min = 2 + rng.below(5) as u32;
            let pods = min + rng.below(3) as u32 - 1;
            Case {
                name: format!("c{i}"),
                nodes,
                min_count: (!basic).then_some(min),
                pods,
                cpu: 1 + rng.below(2) as u32,
                in_one_zone: !basic && rng.below(3) == 0,
            }
        })
        .collect()
}

async fn create_nodes(client: &Client, case: &Case) -> anyhow::Result<()> {
    for (i, cpu) in case.nodes.iter().enumerate() {
        let name = format!("{}-n{i}", case.name);
        mcsched_e2e::objects::ready_node(
            client,
            &name,
            &cpu.to_string(),
            "32Gi",
            json!({"kubernetes.io/hostname": name, "case": case.name, ZONE: format!("z{}", i % 2)}),
        )
        .await?;
    }
    Ok(())
}

async fn create(client: &Client, case: &Case, scheduler: &str) -> anyhow::Result<()> {
    let policy = match case.min_count {
        Some(m) => json!({"gang": {"minCount": m}}),
        None => json!({"basic": {}}),
    };
    let constraints = if case.in_one_zone {
        json!({"topology": [{"key": ZONE}]})
    } else {
        json!(null)
    };
    let group: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": case.name, "namespace": "default"},
        "spec": {"schedulingPolicy": policy, "schedulingConstraints": constraints}
    }))?;
    Api::<PodGroup>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &group)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for p in 0..case.pods {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{}-p{p}", case.name), "labels": {"case": case.name}},
            "spec": {
                "schedulerName": scheduler,
                "schedulingGroup": {"podGroupName": case.name},
                "nodeSelector": {"case": case.name},
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": case.cpu.to_string()}}}]
            }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    Ok(())
}

/// What a case came to in one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    bound: usize,
    /// PodGroupScheduled (status, reason, message), if set.
    group: Option<(String, String, String)>,
    /// Unbound members' PodScheduled (reason, message), sorted.
    waiting: Vec<(String, String)>,
}

async fn outcome(client: &Client, case: &Case) -> anyhow::Result<Outcome> {
    let group = Api::<PodGroup>::namespaced(client.clone(), "default")
        .get(&case.name)
        .await?
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodGroupScheduled")
        .map(|c| (c.status, c.reason, c.message));
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(&format!("case={}", case.name)))
        .await?
        .items;
    let mut bound = 0;
    let mut waiting = Vec::new();
    for p in pods {
        if p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some()
        {
            bound += 1;
            continue;
        }
        let c = p
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled");
        let (reason, message) = c
            .map(|c| (c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
            .unwrap_or_default();
        let message = if case.in_one_zone {
            without_numbers(&message)
        } else {
            message
        };
        waiting.push((reason, message));
    }
    waiting.sort();
    Ok(Outcome {
        bound,
        group,
        waiting,
    })
}

fn without_numbers(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_number = false;
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            if !in_number {
                out.push('#');
            }
            in_number = true;
        } else {
            out.push(ch);
            in_number = false;
        }
    }
    out
}

/// Settled: a group with too few members for a cycle has nothing to wait for; any other
/// has its condition, and once True, its feasible members bound.
fn settled(case: &Case, o: &Outcome) -> bool {
    if case.min_count.is_some_and(|m| case.pods < m) {
        return true;
    }
    match &o.group {
        None => false,
        Some((status, _, _)) if status == "True" => o.waiting.iter().all(|(r, _)| !r.is_empty()),
        Some(_) => {
            o.waiting.len() == case.pods as usize && o.waiting.iter().all(|(r, _)| !r.is_empty())
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mcsched_schedules_pod_groups_as_kube_scheduler_does() -> anyhow::Result<()> {
    let count = std::env::var("MCSCHED_GANG_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let seed = std::env::var("MCSCHED_GANG_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEED);
    let cases = cases(seed, count);
    let only_scheduler = ControlPlaneOptions {
        with_controller_manager: true,
        with_scheduler: false,
        simulate_kubelets: true,
    };
    let (kube, ours) = tokio::try_join!(
        ControlPlane::start_with_args("gvk-kube", ControlPlaneOptions::full(), &[GATES]),
        ControlPlane::start_with_args("gvk-mcsched", only_scheduler, &[GATES])
    )?;
    let agent = Agent::start_with(
        &ours.kubeconfig,
        "mcsched",
        ours.dir(),
        "gangs-vs-kube",
        &["--feature-gates=TopologyAwareWorkloadScheduling=true"],
    )?;
    // Every node first: both schedulers count the same nodes in their messages.
    for case in &cases {
        create_nodes(&kube.client, case).await?;
        create_nodes(&ours.client, case).await?;
    }
    let node_count: usize = cases.iter().map(|c| c.nodes.len()).sum();
    for cp in [&kube, &ours] {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cp.client.clone());
        wait::until(TIMEOUT, "every node listed", || async {
            Ok((nodes.list(&ListParams::default()).await?.items.len() >= node_count).then_some(()))
        })
        .await?;
    }
    for case in &cases {
        create(&kube.client, case, "default-scheduler").await?;
        create(&ours.client, case, "mcsched").await?;
    }
    let both = wait::until(TIMEOUT, "every case settled in both clusters", || async {
        let mut all = Vec::new();
        for case in &cases {
            let (k, m) = (
                outcome(&kube.client, case).await?,
                outcome(&ours.client, case).await?,
            );
            if !settled(case, &k) || !settled(case, &m) {
                return Ok(None);
            }
            all.push((case.clone(), k, m));
        }
        Ok(Some(all))
    })
    .await
    .map_err(|e| e.context(agent.logs()))?;
    let disagreements: Vec<String> = both
        .iter()
        .filter(|(_, k, m)| k != m)
        .map(|(case, k, m)| format!("{case:?}\n  kube-scheduler: {k:?}\n  mcsched:        {m:?}"))
        .collect();
    let scheduled = both
        .iter()
        .filter(|(_, k, _)| k.group.as_ref().is_some_and(|g| g.0 == "True"))
        .count();
    let unschedulable = both
        .iter()
        .filter(|(_, k, _)| k.group.as_ref().is_some_and(|g| g.0 == "False"))
        .count();
    println!(
        "seed {seed}: {} cases, {scheduled} groups scheduled and {unschedulable} not by kube-scheduler, {} disagreements",
        both.len(),
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree:\n{}",
        disagreements.len(),
        both.len(),
        disagreements.join("\n")
    );
    // Cases that prove something: both outcomes occur.
    assert!(
        scheduled >= 2 && unschedulable >= 2,
        "too few cases of each kind: {scheduled} scheduled, {unschedulable} not"
    );
    Ok(())
}
