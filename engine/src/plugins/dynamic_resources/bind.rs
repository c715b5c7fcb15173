//! PreBind's writes (kube's `bindClaim`): Reserve's allocation and the pod's reservation
//! go into the claim's status with a status update, after the finalizer that protects an
//! allocated claim was added with a normal update; a conflict re-reads the claim and
//! tries again (client-go's DefaultRetry: five attempts). What was written is assumed, so
//! the next cycle sees it before the watch does; then the allocation leaves the in-flight
//! set.
//!
//! The claim for extended resources backed by DRA is created first (kube's
//! `createExtendedResourceClaimInAPI`: without name, UID or allocation, so the API server
//! generates the name), then written as any other, then named in the pod's
//! `status.extendedResourceClaimStatus` with a strategic-merge status patch; it is
//! assumed once its watch event arrives (kube polls its assume cache for it).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use super::extended::NodeExtended;
use super::{ClaimSlot, DynamicResources, State, claims, locked};
use crate::dra_state::allocation_of;
use crate::framework::{BindContext, Status};
use crate::snapshot::PodInfo;

/// resourceapi.Finalizer.
pub(super) const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// client-go's retry.DefaultRetry steps.
const RETRY_STEPS: usize = 5;
/// kube's AssumeExtendedResourceTimeoutDefaultSeconds, and its poll's interval.
const ASSUME_EXTENDED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
const ASSUME_EXTENDED_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The API server's message for a failed request, as client-go's error prints it.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Why one attempt at writing the claim did not do it.
enum Attempt {
    Conflict(String),
    Failed(String),
}

async fn write_claim(
    api: &Api<ResourceClaim>,
    mut claim: ResourceClaim,
    slot: &ClaimSlot,
    consumer: &k8s_openapi::api::resource::v1::ResourceClaimConsumerReference,
) -> Result<ResourceClaim, Attempt> {
    let key = claims::kobj(&claim);
    let name = claim.metadata.name.clone().unwrap_or_default();
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(Attempt::Failed(format!(
            "claim {key} got deleted in the meantime"
        )));
    }
    if let Some(allocation) = &slot.allocation {
        if allocation_of(&claim).is_some() {
            return Err(Attempt::Failed(format!(
                "claim {key} got allocated elsewhere in the meantime"
            )));
        }
        let finalizers = claim.metadata.finalizers.get_or_insert_default();
        if !finalizers.iter().any(|f| f == FINALIZER) {
            finalizers.push(FINALIZER.into());
            claim = match api.replace(&name, &PostParams::default(), &claim).await {
                Ok(c) => c,
                Err(e) => {
                    let msg = format!("add finalizer to claim {key}: {}", api_message(&e));
                    return Err(if is_conflict(&e) {
                        Attempt::Conflict(msg)
                    } else {
                        Attempt::Failed(msg)
                    });
                }
            };
        }
        claim.status.get_or_insert_default().allocation = Some(allocation.clone());
    }
    let status = claim.status.get_or_insert_default();
    status
        .reserved_for
        .get_or_insert_default()
        .push(consumer.clone());
    // DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are on in v1.37: the
    // allocation is stamped when first reserved.
    let Some(allocation) = status.allocation.as_mut() else {
        return Err(Attempt::Failed(format!(
            "claim {key} got deallocated elsewhere in the meantime"
        )));
    };
    allocation
        .allocation_timestamp
        .get_or_insert_with(|| Time(k8s_openapi::jiff::Timestamp::now()));
    match api
        .replace_status(&name, &PostParams::default(), &claim)
        .await
    {
        Ok(c) => Ok(c),
        Err(e) => {
            let what = if slot.allocation.is_some() {
                "add allocation and reservation to claim"
            } else {
                "add reservation to claim"
            };
            let msg = format!("{what} {key}: {}", api_message(&e));
            Err(if is_conflict(&e) {
                Attempt::Conflict(msg)
            } else {
                Attempt::Failed(msg)
            })
        }
    }
}

