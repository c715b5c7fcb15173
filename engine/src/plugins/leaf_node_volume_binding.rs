//! LeafNodeVolumeBinding (Kosmos's): VolumeBinding on host nodes; on a virtual
//! node, a pod whose claims are all unbound WaitForFirstConsumer claims passes and the
//! binding is left to the leaf, where pod sync creates the claims. A claim bound to a host
//! volume never follows its pod to a virtual node, and one whose copy lives in a leaf
//! (annotated `mcsched.io/bound-in-cluster`) never goes to a host node or another leaf.
//! Filter, Reserve, Unreserve and PreBind, as Kosmos lists them; PreScore and Score are
//! VolumeBinding's (StorageCapacityScoring), which scores virtual nodes 0 (its Filter
//! never saw them).

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use mcsched_shared::keys;

use super::helper::volumes::{names_claim, pod_claims, usable_claim};
use crate::framework::{
    BindContext, ClusterEvent, CycleState, FilterPlugin, Plugin, PreBindPlugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ReservePlugin, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, NodeList, PodInfo, Snapshot};

pub(crate) const NAME: &str = "LeafNodeVolumeBinding";
const STATE_KEY: &str = "LeafNodeVolumeBinding/claims";

/// What this pod's claims allow, decided once per cycle in PreFilter.
#[derive(Debug, Clone, Default)]
struct Claims {
    /// Claims bound to a host PersistentVolume.
    host_bound: Vec<String>,
    /// Claims whose copy lives in a leaf, with that leaf.
    leaf_bound: Vec<(String, String)>,
}

pub(crate) struct LeafNodeVolumeBinding {
    /// kube's VolumeBinding for host nodes; `None` when the agent has none, in which case
    /// host nodes are not judged on volumes.
    host: Option<Arc<dyn Plugin>>,
}

impl LeafNodeVolumeBinding {
    pub(crate) fn new(host: Option<Arc<dyn Plugin>>) -> Self {
        LeafNodeVolumeBinding { host }
    }
}

fn is_virtual_name(node: &str) -> bool {
    node.starts_with(keys::VIRTUAL_NODE_PREFIX)
}

/// Whether a host volume already names the claim in its claimRef (a binding a PreBind
/// began, even one whose pod was then placed again): the PV controller completes it, so
/// the claim is as good as bound to that volume and its pod must not go to a leaf.
fn claimed_by_host_volume(
    pvc: &PersistentVolumeClaim,
    volumes: &HashMap<String, Arc<PersistentVolume>>,
) -> bool {
    volumes.values().any(|pv| names_claim(pv, pvc))
}

impl Plugin for LeafNodeVolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PvcChange,
            ClusterEvent::PvChange,
            ClusterEvent::StorageClassChange,
            ClusterEvent::CsiNodeChange,
            ClusterEvent::CsiDriverChange,
            ClusterEvent::StorageCapacityChange,
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
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for LeafNodeVolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let pod_claims = pod_claims(pod);
        if pod_claims.is_empty() {
            return (None, Status::skip());
        }
        let mut claims = Claims::default();
        for claim in &pod_claims {
            let name = &claim.name;
            // VolumeBinding's own refusals (missing, lost, being deleted, another pod's).
            let pvc = match usable_claim(pod, claim, &snapshot.volumes) {
                Ok(pvc) => pvc,
                Err(why) => return (None, Status::unresolvable(why.to_string())),
            };
            if let Some(cluster) = pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::BOUND_IN_CLUSTER_ANNOTATION))
            {
                claims.leaf_bound.push((name.clone(), cluster.clone()));
            } else if pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_some_and(|v| !v.is_empty())
                || claimed_by_host_volume(pvc, &snapshot.volumes.volumes)
            {
                claims.host_bound.push(name.clone());
            }
        }
        state.write(STATE_KEY, claims);
        // The host checks run as VolumeBinding's; its node restriction (bound local
        // volumes) is not applied here, as virtual nodes are judged below instead.
        let status = match self.host.as_ref().and_then(|h| h.as_pre_filter()) {
            Some(h) => h.pre_filter(state, pod, snapshot).1,
            None => Status::success(),
        };
        if status.is_skip() {
            return (None, Status::success());
        }
        (None, status)
    }
}

