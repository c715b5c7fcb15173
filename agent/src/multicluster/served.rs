//! What each leaf's API server serves of core/v1: its version (`/version`) and OpenAPI v3
//! document (`/openapi/v3/api/v1`), read once per connection and again when the leaf
//! reports another version, at most [`MAX_DOCUMENT_BYTES`] of it. The model and the walk
//! are the engine's ([`mcsched_engine::leaf::served_fields`]); the leaf check judges copies
//! by what this reads.
//!
//! Nothing here blocks scheduling: a leaf whose document cannot be read (unreachable,
//! refused, too large, not OpenAPI v3) is judged as before this check existed, `explain`
//! says why, and the read is tried again with backoff. Only a document read gives a
//! definite answer, and only then does a copy carrying a field the leaf does not serve stay
//! off it. Pod sync creates copies with strict field validation either way, so such a leaf
//! refuses the copy rather than drop the field.

use std::sync::Arc;
use std::time::Duration;

use futures::AsyncReadExt as _;
use kube::Client;
use mcsched_engine::framework::ClusterEvent;
use mcsched_engine::leaf::served_fields::{
    DOCUMENT_PATH, MAX_DOCUMENT_BYTES, SchemaError, Served, ServedFields,
};
use tracing::{info, warn};

use super::OnEvent;