/// Writes one claim's allocation (if Reserve made one) and the pod's reservation.
async fn bind_claim(
    ctx: &BindContext,
    slot: &ClaimSlot,
    consumer: &k8s_openapi::api::resource::v1::ResourceClaimConsumerReference,
) -> Result<ResourceClaim, String> {
    let namespace = slot.claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = slot.claim.metadata.name.as_deref().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let mut claim = (*slot.claim).clone();
    let mut last = String::new();
    for attempt in 0..RETRY_STEPS {
        if attempt > 0 {
            claim = api.get(name).await.map_err(|e| {
                format!(
                    "get updated claim {}: {}",
                    claims::kobj(&slot.claim),
                    api_message(&e)
                )
            })?;
            tracing::debug!(claim = %claims::kobj(&slot.claim), "retrying update after conflict");
        }
        match write_claim(&api, claim.clone(), slot, consumer).await {
            Ok(written) => return Ok(written),
            Err(Attempt::Failed(msg)) => return Err(msg),
            Err(Attempt::Conflict(msg)) => last = msg,
        }
    }
    Err(last)
}

pub(super) async fn pre_bind(
    pl: &DynamicResources,
    ctx: &BindContext,
    s: &State,
    pod: &PodInfo,
    node: &str,
) -> Status {
    let consumer = claims::consumer(&pod.object());
    let mut written_in_flight = Vec::new();
    for (i, slot) in s.slots.iter().enumerate() {
        if claims::is_reserved_for(&pod.uid, &slot.claim) {
            continue;
        }
        let written = match bind_claim(ctx, slot, &consumer).await {
            Ok(c) => Arc::new(c),
            Err(e) => return Status::error(e),
        };
        if let Err(e) = pl.claims.assume(written.clone()) {
            tracing::debug!(claim = %claims::kobj(&written), error = %e, "Claim not stored in assume cache");
        }
        tracing::debug!(pod = %pod.key, node, claim = %claims::kobj(&written), "reserved");
        locked(&s.written).insert(i, written);
        if slot.allocation.is_some() {
            written_in_flight.push(slot.claim.metadata.uid.clone().unwrap_or_default());
        }
    }
    let mut extended_written = None;
    if let Some(reserved) = &s.extended_reserved {
        let written = match bind_extended(pl, ctx, s, pod, node, reserved, &consumer).await {
            Ok(c) => c,
            Err(e) => return Status::error(e),
        };
        if let Some(e) = &s.extended {
            written_in_flight.push(e.uid().to_string());
        }
        extended_written = Some(written);
    }
    // Only once every claim is written (kube's deferred success cleanup).
    for uid in written_in_flight {
        pl.claims.maybe_remove_pending_allocation(&uid, true);
    }
    let written: Vec<Arc<ResourceClaim>> = (0..s.slots.len())
        .map(|i| {
            locked(&s.written)
                .get(&i)
                .cloned()
                .unwrap_or_else(|| s.slots[i].claim.clone())
        })
        .chain(extended_written)
        .collect();
    if !written.iter().any(|c| has_binding_conditions(c)) {
        return Status::success();
    }
    match wait_for_binding_conditions(pl, &written).await {
        Ok(()) => Status::success(),
        Err(e) => Status::error(e),
    }
}

