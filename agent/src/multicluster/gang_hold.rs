//! A gang lives whole or not at all past scheduling too: no member's leaf copy is made
//! until `minCount` members are bound (host and leaves together), and a member a leaf
//! gives back (Pending too long, refused) takes the rest of its gang back with it, so
//! that the gang is placed whole again.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use mcsched_engine::pod_groups::{PodGroups, group_key_of};
use serde_json::json;
use tracing::{info, warn};

use crate::observe::events::{EventSink, EventType, Message, object_ref};

/// The event reason and DisruptionTarget condition reason on the members taken back.
const REASON: &str = "GangTakenBack";

/// Why the copy of `pod` must wait, or None when it may be made.
pub(crate) fn held(groups: &PodGroups, pod: &Pod) -> Option<String> {
    let key = group_key_of(pod)?;
    let min = groups.policy(&key)?.gang_min_count?;
    let bound = groups.state(&key).assigned_count();
    (bound < min).then(|| {
        format!(
            "waiting for the gang {key} to be bound whole: {bound} of minCount {min} pods bound"
        )
    })
}

/// `pod` was taken back from `leaf` (`why`): every other bound member of its gang goes
/// too, each with a Warning event and a DisruptionTarget condition saying so before it is
/// deleted (its owner recreates it; its leaf copy, if any, is then an orphan pod sync
/// deletes). Nothing for a pod of no gang.
pub(crate) async fn take_back_gang(
    groups: &PodGroups,
    events: &EventSink,
    host_pods: &Api<Pod>,
    pod: &Pod,
    leaf: &str,
    why: &str,
) {
    let Some(key) = group_key_of(pod) else {
        return;
    };
    if groups.policy(&key).and_then(|p| p.gang_min_count).is_none() {
        return;
    }
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let note = format!(
        "pod {name} of gang {key} was taken back from leaf cluster {leaf} ({why}); the whole gang is taken back so that it is placed whole again"
    );
    for member in groups.state(&key).scheduled() {
        if member.uid == uid || member.node_name().is_none() {
            continue;
        }
        let object = member.pod();
        info!(gang = %key, pod = %member.key, "taking a gang member back with its gang");
        events.send(Message::Event {
            reporting_controller: mcsched_shared::pod::scheduler_name(&object).to_string(),
            regarding: object_ref(&object),
            type_: EventType::Warning,
            reason: REASON,
            action: "Rescheduling",
            note: note.clone(),
        });
        let condition = json!({"status": {"conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": REASON, "message": note,
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }]}});
        if let Err(e) = host_pods
            .patch_status(
                &member.name,
                &PatchParams::default(),
                &Patch::Strategic(condition),
            )
            .await
        {
            warn!(pod = %member.key, error = %e, "cannot set the DisruptionTarget condition");
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(member.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match host_pods.delete(&member.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => warn!(pod = %member.key, error = %e, "cannot take a gang member back"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_engine::snapshot::PodInfo;
    use serde_json::json;
    use std::sync::Arc;

    fn member(name: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"containers": [], "nodeName": node,
                "schedulingGroup": {"podGroupName": "g"}}
        }))
        .expect("pod")
    }

    #[test]
    fn a_member_waits_until_min_count_members_are_bound() {
        let groups = PodGroups::new();
        groups.set_group(
            &serde_json::from_value(json!({
                "metadata": {"name": "g", "namespace": "ns"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
            }))
            .expect("group"),
        );
        let a = member("a", Some("mcsched-east"));
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(a.clone()))));
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(member("b", None)))));
        assert_eq!(
            held(&groups, &a).as_deref(),
            Some("waiting for the gang ns/g to be bound whole: 1 of minCount 2 pods bound")
        );
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(member(
            "b",
            Some("host-a"),
        )))));
        assert_eq!(held(&groups, &a), None);
    }
}
