//! A pod's volumes and claims, as the volume plugins (VolumeBinding,
//! LeafNodeVolumeBinding, VolumeRestrictions, VolumeZone, NodeVolumeLimits) and the leaf
//! check read them.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Volume};

use crate::snapshot::PodInfo;

/// The pod's volumes (none when it has no spec).
pub fn pod_volumes(pod: &PodInfo) -> &[Volume] {
    &pod.volumes
}

/// The claims a pod's volumes name, in volume order.
pub(crate) fn claim_names(pod: &PodInfo) -> Vec<String> {
    pod_volumes(pod)
        .iter()
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
        })
        .collect()
}

/// `spec.storageClassName`, or the beta annotation older claims carry.
pub(crate) fn class_of(c: &PersistentVolumeClaim) -> String {
    c.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .cloned()
        .or_else(|| c.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}
