//! The flags kubectl would handle itself, which it does not forward to plugins: kubectl's
//! own connection, impersonation and namespace flags, read as `kubectl options` describes
//! them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgAction, Args};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// kubectl's global flags, global to every command.
#[derive(Debug, Clone, Default, Args)]
pub struct KubeArgs {
    /// Path to the kubeconfig file to use for CLI requests.
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The name of the kubeconfig context to use
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The name of the kubeconfig cluster to use
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The name of the kubeconfig user to use
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// If present, the namespace scope for this CLI request
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The address and port of the Kubernetes API server
    #[arg(short = 's', long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Bearer token for authentication to the API server
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Path to a cert file for the certificate authority
    #[arg(long, global = true, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// If true, the server's certificate will not be checked for validity. This will make your HTTPS connections insecure
    #[arg(
        long,
        global = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        action = ArgAction::Set,
        value_name = "BOOL"
    )]
    pub insecure_skip_tls_verify: bool,
    /// Username to impersonate for the operation. User could be a regular user or a service account in a namespace.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Group to impersonate for the operation, this flag can be repeated to specify multiple groups.
    #[arg(long = "as-group", global = true, value_name = "GROUP", action = ArgAction::Append)]
    pub as_group: Vec<String>,
    /// UID to impersonate for the operation.
    #[arg(long = "as-uid", global = true, value_name = "UID")]
    pub as_uid: Option<String>,
    /// The length of time to wait before giving up on a single server request. Non-zero values should contain a corresponding time unit (e.g. 1s, 2m, 3h). A value of zero means don't timeout requests.
    #[arg(
        long,
        global = true,
        value_name = "DURATION",
        default_value = "0",
        value_parser = parse_timeout
    )]
    pub request_timeout: Duration,
    /// number for the log level verbosity (0 warnings only, 2 info, 4 debug, 6 and more trace)
    #[arg(
        short = 'v',
        long = "v",
        global = true,
        value_name = "LEVEL",
        default_value_t = 0
    )]
    pub verbosity: u8,
}

/// client-go's `ParseTimeout`: a plain non-negative integer is seconds, anything else a Go
/// duration; its error words.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    crate::duration::parse(text).map_err(|_| {
        "Invalid timeout value. Timeout must be a single integer in seconds, or an integer followed by a corresponding time unit (e.g. 1s | 2m | 3h)".to_string()
    })
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
    #[error("in-cluster configuration")]
    InCluster(#[source] kube::config::InClusterError),
    #[error("--server {server:?} is no URL")]
    Server {
        server: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("reading --certificate-authority {path}")]
    CertificateAuthority {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("--certificate-authority {0} holds no certificate")]
    NoCertificate(String),
    #[error("--token is not a valid HTTP header value")]
    Token,
    #[error(
        "requesting uid, groups or user-extra without impersonating a user (--as-group and --as-uid need --as)"
    )]
    ImpersonationWithoutUser,
    #[error("creating the Kubernetes client")]
    Client(#[source] kube::Error),
}

impl KubeArgs {
    /// The configuration these flags select, with their overrides applied, as kubectl's
    /// `ClientConfig()`: `default_namespace` is `-n`, else the context's namespace (or the
    /// service account's in a pod), else `default`.
    pub async fn config(&self) -> Result<Config, ContextError> {
        if (!self.as_group.is_empty() || self.as_uid.is_some()) && self.as_user.is_none() {
            return Err(ContextError::ImpersonationWithoutUser);
        }
        let selection = Selection {
            context: self.context.as_deref(),
            cluster: self.cluster.as_deref(),
            user: self.user.as_deref(),
        };
        let mut config = match self.kubeconfig.as_deref() {
            Some(path) => self.load(Some(path), &selection).await?,
            None if no_kubeconfig_file() => {
                if in_cluster_possible() {
                    in_cluster()?
                } else if let Some(server) = &self.server {
                    // kubectl talks to --server with only the other flags' credentials
                    // when there is no kubeconfig at all.
                    Config::new(parse_server(server)?)
                } else {
                    self.load(None, &selection).await?
                }
            }
            None => self.load(None, &selection).await?,
        };
        self.apply(&mut config)?;
        Ok(config)
    }

