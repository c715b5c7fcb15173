//! events.k8s.io/v1 Events written as client-go's event broadcaster (kube-scheduler's)
//! writes them: the first of a kind created; the second of the same kind (same action,
//! reason, reporter and regarded object, whatever the type and note) turns it into a
//! series, patched at once; later ones only counted, the count patched every 30 minutes
//! and once more when the series has not been seen for 6 minutes, when it is forgotten.
//! The note is the first event's; later notes of a series are not written (client-go's
//! behaviour too).
//! Transport errors are retried (12 tries, 10 s apart), refusals are not.
//!
//! kube-runtime's Recorder does the same with one difference that matters at scheduling
//! speed: it sweeps its whole cache of the last 6 minutes' events on every event (its
//! cost is in bench/analysis.md). Here the sweep runs once a minute.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use mcsched_wire::ContentType;
use serde_json::json;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, warn};

/// client-go's `finishTime`, `refreshTime`, `maxTriesPerEvent` and retry sleep.
const FINISH_AFTER: Duration = Duration::from_secs(6 * 60);
const REFRESH_EVERY: Duration = Duration::from_secs(30 * 60);
const TRIES: u32 = 12;
const RETRY_SLEEP: Duration = Duration::from_secs(10);
/// How often the cache is swept for finished events and series.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// events.k8s.io's two event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to record, as the scheduler states it.
pub struct NewEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    pub regarding: ObjectReference,
}

/// What makes two events the same kind (client-go's `eventKey`: the reporter is the
/// recorder's own; neither type nor note is part).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    action: &'static str,
    reason: &'static str,
    /// The regarded object's reference, every field (api version, kind, namespace, name,
    /// uid, resource version, field path) in one string, NUL-separated, with a bit per
    /// field that is set: one allocation where seven were, for each of thousands of keys.
    /// No field of a reference holds a NUL (names, uids and paths are printable).
    present: u8,
    regarding: Box<str>,
}

const NAMESPACE: usize = 2;
const NAME: usize = 3;

impl Key {
    fn new(action: &'static str, reason: &'static str, r: ObjectReference) -> Self {
        let fields = [
            r.api_version,
            r.kind,
            r.namespace,
            r.name,
            r.uid,
            r.resource_version,
            r.field_path,
        ];
        let present = fields
            .iter()
            .enumerate()
            .fold(0u8, |m, (i, f)| m | (u8::from(f.is_some()) << i));
        let regarding = fields
            .iter()
            .map(|f| f.as_deref().unwrap_or_default().replace('\0', "\u{FFFD}"))
            .collect::<Vec<_>>()
            .join("\0");
        Key {
            action,
            reason,
            present,
            regarding: regarding.into(),
        }
    }

    fn field(&self, i: usize) -> Option<&str> {
        if self.present & (1 << i) == 0 {
            return None;
        }
        self.regarding.split('\0').nth(i)
    }

    fn regarding(&self) -> ObjectReference {
        let field = |i| self.field(i).map(String::from);
        ObjectReference {
            api_version: field(0),
            kind: field(1),
            namespace: field(NAMESPACE),
            name: field(NAME),
            uid: field(4),
            resource_version: field(5),
            field_path: field(6),
        }
    }

    fn namespace(&self) -> &str {
        self.field(NAMESPACE).unwrap_or("default")
    }

    fn name(&self) -> Option<&str> {
        self.field(NAME)
    }
}

/// What is kept of an event written: the parts its key does not hold, enough to write it
/// again. Thousands are kept at a high pod rate, and whole Event objects took memory the
/// scheduler needs (measured in bench/analysis.md).
struct Cached {
    name: String,
    type_: EventType,
    note: String,
    event_time: Timestamp,
    /// Count and last observed time, once a second of the kind was seen.
    series: Option<(i32, Timestamp)>,
    last_seen: Instant,
}

struct Cache {
    events: HashMap<Key, Cached>,
    last_refresh: Instant,
}

/// A write to make: a new event (create) or a series' count (patch, create if gone).
enum Write {
    Create(Event),
    Series(Event),
}

struct Inner {
    client: Client,
    content_type: ContentType,
    controller: String,
    instance: String,
    cache: Mutex<Cache>,
}

