//! The flags kubectl would handle itself, which it does not forward to plugins.

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use std::path::PathBuf;

/// `--kubeconfig`, `--context`, `-n/--namespace` and `-v`, global to every command.
#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace scope of the command.
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Log verbosity, as kubectl's -v (0 warnings only, 2 info, 4 debug, 6 and more trace).
    #[arg(
        short = 'v',
        long = "v",
        global = true,
        value_name = "LEVEL",
        default_value_t = 0
    )]
    pub verbosity: u8,
}

#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    // Causes are printed by the caller's error chain, so messages do not repeat them.
    #[error("reading kubeconfig {path}")]
    Read {
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("reading kubeconfig {from}")]
    Default {
        from: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("kubeconfig")]
    Config(#[source] KubeconfigError),
    #[error("creating the Kubernetes client")]
    Client(#[source] kube::Error),
}

impl KubeArgs {
    /// The kubeconfig these flags name, with the selected context resolved.
    pub async fn config(&self) -> Result<Config, ContextError> {
        load_config(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }

    pub async fn client(&self) -> Result<Client, ContextError> {
        Client::try_from(self.config().await?).map_err(ContextError::Client)
    }

    /// A client that takes a 429, 503 or 504 as the answer, where [`client`](Self::client)
    /// retries it with kube's controller backoff (15 attempts, up to minutes apart): for a
    /// user waiting on an aggregated API whose 503 means its server is not there.
    pub async fn client_without_retries(&self) -> Result<Client, ContextError> {
        let mut config = self.config().await?;
        config.default_retry = false;
        Client::try_from(config).map_err(ContextError::Client)
    }

    /// `-n` if given, else `default` (commands differ in their default namespace).
    pub fn namespace_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(default)
    }

    /// kube's client logs every 5xx answer as an ERROR; each one the CLI gets is its error
    /// (said once, with what was asked), so those lines show from -v 4 only.
    pub fn tracing_filter(&self) -> &'static str {
        match self.verbosity {
            0..=1 => "warn,kube_client::client::builder=off",
            2..=3 => "info,kube_client::client::builder=off",
            4..=5 => "debug",
            _ => "trace",
        }
    }
}

/// Loads a kubeconfig file (or kubectl's default chain when `path` is None) and selects
/// `context` in it; shared by the host flags and the `--cluster-*` flags of `join`.
pub async fn load_config(
    path: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<Config, ContextError> {
    let kubeconfig = match path {
        Some(p) => Kubeconfig::read_from(p).map_err(|source| ContextError::Read {
            path: p.display().to_string(),
            source,
        })?,
        None => Kubeconfig::read().map_err(|source| ContextError::Default {
            from: match std::env::var_os("KUBECONFIG") {
                Some(v) if !v.is_empty() => format!("$KUBECONFIG ({})", v.to_string_lossy()),
                _ => "~/.kube/config ($KUBECONFIG is unset)".into(),
            },
            source,
        })?,
    };
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(ContextError::Config)
}