    async fn load(
        &self,
        path: Option<&Path>,
        selection: &Selection<'_>,
    ) -> Result<Config, ContextError> {
        let kubeconfig = read_kubeconfig(path)?;
        if let Some(server) = &self.server
            && kubeconfig.current_context.is_none()
            && selection.context.is_none()
        {
            // A kubeconfig without a context has nothing to merge --server into; kubectl
            // goes with the flags alone.
            return Ok(Config::new(parse_server(server)?));
        }
        from_kubeconfig(kubeconfig, selection).await
    }

    /// The flags that override the kubeconfig's cluster and user, as client-go merges its
    /// `ConfigOverrides` into them.
    fn apply(&self, config: &mut Config) -> Result<(), ContextError> {
        if let Some(server) = &self.server {
            config.cluster_url = parse_server(server)?;
        }
        if let Some(path) = &self.certificate_authority {
            config.root_cert = Some(read_certificates(path)?);
            // kube re-reads this file for an in-cluster CA; the flag's CA replaces it.
            config.root_cert_file = None;
        }
        if self.insecure_skip_tls_verify {
            config.accept_invalid_certs = true;
            // client-go drops the kubeconfig's CA when the flag turns verification off.
            if self.certificate_authority.is_none() {
                config.root_cert = None;
                config.root_cert_file = None;
            }
        }
        if let Some(token) = &self.token {
            if http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                return Err(ContextError::Token);
            }
            // The token is the credential, as client-go puts a --token before every other
            // way the kubeconfig user has to authenticate (a client certificate stays:
            // it is the TLS layer's).
            let auth = &mut config.auth_info;
            auth.token = Some(token.clone().into());
            auth.token_file = None;
            auth.exec = None;
            auth.auth_provider = None;
            auth.username = None;
            auth.password = None;
        }
        if let Some(user) = &self.as_user {
            let auth = &mut config.auth_info;
            auth.impersonate = Some(user.clone());
            auth.impersonate_groups = (!self.as_group.is_empty()).then(|| self.as_group.clone());
            auth.impersonate_uid = self.as_uid.clone();
        }
        if self.request_timeout.is_zero() {
            // "0" is no timeout: the connection's own timeout stays, as kubectl's dialer's.
            config.read_timeout = None;
            config.write_timeout = None;
        } else {
            let t = Some(self.request_timeout);
            config.connect_timeout = t;
            config.read_timeout = t;
            config.write_timeout = t;
        }
        if let Some(ns) = &self.namespace {
            config.default_namespace = ns.clone();
        }
        Ok(())
    }

    pub async fn client(&self) -> Result<Client, ContextError> {
        Client::try_from(self.config().await?).map_err(ContextError::Client)
    }

    /// A client that takes a 429, 503 or 504 as the answer, where [`client`](Self::client)
    /// retries it with kube's controller backoff (15 attempts, up to minutes apart): for a
    /// user waiting on an aggregated API whose 503 means its server is not there. With the
    /// namespace of the command, as kubectl finds it: `-n`, else the kubeconfig context's,
    /// else `default`.
    pub async fn namespaced_client_without_retries(
        &self,
    ) -> Result<(Client, String), ContextError> {
        let mut config = self.config().await?;
        config.default_retry = false;
        let namespace = config.default_namespace.clone();
        Ok((
            Client::try_from(config).map_err(ContextError::Client)?,
            namespace,
        ))
    }

    /// [`client`](Self::client) and the namespace of the command, as kubectl finds it.
    pub async fn namespaced_client(&self) -> Result<(Client, String), ContextError> {
        let config = self.config().await?;
        let namespace = config.default_namespace.clone();
        Ok((
            Client::try_from(config).map_err(ContextError::Client)?,
            namespace,
        ))
    }

    /// `-n` if given, else `default`: for the commands whose namespace is mcsched's own
    /// (`mcsched-system`), not the context's.
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

fn parse_server(server: &str) -> Result<http::Uri, ContextError> {
    server.parse().map_err(|source| ContextError::Server {
        server: server.to_string(),
        source,
    })
}

