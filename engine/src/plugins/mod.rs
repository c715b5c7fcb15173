//! In-tree plugins, one file each, named like kube-scheduler's.

pub(crate) mod cluster_capacity;
pub(crate) mod cluster_cost;
pub(crate) mod cluster_tiers;
pub(crate) mod cluster_weights;
pub(crate) mod default_binder;
pub(crate) mod default_preemption;
pub(crate) mod dynamic_resources;
pub(crate) mod gang_scheduling;
pub mod helper;
pub(crate) mod image_locality;
pub(crate) mod inter_pod_affinity;
#[cfg(test)]
mod kept_counts_tests;
pub mod leaf_node_fit;
pub(crate) mod leaf_node_taint_toleration;
pub(crate) mod leaf_node_volume_binding;
pub(crate) mod node_affinity;
pub(crate) mod node_declared_features;
pub(crate) mod node_name;
pub(crate) mod node_ports;
pub(crate) mod node_resources_balanced_allocation;
pub(crate) mod node_resources_fit;
pub(crate) mod node_unschedulable;
pub(crate) mod node_volume_limits;
pub(crate) mod placement_policy;
pub(crate) mod pod_group_pods_count;
pub(crate) mod pod_topology_spread;
pub(crate) mod priority_sort;
pub(crate) mod scheduling_gates;
pub(crate) mod taint_toleration;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub(crate) mod topology_placement_generator;
pub(crate) mod volume_binding;
pub(crate) mod volume_restrictions;
pub(crate) mod volume_zone;

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::Plugin;

/// Per-plugin arguments of one profile (pluginConfig), kube-scheduler's defaults when
/// not given.
#[derive(Debug, Clone)]
pub struct PluginArgs {
    pub(crate) fit: node_resources_fit::FitArgs,
    /// NodeResourcesBalancedAllocation's resources; cpu and memory when not given.
    pub(crate) balanced_resources: Option<Vec<String>>,
    pub(crate) node_affinity_added: Option<k8s_openapi::api::core::v1::NodeAffinity>,
    pub(crate) preemption: default_preemption::PreemptionArgs,
    pub(crate) inter_pod_affinity: inter_pod_affinity::InterPodAffinityArgs,
    pub(crate) pod_topology_spread: pod_topology_spread::PodTopologySpreadArgs,
    pub(crate) dynamic_resources: dynamic_resources::DynamicResourcesArgs,
    /// VolumeBinding's and LeafNodeVolumeBinding's bindTimeoutSeconds.
    pub(crate) volume_bind_timeout_seconds: i64,
    pub(crate) leaf_volume_bind_timeout_seconds: i64,
    /// VolumeBindingArgs' `shape` (scores 0..=10), for VolumeBinding's and the leaf-aware one's.
    pub(crate) volume_binding_shape: Vec<(i64, i64)>,
    pub(crate) leaf_volume_binding_shape: Vec<(i64, i64)>,
    pub(crate) cluster_weights: mcsched_shared::config::ClusterWeightsArgs,
    pub(crate) cluster_capacity: mcsched_shared::config::ClusterCapacityArgs,
    pub(crate) cluster_cost: mcsched_shared::config::ClusterCostArgs,
    pub(crate) cluster_tiers: mcsched_shared::config::ClusterTiersArgs,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            fit: Default::default(),
            balanced_resources: None,
            node_affinity_added: None,
            preemption: Default::default(),
            inter_pod_affinity: Default::default(),
            pod_topology_spread: Default::default(),
            dynamic_resources: Default::default(),
            // kube-scheduler's DefaultBindTimeoutSeconds.
            volume_bind_timeout_seconds: 600,
            leaf_volume_bind_timeout_seconds: 600,
            volume_binding_shape: volume_binding::DEFAULT_SHAPE.to_vec(),
            leaf_volume_binding_shape: volume_binding::DEFAULT_SHAPE.to_vec(),
            cluster_weights: Default::default(),
            cluster_capacity: Default::default(),
            cluster_cost: Default::default(),
            cluster_tiers: Default::default(),
        }
    }
}

/// Every plugin this agent implements, built with one profile's arguments, without
/// leaves (every virtual node is a leaf not connected).
pub(crate) fn registry(args: &PluginArgs) -> HashMap<String, Arc<dyn Plugin>> {
    registry_with_leaves(args, Arc::new(crate::leaf::cycle::NoLeaves))
}

