//! HTTPS on the secure port (10259, like kube-scheduler): health, metrics, the CPU
//! profile (`enableProfiling`), and the `mcsched.io` aggregated API. Every path but the
//! health checks is authenticated and authorized as kube-scheduler's secure port does it.

pub mod api_status;
pub mod apis;
pub mod auth_config;
pub mod authn;
pub mod authz;
pub mod connections;
pub mod dry_run;
pub mod failed_auth;
pub mod openapi;
pub mod pod_disclosure;
pub mod profiling;
pub mod publish;
pub mod request_info;
pub mod tls;
pub mod what_if_admission;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum_server::tls::TlsInfo;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use tracing::{info, warn};

use self::api_status::{failure, too_many_requests};
use self::auth_config::AuthConfig;
use self::authn::{Authenticator, AuthnError};
use self::authz::Authorizer;
use self::connections::{ConnectionLimits, ConnectionOptions, LimitedAcceptor};
use self::dry_run::DryRuns;
use self::profiling::Profiler;
use self::tls::{CertResolver, ClientVerifiers, ServingCert, TlsError};
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
    /// The secure port's listener, bound before the agent starts its work: as
    /// kube-scheduler's, an agent that cannot listen on it exits instead of scheduling
    /// without it (no probes, no metrics, no explanations).
    pub listener: std::net::TcpListener,
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
    /// Timeouts and connection limits, of the secure port and the health listener each.
    pub connections: ConnectionOptions,
    /// Where health and metrics are served on plain HTTP as well, if anywhere.
    pub health_addr: Option<SocketAddr>,
    /// The configuration's `enableProfiling`: `/debug/pprof/profile` is served.
    pub enable_profiling: bool,
}

pub struct ServerState {
    pub shared: Arc<Shared>,
    pub authn: Authenticator,
    pub authz: Authorizer,
    pub dry_runs: DryRuns,
    /// None without `enableProfiling`: the profile path is then not found, as kube's.
    pub profiler: Option<Profiler>,
    request_timeout: Duration,
}

/// Health and metrics: on the secure port (behind the guard there), and alone on the
/// health listener.
fn health_routes() -> Router<Arc<ServerState>> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

fn not_found() -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "the server could not find the requested resource",
    )
}

/// The health listener's: nothing but health and metrics, unauthenticated, as
/// kube-scheduler's probes and scrapers read them on a port of their own.
pub fn health_router(state: Arc<ServerState>) -> Router {
    health_routes()
        .fallback(|| async { not_found() })
        .with_state(state)
}