fn read_certificates(path: &Path) -> Result<Vec<Vec<u8>>, ContextError> {
    let shown = || path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| ContextError::CertificateAuthority {
            path: shown(),
            source,
        })?;
    if certs.is_empty() {
        return Err(ContextError::NoCertificate(shown()));
    }
    Ok(certs.into_iter().map(|c| c.to_vec()).collect())
}

/// Neither $KUBECONFIG nor ~/.kube/config names a file: when kubectl turns to the pod's
/// service account, or to --server alone.
fn no_kubeconfig_file() -> bool {
    if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    std::env::var_os("HOME")
        .map(|home| !Path::new(&home).join(".kube/config").exists())
        .unwrap_or(true)
}

/// client-go's `inClusterClientConfig.Possible`.
fn in_cluster_possible() -> bool {
    let set = |v: &str| std::env::var_os(v).is_some_and(|v| !v.is_empty());
    set("KUBERNETES_SERVICE_HOST")
        && set("KUBERNETES_SERVICE_PORT")
        && Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").is_file()
}

/// The pod's service account; its namespace is `$POD_NAMESPACE` first, as client-go's.
fn in_cluster() -> Result<Config, ContextError> {
    let mut config = Config::incluster().map_err(ContextError::InCluster)?;
    if let Some(ns) = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
    {
        config.default_namespace = ns;
    }
    Ok(config)
}

/// Which context, cluster and user of a kubeconfig: each the current context's unless named.
#[derive(Debug, Default, Clone, Copy)]
pub struct Selection<'a> {
    pub context: Option<&'a str>,
    pub cluster: Option<&'a str>,
    pub user: Option<&'a str>,
}

async fn from_kubeconfig(
    kubeconfig: Kubeconfig,
    selection: &Selection<'_>,
) -> Result<Config, ContextError> {
    let options = KubeConfigOptions {
        context: selection.context.map(str::to_owned),
        cluster: selection.cluster.map(str::to_owned),
        user: selection.user.map(str::to_owned),
    };
    Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(ContextError::Config)
}

fn read_kubeconfig(path: Option<&Path>) -> Result<Kubeconfig, ContextError> {
    match path {
        Some(p) => Kubeconfig::read_from(p).map_err(|source| ContextError::Read {
            path: p.display().to_string(),
            source,
        }),
        None => Kubeconfig::read().map_err(|source| ContextError::Default {
            from: match std::env::var_os("KUBECONFIG") {
                Some(v) if !v.is_empty() => format!("$KUBECONFIG ({})", v.to_string_lossy()),
                _ => "~/.kube/config ($KUBECONFIG is unset)".into(),
            },
            source,
        }),
    }
}

