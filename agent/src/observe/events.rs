//! Events and pod status writes happen off the scheduling path, as kube-scheduler's
//! broadcaster does: queued here, dropped (with a log line) if the queue overflows rather
//! than slowing scheduling down. Events are recorded concurrently, each retried after
//! transport errors as client-go's broadcaster does (12 tries, 10 s apart); one task sent
//! them one after another and fell minutes behind a scheduler binding 1000 pods a second.
//! Status writes stay in order, one task. A pod bound while a status write of an earlier
//! failed attempt still waits in the queue does not get it: PodScheduled=False would land
//! on the bound pod (as kube-scheduler's API dispatcher lets a binding supersede the pod's
//! pending status patch).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use mcsched_wire::ContentType;
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
    /// Its place in the order of writes queued, to tell it from a binding made after.
    seq: u64,
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
    pending: Arc<Mutex<PendingWrites>>,
}

/// The status writes queued and not yet written, by pod (`namespace/name`).
#[derive(Default)]
struct PendingWrites {
    next_seq: u64,
    pods: HashMap<String, PodWrites>,
}

#[derive(Default)]
struct PodWrites {
    queued: usize,
    /// The pod was bound once the writes before this sequence number were queued.
    bound_before: Option<u64>,
}

impl PendingWrites {
    /// Whether the write `seq` of pod `key` is still to be made: not when the pod was
    /// bound after it was queued. Counts it as taken off the queue.
    fn take(&mut self, key: &str, seq: u64) -> bool {
        let Some(pod) = self.pods.get_mut(key) else {
            return true;
        };
        let write = pod.bound_before.is_none_or(|bound| seq >= bound);
        pod.queued = pod.queued.saturating_sub(1);
        if pod.queued == 0 {
            self.pods.remove(key);
        }
        write
    }
}

fn lock(pending: &Mutex<PendingWrites>) -> std::sync::MutexGuard<'_, PendingWrites> {
    pending.lock().unwrap_or_else(|e| e.into_inner())
}

