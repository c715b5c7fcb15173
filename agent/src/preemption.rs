//! Carrying out a preemption decision: the victims are deleted, each with a `Preempted`
//! event, as kube-scheduler's preemption executor does; a victim still waiting on Permit
//! in the preemptor's profile is stopped in memory instead (it was never bound).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::events::EventType;
use tracing::{info, warn};

use crate::events::{EventSink, Message, object_ref};
use crate::framework::Framework;
use crate::snapshot::PodInfo;

pub fn evict(
    client: &kube::Client,
    events: &EventSink,
    fw: &Framework,
    plugin: &'static str,
    preemptor: &PodInfo,
    victims: &[Arc<PodInfo>],
) {
    let handle = fw.handle();
    for victim in victims {
        let waiting = handle.get_waiting_pod(&victim.uid);
        let node = waiting
            .as_ref()
            .map(|wp| wp.node().to_string())
            .or_else(|| victim.node_name().map(String::from))
            .unwrap_or_default();
        let mut note = format!("Preempted by pod {} on node {}", preemptor.uid, node);
        let in_memory = waiting.is_some_and(|wp| wp.preempt(plugin, "preempted"));
        if in_memory {
            note.push_str(" (in kube-scheduler memory).");
        }
        events.send(Message::Event {
            reporting_controller: fw.scheduler_name.clone(),
            regarding: object_ref(&victim.pod),
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
        // Only the pod judged a victim: not a new pod that took its name meanwhile.
        let params = DeleteParams {
            preconditions: (!victim.uid.is_empty()).then(|| Preconditions {
                uid: Some(victim.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        tokio::spawn(async move {
            match pods.delete(&name, &params).await {
                Ok(_) => info!(victim = %key, preemptor = %by, "preempted"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => warn!(victim = %key, error = %e, "could not delete preemption victim"),
            }
        });
    }
}