impl FilterPlugin for LeafNodeVolumeBinding {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let claims = state.read::<Claims>(STATE_KEY).cloned().unwrap_or_default();
        match node.cluster.as_deref() {
            Some(cluster) => {
                if let Some(name) = claims.host_bound.first() {
                    return Status::unresolvable(format!(
                        "node(s) is a virtual node and persistentvolumeclaim \"{name}\" is bound to a host volume"
                    ));
                }
                if let Some((name, other)) = claims.leaf_bound.iter().find(|(_, c)| c != cluster) {
                    return Status::unresolvable(format!(
                        "persistentvolumeclaim \"{name}\" is bound in leaf cluster {other}"
                    ));
                }
                Status::success()
            }
            None => {
                if let Some((name, other)) = claims.leaf_bound.first() {
                    return Status::unresolvable(format!(
                        "persistentvolumeclaim \"{name}\" is bound in leaf cluster {other}"
                    ));
                }
                match self.host.as_ref().and_then(|h| h.as_filter()) {
                    Some(h) => h.filter(state, pod, node),
                    None => Status::success(),
                }
            }
        }
    }
}

impl PreScorePlugin for LeafNodeVolumeBinding {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &NodeList,
        snapshot: &Snapshot,
    ) -> Status {
        match self.host.as_ref().and_then(|h| h.as_pre_score()) {
            Some(h) => h.pre_score(state, pod, nodes, snapshot),
            None => Status::skip(),
        }
    }
}

impl ScorePlugin for LeafNodeVolumeBinding {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        match self.host.as_ref().and_then(|h| h.as_score()) {
            Some(h) if node.cluster.is_none() => h.score(state, pod, node),
            _ => Ok(0),
        }
    }
}

impl ReservePlugin for LeafNodeVolumeBinding {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        if is_virtual_name(node) {
            return Status::success();
        }
        match self.host.as_ref().and_then(|h| h.as_reserve()) {
            Some(h) => h.reserve(state, pod, node),
            None => Status::success(),
        }
    }

    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        if is_virtual_name(node) {
            return;
        }
        if let Some(h) = self.host.as_ref().and_then(|h| h.as_reserve()) {
            h.unreserve(state, pod, node);
        }
    }
}

