//! InterPodAffinity: required pod affinity and anti-affinity (the incoming pod's, and the
//! existing pods' anti-affinity towards it — the symmetric check) filter nodes by topology
//! domain; preferred terms (both ways) and existing pods' required affinity weighted by
//! hardPodAffinityWeight score them. kube-scheduler's interpodaffinity plugin.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::affinity::{AffinityTerm, PodAffinityTerms, WeightedTerm};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};
use crate::topology_counts::{self, PodQuery, TermKind, Values};

pub(crate) const NAME: &str = "InterPodAffinity";
const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";
pub(crate) const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
pub(crate) const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub(crate) const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InterPodAffinityArgs {
    pub(crate) hard_pod_affinity_weight: i32,
    pub(crate) ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

pub(crate) struct InterPodAffinity {
    args: InterPodAffinityArgs,
}

impl InterPodAffinity {
    pub(crate) fn new(args: InterPodAffinityArgs) -> Self {
        InterPodAffinity { args }
    }
}

/// Topology key → value → matching pods. Looked up by `&str`, so that Filter, run for
/// thousands of nodes per pod, allocates nothing; the per-value maps are persistent, so
/// the kept counts of the snapshot join without a copy.
#[derive(Clone, Default)]
struct Counts(Vec<(String, Values)>);

impl Counts {
    fn new() -> Self {
        Self::default()
    }

    /// No pair with a count (pairs are removed when they reach zero).
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn values(&self, key: &str) -> Option<&Values> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn get(&self, key: &str, value: &str) -> i64 {
        self.values(key)
            .and_then(|m| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    fn add(&mut self, key: &str, value: &str, by: i64) {
        let i = match self.0.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.0.push((key.to_string(), Values::default()));
                self.0.len() - 1
            }
        };
        topology_counts::bump(&mut self.0[i].1, value, by);
        if self.0[i].1.is_empty() {
            self.0.swap_remove(i);
        }
    }

    /// Adds kept counts for `key`: shared as they are when the key has none yet.
    fn add_all(&mut self, key: &str, values: &Values) {
        if values.is_empty() {
            return;
        }
        if self.values(key).is_none() {
            self.0.push((key.to_string(), values.clone()));
            return;
        }
        for (v, c) in values {
            self.add(key, v, *c);
        }
    }

    /// Whether some pair of `labels` has a count.
    fn any_of(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().any(|(k, values)| {
            labels
                .get(k)
                .is_some_and(|v| values.get(v.as_str()).is_some_and(|c| *c > 0))
        })
    }
}

#[derive(Clone)]
struct PreFilterState {
    existing_anti_affinity: Counts,
    affinity: Counts,
    anti_affinity: Counts,
    /// The incoming pod's required terms, namespaceSelectors folded into namespaces.
    required_affinity: Vec<AffinityTerm>,
    required_anti_affinity: Vec<AffinityTerm>,
    meta: ObjectMeta,
    namespace_labels: BTreeMap<String, String>,
}

fn bump(counts: &mut Counts, node: &NodeInfo, key: &str, by: i64) {
    if let Some(v) = node.labels().get(key) {
        counts.add(key, v, by);
    }
}

fn matches_all(terms: &[AffinityTerm], pod: &ObjectMeta) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, None))
}

impl PreFilterState {
    /// The incoming pod's terms counted from the kept counts; false (and nothing counted)
    /// when some are not kept yet. Required affinity needs a pod matching all terms, so
    /// it is read from the counts only when all terms select the same pods.
    fn count_incoming_from(&mut self, topology: &topology_counts::TopologyCounts) -> bool {
        let affinity_query = match self.required_affinity.split_first() {
            None => None,
            Some((first, rest)) => {
                let q = PodQuery::of_term(first);
                if q.is_none() || rest.iter().any(|t| PodQuery::of_term(t) != q) {
                    return false;
                }
                q
            }
        };
        let mut affinity = Counts::new();
        let mut anti_affinity = Counts::new();
        let mut all_kept = true;
        for t in &self.required_affinity {
            match affinity_query
                .as_ref()
                .and_then(|q| topology.query(q, &t.topology_key))
                .and_then(|c| c.values(&t.topology_key))
            {
                Some(values) => affinity.add_all(&t.topology_key, values),
                None => all_kept = false,
            }
        }
        for t in &self.required_anti_affinity {
            match PodQuery::of_term(t)
                .as_ref()
                .and_then(|q| topology.query(q, &t.topology_key))
                .and_then(|c| c.values(&t.topology_key))
            {
                Some(values) => anti_affinity.add_all(&t.topology_key, values),
                None => all_kept = false,
            }
        }
        if all_kept {
            self.affinity = affinity;
            self.anti_affinity = anti_affinity;
        }
        all_kept
    }

