//! HTTPS on the secure port (10259, like kube-scheduler): health, metrics, and the
//! explanations `kubectl mcsched explain` reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use mcsched_shared::explain::{Explanation, Outcome};

use crate::explain::explanation;
use crate::framework::CycleState;
use crate::framework::runtime::CycleRecord;
use crate::scheduler::{Shared, run_post_filter, schedule_pod};
use crate::snapshot::PodInfo;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot read TLS certificate or key: {0}")]
    Tls(#[source] std::io::Error),
    #[error("cannot generate a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("HTTPS server on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

pub struct ServerOptions {
    pub addr: SocketAddr,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/explain/{namespace}/{name}", get(explain))
        .route("/simulate", post(simulate))
        .with_state(shared)
}

async fn tls_config(opts: &ServerOptions) -> Result<RustlsConfig, ServerError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match (&opts.cert_file, &opts.key_file) {
        (Some(cert), Some(key)) => RustlsConfig::from_pem_file(cert, key)
            .await
            .map_err(ServerError::Tls),
        _ => {
            let names = vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
                crate::scheduler::hostname(),
            ];
            let cert = rcgen::generate_simple_self_signed(names)?;
            RustlsConfig::from_pem(
                cert.cert.pem().into_bytes(),
                cert.signing_key.serialize_pem().into_bytes(),
            )
            .await
            .map_err(ServerError::Tls)
        }
    }
}

/// Serves until the handle is shut down.
pub async fn serve(
    shared: Arc<Shared>,
    opts: ServerOptions,
    handle: axum_server::Handle<SocketAddr>,
) -> Result<(), ServerError> {
    let tls = tls_config(&opts).await?;
    axum_server::bind_rustls(opts.addr, tls)
        .handle(handle)
        .serve(router(shared).into_make_service())
        .await
        .map_err(|source| ServerError::Serve {
            addr: opts.addr,
            source,
        })
}

async fn ok() -> &'static str {
    "ok"
}

/// kube-scheduler's health: ok, unless this agent leads and has not renewed its Lease
/// within renewDeadline plus a grace period.
async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    match shared.lease_health.check() {
        Ok(()) => "ok".into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    if !shared.synced.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n").into_response();
    }
    let down = shared.watch_health.down();
    if !down.is_empty() {
        let msg = format!("watches down, restarting: {}\n", down.join(", "));
        return (StatusCode::SERVICE_UNAVAILABLE, msg).into_response();
    }
    "ok".into_response()
}

async fn metrics() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::metrics::global().encode(),
    )
        .into_response()
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (
        code,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}

/// The live scheduling cycle's decision for `pod` now, up to (not including) Reserve,
/// with every filter on every node: the same schedule_pod, extenders included, and, when
/// nothing fits, the same PostFilter dry run (nothing is evicted). Errs with a message
/// for the client when no profile serves the pod.
async fn dry_run(shared: &Shared, pod: Pod) -> Result<Explanation, String> {
    let Some(fw) = shared.profiles.for_pod(&pod).cloned() else {
        return Err(format!(
            "spec.schedulerName {:?} is not served by this agent",
            mcsched_shared::pod::scheduler_name(&pod)
        ));
    };
    let scheduler = fw.scheduler_name.clone();
    let info = PodInfo::new(Arc::new(pod));
    let snapshot = shared.cache().snapshot();
    let mut state = CycleState::new();
    let mut record = CycleRecord::default();
    let result = schedule_pod(
        &fw,
        &shared.extenders,
        &mut state,
        &info,
        &snapshot,
        &mut record,
        true,
    )
    .await;
    let outcome = match result {
        Ok(r) => Outcome::Scheduled {
            leaf_node: record.leaf_nodes.get(&r.node).cloned(),
            node: r.node,
        },
        Err(mut fit) => {
            let preemption = run_post_filter(&fw, &state, &info, &snapshot, &mut fit);
            Outcome::Unschedulable {
                message: fit.to_string(),
                nominated_node: preemption.and_then(|(res, _)| res.nominated_node),
            }
        }
    };
    Ok(explanation(
        &scheduler,
        &info.key,
        &record,
        outcome,
        snapshot.len(),
        usize::MAX,
    ))
}

async fn explain(
    State(shared): State<Arc<Shared>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let key = format!("{namespace}/{name}");
    let pods: Api<Pod> = Api::namespaced(shared.bind_ctx.client.clone(), &namespace);
    let pod = match pods.get_opt(&name).await {
        Ok(Some(p)) => p,
        Ok(None) => return error(StatusCode::NOT_FOUND, format!("pod {key} not found")),
        Err(e) => {
            return error(
                StatusCode::BAD_GATEWAY,
                format!("cannot read pod {key}: {e}"),
            );
        }
    };
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if bound {
        return match shared.explanations.get(&key) {
            Some(e) => axum::Json(e).into_response(),
            None => error(
                StatusCode::NOT_FOUND,
                format!("pod {key} is bound, and this agent kept no record of scheduling it"),
            ),
        };
    }
    // Pending: what would happen now says more than the last attempt.
    match dry_run(&shared, pod).await {
        Ok(e) => axum::Json(e).into_response(),
        Err(msg) => error(StatusCode::BAD_REQUEST, msg),
    }
}

async fn simulate(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let pod: Pod = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("body is not a Pod in JSON: {e}"),
            );
        }
    };
    match dry_run(&shared, pod).await {
        Ok(e) => axum::Json(e).into_response(),
        Err(msg) => error(StatusCode::BAD_REQUEST, msg),
    }
}