impl PreBindPlugin for LeafNodeVolumeBinding {
    fn pre_bind<'a>(
        &'a self,
        ctx: &'a BindContext,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        match self.host.as_ref().and_then(|h| h.as_pre_bind()) {
            Some(h) if !is_virtual_name(node) => h.pre_bind(ctx, state, pod, node),
            _ => Box::pin(async { Status::success() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn pod_with_claim(claim: &str) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "db-0", "namespace": "ns"},
            "spec": {"containers": [], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    fn node(name: &str, cluster: Option<&str>) -> NodeInfo {
        let labels = cluster
            .map(|c| json!({"mcsched.io/cluster": c}))
            .unwrap_or(json!({}));
        let n: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
            .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn snapshot_with(claims: Vec<serde_json::Value>) -> Snapshot {
        let mut s = Snapshot::from_nodes(Vec::new());
        let mut volumes = (*s.volumes).clone();
        for c in claims {
            let pvc: PersistentVolumeClaim = serde_json::from_value(c).expect("pvc");
            let key = format!(
                "{}/{}",
                pvc.metadata.namespace.clone().unwrap_or_default(),
                pvc.metadata.name.clone().unwrap_or_default()
            );
            volumes.claims.insert(key, Arc::new(pvc));
        }
        s.volumes = Arc::new(volumes);
        s
    }

    fn verdicts(claim: serde_json::Value) -> (bool, bool, bool) {
        let p = LeafNodeVolumeBinding::new(None);
        let mut state = CycleState::new();
        let snap = snapshot_with(vec![claim]);
        let pod = pod_with_claim("data");
        let (_, s) = p.pre_filter(&mut state, &pod, &snap);
        assert!(s.is_success(), "{s:?}");
        (
            p.filter(&state, &pod, &node("host-a", None)).is_success(),
            p.filter(&state, &pod, &node("mcsched-east", Some("east")))
                .is_success(),
            p.filter(&state, &pod, &node("mcsched-west", Some("west")))
                .is_success(),
        )
    }

    #[test]
    fn claims_stay_on_their_side() {
        let unbound = json!({"metadata": {"name": "data", "namespace": "ns"}, "spec": {"storageClassName": "wffc"}});
        assert_eq!(verdicts(unbound), (true, true, true));
        let host_bound = json!({"metadata": {"name": "data", "namespace": "ns"}, "spec": {"volumeName": "pv-1"}});
        assert_eq!(verdicts(host_bound), (true, false, false));
        let in_east = json!({"metadata": {"name": "data", "namespace": "ns",
            "annotations": {"mcsched.io/bound-in-cluster": "east"}}, "spec": {}});
        assert_eq!(verdicts(in_east), (false, true, false));
    }

    /// A PreBind that wrote a host volume's claimRef and then failed leaves the claim
    /// unbound for a moment; the PV controller binds it all the same, so the pod's next
    /// cycle must not send it to a leaf (it would run there with the host volume held).
    #[test]
    fn a_claim_a_host_volume_names_stays_on_the_host() {
        let claim = json!({"metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": {"storageClassName": "wffc"}});
        let pv = |claim_ref: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(json!({"metadata": {"name": "pv-host-a"},
                "spec": {"storageClassName": "wffc", "claimRef": claim_ref}}))
            .expect("pv")
        };
        let verdicts_with = |pv: PersistentVolume| {
            let p = LeafNodeVolumeBinding::new(None);
            let mut state = CycleState::new();
            let mut snap = snapshot_with(vec![claim.clone()]);
            let mut volumes = (*snap.volumes).clone();
            volumes.volumes.insert("pv-host-a".into(), Arc::new(pv));
            snap.volumes = Arc::new(volumes);
            let pod = pod_with_claim("data");
            let (_, s) = p.pre_filter(&mut state, &pod, &snap);
            assert!(s.is_success(), "{s:?}");
            let west = p.filter(&state, &pod, &node("mcsched-west", Some("west")));
            (
                p.filter(&state, &pod, &node("host-a", None)).is_success(),
                west.message(),
            )
        };
        let refused = (
            true,
            "node(s) is a virtual node and persistentvolumeclaim \"data\" is bound to a host volume"
                .to_string(),
        );
        assert_eq!(
            verdicts_with(pv(json!({"namespace": "ns", "name": "data", "uid": "u1"}))),
            refused
        );
        assert_eq!(
            verdicts_with(pv(json!({"namespace": "ns", "name": "data"}))),
            refused
        );
        // Another claim's volume, or an older claim of the same name's, is not this one's.
        for other in [
            json!({"namespace": "ns", "name": "other"}),
            json!({"namespace": "ns", "name": "data", "uid": "old"}),
        ] {
            assert_eq!(verdicts_with(pv(other)), (true, String::new()));
        }
    }

    #[test]
    fn a_missing_claim_is_unresolvable_and_no_claim_skips() {
        let p = LeafNodeVolumeBinding::new(None);
        let mut state = CycleState::new();
        let (_, s) = p.pre_filter(&mut state, &pod_with_claim("nope"), &snapshot_with(vec![]));
        assert_eq!(s.message(), "persistentvolumeclaim \"nope\" not found");
        let bare: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": []}}))
                .expect("pod");
        let (_, s) = p.pre_filter(
            &mut state,
            &PodInfo::new(Arc::new(bare)),
            &snapshot_with(vec![]),
        );
        assert!(s.is_skip());
    }
}
