//! PostFilter's deallocation (kube's `deallocateOrDeletePodClaims`): when a pod is
//! unschedulable because one of its claims is allocated where it cannot run, and no other
//! pod uses that claim, the allocation is dropped so the next attempt may allocate it
//! anew elsewhere. kube writes synchronously in the scheduling cycle, so the pod's retry
//! (on the claim's change) sees the claim free; so does this.

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, PostParams};

use super::{ClaimSlot, claims};
use crate::framework::BindContext;

/// A claim reserved for nobody, or for this pod alone, may be deallocated.
pub(super) fn is_deallocatable(claim: &ResourceClaim, pod_uid: &str) -> bool {
    let reserved = (claim.status.as_ref())
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default();
    reserved.is_empty() || (reserved.len() == 1 && reserved[0].uid == pod_uid)
}

/// The first of `unavailable` (indices into `slots`) that may be deallocated.
pub(super) fn pick<'a>(
    slots: &'a [ClaimSlot],
    unavailable: impl IntoIterator<Item = usize>,
    pod_uid: &str,
) -> Option<&'a ResourceClaim> {
    unavailable
        .into_iter()
        .filter_map(|i| slots.get(i))
        .map(|slot| &*slot.claim)
        .find(|claim| is_deallocatable(claim, pod_uid))
}

/// The claim as kube writes it back: no reservation, no allocation, no device status.
pub(super) fn deallocated(claim: &ResourceClaim) -> ResourceClaim {
    let mut claim = claim.clone();
    if let Some(status) = claim.status.as_mut() {
        status.reserved_for = None;
        status.allocation = None;
        status.devices = None;
    }
    claim
}

/// A status update of the claim at the resource version the cycle saw: a claim changed
/// since is a conflict, and the attempt ends in that error, as kube's.
pub(super) async fn write(ctx: &BindContext, claim: &ResourceClaim) -> Result<(), String> {
    let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let body = deallocated(claim);
    tracing::debug!(resourceclaim = %claims::kobj(claim), "Deallocation of ResourceClaim");
    match api
        .replace_status(name, &PostParams::default(), &body)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(s.message),
        Err(e) => Err(e.to_string()),
    }
}
