//! A set of clusters by name, by their virtual nodes' labels, and by exclusion: what a
//! placement policy allows and what an override targets.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::selectors::label_selector_matches;

/// Clusters by name, by their virtual nodes' labels, and by exclusion.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// These clusters (`host` for the host's own nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) cluster_names: Vec<String>,
    /// Clusters whose virtual node's labels match (`topology.kubernetes.io/region`,
    /// `mcsched.io/provider`, ...); the host's nodes by their own labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label_selector: Option<LabelSelector>,
    /// Never these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) exclude: Vec<String>,
}

impl ClusterAffinity {
    /// Whether `cluster`, whose node carries `labels`, is allowed.
    pub fn allows(&self, cluster: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.exclude.iter().any(|c| c == cluster) {
            return false;
        }
        let by_name = self.cluster_names.iter().any(|c| c == cluster);
        match (&self.label_selector, self.cluster_names.is_empty()) {
            (None, true) => true,
            (None, false) => by_name,
            (Some(sel), true) => label_selector_matches(Some(sel), labels),
            (Some(sel), false) => by_name || label_selector_matches(Some(sel), labels),
        }
    }
}
