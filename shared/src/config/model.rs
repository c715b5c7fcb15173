//! One model for every KubeSchedulerConfiguration version, with defaults applied.

use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeAffinity, TopologySpreadConstraint};

pub use super::cluster_policies::{
    CapacityMode, ClusterCapacityArgs, ClusterCostArgs, ClusterTier, ClusterTiersArgs,
    ClusterWeightsArgs,
};

#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    pub(crate) api_version: String,
    pub parallelism: u32,
    /// None: adaptive, as kube-scheduler's 0.
    pub percentage_of_nodes_to_score: Option<u32>,
    pub pod_initial_backoff_seconds: u64,
    pub pod_max_backoff_seconds: u64,
    pub leader_election: LeaderElection,
    pub client_connection: ClientConnection,
    pub profiles: Vec<Profile>,
    pub extenders: Vec<Extender>,
    /// `enableProfiling` (kube-scheduler's default: true): the secure port serves
    /// `/debug/pprof/profile`.
    pub enable_profiling: bool,
    /// Things kept for compatibility that the user should know (legacy plugin names...).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeaderElection {
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub(crate) resource_lock: String,
    pub resource_name: String,
    pub resource_namespace: String,
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            resource_lock: "leases".into(),
            resource_name: "kube-scheduler".into(),
            resource_namespace: "kube-system".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    pub kubeconfig: Option<String>,
    pub qps: f32,
    pub burst: u32,
    /// The media type of requests where protobuf is served (kube-scheduler's default).
    pub content_type: String,
    /// The Accept header's media types, comma-separated; empty follows `content_type`.
    pub accept_content_types: String,
}

impl ClientConnection {
    /// The encoding the agent asks responses in (its lists and watches): the first of
    /// acceptContentTypes, as the API server picks the first it serves, else contentType.
    pub fn response_content_type(&self) -> &str {
        self.accept_content_types
            .split(',')
            .next()
            .filter(|t| !t.is_empty())
            .unwrap_or(&self.content_type)
    }
}

impl Default for ClientConnection {
    fn default() -> Self {
        ClientConnection {
            kubeconfig: None,
            qps: 50.0,
            burst: 100,
            content_type: "application/vnd.kubernetes.protobuf".into(),
            accept_content_types: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    pub name: String,
    pub weight: i32,
}

/// The plugins of one profile per extension point, in the order they run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plugins {
    pub(crate) pre_enqueue: Vec<PluginRef>,
    pub(crate) queue_sort: Vec<PluginRef>,
    pub(crate) pre_filter: Vec<PluginRef>,
    pub(crate) filter: Vec<PluginRef>,
    pub(crate) post_filter: Vec<PluginRef>,
    pub(crate) pre_score: Vec<PluginRef>,
    pub score: Vec<PluginRef>,
    pub(crate) reserve: Vec<PluginRef>,
    pub(crate) permit: Vec<PluginRef>,
    pub(crate) pre_bind: Vec<PluginRef>,
    pub(crate) bind: Vec<PluginRef>,
    pub(crate) post_bind: Vec<PluginRef>,
    pub(crate) placement_generate: Vec<PluginRef>,
    pub placement_score: Vec<PluginRef>,
    pub(crate) pod_group_post_filter: Vec<PluginRef>,
}

impl Plugins {
    pub fn get(&self, p: super::catalog::Point) -> &Vec<PluginRef> {
        use super::catalog::Point::*;
        match p {
            PreEnqueue => &self.pre_enqueue,
            QueueSort => &self.queue_sort,
            PreFilter => &self.pre_filter,
            Filter => &self.filter,
            PostFilter => &self.post_filter,
            PreScore => &self.pre_score,
            Score => &self.score,
            Reserve => &self.reserve,
            Permit => &self.permit,
            PreBind => &self.pre_bind,
            Bind => &self.bind,
            PostBind => &self.post_bind,
            PlacementGenerate => &self.placement_generate,
            PlacementScore => &self.placement_score,
            PodGroupPostFilter => &self.pod_group_post_filter,
        }
    }

