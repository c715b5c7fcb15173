//! Taking pods back and deleting: a copy Pending too long or refused by its leaf, the
//! copy deleted with its host pod, and a host pod's deletion finished when no kubelet
//! will.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tracing::{info, warn};

use crate::multicluster::cluster::LeafCluster;
use crate::multicluster::gang_hold;
use mcsched_engine::leaf::rescheduling::{self, Avoided};

use super::{HostSide, SyncError, api_err, code, warn_event};

/// A copy Pending too long is taken back: a pod with a controller is deleted so that its
/// owner recreates it elsewhere, with this leaf avoided for the owner; a bare pod is
/// deleted as Kubernetes deletes a bare pod on a lost node (nothing recreates it, and
/// mcsched creates no pods). Either way a Warning event and a DisruptionTarget condition
/// say why before the pod goes.
pub(super) async fn take_back(
    host_side: &HostSide,
    leaf: &LeafCluster,
    host_pods: &Api<Pod>,
    pod: &Pod,
    copy: &Pod,
    waited: Duration,
) -> Result<(), SyncError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let settings = host_side.leaves.settings;
    let waited_s = waited.as_secs();
    let note = if rescheduling::has_controller(pod) {
        let backoff = host_side.leaves.avoidance.avoid(
            rescheduling::owner_key(pod),
            &leaf.name,
            Avoided::Pending,
            settings.avoid_for,
        );
        format!(
            "pod stayed Pending in leaf cluster {} for {waited_s}s; taken back so that its owner recreates it elsewhere; {} is avoided for the owner's pods for {}s",
            leaf.name,
            leaf.name,
            backoff.as_secs()
        )
    } else {
        format!(
            "pod stayed Pending in leaf cluster {} for {waited_s}s; deleted, as a bare pod on a lost node is: it has no controller to recreate it elsewhere",
            leaf.name
        )
    };
    host_side.fence()?;
    info!(cluster = %leaf.name, pod = %name, "taking a pod back from its leaf");
    warn_event(
        host_side,
        pod,
        "LeafPodPending",
        "Rescheduling",
        note.clone(),
    );
    disruption_target(host_pods, &name, "LeafPodPending", &note).await;
    if leaf.is_ready() {
        delete_copy(leaf, copy, Some(0)).await?;
        delete_host_pod_now(host_pods, &name, &uid)
            .await
            .map_err(api_err(format!("deleting host pod {name}")))?;
    } else {
        // A leaf that does not answer cannot delete the copy. Waiting for it would leave
        // the rest of a gang running without this member; deleting the host pod at once
        // could run two copies once the leaf answers. As a pod on an unreachable node:
        // the host pod is deleted gracefully and stays Terminating until the leaf
        // confirms its copy is gone (`sync_one`'s deletion), while its owner replaces it.
        info!(cluster = %leaf.name, pod = %name, "leaf not answering: the host pod is deleted and stays Terminating until the leaf deletes its copy");
        delete_host_pod(host_pods, &name, &uid, None)
            .await
            .map_err(api_err(format!("deleting host pod {name}")))?;
    }
    let why = format!("Pending there for {waited_s}s");
    take_back_gang(host_side, host_pods, pod, &leaf.name, &why).await;
    Ok(())
}

/// The leaf holds an object of a name the pod needs that is not this host's, has not
/// granted the pod's namespace, or its admission refused the copy: nothing is created
/// there. A pod with a controller goes, and the leaf is avoided for its owner for a
/// back-off that doubles at each refusal, so the owner's new pod goes elsewhere; a bare
/// pod waits with a Warning event, as mcsched deletes no user's pod for a conflict it did
/// not cause.
pub(super) async fn clash(
    host_side: &HostSide,
    leaf: &LeafCluster,
    host_pods: &Api<Pod>,
    pod: &Pod,
    e: SyncError,
) -> Result<(), SyncError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if !rescheduling::has_controller(pod) {
        warn_event(
            host_side,
            pod,
            "LeafRefused",
            "Syncing",
            format!("leaf cluster {}: {e}", leaf.name),
        );
        return Err(e);
    }
    host_side.fence()?;
    // The leaf check may not see why (an admission webhook or policy it cannot judge):
    // without avoiding the leaf the owner's next pod could be sent back to it.
    let backoff = host_side.leaves.avoidance.avoid(
        rescheduling::owner_key(pod),
        &leaf.name,
        Avoided::Refused,
        host_side.leaves.settings.avoid_for,
    );
    let note = format!(
        "leaf cluster {}: {e}; the pod is deleted so that its owner recreates it elsewhere; {} is avoided for the owner's pods for {}s",
        leaf.name,
        leaf.name,
        backoff.as_secs()
    );
    warn_event(host_side, pod, "LeafRefused", "Rescheduling", note.clone());
    disruption_target(host_pods, &name, "LeafRefused", &note).await;
    delete_host_pod_now(host_pods, &name, &uid)
        .await
        .map_err(api_err(format!("deleting host pod {name}")))?;
    take_back_gang(host_side, host_pods, pod, &leaf.name, "refused there").await;
    Ok(())
}