    /// Counts by walking every node's pods: the existing pods' anti-affinity terms
    /// and/or the incoming pod's terms.
    fn scan(&mut self, snapshot: &Snapshot, existing: bool, incoming: bool) {
        for node in snapshot.nodes.iter() {
            if existing {
                for other in node.pods_with_required_anti_affinity() {
                    for t in &other.terms.required_anti_affinity {
                        if t.matches(&self.meta, Some(&self.namespace_labels)) {
                            bump(&mut self.existing_anti_affinity, node, &t.topology_key, 1);
                        }
                    }
                }
            }
            if !incoming {
                continue;
            }
            for other in &node.pods {
                if matches_all(&self.required_affinity, &other.meta) {
                    for t in &self.required_affinity {
                        bump(&mut self.affinity, node, &t.topology_key, 1);
                    }
                }
                for t in &self.required_anti_affinity {
                    if t.matches(&other.meta, None) {
                        bump(&mut self.anti_affinity, node, &t.topology_key, 1);
                    }
                }
            }
        }
    }

    /// Accounts for `other` joining (+1) or leaving (−1) `node`.
    fn update(&mut self, other: &PodInfo, node: &NodeInfo, by: i64) {
        for t in &other.terms.required_anti_affinity {
            if t.matches(&self.meta, Some(&self.namespace_labels)) {
                bump(&mut self.existing_anti_affinity, node, &t.topology_key, by);
            }
        }
        if matches_all(&self.required_affinity, &other.meta) {
            for t in &self.required_affinity {
                bump(&mut self.affinity, node, &t.topology_key, by);
            }
        }
        for t in &self.required_anti_affinity {
            if t.matches(&other.meta, None) {
                bump(&mut self.anti_affinity, node, &t.topology_key, by);
            }
        }
    }
}

