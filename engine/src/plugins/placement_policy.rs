//! PlacementPolicy: the pod's placement policy (PlacementPolicy or ClusterPlacementPolicy)
//! applied. Always on; a pod no policy selects skips it.
//!
//! - PreFilter finds the policy (an invalid one keeps the pod Pending, naming the field)
//!   and the groups (clusters, regions, zones, providers) its owner's pods already use.
//! - Filter keeps a node only in a cluster the policy's affinity and groups allow, and
//!   not in a group beyond `maxGroups`.
//! - PreScore picks among the feasible nodes: the first cluster group that has any, then
//!   the clusters that add a group while fewer than `minGroups` are used, then the
//!   clusters the division favours (weights: the largest deficit; dynamic and aggregated
//!   as ClusterCapacity counts room, leaf-accurately).
//! - Score: 100 for the picked nodes, 50 for the rest of the first group, 0 elsewhere; its
//!   weight outweighs every other score plugin together, so the policy decides and the
//!   other plugins choose among the nodes it favours.
//!
//! Policies override the profile's ClusterWeights, ClusterCapacity and ClusterTiers
//! arguments: those skip a pod whose policy divides or groups.
//! The record this plugin keeps in the cycle state is in [`super::helper::placement_state`],
//! where those plugins, the taint plugins and explanations read it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use mcsched_shared::keys;
use mcsched_shared::policy::{DivisionType, PlacementPolicySpec, SpreadBy};

use super::helper::cluster_placement::{
    fewest_clusters, fits_per_cluster, largest_deficit, placed_per_cluster,
};
use super::helper::placement_state::{self, Applied, applied};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, MIN_NODE_SCORE, Plugin,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Status,
};
use crate::leaf::cycle::{LEAF_CYCLE_KEY, LeafCycle};
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

pub(crate) const NAME: &str = "PlacementPolicy";

pub(crate) struct PlacementPolicy;

fn by_name(by: SpreadBy) -> &'static str {
    match by {
        SpreadBy::Cluster => "clusters",
        SpreadBy::Region => "regions",
        SpreadBy::Zone => "zones",
        SpreadBy::Provider => "providers",
    }
}

/// A cluster's cost: the host's 0, a virtual node's `mcsched.io/cost` label, else last.
fn cost_of(node: &NodeInfo) -> i64 {
    if node.cluster.is_none() {
        return 0;
    }
    node.labels()
        .get(keys::COST_LABEL)
        .and_then(|c| c.parse::<i64>().ok())
        .unwrap_or(i64::MAX)
}

/// The index of the first cluster group `node` belongs to (0 without groups).
fn group_index(spec: &PlacementPolicySpec, node: &NodeInfo) -> Option<usize> {
    spec.group_index(node.cluster_name(), node.labels())
}

impl Plugin for PlacementPolicy {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::PolicyChange,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PodDelete,
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

impl PreFilterPlugin for PlacementPolicy {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let Some(policy) = snapshot.policies.for_pod(&pod.meta) else {
            return (None, Status::skip());
        };
        if let Some(e) = &policy.invalid {
            return (
                None,
                Status::unresolvable(format!("{} is invalid: {e}", policy.reference)),
            );
        }
        let in_use = policy
            .spec
            .spread
            .iter()
            .map(|c| match pod.controller_uid() {
                Some(owner) => placed_per_cluster(snapshot, owner, pod, |n| {
                    PlacementPolicySpec::group_of(c.by, n.cluster_name(), n.labels())
                })
                .into_keys()
                .collect(),
                None => BTreeSet::new(),
            })
            .collect();
        state.write(
            placement_state::KEY,
            Applied {
                policy,
                in_use,
                picked: None,
                group: None,
                notes: Vec::new(),
            },
        );
        (None, Status::success())
    }
}

