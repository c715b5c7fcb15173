//! PodGroups scheduled by mcsched and by kube-scheduler v1.37, side by side: the same
//! generated cases in two control planes with the GenericWorkload and
//! TopologyAwareWorkloadScheduling gates on, one scheduled by kube-scheduler (in-process, profile
//! `default-scheduler`), the other by mcsched-agent. Each case is its own nodes (one to
//! three, labelled with the case and a zone) and one PodGroup: a gang of `minCount` 2 to 6
//! with one pod fewer, as many, or one more; now and then a basic group, or a gang kept in
//! one zone (`topology: [{key: topology.kubernetes.io/zone}]`); each pod asks for 1 or 2
//! CPUs and selects its case's nodes. Once every group is settled both must agree, case by
//! case, on how many members are bound, on the PodGroupInitiallyScheduled condition
//! (status, reason, message), and on the PodScheduled conditions (reason and message) of
//! the members left unbound, as a multiset: which of equal members kube tries first is its
//! queue's timing. A gang kept in one zone that fits in none is reported as kube tried its
//! first zone, and kube tries the zones in a Go map's order: there the numbers in the
//! messages (the members' and, since v1.37 counts members in it, the group's) are not
//! compared, both must tell members of both kinds (placed in the first zone, then turned
//! back with the group; do not fit), and mcsched's members placed must be as many as fit
//! in some zone of the case.
//!
//! A group with members bound whose condition kube wrote False from a stale informer
//! (the members agreeing) and a gang tried in another zone first agree only loosened:
//! each is counted, and more than one case in four agreeing only so fails the run.
//!
//! MCSCHED_GANG_CASES (default 16) cases of seed MCSCHED_GANG_SEED (default fixed).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, wait};
use serde_json::json;

const GATES: &str = "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true";
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
    // The group last: its members are held until it exists, then all are queued at
    // once, so neither scheduler starts a group cycle before every member is there.
    Api::<PodGroup>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &group)
        .await?;
    Ok(())
}

/// A PodScheduled condition's (reason, message).
type Condition = (String, String);

/// What a case came to in one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    bound: usize,
    /// PodGroupInitiallyScheduled (status, reason, message), if set.
    group: Option<(String, String, String)>,
    /// Unbound members' PodScheduled (reason, message), sorted.
    waiting: Vec<Condition>,
}

