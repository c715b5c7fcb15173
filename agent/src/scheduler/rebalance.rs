//! The opt-in rebalancer of placement policies (`spec.rebalance`), run by the leader: per
//! owner, the pod placed worst by its policy now — in a cluster the policy no longer
//! allows, in a later cluster group, or in a cluster furthest over its weighted share — is
//! evicted through the Eviction API (PodDisruptionBudgets hold) only when a replacement,
//! scheduled by the live cycle's own path on the current snapshot (the pod still in place),
//! would land somewhere better. One pod per owner at a time, until its replacement is
//! bound, and at most `maxInFlight` owners per policy.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use mcsched_shared::policy::{DivisionType, PlacementPolicySpec};
use tracing::info;

use super::{Shared, schedule_pod};
use mcsched_engine::framework::CycleState;
use mcsched_engine::framework::runtime::CycleRecord;
use mcsched_engine::policies::Policy;
use mcsched_engine::snapshot::{NodeInfo, PodInfo, Snapshot};

/// An owner whose replacement has not shown up by then is released.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(120);

/// An owner's bound pods with their nodes.
type Placed = Vec<(Arc<PodInfo>, Arc<NodeInfo>)>;

struct InFlight {
    policy: String,
    evicted: String,
    bound_before: usize,
    at: Instant,
}

#[derive(Default)]
pub struct Rebalancer {
    /// By owner UID.
    in_flight: HashMap<String, InFlight>,
}

/// How badly a pod on `node` is placed, larger is worse: outside what the policy allows,
/// then a later group, then how far its cluster is over its weighted share.
fn badness(
    spec: &PlacementPolicySpec,
    node: &NodeInfo,
    counts: &BTreeMap<String, i64>,
    n: i64,
) -> (bool, usize, i128) {
    let (c, labels) = (node.cluster_name(), node.labels());
    (
        !spec.allows(c, labels),
        spec.group_index(c, labels).unwrap_or(usize::MAX),
        over_share(spec, c, counts, n),
    )
}

/// `W·count − n·w` for the cluster: positive when it holds more than its share (scaled by
/// the total weight W); 0 without a Weighted division.
fn over_share(
    spec: &PlacementPolicySpec,
    cluster: &str,
    counts: &BTreeMap<String, i64>,
    n: i64,
) -> i128 {
    let Some(d) = spec
        .division
        .as_ref()
        .filter(|d| d.type_ == DivisionType::Weighted)
    else {
        return 0;
    };
    let total: i128 = d.weights.values().map(|w| i128::from((*w).max(0))).sum();
    let w = i128::from(d.weights.get(cluster).copied().unwrap_or(0).max(0));
    i128::from(counts.get(cluster).copied().unwrap_or(0)) * total - i128::from(n) * w
}

