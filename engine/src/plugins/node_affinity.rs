//! NodeAffinity: `spec.nodeSelector` and required node affinity filter nodes (plus the
//! scheduler-enforced `addedAffinity`); preferred terms score them by weight.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{NodeAffinity as ApiNodeAffinity, PreferredSchedulingTerm};
use mcsched_shared::selectors::{node_selector_matches, node_selector_term_matches};

use super::helper::node_affinity::{pod_matches_node, pod_node_affinity, required};
use super::helper::normalize_to_max;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "NodeAffinity";
pub(crate) const REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
pub(crate) const REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";

#[derive(Default)]
pub(crate) struct NodeAffinity {
    added: Option<ApiNodeAffinity>,
}

impl NodeAffinity {
    pub(crate) fn new(added: Option<ApiNodeAffinity>) -> Self {
        NodeAffinity { added }
    }
}

#[derive(Clone)]
struct Preferred(Vec<PreferredSchedulingTerm>);

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
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

impl PreFilterPlugin for NodeAffinity {
    /// Restricts the cycle to named nodes when every required term pins `metadata.name`.
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let obj = pod.object();
        let has_selector = obj
            .spec
            .as_ref()
            .and_then(|s| s.node_selector.as_ref())
            .is_some_and(|s| !s.is_empty());
        let req = required(pod_node_affinity(&obj));
        if !has_selector && req.is_none() && required(self.added.as_ref()).is_none() {
            return (None, Status::skip());
        }
        let Some(req) = req else {
            return (None, Status::success());
        };
        let mut names: Option<HashSet<String>> = Some(HashSet::new());
        for term in &req.node_selector_terms {
            let pinned: Option<HashSet<String>> = term
                .match_fields
                .iter()
                .flatten()
                .filter(|f| f.key == "metadata.name" && f.operator == "In")
                .map(|f| {
                    f.values
                        .iter()
                        .flatten()
                        .cloned()
                        .collect::<HashSet<String>>()
                })
                .reduce(|a, b| a.intersection(&b).cloned().collect());
            match (pinned, names.as_mut()) {
                (Some(p), Some(acc)) => acc.extend(p),
                _ => names = None,
            }
        }
        match names {
            Some(n) if n.is_empty() => (None, Status::unresolvable(REASON_POD)),
            other => (other, Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if let Some(added) = required(self.added.as_ref())
            && !node_selector_matches(added, node.labels(), &node.name)
        {
            return Status::unresolvable(REASON_ENFORCED);
        }
        if pod_matches_node(pod, node) {
            Status::success()
        } else {
            Status::unresolvable(REASON_POD)
        }
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &crate::snapshot::NodeList,
        _snapshot: &Snapshot,
    ) -> Status {
        let obj = pod.object();
        let terms: Vec<PreferredSchedulingTerm> = [pod_node_affinity(&obj), self.added.as_ref()]
            .into_iter()
            .flatten()
            .flat_map(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
            })
            .filter(|t| t.weight != 0)
            .cloned()
            .collect();
        if terms.is_empty() {
            return Status::skip();
        }
        state.write(NAME, Preferred(terms));
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(Preferred(terms)) = state.read::<Preferred>(NAME) else {
            return Ok(0);
        };
        Ok(terms
            .iter()
            .filter(|t| node_selector_term_matches(&t.preference, node.labels(), &node.name))
            .map(|t| i64::from(t.weight))
            .sum())
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        normalize_to_max(scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_with, pod_with};
    use k8s_openapi::api::core::v1::{
        Affinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };

    fn zone_node(name: &str, zone: &str) -> NodeInfo {
        node_with(name, |n| {
            n.metadata
                .labels
                .get_or_insert_default()
                .insert("zone".into(), zone.into());
        })
    }

    fn term(key: &str, op: &str, values: &[&str]) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            match_fields: None,
        }
    }

    fn with_affinity(a: ApiNodeAffinity) -> PodInfo {
        pod_with(|p| {
            p.spec.get_or_insert_default().affinity = Some(Affinity {
                node_affinity: Some(a),
                ..Default::default()
            });
        })
    }

    #[test]
    fn node_selector_and_required_affinity() {
        let pod = pod_with(|p| {
            p.spec.get_or_insert_default().node_selector =
                Some([("zone".to_string(), "a".to_string())].into());
        });
        let s = NodeAffinity::default().filter(&CycleState::new(), &pod, &zone_node("n", "b"));
        assert_eq!(s.message(), REASON_POD);
        assert!(
            NodeAffinity::default()
                .filter(&CycleState::new(), &pod, &zone_node("n", "a"))
                .is_success()
        );

        let pod = with_affinity(ApiNodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![term("zone", "In", &["x"]), term("zone", "In", &["b"])],
            }),
            ..Default::default()
        });
        assert!(
            NodeAffinity::default()
                .filter(&CycleState::new(), &pod, &zone_node("n", "b"))
                .is_success()
        );
        assert!(
            !NodeAffinity::default()
                .filter(&CycleState::new(), &pod, &zone_node("n", "a"))
                .is_success()
        );
    }

    #[test]
    fn added_affinity_is_enforced() {
        let plugin = NodeAffinity::new(Some(ApiNodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![term("zone", "In", &["a"])],
            }),
            ..Default::default()
        }));
        let s = plugin.filter(&CycleState::new(), &pod_with(|_| {}), &zone_node("n", "b"));
        assert_eq!(s.message(), REASON_ENFORCED);
    }

    #[test]
    fn pinned_node_names_restrict_the_cycle() {
        let t = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec!["n2".into()]),
            }]),
        };
        let pod = with_affinity(ApiNodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![t],
            }),
            ..Default::default()
        });
        let (result, s) =
            NodeAffinity::default().pre_filter(&mut CycleState::new(), &pod, &Snapshot::default());
        assert!(s.is_success());
        assert_eq!(result, Some(HashSet::from(["n2".to_string()])));
    }

    #[test]
    fn preferred_terms_score_by_weight() {
        let pod = with_affinity(ApiNodeAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                PreferredSchedulingTerm {
                    weight: 10,
                    preference: term("zone", "In", &["a"]),
                },
                PreferredSchedulingTerm {
                    weight: 30,
                    preference: term("zone", "In", &["b"]),
                },
            ]),
            ..Default::default()
        });
        let plugin = NodeAffinity::default();
        let mut state = CycleState::new();
        assert!(
            plugin
                .pre_score(&mut state, &pod, &Default::default(), &Snapshot::default())
                .is_success()
        );
        let nodes = [
            zone_node("a", "a"),
            zone_node("b", "b"),
            zone_node("c", "c"),
        ];
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| plugin.score(&state, &pod, n).unwrap_or(-1))
            .collect();
        assert_eq!(scores, vec![10, 30, 0]);
        plugin.normalize(&state, &pod, &mut scores);
        assert_eq!(scores, vec![33, 100, 0]);
    }
}
