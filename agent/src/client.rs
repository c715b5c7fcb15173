use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::fence::{Fence, FenceLayer};

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
    let builder = kube::client::ClientBuilder::try_from(config).map_err(ClientError::Build)?;
    // The fence under the rate limit: checked when the request leaves, not when it queues.
    Ok(builder
        .with_layer(&FenceLayer::new(fence.clone()))
        .with_layer(&crate::ratelimit::RateLimitLayer::new(qps, burst))
        .build())
}
