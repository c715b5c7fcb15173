//! mcsched's explanation of a pod against kube-scheduler's answer (the oracle), plugin by
//! plugin, on the same snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use mcsched_shared::explain::{Explanation, NodeExplanation, Outcome};

use super::oracle::{Answer, Candidate, NodeAnswer};

/// kube-scheduler's plugin in whose place an mcsched plugin runs (mcsched's default
/// profile puts its leaf-aware plugins where kube has TaintToleration's Filter and
/// VolumeBinding).
pub fn kube_name(plugin: &str) -> &str {
    match plugin {
        "LeafNodeTaintToleration" => "TaintToleration",
        "LeafNodeVolumeBinding" => "VolumeBinding",
        other => other,
    }
}

/// What was compared for one plugin, over all cases.
#[derive(Debug, Default, Clone)]
pub struct PluginStats {
    /// Per-node filter verdicts compared.
    pub filter_verdicts: usize,
    /// Cases in which the plugin rejected at least one of the case's own nodes.
    pub rejecting_cases: usize,
    /// Cases in which the plugin's scores were compared (two feasible nodes or more).
    pub score_cases: usize,
    /// Cases in which the plugin's normalized score told the case's feasible nodes apart.
    pub ordering_cases: usize,
    /// Cases in which the plugin's PreFilter verdict was compared.
    pub pre_filter_cases: usize,
    /// Cases in which the plugin's PreEnqueue verdict was compared and was not Success.
    pub pre_enqueue_rejecting: usize,
    /// Cases in which the plugin's Permit verdict was compared and was not Success.
    pub permit_not_success: usize,
}

impl PluginStats {
    pub fn add(&mut self, o: &PluginStats) {
        self.filter_verdicts += o.filter_verdicts;
        self.rejecting_cases += o.rejecting_cases;
        self.score_cases += o.score_cases;
        self.ordering_cases += o.ordering_cases;
        self.pre_filter_cases += o.pre_filter_cases;
        self.pre_enqueue_rejecting += o.pre_enqueue_rejecting;
        self.permit_not_success += o.permit_not_success;
    }
}

#[derive(Debug, Default)]
pub struct Comparison {
    pub differences: Vec<String>,
    pub stats: BTreeMap<String, PluginStats>,
    /// The case's nodes on which Filter counted nominated pods.
    pub nominated_nodes: usize,
    /// Both nominated a node, and mcsched's node and victims were held to kube's
    /// candidates.
    pub preemption_compared: bool,
}

impl Comparison {
    fn differ(&mut self, what: String) {
        self.differences.push(what);
    }

    fn stats(&mut self, plugin: &str) -> &mut PluginStats {
        self.stats.entry(plugin.to_string()).or_default()
    }
}

fn passes(code: &str) -> bool {
    code == "Success" || code == "Skip"
}

/// Compares everything both sides say. `own` tells the case's own nodes (the snapshot
/// holds other cases' nodes too), for the statistics only.
pub fn compare(kube: &Answer, ours: &Explanation, own: &dyn Fn(&str) -> bool) -> Comparison {
    let mut c = Comparison::default();
    if kube.num_all_nodes != ours.num_all_nodes {
        c.differ(format!(
            "nodes in the snapshot: kube-scheduler {}, mcsched {}",
            kube.num_all_nodes, ours.num_all_nodes
        ));
    }
    compare_gate("PreEnqueue", &kube.pre_enqueue, &ours.pre_enqueue, &mut c);
    // Permit is asked of a pod that fits, on both sides (whether it fits is compared
    // below).
    if !kube.permit.is_empty() && !ours.permit.is_empty() {
        compare_gate("Permit", &kube.permit, &ours.permit, &mut c);
    }
    compare_pre_filter(kube, ours, &mut c);
    compare_nodes(kube, ours, own, &mut c);
    compare_outcome(kube, ours, &mut c);
    compare_preemption(kube, ours, &mut c);
    c
}

