//! Events and pod status writes happen off the scheduling path, as kube-scheduler's
//! broadcaster does: queued here, sent by one task, dropped (with a log line) if the
//! queue overflows rather than slowing scheduling down.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

const QUEUE: usize = 10_000;

pub enum Message {
    Event {
        reporting_controller: String,
        regarding: ObjectReference,
        type_: EventType,
        reason: &'static str,
        action: &'static str,
        note: String,
    },
    /// PodScheduled=False with the reason and message, and the nominated node if it
    /// changes (an empty name clears it).
    Unschedulable {
        namespace: String,
        name: String,
        reason: &'static str,
        message: String,
        nominated_node: Option<String>,
    },
}

#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::Sender<Message>,
}

impl EventSink {
    pub fn start(client: Client, instance: String) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(client, instance, rx));
        EventSink { tx }
    }

    pub fn send(&self, m: Message) {
        if let Err(e) = self.tx.try_send(m) {
            warn!(error = %e, "event queue full; dropping an event");
        }
    }

    pub fn scheduled(&self, scheduler: &str, pod: &Pod, node: &str) {
        let note = format!(
            "Successfully assigned {}/{} to {}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            node
        );
        self.send(Message::Event {
            reporting_controller: scheduler.to_string(),
            regarding: object_ref(pod),
            type_: EventType::Normal,
            reason: "Scheduled",
            action: "Binding",
            note,
        });
    }

    pub fn failed_scheduling(&self, scheduler: &str, pod: &Pod, message: String) {
        self.send(Message::Event {
            reporting_controller: scheduler.to_string(),
            regarding: object_ref(pod),
            type_: EventType::Warning,
            reason: "FailedScheduling",
            action: "Scheduling",
            note: message,
        });
    }
}

pub fn object_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

async fn run(client: Client, instance: String, mut rx: mpsc::Receiver<Message>) {
    let mut recorders: HashMap<String, Recorder> = HashMap::new();
    while let Some(m) = rx.recv().await {
        match m {
            Message::Event {
                reporting_controller,
                regarding,
                type_,
                reason,
                action,
                note,
            } => {
                let recorder = recorders
                    .entry(reporting_controller.clone())
                    .or_insert_with(|| {
                        Recorder::new(
                            client.clone(),
                            Reporter {
                                controller: reporting_controller.clone(),
                                instance: Some(format!("{reporting_controller}-{instance}")),
                            },
                        )
                    });
                // Notes are limited to 1 kB by the API.
                let note = truncate(note, 1024);
                let ev = Event {
                    type_,
                    reason: reason.into(),
                    note: Some(note),
                    action: action.into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&ev, &regarding).await {
                    debug!(error = %e, reason, "could not record event");
                }
            }
            Message::Unschedulable {
                namespace,
                name,
                reason,
                message,
                nominated_node,
            } => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                let mut status = json!({
                    "conditions": [{
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                    }]
                });
                // An empty name clears it (null deletes the field in a merge patch).
                match nominated_node.as_deref() {
                    Some("") => status["nominatedNodeName"] = serde_json::Value::Null,
                    Some(n) => status["nominatedNodeName"] = json!(n),
                    None => {}
                }
                let patch = json!({ "status": status });
                if let Err(e) = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    debug!(error = %e, pod = %name, "could not update pod status");
                }
            }
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
