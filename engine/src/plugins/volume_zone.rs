//! VolumeZone (kube-scheduler's `volumezone`): the zone and region labels of the
//! PersistentVolumes a pod's claims are bound to (topology.kubernetes.io/* and the legacy
//! failure-domain.beta.kubernetes.io/*, values possibly `__`-joined lists) must match the
//! node's. Nodes without any of these labels accept every volume; unbound claims of a
//! WaitForFirstConsumer class are left to VolumeBinding. PreFilter gathers the labels and
//! skips when there are none.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
    VOLUMES_KEY,
};
use crate::plugins::helper::volumes::{class_of, pod_volumes};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot, VolumeObjects};

pub(crate) const NAME: &str = "VolumeZone";
const STATE_KEY: &str = "PreFilterVolumeZone";

pub(crate) const REASON_CONFLICT: &str = "node(s) had no available volume zone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
/// In kube's order, which decides which mismatch is found first.
const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

pub(crate) struct VolumeZone;

/// One topology label of one volume: the node's value for `key` must be in `values`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PvTopology {
    key: &'static str,
    values: BTreeSet<String>,
}

#[derive(Debug, Clone)]
struct State(Arc<Vec<PvTopology>>);

/// A beta label on the volume may be matched by the GA label on the node.
fn to_ga_label(key: &str) -> &str {
    match key {
        BETA_REGION => REGION,
        BETA_ZONE => ZONE,
        other => other,
    }
}

/// LabelZonesToSet: `__`-separated, trimmed; an empty element makes the label invalid.
fn zones_of(value: &str) -> Option<BTreeSet<String>> {
    value
        .split("__")
        .map(|z| {
            let z = z.trim();
            (!z.is_empty()).then(|| z.to_string())
        })
        .collect()
}

/// getPVTopologies: invalid label values are ignored, as kube does.
fn pv_topologies(pv: &PersistentVolume) -> Vec<PvTopology> {
    let Some(labels) = pv.metadata.labels.as_ref() else {
        return Vec::new();
    };
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|&key| {
            let values = zones_of(labels.get(key)?)?;
            Some(PvTopology { key, values })
        })
        .collect()
}

