//! The live cycle against kube-scheduler's, above 100 nodes: the sampled search
//! (`numFeasibleNodesToFind` from percentageOfNodesToScore) and the rotating start
//! (`nextStartNodeIndex`), which the plugin-by-plugin comparison (differential.rs, every
//! node evaluated) never reaches.
//!
//! Each case is a generated cluster of 150 to 499 nodes with pods on them, an incoming pod,
//! a percentageOfNodesToScore (kube's adaptive default among them) and a start index. Both
//! engines run in-process on the same cluster, nodes added in the same order: mcsched's
//! scheduling algorithm (`schedule_pod`, what the live cycle calls, without `record_all`)
//! on the agent's cache, and kube-scheduler v1.37's `Scheduler.SchedulePod` on its own
//! cache (`controlplane live-oracle`, tests/controlplane/liveoracle.go), each with its
//! start index set to the case's. The pod is scheduled three cycles in a row without
//! binding, each cycle starting where the one before left the index, and every cycle must
//! agree on: the start index, whether the pod fits, the nodes Filter examined, the
//! feasible nodes it found, each one's total score, mcsched's node among kube's best, and
//! the index the next cycle starts from. Filter runs kube's way with one worker (its
//! parallel search examines a set of nodes that depends on its goroutines' timing).
//!
//! The nodes lie in one to three zones: both engines list them interleaved zone by zone
//! (kube's node tree), so a start index names the same node on both sides only when that
//! order agrees (topology spread and pod affinity use a rack label). PreFilter never
//! narrows the nodes down here: kube walks such a subset in a map's order.
//!
//! MCSCHED_DIFF_LIVE_CASES (default 50, `make differential` 100) cases of the regression
//! seed and as many of a fresh one (printed); MCSCHED_DIFF_SEED runs one seed, MCSCHED_DIFF_CASE one case of it.
//! Enough cycles must have stopped early (sampled) and found rejected nodes beyond the
//! last feasible one it kept, or the comparison proves nothing about sampling.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use mcsched_agent::scheduler::schedule_pod;
use mcsched_engine::cache::Cache;
use mcsched_engine::config_bridge::default_spec;
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::framework::{CycleState, Framework};
use mcsched_engine::plugins::default_registry;
use mcsched_engine::snapshot::PodInfo;
use serde::Deserialize;
use serde_json::{Value, json};

const REGRESSION_SEED: u64 = 20261123;
const CASES: usize = 50;
const CYCLES: usize = 3;
/// kube's adaptive default (0) among them; 100: every node, the search never sampled.
const PERCENTAGES: &[u32] = &[0, 0, 0, 5, 10, 20, 30, 100];

/// splitmix64, as differential.rs.
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
    seed: u64,
    id: usize,
    nodes: Vec<Value>,
    pods: Vec<Value>,
    pod: Value,
    percentage: u32,
    start: usize,
}

const RACKS: &[&str] = &["r0", "r1", "r2", "r3"];
const RACK: &str = "diff.mcsched.io/rack";
const POOLS: &[&str] = &["a", "b", "c"];
const APPS: &[&str] = &["web", "db", "incoming"];

