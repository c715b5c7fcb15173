//! NodeVolumeLimits (kube-scheduler's `nodevolumelimits`, the CSI limits): per CSI
//! driver, the distinct volumes the node's pods already use plus the pod's new ones may
//! not exceed the node's CSINode `spec.drivers[].allocatable.count`. Volumes come from
//! claims (bound: the PV's driver and handle; unbound: the class's provisioner and a
//! handle of the claim's own), generic ephemeral volumes, and in-tree AWS EBS, GCE PD,
//! Azure Disk, Cinder and Portworx volumes counted under their CSI drivers when the node
//! has a CSINode (migration is on for them in 1.36). VolumeLimitScaling (beta and on in
//! v1.37): a new volume whose driver's CSIDriver sets `preventPodSchedulingIfMissing`
//! rejects a node whose CSINode does not list that driver (or that has no CSINode),
//! before any limit is looked at: "<driver> CSI driver is not installed on the node"
//! (Unschedulable); drivers without a CSIDriver object pass. Not modelled:
//! VolumeAttachments without a pod on the node.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Volume};
use k8s_openapi::api::storage::v1::CSINode;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
    VOLUMES_KEY,
};
use crate::plugins::helper::volumes::{class_of, ephemeral_is_for_pod, pod_volumes};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot, VolumeObjects};

pub(crate) const NAME: &str = "NodeVolumeLimits";
pub(crate) const REASON_MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

/// checkCSIDriverOnNode: whether the node has `driver` as far as scheduling cares.
fn driver_installed(driver: &str, csi_node: Option<&CSINode>, vols: &VolumeObjects) -> bool {
    let opted_in = vols
        .csi_drivers
        .get(driver)
        .and_then(|d| d.spec.prevent_pod_scheduling_if_missing)
        == Some(true);
    if !opted_in {
        return true;
    }
    csi_node.is_some_and(|n| n.spec.drivers.iter().any(|d| d.name == driver))
}

const EBS_PLUGIN: &str = "kubernetes.io/aws-ebs";
const GCE_PD_PLUGIN: &str = "kubernetes.io/gce-pd";
const AZURE_DISK_PLUGIN: &str = "kubernetes.io/azure-disk";
const CINDER_PLUGIN: &str = "kubernetes.io/cinder";
const PORTWORX_PLUGIN: &str = "kubernetes.io/portworx-volume";
/// In-tree plugins the translation library can migrate but whose volumes kube does not
/// count (isCSIMigrationOn is false for them).
const UNCOUNTED_MIGRATABLE: [&str; 2] =
    ["kubernetes.io/azure-file", "kubernetes.io/vsphere-volume"];

pub(crate) struct NodeVolumeLimits {
    /// Prefix of the handles given to unbound claims: kube picks a random one so they
    /// never collide with a real volume's handle.
    unbound_prefix: String,
}

impl Default for NodeVolumeLimits {
    fn default() -> Self {
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        NodeVolumeLimits {
            unbound_prefix: format!("{random:016x}"),
        }
    }
}

/// The CSI driver an in-tree provisioner migrated to, for the plugins kube counts.
fn csi_driver_of(plugin: &str) -> Option<&'static str> {
    Some(match plugin {
        EBS_PLUGIN => "ebs.csi.aws.com",
        GCE_PD_PLUGIN => "pd.csi.storage.gke.io",
        AZURE_DISK_PLUGIN => "disk.csi.azure.com",
        CINDER_PLUGIN => "cinder.csi.openstack.org",
        PORTWORX_PLUGIN => "pxd.portworx.com",
        _ => return None,
    })
}

/// IsInlineMigratable: in-tree inline volumes the translation library knows.
fn inline_migratable(v: &Volume) -> bool {
    v.aws_elastic_block_store.is_some()
        || v.gce_persistent_disk.is_some()
        || v.azure_disk.is_some()
        || v.azure_file.is_some()
        || v.cinder.is_some()
        || v.vsphere_volume.is_some()
        || v.portworx_volume.is_some()
}