async fn outcome(client: &Client, case: &Case) -> anyhow::Result<Outcome> {
    let group = Api::<PodGroup>::namespaced(client.clone(), "default")
        .get(&case.name)
        .await?
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodGroupInitiallyScheduled")
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
            zone_free(&message)
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

/// A member's message as any zone tried first would word it: no numbers, and a FitError's
/// reasons in one order (kube sorts them by their counts, which differ from zone to zone).
fn zone_free(message: &str) -> String {
    let message = without_numbers(message);
    const FIT: &str = "#/# nodes are available: ";
    let Some(reasons) = message.strip_prefix(FIT).and_then(|r| r.strip_suffix('.')) else {
        return message;
    };
    let mut reasons: Vec<&str> = reasons.split(", ").collect();
    reasons.sort_unstable();
    format!("{FIT}{}.", reasons.join(", "))
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

/// How v1.37's message starts for a member placed in a gang that was not: the group's
/// message (itself "pod group is unschedulable, ...") after "pod group is unschedulable".
const WAITS_FOR_GANG: &str = "pod group is unschedulable, pod group is unschedulable";

/// How the message of a member not tried starts (the group's status as the algorithm
/// left it, numbers out), when no zone fits the gang.
const NOT_TRIED: &str = "pod group is unschedulable, #/# placements are available";

/// How two outcomes compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Equal, the group's message and (for a gang kept in one zone) the members' after
    /// `zone_free`'s normalisation: numbers out, a FitError's reasons sorted.
    Same,
    /// Equal but for a difference kube's own timing explains; counted and capped.
    Loosened(&'static str),
    Differ,
}

/// Of the cases, the share whose outcomes may agree only loosened (1 in 4).
const MAX_LOOSENED_SHARE: (usize, usize) = (1, 4);

/// Equal outcomes; for a group with bound members, one whose condition kube rewrote from
/// a stale informer; for a gang kept in one zone that fits in none, outcomes kube could
/// have reported with either zone first (see the module's comment).
fn agree(case: &Case, k: &Outcome, m: &Outcome) -> Verdict {
    if k == m {
        return Verdict::Same;
    }
    // v1.37's group message counts the members of the first zone tried: for a gang kept
    // in one zone, its numbers aside.
    let group = |o: &Outcome| {
        (o.group.as_ref()).map(|(s, r, msg)| {
            let msg = if case.in_one_zone {
                without_numbers(msg)
            } else {
                msg.clone()
            };
            (s.clone(), r.clone(), msg)
        })
    };
    if k.bound > 0 && (k.bound, &k.waiting) == (m.bound, &m.waiting) {
        if group(k) == group(m) {
            return Verdict::Same;
        }
        // A group some of whose members were bound (a gang's: at least minCount) was
        // Scheduled: kube means to keep it so (it does not regress the condition) but
        // reads that from its informer, which may not show its own patch yet when the
        // members left over are retried; then it writes False. Only that difference is
        // let through: one side True, the other False, the members agreeing.
        let statuses = [k, m].map(|o| o.group.as_ref().map(|g| g.0.as_str()));
        return match statuses {
            [Some("True"), Some("False")] | [Some("False"), Some("True")] => {
                Verdict::Loosened("group condition rewritten from a stale informer")
            }
            _ => Verdict::Differ,
        };
    }
    let no_placement = |o: &Outcome| {
        o.group.as_ref().is_some_and(|g| {
            without_numbers(&g.2)
                .starts_with("pod group is unschedulable, #/# placements are available")
        })
    };
    if !case.in_one_zone || !no_placement(k) || k.bound != m.bound || group(k) != group(m) {
        return Verdict::Differ;
    }
    // Zones of other cases' nodes count too: in one with none of this case's, none fit.
    let fits: Vec<usize> = (0..2)
        .map(|zone| {
            let per_zone: u32 = (case.nodes.iter().enumerate())
                .filter(|(i, _)| i % 2 == zone)
                .map(|(_, cpu)| cpu / case.cpu)
                .sum();
            per_zone.min(case.pods) as usize
        })
        .collect();
    let (k, m) = (split(k), split(m));
    let same = |a: &[&Condition], b: &[&Condition]| {
        (a.iter().chain(b).collect::<Vec<_>>())
            .windows(2)
            .all(|w| w[0] == w[1])
    };
    // kube's count is not checked: members a later cycle retries (some, not all) are
    // judged with whichever zone comes first then.
    let either_zone = fits.contains(&m.placed.len())
        && same(&k.placed, &m.placed)
        && same(&k.not_tried, &m.not_tried)
        // A side none of whose members was placed was judged (at least once) in a zone
        // with none of this case's nodes, where the message says only that.
        && (k.placed.is_empty() || m.placed.is_empty() || k.other == m.other);
    if either_zone {
        Verdict::Loosened("another zone tried first")
    } else {
        Verdict::Differ
    }
}

/// An outcome's waiting members by kind: placed in the first zone and turned back with
/// the group; not tried there (v1.37 stops once minCount is out of reach); the distinct
/// other conditions (not fitting).
struct Kinds<'a> {
    placed: Vec<&'a Condition>,
    not_tried: Vec<&'a Condition>,
    other: Vec<&'a Condition>,
}

fn split(o: &Outcome) -> Kinds<'_> {
    let (placed, rest): (Vec<_>, Vec<_>) =
        (o.waiting.iter()).partition(|(_, msg)| msg.starts_with(WAITS_FOR_GANG));
    let (not_tried, mut other): (Vec<_>, Vec<_>) =
        (rest.into_iter()).partition(|(_, msg)| msg.starts_with(NOT_TRIED));
    other.dedup();
    Kinds {
        placed,
        not_tried,
        other,
    }
}