/// How long one read (version and document) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// The first retry after a failed read, doubled up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(10);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// What a `LeafCluster`'s sync (its `start`) waits for besides the watches' first lists.
pub const SYNC_KIND: &str = "leaf served fields";

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("reading /version: {0}")]
    Version(#[source] kube::Error),
    #[error("reading {DOCUMENT_PATH}: {0}")]
    Request(#[source] kube::Error),
    #[error("reading {DOCUMENT_PATH}: {0}")]
    Body(#[source] std::io::Error),
    #[error("{DOCUMENT_PATH} is larger than {limit} bytes: not read")]
    TooLarge { limit: usize },
    #[error("{DOCUMENT_PATH}: {0}")]
    Schema(#[from] SchemaError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("reading {DOCUMENT_PATH} stopped: {0}")]
    Stopped(String),
}

/// The leaf's version and the fields it serves, its document read up to `limit` bytes.
pub async fn fetch(client: &Client, limit: usize) -> Result<ServedFields, FetchError> {
    let version = client
        .apiserver_version()
        .await
        .map_err(FetchError::Version)?;
    let request = http::Request::get(DOCUMENT_PATH)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .map_err(|e| FetchError::Request(kube::Error::HttpError(e)))?;
    let body = client
        .request_stream(request)
        .await
        .map_err(FetchError::Request)?;
    let mut bytes = Vec::new();
    // One byte over the limit tells a document too large from one of exactly the limit.
    Box::pin(body)
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(FetchError::Body)?;
    if bytes.len() > limit {
        return Err(FetchError::TooLarge { limit });
    }
    // Some 20 ms for a 2 MB document: off the runtime's threads.
    let git_version = version.git_version;
    tokio::task::spawn_blocking(move || ServedFields::from_document(&bytes, &git_version))
        .await
        .map_err(|e| FetchError::Stopped(e.to_string()))?
        .map_err(FetchError::from)
}

/// What [`keep`] uses of a leaf (a `LeafCluster`, which starts it: a trait, so that this
/// module does not import that one back).
pub trait Leaf: Send + Sync {
    fn name(&self) -> &str;
    fn client(&self) -> &Client;
    fn set_served(&self, served: Served);
    /// Woken when a probe sees another version than the one the fields were read at.
    fn served_wake(&self) -> &tokio::sync::Notify;
    /// Whether the leaf last reported another version than the one the fields were read at.
    fn version_moved(&self) -> bool;
}

/// Keeps `leaf`'s served fields: read now, again when its probe sees another version
/// (`served_wake`), and after a failure with backoff. `ready` hears [`SYNC_KIND`] once the
/// first read ended either way; every change of what is known is a leaf event, so pods
/// kept off the leaf are tried again.
pub async fn keep<L: Leaf + ?Sized>(
    leaf: Arc<L>,
    ready: tokio::sync::mpsc::Sender<&'static str>,
    on_event: OnEvent,
) {
    let mut backoff = RETRY_MIN;
    let mut first = true;
    loop {
        let read = tokio::time::timeout(FETCH_TIMEOUT, fetch(leaf.client(), MAX_DOCUMENT_BYTES))
            .await
            .unwrap_or(Err(FetchError::Timeout(FETCH_TIMEOUT)));
        let failed = read.is_err();
        match read {
            Ok(fields) => {
                info!(cluster = %leaf.name(), version = %fields.git_version(), schemas = fields.len(), "read the fields the leaf serves");
                leaf.set_served(Served::Known(Arc::new(fields)));
                backoff = RETRY_MIN;
            }
            Err(e) => {
                warn!(cluster = %leaf.name(), error = %e, retry_in = ?backoff, "cannot read the fields the leaf serves: its copies are not checked for them (pod sync still creates them with strict field validation)");
                leaf.set_served(Served::Unreadable(e.to_string().into()));
            }
        }
        on_event(ClusterEvent::LeafChange);
        if first {
            first = false;
            let _ = ready.send(SYNC_KIND).await;
        }
        if failed {
            tokio::select! {
                _ = leaf.served_wake().notified() => {},
                _ = tokio::time::sleep(backoff) => {},
            }
            backoff = (backoff * 2).min(RETRY_MAX);
        } else {
            // Woken by a probe that saw another version than the one read.
            while !leaf.version_moved() {
                leaf.served_wake().notified().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cluster::LeafCluster;
    use super::*;
    use serde_json::json;

    /// A core/v1 document whose Pod has `spec.containers[].name` and nothing else.
    fn document(padding: usize) -> serde_json::Value {
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "unversioned",
            "description": "x".repeat(padding)},
            "components": {"schemas": {
                "io.k8s.api.core.v1.Pod": {"type": "object", "properties": {
                    "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]}}},
                "io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                    "containers": {"type": "array", "items": {"type": "object",
                        "properties": {"name": {"type": "string"}}}}}}
        }}})
    }

    fn leaf_serving(
        doc: serde_json::Value,
        version: &'static str,
    ) -> (Client, crate::fake_api::Calls) {
        crate::fake_api::client(move |_, path| match path {
            "/version" => (
                200,
                json!({"major": "1", "minor": "34", "gitVersion": version}),
            ),
            DOCUMENT_PATH => (200, doc.clone()),
            _ => (404, crate::fake_api::status(404, "NotFound", "not found")),
        })
    }

    #[tokio::test]
    async fn the_leafs_version_and_document_are_read_bounded() {
        let (client, calls) = leaf_serving(document(0), "v1.34.4");
        let fields = fetch(&client, MAX_DOCUMENT_BYTES).await.expect("read");
        assert_eq!(fields.git_version(), "v1.34.4");
        let pod = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(
            fields
                .first_unserved(mcsched_engine::leaf::served_fields::POD, &pod)
                .as_deref(),
            Some("spec.containers[0].image")
        );
        assert!(crate::fake_api::called(&calls, "GET", DOCUMENT_PATH));

        // A byte over the limit is not read, nor parsed.
        let size = serde_json::to_vec(&document(4096))
            .map(|v| v.len())
            .unwrap_or_default();
        let (client, _) = leaf_serving(document(4096), "v1.34.4");
        assert!(fetch(&client, size).await.is_ok());
        let (client, _) = leaf_serving(document(4096), "v1.34.4");
        let err = fetch(&client, size - 1).await.expect_err("too large");
        assert!(matches!(err, FetchError::TooLarge { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                "/openapi/v3/api/v1 is larger than {} bytes: not read",
                size - 1
            )
        );

        // Not OpenAPI v3, or refused: errors that say so.
        let (client, _) = leaf_serving(json!({"swagger": "2.0"}), "v1.34.4");
        let err = fetch(&client, MAX_DOCUMENT_BYTES)
            .await
            .expect_err("no components");
        assert!(
            err.to_string()
                .starts_with("/openapi/v3/api/v1: not an OpenAPI v3 document"),
            "{err}"
        );
        let (client, _) = crate::fake_api::client(|_, path| match path {
            "/version" => (
                200,
                json!({"major": "1", "minor": "34", "gitVersion": "v1.34.4"}),
            ),
            _ => (403, crate::fake_api::status(403, "Forbidden", "forbidden")),
        });
        let err = fetch(&client, MAX_DOCUMENT_BYTES)
            .await
            .expect_err("refused");
        assert!(matches!(err, FetchError::Request(_)), "{err}");
    }

    #[tokio::test]
    async fn read_at_connect_and_again_when_the_leaf_reports_another_version() {
        let version = Arc::new(std::sync::Mutex::new("v1.34.4"));
        let answers = version.clone();
        let (client, calls) = crate::fake_api::client(move |_, path| match path {
            "/version" => {
                let v = *answers.lock().unwrap_or_else(|e| e.into_inner());
                (200, json!({"major": "1", "minor": "34", "gitVersion": v}))
            }
            DOCUMENT_PATH => (200, document(0)),
            _ => (404, crate::fake_api::status(404, "NotFound", "not found")),
        });
        let leaf = LeafCluster::new("east".into(), client, "1".into(), "h1".into());
        let (ready_tx, mut ready) = tokio::sync::mpsc::channel(1);
        let events = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = events.clone();
        let on_event: OnEvent = Arc::new(move |_| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        let task = tokio::spawn(keep(leaf.clone(), ready_tx, on_event));
        let wait = Duration::from_secs(5);
        let kind = tokio::time::timeout(wait, ready.recv())
            .await
            .ok()
            .flatten();
        assert_eq!(kind, Some(SYNC_KIND));
        let version_read = || match leaf.served() {
            Served::Known(f) => Some(f.git_version().to_string()),
            _ => None,
        };
        assert_eq!(version_read().as_deref(), Some("v1.34.4"));
        assert!(events.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        let reads = || {
            calls
                .lock()
                .map(|c| c.iter().filter(|c| c.ends_with(DOCUMENT_PATH)).count())
                .unwrap_or_default()
        };
        // The same version again: not read again.
        assert!(leaf.probe().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(reads(), 1);
        // Upgraded: read again.
        *version.lock().unwrap_or_else(|e| e.into_inner()) = "v1.35.1";
        assert!(leaf.probe().await);
        let upgraded = async {
            while version_read().as_deref() != Some("v1.35.1") {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        assert!(
            tokio::time::timeout(wait, upgraded).await.is_ok(),
            "read again"
        );
        assert_eq!(reads(), 2);
        task.abort();
    }

    #[tokio::test]
    async fn a_leaf_whose_document_cannot_be_read_syncs_all_the_same_and_says_why() {
        let (client, _) = crate::fake_api::client(|_, path| match path {
            "/version" => (
                200,
                json!({"major": "1", "minor": "34", "gitVersion": "v1.34.4"}),
            ),
            _ => (
                503,
                crate::fake_api::status(503, "ServiceUnavailable", "try later"),
            ),
        });
        let leaf = LeafCluster::new("east".into(), client, "1".into(), "h1".into());
        let (ready_tx, mut ready) = tokio::sync::mpsc::channel(1);
        let task = tokio::spawn(keep(leaf.clone(), ready_tx, Arc::new(|_| {})));
        let kind = tokio::time::timeout(Duration::from_secs(5), ready.recv())
            .await
            .ok()
            .flatten();
        assert_eq!(kind, Some(SYNC_KIND));
        match leaf.served() {
            Served::Unreadable(why) => {
                assert!(why.starts_with("reading /openapi/v3/api/v1: "), "{why}")
            }
            other => panic!("{other:?}"),
        }
        task.abort();
    }
}