/// Loads a kubeconfig file (or kubectl's default chain when `path` is None) and selects
/// `context` in it: the `--cluster-*` flags of `join` and `unjoin`, which name a leaf.
pub async fn load_config(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<Config, ContextError> {
    from_kubeconfig(
        read_kubeconfig(path)?,
        &Selection {
            context,
            ..Default::default()
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        kube: KubeArgs,
    }

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: one
  cluster: {server: "https://one.example:6443"}
- name: two
  cluster: {server: "https://two.example:6443", insecure-skip-tls-verify: true}
users:
- name: alice
  user: {token: alice-token}
- name: bob
  user: {token: bob-token}
contexts:
- name: a
  context: {cluster: one, user: alice, namespace: team-a}
- name: b
  context: {cluster: two, user: bob}
"#;

    fn flags(dir: &Path, args: &[&str]) -> KubeArgs {
        let path = dir.join("kubeconfig");
        std::fs::write(&path, KUBECONFIG).expect("kubeconfig");
        let kc = path.to_string_lossy().to_string();
        let mut argv = vec!["test", "--kubeconfig", kc.as_str()];
        argv.extend_from_slice(args);
        Flags::try_parse_from(argv).expect("flags").kube
    }

    fn token(c: &Config) -> Option<String> {
        use secrecy::ExposeSecret;
        c.auth_info
            .token
            .as_ref()
            .map(|t| t.expose_secret().to_string())
    }

    #[tokio::test]
    async fn the_namespace_is_the_contexts_unless_given() {
        let dir = tempfile::tempdir().expect("dir");
        let c = flags(dir.path(), &[]).config().await.expect("config");
        assert_eq!(c.default_namespace, "team-a");
        let c = flags(dir.path(), &["-n", "shop"])
            .config()
            .await
            .expect("config");
        assert_eq!(c.default_namespace, "shop");
        let c = flags(dir.path(), &["--context", "b"])
            .config()
            .await
            .expect("config");
        assert_eq!(c.default_namespace, "default", "a context without one");
        assert_eq!(c.cluster_url, "https://two.example:6443/");
    }

    #[tokio::test]
    async fn cluster_and_user_override_the_contexts() {
        let dir = tempfile::tempdir().expect("dir");
        let c = flags(dir.path(), &["--cluster", "two", "--user", "bob"])
            .config()
            .await
            .expect("config");
        assert_eq!(c.cluster_url, "https://two.example:6443/");
        assert!(c.accept_invalid_certs);
        assert_eq!(token(&c).as_deref(), Some("bob-token"));
        assert_eq!(
            c.default_namespace, "team-a",
            "the context's namespace stays"
        );
    }

    #[tokio::test]
    async fn connection_and_impersonation_flags() {
        let dir = tempfile::tempdir().expect("dir");
        let c = flags(
            dir.path(),
            &[
                "-s",
                "https://other.example:8443",
                "--token",
                "t0ken",
                "--as",
                "system:serviceaccount:shop:builder",
                "--as-group",
                "devs",
                "--as-group=ops",
                "--as-uid",
                "42",
                "--insecure-skip-tls-verify",
                "--request-timeout",
                "5s",
            ],
        )
        .config()
        .await
        .expect("config");
        assert_eq!(c.cluster_url, "https://other.example:8443/");
        assert_eq!(token(&c).as_deref(), Some("t0ken"));
        assert_eq!(
            c.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:shop:builder")
        );
        assert_eq!(
            c.auth_info.impersonate_groups,
            Some(vec!["devs".to_string(), "ops".to_string()])
        );
        assert_eq!(c.auth_info.impersonate_uid.as_deref(), Some("42"));
        assert!(c.accept_invalid_certs);
        assert_eq!(c.read_timeout, Some(Duration::from_secs(5)));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(5)));

        let c = flags(dir.path(), &["--insecure-skip-tls-verify=false"])
            .config()
            .await
            .expect("config");
        assert!(!c.accept_invalid_certs);
        assert_eq!(c.read_timeout, None, "0: no timeout");
        assert!(c.auth_info.impersonate.is_none());

        let e = flags(dir.path(), &["--as-group", "devs"])
            .config()
            .await
            .expect_err("a group without a user");
        assert!(matches!(e, ContextError::ImpersonationWithoutUser), "{e}");
        let e = flags(dir.path(), &["--server", "https://bad host"])
            .config()
            .await
            .expect_err("no URL");
        assert!(matches!(e, ContextError::Server { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_certificate_authority_file() {
        let dir = tempfile::tempdir().expect("dir");
        let ca = dir.path().join("ca.crt");
        // Any DER body will do: the PEM framing is what is read here, not the certificate.
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n",
        )
        .expect("ca");
        let ca_arg = ca.to_string_lossy().to_string();
        let c = flags(dir.path(), &["--certificate-authority", &ca_arg])
            .config()
            .await
            .expect("config");
        assert_eq!(c.root_cert, Some(vec![vec![0x30, 0x03, 0x02, 0x01, 0x00]]));
        std::fs::write(&ca, "not pem").expect("ca");
        let e = flags(dir.path(), &["--certificate-authority", &ca_arg])
            .config()
            .await
            .expect_err("no certificate");
        assert!(matches!(e, ContextError::NoCertificate(_)), "{e}");
    }

    #[test]
    fn request_timeouts_as_kubectl_reads_them() {
        assert_eq!(parse_timeout("0"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_timeout("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_timeout("1m"), Ok(Duration::from_secs(60)));
        let e = parse_timeout("soon").expect_err("no duration");
        assert!(e.starts_with("Invalid timeout value."), "{e}");
        assert!(parse_timeout("-5").is_err());
    }
}
