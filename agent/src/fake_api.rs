//! An in-memory stand-in for the API server, for unit tests where a real one is not the
//! point: every request is recorded and answered by a closure.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use kube::client::Body;

/// `METHOD /path` of every request, in order.
pub type Calls = Arc<Mutex<Vec<String>>>;

/// A client whose requests `answer` gets as (method, path) and answers with a status code
/// and a JSON body.
pub fn client(
    answer: impl Fn(&str, &str) -> (u16, serde_json::Value) + Send + Sync + 'static,
) -> (kube::Client, Calls) {
    let calls: Calls = Arc::default();
    let seen = calls.clone();
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: http::Request<Body>| {
        let (method, path) = (req.method().to_string(), req.uri().path().to_string());
        seen.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{method} {path}"));
        let (code, body) = answer(&method, &path);
        async move {
            let body = serde_json::to_vec(&body).unwrap_or_default();
            let response = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(body));
            Ok::<_, Infallible>(response.unwrap_or_else(|_| http::Response::new(Body::empty())))
        }
    });
    (kube::Client::new(service, "default"), calls)
}

/// The API server's Status object for a failed request.
pub fn status(code: u16, reason: &str, message: &str) -> serde_json::Value {
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