/// Records events for one reporting controller. Cheap to clone; the sweep task stops
/// when the last clone is dropped.
#[derive(Clone)]
pub struct EventRecorder(Arc<Inner>);

impl EventRecorder {
    /// Must be called within a Tokio runtime: it starts the sweep task.
    pub fn new(client: Client, ct: ContentType, controller: String, instance: String) -> Self {
        let inner = Arc::new(Inner {
            client,
            content_type: ct,
            controller,
            instance,
            cache: Mutex::new(Cache {
                events: HashMap::new(),
                last_refresh: Instant::now(),
            }),
        });
        tokio::spawn(sweep_every_minute(Arc::downgrade(&inner)));
        EventRecorder(inner)
    }

    /// Records `e`: writes what client-go would write for it now (nothing for the third
    /// and later of a series).
    pub async fn record(&self, e: NewEvent) {
        if let Some(w) = self.0.note_event(e) {
            self.0.write(w).await;
        }
    }
}

impl Inner {
    /// The cache's part of `record`, under its lock and without waiting on anything.
    fn note_event(&self, e: NewEvent) -> Option<Write> {
        let now = Instant::now();
        let stamp = Timestamp::now();
        let key = Key::new(e.action, e.reason, e.regarding);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.events.get_mut(&key) {
            c.last_seen = now;
            return match c.series.as_mut() {
                Some((count, observed)) => {
                    *count += 1;
                    *observed = stamp;
                    None
                }
                None => {
                    c.series = Some((2, stamp));
                    Some(Write::Series(self.event(&key, c)))
                }
            };
        }
        let c = Cached {
            // client-go's name: the object's and the time in hexadecimal nanoseconds.
            name: format!(
                "{}.{:x}",
                key.name().unwrap_or(&self.controller),
                stamp.as_nanosecond()
            ),
            type_: e.type_,
            note: e.note,
            event_time: stamp,
            series: None,
            last_seen: now,
        };
        let write = Write::Create(self.event(&key, &c));
        cache.events.insert(key, c);
        Some(write)
    }

    fn event(&self, key: &Key, c: &Cached) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(c.name.clone()),
                namespace: Some(key.namespace().to_string()),
                ..Default::default()
            },
            event_time: Some(MicroTime(c.event_time)),
            series: c.series.map(|(count, observed)| EventSeries {
                count,
                last_observed_time: MicroTime(observed),
            }),
            type_: Some(c.type_.as_str().into()),
            reason: Some(key.reason.into()),
            action: Some(key.action.into()),
            note: Some(c.note.clone()),
            regarding: Some(key.regarding()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }

    /// One write with client-go's retries.
    async fn write(&self, w: Write) {
        for attempt in 1..=TRIES {
            let done = match &w {
                Write::Create(e) => self.create(e).await,
                Write::Series(e) => self.patch_series(e).await,
            };
            match done {
                Ok(()) => return,
                Err(kube::Error::Api(s)) => {
                    debug!(error = %s, "the API server refused an event");
                    return;
                }
                Err(err) if attempt < TRIES => {
                    debug!(error = %err, attempt, "could not record event; retrying");
                    let jitter = rand::random_range(0.0..0.25);
                    tokio::time::sleep(RETRY_SLEEP.mul_f64(1.0 + jitter)).await;
                }
                Err(err) => warn!(error = %err, "could not record event; giving up"),
            }
        }
    }

    fn api(&self, e: &Event) -> Api<Event> {
        Api::namespaced(
            self.client.clone(),
            e.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }

    /// The API server's copy of the event is not decoded: only whether it was created
    /// matters here (bench/analysis.md has what decoding it cost).
    async fn create(&self, e: &Event) -> Result<(), kube::Error> {
        mcsched_wire::write::create_event(&self.client, self.content_type, e).await
    }

    /// client-go's series patch; an event deleted meanwhile is created again.
    async fn patch_series(&self, e: &Event) -> Result<(), kube::Error> {
        let name = e.metadata.name.as_deref().unwrap_or_default();
        let patch = json!({ "series": e.series });
        match self
            .api(e)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let mut again = e.clone();
                again.metadata.resource_version = None;
                self.create(&again).await
            }
            other => other.map(|_| ()),
        }
    }
}

