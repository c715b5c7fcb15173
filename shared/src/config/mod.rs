//! KubeSchedulerConfiguration `v1`, `v1beta3`, `v1beta2` and `v1beta1`, decoded into one
//! model with kube-scheduler's defaults for that version and validated with errors that
//! name the field path (`profiles[0].plugins.filter.enabled[1].name: unknown plugin "Foo"`).

pub mod catalog;
pub(crate) mod cluster_policies;
mod decode;
pub mod duration;
pub mod feature_gates;
pub mod mcsched_default;
pub(crate) mod model;
mod plugin_args;
mod raw;
mod render;

use std::path::Path;

pub use catalog::Point;
pub use model::*;
pub use render::render_profiles;

pub(crate) const GROUP: &str = "kubescheduler.config.k8s.io";
pub(crate) const VERSIONS: &[&str] = &["v1", "v1beta3", "v1beta2", "v1beta1"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    pub(crate) path: String,
    pub(crate) message: String,
}

/// Every problem found, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }
}

/// Decodes and validates a configuration (YAML or JSON), with the default plugins of
/// kube-scheduler's default feature gates.
pub fn load(text: &str) -> Result<SchedulerConfig, ConfigErrors> {
    load_with(text, &feature_gates::FeatureGates::default())
}

/// As [`load`], with the default plugins the `gates` give (TopologyAwareWorkloadScheduling
/// adds the pod group cycle's TopologyPlacementGenerator and PodGroupPodsCount).
pub fn load_with(
    text: &str,
    gates: &feature_gates::FeatureGates,
) -> Result<SchedulerConfig, ConfigErrors> {
    decode::decode(text, gates)
}

pub fn load_file(path: &Path) -> Result<SchedulerConfig, ConfigErrors> {
    load_file_with(path, &feature_gates::FeatureGates::default())
}

pub fn load_file_with(
    path: &Path,
    gates: &feature_gates::FeatureGates,
) -> Result<SchedulerConfig, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            path: path.display().to_string(),
            message: format!("cannot read: {e}"),
        }])
    })?;
    load_with(&text, gates)
}

/// What a v1 file naming only one profile, `scheduler_name`, gives.
pub fn default_config(scheduler_name: &str) -> Result<SchedulerConfig, ConfigErrors> {
    let text = format!(
        "apiVersion: {GROUP}/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: {scheduler_name:?}\n"
    );
    load(&text)
}

#[cfg(test)]
mod tests;