fn generate(seed: u64, id: usize) -> Case {
    let mut rng = Rng(seed ^ (id as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    rng.next();
    // At least 100 nodes are searched for: sampling needs more feasible ones.
    let n_nodes = 150 + rng.below(350) as usize;
    // How crowded the cluster is: from mostly free to mostly full.
    let fill = 10 + rng.below(70);
    let taint_percent = rng.below(25);
    let zones = &["z1", "z2", "z3"][..1 + rng.below(3) as usize];
    let mut nodes = Vec::new();
    for i in 0..n_nodes {
        let name = format!("n{i}");
        let cpu = 2 + rng.below(7);
        let mut taints = Vec::new();
        if rng.chance(taint_percent) {
            taints.push(json!({"key": "dedicated", "value": "true",
                               "effect": rng.pick(&["NoSchedule", "PreferNoSchedule"])}));
        }
        nodes.push(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": rng.pick(zones),
                RACK: rng.pick(RACKS),
                "pool": rng.pick(POOLS),
            }},
            "spec": {"taints": taints, "unschedulable": rng.chance(4)},
            "status": {
                "capacity": {"cpu": cpu.to_string(), "memory": "16Gi", "pods": "20"},
                "allocatable": {"cpu": cpu.to_string(), "memory": "16Gi", "pods": "20"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }));
    }
    let mut pods = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let cpu_milli = n["status"]["allocatable"]["cpu"]
            .as_str()
            .and_then(|c| c.parse::<u64>().ok())
            .unwrap_or(1)
            * 1000;
        // Fill the node to about `fill` percent, give or take.
        let mut used = 0;
        let target = cpu_milli * (fill + rng.below(30)) / 120;
        let mut j = 0;
        while used + 250 <= target {
            let req = 250 * (1 + rng.below(4));
            used += req;
            let name = format!("e{i}-{j}");
            j += 1;
            pods.push(json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                             "labels": {"app": rng.pick(APPS)}},
                "spec": {"nodeName": n["metadata"]["name"], "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "c", "image": "pause",
                                         "resources": {"requests": {"cpu": format!("{req}m"), "memory": "256Mi"}}}]},
            }));
        }
    }
    let mut spec = json!({"containers": [{"name": "c", "image": "pause",
        "resources": {"requests": {"cpu": format!("{}m", 250 * (1 + rng.below(12))), "memory": "512Mi"}}}]});
    if rng.chance(50) {
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    }
    let mut affinity = json!({});
    if rng.chance(30) {
        // matchExpressions only: a metadata.name pin would let PreFilter narrow the nodes.
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "pool", "operator": "In", "values": [rng.pick(POOLS)]}]}]});
    }
    if rng.chance(40) {
        affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json!([{
            "weight": 1 + rng.below(100),
            "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": [rng.pick(POOLS)]}]}}]);
    }
    let term = |rng: &mut Rng| {
        json!({"labelSelector": {"matchLabels": {"app": rng.pick(APPS)}},
               "topologyKey": rng.pick(&["kubernetes.io/hostname", RACK])})
    };
    if rng.chance(20) {
        affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!([{"labelSelector": {"matchLabels": {"app": rng.pick(APPS)}},
                    "topologyKey": "kubernetes.io/hostname"}]);
    }
    if rng.chance(35) {
        let kind = *rng.pick(&["podAffinity", "podAntiAffinity"]);
        affinity[kind]["preferredDuringSchedulingIgnoredDuringExecution"] =
            json!([{"weight": 1 + rng.below(100), "podAffinityTerm": term(&mut rng)}]);
    }
    spec["affinity"] = affinity;
    if rng.chance(40) {
        spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 1 + rng.below(3),
            "topologyKey": rng.pick(&["kubernetes.io/hostname", RACK]),
            "whenUnsatisfiable": rng.pick(&["DoNotSchedule", "ScheduleAnyway"]),
            "labelSelector": {"matchLabels": {"app": rng.pick(APPS)}},
        }]);
    }
    let pod = json!({
        "metadata": {"name": "incoming", "namespace": "default", "uid": "uid-incoming",
                     "labels": {"app": "incoming"}},
        "spec": spec,
    });
    Case {
        seed,
        id,
        percentage: *rng.pick(PERCENTAGES),
        start: rng.below(n_nodes as u64) as usize,
        nodes,
        pods,
        pod,
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeCycle {
    start_index: usize,
    next_start_index: usize,
    unschedulable: bool,
    #[serde(default)]
    evaluated_nodes: usize,
    #[serde(default)]
    feasible: Vec<String>,
    #[serde(default)]
    totals: BTreeMap<String, i64>,
    #[serde(default)]
    best: Vec<String>,
    #[serde(default)]
    rejected_after_last: usize,
}

#[derive(Debug, Deserialize)]
struct KubeAnswer {
    #[serde(default)]
    cycles: Vec<KubeCycle>,
    #[serde(default)]
    error: Option<String>,
}

/// One mcsched cycle, as the comparison needs it.
#[derive(Debug)]
struct OurCycle {
    start_index: usize,
    next_start_index: usize,
    unschedulable: bool,
    evaluated_nodes: usize,
    feasible: Vec<String>,
    totals: BTreeMap<String, i64>,
    chosen: Option<String>,
}

fn ours(case: &Case) -> anyhow::Result<Vec<OurCycle>> {
    let mut spec = default_spec("default-scheduler").map_err(|e| anyhow::anyhow!("{e}"))?;
    spec.percentage_of_nodes_to_score = Some(case.percentage);
    let fw = Framework::new(&spec, &default_registry(), 2).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut cache = Cache::new();
    for n in &case.nodes {
        cache.apply_node(Arc::new(serde_json::from_value::<Node>(n.clone())?));
    }
    for p in &case.pods {
        cache.apply_pod(Arc::new(serde_json::from_value::<Pod>(p.clone())?));
    }
    let pod = PodInfo::new(Arc::new(serde_json::from_value::<Pod>(case.pod.clone())?));
    fw.set_next_start_node_index(case.start);
    let mut cycles = Vec::new();
    for _ in 0..CYCLES {
        let snapshot = cache.snapshot();
        let start_index = fw.next_start_node_index();
        let mut state = CycleState::new();
        let mut record = CycleRecord::default();
        let result = futures::executor::block_on(schedule_pod(
            &fw,
            &[],
            &mut state,
            &pod,
            &snapshot,
            &mut record,
            false,
        ));
        let feasible: Vec<String> = record.feasible.iter().map(|n| n.name.to_string()).collect();
        let totals = feasible
            .iter()
            .cloned()
            .zip(record.totals.iter().copied())
            .collect();
        cycles.push(OurCycle {
            start_index,
            next_start_index: fw.next_start_node_index(),
            unschedulable: result.is_err(),
            evaluated_nodes: record.num_evaluated,
            feasible,
            totals,
            chosen: result.ok().map(|r| r.node),
        });
    }
    Ok(cycles)
}

/// kube-scheduler's side: `controlplane live-oracle`, one request per line.
struct LiveOracle {
    child: std::process::Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl LiveOracle {
    fn start() -> anyhow::Result<Self> {
        let bin = mcsched_e2e::controlplane::binary();
        let mut child = Command::new(&bin)
            .arg("live-oracle")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {} live-oracle", bin.display()))?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        Ok(LiveOracle { child, stdout })
    }

    fn ask(&mut self, case: &Case) -> anyhow::Result<Vec<KubeCycle>> {
        let request = json!({"nodes": case.nodes, "pods": case.pods, "pod": case.pod,
            "percentageOfNodesToScore": case.percentage, "startIndex": case.start,
            "cycles": CYCLES});
        let stdin = self.child.stdin.as_mut().context("no stdin")?;
        serde_json::to_writer(&mut *stdin, &request)?;
        stdin.write_all(b"\n")?;
        stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("the live oracle exited");
        }
        let answer: KubeAnswer =
            serde_json::from_str(&line).with_context(|| format!("live oracle: {line}"))?;
        if let Some(e) = answer.error {
            bail!("live oracle: {e}");
        }
        Ok(answer.cycles)
    }
}

impl Drop for LiveOracle {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// What one case's cycles showed.
#[derive(Default)]
struct Seen {
    cycles: usize,
    /// Cycles whose search stopped before the last node.
    sampled: usize,
    /// Sampled cycles that examined rejected nodes after the last feasible node kept.
    rejected_beyond: usize,
    unschedulable: usize,
}

/// Every difference between the two sides' cycles.
fn compare(kube: &[KubeCycle], ours: &[OurCycle], n_nodes: usize, seen: &mut Seen) -> Vec<String> {
    let mut out = Vec::new();
    if kube.len() != ours.len() {
        out.push(format!(
            "cycles: kube-scheduler {}, mcsched {}",
            kube.len(),
            ours.len()
        ));
    }
    for (i, (k, o)) in kube.iter().zip(ours).enumerate() {
        seen.cycles += 1;
        seen.unschedulable += usize::from(k.unschedulable);
        if !k.unschedulable && k.evaluated_nodes < n_nodes {
            seen.sampled += 1;
            seen.rejected_beyond += usize::from(k.rejected_after_last > 0);
        }
        let mut differ = |what: String| out.push(format!("cycle {i}: {what}"));
        if k.start_index != o.start_index {
            differ(format!(
                "start index: kube-scheduler {}, mcsched {}",
                k.start_index, o.start_index
            ));
        }
        if k.unschedulable != o.unschedulable {
            differ(format!(
                "unschedulable: kube-scheduler {}, mcsched {}",
                k.unschedulable, o.unschedulable
            ));
            continue;
        }
        if !k.unschedulable && k.evaluated_nodes != o.evaluated_nodes {
            differ(format!(
                "nodes evaluated: kube-scheduler {}, mcsched {}",
                k.evaluated_nodes, o.evaluated_nodes
            ));
        }
        let (kf, of): (BTreeSet<&String>, BTreeSet<&String>) =
            (k.feasible.iter().collect(), o.feasible.iter().collect());
        if kf != of {
            let (theirs, mine): (Vec<_>, Vec<_>) =
                (kf.difference(&of).collect(), of.difference(&kf).collect());
            differ(format!(
                "feasible nodes found: {} only by kube-scheduler {:?}, {} only by mcsched {:?}",
                theirs.len(),
                &theirs[..theirs.len().min(8)],
                mine.len(),
                &mine[..mine.len().min(8)]
            ));
        } else if k.feasible.len() > 1 && k.totals != o.totals {
            let diff: Vec<String> = k
                .totals
                .iter()
                .filter(|(n, t)| o.totals.get(*n) != Some(t))
                .map(|(n, t)| format!("{n}: kube {t}, mcsched {:?}", o.totals.get(n)))
                .take(5)
                .collect();
            differ(format!("total scores: {}", diff.join("; ")));
        }
        if let Some(chosen) = &o.chosen
            && !k.best.contains(chosen)
        {
            differ(format!(
                "mcsched chose {chosen}; kube-scheduler chooses among {:?}",
                k.best
            ));
        }
        if k.next_start_index != o.next_start_index {
            differ(format!(
                "next start index: kube-scheduler {}, mcsched {}",
                k.next_start_index, o.next_start_index
            ));
        }
    }
    out
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    Rng(nanos ^ u64::from(std::process::id())).next() >> 32
}

#[test]
fn live_cycle_samples_and_rotates_as_kube_scheduler_does() -> anyhow::Result<()> {
    let per_seed: usize = env_number("MCSCHED_DIFF_LIVE_CASES").unwrap_or(CASES);
    let only: Option<usize> = env_number("MCSCHED_DIFF_CASE");
    let seeds = match env_number::<u64>("MCSCHED_DIFF_SEED") {
        Some(seed) => vec![seed],
        None => vec![REGRESSION_SEED, fresh_seed()],
    };
    println!("differential (live): seeds {seeds:?}, {per_seed} cases each");
    let started = std::time::Instant::now();
    let mut oracle = LiveOracle::start()?;
    let mut seen = Seen::default();
    let mut disagreements = Vec::new();
    let mut cases = 0;
    for &seed in &seeds {
        let ids: Vec<usize> = match only {
            Some(id) => vec![id],
            None => (0..per_seed).collect(),
        };
        for id in ids {
            let case = generate(seed, id);
            let kube = oracle
                .ask(&case)
                .with_context(|| format!("case {id} of seed {seed}"))?;
            let ours = ours(&case).with_context(|| format!("case {id} of seed {seed}"))?;
            cases += 1;
            let differences = compare(&kube, &ours, case.nodes.len(), &mut seen);
            if !differences.is_empty() {
                disagreements.push(format!(
                    "case {} of seed {} ({} nodes, percentageOfNodesToScore {}, start {}); \
                     again alone: MCSCHED_DIFF_SEED={} MCSCHED_DIFF_CASE={} cargo test -p \
                     mcsched-e2e --test differential_live\n    {}\n  pod: {}",
                    case.id,
                    case.seed,
                    case.nodes.len(),
                    case.percentage,
                    case.start,
                    case.seed,
                    case.id,
                    differences.join("\n    "),
                    serde_json::to_string(&case.pod["spec"]).unwrap_or_default()
                ));
            }
        }
    }
    println!(
        "differential (live): {cases} cases of seeds {seeds:?}, {} cycles ({} sampled, {} of \
         them with rejected nodes examined beyond the last feasible one kept, {} \
         unschedulable), {} disagreements, {:.0}s",
        seen.cycles,
        seen.sampled,
        seen.rejected_beyond,
        seen.unschedulable,
        disagreements.len(),
        started.elapsed().as_secs_f64()
    );
    for d in disagreements.iter().take(20) {
        println!("{d}");
    }
    assert!(
        disagreements.is_empty(),
        "{} of {cases} cases disagree with kube-scheduler's live cycle",
        disagreements.len()
    );
    if only.is_none() {
        // The cases must exercise the sampled search, not only the whole-cluster one.
        assert!(
            seen.sampled * 4 >= seen.cycles && seen.rejected_beyond * 20 >= seen.cycles,
            "too few cycles sampled ({}) or examined rejected nodes beyond the feasible ones \
             kept ({}) of {}",
            seen.sampled,
            seen.rejected_beyond,
            seen.cycles
        );
    }
    Ok(())
}