/// getPVbyPod: the topologies of the volumes bound to the pod's claims.
fn topologies_of(pod: &PodInfo, vols: &VolumeObjects) -> Result<Vec<PvTopology>, Status> {
    let mut out = Vec::new();
    let claims = pod_volumes(pod)
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref());
    for c in claims {
        let name = &c.claim_name;
        if name.is_empty() {
            return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
        }
        let Some(pvc) = vols.claims.get(&format!("{}/{name}", pod.namespace)) else {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim \"{name}\" not found"
            )));
        };
        let pv_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .unwrap_or_default();
        if pv_name.is_empty() {
            let class = class_of(pvc);
            if class.is_empty() {
                return Err(Status::unresolvable(
                    "PersistentVolumeClaim had no pv name and storageClass name",
                ));
            }
            let Some(sc) = vols.storage_classes.get(&class) else {
                return Err(Status::unresolvable(format!(
                    "storageclass.storage.k8s.io \"{class}\" not found"
                )));
            };
            match sc.volume_binding_mode.as_deref() {
                None => {
                    return Err(Status::unresolvable(format!(
                        "VolumeBindingMode not set for StorageClass \"{class}\""
                    )));
                }
                // Not bound yet: VolumeBinding picks a volume that fits the node.
                Some("WaitForFirstConsumer") => continue,
                Some(_) => return Err(Status::unresolvable("PersistentVolume had no name")),
            }
        }
        let Some(pv) = vols.volumes.get(pv_name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolume \"{pv_name}\" not found"
            )));
        };
        out.extend(pv_topologies(pv));
    }
    Ok(out)
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        // kube: StorageClass/Add, Node/Add|UpdateNodeLabel|UpdateNodeTaint,
        // PVC/Add|Update and PV/Add|Update.
        vec![
            ClusterEvent::StorageClassChange,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdate,
            ClusterEvent::PvcChange,
            ClusterEvent::PvChange,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        match topologies_of(pod, &snapshot.volumes) {
            Err(s) => (None, s),
            Ok(t) if t.is_empty() => (None, Status::skip()),
            Ok(t) => {
                state.write(STATE_KEY, State(Arc::new(t)));
                (None, Status::success())
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod_volumes(pod).is_empty() {
            return Status::success();
        }
        // Without PreFilter (not enabled in the profile), compute here as kube does.
        let computed;
        let topologies: &[PvTopology] = match state.read::<State>(STATE_KEY) {
            Some(State(t)) => t,
            None => {
                let Some(vols) = state.read::<Arc<VolumeObjects>>(VOLUMES_KEY) else {
                    return Status::error(format!("reading {VOLUMES_KEY:?} from cycleState"));
                };
                computed = match topologies_of(pod, vols) {
                    Ok(t) => t,
                    Err(s) => return s,
                };
                &computed
            }
        };
        let labels = node.labels();
        // A node without topology labels (a single-zone cluster) takes any volume.
        if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
            return Status::success();
        }
        for t in topologies {
            let value = labels.get(t.key).or_else(|| labels.get(to_ga_label(t.key)));
            if !value.is_some_and(|v| t.values.contains(v)) {
                return Status::unresolvable(REASON_CONFLICT);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::{Value, json};

    fn pod(claims: &[&str]) -> PodInfo {
        let vols: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}], "volumes": vols}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    fn node(labels: Value) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}}))
            .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    /// Claims `pvc_<pv>` bound to PVs with these labels, and unbound claims of classes
    /// `wffc`, `immediate` and `unset` (no binding mode).
    fn snapshot(pvs: &[(&str, Value)]) -> Snapshot {
        let mut s = Snapshot::from_nodes(Vec::new());
        let mut v = (*s.volumes).clone();
        let mut claim = |name: &str, spec: Value| {
            let c: PersistentVolumeClaim = serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
            )
            .expect("pvc");
            v.claims.insert(format!("default/{name}"), Arc::new(c));
        };
        for (pv, _) in pvs {
            claim(&format!("pvc_{pv}"), json!({"volumeName": pv}));
        }
        claim("pvc_missing_pv", json!({"volumeName": "gone"}));
        for class in ["wffc", "immediate", "unset", "no-such-class"] {
            claim(
                &format!("unbound_{class}"),
                json!({"storageClassName": class}),
            );
        }
        claim("unbound_no_class", json!({}));
        for (pv, labels) in pvs {
            let p: PersistentVolume =
                serde_json::from_value(json!({"metadata": {"name": pv, "labels": labels}}))
                    .expect("pv");
            v.volumes.insert(pv.to_string(), Arc::new(p));
        }
        for (name, mode) in [
            ("wffc", Some("WaitForFirstConsumer")),
            ("immediate", Some("Immediate")),
            ("unset", None),
        ] {
            let sc: StorageClass = serde_json::from_value(json!({
                "metadata": {"name": name}, "provisioner": "p", "volumeBindingMode": mode}))
            .expect("sc");
            v.storage_classes.insert(name.into(), Arc::new(sc));
        }
        s.volumes = Arc::new(v);
        s
    }

    fn run(p: &PodInfo, snap: &Snapshot, n: &NodeInfo) -> (Status, Option<Status>) {
        let mut state = CycleState::new();
        let (_, pre) = VolumeZone.pre_filter(&mut state, p, snap);
        if !pre.is_success() {
            return (pre, None);
        }
        (pre, Some(VolumeZone.filter(&state, p, n)))
    }

    #[test]
    fn bound_volumes_must_share_the_node_zone() {
        let snap = snapshot(&[
            ("pv_zone_a", json!({ZONE: "us-west1-a"})),
            ("pv_beta_zone_a", json!({BETA_ZONE: "us-west1-a"})),
            ("pv_multi", json!({ZONE: "us-west1-a__us-west1-b"})),
            ("pv_region", json!({REGION: "us-west1"})),
            (
                "pv_zone_and_region",
                json!({ZONE: "us-west1-a", REGION: "us-west1"}),
            ),
            ("pv_invalid", json!({ZONE: "us-west1-a__"})),
            ("pv_unlabelled", json!({"other": "x"})),
        ]);
        let ga_a = json!({ZONE: "us-west1-a", REGION: "us-west1"});
        let beta_b = json!({BETA_ZONE: "us-west1-b", BETA_REGION: "us-west1"});
        let ga_c = json!({ZONE: "us-west1-c", REGION: "us-west1"});
        // (case, claim, node labels, filter passes)
        let cases = [
            ("same zone", "pvc_pv_zone_a", ga_a.clone(), true),
            ("other zone", "pvc_pv_zone_a", ga_c.clone(), false),
            (
                "beta pv label, GA node label",
                "pvc_pv_beta_zone_a",
                ga_a.clone(),
                true,
            ),
            (
                "beta pv label, beta node label",
                "pvc_pv_beta_zone_a",
                beta_b.clone(),
                false,
            ),
            (
                "GA pv label, only beta node label",
                "pvc_pv_zone_a",
                beta_b.clone(),
                false,
            ),
            ("multi-zone volume", "pvc_pv_multi", beta_b.clone(), false),
            (
                "multi-zone volume, node in b",
                "pvc_pv_multi",
                json!({ZONE: "us-west1-b"}),
                true,
            ),
            ("region only", "pvc_pv_region", ga_c.clone(), true),
            (
                "region mismatch",
                "pvc_pv_region",
                json!({REGION: "eu"}),
                false,
            ),
            (
                "zone and region",
                "pvc_pv_zone_and_region",
                ga_a.clone(),
                true,
            ),
            (
                "node without topology labels",
                "pvc_pv_zone_a",
                json!({"x": "y"}),
                true,
            ),
        ];
        for (name, claim, labels, passes) in cases {
            let (pre, f) = run(&pod(&[claim]), &snap, &node(labels));
            assert!(pre.is_success(), "{name}: {pre}");
            let f = f.expect("filter ran");
            if passes {
                assert!(f.is_success(), "{name}: {f}");
            } else {
                assert_eq!(f.code, Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(f.reasons, [REASON_CONFLICT], "{name}");
            }
        }
    }

    #[test]
    fn pre_filter_skips_and_errors_like_kube() {
        let snap = snapshot(&[
            ("pv_invalid", json!({ZONE: "us-west1-a__"})),
            ("pv_unlabelled", json!({"other": "x"})),
        ]);
        // (case, claims, PreFilter code, message)
        let cases = [
            ("no claims", vec![], Code::Skip, ""),
            (
                "unlabelled volume",
                vec!["pvc_pv_unlabelled"],
                Code::Skip,
                "",
            ),
            (
                "invalid label ignored",
                vec!["pvc_pv_invalid"],
                Code::Skip,
                "",
            ),
            ("unbound wffc claim", vec!["unbound_wffc"], Code::Skip, ""),
            (
                "claim missing",
                vec!["nope"],
                Code::UnschedulableAndUnresolvable,
                "persistentvolumeclaim \"nope\" not found",
            ),
            (
                "volume missing",
                vec!["pvc_missing_pv"],
                Code::UnschedulableAndUnresolvable,
                "persistentvolume \"gone\" not found",
            ),
            (
                "unbound immediate claim",
                vec!["unbound_immediate"],
                Code::UnschedulableAndUnresolvable,
                "PersistentVolume had no name",
            ),
            (
                "class without binding mode",
                vec!["unbound_unset"],
                Code::UnschedulableAndUnresolvable,
                "VolumeBindingMode not set for StorageClass \"unset\"",
            ),
            (
                "class missing",
                vec!["unbound_no-such-class"],
                Code::UnschedulableAndUnresolvable,
                "storageclass.storage.k8s.io \"no-such-class\" not found",
            ),
            (
                "no class",
                vec!["unbound_no_class"],
                Code::UnschedulableAndUnresolvable,
                "PersistentVolumeClaim had no pv name and storageClass name",
            ),
        ];
        for (name, claims, code, msg) in cases {
            let mut state = CycleState::new();
            let (_, s) = VolumeZone.pre_filter(&mut state, &pod(&claims), &snap);
            assert_eq!(s.code, code, "{name}: {s}");
            assert_eq!(s.message(), msg, "{name}");
        }
    }

    #[test]
    fn filter_without_pre_filter_reads_the_framework_volumes() {
        let snap = snapshot(&[("pv_zone_a", json!({ZONE: "us-west1-a"}))]);
        let mut state = CycleState::new();
        state.write(VOLUMES_KEY, snap.volumes.clone());
        let p = pod(&["pvc_pv_zone_a"]);
        assert!(
            VolumeZone
                .filter(&state, &p, &node(json!({ZONE: "us-west1-a"})))
                .is_success()
        );
        assert_eq!(
            VolumeZone
                .filter(&state, &p, &node(json!({ZONE: "us-west1-b"})))
                .reasons,
            [REASON_CONFLICT]
        );
    }
}
