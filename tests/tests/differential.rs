//! Differential test: on one real API server, the real kube-scheduler and mcsched schedule
//! the same generated pods over the same generated cluster states; both must agree on
//! schedulable vs unschedulable, and mcsched's node must be one kube-scheduler also finds
//! feasible. Cases are isolated: each has its own namespace and its own labelled nodes,
//! and every pod is pinned to its case's nodes by a required node-affinity expression.
//!
//! MCSCHED_DIFF_CASES (default 2000) and MCSCHED_DIFF_SEED choose the run.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::objects::create_node;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions};
use serde_json::{Value, json};

const CONCURRENCY: usize = 40;
const OUTCOME_TIMEOUT: Duration = Duration::from_secs(30);

/// splitmix64: small, seedable, good enough to generate cases.
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
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

struct Case {
    id: usize,
    nodes: Vec<Value>,
    existing: Vec<Value>,
    pod: Value,
}

const ZONES: &[&str] = &["a", "b", "c"];
const TOPOLOGY_KEYS: &[&str] = &["kubernetes.io/hostname", "topology.kubernetes.io/zone"];
const TAINT_KEYS: &[&str] = &["dedicated", "gpu", "spot"];
const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

fn quantity_cpu(rng: &mut Rng, max_milli: u64) -> String {
    format!("{}m", 100 * (1 + rng.below(max_milli / 100)))
}

