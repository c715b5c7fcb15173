//! Carrying out a preemption decision as kube-scheduler's preemption executor does, for a
//! pod or (pod group preemption) a whole pod group: the lower-priority pods nominated to
//! the node lose their nomination, and each victim gets the DisruptionTarget condition, a
//! `Preempted` event naming the preemptor ("Preempted by pod|podgroup UID on node N") and
//! is deleted; a victim still waiting on Permit in the preemptor's profile is stopped in
//! memory instead (it was never bound).

use std::sync::Arc;

use crate::observe::events::EventType;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tracing::{info, warn};

use crate::observe::events::{EventSink, Message, object_ref};
use mcsched_engine::framework::Framework;
use mcsched_engine::snapshot::PodInfo;

/// `node`: the candidate node the preemptor is nominated to (kube names it in every
/// victim's event, a pod group victim's members on other nodes too).
#[allow(clippy::too_many_arguments)]
pub fn evict(
    client: &kube::Client,
    events: &EventSink,
    fw: &Framework,
    plugin: &'static str,
    preemptor: &PodInfo,
    node: Option<&str>,
    victims: &[Arc<PodInfo>],
    lower_nominated: &[Arc<PodInfo>],
) {
    let by = Preemptor {
        kind: "pod",
        uid: preemptor.uid.clone(),
        key: preemptor.key.clone(),
        candidate: node.map(String::from),
    };
    evict_for(client, events, fw, plugin, &by, victims, lower_nominated);
}

/// Who preempts, as kube's executor names it in the victims' event and condition.
pub struct Preemptor {
    /// kube's preemptor type: `pod` or `podgroup`.
    pub kind: &'static str,
    pub uid: String,
    /// `namespace/name`, for the log.
    pub key: String,
    /// The candidate's name (a pod group's is `cluster`); None: each victim's node.
    pub candidate: Option<String>,
}

/// kube's executor for any preemptor: `evict` for a pod, pod group preemption for a group.
pub fn evict_for(
    client: &kube::Client,
    events: &EventSink,
    fw: &Framework,
    plugin: &'static str,
    preemptor: &Preemptor,
    victims: &[Arc<PodInfo>],
    lower_nominated: &[Arc<PodInfo>],
) {
    // A victim already terminating is going anyway: kube's async preemption sends it no
    // second condition, delete or event. A candidate whose every victim is terminating
    // changes nothing, lower nominations included. Without this, each preemptor that
    // counted those pods again re-sent three writes per victim (430 preemptions of 40 pods
    // in Kubernetes' async preemption spec), API load that can cost the agent its Lease.
    let victims: Vec<&Arc<PodInfo>> = victims.iter().filter(|v| !v.terminating()).collect();
    if victims.is_empty() {
        return;
    }
    for p in lower_nominated {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &p.namespace);
        let (name, key) = (p.name.clone(), p.key.clone());
        let patch = only_this(json!({"status": {"nominatedNodeName": null}}), &p.uid);
        tokio::spawn(async move {
            if let Err(e) = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                warn!(pod = %key, error = %e, "could not clear a lower-priority pod's nomination");
            }
        });
    }
    let condition_message = format!(
        "{}: preempting to accommodate a higher priority {}",
        fw.scheduler_name, preemptor.kind
    );
    let handle = fw.handle();
    for victim in victims {
        let waiting = handle.get_waiting_pod(&victim.uid);
        let node = match &preemptor.candidate {
            Some(candidate) => candidate.clone(),
            None => waiting
                .as_ref()
                .map(|wp| wp.node().to_string())
                .or_else(|| victim.node_name().map(String::from))
                .unwrap_or_default(),
        };
        let mut note = format!(
            "Preempted by {} {} on node {}",
            preemptor.kind, preemptor.uid, node
        );
        let in_memory = waiting.is_some_and(|wp| wp.preempt(plugin, "preempted"));
        if in_memory {
            note.push_str(" (in kube-scheduler memory).");
        }
        events.send(Message::Event {
            reporting_controller: fw.scheduler_name.clone(),
            regarding: object_ref(&victim.pod()),
            type_: EventType::Normal,
            reason: "Preempted",
            action: "Preempting",
            note,
        });
        if in_memory {
            info!(victim = %victim.key, preemptor = %preemptor.key, "preempted a pod waiting on permit");
            continue;
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &victim.namespace);
        let name = victim.name.clone();
        let key = victim.key.clone();
        let by = preemptor.key.clone();
        // Marked first, so that whoever sees it terminating knows why (kube's
        // PreemptionByScheduler), and the preemptor waits for it rather than preempting more.
        let condition = only_this(
            json!({"status": {"conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": mcsched_engine::node_info::PREEMPTED_REASON,
                "message": condition_message,
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            }]}}),
            &victim.uid,
        );
        // Only the pod judged a victim: not a new pod that took its name meanwhile.
        let params = DeleteParams {
            preconditions: (!victim.uid.is_empty()).then(|| Preconditions {
                uid: Some(victim.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        tokio::spawn(async move {
            match pods
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Strategic(&condition),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                Err(e) => {
                    warn!(victim = %key, error = %e, "could not mark preemption victim; deleting it anyway")
                }
            }
            match pods.delete(&name, &params).await {
                Ok(_) => info!(victim = %key, preemptor = %by, "preempted"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => warn!(victim = %key, error = %e, "could not delete preemption victim"),
            }
        });
    }
}

/// A patch that applies only to the pod of this UID: the API server refuses it (409) for
/// a new pod that took the name meanwhile.
fn only_this(mut patch: serde_json::Value, uid: &str) -> serde_json::Value {
    if !uid.is_empty() {
        patch["metadata"] = json!({ "uid": uid });
    }
    patch
}
