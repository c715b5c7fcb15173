//! Which ResourceClaims a pod uses (k8s.io/dynamic-resource-allocation/resourceclaim):
//! a claim named in `spec.resourceClaims`, or one generated from a template whose name
//! the claim controller recorded in `status.resourceClaimStatuses`, which must then be
//! controlled by the pod. Errors are kube's, word for word: PreEnqueue and PreFilter
//! report them as they are.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimConsumerReference};

use crate::dra_state::{ResourceClaims, claim_name};

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// kube's `resourceclaim.IsForPod` (PodGroup owners aside: DRAWorkloadResourceClaims is
/// off in v1.37): the claim is controlled by the pod.
fn is_for_pod(pod: &Pod, claim: &ResourceClaim) -> Result<(), String> {
    let (pod_ns, claim_ns) = (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    if pod_ns != claim_ns {
        return Err(format!(
            "ResourceClaim {claim_ns}/{claim_name} is not in the same namespace as Pod {}",
            pod_key(pod)
        ));
    }
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let controlled = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == pod_uid);
    if !controlled {
        return Err(format!(
            "ResourceClaim {claim_ns}/{claim_name} was not created for Pod {} (Pod is not owner)",
            pod_key(pod)
        ));
    }
    Ok(())
}

/// The pod's claims that exist, in `spec.resourceClaims` order (kube's
/// `foreachPodResourceClaim`); the first reason one cannot be used.
pub(super) fn pod_claims(
    pod: &Pod,
    claims: &ResourceClaims,
) -> Result<Vec<Arc<ResourceClaim>>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut found = Vec::new();
    for pc in pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
    {
        let (name, must_own) = claim_name(pod, pc)?;
        let Some(name) = name else {
            continue;
        };
        let claim = claims.get(namespace, &name).map_err(|e| e.to_string())?;
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!(
                "resourceclaim {:?} is being deleted",
                claim.metadata.name.as_deref().unwrap_or_default()
            ));
        }
        if must_own {
            is_for_pod(pod, &claim)?;
        }
        found.push(claim);
    }
    Ok(found)
}

/// Whether the pod has claims at all (those a template generated none for included).
pub(super) fn has_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// kube's `resourceclaim.IsReservedForPod`, PodGroup reservations aside.
pub(super) fn is_reserved_for(pod_uid: &str, claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .any(|r| r.uid == pod_uid)
}

/// The pod as a claim's consumer (kube's `BindTo` for a pod: the core group, which JSON
/// leaves out).
pub(super) fn consumer(pod: &Pod) -> ResourceClaimConsumerReference {
    ResourceClaimConsumerReference {
        api_group: None,
        resource: "pods".into(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

/// `namespace/name`, as klog's KObj prints it.
pub(super) fn kobj(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}