/// `aws://zone/vol-…` or a bare `vol-…`, as the EBS CSI driver's handle.
fn ebs_handle(volume_id: &str) -> String {
    match volume_id.strip_prefix("aws://") {
        Some(rest) => rest
            .split_once('/')
            .map_or("", |(_, path)| path)
            .trim_matches('/')
            .to_string(),
        None => volume_id.to_string(),
    }
}

/// The GCE PD CSI handle of a PV: zonal from one zone label, regional from several.
fn gce_pv_handle(pv: &PersistentVolume, pd_name: &str) -> Option<String> {
    let labels = pv.metadata.labels.as_ref()?;
    let zones = labels
        .get("topology.kubernetes.io/zone")
        .or_else(|| labels.get("failure-domain.beta.kubernetes.io/zone"))?;
    let zones: Vec<&str> = zones.split("__").collect();
    match zones.as_slice() {
        [""] | [] => None,
        [zone] => Some(format!("projects/UNSPECIFIED/zones/{zone}/disks/{pd_name}")),
        many => {
            let region_of = |z: &str| z.rsplit_once('-').map(|(r, _)| r.to_string());
            let region = region_of(many[0])?;
            many.iter()
                .all(|z| region_of(z).as_deref() == Some(region.as_str()))
                .then(|| format!("projects/UNSPECIFIED/regions/{region}/disks/{pd_name}"))
        }
    }
}

/// A PV's CSI driver and handle, translating the in-tree volumes kube counts when the
/// node has a CSINode.
fn pv_driver(pv: &PersistentVolume, csi_node: Option<&CSINode>) -> Option<(String, String)> {
    let spec = pv.spec.as_ref()?;
    if let Some(csi) = &spec.csi {
        return Some((csi.driver.clone(), csi.volume_handle.clone()));
    }
    csi_node?;
    let (plugin, handle) = if let Some(v) = &spec.aws_elastic_block_store {
        (EBS_PLUGIN, ebs_handle(&v.volume_id))
    } else if let Some(v) = &spec.gce_persistent_disk {
        (GCE_PD_PLUGIN, gce_pv_handle(pv, &v.pd_name)?)
    } else if let Some(v) = &spec.azure_disk {
        (AZURE_DISK_PLUGIN, v.disk_uri.clone())
    } else if let Some(v) = &spec.cinder {
        (CINDER_PLUGIN, v.volume_id.clone())
    } else if let Some(v) = &spec.portworx_volume {
        (PORTWORX_PLUGIN, v.volume_id.clone())
    } else {
        return None;
    };
    Some((csi_driver_of(plugin)?.to_string(), handle))
}

/// An inline in-tree volume's CSI driver and handle (checkAttachableInlineVolume).
fn inline_driver(v: &Volume, csi_node: Option<&CSINode>) -> Option<(String, String)> {
    csi_node?;
    let (plugin, handle) = if let Some(s) = &v.aws_elastic_block_store {
        (EBS_PLUGIN, ebs_handle(&s.volume_id))
    } else if let Some(s) = &v.gce_persistent_disk {
        // Inline disks carry no zone.
        (
            GCE_PD_PLUGIN,
            format!("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{}", s.pd_name),
        )
    } else if let Some(s) = &v.azure_disk {
        (AZURE_DISK_PLUGIN, s.disk_uri.clone())
    } else if let Some(s) = &v.cinder {
        (CINDER_PLUGIN, s.volume_id.clone())
    } else if let Some(s) = &v.portworx_volume {
        (PORTWORX_PLUGIN, s.volume_id.clone())
    } else {
        return None;
    };
    Some((csi_driver_of(plugin)?.to_string(), handle))
}

