//! The file as written: every field of every supported version, unknown fields refused.

use serde::Deserialize;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawConfig {
    pub(crate) api_version: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) parallelism: Option<i64>,
    pub(crate) percentage_of_nodes_to_score: Option<i64>,
    pub(crate) pod_initial_backoff_seconds: Option<i64>,
    pub(crate) pod_max_backoff_seconds: Option<i64>,
    pub(crate) leader_election: Option<RawLeaderElection>,
    pub(crate) client_connection: Option<RawClientConnection>,
    pub(crate) profiles: Option<Vec<RawProfile>>,
    pub(crate) extenders: Option<Vec<RawExtender>>,
    pub(crate) enable_profiling: Option<bool>,
    // Accepted for compatibility and ignored: Go's block and mutex profiles have no
    // counterpart in a Rust process.
    #[allow(dead_code)]
    pub(crate) enable_contention_profiling: Option<bool>,
    /// v1 only.
    pub(crate) delay_cache_until_active: Option<bool>,
    /// v1beta1 and v1beta2 only.
    pub(crate) healthz_bind_address: Option<String>,
    pub(crate) metrics_bind_address: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawLeaderElection {
    pub(crate) leader_elect: Option<bool>,
    pub(crate) lease_duration: Option<String>,
    pub(crate) renew_deadline: Option<String>,
    pub(crate) retry_period: Option<String>,
    pub(crate) resource_lock: Option<String>,
    pub(crate) resource_name: Option<String>,
    pub(crate) resource_namespace: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawClientConnection {
    pub(crate) kubeconfig: Option<String>,
    pub(crate) accept_content_types: Option<String>,
    pub(crate) content_type: Option<String>,
    pub(crate) qps: Option<f32>,
    pub(crate) burst: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawProfile {
    pub(crate) scheduler_name: Option<String>,
    /// v1 only.
    pub(crate) percentage_of_nodes_to_score: Option<i64>,
    pub(crate) plugins: Option<RawPlugins>,
    pub(crate) plugin_config: Option<Vec<RawPluginConfig>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPlugins {
    pub(crate) pre_enqueue: Option<RawPluginSet>,
    pub(crate) queue_sort: Option<RawPluginSet>,
    pub(crate) pre_filter: Option<RawPluginSet>,
    pub(crate) filter: Option<RawPluginSet>,
    pub(crate) post_filter: Option<RawPluginSet>,
    pub(crate) pre_score: Option<RawPluginSet>,
    pub(crate) score: Option<RawPluginSet>,
    pub(crate) reserve: Option<RawPluginSet>,
    pub(crate) permit: Option<RawPluginSet>,
    pub(crate) pre_bind: Option<RawPluginSet>,
    pub(crate) bind: Option<RawPluginSet>,
    pub(crate) post_bind: Option<RawPluginSet>,
    /// v1 and v1beta3 only.
    pub(crate) multi_point: Option<RawPluginSet>,
    /// v1 only (kube-scheduler v1.37's pod group cycle).
    pub(crate) placement_generate: Option<RawPluginSet>,
    pub(crate) placement_score: Option<RawPluginSet>,
    pub(crate) pod_group_post_filter: Option<RawPluginSet>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPluginSet {
    pub(crate) enabled: Option<Vec<RawPlugin>>,
    pub(crate) disabled: Option<Vec<RawPlugin>>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPlugin {
    pub(crate) name: String,
    pub(crate) weight: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPluginConfig {
    pub(crate) name: String,
    pub(crate) args: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawExtender {
    pub(crate) url_prefix: Option<String>,
    pub(crate) filter_verb: Option<String>,
    pub(crate) preempt_verb: Option<String>,
    pub(crate) prioritize_verb: Option<String>,
    pub(crate) weight: Option<i64>,
    pub(crate) bind_verb: Option<String>,
    #[serde(rename = "enableHTTPS")]
    pub(crate) enable_https: Option<bool>,
    pub(crate) tls_config: Option<RawExtenderTls>,
    pub(crate) http_timeout: Option<String>,
    pub(crate) node_cache_capable: Option<bool>,
    pub(crate) managed_resources: Option<Vec<RawManagedResource>>,
    pub(crate) ignorable: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawExtenderTls {
    pub(crate) insecure: Option<bool>,
    pub(crate) server_name: Option<String>,
    pub(crate) cert_file: Option<String>,
    pub(crate) key_file: Option<String>,
    #[serde(rename = "caFile")]
    pub(crate) ca_file: Option<String>,
    /// Base64 in the file, as Go's []byte.
    pub(crate) cert_data: Option<k8s_openapi::ByteString>,
    pub(crate) key_data: Option<k8s_openapi::ByteString>,
    #[serde(rename = "caData")]
    pub(crate) ca_data: Option<k8s_openapi::ByteString>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawManagedResource {
    pub(crate) name: String,
    pub(crate) ignored_by_scheduler: Option<bool>,
}

// pluginConfig args, per plugin.

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawFitArgs {
    pub(crate) ignored_resources: Option<Vec<String>>,
    pub(crate) ignored_resource_groups: Option<Vec<String>>,
    pub(crate) scoring_strategy: Option<RawScoringStrategy>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawScoringStrategy {
    #[serde(rename = "type")]
    pub(crate) type_: Option<String>,
    pub(crate) resources: Option<Vec<RawResource>>,
    pub(crate) requested_to_capacity_ratio: Option<RawRtcr>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawResource {
    pub(crate) name: String,
    pub(crate) weight: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRtcr {
    pub(crate) shape: Option<Vec<RawShapePoint>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawShapePoint {
    pub(crate) utilization: i64,
    pub(crate) score: i64,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawBalancedArgs {
    pub(crate) resources: Option<Vec<RawResource>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawInterPodAffinityArgs {
    pub(crate) hard_pod_affinity_weight: Option<i64>,
    pub(crate) ignore_preferred_terms_of_existing_pods: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPodTopologySpreadArgs {
    pub(crate) default_constraints:
        Option<Vec<k8s_openapi::api::core::v1::TopologySpreadConstraint>>,
    pub(crate) defaulting_type: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawVolumeBindingArgs {
    pub(crate) bind_timeout_seconds: Option<i64>,
    pub(crate) shape: Option<Vec<RawShapePoint>>,
}

/// DynamicResourcesArgs: Go durations ("10s").
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDynamicResourcesArgs {
    pub(crate) filter_timeout: Option<String>,
    pub(crate) binding_timeout: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawNodeAffinityArgs {
    pub(crate) added_affinity: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDefaultPreemptionArgs {
    pub(crate) min_candidate_nodes_percentage: Option<i64>,
    pub(crate) min_candidate_nodes_absolute: Option<i64>,
}
