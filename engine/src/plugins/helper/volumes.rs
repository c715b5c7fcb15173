//! A pod's volumes and claims, as the volume plugins (VolumeBinding,
//! LeafNodeVolumeBinding, VolumeRestrictions, VolumeZone, NodeVolumeLimits) and the leaf
//! check read them.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Volume};

use crate::snapshot::{PodInfo, VolumeObjects};

/// Whether the volume's claimRef names this claim (its namespace and name, and its uid
/// unless the reference leaves the uid out): a volume pre-bound to it, which the PV
/// controller binds it to.
pub(crate) fn names_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let meta = &claim.metadata;
    pv.spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| {
            r.namespace == meta.namespace
                && r.name == meta.name
                && r.uid
                    .as_deref()
                    .is_none_or(|u| u.is_empty() || Some(u) == meta.uid.as_deref())
        })
}

/// The pod's volumes (none when it has no spec).
pub(crate) fn pod_volumes(pod: &PodInfo) -> &[Volume] {
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

/// A claim a pod's volume uses: named by it, or a generic ephemeral volume's
/// (`<pod>-<volume>`, made by the ephemeral volume controller).
pub(crate) struct PodClaim {
    pub(crate) name: String,
    pub(crate) ephemeral: bool,
}

/// Every claim the pod's volumes use, ephemeral ones included, in volume order.
pub(crate) fn pod_claims(pod: &PodInfo) -> Vec<PodClaim> {
    pod_volumes(pod)
        .iter()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(PodClaim {
                    name: c.claim_name.clone(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| PodClaim {
                    name: format!("{}-{}", pod.name, v.name),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

/// A generic ephemeral volume's claim that its pod does not control.
#[derive(Debug, thiserror::Error)]
#[error("PVC {claim} was not created for pod {pod} (pod is not owner)")]
pub(crate) struct NotOwner {
    claim: String,
    pod: String,
}

/// VolumeIsForPod: a generic ephemeral volume's claim must be controlled by the pod.
pub(crate) fn ephemeral_is_for_pod(
    pod: &PodInfo,
    pvc: &PersistentVolumeClaim,
) -> Result<(), NotOwner> {
    let owned = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == pod.uid);
    if owned {
        return Ok(());
    }
    Err(NotOwner {
        claim: format!(
            "{}/{}",
            pvc.metadata.namespace.as_deref().unwrap_or_default(),
            pvc.metadata.name.as_deref().unwrap_or_default()
        ),
        pod: format!("{}/{}", pod.namespace, pod.name),
    })
}

/// Why a pod cannot use a claim it names, in kube's words (podHasPVCs).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnusableClaim {
    #[error("persistentvolumeclaim \"{0}\" not found")]
    Missing(String),
    /// Normal right after a pod with generic ephemeral volumes is created.
    #[error("waiting for ephemeral volume controller to create the persistentvolumeclaim \"{0}\"")]
    EphemeralNotYet(String),
    #[error(
        "persistentvolumeclaim \"{claim}\" bound to non-existent persistentvolume \"{volume}\""
    )]
    Lost { claim: String, volume: String },
    #[error("persistentvolumeclaim \"{0}\" is being deleted")]
    Deleting(String),
    #[error(transparent)]
    NotOwner(#[from] NotOwner),
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

/// podHasPVCs for one claim: the claim, or why the pod cannot use it.
pub(crate) fn usable_claim<'a>(
    pod: &PodInfo,
    claim: &PodClaim,
    vols: &'a VolumeObjects,
) -> Result<&'a Arc<PersistentVolumeClaim>, UnusableClaim> {
    let name = &claim.name;
    let Some(c) = vols.claims.get(&format!("{}/{name}", pod.namespace)) else {
        return Err(if claim.ephemeral {
            UnusableClaim::EphemeralNotYet(name.clone())
        } else {
            UnusableClaim::Missing(name.clone())
        });
    };
    if c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
        return Err(UnusableClaim::Lost {
            claim: name.clone(),
            volume: c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default(),
        });
    }
    if c.metadata.deletion_timestamp.is_some() {
        return Err(UnusableClaim::Deleting(name.clone()));
    }
    if claim.ephemeral {
        ephemeral_is_for_pod(pod, c)?;
    }
    Ok(c)
}
