//! Events and pod status writes happen off the scheduling path, as kube-scheduler's
//! broadcaster does: queued here, dropped (with a log line) if the queue overflows rather
//! than slowing scheduling down. Events are recorded concurrently, each retried after
//! transport errors as client-go's broadcaster does (12 tries, 10 s apart); one task sent
//! them one after another and fell minutes behind a scheduler binding 1000 pods a second.
//! Status writes stay in order, one task.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, warn};

pub use crate::observe::event_recorder::EventType;
use crate::observe::event_recorder::{EventRecorder, NewEvent};

const QUEUE: usize = 10_000;
/// Events being written at once (client-go starts a goroutine per event, bounded only by
/// the client's rate limit, which the agent's client applies here too).
const EVENTS_IN_FLIGHT: usize = 32;

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

/// A `Message::Unschedulable` on its way to the status writer.
struct StatusWrite {
    namespace: String,
    name: String,
    reason: &'static str,
    message: String,
    nominated_node: Option<String>,
}

#[derive(Clone)]
pub struct EventSink {
    /// Each event with its reporting controller.
    events: mpsc::Sender<(String, NewEvent)>,
    statuses: mpsc::Sender<StatusWrite>,
}

impl EventSink {
    pub fn start(client: Client, instance: String) -> Self {
        let (events, events_rx) = mpsc::channel(QUEUE);
        let (statuses, statuses_rx) = mpsc::channel(QUEUE);
        tokio::spawn(record_events(client.clone(), instance, events_rx));
        tokio::spawn(write_statuses(client, statuses_rx));
        EventSink { events, statuses }
    }

    pub fn send(&self, m: Message) {
        let queued = match m {
            Message::Event {
                reporting_controller,
                regarding,
                type_,
                reason,
                action,
                note,
            } => {
                // Notes are limited to 1 kB by the API.
                let event = NewEvent {
                    type_,
                    reason,
                    action,
                    note: truncate(note, 1024),
                    regarding,
                };
                self.events
                    .try_send((reporting_controller, event))
                    .map_err(|e| e.to_string())
            }
            Message::Unschedulable {
                namespace,
                name,
                reason,
                message,
                nominated_node,
            } => self
                .statuses
                .try_send(StatusWrite {
                    namespace,
                    name,
                    reason,
                    message,
                    nominated_node,
                })
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = queued {
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

/// Records each event in a task of its own, at most EVENTS_IN_FLIGHT at once, with one
/// recorder (and so one series cache) per reporting scheduler.
async fn record_events(
    client: Client,
    instance: String,
    mut rx: mpsc::Receiver<(String, NewEvent)>,
) {
    let mut recorders: HashMap<String, EventRecorder> = HashMap::new();
    let slots = Arc::new(Semaphore::new(EVENTS_IN_FLIGHT));
    while let Some((reporting_controller, event)) = rx.recv().await {
        let recorder = recorders
            .entry(reporting_controller.clone())
            .or_insert_with(|| {
                let instance = format!("{reporting_controller}-{instance}");
                EventRecorder::new(client.clone(), reporting_controller, instance)
            })
            .clone();
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        tokio::spawn(async move {
            recorder.record(event).await;
            drop(slot);
        });
    }
}

/// PodScheduled=False and nominated node writes, one at a time so a pod's writes land in
/// the order they were made.
async fn write_statuses(client: Client, mut rx: mpsc::Receiver<StatusWrite>) {
    while let Some(StatusWrite {
        namespace,
        name,
        reason,
        message,
        nominated_node,
    }) = rx.recv().await
    {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use kube::client::Body;

    /// How the stand-in API server answers the n-th event create (0-based).
    #[derive(Clone, Copy)]
    enum Answer {
        Created,
        Refused,
        Unreachable,
    }

    struct Server {
        posts: AtomicUsize,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
        answers: Mutex<Vec<Answer>>,
    }

    /// A client whose event creates take 100 ms and are answered from `answers` in turn
    /// (then Created).
    fn stand_in(answers: Vec<Answer>) -> (Client, Arc<Server>) {
        let server = Arc::new(Server {
            posts: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            answers: Mutex::new(answers.into_iter().rev().collect()),
        });
        let s = server.clone();
        let service = tower::service_fn(move |_req: http::Request<Body>| {
            let s = s.clone();
            async move {
                s.posts.fetch_add(1, Ordering::SeqCst);
                let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                s.most_in_flight.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                s.in_flight.fetch_sub(1, Ordering::SeqCst);
                let answer = s
                    .answers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop()
                    .unwrap_or(Answer::Created);
                let (code, body) = match answer {
                    Answer::Unreachable => {
                        return Err(std::io::Error::other("connection refused"));
                    }
                    Answer::Refused => (
                        422,
                        crate::fake_api::status(422, "Invalid", "event is invalid"),
                    ),
                    Answer::Created => (
                        201,
                        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                               "metadata": {"name": "e", "namespace": "ns"},
                               "eventTime": "2026-01-01T00:00:00.000000Z"}),
                    ),
                };
                let body = serde_json::to_vec(&body).unwrap_or_default();
                Ok(http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap_or_else(|_| http::Response::new(Body::empty())))
            }
        });
        (Client::new(service, "ns"), server)
    }

    fn pod(name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p
    }

    async fn wait_for_posts(server: &Server, n: usize) {
        for _ in 0..10_000 {
            if server.posts.load(Ordering::SeqCst) >= n
                && server.in_flight.load(Ordering::SeqCst) == 0
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{} of {n} posts", server.posts.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn events_are_written_concurrently() {
        let (client, server) = stand_in(Vec::new());
        let sink = EventSink::start(client, "test".into());
        for i in 0..40 {
            sink.scheduled("mcsched", &pod(&format!("p{i}")), "n1");
        }
        wait_for_posts(&server, 40).await;
        assert_eq!(server.posts.load(Ordering::SeqCst), 40);
        assert_eq!(
            server.most_in_flight.load(Ordering::SeqCst),
            EVENTS_IN_FLIGHT
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unreachable_is_retried_refused_is_not() {
        let (client, server) = stand_in(vec![Answer::Unreachable, Answer::Unreachable]);
        let sink = EventSink::start(client, "test".into());
        sink.scheduled("mcsched", &pod("p"), "n1");
        // Two failures, then created: three tries, 10 to 12.5 s apart.
        wait_for_posts(&server, 3).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(server.posts.load(Ordering::SeqCst), 3);

        let (client, server) = stand_in(vec![Answer::Refused]);
        let sink = EventSink::start(client, "test".into());
        sink.scheduled("mcsched", &pod("p"), "n1");
        wait_for_posts(&server, 1).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(server.posts.load(Ordering::SeqCst), 1);

        // Never reachable: given up after client-go's twelve tries.
        let (client, server) = stand_in(vec![Answer::Unreachable; 20]);
        let sink = EventSink::start(client, "test".into());
        sink.scheduled("mcsched", &pod("p"), "n1");
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(server.posts.load(Ordering::SeqCst), 12);
    }
}
