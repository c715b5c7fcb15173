use std::path::Path;
use std::sync::OnceLock;

use http::HeaderValue;
use http::header::USER_AGENT;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::control::fence::{Fence, FenceLayer};

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
    let config = match kubeconfig {
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
                .map_err(kubeconfig_error)?
        }
        None => Config::incluster().map_err(ClientError::InCluster)?,
    };
    let builder = kube::client::ClientBuilder::try_from(with_user_agent(config))
        .map_err(ClientError::Build)?;
    // The fence under the rate limit: checked when the request leaves, not when it queues.
    Ok(builder
        .with_layer(&FenceLayer::new(fence.clone()))
        .with_layer(&crate::control::ratelimit::RateLimitLayer::new(qps, burst))
        .build())
}