impl EventSink {
    pub fn start(client: Client, instance: String, ct: ContentType) -> Self {
        let (events, events_rx) = mpsc::channel(QUEUE);
        let (statuses, statuses_rx) = mpsc::channel(QUEUE);
        tokio::spawn(record_events(client.clone(), instance, ct, events_rx));
        let pending = Arc::new(Mutex::new(PendingWrites::default()));
        tokio::spawn(write_statuses(client, statuses_rx, pending.clone()));
        EventSink {
            events,
            statuses,
            pending,
        }
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
            } => {
                let key = format!("{namespace}/{name}");
                let mut pending = lock(&self.pending);
                let seq = pending.next_seq;
                let queued = self
                    .statuses
                    .try_send(StatusWrite {
                        seq,
                        namespace,
                        name,
                        reason,
                        message,
                        nominated_node,
                    })
                    .map_err(|e| e.to_string());
                if queued.is_ok() {
                    pending.next_seq += 1;
                    pending.pods.entry(key).or_default().queued += 1;
                }
                queued
            }
        };
        if let Err(e) = queued {
            warn!(error = %e, "event queue full; dropping an event");
        }
    }

    /// The pod is bound: its Scheduled event, and none of the status writes of its earlier
    /// attempts still queued.
    pub fn scheduled(&self, scheduler: &str, pod: &Pod, node: &str) {
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        {
            let mut pending = lock(&self.pending);
            let next = pending.next_seq;
            if let Some(writes) = pending.pods.get_mut(&key) {
                writes.bound_before = Some(next);
            }
        }
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
    ct: ContentType,
    mut rx: mpsc::Receiver<(String, NewEvent)>,
) {
    let mut recorders: HashMap<String, EventRecorder> = HashMap::new();
    let slots = Arc::new(Semaphore::new(EVENTS_IN_FLIGHT));
    while let Some((reporting_controller, event)) = rx.recv().await {
        let recorder = recorders
            .entry(reporting_controller.clone())
            .or_insert_with(|| {
                let instance = format!("{reporting_controller}-{instance}");
                EventRecorder::new(client.clone(), ct, reporting_controller, instance)
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
async fn write_statuses(
    client: Client,
    mut rx: mpsc::Receiver<StatusWrite>,
    pending: Arc<Mutex<PendingWrites>>,
) {
    while let Some(StatusWrite {
        seq,
        namespace,
        name,
        reason,
        message,
        nominated_node,
    }) = rx.recv().await
    {
        if !lock(&pending).take(&format!("{namespace}/{name}"), seq) {
            debug!(pod = %name, %namespace, "bound since: its PodScheduled=False write dropped");
            continue;
        }
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
        /// Every request's method and path, in order.
        requests: Mutex<Vec<String>>,
        posts: AtomicUsize,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
        answers: Mutex<Vec<Answer>>,
    }

    /// A client whose event creates take 100 ms and are answered from `answers` in turn
    /// (then Created).
    fn stand_in(answers: Vec<Answer>) -> (Client, Arc<Server>) {
        let server = Arc::new(Server {
            requests: Mutex::new(Vec::new()),
            posts: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            answers: Mutex::new(answers.into_iter().rev().collect()),
        });
        let s = server.clone();
        let service = tower::service_fn(move |req: http::Request<Body>| {
            let s = s.clone();
            async move {
                s.requests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("{} {}", req.method(), req.uri().path()));
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
        let sink = EventSink::start(client, "test".into(), mcsched_wire::ContentType::Json);
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

    fn unschedulable(name: &str) -> Message {
        Message::Unschedulable {
            namespace: "ns".into(),
            name: name.into(),
            reason: "Unschedulable",
            message: "0/1 nodes are available".into(),
            nominated_node: None,
        }
    }

    /// The status writes of a pod's failed attempts still queued when it is bound are
    /// dropped (PodScheduled=False would land on the bound pod: Kubernetes' e2e spec
    /// "validates local ephemeral storage resource limits" fails on a bound pod whose
    /// PodScheduled is not True); other pods' writes, and writes queued after the
    /// binding, are made.
    #[tokio::test(start_paused = true)]
    async fn a_binding_drops_the_pods_queued_status_writes() {
        let (client, server) = stand_in(Vec::new());
        let sink = EventSink::start(client, "test".into(), mcsched_wire::ContentType::Json);
        for _ in 0..3 {
            sink.send(unschedulable("a"));
        }
        sink.send(unschedulable("b"));
        sink.scheduled("mcsched", &pod("a"), "n1");
        // A pod of the same name again, failing after the binding.
        sink.send(unschedulable("a"));
        wait_for_posts(&server, 3).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let statuses: Vec<String> = server
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| r.ends_with("/status"))
            .cloned()
            .collect();
        assert_eq!(
            statuses,
            [
                "PATCH /api/v1/namespaces/ns/pods/b/status",
                "PATCH /api/v1/namespaces/ns/pods/a/status"
            ]
        );
        assert!(lock(&sink.pending).pods.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn unreachable_is_retried_refused_is_not() {
        let (client, server) = stand_in(vec![Answer::Unreachable, Answer::Unreachable]);
        let sink = EventSink::start(client, "test".into(), mcsched_wire::ContentType::Json);
        sink.scheduled("mcsched", &pod("p"), "n1");
        // Two failures, then created: three tries, 10 to 12.5 s apart.
        wait_for_posts(&server, 3).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(server.posts.load(Ordering::SeqCst), 3);

        let (client, server) = stand_in(vec![Answer::Refused]);
        let sink = EventSink::start(client, "test".into(), mcsched_wire::ContentType::Json);
        sink.scheduled("mcsched", &pod("p"), "n1");
        wait_for_posts(&server, 1).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(server.posts.load(Ordering::SeqCst), 1);

        // Never reachable: given up after client-go's twelve tries.
        let (client, server) = stand_in(vec![Answer::Unreachable; 20]);
        let sink = EventSink::start(client, "test".into(), mcsched_wire::ContentType::Json);
        sink.scheduled("mcsched", &pod("p"), "n1");
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(server.posts.load(Ordering::SeqCst), 12);
    }
}
