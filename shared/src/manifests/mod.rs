//! Every object `kubectl mcsched install` creates, rendered from one options struct.
//!
//! Pure: options in, k8s-openapi objects out, in the order they must be applied (a
//! namespace before what lives in it, RBAC before the Deployment that needs it, the
//! APIService after the Service and Deployment that serve it). The CLI
//! applies them with server-side apply; `manifests/` in the repository holds the default
//! rendering as YAML.

mod apiservice;
mod config;
mod object;
mod rbac;
mod workload;

pub use apiservice::{APIService, APIServiceSpec, ServiceReference};
pub use config::{AgentConfig, default_config_text};
pub use object::{Object, to_json_list, to_yaml_stream};
pub use rbac::{configmap_reader_name, placement_keeper_name, secret_reader_name};

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::config::ConfigErrors;
use crate::keys;

/// What `install` is told.
#[derive(Debug, Clone, PartialEq)]
pub struct InstallOptions {
    /// Where the agent, its configuration and the join Secrets live.
    pub namespace: String,
    /// The profile served without `config`; with it, a profile the file must contain.
    pub scheduler_name: Option<String>,
    pub image: String,
    pub replicas: i32,
    /// Labels the agent's nodes must have (the pod template's `nodeSelector`).
    pub node_selector: BTreeMap<String, String>,
    /// A KubeSchedulerConfiguration (YAML) to ship instead of the default one, and where
    /// it came from (for error messages).
    pub config: Option<(String, String)>,
}

impl Default for InstallOptions {
    fn default() -> Self {
        InstallOptions {
            namespace: keys::SYSTEM_NAMESPACE.to_string(),
            scheduler_name: None,
            image: default_image(),
            replicas: 1,
            node_selector: BTreeMap::new(),
            config: None,
        }
    }
}

/// `ghcr.io/mcsched/mcsched-agent:v<this version>`: the agent released with this CLI.
pub fn default_image() -> String {
    format!(
        "{}:v{}",
        keys::AGENT_IMAGE_REPOSITORY,
        env!("CARGO_PKG_VERSION")
    )
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{source_name} is not a valid scheduler configuration:\n{errors}")]
    Config {
        source_name: String,
        errors: ConfigErrors,
    },
}

fn invalid(field: &str, message: impl Into<String>) -> ManifestError {
    ManifestError::Invalid {
        field: field.to_string(),
        message: message.into(),
    }
}

/// RFC 1123 label, as Kubernetes wants for namespace names.
fn check_dns_label(field: &str, value: &str) -> Result<(), ManifestError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!(
                "{value:?} must be a DNS label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            ),
        ))
    }
}

/// The labels every object carries; `mcsched.io/install` is what `uninstall` selects on.
pub(crate) fn common_labels(namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), keys::AGENT_NAME.into()),
        ("app.kubernetes.io/part-of".into(), "mcsched".into()),
        (keys::MANAGED_BY_LABEL.into(), keys::MANAGED_BY_VALUE.into()),
        (keys::INSTALL_LABEL.into(), namespace.into()),
    ])
}

/// The label selector `uninstall` uses for an install in `namespace`.
pub fn install_selector(namespace: &str) -> String {
    format!("{}={namespace}", keys::INSTALL_LABEL)
}

/// The labels of the agent's pods (the Deployment's and Service's selector).
pub(crate) fn pod_selector() -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".into(), keys::AGENT_NAME.into())])
}

pub(crate) fn meta(name: &str, namespace: Option<&str>, install_ns: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(common_labels(install_ns)),
        ..Default::default()
    }
}

/// The PlacementPolicy and ClusterPlacementPolicy CRDs, labelled as this install's.
fn policy_crds(ns: &str) -> Vec<Object> {
    use kube_core::CustomResourceExt;
    [
        crate::policy::PlacementPolicy::crd(),
        crate::policy::ClusterPlacementPolicy::crd(),
    ]
    .into_iter()
    .map(|mut crd| {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crd.metadata = meta(&name, None, ns);
        Object::CustomResourceDefinition(crd)
    })
    .collect()
}

/// Validates the options and renders every object, in apply order.
pub fn render(opts: &InstallOptions) -> Result<Vec<Object>, ManifestError> {
    check_dns_label("--namespace", &opts.namespace)?;
    if opts.image.trim().is_empty() || opts.image.contains(char::is_whitespace) {
        return Err(invalid(
            "--image",
            format!("{:?} is not an image reference", opts.image),
        ));
    }
    if opts.replicas < 1 {
        return Err(invalid(
            "--replicas",
            format!("must be 1 or more, got {}", opts.replicas),
        ));
    }
    let cfg = AgentConfig::resolve(opts)?;
    let ns = opts.namespace.as_str();

    let mut objects = policy_crds(ns);
    objects.extend([
        Object::Namespace(Namespace {
            metadata: meta(ns, None, ns),
            ..Default::default()
        }),
        Object::ServiceAccount(ServiceAccount {
            metadata: meta(keys::AGENT_NAME, Some(ns), ns),
            ..Default::default()
        }),
    ]);
    objects.extend(rbac::objects(ns, &cfg));
    objects.push(Object::ConfigMap(config::config_map(ns, &cfg)));
    objects.push(Object::Service(workload::service(ns)));
    objects.push(Object::Service(apiservice::api_service_backend(ns)));
    objects.push(Object::Deployment(workload::deployment(ns, opts, &cfg)));
    if opts.replicas > 1 {
        objects.push(Object::PodDisruptionBudget(workload::pdb(ns)));
    }
    // Last: the API server routes mcsched.io to the Service from the moment it exists.
    objects.push(Object::APIService(apiservice::api_service(ns)));
    Ok(objects)
}

#[cfg(test)]
mod tests;
