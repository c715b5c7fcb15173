//! A pod's claims as a leaf will hold them once pod sync has copied them, so the leaf
//! check can run VolumeBinding on the leaf's own volumes and storage classes: a leaf with
//! no fitting volume, or without the claim's class, is never chosen.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::leaf::transform::leaf_claim_spec;
use crate::plugins::helper::volumes::{claim_names, class_of, pod_volumes};
use crate::snapshot::{PodInfo, Snapshot, VolumeObjects};

/// A claim whose StorageClass the leaf lacks: the copy could never bind there.
#[derive(Debug, thiserror::Error)]
#[error("storageclass.storage.k8s.io \"{class}\" not found for persistentvolumeclaim \"{claim}\"")]
pub(crate) struct MissingClass {
    class: String,
    claim: String,
}

/// The pod and leaf snapshot to check: claims already copied to the leaf as they are
/// there; a host claim not copied yet added as its copy would be, when its class binds
/// at first consumer in the leaf. Claims the leaf binds on creation (an Immediate class
/// there) or whose class the leaf's default decides are left to the leaf and taken off
/// the pod for the check. Errs when the leaf lacks the claim's class.
pub(crate) fn leaf_view(
    host: &VolumeObjects,
    pod: &Arc<PodInfo>,
    leaf: &Snapshot,
    leaf_class: &dyn Fn(&str) -> String,
) -> Result<(Arc<PodInfo>, Snapshot), MissingClass> {
    let names = claim_names(pod);
    // A generic ephemeral volume's claim is made in the leaf, for the leaf's pod, by the
    // leaf's ephemeral volume controller: nothing to check before.
    let ephemeral = pod_volumes(pod).iter().any(|v| v.ephemeral.is_some());
    if names.is_empty() && !ephemeral {
        return Ok((pod.clone(), leaf.clone()));
    }
    let mut added: Vec<Arc<PersistentVolumeClaim>> = Vec::new();
    let mut left_to_leaf: HashSet<String> = HashSet::new();
    for name in names {
        let key = format!("{}/{name}", pod.namespace);
        if leaf.volumes.claims.contains_key(&key) {
            continue;
        }
        // A missing host claim is the host's VolumeBinding's verdict, not the leaf's.
        let Some(c) = host.claims.get(&key) else {
            left_to_leaf.insert(name);
            continue;
        };
        let host_class = class_of(c);
        let class = if host_class.is_empty() {
            host_class
        } else {
            leaf_class(&host_class)
        };
        if class.is_empty() {
            left_to_leaf.insert(name);
            continue;
        }
        let Some(sc) = leaf.volumes.storage_classes.get(&class) else {
            return Err(MissingClass { class, claim: name });
        };
        if sc.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
            left_to_leaf.insert(name);
            continue;
        }
        added.push(Arc::new(PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(pod.namespace.clone()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some(class),
                ..leaf_claim_spec(&c.spec.clone().unwrap_or_default())
            }),
            status: None,
        }));
    }
    let mut snapshot = leaf.clone();
    if !added.is_empty() {
        let mut volumes = (*leaf.volumes).clone();
        for c in added {
            volumes.claims.insert(
                format!(
                    "{}/{}",
                    pod.namespace,
                    c.metadata.name.as_deref().unwrap_or("")
                ),
                c,
            );
        }
        snapshot.volumes = Arc::new(volumes);
    }
    if left_to_leaf.is_empty() && !ephemeral {
        return Ok((pod.clone(), snapshot));
    }
    let mut trimmed = (*pod.pod()).clone();
    if let Some(vols) = trimmed.spec.as_mut().and_then(|s| s.volumes.as_mut()) {
        vols.retain(|v| {
            v.ephemeral.is_none()
                && v.persistent_volume_claim
                    .as_ref()
                    .is_none_or(|c| !left_to_leaf.contains(&c.claim_name))
        });
    }
    Ok((Arc::new(PodInfo::new(Arc::new(trimmed))), snapshot))
}