impl Plugin for InterPodAffinity {
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
            ClusterEvent::NamespaceChange,
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

fn namespace_labels(snapshot: &Snapshot, ns: &str) -> BTreeMap<String, String> {
    snapshot.namespaces.get(ns).cloned().unwrap_or_default()
}

fn merged(terms: &[AffinityTerm], snapshot: &Snapshot) -> Vec<AffinityTerm> {
    terms
        .iter()
        .cloned()
        .map(|mut t| {
            t.merge_selected_namespaces(&snapshot.namespaces);
            t
        })
        .collect()
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let ns_labels = namespace_labels(snapshot, &pod.namespace);
        let mut s = PreFilterState {
            existing_anti_affinity: Counts::new(),
            affinity: Counts::new(),
            anti_affinity: Counts::new(),
            required_affinity: merged(&pod.terms.required_affinity, snapshot),
            required_anti_affinity: merged(&pod.terms.required_anti_affinity, snapshot),
            meta: pod.meta.clone(),
            namespace_labels: ns_labels,
        };
        let incoming_terms =
            !s.required_affinity.is_empty() || !s.required_anti_affinity.is_empty();
        let topology = &snapshot.topology;
        // The existing pods' anti-affinity: each distinct term matched once.
        let existing_kept = topology.kept();
        if existing_kept {
            for g in topology.terms() {
                if g.kind == TermKind::RequiredAntiAffinity
                    && g.term.matches(&s.meta, Some(&s.namespace_labels))
                {
                    s.existing_anti_affinity
                        .add_all(&g.term.topology_key, &g.values);
                }
            }
        }
        let incoming_kept = incoming_terms && s.count_incoming_from(topology);
        if !existing_kept || (incoming_terms && !incoming_kept) {
            s.scan(snapshot, !existing_kept, incoming_terms && !incoming_kept);
        }
        if s.existing_anti_affinity.is_empty() && !incoming_terms {
            return (None, Status::skip());
        }
        state.write(NAME, s);
        (None, Status::success())
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(NAME) {
            s.update(added, node, 1);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(NAME) {
            s.update(removed, node, -1);
        }
        Status::success()
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(NAME) else {
            return Status::success();
        };
        let labels = node.labels();
        // Affinity: every term's topology must be on the node and hold a matching pod —
        // unless no pod matches anywhere and the pod matches its own terms (the first of
        // a self-affine group).
        let mut pods_exist = true;
        for t in &s.required_affinity {
            match labels.get(&t.topology_key) {
                Some(v) => {
                    if s.affinity.get(&t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
                None => return Status::unresolvable(REASON_AFFINITY),
            }
        }
        let first_of_group = s.affinity.is_empty() && matches_all(&s.required_affinity, &s.meta);
        if !(pods_exist || first_of_group) {
            return Status::unresolvable(REASON_AFFINITY);
        }
        if !s.anti_affinity.is_empty() {
            for t in &s.required_anti_affinity {
                if let Some(v) = labels.get(&t.topology_key)
                    && s.anti_affinity.get(&t.topology_key, v) > 0
                {
                    return Status::unschedulable(REASON_ANTI_AFFINITY);
                }
            }
        }
        if s.existing_anti_affinity.any_of(labels) {
            return Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}

/// topology key → value → score.
#[derive(Clone, Default)]
struct TopologyScore {
    scanned: HashMap<String, HashMap<String, i64>>,
    /// Kept counts read as they are: topology key, weight per pod, pods per value.
    kept: Vec<(String, i64, Values)>,
}

impl TopologyScore {
    fn add(
        &mut self,
        term: &AffinityTerm,
        weight: i64,
        pod: &ObjectMeta,
        ns_labels: Option<&BTreeMap<String, String>>,
        node: &NodeInfo,
    ) {
        if term.matches(pod, ns_labels)
            && let Some(v) = node.labels().get(&term.topology_key)
        {
            *self
                .scanned
                .entry(term.topology_key.clone())
                .or_default()
                .entry(v.clone())
                .or_default() += weight;
        }
    }

    fn is_empty(&self) -> bool {
        self.scanned.is_empty() && self.kept.is_empty()
    }

    fn add_kept(&mut self, key: &str, weight: i64, values: &Values) {
        if !values.is_empty() {
            self.kept.push((key.to_string(), weight, values.clone()));
        }
    }

    fn of(&self, labels: &BTreeMap<String, String>) -> i64 {
        let scanned: i64 = self
            .scanned
            .iter()
            .filter_map(|(k, values)| labels.get(k).and_then(|v| values.get(v)))
            .sum();
        let kept: i64 = self
            .kept
            .iter()
            .filter_map(|(k, w, values)| {
                labels
                    .get(k)
                    .and_then(|v| values.get(v.as_str()))
                    .map(|c| c * w)
            })
            .sum();
        scanned + kept
    }

    fn add_weighted(
        &mut self,
        terms: &[WeightedTerm],
        sign: i64,
        pod: &ObjectMeta,
        ns: Option<&BTreeMap<String, String>>,
        node: &NodeInfo,
    ) {
        for t in terms {
            self.add(&t.term, i64::from(t.weight) * sign, pod, ns, node);
        }
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &crate::snapshot::NodeList,
        snapshot: &Snapshot,
    ) -> Status {
        let own = &pod.terms;
        let has_constraints =
            !own.preferred_affinity.is_empty() || !own.preferred_anti_affinity.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        let merge = |terms: &[WeightedTerm]| -> Vec<WeightedTerm> {
            terms
                .iter()
                .cloned()
                .map(|mut w| {
                    w.term.merge_selected_namespaces(&snapshot.namespaces);
                    w
                })
                .collect()
        };
        let incoming = PodAffinityTerms {
            preferred_affinity: merge(&own.preferred_affinity),
            preferred_anti_affinity: merge(&own.preferred_anti_affinity),
            ..Default::default()
        };
        let ns_labels = namespace_labels(snapshot, &pod.namespace);
        let mut score = TopologyScore::default();
        let hard_weight = i64::from(self.args.hard_pod_affinity_weight);
        let ignore_preferred = self.args.ignore_preferred_terms_of_existing_pods;
        let topology = &snapshot.topology;
        // The incoming pod's preferred terms from the kept counts, when all are kept.
        let incoming_kept = has_constraints && {
            let weighted = incoming
                .preferred_affinity
                .iter()
                .map(|t| (t, 1))
                .chain(incoming.preferred_anti_affinity.iter().map(|t| (t, -1)));
            let mut kept = Vec::new();
            let mut all = true;
            for (w, sign) in weighted {
                let key = &w.term.topology_key;
                match PodQuery::of_term(&w.term)
                    .and_then(|q| topology.query(&q, key).and_then(|c| c.values(key)).cloned())
                {
                    Some(values) => kept.push((key, i64::from(w.weight) * sign, values)),
                    None => all = false,
                }
            }
            if all {
                for (key, weight, values) in &kept {
                    score.add_kept(key, *weight, values);
                }
            }
            all
        };
        // The existing pods' terms towards it: each distinct term matched once.
        let existing_kept = topology.kept();
        if existing_kept {
            for g in topology.terms() {
                let weight = match g.kind {
                    TermKind::RequiredAffinity if hard_weight > 0 => hard_weight,
                    TermKind::PreferredAffinity(w) if !ignore_preferred => i64::from(w),
                    TermKind::PreferredAntiAffinity(w) if !ignore_preferred => -i64::from(w),
                    _ => continue,
                };
                if g.term.matches(&pod.meta, Some(&ns_labels)) {
                    score.add_kept(&g.term.topology_key, weight, &g.values);
                }
            }
        }
        let scan_incoming = has_constraints && !incoming_kept;
        let visit = |score: &mut TopologyScore, e: &Arc<PodInfo>, node: &NodeInfo| {
            if scan_incoming {
                score.add_weighted(&incoming.preferred_affinity, 1, &e.meta, None, node);
                score.add_weighted(&incoming.preferred_anti_affinity, -1, &e.meta, None, node);
            }
            if existing_kept {
                return;
            }
            if hard_weight > 0 {
                for t in &e.terms.required_affinity {
                    score.add(t, hard_weight, &pod.meta, Some(&ns_labels), node);
                }
            }
            if !ignore_preferred {
                score.add_weighted(
                    &e.terms.preferred_affinity,
                    1,
                    &pod.meta,
                    Some(&ns_labels),
                    node,
                );
                score.add_weighted(
                    &e.terms.preferred_anti_affinity,
                    -1,
                    &pod.meta,
                    Some(&ns_labels),
                    node,
                );
            }
        };
        // Without terms of its own, only nodes holding pods with affinity matter (kube's
        // nodesWithAffinityPods); no allocation per node either way.
        if scan_incoming || !existing_kept {
            for node in snapshot.nodes.iter() {
                // The count first: it lives in the NodeInfo, the labels behind another pointer.
                if (!scan_incoming && node.affinity_pods == 0) || node.labels().is_empty() {
                    continue;
                }
                if scan_incoming {
                    for e in &node.pods {
                        visit(&mut score, e, node);
                    }
                } else {
                    for e in node.pods_with_affinity() {
                        visit(&mut score, e, node);
                    }
                }
            }
        }
        if score.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, score);
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<TopologyScore>(PRE_SCORE_KEY) else {
            return Ok(0);
        };
        Ok(s.of(node.labels()))
    }

    /// Min-max scaling to 0..=100, as kube-scheduler does (scores can be negative).
    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        if state
            .read::<TopologyScore>(PRE_SCORE_KEY)
            .is_none_or(|s| s.is_empty())
        {
            return Status::success();
        }
        let (min, max) = scores
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let diff = max - min;
        for s in scores.iter_mut() {
            *s = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)) as i64
            } else {
                0
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

    fn node(name: &str, zone: Option<&str>) -> NodeInfo {
        node_with(name, |n| {
            if let Some(z) = zone {
                n.metadata
                    .labels
                    .get_or_insert_default()
                    .insert("zone".into(), z.into());
            }
        })
    }

    /// A pod from JSON pieces: labels, namespace and an affinity block.
    fn pod(
        name: &str,
        ns: &str,
        labels: serde_json::Value,
        affinity: serde_json::Value,
        node: Option<&str>,
    ) -> PodInfo {
        pod_with(|p| {
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some(ns.into());
            p.metadata.uid = Some(format!("uid-{name}"));
            p.metadata.labels = serde_json::from_value(labels).ok();
            if let Some(s) = p.spec.as_mut() {
                s.affinity = serde_json::from_value(affinity).ok();
                s.node_name = node.map(String::from);
            }
        })
    }

    fn term(app: &str, key: &str) -> serde_json::Value {
        json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key})
    }

    fn snapshot(
        nodes: Vec<(NodeInfo, Vec<PodInfo>)>,
        namespaces: &[(&str, &[(&str, &str)])],
    ) -> Snapshot {
        let infos = nodes
            .into_iter()
            .map(|(mut n, pods)| {
                for p in pods {
                    n.add_pod(Arc::new(p));
                }
                Arc::new(n)
            })
            .collect();
        let ns = namespaces
            .iter()
            .map(|(n, l)| {
                (
                    n.to_string(),
                    l.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                )
            })
            .collect();
        Snapshot {
            namespaces: Arc::new(ns),
            ..Snapshot::from_nodes(infos)
        }
    }

    /// Filter results per node, in snapshot order.
    fn filter_all(pod: &PodInfo, snap: &Snapshot) -> Vec<(Code, String)> {
        let plugin = InterPodAffinity::new(Default::default());
        let mut state = CycleState::new();
        let (_, s) = plugin.pre_filter(&mut state, pod, snap);
        if s.is_skip() {
            return snap
                .nodes
                .iter()
                .map(|_| (Code::Success, String::new()))
                .collect();
        }
        snap.nodes
            .iter()
            .map(|n| {
                let s = plugin.filter(&state, pod, n);
                (s.code, s.message())
            })
            .collect()
    }

    #[test]
    fn required_anti_affinity_of_the_incoming_pod() {
        let snap = snapshot(
            vec![
                (
                    node("n1", Some("a")),
                    vec![pod(
                        "web-1",
                        "default",
                        json!({"app": "web"}),
                        json!(null),
                        Some("n1"),
                    )],
                ),
                (node("n2", Some("a")), vec![]),
            ],
            &[],
        );
        let incoming = pod(
            "p",
            "default",
            json!({"app": "web"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("web", "kubernetes.io/hostname")]}}),
            None,
        );
        assert_eq!(
            filter_all(&incoming, &snap),
            vec![
                (Code::Unschedulable, REASON_ANTI_AFFINITY.into()),
                (Code::Success, String::new())
            ]
        );
    }

    #[test]
    fn required_affinity_by_zone_and_missing_topology_label() {
        let snap = snapshot(
            vec![
                (
                    node("a1", Some("a")),
                    vec![pod(
                        "db",
                        "default",
                        json!({"app": "db"}),
                        json!(null),
                        Some("a1"),
                    )],
                ),
                (node("a2", Some("a")), vec![]),
                (node("b1", Some("b")), vec![]),
                (node("none", None), vec![]),
            ],
            &[],
        );
        let incoming = pod(
            "p",
            "default",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", "zone")]}}),
            None,
        );
        let got: Vec<Code> = filter_all(&incoming, &snap)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(
            got,
            vec![
                Code::Success,
                Code::Success,
                Code::UnschedulableAndUnresolvable,
                Code::UnschedulableAndUnresolvable
            ]
        );
    }

    #[test]
    fn the_first_pod_of_a_self_affine_group_may_land() {
        let snap = snapshot(vec![(node("n1", Some("a")), vec![])], &[]);
        let incoming = pod(
            "p",
            "default",
            json!({"app": "x"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("x", "zone")]}}),
            None,
        );
        assert_eq!(
            filter_all(&incoming, &snap),
            vec![(Code::Success, String::new())]
        );
        // Not self-matching: nothing to be near, so nowhere.
        let other = pod(
            "q",
            "default",
            json!({"app": "y"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("x", "zone")]}}),
            None,
        );
        assert_eq!(filter_all(&other, &snap)[0].1, REASON_AFFINITY);
    }

    #[test]
    fn existing_pods_anti_affinity_is_symmetric() {
        let guard = pod(
            "guard",
            "default",
            json!({"app": "guard"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("web", "zone")]}}),
            Some("a1"),
        );
        let snap = snapshot(
            vec![
                (node("a1", Some("a")), vec![guard]),
                (node("a2", Some("a")), vec![]),
                (node("b1", Some("b")), vec![]),
            ],
            &[],
        );
        let incoming = pod("p", "default", json!({"app": "web"}), json!(null), None);
        let got: Vec<String> = filter_all(&incoming, &snap)
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        assert_eq!(
            got,
            vec![
                REASON_EXISTING_ANTI_AFFINITY.to_string(),
                REASON_EXISTING_ANTI_AFFINITY.to_string(),
                String::new()
            ]
        );
    }

    #[test]
    fn namespaces_and_namespace_selector() {
        let db_elsewhere = pod("db", "data", json!({"app": "db"}), json!(null), Some("a1"));
        let snap = snapshot(
            vec![
                (node("a1", Some("a")), vec![db_elsewhere]),
                (node("b1", Some("b")), vec![]),
            ],
            &[("data", &[("team", "storage")]), ("default", &[])],
        );
        // Own namespace only: the db pod in "data" does not count.
        let same_ns = pod(
            "p",
            "default",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", "zone")]}}),
            None,
        );
        assert!(
            filter_all(&same_ns, &snap)
                .iter()
                .all(|(c, _)| *c == Code::UnschedulableAndUnresolvable)
        );
        let mut t = term("db", "zone");
        t["namespaceSelector"] = json!({"matchLabels": {"team": "storage"}});
        let selected = pod(
            "p",
            "default",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [t]}}),
            None,
        );
        let got: Vec<Code> = filter_all(&selected, &snap)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(got, vec![Code::Success, Code::UnschedulableAndUnresolvable]);
    }

    #[test]
    fn preferred_terms_score_by_topology() {
        let snap = snapshot(
            vec![
                (
                    node("a1", Some("a")),
                    vec![pod(
                        "db",
                        "default",
                        json!({"app": "db"}),
                        json!(null),
                        Some("a1"),
                    )],
                ),
                (node("a2", Some("a")), vec![]),
                (node("b1", Some("b")), vec![]),
            ],
            &[],
        );
        let incoming = pod(
            "p",
            "default",
            json!({"app": "web"}),
            json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": term("db", "zone")}
            ]}}),
            None,
        );
        let plugin = InterPodAffinity::new(Default::default());
        let mut state = CycleState::new();
        assert!(
            plugin
                .pre_score(&mut state, &incoming, &Default::default(), &snap)
                .is_success()
        );
        let mut scores: Vec<i64> = snap
            .nodes
            .iter()
            .map(|n| plugin.score(&state, &incoming, n).unwrap_or(-1))
            .collect();
        assert_eq!(scores, vec![10, 10, 0]);
        plugin.normalize(&state, &incoming, &mut scores);
        assert_eq!(scores, vec![100, 100, 0]);
    }

    #[test]
    fn preemption_what_if_updates_counts() {
        let web = pod(
            "web-1",
            "default",
            json!({"app": "web"}),
            json!(null),
            Some("n1"),
        );
        let snap = snapshot(vec![(node("n1", Some("a")), vec![web.clone()])], &[]);
        let incoming = pod(
            "p",
            "default",
            json!({"app": "web"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("web", "kubernetes.io/hostname")]}}),
            None,
        );
        let plugin = InterPodAffinity::new(Default::default());
        let mut state = CycleState::new();
        plugin.pre_filter(&mut state, &incoming, &snap);
        let n1 = &snap.nodes[0];
        assert!(!plugin.filter(&state, &incoming, n1).is_success());
        plugin.remove_pod(&mut state, &incoming, &web, n1);
        assert!(plugin.filter(&state, &incoming, n1).is_success());
    }
}
