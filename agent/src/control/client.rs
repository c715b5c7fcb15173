use std::path::Path;
use std::sync::OnceLock;

use http::HeaderValue;
use http::header::USER_AGENT;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::control::fence::{Fence, FenceLayer};
use crate::control::request_metrics::RequestMetricsLayer;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig given and not running in a cluster: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    #[error("cannot build a Kubernetes client: {0}")]
    Build(#[source] kube::Error),
}

static AGENT_USER_AGENT: OnceLock<HeaderValue> = OnceLock::new();

/// Names this replica in every request's User-Agent, client-go's form followed by its
/// leader-election identity: `mcsched-agent/0.1.0 (linux/amd64) host_1a2b...`. The replicas
/// share one ServiceAccount (and in a leaf one token), so an API server's audit log tells
/// them apart only by this. Set once, before the first client is built.
pub fn set_identity(identity: &str) {
    let ua = format!(
        "mcsched-agent/{} ({}/{}) {identity}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    if let Ok(v) = HeaderValue::from_str(&ua) {
        let _ = AGENT_USER_AGENT.set(v);
    }
}

/// `config` with this replica's User-Agent (when [`set_identity`] was called).
pub fn with_user_agent(mut config: Config) -> Config {
    if let Some(ua) = AGENT_USER_AGENT.get() {
        config.headers.retain(|(name, _)| name != USER_AGENT);
        config.headers.push((USER_AGENT, ua.clone()));
    }
    config
}

/// A client from the kubeconfig file when one is given, else from the in-cluster
/// ServiceAccount, limited to `qps` requests a second with `burst` (qps <= 0: no limit).
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    qps: f32,
    burst: u32,
) -> Result<Client, ClientError> {
    connect_fenced(kubeconfig, context, qps, burst, &Fence::default()).await
}

/// As [`connect`], for the client a leader writes with: `fence` refuses its writes, after
/// the rate limit's wait, once the agent may no longer act as the leader.
pub async fn connect_fenced(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    qps: f32,
    burst: u32,
    fence: &Fence,
) -> Result<Client, ClientError> {
    let config = load(kubeconfig, context).await?;
    build(config, qps, burst, fence)
}

/// As [`connect_fenced`], but a 429 is answered to the caller, not retried: for evictions,
/// whose 429 is a PodDisruptionBudget's "not now". kube's client retries every 429 with a
/// backoff growing to minutes (client-go only one with a Retry-After, which a budget's
/// refusal has not), so the caller would wait minutes to learn it, its loop stopped.
pub async fn connect_evicting(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    qps: f32,
    burst: u32,
    fence: &Fence,
) -> Result<Client, ClientError> {
    let mut config = load(kubeconfig, context).await?;
    config.default_retry = false;
    build(config, qps, burst, fence)
}

/// The kubeconfig file's context when one is given, else the in-cluster ServiceAccount.
async fn load(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Config, ClientError> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig_error = |source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            let options = KubeConfigOptions {
                context: context.map(String::from),
                ..Default::default()
            };
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(kubeconfig_error)
        }
        None => Config::incluster().map_err(ClientError::InCluster),
    }
}

fn build(config: Config, qps: f32, burst: u32, fence: &Fence) -> Result<Client, ClientError> {
    let metrics = RequestMetricsLayer::new(&config.cluster_url);
    let builder = kube::client::ClientBuilder::try_from(with_user_agent(config))
        .map_err(ClientError::Build)?;
    // The fence under the rate limit: checked when the request leaves, not when it queues.
    // The metrics under both: only what is sent counts, timed from when it is.
    Ok(builder
        .with_layer(&metrics)
        .with_layer(&FenceLayer::new(fence.clone()))
        .with_layer(&crate::control::ratelimit::RateLimitLayer::new(qps, burst))
        .build())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An HTTP server on localhost answering every request as a PodDisruptionBudget's
    /// refused eviction (429, no Retry-After), and how many it was sent.
    async fn refusing_server() -> (std::path::PathBuf, tempfile::TempDir, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"Cannot evict pod as it would violate the pod's disruption budget."}"#;
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = conn.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        // One request: its headers, then the body they announce.
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            if buf.len() < end + 4 + length {
                                break;
                            }
                            buf.drain(..end + 4 + length);
                            counted.fetch_add(1, Ordering::SeqCst);
                            let response = format!(
                                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if conn.write_all(response.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://{addr}'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
            ),
        )
        .expect("kubeconfig");
        (path, dir, requests)
    }

    fn eviction() -> serde_json::Value {
        serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "p", "namespace": "ns"}})
    }

    async fn evict(client: &Client) -> Result<serde_json::Value, kube::Error> {
        kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "ns")
            .create_subresource("eviction", "p", &Default::default(), &eviction())
            .await
    }

    #[tokio::test]
    async fn the_evicting_client_answers_a_budgets_429_at_once_where_kube_retries_it() {
        let (path, _dir, requests) = refusing_server().await;
        let fence = Fence::default();
        let evicting = connect_evicting(Some(&path), None, 0.0, 0, &fence)
            .await
            .expect("client");
        let answer = tokio::time::timeout(Duration::from_secs(5), evict(&evicting))
            .await
            .expect("answered at once");
        assert!(
            matches!(&answer, Err(kube::Error::Api(s)) if s.code == 429),
            "{answer:?}"
        );
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        // What pod sync's and the scheduler's client does with the same answer: sends it
        // again, and again, while the caller waits.
        requests.store(0, Ordering::SeqCst);
        let retrying = connect_fenced(Some(&path), None, 0.0, 0, &fence)
            .await
            .expect("client");
        let waited = tokio::time::timeout(Duration::from_secs(2), evict(&retrying)).await;
        assert!(waited.is_err(), "{waited:?}");
        assert!(requests.load(Ordering::SeqCst) > 1);
    }
}
