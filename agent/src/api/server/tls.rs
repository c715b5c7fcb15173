//! The secure port's TLS: its serving certificate, and the client certificates it asks
//! for (front proxy and cluster clients), verified by rustls against the published CAs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::auth_config::{AuthConfig, roots};

/// How long a generated serving certificate (and its CA) is valid; the agent makes a
/// new one at every start.
pub const GENERATED_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

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
        Ok(ServingCert {
            chain,
            key_pem,
            ca_pem: None,
        })
    }

    /// A CA of its own and a serving certificate it signs for `names` (DNS names or IP
    /// addresses); the CA's key is dropped once it has signed.
    pub fn generate(names: Vec<String>) -> Result<Self, TlsError> {
        let now = time::OffsetDateTime::now_utc();
        let lifetime = time::Duration::try_from(GENERATED_LIFETIME).unwrap_or(time::Duration::DAY);
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
        ca_params.not_after = now + lifetime;
        let ca_key = rcgen::KeyPair::generate()?;
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;

        let mut params = rcgen::CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mcsched-agent");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = now - time::Duration::HOUR;
        params.not_after = now + lifetime;
        let key = rcgen::KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok(ServingCert {
            chain: vec![cert.der().clone(), ca.der().clone()],
            key_pem: key.serialize_pem().into_bytes(),
            ca_pem: Some(ca.pem()),
        })
    }

    fn key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| TlsError::Invalid {
            what: "serving key".into(),
            problem: e.to_string(),
        })
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
pub fn server_config(cert: &ServingCert, cfg: &AuthConfig) -> Result<Arc<ServerConfig>, TlsError> {
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
    .with_single_cert(cert.chain.clone(), cert.key()?)?;
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
        server_config(&cert, &AuthConfig::default()).unwrap();
    }
}
