//! The secure port's TLS: its serving certificate, and the client certificates it asks
//! for (front proxy and cluster clients), verified by rustls against the published CAs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use super::auth_config::{AuthConfig, roots};

/// How long a generated serving certificate is valid; the agent makes a new one (and a
/// new CA) at every start, and renews it with the same CA once a fifth of this is left.
pub const GENERATED_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long the CA of a generated certificate is valid: ten renewals' worth, so the
/// caBundle published with it holds as long as any agent process runs.
const GENERATED_CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How often the certificate files are read again (kube's dynamic serving certificate
/// re-reads its files every minute besides watching them; this polls only) and a
/// generated certificate's age checked.
pub const CERT_REFRESH: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {problem}")]
    Invalid { what: String, problem: String },
    #[error("cannot generate a serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The serving certificate chain and key, and the CA that signed it when the agent made
/// both (the CA bundle the APIService needs).
#[derive(Clone)]
pub struct ServingCert {
    pub chain: Vec<CertificateDer<'static>>,
    key_pem: Vec<u8>,
    pub ca_pem: Option<String>,
    origin: Origin,
}

/// Where a serving certificate comes from, and so how a newer one is had.
#[derive(Clone)]
enum Origin {
    /// `--tls-cert-file` and `--tls-private-key-file`, as read (cert-manager or a
    /// Secret volume rewrites them).
    Files {
        cert: PathBuf,
        key: PathBuf,
        chain_pem: Vec<u8>,
    },
    /// Made by the agent. Its CA's key is kept, in memory only, to sign the renewals, so
    /// the caBundle the leader published stays the one clients trust.
    Generated {
        ca: Arc<rcgen::CertifiedIssuer<'static, rcgen::KeyPair>>,
        names: Vec<String>,
        lifetime: Duration,
        not_after: SystemTime,
    },
}

impl ServingCert {
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |what, path: &Path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                what,
                path: path.display().to_string(),
                source,
            })
        };
        let chain_pem = read("--tls-cert-file", cert)?;
        let key_pem = read("--tls-private-key-file", key)?;
        let chain =
            super::auth_config::certificates(&chain_pem).map_err(|e| TlsError::Invalid {
                what: format!("--tls-cert-file {}", cert.display()),
                problem: e.to_string(),
            })?;
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Invalid {
            what: format!("--tls-private-key-file {}", key.display()),
            problem: e.to_string(),
        })?;
        let cert = ServingCert {
            chain,
            key_pem,
            ca_pem: None,
            origin: Origin::Files {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
                chain_pem,
            },
        };
        // A key that is not the certificate's is refused now, not at the first handshake.
        cert.certified_key()?;
        Ok(cert)
    }

    /// A CA of its own and a serving certificate it signs for `names` (DNS names or IP
    /// addresses), valid [`GENERATED_LIFETIME`].
    pub fn generate(names: Vec<String>) -> Result<Self, TlsError> {
        Self::generate_for(names, GENERATED_LIFETIME)
    }

    fn generate_for(names: Vec<String>, lifetime: Duration) -> Result<Self, TlsError> {
        let now = time::OffsetDateTime::now_utc();
        let ca_lifetime = time::Duration::try_from(GENERATED_CA_LIFETIME.max(lifetime * 10))
            .unwrap_or(time::Duration::DAY);
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        ca_params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("mcsched-agent-ca@{}", now.unix_timestamp()),
        );
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        ca_params.not_before = now - time::Duration::HOUR;
        ca_params.not_after = now + ca_lifetime;
        let ca_key = rcgen::KeyPair::generate()?;
        let ca = Arc::new(rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?);
        Self::signed_by(ca, names, lifetime)
    }

    /// A serving certificate for `names`, valid `lifetime` from now, signed by `ca`.
    fn signed_by(
        ca: Arc<rcgen::CertifiedIssuer<'static, rcgen::KeyPair>>,
        names: Vec<String>,
        lifetime: Duration,
    ) -> Result<Self, TlsError> {
        let now = time::OffsetDateTime::now_utc();
        let mut params = rcgen::CertificateParams::new(names.clone())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mcsched-agent");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        // An hour back: clients whose clocks lag a little still take it.
        params.not_before = now - time::Duration::HOUR;
        params.not_after = now + time::Duration::try_from(lifetime).unwrap_or(time::Duration::DAY);
        let key = rcgen::KeyPair::generate()?;
        let cert = params.signed_by(&key, &*ca)?;
        Ok(ServingCert {
            chain: vec![cert.der().clone(), ca.der().clone()],
            key_pem: key.serialize_pem().into_bytes(),
            ca_pem: Some(ca.pem()),
            origin: Origin::Generated {
                ca,
                names,
                lifetime,
                not_after: SystemTime::from(params.not_after),
            },
        })
    }

    /// A newer certificate when there is one: the files' when they changed (an error
    /// when what they hold now is not a certificate and its key), a renewal of a
    /// generated one with a fifth of its lifetime left; None otherwise.
    pub fn refreshed(&self) -> Result<Option<ServingCert>, TlsError> {
        match &self.origin {
            Origin::Files {
                cert,
                key,
                chain_pem,
            } => {
                let read = |path: &Path| std::fs::read(path).ok();
                if read(cert).as_ref() == Some(chain_pem)
                    && read(key).as_ref() == Some(&self.key_pem)
                {
                    return Ok(None);
                }
                let next = ServingCert::from_files(cert, key)?;
                Ok(Some(next))
            }
            Origin::Generated {
                ca,
                names,
                lifetime,
                not_after,
            } => {
                let left = not_after
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                if left > *lifetime / 5 {
                    return Ok(None);
                }
                ServingCert::signed_by(ca.clone(), names.clone(), *lifetime).map(Some)
            }
        }
    }

    /// The private key, PEM (what `--tls-private-key-file` holds).
    pub fn key_pem(&self) -> &[u8] {
        &self.key_pem
    }

    /// The chain and its signing key, as rustls serves them; an error when the key is
    /// not the certificate's.
    fn certified_key(&self) -> Result<Arc<CertifiedKey>, TlsError> {
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(self.chain.clone(), self.key()?, &provider)
            .map(Arc::new)
            .map_err(|e| TlsError::Invalid {
                what: "serving certificate and key".into(),
                problem: e.to_string(),
            })
    }

    fn key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| TlsError::Invalid {
            what: "serving key".into(),
            problem: e.to_string(),
        })
    }
}

