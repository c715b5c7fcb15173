//! PodTopologySpread: `topologySpreadConstraints` with DoNotSchedule filter nodes so the
//! skew between topology domains stays within maxSkew (minDomains, nodeAffinityPolicy,
//! nodeTaintsPolicy, matchLabelKeys honoured); ScheduleAnyway constraints score them.
//! kube-scheduler's podtopologyspread plugin. A pod without constraints of its own gets
//! the default ones (kube's system defaults, or the `List` given in the args), selecting
//! the pods that the Services and the controller selecting it select
//! (`helper.DefaultSelector`); without such a selector it gets none.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use mcsched_shared::selectors::label_selector_matches;
use mcsched_shared::taints;

use super::helper::node_affinity::pod_matches_node;
use super::helper::taints::{node_taints, tolerations};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};
use crate::topology_counts::{self, PodQuery, Values};
use std::sync::Arc;

pub(crate) const NAME: &str = "PodTopologySpread";
const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";
pub(crate) const REASON_CONSTRAINTS: &str = "node(s) didn't match pod topology spread constraints";
pub(crate) const REASON_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// kube's `systemDefaultConstraints`: soft spreading over hosts and zones.
fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(HOSTNAME, 3), (ZONE, 5)]
        .into_iter()
        .map(|(key, max_skew)| TopologySpreadConstraint {
            topology_key: key.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            max_skew,
            ..Default::default()
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum DefaultingType {
    #[default]
    System,
    List,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodTopologySpreadArgs {
    pub(crate) default_constraints: Vec<TopologySpreadConstraint>,
    pub(crate) defaulting_type: DefaultingType,
}

pub(crate) struct PodTopologySpread {
    default_constraints: Vec<TopologySpreadConstraint>,
    /// With the system defaults, nodes lacking a topology key still score by the others.
    system_defaulted: bool,
}

impl PodTopologySpread {
    pub(crate) fn new(args: PodTopologySpreadArgs) -> Self {
        match args.defaulting_type {
            DefaultingType::System => PodTopologySpread {
                default_constraints: system_default_constraints(),
                system_defaulted: true,
            },
            DefaultingType::List => PodTopologySpread {
                default_constraints: args.default_constraints,
                system_defaulted: false,
            },
        }
    }
}

#[derive(Debug, Clone)]
struct Constraint {
    max_skew: i64,
    topology_key: String,
    /// None: matches nothing. Some(empty): kube's Everything, which counts no pods.
    selector: Option<LabelSelector>,
    min_domains: usize,
    honor_node_affinity: bool,
    honor_node_taints: bool,
}

impl Constraint {
    fn selector_is_empty(&self) -> bool {
        self.selector.as_ref().is_none_or(|s| {
            s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        label_selector_matches(self.selector.as_ref(), labels)
    }

    /// Pods of the pod's namespace on the node that the selector matches.
    fn count(&self, node: &NodeInfo, namespace: &str) -> i64 {
        if self.selector_is_empty() {
            return 0;
        }
        node.pods
            .iter()
            .filter(|p| !p.terminating() && p.namespace == namespace)
            .filter(|p| self.matches(p.labels()))
            .count() as i64
    }

    fn includes(&self, pod: &PodInfo, node: &NodeInfo) -> bool {
        if self.honor_node_affinity && !pod_matches_node(pod, node) {
            return false;
        }
        if self.honor_node_taints {
            let obj = pod.object();
            let tols = tolerations(&obj);
            let untolerated = node_taints(node)
                .iter()
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .any(|t| !tols.iter().any(|tol| taints::tolerates(tol, t)));
            if untolerated {
                return false;
            }
        }
        true
    }
}

fn own_constraints(pod: &Pod) -> &[TopologySpreadConstraint] {
    pod.spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or_default()
}

/// The pod's constraints for `action` (kube's `filterTopologySpreadConstraints`), or, when
/// it has none, the defaults with the selector of what selects the pod
/// (`buildDefaultConstraints`).
fn constraints(
    pod: &PodInfo,
    action: &str,
    defaults: &[TopologySpreadConstraint],
    snapshot: &Snapshot,
) -> Vec<Constraint> {
    let obj = pod.object();
    let own = own_constraints(&obj);
    if !own.is_empty() {
        return filter_constraints(pod, own, action);
    }
    let mut cs = filter_constraints(pod, defaults, action);
    if cs.is_empty() {
        return cs;
    }
    let Some(selector) = snapshot.pod_selectors.default_selector(&pod.meta) else {
        return Vec::new();
    };
    for c in &mut cs {
        c.selector = Some(selector.clone());
    }
    cs
}

fn filter_constraints(
    pod: &PodInfo,
    source: &[TopologySpreadConstraint],
    action: &str,
) -> Vec<Constraint> {
    source
        .iter()
        .filter(|c| c.when_unsatisfiable == action)
        .map(|c| {
            let mut selector = c.label_selector.clone();
            // matchLabelKeys: the pod's own values for those keys join the selector.
            if let Some(keys) = &c.match_label_keys
                && let Some(sel) = selector.as_mut()
            {
                let labels = pod.labels();
                for k in keys {
                    if let Some(v) = labels.get(k) {
                        sel.match_labels
                            .get_or_insert_default()
                            .insert(k.clone(), v.clone());
                    }
                }
            }
            Constraint {
                max_skew: i64::from(c.max_skew),
                topology_key: c.topology_key.clone(),
                selector,
                min_domains: c.min_domains.unwrap_or(1).max(1) as usize,
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect()
}

fn has_all_keys(node: &NodeInfo, cs: &[Constraint]) -> bool {
    cs.iter()
        .all(|c| node.labels().contains_key(&c.topology_key))
}

/// The node's domain for `key`: its value, or "" without the key (kube's pair value).
fn domain<'a>(node: &'a NodeInfo, key: &str) -> &'a str {
    node.labels()
        .get(key)
        .map(String::as_str)
        .unwrap_or_default()
}

fn has_node_constraints(pod: &PodInfo) -> bool {
    let obj = pod.object();
    let spec = obj.spec.as_ref();
    spec.and_then(|s| s.node_selector.as_ref())
        .is_some_and(|m| !m.is_empty())
        || spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .is_some_and(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .is_some()
            })
}

/// One constraint's matching pods as the snapshot keeps them: per node and per value of
/// its topology key.
#[derive(Clone, Default)]
struct Kept {
    per_node: Values,
    per_value: Values,
}

/// Every constraint's kept counts, or None when some are not kept yet (they are asked for,
/// and this cycle counts by walking the pods).
fn kept_counts(cs: &[Constraint], pod: &PodInfo, snapshot: &Snapshot) -> Option<Vec<Kept>> {
    let topology = &snapshot.topology;
    if !topology.kept() {
        return None;
    }
    let kept: Vec<Option<Kept>> = cs
        .iter()
        .map(|c| {
            if c.selector_is_empty() {
                return Some(Kept::default());
            }
            let q = PodQuery::of_constraint(&pod.namespace, c.selector.as_ref());
            let counts = topology.query(&q, &c.topology_key)?;
            Some(Kept {
                per_node: counts.per_node.clone(),
                per_value: counts.values(&c.topology_key)?.clone(),
            })
        })
        .collect();
    kept.into_iter().collect()
}

/// Whether every node counts for every constraint — none left out by the pod's node
/// affinity or taints, each with every key when `require_all` — so that the kept per-value
/// counts are the answer as they are.
fn every_node_counts(
    cs: &[Constraint],
    pod: &PodInfo,
    snapshot: &Snapshot,
    require_all: bool,
) -> bool {
    let topology = &snapshot.topology;
    cs.iter().all(|c| {
        !((c.honor_node_affinity && has_node_constraints(pod)) || c.honor_node_taints)
            && (!require_all
                || topology
                    .domains(&c.topology_key)
                    .is_some_and(|d| d.nodes == topology.node_count()))
    })
}

/// The pods `c` selects on `node`: kept, or counted.
fn on_node(c: &Constraint, kept: Option<&Kept>, node: &NodeInfo, namespace: &str) -> i64 {
    match kept {
        Some(k) => k.per_node.get(&*node.name).copied().unwrap_or(0),
        None => c.count(node, namespace),
    }
}

/// The two domains with the fewest matching pods: kube's criticalPaths, whose first entry
/// is the global minimum Filter measures skew against. Updated in O(1) as pods are added
/// or removed in a cycle, exactly as kube updates it.
#[derive(Clone, Debug)]
struct CriticalPaths([(String, i64); 2]);

impl CriticalPaths {
    fn new() -> Self {
        let none = (String::new(), i64::from(i32::MAX));
        CriticalPaths([none.clone(), none])
    }

    fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let i = if value == p[0].0 {
            Some(0)
        } else if value == p[1].0 {
            Some(1)
        } else {
            None
        };
        match i {
            Some(i) => {
                p[i].1 = num;
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None => {
                if num < p[0].1 {
                    p[1] = std::mem::replace(&mut p[0], (value.to_string(), num));
                } else if num < p[1].1 {
                    p[1] = (value.to_string(), num);
                }
            }
        }
    }
}

#[derive(Clone)]
struct PreFilterState {
    constraints: Vec<Constraint>,
    /// Per constraint: topology value → matching pods (zero counts absent).
    counts: Vec<Values>,
    /// Per constraint: how many eligible domains there are, zero counts included.
    domains: Vec<usize>,
    critical: Vec<CriticalPaths>,
    /// Per constraint: 1 when the pod matches its own selector.
    self_match: Vec<i64>,
    pod_namespace: String,
}

impl PreFilterState {
    fn min_match(&self, i: usize) -> i64 {
        if self.domains[i] < self.constraints[i].min_domains {
            return 0;
        }
        self.critical[i].0[0].1
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::PodAdd,
            ClusterEvent::PodUpdate,
            ClusterEvent::PodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PodTopologySpread {
    /// kube's `updateWithPod`.
    fn update(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        by: i64,
    ) {
        let Some(s) = state.read_mut::<PreFilterState>(NAME) else {
            return;
        };
        if other.namespace != s.pod_namespace || !has_all_keys(node, &s.constraints) {
            return;
        }
        for i in 0..s.constraints.len() {
            let c = &s.constraints[i];
            if !c.matches(other.labels()) || !c.includes(pod, node) {
                continue;
            }
            if let Some(v) = node.labels().get(&c.topology_key) {
                topology_counts::bump(&mut s.counts[i], v, by);
                let now = s.counts[i].get(v.as_str()).copied().unwrap_or(0);
                s.critical[i].update(v, now);
            }
        }
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let cs = constraints(pod, "DoNotSchedule", &self.default_constraints, snapshot);
        if cs.is_empty() {
            return (None, Status::skip());
        }
        let kept = kept_counts(&cs, pod, snapshot);
        let mut counts = Vec::with_capacity(cs.len());
        let mut domains = Vec::with_capacity(cs.len());
        let mut critical = Vec::with_capacity(cs.len());
        match kept {
            Some(kept) if every_node_counts(&cs, pod, snapshot, true) => {
                for (c, k) in cs.iter().zip(kept) {
                    let all = snapshot
                        .topology
                        .domains(&c.topology_key)
                        .map(|d| d.values.clone())
                        .unwrap_or_default();
                    critical.push(critical_paths(&k.per_value, &all));
                    domains.push(all.len());
                    counts.push(k.per_value);
                }
            }
            kept => {
                // Counted under borrowed label values, zero counts included (they are
                // domains too).
                let mut borrowed: Vec<HashMap<&str, i64>> = vec![HashMap::new(); cs.len()];
                for node in snapshot.nodes.iter() {
                    if !has_all_keys(node, &cs) {
                        continue;
                    }
                    for (i, c) in cs.iter().enumerate() {
                        if !c.includes(pod, node) {
                            continue;
                        }
                        let v = domain(node, &c.topology_key);
                        let k = kept.as_ref().map(|k| &k[i]);
                        *borrowed[i].entry(v).or_default() += on_node(c, k, node, &pod.namespace);
                    }
                }
                for m in borrowed {
                    let mut paths = CriticalPaths::new();
                    let mut values = Values::default();
                    for (v, n) in &m {
                        paths.update(v, *n);
                        if *n != 0 {
                            values.insert(Arc::from(*v), *n);
                        }
                    }
                    critical.push(paths);
                    domains.push(m.len());
                    counts.push(values);
                }
            }
        }
        let self_match = cs
            .iter()
            .map(|c| i64::from(c.matches(pod.labels())))
            .collect();
        state.write(
            NAME,
            PreFilterState {
                constraints: cs,
                counts,
                domains,
                critical,
                self_match,
                pod_namespace: pod.namespace.clone(),
            },
        );
        (None, Status::success())
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.update(state, pod, added, node, 1);
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.update(state, pod, removed, node, -1);
        Status::success()
    }
}

/// The critical paths over every domain of `all`, those without a count at zero: two
/// empty domains settle it without reading the counts.
fn critical_paths(counts: &Values, all: &Values) -> CriticalPaths {
    let mut paths = CriticalPaths::new();
    let mut zeros = 0;
    if all.len() > counts.len() {
        for v in all.keys() {
            if !counts.contains_key(v) {
                paths.update(v, 0);
                zeros += 1;
                if zeros == 2 {
                    return paths;
                }
            }
        }
    }
    for (v, n) in counts {
        paths.update(v, *n);
    }
    paths
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(NAME) else {
            return Status::success();
        };
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.labels().get(&c.topology_key) else {
                return Status::unresolvable(REASON_MISSING_LABEL);
            };
            let match_num = s.counts[i].get(value.as_str()).copied().unwrap_or(0);
            if match_num + s.self_match[i] - s.min_match(i) > c.max_skew {
                return Status::unschedulable(REASON_CONSTRAINTS);
            }
        }
        Status::success()
    }
}

#[derive(Clone)]
struct PreScoreState {
    constraints: Vec<Constraint>,
    ignored: HashSet<String>,
    /// `ignored` by position in the scored node list (NormalizeScore sees no names).
    ignored_at: Vec<bool>,
    /// Per constraint (but the hostname ones): topology value → matching pods.
    counts: Vec<Values>,
    /// Per constraint, the kept per-node counts (the hostname ones read them in Score).
    kept: Option<Vec<Kept>>,
    weights: Vec<f64>,
    namespace: String,
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        filtered: &crate::snapshot::NodeList,
        snapshot: &Snapshot,
    ) -> Status {
        if snapshot.is_empty() {
            return Status::skip();
        }
        let cs = constraints(pod, "ScheduleAnyway", &self.default_constraints, snapshot);
        if cs.is_empty() {
            return Status::skip();
        }
        // Only the pod's own constraints and List defaults need every topology key on a
        // node: with the system defaults a node without a zone still spreads by host.
        let require_all = !own_constraints(&pod.object()).is_empty() || !self.system_defaulted;
        let mut ignored = HashSet::new();
        let mut ignored_at = Vec::with_capacity(filtered.len());
        // The domains of the scored nodes; a node without the key is in domain "".
        let mut scored: Vec<HashSet<&str>> = vec![HashSet::new(); cs.len()];
        for node in filtered.iter() {
            let ignore = require_all && !has_all_keys(node, &cs);
            ignored_at.push(ignore);
            if ignore {
                ignored.insert(node.name.to_string());
                continue;
            }
            for (i, c) in cs.iter().enumerate() {
                if c.topology_key == HOSTNAME {
                    continue;
                }
                let v = domain(node, &c.topology_key);
                scored[i].insert(v);
            }
        }
        let weights = cs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if c.topology_key == HOSTNAME {
                    filtered.len() - ignored.len()
                } else {
                    scored[i].len()
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        let kept = kept_counts(&cs, pod, snapshot);
        let counts: Vec<Values> = match &kept {
            // Score reads only the scored nodes' domains, all of them counted here.
            Some(k) if every_node_counts(&cs, pod, snapshot, require_all) => {
                k.iter().map(|k| k.per_value.clone()).collect()
            }
            kept => {
                let mut borrowed: Vec<HashMap<&str, i64>> = scored
                    .iter()
                    .map(|d| d.iter().map(|v| (*v, 0)).collect())
                    .collect();
                for node in snapshot.nodes.iter() {
                    if require_all && !has_all_keys(node, &cs) {
                        continue;
                    }
                    for (i, c) in cs.iter().enumerate() {
                        if c.topology_key == HOSTNAME || !c.includes(pod, node) {
                            continue;
                        }
                        let v = domain(node, &c.topology_key);
                        if let Some(n) = borrowed[i].get_mut(v) {
                            *n += on_node(c, kept.as_ref().map(|k| &k[i]), node, &pod.namespace);
                        }
                    }
                }
                borrowed
                    .into_iter()
                    .map(|m| {
                        m.into_iter()
                            .filter(|(_, n)| *n != 0)
                            .map(|(v, n)| (Arc::from(v), n))
                            .collect()
                    })
                    .collect()
            }
        };
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                constraints: cs,
                ignored,
                ignored_at,
                counts,
                kept,
                weights,
                namespace: pod.namespace.clone(),
            },
        );
        Status::success()
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Ok(0);
        };
        // kube scores a node without the topology labels 0, and NormalizeScore keeps it 0.
        if s.ignored.contains(&*node.name) {
            return Ok(0);
        }
        let mut score = 0f64;
        for (i, c) in s.constraints.iter().enumerate() {
            if let Some(v) = node.labels().get(&c.topology_key) {
                let cnt = if c.topology_key == HOSTNAME {
                    on_node(c, s.kept.as_ref().map(|k| &k[i]), node, &s.namespace)
                } else {
                    s.counts[i].get(v.as_str()).copied().unwrap_or(0)
                };
                score += cnt as f64 * s.weights[i] + (c.max_skew - 1) as f64;
            }
        }
        Ok(score.round() as i64)
    }

    /// Fewer matching pods score higher; ignored nodes get 0.
    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        let Some(st) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Status::success();
        };
        let ignored = |i: usize| st.ignored_at.get(i).copied().unwrap_or(false);
        let valid = scores
            .iter()
            .enumerate()
            .filter(|&(i, _)| !ignored(i))
            .map(|(_, s)| *s);
        let (min, max) = valid.fold((i64::MAX, 0i64), |(lo, hi), s| (lo.min(s), hi.max(s)));
        for (i, s) in scores.iter_mut().enumerate() {
            *s = if ignored(i) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *s) / max
            };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testing::{node_with, pod_with};
    use serde_json::json;
    use std::sync::Arc;

    fn node(name: &str, zone: Option<&str>, extra: &[(&str, &str)]) -> NodeInfo {
        node_with(name, |n| {
            let l = n.metadata.labels.get_or_insert_default();
            if let Some(z) = zone {
                l.insert("zone".into(), z.into());
            }
            for (k, v) in extra {
                l.insert(k.to_string(), v.to_string());
            }
        })
    }

    fn pod(name: &str, app: &str, spec_extra: serde_json::Value) -> PodInfo {
        pod_with(|p| {
            p.metadata.name = Some(name.into());
            p.metadata.uid = Some(format!("uid-{name}"));
            p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
            if let Some(s) = p.spec.as_mut()
                && let Some(obj) = spec_extra.as_object()
            {
                if let Some(c) = obj.get("topologySpreadConstraints") {
                    s.topology_spread_constraints = serde_json::from_value(c.clone()).ok();
                }
                if let Some(ns) = obj.get("nodeSelector") {
                    s.node_selector = serde_json::from_value(ns.clone()).ok();
                }
            }
        })
    }

    fn spread(key: &str, max_skew: i32, when: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
                           "labelSelector": {"matchLabels": {"app": "web"}}});
        if let (Some(o), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                o.insert(k.clone(), v.clone());
            }
        }
        c
    }

    fn snap(nodes: Vec<(NodeInfo, usize)>) -> Snapshot {
        let infos = nodes
            .into_iter()
            .enumerate()
            .map(|(j, (mut n, webs))| {
                for i in 0..webs {
                    n.add_pod(Arc::new(pod(&format!("w{j}-{i}"), "web", json!({}))));
                }
                Arc::new(n)
            })
            .collect();
        Snapshot::from_nodes(infos)
    }

    fn filter_codes(p: &PodInfo, s: &Snapshot) -> Vec<Code> {
        let plugin = PodTopologySpread::new(Default::default());
        let mut state = CycleState::new();
        let (_, st) = plugin.pre_filter(&mut state, p, s);
        if st.is_skip() {
            return s.nodes.iter().map(|_| Code::Success).collect();
        }
        s.nodes
            .iter()
            .map(|n| plugin.filter(&state, p, n).code)
            .collect()
    }

    #[test]
    fn max_skew_across_zones() {
        // zone a: 2 web pods, zone b: 0 → adding to a makes skew 3 > 1.
        let s = snap(vec![
            (node("a1", Some("a"), &[]), 2),
            (node("b1", Some("b"), &[]), 0),
        ]);
        let p = pod(
            "p",
            "web",
            json!({"topologySpreadConstraints": [spread("zone", 1, "DoNotSchedule", json!({}))]}),
        );
        assert_eq!(
            filter_codes(&p, &s),
            vec![Code::Unschedulable, Code::Success]
        );
    }

    #[test]
    fn missing_topology_label_is_unresolvable() {
        let s = snap(vec![
            (node("a1", Some("a"), &[]), 0),
            (node("x", None, &[]), 0),
        ]);
        let p = pod(
            "p",
            "web",
            json!({"topologySpreadConstraints": [spread("zone", 1, "DoNotSchedule", json!({}))]}),
        );
        assert_eq!(
            filter_codes(&p, &s),
            vec![Code::Success, Code::UnschedulableAndUnresolvable]
        );
    }

    #[test]
    fn min_domains_counts_missing_domains_as_zero() {
        // Only one zone exists but minDomains 2: the global minimum is 0, so zone a with
        // one pod already gives skew 2 > 1.
        let s = snap(vec![
            (node("a1", Some("a"), &[]), 1),
            (node("a2", Some("a"), &[]), 0),
        ]);
        let p = pod(
            "p",
            "web",
            json!({"topologySpreadConstraints": [spread("zone", 1, "DoNotSchedule", json!({"minDomains": 2}))]}),
        );
        assert_eq!(
            filter_codes(&p, &s),
            vec![Code::Unschedulable, Code::Unschedulable]
        );
        let without = pod(
            "p",
            "web",
            json!({"topologySpreadConstraints": [spread("zone", 1, "DoNotSchedule", json!({}))]}),
        );
        assert_eq!(
            filter_codes(&without, &s),
            vec![Code::Success, Code::Success]
        );
    }

    #[test]
    fn node_affinity_policy_decides_which_domains_count() {
        // Zone b is excluded by the pod's nodeSelector; with Honor it does not lower the
        // minimum, with Ignore it does.
        let s = snap(vec![
            (node("a1", Some("a"), &[("disk", "ssd")]), 1),
            (node("b1", Some("b"), &[("disk", "hdd")]), 0),
        ]);
        let honor = pod(
            "p",
            "web",
            json!({"nodeSelector": {"disk": "ssd"},
                   "topologySpreadConstraints": [spread("zone", 1, "DoNotSchedule", json!({}))]}),
        );
        assert_eq!(filter_codes(&honor, &s)[0], Code::Success);
        let ignore = pod(
            "p",
            "web",
            json!({"nodeSelector": {"disk": "ssd"},
                   "topologySpreadConstraints": [spread("zone", 1, "DoNotSchedule", json!({"nodeAffinityPolicy": "Ignore"}))]}),
        );
        assert_eq!(filter_codes(&ignore, &s)[0], Code::Unschedulable);
    }

    #[test]
    fn a_pod_not_matching_its_selector_does_not_count_itself() {
        let s = snap(vec![
            (node("a1", Some("a"), &[]), 1),
            (node("b1", Some("b"), &[]), 0),
        ]);
        let p = pod(
            "p",
            "other",
            json!({"topologySpreadConstraints": [spread("zone", 1, "DoNotSchedule", json!({}))]}),
        );
        assert_eq!(filter_codes(&p, &s), vec![Code::Success, Code::Success]);
    }

    #[test]
    fn schedule_anyway_scores_emptier_domains_higher() {
        let s = snap(vec![
            (node("a1", Some("a"), &[]), 3),
            (node("b1", Some("b"), &[]), 1),
            (node("c1", Some("c"), &[]), 0),
        ]);
        let p = pod(
            "p",
            "web",
            json!({"topologySpreadConstraints": [spread("zone", 1, "ScheduleAnyway", json!({}))]}),
        );
        let plugin = PodTopologySpread::new(Default::default());
        let mut state = CycleState::new();
        let (_, st) = plugin.pre_filter(&mut state, &p, &s);
        assert!(st.is_skip(), "no DoNotSchedule constraint");
        assert!(
            plugin
                .pre_score(
                    &mut state,
                    &p,
                    &crate::snapshot::NodeList::from_nodes(s.nodes.to_vec()),
                    &s
                )
                .is_success()
        );
        let mut scores: Vec<i64> = s
            .nodes
            .iter()
            .map(|n| plugin.score(&state, &p, n).unwrap_or(-9))
            .collect();
        // weight ln(3 + 2) ≈ 1.609: 3 → 5, 1 → 2, 0 → 0.
        assert_eq!(scores, vec![5, 2, 0]);
        plugin.normalize(&state, &p, &mut scores);
        assert_eq!(scores, vec![0, 60, 100]);
    }

    /// Nodes a1 (zone a, 2 web pods), a2 (zone a), b1 (zone b, 1 web pod) and x (no
    /// zone), with a Service selecting `app=web`.
    fn defaults_snapshot() -> Snapshot {
        let zoned = |name: &str, zone: Option<&str>| {
            node_with(name, |n| {
                if let Some(z) = zone {
                    n.metadata
                        .labels
                        .get_or_insert_default()
                        .insert(ZONE.into(), z.into());
                }
            })
        };
        let mut s = snap(vec![
            (zoned("a1", Some("a")), 2),
            (zoned("a2", Some("a")), 0),
            (zoned("b1", Some("b")), 1),
            (zoned("x", None), 0),
        ]);
        let mut selectors = crate::pod_selectors::PodSelectors::default();
        selectors.set(
            crate::pod_selectors::SelectorKind::Service,
            "default",
            "web",
            Some(crate::pod_selectors::Selector::Map(Some(
                [("app".to_string(), "web".to_string())].into(),
            ))),
        );
        s.pod_selectors = Arc::new(selectors);
        s
    }

    /// Normalised scores over every node, or None when PreScore skips.
    fn scores(plugin: &PodTopologySpread, p: &PodInfo, s: &Snapshot) -> Option<Vec<i64>> {
        let mut state = CycleState::new();
        if plugin
            .pre_score(
                &mut state,
                p,
                &crate::snapshot::NodeList::from_nodes(s.nodes.to_vec()),
                s,
            )
            .is_skip()
        {
            return None;
        }
        let mut scores: Vec<i64> = s
            .nodes
            .iter()
            .map(|n| plugin.score(&state, p, n).unwrap_or(-9))
            .collect();
        plugin.normalize(&state, p, &mut scores);
        Some(scores)
    }

    fn list(constraints: serde_json::Value) -> PodTopologySpread {
        PodTopologySpread::new(PodTopologySpreadArgs {
            default_constraints: serde_json::from_value(constraints).unwrap_or_default(),
            defaulting_type: DefaultingType::List,
        })
    }

    #[test]
    fn default_constraints_score_with_the_selector_of_what_selects_the_pod() {
        let s = defaults_snapshot();
        let system = PodTopologySpread::new(Default::default());
        let list_same = list(json!([
            {"maxSkew": 3, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway"},
            {"maxSkew": 5, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}
        ]));
        let own =
            json!({"topologySpreadConstraints": [spread(ZONE, 1, "ScheduleAnyway", json!({}))]});
        let cases: Vec<(&str, &PodTopologySpread, PodInfo, Option<Vec<i64>>)> = vec![
            // host weight ln(4+2), zone weight ln(3+2) (domains a, b and the unlabelled
            // ""): raw 13, 9, 9, 2; x lacks a zone yet scores by host, highest.
            (
                "system defaults",
                &system,
                pod("p", "web", json!({})),
                Some(vec![15, 46, 46, 100]),
            ),
            (
                "system defaults, nothing selects the pod",
                &system,
                pod("p", "other", json!({})),
                None,
            ),
            // The same constraints as a List need every key: x is ignored (0); host
            // weight ln(3+2), zone weight ln(2+2): raw 12, 9, 9.
            (
                "list defaults",
                &list_same,
                pod("p", "web", json!({})),
                Some(vec![75, 100, 100, 0]),
            ),
            (
                "own constraints replace the defaults",
                &system,
                pod("p", "web", own),
                // zone weight ln(2+2): raw 2*1.386 = 3, 1.386 = 1; x ignored.
                Some(vec![33, 33, 100, 0]),
            ),
        ];
        for (name, plugin, p, want) in cases {
            assert_eq!(scores(plugin, &p, &s), want, "{name}");
        }
    }

    #[test]
    fn list_defaults_filter_with_the_selector_of_what_selects_the_pod() {
        let s = defaults_snapshot();
        let plugin = list(json!([
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
        ]));
        let codes = |p: &PodInfo| {
            let mut state = CycleState::new();
            let (_, st) = plugin.pre_filter(&mut state, p, &s);
            if st.is_skip() {
                return None;
            }
            Some(
                s.nodes
                    .iter()
                    .map(|n| plugin.filter(&state, p, n).code)
                    .collect::<Vec<_>>(),
            )
        };
        // Zone a holds 2 web pods, zone b 1: a third in a makes the skew 2.
        assert_eq!(
            codes(&pod("p", "web", json!({}))),
            Some(vec![
                Code::Unschedulable,
                Code::Unschedulable,
                Code::Success,
                Code::UnschedulableAndUnresolvable
            ])
        );
        assert_eq!(codes(&pod("p", "other", json!({}))), None);
        // The system defaults never filter.
        let system = PodTopologySpread::new(Default::default());
        let mut state = CycleState::new();
        let (_, st) = system.pre_filter(&mut state, &pod("p", "web", json!({})), &s);
        assert!(st.is_skip());
    }
}
