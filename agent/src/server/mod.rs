//! HTTPS on the secure port (10259, like kube-scheduler): health, metrics, and the
//! `mcsched.io` aggregated API. Every path but the health checks is authenticated and
//! authorized as kube-scheduler's secure port does it.

pub mod api_status;
pub mod apis;
pub mod auth_config;
pub mod authn;
pub mod authz;
pub mod dry_run;
pub mod openapi;
pub mod publish;
pub mod request_info;
pub mod tls;
pub mod ttl_cache;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum_server::tls::TlsInfo;
use axum_server::tls_rustls::RustlsConfig;
use tracing::{info, warn};

use self::api_status::failure;
use self::auth_config::AuthConfig;
use self::authn::Authenticator;
use self::authz::Authorizer;
use self::dry_run::DryRuns;
use self::tls::{ClientVerifiers, ServingCert, TlsError};
use crate::scheduler::Shared;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("HTTPS server on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// kube-scheduler's `--authorization-always-allow-paths` default.
pub const ALWAYS_ALLOW_PATHS: &[&str] = &["/healthz", "/readyz", "/livez"];
/// A Pod or a pod template is a few kilobytes; nothing this server takes is larger.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// How often the published client CAs are read again (a rotated CA is picked up).
const AUTH_CONFIG_REFRESH: Duration = Duration::from_secs(60);

pub struct ServerOptions {
    pub addr: SocketAddr,
    pub cert: ServingCert,
    /// Reads the published CAs, and makes TokenReviews and SubjectAccessReviews: its own
    /// client, so that request floods queue behind neither scheduling nor the Lease.
    pub auth_client: kube::Client,
    pub always_allow_paths: Vec<String>,
    pub token_ttl: Duration,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    pub max_dry_runs: usize,
    pub request_timeout: Duration,
}

pub struct ServerState {
    pub shared: Arc<Shared>,
    pub authn: Authenticator,
    pub authz: Authorizer,
    pub dry_runs: DryRuns,
    request_timeout: Duration,
}

pub fn router(state: Arc<ServerState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(apis::routes())
        .merge(openapi::routes())
        .fallback(|| async {
            failure(
                StatusCode::NOT_FOUND,
                "the server could not find the requested resource",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Authentication, then authorization, then the handler, all within the request
/// deadline (a slow TokenReview or SubjectAccessReview holds no connection longer).
async fn guard(State(s): State<Arc<ServerState>>, req: Request, next: Next) -> Response {
    let deadline = s.request_timeout;
    match tokio::time::timeout(deadline, checked(s, req, next)).await {
        Ok(resp) => resp,
        Err(_) => failure(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "Timeout: request did not complete within the allotted timeout of {deadline:?}"
            ),
        ),
    }
}

async fn checked(s: Arc<ServerState>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if !s.authz.always_allowed(&path) {
        let peer = req
            .extensions()
            .get::<Arc<TlsInfo>>()
            .map(|i| i.peer_certificates.clone())
            .unwrap_or_default();
        let user = match s.authn.authenticate(&peer, req.headers()).await {
            Ok(Some(user)) => user,
            Ok(None) => return failure(StatusCode::UNAUTHORIZED, "Unauthorized"),
            Err(e) => {
                warn!(error = %e, "authentication failed");
                return failure(StatusCode::UNAUTHORIZED, "Unauthorized");
            }
        };
        let attrs = request_info::attributes(req.method(), req.uri());
        match s.authz.authorize(&user, &attrs).await {
            Ok(d) if d.allowed => {}
            Ok(d) => {
                return failure(
                    StatusCode::FORBIDDEN,
                    attrs.forbidden_message(&user.name, &d.reason),
                );
            }
            Err(e) => {
                warn!(error = %e, verb = attrs.verb(), %path, "authorization failed");
                return failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("cannot authorize the request: {e}"),
                );
            }
        }
        req.extensions_mut().insert(user);
    }
    next.run(req).await
}

/// Reads the published CAs once (a failure is logged: bearer tokens still work), then
/// again every minute, changing TLS and authentication together when they change.
async fn keep_auth_config(
    client: kube::Client,
    state: Arc<ServerState>,
    cert: ServingCert,
    tls: RustlsConfig,
    mut current: AuthConfig,
) {
    loop {
        tokio::time::sleep(AUTH_CONFIG_REFRESH).await;
        let next = match AuthConfig::read(&client).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot refresh the published client CAs; keeping the ones read before");
                continue;
            }
        };
        if next == current {
            continue;
        }
        match (
            tls::server_config(&cert, &next),
            ClientVerifiers::new(&next),
        ) {
            (Ok(config), Ok(verifiers)) => {
                tls.reload_from_config(config);
                state.authn.set_config(next.clone(), verifiers);
                current = next;
                info!("the published client CAs changed; TLS and authentication use the new ones");
            }
            (Err(e), _) | (_, Err(e)) => {
                warn!(error = %e, "the published client CAs changed but cannot be used; keeping the old ones")
            }
        }
    }
}

/// Serves until the handle is shut down.
pub async fn serve(
    shared: Arc<Shared>,
    opts: ServerOptions,
    handle: axum_server::Handle<SocketAddr>,
) -> Result<(), ServerError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let auth_config = match AuthConfig::read(&opts.auth_client).await {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "cannot read the published client CAs: client certificates and the API server's front proxy are refused until they can be read");
            AuthConfig::default()
        }
    };
    let verifiers = ClientVerifiers::new(&auth_config)?;
    let tls = RustlsConfig::from_config(tls::server_config(&opts.cert, &auth_config)?);
    let state = Arc::new(ServerState {
        shared,
        authn: Authenticator::new(opts.auth_client.clone(), opts.token_ttl),
        authz: Authorizer::new(
            opts.auth_client.clone(),
            opts.always_allow_paths.clone(),
            opts.authorized_ttl,
            opts.unauthorized_ttl,
        ),
        dry_runs: DryRuns::new(opts.max_dry_runs, opts.request_timeout),
        request_timeout: opts.request_timeout,
    });
    state.authn.set_config(auth_config.clone(), verifiers);
    tokio::spawn(keep_auth_config(
        opts.auth_client.clone(),
        state.clone(),
        opts.cert.clone(),
        tls.clone(),
        auth_config,
    ));
    axum_server::bind_rustls(opts.addr, tls)
        .handle(handle)
        .serve(router(state).into_make_service())
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
async fn healthz(State(s): State<Arc<ServerState>>) -> Response {
    match s.shared.lease_health.check() {
        Ok(()) => "ok".into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn readyz(State(s): State<Arc<ServerState>>) -> Response {
    if !s.shared.synced.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n").into_response();
    }
    let down = s.shared.watch_health.down();
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