/// The serving certificate every handshake is given: swapped in place when the files
/// change or a generated one is renewed, so new connections get the new one while
/// those open keep theirs, and the client CAs' TLS configuration is kept.
#[derive(Debug)]
pub struct CertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertResolver {
    pub fn new(cert: &ServingCert) -> Result<Arc<Self>, TlsError> {
        Ok(Arc::new(CertResolver {
            current: RwLock::new(cert.certified_key()?),
        }))
    }

    fn set(&self, cert: &ServingCert) -> Result<(), TlsError> {
        let next = cert.certified_key()?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// The chain served now, leaf first.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .cert
            .clone()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// Every `every`, takes a newer serving certificate when [`ServingCert::refreshed`] has
/// one. Files caught half-written (a certificate without its key) are tried again at
/// the next tick; meanwhile the one in use is kept, and the problem logged once.
pub async fn keep_serving_cert(
    resolver: Arc<CertResolver>,
    mut cert: ServingCert,
    every: Duration,
) {
    let mut reported: Option<String> = None;
    loop {
        tokio::time::sleep(every).await;
        let next = match cert.refreshed() {
            Ok(Some(next)) => next,
            Ok(None) => continue,
            Err(e) => {
                let problem = e.to_string();
                if reported.as_ref() != Some(&problem) {
                    warn!(error = %problem, "the serving certificate changed but cannot be used; keeping the one in use");
                    reported = Some(problem);
                }
                continue;
            }
        };
        match resolver.set(&next) {
            Ok(()) => {
                reported = None;
                let what = if matches!(next.origin, Origin::Files { .. }) {
                    "reloaded from its files"
                } else {
                    "renewed"
                };
                info!("serving certificate {what}: new connections get it");
                cert = next;
            }
            Err(e) => {
                warn!(error = %e, "the new serving certificate cannot be used; keeping the one in use")
            }
        }
    }
}

/// Verifiers for the two kinds of client certificate: the API server's front proxy, and
/// clients of the cluster (`--client-ca-file`). Either may be absent.
#[derive(Clone, Default)]
pub struct ClientVerifiers {
    pub front_proxy: Option<Arc<dyn ClientCertVerifier>>,
    pub cluster: Option<Arc<dyn ClientCertVerifier>>,
}

fn verifier(pem: &[u8], what: &str) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let roots = roots(pem).map_err(|e| TlsError::Invalid {
        what: what.to_string(),
        problem: e.to_string(),
    })?;
    WebPkiClientVerifier::builder_with_provider(
        roots,
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| TlsError::Invalid {
        what: what.to_string(),
        problem: e.to_string(),
    })
}

impl ClientVerifiers {
    pub fn new(cfg: &AuthConfig) -> Result<Self, TlsError> {
        Ok(ClientVerifiers {
            front_proxy: cfg
                .request_header
                .as_ref()
                .map(|rh| verifier(&rh.client_ca, "requestheader-client-ca-file"))
                .transpose()?,
            cluster: cfg
                .client_ca
                .as_ref()
                .map(|pem| verifier(pem, "client-ca-file"))
                .transpose()?,
        })
    }
}

/// Whether `chain` (leaf first, as the client sent it) is signed by `verifier`'s CA.
pub fn verified(verifier: &dyn ClientCertVerifier, chain: &[Vec<u8>]) -> bool {
    let Some((leaf, rest)) = chain.split_first() else {
        return false;
    };
    let leaf = CertificateDer::from(leaf.as_slice());
    let rest: Vec<CertificateDer<'_>> = rest
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    verifier
        .verify_client_cert(&leaf, &rest, UnixTime::now())
        .is_ok()
}

/// The server's TLS configuration: its certificate, and client certificates asked for
/// but optional (bearer tokens and health probes come without one). A certificate that
/// is sent must chain to one of the published CAs, or the handshake fails.
pub fn server_config(
    cert: &Arc<CertResolver>,
    cfg: &AuthConfig,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)?;
    let mut all_roots = rustls::RootCertStore::empty();
    let bundles = [
        cfg.request_header
            .as_ref()
            .map(|rh| rh.client_ca.as_slice()),
        cfg.client_ca.as_deref(),
    ];
    for pem in bundles.into_iter().flatten() {
        let store = roots(pem).map_err(|e| TlsError::Invalid {
            what: "client CA".into(),
            problem: e.to_string(),
        })?;
        all_roots.roots.extend(store.roots.iter().cloned());
    }
    let mut config = if all_roots.is_empty() {
        builder.with_no_client_auth()
    } else {
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(all_roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError::Invalid {
                what: "client CA".into(),
                problem: e.to_string(),
            })?;
        builder.with_client_cert_verifier(verifier)
    }
    .with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client certificate's user: its common name, and its organizations as groups (as
/// Kubernetes reads client certificates).
pub fn subject(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(String::from))
        .collect();
    Some((cn, groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::server::auth_config::RequestHeader;

    /// A CA and a client certificate it signs for `cn` in `orgs` (rcgen keeps one
    /// value per attribute type).
    fn ca_and_client(cn: &str, orgs: &[&str]) -> (String, Vec<u8>) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        (ca.pem(), cert.der().to_vec())
    }

    #[test]
    fn a_client_certificate_is_told_apart_by_the_ca_that_signed_it() {
        let (front_proxy_ca, proxy) = ca_and_client("front-proxy-client", &[]);
        let (cluster_ca, alice) = ca_and_client("alice", &["dev"]);
        let cfg = AuthConfig {
            client_ca: Some(cluster_ca.into_bytes()),
            request_header: Some(RequestHeader {
                client_ca: front_proxy_ca.into_bytes(),
                ..Default::default()
            }),
        };
        let v = ClientVerifiers::new(&cfg).unwrap();
        let (fp, cluster) = (v.front_proxy.unwrap(), v.cluster.unwrap());
        assert!(verified(fp.as_ref(), std::slice::from_ref(&proxy)));
        assert!(!verified(cluster.as_ref(), std::slice::from_ref(&proxy)));
        assert!(verified(cluster.as_ref(), std::slice::from_ref(&alice)));
        assert!(!verified(fp.as_ref(), std::slice::from_ref(&alice)));
        assert!(!verified(fp.as_ref(), &[]));
        assert_eq!(
            subject(&alice),
            Some(("alice".to_string(), vec!["dev".to_string()]))
        );
    }

    #[test]
    fn a_generated_certificate_is_signed_by_its_own_ca_and_expires() {
        let cert =
            ServingCert::generate(vec!["mcsched-api.ns.svc".into(), "10.0.0.1".into()]).unwrap();
        let ca = cert.ca_pem.clone().unwrap();
        let roots = roots(ca.as_bytes()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots,
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        use rustls::client::danger::ServerCertVerifier;
        let name = rustls::pki_types::ServerName::try_from("mcsched-api.ns.svc").unwrap();
        verifier
            .verify_server_cert(
                &cert.chain[0],
                &cert.chain[1..],
                &name,
                &[],
                UnixTime::now(),
            )
            .unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&cert.chain[0]).unwrap();
        let validity = parsed.validity();
        let lifetime = validity.not_after.timestamp() - validity.not_before.timestamp();
        assert!(lifetime <= GENERATED_LIFETIME.as_secs() as i64 + 3600);
        // And TLS takes it, with or without client CAs.
        server_config(&CertResolver::new(&cert).unwrap(), &AuthConfig::default()).unwrap();
    }

    /// The chain as PEM and the key, as cert-manager writes `tls.crt` and `tls.key`.
    fn write_files(cert: &ServingCert, crt: &Path, key: &Path) {
        use base64::Engine;
        let mut pem = String::new();
        for der in &cert.chain {
            let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
            pem.push_str("-----BEGIN CERTIFICATE-----\n");
            for line in b64.as_bytes().chunks(64) {
                pem.push_str(std::str::from_utf8(line).unwrap());
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
        }
        // Each file replaced by a rename, one after the other: for a moment the
        // certificate is the new one and the key the old.
        let replace = |path: &Path, bytes: &[u8]| {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, bytes).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        };
        replace(crt, pem.as_bytes());
        std::thread::sleep(Duration::from_millis(120));
        replace(key, &cert.key_pem);
    }

    /// A client trusting the CAs of `trusted`, without TLS session resumption: every
    /// request is a full handshake, verifying the certificate served at that moment.
    fn client(trusted: &[&ServingCert]) -> reqwest::Client {
        let mut store = rustls::RootCertStore::empty();
        for c in trusted {
            let ca = c.ca_pem.as_deref().unwrap();
            store
                .roots
                .extend(roots(ca.as_bytes()).unwrap().roots.iter().cloned());
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
        tls.resumption = rustls::client::Resumption::disabled();
        reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }

    /// A TLS server answering `ok` with what `resolver` serves; its URL.
    async fn serve(
        resolver: &Arc<CertResolver>,
    ) -> (String, axum_server::Handle<std::net::SocketAddr>) {
        let config = axum_server::tls_rustls::RustlsConfig::from_config(
            server_config(resolver, &AuthConfig::default()).unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = axum_server::Handle::new();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let server = axum_server::tls_rustls::from_tcp_rustls(listener, config)
            .unwrap()
            .handle(handle.clone());
        tokio::spawn(server.serve(app.into_make_service()));
        (format!("https://127.0.0.1:{port}/"), handle)
    }

    async fn answers(client: &reqwest::Client, url: &str) -> bool {
        match client.get(url).send().await {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rotated_certificate_files_are_served_while_requests_run() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let (a, b) = (
            ServingCert::generate(names.clone()).unwrap(),
            ServingCert::generate(names).unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        write_files(&a, &crt, &key);
        let served = ServingCert::from_files(&crt, &key).unwrap();
        let resolver = CertResolver::new(&served).unwrap();
        let refresh = tokio::spawn(keep_serving_cert(
            resolver.clone(),
            served,
            Duration::from_millis(20),
        ));
        let (url, handle) = serve(&resolver).await;
        let (only_a, only_b) = (client(&[&a]), client(&[&b]));
        assert!(answers(&only_a, &url).await, "a is served");
        assert!(!answers(&only_b, &url).await, "b is not yet");

        // Requests on new connections all along, from clients that trust either CA.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load: Vec<_> = (0..4)
            .map(|_| {
                let (client, url, stop) = (client(&[&a, &b]), url.clone(), stop.clone());
                tokio::spawn(async move {
                    let (mut ok, mut failed) = (0u32, 0u32);
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed)
                        && tokio::time::Instant::now() < deadline
                    {
                        if answers(&client, &url).await {
                            ok += 1;
                        } else {
                            failed += 1;
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        write_files(&b, &crt, &key);
        let rotated = tokio::time::timeout(Duration::from_secs(10), async {
            while !answers(&only_b, &url).await {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(rotated.is_ok(), "b served after the rotation");
        assert!(!answers(&only_a, &url).await, "a no longer served");
        assert_eq!(resolver.chain(), b.chain);
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (mut ok, mut failed) = (0, 0);
        for l in load {
            let (o, f) = l.await.unwrap();
            ok += o;
            failed += f;
        }
        assert_eq!(
            failed, 0,
            "no request failed across the rotation ({ok} answered)"
        );
        assert!(ok >= 20, "requests ran throughout: {ok}");
        refresh.abort();
        handle.shutdown();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_generated_certificate_is_renewed_by_its_own_ca_before_it_expires() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let names = vec!["127.0.0.1".to_string()];
        let first = ServingCert::generate_for(names, Duration::from_secs(3)).unwrap();
        assert!(first.refreshed().unwrap().is_none(), "not yet due");
        let year = ServingCert::generate(vec!["a".into()]).unwrap();
        assert!(year.refreshed().unwrap().is_none());
        let resolver = CertResolver::new(&first).unwrap();
        let refresh = tokio::spawn(keep_serving_cert(
            resolver.clone(),
            first.clone(),
            Duration::from_millis(20),
        ));
        let (url, handle) = serve(&resolver).await;
        let trusting = client(&[&first]);
        assert!(answers(&trusting, &url).await);
        let renewed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let chain = resolver.chain();
                if chain[0] != first.chain[0] {
                    return chain;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("renewed before it expired");
        let not_after = |der: &CertificateDer<'_>| {
            let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
            c.validity().not_after.timestamp()
        };
        assert!(
            not_after(&renewed[0]) > not_after(&first.chain[0]),
            "the renewal lasts longer"
        );
        assert_eq!(renewed[1], first.chain[1], "by the same CA");
        // The caBundle published at start still names whoever serves: clients that trust
        // it keep connecting.
        assert!(
            answers(&trusting, &url).await,
            "the renewal chains to the first CA"
        );
        refresh.abort();
        handle.shutdown();
    }
}