/// The rest of `pod`'s gang goes with it, evicted as this agent leads.
async fn take_back_gang(
    host_side: &HostSide,
    host_pods: &Api<Pod>,
    pod: &Pod,
    leaf: &str,
    why: &str,
) {
    let side = host_side.clone();
    let evictor = gang_hold::Evictor {
        // Without it (tests, in-process use) the host client, whose 429s kube retries.
        client: host_side
            .leaves
            .eviction_client()
            .unwrap_or_else(|| host_pods.clone().into_client()),
        events: host_side.events.clone(),
        agent_namespace: host_side.leaves.agent_namespace().to_string(),
        may_act: Arc::new(move || side.fence().is_ok()),
    };
    gang_hold::take_back_gang(
        &host_side.pod_groups,
        &host_side.leaves.gang_take_backs,
        &evictor,
        pod,
        leaf,
        why,
    )
    .await;
}

/// kube's condition on a pod about to be deleted by a controller (taint manager, PodGC).
const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// kube's DisruptionTarget condition, saying why a pod is about to go.
async fn disruption_target(host_pods: &Api<Pod>, name: &str, reason: &str, note: &str) {
    let condition = json!({"status": {"conditions": [{
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": reason,
        "message": note,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    // Strategic merge keys conditions by type: the others stay.
    if let Err(e) = host_pods
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(condition))
        .await
    {
        warn!(pod = %name, error = %e, "cannot set the DisruptionTarget condition");
    }
}

pub(super) async fn delete_copy(
    leaf: &LeafCluster,
    copy: &Pod,
    grace: Option<i64>,
) -> Result<(), SyncError> {
    let ns = copy.metadata.namespace.clone().unwrap_or_default();
    let name = copy.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(leaf.client.clone(), &ns);
    let dp = DeleteParams {
        grace_period_seconds: grace.map(grace_seconds),
        preconditions: copy.metadata.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(()),
        Err(e) => Err(api_err(format!("deleting leaf pod {ns}/{name}"))(e)),
    }
}

/// The host pod's `deletionGracePeriodSeconds` (an int64) as the delete option kube's
/// client takes (a u32): saturated, never truncated — 2^32 must not become 0, an
/// immediate kill.
fn grace_seconds(grace: i64) -> u32 {
    u32::try_from(grace.max(0)).unwrap_or(u32::MAX)
}

/// Deletes this incarnation (`uid`) of a host pod at once, as no kubelet will; false when
/// it is already gone or replaced by a pod of the same name.
pub(super) async fn delete_host_pod_now(
    host_pods: &Api<Pod>,
    name: &str,
    uid: &str,
) -> Result<bool, kube::Error> {
    delete_host_pod(host_pods, name, uid, Some(0)).await
}

/// Deletes this incarnation (`uid`) of a host pod, with `grace` or, when `None`, its own
/// grace period (it then stays Terminating until pod sync finishes the deletion); false
/// when it is already gone or replaced by a pod of the same name.
async fn delete_host_pod(
    host_pods: &Api<Pod>,
    name: &str,
    uid: &str,
    grace: Option<u32>,
) -> Result<bool, kube::Error> {
    let dp = DeleteParams {
        grace_period_seconds: grace,
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match host_pods.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::grace_seconds;

    #[test]
    fn a_grace_period_beyond_u32_saturates_instead_of_truncating() {
        assert_eq!(grace_seconds(30), 30);
        assert_eq!(grace_seconds(-5), 0);
        assert_eq!(
            grace_seconds(1 << 32),
            u32::MAX,
            "2^32 is no immediate kill"
        );
        assert_eq!(grace_seconds((1 << 32) + 30), u32::MAX);
        assert_eq!(grace_seconds(i64::MAX), u32::MAX);
    }
}