impl FilterPlugin for PlacementPolicy {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(a) = applied(state) else {
            return Status::success();
        };
        let (spec, reference) = (&a.policy.spec, &a.policy.reference);
        let cluster = node.cluster_name();
        if let Some(aff) = &spec.cluster_affinity
            && !aff.allows(cluster, node.labels())
        {
            return Status::unresolvable(format!(
                "cluster {cluster} is not among the clusters {reference} allows"
            ));
        }
        if group_index(spec, node).is_none() {
            return Status::unresolvable(format!(
                "cluster {cluster} is in none of {reference}'s cluster groups"
            ));
        }
        for (c, used) in spec.spread.iter().zip(&a.in_use) {
            let Some(group) = PlacementPolicySpec::group_of(c.by, cluster, node.labels()) else {
                return Status::unresolvable(format!(
                    "cluster {cluster} has no {} label, which {reference} spreads by",
                    c.by.label().unwrap_or_default()
                ));
            };
            if let Some(max) = c.max_groups
                && !used.contains(&group)
                && used.len() as i64 >= i64::from(max)
            {
                return Status::unschedulable(format!(
                    "{reference} allows at most {max} {} and the owner's pods use {}",
                    by_name(c.by),
                    used.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Status::success()
    }
}

impl PreScorePlugin for PlacementPolicy {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &NodeList,
        snapshot: &Snapshot,
    ) -> Status {
        let leaves = state
            .read::<LeafCycle>(LEAF_CYCLE_KEY)
            .cloned()
            .unwrap_or_default();
        let Some(a) = state.read_mut::<Applied>(placement_state::KEY) else {
            return Status::skip();
        };
        let spec = a.policy.spec.clone();
        let mut notes = Vec::new();
        // The first group with a feasible node; the rest wait for it to fill.
        let first = nodes.iter().filter_map(|n| group_index(&spec, n)).min();
        let in_group: Vec<&Arc<NodeInfo>> = nodes
            .iter()
            .filter(|n| first.is_some() && group_index(&spec, n) == first)
            .collect();
        let mut candidates: HashSet<String> = in_group
            .iter()
            .map(|n| n.cluster_name().to_string())
            .collect();
        if let (Some(i), false) = (first, spec.cluster_groups.is_empty()) {
            notes.push(format!(
                "cluster group {} (the first with a feasible node)",
                spec.cluster_groups[i].name
            ));
        }
        let group = candidates.clone();
        // minGroups: while the owner uses fewer groups, a new group first.
        for (c, used) in spec.spread.iter().zip(&a.in_use) {
            let Some(min) = c.min_groups else { continue };
            if used.len() as i64 >= i64::from(min) {
                continue;
            }
            let new: HashSet<String> = in_group
                .iter()
                .filter(|n| {
                    PlacementPolicySpec::group_of(c.by, n.cluster_name(), n.labels())
                        .is_some_and(|g| !used.contains(&g))
                })
                .map(|n| n.cluster_name().to_string())
                .collect();
            if !new.is_empty() {
                notes.push(format!(
                    "{} of {} in use, at least {min} wanted: a new one first",
                    used.len(),
                    by_name(c.by)
                ));
                candidates = new;
            }
        }
        if let Some(d) = &spec.division {
            let owner = pod.controller_uid();
            let placed: HashMap<String, i64> = owner
                .map(|o| {
                    placed_per_cluster(snapshot, o, pod, |n| Some(n.cluster_name().to_string()))
                })
                .unwrap_or_default();
            let chosen = match d.type_ {
                DivisionType::Weighted => {
                    let weights: HashMap<String, i64> =
                        d.weights.iter().map(|(c, w)| (c.clone(), *w)).collect();
                    largest_deficit(&weights, &placed, &candidates)
                }
                DivisionType::Dynamic | DivisionType::Aggregated => {
                    let named = |c: &Option<String>| {
                        c.clone()
                            .unwrap_or_else(|| keys::HOST_CLUSTER_NAME.to_string())
                    };
                    let fits: HashMap<String, i64> = fits_per_cluster(pod, snapshot, &leaves)
                        .iter()
                        .map(|(c, n)| (named(c), *n))
                        .collect();
                    if d.type_ == DivisionType::Dynamic {
                        let mut weights = fits.clone();
                        for (c, n) in &placed {
                            *weights.entry(c.clone()).or_default() += n;
                        }
                        largest_deficit(&weights, &placed, &candidates)
                    } else {
                        fewest_clusters(&placed, &fits, &candidates)
                    }
                }
            };
            let mut shown: Vec<String> = placed.iter().map(|(c, n)| format!("{c} {n}")).collect();
            shown.sort();
            let mut picked: Vec<&String> = chosen.iter().collect();
            picked.sort();
            notes.push(format!(
                "{:?} division{}; the owner's pods: {}; next: {}",
                d.type_,
                if d.weights.is_empty() {
                    String::new()
                } else {
                    format!(
                        " by {}",
                        d.weights
                            .iter()
                            .map(|(c, w)| format!("{c}:{w}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                },
                if shown.is_empty() {
                    "none yet".to_string()
                } else {
                    shown.join(", ")
                },
                picked
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if !chosen.is_empty() {
                candidates = chosen;
            }
        }
        if spec.prefer_cheapest && !candidates.is_empty() {
            let costs: HashMap<&str, i64> = nodes
                .iter()
                .map(|n| (n.cluster_name(), cost_of(n)))
                .collect();
            let cheapest = candidates
                .iter()
                .map(|c| costs.get(c.as_str()).copied().unwrap_or(i64::MAX))
                .min()
                .unwrap_or(i64::MAX);
            candidates.retain(|c| costs.get(c.as_str()).copied().unwrap_or(i64::MAX) == cheapest);
            let mut named: Vec<&String> = candidates.iter().collect();
            named.sort();
            notes.push(format!(
                "cheapest: {} (cost {})",
                named
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                if cheapest == i64::MAX {
                    "unknown".to_string()
                } else {
                    cheapest.to_string()
                }
            ));
        }
        a.picked = Some(candidates);
        a.group = Some(group);
        a.notes = notes;
        Status::success()
    }
}

impl ScorePlugin for PlacementPolicy {
    /// A cluster's score: a virtual node is scored itself, not as its leaf nodes.
    fn scores_members(&self) -> bool {
        false
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(a) = applied(state) else {
            return Ok(MIN_NODE_SCORE);
        };
        let cluster = node.cluster_name();
        let has = |s: &Option<HashSet<String>>| s.as_ref().is_some_and(|s| s.contains(cluster));
        Ok(if has(&a.picked) {
            MAX_NODE_SCORE
        } else if has(&a.group) {
            MAX_NODE_SCORE / 2
        } else {
            MIN_NODE_SCORE
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::Change;
    use crate::plugins::helper::cluster_placement::tests_support::virtual_node;
    use crate::plugins::testing::node_with;
    use serde_json::json;

    fn snapshot_with(policy: serde_json::Value, nodes: Vec<NodeInfo>) -> Snapshot {
        let mut set = crate::policies::PolicySet::default();
        set.apply_namespaced(Change::Apply(
            Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": "web", "namespace": "default"}, "spec": policy}),
                )
                .expect("policy"),
            ),
            false,
        ));
        let mut s = Snapshot::from_nodes(nodes.into_iter().map(Arc::new).collect());
        s.policies = Arc::new(set);
        s
    }

    fn replica(name: &str, node: Option<&str>) -> PodInfo {
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    /// Runs PreFilter, Filter and PreScore+Score; the score per node, or its Filter reason.
    fn run(snapshot: &Snapshot, pod: &PodInfo) -> Vec<(String, Result<i64, String>)> {
        let p = PlacementPolicy;
        let mut state = CycleState::new();
        let (_, s) = p.pre_filter(&mut state, pod, snapshot);
        if !s.is_success() {
            return vec![("prefilter".into(), Err(s.message()))];
        }
        let feasible: Vec<Arc<NodeInfo>> = snapshot
            .nodes
            .iter()
            .filter(|n| p.filter(&state, pod, n).is_success())
            .cloned()
            .collect();
        let list = NodeList::from_nodes(feasible);
        p.pre_score(&mut state, pod, &list, snapshot);
        snapshot
            .nodes
            .iter()
            .map(|n| {
                let f = p.filter(&state, pod, n);
                let r = if f.is_success() {
                    p.score(&state, pod, n).map_err(|e| e.message())
                } else {
                    Err(f.message())
                };
                (n.name.to_string(), r)
            })
            .collect()
    }

    fn three() -> Vec<NodeInfo> {
        vec![
            node_with("host-a", |_| {}),
            virtual_node("east", &[("topology.kubernetes.io/region", "us")]),
            virtual_node("west", &[("topology.kubernetes.io/region", "eu")]),
        ]
    }

    #[test]
    fn the_record_is_kept_under_the_plugins_name() {
        assert_eq!(placement_state::KEY, NAME);
    }

    #[test]
    fn a_pod_no_policy_selects_skips() {
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "db"}}}),
            three(),
        );
        let mut state = CycleState::new();
        let (_, st) = PlacementPolicy.pre_filter(&mut state, &replica("r", None), &s);
        assert!(st.is_skip());
    }

    #[test]
    fn exclusion_and_names_filter_clusters() {
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}},
                "clusterAffinity": {"clusterNames": ["host", "east"], "exclude": ["east"]}}),
            three(),
        );
        // Named and excluded at once is refused as invalid, naming the field.
        assert_eq!(
            run(&s, &replica("r", None))[0].1,
            Err("PlacementPolicy default/web is invalid: spec.clusterAffinity.exclude: cluster east is both named and excluded".into())
        );
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "clusterAffinity": {"exclude": ["east"]}}),
            three(),
        );
        let r = run(&s, &replica("r", None));
        assert_eq!(r[0].1, Ok(100));
        assert_eq!(
            r[1].1,
            Err("cluster east is not among the clusters PlacementPolicy default/web allows".into())
        );
        assert_eq!(r[2].1, Ok(100));
    }

    #[test]
    fn groups_fall_back_in_order_and_weights_divide() {
        let mut nodes = three();
        // Two of the owner's replicas already run in east.
        for (i, n) in nodes.iter_mut().enumerate().skip(1).take(1) {
            n.add_pod(Arc::new(replica(
                &format!("old-{i}-a"),
                Some(&n.name.clone()),
            )));
            n.add_pod(Arc::new(replica(
                &format!("old-{i}-b"),
                Some(&n.name.clone()),
            )));
        }
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}},
                "clusterGroups": [{"name": "leaves", "clusterNames": ["east", "west"]}, {"name": "home", "clusterNames": ["host"]}],
                "division": {"type": "Weighted", "weights": {"east": 1, "west": 1}}}),
            nodes,
        );
        let r = run(&s, &replica("new", None));
        // east holds 2, west 0: west is next; the host waits for the leaves to fill.
        assert_eq!(
            r.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>(),
            [Ok(0), Ok(50), Ok(100)]
        );
    }

    #[test]
    fn cluster_tolerations_count_on_virtual_nodes_only() {
        use crate::plugins::taint_toleration::TaintToleration;
        let taint = |n: &mut k8s_openapi::api::core::v1::Node| {
            n.spec.get_or_insert_default().taints = Some(vec![
                serde_json::from_value(json!({"key": "maintenance", "effect": "NoSchedule"}))
                    .expect("taint"),
            ]);
        };
        let mut west = virtual_node("west", &[]);
        let mut n = (*west.node).clone();
        taint(&mut n);
        west.set_node(Arc::new(n));
        let host = node_with("host-a", taint);
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}},
                "clusterTolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]}),
            vec![host, west],
        );
        let pod = replica("r", None);
        let mut state = CycleState::new();
        PlacementPolicy.pre_filter(&mut state, &pod, &s);
        let tt = TaintToleration;
        assert!(
            tt.filter(&state, &pod, &s.nodes[1]).is_success(),
            "the cluster's taint is tolerated"
        );
        assert!(
            !tt.filter(&state, &pod, &s.nodes[0]).is_success(),
            "a host node's is not"
        );
        assert!(
            !tt.filter(&CycleState::new(), &pod, &s.nodes[1])
                .is_success(),
            "without the policy"
        );
    }

    #[test]
    fn the_cheapest_among_what_the_policy_leaves_equal() {
        let nodes = vec![
            node_with("host-a", |_| {}),
            virtual_node("east", &[("mcsched.io/cost", "1")]),
            virtual_node("west", &[("mcsched.io/cost", "5")]),
            virtual_node("south", &[]),
        ];
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "preferCheapest": true,
                "clusterAffinity": {"exclude": ["host"]}}),
            nodes,
        );
        let r: Vec<_> = run(&s, &replica("r", None))
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        // The rest of the group still outranks anything outside it.
        assert_eq!(r[1..], [Ok(100), Ok(50), Ok(50)]);
    }

    #[test]
    fn min_groups_prefers_a_new_region_while_too_few_are_used() {
        let mut nodes = three();
        nodes[1].add_pod(Arc::new(replica("a", Some("mcsched-east"))));
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "clusterAffinity": {"exclude": ["host"]},
                "spread": [{"by": "region", "minGroups": 2}]}),
            nodes.clone(),
        );
        let r = run(&s, &replica("b", None));
        // us is in use; eu is new: west first.
        assert_eq!(r[1].1, Ok(50));
        assert_eq!(r[2].1, Ok(100));
        // With two regions in use the preference ends.
        nodes[2].add_pod(Arc::new(replica("b", Some("mcsched-west"))));
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "clusterAffinity": {"exclude": ["host"]},
                "spread": [{"by": "region", "minGroups": 2}]}),
            nodes,
        );
        let r = run(&s, &replica("c", None));
        assert_eq!((r[1].1.clone(), r[2].1.clone()), (Ok(100), Ok(100)));
    }

    #[test]
    fn aggregated_division_keeps_the_owner_where_it_is() {
        let mut nodes = three();
        nodes[2].add_pod(Arc::new(replica("a", Some("mcsched-west"))));
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "clusterAffinity": {"exclude": ["host"]},
                "division": {"type": "Aggregated"}}),
            nodes,
        );
        let r = run(&s, &replica("b", None));
        assert_eq!((r[1].1.clone(), r[2].1.clone()), (Ok(50), Ok(100)));
    }

    #[test]
    fn max_groups_keeps_the_owner_in_the_regions_it_uses() {
        let mut nodes = three();
        nodes.push(virtual_node(
            "south",
            &[("topology.kubernetes.io/region", "sa")],
        ));
        nodes[1].add_pod(Arc::new(replica("a", Some("mcsched-east"))));
        nodes[2].add_pod(Arc::new(replica("b", Some("mcsched-west"))));
        let s = snapshot_with(
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "clusterAffinity": {"exclude": ["host"]},
                "spread": [{"by": "region", "maxGroups": 2}]}),
            nodes,
        );
        let r = run(&s, &replica("c", None));
        assert_eq!(r[1].1, Ok(100));
        assert_eq!(r[2].1, Ok(100));
        assert_eq!(
            r[3].1,
            Err("PlacementPolicy default/web allows at most 2 regions and the owner's pods use eu, us".into())
        );
    }
}