/// The extended-resource claim: created, written as any claim, named in the pod's status,
/// then assumed once the watch has it.
async fn bind_extended(
    pl: &DynamicResources,
    ctx: &BindContext,
    s: &State,
    pod: &PodInfo,
    node: &str,
    reserved: &NodeExtended,
    consumer: &k8s_openapi::api::resource::v1::ResourceClaimConsumerReference,
) -> Result<Arc<ResourceClaim>, String> {
    let mut claim = reserved.claim.clone();
    // Fields that must not or need not be set on creation.
    claim.status = None;
    claim.metadata.name = None;
    claim.metadata.uid = None;
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    tracing::debug!(pod = %pod.key, node, "create claim for extended resources");
    let created = api
        .create(&PostParams::default(), &claim)
        .await
        .map_err(|e| {
            format!(
                "create claim for extended resources {}: {}",
                claims::kobj(&claim),
                api_message(&e)
            )
        })?;
    let created = Arc::new(created);
    tracing::debug!(pod = %pod.key, node, resourceclaim = %claims::kobj(&created), "created claim for extended resources");
    // From now on Unreserve deletes it.
    *locked(&s.extended_created) = Some(created.clone());
    let slot = ClaimSlot {
        claim: created,
        available_on: None,
        allocation: reserved.allocation.clone(),
    };
    let written = Arc::new(bind_claim(ctx, &slot, consumer).await?);
    *locked(&s.extended_created) = Some(written.clone());
    tracing::debug!(pod = %pod.key, node, resourceclaim = %claims::kobj(&written), "reserved");
    patch_pod_status(ctx, pod, &written, reserved).await?;
    wait_to_assume(pl, &written).await;
    Ok(written)
}

/// kube's `patchPodExtendedResourceClaimStatus`: the two-way strategic merge patch from
/// the pod's status to one with `extendedResourceClaimStatus`, which is just that field.
async fn patch_pod_status(
    ctx: &BindContext,
    pod: &PodInfo,
    claim: &ResourceClaim,
    reserved: &NodeExtended,
) -> Result<(), String> {
    let object = pod.object();
    let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
    let name = object.metadata.name.as_deref().unwrap_or_default();
    if reserved.mappings.is_empty() {
        return Err(format!(
            "nil or empty request mappings, no update of pod {namespace}/{name} ExtendedResourceClaimStatus"
        ));
    }
    let status = k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus {
        request_mappings: reserved.mappings.clone(),
        resource_claim_name: claim.metadata.name.clone().unwrap_or_default(),
    };
    let patch = serde_json::json!({"status": {"extendedResourceClaimStatus": status}});
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(|e| {
            format!(
                "update pod {namespace}/{name} ExtendedResourceClaimStatus: {}",
                api_message(&e)
            )
        })?;
    Ok(())
}

/// kube's `waitForExtendedClaimInAssumeCache`: a claim just created is not in the
/// tracker until its watch event arrives, so assuming it is retried every second, for
/// up to two minutes; failing only leaves it to the watch.
async fn wait_to_assume(pl: &DynamicResources, claim: &Arc<ResourceClaim>) {
    let deadline = tokio::time::Instant::now() + ASSUME_EXTENDED_TIMEOUT;
    loop {
        match pl.claims.assume(claim.clone()) {
            Ok(()) => return,
            Err(crate::dra_state::AssumeError::NotFound(_))
                if tokio::time::Instant::now() + ASSUME_EXTENDED_INTERVAL <= deadline =>
            {
                tokio::time::sleep(ASSUME_EXTENDED_INTERVAL).await;
            }
            Err(e) => {
                tracing::debug!(claim = %claims::kobj(claim), error = %e, "Claim not stored in assume cache after retries");
                return;
            }
        }
    }
}

/// kube's `deleteClaim`: the finalizer removed first with an update (a conflict re-reads
/// the claim, as client-go's DefaultRetry), then the claim deleted; gone already is fine.
pub(super) async fn delete_claim(ctx: &BindContext, claim: &ResourceClaim) -> Result<(), String> {
    let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let mut claim = claim.clone();
    let mut attempt = 0;
    loop {
        if attempt > 0 {
            claim = api.get(name).await.map_err(|e| {
                format!("get resourceclaim {namespace}/{name}: {}", api_message(&e))
            })?;
        }
        attempt += 1;
        if let Some(f) = claim.metadata.finalizers.as_mut() {
            f.retain(|f| f != FINALIZER);
        }
        match api.replace(name, &PostParams::default(), &claim).await {
            Ok(_) => break,
            Err(e) if is_conflict(&e) && attempt < RETRY_STEPS => continue,
            Err(e) => {
                return Err(format!(
                    "update resourceclaim {namespace}/{name}: {}",
                    api_message(&e)
                ));
            }
        }
    }
    tracing::debug!(resourceclaim = %format!("{namespace}/{name}"), "Delete");
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_message(&e)),
    }
}