/// kube's pickOneNodeForPreemption without its last tie-break: the candidates that tie for
/// fewest PDB violations, then the lowest priority of the first victim (kube's victims come
/// most important first and it reads the first's as the highest; since v1.37 a PodGroup
/// member weighs at its group's priority, so the first may not be the highest of the pods'
/// own), smallest sum of priorities, fewest victims, and latest start of the
/// highest-priority victims (only when every victim has a start time: kube takes "now" for
/// the others, which no two calls share).
pub fn best_candidates(candidates: &[Candidate]) -> BTreeSet<&str> {
    let eligible: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.status.is_none() && !c.victims.is_empty())
        .collect();
    let timed = eligible
        .iter()
        .all(|c| c.victims.iter().all(|v| v.start_time.is_some()));
    let key = |c: &Candidate| {
        let first = c.victims.first().map_or(i32::MIN, |v| v.priority);
        let highest = c
            .victims
            .iter()
            .map(|v| v.priority)
            .max()
            .unwrap_or(i32::MIN);
        let sum: i64 = c
            .victims
            .iter()
            .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
            .sum();
        // RFC 3339 in UTC orders as text.
        let earliest_of_highest = c
            .victims
            .iter()
            .filter(|v| v.priority == highest)
            .filter_map(|v| v.start_time.clone())
            .min()
            .unwrap_or_default();
        (
            c.pdb_violations,
            first,
            sum,
            c.victims.len(),
            std::cmp::Reverse(if timed {
                earliest_of_highest
            } else {
                String::new()
            }),
        )
    };
    let Some(best) = eligible.iter().map(|c| key(c)).min() else {
        return BTreeSet::new();
    };
    eligible
        .iter()
        .filter(|c| key(c) == best)
        .map(|c| c.node.as_str())
        .collect()
}

/// mcsched's nominated node among kube's best candidates, with the same victims.
fn compare_preemption(kube: &Answer, ours: &Explanation, c: &mut Comparison) {
    let Outcome::Unschedulable {
        nominated_node: Some(node),
        victims,
        ..
    } = &ours.outcome
    else {
        return;
    };
    // Only where kube's choice is defined: victims of one priority are ordered by start
    // time, and kube takes "now" for a pod without one.
    let timed = kube
        .candidates
        .iter()
        .all(|k| k.victims.iter().all(|v| v.start_time.is_some()));
    if kube.nominated_node.is_empty() || !timed {
        return;
    }
    c.preemption_compared = true;
    let best = best_candidates(&kube.candidates);
    if !best.contains(node.as_str()) {
        c.differ(format!(
            "preemption: mcsched nominates {node}; kube-scheduler's best candidates {best:?}"
        ));
    }
    let theirs: BTreeSet<&str> = kube
        .candidates
        .iter()
        .find(|k| &k.node == node)
        .map(|k| k.victims.iter().map(|v| v.pod.as_str()).collect())
        .unwrap_or_default();
    let mine: BTreeSet<&str> = victims.iter().map(String::as_str).collect();
    if theirs != mine {
        c.differ(format!(
            "preemption on {node}: kube-scheduler's victims {theirs:?}, mcsched's {mine:?}"
        ));
    }
}

/// A pod's PreEnqueue or Permit verdicts, plugin by plugin: where both sides run a plugin
/// they must say the same (code and reasons).
fn compare_gate(
    point: &str,
    kube: &[super::oracle::Verdict],
    ours: &[mcsched_shared::explain::PluginVerdict],
    c: &mut Comparison,
) {
    for k in kube {
        match ours.iter().find(|v| kube_name(&v.plugin) == k.plugin) {
            Some(v) => {
                if !passes(&k.code) {
                    let s = c.stats(&k.plugin);
                    if point == "PreEnqueue" {
                        s.pre_enqueue_rejecting += 1;
                    } else {
                        s.permit_not_success += 1;
                    }
                }
                if k.code != v.code || k.reasons != v.reasons {
                    c.differ(format!(
                        "{point} {}: kube-scheduler {} {:?}, mcsched {} {:?}",
                        k.plugin, k.code, k.reasons, v.code, v.reasons
                    ));
                }
            }
            // A plugin one side runs there and the other does not (kube's DynamicResources
            // and DefaultPreemption at PreEnqueue) must let the pod pass.
            None if !passes(&k.code) => c.differ(format!(
                "{point} {}: kube-scheduler {} {:?}, a plugin mcsched does not run there",
                k.plugin, k.code, k.reasons
            )),
            None => {}
        }
    }
    for v in ours {
        if !passes(&v.code) && !kube.iter().any(|k| k.plugin == kube_name(&v.plugin)) {
            c.differ(format!(
                "{point} {}: mcsched {} {:?}, a plugin kube-scheduler does not run there",
                v.plugin, v.code, v.reasons
            ));
        }
    }
}

