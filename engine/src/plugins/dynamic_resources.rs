//! DynamicResources, as far as mcsched goes: kube-scheduler v1.37 enables it by default,
//! and for a pod without resource claims it steps aside (PreFilter and PreScore Skip; its
//! PostFilter answers Unschedulable with no reason, which v1.37 leaves out of FailedScheduling
//! where v1.36 said "no new claims to deallocate"). Pods that do use claims are refused plainly:
//! mcsched does not allocate devices. When an earlier PreFilter plugin ended the cycle
//! before this one's PreFilter ran, its PostFilter finds no state and fails as kube's does
//! ("not found"), which ends PostFilter before preemption and is what FailedScheduling says.

use crate::framework::{
    CycleState, Framework, NodeStatuses, Plugin, PodGroupPostFilterPlugin, PodGroupRelief,
    PostFilterPlugin, PostFilterResult, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

pub(crate) const NAME: &str = "DynamicResources";
pub(crate) const REASON_UNSUPPORTED: &str =
    "pod uses resource claims, which mcsched does not allocate";
/// CycleState's error for a key nothing wrote, in kube's words.
pub(crate) const REASON_NO_STATE: &str = "not found";
const STATE_KEY: &str = "PreFilterDynamicResources";

/// What PreFilter saw; written before anything else, as kube's empty stateData.
#[derive(Clone, Copy)]
struct PreFiltered;

pub(crate) struct DynamicResources;

fn has_claims(pod: &PodInfo) -> bool {
    pod.object()
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_pod_group_post_filter(&self) -> Option<&dyn PodGroupPostFilterPlugin> {
        Some(self)
    }
}

/// kube's DynamicResources.PodGroupPostFilter deallocates claims the group's members
/// hold; mcsched allocates none, so there is none to release.
impl PodGroupPostFilterPlugin for DynamicResources {
    fn relief(&self) -> PodGroupRelief {
        PodGroupRelief::Nothing
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        state.write(STATE_KEY, PreFiltered);
        if has_claims(pod) {
            (None, Status::unresolvable(REASON_UNSUPPORTED))
        } else {
            (None, Status::skip())
        }
    }
}

impl PostFilterPlugin for DynamicResources {
    fn post_filter(
        &self,
        _fw: &Framework,
        state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        _statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        if state.read::<PreFiltered>(STATE_KEY).is_none() {
            return (PostFilterResult::default(), Status::error(REASON_NO_STATE));
        }
        (
            PostFilterResult::default(),
            Status::new(crate::framework::Code::Unschedulable, Vec::new()),
        )
    }
}

/// As kube's PreScore: nothing to score for a pod without claims, so Score is skipped.
impl PreScorePlugin for DynamicResources {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &NodeList,
        _snapshot: &Snapshot,
    ) -> Status {
        if has_claims(pod) {
            Status::success()
        } else {
            Status::skip()
        }
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Result<i64, Status> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::pod_with;
    use k8s_openapi::api::core::v1::PodResourceClaim;

    #[test]
    fn steps_aside_without_claims_and_refuses_claims() {
        let plain = pod_with(|_| {});
        let (_, s) =
            DynamicResources.pre_filter(&mut CycleState::new(), &plain, &Snapshot::default());
        assert!(s.is_skip());
        let with = pod_with(|p| {
            p.spec.get_or_insert_default().resource_claims = Some(vec![PodResourceClaim {
                name: "gpu".into(),
                ..Default::default()
            }]);
        });
        let (_, s) =
            DynamicResources.pre_filter(&mut CycleState::new(), &with, &Snapshot::default());
        assert_eq!(s.message(), REASON_UNSUPPORTED);
        let pre_score = |pod| {
            DynamicResources.pre_score(
                &mut CycleState::new(),
                pod,
                &NodeList::default(),
                &Snapshot::default(),
            )
        };
        assert!(pre_score(&plain).is_skip());
        assert!(pre_score(&with).is_success());
    }
}
