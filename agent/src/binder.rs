//! Binding through the `pods/binding` subresource and the events kube-scheduler writes.

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};

pub struct Binder {
    client: Client,
    recorder: Recorder,
}

impl Binder {
    /// Events carry the scheduler name as their reporting controller, like kube-scheduler's
    /// `default-scheduler`.
    pub fn new(client: Client, scheduler_name: &str, instance: String) -> Self {
        let reporter = Reporter {
            controller: scheduler_name.to_string(),
            instance: Some(instance),
        };
        Binder {
            recorder: Recorder::new(client.clone(), reporter),
            client,
        }
    }

    pub async fn bind(&self, namespace: &str, name: &str, node: &str) -> Result<(), kube::Error> {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..Default::default()
            },
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        pods.create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
        .map(|_| ())
    }

    pub async fn scheduled(&self, pod: &Pod, node: &str) -> Result<(), kube::Error> {
        let note = format!(
            "Successfully assigned {}/{} to {}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            node
        );
        self.publish(pod, EventType::Normal, "Scheduled", "Binding", note)
            .await
    }

    pub async fn failed_scheduling(&self, pod: &Pod, message: String) -> Result<(), kube::Error> {
        self.publish(
            pod,
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            message,
        )
        .await
    }

    async fn publish(
        &self,
        pod: &Pod,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        self.recorder.publish(&event, &pod.object_ref(&())).await
    }
}