fn compare_pre_filter(kube: &Answer, ours: &Explanation, c: &mut Comparison) {
    for v in &ours.pre_filter {
        let name = kube_name(&v.plugin);
        match kube.pre_filter.iter().find(|k| k.plugin == name) {
            Some(k) => {
                c.stats(name).pre_filter_cases += 1;
                if k.code != v.code || k.reasons != v.reasons {
                    c.differ(format!(
                        "PreFilter {name}: kube-scheduler {} {:?}, mcsched {} {:?}",
                        k.code, k.reasons, v.code, v.reasons
                    ));
                }
            }
            None if !passes(&v.code) => c.differ(format!(
                "PreFilter {}: mcsched {} {:?}, a plugin kube-scheduler does not run",
                v.plugin, v.code, v.reasons
            )),
            None => {}
        }
    }
}

fn compare_nodes(
    kube: &Answer,
    ours: &Explanation,
    own: &dyn Fn(&str) -> bool,
    c: &mut Comparison,
) {
    let by_name: HashMap<&str, &NodeExplanation> =
        ours.nodes.iter().map(|n| (n.node.as_str(), n)).collect();
    let kube_nodes: BTreeSet<&str> = kube.nodes.iter().map(|n| n.node.as_str()).collect();
    for extra in by_name.keys().filter(|n| !kube_nodes.contains(*n)) {
        c.differ(format!(
            "node {extra}: explained by mcsched, not evaluated by kube-scheduler"
        ));
    }
    let scored = kube.feasible.len() >= 2;
    let mut rejecting: BTreeSet<String> = BTreeSet::new();
    let mut scores_seen: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for k in &kube.nodes {
        let Some(o) = by_name.get(k.node.as_str()) else {
            c.differ(format!(
                "node {}: evaluated by kube-scheduler, not explained by mcsched",
                k.node
            ));
            continue;
        };
        if k.feasible != o.feasible {
            c.differ(format!(
                "node {}: feasible for kube-scheduler {}, for mcsched {}",
                k.node, k.feasible, o.feasible
            ));
        }
        if k.nominated_pods != o.nominated_pods {
            c.differ(format!(
                "node {}: nominated pods counted by kube-scheduler {:?}, by mcsched {:?}",
                k.node, k.nominated_pods, o.nominated_pods
            ));
        }
        if own(&k.node) && !k.nominated_pods.is_empty() {
            c.nominated_nodes += 1;
        }
        compare_filters(k, o, own(&k.node), &mut rejecting, c);
        if scored && k.feasible {
            compare_scores(k, o, own(&k.node), &mut scores_seen, c);
        }
    }
    for p in rejecting {
        c.stats(&p).rejecting_cases += 1;
    }
    for (p, values) in scores_seen {
        c.stats(&p).score_cases += 1;
        if values.len() > 1 {
            c.stats(&p).ordering_cases += 1;
        }
    }
    if scored {
        compare_ranking(kube, ours, c);
    }
}

fn compare_filters(
    k: &NodeAnswer,
    o: &NodeExplanation,
    own: bool,
    rejecting: &mut BTreeSet<String>,
    c: &mut Comparison,
) {
    let theirs: BTreeMap<&str, _> = k.filters.iter().map(|v| (v.plugin.as_str(), v)).collect();
    let mine: BTreeMap<&str, _> = o
        .filters
        .iter()
        .map(|v| (kube_name(&v.plugin), v))
        .collect();
    for (name, kv) in &theirs {
        c.stats(name).filter_verdicts += 1;
        if own && !passes(&kv.code) {
            rejecting.insert(name.to_string());
        }
        match mine.get(name) {
            Some(ov) if ov.code != kv.code || ov.reasons != kv.reasons => c.differ(format!(
                "node {}: Filter {name}: kube-scheduler {} {:?}, mcsched {} {:?}",
                k.node, kv.code, kv.reasons, ov.code, ov.reasons
            )),
            Some(_) => {}
            None if !passes(&kv.code) => c.differ(format!(
                "node {}: Filter {name}: kube-scheduler {} {:?}, mcsched did not run it",
                k.node, kv.code, kv.reasons
            )),
            None => {}
        }
    }
    for (name, ov) in &mine {
        if !theirs.contains_key(name) && !passes(&ov.code) {
            c.differ(format!(
                "node {}: Filter {}: mcsched {} {:?}, kube-scheduler did not run it",
                k.node, ov.plugin, ov.code, ov.reasons
            ));
        }
    }
}