    pub(crate) fn get_mut(&mut self, p: super::catalog::Point) -> &mut Vec<PluginRef> {
        use super::catalog::Point::*;
        match p {
            PreEnqueue => &mut self.pre_enqueue,
            QueueSort => &mut self.queue_sort,
            PreFilter => &mut self.pre_filter,
            Filter => &mut self.filter,
            PostFilter => &mut self.post_filter,
            PreScore => &mut self.pre_score,
            Score => &mut self.score,
            Reserve => &mut self.reserve,
            Permit => &mut self.permit,
            PreBind => &mut self.pre_bind,
            Bind => &mut self.bind,
            PostBind => &mut self.post_bind,
            PlacementGenerate => &mut self.placement_generate,
            PlacementScore => &mut self.placement_score,
            PodGroupPostFilter => &mut self.pod_group_post_filter,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub scheduler_name: String,
    pub percentage_of_nodes_to_score: Option<u32>,
    pub plugins: Plugins,
    pub args: PluginArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoringStrategyType {
    LeastAllocated,
    MostAllocated,
    RequestedToCapacityRatio,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceWeight {
    pub name: String,
    pub weight: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResourcesFitArgs {
    pub ignored_resources: Vec<String>,
    pub ignored_resource_groups: Vec<String>,
    pub strategy: ScoringStrategyType,
    pub resources: Vec<ResourceWeight>,
    /// (utilization, score) points for RequestedToCapacityRatio.
    pub shape: Vec<(i64, i64)>,
}

impl Default for NodeResourcesFitArgs {
    fn default() -> Self {
        NodeResourcesFitArgs {
            ignored_resources: Vec::new(),
            ignored_resource_groups: Vec::new(),
            strategy: ScoringStrategyType::LeastAllocated,
            resources: default_resources(),
            shape: Vec::new(),
        }
    }
}

pub(crate) fn default_resources() -> Vec<ResourceWeight> {
    vec![
        ResourceWeight {
            name: "cpu".into(),
            weight: 1,
        },
        ResourceWeight {
            name: "memory".into(),
            weight: 1,
        },
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultingType {
    System,
    List,
}

/// SetDefaults_VolumeBindingArgs' shape with StorageCapacityScoring on (v1.37).
pub const DEFAULT_VOLUME_BINDING_SHAPE: [(i64, i64); 2] = [(0, 10), (100, 0)];

/// kube-scheduler's DynamicResourcesFilterTimeoutDefault and BindingTimeoutDefault.
pub const DYNAMIC_RESOURCES_FILTER_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(10);
pub const DYNAMIC_RESOURCES_BINDING_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq)]
pub struct PluginArgs {
    pub node_resources_fit: NodeResourcesFitArgs,
    pub balanced_allocation_resources: Vec<ResourceWeight>,
    pub inter_pod_affinity_hard_weight: i32,
    pub ignore_preferred_terms_of_existing_pods: bool,
    pub pod_topology_spread_default_constraints: Vec<TopologySpreadConstraint>,
    pub pod_topology_spread_defaulting: DefaultingType,
    pub volume_binding_timeout_seconds: i64,
    pub leaf_volume_binding_timeout_seconds: i64,
    /// VolumeBindingArgs' `shape` (utilization, score 0..=10) as v1.37 defaults it
    /// (StorageCapacityScoring on): (0, 10), (100, 0) when not given or empty.
    pub volume_binding_shape: Vec<(i64, i64)>,
    pub leaf_volume_binding_shape: Vec<(i64, i64)>,
    pub node_affinity_added: Option<NodeAffinity>,
    /// DynamicResourcesArgs' filterTimeout (v1.37's default 10s; zero: none).
    pub dynamic_resources_filter_timeout: std::time::Duration,
    /// DynamicResourcesArgs' bindingTimeout (v1.37's default 600s).
    pub dynamic_resources_binding_timeout: std::time::Duration,
    pub min_candidate_nodes_percentage: u32,
    pub min_candidate_nodes_absolute: u32,
    pub cluster_weights: ClusterWeightsArgs,
    pub cluster_capacity: ClusterCapacityArgs,
    pub cluster_cost: ClusterCostArgs,
    pub cluster_tiers: ClusterTiersArgs,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            node_resources_fit: NodeResourcesFitArgs::default(),
            balanced_allocation_resources: default_resources(),
            inter_pod_affinity_hard_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
            pod_topology_spread_default_constraints: Vec::new(),
            pod_topology_spread_defaulting: DefaultingType::System,
            volume_binding_timeout_seconds: 600,
            leaf_volume_binding_timeout_seconds: 600,
            volume_binding_shape: DEFAULT_VOLUME_BINDING_SHAPE.to_vec(),
            leaf_volume_binding_shape: DEFAULT_VOLUME_BINDING_SHAPE.to_vec(),
            node_affinity_added: None,
            dynamic_resources_filter_timeout: DYNAMIC_RESOURCES_FILTER_TIMEOUT,
            dynamic_resources_binding_timeout: DYNAMIC_RESOURCES_BINDING_TIMEOUT,
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
            cluster_weights: ClusterWeightsArgs::default(),
            cluster_capacity: ClusterCapacityArgs::default(),
            cluster_cost: ClusterCostArgs::default(),
            cluster_tiers: ClusterTiersArgs::default(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtenderTls {
    pub insecure: bool,
    pub server_name: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub ca_file: Option<String>,
    pub cert_data: Option<Vec<u8>>,
    pub key_data: Option<Vec<u8>>,
    pub ca_data: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Extender {
    pub url_prefix: String,
    pub filter_verb: Option<String>,
    pub preempt_verb: Option<String>,
    pub prioritize_verb: Option<String>,
    pub bind_verb: Option<String>,
    pub weight: i64,
    pub enable_https: bool,
    pub tls_config: Option<ExtenderTls>,
    pub http_timeout: Duration,
    pub node_cache_capable: bool,
    pub managed_resources: Vec<(String, bool)>,
    pub ignorable: bool,
}
