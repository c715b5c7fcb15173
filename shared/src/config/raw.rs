//! The file as written: every field of every supported version, unknown fields refused.

use serde::Deserialize;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawConfig {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub parallelism: Option<i64>,
    pub percentage_of_nodes_to_score: Option<i64>,
    pub pod_initial_backoff_seconds: Option<i64>,
    pub pod_max_backoff_seconds: Option<i64>,
    pub leader_election: Option<RawLeaderElection>,
    pub client_connection: Option<RawClientConnection>,
    pub profiles: Option<Vec<RawProfile>>,
    pub extenders: Option<Vec<RawExtender>>,
    // Accepted for compatibility; mcsched serves no profiling endpoints.
    #[allow(dead_code)]
    pub enable_profiling: Option<bool>,
    #[allow(dead_code)]
    pub enable_contention_profiling: Option<bool>,
    /// v1 only.
    pub delay_cache_until_active: Option<bool>,
    /// v1beta1 and v1beta2 only.
    pub healthz_bind_address: Option<String>,
    pub metrics_bind_address: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawLeaderElection {
    pub leader_elect: Option<bool>,
    pub lease_duration: Option<String>,
    pub renew_deadline: Option<String>,
    pub retry_period: Option<String>,
    pub resource_lock: Option<String>,
    pub resource_name: Option<String>,
    pub resource_namespace: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawClientConnection {
    pub kubeconfig: Option<String>,
    pub accept_content_types: Option<String>,
    pub content_type: Option<String>,
    pub qps: Option<f32>,
    pub burst: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawProfile {
    pub scheduler_name: Option<String>,
    /// v1 only.
    pub percentage_of_nodes_to_score: Option<i64>,
    pub plugins: Option<RawPlugins>,
    pub plugin_config: Option<Vec<RawPluginConfig>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPlugins {
    pub pre_enqueue: Option<RawPluginSet>,
    pub queue_sort: Option<RawPluginSet>,
    pub pre_filter: Option<RawPluginSet>,
    pub filter: Option<RawPluginSet>,
    pub post_filter: Option<RawPluginSet>,
    pub pre_score: Option<RawPluginSet>,
    pub score: Option<RawPluginSet>,
    pub reserve: Option<RawPluginSet>,
    pub permit: Option<RawPluginSet>,
    pub pre_bind: Option<RawPluginSet>,
    pub bind: Option<RawPluginSet>,
    pub post_bind: Option<RawPluginSet>,
    /// v1 and v1beta3 only.
    pub multi_point: Option<RawPluginSet>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPluginSet {
    pub enabled: Option<Vec<RawPlugin>>,
    pub disabled: Option<Vec<RawPlugin>>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPlugin {
    pub name: String,
    pub weight: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPluginConfig {
    pub name: String,
    pub args: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawExtender {
    pub url_prefix: Option<String>,
    pub filter_verb: Option<String>,
    pub preempt_verb: Option<String>,
    pub prioritize_verb: Option<String>,
    pub weight: Option<i64>,
    pub bind_verb: Option<String>,
    #[serde(rename = "enableHTTPS")]
    pub enable_https: Option<bool>,
    pub tls_config: Option<RawExtenderTls>,
    pub http_timeout: Option<String>,
    pub node_cache_capable: Option<bool>,
    pub managed_resources: Option<Vec<RawManagedResource>>,
    pub ignorable: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawExtenderTls {
    pub insecure: Option<bool>,
    pub server_name: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    #[serde(rename = "caFile")]
    pub ca_file: Option<String>,
    /// Base64 in the file, as Go's []byte.
    pub cert_data: Option<k8s_openapi::ByteString>,
    pub key_data: Option<k8s_openapi::ByteString>,
    #[serde(rename = "caData")]
    pub ca_data: Option<k8s_openapi::ByteString>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawManagedResource {
    pub name: String,
    pub ignored_by_scheduler: Option<bool>,
}

// pluginConfig args, per plugin.

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawFitArgs {
    pub ignored_resources: Option<Vec<String>>,
    pub ignored_resource_groups: Option<Vec<String>>,
    pub scoring_strategy: Option<RawScoringStrategy>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawScoringStrategy {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub resources: Option<Vec<RawResource>>,
    pub requested_to_capacity_ratio: Option<RawRtcr>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawResource {
    pub name: String,
    pub weight: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRtcr {
    pub shape: Option<Vec<RawShapePoint>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawShapePoint {
    pub utilization: i64,
    pub score: i64,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawBalancedArgs {
    pub resources: Option<Vec<RawResource>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawInterPodAffinityArgs {
    pub hard_pod_affinity_weight: Option<i64>,
    pub ignore_preferred_terms_of_existing_pods: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPodTopologySpreadArgs {
    pub default_constraints: Option<Vec<k8s_openapi::api::core::v1::TopologySpreadConstraint>>,
    pub defaulting_type: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawVolumeBindingArgs {
    pub bind_timeout_seconds: Option<i64>,
    pub shape: Option<Vec<RawShapePoint>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawNodeAffinityArgs {
    pub added_affinity: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDefaultPreemptionArgs {
    pub min_candidate_nodes_percentage: Option<i64>,
    pub min_candidate_nodes_absolute: Option<i64>,
}
