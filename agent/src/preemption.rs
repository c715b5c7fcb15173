//! Carrying out a preemption decision: the victims are deleted, each with a `Preempted`
//! event, as kube-scheduler's preemption executor does.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;
use kube::runtime::events::EventType;
use tracing::{info, warn};

use crate::events::{EventSink, Message, object_ref};
use crate::snapshot::PodInfo;

pub fn evict(
    client: &kube::Client,
    events: &EventSink,
    scheduler: &str,
    preemptor: &PodInfo,
    victims: &[Arc<PodInfo>],
) {
    for victim in victims {
        let node = victim.node_name().unwrap_or_default().to_string();
        events.send(Message::Event {
            reporting_controller: scheduler.to_string(),
            regarding: object_ref(&victim.pod),
            type_: EventType::Normal,
            reason: "Preempted",
            action: "Preempting",
            note: format!("Preempted by pod {} on node {}", preemptor.uid, node),
        });
        let pods: Api<Pod> = Api::namespaced(client.clone(), &victim.namespace);
        let name = victim.name.clone();
        let key = victim.key.clone();
        let by = preemptor.key.clone();
        tokio::spawn(async move {
            match pods.delete(&name, &DeleteParams::default()).await {
                Ok(_) => info!(victim = %key, preemptor = %by, "preempted"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => warn!(victim = %key, error = %e, "could not delete preemption victim"),
            }
        });
    }
}
