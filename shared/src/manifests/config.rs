//! The agent's KubeSchedulerConfiguration: the default one, or the user's file checked by
//! the agent's own parser plus what an in-cluster install needs of it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::{InstallOptions, ManifestError, invalid, meta};
use crate::config;
use crate::keys;

/// The configuration the ConfigMap ships, and what RBAC and the Deployment take from it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    pub(crate) text: String,
    pub scheduler_names: Vec<String>,
    /// The leader Lease's name when leader election is on (in the install namespace).
    pub(crate) lease_name: Option<String>,
}

/// mcsched's default profile (see [`config::mcsched_default`]), leader election on a
/// Lease named after it in the install namespace.
pub fn default_config_text(scheduler_name: &str, namespace: &str) -> String {
    config::mcsched_default::text(scheduler_name, Some((scheduler_name, namespace)))
}

/// RFC 1123 subdomain: what the API server accepts as a pod's `spec.schedulerName`.
fn check_dns_subdomain(field: &str, value: &str) -> Result<(), ManifestError> {
    let ok = crate::names::is_dns_subdomain(value);
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{value:?} must be a DNS subdomain (lowercase letters, digits, '-' and '.')"),
        ))
    }
}

impl AgentConfig {
    pub fn resolve(opts: &InstallOptions) -> Result<Self, ManifestError> {
        let ns = opts.namespace.as_str();
        let (text, source) = match &opts.config {
            Some((text, source)) => (text.clone(), source.clone()),
            None => {
                let name = opts
                    .scheduler_name
                    .as_deref()
                    .unwrap_or(keys::DEFAULT_SCHEDULER_NAME);
                check_dns_subdomain("--scheduler-name", name)?;
                (
                    default_config_text(name, ns),
                    "the default configuration".into(),
                )
            }
        };
        let cfg = config::load(&text).map_err(|errors| ManifestError::Config {
            source_name: source.clone(),
            errors,
        })?;
        let scheduler_names: Vec<String> = cfg
            .profiles
            .iter()
            .map(|p| p.scheduler_name.clone())
            .collect();
        if let Some(name) = &opts.scheduler_name
            && !scheduler_names.contains(name)
        {
            return Err(invalid(
                "--scheduler-name",
                format!(
                    "{name:?} is not a profile of {source} (its profiles: {})",
                    scheduler_names.join(", ")
                ),
            ));
        }
        if let Some(kc) = &cfg.client_connection.kubeconfig {
            return Err(invalid(
                &format!("{source}: clientConnection.kubeconfig"),
                format!(
                    "is {kc:?}; leave it empty: in the cluster the agent uses its ServiceAccount"
                ),
            ));
        }
        let le = &cfg.leader_election;
        if le.leader_elect && le.resource_namespace != ns {
            return Err(invalid(
                &format!("{source}: leaderElection.resourceNamespace"),
                format!(
                    "is {:?}, but the agent may only hold its Lease in the install namespace; set it to {ns:?}",
                    le.resource_namespace
                ),
            ));
        }
        if !le.leader_elect && opts.replicas > 1 {
            return Err(invalid(
                &format!("{source}: leaderElection.leaderElect"),
                format!(
                    "is false, but --replicas is {}: every replica would bind pods; turn leader election on or run one replica",
                    opts.replicas
                ),
            ));
        }
        Ok(AgentConfig {
            lease_name: le.leader_elect.then(|| le.resource_name.clone()),
            text,
            scheduler_names,
        })
    }

    /// The first 16 hex digits of the text's SHA-256: what the Helm chart writes
    /// (`sha256sum | trunc 16`), so a chart install and a CLI install of the same
    /// configuration roll the Deployment alike.
    pub(crate) fn hash(&self) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(self.text.as_bytes());
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

pub(super) fn config_map(ns: &str, cfg: &AgentConfig) -> ConfigMap {
    ConfigMap {
        metadata: meta(keys::AGENT_CONFIG_NAME, Some(ns), ns),
        data: Some(BTreeMap::from([(
            keys::AGENT_CONFIG_KEY.to_string(),
            cfg.text.clone(),
        )])),
        ..Default::default()
    }
}