fn generate(id: usize, rng: &mut Rng) -> Case {
    let case_label = id.to_string();
    let n_nodes = 2 + rng.below(3) as usize;
    let mut nodes = Vec::new();
    for i in 0..n_nodes {
        let name = format!("diff-{id}-n{i}");
        let zone = *rng.pick(ZONES);
        let mut taints = Vec::new();
        if rng.chance(25) {
            taints.push(
                json!({"key": rng.pick(TAINT_KEYS), "value": "true", "effect": rng.pick(EFFECTS)}),
            );
        }
        let cpu = 1 + rng.below(4);
        let mem_gi = 1 + rng.below(8);
        let pods = 2 + rng.below(6);
        let mut labels = json!({
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": zone,
            "diff-case": case_label,
        });
        if rng.chance(40) {
            labels["disk"] = json!(if rng.chance(50) { "ssd" } else { "hdd" });
        }
        nodes.push(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints, "unschedulable": rng.chance(10)},
            "status": {
                "capacity": {"cpu": cpu.to_string(), "memory": format!("{mem_gi}Gi"), "pods": pods.to_string()},
                "allocatable": {"cpu": cpu.to_string(), "memory": format!("{mem_gi}Gi"), "pods": pods.to_string()},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }));
    }
    let mut existing = Vec::new();
    for j in 0..rng.below(5) {
        let node = nodes[rng.below(nodes.len() as u64) as usize]["metadata"]["name"].clone();
        let mut container = json!({"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": quantity_cpu(rng, 1500), "memory": format!("{}Mi", 128 * (1 + rng.below(8)))}}});
        if rng.chance(20) {
            container["ports"] =
                json!([{"containerPort": 80, "hostPort": 8080 + rng.below(2) as i64}]);
        }
        let mut e = json!({
            "metadata": {"name": format!("e{j}"), "labels": {"app": rng.pick(&["web", "db"])}},
            "spec": {"nodeName": node, "containers": [container],
                     "tolerations": [{"operator": "Exists"}]}
        });
        if rng.chance(10) {
            // The symmetric check: an existing pod that keeps the incoming one away.
            e["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "incoming"}}, "topologyKey": rng.pick(TOPOLOGY_KEYS)}
            ]}});
        }
        existing.push(e);
    }
    // The incoming pod.
    let mut container = json!({"name": "c", "image": "pause",
        "resources": {"requests": {"cpu": quantity_cpu(rng, 3000), "memory": format!("{}Mi", 256 * (1 + rng.below(12)))}}});
    if rng.chance(35) {
        container["ports"] = json!([{"containerPort": 80, "hostPort": 8080 + rng.below(2) as i64}]);
    }
    let mut spec = json!({"containers": [container]});
    if rng.chance(25) {
        spec["initContainers"] = json!([{"name": "init", "image": "pause",
            "resources": {"requests": {"cpu": quantity_cpu(rng, 4000)}}}]);
    }
    if rng.chance(40) {
        let key = *rng.pick(TAINT_KEYS);
        spec["tolerations"] = if rng.chance(50) {
            json!([{"key": key, "operator": "Exists"}])
        } else {
            json!([{"key": key, "operator": "Equal", "value": "true", "effect": rng.pick(EFFECTS)}])
        };
    }
    if rng.chance(20) {
        spec["nodeSelector"] = json!({"disk": if rng.chance(50) { "ssd" } else { "hdd" }});
    }
    let mut required = vec![json!({"key": "diff-case", "operator": "In", "values": [case_label]})];
    if rng.chance(30) {
        required.push(json!({"key": "topology.kubernetes.io/zone",
            "operator": if rng.chance(70) { "In" } else { "NotIn" }, "values": [rng.pick(ZONES)]}));
    }
    let mut node_affinity = json!({
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": required}]}
    });
    if rng.chance(30) {
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = json!([{
            "weight": 1 + rng.below(100),
            "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
        }]);
    }
    spec["affinity"] = json!({"nodeAffinity": node_affinity});
    let pod_term = |rng: &mut Rng| {
        json!({"labelSelector": {"matchLabels": {"app": rng.pick(&["web", "db", "incoming"])}},
               "topologyKey": rng.pick(TOPOLOGY_KEYS)})
    };
    if rng.chance(25) {
        spec["affinity"]["podAntiAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [pod_term(rng)]});
    } else if rng.chance(20) {
        spec["affinity"]["podAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [pod_term(rng)]});
    }
    if rng.chance(25) {
        let mut c = json!({
            "maxSkew": 1 + rng.below(2),
            "topologyKey": rng.pick(TOPOLOGY_KEYS),
            "whenUnsatisfiable": if rng.chance(70) { "DoNotSchedule" } else { "ScheduleAnyway" },
            "labelSelector": {"matchLabels": {"app": rng.pick(&["web", "db", "incoming"])}}
        });
        if rng.chance(20) {
            c["minDomains"] = json!(2 + rng.below(2));
            c["whenUnsatisfiable"] = json!("DoNotSchedule");
        }
        if rng.chance(20) {
            c["nodeTaintsPolicy"] = json!("Honor");
        }
        spec["topologySpreadConstraints"] = json!([c]);
    }
    if rng.chance(15) {
        spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
            json!([{"weight": 1 + rng.below(100), "podAffinityTerm": pod_term(rng)}]);
    }
    Case {
        id,
        nodes,
        existing,
        pod: json!({"metadata": {"name": "incoming", "labels": {"app": "incoming"}}, "spec": spec}),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Bound(String),
    Unschedulable(String),
}

/// Creates the pod for `scheduler`, waits for a binding or PodScheduled=False, deletes it.
async fn attempt(
    pods: &Api<Pod>,
    mut pod: Value,
    scheduler: &str,
    name: &str,
) -> anyhow::Result<Outcome> {
    pod["metadata"]["name"] = json!(name);
    pod["spec"]["schedulerName"] = json!(scheduler);
    let p: Pod = serde_json::from_value(pod)?;
    pods.create(&PostParams::default(), &p).await?;
    let deadline = tokio::time::Instant::now() + OUTCOME_TIMEOUT;
    let outcome = loop {
        let p = pods.get(name).await?;
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            break Outcome::Bound(n);
        }
        let cond = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            })
            .and_then(|c| c.message.clone());
        if let Some(m) = cond {
            break Outcome::Unschedulable(m);
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("{scheduler} decided nothing about {name} within {OUTCOME_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    pods.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    Ok(outcome)
}

/// The disagreement if any, and whether kube-scheduler bound the pod.
async fn run_case(client: Client, case: Case) -> anyhow::Result<(Option<String>, bool)> {
    let ns_name = format!("diff-{}", case.id);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns_name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    for n in &case.nodes {
        create_node(&client, n.clone()).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns_name);
    for e in &case.existing {
        let p: Pod = serde_json::from_value(e.clone())?;
        pods.create(&PostParams::default(), &p).await?;
    }
    let kube = attempt(&pods, case.pod.clone(), "default-scheduler", "kube").await?;
    let ours = attempt(&pods, case.pod.clone(), "mcsched", "ours").await?;
    let mut disagreement = match (&kube, &ours) {
        (Outcome::Bound(_), Outcome::Unschedulable(m)) => {
            Some(format!("kube-scheduler bound it; mcsched: {m}"))
        }
        (Outcome::Unschedulable(m), Outcome::Bound(n)) => {
            Some(format!("mcsched bound it to {n}; kube-scheduler: {m}"))
        }
        _ => None,
    };
    if let (None, Outcome::Bound(node)) = (&disagreement, &ours) {
        // Is mcsched's node feasible for kube-scheduler? Pin the pod there and ask it.
        let mut pinned = case.pod.clone();
        pinned["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"] =
            json!([{"key": "metadata.name", "operator": "In", "values": [node]}]);
        if let Outcome::Unschedulable(m) =
            attempt(&pods, pinned, "default-scheduler", "check").await?
        {
            disagreement = Some(format!(
                "mcsched chose {node}, which kube-scheduler finds infeasible: {m}"
            ));
        }
    }
    // Clean up: nodes are cluster-wide, the namespace takes the pods.
    for n in &case.nodes {
        let name = n["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let _ = nodes.delete(&name, &DeleteParams::default()).await;
    }
    let _ = Api::<Namespace>::all(client)
        .delete(&ns_name, &DeleteParams::default())
        .await;
    let kube_bound = matches!(kube, Outcome::Bound(_));
    Ok((
        disagreement.map(|d| {
            format!(
                "case {}: {d}\n  nodes: {}\n  existing: {}\n  pod: {}",
                case.id,
                serde_json::to_string(&case.nodes).unwrap_or_default(),
                serde_json::to_string(&case.existing).unwrap_or_default(),
                serde_json::to_string(&case.pod["spec"]).unwrap_or_default()
            )
        }),
        kube_bound,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcsched_agrees_with_kube_scheduler() -> anyhow::Result<()> {
    let cases: usize = std::env::var("MCSCHED_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let seed: u64 = std::env::var("MCSCHED_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261123);
    let cp = ControlPlane::start(
        "diff",
        ControlPlaneOptions {
            with_scheduler: true,
            ..Default::default()
        },
    )
    .await?;
    let _agent = Agent::start_with(
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "diff",
        &["--leader-elect=false"],
    )?;
    let mut rng = Rng(seed);
    let generated: Vec<Case> = (0..cases).map(|i| generate(i, &mut rng)).collect();
    let started = std::time::Instant::now();
    let results: Vec<anyhow::Result<(Option<String>, bool)>> = futures::stream::iter(generated)
        .map(|c| run_case(cp.client.clone(), c))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut disagreements = Vec::new();
    let mut failures = Vec::new();
    let mut bound = 0;
    for r in results {
        match r {
            Ok((d, kube_bound)) => {
                bound += usize::from(kube_bound);
                disagreements.extend(d);
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    println!(
        "differential: {cases} cases ({bound} schedulable, {} unschedulable for kube-scheduler), {} disagreements (seed {seed}), {:.0}s",
        cases - bound,
        disagreements.len(),
        started.elapsed().as_secs_f64()
    );
    for d in &disagreements {
        println!("{d}");
    }
    // Both kinds of outcome must be well represented, or the comparison proves little.
    assert!(
        bound * 10 >= cases && (cases - bound) * 10 >= cases,
        "unbalanced cases: {bound} of {cases} schedulable"
    );
    assert!(
        failures.is_empty(),
        "{} cases failed to run:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements",
        disagreements.len()
    );
    Ok(())
}

/// The FailedScheduling text users read must be kube-scheduler's, word for word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_scheduling_messages_match_kube_scheduler_verbatim() -> anyhow::Result<()> {
    let cp = ControlPlane::start(
        "messages",
        ControlPlaneOptions {
            with_scheduler: true,
            ..Default::default()
        },
    )
    .await?;
    let _agent = Agent::start_with(
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "messages",
        &["--leader-elect=false"],
    )?;
    let node_specs = [
        json!({"metadata": {"name": "small", "labels": {"disk": "hdd"}}, "spec": {},
               "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}}),
        json!({"metadata": {"name": "tainted", "labels": {"disk": "ssd"}},
               "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
               "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "10"}}}),
        json!({"metadata": {"name": "cordoned", "labels": {"disk": "ssd"}}, "spec": {"unschedulable": true},
               "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "10"}}}),
        json!({"metadata": {"name": "full", "labels": {"disk": "hdd"}}, "spec": {},
               "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "0"}}}),
    ];
    for n in node_specs {
        let mut n = n;
        n["status"]["capacity"] = n["status"]["allocatable"].clone();
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        create_node(&cp.client, n).await?;
    }
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), "default");
    let cases = [
        json!({"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "4"}}}]}),
        json!({"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "20", "memory": "32Gi"}}}]}),
        json!({"nodeSelector": {"disk": "nvme"}, "containers": [{"name": "c", "image": "pause"}]}),
        json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}],
               "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "2"}}}],
               "nodeSelector": {"disk": "hdd"}}),
    ];
    for (i, spec) in cases.into_iter().enumerate() {
        let pod = json!({"metadata": {"name": "x"}, "spec": spec});
        // A scheduler whose watch lags behind (a loaded machine, the other test running)
        // may judge an older cluster state once; the steady state must agree.
        let mut last = None;
        for round in 0..3 {
            let kube = attempt(
                &pods,
                pod.clone(),
                "default-scheduler",
                &format!("kube-{i}-{round}"),
            )
            .await?;
            let ours = attempt(&pods, pod.clone(), "mcsched", &format!("ours-{i}-{round}")).await?;
            assert!(
                matches!(kube, Outcome::Unschedulable(_)),
                "case {i}: {kube:?}"
            );
            if ours == kube {
                last = None;
                break;
            }
            last = Some((kube, ours));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if let Some((kube, ours)) = last {
            panic!("case {i}: kube-scheduler said {kube:?}, mcsched said {ours:?}");
        }
    }
    Ok(())
}