/// Settled: a group with too few members for a cycle has nothing to wait for; any other
/// has its condition, and once True, its feasible members bound.
fn settled(case: &Case, o: &Outcome) -> bool {
    if case.min_count.is_some_and(|m| case.pods < m) {
        return true;
    }
    o.group.is_some() && o.waiting.iter().all(|(r, _)| !r.is_empty())
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
        &["--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"],
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
    let unsettled = std::sync::Mutex::new(String::new());
    let both = wait::until(TIMEOUT, "every case settled in both clusters", || async {
        let mut all = Vec::new();
        for case in &cases {
            let (k, m) = (
                outcome(&kube.client, case).await?,
                outcome(&ours.client, case).await?,
            );
            if !settled(case, &k) || !settled(case, &m) {
                if let Ok(mut last) = unsettled.lock() {
                    *last = format!("{case:?}\n  kube-scheduler: {k:?}\n  mcsched:        {m:?}");
                }
                return Ok(None);
            }
            all.push((case.clone(), k, m));
        }
        Ok(Some(all))
    })
    .await
    .map_err(|e| {
        let last = unsettled.lock().map(|s| s.clone()).unwrap_or_default();
        e.context(format!("{}\nstill unsettled: {last}", agent.logs()))
    })?;
    let verdicts: Vec<Verdict> = both.iter().map(|(case, k, m)| agree(case, k, m)).collect();
    let show = |(case, k, m): &(Case, Outcome, Outcome)| {
        format!("{case:?}\n  kube-scheduler: {k:?}\n  mcsched:        {m:?}")
    };
    let disagreements: Vec<String> = (both.iter().zip(&verdicts))
        .filter(|(_, v)| **v == Verdict::Differ)
        .map(|(c, _)| show(c))
        .collect();
    let loosened: Vec<String> = (both.iter().zip(&verdicts))
        .filter_map(|(c, v)| match v {
            Verdict::Loosened(why) => Some(format!("{} ({why})", c.0.name)),
            _ => None,
        })
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
        "seed {seed}: {} cases, {scheduled} groups scheduled and {unschedulable} not by kube-scheduler, {} disagreements, {} agreeing only loosened: {loosened:?}",
        both.len(),
        disagreements.len(),
        loosened.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree:\n{}",
        disagreements.len(),
        both.len(),
        disagreements.join("\n")
    );
    let (num, den) = MAX_LOOSENED_SHARE;
    assert!(
        loosened.len() * den <= both.len() * num,
        "{} of {} cases agree only loosened (at most {num} in {den}): {loosened:?}",
        loosened.len(),
        both.len()
    );
    // Cases that prove something: both outcomes occur.
    assert!(
        scheduled >= 2 && unschedulable >= 2,
        "too few cases of each kind: {scheduled} scheduled, {unschedulable} not"
    );
    Ok(())
}

