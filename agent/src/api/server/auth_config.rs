//! The client CAs and request-header settings the API server publishes in
//! `kube-system/extension-apiserver-authentication`, read as kube-scheduler's delegated
//! authentication reads them (what `extension-apiserver-authentication-reader` grants).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";

#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    #[error("cannot read configmap {NAMESPACE}/{NAME}: {0}")]
    Read(#[source] kube::Error),
    #[error("configmap {NAMESPACE}/{NAME}: {key}: {problem}")]
    Invalid { key: &'static str, problem: String },
}

/// Who the API server's front proxy is and how it names the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHeader {
    /// PEM of the CA that signs the front proxy's client certificate.
    pub client_ca: Vec<u8>,
    /// Common names the front proxy's certificate may have; empty: any.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefix: Vec<String>,
}

/// What the ConfigMap says; either half may be missing (a cluster without a front proxy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// PEM of the CA that signs client certificates (`--client-ca-file`).
    pub client_ca: Option<Vec<u8>>,
    pub request_header: Option<RequestHeader>,
}

fn string_list(cm: &ConfigMap, key: &'static str) -> Result<Vec<String>, AuthConfigError> {
    match cm.data.as_ref().and_then(|d| d.get(key)) {
        None => Ok(Vec::new()),
        Some(text) if text.trim().is_empty() => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| AuthConfigError::Invalid {
            key,
            problem: format!("not a JSON list of strings: {e}"),
        }),
    }
}

impl AuthConfig {
    pub fn from_config_map(cm: &ConfigMap) -> Result<Self, AuthConfigError> {
        let pem = |key: &'static str| -> Result<Option<Vec<u8>>, AuthConfigError> {
            match cm.data.as_ref().and_then(|d| d.get(key)) {
                None => Ok(None),
                Some(text) => {
                    // Checked here, so a bad bundle is named instead of failing TLS later.
                    certificates(text.as_bytes()).map_err(|e| AuthConfigError::Invalid {
                        key,
                        problem: e.to_string(),
                    })?;
                    Ok(Some(text.clone().into_bytes()))
                }
            }
        };
        let request_header = match pem("requestheader-client-ca-file")? {
            None => None,
            Some(client_ca) => Some(RequestHeader {
                client_ca,
                allowed_names: string_list(cm, "requestheader-allowed-names")?,
                username_headers: string_list(cm, "requestheader-username-headers")?,
                uid_headers: string_list(cm, "requestheader-uid-headers")?,
                group_headers: string_list(cm, "requestheader-group-headers")?,
                extra_headers_prefix: string_list(cm, "requestheader-extra-headers-prefix")?,
            }),
        };
        Ok(AuthConfig {
            client_ca: pem("client-ca-file")?,
            request_header,
        })
    }

    pub async fn read(client: &kube::Client) -> Result<Self, AuthConfigError> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
        match api.get_opt(NAME).await.map_err(AuthConfigError::Read)? {
            Some(cm) => Self::from_config_map(&cm),
            None => Ok(AuthConfig::default()),
        }
    }
}

/// What is wrong with a PEM bundle of certificates.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("not a PEM certificate bundle: {0}")]
    NotPem(rustls::pki_types::pem::Error),
    #[error("holds no PEM certificate")]
    Empty,
    #[error("not a usable CA certificate: {0}")]
    NotCa(rustls::Error),
}

/// The certificates of a PEM bundle; an error names what is wrong.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(PemError::NotPem)?;
    if certs.is_empty() {
        return Err(PemError::Empty);
    }
    Ok(certs)
}

/// A root store from a PEM bundle (already checked by `certificates`).
pub fn roots(pem: &[u8]) -> Result<Arc<RootCertStore>, PemError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(pem)? {
        store.add(cert).map_err(PemError::NotCa)?;
    }
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn config_map(data: &[(&str, String)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn reads_what_kube_apiserver_publishes() {
        let cm = config_map(&[
            ("client-ca-file", ca_pem()),
            ("requestheader-client-ca-file", ca_pem()),
            (
                "requestheader-allowed-names",
                r#"["front-proxy-client"]"#.into(),
            ),
            (
                "requestheader-username-headers",
                r#"["X-Remote-User"]"#.into(),
            ),
            (
                "requestheader-group-headers",
                r#"["X-Remote-Group"]"#.into(),
            ),
            (
                "requestheader-extra-headers-prefix",
                r#"["X-Remote-Extra-"]"#.into(),
            ),
        ]);
        let cfg = AuthConfig::from_config_map(&cm).unwrap();
        assert!(cfg.client_ca.is_some());
        let rh = cfg.request_header.unwrap();
        assert_eq!(rh.allowed_names, vec!["front-proxy-client"]);
        assert_eq!(rh.username_headers, vec!["X-Remote-User"]);
        assert_eq!(rh.group_headers, vec!["X-Remote-Group"]);
        assert_eq!(rh.extra_headers_prefix, vec!["X-Remote-Extra-"]);
        assert!(rh.uid_headers.is_empty());
    }

    #[test]
    fn a_bad_value_is_named() {
        let cm = config_map(&[("client-ca-file", "not pem".into())]);
        let e = AuthConfig::from_config_map(&cm).unwrap_err().to_string();
        assert!(e.contains("client-ca-file"), "{e}");
        let cm = config_map(&[
            ("requestheader-client-ca-file", ca_pem()),
            ("requestheader-allowed-names", "front-proxy-client".into()),
        ]);
        let e = AuthConfig::from_config_map(&cm).unwrap_err().to_string();
        assert!(e.contains("requestheader-allowed-names"), "{e}");
    }

    #[test]
    fn no_front_proxy_no_request_header() {
        let cm = config_map(&[("client-ca-file", ca_pem())]);
        let cfg = AuthConfig::from_config_map(&cm).unwrap();
        assert!(cfg.request_header.is_none());
    }
}
