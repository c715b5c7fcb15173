//! An in-memory stand-in for the API server, for unit tests where a real one is not the
//! point: every request is recorded and answered by a closure.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use kube::client::Body;
use serde_json::Value;

/// `METHOD /path` of every request, in order. A dry run's path ends in
/// [`DRY_RUN`] (the answering closure sees it so too): it writes nothing.
pub type Calls = Arc<Mutex<Vec<String>>>;

/// What a dry run's path ends in, as calls record it.
pub const DRY_RUN: &str = "?dryRun=All";

/// `METHOD /path` of every request with its JSON body (Null when it has none), in order.
pub type Requests = Arc<Mutex<Vec<(String, Value)>>>;

/// A client whose requests `answer` gets as (method, path) and answers with a status code
/// and a JSON body.
pub fn client(
    answer: impl Fn(&str, &str) -> (u16, Value) + Send + Sync + 'static,
) -> (kube::Client, Calls) {
    let (client, calls, _) = recording(move |method, path, _| answer(method, path));
    (client, calls)
}

/// As [`client`], `answer` also given each request's JSON body, and the bodies recorded:
/// for tests that check what was written, or answer a create with what was sent.
pub fn recording(
    answer: impl Fn(&str, &str, &Value) -> (u16, Value) + Send + Sync + 'static,
) -> (kube::Client, Calls, Requests) {
    let calls: Calls = Arc::default();
    let requests: Requests = Arc::default();
    let (seen, bodies) = (calls.clone(), requests.clone());
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: http::Request<Body>| {
        let (seen, bodies, answer) = (seen.clone(), bodies.clone(), answer.clone());
        async move {
            let method = req.method().to_string();
            let dry_run = req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "dryRun=All"));
            let path = format!("{}{}", req.uri().path(), if dry_run { DRY_RUN } else { "" });
            let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
            let sent: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let call = format!("{method} {path}");
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(call.clone());
            let (code, body) = answer(&method, &path, &sent);
            bodies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((call, sent));
            let body = serde_json::to_vec(&body).unwrap_or_default();
            let response = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(body));
            Ok::<_, Infallible>(response.unwrap_or_else(|_| http::Response::new(Body::empty())))
        }
    });
    (kube::Client::new(service, "default"), calls, requests)
}

/// The API server's Status object for a failed request.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": message
    })
}

/// Whether a call matching `method` and ending in `suffix` was made.
pub fn called(calls: &Calls, method: &str, suffix: &str) -> bool {
    calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|c| c.starts_with(method) && c.ends_with(suffix))
}

/// The bodies of the requests matching `method` and ending in `suffix`, in order.
pub fn sent(requests: &Requests, method: &str, suffix: &str) -> Vec<Value> {
    requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(c, _)| c.starts_with(method) && c.ends_with(suffix))
        .map(|(_, body)| body.clone())
        .collect()
}

/// Every write (not GET, nor a dry run) made, as `METHOD /path`, in order.
pub fn writes(calls: &Calls) -> Vec<String> {
    calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|c| !c.starts_with("GET ") && !c.ends_with(DRY_RUN))
        .cloned()
        .collect()
}

/// `base` with `extra` merged into it (objects key by key, anything else replaced): a
/// test object built from a default one.
pub fn merged(mut base: Value, extra: Value) -> Value {
    merge(&mut base, extra);
    base
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, from) => *into = from,
    }
}