pub fn router(state: Arc<ServerState>) -> Router {
    let mut routes = health_routes();
    // Not routed at all when disabled: the fallback's 404, behind the guard, as kube
    // leaves the path unregistered.
    if state.profiler.is_some() {
        routes = routes.route(profiling::PATH, get(profile));
    }
    routes
        .merge(apis::routes())
        .merge(openapi::routes())
        .fallback(|| async { not_found() })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Authentication, then authorization, then the handler, all within the request
/// deadline (a slow TokenReview or SubjectAccessReview holds no connection longer).
async fn guard(State(s): State<Arc<ServerState>>, req: Request, next: Next) -> Response {
    let mut deadline = s.request_timeout;
    // A profile takes the time it asks for (bounded by the profiler) on top of the usual
    // deadline, or the default 30 s profile would never beat the default 30 s deadline.
    if let Some(p) = s.profiler.as_ref()
        && req.uri().path() == profiling::PATH
    {
        deadline += p.requested(req.uri()).unwrap_or_default();
    }
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
        let client_ip = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        let user = match s.authn.authenticate(&peer, req.headers(), client_ip).await {
            Ok(Some(user)) => user,
            Ok(None) => return failure(StatusCode::UNAUTHORIZED, "Unauthorized"),
            Err(AuthnError::Throttled { retry_after }) => {
                return too_many_requests(
                    "too many failed authentications; try again later",
                    retry_after.as_secs().max(1),
                );
            }
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
    cert: Arc<CertResolver>,
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
    let cert = CertResolver::new(&opts.cert)?;
    tokio::spawn(tls::keep_serving_cert(
        cert.clone(),
        opts.cert.clone(),
        tls::CERT_REFRESH,
    ));
    let tls = RustlsConfig::from_config(tls::server_config(&cert, &auth_config)?);
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
        profiler: opts
            .enable_profiling
            .then(|| Profiler::new(opts.connections.idle_timeout)),
        request_timeout: opts.request_timeout,
    });
    state.authn.set_config(auth_config.clone(), verifiers);
    tokio::spawn(keep_auth_config(
        opts.auth_client.clone(),
        state.clone(),
        cert,
        tls.clone(),
        auth_config,
    ));
    let health = opts.health_addr.map(|addr| {
        let handle = axum_server::Handle::new();
        tokio::spawn(serve_health(
            addr,
            state.clone(),
            opts.connections,
            handle.clone(),
        ));
        handle
    });
    let limits = ConnectionLimits::new(
        opts.connections.max_connections,
        opts.connections.max_connections_per_ip,
    );
    let mut acceptor = RustlsAcceptor::new(tls);
    // Go's server bounds the TLS handshake by its ReadHeaderTimeout too: a client that
    // never finishes its handshake holds a place no longer than one slow to send headers.
    if !opts.connections.header_read_timeout.is_zero() {
        acceptor = acceptor.handshake_timeout(opts.connections.header_read_timeout);
    }
    let acceptor = acceptor.acceptor(LimitedAcceptor::new(limits, opts.connections.idle_timeout));
    let addr = opts
        .listener
        .local_addr()
        .map_err(|source| ServerError::Serve {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
    let server = axum_server::from_tcp(opts.listener)
        .map_err(|source| ServerError::Serve { addr, source })?
        .acceptor(acceptor)
        .handle(handle);
    let served = connections::configure(server, &opts.connections)
        .serve(router(state).into_make_service_with_connect_info::<SocketAddr>())
        .await
        .map_err(|source| ServerError::Serve { addr, source });
    if let Some(health) = health {
        health.shutdown();
    }
    served
}

/// The health listener, plain HTTP with the secure port's timeouts and limits; a
/// failure is logged (the probes on the secure port still answer).
async fn serve_health(
    addr: SocketAddr,
    state: Arc<ServerState>,
    opts: ConnectionOptions,
    handle: axum_server::Handle<SocketAddr>,
) {
    let limits = ConnectionLimits::new(opts.max_connections, opts.max_connections_per_ip);
    let server = axum_server::bind(addr)
        .acceptor(LimitedAcceptor::new(limits, opts.idle_timeout))
        .handle(handle);
    if let Err(e) = connections::configure(server, &opts)
        .serve(health_router(state).into_make_service())
        .await
    {
        warn!(error = %e, %addr, "health listener stopped");
    }
}

async fn profile(State(s): State<Arc<ServerState>>, uri: axum::http::Uri) -> Response {
    match &s.profiler {
        Some(p) => p.serve(&uri).await,
        None => not_found(),
    }
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
        mcsched_engine::metrics::global().encode(),
    )
        .into_response()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::multicluster::registry::Leaves;
    use crate::scheduler::SchedulerOptions;
    use tower::ServiceExt;

    pub(crate) fn state() -> Arc<ServerState> {
        state_answering(|_, _, _| None)
    }

    /// As [`state`], the API server answering with `answer` first (None: as `state`'s).
    pub(crate) fn state_answering(
        answer: impl Fn(&str, &str, &serde_json::Value) -> Option<(u16, serde_json::Value)>
        + Send
        + Sync
        + 'static,
    ) -> Arc<ServerState> {
        // No PriorityClass (what-ifs' priority is then 0); nothing else answers.
        let (client, _, _) = crate::fake_api::recording(move |method, path, body| {
            if let Some(a) = answer(method, path, body) {
                a
            } else if path.starts_with("/apis/scheduling.k8s.io/v1/priorityclasses") {
                (
                    200,
                    serde_json::json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClassList",
                        "metadata": {"resourceVersion": "1"}, "items": []}),
                )
            } else {
                (500, serde_json::json!({}))
            }
        });
        let spec = mcsched_engine::config_bridge::default_spec("mcsched").expect("default profile");
        let leaves = Arc::new(Leaves::new(Default::default()));
        let registry =
            mcsched_engine::plugins::registry_with_leaves(&Default::default(), leaves.clone());
        let profiles =
            mcsched_engine::profiles::Profiles::build(&[(spec, registry)], 1).expect("profiles");
        let options = SchedulerOptions {
            parallel_bindings: 1,
            namespace: "mcsched-system".into(),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            content_type: mcsched_wire::ContentType::Json,
            watch_content_type: mcsched_wire::ContentType::Json,
        };
        let shared = Shared::new(client.clone(), profiles, Vec::new(), leaves, &options);
        let ttl = Duration::from_secs(10);
        Arc::new(ServerState {
            shared,
            authn: Authenticator::new(client.clone(), ttl),
            authz: Authorizer::new(
                client,
                ALWAYS_ALLOW_PATHS.iter().map(|p| p.to_string()).collect(),
                ttl,
                ttl,
            ),
            dry_runs: DryRuns::new(1, ttl),
            profiler: Some(Profiler::new(Duration::from_secs(90))),
            request_timeout: ttl,
        })
    }

    async fn status(app: Router, path: &str) -> StatusCode {
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .expect("request");
        app.oneshot(req).await.expect("answered").status()
    }

    #[tokio::test]
    async fn the_health_listener_answers_health_and_metrics_only_and_without_credentials() {
        let app = health_router(state());
        for path in ["/healthz", "/livez", "/metrics"] {
            assert_eq!(status(app.clone(), path).await, StatusCode::OK, "{path}");
        }
        // Caches not synced: answered, not refused.
        assert_eq!(
            status(app.clone(), "/readyz").await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        for path in [
            "/apis",
            "/apis/mcsched.io/v1alpha1/namespaces/a/explanations",
            "/openapi/v2",
        ] {
            assert_eq!(
                status(app.clone(), path).await,
                StatusCode::NOT_FOUND,
                "{path}"
            );
        }
        // The secure port's router, without credentials, refuses all but health.
        let secure = router(state());
        assert_eq!(status(secure.clone(), "/healthz").await, StatusCode::OK);
        assert_eq!(status(secure, "/metrics").await, StatusCode::UNAUTHORIZED);
    }
}
