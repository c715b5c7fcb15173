//! The record the PlacementPolicy plugin keeps in a cycle's state, and what other plugins
//! and the scheduler read from it: the policy applied to the pod, its cluster
//! tolerations, whether it overrides the profile's cluster-policy plugins, and its
//! explanation.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use crate::framework::CycleState;
use crate::policies::Policy;

/// The key of the record in the cycle state: the PlacementPolicy plugin's name.
pub(crate) const KEY: &str = "PlacementPolicy";

/// The pod's policy, and the groups of each spread constraint its owner already uses.
#[derive(Clone)]
pub(crate) struct Applied {
    pub(crate) policy: Arc<Policy>,
    pub(crate) in_use: Vec<BTreeSet<String>>,
    /// Set at PreScore: clusters picked, and the clusters of the first usable group.
    pub(crate) picked: Option<HashSet<String>>,
    pub(crate) group: Option<HashSet<String>>,
    /// What PreScore weighed, for explanations.
    pub(crate) notes: Vec<String>,
}

/// The policy applied to the pod of `state`'s cycle, if any.
pub(crate) fn applied(state: &CycleState) -> Option<&Applied> {
    state.read::<Applied>(KEY)
}

/// The cluster tolerations of the pod's policy, which count on virtual nodes as the pod's own.
pub(crate) fn cluster_tolerations(state: &CycleState) -> &[k8s_openapi::api::core::v1::Toleration] {
    applied(state).map_or(&[], |a| a.policy.spec.cluster_tolerations.as_slice())
}

/// The policy applied in `state`'s cycle, for its explanation.
pub fn explained(state: &CycleState) -> Option<mcsched_shared::explain::AppliedPolicy> {
    applied(state).map(|a| mcsched_shared::explain::AppliedPolicy {
        name: a.policy.reference.clone(),
        notes: a.notes.clone(),
    })
}

/// Whether `pod` falls under a policy that divides its owner's replicas or orders
/// clusters: then the profile's cluster-policy plugins step aside.
pub(crate) fn overrides_profile(state: &CycleState) -> bool {
    applied(state).is_some_and(|a| {
        a.policy.spec.division.is_some() || !a.policy.spec.cluster_groups.is_empty()
    })
}