/// Case c14 of a CI run: kube tried zone z1 first (room for one member), mcsched z0 (two).
#[test]
fn a_gang_that_fits_in_no_zone_agrees_with_either_zone_first() {
    let case = Case {
        name: "c14".into(),
        nodes: vec![2, 3, 2],
        min_count: Some(4),
        pods: 4,
        cpu: 2,
        in_one_zone: true,
    };
    let group = |scheduled: usize| {
        Some((
            "False".to_string(),
            "Unschedulable".to_string(),
            format!(
                "pod group is unschedulable, 0/2 placements are available, first placement \
                 status: minCount (4) cannot be satisfied: {scheduled} scheduled, 1 remaining, \
                 pod group preemption: No preemption victims found for incoming preemptor"
            ),
        ))
    };
    let filter = (
        "Unschedulable".to_string(),
        "#/# nodes are available: # Insufficient cpu.".to_string(),
    );
    let not_tried = (
        "Unschedulable".to_string(),
        "pod group is unschedulable, #/# placements are available, first placement status: \
         minCount (#) cannot be satisfied: # scheduled, # remaining"
            .to_string(),
    );
    let gang = (
        "Unschedulable".to_string(),
        format!(
            "{WAITS_FOR_GANG}, #/# placements are available, first placement status: minCount \
             (#) cannot be satisfied: # scheduled, # remaining, pod group preemption: No \
             preemption victims found for incoming preemptor"
        ),
    );
    // v1.37 stops a zone once minCount is out of reach: the members placed, the one that
    // did not fit, and the rest not tried.
    let with = |gang_members: usize| {
        let mut waiting: Vec<Condition> = (0..4)
            .map(|i| {
                if i < gang_members {
                    gang.clone()
                } else if i == gang_members {
                    filter.clone()
                } else {
                    not_tried.clone()
                }
            })
            .collect();
        waiting.sort();
        Outcome {
            bound: 0,
            group: group(gang_members),
            waiting,
        }
    };
    let zone_first = Verdict::Loosened("another zone tried first");
    assert_eq!(agree(&case, &with(1), &with(2)), zone_first);
    assert_eq!(agree(&case, &with(2), &with(1)), zone_first);
    // Seed 3's c14 as the members go: all but one placed in one zone, none left untried.
    let mut none_left = with(2);
    none_left.waiting.retain(|c| *c != not_tried);
    assert_eq!(agree(&case, &with(1), &none_left), zone_first);
    // Three members fit in no zone of this case.
    assert_eq!(agree(&case, &with(1), &with(3)), Verdict::Differ);
    let mut other_filter = with(2);
    other_filter.waiting[0].1 = "other".into();
    other_filter.waiting.sort();
    assert_eq!(agree(&case, &with(1), &other_filter), Verdict::Differ);
    let other_group = Outcome {
        group: Some((
            "False".into(),
            "Unschedulable".into(),
            "pod group is unschedulable, 0/2 placements are available, first placement status: \
             pod group is unschedulable"
                .into(),
        )),
        ..with(2)
    };
    assert_eq!(agree(&case, &with(1), &other_group), Verdict::Differ);
    let kept_anywhere = Case {
        in_one_zone: false,
        ..case
    };
    assert_eq!(agree(&kept_anywhere, &with(1), &with(2)), Verdict::Differ);
    // Seed 7's c12: the same FitError in zone z0 (20 nodes) and z1 (10), its reasons in
    // the order of their counts.
    assert_eq!(
        zone_free(
            "0/20 nodes are available: 18 node(s) didn't match Pod's node affinity/selector, \
             2 Insufficient cpu."
        ),
        zone_free(
            "0/10 nodes are available: 1 Insufficient cpu, 9 node(s) didn't match Pod's node \
             affinity/selector."
        )
    );
}

/// A group with members bound: its condition compared in full, True against False let
/// through as kube's stale informer (counted), anything else a difference.
#[test]
fn a_bound_group_condition_is_compared() {
    let case = Case {
        in_one_zone: false,
        ..cases(SEED, 1).remove(0)
    };
    let with = |status: &str, message: &str| Outcome {
        bound: 2,
        group: Some((status.into(), "Scheduled".into(), message.into())),
        waiting: vec![("Unschedulable".into(), "0/3 nodes are available.".into())],
    };
    let scheduled = with("True", "pod group scheduled");
    assert_eq!(agree(&case, &scheduled, &scheduled.clone()), Verdict::Same);
    assert_eq!(
        agree(&case, &with("False", "pod group scheduled"), &scheduled),
        Verdict::Loosened("group condition rewritten from a stale informer")
    );
    assert_eq!(
        agree(&case, &scheduled, &with("True", "another message")),
        Verdict::Differ
    );
    let no_group = Outcome {
        group: None,
        ..scheduled.clone()
    };
    assert_eq!(agree(&case, &scheduled, &no_group), Verdict::Differ);
    let other_members = Outcome {
        bound: 1,
        ..with("False", "pod group scheduled")
    };
    assert_eq!(agree(&case, &scheduled, &other_members), Verdict::Differ);
}