impl Rebalancer {
    /// One round over every rebalancing policy; returns per policy the refusal (with the
    /// grant that allows evictions), for its status.
    pub async fn round(&mut self, shared: &Shared, snapshot: &Snapshot) -> HashMap<String, String> {
        let mut refused = HashMap::new();
        // Owner → its bound, not terminating pods, with their nodes; under its policy.
        let mut owners: HashMap<String, (Arc<Policy>, Placed)> = HashMap::new();
        let mut terminating: HashMap<String, usize> = HashMap::new();
        for node in snapshot.nodes.iter() {
            for pod in &node.pods {
                let Some(owner) = pod.controller_uid() else {
                    continue;
                };
                if pod.terminating() {
                    *terminating.entry(owner.to_string()).or_default() += 1;
                    continue;
                }
                let Some(policy) = snapshot.policies.for_pod(&pod.meta) else {
                    continue;
                };
                if policy.spec.rebalance.is_none() || policy.invalid.is_some() {
                    continue;
                }
                owners
                    .entry(owner.to_string())
                    .or_insert_with(|| (policy.clone(), Vec::new()))
                    .1
                    .push((pod.clone(), node.clone()));
            }
        }
        // Release owners whose replacement is bound (or that waited too long).
        self.in_flight.retain(|owner, f| {
            let bound = owners.get(owner).map_or(0, |(_, pods)| pods.len());
            let evicted_gone = !owners
                .get(owner)
                .is_some_and(|(_, pods)| pods.iter().any(|(p, _)| p.key == f.evicted));
            let done = evicted_gone
                && bound >= f.bound_before
                && terminating.get(owner).copied().unwrap_or(0) == 0;
            !done && f.at.elapsed() < IN_FLIGHT_TIMEOUT
        });
        let mut busy: HashMap<String, usize> = HashMap::new();
        for f in self.in_flight.values() {
            *busy.entry(f.policy.clone()).or_default() += 1;
        }
        let mut by_owner: Vec<_> = owners.into_iter().collect();
        by_owner.sort_by(|a, b| a.0.cmp(&b.0));
        for (owner, (policy, pods)) in by_owner {
            let limit = policy
                .spec
                .rebalance
                .as_ref()
                .map_or(1, |r| r.max_in_flight.max(1)) as usize;
            if self.in_flight.contains_key(&owner)
                || terminating.contains_key(&owner)
                || refused.contains_key(&policy.reference)
                || busy.get(&policy.reference).copied().unwrap_or(0) >= limit
            {
                continue;
            }
            let n = pods.len() as i64;
            let mut counts: BTreeMap<String, i64> = BTreeMap::new();
            for (_, node) in &pods {
                *counts.entry(node.cluster_name().to_string()).or_default() += 1;
            }
            let spec = &policy.spec;
            let Some((victim, node)) = pods.iter().max_by_key(|(p, node)| {
                (
                    badness(spec, node, &counts, n),
                    p.meta.creation_timestamp.clone(),
                )
            }) else {
                continue;
            };
            let worst = badness(spec, node, &counts, n);
            // Nothing to gain: allowed, in the first group, within a pod of its share.
            let total_weight: i128 = spec.division.as_ref().map_or(0, |d| {
                d.weights.values().map(|w| i128::from((*w).max(0))).sum()
            });
            if !worst.0 && worst.1 == 0 && worst.2 < total_weight.max(1) {
                continue;
            }
            let Some(target) = replacement(shared, &victim.pod(), snapshot).await else {
                continue;
            };
            let target_in = target_cluster(snapshot, &target.2);
            let better = if worst.0 {
                // Where the policy no longer allows it: anywhere it allows.
                !target.0
            } else if target.1 < worst.1 {
                // An earlier cluster group has room again.
                true
            } else {
                // Same group: from a cluster over its share to one under it.
                target.1 == worst.1
                    && target_in != node.cluster_name()
                    && over_share(spec, &target_in, &counts, n) < 0
            };
            if !better {
                continue;
            }
            match evict(shared, &victim.pod()).await {
                Ok(()) => {
                    info!(pod = %victim.key, from = node.cluster_name(), to = %target_in,
                        policy = %policy.reference, "rebalancing: evicted; its replacement goes where the policy places it");
                    *busy.entry(policy.reference.clone()).or_default() += 1;
                    self.in_flight.insert(
                        owner,
                        InFlight {
                            policy: policy.reference.clone(),
                            evicted: victim.key.clone(),
                            bound_before: n as usize,
                            at: Instant::now(),
                        },
                    );
                }
                Err(Refusal::Forbidden(ns)) => {
                    refused.insert(
                        policy.reference.clone(),
                        format!(
                            "the agent may not evict pods in namespace {ns} to rebalance: {}",
                            mcsched_engine::policies::placement_keeper_grant(
                                &ns,
                                shared.leaves.agent_namespace()
                            )
                        ),
                    );
                }
                // A PodDisruptionBudget allows no disruption now, or the pod changed: later.
                Err(Refusal::NotNow(why)) => {
                    tracing::debug!(pod = %victim.key, why, "not evicted this round")
                }
            }
        }
        refused
    }
}

