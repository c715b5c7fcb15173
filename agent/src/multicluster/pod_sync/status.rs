//! Status write-back: the copy's status and the LeafPod condition on the host pod, the
//! copy's UID recorded with them, and a host pod failed when its copy is lost.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use mcsched_shared::keys;
use serde_json::json;

use crate::multicluster::cluster::LeafCluster;

use super::{LEAF_POD_CONDITION, SyncError, api_err};

pub(super) fn set_leaf_condition(
    status: &mut PodStatus,
    leaf: &LeafCluster,
    leaf_node: Option<&str>,
) {
    let message = match leaf_node {
        Some(n) => format!("running in leaf cluster {} on node {n}", leaf.name),
        None => format!("created in leaf cluster {}", leaf.name),
    };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let existing = conditions
        .iter()
        .find(|c| c.type_ == LEAF_POD_CONDITION)
        .cloned();
    conditions.retain(|c| c.type_ != LEAF_POD_CONDITION);
    conditions.push(PodCondition {
        type_: LEAF_POD_CONDITION.into(),
        status: "True".into(),
        reason: Some("LeafPodCreated".into()),
        message: Some(message),
        last_transition_time: existing.and_then(|c| c.last_transition_time).or_else(|| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ))
        }),
        ..Default::default()
    });
}

/// Writes `status` to the host pod and, with `record`, the UID of its leaf copy.
/// Both go through `pods/status` in one patch — the agent may patch a pod's status (as
/// kube-scheduler) but not the pod, and the status strategy keeps metadata changes — so a
/// host pod never shows a copy without its record. The pod's UID in the patch makes it
/// fail against another pod of the same name.
pub(super) async fn write_host_status(
    leaf: &LeafCluster,
    pods: &Api<Pod>,
    pod: &Pod,
    status: &PodStatus,
    record: Option<&str>,
) -> Result<(), SyncError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let patch = match record {
        Some(r) => json!({
            "metadata": {"uid": uid, "annotations": {keys::LEAF_POD_UID_ANNOTATION: r}},
            "status": status,
        }),
        None => json!({ "status": status }),
    };
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(api_err(format!("writing status of host pod {name}")))?;
    if record.is_some() {
        leaf.ownership.recorded(&uid);
    }
    Ok(())
}

/// Fails a host pod whose copy is gone, as a kubelet fails a pod it lost: Failed, not
/// Ready (terminal pods leave every EndpointSlice).
pub(super) async fn fail_host_pod(
    host_pods: &Api<Pod>,
    name: &str,
    reason: &str,
    message: &str,
) -> Result<(), SyncError> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let not = |type_: &str| json!({"type": type_, "status": "False", "reason": reason, "lastTransitionTime": now});
    let patch = json!({"status": {
        "phase": "Failed",
        "reason": reason,
        "message": message,
        // Strategic merge keys conditions by type: the others stay.
        "conditions": [not("Ready"), not("ContainersReady")],
    }});
    host_pods
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(api_err(format!("failing host pod {name}")))?;
    Ok(())
}