/// Unreserve's deletion of the extended-resource claim PreBind created, without waiting:
/// a claim left behind is found by the pod's next attempt and deleted then.
pub(super) fn delete_in_background(ctx: &BindContext, claim: Arc<ResourceClaim>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let ctx = ctx.clone();
    runtime.spawn(async move {
        if let Err(e) = delete_claim(&ctx, &claim).await {
            tracing::error!(resourceclaim = %claims::kobj(&claim), error = %e, "delete");
        }
    });
}

fn results(
    claim: &ResourceClaim,
) -> impl Iterator<Item = &k8s_openapi::api::resource::v1::DeviceRequestAllocationResult> {
    allocation_of(claim)
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
}

fn has_binding_conditions(claim: &ResourceClaim) -> bool {
    results(claim).any(|r| r.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()))
}

/// kube's isClaimReadyForBinding: every binding condition of every allocated device is
/// True in the claim's device status, and no binding failure condition is.
pub(super) fn ready_for_binding(claim: &ResourceClaim) -> Result<bool, String> {
    if allocation_of(claim).is_none() {
        return Ok(false);
    }
    let devices = claim.status.as_ref().and_then(|s| s.devices.as_ref());
    for r in results(claim) {
        let conditions = r.binding_conditions.as_deref().unwrap_or_default();
        if conditions.is_empty() {
            continue;
        }
        let Some(status) = devices
            .into_iter()
            .flatten()
            .find(|d| d.device == r.device && d.driver == r.driver && d.pool == r.pool)
        else {
            return Ok(false);
        };
        let found = |t: &str| status.conditions.iter().flatten().find(|c| c.type_ == t);
        for failure in r.binding_failure_conditions.iter().flatten() {
            if let Some(c) = found(failure).filter(|c| c.status == "True") {
                return Err(format!(
                    "device binding failed: claim={}, reason={}, message={:?}",
                    claim.metadata.name.as_deref().unwrap_or_default(),
                    c.reason,
                    c.message
                ));
            }
        }
        if !conditions
            .iter()
            .all(|t| found(t).is_some_and(|c| c.status == "True"))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// kube's poll in PreBind: every 5 s, the claims as the watch shows them, up to
/// `bindingTimeout`.
async fn wait_for_binding_conditions(
    pl: &DynamicResources,
    claims: &[Arc<ResourceClaim>],
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + pl.args.binding_timeout;
    loop {
        let mut ready = true;
        for c in claims {
            let ns = c.metadata.namespace.as_deref().unwrap_or_default();
            let name = c.metadata.name.as_deref().unwrap_or_default();
            let current = pl.claims.get(ns, name).map_err(|e| e.to_string())?;
            if !ready_for_binding(&current)? {
                ready = false;
            }
        }
        if ready {
            return Ok(());
        }
        let next = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        if next > deadline {
            return Err("device binding timeout: context deadline exceeded".into());
        }
        tokio::time::sleep_until(next).await;
    }
}

/// Unreserve's patch taking the pod out of `status.reservedFor`, sent without waiting:
/// Unreserve does not block, and a failure is retried by the pod's next attempt.
pub(super) fn unreserve_in_background(ctx: &BindContext, claim: &ResourceClaim, pod_uid: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let name = claim.metadata.name.clone().unwrap_or_default();
    let patch = serde_json::json!({
        "metadata": {"uid": claim.metadata.uid.clone().unwrap_or_default()},
        "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]},
    });
    let key = claims::kobj(claim);
    let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    runtime.spawn(async move {
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            tracing::error!(claim = %key, error = %api_message(&e), "unreserve");
        }
    });
}