impl NodeVolumeLimits {
    /// getCSIDriverInfo: from the bound PV, else (no PV name or no such PV) from the
    /// claim's class.
    fn claim_driver(
        &self,
        pvc: &PersistentVolumeClaim,
        csi_node: Option<&CSINode>,
        vols: &VolumeObjects,
    ) -> Option<(String, String)> {
        let pv_name = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref());
        if let Some(pv) = pv_name
            .filter(|n| !n.is_empty())
            .and_then(|n| vols.volumes.get(n))
        {
            return pv_driver(pv, csi_node);
        }
        // Without a class the claim binds immediately, so it is bound before scheduling.
        let class = vols.storage_classes.get(&class_of(pvc))?;
        let handle = format!(
            "{}-{}/{}",
            self.unbound_prefix,
            pvc.metadata.namespace.as_deref().unwrap_or_default(),
            pvc.metadata.name.as_deref().unwrap_or_default()
        );
        let provisioner = class.provisioner.as_str();
        if let Some(driver) = csi_driver_of(provisioner) {
            csi_node?;
            return Some((driver.to_string(), handle));
        }
        if UNCOUNTED_MIGRATABLE.contains(&provisioner) {
            return None;
        }
        Some((provisioner.to_string(), handle))
    }

    /// filterAttachableVolumes: the pod's volumes as `driver/handle` → driver. A missing
    /// claim fails the pod being scheduled, and is not counted for pods on the node.
    fn attachable_volumes(
        &self,
        pod: &PodInfo,
        csi_node: Option<&CSINode>,
        vols: &VolumeObjects,
        new_pod: bool,
        out: &mut HashMap<String, String>,
    ) -> Result<(), Status> {
        let namespace = pod.namespace.as_str();
        let pod_name = pod.name.as_str();
        for v in pod_volumes(pod) {
            let (claim, ephemeral) = if let Some(c) = &v.persistent_volume_claim {
                (c.claim_name.clone(), false)
            } else if v.ephemeral.is_some() {
                (format!("{pod_name}-{}", v.name), true)
            } else {
                if let Some((driver, handle)) = inline_driver(v, csi_node) {
                    out.insert(format!("{driver}/{handle}"), driver);
                }
                continue;
            };
            if claim.is_empty() {
                return Err(Status::error("PersistentVolumeClaim had no name"));
            }
            let Some(pvc) = vols.claims.get(&format!("{namespace}/{claim}")) else {
                if new_pod {
                    return Err(Status::unresolvable(format!(
                        "looking up PVC {namespace}/{claim}: persistentvolumeclaim \"{claim}\" not found"
                    )));
                }
                continue;
            };
            if ephemeral {
                ephemeral_is_for_pod(pod, pvc).map_err(|e| Status::error(e.to_string()))?;
            }
            if let Some((driver, handle)) = self.claim_driver(pvc, csi_node, vols)
                && !driver.is_empty()
                && !handle.is_empty()
            {
                out.insert(format!("{driver}/{handle}"), driver);
            }
        }
        Ok(())
    }
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        // kube: CSINode/Add|Update, assigned Pod/Delete, PVC/Add.
        vec![
            ClusterEvent::CsiNodeChange,
            ClusterEvent::PodDelete,
            ClusterEvent::PvcChange,
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let counted = pod_volumes(pod).iter().any(|v| {
            v.persistent_volume_claim.is_some() || v.ephemeral.is_some() || inline_migratable(v)
        });
        if counted {
            (None, Status::success())
        } else {
            (None, Status::skip())
        }
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod_volumes(pod).is_empty() {
            return Status::success();
        }
        let Some(vols) = state.read::<Arc<VolumeObjects>>(VOLUMES_KEY) else {
            return Status::error(format!("reading {VOLUMES_KEY:?} from cycleState"));
        };
        // No CSINode: only CSI volumes count, and there are no limits to exceed.
        let csi_node = vols.csi_nodes.get(&*node.name).map(Arc::as_ref);
        let mut new_volumes = HashMap::new();
        if let Err(s) = self.attachable_volumes(pod, csi_node, vols, true, &mut new_volumes) {
            return s;
        }
        if new_volumes.is_empty() {
            return Status::success();
        }
        // kube walks a map here; sorted, the first missing driver named is always the same.
        let mut drivers: Vec<&str> = new_volumes.values().map(String::as_str).collect();
        drivers.sort_unstable();
        drivers.dedup();
        if let Some(missing) = drivers
            .into_iter()
            .find(|d| !driver_installed(d, csi_node, vols))
        {
            return Status::unschedulable(format!(
                "{missing} CSI driver is not installed on the node"
            ));
        }
        let limits: HashMap<&str, i64> = csi_node
            .into_iter()
            .flat_map(|n| n.spec.drivers.iter())
            .filter_map(|d| Some((d.name.as_str(), i64::from(d.allocatable.as_ref()?.count?))))
            .collect();
        if limits.is_empty() {
            return Status::success();
        }
        let mut attached = HashMap::new();
        for existing in &node.pods {
            if let Err(s) = self.attachable_volumes(existing, csi_node, vols, false, &mut attached)
            {
                return s;
            }
        }
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for (unique, driver) in &attached {
            // A volume the node already has takes no new attachment.
            new_volumes.remove(unique);
            *attached_count.entry(driver.as_str()).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        for driver in new_volumes.values() {
            *new_count.entry(driver.as_str()).or_default() += 1;
        }
        for (driver, count) in new_count {
            if let Some(max) = limits.get(driver)
                && attached_count.get(driver).copied().unwrap_or(0) + count > *max
            {
                return Status::unschedulable(REASON_MAX_VOLUME_COUNT);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testing::node_with;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::{Value, json};

    const EBS: &str = "ebs.csi.aws.com";
    const OTHER: &str = "other.csi.example.com";

    fn pod(name: &str, vols: Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c"}], "volumes": vols}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    fn claims(names: &[&str]) -> Value {
        Value::Array(
            names
                .iter()
                .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
                .collect(),
        )
    }

    /// Claims `c-<pv>` bound to CSI volumes `<pv>` of `driver`; unbound claims `u-<class>`.
    fn objects(pvs: &[(&str, &str)], csi_node: Option<Value>) -> Arc<VolumeObjects> {
        let mut v = VolumeObjects::default();
        let mut add_claim = |name: String, spec: Value, owner: Option<&str>| {
            let mut meta = json!({"name": name, "namespace": "ns"});
            if let Some(uid) = owner {
                meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
                    "name": "x", "uid": uid, "controller": true}]);
            }
            let c: PersistentVolumeClaim =
                serde_json::from_value(json!({"metadata": meta, "spec": spec})).expect("pvc");
            v.claims.insert(format!("ns/{name}"), Arc::new(c));
        };
        for (pv, _) in pvs {
            add_claim(format!("c-{pv}"), json!({"volumeName": pv}), None);
        }
        for class in ["csi-class", "ebs-intree", "azure-file", "missing-class"] {
            add_claim(
                format!("u-{class}"),
                json!({"storageClassName": class}),
                None,
            );
        }
        add_claim(
            "u-pv-gone".into(),
            json!({"volumeName": "gone", "storageClassName": "csi-class"}),
            None,
        );
        add_claim(
            "new-eph".into(),
            json!({"storageClassName": "csi-class"}),
            Some("uid-new"),
        );
        add_claim(
            "new-stolen".into(),
            json!({"storageClassName": "csi-class"}),
            Some("uid-other"),
        );
        add_claim(
            "c-intree-ebs".into(),
            json!({"volumeName": "intree-ebs"}),
            None,
        );
        for (pv, driver) in pvs {
            let p: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": pv},
                "spec": {"csi": {"driver": driver, "volumeHandle": format!("h-{pv}")}}}))
            .expect("pv");
            v.volumes.insert(pv.to_string(), Arc::new(p));
        }
        let p: PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": "intree-ebs"},
            "spec": {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}}}))
            .expect("pv");
        v.volumes.insert("intree-ebs".into(), Arc::new(p));
        for (name, prov) in [
            ("csi-class", EBS),
            ("ebs-intree", EBS_PLUGIN),
            ("azure-file", "kubernetes.io/azure-file"),
        ] {
            let sc: StorageClass =
                serde_json::from_value(json!({"metadata": {"name": name}, "provisioner": prov}))
                    .expect("sc");
            v.storage_classes.insert(name.into(), Arc::new(sc));
        }
        if let Some(n) = csi_node {
            let n: CSINode = serde_json::from_value(n).expect("csinode");
            v.csi_nodes.insert("n1".into(), Arc::new(n));
        }
        Arc::new(v)
    }

    fn csi_node(limits: &[(&str, Option<i32>)]) -> Option<Value> {
        let drivers: Vec<Value> = limits
            .iter()
            .map(|(d, c)| {
                let mut v = json!({"name": d, "nodeID": "n1"});
                if let Some(c) = c {
                    v["allocatable"] = json!({"count": c});
                }
                v
            })
            .collect();
        Some(json!({"metadata": {"name": "n1"}, "spec": {"drivers": drivers}}))
    }

    fn run(p: &PodInfo, existing: &[&PodInfo], vols: Arc<VolumeObjects>) -> Status {
        let pl = NodeVolumeLimits::default();
        let mut state = CycleState::new();
        state.write(VOLUMES_KEY, vols.clone());
        let mut snap = Snapshot::from_nodes(Vec::new());
        snap.volumes = vols;
        let (_, pre) = pl.pre_filter(&mut state, p, &snap);
        if !pre.is_success() {
            return pre;
        }
        let mut n = node_with("n1", |_| {});
        for e in existing {
            n.add_pod(Arc::new((*e).clone()));
        }
        pl.filter(&state, p, &n)
    }

    #[test]
    fn counts_distinct_volumes_per_driver_against_the_csinode_limit() {
        let pvs = [("a", EBS), ("b", EBS), ("c", EBS), ("o", OTHER)];
        let on_ab = pod("old", claims(&["c-a", "c-b"]));
        let on_a_twice = pod("old2", claims(&["c-a"]));
        let pv_user = pod("pv-user", claims(&["c-intree-ebs"]));
        let eph = json!([{"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let inline_ebs = json!([{"name": "v", "awsElasticBlockStore": {"volumeID": "vol-1"}}]);
        // (case, pod's volumes, pods on the node, CSINode limits, expected code)
        type Case<'a> = (&'a str, Value, Vec<&'a PodInfo>, Option<Value>, Code);
        let cases: Vec<Case> = vec![
            (
                "under the limit",
                claims(&["c-c"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(3))]),
                Code::Success,
            ),
            (
                "over the limit",
                claims(&["c-c"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Unschedulable,
            ),
            (
                "shared volume needs no slot",
                claims(&["c-a"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Success,
            ),
            (
                "a volume used by two pods counts once",
                claims(&["c-c"]),
                vec![&on_ab, &on_a_twice],
                csi_node(&[(EBS, Some(3))]),
                Code::Success,
            ),
            (
                "another driver's limit",
                claims(&["c-o"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2)), (OTHER, Some(1))]),
                Code::Success,
            ),
            (
                "another driver full",
                claims(&["c-o"]),
                vec![],
                csi_node(&[(OTHER, Some(0))]),
                Code::Unschedulable,
            ),
            (
                "driver without a count",
                claims(&["c-c"]),
                vec![&on_ab],
                csi_node(&[(EBS, None)]),
                Code::Success,
            ),
            (
                "no CSINode",
                claims(&["c-c"]),
                vec![&on_ab],
                None,
                Code::Success,
            ),
            (
                "same claim twice in the pod",
                claims(&["c-c", "c-c"]),
                vec![],
                csi_node(&[(EBS, Some(1))]),
                Code::Success,
            ),
            (
                "unbound claim by class provisioner",
                claims(&["u-csi-class"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Unschedulable,
            ),
            (
                "claim of a missing PV falls back to the class",
                claims(&["u-pv-gone"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Unschedulable,
            ),
            (
                "in-tree provisioner counts under its CSI driver",
                claims(&["u-ebs-intree"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Unschedulable,
            ),
            (
                "azure-file is not counted",
                claims(&["u-azure-file"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Success,
            ),
            (
                "missing class is not counted",
                claims(&["u-missing-class"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Success,
            ),
            (
                "in-tree EBS PV",
                claims(&["c-intree-ebs"]),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Unschedulable,
            ),
            (
                "inline EBS",
                inline_ebs.clone(),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Unschedulable,
            ),
            (
                "inline EBS shares the in-tree PV's volume",
                inline_ebs,
                vec![&pv_user],
                csi_node(&[(EBS, Some(1))]),
                Code::Success,
            ),
            (
                "ephemeral volume of the pod",
                eph.clone(),
                vec![&on_ab],
                csi_node(&[(EBS, Some(2))]),
                Code::Unschedulable,
            ),
            (
                "missing claim",
                claims(&["nope"]),
                vec![],
                csi_node(&[(EBS, Some(2))]),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "no counted volumes: PreFilter skips",
                json!([{"name": "e", "emptyDir": {}}]),
                vec![],
                csi_node(&[(EBS, Some(0))]),
                Code::Skip,
            ),
        ];
        for (name, vols, existing, limits, code) in cases {
            let p = pod("new", vols);
            let s = run(&p, &existing, objects(&pvs, limits));
            assert_eq!(s.code, code, "{name}: {s}");
            if code == Code::Unschedulable {
                assert_eq!(s.reasons, [REASON_MAX_VOLUME_COUNT], "{name}");
            }
        }
    }

    #[test]
    fn errors_like_kube() {
        let vols = objects(&[], csi_node(&[(EBS, Some(2))]));
        let s = run(&pod("new", claims(&["nope"])), &[], vols.clone());
        assert_eq!(
            s.message(),
            "looking up PVC ns/nope: persistentvolumeclaim \"nope\" not found"
        );
        // An ephemeral volume's claim must belong to the pod.
        let stolen =
            json!([{"name": "stolen", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let s = run(&pod("new", stolen), &[], vols.clone());
        assert_eq!(s.code, Code::Error);
        assert_eq!(
            s.message(),
            "PVC ns/new-stolen was not created for pod ns/new (pod is not owner)"
        );
        // A missing claim of a pod already on the node is just not counted.
        let old = pod("old", claims(&["gone"]));
        assert!(run(&pod("new", claims(&["u-csi-class"])), &[&old], vols).is_success());
    }

    #[test]
    fn in_tree_handles_match_the_csi_drivers() {
        assert_eq!(ebs_handle("aws://us-east-1a/vol-1"), "vol-1");
        assert_eq!(ebs_handle("vol-1"), "vol-1");
        let pv = |labels: Value| -> PersistentVolume {
            serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels}}))
                .expect("pv")
        };
        assert_eq!(
            gce_pv_handle(&pv(json!({"topology.kubernetes.io/zone": "us-c1-a"})), "d").as_deref(),
            Some("projects/UNSPECIFIED/zones/us-c1-a/disks/d")
        );
        assert_eq!(
            gce_pv_handle(
                &pv(json!({"topology.kubernetes.io/zone": "us-c1-a__us-c1-b"})),
                "d"
            )
            .as_deref(),
            Some("projects/UNSPECIFIED/regions/us-c1/disks/d")
        );
        assert_eq!(gce_pv_handle(&pv(json!({})), "d"), None);
    }

    /// csi_test.go's TestVolumeLimitScalingGate (the gate on, as v1.37 defaults it): a
    /// driver whose CSIDriver sets preventPodSchedulingIfMissing must be on the node's
    /// CSINode; without the field, or without a CSIDriver, the check passes.
    #[test]
    fn volume_limit_scaling_wants_opted_in_drivers_on_the_node() {
        let with_driver = |csi_node: Option<Value>, prevent: Option<bool>| {
            let mut v = (*objects(&[("a", EBS)], csi_node)).clone();
            if let Some(prevent) = prevent {
                let d: k8s_openapi::api::storage::v1::CSIDriver =
                    serde_json::from_value(json!({"metadata": {"name": EBS},
                        "spec": {"preventPodSchedulingIfMissing": prevent}}))
                    .expect("driver");
                v.csi_drivers.insert(EBS.into(), Arc::new(d));
            }
            run(&pod("new", claims(&["c-a"])), &[], Arc::new(v))
        };
        let no_drivers = csi_node(&[]);
        let missing = format!("{EBS} CSI driver is not installed on the node");
        // CSIDriver without the field, and CSINode without the driver.
        assert!(with_driver(no_drivers.clone(), Some(false)).is_success());
        // Opted in, not installed: Unschedulable, before limits are looked at.
        let s = with_driver(no_drivers.clone(), Some(true));
        assert_eq!(
            (s.code, s.message()),
            (Code::Unschedulable, missing.clone())
        );
        // Opted in, no CSINode at all.
        let s = with_driver(None, Some(true));
        assert_eq!((s.code, s.message()), (Code::Unschedulable, missing));
        // Opted in, installed, within its limit.
        assert!(with_driver(csi_node(&[(EBS, Some(2))]), Some(true)).is_success());
        // No CSIDriver object: not a driver that asked.
        assert!(with_driver(no_drivers, None).is_success());
    }
}