fn compare_scores(
    k: &NodeAnswer,
    o: &NodeExplanation,
    own: bool,
    seen: &mut BTreeMap<String, BTreeSet<i64>>,
    c: &mut Comparison,
) {
    let theirs: BTreeMap<&str, _> = k.scores.iter().map(|s| (s.plugin.as_str(), s)).collect();
    let mine: BTreeMap<&str, _> = o.scores.iter().map(|s| (kube_name(&s.plugin), s)).collect();
    for (name, ks) in &theirs {
        if own {
            seen.entry(name.to_string())
                .or_default()
                .insert(ks.normalized);
        }
        match mine.get(name) {
            Some(os)
                if (os.raw, os.normalized, os.weight) != (ks.raw, ks.normalized, ks.weight) =>
            {
                c.differ(format!(
                    "node {}: Score {name}: kube-scheduler raw {} normalized {} weight {}, \
                     mcsched raw {} normalized {} weight {}",
                    k.node, ks.raw, ks.normalized, ks.weight, os.raw, os.normalized, os.weight
                ))
            }
            Some(_) => {}
            None if ks.normalized != 0 => c.differ(format!(
                "node {}: Score {name}: kube-scheduler normalized {}, mcsched did not score",
                k.node, ks.normalized
            )),
            None => {}
        }
    }
    for (name, os) in &mine {
        if !theirs.contains_key(name) && os.normalized != 0 {
            c.differ(format!(
                "node {}: Score {}: mcsched normalized {}, kube-scheduler did not score",
                k.node, os.plugin, os.normalized
            ));
        }
    }
    if k.total_score != o.total_score {
        c.differ(format!(
            "node {}: total score kube-scheduler {:?}, mcsched {:?}",
            k.node, k.total_score, o.total_score
        ));
    }
}

/// The feasible nodes from the best total down, nodes of equal totals together.
fn ranking<'a>(totals: impl Iterator<Item = (&'a str, i64)>) -> Vec<BTreeSet<&'a str>> {
    let mut by_total: BTreeMap<std::cmp::Reverse<i64>, BTreeSet<&str>> = BTreeMap::new();
    for (node, total) in totals {
        by_total
            .entry(std::cmp::Reverse(total))
            .or_default()
            .insert(node);
    }
    by_total.into_values().collect()
}

/// The order of the top nodes, ties allowed: the first three groups of equal totals.
fn compare_ranking(kube: &Answer, ours: &Explanation, c: &mut Comparison) {
    const TOP: usize = 3;
    let theirs = ranking(
        kube.nodes
            .iter()
            .filter(|n| n.feasible)
            .map(|n| (n.node.as_str(), n.total_score.unwrap_or_default())),
    );
    let mine = ranking(
        ours.nodes
            .iter()
            .filter(|n| n.feasible)
            .map(|n| (n.node.as_str(), n.total_score.unwrap_or_default())),
    );
    let (theirs, mine) = (
        &theirs[..theirs.len().min(TOP)],
        &mine[..mine.len().min(TOP)],
    );
    if theirs != mine {
        c.differ(format!(
            "top nodes: kube-scheduler {theirs:?}, mcsched {mine:?}"
        ));
    }
}

fn compare_outcome(kube: &Answer, ours: &Explanation, c: &mut Comparison) {
    match (&ours.outcome, kube.unschedulable) {
        (Outcome::Scheduled { node, .. }, false) => {
            if !kube.best.contains(node) {
                c.differ(format!(
                    "mcsched chose {node}; kube-scheduler chooses among {:?}",
                    kube.best
                ));
            }
        }
        (
            Outcome::Unschedulable {
                message,
                nominated_node,
                ..
            },
            true,
        ) => {
            if *message != kube.message {
                c.differ(format!(
                    "FailedScheduling: kube-scheduler {:?}, mcsched {message:?}",
                    kube.message
                ));
            }
            let kube_nominates = !kube.nominated_node.is_empty();
            if nominated_node.is_some() != kube_nominates {
                c.differ(format!(
                    "preemption: kube-scheduler nominates {:?}, mcsched {nominated_node:?}",
                    kube.nominated_node
                ));
            }
        }
        (Outcome::Scheduled { node, .. }, true) => c.differ(format!(
            "mcsched chose {node}; kube-scheduler: {}",
            kube.message
        )),
        (Outcome::Unschedulable { message, .. }, false) => c.differ(format!(
            "kube-scheduler chooses among {:?}; mcsched: {message}",
            kube.best
        )),
        (Outcome::Error { message }, _) => c.differ(format!("mcsched failed: {message}")),
    }
}