fn target_cluster(snapshot: &Snapshot, node: &str) -> String {
    snapshot
        .get(node)
        .map(|n| n.cluster_name().to_string())
        .unwrap_or_default()
}

/// Where a replacement of `pod` would go now — whether the policy disallows it there, its
/// cluster group, its node — by the live cycle's path on `snapshot`, nothing reserved.
async fn replacement(
    shared: &Shared,
    pod: &Pod,
    snapshot: &Snapshot,
) -> Option<(bool, usize, String)> {
    let fw = shared.profiles.for_pod(pod)?.clone();
    let mut copy = pod.clone();
    let uid = copy.metadata.uid.clone().unwrap_or_default();
    copy.metadata.uid = Some(format!("{uid}-replacement"));
    copy.metadata.name = copy.metadata.name.map(|n| format!("{n}-replacement"));
    copy.metadata.deletion_timestamp = None;
    if let Some(spec) = copy.spec.as_mut() {
        spec.node_name = None;
    }
    copy.status = None;
    let info = PodInfo::new(Arc::new(copy));
    let mut state = CycleState::new();
    let mut record = CycleRecord::default();
    let r = schedule_pod(
        &fw,
        &shared.extenders,
        &mut state,
        &info,
        snapshot,
        &mut record,
        false,
    )
    .await
    .ok()?;
    let node = snapshot.get(&r.node)?;
    let policy = snapshot.policies.for_pod(&pod.metadata)?;
    let (disallowed, group, _) = badness(&policy.spec, node, &BTreeMap::new(), 0);
    Some((disallowed, group, r.node))
}

enum Refusal {
    Forbidden(String),
    NotNow(String),
}

async fn evict(shared: &Shared, pod: &Pod) -> Result<(), Refusal> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    // Written out there: kube's `evict` drops the UID precondition. Through the client
    // that answers a disruption budget's 429 at once (kube's default retries it for
    // minutes, holding up the round).
    let client = shared
        .leaves
        .eviction_client()
        .unwrap_or_else(|| shared.bind_ctx.client.clone());
    match crate::placement::cluster_failover::evict(&client, &ns, &name, &uid).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 403 => Err(Refusal::Forbidden(ns)),
        Err(e) => Err(Refusal::NotNow(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_engine::plugins::helper::cluster_placement::tests_support::virtual_node;

    fn spec(v: serde_json::Value) -> PlacementPolicySpec {
        serde_json::from_value(v).expect("spec")
    }

    #[test]
    fn the_worst_placed_is_outside_then_later_then_furthest_over_its_share() {
        let groups = spec(
            serde_json::json!({"podSelector": {}, "clusterAffinity": {"exclude": ["south"]},
            "clusterGroups": [{"name": "a", "clusterNames": ["east"]}, {"name": "b", "clusterNames": ["west", "south"]}]}),
        );
        let counts = BTreeMap::new();
        let east = virtual_node("east", &[]);
        let west = virtual_node("west", &[]);
        let south = virtual_node("south", &[]);
        assert!(badness(&groups, &south, &counts, 0) > badness(&groups, &west, &counts, 0));
        assert!(badness(&groups, &west, &counts, 0) > badness(&groups, &east, &counts, 0));
        assert_eq!(badness(&groups, &east, &counts, 0), (false, 0, 0));

        let weighted = spec(serde_json::json!({"podSelector": {},
            "division": {"type": "Weighted", "weights": {"east": 2, "west": 1}}}));
        // 12 pods, 6/6 against 8/4: west holds 2 more than its share (W·6 − 12·1 = 6 = 2W).
        let counts = BTreeMap::from([("east".to_string(), 6), ("west".to_string(), 6)]);
        assert_eq!(over_share(&weighted, "west", &counts, 12), 6);
        assert_eq!(over_share(&weighted, "east", &counts, 12), -6);
        assert!(badness(&weighted, &west, &counts, 12) > badness(&weighted, &east, &counts, 12));
    }
}
