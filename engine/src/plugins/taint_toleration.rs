//! TaintToleration: Filter rejects nodes with an untolerated NoSchedule/NoExecute taint;
//! Score prefers nodes with fewer untolerated PreferNoSchedule taints.

use k8s_openapi::api::core::v1::Toleration;
use mcsched_shared::taints;

use super::helper::default_normalize_score;
use super::helper::taints::{filter_taints, node_taints, policy_tolerates, tolerations};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin,
    Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "TaintToleration";

pub(crate) struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PodUpdate,
        ]
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

impl FilterPlugin for TaintToleration {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        filter_taints(pod, node, |t| policy_tolerates(state, node, t))
    }
}

#[derive(Clone)]
struct PreferNoScheduleTolerations(Vec<Toleration>);

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &crate::snapshot::NodeList,
        _snapshot: &Snapshot,
    ) -> Status {
        let obj = pod.object();
        let tols = tolerations(&obj)
            .iter()
            .filter(|t| {
                t.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
            })
            .cloned()
            .collect();
        state.write(NAME, PreferNoScheduleTolerations(tols));
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let tols = state
            .read::<PreferNoScheduleTolerations>(NAME)
            .map(|t| t.0.as_slice())
            .unwrap_or_default();
        let count = node_taints(node)
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule")
            .filter(|t| !tols.iter().any(|tol| taints::tolerates(tol, t)))
            .count();
        Ok(count as i64)
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::helper::taints::UNTOLERATED as REASON;
    use crate::plugins::testing::{node_with, pod_with};
    use k8s_openapi::api::core::v1::Taint;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn tol(key: &str, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Equal".into()),
            value: Some(value.into()),
            effect: Some(effect.into()),
            ..Default::default()
        }
    }

    #[test]
    fn filter_table() {
        let cases = [
            (vec![], vec![], true, ""),
            (
                vec![taint("dedicated", "user1", "NoSchedule")],
                vec![],
                false,
                REASON,
            ),
            (
                vec![taint("dedicated", "user1", "NoSchedule")],
                vec![tol("dedicated", "user1", "NoSchedule")],
                true,
                "",
            ),
            (
                vec![taint("dedicated", "user1", "NoSchedule")],
                vec![tol("dedicated", "user2", "NoSchedule")],
                false,
                REASON,
            ),
            (
                vec![taint("soft", "x", "PreferNoSchedule")],
                vec![],
                true,
                "",
            ),
            (
                vec![taint("evict", "x", "NoExecute")],
                vec![],
                false,
                REASON,
            ),
        ];
        for (taints, tols, ok, msg) in cases {
            let node = node_with("n", |n| {
                n.spec.get_or_insert_default().taints = Some(taints.clone());
            });
            let pod = pod_with(|p| {
                p.spec.get_or_insert_default().tolerations = Some(tols.clone());
            });
            let s = TaintToleration.filter(&CycleState::new(), &pod, &node);
            assert_eq!(s.is_success(), ok, "{taints:?} {tols:?}");
            assert_eq!(s.message(), msg);
            if !ok {
                assert_eq!(s.code, crate::framework::Code::UnschedulableAndUnresolvable);
            }
        }
    }

    #[test]
    fn the_leaf_taint_is_refused() {
        // LeafNodeTaintToleration tolerates it; the plain plugin keeps refusing it.
        let virtual_node = node_with("n", |n| {
            n.spec.get_or_insert_default().taints =
                Some(vec![taint("mcsched.io/leaf", "true", "NoSchedule")]);
        });
        assert!(
            !TaintToleration
                .filter(&CycleState::new(), &pod_with(|_| {}), &virtual_node)
                .is_success(),
            "the plain plugin keeps refusing the leaf taint"
        );
    }

    #[test]
    fn score_prefers_fewer_intolerable_prefer_no_schedule_taints() {
        let nodes = [
            node_with("clean", |_| {}),
            node_with("one", |n| {
                n.spec.get_or_insert_default().taints =
                    Some(vec![taint("a", "1", "PreferNoSchedule")]);
            }),
            node_with("two", |n| {
                n.spec.get_or_insert_default().taints = Some(vec![
                    taint("a", "1", "PreferNoSchedule"),
                    taint("b", "1", "PreferNoSchedule"),
                ]);
            }),
        ];
        let pod = pod_with(|_| {});
        let mut state = CycleState::new();
        TaintToleration.pre_score(&mut state, &pod, &Default::default(), &Snapshot::default());
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| TaintToleration.score(&state, &pod, n).unwrap_or(-1))
            .collect();
        assert_eq!(scores, vec![0, 1, 2]);
        TaintToleration.normalize(&state, &pod, &mut scores);
        assert_eq!(scores, vec![100, 50, 0]);
    }
}