/// Every plugin this agent implements; LeafNodeFit reads `leaves`. No PodGroups are known.
pub fn registry_with_leaves(
    args: &PluginArgs,
    leaves: Arc<dyn crate::leaf::cycle::LeafSnapshots>,
) -> HashMap<String, Arc<dyn Plugin>> {
    registry_with(
        args,
        leaves,
        crate::pod_groups::PodGroups::new(),
        crate::dra_state::ResourceClaims::new(),
    )
}

/// Every plugin this agent implements; LeafNodeFit reads `leaves`, GangScheduling `groups`,
/// DynamicResources `claims`.
pub fn registry_with(
    args: &PluginArgs,
    leaves: Arc<dyn crate::leaf::cycle::LeafSnapshots>,
    groups: Arc<crate::pod_groups::PodGroups>,
    claims: Arc<crate::dra_state::ResourceClaims>,
) -> HashMap<String, Arc<dyn Plugin>> {
    let fit: Arc<dyn Plugin> =
        Arc::new(node_resources_fit::NodeResourcesFit::new(args.fit.clone()));
    let plugins: Vec<Arc<dyn Plugin>> = vec![
        Arc::new(scheduling_gates::SchedulingGates),
        Arc::new(priority_sort::PrioritySort),
        Arc::new(node_name::NodeName),
        Arc::new(node_unschedulable::NodeUnschedulable),
        Arc::new(taint_toleration::TaintToleration),
        Arc::new(leaf_node_taint_toleration::LeafNodeTaintToleration),
        Arc::new(volume_binding::VolumeBinding::with_shape(
            args.volume_bind_timeout_seconds,
            &args.volume_binding_shape,
        )),
        // Host nodes judged by a VolumeBinding of its own, with its own bind timeout.
        Arc::new(leaf_node_volume_binding::LeafNodeVolumeBinding::new(Some(
            Arc::new(volume_binding::VolumeBinding::with_shape(
                args.leaf_volume_bind_timeout_seconds,
                &args.leaf_volume_binding_shape,
            )),
        ))),
        Arc::new(volume_restrictions::VolumeRestrictions),
        Arc::new(volume_zone::VolumeZone),
        Arc::new(node_volume_limits::NodeVolumeLimits::default()),
        Arc::new(node_affinity::NodeAffinity::new(
            args.node_affinity_added.clone(),
        )),
        Arc::new(node_ports::NodePorts),
        fit.clone(),
        Arc::new(
            leaf_node_fit::LeafNodeFit::new(Some(fit), leaves)
                .with_devices(claims.clone(), args.dynamic_resources),
        ),
        Arc::new(match &args.balanced_resources {
            Some(r) => node_resources_balanced_allocation::BalancedAllocation::new(r.clone()),
            None => node_resources_balanced_allocation::BalancedAllocation::default(),
        }),
        Arc::new(image_locality::ImageLocality),
        Arc::new(pod_topology_spread::PodTopologySpread::new(
            args.pod_topology_spread.clone(),
        )),
        Arc::new(inter_pod_affinity::InterPodAffinity::new(
            args.inter_pod_affinity,
        )),
        Arc::new(default_binder::DefaultBinder),
        Arc::new(node_declared_features::NodeDeclaredFeatures::default()),
        Arc::new(dynamic_resources::DynamicResources::new(
            args.dynamic_resources,
            claims,
        )),
        Arc::new(default_preemption::DefaultPreemption::new(
            args.preemption,
            groups.clone(),
        )),
        Arc::new(cluster_weights::ClusterWeights::new(&args.cluster_weights)),
        Arc::new(cluster_capacity::ClusterCapacity::new(
            &args.cluster_capacity,
        )),
        Arc::new(cluster_cost::ClusterCost::new(&args.cluster_cost)),
        Arc::new(cluster_tiers::ClusterTiers::new(&args.cluster_tiers)),
        Arc::new(placement_policy::PlacementPolicy),
        Arc::new(gang_scheduling::GangScheduling::new(groups)),
        Arc::new(topology_placement_generator::TopologyPlacementGenerator),
        Arc::new(pod_group_pods_count::PodGroupPodsCount),
    ];
    plugins
        .into_iter()
        .map(|p| (p.name().to_string(), p))
        .collect()
}

/// Every plugin with kube-scheduler's default arguments.
pub fn default_registry() -> HashMap<String, Arc<dyn Plugin>> {
    registry(&PluginArgs::default())
}