async fn sweep_every_minute(recorder: Weak<Inner>) {
    let mut ticks = tokio::time::interval(SWEEP_EVERY);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(inner) = recorder.upgrade() else {
            return;
        };
        let writes = {
            let mut cache = inner.cache.lock().unwrap_or_else(|p| p.into_inner());
            sweep(&inner, &mut cache, Instant::now())
        };
        for w in writes {
            let inner = inner.clone();
            tokio::spawn(async move { inner.write(w).await });
        }
    }
}

/// Series unseen for 6 minutes get their last count written and are forgotten, as are
/// single events older than that (client-go's `finishSeries`); every 30 minutes, every
/// series' count is written (`refreshExistingEventSeries`).
fn sweep(inner: &Inner, cache: &mut Cache, now: Instant) -> Vec<Write> {
    let mut writes = Vec::new();
    cache.events.retain(|key, c| {
        if now.duration_since(c.last_seen) < FINISH_AFTER {
            return true;
        }
        if c.series.is_some() {
            writes.push(Write::Series(inner.event(key, c)));
        }
        false
    });
    if now.duration_since(cache.last_refresh) >= REFRESH_EVERY {
        cache.last_refresh = now;
        writes.extend(
            cache
                .events
                .iter()
                .filter(|(_, c)| c.series.is_some())
                .map(|(key, c)| Write::Series(inner.event(key, c))),
        );
    }
    writes
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The key keeps every field of the reference, telling an unset field from an empty one.
    #[test]
    fn a_key_gives_back_the_reference_it_was_made_of() {
        let full = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some("p".into()),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            field_path: Some("spec.containers{c}".into()),
        };
        let sparse = ObjectReference {
            kind: Some("Pod".into()),
            name: Some(String::new()),
            ..Default::default()
        };
        for r in [full, sparse.clone(), ObjectReference::default()] {
            assert_eq!(Key::new("a", "r", r.clone()).regarding(), r);
        }
        assert_eq!(Key::new("a", "r", sparse.clone()).namespace(), "default");
        assert_eq!(Key::new("a", "r", sparse.clone()).name(), Some(""));
        let unnamed = ObjectReference {
            kind: Some("Pod".into()),
            ..Default::default()
        };
        assert_ne!(Key::new("a", "r", sparse), Key::new("a", "r", unnamed));
    }
    use kube::client::Body;
    use serde_json::Value;

    /// Every request as (method, path, body), in order.
    type Requests = Arc<Mutex<Vec<(String, String, Value)>>>;

    /// An API server stand-in that creates whatever is posted and patches anything
    /// unless `patch_finds_nothing`, when a patch gets 404.
    fn stand_in(patch_finds_nothing: bool) -> (Client, Requests) {
        let requests: Requests = Arc::default();
        let seen = requests.clone();
        let service = tower::service_fn(move |req: http::Request<Body>| {
            let seen = seen.clone();
            async move {
                let method = req.method().to_string();
                let path = req.uri().path().to_string();
                let bytes = req.into_body().collect_bytes().await?;
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                seen.lock().unwrap_or_else(|e| e.into_inner()).push((
                    method.clone(),
                    path,
                    body.clone(),
                ));
                let (code, answer) = match method.as_str() {
                    "PATCH" if patch_finds_nothing => {
                        (404, crate::fake_api::status(404, "NotFound", "not found"))
                    }
                    "PATCH" => (
                        200,
                        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                               "metadata": {"name": "e", "namespace": "ns"},
                               "eventTime": "2026-01-01T00:00:00.000000Z"}),
                    ),
                    _ => (201, body),
                };
                let answer = serde_json::to_vec(&answer).unwrap_or_default();
                Ok::<_, kube::Error>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(Body::from(answer))
                        .unwrap_or_else(|_| http::Response::new(Body::empty())),
                )
            }
        });
        (Client::new(service, "ns"), requests)
    }

    fn failed(pod: &str, note: &str) -> NewEvent {
        NewEvent {
            type_: EventType::Warning,
            reason: "FailedScheduling",
            action: "Scheduling",
            note: note.into(),
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some("ns".into()),
                name: Some(pod.into()),
                uid: Some(format!("uid-{pod}")),
                ..Default::default()
            },
        }
    }

    fn taken(requests: &Requests) -> Vec<(String, String, Value)> {
        std::mem::take(&mut *requests.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Lets the sweep task's spawned writes run.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_second_of_a_kind_makes_a_series_later_ones_are_counted() {
        let (client, requests) = stand_in(false);
        let recorder = EventRecorder::new(
            client,
            ContentType::Json,
            "mcsched".into(),
            "mcsched-a".into(),
        );
        recorder
            .record(failed("p", "0/3 nodes are available"))
            .await;
        let first = taken(&requests);
        assert_eq!(first.len(), 1);
        let (method, path, body) = &first[0];
        assert_eq!(
            (method.as_str(), path.as_str()),
            ("POST", "/apis/events.k8s.io/v1/namespaces/ns/events")
        );
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["reason"], "FailedScheduling");
        assert_eq!(body["action"], "Scheduling");
        assert_eq!(body["note"], "0/3 nodes are available");
        assert_eq!(body["regarding"]["name"], "p");
        assert_eq!(body["reportingController"], "mcsched");
        assert_eq!(body["reportingInstance"], "mcsched-a");
        assert!(body.get("series").is_none());
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(name.starts_with("p."), "{name}");

        // Another note, same kind: a series of two, patched onto the first.
        recorder
            .record(failed("p", "0/4 nodes are available"))
            .await;
        let second = taken(&requests);
        assert_eq!(second.len(), 1);
        let (method, path, body) = &second[0];
        assert_eq!(method, "PATCH");
        assert_eq!(
            path,
            &format!("/apis/events.k8s.io/v1/namespaces/ns/events/{name}")
        );
        assert_eq!(body["series"]["count"], 2);
        assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");

        // Third and fourth: counted, not written.
        recorder.record(failed("p", "x")).await;
        recorder.record(failed("p", "y")).await;
        assert!(taken(&requests).is_empty());

        // Another pod is another kind.
        recorder.record(failed("q", "x")).await;
        let other = taken(&requests);
        assert_eq!(other.len(), 1);
        assert_eq!(other[0].0, "POST");

        // Unseen for 6 minutes: the series' last count is written and it is forgotten;
        // q's single event is forgotten without a write.
        tokio::time::sleep(FINISH_AFTER + SWEEP_EVERY).await;
        settle().await;
        let finished = taken(&requests);
        assert_eq!(finished.len(), 1, "{finished:?}");
        assert_eq!(finished[0].0, "PATCH");
        assert_eq!(finished[0].2["series"]["count"], 4);

        // Forgotten: the next one starts anew.
        recorder.record(failed("p", "z")).await;
        let again = taken(&requests);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].0, "POST");
        assert_eq!(again[0].2["note"], "z");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lasting_series_is_refreshed_every_30_minutes() {
        let (client, requests) = stand_in(false);
        let recorder = EventRecorder::new(
            client,
            ContentType::Json,
            "mcsched".into(),
            "mcsched-a".into(),
        );
        recorder.record(failed("p", "a")).await;
        recorder.record(failed("p", "b")).await;
        assert_eq!(taken(&requests).len(), 2);
        // Seen every 5 minutes (and a second, off the sweep's ticks): never finished, its
        // count written at the half hour, after five more.
        let mut counts = Vec::new();
        for _ in 0..7 {
            tokio::time::sleep(Duration::from_secs(5 * 60 + 1)).await;
            recorder.record(failed("p", "c")).await;
            settle().await;
            for (method, _, body) in taken(&requests) {
                assert_eq!(method, "PATCH");
                counts.push(body["series"]["count"].clone());
            }
        }
        assert_eq!(counts, vec![json!(7)], "one refresh in 35 minutes");
    }

    #[tokio::test(start_paused = true)]
    async fn a_series_whose_event_is_gone_is_created_again() {
        let (client, requests) = stand_in(true);
        let recorder = EventRecorder::new(
            client,
            ContentType::Json,
            "mcsched".into(),
            "mcsched-a".into(),
        );
        recorder.record(failed("p", "a")).await;
        recorder.record(failed("p", "b")).await;
        let seen: Vec<_> = taken(&requests)
            .into_iter()
            .map(|(m, _, b)| (m, b["series"]["count"].clone()))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("POST".to_string(), Value::Null),
                ("PATCH".to_string(), json!(2)),
                ("POST".to_string(), json!(2)),
            ]
        );
    }
}
